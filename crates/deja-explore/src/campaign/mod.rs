//! The campaign loop, one for programs and clusters.
//!
//! What a campaign explores is a [`Subject`]: a program ([`crate::program`]) or a cluster
//! ([`crate::cluster`]). A subject knows how to boot a worker (a fork of the program or of the
//! whole cluster, or nothing when every round boots afresh), run an input on it, replay a
//! failure from scratch on another host core, change its plan of faults and write a bug file.
//! Everything else is here, once: picking by energy, the decision mutations (tail cuts at the
//! focus, point mutations before it), learning, confirmation, bugs, checkpoints and reports.
//!
//! A campaign goes through explicit states ([`Phase`]): it *bootstraps* (one untouched run, the
//! reference), *seeds* the corpus (the origin input, run the way rounds run; with several
//! workers, a subject that runs fresh rounds runs the first rounds of the first epoch beside
//! it), then repeats *plan* (an epoch of inputs from the campaign as it stands), *run* (every
//! worker takes inputs of the epoch until none is left) and *learn* (the outcomes in round
//! order: coverage, corpus, confirmation, bugs, the timeline), until it is *done*.
//!
//! # Determinism with several workers
//!
//! `jobs` workers, one VM (or one cluster) each on its own thread, share one corpus. An epoch's
//! inputs are all planned before any of them runs, and the outcomes are learned in round order
//! when all are back. With several workers, epochs are pipelined: epoch `k + 2` is planned
//! from the campaign as it stood when epoch `k` had been learned (its random stream, corpus and
//! energies), and is handed to the workers while epoch `k + 1` runs, so a worker that finishes
//! early takes the next epoch's rounds instead of waiting for the last round of its epoch and
//! for the main thread's learning. Which worker ran a round and when it finished change
//! nothing, so a campaign is a pure function of (subject, seed, jobs, rounds). Epochs start at
//! fixed round numbers (multiples of the epoch size), and planning depends only on the rounds
//! learned; the inputs planned and not learned stay in the checkpoint, so `--runs 100` then
//! `--resume --runs 200` is the same campaign as `--runs 200`. With one worker an epoch is one
//! round, planned when the one before it has been learned: every round learns from all before
//! it.
//!
//! # Shards
//!
//! A campaign can be one shard `i` of `n` ([`CampaignConfig::shard`]): its own random stream,
//! and every seed it draws (for fresh runs and for the decisions after a tail cut) is `i`
//! modulo `n`, so shards never run the same seed. [`crate::merge`] puts shards together.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use deja_explore_report as report;
use deja_format::json::Schema;
use deja_kernel::AssertionReport;
use rand_chacha::rand_core::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::menu::modulo_below;
use crate::signature::FailureSignature;
use crate::{ExploreError, Mismatch};
use snafu::{ensure, OptionExt, ResultExt};

mod books;
mod mutate;
mod pool;
mod subject;

pub(crate) use books::{assertion_status, edges_hit, keep, Books, Novelty, State};
pub use books::{bug_id, saved, write_reports};
use books::{learn, new_state, resume};
pub(crate) use books::{read_state, AnyState};
pub(crate) use mutate::{energy, first_change, late_anchor, mutate_decisions, pick_weighted};
use pool::{worker_loop, Batch, Pool, Returned};
pub use subject::{Facts, FollowUp, Program, Seeds, Subject, WrittenBug};

/// The schema of campaign checkpoints: version 2 added the seal (`deja_format::json`); version
/// 1 checkpoints, unsealed, still resume and merge.
pub const CHECKPOINT_SCHEMA: Schema =
    Schema { family: "deja.campaign-checkpoint", what: "campaign checkpoint", current: 2, oldest: 1, sealed_since: 2 };

/// How rounds choose their runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// Coverage-guided: mutate corpus entries, fork from the setup point.
    Coverage,
    /// The baseline: independent seeds, no coverage feedback, no forking.
    Random,
}

impl Strategy {
    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Coverage => "coverage",
            Strategy::Random => "random",
        }
    }
}

/// What mutations may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Faults only: the fault plan (programs) and the fault decisions (clusters).
    Faults,
    /// Random-choice branching only: SDK random values and choices, latencies, schedules.
    Random,
    /// Both.
    Both,
}

impl Mode {
    /// Faults may change.
    pub fn faults(self) -> bool {
        matches!(self, Mode::Faults | Mode::Both)
    }

    /// Random decisions may change.
    pub fn random(self) -> bool {
        matches!(self, Mode::Random | Mode::Both)
    }

    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Faults => "faults",
            Mode::Random => "random",
            Mode::Both => "both",
        }
    }
}

/// A campaign's settings.
#[derive(Debug, Clone)]
pub struct CampaignConfig {
    /// Stop after this many rounds in total (counting resumed ones).
    pub runs: Option<u64>,
    /// Stop after this much wall time in this invocation (between epochs).
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
    /// Workers running rounds in parallel, one VM (or one cluster) each.
    pub jobs: u64,
    /// This campaign is shard `i` of `n` (0-based `i`).
    pub shard: Option<(u64, u64)>,
    /// Measure the blocks a program without SanitizerCoverage reaches, with one-shot
    /// breakpoints ([`deja_vmm::coverage`]), as its coverage.
    pub block_coverage: bool,
    /// With block coverage: only blocks in functions whose (demangled) name matches one of
    /// these patterns (`*` matches any run of characters) count; empty for every block.
    pub cover: Vec<String>,
    /// How many later forks each worker keeps: forks taken down a round's course, from which
    /// rounds that change only what comes after run ([`deja_cluster::Fork::run_child_at`];
    /// 0: every round runs from the fork point). The campaign is the same either way.
    pub late_forks: usize,
    /// Every this many rounds, a round that ran from a fork is booted again from scratch with
    /// the same input and the two compared, digest for digest (0: never). A difference is a
    /// determinism defect of deja, reported with both runs' evidence.
    pub verify_forks: u64,
    /// A test-only switch: every forked cluster round is made to differ from its booted run
    /// ([`deja_cluster::Fork::set_perturb`]), to test the evidence of a round that does not
    /// replay the same.
    pub perturb_forks: bool,
    /// How every VM of the campaign is set up: CPU identity, code rewriting, the vDSO, the
    /// watchdog (the fingerprint of these settings is the campaign's host).
    pub settings: deja_vmm::Settings,
}

impl CampaignConfig {
    /// Rounds planned together: one with one worker, eight per worker otherwise.
    pub fn epoch(&self) -> u64 {
        match self.jobs.max(1) {
            1 => 1,
            j => 8 * j,
        }
    }
}

/// Shown after every round: the campaign's figures, and borrowed views of its books. A callback
/// only observes: nothing it does can change the campaign.
#[derive(Clone)]
pub struct Progress<'a> {
    /// Rounds done.
    pub round: u64,
    /// Edges hit (SanitizerCoverage) so far.
    pub edges: u64,
    /// Edges the program is instrumented with (0 without instrumentation, and for clusters).
    pub edges_total: u64,
    /// Semantic edges and behaviours so far.
    pub semantic: u64,
    /// Corpus size.
    pub corpus: u64,
    /// Distinct bugs.
    pub bugs: u64,
    /// Rounds per second of each worker in this invocation (host time; for display only).
    pub worker_rates: &'a [f64],
    /// Host seconds since the campaign started, over every invocation (for display only).
    pub wall_seconds: f64,
    /// The timeline so far, one point per round (a resumed campaign's from its first round).
    pub timeline: &'a [report::RoundPoint],
    /// Every confirmed bug so far, in the order found.
    pub found: &'a [report::BugSummary],
    /// The fault mix so far: the rounds in which each kind of fault happened.
    pub faults: &'a BTreeMap<String, u64>,
    /// The assertion lines so far.
    pub assertions: &'a BTreeMap<String, report::AssertionLine>,
    /// The fail-stops so far, by kind.
    pub fail_stops: &'a BTreeMap<String, report::FailStopLine>,
    /// Block coverage so far, when the campaign measures it: computed when asked (a pass over
    /// every block), so a round nobody shows it to does not pay for it.
    pub blocks: &'a dyn Fn() -> Option<report::BlockCoverage>,
}

impl Progress<'_> {
    /// Rounds per second over every worker.
    pub fn rate(&self) -> f64 {
        self.worker_rates.iter().sum()
    }
}

/// The result of a campaign (what the reports show).
pub type Campaign = report::Campaign;

/// One decision of a run, as mutations see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "(u64, u64, u8)", into = "(u64, u64, u8)")]
pub struct Decision {
    /// Options (0: any `u64`).
    pub options: u64,
    /// The choice it took.
    pub choice: u64,
    /// Random-mode mutations may change it.
    pub random: bool,
    /// Fault-mode mutations may change it.
    pub fault: bool,
    /// It chooses *which* fault happens (sides, direction, target), not when.
    pub structural: bool,
    /// A later fork can be taken right before it: it is the first decision of a step of the
    /// cluster's scheduler (always false for programs).
    pub cut: bool,
}

impl From<(u64, u64, u8)> for Decision {
    fn from((options, choice, flags): (u64, u64, u8)) -> Decision {
        Decision {
            options,
            choice,
            random: flags & 1 != 0,
            fault: flags & 2 != 0,
            structural: flags & 4 != 0,
            cut: flags & 8 != 0,
        }
    }
}

impl From<Decision> for (u64, u64, u8) {
    fn from(d: Decision) -> (u64, u64, u8) {
        let flags = u8::from(d.random) | u8::from(d.fault) << 1 | u8::from(d.structural) << 2 | u8::from(d.cut) << 3;
        (d.options, d.choice, flags)
    }
}

/// One corpus entry.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Entry<I> {
    /// Its input.
    pub input: I,
    /// What it brought that was new when it joined.
    pub new: u64,
    /// How often it was picked as a parent.
    pub picks: u64,
    /// The steerable decisions of its run.
    pub decisions: Vec<Decision>,
    /// Where its new behaviour first showed (a decision index), when known.
    #[serde(default)]
    pub focus: Option<u64>,
    /// The semantic edges and behaviours its run showed.
    #[serde(default)]
    pub features: Vec<u64>,
    /// The round that found it.
    pub found_round: u64,
    /// Durable writes of its run (programs).
    #[serde(default)]
    pub durable_writes: u64,
    /// Its run's file operations (programs: where errors can be placed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub io_ops: Vec<deja_kernel::IoCount>,
    /// Operations pending when its run crashed (programs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_at_crash: Option<u64>,
    /// What each node of its run offers to storage faults (clusters).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<crate::menu::NodeMenu>,
}

impl<I> Entry<I> {
    fn new(input: I, facts: &Facts, novelty: &Novelty, round: u64) -> Entry<I> {
        Entry {
            input,
            new: novelty.weight,
            picks: 0,
            decisions: facts.decisions.clone(),
            focus: novelty.focus,
            features: facts.semantic.keys().copied().collect(),
            found_round: round,
            durable_writes: facts.durable_writes,
            io_ops: facts.io_ops.clone(),
            pending_at_crash: facts.pending_at_crash,
            nodes: facts.nodes.clone(),
        }
    }
}

/// The states a campaign goes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The untouched reference run.
    Bootstrap,
    /// Corpus entry 0: the origin input, run the way rounds run.
    Seed,
    /// An epoch of inputs is planned.
    Plan,
    /// The workers run it.
    Run,
    /// Its outcomes are learned in round order.
    Learn,
    /// The campaign is over: its rounds are done, its time is up, or it stopped at a bug.
    Done,
}

/// Where a campaign keeps its input files, each named by its BLAKE3 (hex): a replay that finds
/// a declared file changed on its host takes the recorded one from here.
pub const INPUTS_DIR: &str = "inputs";

/// Writes each of `files` under `out/inputs/` by BLAKE3, unless a file of that name is there.
fn keep_inputs(out: &std::path::Path, files: &[&[u8]]) -> Result<(), ExploreError> {
    if files.is_empty() {
        return Ok(());
    }
    let dir = out.join(INPUTS_DIR);
    std::fs::create_dir_all(&dir).context(crate::CreateDirSnafu { path: &dir })?;
    for data in files {
        let path = dir.join(blake3::hash(data).to_hex().as_str());
        if !path.exists() {
            let tmp = path.with_extension("part");
            std::fs::write(&tmp, data)
                .and_then(|()| std::fs::rename(&tmp, &path))
                .context(crate::CreateDirSnafu { path: &path })?;
        }
    }
    Ok(())
}

/// Runs a campaign over `subject` (or continues one) and writes its files under `cfg.out`.
pub fn explore<S: Subject>(
    subject: &S,
    cfg: &CampaignConfig,
    progress: &mut dyn FnMut(&Progress),
) -> Result<Campaign, ExploreError> {
    let started = Instant::now();
    std::fs::create_dir_all(cfg.out.join("corpus")).context(crate::CreateDirSnafu { path: &cfg.out })?;
    keep_inputs(&cfg.out, &subject.input_files())?;
    let checkpoint = cfg.out.join("checkpoint.json");
    let identity = subject.identity();
    let jobs = cfg.jobs.max(1);
    let (mut state, mut phase) = if checkpoint.exists() {
        (resume::<S>(cfg, &checkpoint, &identity)?, Phase::Plan)
    } else {
        (new_state::<S>(cfg, &identity), Phase::Bootstrap)
    };
    state.books.adopt_host(&checkpoint, &cfg.settings)?;
    if phase == Phase::Bootstrap {
        let (reference, runs) = subject.bootstrap(cfg)?;
        state.reference = reference;
        for out in &runs {
            let novelty = learn(&mut state, &subject.facts(out));
            subject.learned_coverage(&novelty.new_coverage);
        }
        phase = Phase::Seed;
    } else {
        let seen: Vec<usize> = state.virgin.iter().enumerate().filter(|(_, b)| **b != 0).map(|(i, _)| i).collect();
        subject.learned_coverage(&seen);
    }
    let reference = Arc::new(state.reference.clone());
    let seeds = Seeds::new(cfg.shard);

    std::thread::scope(|scope| -> Result<Campaign, ExploreError> {
        let (returned_tx, returned) = mpsc::channel::<Returned<S::Outcome>>();
        let mut pool = Pool {
            workers: Vec::new(),
            returned,
            done_by: vec![0; jobs as usize],
            next_id: 0,
            in_flight: std::collections::VecDeque::new(),
        };
        for w in 0..jobs as usize {
            let (tx, rx) = mpsc::channel::<Arc<Batch<S::Input>>>();
            pool.workers.push(tx);
            let returned_tx = returned_tx.clone();
            let reference = Arc::clone(&reference);
            let strategy = cfg.strategy;
            scope.spawn(move || worker_loop(subject, &reference, strategy, w, &rx, &returned_tx));
        }
        drop(returned_tx);

        // With several workers the epoch after the one running is already submitted, so no
        // worker waits while the main thread learns.
        let ahead = u64::from(jobs > 1);
        let mut epoch: Vec<S::Input> = Vec::new();
        let mut outcomes: Vec<Result<S::Outcome, String>> = Vec::new();
        loop {
            match phase {
                Phase::Bootstrap => unreachable!("the bootstrap ran before the workers started"),
                Phase::Seed => {
                    if cfg.strategy == Strategy::Coverage && state.corpus.is_empty() {
                        let origin = subject.origin(cfg, &state.reference);
                        pool.submit(vec![origin.clone()])?;
                        beside_seed(subject, cfg, seeds, &mut state, &mut pool)?;
                        let out = pool.collect_first()?.1.pop().expect("one outcome for one input").map_err(|why| {
                            ExploreError::NoProgress { why: format!("the campaign's first round: {why}") }
                        })?;
                        let facts = subject.facts(&out);
                        let novelty = learn(&mut state, &facts);
                        subject.learned_coverage(&novelty.new_coverage);
                        let novelty = Novelty {
                            new: novelty.new.max(1),
                            focus: None,
                            new_coverage: Vec::new(),
                            weight: novelty.weight.max(1),
                        };
                        keep(&cfg.out, &mut state.corpus, Entry::new(origin, &facts, &novelty, 0))?;
                    }
                    CHECKPOINT_SCHEMA.write(&checkpoint, &state)?;
                    phase = Phase::Plan;
                }
                Phase::Plan => {
                    let done_runs = cfg.runs.is_some_and(|n| state.books.round >= n);
                    let done_time = cfg.budget.is_some_and(|b| started.elapsed() >= b);
                    let done_bug = cfg.stop_at_first_bug && !state.books.bugs.is_empty();
                    if done_runs || done_time || done_bug || (cfg.runs.is_none() && cfg.budget.is_none()) {
                        phase = Phase::Done;
                        continue;
                    }
                    plan_ahead(subject, cfg, seeds, &mut state, ahead);
                    pool.submit_pending(&state.pending, state.books.round, cfg, ahead)?;
                    phase = Phase::Run;
                }
                Phase::Run => {
                    let len;
                    (len, outcomes) = pool.collect_first()?;
                    epoch = state.pending.drain(..len).collect();
                    phase = Phase::Learn;
                }
                Phase::Learn => {
                    let elapsed = started.elapsed().as_secs_f64().max(1e-9);
                    let rates: Vec<f64> = pool.done_by.iter().map(|n| *n as f64 / elapsed).collect();
                    let earlier = state.books.wall_seconds;
                    let mut due = false;
                    let mut rounds = std::mem::take(&mut epoch).into_iter().zip(std::mem::take(&mut outcomes));
                    while let Some((input, out)) = rounds.next() {
                        if cfg.stop_at_first_bug && !state.books.bugs.is_empty() {
                            // The rest of the epoch stays planned, for a resumed campaign.
                            let unrun: Vec<S::Input> = std::iter::once(input).chain(rounds.map(|(i, _)| i)).collect();
                            state.pending.splice(0..0, unrun);
                            pool.cancel_all();
                            break;
                        }
                        let wall = earlier + started.elapsed().as_secs_f64();
                        due |= match out {
                            Ok(out) => learn_round(subject, cfg, &mut state, input, &out, wall)?,
                            Err(why) => state.books.no_progress(why, wall),
                        };
                        let blocks = || subject.block_coverage(&state.reference, &state.books.first_reached);
                        progress(&figures::<S>(&state, &rates, wall, &blocks));
                    }
                    if due {
                        CHECKPOINT_SCHEMA.write(&checkpoint, &state)?;
                    }
                    phase = Phase::Plan;
                }
                Phase::Done => {
                    pool.cancel_all();
                    break;
                }
            }
        }
        state.books.wall_seconds += started.elapsed().as_secs_f64();
        CHECKPOINT_SCHEMA.write(&checkpoint, &state)?;
        let mut campaign = state.books.campaign(&state, &identity);
        campaign.blocks = subject.block_coverage(&state.reference, &state.books.first_reached);
        Ok(campaign)
    })
}

/// With several workers, when the subject runs fresh rounds in the coverage strategy, plans the
/// first `jobs - 1` rounds of the first epoch before the seed round is learned and hands them to
/// the workers with it, so that no worker waits for the seed round.
///
/// They are planned from the empty corpus, so they are fresh rounds: they need nothing the seed
/// round will teach. Whether they are planned depends only on the subject and the number of
/// workers, and they stay in the checkpoint written after the seed round like any planned input.
fn beside_seed<S: Subject>(
    subject: &S,
    cfg: &CampaignConfig,
    seeds: Seeds,
    state: &mut State<S::Input, S::Reference>,
    pool: &mut Pool<S::Input, S::Outcome>,
) -> Result<(), ExploreError> {
    let jobs = cfg.jobs.max(1);
    if jobs == 1 || subject.fresh_every() == 0 {
        return Ok(());
    }
    let planned = (jobs - 1).min(cfg.epoch());
    for _ in 0..planned {
        let input = plan_round(subject, cfg, seeds, state);
        state.pending.push(input);
    }
    let submitted = planned.min(cfg.runs.unwrap_or(u64::MAX)) as usize;
    if submitted > 0 {
        pool.submit(state.pending[..submitted].to_vec())?;
    }
    Ok(())
}

/// Plans the epochs not planned yet, up to the one `ahead` after the epoch being learned.
///
/// Epochs start at multiples of their size, and the epoch `ahead` after the one being learned
/// is planned when that one's first round is about to be learned: so a campaign is the same
/// whether or not it was stopped and resumed between any two rounds.
fn plan_ahead<S: Subject>(
    subject: &S,
    cfg: &CampaignConfig,
    seeds: Seeds,
    state: &mut State<S::Input, S::Reference>,
    ahead: u64,
) {
    let size = cfg.epoch();
    let through = (state.books.round / size + 1 + ahead) * size;
    while state.books.round + (state.pending.len() as u64) < through {
        let at = state.books.round + state.pending.len() as u64;
        for _ in 0..size - at % size {
            let input = plan_round(subject, cfg, seeds, state);
            state.pending.push(input);
        }
    }
}

/// While a frontier lasts, one round in this many is a mutation, the others take its next plan.
const FRONTIER_ODDS: u64 = 4;

/// One round's input: a fresh one, or a mutation of a corpus entry picked by energy.
fn plan_round<S: Subject>(
    subject: &S,
    cfg: &CampaignConfig,
    seeds: Seeds,
    state: &mut State<S::Input, S::Reference>,
) -> S::Input {
    let fresh_every = subject.fresh_every();
    let fresh = match cfg.strategy {
        Strategy::Random => true,
        Strategy::Coverage => {
            state.corpus.is_empty() || (fresh_every > 0 && state.rng.next_u64().is_multiple_of(fresh_every))
        }
    };
    if fresh {
        let seed = seeds.draw(&mut state.rng);
        return subject.fresh(&mut state.rng, seed, &state.reference, cfg.strategy, cfg.mode);
    }
    // The frontier, three rounds in four until each of its plans was tried (no draw at all for
    // a subject without one, or once it is done, so those campaigns keep their course).
    let seed = books::stream_seed(cfg.seed, cfg.shard);
    // Rounds are planned in order, after those learned and those pending.
    let planned = state.books.round + state.pending.len() as u64 + 1;
    let frontier = state.frontier_plans.get_or_insert_with(|| subject.frontier(&state.reference, cfg.mode, seed));
    // A plan of a key a learned round decided (followed already, or stopped at) is passed over:
    // its place in the frontier's order is taken by round 0.
    while let Some(key) = frontier.get(state.frontier.len()).and_then(|p| subject.follow_key(p)) {
        if !state.followed.contains(&key) && !state.passed_over.contains(&key) {
            break;
        }
        state.frontier.push(0);
    }
    let next = frontier.get(state.frontier.len());
    if (!state.follow_ups.is_empty() || next.is_some()) && !state.rng.next_u64().is_multiple_of(FRONTIER_ODDS) {
        // What learned rounds called for takes the turns of the frontier's compositions (the
        // kind it is of), and every turn once the frontier is done, so that the frontier's single
        // faults keep their pace.
        let composition = next.is_none_or(|p| subject.follow_key(p).is_some());
        let follow_up = if composition { state.follow_ups.pop_front() } else { None };
        let plan = match follow_up {
            Some(plan) => {
                state.follow_rounds.push(planned);
                plan
            }
            None => {
                let plan = next.cloned().expect("the frontier has a next plan");
                state.frontier.push(planned);
                plan
            }
        };
        return subject.frontier_round(&mut state.rng, plan);
    }
    let weights: Vec<u64> = state.corpus.iter().map(|e| energy(&e.features, &state.hits, e.new, e.picks)).collect();
    let i = pick_weighted(&mut state.rng, &weights);
    state.corpus[i].picks += 1;
    let parent = &state.corpus[i];
    let mut input = parent.input.clone();
    let first = S::base_decisions(&state.reference);
    let changed = mutate_decisions(&mut state.rng, seeds, S::steering(&mut input), parent, first, cfg.mode);
    subject.mutate_plan(&mut state.rng, seeds, &mut input, parent, &state.reference, cfg.mode, changed);
    input
}

/// Learns one round, learned `wall` host seconds into the campaign: coverage, corpus,
/// confirmation of a new failure, the fault mix, the timeline. Returns whether a checkpoint is
/// due: every 25 rounds, and whenever the corpus grew or a bug was found, so a killed explorer
/// loses neither.
fn learn_round<S: Subject>(
    subject: &S,
    cfg: &CampaignConfig,
    state: &mut State<S::Input, S::Reference>,
    input: S::Input,
    out: &S::Outcome,
    wall: f64,
) -> Result<bool, ExploreError> {
    state.books.round += 1;
    let round = state.books.round;
    let bugs_before = state.books.bugs.len();
    let facts = subject.facts(out);
    let novelty = learn(state, &facts);
    subject.learned_coverage(&novelty.new_coverage);
    // A crash after a failed sync is tried as planned and its coverage learned, but it is no
    // parent for mutations: the recovery paths these rounds reach would draw the mutations away
    // from everything else (docs/EXPLORE.md, "The frontier").
    let kept = novelty.new > 0 && cfg.strategy == Strategy::Coverage && subject.follow_key(&input).is_none();
    if let Some(sig) = state.books.unseen(facts.failure.as_ref()) {
        let difference = subject.confirm(&state.reference, &input, out)?;
        let reference = &state.reference;
        let who = subject.bug_subject();
        let output = if difference.is_some() { subject.last_output(out) } else { Vec::new() };
        state.books.settle(sig, &who, difference, output, &cfg.out, |path| {
            subject.write_bug(reference, &input, out, round, path)
        })?;
    } else if cfg.verify_forks > 0 && cfg.strategy == Strategy::Coverage && round.is_multiple_of(cfg.verify_forks) {
        verify_fork(subject, cfg, state, &input, out)?;
    }
    if cfg.strategy == Strategy::Coverage {
        for f in subject.follow_ups(&input, out, cfg.mode) {
            let decided = state.followed.contains(&f.key) || state.passed_over.contains(&f.key);
            if decided || state.followed.len() + state.passed_over.len() >= books::MAX_FOLLOW_UPS {
                continue;
            }
            if f.plans.is_empty() {
                state.passed_over.insert(f.key);
            } else {
                state.followed.insert(f.key);
                state.follow_ups.extend(f.plans);
            }
        }
    }
    for seen in &facts.fail_stops {
        let reference = &state.reference;
        state.books.fail_stop(seen, subject.bug_subject(), &cfg.out, |path| {
            subject.as_failure(reference, &input, round, path)
        });
    }
    if kept {
        keep(&cfg.out, &mut state.corpus, Entry::new(input, &facts, &novelty, round))?;
    }
    for kind in facts.faults.iter().collect::<BTreeSet<_>>() {
        *state.books.faults.entry(kind.clone()).or_default() += 1;
    }
    let semantic = state.semantic.len() as u64;
    state.books.timeline.push(report::RoundPoint {
        round,
        edges_hit: edges_hit(&state.virgin) + semantic,
        semantic,
        corpus_size: state.corpus.len() as u64,
        bugs: state.books.bugs.len() as u64,
    });
    state.books.wall_timeline.record(round, wall);
    Ok(round.is_multiple_of(25) || kept || state.books.bugs.len() != bugs_before)
}

/// `--verify-forks`: boots the round just learned from scratch with the same input and compares
/// the two runs; a difference is kept as a divergence, with the round written as
/// `divergence-round-<R>.json` and its last output.
fn verify_fork<S: Subject>(
    subject: &S,
    cfg: &CampaignConfig,
    state: &mut State<S::Input, S::Reference>,
    input: &S::Input,
    out: &S::Outcome,
) -> Result<(), ExploreError> {
    let round = state.books.round;
    let difference = subject.confirm(&state.reference, input, out)?;
    let checks = state
        .books
        .fork_checks
        .get_or_insert_with(|| report::ForkChecks { every: cfg.verify_forks, ..report::ForkChecks::default() });
    checks.checked += 1;
    if let Some(why) = difference {
        let file = format!("divergence-round-{round}.json");
        let written = subject.write_bug(&state.reference, input, out, round, &cfg.out.join(&file)).ok();
        let facts = subject.facts(out);
        let checks = state.books.fork_checks.as_mut().expect("set above");
        checks.diverged.push(report::Unconfirmed {
            signature: facts.failure.as_ref().map_or_else(|| "none (the round held)".into(), |f| f.to_string()),
            round,
            why,
            reproduce: written.as_ref().map(|w| w.reproduce.clone()),
            file: written.map(|_| file),
            output: subject.last_output(out),
        });
    }
    Ok(())
}

/// What the progress callback is shown after a round.
fn figures<'a, S: Subject>(
    state: &'a State<S::Input, S::Reference>,
    rates: &'a [f64],
    wall: f64,
    blocks: &'a dyn Fn() -> Option<report::BlockCoverage>,
) -> Progress<'a> {
    let cluster = S::KIND == "cluster";
    Progress {
        round: state.books.round,
        edges: edges_hit(&state.virgin),
        edges_total: if cluster { 0 } else { state.virgin.len() as u64 },
        semantic: state.semantic.len() as u64,
        corpus: state.corpus.len() as u64,
        bugs: state.books.bugs.len() as u64,
        worker_rates: rates,
        wall_seconds: wall,
        timeline: &state.books.timeline,
        found: &state.books.bugs,
        faults: &state.books.faults,
        assertions: &state.books.assertions,
        fail_stops: &state.books.fail_stops,
        blocks,
    }
}

#[cfg(test)]
mod tests;
