//! What `deja explore` prints after its summary: where the time went (`--profile`) and the
//! campaign's fail-stops.

use super::*;

/// [`Exit::Incomplete`] when the campaign ran no round, [`Exit::DejaFailed`] when deja failed.
/// `--profile`: where the campaign's time went, over its workers' time (wall × workers).
pub(super) fn print_profile(
    err: &mut impl Write,
    p: &deja_vmm::profile::Profile,
    wall: std::time::Duration,
    jobs: u64,
    rounds: u64,
) {
    let total = wall.as_nanos() as f64 * jobs.max(1) as f64;
    let pct = |ns: u64| 100.0 * ns as f64 / total.max(1.0);
    let rest = total - (p.kvm_run_ns + p.syscall_ns + p.exception_ns + p.reset_ns) as f64;
    let _ = writeln!(
        err,
        "deja: profile: {:.2} s wall x {} worker(s), {} rounds ({:.1} ms each): KVM_RUN {:.1}% ({} exits, {:.1} us each with the guest's code), syscall handling {:.1}%, exceptions {:.1}%, fork resets {:.1}%, the rest (planning, learning, checkpoints, the cluster driver) {:.1}%",
        wall.as_secs_f64(),
        jobs.max(1),
        rounds,
        wall.as_secs_f64() * 1e3 * jobs.max(1) as f64 / rounds.max(1) as f64,
        pct(p.kvm_run_ns),
        p.exits,
        p.kvm_run_ns as f64 / 1e3 / p.exits.max(1) as f64,
        pct(p.syscall_ns),
        pct(p.exception_ns),
        pct(p.reset_ns),
        100.0 * rest.max(0.0) / total.max(1.0)
    );
    let kinds: Vec<String> = p
        .by_syscall
        .iter()
        .take(6)
        .map(|(name, count, ns)| {
            format!("{name} {:.1}% ({count}, {:.1} us each)", pct(*ns), *ns as f64 / 1e3 / (*count).max(1) as f64)
        })
        .collect();
    let _ = writeln!(err, "deja: profile: syscall handling by kind: {}", kinds.join(", "));
    if p.children > 0 {
        let _ = writeln!(
            err,
            "deja: profile: later forks: {} kept ({:.1}% of the time capturing them), {} of {} forked rounds ran from one, skipping {:.0} decisions each on average",
            p.late_taken,
            pct(p.late_capture_ns),
            p.late_children,
            p.children,
            p.late_skipped as f64 / p.late_children.max(1) as f64
        );
    }
}

/// The fail-stops of a campaign, most frequent first: what stopped, how often, what it said last,
/// and the round counted as a failure.
pub(super) fn print_fail_stops(err: &mut impl Write, lines: &[deja_explore_report::FailStopLine]) {
    if lines.is_empty() {
        return;
    }
    let stops: u64 = lines.iter().map(|f| f.stops).sum();
    let _ = writeln!(
        err,
        "deja:   fail-stops (not failures; --fail-stop never counts them): {stops} in {} kind(s)",
        lines.len()
    );
    for f in deja_explore_report::FailStopLine::by_frequency(lines).into_iter().take(5) {
        let said = deja_explore::signature::last_words(&f.output).map_or(String::new(), |l| format!(": {l}"));
        let _ = writeln!(err, "deja:     {}× {} (first round {}){said}", f.stops, f.kind(), f.first_round);
        if let Some(cmd) = &f.reproduce {
            let _ = writeln!(err, "deja:       counted as a failure: {cmd}");
        }
        if let Some(why) = &f.not_run {
            let _ = writeln!(err, "deja:       not run again counted as a failure: {why}");
        }
    }
}
