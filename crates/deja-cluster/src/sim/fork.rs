//! A whole cluster kept at a point and children run from it, each node's VM reset through its
//! dirty pages.

use super::*;
use deja_vmm::LateParent;

/// What one reset of a forked cluster did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ClusterReset {
    /// Each node's reset (nodes without a VM at the fork point have none).
    pub nodes: Vec<Option<ResetStats>>,
}

/// The blocks each node reached on the way to a fork point, by node ([`Fork::with_blocks`]).
pub type SetupBlocks = Vec<Vec<BlockHit>>;

/// How many later forks a [`Fork`] keeps by default ([`Fork::set_late_forks`]).
pub const LATE_FORKS: usize = 8;

/// What a fork's later forks did ([`Fork::run_child_at`]).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct LateStats {
    /// Later forks taken.
    pub taken: u64,
    /// Children run from a later fork.
    pub children: u64,
    /// Cluster decisions those children did not run again (each child's later fork's count,
    /// less the fork point's).
    pub decisions_skipped: u64,
    /// Later forks dropped to keep within the cache.
    pub evicted: u64,
    /// Captures refused because a node's VM was not the fork's at that point (it had
    /// restarted).
    pub refused: u64,
}

/// A later fork: the cluster as a child left it at the top of a step, `at` decisions in.
/// It serves every child whose steering is the same as its creator's up to there.
struct Late {
    /// Decisions taken at it.
    at: u64,
    /// Its creator's steering, overrides below `at` only.
    steering: Steering,
    frozen: Sim,
    /// By node: the VM's state there, as pages over the fork's parent (`None`: the node had no
    /// VM then, or none at the fork).
    parents: Vec<Option<LateParent>>,
    /// The last child that used it (for eviction).
    used: u64,
}

impl Late {
    /// Whether a child steered by `s` runs the same course as its creator up to it.
    fn serves(&self, s: &Steering) -> bool {
        s.reseed == self.steering.reseed
            && s.fates == self.steering.fates
            && s.storage == self.steering.storage
            && s.crash_states == self.steering.crash_states
            && s.overrides.range(..self.at).eq(self.steering.overrides.iter())
    }
}

/// A whole cluster kept at a point — every node's VM and core, the network in flight, the
/// event queue, the scheduler, the decision log and the virtual clock — and children run from
/// it. Each child starts by resetting each node's VM to the fork through its dirty pages.
///
/// A child may also leave a *later fork* where its course is going ([`Fork::run_child_at`]):
/// the whole cluster again, each node's VM kept as the pages where it differs from the fork's.
/// A later child whose steering agrees with that child's up to there starts from it instead,
/// and runs only the rest of the course.
pub struct Fork {
    frozen: Sim,
    parents: Vec<Option<Parent>>,
    vms: Vec<Option<Vm>>,
    /// By node: the frames where the state its VM was last reset to differs from its parent's.
    based: Vec<Vec<u64>>,
    late: Vec<Late>,
    late_cap: usize,
    children: u64,
    /// What the later forks did.
    pub late_stats: LateStats,
    /// Where the fork is.
    pub at: SteerAt,
    /// Cluster decisions taken before it.
    pub base_decisions: u64,
    /// Its virtual time, ns.
    pub virtual_time_ns: u64,
    /// What the last reset did.
    pub last_reset: ClusterReset,
    /// A test-only switch: every child's first node has its clock moved 1 µs at the fork
    /// point, so that no child is the booted run it claims to be ([`Fork::set_perturb`]).
    perturb: bool,
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
        let mut sim = Sim::<Vm>::boot(cfg, false, true, cover)?;
        match at {
            SteerAt::Setup => {
                sim.arm();
                if sim.main_loop(sink, true)?.is_some() {
                    return Ok(None);
                }
            }
            // Every node is at its first syscall, before it is served ([`Sim::boot`]): a clean
            // ring-3 stop, as a single program's fork is, and nothing the cluster has decided.
            SteerAt::Boot => {}
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
            based: vec![Vec::new(); parents.len()],
            parents,
            vms,
            late: Vec::new(),
            late_cap: LATE_FORKS,
            children: 0,
            late_stats: LateStats::default(),
            at,
            last_reset: ClusterReset::default(),
            perturb: false,
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
            for late in &mut self.late {
                if let Some(lp) = late.parents[node].as_mut() {
                    lp.disarm_blocks(parent, &blocks, &fresh);
                }
            }
        }
    }

    /// For testing what reports a fork that is not its booted run: with `on`, every child's
    /// first live node has its clock jumped 1 µs where the child starts, which no booted run
    /// does. Never set outside tests of that evidence.
    pub fn set_perturb(&mut self, on: bool) {
        self.perturb = on;
    }

    /// Keeps at most `n` later forks (0: none are taken, and those kept are dropped).
    pub fn set_late_forks(&mut self, n: usize) {
        self.late_cap = n;
        self.evict();
    }

    /// Drops the least recently used later forks beyond the cache's size, or beyond
    /// [`deja_vmm::fork::LATE_BYTES`] of guest memory over every node.
    fn evict(&mut self) {
        let bytes = |l: &Late| l.parents.iter().flatten().map(LateParent::bytes).sum::<u64>();
        while self.late.len() > self.late_cap || self.late.iter().map(bytes).sum::<u64>() > deja_vmm::fork::LATE_BYTES {
            let Some(i) = self.late.iter().enumerate().min_by_key(|(_, l)| l.used).map(|(i, _)| i) else { break };
            self.late.remove(i);
            self.late_stats.evicted += 1;
        }
    }

    /// Resets every node to the fork, applies `steering` (its `at` must be the fork's) and runs
    /// the cluster to its end: the same run as [`run`] with the same steering.
    pub fn run_child(&mut self, steering: &Steering, sink: Sink<'_>) -> Result<ClusterReport, ClusterError> {
        self.run_child_at(steering, None, sink)
    }

    /// [`Fork::run_child`], from the latest later fork whose creator's steering is the same as
    /// `steering` up to it, if one is kept; and, when `take` names a count of decisions past
    /// that point, leaving a later fork at the first top of a step with that many decisions
    /// taken (one of [`ClusterReport::cuts`] of a run steered the same up to there), unless one
    /// is kept there already. The report is the same whichever fork the child ran from.
    pub fn run_child_at(
        &mut self,
        steering: &Steering,
        take: Option<u64>,
        sink: Sink<'_>,
    ) -> Result<ClusterReport, ClusterError> {
        if steering.at != self.at {
            return SteeringSnafu { fork: self.at, steering: steering.at }.fail();
        }
        let wall = Instant::now();
        self.children += 1;
        let from =
            self.late.iter().enumerate().filter(|(_, l)| l.serves(steering)).max_by_key(|(_, l)| l.at).map(|(i, _)| i);
        let mut sim = match from {
            Some(j) => {
                self.late[j].used = self.children;
                self.late_stats.children += 1;
                self.late_stats.decisions_skipped += self.late[j].at - self.base_decisions;
                deja_vmm::profile::child(Some(self.late[j].at - self.base_decisions));
                self.late[j].frozen.clone_cold()
            }
            None => {
                deja_vmm::profile::child(None);
                self.frozen.clone_cold()
            }
        };
        let mut stats = Vec::new();
        for (i, parent) in self.parents.iter().enumerate() {
            let Some(parent) = parent else {
                stats.push(None);
                continue;
            };
            let to = match from {
                Some(j) => match &self.late[j].parents[i] {
                    Some(lp) => Some(lp),
                    // No VM there: this one waits, as it was, for a later child.
                    None => {
                        stats.push(None);
                        continue;
                    }
                },
                None => None,
            };
            let name = &sim.nodes[i].cfg.name;
            let mut vm = self.vms[i].take().context(ForkLostVmSnafu { node: name })?;
            let reset = parent.reset_to(&mut vm, &self.based[i], to);
            self.based[i] = to.map(LateParent::frames).unwrap_or_default();
            stats.push(Some(reset.context(VmSnafu { node: name })?));
            vm.stats.host_cores.clear();
            // Hits of a round that ended in an error, never taken.
            vm.take_block_hits();
            let kernel = to.map_or(parent.kernel(), LateParent::kernel).clone();
            sim.nodes[i].live = Some(Live { vm, kernel, forked: true });
        }
        self.last_reset = ClusterReset { nodes: stats };
        if self.perturb {
            if let Some(live) = sim.nodes.iter_mut().find_map(|n| n.live.as_mut()) {
                live.kernel.jump_clock(1_000);
            }
        }
        match from {
            // The rest was applied where the later fork's creator was steered, the same way.
            Some(_) => sim.log.set_overrides(steering.overrides.clone()),
            None => {
                sim.crash_states = steering.crash_states;
                sim.steer(steering);
            }
        }
        let start = sim.log.records().len() as u64;
        let wanted = take
            .filter(|&t| self.late_cap > 0 && t > start && !self.late.iter().any(|l| l.at == t && l.serves(steering)));
        sim.stop_at = wanted;
        let mut result = sim.main_loop(sink, false);
        // Stopped where a later fork was wanted (only a stop there ends the loop with `None`).
        if let (Some(at), Ok(None)) = (wanted, &result) {
            result = match self.keep_late(&mut sim, steering, at) {
                Ok(()) => sim.main_loop(sink, false),
                Err(e) => Err(e),
            };
        }
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

    /// Keeps the child `sim`, stopped at the top of a step `at` decisions in, as a later fork;
    /// the child then runs on. Nothing is kept when a node runs in a VM that is not the fork's
    /// (it restarted on the way), or a node's vCPU is not in the space its page tables name.
    fn keep_late(&mut self, sim: &mut Sim, steering: &Steering, at: u64) -> Result<(), ClusterError> {
        let mut capturable = true;
        for (i, n) in sim.nodes.iter_mut().enumerate() {
            if let Some(live) = n.live.as_mut() {
                let at_fork = live.forked && self.parents[i].is_some();
                capturable &= at_fork && Parent::capturable(&mut live.vm).context(VmSnafu { node: &n.cfg.name })?;
            }
        }
        if !capturable {
            self.late_stats.refused += 1;
            return Ok(());
        }
        let mut parents = Vec::new();
        for (i, n) in sim.nodes.iter_mut().enumerate() {
            let (Some(live), Some(root)) = (n.live.as_mut(), self.parents[i].as_ref()) else {
                parents.push(None);
                continue;
            };
            // What the way here reached stays the child's, and every later child's from here.
            n.blocks.extend(live.vm.take_block_hits());
            let lp =
                root.capture_late(&mut live.vm, &live.kernel, &self.based[i]).context(VmSnafu { node: &n.cfg.name })?;
            self.based[i] = lp.frames();
            parents.push(Some(lp));
        }
        let mut kept = steering.clone();
        kept.overrides = steering.overrides.range(..at).map(|(k, v)| (*k, *v)).collect();
        self.late.push(Late { at, steering: kept, frozen: sim.clone_cold(), parents, used: self.children });
        self.late_stats.taken += 1;
        deja_vmm::profile::late_taken();
        self.evict();
        Ok(())
    }
}
