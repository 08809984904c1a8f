//! What deja's mechanisms cost: CPUID faulting against KVM's table, rewriting (planning a
//! guest's code, a trap at a rewritten instruction, a whole run with and without), and block
//! coverage on a forked store.

use std::path::Path;
use std::time::{Duration, Instant};

use deja_vmm::Settings;
use snafu::{ensure, ResultExt};

use crate::timing::{deja, median, named, output, spec, summary, time_deja};
use crate::{BenchError, ChildFailedSnafu, GuestSnafu, PlanSnafu, RunSnafu, VmSnafu};

/// What CPUID faulting costs: `deja run hostinfo` (a program that asks CPUID for 25 leaves on
/// top of glibc's and std's own start-up queries) with faulting against KVM's table, each in
/// fresh processes of `exe`, side by side (otherwise under `settings`).
pub(crate) fn cpuid_cost(
    exe: &Path,
    hostinfo: &Path,
    repeat: usize,
    settings: &Settings,
) -> Result<serde_json::Value, BenchError> {
    let honoured = settings.host().context(VmSnafu { what: "the host's profile" })?.faulting_honoured;
    if !honoured {
        return Ok(serde_json::json!({ "faulting_honoured": false }));
    }
    let run = |policy: &str| -> Result<(Duration, u64), BenchError> {
        let start = Instant::now();
        // Without rewriting, so that the host's CPUID faulting (or KVM's table) answers.
        let mut cmd = deja(exe, settings);
        cmd.env(deja_vmm::identity::ENV, policy)
            .env(deja_vmm::identity::REWRITE_ENV, "off")
            .args(["run", "--json", "--no-probe"])
            .arg(hostinfo);
        let out = output(&mut cmd, exe, "deja run hostinfo")?;
        let took = start.elapsed();
        let v = summary(&out, "deja run hostinfo")?;
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
/// processes of `exe` with rewriting and without (otherwise under `settings`).
pub(crate) fn rewrite_figures(
    exe: &Path,
    dir: &Path,
    repeat: u32,
    settings: &Settings,
) -> Result<serde_json::Value, BenchError> {
    let mut plans = Vec::new();
    for name in ["hello", "kv", "raftkv-node", "hostchan", "go-goroutines"] {
        let path = dir.join(name);
        let image = std::fs::read(&path).context(GuestSnafu { path })?;
        let mut times = Vec::new();
        let mut plan = deja_rewrite::Plan::default();
        for _ in 0..repeat.max(3) {
            let start = Instant::now();
            plan = deja_rewrite::plan_elf(&image).context(PlanSnafu { program: name })?;
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
    let run = |rewrite: &str| -> Result<Duration, BenchError> {
        let start = Instant::now();
        let mut cmd = deja(exe, settings);
        cmd.env(deja_vmm::identity::REWRITE_ENV, rewrite).args(["run", "--no-probe"]).arg(&hostchan);
        let out = output(&mut cmd, exe, "deja run hostchan")?;
        ensure!(
            out.status.success(),
            ChildFailedSnafu { what: "deja run hostchan", stderr: String::from_utf8_lossy(&out.stderr) }
        );
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
pub(crate) fn block_coverage_figures(
    dir: &Path,
    rounds: u32,
    settings: &Settings,
) -> Result<serde_json::Value, BenchError> {
    use deja_vmm::coverage::BlockImage;
    let path = dir.join("ackstore-buggy");
    let spec = spec(&path, &["6"])?;
    let (plain_what, covered_what) =
        (format!("the fork of {}", named(&spec)), format!("the fork of {} with block coverage", named(&spec)));
    let blocks = BlockImage::of_image(&spec.image, &[]);
    let at = 8;
    let mut plain = deja_vmm::Fork::new(spec.clone(), 1 << 30, settings, at, &mut |_, _| {})
        .context(RunSnafu { what: &plain_what })?;
    let start = Instant::now();
    let (mut covered, parent_hits) =
        deja_vmm::Fork::with_blocks(spec, 1 << 30, settings, at, Some(blocks.clone()), &mut |_, _| {})
            .context(RunSnafu { what: &covered_what })?;
    let armed_boot = start.elapsed();
    let ids: Vec<u32> = parent_hits.iter().map(|h| h.block).collect();
    covered.disarm_blocks(&ids);
    let start = Instant::now();
    let first = covered.run_child(None, &mut |_, _| {}).context(RunSnafu { what: &covered_what })?;
    let first_round = start.elapsed();
    let ids: Vec<u32> = first.blocks.iter().map(|h| h.block).collect();
    covered.disarm_blocks(&ids);
    let start = Instant::now();
    plain.run_child(None, &mut |_, _| {}).context(RunSnafu { what: &plain_what })?;
    let plain_first = start.elapsed();
    let (mut on, mut off, mut steady_exits) = (Vec::new(), Vec::new(), 0);
    for _ in 0..rounds.max(5) {
        let start = Instant::now();
        let run = covered.run_child(None, &mut |_, _| {}).context(RunSnafu { what: &covered_what })?;
        on.push(start.elapsed());
        steady_exits += run.blocks.len();
        let start = Instant::now();
        plain.run_child(None, &mut |_, _| {}).context(RunSnafu { what: &plain_what })?;
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
