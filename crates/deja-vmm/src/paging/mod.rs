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

mod blocks;
mod frames;
mod memory;
mod tables;

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
    /// `deja debug`'s breakpoints: address → the byte its `int3` replaced. Reads through
    /// [`Memory`] show the byte wherever the `int3` sits (`vm::debug`).
    pub(crate) debug_bytes: BTreeMap<u64, u8>,
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
            debug_bytes: BTreeMap::new(),
        })
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
    fn the_reserved_range_is_the_same_pages_in_every_space_and_no_space_owns_them() {
        use deja_kernel::mm::user_layout::{RESERVED_END, RESERVED_START};
        let mut s = booted();
        // What the guest placement maps there: a page of the kernel (at the range's end) and a
        // page of the physical window (at its start), each in its own 1 GiB.
        let (kernel, window) = (RESERVED_END - (1 << 30), RESERVED_START);
        s.populate(kernel, PAGE_SIZE, Prot::RW).unwrap();
        s.write(kernel, b"kernel").unwrap();
        s.map_page(window, PML4_PHYS, PTE_P | PTE_W | PTE_U | PTE_A | PTE_NX).unwrap();
        s.populate(0x40_0000, PAGE_SIZE, Prot::RW).unwrap();
        let fresh = s.new_space().unwrap();
        let child = s.fork_space(&[]).unwrap();
        assert!(s.take_stale().iter().all(|&(_, va)| va == 0x40_0000), "the kernel's pages stay writable");
        for id in [fresh, child] {
            assert_eq!(s.translate_in(id, kernel), s.translate_in(PML4_PHYS, kernel), "{id:#x}");
            assert_eq!(s.translate_in(id, window), Some(PML4_PHYS));
        }
        // A write in one space is seen in the others: one frame, never copy-on-write.
        s.switch_space(child);
        s.write(kernel, b"KERNEL").unwrap();
        s.switch_space(fresh);
        assert_eq!(read_str(&s, kernel, 6), b"KERNEL");
        // Dropping any space, the first one included, leaves the range to the others whole.
        let left = s.frames_left();
        s.drop_space(child);
        s.drop_space(PML4_PHYS);
        assert_eq!(s.spaces(), vec![fresh]);
        assert_eq!(read_str(&s, kernel, 6), b"KERNEL");
        assert_eq!(s.translate_in(fresh, window), Some(PML4_PHYS));
        assert!(s.frames_left() > left, "the dropped spaces' own tables and pages came back");
        let next = s.fork_space(&[]).unwrap();
        assert_eq!(s.translate_in(next, kernel), s.translate_in(fresh, kernel));
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
