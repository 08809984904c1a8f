//! Threads (`CLONE_THREAD`), blocking futexes and the deterministic scheduler.
//!
//! # Model
//!
//! A program is one process (pid 1) with one or more threads; the main thread has tid 1 and
//! every thread created by `clone`/`clone3` gets the next tid (2, 3, …, never reused). Exactly
//! one thread runs at a time ([`Kernel::current_tid`]); the kernel switches threads only at a
//! syscall, never at an exception. Per thread: the FS and GS bases, the `clear_child_tid`
//! address (`set_tid_address`, `CLONE_CHILD_CLEARTID`), the robust list head (recorded only),
//! and the signal mask. Everything else (memory, fds, signal dispositions, pending signals) is
//! shared.
//!
//! # Scheduling
//!
//! After every syscall that neither ended the program nor crashed the node, the scheduler runs:
//! 1. every blocked thread whose deadline (futex timeout, sleep) is at or before the virtual
//!    clock wakes (futex waits with `-ETIMEDOUT`, sleeps with 0), in order of deadline then tid;
//! 2. if no thread is runnable and some blocked thread has a deadline, the clock advances to the
//!    earliest deadline and step 1 repeats; if none has one, the program is deadlocked and ends
//!    as `SIGKILL` with a `deadlock: …` [`FaultInfo`](crate::FaultInfo);
//! 3. with exactly one runnable thread, it runs (no decision: single-threaded runs take no
//!    scheduling decisions and keep their decision logs); with `n > 1`, the decision
//!    `schedule after syscall K` (`K`: the 1-based number of the syscall just served) with `n`
//!    options picks the index among the runnable threads sorted by tid. Like every decision it
//!    can be steered with [`Kernel::set_decision_overrides`].
//!
//! Blocking calls: `futex` `FUTEX_WAIT`/`FUTEX_WAIT_BITSET` (a value mismatch is `-EAGAIN`
//! without blocking), `nanosleep` and `clock_nanosleep` (the sleeper blocks until the clock
//! reaches its deadline; the clock only jumps when every thread is blocked), and a joiner's
//! futex wait on a `CLONE_CHILD_CLEARTID` word. Wakes are FIFO in the order of waiting.
//!
//! # The shell's register contract
//!
//! The shell keeps one saved register file per thread. After **every** [`Kernel::syscall`]:
//! 1. If the outcome is [`SyscallOutcome::Return(v)`](crate::SyscallOutcome::Return), put `v` in
//!    RAX of the thread that made the call (the one current before the call; its registers are
//!    still in the vCPU) and advance past the `syscall` as usual. When that thread blocked or
//!    exited, `v` is the placeholder [`BLOCKED_RETURN`] (`-ERESTARTSYS`, never seen by the
//!    program): a blocked thread gets its real value in step 3 before it runs again, an exited
//!    thread never runs again (its registers may be dropped).
//! 2. Call [`Kernel::take_spawned`]: for each [`SpawnedThread`], create a register file: a copy
//!    of the calling thread's registers as set in step 1 (RIP after the `syscall`, RFLAGS as
//!    for the syscall return) with RAX = 0, RSP = `stack` if it is non-zero, and FS base =
//!    `tls` when it is `Some` (else the caller's FS base); GS base is the caller's. The same
//!    value is [`Kernel::thread_fs_base`].
//! 3. If [`Kernel::current_tid`] changed, save the vCPU registers to the calling thread's file.
//!    Then call [`Kernel::take_wakeup_returns`] and, for each `(tid, rax)`, set RAX in `tid`'s
//!    saved file (these threads are never the current thread when it did not change: a blocked
//!    caller that wakes within its own call gets its value as `Return(v)` in step 1).
//! 4. If the current thread changed, load its saved registers and its FS/GS base
//!    ([`Kernel::fs_base`] / [`Kernel::gs_base`] are always the current thread's).
//!
//! After [`Kernel::exception`] the current thread never changes. `exit_group` (any thread), the
//! last thread's `exit`, a fatal signal or a deadlock end the whole program
//! ([`SyscallOutcome::Exit`](crate::SyscallOutcome::Exit)).
//!
//! # Syscalls
//!
//! - `clone(56)` (flags, stack, parent_tid, child_tid, tls) and `clone3(435)` (`struct
//!   clone_args`, size 64..=4096, bytes past the known 88 must be zero; the child's stack
//!   pointer is `stack + stack_size`) accept `CLONE_VM | CLONE_FS | CLONE_FILES |
//!   CLONE_SIGHAND | CLONE_THREAD | CLONE_SYSVSEM | CLONE_SETTLS | CLONE_PARENT_SETTID |
//!   CLONE_CHILD_CLEARTID | CLONE_CHILD_SETTID` (what glibc's and musl's `pthread_create`
//!   use). Without `CLONE_VM | CLONE_THREAD` (fork, vfork, anything else) or with other flags
//!   the answer is `-ENOSYS`, counted as unsupported. `CLONE_THREAD` without `CLONE_SIGHAND`,
//!   or `CLONE_SIGHAND` without `CLONE_VM`, is `-EINVAL`; a TLS outside the user half is
//!   `-EPERM`; like Linux, an unwritable `parent_tid`/`child_tid` is skipped silently; more
//!   than [`MAX_THREADS`] live threads is `-EAGAIN`. The parent gets the new tid.
//! - `exit(60)` of a non-last thread: if its `clear_child_tid` is set, 0 is written there (a
//!   fault is ignored) and one waiter on it is woken; the thread is gone. The robust list is
//!   not walked.
//! - `gettid`, `set_tid_address`, `set_robust_list`, `rt_sigprocmask`, `arch_prctl` act on the
//!   current thread. `tgkill`/`tkill` accept any live tid: the signal is sent with the target
//!   thread's mask (no asynchronous delivery: a fatal default action ends the program, a
//!   handler is recorded as caught, a blocked signal stays pending for the process).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::errno::ERESTARTSYS;
use crate::persist::{ensure, RestoreError};

/// Most live threads of a program; `clone` beyond it is `-EAGAIN`.
pub const MAX_THREADS: usize = 1024;
/// Largest tid handed out (tids are `pid_t`).
const MAX_TID: u64 = i32::MAX as u64;
/// The placeholder `Return` value of a call whose thread blocked or exited (`-ERESTARTSYS`).
pub const BLOCKED_RETURN: u64 = (-(ERESTARTSYS as i64)) as u64;

/// A thread the shell must create (registers: a copy of the calling thread's at the clone
/// syscall, with RAX = 0, RSP = stack (if non-zero), RIP/RFLAGS as for the syscall return, and FS base = tls when CLONE_SETTLS).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpawnedThread {
    /// The new thread's tid.
    pub tid: u64,
    /// Its initial stack pointer (0: the caller's RSP).
    pub stack: u64,
    /// Its FS base with `CLONE_SETTLS` (else the caller's).
    pub tls: Option<u64>,
}

/// What a thread is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum ThreadState {
    /// Ready to run (or running).
    Runnable,
    /// Waiting on a futex word: queued at `seq`, woken by a matching `bitset`, until `deadline`
    /// (virtual ns since boot).
    Futex { uaddr: u64, bitset: u32, seq: u64, deadline: Option<u64> },
    /// Sleeping until `deadline`.
    Sleep { deadline: u64 },
    /// Blocked in I/O syscall `nr` with `args` (a socket, pipe, eventfd, `poll` or `epoll`
    /// wait): the call is served again whenever an I/O object changed, and once more with
    /// `timed_out` when `deadline` passes (see [`crate::net`]).
    Io { nr: u64, args: [u64; 6], deadline: Option<u64> },
}

impl ThreadState {
    fn deadline(&self) -> Option<u64> {
        match *self {
            ThreadState::Runnable => None,
            ThreadState::Futex { deadline, .. } => deadline,
            ThreadState::Sleep { deadline } => Some(deadline),
            ThreadState::Io { deadline, .. } => deadline,
        }
    }
}

/// One thread. For the current thread, the per-thread registers live in the [`Kernel`](crate::Kernel)
/// fields (`fs_base`, `gs_base`, `clear_child_tid`, `robust_list`, `signals.mask`); the copy here is
/// refreshed when it is switched out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Thread {
    pub fs_base: u64,
    pub gs_base: u64,
    pub clear_child_tid: u64,
    pub robust_list: (u64, u64),
    pub sigmask: u64,
    pub state: ThreadState,
}

/// The thread table (saved with the kernel).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Threads {
    /// Live threads by tid.
    pub threads: BTreeMap<u64, Thread>,
    /// The running thread.
    pub current: u64,
    /// The next tid to hand out.
    pub next_tid: u64,
    /// The next futex queue position.
    pub next_seq: u64,
    /// Threads created and not yet taken by the shell.
    pub spawned: Vec<SpawnedThread>,
    /// Return values for woken threads, not yet taken by the shell.
    pub wakeups: Vec<(u64, u64)>,
    /// No thread can run until something outside the node happens (a networked node only).
    pub idle: bool,
    /// The syscall being served (number and arguments), for a call that blocks in I/O.
    #[serde(skip)]
    pub call: (u64, [u64; 6]),
    /// The I/O call being served again for a blocked thread: its tid and whether its deadline
    /// passed.
    #[serde(skip)]
    pub retrying: Option<(u64, bool)>,
}

impl Default for Threads {
    fn default() -> Self {
        let main = Thread {
            fs_base: 0,
            gs_base: 0,
            clear_child_tid: 0,
            robust_list: (0, 0),
            sigmask: 0,
            state: ThreadState::Runnable,
        };
        Threads {
            threads: BTreeMap::from([(1, main)]),
            current: 1,
            next_tid: 2,
            next_seq: 0,
            spawned: Vec::new(),
            wakeups: Vec::new(),
            idle: false,
            call: (0, [0; 6]),
            retrying: None,
        }
    }
}

impl Threads {
    /// Allocates the next tid, if any is left and the table has room.
    pub fn alloc_tid(&mut self) -> Option<u64> {
        if self.threads.len() >= MAX_THREADS || self.next_tid > MAX_TID {
            return None;
        }
        let t = self.next_tid;
        self.next_tid += 1;
        Some(t)
    }

    /// Queues the current thread on a futex word.
    pub fn block_futex(&mut self, uaddr: u64, bitset: u32, deadline: Option<u64>) {
        let seq = self.next_seq;
        self.next_seq = self.next_seq.saturating_add(1);
        if let Some(t) = self.threads.get_mut(&self.current) {
            t.state = ThreadState::Futex { uaddr, bitset, seq, deadline };
        }
    }

    /// Puts the current thread to sleep until `deadline`.
    pub fn block_sleep(&mut self, deadline: u64) {
        if let Some(t) = self.threads.get_mut(&self.current) {
            t.state = ThreadState::Sleep { deadline };
        }
    }

    /// Waiters on `uaddr` matching `bitset`, in FIFO order.
    fn waiters(&self, uaddr: u64, bitset: u32) -> Vec<u64> {
        let mut w: Vec<(u64, u64)> = self
            .threads
            .iter()
            .filter_map(|(&tid, t)| match t.state {
                ThreadState::Futex { uaddr: u, bitset: b, seq, .. } if u == uaddr && b & bitset != 0 => {
                    Some((seq, tid))
                }
                _ => None,
            })
            .collect();
        w.sort_unstable();
        w.into_iter().map(|(_, tid)| tid).collect()
    }

    /// Makes `tid` runnable with `ret` for its blocked call.
    pub fn wake(&mut self, tid: u64, ret: u64) {
        if let Some(t) = self.threads.get_mut(&tid) {
            t.state = ThreadState::Runnable;
            self.wakeups.push((tid, ret));
        }
    }

    /// Wakes up to `n` waiters on `uaddr` matching `bitset` (FIFO); the number woken.
    pub fn futex_wake(&mut self, uaddr: u64, bitset: u32, n: u64) -> u64 {
        let mut woken = 0;
        for tid in self.waiters(uaddr, bitset) {
            if woken >= n {
                break;
            }
            self.wake(tid, 0);
            woken += 1;
        }
        woken
    }

    /// Wakes up to `n_wake` waiters on `uaddr`, moves up to `n_requeue` more to the end of
    /// `uaddr2`'s queue; the number woken plus requeued.
    pub fn futex_requeue(&mut self, uaddr: u64, uaddr2: u64, n_wake: u64, n_requeue: u64) -> u64 {
        let mut woken = 0;
        let mut moved = 0;
        for tid in self.waiters(uaddr, u32::MAX) {
            if woken < n_wake {
                self.wake(tid, 0);
                woken += 1;
            } else if moved < n_requeue {
                let seq = self.next_seq;
                self.next_seq = self.next_seq.saturating_add(1);
                if let Some(t) = self.threads.get_mut(&tid) {
                    if let ThreadState::Futex { uaddr: u, seq: s, .. } = &mut t.state {
                        *u = uaddr2;
                        *s = seq;
                    }
                }
                moved += 1;
            } else {
                break;
            }
        }
        woken + moved
    }

    /// Wakes every blocked thread whose deadline is at or before `now` (deadline order, then
    /// tid): futex waits with `-ETIMEDOUT`, sleeps with 0.
    pub fn expire(&mut self, now: u64) {
        let mut due: Vec<(u64, u64, bool)> = self
            .threads
            .iter()
            .filter_map(|(&tid, t)| {
                if matches!(t.state, ThreadState::Io { .. }) {
                    return None;
                }
                let d = t.state.deadline()?;
                (d <= now).then_some((d, tid, matches!(t.state, ThreadState::Futex { .. })))
            })
            .collect();
        due.sort_unstable();
        for (_, tid, futex) in due {
            let ret = if futex { (-i64::from(crate::errno::ETIMEDOUT)) as u64 } else { 0 };
            self.wake(tid, ret);
        }
    }

    /// Runnable tids, sorted.
    pub fn runnable(&self) -> Vec<u64> {
        self.threads.iter().filter(|(_, t)| t.state == ThreadState::Runnable).map(|(&tid, _)| tid).collect()
    }

    /// The earliest deadline of a blocked thread.
    pub fn earliest_deadline(&self) -> Option<u64> {
        self.threads.values().filter_map(|t| t.state.deadline()).min()
    }

    /// What every thread waits for (for a deadlock report).
    pub fn describe_blocked(&self) -> String {
        let parts: Vec<String> = self
            .threads
            .iter()
            .map(|(tid, t)| match t.state {
                ThreadState::Futex { uaddr, .. } => format!("tid {tid} in futex wait on {uaddr:#x}"),
                ThreadState::Sleep { deadline } => format!("tid {tid} sleeping until {deadline} ns"),
                ThreadState::Io { nr, .. } => {
                    format!("tid {tid} waiting for I/O in {}", crate::syscalls::display_name(nr))
                }
                ThreadState::Runnable => format!("tid {tid} runnable"),
            })
            .collect();
        parts.join(", ")
    }

    /// Checks the invariants the scheduler relies on. `ended`: the program is over (the
    /// current thread may be blocked: a deadlock).
    pub fn validate(&self, ended: bool) -> Result<(), RestoreError> {
        let n = self.threads.len();
        ensure((1..=MAX_THREADS).contains(&n), || format!("{n} threads"))?;
        ensure(self.next_tid <= MAX_TID + 1, || format!("next tid {}", self.next_tid))?;
        for (&tid, t) in &self.threads {
            ensure(tid >= 1 && tid < self.next_tid, || format!("tid {tid} not below the next tid {}", self.next_tid))?;
            if let ThreadState::Futex { seq, .. } = t.state {
                ensure(seq < self.next_seq, || format!("futex queue position {seq} of tid {tid}"))?;
            }
        }
        let cur = self.threads.get(&self.current);
        ensure(cur.is_some(), || format!("current thread {} does not exist", self.current))?;
        ensure(ended || cur.is_some_and(|t| t.state == ThreadState::Runnable), || {
            format!("current thread {} is blocked", self.current)
        })?;
        let mut seen = std::collections::BTreeSet::new();
        for s in &self.spawned {
            ensure(self.threads.contains_key(&s.tid) && seen.insert(s.tid), || format!("spawned tid {}", s.tid))?;
        }
        let mut seen = std::collections::BTreeSet::new();
        for &(tid, _) in &self.wakeups {
            let ok = self.threads.get(&tid).is_some_and(|t| t.state == ThreadState::Runnable);
            ensure(ok && seen.insert(tid), || format!("wakeup return for tid {tid}"))?;
        }
        Ok(())
    }
}

const CLONE_VM: u64 = 0x100;
const CLONE_FS: u64 = 0x200;
const CLONE_FILES: u64 = 0x400;
const CLONE_SIGHAND: u64 = 0x800;
const CLONE_THREAD: u64 = 0x1_0000;
const CLONE_SYSVSEM: u64 = 0x4_0000;
const CLONE_SETTLS: u64 = 0x8_0000;
const CLONE_PARENT_SETTID: u64 = 0x10_0000;
const CLONE_CHILD_CLEARTID: u64 = 0x20_0000;
const CLONE_CHILD_SETTID: u64 = 0x100_0000;
/// The flags a thread-creating clone may carry.
const THREAD_FLAGS: u64 = CLONE_VM
    | CLONE_FS
    | CLONE_FILES
    | CLONE_SIGHAND
    | CLONE_THREAD
    | CLONE_SYSVSEM
    | CLONE_SETTLS
    | CLONE_PARENT_SETTID
    | CLONE_CHILD_CLEARTID
    | CLONE_CHILD_SETTID;
/// First address above the canonical user half.
const USER_LIMIT: u64 = 0x0000_8000_0000_0000;

use crate::errno::*;
use crate::faults::DecisionPoint;
use crate::kernel::{Kernel, SysResult, SysStop};
use crate::Memory;

impl Kernel {
    /// The thread that runs now (1 = main).
    pub fn current_tid(&self) -> u64 {
        self.threads.current
    }

    /// Threads created since the last call, in creation order (see the [register
    /// contract](crate::threads#the-shells-register-contract)).
    pub fn take_spawned(&mut self) -> Vec<SpawnedThread> {
        std::mem::take(&mut self.threads.spawned)
    }

    /// Return values for threads woken since the last call: put `rax` in RAX of thread `tid`'s
    /// saved registers before it next runs.
    pub fn take_wakeup_returns(&mut self) -> Vec<(u64, u64)> {
        std::mem::take(&mut self.threads.wakeups)
    }

    /// The live threads' tids, sorted.
    pub fn thread_ids(&self) -> Vec<u64> {
        self.threads.threads.keys().copied().collect()
    }

    /// The FS base of thread `tid` (0 for a tid that does not exist).
    pub fn thread_fs_base(&self, tid: u64) -> u64 {
        if tid == self.threads.current {
            self.fs_base
        } else {
            self.threads.threads.get(&tid).map_or(0, |t| t.fs_base)
        }
    }

    /// True if `tid` is a live thread of the program.
    pub(crate) fn thread_exists(&self, tid: u64) -> bool {
        self.threads.threads.contains_key(&tid)
    }

    /// The signal mask of live thread `tid`.
    pub(crate) fn thread_sigmask(&self, tid: u64) -> u64 {
        if tid == self.threads.current {
            self.signals.mask
        } else {
            self.threads.threads.get(&tid).map_or(0, |t| t.sigmask)
        }
    }

    pub(crate) fn sys_clone(&mut self, mem: &mut dyn Memory, a: [u64; 6]) -> SysResult {
        let [flags, stack, parent_tid, child_tid, tls, _] = a;
        self.create_thread(mem, flags, stack, parent_tid, child_tid, tls, 0)
    }

    pub(crate) fn sys_clone3(&mut self, mem: &mut dyn Memory, args: u64, size: u64) -> SysResult {
        if size < 64 {
            return Err(EINVAL.into());
        }
        if size > crate::PAGE_SIZE {
            return Err(E2BIG.into());
        }
        let mut b = vec![0u8; size as usize];
        self.mappings.copy_in(mem, args, &mut b)?;
        if b.len() > 88 && b[88..].iter().any(|&x| x != 0) {
            return Err(E2BIG.into());
        }
        b.resize(b.len().max(88), 0);
        let w = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap_or_default());
        let (flags, _pidfd, child_tid, parent_tid, exit_signal) = (w(0), w(1), w(2), w(3), w(4));
        let (stack, stack_size, tls, _set_tid, set_tid_size) = (w(5), w(6), w(7), w(8), w(9));
        if (stack == 0) != (stack_size == 0) || set_tid_size != 0 || exit_signal > 64 {
            return Err(EINVAL.into());
        }
        if flags >> 32 != 0 || flags & 0xff != 0 {
            return Err(EINVAL.into());
        }
        let sp = stack.checked_add(stack_size).ok_or(EINVAL)?;
        self.create_thread(mem, flags, sp, parent_tid, child_tid, tls, exit_signal)
    }

    #[allow(clippy::too_many_arguments)]
    fn create_thread(
        &mut self,
        mem: &mut dyn Memory,
        flags: u64,
        stack: u64,
        parent_tid: u64,
        child_tid: u64,
        tls: u64,
        exit_signal: u64,
    ) -> SysResult {
        let flags = flags & !0xff; // CSIGNAL: the exit signal of a child process
        if flags & (CLONE_VM | CLONE_THREAD) != CLONE_VM | CLONE_THREAD || flags & !THREAD_FLAGS != 0 {
            return Err(SysStop::Unsupported);
        }
        if flags & CLONE_SIGHAND == 0 || exit_signal != 0 {
            return Err(EINVAL.into());
        }
        if flags & CLONE_SETTLS != 0 && tls >= USER_LIMIT {
            return Err(EPERM.into());
        }
        let tid = self.threads.alloc_tid().ok_or(EAGAIN)?;
        let id = (tid as u32).to_le_bytes();
        // Like Linux, a tid that cannot be written is not an error.
        if flags & CLONE_PARENT_SETTID != 0 {
            let _ = self.mappings.copy_out(mem, parent_tid, &id);
        }
        if flags & CLONE_CHILD_SETTID != 0 {
            let _ = self.mappings.copy_out(mem, child_tid, &id);
        }
        let settls = flags & CLONE_SETTLS != 0;
        let t = Thread {
            fs_base: if settls { tls } else { self.fs_base },
            gs_base: self.gs_base,
            clear_child_tid: if flags & CLONE_CHILD_CLEARTID != 0 { child_tid } else { 0 },
            robust_list: (0, 0),
            sigmask: self.signals.mask,
            state: ThreadState::Runnable,
        };
        self.threads.threads.insert(tid, t);
        self.threads.spawned.push(SpawnedThread { tid, stack, tls: settls.then_some(tls) });
        Ok(tid)
    }

    /// `exit(60)`: the thread ends; the program ends with the last one.
    pub(crate) fn sys_exit_thread(&mut self, mem: &mut dyn Memory, code: u64) -> SysResult {
        if self.threads.threads.len() <= 1 {
            return Err(SysStop::Exit(crate::ExitStatus::Exited { code: (code & 0xff) as i32 }));
        }
        let addr = self.clear_child_tid;
        self.threads.threads.remove(&self.threads.current);
        self.threads.spawned.retain(|s| s.tid != self.threads.current);
        if addr != 0 && self.mappings.copy_out(mem, addr, &0u32.to_le_bytes()).is_ok() {
            self.threads.futex_wake(addr, u32::MAX, 1);
        }
        Err(SysStop::Block)
    }

    /// Runs the scheduler after a syscall whose handler answered `res` (see the [module
    /// documentation](crate::threads#scheduling)); the answer for the calling thread.
    pub(crate) fn schedule(&mut self, mem: &mut dyn Memory, res: SysResult) -> SysResult {
        let caller = self.threads.current;
        let next = match self.pick_next(mem) {
            Ok(Some(t)) => t,
            Ok(None) => return Err(SysStop::Block),
            Err(e) => return Err(e),
        };
        self.switch_to(next);
        match res {
            Err(SysStop::Block) if next == caller => {
                // Woken within its own call: the value goes back as the call's return.
                match self.threads.wakeups.iter().position(|&(t, _)| t == caller) {
                    Some(p) => Ok(self.threads.wakeups.remove(p).1),
                    None => Err(SysStop::Block),
                }
            }
            r => r,
        }
    }

    /// Delivers loopback packets, serves blocked I/O calls again, wakes expired waits and picks
    /// the thread to run: `Ok(None)` when a networked node has nothing to run (it is idle),
    /// `Err(Exit)` on a deadlock.
    fn pick_next(&mut self, mem: &mut dyn Memory) -> Result<Option<u64>, SysStop> {
        let mut runnable;
        loop {
            self.net.flush_local();
            self.retry_io(mem);
            self.threads.expire(self.clock.now_ns());
            runnable = self.threads.runnable();
            if !runnable.is_empty() {
                break;
            }
            if self.net.address.is_some() {
                self.threads.idle = true;
                return Ok(None);
            }
            match self.threads.earliest_deadline() {
                Some(d) => self.clock.advance_to(d),
                None => {
                    let caller = self.threads.current;
                    let what = match self.threads.threads.get(&caller) {
                        Some(Thread { state: ThreadState::Futex { uaddr, .. }, .. })
                            if self.threads.threads.len() == 1 =>
                        {
                            format!("futex wait on {uaddr:#x} with no other thread to wake it")
                        }
                        _ => format!("every thread is blocked: {}", self.threads.describe_blocked()),
                    };
                    return Err(SysStop::Exit(self.deadlock(&what)));
                }
            }
        }
        self.threads.idle = false;
        Ok(Some(match runnable.len() {
            1 => runnable[0],
            n => {
                let point = DecisionPoint::Schedule { syscall: self.tracer.syscalls().saturating_add(1) };
                let i = self.faults.decide(point, n as u64);
                runnable.get(i as usize).copied().unwrap_or(runnable[0])
            }
        }))
    }

    /// Blocks the calling thread in an I/O call until an I/O object changes or `timeout` ns
    /// pass; served again for a blocked thread, answers `on_timeout` once its deadline passed.
    pub(crate) fn block_io(&mut self, timeout: Option<u64>, on_timeout: SysResult) -> SysResult {
        match self.threads.retrying {
            Some((_, true)) => on_timeout,
            Some((_, false)) => Err(SysStop::Block),
            None => {
                let deadline = timeout.map(|t| self.clock.now_ns().saturating_add(t));
                let (nr, args) = self.threads.call;
                if let Some(t) = self.threads.threads.get_mut(&self.threads.current) {
                    t.state = ThreadState::Io { nr, args, deadline };
                }
                Err(SysStop::Block)
            }
        }
    }

    /// True while a blocked thread's I/O call is being served again.
    pub(crate) fn retrying(&self) -> bool {
        self.threads.retrying.is_some()
    }

    /// Serves again the calls of threads blocked in I/O: all of them when an object changed,
    /// those whose deadline passed otherwise. A call that completes wakes its thread with its
    /// result (recorded in the trace); one that would block again stays blocked.
    fn retry_io(&mut self, mem: &mut dyn Memory) {
        for _ in 0..64 {
            let now = self.clock.now_ns();
            let dirty = std::mem::take(&mut self.net.dirty);
            let due: Vec<(u64, u64, [u64; 6], bool)> = self
                .threads
                .threads
                .iter()
                .filter_map(|(&tid, t)| match t.state {
                    ThreadState::Io { nr, args, deadline } => {
                        let expired = deadline.is_some_and(|d| d <= now);
                        (dirty || expired).then_some((tid, nr, args, expired))
                    }
                    _ => None,
                })
                .collect();
            if due.is_empty() {
                return;
            }
            for (tid, nr, args, expired) in due {
                self.threads.retrying = Some((tid, expired));
                self.threads.call = (nr, args);
                let mut hashed = crate::trace::DataHasher::new(mem);
                let res = self.dispatch(&mut hashed, nr, args);
                let data = hashed.finish();
                self.threads.retrying = None;
                self.net.flush_local();
                let ret = match res {
                    Ok(v) => v,
                    Err(SysStop::Err(e)) => (-i64::from(e)) as u64,
                    Err(SysStop::Block) => continue,
                    Err(_) => (-i64::from(EINVAL)) as u64,
                };
                self.tracer.completion(tid, nr, ret, now, data);
                self.threads.wake(tid, ret);
            }
            if !self.net.dirty {
                return;
            }
        }
    }

    /// A networked node's next step after being [idle](Kernel::is_idle) or stopped: moves the
    /// clock to `now_ns` (never back), delivers `packets` from the network, serves blocked
    /// calls again and picks the thread to run. Returns whether a thread can run; the shell
    /// then applies [`Kernel::take_wakeup_returns`] (which may name the thread it holds) before
    /// running again.
    pub fn resume(&mut self, mem: &mut dyn Memory, now_ns: u64, packets: Vec<crate::net::Packet>) -> bool {
        self.clock.advance_to(now_ns);
        for p in packets {
            self.net.receive(p);
        }
        if self.exit.is_some() {
            return false;
        }
        match self.pick_next(mem) {
            Ok(Some(t)) => {
                self.switch_to(t);
                true
            }
            Ok(None) => false,
            Err(SysStop::Exit(st)) => {
                self.exit = Some(st);
                false
            }
            Err(_) => false,
        }
    }

    /// Asks [`Kernel::yield_due`] to say true once virtual time reaches `t` (`None`: never).
    pub fn set_yield_at(&mut self, t: Option<u64>) {
        self.net.yield_at = t;
    }

    /// True once virtual time reached the [`Kernel::set_yield_at`] point, or when a networked
    /// node has packets for the network: the shell stops after the syscall it just served, so
    /// the cluster driver can route them (their deliveries may come before the old yield point)
    /// and run other nodes.
    pub fn yield_due(&self) -> bool {
        self.net.yield_at.is_some_and(|t| self.clock.now_ns() >= t)
            || (self.net.address.is_some() && !self.net.outbox.is_empty())
    }

    /// Jumps this node's clocks forward by `ns` (a clock fault).
    pub fn jump_clock(&mut self, ns: u64) {
        self.clock.jump(ns);
    }

    /// Skews this node's wall clock by `ns` (a clock fault).
    pub fn skew_clock(&mut self, ns: i64) {
        self.clock.set_skew(ns);
    }

    /// True when no thread of a networked node can run until [`Kernel::resume`] brings time or
    /// packets.
    pub fn is_idle(&self) -> bool {
        self.threads.idle
    }

    /// The earliest deadline of a blocked thread (a timeout, a sleep), in virtual ns.
    pub fn next_deadline(&self) -> Option<u64> {
        self.threads.earliest_deadline()
    }

    /// Makes `tid` the current thread, swapping the per-thread registers.
    pub(crate) fn switch_to(&mut self, tid: u64) {
        let cur = self.threads.current;
        if tid == cur {
            return;
        }
        if let Some(t) = self.threads.threads.get_mut(&cur) {
            t.fs_base = self.fs_base;
            t.gs_base = self.gs_base;
            t.clear_child_tid = self.clear_child_tid;
            t.robust_list = self.robust_list;
            t.sigmask = self.signals.mask;
        }
        if let Some(t) = self.threads.threads.get(&tid) {
            self.fs_base = t.fs_base;
            self.gs_base = t.gs_base;
            self.clear_child_tid = t.clear_child_tid;
            self.robust_list = t.robust_list;
            self.signals.mask = t.sigmask;
            self.threads.current = tid;
        }
    }
}
