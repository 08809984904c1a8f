//! Fault injection on the file system, and the run's decision log: the configuration, the
//! decision stream, the overrides and the ledger.
//!
//! Every nondeterministic choice deja makes on the program's behalf (these fault decisions and
//! the SDK's `Random`/`Choice`) is a decision in one log, taken by [`FaultState::decide`] from
//! a dedicated ChaCha20 stream keyed from the run's seed (another BLAKE3 context than the
//! program's random stream) and overridable by position: see [the crate
//! documentation](crate#decisions). No fault decision is taken when no fault is configured.
//!
//! The fault decisions:
//! - `eio_on_write_ppm` / `enospc_on_write_ppm`: one decision (1 000 000 options, a choice below
//!   the given parts per million strikes) per write-like call to a regular file, EIO first;
//!   `eio_on_fsync_ppm`: one per `fsync`, `fdatasync`, `sync_file_range` (with WRITE) and
//!   `syncfs`. `sync` never fails. A selected fault makes the call fail with `-EIO`/`-ENOSPC`
//!   before it changes anything (a failed fsync makes nothing durable and is not a durable
//!   write; the pending writes stay pending, so a retry can succeed).
//! - crash images: see [`crate::fs`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::rng::RandomStream;

/// BLAKE3 key-derivation context of the fault stream.
pub(crate) const FAULT_CONTEXT: &str = "deja 2025 fault decision stream v1";

/// Which faults to inject. `Default` injects none.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultConfig {
    /// End the run with [`SyscallOutcome::Crash`](crate::SyscallOutcome::Crash) right after
    /// the k-th durable write (counted from 1) took effect.
    pub crash_after_durable_write: Option<u64>,
    /// Crash images may keep a sector prefix of each file's first pending write.
    pub torn_writes: bool,
    /// Crash images may keep any subset of each file's pending writes.
    pub reordered_writes: bool,
    /// Probability (parts per million) that a write to a regular file fails with EIO.
    pub eio_on_write_ppm: u32,
    /// Probability (parts per million) that an fsync-like call fails with EIO.
    pub eio_on_fsync_ppm: u32,
    /// Probability (parts per million) that a write to a regular file fails with ENOSPC.
    pub enospc_on_write_ppm: u32,
}

/// What kind of fault a [`FaultRecord`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    /// The node crashed after a durable write.
    Crash,
    /// A crash lost unsynced data or directory changes of a path.
    LostUnsynced,
    /// A crash kept a sector prefix of a file's first pending write.
    TornWrite,
    /// A crash kept a subset of a file's pending writes.
    ReorderedWrites,
    /// A write or fsync failed with EIO.
    Eio,
    /// A write failed with ENOSPC.
    Enospc,
}

/// One entry of the fault ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultRecord {
    /// The kind.
    pub kind: FaultKind,
    /// Where: `durable write 3`, `write #17 to /data/wal`, `fsync #2 of /data`, `crash image: /data/wal`.
    pub point: String,
    /// Index of the syscall it happened in (for crash images: the number of syscalls served
    /// when the image was taken).
    pub syscall_index: u64,
    /// The path it concerns, if any (what the next incarnation may observe).
    pub path: Option<String>,
    /// The decision chose to deviate from the fault-free behaviour.
    pub selected: bool,
    /// It changed state (a call failed, an image differs from the fault-free one).
    pub applied: bool,
    /// The program saw it: an errno returned to it, or (crash images) the next incarnation
    /// opened, stat'ed or listed the path.
    pub observed: bool,
}

/// One entry of the decision log (see [the crate documentation](crate#decisions)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecisionRecord {
    /// Position in the run's decision log, 0-based (the key of an override).
    pub index: u64,
    /// Where: `eio on write #4 to /data/wal`, `torn /data/wal`, `reorder /data/wal op 2/3`,
    /// `sdk random #3`, `sdk choice #5 of 3` (SDK requests are numbered per kind from 1).
    pub point: String,
    /// How many options there were; `0` means any `u64` (the full 64-bit range).
    pub options: u64,
    /// The choice: `0..options`, or any `u64` when `options == 0`.
    pub choice: u64,
    /// The choice came from an override, not from the decision stream.
    pub overridden: bool,
}

/// A decision stream with its overrides and log: how every decision of a node kernel (in
/// [`FaultState`]) and of a cluster's network and fault schedule is taken.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecisionLog {
    pub(crate) stream: RandomStream,
    /// Choices by decision index (see [`DecisionLog::decide`]).
    pub(crate) overrides: BTreeMap<u64, u64>,
    pub(crate) decisions: Vec<DecisionRecord>,
}

impl DecisionLog {
    /// A log whose stream is keyed by the BLAKE3 key-derivation `context` and `seed`.
    pub fn new(context: &str, seed: u64) -> Self {
        DecisionLog {
            stream: RandomStream::with_context(context, seed),
            overrides: BTreeMap::new(),
            decisions: Vec::new(),
        }
    }

    /// Takes decision number [`len()`](DecisionLog::len) among `options` choices (`0`: any
    /// `u64`), recorded at `point`: the natural choice is always drawn, then replaced by the
    /// override for this index if there is one.
    pub fn decide(&mut self, point: String, options: u64) -> u64 {
        let natural = self.natural(options);
        let index = self.decisions.len() as u64;
        let (choice, overridden) = match self.overrides.get(&index) {
            Some(&c) if options == 0 => (c, true),
            Some(&c) => (c % options, true),
            None => (natural, false),
        };
        self.decisions.push(DecisionRecord { index, point, options, choice, overridden });
        choice
    }

    /// The stream's choice among `options` (`0`: any `u64`): unbiased (Lemire's
    /// multiply-and-reject).
    fn natural(&mut self, options: u64) -> u64 {
        let mut x = self.next_u64();
        if options == 0 {
            return x;
        }
        let n = u128::from(options);
        let mut m = u128::from(x) * n;
        if (m as u64) < options {
            let reject_below = options.wrapping_neg() % options;
            while (m as u64) < reject_below {
                x = self.next_u64();
                m = u128::from(x) * n;
            }
        }
        (m >> 64) as u64
    }

    fn next_u64(&mut self) -> u64 {
        let mut b = [0u8; 8];
        self.stream.fill(&mut b);
        u64::from_le_bytes(b)
    }

    /// Steers decisions by index.
    pub fn set_overrides(&mut self, overrides: BTreeMap<u64, u64>) {
        self.overrides = overrides;
    }

    /// The overrides.
    pub fn overrides(&self) -> &BTreeMap<u64, u64> {
        &self.overrides
    }

    /// Every decision taken, in order.
    pub fn records(&self) -> &[DecisionRecord] {
        &self.decisions
    }

    /// How many decisions were taken.
    pub fn len(&self) -> u64 {
        self.decisions.len() as u64
    }

    /// True if none was taken.
    pub fn is_empty(&self) -> bool {
        self.decisions.is_empty()
    }
}

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
}

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
        }
    }

    /// Takes a decision (see [`DecisionLog::decide`]).
    pub fn decide(&mut self, point: String, options: u64) -> u64 {
        self.log.decide(point, options)
    }

    /// The SDK's `Random`: a decision over the full 64-bit range.
    pub fn sdk_random(&mut self) -> u64 {
        self.sdk_randoms = self.sdk_randoms.saturating_add(1);
        let point = format!("sdk random #{}", self.sdk_randoms);
        self.decide(point, 0)
    }

    /// The SDK's `Choice(n)` (`n > 0`): a decision among `n` options.
    pub fn sdk_choice(&mut self, n: u64) -> u64 {
        self.sdk_choices = self.sdk_choices.saturating_add(1);
        let point = format!("sdk choice #{} of {n}", self.sdk_choices);
        self.decide(point, n)
    }

    /// Decides whether a fault of probability `ppm` (parts per million) strikes at `point`.
    pub fn strike(&mut self, ppm: u32, point: String) -> bool {
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

    pub fn validate(&self) -> Result<(), crate::persist::RestoreError> {
        use crate::persist::ensure;
        self.log.stream.validate()?;
        for (i, d) in self.log.decisions.iter().enumerate() {
            ensure(d.index == i as u64, || format!("decision {i} has index {}", d.index))?;
            ensure(d.options == 0 || d.choice < d.options, || {
                format!("decision {:?} chose {} of {}", d.point, d.choice, d.options)
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
