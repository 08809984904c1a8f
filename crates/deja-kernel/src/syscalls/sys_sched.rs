//! The thread syscalls (`clone`, `clone3`, `exit`, futexes, sleeps, per-thread identity) and
//! the deterministic scheduler that runs after every syscall (see [`threads`](crate::task::threads)
//! for the model, the register contract and the rules).

use crate::abi::errno::*;
use crate::faults::DecisionPoint;
use crate::kernel::{Kernel, SysResult, SysStop};
use crate::prelude::*;
use crate::task::threads::{SpawnedThread, Thread, ThreadState};
use crate::Memory;

use crate::syscalls::sys_process::{
    CLONE_CHILD_CLEARTID, CLONE_CHILD_SETTID, CLONE_FILES, CLONE_FS, CLONE_PARENT_SETTID, CLONE_SETTLS, CLONE_SIGHAND,
    CLONE_SYSVSEM, CLONE_THREAD, CLONE_VM,
};

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

impl Kernel {
    /// The thread that runs now (1 = main).
    pub fn current_tid(&self) -> u64 {
        self.sched.threads.current
    }

    /// Threads created since the last call, in creation order (see the [register
    /// contract](crate::task::threads#the-shells-register-contract)).
    pub fn take_spawned(&mut self) -> Vec<SpawnedThread> {
        core::mem::take(&mut self.sched.threads.spawned)
    }

    /// Return values for threads woken since the last call: put `rax` in RAX of thread `tid`'s
    /// saved registers before it next runs.
    pub fn take_wakeup_returns(&mut self) -> Vec<(u64, u64)> {
        core::mem::take(&mut self.sched.threads.wakeups)
    }

    /// After a syscall: `Some(entry)` if the calling thread's call was an `execve` that
    /// replaced its program. The shell then starts that thread afresh in the (already current)
    /// new address space: every general register 0, RIP and RSP from `entry`, RFLAGS as at
    /// boot, the FPU/SSE/AVX state as at boot, FS and GS base 0. Call it before
    /// [`Kernel::take_spawned`].
    pub fn take_exec(&mut self) -> Option<crate::Entry> {
        self.take_exec_entry()
    }

    /// The live threads' tids, sorted.
    pub fn thread_ids(&self) -> Vec<u64> {
        self.sched.threads.threads.keys().copied().collect()
    }

    /// The FS base of thread `tid` (0 for a tid that does not exist).
    pub fn thread_fs_base(&self, tid: u64) -> u64 {
        if tid == self.sched.threads.current {
            self.process.fs_base
        } else {
            self.sched.threads.threads.get(&tid).map_or(0, |t| t.fs_base)
        }
    }

    /// True if `tid` is a live thread of the program.
    pub(crate) fn thread_exists(&self, tid: u64) -> bool {
        self.sched.threads.threads.contains_key(&tid)
    }

    /// The signal mask of live thread `tid`.
    pub(crate) fn thread_sigmask(&self, tid: u64) -> u64 {
        if self.is_current(tid) {
            self.process.signals.mask
        } else {
            self.sched.threads.threads.get(&tid).map_or(0, |t| t.sigmask)
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
        self.process.mappings.copy_in(mem, args, &mut b)?;
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
        if flags & CLONE_THREAD == 0 {
            // A new process (`fork`, `vfork`, `posix_spawn`'s clone).
            return self.new_process(mem, flags | exit_signal, stack, parent_tid, child_tid, tls);
        }
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
        let tid = self.sched.threads.alloc_tid().ok_or(EAGAIN)?;
        let id = (tid as u32).to_le_bytes();
        // Like Linux, a tid that cannot be written is not an error.
        if flags & CLONE_PARENT_SETTID != 0 {
            let _ = self.process.mappings.copy_out(mem, parent_tid, &id);
        }
        if flags & CLONE_CHILD_SETTID != 0 {
            let _ = self.process.mappings.copy_out(mem, child_tid, &id);
        }
        let settls = flags & CLONE_SETTLS != 0;
        let t = Thread {
            fs_base: if settls { tls } else { self.process.fs_base },
            gs_base: self.process.gs_base,
            clear_child_tid: if flags & CLONE_CHILD_CLEARTID != 0 { child_tid } else { 0 },
            robust_list: (0, 0),
            sigmask: self.process.signals.mask,
            // Like Linux, a thread starts without an alternate stack.
            altstack: crate::signal::DISABLED_ALTSTACK,
            pending: crate::signal::Pending::default(),
            suspended_mask: None,
            kicked: false,
            interrupted: None,
            keepcaps: self.sched.threads.threads.get(&self.sched.threads.current).is_some_and(|t| t.keepcaps),
            pid: self.procs.current,
            space: self.sched.threads.space(),
            state: ThreadState::Runnable,
        };
        self.sched.threads.threads.insert(tid, t);
        self.sched.threads.spawned.push(SpawnedThread { tid, stack, tls: settls.then_some(tls), entry: None });
        Ok(tid)
    }

    /// `exit(60)`: the thread ends; the program ends with the last one.
    pub(crate) fn sys_exit_thread(&mut self, mem: &mut dyn Memory, code: u64) -> SysResult {
        let pid = self.procs.current;
        if self.sched.threads.threads.values().filter(|t| t.pid == pid).count() <= 1 {
            return Err(SysStop::Exit(crate::ExitStatus::Exited { code: (code & 0xff) as i32 }));
        }
        let addr = self.process.clear_child_tid;
        // Its address space, while it is still in the table: the joiner waits in it.
        let space = self.sched.threads.space();
        self.sched.threads.threads.remove(&self.sched.threads.current);
        self.sched.threads.spawned.retain(|s| s.tid != self.sched.threads.current);
        if addr != 0 && self.process.mappings.copy_out(mem, addr, &0u32.to_le_bytes()).is_ok() {
            self.sched.threads.futex_wake(space, addr, u32::MAX, 1);
        }
        Err(SysStop::Block)
    }

    /// Runs the scheduler after a syscall whose handler answered `res` (see the [module
    /// documentation](crate::task::threads#scheduling)); the answer for the calling thread.
    pub(crate) fn schedule(&mut self, mem: &mut dyn Memory, res: SysResult) -> SysResult {
        let caller = self.sched.threads.current;
        let next = match self.pick_next(mem) {
            Ok(Some(t)) => t,
            Ok(None) => return Err(SysStop::Block),
            Err(e) => return Err(e),
        };
        self.switch_to(mem, next);
        match res {
            Err(SysStop::Block) if next == caller => {
                // Woken within its own call: the value goes back as the call's return.
                match self.sched.threads.wakeups.iter().position(|&(t, _)| t == caller) {
                    Some(p) => Ok(self.sched.threads.wakeups.remove(p).1),
                    None => Err(SysStop::Block),
                }
            }
            r => r,
        }
    }

    /// Delivers loopback packets, serves blocked I/O calls again, wakes expired waits and picks
    /// the thread to run: `Ok(None)` when a networked node has nothing to run (it is idle),
    /// `Err(Exit)` on a deadlock.
    pub(crate) fn pick_next(&mut self, mem: &mut dyn Memory) -> Result<Option<u64>, SysStop> {
        let mut runnable;
        loop {
            self.net.flush_local();
            self.fire_timers(mem)?;
            self.interrupt_sleepers(mem);
            self.retry_io(mem);
            self.sched.threads.expire(self.sched.clock.now_ns());
            runnable = self.sched.threads.runnable();
            if !runnable.is_empty() {
                break;
            }
            if self.net.address.is_some() {
                self.sched.threads.idle = true;
                return Ok(None);
            }
            match self.next_deadline() {
                Some(d) => self.sched.clock.advance_to(d),
                None => {
                    let caller = self.sched.threads.current;
                    let what = match self.sched.threads.threads.get(&caller) {
                        Some(Thread { state: ThreadState::Futex { uaddr, .. }, .. })
                            if self.sched.threads.threads.len() == 1 =>
                        {
                            format!("futex wait on {uaddr:#x} with no other thread to wake it")
                        }
                        _ => format!(
                            "every thread is blocked: {}",
                            self.sched.threads.describe_blocked(crate::syscalls::display_name)
                        ),
                    };
                    return Err(SysStop::Exit(self.deadlock(&what)));
                }
            }
        }
        self.sched.threads.idle = false;
        Ok(Some(match runnable.len() {
            1 => runnable[0],
            n => {
                let point = DecisionPoint::Schedule { syscall: self.record.tracer.syscalls().saturating_add(1) };
                let i = self.faults.decide(point, n as u64);
                runnable.get(i as usize).copied().unwrap_or(runnable[0])
            }
        }))
    }

    /// Blocks the calling thread in an I/O call until an I/O object changes or `timeout` ns
    /// pass; served again for a blocked thread, answers `on_timeout` once its deadline passed.
    pub(crate) fn block_io(&mut self, timeout: Option<u64>, on_timeout: SysResult) -> SysResult {
        match self.sched.threads.retrying {
            Some((_, true)) => on_timeout,
            Some((_, false)) => Err(SysStop::Block),
            None => {
                let deadline = timeout.map(|t| self.sched.clock.now_ns().saturating_add(t));
                let (nr, args) = self.sched.threads.call;
                if let Some(t) = self.sched.threads.threads.get_mut(&self.sched.threads.current) {
                    t.state = ThreadState::Io { nr, args, deadline };
                }
                Err(SysStop::Block)
            }
        }
    }

    /// True while a blocked thread's I/O call is being served again.
    pub(crate) fn retrying(&self) -> bool {
        self.sched.threads.retrying.is_some()
    }

    /// Serves again the calls of threads blocked in I/O: all of them when an object changed,
    /// those whose deadline passed otherwise. A call that completes wakes its thread with its
    /// result (recorded in the trace); one that would block again stays blocked.
    fn retry_io(&mut self, mem: &mut dyn Memory) {
        for _ in 0..64 {
            let now = self.sched.clock.now_ns();
            let dirty = core::mem::take(&mut self.net.dirty);
            let due: Vec<(u64, u64, [u64; 6], bool)> = self
                .sched
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
                if !self.thread_exists(tid) {
                    continue; // its process ended while another call was served
                }
                // The call is served in its own process.
                let (home, pid) = (self.procs.current, self.pid_of(tid));
                self.enter(mem, pid);
                self.sched.threads.retrying = Some((tid, expired));
                self.sched.threads.call = (nr, args);
                let mut hashed = crate::record::trace::DataHasher::new(mem);
                let res = self.dispatch(&mut hashed, nr, args);
                let data = hashed.finish();
                self.sched.threads.retrying = None;
                let res = self.process_exit(mem, res);
                self.enter(mem, home);
                self.net.flush_local();
                let kicked = self.sched.threads.threads.get_mut(&tid).map(|t| core::mem::take(&mut t.kicked));
                let ret = match res {
                    Ok(v) => v,
                    Err(SysStop::Err(e)) => (-i64::from(e)) as u64,
                    Err(SysStop::Block) if kicked == Some(true) && interruptible(nr) => {
                        // A signal it takes arrived while it waited: the wait ends.
                        let restarts = restartable(nr) && !has_deadline(&self.sched.threads, tid);
                        self.abandon_fifo_wait(tid);
                        if let Some(t) = self.sched.threads.threads.get_mut(&tid) {
                            t.interrupted = restarts.then_some(nr);
                        }
                        (-i64::from(EINTR)) as u64
                    }
                    Err(SysStop::Block) => continue,
                    Err(_) => (-i64::from(EINVAL)) as u64,
                };
                self.record.tracer.completion(tid, nr, ret, now, data);
                self.sched.threads.wake(tid, ret);
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
        self.sched.clock.advance_to(now_ns);
        for p in packets {
            self.net.receive(p);
        }
        if self.process.exit.is_some() {
            return false;
        }
        let run = match self.pick_next(mem) {
            Ok(Some(t)) => {
                self.switch_to(mem, t);
                true
            }
            Ok(None) => false,
            Err(SysStop::Exit(st)) => {
                self.process.exit = Some(st);
                false
            }
            Err(_) => false,
        };
        self.publish_clock(mem);
        run
    }

    /// Asks [`Kernel::yield_due`] to say true once virtual time reaches `t` (`None`: never).
    pub fn set_yield_at(&mut self, t: Option<u64>) {
        self.net.yield_at = t;
    }

    /// True once virtual time reached the [`Kernel::set_yield_at`] point, or when a networked
    /// node has packets for the network: the shell stops after the syscall it just served, so
    /// the cluster driver can route them (their deliveries may come before the old yield point)
    /// and run other nodes; or when a process deja started has ended (the driver hears of it
    /// at that moment).
    pub fn yield_due(&self) -> bool {
        self.net.yield_at.is_some_and(|t| self.sched.clock.now_ns() >= t)
            || (self.net.address.is_some() && !self.net.outbox.is_empty())
            || !self.procs.started_ended.is_empty()
    }

    /// Jumps this node's clocks forward by `ns` (a clock fault).
    pub fn jump_clock(&mut self, ns: u64) {
        self.sched.clock.jump(ns);
    }

    /// Skews this node's wall clock by `ns` (a clock fault).
    pub fn skew_clock(&mut self, ns: i64) {
        self.sched.clock.set_skew(ns);
    }

    /// True when no thread of a networked node can run until [`Kernel::resume`] brings time or
    /// packets.
    pub fn is_idle(&self) -> bool {
        self.sched.threads.idle
    }

    /// The earliest deadline of a blocked thread (a timeout, a sleep) or of the interval
    /// timer, in virtual ns.
    pub fn next_deadline(&self) -> Option<u64> {
        self.sched.threads.earliest_deadline().into_iter().chain(self.timer_deadline()).min()
    }

    /// Makes `tid` the current thread, swapping the per-thread registers, and its process the
    /// current process.
    pub(crate) fn switch_to(&mut self, mem: &mut dyn Memory, tid: u64) {
        let cur = self.sched.threads.current;
        if tid == cur {
            return;
        }
        let pid = self.pid_of(tid);
        if let Some(t) = self.sched.threads.threads.get_mut(&cur).filter(|t| t.pid == self.procs.current) {
            t.fs_base = self.process.fs_base;
            t.gs_base = self.process.gs_base;
            t.clear_child_tid = self.process.clear_child_tid;
            t.robust_list = self.process.robust_list;
            t.sigmask = self.process.signals.mask;
            t.altstack = self.process.signals.altstack;
        }
        if pid != self.procs.current {
            self.enter(mem, pid);
        }
        if let Some(t) = self.sched.threads.threads.get(&tid) {
            self.process.fs_base = t.fs_base;
            self.process.gs_base = t.gs_base;
            self.process.clear_child_tid = t.clear_child_tid;
            self.process.robust_list = t.robust_list;
            self.process.signals.mask = t.sigmask;
            self.process.signals.altstack = t.altstack;
            self.sched.threads.current = tid;
        }
    }
}

/// True for the I/O waits a signal ends (`EINTR`); the waits for a signal (`pause`,
/// `rt_sigsuspend`, `rt_sigtimedwait`) end by themselves when one arrives.
fn interruptible(nr: u64) -> bool {
    !matches!(nr, 34 | 130 | 128)
}

/// True for the calls Linux restarts after a handler with `SA_RESTART` (`-ERESTARTSYS`): reads,
/// writes, `accept`, sends and receives, a FIFO's `open`, a lock wait. Not restarted: `poll`,
/// `select`, `epoll_wait`, `connect`, sleeps, and any call with a timeout of its own.
fn restartable(nr: u64) -> bool {
    matches!(nr, 0 | 1 | 2 | 17 | 18 | 19 | 20 | 43 | 44 | 45 | 46 | 47 | 72 | 73 | 257 | 288 | 295 | 296)
}

/// True if thread `tid` waits with a deadline (a socket timeout).
fn has_deadline(t: &crate::task::threads::Threads, tid: u64) -> bool {
    t.threads.get(&tid).is_some_and(|t| matches!(t.state, ThreadState::Io { deadline: Some(_), .. }))
}
