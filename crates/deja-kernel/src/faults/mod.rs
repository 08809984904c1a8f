//! Fault injection on the file system: the configuration, the fault state with its decisions
//! and the ledger, the fail-stop rule and the crash points.
//!
//! Owns [`FaultState`] (a saved part), [`FaultConfig`] and what it places, the ledger's
//! records, the fail-stop rule (`fail_stop.rs`) and the crash-point enumeration
//! (`crash_points.rs`). Uses [`crate::decisions`] (the decision log its decisions are taken
//! through, the decision points and the words of faults), [`crate::fs`] (the crash models) and
//! [`crate::persist`].
//!
//! Every nondeterministic choice deja makes on the program's behalf (these fault decisions and
//! the SDK's `Random`/`Choice`) is a decision in one log, taken by [`FaultState::decide`] from
//! a dedicated ChaCha20 stream keyed from the run's seed (another BLAKE3 context than the
//! program's random stream) and overridable by position: see [the crate
//! documentation](crate#decisions). No fault decision is taken when no fault is configured.
//!
//! # The I/O error model
//!
//! An operation on a file can fail in two ways, both recorded in the ledger by meaning
//! (`eio on write #4 to /data/wal`: the 4th write to that path):
//! - **placed errors** ([`ErrorRule`]): the `nth` `write`, `fsync`, `truncate`, `fallocate`,
//!   `create`, `rename` or `read` (of a byte range) on a path fails with EIO or ENOSPC. They
//!   take no decision: the rule is the fault, so it replays by meaning and minimizes as one
//!   element.
//! - **rates**: `eio_on_write_ppm` / `enospc_on_write_ppm`: one decision (1 000 000 options, a
//!   choice below the given parts per million strikes) per write to a regular file, EIO first;
//!   `eio_on_fsync_ppm`: one per `fsync`, `fdatasync`, `sync_file_range` (with WRITE) and
//!   `syncfs`. `sync` never fails.
//!
//! A failed call changes nothing before it fails, with one exception that is Linux's: a failed
//! sync **drops** the pending operations it would have made durable (the dirty pages are
//! marked clean although they never reached the disk), so a retried fsync returns 0 while the
//! data is gone from the durable layer ("fsyncgate", Rebello et al., ATC '20). The program still
//! reads what it wrote until a crash.
//!
//! Crash points, crash states and crash images: see [`crate::fs`].
//!
//! # Layout
//!
//! This module holds the kernel's fault state ([`FaultState`]) and its checks when restored;
//! [`config`] holds which faults to inject ([`FaultConfig`], placed errors, kills), [`crash`]
//! the crashes placed by meaning and the crash states an image keeps, [`ledger`] the records a
//! life's faults leave for its report, [`fail_stop`] the fail-stop rule and [`crash_points`]
//! the crash points every caller enumerates. The decision log every decision is taken through
//! is [`DecisionLog`](crate::decisions::DecisionLog), in [`crate::decisions`].

use crate::prelude::*;
use alloc::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::decisions::DecisionLog;
pub use crate::decisions::{DecisionPoint, FaultKind, IoErrno, IoOp, RandomFault};
use crate::persist::{ensure, Persist, RestoreError};

mod config;
mod crash;
pub mod crash_points;
pub(crate) mod fail_stop;
mod ledger;

pub use config::{under, ErrorRule, FaultConfig, ProcessKill};
pub use crash::{CrashAt, CrashState, KeptOps, OpCrash, When};
pub use ledger::{DurableOp, FailedSync, FaultRecord, IoCount};

/// BLAKE3 key-derivation context of the fault stream.
pub(crate) const FAULT_CONTEXT: &str = "deja 2025 fault decision stream v1";

/// The kernel's fault state (saved with the kernel).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct FaultState {
    pub config: FaultConfig,
    pub log: DecisionLog,
    pub ledger: Vec<FaultRecord>,
    /// The previous incarnation's records (`observed` flips here).
    pub previous: Vec<FaultRecord>,
    pub durable_writes: u64,
    pub file_writes: u64,
    pub syncs: u64,
    /// SDK `Random` requests served.
    pub sdk_randoms: u64,
    /// SDK `Choice` requests served.
    pub sdk_choices: u64,
    /// The configured crash point was reached in the current syscall.
    pub crash_due: bool,
    /// Where the crash happens, in words: `before durable write 4`, `at exit`.
    #[serde(default)]
    pub crash_point: String,
    /// Operations performed, by `op path` (for error rules and the explorer's menu).
    #[serde(default)]
    pub op_counts: BTreeMap<(IoOp, String), u64>,
    /// A fault was injected in this life, or it is a life after a crash: syscall outcomes are
    /// being recorded for the explorer.
    #[serde(default)]
    pub faulted: bool,
    /// (syscall number, errno or 0) of the syscalls since `faulted`, at most
    /// [`MAX_AFTER_FAULT`].
    #[serde(default)]
    pub after_fault: Vec<(u64, u64)>,
    /// The crash state the last crash image took.
    #[serde(default)]
    pub last_crash_state: Option<CrashAt>,
    /// The failed syncs of files in this life, at most [`MAX_DURABLE_LOG`].
    #[serde(default)]
    pub failed_syncs: Vec<FailedSync>,
    /// What the placed error that struck last says a failed sync wrote back ([`ErrorRule::keep`]).
    #[serde(default)]
    pub struck_keep: Option<Vec<u32>>,
    /// Durable operations made so far in this life, by path.
    #[serde(default)]
    pub durable_ops: BTreeMap<String, u64>,
    /// The durable operations of this life, in order, at most [`MAX_DURABLE_LOG`].
    #[serde(default)]
    pub durable_log: Vec<DurableOp>,
    /// What the crash armed now keeps, when it was placed by meaning with a named state.
    #[serde(default)]
    pub crash_keep: Option<KeptOps>,
    /// The crash placed by meaning that struck, if one did.
    #[serde(default)]
    pub crash_struck: Option<OpCrash>,
    /// Path prefixes the program excluded from storage faults (its own harness files).
    #[serde(default)]
    pub excluded: Vec<String>,
    /// The program declared that a stop after an injected fault is a failure, not a fail-stop.
    #[serde(default)]
    pub fail_stop_is_failure: bool,
    /// The life ended with a non-zero status after an injected I/O error, and was not turned
    /// into a restart (see [`FailStop`](fail_stop::FailStop)).
    #[serde(default)]
    pub stopped_after_fault: Option<String>,
    /// The crash armed now is a fail-stop's restart: its image keeps everything pending.
    #[serde(default)]
    pub fail_stopped: bool,
    /// Commits after the first I/O error injected into this life: durable operations on paths
    /// the faults may strike, each after a successful write to such a path since the error or
    /// the previous one (the `auto` fail-stop rule counts them).
    #[serde(default)]
    pub durable_after_error: u64,
    /// A write to a path the faults may strike succeeded after the first injected error, and no
    /// durable operation has followed it yet.
    #[serde(default)]
    pub wrote_after_error: bool,
    /// The life ended non-zero after an injected I/O error, and the fail-stop rule said it
    /// failed: why, in words.
    #[serde(default)]
    pub not_fail_stop: Option<String>,
    /// Durable operations made by processes of each name (but pid 1), in the life.
    #[serde(default)]
    pub process_ops: BTreeMap<String, u64>,
    /// Durable operations made by each process (but pid 1), in the life.
    #[serde(default)]
    pub pid_ops: BTreeMap<u64, u64>,
    /// A [`ProcessKill`] struck in the syscall being served: the calling process dies of
    /// `SIGKILL` when it returns, with these words.
    #[serde(default)]
    pub kill_due: Option<String>,
}

/// Durable operations a life's report lists, at most.
pub const MAX_DURABLE_LOG: usize = 4096;

/// Lives a run may have before a stop after an injected fault is no longer turned into a crash
/// and a restart: every rate-driven error would otherwise stop and restart the program for
/// ever.
pub const MAX_FAIL_STOP_LIVES: usize = 16;

/// Syscall outcomes recorded after the first fault, at most.
pub const MAX_AFTER_FAULT: usize = 256;

impl FaultState {
    pub fn new(config: FaultConfig, seed: u64) -> Self {
        FaultState {
            config,
            log: DecisionLog::new(FAULT_CONTEXT, seed),
            ledger: Vec::new(),
            previous: Vec::new(),
            durable_writes: 0,
            file_writes: 0,
            syncs: 0,
            sdk_randoms: 0,
            sdk_choices: 0,
            crash_due: false,
            crash_point: String::new(),
            op_counts: BTreeMap::new(),
            faulted: false,
            after_fault: Vec::new(),
            last_crash_state: None,
            failed_syncs: Vec::new(),
            struck_keep: None,
            durable_ops: BTreeMap::new(),
            durable_log: Vec::new(),
            crash_keep: None,
            crash_struck: None,
            excluded: Vec::new(),
            fail_stop_is_failure: false,
            stopped_after_fault: None,
            fail_stopped: false,
            durable_after_error: 0,
            wrote_after_error: false,
            not_fail_stop: None,
            process_ops: BTreeMap::new(),
            pid_ops: BTreeMap::new(),
            kill_due: None,
        }
    }

    /// True when storage faults may strike `path`: the configuration targets it and the
    /// program did not exclude it.
    pub fn faultable(&self, path: &str) -> bool {
        self.config.targets(path) && !self.excluded.iter().any(|p| under(path, p))
    }

    /// Takes a decision (see [`DecisionLog::decide`]).
    pub fn decide(&mut self, point: DecisionPoint, options: u64) -> u64 {
        self.log.decide(point, options)
    }

    /// The SDK's `Random`: a decision over the full 64-bit range.
    pub fn sdk_random(&mut self) -> u64 {
        self.sdk_randoms = self.sdk_randoms.saturating_add(1);
        self.decide(DecisionPoint::SdkRandom { n: self.sdk_randoms }, 0)
    }

    /// The SDK's `Choice(n)` (`n > 0`): a decision among `n` options.
    pub fn sdk_choice(&mut self, n: u64) -> u64 {
        self.sdk_choices = self.sdk_choices.saturating_add(1);
        self.decide(DecisionPoint::SdkChoice { n: self.sdk_choices, options: n }, n)
    }

    /// Decides whether a fault of probability `ppm` (parts per million) strikes at `point`.
    pub fn strike(&mut self, ppm: u32, point: DecisionPoint) -> bool {
        if ppm == 0 {
            return false;
        }
        let roll = self.decide(point, 1_000_000);
        roll < u64::from(ppm)
    }

    /// Flips `observed` on the previous incarnation's records about `path`.
    pub fn observe(&mut self, path: &str) {
        for r in &mut self.previous {
            if r.path.as_deref() == Some(path) {
                r.observed = true;
            }
        }
    }
}

impl Persist for FaultState {
    /// Nothing: the checks need no other part.
    type Context = ();

    /// Checks the invariants of a restored fault state: the decision stream's, decisions
    /// numbered in order with their choices among their options, and no more SDK decisions
    /// than decisions.
    fn validate(&self, _: &()) -> Result<(), RestoreError> {
        self.log.stream.validate()?;
        for (i, d) in self.log.decisions.iter().enumerate() {
            ensure(d.index == i as u64, || format!("decision {i} has index {}", d.index))?;
            ensure(d.options == 0 || d.choice < d.options, || {
                format!("decision {:?} chose {} of {}", d.point.to_string(), d.choice, d.options)
            })?;
        }
        let sdk = self.sdk_randoms.checked_add(self.sdk_choices);
        ensure(sdk.is_some_and(|n| n <= self.log.decisions.len() as u64), || {
            format!(
                "{} sdk randoms and {} sdk choices but {} decisions",
                self.sdk_randoms,
                self.sdk_choices,
                self.log.decisions.len()
            )
        })?;
        Ok(())
    }
}
