//! `/proc/self/fd`: the program's open fds as a directory of links, read from the fd table at
//! the moment of each call, as Linux's procfs reads it.
//!
//! - **Walks.** [`Kernel::resolve`] walks the program's paths with the fd table
//!   ([`crate::fs::Fs::walk_fds`]): in `/proc/self/fd` the name `N` of an open fd is a link
//!   that leads straight to what the fd has open (a file or directory even once it has no name
//!   left, a socket, a pipe...), not to a path; a closed fd's name does not exist (`ENOENT`).
//! - **Listing.** `getdents64` gives `.`, `..`, then the open fds in ascending order (type
//!   `DT_LNK`), from the table as it is at each call, as Linux's `proc_readfd_common` does: a
//!   call that runs out of room stops at the fd it could not give (position `fd + 2`) and the
//!   next call goes on from there, so a listing read in several calls while fds open and close
//!   lists each fd that stayed open once, none it had passed, and, once it has given the last
//!   fd, nothing more until it is rewound.
//! - **`readlink`** gives what Linux gives: the path of a file (the one it was opened by while
//!   it still names it, else its name now, else that path and ` (deleted)`) or of a directory,
//!   `/dev/null` and the other devices, the generated file's path, `pipe:[INO]` (for stdin,
//!   stdout and stderr too), `socket:[INO]`, `anon_inode:[eventfd]`, `anon_inode:[eventpoll]`,
//!   where INO is the `st_ino` the fd's `fstat` says. A directory removed while open reads
//!   `(deleted)` alone: deja no longer knows its name.
//! - **`lstat`** says a link of 64 bytes whose permission bits are the fd's access mode (`r-x`
//!   for reading, `-wx` for writing, both, none for `O_PATH`); `stat` says what `fstat` of the fd
//!   says.
//! - **`open`** opens what the link leads to again, as Linux does: a file or directory, a
//!   FIFO, a device or a generated file get a new description (their own offset and flags);
//!   a pipe end gets a new end of the same pipe for reading or for writing. Differences, all
//!   refused rather than approximated: a pipe for both (`O_RDWR`, which Linux allows) is
//!   `ENXIO`; stdin for reading is the same description again (its bytes are read once, as
//!   from a pipe), stdout and stderr for writing a new description of the same stream, and
//!   either the other way `ENXIO` (their other ends are outside the run). Sockets, eventfds and
//!   epoll instances are `ENXIO`, as on Linux. With `O_PATH` anything gives an `O_PATH` fd whose
//!   `fstat` is the fd's; with `O_PATH | O_NOFOLLOW` the link itself.
//!
//! `/dev/fd` links to `/proc/self/fd` and `/dev/stdin`, `/dev/stdout`, `/dev/stderr` to its
//! entries 0, 1 and 2, as on Linux. `/proc/<pid>/fd` is this table for the caller's own pid;
//! another process's is `EACCES` (see [`crate::task::procs`]).

use crate::prelude::*;
use alloc::sync::Arc;

use crate::abi::errno::*;
use crate::abi::file::*;
use crate::files::fd::*;
use crate::fs::{ino_of, FdTarget, Stat, FILE_TIME_S, PROC_FD};
use crate::kernel::{Kernel, SysResult, MAX_IO};
use crate::Memory;

/// `DT_LNK`.
const DT_LNK: u8 = 10;
/// `st_dev` of procfs files (as `/proc/self/maps`).
const PROC_DEV: u64 = 0x16;
/// The position of a listing of `/proc/self/fd` that went past every fd.
const LISTED: u64 = i32::MAX as u64 + 2;

/// `st_ino` (and `d_ino`) of the entry of `/proc/self/fd` for `fd`.
fn entry_ino(fd: i32) -> u64 {
    ino_of(&format!("{PROC_FD}/{fd}"))
}

/// What `/proc/self/fd/N` leads to in `fds` now: the inode of the tree an fd has open, or
/// something else; `None` for a closed fd.
pub(crate) fn fd_target(fds: &FdTable, fd: i32) -> Option<FdTarget> {
    let f = fds.get(fd).ok()?;
    Some(f.kind.inode().map_or(FdTarget::Other, FdTarget::Inode))
}

/// Appends one `linux_dirent64` record for `count` bytes at most: false when it does not fit.
pub(crate) fn push_dirent(out: &mut Vec<u8>, count: usize, ino: u64, off: u64, dtype: u8, name: &str) -> bool {
    let reclen = (19 + name.len() + 1).div_ceil(8) * 8;
    if out.len() + reclen > count {
        return false;
    }
    let rec = out.len();
    out.extend_from_slice(&ino.to_le_bytes());
    out.extend_from_slice(&off.to_le_bytes());
    out.extend_from_slice(&(reclen as u16).to_le_bytes());
    out.push(dtype);
    out.extend_from_slice(name.as_bytes());
    out.resize(rec + reclen, 0);
    true
}

/// What `readlink` of a `/proc/<pid>/fd/N` that has `kind` open gives (see the module's doc).
pub(crate) fn link_text(fs: &crate::fs::Fs, kind: &FileKind) -> String {
    let ino = || kind.stat(fs).ino;
    match kind {
        FileKind::Inode { id, path } => fs.path_now(*id, path),
        FileKind::Dir { id, .. } => fs.dir_path(*id).unwrap_or_else(|| "(deleted)".into()),
        FileKind::Fifo { id, .. } => fs.path_now(*id, ""),
        FileKind::Regular { path, .. } => path.clone(),
        FileKind::DevNull => "/dev/null".into(),
        FileKind::Random(8) => "/dev/random".into(),
        FileKind::Random(_) => "/dev/urandom".into(),
        FileKind::MemDev(5) => "/dev/zero".into(),
        FileKind::MemDev(crate::fs::SDK_OUTPUT_MINOR) => {
            fs.sdk_output().map_or_else(|| "(deleted)".into(), |id| fs.path_now(id, ""))
        }
        FileKind::MemDev(_) => "/dev/full".into(),
        FileKind::Stdin(_) | FileKind::Stdout | FileKind::Stderr | FileKind::Pipe { .. } => {
            format!("pipe:[{}]", ino())
        }
        FileKind::Socket(_) => format!("socket:[{}]", ino()),
        FileKind::EventFd(_) => "anon_inode:[eventfd]".into(),
        FileKind::Epoll(_) => "anon_inode:[eventpoll]".into(),
    }
}

impl Kernel {
    /// `lstat` of `/proc/self/fd/N`: the link, its permission bits the fd's access mode.
    pub(crate) fn fd_link_stat(&self, fd: i32) -> Result<Stat, i32> {
        let f = self.files.fds.get(fd).map_err(|_| ENOENT)?;
        let read = if f.readable() { 0o500 } else { 0 };
        let write = if f.writable() { 0o300 } else { 0 };
        let t = FILE_TIME_S * 1_000_000_000;
        Ok(Stat {
            dev: PROC_DEV,
            ino: entry_ino(fd),
            mode: S_IFLNK | read | write,
            nlink: 1,
            size: 64,
            rdev: 0,
            times: [t; 3],
        })
    }

    /// What `readlink("/proc/self/fd/N")` gives.
    pub(crate) fn fd_link_text(&self, fd: i32) -> Result<String, i32> {
        let f = self.files.fds.get(fd).map_err(|_| ENOENT)?;
        Ok(link_text(&self.files.fs, &f.kind))
    }

    /// `open` of `/proc/self/fd/N` followed to something that is not an inode of the tree
    /// (see the module's doc); `trailing`: the path ended with `/`.
    pub(crate) fn reopen_fd(&mut self, fd: i32, flags: u32, trailing: bool) -> SysResult {
        if trailing || flags & O_DIRECTORY != 0 {
            return Err(ENOTDIR.into());
        }
        let limit = self.nofile();
        if !self.files.fds.has_free(limit) {
            return Err(EMFILE.into());
        }
        let cloexec = flags & O_CLOEXEC != 0;
        let acc = flags & O_ACCMODE;
        let f = self.files.fds.get(fd).map_err(|_| ENOENT)?;
        let kind = if flags & O_PATH != 0 {
            let stat = f.kind.stat(&self.files.fs);
            FileKind::Regular { path: self.fd_link_text(fd)?, data: Arc::from(&[][..]), stat }
        } else {
            match &f.kind {
                FileKind::Stdin(_) if acc == 0 => return Ok(self.files.fds.dup(fd, 0, limit, cloexec)? as u64),
                FileKind::Stdout | FileKind::Stderr if acc == O_WRONLY => f.kind.clone(),
                FileKind::DevNull | FileKind::Random(_) | FileKind::MemDev(_) => f.kind.clone(),
                FileKind::Regular { .. } if acc == 0 => f.kind.clone(),
                FileKind::Regular { .. } => return Err(EACCES.into()),
                &FileKind::Pipe { obj, .. } if acc != O_RDWR => {
                    let write = acc == O_WRONLY;
                    self.net.reopen_pipe(obj, write);
                    FileKind::Pipe { obj, write }
                }
                _ => return Err(ENXIO.into()),
            }
        };
        let keep = !(O_CREAT | O_EXCL | O_TRUNC | O_CLOEXEC | 0o400);
        let file = OpenFile::new(kind, (flags & keep) | O_LARGEFILE);
        Ok(self.files.fds.install(file, 0, limit, cloexec)? as u64)
    }

    /// `open` of `/proc/self/fd/N` itself (`O_PATH | O_NOFOLLOW`): an `O_PATH` fd on the link.
    pub(crate) fn open_fd_link(&mut self, fd: i32, flags: u32) -> SysResult {
        let limit = self.nofile();
        let stat = self.fd_link_stat(fd)?;
        let kind = FileKind::Regular { path: format!("{PROC_FD}/{fd}"), data: Arc::from(&[][..]), stat };
        let file = OpenFile::new(kind, (flags & !(O_CREAT | O_EXCL | O_TRUNC | O_CLOEXEC | 0o400)) | O_LARGEFILE);
        Ok(self.files.fds.install(file, 0, limit, flags & O_CLOEXEC != 0)? as u64)
    }

    /// `getdents64` of the directory `dir` (`/proc/self/fd`) open on `fd`: `.`, `..`, then the
    /// fds open now from the position on.
    pub(crate) fn list_fds(&mut self, mem: &mut dyn Memory, fd: i32, dir: u64, buf: u64, count: u64) -> SysResult {
        let pos = self.files.fds.get(fd)?.offset;
        let count = count.min(MAX_IO) as usize;
        let mut out = Vec::new();
        let mut next = pos;
        let dots = self.files.fs.list(dir);
        let mut refused = false;
        for (i, (name, dtype, ino)) in dots.iter().enumerate().take(2).skip(pos.min(2) as usize) {
            if !push_dirent(&mut out, count, *ino, i as u64 + 1, *dtype, name) {
                refused = true;
                break;
            }
            next = i as u64 + 1;
        }
        if !refused {
            let from = i32::try_from(pos.saturating_sub(2)).unwrap_or(i32::MAX);
            // Past the last fd, the position is the end: fds opened later are listed after a
            // rewind, as on Linux.
            next = LISTED;
            for n in self.files.fds.open_fds(from) {
                if !push_dirent(&mut out, count, entry_ino(n), n as u64 + 3, DT_LNK, &n.to_string()) {
                    refused = true;
                    next = n as u64 + 2;
                    break;
                }
            }
        }
        if out.is_empty() && refused {
            return Err(EINVAL.into()); // not even one record fits
        }
        self.process.mappings.copy_out(mem, buf, &out)?;
        self.files.fds.get_mut(fd)?.listed(next, None);
        Ok(out.len() as u64)
    }
}
