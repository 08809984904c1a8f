//! Fault injection on the file system, and the run's decision log: the configuration, the
//! decision stream, the overrides and the ledger.
//!
//! Every nondeterministic choice deja makes on the program's behalf (these fault decisions and
//! the SDK's `Random`/`Choice`) is a decision in one log, taken by [`FaultState::decide`] from
//! a dedicated ChaCha20 stream keyed from the run's seed (another BLAKE3 context than the
//! program's random stream) and overridable by position: see [the crate
//! documentation](crate#decisions). No fault decision is taken when no fault is configured.
//!
//! # The I/O error model
//!
//! An operation on a file can fail in two ways, both recorded in the ledger by meaning
//! (`eio on write #4 to /data/wal`: the 4th write to that path):
//! - **placed errors** ([`ErrorRule`]): the `nth` `write`, `fsync`, `truncate`, `fallocate`,
//!   `create`, `rename` or `read` (of a byte range) on a path fails with EIO or ENOSPC. They
//!   take no decision: the rule is the fault, so it replays by meaning and minimizes as one
//!   element.
//! - **rates**: `eio_on_write_ppm` / `enospc_on_write_ppm`: one decision (1 000 000 options, a
//!   choice below the given parts per million strikes) per write to a regular file, EIO first;
//!   `eio_on_fsync_ppm`: one per `fsync`, `fdatasync`, `sync_file_range` (with WRITE) and
//!   `syncfs`. `sync` never fails.
//!
//! A failed call changes nothing before it fails, with one exception that is Linux's: a failed
//! sync **drops** the pending operations it would have made durable (the dirty pages are
//! marked clean although they never reached the disk), so a retried fsync returns 0 while the
//! data is gone from the durable layer ("fsyncgate", Rebello et al., ATC '20). The program still
//! reads what it wrote until a crash.
//!
//! Crash points, crash states and crash images: see [`crate::fs`].

use crate::prelude::*;
use alloc::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use crate::decision_point::{DecisionPoint, RandomFault};
pub use crate::fault_kinds::{FaultKind, IoErrno, IoOp};
use crate::persist::{ensure, Persist, RestoreError};
use crate::rng::RandomStream;

/// BLAKE3 key-derivation context of the fault stream.
pub(crate) const FAULT_CONTEXT: &str = "deja 2025 fault decision stream v1";

/// Which faults to inject. `Default` injects none. Every field but the first has a serde
/// default, so inputs written before a field existed still read. (No field is skipped when
/// serialized: the core's saved state is postcard, which needs every field.)
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultConfig {
    /// End the run with [`SyscallOutcome::Crash`](crate::SyscallOutcome::Crash) right after
    /// the k-th durable write (counted from 1) took effect.
    pub crash_after_durable_write: Option<u64>,
    /// Crash when the program makes its k-th durable write, before it takes effect: what the
    /// write would have made durable is still pending.
    #[serde(default)]
    pub crash_before_durable_write: Option<u64>,
    /// Crash when the program exits (`exit_group` with a status), instead of exiting.
    #[serde(default)]
    pub crash_at_exit: bool,
    /// Exactly which pending operations the crash image keeps; without it, decisions pick
    /// them as `torn_writes` and `reordered_writes` allow.
    #[serde(default)]
    pub crash_state: Option<CrashState>,
    /// Crash images may keep a prefix of the pending operations, the next one a write cut at
    /// a sector boundary; with `reordered_writes`, any one kept write may be cut.
    pub torn_writes: bool,
    /// Crash images may keep any subset of the pending operations (data, sizes and directory
    /// entries): the weakest POSIX model.
    pub reordered_writes: bool,
    /// Probability (parts per million) that a write to a regular file fails with EIO.
    pub eio_on_write_ppm: u32,
    /// Probability (parts per million) that an fsync-like call fails with EIO.
    pub eio_on_fsync_ppm: u32,
    /// Probability (parts per million) that a write to a regular file fails with ENOSPC.
    pub enospc_on_write_ppm: u32,
    /// Errors placed on chosen operations ("EIO on the 4th write to /data/wal").
    #[serde(default)]
    pub errors: Vec<ErrorRule>,
    /// Crashes placed by meaning: before or after the n-th durable operation on a path
    /// ("crash before durable op #3 on /data/wal"). The first one reached strikes.
    #[serde(default)]
    pub crash_at: Vec<OpCrash>,
    /// Path prefixes that receive storage faults (placed errors, rates, crashes by meaning);
    /// empty: every path. Paths the program excluded itself
    /// ([`deja_protocol::Request::ExcludePath`]) never do.
    #[serde(default)]
    pub fault_paths: Vec<String>,
    /// The crash model crash states are drawn from (see [`crate::fs::CrashModel`]): what
    /// decisions pick is projected onto the states it allows, and a sweep offers only those.
    #[serde(default)]
    pub crash_model: crate::fs::CrashModel,
    /// Processes killed (`SIGKILL`) at a durable operation they make, by name: the node and
    /// its other processes go on, with everything the killed one wrote still in the page cache.
    #[serde(default)]
    pub kill_process: Vec<ProcessKill>,
    /// How a life that ends non-zero after an injected I/O error is judged (`--fail-stop`).
    #[serde(default)]
    pub fail_stop: crate::fault_kinds::FailStopMode,
    /// The text that marks the line a failing program says what failed in (`VIOLATION:`,
    /// `--failure-marker`): the last output line holding it (within its first
    /// [`crate::TAIL_LINE_BYTES`] bytes) names an exit's failure, from the marker on, instead of
    /// the last line ([`crate::RunReport::marked_output`]).
    #[serde(default)]
    pub failure_marker: Option<String>,
}

/// A process killed by meaning: the process named `name` (its `comm`: the file name of the
/// program it runs) gets `SIGKILL` before or after the `nth` durable operation it makes
/// (counted from 1 over the processes of that name in the life); a `name` of digits is a pid,
/// whose own operations count. Pid 1 is never killed this way: its end is the node's, which a
/// crash models.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ProcessKill {
    /// The process's name.
    pub name: String,
    /// Before or after the operation.
    pub when: When,
    /// Which durable operation of processes of that name, from 1.
    pub nth: u64,
}

impl ProcessKill {
    /// The pid it names, when its name is one.
    pub fn pid(&self) -> Option<u64> {
        self.name.bytes().all(|b| b.is_ascii_digit()).then(|| self.name.parse().ok()).flatten()
    }

    /// In words: `worker killed before its durable op #2`, `pid 3 killed after its durable op #1`.
    pub fn point(&self) -> String {
        let who = match self.pid() {
            Some(p) => format!("pid {p}"),
            None => self.name.clone(),
        };
        format!("{who} killed {} its durable op #{}", self.when.name(), self.nth)
    }

    /// Parses `NAME:WHEN:NTH` (`worker:before:2`).
    pub fn parse(text: &str) -> Result<ProcessKill, String> {
        let bad = || format!("{text:?}: expected NAME:before:NTH or NAME:after:NTH");
        let mut parts = text.rsplitn(3, ':');
        let nth = parts.next().and_then(|n| n.parse::<u64>().ok()).filter(|&n| n >= 1).ok_or_else(bad)?;
        let when = match parts.next() {
            Some("before") => When::Before,
            Some("after") => When::After,
            _ => return Err(bad()),
        };
        let name = parts.next().filter(|n| !n.is_empty() && n.len() <= 15).ok_or_else(bad)?;
        Ok(ProcessKill { name: name.to_string(), when, nth })
    }
}

impl FaultConfig {
    /// True when the configuration names a crash point.
    pub fn crashes(&self) -> bool {
        self.crash_after_durable_write.is_some()
            || self.crash_before_durable_write.is_some()
            || self.crash_at_exit
            || !self.crash_at.is_empty()
    }

    /// The configuration of the life after a crash: the crash point, the crash state and the
    /// placed errors belonged to the life that crashed; the modes and rates go on.
    pub fn for_restart(&self) -> FaultConfig {
        FaultConfig {
            crash_after_durable_write: None,
            crash_before_durable_write: None,
            crash_at_exit: false,
            crash_state: None,
            errors: Vec::new(),
            crash_at: Vec::new(),
            kill_process: Vec::new(),
            ..self.clone()
        }
    }

    /// Takes the run-wide settings of `from`, which every input of a campaign or a check
    /// keeps whatever faults it places: the crash model, the fail-stop rule and the failure
    /// marker.
    pub fn take_settings(&mut self, from: &FaultConfig) {
        self.crash_model = from.crash_model;
        self.fail_stop = from.fail_stop.clone();
        self.failure_marker = from.failure_marker.clone();
    }

    /// True when storage faults may strike `path` under this configuration: it is under one
    /// of [`FaultConfig::fault_paths`] (or that list is empty).
    pub fn targets(&self, path: &str) -> bool {
        self.fault_paths.is_empty() || self.fault_paths.iter().any(|p| under(path, p))
    }
}

/// True when `path` is `prefix` or lies under it (`/data` holds `/data/wal`, not `/database`;
/// a prefix ending in `/` holds what starts with it).
pub fn under(path: &str, prefix: &str) -> bool {
    match path.strip_prefix(prefix) {
        Some(rest) => rest.is_empty() || prefix.ends_with('/') || rest.starts_with('/'),
        None => false,
    }
}

/// Which side of a durable operation a crash placed by meaning comes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum When {
    /// When the program makes the operation, before it takes effect: what it would have made
    /// durable is still pending.
    Before,
    /// Right after it took effect, before the program sees it return.
    After,
}

impl When {
    /// `before` or `after`.
    pub fn name(self) -> &'static str {
        match self {
            When::Before => "before",
            When::After => "after",
        }
    }
}

/// A crash placed by meaning: before or after the `nth` durable operation (an fsync,
/// fdatasync or `sync_file_range` of the path, an `O_SYNC`/`O_DSYNC` write to it; `syncfs` and
/// `sync` are path `/`) on `path`, counted from 1 in the life, keeping the pending operations
/// `keep` names (`None`: the run's decisions choose, as the crash-state modes allow).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct OpCrash {
    /// Before or after the operation.
    pub when: When,
    /// The guest path the operation makes durable.
    pub path: String,
    /// Which durable operation on `path`, from 1.
    pub nth: u64,
    /// What the crash image keeps of the pending operations, by what they are.
    #[serde(default)]
    pub keep: Option<KeptOps>,
}

impl OpCrash {
    /// In words: `before durable op #3 on /data/wal`.
    pub fn point(&self) -> String {
        format!("{} durable op #{} on {}", self.when.name(), self.nth, self.path)
    }

    /// Parses `WHEN:PATH:NTH` (`before:/data/wal:3`): the crash before or after the NTH durable
    /// operation on PATH, its state left to decisions.
    pub fn parse(text: &str) -> Result<OpCrash, String> {
        let mut parts = text.splitn(2, ':');
        let when = match parts.next() {
            Some("before") => When::Before,
            Some("after") => When::After,
            _ => return Err(format!("{text:?}: expected before:PATH:NTH or after:PATH:NTH")),
        };
        let rest = parts.next().unwrap_or_default();
        let (path, nth) = rest.rsplit_once(':').ok_or_else(|| format!("{text:?}: expected WHEN:PATH:NTH"))?;
        if !path.starts_with('/') {
            return Err(format!("{text:?}: give an absolute guest path"));
        }
        let nth: u64 =
            nth.parse().ok().filter(|n| *n > 0).ok_or_else(|| format!("{text:?}: {nth:?} is not a count from 1"))?;
        Ok(OpCrash { when, path: path.to_string(), nth, keep: None })
    }

    /// In words with what it keeps: `crash before durable op #3 on /data/wal, nothing pending kept`.
    pub fn describe(&self) -> String {
        match &self.keep {
            Some(k) => format!("crash {}, {}", self.point(), k.describe()),
            None => format!("crash {}", self.point()),
        }
    }
}

/// The pending operations a crash keeps, by what they are (`write of 256 bytes at 0 to
/// /data/pages`), so that a crash state can be replayed against another binary, whose pending
/// list at the same point may hold other operations.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct KeptOps {
    /// Kept whole, in program order.
    pub ops: Vec<String>,
    /// A write kept in part, and how many of its sectors.
    #[serde(default)]
    pub torn: Option<(String, u64)>,
}

impl KeptOps {
    /// The state `state` is, over the pending operations `pending` (in words).
    pub fn of(state: &CrashState, pending: &[String]) -> KeptOps {
        let name = |p: u32| pending.get(p as usize).cloned().unwrap_or_default();
        KeptOps { ops: state.kept.iter().map(|p| name(*p)).collect(), torn: state.torn.map(|(p, k)| (name(p), k)) }
    }

    /// The state over `pending` that keeps the operations named here (each name matches the
    /// first pending operation of that name not matched yet); names `pending` has not are lost.
    pub fn state_over(&self, pending: &[String]) -> CrashState {
        let mut used = vec![false; pending.len()];
        let mut find = |name: &str| {
            let at = (0..pending.len()).find(|i| !used[*i] && pending[*i] == name)?;
            used[at] = true;
            Some(at as u32)
        };
        let mut kept: Vec<u32> = self.ops.iter().filter_map(|n| find(n)).collect();
        kept.sort_unstable();
        let torn = self.torn.as_ref().and_then(|(n, k)| find(n).map(|p| (p, *k)));
        CrashState { kept, torn }
    }

    /// In words.
    pub fn describe(&self) -> String {
        let mut s = if self.ops.is_empty() {
            "nothing pending kept".to_string()
        } else {
            format!("kept: {}", self.ops.join("; "))
        };
        if let Some((n, k)) = &self.torn {
            s.push_str(&format!("; {n} cut after {k} sectors"));
        }
        s
    }
}

/// One durable operation of a life: the path it made durable, its number on that path, when,
/// and whether it had anything to make durable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DurableOp {
    /// The path (`/` for `syncfs` and `sync`).
    pub path: String,
    /// Its number among the durable operations on `path` in this life, from 1.
    pub nth: u64,
    /// Virtual time, ns.
    pub virtual_time_ns: u64,
    /// Something was pending on its target: a crash before it and after it leave different
    /// disks.
    pub promotes: bool,
}

/// Exactly what a crash image keeps: the positions, among the operations pending at the crash
/// in program order (0-based), of those that reached the disk whole, and at most one write
/// that reached it in part: its position and how many of its 512-byte sectors made it.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct CrashState {
    /// Positions kept whole, ascending.
    pub kept: Vec<u32>,
    /// A write kept in part: (position, sectors).
    #[serde(default)]
    pub torn: Option<(u32, u64)>,
}

impl CrashState {
    /// Nothing pending reaches the disk.
    pub fn none() -> CrashState {
        CrashState::default()
    }

    /// Everything pending reaches the disk.
    pub fn all(n: usize) -> CrashState {
        CrashState { kept: (0..n as u32).collect(), torn: None }
    }

    /// The operations `pending` (in program order, in words), each marked by what the state
    /// did with it: `kept: …`, `dropped: …` or `torn after K sectors: …`.
    pub fn operations(&self, pending: &[String]) -> Vec<String> {
        pending
            .iter()
            .enumerate()
            .map(|(i, what)| {
                let i = i as u32;
                let mark = match self.torn {
                    Some((at, k)) if at == i => format!("torn after {k} sectors"),
                    _ if self.kept.contains(&i) => "kept".to_string(),
                    _ => "dropped".to_string(),
                };
                format!("{mark}: {what}")
            })
            .collect()
    }

    /// In words: `kept 3 of 7 pending operations`, `… and op 4 torn after 2 sectors`.
    pub fn describe(&self, pending: usize) -> String {
        let mut s = format!("kept {} of {pending} pending operations", self.kept.len());
        if let Some((at, k)) = self.torn {
            s.push_str(&format!(", operation {} torn after {k} sectors", at + 1));
        }
        s
    }
}

/// A failed sync of a file: which of the file's pending operations it wrote back before it
/// failed (the rest were dropped, as Linux drops the dirty pages of a failed write-back).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailedSync {
    /// The fault, in words: `EIO on fsync #2 of /data/log`.
    pub point: String,
    /// The file's pending operations at the failure, in program order, in words.
    pub pending: Vec<String>,
    /// For each, whether it was written back.
    pub kept: Vec<bool>,
    /// The crash models whose ordering what it wrote back keeps, weakest first: every model
    /// when it wrote back nothing (Linux's usual outcome); `process-kill`, which says nothing
    /// of what a failing disk writes, allows every write-back.
    #[serde(default)]
    pub models: Vec<crate::fs::CrashModel>,
}

/// What a crash kept: the state, and the operations that were pending, in words (by meaning:
/// what lets a crash state be replayed against another binary).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CrashAt {
    /// The crash state the image took.
    pub state: CrashState,
    /// The operations pending at the crash, in program order, in words.
    pub pending: Vec<String>,
    /// The crash models that allow the state, weakest first.
    #[serde(default)]
    pub models: Vec<crate::fs::CrashModel>,
}

/// An error placed on a chosen operation: the `nth` (from 1; 0: every one) `op` on `path` fails
/// with `errno` before it changes anything. A failed sync drops the pending operations it would
/// have made durable. For reads, `range` limits the rule to reads that overlap `[start, end)`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ErrorRule {
    /// Which operation.
    pub op: IoOp,
    /// The guest path it concerns.
    pub path: String,
    /// Which occurrence of `op` on `path`, from 1; 0 means every one.
    pub nth: u64,
    /// The error.
    pub errno: IoErrno,
    /// For reads: the byte range the read must overlap.
    #[serde(default)]
    pub range: Option<(u64, u64)>,
    /// For a failed fsync of a file: the positions (from 0, in program order) among the file's
    /// pending operations of those it wrote back before it failed, projected onto the crash
    /// model. `None`: Linux's usual outcome, everything it covered dropped (or, under
    /// `reordered_writes`, each kept or dropped by a decision).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep: Option<Vec<u32>>,
}

impl ErrorRule {
    /// The `nth` `op` on `path` fails with `errno` (no range, nothing written back).
    pub fn at(op: IoOp, path: &str, nth: u64, errno: IoErrno) -> ErrorRule {
        ErrorRule { op, path: path.to_string(), nth, errno, range: None, keep: None }
    }

    /// In words: `EIO on write #4 to /data/wal`.
    pub fn describe(&self) -> String {
        let which = if self.nth == 0 { "every".to_string() } else { format!("#{}", self.nth) };
        let range = self.range.map(|(a, b)| format!(" (bytes {a}..{b})")).unwrap_or_default();
        let prep = if self.op == IoOp::Write { "to" } else { "of" };
        let keep = match &self.keep {
            None => String::new(),
            Some(k) if k.is_empty() => ", writing back none of its pending operations".into(),
            Some(k) => {
                let names: Vec<String> = k.iter().map(|i| (i + 1).to_string()).collect();
                format!(", writing back its pending operation(s) {}", names.join(", "))
            }
        };
        format!("{} on {} {which} {prep} {}{range}{keep}", self.errno.name().to_uppercase(), self.op.name(), self.path)
    }

    /// As the command line writes it (what [`ErrorRule::parse`] reads back).
    pub fn arg(&self) -> String {
        let range = self.range.map(|(a, b)| format!(":{a}-{b}")).unwrap_or_default();
        let keep = match &self.keep {
            None => String::new(),
            Some(k) => format!(":keep={}", k.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(",")),
        };
        format!("{}:{}:{}:{}{range}{keep}", self.op.name(), self.path, self.nth, self.errno.name())
    }

    /// Parses `OP:PATH[:NTH[:ERRNO[:START-END]]][:keep=I,J,…]`, e.g. `write:/data/wal:4:eio`,
    /// or `fsync:/data/wal:2:eio:keep=0,2` (the failed fsync wrote back the first and third of
    /// the file's pending operations).
    pub fn parse(text: &str) -> Result<ErrorRule, String> {
        let mut parts: Vec<&str> = text.split(':').collect();
        let keep = match parts.last().and_then(|p| p.strip_prefix("keep=")) {
            Some(list) => {
                let mut k: Vec<u32> = Vec::new();
                for i in list.split(',').filter(|i| !i.is_empty()) {
                    k.push(i.parse().map_err(|_| format!("{text:?}: keep= takes positions from 0, not {i:?}"))?);
                }
                k.sort_unstable();
                k.dedup();
                parts.pop();
                Some(k)
            }
            None => None,
        };
        let op = match parts.first().copied() {
            Some("write") => IoOp::Write,
            Some("fsync") => IoOp::Fsync,
            Some("truncate") => IoOp::Truncate,
            Some("fallocate") => IoOp::Fallocate,
            Some("create") => IoOp::Create,
            Some("rename") => IoOp::Rename,
            Some("read") => IoOp::Read,
            _ => {
                return Err(format!(
                    "{text:?}: the operation must be write, fsync, truncate, fallocate, create, rename or read"
                ))
            }
        };
        let path = parts
            .get(1)
            .filter(|p| p.starts_with('/'))
            .ok_or_else(|| format!("{text:?}: give an absolute guest path"))?;
        let nth = match parts.get(2) {
            None => 1,
            Some(n) => n.parse().map_err(|_| format!("{text:?}: {n:?} is not a count"))?,
        };
        let errno = match parts.get(3).copied() {
            None | Some("eio") => IoErrno::Eio,
            Some("enospc") => IoErrno::Enospc,
            Some(e) => return Err(format!("{text:?}: the error must be eio or enospc, not {e:?}")),
        };
        let range = match parts.get(4) {
            None => None,
            Some(r) => {
                let (a, b) = r.split_once('-').ok_or_else(|| format!("{text:?}: a range is START-END"))?;
                let (a, b): (u64, u64) = (
                    a.parse().map_err(|_| format!("{text:?}: bad range"))?,
                    b.parse().map_err(|_| format!("{text:?}: bad range"))?,
                );
                if a >= b {
                    return Err(format!("{text:?}: an empty range"));
                }
                Some((a, b))
            }
        };
        if parts.len() > 5 {
            return Err(format!("{text:?}: expected OP:PATH[:NTH[:ERRNO[:START-END]]][:keep=I,J]"));
        }
        if keep.is_some() && op != IoOp::Fsync {
            return Err(format!("{text:?}: keep= is for a failed fsync"));
        }
        Ok(ErrorRule { op, path: path.to_string(), nth, errno, range, keep })
    }
}

/// How often the first life performed one kind of operation on one path (what an explorer
/// can place an error on).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IoCount {
    /// The operation.
    pub op: IoOp,
    /// The path.
    pub path: String,
    /// How many times.
    pub count: u64,
}

/// One entry of the fault ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultRecord {
    /// The kind.
    pub kind: FaultKind,
    /// Where: `durable write 3`, `write #17 to /data/wal`, `fsync #2 of /data`, `crash image: /data/wal`.
    pub point: String,
    /// Index of the syscall it happened in (for crash images: the number of syscalls served
    /// when the image was taken).
    pub syscall_index: u64,
    /// The path it concerns, if any (what the next incarnation may observe).
    pub path: Option<String>,
    /// The decision chose to deviate from the fault-free behaviour.
    pub selected: bool,
    /// It changed state (a call failed, an image differs from the fault-free one).
    pub applied: bool,
    /// The program saw it: an errno returned to it, or (crash images) the next incarnation
    /// opened, stat'ed or listed the path.
    pub observed: bool,
}

/// One entry of the decision log (see [the crate documentation](crate#decisions)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecisionRecord {
    /// Position in the run's decision log, 0-based (the key of an override).
    pub index: u64,
    /// Where: `eio on write #4 to /data/wal`, `crash state: keep write of 4096 bytes at 0 to
    /// /data/wal`, `sdk random #3`, `sdk choice #5 of 3` (SDK requests are numbered per kind
    /// from 1).
    pub point: DecisionPoint,
    /// How many options there were; `0` means any `u64` (the full 64-bit range).
    pub options: u64,
    /// The choice: `0..options`, or any `u64` when `options == 0`.
    pub choice: u64,
    /// The choice came from an override, not from the decision stream.
    pub overridden: bool,
    /// Virtual time (ns) when it was taken.
    #[serde(default)]
    pub time_ns: u64,
}

/// A choice among `options` (`0`: any `u64`) from the words `next` gives: unbiased (Lemire's
/// multiply-and-reject).
fn bounded(options: u64, mut next: impl FnMut() -> u64) -> u64 {
    let mut x = next();
    if options == 0 {
        return x;
    }
    let n = u128::from(options);
    let mut m = u128::from(x) * n;
    if (m as u64) < options {
        let reject_below = options.wrapping_neg() % options;
        while (m as u64) < reject_below {
            x = next();
            m = u128::from(x) * n;
        }
    }
    (m >> 64) as u64
}

/// A decision stream with its overrides and log: how every decision of a node kernel (in
/// [`FaultState`]) and of a cluster's network and fault schedule is taken.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecisionLog {
    pub(crate) stream: RandomStream,
    /// Choices by decision index (see [`DecisionLog::decide`]).
    pub(crate) overrides: BTreeMap<u64, u64>,
    pub(crate) decisions: Vec<DecisionRecord>,
    /// The virtual time decisions are taken at now (see [`DecisionLog::set_time`]).
    #[serde(default)]
    pub(crate) time_ns: u64,
    /// When set, the natural choices of [`DecisionLog::decide_keyed`] are a function of this
    /// key and the decision's meaning instead of the stream's next bytes (see
    /// [`DecisionLog::key_by_meaning`]). Not persisted, so a node kernel's snapshot format is
    /// unchanged: only a cluster's own log is ever keyed, and a cluster's state lives in memory
    /// (its forks are clones), never in a file.
    #[serde(skip)]
    pub(crate) meaning_key: Option<[u8; 32]>,
}

impl DecisionLog {
    /// A log whose stream is keyed by the BLAKE3 key-derivation `context` and `seed`.
    pub fn new(context: &str, seed: u64) -> Self {
        DecisionLog {
            stream: RandomStream::with_context(context, seed),
            overrides: BTreeMap::new(),
            decisions: Vec::new(),
            time_ns: 0,
            meaning_key: None,
        }
    }

    /// From now on, [`decide_keyed`](DecisionLog::decide_keyed) draws each natural choice from
    /// the BLAKE3 keyed hash (key derived from `context` and `seed`) of the decision's point and
    /// meaning, so it no longer depends on how many decisions came before it. A run that takes
    /// one decision more elsewhere keeps every keyed choice it shares with the run that did
    /// not. Overrides still apply by index.
    pub fn key_by_meaning(&mut self, context: &str, seed: u64) {
        self.meaning_key = Some(blake3::derive_key(context, &seed.to_le_bytes()));
    }

    /// True if keyed decisions are drawn by meaning.
    pub fn keyed_by_meaning(&self) -> bool {
        self.meaning_key.is_some()
    }

    /// Sets the virtual time the next decisions are recorded at.
    pub fn set_time(&mut self, ns: u64) {
        self.time_ns = ns;
    }

    /// Draws every decision from now on that is not overridden from `seed`'s stream (a
    /// steered child keeps its parent's course through overrides, and draws the rest afresh).
    pub fn reseed(&mut self, context: &str, seed: u64) {
        self.stream.reseed_with_context(context, seed);
    }

    /// Takes decision number [`len()`](DecisionLog::len) among `options` choices (`0`: any
    /// `u64`), recorded at `point`: the natural choice is always drawn, then replaced by the
    /// override for this index if there is one.
    pub fn decide(&mut self, point: DecisionPoint, options: u64) -> u64 {
        let natural = bounded(options, || self.next_u64());
        self.take(point, options, natural)
    }

    /// Like [`decide`](DecisionLog::decide), but once the log is [keyed by
    /// meaning](DecisionLog::key_by_meaning) the natural choice is a function of `point` and
    /// `meaning` alone (the stream is not touched). Before that it is `decide`.
    pub fn decide_keyed(&mut self, point: DecisionPoint, options: u64, meaning: &[u8]) -> u64 {
        let Some(key) = self.meaning_key else { return self.decide(point, options) };
        let words = point.to_string();
        let mut hasher = blake3::Hasher::new_keyed(&key);
        hasher.update(&(words.len() as u64).to_le_bytes());
        hasher.update(words.as_bytes());
        hasher.update(meaning);
        let mut xof = hasher.finalize_xof();
        let natural = bounded(options, || {
            let mut b = [0u8; 8];
            xof.fill(&mut b);
            u64::from_le_bytes(b)
        });
        self.take(point, options, natural)
    }

    /// Records decision number [`len()`](DecisionLog::len): `natural`, unless overridden.
    fn take(&mut self, point: DecisionPoint, options: u64, natural: u64) -> u64 {
        let index = self.decisions.len() as u64;
        let (choice, overridden) = match self.overrides.get(&index) {
            Some(&c) if options == 0 => (c, true),
            Some(&c) => (c % options, true),
            None => (natural, false),
        };
        self.decisions.push(DecisionRecord { index, point, options, choice, overridden, time_ns: self.time_ns });
        choice
    }

    fn next_u64(&mut self) -> u64 {
        let mut b = [0u8; 8];
        self.stream.fill(&mut b);
        u64::from_le_bytes(b)
    }

    /// Draws what [`decide`](DecisionLog::decide) draws for a decision among `options`, and
    /// records nothing (the stream of a log that is not keyed by meaning).
    pub(crate) fn redraw(&mut self, options: u64) {
        if self.meaning_key.is_none() {
            bounded(options, || self.next_u64());
        }
    }

    /// Steers decisions by index.
    pub fn set_overrides(&mut self, overrides: BTreeMap<u64, u64>) {
        self.overrides = overrides;
    }

    /// The overrides.
    pub fn overrides(&self) -> &BTreeMap<u64, u64> {
        &self.overrides
    }

    /// Every decision taken, in order.
    pub fn records(&self) -> &[DecisionRecord] {
        &self.decisions
    }

    /// How many decisions were taken.
    pub fn len(&self) -> u64 {
        self.decisions.len() as u64
    }

    /// True if none was taken.
    pub fn is_empty(&self) -> bool {
        self.decisions.is_empty()
    }
}

/// The kernel's fault state (saved with the kernel).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct FaultState {
    pub config: FaultConfig,
    pub log: DecisionLog,
    pub ledger: Vec<FaultRecord>,
    /// The previous incarnation's records (`observed` flips here).
    pub previous: Vec<FaultRecord>,
    pub durable_writes: u64,
    pub file_writes: u64,
    pub syncs: u64,
    /// SDK `Random` requests served.
    pub sdk_randoms: u64,
    /// SDK `Choice` requests served.
    pub sdk_choices: u64,
    /// The configured crash point was reached in the current syscall.
    pub crash_due: bool,
    /// Where the crash happens, in words: `before durable write 4`, `at exit`.
    #[serde(default)]
    pub crash_point: String,
    /// Operations performed, by `op path` (for error rules and the explorer's menu).
    #[serde(default)]
    pub op_counts: BTreeMap<(IoOp, String), u64>,
    /// A fault was injected in this life, or it is a life after a crash: syscall outcomes are
    /// being recorded for the explorer.
    #[serde(default)]
    pub faulted: bool,
    /// (syscall number, errno or 0) of the syscalls since `faulted`, at most
    /// [`MAX_AFTER_FAULT`].
    #[serde(default)]
    pub after_fault: Vec<(u64, u64)>,
    /// The crash state the last crash image took.
    #[serde(default)]
    pub last_crash_state: Option<CrashAt>,
    /// The failed syncs of files in this life, at most [`MAX_DURABLE_LOG`].
    #[serde(default)]
    pub failed_syncs: Vec<FailedSync>,
    /// What the placed error that struck last says a failed sync wrote back ([`ErrorRule::keep`]).
    #[serde(default)]
    pub struck_keep: Option<Vec<u32>>,
    /// Durable operations made so far in this life, by path.
    #[serde(default)]
    pub durable_ops: BTreeMap<String, u64>,
    /// The durable operations of this life, in order, at most [`MAX_DURABLE_LOG`].
    #[serde(default)]
    pub durable_log: Vec<DurableOp>,
    /// What the crash armed now keeps, when it was placed by meaning with a named state.
    #[serde(default)]
    pub crash_keep: Option<KeptOps>,
    /// The crash placed by meaning that struck, if one did.
    #[serde(default)]
    pub crash_struck: Option<OpCrash>,
    /// Path prefixes the program excluded from storage faults (its own harness files).
    #[serde(default)]
    pub excluded: Vec<String>,
    /// The program declared that a stop after an injected fault is a failure, not a fail-stop.
    #[serde(default)]
    pub fail_stop_is_failure: bool,
    /// The life ended with a non-zero status after an injected I/O error, and was not turned
    /// into a restart (see [`FailStop`]).
    #[serde(default)]
    pub stopped_after_fault: Option<String>,
    /// The crash armed now is a fail-stop's restart: its image keeps everything pending.
    #[serde(default)]
    pub fail_stopped: bool,
    /// Commits after the first I/O error injected into this life: durable operations on paths
    /// the faults may strike, each after a successful write to such a path since the error or
    /// the previous one (the `auto` fail-stop rule counts them).
    #[serde(default)]
    pub durable_after_error: u64,
    /// A write to a path the faults may strike succeeded after the first injected error, and no
    /// durable operation has followed it yet.
    #[serde(default)]
    pub wrote_after_error: bool,
    /// The life ended non-zero after an injected I/O error, and the fail-stop rule said it
    /// failed: why, in words.
    #[serde(default)]
    pub not_fail_stop: Option<String>,
    /// Durable operations made by processes of each name (but pid 1), in the life.
    #[serde(default)]
    pub process_ops: BTreeMap<String, u64>,
    /// Durable operations made by each process (but pid 1), in the life.
    #[serde(default)]
    pub pid_ops: BTreeMap<u64, u64>,
    /// A [`ProcessKill`] struck in the syscall being served: the calling process dies of
    /// `SIGKILL` when it returns, with these words.
    #[serde(default)]
    pub kill_due: Option<String>,
}

/// Durable operations a life's report lists, at most.
pub const MAX_DURABLE_LOG: usize = 4096;

/// Lives a run may have before a stop after an injected fault is no longer turned into a crash
/// and a restart: every rate-driven error would otherwise stop and restart the program for
/// ever.
pub const MAX_FAIL_STOP_LIVES: usize = 16;

/// Syscall outcomes recorded after the first fault, at most.
pub const MAX_AFTER_FAULT: usize = 256;

impl FaultState {
    pub fn new(config: FaultConfig, seed: u64) -> Self {
        FaultState {
            config,
            log: DecisionLog::new(FAULT_CONTEXT, seed),
            ledger: Vec::new(),
            previous: Vec::new(),
            durable_writes: 0,
            file_writes: 0,
            syncs: 0,
            sdk_randoms: 0,
            sdk_choices: 0,
            crash_due: false,
            crash_point: String::new(),
            op_counts: BTreeMap::new(),
            faulted: false,
            after_fault: Vec::new(),
            last_crash_state: None,
            failed_syncs: Vec::new(),
            struck_keep: None,
            durable_ops: BTreeMap::new(),
            durable_log: Vec::new(),
            crash_keep: None,
            crash_struck: None,
            excluded: Vec::new(),
            fail_stop_is_failure: false,
            stopped_after_fault: None,
            fail_stopped: false,
            durable_after_error: 0,
            wrote_after_error: false,
            not_fail_stop: None,
            process_ops: BTreeMap::new(),
            pid_ops: BTreeMap::new(),
            kill_due: None,
        }
    }

    /// True when storage faults may strike `path`: the configuration targets it and the
    /// program did not exclude it.
    pub fn faultable(&self, path: &str) -> bool {
        self.config.targets(path) && !self.excluded.iter().any(|p| under(path, p))
    }

    /// Takes a decision (see [`DecisionLog::decide`]).
    pub fn decide(&mut self, point: DecisionPoint, options: u64) -> u64 {
        self.log.decide(point, options)
    }

    /// The SDK's `Random`: a decision over the full 64-bit range.
    pub fn sdk_random(&mut self) -> u64 {
        self.sdk_randoms = self.sdk_randoms.saturating_add(1);
        self.decide(DecisionPoint::SdkRandom { n: self.sdk_randoms }, 0)
    }

    /// The SDK's `Choice(n)` (`n > 0`): a decision among `n` options.
    pub fn sdk_choice(&mut self, n: u64) -> u64 {
        self.sdk_choices = self.sdk_choices.saturating_add(1);
        self.decide(DecisionPoint::SdkChoice { n: self.sdk_choices, options: n }, n)
    }

    /// Decides whether a fault of probability `ppm` (parts per million) strikes at `point`.
    pub fn strike(&mut self, ppm: u32, point: DecisionPoint) -> bool {
        if ppm == 0 {
            return false;
        }
        let roll = self.decide(point, 1_000_000);
        roll < u64::from(ppm)
    }

    /// Flips `observed` on the previous incarnation's records about `path`.
    pub fn observe(&mut self, path: &str) {
        for r in &mut self.previous {
            if r.path.as_deref() == Some(path) {
                r.observed = true;
            }
        }
    }
}

impl Persist for FaultState {
    /// Nothing: the checks need no other part.
    type Context = ();

    /// Checks the invariants of a restored fault state: the decision stream's, decisions
    /// numbered in order with their choices among their options, and no more SDK decisions
    /// than decisions.
    fn validate(&self, _: &()) -> Result<(), RestoreError> {
        self.log.stream.validate()?;
        for (i, d) in self.log.decisions.iter().enumerate() {
            ensure(d.index == i as u64, || format!("decision {i} has index {}", d.index))?;
            ensure(d.options == 0 || d.choice < d.options, || {
                format!("decision {:?} chose {} of {}", d.point.to_string(), d.choice, d.options)
            })?;
        }
        let sdk = self.sdk_randoms.checked_add(self.sdk_choices);
        ensure(sdk.is_some_and(|n| n <= self.log.decisions.len() as u64), || {
            format!(
                "{} sdk randoms and {} sdk choices but {} decisions",
                self.sdk_randoms,
                self.sdk_choices,
                self.log.decisions.len()
            )
        })?;
        Ok(())
    }
}
