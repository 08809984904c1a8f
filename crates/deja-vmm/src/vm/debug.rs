//! What `deja debug` needs of the vCPU: breakpoints planted in the program's code (an `int3`
//! whose trap stops the run with [`Stop::Breakpoint`] before the instruction, never reaching
//! the core) and the running thread's registers.
//!
//! A breakpoint is planted in the current address space only (the page gets a frame of its own
//! first, so a process sharing it copy-on-write does not meet it) and taken out of every space
//! that holds it. Every read through [`Memory`] (the core's, a digest's, the debugger's) shows
//! the byte the `int3` replaced, so nothing the kernel reads or records changes: a run that only
//! stops at breakpoints and goes on is the run without them. Only the program's own loads of
//! its code bytes would see the `int3` (as under any software debugger).

use super::run::{gprs_of, set_gprs};
use super::*;

/// The running thread's user registers, as a debugger shows them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UserRegs {
    /// RAX, RCX, RDX, RBX, RSP, RBP, RSI, RDI, R8–R15, in x86's encoding order.
    pub gprs: [u64; 16],
    /// The next instruction.
    pub rip: u64,
    /// RFLAGS.
    pub rflags: u64,
    /// The FS base (thread-local storage).
    pub fs_base: u64,
    /// The GS base.
    pub gs_base: u64,
}

impl Vm {
    /// Plants a breakpoint at `va` in the current address space; `false` when no page is
    /// present there.
    pub fn set_breakpoint(&mut self, va: u64) -> bool {
        let Some(gpa) = self.space.translate(va) else { return false };
        let mut byte = [0u8];
        self.space.read_phys(gpa, &mut byte);
        if byte[0] == INT3 && self.space.debug_bytes.contains_key(&va) {
            return true;
        }
        if !self.space.poke(va, INT3) {
            return false;
        }
        self.space.debug_bytes.insert(va, byte[0]);
        true
    }

    /// Takes the breakpoint at `va` out of every address space that holds it.
    pub fn clear_breakpoint(&mut self, va: u64) {
        let Some(original) = self.space.debug_bytes.remove(&va) else { return };
        for root in self.space.spaces() {
            if let Some(gpa) = self.space.translate_in(root, va) {
                let mut byte = [0u8];
                self.space.read_phys(gpa, &mut byte);
                if byte[0] == INT3 {
                    self.space.write_phys(gpa, &[original]);
                }
            }
        }
    }

    /// Takes out every breakpoint.
    pub fn clear_breakpoints(&mut self) {
        let all: Vec<u64> = self.space.debug_bytes.keys().copied().collect();
        for va in all {
            self.clear_breakpoint(va);
        }
    }

    /// Whether a breakpoint is planted at `va`.
    pub fn is_breakpoint(&self, va: u64) -> bool {
        self.space.debug_bytes.contains_key(&va)
    }

    /// Reads the program's memory at `va` in the current space as the program wrote it: the
    /// original byte where a breakpoint sits. `false` when a page is not present.
    pub fn read_debug(&self, va: u64, buf: &mut [u8]) -> bool {
        self.space.read(va, buf).is_ok()
    }

    /// Writes the program's memory at `va` in the current space (a debugger's change): a
    /// breakpoint inside the range keeps its `int3`, with the written byte as its original.
    pub fn write_debug(&mut self, va: u64, data: &[u8]) -> bool {
        let mut bytes = data.to_vec();
        let end = va.saturating_add(data.len() as u64);
        for (&at, original) in self.space.debug_bytes.range_mut(va..end) {
            let i = (at - va) as usize;
            *original = bytes[i];
            bytes[i] = INT3;
        }
        self.space.write(va, &bytes).is_ok()
    }

    /// The running thread's registers.
    pub fn user_regs(&self) -> UserRegs {
        let r = self.vcpu.sync_regs().regs;
        UserRegs { gprs: gprs_of(&r), rip: r.rip, rflags: r.rflags, fs_base: self.fs_base, gs_base: self.gs_base }
    }

    /// The registers of thread `tid`: the running one's, or those it left at its last switch;
    /// `None` for a thread the vCPU does not hold.
    pub fn thread_regs(&self, tid: u64) -> Option<UserRegs> {
        if tid == self.current_tid {
            return Some(self.user_regs());
        }
        let t = self.threads.get(&tid)?;
        Some(UserRegs {
            gprs: gprs_of(&t.regs),
            rip: t.regs.rip,
            rflags: t.regs.rflags,
            fs_base: t.fs_base,
            gs_base: t.gs_base,
        })
    }

    /// Sets the running thread's general registers, RIP and the arithmetic flags (a debugger's
    /// change; the bases are the core's and stay).
    pub fn set_user_regs(&mut self, regs: &UserRegs) {
        let sync = self.vcpu.sync_regs_mut();
        set_gprs(&mut sync.regs, &regs.gprs);
        sync.regs.rip = regs.rip;
        sync.regs.rflags = (sync.regs.rflags & !ARITH_FLAGS) | (regs.rflags & ARITH_FLAGS);
        self.mark_dirty(SyncReg::Register);
    }
}
