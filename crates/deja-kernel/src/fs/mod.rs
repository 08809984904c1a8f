//! The node's file system: an in-memory inode tree with a volatile and a durable layer.
//!
//! Owns [`Fs`] (the inodes, their layers and pending operations, the crash model), the
//! [`Disk`](disk::Disk) a node starts from and a crash leaves (`disk.rs`), path normalization
//! and inode numbers (`path.rs`), and what it adds to a process's VMAs (`mapped.rs`). Uses
//! [`crate::decisions`] (the words of faults its records use), [`crate::host`] (the CPUID table
//! `/proc/cpuinfo` shows), [`crate::net`] (the pipe size `/proc/sys/fs/pipe-max-size` shows),
//! [`crate::mm`], [`crate::time`], [`crate::abi`] and [`crate::persist`]; the fd table and what
//! a description does are above it, in [`crate::files`].
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
//! This module holds the model's types and the tree's restore checks; `pending.rs` holds the
//! operations pending on files and directories and what a crash image keeps of them, `build.rs`
//! makes the tree of a new run, `walk.rs` resolves paths, `tree.rs` changes the volatile layer's
//! names and frees inodes, `data.rs` reads and changes a file's contents and metadata (with
//! the [`Stat`] a file reports), `durable.rs` moves pending operations to the durable layer and
//! builds the disks a crash can leave, `disk.rs` holds the [`Disk`](disk::Disk), `path.rs` the
//! path rules, `root.rs` the read-only root under the declared files, `models.rs` the crash
//! models, and `mapped.rs` what the file system adds to the VMAs.

use crate::prelude::*;
use alloc::collections::{BTreeMap, BTreeSet};
use alloc::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::abi::errno::*;
use crate::abi::file::{S_IFCHR, S_IFDIR, S_IFIFO, S_IFLNK, S_IFREG, S_IFSOCK};
use crate::decisions::fault_kinds::FaultKind;
use crate::persist::{ensure, RestoreError};
use disk::{parent_of, Disk, DiskEntry};

mod build;
mod data;
pub(crate) mod disk;
mod durable;
mod mapped;
mod models;
mod path;
mod pending;
mod root;
mod tree;
mod walk;

pub use data::{Stat, FILE_TIME_S};
pub use durable::diff_paths;
use durable::simulate;
pub use models::{CrashModel, OpClass};
pub use path::{ino_of, normalize, PROC_EXE};
use pending::apply_dir_ops;
pub use pending::{DirData, DirOp, FileData, Pending, PendingOp, Selection};
pub use root::{Root, RootNode};
pub use walk::{guest_path_problem, parent_path};

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
    /// `/dev/zero` (5), `/dev/full` (7), or the device that takes the Antithesis SDKs' messages
    /// ([`SDK_OUTPUT_MINOR`], at [`Inputs::sdk_output`]).
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
    /// Where the device that takes the Antithesis SDKs' messages is placed (the absolute path
    /// the program's `ANTITHESIS_SDK_LOCAL_OUTPUT` names, see [`crate::record::antithesis`]),
    /// if anywhere.
    pub sdk_output: Option<&'a str>,
}

/// The minor number of the device that takes the Antithesis SDKs' messages (a [`Kind::MemDev`]).
pub const SDK_OUTPUT_MINOR: u32 = 222;

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

impl Fs {
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

fn file_len(i: &Inode) -> u64 {
    match &i.kind {
        Kind::File(f) => f.data.len() as u64,
        _ => 0,
    }
}

fn valid_name(n: &str) -> bool {
    !n.is_empty() && n.len() <= NAME_MAX && n != "." && n != ".." && !n.contains('/') && !n.contains('\0')
}
