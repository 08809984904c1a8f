//! `deja run cluster.toml`: a cluster run, or `--audit K` cluster runs compared by digest.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use deja_cluster::{ClusterConfig, ClusterReport, ConfigError, Outcome, RunOptions};
use deja_kernel::{ExitStatus, Stream};

use crate::exit::Exit;
use crate::run_args::{Failure, RunArgs};

/// Loads a cluster file, with `--seed` applied, its nodes to run under `settings`.
pub fn load(path: &Path, seed: Option<u64>, settings: &deja_vmm::Settings) -> Result<ClusterConfig, Failure> {
    let mut cfg = ClusterConfig::load(path).map_err(|e| {
        let code = match &e {
            ConfigError::Read { source, .. } if source.kind() == std::io::ErrorKind::NotFound => Exit::NotFound,
            _ => Exit::Usage,
        };
        Failure::new(code, e.to_string())
    })?;
    if let Some(s) = seed {
        cfg.seed = s;
    }
    cfg.settings = *settings;
    Ok(cfg)
}

/// Prints each node's output line by line, prefixed with its name.
#[derive(Default)]
pub struct Prefixer {
    partial: BTreeMap<(String, bool), Vec<u8>>,
}

impl Prefixer {
    /// Takes `bytes` written by `node` to `stream`; prints the complete lines.
    pub fn write(&mut self, node: &str, stream: Stream, bytes: &[u8]) {
        let err = stream == Stream::Stderr;
        let buf = self.partial.entry((node.to_string(), err)).or_default();
        buf.extend_from_slice(bytes);
        while let Some(pos) = buf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = buf.drain(..=pos).collect();
            let text = String::from_utf8_lossy(&line);
            if err {
                eprint!("[{node}] {text}");
            } else {
                print!("[{node}] {text}");
            }
        }
    }

    /// Prints what is left without a newline.
    pub fn flush(&mut self) {
        for ((node, err), buf) in std::mem::take(&mut self.partial) {
            if !buf.is_empty() {
                let text = String::from_utf8_lossy(&buf);
                if err {
                    eprintln!("[{node}] {text}");
                } else {
                    println!("[{node}] {text}");
                }
            }
        }
        let _ = std::io::stdout().flush();
    }
}

/// Runs a cluster once; node output goes to `sink`; `record_trace` keeps every node's trace.
fn run_cluster(
    cfg: ClusterConfig,
    sink: &mut dyn FnMut(&str, Stream, &[u8]),
    record_trace: bool,
) -> Result<ClusterReport, Failure> {
    deja_cluster::run(cfg, RunOptions { sink, steering: Default::default(), record_trace }).map_err(|e| {
        let code = if matches!(e, deja_cluster::ClusterError::NoProgress { .. }) {
            Exit::NoProgress
        } else {
            Exit::DejaFailed
        };
        Failure::new(code, e.to_string())
    })
}

fn describe(e: Option<&ExitStatus>) -> String {
    match e {
        Some(ExitStatus::Exited { code }) => format!("exit {code}"),
        Some(ExitStatus::Signaled { name, fault, .. }) => match fault {
            Some(f) => format!("{name} ({})", f.description),
            None => name.clone(),
        },
        None => "never ran".into(),
    }
}

/// The exit `deja run` gives a cluster report, and a one-line verdict: [`Exit::Failure`] a waited
/// node failed or the history is not linearizable, [`Exit::Incomplete`] the virtual-time budget
/// ran out, [`Exit::Stuck`] no node could run any more.
pub fn verdict(r: &ClusterReport, history: &HistoryCheck) -> (Exit, String) {
    if r.assertion_failed() {
        let failing: Vec<String> = r
            .nodes
            .iter()
            .flat_map(|n| {
                n.lives.iter().flat_map(move |l| {
                    l.assertions
                        .iter()
                        .filter(|a| a.status == deja_kernel::AssertionStatus::Failed)
                        .map(move |a| format!("{}: {:?}", n.name, a.message))
                })
            })
            .collect();
        return (Exit::AssertionFailed, format!("assertion failed: {}", failing.join("; ")));
    }
    match history {
        Some(Ok(deja_history::Verdict::NotLinearizable(v))) => return (Exit::Failure, v.signature()),
        Some(Err(e)) => return (Exit::Failure, format!("the clients' history cannot be read: {e}")),
        _ => {}
    }
    match &r.outcome {
        Outcome::TimeLimit => {
            return (
                Exit::Incomplete,
                format!(
                    "the virtual-time budget ran out before every waited node exited (still running: {})",
                    r.unfinished().join(", ")
                ),
            )
        }
        Outcome::Stuck(why) => return (Exit::Stuck, format!("stuck: {why}")),
        Outcome::Completed => {}
    }
    match r.first_failure() {
        Some((node, e)) => (Exit::Failure, format!("node {node} failed: {}", describe(Some(e)))),
        None => (Exit::Clean, "every waited node exited 0".into()),
    }
}

/// The clients' history of a cluster run, checked (`None`: they recorded none).
pub type HistoryCheck = Option<Result<deja_history::Verdict, deja_history::HistoryError>>;

/// Prints the summary of a cluster run, whose history checked as `history`, to stderr.
pub fn summary(r: &ClusterReport, history: &HistoryCheck) {
    eprintln!(
        "deja: cluster of {} nodes, seed {}, {:.3} s virtual in {:.3} s wall; outcome: {}",
        r.nodes.len(),
        r.seed,
        r.virtual_time_ns as f64 / 1e9,
        r.wall_ns as f64 / 1e9,
        match &r.outcome {
            Outcome::Completed => "completed".to_string(),
            Outcome::TimeLimit => "time limit".to_string(),
            Outcome::Stuck(w) => format!("stuck ({w})"),
        }
    );
    for n in &r.nodes {
        let ended = match (&r.outcome, n.unfinished()) {
            (Outcome::TimeLimit, true) => "still running when the time budget ran out".to_string(),
            (_, true) => "still running when the run ended".to_string(),
            (_, false) => describe(n.exit()),
        };
        eprintln!(
            "deja:   {:<10} {:<15} {} ({} {}, {} syscalls)",
            n.name,
            n.address,
            ended,
            n.lives.len(),
            if n.lives.len() == 1 { "life" } else { "lives" },
            n.syscalls()
        );
    }
    if let Some(t) = &r.template {
        use deja_cluster::template::Verdict;
        let how = match (&t.verdict, t.began) {
            (Some(Verdict::Passed), _) => "passed".to_string(),
            (Some(Verdict::Failed(w)), _) => format!("failed: {w}"),
            (Some(Verdict::Stopped(w)), _) => format!("stopped without a verdict: {w}"),
            (None, true) => "still running when the run ended".to_string(),
            (None, false) => "never began".to_string(),
        };
        eprintln!("deja:   test template {} ({} commands) on {}: {how}", t.dir, t.commands.len(), t.node);
    }
    for f in &r.faults {
        eprintln!("deja:   fault at {:>10.3} ms: {} {}", f.time_ns as f64 / 1e6, f.kind, f.detail);
    }
    let s = &r.network;
    eprintln!(
        "deja: network: {} packets sent, {} deliveries, {} lost, {} duplicated, {} reordered, {} cut datagrams, {} held",
        s.sent, s.delivered, s.lost, s.duplicated, s.reordered, s.cut_datagrams, s.held
    );
    eprintln!("deja: {} cluster decisions; digest {}", r.decisions.len(), r.digest);
    history_summary(history);
}

/// The clients' history, checked, when they recorded one.
pub fn history_summary(history: &HistoryCheck) {
    match history {
        None => {}
        Some(Ok(deja_history::Verdict::Linearizable { ops })) => {
            eprintln!("deja: history: linearizable ({ops} operations)");
        }
        Some(Ok(deja_history::Verdict::NotLinearizable(v))) => {
            for line in v.timeline().lines() {
                eprintln!("deja: history: {line}");
            }
        }
        Some(Ok(deja_history::Verdict::Unknown { reason })) => {
            eprintln!("deja: history: NOT CHECKED, the evidence is incomplete: {reason}");
        }
        Some(Err(e)) => eprintln!("deja: history: cannot be read: {e}"),
    }
}

/// `deja run cluster.toml`, every node's VMs set up under `settings`.
pub fn run(args: &RunArgs, path: &Path, settings: &deja_vmm::Settings) -> Result<Exit, Failure> {
    let unsupported = [
        (args.snapshot_at.is_some(), "--snapshot-at"),
        (args.crash_after_durable_write.is_some(), "--crash-after-durable-write"),
        (args.crash_before_durable_write.is_some(), "--crash-before-durable-write"),
        (args.crash_at_exit, "--crash-at-exit"),
        (!args.crash_at.is_empty(), "--crash-at"),
        (!args.kill_process.is_empty(), "--kill-process"),
        (args.crash_state.is_some(), "--crash-state"),
        (!args.fail.is_empty(), "--fail"),
        (args.torn_writes || args.reordered_writes, "--torn-writes and --reordered-writes"),
        ((args.eio_write_ppm | args.eio_fsync_ppm | args.enospc_write_ppm) != 0, "the I/O error rates"),
        (args.crash_sweep, "--crash-sweep"),
        (args.crash_model != deja_kernel::CrashModel::PosixWeak, "--crash-model (crash_model in [faults.storage])"),
        (!args.files.is_empty(), "--file"),
        (args.stdin.is_some(), "--stdin"),
        (!args.env.is_empty(), "--env"),
        (!args.copy_in.is_empty(), "--copy-in"),
        (args.fs_export.is_some(), "--fs-export"),
        (args.trace_out.is_some(), "--trace-out"),
        (!args.args.is_empty(), "program arguments"),
    ];
    if let Some((_, flag)) = unsupported.iter().find(|(on, _)| *on) {
        return Err(Failure::new(
            Exit::Usage,
            format!("{flag} does not apply to a cluster file; put node settings in the file"),
        ));
    }
    let cfg = load(path, args.seed, settings)?;
    let host = settings.host().map_err(|e| Failure::new(Exit::DejaFailed, e.to_string()))?;
    let runs = args.audit.unwrap_or(1).max(1);
    let auditing = runs > 1 || args.audit_record.is_some();
    let mut prefix = Prefixer::default();
    let mut output = Vec::new();
    let first = {
        let live = args.audit_record.is_none();
        let mut sink = |node: &str, s: Stream, b: &[u8]| {
            if live {
                prefix.write(node, s, b);
            }
            output.extend_from_slice(node.as_bytes());
            output.push(if s == Stream::Stdout { b'1' } else { b'2' });
            output.extend_from_slice(&(b.len() as u64).to_le_bytes());
            output.extend_from_slice(b);
        };
        run_cluster(cfg.clone(), &mut sink, auditing)?
    };
    prefix.flush();
    let mut record = first.record(&output);
    record.fingerprint = Some(host.fingerprint.clone());
    if let Some(out) = &args.audit_record {
        record.core = args.on_core;
        crate::audit::write_record(&record, out)?;
        return Ok(Exit::Clean);
    }
    let mut code_override = None;
    let mut audit = None;
    if runs > 1 {
        let argv = vec!["run".to_string(), "--seed".to_string(), cfg.seed.to_string(), path.display().to_string()];
        let verdict = crate::audit::audit(&record, &argv, runs, settings)?;
        if verdict.result != "identical" {
            code_override = Some(Exit::AuditDiverged);
        }
        if !args.json {
            crate::audit::print(&verdict);
        }
        audit = Some(verdict);
    }
    if let Some(out) = &args.report_out {
        let json = serde_json::to_vec_pretty(&first).map_err(|e| Failure::new(Exit::DejaFailed, e.to_string()))?;
        std::fs::write(out, json)
            .map_err(|e| Failure::new(Exit::DejaFailed, format!("cannot write {}: {e}", out.display())))?;
    }
    let history = deja_explore::cluster::history_verdict(&first);
    if !args.json {
        summary(&first, &history);
    }
    let (code, why) = verdict(&first, &history);
    eprintln!("deja: {why}");
    if code != Exit::Clean {
        let exe = std::env::args().next().unwrap_or_else(|| "deja".into());
        eprintln!("deja: reproduce with: {exe} run --seed {} {}", first.seed, path.display());
    }
    if !args.no_probe && !args.json {
        eprintln!("deja: host CPU fingerprint {} ({})", host.fingerprint.id, host.remedy);
    }
    if args.json {
        // The last line of stderr, like a single run's summary.
        let mut json = serde_json::to_value(&first).map_err(|e| Failure::new(Exit::DejaFailed, e.to_string()))?;
        json["host"] = crate::run_report::HostSummary::new(host).to_json();
        json["audit"] = serde_json::to_value(&audit).expect("plain data serializes");
        eprintln!("{json}");
    }
    Ok(code_override.unwrap_or(code))
}
