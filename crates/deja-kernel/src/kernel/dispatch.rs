//! Serving the guest: one syscall (the clock, faults, blocking, the trace) and the dispatch
//! table from numbers to handlers, and the exceptions (demand paging, emulated instructions,
//! attempts to enter a kernel another way, the fatal ones).

use super::*;

impl Kernel {
    /// Serves one syscall: `nr` from RAX, `args` from RDI, RSI, RDX, R10, R8, R9.
    pub fn syscall(&mut self, mem: &mut dyn Memory, nr: u64, args: [u64; 6]) -> SyscallOutcome {
        self.clock.advance(SYSCALL_COST_NS);
        self.faults.log.set_time(self.clock.now_ns());
        self.last_fault = None;
        let name = crate::syscalls::display_name(nr);
        *self.counts.entry(name.clone()).or_default() += 1;
        self.threads.call = (nr, args);
        let mut hashed = DataHasher::new(mem);
        let mut res = self.dispatch(&mut hashed, nr, args);
        let data = hashed.finish();
        // A crash at exit: the program exits believing its data is safe; the node dies there.
        if self.faults.config.crash_at_exit && !self.faults.crash_due {
            if let Err(Stop::Exit(ExitStatus::Exited { code })) = &res {
                self.faults.crash_point = format!("at exit (status {code})");
                self.faults.crash_due = true;
                res = Ok(0);
            }
        }
        if self.faults.faulted && self.faults.after_fault.len() < crate::faults::MAX_AFTER_FAULT {
            let errno = match &res {
                Err(Stop::Err(e)) => *e as u64,
                Err(Stop::Unsupported) => ENOSYS as u64,
                _ => 0,
            };
            self.faults.after_fault.push((nr, errno));
        }
        let res =
            if matches!(res, Err(Stop::Exit(_))) || self.faults.crash_due { res } else { self.schedule(mem, res) };
        let (outcome, ret) = match res {
            Ok(v) => (SyscallOutcome::Return(v), Some(v)),
            Err(Stop::Err(e)) => {
                let v = (-i64::from(e)) as u64;
                (SyscallOutcome::Return(v), Some(v))
            }
            Err(Stop::Unsupported) => {
                *self.unsupported.entry(name.clone()).or_default() += 1;
                let v = (-i64::from(ENOSYS)) as u64;
                (SyscallOutcome::Return(v), Some(v))
            }
            Err(Stop::Exit(st)) => {
                self.exit = Some(st.clone());
                (SyscallOutcome::Exit(st), None)
            }
            Err(Stop::Block) if self.threads.idle => (SyscallOutcome::Idle, Some(BLOCKED_RETURN)),
            Err(Stop::Block) => (SyscallOutcome::Return(BLOCKED_RETURN), Some(BLOCKED_RETURN)),
        };
        let (outcome, ret) = if self.faults.crash_due && !matches!(outcome, SyscallOutcome::Exit(_)) {
            self.faults.crash_due = false;
            let at = self.crash_point_words();
            self.faults.ledger.push(FaultRecord {
                kind: FaultKind::Crash,
                point: at.clone(),
                syscall_index: self.tracer.syscalls(),
                path: None,
                selected: true,
                applied: true,
                observed: false,
            });
            self.exit = Some(ExitStatus::Signaled {
                signal: signal::SIGKILL,
                name: signal::name(signal::SIGKILL),
                fault: Some(FaultInfo { description: format!("crash injected {at}"), vector: 0, rip: 0, addr: None }),
            });
            (SyscallOutcome::Crash, None)
        } else {
            (outcome, ret)
        };
        self.tracer.syscall(nr, &name, args, ret, self.clock.now_ns(), data);
        outcome
    }

    pub(crate) fn dispatch(&mut self, mem: &mut dyn Memory, nr: u64, a: [u64; 6]) -> SysResult {
        match nr {
            0 => self.sys_read(mem, a[0], a[1], a[2]),
            1 => self.sys_write(mem, a[0], a[1], a[2]),
            2 => self.sys_openat(mem, AT_FDCWD, a[0], a[1], a[2]),
            3 => self.sys_close(a[0]),
            4 => self.sys_fstatat(mem, AT_FDCWD, a[0], a[1], 0),
            5 => self.sys_fstat(mem, a[0], a[1]),
            6 => self.sys_fstatat(mem, AT_FDCWD, a[0], a[1], AT_SYMLINK_NOFOLLOW),
            7 => self.sys_poll(mem, a[0], a[1], a[2]),
            22 => self.sys_pipe2(mem, a[0], 0),
            23 => self.sys_select(mem, a),
            41 => self.sys_socket(a[0], a[1], a[2]),
            42 => self.sys_connect(mem, a[0], a[1], a[2]),
            43 => self.sys_accept4(mem, a[0], a[1], a[2], 0),
            44 => self.sys_sendto(mem, a),
            45 => self.sys_recvfrom(mem, a),
            46 => self.sys_sendmsg(mem, a[0], a[1], a[2]),
            47 => self.sys_recvmsg(mem, a[0], a[1], a[2]),
            48 => self.sys_shutdown(a[0], a[1]),
            49 => self.sys_bind(mem, a[0], a[1], a[2]),
            50 => self.sys_listen(a[0], a[1]),
            51 => self.sys_getsockname(mem, a[0], a[1], a[2], false),
            52 => self.sys_getsockname(mem, a[0], a[1], a[2], true),
            54 => self.sys_setsockopt(mem, a[0], a[1], a[2], a[3], a[4]),
            55 => self.sys_getsockopt(mem, a[0], a[1], a[2], a[3], a[4]),
            213 => {
                if (a[0] as i32) <= 0 {
                    Err(EINVAL.into())
                } else {
                    self.sys_epoll_create1(0)
                }
            }
            232 => self.sys_epoll_wait(mem, a[0], a[1], a[2], Kernel::ms_timeout(a[3])),
            233 => self.sys_epoll_ctl(mem, a[0], a[1], a[2], a[3]),
            270 => self.sys_pselect6(mem, a),
            281 => self.sys_epoll_wait(mem, a[0], a[1], a[2], Kernel::ms_timeout(a[3])),
            284 => self.sys_eventfd2(a[0], 0),
            288 => self.sys_accept4(mem, a[0], a[1], a[2], a[3]),
            290 => self.sys_eventfd2(a[0], a[1]),
            291 => self.sys_epoll_create1(a[0]),
            293 => self.sys_pipe2(mem, a[0], a[1]),
            441 => self.sys_epoll_pwait2(mem, a),
            8 => self.sys_lseek(a[0], a[1], a[2]),
            9 => self.sys_mmap(mem, a),
            10 => self.sys_mprotect(mem, a[0], a[1], a[2]),
            11 => self.sys_munmap(mem, a[0], a[1]),
            12 => self.sys_brk(mem, a[0]),
            13 => self.sys_rt_sigaction(mem, a[0], a[1], a[2], a[3]),
            14 => self.sys_rt_sigprocmask(mem, a[0], a[1], a[2], a[3]),
            16 => self.sys_ioctl(mem, a[0], a[1], a[2]),
            17 => self.sys_pread(mem, a[0], a[1], a[2], a[3]),
            18 => self.sys_pwrite(mem, a[0], a[1], a[2], a[3]),
            19 => self.sys_readv(mem, a[0], a[1], a[2]),
            20 => self.sys_writev(mem, a[0], a[1], a[2]),
            21 => self.sys_faccessat(mem, AT_FDCWD, a[0], a[1], 0),
            24 => Ok(0),
            25 => self.sys_mremap(mem, a),
            26 => self.sys_msync(a[0], a[1], a[2]),
            28 => self.sys_madvise(mem, a[0], a[1], a[2]),
            32 => self.sys_dup(a[0]),
            33 => self.sys_dup2(a[0], a[1]),
            35 => self.sys_nanosleep(mem, a[0], a[1]),
            39 => Ok(1),
            56 => self.sys_clone(mem, a),
            435 => self.sys_clone3(mem, a[0], a[1]),
            60 => self.sys_exit_thread(mem, a[0]),
            231 => Err(Stop::Exit(ExitStatus::Exited { code: (a[0] & 0xff) as i32 })),
            62 => self.sys_kill(a[0], a[1]),
            63 => self.sys_uname(mem, a[0]),
            72 => self.sys_fcntl(mem, a[0], a[1], a[2]),
            73 => self.sys_flock(a[0], a[1]),
            74 | 75 => self.sys_fsync(a[0], nr == 75),
            76 => self.sys_truncate(mem, a[0], a[1]),
            77 => self.sys_ftruncate(a[0], a[1]),
            82 => self.sys_renameat2(mem, AT_FDCWD, a[0], AT_FDCWD, a[1], 0),
            83 => self.sys_mkdirat(mem, AT_FDCWD, a[0], a[1]),
            84 => self.sys_unlinkat(mem, AT_FDCWD, a[0], crate::sys_fs::AT_REMOVEDIR),
            85 => self.sys_openat(mem, AT_FDCWD, a[0], 0o1101, a[1]),
            86 => self.sys_linkat(mem, AT_FDCWD, a[0], AT_FDCWD, a[1], 0),
            87 => self.sys_unlinkat(mem, AT_FDCWD, a[0], 0),
            88 => self.sys_symlinkat(mem, a[0], AT_FDCWD, a[1]),
            90 => self.sys_fchmodat(mem, AT_FDCWD, a[0], a[1]),
            91 => self.sys_fchmod(a[0], a[1]),
            162 => self.sys_sync(),
            258 => self.sys_mkdirat(mem, a[0], a[1], a[2]),
            263 => self.sys_unlinkat(mem, a[0], a[1], a[2]),
            264 => self.sys_renameat2(mem, a[0], a[1], a[2], a[3], 0),
            265 => self.sys_linkat(mem, a[0], a[1], a[2], a[3], a[4]),
            266 => self.sys_symlinkat(mem, a[0], a[1], a[2]),
            268 => self.sys_fchmodat(mem, a[0], a[1], a[2]),
            277 => self.sys_sync_file_range(a[0], a[1], a[2], a[3]),
            280 => self.sys_utimensat(mem, a[0], a[1], a[2], a[3]),
            285 => self.sys_fallocate(a[0], a[1], a[2], a[3]),
            306 => self.sys_syncfs(a[0]),
            316 => self.sys_renameat2(mem, a[0], a[1], a[2], a[3], a[4]),
            79 => self.sys_getcwd(mem, a[0], a[1]),
            89 => self.sys_readlinkat(mem, AT_FDCWD, a[0], a[1], a[2]),
            95 => {
                let old = self.umask;
                self.umask = (a[0] & 0o777) as u32;
                Ok(u64::from(old))
            }
            96 => self.sys_gettimeofday(mem, a[0], a[1]),
            97 => self.sys_prlimit(mem, 0, a[0], 0, a[1]),
            98 => self.sys_getrusage(mem, a[0], a[1]),
            99 => self.sys_sysinfo(mem, a[0]),
            100 => self.sys_times(mem, a[0]),
            102 | 104 | 107 | 108 => Ok(stack::GUEST_UID),
            110 => Ok(0),
            111 | 124 | 121 => Ok(1),
            115 => Ok(0),
            118 | 120 => self.sys_getresuid(mem, a[0], a[1], a[2]),
            131 => self.sys_sigaltstack(mem, a[0], a[1]),
            149 | 150 | 151 | 152 | 325 => Ok(0),
            157 => self.sys_prctl(mem, a),
            158 => self.sys_arch_prctl(mem, a[0], a[1]),
            160 => self.sys_prlimit(mem, 0, a[0], a[1], 0),
            186 => Ok(self.threads.current),
            200 => self.sys_tgkill(1, a[0], a[1]),
            201 => self.sys_time(mem, a[0]),
            202 => self.sys_futex(mem, a),
            203 => Ok(0),
            204 => self.sys_sched_getaffinity(mem, a[0], a[1], a[2]),
            217 => self.sys_getdents64(mem, a[0], a[1], a[2]),
            218 => {
                self.clear_child_tid = a[0];
                Ok(self.threads.current)
            }
            221 => self.fd_ok(a[0]),
            228 => self.sys_clock_gettime(mem, a[0], a[1]),
            229 => self.sys_clock_getres(mem, a[0], a[1]),
            230 => self.sys_clock_nanosleep(mem, a[0], a[1], a[2], a[3]),
            234 => self.sys_tgkill(a[0], a[1], a[2]),
            257 => self.sys_openat(mem, a[0], a[1], a[2], a[3]),
            262 => self.sys_fstatat(mem, a[0], a[1], a[2], a[3]),
            267 => self.sys_readlinkat(mem, a[0], a[1], a[2], a[3]),
            269 => self.sys_faccessat(mem, a[0], a[1], a[2], 0),
            439 => self.sys_faccessat(mem, a[0], a[1], a[2], a[3]),
            271 => self.sys_ppoll(mem, a[0], a[1], a[2], a[3], a[4]),
            273 => {
                if a[1] != 24 {
                    return Err(EINVAL.into());
                }
                self.robust_list = (a[0], a[1]);
                Ok(0)
            }
            292 => self.sys_dup3(a[0], a[1], a[2]),
            302 => self.sys_prlimit(mem, a[0], a[1], a[2], a[3]),
            309 => self.sys_getcpu(mem, a[0], a[1]),
            318 => self.sys_getrandom(mem, a[0], a[1], a[2]),
            324 => self.sys_membarrier(a[0], a[1]),
            332 => self.sys_statx(mem, a[0], a[1], a[2], a[3], a[4]),
            // rseq: deja answers ENOSYS on purpose (no restartable sequences without
            // preemption); glibc handles it. It is a policy, not a gap, so it is not counted
            // as unsupported.
            334 => Err(ENOSYS.into()),
            deja_protocol::DEJA_SYSCALL => self.sys_deja(mem, a),
            _ => Err(Stop::Unsupported),
        }
    }

    /// Decides what a CPU exception of ring-3 code means.
    ///
    /// A page fault inside a mapping that allows the access populates an aligned window of
    /// [`FAULT_AROUND_PAGES`] pages (clipped to the mapping) and answers
    /// [`ExceptionOutcome::Retry`]; `rdtsc`/`rdtscp` under `#GP` are emulated from the
    /// virtual clock and `cpuid` under `#GP` from the fixed table ([`crate::cpuid`]);
    /// everything else ends the program with the signal Linux would send.
    pub fn exception(&mut self, mem: &mut dyn Memory, exc: Exception) -> ExceptionOutcome {
        match exc {
            Exception::PageFault { addr, error_code, rip } => self.page_fault(mem, addr, error_code, rip),
            Exception::GeneralProtection { rip, error_code, eax, ecx } => {
                let mut code = [0u8; 15];
                let n = (0..code.len())
                    .take_while(|&i| self.vm.copy_in(mem, rip + i as u64, &mut code[i..=i]).is_ok())
                    .count();
                match crate::cpuid::decode(&code[..n]) {
                    Some((insn @ Emulated::Cpuid, len)) => {
                        // Answered from the fixed table, untraced and free: a host whose KVM
                        // answers CPUID itself gives the same run.
                        let [a, b, c, d] = crate::cpuid::answer(eax, ecx);
                        return ExceptionOutcome::Emulated { insn, eax: a, ebx: Some(b), ecx: Some(c), edx: d, len };
                    }
                    Some((insn, len)) => {
                        self.clock.advance(RDTSC_COST_NS);
                        let tsc = self.clock.tsc();
                        self.tracer.exception(
                            13,
                            rip,
                            0,
                            error_code,
                            ExceptionRecord::Emulated(tsc),
                            self.clock.now_ns(),
                        );
                        return ExceptionOutcome::Emulated {
                            insn,
                            eax: tsc as u32,
                            ebx: None,
                            ecx: (insn == Emulated::Rdtscp).then_some(0),
                            edx: (tsc >> 32) as u32,
                            len,
                        };
                    }
                    None => {}
                }
                if let Some(how) = entry_attempt(&code[..n]) {
                    return self.entry_attempt(how, rip);
                }
                self.fatal(
                    11,
                    "general protection fault (privileged instruction or bad address)".into(),
                    13,
                    rip,
                    None,
                    error_code,
                )
            }
            Exception::Other { vector: 6, rip } if self.entry_at(mem, rip).is_some() => {
                let how = self.entry_at(mem, rip).unwrap_or(EntryAttempt::Sysenter);
                self.entry_attempt(how, rip)
            }
            Exception::Other { vector, rip } => {
                let (sig, what) = match vector {
                    0 => (8, "divide error".to_string()),
                    1 => (5, "debug trap".to_string()),
                    3 => (5, "breakpoint (int3)".to_string()),
                    4 => (11, "overflow (into)".to_string()),
                    5 => (11, "bound range exceeded".to_string()),
                    6 => (4, "invalid opcode".to_string()),
                    7 => (11, "device not available".to_string()),
                    10 => (11, "invalid TSS".to_string()),
                    11 => (7, "segment not present".to_string()),
                    12 => (7, "stack segment fault".to_string()),
                    13 => (11, "general protection fault".to_string()),
                    14 => (11, "page fault".to_string()),
                    16 => (8, "x87 floating-point exception".to_string()),
                    17 => (7, "alignment check".to_string()),
                    18 => (7, "machine check".to_string()),
                    19 => (8, "SIMD floating-point exception".to_string()),
                    21 => (11, "control protection fault".to_string()),
                    v => (11, format!("CPU exception vector {v}")),
                };
                self.fatal(sig, what, vector, rip, None, 0)
            }
        }
    }

    /// The other way into a kernel at `rip`, if that is what is there.
    fn entry_at(&self, mem: &mut dyn Memory, rip: u64) -> Option<EntryAttempt> {
        let mut code = [0u8; 2];
        self.vm.copy_in(mem, rip, &mut code).ok()?;
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
                self.fatal(11, what, 13, rip, None, u64::from(n) << 3 | 2)
            }
            EntryAttempt::Sysenter => self.fatal(4, format!("invalid opcode: sysenter ({serves})"), 6, rip, None, 0),
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
        if self.last_fault == Some(key) {
            self.fault_repeats += 1;
        } else {
            self.last_fault = Some(key);
            self.fault_repeats = 0;
        }
        if self.fault_repeats >= MAX_FAULT_REPEATS {
            let d =
                format!("page fault: {verb} {addr:#x} repeats after the page was mapped (error code {error_code:#x})");
            return self.fatal(11, d, 14, rip, Some(addr), error_code);
        }
        match self.vm.fault(mem, addr, access) {
            Ok(()) => ExceptionOutcome::Retry,
            Err(FaultError::Unmapped) => {
                let mut d = format!("page fault: {verb} unmapped address {addr:#x}");
                if addr < USER_START {
                    d.push_str(" (near NULL)");
                } else if (STACK_TOP - STACK_SIZE - (1 << 20)..STACK_TOP - STACK_SIZE).contains(&addr) {
                    d.push_str(" (just below the stack: stack overflow?)");
                }
                self.fatal(11, d, 14, rip, Some(addr), error_code)
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
                self.fatal(11, d, 14, rip, Some(addr), error_code)
            }
            Err(FaultError::OutOfMemory) => self.fatal(
                signal::SIGKILL,
                format!("out of guest memory (page fault at {addr:#x}); raise --memory"),
                14,
                rip,
                Some(addr),
                error_code,
            ),
        }
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
        self.tracer.exception(
            vector,
            rip,
            addr.unwrap_or(0),
            error_code,
            ExceptionRecord::Fatal(sig),
            self.clock.now_ns(),
        );
        let st = ExitStatus::Signaled {
            signal: sig,
            name: signal::name(sig),
            fault: Some(FaultInfo { description, vector, rip, addr }),
        };
        self.exit = Some(st.clone());
        ExceptionOutcome::Fatal(st)
    }
    fn fd_ok(&mut self, fd: u64) -> SysResult {
        self.fds.get(fd as i32)?;
        Ok(0)
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
