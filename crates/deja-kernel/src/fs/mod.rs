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
//! - FIFOs and sockets' names are not on the disk at all ([`Inode::persist`] is false, as for a
//!   tmpfs): no crash image and no export has them, though their directory entries are pending
//!   operations like any other.
//! - **Named models.** posix-weak is the outer bound; [`models`] states which of its states
//!   xfs, ext4 `data=ordered` and a process kill can leave, labels each state with them and
//!   projects decisions onto one of them (`FaultConfig::crash_model`).
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
//!
//! # Layout
//!
//! This module holds the model's types and the tree's construction and restore checks;
//! [`tree`] resolves paths and changes the volatile layer (names, data, metadata), and
//! [`durable`] moves pending operations to the durable layer and builds the disks a crash
//! can leave.

use crate::prelude::*;
use alloc::collections::{BTreeMap, BTreeSet};
use alloc::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::disk::{parent_of, Disk, DiskEntry};
use crate::errno::*;
use crate::fault_kinds::FaultKind;
use crate::fd::{ino_of, Stat, S_IFCHR, S_IFDIR, S_IFIFO, S_IFLNK, S_IFREG, S_IFSOCK};
use crate::persist::{ensure, RestoreError};

mod durable;
mod models;
mod root;
mod tree;

pub use durable::diff_paths;
use durable::simulate;
pub use models::{CrashModel, OpClass};
pub use root::{Root, RootNode};
pub use tree::{guest_path_problem, parent_path};

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
/// The directory of the program's open fds.
pub const PROC_FD: &str = "/proc/self/fd";

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
    /// `/dev/zero` (5) or `/dev/full` (7).
    MemDev(u32),
    /// A Unix-domain socket's name (`bind` to a path, or `mknod` with `S_IFSOCK`). It holds no
    /// data, and like a socket under `/run` or `/tmp` on tmpfs it does not outlive a crash.
    Socket,
    /// A FIFO (`mknod` with `S_IFIFO`, `mkfifo`). While it is open its bytes are in a pipe of
    /// [`crate::net`]; like a socket's name it holds no data and does not outlive a crash.
    Fifo,
    /// A file of `/proc/<pid>` generated from the process table when it is opened.
    ProcInfo(ProcFile),
}

/// Which generated file of `/proc/<pid>` a [`Kind::ProcInfo`] node is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ProcFile {
    /// `cmdline`: the process's argv, each argument followed by a NUL, as of its last
    /// `execve` (empty for a zombie).
    Cmdline,
    /// `comm`: its name and a newline.
    Comm,
    /// `stat`: one line of 52 fields, in Linux's order.
    Stat,
    /// `status`: `Name:\t...` lines, in Linux's layout.
    Status,
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
            Kind::File(_) | Kind::Static(_) | Kind::ProcMaps | Kind::ProcInfo(_) => 8,
            Kind::Dir(_) => 4,
            Kind::Symlink(_) | Kind::ExeLink => 10,
            Kind::DevNull | Kind::Random(_) | Kind::MemDev(_) => 2,
            Kind::Socket => 12,
            Kind::Fifo => 1,
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
    /// The last component was an entry of `/proc/self/fd` (walked by [`Fs::walk_fds`]).
    pub proc_fd: Option<ProcFd>,
    /// The process whose `/proc/<pid>` directory the walk ended in (the directory itself, its
    /// `fd` directory or one of their entries), when a [`ProcView`] named it: `/proc/self`
    /// names the current process. `None` elsewhere, and for a walk that reached that directory
    /// without a pid (its name `/proc/self` in a walk without a view, a working directory):
    /// the current process's then.
    pub pid: Option<u64>,
    /// The last component was the link `/proc/self` itself, not followed (`lstat`,
    /// `readlink`, `O_NOFOLLOW`): [`Walked::id`] is the directory it leads to.
    pub self_link: bool,
}

/// A path whose last component was an entry of `/proc/self/fd`, the link Linux shows for an
/// open fd. Followed, it leads to what the fd has open: [`Walked::id`] is then the inode of a
/// file, a directory or a FIFO of the tree, and `None` for a socket, a pipe, a device or
/// anything else the fd table alone describes. Not followed (`lstat`, `readlink`,
/// `O_NOFOLLOW`), [`Walked::id`] is `None` and the entry is the link itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcFd {
    /// The fd the entry names.
    pub fd: i32,
    /// The walk went through the link to what it leads to.
    pub followed: bool,
}

/// What an entry of `/proc/self/fd` leads to, as the fd table says at the moment of a walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FdTarget {
    /// An inode of the tree (a file, a directory, a FIFO, even one no longer named): a walk
    /// may go on from it.
    Inode(u64),
    /// Something the tree does not hold (a socket, a pipe, a device, a generated file).
    Other,
}

/// The fd table as a walk sees it: the target of an open fd, `None` for a closed one.
pub type FdLookup<'a> = &'a dyn Fn(i32) -> Option<FdTarget>;

/// The node's processes as a walk of the program's paths sees them (see [`Fs::walk_fds`]).
#[derive(Clone, Copy)]
pub struct ProcView<'a> {
    /// The calling process's pid: what `/proc/self` links to.
    pub current: u64,
    /// The process a relative walk's start directory belongs to, when it starts in a
    /// `/proc/<pid>` directory (a directory fd opened there).
    pub start_pid: Option<u64>,
    /// The program path of process `pid` (`/proc/<pid>/exe`): `None` if there is no such
    /// process, `Some(None)` for a zombie (it has no program any more).
    pub exe: &'a dyn Fn(u64) -> Option<Option<String>>,
    /// The current process's fd table (`/proc/self/fd`).
    pub fds: FdLookup<'a>,
}

/// What a new run's file system is made from besides its disk.
#[derive(Debug, Clone, Copy)]
pub struct Inputs<'a> {
    /// The read-only root under everything (an image), if any.
    pub root: Option<&'a Root>,
    /// The declared read-only files: absolute guest path → contents.
    pub files: &'a BTreeMap<String, Vec<u8>>,
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
    /// The two halves of a rename between directories, by program order: the second half's
    /// place → the first's. One journal transaction on ext4 and XFS.
    joined: BTreeMap<u64, u64>,
    /// The place in program order of the last successful sync that had something to make
    /// durable: journaled changes before it are committed on ext4 and XFS.
    journal_mark: u64,
    /// Files whose contents changed during the current syscall, for the shared mappings that
    /// must follow them ([`Fs::take_changed`]); empty between syscalls.
    #[serde(skip)]
    changed: alloc::collections::BTreeSet<u64>,
}

fn static_time() -> u64 {
    crate::fd::FILE_TIME_S * 1_000_000_000
}

impl Fs {
    /// The file system of a new run: the `disk` (or `/`, `/tmp`, `/data`), then the read-only
    /// root's entries where the disk has none (a directory both have stays the disk's), then the
    /// declared `files` (read-only, replacing whatever was there), the executable at
    /// `exe_path`, `/proc/self/{maps,exe,fd}`, `/dev/{null,random,urandom,zero,full}`, the
    /// links `/dev/fd` (to `/proc/self/fd`) and `/dev/std{in,out,err}`, and what describes
    /// the program's `cpus` CPUs: `/proc/cpuinfo` and `/sys/devices/system/cpu/{online,
    /// possible,present}`, and `/proc/sys/fs/pipe-max-size`.
    ///
    /// `/proc/self` is the directory every `/proc/<pid>` shares: a walk with a [`ProcView`]
    /// reads the name `self` in `/proc` as a link to the current pid, and a pid's name as that
    /// directory for that process ([`Walked::pid`]); its files (`maps`, `exe`, `fd`,
    /// `cmdline`, `comm`, `stat`, `status`) are generated for the process at each open.
    pub fn new(
        config: FsConfig,
        disk: Option<&Disk>,
        inputs: Inputs<'_>,
        exe_path: &str,
        image: &[u8],
        cpus: u32,
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
            joined: BTreeMap::new(),
            journal_mark: 0,
            changed: Default::default(),
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
        if let Some(root) = inputs.root {
            for (p, node) in root.nodes.iter().filter(|(p, _)| p.as_str() != "/") {
                let Ok((norm, _)) = crate::fd::normalize("/", p.as_bytes()) else { continue };
                // Below a symlink of the root: not reachable by that name.
                let mut above = crate::fs::parent_path(&norm);
                let mut hidden = false;
                while above != "/" && !hidden {
                    hidden = matches!(root.nodes.get(above), Some(RootNode::Symlink(_)));
                    above = crate::fs::parent_path(above);
                }
                if hidden || fs.lookup_abs(&norm).is_some() {
                    continue; // the disk's (after a crash, or `/tmp` and `/data`)
                }
                let (kind, mode) = match node {
                    RootNode::File { mode, data } => (Kind::Static(data.clone()), *mode),
                    RootNode::Dir { mode } => (Kind::Dir(DirData::default_for(ROOT)), *mode),
                    RootNode::Symlink(t) if !t.is_empty() => (Kind::Symlink(t.clone()), 0o777),
                    RootNode::Symlink(_) => continue,
                };
                fs.place(&norm, kind, mode & 0o7777, false, true);
            }
        }
        for (p, data) in inputs.files {
            if let Ok((norm, _)) = crate::fd::normalize("/", p.as_bytes()) {
                // A program or a script may be run (`execve`); other files are read.
                let runnable = data.starts_with(b"\x7fELF") || data.starts_with(b"#!");
                let mode = if runnable { 0o755 } else { 0o644 };
                fs.place(&norm, Kind::Static(Arc::from(data.as_slice())), mode, false, true);
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
            ("/proc/self/cmdline", Kind::ProcInfo(ProcFile::Cmdline), 0o444),
            ("/proc/self/comm", Kind::ProcInfo(ProcFile::Comm), 0o444),
            ("/proc/self/stat", Kind::ProcInfo(ProcFile::Stat), 0o444),
            ("/proc/self/status", Kind::ProcInfo(ProcFile::Status), 0o444),
            // Its entries are the fd table's, read at each walk and listing (`Fs::walk_fds`).
            (PROC_FD, Kind::Dir(DirData::default_for(ROOT)), 0o500),
            ("/dev/fd", Kind::Symlink(PROC_FD.into()), 0o777),
            ("/dev/stdin", Kind::Symlink("/proc/self/fd/0".into()), 0o777),
            ("/dev/stdout", Kind::Symlink("/proc/self/fd/1".into()), 0o777),
            ("/dev/stderr", Kind::Symlink("/proc/self/fd/2".into()), 0o777),
            ("/dev/null", Kind::DevNull, 0o666),
            ("/dev/random", Kind::Random(8), 0o666),
            ("/dev/urandom", Kind::Random(9), 0o666),
            ("/dev/zero", Kind::MemDev(5), 0o666),
            ("/dev/full", Kind::MemDev(7), 0o666),
        ] {
            fs.place(p, kind, mode, false, true);
        }
        let list = crate::cpuid::cpu_list(cpus);
        for (p, text) in [
            ("/proc/cpuinfo", crate::cpuid::proc_cpuinfo(cpus)),
            ("/proc/sys/fs/pipe-max-size", format!("{}\n", crate::net::PIPE_MAX_SIZE)),
            ("/sys/devices/system/cpu/online", list.clone()),
            ("/sys/devices/system/cpu/possible", list.clone()),
            ("/sys/devices/system/cpu/present", list),
        ] {
            if fs.lookup_abs(p).is_none() {
                fs.place(p, Kind::Static(Arc::from(text.into_bytes())), 0o444, false, true);
            }
        }
        if let Some(id) = fs.lookup_abs("/proc/self") {
            fs.set_mode(id, 0o555);
        }
        for d in [
            "/proc",
            "/proc/self",
            PROC_FD,
            "/proc/sys",
            "/proc/sys/fs",
            "/dev",
            "/sys",
            "/sys/devices",
            "/sys/devices/system",
            "/sys/devices/system/cpu",
        ] {
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
