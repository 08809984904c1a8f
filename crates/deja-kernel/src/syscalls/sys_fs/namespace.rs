//! The calls that change names: `mkdir`, `mknod`, `unlink`/`rmdir`, `rename`, `link` and
//! `symlink`.

use super::AT_REMOVEDIR;
use crate::abi::errno::*;
use crate::abi::file::*;
use crate::faults::IoOp;
use crate::fs::Kind;
use crate::kernel::{Kernel, SysResult};
use crate::prelude::*;
use crate::syscalls::sys_path::{Target, AT_EMPTY_PATH, PATH_MAX};
use crate::Memory;

/// `AT_SYMLINK_FOLLOW`.
const AT_SYMLINK_FOLLOW: u64 = 0x400;

impl Kernel {
    /// Walks a path argument without following the last symlink (namespace calls). An entry
    /// of `/proc/self/fd` is in a directory the program may not change (`EACCES`).
    fn walk_nofollow(&mut self, mem: &mut dyn Memory, dirfd: u64, path: u64) -> Result<crate::fs::Walked, i32> {
        match self.resolve(mem, dirfd, path, 0, false)? {
            Target::Path(w) if w.proc_fd.is_some() => Err(EACCES),
            Target::Path(w) => Ok(w),
            Target::Fd(_) => Err(ENOENT),
        }
    }

    pub(crate) fn sys_mkdirat(&mut self, mem: &mut dyn Memory, dirfd: u64, path: u64, mode: u64) -> SysResult {
        let w = self.walk_nofollow(mem, dirfd, path)?;
        if w.id.is_none() {
            // Permission before the fault point: a directory the program may not change
            // refuses before anything is written.
            self.files.fs.writable_dir(w.parent)?;
            if let Some(name) = &w.name {
                let p = self.files.fs.path_in(w.parent, name);
                self.io_point(IoOp::Create, &p, None, (0, 0))?;
            }
        }
        let now = self.sched.clock.realtime_ns();
        let perm = (mode as u32) & 0o7777 & !self.process.umask;
        self.files.fs.mkdir(&w, perm, now)?;
        Ok(0)
    }

    /// `mknodat` and `mknod`: a FIFO (`S_IFIFO`), a socket's name (`S_IFSOCK`, which nothing
    /// listens on), or an empty regular file (`S_IFREG` or no type, created as `open` with
    /// `O_CREAT | O_EXCL` creates it). FIFOs and sockets' names live outside the durable layer:
    /// no crash image has them. A device is `EPERM`, as for a program without `CAP_MKNOD`; a
    /// directory is `EPERM` and any other type `EINVAL`, before the path is looked at.
    pub(crate) fn sys_mknodat(
        &mut self,
        mem: &mut dyn Memory,
        dirfd: u64,
        path: u64,
        mode: u64,
        _dev: u64,
    ) -> SysResult {
        // `umode_t` is 16 bits.
        let mode = u32::from(mode as u16);
        let kind = match mode & S_IFMT {
            S_IFIFO => Some(Kind::Fifo),
            S_IFSOCK => Some(Kind::Socket),
            0 | S_IFREG | S_IFCHR | S_IFBLK => None,
            S_IFDIR => return Err(EPERM.into()),
            _ => return Err(EINVAL.into()),
        };
        let w = self.walk_nofollow(mem, dirfd, path)?;
        let now = self.sched.clock.realtime_ns();
        let perm = mode & 0o7777 & !self.process.umask;
        if let Some(kind) = kind {
            self.files.fs.special_node(&w, kind, perm, now)?;
            return Ok(0);
        }
        let name = self.files.fs.may_create(&w)?.to_string();
        if matches!(mode & S_IFMT, S_IFCHR | S_IFBLK) {
            return Err(EPERM.into());
        }
        let p = self.files.fs.path_in(w.parent, &name);
        self.io_point(IoOp::Create, &p, None, (0, 0))?;
        self.files.fs.create_file(w.parent, &name, perm, now)?;
        Ok(0)
    }

    pub(crate) fn sys_unlinkat(&mut self, mem: &mut dyn Memory, dirfd: u64, path: u64, flags: u64) -> SysResult {
        if flags & !AT_REMOVEDIR != 0 {
            return Err(EINVAL.into());
        }
        let w = self.walk_nofollow(mem, dirfd, path)?;
        let now = self.sched.clock.realtime_ns();
        self.files.fs.remove(&w, flags & AT_REMOVEDIR != 0, now)?;
        Ok(0)
    }

    pub(crate) fn sys_renameat2(
        &mut self,
        mem: &mut dyn Memory,
        olddir: u64,
        old: u64,
        newdir: u64,
        new: u64,
        flags: u64,
    ) -> SysResult {
        if flags & !3 != 0 || flags == 3 {
            return Err(EINVAL.into());
        }
        let from = self.walk_nofollow(mem, olddir, old)?;
        let to = self.walk_nofollow(mem, newdir, new)?;
        if let (Some(f), Some(t)) = (&from.name, &to.name) {
            let (fp, tp) = (self.files.fs.path_in(from.parent, f), self.files.fs.path_in(to.parent, t));
            self.io_point_as(IoOp::Rename, &fp, Some(&tp), None, (0, 0))?;
        }
        let now = self.sched.clock.realtime_ns();
        self.files.fs.rename(&from, &to, flags as u32, now)?;
        Ok(0)
    }

    pub(crate) fn sys_linkat(
        &mut self,
        mem: &mut dyn Memory,
        olddir: u64,
        old: u64,
        newdir: u64,
        new: u64,
        flags: u64,
    ) -> SysResult {
        if flags & !(AT_SYMLINK_FOLLOW | AT_EMPTY_PATH) != 0 {
            return Err(EINVAL.into());
        }
        let src = match self.resolve(mem, olddir, old, flags & AT_EMPTY_PATH, flags & AT_SYMLINK_FOLLOW != 0)? {
            Target::Path(w) => self.target_id(&w)?,
            Target::Fd(fd) => self.files.fds.get(fd)?.kind.inode().ok_or(ENOENT)?,
        };
        let to = self.walk_nofollow(mem, newdir, new)?;
        let now = self.sched.clock.realtime_ns();
        self.files.fs.link(src, &to, now)?;
        Ok(0)
    }

    pub(crate) fn sys_symlinkat(&mut self, mem: &mut dyn Memory, target: u64, dirfd: u64, path: u64) -> SysResult {
        let t = self.process.mappings.read_cstr(mem, target, PATH_MAX)?;
        if t.is_empty() {
            return Err(ENOENT.into());
        }
        let t = String::from_utf8(t).map_err(|_| EINVAL)?;
        let w = self.walk_nofollow(mem, dirfd, path)?;
        let now = self.sched.clock.realtime_ns();
        self.files.fs.symlink(&w, t, now)?;
        Ok(0)
    }
}
