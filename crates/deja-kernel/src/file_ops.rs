//! What each kind of open file description does, in one place: the handlers ask the
//! description ([`FileKind`]) instead of matching its kind.

use crate::fd::{object_of, FileKind, Stat, FILE_TIME_S, S_IFIFO};
use crate::fs::{Fs, ROOT};
use crate::net::{Net, ObjKind};

impl FileKind {
    /// The inode of the file system behind the description: a file's or a directory's.
    pub fn inode(&self) -> Option<u64> {
        match self {
            FileKind::Inode { id, .. } | FileKind::Dir { id, .. } => Some(*id),
            _ => None,
        }
    }

    /// True for the standard streams (stdin, stdout, stderr: pipes of the shell).
    pub fn is_std_stream(&self) -> bool {
        matches!(self, FileKind::Stdin(_) | FileKind::Stdout | FileKind::Stderr)
    }

    /// True if the description has no file position: the standard streams and the I/O objects
    /// of [`crate::net`] (sockets, pipes, eventfds, epoll instances). Seeks and positioned reads
    /// and writes are `ESPIPE` on them.
    pub fn is_stream(&self) -> bool {
        self.is_std_stream() || object_of(self).is_some()
    }

    /// What `fstat` reports for the description: the inode's status for a file of the file
    /// system (`fs`) or a device, the status fixed at open for a generated file, and a
    /// synthetic one (a pipe, a socket or an anonymous inode, never changing) otherwise.
    pub fn stat(&self, fs: &Fs) -> Stat {
        match self {
            FileKind::Stdin(_) | FileKind::Stdout | FileKind::Stderr => {
                let ino = 100 + u64::from(!matches!(self, FileKind::Stdin(_)));
                let t = FILE_TIME_S * 1_000_000_000;
                Stat { dev: 0xd, ino, mode: S_IFIFO | 0o600, nlink: 1, size: 0, rdev: 0, times: [t; 3] }
            }
            FileKind::Regular { stat, .. } => *stat,
            FileKind::Inode { id, .. } | FileKind::Dir { id, .. } => fs.stat(*id),
            FileKind::DevNull => fs.stat(fs.lookup_abs("/dev/null").unwrap_or(ROOT)),
            FileKind::Random(m) => {
                let p = if *m == 8 { "/dev/random" } else { "/dev/urandom" };
                fs.stat(fs.lookup_abs(p).unwrap_or(ROOT))
            }
            FileKind::Socket(o) | FileKind::Pipe { obj: o, .. } | FileKind::EventFd(o) | FileKind::Epoll(o) => {
                let mode = match self {
                    FileKind::Socket(_) => 0o140000 | 0o777,
                    FileKind::Pipe { .. } => S_IFIFO | 0o600,
                    _ => 0o600,
                };
                let t = FILE_TIME_S * 1_000_000_000;
                Stat { dev: 0x8, ino: 1000 + *o, mode, nlink: 1, size: 0, rdev: 0, times: [t; 3] }
            }
        }
    }

    /// What `FIONREAD` answers for the description at file position `offset`: the bytes left
    /// to read of a file (of `fs`), stdin or a generated file, the bytes buffered in a stream
    /// socket or a pipe of `net`, the size of the next datagram, 0 for stdout and stderr;
    /// `None` for the kinds that do not answer it (`ENOTTY`).
    pub fn bytes_ready(&self, offset: u64, fs: &Fs, net: &Net) -> Option<u64> {
        Some(match self {
            FileKind::Stdin(d) => (d.len() as u64).saturating_sub(offset),
            FileKind::Regular { data, .. } => (data.len() as u64).saturating_sub(offset),
            FileKind::Inode { id, .. } => fs.size(*id).saturating_sub(offset),
            FileKind::Stdout | FileKind::Stderr => 0,
            k => match object_of(k).and_then(|(o, _)| net.objects.get(&o)).map(|o| &o.kind) {
                Some(ObjKind::Stream(st)) => st.rx.len() as u64,
                Some(ObjKind::Dgram(d)) => d.queue.front().map_or(0, |m| m.1.len() as u64),
                Some(ObjKind::Pipe { buf, .. }) => buf.len() as u64,
                _ => return None,
            },
        })
    }
}
