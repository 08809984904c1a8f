//! The node's file system: an in-memory inode tree with a volatile and a durable layer.
//!
//! # The crash model: posix-weak
//!
//! deja models a POSIX file system without journaling, the weakest model ALICE considers:
//! **each file's data and each directory's entries become durable independently, and only
//! through explicit syncs; a crash keeps any subset of what is still pending.**
//!
//! - **Pending operations.** Every change is an operation pending until a sync covers it, in
//!   one program order for the whole node: a file's writes and size changes (`write`,
//!   `ftruncate`, a growing `fallocate`, `O_TRUNC`, an append past the end), until an `fsync`,
//!   `fdatasync`, `sync_file_range` with `SYNC_FILE_RANGE_WRITE`, `syncfs`, `sync` or an
//!   `O_SYNC`/`O_DSYNC` write covers the file (each flushes the file's whole data: at least what
//!   Linux keeps); a directory's entry changes (`creat`/`O_CREAT`, `link`, `symlink`, `mkdir`,
//!   `unlink`, `rmdir`, `rename`), until an `fsync` of that directory, `syncfs` or `sync`. What one
//!   call does to one directory is one operation: a rename within a directory replaces its
//!   target and removes its source atomically; a rename between two directories is an
//!   operation in each, and a crash may keep either, both or neither. `fsync` of a file does
//!   **not** make its name durable. A sync applies its target's pending operations to the
//!   durable layer in order.
//! - **Crash points.** Before any durable write (the sync or `O_SYNC` write not yet taken
//!   effect), right after one, at program exit, or at a kill (clusters).
//! - **Crash states.** The disk a crash leaves is the durable layer plus any subset of the
//!   pending operations, applied in program order, at most one write among them reaching the
//!   disk only in part (a prefix of its 512-byte sectors). The only dependencies are the
//!   structural ones the file system keeps: data is reached through the entries the state
//!   keeps (a file whose name is not durable is gone, a name whose file's data is not durable
//!   names an empty file), and an inode a pending entry could bring back is kept until that
//!   entry is settled.
//! - **Which states.** [`FaultConfig::crash_state`](crate::FaultConfig) names one exactly;
//!   otherwise decisions choose: none of the pending operations (no mode), a prefix and the next
//!   write torn (`torn_writes`), any subset (`reordered_writes`), any subset with one kept write
//!   torn (both). [`crate::Kernel::crash_states`] enumerates the distinct states of a crash
//!   point for a sweep.
//! - **Failed syncs.** A sync that fails (an injected EIO) drops its target's pending
//!   operations without making them durable, as Linux drops the dirty pages after an fsync
//!   error: a retry returns 0 with the data gone from the durable layer, though the program still
//!   reads it ("fsyncgate"; bytes a later write re-dirties in the same page are not restored,
//!   the case of a page evicted in between). See [`crate::faults`] for the I/O error model.
//! - Modes, timestamps and link identity are outside the model: a crash image carries the
//!   current mode, and a file with several durable links appears as separate copies.
//!
//! Each successful making-durable call is a **durable write**, numbered from 1 in program
//! order ([`Kernel::durable_writes`](crate::Kernel::durable_writes)): every `fsync`,
//! `fdatasync`, `sync_file_range` with WRITE, `syncfs` and `sync`, and every `O_SYNC`/`O_DSYNC`
//! write to a regular file, counts once, even when it had nothing to flush (it is a point where
//! the program believes its data is safe). A call that fails (bad fd, injected EIO) is not one.
//!
//! # Crash images
//!
//! [`Kernel::crash_image`](crate::Kernel::crash_image) applies the chosen state to the durable
//! layer and walks it from `/` following each directory's resulting entries. The ledger gets one
//! `reordered_writes` record (what the state kept) and a `torn_write` record when a write was cut
//! (both only when a state was named or a mode chose), and one `lost_unsynced` record per path
//! whose image differs from the volatile view (contents, kind or presence).
//!
//! # Limits
//!
//! Names are at most 255 bytes (`ENAMETOOLONG`), paths shorter than 4096, 40 symlinks per
//! lookup (`ELOOP`). Files are stored densely: the volatile size of all files together is
//! bounded by [`FsConfig::capacity_bytes`] (`ENOSPC`, also for a `truncate` that would grow
//! past it, where Linux would make a sparse file). A file or directory with more than [`MAX_PENDING`]
//! pending operations (or [`MAX_PENDING_BYTES`] pending bytes) has the oldest merged into one
//! operation that is kept or lost as a whole (never torn): images stay within the model, only
//! fewer of them are reachable.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::disk::{parent_of, Disk, DiskEntry};
use crate::errno::*;
use crate::faults::FaultKind;
use crate::fd::{ino_of, Stat, S_IFCHR, S_IFDIR, S_IFLNK, S_IFREG};
use crate::persist::{ensure, RestoreError};

/// Id of `/` in the inode table.
pub const ROOT: u64 = 0;
/// Sector size of torn writes.
pub const SECTOR: u64 = 512;
/// Longest name.
pub const NAME_MAX: usize = 255;
/// Paths must be shorter than this.
pub const PATH_MAX: usize = 4096;
/// Symlinks followed in one lookup.
pub const MAX_SYMLINKS: u32 = 40;
/// Pending operations kept per file before the oldest are merged.
pub const MAX_PENDING: usize = 256;
/// Bytes of pending writes kept per file before the oldest are merged.
pub const MAX_PENDING_BYTES: usize = 64 << 20;
/// First inode number of created files (below: hashed numbers of the static files).
const FIRST_INO: u64 = 1 << 32;

/// File system settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsConfig {
    /// Bytes of file contents the disk holds (default 256 MiB).
    pub capacity_bytes: u64,
}

impl Default for FsConfig {
    fn default() -> Self {
        FsConfig { capacity_bytes: 256 << 20 }
    }
}

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
    fn new(data: Vec<u8>) -> Self {
        FileData { durable: data.clone(), data, pending: Vec::new(), dropped: false }
    }

    fn push(&mut self, seq: u64, op: Pending) {
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

    fn flush(&mut self) {
        for (_, op) in std::mem::take(&mut self.pending) {
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
fn apply_dir_ops(entries: &mut BTreeMap<String, u64>, ops: &[DirOp]) {
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

/// What an inode is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Kind {
    /// A writable regular file.
    File(FileData),
    /// A read-only file: a declared input or the executable.
    Static(#[serde(with = "crate::persist::arc_bytes")] Arc<[u8]>),
    /// A directory.
    Dir(DirData),
    /// A symbolic link.
    Symlink(String),
    /// `/proc/self/maps`.
    ProcMaps,
    /// `/proc/self/exe` (a symlink to the executable's path).
    ExeLink,
    /// `/dev/null`.
    DevNull,
    /// `/dev/random` (8) or `/dev/urandom` (9).
    Random(u32),
}

/// One inode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inode {
    /// `st_ino`.
    pub ino: u64,
    /// Permission bits.
    pub mode: u32,
    /// atime, mtime, ctime (ns since the Unix epoch).
    pub times: [u64; 3],
    /// What it is.
    pub kind: Kind,
    /// Volatile directory entries naming it.
    pub nlink: u64,
    /// Durable directory entries naming it.
    pub durable_links: u64,
    /// Pending directory changes (not yet durable) that would name it: a crash may keep one.
    pub pending_links: u64,
    /// Open file descriptions referring to it.
    pub open: u64,
    /// Part of the disk (false for declared inputs, the executable, `/proc`, `/dev`).
    pub persist: bool,
    /// Cannot be changed: writes give `EROFS` (files) or `EACCES` (directories).
    pub readonly: bool,
}

impl Inode {
    /// True for directories.
    pub fn is_dir(&self) -> bool {
        matches!(self.kind, Kind::Dir(_))
    }

    /// The dirent type.
    pub fn dtype(&self) -> u8 {
        match self.kind {
            Kind::File(_) | Kind::Static(_) | Kind::ProcMaps => 8,
            Kind::Dir(_) => 4,
            Kind::Symlink(_) | Kind::ExeLink => 10,
            Kind::DevNull | Kind::Random(_) => 2,
        }
    }
}

/// Where a path led.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Walked {
    /// The directory holding the last component.
    pub parent: u64,
    /// The last component (`None` for `/`, `.` and `..`).
    pub name: Option<String>,
    /// The inode named, if it exists.
    pub id: Option<u64>,
    /// The path ended with `/`.
    pub trailing: bool,
}

/// A per-file crash decision maker: `(point, options) → choice`.
pub type Decide<'a> = dyn FnMut(String, u64) -> u64 + 'a;

/// A ledger entry produced by a crash image: kind, path, selected, applied.
pub type CrashRecord = (FaultKind, String, bool, bool);

/// The file system.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fs {
    inodes: BTreeMap<u64, Inode>,
    /// The next place in program order of a pending operation.
    seq: u64,
    next_id: u64,
    next_ino: u64,
    used: u64,
    capacity: u64,
    exe_path: String,
}

fn static_time() -> u64 {
    crate::fd::FILE_TIME_S * 1_000_000_000
}

impl Fs {
    /// The file system of a new run: the `disk` (or `/`, `/tmp`, `/data`), then the declared
    /// `files` (read-only, replacing whatever the disk had there), the executable at
    /// `exe_path`, `/proc/self/{maps,exe}` and `/dev/{null,random,urandom}`.
    pub fn new(
        config: FsConfig,
        disk: Option<&Disk>,
        files: &BTreeMap<String, Vec<u8>>,
        exe_path: &str,
        image: &[u8],
    ) -> Fs {
        let t = static_time();
        let root = Inode {
            ino: 2,
            mode: 0o755,
            times: [t; 3],
            kind: Kind::Dir(DirData::default_for(ROOT)),
            nlink: 1,
            durable_links: 1,
            pending_links: 0,
            open: 0,
            persist: true,
            readonly: false,
        };
        let mut fs = Fs {
            inodes: BTreeMap::from([(ROOT, root)]),
            seq: 0,
            next_id: 1,
            next_ino: FIRST_INO,
            used: 0,
            capacity: config.capacity_bytes,
            exe_path: exe_path.to_string(),
        };
        match disk {
            Some(d) => {
                if let Some(DiskEntry::Dir { mode }) = d.entries.get("/") {
                    fs.set_mode(ROOT, *mode);
                }
                for (p, e) in d.entries.iter().filter(|(p, _)| *p != "/") {
                    let kind = match e {
                        DiskEntry::Dir { .. } => Kind::Dir(DirData::default_for(ROOT)),
                        DiskEntry::File { data, .. } => Kind::File(FileData::new(data.clone())),
                        DiskEntry::Symlink { target } => Kind::Symlink(target.clone()),
                    };
                    let mode = match e {
                        DiskEntry::Dir { mode } | DiskEntry::File { mode, .. } => *mode,
                        DiskEntry::Symlink { .. } => 0o777,
                    };
                    fs.place(p, kind, mode, true, false);
                }
            }
            None => {
                fs.place("/tmp", Kind::Dir(DirData::default_for(ROOT)), 0o1777, true, false);
                fs.place("/data", Kind::Dir(DirData::default_for(ROOT)), 0o755, true, false);
            }
        }
        for (p, data) in files {
            if let Ok((norm, _)) = crate::fd::normalize("/", p.as_bytes()) {
                fs.place(&norm, Kind::Static(Arc::from(data.as_slice())), 0o644, false, true);
            }
        }
        if let Ok((norm, _)) = crate::fd::normalize("/", exe_path.as_bytes()) {
            let declared =
                fs.lookup_abs(&norm).and_then(|id| fs.get(id)).is_some_and(|i| matches!(i.kind, Kind::Static(_)));
            if !declared {
                fs.place(&norm, Kind::Static(Arc::from(image)), 0o755, false, true);
            }
            fs.exe_path = norm;
        }
        for (p, kind, mode) in [
            ("/proc/self/maps", Kind::ProcMaps, 0o444),
            ("/proc/self/exe", Kind::ExeLink, 0o777),
            ("/dev/null", Kind::DevNull, 0o666),
            ("/dev/random", Kind::Random(8), 0o666),
            ("/dev/urandom", Kind::Random(9), 0o666),
        ] {
            fs.place(p, kind, mode, false, true);
        }
        for d in ["/proc", "/proc/self", "/dev"] {
            if let Some(id) = fs.lookup_abs(d) {
                if let Some(i) = fs.inodes.get_mut(&id) {
                    i.persist = false;
                    i.readonly = true;
                }
            }
        }
        // Everything placed so far is the durable starting state.
        for i in fs.inodes.values_mut() {
            if let Kind::Dir(d) = &mut i.kind {
                d.durable = d.entries.clone();
            }
        }
        fs.recount();
        fs
    }

    /// Places an inode at the absolute normalized `path`, creating directories above it and
    /// replacing what was there (an initial-state helper: no durability bookkeeping).
    fn place(&mut self, path: &str, kind: Kind, mode: u32, persist: bool, readonly: bool) {
        if path == "/" {
            return;
        }
        let mut dir = ROOT;
        let comps: Vec<&str> = path[1..].split('/').collect();
        for (i, c) in comps.iter().enumerate() {
            let last = i + 1 == comps.len();
            let existing = self.dir(dir).and_then(|d| d.entries.get(*c).copied());
            if last {
                if let Some(old) = existing {
                    if self.inodes.get(&old).is_some_and(|o| o.is_dir()) && matches!(kind, Kind::Dir(_)) {
                        return;
                    }
                }
                let ino = self.fresh_ino(path, readonly);
                let id = self.insert(ino, mode, kind, persist, readonly, static_time());
                if let Some(Inode { kind: Kind::Dir(d), .. }) = self.inodes.get_mut(&id) {
                    d.parent = dir;
                }
                self.set_entry_raw(dir, c, id);
                return;
            }
            dir = match existing {
                Some(id) if self.inodes.get(&id).is_some_and(|i| i.is_dir()) => id,
                _ => {
                    let sub: String = format!("/{}", comps[..=i].join("/"));
                    let ino = self.fresh_ino(&sub, false);
                    let id = self.insert(ino, 0o755, Kind::Dir(DirData::default_for(dir)), true, false, static_time());
                    self.set_entry_raw(dir, c, id);
                    id
                }
            };
        }
    }

    fn set_entry_raw(&mut self, dir: u64, name: &str, id: u64) {
        if let Some(Inode { kind: Kind::Dir(d), .. }) = self.inodes.get_mut(&dir) {
            d.entries.insert(name.to_string(), id);
        }
        // Unreachable leftovers (replaced disk entries) are dropped by `recount`.
    }

    /// Recomputes every link count from the trees, drops unreachable inodes, recomputes the
    /// space used. Only for the initial state (no open files yet).
    fn recount(&mut self) {
        let mut nlink: BTreeMap<u64, u64> = BTreeMap::new();
        let mut dlink: BTreeMap<u64, u64> = BTreeMap::new();
        for i in self.inodes.values() {
            if let Kind::Dir(d) = &i.kind {
                for id in d.entries.values() {
                    *nlink.entry(*id).or_default() += 1;
                }
                for id in d.durable.values() {
                    *dlink.entry(*id).or_default() += 1;
                }
            }
        }
        // Reachability from the root through either layer.
        let mut seen = BTreeSet::from([ROOT]);
        let mut work = vec![ROOT];
        while let Some(id) = work.pop() {
            if let Some(Inode { kind: Kind::Dir(d), .. }) = self.inodes.get(&id) {
                for c in d.entries.values().chain(d.durable.values()) {
                    if seen.insert(*c) {
                        work.push(*c);
                    }
                }
            }
        }
        self.inodes.retain(|id, _| seen.contains(id));
        for (id, i) in self.inodes.iter_mut() {
            if *id != ROOT {
                i.nlink = nlink.get(id).copied().unwrap_or(0);
                i.durable_links = dlink.get(id).copied().unwrap_or(0);
            }
        }
        self.used = self.inodes.values().map(file_len).sum();
    }

    fn fresh_ino(&mut self, path: &str, hashed: bool) -> u64 {
        if hashed {
            ino_of(path)
        } else {
            self.next_ino += 1;
            self.next_ino - 1
        }
    }

    fn insert(&mut self, ino: u64, mode: u32, kind: Kind, persist: bool, readonly: bool, now: u64) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.inodes.insert(
            id,
            Inode {
                ino,
                mode,
                times: [now; 3],
                kind,
                nlink: 0,
                durable_links: 0,
                pending_links: 0,
                open: 0,
                persist,
                readonly,
            },
        );
        id
    }

    /// Checks the invariants of a restored file system.
    pub fn validate(&self) -> Result<(), RestoreError> {
        let root = self.inodes.get(&ROOT);
        ensure(root.is_some_and(|r| r.is_dir()), || "the root directory is missing".into())?;
        let mut nlink: BTreeMap<u64, u64> = BTreeMap::new();
        let mut dlink: BTreeMap<u64, u64> = BTreeMap::new();
        let mut plink: BTreeMap<u64, u64> = BTreeMap::new();
        let mut seqs = BTreeSet::new();
        let mut used = 0u64;
        for (&id, i) in &self.inodes {
            ensure(id < self.next_id, || format!("inode {id} is not below the next id {}", self.next_id))?;
            used = used.saturating_add(file_len(i));
            match &i.kind {
                Kind::Dir(d) => {
                    ensure(self.inodes.get(&d.parent).is_some_and(|p| p.is_dir()), || {
                        format!("directory {id} has no parent directory {}", d.parent)
                    })?;
                    for (name, c) in d.entries.iter().chain(&d.durable) {
                        ensure(valid_name(name), || format!("directory {id} has an invalid name {name:?}"))?;
                        ensure(self.inodes.contains_key(c) && *c != ROOT, || {
                            format!("entry {name:?} of directory {id} names a missing inode {c}")
                        })?;
                    }
                    for c in d.entries.values() {
                        *nlink.entry(*c).or_default() += 1;
                    }
                    for c in d.durable.values() {
                        *dlink.entry(*c).or_default() += 1;
                    }
                    let mut replay = d.durable.clone();
                    for (seq, ops) in &d.pending {
                        ensure(seq < &self.seq && seqs.insert(*seq), || {
                            format!("directory {id}: pending change {seq} out of place")
                        })?;
                        for op in ops {
                            if let DirOp::Set(name, c) = op {
                                ensure(valid_name(name), || format!("directory {id} has an invalid pending name"))?;
                                ensure(self.inodes.contains_key(c) && *c != ROOT, || {
                                    format!("a pending change of directory {id} names a missing inode {c}")
                                })?;
                                *plink.entry(*c).or_default() += 1;
                            }
                        }
                        apply_dir_ops(&mut replay, ops);
                    }
                    ensure(d.dropped || replay == d.entries, || {
                        format!("directory {id}: durable entries and pending changes disagree")
                    })?;
                    ensure(d.pending.len() <= MAX_PENDING, || format!("directory {id} has too many pending changes"))?;
                }
                Kind::File(f) => {
                    let ops: Vec<Pending> = f.pending.iter().map(|p| p.1.clone()).collect();
                    let ok = f.dropped || simulate(&f.durable, &ops, f.data.len()).is_some_and(|c| c == f.data);
                    ensure(ok, || format!("file {id}: durable contents and pending writes disagree"))?;
                    ensure(f.pending.len() <= MAX_PENDING, || format!("file {id} has too many pending writes"))?;
                    for (seq, _) in &f.pending {
                        ensure(seq < &self.seq && seqs.insert(*seq), || {
                            format!("file {id}: pending write {seq} out of place")
                        })?;
                    }
                }
                Kind::Symlink(t) => ensure(!t.is_empty(), || format!("symlink {id} is empty"))?,
                _ => {}
            }
        }
        for (&id, i) in &self.inodes {
            if id == ROOT {
                continue;
            }
            let n = nlink.get(&id).copied().unwrap_or(0);
            let d = dlink.get(&id).copied().unwrap_or(0);
            let p = plink.get(&id).copied().unwrap_or(0);
            ensure(i.nlink == n && i.durable_links == d && i.pending_links == p, || {
                format!("inode {id} link counts are wrong")
            })?;
            ensure(n + d + p + i.open > 0, || format!("inode {id} is unreferenced"))?;
        }
        ensure(used == self.used, || format!("space used is {} but files hold {used}", self.used))?;
        Ok(())
    }

    /// Open-description counts must match the fd table: `refs` is id → count.
    pub fn validate_open(&self, refs: &BTreeMap<u64, u64>) -> Result<(), RestoreError> {
        for (&id, i) in &self.inodes {
            let n = refs.get(&id).copied().unwrap_or(0);
            ensure(i.open == n, || format!("inode {id} counts {} open descriptions but has {n}", i.open))?;
        }
        for id in refs.keys() {
            ensure(self.inodes.contains_key(id), || format!("an open file names a missing inode {id}"))?;
        }
        Ok(())
    }

    /// The normalized executable path.
    pub fn exe_path(&self) -> &str {
        &self.exe_path
    }

    /// The inode `id`.
    pub fn get(&self, id: u64) -> Option<&Inode> {
        self.inodes.get(&id)
    }

    fn dir(&self, id: u64) -> Option<&DirData> {
        match &self.inodes.get(&id)?.kind {
            Kind::Dir(d) => Some(d),
            _ => None,
        }
    }

    fn dir_mut(&mut self, id: u64) -> Option<&mut DirData> {
        match &mut self.inodes.get_mut(&id)?.kind {
            Kind::Dir(d) => Some(d),
            _ => None,
        }
    }

    /// Bytes of file contents held (the volatile view).
    pub fn used(&self) -> u64 {
        self.used
    }

    /// Resolves `path` from the directory `start` (for relative paths; `/` for absolute ones).
    /// Intermediate symlinks are always followed, the last one when `follow` (or the path ends
    /// with `/`).
    pub fn walk(&self, start: u64, path: &[u8], follow: bool) -> Result<Walked, i32> {
        if path.is_empty() {
            return Err(ENOENT);
        }
        if path.len() >= PATH_MAX {
            return Err(ENAMETOOLONG);
        }
        let path = std::str::from_utf8(path).map_err(|_| ENOENT)?;
        let trailing = path.ends_with('/');
        let mut comps: VecDeque<String> = VecDeque::new();
        let mut cur = if path.starts_with('/') { ROOT } else { start };
        push_front_all(&mut comps, path)?;
        let mut links = 0u32;
        while let Some(c) = comps.pop_front() {
            let d = self.dir(cur).ok_or(ENOTDIR)?;
            let last = comps.is_empty();
            if c == "." || c == ".." {
                let next = if c == "." { cur } else { d.parent };
                if last {
                    let parent = self.dir(next).map_or(next, |nd| nd.parent);
                    return Ok(Walked { parent, name: None, id: Some(next), trailing });
                }
                cur = next;
                continue;
            }
            let Some(&child) = d.entries.get(&c) else {
                if last {
                    return Ok(Walked { parent: cur, name: Some(c), id: None, trailing });
                }
                return Err(ENOENT);
            };
            let node = self.inodes.get(&child).ok_or(ENOENT)?;
            let target = match &node.kind {
                Kind::Symlink(t) => Some(t.clone()),
                Kind::ExeLink if self.exe_path != "/proc/self/exe" => Some(self.exe_path.clone()),
                _ => None,
            };
            if let Some(t) = target.filter(|_| !last || follow || trailing) {
                links += 1;
                if links > MAX_SYMLINKS {
                    return Err(ELOOP);
                }
                push_front_all(&mut comps, &t)?;
                if t.starts_with('/') {
                    cur = ROOT;
                }
                continue;
            }
            if last {
                return Ok(Walked { parent: cur, name: Some(c), id: Some(child), trailing });
            }
            cur = child;
        }
        // No component left: `/`, or a symlink to `/`.
        let parent = self.dir(cur).ok_or(ENOTDIR)?.parent;
        Ok(Walked { parent, name: None, id: Some(cur), trailing })
    }

    /// The id at the absolute path `path` (no symlinks followed at the end).
    pub fn lookup_abs(&self, path: &str) -> Option<u64> {
        self.walk(ROOT, path.as_bytes(), false).ok()?.id
    }

    /// The absolute path of directory `id` through the volatile tree (`None` when it is not
    /// reachable).
    pub fn dir_path(&self, mut id: u64) -> Option<String> {
        let mut names = Vec::new();
        let mut steps = 0usize;
        while id != ROOT {
            let parent = self.dir(id)?.parent;
            let (name, _) = self.dir(parent)?.entries.iter().find(|(_, c)| **c == id)?;
            names.push(name.clone());
            id = parent;
            steps += 1;
            if steps > self.inodes.len() {
                return None;
            }
        }
        names.reverse();
        Some(format!("/{}", names.join("/")))
    }

    /// `dir_path(parent)` joined with `name`.
    pub fn path_in(&self, parent: u64, name: &str) -> String {
        let base = self.dir_path(parent).unwrap_or_else(|| "?".into());
        if base == "/" {
            format!("/{name}")
        } else {
            format!("{base}/{name}")
        }
    }

    /// The status of inode `id`.
    pub fn stat(&self, id: u64) -> Stat {
        let Some(i) = self.inodes.get(&id) else {
            return Stat { dev: 0x801, ino: 0, mode: 0, nlink: 0, size: 0, rdev: 0, times: [0; 3] };
        };
        let (ty, size, rdev) = match &i.kind {
            Kind::File(f) => (S_IFREG, f.data.len() as u64, 0),
            Kind::Static(d) => (S_IFREG, d.len() as u64, 0),
            Kind::ProcMaps => (S_IFREG, 0, 0),
            Kind::Dir(_) => (S_IFDIR, 4096, 0),
            Kind::Symlink(t) => (S_IFLNK, t.len() as u64, 0),
            Kind::ExeLink => (S_IFLNK, 0, 0),
            Kind::DevNull => (S_IFCHR, 0, (1 << 8) | 3),
            Kind::Random(m) => (S_IFCHR, 0, (1 << 8) | u64::from(*m)),
        };
        let dev = match i.kind {
            Kind::ProcMaps | Kind::ExeLink => 0x16,
            Kind::DevNull | Kind::Random(_) => 0x5,
            _ => 0x801,
        };
        let nlink = match &i.kind {
            Kind::Dir(d) => {
                let subdirs = d.entries.values().filter(|c| self.inodes.get(c).is_some_and(|n| n.is_dir())).count();
                if i.nlink == 0 && id != ROOT {
                    0
                } else {
                    2 + subdirs as u64
                }
            }
            _ => i.nlink,
        };
        Stat { dev, ino: i.ino, mode: ty | i.mode, nlink, size, rdev, times: i.times }
    }

    /// The contents of a regular file (volatile).
    pub fn contents(&self, id: u64) -> Option<&[u8]> {
        match &self.inodes.get(&id)?.kind {
            Kind::File(f) => Some(&f.data),
            Kind::Static(d) => Some(d),
            _ => None,
        }
    }

    /// The contents as a shareable snapshot (for file mappings).
    pub fn snapshot(&self, id: u64) -> Option<Arc<[u8]>> {
        match &self.inodes.get(&id)?.kind {
            Kind::File(f) => Some(Arc::from(f.data.as_slice())),
            Kind::Static(d) => Some(d.clone()),
            _ => None,
        }
    }

    /// The static contents at `path`, if equal to `data` (to share them after a restore).
    pub fn same_static(&self, path: &str, data: &Arc<[u8]>) -> Option<Arc<[u8]>> {
        let id = self.walk(ROOT, path.as_bytes(), true).ok()?.id?;
        match &self.inodes.get(&id)?.kind {
            Kind::Static(d) if d[..] == data[..] => Some(d.clone()),
            _ => None,
        }
    }

    /// Entries of directory `id`: `(name, d_type, ino)` for `.`, `..`, then by name.
    pub fn list(&self, id: u64) -> Vec<(String, u8, u64)> {
        let Some(d) = self.dir(id) else { return Vec::new() };
        let ino = |i: u64| self.inodes.get(&i).map_or(0, |n| n.ino);
        let mut out = vec![(".".to_string(), 4, ino(id)), ("..".to_string(), 4, ino(d.parent))];
        for (name, c) in &d.entries {
            let dt = self.inodes.get(c).map_or(0, |n| n.dtype());
            out.push((name.clone(), dt, ino(*c)));
        }
        out
    }

    /// Notes one more open description of `id`.
    pub fn opened(&mut self, id: u64) {
        if let Some(i) = self.inodes.get_mut(&id) {
            i.open += 1;
        }
    }

    /// Notes one open description of `id` fewer (and frees it when nothing names it).
    pub fn closed(&mut self, id: u64) {
        if let Some(i) = self.inodes.get_mut(&id) {
            i.open = i.open.saturating_sub(1);
        }
        self.collect(id);
    }

    /// Frees `id` if no entry (volatile or durable) and no description refers to it; cascades
    /// to the durable entries of a freed directory.
    fn collect(&mut self, id: u64) {
        let mut work = vec![id];
        while let Some(id) = work.pop() {
            let free = id != ROOT
                && self.inodes.get(&id).is_some_and(|i| i.nlink + i.durable_links + i.pending_links + i.open == 0);
            if !free {
                // Unlinked and closed, but a crash may still bring it back (its durable entry, or a
                // pending one): it no longer takes space, and its volatile contents, which no one
                // can read any more, are let go. (`dropped` then says that they no longer mirror
                // the durable contents and the pending writes.)
                if let Some(Inode { nlink: 0, open: 0, kind: Kind::File(f), .. }) = self.inodes.get_mut(&id) {
                    if !f.data.is_empty() {
                        self.used -= f.data.len() as u64;
                        f.data = Vec::new();
                        f.dropped = true;
                    }
                }
                continue;
            }
            if let Some(i) = self.inodes.remove(&id) {
                self.used -= file_len(&i);
                if let Kind::Dir(d) = i.kind {
                    for op in d.pending.iter().flat_map(|p| &p.1) {
                        if let DirOp::Set(_, c) = op {
                            if let Some(n) = self.inodes.get_mut(c) {
                                n.pending_links -= 1;
                            }
                            work.push(*c);
                        }
                    }
                    for c in d.durable.values() {
                        if let Some(n) = self.inodes.get_mut(c) {
                            n.durable_links -= 1;
                        }
                        work.push(*c);
                    }
                    for c in d.entries.values() {
                        if let Some(n) = self.inodes.get_mut(c) {
                            n.nlink -= 1;
                        }
                        work.push(*c);
                    }
                }
            }
        }
    }

    fn touch(&mut self, id: u64, now: u64, data: bool) {
        if let Some(i) = self.inodes.get_mut(&id) {
            if data {
                i.times[1] = now;
            }
            i.times[2] = now;
        }
    }

    fn writable_dir(&self, dir: u64) -> Result<(), i32> {
        let d = self.inodes.get(&dir).ok_or(ENOENT)?;
        if !d.is_dir() {
            return Err(ENOTDIR);
        }
        if d.readonly {
            return Err(EACCES);
        }
        if d.nlink == 0 && dir != ROOT {
            return Err(ENOENT);
        }
        Ok(())
    }

    /// Records a pending change of `dir`'s entries, at the next place in program order.
    fn push_dir_op(&mut self, dir: u64, op: DirOp) {
        if let DirOp::Set(_, id) = &op {
            if let Some(i) = self.inodes.get_mut(id) {
                i.pending_links += 1;
            }
        }
        let seq = self.seq;
        self.seq += 1;
        let Some(d) = self.dir_mut(dir) else { return };
        if d.pending.len() >= MAX_PENDING && d.pending.len() >= 2 {
            // Merge the two oldest changes into one, kept or lost as a whole.
            let (_, second) = d.pending.remove(1);
            d.pending[0].1.extend(second);
        }
        d.pending.push((seq, vec![op]));
    }

    /// Makes the changes `dir` recorded since it had `mark` pending ones into one operation:
    /// what one call did to one directory happens entirely or not at all.
    fn fuse_dir_ops(&mut self, dir: u64, mark: usize) {
        if let Some(d) = self.dir_mut(dir) {
            if d.pending.len() > mark + 1 {
                let tail: Vec<DirOp> = d.pending.drain(mark + 1..).flat_map(|p| p.1).collect();
                d.pending[mark].1.extend(tail);
            }
        }
    }

    fn pending_len(&self, dir: u64) -> usize {
        self.dir(dir).map_or(0, |d| d.pending.len())
    }

    fn add_entry(&mut self, dir: u64, name: &str, id: u64, now: u64) {
        if let Some(d) = self.dir_mut(dir) {
            d.entries.insert(name.to_string(), id);
        }
        if let Some(i) = self.inodes.get_mut(&id) {
            i.nlink += 1;
            if let Kind::Dir(d) = &mut i.kind {
                d.parent = dir;
            }
        }
        self.push_dir_op(dir, DirOp::Set(name.to_string(), id));
        self.touch(dir, now, true);
    }

    /// Removes the entry; returns the id it named (not freed yet: call `collect`).
    fn remove_entry(&mut self, dir: u64, name: &str, now: u64) -> Option<u64> {
        let id = self.dir_mut(dir)?.entries.remove(name)?;
        if let Some(i) = self.inodes.get_mut(&id) {
            i.nlink -= 1;
        }
        self.push_dir_op(dir, DirOp::Remove(name.to_string()));
        self.touch(dir, now, true);
        self.touch(id, now, false);
        Some(id)
    }

    fn check_name(name: &Option<String>) -> Result<&str, i32> {
        match name {
            Some(n) if n.len() > NAME_MAX => Err(ENAMETOOLONG),
            Some(n) => Ok(n),
            None => Err(EEXIST),
        }
    }

    /// Creates a regular file `name` in `dir`.
    pub fn create_file(&mut self, dir: u64, name: &str, mode: u32, now: u64) -> Result<u64, i32> {
        self.writable_dir(dir)?;
        let ino = self.fresh_ino("", false);
        let id = self.insert(ino, mode & 0o7777, Kind::File(FileData::new(Vec::new())), true, false, now);
        self.add_entry(dir, name, id, now);
        Ok(id)
    }

    /// `mkdir`.
    pub fn mkdir(&mut self, w: &Walked, mode: u32, now: u64) -> Result<u64, i32> {
        if w.id.is_some() {
            return Err(EEXIST);
        }
        let name = Self::check_name(&w.name)?.to_string();
        self.writable_dir(w.parent)?;
        let ino = self.fresh_ino("", false);
        let id = self.insert(ino, mode & 0o7777, Kind::Dir(DirData::default_for(w.parent)), true, false, now);
        self.add_entry(w.parent, &name, id, now);
        Ok(id)
    }

    /// `symlink`.
    pub fn symlink(&mut self, w: &Walked, target: String, now: u64) -> Result<u64, i32> {
        if w.id.is_some() {
            return Err(EEXIST);
        }
        let name = Self::check_name(&w.name)?.to_string();
        self.writable_dir(w.parent)?;
        let ino = self.fresh_ino("", false);
        let id = self.insert(ino, 0o777, Kind::Symlink(target), true, false, now);
        self.add_entry(w.parent, &name, id, now);
        Ok(id)
    }

    /// `link`: a new entry `w` for `target`.
    pub fn link(&mut self, target: u64, w: &Walked, now: u64) -> Result<(), i32> {
        let t = self.inodes.get(&target).ok_or(ENOENT)?;
        if t.is_dir() {
            return Err(EPERM);
        }
        if !t.persist {
            return Err(EXDEV);
        }
        if t.nlink == 0 {
            return Err(ENOENT);
        }
        if w.id.is_some() {
            return Err(EEXIST);
        }
        let name = Self::check_name(&w.name)?.to_string();
        self.writable_dir(w.parent)?;
        self.add_entry(w.parent, &name, target, now);
        Ok(())
    }

    /// `unlink` (not directories) or `rmdir` (only empty directories).
    pub fn remove(&mut self, w: &Walked, dir: bool, now: u64) -> Result<(), i32> {
        let Some(name) = &w.name else {
            return Err(if dir {
                if w.id == Some(ROOT) {
                    EBUSY
                } else {
                    EINVAL
                }
            } else {
                EISDIR
            });
        };
        let id = w.id.ok_or(ENOENT)?;
        let node = self.inodes.get(&id).ok_or(ENOENT)?;
        match (dir, node.is_dir()) {
            (true, false) => return Err(ENOTDIR),
            (false, true) => return Err(EISDIR),
            (false, false) if w.trailing => return Err(ENOTDIR),
            _ => {}
        }
        if node.readonly {
            return Err(if node.is_dir() { EACCES } else { EROFS });
        }
        if dir && self.dir(id).is_some_and(|d| !d.entries.is_empty()) {
            return Err(ENOTEMPTY);
        }
        self.writable_dir(w.parent)?;
        let name = name.clone();
        self.remove_entry(w.parent, &name, now);
        self.collect(id);
        Ok(())
    }

    /// `renameat2` with `RENAME_NOREPLACE` (1) and `RENAME_EXCHANGE` (2).
    pub fn rename(&mut self, from: &Walked, to: &Walked, flags: u32, now: u64) -> Result<(), i32> {
        let (Some(_), Some(tname)) = (&from.name, &to.name) else { return Err(EBUSY) };
        let src = from.id.ok_or(ENOENT)?;
        if tname.len() > NAME_MAX {
            return Err(ENAMETOOLONG);
        }
        let src_dir = self.inodes.get(&src).ok_or(ENOENT)?.is_dir();
        if !src_dir && (from.trailing || to.trailing) && flags & 2 == 0 {
            return Err(ENOTDIR);
        }
        self.writable_dir(from.parent)?;
        self.writable_dir(to.parent)?;
        let exchange = flags & 2 != 0;
        if flags & 1 != 0 && to.id.is_some() {
            return Err(EEXIST);
        }
        if exchange && to.id.is_none() {
            return Err(ENOENT);
        }
        if self.inodes.get(&src).is_some_and(|i| i.readonly) || to.id.is_some_and(|t| self.readonly(t)) {
            return Err(EROFS);
        }
        if to.id == Some(src) {
            return Ok(());
        }
        let marks = (self.pending_len(from.parent), self.pending_len(to.parent));
        let r = self.rename_entries(src, src_dir, from, to, exchange, now);
        // One call, one operation per directory: a rename within a directory is atomic; across
        // two directories each side is pending in its own.
        self.fuse_dir_ops(from.parent, marks.0);
        if from.parent != to.parent {
            self.fuse_dir_ops(to.parent, marks.1);
        }
        r
    }

    fn rename_entries(
        &mut self,
        src: u64,
        src_dir: bool,
        from: &Walked,
        to: &Walked,
        exchange: bool,
        now: u64,
    ) -> Result<(), i32> {
        let (Some(fname), Some(tname)) = (&from.name, &to.name) else { return Err(EBUSY) };
        // A directory may not move below itself (nor be replaced by an ancestor when exchanging).
        if src_dir && self.is_ancestor(src, to.parent) {
            return Err(EINVAL);
        }
        if let Some(dst) = to.id {
            let dst_dir = self.inodes.get(&dst).is_some_and(|i| i.is_dir());
            if exchange {
                if dst_dir && self.is_ancestor(dst, from.parent) {
                    return Err(EINVAL);
                }
                let (fp, tp) = (from.parent, to.parent);
                if let Some(d) = self.dir_mut(fp) {
                    d.entries.insert(fname.clone(), dst);
                }
                self.push_dir_op(fp, DirOp::Set(fname.clone(), dst));
                if let Some(d) = self.dir_mut(tp) {
                    d.entries.insert(tname.clone(), src);
                }
                self.push_dir_op(tp, DirOp::Set(tname.clone(), src));
                for (id, p) in [(dst, fp), (src, tp)] {
                    if let Some(Inode { kind: Kind::Dir(d), .. }) = self.inodes.get_mut(&id) {
                        d.parent = p;
                    }
                    self.touch(id, now, false);
                }
                self.touch(fp, now, true);
                self.touch(tp, now, true);
                return Ok(());
            }
            match (src_dir, dst_dir) {
                (true, false) => return Err(ENOTDIR),
                (false, true) => return Err(EISDIR),
                (true, true) if self.dir(dst).is_some_and(|d| !d.entries.is_empty()) => return Err(ENOTEMPTY),
                _ => {}
            }
            self.remove_entry(to.parent, tname, now);
            self.remove_entry(from.parent, fname, now);
            self.add_entry(to.parent, tname, src, now);
            self.collect(dst);
            return Ok(());
        }
        self.remove_entry(from.parent, fname, now);
        self.add_entry(to.parent, tname, src, now);
        Ok(())
    }

    fn readonly(&self, id: u64) -> bool {
        self.inodes.get(&id).is_some_and(|i| i.readonly)
    }

    /// True if `a` is `b` or above it in the volatile tree.
    fn is_ancestor(&self, a: u64, mut b: u64) -> bool {
        for _ in 0..=self.inodes.len() {
            if a == b {
                return true;
            }
            if b == ROOT {
                return false;
            }
            match self.dir(b) {
                Some(d) => b = d.parent,
                None => return false,
            }
        }
        false
    }

    fn file_mut(&mut self, id: u64) -> Result<&mut FileData, i32> {
        match &mut self.inodes.get_mut(&id).ok_or(EBADF)?.kind {
            Kind::File(f) => Ok(f),
            Kind::Dir(_) => Err(EISDIR),
            Kind::Static(_) => Err(EROFS),
            _ => Err(EINVAL),
        }
    }

    /// Size of a regular file.
    pub fn size(&self, id: u64) -> u64 {
        self.contents(id).map_or(0, |c| c.len() as u64)
    }

    /// Writes `data` at `off`; returns how many bytes were written (a partial write when the
    /// disk fills up; `ENOSPC` when nothing fits).
    pub fn write(&mut self, id: u64, off: u64, data: &[u8], now: u64) -> Result<u64, i32> {
        let (used, capacity, seq) = (self.used, self.capacity, self.seq);
        let f = self.file_mut(id)?;
        if data.is_empty() {
            return Ok(0);
        }
        let size = f.data.len() as u64;
        let limit = size.saturating_add(capacity.saturating_sub(used));
        let end = off.checked_add(data.len() as u64).ok_or(EFBIG)?;
        let n = if end <= limit {
            data.len() as u64
        } else if off >= limit {
            return Err(if off > i64::MAX as u64 { EFBIG } else { ENOSPC });
        } else {
            limit - off
        };
        let data = &data[..n as usize];
        let op = Pending::Write { off, data: data.to_vec() };
        op.apply(&mut f.data);
        let grown = f.data.len() as u64 - size;
        f.push(seq, op);
        self.seq += 1;
        self.used += grown;
        self.touch(id, now, true);
        Ok(n)
    }

    /// Sets the size (`truncate`, `O_TRUNC`, growing `fallocate`).
    pub fn set_size(&mut self, id: u64, len: u64, now: u64) -> Result<(), i32> {
        let (used, capacity, seq) = (self.used, self.capacity, self.seq);
        let f = self.file_mut(id)?;
        let size = f.data.len() as u64;
        if len > size && len - size > capacity.saturating_sub(used) {
            return Err(if len > i64::MAX as u64 { EFBIG } else { ENOSPC });
        }
        if len != size {
            let op = Pending::SetSize(len);
            op.apply(&mut f.data);
            f.push(seq, op);
            self.seq += 1;
            self.used = used - size + len;
        }
        self.touch(id, now, true);
        Ok(())
    }

    /// Checks that `extra` more bytes fit (`fallocate` with `KEEP_SIZE`).
    pub fn reserve(&self, extra: u64) -> Result<(), i32> {
        if extra > self.capacity.saturating_sub(self.used) {
            return Err(ENOSPC);
        }
        Ok(())
    }

    /// `chmod`.
    pub fn set_mode(&mut self, id: u64, mode: u32) {
        if let Some(i) = self.inodes.get_mut(&id) {
            i.mode = mode & 0o7777;
        }
    }

    /// `utimensat`: `None` leaves a time alone.
    pub fn set_times(&mut self, id: u64, atime: Option<u64>, mtime: Option<u64>, now: u64) {
        if let Some(i) = self.inodes.get_mut(&id) {
            if let Some(a) = atime {
                i.times[0] = a;
            }
            if let Some(m) = mtime {
                i.times[1] = m;
            }
            i.times[2] = now;
        }
    }

    /// Makes the data (file) or the entries (directory) of `id` durable: its pending
    /// operations reach the disk, in order.
    pub fn flush(&mut self, id: u64) {
        self.settle(id, true);
    }

    /// A sync of `id` failed: its pending operations are dropped without reaching the disk,
    /// as Linux drops the dirty pages after an fsync error, and a later sync succeeds with the
    /// data gone (Rebello et al., "Can applications recover from fsync failures?", ATC '20).
    pub fn drop_pending(&mut self, id: u64) {
        self.settle(id, false);
    }

    /// Ends the pending operations of `id`: applied to the durable layer (`apply`) or dropped.
    fn settle(&mut self, id: u64, apply: bool) {
        let Some(i) = self.inodes.get_mut(&id) else { return };
        match &mut i.kind {
            Kind::File(f) => {
                if apply {
                    f.flush();
                } else if !f.pending.is_empty() {
                    f.pending.clear();
                    f.dropped = true;
                }
            }
            Kind::Dir(d) => {
                let ops: Vec<DirOp> = std::mem::take(&mut d.pending).into_iter().flat_map(|p| p.1).collect();
                if ops.is_empty() {
                    return;
                }
                let old = d.durable.clone();
                if apply {
                    apply_dir_ops(&mut d.durable, &ops);
                } else {
                    d.dropped = true;
                }
                let new = d.durable.clone();
                let mut touched = Vec::new();
                for op in &ops {
                    if let DirOp::Set(_, c) = op {
                        if let Some(n) = self.inodes.get_mut(c) {
                            n.pending_links -= 1;
                        }
                        touched.push(*c);
                    }
                }
                for c in new.values() {
                    if let Some(n) = self.inodes.get_mut(c) {
                        n.durable_links += 1;
                    }
                }
                for c in old.values() {
                    if let Some(n) = self.inodes.get_mut(c) {
                        n.durable_links -= 1;
                    }
                    touched.push(*c);
                }
                for c in touched {
                    self.collect(c);
                }
            }
            _ => {}
        }
    }

    /// `sync`: everything durable.
    pub fn flush_all(&mut self) {
        let ids: Vec<u64> = self.inodes.keys().copied().collect();
        for id in ids {
            self.flush(id);
        }
    }

    /// A `syncfs` failed: every pending operation is dropped.
    pub fn drop_all(&mut self) {
        let ids: Vec<u64> = self.inodes.keys().copied().collect();
        for id in ids {
            self.drop_pending(id);
        }
    }

    /// True if `id` has unsynced data or entries.
    pub fn dirty(&self, id: u64) -> bool {
        match self.inodes.get(&id).map(|i| &i.kind) {
            Some(Kind::File(f)) => !f.pending.is_empty(),
            Some(Kind::Dir(d)) => !d.pending.is_empty(),
            _ => false,
        }
    }

    /// The volatile view as a [`Disk`].
    pub fn volatile_disk(&self) -> Disk {
        self.export(&Layer::Volatile)
    }

    /// The durable layer alone as a [`Disk`]: what a crash that keeps nothing pending leaves.
    pub fn durable_disk(&self) -> Disk {
        self.export(&Layer::Durable(Overlay::default()))
    }

    /// A path for every persistent inode the volatile tree reaches (its first in path order),
    /// for naming pending operations.
    fn paths(&self) -> BTreeMap<u64, String> {
        let mut out = BTreeMap::from([(ROOT, "/".to_string())]);
        let mut stack = vec![(ROOT, "/".to_string())];
        while let Some((id, path)) = stack.pop() {
            let Some(d) = self.dir(id) else { continue };
            for (name, c) in d.entries.iter().chain(&d.durable) {
                let p = if path == "/" { format!("/{name}") } else { format!("{path}/{name}") };
                if !out.contains_key(c) {
                    out.insert(*c, p.clone());
                    if self.dir(*c).is_some() {
                        stack.push((*c, p));
                    }
                }
            }
        }
        out
    }

    /// Every operation still pending, in program order: what a crash now may keep or lose.
    pub fn pending_ops(&self) -> Vec<PendingOp> {
        let paths = self.paths();
        let name = |id: u64| paths.get(&id).cloned().unwrap_or_else(|| format!("(unlinked inode {id})"));
        let mut out = Vec::new();
        for (&id, i) in &self.inodes {
            if !i.persist {
                continue;
            }
            match &i.kind {
                Kind::File(f) => {
                    for (slot, (seq, op)) in f.pending.iter().enumerate() {
                        let what = match op {
                            Pending::Write { off, data } => {
                                format!("write of {} bytes at {off} to {}", data.len(), name(id))
                            }
                            Pending::SetSize(n) => format!("size of {} set to {n}", name(id)),
                            Pending::Replace(d) => format!("merged writes to {} ({} bytes)", name(id), d.len()),
                        };
                        let sectors = matches!(op, Pending::Write { .. }).then(|| op.sectors());
                        out.push(PendingOp { seq: *seq, target: id, slot, sectors, what });
                    }
                }
                Kind::Dir(d) => {
                    for (slot, (seq, ops)) in d.pending.iter().enumerate() {
                        let parts: Vec<String> = ops
                            .iter()
                            .map(|op| match op {
                                DirOp::Set(n, _) => format!("entry {n} set"),
                                DirOp::Remove(n) => format!("entry {n} removed"),
                            })
                            .collect();
                        let what = format!("{} in {}", parts.join(" and "), name(id));
                        out.push(PendingOp { seq: *seq, target: id, slot, sectors: None, what });
                    }
                }
                _ => {}
            }
        }
        out.sort_by_key(|o| o.seq);
        out
    }

    /// The disk a crash leaves when exactly the operations `sel` names reach it (see
    /// [`Selection`]), applied in program order on the durable layer.
    pub fn image_of(&self, ops: &[PendingOp], sel: &Selection) -> Disk {
        let mut overlay = Overlay::default();
        for (i, op) in ops.iter().enumerate() {
            let torn = sel.torn.filter(|(at, _)| *at == i).map(|(_, k)| k);
            if !sel.kept.get(i).copied().unwrap_or(false) && torn.is_none() {
                continue;
            }
            match self.inodes.get(&op.target).map(|n| &n.kind) {
                Some(Kind::File(f)) => {
                    let Some((_, p)) = f.pending.get(op.slot) else { continue };
                    let c = overlay.files.entry(op.target).or_insert_with(|| f.durable.clone());
                    let part = match torn {
                        Some(k) => p.torn(k),
                        None => Some(p.clone()),
                    };
                    if let Some(p) = part {
                        p.apply(c);
                    }
                }
                Some(Kind::Dir(d)) => {
                    let Some((_, change)) = d.pending.get(op.slot) else { continue };
                    let e = overlay.dirs.entry(op.target).or_insert_with(|| d.durable.clone());
                    apply_dir_ops(e, change);
                }
                _ => {}
            }
        }
        self.export(&Layer::Durable(overlay))
    }

    /// Walks one layer from `/` into a [`Disk`] (a file with several links is copied to each).
    fn export(&self, layer: &Layer) -> Disk {
        let mut disk = Disk::default();
        if let Some(r) = self.inodes.get(&ROOT) {
            disk.entries.insert("/".into(), DiskEntry::Dir { mode: r.mode });
        }
        let mut seen_dirs = BTreeSet::from([ROOT]);
        // Depth-first in path order.
        let mut stack = vec![(ROOT, "/".to_string())];
        while let Some((id, path)) = stack.pop() {
            let Some(d) = self.dir(id) else { continue };
            let entries = match layer {
                Layer::Volatile => &d.entries,
                Layer::Durable(o) => o.dirs.get(&id).unwrap_or(&d.durable),
            };
            let mut subdirs = Vec::new();
            for (name, c) in entries {
                let Some(node) = self.inodes.get(c).filter(|n| n.persist) else { continue };
                let p = if path == "/" { format!("/{name}") } else { format!("{path}/{name}") };
                match &node.kind {
                    Kind::Dir(_) if seen_dirs.insert(*c) => {
                        disk.entries.insert(p.clone(), DiskEntry::Dir { mode: node.mode });
                        subdirs.push((*c, p));
                    }
                    Kind::File(f) => {
                        let data = match layer {
                            Layer::Volatile => f.data.clone(),
                            Layer::Durable(o) => o.files.get(c).unwrap_or(&f.durable).clone(),
                        };
                        disk.entries.insert(p, DiskEntry::File { mode: node.mode, data });
                    }
                    Kind::Symlink(t) => {
                        disk.entries.insert(p, DiskEntry::Symlink { target: t.clone() });
                    }
                    _ => {}
                }
            }
            stack.extend(subdirs.into_iter().rev());
        }
        disk
    }
}

/// Which layer an export walks.
enum Layer {
    /// What the program sees now.
    Volatile,
    /// The durable layer, with these files and directories replaced (a crash image).
    Durable(Overlay),
}

/// The files and directories of a crash image that differ from the durable layer.
#[derive(Default)]
struct Overlay {
    files: BTreeMap<u64, Vec<u8>>,
    dirs: BTreeMap<u64, BTreeMap<String, u64>>,
}

impl DirData {
    fn default_for(parent: u64) -> Self {
        DirData { entries: BTreeMap::new(), durable: BTreeMap::new(), parent, pending: Vec::new(), dropped: false }
    }
}

fn file_len(i: &Inode) -> u64 {
    match &i.kind {
        Kind::File(f) => f.data.len() as u64,
        _ => 0,
    }
}

fn valid_name(n: &str) -> bool {
    !n.is_empty() && n.len() <= NAME_MAX && n != "." && n != ".." && !n.contains('/') && !n.contains('\0')
}

/// The first `bound` bytes of `durable` after `pending`, computed without holding more than
/// `bound` bytes; `None` when the operations overflow or the final size is not `bound`.
fn simulate(durable: &[u8], pending: &[Pending], bound: usize) -> Option<Vec<u8>> {
    let mut c = durable[..durable.len().min(bound)].to_vec();
    let mut s = durable.len() as u64;
    let b = bound as u64;
    for op in pending {
        match op {
            Pending::Write { off, data } => {
                let end = off.checked_add(data.len() as u64)?;
                if *off < b {
                    let e = end.min(b) as usize;
                    if c.len() < e {
                        c.resize(e, 0);
                    }
                    c[*off as usize..e].copy_from_slice(&data[..e - *off as usize]);
                }
                s = s.max(end);
            }
            Pending::SetSize(n) => {
                s = *n;
                c.truncate(s.min(b) as usize);
            }
            Pending::Replace(d) => {
                c = d[..d.len().min(bound)].to_vec();
                s = d.len() as u64;
            }
        }
        let want = s.min(b) as usize;
        if c.len() < want {
            c.resize(want, 0);
        }
    }
    (s == b).then_some(c)
}

/// Puts the components of `path` in front of `comps`.
fn push_front_all(comps: &mut VecDeque<String>, path: &str) -> Result<(), i32> {
    for c in path.split('/').filter(|c| !c.is_empty()).rev() {
        if c.len() > NAME_MAX {
            return Err(ENAMETOOLONG);
        }
        comps.push_front(c.to_string());
    }
    Ok(())
}

/// Paths of a [`Disk`] that differ between two views: present in one only, or different.
pub fn diff_paths(a: &Disk, b: &Disk) -> Vec<String> {
    let mut out = Vec::new();
    for (p, e) in &a.entries {
        if b.entries.get(p) != Some(e) {
            out.push(p.clone());
        }
    }
    for p in b.entries.keys() {
        if !a.entries.contains_key(p) {
            out.push(p.clone());
        }
    }
    out.sort();
    out.dedup();
    out
}

/// What is wrong with `p` as the guest path of a declared file, if anything: it must be
/// absolute and normal (no empty, `.` or `..` component, no NUL), so that the file is where its
/// declaration says and no declaration reads as a way out of the tree.
pub fn guest_path_problem(p: &str) -> Option<&'static str> {
    if !p.starts_with('/') {
        return Some("the guest path must be absolute");
    }
    if p.contains('\0') {
        return Some("the guest path holds a NUL byte");
    }
    if p == "/" || p.ends_with('/') {
        return Some("the guest path must name a file, not a directory");
    }
    if p[1..].split('/').any(|c| c.is_empty() || c == "." || c == "..") {
        return Some("the guest path must be normal: no empty, `.` or `..` component");
    }
    None
}

/// `parent_of` re-exported for the kernel.
pub fn parent_path(p: &str) -> &str {
    parent_of(p)
}
