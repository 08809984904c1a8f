//! Guest RAM, the frame allocator and the 4-level page tables of the user half.
//!
//! [`AddressSpace`] implements the syscall core's [`Memory`] trait: it maps user pages by
//! writing page-table entries into guest RAM from the host. Adding a mapping or widening its
//! rights needs nothing more, because the CPU (or KVM's shadow MMU) re-walks the tables on the
//! fault that follows. Removing a mapping or narrowing its rights does: the host cannot reach a
//! shadow MMU or a TLB, so every such entry is also queued in [`AddressSpace::take_stale`] and the
//! VM replays it from ring 0 (a write of the entry to itself, then `invlpg`), the way a guest
//! kernel would. Frames are handed out deterministically (lowest free first), so two runs of the
//! same program produce identical guest-physical layouts.

use deja_kernel::{MemError, Memory, Prot, PAGE_SIZE};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use crate::coverage::BlockImage;
use crate::layout::{FRAME_BASE, PML4_PHYS, USER_END};

/// Present.
pub const PTE_P: u64 = 1;
/// Writable.
pub const PTE_W: u64 = 1 << 1;
/// User-accessible.
pub const PTE_U: u64 = 1 << 2;
/// Accessed.
pub const PTE_A: u64 = 1 << 5;
/// Dirty.
pub const PTE_D: u64 = 1 << 6;
/// Large page (in a PDE or PDPTE).
pub const PTE_PS: u64 = 1 << 7;
/// No-execute.
pub const PTE_NX: u64 = 1 << 63;
/// Physical-address bits of an entry.
pub const PTE_ADDR: u64 = 0x000f_ffff_ffff_f000;

/// Errors setting up guest RAM.
#[derive(Debug, snafu::Snafu)]
pub enum RamError {
    /// The host refused the allocation.
    #[snafu(display("cannot allocate {mib} MiB of guest memory on the host"))]
    Alloc {
        /// The size asked for, MiB.
        mib: u64,
    },
    /// The size is outside what deja supports.
    #[snafu(display("guest memory must be between 16 MiB and 64 GiB, got {mib} MiB"))]
    Size {
        /// The size asked for, MiB.
        mib: u64,
    },
}

/// Guest RAM, a frame allocator over it, and the page tables that map the user half.
#[derive(Debug)]
pub struct AddressSpace {
    ram: GuestMemoryMmap,
    size: u64,
    /// Next never-used frame.
    bump: u64,
    /// Freed frames, reused lowest first.
    free: BTreeSet<u64>,
    /// Leaf entries whose old value may still be cached by the CPU: (PTE gpa, user va).
    stale: Vec<(u64, u64)>,
    /// Frames holding page tables: frame → (level of its entries, first address it maps).
    /// Level 0 entries map 4 KiB pages, level 3 entries 512 GiB.
    pt_frames: BTreeMap<u64, (u32, u64)>,
    /// One bit per frame the monitor wrote since the last [`AddressSpace::take_host_dirty`]
    /// (KVM's dirty log only sees the guest's own writes).
    host_dirty: Vec<u64>,
    /// The blocks that may carry a coverage breakpoint: reads through [`Memory`] show their
    /// original bytes ([`crate::coverage`]).
    blocks: Option<Arc<BlockImage>>,
}

/// The allocator's state, saved in snapshots and restored on forks.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FrameState {
    /// Next never-used frame.
    pub bump: u64,
    /// Freed frames.
    pub free: Vec<u64>,
    /// Page-table frames: (frame, level, first address mapped).
    pub pt_frames: Vec<(u64, u32, u64)>,
}

/// Sign-extends a 48-bit address to canonical form.
pub fn canonical(va: u64) -> u64 {
    (((va << 16) as i64) >> 16) as u64
}

/// Leaf bits for `prot`. A `PROT_NONE` page stays present for the monitor but loses the user
/// bit, so any ring-3 access faults while its contents survive a later `mprotect`.
fn leaf_bits(prot: Prot) -> u64 {
    if !prot.readable() {
        return PTE_P | PTE_A | PTE_D | PTE_NX;
    }
    let mut bits = PTE_P | PTE_U | PTE_A | PTE_D;
    if prot.writable() {
        bits |= PTE_W;
    }
    if !prot.executable() {
        bits |= PTE_NX;
    }
    bits
}

/// True if changing a leaf from `old` to `new` bits takes a right away from ring 3.
fn narrows(old: u64, new: u64) -> bool {
    (old & PTE_W != 0 && new & PTE_W == 0)
        || (old & PTE_NX == 0 && new & PTE_NX != 0)
        || (old & PTE_U != 0 && new & PTE_U == 0)
}

fn index(va: u64, level: u32) -> u64 {
    (va >> (12 + 9 * level)) & 0x1ff
}

impl AddressSpace {
    /// Allocates `size` bytes of zeroed guest RAM.
    pub fn new(size: u64) -> Result<Self, RamError> {
        let mib = size >> 20;
        if !(16..=65536).contains(&mib) {
            return Err(RamError::Size { mib });
        }
        let ram =
            GuestMemoryMmap::from_ranges(&[(GuestAddress(0), size as usize)]).map_err(|_| RamError::Alloc { mib })?;
        let mut pt_frames = BTreeMap::new();
        pt_frames.insert(PML4_PHYS, (3, 0));
        let host_dirty = vec![0u64; (size / PAGE_SIZE).div_ceil(64) as usize];
        Ok(AddressSpace {
            ram,
            size,
            bump: FRAME_BASE,
            free: BTreeSet::new(),
            stale: Vec::new(),
            pt_frames,
            host_dirty,
            blocks: None,
        })
    }

    /// Shows the core every block of `blocks` with its original byte, breakpoint or not.
    pub fn set_blocks(&mut self, blocks: Option<Arc<BlockImage>>) {
        self.blocks = blocks;
    }

    /// The blocks set with [`AddressSpace::set_blocks`].
    pub fn blocks(&self) -> Option<&Arc<BlockImage>> {
        self.blocks.as_ref()
    }

    /// Writes `byte` at user address `va` (a present page), as the monitor: for breakpoints.
    pub fn poke(&mut self, va: u64, byte: u8) -> bool {
        match self.translate(va) {
            Some(gpa) => {
                self.write_phys(gpa, &[byte]);
                true
            }
            None => false,
        }
    }

    /// The guest RAM.
    pub fn ram(&self) -> &GuestMemoryMmap {
        &self.ram
    }

    /// Size of guest RAM in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Reads a u64 from guest-physical memory (always in bounds for the monitor's own tables).
    pub fn read_u64(&self, gpa: u64) -> u64 {
        self.ram.read_obj::<u64>(GuestAddress(gpa)).unwrap_or(0)
    }

    /// Writes a u64 to guest-physical memory.
    pub fn write_u64(&mut self, gpa: u64, v: u64) {
        // Only called with addresses of frames this allocator handed out: in bounds.
        let _ = self.ram.write_obj(v, GuestAddress(gpa));
        self.mark(gpa, 8);
    }

    fn mark(&mut self, gpa: u64, len: u64) {
        if len == 0 {
            return;
        }
        let (first, last) = (gpa / PAGE_SIZE, (gpa + len - 1) / PAGE_SIZE);
        for f in first..=last {
            if let Some(w) = self.host_dirty.get_mut((f / 64) as usize) {
                *w |= 1 << (f % 64);
            }
        }
    }

    /// Frames (guest-physical addresses) the monitor wrote since the last call, ascending.
    pub fn take_host_dirty(&mut self) -> Vec<u64> {
        let mut out = Vec::new();
        for (i, w) in self.host_dirty.iter_mut().enumerate() {
            let mut bits = std::mem::take(w);
            while bits != 0 {
                let b = bits.trailing_zeros() as u64;
                out.push((i as u64 * 64 + b) * PAGE_SIZE);
                bits &= bits - 1;
            }
        }
        out
    }

    /// The allocator's state.
    pub fn frame_state(&self) -> FrameState {
        FrameState {
            bump: self.bump,
            free: self.free.iter().copied().collect(),
            pt_frames: self.pt_frames.iter().map(|(f, (l, b))| (*f, *l, *b)).collect(),
        }
    }

    /// Replaces the allocator's state (RAM contents are restored separately).
    pub fn set_frame_state(&mut self, st: &FrameState) {
        self.bump = st.bump;
        self.free = st.free.iter().copied().collect();
        self.pt_frames = st.pt_frames.iter().map(|(f, l, b)| (*f, (*l, *b))).collect();
        self.stale.clear();
    }

    /// Level and base address of the page table in `frame`, if it is one.
    pub fn page_table(&self, frame: u64) -> Option<(u32, u64)> {
        self.pt_frames.get(&frame).copied()
    }

    /// Registers a page-table frame the monitor built by hand (the direct map).
    pub fn note_page_table(&mut self, frame: u64, level: u32, base: u64) {
        self.pt_frames.insert(frame, (level, base));
    }

    /// Next never-used frame: everything at or above it is zero in a fresh VM.
    pub fn bump(&self) -> u64 {
        self.bump
    }

    /// Writes bytes to guest-physical memory.
    pub fn write_phys(&mut self, gpa: u64, data: &[u8]) {
        let _ = self.ram.write_slice(data, GuestAddress(gpa));
        self.mark(gpa, data.len() as u64);
    }

    /// Reads bytes from guest-physical memory.
    pub fn read_phys(&self, gpa: u64, buf: &mut [u8]) {
        if self.ram.read_slice(buf, GuestAddress(gpa)).is_err() {
            buf.fill(0);
        }
    }

    /// Allocates a zeroed frame.
    pub fn alloc_frame(&mut self) -> Result<u64, MemError> {
        let frame = if let Some(f) = self.free.pop_first() {
            f
        } else if self.bump + PAGE_SIZE <= self.size {
            self.bump += PAGE_SIZE;
            self.bump - PAGE_SIZE
        } else {
            return Err(MemError::OutOfFrames);
        };
        self.write_phys(frame, &[0u8; PAGE_SIZE as usize]);
        Ok(frame)
    }

    fn free_frame(&mut self, frame: u64) {
        self.free.insert(frame);
    }

    /// Frames not yet handed out.
    pub fn frames_left(&self) -> u64 {
        (self.size - self.bump) / PAGE_SIZE + self.free.len() as u64
    }

    /// Walks to the leaf entry of `va`, creating intermediate tables when `create` is set.
    /// Returns the guest-physical address of the leaf PTE.
    fn walk(&mut self, va: u64, create: bool) -> Result<Option<u64>, MemError> {
        let mut table = PML4_PHYS;
        for level in (1..=3).rev() {
            let slot = table + index(va, level) * 8;
            let entry = self.read_u64(slot);
            if entry & PTE_P == 0 {
                if !create {
                    return Ok(None);
                }
                let frame = self.alloc_frame()?;
                self.write_u64(slot, frame | PTE_P | PTE_W | PTE_U | PTE_A);
                let span = 1u64 << (12 + 9 * level);
                self.pt_frames.insert(frame, (level - 1, canonical(va & !(span - 1))));
                table = frame;
            } else {
                table = entry & PTE_ADDR;
            }
        }
        Ok(Some(table + index(va, 0) * 8))
    }

    fn lookup(&self, va: u64) -> Option<(u64, u64)> {
        let mut table = PML4_PHYS;
        for level in (1..=3).rev() {
            let entry = self.read_u64(table + index(va, level) * 8);
            if entry & PTE_P == 0 {
                return None;
            }
            table = entry & PTE_ADDR;
        }
        let slot = table + index(va, 0) * 8;
        let pte = self.read_u64(slot);
        (pte & PTE_P != 0).then_some((slot, pte))
    }

    /// Maps one page of the monitor (outside the user half) with explicit entry bits.
    pub fn map_page(&mut self, va: u64, phys: u64, bits: u64) -> Result<(), MemError> {
        let slot = self.walk(va, true)?.ok_or(MemError::OutOfFrames)?;
        self.write_u64(slot, phys | bits);
        Ok(())
    }

    /// Guest-physical address backing user address `va`, if present.
    pub fn translate(&self, va: u64) -> Option<u64> {
        if va >= USER_END {
            return None;
        }
        self.lookup(va & !(PAGE_SIZE - 1)).map(|(_, pte)| (pte & PTE_ADDR) | (va & (PAGE_SIZE - 1)))
    }

    /// Takes the leaf entries that must be re-written from ring 0 before the guest runs again.
    pub fn take_stale(&mut self) -> Vec<(u64, u64)> {
        std::mem::take(&mut self.stale)
    }

    /// True if entries wait for a ring-0 sync.
    pub fn has_stale(&self) -> bool {
        !self.stale.is_empty()
    }

    fn check_range(addr: u64, len: u64) -> Result<(), MemError> {
        match addr.checked_add(len) {
            Some(end) if end <= USER_END => Ok(()),
            _ => Err(MemError::OutOfRange { addr }),
        }
    }

    /// Calls `f(va, slot, pte)` for every present leaf in `[addr, addr+len)`, skipping absent
    /// tables quickly.
    fn for_each_present(&self, addr: u64, len: u64, f: &mut dyn FnMut(u64, u64, u64)) {
        let end = addr.saturating_add(len).min(USER_END);
        self.visit(PML4_PHYS, 3, 0, addr, end, f);
    }

    fn visit(&self, table: u64, level: u32, base: u64, lo: u64, hi: u64, f: &mut dyn FnMut(u64, u64, u64)) {
        let span = 1u64 << (12 + 9 * level);
        for i in 0..512u64 {
            let start = base + i * span;
            if start >= hi {
                break;
            }
            if start + span <= lo {
                continue;
            }
            let slot = table + i * 8;
            let entry = self.read_u64(slot);
            if entry & PTE_P == 0 {
                continue;
            }
            if level == 0 {
                f(start, slot, entry);
            } else {
                self.visit(entry & PTE_ADDR, level - 1, start, lo, hi, f);
            }
        }
    }

    fn collect_present(&self, addr: u64, len: u64) -> Vec<(u64, u64, u64)> {
        let mut out = Vec::new();
        self.for_each_present(addr, len, &mut |va, slot, pte| out.push((va, slot, pte)));
        out
    }
}

impl Memory for AddressSpace {
    fn populate(&mut self, addr: u64, len: u64, prot: Prot) -> Result<(), MemError> {
        Self::check_range(addr, len)?;
        let bits = leaf_bits(prot);
        let mut va = addr;
        while va < addr + len {
            let slot = self.walk(va, true)?.ok_or(MemError::OutOfFrames)?;
            let pte = self.read_u64(slot);
            if pte & PTE_P == 0 {
                let frame = self.alloc_frame()?;
                self.write_u64(slot, frame | bits);
            } else if pte & !PTE_ADDR != bits {
                if narrows(pte, bits) {
                    self.stale.push((slot, va));
                }
                self.write_u64(slot, (pte & PTE_ADDR) | bits);
            }
            va += PAGE_SIZE;
        }
        Ok(())
    }

    fn protect(&mut self, addr: u64, len: u64, prot: Prot) {
        let bits = leaf_bits(prot);
        for (va, slot, pte) in self.collect_present(addr, len) {
            if pte & !PTE_ADDR == bits {
                continue;
            }
            if narrows(pte, bits) {
                self.stale.push((slot, va));
            }
            self.write_u64(slot, (pte & PTE_ADDR) | bits);
        }
    }

    fn unmap(&mut self, addr: u64, len: u64) {
        for (va, slot, pte) in self.collect_present(addr, len) {
            self.write_u64(slot, 0);
            self.free_frame(pte & PTE_ADDR);
            self.stale.push((slot, va));
        }
    }

    fn move_pages(&mut self, from: u64, to: u64, len: u64) {
        if Self::check_range(to, len).is_err() {
            return;
        }
        for (va, slot, pte) in self.collect_present(from, len) {
            let Ok(Some(dst)) = self.walk(va - from + to, true) else { continue };
            self.write_u64(dst, pte);
            self.write_u64(slot, 0);
            self.stale.push((slot, va));
        }
    }

    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemError> {
        Self::check_range(addr, buf.len() as u64)?;
        let mut done = 0usize;
        while done < buf.len() {
            let va = addr + done as u64;
            let gpa = self.translate(va).ok_or(MemError::NotPresent { addr: va })?;
            let n = (PAGE_SIZE - (va & (PAGE_SIZE - 1))).min((buf.len() - done) as u64) as usize;
            self.read_phys(gpa, &mut buf[done..done + n]);
            done += n;
        }
        if let Some(b) = &self.blocks {
            b.overlay(addr, buf);
        }
        Ok(())
    }

    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), MemError> {
        Self::check_range(addr, data.len() as u64)?;
        let mut done = 0usize;
        while done < data.len() {
            let va = addr + done as u64;
            let gpa = self.translate(va).ok_or(MemError::NotPresent { addr: va })?;
            let n = (PAGE_SIZE - (va & (PAGE_SIZE - 1))).min((data.len() - done) as u64) as usize;
            self.write_phys(gpa, &data[done..done + n]);
            done += n;
        }
        Ok(())
    }

    fn for_each_page(&self, f: &mut dyn FnMut(u64, &[u8])) {
        let mut buf = vec![0u8; PAGE_SIZE as usize];
        self.for_each_present(0, USER_END, &mut |va, _slot, pte| {
            self.read_phys(pte & PTE_ADDR, &mut buf);
            if let Some(b) = &self.blocks {
                b.overlay(va, &mut buf);
            }
            f(va, &buf);
        });
    }

    fn free_frames(&self) -> u64 {
        self.frames_left()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn space() -> AddressSpace {
        AddressSpace::new(16 << 20).unwrap()
    }

    #[test]
    fn populate_read_write_roundtrip() {
        let mut s = space();
        s.populate(0x40_0000, 3 * PAGE_SIZE, Prot::RW).unwrap();
        s.write(0x40_0ffe, b"hello").unwrap();
        let mut buf = [0u8; 5];
        s.read(0x40_0ffe, &mut buf).unwrap();
        assert_eq!(&buf, b"hello");
        assert!(matches!(s.read(0x50_0000, &mut buf), Err(MemError::NotPresent { .. })));
    }

    #[test]
    fn unmap_frees_and_queues_sync() {
        let mut s = space();
        let before = s.frames_left();
        s.populate(0x40_0000, 4 * PAGE_SIZE, Prot::RW).unwrap();
        assert!(!s.has_stale(), "adding mappings needs no ring-0 sync");
        s.unmap(0x40_0000, 4 * PAGE_SIZE);
        assert_eq!(s.take_stale().len(), 4);
        // The four leaf frames are back; the three new table frames stay.
        assert_eq!(s.frames_left(), before - 3);
        assert!(s.translate(0x40_0000).is_none());
    }

    #[test]
    fn narrowing_rights_queues_sync_widening_does_not() {
        let mut s = space();
        s.populate(0x40_0000, PAGE_SIZE, Prot::READ).unwrap();
        s.protect(0x40_0000, PAGE_SIZE, Prot::RW);
        assert!(!s.has_stale());
        s.protect(0x40_0000, PAGE_SIZE, Prot::READ);
        assert_eq!(s.take_stale(), vec![(s.walk(0x40_0000, false).unwrap().unwrap(), 0x40_0000)]);
    }

    #[test]
    fn prot_none_keeps_contents_but_removes_user_access() {
        let mut s = space();
        s.populate(0x40_0000, PAGE_SIZE, Prot::RW).unwrap();
        s.write(0x40_0000, b"kept").unwrap();
        s.protect(0x40_0000, PAGE_SIZE, Prot::NONE);
        assert_eq!(s.take_stale().len(), 1, "dropping user access needs a ring-0 sync");
        let (_, pte) = s.lookup(0x40_0000).unwrap();
        assert_eq!(pte & PTE_U, 0);
        s.protect(0x40_0000, PAGE_SIZE, Prot::READ);
        let mut buf = [0u8; 4];
        s.read(0x40_0000, &mut buf).unwrap();
        assert_eq!(&buf, b"kept");
    }

    #[test]
    fn move_pages_keeps_contents() {
        let mut s = space();
        s.populate(0x40_0000, 2 * PAGE_SIZE, Prot::RW).unwrap();
        s.write(0x40_1000, b"moved").unwrap();
        s.move_pages(0x40_0000, 0x7000_0000, 2 * PAGE_SIZE);
        let mut buf = [0u8; 5];
        s.read(0x7000_1000, &mut buf).unwrap();
        assert_eq!(&buf, b"moved");
        assert!(s.translate(0x40_1000).is_none());
    }

    #[test]
    fn frames_run_out_cleanly() {
        let mut s = space();
        let err = s.populate(0x40_0000, 32 << 20, Prot::RW).unwrap_err();
        assert_eq!(err, MemError::OutOfFrames);
    }

    #[test]
    fn kernel_half_is_refused() {
        let mut s = space();
        assert!(s.populate(USER_END, PAGE_SIZE, Prot::RW).is_err());
        assert!(s.write(u64::MAX - 2, b"abc").is_err());
    }

    #[test]
    fn page_walk_visits_in_order() {
        let mut s = space();
        s.populate(0x7000_0000, PAGE_SIZE, Prot::RW).unwrap();
        s.populate(0x40_0000, PAGE_SIZE, Prot::RW).unwrap();
        let mut seen = Vec::new();
        s.for_each_page(&mut |va, _| seen.push(va));
        assert_eq!(seen, vec![0x40_0000, 0x7000_0000]);
    }
}
