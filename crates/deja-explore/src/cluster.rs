//! Exploring clusters.
//!
//! A cluster is not forked: every round boots the whole cluster and runs it to its end, steered
//! by a [`ClusterInput`]: the cluster seed, overrides of the cluster's decisions (network
//! latencies, node order at equal times, UDP faults, the random faults' times, sides, lengths
//! and targets), and optionally a scripted fault schedule that replaces the file's faults.
//!
//! Coverage of a cluster round is behavioural: each node's distinct output lines with their
//! numbers masked (`became leader term #`, `discarded [#] adopting log of #.#.#.#:# term #`),
//! each SDK assertion's outcome per node, and the kinds of fault that happened; plus, for nodes
//! built with `deja build --coverage`, each SanitizerCoverage edge and its AFL bucket. A round
//! that shows a feature never seen before joins the corpus.
//!
//! The coverage strategy picks a corpus entry (new features weigh more, frequent picks less)
//! and overrides one to three of its decisions: in `faults` mode the fault decisions, in
//! `random` mode the latency and ordering decisions, in `both` any. The random strategy runs
//! independent seeds without overrides. A failure (a failed SDK assertion on any node, a waited
//! node that failed, a cluster that got stuck) is confirmed by a second run with the same digest
//! and written as `bug-<id>.json` ([`ClusterBug`]). [`minimize_cluster`] turns the failing run's
//! faults into a schedule and cuts it down with ddmin.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

use deja_cluster::config::ScheduledFault;
use deja_cluster::{ClusterConfig, ClusterReport, FaultEvent, Outcome, RunOptions};
use deja_explore_report as report;
use rand_chacha::rand_core::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};

use crate::campaign::{
    bug_id, energy, fold_assertions, io_err, keep, pick_weighted, write_json, Books, CampaignConfig, Coverage, Mode,
    Program, Progress, Strategy,
};
use crate::ExploreError;

/// The cluster under exploration.
#[derive(Debug, Clone)]
pub struct ClusterTarget {
    /// The loaded cluster file.
    pub cfg: ClusterConfig,
    /// Its path, as given.
    pub path: String,
    /// BLAKE3 of the file's text.
    pub file_blake3: String,
}

impl ClusterTarget {
    /// Loads a cluster file.
    pub fn load(path: &Path) -> Result<ClusterTarget, ExploreError> {
        let cfg = ClusterConfig::load(path).map_err(|e| ExploreError::Invalid(e.to_string()))?;
        Ok(ClusterTarget { file_blake3: cfg.file_blake3.clone(), cfg, path: path.display().to_string() })
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
    /// When set, these faults replace the file's scripted and random faults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<Vec<ScheduledFault>>,
}

/// What one cluster round showed.
#[derive(Debug, Clone)]
pub struct ClusterOutcome {
    /// The report.
    pub report: ClusterReport,
    /// The failure signature, if the round failed.
    pub failure: Option<String>,
    /// Behavioural features (see the module documentation).
    pub features: BTreeSet<u64>,
}

use crate::features::{feature, template};

/// The failure signature of a report, if it failed.
pub fn cluster_failure(r: &ClusterReport) -> Option<String> {
    let mut failed: Vec<String> = Vec::new();
    for n in &r.nodes {
        for l in &n.lives {
            for a in &l.assertions {
                if a.status == deja_kernel::AssertionStatus::Failed {
                    failed.push(format!("assertion failed on {}: {}", n.name, a.message));
                }
            }
        }
    }
    failed.sort();
    failed.dedup();
    if !failed.is_empty() {
        return Some(failed.join("; "));
    }
    if let Outcome::Stuck(_) = r.outcome {
        return Some("the cluster got stuck".into());
    }
    r.first_failure().map(|(node, e)| match e {
        deja_kernel::ExitStatus::Exited { code } => format!("node {node} exited with {code}"),
        deja_kernel::ExitStatus::Signaled { name, .. } => format!("node {node} died of {name}"),
    })
}

/// Runs one round.
pub fn run_cluster_input(
    target: &ClusterTarget,
    input: &ClusterInput,
    sink: &mut dyn FnMut(&str, deja_kernel::Stream, &[u8]),
) -> Result<ClusterOutcome, ExploreError> {
    let mut cfg = target.cfg.clone();
    cfg.seed = input.seed;
    if let Some(s) = &input.schedule {
        cfg.schedule = s.clone();
        cfg.random_faults = None;
    }
    let report = deja_cluster::run(
        cfg,
        RunOptions { sink, overrides: input.overrides.clone(), reseed: None, record_trace: false },
    )
    .map_err(|e| ExploreError::Invalid(e.to_string()))?;
    let mut features = BTreeSet::new();
    for n in &report.nodes {
        for line in n.stdout.lines() {
            features.insert(feature(&["line", &n.name, &template(line)]));
        }
        for l in &n.lives {
            for a in &l.assertions {
                let status = format!("{:?}", a.status);
                features.insert(feature(&["assertion", &n.name, &a.message, &status]));
            }
            // Edge coverage of a node built with `deja build --coverage`: edge and AFL bucket.
            for (i, b) in l.coverage.iter().flat_map(|c| c.map.iter().enumerate()) {
                if *b != 0 {
                    features.insert(feature(&["edge", &n.name, &i.to_string(), &b.to_string()]));
                }
            }
        }
    }
    for f in &report.faults {
        features.insert(feature(&["fault", &f.kind]));
    }
    let failure = cluster_failure(&report);
    Ok(ClusterOutcome { report, failure, features })
}

/// A cluster failure, frozen.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterBug {
    /// `deja.cluster-bug/1`.
    pub schema: String,
    /// First 12 hex digits of the signature's BLAKE3.
    pub id: String,
    /// What failed.
    pub signature: String,
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
}

/// The schema of cluster bug files.
pub const CLUSTER_BUG_SCHEMA: &str = "deja.cluster-bug/1";

impl ClusterBug {
    fn new(target: &ClusterTarget, input: &ClusterInput, out: &ClusterOutcome, round: u64, file: &str) -> Self {
        let signature = out.failure.clone().unwrap_or_default();
        ClusterBug {
            schema: CLUSTER_BUG_SCHEMA.into(),
            id: bug_id(&signature),
            signature,
            cluster: target.path.clone(),
            cluster_blake3: target.file_blake3.clone(),
            binaries: target.cfg.binary_hashes.clone(),
            input: input.clone(),
            decisions: out.report.decisions.len() as u64,
            faults: out.report.faults.clone(),
            digest: out.report.digest.clone(),
            found_at_round: round,
            reproduce: format!("deja replay {file}"),
            minimized_from: None,
            removed: Vec::new(),
            host: deja_vmm::identity::host().ok().map(|h| h.fingerprint.clone()),
        }
    }

    /// Reads a cluster bug file.
    pub fn read(path: &Path) -> Result<ClusterBug, ExploreError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ExploreError::File { path: path.display().to_string(), message: e.to_string() })?;
        let bug: ClusterBug = serde_json::from_str(&text)
            .map_err(|e| ExploreError::Invalid(format!("{}: not a deja cluster bug file: {e}", path.display())))?;
        if bug.schema != CLUSTER_BUG_SCHEMA {
            return Err(ExploreError::Invalid(format!("{}: unknown schema {:?}", path.display(), bug.schema)));
        }
        Ok(bug)
    }

    /// Writes it atomically.
    pub fn write(&self, path: &Path) -> Result<(), ExploreError> {
        let text = serde_json::to_vec_pretty(self).expect("plain data serializes");
        deja_format::write_atomic(path, &text)
            .map_err(|e| ExploreError::File { path: path.display().to_string(), message: e.to_string() })
    }

    /// Loads the cluster this bug needs (from `path`, or where the bug says) and refuses one
    /// whose binaries differ.
    pub fn target(&self, path: Option<&Path>) -> Result<ClusterTarget, ExploreError> {
        let p = path.map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from(&self.cluster));
        let t = ClusterTarget::load(&p)?;
        if t.cfg.binary_hashes != self.binaries {
            return Err(ExploreError::Invalid(format!(
                "the binaries of {} are not the ones of this bug (rebuilt or changed since)",
                p.display()
            )));
        }
        Ok(t)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Entry {
    input: ClusterInput,
    new_features: u64,
    picks: u64,
    /// The behaviours its run showed.
    #[serde(default)]
    features: Vec<u64>,
    /// (point, options) of each decision of its run.
    decisions: Vec<(String, u64)>,
    found_round: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct State {
    schema: String,
    cluster_blake3: String,
    strategy: Strategy,
    mode: Mode,
    seed: u64,
    #[serde(flatten)]
    books: Books,
    rng: ChaCha20Rng,
    features: BTreeSet<u64>,
    /// In how many rounds each behaviour showed.
    #[serde(default)]
    hits: BTreeMap<u64, u64>,
    corpus: Vec<Entry>,
}

fn is_fault_point(p: &str) -> bool {
    ["partition", "kill", "down", "pause", "clock", "udp"].iter().any(|k| p.starts_with(k))
}

fn eligible(point: &str, mode: Mode) -> bool {
    match mode {
        Mode::Faults => is_fault_point(point),
        Mode::Random => !is_fault_point(point),
        Mode::Both => true,
    }
}

/// Decisions that choose *which* fault (its sides, direction or target) rather than when.
fn is_structural(p: &str) -> bool {
    p.ends_with("sides") || p.ends_with("one way") || p.ends_with("direction") || p.ends_with("target")
}

/// Overrides one decision of the parent's run (two, one time in four). Half of the picks go to
/// the decisions that choose which fault happens, when there are any: a different partition
/// keeps the parent's timing, a different gap shifts every later fault.
fn mutate(rng: &mut ChaCha20Rng, parent: &Entry, mode: Mode) -> ClusterInput {
    let mut input = parent.input.clone();
    let candidates: Vec<(usize, u64, bool)> = parent
        .decisions
        .iter()
        .enumerate()
        .filter(|(_, (p, o))| *o > 1 && eligible(p, mode))
        .map(|(i, (p, o))| (i, *o, is_structural(p)))
        .collect();
    if candidates.is_empty() {
        input.seed = rng.next_u64();
        input.overrides.clear();
        return input;
    }
    let structural: Vec<&(usize, u64, bool)> = candidates.iter().filter(|c| c.2).collect();
    let n = if rng.next_u64().is_multiple_of(4) { 2 } else { 1 };
    for _ in 0..n {
        let &(i, options, _) = if !structural.is_empty() && rng.next_u64().is_multiple_of(2) {
            structural[(rng.next_u64() % structural.len() as u64) as usize]
        } else {
            &candidates[(rng.next_u64() % candidates.len() as u64) as usize]
        };
        input.overrides.insert(i as u64, rng.next_u64() % options);
    }
    input
}

fn learn(state: &mut State, out: &ClusterOutcome) -> u64 {
    let mut new = 0;
    for f in &out.features {
        if state.features.insert(*f) {
            new += 1;
        }
        *state.hits.entry(*f).or_default() += 1;
    }
    for n in &out.report.nodes {
        for l in &n.lives {
            fold_assertions(&mut state.books.assertions, &l.assertions);
        }
    }
    new
}

/// Picks a corpus entry by its [`energy`].
fn pick(state: &mut State) -> usize {
    let weights: Vec<u64> =
        state.corpus.iter().map(|e| energy(&e.features, &state.hits, e.new_features, e.picks)).collect();
    pick_weighted(&mut state.rng, &weights)
}

/// Runs (or continues) a cluster campaign and writes its files under `cfg.out`.
pub fn explore_cluster(
    target: &ClusterTarget,
    cfg: &CampaignConfig,
    progress: &mut dyn FnMut(&Progress),
) -> Result<report::Campaign, ExploreError> {
    let started = Instant::now();
    std::fs::create_dir_all(cfg.out.join("corpus")).map_err(|e| io_err(&cfg.out, e))?;
    let checkpoint = cfg.out.join("checkpoint.json");
    let mut state = if checkpoint.exists() {
        if !cfg.resume {
            return Err(ExploreError::Invalid(format!(
                "{} already holds a campaign; add --resume to continue it or choose another --out",
                cfg.out.display()
            )));
        }
        let text = std::fs::read_to_string(&checkpoint).map_err(|e| io_err(&checkpoint, e))?;
        let s: State = serde_json::from_str(&text).map_err(|e| {
            ExploreError::Invalid(format!("{}: damaged or foreign checkpoint: {e}", checkpoint.display()))
        })?;
        if s.cluster_blake3 != target.file_blake3 || s.strategy != cfg.strategy || s.mode != cfg.mode {
            return Err(ExploreError::Invalid(format!(
                "{} belongs to another cluster file, strategy or mode; it cannot be resumed with these",
                checkpoint.display()
            )));
        }
        s
    } else {
        State {
            schema: "deja.cluster-checkpoint/1".into(),
            cluster_blake3: target.file_blake3.clone(),
            strategy: cfg.strategy,
            mode: cfg.mode,
            seed: cfg.seed,
            books: Books::default(),
            rng: ChaCha20Rng::seed_from_u64(cfg.seed),
            features: BTreeSet::new(),
            hits: BTreeMap::new(),
            corpus: Vec::new(),
        }
    };
    state.books.adopt_host(&checkpoint)?;
    while let Some(round) = state.books.next_round(cfg, started) {
        let input = match cfg.strategy {
            Strategy::Random => ClusterInput { seed: state.rng.next_u64(), ..Default::default() },
            Strategy::Coverage if state.corpus.is_empty() => ClusterInput { seed: cfg.seed, ..Default::default() },
            // Every third round explores a fresh seed; the others mutate the corpus.
            Strategy::Coverage if state.rng.next_u64().is_multiple_of(3) => {
                ClusterInput { seed: state.rng.next_u64(), ..Default::default() }
            }
            Strategy::Coverage => {
                let i = pick(&mut state);
                state.corpus[i].picks += 1;
                let parent = state.corpus[i].clone();
                mutate(&mut state.rng, &parent, cfg.mode)
            }
        };
        let out = run_cluster_input(target, &input, &mut |_, _, _| {})?;
        let new = learn(&mut state, &out);
        let kept = new > 0 && cfg.strategy == Strategy::Coverage;
        if kept {
            let entry = Entry {
                input: input.clone(),
                new_features: new,
                picks: 0,
                features: out.features.iter().copied().collect(),
                decisions: out.report.decisions.iter().map(|d| (d.point.clone(), d.options)).collect(),
                found_round: round,
            };
            keep(&cfg.out, &mut state.corpus, entry)?;
        }
        if let Some(sig) = state.books.unseen(out.failure.as_ref()) {
            let seen: Vec<u32> = out.report.nodes.iter().flat_map(|n| n.host_cores.iter().copied()).collect();
            let (core, again) =
                deja_vmm::identity::on_another_core(&seen, || run_cluster_input(target, &input, &mut |_, _, _| {}))
                    .map_err(deja_vmm::RunError::from)?;
            let again = again?;
            let difference = if again.report.digest != out.report.digest {
                Some(format!(
                    "the replay on host core {core} gave digest {} instead of {}",
                    again.report.digest, out.report.digest
                ))
            } else if again.failure != out.failure {
                Some(format!("the replay on host core {core} failed differently: {:?}", again.failure))
            } else {
                None
            };
            state.books.settle(sig, difference, &cfg.out, |path| {
                let bug = ClusterBug::new(target, &input, &out, round, &path.display().to_string());
                bug.write(path)?;
                Ok((bug.reproduce, bug.decisions))
            })?;
        }
        let p = Progress {
            round,
            edges: 0,
            semantic: state.features.len() as u64,
            corpus: state.corpus.len() as u64,
            bugs: state.books.bugs.len() as u64,
        };
        if state.books.end_round(p, kept, progress) {
            write_json(&checkpoint, &state)?;
        }
    }
    state.books.wall_seconds += started.elapsed().as_secs_f64();
    write_json(&checkpoint, &state)?;
    let coverage =
        Coverage { corpus: state.corpus.len() as u64, edges_total: 0, edges_hit: state.features.len() as u64 };
    let program = Program { path: target.path.clone(), blake3: target.file_blake3.clone() };
    Ok(state.books.campaign(cfg, &program, state.seed, coverage))
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
    let what = serde_json::to_value(f.action).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default();
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

/// Minimizes a cluster bug: its failing run's faults become a schedule (the file's random
/// faults and the overrides are dropped), which ddmin cuts down to a smallest subset that still
/// fails with the same signature. The result is replayed once more to verify it.
pub fn minimize_cluster(
    bug: &ClusterBug,
    target: &ClusterTarget,
    new_file: &str,
) -> Result<MinimizedCluster, ExploreError> {
    let all: Vec<ScheduledFault> = match &bug.input.schedule {
        Some(s) => s.clone(),
        None => bug.faults.iter().filter_map(|f| f.scripted.clone()).collect(),
    };
    let mut tests = 0u64;
    let seed = bug.input.seed;
    let mut fails = |faults: &[ScheduledFault]| -> Result<bool, ExploreError> {
        tests += 1;
        let input = ClusterInput { seed, overrides: BTreeMap::new(), schedule: Some(faults.to_vec()) };
        let out = run_cluster_input(target, &input, &mut |_, _, _| {})?;
        Ok(out.failure.as_deref() == Some(bug.signature.as_str()))
    };
    if !fails(&all)? {
        return Err(ExploreError::Invalid(format!(
            "bug {}: its {} faults as a fixed schedule do not fail the same way (the failure also depends on \
             the random faults' decisions); not minimized",
            bug.id,
            all.len()
        )));
    }
    let kept = crate::minimize::ddmin(&all, &mut fails)?;
    let input = ClusterInput { seed, overrides: BTreeMap::new(), schedule: Some(kept.clone()) };
    let out = run_cluster_input(target, &input, &mut |_, _, _| {})?;
    tests += 1;
    if out.failure.as_deref() != Some(bug.signature.as_str()) {
        return Err(ExploreError::Invalid("the minimized schedule did not fail again on replay".into()));
    }
    let mut min = ClusterBug::new(target, &input, &out, bug.found_at_round, new_file);
    min.minimized_from = Some(bug.reproduce.trim_start_matches("deja replay ").to_string());
    min.removed = all.iter().filter(|f| !kept.contains(f)).map(describe_fault).collect();
    Ok(MinimizedCluster { bug: min, tests })
}

#[cfg(test)]
mod tests {
    use super::template;

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
