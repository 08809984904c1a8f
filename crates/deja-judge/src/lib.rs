//! `deja check`: judge a candidate patch against a frozen failure.
//!
//! One pipeline ([`pipeline::judge`]) judges every kind of subject: it runs the steps, weighs
//! every run, records every step in a [`Certificate`] and decides the [`Verdict`]. A subject
//! ([`pipeline::Subject`]) runs itself, base or candidate, under the failure's faults, a world,
//! a shifted schedule or a crash point, and tells what it saw; it decides nothing. There are
//! two: a program ([`judge`]: the hunt or a capsule, the sweep of every crash point with its
//! states and an error on each file operation, over [`search`]) and a cluster bug ([`cluster`]:
//! the bug minimized, its faults by meaning, other worlds, the schedule shifted, each node
//! crashed at its durable operations). The steps, in order:
//!
//! 1. **The failure on the base**: a capsule given, a bug file frozen, a bounded hunt on the
//!    base (frozen as a [`Capsule`]: the base's BLAKE3, the workload, the fault plan, the
//!    failure's signature and its *trigger*, the event it follows, so that it can be replayed
//!    against a different binary by meaning rather than by position), or a cluster bug as
//!    found; then its smallest form (a cluster bug), reproduced by meaning on the base.
//! 2. **No-fault control**: the base must hold without faults, else the failure is not
//!    fault-induced.
//! 3. **The candidate**: without faults, then under the failure by meaning in several worlds,
//!    under the schedule shifted (a cluster), and at each of its crash points.
//! 4. **Verdict**: `FIXED_FOR_THIS_CAPSULE` (exit 0), `STILL_REPRODUCES` or `NEW_FAILURE`
//!    (exit 1), `EVIDENCE_INCOMPLETE` or `NOT_FAULT_INDUCED` (exit 3), with a timeline.
//!
//! Every check that ran — and every check that did not — is listed in the certificate, chained
//! by BLAKE3, so a verdict cannot be edited without the chain breaking. Missing evidence is never
//! a pass: a verdict of FIXED needs every check executed and passed.
//!
//! Every run of a check boots under the run settings the `deja` command was given (a program's
//! [`CheckInput::settings`], a cluster's `ClusterConfig::settings`), and its capsule and
//! certificate record the host's CPU fingerprint under those settings.

use snafu::Snafu;

pub mod capsule;
pub mod certificate;
pub mod cluster;
pub mod judge;
pub mod pipeline;
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

/// The host's CPU fingerprint under `settings`, which capsules and certificates record (`None`
/// when the host cannot be measured).
fn fingerprint(settings: &deja_vmm::Settings) -> Option<deja_vmm::Fingerprint> {
    settings.host().ok().map(|h| h.fingerprint.clone())
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
