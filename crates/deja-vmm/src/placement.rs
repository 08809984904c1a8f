//! The guest placement's monitor side, as far as it is built: the kernel image
//! (`deja-guestkernel`) booted in a VM's window with a saved kernel as its input, then a ring-3
//! program whose `syscall`s land, through `LSTAR`, in that kernel, which serves them in the guest
//! without a VM exit and calls the host only when the program is over (docs/ARCHITECTURE.md,
//! "The kernel inside the VM", stage 2).
//!
//! [`run_raw`] runs raw machine code this way: what the placement's tests and `deja bench` use
//! to show that the state crosses into the guest and back whole, that the same syscalls give the
//! same state in both placements, and what a syscall costs when it stays in the guest.

use std::time::Instant;

use deja_kernel::placement::decode_output;
use deja_kernel::placement::image::{Image, ImageError};
use deja_kernel::placement::{output_cap_for, BootBlock, Failure, Request, BOOT_BLOCK, BOOT_BLOCK_LEN, STACK_TOP};
use deja_kernel::{Kernel, ProgramSpec, Stream};
use snafu::{ResultExt as _, Snafu};

use crate::session::BootOptions;
use crate::vm::{CpuSetup, GuestStop, Vm, VmError};

/// Most bytes one hand-over may carry in pieces.
const TRANSFER_LIMIT: u64 = 4 << 30;

/// Where [`run_raw`] maps the program's code.
pub const CODE_VA: u64 = 0x40_0000;
/// Where [`run_raw`] maps the program's one data page; its stack is the page's upper half.
pub const DATA_VA: u64 = 0x60_0000;

/// Why a run in the guest placement did not finish.
#[derive(Debug, Snafu)]
pub enum PlacementError {
    /// The kernel image cannot be mapped.
    #[snafu(display("{source}"))]
    BadImage {
        /// What is wrong with it.
        source: ImageError,
    },
    /// The VM failed, or the guest stopped anywhere but at the kernel's host call.
    #[snafu(display("{source}"))]
    Machine {
        /// The VM's error.
        source: VmError,
    },
    /// The kernel in the guest stopped with a failure.
    #[snafu(display("the kernel in the guest stopped after {served} syscalls: {}{detail}", why.describe()))]
    Failed {
        /// Why.
        why: Failure,
        /// Syscalls it served before.
        served: u64,
        /// What it was doing, when it said.
        detail: String,
    },
    /// The boot block after a host call is not what the contract says.
    #[snafu(display("the kernel in the guest broke the boot contract: {what}"))]
    Contract {
        /// What was wrong.
        what: String,
    },
}

/// What a run in the guest placement gives back.
#[derive(Debug, Clone)]
pub struct GuestRun {
    /// The kernel's state as the image saved it right after restoring the input.
    pub booted: Vec<u8>,
    /// The kernel's state when the program exited.
    pub finished: Vec<u8>,
    /// Syscalls the kernel served in the guest.
    pub served: u64,
    /// VM exits from the program's first instruction to the kernel's last host call.
    pub program_exits: u64,
    /// Wall time of the same span, in nanoseconds.
    pub program_ns: u64,
    /// Wall time of the boot (mapping the window, restoring the kernel), in nanoseconds.
    pub boot_ns: u64,
    /// The program's data page at its end.
    pub data: Vec<u8>,
}

/// Boots `image` (the ELF of `deja-guestkernel`) with `kernel` (`Kernel::save` bytes) as its
/// input and `heap` bytes of heap, then runs `code` in ring 3 at [`CODE_VA`] with a data page at
/// [`DATA_VA`] and its stack below the page's end, every `syscall` served by the kernel in the
/// guest, until the program exits.
pub fn run_raw(image: &[u8], kernel: &[u8], code: &[u8], heap: u64) -> Result<GuestRun, PlacementError> {
    run_raw_with_output(image, kernel, code, heap, output_cap_for(kernel.len() as u64))
}

/// [`run_raw`] with an output area of `output_cap` bytes (page aligned, at least a page): a
/// state larger than it is handed over in pieces.
pub fn run_raw_with_output(
    image: &[u8],
    kernel: &[u8],
    code: &[u8],
    heap: u64,
    output_cap: u64,
) -> Result<GuestRun, PlacementError> {
    let image = Image::parse(image).context(BadImageSnafu)?;
    let block = BootBlock::for_input(heap, kernel.len() as u64, output_cap.max(4096).next_multiple_of(4096));
    let memory = heap + image.bytes.len() as u64 + 2 * kernel.len() as u64 + block.output_cap + (64 << 20);
    let started = Instant::now();
    let mut vm = Vm::with_setup(memory.next_multiple_of(2 << 20), CpuSetup { faulting: false, pin: None })
        .context(MachineSnafu)?;
    vm.map_window(&image, &block, kernel).context(MachineSnafu)?;
    vm.load_raw(CODE_VA, code, DATA_VA).context(MachineSnafu)?;
    vm.refresh_boot_block(0).context(MachineSnafu)?;
    vm.enter_user(image.boot, STACK_TOP, 0).context(MachineSnafu)?;
    let (booted_block, booted) = to_request(&mut vm, &image, Request::Booted, &mut |_, _| {})?;
    if booted_block.served != 0 {
        return ContractSnafu { what: format!("{} syscalls served before the program ran", booted_block.served) }
            .fail();
    }
    let boot_ns = started.elapsed().as_nanos() as u64;

    vm.set_entries(image.syscall_entry, image.jump_entry).context(MachineSnafu)?;
    vm.enter_user(CODE_VA, DATA_VA + 0x800, 0).context(MachineSnafu)?;
    let exits = vm.stats.exits;
    let started = Instant::now();
    let (done, finished) = to_request(&mut vm, &image, Request::Done, &mut |_, _| {})?;
    let program_ns = started.elapsed().as_nanos() as u64;
    let program_exits = vm.stats.exits - exits;
    let mut data = vec![0u8; 0x800];
    vm.read_user(DATA_VA, &mut data);
    Ok(GuestRun { booted, finished, served: done.served, program_exits, program_ns, boot_ns, data })
}

/// Runs the guest until the kernel makes host call `expected`, serving its page operations on
/// the way; returns the boot block and the output then.
fn to_request(
    vm: &mut Vm,
    image: &Image,
    expected: Request,
    sink: &mut dyn FnMut(Stream, &[u8]),
) -> Result<(BootBlock, Vec<u8>), PlacementError> {
    // The same fault at the same place, over and over: the kernel's page did not help.
    let mut repeats = (0u64, 0u64, 0u32);
    // Pieces of what the next hand-over carries ([`Request::Part`]).
    let mut parts: Vec<u8> = Vec::new();
    loop {
        if let GuestStop::Exception(frame) = vm.run_to_hostcall(image.hostcall).context(MachineSnafu)? {
            let key = (frame.rip, frame.addr);
            repeats = if (repeats.0, repeats.1) == key { (key.0, key.1, repeats.2 + 1) } else { (key.0, key.1, 0) };
            if repeats.2 > 16 {
                let what = format!(
                    "exception {} at {:#x} keeps recurring after the kernel served it",
                    frame.vector, frame.addr
                );
                return Err(PlacementError::Machine { source: VmError::Unexpected { what, rip: frame.rip } });
            }
            vm.enter_exception(image.exception_entry, &frame).context(MachineSnafu)?;
            continue;
        }
        vm.stats.host_calls += 1;
        let bytes = vm.read_window(BOOT_BLOCK, BOOT_BLOCK_LEN as u64).context(MachineSnafu)?;
        let block = BootBlock::decode(&bytes);
        match block.and_then(|b| Request::from_code(b.request)) {
            Some(Request::Memory) => {
                vm.serve_memory_request().context(MachineSnafu)?;
            }
            Some(Request::Bases) => {
                let [fs, gs, _] = block.map(|b| b.args).unwrap_or_default();
                vm.set_bases(fs, gs).context(MachineSnafu)?;
            }
            Some(Request::ExceptionServed) => {
                vm.leave_exception().context(MachineSnafu)?;
                continue;
            }
            Some(Request::Part) => {
                let (_, bytes) = answer(vm, Request::Part)?;
                parts.extend_from_slice(&bytes);
                if parts.len() as u64 > TRANSFER_LIMIT {
                    return ContractSnafu { what: "more than 4 GiB handed over at once" }.fail();
                }
                vm.refresh_boot_block(0).context(MachineSnafu)?;
            }
            Some(Request::Output) => {
                let (_, bytes) = answer(vm, Request::Output)?;
                parts.extend_from_slice(&bytes);
                let records = decode_output(&std::mem::take(&mut parts))
                    .ok_or_else(|| PlacementError::Contract { what: "damaged output records".into() })?;
                for (stream, bytes) in records {
                    sink(stream, &bytes);
                }
                vm.refresh_boot_block(0).context(MachineSnafu)?;
            }
            _ => {
                let (block, bytes) = answer(vm, expected)?;
                parts.extend_from_slice(&bytes);
                return Ok((block, parts));
            }
        }
        vm.return_from_hostcall().context(MachineSnafu)?;
    }
}

/// What [`run_program`] gives back: the run in the guest, and the kernel it ended with, back on
/// the host (its report, output and digest are the host placement's kind).
#[derive(Debug)]
pub struct ProgramRun {
    /// The run's figures.
    pub run: GuestRun,
    /// The kernel restored from its state at the program's end.
    pub kernel: Kernel,
    /// The VM, for the report's reads of guest memory.
    pub vm: Vm,
}

/// Boots `spec` as `deja run` does ([`crate::session::boot`]: the program loaded into the VM's
/// memory by the host's kernel), then hands the kernel to the image (`heap` bytes of heap, or
/// more for a large state: `deja_kernel::placement::heap_for`) and
/// runs the program with every `syscall` served in the guest until it exits. What it writes to
/// its standard streams goes to `sink` as it is written.
pub fn run_program(
    image: &[u8],
    spec: &ProgramSpec,
    memory: u64,
    heap: u64,
    opts: BootOptions,
    sink: &mut dyn FnMut(Stream, &[u8]),
) -> Result<ProgramRun, PlacementError> {
    let image = Image::parse(image).context(BadImageSnafu)?;
    let started = Instant::now();
    let (mut vm, kernel) = crate::session::boot(spec, memory, opts)
        .map_err(|e| PlacementError::Contract { what: format!("the program did not boot: {e}") })?;
    let entry = kernel.entry();
    let state = kernel.save();
    drop(kernel);
    let heap = heap.max(deja_kernel::placement::heap_for(state.len() as u64));
    let block = BootBlock::for_input(heap, state.len() as u64, output_cap_for(state.len() as u64));
    vm.map_window(&image, &block, &state).context(MachineSnafu)?;
    vm.refresh_boot_block(0).context(MachineSnafu)?;
    vm.enter_user(image.boot, STACK_TOP, 0).context(MachineSnafu)?;
    let (_, booted) = to_request(&mut vm, &image, Request::Booted, sink)?;
    let boot_ns = started.elapsed().as_nanos() as u64;
    vm.set_entries(image.syscall_entry, image.jump_entry).context(MachineSnafu)?;
    vm.enter_user(entry.rip, entry.rsp, 0).context(MachineSnafu)?;
    let exits = vm.stats.exits;
    let started = Instant::now();
    let (done, finished) = to_request(&mut vm, &image, Request::Done, sink)?;
    let program_ns = started.elapsed().as_nanos() as u64;
    let program_exits = vm.stats.exits - exits;
    let kernel = Kernel::restore(&finished)
        .map_err(|e| PlacementError::Contract { what: format!("the kernel's final state does not restore: {e}") })?;
    let run = GuestRun { booted, finished, served: done.served, program_exits, program_ns, boot_ns, data: Vec::new() };
    Ok(ProgramRun { run, kernel, vm })
}

/// Reads the boot block after a host call: the kernel's output when it made `expected`, its
/// failure when it failed, a broken contract otherwise.
fn answer(vm: &Vm, expected: Request) -> Result<(BootBlock, Vec<u8>), PlacementError> {
    let bytes = vm.read_window(BOOT_BLOCK, BOOT_BLOCK_LEN as u64).context(MachineSnafu)?;
    let Some(block) = BootBlock::decode(&bytes) else {
        return ContractSnafu { what: "the boot block is damaged" }.fail();
    };
    match Request::from_code(block.request) {
        Some(r) if r == expected => {}
        Some(Request::Failed) => {
            let why = Failure::from_code(block.status)
                .ok_or_else(|| PlacementError::Contract { what: format!("failure code {}", block.status) })?;
            let detail = match why {
                Failure::NeedsMemory => {
                    let [nr, method, _] = block.args;
                    let method = deja_kernel::placement::MEMORY_METHODS.get(method as usize).copied().unwrap_or("?");
                    match nr {
                        u64::MAX => format!(" (an exception needed {method})"),
                        nr => format!(" ({} needed {method})", deja_kernel::syscalls::display_name(nr)),
                    }
                }
                Failure::Outcome => {
                    let [nr, what, _] = block.args;
                    let what = deja_kernel::placement::OUTCOMES.get(what as usize).copied().unwrap_or("?");
                    match nr {
                        u64::MAX => format!(" (an exception came to {what})"),
                        nr => format!(" ({} came to {what})", deja_kernel::syscalls::display_name(nr)),
                    }
                }
                Failure::Panic => {
                    let said = vm.read_window(block.output_at(), block.output_len.min(512)).unwrap_or_default();
                    format!(": {}", String::from_utf8_lossy(&said))
                }
                _ => String::new(),
            };
            return FailedSnafu { why, served: block.served, detail }.fail();
        }
        other => return ContractSnafu { what: format!("expected {expected:?}, the kernel made {other:?}") }.fail(),
    }
    let output = vm.read_window(block.output_at(), block.output_len).context(MachineSnafu)?;
    Ok((block, output))
}

/// Values [`syscall_loop`] puts in registers a syscall must keep and takes no argument from, in
/// the order it stores them after its last call (R12, R13, R14, R15, RBP).
pub const KEPT: [u64; 5] =
    [0x1212_1212_1212_1212, 0x1313_1313_1313_1313, 0x1414_1414_1414_1414, 0x1515_1515_1515_1515, 0xbbbb_0000_bbbb_0000];

/// Raw code for [`run_raw`]: `count` (at least 1) calls of syscall `nr` with `args` (RDI, RSI,
/// RDX, R10, R8, R9) in a loop, then `exit_group(status)`. After the loop it stores in the data
/// page, as little-endian words: the last call's result (offset 0), the registers of [`KEPT`]
/// (offsets 8 to 40), the six argument registers (48 to 88), RSP (96) and RCX (104, the address
/// after the last `syscall`, as the instruction leaves it); [`LOOP_RETURN`] is that address's
/// offset in the code.
pub fn syscall_loop(nr: u32, args: [u64; 6], count: u32, status: u32) -> Vec<u8> {
    let mut c = vec![0xbb];
    c.extend_from_slice(&count.max(1).to_le_bytes());
    let kept = [(0x49, 0xbc), (0x49, 0xbd), (0x49, 0xbe), (0x49, 0xbf), (0x48, 0xbd)];
    let argregs = [(0x48, 0xbf), (0x48, 0xbe), (0x48, 0xba), (0x49, 0xba), (0x49, 0xb8), (0x49, 0xb9)];
    for ((prefix, op), value) in kept.iter().zip(KEPT).chain(argregs.iter().zip(args)) {
        c.extend_from_slice(&[*prefix, *op]);
        c.extend_from_slice(&value.to_le_bytes());
    }
    let store = |c: &mut Vec<u8>, rex: u8, modrm: u8, off: u32| {
        c.extend_from_slice(&[rex, 0x89, modrm, 0x25]);
        c.extend_from_slice(&(DATA_VA as u32 + off).to_le_bytes());
    };
    let top = c.len();
    c.push(0xb8);
    c.extend_from_slice(&nr.to_le_bytes());
    c.extend_from_slice(&[0x0f, 0x05]);
    debug_assert_eq!(c.len() as u64, LOOP_RETURN);
    store(&mut c, 0x48, 0x04, 0);
    c.extend_from_slice(&[0xff, 0xcb, 0x75]);
    c.push((top as i64 - (c.len() as i64 + 1)) as u8);
    // R12-R15, RBP; RDI, RSI, RDX, R10, R8, R9; RSP, RCX.
    let stores = [
        (0x4c, 0x24),
        (0x4c, 0x2c),
        (0x4c, 0x34),
        (0x4c, 0x3c),
        (0x48, 0x2c),
        (0x48, 0x3c),
        (0x48, 0x34),
        (0x48, 0x14),
        (0x4c, 0x14),
        (0x4c, 0x04),
        (0x4c, 0x0c),
        (0x48, 0x24),
        (0x48, 0x0c),
    ];
    for (i, (rex, modrm)) in stores.into_iter().enumerate() {
        store(&mut c, rex, modrm, 8 * (i as u32 + 1));
    }
    c.push(0xb8);
    c.extend_from_slice(&231u32.to_le_bytes());
    c.push(0xbf);
    c.extend_from_slice(&status.to_le_bytes());
    c.extend_from_slice(&[0x0f, 0x05, 0x0f, 0x0b]);
    c
}

/// Offset in [`syscall_loop`]'s code of the instruction after the loop's `syscall`.
pub const LOOP_RETURN: u64 = 5 + 11 * 10 + 7;
