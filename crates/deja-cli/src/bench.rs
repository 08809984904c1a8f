//! `deja bench`: deja against native execution, measured side by side in one process.
//!
//! Wall-clock time appears here and nowhere else that shapes a run: these figures describe the
//! host, not the guest.

use crate::exit::Exit;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use deja_kernel::ProgramSpec;
use deja_vmm::RegisterPath;

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
fn storage_figures(exe: &Path, dir: &Path) -> Result<serde_json::Value, String> {
    let sweep = |program: &str, args: &[&str], old: bool| -> Result<serde_json::Value, String> {
        let mut cmd = Command::new(exe);
        cmd.args(["run", "--json", "--no-probe", "--crash-sweep"]);
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
        };
        target.spec.seed = 0;
        let out = std::env::temp_dir().join(format!("deja-bench-storage-{}-{program}", std::process::id()));
        let _ = std::fs::remove_dir_all(&out);
        let rounds = 100u64;
        let cfg = campaign(rounds, &out, deja_explore::Mode::Faults, 1);
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
/// fresh processes, side by side.
fn cpuid_cost(exe: &Path, hostinfo: &Path, repeat: usize) -> Result<serde_json::Value, String> {
    let offered = deja_vmm::identity::host().map_err(|e| e.to_string())?.faulting_offered;
    if !offered {
        return Ok(serde_json::json!({ "faulting_offered": false }));
    }
    let run = |policy: &str| -> Result<(Duration, u64), String> {
        let start = Instant::now();
        let out = Command::new(exe)
            .env(deja_vmm::identity::ENV, policy)
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
        "faulting_offered": true, "cpuid_exits": exits, "faulting_ms": f, "table_ms": t,
        "us_per_cpuid": if exits > 0 { (f - t) * 1e3 / exits as f64 } else { 0.0 },
    }))
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn spec(path: &Path, args: &[&str]) -> Result<ProgramSpec, String> {
    let image = std::fs::read(path)
        .map_err(|e| format!("cannot read {}: {e} (build the guests with `cargo xtask guests`)", path.display()))?;
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    Ok(ProgramSpec::for_program(image, &name, args.iter().map(|s| s.to_string()), 1))
}

/// One life of `spec` in a fresh session.
fn run_once(spec: ProgramSpec, memory: u64) -> Result<deja_vmm::Run, String> {
    deja_vmm::Session::boot(spec, memory).and_then(|mut s| s.run(&mut |_, _| {})).map_err(|e| e.to_string())
}

fn time_deja(path: &Path, args: &[&str]) -> Result<(Duration, deja_vmm::Run), String> {
    time_deja_with(path, args, RegisterPath::SyncRegs)
}

fn time_deja_with(path: &Path, args: &[&str], regs: RegisterPath) -> Result<(Duration, deja_vmm::Run), String> {
    let spec = spec(path, args)?;
    let start = Instant::now();
    let opts = deja_vmm::BootOptions { register_path: regs, ..Default::default() };
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

fn figures(args: &BenchArgs) -> Result<serde_json::Value, String> {
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
        in_deja.push(time_deja(&cpuburn, &[&steps])?.0);
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
            base.push(time_deja_with(&syscalls, &["0"], regs)?.0);
            let (t, run) = time_deja_with(&syscalls, &[&n], regs)?;
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
        sdk_base.push(time_deja(&syscalls, &["0", "sdk"])?.0);
        sdk_many.push(time_deja(&syscalls, &[&n, "sdk"])?.0);
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
        let (t0, r0) = time_deja(&memhog, &["1"])?;
        let (t1, r1) = time_deja(&memhog, &["64"])?;
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
    let probe_run = run_once(traced, 256 << 20)?;
    let marks: Vec<u64> = probe_run.report.trace.iter().filter(|e| e.name == "sched_yield").map(|e| e.index).collect();
    let [fork_at, child_end] = marks[..] else {
        return Err(format!("the dirty guest made {} marks instead of 2", marks.len()));
    };
    let mut fork_rows = Vec::new();
    for k in [10u64, 100, 1000, 10_000] {
        let ks = k.to_string();
        let mut fork = deja_vmm::Fork::new(spec(&dirty, &[&ks])?, 256 << 20, fork_at, &mut |_, _| {})
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
        deja_vmm::Session::boot(spec, deja_vmm::DEFAULT_MEMORY)
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
        base: deja_judge::Program {
            path: dir.join("credit-buggy").display().to_string(),
            image: std::fs::read(dir.join("credit-buggy")).map_err(std::sync::Arc::new),
        },
        candidate: deja_judge::Program {
            path: dir.join(cand).display().to_string(),
            image: std::fs::read(dir.join(cand)).map_err(std::sync::Arc::new),
        },
        corrected: None,
        capsule: None,
        args: vec![],
        env: vec![],
        seed: 0,
        memory_mib: 1024,
        max_kill_points: 500,
        states_per_point: 8,
        worlds: 3,
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
        let probe = run_once(traced, deja_vmm::DEFAULT_MEMORY)?;
        let fork_at = probe.report.setup_complete.as_ref().map(|s| s.syscall_index + 1).unwrap_or(0);
        let mut fork =
            deja_vmm::Fork::new(spec(&dir.join(name), &args)?, deja_vmm::DEFAULT_MEMORY, fork_at, &mut |_, _| {})
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
    let cluster = cluster_figures(&dir, repeat)?;
    let root = dir.parent().and_then(Path::parent).map(Path::to_path_buf).unwrap_or_default();
    let register = root.join("examples/clusters/register-fixed.toml");
    let forked_cluster = forked_cluster_figures(&register)?;
    let scale = scale_figures(&dir, &register)?;
    let cluster_check = cluster_check_figures(&dir, &root.join("examples/clusters/register-buggy.toml"))?;
    let history = history_figures()?;

    // 9. The whole CLI on hello, as a user runs it (including the hazard probe).
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut hello_times = Vec::new();
    let mut hello_native = Vec::new();
    for _ in 0..repeat {
        let start = Instant::now();
        let out = Command::new(&exe).arg("run").arg(&hello).output().map_err(|e| e.to_string())?;
        hello_times.push(start.elapsed());
        if !out.status.success() {
            return Err(format!("deja run hello failed: {}", String::from_utf8_lossy(&out.stderr)));
        }
        hello_native.push(time_native(&hello, &[])?);
    }
    let cpuid = cpuid_cost(&exe, &dir.join("hostinfo"), repeat as usize)?;
    let storage = storage_figures(&exe, &dir)?;
    Ok(serde_json::json!({
        "cpuid": cpuid,
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
        "scale": scale,
        "cluster_check": cluster_check,
        "history": history,
        "deja_run_hello": { "wall_ms": median(hello_times).as_secs_f64() * 1e3, "native_ms": median(hello_native).as_secs_f64() * 1e3 },
        "repeat": repeat,
    }))
}

/// `deja check` on the register cluster: a split brain found by exploring `register-buggy`,
/// judged against the patched replicas (they must be `FIXED_FOR_THIS_CAPSULE`).
fn cluster_check_figures(dir: &Path, buggy: &Path) -> Result<serde_json::Value, String> {
    let out = std::env::temp_dir().join(format!("deja-bench-cluster-check-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let base = deja_explore::ClusterTarget::load(buggy).map_err(|e| e.to_string())?;
    let cfg =
        deja_explore::CampaignConfig { stop_at_first_bug: true, ..campaign(40, &out, deja_explore::Mode::Faults, 1) };
    let start = Instant::now();
    let c = deja_explore::explore_cluster(&base, &cfg, &mut |_| {}).map_err(|e| e.to_string())?;
    let explore_s = start.elapsed().as_secs_f64();
    let found = c.bugs.first().ok_or("exploring register-buggy for 40 rounds found no split brain")?;
    let bug = deja_explore::ClusterBug::read(&out.join(&found.file)).map_err(|e| e.to_string())?;
    let patched = dir.join("register-replica-patched").display().to_string();
    let spec = format!("r1={patched},r2={patched},r3={patched}");
    let check = deja_judge::cluster::ClusterCheck {
        candidate: deja_judge::cluster::candidate_nodes(&spec, &base),
        bug,
        base,
        worlds: 3,
    };
    let start = Instant::now();
    let judged = deja_judge::cluster::check_cluster(&check);
    let check_s = start.elapsed().as_secs_f64();
    let _ = std::fs::remove_dir_all(&out);
    if judged.verdict != deja_judge::Verdict::FixedForThisCapsule {
        return Err(format!("deja check of the patched replicas gave {}", judged.verdict.name()));
    }
    Ok(serde_json::json!({
        "file": buggy.display().to_string(), "found_in_rounds": found.first_round, "explore_s": explore_s,
        "candidate": "register-replica-patched", "worlds": 3, "verdict": judged.verdict.name(),
        "checks": judged.certificate.checks.len(), "wall_s": check_s,
    }))
}

/// A linearizable history of `n` operations on the kv model: 8 keys, writes and reads, each
/// operation's interval spread around its place in one sequential order so that about
/// `overlap` operations are in flight at once.
fn kv_history(n: usize, overlap: u64) -> deja_history::History {
    use deja_history::{End, History, Model, Op};
    let mut x = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move || {
        // splitmix64: a fixed, seedless sequence (the figures must not depend on the host).
        x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let step = 1_000_000u64;
    let mut state = std::collections::BTreeMap::new();
    let mut ops = (0..n as u64)
        .map(|i| {
            let key = format!("k{}", next() % 8);
            let at = (i + overlap) * step;
            let (before, after) = (next() % (overlap * step), next() % (overlap * step));
            let (f, value, ret) = if next() % 2 == 0 {
                state.insert(key.clone(), i);
                ("write", serde_json::json!(i), serde_json::Value::Null)
            } else {
                (
                    "read",
                    serde_json::Value::Null,
                    state.get(&key).map_or(serde_json::Value::Null, |v| serde_json::json!(v)),
                )
            };
            Op {
                process: format!("c{}", i % 8),
                f: f.into(),
                key: Some(key),
                value,
                invoke_ns: at - before,
                end: End::Ok { at_ns: at + after, value: ret },
            }
        })
        .collect::<Vec<_>>();
    ops.sort_by_key(|o| o.invoke_ns);
    History { model: Model::Kv, ops }
}

/// The history checker's time on linearizable kv histories of 100, 1,000 and 10,000
/// operations (the median of three checks each).
fn history_figures() -> Result<serde_json::Value, String> {
    let mut rows = Vec::new();
    for n in [100usize, 1_000, 10_000] {
        let h = kv_history(n, 4);
        let mut times = Vec::new();
        for _ in 0..3 {
            let start = Instant::now();
            let v = deja_history::check(&h, deja_history::DEFAULT_BUDGET);
            times.push(start.elapsed());
            if !matches!(v, deja_history::Verdict::Linearizable { .. }) {
                return Err(format!("the generated history of {n} operations was judged {v:?}"));
            }
        }
        let t = median(times);
        rows.push(serde_json::json!({
            "operations": n, "model": "kv", "keys": 8, "in_flight": 4,
            "ms": t.as_secs_f64() * 1e3, "us_per_operation": t.as_secs_f64() * 1e6 / n as f64,
        }));
    }
    Ok(serde_json::json!({ "rows": rows }))
}

/// The register cluster's rounds booted from scratch against the same rounds forked from the
/// point where every node called `setup_complete`: each pair must give the same digest.
fn forked_cluster_figures(file: &Path) -> Result<serde_json::Value, String> {
    use deja_cluster::{Fork, RunOptions, SteerAt, Steering};
    let cfg = deja_cluster::ClusterConfig::load(file).map_err(|e| e.to_string())?;
    let rounds = 12u64;
    let steering = |k: u64| Steering { at: SteerAt::Setup, reseed: Some(1000 + k), ..Steering::default() };
    let start = Instant::now();
    let mut booted = Vec::new();
    for k in 0..rounds {
        let r = deja_cluster::run(
            cfg.clone(),
            RunOptions { sink: &mut |_, _, _| {}, steering: steering(k), record_trace: false },
        )
        .map_err(|e| e.to_string())?;
        booted.push(r.digest);
    }
    let booted_s = start.elapsed().as_secs_f64();
    let start = Instant::now();
    let mut fork = Fork::new(cfg.clone(), SteerAt::Setup, &mut |_, _, _| {})
        .map_err(|e| e.to_string())?
        .ok_or("the register cluster never had every node call setup_complete")?;
    let fork_s = start.elapsed().as_secs_f64();
    let (mut reset_ns, mut frames, mut resets) = (0u64, 0u64, 0u64);
    let start = Instant::now();
    for k in 0..rounds {
        let r = fork.run_child(&steering(k), &mut |_, _, _| {}).map_err(|e| e.to_string())?;
        if r.digest != booted[k as usize] {
            return Err(format!(
                "forked round {k} gave digest {} where the booted one gave {}",
                r.digest, booted[k as usize]
            ));
        }
        for s in fork.last_reset.nodes.iter().flatten() {
            reset_ns += s.reset_ns;
            frames += s.dirty_frames;
            resets += 1;
        }
    }
    let forked_s = start.elapsed().as_secs_f64();
    Ok(serde_json::json!({
        "file": file.display().to_string(), "rounds": rounds, "nodes": cfg.nodes.len(),
        "fork_point_virtual_ms": fork.virtual_time_ns as f64 / 1e6,
        "booted_rounds_per_s": rounds as f64 / booted_s, "forked_rounds_per_s": rounds as f64 / forked_s,
        "speedup": booted_s / forked_s, "fork_setup_s": fork_s,
        "us_per_node_reset": reset_ns as f64 / 1e3 / resets.max(1) as f64,
        "frames_per_node_reset": frames as f64 / resets.max(1) as f64,
        "digests_compared": rounds,
    }))
}

/// A coverage-guided campaign of `rounds` rounds from seed 1, written under `out`.
fn campaign(rounds: u64, out: &Path, mode: deja_explore::Mode, jobs: u64) -> deja_explore::CampaignConfig {
    deja_explore::CampaignConfig {
        runs: Some(rounds),
        budget: None,
        seed: 1,
        out: out.to_path_buf(),
        resume: false,
        strategy: deja_explore::Strategy::Coverage,
        mode,
        stop_at_first_bug: false,
        jobs,
        shard: None,
    }
}

/// Campaign rounds per second on one worker and on every core, side by side, per reference
/// workload.
fn scale_figures(dir: &Path, register: &Path) -> Result<serde_json::Value, String> {
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) as u64;
    let workloads: [(&str, Vec<&str>, deja_explore::Mode, u64); 3] = [
        ("kv", vec!["--variant", "fixed", "6"], deja_explore::Mode::Faults, 480),
        ("bank", vec!["--fraud", "fixed", "20"], deja_explore::Mode::Random, 400),
        ("register (cluster)", vec![], deja_explore::Mode::Faults, 48),
    ];
    let mut rows = Vec::new();
    for (name, args, mode, rounds) in workloads {
        let mut rate = Vec::new();
        for jobs in [1, cores] {
            let out = std::env::temp_dir().join(format!("deja-bench-scale-{}-{jobs}", std::process::id()));
            let _ = std::fs::remove_dir_all(&out);
            let cfg = campaign(rounds, &out, mode, jobs);
            let start = Instant::now();
            let c = if name.starts_with("register") {
                let target = deja_explore::ClusterTarget::load(register).map_err(|e| e.to_string())?;
                deja_explore::explore_cluster(&target, &cfg, &mut |_| {})
            } else {
                let path = dir.join(name);
                let target = deja_explore::Target {
                    spec: spec(&path, &args)?,
                    memory: deja_vmm::DEFAULT_MEMORY,
                    path: path.display().to_string(),
                };
                deja_explore::explore(&target, &cfg, &mut |_| {})
            }
            .map_err(|e| e.to_string())?;
            let secs = start.elapsed().as_secs_f64();
            let _ = std::fs::remove_dir_all(&out);
            if c.rounds != rounds {
                return Err(format!("the {name} campaign on {jobs} workers ran {} rounds of {rounds}", c.rounds));
            }
            rate.push(rounds as f64 / secs);
        }
        rows.push(serde_json::json!({
            "workload": name, "rounds": rounds, "one_worker_rounds_per_s": rate[0],
            "workers": cores, "all_workers_rounds_per_s": rate[1], "speedup": rate[1] / rate[0],
        }));
    }
    Ok(serde_json::json!({ "cores": cores, "rows": rows }))
}

/// The reference cluster's figures (the run with the median wall time of `repeat`).
fn cluster_figures(guests: &Path, repeat: u32) -> Result<serde_json::Value, String> {
    let file = guests
        .parent()
        .and_then(Path::parent)
        .map(|root| root.join("examples/clusters/register-fixed.toml"))
        .filter(|p| p.exists())
        .ok_or_else(|| format!("examples/clusters/register-fixed.toml not found next to {}", guests.display()))?;
    let mut runs = Vec::new();
    for _ in 0..repeat {
        let cfg = deja_cluster::ClusterConfig::load(&file).map_err(|e| e.to_string())?;
        let r = deja_cluster::run(
            cfg,
            deja_cluster::RunOptions {
                sink: &mut |_: &str, _: deja_kernel::Stream, _: &[u8]| {},
                steering: Default::default(),
                record_trace: false,
            },
        )
        .map_err(|e| e.to_string())?;
        if r.outcome != deja_cluster::Outcome::Completed {
            return Err(format!("the reference cluster did not complete: {:?}", r.outcome));
        }
        runs.push(r);
    }
    runs.sort_by_key(|r| r.wall_ns);
    let r = &runs[runs.len() / 2];
    let wall = r.wall_ns as f64;
    let host_run: f64 = r.nodes.iter().map(|n| n.host_run_ns as f64).sum();
    let exits: u64 = r.nodes.iter().map(|n| n.vm_exits).sum();
    // The fastest stint of any node, per exit: an upper bound of one exit's round trip.
    let per_exit = r.nodes.iter().map(|n| n.min_exit_ns).filter(|&n| n > 0).min().unwrap_or(0) as f64;
    let exit_ns = (exits as f64 * per_exit).min(host_run);
    Ok(serde_json::json!({
        "file": "examples/clusters/register-fixed.toml",
        "virtual_s": r.virtual_time_ns as f64 / 1e9,
        "wall_s": wall / 1e9,
        "simulated_s_per_wall_s": r.virtual_time_ns as f64 / wall,
        "syscalls": r.syscalls(),
        "syscalls_per_s": r.syscalls() as f64 / (wall / 1e9),
        "vm_exits": exits,
        "us_per_exit_estimate": per_exit / 1e3,
        "guest_share": (host_run - exit_ns) / wall,
        "exit_share": exit_ns / wall,
        "monitor_share": (wall - host_run).max(0.0) / wall,
    }))
}

/// `deja bench`.
pub fn main(args: BenchArgs) -> Exit {
    match figures(&args) {
        Ok(v) => {
            if args.json {
                println!("{v:#}");
            } else {
                let c = &v["cpu_bound"];
                println!("deja bench (median of {} runs each, measured side by side)", v["repeat"]);
                println!(
                    "  cpu-bound  cpuburn {}M steps: native {:.3} s, deja {:.3} s, speed {:.3}x native (target >= 0.9x)",
                    c["million_steps"],
                    c["native_s"].as_f64().unwrap_or(0.0),
                    c["deja_s"].as_f64().unwrap_or(0.0),
                    c["speed_vs_native"].as_f64().unwrap_or(0.0)
                );
                let s = &v["syscall_round_trip"];
                println!(
                    "  syscall    round trip: {:.1} us per syscall with sync regs (used), {:.1} us with register ioctls ({} syscalls)",
                    s["us_per_syscall"].as_f64().unwrap_or(0.0),
                    s["us_per_syscall_register_ioctls"].as_f64().unwrap_or(0.0),
                    s["syscalls"]
                );
                let k = &v["sdk_call"];
                println!(
                    "  sdk        assert_always!: {:.1} us per call in deja, {:.4} us natively (SDK evaluates locally)",
                    k["us_per_call_in_deja"].as_f64().unwrap_or(0.0),
                    k["us_per_call_native"].as_f64().unwrap_or(0.0)
                );
                let d = &v["demand_paging"];
                println!(
                    "  paging     {:.1} us per demand-paging fault (64 KiB mapped per fault, {} faults)",
                    d["us_per_fault_including_page_work"].as_f64().unwrap_or(0.0),
                    d["extra_page_faults"]
                );
                println!("  fork       reset to the parent vs whole-memory restore, 256 MiB guest:");
                for row in v["fork_reset"]["rows"].as_array().into_iter().flatten() {
                    println!(
                        "             {:>6} pages dirtied: reset {:>9.1} us ({} frames rewritten, {} entries resynced), whole restore {:>9.1} us, {:.0}x",
                        row["dirtied_pages"],
                        row["reset_us"].as_f64().unwrap_or(0.0),
                        row["frames_rewritten"],
                        row["entries_resynced"],
                        row["whole_memory_restore_us"].as_f64().unwrap_or(0.0),
                        row["speedup"].as_f64().unwrap_or(0.0)
                    );
                }
                let c = &v["crash"];
                println!(
                    "  crash      kv (fixed, 8 puts, {} durable writes): run {:.1} ms, crash + restart {:.1} ms, whole sweep {:.0} ms",
                    c["durable_writes"],
                    c["plain_run_ms"].as_f64().unwrap_or(0.0),
                    c["crash_and_restart_ms"].as_f64().unwrap_or(0.0),
                    c["sweep_ms"].as_f64().unwrap_or(0.0)
                );
                for t in v["explore_throughput"].as_array().into_iter().flatten() {
                    println!(
                        "  explore    {:<14} {:>6.1} rounds/s, {:>8.0} forks/s, {:>4.1}% of a round spent resetting the fork",
                        t["workload"].as_str().unwrap_or(""),
                        t["rounds_per_s"].as_f64().unwrap_or(0.0),
                        t["forks_per_s"].as_f64().unwrap_or(0.0),
                        100.0 * t["fork_share"].as_f64().unwrap_or(0.0)
                    );
                }
                let f = &v["forked_cluster"];
                println!(
                    "  cluster    {} rounds of {} ({} nodes) steered the same way: booted {:.1} rounds/s, forked at setup ({:.0} ms virtual) {:.1} rounds/s: {:.1}x, same digests; a node's reset {:.0} us ({:.0} frames)",
                    f["rounds"],
                    f["file"].as_str().unwrap_or("").rsplit('/').next().unwrap_or(""),
                    f["nodes"],
                    f["booted_rounds_per_s"].as_f64().unwrap_or(0.0),
                    f["fork_point_virtual_ms"].as_f64().unwrap_or(0.0),
                    f["forked_rounds_per_s"].as_f64().unwrap_or(0.0),
                    f["speedup"].as_f64().unwrap_or(0.0),
                    f["us_per_node_reset"].as_f64().unwrap_or(0.0),
                    f["frames_per_node_reset"].as_f64().unwrap_or(0.0)
                );
                for r in v["scale"]["rows"].as_array().into_iter().flatten() {
                    println!(
                        "  workers    {:<18} {} rounds: 1 worker {:>6.1} rounds/s, {} workers {:>6.1} rounds/s: {:.2}x",
                        r["workload"].as_str().unwrap_or(""),
                        r["rounds"],
                        r["one_worker_rounds_per_s"].as_f64().unwrap_or(0.0),
                        r["workers"],
                        r["all_workers_rounds_per_s"].as_f64().unwrap_or(0.0),
                        r["speedup"].as_f64().unwrap_or(0.0)
                    );
                }
                let j = &v["check"];
                println!(
                    "  check      `deja check` credit-buggy vs credit-atomic: {:.0} ms ({})",
                    j["wall_ms"].as_f64().unwrap_or(0.0),
                    j["verdict"].as_str().unwrap_or("")
                );
                let j = &v["cluster_check"];
                println!(
                    "  check      `deja check` of a split brain in register-buggy (found in round {}, {:.1} s) against the patched replicas: {:.1} s for {} checks in {} worlds ({})",
                    j["found_in_rounds"],
                    j["explore_s"].as_f64().unwrap_or(0.0),
                    j["wall_s"].as_f64().unwrap_or(0.0),
                    j["checks"],
                    j["worlds"],
                    j["verdict"].as_str().unwrap_or("")
                );
                for r in v["history"]["rows"].as_array().into_iter().flatten() {
                    println!(
                        "  history    linearizability of {:>6} kv operations ({} keys, {} in flight): {:>8.2} ms ({:.1} us per operation)",
                        r["operations"],
                        r["keys"],
                        r["in_flight"],
                        r["ms"].as_f64().unwrap_or(0.0),
                        r["us_per_operation"].as_f64().unwrap_or(0.0)
                    );
                }
                let c = &v["cluster"];
                println!(
                    "  cluster    {}: {:.1} simulated s per wall s, {:.0} syscalls/s ({:.2} s virtual in {:.3} s wall, {} syscalls)",
                    c["file"].as_str().unwrap_or(""),
                    c["simulated_s_per_wall_s"].as_f64().unwrap_or(0.0),
                    c["syscalls_per_s"].as_f64().unwrap_or(0.0),
                    c["virtual_s"].as_f64().unwrap_or(0.0),
                    c["wall_s"].as_f64().unwrap_or(0.0),
                    c["syscalls"]
                );
                println!(
                    "             time: {:.0}% guest code, {:.0}% VM exits (estimated: {} exits x {:.1} us), {:.0}% monitor and scheduler",
                    100.0 * c["guest_share"].as_f64().unwrap_or(0.0),
                    100.0 * c["exit_share"].as_f64().unwrap_or(0.0),
                    c["vm_exits"],
                    c["us_per_exit_estimate"].as_f64().unwrap_or(0.0),
                    100.0 * c["monitor_share"].as_f64().unwrap_or(0.0)
                );
                for r in v["storage"]["rows"].as_array().into_iter().flatten() {
                    let line = |w: &serde_json::Value| {
                        format!(
                            "{} points, {} states tried ({:.0}/s), {:.2} distinct per point, {} restarts, {:.2} s, {}",
                            w["crash_points"],
                            w["states_tried"],
                            w["states_per_s"].as_f64().unwrap_or(0.0),
                            w["distinct_per_point"].as_f64().unwrap_or(0.0),
                            w["restarts"],
                            w["wall_s"].as_f64().unwrap_or(0.0),
                            w["verdict"].as_str().unwrap_or("")
                        )
                    };
                    println!(
                        "  storage    {:<16} crash states: {}",
                        r["workload"].as_str().unwrap_or(""),
                        line(&r["states"])
                    );
                    println!("             {:<16} after writes only: {}", "", line(&r["after_writes_only"]));
                    println!(
                        "             {:<16} explore, whole fault menu: {:.1} rounds/s",
                        "",
                        r["explore_rounds_per_s_full_menu"].as_f64().unwrap_or(0.0)
                    );
                }
                let c = &v["cpuid"];
                if c["faulting_offered"] == true {
                    println!(
                        "  cpuid      `deja run hostinfo` ({} cpuid traps): {:.1} ms with CPUID faulting, {:.1} ms with KVM's table, {:.1} us per trapped cpuid",
                        c["cpuid_exits"],
                        c["faulting_ms"].as_f64().unwrap_or(0.0),
                        c["table_ms"].as_f64().unwrap_or(0.0),
                        c["us_per_cpuid"].as_f64().unwrap_or(0.0)
                    );
                } else {
                    println!("  cpuid      this host offers no CPUID faulting: CPUID comes from KVM's table");
                }
                let h = &v["deja_run_hello"];
                println!(
                    "  startup    `deja run hello`: {:.1} ms wall (native hello {:.1} ms)",
                    h["wall_ms"].as_f64().unwrap_or(0.0),
                    h["native_ms"].as_f64().unwrap_or(0.0)
                );
            }
            Exit::Clean
        }
        Err(e) => {
            eprintln!("deja: bench failed: {e}");
            Exit::DejaFailed
        }
    }
}
