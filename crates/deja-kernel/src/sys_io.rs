//! File and fd syscalls: `read`/`write` and friends, `openat`, the `stat` family, `lseek`,
//! `fcntl`, `dup*`, `ioctl`, `poll`, `access`, `getcwd`, `readlink`, `getdents64`.
//!
//! Paths resolve in [`crate::fs`]; declared input files and the executable are read-only
//! (`EROFS` when opened for writing), `/proc/self/maps` gives `EACCES`. The current directory is
//! always `/`. Namespace and sync calls are in [`crate::sys_fs`].

use std::sync::Arc;

use crate::errno::*;
use crate::fd::*;
use crate::fs::{Kind, Walked, ROOT};
use crate::kernel::{Kernel, SysResult, MAX_IO};
use crate::layout::USER_END;
use crate::vm::Access;
use crate::{Memory, Stream};

/// Longest path accepted (`PATH_MAX`).
pub(crate) const PATH_MAX: usize = 4096;
/// `AT_EMPTY_PATH`.
pub(crate) const AT_EMPTY_PATH: u64 = 0x1000;
/// `AT_SYMLINK_NOFOLLOW`.
pub(crate) const AT_SYMLINK_NOFOLLOW: u64 = 0x100;
/// `AT_NO_AUTOMOUNT`.
const AT_NO_AUTOMOUNT: u64 = 0x800;
/// `AT_EACCESS`.
const AT_EACCESS: u64 = 0x200;
/// `AT_STATX_SYNC_TYPE`.
const AT_STATX_SYNC_TYPE: u64 = 0x6000;

/// Linux's `access_ok`: the range lies in the user half.
pub(crate) fn access_ok(addr: u64, len: u64) -> Result<(), i32> {
    match addr.checked_add(len) {
        Some(end) if end <= USER_END => Ok(()),
        _ => Err(EFAULT),
    }
}

/// Where a `*at` path resolves.
pub(crate) enum Target {
    /// A path, walked.
    Path(Walked),
    /// The file open on this fd (`AT_EMPTY_PATH`).
    Fd(i32),
}

impl Kernel {
    pub(crate) fn nofile(&self) -> u64 {
        self.rlimits[7].0.min(1 << 20)
    }

    /// Reads a path argument and walks it from `dirfd` (`follow`: the last symlink too).
    pub(crate) fn resolve(
        &mut self,
        mem: &mut dyn Memory,
        dirfd: u64,
        path: u64,
        flags: u64,
        follow: bool,
    ) -> Result<Target, i32> {
        let empty_ok = flags & AT_EMPTY_PATH != 0;
        if path == 0 && empty_ok {
            return Ok(Target::Fd(dirfd as i32));
        }
        let p = self.vm.read_cstr(mem, path, PATH_MAX)?;
        if p.is_empty() {
            if empty_ok {
                return Ok(Target::Fd(dirfd as i32));
            }
            return Err(ENOENT);
        }
        let start = if p[0] == b'/' || dirfd as i32 == -100 {
            ROOT
        } else {
            match &self.fds.get(dirfd as i32)?.kind {
                FileKind::Dir { id, .. } => *id,
                _ => return Err(ENOTDIR),
            }
        };
        let w = self.fs.walk(start, &p, follow)?;
        if !self.faults.previous.is_empty() {
            let abs = match (&w.name, w.id) {
                (Some(n), _) => Some(self.fs.path_in(w.parent, n)),
                (None, Some(id)) => self.fs.dir_path(id),
                (None, None) => None,
            };
            if let Some(abs) = abs {
                self.faults.observe(&abs);
            }
        }
        Ok(Target::Path(w))
    }

    /// The inode a resolved path names (`ENOENT`, or `ENOTDIR` for a trailing `/` on a
    /// non-directory).
    pub(crate) fn target_id(&self, w: &Walked) -> Result<u64, i32> {
        let id = w.id.ok_or(ENOENT)?;
        if w.trailing && !self.fs.get(id).is_some_and(|i| i.is_dir()) {
            return Err(ENOTDIR);
        }
        Ok(id)
    }

    fn stat_of_fd(&self, fd: i32) -> Result<Stat, i32> {
        if fd == -100 {
            return Ok(self.fs.stat(ROOT));
        }
        let f = self.fds.get(fd)?;
        Ok(match &f.kind {
            FileKind::Stdin(_) | FileKind::Stdout | FileKind::Stderr => {
                let ino = 100 + u64::from(!matches!(f.kind, FileKind::Stdin(_)));
                let t = FILE_TIME_S * 1_000_000_000;
                Stat { dev: 0xd, ino, mode: S_IFIFO | 0o600, nlink: 1, size: 0, rdev: 0, times: [t; 3] }
            }
            FileKind::Regular { stat, .. } => *stat,
            FileKind::Inode { id, .. } | FileKind::Dir { id, .. } => self.fs.stat(*id),
            FileKind::DevNull => self.fs.stat(self.fs.lookup_abs("/dev/null").unwrap_or(ROOT)),
            FileKind::Random(m) => {
                let p = if *m == 8 { "/dev/random" } else { "/dev/urandom" };
                self.fs.stat(self.fs.lookup_abs(p).unwrap_or(ROOT))
            }
            FileKind::Socket(o) | FileKind::Pipe { obj: o, .. } | FileKind::EventFd(o) | FileKind::Epoll(o) => {
                let mode = match f.kind {
                    FileKind::Socket(_) => 0o140000 | 0o777,
                    FileKind::Pipe { .. } => S_IFIFO | 0o600,
                    _ => 0o600,
                };
                let t = FILE_TIME_S * 1_000_000_000;
                Stat { dev: 0x8, ino: 1000 + *o, mode, nlink: 1, size: 0, rdev: 0, times: [t; 3] }
            }
        })
    }

    fn stat_of(&self, t: &Target) -> Result<Stat, i32> {
        match t {
            Target::Fd(fd) => self.stat_of_fd(*fd),
            Target::Path(w) => Ok(self.fs.stat(self.target_id(w)?)),
        }
    }

    fn write_stat(&self, mem: &mut dyn Memory, buf: u64, st: &Stat) -> Result<(), i32> {
        let mut b = [0u8; 144];
        let mut put = |o: usize, v: u64, n: usize| b[o..o + n].copy_from_slice(&v.to_le_bytes()[..n]);
        put(0, st.dev, 8);
        put(8, st.ino, 8);
        put(16, st.nlink, 8);
        put(24, u64::from(st.mode), 4);
        put(28, crate::stack::GUEST_UID, 4);
        put(32, crate::stack::GUEST_UID, 4);
        put(40, st.rdev, 8);
        put(48, st.size, 8);
        put(56, 4096, 8);
        put(64, st.size.div_ceil(4096) * 8, 8);
        for (i, o) in [72, 88, 104].into_iter().enumerate() {
            put(o, st.times[i] / 1_000_000_000, 8);
            put(o + 8, st.times[i] % 1_000_000_000, 8);
        }
        self.vm.copy_out(mem, buf, &b)
    }

    pub(crate) fn sys_fstat(&mut self, mem: &mut dyn Memory, fd: u64, buf: u64) -> SysResult {
        let st = self.stat_of_fd(fd as i32)?;
        self.write_stat(mem, buf, &st)?;
        Ok(0)
    }

    pub(crate) fn sys_fstatat(
        &mut self,
        mem: &mut dyn Memory,
        dirfd: u64,
        path: u64,
        buf: u64,
        flags: u64,
    ) -> SysResult {
        if flags & !(AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH | AT_NO_AUTOMOUNT) != 0 {
            return Err(EINVAL.into());
        }
        let t = self.resolve(mem, dirfd, path, flags, flags & AT_SYMLINK_NOFOLLOW == 0)?;
        let st = self.stat_of(&t)?;
        self.write_stat(mem, buf, &st)?;
        Ok(0)
    }

    pub(crate) fn sys_statx(
        &mut self,
        mem: &mut dyn Memory,
        dirfd: u64,
        path: u64,
        flags: u64,
        mask: u64,
        buf: u64,
    ) -> SysResult {
        let ok = AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH | AT_NO_AUTOMOUNT | AT_STATX_SYNC_TYPE;
        if flags & !ok != 0 || flags & AT_STATX_SYNC_TYPE == AT_STATX_SYNC_TYPE {
            return Err(EINVAL.into());
        }
        if mask & 0x8000_0000 != 0 {
            return Err(EINVAL.into());
        }
        let t = self.resolve(mem, dirfd, path, flags, flags & AT_SYMLINK_NOFOLLOW == 0)?;
        let st = self.stat_of(&t)?;
        let mut b = [0u8; 256];
        let mut put = |o: usize, v: u64, n: usize| b[o..o + n].copy_from_slice(&v.to_le_bytes()[..n]);
        put(0, 0x7ff, 4); // STATX_BASIC_STATS
        put(4, 4096, 4);
        put(16, st.nlink, 4);
        put(20, crate::stack::GUEST_UID, 4);
        put(24, crate::stack::GUEST_UID, 4);
        put(28, u64::from(st.mode), 2);
        put(32, st.ino, 8);
        put(40, st.size, 8);
        put(48, st.size.div_ceil(4096) * 8, 8);
        // atime, btime (= ctime), ctime, mtime.
        for (o, t) in [(64, st.times[0]), (80, st.times[2]), (96, st.times[2]), (112, st.times[1])] {
            put(o, t / 1_000_000_000, 8);
            put(o + 8, t % 1_000_000_000, 4);
        }
        put(128, st.rdev >> 8, 4);
        put(132, st.rdev & 0xff, 4);
        put(136, st.dev >> 8, 4);
        put(140, st.dev & 0xff, 4);
        self.vm.copy_out(mem, buf, &b)?;
        Ok(0)
    }

    pub(crate) fn sys_openat(
        &mut self,
        mem: &mut dyn Memory,
        dirfd: u64,
        path: u64,
        flags: u64,
        mode: u64,
    ) -> SysResult {
        let flags = flags as u32;
        let acc = flags & O_ACCMODE;
        let excl = flags & (O_CREAT | O_EXCL) == O_CREAT | O_EXCL;
        let follow = flags & O_NOFOLLOW == 0 && !excl;
        let w = match self.resolve(mem, dirfd, path, 0, follow)? {
            Target::Path(w) => w,
            Target::Fd(_) => return Err(ENOENT.into()),
        };
        if acc == O_ACCMODE {
            return Err(EINVAL.into());
        }
        if flags & O_TMPFILE == O_TMPFILE {
            return Err(EOPNOTSUPP.into());
        }
        let limit = self.nofile();
        if !self.fds.has_free(limit) {
            return Err(EMFILE.into());
        }
        let now = self.clock.realtime_ns();
        let writing = acc != 0 || flags & O_TRUNC != 0;
        let id = match w.id {
            None => {
                if flags & O_CREAT == 0 {
                    return Err(ENOENT.into());
                }
                if w.trailing {
                    return Err(EISDIR.into());
                }
                let Some(name) = &w.name else { return Err(ENOENT.into()) };
                let p = self.fs.path_in(w.parent, name);
                self.io_point(crate::faults::IoOp::Create, &p, None, (0, 0))?;
                let perm = (mode as u32) & 0o7777 & !self.umask;
                self.fs.create_file(w.parent, name, perm, now)?
            }
            Some(id) => {
                if excl {
                    return Err(EEXIST.into());
                }
                let node = self.fs.get(id).ok_or(ENOENT)?;
                let is_dir = node.is_dir();
                let link = matches!(node.kind, Kind::Symlink(_) | Kind::ExeLink);
                if link && flags & O_PATH == 0 {
                    return Err(ELOOP.into());
                }
                if is_dir && (writing || flags & O_CREAT != 0) {
                    return Err(EISDIR.into());
                }
                if (w.trailing || flags & O_DIRECTORY != 0) && !is_dir {
                    return Err(ENOTDIR.into());
                }
                match node.kind {
                    Kind::File(_) | Kind::Static(_) if writing && node.readonly => return Err(EROFS.into()),
                    Kind::ProcMaps if writing => return Err(EACCES.into()),
                    _ => {}
                }
                if flags & O_TRUNC != 0
                    && matches!(node.kind, Kind::File(_))
                    && flags & O_PATH == 0
                    && self.fs.size(id) > 0
                {
                    let p = match &w.name {
                        Some(n) => self.fs.path_in(w.parent, n),
                        None => self.fs.dir_path(id).unwrap_or_default(),
                    };
                    self.io_point(crate::faults::IoOp::Truncate, &p, None, (0, 0))?;
                    self.fs.set_size(id, 0, now)?;
                }
                id
            }
        };
        let node = self.fs.get(id).ok_or(ENOENT)?;
        let opened_path = match &w.name {
            Some(n) => self.fs.path_in(w.parent, n),
            None => self.fs.dir_path(id).unwrap_or_default(),
        };
        let kind = match &node.kind {
            Kind::Dir(_) => FileKind::Dir { id, after: None },
            Kind::ProcMaps => {
                let data: Arc<[u8]> = Arc::from(self.proc_maps().into_bytes());
                let mut stat = self.fs.stat(id);
                stat.size = 0;
                FileKind::Regular { stat, path: opened_path, data }
            }
            Kind::DevNull => FileKind::DevNull,
            Kind::Random(m) => FileKind::Random(*m),
            Kind::ExeLink => FileKind::Regular { path: opened_path, data: Arc::from(&[][..]), stat: self.fs.stat(id) },
            Kind::Static(_) if opened_path == PROC_EXE => FileKind::Inode { id, path: self.fs.exe_path().to_string() },
            _ => FileKind::Inode { id, path: opened_path },
        };
        if matches!(kind, FileKind::Dir { .. } | FileKind::Inode { .. }) {
            self.fs.opened(id);
        }
        let keep = !(O_CREAT | O_EXCL | O_TRUNC | O_CLOEXEC | 0o400);
        let file = OpenFile::new(kind, (flags & keep) | O_LARGEFILE);
        Ok(self.fds.install(file, 0, limit, flags & O_CLOEXEC != 0)? as u64)
    }

    /// Releases what a dropped description held.
    pub(crate) fn dropped(&mut self, f: Option<OpenFile>) {
        let Some(f) = f else { return };
        if let FileKind::Inode { id, .. } | FileKind::Dir { id, .. } = f.kind {
            self.fs.closed(id);
        } else if let Some((obj, end)) = object_of(&f.kind) {
            self.net.release(obj, end);
        }
    }

    pub(crate) fn sys_close(&mut self, fd: u64) -> SysResult {
        let f = self.fds.close(fd as i32)?;
        self.dropped(f);
        Ok(0)
    }

    /// Reads up to `count` bytes from `fd` into guest memory at `buf`, at `pos` (or the file
    /// offset).
    fn do_read(&mut self, mem: &mut dyn Memory, fd: u64, buf: u64, count: u64, pos: Option<u64>) -> Result<u64, i32> {
        let f = self.fds.get(fd as i32)?;
        if !f.readable() {
            return Err(EBADF);
        }
        access_ok(buf, count)?;
        let count = count.min(MAX_IO);
        let data = match &f.kind {
            FileKind::Stdin(d) => {
                if pos.is_some() {
                    return Err(ESPIPE);
                }
                d.clone()
            }
            FileKind::Regular { data, .. } => data.clone(),
            FileKind::Inode { id, path } => {
                let (id, path, off) = (*id, path.clone(), pos.unwrap_or(f.offset));
                if self.fs.contents(id).is_none() {
                    return Err(EINVAL);
                }
                self.io_point(crate::faults::IoOp::Read, &path, Some((off, off.saturating_add(count.max(1)))), (0, 0))?;
                let Some(c) = self.fs.contents(id) else { return Err(EINVAL) };
                let avail = (c.len() as u64).saturating_sub(off);
                let n = count.min(avail);
                if n > 0 {
                    self.vm.copy_out(mem, buf, &c[off as usize..(off + n) as usize])?;
                }
                if pos.is_none() {
                    self.fds.get_mut(fd as i32)?.offset = off + n;
                }
                return Ok(n);
            }
            FileKind::Dir { .. } => return Err(EISDIR),
            FileKind::DevNull => return Ok(0),
            FileKind::Random(_) => {
                self.vm.check(buf, count, Access::Write)?;
                let mut b = vec![0u8; count as usize];
                self.rng.fill(&mut b);
                self.vm.copy_out(mem, buf, &b)?;
                return Ok(count);
            }
            FileKind::Stdout | FileKind::Stderr => return Err(EBADF),
            FileKind::Socket(_) | FileKind::Pipe { .. } | FileKind::EventFd(_) | FileKind::Epoll(_) => {
                return Err(ESPIPE)
            }
        };
        let off = pos.unwrap_or(f.offset);
        let avail = (data.len() as u64).saturating_sub(off);
        let n = count.min(avail);
        if n > 0 {
            self.vm.copy_out(mem, buf, &data[off as usize..(off + n) as usize])?;
        }
        if pos.is_none() {
            self.fds.get_mut(fd as i32)?.offset = off + n;
        }
        Ok(n)
    }

    /// Writes `data` to `fd`, at `pos` or the file offset.
    fn do_write(&mut self, fd: u64, data: &[u8], pos: Option<u64>) -> Result<u64, i32> {
        let f = self.fds.get(fd as i32)?;
        if !f.writable() {
            return Err(EBADF);
        }
        match &f.kind {
            FileKind::Stdout => self.emit(Stream::Stdout, data),
            FileKind::Stderr => self.emit(Stream::Stderr, data),
            FileKind::DevNull | FileKind::Random(_) => {}
            FileKind::Inode { id, path } => {
                let (id, path, flags, offset) = (*id, path.clone(), f.flags, f.offset);
                return self.file_write(fd, id, &path, flags, data, pos.unwrap_or(offset), pos.is_none());
            }
            _ => return Err(EBADF),
        }
        Ok(data.len() as u64)
    }

    pub(crate) fn sys_read(&mut self, mem: &mut dyn Memory, fd: u64, buf: u64, count: u64) -> SysResult {
        if self.is_object(fd as i32) {
            access_ok(buf, count)?;
            return self.obj_recv(mem, fd as i32, &[(buf, count)], 0).map(|r| r.0);
        }
        Ok(self.do_read(mem, fd, buf, count, None)?)
    }

    pub(crate) fn sys_pread(&mut self, mem: &mut dyn Memory, fd: u64, buf: u64, count: u64, off: u64) -> SysResult {
        let f = self.fds.get(fd as i32)?;
        if matches!(f.kind, FileKind::Stdin(_) | FileKind::Stdout | FileKind::Stderr) || object_of(&f.kind).is_some() {
            return Err(ESPIPE.into());
        }
        if (off as i64) < 0 {
            return Err(EINVAL.into());
        }
        Ok(self.do_read(mem, fd, buf, count, Some(off))?)
    }

    pub(crate) fn sys_write(&mut self, mem: &mut dyn Memory, fd: u64, buf: u64, count: u64) -> SysResult {
        let f = self.fds.get(fd as i32)?;
        if !f.writable() {
            return Err(EBADF.into());
        }
        access_ok(buf, count)?;
        let count = count.min(MAX_IO);
        self.vm.check(buf, count, Access::Read)?;
        let mut data = vec![0u8; count as usize];
        self.vm.copy_in(mem, buf, &mut data)?;
        if self.is_object(fd as i32) {
            return self.obj_send(fd as i32, &data, 0, None);
        }
        Ok(self.do_write(fd, &data, None)?)
    }

    pub(crate) fn sys_pwrite(&mut self, mem: &mut dyn Memory, fd: u64, buf: u64, count: u64, off: u64) -> SysResult {
        let f = self.fds.get(fd as i32)?;
        if matches!(f.kind, FileKind::Stdin(_) | FileKind::Stdout | FileKind::Stderr) || object_of(&f.kind).is_some() {
            return Err(ESPIPE.into());
        }
        if (off as i64) < 0 {
            return Err(EINVAL.into());
        }
        if !f.writable() {
            return Err(EBADF.into());
        }
        access_ok(buf, count)?;
        let count = count.min(MAX_IO);
        self.vm.check(buf, count, Access::Read)?;
        let mut data = vec![0u8; count as usize];
        self.vm.copy_in(mem, buf, &mut data)?;
        Ok(self.do_write(fd, &data, Some(off))?)
    }

    /// Reads and validates an iovec array.
    pub(crate) fn iovecs(&self, mem: &mut dyn Memory, iov: u64, cnt: u64) -> Result<Vec<(u64, u64)>, i32> {
        let cnt = cnt as i32;
        if !(0..=1024).contains(&cnt) {
            return Err(EINVAL);
        }
        let mut raw = vec![0u8; cnt as usize * 16];
        self.vm.copy_in(mem, iov, &mut raw)?;
        let mut total = 0u64;
        let mut out = Vec::with_capacity(cnt as usize);
        for c in raw.chunks_exact(16) {
            let base = u64::from_le_bytes(c[..8].try_into().unwrap_or_default());
            let len = u64::from_le_bytes(c[8..].try_into().unwrap_or_default());
            total = total.checked_add(len).ok_or(EINVAL)?;
            if total > i64::MAX as u64 {
                return Err(EINVAL);
            }
            out.push((base, len));
        }
        Ok(out)
    }

    pub(crate) fn sys_readv(&mut self, mem: &mut dyn Memory, fd: u64, iov: u64, cnt: u64) -> SysResult {
        let f = self.fds.get(fd as i32)?;
        if !f.readable() {
            return Err(EBADF.into());
        }
        let iovs = self.iovecs(mem, iov, cnt)?;
        if self.is_object(fd as i32) {
            return self.obj_recv(mem, fd as i32, &iovs, 0).map(|r| r.0);
        }
        let mut done = 0u64;
        for (base, len) in iovs {
            if len == 0 {
                continue;
            }
            match self.do_read(mem, fd, base, len.min(MAX_IO - done), None) {
                Ok(n) => {
                    done += n;
                    if n < len || done >= MAX_IO {
                        break;
                    }
                }
                Err(e) if done == 0 => return Err(e.into()),
                Err(_) => break,
            }
        }
        Ok(done)
    }

    pub(crate) fn sys_writev(&mut self, mem: &mut dyn Memory, fd: u64, iov: u64, cnt: u64) -> SysResult {
        let f = self.fds.get(fd as i32)?;
        if !f.writable() {
            return Err(EBADF.into());
        }
        let iovs = self.iovecs(mem, iov, cnt)?;
        let mut data = Vec::new();
        for (base, len) in iovs {
            let n = len.min(MAX_IO - data.len() as u64);
            let mut chunk = Vec::new();
            let copied = self.vm.check(base, n, Access::Read).and_then(|()| {
                chunk.resize(n as usize, 0);
                self.vm.copy_in(mem, base, &mut chunk)
            });
            if let Err(e) = copied {
                if data.is_empty() {
                    return Err(e.into());
                }
                break;
            }
            data.extend_from_slice(&chunk);
            if data.len() as u64 >= MAX_IO {
                break;
            }
        }
        if self.is_object(fd as i32) {
            return self.obj_send(fd as i32, &data, 0, None);
        }
        Ok(self.do_write(fd, &data, None)?)
    }

    pub(crate) fn sys_lseek(&mut self, fd: u64, off: u64, whence: u64) -> SysResult {
        let f = self.fds.get_mut(fd as i32)?;
        let size = match &f.kind {
            FileKind::Stdin(_) | FileKind::Stdout | FileKind::Stderr => return Err(ESPIPE.into()),
            FileKind::Socket(_) | FileKind::Pipe { .. } | FileKind::EventFd(_) | FileKind::Epoll(_) => {
                return Err(ESPIPE.into())
            }
            FileKind::DevNull | FileKind::Random(_) => return Ok(0),
            FileKind::Regular { data, .. } => data.len() as i64,
            FileKind::Inode { id, .. } => self.fs.size(*id) as i64,
            FileKind::Dir { .. } => {
                // Directories rewind only.
                if off != 0 || whence != 0 {
                    return Err(EINVAL.into());
                }
                f.offset = 0;
                if let FileKind::Dir { after, .. } = &mut f.kind {
                    *after = None;
                }
                return Ok(0);
            }
        };
        let off = off as i64;
        let cur = f.offset as i64;
        let new = match whence {
            0 => Some(off),
            1 => cur.checked_add(off),
            2 => size.checked_add(off),
            3 if off < size => Some(off),
            4 if off < size => Some(size),
            3 | 4 => return Err(ENXIO.into()),
            _ => return Err(EINVAL.into()),
        };
        match new {
            Some(n) if n >= 0 => {
                f.offset = n as u64;
                Ok(n as u64)
            }
            _ => Err(EINVAL.into()),
        }
    }

    pub(crate) fn sys_dup(&mut self, fd: u64) -> SysResult {
        let limit = self.nofile();
        Ok(self.fds.dup(fd as i32, 0, limit, false)? as u64)
    }

    pub(crate) fn sys_dup2(&mut self, old: u64, new: u64) -> SysResult {
        self.fds.get(old as i32)?;
        let new = new as i32;
        if new < 0 || new as u64 >= self.nofile() {
            return Err(EBADF.into());
        }
        if old as i32 == new {
            return Ok(new as u64);
        }
        let dropped = self.fds.dup_to(old as i32, new, false)?;
        self.dropped(dropped);
        Ok(new as u64)
    }

    pub(crate) fn sys_dup3(&mut self, old: u64, new: u64, flags: u64) -> SysResult {
        if flags & !u64::from(O_CLOEXEC) != 0 || old as i32 == new as i32 {
            return Err(EINVAL.into());
        }
        self.fds.get(old as i32)?;
        let new = new as i32;
        if new < 0 || new as u64 >= self.nofile() {
            return Err(EBADF.into());
        }
        let dropped = self.fds.dup_to(old as i32, new, flags != 0)?;
        self.dropped(dropped);
        Ok(new as u64)
    }

    pub(crate) fn sys_fcntl(&mut self, mem: &mut dyn Memory, fd: u64, cmd: u64, arg: u64) -> SysResult {
        let fd = fd as i32;
        let e = self.fds.entry(fd)?;
        match cmd as u32 {
            0 | 1030 => {
                let min = arg as i32;
                if min < 0 || min as u64 >= self.nofile() {
                    return Err(EINVAL.into());
                }
                let limit = self.nofile();
                Ok(self.fds.dup(fd, min, limit, cmd == 1030)? as u64)
            }
            1 => Ok(u64::from(e.cloexec)),
            2 => {
                self.fds.set_cloexec(fd, arg & 1 != 0)?;
                Ok(0)
            }
            3 => Ok(u64::from(self.fds.get(fd)?.flags)),
            4 => {
                let f = self.fds.get_mut(fd)?;
                let settable = O_APPEND | O_NONBLOCK;
                f.flags = (f.flags & !settable) | (arg as u32 & settable);
                Ok(0)
            }
            // F_GETLK, F_SETLK, F_SETLKW and the OFD forms: one process, no contention.
            5 | 6 | 7 | 36 | 37 | 38 => self.fcntl_lock(mem, fd, cmd as u32, arg),
            1032 => match self.fds.get(fd)?.kind {
                FileKind::Stdin(_) | FileKind::Stdout | FileKind::Stderr => Ok(65536),
                _ => Err(EBADF.into()),
            },
            _ => Err(EINVAL.into()),
        }
    }

    pub(crate) fn sys_ioctl(&mut self, mem: &mut dyn Memory, fd: u64, req: u64, arg: u64) -> SysResult {
        let fd = fd as i32;
        let f = self.fds.get(fd)?;
        match req as u32 {
            0x5421 => {
                // FIONBIO
                let on = self.vm.read_u32(mem, arg)? != 0;
                let f = self.fds.get_mut(fd)?;
                if on {
                    f.flags |= O_NONBLOCK;
                } else {
                    f.flags &= !O_NONBLOCK;
                }
                Ok(0)
            }
            0x5451 | 0x5450 => {
                self.fds.set_cloexec(fd, req as u32 == 0x5451)?;
                Ok(0)
            }
            0x541b => {
                // FIONREAD
                let n = match &f.kind {
                    FileKind::Stdin(d) => (d.len() as u64).saturating_sub(f.offset),
                    FileKind::Regular { data, .. } => (data.len() as u64).saturating_sub(f.offset),
                    FileKind::Inode { id, .. } => self.fs.size(*id).saturating_sub(f.offset),
                    FileKind::Stdout | FileKind::Stderr => 0,
                    k => match object_of(k).and_then(|(o, _)| self.net.objects.get(&o)).map(|o| &o.kind) {
                        Some(crate::net::ObjKind::Stream(st)) => st.rx.len() as u64,
                        Some(crate::net::ObjKind::Dgram(d)) => d.queue.front().map_or(0, |m| m.1.len() as u64),
                        Some(crate::net::ObjKind::Pipe { buf, .. }) => buf.len() as u64,
                        _ => return Err(ENOTTY.into()),
                    },
                };
                let n = n.min(i32::MAX as u64) as u32;
                self.vm.copy_out(mem, arg, &n.to_le_bytes())?;
                Ok(0)
            }
            _ => Err(ENOTTY.into()),
        }
    }

    pub(crate) fn sys_poll(&mut self, mem: &mut dyn Memory, fds: u64, nfds: u64, ms: u64) -> SysResult {
        self.do_poll(mem, fds, nfds, Kernel::ms_timeout(ms))
    }

    pub(crate) fn sys_ppoll(
        &mut self,
        mem: &mut dyn Memory,
        fds: u64,
        nfds: u64,
        tsp: u64,
        sigmask: u64,
        sigsetsize: u64,
    ) -> SysResult {
        if sigmask != 0 && sigsetsize != 8 {
            return Err(EINVAL.into());
        }
        let timeout = if tsp == 0 { None } else { Some(self.read_timespec(mem, tsp)?) };
        let r = self.do_poll(mem, fds, nfds, timeout)?;
        if r == 0 && tsp != 0 {
            self.vm.copy_out(mem, tsp, &[0u8; 16])?;
        }
        Ok(r)
    }

    pub(crate) fn sys_faccessat(
        &mut self,
        mem: &mut dyn Memory,
        dirfd: u64,
        path: u64,
        mode: u64,
        flags: u64,
    ) -> SysResult {
        if mode & !7 != 0 || flags & !(AT_EACCESS | AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH) != 0 {
            return Err(EINVAL.into());
        }
        let t = self.resolve(mem, dirfd, path, flags, flags & AT_SYMLINK_NOFOLLOW == 0)?;
        let st = self.stat_of(&t)?;
        let id = match &t {
            Target::Path(w) => w.id,
            Target::Fd(fd) => match self.fds.get(*fd).map(|f| &f.kind) {
                Ok(FileKind::Inode { id, .. } | FileKind::Dir { id, .. }) => Some(*id),
                _ => None,
            },
        };
        let node = id.and_then(|id| self.fs.get(id));
        if mode & 2 != 0 {
            match node {
                Some(n) if n.readonly && n.is_dir() => return Err(EACCES.into()),
                Some(n) if n.readonly && !matches!(n.kind, Kind::DevNull | Kind::Random(_)) => return Err(EROFS.into()),
                _ => {}
            }
        }
        if mode & 1 != 0 && st.mode & 0o111 == 0 {
            return Err(EACCES.into());
        }
        Ok(0)
    }

    pub(crate) fn sys_getcwd(&mut self, mem: &mut dyn Memory, buf: u64, size: u64) -> SysResult {
        if size < 2 {
            return Err(ERANGE.into());
        }
        self.vm.copy_out(mem, buf, b"/\0")?;
        Ok(2)
    }

    pub(crate) fn sys_readlinkat(
        &mut self,
        mem: &mut dyn Memory,
        dirfd: u64,
        path: u64,
        buf: u64,
        size: u64,
    ) -> SysResult {
        let size = size as i32;
        if size <= 0 {
            return Err(EINVAL.into());
        }
        let Target::Path(w) = self.resolve(mem, dirfd, path, 0, false)? else {
            return Err(ENOENT.into());
        };
        let id = self.target_id(&w)?;
        let target = match self.fs.get(id).map(|i| &i.kind) {
            Some(Kind::ExeLink) => self.fs.exe_path().as_bytes().to_vec(),
            Some(Kind::Symlink(t)) => t.as_bytes().to_vec(),
            _ => return Err(EINVAL.into()),
        };
        let n = target.len().min(size as usize);
        self.vm.copy_out(mem, buf, &target[..n])?;
        Ok(n as u64)
    }

    pub(crate) fn sys_getdents64(&mut self, mem: &mut dyn Memory, fd: u64, buf: u64, count: u64) -> SysResult {
        let f = self.fds.get(fd as i32)?;
        let FileKind::Dir { id, after } = &f.kind else { return Err(ENOTDIR.into()) };
        let entries = self.fs.list(*id);
        let count = count.min(MAX_IO) as usize;
        // Position: `.` and `..` by the offset (0, 1), then the names after `after`.
        let mut pos = f.offset;
        let start = match (pos, after) {
            (0 | 1, _) => pos as usize,
            (_, Some(a)) => 2 + entries[2..].iter().take_while(|e| e.0.as_str() <= a.as_str()).count(),
            (_, None) => entries.len().min(pos as usize),
        };
        let mut out = Vec::new();
        let mut last = after.clone();
        for (name, dtype, ino) in entries.iter().skip(start) {
            let reclen = (19 + name.len() + 1).div_ceil(8) * 8;
            if out.len() + reclen > count {
                if out.is_empty() {
                    return Err(EINVAL.into());
                }
                break;
            }
            let rec = out.len();
            pos += 1;
            out.extend_from_slice(&ino.to_le_bytes());
            out.extend_from_slice(&pos.to_le_bytes());
            out.extend_from_slice(&(reclen as u16).to_le_bytes());
            out.push(*dtype);
            out.extend_from_slice(name.as_bytes());
            out.resize(rec + reclen, 0);
            if pos > 2 {
                last = Some(name.clone());
            }
        }
        self.vm.copy_out(mem, buf, &out)?;
        let f = self.fds.get_mut(fd as i32)?;
        f.offset = pos;
        if let FileKind::Dir { after, .. } = &mut f.kind {
            *after = last;
        }
        Ok(out.len() as u64)
    }
}
