//! Serving the guest: one syscall (the clock, faults, blocking, the trace) and its dispatch
//! through the table in [`crate::syscalls`], and the exceptions (demand paging, emulated
//! instructions, attempts to enter a kernel another way, the fatal ones).
//!
//! This is the layer above the handlers: it reaches them through the table, and the scheduler
//! in [`sys_sched`](crate::syscalls::sys_sched) comes back here to serve a blocked call again.

use crate::abi::errno::*;
use crate::faults::{FaultKind, FaultRecord};
use crate::kernel::{Kernel, SysResult, SysStop};
use crate::mm::mappings::{Access, FaultError};
use crate::mm::user_layout::*;
use crate::prelude::*;
use crate::record::trace::{DataHasher, ExceptionRecord};
use crate::signal;
use crate::task::process::MAX_FAULT_REPEATS;
use crate::task::threads::BLOCKED_RETURN;
use crate::time::clock::{RDTSC_COST_NS, SYSCALL_COST_NS};
use crate::time::vdso;
use crate::{Exception, ExceptionOutcome, ExitStatus, FaultInfo, Gpr, Memory, SyscallOutcome};
use deja_rewrite::Channel;

impl Kernel {
    /// Serves one syscall: `nr` from RAX, `args` from RDI, RSI, RDX, R10, R8, R9.
    pub fn syscall(&mut self, mem: &mut dyn Memory, nr: u64, args: [u64; 6]) -> SyscallOutcome {
        self.fold_vdso_calls(mem);
        self.sched.clock.advance(SYSCALL_COST_NS);
        self.faults.log.set_time(self.sched.clock.now_ns());
        self.process.last_fault = None;
        // Counted by name; a name is allocated only the first time it is seen.
        let known = crate::syscalls::name(nr);
        match known.and_then(|n| self.record.counts.get_mut(n)) {
            Some(count) => *count += 1,
            None => *self.record.counts.entry(crate::syscalls::display_name(nr)).or_default() += 1,
        }
        self.sched.threads.call = (nr, args);
        // Read before the syscall runs and outside its data hash, for the recorded trace only.
        let paths = if self.record.tracer.recording() {
            crate::syscalls::read_paths(nr, &args, &self.process.mappings, mem)
        } else {
            Vec::new()
        };
        let mut hashed = DataHasher::new(mem);
        let res = self.dispatch(&mut hashed, nr, args);
        let data = hashed.finish();
        if matches!(res, Err(SysStop::Err(ENOENT))) {
            self.note_not_found(mem, nr, &args);
        }
        // A process killed by meaning at the durable operation it made dies of it now.
        let res = match self.faults.kill_due.take() {
            Some(point) => Err(SysStop::Exit(ExitStatus::Signaled {
                signal: crate::abi::signal::SIGKILL,
                name: signal::name(crate::abi::signal::SIGKILL),
                fault: Some(FaultInfo { description: point, vector: 0, rip: 0, addr: None }),
            })),
            None => res,
        };
        let mut res = self.process_exit(mem, res);
        // A crash at exit: the program exits believing its data is safe; the node dies there.
        if self.faults.config.crash_at_exit && !self.faults.crash_due {
            if let Err(SysStop::Exit(ExitStatus::Exited { code })) = &res {
                self.faults.crash_point = format!("at exit (status {code})");
                self.faults.crash_due = true;
                res = Ok(0);
            }
        }
        self.fail_stop(&mut res);
        if self.faults.faulted && self.faults.after_fault.len() < crate::faults::MAX_AFTER_FAULT {
            let errno = match &res {
                Err(SysStop::Err(e)) => *e as u64,
                Err(SysStop::Unsupported) => ENOSYS as u64,
                _ => 0,
            };
            self.faults.after_fault.push((nr, errno));
        }
        // `rt_sigreturn` continues the same thread: nothing to schedule.
        let done = matches!(res, Err(SysStop::Exit(_) | SysStop::Resume(_)));
        let res = if done || self.faults.crash_due { res } else { self.schedule(mem, res) };
        let (outcome, ret) = match res {
            Ok(v) => (SyscallOutcome::Return(v), Some(v)),
            Err(SysStop::Err(e)) => {
                let v = (-i64::from(e)) as u64;
                (SyscallOutcome::Return(v), Some(v))
            }
            Err(SysStop::Unsupported) => {
                *self.record.unsupported.entry(crate::syscalls::display_name(nr)).or_default() += 1;
                let v = (-i64::from(ENOSYS)) as u64;
                (SyscallOutcome::Return(v), Some(v))
            }
            Err(SysStop::Exit(st)) => {
                self.process.exit = Some(st.clone());
                (SyscallOutcome::Exit(st), None)
            }
            Err(SysStop::Resume(ctx)) => {
                let rax = ctx.gprs[0];
                (SyscallOutcome::Resume(ctx), Some(rax))
            }
            Err(SysStop::Block) if self.sched.threads.idle => (SyscallOutcome::Idle, Some(BLOCKED_RETURN)),
            Err(SysStop::Block) => (SyscallOutcome::Return(BLOCKED_RETURN), Some(BLOCKED_RETURN)),
        };
        let (outcome, ret) = if self.faults.crash_due && !matches!(outcome, SyscallOutcome::Exit(_)) {
            self.faults.crash_due = false;
            let at = self.crash_point_words();
            self.faults.ledger.push(FaultRecord {
                kind: FaultKind::Crash,
                point: at.clone(),
                syscall_index: self.record.tracer.syscalls(),
                path: None,
                selected: true,
                applied: true,
                observed: false,
            });
            self.process.exit = Some(ExitStatus::Signaled {
                signal: crate::abi::signal::SIGKILL,
                name: signal::name(crate::abi::signal::SIGKILL),
                fault: Some(FaultInfo { description: format!("crash injected {at}"), vector: 0, rip: 0, addr: None }),
            });
            (SyscallOutcome::Crash, None)
        } else {
            (outcome, ret)
        };
        self.publish_clock(mem);
        let describe = || (crate::syscalls::display_name(nr), crate::syscalls::render(nr, &args, &paths, ret));
        self.record.tracer.syscall(nr, args, ret, self.sched.clock.now_ns(), data, describe);
        outcome
    }

    /// Folds the calls the program made through the vDSO since its last exit into the virtual
    /// clock: each costs [`vdso::CALL_COST_NS`], and there are at most as many as the published
    /// limit allowed, whatever the program wrote in the vvar. The publish that always follows
    /// resets the counter.
    fn fold_vdso_calls(&mut self, mem: &mut dyn Memory) {
        let Some(mut v) = self.process.vdso else { return };
        if !self.vvar_mapped(v.vvar) {
            return;
        }
        let mut b = [0u8; 8];
        if mem.read(v.vvar + vdso::VV_CALLS, &mut b).is_err() {
            return;
        }
        let n = u64::from_le_bytes(b).min(vdso::calls_allowed(v.base, v.limit));
        if n > 0 {
            self.sched.clock.advance(n * vdso::CALL_COST_NS);
            v.calls = v.calls.saturating_add(n);
            v.base = v.base.saturating_add(n * vdso::CALL_COST_NS);
            self.record.tracer.vdso_calls(n, self.sched.clock.now_ns());
        }
        self.process.vdso = Some(v);
    }

    /// Writes the vvar for the program's next stretch in ring 3: the local time now, the wall
    /// clock's offset, and the limit up to which calls need no exit (see [`vdso`]).
    pub(crate) fn publish_clock(&mut self, mem: &mut dyn Memory) {
        let Some(mut v) = self.process.vdso else { return };
        if !self.vvar_mapped(v.vvar) {
            return;
        }
        let base = self.sched.clock.local_ns();
        let limit = self.clock_read_limit(base);
        let vv = vdso::Vvar {
            calls: 0,
            limit,
            base,
            realtime: self.sched.clock.realtime_ns().wrapping_sub(base),
            cost: vdso::CALL_COST_NS,
        };
        if mem.write(v.vvar, &vv.encode()).is_ok() {
            v.base = base;
            v.limit = limit;
            self.process.vdso = Some(v);
        }
    }

    /// The latest local time a vDSO call may show before the program must enter deja: the
    /// point where the syscall the call stands for would have done more than advance the
    /// clock. Nothing while another thread could run (the scheduler may switch at any
    /// syscall); otherwise just before the earliest deadline of a blocked thread and just
    /// before a cluster node's yield point.
    fn clock_read_limit(&self, base: u64) -> u64 {
        let threads = &self.sched.threads;
        if threads.another_runnable() {
            return base;
        }
        let local = |t: u64| t.saturating_add(base - self.sched.clock.now_ns().min(base));
        threads
            .earliest_deadline()
            .into_iter()
            .chain(self.timer_deadline())
            .chain(self.net.yield_at)
            .map(|t| local(t).saturating_sub(1))
            .fold(u64::MAX, u64::min)
    }

    /// True while the vvar is still the page deja mapped (the program may have unmapped it or
    /// mapped something else there).
    fn vvar_mapped(&self, vvar: u64) -> bool {
        self.process.mappings.find(vvar).is_some_and(|v| v.kind == crate::mm::mappings::VmaKind::Vvar)
    }

    /// Called by the shell before the program runs again after the shell itself changed the
    /// kernel (a cluster driver's new yield point, a resume): folds the reads made since the
    /// last exit and publishes the clock again, so the vvar's limit reflects the new state.
    pub fn before_run(&mut self, mem: &mut dyn Memory) {
        self.fold_vdso_calls(mem);
        self.publish_clock(mem);
    }

    /// Serves syscall `nr` with the handler of its row in [`crate::syscalls::TABLE`]; a number
    /// without a handler is unsupported (`-ENOSYS`, counted by name).
    pub(crate) fn dispatch(&mut self, mem: &mut dyn Memory, nr: u64, a: [u64; 6]) -> SysResult {
        let r = match crate::syscalls::handler(nr) {
            Some(serve) => serve(self, mem, a),
            None => Err(SysStop::Unsupported),
        };
        self.sync_shared_mappings(mem);
        r
    }

    /// Decides what a CPU exception of ring-3 code means.
    ///
    /// A page fault inside a mapping that allows the access populates an aligned window of
    /// [`FAULT_AROUND_PAGES`] pages (clipped to the mapping) and answers
    /// [`ExceptionOutcome::Retry`]; a `#UD` at a rewritten site ([`crate::host::hostchan`]) and
    /// `rdtsc`/`rdtscp`/`cpuid` under `#GP` (CR4.TSD, CPUID faulting) are answered by
    /// [`Kernel::emulate`]; everything else ends the program with the signal Linux would send.
    pub fn exception(&mut self, mem: &mut dyn Memory, exc: Exception) -> ExceptionOutcome {
        match self.exception_in_process(mem, exc) {
            ExceptionOutcome::Fatal(st) if self.procs.current != 1 => match self.current_died(mem, st) {
                Ok(()) => ExceptionOutcome::ProcessEnded,
                Err(st) => ExceptionOutcome::Fatal(st),
            },
            o => o,
        }
    }

    fn exception_in_process(&mut self, mem: &mut dyn Memory, exc: Exception) -> ExceptionOutcome {
        match exc {
            Exception::PageFault { addr, error_code, rip } => self.page_fault(mem, addr, error_code, rip),
            Exception::GeneralProtection { rip, error_code, eax, ecx } => {
                let mut code = [0u8; 15];
                let n = (0..code.len())
                    .take_while(|&i| self.process.mappings.copy_in(mem, rip + i as u64, &mut code[i..=i]).is_ok())
                    .count();
                if let Some((channel, len)) = crate::host::cpuid::decode(&code[..n]) {
                    return self.emulate(mem, channel, (0, 0), (eax, ecx), (rip, 13, error_code), len);
                }
                if let Some(how) = entry_attempt(&code[..n]) {
                    return self.entry_attempt(how, rip);
                }
                let what = "general protection fault (privileged instruction or bad address)";
                self.fault(Fault { sig: 11, code: SI_KERNEL, vector: 13, rip, addr: None, error_code }, what.into())
            }
            Exception::InvalidOpcode { rip, eax, ecx } => {
                if let Some(site) = self.process.host.site_at(&*mem, rip).cloned() {
                    self.process.host.count_trap(site.channel);
                    return self.emulate(
                        mem,
                        site.channel,
                        (site.reg, site.width),
                        (eax, ecx),
                        (rip, 6, 0),
                        site.len.into(),
                    );
                }
                match self.entry_at(mem, rip) {
                    Some(how) => self.entry_attempt(how, rip),
                    None => self.fault(Fault::at(4, ILL_ILLOPN, 6, rip), "invalid opcode".into()),
                }
            }
            Exception::Other { vector: 6, rip } if self.entry_at(mem, rip).is_some() => {
                let how = self.entry_at(mem, rip).unwrap_or(EntryAttempt::Sysenter);
                self.entry_attempt(how, rip)
            }
            Exception::Other { vector, rip } => {
                // The signal and `si_code` Linux gives each vector.
                let (sig, code, what) = match vector {
                    0 => (8, FPE_INTDIV, "divide error".to_string()),
                    1 => (5, TRAP_TRACE, "debug trap".to_string()),
                    3 => (5, SI_KERNEL, "breakpoint (int3)".to_string()),
                    4 => (11, SI_KERNEL, "overflow (into)".to_string()),
                    5 => (11, SI_KERNEL, "bound range exceeded".to_string()),
                    6 => (4, ILL_ILLOPN, "invalid opcode".to_string()),
                    7 => (11, SI_KERNEL, "device not available".to_string()),
                    10 => (11, SI_KERNEL, "invalid TSS".to_string()),
                    11 => (7, SI_KERNEL, "segment not present".to_string()),
                    12 => (7, SI_KERNEL, "stack segment fault".to_string()),
                    13 => (11, SI_KERNEL, "general protection fault".to_string()),
                    14 => (11, SEGV_MAPERR, "page fault".to_string()),
                    16 => (8, FPE_FLTUNK, "x87 floating-point exception".to_string()),
                    17 => (7, BUS_ADRALN, "alignment check".to_string()),
                    18 => (7, SI_KERNEL, "machine check".to_string()),
                    19 => (8, FPE_FLTUNK, "SIMD floating-point exception".to_string()),
                    21 => (11, SEGV_CPERR, "control protection fault".to_string()),
                    v => (11, SI_KERNEL, format!("CPU exception vector {v}")),
                };
                self.fault(Fault::at(sig, code, vector, rip), what)
            }
        }
    }

    /// Answers `channel` (trapped at `at` = (rip, vector, error code), `len` bytes long) from
    /// deja's model instead of the host: `cpuid` from the fixed table and `xgetbv` from its
    /// XCR0, both untraced and free, so a run is the same whichever way they trapped; `rdtsc`
    /// and `rdtscp` from the virtual TSC, `rdrand` and `rdseed` from the seeded stream, both
    /// traced; `rdpid` as core 0. `dest` is the destination register and operand size of
    /// `rdrand`, `rdseed` and `rdpid`.
    pub(crate) fn emulate(
        &mut self,
        mem: &mut dyn Memory,
        channel: Channel,
        dest: (Gpr, u8),
        (eax, ecx): (u32, u32),
        at: (u64, u8, u64),
        len: u64,
    ) -> ExceptionOutcome {
        let (rip, vector, error_code) = at;
        let mut tsc = 0;
        if matches!(channel, Channel::Rdtsc | Channel::Rdtscp) {
            self.fold_vdso_calls(mem);
            self.sched.clock.advance(RDTSC_COST_NS);
            tsc = self.sched.clock.tsc();
            let now = self.sched.clock.now_ns();
            self.record.tracer.exception(vector, rip, 0, error_code, ExceptionRecord::Emulated(tsc), now);
            self.publish_clock(mem);
        }
        let mut random = 0;
        if matches!(channel, Channel::Rdrand | Channel::Rdseed) {
            let mut b = [0u8; 8];
            self.rng.fill(&mut b);
            random = u64::from_le_bytes(b);
            let now = self.sched.clock.now_ns();
            self.record.tracer.exception(vector, rip, 0, error_code, ExceptionRecord::Emulated(random), now);
        }
        let Some((writes, flags)) =
            crate::host::hostchan::answer(channel, dest, (eax, ecx), tsc, random, self.process.cpus)
        else {
            let what = format!("general protection fault: xgetbv of XCR{ecx} (deja's CPU has XCR0 only)");
            return self.fault(Fault::at(11, SI_KERNEL, 13, rip), what);
        };
        ExceptionOutcome::Emulated { channel, writes, flags, len }
    }

    /// The other way into a kernel at `rip`, if that is what is there.
    fn entry_at(&self, mem: &mut dyn Memory, rip: u64) -> Option<EntryAttempt> {
        let mut code = [0u8; 2];
        self.process.mappings.copy_in(mem, rip, &mut code).ok()?;
        entry_attempt(&code)
    }

    /// `int N` to a gate ring 3 may not use (every one but `int3` and `into`), or `sysenter`.
    /// Hardware raises #GP for the first and, on Intel, for the second; AMD and some hosts'
    /// instruction emulators raise #UD. Each ends one way whatever the host, traced as one
    /// exception: `int N` as the #GP with the gate's error code and SIGSEGV (Linux without
    /// 32-bit emulation), `sysenter` as #UD and SIGILL (Linux on AMD64).
    fn entry_attempt(&mut self, how: EntryAttempt, rip: u64) -> ExceptionOutcome {
        let serves = "deja serves the 64-bit syscall instruction";
        match how {
            EntryAttempt::Int(n) => {
                let what =
                    format!("general protection fault: int {n:#x} (software interrupts are not served; {serves})");
                let f =
                    Fault { sig: 11, code: SI_KERNEL, vector: 13, rip, addr: None, error_code: u64::from(n) << 3 | 2 };
                self.fault(f, what)
            }
            EntryAttempt::Sysenter => {
                self.fault(Fault::at(4, ILL_ILLOPN, 6, rip), format!("invalid opcode: sysenter ({serves})"))
            }
        }
    }

    fn page_fault(&mut self, mem: &mut dyn Memory, addr: u64, error_code: u64, rip: u64) -> ExceptionOutcome {
        let access = if error_code & 16 != 0 {
            Access::Exec
        } else if error_code & 2 != 0 {
            Access::Write
        } else {
            Access::Read
        };
        let verb = match access {
            Access::Read => "read from",
            Access::Write => "write to",
            Access::Exec => "instruction fetch from",
        };
        let key = (page_down(addr), rip);
        if self.process.last_fault == Some(key) {
            self.process.fault_repeats += 1;
        } else {
            self.process.last_fault = Some(key);
            self.process.fault_repeats = 0;
        }
        if self.process.fault_repeats >= MAX_FAULT_REPEATS {
            let d =
                format!("page fault: {verb} {addr:#x} repeats after the page was mapped (error code {error_code:#x})");
            return self.fatal(11, d, 14, rip, Some(addr), error_code);
        }
        match self.process.mappings.fault(mem, addr, access) {
            Ok(()) => ExceptionOutcome::Retry,
            Err(FaultError::Unmapped) => {
                let mut d = format!("page fault: {verb} unmapped address {addr:#x}");
                if addr < USER_START {
                    d.push_str(" (near NULL)");
                } else if (STACK_TOP - STACK_SIZE - (1 << 20)..STACK_TOP - STACK_SIZE).contains(&addr) {
                    d.push_str(" (just below the stack: stack overflow?)");
                }
                self.fault(Fault { sig: 11, code: SEGV_MAPERR, vector: 14, rip, addr: Some(addr), error_code }, d)
            }
            Err(FaultError::Protection(prot)) => {
                let what = if !prot.readable() {
                    "inaccessible (PROT_NONE)"
                } else if access == Access::Write {
                    "read-only"
                } else {
                    "non-executable"
                };
                let d = format!("page fault: {verb} {what} address {addr:#x}");
                self.fault(Fault { sig: 11, code: SEGV_ACCERR, vector: 14, rip, addr: Some(addr), error_code }, d)
            }
            Err(FaultError::OutOfMemory) => self.fatal(
                crate::abi::signal::SIGKILL,
                format!("out of guest memory (page fault at {addr:#x}); raise --memory"),
                14,
                rip,
                Some(addr),
                error_code,
            ),
        }
    }

    /// A fault that becomes signal `f.sig`: its handler runs if the thread has one and does
    /// not block it ([`ExceptionOutcome::Deliver`]); otherwise the program dies of it.
    fn fault(&mut self, f: Fault, description: String) -> ExceptionOutcome {
        let si_addr = match f.sig {
            // SIGSEGV of a page fault: the address; SIGILL, SIGFPE: the instruction.
            11 if f.vector == 14 => f.addr.unwrap_or(0),
            4 | 8 => f.rip,
            _ => 0,
        };
        let trap = (u64::from(f.vector), f.error_code, f.addr.unwrap_or(0));
        if self.fault_to_handler(f.sig, f.code, si_addr, trap, f.rip) {
            return ExceptionOutcome::Deliver;
        }
        self.fatal(f.sig, description, f.vector, f.rip, f.addr, f.error_code)
    }

    fn fatal(
        &mut self,
        sig: i32,
        description: String,
        vector: u8,
        rip: u64,
        addr: Option<u64>,
        error_code: u64,
    ) -> ExceptionOutcome {
        self.record.tracer.exception(
            vector,
            rip,
            addr.unwrap_or(0),
            error_code,
            ExceptionRecord::Fatal(sig),
            self.sched.clock.now_ns(),
        );
        let st = ExitStatus::Signaled {
            signal: sig,
            name: signal::name(sig),
            fault: Some(FaultInfo { description, vector, rip, addr }),
        };
        self.process.exit = Some(st.clone());
        ExceptionOutcome::Fatal(st)
    }
}

/// `si_code` values of the faults' signals.
const SI_KERNEL: i32 = 0x80;
const SEGV_MAPERR: i32 = 1;
const SEGV_ACCERR: i32 = 2;
const SEGV_CPERR: i32 = 10;
const ILL_ILLOPN: i32 = 2;
const FPE_INTDIV: i32 = 1;
const FPE_FLTUNK: i32 = 14;
const BUS_ADRALN: i32 = 1;
const TRAP_TRACE: i32 = 2;

/// A CPU fault as the signal it becomes.
struct Fault {
    sig: i32,
    code: i32,
    vector: u8,
    rip: u64,
    /// The faulting address (CR2) of a page fault.
    addr: Option<u64>,
    error_code: u64,
}

impl Fault {
    fn at(sig: i32, code: i32, vector: u8, rip: u64) -> Fault {
        Fault { sig, code, vector, rip, addr: None, error_code: 0 }
    }
}

/// A way into a kernel other than `syscall`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EntryAttempt {
    /// `int N`.
    Int(u8),
    /// `sysenter`.
    Sysenter,
}

fn entry_attempt(code: &[u8]) -> Option<EntryAttempt> {
    match code {
        [0xcd, n, ..] => Some(EntryAttempt::Int(*n)),
        [0x0f, 0x34, ..] => Some(EntryAttempt::Sysenter),
        _ => None,
    }
}
