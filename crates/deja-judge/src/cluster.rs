//! `deja check` for clusters: a cluster bug file judged against candidate builds of its nodes.
//!
//! The failure is replayed **by meaning**: its faults as a schedule of partitions, heals, kills,
//! restarts, pauses and clock faults at the same virtual times, never as positions in the
//! decision log, so a candidate that sends one more message does not shift them. Message fates
//! (latency, loss, reordering, duplication) and scheduling ties are keyed by meaning
//! ([`deja_cluster::Fates::Meaning`]): each is a function of the world's seed, the message's
//! connection and its place in that connection's order, so one more message on one connection
//! leaves every other connection's fates as they were. The steps, each recorded in the
//! certificate:
//!
//! 1. **reproduce the bug on the base**: the bug file's own input fails the same way;
//! 2. **the faults by meaning fail the base**: its schedule alone, in the bug's world, fails the
//!    same way. If not, the failure depends on decisions beyond its faults' times and cannot be
//!    judged by meaning: `EVIDENCE_INCOMPLETE`;
//! 3. **no-fault control on the base**: without faults the base holds (else
//!    `NOT_FAULT_INDUCED`);
//! 4. **the candidate runs**: it can be loaded and holds without faults (else `NEW_FAILURE`);
//! 5. **the candidate in fresh worlds**: in the bug's world and `worlds - 1` others, the base
//!    fails under the schedule (a world where it does not says nothing and is set aside) and
//!    the candidate must hold, with every scheduled fault in its ledger. A candidate run that
//!    ended before its faults came lost track of the failure: `EVIDENCE_INCOMPLETE`;
//! 6. **sweep the candidate**: the schedule shifted as a whole and fault by fault, earlier and
//!    later; the candidate must hold under each.
//!
//! A failure with the bug's signature is `STILL_REPRODUCES`, another one `NEW_FAILURE`.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use snafu::{ResultExt, Snafu};

use deja_cluster::config::ScheduledFault;
use deja_cluster::Fates;
use deja_explore::cluster::{describe_fault, run_cluster_input, ClusterOutcome};
use deja_explore::{ClusterBug, ClusterInput, ClusterTarget, FailureSignature};

use crate::certificate::{Certificate, CheckStatus};
use crate::judge::Verdict;

/// The candidate: the nodes it replaces (binary, and from a candidate cluster file their
/// arguments, environment and files too), or why it could not be had.
pub type Candidate = Result<Vec<deja_cluster::config::NodeConfig>, CandidateError>;

/// Why a candidate's nodes could not be had.
#[derive(Debug, Clone, Snafu)]
pub enum CandidateError {
    /// It names a node the cluster does not have.
    #[snafu(display("the candidate names node {node}, which the cluster does not have ({known})"))]
    UnknownNode {
        /// The node it names.
        node: String,
        /// The cluster's nodes.
        known: String,
    },
    /// `--candidate` is neither `NODE=PATH,...` nor a cluster file.
    #[snafu(display("--candidate {spec:?}: give NODE=PATH,NODE=PATH or a cluster file"))]
    Shape {
        /// What was given.
        spec: String,
    },
    /// The candidate's cluster file cannot be used.
    #[snafu(display("the candidate: {source}"))]
    File {
        /// Why.
        source: Arc<deja_cluster::ConfigError>,
    },
    /// A node's binary cannot be read.
    #[snafu(display("the candidate for {node}, {path}: {source}"))]
    Binary {
        /// The node.
        node: String,
        /// The binary.
        path: String,
        /// Why.
        source: Arc<std::io::Error>,
    },
}

/// Everything a cluster check needs.
#[derive(Debug, Clone)]
pub struct ClusterCheck {
    /// The bug file.
    pub bug: ClusterBug,
    /// The base cluster (the one the bug was found on).
    pub base: ClusterTarget,
    /// The candidate's nodes; the other nodes keep the base's.
    pub candidate: Candidate,
    /// Worlds the candidate must hold in (the bug's and `worlds - 1` others).
    pub worlds: u32,
}

/// A cluster check's verdict and certificate.
#[derive(Debug, Clone)]
pub struct ClusterJudgement {
    /// The verdict.
    pub verdict: Verdict,
    /// The certificate.
    pub certificate: Certificate,
}

/// Parses `--candidate r1=PATH,r2=PATH` (the nodes' patched binaries, with the base's
/// arguments) or `--candidate FILE.toml` (a cluster file whose nodes are the candidate's
/// deployment: binaries, arguments, environment and files) into the candidate's nodes.
pub fn candidate_nodes(spec: &str, base: &ClusterTarget) -> Candidate {
    let node_of = |node: &str| {
        base.cfg.nodes.iter().find(|n| n.name == node).ok_or_else(|| CandidateError::UnknownNode {
            node: node.to_string(),
            known: base.cfg.nodes.iter().map(|n| n.name.as_str()).collect::<Vec<_>>().join(", "),
        })
    };
    if spec.ends_with(".toml") {
        let cfg = deja_cluster::ClusterConfig::load(Path::new(spec)).map_err(Arc::new).context(FileSnafu)?;
        for n in &cfg.nodes {
            node_of(&n.name)?;
        }
        return Ok(cfg.nodes);
    }
    let mut out = Vec::new();
    for part in spec.split(',') {
        let Some((node, path)) = part.split_once('=').filter(|(n, p)| !n.is_empty() && !p.is_empty()) else {
            return ShapeSnafu { spec }.fail();
        };
        let mut n = node_of(node)?.clone();
        n.image = std::fs::read(path).map_err(Arc::new).context(BinarySnafu { node, path })?;
        out.push(n);
    }
    Ok(out)
}

/// The base with the candidate's nodes in place.
fn candidate_target(
    base: &ClusterTarget,
    nodes: &[deja_cluster::config::NodeConfig],
) -> Result<ClusterTarget, CandidateError> {
    let mut t = base.clone();
    let known = || base.cfg.nodes.iter().map(|n| n.name.as_str()).collect::<Vec<_>>().join(", ");
    for n in nodes {
        let slot = t
            .cfg
            .nodes
            .iter_mut()
            .find(|m| m.name == n.name)
            .ok_or_else(|| CandidateError::UnknownNode { node: n.name.clone(), known: known() })?;
        *slot = n.clone();
        t.cfg.binary_hashes.insert(n.name.clone(), blake3::hash(&n.image).to_hex().to_string());
    }
    Ok(t)
}

fn world_seed(bug: &ClusterBug, k: u32) -> Option<u64> {
    if k == 0 {
        return bug.input.reseed;
    }
    let h = blake3::hash(format!("deja cluster check world {} {k}", bug.id).as_bytes());
    Some(u64::from_le_bytes(h.as_bytes()[..8].try_into().unwrap_or_default()))
}

/// The bug's input with `schedule` in place of its faults, in world `k`.
fn by_meaning(bug: &ClusterBug, schedule: &[ScheduledFault], k: u32) -> ClusterInput {
    ClusterInput {
        overrides: BTreeMap::new(),
        reseed: world_seed(bug, k),
        schedule: Some(schedule.to_vec()),
        fates: Fates::Meaning,
        ..bug.input.clone()
    }
}

/// The schedule shifted by `delta_ms` (only the faults `which` selects), clipped at 0.
fn shifted(schedule: &[ScheduledFault], delta_ms: i64, which: Option<usize>) -> Vec<ScheduledFault> {
    schedule
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let mut f = f.clone();
            if which.is_none_or(|w| w == i) {
                f.at_ms = f.at_ms.saturating_add_signed(delta_ms);
            }
            f
        })
        .collect()
}

/// The verdict of a candidate that failed with `failure`: the bug's own signature or another.
fn failing(failure: &FailureSignature, signature: &FailureSignature) -> Verdict {
    if failure == signature {
        Verdict::StillReproduces
    } else {
        Verdict::NewFailure
    }
}

/// The first scheduled fault that does not show in the run's ledger (at its time, as the same
/// fault): the run ended before it came.
fn unreached<'a>(out: &ClusterOutcome, schedule: &'a [ScheduledFault]) -> Option<&'a ScheduledFault> {
    schedule.iter().find(|f| !out.report.faults.iter().any(|e| e.scripted.as_ref() == Some(*f)))
}

/// Runs the whole check.
pub fn check_cluster(c: &ClusterCheck) -> ClusterJudgement {
    let names = [
        "reproduce the bug on the base",
        "the faults by meaning fail the base",
        "no-fault control on the base",
        "the candidate runs",
        "the candidate in fresh worlds",
        "sweep the candidate: the schedule shifted, as a whole and fault by fault",
    ];
    let bug = &c.bug;
    let cand_hash = match &c.candidate {
        Ok(nodes) => {
            let mut h = blake3::Hasher::new();
            for n in nodes {
                h.update(n.name.as_bytes());
                h.update(blake3::hash(&n.image).as_bytes());
                h.update(serde_json::to_string(&(&n.args, &n.env)).unwrap_or_default().as_bytes());
            }
            h.finalize().to_hex().to_string()
        }
        Err(_) => String::new(),
    };
    let mut cert = Certificate::new(&bug.id, &c.base.file_blake3, &cand_hash);
    cert.host = deja_vmm::identity::host().ok().map(|h| h.fingerprint.clone());
    let mut steps: Vec<(&str, CheckStatus, String, Vec<String>)> = Vec::new();
    let mut timeline = String::new();
    let schedule: Vec<ScheduledFault> = match &bug.input.schedule {
        Some(s) => s.clone(),
        None => bug.faults.iter().filter_map(|f| f.scripted.clone()).collect(),
    };
    let sig = &bug.signature;
    let run = |t: &ClusterTarget, input: &ClusterInput| run_cluster_input(t, input, &mut |_, _, _| {});
    let verdict = (|| -> Verdict {
        // 1. The bug, exactly.
        match run(&c.base, &bug.input) {
            Ok(o) if o.failure.as_ref() == Some(sig) => {
                steps.push((names[0], CheckStatus::Passed, format!("reproduced: {sig}"), vec![o.report.digest]));
            }
            Ok(o) => {
                let got = o.failure.map_or_else(|| "no failure".into(), |f| f.to_string());
                steps.push((
                    names[0],
                    CheckStatus::Incomplete,
                    format!("it does not reproduce: {got}"),
                    vec![o.report.digest],
                ));
                return Verdict::EvidenceIncomplete;
            }
            Err(e) => {
                steps.push((names[0], CheckStatus::Incomplete, format!("the base cannot run: {e}"), vec![]));
                return Verdict::EvidenceIncomplete;
            }
        }
        // 2. Its faults by meaning.
        let what = schedule.iter().map(describe_fault).collect::<Vec<_>>().join("; ");
        match run(&c.base, &by_meaning(bug, &schedule, 0)) {
            Ok(o) if o.failure.as_ref() == Some(sig) => steps.push((
                names[1],
                CheckStatus::Passed,
                format!("{} fault(s) fail it the same way: {what}", schedule.len()),
                vec![o.report.digest],
            )),
            Ok(o) => {
                steps.push((
                    names[1],
                    CheckStatus::Incomplete,
                    format!(
                        "its {} fault(s) as a schedule do not fail the base the same way ({}): the failure depends on \
                         decisions beyond its faults' times and cannot be judged by meaning",
                        schedule.len(),
                        o.failure.map_or_else(|| "it holds".into(), |f| f.to_string())
                    ),
                    vec![o.report.digest],
                ));
                return Verdict::EvidenceIncomplete;
            }
            Err(e) => {
                steps.push((names[1], CheckStatus::Incomplete, format!("the base cannot run: {e}"), vec![]));
                return Verdict::EvidenceIncomplete;
            }
        }
        // 3. No faults.
        match run(&c.base, &by_meaning(bug, &[], 0)) {
            Ok(o) if o.failure.as_ref() == Some(sig) => {
                steps.push((
                    names[2],
                    CheckStatus::Failed,
                    format!("the base fails without faults: {sig}"),
                    vec![o.report.digest],
                ));
                return Verdict::NotFaultInduced;
            }
            Ok(o) => steps.push((
                names[2],
                CheckStatus::Passed,
                match o.failure {
                    None => "the base holds without faults".into(),
                    Some(f) => format!("without faults the base fails only otherwise: {f}"),
                },
                vec![o.report.digest],
            )),
            Err(e) => {
                steps.push((names[2], CheckStatus::Incomplete, format!("the base cannot run: {e}"), vec![]));
                return Verdict::EvidenceIncomplete;
            }
        }
        // 4. The candidate, without faults.
        let cand = match c.candidate.as_ref().map_err(Clone::clone).and_then(|b| candidate_target(&c.base, b)) {
            Ok(t) => t,
            Err(e) => {
                steps.push((names[3], CheckStatus::Incomplete, format!("no candidate: {e}"), vec![]));
                return Verdict::EvidenceIncomplete;
            }
        };
        match run(&cand, &by_meaning(bug, &[], 0)) {
            Ok(o) => match o.failure {
                None => steps.push((
                    names[3],
                    CheckStatus::Passed,
                    "the candidate holds without faults".into(),
                    vec![o.report.digest],
                )),
                Some(f) => {
                    steps.push((
                        names[3],
                        CheckStatus::Failed,
                        format!("the candidate fails without faults: {f}"),
                        vec![o.report.digest],
                    ));
                    return failing(&f, sig);
                }
            },
            Err(e) => {
                steps.push((names[3], CheckStatus::Incomplete, format!("the candidate cannot run: {e}"), vec![]));
                return Verdict::EvidenceIncomplete;
            }
        }
        // 5. Worlds: the ones where the base fails under the schedule are evidence.
        let (mut held, mut set_aside, mut digests) = (0u32, 0u32, Vec::new());
        for k in 0..c.worlds.max(1) {
            let input = by_meaning(bug, &schedule, k);
            if k > 0 {
                match run(&c.base, &input) {
                    Ok(o) if o.failure.as_ref() == Some(sig) => {}
                    Ok(_) => {
                        set_aside += 1;
                        continue;
                    }
                    Err(e) => {
                        steps.push((
                            names[4],
                            CheckStatus::Incomplete,
                            format!("world {k}: the base cannot run: {e}"),
                            digests,
                        ));
                        return Verdict::EvidenceIncomplete;
                    }
                }
            }
            match run(&cand, &input) {
                Ok(o) => {
                    digests.push(o.report.digest.clone());
                    if let Some(f) = o.failure {
                        let v = failing(&f, sig);
                        timeline = format!("world {k}: {f}");
                        steps.push((
                            names[4],
                            CheckStatus::Failed,
                            format!("in world {k} the candidate fails: {f}"),
                            digests,
                        ));
                        return v;
                    }
                    if let Some(f) = unreached(&o, &schedule) {
                        steps.push((
                            names[4],
                            CheckStatus::Incomplete,
                            format!(
                                "world {k}: the replay lost track: the run ended before its fault \"{}\" came",
                                describe_fault(f)
                            ),
                            digests,
                        ));
                        return Verdict::EvidenceIncomplete;
                    }
                    held += 1;
                }
                Err(e) => {
                    steps.push((
                        names[4],
                        CheckStatus::Incomplete,
                        format!("world {k}: the candidate cannot run: {e}"),
                        digests,
                    ));
                    return Verdict::EvidenceIncomplete;
                }
            }
        }
        steps.push((
            names[4],
            CheckStatus::Passed,
            format!(
                "held in {held} world(s) where the base fails ({set_aside} world(s) where the base holds set aside): {what}"
            ),
            digests,
        ));
        // 6. The sweep.
        let mut variants: Vec<(String, Vec<ScheduledFault>)> = [-500i64, -200, 200, 500]
            .into_iter()
            .map(|d| (format!("every fault {d:+} ms"), shifted(&schedule, d, None)))
            .collect();
        for (i, f) in schedule.iter().enumerate().take(10) {
            for d in [-300i64, 300] {
                variants.push((format!("\"{}\" {d:+} ms", describe_fault(f)), shifted(&schedule, d, Some(i))));
            }
        }
        let mut digests = Vec::new();
        for (name, s) in &variants {
            match run(&cand, &by_meaning(bug, s, 0)) {
                Ok(o) => {
                    digests.push(o.report.digest.clone());
                    if let Some(f) = o.failure {
                        let v = failing(&f, sig);
                        timeline = format!("{name}: {f}");
                        steps.push((
                            names[5],
                            CheckStatus::Failed,
                            format!("with {name} the candidate fails: {f}"),
                            digests,
                        ));
                        return v;
                    }
                }
                Err(e) => {
                    steps.push((
                        names[5],
                        CheckStatus::Incomplete,
                        format!("{name}: the candidate cannot run: {e}"),
                        digests,
                    ));
                    return Verdict::EvidenceIncomplete;
                }
            }
        }
        steps.push((names[5], CheckStatus::Passed, format!("all {} variants held", variants.len()), digests));
        timeline = format!("the candidate held under {what}, in {held} world(s) and {} variants", variants.len());
        Verdict::FixedForThisCapsule
    })();
    for (name, status, detail, digests) in &steps {
        cert.push(name, *status, detail.clone(), digests.clone());
    }
    for name in names.iter().skip(steps.len()) {
        cert.push(name, CheckStatus::NotRun, "an earlier result decided the verdict".into(), vec![]);
    }
    cert.seal(verdict, timeline);
    ClusterJudgement { verdict, certificate: cert }
}

#[cfg(test)]
mod tests;
