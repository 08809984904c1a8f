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

use deja_vmm::Fork;
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};

use crate::campaign::{CampaignConfig, Decision, Entry, Facts, Mode, Program, Seeds, Strategy, Subject, WrittenBug};
use crate::input::{confirm, run_fresh, run_on_fork, BugFile, Input, Outcome, Target};
use crate::menu::{below, Menu};
use crate::ExploreError;
use snafu::ensure;

/// A program under exploration.
pub struct ProgramSubject<'a> {
    target: &'a Target,
    blake3: String,
}

impl<'a> ProgramSubject<'a> {
    /// The subject of `target`.
    pub fn new(target: &'a Target) -> ProgramSubject<'a> {
        ProgramSubject { target, blake3: blake3::hash(&target.spec.image).to_hex().to_string() }
    }
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
}

impl Subject for ProgramSubject<'_> {
    type Input = Input;
    type Outcome = Outcome;
    type Worker = Option<Fork>;
    type Reference = ProgramReference;
    const KIND: &'static str = "program";

    fn identity(&self) -> Program {
        Program { path: self.target.path.clone(), blake3: self.blake3.clone() }
    }

    fn bug_subject(&self) -> String {
        self.blake3.clone()
    }

    fn bootstrap(&self, cfg: &CampaignConfig) -> Result<(ProgramReference, Vec<Outcome>), ExploreError> {
        let reference = run_fresh(self.target, u64::MAX, &Input::default(), &mut |_, _| {})?;
        let report = &reference.lives[0].run.report;
        let mut r = ProgramReference {
            fork_at: 0,
            base_decisions: 0,
            durable_writes: reference.durable_writes,
            io_ops: reference.io_ops.clone(),
        };
        if cfg.strategy == Strategy::Coverage {
            r.fork_at = report.setup_complete.as_ref().map(|s| s.syscall_index + 1).unwrap_or(0);
            let fork = Fork::new(self.target.spec.clone(), self.target.memory, r.fork_at, &mut |_, _| {})?;
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

    fn worker(&self, r: &ProgramReference, strategy: Strategy) -> Result<Option<Fork>, ExploreError> {
        if strategy == Strategy::Random {
            return Ok(None);
        }
        let fork = Fork::new(self.target.spec.clone(), self.target.memory, r.fork_at, &mut |_, _| {})?;
        let base = fork.parent_kernel().decision_count();
        ensure!(
            base == r.base_decisions,
            crate::ProgramNotDeterministicSnafu { fork_at: r.fork_at, found: base, expected: r.base_decisions }
        );
        Ok(Some(fork))
    }

    fn run(&self, worker: &mut Option<Fork>, r: &ProgramReference, input: &Input) -> Result<Outcome, ExploreError> {
        match worker {
            Some(fork) => run_on_fork(fork, input),
            None => run_fresh(self.target, r.fork_at, input, &mut |_, _| {}),
        }
    }

    fn confirm(&self, r: &ProgramReference, input: &Input, out: &Outcome) -> Result<Option<String>, ExploreError> {
        confirm(self.target, r.fork_at, input, out)
    }

    fn facts(&self, out: &Outcome) -> Facts {
        // Only the first life takes the input's overrides: a life after an injected crash is a
        // new core with a log of its own.
        let decisions = out.lives[0]
            .run
            .report
            .decisions
            .iter()
            .map(|d| Decision { options: d.options, choice: d.choice, random: true, fault: false, structural: false })
            .collect();
        Facts {
            failure: out.failure.clone(),
            coverage: out.coverage.clone(),
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
        if !mode.faults() {
            return;
        }
        let io_ops = if parent.io_ops.is_empty() { &r.io_ops } else { &parent.io_ops };
        let menu = Menu {
            durable_writes: parent.durable_writes.max(r.durable_writes),
            io_ops,
            pending_at_crash: parent.pending_at_crash,
        };
        // One or two changes from the fault menu (always one when nothing else changed).
        let n = if changed { below(rng, 2) } else { 1 + below(rng, 2) };
        for _ in 0..n {
            crate::menu::mutate(rng, &mut input.faults, &menu);
        }
    }

    fn fresh(&self, rng: &mut ChaCha20Rng, seed: u64, r: &ProgramReference, _s: Strategy, mode: Mode) -> Input {
        let mut input = Input { seed: Some(seed), ..Input::default() };
        if mode.faults() {
            let menu = Menu { durable_writes: r.durable_writes, io_ops: &r.io_ops, pending_at_crash: None };
            input.faults = crate::menu::random(rng, &menu);
        }
        input
    }

    fn write_bug(
        &self,
        r: &ProgramReference,
        input: &Input,
        out: &Outcome,
        round: u64,
        path: &Path,
    ) -> Result<WrittenBug, ExploreError> {
        let bug = BugFile::new(self.target, r.fork_at, input, out, round, &path.display().to_string());
        bug.write(path)?;
        Ok(WrittenBug { reproduce: bug.reproduce, decisions: out.decisions.len() as u64, window: None })
    }
}

/// Runs a campaign over one program (or continues one) and writes its files under `cfg.out`.
pub fn explore(
    target: &Target,
    cfg: &CampaignConfig,
    progress: &mut dyn FnMut(&crate::Progress),
) -> Result<crate::Campaign, ExploreError> {
    crate::campaign::explore(&ProgramSubject::new(target), cfg, progress)
}
