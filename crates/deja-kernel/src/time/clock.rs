//! The virtual clock: guest-visible time, advanced only by the monitor.
//!
//! Time starts at 0 ns "since boot" when the program is loaded. It advances by
//! [`SYSCALL_COST_NS`] for every syscall served, by [`RDTSC_COST_NS`] for every emulated
//! `rdtsc`, and jumps forward when the program sleeps or times out. The host clock is never read.
//!
//! The virtual TSC counts [`TSC_PER_NS`] ticks per virtual ns from a base drawn from the seed
//! ([`tsc_base`]): a runtime that seeds its own generator from the TSC at start-up (the Go
//! scheduler does) gets another seed with every deja seed, as it would from host time.

use crate::abi::time::*;

/// Virtual time charged for each syscall (1 µs).
pub const SYSCALL_COST_NS: u64 = 1_000;
/// Virtual time charged for each emulated `rdtsc`/`rdtscp`.
pub const RDTSC_COST_NS: u64 = 20;
/// `CLOCK_REALTIME` at boot: 2023-11-14T22:13:20Z.
pub const REALTIME_EPOCH_S: u64 = 1_700_000_000;
/// The virtual TSC frequency: 3 GHz, i.e. 3 ticks per ns.
pub const TSC_PER_NS: u64 = 3;

/// Nanoseconds per second.
pub const NS_PER_S: u64 = 1_000_000_000;

/// The kind of a clock id, as far as its value is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockKind {
    /// Wall clock: epoch + virtual time.
    Realtime,
    /// Time since boot (monotonic, boottime, raw, coarse).
    Monotonic,
    /// CPU time of the process (equal to virtual time: the program never waits for a CPU).
    ProcessCpu,
    /// CPU time of the thread.
    ThreadCpu,
}

/// Classifies a clock id; `None` for ids Linux rejects with `EINVAL`.
pub fn clock_kind(id: u64) -> Option<ClockKind> {
    match id {
        CLOCK_REALTIME | CLOCK_REALTIME_COARSE | CLOCK_REALTIME_ALARM | CLOCK_TAI => Some(ClockKind::Realtime),
        CLOCK_MONOTONIC | CLOCK_MONOTONIC_RAW | CLOCK_MONOTONIC_COARSE | CLOCK_BOOTTIME | CLOCK_BOOTTIME_ALARM => {
            Some(ClockKind::Monotonic)
        }
        CLOCK_PROCESS_CPUTIME_ID => Some(ClockKind::ProcessCpu),
        CLOCK_THREAD_CPUTIME_ID => Some(ClockKind::ThreadCpu),
        _ => None,
    }
}

/// BLAKE3 key-derivation context of the virtual TSC's base.
const TSC_BASE_CONTEXT: &str = "deja 2026 virtual tsc base v1";

/// The virtual TSC at boot for `seed`: below 2^48 ticks (about a day at 3 GHz), like a host
/// that booted recently.
pub fn tsc_base(seed: u64) -> u64 {
    let key = blake3::derive_key(TSC_BASE_CONTEXT, &seed.to_le_bytes());
    u64::from_le_bytes([key[0], key[1], key[2], key[3], key[4], key[5], key[6], key[7]]) & ((1 << 48) - 1)
}

/// The virtual clock.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Clock {
    now_ns: u64,
    /// The virtual TSC at boot ([`tsc_base`] of the seed).
    tsc_base: u64,
    /// How far this node's clocks jumped forward (a clock fault): added to every reading.
    jumped_ns: u64,
    /// Skew of the wall clock (a clock fault): added to `CLOCK_REALTIME` only.
    skew_ns: i64,
}

impl Clock {
    /// Nanoseconds since boot.
    pub fn now_ns(&self) -> u64 {
        self.now_ns
    }

    /// Advances by `ns` (saturating: a sleep of centuries does not wrap).
    pub fn advance(&mut self, ns: u64) {
        self.now_ns = self.now_ns.saturating_add(ns);
    }

    /// Moves the clock forward to `t` if `t` is in the future.
    pub fn advance_to(&mut self, t: u64) {
        self.now_ns = self.now_ns.max(t);
    }

    /// The value of clock `kind` in ns, as the program sees it.
    pub fn read(&self, kind: ClockKind) -> u64 {
        match kind {
            ClockKind::Realtime => self.realtime_ns(),
            _ => self.local_ns(),
        }
    }

    /// Time since boot as the program sees it: virtual time plus any forward jump.
    pub fn local_ns(&self) -> u64 {
        self.now_ns.saturating_add(self.jumped_ns)
    }

    /// `CLOCK_REALTIME` in ns since the Unix epoch.
    pub fn realtime_ns(&self) -> u64 {
        let t = (REALTIME_EPOCH_S * NS_PER_S).saturating_add(self.local_ns());
        t.saturating_add_signed(self.skew_ns)
    }

    /// A clock at 0 whose TSC starts at [`tsc_base`]`(seed)`.
    pub fn new(seed: u64) -> Clock {
        Clock { tsc_base: tsc_base(seed), ..Clock::default() }
    }

    /// The virtual TSC: its base plus [`TSC_PER_NS`] ticks per ns of local time.
    pub fn tsc(&self) -> u64 {
        self.tsc_base.wrapping_add(self.local_ns().wrapping_mul(TSC_PER_NS))
    }

    /// Jumps every clock the program reads forward by `ns` (virtual time itself, and so every
    /// timeout already running, is unchanged).
    pub fn jump(&mut self, ns: u64) {
        self.jumped_ns = self.jumped_ns.saturating_add(ns);
    }

    /// Sets the skew of the wall clock to `ns` (negative: behind).
    pub fn set_skew(&mut self, ns: i64) {
        self.skew_ns = ns;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_kinds_and_values() {
        let mut c = Clock::default();
        c.advance(5);
        assert_eq!(c.read(ClockKind::Monotonic), 5);
        assert_eq!(c.read(ClockKind::Realtime), REALTIME_EPOCH_S * NS_PER_S + 5);
        assert_eq!(c.tsc(), 15);
        let s = Clock::new(7);
        assert_eq!(s.tsc(), tsc_base(7));
        assert_ne!(tsc_base(7), tsc_base(8), "the TSC's base follows the seed");
        assert!(tsc_base(7) < 1 << 48);
        c.advance_to(3);
        assert_eq!(c.now_ns(), 5);
        c.advance(u64::MAX);
        assert_eq!(c.now_ns(), u64::MAX);
        assert_eq!(clock_kind(10), None);
        assert_eq!(clock_kind(u64::MAX), None);
        assert_eq!(clock_kind(7), Some(ClockKind::Monotonic));
    }

    #[test]
    fn save_restore_round_trip() {
        let mut c = Clock::default();
        c.advance(123_456_789);
        let mut d: Clock = postcard::from_bytes(&postcard::to_stdvec(&c).unwrap()).unwrap();
        assert_eq!(c, d);
        c.advance(5);
        d.advance(5);
        assert_eq!(c.tsc(), d.tsc());
        assert_eq!(c.read(ClockKind::Realtime), d.read(ClockKind::Realtime));
    }
}
