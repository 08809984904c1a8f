//! The fixed guest-physical and guest-virtual layout of a deja VM.
//!
//! Low guest-physical memory holds the monitor's few structures (GDT, IDT, TSS with its I/O
//! permission bitmap, trap stubs, a ring-0 stack, a command buffer, the root page table); every
//! frame above [`FRAME_BASE`] is handed out by the frame allocator for page tables and user
//! pages. The user half of the virtual address space belongs to the program alone. The monitor's
//! structures are reached through a supervisor-only direct map of all guest RAM at
//! [`DIRECT_MAP`]; the single user-visible monitor page is the syscall stub at [`STUB_VA`].

/// GDT frame.
pub const GDT_PHYS: u64 = 0x1000;
/// IDT frame (256 sixteen-byte gates).
pub const IDT_PHYS: u64 = 0x2000;
/// TSS: 104 bytes, then the 8 KiB I/O permission bitmap and its terminating byte.
pub const TSS_PHYS: u64 = 0x3000;
/// Offset of the I/O permission bitmap inside the TSS.
pub const TSS_IOMAP_OFFSET: u64 = 0x68;
/// TSS segment limit: header + bitmap + terminator − 1.
pub const TSS_LIMIT: u32 = (TSS_IOMAP_OFFSET + 8192) as u32;
/// Frame of the user-executable syscall stub.
pub const USER_STUB_PHYS: u64 = 0x6000;
/// Frame of the ring-0 code: exception gates and the page-table sync routine.
pub const R0_CODE_PHYS: u64 = 0x7000;
/// Offset of the exception gate for vector `v` inside the ring-0 code page: `8 * v`.
pub const R0_GATE_STRIDE: u64 = 8;
/// Offset of the page-table sync routine inside the ring-0 code page.
pub const R0_PTSYNC_OFFSET: u64 = 0x400;
/// Ring-0 stack frame; the stack grows down from the end of the frame.
pub const R0_STACK_PHYS: u64 = 0x8000;
/// Command buffer for the ring-0 page-table sync routine: pairs of (PTE address, user address).
pub const CMD_PHYS: u64 = 0x9000;
/// Size of the command buffer in bytes.
pub const CMD_SIZE: u64 = 0x7000;
/// Root page table (PML4).
pub const PML4_PHYS: u64 = 0x10000;
/// First frame owned by the frame allocator.
pub const FRAME_BASE: u64 = 0x11000;

/// Base of the supervisor-only direct map of guest RAM (2 MiB pages).
pub const DIRECT_MAP: u64 = 0xffff_8880_0000_0000;
/// Address of the user-executable syscall stub page (the vsyscall slot of Linux).
pub const STUB_VA: u64 = 0xffff_ffff_ff60_0000;
/// End of the user half (exclusive): the last page below it is never mapped, as on Linux.
pub const USER_END: u64 = 0x7fff_ffff_f000;

/// I/O port the syscall stub writes to: the only port the TSS bitmap opens to ring 3.
pub const SYSCALL_PORT: u16 = 0xde;
/// The exception gate of vector `v` writes to port `EXCEPTION_PORT_BASE + v`.
pub const EXCEPTION_PORT_BASE: u16 = 0xa0;
/// The page-table sync routine writes to this port when it is done.
pub const PTSYNC_PORT: u16 = 0xdd;

/// Kernel code selector.
pub const KERNEL_CS: u16 = 0x10;
/// Kernel data selector.
pub const KERNEL_SS: u16 = 0x18;
/// User data selector (RPL 3), Linux's `__USER_DS`.
pub const USER_SS: u16 = 0x2b;
/// User 64-bit code selector (RPL 3), Linux's `__USER_CS`.
pub const USER_CS: u16 = 0x33;
/// TSS selector.
pub const TSS_SEL: u16 = 0x38;

/// The direct-map address of a guest-physical address.
pub const fn direct(phys: u64) -> u64 {
    DIRECT_MAP + phys
}
