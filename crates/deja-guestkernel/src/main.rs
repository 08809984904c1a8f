//! deja's kernel model in the guest placement: a freestanding image for `x86_64-unknown-none`
//! that the monitor maps into the reserved window of the VM (`deja_kernel::placement`), where it
//! serves the program's syscalls without leaving the guest.
//!
//! The monitor enters [`boot`] (`deja_boot`) in ring 3 with RSP at the window's stack. The kernel
//! takes its heap, restores the `Kernel` the monitor saved into the transfer area, writes its
//! own save back (so the monitor can check the state crossed whole) and calls the host with
//! `Booted`. The monitor then points `LSTAR` at `deja_syscall_entry` and runs the program: each
//! `syscall` lands there (in ring 3 on hosts whose guest ring 0 is emulated, as on deja's own),
//! switches to the kernel's stack, saves the registers, and [`serve`] hands the call to
//! `Kernel::syscall`, then returns to the instruction after the `syscall` as `sysret` would
//! (RCX the return address, R11 the flags). When the program exits the kernel saves its state to
//! the output and calls the host with `Done`; anything it cannot serve yet ends the run with
//! `Failed` and a [`Failure`] code.
//!
//! The program's bytes are reached through its page tables and the physical window
//! ([`GuestMemory`]); page operations and address spaces (a process's `fork`, `execve`, the
//! switch between processes) are host calls. Threads, signals and the exceptions the monitor
//! hands over are served here as the host placement's monitor serves them. A call this stage
//! cannot serve the way the host placement does (an injected crash, a cluster node with nothing
//! to run) ends the run with a [`Failure`] rather than answer differently (docs/ARCHITECTURE.md,
//! "The kernel inside the VM").
//!
//! The only `unsafe` here makes slices of the window's fixed addresses and hands the heap to the
//! allocator; it runs inside the VM, which is the boundary that protects the host.

#![no_std]
#![no_main]

extern crate alloc;

use alloc::boxed::Box;
use alloc::collections::BTreeMap;
use core::sync::atomic::{AtomicU64, Ordering};

use deja_kernel::mm::mem::{MemError, Memory, Prot};
use deja_kernel::placement::{
    self, mem_status, BootBlock, ExcFrame, Failure, MemOp, Request, BOOT_BLOCK, HEAP, TRANSFER,
};
use deja_kernel::{ExceptionOutcome, Kernel, SyscallOutcome, UserContext, ARITH_FLAGS, FPU_BYTES};
use linked_list_allocator::LockedHeap;
use spin::Mutex;

#[global_allocator]
static ALLOCATOR: LockedHeap = LockedHeap::empty();

/// The kernel, once restored.
static KERNEL: Mutex<Option<Kernel>> = Mutex::new(None);
/// The threads that do not run, by thread id: what the host placement's monitor keeps for them
/// (their registers, their extended state), here in the guest.
static THREADS: Mutex<BTreeMap<u64, Context>> = Mutex::new(BTreeMap::new());

/// A thread's saved registers: its syscall frame and its x87/SSE/AVX state.
struct Context {
    frame: Frame,
    xsave: Box<Xsave>,
}

/// Bytes of an [`Xsave`] area. The guest's XCR0 is deja's (x87, SSE, AVX: 832 bytes) only where
/// the host honours `KVM_SET_XCRS`; on a host that runs the guest under its own XCR0 (as
/// `kvm_pvm` does: `0x600e7` on an Intel host with AVX-512 and AMX, 11,008 bytes in the
/// standard form) `xsave64` writes every component that XCR0 enables, so the area holds the
/// largest standard-form image of the components x86 defines today (AMX's tile data ends at
/// 11,008). [`boot`] refuses a host whose XCR0 enables a component past those.
const XSAVE_BYTES: usize = 16 << 10;

/// The XCR0 bits whose standard-form images end within [`XSAVE_BYTES`]: x87 through AMX's tile
/// data (bit 18).
const XCR0_KNOWN: u64 = (1 << 19) - 1;

/// An XSAVE area, 64-byte aligned as the instruction needs.
#[repr(C, align(64))]
struct Xsave([u8; XSAVE_BYTES]);

impl Xsave {
    /// The extended state now (every component XCR0 enables); the kernel, built without SSE or
    /// x87 code, never changes it, so it is the program's.
    fn now() -> Box<Xsave> {
        let mut area = Box::new(Xsave([0; XSAVE_BYTES]));
        // SAFETY: XSAVE writes at most the enabled components' size (under 4 KiB for every XCR0
        // deja sets) into the 64-byte-aligned area it owns; CR4.OSXSAVE is set for the
        // program's own use of AVX; it touches no register.
        unsafe {
            core::arch::asm!("xsave64 [{}]", in(reg) area.0.as_mut_ptr(), in("eax") u32::MAX, in("edx") u32::MAX,
                options(nostack))
        };
        area
    }

    /// The state a program starts with: every component in its initial configuration (an
    /// empty header), the x87 control word and MXCSR at their reset values.
    fn initial() -> Box<Xsave> {
        let mut area = Box::new(Xsave([0; XSAVE_BYTES]));
        area.0[..2].copy_from_slice(&0x037f_u16.to_le_bytes());
        area.0[24..28].copy_from_slice(&0x1f80_u32.to_le_bytes());
        area
    }

    /// Loads this state into the registers.
    fn load(&self) {
        // SAFETY: the area was written by `now` (a valid XSAVE image with its header); XRSTOR
        // changes only the x87/SSE/AVX registers, which the kernel never uses.
        unsafe {
            core::arch::asm!("xrstor64 [{}]", in(reg) self.0.as_ptr(), in("eax") u32::MAX, in("edx") u32::MAX,
                options(nostack, readonly))
        };
    }
}
/// Syscalls served so far.
static SERVED: AtomicU64 = AtomicU64::new(0);
/// The program's RSP while its syscall is served (the entry's scratch word).
#[no_mangle]
static DEJA_USER_RSP: AtomicU64 = AtomicU64::new(0);
/// Where the program resumes, for the return's last jump (the return's scratch word).
#[no_mangle]
static DEJA_RETURN_RIP: AtomicU64 = AtomicU64::new(0);

core::arch::global_asm!(
    // The linker's entry, so that what the boot reaches is kept.
    ".globl _start",
    ".globl deja_boot",
    "_start:",
    "deja_boot:",
    "    cld",
    "    and rsp, -16",
    "    call {boot}",
    "    ud2",
    "",
    ".globl deja_exception_entry",
    "deja_exception_entry:",
    "    cld",
    "    and rsp, -16",
    "    call {exception}",
    "    ud2",
    "",
    ".globl deja_hostcall",
    "deja_hostcall:",
    "    out 0xde, al",
    "    ret",
    "",
    // A planned site's jump, through its trampoline (RCX: the address after its `syscall`)
    // and the gate: RFLAGS into R11 as the instruction would (neither `mov` changes a flag),
    // then as a `syscall`.
    ".globl deja_jump_entry",
    "deja_jump_entry:",
    "    mov [rip + {user_rsp}], rsp",
    "    movabs rsp, {stack_top}",
    "    push qword ptr [rip + {user_rsp}]",
    "    pushfq",
    "    pop r11",
    "    push r11",
    "    jmp 2f",
    // The program's registers, pushed in the reverse of `Frame`'s field order: its RSP, the
    // RFLAGS and RIP it resumes with (as the `syscall` left them in R11 and RCX), then the
    // general registers.
    ".globl deja_syscall_entry",
    "deja_syscall_entry:",
    "    mov [rip + {user_rsp}], rsp",
    "    movabs rsp, {stack_top}",
    "    push qword ptr [rip + {user_rsp}]",
    "    push r11",
    "2:",
    "    push rcx",
    "    push r11",
    "    push rcx",
    "    push rax",
    "    push rdi",
    "    push rsi",
    "    push rdx",
    "    push r10",
    "    push r8",
    "    push r9",
    "    push rbx",
    "    push rbp",
    "    push r12",
    "    push r13",
    "    push r14",
    "    push r15",
    "    cld",
    "    mov rdi, rsp",
    "    call {serve}",
    // Back to the frame as `serve` left it, every register its own: RIP through a word of the
    // kernel's (no register is free), then the general registers, RFLAGS, the stack; nothing
    // after `popfq` changes a flag.
    "    mov rax, [rsp + 15 * 8]",
    "    mov [rip + {return_rip}], rax",
    "    pop r15",
    "    pop r14",
    "    pop r13",
    "    pop r12",
    "    pop rbp",
    "    pop rbx",
    "    pop r9",
    "    pop r8",
    "    pop r10",
    "    pop rdx",
    "    pop rsi",
    "    pop rdi",
    "    pop rax",
    "    pop rcx",
    "    pop r11",
    "    lea rsp, [rsp + 8]",
    "    popfq",
    "    pop rsp",
    "    jmp qword ptr [rip + {return_rip}]",
    boot = sym boot,
    serve = sym serve,
    exception = sym exception,
    user_rsp = sym DEJA_USER_RSP,
    return_rip = sym DEJA_RETURN_RIP,
    stack_top = const placement::STACK_TOP,
);

extern "C" {
    /// The host call: one `out` to deja's port, at the address the monitor knows by its symbol.
    fn deja_hostcall();
}

/// The program's registers at its `syscall`, as the entry pushed them. A thread that does not
/// run keeps its frame as it was when it last made (or, new, returned from) a syscall: RCX and
/// R11 hold where it resumes and its RFLAGS, as the `syscall` instruction left them.
#[repr(C)]
#[derive(Clone, Copy)]
struct Frame {
    r15: u64,
    r14: u64,
    r13: u64,
    r12: u64,
    rbp: u64,
    rbx: u64,
    r9: u64,
    r8: u64,
    r10: u64,
    rdx: u64,
    rsi: u64,
    rdi: u64,
    rax: u64,
    rcx: u64,
    r11: u64,
    /// Where the program resumes (after a syscall: RCX).
    rip: u64,
    /// The RFLAGS it resumes with (after a syscall: R11).
    rflags: u64,
    rsp: u64,
}

impl Frame {
    /// The general registers in x86 encoding order (`UserContext::gprs`).
    fn gprs(&self) -> [u64; 16] {
        let f = self;
        [f.rax, f.rcx, f.rdx, f.rbx, f.rsp, f.rbp, f.rsi, f.rdi, f.r8, f.r9, f.r10, f.r11, f.r12, f.r13, f.r14, f.r15]
    }

    /// A frame holding `gprs` (in x86 encoding order, RSP among them), resuming at `rip` with
    /// `rflags`.
    fn from_context(gprs: &[u64; 16], rip: u64, rflags: u64) -> Frame {
        let [rax, rcx, rdx, rbx, rsp, rbp, rsi, rdi, r8, r9, r10, r11, r12, r13, r14, r15] = *gprs;
        Frame { r15, r14, r13, r12, rbp, rbx, r9, r8, r10, rdx, rsi, rdi, rax, rcx, r11, rip, rflags, rsp }
    }

    /// Every register of `ctx`: the program resumes in that context.
    fn install(&mut self, ctx: &UserContext) {
        let g = ctx.gprs;
        [
            self.rax, self.rcx, self.rdx, self.rbx, self.rsp, self.rbp, self.rsi, self.rdi, self.r8, self.r9, self.r10,
            self.r11, self.r12, self.r13, self.r14, self.r15,
        ] = g;
        self.rip = ctx.rip;
        self.rflags = ctx.rflags;
    }
}

/// The boot block's page.
fn boot_page() -> &'static mut [u8] {
    // SAFETY: the monitor maps the boot block's page read-write at `BOOT_BLOCK` before it enters
    // the image, and only this single-threaded kernel touches it while the guest runs; each use
    // takes the slice anew and drops it before the next.
    unsafe { core::slice::from_raw_parts_mut(BOOT_BLOCK as *mut u8, placement::BOOT_BLOCK_LEN) }
}

/// Writes the answers into the boot block and calls the host.
fn hostcall(request: Request, status: u64, output_len: u64) {
    let page = boot_page();
    let mut block = BootBlock::decode(page).unwrap_or_default();
    block.request = request.code();
    block.status = status;
    block.served = SERVED.load(Ordering::Relaxed);
    block.output_len = output_len;
    page.copy_from_slice(&block.encode());
    // SAFETY: `deja_hostcall` is the `out; ret` above; the port is deja's, opened to ring 3 by
    // the TSS's I/O bitmap, and the monitor resumes after it or ends the run.
    unsafe { deja_hostcall() }
}

/// Ends the run because call `nr` (`u64::MAX`: an exception) came to what this stage does not
/// do yet ([`placement::OUTCOMES`]`[what]`).
fn not_yet(nr: u64, what: u64) -> ! {
    let page = boot_page();
    let mut block = BootBlock::decode(page).unwrap_or_default();
    block.args = [nr, what, 0];
    page.copy_from_slice(&block.encode());
    fail(Failure::Outcome)
}

/// Ends the run with a failure; the monitor never resumes a failed kernel.
fn fail(why: Failure) -> ! {
    loop {
        hostcall(Request::Failed, why.code(), 0);
    }
}

/// Writes `bytes` (the kernel's saved state, or output records) to the output area and calls the
/// host with `request`; what does not fit goes first in pieces ([`Request::Part`]).
fn hand_over(request: Request, bytes: &[u8]) {
    let Some(block) = BootBlock::decode(boot_page()) else { fail(Failure::BadBootBlock) };
    let cap = block.output_cap as usize;
    if cap == 0 {
        fail(Failure::OutputFull);
    }
    let mut pieces = bytes.chunks(cap).peekable();
    if pieces.peek().is_none() {
        hostcall(request, 0, 0);
        return;
    }
    while let Some(piece) = pieces.next() {
        // SAFETY: the monitor maps `output_cap` bytes read-write at `output_at()`, inside the
        // transfer area (`BootBlock::decode` checked they fit), and nothing else uses them now.
        let out = unsafe { core::slice::from_raw_parts_mut(block.output_at() as *mut u8, piece.len()) };
        out.copy_from_slice(piece);
        let now = if pieces.peek().is_some() { Request::Part } else { request };
        hostcall(now, 0, piece.len() as u64);
    }
}

/// XCR0 as the CPU applies it to this ring-3 code.
fn xcr0() -> u64 {
    let (lo, hi): (u32, u32);
    // SAFETY: `xgetbv` with ECX 0 reads XCR0; CR4.OSXSAVE is set for the program's AVX, so it
    // does not fault, and it changes nothing.
    unsafe { core::arch::asm!("xgetbv", in("ecx") 0u32, out("eax") lo, out("edx") hi, options(nomem, nostack)) };
    (u64::from(hi) << 32) | u64::from(lo)
}

/// The boot entry: heap, the kernel from the input, its save to the output, `Booted`.
extern "C" fn boot() -> ! {
    let Some(block) = BootBlock::decode(boot_page()) else { fail(Failure::BadBootBlock) };
    let x = xcr0();
    if x & !XCR0_KNOWN != 0 {
        panic!("this host runs the guest with XCR0 {x:#x}, whose XSAVE image may not fit the kernel's {XSAVE_BYTES}-byte areas");
    }
    // SAFETY: the monitor maps `heap_len` bytes read-write at `HEAP` for the allocator alone
    // (`BootBlock::decode` checked they fit the window's heap part); this runs once.
    unsafe { ALLOCATOR.lock().init(HEAP as *mut u8, block.heap_len as usize) };
    // SAFETY: the monitor wrote `input_len` bytes at `TRANSFER` (checked as above); they are
    // only read, and only here.
    let input = unsafe { core::slice::from_raw_parts(TRANSFER as *const u8, block.input_len as usize) };
    let Ok(kernel) = Kernel::restore(input) else { fail(Failure::Restore) };
    let state = kernel.save();
    *KERNEL.lock() = Some(kernel);
    hand_over(Request::Booted, &state);
    // The monitor runs the program after `Booted`; coming back here is a broken contract.
    fail(Failure::BadBootBlock)
}

/// Serves the syscall in `frame` (`deja_syscall_entry` calls it on the kernel's stack), then
/// does what the monitor does on a syscall's way back to ring 3 in the host placement
/// (`Vm::finish_syscall`, then the signal check), in the same order, so that both placements
/// leave the kernel in the same state.
extern "C" fn serve(frame: &mut Frame) {
    let mut mem = GuestMemory::from_block();
    let nr = frame.rax;
    let args = [frame.rdi, frame.rsi, frame.rdx, frame.r10, frame.r8, frame.r9];
    let mut guard = KERNEL.lock();
    let Some(kernel) = guard.as_mut() else { fail(Failure::BadBootBlock) };
    let tid = kernel.current_tid();
    // The bases the registers hold: the running thread's.
    let mut loaded = (kernel.fs_base(), kernel.gs_base());
    kernel.set_user_sp(frame.rsp);
    let outcome = kernel.syscall(&mut mem, nr, args);
    mem.check(nr);
    pass_output(kernel);
    let served = SERVED.fetch_add(1, Ordering::Relaxed) + 1;
    // The monitor's watchdog reads it: serving syscalls without an exit is progress.
    boot_page()[placement::SERVED_AT..placement::SERVED_AT + 8].copy_from_slice(&served.to_le_bytes());
    match outcome {
        SyscallOutcome::Return(value) => {
            frame.rax = value;
            if let Some(entry) = kernel.take_exec() {
                start_program(frame, entry);
            }
            switch_threads(kernel, frame, tid);
            kernel.before_run(&mut mem);
            mem.check(nr);
            load_bases(kernel, &mut loaded);
        }
        SyscallOutcome::Resume(ctx) => {
            // `rt_sigreturn`: the context the handler's frame held, every register its own.
            install(frame, &ctx);
            load_bases(kernel, &mut loaded);
        }
        SyscallOutcome::Exit(_) => end(guard),
        SyscallOutcome::Crash => not_yet(nr, 4),
        SyscallOutcome::Idle => not_yet(nr, 5),
    }
    if take_signal(kernel, &mut mem, frame, &mut loaded) {
        end(guard);
    }
    mem.check(nr);
    pass_output(kernel);
}

/// After an `execve`, as the host placement's monitor does: the thread starts the new program
/// with every general register 0, RIP and RSP from `entry`, RFLAGS with IF, and the x87, SSE and
/// AVX state as at boot (the bases follow from the kernel's, which the `execve` cleared).
fn start_program(frame: &mut Frame, entry: deja_kernel::Entry) {
    *frame = Frame::from_context(&[0; 16], entry.rip, RFLAGS_BOOT);
    frame.rsp = entry.rsp;
    Xsave::initial().load();
}

/// RFLAGS a program starts with: IF and the reserved bit 1.
const RFLAGS_BOOT: u64 = 0x202;

/// The running thread's process ended outside a syscall (a fault, or a signal the fault raised),
/// thread `tid` with it: as the host placement's monitor does, the thread the kernel runs next
/// resumes in `exc` (its registers, extended state and bases), after `before_run` and its own
/// signal. True when the program ended.
fn after_process_end(kernel: &mut Kernel, mem: &mut GuestMemory, exc: &mut ExcFrame, tid: u64) -> bool {
    let mut loaded = (u64::MAX, u64::MAX);
    let mut frame = Frame::from_context(&exc.gprs, exc.rip, exc.rflags);
    switch_threads(kernel, &mut frame, tid);
    kernel.before_run(mem);
    load_bases(kernel, &mut loaded);
    if kernel.is_idle() {
        not_yet(u64::MAX, 5);
    }
    let ended = take_signal(kernel, mem, &mut frame, &mut loaded);
    (exc.gprs, exc.rip, exc.rflags) = (frame.gprs(), frame.rip, frame.rflags);
    ended
}

/// The program ended: the kernel's state goes to the monitor, which never resumes it.
fn end(mut guard: spin::MutexGuard<'_, Option<Kernel>>) -> ! {
    let Some(kernel) = guard.as_mut() else { fail(Failure::BadBootBlock) };
    pass_output(kernel);
    let state = kernel.save();
    drop(guard);
    hand_over(Request::Done, &state);
    fail(Failure::Outcome)
}

/// Asks the monitor to load the running thread's FS and GS bases when they are not the ones
/// `loaded`.
fn load_bases(kernel: &Kernel, loaded: &mut (u64, u64)) {
    let now = (kernel.fs_base(), kernel.gs_base());
    if now != *loaded {
        set_bases(now);
        *loaded = now;
    }
}

/// The program resumes in `ctx`: its general registers, RIP and RFLAGS in `frame`, its x87,
/// SSE and AVX state in the registers.
fn install(frame: &mut Frame, ctx: &UserContext) {
    frame.install(ctx);
    load_fpu(&ctx.fpu);
}

/// Loads `fpu` (the first [`FPU_BYTES`] of an XSAVE image, as the kernel validated it) into the
/// x87, SSE and AVX registers.
fn load_fpu(fpu: &[u8]) {
    let mut area = Xsave::now();
    let n = fpu.len().min(FPU_BYTES);
    area.0[..n].copy_from_slice(&fpu[..n]);
    area.load();
}

/// The running thread's context as the kernel's signal delivery takes it.
fn context_of(gprs: [u64; 16], rip: u64, rflags: u64) -> UserContext {
    UserContext { gprs, rip, rflags, fpu: Xsave::now().0[..FPU_BYTES].to_vec() }
}

/// On the way back to the program, as the host placement's monitor does: runs the handler of
/// the signal the running thread has to take, if any (its frame written by the kernel, the
/// thread resuming in the handler). A signal that ends another process's thread moves on to
/// the thread the kernel runs next. True when a signal ended the program.
fn take_signal(kernel: &mut Kernel, mem: &mut GuestMemory, frame: &mut Frame, loaded: &mut (u64, u64)) -> bool {
    loop {
        if !kernel.signal_due() {
            return false;
        }
        let mut ctx = context_of(frame.gprs(), frame.rip, frame.rflags);
        let tid = kernel.current_tid();
        match kernel.deliver_signal(mem, &mut ctx) {
            Ok(Some(_)) => {
                install(frame, &ctx);
                return false;
            }
            Ok(None) if kernel.current_tid() != tid && !kernel.is_idle() => {
                switch_threads(kernel, frame, tid);
                kernel.before_run(mem);
                load_bases(kernel, loaded);
            }
            Ok(None) => return false,
            Err(_) => return true,
        }
    }
}

/// After a syscall of thread `tid` (its frame in `frame`, its return value set), as the host
/// placement's monitor does: creates the threads the kernel spawned (the caller's registers
/// with RAX 0 and their own stack, its extended state; a process started from outside at its
/// program's entry, as [`start_program`] starts one), hands woken threads their return
/// values, and, when the kernel runs another thread next, saves this one and puts the next
/// one's registers in `frame` and its extended state in the registers.
fn switch_threads(kernel: &mut Kernel, frame: &mut Frame, tid: u64) {
    let mut threads = THREADS.lock();
    let spawned = kernel.take_spawned();
    if !spawned.is_empty() {
        let xsave = Xsave::now();
        for t in spawned {
            if let Some(entry) = t.entry {
                let mut f = Frame::from_context(&[0; 16], entry.rip, RFLAGS_BOOT);
                f.rsp = entry.rsp;
                threads.insert(t.tid, Context { frame: f, xsave: Xsave::initial() });
                continue;
            }
            let mut f = *frame;
            f.rax = 0;
            if t.stack != 0 {
                f.rsp = t.stack;
            }
            threads.insert(t.tid, Context { frame: f, xsave: Box::new(Xsave(xsave.0)) });
        }
    }
    for (woken, rax) in kernel.take_wakeup_returns() {
        if woken == tid {
            frame.rax = rax;
        } else if let Some(c) = threads.get_mut(&woken) {
            c.frame.rax = rax;
        }
    }
    let next = kernel.current_tid();
    if next == tid {
        return;
    }
    let Some(ctx) = threads.remove(&next) else {
        panic!("the kernel switched to thread {next}, which was never created")
    };
    threads.insert(tid, Context { frame: *frame, xsave: Xsave::now() });
    ctx.xsave.load();
    *frame = ctx.frame;
}

/// The exception entry: serves the program's exception in the boot block's frame with
/// `Kernel::exception`, applies the outcome to the frame's registers as the host placement's
/// monitor does, and hands the frame back (`ExceptionServed`), or ends the run.
extern "C" fn exception() -> ! {
    // SAFETY: the frame lies in the boot block's page, which the monitor maps read-write and
    // fills before it enters here; the kernel is alone in the guest while it runs.
    let area = unsafe { core::slice::from_raw_parts_mut(placement::EXC_FRAME as *mut u8, placement::EXC_FRAME_LEN) };
    let Some(mut frame) = ExcFrame::decode(area) else { fail(Failure::BadBootBlock) };
    let mut mem = GuestMemory::from_block();
    let mut guard = KERNEL.lock();
    let Some(kernel) = guard.as_mut() else { fail(Failure::BadBootBlock) };
    let tid = kernel.current_tid();
    let outcome = kernel.exception(&mut mem, frame.exception());
    mem.check(u64::MAX);
    pass_output(kernel);
    match outcome {
        ExceptionOutcome::Retry => {}
        ExceptionOutcome::Emulated { writes, flags, len, .. } => {
            frame.rip += len;
            for w in writes {
                let r = &mut frame.gprs[usize::from(w.reg & 15)];
                *r = w.apply(*r);
            }
            if let Some(f) = flags {
                frame.rflags = (frame.rflags & !ARITH_FLAGS) | (f & ARITH_FLAGS);
            }
        }
        ExceptionOutcome::Fatal(_) => end(guard),
        ExceptionOutcome::Deliver => {
            // A fault the program handles: its handler's frame, as the host placement's
            // monitor delivers it.
            let mut ctx = context_of(frame.gprs, frame.rip, frame.rflags);
            match kernel.deliver_signal(&mut mem, &mut ctx) {
                // The signal ended the process: another process's thread runs next.
                Ok(None) if kernel.current_tid() != tid => {
                    if after_process_end(kernel, &mut mem, &mut frame, tid) {
                        end(guard);
                    }
                }
                Ok(_) => {
                    load_fpu(&ctx.fpu);
                    (frame.gprs, frame.rip, frame.rflags) = (ctx.gprs, ctx.rip, ctx.rflags);
                }
                Err(_) => end(guard),
            }
            mem.check(u64::MAX);
            pass_output(kernel);
        }
        ExceptionOutcome::ProcessEnded => {
            if after_process_end(kernel, &mut mem, &mut frame, tid) {
                end(guard);
            }
            mem.check(u64::MAX);
            pass_output(kernel);
        }
    }
    drop(guard);
    area.copy_from_slice(&frame.encode());
    hostcall(Request::ExceptionServed, 0, 0);
    fail(Failure::BadBootBlock)
}

/// Hands what the program wrote to its standard streams to the monitor, as the host
/// placement's monitor takes it after every syscall and exception (in pieces that fit the output
/// area).
fn pass_output(kernel: &mut Kernel) {
    let records = kernel.take_output();
    if records.is_empty() {
        return;
    }
    let Some(block) = BootBlock::decode(boot_page()) else { fail(Failure::BadBootBlock) };
    let room = (block.output_cap as usize).saturating_sub(9).max(1);
    for (stream, bytes) in records {
        for piece in bytes.chunks(room) {
            let encoded = placement::encode_output(&[(stream, piece.to_vec())]);
            hand_over(Request::Output, &encoded);
        }
    }
}

/// Asks the monitor to load the thread's FS and GS bases.
fn set_bases((fs, gs): (u64, u64)) {
    let page = boot_page();
    let mut block = BootBlock::decode(page).unwrap_or_default();
    block.args = [fs, gs, 0];
    page.copy_from_slice(&block.encode());
    hostcall(Request::Bases, 0, block.output_len);
}

/// The program's memory as the kernel in the guest reaches it: bytes through the current
/// space's page tables and the physical window; page operations and address spaces as host
/// calls. What this stage does not do (the pages of another space, a write to a read-only
/// copy-on-write page) marks the call, which ends the run ([`Failure::NeedsMemory`]) instead of
/// being answered otherwise.
struct GuestMemory {
    root: u64,
    ram_len: u64,
    free_frames: u64,
    /// The first `Memory` method this stage could not serve ([`placement::MEMORY_METHODS`]).
    touched: core::cell::Cell<Option<u64>>,
}

impl GuestMemory {
    fn from_block() -> GuestMemory {
        let block = BootBlock::decode(boot_page()).unwrap_or_default();
        GuestMemory {
            root: block.root,
            ram_len: block.ram_len,
            free_frames: block.free_frames,
            touched: core::cell::Cell::new(None),
        }
    }

    fn touch(&self, method: u64) {
        if self.touched.get().is_none() {
            self.touched.set(Some(method));
        }
    }

    /// Ends the run if a method this stage cannot serve was used during call `nr`.
    fn check(&self, nr: u64) {
        if let Some(method) = self.touched.get() {
            let page = boot_page();
            let mut block = BootBlock::decode(page).unwrap_or_default();
            block.args = [nr, method, 0];
            page.copy_from_slice(&block.encode());
            fail(Failure::NeedsMemory);
        }
    }

    /// The word of guest RAM at `gpa`, through the physical window.
    fn phys_word(&self, gpa: u64) -> Option<u64> {
        let mut w = [0u8; 8];
        self.phys(gpa, 8)?.iter().zip(w.iter_mut()).for_each(|(s, d)| *d = *s);
        Some(u64::from_le_bytes(w))
    }

    /// `len` bytes of guest RAM at `gpa`, when they lie in RAM.
    fn phys(&self, gpa: u64, len: u64) -> Option<&'static mut [u8]> {
        let end = gpa.checked_add(len)?;
        if end > self.ram_len {
            return None;
        }
        // SAFETY: the monitor maps all `ram_len` bytes of guest RAM read-write at
        // `PHYS_WINDOW` before it boots the image; the range is checked to lie inside, and the
        // slice lives only for one copy while the program is stopped in its syscall.
        Some(unsafe { core::slice::from_raw_parts_mut((placement::PHYS_WINDOW + gpa) as *mut u8, len as usize) })
    }

    /// Calls `f(page bytes, offset in the span)` for each page of `[addr, addr+len)`, in order;
    /// `write` refuses copy-on-write pages. The first page not present is the error.
    fn each_page(
        &self,
        addr: u64,
        len: usize,
        write: bool,
        mut f: impl FnMut(&mut [u8], usize),
    ) -> Result<(), MemError> {
        let mut done = 0usize;
        while done < len {
            let va = addr + done as u64;
            let in_page = ((PAGE - (va % PAGE)) as usize).min(len - done);
            let Some((gpa, pte)) = placement::translate(|g| self.phys_word(g), self.root, va) else {
                return Err(MemError::NotPresent { addr: va });
            };
            if write && pte & placement::PTE_COW != 0 {
                self.touch(4);
                return Err(MemError::NotPresent { addr: va });
            }
            let Some(bytes) = self.phys(gpa, in_page as u64) else { return Err(MemError::NotPresent { addr: va }) };
            f(bytes, done);
            done += in_page;
        }
        Ok(())
    }

    /// True if `va` is present and copy-on-write.
    fn cow(&self, va: u64) -> bool {
        placement::translate(|g| self.phys_word(g), self.root, va).is_some_and(|(_, pte)| pte & placement::PTE_COW != 0)
    }

    /// Asks the monitor for a page operation; `Ok(false)` for [`mem_status::NO`].
    fn request(&mut self, op: MemOp, args: [u64; 3]) -> Result<bool, MemError> {
        let page = boot_page();
        let mut block = BootBlock::decode(page).unwrap_or_default();
        block.op = op.code();
        block.args = args;
        page.copy_from_slice(&block.encode());
        hostcall(Request::Memory, 0, block.output_len);
        let after = BootBlock::decode(boot_page()).unwrap_or_default();
        self.root = after.root;
        self.free_frames = after.free_frames;
        match after.status {
            mem_status::OK => Ok(true),
            mem_status::NO => Ok(false),
            mem_status::OUT_OF_FRAMES => Err(MemError::OutOfFrames),
            _ => Err(MemError::OutOfRange { addr: args[0] }),
        }
    }
}

/// Bytes of a page.
const PAGE: u64 = deja_kernel::PAGE_SIZE;

impl Memory for GuestMemory {
    fn populate(&mut self, addr: u64, len: u64, prot: Prot) -> Result<(), MemError> {
        self.request(MemOp::Populate, [addr, len, u64::from(prot.0)]).map(|_| ())
    }
    fn protect(&mut self, addr: u64, len: u64, prot: Prot) {
        if self.request(MemOp::Protect, [addr, len, u64::from(prot.0)]).is_err() {
            self.touch(1);
        }
    }
    fn unmap(&mut self, addr: u64, len: u64) {
        if self.request(MemOp::Unmap, [addr, len, 0]).is_err() {
            self.touch(2);
        }
    }
    fn move_pages(&mut self, from: u64, to: u64, len: u64) {
        if self.request(MemOp::MovePages, [from, to, len]).is_err() {
            self.touch(3);
        }
    }
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemError> {
        let len = buf.len();
        self.each_page(addr, len, false, |bytes, at| buf[at..at + bytes.len()].copy_from_slice(bytes))
    }
    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), MemError> {
        // The monitor's write to a copy-on-write page gives the space its own frame first.
        let mut page = addr & !(PAGE - 1);
        while page < addr + data.len() as u64 {
            // A read-only copy-on-write page the program may not write: the host placement's
            // monitor copies it too; this stage does not yet.
            // The program did not fault on it: the CPU may hold its read-only entry, which the
            // monitor replays once the page moves to a frame of its own.
            if self.cow(page) && !self.request(MemOp::Unshare, [page, 1, 0])? {
                self.touch(4);
                return Err(MemError::NotPresent { addr: page });
            }
            page += PAGE;
        }
        self.each_page(addr, data.len(), true, |bytes, at| bytes.copy_from_slice(&data[at..at + bytes.len()]))
    }
    fn for_each_page(&self, _: &mut dyn FnMut(u64, &[u8])) {
        self.touch(5);
    }
    fn for_each_page_in(&self, _: u64, _: &mut dyn FnMut(u64, &[u8])) {
        self.touch(6);
    }
    fn free_frames(&self) -> u64 {
        self.free_frames
    }
    fn space(&self) -> u64 {
        self.root
    }
    fn fork_space(&mut self, shared: &[(u64, u64)]) -> Result<u64, MemError> {
        let words = placement::encode_fork_ranges(shared);
        let Some(block) = BootBlock::decode(boot_page()) else { fail(Failure::BadBootBlock) };
        if words.len() as u64 > block.output_cap {
            self.touch(7);
            return Err(MemError::OutOfFrames);
        }
        // SAFETY: as in `hand_over`: the output area is mapped, checked to fit, and holds nothing
        // else while a syscall is served.
        let out = unsafe { core::slice::from_raw_parts_mut(block.output_at() as *mut u8, words.len()) };
        out.copy_from_slice(&words);
        self.request(MemOp::ForkSpace, [shared.len() as u64, 0, 0])?;
        Ok(BootBlock::decode(boot_page()).unwrap_or_default().answer)
    }
    fn unshare(&mut self, addr: u64) -> Result<bool, MemError> {
        if !self.cow(addr) {
            return Ok(false);
        }
        self.request(MemOp::Unshare, [addr, 0, 0])
    }
    fn new_space(&mut self) -> Result<u64, MemError> {
        self.request(MemOp::NewSpace, [0; 3])?;
        Ok(BootBlock::decode(boot_page()).unwrap_or_default().answer)
    }
    fn switch_space(&mut self, id: u64) {
        if self.request(MemOp::SwitchSpace, [id, 0, 0]).is_err() {
            self.touch(10);
        }
    }
    fn drop_space(&mut self, id: u64) {
        if self.request(MemOp::DropSpace, [id, 0, 0]).is_err() {
            self.touch(10);
        }
    }
    /// Nothing to do: the guest placement measures no block coverage (`deja run --kernel guest`
    /// arms no blocks), which is all the host placement's shell does here.
    fn code_mapped(&mut self, _: &[u8], _: u64, _: u64, _: u64) {}
}

/// Writes into a fixed slice, dropping what does not fit.
struct SliceWriter<'a> {
    out: &'a mut [u8],
    len: usize,
}

impl core::fmt::Write for SliceWriter<'_> {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let n = s.len().min(self.out.len() - self.len);
        self.out[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}

/// A panic ends the run, its message (without allocating: the heap may be what failed) in the
/// output area for the monitor's error.
#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    use core::fmt::Write as _;
    if let Some(block) = BootBlock::decode(boot_page()) {
        let cap = block.output_cap.min(512) as usize;
        // SAFETY: as in `hand_over`: the output area is mapped, checked to fit, and unused now.
        let out = unsafe { core::slice::from_raw_parts_mut(block.output_at() as *mut u8, cap) };
        let mut w = SliceWriter { out, len: 0 };
        let _ = write!(w, "{info}");
        let len = w.len as u64;
        loop {
            hostcall(Request::Failed, Failure::Panic.code(), len);
        }
    }
    fail(Failure::Panic)
}
