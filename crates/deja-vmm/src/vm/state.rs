//! The vCPU state snapshots and forks carry: registers, XSAVE, segments and MSRs of the running
//! thread, the saved contexts of the others, and KVM's dirty log of guest frames.

use super::*;
use kvm_bindings::{kvm_debugregs, kvm_mp_state, kvm_regs, kvm_sregs, kvm_vcpu_events, kvm_xcrs};
use serde::{Deserialize, Serialize};

/// MSRs a snapshot carries: the syscall MSRs, the FS/GS bases, the TSC and SYSENTER state.
pub const SNAPSHOT_MSRS: [u32; 11] = [
    0xc000_0081, // STAR
    0xc000_0082, // LSTAR
    0xc000_0083, // CSTAR
    0xc000_0084, // SFMASK
    0xc000_0100, // FS_BASE
    0xc000_0101, // GS_BASE
    0xc000_0102, // KERNEL_GS_BASE
    0x10,        // TSC
    0x174,       // SYSENTER_CS
    0x175,       // SYSENTER_ESP
    0x176,       // SYSENTER_EIP
];

/// The vCPU's complete architectural state.
#[derive(Debug, Serialize, Deserialize)]
pub struct VcpuState {
    /// General registers.
    pub regs: kvm_regs,
    /// Segment, control and descriptor-table registers.
    pub sregs: kvm_sregs,
    /// x87/SSE/AVX state.
    pub xsave: kvm_xsave,
    /// Extended control registers.
    pub xcrs: kvm_xcrs,
    /// Debug registers.
    pub debugregs: kvm_debugregs,
    /// Pending exceptions, interrupts, NMIs.
    pub events: kvm_vcpu_events,
    /// Run state.
    pub mp_state: kvm_mp_state,
    /// The MSRs of [`SNAPSHOT_MSRS`].
    pub msrs: Vec<kvm_msr_entry>,
}

impl Clone for VcpuState {
    fn clone(&self) -> Self {
        // `kvm_xsave` ends in a zero-length flexible array and so is not `Clone`; its state is
        // all in `region`.
        let xsave = kvm_xsave { region: self.xsave.region, ..Default::default() };
        VcpuState {
            regs: self.regs,
            sregs: self.sregs,
            xsave,
            xcrs: self.xcrs,
            debugregs: self.debugregs,
            events: self.events,
            mp_state: self.mp_state,
            msrs: self.msrs.clone(),
        }
    }
}

impl Vm {
    /// The FS and GS bases the monitor last loaded.
    pub fn bases(&self) -> (u64, u64) {
        (self.fs_base, self.gs_base)
    }

    /// The vCPU's complete state, as a snapshot holds it.
    pub fn vcpu_state(&mut self) -> Result<VcpuState, VmError> {
        // CR3 as the guest will run: the core may have switched spaces since its last exit.
        self.follow_space();
        let sync = self.vcpu.sync_regs();
        let mut msrs = Msrs::from_entries(&SNAPSHOT_MSRS.map(|index| kvm_msr_entry { index, ..Default::default() }))
            .map_err(|_| VmError::Unexpected { what: "MSR list too large".into(), rip: 0 })?;
        let n = ioctl("KVM_GET_MSRS", self.vcpu.get_msrs(&mut msrs))?;
        if n != SNAPSHOT_MSRS.len() {
            return Err(VmError::Unexpected {
                what: format!("KVM returned {n} of the snapshot MSRs"),
                rip: sync.regs.rip,
            });
        }
        Ok(VcpuState {
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
    pub fn set_vcpu_state(&mut self, st: &VcpuState, fs_base: u64, gs_base: u64) -> Result<(), VmError> {
        self.check_root(st)?;
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
    pub(crate) fn set_child_state(&mut self, st: &VcpuState, fs_base: u64, gs_base: u64) -> Result<(), VmError> {
        self.check_root(st)?;
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

    /// The address space restored with the frames must be the one the vCPU state runs in.
    fn check_root(&self, st: &VcpuState) -> Result<(), VmError> {
        if st.sregs.cr3 != self.space.root() {
            return Err(VmError::Unexpected {
                what: format!(
                    "the saved vCPU runs in the address space at {:#x}, the saved page tables say {:#x}",
                    st.sregs.cr3,
                    self.space.root()
                ),
                rip: st.regs.rip,
            });
        }
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
}
