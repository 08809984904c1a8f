//! What a guest could learn of the host, and deja's answers instead: the fixed CPUID table
//! (`cpuid.rs`), the host-channel instructions rewritten to traps and the answers to those
//! traps (`hostchan.rs`), the `syscall` sites made jumps (`jumps.rs`), and the program's own
//! edge-coverage counters read from its memory (`coverage.rs`).
//!
//! Owns the CPUID table, the per-process [`HostChannels`](hostchan::HostChannels) and
//! [`CoverageRegion`](coverage::CoverageRegion). Uses [`crate::mm`] (guest memory, the layout,
//! ELF parsing) and [`crate::persist`].

pub(crate) mod coverage;
pub mod cpuid;
pub mod hostchan;
pub mod jumps;
