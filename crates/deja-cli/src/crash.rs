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

use deja_kernel::{CrashState, ProgramSpec};
use deja_vmm::{lives_digest, Incarnation, Session};

use crate::run::{crash_state_arg, replay_command_with, RunArgs};

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
}

/// The sweep's outcome.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SweepReport {
    /// Schema of this JSON.
    pub schema: &'static str,
    /// The crash model the states are drawn from.
    pub model: &'static str,
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
    /// One row per crash point and distinct state.
    pub rows: Vec<SweepRow>,
    /// `all_held`, `failures` or `evidence_incomplete`.
    pub verdict: &'static str,
    /// Why the evidence is incomplete, if it is.
    pub incomplete_because: Option<String>,
    /// BLAKE3 over the rows' results and digests: two sweeps agree exactly when these agree.
    pub digest: String,
}

/// The model name the report gives.
pub const MODEL: &str = "posix-weak: each file's data and each directory's entries durable only through their own \
                         syncs; a crash keeps any subset of the pending operations, one write possibly torn";

fn run_quiet(spec: ProgramSpec, memory: u64) -> Result<(Vec<Incarnation>, Vec<u8>), String> {
    let mut stderr = Vec::new();
    let lives = Session::boot(spec, memory << 20)
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

/// One crash point of the sweep: the flag that makes it, and its words.
struct Point {
    flag: String,
    words: String,
    apply: fn(&mut deja_kernel::FaultConfig, u64),
    k: u64,
}

fn kind_of(f: &deja_kernel::FaultRecord) -> String {
    f.kind.name().to_string()
}

/// Runs the sweep: [`Exit::Clean`] all held, [`Exit::Failure`] a restart failed,
/// [`Exit::Incomplete`] the sweep cannot tell.
pub fn sweep(args: &RunArgs, spec: ProgramSpec) -> Exit {
    let mut report = SweepReport {
        schema: "deja.crash-sweep/2",
        model: MODEL,
        durable_writes: 0,
        crash_points: 0,
        states_tried: 0,
        distinct_states: 0,
        restarts: 0,
        rows: Vec::new(),
        verdict: "evidence_incomplete",
        incomplete_because: None,
        digest: String::new(),
    };
    let mut reference_spec = spec.clone();
    reference_spec.faults = reference_spec.faults.for_restart();
    match run_quiet(reference_spec, args.memory) {
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
        let mut points = Vec::new();
        for k in 1..=report.durable_writes {
            if !args.after_writes_only {
                points.push(Point {
                    flag: format!("--crash-before-durable-write={k}"),
                    words: format!("before durable write {k}"),
                    apply: |f, k| f.crash_before_durable_write = Some(k),
                    k,
                });
            }
            points.push(Point {
                flag: format!("--crash-after-durable-write={k}"),
                words: format!("after durable write {k}"),
                apply: |f, k| f.crash_after_durable_write = Some(k),
                k,
            });
        }
        if !args.after_writes_only {
            points.push(Point {
                flag: "--crash-at-exit".into(),
                words: "at exit".into(),
                apply: |f, _| f.crash_at_exit = true,
                k: 0,
            });
        }
        let mut restarted: BTreeMap<String, (String, &'static str)> = BTreeMap::new();
        for point in &points {
            report.crash_points += 1;
            sweep_point(args, &spec, point, &mut report, &mut restarted);
        }
        let failed = report.rows.iter().any(|r| r.result == "failed");
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
        "all_held" => Exit::Clean,
        "failures" => Exit::Failure,
        _ => Exit::Incomplete,
    }
}

/// Crashes at one point, and restarts from each of its distinct states not restarted before.
fn sweep_point(
    args: &RunArgs,
    spec: &ProgramSpec,
    point: &Point,
    report: &mut SweepReport,
    restarted: &mut BTreeMap<String, (String, &'static str)>,
) {
    let mut s = spec.clone();
    s.faults = s.faults.for_restart();
    (point.apply)(&mut s.faults, point.k);
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
        replay: replay_command_with(args, std::slice::from_ref(&point.flag)),
    };
    let mut crashed = match Session::boot(s, args.memory << 20) {
        Err(e) => return report.rows.push(incomplete(e.to_string())),
        Ok(session) => session,
    };
    match crashed.run_to_crash(&mut |_, _| {}) {
        Err(e) => return report.rows.push(incomplete(e.to_string())),
        Ok(false) => return report.rows.push(incomplete("the run ended before this point".into())),
        Ok(true) => {}
    }
    let budget = if args.after_writes_only { 1 } else { args.states_per_point.max(1) };
    let states = if args.after_writes_only {
        let image = crashed.kernel().fs_image_digest(&CrashState::none());
        deja_kernel::CrashStates {
            pending: crashed.kernel().pending_operations(),
            tried: 1,
            states: vec![(CrashState::none(), image)],
        }
    } else {
        crashed.kernel().crash_states(budget, spec.seed ^ point.k.rotate_left(17) ^ u64::from(point.flag.len() as u32))
    };
    report.states_tried += states.tried;
    report.distinct_states += states.states.len() as u64;
    let syscall = crashed.kernel().syscall_count().saturating_sub(1);
    for (state, image) in &states.states {
        let state_words = state.describe(states.pending.len());
        let replay =
            replay_command_with(args, &[point.flag.clone(), format!("--crash-state={}", crash_state_arg(state))]);
        if let Some((first, result)) = restarted.get(image) {
            let failed = *result != "held";
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
        });
    }
}

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
    let _ = writeln!(e, "deja: crash model {}", report.model);
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
        if bad.is_empty() {
            let _ = writeln!(e, "deja:   {point:<24} ({at}): {} states, held", rows.len());
            continue;
        }
        let _ = writeln!(e, "deja:   {point:<24} ({at}): {} states, {} FAILED", rows.len(), bad.len());
        for r in bad {
            if r.result == "same_image_failed" {
                let why = r.restart_stderr.first().map(String::as_str).unwrap_or("");
                let _ = writeln!(e, "deja:       {} — FAILED: {why}", r.state);
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
            for line in &r.restart_stderr {
                let _ = writeln!(e, "deja:         {line}");
            }
            let _ = writeln!(e, "deja:         replay: {}", r.replay);
        }
    }
    if let Some(why) = &report.incomplete_because {
        let _ = writeln!(e, "deja: evidence incomplete: {why}");
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
