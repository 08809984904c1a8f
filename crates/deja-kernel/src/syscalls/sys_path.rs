//! Naming and finding files: how the path argument of a syscall resolves (the `*at` family's
//! directory fds, `AT_EMPTY_PATH`, symlinks), `openat` (a FIFO's open is in
//! [`crate::syscalls::sys_net`]), the `stat` family (`fstat` included: one encoding), `access`,
//! `getcwd`, `readlink` and `getdents64`. What `/proc/self/fd` answers to them is in
//! [`crate::syscalls::sys_procfd`]; what `/proc/<pid>` holds for each process is in [`crate::task::procs`]
//! (a directory fd opened on `/proc/<pid>` keeps its pid for the `*at` calls; a working
//! directory there does not: relative paths then name the caller's own files).
//!
//! Paths resolve in [`crate::fs`]; declared input files and the executable are read-only
//! (`EROFS` when opened for writing), the generated files of `/proc/<pid>` give `EACCES`. Relative paths and
//! `AT_FDCWD` resolve from the working directory (`chdir`, `fchdir`; `/` unless the program
//! was started elsewhere, see [`crate::ProgramSpec::cwd`]), which `getcwd` names. Reading and writing what is open is in [`crate::syscalls::sys_io`]; namespace and sync calls
//! are in [`crate::syscalls::sys_fs`].

use crate::prelude::*;
use alloc::sync::Arc;

use crate::abi::errno::*;
use crate::abi::file::*;
use crate::files::fd::*;
use crate::fs::{ino_of, Kind, ProcView, Stat, Walked, PROC_EXE, ROOT};
use crate::kernel::{Kernel, SysResult, AT_FDCWD, MAX_IO};
use crate::syscalls::sys_procfd::push_dirent;
use crate::Memory;

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

/// Where a `*at` path resolves.
pub(crate) enum Target {
    /// A path, walked.
    Path(Walked),
    /// The file open on this fd (`AT_EMPTY_PATH`).
    Fd(i32),
}

impl Kernel {
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
        let p = self.process.mappings.read_cstr(mem, path, PATH_MAX)?;
        if p.is_empty() {
            if empty_ok {
                return Ok(Target::Fd(dirfd as i32));
            }
            return Err(ENOENT);
        }
        let (start, start_pid) = if p[0] == b'/' {
            (ROOT, None)
        } else if dirfd as i32 == -100 {
            (self.files.cwd, None)
        } else {
            let kind = &self.files.fds.get(dirfd as i32)?.kind;
            (kind.listing().ok_or(ENOTDIR)?.0, kind.proc_pid())
        };
        let fds = &self.files.fds;
        let view = ProcView {
            current: self.procs.current,
            start_pid,
            exe: &|pid| self.proc_exe(pid),
            fds: &|fd| crate::syscalls::sys_procfd::fd_target(fds, fd),
        };
        let w = self.files.fs.walk_fds(start, &p, follow, &view)?;
        if !self.faults.previous.is_empty() {
            let abs = match (&w.name, w.id) {
                (Some(n), _) => Some(self.files.fs.path_in(w.parent, n)),
                (None, Some(id)) => self.files.fs.dir_path(id),
                (None, None) => None,
            };
            if let Some(abs) = abs {
                self.faults.observe(&abs);
            }
        }
        Ok(Target::Path(w))
    }

    /// Notes the path a syscall that failed with `ENOENT` looked for ([`Lookups`]): its
    /// first path argument, absolute or from the working directory (a path relative to
    /// another directory fd is not noted).
    ///
    /// [`Lookups`]: crate::record::not_found::Lookups
    pub(crate) fn note_not_found(&mut self, mem: &dyn Memory, nr: u64, args: &[u64; 6]) {
        let paths = crate::syscalls::read_paths(nr, args, &self.process.mappings, mem);
        let Some((i, p)) = paths.iter().enumerate().find_map(|(i, p)| p.as_ref().map(|p| (i, p))) else { return };
        let base = match p.first() {
            Some(b'/') => "/".to_string(),
            Some(_) if i == 0 || args[0] as i32 == -100 => match self.files.fs.dir_path(self.files.cwd) {
                Some(d) => d,
                None => return,
            },
            _ => return,
        };
        let Ok((norm, _)) = crate::fs::normalize(&base, p) else { return };
        if let Some(missing) = self.files.fs.first_missing(&norm) {
            self.lookups.note(&norm, &missing);
        }
    }

    /// The inode a resolved path names (`ENOENT`, or `ENOTDIR` for a trailing `/` on a
    /// non-directory).
    pub(crate) fn target_id(&self, w: &Walked) -> Result<u64, i32> {
        let id = w.id.ok_or(ENOENT)?;
        if w.trailing && !self.files.fs.get(id).is_some_and(|i| i.is_dir()) {
            return Err(ENOTDIR);
        }
        Ok(id)
    }

    fn stat_of_fd(&self, fd: i32) -> Result<Stat, i32> {
        if fd == -100 {
            return Ok(self.files.fs.stat(self.files.cwd));
        }
        Ok(self.files.fds.get(fd)?.kind.stat(&self.files.fs))
    }

    fn stat_of(&self, t: &Target) -> Result<Stat, i32> {
        match t {
            Target::Fd(fd) => self.stat_of_fd(*fd),
            // An entry of `/proc/self/fd`: the link, or what its fd has open.
            Target::Path(Walked { proc_fd: Some(p), id: None, trailing, .. }) => match p.followed {
                false => self.fd_link_stat(p.fd),
                true if *trailing => Err(ENOTDIR),
                true => self.stat_of_fd(p.fd),
            },
            // `/proc/self` itself: a link to the pid's name.
            Target::Path(w) if w.self_link => {
                let mut st = self.files.fs.stat(self.target_id(w)?);
                st.mode = S_IFLNK | 0o777;
                st.size = self.procs.current.to_string().len() as u64;
                st.nlink = 1;
                st.ino = ino_of("/proc/self");
                Ok(st)
            }
            Target::Path(w) => Ok(self.node_stat(self.target_id(w)?, w.pid)),
        }
    }

    /// The status of inode `id`, reached in the `/proc/<pid>` of `pid` if `Some` (see
    /// [`crate::fs::Fs::proc_stat`]).
    fn node_stat(&self, id: u64, pid: Option<u64>) -> Stat {
        match pid {
            Some(pid) if pid != self.procs.current => self.files.fs.proc_stat(id, pid),
            _ => self.files.fs.stat(id),
        }
    }

    /// The path of the inode `id` a walk led to, as the fault rules and the description name
    /// it: the path it was reached by, or for an entry of `/proc/self/fd` the path its fd was
    /// opened by.
    pub(crate) fn walked_path(&self, w: &Walked, id: u64) -> String {
        if let Some(FileKind::Inode { path, .. }) =
            w.proc_fd.and_then(|p| self.files.fds.get(p.fd).ok()).map(|f| &f.kind)
        {
            return path.clone();
        }
        let path = match &w.name {
            Some(n) => self.files.fs.path_in(w.parent, n),
            None => self.files.fs.dir_path(id).unwrap_or_default(),
        };
        // A file of `/proc/<pid>` by its pid's name, not the shared directory's.
        match (w.pid, path.strip_prefix("/proc/self")) {
            (Some(pid), Some(rest)) if rest.is_empty() || rest.starts_with('/') => format!("/proc/{pid}{rest}"),
            _ => path,
        }
    }

    fn write_stat(&self, mem: &mut dyn Memory, buf: u64, st: &Stat) -> Result<(), i32> {
        let mut b = [0u8; 144];
        let mut put = |o: usize, v: u64, n: usize| b[o..o + n].copy_from_slice(&v.to_le_bytes()[..n]);
        put(0, st.dev, 8);
        put(8, st.ino, 8);
        put(16, st.nlink, 8);
        put(24, u64::from(st.mode), 4);
        put(28, crate::mm::stack::GUEST_UID, 4);
        put(32, crate::mm::stack::GUEST_UID, 4);
        put(40, st.rdev, 8);
        put(48, st.size, 8);
        put(56, 4096, 8);
        put(64, st.size.div_ceil(4096) * 8, 8);
        for (i, o) in [72, 88, 104].into_iter().enumerate() {
            put(o, st.times[i] / 1_000_000_000, 8);
            put(o + 8, st.times[i] % 1_000_000_000, 8);
        }
        self.process.mappings.copy_out(mem, buf, &b)
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
        put(20, crate::mm::stack::GUEST_UID, 4);
        put(24, crate::mm::stack::GUEST_UID, 4);
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
        self.process.mappings.copy_out(mem, buf, &b)?;
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
        // A FIFO's open served again while it waits for the other side.
        if let Some(id) = self.fifo_waited() {
            let limit = self.nofile();
            return self.fifo_open_again(id, flags, limit);
        }
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
        // An entry of `/proc/self/fd`: the link itself, or what it leads to outside the tree.
        match (w.proc_fd, w.id) {
            (Some(p), _) if !p.followed && excl => return Err(EEXIST.into()),
            (Some(p), _) if !p.followed && flags & O_PATH != 0 => return self.open_fd_link(p.fd, flags),
            (Some(p), _) if !p.followed => return Err(ELOOP.into()),
            (Some(p), None) => return self.reopen_fd(p.fd, flags, w.trailing),
            _ => {}
        }
        let limit = self.nofile();
        if !self.files.fds.has_free(limit) {
            return Err(EMFILE.into());
        }
        let now = self.sched.clock.realtime_ns();
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
                self.files.fs.may_create(&w)?;
                let p = self.files.fs.path_in(w.parent, name);
                self.io_point(crate::faults::IoOp::Create, &p, None, (0, 0))?;
                let perm = (mode as u32) & 0o7777 & !self.process.umask;
                self.files.fs.create_file(w.parent, name, perm, now)?
            }
            Some(id) => {
                if excl {
                    return Err(EEXIST.into());
                }
                let node = self.files.fs.get(id).ok_or(ENOENT)?;
                let is_dir = node.is_dir();
                let link = matches!(node.kind, Kind::Symlink(_) | Kind::ExeLink) || w.self_link;
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
                    Kind::ProcMaps | Kind::ProcInfo(_) if writing => return Err(EACCES.into()),
                    _ => {}
                }
                // Another process's fds are not listed (nor their links followed).
                if Some(id) == self.files.fs.proc_fd_dir() && w.pid.is_some_and(|p| p != self.procs.current) {
                    return Err(EACCES.into());
                }
                // The owner's permission bits (the program owns every file): reading needs
                // `r`, writing or truncating `w`.
                let need = if flags & O_PATH != 0 {
                    0
                } else {
                    (if acc != O_WRONLY { 0o400 } else { 0 }) | (if writing { 0o200 } else { 0 })
                };
                if node.mode & need != need {
                    return Err(EACCES.into());
                }
                if flags & O_TRUNC != 0
                    && matches!(node.kind, Kind::File(_))
                    && flags & O_PATH == 0
                    && self.files.fs.size(id) > 0
                {
                    let p = self.walked_path(&w, id);
                    self.io_point(crate::faults::IoOp::Truncate, &p, None, (0, 0))?;
                    self.files.fs.set_size(id, 0, now)?;
                }
                id
            }
        };
        let node = self.files.fs.get(id).ok_or(ENOENT)?;
        if matches!(node.kind, Kind::Socket) && flags & O_PATH == 0 {
            return Err(ENXIO.into());
        }
        if matches!(node.kind, Kind::Fifo) && flags & O_PATH == 0 {
            return self.open_fifo(id, flags, limit);
        }
        let opened_path = self.walked_path(&w, id);
        let pid = w.pid.unwrap_or(self.procs.current);
        let kind = match &node.kind {
            // The current process's `/proc/<pid>` is whichever process reads it, as `/proc/self`.
            Kind::Dir(_) => FileKind::Dir { id, after: None, pid: w.pid.filter(|&p| p != self.procs.current) },
            Kind::ProcMaps | Kind::ProcInfo(_) => {
                let text = match node.kind {
                    Kind::ProcInfo(what) => self.proc_file(pid, what)?,
                    _ => self.proc_maps_of(pid).into_bytes(),
                };
                let data: Arc<[u8]> = Arc::from(text);
                let mut stat = self.node_stat(id, Some(pid));
                stat.size = 0;
                FileKind::Regular { stat, path: opened_path, data }
            }
            Kind::DevNull => FileKind::DevNull,
            Kind::Random(m) => FileKind::Random(*m),
            Kind::MemDev(m) => FileKind::MemDev(*m),
            Kind::ExeLink => {
                FileKind::Regular { path: opened_path, data: Arc::from(&[][..]), stat: self.node_stat(id, Some(pid)) }
            }
            Kind::Static(_) if opened_path == PROC_EXE => {
                FileKind::Inode { id, path: self.files.fs.exe_path().to_string() }
            }
            _ => FileKind::Inode { id, path: opened_path },
        };
        if kind.inode().is_some() {
            self.files.fs.opened(id);
        }
        let keep = !(O_CREAT | O_EXCL | O_TRUNC | O_CLOEXEC | 0o400);
        let file = OpenFile::new(kind, (flags & keep) | O_LARGEFILE);
        Ok(self.files.fds.install(file, 0, limit, flags & O_CLOEXEC != 0)? as u64)
    }

    /// `creat`: `open` with `O_CREAT | O_WRONLY | O_TRUNC`.
    pub(crate) fn sys_creat(&mut self, mem: &mut dyn Memory, path: u64, mode: u64) -> SysResult {
        self.sys_openat(mem, AT_FDCWD, path, u64::from(O_CREAT | O_WRONLY | O_TRUNC), mode)
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
            Target::Fd(fd) => self.files.fds.get(*fd).ok().and_then(|f| f.kind.inode()),
        };
        let node = id.and_then(|id| self.files.fs.get(id));
        if mode & 2 != 0 {
            match node {
                Some(n) if n.readonly && n.is_dir() => return Err(EACCES.into()),
                Some(n) if n.readonly && !matches!(n.kind, Kind::DevNull | Kind::Random(_) | Kind::MemDev(_)) => {
                    return Err(EROFS.into())
                }
                _ => {}
            }
        }
        // The owner's bits: the program owns every file and has no privileges.
        let need = (mode as u32 & 7) << 6;
        if st.mode & need != need {
            return Err(EACCES.into());
        }
        Ok(0)
    }

    /// `getcwd`: the working directory's path; `ENOENT` once it has been removed.
    pub(crate) fn sys_getcwd(&mut self, mem: &mut dyn Memory, buf: u64, size: u64) -> SysResult {
        let mut path = self.files.fs.dir_path(self.files.cwd).ok_or(ENOENT)?.into_bytes();
        path.push(0);
        if size < path.len() as u64 {
            return Err(ERANGE.into());
        }
        self.process.mappings.copy_out(mem, buf, &path)?;
        Ok(path.len() as u64)
    }

    pub(crate) fn sys_chdir(&mut self, mem: &mut dyn Memory, path: u64) -> SysResult {
        let Target::Path(w) = self.resolve(mem, AT_FDCWD, path, 0, true)? else {
            return Err(ENOENT.into());
        };
        let id = self.target_id(&w)?;
        self.enter_dir(id)
    }

    pub(crate) fn sys_fchdir(&mut self, fd: u64) -> SysResult {
        let id = self.files.fds.get(fd as i32)?.kind.inode().ok_or(ENOTDIR)?;
        self.enter_dir(id)
    }

    /// Makes directory `id` the working directory (`ENOTDIR`, or `EACCES` without search
    /// permission).
    fn enter_dir(&mut self, id: u64) -> SysResult {
        let inode = self.files.fs.get(id).ok_or(ENOENT)?;
        if !inode.is_dir() {
            return Err(ENOTDIR.into());
        }
        if self.files.fs.stat(id).mode & 0o100 == 0 {
            return Err(EACCES.into());
        }
        self.files.cwd = id;
        Ok(0)
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
        if let Some(p) = w.proc_fd.filter(|p| !p.followed) {
            let target = self.fd_link_text(p.fd)?.into_bytes();
            let n = target.len().min(size as usize);
            self.process.mappings.copy_out(mem, buf, &target[..n])?;
            return Ok(n as u64);
        }
        let id = self.target_id(&w)?;
        let target = match self.files.fs.get(id).map(|i| &i.kind) {
            _ if w.self_link => self.procs.current.to_string().into_bytes(),
            Some(Kind::ExeLink) => {
                self.proc_exe(w.pid.unwrap_or(self.procs.current)).flatten().ok_or(ENOENT)?.into_bytes()
            }
            Some(Kind::Symlink(t)) => t.as_bytes().to_vec(),
            _ => return Err(EINVAL.into()),
        };
        let n = target.len().min(size as usize);
        self.process.mappings.copy_out(mem, buf, &target[..n])?;
        Ok(n as u64)
    }

    pub(crate) fn sys_getdents64(&mut self, mem: &mut dyn Memory, fd: u64, buf: u64, count: u64) -> SysResult {
        let f = self.files.fds.get(fd as i32)?;
        let (id, after) = f.kind.listing().ok_or(ENOTDIR)?;
        if self.files.fs.proc_fd_dir() == Some(id) {
            // A listing opened for another process (inherited over a `fork`) lists none.
            if f.kind.proc_pid().is_some_and(|p| p != self.procs.current) {
                return Err(EACCES.into());
            }
            return self.list_fds(mem, fd as i32, id, buf, count);
        }
        let mut entries = self.files.fs.list(id);
        // `/proc`: `self` is a link, and every process of the table a directory.
        if self.files.fs.proc_dir() == Some(id) && self.files.fs.proc_self_dir().is_some() {
            for e in entries.iter_mut().skip(2).filter(|e| e.0 == "self") {
                e.1 = 10;
                e.2 = ino_of("/proc/self");
            }
            let named: Vec<String> = entries.iter().skip(2).map(|e| e.0.clone()).collect();
            for &pid in self.procs.table.keys() {
                let name = pid.to_string();
                if !named.contains(&name) {
                    let dir = self.files.fs.proc_self_dir().unwrap_or(ROOT);
                    entries.push((name, 4, self.node_stat(dir, Some(pid)).ino));
                }
            }
            entries[2..].sort_by(|a, b| a.0.cmp(&b.0));
        }
        // Another process's `/proc/<pid>`: its own inode numbers.
        if let Some(pid) = f.kind.proc_pid() {
            for e in entries.iter_mut().skip(2) {
                if let Some(child) = self.files.fs.entry(id, &e.0) {
                    e.2 = self.node_stat(child, Some(pid)).ino;
                }
            }
            if let Some(dot) = entries.first_mut() {
                dot.2 = self.node_stat(id, Some(pid)).ino;
            }
        }
        let count = count.min(MAX_IO) as usize;
        // Position: `.` and `..` by the offset (0, 1), then the names after `after`.
        let mut pos = f.offset;
        let start = match (pos, &after) {
            (0 | 1, _) => pos as usize,
            (_, Some(a)) => 2 + entries[2..].iter().take_while(|e| e.0.as_str() <= *a).count(),
            (_, None) => entries.len().min(pos as usize),
        };
        let mut out = Vec::new();
        let mut last = after.map(str::to_string);
        for (name, dtype, ino) in entries.iter().skip(start) {
            if !push_dirent(&mut out, count, *ino, pos + 1, *dtype, name) {
                if out.is_empty() {
                    return Err(EINVAL.into());
                }
                break;
            }
            pos += 1;
            if pos > 2 {
                last = Some(name.clone());
            }
        }
        self.process.mappings.copy_out(mem, buf, &out)?;
        self.files.fds.get_mut(fd as i32)?.listed(pos, last);
        Ok(out.len() as u64)
    }
}
