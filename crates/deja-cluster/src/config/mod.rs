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
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub mod compose;
mod error;
mod load;
mod storage;

pub use error::{ConfigError, InvalidCluster};
pub use load::{env_file, is_cluster_file, is_compose, parse_ip, HostFile, NodeReader};
pub use storage::{CrashFile, ErrorFile, KillFile, NodeFault, StorageConfig, StorageFault, StorageFile};

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

impl ScheduledFault {
    /// `action` at `at_ms` on `node` (if any), with no groups, sides or amount.
    pub fn new(at_ms: u64, action: Action, node: Option<&str>) -> ScheduledFault {
        ScheduledFault {
            at_ms,
            action,
            groups: Vec::new(),
            from: Vec::new(),
            to: Vec::new(),
            node: node.map(str::to_string),
            ms: 0,
        }
    }
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
    /// Files given by their contents: guest path → bytes (a compose file's `/etc/hosts`). Not
    /// written in a TOML cluster file; a file of `files` at the same path wins.
    #[serde(skip)]
    pub contents: BTreeMap<String, Vec<u8>>,
    /// Env files whose variables the node gets under `env` (a compose service's `env_file`),
    /// relative to the cluster file; not written in a TOML cluster file.
    #[serde(skip)]
    pub env_files: Vec<String>,
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
    /// A test template this node runs (see [`crate::template`]).
    #[serde(default)]
    pub template: Option<crate::template::TemplateSettings>,
    /// What happens when its program exits on its own: `no` (default), `always`,
    /// `unless-stopped`, `on-failure` or `on-failure:N`, as Docker's restart policies.
    #[serde(default)]
    pub restart: Option<String>,
}

/// A node's restart policy: what happens when its program exits on its own (not when deja
/// kills it or it crashes at a durable operation: those have their own restarts).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Restart {
    /// It stays down (Docker's `no`).
    #[default]
    No,
    /// It starts again whatever its exit (`always`, `unless-stopped`).
    Always,
    /// It starts again after a non-zero exit, at most `max` times (`on-failure[:N]`; no N:
    /// without end).
    OnFailure {
        /// Most restarts, if bounded.
        max: Option<u64>,
    },
}

impl Restart {
    /// Reads a policy as Docker writes it.
    pub fn parse(s: &str) -> Result<Restart, String> {
        match s {
            "no" | "" => Ok(Restart::No),
            "always" | "unless-stopped" => Ok(Restart::Always),
            "on-failure" => Ok(Restart::OnFailure { max: None }),
            _ => match s.strip_prefix("on-failure:").map(str::parse::<u64>) {
                Some(Ok(n)) => Ok(Restart::OnFailure { max: Some(n) }),
                _ => Err(format!("restart {s:?}: expected no, always, unless-stopped, on-failure or on-failure:N")),
            },
        }
    }

    /// True when a program that exited with `code`, after `restarts` restarts by this policy,
    /// starts again.
    pub fn again(self, code: Option<i32>, restarts: u64) -> bool {
        match self {
            Restart::No => false,
            Restart::Always => true,
            Restart::OnFailure { max } => code != Some(0) && max.is_none_or(|m| restarts < m),
        }
    }

    /// How long after its exit the program starts again, ns: Docker's delay, 100 ms doubling
    /// with each restart, at most a minute.
    pub fn delay_ns(restarts: u64) -> u64 {
        (100_000_000u64 << restarts.min(10)).min(60_000_000_000)
    }
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
    /// The test template it runs, if any.
    pub template: Option<crate::template::TemplateSettings>,
    /// Its restart policy.
    pub restart: Restart,
    /// The env files it read: the path the file names → BLAKE3 (what a bug file records).
    pub env_files: BTreeMap<String, String>,
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
    /// How every node's VMs are set up: CPU identity, code rewriting, the vDSO, the watchdog.
    /// Not in the file: the run's (the CLI's); [`deja_vmm::Settings::default`] when loaded.
    pub settings: deja_vmm::Settings,
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

    #[test]
    fn a_nodes_test_template_is_read_checked_and_kept_from_faults_that_would_take_its_commands() {
        let t = "template = { dir = \"/opt/antithesis/test/v1/main\", quiet_ms = 500 }";
        let c = two_nodes("template", t).unwrap();
        let want = crate::template::TemplateSettings {
            quiet_ms: 500,
            ..crate::template::TemplateSettings::new("/opt/antithesis/test/v1/main")
        };
        assert_eq!(c.nodes[0].template, Some(want));
        assert_eq!(c.nodes[1].template, None);
        assert_eq!(c.storage.nodes, ["b"], "storage faults keep off the template's node unless named");
        let e = two_nodes("template", "template = { dir = \"main\" }").unwrap_err().to_string();
        assert!(e.contains("node a: ") && e.contains("not an absolute path"), "{e}");
        let e = toml::from_str::<crate::template::TemplateSettings>("dir = \"/t\"\ndrivers = 3").unwrap_err();
        assert!(e.to_string().contains("unknown field `drivers`"), "unknown keys are refused: {e}");
        let kill = format!("{t}\n[[faults.schedule]]\nat_ms = 5\naction = \"kill\"\nnode = \"a\"");
        let e = two_nodes("template", &kill).unwrap_err().to_string();
        assert!(e.contains("node a: the node running the test template cannot be killed or paused"), "{e}");
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
