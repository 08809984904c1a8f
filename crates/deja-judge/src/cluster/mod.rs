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
//! The verdict is the pipeline's ([`crate::pipeline`]), the same as a program's. Here: the
//! check's inputs and its candidate; the cluster as the pipeline's subject (its steps' runs) in
//! `subject.rs`; the faults by meaning, the schedule shifted and what a run under them shows in
//! `meaning.rs`; the storage sweep's crash points and their runs in `sweep.rs`.

use std::path::Path;
use std::sync::Arc;

use snafu::{ResultExt, Snafu};

use deja_cluster::config::{Action, ScheduledFault};
use deja_cluster::{Fates, NodeFault, StorageFault};
use deja_explore::cluster::{describe_fault, run_cluster_with, with_faults, BugFault, ClusterOutcome};
use deja_explore::{ClusterBug, ClusterInput, ClusterTarget};
use deja_kernel::faults::crash_points::{crash_points, spread};
use deja_kernel::{OpCrash, When};

use crate::certificate::Certificate;
use crate::pipeline::{End, Run};
use crate::verdict::Verdict;

mod meaning;
mod subject;
mod sweep;

pub use sweep::Sweep;

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
    /// The base cluster (the one the bug was found on). Every run of the check, the
    /// candidate's too, boots under its `cfg.settings`, and the certificate records the host's
    /// fingerprint under them.
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
    if deja_cluster::config::is_cluster_file(Path::new(spec)) {
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

/// Runs the whole check, with the default storage sweep.
pub fn check_cluster(c: &ClusterCheck) -> ClusterJudgement {
    check_cluster_with(c, &Sweep::default())
}

/// Runs the whole check, with the storage sweep `sweep`: the cluster as a
/// [`crate::pipeline::Subject`] ([`subject`]), judged by the one pipeline.
pub fn check_cluster_with(c: &ClusterCheck, sweep: &Sweep) -> ClusterJudgement {
    let mut s = subject::ClusterSubject::new(c, sweep);
    let j = crate::pipeline::judge(&mut s);
    ClusterJudgement { verdict: j.verdict, certificate: j.certificate, judged: s.judged }
}

#[cfg(test)]
mod tests;
