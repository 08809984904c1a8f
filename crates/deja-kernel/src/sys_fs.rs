//! File system syscalls beyond open/read/write: writes to files with fault injection, the sync
//! family (durable writes), truncation, `fallocate`, the namespace calls (`mkdir`, `mknod`,
//! `unlink`, `rename`, `link`, `symlink`, ...), modes, times and locks.
//!
//! `sync_file_range` with `SYNC_FILE_RANGE_WRITE` (2) is an `fdatasync` of the whole file (a
//! durable write); without it (only the WAIT flags) it does nothing. Locks (`fcntl` record
//! locks, `flock`) are always granted (one process), `F_GETLK` always answers `F_UNLCK`; record
//! locks are kept per inode and start (at most [`MAX_LOCKS`](crate::files::MAX_LOCKS): then `ENOLCK`).

use crate::errno::*;
use crate::fail_stop::FailStop;
use crate::faults::{DecisionPoint, DurableOp, FaultKind, FaultRecord, IoErrno, IoOp, When};
use crate::fd::*;
use crate::files::MAX_LOCKS;
use crate::fs::Kind;
use crate::kernel::{Kernel, SysResult, SysStop};
use crate::prelude::*;
use crate::sys_path::{Target, AT_EMPTY_PATH, AT_SYMLINK_NOFOLLOW, PATH_MAX};
use crate::Memory;

/// `AT_REMOVEDIR`.
pub(crate) const AT_REMOVEDIR: u64 = 0x200;
/// `AT_SYMLINK_FOLLOW`.
const AT_SYMLINK_FOLLOW: u64 = 0x400;
/// The permission bits of a mode (`S_IRWXUGO`): what `umask` keeps.
const S_IRWXUGO: u64 = 0o777;
/// `UTIME_NOW`.
const UTIME_NOW: u64 = (1 << 30) - 1;
/// `UTIME_OMIT`.
const UTIME_OMIT: u64 = (1 << 30) - 2;

impl Kernel {
    /// A durable operation on `path` is about to take effect (`promotes`: something is pending
    /// on its target): counts it, and says whether the configured crash comes right before it
    /// (it is then armed, and the operation never happens). The crash comes before it when it is
    /// the durable write `crash_before_durable_write` names, or the `Before` crash placed on
    /// this operation by meaning ([`crate::faults::OpCrash`]).
    fn durable_before(&mut self, path: &str, promotes: bool) -> bool {
        let nth = {
            let c = self.faults.durable_ops.entry(path.to_string()).or_default();
            *c += 1;
            *c
        };
        if self.faults.durable_log.len() < crate::faults::MAX_DURABLE_LOG && self.faults.faultable(path) {
            let op = DurableOp { path: path.to_string(), nth, virtual_time_ns: self.sched.clock.now_ns(), promotes };
            self.faults.durable_log.push(op);
        }
        let next = self.faults.durable_writes + 1;
        if self.faults.config.crash_before_durable_write == Some(next) {
            self.faults.crash_due = true;
            self.faults.crash_point = format!("before durable write {next}");
            return true;
        }
        // The count of the processes of its name (not pid 1: its end is the node's), for
        // kills by meaning.
        if self.procs.current != 1 {
            *self.faults.process_ops.entry(self.process_name()).or_default() += 1;
            *self.faults.pid_ops.entry(self.procs.current).or_default() += 1;
        }
        self.crash_by_meaning(When::Before, path, nth) || self.kill_by_meaning(When::Before)
    }

    /// The durable operation on `path` took effect: counts the durable write and arms the crash
    /// when it is the configured one (`crash_after_durable_write`, or the `After` crash placed
    /// on it by meaning).
    fn durable_after(&mut self, path: &str) {
        self.faults.durable_writes += 1;
        self.faults.note_durable(path);
        if self.faults.config.crash_after_durable_write == Some(self.faults.durable_writes) {
            self.faults.crash_due = true;
            self.faults.crash_point = format!("after durable write {}", self.faults.durable_writes);
            return;
        }
        let nth = self.faults.durable_ops.get(path).copied().unwrap_or(0);
        if !self.crash_by_meaning(When::After, path, nth) {
            self.kill_by_meaning(When::After);
        }
    }

    /// Arms the kill placed at `when` on the durable operation the current process just made
    /// (counted over the processes of its name, or its pid's own), if there is one (never for
    /// pid 1). True if it struck: the operation does not happen when it struck before it.
    fn kill_by_meaning(&mut self, when: When) -> bool {
        let pid = self.procs.current;
        if pid == 1 || self.faults.kill_due.is_some() {
            return false;
        }
        let name = self.process_name();
        let by_name = self.faults.process_ops.get(&name).copied().unwrap_or(0);
        let by_pid = self.faults.pid_ops.get(&pid).copied().unwrap_or(0);
        let Some(k) = self.faults.config.kill_process.iter().find(|k| {
            k.when == when
                && match k.pid() {
                    Some(p) => p == pid && k.nth == by_pid,
                    None => k.name == name && k.nth == by_name,
                }
        }) else {
            return false;
        };
        let point = k.point();
        self.faults.ledger.push(crate::faults::FaultRecord {
            kind: crate::faults::FaultKind::Kill,
            point: point.clone(),
            syscall_index: self.record.tracer.syscalls(),
            path: None,
            selected: true,
            applied: true,
            observed: false,
        });
        self.faults.kill_due = Some(point);
        true
    }

    /// Arms the crash placed by meaning on the `nth` durable operation on `path`, at `when`, if
    /// there is one and storage faults may strike the path.
    fn crash_by_meaning(&mut self, when: When, path: &str, nth: u64) -> bool {
        if !self.faults.faultable(path) {
            return false;
        }
        let Some(c) = self.faults.config.crash_at.iter().find(|c| c.when == when && c.nth == nth && c.path == path)
        else {
            return false;
        };
        self.faults.crash_point = c.point();
        self.faults.crash_keep = c.keep.clone();
        self.faults.crash_struck = Some(c.clone());
        self.faults.crash_due = true;
        true
    }

    /// The fail-stop rule ([`crate::faults::FaultState::fail_stop`]) on a syscall's result: a
    /// program that stops after an injected I/O error ends its life there as a crash whose
    /// image keeps everything pending (so it restarts on its disk as it left it), or, with no
    /// lives left, its stop is marked as one after a fault.
    pub(crate) fn fail_stop(&mut self, res: &mut SysResult) {
        if self.faults.crash_due {
            return;
        }
        let Err(SysStop::Exit(status)) = &*res else { return };
        let (stop, why) = self.faults.fail_stop(status);
        self.faults.not_fail_stop = why;
        match stop {
            FailStop::No => {}
            FailStop::Restart(words) => {
                self.faults.crash_point = words;
                self.faults.crash_due = true;
                self.faults.fail_stopped = true;
                *res = Ok(0);
            }
            FailStop::Stands(words) => self.faults.stopped_after_fault = Some(words),
        }
    }

    /// Counts one `op` on `path` and decides whether it fails: a placed error
    /// ([`crate::faults::ErrorRule`]) for this occurrence, else the configured rates (`rates`:
    /// EIO then ENOSPC, in parts per million). `range` is the byte range of a read. Records a
    /// strike in the ledger and returns its errno.
    pub(crate) fn io_point(
        &mut self,
        op: IoOp,
        path: &str,
        range: Option<(u64, u64)>,
        rates: (u32, u32),
    ) -> Result<(), i32> {
        self.io_point_as(op, path, None, range, rates)
    }

    /// [`Kernel::io_point`] for an operation with a second path a rule may name (a rename's
    /// target); it is counted under `path`.
    pub(crate) fn io_point_as(
        &mut self,
        op: IoOp,
        path: &str,
        alias: Option<&str>,
        range: Option<(u64, u64)>,
        rates: (u32, u32),
    ) -> Result<(), i32> {
        let n = {
            let c = self.faults.op_counts.entry((op, path.to_string())).or_default();
            *c += 1;
            *c
        };
        let point = format!("{} #{n} {} {path}", op.name(), if op == IoOp::Write { "to" } else { "of" });
        if !self.faults.faultable(path) && !alias.is_some_and(|a| self.faults.faultable(a)) {
            return Ok(());
        }
        let placed = self.faults.config.errors.iter().find(|r| {
            r.op == op
                && (r.nth == 0 || r.nth == n)
                && (r.path == path || alias == Some(r.path.as_str()))
                && match (r.range, range) {
                    (Some((a, b)), Some((x, y))) => x < b && a < y,
                    (Some(_), None) => false,
                    (None, _) => true,
                }
        });
        self.faults.struck_keep = placed.and_then(|r| r.keep.clone());
        let errno = match placed {
            Some(rule) => Some(rule.errno),
            None => {
                let (eio, enospc) = rates;
                let at = |errno| DecisionPoint::IoError { errno, op, nth: n, path: path.to_string() };
                if self.faults.strike(eio, at(IoErrno::Eio)) {
                    Some(IoErrno::Eio)
                } else if self.faults.strike(enospc, at(IoErrno::Enospc)) {
                    Some(IoErrno::Enospc)
                } else {
                    None
                }
            }
        };
        let Some(errno) = errno else { return Ok(()) };
        self.faults.ledger.push(FaultRecord {
            kind: if errno == IoErrno::Enospc { FaultKind::Enospc } else { FaultKind::Eio },
            point: format!("{} on {point}", errno.name()),
            syscall_index: self.record.tracer.syscalls(),
            path: Some(path.to_string()),
            selected: true,
            applied: true,
            observed: true,
        });
        self.faults.faulted = true;
        Err(errno.value())
    }

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

    fn sync_one(&mut self, fd: u64) -> SysResult {
        let (id, path) = self.files.fds.get(fd as i32)?.sync_target(&self.files.fs)?;
        self.faults.syncs += 1;
        if let Err(e) = self.io_point(IoOp::Fsync, &path, None, (self.faults.config.eio_on_fsync_ppm, 0)) {
            // Linux drops the dirty pages of a failed sync: a retry succeeds, the data is gone.
            // With reordered writes, the sync may have written any subset back before it
            // failed (decisions, projected onto the crash model).
            if let Some(id) = id {
                self.failed_sync(id);
            }
            return Err(e.into());
        }
        let promotes = id.is_some_and(|id| self.files.fs.dirty(id));
        if self.durable_before(&path, promotes) {
            return Ok(0);
        }
        if let Some(id) = id {
            self.files.fs.flush(id);
        }
        self.durable_after(&path);
        Ok(0)
    }

    /// Settles the pending operations of a file whose sync failed: all dropped; or those the
    /// placed error names ([`crate::ErrorRule::keep`]) written back; or, when the crash model's
    /// weakest mode is on (`reordered_writes`), each kept or dropped by a decision. What is
    /// written back is projected onto the configured crash model, and recorded.
    fn failed_sync(&mut self, id: u64) {
        let named = self.faults.struck_keep.take();
        if !self.files.fs.is_file(id) {
            return self.files.fs.drop_pending(id);
        }
        let all = self.files.fs.pending_ops();
        let mine: Vec<crate::fs::PendingOp> = all.iter().filter(|o| o.target == id).cloned().collect();
        let mut sel = crate::fs::Selection { kept: vec![false; mine.len()], torn: None };
        let chosen = match named {
            Some(keep) => {
                for i in keep.into_iter().map(|i| i as usize).filter(|i| *i < mine.len()) {
                    sel.kept[i] = true;
                }
                true
            }
            None if self.faults.config.reordered_writes => {
                for (i, op) in mine.iter().enumerate() {
                    let point = DecisionPoint::FailedSyncKeep { what: op.what.clone() };
                    sel.kept[i] = self.faults.decide(point, 2) == 1;
                }
                true
            }
            None => false,
        };
        // Linux's usual outcome, everything dropped, is the fault itself: no model has a say.
        let sel = if chosen { self.faults.config.crash_model.project(&mine, &sel) } else { sel };
        if self.faults.failed_syncs.len() < crate::faults::MAX_DURABLE_LOG {
            let point = self.faults.ledger.last().map(|r| r.point.clone()).unwrap_or_default();
            let pending = mine.iter().map(|o| o.what.clone()).collect();
            let nothing = !sel.kept.contains(&true);
            let models = crate::fs::CrashModel::ALL
                .into_iter()
                .filter(|m| nothing || *m == crate::fs::CrashModel::ProcessKill || m.allows(&mine, &sel))
                .collect();
            self.faults.failed_syncs.push(crate::FailedSync { point, pending, kept: sel.kept.clone(), models });
        }
        self.files.fs.settle_failed(id, &sel.kept);
    }

    pub(crate) fn sys_fsync(&mut self, fd: u64, data_only: bool) -> SysResult {
        let _ = data_only;
        self.sync_one(fd)
    }

    pub(crate) fn sys_sync_file_range(&mut self, fd: u64, off: u64, n: u64, flags: u64) -> SysResult {
        if flags & !7 != 0
            || (off as i64) < 0
            || (n as i64) < 0
            || off.checked_add(n).is_none_or(|e| e > i64::MAX as u64)
        {
            return Err(EINVAL.into());
        }
        self.files.fds.get(fd as i32)?.kind.sync_range()?;
        if flags & 2 == 0 {
            return Ok(0);
        }
        self.sync_one(fd)
    }

    pub(crate) fn sys_syncfs(&mut self, fd: u64) -> SysResult {
        self.files.fds.get(fd as i32)?;
        self.faults.syncs += 1;
        if let Err(e) = self.io_point(IoOp::Fsync, "/", None, (self.faults.config.eio_on_fsync_ppm, 0)) {
            self.files.fs.drop_all();
            return Err(e.into());
        }
        let promotes = self.files.fs.any_dirty();
        if self.durable_before("/", promotes) {
            return Ok(0);
        }
        self.files.fs.flush_all();
        self.durable_after("/");
        Ok(0)
    }

    pub(crate) fn sys_sync(&mut self) -> SysResult {
        self.faults.syncs += 1;
        let promotes = self.files.fs.any_dirty();
        if self.durable_before("/", promotes) {
            return Ok(0);
        }
        self.files.fs.flush_all();
        self.durable_after("/");
        Ok(0)
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
        let own = |v: u64| v as u32 == u32::MAX || u64::from(v as u32) == crate::stack::GUEST_UID;
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

    /// `fadvise64`: the advice is ignored; only the fd is checked.
    pub(crate) fn sys_fadvise64(&mut self, fd: u64) -> SysResult {
        self.files.fds.get(fd as i32)?;
        Ok(0)
    }

    pub(crate) fn sys_flock(&mut self, fd: u64, op: u64) -> SysResult {
        self.files.fds.get(fd as i32)?;
        match op & !4 {
            1 | 2 | 8 => Ok(0),
            _ => Err(EINVAL.into()),
        }
    }

    /// `F_GETLK`/`F_SETLK`/`F_SETLKW` and their open-file-description forms on the `struct
    /// flock` at `arg`, as Linux rules them: a process's locks (or a description's) on a file
    /// conflict with another owner's that overlap when either is a write lock; `F_GETLK`
    /// answers the first conflicting lock (with its owner's pid, -1 for a description's) or
    /// `F_UNLCK`; `F_SETLK` is `EAGAIN` on a conflict and `F_SETLKW` waits for it to go; a lock
    /// replaces the owner's locks under its range, splitting them, and joins its neighbours of
    /// the same type.
    pub(crate) fn fcntl_lock(&mut self, mem: &mut dyn Memory, fd: i32, cmd: u32, arg: u64) -> SysResult {
        use crate::files::OFD_OWNER;
        let f = self.files.fds.get(fd)?;
        let (readable, writable, offset) = (f.readable(), f.writable(), f.offset);
        let id = f.kind.inode();
        let (key, size) = id.map_or((0, 0), |id| {
            let st = self.files.fs.stat(id);
            (st.ino, st.size)
        });
        let desc = self.files.fds.entry(fd)?.desc;
        let mut b = [0u8; 32];
        self.process.mappings.copy_in(mem, arg, &mut b)?;
        let ty = u16::from_le_bytes([b[0], b[1]]);
        let whence = u16::from_le_bytes([b[2], b[3]]);
        let start = i64::from_le_bytes(b[8..16].try_into().unwrap_or_default());
        let len = i64::from_le_bytes(b[16..24].try_into().unwrap_or_default());
        let pid_field = i32::from_le_bytes(b[24..28].try_into().unwrap_or_default());
        let ofd = matches!(cmd, 36..=38);
        if ty > 2 || whence > 2 || (ofd && pid_field != 0) {
            return Err(EINVAL.into());
        }
        let base = match whence {
            0 => 0,
            1 => offset as i64,
            _ => size as i64,
        };
        let s = base.checked_add(start).filter(|s| *s >= 0).ok_or(EINVAL)? as u64;
        let (lo, hi) = match len {
            0 => (s, u64::MAX),
            l if l > 0 => (s, s.checked_add(l as u64).ok_or(EINVAL)?),
            l => (s.checked_sub(l.unsigned_abs()).ok_or(EINVAL)?, s),
        };
        let owner = if ofd { OFD_OWNER | desc } else { self.pid_of(self.caller()) };
        let conflict = |k: &Self, want: u16| {
            k.files
                .locks
                .iter()
                .find(|((ino, o, st), (t, end))| {
                    *ino == key && *o != owner && *st < hi && lo < *end && (want == 1 || *t == 1)
                })
                .map(|((_, o, st), (t, end))| (*o, *st, *t, *end))
        };
        if cmd == 5 || cmd == 36 {
            if ty == 2 {
                return Err(EINVAL.into());
            }
            match conflict(self, ty) {
                Some((o, st, t, end)) => {
                    b[0..2].copy_from_slice(&t.to_le_bytes());
                    b[2..4].copy_from_slice(&0u16.to_le_bytes());
                    b[8..16].copy_from_slice(&st.to_le_bytes());
                    let l = if end == u64::MAX { 0 } else { end - st };
                    b[16..24].copy_from_slice(&l.to_le_bytes());
                    let who = if o & OFD_OWNER != 0 { -1i32 } else { o as i32 };
                    b[24..28].copy_from_slice(&who.to_le_bytes());
                }
                None => b[0..2].copy_from_slice(&2u16.to_le_bytes()),
            }
            self.process.mappings.copy_out(mem, arg, &b)?;
            return Ok(0);
        }
        match ty {
            0 if !readable => return Err(EBADF.into()),
            1 if !writable => return Err(EBADF.into()),
            _ => {}
        }
        if ty != 2 && conflict(self, ty).is_some() {
            if cmd == 7 || cmd == 38 {
                // Served again whenever a lock goes.
                return self.block_io(None, Err(EINTR.into()));
            }
            return Err(EAGAIN.into());
        }
        // The owner's locks under the range (and, of the same type, touching it) make way.
        let mine: Vec<crate::files::Lock> = self
            .files
            .locks
            .range((key, owner, 0)..=(key, owner, u64::MAX))
            .filter(|((_, _, st), (t, end))| {
                (*st < hi && lo < *end) || (ty != 2 && *t == ty && (*end == lo || *st == hi))
            })
            .map(|(k, v)| (*k, *v))
            .collect();
        let (mut new_lo, mut new_hi) = (lo, hi);
        let mut add = Vec::new();
        for (k, (t, end)) in &mine {
            self.files.locks.remove(k);
            let st = k.2;
            if ty != 2 && *t == ty {
                new_lo = new_lo.min(st);
                new_hi = new_hi.max(*end);
                continue;
            }
            if st < lo {
                add.push((st, lo, *t));
            }
            if *end > hi {
                add.push((hi, *end, *t));
            }
        }
        if ty != 2 {
            add.push((new_lo, new_hi, ty));
        }
        let released = !mine.is_empty();
        if self.files.locks.len() + add.len() > MAX_LOCKS {
            for (k, v) in mine {
                self.files.locks.insert(k, v);
            }
            return Err(ENOLCK.into());
        }
        for (st, end, t) in add {
            self.files.locks.insert((key, owner, st), (t, end));
        }
        if released {
            // Whoever waits in F_SETLKW looks again.
            self.net.dirty = true;
        }
        Ok(0)
    }

    /// Lets go of the locks a close ended: the calling process's on the file `fd` named (a
    /// process's locks go with any of its fds on the file), and those of descriptions no fd
    /// holds any more. Called before the fd closes.
    pub(crate) fn release_locks_at_close(&mut self, fd: i32) {
        let Ok(f) = self.files.fds.get(fd) else { return };
        let Some(id) = f.kind.inode() else { return };
        let key = self.files.fs.stat(id).ino;
        let pid = self.procs.current;
        let before = self.files.locks.len();
        self.files.locks.retain(|(ino, o, _), _| !(*ino == key && *o == pid));
        if self.files.locks.len() != before {
            self.net.dirty = true;
        }
    }

    /// Lets go of the locks of process `pid` (it ended) and of descriptions no fd holds.
    pub(crate) fn release_locks_of(&mut self, pid: Option<u64>) {
        use crate::files::OFD_OWNER;
        let before = self.files.locks.len();
        let fds = &self.files.fds;
        self.files.locks.retain(|(_, o, _), _| Some(*o) != pid && (*o & OFD_OWNER == 0 || fds.holds(*o & !OFD_OWNER)));
        if self.files.locks.len() != before {
            self.net.dirty = true;
        }
    }
}
