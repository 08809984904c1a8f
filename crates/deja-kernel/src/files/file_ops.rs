//! What each kind of open file description does, in one place: the handlers ask the
//! description ([`FileKind`], [`OpenFile`]) and none of them matches on its kind.
//!
//! The questions that need only the files and the network are answered here whole, from the
//! parts passed in ([`Fs`], [`Net`], the [`FdTable`]): the inode behind a description, its
//! `fstat` status, `FIONREAD`, where `lseek` puts it, what the sync calls, `ftruncate`,
//! `fallocate` and `mmap` act on, a directory's listing position, the poll readiness, and
//! which descriptions are sockets or epoll instances and which an epoll may watch. Reads and
//! writes also pass the kernel's fault points, its output and its random stream, which this
//! module does not know: [`FileKind::read_source`] and [`FileKind::write_target`] answer with
//! what the call draws on or goes to (a [`ReadSource`], a [`WriteTarget`]) or with the errno
//! the kind gives, and the handler supplies those effects. Every answer is the errno or the
//! value Linux gives for that kind; the tests below pin each one for every kind.

use crate::prelude::*;
use alloc::sync::Arc;

use crate::abi::epoll::{EPOLLERR, EPOLLHUP, EPOLLIN, EPOLLOUT};
use crate::abi::errno::*;
use crate::abi::file::{O_PATH, S_IFIFO};
use crate::files::fd::{object_of, FdTable, FileKind, OpenFile};
use crate::fs::{Fs, Kind, Stat, FILE_TIME_S, ROOT, SDK_OUTPUT_MINOR};
use crate::net::{Net, ObjKind};
use crate::Stream;

/// What a read of a description takes its bytes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadSource {
    /// Bytes the description holds (stdin, a generated file), read from the file position.
    Held(Arc<[u8]>),
    /// A file of the file system, read from the file position after its fault point.
    File {
        /// Inode id in [`Fs`].
        id: u64,
        /// Path it was opened by (what the fault rules name).
        path: String,
    },
    /// Nothing: every read is at the end (`/dev/null`).
    Empty,
    /// The random stream: every read gives as many bytes as asked.
    Random,
    /// Zeros, as many as asked (`/dev/zero`, `/dev/full`).
    Zero,
}

/// Where a write to a description goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteTarget {
    /// The run's output on a stream (stdout, stderr).
    Output(Stream),
    /// Nowhere: the bytes are accepted and dropped (`/dev/null`, `/dev/urandom`).
    Discard,
    /// The Antithesis SDKs' messages, one JSON object per line
    /// ([`crate::record::antithesis`]).
    SdkMessages,
    /// A file of the file system, through its fault point and durability.
    File {
        /// Inode id in [`Fs`].
        id: u64,
        /// Path it was opened by.
        path: String,
    },
}

impl FileKind {
    /// The inode of the file system behind the description: a file's, a directory's or a
    /// FIFO's.
    pub fn inode(&self) -> Option<u64> {
        match self {
            FileKind::Inode { id, .. } | FileKind::Dir { id, .. } | FileKind::Fifo { id, .. } => Some(*id),
            _ => None,
        }
    }

    /// The pipe behind a pipe end or an open FIFO, and whether the description reads it and
    /// writes it (what closing it takes from the pipe).
    pub fn pipe_end(&self) -> Option<(u64, bool, bool)> {
        match self {
            FileKind::Pipe { obj, write } => Some((*obj, !*write, *write)),
            FileKind::Fifo { obj, read, write, .. } => Some((*obj, *read, *write)),
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
    /// system (`fs`), a FIFO or a device, the status fixed at open for a generated file, and a
    /// synthetic one (a pipe, a socket or an anonymous inode, never changing) otherwise.
    pub fn stat(&self, fs: &Fs) -> Stat {
        match self {
            FileKind::Stdin(_) | FileKind::Stdout | FileKind::Stderr => {
                let ino = 100 + u64::from(!matches!(self, FileKind::Stdin(_)));
                let t = FILE_TIME_S * 1_000_000_000;
                Stat { dev: 0xd, ino, mode: S_IFIFO | 0o600, nlink: 1, size: 0, rdev: 0, times: [t; 3] }
            }
            FileKind::Regular { stat, .. } => *stat,
            FileKind::Dir { id, pid: Some(pid), .. } => fs.proc_stat(*id, *pid),
            FileKind::Inode { id, .. } | FileKind::Dir { id, .. } | FileKind::Fifo { id, .. } => fs.stat(*id),
            FileKind::DevNull => fs.stat(fs.lookup_abs("/dev/null").unwrap_or(ROOT)),
            FileKind::MemDev(SDK_OUTPUT_MINOR) => fs.stat(fs.sdk_output().unwrap_or(ROOT)),
            FileKind::Random(m) | FileKind::MemDev(m) => {
                let p = match m {
                    5 => "/dev/zero",
                    7 => "/dev/full",
                    8 => "/dev/random",
                    _ => "/dev/urandom",
                };
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
                Some(ObjKind::Netlink(n)) => n.queue.front().map_or(0, |m| m.len() as u64),
                Some(ObjKind::Pipe { buf, .. }) => buf.len() as u64,
                Some(ObjKind::Unix(u)) if u.ty == 1 => u.bytes.len() as u64,
                Some(ObjKind::Unix(u)) => u.msgs.front().map_or(0, |m| m.data.len() as u64),
                _ => return None,
            },
        })
    }

    /// What a read of the description draws on, or the errno the kind gives: `ESPIPE` for a
    /// positioned read of stdin (`positioned`) and for the objects of [`crate::net`] (read
    /// through their own calls), `EISDIR` for a directory, `EBADF` for stdout and stderr.
    pub fn read_source(&self, positioned: bool) -> Result<ReadSource, i32> {
        match self {
            FileKind::Stdin(_) if positioned => Err(ESPIPE),
            FileKind::Stdin(data) | FileKind::Regular { data, .. } => Ok(ReadSource::Held(data.clone())),
            FileKind::Inode { id, path } => Ok(ReadSource::File { id: *id, path: path.clone() }),
            FileKind::Dir { .. } => Err(EISDIR),
            FileKind::DevNull | FileKind::MemDev(SDK_OUTPUT_MINOR) => Ok(ReadSource::Empty),
            FileKind::Random(_) => Ok(ReadSource::Random),
            FileKind::MemDev(_) => Ok(ReadSource::Zero),
            FileKind::Stdout | FileKind::Stderr => Err(EBADF),
            FileKind::Socket(_)
            | FileKind::Pipe { .. }
            | FileKind::Fifo { .. }
            | FileKind::EventFd(_)
            | FileKind::Epoll(_) => Err(ESPIPE),
        }
    }

    /// Where a write to the description goes, or `EBADF` for the kinds not written this way
    /// (stdin, a generated file, a directory, the objects of [`crate::net`]).
    pub fn write_target(&self) -> Result<WriteTarget, i32> {
        match self {
            FileKind::Stdout => Ok(WriteTarget::Output(Stream::Stdout)),
            FileKind::Stderr => Ok(WriteTarget::Output(Stream::Stderr)),
            FileKind::DevNull | FileKind::Random(_) | FileKind::MemDev(5) => Ok(WriteTarget::Discard),
            FileKind::MemDev(SDK_OUTPUT_MINOR) => Ok(WriteTarget::SdkMessages),
            FileKind::MemDev(_) => Err(ENOSPC),
            FileKind::Inode { id, path } => Ok(WriteTarget::File { id: *id, path: path.clone() }),
            _ => Err(EBADF),
        }
    }

    /// What the sync calls flush for the description: the inode of a file or a directory (of
    /// `fs`) and the path the fault rules name, only the path for a generated file; `EINVAL`
    /// for the other kinds.
    pub fn sync_target(&self, fs: &Fs) -> Result<(Option<u64>, String), i32> {
        match self {
            FileKind::Inode { id, path } => Ok((Some(*id), path.clone())),
            FileKind::Dir { id, .. } => Ok((Some(*id), fs.dir_path(*id).unwrap_or_default())),
            FileKind::Regular { path, .. } => Ok((None, path.clone())),
            _ => Err(EINVAL),
        }
    }

    /// Whether `sync_file_range` applies to the description: to a file of the file system
    /// and a generated file; `ESPIPE` for the standard streams and FIFOs, `EINVAL` for the
    /// other kinds.
    pub fn sync_range(&self) -> Result<(), i32> {
        match self {
            FileKind::Inode { .. } | FileKind::Regular { .. } => Ok(()),
            FileKind::Stdin(_) | FileKind::Stdout | FileKind::Stderr | FileKind::Fifo { .. } => Err(ESPIPE),
            _ => Err(EINVAL),
        }
    }

    /// The file `fallocate` extends, and its path: a file of the file system whose inode (in
    /// `fs`) is a regular file; `EISDIR` for a directory, `ESPIPE` for the standard streams
    /// and FIFOs, `ENODEV` for the other kinds and for an inode that is not a regular file.
    pub fn allocate_target(&self, fs: &Fs) -> Result<(u64, String), i32> {
        match self {
            FileKind::Inode { id, path } if matches!(fs.get(*id).map(|i| &i.kind), Some(Kind::File(_))) => {
                Ok((*id, path.clone()))
            }
            FileKind::Dir { .. } => Err(EISDIR),
            FileKind::Stdin(_) | FileKind::Stdout | FileKind::Stderr | FileKind::Fifo { .. } => Err(ESPIPE),
            _ => Err(ENODEV),
        }
    }

    /// What a mapping of the description shows: the path, the bytes (a copy of a file of
    /// `fs` at the time of the call, or a generated file's contents) and the inode number;
    /// `ENODEV` for the kinds that cannot be mapped and for an inode without contents.
    pub fn mmap_source(&self, fs: &Fs) -> Result<(String, Arc<[u8]>, u64), i32> {
        match self {
            FileKind::Regular { path, data, stat } => Ok((path.clone(), data.clone(), stat.ino)),
            FileKind::Inode { id, path } => {
                let data = fs.snapshot(*id).ok_or(ENODEV)?;
                Ok((path.clone(), data, fs.stat(*id).ino))
            }
            _ => Err(ENODEV),
        }
    }

    /// The socket object of [`crate::net`] behind the description; `None` for the other kinds
    /// (`ENOTSOCK` for the socket calls).
    pub fn socket(&self) -> Option<u64> {
        match self {
            FileKind::Socket(o) => Some(*o),
            _ => None,
        }
    }

    /// The epoll instance behind the description; `None` for the other kinds (`EINVAL` for
    /// the epoll calls).
    pub fn epoll(&self) -> Option<u64> {
        match self {
            FileKind::Epoll(o) => Some(*o),
            _ => None,
        }
    }

    /// Whether the epoll instance `ep` may watch the description: `EPERM` for the files of
    /// the file system, directories and generated files (always ready), `EINVAL` for `ep`
    /// itself.
    pub fn watchable_by(&self, ep: u64) -> Result<(), i32> {
        match self {
            FileKind::Inode { .. } | FileKind::Dir { .. } | FileKind::Regular { .. } => Err(EPERM),
            FileKind::Epoll(o) if *o == ep => Err(EINVAL),
            _ => Ok(()),
        }
    }

    /// A directory's inode and the last name `getdents64` returned from it (`None`: none
    /// yet); `None` for the other kinds (`ENOTDIR` where a directory is needed).
    pub fn listing(&self) -> Option<(u64, Option<&str>)> {
        match self {
            FileKind::Dir { id, after, .. } => Some((*id, after.as_deref())),
            _ => None,
        }
    }

    /// The process whose `/proc/<pid>` directory (or its `fd` directory) a directory opened by
    /// a pid's name is; `None` for any other description.
    pub fn proc_pid(&self) -> Option<u64> {
        match self {
            FileKind::Dir { pid, .. } => *pid,
            _ => None,
        }
    }
}

impl OpenFile {
    /// The sync calls' [`FileKind::sync_target`] of the description; `EBADF` if it was opened
    /// with `O_PATH`.
    pub fn sync_target(&self, fs: &Fs) -> Result<(Option<u64>, String), i32> {
        if self.flags & O_PATH != 0 {
            return Err(EBADF);
        }
        self.kind.sync_target(fs)
    }

    /// The readiness (`EPOLL*`/`POLL*` bits) of the description and the generation of its
    /// object in `net` (0 for the descriptions that are always ready): an object's own,
    /// limited to the bits of its end for a pipe or a FIFO opened for one side (a FIFO opened
    /// for reading without blocking before any writer came does not hang up until one has);
    /// stdin readable, and hung up once read to the end; stdout and stderr writable; anything
    /// else readable and writable.
    pub fn readiness(&self, net: &Net, fds: &FdTable) -> (u32, u64) {
        match (object_of(&self.kind), &self.kind) {
            (Some((o, end)), _) => {
                let mut r = net.readiness(o, fds);
                match end {
                    Some(true) => r &= EPOLLOUT | EPOLLERR,
                    Some(false) => r &= EPOLLIN | EPOLLHUP,
                    None => {}
                }
                if let FileKind::Fifo { id, quiet, .. } = self.kind {
                    if quiet != 0 && net.fifo_quiet(id, quiet) {
                        r &= !EPOLLHUP;
                    }
                }
                (r, net.gen(o))
            }
            (None, FileKind::Stdin(d)) if self.offset < d.len() as u64 => (EPOLLIN, 0),
            (None, FileKind::Stdin(_)) => (EPOLLIN | EPOLLHUP, 0),
            (None, FileKind::Stdout | FileKind::Stderr) => (EPOLLOUT, 0),
            (None, _) => (EPOLLIN | EPOLLOUT, 0),
        }
    }

    /// Records how far `getdents64` listed the description: the position `pos` and, for a
    /// directory, the last name returned (`last`).
    pub fn listed(&mut self, pos: u64, last: Option<String>) {
        self.offset = pos;
        if let FileKind::Dir { after, .. } = &mut self.kind {
            *after = last;
        }
    }

    /// The file `ftruncate` sets the size of, and its path: a file of the file system opened
    /// for writing; `EINVAL` for any other description.
    pub fn truncate_target(&self) -> Result<(u64, String), i32> {
        match &self.kind {
            FileKind::Inode { id, path } if self.writable() => Ok((*id, path.clone())),
            _ => Err(EINVAL),
        }
    }

    /// `lseek` of the description to `off` from `whence` (`SEEK_SET`, `SEEK_CUR`, `SEEK_END`,
    /// `SEEK_DATA`, `SEEK_HOLE`), the size of a file read from `fs`. Streams are `ESPIPE`;
    /// `/dev/null` and `/dev/urandom` stay at 0; a directory only rewinds (to the start of
    /// its listing), anything else being `EINVAL`. Returns the new position.
    pub fn seek(&mut self, off: u64, whence: u64, fs: &Fs) -> Result<u64, i32> {
        let size = match &mut self.kind {
            FileKind::DevNull | FileKind::Random(_) | FileKind::MemDev(_) => return Ok(0),
            FileKind::Regular { data, .. } => data.len() as i64,
            FileKind::Inode { id, .. } => fs.size(*id) as i64,
            FileKind::Dir { after, .. } => {
                if off != 0 || whence != 0 {
                    return Err(EINVAL);
                }
                self.offset = 0;
                *after = None;
                return Ok(0);
            }
            FileKind::Stdin(_) | FileKind::Stdout | FileKind::Stderr => return Err(ESPIPE),
            FileKind::Socket(_)
            | FileKind::Pipe { .. }
            | FileKind::Fifo { .. }
            | FileKind::EventFd(_)
            | FileKind::Epoll(_) => return Err(ESPIPE),
        };
        let off = off as i64;
        let cur = self.offset as i64;
        let new = match whence {
            0 => Some(off),
            1 => cur.checked_add(off),
            2 => size.checked_add(off),
            3 if off < size => Some(off),
            4 if off < size => Some(size),
            3 | 4 => return Err(ENXIO),
            _ => return Err(EINVAL),
        };
        match new {
            Some(n) if n >= 0 => {
                self.offset = n as u64;
                Ok(n as u64)
            }
            _ => Err(EINVAL),
        }
    }
}

#[cfg(test)]
mod tests {
    use alloc::collections::BTreeMap;

    use super::*;
    use crate::abi::file::O_RDWR;
    use crate::fs::FsConfig;

    /// One description of every kind, with the file system the file and the directory are in
    /// (a 5-byte regular file at `/data/w`, the directory `/data`; `/data/f` is a declared,
    /// read-only file).
    fn every_kind() -> (Fs, Vec<(&'static str, FileKind)>) {
        let files = BTreeMap::from([("/data/f".to_string(), b"static".to_vec())]);
        let mut fs = Fs::new(
            FsConfig::default(),
            None,
            crate::fs::Inputs { root: None, files: &files, sdk_output: None },
            "/bin/exe",
            b"\x7fELF",
            1,
        );
        let dir = fs.lookup_abs("/data").expect("/data");
        let file = fs.create_file(dir, "w", 0o644, 0).expect("a new file");
        assert_eq!(fs.write(file, 0, b"hello", 0), Ok(5));
        let w = fs.walk(dir, b"p", false).expect("a new name");
        let fifo = fs.special_node(&w, Kind::Fifo, 0o600, 0).expect("a new FIFO");
        let stat = fs.stat(file);
        let kinds = vec![
            ("stdin", FileKind::Stdin(Arc::from(&b"in"[..]))),
            ("stdout", FileKind::Stdout),
            ("stderr", FileKind::Stderr),
            ("regular", FileKind::Regular { path: "/proc/self/maps".into(), data: Arc::from(&b"maps"[..]), stat }),
            ("inode", FileKind::Inode { id: file, path: "/data/w".into() }),
            ("dir", FileKind::Dir { id: dir, after: Some("f".into()), pid: None }),
            ("null", FileKind::DevNull),
            ("random", FileKind::Random(9)),
            ("zero", FileKind::MemDev(5)),
            ("full", FileKind::MemDev(7)),
            ("sdk", FileKind::MemDev(SDK_OUTPUT_MINOR)),
            ("socket", FileKind::Socket(1)),
            ("pipe", FileKind::Pipe { obj: 2, write: false }),
            ("eventfd", FileKind::EventFd(3)),
            ("epoll", FileKind::Epoll(4)),
            ("fifo", FileKind::Fifo { id: fifo, obj: 5, read: true, write: false, quiet: 0 }),
        ];
        (fs, kinds)
    }

    #[test]
    fn every_kind_reads_from_its_source_or_gives_its_errno() {
        let (fs, kinds) = every_kind();
        let file = fs.lookup_abs("/data/w").unwrap();
        for (name, kind) in &kinds {
            let want = match *name {
                "stdin" => Ok(ReadSource::Held(Arc::from(&b"in"[..]))),
                "regular" => Ok(ReadSource::Held(Arc::from(&b"maps"[..]))),
                "inode" => Ok(ReadSource::File { id: file, path: "/data/w".into() }),
                "dir" => Err(EISDIR),
                "null" | "sdk" => Ok(ReadSource::Empty),
                "random" => Ok(ReadSource::Random),
                "zero" | "full" => Ok(ReadSource::Zero),
                "stdout" | "stderr" => Err(EBADF),
                _ => Err(ESPIPE),
            };
            assert_eq!(kind.read_source(false), want, "read of {name}");
            let positioned = if *name == "stdin" { Err(ESPIPE) } else { want };
            assert_eq!(kind.read_source(true), positioned, "positioned read of {name}");
        }
    }

    #[test]
    fn every_kind_writes_to_its_target_or_gives_ebadf() {
        let (fs, kinds) = every_kind();
        let file = fs.lookup_abs("/data/w").unwrap();
        for (name, kind) in &kinds {
            let want = match *name {
                "stdout" => Ok(WriteTarget::Output(Stream::Stdout)),
                "stderr" => Ok(WriteTarget::Output(Stream::Stderr)),
                "null" | "random" | "zero" => Ok(WriteTarget::Discard),
                "full" => Err(ENOSPC),
                "sdk" => Ok(WriteTarget::SdkMessages),
                "inode" => Ok(WriteTarget::File { id: file, path: "/data/w".into() }),
                _ => Err(EBADF),
            };
            assert_eq!(kind.write_target(), want, "write to {name}");
        }
    }

    #[test]
    fn every_kind_seeks_or_gives_its_errno() {
        let (fs, kinds) = every_kind();
        for (name, kind) in kinds {
            let at = |offset| {
                let mut f = OpenFile::new(kind.clone(), 0);
                f.offset = offset;
                f
            };
            let mut f = at(3);
            let end = f.seek(1, 2, &fs);
            let want_end = match name {
                "regular" => Ok(5),
                "inode" => Ok(6),
                "null" | "random" | "zero" | "full" | "sdk" => Ok(0),
                "dir" => Err(EINVAL),
                _ => Err(ESPIPE),
            };
            assert_eq!(end, want_end, "SEEK_END + 1 of {name}");
            if let Ok(n) = want_end {
                assert_eq!(f.offset, if n == 0 { 3 } else { n }, "position of {name} after SEEK_END");
            }
            let mut f = at(3);
            let rewind = f.seek(0, 0, &fs);
            match name {
                "regular" | "inode" | "null" | "random" | "zero" | "full" | "sdk" => {
                    assert_eq!(rewind, Ok(0), "rewind of {name}")
                }
                "dir" => {
                    assert_eq!(rewind, Ok(0), "rewind of {name}");
                    assert_eq!(
                        (f.offset, &f.kind),
                        (0, &FileKind::Dir { id: fs.lookup_abs("/data").unwrap(), after: None, pid: None })
                    );
                }
                _ => assert_eq!(rewind, Err(ESPIPE), "rewind of {name}"),
            }
            if matches!(name, "regular" | "inode") {
                assert_eq!(at(3).seek(-1i64 as u64, 1, &fs), Ok(2), "SEEK_CUR - 1 of {name}");
                assert_eq!(at(3).seek(-4i64 as u64, 1, &fs), Err(EINVAL), "SEEK_CUR before 0 of {name}");
                assert_eq!(at(0).seek(2, 3, &fs), Ok(2), "SEEK_DATA of {name}");
                assert_eq!(at(0).seek(2, 4, &fs), Ok(if name == "inode" { 5 } else { 4 }), "SEEK_HOLE of {name}");
                assert_eq!(at(0).seek(9, 3, &fs), Err(ENXIO), "SEEK_DATA past the end of {name}");
                assert_eq!(at(0).seek(0, 5, &fs), Err(EINVAL), "bad whence of {name}");
            }
        }
    }

    #[test]
    fn every_kind_has_its_sync_truncate_and_allocate_targets() {
        let (fs, kinds) = every_kind();
        let file = fs.lookup_abs("/data/w").unwrap();
        let dir = fs.lookup_abs("/data").unwrap();
        for (name, kind) in kinds {
            let sync = match name {
                "inode" => Ok((Some(file), "/data/w".to_string())),
                "dir" => Ok((Some(dir), "/data".to_string())),
                "regular" => Ok((None, "/proc/self/maps".to_string())),
                _ => Err(EINVAL),
            };
            assert_eq!(OpenFile::new(kind.clone(), 0).sync_target(&fs), sync, "sync of {name}");
            assert_eq!(OpenFile::new(kind.clone(), O_PATH).sync_target(&fs), Err(EBADF), "sync of {name} by O_PATH");
            let range = match name {
                "inode" | "regular" => Ok(()),
                "stdin" | "stdout" | "stderr" | "fifo" => Err(ESPIPE),
                _ => Err(EINVAL),
            };
            assert_eq!(kind.sync_range(), range, "sync_file_range of {name}");
            let truncate = if name == "inode" { Ok((file, "/data/w".to_string())) } else { Err(EINVAL) };
            assert_eq!(OpenFile::new(kind.clone(), O_RDWR).truncate_target(), truncate, "ftruncate of {name}");
            assert_eq!(OpenFile::new(kind.clone(), 0).truncate_target(), Err(EINVAL), "ftruncate of read-only {name}");
            let allocate = match name {
                "inode" => Ok((file, "/data/w".to_string())),
                "dir" => Err(EISDIR),
                "stdin" | "stdout" | "stderr" | "fifo" => Err(ESPIPE),
                _ => Err(ENODEV),
            };
            assert_eq!(kind.allocate_target(&fs), allocate, "fallocate of {name}");
        }
        for path in ["/data/f", "/proc/self/exe"] {
            let other = FileKind::Inode { id: fs.lookup_abs(path).unwrap(), path: path.into() };
            assert_eq!(other.allocate_target(&fs), Err(ENODEV), "fallocate of {path}, not a regular file");
        }
    }

    #[test]
    fn only_a_directory_has_a_listing_and_keeps_its_last_name() {
        let (fs, kinds) = every_kind();
        let dir = fs.lookup_abs("/data").unwrap();
        for (name, kind) in kinds {
            let mut f = OpenFile::new(kind, 0);
            if name == "dir" {
                assert_eq!(f.kind.listing(), Some((dir, Some("f"))));
                f.listed(4, Some("w".into()));
                assert_eq!((f.offset, f.kind.listing()), (4, Some((dir, Some("w")))));
            } else {
                assert_eq!(f.kind.listing(), None, "listing of {name}");
                let before = f.kind.clone();
                f.listed(4, Some("w".into()));
                assert_eq!((f.offset, &f.kind), (4, &before), "{name} after a listing");
            }
        }
    }

    #[test]
    fn only_files_map_with_their_bytes_and_inode_number() {
        let (fs, kinds) = every_kind();
        let file = fs.lookup_abs("/data/w").unwrap();
        for (name, kind) in kinds {
            let want = match name {
                "regular" => Ok(("/proc/self/maps".to_string(), Arc::from(&b"maps"[..]), fs.stat(file).ino)),
                "inode" => Ok(("/data/w".to_string(), Arc::from(&b"hello"[..]), fs.stat(file).ino)),
                _ => Err(ENODEV),
            };
            assert_eq!(kind.mmap_source(&fs), want, "mmap of {name}");
        }
        let dev = fs.lookup_abs("/dev/null").unwrap();
        let null = FileKind::Inode { id: dev, path: "/dev/null".into() };
        assert_eq!(null.mmap_source(&fs), Err(ENODEV), "mmap of an inode without contents");
    }

    #[test]
    fn every_kind_names_its_socket_and_epoll_and_whether_epoll_may_watch_it() {
        let (_, kinds) = every_kind();
        for (name, kind) in kinds {
            assert_eq!(kind.socket(), (name == "socket").then_some(1), "socket of {name}");
            assert_eq!(kind.epoll(), (name == "epoll").then_some(4), "epoll of {name}");
            let watch = match name {
                "inode" | "dir" | "regular" => Err(EPERM),
                _ => Ok(()),
            };
            assert_eq!(kind.watchable_by(5), watch, "epoll watching {name}");
            let own = if name == "epoll" { Err(EINVAL) } else { watch };
            assert_eq!(kind.watchable_by(4), own, "epoll 4 watching {name}");
        }
    }

    #[test]
    fn every_kind_has_its_readiness() {
        let (_, kinds) = every_kind();
        let (net, fds) = (Net::default(), FdTable::default());
        for (name, kind) in kinds {
            let want = match name {
                "stdin" => EPOLLIN,
                "stdout" | "stderr" => EPOLLOUT,
                // The objects are not in `net`: an error and a hang-up, each end keeping its own.
                "socket" | "eventfd" | "epoll" => EPOLLERR | EPOLLHUP,
                "pipe" | "fifo" => EPOLLHUP,
                _ => EPOLLIN | EPOLLOUT,
            };
            assert_eq!(OpenFile::new(kind.clone(), 0).readiness(&net, &fds), (want, 0), "readiness of {name}");
        }
        let mut stdin = OpenFile::new(FileKind::Stdin(Arc::from(&b"in"[..])), 0);
        stdin.offset = 2;
        assert_eq!(stdin.readiness(&net, &fds), (EPOLLIN | EPOLLHUP, 0), "stdin read to the end");
        let mut net = Net::default();
        let id = net.add(ObjKind::Pipe {
            buf: b"x".iter().copied().collect(),
            readers: 1,
            writers: 1,
            cap: crate::net::PIPE_SIZE,
        });
        let end = |write| OpenFile::new(FileKind::Pipe { obj: id, write }, 0).readiness(&net, &fds);
        assert_eq!(net.readiness(id, &fds), EPOLLIN | EPOLLOUT);
        assert_eq!(end(false), (EPOLLIN, net.gen(id)), "the read end of a pipe holding a byte");
        assert_eq!(end(true), (EPOLLOUT, net.gen(id)), "its write end");
        // A FIFO opened for reading, without blocking, before any writer: no hang-up until one
        // comes; once one came and went, a hang-up; its reader and writer both, never.
        let obj = net.fifo_pipe(7);
        net.join_pipe(7, obj, true, false);
        let quiet = net.fifos[&7].opened[1];
        let fifo = |net: &Net, read, write, quiet| {
            OpenFile::new(FileKind::Fifo { id: 7, obj, read, write, quiet }, 0).readiness(net, &fds).0
        };
        assert_eq!(fifo(&net, true, false, quiet), 0, "no writer came yet");
        assert_eq!(fifo(&net, true, false, 0), EPOLLHUP, "opened while a writer was there, which left");
        net.join_pipe(7, obj, false, true);
        net.leave_pipe(obj, false, true);
        assert_eq!(fifo(&net, true, false, quiet), EPOLLHUP, "a writer came and left");
        net.join_pipe(7, obj, true, true);
        assert_eq!(fifo(&net, true, true, 0), EPOLLOUT, "open for both: nothing to read, room to write");
    }
}
