//! Fault injection on the file system: the configuration, the decision stream and the ledger.
//!
//! Every fault is a *decision* taken from a dedicated ChaCha20 stream keyed from the run's seed
//! (another BLAKE3 context than the program's random stream, so faults never shift the bytes
//! the program draws). A decision has a number of options and a choice; every decision taken is
//! appended to [`RunReport::decisions`](crate::RunReport::decisions) with its point. Decisions
//! can be replayed ([`Kernel::replay_fault_decisions`](crate::Kernel::replay_fault_decisions)):
//! replayed choices are used first, in order (each reduced modulo its number of options), then
//! the stream continues. No decision is taken when no fault is configured, so a fault-free run
//! draws nothing.
//!
//! The decisions:
//! - `eio_on_write_ppm` / `enospc_on_write_ppm`: one decision (2 options, chosen with the given
//!   probability in parts per million) per write-like call to a regular file, EIO first;
//!   `eio_on_fsync_ppm`: one per `fsync`, `fdatasync`, `sync_file_range` (with WRITE) and
//!   `syncfs`. `sync` never fails. A selected fault makes the call fail with `-EIO`/`-ENOSPC`
//!   before it changes anything (a failed fsync makes nothing durable and is not a durable
//!   write; the pending writes stay pending, so a retry can succeed).
//! - crash images: see [`crate::fs`].

use std::collections::VecDeque;

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

/// One decision taken from the fault stream (or replayed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecisionRecord {
    /// Where: `eio on write #4 to /data/wal`, `torn /data/wal`, `reorder /data/wal op 2`.
    pub point: String,
    /// The choice, `0..options`.
    pub choice: u64,
    /// How many options there were.
    pub options: u64,
}

/// The kernel's fault state (saved with the kernel).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct FaultState {
    pub config: FaultConfig,
    pub stream: RandomStream,
    pub replay: VecDeque<u64>,
    pub decisions: Vec<DecisionRecord>,
    pub ledger: Vec<FaultRecord>,
    /// The previous incarnation's records (`observed` flips here).
    pub previous: Vec<FaultRecord>,
    pub durable_writes: u64,
    pub file_writes: u64,
    pub syncs: u64,
    /// The configured crash point was reached in the current syscall.
    pub crash_due: bool,
}

impl FaultState {
    pub fn new(config: FaultConfig, seed: u64) -> Self {
        FaultState {
            config,
            stream: RandomStream::with_context(FAULT_CONTEXT, seed),
            replay: VecDeque::new(),
            decisions: Vec::new(),
            ledger: Vec::new(),
            previous: Vec::new(),
            durable_writes: 0,
            file_writes: 0,
            syncs: 0,
            crash_due: false,
        }
    }

    /// Takes a decision among `options` (≥ 1) choices, recorded at `point`.
    pub fn decide(&mut self, point: String, options: u64) -> u64 {
        let options = options.max(1);
        let choice = match self.replay.pop_front() {
            Some(c) => c % options,
            None => {
                let mut b = [0u8; 8];
                self.stream.fill(&mut b);
                ((u128::from(u64::from_le_bytes(b)) * u128::from(options)) >> 64) as u64
            }
        };
        self.decisions.push(DecisionRecord { point, choice, options });
        choice
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
        self.stream.validate()?;
        for d in &self.decisions {
            crate::persist::ensure(d.options >= 1 && d.choice < d.options, || {
                format!("decision {:?} chose {} of {}", d.point, d.choice, d.options)
            })?;
        }
        Ok(())
    }
}
