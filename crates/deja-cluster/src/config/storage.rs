//! Storage faults in the cluster file: `[faults.storage]` as written, the faults by meaning it
//! places on nodes (a crash at a durable operation, an I/O error, a process killed), and their
//! check against the nodes and paths the storage targets name.

use serde::{Deserialize, Serialize};
use snafu::ensure;

use super::error::{InvalidCluster, StorageFaultSnafu, StorageOutsideTargetsSnafu, UnknownStorageNodeSnafu};

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

/// Checks `[faults.storage]` against the nodes `known` names.
pub(super) fn storage_config(
    f: &StorageFile,
    known: &dyn Fn(&String) -> bool,
) -> Result<StorageConfig, InvalidCluster> {
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
