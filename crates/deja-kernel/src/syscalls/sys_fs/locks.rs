//! Locks: `flock` (always granted), `fcntl` record locks per inode and owner as Linux rules them
//! (at most [`MAX_LOCKS`](crate::files::MAX_LOCKS): then `ENOLCK`), and their release when an
//! fd closes or a process ends.

use crate::abi::errno::*;
use crate::files::MAX_LOCKS;
use crate::kernel::{Kernel, SysResult};
use crate::prelude::*;
use crate::Memory;

impl Kernel {
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
