//! A file's data and metadata: its status, its contents (volatile, shared, static), writes and
//! size changes that become pending operations of the file, modes and times.

use crate::prelude::*;
use alloc::sync::Arc;

use super::*;

/// Fixed timestamp of every file (the realtime epoch of the virtual clock).
pub const FILE_TIME_S: u64 = crate::time::clock::REALTIME_EPOCH_S;

/// Status facts of a file, for `stat`/`statx`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stat {
    /// Device.
    pub dev: u64,
    /// Inode.
    pub ino: u64,
    /// Mode (type and permissions).
    pub mode: u32,
    /// Link count.
    pub nlink: u64,
    /// Size in bytes.
    pub size: u64,
    /// Device number of a character device.
    pub rdev: u64,
    /// atime, mtime, ctime (ns since the Unix epoch).
    pub times: [u64; 3],
}

impl Fs {
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
