//! The file descriptor table and the open file descriptions it holds.
//!
//! The file system itself is in [`crate::fs`]. fds 0, 1 and 2 are pipes: 0 reads
//! [`ProgramSpec::stdin`], 1 and 2 collect output.
//!
//! [`ProgramSpec::stdin`]: crate::ProgramSpec::stdin

use crate::prelude::*;
use alloc::collections::BTreeMap;
use alloc::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::abi::errno::*;
use crate::abi::file::{O_ACCMODE, O_PATH, O_RDWR, O_WRONLY};
use crate::fs::Stat;
use crate::persist::{arc_bytes, ensure, RestoreError};

/// What an open file description refers to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum FileKind {
    /// The read end of the stdin pipe.
    Stdin(#[serde(with = "arc_bytes")] Arc<[u8]>),
    /// The stdout pipe.
    Stdout,
    /// The stderr pipe.
    Stderr,
    /// A generated read-only file (`/proc/self/maps`, contents fixed at open).
    Regular {
        /// Path it was opened by.
        path: String,
        /// Contents.
        #[serde(with = "arc_bytes")]
        data: Arc<[u8]>,
        /// Status.
        stat: Stat,
    },
    /// A file of the file system (regular, or a symlink opened with `O_PATH`).
    Inode {
        /// Inode id in [`crate::fs::Fs`].
        id: u64,
        /// Path it was opened by.
        path: String,
    },
    /// A directory.
    Dir {
        /// Inode id.
        id: u64,
        /// The last name `getdents64` returned (`None`: start).
        after: Option<String>,
        /// The process whose `/proc/<pid>` directory (or its `fd` directory) this is, when it
        /// was opened by a pid's name (see [`crate::fs::Walked::pid`]).
        pid: Option<u64>,
    },
    /// `/dev/null`.
    DevNull,
    /// `/dev/urandom`.
    Random(u32),
    /// `/dev/zero` (5) or `/dev/full` (7).
    MemDev(u32),
    /// A socket: object id in [`crate::net::Net`].
    Socket(u64),
    /// One end of a pipe.
    Pipe {
        /// Object id.
        obj: u64,
        /// The write end.
        write: bool,
    },
    /// An eventfd.
    EventFd(u64),
    /// An epoll instance.
    Epoll(u64),
    /// An open FIFO: its inode, and the pipe every opener of it shares while any is open.
    Fifo {
        /// Inode id in [`crate::fs::Fs`].
        id: u64,
        /// The pipe's object id in [`crate::net::Net`].
        obj: u64,
        /// Opened for reading.
        read: bool,
        /// Opened for writing.
        write: bool,
        /// Opened for reading only, without blocking, when no writer had come: the count of
        /// writers that had opened the FIFO then ([`crate::net::Fifo::opened`]). Until another
        /// comes, no hang-up is reported (0: none held back).
        quiet: u64,
    },
}

/// The [`crate::net`] object behind a description, and for a pipe end whether it is the
/// write end (`None` for a FIFO opened for both).
pub fn object_of(kind: &FileKind) -> Option<(u64, Option<bool>)> {
    match kind {
        FileKind::Socket(o) | FileKind::EventFd(o) | FileKind::Epoll(o) => Some((*o, None)),
        FileKind::Pipe { obj, write } => Some((*obj, Some(*write))),
        FileKind::Fifo { obj, read, write, .. } => Some((*obj, (read != write).then_some(*write))),
        _ => None,
    }
}

/// An open file description (shared by `dup`ed fds).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenFile {
    /// The file.
    pub kind: FileKind,
    /// File offset (or directory position).
    pub offset: u64,
    /// Access mode and status flags (`O_RDONLY`/`O_WRONLY`, `O_APPEND`, `O_NONBLOCK`, ...).
    pub flags: u32,
    refs: u32,
    /// Copies of it in flight in Unix socket messages (`SCM_RIGHTS`): it stays open while
    /// any is, even with no fd left.
    inflight: u32,
    /// Who `SIGIO` is for (`F_SETOWN`, `F_SETOWN_EX`): the owner's kind (`F_OWNER_TID` 0,
    /// `F_OWNER_PID` 1, `F_OWNER_PGRP` 2) and id, 0 for none. With [`O_ASYNC`](crate::abi::file::O_ASYNC) Linux signals
    /// the owner when the file becomes ready; deja records both and answers them back, but
    /// sends no signal (the run summary lists it).
    pub owner: (u32, u64),
    /// The signal of `F_SETSIG` (0: `SIGIO`).
    pub owner_sig: i32,
}

impl OpenFile {
    /// A description with `flags`.
    pub fn new(kind: FileKind, flags: u32) -> Self {
        OpenFile { kind, offset: 0, flags, refs: 0, inflight: 0, owner: (0, 0), owner_sig: 0 }
    }

    /// True if opened for reading.
    pub fn readable(&self) -> bool {
        self.flags & O_ACCMODE != O_WRONLY && self.flags & O_PATH == 0
    }

    /// True if opened for writing.
    pub fn writable(&self) -> bool {
        matches!(self.flags & O_ACCMODE, O_WRONLY | O_RDWR) && self.flags & O_PATH == 0
    }
}

/// One fd.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FdEntry {
    /// Index of the open file description.
    pub desc: u64,
    /// `FD_CLOEXEC`.
    pub cloexec: bool,
}

/// The fd tables of a node's processes over their shared open file descriptions: the
/// current process's fds, and the other processes' (their descriptions' reference counts
/// count every table).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FdTable {
    fds: BTreeMap<i32, FdEntry>,
    descs: BTreeMap<u64, OpenFile>,
    next_desc: u64,
    /// The fds of the processes that are not current, by pid.
    parked: BTreeMap<u64, BTreeMap<i32, FdEntry>>,
}

impl FdTable {
    /// The table of a new process: 0 stdin, 1 stdout, 2 stderr.
    pub fn new(stdin: &[u8]) -> Self {
        let mut t = FdTable::default();
        let _ = t.install(OpenFile::new(FileKind::Stdin(Arc::from(stdin)), 0), 0, 3, false);
        let _ = t.install(OpenFile::new(FileKind::Stdout, O_WRONLY), 1, 3, false);
        let _ = t.install(OpenFile::new(FileKind::Stderr, O_WRONLY), 2, 3, false);
        t
    }

    fn lowest_free(&self, min: i32, limit: u64) -> Result<i32, i32> {
        let mut fd = min;
        for (k, _) in self.fds.range(min..) {
            if *k != fd {
                break;
            }
            fd += 1;
        }
        if (fd as u64) < limit {
            Ok(fd)
        } else {
            Err(EMFILE)
        }
    }

    /// Installs a new description at the lowest free fd ≥ `min`.
    pub fn install(&mut self, file: OpenFile, min: i32, limit: u64, cloexec: bool) -> Result<i32, i32> {
        let fd = self.lowest_free(min, limit)?;
        let desc = self.next_desc;
        self.next_desc += 1;
        self.descs.insert(desc, OpenFile { refs: 1, ..file });
        self.fds.insert(fd, FdEntry { desc, cloexec });
        Ok(fd)
    }

    /// A copy of the current fds for process `pid` (`fork`): each fd names the same
    /// description, with its `FD_CLOEXEC`.
    pub fn fork_for(&mut self, pid: u64) {
        for e in self.fds.values() {
            if let Some(d) = self.descs.get_mut(&e.desc) {
                d.refs += 1;
            }
        }
        self.parked.insert(pid, self.fds.clone());
    }

    /// A new table for process `pid`, not current: 0 an empty stdin, 1 stdout, 2 stderr (a
    /// process deja starts).
    pub fn fresh_for(&mut self, pid: u64) {
        let mut fds = BTreeMap::new();
        for (fd, kind, flags) in [
            (0, FileKind::Stdin(Arc::from(&[][..])), 0),
            (1, FileKind::Stdout, O_WRONLY),
            (2, FileKind::Stderr, O_WRONLY),
        ] {
            let desc = self.next_desc;
            self.next_desc += 1;
            self.descs.insert(desc, OpenFile { refs: 1, ..OpenFile::new(kind, flags) });
            fds.insert(fd, FdEntry { desc, cloexec: false });
        }
        self.parked.insert(pid, fds);
    }

    /// Makes process `to`'s fds current, keeping the current ones as `from`'s (unless
    /// `from` is gone: then it must have closed them all).
    pub fn switch(&mut self, from: Option<u64>, to: u64) {
        let incoming = self.parked.remove(&to).unwrap_or_default();
        let outgoing = core::mem::replace(&mut self.fds, incoming);
        if let Some(from) = from {
            self.parked.insert(from, outgoing);
        }
    }

    /// The open fds of the current process (`None`) or of parked process `pid`, in ascending
    /// order, with what each has open.
    pub fn open_of(&self, pid: Option<u64>) -> Vec<(i32, &OpenFile)> {
        let table = match pid {
            None => Some(&self.fds),
            Some(p) => self.parked.get(&p),
        };
        table.into_iter().flatten().filter_map(|(fd, e)| Some((*fd, self.descs.get(&e.desc)?))).collect()
    }

    /// The pids whose fds are parked.
    pub fn parked_pids(&self) -> impl Iterator<Item = u64> + '_ {
        self.parked.keys().copied()
    }

    /// Closes every fd of the current process that has `FD_CLOEXEC` (`execve`), or every fd
    /// when `all` (the process ended); the descriptions no fd names any more.
    pub fn close_many(&mut self, all: bool) -> Vec<OpenFile> {
        let fds: Vec<i32> = self.fds.iter().filter(|(_, e)| all || e.cloexec).map(|(fd, _)| *fd).collect();
        fds.into_iter().filter_map(|fd| self.close(fd).ok().flatten()).collect()
    }

    /// Checks the invariants of a restored table: fds are non-negative and name existing
    /// descriptions, each description's reference count is its number of fds, and the next
    /// description index is unused.
    pub fn validate(&self) -> Result<(), RestoreError> {
        let mut refs: BTreeMap<u64, u32> = BTreeMap::new();
        for (&fd, e) in self.fds.iter().chain(self.parked.values().flatten()) {
            ensure(fd >= 0, || format!("fd {fd} is negative"))?;
            ensure(self.descs.contains_key(&e.desc), || format!("fd {fd} names a missing description {}", e.desc))?;
            *refs.entry(e.desc).or_default() += 1;
        }
        for (&d, f) in &self.descs {
            let n = refs.get(&d).copied().unwrap_or(0);
            ensure(f.refs == n, || format!("description {d} counts {} references but has {n}", f.refs))?;
            ensure(n > 0 || f.inflight > 0, || format!("description {d} has no fd and is not in flight"))?;
            ensure(d < self.next_desc, || format!("description {d} is not below the next index {}", self.next_desc))?;
        }
        Ok(())
    }

    /// True while description `desc` is open (named by an fd of any process, or in flight).
    pub fn holds(&self, desc: u64) -> bool {
        self.descs.contains_key(&desc)
    }

    /// Every open file description.
    pub fn descriptions(&self) -> impl Iterator<Item = &OpenFile> {
        self.descs.values()
    }

    /// The open fds from `from` up, in ascending order.
    pub fn open_fds(&self, from: i32) -> impl Iterator<Item = i32> + '_ {
        self.fds.range(from..).map(|(fd, _)| *fd)
    }

    /// True if an fd below `limit` is free.
    pub fn has_free(&self, limit: u64) -> bool {
        self.lowest_free(0, limit).is_ok()
    }

    /// The entry of `fd`.
    pub fn entry(&self, fd: i32) -> Result<FdEntry, i32> {
        self.fds.get(&fd).copied().ok_or(EBADF)
    }

    /// The description behind `fd`.
    pub fn get(&self, fd: i32) -> Result<&OpenFile, i32> {
        let e = self.entry(fd)?;
        self.descs.get(&e.desc).ok_or(EBADF)
    }

    /// The description behind `fd`, mutably.
    pub fn get_mut(&mut self, fd: i32) -> Result<&mut OpenFile, i32> {
        let e = self.entry(fd)?;
        self.descs.get_mut(&e.desc).ok_or(EBADF)
    }

    /// Sets `FD_CLOEXEC`.
    pub fn set_cloexec(&mut self, fd: i32, on: bool) -> Result<(), i32> {
        self.fds.get_mut(&fd).ok_or(EBADF)?.cloexec = on;
        Ok(())
    }

    /// Closes `fd`; returns the description if this was its last fd.
    pub fn close(&mut self, fd: i32) -> Result<Option<OpenFile>, i32> {
        let e = self.fds.remove(&fd).ok_or(EBADF)?;
        if let Some(d) = self.descs.get_mut(&e.desc) {
            d.refs -= 1;
            if d.refs == 0 && d.inflight == 0 {
                return Ok(self.descs.remove(&e.desc));
            }
        }
        Ok(None)
    }

    /// Puts a copy of `fd`'s description in flight (`SCM_RIGHTS`); its index.
    pub fn hold(&mut self, fd: i32) -> Result<u64, i32> {
        let e = self.entry(fd)?;
        let d = self.descs.get_mut(&e.desc).ok_or(EBADF)?;
        d.inflight += 1;
        Ok(e.desc)
    }

    /// Descriptions in flight, counted once per copy.
    pub fn in_flight(&self) -> u64 {
        self.descs.values().map(|d| u64::from(d.inflight)).sum()
    }

    /// Installs a description that was in flight at the lowest free fd; the copy stays in
    /// flight if `keep` (a peek).
    pub fn receive(&mut self, desc: u64, limit: u64, cloexec: bool, keep: bool) -> Result<i32, i32> {
        if !self.descs.contains_key(&desc) {
            return Err(EBADF);
        }
        let fd = self.lowest_free(0, limit)?;
        self.link(desc, fd, cloexec);
        if let (false, Some(d)) = (keep, self.descs.get_mut(&desc)) {
            d.inflight = d.inflight.saturating_sub(1);
        }
        Ok(fd)
    }

    /// Drops a copy in flight; returns the description if nothing holds it any more.
    pub fn unhold(&mut self, desc: u64) -> Option<OpenFile> {
        let d = self.descs.get_mut(&desc)?;
        d.inflight = d.inflight.saturating_sub(1);
        if d.refs == 0 && d.inflight == 0 {
            return self.descs.remove(&desc);
        }
        None
    }

    /// `dup`/`F_DUPFD`: a new fd ≥ `min` for the description of `fd`.
    pub fn dup(&mut self, fd: i32, min: i32, limit: u64, cloexec: bool) -> Result<i32, i32> {
        let e = self.entry(fd)?;
        let new = self.lowest_free(min, limit)?;
        self.link(e.desc, new, cloexec);
        Ok(new)
    }

    /// `dup2`/`dup3`: makes `new` refer to the description of `old` (closing `new` first);
    /// returns the description that closing `new` dropped, if any.
    pub fn dup_to(&mut self, old: i32, new: i32, cloexec: bool) -> Result<Option<OpenFile>, i32> {
        let e = self.entry(old)?;
        let dropped = self.close(new).ok().flatten();
        self.link(e.desc, new, cloexec);
        Ok(dropped)
    }

    fn link(&mut self, desc: u64, fd: i32, cloexec: bool) {
        if let Some(d) = self.descs.get_mut(&desc) {
            d.refs += 1;
        }
        self.fds.insert(fd, FdEntry { desc, cloexec });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::file::O_LARGEFILE;

    #[test]
    fn fd_table_round_trip() {
        let mut t = FdTable::new(b"stdin");
        let kind = FileKind::Inode { id: 7, path: "/data/in.txt".into() };
        let fd = t.install(OpenFile::new(kind, O_LARGEFILE), 0, 1024, true).unwrap();
        t.get_mut(fd).unwrap().offset = 2;
        t.dup(fd, 10, 1024, false).unwrap();
        t.get_mut(0).unwrap().offset = 3;
        t.close(2).unwrap();
        let mut u: FdTable = postcard::from_bytes(&postcard::to_stdvec(&t).unwrap()).unwrap();
        assert_eq!(t, u);
        u.validate().unwrap();
        u.get_mut(10).unwrap().offset = 1;
        assert_eq!(u.get(fd).unwrap().offset, 1);
        assert_eq!(u.install(OpenFile::new(FileKind::DevNull, 0), 0, 1024, false), Ok(2));
        let mut bad = t.clone();
        bad.descs.values_mut().for_each(|d| d.refs = 0);
        assert!(bad.validate().is_err(), "reference counts");
        let mut bad = t.clone();
        bad.fds.insert(7, FdEntry { desc: 99, cloexec: false });
        assert!(bad.validate().is_err(), "dangling fd");
        let mut bad = t.clone();
        bad.next_desc = 0;
        assert!(bad.validate().is_err(), "next index in use");
    }

    #[test]
    fn fd_table_dup_close() {
        let mut t = FdTable::new(b"in");
        assert_eq!(t.dup(1, 0, 1024, false), Ok(3));
        t.get_mut(3).unwrap().offset = 5;
        assert_eq!(t.get(1).unwrap().offset, 5);
        t.close(1).unwrap();
        assert_eq!(t.get(3).unwrap().kind, FileKind::Stdout);
        assert_eq!(t.close(1), Err(EBADF));
        assert_eq!(t.dup_to(3, 1, false), Ok(None));
        assert_eq!(t.dup(0, 0, 4, false), Err(EMFILE));
        assert_eq!(t.get(-1), Err(EBADF));
    }
}
