//! Moving bytes through file descriptors: `read`/`write` and their positional and vector
//! forms (each range checked like Linux's `access_ok` first), `lseek`, `close`, `dup*`, `fcntl`,
//! `ioctl` and `poll`.
//!
//! Finding and opening files (paths, `openat`, the `stat` family) is in [`crate::syscalls::sys_path`];
//! writes to files with fault injection, the sync family and namespace calls are in
//! [`crate::syscalls::sys_fs`].

use crate::abi::errno::*;
use crate::abi::file::*;
use crate::files::fd::*;
use crate::files::file_ops::{ReadSource, WriteTarget};
use crate::files::Files;
use crate::kernel::{Kernel, SysResult, SysStop, MAX_IO};
use crate::mm::mappings::Access;
use crate::mm::user_layout::USER_END;
use crate::prelude::*;
use crate::task::procs::Proc;
use crate::Memory;

/// Linux's `access_ok`: the range lies in the user half.
pub(crate) fn access_ok(addr: u64, len: u64) -> Result<(), i32> {
    match addr.checked_add(len) {
        Some(end) if end <= USER_END => Ok(()),
        _ => Err(EFAULT),
    }
}

impl Kernel {
    pub(crate) fn nofile(&self) -> u64 {
        self.process.rlimits[7].0.min(1 << 20)
    }

    /// Releases what a dropped description held: its inode, its end of a pipe (a FIFO: both),
    /// or its object. A Unix socket released with descriptions in flight lets go of them in
    /// turn.
    pub(crate) fn dropped(&mut self, f: Option<OpenFile>) {
        let mut work: Vec<OpenFile> = f.into_iter().collect();
        while let Some(f) = work.pop() {
            if let Some(id) = f.kind.inode() {
                self.files.fs.closed(id);
            }
            if let Some((obj, read, write)) = f.kind.pipe_end() {
                self.net.leave_pipe(obj, read, write);
            } else if let Some((obj, _)) = object_of(&f.kind) {
                self.net.release(obj);
                for desc in core::mem::take(&mut self.net.orphans) {
                    work.extend(self.files.fds.unhold(desc));
                }
            }
        }
    }

    pub(crate) fn sys_close(&mut self, fd: u64) -> SysResult {
        self.release_locks_at_close(fd as i32);
        let f = self.files.fds.close(fd as i32)?;
        let gone = f.is_some();
        self.dropped(f);
        if gone {
            self.release_locks_of(None);
        }
        Ok(0)
    }

    /// `close_range(first, last, flags)`: closes every open fd of `[first, last]`, or with
    /// `CLOSE_RANGE_CLOEXEC` marks them close-on-exec. `CLOSE_RANGE_UNSHARE` asks for an fd
    /// table of the caller's own: a process's is already its own unless it has other threads,
    /// which share it and cannot be given one apart (`ENOSYS`, counted as unsupported).
    pub(crate) fn sys_close_range(&mut self, first: u64, last: u64, flags: u64) -> SysResult {
        const UNSHARE: u64 = 2;
        const CLOEXEC: u64 = 4;
        // Both bounds are `unsigned int`s.
        let (first, last) = (first as u32, last as u32);
        if flags & !(UNSHARE | CLOEXEC) != 0 || first > last {
            return Err(EINVAL.into());
        }
        if flags & UNSHARE != 0 {
            let pid = self.procs.current;
            if self.sched.threads.threads.values().filter(|t| t.pid == pid).count() > 1 {
                return Err(SysStop::Unsupported);
            }
        }
        let Ok(from) = i32::try_from(first) else { return Ok(0) };
        let fds: Vec<i32> = self.files.fds.open_fds(from).take_while(|&fd| fd as u32 <= last).collect();
        for fd in fds {
            if flags & CLOEXEC != 0 {
                self.files.fds.set_cloexec(fd, true)?;
            } else {
                self.sys_close(fd as u64)?;
            }
        }
        Ok(0)
    }

    /// Reads up to `count` bytes from `fd` into guest memory at `buf`, at `pos` (or the file
    /// offset).
    fn do_read(&mut self, mem: &mut dyn Memory, fd: u64, buf: u64, count: u64, pos: Option<u64>) -> Result<u64, i32> {
        if !self.files.fds.get(fd as i32)?.readable() {
            return Err(EBADF);
        }
        access_ok(buf, count)?;
        let data = self.read_bytes(fd, count, pos)?;
        self.process.mappings.copy_out(mem, buf, &data)?;
        self.advance(fd, pos, data.len() as u64)?;
        Ok(data.len() as u64)
    }

    /// What a read of up to `count` bytes of the file `fd` at `pos` (or its offset) gives,
    /// without moving the offset ([`Kernel::advance`] does).
    pub(crate) fn read_bytes(&mut self, fd: u64, count: u64, pos: Option<u64>) -> Result<Vec<u8>, i32> {
        let f = self.files.fds.get(fd as i32)?;
        if !f.readable() {
            return Err(EBADF);
        }
        let count = count.min(MAX_IO);
        let off = pos.unwrap_or(f.offset);
        let held;
        let data: &[u8] = match f.kind.read_source(pos.is_some())? {
            ReadSource::Held(data) => {
                held = data;
                &held
            }
            ReadSource::File { id, path } => {
                if self.files.fs.contents(id).is_none() {
                    return Err(EINVAL);
                }
                self.io_point(crate::faults::IoOp::Read, &path, Some((off, off.saturating_add(count.max(1)))), (0, 0))?;
                self.files.fs.contents(id).ok_or(EINVAL)?
            }
            ReadSource::Empty => return Ok(Vec::new()),
            ReadSource::Random => {
                let mut b = vec![0u8; count as usize];
                self.rng.fill(&mut b);
                return Ok(b);
            }
            ReadSource::Zero => return Ok(vec![0u8; count as usize]),
        };
        let avail = (data.len() as u64).saturating_sub(off);
        let n = count.min(avail);
        if n == 0 {
            return Ok(Vec::new());
        }
        Ok(data[off as usize..(off + n) as usize].to_vec())
    }

    /// Moves `fd`'s offset past `n` bytes read, unless the read was positioned.
    fn advance(&mut self, fd: u64, pos: Option<u64>, n: u64) -> Result<(), i32> {
        if pos.is_none() {
            let f = self.files.fds.get_mut(fd as i32)?;
            if !matches!(f.kind.read_source(false), Ok(ReadSource::Random | ReadSource::Empty | ReadSource::Zero)) {
                f.offset += n;
            }
        }
        Ok(())
    }

    /// `sendfile`: copies up to `count` bytes of the file `inp` (at `*offp` if given, which
    /// then moves instead of the file offset) to `out`, any writable descriptor.
    pub(crate) fn sys_sendfile(
        &mut self,
        mem: &mut dyn Memory,
        out: u64,
        inp: u64,
        offp: u64,
        count: u64,
    ) -> SysResult {
        let fin = self.files.fds.get(inp as i32)?;
        if !fin.readable() {
            return Err(EBADF.into());
        }
        if fin.kind.is_stream() {
            return Err(EINVAL.into());
        }
        let fout = self.files.fds.get(out as i32)?;
        if !fout.writable() {
            return Err(EBADF.into());
        }
        if fout.flags & O_APPEND != 0 {
            return Err(EINVAL.into());
        }
        let pos = self.offset_arg(mem, offp)?;
        let data = self.read_bytes(inp, count, pos)?;
        let n = if data.is_empty() {
            0
        } else if self.is_object(out as i32) {
            self.obj_send(out as i32, &data, 0, None)?
        } else {
            self.do_write(out, &data, None)?
        };
        self.moved(mem, inp, offp, pos, n)?;
        Ok(n)
    }

    /// `copy_file_range`: copies up to `len` bytes between two regular files, each at its
    /// offset or at the position its pointer gives (which then moves instead).
    pub(crate) fn sys_copy_file_range(&mut self, mem: &mut dyn Memory, a: [u64; 6]) -> SysResult {
        let [inp, offp_in, out, offp_out, len, flags] = a;
        if flags != 0 {
            return Err(EINVAL.into());
        }
        let (fin, fout) = (self.files.fds.get(inp as i32)?, self.files.fds.get(out as i32)?);
        if !fin.readable() || !fout.writable() || fout.flags & O_APPEND != 0 {
            return Err(EBADF.into());
        }
        let regular = |f: &OpenFile| {
            let st = f.kind.stat(&self.files.fs);
            (st.mode & 0o170000 == S_IFREG, st.mode & 0o170000 == S_IFDIR)
        };
        let (r_in, d_in) = regular(fin);
        let (r_out, d_out) = regular(fout);
        if d_in || d_out {
            return Err(EISDIR.into());
        }
        if !r_in || !r_out {
            return Err(EINVAL.into());
        }
        let (same, off_in, off_out) = (fin.kind.inode() == fout.kind.inode(), fin.offset, fout.offset);
        let pos_in = self.offset_arg(mem, offp_in)?;
        let pos_out = self.offset_arg(mem, offp_out)?;
        let (start_in, start_out) = (pos_in.unwrap_or(off_in), pos_out.unwrap_or(off_out));
        if same && start_in < start_out.saturating_add(len) && start_out < start_in.saturating_add(len) {
            return Err(EINVAL.into());
        }
        let data = self.read_bytes(inp, len, pos_in)?;
        let n = if data.is_empty() { 0 } else { self.do_write(out, &data, Some(start_out))? };
        if pos_out.is_none() {
            self.files.fds.get_mut(out as i32)?.offset = start_out + n;
        } else {
            self.process.mappings.copy_out(mem, offp_out, &(start_out + n).to_le_bytes())?;
        }
        self.moved(mem, inp, offp_in, pos_in, n)?;
        Ok(n)
    }

    /// The position an `loff_t *` argument gives (`None` for a null pointer).
    pub(crate) fn offset_arg(&self, mem: &mut dyn Memory, p: u64) -> Result<Option<u64>, i32> {
        if p == 0 {
            return Ok(None);
        }
        let v = self.process.mappings.read_u64(mem, p)?;
        if (v as i64) < 0 {
            return Err(EINVAL);
        }
        Ok(Some(v))
    }

    /// After `n` bytes were copied out of `fd`: moves `*p` if the copy started at a position
    /// it gave, the file offset otherwise.
    pub(crate) fn moved(&mut self, mem: &mut dyn Memory, fd: u64, p: u64, pos: Option<u64>, n: u64) -> Result<(), i32> {
        match pos {
            Some(at) => self.process.mappings.copy_out(mem, p, &(at + n).to_le_bytes()),
            None => self.advance(fd, None, n),
        }
    }

    /// Writes `data` to `fd`, at `pos` or the file offset.
    pub(crate) fn do_write(&mut self, fd: u64, data: &[u8], pos: Option<u64>) -> Result<u64, i32> {
        let f = self.files.fds.get(fd as i32)?;
        if !f.writable() {
            return Err(EBADF);
        }
        match f.kind.write_target()? {
            WriteTarget::Output(stream) => self.emit(stream, data),
            WriteTarget::Discard => {}
            WriteTarget::SdkMessages => self.sdk_messages(data),
            WriteTarget::File { id, path } => {
                let (flags, offset) = (f.flags, f.offset);
                return self.file_write(fd, id, &path, flags, data, pos.unwrap_or(offset), pos.is_none());
            }
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
        let f = self.files.fds.get(fd as i32)?;
        if f.kind.is_stream() {
            return Err(ESPIPE.into());
        }
        if (off as i64) < 0 {
            return Err(EINVAL.into());
        }
        Ok(self.do_read(mem, fd, buf, count, Some(off))?)
    }

    pub(crate) fn sys_write(&mut self, mem: &mut dyn Memory, fd: u64, buf: u64, count: u64) -> SysResult {
        let f = self.files.fds.get(fd as i32)?;
        if !f.writable() {
            return Err(EBADF.into());
        }
        access_ok(buf, count)?;
        let count = count.min(MAX_IO);
        self.process.mappings.check(buf, count, Access::Read)?;
        let mut data = vec![0u8; count as usize];
        self.process.mappings.copy_in(mem, buf, &mut data)?;
        if self.is_object(fd as i32) {
            return self.obj_send(fd as i32, &data, 0, None);
        }
        Ok(self.do_write(fd, &data, None)?)
    }

    pub(crate) fn sys_pwrite(&mut self, mem: &mut dyn Memory, fd: u64, buf: u64, count: u64, off: u64) -> SysResult {
        let f = self.files.fds.get(fd as i32)?;
        if f.kind.is_stream() {
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
        self.process.mappings.check(buf, count, Access::Read)?;
        let mut data = vec![0u8; count as usize];
        self.process.mappings.copy_in(mem, buf, &mut data)?;
        Ok(self.do_write(fd, &data, Some(off))?)
    }

    /// Reads and validates an iovec array.
    pub(crate) fn iovecs(&self, mem: &mut dyn Memory, iov: u64, cnt: u64) -> Result<Vec<(u64, u64)>, i32> {
        let cnt = cnt as i32;
        if !(0..=1024).contains(&cnt) {
            return Err(EINVAL);
        }
        let mut raw = vec![0u8; cnt as usize * 16];
        self.process.mappings.copy_in(mem, iov, &mut raw)?;
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
        self.readv_flags(mem, fd, iov, cnt, 0)
    }

    /// `readv` with the `MSG_*` flags an object's receive takes (`vmsplice` passes
    /// `MSG_DONTWAIT` for `SPLICE_F_NONBLOCK`).
    pub(crate) fn readv_flags(&mut self, mem: &mut dyn Memory, fd: u64, iov: u64, cnt: u64, flags: u32) -> SysResult {
        let f = self.files.fds.get(fd as i32)?;
        if !f.readable() {
            return Err(EBADF.into());
        }
        let iovs = self.iovecs(mem, iov, cnt)?;
        if self.is_object(fd as i32) {
            return self.obj_recv(mem, fd as i32, &iovs, flags).map(|r| r.0);
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
        self.writev_flags(mem, fd, iov, cnt, 0)
    }

    /// `writev` with the `MSG_*` flags an object's send takes (as [`Kernel::readv_flags`]).
    pub(crate) fn writev_flags(&mut self, mem: &mut dyn Memory, fd: u64, iov: u64, cnt: u64, flags: u32) -> SysResult {
        let f = self.files.fds.get(fd as i32)?;
        if !f.writable() {
            return Err(EBADF.into());
        }
        let iovs = self.iovecs(mem, iov, cnt)?;
        let mut data = Vec::new();
        for (base, len) in iovs {
            let n = len.min(MAX_IO - data.len() as u64);
            let mut chunk = Vec::new();
            let copied = self.process.mappings.check(base, n, Access::Read).and_then(|()| {
                chunk.resize(n as usize, 0);
                self.process.mappings.copy_in(mem, base, &mut chunk)
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
            return self.obj_send(fd as i32, &data, flags, None);
        }
        Ok(self.do_write(fd, &data, None)?)
    }

    pub(crate) fn sys_lseek(&mut self, fd: u64, off: u64, whence: u64) -> SysResult {
        let Files { fs, fds, .. } = &mut self.files;
        Ok(fds.get_mut(fd as i32)?.seek(off, whence, fs)?)
    }

    pub(crate) fn sys_dup(&mut self, fd: u64) -> SysResult {
        let limit = self.nofile();
        Ok(self.files.fds.dup(fd as i32, 0, limit, false)? as u64)
    }

    pub(crate) fn sys_dup2(&mut self, old: u64, new: u64) -> SysResult {
        self.files.fds.get(old as i32)?;
        let new = new as i32;
        if new < 0 || new as u64 >= self.nofile() {
            return Err(EBADF.into());
        }
        if old as i32 == new {
            return Ok(new as u64);
        }
        let dropped = self.files.fds.dup_to(old as i32, new, false)?;
        self.dropped(dropped);
        Ok(new as u64)
    }

    pub(crate) fn sys_dup3(&mut self, old: u64, new: u64, flags: u64) -> SysResult {
        if flags & !u64::from(O_CLOEXEC) != 0 || old as i32 == new as i32 {
            return Err(EINVAL.into());
        }
        self.files.fds.get(old as i32)?;
        let new = new as i32;
        if new < 0 || new as u64 >= self.nofile() {
            return Err(EBADF.into());
        }
        let dropped = self.files.fds.dup_to(old as i32, new, flags != 0)?;
        self.dropped(dropped);
        Ok(new as u64)
    }

    pub(crate) fn sys_fcntl(&mut self, mem: &mut dyn Memory, fd: u64, cmd: u64, arg: u64) -> SysResult {
        let fd = fd as i32;
        let e = self.files.fds.entry(fd)?;
        match cmd as u32 {
            0 | 1030 => {
                let min = arg as i32;
                if min < 0 || min as u64 >= self.nofile() {
                    return Err(EINVAL.into());
                }
                let limit = self.nofile();
                Ok(self.files.fds.dup(fd, min, limit, cmd == 1030)? as u64)
            }
            1 => Ok(u64::from(e.cloexec)),
            2 => {
                self.files.fds.set_cloexec(fd, arg & 1 != 0)?;
                Ok(0)
            }
            3 => Ok(u64::from(self.files.fds.get(fd)?.flags)),
            4 => {
                let f = self.files.fds.get_mut(fd)?;
                let settable = O_APPEND | O_NONBLOCK | O_ASYNC;
                f.flags = (f.flags & !settable) | (arg as u32 & settable);
                self.note_async(fd);
                Ok(0)
            }
            // F_SETOWN: a process (> 0) or a process group (< 0).
            8 => {
                let who = arg as i32;
                let owner = match who {
                    0 => (1, 0),
                    i32::MIN => return Err(EINVAL.into()),
                    w if w < 0 => (2, u64::from(w.unsigned_abs())),
                    w => (1, w as u64),
                };
                self.set_owner(fd, owner)
            }
            // F_GETOWN: the process, or minus the group.
            9 => {
                let (kind, id) = self.files.fds.get(fd)?.owner;
                Ok(if kind == 2 { (id as i64).wrapping_neg() as u64 } else { id })
            }
            // F_SETSIG, F_GETSIG.
            10 => {
                if arg > 64 {
                    return Err(EINVAL.into());
                }
                self.files.fds.get_mut(fd)?.owner_sig = arg as i32;
                Ok(0)
            }
            11 => Ok(self.files.fds.get(fd)?.owner_sig as u64),
            // F_SETOWN_EX, F_GETOWN_EX: `struct f_owner_ex { int type; pid_t pid; }`.
            15 => {
                let mut b = [0u8; 8];
                self.process.mappings.copy_in(mem, arg, &mut b)?;
                let kind = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                let who = i32::from_le_bytes([b[4], b[5], b[6], b[7]]);
                if kind > 2 || who < 0 {
                    return Err(EINVAL.into());
                }
                self.set_owner(fd, (kind, who as u64))
            }
            16 => {
                let (kind, id) = self.files.fds.get(fd)?.owner;
                let mut b = [0u8; 8];
                b[..4].copy_from_slice(&kind.to_le_bytes());
                b[4..].copy_from_slice(&(id as u32).to_le_bytes());
                self.process.mappings.copy_out(mem, arg, &b)?;
                Ok(0)
            }
            // F_GETLK, F_SETLK, F_SETLKW and the OFD forms: locks of processes and descriptions.
            5 | 6 | 7 | 36 | 37 | 38 => self.fcntl_lock(mem, fd, cmd as u32, arg),
            1032 if self.files.fds.get(fd)?.kind.is_std_stream() => Ok(65536),
            // F_GETPIPE_SZ and F_SETPIPE_SZ of a pipe or FIFO.
            1031 | 1032 => self.pipe_size(fd, (cmd == 1031).then_some(arg)),
            _ => Err(EINVAL.into()),
        }
    }

    /// A pipe's size, after setting it to `set` (rounded up to a power of two pages, at most
    /// [`crate::net::PIPE_MAX_SIZE`]: `EPERM` above, `EBUSY` below what it holds).
    fn pipe_size(&mut self, fd: i32, set: Option<u64>) -> SysResult {
        let kind = &self.files.fds.get(fd)?.kind;
        let obj = match crate::files::fd::object_of(kind) {
            Some((obj, Some(_))) => obj,
            _ => return Err(EBADF.into()),
        };
        let Some(crate::net::Obj { kind: crate::net::ObjKind::Pipe { buf, cap, .. }, .. }) =
            self.net.objects.get_mut(&obj)
        else {
            return Err(EBADF.into());
        };
        if let Some(want) = set {
            let want = (want as u32 as usize).max(crate::PAGE_SIZE as usize).next_power_of_two();
            if want > crate::net::PIPE_MAX_SIZE {
                return Err(EPERM.into());
            }
            if want < buf.len() {
                return Err(EBUSY.into());
            }
            *cap = want;
            self.net.touch(obj);
        }
        let cap = match self.net.objects.get(&obj).map(|o| &o.kind) {
            Some(crate::net::ObjKind::Pipe { cap, .. }) => *cap,
            _ => 0,
        };
        Ok(cap as u64)
    }

    /// Sets the owner of `fd`'s description (`F_SETOWN`, `F_SETOWN_EX`): `(kind, id)` with kind
    /// `F_OWNER_TID` 0, `F_OWNER_PID` 1 or `F_OWNER_PGRP` 2; id 0 clears it, one that names no
    /// thread, process or group is `ESRCH`.
    fn set_owner(&mut self, fd: i32, (kind, id): (u32, u64)) -> SysResult {
        let exists = match kind {
            _ if id == 0 => true,
            0 => self.sched.threads.threads.contains_key(&id),
            1 => self.procs.table.get(&id).is_some_and(Proc::live),
            _ => self.procs.table.values().any(|p| p.live() && p.pgid == id),
        };
        if !exists {
            return Err(ESRCH.into());
        }
        self.files.fds.get_mut(fd)?.owner = if id == 0 { (0, 0) } else { (kind, id) };
        self.note_async(fd);
        Ok(0)
    }

    /// Signal-driven I/O is not modelled: a description with `O_ASYNC` and an owner would get
    /// `SIGIO` from Linux when it becomes ready, and gets none from deja. The run summary lists
    /// each time a program asks for it ([`RunReport::unmodelled`](crate::RunReport)).
    fn note_async(&mut self, fd: i32) {
        if self.files.fds.get(fd).is_ok_and(|f| f.flags & O_ASYNC != 0 && f.owner.1 != 0) {
            *self.record.unmodelled.entry("SIGIO (O_ASYNC with an owner)".into()).or_default() += 1;
        }
    }

    /// Sets `flag` of `fd`'s description if the `int` at `arg` is non-zero and clears it if
    /// zero (`FIONBIO`, `FIOASYNC`).
    fn set_flag(&mut self, mem: &mut dyn Memory, fd: i32, arg: u64, flag: u32) -> SysResult {
        let on = self.process.mappings.read_u32(mem, arg)? != 0;
        let f = self.files.fds.get_mut(fd)?;
        if on {
            f.flags |= flag;
        } else {
            f.flags &= !flag;
        }
        Ok(0)
    }

    pub(crate) fn sys_ioctl(&mut self, mem: &mut dyn Memory, fd: u64, req: u64, arg: u64) -> SysResult {
        let fd = fd as i32;
        let f = self.files.fds.get(fd)?;
        match req as u32 {
            // FIONBIO
            0x5421 => self.set_flag(mem, fd, arg, O_NONBLOCK),
            // FIOASYNC
            0x5452 => {
                self.set_flag(mem, fd, arg, O_ASYNC)?;
                self.note_async(fd);
                Ok(0)
            }
            0x5451 | 0x5450 => {
                self.files.fds.set_cloexec(fd, req as u32 == 0x5451)?;
                Ok(0)
            }
            0x541b => {
                // FIONREAD
                let n = f.kind.bytes_ready(f.offset, &self.files.fs, &self.net).ok_or(ENOTTY)?;
                let n = n.min(i32::MAX as u64) as u32;
                self.process.mappings.copy_out(mem, arg, &n.to_le_bytes())?;
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
        let r = self.with_wait_mask(mem, sigmask, |k, mem| k.do_poll(mem, fds, nfds, timeout))?;
        if r == 0 && tsp != 0 {
            self.process.mappings.copy_out(mem, tsp, &[0u8; 16])?;
        }
        Ok(r)
    }
}
