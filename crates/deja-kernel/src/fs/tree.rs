//! The inode tree and the changes a program makes to its names: the directory entry operations
//! (create, link, remove, rename) that each become a pending operation of their directory,
//! listing a directory, and an inode's life (open descriptions, freeing what nothing names).

use crate::prelude::*;

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

    /// The device that takes the Antithesis SDKs' messages, if the run has one.
    pub fn sdk_output(&self) -> Option<u64> {
        self.inodes.iter().find(|(_, i)| matches!(i.kind, Kind::MemDev(SDK_OUTPUT_MINOR))).map(|(id, _)| *id)
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

    pub(super) fn touch(&mut self, id: u64, now: u64, data: bool) {
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
}
