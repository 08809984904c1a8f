//! Address-space syscalls: `brk`, `mmap`, `munmap`, `mprotect`, `mremap`, `madvise`, `msync`.
//!
//! Placement is deterministic: a hint is honoured when the range is free, otherwise mappings go
//! top-down, first fit, below [`MMAP_TOP`]. Anonymous memory is populated on demand; the
//! file-backed pages of a file mapping are populated (and filled) when mapped. Every call that
//! adds committed pages checks the commit capacity first and fails with `ENOMEM`.

use crate::abi::errno::*;
use crate::host::hostchan::{plan_file, Placement, Rewrite};
use crate::kernel::{Kernel, SysResult};
use crate::mm::mappings::{user_range, FileBytes, Vma, VmaKind};
use crate::mm::user_layout::*;
use crate::prelude::*;
use crate::{Memory, Prot, PAGE_SIZE};

const MAP_SHARED: u32 = 0x1;
const MAP_FIXED: u32 = 0x10;
const MAP_ANONYMOUS: u32 = 0x20;
const MAP_FIXED_NOREPLACE: u32 = 0x10_0000;
const PROT_GROWSDOWN: u64 = 0x0100_0000;
const PROT_GROWSUP: u64 = 0x0200_0000;
const MREMAP_MAYMOVE: u64 = 1;
const MREMAP_FIXED: u64 = 2;
const EOVERFLOW: i32 = 75;

impl Kernel {
    /// Fills the file-backed pages of the VMA piece `[a, b)` (which must be one VMA's range or
    /// part of it) from the file.
    fn load_file_pages(&self, mem: &mut dyn Memory, a: u64, b: u64) -> Result<(), i32> {
        let pieces: Vec<Vma> = self.process.mappings.overlapping(a, b).cloned().collect();
        for v in pieces {
            let Some((fs, fe)) = v.file_backed_range() else { continue };
            let (s, e) = (fs.max(a), fe.min(b));
            if s >= e {
                continue;
            }
            let VmaKind::File { data, offset, .. } = &v.kind else { continue };
            mem.populate(s, e - s, Prot::RW).map_err(|_| ENOMEM)?;
            let from = offset + (s - v.start);
            let to = (from + (e - s)).min(data.0.len() as u64);
            if from < to {
                mem.write(s, &data.0[from as usize..to as usize]).map_err(|_| ENOMEM)?;
            }
            if v.prot != Prot::RW {
                mem.protect(s, e - s, v.prot);
            }
        }
        Ok(())
    }

    /// Keeps shared file mappings coherent with their files, as Linux's page cache does: after
    /// a call that changed files (a write, a truncate, a growing `fallocate`), every `MAP_SHARED`
    /// mapping of a changed file maps its new contents. Pages past the new end of the file are
    /// dropped (touching one again gives a zero page), pages the file grew into are filled.
    ///
    /// Every process's mappings: the other address spaces' are entered in turn.
    pub(crate) fn sync_shared_mappings(&mut self, mem: &mut dyn Memory) {
        let changed: Vec<u64> = self.files.fs.take_changed().into_iter().collect();
        if changed.is_empty() {
            return;
        }
        let shared = |v: &Vma| v.shared && matches!(v.kind, VmaKind::File { .. });
        self.sync_shared_in(mem, &changed);
        let others: Vec<u64> = self
            .procs
            .spaces
            .iter()
            .filter(|(_, mm)| mm.mappings.iter().any(shared))
            .filter_map(|(space, _)| {
                self.procs.table.iter().find(|(_, p)| p.live() && p.space == *space).map(|(&pid, _)| pid)
            })
            .collect();
        let home = self.procs.current;
        for pid in others {
            self.enter(mem, pid);
            self.sync_shared_in(mem, &changed);
        }
        self.enter(mem, home);
    }

    /// [`Kernel::sync_shared_mappings`] in the current address space, for the files `changed`.
    fn sync_shared_in(&mut self, mem: &mut dyn Memory, changed: &[u64]) {
        let shared = |v: &&Vma| v.shared && matches!(v.kind, VmaKind::File { .. });
        if !self.process.mappings.iter().any(|v| shared(&v)) {
            return;
        }
        for &id in changed {
            let Some(ino) = self.files.fs.get(id).map(|i| i.ino) else { continue };
            let starts: Vec<(u64, u64)> = self
                .process
                .mappings
                .iter()
                .filter(|v| shared(v) && matches!(v.kind, VmaKind::File { ino: i, .. } if i == ino))
                .map(|v| (v.start, v.end))
                .collect();
            if starts.is_empty() {
                continue;
            }
            let Some(data) = self.files.fs.snapshot(id) else { continue };
            for (a, b) in starts {
                self.process.mappings.set_file_data(a, data.clone());
                let backed = self.process.mappings.find(a).and_then(Vma::file_backed_range).map_or(a, |r| r.1);
                if backed < b {
                    mem.unmap(backed, b - backed);
                }
                // Out of frames: the pages keep what they had; the next fault fills them.
                let _ = self.load_file_pages(mem, a, b);
            }
        }
    }

    /// Removes every mapping in `[a, b)` and frees its pages.
    fn unmap_range(&mut self, mem: &mut dyn Memory, a: u64, b: u64) {
        self.process.mappings.remove(a, b);
        self.process.host.forget(a, b);
        mem.unmap(a, b - a);
    }

    /// Closes the host channels in the executable code of `[a, b)`, which was just mapped,
    /// refilled or protected with `PROT_EXEC` (see [`crate::host::hostchan`]): the image's known
    /// sites get their traps again; a file is planned as a whole (once per content) and its
    /// sites in the range rewritten; other memory is planned from its current bytes.
    fn close_host_channels(&mut self, mem: &mut dyn Memory, a: u64, b: u64) -> Result<(), i32> {
        let pieces: Vec<Vma> =
            self.process.mappings.overlapping(a, b).filter(|v| v.prot.executable()).cloned().collect();
        let closed = self.rewrite_pieces(mem, a, b, &pieces);
        for v in &pieces {
            if let VmaKind::File { data, offset, .. } = &v.kind {
                mem.code_mapped(&data.0, v.start.max(a), v.end.min(b), v.start.wrapping_sub(*offset));
            }
        }
        closed
    }

    /// Tells `mem` where the current process's executable file mappings are
    /// ([`Memory::code_mapped`]), as when they were made: for a memory that starts measuring
    /// block coverage after the program was loaded (the ELF interpreter is mapped at load).
    pub fn announce_code(&self, mem: &mut dyn Memory) {
        for v in self.process.mappings.iter().filter(|v| v.prot.executable()) {
            if let VmaKind::File { data, offset, .. } = &v.kind {
                mem.code_mapped(&data.0, v.start, v.end, v.start.wrapping_sub(*offset));
            }
        }
    }

    /// [`Kernel::close_host_channels`] in the executable mappings `pieces` of `[a, b)`.
    fn rewrite_pieces(&mut self, mem: &mut dyn Memory, a: u64, b: u64, pieces: &[Vma]) -> Result<(), i32> {
        if self.process.host.mode == Rewrite::Off {
            return Ok(());
        }
        for v in pieces {
            let (s, e) = (v.start.max(a), v.end.min(b));
            let host = &mut self.process.host;
            match &v.kind {
                VmaKind::Image { .. } | VmaKind::Vdso { .. } | VmaKind::Jumps => host.repatch(mem, s, e),
                VmaKind::File { path, data, offset, .. } => {
                    let at = Placement {
                        name: path.clone(),
                        start: s,
                        end: e,
                        base: v.start.wrapping_sub(*offset),
                        by_addr: false,
                    };
                    host.apply(mem, &plan_file(&data.0), &at)
                }
                // Anonymous memory: only its populated pages can hold code (a JIT may reserve far
                // more than it writes), each run of them planned on its own.
                _ => crate::host::hostchan::present_runs(&*mem, s, e).into_iter().try_for_each(|(a, b)| {
                    let code = host.original_bytes(&*mem, a, b);
                    let plan = deja_rewrite::plan_code(a, &code, &[]);
                    let at = Placement { name: "anonymous".into(), start: a, end: b, base: 0, by_addr: true };
                    host.unpatch(mem, a, b).and_then(|()| host.apply(mem, &plan, &at))
                }),
            }
            .map_err(|_| ENOMEM)?;
        }
        Ok(())
    }

    pub(crate) fn sys_brk(&mut self, mem: &mut dyn Memory, addr: u64) -> SysResult {
        if addr < self.process.brk_start {
            return Ok(self.process.brk_cur);
        }
        let (Some(old_end), Some(new_end)) = (page_up(self.process.brk_cur), page_up(addr)) else {
            return Ok(self.process.brk_cur);
        };
        if new_end > old_end {
            if new_end > STACK_TOP - STACK_SIZE
                || !self.process.mappings.is_free(old_end, new_end)
                || self.process.mappings.check_commit((new_end - old_end) / PAGE_SIZE, 0).is_err()
            {
                return Ok(self.process.brk_cur);
            }
            self.process.mappings.insert(Vma {
                start: old_end,
                end: new_end,
                prot: Prot::RW,
                kind: VmaKind::Heap,
                shared: false,
            });
        } else if new_end < old_end {
            self.unmap_range(mem, new_end, old_end);
        }
        self.process.brk_cur = addr;
        Ok(addr)
    }

    pub(crate) fn sys_mmap(&mut self, mem: &mut dyn Memory, a: [u64; 6]) -> SysResult {
        let [addr, len, prot, flags, fd, off] = a;
        let flags = flags as u32;
        if prot & !7 != 0 || flags & 3 == 0 || len == 0 {
            return Err(EINVAL.into());
        }
        let prot = Prot(prot as u32);
        let len = page_up(len).filter(|l| *l <= USER_END).ok_or(ENOMEM)?;
        let anon = flags & MAP_ANONYMOUS != 0;
        let shared = flags & 3 != 2 && flags & MAP_SHARED != 0;
        // A mapping of /dev/zero is anonymous memory, private or shared, as on Linux.
        let zero =
            !anon && self.files.fds.get(fd as i32).is_ok_and(|f| f.kind == crate::files::fd::FileKind::MemDev(5));
        if zero {
            let f = self.files.fds.get(fd as i32)?;
            if off & (PAGE_SIZE - 1) != 0 {
                return Err(EINVAL.into());
            }
            if !f.readable() || (shared && prot.writable() && !f.writable()) {
                return Err(EACCES.into());
            }
        }
        let kind = if anon || zero {
            VmaKind::Anon
        } else {
            if off & (PAGE_SIZE - 1) != 0 {
                return Err(EINVAL.into());
            }
            let f = self.files.fds.get(fd as i32)?;
            let (path, data, ino) = f.kind.mmap_source(&self.files.fs)?;
            if !f.readable() || (shared && prot.writable()) {
                return Err(EACCES.into());
            }
            if off.checked_add(len).is_none_or(|e| e > i64::MAX as u64) {
                return Err(EOVERFLOW.into());
            }
            VmaKind::File { path, size: data.len() as u64, data: FileBytes(data), offset: off, ino }
        };
        let fixed = flags & (MAP_FIXED | MAP_FIXED_NOREPLACE) != 0;
        let start = if fixed {
            if !is_page_aligned(addr) {
                return Err(EINVAL.into());
            }
            if addr < USER_START {
                return Err(EPERM.into());
            }
            if addr.checked_add(len).is_none_or(|e| {
                e > USER_END || crate::mm::user_layout::reserved(addr, e) || self.process.mappings.holds_jumps(addr, e)
            }) {
                return Err(ENOMEM.into());
            }
            if flags & MAP_FIXED == 0 && !self.process.mappings.is_free(addr, addr + len) {
                return Err(EEXIST.into());
            }
            addr
        } else {
            let hint = page_down(addr);
            if hint >= USER_START
                && hint.checked_add(len).is_some_and(|e| e <= USER_END)
                && self.process.mappings.is_free(hint, hint + len)
            {
                hint
            } else {
                self.process.mappings.find_free(len, MMAP_TOP).ok_or(ENOMEM)?
            }
        };
        let end = start + len;
        let vma = Vma { start, end, prot, kind, shared };
        let add = vma.committed_pages_in(start, end, prot);
        let remove = if fixed { self.process.mappings.committed_in(start, end) } else { 0 };
        self.process.mappings.check_commit(add, remove)?;
        if fixed {
            self.unmap_range(mem, start, end);
        }
        let file = !anon;
        self.process.mappings.insert(vma);
        if file {
            if let Err(e) = self.load_file_pages(mem, start, end) {
                self.unmap_range(mem, start, end);
                return Err(e.into());
            }
        }
        if prot.executable() {
            if let Err(e) = self.close_host_channels(mem, start, end) {
                self.unmap_range(mem, start, end);
                return Err(e.into());
            }
        }
        Ok(start)
    }

    pub(crate) fn sys_munmap(&mut self, mem: &mut dyn Memory, addr: u64, len: u64) -> SysResult {
        if len == 0 {
            return Err(EINVAL.into());
        }
        let end = user_range(addr, len).map_err(|_| EINVAL)?;
        // The trampolines the program's jump sites need (`host::jumps`) stay.
        if self.process.mappings.holds_jumps(addr, end) {
            return Err(EINVAL.into());
        }
        self.unmap_range(mem, addr, end);
        Ok(0)
    }

    pub(crate) fn sys_mprotect(&mut self, mem: &mut dyn Memory, addr: u64, len: u64, prot: u64) -> SysResult {
        if !is_page_aligned(addr) || prot & !(7 | PROT_GROWSDOWN | PROT_GROWSUP) != 0 {
            return Err(EINVAL.into());
        }
        if len == 0 {
            return Ok(0);
        }
        let end = user_range(addr, len)?;
        if !self.process.mappings.fully_mapped(addr, end) {
            return Err(ENOMEM.into());
        }
        if self.process.mappings.holds_jumps(addr, end) {
            return Err(EACCES.into());
        }
        let prot = Prot(prot as u32 & 7);
        let add: u64 =
            self.process.mappings.overlapping(addr, end).map(|v| v.committed_pages_in(addr, end, prot)).sum();
        self.process.mappings.check_commit(add, self.process.mappings.committed_in(addr, end))?;
        self.process.mappings.set_prot(addr, end, prot);
        if prot.executable() {
            // Planned while the pages are still as the program left them, before they lose
            // write permission.
            self.close_host_channels(mem, addr, end)?;
        }
        mem.protect(addr, end - addr, prot);
        Ok(0)
    }

    pub(crate) fn sys_madvise(&mut self, mem: &mut dyn Memory, addr: u64, len: u64, advice: u64) -> SysResult {
        if !is_page_aligned(addr) {
            return Err(EINVAL.into());
        }
        let valid = matches!(advice, 0..=4 | 8..=25 | 100..=103);
        if !valid {
            return Err(EINVAL.into());
        }
        if len == 0 {
            return Ok(0);
        }
        let end = user_range(addr, len).map_err(|_| EINVAL)?;
        if matches!(advice, 4 | 8 | 9 | 24) {
            let pieces: Vec<Vma> = self.process.mappings.overlapping(addr, end).cloned().collect();
            for v in pieces {
                let (s, e) = (v.start.max(addr), v.end.min(end));
                match v.kind {
                    VmaKind::Image { .. } | VmaKind::Vdso { .. } | VmaKind::Vvar | VmaKind::Jumps => {}
                    VmaKind::File { .. } => {
                        mem.unmap(s, e - s);
                        self.load_file_pages(mem, s, e)?;
                        self.close_host_channels(mem, s, e)?;
                    }
                    _ => mem.unmap(s, e - s),
                }
            }
        }
        if !self.process.mappings.fully_mapped(addr, end) {
            return Err(ENOMEM.into());
        }
        Ok(0)
    }

    /// `mlock`, `munlock`, `mlockall`, `munlockall`, `mlock2`: accepted; guest memory is never
    /// paged out.
    pub(crate) fn sys_mlock(&mut self) -> SysResult {
        Ok(0)
    }

    pub(crate) fn sys_msync(&mut self, addr: u64, len: u64, flags: u64) -> SysResult {
        if !is_page_aligned(addr) || flags & !7 != 0 || flags & 5 == 5 {
            return Err(EINVAL.into());
        }
        let end = user_range(addr, len)?;
        if len != 0 && !self.process.mappings.fully_mapped(addr, end) {
            return Err(ENOMEM.into());
        }
        Ok(0)
    }

    /// `mincore`: every page of a mapped range reads as resident (deja pages memory in on its
    /// own schedule, which the program must not observe); `ENOMEM` for a hole.
    pub(crate) fn sys_mincore(&mut self, mem: &mut dyn Memory, addr: u64, len: u64, vec: u64) -> SysResult {
        let end = user_range(addr, len)?;
        if !self.process.mappings.fully_mapped(addr, end) {
            return Err(ENOMEM.into());
        }
        let pages = ((end - addr) / crate::PAGE_SIZE) as usize;
        self.process.mappings.check(vec, pages as u64, crate::mm::mappings::Access::Write)?;
        self.process.mappings.copy_out(mem, vec, &vec![1u8; pages])?;
        Ok(0)
    }

    /// Moves the mapping `[old, old+old_len)` to `new` and sizes it to `new_len`.
    fn move_mapping(
        &mut self,
        mem: &mut dyn Memory,
        old: u64,
        old_len: u64,
        new: u64,
        new_len: u64,
    ) -> Result<(), i32> {
        let keep = old_len.min(new_len);
        let mut pieces = self.process.mappings.remove(old, old + old_len);
        mem.move_pages(old, new, keep);
        mem.unmap(old, old_len);
        self.process.host.forget(old + keep, old + old_len);
        self.process.host.shift(old, keep, new);
        let Some(mut v) = pieces.pop() else { return Err(EFAULT) };
        v.start = new;
        v.end = new + keep;
        let ext = (new_len > old_len).then(|| {
            let mut e = v.clone();
            e.start = new + old_len;
            e.end = new + new_len;
            if let VmaKind::File { offset, .. } | VmaKind::Image { offset } | VmaKind::Vdso { offset } = &mut e.kind {
                *offset += old_len;
            }
            e
        });
        self.process.mappings.insert(v);
        if let Some(e) = ext {
            let (s, t) = (e.start, e.end);
            self.process.mappings.insert(e);
            self.load_file_pages(mem, s, t)?;
            self.close_host_channels(mem, s, t)?;
        }
        Ok(())
    }

    pub(crate) fn sys_mremap(&mut self, mem: &mut dyn Memory, a: [u64; 6]) -> SysResult {
        let [old, old_len, new_len, flags, new_addr, _] = a;
        if flags & !(MREMAP_MAYMOVE | MREMAP_FIXED) != 0
            || (flags & MREMAP_FIXED != 0 && flags & MREMAP_MAYMOVE == 0)
            || !is_page_aligned(old)
        {
            return Err(EINVAL.into());
        }
        let old_len = page_up(old_len).ok_or(EINVAL)?;
        let new_len = page_up(new_len).ok_or(EINVAL)?;
        if new_len == 0 || old_len == 0 {
            return Err(EINVAL.into());
        }
        let v = self.process.mappings.find(old).cloned().ok_or(EFAULT)?;
        if old.checked_add(old_len).is_none_or(|e| e > v.end) {
            return Err(EFAULT.into());
        }
        // The trampolines stay, and so does the image's code whose windows jump to them (a
        // window's displacement is relative: moved, it would jump elsewhere).
        let jumped_code =
            matches!(v.kind, VmaKind::Image { .. }) && v.prot.executable() && self.process.host.jumps.area.is_some();
        if v.kind == VmaKind::Jumps || jumped_code {
            return Err(EINVAL.into());
        }
        let counts = v.counts_with(v.prot);
        let pages = |l: u64| if counts { l / PAGE_SIZE } else { 0 };
        if flags & MREMAP_FIXED != 0 {
            if !is_page_aligned(new_addr) {
                return Err(EINVAL.into());
            }
            let new_end = new_addr.checked_add(new_len).filter(|e| *e <= USER_END).ok_or(EINVAL)?;
            if new_addr < USER_START {
                return Err(EPERM.into());
            }
            if new_addr < old + old_len && old < new_end {
                return Err(EINVAL.into());
            }
            if crate::mm::user_layout::reserved(new_addr, new_end)
                || self.process.mappings.holds_jumps(new_addr, new_end)
            {
                return Err(ENOMEM.into());
            }
            let remove = self.process.mappings.committed_in(new_addr, new_end) + pages(old_len);
            self.process.mappings.check_commit(pages(new_len), remove)?;
            self.unmap_range(mem, new_addr, new_end);
            self.move_mapping(mem, old, old_len, new_addr, new_len)?;
            return Ok(new_addr);
        }
        if new_len <= old_len {
            if new_len < old_len {
                self.unmap_range(mem, old + new_len, old + old_len);
            }
            return Ok(old);
        }
        let grow_start = old + old_len;
        let in_place =
            old.checked_add(new_len).is_some_and(|e| e <= USER_END && self.process.mappings.is_free(grow_start, e));
        self.process.mappings.check_commit(pages(new_len - old_len), 0)?;
        if in_place {
            let mut e = v.clone();
            e.start = grow_start;
            e.end = old + new_len;
            if let VmaKind::File { offset, .. } | VmaKind::Image { offset } | VmaKind::Vdso { offset } = &mut e.kind {
                *offset += grow_start - v.start;
            }
            let (s, t) = (e.start, e.end);
            self.process.mappings.insert(e);
            self.load_file_pages(mem, s, t)?;
            self.close_host_channels(mem, s, t)?;
            return Ok(old);
        }
        if flags & MREMAP_MAYMOVE == 0 {
            return Err(ENOMEM.into());
        }
        let dest = self.process.mappings.find_free(new_len, MMAP_TOP).ok_or(ENOMEM)?;
        self.move_mapping(mem, old, old_len, dest, new_len)?;
        Ok(dest)
    }
}
