//! The 4-level page tables of each space: walks (creating tables when asked), translation, the
//! leaf entries queued for the ring-0 replay, the user half shared copy-on-write at a fork and
//! unshared at a first write, and a dropped space's tables zeroed and pooled.

use super::*;
use deja_kernel::mm::user_layout::{RESERVED_END, RESERVED_START};

/// True if the 1 GiB at `va` lies in the reserved range (whose bounds are 1 GiB aligned).
fn reserved_gib(va: u64) -> bool {
    (RESERVED_START..RESERVED_END).contains(&va)
}

impl AddressSpace {
    /// Walks the current space to the leaf entry of `va`, creating intermediate tables when
    /// `create` is set. Returns the guest-physical address of the leaf PTE.
    pub(super) fn walk(&mut self, va: u64, create: bool) -> Result<Option<u64>, MemError> {
        self.walk_in(self.root, va, create)
    }

    /// [`AddressSpace::walk`] in the space whose PML4 is `root`.
    fn walk_in(&mut self, root: u64, va: u64, create: bool) -> Result<Option<u64>, MemError> {
        let mut table = root;
        for level in (1..=3).rev() {
            let slot = table + index(va, level) * 8;
            let entry = self.read_u64(slot);
            if entry & PTE_P == 0 {
                if !create {
                    return Ok(None);
                }
                let frame = self.alloc_table_frame(level - 1)?;
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

    #[cfg(test)]
    pub(super) fn lookup(&self, va: u64) -> Option<(u64, u64)> {
        self.lookup_in(self.root, va)
    }

    pub(super) fn lookup_in(&self, root: u64, va: u64) -> Option<(u64, u64)> {
        lookup_with(|gpa| self.read_u64(gpa), root, va)
    }

    /// Maps one page of the monitor (outside the user half) with explicit entry bits.
    pub fn map_page(&mut self, va: u64, phys: u64, bits: u64) -> Result<(), MemError> {
        let slot = self.walk(va, true)?.ok_or(MemError::OutOfFrames)?;
        self.write_u64(slot, phys | bits);
        Ok(())
    }

    /// Guest-physical address backing user address `va` in the current space, if present.
    pub fn translate(&self, va: u64) -> Option<u64> {
        self.translate_in(self.root, va)
    }

    /// Guest-physical address backing user address `va` in space `root`, if present.
    pub fn translate_in(&self, root: u64, va: u64) -> Option<u64> {
        if va >= USER_END {
            return None;
        }
        self.lookup_in(root, va & !(PAGE_SIZE - 1)).map(|(_, pte)| (pte & PTE_ADDR) | (va & (PAGE_SIZE - 1)))
    }

    /// Takes the leaf entries that must be re-written from ring 0 before the guest runs again.
    pub fn take_stale(&mut self) -> Vec<(u64, u64)> {
        std::mem::take(&mut self.stale)
    }

    /// True if entries wait for a ring-0 sync.
    pub fn has_stale(&self) -> bool {
        !self.stale.is_empty()
    }

    pub(super) fn check_range(addr: u64, len: u64) -> Result<(), MemError> {
        match addr.checked_add(len) {
            Some(end) if end <= USER_END => Ok(()),
            _ => Err(MemError::OutOfRange { addr }),
        }
    }

    /// Calls `f(va, slot, pte)` for every present leaf in `[addr, addr+len)`, skipping absent
    /// tables quickly.
    pub(super) fn for_each_present(&self, addr: u64, len: u64, f: &mut dyn FnMut(u64, u64, u64)) {
        let end = addr.saturating_add(len).min(USER_END);
        self.visit(self.root, 3, 0, addr, end, f);
    }

    pub(super) fn visit(&self, table: u64, level: u32, base: u64, lo: u64, hi: u64, f: &mut dyn FnMut(u64, u64, u64)) {
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

    pub(super) fn collect_present(&self, addr: u64, len: u64) -> Vec<(u64, u64, u64)> {
        let mut out = Vec::new();
        self.for_each_present(addr, len, &mut |va, slot, pte| out.push((va, slot, pte)));
        out
    }

    /// Maps into the space `to` every present user page of the current one, on the same
    /// frame: as it is in a range of `shared`, copy-on-write in both spaces otherwise. The
    /// current space's entries that lose their write bit are queued for the ring-0 replay.
    /// The reserved range (the guest placement's kernel) is not copied: [`AddressSpace::new_space`]
    /// links its tables.
    pub(super) fn share_user_half(&mut self, to: u64, shared: &[(u64, u64)]) -> Result<(), MemError> {
        let mut present = self.collect_present(0, RESERVED_START);
        present.extend(self.collect_present(RESERVED_END, USER_END - RESERVED_END));
        for (va, slot, pte) in present {
            let child = self.walk_in(to, va, true)?.ok_or(MemError::OutOfFrames)?;
            *self.shared.entry(pte & PTE_ADDR).or_insert(1) += 1;
            if shared.iter().any(|&(start, end)| (start..end).contains(&va)) {
                self.write_u64(child, pte);
                continue;
            }
            let cow = to_cow(pte);
            self.write_u64(child, cow);
            if cow != pte {
                self.write_u64(slot, cow);
                if narrows(pte, cow) {
                    self.stale.push((slot, va));
                }
            }
        }
        Ok(())
    }

    /// Ends copy-on-write for the page whose entry is at `slot` (value `pte`, with
    /// [`PTE_COW`]): a copy of the frame if another space still maps it, the frame itself
    /// otherwise, writable if the page may be written. A copy moves a present entry to
    /// another frame: queued for the ring-0 replay when `queue` is set (the page-fault path
    /// needs none: the fault took the entry out of every cache).
    pub(super) fn end_cow(&mut self, slot: u64, va: u64, pte: u64, queue: bool) -> Result<(), MemError> {
        let frame = pte & PTE_ADDR;
        let mut bits = pte & !PTE_ADDR & !(PTE_COW | PTE_COW_W);
        if pte & PTE_COW_W != 0 {
            bits |= PTE_W;
        }
        if self.shared.contains_key(&frame) {
            let copy = self.take_frame()?;
            let mut buf = vec![0u8; PAGE_SIZE as usize];
            self.read_phys(frame, &mut buf);
            self.write_phys(copy, &buf);
            self.release(frame);
            self.write_u64(slot, copy | bits);
            if queue {
                self.stale.push((slot, va));
            }
        } else {
            self.write_u64(slot, frame | bits);
        }
        Ok(())
    }

    /// [`Memory::unshare`] of the page at `addr`: its entry moves to a frame of its own when it is
    /// copy-on-write and may be written. `queue` queues the entry for the ring-0 replay: needed
    /// unless a fault on it took it out of every cache (the guest placement's kernel unshares a
    /// page before it writes it, on a page the CPU may hold the read-only entry of).
    pub fn unshare_page(&mut self, addr: u64, queue: bool) -> Result<bool, MemError> {
        if addr >= USER_END {
            return Ok(false);
        }
        let va = addr & !(PAGE_SIZE - 1);
        match self.lookup_in(self.root, va) {
            Some((slot, pte)) if pte & PTE_COW_W != 0 => {
                self.end_cow(slot, va, pte, queue)?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// Ends copy-on-write for every page `[addr, addr+len)` touches (see
    /// [`AddressSpace::end_cow`]), for a write of the monitor.
    pub(super) fn end_cow_range(&mut self, addr: u64, len: u64) -> Result<(), MemError> {
        if len == 0 {
            return Ok(());
        }
        let first = addr & !(PAGE_SIZE - 1);
        for va in (first..addr + len).step_by(PAGE_SIZE as usize) {
            if let Some((slot, pte)) = self.lookup_in(self.root, va) {
                if pte & PTE_COW != 0 {
                    self.end_cow(slot, va, pte, true)?;
                }
            }
        }
        Ok(())
    }

    /// Links the reserved range's tables (the guest placement's kernel window, mapped in the first
    /// space) into the new space `to`: its PDPT entries for the range, 1 GiB each, point to the
    /// same page directories, so the kernel, its heap and the physical window are the same pages
    /// at the same addresses in every space, and no space's fork copies or drop frees them. A
    /// space with nothing mapped there (the host placement) links nothing.
    pub(super) fn link_reserved(&mut self, to: u64) -> Result<(), MemError> {
        const GIB: u64 = 1 << 30;
        for va in (RESERVED_START..RESERVED_END).step_by(GIB as usize) {
            let from = self.read_u64(self.root + index(va, 3) * 8);
            if from & PTE_P == 0 {
                continue;
            }
            let entry = self.read_u64((from & PTE_ADDR) + index(va, 2) * 8);
            if entry & PTE_P == 0 {
                continue;
            }
            let slot = to + index(va, 3) * 8;
            let mut pml4e = self.read_u64(slot);
            if pml4e & PTE_P == 0 {
                let frame = self.alloc_table_frame(2)?;
                pml4e = frame | PTE_P | PTE_W | PTE_U | PTE_A;
                self.write_u64(slot, pml4e);
                self.pt_frames.insert(frame, (2, canonical(va & !((1u64 << 39) - 1))));
            }
            self.write_u64((pml4e & PTE_ADDR) + index(va, 2) * 8, entry);
        }
        Ok(())
    }

    /// Frees space `id`: its user pages (a shared frame with its last mapping), its page
    /// tables and its PML4 (except the boot PML4, the template of every kernel half). Every
    /// present entry of its user half is zeroed and, when `queue` is set, queued for the
    /// ring-0 replay: a shadow MMU may still hold it, and its frame may serve as anything next.
    pub(super) fn drop_inner(&mut self, id: u64, queue: bool) {
        self.clear_table(id, 3, 0, queue);
        self.spaces.remove(&id);
        self.blocks_spaces.remove(&id);
        self.placed.retain(|p| p.space != id);
        if id != PML4_PHYS {
            self.pool_table_frame(id, 3);
        }
    }

    fn clear_table(&mut self, table: u64, level: u32, base: u64, queue: bool) {
        let span = 1u64 << (12 + 9 * level);
        // The upper half of a PML4 is the monitor's, shared by every space.
        let entries = if level == 3 { 256 } else { 512 };
        for i in 0..entries {
            let slot = table + i * 8;
            let entry = self.read_u64(slot);
            if entry & PTE_P == 0 {
                continue;
            }
            let va = base + i * span;
            let frame = entry & PTE_ADDR;
            if level == 2 && reserved_gib(va) {
                // The reserved range's tables: every space's, owned by none (see
                // `link_reserved`); only the link goes.
            } else if level == 0 {
                self.release(frame);
            } else if entry & PTE_PS == 0 {
                self.clear_table(frame, level - 1, va, queue);
                self.pool_table_frame(frame, level - 1);
            }
            self.write_u64(slot, 0);
            if queue {
                self.stale.push((slot, canonical(va)));
            }
        }
    }
}
