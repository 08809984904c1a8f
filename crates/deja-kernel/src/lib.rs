//! deja's pure syscall core.
//!
//! Everything that decides what a guest program observes lives here: the address-space layout,
//! ELF loading, the initial stack, Linux syscall semantics, the virtual clock, the seeded random
//! stream, and the trace digest. There is no KVM, no `unsafe`, no host I/O and no host clock in
//! this crate: the KVM shell (`deja-vmm`) traps a syscall or an exception and hands it to a
//! [`Kernel`] together with a [`Memory`] view of the guest, and the kernel answers.
//!
//! A run is a pure function of the [`ProgramSpec`] (image bytes, argv, env, declared files,
//! stdin, seed, starting disk, fault configuration) and of the decision overrides set on it:
//! the same spec and overrides give the same trace digest, the same crash images, the same
//! ledger and the same decision log.
//!
//! # Rooms
//!
//! The modules are rooms, one per concern, each saying in its own docs what it owns and what it
//! may use. From the bottom up: [`abi`] (Linux's numbers), [`persist`] (the save/restore
//! contract), [`mm`], [`placement`], [`time`], [`host`], [`decisions`], [`signal`], [`net`], [`fs`], [`files`],
//! [`faults`], [`record`], [`task`]: the state rooms, none of which knows the [`Kernel`]; then
//! [`kernel`], which puts their parts together, and [`syscalls`], the handler layer above it. A
//! room uses only rooms below it.
//!
//! # Decisions
//!
//! Every nondeterministic choice deja makes on the program's behalf is a *decision*: the file
//! system fault decisions (see [`FaultConfig`] and [`fs`]), the scheduler's choice of the next
//! thread when several are runnable (see [`task::threads`]) and the deja SDK's `Random` and
//! `Choice(n)` requests. `getrandom`, `/dev/urandom` and `AT_RANDOM` read the program's random
//! stream and are not decisions. Decisions come from a separate stream of the seed, so steering
//! them never shifts the program's random bytes.
//!
//! A decision has `options` and a `choice`: `0..options`, or any `u64` when `options == 0`
//! (the full 64-bit range: SDK `Random`). Each one taken is appended to the decision log
//! ([`Kernel::decisions`], [`RunReport::decisions`]) as a [`DecisionRecord`] carrying its
//! index (0-based, counting every decision since [`Kernel::load`], those taken before a fork or
//! a snapshot included), point ([`DecisionPoint`]), options, choice and whether it was
//! overridden. Points: `eio on write #4 to /data/wal`, `enospc on write #4 to /data/wal`, `eio
//! on fsync #2 of /data/wal`, `crash state: keep write of 4096 bytes at 0 to /data/wal`,
//! `schedule after syscall 12`, `sdk random #3`, `sdk choice #5 of 3` (SDK requests numbered
//! per kind from 1).
//!
//! The seed fixes each decision's *natural* choice (one `u64` from the stream for
//! `options == 0`, otherwise an unbiased index below `options`, Lemire's multiply-and-reject).
//! [`Kernel::set_decision_overrides`] steers decisions by index: when decision `i` is taken
//! and an override `c` exists for `i`, the choice is `c % options` (`c` as is when
//! `options == 0`). The natural choice is drawn either way, so the stream advances identically
//! and overriding decision `i` never changes the natural choice of another decision (though
//! the program may then take other decisions). Overrides are part of the saved and cloned
//! state, so a forked child can be steered: set them on the child, for indices at or past its
//! [`Kernel::decision_count`].
//!
//! # File system, durability and faults
//!
//! Each node has a writable in-memory file system with a volatile and a durable layer; the
//! durability model, crash images and their decisions are documented in [`fs`]. A configured
//! crash point ends a syscall with [`SyscallOutcome::Crash`]; [`Kernel::crash_image`] gives the
//! durable state, [`Kernel::disk`] the volatile one; [`RunReport::faults`] is the ledger and
//! [`RunReport::decisions`] every decision.
//!
//! # What the shell must know
//!
//! - [`Kernel::load`] populates the image segments and the top 128 KiB of the stack; everything
//!   else (heap, rest of the stack, anonymous `mmap`) is populated on demand. A `#PF` goes to
//!   [`Kernel::exception`]: inside a mapping that allows the access it populates an aligned
//!   window of [`mm::user_layout::FAULT_AROUND_PAGES`] pages (clipped to the mapping, falling
//!   back to the single page when frames are short) and answers [`ExceptionOutcome::Retry`]. The
//!   same fault at the same RIP repeating four times in a row is fatal (the shell did not map
//!   the page).
//! - `#GP` on `rdtsc` (`0f 31`) or `rdtscp` (`0f 01 f9`) is emulated from the virtual clock
//!   (3 ticks per virtual ns), `#GP` on `cpuid` (`0f a2`, trapping under CPUID faulting) is
//!   answered from [`host::cpuid::answer`] without a trace entry or virtual time; any other
//!   `#GP` is `SIGSEGV`.
//! - After `arch_prctl` (syscall 158) re-read [`Kernel::fs_base`] / [`Kernel::gs_base`] (the
//!   current thread's).
//! - Threads: after every syscall read [`Kernel::current_tid`], [`Kernel::take_spawned`] and
//!   [`Kernel::take_wakeup_returns`]; the exact register contract is in [`task::threads`]. The
//!   scheduler's choices are decisions (`schedule after syscall K`), taken only when more than
//!   one thread is runnable.
//! - Signals ([`sys_signal`](syscalls::sys_signal)): before every syscall call
//!   [`Kernel::set_user_sp`] with the thread's RSP. On the way back to ring 3 (after a
//!   `Return`, once the threads are switched, and when [`Kernel::resume`] woke threads) ask
//!   [`Kernel::signal_due`]; if it is due, pass the current thread's [`UserContext`] to
//!   [`Kernel::deliver_signal`] and install the context it returns (registers and FPU).
//!   [`ExceptionOutcome::Deliver`] does the same for a fault, with RIP at the fault;
//!   [`SyscallOutcome::Resume`] (`rt_sigreturn`) installs a context whole.
//! - Output is collected; drain it with [`Kernel::take_output`] (chunks of the same stream are
//!   merged). A single `write` moves at most [`MAX_IO`] bytes (a partial write beyond that).
//! - The commit capacity is fixed at load from `mem.free_frames()` minus
//!   [`PAGE_TABLE_MARGIN_PERCENT`]%: call `load` on a fresh VM.
//! - A wait that can never end (every thread blocked without a timeout, or a `poll` without
//!   timeout) ends the run as `SIGKILL` with a `deadlock: ...` fault description (vector 0).
//! - Every clock is virtual: it starts at 0 and advances by [`time::clock::SYSCALL_COST_NS`] per
//!   syscall, [`time::clock::RDTSC_COST_NS`] per emulated `rdtsc`, and by sleeps and timeouts.
//!
//! # The deja syscall, assertions and coverage
//!
//! A guest linked with the deja SDK calls [`deja_protocol::DEJA_SYSCALL`] (counted and traced
//! as `deja`): the kernel keeps its assertion catalog and counts, its lifecycle events, and
//! answers its `Random`/`Choice` requests from the seeded stream. [`RunReport::assertions`]
//! holds every site's verdict; [`RunReport::assertion_failed`] says whether one is a bug.
//! A guest built with SanitizerCoverage inline 8-bit counters has a `__sancov_cntrs` section:
//! [`RunReport::coverage`] summarizes the bucketed counters at the end and
//! [`Kernel::coverage_map`] reads them at any time, without populating guest memory.
//!
//! # Snapshots and forks
//!
//! A [`Kernel`] is `Clone` (an in-memory fork clones it together with the guest memory), and
//! [`Kernel::save`] / [`Kernel::restore`] turn its complete state into bytes and back: the
//! state is made of parts (the process, its files, its I/O objects, the threads and the clock,
//! the record of the run, the assertion oracle, the fault state, the random stream), each
//! saved as `postcard` of its fields in declaration order and checked on its own when
//! restored; there is no header, the caller's envelope carries the schema version.
//! Guest memory and vCPU registers are not part of it. [`Kernel::reseed`] gives a fork its own
//! random stream (and marks the trace digest).

#![cfg_attr(not(feature = "std"), no_std)]

use crate::prelude::*;
extern crate alloc;

/// What the standard prelude brings and a `no_std` crate must import: the allocating types and
/// macros, the same items in both placements.
mod prelude {
    pub(crate) use alloc::borrow::ToOwned;
    pub(crate) use alloc::boxed::Box;
    pub(crate) use alloc::string::{String, ToString};
    pub(crate) use alloc::vec::Vec;
    pub(crate) use alloc::{format, vec};
}

// The rooms, from the bottom up: what each owns and the rooms it may use. A room may also use
// the crate root's types (`ExitStatus`, `Stream`, `UserContext`, ...), never a room above it:
// `cargo xtask modules` holds the graph of rooms to no cycle. Plain comments, not doc comments:
// rustdoc would join an outer doc here to the room's own `//!` docs and resolve their links from
// the crate root. One room per paragraph, so that rustfmt keeps the order.

// Linux's numbers: errno values, open flags and file modes, auxv keys, clock ids, signal
// numbers, `EPOLL*` bits. Uses nothing.
pub mod abi;

// The save/restore contract every saved part implements (`Persist`, `RestoreError`) and the
// serde helpers the parts' derives need. Uses nothing.
pub mod persist;

// Guest memory (`Memory`), the address-space layout, the VMAs, ELF parsing and the initial
// stack. Uses `abi`, `persist`.
pub mod mm;

// The guest placement's contract: the window the kernel image lives in, the boot block the
// monitor and the image share, the image made ready to map. Uses `mm`.
pub mod placement;

// The virtual clock and deja's vDSO. Uses `mm`, `abi`, `persist`.
pub mod time;

// What the guest could learn of the host and deja's answers: the CPUID table, the rewritten
// host-channel instructions and their traps, the program's coverage counters. Uses `mm`,
// `persist`.
pub mod host;

// Decision points, the decision log, the seeded random stream and the words of faults. Uses
// `abi`, `persist`.
pub mod decisions;

// Signal names and default actions, the process's signal state and the handler's frame. Uses
// `abi`, `persist`.
pub mod signal;

// The node's I/O objects (sockets, pipes and FIFOs, eventfds, epoll instances) in one table,
// and the packets between nodes. Uses `abi`, `persist`.
pub mod net;

// The file system: inodes, the volatile and durable layers, crash images, disks, paths, what
// it adds to the VMAs. Uses `abi`, `decisions`, `host`, `mm`, `net`, `time`, `persist`.
pub mod fs;

// The fd table, open file descriptions, what each kind does and each object's poll readiness.
// Uses `fs`, `net`, `abi`, `persist`.
pub mod files;

// The fault plan and its state: placed errors, crashes and crash states, the ledger, the
// fail-stop rule, crash points. Uses `decisions`, `fs`, `persist`.
pub mod faults;

// The run's record: the trace and its digest, the output's last lines, the assertion oracle.
// Uses `mm`, `persist`.
pub mod record;

// The process, the process table, threads and the scheduler. Uses `mm`, `host`, `time`,
// `signal`, `files`, `fs`, `abi`, `persist`.
pub mod task;

// `Kernel`: one field per saved part; load, save and restore, the report. Uses every room above
// in this list.
pub mod kernel;

// The handler layer: the syscall table, `Kernel::syscall` and `Kernel::exception`, and the
// `Kernel::sys_*` handlers. Uses `kernel` and every room above it in this list.
pub mod syscalls;

use snafu::Snafu;

pub use decisions::{DecisionLog, DecisionPoint, DecisionRecord, FailStopMode, FaultKind, IoErrno, IoOp, RandomFault};
pub use faults::crash_points::CrashPoint;
pub use faults::under;
pub use faults::{
    CrashAt, CrashState, DurableOp, ErrorRule, FailedSync, FaultConfig, FaultRecord, IoCount, KeptOps, OpCrash,
    ProcessKill, When, MAX_DURABLE_LOG, MAX_FAIL_STOP_LIVES,
};
pub use fs::disk::{Disk, DiskEntry, DiskError};
pub use fs::{CrashModel, FsConfig};
pub use host::coverage::{bucket, CoverageSummary, MAX_COVERAGE_COUNTERS, SANCOV_SECTION};
pub use kernel::CrashStates;
pub use kernel::{Kernel, MAX_IO, PAGE_TABLE_MARGIN_PERCENT};
pub use mm::elf::find_section as elf_section;
pub use mm::elf::ElfError;
pub use mm::elf::{dynamic_needs, DynamicNeeds};
pub use mm::mem::{FakeMemory, MemError, Memory, Prot, PAGE_SIZE};
pub use persist::RestoreError;
pub use record::antithesis::{DEFAULT_OUTPUT as ANTITHESIS_OUTPUT, LOCAL_OUTPUT as ANTITHESIS_LOCAL_OUTPUT};
pub use record::oracle::{
    AssertionContext, AssertionReport, AssertionStatus, EventRecord, LifecycleRecord, MAX_EVENTS,
};
pub use record::tail::{TAIL_LINES, TAIL_LINE_BYTES};
pub use record::trace::TraceEntry;
pub use syscalls::view::{ProcessView, ThreadView};
pub use task::threads::SpawnedThread;

/// The dynamic loader a program's `PT_INTERP` names (`None` for a static program, or an image
/// deja would not load).
pub fn elf_interpreter(image: &[u8]) -> Option<String> {
    mm::elf::parse(image).ok()?.interp
}

use alloc::collections::BTreeMap;

/// Everything a run depends on. Nothing else from the host reaches the guest.
#[derive(Debug, Clone, Default)]
pub struct ProgramSpec {
    /// The ELF image (static or static-PIE x86-64).
    pub image: Vec<u8>,
    /// The path the guest sees for its own executable (`AT_EXECFN`, `/proc/self/exe`).
    pub exe_path: String,
    /// argv, including `argv[0]`.
    pub argv: Vec<String>,
    /// The environment, as `KEY=VALUE` strings. The host environment is never passed through.
    pub env: Vec<String>,
    /// Declared read-only input files: absolute guest path → contents.
    pub files: BTreeMap<String, Vec<u8>>,
    /// A read-only root under the declared files (an unpacked image or directory tree), if any.
    pub root: Option<alloc::sync::Arc<fs::Root>>,
    /// The bytes the guest reads from fd 0.
    pub stdin: Vec<u8>,
    /// Seed of every random byte the guest sees.
    pub seed: u64,
    /// Keep every syscall in [`RunReport::trace`] (for `--trace-out`); the digest is always kept.
    pub record_trace: bool,
    /// The durable state to start from (e.g. a previous incarnation's crash image); `None`: a
    /// fresh disk with empty `/`, `/tmp` and `/data`. It must be a valid [`Disk`].
    pub disk: Option<Disk>,
    /// File system faults to inject (default: none).
    pub faults: FaultConfig,
    /// File system settings (capacity).
    pub fs: FsConfig,
    /// Whether host-channel instructions in the program's code are rewritten to traps
    /// ([`host::hostchan`]); on by default.
    pub rewrite: host::hostchan::Rewrite,
    /// Whether the image's `syscall` sites become jumps ([`host::jumps`]); off by default. An
    /// input of the run: it changes the code's bytes.
    pub jumps: host::jumps::Jumps,
    /// The starting working directory, an absolute guest path to a directory that exists at
    /// start (empty: `/`).
    pub cwd: String,
    /// Whether the program gets deja's vDSO ([`time::vdso`]); on by default.
    pub vdso: time::vdso::VdsoMode,
    /// How many CPUs the program sees (`sched_getaffinity`), 1 to [`MAX_CPUS`]; 0 counts as 1.
    /// deja still runs one thread at a time: this sizes the program's thread pools, nothing
    /// else.
    pub cpus: u32,
}

/// The most CPUs a program may be shown.
pub const MAX_CPUS: u32 = 1024;

impl ProgramSpec {
    /// The spec of a program named `name` (it sees itself as `/bin/<name>`) with arguments
    /// `args` and seed `seed`; everything else empty.
    pub fn for_program(image: Vec<u8>, name: &str, args: impl IntoIterator<Item = String>, seed: u64) -> ProgramSpec {
        let exe_path = format!("/bin/{name}");
        let mut argv = vec![exe_path.clone()];
        argv.extend(args);
        ProgramSpec { image, exe_path, argv, seed, ..Default::default() }
    }
}

/// Where the first instruction of the program runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Entry {
    /// Entry point (`e_entry` plus the load bias).
    pub rip: u64,
    /// Initial stack pointer, pointing at `argc`.
    pub rsp: u64,
}

/// Why a program image could not be loaded. Each message names the problem and the fix.
#[derive(Debug, Snafu)]
#[snafu(visibility(pub(crate)))]
pub enum LoadError {
    /// Not an ELF file at all.
    #[snafu(display("not an ELF executable (bad magic); deja runs x86-64 Linux ELF programs"))]
    NotElf,
    /// A 32-bit ELF.
    #[snafu(display(
        "32-bit ELF; deja runs 64-bit x86-64 programs only: rebuild for x86_64-unknown-linux-gnu or -musl"
    ))]
    Not64Bit,
    /// An ELF for another machine.
    #[snafu(display("ELF for machine {machine}, not x86-64; rebuild for an x86_64 Linux target"))]
    WrongMachine {
        /// `e_machine`.
        machine: u16,
    },
    /// A dynamically linked ELF (has `PT_INTERP`) whose loader is not among the run's files.
    #[snafu(display(
        "dynamically linked ELF (it asks for the interpreter {interpreter}, which is not among the run's files): \
         declare it and the libraries, or rebuild it static with RUSTFLAGS=\"-C target-feature=+crt-static\""
    ))]
    Dynamic {
        /// The interpreter `PT_INTERP` names.
        interpreter: String,
    },
    /// The loader a dynamically linked ELF names is not a shared object of its own.
    #[snafu(display("the interpreter {interpreter} is not an ELF shared object without an interpreter of its own"))]
    BadInterpreter {
        /// The interpreter `PT_INTERP` names.
        interpreter: String,
    },
    /// Not an executable (for example a relocatable object or a shared library without entry).
    #[snafu(display("ELF type {e_type} is not an executable; deja runs ET_EXEC or static-PIE ET_DYN programs"))]
    NotExecutable {
        /// `e_type`.
        e_type: u16,
    },
    /// The ELF is damaged.
    #[snafu(display("malformed ELF: {source}"))]
    Malformed {
        /// What is damaged.
        source: ElfError,
    },
    /// The segments and the stack need more pages than the VM can commit.
    #[snafu(display(
        "the program does not fit in guest memory (the image needs {image_kib} KiB and the stack \
         {stack_kib} KiB, but only {available_kib} KiB are available); raise --memory"
    ))]
    TooBig {
        /// The loaded segments, in KiB.
        image_kib: u64,
        /// The stack, in KiB.
        stack_kib: u64,
        /// What the VM can commit, in KiB.
        available_kib: u64,
    },
    /// The shell could not back a page of the image or of the stack.
    #[snafu(display("the program does not fit in guest memory ({source} while loading {what}); raise --memory"))]
    OutOfMemory {
        /// `the image` or `the stack`.
        what: &'static str,
        /// What the shell answered.
        source: MemError,
    },
    /// The arguments and environment do not fit in the part of the stack set aside for them.
    #[snafu(display(
        "the program does not fit in guest memory (argv and environment exceed a quarter of the 8 MiB \
         stack); pass fewer or shorter arguments and environment variables"
    ))]
    ArgsTooBig,
    /// The starting disk is not a valid tree.
    #[snafu(display("{source}; fix or regenerate the disk image"))]
    InvalidDisk {
        /// What is wrong with the tree.
        source: DiskError,
    },
    /// The starting disk holds more than the file system's capacity.
    #[snafu(display(
        "the disk holds {bytes} bytes of files but the capacity is {capacity}; fix or regenerate the disk image"
    ))]
    DiskOverCapacity {
        /// Bytes of file contents on the disk.
        bytes: u64,
        /// The file system's capacity in bytes.
        capacity: u64,
    },
    /// More CPUs asked for than deja shows.
    #[snafu(display("{cpus} CPUs asked for; a program may be shown 1 to {MAX_CPUS}"))]
    Cpus {
        /// What was asked for.
        cpus: u32,
    },
    /// The starting working directory cannot be used.
    #[snafu(display("working directory {path:?}: {problem}; give an absolute path to a directory the program has"))]
    Cwd {
        /// The guest path.
        path: String,
        /// What is wrong with it.
        problem: String,
    },
    /// A declared file's guest path is not absolute and normal.
    #[snafu(display("declared file {path:?}: {problem}"))]
    GuestPath {
        /// The guest path.
        path: String,
        /// What is wrong with it.
        problem: &'static str,
    },
}

/// How a program ended.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ExitStatus {
    /// `exit`/`exit_group` with this code (0..=255).
    Exited {
        /// The exit code.
        code: i32,
    },
    /// Killed by a signal (a CPU fault, or a signal the program sent itself, e.g. `abort`).
    Signaled {
        /// Signal number (11 = SIGSEGV, 4 = SIGILL, 6 = SIGABRT, ...).
        signal: i32,
        /// Signal name, e.g. `SIGSEGV`.
        name: String,
        /// The CPU fault behind it, if any.
        fault: Option<FaultInfo>,
    },
}

impl ExitStatus {
    /// The shell-style code: the exit code, or 128 + signal.
    pub fn code(&self) -> i32 {
        match self {
            ExitStatus::Exited { code } => *code,
            ExitStatus::Signaled { signal, .. } => 128 + signal,
        }
    }
}

/// A CPU fault that ended the program.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FaultInfo {
    /// What happened, e.g. `page fault (write to unmapped address)`, `invalid opcode`,
    /// `general protection (privileged instruction)`.
    pub description: String,
    /// x86 exception vector.
    pub vector: u8,
    /// Instruction pointer of the faulting instruction.
    pub rip: u64,
    /// Faulting address (CR2) for page faults.
    pub addr: Option<u64>,
}

/// What the kernel wants the shell to do after a syscall.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SyscallOutcome {
    /// Return this value in RAX (negative errno values as two's complement) and resume.
    Return(u64),
    /// The program is over.
    Exit(ExitStatus),
    /// The node crashed right after the durable write [`Kernel::durable_writes`] took effect,
    /// as [`FaultConfig::crash_after_durable_write`] asked: the program never sees the return.
    /// Take the durable state with [`Kernel::crash_image`], end the run with
    /// [`Kernel::finish`] (with [`Kernel::exit_status`], a `SIGKILL`), and restart the program
    /// on the image.
    Crash,
    /// `rt_sigreturn`: replace the thread's general-purpose registers, RIP, RFLAGS and FPU
    /// state with this context (the RAX in it is the call's return), then check
    /// [`Kernel::signal_due`] as after a `Return`.
    Resume(Box<UserContext>),
    /// The calling thread blocked and no thread of this networked node can run until time
    /// passes or packets arrive: put [`task::threads::BLOCKED_RETURN`] in RAX as for a blocked
    /// `Return`, switch threads as the contract says, and hand control to the cluster driver,
    /// which calls [`Kernel::resume`].
    Idle,
}

/// A CPU exception raised by ring-3 code, as the shell decoded it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exception {
    /// #PF with CR2 and the hardware error code.
    PageFault {
        /// Faulting address.
        addr: u64,
        /// Hardware error code (bit 0 present, 1 write, 2 user, 4 instruction fetch).
        error_code: u64,
        /// Faulting instruction.
        rip: u64,
    },
    /// #GP (privileged instruction, non-canonical address, RDTSC with CR4.TSD, CPUID under
    /// CPUID faulting ...).
    GeneralProtection {
        /// Faulting instruction.
        rip: u64,
        /// Hardware error code.
        error_code: u64,
        /// EAX and ECX at the fault: the leaf and subleaf of a trapped `cpuid`.
        eax: u32,
        /// See `eax`.
        ecx: u32,
    },
    /// #UD: an invalid or undefined opcode (or a `ud2`, such as a rewritten site's trap).
    InvalidOpcode {
        /// Faulting instruction.
        rip: u64,
        /// EAX and ECX at the fault: the leaf and subleaf of a rewritten `cpuid`, the register
        /// of a rewritten `xgetbv`.
        eax: u32,
        /// See `eax`.
        ecx: u32,
    },
    /// Any other vector.
    Other {
        /// Exception vector.
        vector: u8,
        /// Faulting instruction (or the next one for traps).
        rip: u64,
    },
}

/// A general-purpose register, numbered as x86 encodes it: 0 = RAX, 1 = RCX, 2 = RDX, 3 = RBX,
/// 4 = RSP, 5 = RBP, 6 = RSI, 7 = RDI, 8–15 = R8–R15.
pub type Gpr = u8;
/// RAX.
pub const RAX: Gpr = 0;
/// RCX.
pub const RCX: Gpr = 1;
/// RDX.
pub const RDX: Gpr = 2;
/// RBX.
pub const RBX: Gpr = 3;

/// One register an emulated instruction writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegWrite {
    /// Which register.
    pub reg: Gpr,
    /// The value written.
    pub value: u64,
    /// The operand size in bytes: 8 replaces the register, 4 replaces it with the value
    /// zero-extended (a 32-bit write), 2 replaces its low 16 bits only.
    pub width: u8,
}

impl RegWrite {
    /// The register's new value, given its old one.
    pub fn apply(&self, old: u64) -> u64 {
        match self.width {
            8 => self.value,
            4 => self.value & 0xffff_ffff,
            _ => (old & !0xffff) | (self.value & 0xffff),
        }
    }
}

/// The arithmetic flags (CF, PF, AF, ZF, SF, OF) an emulated instruction may set.
pub const ARITH_FLAGS: u64 = 0x8d5;

/// What the kernel decided about an exception.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExceptionOutcome {
    /// The kernel fixed it (for example mapped a page on demand): retry the instruction.
    Retry,
    /// The kernel emulated the instruction: apply `writes`, set the arithmetic flags
    /// ([`ARITH_FLAGS`]) to `flags` where given, advance RIP by `len` and resume. Used for a
    /// rewritten site's trap ([`host::hostchan`]), RDTSC/RDTSCP under CR4.TSD and CPUID under CPUID
    /// faulting.
    Emulated {
        /// Which instruction it was.
        channel: deja_rewrite::Channel,
        /// The registers it writes.
        writes: Vec<RegWrite>,
        /// The arithmetic flags afterwards, if it sets them.
        flags: Option<u64>,
        /// Instruction length.
        len: u64,
    },
    /// The fault became a signal the program handles: read the thread's context (RIP at the
    /// faulting instruction, or after it for a trap such as `int3`; RSP from the fault's frame),
    /// pass it to [`Kernel::deliver_signal`] and resume with the context it returns.
    Deliver,
    /// The program dies with this status.
    Fatal(ExitStatus),
    /// The faulting process (not the node's first) died of it, and the core moved on as after
    /// a syscall: create the threads [`Kernel::take_spawned`] names, apply
    /// [`Kernel::take_wakeup_returns`] and switch the vCPU to [`Kernel::current_tid`] (the
    /// faulting thread is gone; its registers may be dropped). If [`Kernel::is_idle`], nothing
    /// can run until the cluster driver resumes the node.
    ProcessEnded,
}

/// The registers of a thread in ring 3, as a signal handler's frame saves them and
/// `rt_sigreturn` restores them (see [`sys_signal`](crate::syscalls::sys_signal)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserContext {
    /// RAX, RCX, RDX, RBX, RSP, RBP, RSI, RDI, R8–R15 (x86 encoding order, as [`Gpr`]).
    pub gprs: [u64; 16],
    /// The instruction pointer.
    pub rip: u64,
    /// RFLAGS.
    pub rflags: u64,
    /// The x87, SSE and AVX state: the first [`FPU_BYTES`] bytes of the standard-format XSAVE
    /// area (the legacy region, the XSAVE header, the upper halves of the YMM registers).
    pub fpu: Vec<u8>,
}

pub use signal::name as signal_name;
pub use signal::sigframe::{init_fpu, FPU_BYTES};

/// Which host stream a chunk of guest output goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Stream {
    /// fd 1.
    Stdout,
    /// fd 2.
    Stderr,
}

/// The facts of a finished run.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RunReport {
    /// How the program ended.
    pub exit: ExitStatus,
    /// Number of syscalls served (including unsupported ones).
    pub syscalls: u64,
    /// Syscall counts by name.
    pub syscall_counts: BTreeMap<String, u64>,
    /// Unsupported syscalls (answered with ENOSYS) by name and count.
    pub unsupported: BTreeMap<String, u64>,
    /// Calls served without all Linux would do, by what deja left out (`SIGIO (O_ASYNC with
    /// an owner)`: signal-driven I/O asked for, no signal sent) and count.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub unmodelled: BTreeMap<String, u64>,
    /// Virtual time at the end, in nanoseconds since boot.
    pub virtual_time_ns: u64,
    /// BLAKE3 (hex) over the ordered syscall trace.
    pub trace_digest: String,
    /// BLAKE3 (hex) over every present user page at the end (address and contents).
    pub memory_digest: String,
    /// BLAKE3 (hex) of trace digest and memory digest together: the run's identity.
    pub digest: String,
    /// Per-syscall hashes (the first 8 bytes of the trace's hash chain after each syscall), in
    /// order; used to find the first diverging syscall of two runs.
    #[serde(skip)]
    pub entry_hashes: Vec<u64>,
    /// The full trace, when [`ProgramSpec::record_trace`] was set.
    #[serde(skip)]
    pub trace: Vec<TraceEntry>,
    /// When [`ProgramSpec::record_trace`] was set: every present user page at the end, as
    /// (address, first 8 bytes of the BLAKE3 of its contents), in address order; used to name
    /// the first diverging page of two runs.
    #[serde(skip)]
    pub pages: Vec<(u64, u64)>,
    /// With [`RunReport::pages`]: for each page, a 2-byte hash of each of its 64-byte lines
    /// ([`record::trace::PAGE_LINE`]), to name where in a page two runs differ.
    #[serde(skip)]
    pub page_lines: Vec<Vec<u16>>,
    /// When [`ProgramSpec::record_trace`] was set: the digest of the file system as the program
    /// left it ([`Disk::digest`]).
    #[serde(skip)]
    pub fs_digest: Option<String>,
    /// With [`RunReport::fs_digest`]: each path of that file system with a hash of what it
    /// holds ([`Disk::entry_hashes`]), to name the file two runs disagree on.
    #[serde(skip)]
    pub fs_files: Vec<(String, String)>,
    /// Every catalogued assertion site, sorted by (file, line, id).
    pub assertions: Vec<AssertionReport>,
    /// The program's first `SetupComplete`, if it sent one.
    pub setup_complete: Option<LifecycleRecord>,
    /// Named lifecycle events, in order (at most [`MAX_EVENTS`]).
    pub events: Vec<EventRecord>,
    /// Events past [`MAX_EVENTS`], counted and dropped.
    pub events_dropped: u64,
    /// deja requests that failed (`-EINVAL` or `-EFAULT`): another protocol version, an
    /// unknown request code, bad arguments, unreadable memory, an unknown assertion id.
    pub protocol_errors: u64,
    /// Edge coverage read from the program's `__sancov_cntrs` section, if it has one.
    pub coverage: Option<CoverageSummary>,
    /// Durable writes made (see [`fs`]).
    pub durable_writes: u64,
    /// The fault ledger: the previous incarnation's records passed to
    /// [`Kernel::note_previous_faults`] (with `observed` updated), then this run's, in order.
    pub faults: Vec<FaultRecord>,
    /// The decision log: every decision taken (faults, SDK `Random`/`Choice`), in order; entry
    /// `i` has index `i` (see [the crate documentation](crate#decisions)).
    pub decisions: Vec<DecisionRecord>,
    /// The file operations of this life by kind and path: where errors can be placed.
    #[serde(default)]
    pub io_ops: Vec<IoCount>,
    /// Durable operations made by the processes of each name other than the first program's
    /// (where a process kill can be placed: [`ProcessKill`]), by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub process_ops: Vec<(String, u64)>,
    /// When this life crashed: the crash state its image took, and what was pending.
    #[serde(default)]
    pub crash_state: Option<CrashAt>,
    /// The failed syncs of files in this life: what each wrote back of what it covered.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed_syncs: Vec<FailedSync>,
    /// (syscall number, errno or 0) of the syscalls after the first injected fault of this
    /// life, or from the start of a life after a crash (at most 256).
    #[serde(default)]
    pub after_fault: Vec<(u64, u64)>,
    /// The paths of the file system as the life left it (at most 256), directories included.
    #[serde(default)]
    pub files: Vec<String>,
    /// What code rewriting did: each code object's sites rewritten and refused, and the traps
    /// answered ([`host::hostchan`]).
    #[serde(default)]
    pub host_channels: host::hostchan::HostChannelReport,
    /// The durable operations of this life, in order (on paths storage faults may strike; at
    /// most [`MAX_DURABLE_LOG`]).
    #[serde(default)]
    pub durable_ops: Vec<DurableOp>,
    /// The life ended with a non-zero status after an injected I/O error, and the run had no
    /// lives left to restart it ([`MAX_FAIL_STOP_LIVES`]): where, in words. Such a stop
    /// is not a failure by itself.
    #[serde(default)]
    pub stopped_after_fault: Option<String>,
    /// The life ended non-zero after an injected I/O error and the fail-stop rule found a
    /// failure, not a fail-stop: why, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_fail_stop: Option<String>,
    /// The last lines the life wrote to stdout and stderr (at most [`TAIL_LINES`], each cut
    /// at [`TAIL_LINE_BYTES`] bytes), oldest first: what a failure said before it ended.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub last_output: Vec<String>,
    /// With a failure marker ([`FaultConfig::failure_marker`]): the last line of the life's
    /// output that held it, from the marker on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub marked_output: Option<String>,
    /// Calls (clock reads, `getcpu`) the program made through deja's vDSO, without an exit
    /// ([`time::vdso`]); `None` when it had no vDSO.
    #[serde(default)]
    pub vdso_calls: Option<u64>,
    /// The paths the program looked for and did not get (`ENOENT`), by the first missing
    /// component of each (at most [`record::not_found::MAX_NOT_FOUND`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_found: Vec<record::not_found::NotFound>,
}

impl RunReport {
    /// True if any assertion found a bug in this run.
    pub fn assertion_failed(&self) -> bool {
        self.assertions.iter().any(|a| a.bug)
    }
}

#[cfg(test)]
mod tests;
