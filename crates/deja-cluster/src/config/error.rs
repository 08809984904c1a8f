//! Why a cluster file is refused: it cannot be read, it is not a cluster in TOML, or what it
//! describes cannot run ([`InvalidCluster`], each naming the field or node it concerns).

use std::path::PathBuf;

use snafu::Snafu;

use super::Action;

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
    /// A docker-compose file that cannot be a cluster.
    #[snafu(display("{}: {source}", path.display()))]
    Compose {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        source: super::compose::ComposeError,
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

/// What makes a parsed cluster file impossible to run
/// ([`ClusterConfig::from_file`](super::ClusterConfig::from_file)); each names the field or node
/// it concerns.
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
    /// A node's setting is wrong: its test template, its restart policy.
    #[snafu(display("node {node}: {problem}"))]
    NodeSetting {
        /// The node.
        node: String,
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
