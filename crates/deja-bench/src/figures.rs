//! Every figure of `deja bench`, in the order measured: a guest natively and in deja, syscall,
//! SDK call and page-fault round trips, fork resets, crash and restart, `deja check`,
//! exploration throughput, the cluster figures, the whole command on `hello`, then the costs of
//! CPUID faulting, rewriting and block coverage, and the storage workloads.

use std::time::{Duration, Instant};

use deja_kernel::ProgramSpec;
use deja_vmm::{BootOptions, RegisterPath};
use snafu::{ensure, ResultExt};

use crate::timing::{deja, median, named, output, run_once, spec, time_deja, time_deja_with, time_native};
use crate::{
    cluster, costs, late, storage, BenchError, BenchOptions, ChildFailedSnafu, LivesSnafu, MarksSnafu, RunSnafu,
    VerdictSnafu, VmSnafu,
};

/// SDK calls timed natively, where one call costs nanoseconds.
const NATIVE_SDK_CALLS: u64 = 20_000_000;

/// Every figure, measured under `opts`.
pub(crate) fn all(opts: &BenchOptions) -> Result<serde_json::Value, BenchError> {
    let settings = &opts.settings;
    let dir = opts.guests.as_path();
    let exe = opts.deja.as_path();
    let cpuburn = dir.join("cpuburn");
    let syscalls = dir.join("syscalls");
    let hello = dir.join("hello");
    let memhog = dir.join("memhog");
    let steps = opts.steps.to_string();
    let repeat = opts.repeat.max(1);

    // 1. CPU-bound: the same binary natively and in deja, interleaved.
    let (mut native, mut in_deja) = (Vec::new(), Vec::new());
    for _ in 0..repeat {
        native.push(time_native(&cpuburn, &[&steps])?);
        in_deja.push(time_deja(&cpuburn, &[&steps], settings)?.0);
    }
    let (native, in_deja) = (median(native), median(in_deja));
    let ratio = native.as_secs_f64() / in_deja.as_secs_f64();

    // 2. Syscall round trip: N extra syscalls against none, for both register paths.
    let n = opts.syscalls.to_string();
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
        per_syscall.push((median(many).as_secs_f64() - median(base).as_secs_f64()) * 1e6 / opts.syscalls as f64);
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
    let sdk_us = per(sdk_many, sdk_base, opts.syscalls);
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
        return MarksSnafu { found: marks.len() }.fail();
    };
    let mut fork_rows = Vec::new();
    for k in [10u64, 100, 1000, 10_000] {
        let ks = k.to_string();
        let forked = spec(&dirty, &[&ks])?;
        let what = format!("the fork of {}", named(&forked));
        let mut fork = deja_vmm::Fork::new(forked, 256 << 20, settings, fork_at, &mut |_, _| {})
            .context(RunSnafu { what: &what })?;
        let (mut resets, mut wholes, mut frames, mut resynced) = (Vec::new(), Vec::new(), 0, 0);
        for _ in 0..repeat.max(3) {
            fork.run_child_until(child_end, &mut |_, _| {}).context(RunSnafu { what: &what })?;
            let r = fork.reset().context(VmSnafu { what: "a fork's reset" })?;
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
    let quiet = |spec: ProgramSpec| -> Result<Vec<deja_vmm::Incarnation>, BenchError> {
        let what = named(&spec);
        deja_vmm::Session::boot_with(spec, deja_vmm::DEFAULT_MEMORY, BootOptions::new(*settings))
            .and_then(|mut s| s.lives(&mut |_, _| {}, None))
            .context(RunSnafu { what })
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
    ensure!(lives.len() == 2, LivesSnafu { found: lives.len() });
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
    ensure!(
        judged.verdict == deja_judge::Verdict::FixedForThisCapsule,
        VerdictSnafu { what: "deja check on credit-atomic", verdict: judged.verdict.name() }
    );

    // 7. Exploration throughput: rounds and forks per second on the reference workloads, and
    // the share of a round spent resetting the fork.
    let mut throughput = Vec::new();
    for (name, args) in [("kv", vec!["--variant", "fixed", "6"]), ("bank", vec!["20"]), ("credit-atomic", vec![])] {
        let mut traced = spec(&dir.join(name), &args)?;
        traced.record_trace = true;
        let probe = run_once(traced, deja_vmm::DEFAULT_MEMORY, settings)?;
        let fork_at = probe.report.setup_complete.as_ref().map(|s| s.syscall_index + 1).unwrap_or(0);
        let spec = spec(&dir.join(name), &args)?;
        let what = format!("the fork of {}", named(&spec));
        let mut fork = deja_vmm::Fork::new(spec, deja_vmm::DEFAULT_MEMORY, settings, fork_at, &mut |_, _| {})
            .context(RunSnafu { what: &what })?;
        let durable = probe.report.durable_writes;
        let rounds = crate::sized(opts.quick, 60);
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
            .context(RunSnafu { what: &what })?;
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
    let cluster = cluster::cluster_figures(dir, repeat, settings)?;
    let root = opts.root();
    let register = opts.register();
    let forked_cluster = cluster::forked_cluster_figures(&register, settings, opts.quick)?;
    let vdso = cluster::vdso_figures(exe, dir, repeat, settings, opts.quick)?;
    let late_forks = late::late_fork_figures(exe, dir, repeat, settings, opts.quick)?;
    let scale = cluster::scale_figures(dir, &register, settings, opts.quick)?;
    let cluster_check =
        cluster::cluster_check_figures(dir, &root.join("examples/clusters/register-buggy.toml"), settings)?;
    let history = cluster::history_figures()?;

    // 9. The whole CLI on hello, as a user runs it (including the hazard probe).
    let mut hello_times = Vec::new();
    let mut hello_native = Vec::new();
    for _ in 0..repeat {
        let start = Instant::now();
        let out = output(deja(exe, settings).arg("run").arg(&hello), exe, "deja run hello")?;
        hello_times.push(start.elapsed());
        ensure!(
            out.status.success(),
            ChildFailedSnafu { what: "deja run hello", stderr: String::from_utf8_lossy(&out.stderr) }
        );
        hello_native.push(time_native(&hello, &[])?);
    }
    let cpuid = costs::cpuid_cost(exe, &dir.join("hostinfo"), repeat as usize, settings)?;
    let rewrite = costs::rewrite_figures(exe, dir, repeat, settings)?;
    let block_coverage = costs::block_coverage_figures(dir, 10 * repeat, settings)?;
    let storage = storage::storage_figures(exe, dir, settings, opts.quick)?;
    let placement = crate::placement::figures(opts)?;
    Ok(serde_json::json!({
        "placement": placement,
        "cpuid": cpuid,
        "rewrite": rewrite,
        "block_coverage": block_coverage,
        "storage": storage,
        "schema": "deja.bench/1",
        "cpu_bound": {
            "program": "cpuburn", "million_steps": opts.steps,
            "native_s": native.as_secs_f64(), "deja_s": in_deja.as_secs_f64(),
            "speed_vs_native": ratio, "target": 0.9,
        },
        "syscall_round_trip": {
            "syscalls": opts.syscalls, "syscall_exits": exits, "us_per_syscall": per_syscall_us,
            "us_per_syscall_register_ioctls": per_syscall[1],
        },
        "sdk_call": {
            "calls_in_deja": opts.syscalls, "us_per_call_in_deja": sdk_us,
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
        "quick": opts.quick,
    }))
}
