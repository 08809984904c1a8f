//! A file's data: writes to regular files (fault decisions, `O_APPEND`, `O_SYNC`), truncation,
//! `fallocate` and `fadvise64`.

use crate::abi::errno::*;
use crate::abi::file::*;
use crate::faults::IoOp;
use crate::fs::Kind;
use crate::kernel::{Kernel, SysResult};
use crate::syscalls::sys_path::Target;
use crate::Memory;

impl Kernel {
    /// A write to a regular file: fault decisions, the write, `O_SYNC`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn file_write(
        &mut self,
        fd: u64,
        id: u64,
        path: &str,
        flags: u32,
        data: &[u8],
        off: u64,
        advance: bool,
    ) -> Result<u64, i32> {
        if !matches!(self.files.fs.get(id).map(|i| &i.kind), Some(Kind::File(_))) {
            return Err(EBADF);
        }
        if data.is_empty() {
            return Ok(0);
        }
        self.faults.file_writes += 1;
        let rates = (self.faults.config.eio_on_write_ppm, self.faults.config.enospc_on_write_ppm);
        self.io_point(IoOp::Write, path, None, rates)?;
        let off = if flags & O_APPEND != 0 { self.files.fs.size(id) } else { off };
        let now = self.sched.clock.realtime_ns();
        let n = self.files.fs.write(id, off, data, now)?;
        self.faults.note_write(path);
        if advance {
            self.files.fds.get_mut(fd as i32)?.offset = off + n;
        }
        if flags & O_DSYNC != 0 && !self.durable_before(path, true) {
            self.files.fs.flush(id);
            self.durable_after(path);
        }
        Ok(n)
    }

    pub(crate) fn truncate_id(&mut self, id: u64, path: &str, len: u64) -> SysResult {
        if (len as i64) < 0 {
            return Err(EINVAL.into());
        }
        let node = self.files.fs.get(id).ok_or(ENOENT)?;
        match node.kind {
            Kind::Dir(_) => return Err(EISDIR.into()),
            Kind::Static(_) => return Err(EROFS.into()),
            Kind::File(_) => {}
            _ => return Err(EINVAL.into()),
        }
        self.io_point(IoOp::Truncate, path, None, (0, 0))?;
        let now = self.sched.clock.realtime_ns();
        self.files.fs.set_size(id, len, now)?;
        Ok(0)
    }

    pub(crate) fn sys_truncate(&mut self, mem: &mut dyn Memory, path: u64, len: u64) -> SysResult {
        let Target::Path(w) = self.resolve(mem, crate::kernel::AT_FDCWD, path, 0, true)? else {
            return Err(ENOENT.into());
        };
        let id = self.target_id(&w)?;
        let p = self.walked_path(&w, id);
        // Write permission, once Linux's earlier checks (a negative length, a directory, a
        // file that is not regular, a read-only one) found nothing.
        let node = self.files.fs.get(id).ok_or(ENOENT)?;
        if (len as i64) >= 0 && !node.readonly && matches!(node.kind, Kind::File(_)) && node.mode & 0o200 == 0 {
            return Err(EACCES.into());
        }
        self.truncate_id(id, &p, len)
    }

    pub(crate) fn sys_ftruncate(&mut self, fd: u64, len: u64) -> SysResult {
        let f = self.files.fds.get(fd as i32)?;
        if (len as i64) < 0 {
            return Err(EINVAL.into());
        }
        let (id, path) = f.truncate_target()?;
        self.truncate_id(id, &path, len)
    }

    pub(crate) fn sys_fallocate(&mut self, fd: u64, mode: u64, off: u64, len: u64) -> SysResult {
        let f = self.files.fds.get(fd as i32)?;
        if mode & !1 != 0 {
            return Err(EOPNOTSUPP.into());
        }
        if (off as i64) < 0 || (len as i64) <= 0 {
            return Err(EINVAL.into());
        }
        if !f.writable() {
            return Err(EBADF.into());
        }
        let (id, path) = f.kind.allocate_target(&self.files.fs)?;
        let end = off.checked_add(len).filter(|e| *e <= i64::MAX as u64).ok_or(EFBIG)?;
        let size = self.files.fs.size(id);
        if end <= size {
            return Ok(0);
        }
        self.io_point(IoOp::Fallocate, &path, None, (0, 0))?;
        if mode & 1 != 0 {
            self.files.fs.reserve(end - size)?;
            return Ok(0);
        }
        let now = self.sched.clock.realtime_ns();
        self.files.fs.set_size(id, end, now)?;
        Ok(0)
    }

    /// `fadvise64`: the advice is ignored; only the fd is checked.
    pub(crate) fn sys_fadvise64(&mut self, fd: u64) -> SysResult {
        self.files.fds.get(fd as i32)?;
        Ok(0)
    }
}
