//! The operations pending on a file (writes, size changes) and on a directory (entry changes)
//! until a sync makes them durable, how they merge past [`MAX_PENDING`], and which of them a
//! crash image keeps ([`PendingOp`], [`Selection`]).

use crate::prelude::*;
use alloc::collections::BTreeMap;

use super::*;

/// A pending (unsynced) operation on a file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Pending {
    /// Bytes written at an offset.
    Write {
        /// Offset.
        off: u64,
        /// Bytes.
        #[serde(with = "crate::persist::vec_bytes")]
        data: Vec<u8>,
    },
    /// The size set (truncate, extend, `O_TRUNC`, `fallocate`).
    SetSize(u64),
    /// Merged older operations: the whole contents after them (never torn).
    Replace(#[serde(with = "crate::persist::vec_bytes")] Vec<u8>),
}

impl Pending {
    /// Applies the operation to `d`.
    pub fn apply(&self, d: &mut Vec<u8>) {
        match self {
            Pending::Write { off, data } => {
                let off = *off as usize;
                let end = off + data.len();
                if d.len() < end {
                    d.resize(end, 0);
                }
                d[off..end].copy_from_slice(data);
            }
            Pending::SetSize(n) => d.resize(*n as usize, 0),
            Pending::Replace(c) => c.clone_into(d),
        }
    }

    /// Sectors the operation spans (at least 1; merged operations and size changes are 1).
    pub fn sectors(&self) -> u64 {
        match self {
            Pending::Write { off, data } if !data.is_empty() => {
                (off + data.len() as u64).div_ceil(SECTOR) - off / SECTOR
            }
            _ => 1,
        }
    }

    /// The part of the operation in its first `k` sectors (`None` when nothing).
    pub fn torn(&self, k: u64) -> Option<Pending> {
        if k == 0 {
            return None;
        }
        if k >= self.sectors() {
            return Some(self.clone());
        }
        match self {
            Pending::Write { off, data } => {
                let keep = ((off / SECTOR + k) * SECTOR - off) as usize;
                Some(Pending::Write { off: *off, data: data[..keep.min(data.len())].to_vec() })
            }
            other => Some(other.clone()),
        }
    }

    fn bytes(&self) -> usize {
        match self {
            Pending::Write { data, .. } | Pending::Replace(data) => data.len(),
            Pending::SetSize(_) => 0,
        }
    }
}

/// A writable regular file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileData {
    /// Volatile contents.
    #[serde(with = "crate::persist::vec_bytes")]
    pub data: Vec<u8>,
    /// Durable contents.
    #[serde(with = "crate::persist::vec_bytes")]
    pub durable: Vec<u8>,
    /// Pending operations since the last sync, in order, each with its place in the node's
    /// program order (see [`Fs::pending_ops`]).
    pub pending: Vec<(u64, Pending)>,
    /// A failed sync dropped pending operations (Linux's behaviour after an fsync error): the
    /// volatile contents hold bytes that will never become durable unless written again.
    pub dropped: bool,
}

impl FileData {
    pub(super) fn new(data: Vec<u8>) -> Self {
        FileData { durable: data.clone(), data, pending: Vec::new(), dropped: false }
    }

    pub(super) fn push(&mut self, seq: u64, op: Pending) {
        let mut bytes: usize = self.pending.iter().map(|p| p.1.bytes()).sum::<usize>() + op.bytes();
        while self.pending.len() >= 2 && (self.pending.len() >= MAX_PENDING || bytes > MAX_PENDING_BYTES) {
            // Merge the two oldest into one whole-contents operation, at the older one's place.
            let mut c = self.durable.clone();
            self.pending[0].1.apply(&mut c);
            self.pending[1].1.apply(&mut c);
            bytes = bytes + c.len() - self.pending[0].1.bytes() - self.pending[1].1.bytes();
            let at = self.pending[0].0;
            self.pending.splice(0..2, [(at, Pending::Replace(c))]);
            if self.pending.len() == 1 {
                break;
            }
        }
        self.pending.push((seq, op));
    }

    pub(super) fn flush(&mut self) {
        for (_, op) in core::mem::take(&mut self.pending) {
            op.apply(&mut self.durable);
        }
        debug_assert!(self.dropped || self.durable == self.data);
    }
}

/// A pending change to a directory's entries. A change made by one call is one operation (a
/// rename within a directory replaces its target and removes its source atomically).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum DirOp {
    /// `name` now names inode `id` (create, link, mkdir, symlink, a rename's target).
    Set(String, u64),
    /// `name` no longer exists (unlink, rmdir, a rename's source).
    Remove(String),
}

/// A directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirData {
    /// Volatile entries: name → inode id.
    pub entries: BTreeMap<String, u64>,
    /// Durable entries.
    pub durable: BTreeMap<String, u64>,
    /// The parent directory's id (itself for `/`).
    pub parent: u64,
    /// Pending entry changes since the last sync, in order, each with its place in the node's
    /// program order; one element per call.
    pub pending: Vec<(u64, Vec<DirOp>)>,
    /// A failed sync dropped pending changes: the volatile entries hold changes that will never
    /// become durable.
    pub dropped: bool,
}

/// Applies one pending directory operation to an entry map.
pub(super) fn apply_dir_ops(entries: &mut BTreeMap<String, u64>, ops: &[DirOp]) {
    for op in ops {
        match op {
            DirOp::Set(name, id) => {
                entries.insert(name.clone(), *id);
            }
            DirOp::Remove(name) => {
                entries.remove(name);
            }
        }
    }
}

/// One operation still pending at a crash, in the node's program order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingOp {
    /// Its place in program order.
    pub seq: u64,
    /// The file or directory it changes.
    pub target: u64,
    /// Its index in the target's pending list.
    pub slot: usize,
    /// For a write: how many 512-byte sectors it spans (the ways it can be torn).
    pub sectors: Option<u64>,
    /// What it is, for people: `write of 4096 bytes at 0 to /data/wal`.
    pub what: String,
    /// What kind of change it is, as the crash models tell them apart.
    pub class: OpClass,
    /// The position of the other half of the same call (a rename between two directories is
    /// one operation in each), when that half is pending too.
    pub joined: Option<usize>,
    /// A journaled change (entries, sizes) that a later successful sync of anything came
    /// after: a journaling file system committed it with that sync's transaction.
    pub committed: bool,
}

/// Which pending operations a crash image keeps: `kept[i]` for the i-th of
/// [`Fs::pending_ops`], and at most one write that reached the disk only in part: its
/// position and how many of its sectors (`1..sectors`) made it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    /// Kept whole, by position.
    pub kept: Vec<bool>,
    /// The torn write: position and sectors kept.
    pub torn: Option<(usize, u64)>,
}

impl DirData {
    pub(super) fn default_for(parent: u64) -> Self {
        DirData { entries: BTreeMap::new(), durable: BTreeMap::new(), parent, pending: Vec::new(), dropped: false }
    }
}
