//! Signals: their names and default actions, the process's signal state (this file), and the
//! frame a handler runs on (`sigframe.rs`).
//!
//! Owns [`Signals`] (dispositions, pending signals) and the frame's layout. Uses only
//! [`crate::abi`] (the signal numbers), [`crate::persist`] and the crate root's
//! [`UserContext`](crate::UserContext).
//!
//! Dispositions are the process's; the mask and the alternate stack are per thread (the
//! current thread's live here, the others' in [`crate::task::threads`]); a pending signal is either
//! the process's (`kill`, `rt_sigqueueinfo`) or one thread's (`tgkill`, `tkill`, `raise`,
//! `rt_tgsigqueueinfo`), and waits with the `siginfo_t` it was sent with ([`Pending`]). How and
//! when a signal reaches a handler is in [`crate::syscalls::sys_signal`].

use crate::prelude::*;
use alloc::collections::BTreeMap;

use crate::abi::signal::*;

pub(crate) mod sigframe;

/// Bytes of a `siginfo_t` a sent signal carries (Linux's `struct kernel_siginfo`); the rest of
/// the 128 bytes a program reads are zeros.
pub const INFO_BYTES: usize = 48;
/// Most signals queued with their `siginfo_t` at once, the process's and its threads'
/// together, whatever `RLIMIT_SIGPENDING` allows beyond it.
pub const MAX_QUEUED: usize = 4096;

const NAMES: [&str; 32] = [
    "",
    "SIGHUP",
    "SIGINT",
    "SIGQUIT",
    "SIGILL",
    "SIGTRAP",
    "SIGABRT",
    "SIGBUS",
    "SIGFPE",
    "SIGKILL",
    "SIGUSR1",
    "SIGSEGV",
    "SIGUSR2",
    "SIGPIPE",
    "SIGALRM",
    "SIGTERM",
    "SIGSTKFLT",
    "SIGCHLD",
    "SIGCONT",
    "SIGSTOP",
    "SIGTSTP",
    "SIGTTIN",
    "SIGTTOU",
    "SIGURG",
    "SIGXCPU",
    "SIGXFSZ",
    "SIGVTALRM",
    "SIGPROF",
    "SIGWINCH",
    "SIGIO",
    "SIGPWR",
    "SIGSYS",
];

/// The name of signal `sig` (`SIGRTMIN+n` for real-time signals).
pub fn name(sig: i32) -> String {
    match usize::try_from(sig) {
        Ok(i @ 1..=31) => NAMES[i].to_string(),
        _ if (32..=64).contains(&sig) => format!("SIGRTMIN+{}", sig - 32),
        _ => format!("SIG{sig}"),
    }
}

/// True if the default action of `sig` terminates the process (with or without a core).
pub fn default_terminates(sig: i32) -> bool {
    // Ignored by default: SIGCHLD, SIGCONT, SIGURG, SIGWINCH. Stopping signals have no
    // job control to stop for here and are treated as ignored too.
    !matches!(sig, 17 | 18 | 23 | 28 | 19 | 20 | 21 | 22)
}

/// Bit of `sig` in a signal set.
pub fn bit(sig: i32) -> u64 {
    1u64 << ((sig - 1) as u32 & 63)
}

/// The signal state of the process.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Signals {
    /// `struct kernel_sigaction` per signal: handler, flags, restorer, mask.
    #[serde(with = "crate::persist::array")]
    pub actions: [[u64; 4]; NSIG as usize],
    /// The current thread's blocked signals.
    pub mask: u64,
    /// Signals pending for the process (sent with `kill` or `rt_sigqueueinfo`).
    pub pending: Pending,
    /// The current thread's alternate stack: `ss_sp`, `ss_flags`, `ss_size`.
    pub altstack: (u64, u32, u64),
    /// Signals handed to a handler, by number.
    pub caught: BTreeMap<i32, u64>,
    /// The synchronous signal of the fault being turned into a handler call.
    pub forced: Option<Forced>,
}

impl Default for Signals {
    fn default() -> Self {
        Signals {
            actions: [[0; 4]; NSIG as usize],
            mask: 0,
            pending: Pending::default(),
            altstack: DISABLED_ALTSTACK,
            caught: BTreeMap::new(),
            forced: None,
        }
    }
}

/// One sent signal waiting to be taken: the first [`INFO_BYTES`] of its `siginfo_t`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Queued(#[serde(with = "crate::persist::array")] pub [u8; INFO_BYTES]);

impl Queued {
    /// A signal sent by a process: `si_signo`, `si_code`, `si_pid` and `si_uid`.
    pub fn sent(sig: i32, code: i32, pid: u32, uid: u32) -> Self {
        let mut i = [0u8; INFO_BYTES];
        i[0..4].copy_from_slice(&sig.to_le_bytes());
        i[8..12].copy_from_slice(&code.to_le_bytes());
        i[16..20].copy_from_slice(&pid.to_le_bytes());
        i[20..24].copy_from_slice(&uid.to_le_bytes());
        Queued(i)
    }

    fn int_at(&self, at: usize) -> i32 {
        i32::from_le_bytes([self.0[at], self.0[at + 1], self.0[at + 2], self.0[at + 3]])
    }

    /// `si_signo`.
    pub fn sig(&self) -> i32 {
        self.int_at(0)
    }

    /// `si_code`.
    pub fn code(&self) -> i32 {
        self.int_at(8)
    }

    /// The whole 128-byte `siginfo_t` a handler or `rt_sigtimedwait` gets.
    pub fn info(&self) -> [u8; 128] {
        let mut i = [0u8; 128];
        i[..INFO_BYTES].copy_from_slice(&self.0);
        i
    }
}

/// Signals pending for the process or for one thread, as Linux keeps them: the set, and the
/// `siginfo_t` of each instance in the order they were sent. A standard signal already
/// pending is not queued again (the first instance's `siginfo_t` stays); a real-time signal
/// ([`SIGRTMIN`] and above) queues every instance. A signal in the set with nothing queued
/// was sent when the queue was full (`kill` of a real-time signal): it is taken once, with a
/// `siginfo_t` that says only `SI_USER`, as in Linux.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Pending {
    /// The pending signals.
    pub set: u64,
    /// The instances with their `siginfo_t`, oldest first.
    pub queue: Vec<Queued>,
}

impl Pending {
    /// True if an instance of `sig` would not be kept: a standard signal already pending.
    pub fn coalesces(&self, sig: i32) -> bool {
        sig < SIGRTMIN && self.set & bit(sig) != 0
    }

    /// Makes `sig` pending, with its `siginfo_t` when there was room for it.
    pub fn add(&mut self, sig: i32, info: Option<Queued>) {
        if self.coalesces(sig) {
            return;
        }
        self.set |= bit(sig);
        if let Some(q) = info {
            self.queue.push(q);
        }
    }

    /// Takes the oldest instance of `sig` (pending): its `siginfo_t`, or `None` if it was
    /// sent without one. The signal stays pending while other instances are queued.
    pub fn take(&mut self, sig: i32) -> Option<Queued> {
        let q = self.queue.iter().position(|q| q.sig() == sig).map(|at| self.queue.remove(at));
        if !self.queue.iter().any(|q| q.sig() == sig) {
            self.set &= !bit(sig);
        }
        q
    }

    /// Forgets every instance of `sig`.
    pub fn discard(&mut self, sig: i32) {
        self.set &= !bit(sig);
        self.queue.retain(|q| q.sig() != sig);
    }

    /// Checks a restored set: every instance queued is of a signal in the set, at most one
    /// of each standard signal, and the queue is within its bound (standard signals may pass
    /// it by one each, as in Linux).
    pub fn validate(&self, whose: &str) -> Result<(), crate::persist::RestoreError> {
        let mut seen = 0u64;
        for q in &self.queue {
            let sig = q.sig();
            crate::persist::ensure((1..=NSIG as i32).contains(&sig) && self.set & bit(sig) != 0, || {
                format!("{whose}: a queued signal {sig} is not pending")
            })?;
            crate::persist::ensure(sig >= SIGRTMIN || seen & bit(sig) == 0, || {
                format!("{whose}: signal {sig} is queued twice")
            })?;
            seen |= bit(sig);
        }
        crate::persist::ensure(self.queue.len() <= MAX_QUEUED + SIGRTMIN as usize, || {
            format!("{whose}: {} signals queued", self.queue.len())
        })
    }
}

/// No alternate stack (`SS_DISABLE`).
pub const DISABLED_ALTSTACK: (u64, u32, u64) = (0, 2, 0);

/// A fault's signal, as its handler is told of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Forced {
    /// The signal.
    pub sig: i32,
    /// `si_code`.
    pub code: i32,
    /// `si_addr`.
    pub addr: u64,
    /// The exception vector, its error code and CR2 (`trapno`, `err`, `cr2` in the context).
    pub trap: (u64, u64, u64),
}

/// What a signal does to the process, by its disposition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Discarded.
    Ignore,
    /// The process dies of it.
    Kill,
    /// A handler runs.
    Handle,
}

impl Signals {
    /// Handler of `sig`.
    pub fn handler(&self, sig: i32) -> u64 {
        self.actions[(sig - 1) as usize & 63][0]
    }

    /// What `sig` does now.
    pub fn action(&self, sig: i32) -> Action {
        if sig == SIGKILL || sig == SIGSTOP {
            return if sig == SIGKILL { Action::Kill } else { Action::Ignore };
        }
        match self.handler(sig) {
            SIG_DFL if default_terminates(sig) => Action::Kill,
            SIG_DFL | SIG_IGN => Action::Ignore,
            _ => Action::Handle,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_actions() {
        assert_eq!(name(6), "SIGABRT");
        assert_eq!(name(34), "SIGRTMIN+2");
        let mut s = Signals::default();
        assert_eq!(s.action(17), Action::Ignore);
        assert_eq!(s.action(6), Action::Kill);
        s.actions[9][0] = 0x401000;
        assert_eq!(s.action(10), Action::Handle);
        s.actions[14][0] = SIG_IGN;
        assert_eq!(s.action(15), Action::Ignore);
        assert_eq!(s.action(SIGKILL), Action::Kill);
    }

    #[test]
    fn save_restore_round_trip() {
        let mut s = Signals::default();
        s.actions[9] = [0x401000, 0x0400_0000, 0x401100, bit(12)];
        s.actions[63][0] = SIG_IGN;
        s.mask = bit(6) | bit(15);
        s.pending.add(6, Some(Queued::sent(6, 0, 1, 1000)));
        s.pending.add(40, Some(Queued::sent(40, -1, 1, 1000)));
        s.pending.add(40, None);
        s.caught.insert(10, 2);
        s.forced = Some(Forced { sig: 11, code: 1, addr: 8, trap: (14, 4, 8) });
        s.altstack = (0x7000_0000, 0, 0x2000);
        let r: Signals = postcard::from_bytes(&postcard::to_stdvec(&s).unwrap()).unwrap();
        assert_eq!(r, s);
        assert_eq!(r.pending.validate("the process"), Ok(()));
    }

    #[test]
    fn standard_signals_coalesce_and_real_time_signals_queue() {
        let mut p = Pending::default();
        p.add(10, Some(Queued::sent(10, -1, 1, 1000)));
        p.add(10, Some(Queued::sent(10, 0, 7, 7)));
        p.add(34, Some(Queued::sent(34, -1, 1, 1)));
        p.add(34, Some(Queued::sent(34, -1, 1, 2)));
        p.add(34, None);
        assert_eq!(p.queue.len(), 3, "one SIGUSR1, two SIGRTMIN+2 with their siginfo");
        assert_eq!(p.take(10).map(|q| q.code()), Some(-1), "the first SIGUSR1's siginfo stays");
        assert_eq!(p.set & bit(10), 0);
        assert_eq!(p.take(34).map(|q| q.int_at(20)), Some(1), "oldest first");
        assert_ne!(p.set & bit(34), 0, "another instance is queued");
        assert_eq!(p.take(34).map(|q| q.int_at(20)), Some(2));
        assert_eq!(p.set, 0, "the instance sent without room went with the last queued one");
        assert_eq!(p.take(34), None);
        p.add(50, None);
        assert_eq!(p.take(50), None, "pending without a siginfo");
        assert_eq!(p.set, 0);
        p.add(40, Some(Queued::sent(40, -1, 1, 1)));
        p.add(41, Some(Queued::sent(41, -1, 1, 1)));
        p.discard(40);
        assert_eq!((p.set, p.queue.len()), (bit(41), 1));
        let mut bad = p.clone();
        bad.queue.push(Queued::sent(12, 0, 1, 1));
        assert!(bad.validate("thread 1").unwrap_err().to_string().contains("not pending"));
        let bad = Pending { set: bit(12), queue: vec![Queued::sent(12, 0, 1, 1), Queued::sent(12, 0, 1, 1)] };
        assert!(bad.validate("the process").unwrap_err().to_string().contains("queued twice"));
    }
}
