//! A cluster bug's moments: its run held at a point ([`pause`]), continuations from there with
//! fresh randomness counted by how they end ([`branches`]), and the search for the moment from
//! which the failure is all but certain ([`explain`], a pure plan over an [`Estimator`], tested
//! over fakes).
//!
//! A branch's randomness is a function of the moment reached (its decisions taken) and its
//! number alone ([`branch_seed`]), so the counts are the same in every process, and the same
//! for a moment asked for by time or by decision; a scripted fault (a
//! schedule's, a minimized bug's) still comes at its time in every branch: it is the input.

use std::collections::BTreeMap;

use deja_cluster::moment::{At, Pause};
use serde::Serialize;

use super::{configured, outcome, ClusterInput, ClusterTarget};
use crate::signature::FailureSignature;
use crate::ExploreError;

/// The run of `input` on `target`, held at `at` (or its report, if it ended first).
pub fn pause(target: &ClusterTarget, input: &ClusterInput, at: At) -> Result<Pause, ExploreError> {
    let (cfg, steering) = configured(target, input);
    Ok(deja_cluster::moment::pause(cfg, &steering, at)?)
}

/// The seed of branch `k` from moment `at`.
pub fn branch_seed(at: At, k: u64) -> u64 {
    let mut h = blake3::Hasher::new();
    h.update(b"deja 2026 moment branch");
    match at {
        At::Time(t) => h.update(b"time").update(&t.to_le_bytes()),
        At::Decision(d) => h.update(b"decision").update(&d.to_le_bytes()),
    };
    h.update(&k.to_le_bytes());
    let mut w = [0u8; 8];
    w.copy_from_slice(&h.finalize().as_bytes()[..8]);
    u64::from_le_bytes(w)
}

/// How the branches from one moment ended.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Branches {
    /// Where they began.
    pub decision: u64,
    /// The cluster's time there (virtual ns).
    pub time_ns: u64,
    /// Branches run.
    pub runs: u64,
    /// Branches that failed as the bug did.
    pub same: u64,
    /// Branches that failed otherwise, by their failure's words.
    pub other: BTreeMap<String, u64>,
}

impl Branches {
    /// The share that failed as the bug did.
    pub fn p(&self) -> f64 {
        self.same as f64 / self.runs.max(1) as f64
    }
}

/// `n` branches of the run of `input` from `at`, each with its own fresh randomness, on up to
/// `jobs` threads; counted against the bug's `signature`. The counts do not depend on `jobs`.
pub fn branches(
    target: &ClusterTarget,
    input: &ClusterInput,
    signature: &FailureSignature,
    at: At,
    n: u64,
    jobs: usize,
) -> Result<Branches, ExploreError> {
    let next = std::sync::atomic::AtomicU64::new(0);
    let ends: Vec<Result<BranchEnd, ExploreError>> = std::thread::scope(|s| {
        let lanes: Vec<_> = (0..jobs.clamp(1, n.max(1) as usize))
            .map(|_| {
                s.spawn(|| {
                    let mut out = Vec::new();
                    loop {
                        let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if k >= n {
                            break out;
                        }
                        out.push(branch(target, input, at, k));
                    }
                })
            })
            .collect();
        lanes.into_iter().flat_map(|l| l.join().unwrap_or_else(|e| std::panic::resume_unwind(e))).collect()
    });
    let mut b = Branches { runs: n, ..Branches::default() };
    for end in ends {
        let (decision, time_ns, failure) = end?;
        (b.decision, b.time_ns) = (decision, time_ns);
        match failure {
            Some(f) if f == *signature => b.same += 1,
            Some(f) => *b.other.entry(f.to_string()).or_default() += 1,
            None => {}
        }
    }
    Ok(b)
}

/// Where a branch began (decisions, time) and how it failed, if it did.
type BranchEnd = (u64, u64, Option<FailureSignature>);

/// Branch `k` from `at`.
fn branch(target: &ClusterTarget, input: &ClusterInput, at: At, k: u64) -> Result<BranchEnd, ExploreError> {
    match pause(target, input, at)? {
        Pause::At(p) => {
            // The seed follows the moment reached, however it was asked for.
            let m = p.moment();
            let report = p.branch(branch_seed(At::Decision(m.decisions), k))?;
            Ok((m.decisions, m.time_ns, outcome(report).failure))
        }
        Pause::Ended(r) => Err(ExploreError::MomentAfterEnd {
            problem: format!(
                "the run ended ({:?}) at {:.3} ms, before the moment {at:?}",
                r.outcome,
                r.virtual_time_ns as f64 / 1e6
            ),
        }),
    }
}

/// Estimates, from the moment with `decision` decisions taken, the share of branches that fail
/// as the bug did.
pub trait Estimator {
    /// `n` branches from there.
    fn estimate(&mut self, decision: u64, n: u64) -> Result<Branches, ExploreError>;
}

/// When the bug became inevitable.
#[derive(Debug, Clone, Serialize)]
pub struct Explanation {
    /// Every moment estimated, by decision.
    pub curve: Vec<Branches>,
    /// The share above which the failure counts as inevitable.
    pub threshold: f64,
    /// The first moment from which every later one estimated is at or above the threshold, and
    /// the last one before it that is below (`None`: from the first).
    pub inevitable: Option<(Branches, Option<Branches>)>,
    /// Branches run in all.
    pub runs: u64,
}

/// The share of branches at or above which the failure counts as inevitable.
pub const INEVITABLE: f64 = 0.9;

/// The plan of `deja explain`: `moments` moments spread evenly over the run's `decisions`
/// (the first at 0, the last at `decisions`), `n` branches from each; then, between the last
/// moment below [`INEVITABLE`] and the first of the run of moments at or above it to the end,
/// up to `refine` bisections by decision.
pub fn explain(
    decisions: u64,
    moments: u64,
    n: u64,
    refine: u32,
    est: &mut dyn Estimator,
) -> Result<Explanation, ExploreError> {
    let mut points: Vec<u64> = (0..=moments.max(1)).map(|i| decisions * i / moments.max(1)).collect();
    points.dedup();
    let mut curve = Vec::new();
    for d in points {
        curve.push(est.estimate(d, n)?);
    }
    let first_above = |c: &[Branches]| {
        let mut j = c.len();
        while j > 0 && c[j - 1].p() >= INEVITABLE {
            j -= 1;
        }
        j
    };
    let mut j = first_above(&curve);
    if j > 0 && j < curve.len() {
        // Bisect by the decisions asked for; a moment asked for inside a step is that step's
        // end (its estimate the same), and is kept once.
        let (mut lo, mut hi) = (curve[j - 1].decision, curve[j].decision);
        for _ in 0..refine {
            let mid = lo + (hi - lo) / 2;
            if mid == lo {
                break;
            }
            let b = est.estimate(mid, n)?;
            if b.p() >= INEVITABLE {
                hi = mid;
            } else {
                lo = mid;
            }
            if !curve.iter().any(|c| c.decision == b.decision) {
                curve.push(b);
            }
        }
        curve.sort_by_key(|b| b.decision);
        // A refinement may show a later moment below the line: the run of moments at or above
        // it to the end starts after it.
        j = first_above(&curve);
    }
    let runs = curve.iter().map(|b| b.runs).sum();
    let inevitable = (j < curve.len()).then(|| (curve[j].clone(), j.checked_sub(1).map(|i| curve[i].clone())));
    Ok(Explanation { curve, threshold: INEVITABLE, inevitable, runs })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run whose failure becomes certain at decision `at` and has probability `before` until
    /// then: each moment's branches fail as the bug did in that share, exactly.
    struct Step {
        at: u64,
        before: f64,
        asked: Vec<u64>,
    }

    impl Estimator for Step {
        fn estimate(&mut self, decision: u64, n: u64) -> Result<Branches, ExploreError> {
            self.asked.push(decision);
            let p = if decision >= self.at { 1.0 } else { self.before };
            let same = (p * n as f64).round() as u64;
            let mut other = BTreeMap::new();
            if same < n {
                other.insert("passed".to_string(), n - same);
            }
            Ok(Branches { decision, time_ns: decision * 1000, runs: n, same, other })
        }
    }

    #[test]
    fn the_moment_the_failure_became_certain_is_found_by_bisection() {
        let mut s = Step { at: 37, before: 0.25, asked: Vec::new() };
        let e = explain(100, 4, 8, 8, &mut s).unwrap();
        let (first, before) = e.inevitable.clone().unwrap();
        assert_eq!(first.decision, 37, "{e:?}");
        assert_eq!(before.map(|b| b.decision), Some(36));
        assert_eq!(&s.asked[..5], &[0, 25, 50, 75, 100]);
        assert_eq!(e.runs, 8 * s.asked.len() as u64);
        assert!(e.curve.windows(2).all(|w| w[0].decision < w[1].decision));
    }

    #[test]
    fn a_failure_that_never_becomes_likely_is_never_called_inevitable() {
        let mut s = Step { at: u64::MAX, before: 0.5, asked: Vec::new() };
        let e = explain(40, 4, 4, 8, &mut s).unwrap();
        assert!(e.inevitable.is_none(), "{e:?}");
        assert_eq!(s.asked, [0, 10, 20, 30, 40], "no refinement without a moment above the line");
    }

    #[test]
    fn a_failure_certain_from_the_start_names_the_first_moment() {
        let mut s = Step { at: 0, before: 0.0, asked: Vec::new() };
        let e = explain(12, 3, 2, 8, &mut s).unwrap();
        let (first, before) = e.inevitable.unwrap();
        assert_eq!((first.decision, before), (0, None));
    }

    #[test]
    fn a_dip_below_the_line_after_it_moves_the_moment_later() {
        // Certain from 10, except a moment at 20 whose branches escaped.
        struct Dip;
        impl Estimator for Dip {
            fn estimate(&mut self, decision: u64, n: u64) -> Result<Branches, ExploreError> {
                let same = if decision >= 10 && decision != 20 { n } else { 0 };
                Ok(Branches { decision, time_ns: 0, runs: n, same, other: BTreeMap::new() })
            }
        }
        let e = explain(40, 4, 4, 0, &mut Dip).unwrap();
        assert_eq!(e.inevitable.unwrap().0.decision, 30);
    }

    #[test]
    fn branch_seeds_are_a_function_of_the_moment_and_the_number() {
        assert_eq!(branch_seed(At::Decision(5), 1), branch_seed(At::Decision(5), 1));
        assert_ne!(branch_seed(At::Decision(5), 1), branch_seed(At::Decision(5), 2));
        assert_ne!(branch_seed(At::Decision(5), 1), branch_seed(At::Time(5), 1));
    }
}
