//! Signal numbers, names, default actions and the process's signal state.
//!
//! Dispositions are the process's; the mask and the alternate stack are per thread (the
//! current thread's live here, the others' in [`crate::threads`]); a pending signal is either
//! the process's (`kill`) or one thread's (`tgkill`, `tkill`, `raise`). How and when a signal
//! reaches a handler is in [`crate::sys_signal`].

use std::collections::BTreeMap;

/// Number of signals (1..=64).
pub const NSIG: u64 = 64;
/// `SIGKILL`.
pub const SIGKILL: i32 = 9;
/// `SIGSTOP`.
pub const SIGSTOP: i32 = 19;
/// `SIGPIPE`.
pub const SIGPIPE: i32 = 13;
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
    /// The current thread's blocked signals.
    pub mask: u64,
    /// Signals pending for the process (sent with `kill`).
    pub pending: u64,
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
            pending: 0,
            altstack: DISABLED_ALTSTACK,
            caught: BTreeMap::new(),
            forced: None,
        }
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
        s.pending = bit(6);
        s.caught.insert(10, 2);
        s.forced = Some(Forced { sig: 11, code: 1, addr: 8, trap: (14, 4, 8) });
        s.altstack = (0x7000_0000, 0, 0x2000);
        let r: Signals = postcard::from_bytes(&postcard::to_stdvec(&s).unwrap()).unwrap();
        assert_eq!(r, s);
    }
}
