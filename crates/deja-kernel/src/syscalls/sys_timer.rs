//! The process's interval timer on the virtual clock: `alarm`, `setitimer` and `getitimer`
//! (`ITIMER_REAL`).
//!
//! The timer is a deadline in virtual time and an interval. The scheduler fires it
//! ([`Kernel::fire_timer`]) when it runs after a syscall and the clock has reached the
//! deadline, and moves the clock to the deadline when every thread waits (so `alarm(1);
//! pause();` takes one virtual second, not a deadlock). Firing sends the process `SIGALRM` with
//! `si_code` `SI_KERNEL`, as Linux does, which ends a blocked call the way any signal does
//! ([`crate::syscalls::sys_signal`]); an interval timer is armed again for the next multiple of its
//! interval after the clock. The vDSO never shows a time past the deadline without an exit.
//! `ITIMER_VIRTUAL` and `ITIMER_PROF` (CPU-time timers) are not served: `ENOSYS`, counted as
//! unsupported.

use crate::abi::errno::*;
use crate::kernel::{Kernel, SysResult, SysStop};
use crate::prelude::*;
use crate::signal::Queued;
use crate::time::clock::NS_PER_S;
use crate::Memory;

const ITIMER_REAL: u64 = 0;
const ITIMER_PROF: u64 = 2;
const SIGALRM: i32 = 14;
/// `si_code` of a signal the kernel sends.
const SI_KERNEL: i32 = 0x80;
const NS_PER_US: u64 = 1000;

impl Kernel {
    /// The interval timer's deadline, if it is armed.
    pub(crate) fn timer_deadline(&self) -> Option<u64> {
        let parked = self.procs.table.values().filter(|p| p.live()).filter_map(|p| p.parked.as_ref()?.itimer_real);
        self.process.itimer_real.into_iter().chain(parked).map(|(at, _)| at).min()
    }

    /// What is left of the timer, ns (at least 1 µs while it is armed, as Linux says), and
    /// its interval.
    fn timer_left(&self) -> (u64, u64) {
        match self.process.itimer_real {
            Some((at, every)) => (at.saturating_sub(self.sched.clock.now_ns()).max(NS_PER_US), every),
            None => (0, 0),
        }
    }

    /// Arms the timer for `value` ns from now (0 disarms it), then every `interval` ns.
    fn arm_timer(&mut self, value: u64, interval: u64) {
        self.process.itimer_real = (value > 0).then(|| (self.sched.clock.now_ns().saturating_add(value), interval));
    }

    /// Sends `SIGALRM` to each process whose timer the clock reached, the current one first,
    /// and arms each again if it has an interval: a process's timer runs whichever process
    /// runs. `Err(Exit)` if the signal ends the current process or pid 1 (another process it
    /// ends, ends here).
    pub(crate) fn fire_timers(&mut self, mem: &mut dyn Memory) -> Result<(), SysStop> {
        let now = self.sched.clock.now_ns();
        if Self::fired(&mut self.process.itimer_real, now) {
            self.send_signal_from_kernel(SIGALRM, Queued::sent(SIGALRM, SI_KERNEL, 0, 0))?;
        }
        let mut due = Vec::new();
        for (&pid, p) in self.procs.table.iter_mut().filter(|(_, p)| p.live()) {
            if p.parked.as_mut().is_some_and(|parked| Self::fired(&mut parked.itimer_real, now)) {
                due.push(pid);
            }
        }
        for pid in due {
            if let Err(SysStop::Exit(st)) =
                self.signal_process(mem, pid, SIGALRM, Queued::sent(SIGALRM, SI_KERNEL, 0, 0))
            {
                return Err(SysStop::Exit(st));
            }
        }
        Ok(())
    }

    /// True if the timer `t` is due at `now`; it is then armed again a whole number of
    /// intervals later, or disarmed.
    fn fired(t: &mut Option<(u64, u64)>, now: u64) -> bool {
        let Some((at, every)) = t.filter(|&(at, _)| at <= now) else { return false };
        *t = (every > 0).then(|| {
            let missed = (now - at) / every + 1;
            (at.saturating_add(missed.saturating_mul(every)), every)
        });
        true
    }

    /// `alarm`: the timer in `secs` seconds, no interval; what was left of the previous one in
    /// seconds, rounded to the nearest (and 1 for less than a second), as Linux gives it.
    pub(crate) fn sys_alarm(&mut self, secs: u64) -> SysResult {
        let (left, _) = self.timer_left();
        let armed = self.process.itimer_real.is_some();
        self.arm_timer(u64::from(secs as u32).saturating_mul(NS_PER_S), 0);
        if !armed {
            return Ok(0);
        }
        let (s, us) = (left / NS_PER_S, left % NS_PER_S / NS_PER_US);
        Ok(if (s == 0 && us > 0) || us >= 500_000 { s + 1 } else { s })
    }

    /// `setitimer(which, new, old)`.
    pub(crate) fn sys_setitimer(&mut self, mem: &mut dyn Memory, which: u64, new: u64, old: u64) -> SysResult {
        self.itimer_kind(which)?;
        // A null `new` disarms, as Linux still takes it.
        let (value, interval) = if new == 0 { (0, 0) } else { self.read_itimerval(mem, new)? };
        if old != 0 {
            let (left, every) = self.timer_left();
            self.write_itimerval(mem, old, left, every)?;
        }
        self.arm_timer(value, interval);
        Ok(0)
    }

    /// `getitimer(which, cur)`.
    pub(crate) fn sys_getitimer(&mut self, mem: &mut dyn Memory, which: u64, cur: u64) -> SysResult {
        self.itimer_kind(which)?;
        let (left, every) = self.timer_left();
        self.write_itimerval(mem, cur, left, every)?;
        Ok(0)
    }

    fn itimer_kind(&self, which: u64) -> Result<(), SysStop> {
        match which {
            ITIMER_REAL => Ok(()),
            1..=ITIMER_PROF => Err(SysStop::Unsupported),
            _ => Err(EINVAL.into()),
        }
    }

    /// A `struct itimerval` (interval, then value, each a `timeval`): (value, interval) in ns.
    fn read_itimerval(&self, mem: &mut dyn Memory, addr: u64) -> Result<(u64, u64), i32> {
        let mut b = [0u8; 32];
        self.process.mappings.copy_in(mem, addr, &mut b)?;
        let tv = |at: usize| -> Result<u64, i32> {
            let sec = i64::from_le_bytes(b[at..at + 8].try_into().unwrap_or_default());
            let usec = i64::from_le_bytes(b[at + 8..at + 16].try_into().unwrap_or_default());
            if sec < 0 || !(0..1_000_000).contains(&usec) {
                return Err(EINVAL);
            }
            Ok((sec as u64).saturating_mul(NS_PER_S).saturating_add(usec as u64 * NS_PER_US))
        };
        let interval = tv(0)?;
        let value = tv(16)?;
        Ok((value, interval))
    }

    fn write_itimerval(&self, mem: &mut dyn Memory, addr: u64, value: u64, interval: u64) -> Result<(), i32> {
        let mut b = [0u8; 32];
        for (at, ns) in [(0, interval), (16, value)] {
            b[at..at + 8].copy_from_slice(&(ns / NS_PER_S).to_le_bytes());
            b[at + 8..at + 16].copy_from_slice(&(ns % NS_PER_S / NS_PER_US).to_le_bytes());
        }
        self.process.mappings.copy_out(mem, addr, &b)?;
        Ok(())
    }
}
