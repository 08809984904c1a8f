//! Exploring one program: the [`Subject`] of a single static binary.
//!
//! The bootstrap runs the program untouched to find its `setup_complete` (rounds fork at the
//! syscall after it, or at the first) and what its fault menu holds: its durable writes and
//! file operations. In the coverage strategy each worker keeps a [`Fork`] at that syscall and
//! runs every round as a child of it; in the random strategy every round boots the program with
//! a seed of its own. A round is steered by an [`Input`]: decision overrides, a reseed, and a
//! fault plan drawn from the fault menu ([`crate::menu`]).

use std::collections::BTreeMap;
use std::path::Path;

use deja_vmm::{Fork, Settings};
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};

use crate::campaign::{
    CampaignConfig, Decision, Entry, Facts, FollowUp, Mode, Program, Seeds, Strategy, Subject, WrittenBug,
};
use std::sync::{Arc, Mutex};

use deja_vmm::coverage::BlockImage;

use crate::input::{
    confirm, run_fresh_covered, run_fresh_under, run_on_fork, with_blocks, BugFile, Input, Outcome, Target,
};
use crate::menu::{below, Menu};
use crate::ExploreError;
use snafu::ensure;

/// A program under exploration.
pub struct ProgramSubject<'a> {
    target: &'a Target,
    /// How its VMs are set up.
    settings: Settings,
    blake3: String,
    /// The image's blocks, when coverage comes from one-shot breakpoints (the program has no
    /// SanitizerCoverage counters and the campaign asks for block coverage).
    blocks: Option<Arc<BlockImage>>,
    /// The blocks the campaign has learned, in the order it learned them: each worker takes
    /// them out of its fork before its next round.
    learned: Mutex<Vec<u32>>,
    /// The `--cover` patterns the blocks were chosen by.
    scope: Vec<String>,
    /// How many later forks each worker keeps (0: none).
    late_forks: usize,
}

impl<'a> ProgramSubject<'a> {
    /// One or two changes of the input's fault plan from the fault menu (always one when the
    /// decision mutations changed nothing).
    fn mutate_faults(
        &self,
        rng: &mut ChaCha20Rng,
        input: &mut Input,
        parent: &Entry<Input>,
        r: &ProgramReference,
        changed: bool,
    ) {
        let io_ops = if parent.io_ops.is_empty() { &r.io_ops } else { &parent.io_ops };
        let menu = Menu {
            durable_writes: parent.durable_writes.max(r.durable_writes),
            io_ops,
            pending_at_crash: parent.pending_at_crash,
            processes: &r.processes,
        };
        let n = if changed { below(rng, 2) } else { 1 + below(rng, 2) };
        for _ in 0..n {
            crate::menu::mutate(rng, &mut input.faults, &menu);
        }
        input.faults.take_settings(&self.target.spec.faults);
    }

    /// The subject of `target`, run under `settings`; `block_coverage` measures blocks with
    /// one-shot breakpoints when the program has no SanitizerCoverage counters of its own, in the
    /// functions `scope` names or, when it names none, in the program's own code; in the program
    /// image and in the shared objects among its files ([`BlockImage::of_program`]).
    pub fn new(target: &'a Target, settings: &Settings, block_coverage: bool, scope: &[String]) -> ProgramSubject<'a> {
        let instrumented =
            deja_kernel::elf_section(&target.spec.image, deja_kernel::SANCOV_SECTION.as_bytes()).is_some();
        let (mut scope, mut blocks) = (scope.to_vec(), None);
        if block_coverage && !instrumented {
            let files: Vec<(&str, &[u8])> =
                target.spec.files.iter().map(|(path, data)| (path.as_str(), data.as_slice())).collect();
            let (image, taken) = BlockImage::of_program(&target.spec.image, &target.spec.exe_path, &files, &scope);
            scope = taken;
            blocks = Some(image).filter(|b| !b.is_empty());
        }
        ProgramSubject {
            target,
            settings: *settings,
            blake3: blake3::hash(&target.spec.image).to_hex().to_string(),
            blocks,
            learned: Mutex::new(Vec::new()),
            scope,
            late_forks: deja_vmm::LATE_FORKS,
        }
    }

    /// The blocks, if this campaign's reference measures them.
    fn blocks_for(&self, r: &ProgramReference) -> Option<Arc<BlockImage>> {
        self.blocks.clone().filter(|b| r.blocks == b.len() as u64)
    }
}

/// A worker of a program campaign: its fork (none for independent runs) and how many of the
/// learned blocks it has taken out of it.
#[derive(Debug)]
pub struct ProgramWorker {
    fork: Option<Fork>,
    applied: usize,
}

/// What a program campaign learned from its bootstrap.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProgramReference {
    /// The syscall before which rounds take their input (0 in the random strategy).
    pub fork_at: u64,
    /// Decisions taken before it.
    pub base_decisions: u64,
    /// Durable writes of the reference run.
    pub durable_writes: u64,
    /// The reference run's file operations (the fault menu of a run not seen yet).
    pub io_ops: Vec<deja_kernel::IoCount>,
    /// The image's blocks when the campaign measures block coverage, else 0.
    #[serde(default)]
    pub blocks: u64,
    /// Durable operations of the reference run's other processes, by name (where process
    /// kills are placed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub processes: Vec<(String, u64)>,
}

impl Subject for ProgramSubject<'_> {
    type Input = Input;
    type Outcome = Outcome;
    type Worker = ProgramWorker;
    type Reference = ProgramReference;
    const KIND: &'static str = "program";

    fn identity(&self) -> Program {
        Program { path: self.target.path.clone(), blake3: self.blake3.clone() }
    }

    fn input_files(&self) -> Vec<&[u8]> {
        self.target.spec.files.values().map(Vec::as_slice).collect()
    }

    fn bug_subject(&self) -> String {
        self.blake3.clone()
    }

    fn bootstrap(&self, cfg: &CampaignConfig) -> Result<(ProgramReference, Vec<Outcome>), ExploreError> {
        let blocks = self.blocks.clone().filter(|_| cfg.strategy == Strategy::Coverage);
        let reference = run_fresh_covered(
            self.target,
            &self.settings,
            u64::MAX,
            &Input::default(),
            blocks.clone(),
            &mut |_, _| {},
        )?;
        let report = &reference.lives[0].run.report;
        let mut r = ProgramReference {
            fork_at: 0,
            base_decisions: 0,
            durable_writes: reference.durable_writes,
            io_ops: reference.io_ops.clone(),
            blocks: blocks.as_ref().map_or(0, |b| b.len() as u64),
            processes: report.process_ops.clone(),
        };
        if cfg.strategy == Strategy::Coverage {
            r.fork_at = report.setup_complete.as_ref().map(|s| s.syscall_index + 1).unwrap_or(0);
            let (spec, memory) = (self.target.spec.clone(), self.target.memory);
            let fork = Fork::new(spec, memory, &self.settings, r.fork_at, &mut |_, _| {})?;
            r.base_decisions = fork.parent_kernel().decision_count();
        }
        Ok((r, vec![reference]))
    }

    fn base_decisions(r: &ProgramReference) -> u64 {
        r.base_decisions
    }

    fn origin(&self, _cfg: &CampaignConfig, _r: &ProgramReference) -> Input {
        Input::default()
    }

    fn worker(&self, r: &ProgramReference, strategy: Strategy) -> Result<ProgramWorker, ExploreError> {
        if strategy == Strategy::Random {
            return Ok(ProgramWorker { fork: None, applied: 0 });
        }
        let (mut fork, _) = Fork::with_blocks(
            self.target.spec.clone(),
            self.target.memory,
            &self.settings,
            r.fork_at,
            self.blocks_for(r),
            &mut |_, _| {},
        )?;
        let base = fork.parent_kernel().decision_count();
        ensure!(
            base == r.base_decisions,
            crate::ProgramNotDeterministicSnafu { fork_at: r.fork_at, found: base, expected: r.base_decisions }
        );
        fork.set_late_forks(self.late_forks);
        Ok(ProgramWorker { fork: Some(fork), applied: 0 })
    }

    fn run(&self, worker: &mut ProgramWorker, r: &ProgramReference, input: &Input) -> Result<Outcome, ExploreError> {
        let out = match &mut worker.fork {
            Some(fork) => {
                // What the campaign learned since this worker's last round (rounds before
                // this one only: rounds are learned in order, after they ran).
                let learned: Vec<u32> = match self.learned.lock() {
                    Ok(l) => l[worker.applied..].to_vec(),
                    Err(_) => Vec::new(),
                };
                worker.applied += learned.len();
                fork.disarm_blocks(&learned);
                run_on_fork(fork, input)?
            }
            None => run_fresh_under(self.target, &self.settings, r.fork_at, input, &mut |_, _| {})?,
        };
        Ok(match self.blocks_for(r) {
            Some(b) if worker.fork.is_some() => with_blocks(out, b.len()),
            _ => out,
        })
    }

    fn learned_coverage(&self, indices: &[usize]) {
        if self.blocks.is_some() {
            if let Ok(mut l) = self.learned.lock() {
                l.extend(indices.iter().map(|&i| i as u32));
            }
        }
    }

    fn block_coverage(
        &self,
        r: &ProgramReference,
        first_reached: &std::collections::BTreeMap<u32, u64>,
    ) -> Option<deja_explore_report::BlockCoverage> {
        let blocks = self.blocks_for(r)?;
        Some(crate::blockmap::summarize(&blocks, first_reached, &self.scope))
    }

    fn confirm(&self, r: &ProgramReference, input: &Input, out: &Outcome) -> Result<Option<String>, ExploreError> {
        confirm(self.target, &self.settings, r.fork_at, input, out)
    }

    fn facts(&self, out: &Outcome) -> Facts {
        // Only the first life takes the input's overrides: a life after an injected crash is a
        // new core with a log of its own.
        let decisions = out.lives[0]
            .run
            .report
            .decisions
            .iter()
            .map(|d| Decision {
                options: d.options,
                choice: d.choice,
                random: true,
                fault: false,
                structural: false,
                cut: out.lives[0].run.cuts.binary_search(&d.index).is_ok(),
            })
            .collect();
        Facts {
            failure: out.failure.clone(),
            coverage: out.coverage.clone(),
            coverage_at: out.coverage_at.clone(),
            blocks: self.blocks.is_some(),
            semantic: out.semantic.clone(),
            decisions,
            durable_writes: out.durable_writes,
            io_ops: out.io_ops.clone(),
            pending_at_crash: out.pending_at_crash,
            assertions: out.lives.iter().flat_map(|l| l.run.report.assertions.iter().cloned()).collect(),
            // The last life's ledger holds every earlier life's records too.
            faults: out
                .lives
                .last()
                .map_or(Vec::new(), |l| l.run.report.faults.iter().map(|f| f.kind.name().to_string()).collect()),
            nodes: Vec::new(),
            fail_stops: crate::fail_stops::of_lives("", out.lives.iter().map(|l| &l.run.report)),
        }
    }

    fn steering(input: &mut Input) -> (&mut BTreeMap<u64, u64>, &mut Option<u64>) {
        (&mut input.overrides, &mut input.reseed)
    }

    fn mutate_plan(
        &self,
        rng: &mut ChaCha20Rng,
        _seeds: Seeds,
        input: &mut Input,
        parent: &Entry<Input>,
        r: &ProgramReference,
        mode: Mode,
        changed: bool,
    ) {
        if mode.faults() {
            self.mutate_faults(rng, input, parent, r, changed);
        }
        input.fork_at = (input.faults == parent.input.faults && input.seed == parent.input.seed)
            .then(|| first_divergence(parent, input, r.base_decisions))
            .and_then(|first| crate::campaign::late_anchor(parent, first, r.base_decisions, mode));
    }

    fn frontier(&self, r: &ProgramReference, mode: Mode, seed: u64) -> Vec<Input> {
        if !mode.faults() {
            return Vec::new();
        }
        let menu = Menu {
            durable_writes: r.durable_writes,
            io_ops: &r.io_ops,
            pending_at_crash: None,
            processes: &r.processes,
        };
        crate::menu::frontier(&menu, seed)
            .into_iter()
            .map(|mut faults| {
                faults.take_settings(&self.target.spec.faults);
                Input { faults, ..Input::default() }
            })
            .collect()
    }

    fn follow_ups(&self, input: &Input, out: &Outcome, mode: Mode) -> Vec<FollowUp<Input>> {
        if !mode.faults() {
            return Vec::new();
        }
        let exited_zero = out.lives[0].run.report.exit == deja_kernel::ExitStatus::Exited { code: 0 };
        // A round with other errors says when the program went on, not that it stops.
        let alone = input.faults.errors.len() == 1;
        crate::menu::after_failed_syncs(&input.faults, &out.io_ops, exited_zero)
            .into_iter()
            .filter(|(_, _, went_on)| *went_on || alone)
            .map(|(path, nth, went_on)| {
                // The round as it ran (its seed, decisions and faults), then each crash.
                let plans = if went_on { crate::menu::sync_then_crash(&path, nth) } else { Vec::new() };
                let plans = plans
                    .into_iter()
                    .map(|c| {
                        let faults = deja_kernel::FaultConfig {
                            crash_at: c.crash_at,
                            crash_at_exit: c.crash_at_exit,
                            ..input.faults.clone()
                        };
                        Input { faults, fork_at: None, ..input.clone() }
                    })
                    .collect();
                FollowUp { key: follow_key(&path, nth), plans }
            })
            .collect()
    }

    fn follow_key(&self, input: &Input) -> Option<String> {
        crate::menu::composed_sync(&input.faults).map(|(path, nth)| follow_key(path, nth))
    }

    fn frontier_round(&self, rng: &mut ChaCha20Rng, mut input: Input) -> Input {
        input.faults = crate::menu::frontier_round(rng, input.faults);
        input
    }

    fn fresh(&self, rng: &mut ChaCha20Rng, seed: u64, r: &ProgramReference, _s: Strategy, mode: Mode) -> Input {
        let mut input = Input { seed: Some(seed), ..Input::default() };
        if mode.faults() {
            let menu = Menu {
                durable_writes: r.durable_writes,
                io_ops: &r.io_ops,
                pending_at_crash: None,
                processes: &r.processes,
            };
            input.faults = crate::menu::random(rng, &menu);
        }
        input.faults.take_settings(&self.target.spec.faults);
        input
    }

    fn as_failure(
        &self,
        r: &ProgramReference,
        input: &Input,
        round: u64,
        path: &Path,
    ) -> Result<Option<WrittenBug>, ExploreError> {
        let mut counted = input.clone();
        counted.faults.fail_stop = deja_kernel::FailStopMode::Never;
        let out = run_fresh_under(self.target, &self.settings, r.fork_at, &counted, &mut |_, _| {})?;
        if out.failure.is_none() {
            return Ok(None);
        }
        self.write_bug(r, &counted, &out, round, path).map(Some)
    }

    fn write_bug(
        &self,
        r: &ProgramReference,
        input: &Input,
        out: &Outcome,
        round: u64,
        path: &Path,
    ) -> Result<WrittenBug, ExploreError> {
        let file = path.display().to_string();
        let bug = BugFile::new(self.target, &self.settings, r.fork_at, input, out, round, &file);
        bug.write(path)?;
        Ok(WrittenBug {
            reproduce: bug.reproduce,
            decisions: out.decisions.len() as u64,
            window: None,
            crash: crash_words(out, input.faults.crash_model).map(|words| {
                match crate::input::crash_difference(self.target, &self.settings, r.fork_at, input, out) {
                    Some(d) => format!("{words}\nthe first read that saw the difference: {d}"),
                    None => words,
                }
            }),
        })
    }
}

/// The crash states a run's crashes took, for the reports: per crashed life, the state, the
/// models that allow it and what a failure in it is, then the pending operations in program
/// order, each kept, dropped or torn.
fn crash_words(out: &Outcome, model: deja_kernel::CrashModel) -> Option<String> {
    let mut lines = Vec::new();
    for (i, life) in out.lives.iter().enumerate() {
        let Some(c) = &life.run.report.crash_state else { continue };
        let names: Vec<&str> = c.models.iter().map(|m| m.name()).collect();
        let kind = deja_kernel::CrashModel::strongest(&c.models).map(|m| m.failure_words()).unwrap_or_default();
        lines.push(format!(
            "life {i} crashed under {}: {}; allowed by {} — {kind}",
            model.name(),
            c.state.describe(c.pending.len()),
            names.join(", ")
        ));
        lines.extend(c.state.operations(&c.pending).into_iter().map(|o| format!("  {o}")));
    }
    (!lines.is_empty()).then(|| lines.join("\n"))
}

/// The first decision after the fork point's `base` whose choice in a child steered by `input`
/// may differ from its parent's: one it overrides with another choice than the parent took, or
/// one it does not override while its stream (its reseed) is not the parent's, or the parent's
/// choice came from an override. A child whose overrides pin its parent's choices up to a tail
/// cut keeps its parent's course up to there, whatever its reseed.
fn first_divergence(parent: &Entry<Input>, input: &Input, base: u64) -> u64 {
    let same_stream = input.reseed == parent.input.reseed;
    (base..parent.decisions.len() as u64)
        .find(|&i| {
            let d = &parent.decisions[i as usize];
            match input.overrides.get(&i) {
                Some(&c) => (if d.options == 0 { c } else { c % d.options }) != d.choice,
                None => !same_stream || parent.input.overrides.contains_key(&i),
            }
        })
        .unwrap_or(parent.decisions.len() as u64)
}

/// Runs a campaign over one program (or continues one) under `cfg.settings` and writes its files
/// under `cfg.out`.
pub fn explore(
    target: &Target,
    cfg: &CampaignConfig,
    progress: &mut dyn FnMut(&crate::Progress),
) -> Result<crate::Campaign, ExploreError> {
    let subject = ProgramSubject {
        late_forks: cfg.late_forks,
        ..ProgramSubject::new(target, &cfg.settings, cfg.block_coverage, &cfg.cover)
    };
    crate::campaign::explore(&subject, cfg, progress)
}

/// The key of a failed sync's follow-up ([`Subject::follow_key`]).
fn follow_key(path: &str, nth: u64) -> String {
    format!("failed sync #{nth} of {path}")
}
