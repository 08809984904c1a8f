//! Metadata: modes (`chmod`, `umask`), owners (`chown`), times (`utimensat`), `statfs`, and the
//! extended-attribute calls.

use crate::abi::errno::*;
use crate::fs::Kind;
use crate::kernel::{Kernel, SysResult};
use crate::syscalls::sys_path::{Target, AT_EMPTY_PATH, AT_SYMLINK_NOFOLLOW};
use crate::Memory;

/// The permission bits of a mode (`S_IRWXUGO`): what `umask` keeps.
const S_IRWXUGO: u64 = 0o777;
/// `UTIME_NOW`.
const UTIME_NOW: u64 = (1 << 30) - 1;
/// `UTIME_OMIT`.
const UTIME_OMIT: u64 = (1 << 30) - 2;

impl Kernel {
    fn chmod_id(&mut self, id: u64, mode: u64) -> SysResult {
        let node = self.files.fs.get(id).ok_or(ENOENT)?;
        if node.readonly {
            return Err(if node.is_dir() { EACCES } else { EROFS }.into());
        }
        self.files.fs.set_mode(id, mode as u32);
        let now = self.sched.clock.realtime_ns();
        self.files.fs.set_times(id, None, None, now);
        Ok(0)
    }

    /// `fchownat`, `chown`, `lchown`: the program's own uid and gid (or -1, unchanged) are
    /// accepted and change nothing; any other owner is `EPERM`, as for an unprivileged process.
    pub(crate) fn sys_fchownat(
        &mut self,
        mem: &mut dyn Memory,
        dirfd: u64,
        path: u64,
        ids: (u64, u64),
        flags: u64,
    ) -> SysResult {
        if flags & !(AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH) != 0 {
            return Err(EINVAL.into());
        }
        let id = match self.resolve(mem, dirfd, path, flags, flags & AT_SYMLINK_NOFOLLOW == 0)? {
            Target::Path(w) => Some(self.target_id(&w)?),
            Target::Fd(fd) => self.files.fds.get(fd)?.kind.inode(),
        };
        self.chown_id(id, ids)
    }

    /// `fchown`.
    pub(crate) fn sys_fchown(&mut self, fd: u64, uid: u64, gid: u64) -> SysResult {
        let id = self.files.fds.get(fd as i32)?.kind.inode();
        self.chown_id(id, (uid, gid))
    }

    fn chown_id(&mut self, id: Option<u64>, (uid, gid): (u64, u64)) -> SysResult {
        let own = |v: u64| v as u32 == u32::MAX || u64::from(v as u32) == crate::mm::stack::GUEST_UID;
        if !own(uid) || !own(gid) {
            return Err(EPERM.into());
        }
        if let Some(node) = id.and_then(|id| self.files.fs.get(id)) {
            if node.readonly
                && !node.is_dir()
                && !matches!(node.kind, Kind::DevNull | Kind::Random(_) | Kind::MemDev(_))
            {
                return Err(EROFS.into());
            }
        }
        Ok(0)
    }

    /// `umask`: sets the permission bits masked from new files and returns the old mask.
    pub(crate) fn sys_umask(&mut self, mask: u64) -> SysResult {
        let old = self.process.umask;
        self.process.umask = (mask & S_IRWXUGO) as u32;
        Ok(u64::from(old))
    }

    pub(crate) fn sys_fchmodat(&mut self, mem: &mut dyn Memory, dirfd: u64, path: u64, mode: u64) -> SysResult {
        let Target::Path(w) = self.resolve(mem, dirfd, path, 0, true)? else { return Err(ENOENT.into()) };
        let id = self.target_id(&w)?;
        self.chmod_id(id, mode)
    }

    pub(crate) fn sys_fchmod(&mut self, fd: u64, mode: u64) -> SysResult {
        match self.files.fds.get(fd as i32)?.kind.inode() {
            Some(id) => self.chmod_id(id, mode),
            None => Ok(0),
        }
    }

    pub(crate) fn sys_utimensat(
        &mut self,
        mem: &mut dyn Memory,
        dirfd: u64,
        path: u64,
        times: u64,
        flags: u64,
    ) -> SysResult {
        if flags & !(AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH) != 0 {
            return Err(EINVAL.into());
        }
        let now = self.sched.clock.realtime_ns();
        let mut t = [Some(now), Some(now)];
        if times != 0 {
            for (i, slot) in t.iter_mut().enumerate() {
                let sec = self.process.mappings.read_u64(mem, times + 16 * i as u64)?;
                let nsec = self.process.mappings.read_u64(mem, times + 16 * i as u64 + 8)?;
                *slot = match nsec {
                    UTIME_NOW => Some(now),
                    UTIME_OMIT => None,
                    n if n < 1_000_000_000 => {
                        Some((sec as i64).max(0) as u64).map(|s| s.saturating_mul(1_000_000_000).saturating_add(n))
                    }
                    _ => return Err(EINVAL.into()),
                };
            }
        }
        let id = if path == 0 {
            let Some(id) = self.files.fds.get(dirfd as i32)?.kind.inode() else { return Ok(0) };
            id
        } else {
            match self.resolve(mem, dirfd, path, flags, flags & AT_SYMLINK_NOFOLLOW == 0)? {
                Target::Path(w) => self.target_id(&w)?,
                Target::Fd(fd) => {
                    let Some(id) = self.files.fds.get(fd)?.kind.inode() else { return Ok(0) };
                    id
                }
            }
        };
        if self.files.fs.get(id).is_some_and(|i| i.readonly) {
            return Err(EROFS.into());
        }
        self.files.fs.set_times(id, t[0], t[1], now);
        Ok(0)
    }

    /// `statfs`: [`Kernel::write_statfs`] for the file system `path` is on.
    pub(crate) fn sys_statfs(&mut self, mem: &mut dyn Memory, path: u64, buf: u64) -> SysResult {
        let Target::Path(w) = self.resolve(mem, crate::kernel::AT_FDCWD, path, 0, true)? else {
            return Err(ENOENT.into());
        };
        self.target_id(&w)?;
        self.write_statfs(mem, buf)
    }

    /// `fstatfs`: [`Kernel::write_statfs`] for the file system `fd` is on.
    pub(crate) fn sys_fstatfs(&mut self, mem: &mut dyn Memory, fd: u64, buf: u64) -> SysResult {
        self.files.fds.get(fd as i32)?;
        self.write_statfs(mem, buf)
    }

    /// A `struct statfs` of deja's one file system, the same whatever the path (`/proc` and
    /// `/dev` included): ext4's magic, 4 KiB blocks, the run's capacity and what its files hold,
    /// 255-byte names, mounted `relatime`.
    fn write_statfs(&mut self, mem: &mut dyn Memory, buf: u64) -> SysResult {
        const EXT4_SUPER_MAGIC: u64 = 0xef53;
        const ST_VALID_RELATIME: u64 = 0x20 | 0x1000;
        let blocks = self.files.fs.capacity() / 4096;
        let free = blocks.saturating_sub(self.files.fs.used().div_ceil(4096));
        let files = 1 << 20;
        let mut b = [0u8; 120];
        let words = [EXT4_SUPER_MAGIC, 4096, blocks, free, free, files, files - self.files.fs.inode_count() as u64];
        for (i, w) in words.iter().enumerate() {
            b[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
        }
        // f_fsid (two ints) stays 0; then f_namelen, f_frsize, f_flags.
        for (o, w) in [(64, 255u64), (72, 4096), (80, ST_VALID_RELATIME)] {
            b[o..o + 8].copy_from_slice(&w.to_le_bytes());
        }
        self.process.mappings.copy_out(mem, buf, &b)?;
        Ok(0)
    }

    /// The inode an extended-attribute call names: a path (followed unless `nofollow`) or a
    /// descriptor.
    fn xattr_target(&mut self, mem: &mut dyn Memory, path: Option<u64>, fd: u64, nofollow: bool) -> Result<(), i32> {
        match path {
            Some(p) => {
                let Target::Path(w) = self.resolve(mem, crate::kernel::AT_FDCWD, p, 0, !nofollow)? else {
                    return Err(ENOENT);
                };
                self.target_id(&w).map(|_| ())
            }
            None => self.files.fds.get(fd as i32).map(|_| ()),
        }
    }

    /// The extended-attribute calls: no file has any, and none can be set, as on a file system
    /// without them: `getxattr` and `removexattr` say `ENODATA`, `listxattr` lists nothing,
    /// `setxattr` is `EOPNOTSUPP`. `which` is 0 for get, 1 for list, 2 for set, 3 for remove.
    pub(crate) fn sys_xattr(
        &mut self,
        mem: &mut dyn Memory,
        which: u8,
        path: Option<u64>,
        fd: u64,
        nofollow: bool,
    ) -> SysResult {
        self.xattr_target(mem, path, fd, nofollow)?;
        match which {
            1 => Ok(0),
            2 => Err(EOPNOTSUPP.into()),
            _ => Err(ENODATA.into()),
        }
    }
}
