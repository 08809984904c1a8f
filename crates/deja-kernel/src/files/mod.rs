//! Files as a process holds them: the fd table and its open file descriptions (`fd.rs`), what
//! each kind of description does (`file_ops.rs`), and [`Files`] (this file): the file system
//! together with the fd table, the record locks and the working directory.
//!
//! Owns [`Files`], the [`FdTable`], [`OpenFile`](fd::OpenFile) and
//! [`FileKind`](fd::FileKind). Uses [`crate::fs`] (the inodes a description names),
//! [`crate::net`] (the I/O objects sockets, pipes, eventfds and epoll instances are, and their
//! poll readiness, computed here in `readiness.rs` because an epoll instance's needs the fd
//! table), [`crate::abi`] and [`crate::persist`].
//!
//! [`Files`] is a saved part of the kernel state (see [`persist`](crate::persist)); its fields
//! are its encoding, in declaration order.

use crate::prelude::*;
use alloc::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::fs::Fs;
use crate::persist::{ensure, Persist, RestoreError};
use fd::FdTable;

pub(crate) mod fd;
pub(crate) mod file_ops;
mod readiness;

/// Record locks kept at most.
pub(crate) const MAX_LOCKS: usize = 4096;
/// A record lock's key (inode number, owner, start) and value (type, end): see
/// [`Files::locks`].
pub(crate) type Lock = ((u64, u64, u64), (u16, u64));

/// The owner bit of a lock held by an open file description rather than a process.
pub(crate) const OFD_OWNER: u64 = 1 << 63;

/// The file system and the process's view of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Files {
    /// Every inode with its volatile and durable layers, pending writes, link and open counts.
    pub(crate) fs: Fs,
    /// Record locks by (inode number, owner, start): (type, end). The owner is the pid for a
    /// process's lock (`F_SETLK`), or [`OFD_OWNER`] with the open file description's index for
    /// one of a description (`F_OFD_SETLK`); the end is exclusive, `u64::MAX` to the end of file.
    pub(crate) locks: BTreeMap<(u64, u64, u64), (u16, u64)>,
    /// The fds, the open descriptions they name, and stdin.
    pub(crate) fds: FdTable,
    /// The working directory's inode (shared by every thread, as with `CLONE_FS`). It may
    /// have been removed since: relative paths then find nothing and `getcwd` is `ENOENT`.
    pub(crate) cwd: u64,
}

impl Persist for Files {
    /// Nothing: the checks need no other part.
    type Context = ();

    /// Checks the invariants of restored files: the file system's and the fd table's own,
    /// open counts equal to the descriptions naming each inode, and the lock bound.
    fn validate(&self, _: &()) -> Result<(), RestoreError> {
        self.fs.validate()?;
        self.fds.validate()?;
        let mut refs: BTreeMap<u64, u64> = BTreeMap::new();
        for d in self.fds.descriptions() {
            if let Some(id) = d.kind.inode() {
                *refs.entry(id).or_default() += 1;
            }
        }
        self.fs.validate_open(&refs)?;
        ensure(self.locks.len() <= MAX_LOCKS, || format!("{} locks", self.locks.len()))?;
        for ((_, _, start), (ty, end)) in &self.locks {
            ensure(*ty <= 1 && start < end, || format!("a lock of type {ty} over [{start}, {end})"))?;
        }
        Ok(())
    }
}
