//! Exploring clusters: the [`Subject`] of a cluster file.
//!
//! In the coverage strategy each worker keeps a whole forked cluster ([`deja_cluster::Fork`]):
//! booted with the campaign's seed and kept at the first moment every node has called
//! `setup_complete` (or, when some node never does, right after the nodes booted). Every round
//! resets each node's VM to the fork through its dirty pages and runs on from there, steered by
//! a [`ClusterInput`]: overrides of the cluster's decisions (network latencies, node order at
//! equal times, UDP faults, the random faults' times, sides, lengths and targets) and a reseed
//! of every decision after the fork point, the cluster's and each node's. The random strategy
//! boots the cluster with a new seed every round.
//!
//! Coverage of a cluster round is behavioural: each node's distinct output lines with their
//! numbers masked (`became leader term #`, `discarded [#] adopting log of #.#.#.#:# term #`),
//! each SDK assertion's outcome per node (with the decision index where it first held: the
//! round's focus), and the kinds of fault that happened; plus, for nodes built with `deja build
//! --coverage`, each SanitizerCoverage edge and its AFL bucket.
//!
//! A failure (a failed SDK assertion on any node, a waited node that failed, a cluster that got
//! stuck) is confirmed by booting the cluster from scratch with the same input on another host
//! core, which must give the same digest, and written as `bug-<id>.json` ([`ClusterBug`]), which
//! records where the run was forked. [`minimize_cluster`] turns the failing run's faults into a
//! schedule and cuts it down with ddmin.
//!
//! Here: the cluster, the input, a round's outcome and a run from scratch; the bug file in
//! `bug.rs`, the subject, its workers and what it learned from its bootstrap in `subject.rs`, a
//! bug's faults (in words, in groups) and their minimization in `faults.rs`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use deja_cluster::config::ScheduledFault;
use deja_cluster::{
    ClusterConfig, ClusterReport, Fates, FaultEvent, Fork, Outcome, RunOptions, SteerAt, Steering, StorageFault,
};
use deja_explore_report as report;
use deja_format::json::Schema;
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};

use crate::campaign::{
    bug_id, CampaignConfig, Decision, Entry, Facts, Mode, Program, Seeds, Strategy, Subject, WrittenBug,
};
use crate::signature::FailureSignature;
use crate::ExploreError;
use deja_vmm::coverage::{BlockHit, BlockImage};
use snafu::ensure;

mod bug;
mod faults;
pub mod moments;
mod subject;

pub use bug::{cluster_subject, ClusterBug, ForkRecord, CLUSTER_BUG_SCHEMA};
pub use faults::{describe_fault, fault_groups, minimize_cluster, with_faults, BugFault, MinimizedCluster};
pub use subject::{late_fork_at, node_menus, ClusterReference, ClusterSubject, ClusterWorker};

/// The cluster under exploration.
#[derive(Debug, Clone)]
pub struct ClusterTarget {
    /// The loaded cluster file, with the settings its nodes' VMs are set up with
    /// ([`ClusterConfig::settings`]: the defaults when loaded; the caller sets its own).
    pub cfg: ClusterConfig,
    /// Its path, as given.
    pub path: String,
    /// BLAKE3 of the file's text.
    pub file_blake3: String,
    /// The file's text (bug files carry it).
    pub text: String,
    /// The directory its relative paths are relative to, absolute where it could be made so.
    pub dir: PathBuf,
}

impl ClusterTarget {
    /// Loads a cluster file.
    pub fn load(path: &Path) -> Result<ClusterTarget, ExploreError> {
        let cfg = ClusterConfig::load(path)?;
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let dir = path.parent().unwrap_or(Path::new("."));
        let dir = std::fs::canonicalize(if dir.as_os_str().is_empty() { Path::new(".") } else { dir })
            .unwrap_or_else(|_| dir.to_path_buf());
        Ok(ClusterTarget { file_blake3: cfg.file_blake3.clone(), cfg, path: path.display().to_string(), text, dir })
    }
}

/// How one cluster round is steered.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ClusterInput {
    /// The cluster seed.
    pub seed: u64,
    /// Cluster decision index → choice.
    #[serde(default)]
    pub overrides: BTreeMap<u64, u64>,
    /// From the steering point on, decisions that are not overridden come from this seed's
    /// streams (see [`deja_cluster::Steering`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reseed: Option<u64>,
    /// Where the overrides and the reseed take effect (bug files of older deja: at boot).
    #[serde(default)]
    pub steer_at: SteerAt,
    /// When set, these faults replace the file's scripted and random faults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<Vec<ScheduledFault>>,
    /// Where message fates and scheduling ties come from after the steering point.
    #[serde(default, skip_serializing_if = "Fates::is_stream")]
    pub fates: Fates,
    /// Storage faults placed from the steering point on: crashes of nodes at their durable
    /// operations and I/O errors, by meaning (node, path, count over the node's run). Besides
    /// the file's own; with a `schedule`, instead of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub storage: Vec<StorageFault>,
    /// The test template's choices, fixed by meaning (see [`deja_cluster::Steering::template`]):
    /// set where a bug's faults replay as a schedule, so that its workload stays the one that
    /// failed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub template: Vec<u64>,
    /// Where the round leaves a later fork of its worker's fork, if it runs from one
    /// ([`Fork::run_child_at`]): planning only, never written, and no part of the run.
    #[serde(skip)]
    pub fork_at: Option<u64>,
}

impl ClusterInput {
    /// Its steering.
    pub fn steering(&self) -> Steering {
        Steering {
            overrides: self.overrides.clone(),
            reseed: self.reseed,
            at: self.steer_at,
            fates: self.fates,
            storage: self.storage.clone(),
            crash_states: 0,
            template: self.template.clone(),
        }
    }

    /// Every fault it places, in words: the schedule's, then the storage faults.
    pub fn fault_words(&self) -> Vec<String> {
        let timed = self.schedule.iter().flatten().map(describe_fault);
        timed.chain(self.storage.iter().map(StorageFault::describe)).collect()
    }
}

/// What one cluster round showed.
#[derive(Debug, Clone)]
pub struct ClusterOutcome {
    /// The report.
    pub report: ClusterReport,
    /// The failure signature, if the round failed.
    pub failure: Option<FailureSignature>,
    /// Behavioural features (see the module documentation), each with the decision index where
    /// the run first showed it, when that is progress.
    pub features: BTreeMap<u64, Option<u64>>,
    /// The clients' history, checked, when they recorded one.
    pub history: Option<Result<deja_history::Verdict, deja_history::HistoryError>>,
    /// Under block coverage: a 1 for each block of the campaign's id space the round's nodes
    /// reached (empty without).
    pub blocks: Vec<u8>,
}

use crate::features::{feature, template};

/// The history the cluster's clients recorded (`deja_sdk::history`), checked: `None` when they
/// recorded none. Records are matched per node and life (a restarted node numbers its
/// operations afresh).
pub fn history_verdict(r: &ClusterReport) -> Option<Result<deja_history::Verdict, deja_history::HistoryError>> {
    let mut records: Vec<(String, &str, u64)> = Vec::new();
    for n in &r.nodes {
        for (life, l) in n.lives.iter().enumerate() {
            let node = if life == 0 { n.name.clone() } else { format!("{} life {}", n.name, life + 1) };
            for e in l.events.iter().filter(|e| e.name == deja_protocol::HISTORY_EVENT) {
                records.push((node.clone(), e.details.as_str(), e.virtual_time_ns));
            }
        }
    }
    let recs = records.iter().map(|(node, details, t)| deja_history::Record { node, details, virtual_time_ns: *t });
    match deja_history::from_events(recs) {
        Ok(None) => None,
        Ok(Some(h)) => Some(Ok(deja_history::check(&h, deja_history::DEFAULT_BUDGET))),
        Err(e) => Some(Err(e)),
    }
}

/// The failure signature of a history verdict, if the history failed.
fn history_failure(v: &Option<Result<deja_history::Verdict, deja_history::HistoryError>>) -> Option<FailureSignature> {
    match v {
        Some(Ok(deja_history::Verdict::NotLinearizable(violation))) => {
            Some(FailureSignature::NotLinearizable(violation.signature()))
        }
        Some(Err(e)) => Some(FailureSignature::HistoryUnreadable(e.to_string())),
        _ => None,
    }
}

/// The failure signature of a report, if it failed.
pub fn cluster_failure(r: &ClusterReport) -> Option<FailureSignature> {
    failure_with(r, &history_verdict(r))
}

fn failure_with(
    r: &ClusterReport,
    history: &Option<Result<deja_history::Verdict, deja_history::HistoryError>>,
) -> Option<FailureSignature> {
    let mut failed: Vec<(String, String)> = Vec::new();
    for n in &r.nodes {
        for l in &n.lives {
            for a in &l.assertions {
                if a.status == deja_kernel::AssertionStatus::Failed {
                    failed.push((n.name.clone(), a.message.clone()));
                }
            }
        }
    }
    if !failed.is_empty() {
        return Some(FailureSignature::cluster_assertions(failed));
    }
    if let Some(f) = history_failure(history) {
        return Some(f);
    }
    if let Outcome::Stuck(_) = r.outcome {
        return Some(FailureSignature::Stuck);
    }
    r.first_failure().map(|(node, e)| match e {
        deja_kernel::ExitStatus::Exited { code } => {
            let last = r.nodes.iter().find(|n| n.name == node).and_then(|n| n.lives.last());
            let said = last.and_then(crate::signature::said_of);
            FailureSignature::NodeExited { node: node.to_string(), code: *code, said }
        }
        deja_kernel::ExitStatus::Signaled { name, .. } => {
            FailureSignature::NodeDied { node: node.to_string(), signal: name.clone() }
        }
    })
}

/// Runs one round from scratch: the cluster boots with the input's seed and takes its steering
/// at its steering point.
pub fn run_cluster_input(
    target: &ClusterTarget,
    input: &ClusterInput,
    sink: &mut dyn FnMut(&str, deja_kernel::Stream, &[u8]),
) -> Result<ClusterOutcome, ExploreError> {
    run_cluster_with(target, input, 0, sink)
}

/// [`run_cluster_input`], listing up to `crash_states` distinct crash states at each crash at
/// a durable operation ([`deja_cluster::CrashRecord::states`]).
pub fn run_cluster_with(
    target: &ClusterTarget,
    input: &ClusterInput,
    crash_states: usize,
    sink: &mut dyn FnMut(&str, deja_kernel::Stream, &[u8]),
) -> Result<ClusterOutcome, ExploreError> {
    let (cfg, steering) = configured(target, input);
    let steering = Steering { crash_states, ..steering };
    let report = deja_cluster::run(cfg, RunOptions { sink, steering, record_trace: false })?;
    Ok(outcome(report))
}

/// The cluster `input` runs: `target`'s file with the input's seed (and its schedule instead of
/// the file's faults, if it has one), and its steering.
pub fn configured(target: &ClusterTarget, input: &ClusterInput) -> (ClusterConfig, Steering) {
    let mut cfg = target.cfg.clone();
    cfg.seed = input.seed;
    if let Some(s) = &input.schedule {
        cfg.schedule = s.clone();
        cfg.random_faults = None;
        cfg.storage.faults.clear();
    }
    (cfg, input.steering())
}

/// What a cluster run showed.
pub fn outcome(report: ClusterReport) -> ClusterOutcome {
    // The decision index at virtual time `t`: how many cluster decisions came before it.
    let index_at = |t: u64| report.decisions.iter().filter(|d| d.time_ns <= t).count() as u64;
    let mut features = BTreeMap::new();
    for n in &report.nodes {
        for line in n.stdout.lines() {
            features.insert(feature(&["line", &n.name, &template(line)]), None);
        }
        for l in &n.lives {
            for a in &l.assertions {
                let status = format!("{:?}", a.status);
                let at = a.first_satisfied.as_ref().map(|c| index_at(c.virtual_time_ns));
                let f = feature(&["assertion", &n.name, &a.message, &status]);
                let e = features.entry(f).or_insert(at);
                *e = (*e).min(at).or(at);
            }
            // The Antithesis SDKs' guideposts: each one's progress, a level at a time.
            crate::input::guidance_edges(&l.events, &mut features);
            // Edge coverage of a node built with `deja build --coverage`: edge and AFL bucket.
            for (i, b) in l.coverage.iter().flat_map(|c| c.map.iter().enumerate()) {
                if *b != 0 {
                    features.insert(feature(&["edge", &n.name, &i.to_string(), &b.to_string()]), None);
                }
            }
        }
    }
    for f in &report.faults {
        features.insert(feature(&["fault", &f.kind]), None);
    }
    let history = history_verdict(&report);
    let failure = failure_with(&report, &history);
    ClusterOutcome { report, failure, features, history, blocks: Vec::new() }
}

/// Runs (or continues) a cluster campaign under `cfg.settings` (whatever `target`'s own) and
/// writes its files under `cfg.out`.
pub fn explore_cluster(
    target: &ClusterTarget,
    cfg: &CampaignConfig,
    progress: &mut dyn FnMut(&crate::Progress),
) -> Result<report::Campaign, ExploreError> {
    let mut target = target.clone();
    target.cfg.settings = cfg.settings;
    let subject = ClusterSubject::new(&target, cfg.block_coverage, &cfg.cover)
        .with_late_forks(cfg.late_forks)
        .with_perturbed_forks(cfg.perturb_forks);
    crate::campaign::explore(&subject, cfg, progress)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signature::older_id;

    /// A cluster bug file as an older deja wrote it, with `signature` as plain words and the
    /// id of those words.
    fn old_cluster_bug_file(signature: &str) -> Vec<u8> {
        let bug = ClusterBug {
            schema: CLUSTER_BUG_SCHEMA.id(),
            id: String::new(),
            signature: FailureSignature::Stuck,
            cluster: "examples/split-brain.toml".into(),
            cluster_blake3: "00".repeat(32),
            binaries: BTreeMap::from([("n1".to_string(), "11".repeat(32))]),
            input: ClusterInput { seed: 12, ..Default::default() },
            decisions: 40,
            faults: Vec::new(),
            digest: "ab".repeat(32),
            found_at_round: 12,
            reproduce: "deja replay campaign/bug.json".into(),
            minimized_from: None,
            removed: Vec::new(),
            host: None,
            forked_from: None,
            history: None,
            cluster_text: None,
            cluster_dir: None,
            programs: BTreeMap::new(),
            node_files: BTreeMap::new(),
            template: Vec::new(),
        };
        let doc = crate::signature::as_older_deja_wrote_it(serde_json::to_value(&bug).unwrap(), signature);
        CLUSTER_BUG_SCHEMA.to_bytes(&doc)
    }

    fn timed(at_ms: u64, action: deja_cluster::config::Action, node: Option<&str>) -> BugFault {
        BugFault::Timed(ScheduledFault::new(at_ms, action, node))
    }

    #[test]
    fn a_cut_and_its_heal_a_kill_and_its_restart_stay_together() {
        use deja_cluster::config::Action::*;
        let faults = vec![
            timed(100, Partition, None),
            timed(200, Kill, Some("n1")),
            timed(300, ClockJump, Some("n2")),
            timed(400, PartitionOneWay, None),
            timed(500, Heal, None),
            timed(600, Restart, Some("n1")),
            timed(700, Pause, Some("n2")),
            timed(800, Partition, None),
            timed(900, Resume, Some("n2")),
        ];
        let groups = fault_groups(&faults);
        let at = |g: &Vec<BugFault>| {
            g.iter()
                .map(|f| match f {
                    BugFault::Timed(t) => t.at_ms,
                    BugFault::Storage(_) => 0,
                })
                .collect::<Vec<_>>()
        };
        let shape: Vec<Vec<u64>> = groups.iter().map(at).collect();
        // Both cuts before the heal go with it; the last cut was never healed: alone.
        assert_eq!(shape, vec![vec![100, 400, 500], vec![200, 600], vec![300], vec![700, 900], vec![800]]);
        assert_eq!(groups.concat().len(), faults.len(), "every fault in exactly one group");
        // Removing any group leaves no cut without the heal that followed it in the original.
        for skip in 0..groups.len() {
            let rest: Vec<BugFault> =
                groups.iter().enumerate().filter(|(i, _)| *i != skip).flat_map(|(_, g)| g.clone()).collect();
            let healed_cut = |ms: u64| rest.iter().any(|f| matches!(f, BugFault::Timed(t) if t.at_ms == ms));
            assert_eq!(healed_cut(100), healed_cut(500), "a cut and its heal stand or fall together");
            assert_eq!(healed_cut(200), healed_cut(600), "a kill and its restart too");
        }
    }

    #[test]
    fn a_cluster_bug_file_keeps_its_bytes_and_id_whatever_its_signature_reads_as() {
        for words in [
            "assertion failed on client: acknowledged writes survive",
            "assertion failed on n1: lost; twice",
            "node n1 failed: exit 3",
        ] {
            let bytes = old_cluster_bug_file(words);
            let bug = ClusterBug::parse("bug-old.json", &bytes).unwrap();
            assert_eq!(bug.signature.to_string(), words);
            assert_eq!(older_id(&bug.signature), bug.id, "the id it was written with");
            assert_eq!(CLUSTER_BUG_SCHEMA.to_bytes(&bug), bytes, "written back byte for byte");
        }
        let typed = ClusterBug::parse("bug-old.json", &old_cluster_bug_file("the cluster got stuck")).unwrap();
        assert!(matches!(typed.signature, FailureSignature::Stuck), "{:?}", typed.signature);
    }

    #[test]
    fn numbers_are_masked() {
        assert_eq!(template("became leader term 12"), "became leader term #");
        assert_eq!(
            template("discarded [12, 13, 14] adopting log of 10.0.0.2:7000 term 5"),
            "discarded [#] adopting log of # term #"
        );
        assert_eq!(template("no numbers"), "no numbers");
        assert_eq!(template("acked 5 term 2"), "acked # term #");
    }
}
