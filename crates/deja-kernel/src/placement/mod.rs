//! The guest placement's contract: where the kernel image, its stack, heap and transfer area
//! sit in the VM's reserved window, the boot block through which the monitor and the image
//! speak, and how the image is made ready to map ([`image`]).
//!
//! Both sides use this room: the monitor (`deja-vmm`) lays the window out and reads the boot
//! block after each host call; the image (`deja-guestkernel`, built for `x86_64-unknown-none`)
//! reads its inputs from it and writes its answers. Uses [`crate::mm`] (page protections) and
//! nothing else. docs/ARCHITECTURE.md, "The kernel inside the VM", has the design.
//!
//! The window, from its start:
//!
//! | offset | contents |
//! |---|---|
//! | `0` | the boot block (one page, [`BootBlock`]) |
//! | `0x1000 … 0x10_0000` | the kernel's stack, growing down from [`STACK_TOP`] |
//! | `0x100_0000` | the image, its lowest page at [`IMAGE_BASE`] |
//! | `0x1000_0000` | the kernel's heap ([`HEAP`], [`BootBlock::heap_len`] bytes) |
//! | `0x8000_0000` | the transfer area ([`TRANSFER`]): the monitor's input, then the kernel's output |
//!
//! Below the window, from [`PHYS_WINDOW`], every byte of guest RAM at its guest-physical offset
//! (read-write, never executable): the kernel reads and writes the program's memory by walking
//! the program's page tables ([`translate`]) and reaching each frame there. Page tables and frames
//! stay the monitor's: mapping, protecting, unmapping and moving pages are host calls
//! ([`Request::Memory`], [`MemOp`]), validated there as a syscall's arguments are.

pub mod image;

use crate::prelude::*;

/// First address of the window every address space of the VM reserves for the kernel (after
/// the physical window, at the top of the range no program may map in either placement,
/// [`crate::mm::user_layout::RESERVED_START`]).
pub const WINDOW: u64 = PHYS_WINDOW + PHYS_MAX;
/// Length of the window (4 GiB).
pub const WINDOW_LEN: u64 = 1 << 32;
/// The boot block's page.
pub const BOOT_BLOCK: u64 = WINDOW;
/// Top (exclusive) of the kernel's stack.
pub const STACK_TOP: u64 = WINDOW + 0x10_0000;
/// Lowest address of the kernel's stack.
pub const STACK_BOTTOM: u64 = WINDOW + 0x1000;
/// Where the image's lowest page is mapped.
pub const IMAGE_BASE: u64 = WINDOW + 0x100_0000;
/// Most bytes the image may span.
pub const IMAGE_MAX: u64 = HEAP - IMAGE_BASE;
/// The kernel's heap.
pub const HEAP: u64 = WINDOW + 0x1000_0000;
/// Most bytes of heap.
pub const HEAP_MAX: u64 = TRANSFER - HEAP;
/// The transfer area: the input at its start, the output after it (page aligned).
pub const TRANSFER: u64 = WINDOW + 0x8000_0000;
/// Most bytes of input and output together.
pub const TRANSFER_MAX: u64 = WINDOW + WINDOW_LEN - TRANSFER;

/// Where guest RAM is mapped for the kernel, at its guest-physical offsets.
pub const PHYS_WINDOW: u64 = crate::mm::user_layout::RESERVED_START;
/// Most guest RAM the physical window maps (8 GiB: it ends where the window begins).
pub const PHYS_MAX: u64 = 8 << 30;
/// Software bit of a page-table entry: a copy-on-write page (`deja-vmm`'s paging), whose first
/// write needs a frame of its own.
pub const PTE_COW: u64 = 1 << 9;

/// The boot block's first eight bytes.
pub const MAGIC: [u8; 8] = *b"dejaGK02";

/// True if `[addr, addr+len)` touches what the placement reserves (the window and the physical
/// window): no memory request of the kernel may map, change or move pages there.
pub fn reserved(addr: u64, len: u64) -> bool {
    crate::mm::user_layout::reserved(addr, addr.saturating_add(len))
}

/// Walks the 4-level page tables under `root` for user address `va`, reading each entry with
/// `read` (a guest-physical address to its word, `None` outside RAM). Returns the
/// guest-physical address `va` maps to and the leaf entry, or `None` when a level is absent.
pub fn translate(read: impl Fn(u64) -> Option<u64>, root: u64, va: u64) -> Option<(u64, u64)> {
    const PRESENT: u64 = 1;
    const LARGE: u64 = 1 << 7;
    const ADDR: u64 = 0x000f_ffff_ffff_f000;
    if va >= crate::mm::user_layout::USER_END {
        return None;
    }
    let mut table = root & ADDR;
    for level in (0..4u32).rev() {
        let entry = read(table + ((va >> (12 + 9 * level)) & 0x1ff) * 8)?;
        if entry & PRESENT == 0 {
            return None;
        }
        let span = 1u64 << (12 + 9 * level);
        if level == 0 || (entry & LARGE != 0 && level <= 2) {
            let base = entry & ADDR & !(span - 1);
            return Some((base | (va & (span - 1)), entry));
        }
        table = entry & ADDR;
    }
    None
}

/// The program's output as the kernel hands it over ([`Request::Output`]): per write, the
/// stream (`1` or `2`), the length as a little-endian word, the bytes.
pub fn encode_output(records: &[(crate::Stream, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (stream, bytes) in records {
        out.push(match stream {
            crate::Stream::Stdout => 1,
            crate::Stream::Stderr => 2,
        });
        out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        out.extend_from_slice(bytes);
    }
    out
}

/// Reads what [`encode_output`] wrote; `None` for anything else (an unknown stream, a length
/// past the end).
pub fn decode_output(mut bytes: &[u8]) -> Option<Vec<(crate::Stream, Vec<u8>)>> {
    let mut records = Vec::new();
    while let Some((&tag, rest)) = bytes.split_first() {
        let stream = match tag {
            1 => crate::Stream::Stdout,
            2 => crate::Stream::Stderr,
            _ => return None,
        };
        let len = u64::from_le_bytes(rest.get(..8)?.try_into().ok()?);
        let body = rest.get(8..)?.get(..usize::try_from(len).ok()?)?;
        records.push((stream, body.to_vec()));
        bytes = &rest[8 + body.len()..];
    }
    Some(records)
}

/// Where the exception frame lies: the second half of the boot block's page.
pub const EXC_FRAME: u64 = BOOT_BLOCK + 0x800;
/// Bytes of an encoded [`ExcFrame`].
pub const EXC_FRAME_LEN: usize = 21 * 8;

/// A program's exception as the monitor hands it to the kernel at `deja_exception_entry`: the
/// vector and what the CPU said, and the program's registers, which the kernel changes as the
/// outcome says (an emulated instruction's writes, flags and length) before the monitor resumes
/// the program with them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExcFrame {
    /// The vector.
    pub vector: u64,
    /// The hardware error code (0 without one).
    pub error_code: u64,
    /// CR2: the faulting address of a page fault.
    pub addr: u64,
    /// The general-purpose registers in x86's encoding order (RAX, RCX, RDX, RBX, RSP, RBP, RSI,
    /// RDI, R8–R15), RSP the program's.
    pub gprs: [u64; 16],
    /// Where the program resumes.
    pub rip: u64,
    /// Its flags.
    pub rflags: u64,
}

impl ExcFrame {
    /// The frame's bytes.
    pub fn encode(&self) -> [u8; EXC_FRAME_LEN] {
        let mut out = [0u8; EXC_FRAME_LEN];
        let head = [self.vector, self.error_code, self.addr];
        let words = head.iter().chain(&self.gprs).chain([&self.rip, &self.rflags]);
        for (i, w) in words.enumerate() {
            out[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
        }
        out
    }

    /// Reads a frame; `None` if `bytes` is short or the vector is not an exception's.
    pub fn decode(bytes: &[u8]) -> Option<ExcFrame> {
        if bytes.len() < EXC_FRAME_LEN {
            return None;
        }
        let word = |i: usize| u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().unwrap_or([0; 8]));
        let mut gprs = [0u64; 16];
        for (i, g) in gprs.iter_mut().enumerate() {
            *g = word(3 + i);
        }
        let frame =
            ExcFrame { vector: word(0), error_code: word(1), addr: word(2), gprs, rip: word(19), rflags: word(20) };
        (frame.vector < 32).then_some(frame)
    }

    /// The exception as the kernel takes it (as the host placement's monitor decodes it).
    pub fn exception(&self) -> crate::Exception {
        let (rip, eax, ecx) = (self.rip, self.gprs[0] as u32, self.gprs[1] as u32);
        match self.vector {
            14 => crate::Exception::PageFault { addr: self.addr, error_code: self.error_code, rip },
            13 => crate::Exception::GeneralProtection { rip, error_code: self.error_code, eax, ecx },
            6 => crate::Exception::InvalidOpcode { rip, eax, ecx },
            v => crate::Exception::Other { vector: v as u8, rip },
        }
    }
}

/// A page operation the kernel asks the monitor for ([`Request::Memory`]), with its words in
/// [`BootBlock::args`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemOp {
    /// `Memory::populate(addr, len, prot)`.
    Populate,
    /// `Memory::protect(addr, len, prot)`.
    Protect,
    /// `Memory::unmap(addr, len)`.
    Unmap,
    /// `Memory::move_pages(from, to, len)`.
    MovePages,
    /// `Memory::unshare(addr)`: a copy-on-write page gets a frame of its own ([`mem_status::NO`]
    /// when it is no such page). `args[1]` is 1 when the CPU may hold the page's read-only entry
    /// (the kernel is about to write the page, which the program did not fault on): the monitor
    /// then replays the moved entry from ring 0 before the program runs again.
    Unshare,
    /// `Memory::fork_space(shared)`: `args[0]` ranges, each a pair of words `start, end`, at the
    /// start of the output area ([`fork_ranges`]); the new space's id in [`BootBlock::answer`].
    ForkSpace,
    /// `Memory::new_space()`: the new space's id in [`BootBlock::answer`].
    NewSpace,
    /// `Memory::switch_space(args[0])`.
    SwitchSpace,
    /// `Memory::drop_space(args[0])`.
    DropSpace,
}

impl MemOp {
    /// The word in the boot block.
    pub fn code(self) -> u64 {
        match self {
            MemOp::Populate => 1,
            MemOp::Protect => 2,
            MemOp::Unmap => 3,
            MemOp::MovePages => 4,
            MemOp::Unshare => 5,
            MemOp::ForkSpace => 6,
            MemOp::NewSpace => 7,
            MemOp::SwitchSpace => 8,
            MemOp::DropSpace => 9,
        }
    }
    /// The operation a word names.
    pub fn from_code(code: u64) -> Option<MemOp> {
        [
            MemOp::Populate,
            MemOp::Protect,
            MemOp::Unmap,
            MemOp::MovePages,
            MemOp::Unshare,
            MemOp::ForkSpace,
            MemOp::NewSpace,
            MemOp::SwitchSpace,
            MemOp::DropSpace,
        ]
        .into_iter()
        .find(|o| o.code() == code)
    }
}

/// The monitor's answer to a [`Request::Memory`], in [`BootBlock::status`].
pub mod mem_status {
    /// Done.
    pub const OK: u64 = 0;
    /// No frame left (`MemError::OutOfFrames`).
    pub const OUT_OF_FRAMES: u64 = 1;
    /// Outside the user half, or inside what the placement reserves (`MemError::OutOfRange`).
    pub const OUT_OF_RANGE: u64 = 2;
    /// Done, and there was nothing to do ([`super::MemOp::Unshare`] of a page that is not
    /// copy-on-write).
    pub const NO: u64 = 3;
}

/// Why the kernel in the guest made a host call ([`BootBlock::request`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// The kernel restored its state from the input and wrote it back to the output: it is
    /// ready to serve the program's syscalls.
    Booted,
    /// The program is over: the output holds the kernel's saved state at its end.
    Done,
    /// The kernel cannot go on ([`BootBlock::status`] says why, [`Failure`]).
    Failed,
    /// The kernel asks for a page operation ([`BootBlock::op`], [`BootBlock::args`]); the
    /// monitor answers in [`BootBlock::status`] and returns.
    Memory,
    /// The thread's FS and GS bases changed (`arch_prctl`): they are [`BootBlock::args`]'s first
    /// two words, which the monitor loads before it returns (ring 3 cannot, without
    /// `FSGSBASE`).
    Bases,
    /// The kernel served the program's exception in [`ExcFrame`] and wrote back the registers
    /// the program resumes with.
    ExceptionServed,
    /// The program wrote to its standard output or error: [`BootBlock::output_len`] bytes of
    /// [`encode_output`] records in the output area, for the monitor to pass on.
    Output,
    /// A piece of what the next `Booted`, `Done` or `Output` hands over, when it does not fit
    /// the output area at once: the monitor keeps [`BootBlock::output_len`] bytes and returns.
    Part,
}

impl Request {
    /// The word in the boot block.
    pub fn code(self) -> u64 {
        match self {
            Request::Booted => 1,
            Request::Done => 2,
            Request::Failed => 3,
            Request::Memory => 4,
            Request::Bases => 5,
            Request::ExceptionServed => 6,
            Request::Output => 7,
            Request::Part => 8,
        }
    }
    /// Every request, in the order of their codes.
    pub const ALL: [Request; 8] = [
        Request::Booted,
        Request::Done,
        Request::Failed,
        Request::Memory,
        Request::Bases,
        Request::ExceptionServed,
        Request::Output,
        Request::Part,
    ];
    /// The request a word names.
    pub fn from_code(code: u64) -> Option<Request> {
        Request::ALL.into_iter().find(|r| r.code() == code)
    }
}

/// Why the kernel in the guest stopped with [`Request::Failed`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The boot block was not one this image reads.
    BadBootBlock,
    /// The input was not a saved kernel (`Kernel::restore` refused it).
    Restore,
    /// The saved state does not fit the output area.
    OutputFull,
    /// A syscall needed the program's memory, which this stage of the placement does not
    /// reach yet (`BootBlock::served` counts the calls served before it).
    NeedsMemory,
    /// A syscall's outcome asks for something this stage does not do yet (a signal frame, a
    /// crash, a node going idle).
    Outcome,
    /// The kernel panicked (an exhausted heap among the causes).
    Panic,
}

impl Failure {
    /// The word in the boot block.
    pub fn code(self) -> u64 {
        match self {
            Failure::BadBootBlock => 1,
            Failure::Restore => 2,
            Failure::OutputFull => 3,
            Failure::NeedsMemory => 4,
            Failure::Outcome => 5,
            Failure::Panic => 6,
        }
    }
    /// The failure a word names.
    pub fn from_code(code: u64) -> Option<Failure> {
        [
            Failure::BadBootBlock,
            Failure::Restore,
            Failure::OutputFull,
            Failure::NeedsMemory,
            Failure::Outcome,
            Failure::Panic,
        ]
        .into_iter()
        .find(|f| f.code() == code)
    }
    /// What it means, for an error message.
    pub fn describe(self) -> &'static str {
        match self {
            Failure::BadBootBlock => "the boot block is not one this image reads",
            Failure::Restore => "the input is not a saved kernel",
            Failure::OutputFull => "the saved state does not fit the output area",
            Failure::NeedsMemory => {
                "a syscall needed the program's memory, which the guest placement does not reach yet"
            }
            Failure::Outcome => "a syscall's outcome needs what the guest placement does not do yet",
            Failure::Panic => "the kernel panicked",
        }
    }
}

/// The `Memory` methods a [`Failure::NeedsMemory`] may name: its [`BootBlock::args`] hold the
/// syscall number (`u64::MAX` for an exception) and the index of the method here.
pub const MEMORY_METHODS: [&str; 12] = [
    "populate",
    "protect",
    "unmap",
    "move_pages",
    "a write to a copy-on-write page",
    "for_each_page",
    "for_each_page_in",
    "fork_space",
    "unshare",
    "new_space",
    "switch_space or drop_space",
    "code_mapped",
];

/// What a [`Failure::Outcome`] may name: its [`BootBlock::args`] hold the syscall number
/// (`u64::MAX` for an exception) and the index of the outcome here. (The image serves new
/// threads and thread switches now; their words stay, so an older image's failure still reads.)
pub const OUTCOMES: [&str; 9] = [
    "execve",
    "a new thread",
    "a switch to another thread",
    "a signal to deliver",
    "an injected crash",
    "a node with nothing to run",
    "rt_sigreturn's context",
    "a signal frame for a fault",
    "the end of a process other than the first",
];

/// The page the monitor and the kernel share at [`BOOT_BLOCK`]: little-endian words at fixed
/// offsets after [`MAGIC`]. The monitor writes the sizes; the kernel writes the answers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BootBlock {
    /// Bytes of heap mapped at [`HEAP`].
    pub heap_len: u64,
    /// Bytes of input at [`TRANSFER`]: a saved kernel (`Kernel::save`).
    pub input_len: u64,
    /// Bytes the output area at [`BootBlock::output_at`] holds.
    pub output_cap: u64,
    /// Bytes of output the kernel wrote (its saved state).
    pub output_len: u64,
    /// The last host call's [`Request::code`].
    pub request: u64,
    /// The [`Failure::code`] of a [`Request::Failed`], else 0.
    pub status: u64,
    /// Syscalls the kernel served in the guest.
    pub served: u64,
    /// The current address space's root (the guest-physical address of its PML4), which the
    /// monitor writes at boot and after every host call.
    pub root: u64,
    /// Bytes of guest RAM mapped at [`PHYS_WINDOW`] (monitor).
    pub ram_len: u64,
    /// Free frames the monitor has left, after every host call (`Memory::free_frames`).
    pub free_frames: u64,
    /// The [`MemOp::code`] of a [`Request::Memory`] (kernel).
    pub op: u64,
    /// Its words (kernel).
    pub args: [u64; 3],
    /// The monitor's answer to a [`MemOp::ForkSpace`] or [`MemOp::NewSpace`]: the new space's
    /// id (monitor).
    pub answer: u64,
}

/// Where [`BootBlock::served`] lies in the encoded block: the kernel writes it alone after
/// every syscall, for the monitor's watchdog.
pub const SERVED_AT: usize = 8 + 6 * 8;

/// Words in the encoded block after [`MAGIC`].
const WORDS: usize = 15;
/// Bytes of the encoded block.
pub const BOOT_BLOCK_LEN: usize = 8 + WORDS * 8;

impl BootBlock {
    /// Where the output area starts: the first page after the input.
    pub fn output_at(&self) -> u64 {
        TRANSFER.saturating_add(self.input_len.div_ceil(crate::PAGE_SIZE).saturating_mul(crate::PAGE_SIZE))
    }

    /// The block's bytes.
    pub fn encode(&self) -> [u8; BOOT_BLOCK_LEN] {
        let mut out = [0u8; BOOT_BLOCK_LEN];
        out[..8].copy_from_slice(&MAGIC);
        let words: [u64; WORDS] = [
            self.heap_len,
            self.input_len,
            self.output_cap,
            self.output_len,
            self.request,
            self.status,
            self.served,
            self.root,
            self.ram_len,
            self.free_frames,
            self.op,
            self.args[0],
            self.args[1],
            self.args[2],
            self.answer,
        ];
        for (i, w) in words.iter().enumerate() {
            out[8 + i * 8..16 + i * 8].copy_from_slice(&w.to_le_bytes());
        }
        out
    }

    /// Reads a block; `None` unless it starts with [`MAGIC`] and its sizes fit the window.
    pub fn decode(bytes: &[u8]) -> Option<BootBlock> {
        if bytes.len() < BOOT_BLOCK_LEN || bytes[..8] != MAGIC {
            return None;
        }
        let word = |i: usize| u64::from_le_bytes(bytes[8 + i * 8..16 + i * 8].try_into().unwrap_or([0; 8]));
        let block = BootBlock {
            heap_len: word(0),
            input_len: word(1),
            output_cap: word(2),
            output_len: word(3),
            request: word(4),
            status: word(5),
            served: word(6),
            root: word(7),
            ram_len: word(8),
            free_frames: word(9),
            op: word(10),
            args: [word(11), word(12), word(13)],
            answer: word(14),
        };
        let transfer = (block.output_at() - TRANSFER).checked_add(block.output_cap)?;
        let fits = block.heap_len <= HEAP_MAX
            && transfer <= TRANSFER_MAX
            && block.output_len <= block.output_cap
            && block.ram_len <= PHYS_MAX;
        fits.then_some(block)
    }

    /// The same sizes with the kernel's answers cleared: what the monitor writes.
    pub fn for_input(heap_len: u64, input_len: u64, output_cap: u64) -> BootBlock {
        BootBlock { heap_len, input_len, output_cap, ..BootBlock::default() }
    }

    /// The page operation of a [`Request::Memory`], checked: `None` for an unknown operation,
    /// a length that is zero, unaligned or wraps, or a range outside the user half or inside what
    /// the placement reserves.
    pub fn mem_op(&self) -> Option<MemOp> {
        let op = MemOp::from_code(self.op)?;
        let [a, b, c] = self.args;
        let aligned = |x: u64| crate::mm::user_layout::is_page_aligned(x);
        let fits = |at: u64, len: u64| {
            aligned(at)
                && aligned(len)
                && len > 0
                && at.checked_add(len).is_some_and(|e| e <= crate::mm::user_layout::USER_END)
                && !reserved(at, len)
        };
        let ok = match op {
            MemOp::Populate | MemOp::Protect => fits(a, b) && c <= 7,
            MemOp::Unmap => fits(a, b),
            MemOp::MovePages => fits(a, c) && fits(b, c) && (a.max(b) - a.min(b)) >= c,
            MemOp::Unshare => fits(a & !(crate::PAGE_SIZE - 1), crate::PAGE_SIZE) && b <= 1,
            MemOp::ForkSpace => a <= MAX_FORK_RANGES && a.saturating_mul(16) <= self.output_cap,
            MemOp::NewSpace | MemOp::SwitchSpace | MemOp::DropSpace => true,
        };
        ok.then_some(op)
    }
}

/// The most shared ranges a [`MemOp::ForkSpace`] may name (a process has at most this many
/// mappings: `vm.max_map_count`'s default).
pub const MAX_FORK_RANGES: u64 = 65_530;

/// The shared ranges of a [`MemOp::ForkSpace`] from the `count` pairs of words in `bytes` (the
/// output area), checked as a page operation's range is: `None` if one is empty, unaligned,
/// wraps, leaves the user half or touches what the placement reserves.
pub fn fork_ranges(bytes: &[u8], count: u64) -> Option<Vec<(u64, u64)>> {
    let count = usize::try_from(count).ok()?;
    let words = bytes.get(..count.checked_mul(16)?)?;
    let word = |c: &[u8]| u64::from_le_bytes(c.try_into().unwrap_or([0; 8]));
    let aligned = crate::mm::user_layout::is_page_aligned;
    words
        .chunks_exact(16)
        .map(|pair| {
            let (start, end) = (word(&pair[..8]), word(&pair[8..]));
            let ok = aligned(start)
                && aligned(end)
                && start < end
                && end <= crate::mm::user_layout::USER_END
                && !reserved(start, end - start);
            ok.then_some((start, end))
        })
        .collect()
}

/// The words of [`fork_ranges`]: each range's start and end, little-endian.
pub fn encode_fork_ranges(ranges: &[(u64, u64)]) -> Vec<u8> {
    ranges.iter().flat_map(|&(a, b)| a.to_le_bytes().into_iter().chain(b.to_le_bytes())).collect()
}

/// The heap the kernel in the guest needs at least for a saved state of `state_len` bytes, capped
/// at [`HEAP_MAX`]: the state restored, its growth during the run, and its final save beside it
/// (serialized into buffers that grow by doubling), at 8 times the state and 128 MiB more. Debian's
/// etcd starts from 24.8 MB of state and needed more than 128 MiB at its end. The heap's pages
/// come out of the VM's RAM.
pub fn heap_for(state_len: u64) -> u64 {
    state_len
        .saturating_mul(8)
        .saturating_add(128 << 20)
        .div_ceil(crate::PAGE_SIZE)
        .saturating_mul(crate::PAGE_SIZE)
        .min(HEAP_MAX)
}

/// The output area for a saved kernel of `input_len` bytes: the input's size, doubled, and at
/// least 1 MiB (a run's state grows with its trace and files; what outgrows the area is handed
/// over in pieces, [`Request::Part`]).
pub fn output_cap_for(input_len: u64) -> u64 {
    (input_len.saturating_mul(2)).max(1 << 20).div_ceil(crate::PAGE_SIZE) * crate::PAGE_SIZE
}

/// Which part of the window holds `addr`, for messages; `None` outside the window.
pub fn part_of(addr: u64) -> Option<&'static str> {
    let parts: [(u64, u64, &'static str); 5] = [
        (BOOT_BLOCK, STACK_BOTTOM, "the boot block"),
        (STACK_BOTTOM, IMAGE_BASE, "the kernel's stack"),
        (IMAGE_BASE, HEAP, "the kernel image"),
        (HEAP, TRANSFER, "the kernel's heap"),
        (TRANSFER, WINDOW + WINDOW_LEN, "the transfer area"),
    ];
    parts.iter().find(|(s, e, _)| (*s..*e).contains(&addr)).map(|p| p.2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_boot_block_round_trips_and_refuses_what_does_not_fit() {
        let mut b = BootBlock::for_input(64 << 20, 5000, output_cap_for(5000));
        b.output_len = 4096;
        b.request = Request::Done.code();
        b.served = 7;
        assert_eq!(BootBlock::decode(&b.encode()), Some(b));
        assert_eq!(b.output_at(), TRANSFER + 0x2000);
        let mut bad = b.encode();
        bad[0] ^= 1;
        assert_eq!(BootBlock::decode(&bad), None, "magic");
        assert_eq!(BootBlock::decode(&b.encode()[..BOOT_BLOCK_LEN - 1]), None, "short");
        let huge = BootBlock { heap_len: HEAP_MAX + 1, ..b };
        assert_eq!(BootBlock::decode(&huge.encode()), None, "heap past the transfer area");
        let over = BootBlock { output_cap: TRANSFER_MAX, ..b };
        assert_eq!(BootBlock::decode(&over.encode()), None, "output past the window");
        let wrote_more = BootBlock { output_len: b.output_cap + 1, ..b };
        assert_eq!(BootBlock::decode(&wrote_more.encode()), None, "output longer than its area");
        let wraps = BootBlock { input_len: u64::MAX, ..b };
        assert_eq!(BootBlock::decode(&wraps.encode()), None, "input size overflows");
        let ram = BootBlock { ram_len: PHYS_MAX + 1, ..b };
        assert_eq!(BootBlock::decode(&ram.encode()), None, "more RAM than the physical window maps");
        let served = BootBlock { served: 0x1122_3344, ..b }.encode();
        assert_eq!(served[SERVED_AT..SERVED_AT + 8], 0x1122_3344u64.to_le_bytes());
        let full = BootBlock { root: 0x10000, ram_len: 1 << 30, free_frames: 9, op: 3, args: [1, 2, 3], ..b };
        assert_eq!(BootBlock::decode(&full.encode()), Some(full));
    }

    #[test]
    fn requests_and_failures_have_one_code_each() {
        for (i, r) in Request::ALL.into_iter().enumerate() {
            assert_eq!(r.code(), i as u64 + 1);
            assert_eq!(Request::from_code(r.code()), Some(r));
        }
        assert_eq!(Request::from_code(0), None);
        for code in 1..=6 {
            let f = Failure::from_code(code).unwrap();
            assert_eq!(f.code(), code);
            assert!(!f.describe().is_empty());
        }
        assert_eq!(Failure::from_code(7), None);
    }

    #[test]
    fn the_exception_frame_round_trips_and_says_which_exception() {
        let mut gprs = [0u64; 16];
        for (i, g) in gprs.iter_mut().enumerate() {
            *g = 0x100 + i as u64;
        }
        let f = ExcFrame { vector: 14, error_code: 6, addr: 0xdead_0000, gprs, rip: 0x40_1000, rflags: 0x246 };
        assert_eq!(ExcFrame::decode(&f.encode()), Some(f));
        assert_eq!(f.exception(), crate::Exception::PageFault { addr: 0xdead_0000, error_code: 6, rip: 0x40_1000 });
        let ud = ExcFrame { vector: 6, ..f };
        assert_eq!(ud.exception(), crate::Exception::InvalidOpcode { rip: 0x40_1000, eax: 0x100, ecx: 0x101 });
        let gp = ExcFrame { vector: 13, ..f };
        assert!(matches!(gp.exception(), crate::Exception::GeneralProtection { error_code: 6, eax: 0x100, .. }));
        assert_eq!(ExcFrame { vector: 3, ..f }.exception(), crate::Exception::Other { vector: 3, rip: 0x40_1000 });
        assert_eq!(ExcFrame::decode(&ExcFrame { vector: 32, ..f }.encode()), None);
        assert_eq!(ExcFrame::decode(&f.encode()[..EXC_FRAME_LEN - 1]), None);
        assert!(EXC_FRAME + EXC_FRAME_LEN as u64 <= BOOT_BLOCK + crate::PAGE_SIZE);
        assert!(BOOT_BLOCK + BOOT_BLOCK_LEN as u64 <= EXC_FRAME);
    }

    #[test]
    fn output_records_round_trip_and_damaged_ones_are_refused() {
        use crate::Stream;
        let records =
            vec![(Stream::Stdout, b"hello\n".to_vec()), (Stream::Stderr, Vec::new()), (Stream::Stdout, vec![0; 300])];
        let bytes = encode_output(&records);
        assert_eq!(decode_output(&bytes), Some(records));
        assert_eq!(decode_output(&[]), Some(Vec::new()));
        assert_eq!(decode_output(&bytes[..bytes.len() - 1]), None, "short");
        let mut bad = bytes.clone();
        bad[0] = 3;
        assert_eq!(decode_output(&bad), None, "unknown stream");
        let mut long = encode_output(&[(Stream::Stdout, b"x".to_vec())]);
        long[1..9].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(decode_output(&long), None, "a length past the end");
    }

    #[test]
    fn memory_requests_are_checked_before_the_monitor_acts_on_them() {
        let req = |op: MemOp, args: [u64; 3]| BootBlock { op: op.code(), args, ..BootBlock::default() }.mem_op();
        assert_eq!(req(MemOp::Populate, [0x40_0000, 0x2000, 3]), Some(MemOp::Populate));
        assert_eq!(req(MemOp::Populate, [0x40_0001, 0x2000, 3]), None, "unaligned address");
        assert_eq!(req(MemOp::Protect, [0x40_0000, 0x2001, 3]), None, "unaligned length");
        assert_eq!(req(MemOp::Protect, [0x40_0000, 0x1000, 8]), None, "unknown protection bits");
        assert_eq!(req(MemOp::Unmap, [0x40_0000, 0, 0]), None, "empty");
        assert_eq!(req(MemOp::Unmap, [!0xfff, 0x2000, 0]), None, "wraps");
        assert_eq!(req(MemOp::Unmap, [WINDOW, 0x1000, 0]), None, "the window");
        assert_eq!(req(MemOp::Populate, [PHYS_WINDOW - 0x1000, 0x2000, 3]), None, "into the physical window");
        assert_eq!(req(MemOp::Populate, [0x7fff_ffff_e000, 0x2000, 3]), None, "past the user half");
        assert_eq!(req(MemOp::MovePages, [0x40_0000, 0x50_0000, 0x1000]), Some(MemOp::MovePages));
        assert_eq!(req(MemOp::MovePages, [0x40_0000, 0x40_1000, 0x2000]), None, "overlapping");
        assert_eq!(req(MemOp::MovePages, [0x40_0000, WINDOW, 0x1000]), None, "into the window");
        assert_eq!(req(MemOp::Unshare, [0x40_0123, 0, 0]), Some(MemOp::Unshare));
        assert_eq!(req(MemOp::Unshare, [0x40_0123, 1, 0]), Some(MemOp::Unshare));
        assert_eq!(req(MemOp::Unshare, [0x40_0123, 2, 0]), None, "cached is a flag");
        assert_eq!(req(MemOp::Unshare, [WINDOW + 8, 0, 0]), None);
        let unknown = BootBlock { op: 99, args: [0x40_0000, 0x1000, 3], ..BootBlock::default() };
        assert_eq!(unknown.mem_op(), None);
        assert_eq!(heap_for(0), 128 << 20);
        assert_eq!(heap_for(25 << 20), 328 << 20);
        assert_eq!(heap_for(u64::MAX), HEAP_MAX);
        let fork = |count: u64, output_cap: u64| {
            BootBlock { op: MemOp::ForkSpace.code(), args: [count, 0, 0], output_cap, ..BootBlock::default() }.mem_op()
        };
        assert_eq!(fork(2, 4096), Some(MemOp::ForkSpace));
        assert_eq!(fork(257, 4096), None, "more ranges than the output area holds");
        assert_eq!(fork(MAX_FORK_RANGES + 1, u64::MAX), None, "more ranges than a process has mappings");
        let ranges = [(0x40_0000, 0x40_2000), (0x7000_0000_0000, 0x7000_0001_0000)];
        assert_eq!(fork_ranges(&encode_fork_ranges(&ranges), 2).as_deref(), Some(&ranges[..]));
        assert_eq!(fork_ranges(&encode_fork_ranges(&ranges), 3), None, "fewer words than ranges");
        for bad in [(0x40_0000, 0x40_0000), (0x40_0001, 0x40_2000), (0x40_2000, 0x40_0000), (WINDOW, WINDOW + 0x1000)] {
            assert_eq!(fork_ranges(&encode_fork_ranges(&[bad]), 1), None, "{bad:x?}");
        }
        assert_eq!(fork_ranges(&encode_fork_ranges(&[(0x7fff_ffff_f000, 0x8000_0000_1000)]), 1), None);
        assert!(!reserved(PHYS_WINDOW - 0x1000, 0x1000));
        assert!(reserved(WINDOW + WINDOW_LEN - 1, 1));
        assert!(!reserved(WINDOW + WINDOW_LEN, 0x1000));
    }

    #[test]
    fn translation_walks_four_levels_and_large_pages() {
        use alloc::collections::BTreeMap;
        // PML4 at 0x1000 → PDPT at 0x2000 → PD at 0x3000 → PT at 0x4000 → frame 0x9000 for
        // 0x40_0000; PD entry 3 is a 2 MiB page at 0x20_0000.
        let mut ram = BTreeMap::new();
        ram.insert(0x1000u64, 0x2000u64 | 7);
        ram.insert(0x2000, 0x3000 | 7);
        ram.insert(0x3000 + 2 * 8, 0x4000 | 7);
        ram.insert(0x4000, 0x9000 | 7 | PTE_COW);
        ram.insert(0x3000 + 3 * 8, 0x20_0000 | 7 | (1 << 7));
        let read = |gpa: u64| Some(*ram.get(&gpa).unwrap_or(&0));
        assert_eq!(translate(read, 0x1000, 0x40_0123), Some((0x9123, 0x9000 | 7 | PTE_COW)));
        assert_eq!(translate(read, 0x1000, 0x60_0042).map(|t| t.0), Some(0x20_0042));
        assert_eq!(translate(read, 0x1000, 0x40_1000), None, "absent leaf");
        assert_eq!(translate(read, 0x1000, 1 << 39), None, "absent PML4 entry");
        assert_eq!(translate(|_| None, 0x1000, 0x40_0000), None, "tables outside RAM");
        assert_eq!(translate(read, 0x1000, crate::mm::user_layout::USER_END), None, "not a user address");
    }

    #[test]
    fn the_window_parts_are_in_order_and_inside_user_space() {
        assert_eq!(WINDOW + WINDOW_LEN, crate::mm::user_layout::RESERVED_END);
        assert_eq!(WINDOW, 0x7f00_0000_0000);
        assert!(reserved(PHYS_WINDOW, 1) && crate::mm::user_layout::reserved(PHYS_WINDOW, PHYS_WINDOW + 1));
        assert_eq!(part_of(WINDOW), Some("the boot block"));
        assert_eq!(part_of(STACK_TOP - 8), Some("the kernel's stack"));
        assert_eq!(part_of(IMAGE_BASE), Some("the kernel image"));
        assert_eq!(part_of(HEAP + HEAP_MAX - 1), Some("the kernel's heap"));
        assert_eq!(part_of(WINDOW + WINDOW_LEN - 1), Some("the transfer area"));
        assert_eq!(part_of(WINDOW + WINDOW_LEN), None);
        assert_eq!(part_of(WINDOW - 1), None);
        assert_eq!(output_cap_for(10), 1 << 20);
        assert_eq!(output_cap_for(3 << 20), 6 << 20);
    }
}
