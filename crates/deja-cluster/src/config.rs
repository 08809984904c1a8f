//! The cluster file: nodes, network, seed, time budget and faults, in TOML.
//!
//! ```toml
//! seed = 7
//! time_limit_ms = 20000        # virtual time budget
//! memory_mib = 512             # guest RAM per node
//!
//! [network]
//! latency_ms = [1, 5]          # one-way latency, uniform in the range (the spread is jitter)
//! udp_loss = 0.01              # probability a datagram is lost
//! udp_duplicate = 0.01         # probability a datagram is delivered twice
//! udp_reorder = 0.05           # probability a datagram is held back behind later ones
//! connect_timeout_ms = 3000    # a SYN nobody answers times out after this
//! tcp_timeout_ms = 10000       # a partition longer than this resets the TCP connections it cuts
//!
//! [faults.random]              # faults drawn from the seed (each range is [min, max] ms)
//! partition_every_ms = [1000, 4000]
//! partition_for_ms = [500, 3000]
//! one_way = 0.25               # share of partitions that cut one direction only
//! kill_every_ms = [3000, 8000]
//! down_for_ms = [200, 2000]
//! pause_every_ms = [3000, 8000]
//! pause_for_ms = [100, 1000]
//! clock_every_ms = [2000, 6000]
//! clock_jump_ms = [100, 2000]
//! targets = ["a", "b"]         # nodes that may be killed, paused or have their clock moved
//! partition_targets = ["a", "b", "c"]  # nodes random partitions split (default: every node);
//!                              # the others keep reaching every node
//! until_ms = 5000              # no random fault starts after this
//!
//! [[faults.schedule]]          # scripted faults
//! at_ms = 1000
//! action = "partition"         # partition, partition-one-way, heal, kill, restart, pause,
//! groups = [["a"], ["b", "c"]] # resume, clock-jump, clock-skew
//!                              # (a partition cuts only between its groups: a node no group
//!                              # names keeps reaching every node)
//!
//! [faults.storage]             # storage faults: where they may strike (default: everywhere)
//! nodes = ["a"]                # nodes that receive storage faults
//! paths = ["/data/"]           # path prefixes that do
//! torn_writes = false          # crash images may tear a write (the crash-state modes)
//! reordered_writes = false     # crash images keep any subset of what is pending
//! crash_model = "posix-weak"   # every node's crash images keep to it: posix-weak, xfs,
//!                              # ext4-ordered, process-kill (docs/DURABILITY.md)
//!
//! [[faults.storage.crash]]     # crash a node at a durable operation, then restart it
//! node = "a"
//! when = "before"              # before | after
//! path = "/data/wal"
//! nth = 3                      # its 3rd durable operation on /data/wal over the run
//!
//! [[faults.storage.kill]]      # kill a process of a node at a durable operation it makes
//! node = "a"
//! process = "worker"           # its name (comm), or its pid; never the node's first program
//! when = "before"              # before | after
//! nth = 2                      # the 2nd durable operation of processes of that name, over the run
//!
//! [[faults.storage.error]]     # an I/O error on a node's operation
//! node = "a"
//! op = "fsync"                 # write, fsync, truncate, fallocate, create, rename, read
//! path = "/data/wal"
//! nth = 2                      # its 2nd fsync of /data/wal over the run (0: every one)
//! errno = "eio"                # eio | enospc
//!
//! [[node]]
//! name = "a"
//! address = "10.0.0.1"
//! binary = "../target/guests/echo-server"   # relative to this file
//! args = ["--listen", "10.0.0.1:7000"]
//! env = { RUST_LOG = "info" }
//! files = { "/etc/app.toml" = "app.toml" }   # guest path = host path (relative to this file)
//! wait = true                  # the run ends when every waiting node has exited
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use snafu::{ensure, OptionExt, ResultExt, Snafu};

/// Why a cluster file was refused.
#[derive(Debug, Snafu)]
#[snafu(visibility(pub(crate)))]
pub enum ConfigError {
    /// The file could not be read.
    #[snafu(display("cannot read {}: {source}", path.display()))]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Not valid TOML for a cluster.
    #[snafu(display("{}: {source}", path.display()))]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        source: toml::de::Error,
    },
    /// Valid TOML that describes an impossible cluster.
    #[snafu(display("{}: {source}", path.display()))]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        source: InvalidCluster,
    },
}

/// What makes a parsed cluster file impossible to run ([`ClusterConfig::from_file`]); each
/// names the field or node it concerns.
#[derive(Debug, Snafu)]
#[snafu(visibility(pub(crate)))]
pub enum InvalidCluster {
    /// The file has no `[[node]]`.
    #[snafu(display("no [[node]]: a cluster needs at least one node"))]
    NoNodes,
    /// More nodes than a cluster holds.
    #[snafu(display("{count} nodes; at most 64"))]
    TooManyNodes {
        /// How many the file has.
        count: usize,
    },
    /// `memory_mib` out of range.
    #[snafu(display("memory_mib = {mib}: between 16 and 4096"))]
    Memory {
        /// The value in the file.
        mib: u64,
    },
    /// `network.latency_ms` is not a range within a minute.
    #[snafu(display("network.latency_ms = [{min}, {max}]: need 0 <= min <= max <= 60000"))]
    Latency {
        /// Its first bound.
        min: f64,
        /// Its second bound.
        max: f64,
    },
    /// A `network` probability outside [0, 1].
    #[snafu(display("network.{field} = {value}: a probability between 0 and 1"))]
    NetworkProbability {
        /// The field (`udp_loss`, `udp_duplicate`, `udp_reorder`).
        field: &'static str,
        /// Its value.
        value: f64,
    },
    /// A node name with characters other than letters, digits, `-` and `_`, or empty.
    #[snafu(display("node name {name:?}: use letters, digits, - and _"))]
    NodeName {
        /// The name.
        name: String,
    },
    /// A node's `fail_stop` that is not a mode.
    #[snafu(display("node {node}: {problem}"))]
    FailStop {
        /// The node.
        node: String,
        /// What is wrong.
        problem: String,
    },
    /// A node's CPU count out of range.
    #[snafu(display("node {node}: cpus = {cpus}; a program may be shown 1 to {}", deja_kernel::MAX_CPUS))]
    Cpus {
        /// The node.
        node: String,
        /// What the file says.
        cpus: u32,
    },
    /// Two nodes of one name.
    #[snafu(display("node name {name:?} appears twice"))]
    DuplicateName {
        /// The name.
        name: String,
    },
    /// A node address that is not IPv4.
    #[snafu(display("node {node}: address {address:?} is not IPv4"))]
    NotIpv4 {
        /// The node.
        node: String,
        /// Its address as written.
        address: String,
    },
    /// A loopback, unspecified or multicast node address.
    #[snafu(display("node {node}: address {address} is loopback, unspecified or multicast"))]
    ReservedAddress {
        /// The node.
        node: String,
        /// Its address.
        address: String,
    },
    /// Two nodes at one address.
    #[snafu(display("node {node}: address {address} is taken"))]
    AddressTaken {
        /// The node that comes second.
        node: String,
        /// The address.
        address: String,
    },
    /// A node names neither a binary nor an image, or both.
    #[snafu(display("node {node}: give it exactly one of binary = \"PATH\" and image = \"IMAGE.tar\""))]
    NodeProgram {
        /// The node.
        node: String,
    },
    /// A node's image is malformed, or its program cannot be found in it.
    #[snafu(display("node {node}: image {}: {problem}", path.display()))]
    NodeImage {
        /// The node.
        node: String,
        /// The image file.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// A dynamically linked binary's loader or libraries cannot be found on the host.
    #[snafu(display("node {node}: {problem}"))]
    NodeLibraries {
        /// The node.
        node: String,
        /// What is missing.
        problem: String,
    },
    /// A node's binary or one of its files cannot be read.
    #[snafu(display("node {node}: cannot read {}: {source}", path.display()))]
    ReadNodeFile {
        /// The node.
        node: String,
        /// The host file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A guest path deja cannot declare.
    #[snafu(display("node {node}: file {guest:?}: {problem}"))]
    GuestPath {
        /// The node.
        node: String,
        /// The guest path.
        guest: String,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// A scheduled fault names a node the file does not have.
    #[snafu(display("fault at {at_ms} ms names an unknown node {name:?}"))]
    UnknownFaultNode {
        /// When the fault strikes.
        at_ms: u64,
        /// The unknown name.
        name: String,
    },
    /// A scheduled fault that acts on one node without `node`.
    #[snafu(display("fault at {at_ms} ms ({action:?}) needs `node`"))]
    FaultNeedsNode {
        /// When the fault strikes.
        at_ms: u64,
        /// What it does.
        action: Action,
    },
    /// A partition without two non-empty `groups`.
    #[snafu(display(
        "partition at {at_ms} ms needs `groups` with at least two non-empty groups: only traffic \
         between the groups is cut, and a node no group names keeps reaching every node"
    ))]
    PartitionNeedsGroups {
        /// When the fault strikes.
        at_ms: u64,
    },
    /// A one-way partition without `from` or `to`.
    #[snafu(display("one-way partition at {at_ms} ms needs `from` and `to`"))]
    OneWayNeedsEnds {
        /// When the fault strikes.
        at_ms: u64,
    },
    /// A clock jump backwards.
    #[snafu(display("clock-jump at {at_ms} ms: clocks only jump forward (ms >= 0)"))]
    ClockJumpBackwards {
        /// When the fault strikes.
        at_ms: u64,
    },
    /// `faults.random.targets` names a node the file does not have.
    #[snafu(display("faults.random.targets names an unknown node {name:?}"))]
    UnknownRandomTarget {
        /// The unknown name.
        name: String,
    },
    /// `faults.random.partition_targets` names a node the file does not have.
    #[snafu(display("faults.random.partition_targets names an unknown node {name:?}"))]
    UnknownPartitionTarget {
        /// The unknown name.
        name: String,
    },
    /// `faults.random.partition_targets` names a node twice, or fewer than two nodes.
    #[snafu(display("faults.random.partition_targets: {problem}"))]
    PartitionTargets {
        /// What is wrong.
        problem: String,
    },
    /// A `faults.random` range that is empty, reversed or (for a period) starts at 0.
    #[snafu(display("faults.random.{field} = [{min}, {max}]: need 0 < min <= max"))]
    RandomRange {
        /// The field.
        field: &'static str,
        /// Its first bound.
        min: u64,
        /// Its second bound.
        max: u64,
    },
    /// A storage fault or target names a node the file does not have.
    #[snafu(display("faults.storage names an unknown node {name:?}"))]
    UnknownStorageNode {
        /// The unknown name.
        name: String,
    },
    /// A storage fault on a node the storage targets leave out, or on a path they leave out.
    #[snafu(display("faults.storage: {what} is outside faults.storage's nodes and paths"))]
    StorageOutsideTargets {
        /// The fault, in words.
        what: String,
    },
    /// A storage path that is not absolute, or a crash or error counted from 0.
    #[snafu(display("faults.storage: {what}"))]
    StorageFault {
        /// What is wrong.
        what: String,
    },
    /// `faults.random.one_way` outside [0, 1].
    #[snafu(display("faults.random.one_way = {value}: a probability"))]
    OneWayProbability {
        /// Its value.
        value: f64,
    },
}

/// A cluster as written in the file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterFile {
    /// The seed (overridden by `--seed`).
    #[serde(default)]
    pub seed: u64,
    /// Virtual-time budget in ms.
    #[serde(default = "default_time_limit")]
    pub time_limit_ms: u64,
    /// Guest RAM per node in MiB.
    #[serde(default = "default_memory")]
    pub memory_mib: u64,
    /// The network.
    #[serde(default)]
    pub network: NetworkConfig,
    /// Faults.
    #[serde(default)]
    pub faults: FaultsConfig,
    /// The nodes.
    #[serde(default, rename = "node")]
    pub nodes: Vec<NodeFile>,
}

fn default_time_limit() -> u64 {
    60_000
}

fn default_memory() -> u64 {
    512
}

/// Network parameters.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NetworkConfig {
    /// One-way latency range in ms.
    #[serde(default = "default_latency")]
    pub latency_ms: [f64; 2],
    /// Probability a datagram is lost.
    #[serde(default)]
    pub udp_loss: f64,
    /// Probability a datagram is duplicated.
    #[serde(default)]
    pub udp_duplicate: f64,
    /// Probability a datagram is held back (reordered).
    #[serde(default)]
    pub udp_reorder: f64,
    /// When an unanswered SYN times out.
    #[serde(default = "default_connect_timeout")]
    pub connect_timeout_ms: u64,
    /// How long a partition may cut a TCP connection before both ends are reset.
    #[serde(default = "default_tcp_timeout")]
    pub tcp_timeout_ms: u64,
}

fn default_latency() -> [f64; 2] {
    [1.0, 2.0]
}

fn default_connect_timeout() -> u64 {
    3_000
}

fn default_tcp_timeout() -> u64 {
    10_000
}

impl Default for NetworkConfig {
    fn default() -> Self {
        NetworkConfig {
            latency_ms: default_latency(),
            udp_loss: 0.0,
            udp_duplicate: 0.0,
            udp_reorder: 0.0,
            connect_timeout_ms: default_connect_timeout(),
            tcp_timeout_ms: default_tcp_timeout(),
        }
    }
}

/// Fault settings.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultsConfig {
    /// Faults drawn from the seed.
    #[serde(default)]
    pub random: Option<RandomFaults>,
    /// Scripted faults.
    #[serde(default)]
    pub schedule: Vec<ScheduledFault>,
    /// Storage faults and where they may strike.
    #[serde(default)]
    pub storage: StorageFile,
}

/// `[faults.storage]` as written in the file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StorageFile {
    /// Nodes that receive storage faults (default: every node).
    #[serde(default)]
    pub nodes: Vec<String>,
    /// Path prefixes that do (default: every path).
    #[serde(default)]
    pub paths: Vec<String>,
    /// Crash images may keep a prefix of the pending operations and tear the next write.
    #[serde(default)]
    pub torn_writes: bool,
    /// Crash images may keep any subset of the pending operations.
    #[serde(default)]
    pub reordered_writes: bool,
    /// The crash model every node's crash images keep to (default `posix-weak`).
    #[serde(default)]
    pub crash_model: deja_kernel::CrashModel,
    /// Crashes at durable operations.
    #[serde(default)]
    pub crash: Vec<CrashFile>,
    /// I/O errors on chosen operations.
    #[serde(default)]
    pub error: Vec<ErrorFile>,
    /// Processes killed at durable operations they make.
    #[serde(default)]
    pub kill: Vec<KillFile>,
}

/// `[[faults.storage.kill]]`: a process of a node (not its first program) killed with
/// `SIGKILL` at a durable operation it makes; the node goes on.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KillFile {
    /// The node.
    pub node: String,
    /// The process's name (its `comm`), or its pid.
    pub process: String,
    /// `before` or `after` the operation.
    pub when: deja_kernel::When,
    /// Which durable operation of processes of that name over the node's run, from 1.
    pub nth: u64,
}

/// `[[faults.storage.crash]]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CrashFile {
    /// The node.
    pub node: String,
    /// `before` or `after` the operation.
    pub when: deja_kernel::When,
    /// The path the operation makes durable.
    pub path: String,
    /// Which durable operation on the path over the node's run, from 1.
    pub nth: u64,
}

/// `[[faults.storage.error]]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorFile {
    /// The node.
    pub node: String,
    /// Which operation.
    pub op: deja_kernel::IoOp,
    /// Its path.
    pub path: String,
    /// Which one over the node's run, from 1 (0: every one).
    pub nth: u64,
    /// The error (default `eio`).
    #[serde(default = "eio")]
    pub errno: deja_kernel::IoErrno,
}

fn eio() -> deja_kernel::IoErrno {
    deja_kernel::IoErrno::Eio
}

/// A storage fault on one node, by meaning: a crash at its n-th durable operation on a path
/// (counted over the node's whole run, every life), or an I/O error on its n-th operation of a
/// kind on a path (likewise). In files: `{"node": "server", "crash": {...}}` or `{"node":
/// "server", "error": {...}}`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct StorageFault {
    /// The node.
    pub node: String,
    /// The fault.
    #[serde(flatten)]
    pub fault: NodeFault,
}

/// What a [`StorageFault`] does.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeFault {
    /// A crash before or after a durable operation; the node restarts at once.
    Crash(deja_kernel::OpCrash),
    /// An I/O error.
    Error(deja_kernel::ErrorRule),
    /// A process of the node killed at a durable operation it makes.
    Kill(deja_kernel::ProcessKill),
}

impl StorageFault {
    /// In words: `crash server before durable op #3 on /data/wal`, `EIO on fsync #2 of
    /// /data/wal on server`.
    pub fn describe(&self) -> String {
        match &self.fault {
            NodeFault::Crash(c) => match &c.keep {
                Some(k) => format!("crash {} {}, {}", self.node, c.point(), k.describe()),
                None => format!("crash {} {}", self.node, c.point()),
            },
            NodeFault::Error(r) => format!("{} on {}", r.describe(), self.node),
            NodeFault::Kill(k) => format!("{} on {}", k.point(), self.node),
        }
    }

    /// The path it concerns.
    pub fn path(&self) -> &str {
        match &self.fault {
            NodeFault::Crash(c) => &c.path,
            NodeFault::Error(r) => &r.path,
            // Wherever the process writes: the node's paths decide.
            NodeFault::Kill(_) => "",
        }
    }
}

/// Storage faults of a cluster and where they may strike.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StorageConfig {
    /// Nodes that receive storage faults (empty: every node).
    pub nodes: Vec<String>,
    /// Path prefixes that do (empty: every path).
    pub paths: Vec<String>,
    /// Crash images may tear a write.
    pub torn_writes: bool,
    /// Crash images may keep any subset of what is pending.
    pub reordered_writes: bool,
    /// The crash model of every node's file system: a crash image of any node, whether
    /// storage faults target it or not, keeps to it.
    pub crash_model: deja_kernel::CrashModel,
    /// The faults the file places.
    pub faults: Vec<StorageFault>,
}

impl StorageConfig {
    /// True when storage faults may strike `node`.
    pub fn targets_node(&self, node: &str) -> bool {
        self.nodes.is_empty() || self.nodes.iter().any(|n| n == node)
    }

    /// True when storage faults may strike `path` on `node`.
    pub fn targets(&self, node: &str, path: &str) -> bool {
        self.targets_node(node) && (self.paths.is_empty() || self.paths.iter().any(|p| deja_kernel::under(path, p)))
    }
}

/// Faults drawn from the seed. Each kind is on when its `*_every_ms` range is given.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RandomFaults {
    /// Gap between partitions.
    pub partition_every_ms: Option<[u64; 2]>,
    /// How long a partition lasts.
    #[serde(default = "default_fault_for")]
    pub partition_for_ms: [u64; 2],
    /// Share of partitions that cut one direction only.
    #[serde(default)]
    pub one_way: f64,
    /// Gap between node kills.
    pub kill_every_ms: Option<[u64; 2]>,
    /// How long a killed node stays down.
    #[serde(default = "default_fault_for")]
    pub down_for_ms: [u64; 2],
    /// Gap between pauses.
    pub pause_every_ms: Option<[u64; 2]>,
    /// How long a pause lasts.
    #[serde(default = "default_fault_for")]
    pub pause_for_ms: [u64; 2],
    /// Gap between clock faults.
    pub clock_every_ms: Option<[u64; 2]>,
    /// Size of a clock jump.
    #[serde(default = "default_fault_for")]
    pub clock_jump_ms: [u64; 2],
    /// Nodes that may be killed, paused or have their clock moved (default: all). They do not
    /// scope random partitions: `partition_targets` does.
    #[serde(default)]
    pub targets: Vec<String>,
    /// Nodes random partitions split (default: every node). A node outside it is on neither
    /// side of a random partition: it keeps reaching every node.
    #[serde(default)]
    pub partition_targets: Vec<String>,
    /// No random fault starts after this time (ms); those under way still end.
    #[serde(default)]
    pub until_ms: Option<u64>,
}

fn default_fault_for() -> [u64; 2] {
    [500, 2000]
}

/// One scripted fault.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ScheduledFault {
    /// When, in virtual ms.
    pub at_ms: u64,
    /// What.
    pub action: Action,
    /// `partition`: the sides; only traffic between them is cut (a node no group names keeps
    /// reaching every node).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<Vec<String>>,
    /// `partition-one-way`: traffic from these nodes...
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub from: Vec<String>,
    /// ...to these nodes is cut.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub to: Vec<String>,
    /// `kill`, `restart`, `pause`, `resume`, `clock-jump`, `clock-skew`: the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// `clock-jump`, `clock-skew`: by how much (ms; a skew may be negative).
    #[serde(default)]
    pub ms: i64,
}

/// A scripted fault's action.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Action {
    /// Cut the network between groups (both directions).
    Partition,
    /// Cut traffic from `from` to `to` only.
    PartitionOneWay,
    /// Remove every cut.
    Heal,
    /// Kill a node (its durable files survive).
    Kill,
    /// Start a killed node again.
    Restart,
    /// Stop scheduling a node.
    Pause,
    /// Schedule it again.
    Resume,
    /// Jump a node's clocks forward.
    ClockJump,
    /// Skew a node's wall clock.
    ClockSkew,
}

impl Action {
    /// Its name, as written in cluster files (`partition`, `partition-one-way`, `heal`, `kill`,
    /// `restart`, `pause`, `resume`, `clock-jump`, `clock-skew`).
    pub fn name(self) -> &'static str {
        match self {
            Action::Partition => "partition",
            Action::PartitionOneWay => "partition-one-way",
            Action::Heal => "heal",
            Action::Kill => "kill",
            Action::Restart => "restart",
            Action::Pause => "pause",
            Action::Resume => "resume",
            Action::ClockJump => "clock-jump",
            Action::ClockSkew => "clock-skew",
        }
    }

    /// Every action, in order.
    pub const ALL: [Action; 9] = [
        Action::Partition,
        Action::PartitionOneWay,
        Action::Heal,
        Action::Kill,
        Action::Restart,
        Action::Pause,
        Action::Resume,
        Action::ClockJump,
        Action::ClockSkew,
    ];
}

/// A node as written in the file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeFile {
    /// Name (unique).
    pub name: String,
    /// IPv4 address (unique, not loopback).
    pub address: String,
    /// The executable (static or dynamically linked, its loader and libraries then taken from
    /// the host), relative to the cluster file.
    #[serde(default)]
    pub binary: Option<PathBuf>,
    /// Instead of a binary: a container image (OCI layout or `docker save` archive), relative to
    /// the cluster file. It is the node's read-only root, and gives its command, environment and
    /// working directory; `args` replace its command, `entrypoint` its entrypoint.
    #[serde(default)]
    pub image: Option<PathBuf>,
    /// With `image`: the program to run instead of the image's entrypoint.
    #[serde(default)]
    pub entrypoint: Option<String>,
    /// Arguments (after argv\[0\]).
    #[serde(default)]
    pub args: Vec<String>,
    /// Environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Files to copy in: guest path → host path (relative to the cluster file).
    #[serde(default)]
    pub files: BTreeMap<String, PathBuf>,
    /// The starting working directory (an absolute guest path; default `/`), in every life.
    #[serde(default)]
    pub cwd: Option<String>,
    /// How many CPUs the node's program sees (default 1).
    #[serde(default)]
    pub cpus: Option<u32>,
    /// The run waits for this node to exit.
    #[serde(default = "yes")]
    pub wait: bool,
    /// How a life of this node that ends non-zero after an injected I/O error is judged:
    /// `auto` (default), `never`, `always` or `exit=CODES` (see `deja run --fail-stop`).
    #[serde(default)]
    pub fail_stop: Option<String>,
    /// The text this node's program marks the line that says what failed with (`VIOLATION:`):
    /// an exit of the node is named by the last line holding it (see `deja run
    /// --failure-marker`).
    #[serde(default)]
    pub failure_marker: Option<String>,
}

fn yes() -> bool {
    true
}

/// A node ready to run.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// Name.
    pub name: String,
    /// Address.
    pub address: [u8; 4],
    /// The executable's bytes.
    pub image: Vec<u8>,
    /// Its file name (a binary is `/bin/<name>` in the guest).
    pub program: String,
    /// Where the executable is in the guest.
    pub exe_path: String,
    /// argv\[0\].
    pub argv0: String,
    /// Arguments.
    pub args: Vec<String>,
    /// The read-only root of an image node.
    pub root: Option<std::sync::Arc<deja_kernel::fs::Root>>,
    /// Environment (`KEY=VALUE`).
    pub env: Vec<String>,
    /// Files copied in.
    pub files: BTreeMap<String, Vec<u8>>,
    /// The starting working directory (empty: `/`).
    pub cwd: String,
    /// How many CPUs its program sees.
    pub cpus: u32,
    /// The run waits for it.
    pub wait: bool,
    /// How a life that ends non-zero after an injected I/O error is judged.
    pub fail_stop: deja_kernel::FailStopMode,
    /// The text that marks the line a failing life says what failed in.
    pub failure_marker: Option<String>,
}

/// A cluster ready to run: the file with every binary and file read.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// Seed.
    pub seed: u64,
    /// Virtual-time budget in ns.
    pub time_limit_ns: u64,
    /// Guest RAM per node in bytes.
    pub memory: u64,
    /// Network.
    pub network: NetworkConfig,
    /// Faults drawn from the seed.
    pub random_faults: Option<RandomFaults>,
    /// Scripted faults, by time.
    pub schedule: Vec<ScheduledFault>,
    /// Storage faults and where they may strike.
    pub storage: StorageConfig,
    /// Nodes.
    pub nodes: Vec<NodeConfig>,
    /// BLAKE3 of each binary, by node name.
    pub binary_hashes: BTreeMap<String, String>,
    /// BLAKE3 of the cluster file's text (empty when built by [`ClusterConfig::from_file`]).
    pub file_blake3: String,
}

/// Parses an IPv4 address.
pub fn parse_ip(s: &str) -> Option<[u8; 4]> {
    let ip: std::net::Ipv4Addr = s.parse().ok()?;
    Some(ip.octets())
}

/// What a cluster file names on the host, for a [`NodeReader`]: a node's binary or one of its
/// files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostFile<'a> {
    /// The node's binary.
    Binary,
    /// A file copied in at this guest path.
    File(&'a str),
}

/// Reads what a cluster file names for a node: (node, what, the host path the file names,
/// relative to the file's directory already resolved).
pub type NodeReader<'a> = &'a mut dyn FnMut(&str, HostFile<'_>, &Path) -> std::io::Result<Vec<u8>>;

impl ClusterConfig {
    /// Reads and checks a cluster file, and the binaries and files it names.
    pub fn load(path: &Path) -> Result<ClusterConfig, ConfigError> {
        let text = std::fs::read_to_string(path).context(ReadSnafu { path })?;
        let base = path.parent().unwrap_or(Path::new("."));
        Self::from_text(&text, path, base, &mut |_, _, p| std::fs::read(p))
    }

    /// Checks the text of a cluster file that was at `path` (named in errors), whose relative
    /// paths are relative to `base`; `read` reads the binaries and files it names.
    pub fn from_text(text: &str, path: &Path, base: &Path, read: NodeReader<'_>) -> Result<ClusterConfig, ConfigError> {
        let file: ClusterFile = toml::from_str(text).context(ParseSnafu { path })?;
        let mut cfg = Self::from_file_with(file, base, read).context(InvalidSnafu { path })?;
        cfg.file_blake3 = blake3::hash(text.as_bytes()).to_hex().to_string();
        Ok(cfg)
    }

    /// Checks a parsed file; paths are relative to `base`.
    pub fn from_file(file: ClusterFile, base: &Path) -> Result<ClusterConfig, InvalidCluster> {
        Self::from_file_with(file, base, &mut |_, _, p| std::fs::read(p))
    }

    /// [`ClusterConfig::from_file`], reading the binaries and files through `read`.
    pub fn from_file_with(
        file: ClusterFile,
        base: &Path,
        read: NodeReader<'_>,
    ) -> Result<ClusterConfig, InvalidCluster> {
        ensure!(!file.nodes.is_empty(), NoNodesSnafu);
        ensure!(file.nodes.len() <= 64, TooManyNodesSnafu { count: file.nodes.len() });
        ensure!((16..=4096).contains(&file.memory_mib), MemorySnafu { mib: file.memory_mib });
        let net = &file.network;
        let [lo, hi] = net.latency_ms;
        ensure!(
            lo.is_finite() && hi.is_finite() && lo >= 0.0 && lo <= hi && hi <= 60_000.0,
            LatencySnafu { min: lo, max: hi }
        );
        for (name, p) in
            [("udp_loss", net.udp_loss), ("udp_duplicate", net.udp_duplicate), ("udp_reorder", net.udp_reorder)]
        {
            ensure!((0.0..=1.0).contains(&p), NetworkProbabilitySnafu { field: name, value: p });
        }
        let mut nodes = Vec::new();
        let mut hashes = BTreeMap::new();
        let mut names = std::collections::BTreeSet::new();
        let mut addrs = std::collections::BTreeSet::new();
        for n in &file.nodes {
            ensure!(
                !n.name.is_empty() && n.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'),
                NodeNameSnafu { name: &n.name }
            );
            ensure!(names.insert(n.name.clone()), DuplicateNameSnafu { name: &n.name });
            let ip = parse_ip(&n.address).context(NotIpv4Snafu { node: &n.name, address: &n.address })?;
            ensure!(
                !(ip[0] == 127 || ip == [0; 4] || ip[0] >= 224),
                ReservedAddressSnafu { node: &n.name, address: &n.address }
            );
            ensure!(addrs.insert(ip), AddressTakenSnafu { node: &n.name, address: &n.address });
            let fail_stop = match &n.fail_stop {
                Some(text) => deja_kernel::FailStopMode::parse(text)
                    .map_err(|problem| FailStopSnafu { node: &n.name, problem }.build())?,
                None => deja_kernel::FailStopMode::Auto,
            };
            if let Some(cpus) = n.cpus {
                ensure!((1..=deja_kernel::MAX_CPUS).contains(&cpus), CpusSnafu { node: &n.name, cpus });
            }
            let named = match (&n.binary, &n.image) {
                (Some(p), None) | (None, Some(p)) => p,
                _ => return NodeProgramSnafu { node: &n.name }.fail(),
            };
            let bin = base.join(named);
            let bytes =
                read(&n.name, HostFile::Binary, &bin).context(ReadNodeFileSnafu { node: &n.name, path: &bin })?;
            hashes.insert(n.name.clone(), blake3::hash(&bytes).to_hex().to_string());
            let mut files = BTreeMap::new();
            for (guest, host) in &n.files {
                if let Some(problem) = deja_kernel::fs::guest_path_problem(guest) {
                    return GuestPathSnafu { node: &n.name, guest, problem }.fail();
                }
                let p = base.join(host);
                let data =
                    read(&n.name, HostFile::File(guest), &p).context(ReadNodeFileSnafu { node: &n.name, path: &p })?;
                files.insert(guest.clone(), data);
            }
            let mut env: Vec<String> = n.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let mut cwd = n.cwd.clone().unwrap_or_default();
            let node = if n.image.is_some() {
                let problem = |e: crate::image::OpenError| {
                    NodeImageSnafu { node: &n.name, path: &bin, problem: e.to_string() }.build()
                };
                let img = crate::image::open(&bytes, n.entrypoint.as_deref(), &n.args, &env, n.cwd.as_deref())
                    .map_err(problem)?;
                (env, cwd) = (img.env, img.cwd);
                let program = img.exe_path.rsplit('/').next().unwrap_or("program").to_string();
                let (argv0, args) = img.argv.split_first().map(|(a, r)| (a.clone(), r.to_vec())).unwrap_or_default();
                (img.image, program, img.exe_path, argv0, args, Some(img.root))
            } else {
                let program = named.file_name().and_then(|s| s.to_str()).unwrap_or("program").to_string();
                let exe_path = format!("/bin/{program}");
                // A dynamically linked binary brings its loader and libraries from the host.
                let needs = crate::dynlink::host_closure(&bytes, &bin, &exe_path)
                    .map_err(|problem| NodeLibrariesSnafu { node: &n.name, problem }.build())?;
                for (path, data) in needs {
                    files.entry(path).or_insert(data);
                }
                (bytes, program, exe_path.clone(), exe_path, n.args.clone(), None)
            };
            let (image, program, exe_path, argv0, args, root) = node;
            nodes.push(NodeConfig {
                name: n.name.clone(),
                address: ip,
                image,
                program,
                exe_path,
                argv0,
                args,
                root,
                env,
                files,
                cwd,
                cpus: n.cpus.unwrap_or(1),
                wait: n.wait,
                fail_stop,
                failure_marker: n.failure_marker.clone().filter(|m| !m.is_empty()),
            });
        }
        let known = |s: &String| names.contains(s);
        for f in &file.faults.schedule {
            let named: Vec<&String> =
                f.groups.iter().flatten().chain(&f.from).chain(&f.to).chain(f.node.iter()).collect();
            if let Some(bad) = named.iter().find(|s| !known(s)) {
                return UnknownFaultNodeSnafu { at_ms: f.at_ms, name: *bad }.fail();
            }
            let needs_node = matches!(
                f.action,
                Action::Kill | Action::Restart | Action::Pause | Action::Resume | Action::ClockJump | Action::ClockSkew
            );
            ensure!(!needs_node || f.node.is_some(), FaultNeedsNodeSnafu { at_ms: f.at_ms, action: f.action });
            ensure!(
                !(f.action == Action::Partition && f.groups.iter().filter(|g| !g.is_empty()).count() < 2),
                PartitionNeedsGroupsSnafu { at_ms: f.at_ms }
            );
            ensure!(
                !(f.action == Action::PartitionOneWay && (f.from.is_empty() || f.to.is_empty())),
                OneWayNeedsEndsSnafu { at_ms: f.at_ms }
            );
            ensure!(!(f.action == Action::ClockJump && f.ms < 0), ClockJumpBackwardsSnafu { at_ms: f.at_ms });
        }
        if let Some(r) = &file.faults.random {
            if let Some(bad) = r.targets.iter().find(|s| !known(s)) {
                return UnknownRandomTargetSnafu { name: bad }.fail();
            }
            if let Some(bad) = r.partition_targets.iter().find(|s| !known(s)) {
                return UnknownPartitionTargetSnafu { name: bad }.fail();
            }
            let mut seen = std::collections::BTreeSet::new();
            if let Some(twice) = r.partition_targets.iter().find(|s| !seen.insert(*s)) {
                return PartitionTargetsSnafu { problem: format!("names {twice:?} twice") }.fail();
            }
            ensure!(
                r.partition_targets.len() != 1,
                PartitionTargetsSnafu {
                    problem: format!(
                        "names only {:?}; a partition splits at least two nodes (leave it out to split every node)",
                        r.partition_targets[0]
                    )
                }
            );
            for (name, range) in [
                ("partition_every_ms", r.partition_every_ms),
                ("kill_every_ms", r.kill_every_ms),
                ("pause_every_ms", r.pause_every_ms),
                ("clock_every_ms", r.clock_every_ms),
                ("partition_for_ms", Some(r.partition_for_ms)),
                ("down_for_ms", Some(r.down_for_ms)),
                ("pause_for_ms", Some(r.pause_for_ms)),
                ("clock_jump_ms", Some(r.clock_jump_ms)),
            ] {
                if let Some([a, b]) = range {
                    ensure!(
                        a <= b && !(name.ends_with("every_ms") && a == 0),
                        RandomRangeSnafu { field: name, min: a, max: b }
                    );
                }
            }
            ensure!((0.0..=1.0).contains(&r.one_way), OneWayProbabilitySnafu { value: r.one_way });
        }
        let storage = storage_config(&file.faults.storage, &known)?;
        let mut schedule = file.faults.schedule.clone();
        schedule.sort_by_key(|f| f.at_ms);
        Ok(ClusterConfig {
            seed: file.seed,
            time_limit_ns: file.time_limit_ms.saturating_mul(1_000_000),
            memory: file.memory_mib << 20,
            network: file.network.clone(),
            random_faults: file.faults.random.clone(),
            schedule,
            storage,
            nodes,
            binary_hashes: hashes,
            file_blake3: String::new(),
        })
    }
}

/// Checks `[faults.storage]` against the nodes `known` names.
fn storage_config(f: &StorageFile, known: &dyn Fn(&String) -> bool) -> Result<StorageConfig, InvalidCluster> {
    let named = f
        .nodes
        .iter()
        .chain(f.crash.iter().map(|c| &c.node))
        .chain(f.error.iter().map(|e| &e.node))
        .chain(f.kill.iter().map(|k| &k.node));
    for name in named {
        ensure!(known(name), UnknownStorageNodeSnafu { name });
    }
    for p in &f.paths {
        ensure!(p.starts_with('/'), StorageFaultSnafu { what: format!("path {p:?} is not absolute") });
    }
    let mut faults = Vec::new();
    for c in &f.crash {
        ensure!(
            c.path.starts_with('/') && c.nth > 0,
            StorageFaultSnafu {
                what: format!("crash of {} at {:?} #{}: an absolute path, nth from 1", c.node, c.path, c.nth)
            }
        );
        let crash = deja_kernel::OpCrash { when: c.when, path: c.path.clone(), nth: c.nth, keep: None };
        faults.push(StorageFault { node: c.node.clone(), fault: NodeFault::Crash(crash) });
    }
    for e in &f.error {
        ensure!(
            e.path.starts_with('/'),
            StorageFaultSnafu { what: format!("error on {} at {:?}: an absolute path", e.node, e.path) }
        );
        let rule = deja_kernel::ErrorRule::at(e.op, &e.path, e.nth, e.errno);
        faults.push(StorageFault { node: e.node.clone(), fault: NodeFault::Error(rule) });
    }
    for k in &f.kill {
        let text = format!("{}:{}:{}", k.process, k.when.name(), k.nth);
        let kill = deja_kernel::ProcessKill::parse(&text)
            .map_err(|why| StorageFaultSnafu { what: format!("kill on {}: {why}", k.node) }.build())?;
        faults.push(StorageFault { node: k.node.clone(), fault: NodeFault::Kill(kill) });
    }
    let cfg = StorageConfig {
        nodes: f.nodes.clone(),
        paths: f.paths.clone(),
        torn_writes: f.torn_writes,
        reordered_writes: f.reordered_writes,
        crash_model: f.crash_model,
        faults,
    };
    let outside = |s: &StorageFault| match s.fault {
        NodeFault::Kill(_) => !cfg.targets_node(&s.node),
        _ => !cfg.targets(&s.node, s.path()),
    };
    if let Some(bad) = cfg.faults.iter().find(|s| outside(s)) {
        return StorageOutsideTargetsSnafu { what: bad.describe() }.fail();
    }
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(extra: &str) -> Result<ClusterConfig, InvalidCluster> {
        let dir = std::env::temp_dir().join(format!("deja-cluster-storage-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("s.bin"), b"server").unwrap();
        let text = format!(
            "{extra}\n[[node]]\nname = \"server\"\naddress = \"10.0.0.1\"\nbinary = \"s.bin\"\n\
             [[node]]\nname = \"client\"\naddress = \"10.0.0.2\"\nbinary = \"s.bin\"\n"
        );
        let file: ClusterFile = toml::from_str(&text).unwrap();
        ClusterConfig::from_file(file, &dir)
    }

    #[test]
    fn storage_faults_are_read_by_meaning_and_checked_against_their_targets() {
        let c = parse(
            "[faults.storage]\nnodes = [\"server\"]\npaths = [\"/data\"]\n\
             [[faults.storage.crash]]\nnode = \"server\"\nwhen = \"before\"\npath = \"/data/wal\"\nnth = 3\n\
             [[faults.storage.error]]\nnode = \"server\"\nop = \"fsync\"\npath = \"/data/wal\"\nnth = 2\n",
        )
        .unwrap();
        let words: Vec<String> = c.storage.faults.iter().map(StorageFault::describe).collect();
        assert_eq!(words, ["crash server before durable op #3 on /data/wal", "EIO on fsync #2 of /data/wal on server"]);
        assert!(c.storage.targets("server", "/data/wal") && c.storage.targets("server", "/data"));
        assert!(!c.storage.targets("server", "/tmp/x") && !c.storage.targets("client", "/data/wal"));
        // In bug files a storage fault is its node and what it does.
        let json = serde_json::to_value(&c.storage.faults[0]).unwrap();
        assert_eq!(json["node"], "server");
        assert_eq!(json["crash"]["when"], "before");
        assert_eq!(serde_json::from_value::<StorageFault>(json).unwrap(), c.storage.faults[0]);
        // Defaults: every node, every path.
        let all = parse("").unwrap();
        assert!(all.storage.targets("client", "/anything") && all.storage.faults.is_empty());
        // Refused: an unknown node, a fault outside the targets, a count from 0, a relative path.
        let crash = |node: &str, path: &str, nth: u64| {
            format!("[[faults.storage.crash]]\nnode = \"{node}\"\nwhen = \"after\"\npath = \"{path}\"\nnth = {nth}\n")
        };
        let err = |extra: &str| parse(extra).unwrap_err().to_string();
        assert!(err(&crash("nobody", "/data/wal", 1)).contains("unknown node \"nobody\""));
        let outside = format!("[faults.storage]\nnodes = [\"server\"]\n{}", crash("client", "/data/wal", 1));
        assert!(
            err(&outside).contains("crash client after durable op #1 on /data/wal is outside"),
            "{}",
            err(&outside)
        );
        assert!(err(&crash("server", "/data/wal", 0)).contains("nth from 1"));
        assert!(err(&crash("server", "data/wal", 1)).contains("absolute"));
    }

    #[test]
    fn process_kills_are_read_for_their_node_whatever_the_paths() {
        let c = parse(
            "[faults.storage]\nnodes = [\"server\"]\npaths = [\"/data\"]\n\
             [[faults.storage.kill]]\nnode = \"server\"\nprocess = \"worker\"\nwhen = \"after\"\nnth = 2\n",
        )
        .unwrap();
        let words: Vec<String> = c.storage.faults.iter().map(StorageFault::describe).collect();
        assert_eq!(words, ["worker killed after its durable op #2 on server"]);
        let json = serde_json::to_value(&c.storage.faults[0]).unwrap();
        assert_eq!(serde_json::from_value::<StorageFault>(json).unwrap(), c.storage.faults[0]);
        let err = |extra: &str| parse(extra).unwrap_err().to_string();
        let kill = |node: &str, nth: u64| {
            format!(
                "[[faults.storage.kill]]\nnode = \"{node}\"\nprocess = \"worker\"\nwhen = \"before\"\nnth = {nth}\n"
            )
        };
        assert!(err(&kill("server", 0)).contains("NAME:before:NTH"), "{}", err(&kill("server", 0)));
        assert!(err(&kill("nobody", 1)).contains("unknown node"));
        let outside = format!("[faults.storage]\nnodes = [\"server\"]\n{}", kill("client", 1));
        assert!(err(&outside).contains("is outside"), "{}", err(&outside));
    }

    /// A cluster of two nodes, `a` with `setting` among its keys.
    fn two_nodes(what: &str, setting: &str) -> Result<ClusterConfig, InvalidCluster> {
        let dir = std::env::temp_dir().join(format!("deja-cluster-{what}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("s.bin"), b"server").unwrap();
        let text = format!(
            "[[node]]\nname = \"a\"\naddress = \"10.0.0.1\"\nbinary = \"s.bin\"\n{setting}\n\
             [[node]]\nname = \"b\"\naddress = \"10.0.0.2\"\nbinary = \"s.bin\"\n"
        );
        ClusterConfig::from_file(toml::from_str(&text).unwrap(), &dir)
    }

    #[test]
    fn a_nodes_cpus_are_read_and_bounded() {
        let c = two_nodes("cpus", "cpus = 8").unwrap();
        assert_eq!((c.nodes[0].cpus, c.nodes[1].cpus), (8, 1), "given, and the default");
        for bad in ["cpus = 0", "cpus = 1025"] {
            let e = two_nodes("cpus", bad).unwrap_err().to_string();
            assert!(e.contains("node a: ") && e.contains("1 to 1024"), "{e}");
        }
    }

    #[test]
    fn a_nodes_fail_stop_is_read_and_checked() {
        let with = |setting: &str| two_nodes("fail-stop", setting);
        let c = with("fail_stop = \"exit=2,3\"").unwrap();
        assert_eq!(c.nodes[0].fail_stop, deja_kernel::FailStopMode::Exit(vec![2, 3]));
        assert_eq!(c.nodes[1].fail_stop, deja_kernel::FailStopMode::Auto, "the default");
        assert_eq!(with("fail_stop = \"never\"").unwrap().nodes[0].fail_stop, deja_kernel::FailStopMode::Never);
        let e = with("fail_stop = \"sometimes\"").unwrap_err().to_string();
        assert!(e.contains("node a: ") && e.contains("expected auto, never, always or exit=CODES"), "{e}");
    }

    /// A cluster of three members and a client, with `extra` before its nodes.
    fn members(extra: &str) -> Result<ClusterConfig, InvalidCluster> {
        let dir = std::env::temp_dir().join(format!("deja-cluster-members-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("s.bin"), b"server").unwrap();
        let mut text = format!("{extra}\n");
        for (i, name) in ["e1", "e2", "e3", "client"].iter().enumerate() {
            text += &format!("[[node]]\nname = \"{name}\"\naddress = \"10.0.0.{}\"\nbinary = \"s.bin\"\n", i + 1);
        }
        ClusterConfig::from_file(toml::from_str(&text).unwrap(), &dir)
    }

    #[test]
    fn partition_targets_are_read_and_checked() {
        let random = "[faults.random]\npartition_every_ms = [500, 1000]\ntargets = [\"e1\"]\n";
        let c = members(&format!("{random}partition_targets = [\"e1\", \"e2\", \"e3\"]")).unwrap();
        let r = c.random_faults.unwrap();
        assert_eq!(r.partition_targets, ["e1", "e2", "e3"]);
        assert_eq!(r.targets, ["e1"], "targets stay whom kills, pauses and clock faults strike");
        // Absent: empty, every node is split.
        assert!(members(random).unwrap().random_faults.unwrap().partition_targets.is_empty());
        let err = |list: &str| members(&format!("{random}partition_targets = {list}")).unwrap_err().to_string();
        let e = err("[\"e1\", \"nobody\"]");
        assert_eq!(e, "faults.random.partition_targets names an unknown node \"nobody\"");
        assert!(err("[\"e1\", \"e2\", \"e1\"]").contains("names \"e1\" twice"));
        assert!(err("[\"e3\"]").contains("at least two nodes"), "{}", err("[\"e3\"]"));
    }

    #[test]
    fn a_partition_may_leave_nodes_unnamed_but_needs_two_groups() {
        let at =
            |groups: &str| format!("[[faults.schedule]]\nat_ms = 100\naction = \"partition\"\ngroups = {groups}\n");
        // The client is named by no group: accepted (it keeps reaching every node).
        let c = members(&at("[[\"e3\"], [\"e1\", \"e2\"]]")).unwrap();
        assert_eq!(c.schedule[0].groups, [vec!["e3"], vec!["e1", "e2"]]);
        for one in ["[[\"e3\"]]", "[[\"e3\"], []]", "[]"] {
            let e = members(&at(one)).unwrap_err().to_string();
            assert!(e.contains("at least two non-empty groups"), "{one}: {e}");
        }
    }

    #[test]
    fn an_action_is_named_as_it_is_written() {
        for action in Action::ALL {
            assert_eq!(serde_json::to_value(action).unwrap(), action.name(), "{action:?}");
        }
    }
}
