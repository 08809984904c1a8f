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
//!
//! Each process of the guest has an address space of its own: a PML4 whose upper half (the
//! direct map and the syscall stub) is a copy of the boot PML4's, whose lower half is the
//! process's. A space's id is the frame of its PML4 (the first space's is [`PML4_PHYS`]); every
//! [`Memory`] call acts on the current one, and the VM runs the guest with CR3 = the current
//! one ([`AddressSpace::root`]). A forked space maps the same frames as its parent (counted,
//! so a frame is freed with its last mapping): the pages of shared ranges as they are, every
//! other page copy-on-write. A copy-on-write page's entry is never writable and carries
//! [`PTE_COW`] (and [`PTE_COW_W`] while the program may write it); the first write, by the
//! program ([`Memory::unshare`], from the core's page-fault path) or by the monitor
//! ([`Memory::write`]), gives the writing space a copy of its own, or the frame itself once
//! no other space maps it. The parent's entries that lose their write bit at the fork are
//! queued for the ring-0 replay like any narrowing. Dropping a space zeroes every entry of
//! its user half at every level and queues each for the ring-0 replay before its frames can
//! serve again.

use deja_kernel::{MemError, Memory, Prot, PAGE_SIZE};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

use crate::coverage::{BlockImage, Placed, Seen, INT3};
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
/// Software bit (ignored by the CPU): a private page whose frame other spaces may map too,
/// copy-on-write since a `fork`. Its entry is never writable.
pub const PTE_COW: u64 = 1 << 9;
/// Software bit of a [`PTE_COW`] page: the program may write it (the write bit comes back
/// with a frame of its own).
pub const PTE_COW_W: u64 = 1 << 10;
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
    /// The blocks that may carry a coverage breakpoint: reads through [`Memory`] in the spaces
    /// of `blocks_spaces` show their original bytes ([`crate::coverage`]).
    blocks: Option<Arc<BlockImage>>,
    /// The spaces the blocks overlay applies to: the one armed and those forked from it.
    blocks_spaces: BTreeSet<u64>,
    /// Where the spaces map code of the blocks' shared objects: their blocks are overlaid and
    /// carry breakpoints there.
    placed: Vec<Placed>,
    /// The blocks the campaign has seen: a shared object mapped later is armed for the others.
    seen: Seen,
    /// The current space: the frame of its PML4.
    root: u64,
    /// The live spaces, by the frame of their PML4.
    spaces: BTreeSet<u64>,
    /// Frames mapped more than once (shared pages of forked spaces): frame → mappings (≥ 2).
    shared: BTreeMap<u64, u64>,
    /// Frames that held page tables of a dropped space, by the level of their entries: reused
    /// only as page tables of that level. A shadow MMU (nested hosts) may keep a frame that was
    /// a page table write-protected: a program's store to it, were it reused as a data page,
    /// would be emulated by KVM, which cannot emulate every instruction (AVX stores); and a
    /// table of another level would meet a stale shadow of the old role.
    pt_pool: BTreeMap<u32, BTreeSet<u64>>,
}

/// The allocator's state, saved in snapshots and restored on forks.
///
/// The fields after `pt_frames` came with processes; in a self-describing format, state
/// written without them reads as one space, [`PML4_PHYS`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FrameState {
    /// Next never-used frame.
    pub bump: u64,
    /// Freed frames.
    pub free: Vec<u64>,
    /// Page-table frames: (frame, level, first address mapped).
    pub pt_frames: Vec<(u64, u32, u64)>,
    /// The current space (the frame of its PML4: what CR3 holds).
    #[serde(default = "first_space")]
    pub root: u64,
    /// Every live space, ascending.
    #[serde(default = "first_spaces")]
    pub spaces: Vec<u64>,
    /// Frames mapped by more than one space, with their number of mappings.
    #[serde(default)]
    pub shared: Vec<(u64, u64)>,
    /// Frames kept for page tables of one level: (frame, level).
    #[serde(default)]
    pub pt_pool: Vec<(u64, u32)>,
    /// The spaces the coverage blocks overlay applies to.
    #[serde(default = "first_spaces")]
    pub blocks_spaces: Vec<u64>,
    /// Where the spaces map code of the coverage blocks' shared objects.
    #[serde(default)]
    pub placed: Vec<Placed>,
}

fn first_space() -> u64 {
    PML4_PHYS
}

fn first_spaces() -> Vec<u64> {
    vec![PML4_PHYS]
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

/// Leaf bits for `prot` on a copy-on-write page: never writable, the right to write kept in
/// [`PTE_COW_W`].
fn cow_bits(prot: Prot) -> u64 {
    let bits = (leaf_bits(prot) & !PTE_W) | PTE_COW;
    if prot.writable() {
        bits | PTE_COW_W
    } else {
        bits
    }
}

/// The entry `pte` made copy-on-write (for both spaces of a `fork`), its rights kept.
fn to_cow(pte: u64) -> u64 {
    if pte & PTE_W != 0 {
        (pte & !PTE_W) | PTE_COW | PTE_COW_W
    } else {
        pte | PTE_COW
    }
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

/// Walks the four levels from the PML4 at `root` to the leaf of `va`, reading entries with
/// `read(gpa)`: the leaf's slot and value, if present. For guest RAM and for RAM images.
pub fn lookup_with(read: impl Fn(u64) -> u64, root: u64, va: u64) -> Option<(u64, u64)> {
    let mut table = root;
    for level in (1..=3).rev() {
        let entry = read(table + index(va, level) * 8);
        if entry & PTE_P == 0 {
            return None;
        }
        table = entry & PTE_ADDR;
    }
    let slot = table + index(va, 0) * 8;
    let pte = read(slot);
    (pte & PTE_P != 0).then_some((slot, pte))
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
            blocks_spaces: BTreeSet::new(),
            placed: Vec::new(),
            seen: Seen::default(),
            root: PML4_PHYS,
            spaces: BTreeSet::from([PML4_PHYS]),
            shared: BTreeMap::new(),
            pt_pool: BTreeMap::new(),
        })
    }

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
    fn place(&mut self, data: &[u8], start: u64, end: u64, base: u64) {
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
    fn unplace(&mut self, a: u64, b: u64, inside: bool) {
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
    /// `space`) that may carry a breakpoint.
    fn overlay_in(&self, space: u64, addr: u64, buf: &mut [u8]) {
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

    /// The current space: the guest-physical address of its PML4, which CR3 must hold.
    pub fn root(&self) -> u64 {
        self.root
    }

    /// The live spaces, ascending.
    pub fn spaces(&self) -> Vec<u64> {
        self.spaces.iter().copied().collect()
    }

    /// How many spaces map `frame`, if more than one does.
    pub fn shared_count(&self, frame: u64) -> Option<u64> {
        self.shared.get(&frame).copied()
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
            root: self.root,
            spaces: self.spaces(),
            shared: self.shared.iter().map(|(f, n)| (*f, *n)).collect(),
            blocks_spaces: self.blocks_spaces(),
            placed: self.placed.clone(),
            pt_pool: self.pt_pool.iter().flat_map(|(l, fs)| fs.iter().map(move |f| (*f, *l))).collect(),
        }
    }

    /// Replaces the allocator's state (RAM contents are restored separately).
    pub fn set_frame_state(&mut self, st: &FrameState) {
        self.bump = st.bump;
        self.free = st.free.iter().copied().collect();
        self.pt_frames = st.pt_frames.iter().map(|(f, l, b)| (*f, (*l, *b))).collect();
        self.root = st.root;
        self.spaces = st.spaces.iter().copied().collect();
        self.spaces.insert(st.root);
        self.shared = st.shared.iter().copied().filter(|(_, n)| *n > 1).collect();
        self.blocks_spaces = st.blocks_spaces.iter().copied().collect();
        self.placed = st.placed.clone();
        self.pt_pool.clear();
        for &(f, l) in &st.pt_pool {
            self.pt_pool.entry(l).or_default().insert(f);
        }
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
        let frame = self.take_frame()?;
        self.write_phys(frame, &[0u8; PAGE_SIZE as usize]);
        Ok(frame)
    }

    /// Allocates a zeroed frame for a page table of `level`: one that was a table of that
    /// level before if there is one (see `pt_pool`).
    fn alloc_table_frame(&mut self, level: u32) -> Result<u64, MemError> {
        match self.pt_pool.get_mut(&level).and_then(BTreeSet::pop_first) {
            Some(f) => {
                self.write_phys(f, &[0u8; PAGE_SIZE as usize]);
                Ok(f)
            }
            None => self.alloc_frame(),
        }
    }

    /// Keeps `frame`, a page table of `level` no space uses any more, for tables of that level.
    fn pool_table_frame(&mut self, frame: u64, level: u32) {
        self.pt_frames.remove(&frame);
        self.pt_pool.entry(level).or_default().insert(frame);
    }

    /// Allocates a frame whose contents the caller overwrites whole.
    fn take_frame(&mut self) -> Result<u64, MemError> {
        if let Some(f) = self.free.pop_first() {
            Ok(f)
        } else if self.bump + PAGE_SIZE <= self.size {
            self.bump += PAGE_SIZE;
            Ok(self.bump - PAGE_SIZE)
        } else {
            Err(MemError::OutOfFrames)
        }
    }

    fn free_frame(&mut self, frame: u64) {
        self.free.insert(frame);
    }

    /// Drops one mapping of the data frame `frame`: freed with its last one.
    fn release(&mut self, frame: u64) {
        match self.shared.get_mut(&frame) {
            Some(n) => {
                *n -= 1;
                if *n <= 1 {
                    self.shared.remove(&frame);
                }
            }
            None => self.free_frame(frame),
        }
    }

    /// Frames not yet handed out.
    pub fn frames_left(&self) -> u64 {
        let pooled: usize = self.pt_pool.values().map(BTreeSet::len).sum();
        (self.size - self.bump) / PAGE_SIZE + self.free.len() as u64 + pooled as u64
    }

    /// Walks the current space to the leaf entry of `va`, creating intermediate tables when
    /// `create` is set. Returns the guest-physical address of the leaf PTE.
    fn walk(&mut self, va: u64, create: bool) -> Result<Option<u64>, MemError> {
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
    fn lookup(&self, va: u64) -> Option<(u64, u64)> {
        self.lookup_in(self.root, va)
    }

    fn lookup_in(&self, root: u64, va: u64) -> Option<(u64, u64)> {
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
        self.visit(self.root, 3, 0, addr, end, f);
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

    /// Maps into the space `to` every present user page of the current one, on the same
    /// frame: as it is in a range of `shared`, copy-on-write in both spaces otherwise. The
    /// current space's entries that lose their write bit are queued for the ring-0 replay.
    fn share_user_half(&mut self, to: u64, shared: &[(u64, u64)]) -> Result<(), MemError> {
        for (va, slot, pte) in self.collect_present(0, USER_END) {
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
    fn end_cow(&mut self, slot: u64, va: u64, pte: u64, queue: bool) -> Result<(), MemError> {
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

    /// Ends copy-on-write for every page `[addr, addr+len)` touches (see
    /// [`AddressSpace::end_cow`]), for a write of the monitor.
    fn end_cow_range(&mut self, addr: u64, len: u64) -> Result<(), MemError> {
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

    /// Frees space `id`: its user pages (a shared frame with its last mapping), its page
    /// tables and its PML4 (except the boot PML4, the template of every kernel half). Every
    /// present entry of its user half is zeroed and, when `queue` is set, queued for the
    /// ring-0 replay: a shadow MMU may still hold it, and its frame may serve as anything next.
    fn drop_inner(&mut self, id: u64, queue: bool) {
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
            if level == 0 {
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
        if addr >= USER_END {
            return Ok(false);
        }
        let va = addr & !(PAGE_SIZE - 1);
        match self.lookup_in(self.root, va) {
            Some((slot, pte)) if pte & PTE_COW_W != 0 => {
                self.end_cow(slot, va, pte, false)?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    fn new_space(&mut self) -> Result<u64, MemError> {
        let root = self.alloc_table_frame(3)?;
        // The kernel half: the boot PML4's, complete since `write_monitor_structures`.
        let mut half = [0u8; (PAGE_SIZE / 2) as usize];
        self.read_phys(PML4_PHYS + PAGE_SIZE / 2, &mut half);
        self.write_phys(root + PAGE_SIZE / 2, &half);
        self.pt_frames.insert(root, (3, 0));
        self.spaces.insert(root);
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

    /// A space whose boot PML4 has a kernel half (the stub mapping), as the VM builds it.
    fn booted() -> AddressSpace {
        let mut s = space();
        s.map_page(crate::layout::STUB_VA, crate::layout::USER_STUB_PHYS, PTE_P | PTE_U | PTE_A).unwrap();
        s
    }

    fn read_str(s: &AddressSpace, va: u64, n: usize) -> Vec<u8> {
        let mut buf = vec![0u8; n];
        s.read(va, &mut buf).unwrap();
        buf
    }

    #[test]
    fn a_forked_space_is_an_independent_copy_but_for_shared_ranges() {
        let mut s = booted();
        s.populate(0x40_0000, 2 * PAGE_SIZE, Prot::RW).unwrap();
        s.write(0x40_1000, b"parent").unwrap();
        s.populate(0x70_0000, PAGE_SIZE, Prot::RW).unwrap();
        s.write(0x70_0000, b"shared").unwrap();
        s.populate(0x80_0000, PAGE_SIZE, Prot::READ).unwrap();
        let before = s.frames_left();
        let child = s.fork_space(&[(0x70_0000, 0x70_1000)]).unwrap();
        assert_eq!(s.space(), PML4_PHYS, "forking leaves the current space current");
        assert_ne!(child, PML4_PHYS);
        assert_eq!(s.spaces(), vec![PML4_PHYS, child]);
        assert_eq!(s.page_table(child), Some((3, 0)));
        assert_eq!(before - s.frames_left(), 6, "the fork takes page tables only (a PML4, a PDPT, a PD, three PTs)");
        // The parent's two writable private pages lost their write bit: replayed from ring 0.
        let mut stale: Vec<u64> = s.take_stale().into_iter().map(|(_, va)| va).collect();
        stale.sort_unstable();
        assert_eq!(stale, vec![0x40_0000, 0x40_1000]);

        // Private pages: the same frame, copy-on-write in both spaces, the right to write kept
        // aside; the shared page: the same frame, writable, as it was. Every frame counted.
        for va in [0x40_0000, 0x40_1000, 0x80_0000, 0x70_0000] {
            let (_, p) = s.lookup_in(PML4_PHYS, va).unwrap();
            let (_, c) = s.lookup_in(child, va).unwrap();
            assert_eq!(p, c, "{va:#x}");
            assert_eq!(s.shared_count(p & PTE_ADDR), Some(2));
            let writable = va != 0x80_0000;
            if va == 0x70_0000 {
                assert_eq!(p & (PTE_W | PTE_COW | PTE_COW_W), PTE_W);
            } else {
                assert_eq!(p & (PTE_W | PTE_COW), PTE_COW, "{va:#x}");
                assert_eq!(p & PTE_COW_W != 0, writable, "{va:#x}");
            }
        }
        let frame = s.translate(0x70_0000).unwrap();
        let private = s.translate(0x40_1000).unwrap();

        // Writes in one space show in the other only through the shared page. The monitor's
        // write gives the child a copy of its own (queued: the old entry may be cached).
        s.switch_space(child);
        assert_eq!(s.space(), child);
        assert_eq!(read_str(&s, 0x40_1000, 6), b"parent");
        s.write(0x40_1000, b"child!").unwrap();
        let copy = s.translate(0x40_1000).unwrap();
        assert_ne!(copy & PTE_ADDR, private & PTE_ADDR);
        assert_eq!(s.lookup_in(child, 0x40_1000).unwrap().1 & (PTE_W | PTE_COW | PTE_COW_W), PTE_W);
        assert_eq!(s.take_stale().len(), 1);
        assert_eq!(s.shared_count(private & PTE_ADDR), None, "the parent is its only mapping now");
        s.write(0x70_0000, b"SHARED").unwrap();
        s.switch_space(PML4_PHYS);
        assert_eq!(read_str(&s, 0x40_1000, 6), b"parent");
        assert_eq!(read_str(&s, 0x70_0000, 6), b"SHARED");
        // The parent's write fault on its page, the last mapping: the same frame, writable
        // again, nothing to replay; a page the program may not write is left alone.
        assert!(s.unshare(0x40_1234).unwrap());
        assert_eq!(s.translate(0x40_1000), Some(private));
        assert_eq!(s.lookup_in(PML4_PHYS, 0x40_1000).unwrap().1 & (PTE_W | PTE_COW | PTE_COW_W), PTE_W);
        assert!(!s.unshare(0x40_1000).unwrap(), "no longer copy-on-write");
        assert!(!s.unshare(0x80_0000).unwrap(), "read-only");
        assert!(!s.unshare(0x90_0000).unwrap(), "absent");
        assert!(!s.has_stale());
        // The parent's fault on a page the child still maps: a copy, the child keeps its frame.
        let both = s.translate(0x40_0000).unwrap();
        assert!(s.unshare(0x40_0000).unwrap());
        assert_ne!(s.translate(0x40_0000), Some(both));
        assert_eq!(s.translate_in(child, 0x40_0000), Some(both));
        let mut seen = Vec::new();
        s.for_each_page(&mut |va, _| seen.push(va));
        assert_eq!(seen, vec![0x40_0000, 0x40_1000, 0x70_0000, 0x80_0000]);
        // Another space's pages, read without switching to it.
        let mut theirs = Vec::new();
        s.for_each_page_in(child, &mut |va, data| theirs.push((va, data[..6].to_vec())));
        assert_eq!(s.space(), PML4_PHYS);
        assert_eq!(theirs.len(), 4);
        assert_eq!(theirs[1], (0x40_1000, b"child!".to_vec()));
        let mut none = 0;
        s.for_each_page_in(0x1234_5000, &mut |_, _| none += 1);
        assert_eq!(none, 0, "no such space");

        // Making a copy-on-write page writable keeps it shared until it is written.
        s.protect(0x80_0000, PAGE_SIZE, Prot::RW);
        let (_, p) = s.lookup_in(PML4_PHYS, 0x80_0000).unwrap();
        assert_eq!(p & (PTE_W | PTE_COW | PTE_COW_W), PTE_COW | PTE_COW_W);
        s.populate(0x80_0000, PAGE_SIZE, Prot::RW).unwrap();
        assert_eq!(s.lookup_in(PML4_PHYS, 0x80_0000).unwrap().1, p, "populating does not copy");

        // The child's unmap of the shared page frees nothing: the parent still maps it.
        s.switch_space(child);
        s.unmap(0x70_0000, PAGE_SIZE);
        assert_eq!(s.take_stale().len(), 1);
        assert_eq!(s.shared_count(frame), None);
        s.switch_space(PML4_PHYS);
        assert_eq!(read_str(&s, 0x70_0000, 6), b"SHARED");

        // Dropping the child gives back every frame it holds alone, and queues every entry of
        // its user half, at every level, for the ring-0 replay; the parent's copy-on-write
        // pages are its own again.
        let root_entry = (child, 0u64);
        s.drop_space(child);
        assert_eq!(s.spaces(), vec![PML4_PHYS]);
        assert_eq!(s.page_table(child), None);
        assert_eq!(s.frames_left(), before, "the parent's four pages, as before the fork");
        let stale = s.take_stale();
        // Leaves 0x40_0000, 0x40_1000, 0x80_0000; the PD's entries of three PTs (the one of
        // the unmapped page too); one PDPT entry; one PML4 entry.
        assert_eq!(stale.len(), 3 + 3 + 1 + 1, "{stale:x?}");
        assert!(stale.contains(&root_entry));
        assert!(stale.iter().all(|(slot, _)| s.read_u64(*slot) == 0));
        assert!(s.shared.is_empty(), "{:x?}", s.shared);
        assert_eq!(read_str(&s, 0x40_1000, 6), b"parent", "the parent keeps its pages");
        assert!(s.unshare(0x80_0000).unwrap(), "its last mapping: writable in place");
        assert_eq!(s.frames_left(), before);
        // A dropped space is gone: switching to it is ignored.
        s.switch_space(child);
        assert_eq!(s.space(), PML4_PHYS);
    }

    #[test]
    fn copy_on_write_pages_stay_apart_through_forks_of_forks() {
        let mut s = booted();
        s.populate(0x40_0000, PAGE_SIZE, Prot::RW).unwrap();
        s.write(0x40_0000, b"0").unwrap();
        let a = s.fork_space(&[]).unwrap();
        s.switch_space(a);
        let b = s.fork_space(&[]).unwrap();
        let frame = s.translate(0x40_0000).unwrap();
        assert_eq!(s.shared_count(frame), Some(3));
        for (space, text) in [(b, b"b"), (PML4_PHYS, b"p"), (a, b"a")] {
            s.switch_space(space);
            assert!(s.unshare(0x40_0000).unwrap());
            s.write(0x40_0000, text).unwrap();
        }
        assert_eq!(s.translate(0x40_0000), Some(frame), "the last writer keeps the frame");
        for (space, text) in [(b, b"b"), (PML4_PHYS, b"p"), (a, b"a")] {
            s.switch_space(space);
            assert_eq!(read_str(&s, 0x40_0000, 1), text);
        }
        assert!(s.shared.is_empty());
    }

    #[test]
    fn a_breakpoint_poked_into_a_shared_page_stays_in_its_space() {
        let mut s = booted();
        s.populate(0x40_0000, PAGE_SIZE, Prot(Prot::READ.0 | Prot::EXEC.0)).unwrap();
        s.write(0x40_0010, &[0x55]).unwrap();
        let other = s.fork_space(&[]).unwrap();
        assert!(s.poke(0x40_0010, 0xcc));
        let mut b = [0u8; 1];
        s.switch_space(other);
        s.read(0x40_0010, &mut b).unwrap();
        assert_eq!(b, [0x55]);
        s.switch_space(PML4_PHYS);
        s.read_phys(s.translate(0x40_0010).unwrap(), &mut b);
        assert_eq!(b, [0xcc]);
        let (_, pte) = s.lookup_in(PML4_PHYS, 0x40_0000).unwrap();
        assert_eq!(pte & (PTE_W | PTE_COW), 0, "its own frame, still read-only");
    }

    #[test]
    fn a_shared_frame_is_freed_with_its_last_mapping() {
        let mut s = booted();
        s.populate(0x70_0000, PAGE_SIZE, Prot::RW).unwrap();
        let before = s.frames_left();
        let frame = s.translate(0x70_0000).unwrap();
        let child = s.fork_space(&[(0x70_0000, 0x70_1000)]).unwrap();
        s.unmap(0x70_0000, PAGE_SIZE);
        assert!(!s.free.contains(&frame), "the child still maps it");
        assert_eq!(s.translate_in(child, 0x70_0000), Some(frame));
        s.drop_space(child);
        assert!(s.free.contains(&frame));
        assert_eq!(s.frames_left(), before + 1);

        // Three spaces share it: dropping two keeps it for the third.
        s.populate(0x70_0000, PAGE_SIZE, Prot::RW).unwrap();
        let frame = s.translate(0x70_0000).unwrap();
        let a = s.fork_space(&[(0x70_0000, 0x70_1000)]).unwrap();
        let b = s.fork_space(&[(0x70_0000, 0x70_1000)]).unwrap();
        assert_eq!(s.shared_count(frame), Some(3));
        s.drop_space(a);
        s.switch_space(b);
        s.drop_space(PML4_PHYS);
        assert_eq!(s.spaces(), vec![b]);
        assert!(!s.free.contains(&frame));
        s.write(0x70_0000, b"last").unwrap();
        s.unmap(0x70_0000, PAGE_SIZE);
        assert!(s.free.contains(&frame));
    }

    #[test]
    fn a_dropped_spaces_page_tables_are_only_ever_page_tables_of_their_level_again() {
        let mut s = space();
        s.populate(0x40_0000, 4 * PAGE_SIZE, Prot::RW).unwrap();
        let child = s.fork_space(&[]).unwrap();
        // Every table of either space, by level (the boot PML4 is never dropped).
        let tables: BTreeMap<u64, u32> =
            s.pt_frames.iter().filter(|(f, _)| **f != PML4_PHYS).map(|(f, (l, _))| (*f, *l)).collect();
        s.drop_space(child);
        let pooled: Vec<(u64, u32)> = s.frame_state().pt_pool;
        assert_eq!(pooled.len(), 4, "the child's PML4 and three tables: {pooled:?}");
        for (f, l) in &pooled {
            assert_eq!(tables.get(f), Some(l), "frame {f:#x} was a table of level {l}");
        }
        // Data pages never take them, however many are made.
        s.populate(0x80_0000, 64 * PAGE_SIZE, Prot::RW).unwrap();
        for va in (0x80_0000..0x80_0000 + 64 * PAGE_SIZE).step_by(PAGE_SIZE as usize) {
            let frame = s.translate(va).unwrap();
            assert!(!pooled.iter().any(|(f, _)| *f == frame), "data page at {va:#x} in a former table");
        }
        // A new space's tables do, each at its own level.
        let again = s.fork_space(&[]).unwrap();
        assert_eq!(again, pooled.iter().find(|(_, l)| *l == 3).unwrap().0, "the PML4 comes back as a PML4");
        assert!(s.frame_state().pt_pool.is_empty(), "{:?}", s.frame_state().pt_pool);
        for (f, l) in &pooled {
            assert_eq!(s.page_table(*f).map(|p| p.0), Some(*l), "frame {f:#x} is a level-{l} table again");
        }
        // The pool travels with the allocator's state.
        s.drop_space(again);
        let st = s.frame_state();
        let mut t = space();
        t.set_frame_state(&st);
        assert_eq!(t.frame_state(), st);
        assert_eq!(t.frames_left(), s.frames_left());
    }

    #[test]
    fn the_current_space_and_unknown_ids_are_never_dropped() {
        let mut s = booted();
        s.populate(0x40_0000, PAGE_SIZE, Prot::RW).unwrap();
        let child = s.fork_space(&[]).unwrap();
        s.take_stale();
        let left = s.frames_left();
        s.drop_space(PML4_PHYS);
        s.drop_space(0x1234_5000);
        s.switch_space(0x1234_5000);
        assert_eq!(s.space(), PML4_PHYS);
        assert_eq!(s.frames_left(), left);
        assert_eq!(s.spaces(), vec![PML4_PHYS, child]);
        assert!(!s.has_stale());
    }

    #[test]
    fn a_new_space_has_the_kernel_half_and_an_empty_user_half() {
        let mut s = booted();
        s.populate(0x40_0000, PAGE_SIZE, Prot::RW).unwrap();
        let before = s.frames_left();
        let id = s.new_space().unwrap();
        assert_eq!(s.frames_left(), before - 1, "one frame: its PML4");
        assert_eq!(s.space(), PML4_PHYS);
        for i in 256..512 {
            assert_eq!(s.read_u64(id + 8 * i), s.read_u64(PML4_PHYS + 8 * i), "entry {i}");
        }
        assert_ne!(s.read_u64(id + 8 * 511), 0, "the stub's entry is there");
        assert!((0..256).all(|i| s.read_u64(id + 8 * i) == 0));
        s.switch_space(id);
        let mut buf = [0u8; 4];
        assert!(matches!(s.read(0x40_0000, &mut buf), Err(MemError::NotPresent { .. })));
        let mut pages = 0;
        s.for_each_page(&mut |_, _| pages += 1);
        assert_eq!(pages, 0);
        s.populate(0x40_0000, PAGE_SIZE, Prot::RW).unwrap();
        s.write(0x40_0000, b"exec").unwrap();
        s.switch_space(PML4_PHYS);
        assert_eq!(read_str(&s, 0x40_0000, 4), [0; 4]);

        // The boot PML4 dropped (the first process exec'd) stays the kernel half's template.
        s.switch_space(id);
        s.drop_space(PML4_PHYS);
        assert_eq!(s.spaces(), vec![id]);
        assert!((0..256).all(|i| s.read_u64(PML4_PHYS + 8 * i) == 0));
        let next = s.new_space().unwrap();
        assert_ne!(next, PML4_PHYS);
        assert_eq!(s.read_u64(next + 8 * 511), s.read_u64(PML4_PHYS + 8 * 511));
    }

    #[test]
    fn the_blocks_overlay_follows_the_armed_space_and_its_forks() {
        let mut s = booted();
        s.populate(0x40_0000, PAGE_SIZE, Prot::RW).unwrap();
        s.write(0x40_0010, &[0x55]).unwrap();
        s.set_blocks(Some(Arc::new(BlockImage::from_blocks(vec![0x40_0010], vec![0x55]))));
        assert!(s.poke(0x40_0010, crate::coverage::INT3));
        assert_eq!(read_str(&s, 0x40_0010, 1), [0x55], "reads show the original byte");
        let forked = s.fork_space(&[]).unwrap();
        let exec = s.new_space().unwrap();
        s.switch_space(forked);
        assert!(s.blocks().is_some());
        assert_eq!(read_str(&s, 0x40_0010, 1), [0x55]);
        s.switch_space(exec);
        assert!(s.blocks().is_none() && s.armed_blocks().is_some());
        s.populate(0x40_0000, PAGE_SIZE, Prot::RW).unwrap();
        s.write(0x40_0010, &[crate::coverage::INT3]).unwrap();
        assert_eq!(read_str(&s, 0x40_0010, 1), [crate::coverage::INT3], "another program's own bytes");
        assert_eq!(s.blocks_spaces(), vec![PML4_PHYS, forked]);
        // Disarming reaches every space of the armed program, and no other.
        assert!(s.poke_blocks(0x40_0010, 0x55));
        let raw = |s: &AddressSpace, root| {
            let mut b = [0u8];
            s.read_phys(s.translate_in(root, 0x40_0010).unwrap(), &mut b);
            b[0]
        };
        assert_eq!((raw(&s, PML4_PHYS), raw(&s, forked), raw(&s, exec)), (0x55, 0x55, crate::coverage::INT3));
        s.switch_space(PML4_PHYS);
        s.drop_space(forked);
        assert_eq!(s.blocks_spaces(), vec![PML4_PHYS]);
    }

    #[test]
    fn a_shared_objects_blocks_are_placed_where_its_code_is_mapped() {
        use crate::coverage::INT3;
        let mut s = booted();
        // The object: three pages, code in the last two (file offsets 0x1000 to 0x3000),
        // blocks at 0x1010, 0x1020 and 0x2ff0.
        let mut data = vec![0x90u8; 3 * PAGE_SIZE as usize];
        data[0x1010] = 0x55;
        data[0x1020] = 0x48;
        data[0x2ff0] = 0xc3;
        let blocks = Arc::new(BlockImage::with_object(&data, vec![0x1010, 0x1020, 0x2ff0]));
        s.set_blocks(Some(blocks.clone()));
        let mut seen = Seen::default();
        seen.insert(1);
        s.set_seen(seen);
        // The loader maps the code pages at 0x7000_1000: the base (offset 0) is 0x7000_0000.
        let (base, code) = (0x7000_0000u64, 0x7000_1000u64);
        s.populate(code, 2 * PAGE_SIZE, Prot::RW).unwrap();
        s.write(code, &data[0x1000..]).unwrap();
        // Bytes of another file: nothing placed.
        s.code_mapped(&data[..100], code, code + 2 * PAGE_SIZE, base);
        assert!(s.placed().is_empty());
        s.code_mapped(&data, code, code + 2 * PAGE_SIZE, base);
        assert_eq!(s.placed(), [Placed { space: PML4_PHYS, start: code, end: code + 2 * PAGE_SIZE, base, object: 0 }]);
        let raw = |s: &AddressSpace, root, va| {
            let mut b = [0u8];
            s.read_phys(s.translate_in(root, va).unwrap(), &mut b);
            b[0]
        };
        // Armed but the seen block; every read shows the original bytes.
        assert_eq!([raw(&s, PML4_PHYS, 0x7000_1010), raw(&s, PML4_PHYS, 0x7000_1020)], [INT3, 0x48]);
        assert_eq!(read_str(&s, code, 2 * PAGE_SIZE as usize), &data[0x1000..]);
        let mut paged = Vec::new();
        s.for_each_page(&mut |va, page| {
            if va == code {
                paged = page.to_vec();
            }
        });
        assert_eq!(paged, &data[0x1000..0x2000]);
        assert_eq!(
            (s.block_at(0x7000_1010), s.block_at(0x7000_1020), s.block_at(0x7000_1011)),
            (Some(0), Some(1), None)
        );
        // The same range again (an mprotect): nothing new armed, no second placement.
        s.restore_block(0);
        s.code_mapped(&data, code, code + 2 * PAGE_SIZE, base);
        assert_eq!((s.placed().len(), raw(&s, PML4_PHYS, 0x7000_1010)), (1, 0x55));
        // A fork keeps the placement and shares the frame; a hit puts the byte back in both.
        s.poke(0x7000_1010, INT3);
        let forked = s.fork_space(&[]).unwrap();
        assert_eq!(s.placed().iter().filter(|p| p.space == forked).count(), 1);
        s.switch_space(forked);
        assert_eq!(s.block_at(0x7000_2ff0), Some(2));
        s.restore_block(2);
        s.restore_block(0);
        assert_eq!([raw(&s, forked, 0x7000_2ff0), raw(&s, PML4_PHYS, 0x7000_2ff0)], [0xc3, 0xc3]);
        assert_eq!([raw(&s, forked, 0x7000_1010), raw(&s, PML4_PHYS, 0x7000_1010)], [0x55, 0x55]);
        // Unmapping part of the code drops the placement; what stays mapped gets its bytes back.
        s.poke(0x7000_2ff0, INT3);
        s.unmap(code, PAGE_SIZE);
        assert!(s.placed().iter().all(|p| p.space != forked));
        assert_eq!(raw(&s, forked, 0x7000_2ff0), 0xc3);
        assert_eq!(s.block_at(0x7000_2ff0), None);
        // A dropped space takes its placements with it; a moved range is restored and dropped.
        s.switch_space(PML4_PHYS);
        s.drop_space(forked);
        assert_eq!(s.placed().len(), 1);
        s.poke(0x7000_2ff0, INT3);
        s.move_pages(code, 0x7100_1000, 2 * PAGE_SIZE);
        assert!(s.placed().is_empty());
        assert_eq!(raw(&s, PML4_PHYS, 0x7100_2ff0), 0xc3);
    }

    #[test]
    fn the_program_executed_again_is_armed_at_its_addresses_and_nowhere_else() {
        use crate::coverage::INT3;
        let mut s = booted();
        let mut data = vec![0x90u8; 2 * PAGE_SIZE as usize];
        data[0x1010] = 0x55;
        s.set_blocks(Some(Arc::new(BlockImage::with_image(&data, vec![0x1010], 0x40_0000))));
        // A process that executes the program: a new space the kernel loads it into.
        let exec = s.new_space().unwrap();
        s.switch_space(exec);
        for at in [0x40_1000, 0x7000_1000] {
            s.populate(at, PAGE_SIZE, Prot::RW).unwrap();
            s.write(at, &data[0x1000..]).unwrap();
        }
        let raw = |s: &AddressSpace, va| {
            let mut b = [0u8];
            s.read_phys(s.translate(va).unwrap(), &mut b);
            b[0]
        };
        // The program's file mapped elsewhere (by an ELF interpreter, say): just bytes.
        s.code_mapped(&data, 0x7000_1000, 0x7000_2000, 0x7000_0000);
        assert_eq!((raw(&s, 0x7000_1010), s.blocks_spaces().contains(&exec)), (0x55, false));
        // Loaded at its addresses: armed, and the space runs the program's blocks.
        s.code_mapped(&data, 0x40_1000, 0x40_2000, 0x40_0000);
        assert_eq!((raw(&s, 0x40_1010), s.blocks_spaces().contains(&exec)), (INT3, true));
        assert_eq!((s.block_at(0x40_1010), s.block_at(0x7000_1010)), (Some(0), None));
        assert_eq!(read_str(&s, 0x40_1010, 1), [0x55]);
    }

    #[test]
    fn a_placement_below_its_file_offset_is_overlaid() {
        use crate::coverage::INT3;
        let mut s = booted();
        // Code at file offset 0x20000 mapped at 0x10000: the base (offset 0) wraps.
        let mut data = vec![0x90u8; 0x21000];
        data[0x20010] = 0x55;
        s.set_blocks(Some(Arc::new(BlockImage::with_object(&data, vec![0x20010]))));
        s.populate(0x10000, PAGE_SIZE, Prot::RW).unwrap();
        s.write(0x10000, &data[0x20000..]).unwrap();
        s.code_mapped(&data, 0x10000, 0x11000, 0x10000u64.wrapping_sub(0x20000));
        let mut b = [0u8];
        s.read_phys(s.translate(0x10010).unwrap(), &mut b);
        assert_eq!(b[0], INT3, "armed");
        assert_eq!(read_str(&s, 0x10000, PAGE_SIZE as usize), &data[0x20000..], "every read shows the original");
        assert_eq!(s.block_at(0x10010), Some(0));
    }

    #[test]
    fn frame_state_round_trips_several_spaces() {
        let mut s = booted();
        s.populate(0x40_0000, 2 * PAGE_SIZE, Prot::RW).unwrap();
        s.populate(0x70_0000, PAGE_SIZE, Prot::RW).unwrap();
        s.write(0x40_0000, b"first").unwrap();
        s.set_blocks(Some(Arc::new(BlockImage::default())));
        let forked = s.fork_space(&[(0x70_0000, 0x70_1000)]).unwrap();
        let exec = s.new_space().unwrap();
        s.switch_space(exec);
        s.populate(0x50_0000, PAGE_SIZE, Prot::READ).unwrap();
        s.switch_space(forked);
        s.write(0x40_0000, b"forkd").unwrap();
        let st = s.frame_state();
        assert_eq!(st.root, forked);
        assert_eq!(st.spaces, vec![PML4_PHYS, forked, exec]);
        // The shared page, and the copy-on-write page neither space wrote (0x40_0000 now has a
        // copy in the forked space, the parent keeping the frame).
        assert_eq!(st.shared, vec![(s.translate(0x40_1000).unwrap(), 2), (s.translate(0x70_0000).unwrap(), 2)]);
        assert_eq!(st.blocks_spaces, vec![PML4_PHYS, forked]);
        let bytes = postcard::to_stdvec(&st).unwrap();
        let back: FrameState = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(back, st);

        // Into another RAM holding the same image: the same spaces, current one and pages.
        let mut t = space();
        let mut ram = vec![0u8; st.bump as usize];
        s.read_phys(0, &mut ram);
        t.write_phys(0, &ram);
        t.set_frame_state(&back);
        assert_eq!(t.frame_state(), st);
        assert_eq!(t.space(), forked);
        assert_eq!(read_str(&t, 0x40_0000, 5), b"forkd");
        t.switch_space(PML4_PHYS);
        assert_eq!(read_str(&t, 0x40_0000, 5), b"first");
        t.switch_space(exec);
        assert!(t.translate(0x40_0000).is_none() && t.translate(0x50_0000).is_some());

        // State of the one-space layout, in a self-describing format, reads as that space.
        let json = serde_json::json!({"bump": st.bump, "free": [], "pt_frames": []});
        let new: FrameState = serde_json::from_value(json).unwrap();
        assert_eq!((new.root, new.spaces, new.blocks_spaces), (PML4_PHYS, vec![PML4_PHYS], vec![PML4_PHYS]));
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
