//! The fixed, deterministic layout of the guest's user address space.
//!
//! Nothing here is randomized: the same image always lands at the same addresses.

/// Lowest mappable user address (Linux's default `mmap_min_addr`).
pub const USER_START: u64 = 0x1_0000;
/// End (exclusive) of the user half.
pub const USER_END: u64 = 0x7fff_ffff_f000;
/// Top (exclusive) of the initial stack.
pub const STACK_TOP: u64 = USER_END;
/// Size of the stack mapping.
pub const STACK_SIZE: u64 = 8 << 20;
/// How much of the top of the stack is populated at load time.
pub const STACK_EAGER: u64 = 128 << 10;
/// `mmap` without a usable hint places mappings top-down below this address.
pub const MMAP_TOP: u64 = 0x7fff_f7ff_f000;
/// Where a static-PIE (`ET_DYN`) image is loaded (its lowest page lands here).
pub const PIE_BASE: u64 = 0x5555_5555_4000;
/// Pages populated around a demand fault (the window is aligned to its own size).
pub const FAULT_AROUND_PAGES: u64 = 16;

/// Start of the range no program may map, in either placement: the guest placement keeps its
/// kernel there (`crate::placement`: guest RAM from here, then the kernel's window), and the host
/// placement keeps the range free too, so that both give a program the same addresses. `mmap`
/// never places a mapping there; `MAP_FIXED` or `MREMAP_FIXED` onto it is `ENOMEM`.
pub const RESERVED_START: u64 = 0x7efe_0000_0000;
/// End (exclusive) of the reserved range: 12 GiB, about 1 TiB below [`MMAP_TOP`].
pub const RESERVED_END: u64 = 0x7f01_0000_0000;

/// True if `[a, b)` overlaps the reserved range.
pub const fn reserved(a: u64, b: u64) -> bool {
    a < RESERVED_END && b > RESERVED_START
}

/// Rounds down to a page boundary.
pub const fn page_down(a: u64) -> u64 {
    a & !(crate::PAGE_SIZE - 1)
}

/// Rounds up to a page boundary; `None` on overflow.
pub fn page_up(a: u64) -> Option<u64> {
    a.checked_add(crate::PAGE_SIZE - 1).map(page_down)
}

/// True if `a` is page aligned.
pub const fn is_page_aligned(a: u64) -> bool {
    a & (crate::PAGE_SIZE - 1) == 0
}
