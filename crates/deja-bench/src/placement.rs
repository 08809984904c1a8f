//! The kernel in the guest against the kernel on the host (docs/ARCHITECTURE.md, "The kernel
//! inside the VM"): the syscall-bound guest (N `getppid` calls) natively, in the host placement,
//! and in the guest placement reached by the `syscall` trap and by jump sites, side by side, with
//! each path's cost per call and its exits; the digests are compared with the host placement's
//! run of the same jump sites.

use std::time::{Duration, Instant};

use deja_kernel::host::jumps::Jumps;
use deja_kernel::ProgramSpec;
use deja_vmm::placement::run_program;
use deja_vmm::session::BootOptions;
use serde_json::json;
use snafu::ResultExt as _;

use crate::timing::{median, spec, time_deja, time_native};
use crate::{BenchError, BenchOptions, GuestSnafu, PlacementSnafu};

/// Heap of the kernel in the guest.
const HEAP: u64 = 128 << 20;

/// The figures; `{"built": false}` without a kernel image.
pub(crate) fn figures(opts: &BenchOptions) -> Result<serde_json::Value, BenchError> {
    let Some(path) = &opts.kernel_image else {
        return Ok(json!({ "built": false }));
    };
    let image = std::fs::read(path).context(GuestSnafu { path })?;
    let syscalls = opts.guests.join("syscalls");
    let n = opts.syscalls.to_string();
    let memory = deja_vmm::DEFAULT_MEMORY;
    let in_guest = |args: &[&str], jumps: Jumps| -> Result<(Duration, deja_vmm::placement::ProgramRun), BenchError> {
        let spec = ProgramSpec { jumps, ..spec(&syscalls, args)? };
        let start = Instant::now();
        let run = run_program(&image, &spec, memory, HEAP, BootOptions::new(opts.settings), &mut |_, _| {})
            .context(PlacementSnafu { what: crate::timing::named(&spec) })?;
        Ok((start.elapsed(), run))
    };
    let (mut native, mut host, mut trap, mut guest) =
        ((Vec::new(), Vec::new()), (Vec::new(), Vec::new()), (Vec::new(), Vec::new()), (Vec::new(), Vec::new()));
    // The same guest: "0" for the base of each placement, N (or 100 N natively) for the calls.
    let mut last = None;
    // Natively a call is a fraction of a microsecond: a hundred times as many calls measure it
    // above the noise of starting a process.
    let native_calls = opts.syscalls.saturating_mul(100);
    let native_n = native_calls.to_string();
    for _ in 0..opts.repeat.max(1) {
        native.0.push(time_native(&syscalls, &["0"])?);
        native.1.push(time_native(&syscalls, &[&native_n])?);
        host.0.push(time_deja(&syscalls, &["0"], &opts.settings)?.0);
        let (t, run) = time_deja(&syscalls, &[&n], &opts.settings)?;
        host.1.push(t);
        trap.0.push(in_guest(&["0"], Jumps::Off)?.0);
        trap.1.push(in_guest(&[&n], Jumps::Off)?.0);
        guest.0.push(in_guest(&["0"], Jumps::On)?.0);
        // A jump costs about what a native call does: as many calls as natively.
        let (t, g) = in_guest(&[&native_n], Jumps::On)?;
        guest.1.push(t);
        last = Some((run, g));
    }
    let Some((host_run, mut many)) = last else { return Ok(json!({ "built": false })) };
    let many_status = many.kernel.exit_status().cloned().unwrap_or(deja_kernel::ExitStatus::Exited { code: -1 });
    let many_report = many.kernel.finish(&many.vm.space, many_status);
    let mut guest_run = in_guest(&[&n], Jumps::On)?.1;
    // The same run in the host placement with the same jump sites: the digests to compare.
    let jumped = ProgramSpec { jumps: Jumps::On, ..spec(&syscalls, &[&n])? };
    let host_jumped = crate::timing::run_once(jumped, memory, &opts.settings)?;
    let status = guest_run.kernel.exit_status().cloned().unwrap_or(deja_kernel::ExitStatus::Exited { code: -1 });
    let guest_report = guest_run.kernel.finish(&guest_run.vm.space, status);
    let per_call = |(base, many): (Vec<Duration>, Vec<Duration>), calls: u64| {
        let (base, many) = (median(base), median(many));
        ((many.as_secs_f64() - base.as_secs_f64()).max(0.0) * 1e6 / calls.max(1) as f64, many.as_secs_f64())
    };
    let (native_us, _) = per_call(native, native_calls);
    let (host_us, host_s) = per_call(host, opts.syscalls);
    let (trap_us, trap_s) = per_call(trap, opts.syscalls);
    let (guest_us, guest_s) = per_call(guest, native_calls);
    let vs_native = |us: f64| if native_us > 0.0 { us / native_us } else { f64::INFINITY };
    let per_100 = |exits: u64, syscalls: u64| exits as f64 * 100.0 / syscalls.max(1) as f64;
    Ok(json!({
        "built": true,
        "program": format!("syscalls {n}"),
        "syscalls": host_run.report.syscalls,
        "native": { "us_per_syscall": native_us, "calls": native_calls },
        "host": {
            "us_per_syscall": host_us, "whole_s": host_s, "per_call_vs_native": vs_native(host_us),
            "exits_per_100_syscalls": per_100(host_run.stats.exits, host_run.report.syscalls),
        },
        "guest_trap": {
            "us_per_syscall": trap_us, "whole_s": trap_s, "per_call_vs_native": vs_native(trap_us),
        },
        "guest": {
            "us_per_syscall": guest_us, "whole_s": guest_s, "per_call_vs_native": vs_native(guest_us),
            "calls": native_calls,
            "exits_per_100_syscalls": per_100(many.run.program_exits, many_report.syscalls),
            "served_in_guest": many.run.served, "boot_ms": guest_run.run.boot_ns as f64 / 1e6,
            "jump_sites": guest_report.host_channels.jumps.sites,
        },
        "same_digest": guest_report.trace_digest == host_jumped.report.trace_digest
            && guest_report.memory_digest == host_jumped.report.memory_digest,
        "target_vs_native": 10.0,
        "target_exits_per_100_syscalls": 1.0,
    }))
}
