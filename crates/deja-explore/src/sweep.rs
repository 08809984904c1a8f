//! Crash sweeps (`deja run --crash-sweep`): crash a program at every crash point (before and
//! after each durable write, and at exit), try the distinct crash states at each (CrashMonkey
//! style, bounded: everything persisted, nothing, each pending operation dropped alone, each
//! prefix, the torn variants of the last write, random subsets), restart each on what
//! survived, and report whether every restart held. A disk image met before (at this point or
//! another) is not restarted again: its restart would be the same run.
//! [`SweepOptions::after_writes_only`] runs the sweep deja had before crash states: right after
//! each durable write, the durable layer alone. [`SweepOptions::fsync_failures`] adds
//! fsyncgate: each fsync failed once, then every crash point after it.
//!
//! Owns the sweep and its report ([`SweepReport`], one [`SweepRow`] per crash point and
//! distinct state). Uses `deja-vmm`'s sessions to run, `deja-kernel`'s crash points, crash
//! states and models, and [`crate::first_restart_difference`]. It prints nothing and knows no
//! command line: a row says what reproduces it ([`Reproduce`]), and the caller turns that into
//! the command it prints ([`SweepReport::set_replays`]).

use std::collections::BTreeMap;

use deja_kernel::{
    CrashModel, CrashPoint, CrashState, ErrorRule, FailedSync, FaultConfig, IoCount, IoErrno, IoOp, ProgramSpec,
    Stream, TraceEntry, When,
};
use deja_vmm::{lives_digest, BootOptions, Incarnation, RunError, Session, Settings};
use snafu::{OptionExt, Snafu};

/// What a sweep is asked to do besides the program: the sweep's flags of `deja run`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SweepOptions {
    /// Guest RAM of every run, in MiB (`--memory`).
    pub memory_mib: u64,
    /// The crash model the states are drawn from (`--crash-model`; the spec's faults carry it
    /// to the kernel, this names it in the report).
    pub crash_model: CrashModel,
    /// The weakest model whose failures fail the sweep (`--fail-on`); failures only weaker
    /// models allow are portability hazards.
    pub fail_on: CrashModel,
    /// Crash states per crash point, at most (distinct images only; at least 1).
    pub states_per_point: usize,
    /// fsyncs of the run failed once each with EIO, at most (0: none).
    pub fsync_failures: usize,
    /// For each failed fsync, the subsets of what it covered that it may have written back
    /// before failing, at most (0: only everything dropped).
    pub fsync_writebacks: usize,
    /// Only the points right after each durable write, with the durable layer alone.
    pub after_writes_only: bool,
}

impl Default for SweepOptions {
    /// `deja run --crash-sweep`'s defaults.
    fn default() -> Self {
        SweepOptions {
            memory_mib: 1024,
            crash_model: CrashModel::PosixWeak,
            fail_on: CrashModel::PosixWeak,
            states_per_point: 16,
            fsync_failures: 0,
            fsync_writebacks: 0,
            after_writes_only: false,
        }
    }
}

/// Why a sweep could not be made. A run that fails to boot or to reach a point is not an
/// error: it is a row of the report (`incomplete`), or the reason the evidence is incomplete.
#[derive(Debug, Snafu)]
pub enum SweepError {
    /// The guest memory asked for does not fit in a byte count.
    #[snafu(display("{mib} MiB of guest memory is more than a 64-bit byte count holds; ask for less"))]
    Memory {
        /// The MiB asked for.
        mib: u64,
    },
    /// A run returned no life at all.
    #[snafu(display("{what} returned no life, not even the first: a fault of deja's monitor"))]
    NoLife {
        /// Which run: `the run without a crash`, `a restart`.
        what: &'static str,
    },
}

/// What reproduces a row, beyond the sweep's own run: the flags of `deja run` that place its
/// fault and crash point, and the crash state it restarted from, if it did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reproduce {
    /// `--fail=…`, `--crash-before-durable-write=3`, … in order.
    pub flags: Vec<String>,
    /// The crash state (for `--crash-state`, after the flags), if the row names one.
    pub crash_state: Option<CrashState>,
}

/// What one crash state at one crash point showed.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SweepRow {
    /// The crash point: `before durable write 3`, `after durable write 3`, `at exit`.
    pub crash_point: String,
    /// What the program was doing there: the syscall and its position in the run.
    pub point: String,
    /// The crash state: which pending operations reached the disk.
    pub state: String,
    /// BLAKE3 of the disk image the restart started from.
    pub image: String,
    /// Files and directories whose unsynced state the crash threw away.
    pub lost: Vec<String>,
    /// `held`, `failed`, `incomplete` (the run never reached this point), or, for an image an
    /// earlier row already restarted from (not run again), `same_image` when that restart held
    /// and `same_image_failed` when it did not: a point is only as good as its images.
    pub result: &'static str,
    /// The restart's exit code (128 + signal for a fatal signal).
    pub restart_exit_code: Option<i32>,
    /// Messages of the assertions that failed in the restart.
    pub failed_assertions: Vec<String>,
    /// The restart's stderr lines, for the reader (at most 5).
    pub restart_stderr: Vec<String>,
    /// Digest over every life of this run.
    pub digest: String,
    /// The one command that replays it: empty from [`sweep`], set by the caller from
    /// [`SweepRow::reproduce`] ([`SweepReport::set_replays`]).
    pub replay: String,
    /// The crash models under which the crash leaves this image, weakest first.
    pub models: Vec<&'static str>,
    /// For a failure: the strongest of those models, what the failure is a bug on.
    pub bug_on: Option<&'static str>,
    /// For a failure: whether it fails the sweep under `--fail-on` (its models include it).
    pub counts: bool,
    /// For a failure: the pending operations in program order, each `kept`, `dropped` or
    /// `torn after K sectors`.
    pub operations: Vec<String>,
    /// For a failure: the first syscall of the restart whose result differs from the restart
    /// of the same crash point that kept everything (when that one held), with both results.
    pub first_difference: Option<String>,
    /// What reproduces it (not in the JSON: [`SweepRow::replay`] says it as a command).
    #[serde(skip)]
    pub reproduce: Reproduce,
}

/// The sweep's outcome.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SweepReport {
    /// Schema of this JSON.
    pub schema: &'static str,
    /// The crash model the states are drawn from (`--crash-model`).
    pub model: &'static str,
    /// What that model keeps, in a line.
    pub model_words: &'static str,
    /// The weakest model whose failures fail the sweep (`--fail-on`).
    pub fail_on: &'static str,
    /// Failures that count under `--fail-on`.
    pub failures: u64,
    /// Failures only weaker models allow: portability hazards, reported but not failing.
    pub hazards: u64,
    /// Durable writes of the run without a crash.
    pub durable_writes: u64,
    /// Crash points visited.
    pub crash_points: u64,
    /// Candidate crash states whose images were computed.
    pub states_tried: u64,
    /// Distinct crash states (by image, per point).
    pub distinct_states: u64,
    /// Restarts run (distinct images over the whole sweep).
    pub restarts: u64,
    /// fsyncs failed once each (`--fsync-failures`), each followed by every later crash point.
    pub fsync_failures: u64,
    /// One row per crash point and distinct state.
    pub rows: Vec<SweepRow>,
    /// `all_held`, `failures`, `hazards_only` (every failure is outside `--fail-on`) or
    /// `evidence_incomplete`.
    pub verdict: &'static str,
    /// Why the evidence is incomplete, if it is.
    pub incomplete_because: Option<String>,
    /// BLAKE3 over the rows' results and digests: two sweeps agree exactly when these agree.
    pub digest: String,
}

impl SweepReport {
    /// The report of a sweep under `opts` that has not run yet.
    fn new(opts: &SweepOptions) -> SweepReport {
        SweepReport {
            schema: "deja.crash-sweep/3",
            model: opts.crash_model.name(),
            model_words: opts.crash_model.words(),
            fail_on: opts.fail_on.name(),
            failures: 0,
            hazards: 0,
            durable_writes: 0,
            crash_points: 0,
            states_tried: 0,
            distinct_states: 0,
            restarts: 0,
            fsync_failures: 0,
            rows: Vec::new(),
            verdict: "evidence_incomplete",
            incomplete_because: None,
            digest: String::new(),
        }
    }

    /// Sets each row's [`SweepRow::replay`] to `command` of what reproduces it.
    pub fn set_replays(&mut self, command: impl Fn(&Reproduce) -> String) {
        for row in &mut self.rows {
            row.replay = command(&row.reproduce);
        }
    }

    /// Whether every restart held (`all_held`, or `hazards_only`: the failures are all outside
    /// `--fail-on`).
    pub fn held(&self) -> bool {
        matches!(self.verdict, "all_held" | "hazards_only")
    }

    /// Whether a restart failed under `--fail-on`.
    pub fn failed(&self) -> bool {
        self.verdict == "failures"
    }
}

/// Sweeps `spec` (its faults but the crash point it places, which the sweep places) under
/// `opts`, every run under `settings`. The verdict is in the report: `all_held`,
/// `hazards_only`, `failures`, or `evidence_incomplete` (with why).
pub fn sweep(spec: ProgramSpec, opts: &SweepOptions, settings: &Settings) -> Result<SweepReport, SweepError> {
    let memory = opts.memory_mib.checked_mul(1 << 20).context(MemorySnafu { mib: opts.memory_mib })?;
    let mut s = Sweeper {
        spec: &spec,
        opts,
        settings,
        memory,
        report: SweepReport::new(opts),
        restarted: BTreeMap::new(),
        kept_all: BTreeMap::new(),
    };
    let mut reference_spec = spec.clone();
    reference_spec.faults = reference_spec.faults.for_restart();
    match s.run_quiet(reference_spec) {
        Err(e) => s.report.incomplete_because = Some(format!("the run without a crash failed to run: {e}")),
        Ok((lives, _)) => {
            let life = lives.first().context(NoLifeSnafu { what: "the run without a crash" })?;
            s.report.durable_writes = life.run.report.durable_writes;
            if exit_code(life) != 0 || life.run.report.assertion_failed() {
                s.report.incomplete_because = Some(format!(
                    "the program fails without any crash (exit code {}); a sweep cannot tell crash bugs apart",
                    exit_code(life)
                ));
            } else if s.report.durable_writes == 0 && (opts.after_writes_only || life.run.report.files.is_empty()) {
                s.report.incomplete_because = Some("the program made no durable write: there is no kill point".into());
            }
        }
    }
    if s.report.incomplete_because.is_none() {
        let base = spec.faults.for_restart();
        for point in points(opts.after_writes_only, &base, s.report.durable_writes) {
            s.report.crash_points += 1;
            s.sweep_point(&point)?;
        }
        if opts.fsync_failures > 0 {
            s.fsync_failure_sweep(&base)?;
        }
        conclude(&mut s.report);
    }
    s.report.digest = digest(&s.report);
    Ok(s.report)
}

/// The failures, hazards and verdict of a swept report, from its rows.
fn conclude(report: &mut SweepReport) {
    let failing = |r: &&SweepRow| matches!(r.result, "failed" | "same_image_failed");
    report.failures = report.rows.iter().filter(failing).filter(|r| r.counts).count() as u64;
    report.hazards = report.rows.iter().filter(failing).filter(|r| !r.counts).count() as u64;
    let failed = report.failures > 0;
    let incomplete = report.rows.iter().any(|r| r.result == "incomplete");
    if report.durable_writes == 0 && report.rows.iter().all(|r| r.state.starts_with("kept 0 of 0")) {
        // Nothing was ever durable and nothing was pending at exit: no crash could change
        // anything, so nothing was tested.
        report.incomplete_because = Some("the program made no durable write and left nothing pending".into());
    }
    report.verdict = if incomplete || report.incomplete_because.is_some() {
        report.incomplete_because.get_or_insert_with(|| "some crash points were never reached or did not run".into());
        "evidence_incomplete"
    } else if failed {
        "failures"
    } else if report.hazards > 0 {
        "hazards_only"
    } else {
        "all_held"
    };
}

/// BLAKE3 over the rows' crash points, states, images, digests and results, and the verdict.
fn digest(report: &SweepReport) -> String {
    let mut h = blake3::Hasher::new();
    for r in &report.rows {
        for part in [&r.crash_point, &r.state, &r.image, &r.digest] {
            h.update(part.as_bytes());
            h.update(&[0]);
        }
        h.update(r.result.as_bytes());
    }
    h.update(report.verdict.as_bytes());
    h.finalize().to_hex().to_string()
}

fn exit_code(life: &Incarnation) -> i32 {
    life.run.report.exit.code()
}

/// The last life of `lives`.
fn last<'a>(lives: &'a [Incarnation], what: &'static str) -> Result<&'a Incarnation, SweepError> {
    lives.last().context(NoLifeSnafu { what })
}

/// The messages of the assertions of `life` that failed.
fn failed_assertions(life: &Incarnation) -> Vec<String> {
    life.run.report.assertions.iter().filter(|a| a.bug).map(|a| a.message.clone()).collect()
}

/// The first 5 lines of a run's stderr worth showing: not empty, not deja's own JSON events.
fn stderr_lines(stderr: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(stderr);
    text.lines().filter(|l| !l.starts_with("{\"deja\"") && !l.is_empty()).take(5).map(String::from).collect()
}

/// One crash point of the sweep: the flags that make it, its words and its fault
/// configuration. A point after a placed fsync error (`after_error`) is only a point once that
/// error struck; a run that ends before it (a fail-stop) is not a gap in the evidence.
#[derive(Debug, Clone)]
struct Point {
    flags: Vec<String>,
    words: String,
    faults: FaultConfig,
    salt: u64,
    after_error: bool,
    /// The models the fault before the crash keeps to (a failed fsync's write-back), when not
    /// every one: a state's label is cut down to them.
    allowed: Option<Vec<CrashModel>>,
}

impl Point {
    fn at(base: &FaultConfig, point: CrashPoint) -> Point {
        let flag = point.flag();
        let salt = point.write().rotate_left(17) ^ u64::from(flag.len() as u32);
        Point {
            flags: vec![flag],
            words: point.words(),
            faults: point.on(base),
            salt,
            after_error: false,
            allowed: None,
        }
    }
}

/// Before and after each of `durable_writes` durable writes, and at exit (right after each
/// alone when `after_writes_only`), on top of `base`: the crash points of
/// [`deja_kernel::faults::crash_points`].
fn points(after_writes_only: bool, base: &FaultConfig, durable_writes: u64) -> Vec<Point> {
    let sides: &[When] = if after_writes_only { &[When::After] } else { &[When::Before, When::After] };
    deja_kernel::faults::crash_points::crash_points(durable_writes, sides, !after_writes_only)
        .into_iter()
        .map(|p| Point::at(base, p))
        .collect()
}

/// The fsync failures the sweep places, at most `most`: the first fsync of each path that
/// made one (in the order of `io_ops`), then the second of each that made two, and so on.
fn fsync_rules(io_ops: &[IoCount], most: usize) -> Vec<ErrorRule> {
    let fsyncs: Vec<(&str, u64)> =
        io_ops.iter().filter(|c| c.op == IoOp::Fsync).map(|c| (c.path.as_str(), c.count)).collect();
    let deepest = fsyncs.iter().map(|f| f.1).max().unwrap_or(0);
    let mut rules = Vec::new();
    for nth in 1..=deepest {
        for (path, _) in fsyncs.iter().filter(|f| f.1 >= nth) {
            rules.push(ErrorRule::at(IoOp::Fsync, path, nth, IoErrno::Eio));
        }
    }
    rules.truncate(most);
    rules
}

/// The subsets of `n` pending operations a failed fsync may have written back that the sweep
/// tries, at most `most` of them, as positions: every operation, then each one alone, then all
/// but each one, then (for up to 4 operations) the other subsets.
fn writeback_subsets(n: usize, most: usize) -> Vec<Vec<u32>> {
    let mut out: Vec<Vec<u32>> = Vec::new();
    let mut add = |k: Vec<u32>| {
        if !k.is_empty() && !out.contains(&k) {
            out.push(k);
        }
    };
    add((0..n as u32).collect());
    for i in 0..n as u32 {
        add(vec![i]);
    }
    for i in 0..n as u32 {
        add((0..n as u32).filter(|j| *j != i).collect());
    }
    if n <= 4 {
        for mask in 1u32..1 << n {
            add((0..n as u32).filter(|j| mask >> j & 1 == 1).collect());
        }
    }
    out.truncate(most);
    out
}

/// Syscalls of a restart kept to compare against: where a crash state first shows is early.
const MAX_COMPARED: usize = 100_000;

/// A sweep under way: what it runs, and what it found so far.
struct Sweeper<'a> {
    spec: &'a ProgramSpec,
    opts: &'a SweepOptions,
    settings: &'a Settings,
    /// Guest RAM in bytes.
    memory: u64,
    report: SweepReport,
    /// Image → where it was first restarted (point and state, in words) and that restart's
    /// result.
    restarted: BTreeMap<String, (String, &'static str)>,
    /// Image → the first syscalls of the restart that kept everything pending, when it held.
    kept_all: BTreeMap<String, Vec<TraceEntry>>,
}

impl Sweeper<'_> {
    /// Runs `spec` to the end of its last life, keeping its stderr and showing nothing.
    fn run_quiet(&self, spec: ProgramSpec) -> Result<(Vec<Incarnation>, Vec<u8>), RunError> {
        let mut stderr = Vec::new();
        let lives = Session::boot_with(spec, self.memory, BootOptions::new(*self.settings)).and_then(|mut s| {
            s.lives(
                &mut |stream, bytes| {
                    if stream == Stream::Stderr {
                        stderr.extend_from_slice(bytes);
                    }
                },
                None,
            )
        })?;
        Ok((lives, stderr))
    }

    /// fsyncgate: each fsync of the run (by path and count, at most `fsync_failures` of them,
    /// spread over the paths) fails once with EIO (dropping what it would have made durable,
    /// as Linux does), and the program is crashed at every crash point after the failure, each
    /// with its distinct states. The run with the failure and no crash is a row too: a program
    /// that fails on the error alone, without stopping, fails there.
    fn fsync_failure_sweep(&mut self, base: &FaultConfig) -> Result<(), SweepError> {
        let mut reference = self.spec.clone();
        reference.faults = base.clone();
        let Ok((lives, _)) = self.run_quiet(reference) else { return Ok(()) };
        let life = lives.first().context(NoLifeSnafu { what: "the run without a crash" })?;
        for rule in fsync_rules(&life.run.report.io_ops, self.opts.fsync_failures) {
            self.report.fsync_failures += 1;
            let mut seen: Vec<Vec<bool>> = Vec::new();
            let Some(covered) = self.failure_then_crashes(base, &rule, None, &mut seen)? else {
                continue;
            };
            // What the failed fsync may have written back before it failed, each a failure of
            // its own: the same fsync failing, with those of its pending operations durable.
            for keep in writeback_subsets(covered.pending.len(), self.opts.fsync_writebacks) {
                let with = ErrorRule { keep: Some(keep), ..rule.clone() };
                let salt = self.report.fsync_failures.rotate_left(40) ^ (seen.len() as u64).rotate_left(20);
                self.failure_then_crashes(base, &with, Some(salt), &mut seen)?;
            }
        }
        Ok(())
    }

    /// One fsync failure (`rule`) in the sweep: its row without a crash, then the crash points
    /// after it. Returns what the failed fsync covered, when it struck a file. `seen` holds
    /// what the failures swept so far wrote back (after the crash model had its say): one that
    /// writes back the same again is not swept again.
    fn failure_then_crashes(
        &mut self,
        base: &FaultConfig,
        rule: &ErrorRule,
        salt: Option<u64>,
        seen: &mut Vec<Vec<bool>>,
    ) -> Result<Option<FailedSync>, SweepError> {
        let flag = format!("--fail={}", rule.arg());
        let mut with_error = base.clone();
        with_error.errors.push(rule.clone());
        // The failure alone, run to the end (a fail-stop restarts as a supervisor would).
        let mut alone = self.spec.clone();
        alone.faults = with_error.clone();
        let Ok((lives, stderr)) = self.run_quiet(alone) else { return Ok(None) };
        let first = lives.first().context(NoLifeSnafu { what: "the run with a failed fsync" })?;
        let covered = first.run.report.failed_syncs.first().cloned();
        let durable = first.run.report.durable_writes;
        if let Some(c) = &covered {
            if seen.contains(&c.kept) {
                return Ok(None);
            }
            seen.push(c.kept.clone());
        }
        let mut words = rule.describe();
        let mut allowed: Option<Vec<CrashModel>> = None;
        if let (Some(c), Some(_)) = (&covered, &rule.keep) {
            let back: Vec<&str> = c.pending.iter().zip(&c.kept).filter(|(_, k)| **k).map(|(w, _)| w.as_str()).collect();
            let plain = ErrorRule { keep: None, ..rule.clone() }.describe();
            words = format!("{plain}, which wrote back {} of {}: {}", back.len(), c.pending.len(), back.join("; "));
            allowed = Some(c.models.clone());
        }
        let models: Vec<&'static str> = match &allowed {
            Some(a) => a.iter().map(|m| m.name()).collect(),
            None => CrashModel::ALL.iter().map(|m| m.name()).collect(),
        };
        let strongest = allowed.as_ref().and_then(|a| CrashModel::strongest(a)).unwrap_or(CrashModel::ProcessKill);
        let last = last(&lives, "the run with a failed fsync")?;
        let failed_assertions = failed_assertions(last);
        let held = exit_code(last) == 0 && failed_assertions.is_empty();
        self.report.rows.push(SweepRow {
            crash_point: format!("{words}, no crash"),
            point: String::new(),
            state: "no crash".into(),
            image: String::new(),
            lost: vec![],
            result: if held { "held" } else { "failed" },
            restart_exit_code: Some(exit_code(last)),
            failed_assertions,
            restart_stderr: stderr_lines(&stderr),
            digest: lives_digest(&lives),
            replay: String::new(),
            counts: !held && models.contains(&self.opts.fail_on.name()),
            models,
            bug_on: (!held).then_some(strongest.name()),
            operations: vec![],
            first_difference: None,
            reproduce: Reproduce { flags: vec![flag.clone()], crash_state: None },
        });
        for mut point in points(self.opts.after_writes_only, &with_error, durable) {
            point.flags.insert(0, flag.clone());
            point.words = format!("{words}, then {}", point.words);
            point.salt ^= salt.unwrap_or(self.report.fsync_failures.rotate_left(40));
            point.after_error = true;
            point.allowed = allowed.clone();
            self.report.crash_points += 1;
            self.sweep_point(&point)?;
        }
        Ok(covered)
    }

    /// Crashes at one point, and restarts from each of its distinct states not restarted
    /// before.
    fn sweep_point(&mut self, point: &Point) -> Result<(), SweepError> {
        let opts = self.opts;
        let mut s = self.spec.clone();
        s.faults = point.faults.clone();
        s.record_trace = true;
        let incomplete = |why: String| SweepRow {
            crash_point: point.words.clone(),
            point: String::new(),
            state: String::new(),
            image: String::new(),
            lost: vec![],
            result: "incomplete",
            restart_exit_code: None,
            failed_assertions: vec![],
            restart_stderr: vec![why],
            digest: String::new(),
            replay: String::new(),
            models: vec![],
            bug_on: None,
            counts: false,
            operations: vec![],
            first_difference: None,
            reproduce: Reproduce { flags: point.flags.clone(), crash_state: None },
        };
        let mut crashed = match Session::boot_with(s, self.memory, BootOptions::new(*self.settings)) {
            Err(e) => {
                self.report.rows.push(incomplete(e.to_string()));
                return Ok(());
            }
            Ok(session) => session,
        };
        let why = match crashed.run_to_crash(&mut |_, _| {}) {
            Ok(true) => None,
            Ok(false) if point.after_error => {
                self.report.crash_points -= 1;
                return Ok(());
            }
            Ok(false) => Some("the run ended before this point".to_string()),
            Err(e) => Some(e.to_string()),
        };
        if let Some(why) = why {
            self.report.rows.push(incomplete(why));
            return Ok(());
        }
        let struck = crashed.kernel().faults().iter().any(|f| f.kind.name() == "eio" && f.applied);
        if point.after_error && !struck {
            // The crash came before the fsync that fails: the plain sweep has this point.
            self.report.crash_points -= 1;
            return Ok(());
        }
        let states = if opts.after_writes_only {
            let image = crashed.kernel().fs_image_digest(&CrashState::none());
            deja_kernel::CrashStates {
                pending: crashed.kernel().pending_operations(),
                tried: 1,
                states: vec![(CrashState::none(), image)],
                labels: vec![crashed.kernel().models_allowing(&CrashState::none())],
                model: opts.crash_model,
            }
        } else {
            crashed.kernel().crash_states(opts.states_per_point.max(1), self.spec.seed ^ point.salt)
        };
        self.report.states_tried += states.tried;
        self.report.distinct_states += states.states.len() as u64;
        let syscall = crashed.kernel().syscall_count().saturating_sub(1);
        for (idx, (state, image)) in states.states.iter().enumerate() {
            let state_words = state.describe(states.pending.len());
            let mut labels = states.labels.get(idx).cloned().unwrap_or_default();
            if let Some(allowed) = &point.allowed {
                labels.retain(|m| allowed.contains(m));
            }
            let models: Vec<&'static str> = labels.iter().map(|m| m.name()).collect();
            let strongest = CrashModel::strongest(&labels);
            let verdict = |failed: bool| {
                let bug_on = strongest.filter(|_| failed).map(|m| m.name());
                let counts = failed && labels.contains(&opts.fail_on);
                let operations = if failed { state.operations(&states.pending) } else { vec![] };
                (bug_on, counts, operations)
            };
            let reproduce = Reproduce { flags: point.flags.clone(), crash_state: Some(state.clone()) };
            if let Some((first, result)) = self.restarted.get(image) {
                let failed = *result != "held";
                let (bug_on, counts, operations) = verdict(failed);
                self.report.rows.push(SweepRow {
                    crash_point: point.words.clone(),
                    point: format!("syscall {syscall}"),
                    state: state_words,
                    image: image.clone(),
                    lost: vec![],
                    result: if failed { "same_image_failed" } else { "same_image" },
                    restart_exit_code: None,
                    failed_assertions: vec![],
                    restart_stderr: vec![format!(
                        "the same image as {first}{}",
                        if failed { ", whose restart failed" } else { "" }
                    )],
                    digest: String::new(),
                    replay: String::new(),
                    models,
                    bug_on,
                    counts,
                    operations,
                    first_difference: None,
                    reproduce,
                });
                continue;
            }
            self.report.restarts += 1;
            let mut stderr = Vec::new();
            let run = crashed.restart_crashed(state, &mut |stream, bytes| {
                if stream == Stream::Stderr {
                    stderr.extend_from_slice(bytes);
                }
            });
            let lives = match run {
                Ok(l) => l,
                Err(e) => {
                    let mut row = incomplete(e.to_string());
                    row.state = state_words;
                    self.report.rows.push(row);
                    continue;
                }
            };
            let first = &lives.first().context(NoLifeSnafu { what: "a restart" })?.run.report;
            let last = last(&lives, "a restart")?;
            let name = first.trace.get(syscall as usize).map(|t| t.name.clone()).unwrap_or_else(|| "?".into());
            let lost: Vec<String> = first
                .faults
                .iter()
                .filter(|f| f.kind.name() == "lost_unsynced")
                .filter_map(|f| f.path.clone())
                .collect();
            let failed_assertions = failed_assertions(last);
            let held = exit_code(last) == 0 && failed_assertions.is_empty();
            let result = if lives.len() < 2 {
                "incomplete"
            } else if held {
                "held"
            } else {
                "failed"
            };
            self.restarted.insert(image.clone(), (format!("{}, {state_words}", point.words), result));
            let (bug_on, counts, operations) = verdict(result == "failed");
            let everything = *state == CrashState::all(states.pending.len());
            // The restarted life's trace (there is one unless the result is `incomplete`).
            let restart_trace = lives.get(1).map(|l| &l.run.report.trace);
            if let (true, "held", Some(trace)) = (everything, result, restart_trace) {
                self.kept_all.insert(image.clone(), trace.iter().take(MAX_COMPARED).cloned().collect());
            }
            let first_difference = match (result, restart_trace) {
                ("failed", Some(trace)) => {
                    let reference = states.states.first().and_then(|(_, i)| self.kept_all.get(i));
                    reference.and_then(|r| crate::first_restart_difference(trace, r))
                }
                _ => None,
            };
            self.report.rows.push(SweepRow {
                crash_point: point.words.clone(),
                point: format!("{name}, syscall {syscall}"),
                state: state_words,
                image: image.clone(),
                lost,
                result,
                restart_exit_code: Some(exit_code(last)),
                failed_assertions,
                restart_stderr: stderr_lines(&stderr),
                digest: lives_digest(&lives),
                replay: String::new(),
                models,
                bug_on,
                counts,
                operations,
                first_difference,
                reproduce,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writeback_subsets_come_all_then_each_alone_then_all_but_each_then_the_rest() {
        assert_eq!(writeback_subsets(0, 10), Vec::<Vec<u32>>::new());
        assert_eq!(writeback_subsets(1, 10), vec![vec![0]]);
        assert_eq!(writeback_subsets(2, 10), vec![vec![0, 1], vec![0], vec![1]]);
        let three = writeback_subsets(3, 100);
        assert_eq!(
            three,
            vec![vec![0, 1, 2], vec![0], vec![1], vec![2], vec![1, 2], vec![0, 2], vec![0, 1]],
            "every non-empty subset of 3, each once"
        );
        // Up to 4 operations, every non-empty subset; past 4, only the first three kinds.
        assert_eq!(writeback_subsets(4, 100).len(), 15);
        assert_eq!(writeback_subsets(5, 100).len(), 1 + 5 + 5);
        assert_eq!(writeback_subsets(5, 3), vec![vec![0, 1, 2, 3, 4], vec![0], vec![1]]);
        assert!(writeback_subsets(4, 0).is_empty());
    }

    #[test]
    fn points_are_before_and_after_each_write_then_at_exit_each_with_its_flag() {
        let base = FaultConfig::default();
        let p = points(false, &base, 2);
        let flags: Vec<&str> = p.iter().map(|p| p.flags[0].as_str()).collect();
        assert_eq!(
            flags,
            [
                "--crash-before-durable-write=1",
                "--crash-after-durable-write=1",
                "--crash-before-durable-write=2",
                "--crash-after-durable-write=2",
                "--crash-at-exit"
            ]
        );
        let words: Vec<&str> = p.iter().map(|p| p.words.as_str()).collect();
        assert_eq!(words[0], "before durable write 1");
        assert_eq!(words[4], "at exit");
        assert_eq!(CrashPoint::of(&p[1].faults), Some(CrashPoint::After(1)));
        assert_eq!(CrashPoint::of(&p[4].faults), Some(CrashPoint::AtExit));
        assert!(p.iter().all(|p| p.flags.len() == 1 && !p.after_error && p.allowed.is_none()));
        // Each point draws its random states from a salt of its own.
        let mut salts: Vec<u64> = p.iter().map(|p| p.salt).collect();
        salts.sort_unstable();
        salts.dedup();
        assert_eq!(salts.len(), p.len());
    }

    #[test]
    fn after_writes_only_is_right_after_each_write_and_never_at_exit() {
        let p = points(true, &FaultConfig::default(), 3);
        let flags: Vec<&str> = p.iter().map(|p| p.flags[0].as_str()).collect();
        assert_eq!(
            flags,
            ["--crash-after-durable-write=1", "--crash-after-durable-write=2", "--crash-after-durable-write=3"]
        );
        assert!(points(true, &FaultConfig::default(), 0).is_empty());
        assert_eq!(points(false, &FaultConfig::default(), 0).len(), 1, "a run with no durable write: at exit alone");
    }

    #[test]
    fn points_keep_the_base_faults_and_replace_its_crash() {
        let mut base = FaultConfig::default();
        base.errors.push(ErrorRule::at(IoOp::Fsync, "/wal", 1, IoErrno::Eio));
        base.crash_at_exit = true;
        for p in points(false, &base, 1) {
            assert_eq!(p.faults.errors, base.errors);
        }
        assert_eq!(CrashPoint::of(&points(false, &base, 1)[0].faults), Some(CrashPoint::Before(1)));
    }

    #[test]
    fn fsync_failures_take_each_paths_first_fsync_then_the_seconds() {
        let count = |op, path: &str, count| IoCount { op, path: path.into(), count };
        let ops = [count(IoOp::Fsync, "/a", 2), count(IoOp::Write, "/a", 9), count(IoOp::Fsync, "/b", 1)];
        let rules: Vec<(String, u64)> = fsync_rules(&ops, 10).into_iter().map(|r| (r.path, r.nth)).collect();
        assert_eq!(rules, [("/a".to_string(), 1), ("/b".to_string(), 1), ("/a".to_string(), 2)]);
        let two = fsync_rules(&ops, 2);
        assert_eq!(two.len(), 2);
        assert!(two.iter().all(|r| r.op == IoOp::Fsync && r.errno == IoErrno::Eio && r.keep.is_none()));
        assert!(fsync_rules(&ops, 0).is_empty());
        assert!(fsync_rules(&[count(IoOp::Write, "/a", 3)], 10).is_empty());
    }

    fn row(result: &'static str, counts: bool, state: &str) -> SweepRow {
        SweepRow {
            crash_point: "at exit".into(),
            point: String::new(),
            state: state.into(),
            image: "i".into(),
            lost: vec![],
            result,
            restart_exit_code: Some(0),
            failed_assertions: vec![],
            restart_stderr: vec![],
            digest: "d".into(),
            replay: String::new(),
            models: vec![],
            bug_on: None,
            counts,
            operations: vec![],
            first_difference: None,
            reproduce: Reproduce::default(),
        }
    }

    fn concluded(durable_writes: u64, rows: Vec<SweepRow>) -> SweepReport {
        let mut r = SweepReport::new(&SweepOptions::default());
        r.durable_writes = durable_writes;
        r.rows = rows;
        conclude(&mut r);
        r
    }

    #[test]
    fn the_verdict_counts_failures_under_fail_on_and_hazards_apart() {
        let held = concluded(1, vec![row("held", false, "kept 1 of 1"), row("same_image", false, "kept 0 of 1")]);
        assert_eq!((held.verdict, held.failures, held.hazards), ("all_held", 0, 0));
        assert!(held.held() && !held.failed());
        let failed = concluded(1, vec![row("held", false, "s"), row("same_image_failed", true, "s")]);
        assert_eq!((failed.verdict, failed.failures, failed.hazards), ("failures", 1, 0));
        assert!(failed.failed() && !failed.held());
        let hazard = concluded(1, vec![row("failed", false, "s")]);
        assert_eq!((hazard.verdict, hazard.failures, hazard.hazards), ("hazards_only", 0, 1));
        assert!(hazard.held());
        assert_eq!(hazard.incomplete_because, None);
    }

    #[test]
    fn an_unreached_point_or_nothing_pending_leaves_the_evidence_incomplete() {
        let gap = concluded(1, vec![row("failed", true, "s"), row("incomplete", false, "")]);
        assert_eq!(gap.verdict, "evidence_incomplete");
        assert_eq!(gap.incomplete_because.as_deref(), Some("some crash points were never reached or did not run"));
        assert!(!gap.held() && !gap.failed());
        let nothing = concluded(0, vec![row("held", false, "kept 0 of 0")]);
        assert_eq!(nothing.verdict, "evidence_incomplete");
        assert_eq!(
            nothing.incomplete_because.as_deref(),
            Some("the program made no durable write and left nothing pending")
        );
        let pending = concluded(0, vec![row("held", false, "kept 1 of 1")]);
        assert_eq!(pending.verdict, "all_held", "pending at exit with no durable write is something to test");
    }

    #[test]
    fn the_digest_covers_results_and_the_verdict_not_the_replay() {
        let a = concluded(1, vec![row("held", false, "s")]);
        let mut b = a.clone();
        b.set_replays(|r| format!("deja run {}", r.flags.join(" ")));
        assert_eq!(b.rows[0].replay, "deja run ");
        assert_eq!(digest(&a), digest(&b));
        b.rows[0].result = "failed";
        assert_ne!(digest(&a), digest(&b));
        let mut c = a.clone();
        c.verdict = "failures";
        assert_ne!(digest(&a), digest(&c));
    }

    #[test]
    fn the_json_keeps_its_fields_and_leaves_out_what_reproduces_a_row() {
        let mut r = row("held", false, "s");
        r.reproduce = Reproduce { flags: vec!["--crash-at-exit".into()], crash_state: Some(CrashState::none()) };
        let v = serde_json::to_value(&r).expect("plain data");
        let keys: Vec<&str> = v.as_object().expect("an object").keys().map(String::as_str).collect();
        assert!(!keys.contains(&"reproduce"));
        assert_eq!(keys.len(), 16);
        let report = serde_json::to_string(&SweepReport::new(&SweepOptions::default())).expect("plain data");
        assert!(report.starts_with(r#"{"schema":"deja.crash-sweep/3","model":"posix-weak","#), "{report}");
    }

    #[test]
    fn stderr_keeps_five_lines_of_the_programs_own() {
        let text = b"{\"deja\":\"event\"}\none\n\ntwo\nthree\nfour\nfive\nsix\n";
        assert_eq!(stderr_lines(text), ["one", "two", "three", "four", "five"]);
    }

    #[test]
    fn memory_past_a_byte_count_is_refused_before_any_run() {
        let opts = SweepOptions { memory_mib: u64::MAX, ..SweepOptions::default() };
        let spec = ProgramSpec::default();
        let e = sweep(spec, &opts, &Settings::default()).expect_err("refused");
        assert!(matches!(e, SweepError::Memory { .. }), "{e}");
    }
}
