//! `deja bench`'s figures for clusters and histories: the reference cluster, booted against
//! forked rounds, with deja's vDSO off and on, campaigns on one worker against every core,
//! cluster `deja check`, and the history checker.

use std::path::{Path, PathBuf};
use std::time::Instant;

use deja_vmm::Settings;
use serde_json::Value;
use snafu::{ensure, OptionExt, ResultExt};

use crate::timing::{deja, median, median_f64, output, spec};
use crate::{
    BenchError, ChildFailedSnafu, ClusterFileSnafu, ClusterSnafu, DigestSnafu, ExploreSnafu, HistorySnafu,
    IncompleteSnafu, NoClusterFileSnafu, NoReportSnafu, NoSetupSnafu, NoSplitBrainSnafu, RoundsSnafu, VerdictSnafu,
    VmSnafu,
};

/// The cluster file at `path`, under `settings`.
fn load(path: &Path, settings: &Settings) -> Result<deja_cluster::ClusterConfig, BenchError> {
    let mut cfg = deja_cluster::ClusterConfig::load(path).context(ClusterFileSnafu { path })?;
    cfg.settings = *settings;
    Ok(cfg)
}

/// The cluster file at `path` as a campaign's target.
fn target(path: &Path) -> Result<deja_explore::ClusterTarget, BenchError> {
    deja_explore::ClusterTarget::load(path).with_context(|_| ExploreSnafu { what: path.display().to_string() })
}

/// `deja check` on the register cluster: a split brain found by exploring `register-buggy`,
/// judged against the patched replicas (they must be `FIXED_FOR_THIS_CAPSULE`).
pub(crate) fn cluster_check_figures(dir: &Path, buggy: &Path, settings: &Settings) -> Result<Value, BenchError> {
    let out = std::env::temp_dir().join(format!("deja-bench-cluster-check-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let mut base = target(buggy)?;
    base.cfg.settings = *settings;
    let cfg = deja_explore::CampaignConfig {
        stop_at_first_bug: true,
        ..campaign(40, &out, deja_explore::Mode::Faults, 1, settings)
    };
    let start = Instant::now();
    let c = deja_explore::explore_cluster(&base, &cfg, &mut |_| {})
        .context(ExploreSnafu { what: "the register-buggy campaign" })?;
    let explore_s = start.elapsed().as_secs_f64();
    let found = c.bugs.first().context(NoSplitBrainSnafu)?;
    let file = out.join(&found.file);
    let bug =
        deja_explore::ClusterBug::read(&file).with_context(|_| ExploreSnafu { what: file.display().to_string() })?;
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
    ensure!(
        judged.verdict == deja_judge::Verdict::FixedForThisCapsule,
        VerdictSnafu { what: "deja check of the patched replicas", verdict: judged.verdict.name() }
    );
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
                ("write", serde_json::json!(i), Value::Null)
            } else {
                ("read", Value::Null, state.get(&key).map_or(Value::Null, |v| serde_json::json!(v)))
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
pub(crate) fn history_figures() -> Result<Value, BenchError> {
    let mut rows = Vec::new();
    for n in [100usize, 1_000, 10_000] {
        let h = kv_history(n, 4);
        let mut times = Vec::new();
        for _ in 0..3 {
            let start = Instant::now();
            let v = deja_history::check(&h, deja_history::DEFAULT_BUDGET);
            times.push(start.elapsed());
            ensure!(
                matches!(v, deja_history::Verdict::Linearizable { .. }),
                HistorySnafu { operations: n, verdict: format!("{v:?}") }
            );
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
pub(crate) fn forked_cluster_figures(file: &Path, settings: &Settings, quick: bool) -> Result<Value, BenchError> {
    use deja_cluster::{Fork, RunOptions, SteerAt, Steering};
    let cfg = load(file, settings)?;
    let rounds = crate::sized(quick, 12);
    let steering = |k: u64| Steering { at: SteerAt::Setup, reseed: Some(1000 + k), ..Steering::default() };
    let start = Instant::now();
    let mut booted = Vec::new();
    // Exits by kind over the booted rounds: every syscall, the clock reads among them, and the
    // clock reads the vDSO served without one.
    let (mut syscalls, mut clock_syscalls, mut vdso_calls, mut exits) = (0u64, 0u64, 0u64, 0u64);
    for k in 0..rounds {
        let r = deja_cluster::run(
            cfg.clone(),
            RunOptions { sink: &mut |_, _, _| {}, steering: steering(k), record_trace: false },
        )
        .context(ClusterSnafu { what: "a booted round of the register cluster" })?;
        for n in &r.nodes {
            exits += n.vm_exits;
            for l in &n.lives {
                syscalls += l.syscalls;
                clock_syscalls += ["clock_gettime", "gettimeofday", "time"]
                    .iter()
                    .map(|c| l.syscall_counts.get(*c).copied().unwrap_or(0))
                    .sum::<u64>();
                vdso_calls += l.vdso_calls.unwrap_or(0);
            }
        }
        booted.push(r.digest);
    }
    let booted_s = start.elapsed().as_secs_f64();
    let start = Instant::now();
    let mut fork = Fork::new(cfg.clone(), SteerAt::Setup, &mut |_, _, _| {})
        .context(ClusterSnafu { what: "the fork of the register cluster" })?
        .context(NoSetupSnafu)?;
    let fork_s = start.elapsed().as_secs_f64();
    let (mut reset_ns, mut frames, mut resets) = (0u64, 0u64, 0u64);
    // Where the forked rounds' wall time went (this process's counters over them alone):
    // inside KVM_RUN, in deja's syscall and exception handling (per syscall name), in resets;
    // the rest is the cluster driver's.
    let profiled = deja_vmm::profile::snapshot();
    let start = Instant::now();
    for k in 0..rounds {
        let r = fork
            .run_child(&steering(k), &mut |_, _, _| {})
            .context(ClusterSnafu { what: "a forked round of the register cluster" })?;
        ensure!(
            r.digest == booted[k as usize],
            DigestSnafu { round: k, forked: r.digest.clone(), booted: booted[k as usize].clone() }
        );
        for s in fork.last_reset.nodes.iter().flatten() {
            reset_ns += s.reset_ns;
            frames += s.dirty_frames;
            resets += 1;
        }
    }
    let forked_s = start.elapsed().as_secs_f64();
    let p = deja_vmm::profile::snapshot().since(&profiled);
    let (kvm_ns, forked_exits) = (p.kvm_run_ns, p.exits);
    let wall_ns = forked_s * 1e9;
    let share = |ns: u64| ns as f64 / wall_ns;
    let top: Vec<Value> = p
        .by_syscall
        .iter()
        .take(5)
        .map(|(name, count, ns)| {
            serde_json::json!({ "syscall": name, "count": count, "share": share(*ns), "us_each": *ns as f64 / 1e3 / (*count).max(1) as f64 })
        })
        .collect();
    let other = wall_ns - (kvm_ns + p.syscall_ns + p.exception_ns + p.reset_ns) as f64;
    // What a round would cost where an exit's round trip is 1 µs: KVM_RUN time beyond 1 µs per
    // exit is the nested hypervisor's (guest code is in it too, so this is a bound).
    let bare_ns = wall_ns - kvm_ns as f64 + forked_exits as f64 * 1e3;
    let time_split = serde_json::json!({
        "round_ms": wall_ns / 1e6 / rounds as f64,
        "kvm_run": share(kvm_ns), "syscalls": share(p.syscall_ns), "exceptions": share(p.exception_ns),
        "resets": share(p.reset_ns), "driver_and_rest": other / wall_ns,
        "exits_per_round": forked_exits / rounds, "kvm_run_us_per_exit": kvm_ns as f64 / 1e3 / forked_exits.max(1) as f64,
        "top_syscalls": top,
        "rounds_per_s_with_1us_exits_at_most": rounds as f64 / (bare_ns / 1e9),
    });
    Ok(serde_json::json!({
        "time_split": time_split,
        "file": file.display().to_string(), "rounds": rounds, "nodes": cfg.nodes.len(),
        "fork_point_virtual_ms": fork.virtual_time_ns as f64 / 1e6,
        "booted_rounds_per_s": rounds as f64 / booted_s, "forked_rounds_per_s": rounds as f64 / forked_s,
        "speedup": booted_s / forked_s, "fork_setup_s": fork_s,
        "us_per_node_reset": reset_ns as f64 / 1e3 / resets.max(1) as f64,
        "frames_per_node_reset": frames as f64 / resets.max(1) as f64,
        "digests_compared": rounds,
        "vdso": settings.vdso,
        "exits": exits, "syscalls": syscalls, "clock_syscalls": clock_syscalls, "vdso_calls": vdso_calls,
        "clock_share_of_syscalls": clock_syscalls as f64 / syscalls.max(1) as f64,
    }))
}

/// `deja bench <part> --json` in a process of `exe` of its own with `DEJA_VDSO=<setting>`
/// (otherwise under `settings`): one part of the figures (`--forked-cluster-only`,
/// `--late-forks-only`), under one vDSO setting, `--quick` when `quick`.
fn bench_with_vdso(
    exe: &Path,
    guests: &Path,
    part: &str,
    setting: &str,
    settings: &Settings,
    quick: bool,
) -> Result<Value, BenchError> {
    let what = format!("deja bench {part} (vDSO {setting})");
    let mut cmd = deja(exe, settings);
    cmd.env(deja_vmm::identity::VDSO_ENV, setting).args(["bench", part, "--json", "--guests"]).arg(guests);
    if quick {
        cmd.arg("--quick");
    }
    let out = output(&mut cmd, exe, &what)?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(out.status.success(), ChildFailedSnafu { what: &what, stderr: &*stderr });
    serde_json::from_slice(&out.stdout).context(NoReportSnafu { what: &what, stderr: &*stderr })
}

/// The register cluster's rounds with deja's vDSO off and on, each in a process of its own
/// (each setting measured alone, from a fresh process): `deja bench --forked-cluster-only`
/// under `DEJA_VDSO=off` and `on`, alternated `repeat` times; the medians side by side.
pub(crate) fn vdso_figures(
    exe: &Path,
    guests: &Path,
    repeat: u32,
    settings: &Settings,
    quick: bool,
) -> Result<Value, BenchError> {
    let (off, on) = vdso_off_on(exe, guests, "--forked-cluster-only", repeat, settings, quick)?;
    Ok(vdso_summary(repeat, &off, &on))
}

/// [`bench_with_vdso`] of `part` with the vDSO off, then on, alternated `repeat` times (at
/// least once): each setting's figures, in order.
pub(crate) fn vdso_off_on(
    exe: &Path,
    guests: &Path,
    part: &str,
    repeat: u32,
    settings: &Settings,
    quick: bool,
) -> Result<(Vec<Value>, Vec<Value>), BenchError> {
    let (mut off, mut on) = (Vec::new(), Vec::new());
    for _ in 0..repeat.max(1) {
        off.push(bench_with_vdso(exe, guests, part, "off", settings, quick)?);
        on.push(bench_with_vdso(exe, guests, part, "on", settings, quick)?);
    }
    Ok((off, on))
}

/// The vDSO figures from the forked-cluster figures of each run with it `off` and `on` (as
/// many of each, at least one): the medians of each side's rates, its first run's counts, and
/// what the vDSO gives.
fn vdso_summary(repeat: u32, off: &[Value], on: &[Value]) -> Value {
    let median_of = |v: &[Value], key: &str| median_f64(v.iter().map(|r| r[key].as_f64().unwrap_or(0.0)).collect());
    let side = |v: &[Value]| {
        serde_json::json!({
            "booted_rounds_per_s": median_of(v, "booted_rounds_per_s"),
            "forked_rounds_per_s": median_of(v, "forked_rounds_per_s"),
            "exits": v[0]["exits"], "syscalls": v[0]["syscalls"], "clock_syscalls": v[0]["clock_syscalls"],
            "vdso_calls": v[0]["vdso_calls"], "clock_share_of_syscalls": v[0]["clock_share_of_syscalls"],
            "digests_compared": v[0]["digests_compared"],
        })
    };
    let (off, on) = (side(off), side(on));
    let speedup = |key: &str| on[key].as_f64().unwrap_or(0.0) / off[key].as_f64().unwrap_or(1.0).max(1e-9);
    serde_json::json!({
        "repeat": repeat.max(1),
        "booted_speedup": speedup("booted_rounds_per_s"),
        "forked_speedup": speedup("forked_rounds_per_s"),
        "off": off, "on": on,
    })
}

/// A coverage-guided campaign of `rounds` rounds from seed 1 under `settings`, written under `out`.
pub(crate) fn campaign(
    rounds: u64,
    out: &Path,
    mode: deja_explore::Mode,
    jobs: u64,
    settings: &Settings,
) -> deja_explore::CampaignConfig {
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
        block_coverage: false,
        cover: Vec::new(),
        late_forks: deja_cluster::LATE_FORKS,
        verify_forks: 0,
        perturb_forks: false,
        settings: *settings,
    }
}

/// A campaign of `program` (its path and arguments) or, when `None`, of the cluster file
/// `register`, under `cfg.settings`.
pub(crate) fn run_campaign(
    program: Option<(PathBuf, &[&str])>,
    register: &Path,
    cfg: &deja_explore::CampaignConfig,
) -> Result<deja_explore::Campaign, BenchError> {
    match program {
        None => {
            let target = target(register)?;
            deja_explore::explore_cluster(&target, cfg, &mut |_| {})
                .with_context(|_| ExploreSnafu { what: format!("the campaign of {}", register.display()) })
        }
        Some((path, args)) => {
            let target = deja_explore::Target {
                spec: spec(&path, args)?,
                memory: deja_vmm::DEFAULT_MEMORY,
                path: path.display().to_string(),
                root: None,
            };
            deja_explore::explore(&target, cfg, &mut |_| {})
                .with_context(|_| ExploreSnafu { what: format!("the campaign of {}", path.display()) })
        }
    }
}

/// Campaign rounds per second on one worker and on every core, side by side, per reference
/// workload.
pub(crate) fn scale_figures(
    dir: &Path,
    register: &Path,
    settings: &Settings,
    quick: bool,
) -> Result<Value, BenchError> {
    // The cores the process could use when it started: by now a run of the bench's own may
    // have pinned this thread to the remedy's core.
    let cores = deja_vmm::identity::initial_cores().len().max(1) as u64;
    let workloads: [(&str, Vec<&str>, deja_explore::Mode, u64); 3] = [
        ("kv", vec!["--variant", "fixed", "6"], deja_explore::Mode::Faults, 480),
        ("bank", vec!["--fraud", "fixed", "20"], deja_explore::Mode::Random, 400),
        ("register (cluster)", vec![], deja_explore::Mode::Faults, 48),
    ];
    let mut rows = Vec::new();
    for (name, args, mode, rounds) in workloads {
        let rounds = crate::sized(quick, rounds);
        let mut rate = Vec::new();
        for jobs in [1, cores] {
            let out = std::env::temp_dir().join(format!("deja-bench-scale-{}-{jobs}", std::process::id()));
            let _ = std::fs::remove_dir_all(&out);
            let cfg = campaign(rounds, &out, mode, jobs, settings);
            let start = Instant::now();
            let program = (!name.starts_with("register")).then(|| (dir.join(name), args.as_slice()));
            let c = run_campaign(program, register, &cfg)?;
            let secs = start.elapsed().as_secs_f64();
            let _ = std::fs::remove_dir_all(&out);
            ensure!(
                c.rounds == rounds,
                RoundsSnafu { campaign: format!("{name} campaign on {jobs} workers"), ran: c.rounds, rounds }
            );
            rate.push(rounds as f64 / secs);
        }
        rows.push(serde_json::json!({
            "workload": name, "rounds": rounds, "one_worker_rounds_per_s": rate[0],
            "workers": cores, "all_workers_rounds_per_s": rate[1], "speedup": rate[1] / rate[0],
        }));
    }
    // Where the CPU identity remedy pins every vCPU thread to one core, the workers share it.
    let pinned_core = settings.remedy().context(VmSnafu { what: "the host's remedy" })?.pinned_core;
    Ok(serde_json::json!({ "cores": cores, "rows": rows, "pinned_core": pinned_core }))
}

/// The reference cluster's figures (the run with the median wall time of `repeat`), under
/// `settings`.
pub(crate) fn cluster_figures(guests: &Path, repeat: u32, settings: &Settings) -> Result<Value, BenchError> {
    let file = guests
        .parent()
        .and_then(Path::parent)
        .map(|root| root.join("examples/clusters/register-fixed.toml"))
        .filter(|p| p.exists())
        .context(NoClusterFileSnafu { guests })?;
    let mut runs = Vec::new();
    for _ in 0..repeat {
        let cfg = load(&file, settings)?;
        let r = deja_cluster::run(
            cfg,
            deja_cluster::RunOptions {
                sink: &mut |_: &str, _: deja_kernel::Stream, _: &[u8]| {},
                steering: Default::default(),
                record_trace: false,
            },
        )
        .context(ClusterSnafu { what: "the reference cluster" })?;
        ensure!(r.outcome == deja_cluster::Outcome::Completed, IncompleteSnafu { outcome: format!("{:?}", r.outcome) });
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The generated kv histories are linearizable (the history figures time the checker on
    /// them) and the same on every host.
    #[test]
    fn the_generated_history_is_linearizable_and_fixed() {
        let h = kv_history(100, 4);
        assert_eq!(h.ops.len(), 100);
        assert!(h.ops.windows(2).all(|w| w[0].invoke_ns <= w[1].invoke_ns));
        let v = deja_history::check(&h, deja_history::DEFAULT_BUDGET);
        assert!(matches!(v, deja_history::Verdict::Linearizable { .. }), "{v:?}");
        let again = kv_history(100, 4);
        let key = |h: &deja_history::History| h.ops.iter().map(|o| (o.key.clone(), o.invoke_ns)).collect::<Vec<_>>();
        assert_eq!(key(&h), key(&again));
    }

    /// The vDSO figures take each side's median rates, its first run's counts, and the speedups
    /// of on against off.
    #[test]
    fn the_vdso_figures_are_medians_side_by_side() {
        let run = |booted: f64, forked: f64, syscalls: u64| {
            serde_json::json!({
                "booted_rounds_per_s": booted, "forked_rounds_per_s": forked, "exits": 7, "syscalls": syscalls,
                "clock_syscalls": 3, "vdso_calls": 0, "clock_share_of_syscalls": 0.5, "digests_compared": 12,
            })
        };
        let off = [run(1.0, 10.0, 100), run(3.0, 30.0, 101), run(2.0, 20.0, 102)];
        let on = [run(4.0, 80.0, 60), run(6.0, 40.0, 61), run(5.0, 60.0, 62)];
        let v = vdso_summary(3, &off, &on);
        assert_eq!(v["repeat"], 3);
        assert_eq!(v["off"]["booted_rounds_per_s"], 2.0);
        assert_eq!(v["on"]["forked_rounds_per_s"], 60.0);
        assert_eq!(v["off"]["syscalls"], 100);
        assert_eq!(v["on"]["syscalls"], 60);
        assert_eq!(v["booted_speedup"], 2.5);
        assert_eq!(v["forked_speedup"], 3.0);
        let keys = |v: &Value| {
            let mut k = v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
            k.sort();
            k
        };
        assert_eq!(keys(&v), ["booted_speedup", "forked_speedup", "off", "on", "repeat"]);
        assert_eq!(
            keys(&v["on"]),
            [
                "booted_rounds_per_s",
                "clock_share_of_syscalls",
                "clock_syscalls",
                "digests_compared",
                "exits",
                "forked_rounds_per_s",
                "syscalls",
                "vdso_calls"
            ]
        );
    }
}
