//! File and fd syscalls: `read`/`write` and friends, `openat`, the `stat` family, `lseek`,
//! `fcntl`, `dup*`, `ioctl`, `poll`, `access`, `getcwd`, `readlink`, `getdents64`.
//!
//! The file system is read-only (see [`crate::fd`]): opening a declared file for writing gives
//! `EROFS`, an undeclared path `ENOENT`. The current directory is always `/`.

use std::sync::Arc;

use crate::errno::*;
use crate::fd::*;
use crate::kernel::{Kernel, PollTimeout, Stop, SysResult, MAX_IO};
use crate::layout::USER_END;
use crate::vm::Access;
use crate::{Memory, Stream};

/// Longest path accepted (`PATH_MAX`).
const PATH_MAX: usize = 4096;
/// `AT_EMPTY_PATH`.
const AT_EMPTY_PATH: u64 = 0x1000;
/// `AT_SYMLINK_NOFOLLOW`.
const AT_SYMLINK_NOFOLLOW: u64 = 0x100;
/// `AT_NO_AUTOMOUNT`.
const AT_NO_AUTOMOUNT: u64 = 0x800;
/// `AT_EACCESS`.
const AT_EACCESS: u64 = 0x200;
/// `AT_STATX_SYNC_TYPE`.
const AT_STATX_SYNC_TYPE: u64 = 0x6000;

/// `POLLIN`.
const POLLIN: u16 = 0x1;
/// `POLLOUT`.
const POLLOUT: u16 = 0x4;
/// `POLLHUP`.
const POLLHUP: u16 = 0x10;
/// `POLLNVAL`.
const POLLNVAL: u16 = 0x20;
/// `POLLRDNORM`.
const POLLRDNORM: u16 = 0x40;
/// `POLLWRNORM`.
const POLLWRNORM: u16 = 0x100;

/// Linux's `access_ok`: the range lies in the user half.
fn access_ok(addr: u64, len: u64) -> Result<(), i32> {
    match addr.checked_add(len) {
        Some(end) if end <= USER_END => Ok(()),
        _ => Err(EFAULT),
    }
}

/// Where a `*at` path resolves.
enum Target {
    /// An absolute normalized path (with a trailing-slash flag).
    Path(String, bool),
    /// The file open on this fd (`AT_EMPTY_PATH`).
    Fd(i32),
}

impl Kernel {
    fn nofile(&self) -> u64 {
        self.rlimits[7].0.min(1 << 20)
    }

    /// Reads a path argument and resolves it against `dirfd`.
    fn resolve(&self, mem: &mut dyn Memory, dirfd: u64, path: u64, flags: u64) -> Result<Target, i32> {
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
        let base = if p[0] == b'/' || dirfd as i32 == -100 {
            "/".to_string()
        } else {
            match &self.fds.get(dirfd as i32)?.kind {
                FileKind::Dir { path } => path.clone(),
                _ => return Err(ENOTDIR),
            }
        };
        let (abs, trailing) = normalize(&base, &p)?;
        Ok(Target::Path(abs, trailing))
    }

    fn stat_of_fd(&self, fd: i32) -> Result<Stat, i32> {
        if fd == -100 {
            return Ok(self.vfs.stat("/", &Node::Dir));
        }
        let f = self.fds.get(fd)?;
        Ok(match &f.kind {
            FileKind::Stdin(_) | FileKind::Stdout | FileKind::Stderr => {
                let ino = 100 + u64::from(!matches!(f.kind, FileKind::Stdin(_)));
                Stat { dev: 0xd, ino, mode: S_IFIFO | 0o600, nlink: 1, size: 0, rdev: 0 }
            }
            FileKind::Regular { stat, .. } => *stat,
            FileKind::Dir { path } => self.vfs.stat(path, &Node::Dir),
            FileKind::DevNull => self.vfs.stat("/dev/null", &Node::DevNull),
            FileKind::Random(m) => self.vfs.stat("/dev/urandom", &Node::Random(*m)),
        })
    }

    fn stat_of(&self, t: &Target, follow: bool) -> Result<Stat, i32> {
        match t {
            Target::Fd(fd) => self.stat_of_fd(*fd),
            Target::Path(p, trailing) => {
                let node = self.vfs.lookup(p, follow).ok_or(ENOENT)?;
                if *trailing && node != Node::Dir {
                    return Err(ENOTDIR);
                }
                let path = if follow && p == PROC_EXE { self.vfs.exe_path() } else { p };
                Ok(self.vfs.stat(path, &node))
            }
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
        for o in [72, 88, 104] {
            put(o, FILE_TIME_S, 8);
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
        let t = self.resolve(mem, dirfd, path, flags)?;
        let st = self.stat_of(&t, flags & AT_SYMLINK_NOFOLLOW == 0)?;
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
        let t = self.resolve(mem, dirfd, path, flags)?;
        let st = self.stat_of(&t, flags & AT_SYMLINK_NOFOLLOW == 0)?;
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
        for o in [64, 80, 96, 112] {
            put(o, FILE_TIME_S, 8);
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
        _mode: u64,
    ) -> SysResult {
        let flags = flags as u32;
        let (abs, trailing) = match self.resolve(mem, dirfd, path, 0)? {
            Target::Path(p, t) => (p, t),
            Target::Fd(_) => return Err(ENOENT.into()),
        };
        let acc = flags & O_ACCMODE;
        if acc == O_ACCMODE {
            return Err(EINVAL.into());
        }
        if flags & O_TMPFILE == O_TMPFILE {
            return Err(EROFS.into());
        }
        let follow = flags & O_NOFOLLOW == 0;
        let Some(node) = self.vfs.lookup(&abs, follow) else {
            if flags & O_CREAT != 0 {
                let parent = abs.rsplit_once('/').map_or("/", |(p, _)| if p.is_empty() { "/" } else { p });
                if self.vfs.lookup(parent, true) == Some(Node::Dir) {
                    return Err(EROFS.into());
                }
            }
            return Err(ENOENT.into());
        };
        if flags & (O_CREAT | O_EXCL) == O_CREAT | O_EXCL {
            return Err(EEXIST.into());
        }
        let is_dir = node == Node::Dir;
        if (trailing || flags & O_DIRECTORY != 0) && !is_dir {
            return Err(ENOTDIR.into());
        }
        let writing = acc != 0 || flags & O_TRUNC != 0;
        let kind = match node {
            Node::Dir => {
                if writing || flags & O_CREAT != 0 {
                    return Err(EISDIR.into());
                }
                FileKind::Dir { path: abs.clone() }
            }
            Node::ExeLink => {
                if flags & O_PATH == 0 {
                    return Err(ELOOP.into());
                }
                FileKind::Regular {
                    path: abs.clone(),
                    data: Arc::from(&[][..]),
                    stat: self.vfs.stat(&abs, &Node::ExeLink),
                }
            }
            Node::File(data) => {
                if writing {
                    return Err(EROFS.into());
                }
                let path = if abs == PROC_EXE { self.vfs.exe_path().to_string() } else { abs };
                let stat = self.vfs.stat(&path, &Node::File(data.clone()));
                FileKind::Regular { path, data, stat }
            }
            Node::ProcMaps => {
                if writing {
                    return Err(EACCES.into());
                }
                let data: Arc<[u8]> = Arc::from(self.proc_maps().into_bytes());
                FileKind::Regular { stat: self.vfs.stat(&abs, &Node::ProcMaps), path: abs, data }
            }
            Node::DevNull => FileKind::DevNull,
            Node::Random(m) => FileKind::Random(m),
        };
        let keep = !(O_CREAT | O_EXCL | O_TRUNC | O_CLOEXEC | 0o400);
        let file = OpenFile::new(kind, (flags & keep) | O_LARGEFILE);
        let limit = self.nofile();
        Ok(self.fds.install(file, 0, limit, flags & O_CLOEXEC != 0)? as u64)
    }

    pub(crate) fn sys_close(&mut self, fd: u64) -> SysResult {
        self.fds.close(fd as i32)?;
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

    /// Writes `data` to `fd`.
    fn do_write(&mut self, fd: u64, data: &[u8]) -> Result<u64, i32> {
        let f = self.fds.get(fd as i32)?;
        if !f.writable() {
            return Err(EBADF);
        }
        match f.kind {
            FileKind::Stdout => self.emit(Stream::Stdout, data),
            FileKind::Stderr => self.emit(Stream::Stderr, data),
            FileKind::DevNull | FileKind::Random(_) => {}
            _ => return Err(EBADF),
        }
        Ok(data.len() as u64)
    }

    pub(crate) fn sys_read(&mut self, mem: &mut dyn Memory, fd: u64, buf: u64, count: u64) -> SysResult {
        Ok(self.do_read(mem, fd, buf, count, None)?)
    }

    pub(crate) fn sys_pread(&mut self, mem: &mut dyn Memory, fd: u64, buf: u64, count: u64, off: u64) -> SysResult {
        let f = self.fds.get(fd as i32)?;
        if matches!(f.kind, FileKind::Stdin(_) | FileKind::Stdout | FileKind::Stderr) {
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
        Ok(self.do_write(fd, &data)?)
    }

    pub(crate) fn sys_pwrite(&mut self, mem: &mut dyn Memory, fd: u64, buf: u64, count: u64, off: u64) -> SysResult {
        let f = self.fds.get(fd as i32)?;
        if matches!(f.kind, FileKind::Stdin(_) | FileKind::Stdout | FileKind::Stderr) {
            return Err(ESPIPE.into());
        }
        if (off as i64) < 0 {
            return Err(EINVAL.into());
        }
        self.sys_write(mem, fd, buf, count)
    }

    /// Reads and validates an iovec array.
    fn iovecs(&self, mem: &mut dyn Memory, iov: u64, cnt: u64) -> Result<Vec<(u64, u64)>, i32> {
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
        Ok(self.do_write(fd, &data)?)
    }

    pub(crate) fn sys_lseek(&mut self, fd: u64, off: u64, whence: u64) -> SysResult {
        let f = self.fds.get_mut(fd as i32)?;
        let size = match &f.kind {
            FileKind::Stdin(_) | FileKind::Stdout | FileKind::Stderr => return Err(ESPIPE.into()),
            FileKind::DevNull | FileKind::Random(_) => return Ok(0),
            FileKind::Regular { data, .. } => data.len() as i64,
            FileKind::Dir { .. } => 0,
        };
        let off = off as i64;
        let cur = f.offset as i64;
        let new = match whence {
            0 => Some(off),
            1 => cur.checked_add(off),
            2 => size.checked_add(off),
            3 if off < size => Some(off),
            4 if off < size => Some(size),
            3 | 4 => return Err(6.into()), // ENXIO
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
        Ok(self.fds.dup_to(old as i32, new, false)? as u64)
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
        Ok(self.fds.dup_to(old as i32, new, flags != 0)? as u64)
    }

    pub(crate) fn sys_fcntl(&mut self, fd: u64, cmd: u64, arg: u64) -> SysResult {
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
            // F_SETLK, F_SETLKW, F_OFD_SETLK, F_OFD_SETLKW: one process, no contention.
            6 | 7 | 37 | 38 => Ok(0),
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
                    FileKind::Stdout | FileKind::Stderr => 0,
                    _ => return Err(ENOTTY.into()),
                };
                let n = n.min(i32::MAX as u64) as u32;
                self.vm.copy_out(mem, arg, &n.to_le_bytes())?;
                Ok(0)
            }
            _ => Err(ENOTTY.into()),
        }
    }

    fn revents(&self, fd: i32, events: u16) -> u16 {
        if fd < 0 {
            return 0;
        }
        let Ok(f) = self.fds.get(fd) else { return POLLNVAL };
        let rd = POLLIN | POLLRDNORM;
        let wr = POLLOUT | POLLWRNORM;
        match &f.kind {
            FileKind::Stdin(d) => {
                if f.offset < d.len() as u64 {
                    events & rd
                } else {
                    (events & rd) | POLLHUP
                }
            }
            FileKind::Stdout | FileKind::Stderr => events & wr,
            _ => events & (rd | wr),
        }
    }

    fn do_poll(&mut self, mem: &mut dyn Memory, fds: u64, nfds: u64, timeout: PollTimeout) -> SysResult {
        if nfds > self.nofile() {
            return Err(EINVAL.into());
        }
        let mut raw = vec![0u8; nfds as usize * 8];
        self.vm.copy_in(mem, fds, &mut raw)?;
        let mut ready = 0;
        for c in raw.chunks_exact_mut(8) {
            let fd = i32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            let events = u16::from_le_bytes([c[4], c[5]]);
            let rev = self.revents(fd, events);
            c[6..8].copy_from_slice(&rev.to_le_bytes());
            if rev != 0 {
                ready += 1;
            }
        }
        self.vm.copy_out(mem, fds, &raw)?;
        if ready > 0 {
            return Ok(ready);
        }
        let wait = match timeout {
            PollTimeout::Millis(ms) if ms >= 0 => Some(ms as u64 * 1_000_000),
            PollTimeout::Millis(_) => None,
            PollTimeout::Nanos(ns) => ns,
        };
        match wait {
            Some(ns) => {
                self.clock.advance(ns);
                Ok(0)
            }
            None => Err(Stop::Exit(self.deadlock("poll with no timeout on fds that never become ready"))),
        }
    }

    pub(crate) fn sys_poll(&mut self, mem: &mut dyn Memory, fds: u64, nfds: u64, t: PollTimeout) -> SysResult {
        self.do_poll(mem, fds, nfds, t)
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
        let r = self.do_poll(mem, fds, nfds, PollTimeout::Nanos(timeout))?;
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
        let t = self.resolve(mem, dirfd, path, flags)?;
        let st = self.stat_of(&t, flags & AT_SYMLINK_NOFOLLOW == 0)?;
        let kind = st.mode & 0o170000;
        if mode & 2 != 0 && kind != S_IFCHR {
            return Err(EROFS.into());
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
        let Target::Path(p, _) = self.resolve(mem, dirfd, path, 0)? else {
            return Err(ENOENT.into());
        };
        match self.vfs.lookup(&p, false) {
            Some(Node::ExeLink) => {
                let target = self.vfs.exe_path().as_bytes().to_vec();
                let n = target.len().min(size as usize);
                self.vm.copy_out(mem, buf, &target[..n])?;
                Ok(n as u64)
            }
            Some(_) => Err(EINVAL.into()),
            None => Err(ENOENT.into()),
        }
    }

    pub(crate) fn sys_getdents64(&mut self, mem: &mut dyn Memory, fd: u64, buf: u64, count: u64) -> SysResult {
        let f = self.fds.get(fd as i32)?;
        let FileKind::Dir { path } = &f.kind else { return Err(ENOTDIR.into()) };
        let entries = self.vfs.list(path);
        let count = count.min(MAX_IO) as usize;
        let mut out = Vec::new();
        let mut idx = f.offset as usize;
        while let Some((name, dtype, ino)) = entries.get(idx) {
            let reclen = (19 + name.len() + 1).div_ceil(8) * 8;
            if out.len() + reclen > count {
                if out.is_empty() {
                    return Err(EINVAL.into());
                }
                break;
            }
            let start = out.len();
            out.extend_from_slice(&ino.to_le_bytes());
            out.extend_from_slice(&(idx as u64 + 1).to_le_bytes());
            out.extend_from_slice(&(reclen as u16).to_le_bytes());
            out.push(*dtype);
            out.extend_from_slice(name.as_bytes());
            out.resize(start + reclen, 0);
            idx += 1;
        }
        self.vm.copy_out(mem, buf, &out)?;
        self.fds.get_mut(fd as i32)?.offset = idx as u64;
        Ok(out.len() as u64)
    }
}
