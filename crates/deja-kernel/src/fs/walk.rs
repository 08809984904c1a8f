//! Path resolution: walking paths from a directory (symlinks, `..`, the limits), the processes
//! and fds `/proc` shows through a [`ProcView`], and the paths of inodes.

use crate::prelude::*;
use alloc::collections::VecDeque;

use super::*;

impl Fs {
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

    /// The first component of the normalized absolute `path` that does not exist (`path`
    /// itself when only its last is missing); `None` when every component exists or one
    /// before the last is not a directory.
    pub fn first_missing(&self, path: &str) -> Option<String> {
        let mut at = 0;
        while at < path.len() {
            let end = path[at + 1..].find('/').map_or(path.len(), |i| at + 1 + i);
            let prefix = &path[..end];
            match self.walk(ROOT, prefix.as_bytes(), true) {
                Ok(w) if w.id.is_none() => return Some(prefix.to_string()),
                Ok(_) => {}
                Err(_) => return None,
            }
            at = end;
        }
        None
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
