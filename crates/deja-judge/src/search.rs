//! Fault plans by meaning, and the search that hunts for a failure on the base and sweeps the
//! candidate: every crash point (before and after each durable write, at exit) with the distinct
//! crash states at each, then an error placed on each file operation of the run (the storage
//! fault menu of [`deja_explore::menu`]).
//!
//! A plan names its crash by meaning: the kind of crash point and the durable write it concerns,
//! and the pending operations the crash keeps by what they are ("write of 256 bytes at 0 to
//! /data/pages"), so that it can be replayed against another binary, whose pending list at the
//! same point may hold other operations.

use std::ops::ControlFlow;

use deja_explore::Outcome;
use deja_kernel::{CrashPoint, CrashState, FaultConfig, ProgramSpec, When};
use deja_vmm::{BootOptions, Session, Settings};
use serde::{Deserialize, Serialize};

use crate::RunFailure;

/// Where a plan's crash happens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CrashKind {
    /// Right after the k-th durable write took effect.
    #[default]
    After,
    /// When the program makes its k-th durable write, before it takes effect.
    Before,
    /// When the program exits.
    Exit,
    /// No crash: the failure comes from a placed error alone.
    None,
}

impl CrashKind {
    /// The kind of a crash point, and the durable write it concerns (0 at exit).
    pub fn of(point: CrashPoint) -> (CrashKind, u64) {
        let kind = match point {
            CrashPoint::Before(_) => CrashKind::Before,
            CrashPoint::After(_) => CrashKind::After,
            CrashPoint::AtExit => CrashKind::Exit,
        };
        (kind, point.write())
    }

    /// The crash point of this kind at durable write `k` (`None` for no crash).
    pub fn point(self, k: u64) -> Option<CrashPoint> {
        match self {
            CrashKind::After => Some(CrashPoint::After(k)),
            CrashKind::Before => Some(CrashPoint::Before(k)),
            CrashKind::Exit => Some(CrashPoint::AtExit),
            CrashKind::None => None,
        }
    }

    /// True for the default, [`CrashKind::After`] (what capsules before crash kinds meant).
    pub fn is_after(&self) -> bool {
        *self == CrashKind::After
    }

    fn words(self, k: u64) -> String {
        self.point(k).map_or_else(|| "no crash".into(), |p| format!("crash {}", p.words()))
    }
}

pub use deja_kernel::KeptOps;

/// A fault plan: a crash (by meaning), what it keeps, and the other faults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The crash point's kind.
    pub crash: CrashKind,
    /// The durable write it concerns (for `After` and `Before`).
    pub k: u64,
    /// What the crash keeps; `None`: the run's decisions choose, as `faults` allows.
    pub kept: Option<KeptOps>,
    /// Everything else: placed errors, rates, crash-state modes.
    pub faults: FaultConfig,
}

impl Plan {
    /// In words: `crash before durable write 4, kept: …; EIO on write #3 to /data/log`.
    pub fn describe(&self) -> String {
        let mut parts = vec![];
        if self.crash != CrashKind::None {
            parts.push(self.crash.words(self.k));
        }
        if let Some(k) = &self.kept {
            parts.push(k.describe());
        }
        parts.extend(self.faults.errors.iter().map(|r| r.describe()));
        if self.crash != CrashKind::None && self.faults.crash_model != deja_kernel::CrashModel::PosixWeak {
            parts.push(format!("crash model {}", self.faults.crash_model.name()));
        }
        parts.join(", ")
    }

    /// The plan's faults with its crash point set (what a capsule freezes).
    pub fn faults_with_crash(&self) -> FaultConfig {
        self.config()
    }

    /// The fault configuration of the plan's crash point (without a named state).
    fn config(&self) -> FaultConfig {
        let mut f = self.faults.for_restart();
        f.errors = self.faults.errors.clone();
        f.crash_at = self.faults.crash_at.clone();
        if let Some(point) = self.crash.point(self.k) {
            point.place(&mut f);
        }
        f
    }
}

fn outcome_of(lives: Vec<deja_vmm::Incarnation>) -> Outcome {
    deja_explore::input::outcome(lives, &[])
}

/// How a capsule's run is steered, as `deja explore` steered the run it froze: from the
/// syscall after the program's `setup_complete` (`at_setup`) or from its start, decision
/// overrides by position, and every other decision drawn from another seed's stream.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Steer {
    /// The input applies from the syscall after `setup_complete` (else from the start).
    pub at_setup: bool,
    /// Decision index → choice.
    pub overrides: std::collections::BTreeMap<u64, u64>,
    /// Every decision not overridden is drawn from this seed's stream.
    pub reseed: Option<u64>,
}

impl Steer {
    /// Where a program whose untouched run was `plain` takes this steering: the syscall after
    /// its `setup_complete`, or 0.
    pub fn fork_at(&self, plain: &Outcome) -> u64 {
        if !self.at_setup {
            return 0;
        }
        let report = &plain.lives[0].run.report;
        report.setup_complete.as_ref().map_or(0, |s| s.syscall_index + 1)
    }

    /// The explorer's input of this steering with `faults`.
    fn input(&self, faults: FaultConfig) -> deja_explore::Input {
        deja_explore::Input { overrides: self.overrides.clone(), faults, reseed: self.reseed, ..Default::default() }
    }
}

/// What every run of a check is made on, whichever way it is made (a fresh steered run through
/// the explorer, or a session the search crashes and restarts): the guest's RAM and the run
/// settings of the `deja` command (CPU identity, code rewriting, the vDSO, the no-progress
/// limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Machine {
    /// Guest RAM in MiB.
    pub memory_mib: u64,
    /// The settings every VM of the check boots with.
    pub settings: Settings,
}

impl Machine {
    /// How every VM of the check is built.
    pub fn boot_options(&self) -> BootOptions {
        BootOptions::new(self.settings)
    }

    /// Runs `input` on `spec` from scratch, the program untouched up to syscall `fork_at`: the
    /// run `deja replay` makes of a bug file with that input.
    pub fn run_fresh(
        &self,
        spec: &ProgramSpec,
        fork_at: u64,
        input: &deja_explore::Input,
    ) -> Result<Outcome, RunFailure> {
        let target =
            deja_explore::Target { spec: spec.clone(), memory: self.memory_mib << 20, path: String::new(), root: None };
        Ok(deja_explore::input::run_fresh_under(&target, &self.settings, fork_at, input, &mut |_, _| {})?)
    }

    /// Boots `spec` in a fresh VM; nothing has run yet.
    fn boot(&self, spec: ProgramSpec) -> Result<Session, RunFailure> {
        Ok(Session::boot_with(spec, self.memory_mib << 20, self.boot_options())?)
    }
}

/// Runs `spec` on `m` with no fault, steered by `steer` from syscall `fork_at`: the run a
/// capsule's triggers are mapped on.
pub fn run_steered(spec: &ProgramSpec, m: &Machine, steer: &Steer, fork_at: u64) -> Result<Outcome, RunFailure> {
    m.run_fresh(spec, fork_at, &steer.input(FaultConfig::default()))
}

/// Runs `spec` on `m` under `plan`, steered by `steer` from syscall `fork_at` on: the run `deja
/// replay` makes of a bug file with that input, the plan's crash state named by meaning.
pub fn run_plan(
    spec: &ProgramSpec,
    m: &Machine,
    plan: &Plan,
    steer: &Steer,
    fork_at: u64,
) -> Result<Outcome, RunFailure> {
    let input = steer.input(plan.config());
    let Some(kept) = plan.kept.as_ref().filter(|_| plan.crash != CrashKind::None) else {
        return m.run_fresh(spec, fork_at, &input);
    };
    let mut c = m.boot(spec.clone())?;
    if c.run_to_syscall(fork_at, &mut |_, _| {})? {
        input.prepare(c.kernel_mut());
    }
    let lives = if c.run_to_crash(&mut |_, _| {})? {
        let state = kept.state_over(&c.kernel().pending_operations());
        c.restart_crashed(&state, &mut |_, _| {})
    } else {
        c.lives(&mut |_, _| {}, None)
    };
    Ok(outcome_of(lives?))
}

/// What a search saw.
#[derive(Debug, Clone, Default)]
pub struct Searched {
    /// The digest of every run it made, in order.
    pub digests: Vec<String>,
    /// Crash points visited.
    pub points: u64,
    /// Crash points the program never reached.
    pub unreached: Vec<String>,
    /// Runs made.
    pub runs: u64,
    /// It stopped because its visitor said so.
    pub stopped: bool,
}

/// One step of a search, in its fixed order.
#[derive(Debug)]
pub enum Visit {
    /// A run, and the plan it ran under.
    Ran(Box<(Plan, Outcome)>),
    /// A crash point the program never reached, in words.
    Unreached(String),
}

/// Searches for a failure: for k in 1..=`durable_writes` (at most `max_points`), a crash after
/// durable write k (the durable layer) and before it (its distinct crash states, at most
/// `states` each), then at exit (its states), then an error on each file operation of `control`
/// (EIO, and ENOSPC where a disk can run out), every run on `m`. Each run, and each crash
/// point never reached, is given to `visit` in that order; the search stops when `visit` says
/// so (the hunt, at its first failure; the sweep, when a run decides).
pub fn search(
    spec: &ProgramSpec,
    m: &Machine,
    control: &Outcome,
    max_points: u64,
    states: usize,
    visit: &mut dyn FnMut(Visit) -> ControlFlow<()>,
) -> Result<Searched, RunFailure> {
    let mut out = Searched::default();
    // Every crash of the search keeps to the spec's crash model, every stop to its fail-stop rule.
    let mut modelled = FaultConfig::default();
    modelled.take_settings(&spec.faults);
    let d = control.durable_writes.min(max_points);
    for point in deja_kernel::faults::crash_points::crash_points(d, &[When::After, When::Before], true) {
        let (kind, k) = CrashKind::of(point);
        out.points += 1;
        let plan = Plan { crash: kind, k, kept: None, faults: modelled.clone() };
        let mut s = spec.clone();
        s.faults = plan.config();
        let mut crashed = m.boot(s)?;
        if !crashed.run_to_crash(&mut |_, _| {})? {
            out.unreached.push(kind.words(k));
            if visit(Visit::Unreached(kind.words(k))).is_break() {
                out.stopped = true;
                return Ok(out);
            }
            continue;
        }
        let pending = crashed.kernel().pending_operations();
        // After a durable write the sweep keeps to the durable layer: the states with pending
        // operations of that point are those of the crash before the next one.
        let budget = if kind == CrashKind::After { 1 } else { states.max(1) };
        let found = if kind == CrashKind::After {
            vec![(CrashState::none(), String::new())]
        } else {
            crashed.kernel().crash_states(budget, spec.seed ^ k).states
        };
        for (state, _) in found {
            let lives = crashed.restart_crashed(&state, &mut |_, _| {})?;
            out.runs += 1;
            let o = outcome_of(lives);
            out.digests.push(o.digest.clone());
            let kept = KeptOps::of(&state, &pending);
            let plan = Plan { crash: kind, k, kept: Some(kept), faults: modelled.clone() };
            if visit(Visit::Ran(Box::new((plan, o)))).is_break() {
                out.stopped = true;
                return Ok(out);
            }
        }
    }
    let menu =
        deja_explore::menu::Menu { durable_writes: 0, io_ops: &control.io_ops, pending_at_crash: None, processes: &[] };
    for faults in deja_explore::menu::hunt(&menu, usize::MAX) {
        let plan = Plan {
            crash: CrashKind::None,
            k: 0,
            kept: None,
            faults: FaultConfig { crash_model: modelled.crash_model, fail_stop: modelled.fail_stop.clone(), ..faults },
        };
        let o = run_plan(spec, m, &plan, &Steer::default(), 0)?;
        out.runs += 1;
        out.digests.push(o.digest.clone());
        if visit(Visit::Ran(Box::new((plan, o)))).is_break() {
            out.stopped = true;
            return Ok(out);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_operations_map_by_meaning() {
        let base = ["size of /d/p set to 512", "write of 256 bytes at 256 to /d/p", "write of 256 bytes at 0 to /d/p"];
        let base: Vec<String> = base.iter().map(|s| s.to_string()).collect();
        let state = CrashState { kept: vec![2], torn: Some((1, 1)) };
        let k = KeptOps::of(&state, &base);
        assert_eq!(k.ops, vec!["write of 256 bytes at 0 to /d/p".to_string()]);
        assert_eq!(k.state_over(&base), state);
        // A candidate that synced the first two already: only the header write is pending.
        let candidate = vec!["write of 256 bytes at 0 to /d/p".to_string()];
        assert_eq!(k.state_over(&candidate), CrashState { kept: vec![0], torn: None });
        assert_eq!(k.state_over(&[]), CrashState::none());
        assert!(k.describe().contains("cut after 1 sectors"));
    }
}
