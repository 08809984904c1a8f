//! deja clusters: several programs, each in its own VM with its own file system, on one
//! simulated network, driven by one deterministic scheduler, with network, process and clock
//! faults.
//!
//! A cluster is described by a TOML file ([`config`]); [`run`] boots every node, runs them on
//! one virtual time line ([`sim`], which also documents the fault model) and returns a
//! [`ClusterReport`]. The run is a pure function of the file, the binaries, the seed and the
//! decision overrides, under the settings its VMs are set up with ([`ClusterConfig::settings`]):
//! the [`ClusterReport::digest`] of two runs with the same inputs is equal.
//! No host socket is ever opened for a guest: the addresses exist only in the simulation.
//!
//! The simulator asks a [`Machine`] to run each life of a node: [`run`] uses a KVM VM,
//! [`run_on`] any other (the unit tests' fake nodes, whose programs are Rust state machines
//! making syscalls into the real kernel).

pub mod config;
pub mod network;
pub mod sim;
pub mod template;

use std::collections::BTreeMap;

use deja_kernel::{DecisionRecord, ExitStatus, RunReport};
use serde::Serialize;
use snafu::Snafu;

pub use config::{ClusterConfig, ConfigError, InvalidCluster, NodeFault, StorageConfig, StorageFault};
pub use network::NetStats;
pub use sim::moment;
pub use sim::{
    node_seed, run, run_on, ClusterReset, Counters, Fates, Fork, LateStats, Machine, RunOptions, SetupBlocks, SteerAt,
    Steering, LATE_FORKS,
};

/// Why a cluster could not run (a guest that crashes is not an error). Each names the node it
/// concerns, where there is one, and keeps the error that stopped it.
#[derive(Debug, Snafu)]
#[snafu(visibility(pub(crate)))]
pub enum ClusterError {
    /// A node's VM could not be booted.
    #[snafu(display("node {node}: {source}"))]
    Boot {
        /// The node.
        node: String,
        /// Why it did not boot.
        source: deja_vmm::RunError,
    },
    /// A node's VM failed: running it, capturing it for a fork or resetting it to one.
    #[snafu(display("node {node}: {source}"))]
    Vm {
        /// The node.
        node: String,
        /// The shell's error.
        source: deja_vmm::VmError,
    },
    /// A node stopped before its first syscall on the way to a boot fork.
    #[snafu(display("node {node}: ended before its first syscall: {stop:?}"))]
    EndedBeforeFirstSyscall {
        /// The node.
        node: String,
        /// How it stopped.
        stop: deja_vmm::Stop,
    },
    /// A fork had no VM left for a node it should hold.
    #[snafu(display("node {node}: the fork lost its VM"))]
    ForkLostVm {
        /// The node.
        node: String,
    },
    /// A fork was given steering meant for another fork point.
    #[snafu(display("a fork at {fork:?} cannot take steering meant for {steering:?}"))]
    Steering {
        /// Where the fork is.
        fork: SteerAt,
        /// Where the steering is meant to apply.
        steering: SteerAt,
    },
    /// A node's test template cannot be run (its directory is missing, it has no driver).
    #[snafu(display("node {node}: test template: {problem}"))]
    TemplateRun {
        /// The node.
        node: String,
        /// What is wrong.
        problem: String,
    },
    /// A moment of a run cannot give what was asked of it (a node that is down or paused, a
    /// command that cannot start).
    #[snafu(display("{problem}"))]
    Moment {
        /// What and why.
        problem: String,
    },
    /// A node ran past the watchdog's limit without a syscall or an exception.
    #[snafu(display("node {node}: {source}"))]
    NoProgress {
        /// The node.
        node: String,
        /// What the watchdog saw, for people (host time and where: not deterministic).
        source: deja_vmm::VmError,
        /// Syscalls the node's current life had made (deterministic).
        syscalls: u64,
    },
}

/// One entry of the cluster's fault ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct FaultEvent {
    /// Virtual time, ns.
    pub time_ns: u64,
    /// `partition`, `partition-one-way`, `heal`, `kill`, `restart`, `pause`, `resume`,
    /// `clock-jump`, `clock-skew`, `udp-loss`, `udp-duplicate`, `udp-reorder`, `tcp-reset`,
    /// `connect-timeout`; `crash` (a node crashed at a durable operation or at its fail-stop),
    /// `eio`, `enospc` (an I/O error a node's life was given); `not-applied` (a scripted fault
    /// that could not be applied: a kill of a node that is down, a restart of one that runs).
    pub kind: String,
    /// Which nodes or packets.
    pub detail: String,
    /// The same fault as a scripted one (partitions, heals, kills, restarts, pauses, resumes,
    /// clock faults), at its time in ms: what a minimized schedule is made of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scripted: Option<config::ScheduledFault>,
}

impl FaultEvent {
    pub(crate) fn new(time_ns: u64, kind: &str, detail: String) -> Self {
        FaultEvent { time_ns, kind: kind.to_string(), detail, scripted: None }
    }
}

/// How a cluster run ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "detail", rename_all = "snake_case")]
pub enum Outcome {
    /// Every node marked `wait` exited.
    Completed,
    /// The virtual-time budget ran out first.
    TimeLimit,
    /// No node could ever run again, with nodes still to wait for.
    Stuck(String),
}

/// One node's part of a run.
#[derive(Debug, Clone, Serialize)]
pub struct NodeReport {
    /// Name.
    pub name: String,
    /// Address.
    pub address: String,
    /// The run waited for it.
    pub waited: bool,
    /// `exited`, `down` or `running` (stopped by the end of the run).
    pub ended: String,
    /// Each life (restarts after kills start new ones), in order.
    pub lives: Vec<RunReport>,
    /// Everything it wrote to stdout, over all lives.
    pub stdout: String,
    /// And to stderr.
    pub stderr: String,
    /// VM exits.
    pub vm_exits: u64,
    /// Host wall time inside `KVM_RUN` (guest code plus exit round trips), ns.
    pub host_run_ns: u64,
    /// The shortest average `KVM_RUN` time of one stint (an estimate of one exit's round trip).
    pub min_exit_ns: u64,
    /// The host cores its vCPU thread was seen on (display only).
    #[serde(default)]
    pub host_cores: Vec<u32>,
    /// Storage faults may strike it (`[faults.storage] nodes`).
    pub storage_faults: bool,
    /// Under block coverage ([`Fork::with_blocks`]): the blocks its lives reached while they
    /// were armed, in the order reached. Outside the digest: the run is the same armed or not.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocks: Vec<deja_vmm::coverage::BlockHit>,
}

/// How many durable operations on each path the `lives` of a node made, over all of them:
/// the number the next one on a path continues from.
pub fn durable_counts(lives: &[RunReport]) -> BTreeMap<&str, u64> {
    let mut total: BTreeMap<&str, u64> = BTreeMap::new();
    for life in lives {
        let mut top: BTreeMap<&str, u64> = BTreeMap::new();
        for d in &life.durable_ops {
            let c = top.entry(d.path.as_str()).or_default();
            *c = (*c).max(d.nth);
        }
        for (p, k) in top {
            *total.entry(p).or_default() += k;
        }
    }
    total
}

/// One durable operation of a node, numbered over its whole run (every life).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeDurableOp {
    /// The path.
    pub path: String,
    /// Its number among the node's durable operations on `path`, from 1, over every life.
    pub nth: u64,
    /// Virtual time, ns.
    pub virtual_time_ns: u64,
    /// Something was pending on its target.
    pub promotes: bool,
}

impl NodeReport {
    /// The exit status of its last life.
    pub fn exit(&self) -> Option<&ExitStatus> {
        self.lives.last().map(|l| &l.exit)
    }

    /// Syscalls over all lives.
    pub fn syscalls(&self) -> u64 {
        self.lives.iter().map(|l| l.syscalls).sum()
    }

    /// True if an SDK assertion failed in any life.
    pub fn assertion_failed(&self) -> bool {
        self.lives.iter().any(|l| l.assertion_failed())
    }

    /// Its durable operations (on paths storage faults may strike), numbered over the whole
    /// run: what crash points by meaning can name.
    pub fn durable_ops(&self) -> Vec<NodeDurableOp> {
        let mut base: BTreeMap<String, u64> = BTreeMap::new();
        let mut out = Vec::new();
        for life in &self.lives {
            let mut top: BTreeMap<String, u64> = BTreeMap::new();
            for d in &life.durable_ops {
                let from = base.get(&d.path).copied().unwrap_or(0);
                out.push(NodeDurableOp {
                    path: d.path.clone(),
                    nth: from + d.nth,
                    virtual_time_ns: d.virtual_time_ns,
                    promotes: d.promotes,
                });
                let t = top.entry(d.path.clone()).or_default();
                *t = (*t).max(d.nth);
            }
            for (p, k) in top {
                *base.entry(p).or_default() += k;
            }
        }
        out
    }

    /// Its file operations by kind and path, counted over the whole run (where errors can be
    /// placed).
    pub fn io_ops(&self) -> Vec<deja_kernel::IoCount> {
        let mut counts: BTreeMap<(deja_kernel::IoOp, String), u64> = BTreeMap::new();
        for life in &self.lives {
            for c in &life.io_ops {
                *counts.entry((c.op, c.path.clone())).or_default() += c.count;
            }
        }
        counts.into_iter().map(|((op, path), count)| deja_kernel::IoCount { op, path, count }).collect()
    }

    /// True when it had not exited when the run ended (its last life was stopped by deja).
    pub fn unfinished(&self) -> bool {
        self.ended == "running"
    }
}

/// A node's crash at a durable operation (or at its fail-stop).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CrashRecord {
    /// The node.
    pub node: String,
    /// The life that crashed (0 is the first).
    pub life: usize,
    /// Virtual time, ns.
    pub time_ns: u64,
    /// Where, in the life's words: `before durable op #2 on /data/wal`.
    pub point: String,
    /// The operations pending at the crash, in program order.
    pub pending: Vec<String>,
    /// What the crash image kept of them.
    pub kept: Option<deja_kernel::KeptOps>,
    /// The distinct crash states there, when the run asked for them
    /// ([`Steering::crash_states`]).
    pub states: Vec<deja_kernel::KeptOps>,
}

/// The result of a cluster run.
#[derive(Debug, Clone, Serialize)]
pub struct ClusterReport {
    /// `deja.cluster-report/1` (see `contracts/cluster-report.schema.json`).
    pub schema: String,
    /// How it ended.
    pub outcome: Outcome,
    /// The seed.
    pub seed: u64,
    /// Virtual time at the end, ns.
    pub virtual_time_ns: u64,
    /// Host wall time, ns (display only).
    pub wall_ns: u64,
    /// BLAKE3 over every life's digest, the cluster decisions and the fault ledger.
    pub digest: String,
    /// The nodes, in file order.
    pub nodes: Vec<NodeReport>,
    /// The fault ledger.
    pub faults: Vec<FaultEvent>,
    /// The cluster's decisions (network, scheduling, random faults), in order.
    pub decisions: Vec<DecisionRecord>,
    /// Network counters.
    pub network: NetStats,
    /// BLAKE3 of each node's binary.
    pub binary_hashes: BTreeMap<String, String>,
    /// The crashes at durable operations, in order.
    pub crashes: Vec<CrashRecord>,
    /// The test template a node ran, if one did (see [`template`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<template::TemplateReport>,
    /// Where a later fork of this course can be taken ([`Fork::run_child_at`]): each distinct
    /// count of decisions taken at the top of a scheduler step, ascending (in process only).
    #[serde(skip)]
    pub cuts: Vec<u64>,
}

impl ClusterReport {
    /// The run as two runs are compared ([`deja_vmm::divergence::first_difference`]): every
    /// life of every node, the decisions and fault ledger, and `output` (what the sink saw).
    pub fn record(&self, output: &[u8]) -> deja_vmm::divergence::RunRecord {
        use deja_vmm::divergence::{hash, LifeRecord, RunRecord};
        let mut lives = Vec::new();
        for n in &self.nodes {
            for (i, l) in n.lives.iter().enumerate() {
                lives.push(LifeRecord::new(format!("node {} life {i}", n.name), l, None));
            }
        }
        let decisions = serde_json::to_vec(&(&self.decisions, &self.faults)).expect("plain data serializes");
        let cores = self.nodes.iter().flat_map(|n| n.host_cores.iter().copied()).collect();
        RunRecord::new(self.digest.clone(), lives, output, hash(&decisions), cores)
    }

    /// The first component in which run `other` differs from this one, in words (`None`: the
    /// same run). Outputs are compared node by node, as each node's stdout and stderr.
    pub fn difference(&self, other: &ClusterReport) -> Option<String> {
        let output = |r: &ClusterReport| {
            let mut o = Vec::new();
            for n in &r.nodes {
                o.extend_from_slice(n.stdout.as_bytes());
                o.extend_from_slice(n.stderr.as_bytes());
            }
            o
        };
        deja_vmm::divergence::first_difference(&self.record(&output(self)), &other.record(&output(other)))
    }

    /// The waited nodes that had not exited when the run ended (the time budget ran out, or it
    /// got stuck): no verdict can be drawn from how they ended.
    pub fn unfinished(&self) -> Vec<&str> {
        self.nodes.iter().filter(|n| n.waited && n.unfinished()).map(|n| n.name.as_str()).collect()
    }

    /// True if an SDK assertion failed on any node.
    pub fn assertion_failed(&self) -> bool {
        self.nodes.iter().any(|n| n.assertion_failed())
    }

    /// Syscalls over every node.
    pub fn syscalls(&self) -> u64 {
        self.nodes.iter().map(|n| n.syscalls()).sum()
    }

    /// The first waited node whose last life did not exit with 0, and how it ended (a node deja
    /// stopped because the run ended is not one: it did not end).
    pub fn first_failure(&self) -> Option<(&str, &ExitStatus)> {
        self.nodes.iter().filter(|n| n.waited && !n.unfinished()).find_map(|n| {
            n.exit().filter(|e| !matches!(e, ExitStatus::Exited { code: 0 })).map(|e| (n.name.as_str(), e))
        })
    }
}
