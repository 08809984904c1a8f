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

use snafu::Snafu;

pub mod capsule;
pub mod certificate;
pub mod cluster;
pub mod judge;
pub mod search;
pub mod verdict;

pub use capsule::{Capsule, Trigger};
pub use certificate::{Certificate, CheckRecord, CheckStatus};
pub use judge::{check, CheckInput, Judgement, Program};
pub use verdict::Verdict;

/// Errors that stop a check before it can reach a verdict of its own (the CLI maps them to
/// `EVIDENCE_INCOMPLETE` where a verdict is due).
#[derive(Debug, Snafu)]
#[snafu(visibility(pub(crate)))]
pub enum JudgeError {
    /// A capsule or certificate could not be read.
    #[snafu(display("{path}: {source}"))]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A capsule or certificate could not be written.
    #[snafu(display("{path}: {source}"))]
    Write {
        /// The file.
        path: String,
        /// Why.
        source: deja_format::FormatError,
    },
    /// A capsule's content no longer matches its id.
    #[snafu(display(
        "{path}: the id check failed: the capsule was altered (its content no longer matches its id {id})"
    ))]
    CapsuleAltered {
        /// The capsule.
        path: String,
        /// The id it carries.
        id: String,
    },
    /// A check record of a certificate does not chain to the one before it.
    #[snafu(display("the chain check failed: check {number} ({name:?}) was altered: the hash chain breaks there"))]
    ChainBroken {
        /// The check's place in the certificate, from 1.
        number: usize,
        /// Its name.
        name: String,
    },
    /// The certificate's final hash does not cover its verdict, exit code and timeline.
    #[snafu(display("the chain check failed: the verdict, exit code or timeline was altered"))]
    SummaryAltered,
    /// A pass that does not have every check executed and passed.
    #[snafu(display("the verdict check failed: a pass without every check executed and passed is not a pass"))]
    UnearnedPass,
    /// A capsule or certificate failed its json, schema or fields check.
    #[snafu(transparent)]
    Artifact {
        /// Why.
        source: deja_format::json::ArtifactError,
    },
}

/// Why one run of a check could not be made: the step it belongs to is then incomplete.
#[derive(Debug, Snafu)]
pub enum RunFailure {
    /// The VM could not boot or run the program.
    #[snafu(transparent)]
    Run {
        /// Why.
        source: deja_vmm::RunError,
    },
    /// The explorer could not run the input.
    #[snafu(transparent)]
    Explore {
        /// Why.
        source: deja_explore::ExploreError,
    },
    /// The run could not be placed on its host core.
    #[snafu(transparent)]
    Core {
        /// Why.
        source: deja_vmm::VmError,
    },
}
