//! `deja run --crash-sweep`: crash the program right after each of its durable writes, restart
//! it on what survived, and report whether every restart held.

use std::io::Write;

use deja_kernel::ProgramSpec;

use crate::run::{replay_command_with, RunArgs};

/// What one kill point showed.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SweepRow {
    /// The durable write the node crashed right after (1-based).
    pub after_durable_write: u64,
    /// What that durable write was: the syscall and its position in the run.
    pub point: String,
    /// Files and directories whose unsynced state the crash threw away.
    pub lost: Vec<String>,
    /// `held`, `failed`, or `incomplete` (the run never reached this kill point).
    pub result: &'static str,
    /// The restart's exit code (128 + signal for a fatal signal).
    pub restart_exit_code: Option<i32>,
    /// Messages of the assertions that failed in the restart.
    pub failed_assertions: Vec<String>,
    /// The restart's stderr lines that mention a failure, for the reader (at most 5).
    pub restart_stderr: Vec<String>,
    /// Digest over every life of this run.
    pub digest: String,
    /// The one command that replays this kill point.
    pub replay: String,
}

/// The sweep's outcome.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SweepReport {
    /// Schema of this JSON.
    pub schema: &'static str,
    /// Durable writes of the run without a crash: the kill points.
    pub durable_writes: u64,
    /// One row per kill point.
    pub rows: Vec<SweepRow>,
    /// `all_held`, `failures` or `evidence_incomplete`.
    pub verdict: &'static str,
    /// Why the evidence is incomplete, if it is.
    pub incomplete_because: Option<String>,
    /// BLAKE3 over the rows' results and digests: two sweeps agree exactly when these agree.
    pub digest: String,
}

use deja_vmm::lives_digest;

fn run_quiet(spec: ProgramSpec, memory: u64) -> Result<(Vec<deja_vmm::Incarnation>, Vec<u8>), String> {
    let mut stderr = Vec::new();
    let lives = deja_vmm::run_with_restarts(
        spec,
        memory << 20,
        &mut |stream, bytes| {
            if stream == deja_kernel::Stream::Stderr {
                stderr.extend_from_slice(bytes);
            }
        },
        None,
    )
    .map_err(|e| e.to_string())?;
    Ok((lives, stderr))
}

fn exit_code(life: &deja_vmm::Incarnation) -> i32 {
    life.run.report.exit.code()
}

/// Runs the sweep; returns the exit code (0 all held, 1 a restart failed, 2 incomplete).
pub fn sweep(args: &RunArgs, spec: ProgramSpec) -> i32 {
    let mut report = SweepReport {
        schema: "deja.crash-sweep/1",
        durable_writes: 0,
        rows: Vec::new(),
        verdict: "evidence_incomplete",
        incomplete_because: None,
        digest: String::new(),
    };
    let mut reference_spec = spec.clone();
    reference_spec.faults.crash_after_durable_write = None;
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
            } else if report.durable_writes == 0 {
                report.incomplete_because = Some("the program made no durable write: there is no kill point".into());
            }
        }
    }
    if report.incomplete_because.is_none() {
        for k in 1..=report.durable_writes {
            let mut s = spec.clone();
            s.faults.crash_after_durable_write = Some(k);
            s.record_trace = true;
            let replay = replay_command_with(args, &[format!("--crash-after-durable-write={k}")]);
            let row = match run_quiet(s, args.memory) {
                Err(e) => SweepRow {
                    after_durable_write: k,
                    point: String::new(),
                    lost: vec![],
                    result: "incomplete",
                    restart_exit_code: None,
                    failed_assertions: vec![],
                    restart_stderr: vec![e],
                    digest: String::new(),
                    replay,
                },
                Ok((lives, stderr)) => {
                    let last = lives.last().expect("at least one life");
                    let crashed = lives.len() >= 2 && lives[0].crashed;
                    let first = &lives[0].run.report;
                    let kind = |f: &deja_kernel::FaultRecord| {
                        serde_json::to_value(f.kind).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default()
                    };
                    let point = first
                        .faults
                        .iter()
                        .find(|f| kind(f) == "crash")
                        .map(|f| {
                            let name =
                                first.trace.get(f.syscall_index as usize).map(|t| t.name.as_str()).unwrap_or("?");
                            format!("{name}, syscall {}", f.syscall_index)
                        })
                        .unwrap_or_else(|| "no crash happened".into());
                    let lost: Vec<String> = first
                        .faults
                        .iter()
                        .filter(|f| kind(f) == "lost_unsynced")
                        .filter_map(|f| f.path.clone())
                        .collect();
                    let failed_assertions: Vec<String> =
                        last.run.report.assertions.iter().filter(|a| a.bug).map(|a| a.message.clone()).collect();
                    let held = exit_code(last) == 0 && failed_assertions.is_empty();
                    let text = String::from_utf8_lossy(&stderr);
                    let restart_stderr: Vec<String> = text
                        .lines()
                        .filter(|l| !l.starts_with("{\"deja\"") && !l.is_empty())
                        .take(5)
                        .map(String::from)
                        .collect();
                    SweepRow {
                        after_durable_write: k,
                        point,
                        lost,
                        result: if !crashed {
                            "incomplete"
                        } else if held {
                            "held"
                        } else {
                            "failed"
                        },
                        restart_exit_code: Some(exit_code(last)),
                        failed_assertions,
                        restart_stderr,
                        digest: lives_digest(&lives),
                        replay,
                    }
                }
            };
            report.rows.push(row);
        }
        let failed = report.rows.iter().any(|r| r.result == "failed");
        let incomplete = report.rows.iter().any(|r| r.result == "incomplete");
        report.verdict = if incomplete {
            report.incomplete_because = Some("some kill points were never reached or did not run".into());
            "evidence_incomplete"
        } else if failed {
            "failures"
        } else {
            "all_held"
        };
    }
    let mut h = blake3::Hasher::new();
    for r in &report.rows {
        h.update(&r.after_durable_write.to_le_bytes());
        h.update(r.result.as_bytes());
        h.update(r.digest.as_bytes());
    }
    h.update(report.verdict.as_bytes());
    report.digest = h.finalize().to_hex().to_string();
    print(args, &report);
    match report.verdict {
        "all_held" => 0,
        "failures" => 1,
        _ => 2,
    }
}

fn print(args: &RunArgs, report: &SweepReport) {
    let mut e = std::io::stderr().lock();
    if args.json {
        let _ = writeln!(e, "{}", serde_json::to_string(report).unwrap_or_default());
        return;
    }
    let _ = writeln!(e, "deja: crash sweep over {} durable writes", report.durable_writes);
    for r in &report.rows {
        match r.result {
            "held" => {
                let _ = writeln!(e, "deja:   after durable write {:>3} ({}): held", r.after_durable_write, r.point);
            }
            other => {
                let _ = writeln!(
                    e,
                    "deja:   after durable write {:>3} ({}): {} — lost unsynced {}; restart exited {}{}",
                    r.after_durable_write,
                    r.point,
                    other.to_uppercase(),
                    if r.lost.is_empty() { "nothing".to_string() } else { r.lost.join(", ") },
                    r.restart_exit_code.map(|c| c.to_string()).unwrap_or_else(|| "-".into()),
                    if r.failed_assertions.is_empty() {
                        String::new()
                    } else {
                        format!(", assertion failed: {}", r.failed_assertions.join("; "))
                    }
                );
                for line in &r.restart_stderr {
                    let _ = writeln!(e, "deja:       {line}");
                }
                let _ = writeln!(e, "deja:       replay: {}", r.replay);
            }
        }
    }
    if let Some(why) = &report.incomplete_because {
        let _ = writeln!(e, "deja: evidence incomplete: {why}");
    }
    let failed = report.rows.iter().filter(|r| r.result == "failed").count();
    let _ = writeln!(
        e,
        "deja: sweep {}: {failed} of {} restarts failed; digest {}",
        report.verdict,
        report.rows.len(),
        report.digest
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
