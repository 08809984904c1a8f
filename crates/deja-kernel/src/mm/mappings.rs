//! The address-space model: the list of VMAs, placement, commit accounting and user copies.
//!
//! The kernel decides which ranges exist and with which protection; the shell's [`Memory`]
//! only holds the pages. Anonymous memory (heap, stack, anonymous `mmap`) is populated lazily
//! by [`Mappings::fault`] or by a kernel-side copy; image segments and the file-backed part
//! of file mappings are populated eagerly.
//!
//! Commit accounting is strict (like `vm.overcommit_memory=2`): the pages of every writable
//! mapping and of every eagerly populated mapping count against a capacity fixed at load time
//! from the shell's free frames, so a program asking for more memory than the VM has gets
//! `ENOMEM` from `mmap`/`brk`/`mprotect`/`mremap` instead of dying at a later page fault.
//!
//! What the file system adds to the VMAs (file mappings sharing the declared files' bytes,
//! `/proc/<pid>/maps`) is in `fs/mapped.rs`: this module knows nothing of files.

use crate::prelude::*;
use alloc::collections::BTreeMap;
use alloc::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::abi::errno::*;
use crate::mm::user_layout;
use crate::mm::user_layout::{is_page_aligned, page_down, page_up, FAULT_AROUND_PAGES, USER_END, USER_START};
use crate::persist::{ensure, RestoreError};
use crate::{MemError, Memory, Prot, PAGE_SIZE};

/// The contents of a mapped file (shared, immutable; `Debug` shows only the length; saved as
/// a byte string).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileBytes(#[serde(with = "crate::persist::arc_bytes")] pub alloc::sync::Arc<[u8]>);

impl core::fmt::Debug for FileBytes {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "FileBytes({} bytes)", self.0.len())
    }
}

/// What backs a VMA.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum VmaKind {
    /// A segment of the program image (eagerly populated).
    Image {
        /// File offset of the VMA's first byte (shown in `/proc/self/maps`).
        offset: u64,
    },
    /// The `brk` heap.
    Heap,
    /// The main stack.
    Stack,
    /// Anonymous `mmap`.
    Anon,
    /// A private mapping of a declared file.
    File {
        /// Guest path of the file.
        path: String,
        /// The file's contents.
        data: FileBytes,
        /// File offset of the VMA's first byte.
        offset: u64,
        /// Size of the file.
        size: u64,
        /// Inode number shown in `/proc/self/maps`.
        ino: u64,
    },
    /// deja's vDSO ([`crate::time::vdso`]), mapped at load.
    Vdso {
        /// Offset in the vDSO image of the VMA's first byte.
        offset: u64,
    },
    /// The page the vDSO reads the clock from and counts its reads in.
    Vvar,
    /// The trampolines of the image's syscall sites ([`crate::host::jumps`]), eagerly
    /// populated; the program cannot unmap, move, protect or map over them.
    Jumps,
}

impl VmaKind {
    /// True for kinds whose pages are all populated when mapped.
    pub fn eager(&self) -> bool {
        matches!(
            self,
            VmaKind::Image { .. } | VmaKind::File { .. } | VmaKind::Vdso { .. } | VmaKind::Vvar | VmaKind::Jumps
        )
    }
}

/// One mapping.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Vma {
    /// First byte (page aligned).
    pub start: u64,
    /// End, exclusive (page aligned).
    pub end: u64,
    /// Protection.
    pub prot: Prot,
    /// Backing.
    pub kind: VmaKind,
    /// `MAP_SHARED`.
    pub shared: bool,
}

impl Vma {
    /// True if all of this VMA's pages count against the commit capacity with protection
    /// `prot`: writable memory, and memory populated when mapped. A read-only file mapping
    /// counts only the pages that hold file bytes ([`Vma::committed_pages_in`]): a mapping far
    /// larger than its file (bbolt maps its database with room to grow, 10 GiB at once) takes
    /// frames for the file alone, as the page cache does on Linux.
    pub fn counts_with(&self, prot: Prot) -> bool {
        prot.writable() || (self.kind.eager() && !matches!(self.kind, VmaKind::File { .. }))
    }

    /// The pages of `[a, b)` in this VMA that count against the commit capacity with
    /// protection `prot`.
    pub fn committed_pages_in(&self, a: u64, b: u64, prot: Prot) -> u64 {
        let (s, e) = (self.start.max(a), self.end.min(b));
        if s >= e {
            return 0;
        }
        if self.counts_with(prot) {
            return (e - s) / PAGE_SIZE;
        }
        match self.file_backed_range() {
            Some((fs, fe)) if s.max(fs) < e.min(fe) => (e.min(fe) - s.max(fs)) / PAGE_SIZE,
            _ => 0,
        }
    }

    /// The `[start, end)` of the part of this VMA that holds file bytes (page-rounded).
    pub fn file_backed_range(&self) -> Option<(u64, u64)> {
        match &self.kind {
            VmaKind::File { offset, size, .. } if offset < size => {
                let bytes = (size - offset).min(self.end - self.start);
                let end = page_up(self.start + bytes).unwrap_or(self.end).min(self.end);
                Some((self.start, end))
            }
            _ => None,
        }
    }

    /// Splits off `[at, end)`; `self` keeps `[start, at)`.
    fn split_off(&mut self, at: u64) -> Vma {
        let mut right = self.clone();
        right.start = at;
        if let VmaKind::File { offset, .. } | VmaKind::Image { offset } | VmaKind::Vdso { offset } = &mut right.kind {
            *offset += at - self.start;
        }
        self.end = at;
        right
    }

    /// True if `next` directly follows `self` and could be one VMA with it.
    fn mergeable(&self, next: &Vma) -> bool {
        if self.end != next.start || self.prot != next.prot || self.shared != next.shared {
            return false;
        }
        match (&self.kind, &next.kind) {
            (VmaKind::File { path: p1, offset: o1, .. }, VmaKind::File { path: p2, offset: o2, .. }) => {
                p1 == p2 && o1 + (self.end - self.start) == *o2
            }
            (a, b) => a == b,
        }
    }
}

/// Kind of access for permission checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Load.
    Read,
    /// Store.
    Write,
    /// Instruction fetch.
    Exec,
}

impl Access {
    fn allowed(self, prot: Prot) -> bool {
        match self {
            Access::Read => prot.readable(),
            Access::Write => prot.writable(),
            Access::Exec => prot.executable(),
        }
    }
}

/// Why a demand fault could not be served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FaultError {
    /// No VMA covers the address.
    Unmapped,
    /// A VMA covers it but forbids the access.
    Protection(Prot),
    /// The shell ran out of frames.
    OutOfMemory,
}

/// The VMA list and commit accounting of one process.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mappings {
    vmas: BTreeMap<u64, Vma>,
    /// Maximum committed pages.
    capacity: u64,
}

impl Mappings {
    /// An empty address space that may commit `capacity` pages.
    pub fn new(capacity: u64) -> Self {
        Mappings { vmas: BTreeMap::new(), capacity }
    }

    /// Commit capacity in pages.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Committed pages.
    pub fn committed(&self) -> u64 {
        self.vmas.values().map(|v| v.committed_pages_in(v.start, v.end, v.prot)).sum()
    }

    /// Committed pages inside `[a, b)`.
    pub fn committed_in(&self, a: u64, b: u64) -> u64 {
        self.overlapping(a, b).map(|v| v.committed_pages_in(a, b, v.prot)).sum()
    }

    /// Fails with `ENOMEM` if adding `add` pages and removing `remove` would exceed capacity.
    pub fn check_commit(&self, add: u64, remove: u64) -> Result<(), i32> {
        let after = self.committed().saturating_sub(remove).saturating_add(add);
        if add > remove && after > self.capacity {
            Err(ENOMEM)
        } else {
            Ok(())
        }
    }

    /// Checks the invariants of a restored address space: every VMA keyed by its start, page
    /// aligned, non-empty, inside user space, sorted and non-overlapping, with a valid
    /// protection and file offsets that cannot overflow.
    pub fn validate(&self) -> Result<(), RestoreError> {
        let mut prev_end = USER_START;
        for (&key, v) in &self.vmas {
            let at = || format!("VMA {:#x}..{:#x}", v.start, v.end);
            ensure(key == v.start, || format!("{} is filed under {key:#x}", at()))?;
            ensure(is_page_aligned(v.start) && is_page_aligned(v.end), || format!("{} is not page aligned", at()))?;
            ensure(v.start < v.end, || format!("{} is empty", at()))?;
            ensure(v.start >= prev_end && v.end <= USER_END, || format!("{} overlaps or leaves user space", at()))?;
            ensure(v.prot.0 & !7 == 0, || format!("{} has protection {:#x}", at(), v.prot.0))?;
            let len = v.end - v.start;
            match &v.kind {
                VmaKind::Image { offset } | VmaKind::Vdso { offset } => {
                    ensure(offset.checked_add(len).is_some(), || format!("{} has offset {offset:#x}", at()))?
                }
                VmaKind::File { data, offset, size, .. } => {
                    ensure(*size == data.0.len() as u64, || format!("{} has size {size} for its data", at()))?;
                    ensure(offset.checked_add(len).is_some(), || format!("{} has offset {offset:#x}", at()))?;
                }
                VmaKind::Heap | VmaKind::Stack | VmaKind::Anon | VmaKind::Vvar | VmaKind::Jumps => {}
            }
            prev_end = v.end;
        }
        Ok(())
    }

    /// The file mapping starting at `start` now maps `data` (its file changed).
    pub fn set_file_data(&mut self, start: u64, data: Arc<[u8]>) {
        if let Some(Vma { kind: VmaKind::File { data: d, size, .. }, .. }) = self.vmas.get_mut(&start) {
            *size = data.len() as u64;
            *d = FileBytes(data);
        }
    }

    /// Every VMA in address order.
    pub fn iter(&self) -> impl Iterator<Item = &Vma> {
        self.vmas.values()
    }

    /// Every VMA in address order, for a room above to change what a VMA maps (never its range,
    /// its protection or its kind): see [`Mappings::share_file_data`].
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = &mut Vma> {
        self.vmas.values_mut()
    }

    /// The VMA containing `addr`.
    pub fn find(&self, addr: u64) -> Option<&Vma> {
        self.vmas.range(..=addr).next_back().map(|(_, v)| v).filter(|v| addr < v.end)
    }

    /// VMAs intersecting `[a, b)`.
    pub fn overlapping(&self, a: u64, b: u64) -> impl Iterator<Item = &Vma> {
        let first = self.vmas.range(..=a).next_back().map_or(a, |(s, _)| *s);
        self.vmas.range(first..b).map(|(_, v)| v).filter(move |v| v.end > a && v.start < b)
    }

    /// Whether `[a, b)` touches the trampoline area of jump sites ([`VmaKind::Jumps`]).
    pub fn holds_jumps(&self, a: u64, b: u64) -> bool {
        self.overlapping(a, b).any(|v| v.kind == VmaKind::Jumps)
    }

    /// True if no VMA intersects `[a, b)`.
    pub fn is_free(&self, a: u64, b: u64) -> bool {
        !user_layout::reserved(a, b) && self.overlapping(a, b).next().is_none()
    }

    /// True if `[a, b)` is entirely covered by VMAs.
    pub fn fully_mapped(&self, a: u64, b: u64) -> bool {
        let mut at = a;
        for v in self.overlapping(a, b) {
            if v.start > at {
                return false;
            }
            at = v.end;
        }
        at >= b
    }

    /// Splits the VMA containing `at` (if `at` is strictly inside it).
    fn split_at(&mut self, at: u64) {
        let Some(start) = self.find(at).map(|v| v.start) else { return };
        if start == at {
            return;
        }
        if let Some(v) = self.vmas.get_mut(&start) {
            let right = v.split_off(at);
            self.vmas.insert(at, right);
        }
    }

    /// Splits so that no VMA straddles `a` or `b`.
    pub fn carve(&mut self, a: u64, b: u64) {
        self.split_at(a);
        self.split_at(b);
    }

    /// Removes every VMA piece inside `[a, b)` and returns them (the pages are not touched).
    pub fn remove(&mut self, a: u64, b: u64) -> Vec<Vma> {
        self.carve(a, b);
        let keys: Vec<u64> = self.vmas.range(a..b).map(|(k, _)| *k).collect();
        keys.into_iter().filter_map(|k| self.vmas.remove(&k)).collect()
    }

    /// Inserts a VMA over a free range and merges it with equal neighbours.
    pub fn insert(&mut self, vma: Vma) {
        let (a, b) = (vma.start, vma.end);
        self.vmas.insert(vma.start, vma);
        self.merge_around(a, b);
    }

    /// Sets the protection of every VMA piece in `[a, b)`.
    pub fn set_prot(&mut self, a: u64, b: u64, prot: Prot) {
        self.carve(a, b);
        for (_, v) in self.vmas.range_mut(a..b) {
            v.prot = prot;
        }
        self.merge_around(a, b);
    }

    /// Merges equal neighbours from the VMA before `a` to the VMA at `b`.
    pub fn merge_around(&mut self, a: u64, b: u64) {
        let from = self.vmas.range(..a).next_back().map_or(a, |(s, _)| *s);
        let keys: Vec<u64> = self.vmas.range(from..=b).map(|(k, _)| *k).collect();
        let mut cur: Option<u64> = None;
        for k in keys {
            if let Some(c) = cur {
                let merge = match (self.vmas.get(&c), self.vmas.get(&k)) {
                    (Some(l), Some(r)) => l.mergeable(r),
                    _ => false,
                };
                if merge {
                    if let Some(r) = self.vmas.remove(&k) {
                        if let Some(l) = self.vmas.get_mut(&c) {
                            l.end = r.end;
                        }
                    }
                    continue;
                }
            }
            cur = Some(k);
        }
    }

    /// The highest free range of `len` bytes ending at or below `top` (top-down first fit),
    /// never in the reserved range ([`user_layout::RESERVED_START`]).
    pub fn find_free(&self, len: u64, top: u64) -> Option<u64> {
        let mut hi = top;
        let mut reserved = Some((user_layout::RESERVED_START, user_layout::RESERVED_END));
        let mut vmas = self.vmas.values().rev().map(|v| (v.start, v.end)).peekable();
        // The VMAs from the top down, with the reserved range in its place among them.
        while let Some((start, end)) = match (vmas.peek(), reserved) {
            (Some(&(v, _)), Some((r, _))) if r > v => reserved.take(),
            (Some(_), _) => vmas.next(),
            (None, _) => reserved.take(),
        } {
            if start >= hi {
                continue;
            }
            if end <= hi && hi - end >= len {
                return Some(hi - len);
            }
            hi = hi.min(start);
        }
        (hi >= USER_START && hi - USER_START >= len).then(|| hi - len)
    }

    /// Checks that `[addr, addr+len)` is user memory mapped with `access`; `EFAULT` otherwise.
    pub fn check(&self, addr: u64, len: u64, access: Access) -> Result<(), i32> {
        if len == 0 {
            return Ok(());
        }
        let end = addr.checked_add(len).ok_or(EFAULT)?;
        if addr < USER_START || end > USER_END {
            return Err(EFAULT);
        }
        let mut at = addr;
        for v in self.overlapping(addr, end) {
            if v.start > at || !access.allowed(v.prot) {
                return Err(EFAULT);
            }
            at = v.end;
        }
        if at < end {
            return Err(EFAULT);
        }
        Ok(())
    }

    /// Makes the pages of `[addr, addr+len)` present (the range must have passed [`check`]).
    ///
    /// [`check`]: Mappings::check
    pub fn populate(&self, mem: &mut dyn Memory, addr: u64, len: u64) -> Result<(), i32> {
        if len == 0 {
            return Ok(());
        }
        let a = page_down(addr);
        let b = page_up(addr.saturating_add(len)).ok_or(EFAULT)?;
        for v in self.overlapping(a, b) {
            let s = v.start.max(a);
            let e = v.end.min(b);
            mem.populate(s, e - s, v.prot).map_err(|_| ENOMEM)?;
        }
        Ok(())
    }

    /// Copies guest memory into `buf` (the range must be readable).
    pub fn copy_in(&self, mem: &mut dyn Memory, addr: u64, buf: &mut [u8]) -> Result<(), i32> {
        let len = buf.len() as u64;
        self.check(addr, len, Access::Read)?;
        self.populate(mem, addr, len)?;
        mem.read(addr, buf).map_err(|_| EFAULT)
    }

    /// Copies `data` into guest memory (the range must be writable).
    pub fn copy_out(&self, mem: &mut dyn Memory, addr: u64, data: &[u8]) -> Result<(), i32> {
        let len = data.len() as u64;
        self.check(addr, len, Access::Write)?;
        self.populate(mem, addr, len)?;
        mem.write(addr, data).map_err(|_| EFAULT)
    }

    /// Reads a little-endian `u64`.
    pub fn read_u64(&self, mem: &mut dyn Memory, addr: u64) -> Result<u64, i32> {
        let mut b = [0u8; 8];
        self.copy_in(mem, addr, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// Reads a little-endian `u32`.
    pub fn read_u32(&self, mem: &mut dyn Memory, addr: u64) -> Result<u32, i32> {
        let mut b = [0u8; 4];
        self.copy_in(mem, addr, &mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    /// Reads a NUL-terminated string of at most `max` bytes (without the NUL);
    /// `ENAMETOOLONG` if no NUL comes within `max` bytes.
    pub fn read_cstr(&self, mem: &mut dyn Memory, addr: u64, max: usize) -> Result<Vec<u8>, i32> {
        let mut out = Vec::new();
        let mut at = addr;
        loop {
            let chunk = (PAGE_SIZE - (at & (PAGE_SIZE - 1))) as usize;
            let mut buf = vec![0u8; chunk];
            self.copy_in(mem, at, &mut buf)?;
            if let Some(nul) = buf.iter().position(|b| *b == 0) {
                out.extend_from_slice(&buf[..nul]);
                if out.len() > max {
                    return Err(ENAMETOOLONG);
                }
                return Ok(out);
            }
            out.extend_from_slice(&buf);
            if out.len() > max {
                return Err(ENAMETOOLONG);
            }
            at = at.checked_add(chunk as u64).ok_or(EFAULT)?;
        }
    }

    /// Reads the NUL-terminated string at `addr` for display, without changing anything: only
    /// from pages that are present and readable, never populating one. Returns the bytes before
    /// the NUL, or the first `max` bytes when there is no NUL among them; `None` when a page on
    /// the way is absent, unmapped or unreadable (a hostile pointer, or a page not touched yet).
    pub fn peek_cstr(&self, mem: &dyn Memory, addr: u64, max: usize) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        let mut at = addr;
        while out.len() < max {
            let chunk = ((PAGE_SIZE - (at & (PAGE_SIZE - 1))) as usize).min(max - out.len());
            let mut buf = vec![0u8; chunk];
            self.check(at, chunk as u64, Access::Read).ok()?;
            mem.read(at, &mut buf).ok()?;
            if let Some(nul) = buf.iter().position(|b| *b == 0) {
                out.extend_from_slice(&buf[..nul]);
                return Some(out);
            }
            out.extend_from_slice(&buf);
            at = at.checked_add(chunk as u64)?;
        }
        Some(out)
    }

    /// Serves a demand fault at `addr`: populates a fault-around window (aligned
    /// [`FAULT_AROUND_PAGES`] pages, clipped to the VMA) with the VMA's protection.
    pub fn fault(&self, mem: &mut dyn Memory, addr: u64, access: Access) -> Result<(), FaultError> {
        let v = self.find(addr).ok_or(FaultError::Unmapped)?;
        if !access.allowed(v.prot) || !v.prot.readable() {
            return Err(FaultError::Protection(v.prot));
        }
        // A write to a page shared copy-on-write since a fork: a frame of its own.
        if access == Access::Write {
            match mem.unshare(addr) {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(MemError::OutOfFrames) => return Err(FaultError::OutOfMemory),
                Err(_) => return Err(FaultError::Unmapped),
            }
        }
        let window = FAULT_AROUND_PAGES * PAGE_SIZE;
        let a = (addr & !(window - 1)).max(v.start);
        let b = (addr & !(window - 1)).saturating_add(window).min(v.end);
        match mem.populate(a, b - a, v.prot) {
            Ok(()) => Ok(()),
            Err(MemError::OutOfFrames) => {
                // Fall back to the single page before giving up.
                let p = page_down(addr);
                mem.populate(p, PAGE_SIZE, v.prot).map_err(|_| FaultError::OutOfMemory)
            }
            Err(_) => Err(FaultError::Unmapped),
        }
    }
}

/// Validates an `addr`/`len` pair of a memory syscall: `addr` page aligned, the page-rounded
/// range inside the user half. Returns the page-rounded end.
pub fn user_range(addr: u64, len: u64) -> Result<u64, i32> {
    if !is_page_aligned(addr) {
        return Err(EINVAL);
    }
    let len = page_up(len).ok_or(ENOMEM)?;
    let end = addr.checked_add(len).ok_or(ENOMEM)?;
    if end > USER_END {
        return Err(ENOMEM);
    }
    Ok(end)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn anon(start: u64, end: u64, prot: Prot) -> Vma {
        Vma { start, end, prot, kind: VmaKind::Anon, shared: false }
    }

    #[test]
    fn split_protect_merge() {
        let mut a = Mappings::new(1000);
        a.insert(anon(0x10000, 0x20000, Prot::NONE));
        assert_eq!(a.committed(), 0);
        a.set_prot(0x12000, 0x14000, Prot::RW);
        assert_eq!(a.iter().count(), 3);
        assert_eq!(a.committed(), 2);
        a.set_prot(0x12000, 0x14000, Prot::NONE);
        assert_eq!(a.iter().count(), 1);
        let removed = a.remove(0x11000, 0x12000);
        assert_eq!(removed.len(), 1);
        assert_eq!(a.iter().count(), 2);
        assert!(a.is_free(0x11000, 0x12000));
        assert!(!a.fully_mapped(0x10000, 0x13000));
        assert!(a.fully_mapped(0x12000, 0x20000));
        assert_eq!(a.find_free(0x1000, 0x30000), Some(0x2f000));
        assert_eq!(a.find_free(0x1000, 0x20000), Some(0x11000));
        assert_eq!(a.find_free(0x2000, 0x20000), None);
    }

    #[test]
    fn nothing_is_placed_in_the_reserved_range() {
        use user_layout::{RESERVED_END, RESERVED_START};
        let mut a = Mappings::new(1 << 30);
        // Just above the range: the next fit skips it, whatever its size.
        a.insert(anon(RESERVED_END + 0x1000, 0x7fff_0000_0000, Prot::NONE));
        assert_eq!(a.find_free(0x1000, 0x7fff_0000_0000), Some(RESERVED_END));
        a.insert(anon(RESERVED_END, RESERVED_END + 0x1000, Prot::NONE));
        assert_eq!(a.find_free(0x1000, 0x7fff_0000_0000), Some(RESERVED_START - 0x1000));
        assert_eq!(a.find_free(1 << 40, 0x7fff_0000_0000), Some(RESERVED_START - (1 << 40)));
        assert!(!a.is_free(RESERVED_START - 0x1000, RESERVED_START + 0x1000));
        assert!(a.is_free(RESERVED_START - 0x1000, RESERVED_START));
        assert!(user_layout::reserved(RESERVED_END - 1, RESERVED_END));
        assert!(!user_layout::reserved(RESERVED_END, RESERVED_END + 1));
    }

    #[test]
    fn save_restore_round_trip() {
        let mut a = Mappings::new(1000);
        a.insert(anon(0x10000, 0x20000, Prot::RW));
        a.set_prot(0x12000, 0x14000, Prot::READ);
        let data = FileBytes(alloc::sync::Arc::from(&b"file contents"[..]));
        let kind = VmaKind::File { path: "/f".into(), data, offset: 0x1000, size: 13, ino: 99 };
        a.insert(Vma { start: 0x30000, end: 0x32000, prot: Prot::READ, kind, shared: false });
        a.insert(Vma {
            start: 0x40000,
            end: 0x41000,
            prot: Prot(5),
            kind: VmaKind::Image { offset: 0 },
            shared: false,
        });
        let bytes = postcard::to_stdvec(&a).unwrap();
        let b: Mappings = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(a, b);
        b.validate().unwrap();
        assert_eq!(b.committed(), a.committed());
        assert_eq!(b.maps("/x"), a.maps("/x"));

        // Broken invariants are refused.
        let mut bad = b.clone();
        bad.vmas.insert(0x11000, anon(0x11000, 0x13000, Prot::RW));
        assert!(bad.validate().is_err(), "overlap");
        let mut bad = b.clone();
        bad.vmas.insert(0x50000, anon(0x50001, 0x51000, Prot::RW));
        assert!(bad.validate().is_err(), "key and start differ");
        let mut bad = b.clone();
        bad.vmas.insert(0x50000, anon(0x50000, 0x50000, Prot::RW));
        assert!(bad.validate().is_err(), "empty");
        let mut bad = b.clone();
        bad.vmas.get_mut(&0x30000).unwrap().kind =
            VmaKind::File { path: "/f".into(), data: FileBytes(b"x"[..].into()), offset: 0, size: 2, ino: 1 };
        assert!(bad.validate().is_err(), "size and data differ");
    }

    #[test]
    fn copies_check_permissions() {
        let mut a = Mappings::new(1000);
        let mut m = crate::FakeMemory::new(100);
        a.insert(anon(0x10000, 0x12000, Prot::RW));
        a.insert(anon(0x12000, 0x13000, Prot::READ));
        a.copy_out(&mut m, 0x11ffe, b"hi").unwrap();
        assert_eq!(a.copy_out(&mut m, 0x11fff, b"hi"), Err(EFAULT));
        let mut b = [0u8; 3];
        a.copy_in(&mut m, 0x11ffe, &mut b).unwrap();
        assert_eq!(&b, b"hi\0");
        assert_eq!(a.copy_in(&mut m, 0x12fff, &mut b), Err(EFAULT));
        assert_eq!(a.copy_in(&mut m, u64::MAX - 1, &mut b), Err(EFAULT));
        assert_eq!(a.read_cstr(&mut m, 0x11ffe, 100).unwrap(), b"hi");
        assert_eq!(a.read_cstr(&mut m, 0x11ffe, 1), Err(ENAMETOOLONG));
    }

    #[test]
    fn peeking_a_string_changes_nothing() {
        let mut a = Mappings::new(1000);
        let mut m = crate::FakeMemory::new(100);
        a.insert(anon(0x10000, 0x14000, Prot::RW));
        a.insert(anon(0x14000, 0x15000, Prot::NONE));
        a.copy_out(&mut m, 0x11ffe, b"hi\0").unwrap();
        a.copy_out(&mut m, 0x13ffe, b"ab").unwrap();
        let pages = m.pages.len();
        assert_eq!(a.peek_cstr(&m, 0x11ffe, 100).as_deref(), Some(&b"hi"[..]));
        assert_eq!(a.peek_cstr(&m, 0x11ffe, 1).as_deref(), Some(&b"h"[..]), "cut at the limit");
        assert_eq!(a.peek_cstr(&m, 0x10010, 100), None, "a page never touched is not populated");
        assert_eq!(a.peek_cstr(&m, 0x13ffe, 100), None, "the string runs into an unreadable page");
        assert_eq!(a.peek_cstr(&m, 0x9000, 100), None, "unmapped");
        assert_eq!(a.peek_cstr(&m, u64::MAX - 1, 100), None, "outside user space");
        assert_eq!(m.pages.len(), pages);
    }
}
