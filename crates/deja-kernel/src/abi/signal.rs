//! Signal numbers and the special dispositions (`<signal.h>`) the kernel names.

/// Number of signals (1..=64).
pub const NSIG: u64 = 64;
/// `SIGKILL`.
pub const SIGKILL: i32 = 9;
/// `SIGSTOP`.
pub const SIGSTOP: i32 = 19;
/// `SIGPIPE`.
pub const SIGPIPE: i32 = 13;
/// `SIGCHLD`.
pub const SIGCHLD: i32 = 17;
/// `SIG_DFL`.
pub const SIG_DFL: u64 = 0;
/// `SIG_IGN`.
pub const SIG_IGN: u64 = 1;
/// The first real-time signal (the kernel's `SIGRTMIN`; glibc keeps 32 and 33 for itself).
pub const SIGRTMIN: i32 = 32;
