//! `deja run --crash-sweep`: crash the program at every crash point (before and after each
//! durable write, and at exit), try the distinct crash states at each (CrashMonkey style,
//! bounded: everything persisted, nothing, each pending operation dropped alone, each prefix,
//! the torn variants of the last write, random subsets), restart each on what survived, and
//! report whether every restart held. A disk image met before (at this point or another) is not
//! restarted again: its restart would be the same run. `--after-writes-only` runs the sweep deja
//! had before crash states: right after each durable write, the durable layer alone.

use crate::exit::Exit;
use std::collections::BTreeMap;
use std::io::Write;

use deja_kernel::{CrashPoint, CrashState, ProgramSpec, When};
use deja_vmm::{lives_digest, BootOptions, Incarnation, Session, Settings};

use crate::run_args::{crash_state_arg, replay_command_with, RunArgs};

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
    /// The one command that replays it.
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

fn run_quiet(spec: ProgramSpec, memory: u64, settings: &Settings) -> Result<(Vec<Incarnation>, Vec<u8>), String> {
    let mut stderr = Vec::new();
    let lives = Session::boot_with(spec, memory << 20, BootOptions::new(*settings))
        .and_then(|mut s| {
            s.lives(
                &mut |stream, bytes| {
                    if stream == deja_kernel::Stream::Stderr {
                        stderr.extend_from_slice(bytes);
                    }
                },
                None,
            )
        })
        .map_err(|e| e.to_string())?;
    Ok((lives, stderr))
}

fn exit_code(life: &Incarnation) -> i32 {
    life.run.report.exit.code()
}

/// One crash point of the sweep: the flags that make it, its words and its fault
/// configuration. A point after a placed fsync error (`after_error`) is only a point once that
/// error struck; a run that ends before it (a fail-stop) is not a gap in the evidence.
struct Point {
    flags: Vec<String>,
    words: String,
    faults: deja_kernel::FaultConfig,
    salt: u64,
    after_error: bool,
    /// The models the fault before the crash keeps to (a failed fsync's write-back), when not
    /// every one: a state's label is cut down to them.
    allowed: Option<Vec<deja_kernel::CrashModel>>,
}

impl Point {
    fn at(base: &deja_kernel::FaultConfig, point: CrashPoint) -> Point {
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

fn kind_of(f: &deja_kernel::FaultRecord) -> String {
    f.kind.name().to_string()
}

/// Runs the sweep, every run under `settings`: [`Exit::Clean`] all held, [`Exit::Failure`] a
/// restart failed, [`Exit::Incomplete`] the sweep cannot tell.
pub fn sweep(args: &RunArgs, spec: ProgramSpec, settings: &Settings) -> Exit {
    let mut report = SweepReport {
        schema: "deja.crash-sweep/3",
        model: args.crash_model.name(),
        model_words: args.crash_model.words(),
        fail_on: args.fail_on.name(),
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
    };
    let mut reference_spec = spec.clone();
    reference_spec.faults = reference_spec.faults.for_restart();
    match run_quiet(reference_spec, args.memory, settings) {
        Err(e) => report.incomplete_because = Some(format!("the run without a crash failed to run: {e}")),
        Ok((lives, _)) => {
            let life = &lives[0];
            report.durable_writes = life.run.report.durable_writes;
            if exit_code(life) != 0 || life.run.report.assertion_failed() {
                report.incomplete_because = Some(format!(
                    "the program fails without any crash (exit code {}); a sweep cannot tell crash bugs apart",
                    exit_code(life)
                ));
            } else if report.durable_writes == 0 && (args.after_writes_only || life.run.report.files.is_empty()) {
                report.incomplete_because = Some("the program made no durable write: there is no kill point".into());
            }
        }
    }
    if report.incomplete_because.is_none() {
        let base = spec.faults.for_restart();
        let points = crash_points(args, &base, report.durable_writes);
        let mut restarted: BTreeMap<String, (String, &'static str)> = BTreeMap::new();
        let mut kept_all = BTreeMap::new();
        for point in &points {
            report.crash_points += 1;
            sweep_point(args, &spec, settings, point, &mut report, &mut restarted, &mut kept_all);
        }
        if args.fsync_failures > 0 {
            fsync_failure_sweep(args, &spec, settings, &base, &mut report, &mut restarted, &mut kept_all);
        }
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
            report
                .incomplete_because
                .get_or_insert_with(|| "some crash points were never reached or did not run".into());
            "evidence_incomplete"
        } else if failed {
            "failures"
        } else if report.hazards > 0 {
            "hazards_only"
        } else {
            "all_held"
        };
    }
    let mut h = blake3::Hasher::new();
    for r in &report.rows {
        for part in [&r.crash_point, &r.state, &r.image, &r.digest] {
            h.update(part.as_bytes());
            h.update(&[0]);
        }
        h.update(r.result.as_bytes());
    }
    h.update(report.verdict.as_bytes());
    report.digest = h.finalize().to_hex().to_string();
    print(args, &report);
    match report.verdict {
        "all_held" | "hazards_only" => Exit::Clean,
        "failures" => Exit::Failure,
        _ => Exit::Incomplete,
    }
}

/// Before and after each of `durable_writes` durable writes, and at exit (right after each
/// alone with `--after-writes-only`), on top of `base`: the crash points of
/// [`deja_kernel::crash_points`].
fn crash_points(args: &RunArgs, base: &deja_kernel::FaultConfig, durable_writes: u64) -> Vec<Point> {
    let sides: &[When] = if args.after_writes_only { &[When::After] } else { &[When::Before, When::After] };
    deja_kernel::crash_points::crash_points(durable_writes, sides, !args.after_writes_only)
        .into_iter()
        .map(|p| Point::at(base, p))
        .collect()
}

/// fsyncgate: each fsync of the run (by path and count, at most `--fsync-failures` of them,
/// spread over the paths) fails once with EIO (dropping what it would have made durable, as
/// Linux does), and the program is crashed at every crash point after the failure, each with
/// its distinct states. The run with the failure and no crash is a row too: a program that
/// fails on the error alone, without stopping, fails there.
fn fsync_failure_sweep(
    args: &RunArgs,
    spec: &ProgramSpec,
    settings: &Settings,
    base: &deja_kernel::FaultConfig,
    report: &mut SweepReport,
    restarted: &mut BTreeMap<String, (String, &'static str)>,
    kept_all: &mut BTreeMap<String, Vec<deja_kernel::TraceEntry>>,
) {
    let mut reference = spec.clone();
    reference.faults = base.clone();
    let Ok((lives, _)) = run_quiet(reference, args.memory, settings) else { return };
    let fsyncs: Vec<(String, u64)> = lives[0]
        .run
        .report
        .io_ops
        .iter()
        .filter(|c| c.op == deja_kernel::IoOp::Fsync)
        .map(|c| (c.path.clone(), c.count))
        .collect();
    let most = fsyncs.iter().map(|f| f.1).max().unwrap_or(0);
    let mut rules = Vec::new();
    for nth in 1..=most {
        for (path, _) in fsyncs.iter().filter(|f| f.1 >= nth) {
            rules.push(deja_kernel::ErrorRule::at(deja_kernel::IoOp::Fsync, path, nth, deja_kernel::IoErrno::Eio));
        }
    }
    rules.truncate(args.fsync_failures);
    for rule in rules {
        report.fsync_failures += 1;
        let mut seen: Vec<Vec<bool>> = Vec::new();
        let Some(covered) =
            failure_then_crashes(args, spec, settings, base, &rule, None, &mut seen, report, restarted, kept_all)
        else {
            continue;
        };
        // What the failed fsync may have written back before it failed, each a failure of its
        // own: the same fsync failing, with those of its pending operations durable.
        for keep in writeback_subsets(covered.pending.len(), args.fsync_writebacks) {
            let with = deja_kernel::ErrorRule { keep: Some(keep), ..rule.clone() };
            let salt = report.fsync_failures.rotate_left(40) ^ (seen.len() as u64).rotate_left(20);
            failure_then_crashes(args, spec, settings, base, &with, Some(salt), &mut seen, report, restarted, kept_all);
        }
    }
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

/// One fsync failure (`rule`) in the sweep: its row without a crash, then the crash points after
/// it. Returns what the failed fsync covered, when it struck a file. `seen` holds what the
/// failures swept so far wrote back (after the crash model had its say): one that writes back
/// the same again is not swept again.
#[allow(clippy::too_many_arguments)]
fn failure_then_crashes(
    args: &RunArgs,
    spec: &ProgramSpec,
    settings: &Settings,
    base: &deja_kernel::FaultConfig,
    rule: &deja_kernel::ErrorRule,
    salt: Option<u64>,
    seen: &mut Vec<Vec<bool>>,
    report: &mut SweepReport,
    restarted: &mut BTreeMap<String, (String, &'static str)>,
    kept_all: &mut BTreeMap<String, Vec<deja_kernel::TraceEntry>>,
) -> Option<deja_kernel::FailedSync> {
    let flag = format!("--fail={}", rule.arg());
    let mut with_error = base.clone();
    with_error.errors.push(rule.clone());
    // The failure alone, run to the end (a fail-stop restarts as a supervisor would).
    let mut alone = spec.clone();
    alone.faults = with_error.clone();
    let covered: Option<deja_kernel::FailedSync>;
    let mut words = rule.describe();
    let mut allowed: Option<Vec<deja_kernel::CrashModel>> = None;
    let durable = match run_quiet(alone, args.memory, settings) {
        Ok((lives, stderr)) => {
            covered = lives[0].run.report.failed_syncs.first().cloned();
            if let Some(c) = &covered {
                if seen.contains(&c.kept) {
                    return None;
                }
                seen.push(c.kept.clone());
            }
            if let (Some(c), Some(_)) = (&covered, &rule.keep) {
                let back: Vec<&str> =
                    c.pending.iter().zip(&c.kept).filter(|(_, k)| **k).map(|(w, _)| w.as_str()).collect();
                let plain = deja_kernel::ErrorRule { keep: None, ..rule.clone() }.describe();
                words = format!("{plain}, which wrote back {} of {}: {}", back.len(), c.pending.len(), back.join("; "));
                allowed = Some(c.models.clone());
            }
            let models: Vec<&'static str> = match &allowed {
                Some(a) => a.iter().map(|m| m.name()).collect(),
                None => deja_kernel::CrashModel::ALL.iter().map(|m| m.name()).collect(),
            };
            let strongest = allowed
                .as_ref()
                .and_then(|a| deja_kernel::CrashModel::strongest(a))
                .unwrap_or(deja_kernel::CrashModel::ProcessKill);
            let last = lives.last().expect("at least one life");
            let failed_assertions: Vec<String> =
                last.run.report.assertions.iter().filter(|a| a.bug).map(|a| a.message.clone()).collect();
            let held = exit_code(last) == 0 && failed_assertions.is_empty();
            let text = String::from_utf8_lossy(&stderr);
            report.rows.push(SweepRow {
                crash_point: format!("{words}, no crash"),
                point: String::new(),
                state: "no crash".into(),
                image: String::new(),
                lost: vec![],
                result: if held { "held" } else { "failed" },
                restart_exit_code: Some(exit_code(last)),
                failed_assertions,
                restart_stderr: text
                    .lines()
                    .filter(|l| !l.starts_with("{\"deja\"") && !l.is_empty())
                    .take(5)
                    .map(String::from)
                    .collect(),
                digest: lives_digest(&lives),
                replay: replay_command_with(args, std::slice::from_ref(&flag)),
                counts: !held && models.contains(&args.fail_on.name()),
                models,
                bug_on: (!held).then_some(strongest.name()),
                operations: vec![],
                first_difference: None,
            });
            lives[0].run.report.durable_writes
        }
        Err(_) => return None,
    };
    for mut point in crash_points(args, &with_error, durable) {
        point.flags.insert(0, flag.clone());
        point.words = format!("{words}, then {}", point.words);
        point.salt ^= salt.unwrap_or(report.fsync_failures.rotate_left(40));
        point.after_error = true;
        point.allowed = allowed.clone();
        report.crash_points += 1;
        sweep_point(args, spec, settings, &point, report, restarted, kept_all);
    }
    covered
}

/// Crashes at one point, and restarts from each of its distinct states not restarted before.
fn sweep_point(
    args: &RunArgs,
    spec: &ProgramSpec,
    settings: &Settings,
    point: &Point,
    report: &mut SweepReport,
    restarted: &mut BTreeMap<String, (String, &'static str)>,
    kept_all: &mut BTreeMap<String, Vec<deja_kernel::TraceEntry>>,
) {
    let mut s = spec.clone();
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
        replay: replay_command_with(args, &point.flags),
        models: vec![],
        bug_on: None,
        counts: false,
        operations: vec![],
        first_difference: None,
    };
    let mut crashed = match Session::boot_with(s, args.memory << 20, BootOptions::new(*settings)) {
        Err(e) => return report.rows.push(incomplete(e.to_string())),
        Ok(session) => session,
    };
    match crashed.run_to_crash(&mut |_, _| {}) {
        Err(e) => return report.rows.push(incomplete(e.to_string())),
        Ok(false) if point.after_error => return report.crash_points -= 1,
        Ok(false) => return report.rows.push(incomplete("the run ended before this point".into())),
        Ok(true) => {}
    }
    let struck = crashed.kernel().faults().iter().any(|f| f.kind.name() == "eio" && f.applied);
    if point.after_error && !struck {
        // The crash came before the fsync that fails: the plain sweep has this point.
        report.crash_points -= 1;
        return;
    }
    let budget = if args.after_writes_only { 1 } else { args.states_per_point.max(1) };
    let states = if args.after_writes_only {
        let image = crashed.kernel().fs_image_digest(&CrashState::none());
        deja_kernel::CrashStates {
            pending: crashed.kernel().pending_operations(),
            tried: 1,
            states: vec![(CrashState::none(), image)],
            labels: vec![crashed.kernel().models_allowing(&CrashState::none())],
            model: args.crash_model,
        }
    } else {
        crashed.kernel().crash_states(budget, spec.seed ^ point.salt)
    };
    report.states_tried += states.tried;
    report.distinct_states += states.states.len() as u64;
    let syscall = crashed.kernel().syscall_count().saturating_sub(1);
    for (idx, (state, image)) in states.states.iter().enumerate() {
        let state_words = state.describe(states.pending.len());
        let mut labels = states.labels.get(idx).cloned().unwrap_or_default();
        if let Some(allowed) = &point.allowed {
            labels.retain(|m| allowed.contains(m));
        }
        let models: Vec<&'static str> = labels.iter().map(|m| m.name()).collect();
        let strongest = deja_kernel::CrashModel::strongest(&labels);
        let verdict = |failed: bool| {
            let bug_on = strongest.filter(|_| failed).map(|m| m.name());
            let counts = failed && labels.contains(&args.fail_on);
            let operations = if failed { state.operations(&states.pending) } else { vec![] };
            (bug_on, counts, operations)
        };
        let mut flags = point.flags.clone();
        flags.push(format!("--crash-state={}", crash_state_arg(state)));
        let replay = replay_command_with(args, &flags);
        if let Some((first, result)) = restarted.get(image) {
            let failed = *result != "held";
            let (bug_on, counts, operations) = verdict(failed);
            report.rows.push(SweepRow {
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
                replay,
                models,
                bug_on,
                counts,
                operations,
                first_difference: None,
            });
            continue;
        }
        report.restarts += 1;
        let mut stderr = Vec::new();
        let run = crashed.restart_crashed(state, &mut |stream, bytes| {
            if stream == deja_kernel::Stream::Stderr {
                stderr.extend_from_slice(bytes);
            }
        });
        let lives = match run {
            Ok(l) => l,
            Err(e) => {
                let mut row = incomplete(e.to_string());
                row.state = state_words;
                report.rows.push(row);
                continue;
            }
        };
        let first = &lives[0].run.report;
        let last = lives.last().expect("at least one life");
        let name = first.trace.get(syscall as usize).map(|t| t.name.clone()).unwrap_or_else(|| "?".into());
        let lost: Vec<String> =
            first.faults.iter().filter(|f| kind_of(f) == "lost_unsynced").filter_map(|f| f.path.clone()).collect();
        let failed_assertions: Vec<String> =
            last.run.report.assertions.iter().filter(|a| a.bug).map(|a| a.message.clone()).collect();
        let held = exit_code(last) == 0 && failed_assertions.is_empty();
        let text = String::from_utf8_lossy(&stderr);
        let restart_stderr: Vec<String> =
            text.lines().filter(|l| !l.starts_with("{\"deja\"") && !l.is_empty()).take(5).map(String::from).collect();
        let result = if lives.len() < 2 {
            "incomplete"
        } else if held {
            "held"
        } else {
            "failed"
        };
        restarted.insert(image.clone(), (format!("{}, {state_words}", point.words), result));
        let (bug_on, counts, operations) = verdict(result == "failed");
        let everything = *state == CrashState::all(states.pending.len());
        let restart_trace = &lives[1].run.report.trace;
        if everything && result == "held" {
            kept_all.insert(image.clone(), restart_trace.iter().take(MAX_COMPARED).cloned().collect());
        }
        let first_difference = if result == "failed" {
            let reference = states.states.first().and_then(|(_, i)| kept_all.get(i));
            reference.and_then(|r| deja_explore::first_restart_difference(restart_trace, r))
        } else {
            None
        };
        report.rows.push(SweepRow {
            crash_point: point.words.clone(),
            point: format!("{name}, syscall {syscall}"),
            state: state_words,
            image: image.clone(),
            lost,
            result,
            restart_exit_code: Some(exit_code(last)),
            failed_assertions,
            restart_stderr,
            digest: lives_digest(&lives),
            replay,
            models,
            bug_on,
            counts,
            operations,
            first_difference,
        });
    }
}

/// Syscalls of a restart kept to compare against: where a crash state first shows is early.
const MAX_COMPARED: usize = 100_000;

fn print(args: &RunArgs, report: &SweepReport) {
    let mut e = std::io::stderr().lock();
    if args.json {
        let _ = writeln!(e, "{}", serde_json::to_string(report).unwrap_or_default());
        return;
    }
    let _ = writeln!(
        e,
        "deja: crash sweep over {} durable writes: {} crash points, {} candidate states, {} distinct, {} restarts",
        report.durable_writes, report.crash_points, report.states_tried, report.distinct_states, report.restarts
    );
    let _ = writeln!(e, "deja: crash model {}: {}", report.model, report.model_words);
    let mut by_point: Vec<(&str, Vec<&SweepRow>)> = Vec::new();
    for r in &report.rows {
        match by_point.last_mut() {
            Some((p, rows)) if *p == r.crash_point => rows.push(r),
            _ => by_point.push((&r.crash_point, vec![r])),
        }
    }
    for (point, rows) in by_point {
        let bad: Vec<&&SweepRow> =
            rows.iter().filter(|r| matches!(r.result, "failed" | "incomplete" | "same_image_failed")).collect();
        let at = rows.iter().map(|r| r.point.as_str()).find(|p| !p.is_empty()).unwrap_or("");
        let point = if at.is_empty() { point.to_string() } else { format!("{point:<24} ({at})") };
        if bad.is_empty() {
            let _ = writeln!(e, "deja:   {point}: {} states, held", rows.len());
            continue;
        }
        let _ = writeln!(e, "deja:   {point}: {} states, {} FAILED", rows.len(), bad.len());
        for r in bad {
            let class = r
                .bug_on
                .and_then(|m| deja_kernel::CrashModel::parse(m).ok())
                .map(|m| format!(" — {}", m.failure_words()))
                .unwrap_or_default();
            if r.result == "same_image_failed" {
                let why = r.restart_stderr.first().map(String::as_str).unwrap_or("");
                let _ = writeln!(e, "deja:       {} — FAILED: {why}{class}", r.state);
                let _ = writeln!(e, "deja:         replay: {}", r.replay);
                continue;
            }
            let _ = writeln!(
                e,
                "deja:       {} — {}: lost unsynced {}; restart exited {}{}",
                r.state,
                r.result.to_uppercase(),
                if r.lost.is_empty() { "nothing".to_string() } else { r.lost.join(", ") },
                r.restart_exit_code.map(|c| c.to_string()).unwrap_or_else(|| "-".into()),
                if r.failed_assertions.is_empty() {
                    String::new()
                } else {
                    format!(", assertion failed: {}", r.failed_assertions.join("; "))
                }
            );
            if !class.is_empty() {
                let _ = writeln!(e, "deja:         {}", class.trim_start_matches(" — "));
            }
            for op in &r.operations {
                let _ = writeln!(e, "deja:         {op}");
            }
            if let Some(d) = &r.first_difference {
                let _ = writeln!(e, "deja:         first difference: {d}");
            }
            for line in &r.restart_stderr {
                let _ = writeln!(e, "deja:         {line}");
            }
            let _ = writeln!(e, "deja:         replay: {}", r.replay);
        }
    }
    if let Some(why) = &report.incomplete_because {
        let _ = writeln!(e, "deja: evidence incomplete: {why}");
    }
    if report.hazards > 0 {
        let (noun, verb) = if report.hazards == 1 { ("restart", "fails") } else { ("restarts", "fail") };
        let _ = writeln!(
            e,
            "deja: {} failing {noun} {verb} only in states {} does not allow: portability hazards, not failures \
             under --fail-on {}",
            report.hazards, report.fail_on, report.fail_on
        );
    }
    let failed = report.rows.iter().filter(|r| r.result == "failed").count();
    let _ = writeln!(
        e,
        "deja: sweep {}: {failed} of {} restarts failed; digest {}",
        report.verdict, report.restarts, report.digest
    );
}

/// Writes `disk` under `dir` on the host. Directories and files first, symlinks last, so no
/// write ever goes through a link the guest made; a path with `..` or an empty component is
/// refused, so nothing lands outside `dir`.
pub fn export_disk(disk: &deja_kernel::Disk, dir: &std::path::Path) -> std::io::Result<()> {
    use deja_kernel::DiskEntry;
    let host_path = |path: &str| -> std::io::Result<std::path::PathBuf> {
        let rel = path.trim_start_matches('/');
        if rel.split('/').any(|c| c == ".." || c == "." || (c.is_empty() && !rel.is_empty())) {
            return Err(std::io::Error::other(format!("refusing to export the path {path:?}")));
        }
        Ok(dir.join(rel))
    };
    std::fs::create_dir_all(dir)?;
    for (path, entry) in &disk.entries {
        let target = host_path(path)?;
        match entry {
            DiskEntry::Dir { .. } => std::fs::create_dir_all(&target)?,
            DiskEntry::File { data, .. } => {
                if let Some(parent) = target.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                std::fs::write(&target, data)?;
            }
            DiskEntry::Symlink { .. } => {}
        }
    }
    for (path, entry) in &disk.entries {
        if let DiskEntry::Symlink { target } = entry {
            let at = host_path(path)?;
            let _ = std::fs::remove_file(&at);
            std::os::unix::fs::symlink(target, &at)?;
        }
    }
    Ok(())
}
