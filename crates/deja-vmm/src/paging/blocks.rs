//! The coverage blocks in guest memory ([`crate::coverage`]): the spaces they apply to, the
//! shared objects placed in a space and armed a page at a time, the breakpoints put in and taken
//! out, and the original bytes a read through [`Memory`] shows in their place.

use super::*;

impl AddressSpace {
    /// Shows the core every block of `blocks` with its original byte, breakpoint or not, in
    /// the current space and the spaces later forked from it.
    pub fn set_blocks(&mut self, blocks: Option<Arc<BlockImage>>) {
        self.blocks_spaces.clear();
        self.placed.clear();
        if blocks.is_some() {
            self.blocks_spaces.insert(self.root);
        }
        self.blocks = blocks;
    }

    /// The blocks set with [`AddressSpace::set_blocks`], if they apply to the current space
    /// (a space made by `execve` runs another program).
    pub fn blocks(&self) -> Option<&Arc<BlockImage>> {
        self.blocks.as_ref().filter(|_| self.blocks_spaces.contains(&self.root))
    }

    /// The blocks set with [`AddressSpace::set_blocks`], whichever space is current.
    pub fn armed_blocks(&self) -> Option<&Arc<BlockImage>> {
        self.blocks.as_ref()
    }

    /// The blocks the campaign has seen, which a shared object mapped from now on does not arm.
    pub fn set_seen(&mut self, seen: Seen) {
        self.seen = seen;
    }

    /// Block `id` is seen by the campaign: no shared object mapped from now on arms it.
    pub fn see(&mut self, id: usize) {
        self.seen.insert(id);
    }

    /// Where the spaces map code of the blocks' shared objects.
    pub fn placed(&self) -> &[Placed] {
        &self.placed
    }

    /// The block whose breakpoint would be at `addr` in the current space: the program's own
    /// (in a space the blocks apply to) or a placed shared object's.
    pub fn block_at(&self, addr: u64) -> Option<usize> {
        let blocks = self.blocks.as_deref()?;
        if self.blocks_spaces.contains(&self.root) {
            if let Some(id) = blocks.find(addr) {
                return Some(id);
            }
        }
        self.placed.iter().filter(|p| p.space == self.root).find_map(|p| blocks.placed_find(p, addr))
    }

    /// Puts the original byte of block `id` back wherever it carries a breakpoint: in every
    /// space the blocks apply to (the program's blocks) or where its object is placed.
    pub fn restore_block(&mut self, id: usize) {
        let Some(blocks) = self.blocks.clone() else { return };
        let Some(original) = blocks.original_of(id) else { return };
        if id < blocks.image_len() {
            if let Some(addr) = blocks.addr(id) {
                self.poke_blocks(addr, original);
            }
            return;
        }
        for p in self.placed.clone() {
            let Some(gpa) = blocks.placed_addr(&p, id).and_then(|va| self.translate_in(p.space, va)) else { continue };
            // A frame holding a breakpoint is mapped only by spaces with this placement (the
            // object's pages are filled for one space; a fork copies the placements).
            let mut byte = [0u8];
            self.read_phys(gpa, &mut byte);
            if byte[0] == INT3 {
                self.write_phys(gpa, &[original]);
            }
        }
    }

    /// Places the shared object whose bytes are `data` (if it is one of the blocks' objects)
    /// at `[start, end)` of the current space, file offset 0 at `base`, and arms its blocks
    /// there that the campaign has not seen, a page at a time. A range already placed is
    /// left as it is (its breakpoints may have been hit).
    pub(super) fn place(&mut self, data: &[u8], start: u64, end: u64, base: u64) {
        let Some(blocks) = self.blocks.clone() else { return };
        if blocks.is_image(data) {
            // The program executed again (`execve`): its blocks at their addresses, in this
            // space too, armed but those seen. Its file mapped anywhere else (by a loader, or
            // by another program) is just bytes.
            if let Some(ids) = blocks.image_in(start, end, base) {
                self.blocks_spaces.insert(self.root);
                let arm: Vec<u64> = ids
                    .filter(|&id| !self.seen.contains(id))
                    .filter_map(|id| blocks.addr(id).filter(|&a| blocks.find(a) == Some(id)))
                    .collect();
                self.arm_pages(&arm);
            }
            return;
        }
        let Some(object) = blocks.object_of(data) else { return };
        let root = self.root;
        let same: Vec<Placed> =
            self.placed.iter().filter(|p| p.space == root && p.object == object && p.base == base).copied().collect();
        if same.iter().any(|p| p.start <= start && end <= p.end) {
            return;
        }
        let at = Placed { space: root, start, end, base, object };
        let arm: Vec<u64> = blocks
            .placed_blocks(&at)
            .into_iter()
            .filter(|&(id, va)| !self.seen.contains(id) && !same.iter().any(|p| (p.start..p.end).contains(&va)))
            .map(|(_, va)| va)
            .collect();
        self.arm_pages(&arm);
        self.placed.push(at);
    }

    /// Writes a breakpoint at each of `addrs` (ascending) in the current space, a page at a time
    /// (a copy-on-write page gets a frame of its own first).
    fn arm_pages(&mut self, addrs: &[u64]) {
        let mut page = vec![0u8; PAGE_SIZE as usize];
        for run in addrs.chunk_by(|a, b| a & !(PAGE_SIZE - 1) == b & !(PAGE_SIZE - 1)) {
            let va = run[0] & !(PAGE_SIZE - 1);
            if self.end_cow_range(va, 1).is_err() {
                continue;
            }
            let Some(gpa) = self.translate(va) else { continue };
            self.read_phys(gpa, &mut page);
            for a in run {
                page[(a - va) as usize] = INT3;
            }
            self.write_phys(gpa, &page);
        }
    }

    /// Drops the placements of the current space that meet `[a, b)` (code unmapped or moved):
    /// their breakpoints outside `[a, b)`, and inside it too when `inside` (moved pages keep
    /// their bytes), get their original bytes back.
    pub(super) fn unplace(&mut self, a: u64, b: u64, inside: bool) {
        let root = self.root;
        let (gone, keep): (Vec<Placed>, Vec<Placed>) =
            self.placed.iter().partition(|p| p.space == root && p.start < b && a < p.end);
        if gone.is_empty() {
            return;
        }
        self.placed = keep;
        let Some(blocks) = self.blocks.clone() else { return };
        for p in gone {
            for (id, va) in blocks.placed_blocks(&p) {
                if !inside && (a..b).contains(&va) {
                    continue;
                }
                let Some(gpa) = self.translate(va) else { continue };
                let mut byte = [0u8];
                self.read_phys(gpa, &mut byte);
                if byte[0] == INT3 {
                    self.poke(va, blocks.original_of(id).unwrap_or(INT3));
                }
            }
        }
    }

    /// Puts back the original bytes of every block inside `buf` (memory from `addr` of space
    /// `space`) that may carry a breakpoint, and of every debugger's breakpoint.
    pub(super) fn overlay_in(&self, space: u64, addr: u64, buf: &mut [u8]) {
        let end = addr.saturating_add(buf.len() as u64);
        for (&at, &original) in self.debug_bytes.range(addr..end) {
            let i = (at - addr) as usize;
            if buf[i] == INT3 {
                buf[i] = original;
            }
        }
        let Some(blocks) = self.blocks.as_deref() else { return };
        if self.blocks_spaces.contains(&space) {
            blocks.overlay(addr, buf);
        }
        for p in self.placed.iter().filter(|p| p.space == space) {
            blocks.placed_overlay(p, addr, buf);
        }
    }

    /// The spaces the blocks apply to (the one armed and those forked from it), ascending.
    pub fn blocks_spaces(&self) -> Vec<u64> {
        self.blocks_spaces.iter().copied().collect()
    }

    /// Writes `byte` at user address `va` (a present page) of the current space, as the
    /// monitor: for breakpoints.
    /// A copy-on-write page gets a frame of its own first: a space the blocks do not apply
    /// to may share it.
    pub fn poke(&mut self, va: u64, byte: u8) -> bool {
        if va >= USER_END || self.end_cow_range(va, 1).is_err() {
            return false;
        }
        match self.translate(va) {
            Some(gpa) => {
                self.write_phys(gpa, &[byte]);
                true
            }
            None => false,
        }
    }

    /// Writes `byte` at user address `va` in every space the blocks apply to (where it is
    /// present): a breakpoint taken out of every process running the armed program.
    pub fn poke_blocks(&mut self, va: u64, byte: u8) -> bool {
        let mut any = false;
        for root in self.blocks_spaces() {
            if let Some(gpa) = self.translate_in(root, va) {
                self.write_phys(gpa, &[byte]);
                any = true;
            }
        }
        any
    }
}
