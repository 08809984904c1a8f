//! `deja run --crash-sweep`: the sweep's flags as [`SweepOptions`], the sweep itself
//! ([`deja_explore::sweep`]: every crash point, its distinct crash states, the restarts), then
//! the command that replays each row, the report printed, and the exit code.

use std::io::Write;

use deja_explore::sweep::{Reproduce, SweepOptions, SweepReport, SweepRow};
use deja_kernel::ProgramSpec;
use deja_vmm::Settings;

use crate::exit::Exit;
use crate::run_args::{crash_state_arg, replay_command_with, Failure, RunArgs};

/// What `args` ask of a sweep.
fn options(args: &RunArgs) -> SweepOptions {
    SweepOptions {
        memory_mib: args.memory,
        crash_model: args.crash_model,
        fail_on: args.fail_on,
        states_per_point: args.states_per_point,
        fsync_failures: args.fsync_failures,
        fsync_writebacks: args.fsync_writebacks,
        after_writes_only: args.after_writes_only,
    }
}

/// The command that replays a row of the sweep of `args`.
fn replay(args: &RunArgs, r: &Reproduce) -> String {
    let mut flags = r.flags.clone();
    if let Some(state) = &r.crash_state {
        flags.push(format!("--crash-state={}", crash_state_arg(state)));
    }
    replay_command_with(args, &flags)
}

/// Runs the sweep, every run under `settings`, and prints it: [`Exit::Clean`] all held,
/// [`Exit::Failure`] a restart failed, [`Exit::Incomplete`] the sweep cannot tell.
pub fn sweep(args: &RunArgs, spec: ProgramSpec, settings: &Settings) -> Result<Exit, Failure> {
    let mut report = deja_explore::sweep::sweep(spec, &options(args), settings).map_err(|e| {
        let code = match &e {
            deja_explore::sweep::SweepError::Memory { .. } => Exit::Usage,
            deja_explore::sweep::SweepError::NoLife { .. } => Exit::DejaFailed,
        };
        Failure::new(code, e.to_string())
    })?;
    report.set_replays(|r| replay(args, r));
    print(args, &report);
    Ok(if report.held() {
        Exit::Clean
    } else if report.failed() {
        Exit::Failure
    } else {
        Exit::Incomplete
    })
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
