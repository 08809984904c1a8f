//! A cluster bug's faults, as minimization and `deja check` see them: in words, as a list of
//! timed and storage faults, in groups that stand or fall together, put back into an input; and
//! [`minimize_cluster`], which cuts them down with ddmin.

use super::*;

/// A minimized cluster bug.
#[derive(Debug, Clone)]
pub struct MinimizedCluster {
    /// The minimized bug (verified by a replay).
    pub bug: ClusterBug,
    /// Runs it took.
    pub tests: u64,
}

/// Describes a scheduled fault for people.
pub fn describe_fault(f: &ScheduledFault) -> String {
    let what = f.action.name();
    let mut s = format!("{what} at {} ms", f.at_ms);
    if !f.groups.is_empty() {
        let g: Vec<String> = f.groups.iter().map(|g| format!("[{}]", g.join(","))).collect();
        s.push_str(&format!(" {}", g.join(" | ")));
    }
    if !f.from.is_empty() {
        s.push_str(&format!(" [{}] -> [{}]", f.from.join(","), f.to.join(",")));
    }
    if let Some(n) = &f.node {
        s.push_str(&format!(" {n}"));
    }
    s
}

/// One fault of a cluster bug, as minimization and `deja check` see it: a timed one of the
/// schedule, or a storage fault by meaning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BugFault {
    /// Partitions, heals, kills, restarts, pauses, clock faults, at their times.
    Timed(ScheduledFault),
    /// A crash at a durable operation, or an I/O error, of one node.
    Storage(StorageFault),
}

impl BugFault {
    /// In words.
    pub fn describe(&self) -> String {
        match self {
            BugFault::Timed(f) => describe_fault(f),
            BugFault::Storage(s) => s.describe(),
        }
    }
}

impl ClusterBug {
    /// The bug's faults as a schedule of timed faults and storage faults: its input's schedule,
    /// or, when it ran the file's faults, every fault its ledger can state at its time (the
    /// random ones too) and the file's storage faults; then the input's storage faults.
    pub fn fault_list(&self, target: &ClusterTarget) -> Vec<BugFault> {
        let timed: Vec<ScheduledFault> = match &self.input.schedule {
            Some(s) => s.clone(),
            None => self.faults.iter().filter_map(|f| f.scripted.clone()).collect(),
        };
        let file_storage = if self.input.schedule.is_none() { target.cfg.storage.faults.clone() } else { Vec::new() };
        let storage = file_storage.into_iter().chain(self.input.storage.iter().cloned());
        timed.into_iter().map(BugFault::Timed).chain(storage.map(BugFault::Storage)).collect()
    }
}

/// `input` with exactly `faults` in place of its faults: the timed ones as its schedule, the
/// storage ones as its storage faults (the file's own faults are left out).
pub fn with_faults(input: &ClusterInput, faults: &[BugFault]) -> ClusterInput {
    let mut schedule = Vec::new();
    let mut storage = Vec::new();
    for f in faults {
        match f {
            BugFault::Timed(t) => schedule.push(t.clone()),
            BugFault::Storage(s) => storage.push(s.clone()),
        }
    }
    ClusterInput { schedule: Some(schedule), storage, ..input.clone() }
}

/// A cluster bug's faults in groups that stand or fall together, in the order of their first
/// fault: each heal with every cut (partition, one-way partition) since the previous heal; each
/// restart with the kill of its node before it, each resume with the pause of its node before
/// it. A fault without a partner (a clock jump, a storage fault, a cut never healed) is a group
/// of its own, so removing a group never leaves a cut, a kill or a pause its run had undone.
pub fn fault_groups(faults: &[BugFault]) -> Vec<Vec<BugFault>> {
    use deja_cluster::config::Action;
    let mut groups: Vec<Vec<BugFault>> = Vec::new();
    // Open cuts (group indices) since the last heal; the open kill and pause of each node.
    let mut cuts: Vec<usize> = Vec::new();
    let mut down: BTreeMap<String, usize> = BTreeMap::new();
    let mut paused: BTreeMap<String, usize> = BTreeMap::new();
    for f in faults {
        let BugFault::Timed(t) = f else {
            groups.push(vec![f.clone()]);
            continue;
        };
        let node = t.node.clone().unwrap_or_default();
        let partner = match t.action {
            Action::Heal if !cuts.is_empty() => {
                let first = cuts[0];
                // Every cut since the last heal joins the first one's group, then the heal.
                for &g in cuts[1..].iter().rev() {
                    let moved = std::mem::take(&mut groups[g]);
                    groups[first].extend(moved);
                }
                cuts.clear();
                Some(first)
            }
            Action::Restart => down.remove(&node),
            Action::Resume => paused.remove(&node),
            _ => None,
        };
        match partner {
            Some(g) => groups[g].push(f.clone()),
            None => {
                groups.push(vec![f.clone()]);
                let g = groups.len() - 1;
                match t.action {
                    Action::Partition | Action::PartitionOneWay => cuts.push(g),
                    Action::Kill => {
                        down.insert(node, g);
                    }
                    Action::Pause => {
                        paused.insert(node, g);
                    }
                    _ => {}
                }
            }
        }
    }
    groups.retain(|g| !g.is_empty());
    for g in &mut groups {
        // Within a group, in schedule order.
        g.sort_by_key(|f| match f {
            BugFault::Timed(t) => t.at_ms,
            BugFault::Storage(_) => 0,
        });
    }
    groups
}

/// Minimizes a cluster bug: its failing run's faults (the timed ones as a schedule, the file's
/// random faults and the overrides dropped; the storage faults by meaning) are cut down by
/// ddmin to a smallest subset that still fails with the same signature. The result is replayed
/// once more to verify it.
pub fn minimize_cluster(
    bug: &ClusterBug,
    target: &ClusterTarget,
    new_file: &str,
) -> Result<MinimizedCluster, ExploreError> {
    let all = bug.fault_list(target);
    let mut tests = 0u64;
    // The overrides go (their decisions move once the faults are fixed); the seed and the reseed
    // at the steering point stay, and so do the test template's choices.
    let base = bug.by_schedule();
    let mut fails = |faults: &[BugFault]| -> Result<bool, ExploreError> {
        tests += 1;
        let out = run_cluster_input(target, &with_faults(&base, faults), &mut |_, _, _| {})?;
        Ok(out.failure.as_ref().is_some_and(|f| f.is_the_failure(&bug.signature)))
    };
    ensure!(fails(&all)?, crate::ScheduleDoesNotReproduceSnafu { bug: &bug.id, faults: all.len() });
    // A cut and its heal, a kill and its restart, a pause and its resume are one element: a
    // minimized schedule never leaves a cut the original healed, or a node down it restarted.
    let groups = fault_groups(&all);
    // Groups back to one schedule, each fault where it was in the original.
    let in_order = |gs: &[Vec<BugFault>]| {
        let mut v = gs.concat();
        v.sort_by_key(|f| all.iter().position(|a| a == f));
        v
    };
    let mut group_fails = |gs: &[Vec<BugFault>]| fails(&in_order(gs));
    let kept = in_order(&crate::minimize::ddmin(&groups, &mut group_fails)?);
    let input = with_faults(&base, &kept);
    let out = run_cluster_input(target, &input, &mut |_, _, _| {})?;
    tests += 1;
    ensure!(
        out.failure.as_ref().is_some_and(|f| f.is_the_failure(&bug.signature)),
        crate::MinimizedDoesNotFailSnafu { what: "schedule" }
    );
    let mut min = ClusterBug::new(target, &input, &out, bug.found_at_round, new_file);
    min.forked_from = bug.forked_from.clone();
    min.minimized_from = Some(crate::replayed_file(&bug.reproduce).to_string());
    min.removed = all.iter().filter(|f| !kept.contains(f)).map(BugFault::describe).collect();
    Ok(MinimizedCluster { bug: min, tests })
}
