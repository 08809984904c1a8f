//! `deja bench`: deja against native execution, measured side by side in one process.
//!
//! Wall-clock time appears here and nowhere else that shapes a run: these figures describe the
//! host, not the guest.

use crate::exit::Exit;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use deja_kernel::ProgramSpec;
use deja_vmm::{BootOptions, RegisterPath, Settings};

mod cluster;
use cluster::{
    campaign, cluster_check_figures, cluster_figures, forked_cluster_figures, history_figures, scale_figures,
};
mod late;
mod print;

/// Arguments of `deja bench`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Directory holding the example guests (default: `guests` in this binary's target
    /// directory, where `cargo xtask guests` puts them).
    #[arg(long, value_name = "DIR")]
    pub guests: Option<PathBuf>,
    /// Millions of steps for the CPU-bound example.
    #[arg(long, default_value_t = 400)]
    pub steps: u64,
    /// Syscalls for the round-trip measurement.
    #[arg(long, default_value_t = 5000)]
    pub syscalls: u64,
    /// Repetitions of each measurement (the median is reported).
    #[arg(long, default_value_t = 3)]
    pub repeat: u32,
    /// Print the figures as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Measure only the register cluster's booted and forked rounds (what the vDSO figures
    /// run in a process of their own for each setting).
    #[arg(long, hide = true)]
    pub forked_cluster_only: bool,
    /// Measure only campaigns with later forks off and on (what the later-fork figures run in a
    /// process of their own for each vDSO setting).
    #[arg(long, hide = true)]
    pub late_forks_only: bool,
}

/// SDK calls timed natively, where one call costs nanoseconds.
const NATIVE_SDK_CALLS: u64 = 20_000_000;

fn default_guest_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    // target/{release,debug}/deja → target/guests
    exe.parent().and_then(Path::parent).map(|t| t.join("guests")).unwrap_or_default()
}

/// The crash sweep with crash states against the sweep right after each durable write, on the
/// storage reference workloads, in fresh processes side by side; and exploration with the
/// whole fault menu.
fn storage_figures(exe: &Path, dir: &Path, settings: &Settings) -> Result<serde_json::Value, String> {
    let sweep = |program: &str, args: &[&str], old: bool| -> Result<serde_json::Value, String> {
        let mut cmd = Command::new(exe);
        crate::settings::hand_to(&mut cmd, settings).args(["run", "--json", "--no-probe", "--crash-sweep"]);
        if old {
            cmd.arg("--after-writes-only");
        }
        cmd.arg(dir.join(program)).arg("--").args(args);
        let start = Instant::now();
        let out = cmd.output().map_err(|e| e.to_string())?;
        let wall = start.elapsed().as_secs_f64();
        let err = String::from_utf8_lossy(&out.stderr);
        let v: serde_json::Value = serde_json::from_str(err.lines().last().unwrap_or_default())
            .map_err(|e| format!("the sweep of {program} printed no report ({e}): {err}"))?;
        let points = v["crash_points"].as_f64().unwrap_or(0.0).max(1.0);
        Ok(serde_json::json!({
            "wall_s": wall, "verdict": v["verdict"], "crash_points": v["crash_points"],
            "states_tried": v["states_tried"], "distinct_states": v["distinct_states"], "restarts": v["restarts"],
            "states_per_s": v["states_tried"].as_f64().unwrap_or(0.0) / wall,
            "distinct_per_point": v["distinct_states"].as_f64().unwrap_or(0.0) / points,
        }))
    };
    let mut rows = Vec::new();
    for (program, args) in [
        ("kv", vec!["--variant", "fixed", "8"]),
        ("pagestore-fixed", vec!["6"]),
        ("pagestore-buggy", vec!["6"]),
        ("ackstore-fixed", vec!["6"]),
    ] {
        let states = sweep(program, &args, false)?;
        let old = sweep(program, &args, true)?;
        let image = std::fs::read(dir.join(program)).map_err(|e| format!("{program}: {e}"))?;
        let mut target = deja_explore::Target {
            spec: ProgramSpec::for_program(image, program, args.iter().map(|a| a.to_string()), 0),
            memory: deja_vmm::DEFAULT_MEMORY,
            path: program.to_string(),
            root: None,
        };
        target.spec.seed = 0;
        let out = std::env::temp_dir().join(format!("deja-bench-storage-{}-{program}", std::process::id()));
        let _ = std::fs::remove_dir_all(&out);
        let rounds = 100u64;
        let cfg = campaign(rounds, &out, deja_explore::Mode::Faults, 1, settings);
        let start = Instant::now();
        deja_explore::explore(&target, &cfg, &mut |_| {}).map_err(|e| e.to_string())?;
        let explore_s = start.elapsed().as_secs_f64();
        let _ = std::fs::remove_dir_all(&out);
        rows.push(serde_json::json!({
            "workload": program, "states": states, "after_writes_only": old,
            "explore_rounds_per_s_full_menu": rounds as f64 / explore_s,
        }));
    }
    Ok(serde_json::json!({ "rows": rows }))
}

/// What CPUID faulting costs: `deja run hostinfo` (a program that asks CPUID for 25 leaves on
/// top of glibc's and std's own start-up queries) with faulting against KVM's table, each in
/// fresh processes, side by side (otherwise under `settings`).
fn cpuid_cost(exe: &Path, hostinfo: &Path, repeat: usize, settings: &Settings) -> Result<serde_json::Value, String> {
    let honoured = settings.host().map_err(|e| e.to_string())?.faulting_honoured;
    if !honoured {
        return Ok(serde_json::json!({ "faulting_honoured": false }));
    }
    let run = |policy: &str| -> Result<(Duration, u64), String> {
        let start = Instant::now();
        // Without rewriting, so that the host's CPUID faulting (or KVM's table) answers.
        let out = crate::settings::hand_to(&mut Command::new(exe), settings)
            .env(deja_vmm::identity::ENV, policy)
            .env(deja_vmm::identity::REWRITE_ENV, "off")
            .args(["run", "--json", "--no-probe"])
            .arg(hostinfo)
            .output()
            .map_err(|e| e.to_string())?;
        let took = start.elapsed();
        let err = String::from_utf8_lossy(&out.stderr);
        let v: serde_json::Value = serde_json::from_str(err.lines().last().unwrap_or_default())
            .map_err(|e| format!("deja run hostinfo printed no summary ({e}): {err}"))?;
        Ok((took, v["vm"]["cpuid_exits"].as_u64().unwrap_or(0)))
    };
    let (mut with, mut without, mut exits) = (Vec::new(), Vec::new(), 0);
    for _ in 0..repeat.max(3) {
        let (t, n) = run("faulting")?;
        with.push(t);
        exits = n;
        without.push(run("table")?.0);
    }
    let (f, t) = (median(with).as_secs_f64() * 1e3, median(without).as_secs_f64() * 1e3);
    Ok(serde_json::json!({
        "faulting_honoured": true, "cpuid_exits": exits, "faulting_ms": f, "table_ms": t,
        "us_per_cpuid": if exits > 0 { (f - t) * 1e3 / exits as f64 } else { 0.0 },
    }))
}

/// What rewriting costs: planning each guest's code at load (milliseconds per MiB of code, the
/// planner alone, in this process), a trap at a rewritten `rdtsc` (a C program executing it N
/// times against none, in this process), and `deja run hostchan` from start to end in fresh
/// processes with rewriting and without (otherwise under `settings`).
fn rewrite_figures(exe: &Path, dir: &Path, repeat: u32, settings: &Settings) -> Result<serde_json::Value, String> {
    let mut plans = Vec::new();
    for name in ["hello", "kv", "raftkv-node", "hostchan", "go-goroutines"] {
        let image = std::fs::read(dir.join(name)).map_err(|e| format!("{name}: {e}"))?;
        let mut times = Vec::new();
        let mut plan = deja_rewrite::Plan::default();
        for _ in 0..repeat.max(3) {
            let start = Instant::now();
            plan = deja_rewrite::plan_elf(&image).map_err(|e| format!("{name}: {e}"))?;
            times.push(start.elapsed());
        }
        let ms = median(times).as_secs_f64() * 1e3;
        let mib = plan.stats.code_bytes as f64 / f64::from(1 << 20);
        plans.push(serde_json::json!({
            "program": name, "code_kib": plan.stats.code_bytes / 1024, "plan_ms": ms, "ms_per_mib": ms / mib,
            "sites": plan.sites.len(), "refused": plan.refused.len(),
            "reached_share": plan.stats.decoded_bytes as f64 / plan.stats.code_bytes.max(1) as f64,
        }));
    }
    let hostchan = dir.join("hostchan");
    let n = 2000u64;
    let (mut none, mut many, mut traps) = (Vec::new(), Vec::new(), 0);
    for _ in 0..repeat.max(3) {
        none.push(time_deja(&hostchan, &["0"], settings)?.0);
        let (t, run) = time_deja(&hostchan, &[&n.to_string()], settings)?;
        traps = run.report.host_channels.traps.rdtsc;
        many.push(t);
    }
    let us_per_trap = (median(many).as_secs_f64() - median(none).as_secs_f64()) * 1e6 / n as f64;
    let run = |rewrite: &str| -> Result<Duration, String> {
        let start = Instant::now();
        let out = crate::settings::hand_to(&mut Command::new(exe), settings)
            .env(deja_vmm::identity::REWRITE_ENV, rewrite)
            .args(["run", "--no-probe"])
            .arg(&hostchan)
            .output()
            .map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(format!("deja run hostchan failed: {}", String::from_utf8_lossy(&out.stderr)));
        }
        Ok(start.elapsed())
    };
    let (mut on, mut off) = (Vec::new(), Vec::new());
    for _ in 0..repeat.max(3) {
        on.push(run("on")?);
        off.push(run("off")?);
    }
    Ok(serde_json::json!({
        "plans": plans,
        "trap": { "program": "hostchan", "rdtsc": n, "traps": traps, "us_per_trap": us_per_trap },
        "run_hostchan": { "rewriting_ms": median(on).as_secs_f64() * 1e3, "off_ms": median(off).as_secs_f64() * 1e3 },
    }))
}

/// Block coverage on an uninstrumented store (ackstore, forked as a campaign forks it): the first
/// round with every block armed, and the steady state once what it reached is disarmed, side by
/// side with rounds of a fork without coverage, alternated so the host's drift hits both alike.
fn block_coverage_figures(dir: &Path, rounds: u32, settings: &Settings) -> Result<serde_json::Value, String> {
    use deja_vmm::coverage::BlockImage;
    let path = dir.join("ackstore-buggy");
    let spec = spec(&path, &["6"])?;
    let blocks = BlockImage::of_image(&spec.image, &[]);
    let at = 8;
    let mut plain =
        deja_vmm::Fork::new(spec.clone(), 1 << 30, settings, at, &mut |_, _| {}).map_err(|e| e.to_string())?;
    let start = Instant::now();
    let (mut covered, parent_hits) =
        deja_vmm::Fork::with_blocks(spec, 1 << 30, settings, at, Some(blocks.clone()), &mut |_, _| {})
            .map_err(|e| e.to_string())?;
    let armed_boot = start.elapsed();
    let ids: Vec<u32> = parent_hits.iter().map(|h| h.block).collect();
    covered.disarm_blocks(&ids);
    let start = Instant::now();
    let first = covered.run_child(None, &mut |_, _| {}).map_err(|e| e.to_string())?;
    let first_round = start.elapsed();
    let ids: Vec<u32> = first.blocks.iter().map(|h| h.block).collect();
    covered.disarm_blocks(&ids);
    let start = Instant::now();
    plain.run_child(None, &mut |_, _| {}).map_err(|e| e.to_string())?;
    let plain_first = start.elapsed();
    let (mut on, mut off, mut steady_exits) = (Vec::new(), Vec::new(), 0);
    for _ in 0..rounds.max(5) {
        let start = Instant::now();
        let run = covered.run_child(None, &mut |_, _| {}).map_err(|e| e.to_string())?;
        on.push(start.elapsed());
        steady_exits += run.blocks.len();
        let start = Instant::now();
        plain.run_child(None, &mut |_, _| {}).map_err(|e| e.to_string())?;
        off.push(start.elapsed());
    }
    let (on, off) = (median(on).as_secs_f64(), median(off).as_secs_f64());
    Ok(serde_json::json!({
        "program": "ackstore-buggy", "blocks": blocks.len(), "fork_at_syscall": at,
        "parent_breakpoints": parent_hits.len(), "armed_fork_ms": armed_boot.as_secs_f64() * 1e3,
        "first_round_ms": first_round.as_secs_f64() * 1e3, "first_round_plain_ms": plain_first.as_secs_f64() * 1e3,
        "first_round_breakpoints": first.blocks.len(),
        "steady_round_ms": on * 1e3, "plain_round_ms": off * 1e3, "steady_overhead": on / off - 1.0,
        "steady_breakpoints": steady_exits, "target_overhead": 0.05,
    }))
}

pub(super) fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

pub(super) fn spec(path: &Path, args: &[&str]) -> Result<ProgramSpec, String> {
    let image = std::fs::read(path)
        .map_err(|e| format!("cannot read {}: {e} (build the guests with `cargo xtask guests`)", path.display()))?;
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    Ok(ProgramSpec::for_program(image, &name, args.iter().map(|s| s.to_string()), 1))
}

/// One life of `spec` in a fresh session under `settings`.
fn run_once(spec: ProgramSpec, memory: u64, settings: &Settings) -> Result<deja_vmm::Run, String> {
    deja_vmm::Session::boot_with(spec, memory, BootOptions::new(*settings))
        .and_then(|mut s| s.run(&mut |_, _| {}))
        .map_err(|e| e.to_string())
}

fn time_deja(path: &Path, args: &[&str], settings: &Settings) -> Result<(Duration, deja_vmm::Run), String> {
    time_deja_with(path, args, RegisterPath::SyncRegs, settings)
}

fn time_deja_with(
    path: &Path,
    args: &[&str],
    regs: RegisterPath,
    settings: &Settings,
) -> Result<(Duration, deja_vmm::Run), String> {
    let spec = spec(path, args)?;
    let start = Instant::now();
    let opts = BootOptions { register_path: regs, ..BootOptions::new(*settings) };
    let run = deja_vmm::Session::boot_with(spec, deja_vmm::DEFAULT_MEMORY, opts)
        .and_then(|mut s| s.run(&mut |_, _| {}))
        .map_err(|e| e.to_string())?;
    let elapsed = start.elapsed();
    if run.report.exit.code() != 0 {
        return Err(format!("{} failed under deja: {:?}", path.display(), run.report.exit));
    }
    Ok((elapsed, run))
}

fn time_native(path: &Path, args: &[&str]) -> Result<Duration, String> {
    let start = Instant::now();
    let out = Command::new(path).args(args).output().map_err(|e| format!("cannot start {}: {e}", path.display()))?;
    let elapsed = start.elapsed();
    if !out.status.success() {
        return Err(format!("{} failed natively", path.display()));
    }
    Ok(elapsed)
}

fn figures(args: &BenchArgs, settings: &Settings) -> Result<serde_json::Value, String> {
    let dir = args.guests.clone().unwrap_or_else(default_guest_dir);
    let cpuburn = dir.join("cpuburn");
    let syscalls = dir.join("syscalls");
    let hello = dir.join("hello");
    let memhog = dir.join("memhog");
    let steps = args.steps.to_string();
    let repeat = args.repeat.max(1);

    // 1. CPU-bound: the same binary natively and in deja, interleaved.
    let (mut native, mut in_deja) = (Vec::new(), Vec::new());
    for _ in 0..repeat {
        native.push(time_native(&cpuburn, &[&steps])?);
        in_deja.push(time_deja(&cpuburn, &[&steps], settings)?.0);
    }
    let (native, in_deja) = (median(native), median(in_deja));
    let ratio = native.as_secs_f64() / in_deja.as_secs_f64();

    // 2. Syscall round trip: N extra syscalls against none, for both register paths.
    let n = args.syscalls.to_string();
    let mut per_syscall = Vec::new();
    let mut exits = 0;
    for regs in [RegisterPath::SyncRegs, RegisterPath::Ioctls] {
        let (mut base, mut many) = (Vec::new(), Vec::new());
        for _ in 0..repeat {
            base.push(time_deja_with(&syscalls, &["0"], regs, settings)?.0);
            let (t, run) = time_deja_with(&syscalls, &[&n], regs, settings)?;
            exits = run.stats.syscall_exits;
            many.push(t);
        }
        per_syscall.push((median(many).as_secs_f64() - median(base).as_secs_f64()) * 1e6 / args.syscalls as f64);
    }
    let per_syscall_us = per_syscall[0];

    // SDK call: N assertion requests against none, under deja and natively (where the SDK
    // falls back to local evaluation after one ENOSYS).
    let (mut sdk_base, mut sdk_many, mut nat_base, mut nat_many) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..repeat {
        sdk_base.push(time_deja(&syscalls, &["0", "sdk"], settings)?.0);
        sdk_many.push(time_deja(&syscalls, &[&n, "sdk"], settings)?.0);
        nat_base.push(time_native(&syscalls, &["0", "sdk"])?);
        nat_many.push(time_native(&syscalls, &[&NATIVE_SDK_CALLS.to_string(), "sdk"])?);
    }
    let per = |many: Vec<Duration>, base: Vec<Duration>, calls: u64| {
        (median(many).as_secs_f64() - median(base).as_secs_f64()) * 1e6 / calls as f64
    };
    let sdk_us = per(sdk_many, sdk_base, args.syscalls);
    let sdk_native_us = per(nat_many, nat_base, NATIVE_SDK_CALLS);

    // 3. Exception round trip: demand paging of N MiB (one #PF exit per 64 KiB window).
    let (mut small, mut big, mut faults) = (Vec::new(), Vec::new(), (0, 0));
    for _ in 0..repeat {
        let (t0, r0) = time_deja(&memhog, &["1"], settings)?;
        let (t1, r1) = time_deja(&memhog, &["64"], settings)?;
        small.push(t0);
        big.push(t1);
        faults = (r0.stats.exception_exits, r1.stats.exception_exits);
    }
    let extra_faults = faults.1.saturating_sub(faults.0).max(1);
    let per_fault_us = (median(big).as_secs_f64() - median(small).as_secs_f64()) * 1e6 / extra_faults as f64;

    // 4. Fork resets against dirtied pages, next to a whole-memory restore, in a 256 MiB guest.
    let dirty = dir.join("dirty");
    let mut traced = spec(&dirty, &["10"])?;
    traced.record_trace = true;
    let probe_run = run_once(traced, 256 << 20, settings)?;
    let marks: Vec<u64> = probe_run.report.trace.iter().filter(|e| e.name == "sched_yield").map(|e| e.index).collect();
    let [fork_at, child_end] = marks[..] else {
        return Err(format!("the dirty guest made {} marks instead of 2", marks.len()));
    };
    let mut fork_rows = Vec::new();
    for k in [10u64, 100, 1000, 10_000] {
        let ks = k.to_string();
        let mut fork = deja_vmm::Fork::new(spec(&dirty, &[&ks])?, 256 << 20, settings, fork_at, &mut |_, _| {})
            .map_err(|e| e.to_string())?;
        let (mut resets, mut wholes, mut frames, mut resynced) = (Vec::new(), Vec::new(), 0, 0);
        for _ in 0..repeat.max(3) {
            fork.run_child_until(child_end, &mut |_, _| {}).map_err(|e| e.to_string())?;
            let r = fork.reset().map_err(|e| e.to_string())?;
            resets.push(Duration::from_nanos(r.reset_ns));
            frames = r.dirty_frames;
            resynced = r.resynced_entries;
            wholes.push(Duration::from_nanos(fork.whole_memory_restore()));
        }
        let (reset, whole) = (median(resets), median(wholes));
        fork_rows.push(serde_json::json!({
            "dirtied_pages": k, "frames_rewritten": frames, "entries_resynced": resynced,
            "reset_us": reset.as_secs_f64() * 1e6, "whole_memory_restore_us": whole.as_secs_f64() * 1e6,
            "speedup": whole.as_secs_f64() / reset.as_secs_f64(),
        }));
    }

    // 5. Crash and restart on the key-value store (fixed variant): one plain run, one
    // crash-and-restart cycle, and a whole sweep over every durable write.
    let kv = dir.join("kv");
    let kv_args = ["--variant", "fixed", "8"];
    let quiet = |spec: ProgramSpec| -> Result<Vec<deja_vmm::Incarnation>, String> {
        deja_vmm::Session::boot_with(spec, deja_vmm::DEFAULT_MEMORY, BootOptions::new(*settings))
            .and_then(|mut s| s.lives(&mut |_, _| {}, None))
            .map_err(|e| e.to_string())
    };
    let start = Instant::now();
    let plain = quiet(spec(&kv, &kv_args)?)?;
    let plain_time = start.elapsed();
    let durable = plain[0].run.report.durable_writes;
    let mut crash_spec = spec(&kv, &kv_args)?;
    crash_spec.faults.crash_after_durable_write = Some(durable.div_ceil(2).max(1));
    let start = Instant::now();
    let lives = quiet(crash_spec)?;
    let cycle_time = start.elapsed();
    if lives.len() != 2 {
        return Err(format!("the crash run had {} lives instead of 2", lives.len()));
    }
    let start = Instant::now();
    for k in 1..=durable {
        let mut s = spec(&kv, &kv_args)?;
        s.faults.crash_after_durable_write = Some(k);
        quiet(s)?;
    }
    let sweep_time = start.elapsed();

    // 6. A full `deja check` on the credit scenario (hunt, control, replay in 3 worlds, sweep).
    let judge_input = |cand: &str| deja_judge::CheckInput {
        base: deja_judge::Program::plain(
            &dir.join("credit-buggy").display().to_string(),
            std::fs::read(dir.join("credit-buggy")).map_err(std::sync::Arc::new),
        ),
        candidate: deja_judge::Program::plain(
            &dir.join(cand).display().to_string(),
            std::fs::read(dir.join(cand)).map_err(std::sync::Arc::new),
        ),
        corrected: None,
        capsule: None,
        args: vec![],
        env: vec![],
        seed: 0,
        memory_mib: 1024,
        max_kill_points: 500,
        states_per_point: 8,
        crash_model: deja_kernel::CrashModel::PosixWeak,
        fail_stop: deja_kernel::FailStopMode::Auto,
        worlds: 3,
        settings: *settings,
    };
    let start = Instant::now();
    let judged = deja_judge::check(&judge_input("credit-atomic"));
    let check_time = start.elapsed();
    if judged.verdict != deja_judge::Verdict::FixedForThisCapsule {
        return Err(format!("deja check on credit-atomic gave {}", judged.verdict.name()));
    }

    // 7. Exploration throughput: rounds and forks per second on the reference workloads, and
    // the share of a round spent resetting the fork.
    let mut throughput = Vec::new();
    for (name, args) in [("kv", vec!["--variant", "fixed", "6"]), ("bank", vec!["20"]), ("credit-atomic", vec![])] {
        let mut traced = spec(&dir.join(name), &args)?;
        traced.record_trace = true;
        let probe = run_once(traced, deja_vmm::DEFAULT_MEMORY, settings)?;
        let fork_at = probe.report.setup_complete.as_ref().map(|s| s.syscall_index + 1).unwrap_or(0);
        let spec = spec(&dir.join(name), &args)?;
        let mut fork = deja_vmm::Fork::new(spec, deja_vmm::DEFAULT_MEMORY, settings, fork_at, &mut |_, _| {})
            .map_err(|e| e.to_string())?;
        let durable = probe.report.durable_writes;
        let rounds = 60u64;
        let mut reset_ns = 0u64;
        let start = Instant::now();
        for r in 0..rounds {
            let crash = (durable > 0 && r % 2 == 0).then(|| 1 + r % durable);
            fork.run_child_with(
                &mut |k| {
                    k.set_fault_config(deja_kernel::FaultConfig {
                        crash_after_durable_write: crash,
                        ..Default::default()
                    });
                },
                &mut |_, _| {},
            )
            .map_err(|e| e.to_string())?;
            reset_ns += fork.last_reset.reset_ns;
        }
        let total = start.elapsed().as_secs_f64();
        throughput.push(serde_json::json!({
            "workload": name, "rounds": rounds, "rounds_per_s": rounds as f64 / total,
            "forks_per_s": rounds as f64 / (reset_ns as f64 / 1e9).max(1e-9),
            "fork_share": reset_ns as f64 / 1e9 / total,
        }));
    }

    // 8. The reference cluster: three register replicas and a client under random partitions;
    // the same steered rounds booted and forked; campaigns on one worker and on every core.
    let cluster = cluster_figures(&dir, repeat, settings)?;
    let root = dir.parent().and_then(Path::parent).map(Path::to_path_buf).unwrap_or_default();
    let register = root.join("examples/clusters/register-fixed.toml");
    let forked_cluster = forked_cluster_figures(&register, settings)?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let vdso = cluster::vdso_figures(&exe, &dir, repeat, settings)?;
    let late_forks = late::late_fork_figures(&exe, &dir, repeat, settings)?;
    let scale = scale_figures(&dir, &register, settings)?;
    let cluster_check = cluster_check_figures(&dir, &root.join("examples/clusters/register-buggy.toml"), settings)?;
    let history = history_figures()?;

    // 9. The whole CLI on hello, as a user runs it (including the hazard probe).
    let mut hello_times = Vec::new();
    let mut hello_native = Vec::new();
    for _ in 0..repeat {
        let start = Instant::now();
        let out = crate::settings::hand_to(&mut Command::new(&exe), settings)
            .arg("run")
            .arg(&hello)
            .output()
            .map_err(|e| e.to_string())?;
        hello_times.push(start.elapsed());
        if !out.status.success() {
            return Err(format!("deja run hello failed: {}", String::from_utf8_lossy(&out.stderr)));
        }
        hello_native.push(time_native(&hello, &[])?);
    }
    let cpuid = cpuid_cost(&exe, &dir.join("hostinfo"), repeat as usize, settings)?;
    let rewrite = rewrite_figures(&exe, &dir, repeat, settings)?;
    let block_coverage = block_coverage_figures(&dir, 10 * repeat, settings)?;
    let storage = storage_figures(&exe, &dir, settings)?;
    Ok(serde_json::json!({
        "cpuid": cpuid,
        "rewrite": rewrite,
        "block_coverage": block_coverage,
        "storage": storage,
        "schema": "deja.bench/1",
        "cpu_bound": {
            "program": "cpuburn", "million_steps": args.steps,
            "native_s": native.as_secs_f64(), "deja_s": in_deja.as_secs_f64(),
            "speed_vs_native": ratio, "target": 0.9,
        },
        "syscall_round_trip": {
            "syscalls": args.syscalls, "syscall_exits": exits, "us_per_syscall": per_syscall_us,
            "us_per_syscall_register_ioctls": per_syscall[1],
        },
        "sdk_call": {
            "calls_in_deja": args.syscalls, "us_per_call_in_deja": sdk_us,
            "calls_native": NATIVE_SDK_CALLS, "us_per_call_native": sdk_native_us,
        },
        "demand_paging": { "extra_page_faults": extra_faults, "us_per_fault_including_page_work": per_fault_us },
        "explore_throughput": throughput,
        "check": { "scenario": "credit-buggy vs credit-atomic", "verdict": judged.verdict.name(), "wall_ms": check_time.as_secs_f64() * 1e3 },
        "crash": {
            "workload": "kv --variant fixed 8", "durable_writes": durable,
            "plain_run_ms": plain_time.as_secs_f64() * 1e3,
            "crash_and_restart_ms": cycle_time.as_secs_f64() * 1e3,
            "sweep_ms": sweep_time.as_secs_f64() * 1e3,
        },
        "fork_reset": { "guest_memory_mib": 256, "rows": fork_rows },
        "cluster": cluster,
        "forked_cluster": forked_cluster,
        "vdso": vdso,
        "late_forks": late_forks,
        "scale": scale,
        "cluster_check": cluster_check,
        "history": history,
        "deja_run_hello": { "wall_ms": median(hello_times).as_secs_f64() * 1e3, "native_ms": median(hello_native).as_secs_f64() * 1e3 },
        "repeat": repeat,
    }))
}

/// The register cluster's rounds alone (`--forked-cluster-only`).
fn register_rounds(args: &BenchArgs, settings: &Settings) -> Result<serde_json::Value, String> {
    let dir = args.guests.clone().unwrap_or_else(default_guest_dir);
    let root = dir.parent().and_then(Path::parent).map(Path::to_path_buf).unwrap_or_default();
    forked_cluster_figures(&root.join("examples/clusters/register-fixed.toml"), settings)
}

/// `deja bench`, its VMs (and the `deja` processes it starts) under `settings` unless a figure
/// compares settings.
pub fn main(args: BenchArgs, settings: &Settings) -> Exit {
    let result = if args.forked_cluster_only {
        register_rounds(&args, settings)
    } else if args.late_forks_only {
        let dir = args.guests.clone().unwrap_or_else(default_guest_dir);
        let root = dir.parent().and_then(Path::parent).map(Path::to_path_buf).unwrap_or_default();
        late::campaigns(&dir, &root.join("examples/clusters/register-fixed.toml"), settings)
    } else {
        figures(&args, settings)
    };
    match result {
        Ok(v) => {
            if args.json {
                println!("{v:#}");
            } else {
                print::text(&v);
            }
            Exit::Clean
        }
        Err(e) => {
            eprintln!("deja: bench failed: {e}");
            Exit::DejaFailed
        }
    }
}
