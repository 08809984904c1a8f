//! Process-level syscalls: identity, limits, time, futex, randomness, `arch_prctl`,
//! `prctl`, `uname`, scheduling.
//!
//! Every process of a node has uid/gid 1000; the first is pid 1 with parent 0, and `fork`,
//! `vfork` and `clone` add more (`sys_process.rs`, [`crate::task::procs`]); each has threads (see
//! [`crate::task::threads`]: clone, blocking futexes, sleeps, the scheduler). A wait that nothing can
//! ever end (every thread blocked without a timeout, or a `poll` without timeout on fds that
//! never become ready) ends the program with `SIGKILL` and a fault description starting with
//! `deadlock:` (vector 0, rip 0: it is not a CPU fault).

use crate::abi::errno::*;
use crate::abi::signal::SIGKILL;
use crate::kernel::{Kernel, SysResult, SysStop, MAX_IO};
use crate::mm::mappings::Access;
use crate::mm::stack::GUEST_UID;
use crate::prelude::*;
use crate::signal::{self};
use crate::time::clock::{clock_kind, ClockKind, NS_PER_S};
use crate::{ExitStatus, FaultInfo, Memory, PAGE_SIZE};

const ARCH_SET_GS: u64 = 0x1001;
const ARCH_SET_FS: u64 = 0x1002;
const ARCH_GET_FS: u64 = 0x1003;
const ARCH_GET_GS: u64 = 0x1004;
const ARCH_GET_CPUID: u64 = 0x1011;
const ARCH_SET_CPUID: u64 = 0x1012;
/// `sizeof(struct robust_list_head)`, the only length `set_robust_list` accepts.
const ROBUST_LIST_HEAD_SIZE: u64 = 24;
/// First address above the canonical user half.
const USER_LIMIT: u64 = 0x0000_8000_0000_0000;

impl Kernel {
    /// The status of a program that waits for something that can never happen.
    pub(crate) fn deadlock(&self, what: &str) -> ExitStatus {
        ExitStatus::Signaled {
            signal: SIGKILL,
            name: signal::name(SIGKILL),
            fault: Some(FaultInfo { description: format!("deadlock: {what}"), vector: 0, rip: 0, addr: None }),
        }
    }

    /// Reads a `struct timespec` as nanoseconds (`EINVAL` if out of range).
    pub(crate) fn read_timespec(&self, mem: &mut dyn Memory, addr: u64) -> Result<u64, i32> {
        let mut b = [0u8; 16];
        self.process.mappings.copy_in(mem, addr, &mut b)?;
        let sec = i64::from_le_bytes(b[..8].try_into().unwrap_or_default());
        let nsec = i64::from_le_bytes(b[8..].try_into().unwrap_or_default());
        if sec < 0 || !(0..NS_PER_S as i64).contains(&nsec) {
            return Err(EINVAL);
        }
        Ok((sec as u64).saturating_mul(NS_PER_S).saturating_add(nsec as u64))
    }

    fn write_pair(&self, mem: &mut dyn Memory, addr: u64, a: u64, b: u64) -> Result<(), i32> {
        let mut buf = [0u8; 16];
        buf[..8].copy_from_slice(&a.to_le_bytes());
        buf[8..].copy_from_slice(&b.to_le_bytes());
        self.process.mappings.copy_out(mem, addr, &buf)
    }

    pub(crate) fn sys_clock_gettime(&mut self, mem: &mut dyn Memory, clk: u64, tp: u64) -> SysResult {
        let kind = clock_kind(clk).ok_or(EINVAL)?;
        let ns = self.sched.clock.read(kind);
        self.write_pair(mem, tp, ns / NS_PER_S, ns % NS_PER_S)?;
        Ok(0)
    }

    pub(crate) fn sys_clock_getres(&mut self, mem: &mut dyn Memory, clk: u64, res: u64) -> SysResult {
        clock_kind(clk).ok_or(EINVAL)?;
        if res != 0 {
            self.write_pair(mem, res, 0, 1)?;
        }
        Ok(0)
    }

    pub(crate) fn sys_gettimeofday(&mut self, mem: &mut dyn Memory, tv: u64, tz: u64) -> SysResult {
        let ns = self.sched.clock.realtime_ns();
        if tv != 0 {
            self.write_pair(mem, tv, ns / NS_PER_S, ns % NS_PER_S / 1000)?;
        }
        if tz != 0 {
            self.process.mappings.copy_out(mem, tz, &[0u8; 8])?;
        }
        Ok(0)
    }

    pub(crate) fn sys_time(&mut self, mem: &mut dyn Memory, tloc: u64) -> SysResult {
        let s = self.sched.clock.realtime_ns() / NS_PER_S;
        if tloc != 0 {
            self.process.mappings.copy_out(mem, tloc, &s.to_le_bytes())?;
        }
        Ok(s)
    }

    pub(crate) fn sys_nanosleep(&mut self, mem: &mut dyn Memory, req: u64, rem: u64) -> SysResult {
        let ns = self.read_timespec(mem, req)?;
        self.sched.threads.block_sleep(self.sched.clock.now_ns().saturating_add(ns), rem);
        Err(SysStop::Block)
    }

    pub(crate) fn sys_clock_nanosleep(
        &mut self,
        mem: &mut dyn Memory,
        clk: u64,
        flags: u64,
        req: u64,
        rem: u64,
    ) -> SysResult {
        let kind = clock_kind(clk).ok_or(EINVAL)?;
        if kind == ClockKind::ThreadCpu {
            return Err(EINVAL.into());
        }
        let t = self.read_timespec(mem, req)?;
        let absolute = flags & 1 != 0;
        let ns = if absolute { t.saturating_sub(self.sched.clock.read(kind)) } else { t };
        // An absolute sleep a signal ends has nothing left to say.
        self.sched.threads.block_sleep(self.sched.clock.now_ns().saturating_add(ns), if absolute { 0 } else { rem });
        Err(SysStop::Block)
    }

    pub(crate) fn sys_times(&mut self, mem: &mut dyn Memory, buf: u64) -> SysResult {
        let ticks = self.sched.clock.now_ns() / (NS_PER_S / 100);
        if buf != 0 {
            let mut b = [0u8; 32];
            b[..8].copy_from_slice(&ticks.to_le_bytes());
            self.process.mappings.copy_out(mem, buf, &b)?;
        }
        Ok(ticks)
    }

    pub(crate) fn sys_getrusage(&mut self, mem: &mut dyn Memory, who: u64, ru: u64) -> SysResult {
        let who = who as i32;
        if !matches!(who, -1..=1) {
            return Err(EINVAL.into());
        }
        let mut b = [0u8; 144];
        if who != -1 {
            let ns = self.sched.clock.now_ns();
            b[..8].copy_from_slice(&(ns / NS_PER_S).to_le_bytes());
            b[8..16].copy_from_slice(&(ns % NS_PER_S / 1000).to_le_bytes());
            let maxrss_kb = self.process.mappings.committed() * (PAGE_SIZE / 1024);
            b[32..40].copy_from_slice(&maxrss_kb.to_le_bytes());
        }
        self.process.mappings.copy_out(mem, ru, &b)?;
        Ok(0)
    }

    pub(crate) fn sys_sysinfo(&mut self, mem: &mut dyn Memory, info: u64) -> SysResult {
        let mut b = [0u8; 112];
        let mut put = |o: usize, v: u64, n: usize| b[o..o + n].copy_from_slice(&v.to_le_bytes()[..n]);
        put(0, self.sched.clock.now_ns() / NS_PER_S, 8);
        put(32, self.process.mappings.capacity() * PAGE_SIZE, 8);
        put(40, self.process.mappings.capacity().saturating_sub(self.process.mappings.committed()) * PAGE_SIZE, 8);
        put(80, 1, 2);
        put(104, 1, 4);
        self.process.mappings.copy_out(mem, info, &b)?;
        Ok(0)
    }

    pub(crate) fn sys_uname(&mut self, mem: &mut dyn Memory, buf: u64) -> SysResult {
        let mut b = [0u8; 390];
        let fields = ["Linux", "deja", "6.1.0-deja", "#1 SMP deja", "x86_64", "(none)"];
        for (i, f) in fields.iter().enumerate() {
            b[i * 65..i * 65 + f.len()].copy_from_slice(f.as_bytes());
        }
        self.process.mappings.copy_out(mem, buf, &b)?;
        Ok(0)
    }

    /// `getuid`, `geteuid`, `getgid`, `getegid`: every id is [`GUEST_UID`].
    pub(crate) fn sys_getuid(&self) -> SysResult {
        Ok(GUEST_UID)
    }

    /// `setuid`, `setgid`, `setreuid`, `setregid`, `setresuid`, `setresgid`: a program without
    /// privileges may only set each id to one it already has (every one is [`GUEST_UID`]) or
    /// leave it (-1); anything else is `EPERM`, as on Linux.
    pub(crate) fn sys_set_ids(&self, ids: &[u64]) -> SysResult {
        if ids.iter().all(|&id| id as u32 == u32::MAX || u64::from(id as u32) == GUEST_UID) {
            Ok(0)
        } else {
            Err(EPERM.into())
        }
    }

    /// `setuid`, `setgid`: -1 is not an id (`EINVAL`); otherwise as [`Kernel::sys_set_ids`].
    pub(crate) fn sys_setuid(&self, id: u64) -> SysResult {
        if id as u32 == u32::MAX {
            return Err(EINVAL.into());
        }
        self.sys_set_ids(&[id])
    }

    /// `setfsuid`, `setfsgid`: the id before the call, which a program without privileges
    /// cannot change to anything but its own.
    pub(crate) fn sys_setfsid(&self) -> SysResult {
        Ok(GUEST_UID)
    }

    /// `setgroups`: `EPERM` without `CAP_SETGID`.
    pub(crate) fn sys_setgroups(&self) -> SysResult {
        Err(EPERM.into())
    }

    /// `getgroups`: no supplementary groups.
    pub(crate) fn sys_getgroups(&self) -> SysResult {
        Ok(0)
    }

    /// `gettid`: the calling thread.
    pub(crate) fn sys_gettid(&self) -> SysResult {
        Ok(self.sched.threads.current)
    }

    /// `set_tid_address`: records the calling thread's `clear_child_tid` and returns its tid.
    pub(crate) fn sys_set_tid_address(&mut self, addr: u64) -> SysResult {
        self.process.clear_child_tid = addr;
        Ok(self.sched.threads.current)
    }

    /// `set_robust_list`: records the head (the list is never walked); `len` must be the size
    /// of `struct robust_list_head`.
    pub(crate) fn sys_set_robust_list(&mut self, head: u64, len: u64) -> SysResult {
        if len != ROBUST_LIST_HEAD_SIZE {
            return Err(EINVAL.into());
        }
        self.process.robust_list = (head, len);
        Ok(0)
    }

    /// `exit_group`: the process ends with the low byte of `code` as its status (pid 1: the
    /// whole node; see [`Kernel::end_process`] for the others).
    pub(crate) fn sys_exit_group(&mut self, code: u64) -> SysResult {
        Err(SysStop::Exit(ExitStatus::Exited { code: i32::from(code as u8) }))
    }

    /// `rseq`: deja answers ENOSYS on purpose (no restartable sequences without preemption);
    /// glibc handles it. It is a policy, not a gap, so it is not counted as unsupported.
    pub(crate) fn sys_rseq(&mut self) -> SysResult {
        Err(ENOSYS.into())
    }

    pub(crate) fn sys_getresuid(&mut self, mem: &mut dyn Memory, r: u64, e: u64, s: u64) -> SysResult {
        for p in [r, e, s] {
            self.process.mappings.copy_out(mem, p, &(GUEST_UID as u32).to_le_bytes())?;
        }
        Ok(0)
    }

    pub(crate) fn sys_prlimit(&mut self, mem: &mut dyn Memory, pid: u64, res: u64, new: u64, old: u64) -> SysResult {
        if !matches!(pid as i32, 0 | 1) {
            return Err(ESRCH.into());
        }
        let res = res as u32 as usize;
        if res >= self.process.rlimits.len() {
            return Err(EINVAL.into());
        }
        let mut set = None;
        if new != 0 {
            let mut b = [0u8; 16];
            self.process.mappings.copy_in(mem, new, &mut b)?;
            let cur = u64::from_le_bytes(b[..8].try_into().unwrap_or_default());
            let max = u64::from_le_bytes(b[8..].try_into().unwrap_or_default());
            if cur > max {
                return Err(EINVAL.into());
            }
            if max > self.process.rlimits[res].1 {
                return Err(EPERM.into());
            }
            set = Some((cur, max));
        }
        if old != 0 {
            let (c, m) = self.process.rlimits[res];
            self.write_pair(mem, old, c, m)?;
        }
        if let Some(v) = set {
            self.process.rlimits[res] = v;
        }
        Ok(0)
    }

    pub(crate) fn sys_arch_prctl(&mut self, mem: &mut dyn Memory, code: u64, addr: u64) -> SysResult {
        match code {
            ARCH_SET_FS | ARCH_SET_GS => {
                if addr >= USER_LIMIT {
                    return Err(EPERM.into());
                }
                if code == ARCH_SET_FS {
                    self.process.fs_base = addr;
                } else {
                    self.process.gs_base = addr;
                }
                Ok(0)
            }
            ARCH_GET_FS | ARCH_GET_GS => {
                let v = if code == ARCH_GET_FS { self.process.fs_base } else { self.process.gs_base };
                self.process.mappings.copy_out(mem, addr, &v.to_le_bytes())?;
                Ok(0)
            }
            ARCH_GET_CPUID => Ok(1),
            ARCH_SET_CPUID => Err(ENODEV.into()),
            _ => Err(EINVAL.into()),
        }
    }

    pub(crate) fn sys_prctl(&mut self, mem: &mut dyn Memory, a: [u64; 6]) -> SysResult {
        match a[0] {
            1 => self.set_pdeathsig(a[1]),
            4 | 38 => Ok(0), // SET_DUMPABLE, SET_NO_NEW_PRIVS
            2 => {
                let sig = self.pdeathsig();
                self.process.mappings.copy_out(mem, a[1], &sig.to_le_bytes())?;
                Ok(0)
            }
            3 => Ok(1),  // PR_GET_DUMPABLE
            39 => Ok(0), // PR_GET_NO_NEW_PRIVS
            // PR_GET_KEEPCAPS and PR_SET_KEEPCAPS (0 or 1) of the calling thread: a program
            // without capabilities has none to keep, but the flag is kept as Linux keeps it.
            7 => Ok(u64::from(self.current_thread().is_some_and(|t| t.keepcaps))),
            8 if a[1] <= 1 => {
                let tid = self.caller_tid();
                if let Some(t) = self.sched.threads.threads.get_mut(&tid) {
                    t.keepcaps = a[1] == 1;
                }
                Ok(0)
            }
            15 => {
                let mut name = [0u8; 16];
                for (i, b) in name.iter_mut().take(15).enumerate() {
                    let mut c = [0u8];
                    self.process.mappings.copy_in(mem, a[1].wrapping_add(i as u64), &mut c)?;
                    if c[0] == 0 {
                        break;
                    }
                    *b = c[0];
                }
                self.process.comm = name;
                Ok(0)
            }
            16 => {
                let c = self.process.comm;
                self.process.mappings.copy_out(mem, a[1], &c)?;
                Ok(0)
            }
            _ => Err(EINVAL.into()),
        }
    }

    /// `capget`: a program that is not root has no capabilities. The header's version is
    /// checked as Linux checks it (an unknown one is answered with the preferred version and
    /// `EINVAL`), its pid must be the program's (or 0), and every set is empty.
    pub(crate) fn sys_capget(&mut self, mem: &mut dyn Memory, header: u64, data: u64) -> SysResult {
        let Some(words) = self.cap_header(mem, header, data)? else { return Ok(0) };
        if data != 0 {
            self.process.mappings.copy_out(mem, data, &vec![0u8; 12 * words])?;
        }
        Ok(0)
    }

    /// `capset`: a program without capabilities may only keep having none (`EPERM`).
    pub(crate) fn sys_capset(&mut self, mem: &mut dyn Memory, header: u64, data: u64) -> SysResult {
        if data == 0 {
            return Err(EFAULT.into());
        }
        let Some(words) = self.cap_header(mem, header, data)? else { return Ok(0) };
        let mut sets = vec![0u8; 12 * words];
        self.process.mappings.copy_in(mem, data, &mut sets)?;
        if sets.iter().any(|&b| b != 0) {
            return Err(EPERM.into());
        }
        Ok(0)
    }

    /// Reads a `__user_cap_header_struct`: the number of 32-bit words of each set its version
    /// means; `None` for an unknown version asked about with no data (Linux answers 0 after
    /// writing the version it prefers).
    fn cap_header(&mut self, mem: &mut dyn Memory, header: u64, data: u64) -> Result<Option<usize>, SysStop> {
        const V1: u32 = 0x1998_0330;
        const V2: u32 = 0x2007_1026;
        const V3: u32 = 0x2008_0522;
        let version = self.process.mappings.read_u32(mem, header)?;
        let words = match version {
            V1 => 1,
            V2 | V3 => 2,
            _ => {
                self.process.mappings.copy_out(mem, header, &V3.to_le_bytes())?;
                return if data == 0 { Ok(None) } else { Err(EINVAL.into()) };
            }
        };
        if data == 0 {
            return Ok(None);
        }
        let pid = self.process.mappings.read_u32(mem, header + 4)?;
        if pid as i32 != 0 && !self.procs.table.contains_key(&u64::from(pid)) && !self.thread_exists(u64::from(pid)) {
            return Err(ESRCH.into());
        }
        if (pid as i32) < 0 {
            return Err(EINVAL.into());
        }
        Ok(Some(words))
    }

    /// `sched_yield`: nothing to do; the scheduler runs after every syscall anyway.
    pub(crate) fn sys_sched_yield(&mut self) -> SysResult {
        Ok(0)
    }

    fn caller_tid(&self) -> u64 {
        self.sched.threads.current
    }

    fn current_thread(&self) -> Option<&crate::task::threads::Thread> {
        self.sched.threads.threads.get(&self.caller_tid())
    }

    /// How many CPUs the program is shown.
    pub fn cpus(&self) -> u32 {
        self.process.cpus
    }

    /// Bytes of a CPU mask for the program's CPUs (Linux's `cpumask_size()`).
    fn cpumask_size(&self) -> u64 {
        u64::from(self.process.cpus).div_ceil(64) * 8
    }

    /// `sched_setaffinity`: a mask that names at least one of the program's CPUs is accepted
    /// and changes nothing (deja runs one thread at a time whatever the mask).
    pub(crate) fn sys_sched_setaffinity(&mut self, mem: &mut dyn Memory, pid: u64, len: u64, mask: u64) -> SysResult {
        if pid as i32 != 0 && !self.thread_exists(u64::from(pid as u32)) {
            return Err(ESRCH.into());
        }
        let n = len.min(self.cpumask_size()) as usize;
        let mut b = vec![0u8; n];
        self.process.mappings.copy_in(mem, mask, &mut b)?;
        let cpus = self.process.cpus as usize;
        let any = b.iter().enumerate().any(|(i, byte)| (0..8).any(|bit| byte >> bit & 1 == 1 && i * 8 + bit < cpus));
        if !any {
            return Err(EINVAL.into());
        }
        Ok(0)
    }

    /// `sched_getaffinity`: every one of the program's CPUs.
    pub(crate) fn sys_sched_getaffinity(&mut self, mem: &mut dyn Memory, pid: u64, len: u64, mask: u64) -> SysResult {
        if pid as i32 != 0 && !self.thread_exists(u64::from(pid as u32)) {
            return Err(ESRCH.into());
        }
        let size = self.cpumask_size();
        if len.saturating_mul(8) < u64::from(self.process.cpus) || !len.is_multiple_of(8) {
            return Err(EINVAL.into());
        }
        let cpus = self.process.cpus as usize;
        let mut b = vec![0u8; size as usize];
        for cpu in 0..cpus {
            b[cpu / 8] |= 1 << (cpu % 8);
        }
        self.process.mappings.copy_out(mem, mask, &b)?;
        Ok(size)
    }

    pub(crate) fn sys_getcpu(&mut self, mem: &mut dyn Memory, cpu: u64, node: u64) -> SysResult {
        for p in [cpu, node] {
            if p != 0 {
                self.process.mappings.copy_out(mem, p, &0u32.to_le_bytes())?;
            }
        }
        Ok(0)
    }

    pub(crate) fn sys_getrandom(&mut self, mem: &mut dyn Memory, buf: u64, len: u64, flags: u64) -> SysResult {
        if flags & !7 != 0 || flags & 6 == 6 {
            return Err(EINVAL.into());
        }
        let len = len.min(MAX_IO);
        self.process.mappings.check(buf, len, Access::Write)?;
        let mut b = vec![0u8; len as usize];
        self.rng.fill(&mut b);
        self.process.mappings.copy_out(mem, buf, &b)?;
        Ok(len)
    }

    pub(crate) fn sys_membarrier(&mut self, cmd: u64, flags: u64) -> SysResult {
        if flags != 0 {
            return Err(EINVAL.into());
        }
        match cmd {
            0 => Ok(1 | 8 | 16),
            1 | 8 | 16 => Ok(0),
            _ => Err(EINVAL.into()),
        }
    }

    pub(crate) fn sys_futex(&mut self, mem: &mut dyn Memory, a: [u64; 6]) -> SysResult {
        let [uaddr, op, val, timeout, uaddr2, val3] = a;
        let realtime = op & 256 != 0;
        let cmd = op & !(128 | 256);
        let aligned = |p: u64| if p & 3 != 0 { Err(EINVAL) } else { Ok(()) };
        // A count argument (`int`): negative wakes/moves none.
        let count = |v: u64| u64::from((v as i32).max(0) as u32);
        match cmd {
            0 | 9 => {
                if cmd == 9 && val3 as u32 == 0 {
                    return Err(EINVAL.into());
                }
                aligned(uaddr)?;
                let cur = self.process.mappings.read_u32(mem, uaddr)?;
                if cur != val as u32 {
                    return Err(EAGAIN.into());
                }
                let now = self.sched.clock.now_ns();
                let deadline = if timeout == 0 {
                    None
                } else {
                    let t = self.read_timespec(mem, timeout)?;
                    if cmd == 0 {
                        Some(now.saturating_add(t))
                    } else {
                        let kind = if realtime { ClockKind::Realtime } else { ClockKind::Monotonic };
                        Some(now.saturating_add(t.saturating_sub(self.sched.clock.read(kind))))
                    }
                };
                let bitset = if cmd == 9 { val3 as u32 } else { u32::MAX };
                self.sched.threads.block_futex(uaddr, bitset, deadline);
                Err(SysStop::Block)
            }
            1 | 10 => {
                if cmd == 10 && val3 as u32 == 0 {
                    return Err(EINVAL.into());
                }
                aligned(uaddr)?;
                let bitset = if cmd == 10 { val3 as u32 } else { u32::MAX };
                // Like Linux, a count of 0 (or less) still wakes one.
                Ok(self.sched.threads.futex_wake(self.sched.threads.space(), uaddr, bitset, count(val).max(1)))
            }
            3 | 4 => {
                aligned(uaddr)?;
                aligned(uaddr2)?;
                if (val as i32) < 0 || (timeout as i32) < 0 {
                    return Err(EINVAL.into());
                }
                if cmd == 4 && self.process.mappings.read_u32(mem, uaddr)? != val3 as u32 {
                    return Err(EAGAIN.into());
                }
                Ok(self.sched.threads.futex_requeue(
                    self.sched.threads.space(),
                    uaddr,
                    uaddr2,
                    count(val),
                    count(timeout),
                ))
            }
            5 => {
                aligned(uaddr)?;
                aligned(uaddr2)?;
                let old = self.process.mappings.read_u32(mem, uaddr2)?;
                let v3 = val3 as u32;
                let mut oparg = ((v3 << 8) as i32 >> 20) as u32;
                let cmparg = ((v3 << 20) as i32) >> 20;
                if (v3 >> 28) & 8 != 0 {
                    oparg = 1u32.wrapping_shl(oparg & 31);
                }
                let new = match (v3 >> 28) & 7 {
                    0 => oparg,
                    1 => old.wrapping_add(oparg),
                    2 => old | oparg,
                    3 => old & !oparg,
                    4 => old ^ oparg,
                    _ => return Err(ENOSYS.into()),
                };
                let o = old as i32;
                let hit = match (v3 >> 24) & 15 {
                    0 => o == cmparg,
                    1 => o != cmparg,
                    2 => o < cmparg,
                    3 => o <= cmparg,
                    4 => o > cmparg,
                    5 => o >= cmparg,
                    _ => return Err(ENOSYS.into()),
                };
                self.process.mappings.copy_out(mem, uaddr2, &new.to_le_bytes())?;
                let mut n =
                    self.sched.threads.futex_wake(self.sched.threads.space(), uaddr, u32::MAX, count(val).max(1));
                if hit {
                    n += self.sched.threads.futex_wake(
                        self.sched.threads.space(),
                        uaddr2,
                        u32::MAX,
                        count(timeout).max(1),
                    );
                }
                Ok(n)
            }
            6 | 8 | 13 => {
                aligned(uaddr)?;
                let v = self.process.mappings.read_u32(mem, uaddr)?;
                let me = self.current_tid();
                match u64::from(v & 0x3fff_ffff) {
                    0 => {
                        self.process.mappings.copy_out(mem, uaddr, &(me as u32).to_le_bytes())?;
                        Ok(0)
                    }
                    o if o == me => Err(EDEADLK.into()),
                    _ if cmd == 8 => Err(EAGAIN.into()),
                    o if self.thread_exists(o) => Err(SysStop::Unsupported), // blocking PI locks
                    _ => Err(ESRCH.into()),
                }
            }
            7 => {
                aligned(uaddr)?;
                if u64::from(self.process.mappings.read_u32(mem, uaddr)? & 0x3fff_ffff) != self.current_tid() {
                    return Err(EPERM.into());
                }
                self.process.mappings.copy_out(mem, uaddr, &0u32.to_le_bytes())?;
                Ok(0)
            }
            _ => Err(ENOSYS.into()),
        }
    }
}
