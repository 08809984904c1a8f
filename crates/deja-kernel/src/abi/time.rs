//! Clock ids (`CLOCK_*` of `<time.h>`), as `clock_gettime` and the timers take them.

/// `CLOCK_REALTIME`.
pub const CLOCK_REALTIME: u64 = 0;
/// `CLOCK_MONOTONIC`.
pub const CLOCK_MONOTONIC: u64 = 1;
/// `CLOCK_PROCESS_CPUTIME_ID`.
pub const CLOCK_PROCESS_CPUTIME_ID: u64 = 2;
/// `CLOCK_THREAD_CPUTIME_ID`.
pub const CLOCK_THREAD_CPUTIME_ID: u64 = 3;
/// `CLOCK_MONOTONIC_RAW`.
pub const CLOCK_MONOTONIC_RAW: u64 = 4;
/// `CLOCK_REALTIME_COARSE`.
pub const CLOCK_REALTIME_COARSE: u64 = 5;
/// `CLOCK_MONOTONIC_COARSE`.
pub const CLOCK_MONOTONIC_COARSE: u64 = 6;
/// `CLOCK_BOOTTIME`.
pub const CLOCK_BOOTTIME: u64 = 7;
/// `CLOCK_REALTIME_ALARM`.
pub const CLOCK_REALTIME_ALARM: u64 = 8;
/// `CLOCK_BOOTTIME_ALARM`.
pub const CLOCK_BOOTTIME_ALARM: u64 = 9;
/// `CLOCK_TAI`.
pub const CLOCK_TAI: u64 = 11;
