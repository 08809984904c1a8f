//! `--audit K`: the same run in K fresh `deja` processes, each pinned in turn to one of the host
//! cores this process may use, compared component by component with the run made here.
//!
//! A fresh process has its own probe, its own VMs and its own core, so the audit sees every way a
//! run can depend on where it happened: the host core (CPU identity), the process, the
//! scheduler. Each child runs the run's reproduce command with two hidden flags: `--on-core N`
//! (pin the process before anything runs) and `--audit-record FILE` (write a
//! [`RunRecord`] there), under this run's settings, handed to it as its environment
//! ([`crate::settings::hand_to`]). The first component that differs is named
//! ([`deja_vmm::divergence::first_difference`]).

use std::path::{Path, PathBuf};
use std::process::Command;

use deja_vmm::divergence::{first_difference, RunRecord};
use serde::Serialize;

use crate::exit::Exit;
use crate::run_args::Failure;

/// Writes a record for the parent (`--audit-record FILE`).
pub fn write_record(record: &RunRecord, path: &Path) -> Result<(), Failure> {
    let bytes = serde_json::to_vec(record).expect("plain data serializes");
    std::fs::write(path, bytes)
        .map_err(|e| Failure::new(Exit::DejaFailed, format!("cannot write the audit record {}: {e}", path.display())))
}

/// The cores an audit pins its processes to, in turn: every core this process may use (its
/// affinity mask when it started, before any vCPU thread was pinned).
pub fn cores() -> Vec<u32> {
    let c = deja_vmm::identity::initial_cores();
    if c.is_empty() {
        vec![0]
    } else {
        c
    }
}

/// Runs `deja <argv>` in a fresh process pinned to `core`, under `settings`, and reads its
/// audit record.
pub fn run_child(argv: &[String], core: u32, n: u32, settings: &deja_vmm::Settings) -> Result<RunRecord, Failure> {
    let exe = std::env::current_exe()
        .map_err(|e| Failure::new(Exit::DejaFailed, format!("cannot find the deja executable: {e}")))?;
    let record: PathBuf = std::env::temp_dir().join(format!("deja-audit-{}-{n}.json", std::process::id()));
    // The hidden flags go right after the subcommand, before the program and its arguments.
    let (sub, rest) = argv.split_first().ok_or_else(|| Failure::new(Exit::DejaFailed, "empty audit command"))?;
    let mut cmd = Command::new(&exe);
    // The settings (`--no-vdso` among them) reach the child as the environment they stand for.
    let out = crate::settings::hand_to(&mut cmd, settings)
        .arg(sub)
        .args(["--on-core".to_string(), core.to_string(), "--audit-record".to_string()])
        .arg(&record)
        .args(rest)
        .output()
        .map_err(|e| Failure::new(Exit::DejaFailed, format!("cannot start {}: {e}", exe.display())))?;
    let read = std::fs::read(&record);
    let _ = std::fs::remove_file(&record);
    let bytes = read.map_err(|_| {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(3).collect::<Vec<_>>().into_iter().rev().collect();
        Failure::new(
            Exit::DejaFailed,
            format!("audit run {n} on core {core} wrote no record ({}): {}", out.status, tail.join(" / ")),
        )
    })?;
    let mut rec: RunRecord = serde_json::from_slice(&bytes).map_err(|e| {
        Failure::new(Exit::DejaFailed, format!("audit run {n} on core {core} wrote an unreadable record: {e}"))
    })?;
    rec.core = Some(core);
    Ok(rec)
}

/// An audit's outcome, as `--json` reports it.
#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    /// Runs compared: this one and the fresh processes.
    pub runs: u32,
    /// `identical` or `diverged`.
    pub result: &'static str,
    /// The digest of this process's run.
    pub digest: String,
    /// The core each fresh process was pinned to, in order.
    pub cores: Vec<u32>,
    /// The host cores the vCPU threads were seen on, over every run.
    pub host_cores_seen: Vec<u32>,
    /// The diverging run (1-based among the fresh processes), if one diverged.
    pub run: Option<u32>,
    /// The first component that differs.
    pub component: Option<String>,
    /// For a trace divergence in a program's first life: the first diverging syscall.
    pub first_diverging_syscall: Option<u64>,
    /// Fingerprints that differ from this process's, if any.
    pub fingerprint_differences: Vec<String>,
}

/// Audits `here` (this process's run) against `runs - 1` fresh processes running `argv` under
/// `settings` (this run's).
pub fn audit(here: &RunRecord, argv: &[String], runs: u32, settings: &deja_vmm::Settings) -> Result<Verdict, Failure> {
    let cores = cores();
    let mut verdict = Verdict {
        runs,
        result: "identical",
        digest: here.digest.clone(),
        cores: Vec::new(),
        host_cores_seen: here.host_cores.clone(),
        run: None,
        component: None,
        first_diverging_syscall: None,
        fingerprint_differences: Vec::new(),
    };
    for n in 1..runs.max(1) {
        let core = cores[(n as usize - 1) % cores.len()];
        let other = run_child(argv, core, n, settings)?;
        verdict.cores.push(core);
        for c in &other.host_cores {
            if !verdict.host_cores_seen.contains(c) {
                verdict.host_cores_seen.push(*c);
            }
        }
        if let (Some(a), Some(b)) = (&here.fingerprint, &other.fingerprint) {
            if a != b {
                verdict
                    .fingerprint_differences
                    .push(format!("run {n} on core {core}: {}", a.differences(b).join("; ")));
            }
        }
        if let Some(component) = first_difference(here, &other) {
            verdict.result = "diverged";
            verdict.run = Some(n);
            if let (Some(x), Some(y)) = (here.lives.first(), other.lives.first()) {
                verdict.first_diverging_syscall = deja_vmm::divergence::first_diverging_syscall(x, y);
            }
            verdict.component = Some(component);
            break;
        }
    }
    verdict.host_cores_seen.sort_unstable();
    Ok(verdict)
}

/// Prints an audit's verdict to stderr.
pub fn print(v: &Verdict) {
    let cores: Vec<String> = v.cores.iter().map(|c| c.to_string()).collect();
    let seen: Vec<String> = v.host_cores_seen.iter().map(|c| c.to_string()).collect();
    let single = if self::cores().len() < 2 {
        " (this process may use one core only: the runs differ by process, not by core)"
    } else {
        ""
    };
    match (v.run, &v.component) {
        (Some(n), Some(what)) => eprintln!(
            "deja: audit: DIVERGED: fresh process {n} (pinned to core {}) differs from this run in {what}",
            v.cores.last().copied().unwrap_or_default()
        ),
        _ => eprintln!(
            "deja: audit: identical over {} runs (this process and {} fresh processes pinned to cores {}; vCPUs seen on cores {}){single}, digest {}",
            v.runs,
            v.cores.len(),
            cores.join(", "),
            seen.join(", "),
            v.digest
        ),
    }
    for d in &v.fingerprint_differences {
        eprintln!("deja: audit: host fingerprint differs: {d}");
    }
}
