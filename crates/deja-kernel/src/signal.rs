//! Signal numbers, names, default actions and the process's signal state.
//!
//! deja records dispositions, the mask and the alternate stack, but does not yet run signal
//! handlers: a signal the program sends itself is delivered synchronously; if its disposition
//! is the default "terminate" action the program ends with [`ExitStatus::Signaled`]; if it is
//! ignored it is discarded; if a handler is installed the signal is recorded (see
//! [`Signals::caught`]) and the sender sees success. A blocked signal stays pending until the
//! mask unblocks it.
//!
//! [`ExitStatus::Signaled`]: crate::ExitStatus::Signaled

use std::collections::BTreeMap;

/// Number of signals (1..=64).
pub const NSIG: u64 = 64;
/// `SIGKILL`.
pub const SIGKILL: i32 = 9;
/// `SIGSTOP`.
pub const SIGSTOP: i32 = 19;
/// `SIG_DFL`.
pub const SIG_DFL: u64 = 0;
/// `SIG_IGN`.
pub const SIG_IGN: u64 = 1;

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
    /// Blocked signals.
    pub mask: u64,
    /// Pending (blocked) signals.
    pub pending: u64,
    /// The alternate stack: `ss_sp`, `ss_flags`, `ss_size`.
    pub altstack: (u64, u32, u64),
    /// Signals that arrived while a handler was installed (handlers are not run yet).
    pub caught: BTreeMap<i32, u64>,
}

impl Default for Signals {
    fn default() -> Self {
        Signals { actions: [[0; 4]; NSIG as usize], mask: 0, pending: 0, altstack: (0, 2, 0), caught: BTreeMap::new() }
    }
}

/// What delivering a signal did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// Nothing visible (ignored, pending, or recorded for a handler).
    Nothing,
    /// The process is killed by this signal.
    Kill(i32),
}

impl Signals {
    /// Handler of `sig`.
    pub fn handler(&self, sig: i32) -> u64 {
        self.actions[(sig - 1) as usize & 63][0]
    }

    /// Sends `sig` (1..=64) to the process.
    pub fn send(&mut self, sig: i32) -> Delivery {
        if sig != SIGKILL && sig != SIGSTOP && self.mask & bit(sig) != 0 {
            if self.handler(sig) != SIG_IGN {
                self.pending |= bit(sig);
            }
            return Delivery::Nothing;
        }
        self.deliver(sig)
    }

    fn deliver(&mut self, sig: i32) -> Delivery {
        if sig == SIGKILL {
            return Delivery::Kill(sig);
        }
        match self.handler(sig) {
            SIG_DFL if default_terminates(sig) => Delivery::Kill(sig),
            SIG_DFL | SIG_IGN => Delivery::Nothing,
            _ => {
                let n = self.caught.entry(sig).or_default();
                *n = n.saturating_add(1);
                Delivery::Nothing
            }
        }
    }

    /// Delivers the pending signals the mask no longer blocks (lowest number first).
    pub fn deliver_unblocked(&mut self) -> Delivery {
        while self.pending & !self.mask != 0 {
            let sig = (self.pending & !self.mask).trailing_zeros() as i32 + 1;
            self.pending &= !bit(sig);
            if let Delivery::Kill(s) = self.deliver(sig) {
                return Delivery::Kill(s);
            }
        }
        Delivery::Nothing
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_delivery() {
        assert_eq!(name(6), "SIGABRT");
        assert_eq!(name(34), "SIGRTMIN+2");
        let mut s = Signals::default();
        assert_eq!(s.send(17), Delivery::Nothing);
        s.mask = bit(6);
        assert_eq!(s.send(6), Delivery::Nothing);
        assert_eq!(s.pending, bit(6));
        s.mask = 0;
        assert_eq!(s.deliver_unblocked(), Delivery::Kill(6));
        s.actions[9][0] = 0x401000;
        assert_eq!(s.send(10), Delivery::Nothing);
        assert_eq!(s.caught.get(&10), Some(&1));
        s.actions[14][0] = SIG_IGN;
        assert_eq!(s.send(15), Delivery::Nothing);
        assert_eq!(s.send(SIGKILL), Delivery::Kill(9));
    }

    #[test]
    fn save_restore_round_trip() {
        let mut s = Signals::default();
        s.actions[9] = [0x401000, 0x0400_0000, 0x401100, bit(12)];
        s.actions[63][0] = SIG_IGN;
        s.mask = bit(6) | bit(15);
        assert_eq!(s.send(6), Delivery::Nothing);
        assert_eq!(s.send(10), Delivery::Nothing);
        s.altstack = (0x7000_0000, 0, 0x2000);
        let mut r: Signals = postcard::from_bytes(&postcard::to_stdvec(&s).unwrap()).unwrap();
        assert_eq!(r, s);
        r.mask = 0;
        s.mask = 0;
        assert_eq!(r.deliver_unblocked(), Delivery::Kill(6));
        assert_eq!(s.deliver_unblocked(), Delivery::Kill(6));
        assert_eq!(r.caught, s.caught);
    }
}
