//! The exit loop: registers through the sync area, the ring-0 page-table sync, switching the
//! vCPU between the core's threads, and running the guest to its next stop, serving syscalls
//! and exceptions on the way; also the raw loaders the probe uses.

use super::*;

impl Vm {
    pub(super) fn mark_dirty(&mut self, reg: SyncReg) {
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

    pub(super) fn kvm_run(&mut self) -> Result<Exit, VmError> {
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
            Err(e) if e.errno() == libc::EINTR => Exit::Interrupted,
            Err(source) => return Err(VmError::Ioctl { what: "KVM_RUN", source }),
        };
        let ns = start.elapsed().as_nanos() as u64;
        self.stats.host_run_ns += ns;
        crate::profile::kvm_run(ns);
        self.stats.exits += 1;
        if matches!(exit, Exit::Interrupted) {
            self.stats.interrupted_exits += 1;
        }
        self.stats.saw_core(crate::affinity::current_core());
        self.pull_registers()?;
        Ok(exit)
    }

    pub(super) fn rip(&self) -> u64 {
        self.vcpu.sync_regs().regs.rip
    }

    /// Makes CR3 the current address space's ([`AddressSpace::root`]) for the next entry: the
    /// core may have switched spaces (a process switch, `execve`) since the guest last ran.
    pub(super) fn follow_space(&mut self) {
        let root = self.space.root();
        // Through the mutable view: no copy of the sync area per entry.
        let sregs = &mut self.vcpu.sync_regs_mut().sregs;
        if sregs.cr3 != root {
            sregs.cr3 = root;
            self.mark_dirty(SyncReg::SystemRegister);
        }
    }

    /// Replays stale page-table entries from ring 0 so that no CPU or shadow-MMU cache keeps a
    /// mapping the monitor removed or narrowed.
    pub(super) fn pt_sync(&mut self) -> Result<(), VmError> {
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
        // The routine runs in the current space (any live space maps the monitor) and leaves
        // the vCPU in it: the space it ran in last may be one the entries come from, dropped.
        let root = self.space.root();
        let mut saved = self.vcpu.sync_regs();
        saved.sregs.cr3 = root;
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
                sync.sregs.cr3 = root;
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
    /// After a syscall: creates the threads the core spawned, hands woken threads their syscall
    /// results, and switches the vCPU to the thread the core chose (saving the one that ran:
    /// REGS through the sync area, XSAVE through one ioctl each way).
    fn switch_threads(&mut self, kernel: &mut Kernel) -> Result<(), VmError> {
        let spawned = kernel.take_spawned();
        if !spawned.is_empty() {
            let xsave = ioctl("KVM_GET_XSAVE", self.vcpu.get_xsave())?;
            for t in spawned {
                // A process deja started begins its program as `execve` begins one.
                if let Some(entry) = t.entry {
                    let regs = kvm_regs {
                        rip: entry.rip,
                        rsp: entry.rsp,
                        rflags: RFLAGS_FIXED | RFLAGS_IF,
                        ..Default::default()
                    };
                    let xsave = kvm_xsave { region: *self.boot_xsave.0, ..Default::default() };
                    self.threads.insert(t.tid, ThreadContext { regs, xsave, fs_base: 0, gs_base: 0 });
                    continue;
                }
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
    pub(super) fn apply_bases(&mut self, fs_base: u64, gs_base: u64) {
        if fs_base != self.fs_base || gs_base != self.gs_base {
            self.fs_base = fs_base;
            self.gs_base = gs_base;
            let sregs = &mut self.vcpu.sync_regs_mut().sregs;
            sregs.fs.base = fs_base;
            sregs.gs.base = gs_base;
            self.mark_dirty(SyncReg::SystemRegister);
        }
    }

    /// The current thread's context for the core's signal delivery: `gprs`, `rip` and `rflags`
    /// as given, the FPU state from the vCPU.
    fn user_context(&mut self, gprs: [u64; 16], rip: u64, rflags: u64) -> Result<UserContext, VmError> {
        let x = ioctl("KVM_GET_XSAVE", self.vcpu.get_xsave())?;
        let fpu = x.region.iter().flat_map(|w| w.to_le_bytes()).take(FPU_BYTES).collect();
        Ok(UserContext { gprs, rip, rflags, fpu })
    }

    /// Installs the FPU state of `ctx` (its registers are the caller's to set).
    fn install_fpu(&mut self, ctx: &UserContext) -> Result<(), VmError> {
        let mut x = ioctl("KVM_GET_XSAVE", self.vcpu.get_xsave())?;
        for (w, b) in x.region.iter_mut().zip(ctx.fpu.chunks_exact(4)).take(FPU_BYTES / 4) {
            *w = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        }
        let x = kvm_xsave { region: x.region, ..Default::default() };
        // SAFETY: a whole 4 KiB `kvm_xsave` read back from this vCPU, its first bytes replaced
        // by a state the core validated (see `set_vcpu_state`).
        ioctl("KVM_SET_XSAVE", unsafe { self.vcpu.set_xsave(&x) })
    }

    /// Installs a whole context of the current thread: registers, RIP, RFLAGS, FPU.
    fn install_context(&mut self, ctx: &UserContext) -> Result<(), VmError> {
        self.install_fpu(ctx)?;
        let r = &mut self.vcpu.sync_regs_mut().regs;
        set_gprs(r, &ctx.gprs);
        r.rip = ctx.rip;
        r.rflags = (ctx.rflags & !RFLAGS_RF) | RFLAGS_FIXED;
        self.mark_dirty(SyncReg::Register);
        Ok(())
    }

    /// On the current thread's way back to ring 3 (its registers are in the vCPU): runs the
    /// handler of the signal it has to take, if any. `Some` if the signal ended the program. A
    /// signal that ends a process other than the node's first moves the vCPU to the thread
    /// the core runs next, which may have a signal of its own to take.
    fn take_signal(&mut self, kernel: &mut Kernel) -> Result<Option<ExitStatus>, VmError> {
        loop {
            if !kernel.signal_due() {
                return Ok(None);
            }
            let r = self.vcpu.sync_regs().regs;
            let mut ctx = self.user_context(gprs_of(&r), r.rip, r.rflags)?;
            let tid = self.current_tid;
            match kernel.deliver_signal(&mut self.space, &mut ctx) {
                Ok(Some(_)) => {
                    self.stats.signals += 1;
                    self.install_context(&ctx)?;
                    return Ok(None);
                }
                Ok(None) if kernel.current_tid() != tid && !kernel.is_idle() => {
                    self.switch_threads(kernel)?;
                    kernel.before_run(&mut self.space);
                    self.apply_bases(kernel.fs_base(), kernel.gs_base());
                }
                Ok(None) => return Ok(None),
                Err(status) => return Ok(Some(status)),
            }
        }
    }

    /// After the process of the current thread ended outside a syscall (a fault, a signal taken
    /// on the way back to ring 3): the vCPU leaves ring 0 in the thread the core runs next.
    /// `Some` if the run stops there (the node is idle, or a signal ended it).
    fn after_process_end(&mut self, kernel: &mut Kernel) -> Result<Option<Stop>, VmError> {
        self.switch_threads(kernel)?;
        {
            let sync = self.vcpu.sync_regs_mut();
            set_user_segments(&mut sync.sregs);
        }
        self.fs_base = u64::MAX; // reload the bases with the user segments
        self.mark_dirty(SyncReg::SystemRegister);
        kernel.before_run(&mut self.space);
        self.apply_bases(kernel.fs_base(), kernel.gs_base());
        if kernel.is_idle() {
            return Ok(Some(Stop::Idle));
        }
        Ok(self.take_signal(kernel)?.map(Stop::Exited))
    }

    /// Puts a syscall's return value in RAX, resumes after the `syscall` instruction and applies
    /// the core's thread changes; after an `execve`, starts the new program instead.
    fn finish_syscall(&mut self, kernel: &mut Kernel, value: u64) -> Result<(), VmError> {
        let r = &mut self.vcpu.sync_regs_mut().regs;
        r.rax = value;
        r.rip = r.rcx;
        r.rflags = (r.r11 & !RFLAGS_RF) | RFLAGS_FIXED;
        self.mark_dirty(SyncReg::Register);
        if let Some(entry) = kernel.take_exec() {
            self.start_program(entry)?;
        }
        self.switch_threads(kernel)?;
        kernel.before_run(&mut self.space);
        self.apply_bases(kernel.fs_base(), kernel.gs_base());
        Ok(())
    }

    /// Resets the running thread to a program's first instruction (`execve`): every GPR 0,
    /// RIP and RSP from `entry`, RFLAGS, XSAVE and the FS/GS bases as at boot.
    pub(super) fn start_program(&mut self, entry: deja_kernel::Entry) -> Result<(), VmError> {
        let x = kvm_xsave { region: *self.boot_xsave.0, ..Default::default() };
        // SAFETY: a whole 4 KiB `kvm_xsave` read back from this vCPU when it was set up (see
        // `set_vcpu_state`).
        ioctl("KVM_SET_XSAVE", unsafe { self.vcpu.set_xsave(&x) })?;
        self.vcpu.sync_regs_mut().regs =
            kvm_regs { rip: entry.rip, rsp: entry.rsp, rflags: RFLAGS_FIXED | RFLAGS_IF, ..Default::default() };
        self.mark_dirty(SyncReg::Register);
        self.apply_bases(0, 0);
        Ok(())
    }

    /// Runs the program under `kernel` until it ends. Output goes to `sink` as it is written.
    pub fn run(&mut self, kernel: &mut Kernel, sink: &mut dyn FnMut(Stream, &[u8])) -> Result<ExitStatus, VmError> {
        match self.run_until(kernel, sink, None)? {
            Stop::Exited(status) => Ok(status),
            Stop::Crashed => {
                Err(VmError::Unexpected { what: "a crash was injected where none was planned".into(), rip: self.rip() })
            }
            Stop::AtSyscall | Stop::Idle | Stop::Yield | Stop::Breakpoint(_) => Err(VmError::Unexpected {
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
        let limit = self.no_progress;
        let _watchdog = crate::watchdog::Armed::arm(limit).map_err(|what| VmError::Unexpected { what, rip: 0 })?;
        let mut progress = Instant::now();
        // A cluster driver may have resumed the core (woken threads, switched threads) since
        // the last stop.
        self.switch_threads(kernel)?;
        self.apply_bases(kernel.fs_base(), kernel.gs_base());
        if let Some(status) = self.take_signal(kernel)? {
            return Ok(Stop::Exited(status));
        }
        loop {
            self.pt_sync()?;
            self.follow_space();
            let exit = self.kvm_run()?;
            let port = match exit {
                Exit::Out(port) => port,
                // The program's own `in` from the one open port: a #GP on Linux.
                Exit::In(_) => u16::MAX,
                Exit::Interrupted => {
                    let spent = progress.elapsed();
                    if limit.is_some_and(|l| spent >= l) {
                        // deja switches threads and delivers signals only when the running thread
                        // enters the monitor: say who waits behind it.
                        let mut signals = String::new();
                        let others: Vec<String> = kernel.runnable_others().iter().map(u64::to_string).collect();
                        if !others.is_empty() {
                            signals.push_str(&format!(
                                "; runnable thread(s) {} never got a turn (deja switches threads only at a syscall)",
                                others.join(", ")
                            ));
                            if kernel.cpus() > 1 {
                                signals.push_str(&format!(
                                    "; the program is shown {} CPUs, and a runtime that spin-waits for another \
                                     thread (Go's garbage collector with GOMAXPROCS > 1) waits forever without \
                                     preemption: try --cpus 1",
                                    kernel.cpus()
                                ));
                            }
                        }
                        let pending = kernel.pending_signals();
                        if !pending.is_empty() {
                            let names: Vec<String> = pending.iter().map(|&s| deja_kernel::signal_name(s)).collect();
                            signals.push_str(&format!(
                                "; it has {} pending, taken only at its next syscall or fault",
                                names.join(", ")
                            ));
                        }
                        return Err(VmError::NoProgress {
                            ms: spent.as_millis() as u64,
                            syscalls: kernel.syscall_count(),
                            rip: self.rip(),
                            thread: kernel.current_tid(),
                            signals,
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
                // Each distinct count of decisions taken at a syscall's trap is a cut: where a
                // later fork of this course can be taken (`stop_at_decisions`).
                let taken = kernel.decision_count();
                if self.cuts.last() != Some(&taken) {
                    self.cuts.push(taken);
                }
                let late = self.stop_at_decisions == Some(taken);
                if late {
                    self.stop_at_decisions = None;
                }
                let at_syscall = stop_at == Some(kernel.syscall_count());
                if at_syscall || late {
                    let mut insn = [0u8; 2];
                    let at = regs.rcx.wrapping_sub(2);
                    let clean = self.space.read(at, &mut insn).is_ok() && insn == [0x0f, 0x05];
                    if !clean && !at_syscall {
                        // No clean stop here: no later fork (the run goes on as it would).
                        self.late_refused = true;
                    } else if !clean {
                        return Err(VmError::Unexpected {
                            what: format!(
                                "syscall {} was not made by a syscall instruction; cannot stop there",
                                kernel.syscall_count()
                            ),
                            rip: at,
                        });
                    } else {
                        let r = &mut self.vcpu.sync_regs_mut().regs;
                        r.rip = at;
                        r.rflags = (r.r11 & !RFLAGS_RF) | RFLAGS_FIXED;
                        self.mark_dirty(SyncReg::Register);
                        return Ok(Stop::AtSyscall);
                    }
                }
                let args = [regs.rdi, regs.rsi, regs.rdx, regs.r10, regs.r8, regs.r9];
                kernel.set_user_sp(regs.rsp);
                let served = Instant::now();
                let outcome = kernel.syscall(&mut self.space, regs.rax, args);
                crate::profile::syscall(regs.rax, served.elapsed().as_nanos() as u64);
                for (stream, bytes) in kernel.take_output() {
                    sink(stream, &bytes);
                }
                match outcome {
                    SyscallOutcome::Return(value) => {
                        self.finish_syscall(kernel, value)?;
                        if let Some(status) = self.take_signal(kernel)? {
                            return Ok(Stop::Exited(status));
                        }
                        if kernel.yield_due() {
                            return Ok(Stop::Yield);
                        }
                    }
                    SyscallOutcome::Idle => {
                        self.finish_syscall(kernel, deja_kernel::task::threads::BLOCKED_RETURN)?;
                        return Ok(Stop::Idle);
                    }
                    SyscallOutcome::Resume(ctx) => {
                        self.install_context(&ctx)?;
                        self.apply_bases(kernel.fs_base(), kernel.gs_base());
                        if let Some(status) = self.take_signal(kernel)? {
                            return Ok(Stop::Exited(status));
                        }
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
                    6 => Exception::InvalidOpcode { rip: frame.rip, eax: regs.rax as u32, ecx: regs.rcx as u32 },
                    v => Exception::Other { vector: v, rip: frame.rip },
                };
                // A debugger's breakpoint stops the run before the instruction, as if the
                // instruction had not been reached yet.
                if vector == 3 && self.is_breakpoint(frame.rip.wrapping_sub(1)) {
                    self.stats.exception_exits -= 1;
                    let mut gprs = gprs_of(&regs);
                    gprs[4] = frame.rsp;
                    self.resume_at(&gprs, frame.rip - 1, frame.rflags);
                    return Ok(Stop::Breakpoint(frame.rip - 1));
                }
                // A coverage breakpoint is the monitor's own: the block is recorded, its byte put
                // back and the instruction run; the core never hears of it.
                let breakpoint = match vector {
                    3 => self.space.block_at(frame.rip.wrapping_sub(1)),
                    _ => None,
                };
                let outcome = match breakpoint {
                    Some(id) => {
                        self.stats.exception_exits -= 1;
                        self.hit_block(id, kernel.decision_count());
                        ExceptionOutcome::Retry
                    }
                    None => {
                        let served = Instant::now();
                        let outcome = kernel.exception(&mut self.space, exc);
                        crate::profile::exception(served.elapsed().as_nanos() as u64);
                        outcome
                    }
                };
                for (stream, bytes) in kernel.take_output() {
                    sink(stream, &bytes);
                }
                let mut rip = if breakpoint.is_some() { frame.rip - 1 } else { frame.rip };
                let mut rflags = frame.rflags;
                let mut gprs = gprs_of(&regs);
                // RSP comes from the hardware frame (the gate ran on the ring-0 stack).
                gprs[4] = frame.rsp;
                match outcome {
                    ExceptionOutcome::Retry if breakpoint.is_some() => {}
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
                    ExceptionOutcome::Emulated { channel, writes, flags, len } => {
                        if channel == Channel::Cpuid {
                            self.stats.cpuid_exits += 1;
                        }
                        if vector == 6 {
                            self.stats.rewrite_exits += 1;
                        }
                        rip += len;
                        for w in writes {
                            let r = &mut gprs[usize::from(w.reg & 15)];
                            *r = w.apply(*r);
                        }
                        if let Some(f) = flags {
                            rflags = (rflags & !ARITH_FLAGS) | (f & ARITH_FLAGS);
                        }
                    }
                    ExceptionOutcome::ProcessEnded => match self.after_process_end(kernel)? {
                        Some(stop) => return Ok(stop),
                        None => continue,
                    },
                    ExceptionOutcome::Deliver => {
                        let mut ctx = self.user_context(gprs, rip, rflags)?;
                        let tid = self.current_tid;
                        match kernel.deliver_signal(&mut self.space, &mut ctx) {
                            // The signal ended the faulting process: another thread runs.
                            Ok(None) if kernel.current_tid() != tid => match self.after_process_end(kernel)? {
                                Some(stop) => return Ok(stop),
                                None => continue,
                            },
                            Ok(_) => {
                                self.stats.signals += 1;
                                self.install_fpu(&ctx)?;
                                (gprs, rip, rflags) = (ctx.gprs, ctx.rip, ctx.rflags);
                            }
                            Err(status) => return Ok(Stop::Exited(status)),
                        }
                    }
                    ExceptionOutcome::Fatal(status) => return Ok(Stop::Exited(status)),
                }
                self.resume_at(&gprs, rip, rflags);
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

    /// Sets the program's registers for its return to ring 3 after an exception.
    fn resume_at(&mut self, gprs: &[u64; 16], rip: u64, rflags: u64) {
        let sync = self.vcpu.sync_regs_mut();
        set_gprs(&mut sync.regs, gprs);
        sync.regs.rip = rip;
        sync.regs.rflags = (rflags & !RFLAGS_RF) | RFLAGS_FIXED;
        set_user_segments(&mut sync.sregs);
        sync.sregs.fs.base = self.fs_base;
        sync.sregs.gs.base = self.gs_base;
        self.mark_dirty(SyncReg::Register);
        self.mark_dirty(SyncReg::SystemRegister);
    }

    pub(super) fn read_frame(&self, rsp: u64, vector: u8) -> Result<Frame, VmError> {
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
    /// (vector, rip) on the way. `answer(rip, vector, registers)` says how to answer a trapped
    /// instruction (registers written, flags, its length); `None` is an exception outside a
    /// probed instruction.
    pub(crate) fn run_probe(&mut self, answer: &Answerer<'_>) -> Result<Vec<(u8, u64)>, VmError> {
        self.pin_thread()?;
        let mut seen = Vec::new();
        for _ in 0..256 {
            self.pt_sync()?;
            self.follow_space();
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
            let mut gprs = gprs_of(&regs);
            let Some(a) = answer(frame.rip, vector, &gprs) else {
                return Err(VmError::Unexpected {
                    what: format!("probe raised exception {vector} outside a probed instruction"),
                    rip: frame.rip,
                });
            };
            for w in &a.writes {
                let r = &mut gprs[usize::from(w.reg & 15)];
                *r = w.apply(*r);
            }
            gprs[4] = frame.rsp;
            let mut rflags = frame.rflags;
            if let Some(f) = a.flags {
                rflags = (rflags & !ARITH_FLAGS) | (f & ARITH_FLAGS);
            }
            let sync = self.vcpu.sync_regs_mut();
            set_gprs(&mut sync.regs, &gprs);
            sync.regs.rip = frame.rip + a.len;
            sync.regs.rflags = (rflags & !RFLAGS_RF) | RFLAGS_FIXED;
            set_user_segments(&mut sync.sregs);
            self.mark_dirty(SyncReg::Register);
            self.mark_dirty(SyncReg::SystemRegister);
        }
        Err(VmError::Unexpected { what: "probe did not finish".into(), rip: self.rip() })
    }
}

/// The general-purpose registers in x86's encoding order (RAX, RCX, RDX, RBX, RSP, RBP, RSI,
/// RDI, R8–R15), as [`deja_kernel::RegWrite`] numbers them.
pub(super) fn gprs_of(r: &kvm_regs) -> [u64; 16] {
    [r.rax, r.rcx, r.rdx, r.rbx, r.rsp, r.rbp, r.rsi, r.rdi, r.r8, r.r9, r.r10, r.r11, r.r12, r.r13, r.r14, r.r15]
}

/// Writes back what [`gprs_of`] read.
pub(super) fn set_gprs(r: &mut kvm_regs, g: &[u64; 16]) {
    [r.rax, r.rcx, r.rdx, r.rbx, r.rsp, r.rbp, r.rsi, r.rdi, r.r8, r.r9, r.r10, r.r11, r.r12, r.r13, r.r14, r.r15] = *g;
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
    /// The program reached one of `deja debug`'s breakpoints ([`Vm::set_breakpoint`]), at this
    /// address, before executing the instruction there: RIP is the address, the `int3` still in
    /// place.
    Breakpoint(u64),
}

#[derive(Debug)]
pub(super) enum Exit {
    Out(u16),
    In(u16),
    Interrupted,
    Other(String),
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Frame {
    pub(super) error_code: u64,
    pub(super) rip: u64,
    pub(super) rflags: u64,
    pub(super) rsp: u64,
}

/// How the probe answers a trapped instruction at (rip, vector) given the registers in x86's
/// encoding order; `None` for an exception outside a probed instruction.
pub(crate) type Answerer<'a> = dyn Fn(u64, u8, &[u64; 16]) -> Option<ProbeAnswer> + 'a;

/// How the probe answers a trapped instruction: registers, flags, length.
pub(crate) struct ProbeAnswer {
    pub(crate) writes: Vec<deja_kernel::RegWrite>,
    pub(crate) flags: Option<u64>,
    pub(crate) len: u64,
}
