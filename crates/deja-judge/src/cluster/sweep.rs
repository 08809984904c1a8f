//! The storage sweep of a cluster check: how far it goes ([`Sweep`]), its crash points (a node
//! before or after one of its durable operations) and their runs, on several threads.

use super::*;

/// How far a cluster check's storage sweep goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sweep {
    /// Most crash points it tries (before and after each durable operation chosen, so half as
    /// many operations).
    pub crash_points: u64,
    /// Crash states tried at each crash point before a durable operation, at most.
    pub states_per_point: usize,
    /// Threads it runs its clusters on.
    pub jobs: usize,
}

impl Default for Sweep {
    /// 64 crash points, 8 states each, on up to 4 threads (as many as the host offers).
    fn default() -> Sweep {
        let jobs = std::thread::available_parallelism().map_or(1, |n| n.get()).min(4);
        Sweep { crash_points: 64, states_per_point: 8, jobs }
    }
}

/// One crash point of the storage sweep: a node, before or after one of its durable
/// operations, and the state the crash keeps (`None`: the file's crash-state modes choose).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct SweepPoint {
    pub(super) node: String,
    pub(super) crash: OpCrash,
}

impl SweepPoint {
    pub(super) fn fault(&self) -> BugFault {
        BugFault::Storage(StorageFault { node: self.node.clone(), fault: NodeFault::Crash(self.crash.clone()) })
    }

    pub(super) fn describe(&self) -> String {
        StorageFault { node: self.node.clone(), fault: NodeFault::Crash(self.crash.clone()) }.describe()
    }
}

/// The crash points of the storage sweep over `out`, a run of the candidate: before and after
/// each durable operation of each node storage faults may strike that had something to make
/// durable, at most `budget` of them, spread evenly over the operations in time order when
/// there are more; and how many operations there were.
pub(super) fn sweep_points(out: &ClusterOutcome, budget: u64) -> (Vec<SweepPoint>, usize) {
    let mut ops: Vec<(u64, String, String, u64)> = Vec::new();
    for n in out.report.nodes.iter().filter(|n| n.storage_faults) {
        for d in n.durable_ops().into_iter().filter(|d| d.promotes) {
            ops.push((d.virtual_time_ns, n.name.clone(), d.path, d.nth));
        }
    }
    ops.sort();
    let total = ops.len();
    let chosen = spread(total, (budget / 2) as usize);
    // The program sweep's points, before then after each chosen operation, the k-th of them
    // being chosen[k - 1].
    let points = crash_points(chosen.len() as u64, &[When::Before, When::After], false)
        .into_iter()
        .filter_map(|p| {
            let (_, node, path, nth) = &ops[chosen[p.write() as usize - 1]];
            let crash = OpCrash { when: p.side()?, path: path.clone(), nth: *nth, keep: None };
            Some(SweepPoint { node: node.clone(), crash })
        })
        .collect();
    (points, total)
}

/// Runs `inputs` on `target`, on up to `jobs` threads; the outcomes in order.
pub(super) fn run_all(
    target: &ClusterTarget,
    inputs: &[ClusterInput],
    crash_states: usize,
    jobs: usize,
) -> Vec<Result<ClusterOutcome, String>> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Vec<std::sync::Mutex<Option<Result<ClusterOutcome, String>>>> =
        inputs.iter().map(|_| std::sync::Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        for _ in 0..jobs.clamp(1, inputs.len().max(1)) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(input) = inputs.get(i) else { break };
                let out = run_cluster_with(target, input, crash_states, &mut |_, _, _| {}).map_err(|e| e.to_string());
                *results[i].lock().expect("no thread panics holding it") = Some(out);
            });
        }
    });
    results
        .into_iter()
        .map(|r| r.into_inner().expect("no thread panics holding it").unwrap_or_else(|| Err("not run".into())))
        .collect()
}
