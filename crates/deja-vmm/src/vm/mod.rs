//! The KVM virtual machine: one vCPU in 64-bit long mode whose kernel is the deja monitor.
//!
//! Only this module issues ioctls. The vCPU loop is a small state machine over exits:
//!
//! * `out` to [`SYSCALL_PORT`] from the user stub at [`STUB_VA`]: the program executed
//!   `syscall`, which on our hosts lands in ring 3 at LSTAR (the stub). The monitor serves it and
//!   resumes at RCX with RFLAGS from R11, as `sysret` would.
//! * `out` to `EXCEPTION_PORT_BASE + v` from a ring-0 gate: ring-3 code raised exception `v`.
//!   The monitor reads the hardware frame from the ring-0 stack and CR2, lets the syscall core
//!   decide, and resumes ring 3 directly (no `iretq` through emulated ring 0).
//! * `out` to [`PTSYNC_PORT`]: the ring-0 page-table sync routine finished (see
//!   [`crate::paging`]).
//!
//! Registers move through the `kvm_run` sync-regs area, so a syscall costs one exit and no
//! register ioctls.
//!
//! This module holds the VM, its construction and the CPU set-up (long mode, segments, MSRs,
//! the monitor's structures in guest memory); [`run`] is the exit loop (registers, page-table
//! sync, thread switches, syscalls and exceptions), and [`state`] reads and writes the vCPU
//! state that snapshots and forks carry (registers, thread contexts, the dirty log).

use std::time::Instant;

use deja_kernel::{
    Exception, ExceptionOutcome, ExitStatus, Kernel, Memory, Prot, Stream, SyscallOutcome, UserContext, ARITH_FLAGS,
    FPU_BYTES, PAGE_SIZE,
};
use deja_rewrite::Channel;
use kvm_bindings::{
    kvm_cpuid_entry2, kvm_fpu, kvm_msr_entry, kvm_regs, kvm_segment, kvm_sregs, kvm_userspace_memory_region, kvm_xcrs,
    kvm_xsave, CpuId, Msrs, KVM_CPUID_FLAG_SIGNIFCANT_INDEX,
};
use kvm_ioctls::{Cap, Kvm, SyncReg, VcpuExit, VcpuFd, VmFd};
use vm_memory::{GuestAddress, GuestMemoryBackend};

use std::sync::Arc;

use crate::coverage::{BlockHit, BlockImage, Seen, INT3};
use crate::layout::*;
use crate::paging::{AddressSpace, RamError, PTE_A, PTE_D, PTE_P, PTE_PS, PTE_U, PTE_W};
use deja_kernel::host::cpuid;
use deja_kernel::host::jumps;

mod debug;
mod run;
mod state;
mod window;
pub(crate) use window::GuestStop;

pub use debug::UserRegs;
pub(crate) use run::ProbeAnswer;
pub use run::Stop;
pub use state::{VcpuState, SNAPSHOT_MSRS};

/// Errors of the KVM shell. Guest misbehaviour is never one of these: it ends the guest.
#[derive(Debug, snafu::Snafu)]
pub enum VmError {
    /// `/dev/kvm` is missing or not accessible.
    #[snafu(display(
        "cannot open /dev/kvm ({source}); deja needs KVM: check that the kvm module is loaded and you may open /dev/kvm (run `deja doctor`)"
    ))]
    NoKvm {
        /// The error opening it.
        source: kvm_ioctls::Error,
    },
    /// A KVM capability deja needs is missing.
    #[snafu(display("this host's KVM lacks the capability {name}; run `deja doctor`"))]
    MissingCap {
        /// The capability.
        name: &'static str,
    },
    /// An ioctl failed.
    #[snafu(display("KVM refused {what}"))]
    Ioctl {
        /// Which operation.
        what: &'static str,
        /// The error.
        source: kvm_ioctls::Error,
    },
    /// Guest RAM could not be set up.
    #[snafu(transparent)]
    Ram {
        /// Why.
        source: RamError,
    },
    /// The host cannot give the CPU identity asked for (`DEJA_CPU_IDENTITY`), or measuring it
    /// failed.
    #[snafu(display("CPU identity: {message}"))]
    Config {
        /// What is wrong.
        message: String,
    },
    /// The guest ran guest code for longer than the watchdog allows without a syscall or an
    /// exception ([`crate::watchdog`]): not a bug found, and not deja failing.
    #[snafu(display(
        "NO_PROGRESS: the program (thread {thread}) ran {ms} ms of host time without a syscall or an exception, \
         after syscall {syscalls} (rip {rip:#x}){signals}; deja cannot tell a long computation from a loop that never ends: if it is the \
         former, raise DEJA_NO_PROGRESS_S (seconds; 0 turns the watchdog off)"
    ))]
    NoProgress {
        /// Host time since the last guest event, ms.
        ms: u64,
        /// Syscalls served before it.
        syscalls: u64,
        /// Where the guest was when deja gave up.
        rip: u64,
        /// The thread that was running.
        thread: u64,
        /// Who waits behind it: the other runnable threads and the signals it has pending and
        /// does not block, as words (empty if none).
        signals: String,
    },
    /// The VM stopped in a way the monitor does not understand (a monitor bug or a host quirk).
    #[snafu(display(
        "the VM stopped unexpectedly: {what} (rip {rip:#x}); please report this with `deja doctor --json`"
    ))]
    Unexpected {
        /// What happened.
        what: String,
        /// Instruction pointer at the stop.
        rip: u64,
    },
}

fn ioctl<T>(what: &'static str, r: Result<T, kvm_ioctls::Error>) -> Result<T, VmError> {
    r.map_err(|source| VmError::Ioctl { what, source })
}

/// Counters of one run, for the summary and the benchmarks.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct VmStats {
    /// VM exits handled.
    pub exits: u64,
    /// Exits that were syscalls.
    pub syscall_exits: u64,
    /// Exits that were CPU exceptions (including demand paging).
    pub exception_exits: u64,
    /// Ring-0 page-table syncs.
    pub pt_syncs: u64,
    /// Calls of the kernel in the guest to the monitor (the guest placement: page operations,
    /// output, FS/GS bases, exceptions served, the end).
    pub host_calls: u64,
    /// Switches between guest threads.
    pub thread_switches: u64,
    /// Signal handlers entered (a fault or a sent signal delivered on a frame).
    pub signals: u64,
    /// Ring-3 `cpuid` instructions that trapped (a rewritten site, or CPUID faulting) and were
    /// answered by deja.
    pub cpuid_exits: u64,
    /// Traps at rewritten sites (`cpuid`, `rdtsc`, `rdrand`... rewritten to `ud2`) answered by
    /// deja.
    pub rewrite_exits: u64,
    /// Coverage breakpoints hit (a block reached for the first time; not counted as
    /// exceptions: the guest never sees them).
    pub breakpoint_exits: u64,
    /// Exits that interrupted the guest for the host's sake (a signal): not a guest event, and
    /// not part of any digest.
    pub interrupted_exits: u64,
    /// Wall time spent inside `KVM_RUN`, in nanoseconds (host time; display only).
    pub host_run_ns: u64,
    /// The host cores the vCPU thread was seen on after its exits, in order (display only).
    pub host_cores: Vec<u32>,
}

impl VmStats {
    fn saw_core(&mut self, core: Option<u32>) {
        if let Some(c) = core {
            if let Err(i) = self.host_cores.binary_search(&c) {
                self.host_cores.insert(i, c);
            }
        }
    }
}

const RFLAGS_FIXED: u64 = 0x2;
const RFLAGS_IF: u64 = 0x200;
const RFLAGS_RF: u64 = 0x1_0000;

const MSR_STAR: u32 = 0xc000_0081;
const MSR_LSTAR: u32 = 0xc000_0082;
const MSR_CSTAR: u32 = 0xc000_0083;
const MSR_SFMASK: u32 = 0xc000_0084;
const MSR_KERNEL_GS_BASE: u32 = 0xc000_0102;
const MSR_TSC: u32 = 0x10;
const MSR_PLATFORM_INFO: u32 = 0xce;
const MSR_MISC_FEATURES_ENABLES: u32 = 0x140;
/// `MSR_PLATFORM_INFO` bit 31: CPUID faulting is supported.
const PLATFORM_INFO_CPUID_FAULTING: u64 = 1 << 31;
/// `MSR_MISC_FEATURES_ENABLES` bit 0: ring-3 CPUID raises #GP.
const MISC_FEATURES_CPUID_FAULT: u64 = 1;

const CR0_PE: u64 = 1;
const CR0_MP: u64 = 1 << 1;
const CR0_ET: u64 = 1 << 4;
const CR0_NE: u64 = 1 << 5;
const CR0_WP: u64 = 1 << 16;
const CR0_PG: u64 = 1 << 31;
const CR4_TSD: u64 = 1 << 2;
const CR4_PAE: u64 = 1 << 5;
const CR4_OSFXSR: u64 = 1 << 9;
const CR4_OSXMMEXCPT: u64 = 1 << 10;
const CR4_OSXSAVE: u64 = 1 << 18;
const EFER_SCE: u64 = 1;
const EFER_LME: u64 = 1 << 8;
const EFER_LMA: u64 = 1 << 10;
const EFER_NXE: u64 = 1 << 11;

/// The user stub: `out %al, $SYSCALL_PORT; hlt; jmp .-1`.
const USER_STUB: [u8; 5] = [0xe6, SYSCALL_PORT as u8, 0xf4, 0xeb, 0xfd];

/// Where the jump sites' gate lies in the stub's page: the kernel's [`jumps::GATE`], which must
/// be in that page.
const GATE_OFFSET: u64 = jumps::GATE - STUB_VA;
const _: () = assert!(jumps::GATE >= STUB_VA && GATE_OFFSET >= USER_STUB.len() as u64 && GATE_OFFSET + 14 <= 4096);

/// The ring-0 page-table sync routine. RSI points at `RCX` pairs of (PTE address, user address);
/// each PTE is written with its own value (so a shadow MMU sees the write) and the user address
/// is invalidated:
///
/// ```text
/// 1: mov (%rsi),%rdi ; mov (%rdi),%rax ; mov %rax,(%rdi)
///    mov 8(%rsi),%rdi ; invlpg (%rdi) ; add $16,%rsi ; dec %rcx ; jnz 1b
///    out %al,$PTSYNC_PORT ; hlt
/// ```
const PTSYNC_CODE: [u8; 28] = [
    0x48,
    0x8b,
    0x3e,
    0x48,
    0x8b,
    0x07,
    0x48,
    0x89,
    0x07,
    0x48,
    0x8b,
    0x7e,
    0x08,
    0x0f,
    0x01,
    0x3f,
    0x48,
    0x83,
    0xc6,
    0x10,
    0x48,
    0xff,
    0xc9,
    0x75,
    0xe7,
    0xe6,
    PTSYNC_PORT as u8,
    0xf4,
];

/// Vectors for which the CPU pushes an error code.
fn has_error_code(vector: u8) -> bool {
    matches!(vector, 8 | 10..=14 | 17 | 21 | 29 | 30)
}

fn segment(selector: u16, code: bool, dpl: u8) -> kvm_segment {
    kvm_segment {
        base: 0,
        limit: 0xffff_ffff,
        selector,
        type_: if code { 11 } else { 3 },
        present: 1,
        dpl,
        db: if code { 0 } else { 1 },
        s: 1,
        l: if code { 1 } else { 0 },
        g: 1,
        avl: 0,
        unusable: 0,
        padding: 0,
    }
}

/// How registers travel between the monitor and KVM on each exit.
///
/// Both paths were measured (`deja bench`); the monitor uses [`RegisterPath::SyncRegs`], the
/// other is kept so the comparison can be re-run on any host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RegisterPath {
    /// Registers in the `kvm_run` sync-regs area: no register ioctl per exit.
    #[default]
    SyncRegs,
    /// `KVM_GET_REGS`/`KVM_GET_SREGS` after each exit and `KVM_SET_REGS`/`KVM_SET_SREGS` before
    /// each entry that changed them.
    Ioctls,
}

/// Where the guest's CPUID answers come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CpuidSource {
    /// Ring-3 `cpuid` traps (CPUID faulting) and deja answers from its table.
    Faulting,
    /// KVM answers from the entries deja installed, as far as the host honours them.
    KvmTable,
}

/// How a VM's CPU identity is set up (see [`crate::identity`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuSetup {
    /// Enable CPUID faulting, so that ring-3 `cpuid` traps and deja answers it.
    pub faulting: bool,
    /// Pin the thread that runs the vCPU to this host core.
    pub pin: Option<u32>,
}

/// One deja VM: KVM handles, guest RAM with its page tables, and the vCPU.
#[derive(Debug)]
pub struct Vm {
    _kvm: Kvm,
    _vm: VmFd,
    vcpu: VcpuFd,
    /// Guest RAM and page tables.
    pub space: AddressSpace,
    /// Counters.
    pub stats: VmStats,
    fs_base: u64,
    gs_base: u64,
    host_addr: u64,
    threads: std::collections::BTreeMap<u64, ThreadContext>,
    current_tid: u64,
    path: RegisterPath,
    dirty_regs: bool,
    dirty_sregs: bool,
    setup: CpuSetup,
    /// Coverage breakpoints hit since the last [`Vm::take_block_hits`].
    pub(crate) block_hits: Vec<BlockHit>,
    /// Each distinct count of the core's decisions at a syscall's trap since the last reset,
    /// ascending: where a later fork of this course can be taken.
    pub(crate) cuts: Vec<u64>,
    /// Stop at the first syscall trap with this many decisions taken, when the syscall can be
    /// made again from there ([`crate::Session::run_to_decisions`]).
    pub(crate) stop_at_decisions: Option<u64>,
    /// The last stop at a decision count was not taken: its syscall was not made by a
    /// `syscall` instruction.
    pub(crate) late_refused: bool,
    /// The XSAVE image of a fresh vCPU: what a program starts with (at boot and after
    /// `execve`).
    boot_xsave: XsaveImage,
    /// Host time guest code may run without a syscall or an exception ([`crate::watchdog`];
    /// `None`: no limit).
    no_progress: Option<std::time::Duration>,
}

/// A whole XSAVE region (4 KiB), kept without printing it.
struct XsaveImage(Box<[u32; 1024]>);

impl std::fmt::Debug for XsaveImage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("XsaveImage")
    }
}

impl Vm {
    /// [`Vm::new`] with an explicit CPU identity setup (for the probe).
    pub fn with_setup(memory: u64, setup: CpuSetup) -> Result<Vm, VmError> {
        let kvm = Kvm::new().map_err(|source| VmError::NoKvm { source })?;
        for (cap, name) in
            [(Cap::SyncRegs, "KVM_CAP_SYNC_REGS"), (Cap::Xcrs, "KVM_CAP_XCRS"), (Cap::ExtCpuid, "KVM_CAP_EXT_CPUID")]
        {
            if !kvm.check_extension(cap) {
                return Err(VmError::MissingCap { name });
            }
        }
        let vm = ioctl("KVM_CREATE_VM", kvm.create_vm())?;
        let mut space = AddressSpace::new(memory)?;
        let host = space.ram().get_host_address(GuestAddress(0)).map_err(|_| RamError::Alloc { mib: memory >> 20 })?;
        let region = kvm_userspace_memory_region {
            slot: 0,
            flags: 0,
            guest_phys_addr: 0,
            memory_size: memory,
            userspace_addr: host as u64,
        };
        // SAFETY: `host` is the start of a live anonymous mapping of `memory` bytes owned by
        // `space.ram()`, which lives in the returned `Vm` next to the VM fd and so outlives
        // every use the guest makes of it; the slot is new and does not overlap another slot.
        ioctl("KVM_SET_USER_MEMORY_REGION", unsafe { vm.set_user_memory_region(region) })?;
        // Needed by some Intel hosts for real-mode emulation; harmless elsewhere.
        let _ = vm.set_tss_address(0xfffb_d000);
        let vcpu = ioctl("KVM_CREATE_VCPU", vm.create_vcpu(0))?;

        write_monitor_structures(&mut space).map_err(|_| RamError::Size { mib: memory >> 20 })?;

        let mut vmx = Vm {
            _kvm: kvm,
            _vm: vm,
            vcpu,
            space,
            stats: VmStats::default(),
            fs_base: 0,
            gs_base: 0,
            host_addr: host as u64,
            threads: std::collections::BTreeMap::new(),
            current_tid: 1,
            path: RegisterPath::SyncRegs,
            dirty_regs: false,
            dirty_sregs: false,
            setup,
            block_hits: Vec::new(),
            cuts: Vec::new(),
            stop_at_decisions: None,
            late_refused: false,
            boot_xsave: XsaveImage(Box::new([0; 1024])),
            no_progress: Some(crate::watchdog::DEFAULT_LIMIT),
        };
        vmx.setup_cpu()?;
        vmx.boot_xsave = XsaveImage(Box::new(ioctl("KVM_GET_XSAVE", vmx.vcpu.get_xsave())?.region));
        if setup.faulting && !vmx.try_enable_cpuid_faulting()? {
            return Err(VmError::Config { message: "this host stopped offering CPUID faulting to a new VM".into() });
        }
        Ok(vmx)
    }

    /// Arms block coverage ([`crate::coverage`]): an `int3` at the first byte of every block of
    /// `blocks` not in `seen`, in the loaded image; the core is shown the original bytes.
    /// Returns how many breakpoints were set.
    pub fn arm_blocks(&mut self, blocks: Arc<BlockImage>, seen: &Seen) -> usize {
        let mut armed = 0;
        for id in 0..blocks.image_len() {
            if seen.contains(id) || blocks.find(blocks.addr(id).unwrap_or(0)) != Some(id) {
                continue;
            }
            if self.space.poke(blocks.addr(id).unwrap_or(0), INT3) {
                armed += 1;
            }
        }
        self.space.set_blocks(Some(blocks));
        self.space.set_seen(seen.clone());
        armed
    }

    /// Puts back the original byte of each block of `ids` (seen by the campaign), in every
    /// space running the armed program or mapping the block's shared object, and keeps the
    /// shared objects mapped from now on from arming them.
    pub fn disarm_blocks(&mut self, ids: &[u32]) {
        for &id in ids {
            self.space.restore_block(id as usize);
            self.space.see(id as usize);
        }
    }

    /// Records that block `id` was reached (with the core's decision count) and puts its byte
    /// back.
    fn hit_block(&mut self, id: usize, decision: u64) {
        self.stats.breakpoint_exits += 1;
        self.space.restore_block(id);
        self.block_hits.push(BlockHit { block: id as u32, decision });
    }

    /// The coverage breakpoints hit since the last call.
    pub fn take_block_hits(&mut self) -> Vec<BlockHit> {
        std::mem::take(&mut self.block_hits)
    }

    /// The cuts of the course since the last reset (see [`crate::Run::cuts`]).
    pub fn take_cuts(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.cuts)
    }

    /// Turns on CPUID faulting if the host offers it: returns whether ring-3 `cpuid` now traps.
    pub(crate) fn try_enable_cpuid_faulting(&mut self) -> Result<bool, VmError> {
        let msr = |index, data| kvm_msr_entry { index, data, ..Default::default() };
        let list = |entries: &[kvm_msr_entry]| {
            Msrs::from_entries(entries).map_err(|_| VmError::Unexpected { what: "MSR list too large".into(), rip: 0 })
        };
        let mut info = list(&[msr(MSR_PLATFORM_INFO, 0)])?;
        if !matches!(self.vcpu.get_msrs(&mut info), Ok(1))
            || info.as_slice()[0].data & PLATFORM_INFO_CPUID_FAULTING == 0
        {
            return Ok(false);
        }
        if !matches!(self.vcpu.set_msrs(&list(&[msr(MSR_MISC_FEATURES_ENABLES, MISC_FEATURES_CPUID_FAULT)])?), Ok(1)) {
            return Ok(false);
        }
        let mut back = list(&[msr(MSR_MISC_FEATURES_ENABLES, 0)])?;
        Ok(matches!(self.vcpu.get_msrs(&mut back), Ok(1)) && back.as_slice()[0].data & MISC_FEATURES_CPUID_FAULT != 0)
    }

    /// Pins the calling thread to the setup's core, if it names one.
    fn pin_thread(&self) -> Result<(), VmError> {
        match self.setup.pin {
            Some(core) => crate::affinity::pin_current_thread(core).map_err(|e| VmError::Config {
                message: format!("cannot pin the vCPU thread to host core {core}: {e}"),
            }),
            None => Ok(()),
        }
    }

    /// Gives KVM the CPUID table of a program shown `cpus` CPUs
    /// ([`deja_kernel::host::cpuid::table_for`]), so that a `cpuid` the vCPU runs itself answers what
    /// deja's own answers say. Only before the vCPU first runs (a VM is made with one CPU's).
    pub fn show_cpus(&mut self, cpus: u32) -> Result<(), VmError> {
        if cpus > 1 {
            self.set_cpuid_table(cpus)?;
        }
        Ok(())
    }

    fn set_cpuid_table(&mut self, cpus: u32) -> Result<(), VmError> {
        let entries: Vec<kvm_cpuid_entry2> = deja_kernel::host::cpuid::table_for(cpus)
            .iter()
            .map(|l| kvm_cpuid_entry2 {
                function: l.function,
                index: l.index,
                flags: if l.indexed { KVM_CPUID_FLAG_SIGNIFCANT_INDEX } else { 0 },
                eax: l.eax,
                ebx: l.ebx,
                ecx: l.ecx,
                edx: l.edx,
                ..Default::default()
            })
            .collect();
        let cpuid = CpuId::from_entries(&entries)
            .map_err(|_| VmError::Unexpected { what: "CPUID table too large".into(), rip: 0 })?;
        ioctl("KVM_SET_CPUID2", self.vcpu.set_cpuid2(&cpuid))?;
        Ok(())
    }

    fn setup_cpu(&mut self) -> Result<(), VmError> {
        self.set_cpuid_table(1)?;

        let mut sregs = ioctl("KVM_GET_SREGS", self.vcpu.get_sregs())?;
        sregs.cr0 = CR0_PE | CR0_MP | CR0_ET | CR0_NE | CR0_WP | CR0_PG;
        sregs.cr3 = PML4_PHYS;
        sregs.cr4 = CR4_PAE | CR4_TSD | CR4_OSFXSR | CR4_OSXMMEXCPT | CR4_OSXSAVE;
        sregs.efer = EFER_SCE | EFER_LME | EFER_LMA | EFER_NXE;
        sregs.gdt.base = direct(GDT_PHYS);
        sregs.gdt.limit = 8 * 9 - 1;
        sregs.idt.base = direct(IDT_PHYS);
        sregs.idt.limit = 16 * 256 - 1;
        sregs.tr = kvm_segment {
            base: direct(TSS_PHYS),
            limit: TSS_LIMIT,
            selector: TSS_SEL,
            type_: 11,
            present: 1,
            dpl: 0,
            db: 0,
            s: 0,
            l: 0,
            g: 0,
            avl: 0,
            unusable: 0,
            padding: 0,
        };
        set_user_segments(&mut sregs);
        ioctl("KVM_SET_SREGS", self.vcpu.set_sregs(&sregs))?;

        let fpu = kvm_fpu { fcw: 0x37f, mxcsr: 0x1f80, ..Default::default() };
        ioctl("KVM_SET_FPU", self.vcpu.set_fpu(&fpu))?;

        let mut xcrs = kvm_xcrs { nr_xcrs: 1, ..Default::default() };
        xcrs.xcrs[0].xcr = 0;
        xcrs.xcrs[0].value = cpuid::XCR0;
        ioctl("KVM_SET_XCRS", self.vcpu.set_xcrs(&xcrs))?;

        let msr = |index, data| kvm_msr_entry { index, data, ..Default::default() };
        let msrs = Msrs::from_entries(&[
            msr(MSR_STAR, (0x23u64 << 48) | ((KERNEL_CS as u64) << 32)),
            msr(MSR_LSTAR, STUB_VA),
            msr(MSR_CSTAR, STUB_VA),
            msr(MSR_SFMASK, 0x4_7700),
            msr(MSR_KERNEL_GS_BASE, 0),
            msr(MSR_TSC, 0),
        ])
        .map_err(|_| VmError::Unexpected { what: "MSR list too large".into(), rip: 0 })?;
        let n = ioctl("KVM_SET_MSRS", self.vcpu.set_msrs(&msrs))?;
        if n < 4 {
            return Err(VmError::Unexpected { what: format!("KVM accepted only {n} of the syscall MSRs"), rip: 0 });
        }
        Ok(())
    }

    /// Places the vCPU in ring 3 at `rip` with stack `rsp`, all other registers zero (as Linux
    /// starts a process: RDX = 0 means no `rtld_fini`).
    pub fn enter_user(&mut self, rip: u64, rsp: u64, rbp: u64) -> Result<(), VmError> {
        let regs = kvm_regs { rip, rsp, rbp, rflags: RFLAGS_FIXED | RFLAGS_IF, ..Default::default() };
        ioctl("KVM_SET_REGS", self.vcpu.set_regs(&regs))?;
        let sregs = ioctl("KVM_GET_SREGS", self.vcpu.get_sregs())?;
        // The sync area holds the vCPU's registers from here on, before any exit fills it: a
        // change made before the first run (CR3 following the current space) starts from them.
        let sync = self.vcpu.sync_regs_mut();
        sync.regs = regs;
        sync.sregs = sregs;
        if self.path == RegisterPath::SyncRegs {
            self.vcpu.set_sync_valid_reg(SyncReg::Register);
            self.vcpu.set_sync_valid_reg(SyncReg::SystemRegister);
        }
        Ok(())
    }

    /// Sets the watchdog's limit: host time guest code may run without a syscall or an
    /// exception (`None`: no limit; [`crate::watchdog::DEFAULT_LIMIT`] until set).
    pub fn set_no_progress(&mut self, limit: Option<std::time::Duration>) {
        self.no_progress = limit;
    }

    /// Chooses how registers travel on each exit (call before the first run).
    pub fn set_register_path(&mut self, path: RegisterPath) {
        self.path = path;
        if path == RegisterPath::Ioctls {
            self.vcpu.clear_sync_valid_reg(SyncReg::Register);
            self.vcpu.clear_sync_valid_reg(SyncReg::SystemRegister);
        }
    }
}

fn set_user_segments(sregs: &mut kvm_sregs) {
    sregs.cs = segment(USER_CS, true, 3);
    let data = segment(USER_SS, false, 3);
    sregs.ss = data;
    sregs.ds = data;
    sregs.es = data;
    let fs = sregs.fs.base;
    sregs.fs = data;
    sregs.fs.base = fs;
    let gs = sregs.gs.base;
    sregs.gs = data;
    sregs.gs.base = gs;
}

fn set_kernel_segments(sregs: &mut kvm_sregs) {
    sregs.cs = segment(KERNEL_CS, true, 0);
    sregs.ss = segment(KERNEL_SS, false, 0);
}

/// Writes GDT, IDT, TSS, stubs, the direct map and the stub mapping into fresh guest RAM.
fn write_monitor_structures(space: &mut AddressSpace) -> Result<(), deja_kernel::MemError> {
    // GDT in Linux's layout, so ring-3 code reads CS/SS as 0x33/0x2b.
    let gdt: [u64; 9] = [
        0,
        0x00cf_9b00_0000_ffff, // 0x08 kernel code 32
        0x00af_9b00_0000_ffff, // 0x10 kernel code 64
        0x00cf_9300_0000_ffff, // 0x18 kernel data
        0x00cf_fb00_0000_ffff, // 0x20 user code 32
        0x00cf_f300_0000_ffff, // 0x28 user data
        0x00af_fb00_0000_ffff, // 0x30 user code 64
        tss_low(direct(TSS_PHYS), TSS_LIMIT),
        direct(TSS_PHYS) >> 32,
    ];
    for (i, d) in gdt.iter().enumerate() {
        space.write_u64(GDT_PHYS + 8 * i as u64, *d);
    }

    // IDT: one interrupt gate per exception vector; #BP and #OF may be raised from ring 3.
    for v in 0..32u64 {
        let handler = direct(R0_CODE_PHYS + v * R0_GATE_STRIDE);
        let dpl: u64 = if v == 3 || v == 4 { 3 } else { 0 };
        let low = (handler & 0xffff)
            | ((KERNEL_CS as u64) << 16)
            | ((0x8e | (dpl << 5)) << 40)
            | ((handler >> 16) & 0xffff) << 48;
        space.write_u64(IDT_PHYS + 16 * v, low);
        space.write_u64(IDT_PHYS + 16 * v + 8, handler >> 32);
        // Gate code: out %al, $(base+v); hlt; jmp .-1
        space.write_phys(
            R0_CODE_PHYS + v * R0_GATE_STRIDE,
            &[0xe6, (EXCEPTION_PORT_BASE as u64 + v) as u8, 0xf4, 0xeb, 0xfd],
        );
    }
    space.write_phys(R0_CODE_PHYS + R0_PTSYNC_OFFSET, &PTSYNC_CODE);
    space.write_phys(USER_STUB_PHYS, &USER_STUB);
    // The gate jump sites reach (`deja_kernel::host::jumps`): back to their `syscall`.
    space.write_phys(USER_STUB_PHYS + GATE_OFFSET, &jumps::HOST_GATE);

    // TSS: RSP0 and an I/O bitmap that opens only the syscall port.
    space.write_u64(TSS_PHYS + 4, direct(R0_STACK_PHYS + PAGE_SIZE));
    space.write_phys(TSS_PHYS + 0x66, &(TSS_IOMAP_OFFSET as u16).to_le_bytes());
    let mut bitmap = vec![0xffu8; 8192 + 1];
    bitmap[(SYSCALL_PORT / 8) as usize] &= !(1 << (SYSCALL_PORT % 8));
    space.write_phys(TSS_PHYS + TSS_IOMAP_OFFSET, &bitmap);

    // Supervisor-only direct map of all RAM in 2 MiB pages.
    let pml4_slot = PML4_PHYS + ((DIRECT_MAP >> 39) & 0x1ff) * 8;
    let pdpt = space.alloc_frame()?;
    space.write_u64(pml4_slot, pdpt | PTE_P | PTE_W | PTE_A);
    space.note_page_table(pdpt, 2, DIRECT_MAP);
    let two_mib = 2u64 << 20;
    let mut phys = 0;
    while phys < space.size() {
        let gib = phys >> 30;
        let pdpt_slot = pdpt + gib * 8;
        let mut pd = space.read_u64(pdpt_slot) & crate::paging::PTE_ADDR;
        if pd == 0 {
            pd = space.alloc_frame()?;
            space.write_u64(pdpt_slot, pd | PTE_P | PTE_W | PTE_A);
            space.note_page_table(pd, 1, DIRECT_MAP + (gib << 30));
        }
        space.write_u64(pd + ((phys >> 21) & 0x1ff) * 8, phys | PTE_P | PTE_W | PTE_PS | PTE_A | PTE_D);
        phys += two_mib;
    }

    // The syscall stub: user-readable and executable, not writable.
    space.map_page(STUB_VA, USER_STUB_PHYS, PTE_P | PTE_U | PTE_A)?;
    Ok(())
}

fn tss_low(base: u64, limit: u32) -> u64 {
    let limit = limit as u64;
    (limit & 0xffff)
        | ((base & 0xff_ffff) << 16)
        | (0x89u64 << 40)
        | (((limit >> 16) & 0xf) << 48)
        | (((base >> 24) & 0xff) << 56)
}

/// A thread that is not running: what the vCPU needs to resume it (saved in snapshots and
/// kept by forks).
#[derive(serde::Serialize, serde::Deserialize)]
pub struct ThreadContext {
    regs: kvm_regs,
    xsave: kvm_xsave,
    fs_base: u64,
    gs_base: u64,
}

impl Clone for ThreadContext {
    fn clone(&self) -> Self {
        // `kvm_xsave` ends in a zero-length flexible array and so is not `Clone`; its state is
        // all in `region`.
        ThreadContext {
            regs: self.regs,
            xsave: kvm_xsave { region: self.xsave.region, ..Default::default() },
            fs_base: self.fs_base,
            gs_base: self.gs_base,
        }
    }
}

impl std::fmt::Debug for ThreadContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadContext").field("rip", &self.regs.rip).field("fs_base", &self.fs_base).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CODE_VA: u64 = 0x40_0000;
    const DATA_VA: u64 = 0x60_0000;

    /// `movl $v, DATA_VA; syscall`
    fn store(v: u32) -> Vec<u8> {
        let mut code = vec![0xc7, 0x04, 0x25];
        code.extend_from_slice(&(DATA_VA as u32).to_le_bytes());
        code.extend_from_slice(&v.to_le_bytes());
        code.extend_from_slice(&[0x0f, 0x05]);
        code
    }

    fn word(vm: &Vm, space: u64) -> u32 {
        let gpa = vm.space.translate_in(space, DATA_VA).unwrap();
        let mut b = [0u8; 4];
        vm.space.read_phys(gpa, &mut b);
        u32::from_le_bytes(b)
    }

    /// Runs the raw code at `CODE_VA` to its syscall (no exception expected).
    fn run(vm: &mut Vm) {
        vm.enter_user(CODE_VA, DATA_VA + 0x800, 0).unwrap();
        let none = |_: u64, _: u8, _: &[u64; 16]| None;
        assert_eq!(vm.run_probe(&none).unwrap(), vec![]);
    }

    #[test]
    fn the_guest_runs_in_the_space_switched_to() {
        if !std::path::Path::new("/dev/kvm").exists() {
            eprintln!("skipped: no /dev/kvm");
            return;
        }
        let mut vm = Vm::with_setup(16 << 20, CpuSetup { faulting: false, pin: None }).unwrap();
        vm.load_raw(CODE_VA, &store(0x1111), DATA_VA).unwrap();
        let first = vm.space.space();
        let second = vm.space.fork_space(&[]).unwrap();
        vm.space.switch_space(second);
        vm.space.write(CODE_VA, &store(0x2222)).unwrap();
        // The data page is copy-on-write in both spaces: what the core's page-fault path
        // does for a store, each space's frame of its own, done ahead (the raw code has no
        // fault handler).
        assert!(vm.space.unshare(DATA_VA).unwrap());

        run(&mut vm);
        assert_eq!(vm.vcpu.sync_regs().sregs.cr3, second);
        assert_eq!((word(&vm, first), word(&vm, second)), (0, 0x2222));

        vm.space.switch_space(first);
        assert!(vm.space.unshare(DATA_VA).unwrap());
        run(&mut vm);
        assert_eq!(vm.vcpu.sync_regs().sregs.cr3, first);
        assert_eq!((word(&vm, first), word(&vm, second)), (0x1111, 0x2222));

        // A dropped space's entries are replayed from ring 0 before the guest runs again, in
        // the current space, which the vCPU stays in.
        vm.space.drop_space(second);
        assert!(vm.space.has_stale());
        let syncs = vm.stats.pt_syncs;
        // The next space takes the dropped one's frames: its PML4 is the dropped PML4.
        let third = vm.space.fork_space(&[]).unwrap();
        assert_eq!(third, second);
        vm.space.switch_space(third);
        vm.space.write(CODE_VA, &store(0x3333)).unwrap();
        assert!(vm.space.unshare(DATA_VA).unwrap());
        run(&mut vm);
        assert_eq!(vm.stats.pt_syncs, syncs + 1);
        assert!(!vm.space.has_stale());
        assert_eq!(vm.vcpu.sync_regs().sregs.cr3, third);
        assert_eq!((word(&vm, first), word(&vm, third)), (0x1111, 0x3333));

        // `execve`'s reset: the program's first registers and the boot XSAVE image.
        let mut x = vm.vcpu.get_xsave().unwrap();
        x.region[6] = 0x9f80; // MXCSR with FZ
                              // SAFETY: a whole 4 KiB `kvm_xsave` read back from this vCPU, one MXCSR bit changed.
        unsafe { vm.vcpu.set_xsave(&x) }.unwrap();
        vm.start_program(deja_kernel::Entry { rip: CODE_VA, rsp: DATA_VA + 0x100 }).unwrap();
        let r = vm.vcpu.sync_regs().regs;
        assert_eq!((r.rip, r.rsp, r.rax, r.rcx, r.rflags), (CODE_VA, DATA_VA + 0x100, 0, 0, RFLAGS_FIXED | RFLAGS_IF));
        assert_eq!(vm.vcpu.get_xsave().unwrap().region[..], vm.boot_xsave.0[..]);
        assert_eq!(vm.bases(), (0, 0));
    }
}
