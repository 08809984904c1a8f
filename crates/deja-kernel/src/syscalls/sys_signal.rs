//! Signals: sending them (`kill`, `tgkill`, `tkill`, `rt_sigqueueinfo`, `rt_tgsigqueueinfo`),
//! dispositions (`rt_sigaction`), masks (`rt_sigprocmask`), alternate stacks (`sigaltstack`),
//! and running handlers.
//!
//! # When a handler runs
//!
//! - **A fault.** A ring-3 fault deja cannot answer (an unmapped or forbidden access, #GP, #UD,
//!   #DE, #BP, #AC, ...) becomes the signal Linux sends for it ([`crate::syscalls::serve`] names them),
//!   with Linux's `si_code` and `si_addr`. If the faulting thread has a handler for it and does
//!   not block it, [`Kernel::exception`] answers [`ExceptionOutcome::Deliver`] and the handler
//!   runs at once, on that thread; otherwise the program dies of it, as before (Linux, too,
//!   kills a thread whose synchronous signal is blocked or ignored).
//! - **A signal sent** (`kill` or `rt_sigqueueinfo` to the process, `tgkill`/`tkill`/`raise`
//!   or `rt_tgsigqueueinfo` to a thread). A fatal default action ends the program in the
//!   sending call, unless every thread blocks the signal; an ignored signal is dropped; a
//!   handled one becomes pending for the process or the thread, with its `siginfo_t`: the
//!   sender's (`SI_USER` for `kill`, `SI_TKILL` for `tgkill`, `SI_USER` for SIGPIPE), or the
//!   one `rt_sigqueueinfo` was given. A standard signal already pending is not queued again; a
//!   real-time one queues each instance, up to `RLIMIT_SIGPENDING` (and at most
//!   [`MAX_QUEUED`]) instances in all, beyond which `rt_sigqueueinfo` and `tgkill` fail with
//!   `EAGAIN` and `kill` leaves it pending without a `siginfo_t` (see [`signal::Pending`]).
//!   A pending signal runs its handler when a thread that does not block it next
//!   returns from the monitor to ring 3: after any syscall it made (the signal it sent itself
//!   runs its handler before `tgkill` returns to the caller), after `rt_sigprocmask` unblocks
//!   it, after `rt_sigreturn`, or when the scheduler switches to it. A thread waiting on a
//!   futex that is sent a signal it handles wakes with `-EINTR` (whatever `SA_RESTART` says;
//!   futex waits may always wake early). A thread waiting for I/O that is sent a signal it
//!   handles has its call served again at once: if the call still cannot complete, it ends
//!   with `-EINTR`, and when the thread takes the signal, a call Linux restarts (a read, a
//!   write, `accept`, a send or receive without a timeout of its own, a FIFO's `open`, a lock
//!   wait) runs again after the handler if the handler has `SA_RESTART` (RIP back on the
//!   `syscall`, RAX its number, as Linux's `-ERESTARTSYS` does); `poll`, `select`,
//!   `epoll_wait`, `connect` and calls with a timeout stay `-EINTR`. A sleep (`nanosleep`,
//!   `clock_nanosleep`) ends with `-EINTR` and what was left of it. A thread that runs without making a syscall
//!   does not enter the monitor, and so takes a signal only at its next syscall or fault.
//! - **A wait for a signal** (`pause`, `rt_sigsuspend`, `rt_sigtimedwait`) blocks like I/O:
//!   sending a signal makes every blocked call look again. `rt_sigsuspend` keeps the mask it
//!   replaced on the thread, and the handler's frame saves that one, so `rt_sigreturn` puts it
//!   back (or the thread's next return to ring 3 does, if another thread took the signal).
//!
//! # The handler's frame
//!
//! Linux's: [`crate::signal::sigframe`]. The handler gets `(sig, &siginfo, &ucontext)` whatever
//! `SA_SIGINFO` says, returns to `sa_restorer` (a handler without `SA_RESTORER` cannot be
//! run on x86-64 and the program dies of `SIGSEGV`, as on Linux), runs with `sa_mask` and
//! the signal itself (unless `SA_NODEFER`) added to the mask, on the alternate stack with
//! `SA_ONSTACK` (disarmed while there with `SS_AUTODISARM`), with a fresh FPU state.
//! `SA_RESETHAND` resets the disposition. A frame that cannot be written (the stack is full)
//! ends the program with `SIGSEGV`. `rt_sigreturn` restores every general-purpose register,
//! RIP, the arithmetic flags, DF and AC, the FPU and AVX state, the mask and the alternate
//! stack from the frame, which the handler may have changed; a frame it cannot use (a RIP
//! outside the user half, reserved MXCSR bits, an XSAVE header with unknown features) ends
//! the program with `SIGSEGV`. The shell installs the result ([`SyscallOutcome::Resume`]).
//!
//! [`ExceptionOutcome::Deliver`]: crate::ExceptionOutcome::Deliver
//! [`SyscallOutcome::Resume`]: crate::SyscallOutcome::Resume

use crate::abi::errno::*;
use crate::abi::signal::{NSIG, SIGKILL, SIGRTMIN, SIGSTOP, SIG_DFL};
use crate::kernel::{Kernel, SysResult, SysStop};
use crate::mm::stack::GUEST_UID;
use crate::prelude::*;
use crate::record::trace::ExceptionRecord;
use crate::signal::sigframe::{self, FrameParts};
use crate::signal::{self, bit, Action, Forced, Pending, Queued, DISABLED_ALTSTACK, INFO_BYTES, MAX_QUEUED};
use crate::task::threads::ThreadState;
use crate::{ExitStatus, FaultInfo, Memory, UserContext};

const SA_ONSTACK: u64 = 0x0800_0000;
const SA_RESTORER: u64 = 0x0400_0000;
const SA_NODEFER: u64 = 0x4000_0000;
const SA_RESETHAND: u64 = 0x8000_0000;
const SA_RESTART: u64 = 0x1000_0000;
const SS_ONSTACK: u32 = 1;
const SS_DISABLE: u32 = 2;
const SS_AUTODISARM: u32 = 1 << 31;
/// `MINSIGSTKSZ`.
const MIN_ALTSTACK: u64 = 2048;
/// `si_code` of a signal sent with `kill`.
const SI_USER: i32 = 0;
/// `si_code` of a signal sent with `tgkill` or `tkill`.
const SI_TKILL: i32 = -6;
/// `si_code` of the kernel (a signal a program may not claim to send as it).
const SI_KERNEL: i32 = 0x80;
/// `RLIMIT_SIGPENDING`.
const RLIMIT_SIGPENDING: usize = 11;

/// Whether Linux knows how many bytes a `siginfo_t` of `sig` with `code` uses (its
/// `known_siginfo_layout`): one it does not know must hold zeros past the first
/// [`INFO_BYTES`].
fn known_layout(sig: i32, code: i32) -> bool {
    // The codes each signal with codes of its own has (NSIGILL, NSIGFPE, ...), and NSIGPOLL.
    let own = match sig {
        4 => Some(11),
        5 => Some(6),
        7 => Some(5),
        8 => Some(15),
        11 => Some(10),
        17 | 29 => Some(6),
        31 => Some(2),
        _ => None,
    };
    match code {
        SI_KERNEL => true,
        c if c > SI_USER => c <= own.unwrap_or(6),
        c => c >= -7 || c == -60,
    }
}

/// Signals no mask can block.
fn unmaskable() -> u64 {
    bit(SIGKILL) | bit(SIGSTOP)
}

fn lowest(set: u64) -> i32 {
    set.trailing_zeros() as i32 + 1
}

/// The `siginfo_t` a taken signal shows: the one it was sent with, or for an instance sent
/// without room for one, Linux's: `SI_USER` and nothing else.
fn info_of(sig: i32, taken: Option<Queued>) -> sigframe::SigInfo {
    taken.map_or_else(|| Queued::sent(sig, SI_USER, 0, 0).info(), |q| q.info())
}

fn killed_by(sig: i32, fault: Option<FaultInfo>) -> ExitStatus {
    ExitStatus::Signaled { signal: sig, name: signal::name(sig), fault }
}

impl Kernel {
    /// The stack pointer of the thread making the next syscall (the shell sets it before each
    /// one): `rt_sigreturn` finds its frame there and `sigaltstack` tells whether the thread
    /// runs on its alternate stack.
    pub fn set_user_sp(&mut self, sp: u64) {
        self.sched.threads.sp = sp;
    }

    pub(crate) fn signal_arg(sig: u64) -> Result<i32, i32> {
        let sig = sig as i32;
        if (0..=NSIG as i32).contains(&sig) {
            Ok(sig)
        } else {
            Err(EINVAL)
        }
    }

    /// Signals pending for live thread `tid` alone.
    fn thread_pending(&mut self, tid: u64) -> Option<&mut Pending> {
        self.sched.threads.threads.get_mut(&tid).map(|t| &mut t.pending)
    }

    /// Signal instances queued with their `siginfo_t`, the process's and every thread's.
    fn queued(&self) -> usize {
        self.process.signals.pending.queue.len()
            + self.sched.threads.threads.values().map(|t| t.pending.queue.len()).sum::<usize>()
    }

    /// Sends `sig` with `info` to thread `tid`, or to the process when `None` (see the
    /// module docs).
    fn send_signal(&mut self, sig: i32, tid: Option<u64>, info: Queued) -> SysResult {
        if sig == 0 {
            return Ok(0);
        }
        let cur = self.sched.threads.current;
        let pid = self.procs.current;
        let blocks = |k: &Self, t: u64| sig != SIGKILL && k.thread_sigmask(t) & bit(sig) != 0;
        // The thread that takes it: the target, or for the process the current thread unless
        // it blocks the signal (or belongs to another process), then the first thread of the
        // process that does not.
        let taker = match tid {
            Some(t) => (!blocks(self, t)).then_some(t),
            None if self.is_current(cur) && !blocks(self, cur) => Some(cur),
            None => self
                .sched
                .threads
                .threads
                .iter()
                .filter(|(_, th)| th.pid == pid)
                .map(|(&t, _)| t)
                .find(|&t| !blocks(self, t)),
        };
        let action = self.process.signals.action(sig);
        if action == Action::Ignore && taker.is_some() {
            return Ok(0);
        }
        // Room for its siginfo: a real-time signal beyond the limit is refused, unless `kill`
        // sent it; a standard signal a process sent with `kill` always has room, as in Linux.
        let limit = (self.process.rlimits[RLIMIT_SIGPENDING].0.min(MAX_QUEUED as u64)) as usize;
        let code = info.code();
        let info = if self.queued() < limit || (sig < SIGRTMIN && code >= 0) {
            Some(info)
        } else if sig >= SIGRTMIN && code != SI_USER {
            return Err(EAGAIN.into());
        } else {
            None
        };
        if action == Action::Kill && taker.is_some() {
            return Err(SysStop::Exit(killed_by(sig, None)));
        }
        let pending = match tid {
            Some(t) => self.thread_pending(t),
            None => Some(&mut self.process.signals.pending),
        };
        if let Some(p) = pending {
            if p.coalesces(sig) {
                return Ok(0);
            }
            p.add(sig, info);
        }
        // A thread in pause, rt_sigsuspend or rt_sigtimedwait looks again.
        self.net.dirty = true;
        // The taker's wait ends (a thread making a call is runnable: nothing to end).
        if let Some(t) = taker {
            match self.sched.threads.threads.get_mut(&t).map(|x| (x.state, x)) {
                Some((ThreadState::Futex { .. }, _)) => self.sched.threads.wake(t, (-i64::from(EINTR)) as u64),
                // Its I/O wait ends when it is served again, unless the call completes then; a
                // sleep ends when the scheduler next runs ([`Kernel::interrupt_sleepers`]).
                Some((ThreadState::Io { .. } | ThreadState::Sleep { .. }, x)) => x.kicked = true,
                _ => {}
            }
        }
        Ok(0)
    }

    /// Sends `sig` with `info` to the current process (see [`Kernel::signal_process`] for
    /// any process).
    pub(crate) fn send_signal_to(&mut self, sig: i32, tid: Option<u64>, info: Queued) -> SysResult {
        self.send_signal(sig, tid, info)
    }

    /// Sends `sig` to the process from the kernel itself (a timer), with `info`.
    pub(crate) fn send_signal_from_kernel(&mut self, sig: i32, info: Queued) -> SysResult {
        self.send_signal(sig, None, info)
    }

    /// Ends the sleeps a signal reached: `EINTR`, with what was left written to `rem` (a
    /// relative `nanosleep` or `clock_nanosleep`; a `rem` that cannot be written is skipped).
    /// A sleep is never restarted, whatever `SA_RESTART` says, as on Linux.
    pub(crate) fn interrupt_sleepers(&mut self, mem: &mut dyn Memory) {
        let now = self.sched.clock.now_ns();
        let kicked: Vec<(u64, u64, u64)> = self
            .sched
            .threads
            .threads
            .iter()
            .filter_map(|(&tid, t)| match t.state {
                ThreadState::Sleep { deadline, rem } if t.kicked => Some((tid, deadline, rem)),
                _ => None,
            })
            .collect();
        for (tid, deadline, rem) in kicked {
            if let Some(t) = self.sched.threads.threads.get_mut(&tid) {
                t.kicked = false;
            }
            if rem != 0 {
                let left = deadline.saturating_sub(now);
                let mut b = [0u8; 16];
                b[..8].copy_from_slice(&(left / 1_000_000_000).to_le_bytes());
                b[8..].copy_from_slice(&(left % 1_000_000_000).to_le_bytes());
                let _ = self.process.mappings.copy_out(mem, rem, &b);
            }
            self.sched.threads.wake(tid, (-i64::from(EINTR)) as u64);
        }
    }

    /// Makes `sig` pending for the thread whose call is being served (the current one, or the
    /// one whose blocked call is served again), unless it is ignored: a signal the call itself
    /// raises (SIGPIPE), taken on the thread's way back to ring 3.
    pub(crate) fn raise_for_caller(&mut self, sig: i32) {
        if matches!(self.process.signals.action(sig), Action::Ignore) {
            return;
        }
        let tid = self.caller();
        let pid = self.procs.current as u32;
        if let Some(p) = self.thread_pending(tid) {
            p.add(sig, Some(Queued::sent(sig, SI_USER, pid, GUEST_UID as u32)));
        }
    }

    /// The thread whose call is being served: the current one, or the one whose blocked call
    /// is served again.
    pub(crate) fn caller(&self) -> u64 {
        self.sched.threads.retrying.map_or(self.sched.threads.current, |(t, _)| t)
    }

    /// Signals pending for thread `tid` (its own and the process's).
    fn pending_for(&self, tid: u64) -> u64 {
        self.sched.threads.threads.get(&tid).map_or(0, |t| t.pending.set) | self.process.signals.pending.set
    }

    /// True if thread `tid` has a pending signal it does not block and does not ignore: one
    /// that ends a `pause` or `rt_sigsuspend`.
    fn interrupting(&self, tid: u64) -> bool {
        let set = self.pending_for(tid) & !self.thread_sigmask(tid);
        (1..=NSIG as i32).any(|s| set & bit(s) != 0 && !matches!(self.process.signals.action(s), Action::Ignore))
    }

    /// A wait that runs with a temporary signal mask (`ppoll`, `pselect6`, `epoll_pwait`,
    /// `epoll_pwait2`), as Linux does: `*sigmask` replaces the caller's mask for the wait; a
    /// signal it lets through ends the wait with `EINTR` and its handler's frame saves the old
    /// mask, as for `rt_sigsuspend` (`Thread::suspended_mask`); a wait that ends otherwise puts
    /// the old mask back before it returns. `sigmask` 0: the caller's own mask.
    pub(crate) fn with_wait_mask(
        &mut self,
        mem: &mut dyn Memory,
        sigmask: u64,
        wait: impl FnOnce(&mut Self, &mut dyn Memory) -> SysResult,
    ) -> SysResult {
        if sigmask == 0 {
            return wait(self, mem);
        }
        let tid = self.caller();
        if !self.retrying() {
            let mask = self.process.mappings.read_u64(mem, sigmask)? & !unmaskable();
            let old = core::mem::replace(&mut self.process.signals.mask, mask);
            if let Some(t) = self.sched.threads.threads.get_mut(&tid) {
                t.suspended_mask = Some(old);
            }
            if self.interrupting(tid) {
                return Err(EINTR.into());
            }
        }
        let r = wait(self, mem);
        if !matches!(r, Err(SysStop::Block) | Err(SysStop::Err(EINTR))) {
            let current = self.is_current(tid);
            if let Some(t) = self.sched.threads.threads.get_mut(&tid) {
                if let Some(old) = t.suspended_mask.take() {
                    if current {
                        self.process.signals.mask = old;
                    } else {
                        t.sigmask = old;
                    }
                }
            }
        }
        r
    }

    /// `pause`: waits until a signal runs a handler (or ends the program), then `EINTR`.
    pub(crate) fn sys_pause(&mut self) -> SysResult {
        if self.interrupting(self.caller()) {
            return Err(EINTR.into());
        }
        self.block_io(None, Err(EINTR.into()))
    }

    /// `rt_sigsuspend`: waits with `*set` as the mask until a signal runs a handler, which
    /// saves the old mask in its frame, so that `rt_sigreturn` puts it back; then `EINTR`.
    pub(crate) fn sys_rt_sigsuspend(&mut self, mem: &mut dyn Memory, set: u64, size: u64) -> SysResult {
        if size != 8 {
            return Err(EINVAL.into());
        }
        let tid = self.caller();
        if !self.retrying() {
            let mask = self.process.mappings.read_u64(mem, set)? & !unmaskable();
            let old = core::mem::replace(&mut self.process.signals.mask, mask);
            if let Some(t) = self.sched.threads.threads.get_mut(&tid) {
                t.suspended_mask = Some(old);
            }
        }
        if self.interrupting(tid) {
            return Err(EINTR.into());
        }
        self.block_io(None, Err(EINTR.into()))
    }

    /// `rt_sigtimedwait`: takes a pending signal of `*set` without running its handler and
    /// returns its number (its `siginfo_t` to `info`); waits for one until `*timeout` on the
    /// virtual clock (`EAGAIN`), or for ever without one.
    pub(crate) fn sys_rt_sigtimedwait(&mut self, mem: &mut dyn Memory, a: [u64; 6]) -> SysResult {
        let [set, info, timeout, size, ..] = a;
        if size != 8 {
            return Err(EINVAL.into());
        }
        let want = self.process.mappings.read_u64(mem, set)? & !unmaskable();
        let wait = if timeout == 0 {
            None
        } else {
            let sec = self.process.mappings.read_u64(mem, timeout)? as i64;
            let nsec = self.process.mappings.read_u64(mem, timeout + 8)? as i64;
            if sec < 0 || !(0..1_000_000_000).contains(&nsec) {
                return Err(EINVAL.into());
            }
            Some((sec as u64).saturating_mul(1_000_000_000).saturating_add(nsec as u64))
        };
        let tid = self.caller();
        let own = self.sched.threads.threads.get(&tid).map_or(0, |t| t.pending.set) & want;
        let shared = self.process.signals.pending.set & want;
        if own | shared != 0 {
            let sig = if own != 0 { lowest(own) } else { lowest(shared) };
            // Taken even if its siginfo cannot be written (`EFAULT`), as in Linux.
            let taken = if own != 0 {
                self.thread_pending(tid).and_then(|p| p.take(sig))
            } else {
                self.process.signals.pending.take(sig)
            };
            if info != 0 {
                self.process.mappings.copy_out(mem, info, &info_of(sig, taken))?;
            }
            return Ok(sig as u64);
        }
        if wait == Some(0) {
            return Err(EAGAIN.into());
        }
        self.block_io(wait, Err(EAGAIN.into()))
    }

    /// `tgkill` (and `tkill`, whose `tgid` is the thread's own process): `sig` to thread `tid`
    /// of process `tgid`, which may be another process of the node.
    pub(crate) fn sys_tgkill(&mut self, mem: &mut dyn Memory, tgid: u64, tid: u64, sig: u64) -> SysResult {
        let (tgid, tid) = (tgid as i32, tid as i32);
        if tgid <= 0 || tid <= 0 {
            return Err(EINVAL.into());
        }
        let sig = Self::signal_arg(sig)?;
        if !self.thread_exists(tid as u64) || self.pid_of(tid as u64) != tgid as u64 {
            return Err(ESRCH.into());
        }
        let info = Queued::sent(sig, SI_TKILL, self.procs.current as u32, GUEST_UID as u32);
        self.signal_process_thread(mem, tgid as u64, Some(tid as u64), sig, info)
    }

    /// `tkill`.
    pub(crate) fn sys_tkill(&mut self, mem: &mut dyn Memory, tid: u64, sig: u64) -> SysResult {
        let pid = self.pid_of(tid as i32 as u64);
        self.sys_tgkill(mem, pid, tid, sig)
    }

    /// The `siginfo_t` a program passes to `rt_sigqueueinfo` or `rt_tgsigqueueinfo` for `sig`:
    /// its first [`INFO_BYTES`] with `si_signo` set to `sig`. A `siginfo_t` whose layout Linux
    /// does not know must hold zeros after them (`E2BIG`).
    fn siginfo_arg(&self, mem: &mut dyn Memory, sig: u64, at: u64) -> Result<Queued, i32> {
        let mut b = [0u8; INFO_BYTES];
        self.process.mappings.copy_in(mem, at, &mut b)?;
        b[0..4].copy_from_slice(&(sig as i32).to_le_bytes());
        let q = Queued(b);
        if !known_layout(sig as i32, q.code()) {
            let mut rest = [0u8; 128 - INFO_BYTES];
            self.process.mappings.copy_in(mem, at.wrapping_add(INFO_BYTES as u64), &mut rest)?;
            if rest.iter().any(|&x| x != 0) {
                return Err(E2BIG);
            }
        }
        Ok(q)
    }

    /// Whether the caller may send a signal claiming `code` to `target` (a pid or a tid): only
    /// to itself may it claim to be the kernel or `kill`/`tgkill` (a non-negative code or
    /// `SI_TKILL`), as Linux rules.
    fn may_claim(&self, code: i32, target: i32) -> Result<(), i32> {
        if (code >= 0 || code == SI_TKILL) && i64::from(target) != self.caller() as i64 {
            return Err(EPERM);
        }
        Ok(())
    }

    /// `rt_sigqueueinfo`: sends `sig` to the process with the `siginfo_t` at `uinfo`.
    pub(crate) fn sys_rt_sigqueueinfo(&mut self, mem: &mut dyn Memory, pid: u64, sig: u64, uinfo: u64) -> SysResult {
        let info = self.siginfo_arg(mem, sig, uinfo)?;
        let pid = pid as i32;
        self.may_claim(info.code(), pid)?;
        if pid as u64 != self.procs.current {
            return Err(ESRCH.into());
        }
        let sig = Self::signal_arg(sig)?;
        self.send_signal(sig, None, info)
    }

    /// `rt_tgsigqueueinfo`: sends `sig` to thread `tid` of `tgid` with the `siginfo_t` at
    /// `uinfo`.
    pub(crate) fn sys_rt_tgsigqueueinfo(&mut self, mem: &mut dyn Memory, a: [u64; 6]) -> SysResult {
        let [tgid, tid, sig, uinfo, ..] = a;
        let info = self.siginfo_arg(mem, sig, uinfo)?;
        let (tgid, tid) = (tgid as i32, tid as i32);
        if tgid <= 0 || tid <= 0 {
            return Err(EINVAL.into());
        }
        self.may_claim(info.code(), tid)?;
        if tgid as u64 != self.procs.current || self.pid_of(tid as u64) != tgid as u64 {
            return Err(ESRCH.into());
        }
        let sig = Self::signal_arg(sig)?;
        self.send_signal(sig, Some(tid as u64), info)
    }

    pub(crate) fn sys_rt_sigaction(
        &mut self,
        mem: &mut dyn Memory,
        sig: u64,
        act: u64,
        oact: u64,
        size: u64,
    ) -> SysResult {
        if size != 8 {
            return Err(EINVAL.into());
        }
        let sig = sig as i32;
        if !(1..=NSIG as i32).contains(&sig) || (act != 0 && (sig == SIGKILL || sig == SIGSTOP)) {
            return Err(EINVAL.into());
        }
        let idx = (sig - 1) as usize;
        let old = self.process.signals.actions[idx];
        if act != 0 {
            let mut b = [0u8; 32];
            self.process.mappings.copy_in(mem, act, &mut b)?;
            let mut new = [0u64; 4];
            for (i, w) in new.iter_mut().enumerate() {
                *w = u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap_or_default());
            }
            new[3] &= !unmaskable();
            self.process.signals.actions[idx] = new;
            // Setting an ignoring disposition discards the pending signal everywhere.
            if self.process.signals.action(sig) == Action::Ignore {
                self.process.signals.pending.discard(sig);
                for t in self.sched.threads.threads.values_mut() {
                    t.pending.discard(sig);
                }
            }
        }
        if oact != 0 {
            let mut b = [0u8; 32];
            for (i, w) in old.iter().enumerate() {
                b[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
            }
            self.process.mappings.copy_out(mem, oact, &b)?;
        }
        Ok(0)
    }

    pub(crate) fn sys_rt_sigprocmask(
        &mut self,
        mem: &mut dyn Memory,
        how: u64,
        set: u64,
        oset: u64,
        size: u64,
    ) -> SysResult {
        if size != 8 {
            return Err(EINVAL.into());
        }
        let old = self.process.signals.mask;
        if set != 0 {
            let new = self.process.mappings.read_u64(mem, set)?;
            let mask = match how {
                0 => old | new,
                1 => old & !new,
                2 => new,
                _ => return Err(EINVAL.into()),
            };
            self.process.signals.mask = mask & !unmaskable();
        }
        if oset != 0 {
            self.process.mappings.copy_out(mem, oset, &old.to_le_bytes())?;
        }
        // A fatal signal it unblocked ends the program now; a handled one runs its handler on
        // the way back (see `signal_due`).
        match self.next_signal() {
            Some((sig, _)) if self.process.signals.action(sig) == Action::Kill => {
                Err(SysStop::Exit(killed_by(sig, None)))
            }
            _ => Ok(0),
        }
    }

    /// `rt_sigpending`: the signals pending for the thread or the process that it blocks.
    pub(crate) fn sys_rt_sigpending(&mut self, mem: &mut dyn Memory, set: u64, size: u64) -> SysResult {
        if size > 8 {
            return Err(EINVAL.into());
        }
        let own = self.own_pending();
        let pending = (own | self.process.signals.pending.set) & self.process.signals.mask;
        self.process.mappings.copy_out(mem, set, &pending.to_le_bytes()[..size as usize])?;
        Ok(0)
    }

    /// Whether `sp` is on the current thread's alternate stack (never with `SS_AUTODISARM`).
    fn on_altstack(&self, sp: u64) -> bool {
        let (ss_sp, flags, size) = self.process.signals.altstack;
        flags & SS_AUTODISARM == 0 && size != 0 && sp > ss_sp && sp - ss_sp <= size
    }

    pub(crate) fn sys_sigaltstack(&mut self, mem: &mut dyn Memory, ss: u64, old: u64) -> SysResult {
        let cur = self.process.signals.altstack;
        let sp = self.sched.threads.sp;
        let on = self.on_altstack(sp);
        if ss != 0 {
            let mut b = [0u8; 24];
            self.process.mappings.copy_in(mem, ss, &mut b)?;
            let ss_sp = u64::from_le_bytes(b[..8].try_into().unwrap_or_default());
            let flags = u32::from_le_bytes(b[8..12].try_into().unwrap_or_default());
            let size = u64::from_le_bytes(b[16..].try_into().unwrap_or_default());
            if on {
                return Err(EPERM.into());
            }
            let mode = flags & !SS_AUTODISARM;
            if !matches!(mode, 0 | SS_ONSTACK | SS_DISABLE) {
                return Err(EINVAL.into());
            }
            if mode == SS_DISABLE {
                self.process.signals.altstack = DISABLED_ALTSTACK;
            } else {
                if size < MIN_ALTSTACK {
                    return Err(ENOMEM.into());
                }
                self.process.signals.altstack = (ss_sp, flags & SS_AUTODISARM, size);
            }
        }
        if old != 0 {
            let state = if cur.2 == 0 {
                SS_DISABLE
            } else if on {
                SS_ONSTACK
            } else {
                0
            };
            let mut b = [0u8; 24];
            b[..8].copy_from_slice(&cur.0.to_le_bytes());
            b[8..12].copy_from_slice(&(state | (cur.1 & SS_AUTODISARM)).to_le_bytes());
            b[16..].copy_from_slice(&cur.2.to_le_bytes());
            self.process.mappings.copy_out(mem, old, &b)?;
        }
        Ok(0)
    }

    /// `rt_sigreturn`: the context the handler's frame holds, which the shell installs.
    pub(crate) fn sys_rt_sigreturn(&mut self, mem: &mut dyn Memory) -> SysResult {
        let frame = self.sched.threads.sp.wrapping_sub(8);
        let bad = |why: String| {
            let d = format!("rt_sigreturn refused the signal frame at {frame:#x}: {why}");
            SysStop::Exit(killed_by(11, Some(FaultInfo { description: d, vector: 0, rip: 0, addr: Some(frame) })))
        };
        let mut uc = [0u8; 304];
        self.process
            .mappings
            .copy_in(mem, frame.wrapping_add(8), &mut uc)
            .map_err(|_| bad("it cannot be read".into()))?;
        let mut r = sigframe::decode(&uc).map_err(bad)?;
        if r.fpstate != 0 {
            let mut x = vec![0u8; sigframe::FPU_BYTES + 4];
            self.process
                .mappings
                .copy_in(mem, r.fpstate, &mut x)
                .map_err(|_| bad(format!("its FPU state at {:#x} cannot be read", r.fpstate)))?;
            r.ctx.fpu = sigframe::restore_fpu(&x).map_err(bad)?;
        }
        self.process.signals.mask = r.mask & !unmaskable();
        // The alternate stack as it was, unless the restored stack pointer is on the current
        // one (Linux ignores the error there too).
        let (ss_sp, flags, size) = r.uc_stack;
        if !self.on_altstack(r.ctx.gprs[4]) {
            let mode = flags & !SS_AUTODISARM;
            if mode == SS_DISABLE {
                self.process.signals.altstack = DISABLED_ALTSTACK;
            } else if matches!(mode, 0 | SS_ONSTACK) && size >= MIN_ALTSTACK {
                self.process.signals.altstack = (ss_sp, flags & SS_AUTODISARM, size);
            }
        }
        Err(SysStop::Resume(Box::new(r.ctx)))
    }

    /// Signals sent to the current thread alone, not yet taken.
    fn own_pending(&self) -> u64 {
        self.sched.threads.threads.get(&self.sched.threads.current).map_or(0, |t| t.pending.set)
    }

    /// The next signal the current thread would take: its own pending ones first, then the
    /// process's, lowest number first; `true` if it is the thread's own.
    fn next_signal(&self) -> Option<(i32, bool)> {
        let mask = self.process.signals.mask;
        let own = self.own_pending() & !mask;
        if own != 0 {
            return Some((lowest(own), true));
        }
        let shared = self.process.signals.pending.set & !mask;
        (shared != 0).then(|| (lowest(shared), false))
    }

    /// The runnable threads other than the current one.
    pub fn runnable_others(&self) -> Vec<u64> {
        let cur = self.sched.threads.current;
        self.sched.threads.runnable().into_iter().filter(|&t| t != cur).collect()
    }

    /// The signals the current thread has pending and does not block (its own and the
    /// process's), lowest first.
    pub fn pending_signals(&self) -> Vec<i32> {
        let own = self.own_pending();
        let set = (own | self.process.signals.pending.set) & !self.process.signals.mask;
        (1..=NSIG as i32).filter(|&s| set & bit(s) != 0).collect()
    }

    /// Whether the current thread has a signal to take on its way back to ring 3: if so, the
    /// shell reads the thread's context and calls [`Kernel::deliver_signal`].
    pub fn signal_due(&self) -> bool {
        self.process.signals.forced.is_some()
            || self.next_signal().is_some()
            || self.suspended().is_some()
            || self.sched.threads.threads.get(&self.sched.threads.current).is_some_and(|t| t.interrupted.is_some())
    }

    /// Settles a call of the current thread that a signal interrupted ([`Thread::interrupted`]):
    /// the call runs again (RIP back on its `syscall`, RAX its number) when no handler runs
    /// (`handler_flags` `None`) or the handler has `SA_RESTART`; otherwise it stays `EINTR`.
    ///
    /// [`Thread::interrupted`]: crate::task::threads::Thread::interrupted
    fn settle_interrupted(&mut self, ctx: &mut UserContext, handler_flags: Option<u64>) {
        let cur = self.sched.threads.current;
        let Some(nr) = self.sched.threads.threads.get_mut(&cur).and_then(|t| t.interrupted.take()) else { return };
        if handler_flags.is_none_or(|f| f & SA_RESTART != 0) {
            ctx.rip = ctx.rip.wrapping_sub(2);
            ctx.gprs[0] = nr;
        }
    }

    /// The mask an `rt_sigsuspend` of the current thread replaced, while it lasts.
    fn suspended(&self) -> Option<u64> {
        self.sched.threads.threads.get(&self.sched.threads.current).and_then(|t| t.suspended_mask)
    }

    /// Gives the current thread the signal it has to take: writes the handler's frame, changes
    /// `ctx` to enter the handler and returns the signal; `Ok(None)` if nothing was due (or
    /// what was due is ignored now); `Err` if the signal ends the program.
    pub fn deliver_signal(&mut self, mem: &mut dyn Memory, ctx: &mut UserContext) -> Result<Option<i32>, ExitStatus> {
        loop {
            let (sig, info, trap) = match self.process.signals.forced.take() {
                Some(f) => (f.sig, sigframe::info_fault(f.sig, f.code, f.addr), f.trap),
                None => {
                    let Some((sig, own)) = self.next_signal() else {
                        self.settle_interrupted(ctx, None);
                        // An rt_sigsuspend whose signal another thread took: its mask goes back.
                        let cur = self.sched.threads.current;
                        if let Some(old) =
                            self.sched.threads.threads.get_mut(&cur).and_then(|t| t.suspended_mask.take())
                        {
                            self.process.signals.mask = old;
                        }
                        return Ok(None);
                    };
                    let cur = self.sched.threads.current;
                    let taken = if own {
                        self.thread_pending(cur).and_then(|p| p.take(sig))
                    } else {
                        self.process.signals.pending.take(sig)
                    };
                    (sig, info_of(sig, taken), (0, 0, 0))
                }
            };
            match self.process.signals.action(sig) {
                Action::Ignore => continue,
                Action::Kill => {
                    // The process dies of it: the node with pid 1, else the process alone (the
                    // current thread then changes, see `ExceptionOutcome::ProcessEnded`).
                    return self.current_died(mem, killed_by(sig, None)).map(|()| None);
                }
                Action::Handle => {
                    let flags = self.process.signals.actions[(sig - 1) as usize][1];
                    self.settle_interrupted(ctx, Some(flags));
                    return self.run_handler(mem, ctx, sig, info, trap).map(Some);
                }
            }
        }
    }

    fn run_handler(
        &mut self,
        mem: &mut dyn Memory,
        ctx: &mut UserContext,
        sig: i32,
        info: sigframe::SigInfo,
        trap: (u64, u64, u64),
    ) -> Result<i32, ExitStatus> {
        let idx = (sig - 1) as usize;
        let [handler, flags, restorer, sa_mask] = self.process.signals.actions[idx];
        let sp = ctx.gprs[4];
        let (ss_sp, ss_flags, ss_size) = self.process.signals.altstack;
        let on_alt = self.on_altstack(sp);
        let switch = flags & SA_ONSTACK != 0 && ss_size != 0 && !on_alt;
        let (frame, fpstate) = sigframe::place(sp, switch.then(|| ss_sp.wrapping_add(ss_size)));
        let cur = self.sched.threads.current;
        let suspended = self.sched.threads.threads.get_mut(&cur).and_then(|t| t.suspended_mask.take());
        let old_mask = suspended.unwrap_or(self.process.signals.mask);
        let parts = FrameParts {
            info,
            restorer,
            old_mask,
            uc_stack: (ss_sp, if ss_size == 0 { SS_DISABLE } else { ss_flags }, ss_size),
            trap,
        };
        let (f, x) = sigframe::encode(ctx, &parts, fpstate);
        let why = if flags & SA_RESTORER == 0 {
            Some("its handler has no SA_RESTORER".to_string())
        } else if on_alt && !(frame > ss_sp && frame - ss_sp <= ss_size) {
            Some("it would overflow the alternate stack".to_string())
        } else if self.process.mappings.copy_out(mem, fpstate, &x).is_err()
            || self.process.mappings.copy_out(mem, frame, &f).is_err()
        {
            Some(format!("its frame at {frame:#x} cannot be written (stack overflow?)"))
        } else {
            None
        };
        if let Some(why) = why {
            let description = format!("{} could not be handled: {why}", signal::name(sig));
            let now = self.sched.clock.now_ns();
            self.record.tracer.exception(0, ctx.rip, frame, 0, ExceptionRecord::Fatal(11), now);
            let st = killed_by(11, Some(FaultInfo { description, vector: 0, rip: ctx.rip, addr: Some(frame) }));
            self.process.exit = Some(st.clone());
            return Err(st);
        }
        sigframe::enter(ctx, handler, sig, frame);
        let defer = if flags & SA_NODEFER == 0 { bit(sig) } else { 0 };
        // The handler runs with the mask of the moment (rt_sigsuspend's) and restores the
        // one the frame saved.
        let during = self.process.signals.mask;
        self.process.signals.mask = (during | sa_mask | defer) & !unmaskable();
        if flags & SA_RESETHAND != 0 {
            self.process.signals.actions[idx][0] = SIG_DFL;
        }
        if switch && ss_flags & SS_AUTODISARM != 0 {
            self.process.signals.altstack = DISABLED_ALTSTACK;
        }
        *self.process.signals.caught.entry(sig).or_default() += 1;
        Ok(sig)
    }

    /// Whether a fault's signal `sig` runs a handler on the current thread: it has one and
    /// does not block the signal. If so, the signal is made the thread's next (`code`, `addr`
    /// and `trap` as its handler sees them) and the fault traced as handled.
    pub(crate) fn fault_to_handler(&mut self, sig: i32, code: i32, addr: u64, trap: (u64, u64, u64), rip: u64) -> bool {
        let s = &self.process.signals;
        if s.action(sig) != Action::Handle || s.mask & bit(sig) != 0 {
            return false;
        }
        self.process.signals.forced = Some(Forced { sig, code, addr, trap });
        let now = self.sched.clock.now_ns();
        self.record.tracer.exception(trap.0 as u8, rip, trap.2, trap.1, ExceptionRecord::Handled(sig), now);
        true
    }
}
