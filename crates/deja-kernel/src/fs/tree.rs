//! Path resolution and the changes a program makes to the volatile layer: walking paths
//! (symlinks, `..`, limits), the directory entry operations (create, link, remove, rename)
//! that each become a pending operation of their directory, and a file's data and metadata.

use crate::prelude::*;
use alloc::collections::VecDeque;
use alloc::sync::Arc;

use super::*;

impl Fs {
    /// The normalized executable path.
    pub fn exe_path(&self) -> &str {
        &self.exe_path
    }

    /// Makes `path` what `/proc/self/exe` names (the running process's program).
    pub(crate) fn set_exe_path(&mut self, path: &str) {
        if self.exe_path != path {
            self.exe_path = path.to_string();
        }
    }

    /// The inode `id`.
    pub fn get(&self, id: u64) -> Option<&Inode> {
        self.inodes.get(&id)
    }

    pub(super) fn dir(&self, id: u64) -> Option<&DirData> {
        match &self.inodes.get(&id)?.kind {
            Kind::Dir(d) => Some(d),
            _ => None,
        }
    }

    /// The inode the entry `name` of directory `dir` names (the volatile layer).
    pub fn entry(&self, dir: u64, name: &str) -> Option<u64> {
        self.dir(dir)?.entries.get(name).copied()
    }

    fn dir_mut(&mut self, id: u64) -> Option<&mut DirData> {
        match &mut self.inodes.get_mut(&id)?.kind {
            Kind::Dir(d) => Some(d),
            _ => None,
        }
    }

    /// How many inodes there are.
    pub fn inode_count(&self) -> usize {
        self.inodes.len()
    }

    /// Bytes the file system may hold ([`super::FsConfig::capacity_bytes`]).
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Bytes of file contents held (the volatile view).
    pub fn used(&self) -> u64 {
        self.used
    }

    /// Resolves `path` from the directory `start` (for relative paths; `/` for absolute ones).
    /// Intermediate symlinks are always followed, the last one when `follow` (or the path ends
    /// with `/`).
    pub fn walk(&self, start: u64, path: &[u8], follow: bool) -> Result<Walked, i32> {
        self.walk_as(start, path, follow, false, None)
    }

    /// [`Fs::walk`] for the program: each directory it looks a name up in must give it search
    /// permission (`EACCES` otherwise), as Linux's `may_lookup` asks. The program owns every
    /// file, so the owner's bits are the ones that count.
    pub fn walk_checked(&self, start: u64, path: &[u8], follow: bool) -> Result<Walked, i32> {
        self.walk_as(start, path, follow, true, None)
    }

    /// [`Fs::walk_checked`] for the program, with its processes in `/proc` as `view` shows
    /// them:
    ///
    /// - In `/proc`, the name `self` is a link to the current pid's name (`readlink` gives
    ///   it; a walk that follows it counts one symlink, [`MAX_SYMLINKS`]), and the decimal
    ///   name of a process of the table (no sign, no leading zero) is the directory every
    ///   process shares, `/proc/self` of the tree, for that process ([`Walked::pid`]). A
    ///   pid not in the table does not exist.
    /// - In that directory, `exe` links to the process's program (a zombie's leads nowhere:
    ///   `ENOENT`), and `fd` is the current process's fd table: a decimal name (no sign, no
    ///   leading zero, as Linux parses it) of an open fd is a link that counts as a symlink
    ///   followed and leads straight to what the fd has open, not to a path ([`ProcFd`]). Any
    ///   other name there does not exist. Another process's `fd` directory may be named but
    ///   not searched (`EACCES`).
    pub fn walk_fds(&self, start: u64, path: &[u8], follow: bool, view: &ProcView<'_>) -> Result<Walked, i32> {
        self.walk_as(start, path, follow, true, Some(view))
    }

    /// `/proc/self/fd`'s inode, if the tree has it where [`Fs::new`] put it.
    pub fn proc_fd_dir(&self) -> Option<u64> {
        let id = *self.dir(self.proc_self_dir()?)?.entries.get("fd")?;
        self.inodes.get(&id).filter(|i| i.readonly && !i.persist && i.is_dir()).map(|_| id)
    }

    /// `/proc`'s inode, if the tree has it where [`Fs::new`] put it.
    pub fn proc_dir(&self) -> Option<u64> {
        let id = *self.dir(ROOT)?.entries.get("proc")?;
        self.inodes.get(&id).filter(|i| i.readonly && !i.persist && i.is_dir()).map(|_| id)
    }

    /// `/proc/self`'s inode (the directory of every `/proc/<pid>`), if the tree has it where
    /// [`Fs::new`] put it.
    pub fn proc_self_dir(&self) -> Option<u64> {
        let id = *self.dir(self.proc_dir()?)?.entries.get("self")?;
        self.inodes.get(&id).filter(|i| i.readonly && !i.persist && i.is_dir()).map(|_| id)
    }

    fn walk_as(
        &self,
        start: u64,
        path: &[u8],
        follow: bool,
        search: bool,
        view: Option<&ProcView<'_>>,
    ) -> Result<Walked, i32> {
        if path.is_empty() {
            return Err(ENOENT);
        }
        if path.len() >= PATH_MAX {
            return Err(ENAMETOOLONG);
        }
        let path = core::str::from_utf8(path).map_err(|_| ENOENT)?;
        let trailing = path.ends_with('/');
        let mut comps: VecDeque<String> = VecDeque::new();
        let mut cur = if path.starts_with('/') { ROOT } else { start };
        push_front_all(&mut comps, path)?;
        let mut links = 0u32;
        // `/proc`, `/proc/self` and `/proc/self/fd`, where a view adds what the tree does not
        // hold (the processes, the fds); and the process whose `/proc/<pid>` the walk is in.
        let (proc_dir, pid_dir, fd_dir) = match view {
            Some(_) => (self.proc_dir(), self.proc_self_dir(), self.proc_fd_dir()),
            None => (None, None, None),
        };
        let in_pid_dir = |id: u64| pid_dir == Some(id) || fd_dir == Some(id);
        let mut pid = view.and_then(|v| v.start_pid).filter(|_| !path.starts_with('/'));
        let done = |parent: u64, name: Option<String>, id: Option<u64>, pid: Option<u64>| Walked {
            parent,
            name,
            id,
            trailing,
            proc_fd: None,
            pid: pid.filter(|_| id.is_some_and(in_pid_dir) || in_pid_dir(parent)),
            self_link: false,
        };
        while let Some(c) = comps.pop_front() {
            if !in_pid_dir(cur) {
                pid = None;
            }
            let d = self.dir(cur).ok_or(ENOTDIR)?;
            if search && self.inodes.get(&cur).is_none_or(|i| i.mode & 0o100 == 0) {
                return Err(EACCES);
            }
            let last = comps.is_empty();
            if c == "." || c == ".." {
                let next = if c == "." { cur } else { d.parent };
                if last {
                    let parent = self.dir(next).map_or(next, |nd| nd.parent);
                    return Ok(done(parent, None, Some(next), pid));
                }
                cur = next;
                continue;
            }
            // The processes of `/proc`.
            if let (Some(v), Some(pd), true) = (view, pid_dir, proc_dir == Some(cur)) {
                if c == "self" {
                    if last && !follow && !trailing {
                        return Ok(Walked { self_link: true, ..done(cur, Some(c), Some(pd), Some(v.current)) });
                    }
                    links += 1;
                    if links > MAX_SYMLINKS {
                        return Err(ELOOP);
                    }
                    comps.push_front(v.current.to_string());
                    continue;
                }
                if let Some(p) = pid_name(&c).filter(|&p| (v.exe)(p).is_some()) {
                    pid = Some(p);
                    if last {
                        return Ok(done(cur, Some(c), Some(pd), pid));
                    }
                    cur = pd;
                    continue;
                }
            }
            let Some(&child) = d.entries.get(&c) else {
                let entry = match (view, fd_name(&c)) {
                    (Some(v), _) if fd_dir == Some(cur) && pid.is_some_and(|p| p != v.current) => return Err(EACCES),
                    (Some(v), Some(fd)) if fd_dir == Some(cur) => (v.fds)(fd).map(|t| (fd, t)),
                    _ => None,
                };
                let Some((fd, target)) = entry else {
                    if last {
                        return Ok(done(cur, Some(c), None, pid));
                    }
                    return Err(ENOENT);
                };
                if last && !follow && !trailing {
                    let proc_fd = Some(ProcFd { fd, followed: false });
                    return Ok(Walked { proc_fd, ..done(cur, Some(c), None, pid) });
                }
                links += 1;
                if links > MAX_SYMLINKS {
                    return Err(ELOOP);
                }
                let proc_fd = Some(ProcFd { fd, followed: true });
                match target {
                    FdTarget::Inode(id) if !last => cur = id,
                    FdTarget::Inode(id) => {
                        // A directory's own parent, as for `.`; a file's is not known.
                        let parent = self.dir(id).map_or(cur, |d| d.parent);
                        return Ok(Walked { proc_fd, ..done(parent, None, Some(id), None) });
                    }
                    FdTarget::Other if !last => return Err(ENOTDIR),
                    FdTarget::Other => return Ok(Walked { proc_fd, ..done(cur, None, None, None) }),
                }
                continue;
            };
            let node = self.inodes.get(&child).ok_or(ENOENT)?;
            let target = match (&node.kind, view) {
                (Kind::Symlink(t), _) => Some(t.clone()),
                // A process's program: the view's for a pid it named, else the current one's.
                (Kind::ExeLink, Some(v)) if !last || follow || trailing => {
                    Some((v.exe)(pid.unwrap_or(v.current)).flatten().ok_or(ENOENT)?)
                }
                (Kind::ExeLink, None) if self.exe_path != "/proc/self/exe" => Some(self.exe_path.clone()),
                _ => None,
            };
            if let Some(t) = target.filter(|_| !last || follow || trailing) {
                links += 1;
                if links > MAX_SYMLINKS {
                    return Err(ELOOP);
                }
                push_front_all(&mut comps, &t)?;
                if t.starts_with('/') {
                    cur = ROOT;
                }
                continue;
            }
            if last {
                return Ok(done(cur, Some(c), Some(child), pid));
            }
            cur = child;
        }
        // No component left: `/`, or a symlink to `/`.
        let parent = self.dir(cur).ok_or(ENOTDIR)?.parent;
        Ok(done(parent, None, Some(cur), pid))
    }

    /// A path naming inode `id` now, for what `/proc/self/fd` shows of a description opened as
    /// `opened`: `opened` while it still names `id`, else the first name that does (a
    /// rename), else `opened` with Linux's ` (deleted)` once no name is left.
    pub fn path_now(&self, id: u64, opened: &str) -> String {
        if self.walk(ROOT, opened.as_bytes(), false).is_ok_and(|w| w.id == Some(id)) {
            return opened.to_string();
        }
        if self.inodes.get(&id).is_some_and(|i| i.nlink > 0) {
            let named = self.inodes.iter().find_map(|(&dir, i)| match &i.kind {
                Kind::Dir(d) => d.entries.iter().find(|(_, c)| **c == id).map(|(n, _)| (dir, n)),
                _ => None,
            });
            if let Some(p) = named.and_then(|(dir, n)| self.dir_path(dir).map(|_| self.path_in(dir, n))) {
                return p;
            }
        }
        format!("{opened} (deleted)")
    }

    /// The id at the absolute path `path` (no symlinks followed at the end).
    pub fn lookup_abs(&self, path: &str) -> Option<u64> {
        self.walk(ROOT, path.as_bytes(), false).ok()?.id
    }

    /// The absolute path of directory `id` through the volatile tree (`None` when it is not
    /// reachable).
    pub fn dir_path(&self, mut id: u64) -> Option<String> {
        let mut names = Vec::new();
        let mut steps = 0usize;
        while id != ROOT {
            let parent = self.dir(id)?.parent;
            let (name, _) = self.dir(parent)?.entries.iter().find(|(_, c)| **c == id)?;
            names.push(name.clone());
            id = parent;
            steps += 1;
            if steps > self.inodes.len() {
                return None;
            }
        }
        names.reverse();
        Some(format!("/{}", names.join("/")))
    }

    /// `dir_path(parent)` joined with `name`.
    pub fn path_in(&self, parent: u64, name: &str) -> String {
        let base = self.dir_path(parent).unwrap_or_else(|| "?".into());
        if base == "/" {
            format!("/{name}")
        } else {
            format!("{base}/{name}")
        }
    }

    /// The status of inode `id`.
    pub fn stat(&self, id: u64) -> Stat {
        let Some(i) = self.inodes.get(&id) else {
            return Stat { dev: 0x801, ino: 0, mode: 0, nlink: 0, size: 0, rdev: 0, times: [0; 3] };
        };
        let (ty, size, rdev) = match &i.kind {
            Kind::File(f) => (S_IFREG, f.data.len() as u64, 0),
            Kind::Static(d) => (S_IFREG, d.len() as u64, 0),
            Kind::ProcMaps | Kind::ProcInfo(_) => (S_IFREG, 0, 0),
            Kind::Dir(_) => (S_IFDIR, 4096, 0),
            Kind::Symlink(t) => (S_IFLNK, t.len() as u64, 0),
            Kind::ExeLink => (S_IFLNK, 0, 0),
            Kind::DevNull => (S_IFCHR, 0, (1 << 8) | 3),
            Kind::Random(m) | Kind::MemDev(m) => (S_IFCHR, 0, (1 << 8) | u64::from(*m)),
            Kind::Socket => (S_IFSOCK, 0, 0),
            Kind::Fifo => (S_IFIFO, 0, 0),
        };
        let dev = match i.kind {
            Kind::ProcMaps | Kind::ExeLink | Kind::ProcInfo(_) => 0x16,
            Kind::DevNull | Kind::Random(_) | Kind::MemDev(_) => 0x5,
            _ => 0x801,
        };
        let nlink = match &i.kind {
            Kind::Dir(d) => {
                let subdirs = d.entries.values().filter(|c| self.inodes.get(c).is_some_and(|n| n.is_dir())).count();
                if i.nlink == 0 && id != ROOT {
                    0
                } else {
                    2 + subdirs as u64
                }
            }
            _ => i.nlink,
        };
        Stat { dev, ino: i.ino, mode: ty | i.mode, nlink, size, rdev, times: i.times }
    }

    /// [`Fs::stat`] of `id` as a node of `/proc/<pid>` for a process other than the current
    /// one: the directory `/proc/self` of the tree, its `fd` directory and their entries have
    /// the inode numbers of their names under the pid's directory, as each process's are its
    /// own on Linux (the current process's are the tree's).
    pub fn proc_stat(&self, id: u64, pid: u64) -> Stat {
        let mut st = self.stat(id);
        if let Some(ino) = self.proc_ino(id, pid) {
            st.ino = ino;
        }
        st
    }

    /// The inode number of `id` as a node of `/proc/<pid>` (see [`Fs::proc_stat`]); `None`
    /// for an inode outside `/proc/self`.
    pub fn proc_ino(&self, id: u64, pid: u64) -> Option<u64> {
        let dir = self.proc_self_dir()?;
        let name = if id == dir {
            String::new()
        } else if Some(id) == self.proc_fd_dir() {
            "/fd".to_string()
        } else {
            format!("/{}", self.dir(dir)?.entries.iter().find(|(_, c)| **c == id)?.0)
        };
        Some(ino_of(&format!("/proc/{pid}{name}")))
    }

    /// The contents of a regular file (volatile).
    pub fn contents(&self, id: u64) -> Option<&[u8]> {
        match &self.inodes.get(&id)?.kind {
            Kind::File(f) => Some(&f.data),
            Kind::Static(d) => Some(d),
            _ => None,
        }
    }

    /// The contents as a shareable snapshot (for file mappings).
    pub fn snapshot(&self, id: u64) -> Option<Arc<[u8]>> {
        match &self.inodes.get(&id)?.kind {
            Kind::File(f) => Some(Arc::from(f.data.as_slice())),
            Kind::Static(d) => Some(d.clone()),
            _ => None,
        }
    }

    /// The read-only contents at the absolute `path`, symlinks followed (a declared file, a
    /// file of the root, or the executable).
    pub fn static_at(&self, path: &str) -> Option<Arc<[u8]>> {
        let id = self.walk(ROOT, path.as_bytes(), true).ok()?.id?;
        match &self.inodes.get(&id)?.kind {
            Kind::Static(d) => Some(d.clone()),
            _ => None,
        }
    }

    /// The static contents at `path`, if equal to `data` (to share them after a restore).
    pub fn same_static(&self, path: &str, data: &Arc<[u8]>) -> Option<(Arc<[u8]>, u64)> {
        let id = self.walk(ROOT, path.as_bytes(), true).ok()?.id?;
        let node = self.inodes.get(&id)?;
        match &node.kind {
            Kind::Static(d) if d[..] == data[..] => Some((d.clone(), node.ino)),
            _ => None,
        }
    }

    /// Entries of directory `id`: `(name, d_type, ino)` for `.`, `..`, then by name.
    pub fn list(&self, id: u64) -> Vec<(String, u8, u64)> {
        let Some(d) = self.dir(id) else { return Vec::new() };
        let ino = |i: u64| self.inodes.get(&i).map_or(0, |n| n.ino);
        let mut out = vec![(".".to_string(), 4, ino(id)), ("..".to_string(), 4, ino(d.parent))];
        for (name, c) in &d.entries {
            let dt = self.inodes.get(c).map_or(0, |n| n.dtype());
            out.push((name.clone(), dt, ino(*c)));
        }
        out
    }

    /// Notes one more open description of `id`.
    pub fn opened(&mut self, id: u64) {
        if let Some(i) = self.inodes.get_mut(&id) {
            i.open += 1;
        }
    }

    /// Notes one open description of `id` fewer (and frees it when nothing names it).
    pub fn closed(&mut self, id: u64) {
        if let Some(i) = self.inodes.get_mut(&id) {
            i.open = i.open.saturating_sub(1);
        }
        self.collect(id);
    }

    /// Frees `id` if no entry (volatile or durable) and no description refers to it; cascades
    /// to the durable entries of a freed directory.
    pub(super) fn collect(&mut self, id: u64) {
        let mut work = vec![id];
        while let Some(id) = work.pop() {
            let free = id != ROOT
                && self.inodes.get(&id).is_some_and(|i| i.nlink + i.durable_links + i.pending_links + i.open == 0);
            if !free {
                // Unlinked and closed, but a crash may still bring it back (its durable entry, or a
                // pending one): it no longer takes space, and its volatile contents, which no one
                // can read any more, are let go. (`dropped` then says that they no longer mirror
                // the durable contents and the pending writes.)
                if let Some(Inode { nlink: 0, open: 0, kind: Kind::File(f), .. }) = self.inodes.get_mut(&id) {
                    if !f.data.is_empty() {
                        self.used -= f.data.len() as u64;
                        f.data = Vec::new();
                        f.dropped = true;
                    }
                }
                continue;
            }
            if let Some(i) = self.inodes.remove(&id) {
                self.used -= file_len(&i);
                if let Kind::Dir(d) = i.kind {
                    for op in d.pending.iter().flat_map(|p| &p.1) {
                        if let DirOp::Set(_, c) = op {
                            if let Some(n) = self.inodes.get_mut(c) {
                                n.pending_links -= 1;
                            }
                            work.push(*c);
                        }
                    }
                    for c in d.durable.values() {
                        if let Some(n) = self.inodes.get_mut(c) {
                            n.durable_links -= 1;
                        }
                        work.push(*c);
                    }
                    for c in d.entries.values() {
                        if let Some(n) = self.inodes.get_mut(c) {
                            n.nlink -= 1;
                        }
                        work.push(*c);
                    }
                }
            }
        }
    }

    fn touch(&mut self, id: u64, now: u64, data: bool) {
        if let Some(i) = self.inodes.get_mut(&id) {
            if data {
                i.times[1] = now;
            }
            i.times[2] = now;
        }
    }

    /// `Ok` if the program may change `dir`'s entries: a live, writable directory it may write
    /// and search (`ENOTDIR`, `EACCES`, `ENOENT` otherwise).
    pub fn writable_dir(&self, dir: u64) -> Result<(), i32> {
        let d = self.inodes.get(&dir).ok_or(ENOENT)?;
        if !d.is_dir() {
            return Err(ENOTDIR);
        }
        // Changing a directory's entries takes write and search permission (the owner's bits:
        // the program owns every file).
        if d.readonly || d.mode & 0o300 != 0o300 {
            return Err(EACCES);
        }
        if d.nlink == 0 && dir != ROOT {
            return Err(ENOENT);
        }
        Ok(())
    }

    /// Records a pending change of `dir`'s entries, at the next place in program order.
    fn push_dir_op(&mut self, dir: u64, op: DirOp) {
        if let DirOp::Set(_, id) = &op {
            if let Some(i) = self.inodes.get_mut(id) {
                i.pending_links += 1;
            }
        }
        let seq = self.seq;
        self.seq += 1;
        let Some(d) = self.dir_mut(dir) else { return };
        if d.pending.len() >= MAX_PENDING && d.pending.len() >= 2 {
            // Merge the two oldest changes into one, kept or lost as a whole.
            let (_, second) = d.pending.remove(1);
            d.pending[0].1.extend(second);
        }
        d.pending.push((seq, vec![op]));
    }

    /// Makes the changes `dir` recorded since it had `mark` pending ones into one operation:
    /// what one call did to one directory happens entirely or not at all.
    fn fuse_dir_ops(&mut self, dir: u64, mark: usize) {
        if let Some(d) = self.dir_mut(dir) {
            if d.pending.len() > mark + 1 {
                let tail: Vec<DirOp> = d.pending.drain(mark + 1..).flat_map(|p| p.1).collect();
                d.pending[mark].1.extend(tail);
            }
        }
    }

    fn pending_len(&self, dir: u64) -> usize {
        self.dir(dir).map_or(0, |d| d.pending.len())
    }

    fn add_entry(&mut self, dir: u64, name: &str, id: u64, now: u64) {
        if let Some(d) = self.dir_mut(dir) {
            d.entries.insert(name.to_string(), id);
        }
        if let Some(i) = self.inodes.get_mut(&id) {
            i.nlink += 1;
            if let Kind::Dir(d) = &mut i.kind {
                d.parent = dir;
            }
        }
        self.push_dir_op(dir, DirOp::Set(name.to_string(), id));
        self.touch(dir, now, true);
    }

    /// Removes the entry; returns the id it named (not freed yet: call `collect`).
    fn remove_entry(&mut self, dir: u64, name: &str, now: u64) -> Option<u64> {
        let id = self.dir_mut(dir)?.entries.remove(name)?;
        if let Some(i) = self.inodes.get_mut(&id) {
            i.nlink -= 1;
        }
        self.push_dir_op(dir, DirOp::Remove(name.to_string()));
        self.touch(dir, now, true);
        self.touch(id, now, false);
        Some(id)
    }

    fn check_name(name: &Option<String>) -> Result<&str, i32> {
        match name {
            Some(n) if n.len() > NAME_MAX => Err(ENAMETOOLONG),
            Some(n) => Ok(n),
            None => Err(EEXIST),
        }
    }

    /// Creates a regular file `name` in `dir`.
    pub fn create_file(&mut self, dir: u64, name: &str, mode: u32, now: u64) -> Result<u64, i32> {
        self.writable_dir(dir)?;
        let ino = self.fresh_ino("", false);
        let id = self.insert(ino, mode & 0o7777, Kind::File(FileData::new(Vec::new())), true, false, now);
        self.add_entry(dir, name, id, now);
        Ok(id)
    }

    /// `mkdir`.
    pub fn mkdir(&mut self, w: &Walked, mode: u32, now: u64) -> Result<u64, i32> {
        if w.id.is_some() {
            return Err(EEXIST);
        }
        let name = Self::check_name(&w.name)?.to_string();
        self.writable_dir(w.parent)?;
        let ino = self.fresh_ino("", false);
        let id = self.insert(ino, mode & 0o7777, Kind::Dir(DirData::default_for(w.parent)), true, false, now);
        self.add_entry(w.parent, &name, id, now);
        Ok(id)
    }

    /// A Unix socket's name `w` (`bind`): a node outside the durable layer.
    pub fn socket_node(&mut self, w: &Walked, mode: u32, now: u64) -> Result<u64, i32> {
        if w.id.is_some() {
            return Err(EADDRINUSE);
        }
        let name = Self::check_name(&w.name)?.to_string();
        self.writable_dir(w.parent)?;
        Ok(self.add_outside(w.parent, &name, Kind::Socket, mode, now))
    }

    /// Whether `mknod` may create `w`, and its name: `EEXIST` if it names something (`.` and
    /// `..` included), `ENOENT` for a missing name ending with `/`, and the parent's own
    /// errors (`EACCES` for a read-only directory, `ENOENT` for a removed one).
    pub fn may_create<'w>(&self, w: &'w Walked) -> Result<&'w str, i32> {
        if w.id.is_some() {
            return Err(EEXIST);
        }
        let name = Self::check_name(&w.name)?;
        if w.trailing {
            return Err(ENOENT);
        }
        self.writable_dir(w.parent)?;
        Ok(name)
    }

    /// `mknod` of a FIFO or a socket's name at `w` ([`Kind::Fifo`] or [`Kind::Socket`]): a
    /// node outside the durable layer.
    pub fn special_node(&mut self, w: &Walked, kind: Kind, mode: u32, now: u64) -> Result<u64, i32> {
        if !matches!(kind, Kind::Fifo | Kind::Socket) {
            return Err(EINVAL);
        }
        let name = self.may_create(w)?.to_string();
        Ok(self.add_outside(w.parent, &name, kind, mode, now))
    }

    /// A new node named `name` in `dir` that is not part of the disk (no crash image has it).
    fn add_outside(&mut self, dir: u64, name: &str, kind: Kind, mode: u32, now: u64) -> u64 {
        let ino = self.fresh_ino("", false);
        let id = self.insert(ino, mode & 0o7777, kind, false, false, now);
        self.add_entry(dir, name, id, now);
        id
    }

    /// `symlink`.
    pub fn symlink(&mut self, w: &Walked, target: String, now: u64) -> Result<u64, i32> {
        if w.id.is_some() {
            return Err(EEXIST);
        }
        let name = Self::check_name(&w.name)?.to_string();
        self.writable_dir(w.parent)?;
        let ino = self.fresh_ino("", false);
        let id = self.insert(ino, 0o777, Kind::Symlink(target), true, false, now);
        self.add_entry(w.parent, &name, id, now);
        Ok(id)
    }

    /// `link`: a new entry `w` for `target`.
    pub fn link(&mut self, target: u64, w: &Walked, now: u64) -> Result<(), i32> {
        let t = self.inodes.get(&target).ok_or(ENOENT)?;
        if t.is_dir() {
            return Err(EPERM);
        }
        // Another file system (the declared inputs, `/proc`, `/dev`); a FIFO or a socket's
        // name is not on the disk, but it is in this file system.
        if !t.persist && !matches!(t.kind, Kind::Fifo | Kind::Socket) {
            return Err(EXDEV);
        }
        if t.nlink == 0 {
            return Err(ENOENT);
        }
        if w.id.is_some() {
            return Err(EEXIST);
        }
        let name = Self::check_name(&w.name)?.to_string();
        self.writable_dir(w.parent)?;
        self.add_entry(w.parent, &name, target, now);
        Ok(())
    }

    /// `unlink` (not directories) or `rmdir` (only empty directories).
    pub fn remove(&mut self, w: &Walked, dir: bool, now: u64) -> Result<(), i32> {
        let Some(name) = &w.name else {
            return Err(if dir {
                if w.id == Some(ROOT) {
                    EBUSY
                } else {
                    EINVAL
                }
            } else {
                EISDIR
            });
        };
        let id = w.id.ok_or(ENOENT)?;
        let node = self.inodes.get(&id).ok_or(ENOENT)?;
        match (dir, node.is_dir()) {
            (true, false) => return Err(ENOTDIR),
            (false, true) => return Err(EISDIR),
            (false, false) if w.trailing => return Err(ENOTDIR),
            _ => {}
        }
        if node.readonly {
            return Err(if node.is_dir() { EACCES } else { EROFS });
        }
        if dir && self.dir(id).is_some_and(|d| !d.entries.is_empty()) {
            return Err(ENOTEMPTY);
        }
        self.writable_dir(w.parent)?;
        let name = name.clone();
        self.remove_entry(w.parent, &name, now);
        self.collect(id);
        Ok(())
    }

    /// `renameat2` with `RENAME_NOREPLACE` (1) and `RENAME_EXCHANGE` (2).
    pub fn rename(&mut self, from: &Walked, to: &Walked, flags: u32, now: u64) -> Result<(), i32> {
        let (Some(_), Some(tname)) = (&from.name, &to.name) else { return Err(EBUSY) };
        let src = from.id.ok_or(ENOENT)?;
        if tname.len() > NAME_MAX {
            return Err(ENAMETOOLONG);
        }
        let src_dir = self.inodes.get(&src).ok_or(ENOENT)?.is_dir();
        if !src_dir && (from.trailing || to.trailing) && flags & 2 == 0 {
            return Err(ENOTDIR);
        }
        self.writable_dir(from.parent)?;
        self.writable_dir(to.parent)?;
        let exchange = flags & 2 != 0;
        // A directory moving to another parent changes its `..`: it must be writable too (and,
        // exchanged, so must the one it swaps with).
        if from.parent != to.parent {
            let moved = core::iter::once(src).chain(to.id.filter(|_| exchange));
            for d in moved {
                if self.inodes.get(&d).is_some_and(|i| i.is_dir() && !i.readonly && i.mode & 0o200 == 0) {
                    return Err(EACCES);
                }
            }
        }
        if flags & 1 != 0 && to.id.is_some() {
            return Err(EEXIST);
        }
        if exchange && to.id.is_none() {
            return Err(ENOENT);
        }
        if self.inodes.get(&src).is_some_and(|i| i.readonly) || to.id.is_some_and(|t| self.readonly(t)) {
            return Err(EROFS);
        }
        if to.id == Some(src) {
            return Ok(());
        }
        let marks = (self.pending_len(from.parent), self.pending_len(to.parent));
        let r = self.rename_entries(src, src_dir, from, to, exchange, now);
        // One call, one operation per directory: a rename within a directory is atomic; across
        // two directories each side is pending in its own.
        self.fuse_dir_ops(from.parent, marks.0);
        if from.parent != to.parent {
            self.fuse_dir_ops(to.parent, marks.1);
            let seq_at = |fs: &Self, dir: u64, mark: usize| fs.dir(dir).and_then(|d| d.pending.get(mark)).map(|p| p.0);
            if let (Some(a), Some(b)) = (seq_at(self, from.parent, marks.0), seq_at(self, to.parent, marks.1)) {
                self.joined.insert(a.max(b), a.min(b));
            }
        }
        r
    }

    fn rename_entries(
        &mut self,
        src: u64,
        src_dir: bool,
        from: &Walked,
        to: &Walked,
        exchange: bool,
        now: u64,
    ) -> Result<(), i32> {
        let (Some(fname), Some(tname)) = (&from.name, &to.name) else { return Err(EBUSY) };
        // A directory may not move below itself (nor be replaced by an ancestor when exchanging).
        if src_dir && self.is_ancestor(src, to.parent) {
            return Err(EINVAL);
        }
        if let Some(dst) = to.id {
            let dst_dir = self.inodes.get(&dst).is_some_and(|i| i.is_dir());
            if exchange {
                if dst_dir && self.is_ancestor(dst, from.parent) {
                    return Err(EINVAL);
                }
                let (fp, tp) = (from.parent, to.parent);
                if let Some(d) = self.dir_mut(fp) {
                    d.entries.insert(fname.clone(), dst);
                }
                self.push_dir_op(fp, DirOp::Set(fname.clone(), dst));
                if let Some(d) = self.dir_mut(tp) {
                    d.entries.insert(tname.clone(), src);
                }
                self.push_dir_op(tp, DirOp::Set(tname.clone(), src));
                for (id, p) in [(dst, fp), (src, tp)] {
                    if let Some(Inode { kind: Kind::Dir(d), .. }) = self.inodes.get_mut(&id) {
                        d.parent = p;
                    }
                    self.touch(id, now, false);
                }
                self.touch(fp, now, true);
                self.touch(tp, now, true);
                return Ok(());
            }
            match (src_dir, dst_dir) {
                (true, false) => return Err(ENOTDIR),
                (false, true) => return Err(EISDIR),
                (true, true) if self.dir(dst).is_some_and(|d| !d.entries.is_empty()) => return Err(ENOTEMPTY),
                _ => {}
            }
            self.remove_entry(to.parent, tname, now);
            self.remove_entry(from.parent, fname, now);
            self.add_entry(to.parent, tname, src, now);
            self.collect(dst);
            return Ok(());
        }
        self.remove_entry(from.parent, fname, now);
        self.add_entry(to.parent, tname, src, now);
        Ok(())
    }

    fn readonly(&self, id: u64) -> bool {
        self.inodes.get(&id).is_some_and(|i| i.readonly)
    }

    /// True if `a` is `b` or above it in the volatile tree.
    fn is_ancestor(&self, a: u64, mut b: u64) -> bool {
        for _ in 0..=self.inodes.len() {
            if a == b {
                return true;
            }
            if b == ROOT {
                return false;
            }
            match self.dir(b) {
                Some(d) => b = d.parent,
                None => return false,
            }
        }
        false
    }

    fn file_mut(&mut self, id: u64) -> Result<&mut FileData, i32> {
        match &mut self.inodes.get_mut(&id).ok_or(EBADF)?.kind {
            Kind::File(f) => Ok(f),
            Kind::Dir(_) => Err(EISDIR),
            Kind::Static(_) => Err(EROFS),
            _ => Err(EINVAL),
        }
    }

    /// Size of a regular file.
    pub fn size(&self, id: u64) -> u64 {
        self.contents(id).map_or(0, |c| c.len() as u64)
    }

    /// Writes `data` at `off`; returns how many bytes were written (a partial write when the
    /// disk fills up; `ENOSPC` when nothing fits).
    pub fn write(&mut self, id: u64, off: u64, data: &[u8], now: u64) -> Result<u64, i32> {
        let (used, capacity, seq) = (self.used, self.capacity, self.seq);
        let f = self.file_mut(id)?;
        if data.is_empty() {
            return Ok(0);
        }
        let size = f.data.len() as u64;
        let limit = size.saturating_add(capacity.saturating_sub(used));
        let end = off.checked_add(data.len() as u64).ok_or(EFBIG)?;
        let n = if end <= limit {
            data.len() as u64
        } else if off >= limit {
            return Err(if off > i64::MAX as u64 { EFBIG } else { ENOSPC });
        } else {
            limit - off
        };
        let data = &data[..n as usize];
        let op = Pending::Write { off, data: data.to_vec() };
        op.apply(&mut f.data);
        let grown = f.data.len() as u64 - size;
        f.push(seq, op);
        self.seq += 1;
        self.used += grown;
        self.touch(id, now, true);
        self.changed.insert(id);
        Ok(n)
    }

    /// The files whose contents changed since the last call.
    pub fn take_changed(&mut self) -> alloc::collections::BTreeSet<u64> {
        core::mem::take(&mut self.changed)
    }

    /// Sets the size (`truncate`, `O_TRUNC`, growing `fallocate`).
    pub fn set_size(&mut self, id: u64, len: u64, now: u64) -> Result<(), i32> {
        let (used, capacity, seq) = (self.used, self.capacity, self.seq);
        let f = self.file_mut(id)?;
        let size = f.data.len() as u64;
        if len > size && len - size > capacity.saturating_sub(used) {
            return Err(if len > i64::MAX as u64 { EFBIG } else { ENOSPC });
        }
        if len != size {
            let op = Pending::SetSize(len);
            op.apply(&mut f.data);
            f.push(seq, op);
            self.seq += 1;
            self.used = used - size + len;
            self.changed.insert(id);
        }
        self.touch(id, now, true);
        Ok(())
    }

    /// Checks that `extra` more bytes fit (`fallocate` with `KEEP_SIZE`).
    pub fn reserve(&self, extra: u64) -> Result<(), i32> {
        if extra > self.capacity.saturating_sub(self.used) {
            return Err(ENOSPC);
        }
        Ok(())
    }

    /// `chmod`.
    pub fn set_mode(&mut self, id: u64, mode: u32) {
        if let Some(i) = self.inodes.get_mut(&id) {
            i.mode = mode & 0o7777;
        }
    }

    /// `utimensat`: `None` leaves a time alone.
    pub fn set_times(&mut self, id: u64, atime: Option<u64>, mtime: Option<u64>, now: u64) {
        if let Some(i) = self.inodes.get_mut(&id) {
            if let Some(a) = atime {
                i.times[0] = a;
            }
            if let Some(m) = mtime {
                i.times[1] = m;
            }
            i.times[2] = now;
        }
    }
}

/// The fd a name of `/proc/self/fd` stands for: a decimal number without sign or leading zero
/// that fits an `int`, as Linux's `name_to_int` reads it.
fn fd_name(c: &str) -> Option<i32> {
    if c.is_empty() || !c.bytes().all(|b| b.is_ascii_digit()) || (c.len() > 1 && c.starts_with('0')) {
        return None;
    }
    c.parse().ok()
}

/// The pid a name of `/proc` stands for: a decimal number without sign or leading zero, as
/// Linux's `name_to_int` reads it (0 and numbers past `u64` are no pid).
fn pid_name(c: &str) -> Option<u64> {
    if c.is_empty() || !c.bytes().all(|b| b.is_ascii_digit()) || c.starts_with('0') {
        return None;
    }
    c.parse().ok()
}

/// Puts the components of `path` in front of `comps`.
fn push_front_all(comps: &mut VecDeque<String>, path: &str) -> Result<(), i32> {
    for c in path.split('/').filter(|c| !c.is_empty()).rev() {
        if c.len() > NAME_MAX {
            return Err(ENAMETOOLONG);
        }
        comps.push_front(c.to_string());
    }
    Ok(())
}

/// What is wrong with `p` as the guest path of a declared file, if anything: it must be
/// absolute and normal (no empty, `.` or `..` component, no NUL), so that the file is where its
/// declaration says and no declaration reads as a way out of the tree.
pub fn guest_path_problem(p: &str) -> Option<&'static str> {
    if !p.starts_with('/') {
        return Some("the guest path must be absolute");
    }
    if p.contains('\0') {
        return Some("the guest path holds a NUL byte");
    }
    if p == "/" || p.ends_with('/') {
        return Some("the guest path must name a file, not a directory");
    }
    if p[1..].split('/').any(|c| c.is_empty() || c == "." || c == "..") {
        return Some("the guest path must be normal: no empty, `.` or `..` component");
    }
    None
}

/// `parent_of` re-exported for the kernel.
pub fn parent_path(p: &str) -> &str {
    parent_of(p)
}
