//! Decisions and randomness: every nondeterministic choice deja makes on a program's behalf is
//! a decision taken through the [`DecisionLog`], and every random byte the guest reads comes
//! from the seeded [`RandomStream`](rng::RandomStream).
//!
//! Owns what a decision is about ([`DecisionPoint`], in `point.rs`), the decision log with its
//! stream, overrides and records (`log.rs`), the program's random stream and the ChaCha20
//! state both are saved as (`rng.rs`), and the words of faults the decision points, the file
//! system and the fault plan share (`fault_kinds.rs`: [`IoOp`], [`IoErrno`], [`FaultKind`],
//! [`FailStopMode`]). Uses only [`crate::abi`] and [`crate::persist`]; the fault plan
//! ([`crate::faults`]) and the file system ([`crate::fs`]) build on it. What a decision is, how
//! overrides steer it and where each kind is taken: see [the crate
//! documentation](crate#decisions).

pub(crate) mod fault_kinds;
pub(crate) mod log;
pub(crate) mod point;
pub(crate) mod rng;

pub use fault_kinds::{FailStopMode, FaultKind, IoErrno, IoOp};
pub use log::{DecisionLog, DecisionRecord};
pub use point::{DecisionPoint, RandomFault};
