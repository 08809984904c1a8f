//! `deja check`: judge a candidate patch against a frozen failure.
//!
//! 1. **Hunt on the base.** The failure comes from a capsule, or is found by a bounded crash
//!    sweep of the base. It is confirmed by a replay, then frozen as a [`Capsule`]: the base's
//!    BLAKE3, the workload, the fault plan, the failure's signature and its *trigger* — the
//!    event it follows ("the second durable write after request E1"), so that it can be
//!    replayed against a different binary by meaning rather than by position.
//! 2. **No-fault control.** The base runs the workload without faults and must hold; if it fails,
//!    the failure is not fault-induced.
//! 3. **Replay on the candidate**, mapped by meaning, in three fresh worlds that must agree.
//! 4. **Sweep** every durable write of the candidate: crash right after it, restart, let the
//!    client deliver again, check the program's assertions.
//! 5. **Verdict**: `FIXED_FOR_THIS_CAPSULE` (exit 0), `STILL_REPRODUCES` or `NEW_FAILURE`
//!    (exit 1), `EVIDENCE_INCOMPLETE` or `NOT_FAULT_INDUCED` (exit 2), with a timeline.
//!
//! Every check that ran — and every check that did not — is listed in a [`Certificate`], chained
//! by BLAKE3, so a verdict cannot be edited without the chain breaking. Missing evidence is never
//! a pass: a verdict of FIXED needs every check executed and passed.

pub mod capsule;
pub mod certificate;
pub mod cluster;
pub mod judge;
pub mod search;

pub use capsule::{Capsule, Trigger};
pub use certificate::{Certificate, CheckRecord, CheckStatus};
pub use judge::{check, CheckInput, Judgement, Program, Verdict};

/// Errors that stop a check before it can reach a verdict of its own (the CLI maps them to
/// `EVIDENCE_INCOMPLETE` where a verdict is due).
#[derive(Debug, thiserror::Error)]
pub enum JudgeError {
    /// A file could not be read or written.
    #[error("{path}: {message}")]
    File {
        /// The file.
        path: String,
        /// What failed.
        message: String,
    },
    /// A capsule or certificate is damaged or was altered.
    #[error("{0}")]
    Tampered(String),
    /// A capsule or certificate failed its json, schema or fields check.
    #[error(transparent)]
    Artifact(#[from] deja_format::json::ArtifactError),
}
