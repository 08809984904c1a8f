//! Which faults to inject ([`FaultConfig`]): the crash points, the crash-state modes and rates,
//! the errors placed on chosen operations ([`ErrorRule`]), the processes killed by meaning
//! ([`ProcessKill`]), the paths faults may strike, and the run-wide settings a restart keeps.

use crate::prelude::*;

use serde::{Deserialize, Serialize};

use super::{CrashState, IoErrno, IoOp, OpCrash, When};

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
    pub fail_stop: crate::decisions::fault_kinds::FailStopMode,
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
