//! Threads (`CLONE_THREAD`), blocking futexes and the deterministic scheduler.
//!
//! # Model
//!
//! A program is one process (pid 1) with one or more threads; the main thread has tid 1 and
//! every thread created by `clone`/`clone3` gets the next tid (2, 3, …, never reused). Exactly
//! one thread runs at a time ([`Kernel::current_tid`]); the kernel switches threads only at a
//! syscall, never at an exception. Per thread: the FS and GS bases, the `clear_child_tid`
//! address (`set_tid_address`, `CLONE_CHILD_CLEARTID`), the robust list head (recorded only),
//! the signal mask, the alternate signal stack and the signals sent to the thread alone.
//! Everything else (memory, fds, signal dispositions, signals pending for the process) is
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
//!   current thread. `tgkill`/`tkill` accept any live tid: the signal is the target thread's to take
//!   (see [`crate::syscalls::sys_signal`]: a fatal default action ends the program, a handled one runs
//!   its handler when the target next returns to ring 3, and interrupts its futex wait).
//!
//! [`Kernel::current_tid`]: crate::Kernel::current_tid
//! [`Kernel::exception`]: crate::Kernel::exception
//! [`Kernel::fs_base`]: crate::Kernel::fs_base
//! [`Kernel::gs_base`]: crate::Kernel::gs_base
//! [`Kernel::set_decision_overrides`]: crate::Kernel::set_decision_overrides
//! [`Kernel::syscall`]: crate::Kernel::syscall
//! [`Kernel::take_spawned`]: crate::Kernel::take_spawned
//! [`Kernel::take_wakeup_returns`]: crate::Kernel::take_wakeup_returns
//! [`Kernel::thread_fs_base`]: crate::Kernel::thread_fs_base

use crate::prelude::*;
use alloc::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::abi::errno::ERESTARTSYS;
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
    /// A new program's first instruction and stack (a process deja started): the thread
    /// starts there with every other register as at boot, not as a copy of the caller's.
    pub entry: Option<crate::Entry>,
}

/// What a thread is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum ThreadState {
    /// Ready to run (or running).
    Runnable,
    /// Waiting on a futex word: queued at `seq`, woken by a matching `bitset`, until `deadline`
    /// (virtual ns since boot).
    Futex { uaddr: u64, bitset: u32, seq: u64, deadline: Option<u64> },
    /// Sleeping until `deadline`; `rem`: where a relative sleep a signal ends writes what was
    /// left (0: nowhere).
    Sleep {
        deadline: u64,
        #[serde(default)]
        rem: u64,
    },
    /// Waiting in `vfork` (or `clone` with `CLONE_VFORK`) until process `child` calls `execve`
    /// or ends.
    Vfork { child: u64 },
    /// Blocked in I/O syscall `nr` with `args` (a socket, pipe, eventfd, `poll` or `epoll`
    /// wait, a FIFO's open, a wait for a signal): the call is served again whenever an I/O object changed, and once more with
    /// `timed_out` when `deadline` passes (see [`crate::net`]).
    Io { nr: u64, args: [u64; 6], deadline: Option<u64> },
}

impl ThreadState {
    fn deadline(&self) -> Option<u64> {
        match *self {
            ThreadState::Runnable | ThreadState::Vfork { .. } => None,
            ThreadState::Futex { deadline, .. } => deadline,
            ThreadState::Sleep { deadline, .. } => Some(deadline),
            ThreadState::Io { deadline, .. } => deadline,
        }
    }
}

/// One thread. For the current thread, the per-thread registers live in the [`Kernel`](crate::Kernel)
/// fields (`fs_base`, `gs_base`, `clear_child_tid`, `robust_list`, `signals.mask`, `signals.altstack`); the copy here is
/// refreshed when it is switched out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Thread {
    pub fs_base: u64,
    pub gs_base: u64,
    pub clear_child_tid: u64,
    pub robust_list: (u64, u64),
    pub sigmask: u64,
    /// The alternate signal stack (see [`crate::signal::Signals::altstack`]).
    pub altstack: (u64, u32, u64),
    /// Signals sent to this thread alone, not yet taken (kept here for every thread).
    pub pending: crate::signal::Pending,
    /// The mask `rt_sigsuspend` replaced, which the handler's frame saves instead of the
    /// temporary one (kept here for every thread).
    pub suspended_mask: Option<u64>,
    pub state: ThreadState,
    /// A signal it takes was sent while it waited in I/O: its call ends with `EINTR` unless it
    /// completes when served again.
    #[serde(default)]
    pub kicked: bool,
    /// Its I/O call `nr` ended with `EINTR` because of a signal and is one Linux restarts: the
    /// handler's `SA_RESTART` decides, when the thread takes the signal, whether the program
    /// sees `EINTR` or the call again.
    #[serde(default)]
    pub interrupted: Option<u64>,
    /// `PR_SET_KEEPCAPS`: a thread's credentials are its own in Linux, and so is this flag
    /// (kept here for every thread; a new thread starts with its creator's).
    #[serde(default)]
    pub keepcaps: bool,
    /// The process it belongs to (see [`crate::task::procs`]).
    pub pid: u64,
    /// The address space it runs in ([`crate::Memory::space`]): futex words are keyed by it.
    pub space: u64,
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
    /// The stack pointer of the thread making the syscall being served.
    #[serde(skip)]
    pub sp: u64,
    /// The I/O call being served again for a blocked thread: its tid and whether its deadline
    /// passed.
    #[serde(skip)]
    pub retrying: Option<(u64, bool)>,
}

impl Thread {
    /// The only thread of a process that starts a program: process `pid`'s, in address space
    /// `space`, runnable, with nothing of another thread's.
    pub fn new_program(pid: u64, space: u64) -> Thread {
        Thread {
            fs_base: 0,
            gs_base: 0,
            clear_child_tid: 0,
            robust_list: (0, 0),
            sigmask: 0,
            altstack: crate::signal::DISABLED_ALTSTACK,
            pending: crate::signal::Pending::default(),
            suspended_mask: None,
            kicked: false,
            interrupted: None,
            keepcaps: false,
            pid,
            space,
            state: ThreadState::Runnable,
        }
    }
}

impl Default for Threads {
    fn default() -> Self {
        let main = Thread::new_program(1, 0);
        Threads {
            threads: BTreeMap::from([(1, main)]),
            current: 1,
            next_tid: 2,
            next_seq: 0,
            spawned: Vec::new(),
            wakeups: Vec::new(),
            idle: false,
            call: (0, [0; 6]),
            sp: 0,
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

    /// Queues the current thread on a futex word of its address space.
    pub fn block_futex(&mut self, uaddr: u64, bitset: u32, deadline: Option<u64>) {
        let seq = self.next_seq;
        self.next_seq = self.next_seq.saturating_add(1);
        if let Some(t) = self.threads.get_mut(&self.current) {
            t.state = ThreadState::Futex { uaddr, bitset, seq, deadline };
        }
    }

    /// Puts the current thread to sleep until `deadline` (`rem`: see [`ThreadState::Sleep`]).
    pub fn block_sleep(&mut self, deadline: u64, rem: u64) {
        if let Some(t) = self.threads.get_mut(&self.current) {
            t.state = ThreadState::Sleep { deadline, rem };
        }
    }

    /// Waiters on `uaddr` of address space `space` matching `bitset`, in FIFO order.
    fn waiters(&self, space: u64, uaddr: u64, bitset: u32) -> Vec<u64> {
        let mut w: Vec<(u64, u64)> = self
            .threads
            .iter()
            .filter_map(|(&tid, t)| match t.state {
                ThreadState::Futex { uaddr: u, bitset: b, seq, .. }
                    if u == uaddr && b & bitset != 0 && t.space == space =>
                {
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

    /// Wakes up to `n` waiters on `uaddr` of space `space` matching `bitset` (FIFO); the
    /// number woken.
    pub fn futex_wake(&mut self, space: u64, uaddr: u64, bitset: u32, n: u64) -> u64 {
        let mut woken = 0;
        for tid in self.waiters(space, uaddr, bitset) {
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
    pub fn futex_requeue(&mut self, space: u64, uaddr: u64, uaddr2: u64, n_wake: u64, n_requeue: u64) -> u64 {
        let mut woken = 0;
        let mut moved = 0;
        for tid in self.waiters(space, uaddr, u32::MAX) {
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
            let ret = if futex { (-i64::from(crate::abi::errno::ETIMEDOUT)) as u64 } else { 0 };
            self.wake(tid, ret);
        }
    }

    /// Runnable tids, sorted.
    pub fn runnable(&self) -> Vec<u64> {
        self.threads.iter().filter(|(_, t)| t.state == ThreadState::Runnable).map(|(&tid, _)| tid).collect()
    }

    /// True if a thread other than the current one could run (no allocation: asked at every
    /// syscall by the vDSO's limit).
    pub fn another_runnable(&self) -> bool {
        self.threads.iter().any(|(&tid, t)| tid != self.current && t.state == ThreadState::Runnable)
    }

    /// The space of the current thread (the one futex calls act on).
    pub fn space(&self) -> u64 {
        self.threads.get(&self.current).map_or(0, |t| t.space)
    }

    /// The earliest deadline of a blocked thread.
    pub fn earliest_deadline(&self) -> Option<u64> {
        self.threads.values().filter_map(|t| t.state.deadline()).min()
    }

    /// What every thread waits for (for a deadlock report); `syscall_name` names the syscall a
    /// thread waits in.
    pub fn describe_blocked(&self, syscall_name: impl Fn(u64) -> String) -> String {
        let parts: Vec<String> = self
            .threads
            .iter()
            .map(|(tid, t)| match t.state {
                ThreadState::Futex { uaddr, .. } => format!("tid {tid} in futex wait on {uaddr:#x}"),
                ThreadState::Sleep { deadline, .. } => format!("tid {tid} sleeping until {deadline} ns"),
                ThreadState::Io { nr, .. } => {
                    format!("tid {tid} waiting for I/O in {}", syscall_name(nr))
                }
                ThreadState::Vfork { child } => format!("tid {tid} waiting in vfork for process {child}"),
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
            t.pending.validate(&format!("thread {tid}"))?;
        }
        let cur = self.threads.get(&self.current);
        ensure(cur.is_some(), || format!("current thread {} does not exist", self.current))?;
        ensure(ended || cur.is_some_and(|t| t.state == ThreadState::Runnable), || {
            format!("current thread {} is blocked", self.current)
        })?;
        let mut seen = alloc::collections::BTreeSet::new();
        for s in &self.spawned {
            ensure(self.threads.contains_key(&s.tid) && seen.insert(s.tid), || format!("spawned tid {}", s.tid))?;
        }
        let mut seen = alloc::collections::BTreeSet::new();
        for &(tid, _) in &self.wakeups {
            let ok = self.threads.get(&tid).is_some_and(|t| t.state == ThreadState::Runnable);
            ensure(ok && seen.insert(tid), || format!("wakeup return for tid {tid}"))?;
        }
        Ok(())
    }
}
