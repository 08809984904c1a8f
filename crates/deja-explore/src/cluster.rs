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

/// How many of each node's last lines of output (on each stream) a round's evidence keeps.
const LAST_LINES: usize = 6;

/// The cluster under exploration.
#[derive(Debug, Clone)]
pub struct ClusterTarget {
    /// The loaded cluster file.
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
    let mut cfg = target.cfg.clone();
    cfg.seed = input.seed;
    if let Some(s) = &input.schedule {
        cfg.schedule = s.clone();
        cfg.random_faults = None;
        cfg.storage.faults.clear();
    }
    let steering = Steering { crash_states, ..input.steering() };
    let report = deja_cluster::run(cfg, RunOptions { sink, steering, record_trace: false })?;
    Ok(outcome(report))
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

/// Where a cluster bug's run was forked (see [`deja_cluster::Fork`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForkRecord {
    /// The point.
    pub at: SteerAt,
    /// Its virtual time, ns.
    pub virtual_time_ns: u64,
    /// Cluster decisions taken before it.
    pub base_decisions: u64,
}

/// A cluster failure, frozen.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterBug {
    /// `deja.cluster-bug/2` ([`CLUSTER_BUG_SCHEMA`]; `/1` files, unsealed, still read).
    pub schema: String,
    /// First 12 hex digits of the signature's BLAKE3.
    pub id: String,
    /// What failed.
    pub signature: FailureSignature,
    /// The cluster file's path when it was found.
    pub cluster: String,
    /// BLAKE3 of the cluster file.
    pub cluster_blake3: String,
    /// BLAKE3 of each node's binary.
    pub binaries: BTreeMap<String, String>,
    /// The input.
    pub input: ClusterInput,
    /// How many cluster decisions the failing run took.
    pub decisions: u64,
    /// The failing run's fault ledger.
    pub faults: Vec<FaultEvent>,
    /// The failing run's digest.
    pub digest: String,
    /// Round that found it.
    pub found_at_round: u64,
    /// The command that reproduces it.
    pub reproduce: String,
    /// For a minimized bug: the bug file it came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minimized_from: Option<String>,
    /// For a minimized bug: the faults minimization removed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removed: Vec<String>,
    /// The CPU fingerprint of the host that found it (absent in bug files of older deja).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<deja_vmm::Fingerprint>,
    /// Where the failing run was forked, when it was: its replay boots the cluster and takes
    /// the input at that point.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<ForkRecord>,
    /// For a history that no order explains: its shortest failing window on a timeline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<String>,
    /// The cluster file's text, so that the bug replays without it (absent in bug files of
    /// older deja, which need the file where `cluster` says).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_text: Option<String>,
    /// The directory the cluster file's relative paths were relative to when it was found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_dir: Option<String>,
    /// Each node's binary file name (what to look for beside the bug file).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub programs: BTreeMap<String, String>,
    /// Each node's declared files: guest path → BLAKE3.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_files: BTreeMap<String, BTreeMap<String, String>>,
}

/// What identifies the subject of a cluster bug: each node's name and binary, in name order
/// (part of a bug's id: the same failure of other binaries is another bug).
pub fn cluster_subject(binaries: &BTreeMap<String, String>) -> String {
    binaries.iter().map(|(n, h)| format!("{n}={h}")).collect::<Vec<_>>().join(",")
}

/// The schema of cluster bug files: version 2 added the seal (`deja_format::json`).
pub const CLUSTER_BUG_SCHEMA: Schema =
    Schema { family: "deja.cluster-bug", what: "cluster bug file", current: 2, oldest: 1, sealed_since: 2 };

impl ClusterBug {
    fn new(target: &ClusterTarget, input: &ClusterInput, out: &ClusterOutcome, round: u64, file: &str) -> Self {
        let signature = out.failure.clone().unwrap_or_else(|| FailureSignature::Other(String::new()));
        ClusterBug {
            schema: CLUSTER_BUG_SCHEMA.id(),
            id: bug_id(&signature, &cluster_subject(&target.cfg.binary_hashes)),
            signature,
            cluster: target.path.clone(),
            cluster_blake3: target.file_blake3.clone(),
            binaries: target.cfg.binary_hashes.clone(),
            input: input.clone(),
            decisions: out.report.decisions.len() as u64,
            faults: out.report.faults.clone(),
            digest: out.report.digest.clone(),
            found_at_round: round,
            reproduce: crate::replay_command(file),
            minimized_from: None,
            removed: Vec::new(),
            host: deja_vmm::identity::host().ok().map(|h| h.fingerprint.clone()),
            forked_from: None,
            history: match &out.history {
                Some(Ok(deja_history::Verdict::NotLinearizable(v))) => Some(v.timeline()),
                _ => None,
            },
            cluster_text: (!target.text.is_empty()).then(|| target.text.clone()),
            cluster_dir: Some(target.dir.display().to_string()),
            programs: target.cfg.nodes.iter().map(|n| (n.name.clone(), n.program.clone())).collect(),
            node_files: target
                .cfg
                .nodes
                .iter()
                .filter(|n| !n.files.is_empty())
                .map(|n| {
                    let files = n.files.iter().map(|(g, d)| (g.clone(), blake3::hash(d).to_hex().to_string()));
                    (n.name.clone(), files.collect())
                })
                .collect(),
        }
    }

    /// Reads a cluster bug file.
    pub fn read(path: &Path) -> Result<ClusterBug, ExploreError> {
        Ok(CLUSTER_BUG_SCHEMA.read(path)?)
    }

    /// Checks the bytes of a cluster bug file read from `path` (named in errors).
    pub fn parse(path: &str, bytes: &[u8]) -> Result<ClusterBug, ExploreError> {
        let (doc, _) = CLUSTER_BUG_SCHEMA.check(path, bytes)?;
        Ok(CLUSTER_BUG_SCHEMA.typed(path, doc)?)
    }

    /// Writes it atomically, sealed.
    pub fn write(&self, path: &Path) -> Result<(), ExploreError> {
        Ok(CLUSTER_BUG_SCHEMA.write(path, self)?)
    }

    /// Loads the cluster this bug needs, from any directory. The cluster file is `config` when
    /// given, else the text the bug carries (or, for bug files of older deja, the file where
    /// the bug says). Each node's binary is the one with the BLAKE3 the bug records, found in
    /// this order: `programs[node]` (`--program NODE=PATH`), the path the cluster file names,
    /// the binary's file name beside the bug file (`beside`, its directory), any file beside
    /// the bug file with that BLAKE3. A binary found nowhere is refused naming the node, the
    /// BLAKE3 it needs, where deja looked, and a file there that changed since.
    pub fn target(
        &self,
        config: Option<&Path>,
        programs: &BTreeMap<String, PathBuf>,
        beside: Option<&Path>,
    ) -> Result<ClusterTarget, ExploreError> {
        let mut missing: Option<ExploreError> = None;
        let mut reader = |node: &str, what: deja_cluster::config::HostFile<'_>, path: &Path| {
            let (want, label, name) = match what {
                deja_cluster::config::HostFile::Binary => {
                    let program = self.programs.get(node).cloned().unwrap_or_else(|| file_name(path));
                    (self.binaries.get(node).cloned(), format!("its binary {program}"), program)
                }
                deja_cluster::config::HostFile::File(guest) => {
                    let want = self.node_files.get(node).and_then(|f| f.get(guest)).cloned();
                    (want, format!("its file {guest}"), file_name(path))
                }
            };
            let Some(want) = want else {
                // The text the bug carries names nothing the bug has no BLAKE3 for: a host file
                // it names is read only as the one the bug was found with.
                if config.is_none() && self.cluster_text.is_some() {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        "the bug file records no BLAKE3 for it",
                    ));
                }
                return std::fs::read(path);
            };
            let mut candidates: Vec<PathBuf> = Vec::new();
            if matches!(what, deja_cluster::config::HostFile::Binary) {
                candidates.extend(programs.get(node).cloned());
            }
            candidates.push(path.to_path_buf());
            if let Some(dir) = beside {
                candidates.push(dir.join(&name));
            }
            let mut looked = Vec::new();
            for c in &candidates {
                match std::fs::read(c) {
                    Ok(bytes) if blake3::hash(&bytes).to_hex().as_str() == want => return Ok(bytes),
                    Ok(bytes) => looked.push(format!(
                        "{} changed since the bug was found (its BLAKE3 is now {})",
                        c.display(),
                        blake3::hash(&bytes).to_hex()
                    )),
                    Err(e) => looked.push(format!("{}: {e}", c.display())),
                }
            }
            if let Some(bytes) = beside.and_then(|dir| find_by_hash(dir, &want)) {
                return Ok(bytes);
            }
            if let Some(dir) = beside {
                looked.push(format!("no file in {} has it", dir.display()));
            }
            missing = Some(ExploreError::BinaryNotFound {
                node: node.to_string(),
                what: label,
                blake3: want,
                looked: looked.join("; "),
            });
            Err(std::io::Error::new(std::io::ErrorKind::NotFound, "not found by its BLAKE3"))
        };
        let loaded = match (config, &self.cluster_text) {
            (Some(p), _) => {
                let text = std::fs::read_to_string(p)
                    .map_err(|source| deja_cluster::ConfigError::Read { path: p.to_path_buf(), source });
                text.and_then(|t| {
                    let dir = p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
                    ClusterConfig::from_text(&t, p, dir, &mut reader).map(|cfg| (cfg, t, dir.to_path_buf()))
                })
            }
            (None, Some(text)) => {
                let dir = PathBuf::from(self.cluster_dir.as_deref().unwrap_or("."));
                ClusterConfig::from_text(text, Path::new(&self.cluster), &dir, &mut reader)
                    .map(|cfg| (cfg, text.clone(), dir))
            }
            (None, None) => {
                let p = PathBuf::from(&self.cluster);
                let text = std::fs::read_to_string(&p)
                    .map_err(|source| deja_cluster::ConfigError::Read { path: p.clone(), source });
                match text {
                    Err(e) => {
                        return Err(ExploreError::ClusterFileMissing {
                            source: Box::new(e),
                            blake3: self.cluster_blake3.clone(),
                        })
                    }
                    Ok(t) => {
                        let dir =
                            p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new(".")).to_path_buf();
                        ClusterConfig::from_text(&t, &p, &dir, &mut reader).map(|cfg| (cfg, t, dir))
                    }
                }
            }
        };
        let (cfg, text, dir) = match loaded {
            Ok(x) => x,
            Err(e) => return Err(missing.unwrap_or(ExploreError::from(e))),
        };
        let path = config.map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from(&self.cluster));
        if cfg.binary_hashes != self.binaries {
            let why: Vec<String> = self
                .binaries
                .iter()
                .filter(|(n, h)| cfg.binary_hashes.get(*n) != Some(*h))
                .map(|(n, h)| match cfg.binary_hashes.get(n) {
                    Some(now) => format!("node {n}'s binary changed (its BLAKE3 is now {now}, the bug needs {h})"),
                    None => format!("it has no node {n}"),
                })
                .chain(
                    cfg.binary_hashes
                        .keys()
                        .filter(|n| !self.binaries.contains_key(*n))
                        .map(|n| format!("it has a node {n} the bug does not")),
                )
                .collect();
            return crate::NotTheBinariesSnafu { path, why: why.join("; ") }.fail();
        }
        let mut cfg = cfg;
        self.same_files(&mut cfg, beside)?;
        Ok(ClusterTarget { file_blake3: cfg.file_blake3.clone(), cfg, path: path.display().to_string(), text, dir })
    }

    /// Holds each node's declared files to the BLAKE3 the bug records, those deja declares
    /// itself included (a dynamically linked binary's loader and libraries, found on this host
    /// again): a file that differs is taken from the campaign's `inputs/` beside the bug file
    /// by its BLAKE3, else refused with both hashes. (Bug files of older deja record none.)
    fn same_files(&self, cfg: &mut ClusterConfig, beside: Option<&Path>) -> Result<(), ExploreError> {
        let hash = |d: &[u8]| blake3::hash(d).to_hex().to_string();
        for n in &mut cfg.nodes {
            let Some(want) = self.node_files.get(&n.name) else { continue };
            for (guest, expected) in want {
                let found = n.files.get(guest).map(|d| hash(d));
                if found.as_ref() == Some(expected) {
                    continue;
                }
                let kept = beside.map(|d| d.join(crate::campaign::INPUTS_DIR).join(expected));
                match kept.and_then(|k| std::fs::read(k).ok()).filter(|d| hash(d) == *expected) {
                    Some(data) => {
                        eprintln!(
                            "deja: note: node {}'s {guest} differs on this host; replaying with the recorded one ({expected})",
                            n.name
                        );
                        n.files.insert(guest.clone(), data);
                    }
                    None => {
                        return crate::NodeFileSnafu { node: &n.name, guest, expected, found: found.clone() }.fail()
                    }
                }
            }
        }
        Ok(())
    }
}

/// The file name of `path`.
fn file_name(path: &Path) -> String {
    path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

/// The contents of a regular file directly in `dir` whose BLAKE3 is `want`, if one has it.
fn find_by_hash(dir: &Path, want: &str) -> Option<Vec<u8>> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir).ok()?.filter_map(|e| e.ok().map(|e| e.path())).collect();
    entries.sort();
    entries.into_iter().filter(|p| p.is_file()).find_map(|p| {
        let bytes = std::fs::read(&p).ok()?;
        (blake3::hash(&bytes).to_hex().as_str() == want).then_some(bytes)
    })
}

/// A cluster under exploration.
pub struct ClusterSubject<'a> {
    target: &'a ClusterTarget,
    /// Block coverage: the distinct programs of the nodes without SanitizerCoverage, in one id
    /// space (empty without block coverage).
    programs: Vec<NodeProgram>,
    /// For each node, the index in `programs` of what it runs, if measured.
    node_program: Vec<Option<usize>>,
    /// The blocks the campaign has learned, by id, in the order learned.
    learned: std::sync::Mutex<Vec<u32>>,
    /// How many later forks each worker keeps (0: none).
    late_forks: usize,
    /// Every forked round made to differ from its booted run (test only).
    perturb: bool,
}

/// One program of a cluster's nodes under block coverage: its blocks, their scope and the id
/// of its first block in the campaign's id space.
struct NodeProgram {
    blocks: std::sync::Arc<BlockImage>,
    scope: Vec<String>,
    first: u32,
}

impl<'a> ClusterSubject<'a> {
    /// The subject of `target`; `block_coverage` measures blocks with one-shot breakpoints in
    /// each node whose program has no SanitizerCoverage counters, in the functions `scope`
    /// names or, when it names none, in its own code ([`BlockImage::of_program`]). Nodes
    /// running the same program with the same shared objects share its blocks.
    pub fn new(target: &'a ClusterTarget, block_coverage: bool, scope: &[String]) -> ClusterSubject<'a> {
        let mut programs: Vec<NodeProgram> = Vec::new();
        let mut keys: Vec<blake3::Hash> = Vec::new();
        let mut node_program = Vec::new();
        for n in &target.cfg.nodes {
            let instrumented = deja_kernel::elf_section(&n.image, deja_kernel::SANCOV_SECTION.as_bytes()).is_some();
            if !block_coverage || instrumented {
                node_program.push(None);
                continue;
            }
            let files: Vec<(&str, &[u8])> = n.files.iter().map(|(p, d)| (p.as_str(), d.as_slice())).collect();
            let mut key = blake3::Hasher::new();
            key.update(&n.image);
            key.update(n.exe_path.as_bytes());
            for (path, data) in files.iter().filter(|(_, d)| deja_vmm::coverage::is_code_object(d)) {
                key.update(path.as_bytes());
                key.update(blake3::hash(data).as_bytes());
            }
            let key = key.finalize();
            if let Some(i) = keys.iter().position(|k| *k == key) {
                node_program.push(Some(i));
                continue;
            }
            let (blocks, taken) = BlockImage::of_program(&n.image, &n.exe_path, &files, scope);
            if blocks.is_empty() {
                node_program.push(None);
                continue;
            }
            let first = programs.last().map_or(0, |p| p.first + p.blocks.len() as u32);
            keys.push(key);
            programs.push(NodeProgram { blocks, scope: taken, first });
            node_program.push(Some(programs.len() - 1));
        }
        ClusterSubject {
            target,
            programs,
            node_program,
            learned: std::sync::Mutex::new(Vec::new()),
            late_forks: deja_cluster::LATE_FORKS,
            perturb: false,
        }
    }

    /// With `on`, every forked round differs from its booted run (a test-only switch:
    /// [`deja_cluster::Fork::set_perturb`]).
    pub fn with_perturbed_forks(mut self, on: bool) -> Self {
        self.perturb = on;
        self
    }

    /// Keeps at most `n` later forks in each worker (0: rounds always run from the fork point).
    pub fn with_late_forks(mut self, n: usize) -> Self {
        self.late_forks = n;
        self
    }

    /// How many blocks the campaign's id space holds (0: no block coverage).
    fn blocks_total(&self) -> u64 {
        self.programs.last().map_or(0, |p| u64::from(p.first) + p.blocks.len() as u64)
    }

    /// The blocks to arm in each node, when `r` measures them.
    fn node_blocks(&self, r: &ClusterReference) -> Option<Vec<Option<std::sync::Arc<BlockImage>>>> {
        (r.blocks != 0 && r.blocks == self.blocks_total())
            .then(|| self.node_program.iter().map(|p| p.map(|i| self.programs[i].blocks.clone())).collect())
    }

    /// The campaign's ids of the blocks `hits` of node `node`.
    fn global_ids<'h>(&'h self, node: usize, hits: &'h [BlockHit]) -> impl Iterator<Item = usize> + 'h {
        let first = self.node_program.get(node).copied().flatten().map(|i| self.programs[i].first);
        hits.iter().filter_map(move |h| first.map(|f| (f + h.block) as usize))
    }

    fn config(&self, seed: u64) -> ClusterConfig {
        let mut cfg = self.target.cfg.clone();
        cfg.seed = seed;
        cfg
    }
}

/// What a cluster campaign learned from its bootstrap.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterReference {
    /// The cluster seed of forked rounds.
    pub seed: u64,
    /// Where rounds fork (and take their steering).
    pub steer_at: SteerAt,
    /// Cluster decisions taken before it.
    pub base_decisions: u64,
    /// Its virtual time, ns.
    pub virtual_time_ns: u64,
    /// What each node of the untouched run offers to storage faults (fresh rounds draw from
    /// it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<crate::menu::NodeMenu>,
    /// The blocks of the nodes' programs when the campaign measures block coverage, else 0.
    #[serde(default)]
    pub blocks: u64,
}

/// A worker of a cluster campaign: its fork (none for independent runs), the blocks (by the
/// campaign's ids) its setup reached, which every round it forks reaches too, and how many of
/// the learned blocks it has taken out of it.
pub struct ClusterWorker {
    fork: Option<Fork>,
    setup: Vec<usize>,
    applied: usize,
}

/// What each node of a round offers to storage faults: the durable operations and the file
/// operations of the nodes storage faults may strike, each durable operation with the cluster
/// decision index at its time. A node that [offers](crate::menu::NodeMenu::offers) nothing
/// (it only read files) is left out.
pub fn node_menus(report: &ClusterReport) -> Vec<crate::menu::NodeMenu> {
    let index_at = |t: u64| report.decisions.iter().filter(|d| d.time_ns <= t).count() as u64;
    report
        .nodes
        .iter()
        .filter(|n| n.storage_faults)
        .map(|n| crate::menu::NodeMenu {
            node: n.name.clone(),
            durable: n
                .durable_ops()
                .into_iter()
                .take(crate::menu::MAX_NODE_POINTS)
                .map(|d| crate::menu::DurablePoint {
                    path: d.path,
                    nth: d.nth,
                    at: index_at(d.virtual_time_ns),
                    promotes: d.promotes,
                })
                .collect(),
            io_ops: n.io_ops(),
        })
        .filter(crate::menu::NodeMenu::offers)
        .collect()
}

impl Subject for ClusterSubject<'_> {
    type Input = ClusterInput;
    type Outcome = ClusterOutcome;
    type Worker = ClusterWorker;
    type Reference = ClusterReference;
    const KIND: &'static str = "cluster";

    fn identity(&self) -> Program {
        Program { path: self.target.path.clone(), blake3: self.target.file_blake3.clone() }
    }

    fn input_files(&self) -> Vec<&[u8]> {
        self.target.cfg.nodes.iter().flat_map(|n| n.files.values().map(Vec::as_slice)).collect()
    }

    fn bug_subject(&self) -> String {
        cluster_subject(&self.target.cfg.binary_hashes)
    }

    fn bootstrap(&self, cfg: &CampaignConfig) -> Result<(ClusterReference, Vec<ClusterOutcome>), ExploreError> {
        let mut r = ClusterReference { seed: cfg.seed, ..ClusterReference::default() };
        if cfg.strategy == Strategy::Coverage {
            r.blocks = self.blocks_total();
        }
        // The untouched run: what its nodes offer to storage faults, for fresh rounds. It is not
        // learned (the seed round is the campaign's first). With several workers it runs on a
        // thread of its own beside the fork: the two are independent.
        let untouched = || -> Result<Vec<crate::menu::NodeMenu>, ExploreError> {
            if !cfg.mode.faults() {
                return Ok(Vec::new());
            }
            let input = ClusterInput { seed: cfg.seed, ..ClusterInput::default() };
            Ok(node_menus(&run_cluster_input(self.target, &input, &mut |_, _, _| {})?.report))
        };
        let fork = || -> Result<Option<(u64, u64)>, ExploreError> {
            if cfg.strategy != Strategy::Coverage {
                return Ok(None);
            }
            let fork = Fork::new(self.config(cfg.seed), SteerAt::Setup, &mut |_, _, _| {}).map_err(cluster_err)?;
            Ok(fork.map(|f| (f.base_decisions, f.virtual_time_ns)))
        };
        let (nodes, forked) = if cfg.jobs > 1 {
            std::thread::scope(|s| {
                let beside = s.spawn(untouched);
                let forked = fork();
                let nodes = beside.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
                (nodes, forked)
            })
        } else {
            (untouched(), fork())
        };
        r.nodes = nodes?;
        if let Some((base_decisions, virtual_time_ns)) = forked? {
            r.steer_at = SteerAt::Setup;
            r.base_decisions = base_decisions;
            r.virtual_time_ns = virtual_time_ns;
        }
        Ok((r, Vec::new()))
    }

    fn base_decisions(r: &ClusterReference) -> u64 {
        r.base_decisions
    }

    fn origin(&self, _cfg: &CampaignConfig, r: &ClusterReference) -> ClusterInput {
        ClusterInput { seed: r.seed, steer_at: r.steer_at, ..ClusterInput::default() }
    }

    fn worker(&self, r: &ClusterReference, strategy: Strategy) -> Result<ClusterWorker, ExploreError> {
        if strategy == Strategy::Random {
            return Ok(ClusterWorker { fork: None, setup: Vec::new(), applied: 0 });
        }
        let blocks = self.node_blocks(r).unwrap_or_default();
        let fork =
            Fork::with_blocks(self.config(r.seed), r.steer_at, blocks, &mut |_, _, _| {}).map_err(cluster_err)?;
        match fork {
            Some((mut f, hits)) if f.base_decisions == r.base_decisions && f.virtual_time_ns == r.virtual_time_ns => {
                f.set_late_forks(self.late_forks);
                f.set_perturb(self.perturb);
                let mut setup: Vec<usize> =
                    hits.iter().enumerate().flat_map(|(node, h)| self.global_ids(node, h)).collect();
                setup.sort_unstable();
                setup.dedup();
                Ok(ClusterWorker { fork: Some(f), setup, applied: 0 })
            }
            _ => Err(ExploreError::ClusterNotDeterministic),
        }
    }

    fn run(
        &self,
        worker: &mut ClusterWorker,
        r: &ClusterReference,
        input: &ClusterInput,
    ) -> Result<ClusterOutcome, ExploreError> {
        let measured = self.node_blocks(r).is_some();
        match &mut worker.fork {
            Some(fork) if input.seed == r.seed && input.schedule.is_none() => {
                if measured {
                    // What the campaign learned since this worker's last round, out of every node
                    // running the program it belongs to.
                    let learned: Vec<u32> = match self.learned.lock() {
                        Ok(l) => l[worker.applied..].to_vec(),
                        Err(_) => Vec::new(),
                    };
                    worker.applied += learned.len();
                    for (node, program) in self.node_program.iter().enumerate() {
                        let Some(p) = program.map(|i| &self.programs[i]) else { continue };
                        let ids: Vec<u32> = learned
                            .iter()
                            .filter_map(|&id| id.checked_sub(p.first).filter(|&l| (l as usize) < p.blocks.len()))
                            .collect();
                        fork.disarm_blocks(node, &ids);
                    }
                }
                let report =
                    fork.run_child_at(&input.steering(), input.fork_at, &mut |_, _, _| {}).map_err(cluster_err)?;
                let mut out = outcome(report);
                if measured {
                    let mut map = vec![0u8; self.blocks_total() as usize];
                    let reached = out.report.nodes.iter().enumerate().flat_map(|(i, n)| self.global_ids(i, &n.blocks));
                    for id in worker.setup.iter().copied().chain(reached) {
                        if let Some(b) = map.get_mut(id) {
                            *b = 1;
                        }
                    }
                    out.blocks = map;
                }
                Ok(out)
            }
            _ => run_cluster_input(self.target, input, &mut |_, _, _| {}),
        }
    }

    fn learned_coverage(&self, indices: &[usize]) {
        if !self.programs.is_empty() {
            if let Ok(mut l) = self.learned.lock() {
                l.extend(indices.iter().map(|&i| i as u32));
            }
        }
    }

    fn block_coverage(
        &self,
        r: &ClusterReference,
        first_reached: &BTreeMap<u32, u64>,
    ) -> Option<deja_explore_report::BlockCoverage> {
        self.node_blocks(r)?;
        let parts: Vec<(&BlockImage, u32)> = self.programs.iter().map(|p| (&*p.blocks, p.first)).collect();
        let mut scope: Vec<String> = Vec::new();
        for s in self.programs.iter().flat_map(|p| p.scope.iter()) {
            if !scope.contains(s) {
                scope.push(s.clone());
            }
        }
        Some(crate::blockmap::summarize_all(&parts, first_reached, &scope))
    }

    fn confirm(
        &self,
        _r: &ClusterReference,
        input: &ClusterInput,
        out: &ClusterOutcome,
    ) -> Result<Option<String>, ExploreError> {
        let seen: Vec<u32> = out.report.nodes.iter().flat_map(|n| n.host_cores.iter().copied()).collect();
        let (core, again) =
            deja_vmm::identity::on_another_core(&seen, || run_cluster_input(self.target, input, &mut |_, _, _| {}))
                .map_err(deja_vmm::RunError::from)?;
        let again = again?;
        Ok(if again.report.digest != out.report.digest {
            let component = out.report.difference(&again.report).unwrap_or_else(|| "its digest".into());
            Some(format!(
                "the replay from scratch on host core {core} gave digest {} instead of {}: it differs in {component}",
                again.report.digest, out.report.digest
            ))
        } else if again.failure != out.failure {
            let words = again.failure.as_ref().map(FailureSignature::to_string);
            Some(format!("the replay from scratch on host core {core} failed differently: {words:?}"))
        } else {
            None
        })
    }

    fn facts(&self, out: &ClusterOutcome) -> Facts {
        let decisions = out
            .report
            .decisions
            .iter()
            .map(|d| {
                let fault = d.point.is_fault_point();
                Decision {
                    options: d.options,
                    choice: d.choice,
                    random: !fault,
                    fault,
                    structural: d.point.is_structural(),
                    cut: out.report.cuts.binary_search(&d.index).is_ok(),
                }
            })
            .collect();
        Facts {
            coverage: out.blocks.clone(),
            coverage_at: BTreeMap::new(),
            blocks: !out.blocks.is_empty(),
            failure: out.failure.clone(),
            semantic: out.features.clone(),
            decisions,
            assertions: out
                .report
                .nodes
                .iter()
                .flat_map(|n| n.lives.iter().flat_map(|l| l.assertions.iter().cloned()))
                .collect(),
            faults: out.report.faults.iter().map(|f| f.kind.clone()).collect(),
            nodes: node_menus(&out.report),
            fail_stops: out.report.nodes.iter().flat_map(|n| crate::fail_stops::of_lives(&n.name, &n.lives)).collect(),
            ..Facts::default()
        }
    }

    fn last_output(&self, out: &ClusterOutcome) -> Vec<String> {
        let mut lines = Vec::new();
        for n in &out.report.nodes {
            for text in [&n.stdout, &n.stderr] {
                let all: Vec<&str> = text.lines().collect();
                let tail = all.iter().skip(all.len().saturating_sub(LAST_LINES));
                lines.extend(tail.map(|l| format!("[{}] {l}", n.name)));
            }
        }
        lines
    }

    fn steering(input: &mut ClusterInput) -> (&mut BTreeMap<u64, u64>, &mut Option<u64>) {
        (&mut input.overrides, &mut input.reseed)
    }

    fn mutate_plan(
        &self,
        rng: &mut ChaCha20Rng,
        seeds: Seeds,
        input: &mut ClusterInput,
        parent: &Entry<ClusterInput>,
        r: &ClusterReference,
        mode: Mode,
        changed: bool,
    ) {
        // The storage menu: always when the decisions did not change, else half the time. (A
        // checkpoint of an older deja may keep nodes that offer nothing: they do not count.)
        let offered = mode.faults() && parent.nodes.iter().any(crate::menu::NodeMenu::offers);
        let storage = offered && (!changed || crate::menu::below(rng, 2) == 0);
        if storage {
            crate::menu::mutate_storage(rng, &mut input.storage, &parent.nodes, parent.focus);
        }
        // Nothing the mode may change was there to change: a new course from the fork point.
        if !changed && !storage {
            input.overrides.clear();
            input.reseed = Some(seeds.draw(rng));
        }
        input.fork_at = late_fork_at(parent, input, r.base_decisions, mode);
    }

    fn fresh(
        &self,
        rng: &mut ChaCha20Rng,
        seed: u64,
        r: &ClusterReference,
        strategy: Strategy,
        mode: Mode,
    ) -> ClusterInput {
        let storage = if mode.faults() { crate::menu::random_storage(rng, &r.nodes) } else { Vec::new() };
        match strategy {
            Strategy::Random => ClusterInput { seed, storage, ..ClusterInput::default() },
            Strategy::Coverage => ClusterInput {
                seed: r.seed,
                reseed: Some(seed),
                steer_at: r.steer_at,
                storage,
                ..ClusterInput::default()
            },
        }
    }

    fn fresh_every(&self) -> u64 {
        3
    }

    fn write_bug(
        &self,
        r: &ClusterReference,
        input: &ClusterInput,
        out: &ClusterOutcome,
        round: u64,
        path: &Path,
    ) -> Result<WrittenBug, ExploreError> {
        let mut bug = ClusterBug::new(self.target, input, out, round, &path.display().to_string());
        if input.seed == r.seed && input.steer_at == SteerAt::Setup {
            bug.forked_from = Some(ForkRecord {
                at: r.steer_at,
                virtual_time_ns: r.virtual_time_ns,
                base_decisions: r.base_decisions,
            });
        }
        bug.write(path)?;
        Ok(WrittenBug { reproduce: bug.reproduce, decisions: bug.decisions, window: bug.history, crash: None })
    }
}

/// Where a round mutated from `parent` leaves a later fork, or runs from the one its siblings
/// left ([`crate::campaign::late_anchor`]), when everything but its overrides is the parent's
/// (a reseed, other fates or other storage faults change the course from the fork point on).
pub fn late_fork_at(parent: &Entry<ClusterInput>, input: &ClusterInput, base: u64, mode: Mode) -> Option<u64> {
    let p = &parent.input;
    let same = input.seed == p.seed
        && input.reseed == p.reseed
        && input.steer_at == p.steer_at
        && input.fates == p.fates
        && input.storage == p.storage
        && input.schedule.is_none()
        && p.schedule.is_none();
    if !same {
        return None;
    }
    crate::campaign::late_anchor(parent, crate::campaign::first_change(&p.overrides, &input.overrides)?, base, mode)
}

fn cluster_err(e: deja_cluster::ClusterError) -> ExploreError {
    match e {
        deja_cluster::ClusterError::NoProgress { node, syscalls, .. } => {
            ExploreError::NoProgress { why: crate::no_progress_after(Some(&node), syscalls) }
        }
        source => ExploreError::Cluster { source: Box::new(source) },
    }
}

/// Runs (or continues) a cluster campaign and writes its files under `cfg.out`.
pub fn explore_cluster(
    target: &ClusterTarget,
    cfg: &CampaignConfig,
    progress: &mut dyn FnMut(&crate::Progress),
) -> Result<report::Campaign, ExploreError> {
    let subject = ClusterSubject::new(target, cfg.block_coverage, &cfg.cover)
        .with_late_forks(cfg.late_forks)
        .with_perturbed_forks(cfg.perturb_forks);
    crate::campaign::explore(&subject, cfg, progress)
}

/// A minimized cluster bug.
#[derive(Debug, Clone)]
pub struct MinimizedCluster {
    /// The minimized bug (verified by a replay).
    pub bug: ClusterBug,
    /// Runs it took.
    pub tests: u64,
}

/// Describes a scheduled fault for people.
pub fn describe_fault(f: &ScheduledFault) -> String {
    let what = f.action.name();
    let mut s = format!("{what} at {} ms", f.at_ms);
    if !f.groups.is_empty() {
        let g: Vec<String> = f.groups.iter().map(|g| format!("[{}]", g.join(","))).collect();
        s.push_str(&format!(" {}", g.join(" | ")));
    }
    if !f.from.is_empty() {
        s.push_str(&format!(" [{}] -> [{}]", f.from.join(","), f.to.join(",")));
    }
    if let Some(n) = &f.node {
        s.push_str(&format!(" {n}"));
    }
    s
}

/// One fault of a cluster bug, as minimization and `deja check` see it: a timed one of the
/// schedule, or a storage fault by meaning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BugFault {
    /// Partitions, heals, kills, restarts, pauses, clock faults, at their times.
    Timed(ScheduledFault),
    /// A crash at a durable operation, or an I/O error, of one node.
    Storage(StorageFault),
}

impl BugFault {
    /// In words.
    pub fn describe(&self) -> String {
        match self {
            BugFault::Timed(f) => describe_fault(f),
            BugFault::Storage(s) => s.describe(),
        }
    }
}

impl ClusterBug {
    /// The bug's faults as a schedule of timed faults and storage faults: its input's schedule,
    /// or, when it ran the file's faults, every fault its ledger can state at its time (the
    /// random ones too) and the file's storage faults; then the input's storage faults.
    pub fn fault_list(&self, target: &ClusterTarget) -> Vec<BugFault> {
        let timed: Vec<ScheduledFault> = match &self.input.schedule {
            Some(s) => s.clone(),
            None => self.faults.iter().filter_map(|f| f.scripted.clone()).collect(),
        };
        let file_storage = if self.input.schedule.is_none() { target.cfg.storage.faults.clone() } else { Vec::new() };
        let storage = file_storage.into_iter().chain(self.input.storage.iter().cloned());
        timed.into_iter().map(BugFault::Timed).chain(storage.map(BugFault::Storage)).collect()
    }
}

/// `input` with exactly `faults` in place of its faults: the timed ones as its schedule, the
/// storage ones as its storage faults (the file's own faults are left out).
pub fn with_faults(input: &ClusterInput, faults: &[BugFault]) -> ClusterInput {
    let mut schedule = Vec::new();
    let mut storage = Vec::new();
    for f in faults {
        match f {
            BugFault::Timed(t) => schedule.push(t.clone()),
            BugFault::Storage(s) => storage.push(s.clone()),
        }
    }
    ClusterInput { schedule: Some(schedule), storage, ..input.clone() }
}

/// A cluster bug's faults in groups that stand or fall together, in the order of their first
/// fault: each heal with every cut (partition, one-way partition) since the previous heal; each
/// restart with the kill of its node before it, each resume with the pause of its node before
/// it. A fault without a partner (a clock jump, a storage fault, a cut never healed) is a group
/// of its own, so removing a group never leaves a cut, a kill or a pause its run had undone.
pub fn fault_groups(faults: &[BugFault]) -> Vec<Vec<BugFault>> {
    use deja_cluster::config::Action;
    let mut groups: Vec<Vec<BugFault>> = Vec::new();
    // Open cuts (group indices) since the last heal; the open kill and pause of each node.
    let mut cuts: Vec<usize> = Vec::new();
    let mut down: BTreeMap<String, usize> = BTreeMap::new();
    let mut paused: BTreeMap<String, usize> = BTreeMap::new();
    for f in faults {
        let BugFault::Timed(t) = f else {
            groups.push(vec![f.clone()]);
            continue;
        };
        let node = t.node.clone().unwrap_or_default();
        let partner = match t.action {
            Action::Heal if !cuts.is_empty() => {
                let first = cuts[0];
                // Every cut since the last heal joins the first one's group, then the heal.
                for &g in cuts[1..].iter().rev() {
                    let moved = std::mem::take(&mut groups[g]);
                    groups[first].extend(moved);
                }
                cuts.clear();
                Some(first)
            }
            Action::Restart => down.remove(&node),
            Action::Resume => paused.remove(&node),
            _ => None,
        };
        match partner {
            Some(g) => groups[g].push(f.clone()),
            None => {
                groups.push(vec![f.clone()]);
                let g = groups.len() - 1;
                match t.action {
                    Action::Partition | Action::PartitionOneWay => cuts.push(g),
                    Action::Kill => {
                        down.insert(node, g);
                    }
                    Action::Pause => {
                        paused.insert(node, g);
                    }
                    _ => {}
                }
            }
        }
    }
    groups.retain(|g| !g.is_empty());
    for g in &mut groups {
        // Within a group, in schedule order.
        g.sort_by_key(|f| match f {
            BugFault::Timed(t) => t.at_ms,
            BugFault::Storage(_) => 0,
        });
    }
    groups
}

/// Minimizes a cluster bug: its failing run's faults (the timed ones as a schedule, the file's
/// random faults and the overrides dropped; the storage faults by meaning) are cut down by
/// ddmin to a smallest subset that still fails with the same signature. The result is replayed
/// once more to verify it.
pub fn minimize_cluster(
    bug: &ClusterBug,
    target: &ClusterTarget,
    new_file: &str,
) -> Result<MinimizedCluster, ExploreError> {
    let all = bug.fault_list(target);
    let mut tests = 0u64;
    // The overrides go (their decisions move once the faults are fixed); the seed and the reseed
    // at the steering point stay.
    let base = ClusterInput { overrides: BTreeMap::new(), ..bug.input.clone() };
    let mut fails = |faults: &[BugFault]| -> Result<bool, ExploreError> {
        tests += 1;
        let out = run_cluster_input(target, &with_faults(&base, faults), &mut |_, _, _| {})?;
        Ok(out.failure.as_ref().is_some_and(|f| f.is_the_failure(&bug.signature)))
    };
    ensure!(fails(&all)?, crate::ScheduleDoesNotReproduceSnafu { bug: &bug.id, faults: all.len() });
    // A cut and its heal, a kill and its restart, a pause and its resume are one element: a
    // minimized schedule never leaves a cut the original healed, or a node down it restarted.
    let groups = fault_groups(&all);
    // Groups back to one schedule, each fault where it was in the original.
    let in_order = |gs: &[Vec<BugFault>]| {
        let mut v = gs.concat();
        v.sort_by_key(|f| all.iter().position(|a| a == f));
        v
    };
    let mut group_fails = |gs: &[Vec<BugFault>]| fails(&in_order(gs));
    let kept = in_order(&crate::minimize::ddmin(&groups, &mut group_fails)?);
    let input = with_faults(&base, &kept);
    let out = run_cluster_input(target, &input, &mut |_, _, _| {})?;
    tests += 1;
    ensure!(
        out.failure.as_ref().is_some_and(|f| f.is_the_failure(&bug.signature)),
        crate::MinimizedDoesNotFailSnafu { what: "schedule" }
    );
    let mut min = ClusterBug::new(target, &input, &out, bug.found_at_round, new_file);
    min.forked_from = bug.forked_from.clone();
    min.minimized_from = Some(crate::replayed_file(&bug.reproduce).to_string());
    min.removed = all.iter().filter(|f| !kept.contains(f)).map(BugFault::describe).collect();
    Ok(MinimizedCluster { bug: min, tests })
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
        };
        let doc = crate::signature::as_older_deja_wrote_it(serde_json::to_value(&bug).unwrap(), signature);
        CLUSTER_BUG_SCHEMA.to_bytes(&doc)
    }

    fn timed(at_ms: u64, action: deja_cluster::config::Action, node: Option<&str>) -> BugFault {
        BugFault::Timed(ScheduledFault {
            at_ms,
            action,
            groups: Vec::new(),
            from: Vec::new(),
            to: Vec::new(),
            node: node.map(str::to_string),
            ms: 0,
        })
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
