//! `deja check` for clusters: a cluster bug file judged against candidate builds of its nodes.
//!
//! The failure is replayed **by meaning**: its timed faults as a schedule of partitions, heals,
//! kills, restarts, pauses and clock faults at the same virtual times, and its storage faults as
//! crashes and I/O errors of a node at its n-th operation on a path; never as positions in the
//! decision log, so a candidate that sends one more message does not shift them. Message fates
//! (latency, loss, reordering, duplication) and scheduling ties are keyed by meaning
//! ([`deja_cluster::Fates::Meaning`]). The steps, each recorded in the certificate:
//!
//! 1. **reproduce the bug on the base**: the bug file's own input fails the same way;
//! 2. **minimize the bug**: a bug not minimized yet is cut down to its smallest failing set of
//!    faults as `deja minimize` would, so the verdict is the same whether or not its finder
//!    minimized it. When the smallest form cannot be minimized, or its faults by meaning do not
//!    fail the base the same way, the bug as found is judged with all its faults (a verdict
//!    on more faults rather than none); a bug whose faults in neither form fail again cannot
//!    be judged by meaning: `EVIDENCE_INCOMPLETE`, with what the user can do;
//! 3. **the faults by meaning fail the base**, in the bug's world;
//! 4. **no-fault control on the base**: without faults the base holds (else
//!    `NOT_FAULT_INDUCED`);
//! 5. **the candidate runs**: it can be loaded and holds without faults;
//! 6. **the candidate in fresh worlds**: in the bug's world and `worlds - 1` others, the base
//!    fails under the faults (a world where it does not says nothing and is set aside) and the
//!    candidate must hold, with every scheduled fault in its ledger;
//! 7. **the schedule shifted**: as a whole, and fault by fault, each kill with its restart, each
//!    pause with its resume, each partition with its heal; a variant that cannot be applied (a
//!    kill of a node that is down) is named in the certificate and not run;
//! 8. **each node crashed at its durable operations**: under the timed faults, each node
//!    storage faults may strike is crashed before and after each durable operation that made
//!    something durable (at most [`Sweep::crash_points`] crash points, spread evenly), with the
//!    distinct crash states before it, restarted, and the run goes on.
//!
//! A failure with the bug's signature is `STILL_REPRODUCES`, another one `NEW_FAILURE`. A run
//! that ends without a verdict — its time budget ran out with a waited node still running, a
//! scripted fault could not be applied, it ended before its faults came — is
//! `EVIDENCE_INCOMPLETE`, never a failure.
//!
//! Here: the check, its candidate and its verdict; the faults by meaning, the schedule shifted
//! and what a run under them shows in `meaning.rs`; the storage sweep's crash points and their
//! runs in `sweep.rs`.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use snafu::{ResultExt, Snafu};

use deja_cluster::config::{Action, ScheduledFault};
use deja_cluster::{Fates, NodeFault, SteerAt, StorageFault};
use deja_explore::cluster::{
    describe_fault, minimize_cluster, run_cluster_input, run_cluster_with, with_faults, BugFault, ClusterOutcome,
};
use deja_explore::{ClusterBug, ClusterInput, ClusterTarget, FailureSignature};
use deja_kernel::crash_points::{crash_points, spread};
use deja_kernel::{OpCrash, When};

use crate::certificate::{Certificate, CheckStatus};
use crate::judge::Verdict;

mod meaning;
mod sweep;

use meaning::{by_meaning, judge_run, not_applicable, partner, shifted, timed};
pub use sweep::Sweep;
use sweep::{run_all, sweep_points, SweepPoint};

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
    /// The bug as judged: the one given, or its minimized form when the check minimized it.
    pub judged: Option<ClusterBug>,
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

/// The verdict of a candidate that failed with `failure`: the bug's own signature or another.
fn failing(failure: &FailureSignature, signature: &FailureSignature) -> Verdict {
    if failure.is_the_failure(signature) {
        Verdict::StillReproduces
    } else {
        Verdict::NewFailure
    }
}

/// Runs the whole check, with the default storage sweep.
pub fn check_cluster(c: &ClusterCheck) -> ClusterJudgement {
    check_cluster_with(c, &Sweep::default())
}

/// Runs the whole check, with the storage sweep `sweep`.
pub fn check_cluster_with(c: &ClusterCheck, sweep: &Sweep) -> ClusterJudgement {
    let names = [
        "reproduce the bug on the base",
        "minimize the bug",
        "the faults by meaning fail the base",
        "no-fault control on the base",
        "the candidate runs",
        "the candidate in fresh worlds",
        "sweep the candidate: the schedule shifted, as a whole and fault by fault",
        "sweep the candidate: each node crashed before and after its durable operations",
    ];
    let given = &c.bug;
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
    let mut cert = Certificate::new(&given.id, &c.base.file_blake3, &cand_hash);
    cert.host = deja_vmm::identity::host().ok().map(|h| h.fingerprint.clone());
    let mut steps: Vec<(&str, CheckStatus, String, Vec<String>)> = Vec::new();
    let mut timeline = String::new();
    let mut judged: Option<ClusterBug> = None;
    let sig = &given.signature;
    let run = |t: &ClusterTarget, input: &ClusterInput| run_cluster_input(t, input, &mut |_, _, _| {});
    let verdict = (|| -> Verdict {
        // 1. The bug, exactly as `deja replay` runs it.
        match run(&c.base, &given.input) {
            Ok(o) if o.failure.as_ref().is_some_and(|f| f.is_the_failure(sig)) => {
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
        // 2. The bug's smallest form: the verdict must not depend on whether its finder
        // minimized it, so an unminimized bug is minimized here (as `deja minimize` does). When
        // the smallest form cannot be judged by meaning, the bug as found is: a verdict on all
        // its faults is better than none.
        let all = given.fault_list(&c.base);
        let words = |faults: &[BugFault]| faults.iter().map(BugFault::describe).collect::<Vec<_>>().join("; ");
        let mut forms: Vec<(ClusterBug, String, Vec<String>)> = Vec::new();
        let mut unminimized = None;
        if given.minimized_from.is_some() || all.len() <= 1 {
            let why = if given.minimized_from.is_some() { "minimized already" } else { "nothing to minimize" };
            forms.push((given.clone(), format!("{why}: {} fault(s): {}", all.len(), words(&all)), vec![]));
        } else {
            match minimize_cluster(given, &c.base, "cluster-bug.json") {
                Ok(m) => {
                    let how = format!(
                        "minimized here, as deja minimize does, in {} runs: {} of {} faults kept: {}",
                        m.tests,
                        m.bug.input.fault_words().len(),
                        all.len(),
                        m.bug.input.fault_words().join("; ")
                    );
                    let digest = m.bug.digest.clone();
                    forms.push((m.bug, how, vec![digest]));
                }
                Err(e) => unminimized = Some(format!("it cannot be minimized ({e})")),
            }
            forms.push((
                given.clone(),
                format!("judged as found, with all {} faults: {}", all.len(), words(&all)),
                vec![],
            ));
        }
        // 3. Its faults by meaning: the first form whose faults fail the base the same way.
        let mut tried = Vec::new();
        let mut chosen = None;
        for (form, how, digests) in forms {
            let faults = form.fault_list(&c.base);
            match run(&c.base, &by_meaning(&form, &faults, 0)) {
                Ok(o) if o.failure.as_ref().is_some_and(|f| f.is_the_failure(sig)) => {
                    chosen = Some((form, how, digests, faults, o.report.digest));
                    break;
                }
                Ok(o) => tried.push(format!(
                    "{} fault(s) by meaning do not fail the base the same way ({})",
                    faults.len(),
                    o.failure.map_or_else(|| "it holds".into(), |f| f.to_string())
                )),
                Err(e) => {
                    steps.push((names[1], CheckStatus::Incomplete, format!("the base cannot run: {e}"), vec![]));
                    return Verdict::EvidenceIncomplete;
                }
            }
        }
        let Some((bug, how, digests, faults, digest)) = chosen else {
            let mut why: Vec<String> = unminimized.into_iter().collect();
            why.extend(tried);
            steps.push((names[1], CheckStatus::Passed, why.join("; "), vec![]));
            steps.push((
                names[2],
                CheckStatus::Incomplete,
                format!(
                    "the failure depends on decisions beyond its faults and cannot be judged by meaning. What you can \
                     do: `deja replay {}` shows it as found; explore the candidate (`deja explore` of the cluster file \
                     with the candidate's binaries) to look for it there",
                    given.reproduce.strip_prefix("deja replay ").unwrap_or(&given.reproduce)
                ),
                vec![],
            ));
            return Verdict::EvidenceIncomplete;
        };
        let mut how = how;
        if let Some(u) = unminimized {
            how = format!("{u}; {how}");
        } else if !tried.is_empty() {
            how = format!("the smallest form's {}; {how}", tried.join("; "));
        }
        steps.push((names[1], CheckStatus::Passed, how, digests));
        judged = Some(bug.clone());
        let schedule = timed(&faults);
        let what = words(&faults);
        steps.push((
            names[2],
            CheckStatus::Passed,
            format!("{} fault(s) fail it the same way: {what}", faults.len()),
            vec![digest],
        ));
        // 4. No faults.
        match run(&c.base, &by_meaning(&bug, &[], 0)) {
            Ok(o) if o.failure.as_ref().is_some_and(|f| f.is_the_failure(sig)) => {
                steps.push((
                    names[3],
                    CheckStatus::Failed,
                    format!("the base fails without faults: {sig}"),
                    vec![o.report.digest],
                ));
                return Verdict::NotFaultInduced;
            }
            Ok(o) => steps.push((
                names[3],
                CheckStatus::Passed,
                match o.failure {
                    None => "the base holds without faults".into(),
                    Some(f) => format!("without faults the base fails only otherwise: {f}"),
                },
                vec![o.report.digest],
            )),
            Err(e) => {
                steps.push((names[3], CheckStatus::Incomplete, format!("the base cannot run: {e}"), vec![]));
                return Verdict::EvidenceIncomplete;
            }
        }
        // 5. The candidate, without faults.
        let cand = match c.candidate.as_ref().map_err(Clone::clone).and_then(|b| candidate_target(&c.base, b)) {
            Ok(t) => t,
            Err(e) => {
                steps.push((names[4], CheckStatus::Incomplete, format!("no candidate: {e}"), vec![]));
                return Verdict::EvidenceIncomplete;
            }
        };
        match run(&cand, &by_meaning(&bug, &[], 0)) {
            Ok(o) => match judge_run(&o, &[], sig) {
                Ok(None) => steps.push((
                    names[4],
                    CheckStatus::Passed,
                    "the candidate holds without faults".into(),
                    vec![o.report.digest],
                )),
                Ok(Some(v)) => {
                    let f = o.failure.clone().unwrap_or(FailureSignature::Stuck);
                    steps.push((
                        names[4],
                        CheckStatus::Failed,
                        format!("the candidate fails without faults: {f}"),
                        vec![o.report.digest],
                    ));
                    return v;
                }
                Err(why) => {
                    steps.push((
                        names[4],
                        CheckStatus::Incomplete,
                        format!("without faults: {why}"),
                        vec![o.report.digest],
                    ));
                    return Verdict::EvidenceIncomplete;
                }
            },
            Err(e) => {
                steps.push((names[4], CheckStatus::Incomplete, format!("the candidate cannot run: {e}"), vec![]));
                return Verdict::EvidenceIncomplete;
            }
        }
        // 6. Worlds: the ones where the base fails under the faults are evidence.
        let (mut held, mut set_aside, mut digests) = (0u32, 0u32, Vec::new());
        for k in 0..c.worlds.max(1) {
            let input = by_meaning(&bug, &faults, k);
            if k > 0 {
                match run(&c.base, &input) {
                    Ok(o) if o.failure.as_ref().is_some_and(|f| f.is_the_failure(sig)) => {}
                    Ok(_) => {
                        set_aside += 1;
                        continue;
                    }
                    Err(e) => {
                        steps.push((
                            names[5],
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
                    match judge_run(&o, &faults, sig) {
                        Ok(None) => held += 1,
                        Ok(Some(v)) => {
                            let f = o.failure.clone().unwrap_or(FailureSignature::Stuck);
                            timeline = format!("world {k}: {f}");
                            steps.push((
                                names[5],
                                CheckStatus::Failed,
                                format!("in world {k} the candidate fails: {f}"),
                                digests,
                            ));
                            return v;
                        }
                        Err(why) => {
                            steps.push((names[5], CheckStatus::Incomplete, format!("world {k}: {why}"), digests));
                            return Verdict::EvidenceIncomplete;
                        }
                    }
                }
                Err(e) => {
                    steps.push((
                        names[5],
                        CheckStatus::Incomplete,
                        format!("world {k}: the candidate cannot run: {e}"),
                        digests,
                    ));
                    return Verdict::EvidenceIncomplete;
                }
            }
        }
        steps.push((
            names[5],
            CheckStatus::Passed,
            format!(
                "held in {held} world(s) where the base fails ({set_aside} world(s) where the base holds set aside): {what}"
            ),
            digests,
        ));
        // 7. The schedule shifted: as a whole, and each fault with the fault paired with it.
        let mut variants: Vec<(String, Vec<ScheduledFault>)> = Vec::new();
        if !schedule.is_empty() {
            for d in [-500i64, -200, 200, 500] {
                variants.push((format!("every fault {d:+} ms"), shifted(&schedule, d, None)));
            }
            for (i, f) in schedule.iter().enumerate().take(10) {
                for d in [-300i64, 300] {
                    let with = partner(&schedule, i)
                        .map(|j| format!(" (with \"{}\")", describe_fault(&schedule[j])))
                        .unwrap_or_default();
                    variants
                        .push((format!("\"{}\"{with} {d:+} ms", describe_fault(f)), shifted(&schedule, d, Some(i))));
                }
            }
        }
        let storage: Vec<BugFault> = faults.iter().filter(|f| matches!(f, BugFault::Storage(_))).cloned().collect();
        let mut skipped = Vec::new();
        let mut digests = Vec::new();
        let mut ran = 0usize;
        for (name, s) in &variants {
            if let Some(why) = not_applicable(s) {
                skipped.push(format!("{name}: {why}"));
                continue;
            }
            let all: Vec<BugFault> = s.iter().cloned().map(BugFault::Timed).chain(storage.iter().cloned()).collect();
            ran += 1;
            match run(&cand, &by_meaning(&bug, &all, 0)) {
                Ok(o) => {
                    digests.push(o.report.digest.clone());
                    match judge_run(&o, &all, sig) {
                        Ok(None) => {}
                        Ok(Some(v)) => {
                            let f = o.failure.clone().unwrap_or(FailureSignature::Stuck);
                            timeline = format!("{name}: {f}");
                            steps.push((
                                names[6],
                                CheckStatus::Failed,
                                format!("with {name} the candidate fails: {f}"),
                                digests,
                            ));
                            return v;
                        }
                        Err(why) => {
                            steps.push((names[6], CheckStatus::Incomplete, format!("with {name}: {why}"), digests));
                            return Verdict::EvidenceIncomplete;
                        }
                    }
                }
                Err(e) => {
                    steps.push((
                        names[6],
                        CheckStatus::Incomplete,
                        format!("{name}: the candidate cannot run: {e}"),
                        digests,
                    ));
                    return Verdict::EvidenceIncomplete;
                }
            }
        }
        let skipped_words = if skipped.is_empty() {
            String::new()
        } else {
            format!("; {} variant(s) not applicable, not run: {}", skipped.len(), skipped.join("; "))
        };
        steps.push((
            names[6],
            CheckStatus::Passed,
            if variants.is_empty() {
                "no timed fault to shift".to_string()
            } else {
                format!("all {ran} variants held{skipped_words}")
            },
            digests,
        ));
        // 8. The storage sweep: each node crashed before and after its durable operations,
        // under the bug's timed faults, with the crash states there. Its runs take their steering
        // at boot, so that every durable operation can be a crash point; the points are those of
        // the candidate's run under the timed faults alone.
        let timed_faults: Vec<BugFault> = schedule.iter().cloned().map(BugFault::Timed).collect();
        let at_boot = |faults: &[BugFault]| ClusterInput { steer_at: SteerAt::Boot, ..by_meaning(&bug, faults, 0) };
        let base_run = match run(&cand, &at_boot(&timed_faults)) {
            Ok(o) => match judge_run(&o, &timed_faults, sig) {
                Ok(None) => o,
                Ok(Some(v)) => {
                    let f = o.failure.clone().unwrap_or(FailureSignature::Stuck);
                    timeline = format!("under the timed faults alone: {f}");
                    steps.push((
                        names[7],
                        CheckStatus::Failed,
                        format!("under the timed faults alone the candidate fails: {f}"),
                        vec![o.report.digest],
                    ));
                    return v;
                }
                Err(why) => {
                    steps.push((
                        names[7],
                        CheckStatus::Incomplete,
                        format!("under the timed faults alone: {why}"),
                        vec![],
                    ));
                    return Verdict::EvidenceIncomplete;
                }
            },
            Err(e) => {
                steps.push((names[7], CheckStatus::Incomplete, format!("the candidate cannot run: {e}"), vec![]));
                return Verdict::EvidenceIncomplete;
            }
        };
        let (points, total) = sweep_points(&base_run, sweep.crash_points);
        let input_of = |p: &SweepPoint| {
            let mut all = timed_faults.clone();
            all.push(p.fault());
            at_boot(&all)
        };
        // A queue in a fixed order: every point, then the other crash states of each point before
        // an operation, in the order of their points. It runs `jobs` at a time, and is read in
        // its order: the first failure in it decides, whatever the number of threads.
        let mut queue: Vec<(SweepPoint, bool)> = points.iter().map(|p| (p.clone(), true)).collect();
        let mut next = 0usize;
        let mut digests = Vec::new();
        let mut runs = 0usize;
        let mut unreached_points = Vec::new();
        while next < queue.len() {
            let chunk: Vec<(SweepPoint, bool)> = queue[next..queue.len().min(next + sweep.jobs.max(1))].to_vec();
            next += chunk.len();
            let inputs: Vec<ClusterInput> = chunk.iter().map(|(p, _)| input_of(p)).collect();
            let outs = run_all(&cand, &inputs, sweep.states_per_point, sweep.jobs);
            for ((p, first), out) in chunk.into_iter().zip(outs) {
                runs += 1;
                let name = p.describe();
                let o = match out {
                    Ok(o) => o,
                    Err(e) => {
                        steps.push((
                            names[7],
                            CheckStatus::Incomplete,
                            format!("{name}: the candidate cannot run: {e}"),
                            digests,
                        ));
                        return Verdict::EvidenceIncomplete;
                    }
                };
                digests.push(o.report.digest.clone());
                let Some(crash) = o.report.crashes.iter().find(|r| r.node == p.node) else {
                    unreached_points.push(name);
                    continue;
                };
                match judge_run(&o, &timed_faults, sig) {
                    Ok(None) => {}
                    Ok(Some(v)) => {
                        let f = o.failure.clone().unwrap_or(FailureSignature::Stuck);
                        timeline = format!("{name}: {f}");
                        steps.push((
                            names[7],
                            CheckStatus::Failed,
                            format!("with {name} the candidate fails: {f}"),
                            digests,
                        ));
                        return v;
                    }
                    Err(why) => {
                        steps.push((names[7], CheckStatus::Incomplete, format!("with {name}: {why}"), digests));
                        return Verdict::EvidenceIncomplete;
                    }
                }
                // The other distinct crash states of a crash before the operation.
                if first && p.crash.when == When::Before {
                    for state in
                        crash.states.iter().take(sweep.states_per_point).filter(|s| Some(*s) != crash.kept.as_ref())
                    {
                        let q =
                            SweepPoint { crash: OpCrash { keep: Some(state.clone()), ..p.crash.clone() }, ..p.clone() };
                        queue.push((q, false));
                    }
                }
            }
        }
        if !unreached_points.is_empty() {
            steps.push((
                names[7],
                CheckStatus::Incomplete,
                format!("crash points never reached: {}", unreached_points.join(", ")),
                digests,
            ));
            return Verdict::EvidenceIncomplete;
        }
        let swept = if total == 0 {
            "no durable operation that made something durable on a node storage faults may strike: nothing to crash"
                .to_string()
        } else if total * 2 <= points.len() {
            format!("every one of the {total} durable operations that made something durable")
        } else {
            format!("{} of the {total} durable operations that made something durable, spread evenly", points.len() / 2)
        };
        steps.push((
            names[7],
            CheckStatus::Passed,
            format!(
                "all {runs} runs held: {} crash points, before and after {swept}, with their crash states",
                points.len()
            ),
            digests,
        ));
        timeline = format!(
            "the candidate held under {what}, in {held} world(s), {ran} shifted schedules and {runs} crash-point runs"
        );
        Verdict::FixedForThisCapsule
    })();
    for (name, status, detail, digests) in &steps {
        cert.push(name, *status, detail.clone(), digests.clone());
    }
    for name in names.iter().skip(steps.len()) {
        cert.push(name, CheckStatus::NotRun, "an earlier result decided the verdict".into(), vec![]);
    }
    cert.seal(verdict, timeline);
    ClusterJudgement { verdict, certificate: cert, judged }
}

#[cfg(test)]
mod tests;
