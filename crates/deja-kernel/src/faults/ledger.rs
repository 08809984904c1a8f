//! What a life's faults leave for its report: the fault ledger's entries ([`FaultRecord`]), its
//! durable operations ([`DurableOp`]), its failed syncs ([`FailedSync`]) and how often it
//! performed each operation on each path ([`IoCount`]).

use crate::prelude::*;

use serde::{Deserialize, Serialize};

use super::{FaultKind, IoOp};

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
