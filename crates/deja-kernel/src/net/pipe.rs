//! Pipes and FIFOs: an anonymous pipe's ends, and a FIFO's one pipe per inode while it is open,
//! shared by its openers and gone when the last of them closes.

use alloc::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use super::{Net, Obj, ObjKind};

/// Bytes a pipe holds unless `F_SETPIPE_SZ` changes it: Linux's 16 pages.
pub const PIPE_SIZE: usize = 65_536;
/// The most `F_SETPIPE_SZ` gives a program without privileges (Linux's `pipe-max-size`).
pub const PIPE_MAX_SIZE: usize = 1 << 20;
/// A pipe write of at most this many bytes is all or nothing (`PIPE_BUF`).
pub const PIPE_BUF: usize = 4096;

/// A FIFO while it is open (or being opened), by its inode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Fifo {
    /// The pipe its openers share ([`ObjKind::Pipe`](super::ObjKind::Pipe), whose counts of readers and writers
    /// include the opens still waiting).
    pub obj: u64,
    /// How many readers and how many writers ever opened it, from 1 (Linux's `r_counter` and
    /// `w_counter`): a waiting open is done once the other side's count moved.
    pub opened: [u64; 2],
    /// The threads blocked opening it: tid → whether it waits for a writer (else for a
    /// reader), and that side's count when it began.
    pub waiting: BTreeMap<u64, (bool, u64)>,
}

impl Net {
    /// The pipe of the FIFO whose inode is `inode`, made for its first opener.
    pub(crate) fn fifo_pipe(&mut self, inode: u64) -> u64 {
        if let Some(f) = self.fifos.get(&inode) {
            return f.obj;
        }
        let obj = self.add(ObjKind::Pipe { buf: VecDeque::new(), readers: 0, writers: 0, cap: PIPE_SIZE });
        self.fifos.insert(inode, Fifo { obj, opened: [1, 1], waiting: BTreeMap::new() });
        obj
    }

    /// The readers and writers a pipe has now (a FIFO's that is not open: none).
    pub(crate) fn pipe_ends(&self, obj: u64) -> (u32, u32) {
        match self.objects.get(&obj).map(|o| &o.kind) {
            Some(ObjKind::Pipe { readers, writers, .. }) => (*readers, *writers),
            _ => (0, 0),
        }
    }

    /// Whether a read-only FIFO description opened with `quiet` holds back its hang-up: no
    /// writer is there and none came since it opened.
    pub(crate) fn fifo_quiet(&self, inode: u64, quiet: u64) -> bool {
        self.fifos.get(&inode).is_some_and(|f| f.opened[1] == quiet && self.pipe_ends(f.obj).1 == 0)
    }

    /// A pipe gains a reader and/or a writer (a FIFO's opener, who may be waiting).
    pub(crate) fn join_pipe(&mut self, inode: u64, obj: u64, read: bool, write: bool) {
        if let Some(Obj { kind: ObjKind::Pipe { readers, writers, .. }, .. }) = self.objects.get_mut(&obj) {
            *readers += u32::from(read);
            *writers += u32::from(write);
        }
        if let Some(f) = self.fifos.get_mut(&inode) {
            f.opened[0] += u64::from(read);
            f.opened[1] += u64::from(write);
        }
        self.touch(obj);
    }

    /// An anonymous pipe gains a reader or a writer (an end opened again through
    /// `/proc/self/fd`).
    pub(crate) fn reopen_pipe(&mut self, obj: u64, write: bool) {
        if let Some(Obj { kind: ObjKind::Pipe { readers, writers, .. }, .. }) = self.objects.get_mut(&obj) {
            *readers += u32::from(!write);
            *writers += u32::from(write);
        }
        self.touch(obj);
    }

    /// A pipe loses a reader and/or a writer (a description of one end closed, or of a FIFO);
    /// with neither left it goes, and a FIFO's next opener gets a new one.
    pub(crate) fn leave_pipe(&mut self, obj: u64, read: bool, write: bool) {
        let Some(Obj { kind: ObjKind::Pipe { readers, writers, .. }, .. }) = self.objects.get_mut(&obj) else {
            return;
        };
        *readers = readers.saturating_sub(u32::from(read));
        *writers = writers.saturating_sub(u32::from(write));
        let gone = *readers == 0 && *writers == 0;
        self.touch(obj);
        if gone {
            self.objects.remove(&obj);
            self.fifos.retain(|_, f| f.obj != obj);
        }
    }
}
