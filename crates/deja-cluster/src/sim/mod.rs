//! The cluster simulator: one VM per node, one virtual clock, one scheduler, and the fault
//! model.
//!
//! # Time and scheduling
//!
//! Every node has its own virtual clock (its kernel's), all on one time line that starts at 0
//! when the cluster boots. A node is *running* (it has a runnable thread), *idle* (every thread
//! waits for I/O, a timeout or a packet), *paused*, *down* (killed) or *exited*. The simulator
//! repeatedly takes the earliest thing that can happen:
//! - an event in its queue (a packet delivery, a fault, the end of a fault), earliest first and
//!   in insertion order at equal times; events win ties with nodes;
//! - otherwise the running node with the smallest clock, or an idle node whose earliest timeout
//!   is due. When several nodes are at the same time, the decision `run node at T` picks one.
//!
//! The chosen node runs until its clock passes the next other thing's time (it then stops after
//! its current syscall), it sends packets (they are routed at once, and their deliveries are new
//! things to wait for), it goes idle, or it ends. Every syscall costs 1 µs of virtual time, so
//! two busy nodes alternate syscall by syscall. A node's packets leave at the node's clock
//! when it made the send syscall; deliveries reach an idle node at their time, and a running
//! node as soon as it stops. The run ends when every node marked `wait` has exited
//! ([`Outcome::Completed`]), when the virtual-time budget is spent ([`Outcome::TimeLimit`]),
//! or when no node can ever run again ([`Outcome::Stuck`]).
//!
//! # The fault model
//!
//! Every fault is a recorded decision (or a scripted event) and gets a ledger entry
//! ([`FaultEvent`]) with its virtual time.
//!
//! **Network** ([`crate::network`]):
//! - *Latency and jitter*: every packet draws a one-way latency, uniform in `latency_ms`
//!   (decision `network latency`). TCP packets of one connection direction are delivered in
//!   order (a packet never overtakes an earlier one); datagrams are not.
//! - *Loss, duplication, reordering* (UDP only; TCP is reliable): with probabilities
//!   `udp_loss`, `udp_duplicate`, `udp_reorder` (decisions `udp loss`, `udp duplicate`, `udp
//!   reorder`). A reordered datagram is held back by three more latencies plus 1 ms.
//! - *Partitions*: symmetric (`partition`: groups that cannot reach each other; a node no group
//!   names is on both sides, and keeps reaching every node) or one-way (`partition-one-way`:
//!   `from` cannot reach `to`, the reverse still works). Datagrams across
//!   a cut are dropped. TCP packets across a cut are held and delivered in order at the heal,
//!   unless the cut lasts longer than `tcp_timeout_ms`: then every connection it cuts is reset
//!   on both sides (`ECONNRESET`) and its held packets are dropped. A SYN nobody answers
//!   within `connect_timeout_ms` (a cut, an address no node has, a node that is down) makes a
//!   blocking `connect` fail with `ETIMEDOUT`.
//! - *Heal* removes every cut.
//!
//! **Process**:
//! - *Kill*: the node's VM is discarded at once, like a power cut. Its file system survives
//!   as its crash image: what was durable (see the kernel's durability model). Its peers'
//!   TCP connections are reset by an RST that travels the network (so a cut delays it). Packets
//!   to a down node are lost.
//! - *Restart*: a new VM boots the same program with the surviving disk, a new seed for the
//!   new life, and the current virtual time.
//! - *Pause*/*resume*: a paused node is not scheduled; its kernel still receives packets (its
//!   buffers fill), and its clock catches up at the resume, so its timeouts fire then.
//!
//! **Clock**:
//! - *Jump*: every clock the node's program reads (monotonic, realtime, TSC) jumps forward by
//!   the given amount; timeouts already running are not shortened, but anything the program
//!   computes from clock readings (leases, deadlines) sees the jump.
//! - *Skew*: the node's wall clock (`CLOCK_REALTIME`) is offset by the given amount (either
//!   sign); monotonic clocks are unaffected.
//!
//! Random faults (`[faults.random]`) are drawn from the seed: the gap to the next fault of a
//! kind and its parameters are decisions (`partition gap`, `partition sides`, `partition one
//! way`, `partition length`, `kill gap`, `kill target`, …). Only one random partition is active
//! at a time: it splits the nodes (those `partition_targets` names, else every node) into two
//! non-empty sides (any split; a node outside the scope keeps reaching all), cuts both directions
//! or, with probability `one_way`, only the traffic from one side to the other, and heals after
//! its length.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use deja_kernel::net::{Packet, Payload, SockAddr};
use deja_kernel::{DecisionLog, DecisionPoint, ExitStatus, Kernel, ProgramSpec, RandomFault, RunReport, Stream};
use deja_vmm::coverage::{BlockHit, BlockImage, Seen};
use deja_vmm::{BootOptions, Parent, ResetStats, Stop, Vm};
use serde::{Deserialize, Serialize};

use crate::config::{Action, ClusterConfig, NodeConfig, NodeFault, RandomFaults, ScheduledFault, StorageFault};
use crate::network::{Delivery, Network};
use crate::{
    BootSnafu, ClusterError, ClusterReport, CrashRecord, EndedBeforeFirstSyscallSnafu, FaultEvent, ForkLostVmSnafu,
    NodeReport, Outcome, SteeringSnafu, VmSnafu,
};
use snafu::{OptionExt, ResultExt};

mod faults;
mod fork;
mod lives;
mod machine;
pub mod moment;
mod report;
mod template;
#[cfg(test)]
mod tests;

pub use fork::{ClusterReset, Fork, LateStats, SetupBlocks, LATE_FORKS};
pub(super) use lives::injected_errors;
use lives::sigkill;
pub use machine::{Counters, Machine};

/// BLAKE3 key-derivation context of the cluster's decision stream.
const CLUSTER_CONTEXT: &str = "deja 2026 cluster decision stream v1";
/// BLAKE3 key-derivation context of the cluster's decisions keyed by meaning ([`Fates::Meaning`]).
const MEANING_CONTEXT: &str = "deja 2026 cluster decisions by meaning v1";

/// The seed of node `i` in a cluster seeded with `seed`.
pub fn node_seed(seed: u64, i: usize) -> u64 {
    let mut h = blake3::Hasher::new();
    h.update(b"deja node seed");
    h.update(&seed.to_le_bytes());
    h.update(&(i as u64).to_le_bytes());
    let mut w = [0u8; 8];
    w.copy_from_slice(&h.finalize().as_bytes()[..8]);
    u64::from_le_bytes(w)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Running,
    Idle,
    Down,
    Exited,
}

struct Live<M = Vm> {
    vm: M,
    kernel: Kernel,
    /// The VM is a fork's: it goes back to the fork when the life ends.
    forked: bool,
}

struct Node<M = Vm> {
    cfg: Arc<NodeConfig>,
    live: Option<Live<M>>,
    state: State,
    paused: bool,
    lives: Vec<RunReport>,
    disk: Option<deja_kernel::Disk>,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    exits: u64,
    host_run_ns: u64,
    min_exit_ns: u64,
    host_cores: Vec<u32>,
    seed: u64,
    /// The blocks its lives reached while armed (block coverage).
    blocks: Vec<BlockHit>,
    /// Restarts by its restart policy so far.
    relaunches: u64,
}

impl<M> Node<M> {
    /// Everything but the running VM.
    fn clone_cold(&self) -> Node<M> {
        Node {
            cfg: self.cfg.clone(),
            live: None,
            state: self.state,
            paused: self.paused,
            lives: self.lives.clone(),
            disk: self.disk.clone(),
            stdout: self.stdout.clone(),
            stderr: self.stderr.clone(),
            exits: self.exits,
            host_run_ns: self.host_run_ns,
            min_exit_ns: self.min_exit_ns,
            host_cores: self.host_cores.clone(),
            seed: self.seed,
            blocks: self.blocks.clone(),
            relaunches: self.relaunches,
        }
    }
}

#[derive(Debug, Clone)]
enum Event {
    Deliver(Box<Delivery>),
    SynCheck {
        node: usize,
        src: SockAddr,
        dst: SockAddr,
    },
    Scripted(Box<ScheduledFault>),
    RandomTick(RandomFault),
    Heal {
        epoch: u64,
    },
    Restart(usize),
    /// A node that crashed at a durable operation boots again.
    Revive(usize),
    /// A node whose program exited boots again by its restart policy.
    Relaunch(usize),
    Resume(usize),
    TcpTimeout {
        epoch: u64,
    },
    /// The test template's composer begins, or wakes.
    Template,
}

/// Where a cluster run takes its steering.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SteerAt {
    /// When the nodes have booted, before anything ran.
    #[default]
    Boot,
    /// At the first moment every node has called `setup_complete` (in its current life): the
    /// scheduler's next step after the last one did.
    Setup,
}

/// Where the natural choices of a cluster's message fates and scheduling ties come from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fates {
    /// The cluster's decision stream, in the order the decisions are taken.
    #[default]
    Stream,
    /// From the steering point on, each is a function of the seed and its meaning: a message's
    /// connection and place in that connection's order (see [`crate::network`]), a tie's virtual
    /// time and nodes. A candidate that sends one more message keeps the fates of every other
    /// connection. `deja check` replays cluster failures this way.
    Meaning,
}

impl Fates {
    /// True for [`Fates::Stream`] (the default, left out of files).
    pub fn is_stream(&self) -> bool {
        *self == Fates::Stream
    }
}

/// How a cluster run is steered away from its seed's course.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Steering {
    /// Cluster decision index → choice.
    #[serde(default)]
    pub overrides: BTreeMap<u64, u64>,
    /// From the steering point on, every cluster decision that is not overridden is drawn from
    /// this seed's stream instead of the cluster seed's, and node `i`'s decisions from
    /// [`node_seed`]`(reseed, i)`'s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reseed: Option<u64>,
    /// Where the steering is applied.
    #[serde(default)]
    pub at: SteerAt,
    /// Where message fates and ties come from after it.
    #[serde(default, skip_serializing_if = "Fates::is_stream")]
    pub fates: Fates,
    /// Storage faults placed from the steering point on, besides the file's own (see
    /// [`StorageFault`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub storage: Vec<StorageFault>,
    /// At each crash of a node at a durable operation, list up to this many of its distinct
    /// crash states in [`ClusterReport::crashes`] (0: none; a sweep asks for them).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub crash_states: usize,
    /// The test template's choices, in order: its k-th choice takes the k-th value, fixed as a
    /// schedule's faults are; past them it draws as usual (see [`crate::template`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub template: Vec<u64>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// Options of one cluster run.
pub struct RunOptions<'a> {
    /// Where the nodes' output goes as it is written (node name, stream, bytes).
    pub sink: &'a mut dyn FnMut(&str, Stream, &[u8]),
    /// How the run is steered.
    pub steering: Steering,
    /// Record full syscall traces.
    pub record_trace: bool,
}

/// Where the nodes' output goes (node name, stream, bytes).
type Sink<'a> = &'a mut dyn FnMut(&str, Stream, &[u8]);

struct Sim<M = Vm> {
    cfg: Arc<ClusterConfig>,
    nodes: Vec<Node<M>>,
    net: Network,
    log: DecisionLog,
    ledger: Vec<FaultEvent>,
    events: BTreeMap<(u64, u64), Event>,
    next_seq: u64,
    now: u64,
    random_partition_active: bool,
    /// The scripted faults and the first random-fault gaps are in the queue.
    armed: bool,
    record_trace: bool,
    /// Boot nodes with KVM's dirty log, to fork them.
    dirty_log: bool,
    /// Each node's fork VM, back from a life that ended.
    spare: Vec<Option<M>>,
    /// The storage faults in force: the file's, and the steering's from its point on.
    storage: Vec<StorageFault>,
    /// Crash states to list at a crash (see [`Steering::crash_states`]).
    crash_states: usize,
    /// The crashes at durable operations so far.
    crashes: Vec<CrashRecord>,
    /// Block coverage, by node (empty: none): the blocks to arm in each VM a life of the node
    /// boots in, and those the campaign has seen.
    cover: Vec<Option<(Arc<BlockImage>, Seen)>>,
    /// Each distinct count of decisions taken at the top of a step (see [`ClusterReport::cuts`]).
    cuts: Vec<u64>,
    /// Stop at the first top of a step with this many decisions taken ([`Fork::run_child_at`]).
    stop_at: Option<u64>,
    /// The test template a node runs, if one does.
    template: Option<template::Templated>,
    /// The template stopped without a verdict: why.
    template_stopped: Option<String>,
    /// The template's quiet period began: no new fault.
    quiet: bool,
    /// Stop at this moment ([`moment`]), once: cleared when reached.
    moment: Option<moment::At>,
    /// A process `deja at --exec` started, until it ends ([`moment`]).
    watch: Option<moment::Watch>,
}

/// Runs a cluster to its end, one VM per node.
pub fn run(cfg: ClusterConfig, opts: RunOptions<'_>) -> Result<ClusterReport, ClusterError> {
    run_on::<Vm>(cfg, opts)
}

/// Runs a cluster to its end, each node's lives on machines of type `M`.
pub fn run_on<M: Machine>(cfg: ClusterConfig, opts: RunOptions<'_>) -> Result<ClusterReport, ClusterError> {
    let wall = Instant::now();
    let steering = opts.steering;
    let mut sim = Sim::<M>::boot(cfg, opts.record_trace, false, Vec::new())?;
    sim.crash_states = steering.crash_states;
    let outcome = match steering.at {
        SteerAt::Boot => {
            sim.steer(&steering);
            sim.main_loop(opts.sink, false)?
        }
        SteerAt::Setup => {
            sim.arm();
            match sim.main_loop(opts.sink, true)? {
                Some(outcome) => Some(outcome),
                None => {
                    sim.steer(&steering);
                    sim.main_loop(opts.sink, false)?
                }
            }
        }
    };
    Ok(sim.report(outcome.unwrap_or(Outcome::TimeLimit), wall.elapsed().as_nanos() as u64))
}

impl<M: Machine> Sim<M> {
    /// Boots every node of `cfg`, each armed with its blocks in `cover` (if any); nothing has
    /// run yet.
    fn boot(
        cfg: ClusterConfig,
        record_trace: bool,
        dirty_log: bool,
        cover: Vec<Option<(Arc<BlockImage>, Seen)>>,
    ) -> Result<Sim<M>, ClusterError> {
        let addrs: Vec<[u8; 4]> = cfg.nodes.iter().map(|n| n.address).collect();
        let log = DecisionLog::new(CLUSTER_CONTEXT, cfg.seed);
        let nodes = cfg
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| Node {
                cfg: Arc::new(n.clone()),
                live: None,
                state: State::Down,
                paused: false,
                lives: Vec::new(),
                disk: None,
                stdout: Vec::new(),
                stderr: Vec::new(),
                exits: 0,
                host_run_ns: 0,
                min_exit_ns: u64::MAX,
                host_cores: Vec::new(),
                seed: node_seed(cfg.seed, i),
                blocks: Vec::new(),
                relaunches: 0,
            })
            .collect();
        let mut sim = Sim {
            net: Network::new(cfg.network.clone(), &addrs),
            spare: (0..cfg.nodes.len()).map(|_| None).collect(),
            cfg: Arc::new(cfg),
            nodes,
            log,
            ledger: Vec::new(),
            events: BTreeMap::new(),
            next_seq: 0,
            now: 0,
            random_partition_active: false,
            armed: false,
            record_trace,
            dirty_log,
            storage: Vec::new(),
            crash_states: 0,
            crashes: Vec::new(),
            cover,
            cuts: Vec::new(),
            stop_at: None,
            template: None,
            template_stopped: None,
            quiet: false,
            moment: None,
            watch: None,
        };
        sim.storage = sim.cfg.storage.faults.clone();
        for i in 0..sim.nodes.len() {
            sim.boot_node(i)?;
        }
        for i in 0..sim.nodes.len() {
            sim.run_to_first_syscall(i)?;
        }
        sim.load_template()?;
        Ok(sim)
    }

    /// Everything but the VMs (each node's core stays with its VM).
    fn clone_cold(&self) -> Sim<M> {
        Sim {
            cfg: self.cfg.clone(),
            nodes: self.nodes.iter().map(Node::clone_cold).collect(),
            net: self.net.clone(),
            log: self.log.clone(),
            ledger: self.ledger.clone(),
            events: self.events.clone(),
            next_seq: self.next_seq,
            now: self.now,
            random_partition_active: self.random_partition_active,
            armed: self.armed,
            record_trace: self.record_trace,
            dirty_log: false,
            spare: (0..self.nodes.len()).map(|_| None).collect(),
            storage: self.storage.clone(),
            crash_states: self.crash_states,
            crashes: self.crashes.clone(),
            cover: self.cover.clone(),
            cuts: self.cuts.clone(),
            stop_at: None,
            template: self.template.clone(),
            template_stopped: self.template_stopped.clone(),
            quiet: self.quiet,
            moment: None,
            watch: None,
        }
    }

    /// Queues the scripted faults and draws the first gap of each kind of random fault.
    fn arm(&mut self) {
        if std::mem::replace(&mut self.armed, true) {
            return;
        }
        self.template_due();
        for f in self.cfg.schedule.clone() {
            self.push(f.at_ms.saturating_mul(1_000_000), Event::Scripted(Box::new(f)));
        }
        if let Some(r) = self.cfg.random_faults.clone() {
            for (kind, every) in [
                (RandomFault::Partition, r.partition_every_ms),
                (RandomFault::Kill, r.kill_every_ms),
                (RandomFault::Pause, r.pause_every_ms),
                (RandomFault::Clock, r.clock_every_ms),
            ] {
                if let Some(range) = every {
                    let gap = self.draw_ms(DecisionPoint::Gap(kind), range);
                    self.push(gap, Event::RandomTick(kind));
                }
            }
        }
    }

    /// Applies `steering` here.
    fn steer(&mut self, steering: &Steering) {
        self.log.set_overrides(steering.overrides.clone());
        if let Some(seed) = steering.reseed {
            self.log.reseed(CLUSTER_CONTEXT, seed);
            for (i, n) in self.nodes.iter_mut().enumerate() {
                if let Some(live) = n.live.as_mut() {
                    live.kernel.reseed_decisions(node_seed(seed, i));
                }
            }
        }
        if steering.fates == Fates::Meaning {
            self.log.key_by_meaning(MEANING_CONTEXT, steering.reseed.unwrap_or(self.cfg.seed));
        }
        if let Some(t) = self.template.as_mut() {
            t.given = steering.template.clone();
        }
        if !steering.storage.is_empty() {
            self.storage.extend(steering.storage.iter().cloned());
            for i in 0..self.nodes.len() {
                self.install_storage(i);
            }
        }
    }

    /// Every node is up and has called `setup_complete` in its current life.
    fn all_set_up(&self) -> bool {
        self.nodes.iter().all(|n| n.live.as_ref().is_some_and(|l| l.kernel.setup_completed()))
    }

    fn push(&mut self, at: u64, e: Event) {
        self.events.insert((at, self.next_seq), e);
        self.next_seq += 1;
    }

    /// A duration drawn uniformly from `[a, b]` ms, in ns (at 1 ms granularity).
    fn draw_ms(&mut self, point: DecisionPoint, [a, b]: [u64; 2]) -> u64 {
        let k = if b > a { self.log.decide(point, (b - a).min(100_000) + 1) } else { 0 };
        (a + k).saturating_mul(1_000_000)
    }

    /// When node `i` can next do something (`None`: not before an event).
    fn ready_at(&self, i: usize) -> Option<u64> {
        let n = &self.nodes[i];
        if n.paused {
            return None;
        }
        let live = n.live.as_ref()?;
        match n.state {
            State::Running => Some(live.kernel.virtual_time_ns()),
            State::Idle => live.kernel.next_deadline().map(|d| d.max(live.kernel.virtual_time_ns())),
            State::Down | State::Exited => None,
        }
    }

    fn done(&self) -> bool {
        self.nodes.iter().filter(|n| n.cfg.wait).all(|n| n.state == State::Exited)
    }

    /// Runs the cluster to its end (`Some`), or, with `stop_at_setup`, until every node has
    /// called `setup_complete` (`None`), or until the first top of a step with
    /// [`Sim::stop_at`] decisions taken (`None`, and `stop_at` is cleared).
    fn main_loop(&mut self, sink: Sink<'_>, stop_at_setup: bool) -> Result<Option<Outcome>, ClusterError> {
        self.arm();
        loop {
            let taken = self.log.records().len() as u64;
            if self.cuts.last() != Some(&taken) {
                self.cuts.push(taken);
            }
            if self.stop_at == Some(taken) {
                self.stop_at = None;
                return Ok(None);
            }
            if stop_at_setup && self.all_set_up() {
                return Ok(None);
            }
            if self.moment_due(taken, None) || self.watch.as_ref().is_some_and(|w| w.status.is_some()) {
                return Ok(None);
            }
            self.flush_template_lines(&mut *sink);
            if let Some(why) = &self.template_stopped {
                return Ok(Some(Outcome::Stuck(format!("the test template stopped: {why}"))));
            }
            if self.done() && self.watch.is_none() {
                return Ok(Some(Outcome::Completed));
            }
            let ev_t = self.events.keys().next().map(|k| k.0);
            let ready: Vec<(u64, usize)> =
                (0..self.nodes.len()).filter_map(|i| self.ready_at(i).map(|t| (t, i))).collect();
            let node_t = ready.iter().map(|r| r.0).min();
            let t = match (ev_t, node_t) {
                (Some(e), Some(n)) => e.min(n),
                (Some(e), None) => e,
                (None, Some(n)) => n,
                (None, None) => {
                    if let Some(why) = self.template_never_began() {
                        return Ok(Some(Outcome::Stuck(why)));
                    }
                    let what: Vec<String> = self
                        .nodes
                        .iter()
                        .filter(|n| n.cfg.wait && n.state != State::Exited)
                        .map(|n| format!("{} ({})", n.cfg.name, state_name(n)))
                        .collect();
                    return Ok(Some(Outcome::Stuck(format!(
                        "no node can run and nothing is in flight; waiting for: {}",
                        what.join(", ")
                    ))));
                }
            };
            if self.moment_due(taken, Some(t)) {
                return Ok(None);
            }
            if t > self.cfg.time_limit_ns {
                self.now = self.cfg.time_limit_ns;
                if let Some(why) = self.template_never_began() {
                    return Ok(Some(Outcome::Stuck(why)));
                }
                return Ok(Some(Outcome::TimeLimit));
            }
            self.now = self.now.max(t);
            self.log.set_time(self.now);
            if ev_t.is_some_and(|e| node_t.is_none_or(|n| e <= n)) {
                if let Some((_, e)) = self.events.pop_first() {
                    self.handle(e)?;
                }
                continue;
            }
            let tied: Vec<usize> = ready.iter().filter(|r| Some(r.0) == node_t).map(|r| r.1).collect();
            let pick = if tied.len() > 1 {
                let meaning: Vec<u8> = tied.iter().flat_map(|&i| (i as u32).to_le_bytes()).collect();
                let k = self.log.decide_keyed(DecisionPoint::RunNode { at: t }, tied.len() as u64, &meaning);
                tied[k as usize]
            } else {
                tied[0]
            };
            let others = (0..self.nodes.len())
                .filter(|&j| j != pick)
                .filter_map(|j| self.ready_at(j))
                .chain(ev_t)
                .min()
                .unwrap_or(self.cfg.time_limit_ns)
                .min(self.cfg.time_limit_ns);
            self.step(pick, others, &mut *sink)?;
        }
    }

    /// Runs node `i` until its clock passes `until`, it goes idle or it ends.
    fn step(&mut self, i: usize, until: u64, sink: Sink<'_>) -> Result<(), ClusterError> {
        let now = self.now;
        let n = &mut self.nodes[i];
        let name = n.cfg.name.clone();
        let Some(live) = n.live.as_mut() else { return Ok(()) };
        if n.state == State::Idle {
            if !live.kernel.resume(live.vm.memory(), now, Vec::new()) {
                if live.kernel.exit_status().is_some() {
                    return self.ended(i);
                }
                return Ok(());
            }
            n.state = State::Running;
        }
        live.kernel.set_yield_at(Some(until.max(live.kernel.virtual_time_ns() + 1)));
        let (stdout, stderr) = (&mut n.stdout, &mut n.stderr);
        let mut out = |s: Stream, b: &[u8]| {
            match s {
                Stream::Stdout => stdout.extend_from_slice(b),
                Stream::Stderr => stderr.extend_from_slice(b),
            }
            sink(&name, s, b);
        };
        let before = live.vm.counters();
        let stop = live.vm.run_until(&mut live.kernel, &mut out, None).map_err(|source| match source {
            deja_vmm::VmError::NoProgress { syscalls, .. } => {
                ClusterError::NoProgress { node: name.clone(), source, syscalls }
            }
            source => ClusterError::Vm { node: name.clone(), source },
        })?;
        let after = live.vm.counters();
        let runs = after.exits - before.exits;
        let ns = after.host_run_ns - before.host_run_ns;
        n.exits += runs;
        n.host_run_ns += ns;
        for c in &after.host_cores {
            if let Err(at) = n.host_cores.binary_search(c) {
                n.host_cores.insert(at, *c);
            }
        }
        if let Some(per_exit) = ns.checked_div(runs) {
            n.min_exit_ns = n.min_exit_ns.min(per_exit);
        }
        let sent_at = live.kernel.virtual_time_ns();
        let packets = live.kernel.take_packets();
        match stop {
            Stop::Yield => {}
            Stop::Idle => n.state = State::Idle,
            Stop::Exited(_) | Stop::Crashed => {}
            Stop::AtSyscall | Stop::Breakpoint(_) => {}
        }
        for p in packets {
            self.send(sent_at, i, p);
        }
        match stop {
            Stop::Crashed => self.crashed(i)?,
            Stop::Exited(_) => self.ended(i)?,
            _ => {}
        }
        if self.template.as_ref().is_some_and(|t| t.node == i) {
            self.template_act(None)?;
        }
        self.watch_ended(i);
        self.template_due();
        Ok(())
    }

    /// Routes a packet node `from` sent at `at`.
    fn send(&mut self, at: u64, from: usize, p: Packet) {
        if p.payload == Payload::Syn {
            let t = at + self.net.connect_timeout_ns();
            self.push(t, Event::SynCheck { node: from, src: p.src, dst: p.dst });
        }
        self.log.set_time(at);
        for d in self.net.route(&mut self.log, &mut self.ledger, at, from, p) {
            self.push(d.at, Event::Deliver(Box::new(d)));
        }
    }

    /// Sends an RST to the peer of each connection of node `i` on other nodes.
    fn reset_peers(&mut self, i: usize, conns: Vec<(SockAddr, SockAddr)>) {
        for (local, remote) in conns {
            if self.net.node_of(remote).is_some_and(|j| j != i) {
                self.send(self.now, i, Packet { src: local, dst: remote, payload: Payload::Rst });
            }
        }
    }

    fn deliver(&mut self, d: Delivery) -> Result<(), ClusterError> {
        let now = self.now;
        let n = &mut self.nodes[d.node];
        match (n.state, n.live.as_mut()) {
            (State::Running | State::Idle, Some(live)) => {
                let runnable = live.kernel.resume(live.vm.memory(), now, vec![d.packet]);
                let packets = live.kernel.take_packets();
                let at = live.kernel.virtual_time_ns();
                if n.state == State::Idle && runnable {
                    n.state = State::Running;
                }
                for p in packets {
                    self.send(at, d.node, p);
                }
            }
            (State::Exited, _) if d.packet.payload.is_stream() && d.packet.payload != Payload::Rst => {
                // The program is gone but its host answers.
                let p = Packet { src: d.packet.dst, dst: d.packet.src, payload: Payload::Rst };
                self.send(now, d.node, p);
            }
            _ => {} // down: lost
        }
        Ok(())
    }

    fn index_of(&self, name: &str) -> usize {
        self.nodes.iter().position(|n| n.cfg.name == name).unwrap_or(0)
    }

    fn handle(&mut self, e: Event) -> Result<(), ClusterError> {
        match e {
            Event::Deliver(d) => self.deliver(*d)?,
            Event::SynCheck { node, src, dst } => {
                if self.net.syn_expired(src, dst) {
                    self.note("connect-timeout", format!("{src} -> {dst}"));
                    let d = Delivery {
                        at: self.now,
                        node,
                        packet: Packet { src: dst, dst: src, payload: Payload::ConnectTimeout },
                    };
                    self.deliver(d)?;
                }
            }
            Event::Scripted(f) => self.scripted(&f)?,
            Event::RandomTick(kind) => self.random_tick(kind)?,
            Event::Heal { epoch } => {
                if self.net.epoch == epoch {
                    self.heal();
                }
                self.random_partition_active = false;
            }
            Event::Restart(i) => self.restart(i)?,
            Event::Revive(i) => {
                if self.nodes[i].state == State::Down {
                    let name = self.nodes[i].cfg.name.clone();
                    self.note("restart", format!("{name} after its crash"));
                    self.boot_node(i)?;
                }
            }
            Event::Relaunch(i) => {
                if self.nodes[i].state == State::Down {
                    let n = &mut self.nodes[i];
                    n.relaunches += 1;
                    let name = n.cfg.name.clone();
                    self.note("relaunch", format!("{name} by its restart policy"));
                    self.boot_node(i)?;
                }
            }
            Event::Resume(i) => self.resume(i)?,
            Event::TcpTimeout { epoch } => {
                if self.net.epoch == epoch && self.net.partitioned() {
                    self.partition_resets()?;
                }
            }
            Event::Template => {
                if let Some(t) = self.template.as_mut() {
                    t.wake = None;
                }
                self.template_act(Some(|c, now, host| if c.begun() { c.wake(now, host) } else { c.begin(now, host) }))?;
            }
        }
        Ok(())
    }
}

fn state_name<M>(n: &Node<M>) -> &'static str {
    if n.paused {
        return "paused";
    }
    match n.state {
        State::Running => "running",
        State::Idle => "blocked",
        State::Down => "down",
        State::Exited => "exited",
    }
}
