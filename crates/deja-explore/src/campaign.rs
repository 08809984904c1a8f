//! The campaign loop: bootstrap, pick, mutate, fork, run, learn; checkpoints and reports.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use deja_explore_report as report;
use deja_kernel::AssertionReport;
use deja_vmm::Fork;
use rand_chacha::rand_core::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};

use crate::input::{run_fresh, run_on_fork, BugFile, Input, Outcome, Target};
use crate::ExploreError;

/// How rounds choose their runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// Coverage-guided: mutate corpus entries, fork from the setup snapshot.
    Coverage,
    /// The baseline: independent seeds, no coverage feedback, no forking.
    Random,
}

/// What mutations may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Fault placement only: crash points, torn/reordered writes, EIO.
    Faults,
    /// Random-choice branching only: SDK random values and choices.
    Random,
    /// Both.
    Both,
}

impl Mode {
    fn faults(self) -> bool {
        matches!(self, Mode::Faults | Mode::Both)
    }
    fn random(self) -> bool {
        matches!(self, Mode::Random | Mode::Both)
    }
}

/// A campaign's settings.
#[derive(Debug, Clone)]
pub struct CampaignConfig {
    /// Stop after this many rounds in total (counting resumed ones).
    pub runs: Option<u64>,
    /// Stop after this much wall time in this invocation.
    pub budget: Option<Duration>,
    /// Seed of the explorer's own choices.
    pub seed: u64,
    /// Output directory.
    pub out: PathBuf,
    /// Continue the campaign in `out`.
    pub resume: bool,
    /// Coverage-guided or random.
    pub strategy: Strategy,
    /// What to mutate.
    pub mode: Mode,
    /// Stop at the first confirmed bug (for measuring time to the first bug).
    pub stop_at_first_bug: bool,
}

/// Shown after every round.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    /// Rounds done.
    pub round: u64,
    /// Edges hit (SanitizerCoverage) so far.
    pub edges: u64,
    /// Semantic edges (assertion outcomes) so far.
    pub semantic: u64,
    /// Corpus size.
    pub corpus: u64,
    /// Distinct bugs.
    pub bugs: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Entry {
    input: Input,
    new_edges: u64,
    picks: u64,
    durable_writes: u64,
    /// Options of each decision of its run's first life, by index.
    options: Vec<u64>,
    /// The choice each decision of its run's first life took, by index.
    #[serde(default)]
    choices: Vec<u64>,
    /// Where its new behaviour first showed (see [`Novelty::focus`]).
    #[serde(default)]
    focus: Option<u64>,
    /// The semantic edges its run showed.
    #[serde(default)]
    features: Vec<u64>,
    found_round: u64,
    /// Its run's file operations (where errors can be placed).
    #[serde(default)]
    io_ops: Vec<deja_kernel::IoCount>,
    /// Operations pending when its run crashed.
    #[serde(default)]
    pending_at_crash: Option<u64>,
}

impl Entry {
    fn new(input: Input, out: &Outcome, novelty: Novelty, round: u64) -> Entry {
        // Only the first life takes the input's overrides: a life after an injected crash is a
        // new core with a log of its own.
        let steerable = &out.lives[0].run.report.decisions;
        Entry {
            input,
            new_edges: novelty.new,
            picks: 0,
            durable_writes: out.durable_writes,
            options: steerable.iter().map(|d| d.options).collect(),
            choices: steerable.iter().map(|d| d.choice).collect(),
            focus: novelty.focus,
            features: out.semantic.keys().copied().collect(),
            found_round: round,
            io_ops: out.io_ops.clone(),
            pending_at_crash: out.pending_at_crash,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct State {
    schema: String,
    program_blake3: String,
    strategy: Strategy,
    mode: Mode,
    seed: u64,
    #[serde(flatten)]
    books: Books,
    rng: ChaCha20Rng,
    fork_at: u64,
    base_decisions: u64,
    reference_durable_writes: u64,
    /// The reference run's file operations (the baseline's menu).
    #[serde(default)]
    reference_io_ops: Vec<deja_kernel::IoCount>,
    virgin: Vec<u8>,
    semantic: BTreeSet<u64>,
    /// Runs that showed each semantic edge.
    #[serde(default)]
    hits: BTreeMap<u64, u64>,
    /// The earliest decision index at which each progress edge has shown.
    #[serde(default)]
    earliest: BTreeMap<u64, u64>,
    corpus: Vec<Entry>,
}

/// The result of a campaign (what the reports show).
pub type Campaign = report::Campaign;

/// The bookkeeping both explorers share: rounds, bugs, the timeline and the assertion lines.
/// It is part of each explorer's checkpoint.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Books {
    pub(crate) round: u64,
    pub(crate) bugs: Vec<report::BugSummary>,
    pub(crate) signatures: BTreeSet<String>,
    pub(crate) unconfirmed: BTreeSet<String>,
    /// Why each unconfirmed failure was not confirmed, and in which round.
    #[serde(default)]
    pub(crate) unconfirmed_why: BTreeMap<String, (u64, String)>,
    pub(crate) timeline: Vec<report::RoundPoint>,
    pub(crate) assertions: BTreeMap<String, report::AssertionLine>,
    pub(crate) wall_seconds: f64,
    /// The CPU fingerprint of the host the campaign runs on.
    #[serde(default)]
    pub(crate) host: Option<deja_vmm::Fingerprint>,
    /// Bugs when the current round started.
    #[serde(skip)]
    bugs_at_start: usize,
}

impl Books {
    /// Records this host's fingerprint in a new campaign, or checks that a resumed one was
    /// started on a host with the same fingerprint: its corpus and decisions are only worth
    /// continuing where runs come out the same.
    pub(crate) fn adopt_host(&mut self, checkpoint: &Path) -> Result<(), ExploreError> {
        let here = deja_vmm::identity::host().map_err(deja_vmm::RunError::from)?.fingerprint.clone();
        match &self.host {
            Some(recorded) if *recorded != here => Err(ExploreError::Invalid(format!(
                "{} was started on a host with CPU fingerprint {}, and this host is {} ({}); resume it there, \
                 or start a new campaign here",
                checkpoint.display(),
                recorded.id,
                here.id,
                here.differences(recorded).join("; ")
            ))),
            _ => {
                self.host = Some(here);
                Ok(())
            }
        }
    }

    /// Starts the next round, or returns `None` when the campaign is over: its rounds are
    /// done, its time is up, or it stops at the first bug and has one.
    pub(crate) fn next_round(&mut self, cfg: &CampaignConfig, started: Instant) -> Option<u64> {
        let done_runs = cfg.runs.is_some_and(|n| self.round >= n);
        let done_time = cfg.budget.is_some_and(|b| started.elapsed() >= b);
        let done_bug = cfg.stop_at_first_bug && !self.bugs.is_empty();
        if done_runs || done_time || done_bug || (cfg.runs.is_none() && cfg.budget.is_none()) {
            return None;
        }
        self.round += 1;
        self.bugs_at_start = self.bugs.len();
        Some(self.round)
    }

    /// The signature of a failure not met before, which needs confirming.
    pub(crate) fn unseen(&self, failure: Option<&String>) -> Option<String> {
        failure.filter(|s| !self.signatures.contains(*s) && !self.unconfirmed.contains(*s)).cloned()
    }

    /// Settles a new failure: when the confirming replay found no `difference`, `write` writes
    /// its bug file at the path given and returns the reproduce command and the number of
    /// decisions; otherwise it is set aside as unconfirmed, with the difference.
    pub(crate) fn settle(
        &mut self,
        sig: String,
        difference: Option<String>,
        out: &Path,
        write: impl FnOnce(&Path) -> Result<(String, u64), ExploreError>,
    ) -> Result<(), ExploreError> {
        if let Some(why) = difference {
            self.unconfirmed_why.insert(sig.clone(), (self.round, why));
            self.unconfirmed.insert(sig);
            return Ok(());
        }
        let id = bug_id(&sig);
        let file = format!("bug-{id}.json");
        let (reproduce, decisions) = write(&out.join(&file))?;
        self.signatures.insert(sig.clone());
        self.bugs.push(report::BugSummary {
            id,
            signature: sig,
            first_round: self.round,
            file,
            reproduce,
            decisions,
            minimized: None,
        });
        Ok(())
    }

    /// Ends a round: a point on the timeline and a progress report. Returns whether a
    /// checkpoint is due: every 25 rounds, and whenever the corpus grew (`kept`) or a bug was
    /// found, so a killed explorer loses neither (the rounds after the last checkpoint are
    /// replayed identically on `--resume`).
    pub(crate) fn end_round(&mut self, p: Progress, kept: bool, progress: &mut dyn FnMut(&Progress)) -> bool {
        self.timeline.push(report::RoundPoint {
            round: p.round,
            edges_hit: p.edges + p.semantic,
            corpus_size: p.corpus,
            bugs: p.bugs,
        });
        progress(&p);
        p.round.is_multiple_of(25) || kept || self.bugs.len() != self.bugs_at_start
    }

    /// The campaign as the reports show it.
    pub(crate) fn campaign(&self, cfg: &CampaignConfig, program: &Program, seed: u64, coverage: Coverage) -> Campaign {
        report::Campaign {
            program: program.path.clone(),
            program_blake3: program.blake3.clone(),
            strategy: match cfg.strategy {
                Strategy::Coverage => "coverage".into(),
                Strategy::Random => "random".into(),
            },
            mode: serde_json::to_value(cfg.mode).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default(),
            seed,
            rounds: self.round,
            wall_seconds: self.wall_seconds,
            corpus_size: coverage.corpus,
            edges_total: coverage.edges_total,
            edges_hit: coverage.edges_hit,
            timeline: self.timeline.clone(),
            bugs: self.bugs.clone(),
            assertions: self.assertions.values().cloned().collect(),
            baseline: None,
            host: self.host.as_ref().map(|h| format!("{} ({})", h.id, h.remedy)),
            unconfirmed: self
                .unconfirmed
                .iter()
                .map(|sig| {
                    let (round, why) = self.unconfirmed_why.get(sig).cloned().unwrap_or_default();
                    report::Unconfirmed { signature: sig.clone(), round, why }
                })
                .collect(),
        }
    }
}

/// What a campaign explored: a path and a BLAKE3 (of the program image or the cluster file).
pub(crate) struct Program {
    pub(crate) path: String,
    pub(crate) blake3: String,
}

/// A campaign's corpus and coverage at its end.
pub(crate) struct Coverage {
    pub(crate) corpus: u64,
    pub(crate) edges_total: u64,
    pub(crate) edges_hit: u64,
}

/// A bug's short id: the first 12 hex digits of its signature's BLAKE3.
pub(crate) fn bug_id(signature: &str) -> String {
    blake3::hash(signature.as_bytes()).to_hex()[..12].to_string()
}

/// Adds `entry` to a campaign's corpus and writes it as `corpus/entry-NNNNNN.json`.
pub(crate) fn keep<T: Serialize>(out: &Path, corpus: &mut Vec<T>, entry: T) -> Result<(), ExploreError> {
    write_json(&out.join("corpus").join(format!("entry-{:06}.json", corpus.len())), &entry)?;
    corpus.push(entry);
    Ok(())
}

pub(crate) fn io_err(path: &Path, e: impl std::fmt::Display) -> ExploreError {
    ExploreError::File { path: path.display().to_string(), message: e.to_string() }
}

pub(crate) fn write_json<T: Serialize>(path: &Path, v: &T) -> Result<(), ExploreError> {
    let bytes = serde_json::to_vec_pretty(v).expect("plain data serializes");
    deja_format::write_atomic(path, &bytes).map_err(|e| io_err(path, e))
}

fn edges_hit(virgin: &[u8]) -> u64 {
    virgin.iter().filter(|b| **b != 0).count() as u64
}

/// What a run brought that the campaign had not seen.
struct Novelty {
    /// New coverage bits and semantic edges.
    new: u64,
    /// The latest decision index at which a new semantic edge first showed, if known: the
    /// run's course up to there is what made it new.
    focus: Option<u64>,
}

/// Folds an outcome into the coverage seen so far.
fn learn(state: &mut State, out: &Outcome) -> Novelty {
    if state.virgin.len() < out.coverage.len() {
        state.virgin.resize(out.coverage.len(), 0);
    }
    let mut new = 0;
    for (seen, b) in state.virgin.iter_mut().zip(&out.coverage) {
        if b & !*seen != 0 {
            new += 1;
            *seen |= b;
        }
    }
    let mut focus = None;
    for (e, at) in &out.semantic {
        *state.hits.entry(*e).or_default() += 1;
        let known = !state.semantic.insert(*e);
        // A known progress edge reached earlier than ever before counts as new too: the same
        // state with more of the run still ahead of it.
        let sooner = match (*at, state.earliest.get(e)) {
            (Some(i), Some(&best)) => i < best,
            (Some(_), None) => true,
            (None, _) => false,
        };
        if sooner {
            state.earliest.insert(*e, at.unwrap_or_default());
        }
        if !known || sooner {
            new += 1;
            focus = focus.max(*at);
        }
    }
    for life in &out.lives {
        fold_assertions(&mut state.books.assertions, &life.run.report.assertions);
    }
    Novelty { new, focus }
}

/// Folds one run's assertion reports into a campaign's assertion lines.
pub(crate) fn fold_assertions(lines: &mut BTreeMap<String, report::AssertionLine>, reports: &[AssertionReport]) {
    for a in reports {
        let key = format!("{}:{}:{}", a.file, a.line, a.message);
        let line = lines.entry(key).or_insert_with(|| report::AssertionLine {
            message: a.message.clone(),
            kind: a.kind.clone(),
            hits: 0,
            failures: 0,
            status: String::new(),
        });
        line.hits += a.hits;
        line.failures += a.failures;
        let passes_seen = line.status == "satisfied" || a.passes > 0;
        line.status = match a.kind.as_str() {
            "always" | "always_or_unreachable" if line.failures > 0 => "failed",
            "unreachable" if line.hits > 0 => "failed",
            "sometimes" if passes_seen => "satisfied",
            "sometimes" if line.hits > 0 => "unsatisfied",
            "reachable" if line.hits > 0 => "reached",
            _ if line.hits == 0 => "unreached",
            _ => "passed",
        }
        .to_string();
    }
}

/// Draws an index with probability proportional to its weight.
pub(crate) fn pick_weighted(rng: &mut ChaCha20Rng, weights: &[u64]) -> usize {
    let total: u64 = weights.iter().sum();
    let mut x = rng.next_u64() % total.max(1);
    for (i, w) in weights.iter().enumerate() {
        if x < *w {
            return i;
        }
        x -= w;
    }
    0
}

/// A corpus entry's energy: the rarity of the behaviours its run showed (one seen in `h` runs
/// counts `1000 / h`) plus what it brought that was new, lowered by how often it was picked.
pub(crate) fn energy(features: &[u64], hits: &BTreeMap<u64, u64>, new: u64, picks: u64) -> u64 {
    let rarity: u64 = features.iter().map(|f| 1000 / hits.get(f).copied().unwrap_or(1).max(1)).sum();
    1 + (rarity + 100 * new) / (1 + picks)
}

fn pick(state: &mut State) -> usize {
    let weights: Vec<u64> =
        state.corpus.iter().map(|e| energy(&e.features, &state.hits, e.new_edges, e.picks)).collect();
    pick_weighted(&mut state.rng, &weights)
}

/// How many decisions before a corpus entry's focus count as leading to it.
const FOCUS_WINDOW: u64 = 8;

fn mutate(state: &mut State, parent: &Entry, mode: Mode) -> Input {
    let mut input = parent.input.clone();
    let rng = &mut state.rng;
    let first = state.base_decisions;
    let count = parent.options.len() as u64;
    let mut changed = false;
    if mode.random() && count > first {
        // Where the parent's new behaviour first showed, if known: the decisions just before it
        // led there, the ones after it follow from there.
        let focus = parent.focus.filter(|f| (first..=count).contains(f));
        let within = |rng: &mut ChaCha20Rng, lo: u64, hi: u64| lo + rng.next_u64() % (hi - lo).max(1);
        let roll = rng.next_u64() % 8;
        if parent.choices.len() as u64 == count && roll < 4 {
            // Keep the parent's course up to a cut and draw everything after it afresh. Half the
            // cuts fall right at the focus, so the state the parent reached is kept and what
            // follows it is explored; a quarter after it; a quarter anywhere.
            let cut = match (roll, focus) {
                (0 | 1, Some(f)) => f,
                (2, Some(f)) => within(rng, f, count + 1),
                _ => within(rng, first, count + 1),
            };
            input.overrides = (first..cut).map(|i| (i, parent.choices[i as usize])).collect();
            input.reseed = Some(rng.next_u64());
        } else {
            // Change one to three decisions, half the time among the few before the focus.
            for _ in 0..1 + rng.next_u64() % 3 {
                let i = match focus {
                    Some(f) if f > first && rng.next_u64().is_multiple_of(2) => {
                        within(rng, f.saturating_sub(FOCUS_WINDOW).max(first), f)
                    }
                    _ => within(rng, first, count),
                };
                let options = parent.options[i as usize];
                let choice = if options == 0 { rng.next_u64() } else { rng.next_u64() % options.max(1) };
                input.overrides.insert(i, choice);
            }
        }
        changed = true;
    }
    if mode.faults() {
        let io_ops = if parent.io_ops.is_empty() { &state.reference_io_ops } else { &parent.io_ops };
        let menu = crate::menu::Menu {
            durable_writes: parent.durable_writes.max(state.reference_durable_writes),
            io_ops,
            pending_at_crash: parent.pending_at_crash,
        };
        // One or two changes from the fault menu (always one when nothing else changed).
        let n = if changed { crate::menu::below(rng, 2) } else { 1 + crate::menu::below(rng, 2) };
        for _ in 0..n {
            crate::menu::mutate(rng, &mut input.faults, &menu);
        }
    }
    input
}

fn random_input(state: &mut State, mode: Mode) -> Input {
    let mut input = Input::default();
    if mode.faults() {
        let menu = crate::menu::Menu {
            durable_writes: state.reference_durable_writes,
            io_ops: &state.reference_io_ops,
            pending_at_crash: None,
        };
        input.faults = crate::menu::random(&mut state.rng, &menu);
    }
    input
}

/// Runs a campaign (or continues one) and writes its files under `cfg.out`.
pub fn explore(
    target: &Target,
    cfg: &CampaignConfig,
    progress: &mut dyn FnMut(&Progress),
) -> Result<Campaign, ExploreError> {
    let started = Instant::now();
    std::fs::create_dir_all(cfg.out.join("corpus")).map_err(|e| io_err(&cfg.out, e))?;
    let checkpoint = cfg.out.join("checkpoint.json");
    let program_blake3 = blake3::hash(&target.spec.image).to_hex().to_string();

    let mut state = if checkpoint.exists() {
        if !cfg.resume {
            return Err(ExploreError::Invalid(format!(
                "{} already holds a campaign; add --resume to continue it or choose another --out",
                cfg.out.display()
            )));
        }
        let text = std::fs::read_to_string(&checkpoint).map_err(|e| io_err(&checkpoint, e))?;
        let s: State = serde_json::from_str(&text)
            .map_err(|e| ExploreError::Invalid(format!("{}: damaged checkpoint: {e}", checkpoint.display())))?;
        if s.program_blake3 != program_blake3 || s.strategy != cfg.strategy || s.mode != cfg.mode {
            return Err(ExploreError::Invalid(format!(
                "{} belongs to another program, strategy or mode; it cannot be resumed with these",
                checkpoint.display()
            )));
        }
        s
    } else {
        // Bootstrap: one untouched run finds the setup point and the number of durable writes.
        let reference = run_fresh(target, u64::MAX, &Input::default(), &mut |_, _| {})?;
        let report0 = &reference.lives[0].run.report;
        let fork_at = report0.setup_complete.as_ref().map(|s| s.syscall_index + 1).unwrap_or(0);
        let mut s = State {
            schema: "deja.explore-checkpoint/1".into(),
            program_blake3: program_blake3.clone(),
            strategy: cfg.strategy,
            mode: cfg.mode,
            seed: cfg.seed,
            books: Books::default(),
            rng: ChaCha20Rng::seed_from_u64(cfg.seed),
            fork_at,
            base_decisions: 0,
            reference_durable_writes: reference.durable_writes,
            reference_io_ops: reference.io_ops.clone(),
            virgin: Vec::new(),
            semantic: BTreeSet::new(),
            hits: BTreeMap::new(),
            earliest: BTreeMap::new(),
            corpus: Vec::new(),
        };
        learn(&mut s, &reference);
        s
    };
    state.books.adopt_host(&checkpoint)?;

    let mut fork = match cfg.strategy {
        Strategy::Coverage => {
            let f = Fork::new(target.spec.clone(), target.memory, state.fork_at, &mut |_, _| {})?;
            state.base_decisions = f.parent_kernel().decision_count();
            Some(f)
        }
        Strategy::Random => None,
    };
    if state.corpus.is_empty() {
        if let Some(f) = fork.as_mut() {
            let out = run_on_fork(f, &Input::default())?;
            let novelty = learn(&mut state, &out);
            let entry = Entry::new(Input::default(), &out, Novelty { new: novelty.new.max(1), focus: None }, 0);
            keep(&cfg.out, &mut state.corpus, entry)?;
        }
    }

    while let Some(round) = state.books.next_round(cfg, started) {
        let (input, out, fork_at, spec_seed) = match fork.as_mut() {
            Some(f) => {
                let i = pick(&mut state);
                state.corpus[i].picks += 1;
                let parent = state.corpus[i].clone();
                let input = mutate(&mut state, &parent, cfg.mode);
                let out = run_on_fork(f, &input)?;
                (input, out, state.fork_at, target.spec.seed)
            }
            None => {
                let seed = state.rng.next_u64();
                let input = random_input(&mut state, cfg.mode);
                let mut t = target.clone();
                t.spec.seed = seed;
                let out = run_fresh(&t, 0, &input, &mut |_, _| {})?;
                (input, out, 0, seed)
            }
        };
        let novelty = learn(&mut state, &out);
        let kept = novelty.new > 0 && fork.is_some();
        if kept {
            keep(&cfg.out, &mut state.corpus, Entry::new(input.clone(), &out, novelty, round))?;
        }
        if let Some(sig) = state.books.unseen(out.failure.as_ref()) {
            let mut t = target.clone();
            t.spec.seed = spec_seed;
            let difference = crate::input::confirm(&t, fork_at, &input, &out)?;
            state.books.settle(sig, difference, &cfg.out, |path| {
                let bug = BugFile::new(&t, fork_at, &input, &out, round, &path.display().to_string());
                bug.write(path)?;
                Ok((bug.reproduce, out.decisions.len() as u64))
            })?;
        }
        let p = Progress {
            round,
            edges: edges_hit(&state.virgin),
            semantic: state.semantic.len() as u64,
            corpus: state.corpus.len() as u64,
            bugs: state.books.bugs.len() as u64,
        };
        if state.books.end_round(p, kept, progress) {
            write_json(&checkpoint, &state)?;
        }
    }
    state.books.wall_seconds += started.elapsed().as_secs_f64();
    write_json(&checkpoint, &state)?;

    let coverage = Coverage {
        corpus: state.corpus.len() as u64,
        edges_total: state.virgin.len() as u64,
        edges_hit: edges_hit(&state.virgin),
    };
    let campaign =
        state.books.campaign(cfg, &Program { path: target.path.clone(), blake3: program_blake3 }, state.seed, coverage);
    Ok(campaign)
}

/// Writes `report.txt`, `report.json` and `report.html` for a campaign.
pub fn write_reports(c: &Campaign, out: &Path) -> Result<(), ExploreError> {
    for (name, text) in [
        ("report.txt", report::render_text(c)),
        ("report.json", report::render_json(c)),
        ("report.html", report::render_html(c)),
    ] {
        let path = out.join(name);
        deja_format::write_atomic(&path, text.as_bytes()).map_err(|e| io_err(&path, e))?;
    }
    Ok(())
}
