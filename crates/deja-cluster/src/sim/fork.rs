//! A whole cluster kept at a point and children run from it, each node's VM reset through its
//! dirty pages.

use super::*;

/// What one reset of a forked cluster did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ClusterReset {
    /// Each node's reset (nodes without a VM at the fork point have none).
    pub nodes: Vec<Option<ResetStats>>,
}

/// The blocks each node reached on the way to a fork point, by node ([`Fork::with_blocks`]).
pub type SetupBlocks = Vec<Vec<BlockHit>>;

/// A whole cluster kept at a point — every node's VM and core, the network in flight, the
/// event queue, the scheduler, the decision log and the virtual clock — and children run from
/// it. Each child starts by resetting each node's VM to the fork through its dirty pages.
pub struct Fork {
    frozen: Sim,
    parents: Vec<Option<Parent>>,
    vms: Vec<Option<Vm>>,
    /// Where the fork is.
    pub at: SteerAt,
    /// Cluster decisions taken before it.
    pub base_decisions: u64,
    /// Its virtual time, ns.
    pub virtual_time_ns: u64,
    /// What the last reset did.
    pub last_reset: ClusterReset,
}

impl Fork {
    /// Boots `cfg` and keeps it at `at`; `None` when the run ended before every node had
    /// called `setup_complete` (a fork at [`SteerAt::Boot`] always exists).
    pub fn new(cfg: ClusterConfig, at: SteerAt, sink: Sink<'_>) -> Result<Option<Fork>, ClusterError> {
        Ok(Fork::with_blocks(cfg, at, Vec::new(), sink)?.map(|(fork, _)| fork))
    }

    /// [`Fork::new`] with block coverage ([`deja_vmm::coverage`]): each node with blocks in
    /// `blocks` (by node; a node without, or past its end, is not armed) is armed from its
    /// first instruction, in every life, so the fork's parents keep a breakpoint on every block
    /// the setup did not reach. Returns, by node, the blocks the run to the fork reached.
    /// A child's [`crate::NodeReport::blocks`] are the blocks it reached that were still armed.
    pub fn with_blocks(
        cfg: ClusterConfig,
        at: SteerAt,
        blocks: Vec<Option<Arc<BlockImage>>>,
        sink: Sink<'_>,
    ) -> Result<Option<(Fork, SetupBlocks)>, ClusterError> {
        let cover = blocks.into_iter().map(|b| b.map(|b| (b, Seen::default()))).collect();
        let mut sim = Sim::boot(cfg, false, true, cover)?;
        match at {
            SteerAt::Setup => {
                sim.arm();
                if sim.main_loop(sink, true)?.is_some() {
                    return Ok(None);
                }
            }
            // A VM is kept at a clean ring-3 stop, as a single program's fork is: each node runs
            // to its first syscall, before it is served. That touches nothing another node or
            // the network can see, so the cluster has not moved.
            SteerAt::Boot => {
                for n in &mut sim.nodes {
                    let name = n.cfg.name.clone();
                    let Some(live) = n.live.as_mut() else { continue };
                    let mut out = |s: Stream, b: &[u8]| sink(&name, s, b);
                    match live.vm.run_until(&mut live.kernel, &mut out, Some(0)) {
                        Ok(Stop::AtSyscall) => {}
                        Ok(stop) => return EndedBeforeFirstSyscallSnafu { node: name, stop }.fail(),
                        Err(source) => return Err(ClusterError::Vm { node: name, source }),
                    }
                }
            }
        }
        let mut parents = Vec::new();
        let mut vms = Vec::new();
        let mut hits = Vec::new();
        for n in &mut sim.nodes {
            // What the setup reached (earlier lives' blocks too); no child repeats it.
            let mut reached = std::mem::take(&mut n.blocks);
            if let Some(live) = n.live.as_mut() {
                reached.extend(live.vm.take_block_hits());
            }
            hits.push(reached);
            match n.live.take() {
                Some(mut live) => {
                    let name = n.cfg.name.clone();
                    parents.push(Some(Parent::capture(&mut live.vm, &live.kernel).context(VmSnafu { node: &name })?));
                    vms.push(Some(live.vm));
                }
                None => {
                    parents.push(None);
                    vms.push(None);
                }
            }
        }
        let frozen = sim.clone_cold();
        let fork = Fork {
            base_decisions: frozen.log.records().len() as u64,
            virtual_time_ns: frozen.now,
            frozen,
            parents,
            vms,
            at,
            last_reset: ClusterReset::default(),
        };
        Ok(Some((fork, hits)))
    }

    /// The blocks `ids` of node `node` are seen by the campaign: their breakpoints come out of
    /// its fork VM and its parent's image, and the VMs of later lives do not arm them.
    pub fn disarm_blocks(&mut self, node: usize, ids: &[u32]) {
        let Some(Some((blocks, seen))) = self.frozen.cover.get_mut(node) else { return };
        let fresh: Vec<u32> = ids.iter().copied().filter(|&id| seen.insert(id as usize)).collect();
        let blocks = blocks.clone();
        if let Some(vm) = self.vms[node].as_mut() {
            vm.disarm_blocks(&fresh);
        }
        if let Some(parent) = self.parents[node].as_mut() {
            parent.disarm_blocks(&blocks, &fresh);
        }
    }

    /// Resets every node to the fork, applies `steering` (its `at` must be the fork's) and runs
    /// the cluster to its end: the same run as [`run`] with the same steering.
    pub fn run_child(&mut self, steering: &Steering, sink: Sink<'_>) -> Result<ClusterReport, ClusterError> {
        if steering.at != self.at {
            return SteeringSnafu { fork: self.at, steering: steering.at }.fail();
        }
        let wall = Instant::now();
        let mut sim = self.frozen.clone_cold();
        let mut stats = Vec::new();
        for (i, parent) in self.parents.iter().enumerate() {
            let Some(parent) = parent else {
                stats.push(None);
                continue;
            };
            let name = &sim.nodes[i].cfg.name;
            let mut vm = self.vms[i].take().context(ForkLostVmSnafu { node: name })?;
            stats.push(Some(parent.reset(&mut vm).context(VmSnafu { node: name })?));
            vm.stats.host_cores.clear();
            // Hits of a round that ended in an error, never taken.
            vm.take_block_hits();
            sim.nodes[i].live = Some(Live { vm, kernel: parent.kernel().clone(), forked: true });
        }
        self.last_reset = ClusterReset { nodes: stats };
        sim.crash_states = steering.crash_states;
        sim.steer(steering);
        let result = sim.main_loop(sink, false);
        let report = result.map(|o| sim.report(o.unwrap_or(Outcome::TimeLimit), wall.elapsed().as_nanos() as u64));
        // Every fork VM comes back, whatever happened to its node.
        for (i, spare) in sim.spare.iter_mut().enumerate() {
            if let Some(vm) = spare.take() {
                self.vms[i] = Some(vm);
            }
        }
        for (i, n) in sim.nodes.iter_mut().enumerate() {
            if let Some(live) = n.live.take().filter(|l| l.forked) {
                self.vms[i] = Some(live.vm);
            }
        }
        report
    }
}
