//! The syscall core's [`Memory`] on [`AddressSpace`]: user pages mapped, protected, unmapped and
//! moved, reads and writes through the current space, and the spaces of processes (new, forked,
//! switched to, dropped).

use super::*;

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
            } else if pte & PTE_COW != 0 {
                // Still shared: its first write (the program's fault, or the monitor's)
                // gives it a frame of its own.
                let want = cow_bits(prot);
                if pte & !PTE_ADDR != want {
                    if narrows(pte, want) {
                        self.stale.push((slot, va));
                    }
                    self.write_u64(slot, (pte & PTE_ADDR) | want);
                }
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
        for (va, slot, pte) in self.collect_present(addr, len) {
            let bits = if pte & PTE_COW != 0 { cow_bits(prot) } else { leaf_bits(prot) };
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
        self.unplace(addr, addr.saturating_add(len), false);
        for (va, slot, pte) in self.collect_present(addr, len) {
            self.write_u64(slot, 0);
            self.release(pte & PTE_ADDR);
            self.stale.push((slot, va));
        }
    }

    fn move_pages(&mut self, from: u64, to: u64, len: u64) {
        if Self::check_range(to, len).is_err() {
            return;
        }
        self.unplace(from, from.saturating_add(len), true);
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
        self.overlay_in(self.root, addr, buf);
        Ok(())
    }

    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), MemError> {
        Self::check_range(addr, data.len() as u64)?;
        self.end_cow_range(addr, data.len() as u64)?;
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
            self.overlay_in(self.root, va, &mut buf);
            f(va, &buf);
        });
    }

    fn for_each_page_in(&self, space: u64, f: &mut dyn FnMut(u64, &[u8])) {
        if !self.spaces.contains(&space) {
            return;
        }
        let mut buf = vec![0u8; PAGE_SIZE as usize];
        self.visit(space, 3, 0, 0, USER_END, &mut |va, _slot, pte| {
            self.read_phys(pte & PTE_ADDR, &mut buf);
            self.overlay_in(space, va, &mut buf);
            f(va, &buf);
        });
    }

    fn free_frames(&self) -> u64 {
        self.frames_left()
    }

    fn space(&self) -> u64 {
        self.root
    }

    fn fork_space(&mut self, shared: &[(u64, u64)]) -> Result<u64, MemError> {
        let id = self.new_space()?;
        if let Err(e) = self.share_user_half(id, shared) {
            // Never run: nothing can cache its entries.
            self.drop_inner(id, true);
            return Err(e);
        }
        if self.blocks_spaces.contains(&self.root) {
            self.blocks_spaces.insert(id);
        }
        let root = self.root;
        let copies: Vec<Placed> =
            self.placed.iter().filter(|p| p.space == root).map(|p| Placed { space: id, ..*p }).collect();
        self.placed.extend(copies);
        Ok(id)
    }

    fn unshare(&mut self, addr: u64) -> Result<bool, MemError> {
        self.unshare_page(addr, false)
    }

    fn new_space(&mut self) -> Result<u64, MemError> {
        let root = self.alloc_table_frame(3)?;
        // The kernel half: the boot PML4's, complete since `write_monitor_structures`.
        let mut half = [0u8; (PAGE_SIZE / 2) as usize];
        self.read_phys(PML4_PHYS + PAGE_SIZE / 2, &mut half);
        self.write_phys(root + PAGE_SIZE / 2, &half);
        self.pt_frames.insert(root, (3, 0));
        self.spaces.insert(root);
        if let Err(e) = self.link_reserved(root) {
            self.drop_inner(root, false);
            return Err(e);
        }
        Ok(root)
    }

    fn switch_space(&mut self, id: u64) {
        if self.spaces.contains(&id) {
            self.root = id;
        }
    }

    fn drop_space(&mut self, id: u64) {
        if id != self.root && self.spaces.contains(&id) {
            self.drop_inner(id, true);
        }
    }

    fn code_mapped(&mut self, data: &[u8], start: u64, end: u64, base: u64) {
        self.place(data, start, end, base);
    }
}
