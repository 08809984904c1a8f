//! The bug's faults by meaning: its input in a world with message fates by meaning, its
//! schedule shifted (each fault with the one paired with it), whether a schedule can be
//! applied, and what a run under the faults shows: a verdict, none, or why the evidence is
//! incomplete.

use super::*;

fn world_seed(bug: &ClusterBug, k: u32) -> Option<u64> {
    if k == 0 {
        return bug.input.reseed;
    }
    let h = blake3::hash(format!("deja cluster check world {} {k}", bug.id).as_bytes());
    Some(u64::from_le_bytes(h.as_bytes()[..8].try_into().unwrap_or_default()))
}

/// The bug's input with `faults` in place of its faults, in world `k`: message fates by
/// meaning, no decision overrides.
pub(super) fn by_meaning(bug: &ClusterBug, faults: &[BugFault], k: u32) -> ClusterInput {
    let input = ClusterInput { reseed: world_seed(bug, k), fates: Fates::Meaning, ..bug.by_schedule() };
    with_faults(&input, faults)
}

/// The timed faults of `faults`.
pub(super) fn timed(faults: &[BugFault]) -> Vec<ScheduledFault> {
    faults.iter().filter_map(|f| if let BugFault::Timed(t) = f { Some(t.clone()) } else { None }).collect()
}

/// The fault that undoes fault `i` of `schedule` (a kill's restart, a pause's resume, a
/// partition's heal: the first such after it on the same node, or any heal), or that fault `i`
/// undoes (a restart's kill, a resume's pause, a heal's partition: the last before it).
pub(super) fn partner(schedule: &[ScheduledFault], i: usize) -> Option<usize> {
    let f = &schedule[i];
    let same_node = |j: usize| schedule[j].node == f.node;
    let after = |want: &dyn Fn(Action) -> bool| {
        (i + 1..schedule.len())
            .find(|&j| want(schedule[j].action) && (schedule[j].action == Action::Heal || same_node(j)))
    };
    let before = |want: &dyn Fn(Action) -> bool| {
        (0..i).rev().find(|&j| {
            want(schedule[j].action)
                && (matches!(schedule[j].action, Action::Partition | Action::PartitionOneWay) || same_node(j))
        })
    };
    match f.action {
        Action::Kill => after(&|a| a == Action::Restart),
        Action::Restart => before(&|a| a == Action::Kill),
        Action::Pause => after(&|a| a == Action::Resume),
        Action::Resume => before(&|a| a == Action::Pause),
        Action::Partition | Action::PartitionOneWay => after(&|a| a == Action::Heal),
        Action::Heal => before(&|a| matches!(a, Action::Partition | Action::PartitionOneWay)),
        Action::ClockJump | Action::ClockSkew => None,
    }
}

/// The schedule shifted by `delta_ms` (only fault `which` and the fault paired with it, when
/// one is given: a kill moves with its restart, a pause with its resume, a partition with its
/// heal), clipped at 0, in time order.
pub(super) fn shifted(schedule: &[ScheduledFault], delta_ms: i64, which: Option<usize>) -> Vec<ScheduledFault> {
    let pair = which.and_then(|w| partner(schedule, w));
    let mut out: Vec<ScheduledFault> = schedule
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let mut f = f.clone();
            if which.is_none_or(|w| w == i || pair == Some(i)) {
                f.at_ms = f.at_ms.saturating_add_signed(delta_ms);
            }
            f
        })
        .collect();
    out.sort_by_key(|f| f.at_ms);
    out
}

/// Why `schedule` cannot be applied as written, if it cannot: a kill of a node that is down, a
/// restart of one that is up, a pause of a paused node, a resume of one that is not paused
/// (every node up and running at first, the faults in time order).
pub(super) fn not_applicable(schedule: &[ScheduledFault]) -> Option<String> {
    let mut down = std::collections::BTreeSet::new();
    let mut paused = std::collections::BTreeSet::new();
    for f in schedule {
        let Some(node) = f.node.clone() else { continue };
        let why = match f.action {
            Action::Kill if down.contains(&node) => Some("kill a node that is down"),
            Action::Kill => {
                paused.remove(&node);
                down.insert(node.clone());
                None
            }
            Action::Restart if !down.remove(&node) => Some("restart a node that is up"),
            Action::Pause if down.contains(&node) || !paused.insert(node.clone()) => {
                Some("pause a node that is down or paused")
            }
            Action::Resume if !paused.remove(&node) => Some("resume a node that is not paused"),
            _ => None,
        };
        if let Some(why) = why {
            return Some(format!("{} would {why} ({node})", describe_fault(f)));
        }
    }
    None
}

/// The first scheduled fault that does not show in the run's ledger (at its time, as the same
/// fault): the run ended before it came, or it could not be applied.
fn unreached<'a>(out: &ClusterOutcome, schedule: &'a [ScheduledFault]) -> Option<&'a ScheduledFault> {
    schedule.iter().find(|f| !out.report.faults.iter().any(|e| e.scripted.as_ref() == Some(*f)))
}

/// The first storage fault of `faults` that did not strike in the run: a crash of its node at
/// its point, or an error of its kind on its path on its node.
fn storage_unreached<'a>(out: &ClusterOutcome, faults: &'a [BugFault]) -> Option<&'a StorageFault> {
    faults.iter().find_map(|f| match f {
        BugFault::Storage(s) => {
            let struck = match &s.fault {
                NodeFault::Crash(c) => out.report.crashes.iter().any(|r| r.node == s.node && r.point == c.point()),
                NodeFault::Kill(k) => out.report.faults.iter().any(|r| {
                    r.kind == deja_kernel::FaultKind::Kill.name()
                        && r.detail.starts_with(&format!("{} ", s.node))
                        && r.detail.ends_with(&k.point())
                }),
                NodeFault::Error(e) => out.report.faults.iter().any(|r| {
                    r.kind == e.errno.name()
                        && r.detail.starts_with(&format!("{} ", s.node))
                        && r.detail.contains(&format!(" on {} #", e.op.name()))
                        && r.detail.ends_with(&format!(" {}", e.path))
                }),
            };
            (!struck).then_some(s)
        }
        BugFault::Timed(_) => None,
    })
}

/// How the simulator names a scripted fault it did not apply because the test template's quiet
/// period had begun.
const QUIET: &str = ": the quiet period";

/// What a run under `faults` shows, as the pipeline weighs it ([`crate::pipeline::Run`]): a
/// failure first; else no verdict when it ran out of its budget with waited nodes still
/// running or lost track of its faults (a scripted fault not applied, a fault that never came
/// or never struck); else that it held. Its fail-stops are each node's lives the fail-stop rule
/// restarted or let stand.
pub(super) fn run_of(out: &ClusterOutcome, faults: &[BugFault]) -> Run {
    let stops = out
        .report
        .nodes
        .iter()
        .flat_map(|n| deja_explore::fail_stops::of_lives(&n.name, &n.lives))
        .map(|s| s.key())
        .collect();
    let end = match &out.failure {
        Some(f) => End::Failed(f.clone()),
        None => match out.report.faults.iter().find(|e| e.kind == "not-applied" && e.detail.ends_with(QUIET)) {
            Some(e) => {
                End::NotApplicable(format!("a scripted fault fell in the test template's quiet period: {}", e.detail))
            }
            None => no_verdict(out, faults).map_or(End::Held, End::NoVerdict),
        },
    };
    let timeline = out.failure.as_ref().map(|f| f.to_string()).unwrap_or_default();
    Run { digest: out.report.digest.clone(), end, fail_stops: stops, timeline }
}

/// Why a run that did not fail gives no verdict, if it gives none.
fn no_verdict(out: &ClusterOutcome, faults: &[BugFault]) -> Option<String> {
    let unfinished = out.report.unfinished();
    if !unfinished.is_empty() {
        return Some(format!(
            "the run ran out of its time budget with {} still running: no verdict from a run that did not end",
            unfinished.join(", ")
        ));
    }
    if let Some(e) = out.report.faults.iter().find(|e| e.kind == "not-applied") {
        return Some(format!("a scripted fault could not be applied: {}", e.detail));
    }
    if let Some(f) = unreached(out, &timed(faults)) {
        return Some(format!("the replay lost track: the run ended before its fault \"{}\" came", describe_fault(f)));
    }
    storage_unreached(out, faults)
        .map(|f| format!("the replay lost track: its fault \"{}\" never struck", f.describe()))
}
