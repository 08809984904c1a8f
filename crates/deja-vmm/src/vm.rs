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

use std::time::Instant;

use deja_kernel::{Exception, ExceptionOutcome, ExitStatus, Kernel, Memory, Prot, Stream, SyscallOutcome, PAGE_SIZE};
use kvm_bindings::{
    kvm_cpuid_entry2, kvm_fpu, kvm_msr_entry, kvm_regs, kvm_segment, kvm_sregs, kvm_userspace_memory_region, kvm_xcrs,
    kvm_xsave, CpuId, Msrs, KVM_CPUID_FLAG_SIGNIFCANT_INDEX,
};
use kvm_ioctls::{Cap, Kvm, SyncReg, VcpuExit, VcpuFd, VmFd};
use vm_memory::{GuestAddress, GuestMemoryBackend};

use crate::identity::CpuidSource;
use crate::layout::*;
use crate::paging::{AddressSpace, RamError, PTE_A, PTE_D, PTE_P, PTE_PS, PTE_U, PTE_W};
use deja_kernel::cpuid;

/// Errors of the KVM shell. Guest misbehaviour is never one of these: it ends the guest.
#[derive(Debug, thiserror::Error)]
pub enum VmError {
    /// `/dev/kvm` is missing or not accessible.
    #[error("cannot open /dev/kvm ({0}); deja needs KVM: check that the kvm module is loaded and you may open /dev/kvm (run `deja doctor`)")]
    NoKvm(#[source] kvm_ioctls::Error),
    /// A KVM capability deja needs is missing.
    #[error("this host's KVM lacks the capability {0}; run `deja doctor`")]
    MissingCap(&'static str),
    /// An ioctl failed.
    #[error("KVM refused {what}")]
    Ioctl {
        /// Which operation.
        what: &'static str,
        /// The error.
        #[source]
        source: kvm_ioctls::Error,
    },
    /// Guest RAM could not be set up.
    #[error(transparent)]
    Ram(#[from] RamError),
    /// The host cannot give the CPU identity asked for (`DEJA_CPU_IDENTITY`), or measuring it
    /// failed.
    #[error("CPU identity: {0}")]
    Config(String),
    /// The guest ran guest code for longer than the watchdog allows without a syscall or an
    /// exception ([`crate::watchdog`]): not a bug found, and not deja failing.
    #[error(
        "NO_PROGRESS: the program ran {ms} ms of host time without a syscall or an exception, after syscall \
         {syscalls} (rip {rip:#x}); deja cannot tell a long computation from a loop that never ends: if it is the \
         former, raise DEJA_NO_PROGRESS_S (seconds; 0 turns the watchdog off)"
    )]
    NoProgress {
        /// Host time since the last guest event, ms.
        ms: u64,
        /// Syscalls served before it.
        syscalls: u64,
        /// Where the guest was when deja gave up.
        rip: u64,
    },
    /// The VM stopped in a way the monitor does not understand (a monitor bug or a host quirk).
    #[error("the VM stopped unexpectedly: {what} (rip {rip:#x}); please report this with `deja doctor --json`")]
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
    /// Switches between guest threads.
    pub thread_switches: u64,
    /// Ring-3 `cpuid` instructions that trapped (CPUID faulting) and were answered by deja.
    pub cpuid_exits: u64,
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
}

impl Vm {
    /// Creates a VM with `memory` bytes of RAM, the monitor's structures and a vCPU ready for
    /// ring 3 (but no program yet), with the CPU identity remedy of this process
    /// ([`crate::identity::remedy`]).
    pub fn new(memory: u64) -> Result<Vm, VmError> {
        let remedy = crate::identity::remedy()?;
        Vm::with_setup(memory, CpuSetup { faulting: remedy.cpuid == CpuidSource::Faulting, pin: remedy.pinned_core })
    }

    /// [`Vm::new`] with an explicit CPU identity setup (for the probe).
    pub fn with_setup(memory: u64, setup: CpuSetup) -> Result<Vm, VmError> {
        let kvm = Kvm::new().map_err(VmError::NoKvm)?;
        for (cap, name) in
            [(Cap::SyncRegs, "KVM_CAP_SYNC_REGS"), (Cap::Xcrs, "KVM_CAP_XCRS"), (Cap::ExtCpuid, "KVM_CAP_EXT_CPUID")]
        {
            if !kvm.check_extension(cap) {
                return Err(VmError::MissingCap(name));
            }
        }
        let vm = ioctl("KVM_CREATE_VM", kvm.create_vm())?;
        let mut space = AddressSpace::new(memory)?;
        let host = space.ram().get_host_address(GuestAddress(0)).map_err(|_| RamError::Alloc(memory >> 20))?;
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

        write_monitor_structures(&mut space).map_err(|_| RamError::Size(memory >> 20))?;

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
        };
        vmx.setup_cpu()?;
        if setup.faulting && !vmx.try_enable_cpuid_faulting()? {
            return Err(VmError::Config("this host stopped offering CPUID faulting to a new VM".into()));
        }
        Ok(vmx)
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
            Some(core) => crate::identity::pin_current_thread(core)
                .map_err(|e| VmError::Config(format!("cannot pin the vCPU thread to host core {core}: {e}"))),
            None => Ok(()),
        }
    }

    fn setup_cpu(&mut self) -> Result<(), VmError> {
        let entries: Vec<kvm_cpuid_entry2> = deja_kernel::cpuid::table()
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
        if self.path == RegisterPath::SyncRegs {
            self.vcpu.set_sync_valid_reg(SyncReg::Register);
            self.vcpu.set_sync_valid_reg(SyncReg::SystemRegister);
        }
        Ok(())
    }

    /// Chooses how registers travel on each exit (call before the first run).
    pub fn set_register_path(&mut self, path: RegisterPath) {
        self.path = path;
        if path == RegisterPath::Ioctls {
            self.vcpu.clear_sync_valid_reg(SyncReg::Register);
            self.vcpu.clear_sync_valid_reg(SyncReg::SystemRegister);
        }
    }

    fn mark_dirty(&mut self, reg: SyncReg) {
        match self.path {
            RegisterPath::SyncRegs => self.vcpu.set_sync_dirty_reg(reg),
            RegisterPath::Ioctls => match reg {
                SyncReg::Register => self.dirty_regs = true,
                _ => self.dirty_sregs = true,
            },
        }
    }

    /// For [`RegisterPath::Ioctls`]: push changed registers before entry.
    fn push_registers(&mut self) -> Result<(), VmError> {
        if self.path == RegisterPath::Ioctls {
            let sync = self.vcpu.sync_regs();
            if std::mem::take(&mut self.dirty_sregs) {
                ioctl("KVM_SET_SREGS", self.vcpu.set_sregs(&sync.sregs))?;
            }
            if std::mem::take(&mut self.dirty_regs) {
                ioctl("KVM_SET_REGS", self.vcpu.set_regs(&sync.regs))?;
            }
        }
        Ok(())
    }

    /// For [`RegisterPath::Ioctls`]: pull the registers after an exit.
    fn pull_registers(&mut self) -> Result<(), VmError> {
        if self.path == RegisterPath::Ioctls {
            let regs = ioctl("KVM_GET_REGS", self.vcpu.get_regs())?;
            let sregs = ioctl("KVM_GET_SREGS", self.vcpu.get_sregs())?;
            let sync = self.vcpu.sync_regs_mut();
            sync.regs = regs;
            sync.sregs = sregs;
        }
        Ok(())
    }

    fn kvm_run(&mut self) -> Result<Exit, VmError> {
        self.push_registers()?;
        let start = Instant::now();
        let exit = match self.vcpu.run() {
            Ok(VcpuExit::IoOut(port, _)) => Exit::Out(port),
            // Ring 3 may only reach the syscall port, and never to read it.
            Ok(VcpuExit::IoIn(port, _)) => Exit::In(port),
            Ok(VcpuExit::Hlt) => Exit::Other("hlt".into()),
            Ok(VcpuExit::Shutdown) => Exit::Other("shutdown (triple fault)".into()),
            Ok(VcpuExit::FailEntry(reason, _)) => Exit::Other(format!("entry failed ({reason:#x})")),
            Ok(VcpuExit::InternalError) => Exit::Other("KVM internal error (emulation failure)".into()),
            Ok(other) => Exit::Other(format!("{other:?}")),
            Err(e) if e.errno() == libc_eintr() => Exit::Interrupted,
            Err(source) => return Err(VmError::Ioctl { what: "KVM_RUN", source }),
        };
        self.stats.host_run_ns += start.elapsed().as_nanos() as u64;
        self.stats.exits += 1;
        if matches!(exit, Exit::Interrupted) {
            self.stats.interrupted_exits += 1;
        }
        self.stats.saw_core(crate::identity::current_core());
        self.pull_registers()?;
        Ok(exit)
    }

    fn rip(&self) -> u64 {
        self.vcpu.sync_regs().regs.rip
    }

    /// Replays stale page-table entries from ring 0 so that no CPU or shadow-MMU cache keeps a
    /// mapping the monitor removed or narrowed.
    fn pt_sync(&mut self) -> Result<(), VmError> {
        let stale = self.space.take_stale();
        self.pt_sync_entries(&stale)
    }

    /// Runs the ring-0 sync routine over `entries`: (guest-physical address of an entry, the
    /// address it maps), then returns to the interrupted state.
    pub(crate) fn pt_sync_entries(&mut self, entries: &[(u64, u64)]) -> Result<(), VmError> {
        if entries.is_empty() {
            return Ok(());
        }
        self.stats.pt_syncs += 1;
        let saved = self.vcpu.sync_regs();
        let per_batch = (CMD_SIZE / 16) as usize;
        for batch in entries.chunks(per_batch) {
            for (i, (slot, va)) in batch.iter().enumerate() {
                self.space.write_u64(CMD_PHYS + 16 * i as u64, direct(*slot));
                self.space.write_u64(CMD_PHYS + 16 * i as u64 + 8, *va);
            }
            {
                let sync = self.vcpu.sync_regs_mut();
                sync.regs = kvm_regs {
                    rip: direct(R0_CODE_PHYS + R0_PTSYNC_OFFSET),
                    rsi: direct(CMD_PHYS),
                    rcx: batch.len() as u64,
                    rsp: direct(R0_STACK_PHYS + PAGE_SIZE),
                    rflags: RFLAGS_FIXED,
                    ..Default::default()
                };
                set_kernel_segments(&mut sync.sregs);
            }
            self.mark_dirty(SyncReg::Register);
            self.mark_dirty(SyncReg::SystemRegister);
            // The watchdog's tick may interrupt the routine; it continues where it was.
            let mut exit = self.kvm_run()?;
            while matches!(exit, Exit::Interrupted) {
                exit = self.kvm_run()?;
            }
            match exit {
                Exit::Out(PTSYNC_PORT) => {}
                Exit::Out(port) if (EXCEPTION_PORT_BASE..EXCEPTION_PORT_BASE + 32).contains(&port) => {
                    return Err(VmError::Unexpected {
                        what: format!("exception {} in the page-table sync routine", port - EXCEPTION_PORT_BASE),
                        rip: self.rip(),
                    })
                }
                other => {
                    return Err(VmError::Unexpected {
                        what: format!("page-table sync stopped: {other:?}"),
                        rip: self.rip(),
                    })
                }
            }
        }
        let sync = self.vcpu.sync_regs_mut();
        sync.regs = saved.regs;
        sync.sregs = saved.sregs;
        self.mark_dirty(SyncReg::Register);
        self.mark_dirty(SyncReg::SystemRegister);
        Ok(())
    }

    /// The FS and GS bases the monitor last loaded.
    pub fn bases(&self) -> (u64, u64) {
        (self.fs_base, self.gs_base)
    }

    /// The vCPU's complete state, as a snapshot holds it.
    pub fn vcpu_state(&mut self) -> Result<crate::snapshot::VcpuState, VmError> {
        let sync = self.vcpu.sync_regs();
        let mut msrs = Msrs::from_entries(
            &crate::snapshot::SNAPSHOT_MSRS.map(|index| kvm_msr_entry { index, ..Default::default() }),
        )
        .map_err(|_| VmError::Unexpected { what: "MSR list too large".into(), rip: 0 })?;
        let n = ioctl("KVM_GET_MSRS", self.vcpu.get_msrs(&mut msrs))?;
        if n != crate::snapshot::SNAPSHOT_MSRS.len() {
            return Err(VmError::Unexpected {
                what: format!("KVM returned {n} of the snapshot MSRs"),
                rip: sync.regs.rip,
            });
        }
        Ok(crate::snapshot::VcpuState {
            regs: sync.regs,
            sregs: sync.sregs,
            xsave: ioctl("KVM_GET_XSAVE", self.vcpu.get_xsave())?,
            xcrs: ioctl("KVM_GET_XCRS", self.vcpu.get_xcrs())?,
            debugregs: ioctl("KVM_GET_DEBUGREGS", self.vcpu.get_debug_regs())?,
            events: ioctl("KVM_GET_VCPU_EVENTS", self.vcpu.get_vcpu_events())?,
            mp_state: ioctl("KVM_GET_MP_STATE", self.vcpu.get_mp_state())?,
            msrs: msrs.as_slice().to_vec(),
        })
    }

    /// Loads a complete vCPU state (into a VM that has not run, or between runs).
    pub fn set_vcpu_state(
        &mut self,
        st: &crate::snapshot::VcpuState,
        fs_base: u64,
        gs_base: u64,
    ) -> Result<(), VmError> {
        ioctl("KVM_SET_SREGS", self.vcpu.set_sregs(&st.sregs))?;
        ioctl("KVM_SET_REGS", self.vcpu.set_regs(&st.regs))?;
        // SAFETY: `st.xsave` is a whole `kvm_xsave` (4 KiB, the size KVM_SET_XSAVE reads when
        // KVM_CAP_XSAVE2 is not enabled, which deja never enables); the kernel validates its
        // contents against the guest's XCR0 and CPUID.
        ioctl("KVM_SET_XSAVE", unsafe { self.vcpu.set_xsave(&st.xsave) })?;
        ioctl("KVM_SET_XCRS", self.vcpu.set_xcrs(&st.xcrs))?;
        ioctl("KVM_SET_DEBUGREGS", self.vcpu.set_debug_regs(&st.debugregs))?;
        ioctl("KVM_SET_VCPU_EVENTS", self.vcpu.set_vcpu_events(&st.events))?;
        ioctl("KVM_SET_MP_STATE", self.vcpu.set_mp_state(st.mp_state))?;
        let msrs = Msrs::from_entries(&st.msrs)
            .map_err(|_| VmError::Unexpected { what: "MSR list too large".into(), rip: 0 })?;
        let n = ioctl("KVM_SET_MSRS", self.vcpu.set_msrs(&msrs))?;
        if n != st.msrs.len() {
            return Err(VmError::Unexpected {
                what: format!("KVM accepted {n} of {} MSRs", st.msrs.len()),
                rip: st.regs.rip,
            });
        }
        self.fs_base = fs_base;
        self.gs_base = gs_base;
        // The sync area must not push stale values over what was just set.
        self.dirty_regs = false;
        self.dirty_sregs = false;
        self.vcpu.clear_sync_dirty_reg(SyncReg::Register);
        self.vcpu.clear_sync_dirty_reg(SyncReg::SystemRegister);
        {
            let sync = self.vcpu.sync_regs_mut();
            sync.regs = st.regs;
            sync.sregs = st.sregs;
        }
        if self.path == RegisterPath::SyncRegs {
            self.vcpu.set_sync_valid_reg(SyncReg::Register);
            self.vcpu.set_sync_valid_reg(SyncReg::SystemRegister);
        }
        Ok(())
    }

    /// Loads the registers a ring-3 child can change (REGS, SREGS, XSAVE) for a fork reset;
    /// REGS and SREGS travel through the sync area, so only XSAVE costs an ioctl.
    pub(crate) fn set_child_state(
        &mut self,
        st: &crate::snapshot::VcpuState,
        fs_base: u64,
        gs_base: u64,
    ) -> Result<(), VmError> {
        // SAFETY: as in `set_vcpu_state`: a whole 4 KiB `kvm_xsave` read back from this VM.
        ioctl("KVM_SET_XSAVE", unsafe { self.vcpu.set_xsave(&st.xsave) })?;
        {
            let sync = self.vcpu.sync_regs_mut();
            sync.regs = st.regs;
            sync.sregs = st.sregs;
        }
        self.mark_dirty(SyncReg::Register);
        self.mark_dirty(SyncReg::SystemRegister);
        self.fs_base = fs_base;
        self.gs_base = gs_base;
        Ok(())
    }

    /// Turns on KVM's dirty-page log for guest RAM (for forks).
    pub fn enable_dirty_log(&mut self) -> Result<(), VmError> {
        let region = kvm_userspace_memory_region {
            slot: 0,
            flags: kvm_bindings::KVM_MEM_LOG_DIRTY_PAGES,
            guest_phys_addr: 0,
            memory_size: self.space.size(),
            userspace_addr: self.host_addr,
        };
        // SAFETY: the same live mapping as registered in `Vm::new`, only the flags change.
        ioctl("KVM_SET_USER_MEMORY_REGION", unsafe { self._vm.set_user_memory_region(region) })
    }

    /// Frames (guest-physical addresses) the guest wrote since the last call; resets the log.
    pub fn take_guest_dirty(&mut self) -> Result<Vec<u64>, VmError> {
        let bitmap = ioctl("KVM_GET_DIRTY_LOG", self._vm.get_dirty_log(0, self.space.size() as usize))?;
        let mut out = Vec::new();
        for (i, w) in bitmap.iter().enumerate() {
            let mut bits = *w;
            while bits != 0 {
                let b = bits.trailing_zeros() as u64;
                out.push((i as u64 * 64 + b) * PAGE_SIZE);
                bits &= bits - 1;
            }
        }
        Ok(out)
    }

    /// After a syscall: creates the threads the core spawned, hands woken threads their syscall
    /// results, and switches the vCPU to the thread the core chose (saving the one that ran:
    /// REGS through the sync area, XSAVE through one ioctl each way).
    fn switch_threads(&mut self, kernel: &mut Kernel) -> Result<(), VmError> {
        let spawned = kernel.take_spawned();
        if !spawned.is_empty() {
            let xsave = ioctl("KVM_GET_XSAVE", self.vcpu.get_xsave())?;
            for t in spawned {
                let mut regs = self.vcpu.sync_regs().regs;
                regs.rax = 0;
                if t.stack != 0 {
                    regs.rsp = t.stack;
                }
                let fs = t.tls.unwrap_or(self.fs_base);
                let ctx = ThreadContext {
                    regs,
                    xsave: kvm_xsave { region: xsave.region, ..Default::default() },
                    fs_base: fs,
                    gs_base: self.gs_base,
                };
                self.threads.insert(t.tid, ctx);
            }
        }
        for (tid, rax) in kernel.take_wakeup_returns() {
            if tid == self.current_tid {
                self.vcpu.sync_regs_mut().regs.rax = rax;
                self.mark_dirty(SyncReg::Register);
            } else if let Some(ctx) = self.threads.get_mut(&tid) {
                ctx.regs.rax = rax;
            }
        }
        let next = kernel.current_tid();
        if next == self.current_tid {
            return Ok(());
        }
        let Some(ctx) = self.threads.remove(&next) else {
            return Err(VmError::Unexpected {
                what: format!("the core switched to thread {next}, which the shell never created"),
                rip: self.rip(),
            });
        };
        let saved = ThreadContext {
            regs: self.vcpu.sync_regs().regs,
            xsave: ioctl("KVM_GET_XSAVE", self.vcpu.get_xsave())?,
            fs_base: self.fs_base,
            gs_base: self.gs_base,
        };
        self.threads.insert(self.current_tid, saved);
        // SAFETY: a whole 4 KiB `kvm_xsave` read back from this vCPU (see `set_vcpu_state`).
        ioctl("KVM_SET_XSAVE", unsafe { self.vcpu.set_xsave(&ctx.xsave) })?;
        self.vcpu.sync_regs_mut().regs = ctx.regs;
        self.mark_dirty(SyncReg::Register);
        self.current_tid = next;
        self.stats.thread_switches += 1;
        self.fs_base = u64::MAX; // force the bases below to be loaded
        self.apply_bases(ctx.fs_base, ctx.gs_base);
        Ok(())
    }

    /// Threads other than the running one.
    pub fn other_threads(&self) -> usize {
        self.threads.len()
    }

    /// The thread in the vCPU and the saved contexts of the other threads the core still has
    /// (for snapshots and forks; threads that exited leave contexts behind that are dropped here).
    pub fn thread_contexts(&self, kernel: &Kernel) -> (u64, Vec<(u64, ThreadContext)>) {
        let live = kernel.thread_ids();
        let others = self.threads.iter().filter(|(t, _)| live.contains(t)).map(|(t, c)| (*t, c.clone())).collect();
        (self.current_tid, others)
    }

    /// Installs the thread in the vCPU and the other threads' contexts (a restore or a fork
    /// reset; the vCPU's own registers are set separately).
    pub(crate) fn set_thread_contexts(&mut self, current: u64, others: &[(u64, ThreadContext)]) {
        self.current_tid = current;
        self.threads = others.iter().map(|(t, c)| (*t, c.clone())).collect();
    }

    fn apply_bases(&mut self, fs_base: u64, gs_base: u64) {
        if fs_base != self.fs_base || gs_base != self.gs_base {
            self.fs_base = fs_base;
            self.gs_base = gs_base;
            let sregs = &mut self.vcpu.sync_regs_mut().sregs;
            sregs.fs.base = fs_base;
            sregs.gs.base = gs_base;
            self.mark_dirty(SyncReg::SystemRegister);
        }
    }

    /// Puts a syscall's return value in RAX, resumes after the `syscall` instruction and applies
    /// the core's thread changes.
    fn finish_syscall(&mut self, kernel: &mut Kernel, value: u64) -> Result<(), VmError> {
        let r = &mut self.vcpu.sync_regs_mut().regs;
        r.rax = value;
        r.rip = r.rcx;
        r.rflags = (r.r11 & !RFLAGS_RF) | RFLAGS_FIXED;
        self.mark_dirty(SyncReg::Register);
        self.switch_threads(kernel)?;
        self.apply_bases(kernel.fs_base(), kernel.gs_base());
        Ok(())
    }

    /// Runs the program under `kernel` until it ends. Output goes to `sink` as it is written.
    pub fn run(&mut self, kernel: &mut Kernel, sink: &mut dyn FnMut(Stream, &[u8])) -> Result<ExitStatus, VmError> {
        match self.run_until(kernel, sink, None)? {
            Stop::Exited(status) => Ok(status),
            Stop::Crashed => {
                Err(VmError::Unexpected { what: "a crash was injected where none was planned".into(), rip: self.rip() })
            }
            Stop::AtSyscall | Stop::Idle | Stop::Yield => Err(VmError::Unexpected {
                what: "a lone program stopped as if it were a cluster node".into(),
                rip: self.rip(),
            }),
        }
    }

    /// Runs until the program ends ([`Stop::Exited`]), the core injects a crash
    /// ([`Stop::Crashed`]), or, when `stop_at` is `Some(n)`, until it traps for syscall `n`
    /// (0-based) before that syscall is served ([`Stop::AtSyscall`]). At a stop the vCPU
    /// is rewound to the program's `syscall` instruction: RIP = RCX − 2, RFLAGS = R11. That is a
    /// clean ring-3 state (RCX and R11 are clobbered by every syscall), from which a snapshot or a
    /// fork continues by executing the same syscall again.
    pub fn run_until(
        &mut self,
        kernel: &mut Kernel,
        sink: &mut dyn FnMut(Stream, &[u8]),
        stop_at: Option<u64>,
    ) -> Result<Stop, VmError> {
        let mut last_fault = (0u64, 0u64, 0u32);
        self.pin_thread()?;
        let _watchdog = crate::watchdog::Armed::arm().map_err(|what| VmError::Unexpected { what, rip: 0 })?;
        let limit = crate::watchdog::limit();
        let mut progress = Instant::now();
        // A cluster driver may have resumed the core (woken threads, switched threads) since
        // the last stop.
        self.switch_threads(kernel)?;
        self.apply_bases(kernel.fs_base(), kernel.gs_base());
        loop {
            self.pt_sync()?;
            let exit = self.kvm_run()?;
            let port = match exit {
                Exit::Out(port) => port,
                // The program's own `in` from the one open port: a #GP on Linux.
                Exit::In(_) => u16::MAX,
                Exit::Interrupted => {
                    let spent = progress.elapsed();
                    if limit.is_some_and(|l| spent >= l) {
                        return Err(VmError::NoProgress {
                            ms: spent.as_millis() as u64,
                            syscalls: kernel.syscall_count(),
                            rip: self.rip(),
                        });
                    }
                    continue;
                }
                Exit::Other(what) => return Err(VmError::Unexpected { what, rip: self.rip() }),
            };
            progress = Instant::now();
            let regs = self.vcpu.sync_regs().regs;
            if port == SYSCALL_PORT && (regs.rip == STUB_VA || regs.rip == STUB_VA + 2) {
                self.stats.syscall_exits += 1;
                // A fault that repeats across syscalls is a program retrying, not a mapping the
                // shell failed to install.
                last_fault = (0, 0, 0);
                if stop_at == Some(kernel.syscall_count()) {
                    let mut insn = [0u8; 2];
                    let at = regs.rcx.wrapping_sub(2);
                    if self.space.read(at, &mut insn).is_err() || insn != [0x0f, 0x05] {
                        return Err(VmError::Unexpected {
                            what: format!(
                                "syscall {} was not made by a syscall instruction; cannot stop there",
                                kernel.syscall_count()
                            ),
                            rip: at,
                        });
                    }
                    let r = &mut self.vcpu.sync_regs_mut().regs;
                    r.rip = at;
                    r.rflags = (r.r11 & !RFLAGS_RF) | RFLAGS_FIXED;
                    self.mark_dirty(SyncReg::Register);
                    return Ok(Stop::AtSyscall);
                }
                let args = [regs.rdi, regs.rsi, regs.rdx, regs.r10, regs.r8, regs.r9];
                let outcome = kernel.syscall(&mut self.space, regs.rax, args);
                for (stream, bytes) in kernel.take_output() {
                    sink(stream, &bytes);
                }
                match outcome {
                    SyscallOutcome::Return(value) => {
                        self.finish_syscall(kernel, value)?;
                        if kernel.yield_due() {
                            return Ok(Stop::Yield);
                        }
                    }
                    SyscallOutcome::Idle => {
                        self.finish_syscall(kernel, deja_kernel::threads::BLOCKED_RETURN)?;
                        return Ok(Stop::Idle);
                    }
                    SyscallOutcome::Exit(status) => return Ok(Stop::Exited(status)),
                    SyscallOutcome::Crash => return Ok(Stop::Crashed),
                }
            } else if (EXCEPTION_PORT_BASE..EXCEPTION_PORT_BASE + 32).contains(&port)
                && regs.rip >= direct(R0_CODE_PHYS)
                && regs.rip < direct(R0_CODE_PHYS) + 32 * R0_GATE_STRIDE + 2
            {
                self.stats.exception_exits += 1;
                let vector = (port - EXCEPTION_PORT_BASE) as u8;
                let frame = self.read_frame(regs.rsp, vector)?;
                let cr2 = self.vcpu.sync_regs().sregs.cr2;
                let exc = match vector {
                    14 => Exception::PageFault { addr: cr2, error_code: frame.error_code, rip: frame.rip },
                    13 => Exception::GeneralProtection {
                        rip: frame.rip,
                        error_code: frame.error_code,
                        eax: regs.rax as u32,
                        ecx: regs.rcx as u32,
                    },
                    v => Exception::Other { vector: v, rip: frame.rip },
                };
                let outcome = kernel.exception(&mut self.space, exc);
                for (stream, bytes) in kernel.take_output() {
                    sink(stream, &bytes);
                }
                let (mut rip, mut rax, mut rbx, mut rcx, mut rdx) = (frame.rip, regs.rax, regs.rbx, regs.rcx, regs.rdx);
                match outcome {
                    ExceptionOutcome::Retry => {
                        let key = (frame.rip, cr2, 0);
                        last_fault = if (last_fault.0, last_fault.1) == (key.0, key.1) {
                            (key.0, key.1, last_fault.2 + 1)
                        } else {
                            key
                        };
                        if last_fault.2 > 16 {
                            return Err(VmError::Unexpected {
                                what: format!("page fault at {cr2:#x} keeps recurring after the page was mapped"),
                                rip: frame.rip,
                            });
                        }
                    }
                    ExceptionOutcome::Emulated { insn, eax, ebx, ecx, edx, len } => {
                        if insn == cpuid::Emulated::Cpuid {
                            self.stats.cpuid_exits += 1;
                        }
                        rip += len;
                        rax = eax as u64;
                        rdx = edx as u64;
                        if let Some(b) = ebx {
                            rbx = b as u64;
                        }
                        if let Some(c) = ecx {
                            rcx = c as u64;
                        }
                    }
                    ExceptionOutcome::Fatal(status) => return Ok(Stop::Exited(status)),
                }
                let sync = self.vcpu.sync_regs_mut();
                sync.regs.rip = rip;
                sync.regs.rsp = frame.rsp;
                sync.regs.rflags = (frame.rflags & !RFLAGS_RF) | RFLAGS_FIXED;
                sync.regs.rax = rax;
                sync.regs.rbx = rbx;
                sync.regs.rcx = rcx;
                sync.regs.rdx = rdx;
                set_user_segments(&mut sync.sregs);
                sync.sregs.fs.base = self.fs_base;
                sync.sregs.gs.base = self.gs_base;
                self.mark_dirty(SyncReg::Register);
                self.mark_dirty(SyncReg::SystemRegister);
            } else {
                // The program's own `out` to a port: Linux refuses port I/O without ioperm, so
                // this would be a #GP. A ring-3 `out` to any other port already faults.
                let status = kernel.exception(
                    &mut self.space,
                    Exception::GeneralProtection { rip: regs.rip, error_code: 0, eax: 0, ecx: 0 },
                );
                match status {
                    ExceptionOutcome::Fatal(status) => return Ok(Stop::Exited(status)),
                    _ => {
                        return Ok(Stop::Exited(ExitStatus::Signaled {
                            signal: 11,
                            name: "SIGSEGV".into(),
                            fault: Some(deja_kernel::FaultInfo {
                                description: "general protection fault (port I/O)".into(),
                                vector: 13,
                                rip: regs.rip,
                                addr: None,
                            }),
                        }))
                    }
                }
            }
        }
    }

    fn read_frame(&self, rsp: u64, vector: u8) -> Result<Frame, VmError> {
        let stack_lo = direct(R0_STACK_PHYS);
        let words = if has_error_code(vector) { 6 } else { 5 };
        if rsp < stack_lo || rsp + 8 * words > stack_lo + PAGE_SIZE {
            return Err(VmError::Unexpected {
                what: format!("exception {vector} with a ring-0 stack out of place ({rsp:#x})"),
                rip: self.rip(),
            });
        }
        let phys = rsp - DIRECT_MAP;
        let w = |i: u64| self.space.read_u64(phys + 8 * i);
        let (error_code, base) = if has_error_code(vector) { (w(0), 1) } else { (0, 0) };
        let cs = w(base + 1);
        if cs & 3 != 3 {
            return Err(VmError::Unexpected {
                what: format!("exception {vector} raised in ring 0 at {:#x}", w(base)),
                rip: w(base),
            });
        }
        Ok(Frame { error_code, rip: w(base), rflags: w(base + 2), rsp: w(base + 3) })
    }

    /// Reads a user address through the page tables (for probes and tests).
    pub fn read_user(&self, va: u64, buf: &mut [u8]) -> bool {
        self.space.read(va, buf).is_ok()
    }

    /// Maps `code` at `code_va` (read+exec) and a zeroed data page at `data_va`, for probes.
    pub fn load_raw(&mut self, code_va: u64, code: &[u8], data_va: u64) -> Result<(), VmError> {
        let oom = |_| VmError::Unexpected { what: "no frames for the probe".into(), rip: 0 };
        let len = (code.len() as u64).div_ceil(PAGE_SIZE) * PAGE_SIZE;
        self.space.populate(code_va, len, Prot::RW).map_err(oom)?;
        self.space.write(code_va, code).map_err(oom)?;
        self.space.protect(code_va, len, Prot(5));
        self.space.take_stale();
        self.space.populate(data_va, PAGE_SIZE, Prot::RW).map_err(oom)?;
        Ok(())
    }

    /// Runs raw probe code until its first syscall and returns which exceptions it raised
    /// (vector, rip) on the way. `probed(rip)` gives the length of the probed instruction at
    /// `rip` and whether it is a `cpuid`: a trapped `cpuid` is answered from deja's table, as a
    /// program's is; any other trapped instruction is skipped with EAX = EDX = 0xdeadbeef.
    pub fn run_probe(&mut self, probed: &dyn Fn(u64) -> Option<(u64, bool)>) -> Result<Vec<(u8, u64)>, VmError> {
        self.pin_thread()?;
        let mut seen = Vec::new();
        for _ in 0..256 {
            let port = match self.kvm_run()? {
                Exit::Out(p) => p,
                Exit::Interrupted => continue,
                Exit::In(p) => {
                    return Err(VmError::Unexpected { what: format!("probe read port {p:#x}"), rip: self.rip() })
                }
                Exit::Other(what) => return Err(VmError::Unexpected { what, rip: self.rip() }),
            };
            let regs = self.vcpu.sync_regs().regs;
            if port == SYSCALL_PORT {
                return Ok(seen);
            }
            if !(EXCEPTION_PORT_BASE..EXCEPTION_PORT_BASE + 32).contains(&port) {
                return Err(VmError::Unexpected { what: format!("probe wrote to port {port:#x}"), rip: regs.rip });
            }
            let vector = (port - EXCEPTION_PORT_BASE) as u8;
            let frame = self.read_frame(regs.rsp, vector)?;
            seen.push((vector, frame.rip));
            let Some((len, is_cpuid)) = probed(frame.rip) else {
                return Err(VmError::Unexpected {
                    what: format!("probe raised exception {vector} outside a probed instruction"),
                    rip: frame.rip,
                });
            };
            let sync = self.vcpu.sync_regs_mut();
            if is_cpuid && vector == 13 {
                let [a, b, c, d] = cpuid::answer(regs.rax as u32, regs.rcx as u32);
                (sync.regs.rax, sync.regs.rbx, sync.regs.rcx, sync.regs.rdx) = (a as u64, b as u64, c as u64, d as u64);
            } else {
                sync.regs.rax = 0xdead_beef;
                sync.regs.rdx = 0xdead_beef;
            }
            sync.regs.rip = frame.rip + len;
            sync.regs.rsp = frame.rsp;
            sync.regs.rflags = (frame.rflags & !RFLAGS_RF) | RFLAGS_FIXED;
            set_user_segments(&mut sync.sregs);
            self.mark_dirty(SyncReg::Register);
            self.mark_dirty(SyncReg::SystemRegister);
        }
        Err(VmError::Unexpected { what: "probe did not finish".into(), rip: self.rip() })
    }
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

/// Why [`Vm::run_until`] returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    /// The program ended.
    Exited(ExitStatus),
    /// The core injected a crash (after a durable write): the node's volatile state is gone.
    Crashed,
    /// The program trapped for the requested syscall, which was not served.
    AtSyscall,
    /// No thread of this networked node can run (see [`Kernel::resume`]).
    Idle,
    /// Virtual time reached the core's yield point ([`Kernel::set_yield_at`]) after a syscall.
    Yield,
}

#[derive(Debug)]
enum Exit {
    Out(u16),
    In(u16),
    Interrupted,
    Other(String),
}

#[derive(Debug, Clone, Copy)]
struct Frame {
    error_code: u64,
    rip: u64,
    rflags: u64,
    rsp: u64,
}

fn libc_eintr() -> i32 {
    4
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
