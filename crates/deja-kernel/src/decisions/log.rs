//! The decision log ([`DecisionLog`]): a decision stream keyed from the seed, the overrides
//! that steer decisions by index, the record of every decision taken, and natural choices drawn
//! by meaning for a cluster's own log.

use crate::prelude::*;
use alloc::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::DecisionPoint;
use crate::decisions::rng::RandomStream;

/// One entry of the decision log (see [the crate documentation](crate#decisions)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecisionRecord {
    /// Position in the run's decision log, 0-based (the key of an override).
    pub index: u64,
    /// Where: `eio on write #4 to /data/wal`, `crash state: keep write of 4096 bytes at 0 to
    /// /data/wal`, `sdk random #3`, `sdk choice #5 of 3` (SDK requests are numbered per kind
    /// from 1).
    pub point: DecisionPoint,
    /// How many options there were; `0` means any `u64` (the full 64-bit range).
    pub options: u64,
    /// The choice: `0..options`, or any `u64` when `options == 0`.
    pub choice: u64,
    /// The choice came from an override, not from the decision stream.
    pub overridden: bool,
    /// Virtual time (ns) when it was taken.
    #[serde(default)]
    pub time_ns: u64,
}

/// A choice among `options` (`0`: any `u64`) from the words `next` gives: unbiased (Lemire's
/// multiply-and-reject).
fn bounded(options: u64, mut next: impl FnMut() -> u64) -> u64 {
    let mut x = next();
    if options == 0 {
        return x;
    }
    let n = u128::from(options);
    let mut m = u128::from(x) * n;
    if (m as u64) < options {
        let reject_below = options.wrapping_neg() % options;
        while (m as u64) < reject_below {
            x = next();
            m = u128::from(x) * n;
        }
    }
    (m >> 64) as u64
}

/// A decision stream with its overrides and log: how every decision of a node kernel (in
/// [`FaultState`](crate::faults::FaultState)) and of a cluster's network and fault schedule is taken.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecisionLog {
    pub(crate) stream: RandomStream,
    /// Choices by decision index (see [`DecisionLog::decide`]).
    pub(crate) overrides: BTreeMap<u64, u64>,
    pub(crate) decisions: Vec<DecisionRecord>,
    /// The virtual time decisions are taken at now (see [`DecisionLog::set_time`]).
    #[serde(default)]
    pub(crate) time_ns: u64,
    /// When set, the natural choices of [`DecisionLog::decide_keyed`] are a function of this
    /// key and the decision's meaning instead of the stream's next bytes (see
    /// [`DecisionLog::key_by_meaning`]). Not persisted, so a node kernel's snapshot format is
    /// unchanged: only a cluster's own log is ever keyed, and a cluster's state lives in memory
    /// (its forks are clones), never in a file.
    #[serde(skip)]
    pub(crate) meaning_key: Option<[u8; 32]>,
}

impl DecisionLog {
    /// A log whose stream is keyed by the BLAKE3 key-derivation `context` and `seed`.
    pub fn new(context: &str, seed: u64) -> Self {
        DecisionLog {
            stream: RandomStream::with_context(context, seed),
            overrides: BTreeMap::new(),
            decisions: Vec::new(),
            time_ns: 0,
            meaning_key: None,
        }
    }

    /// From now on, [`decide_keyed`](DecisionLog::decide_keyed) draws each natural choice from
    /// the BLAKE3 keyed hash (key derived from `context` and `seed`) of the decision's point and
    /// meaning, so it no longer depends on how many decisions came before it. A run that takes
    /// one decision more elsewhere keeps every keyed choice it shares with the run that did
    /// not. Overrides still apply by index.
    pub fn key_by_meaning(&mut self, context: &str, seed: u64) {
        self.meaning_key = Some(blake3::derive_key(context, &seed.to_le_bytes()));
    }

    /// True if keyed decisions are drawn by meaning.
    pub fn keyed_by_meaning(&self) -> bool {
        self.meaning_key.is_some()
    }

    /// Sets the virtual time the next decisions are recorded at.
    pub fn set_time(&mut self, ns: u64) {
        self.time_ns = ns;
    }

    /// Draws every decision from now on that is not overridden from `seed`'s stream (a
    /// steered child keeps its parent's course through overrides, and draws the rest afresh).
    pub fn reseed(&mut self, context: &str, seed: u64) {
        self.stream.reseed_with_context(context, seed);
    }

    /// Takes decision number [`len()`](DecisionLog::len) among `options` choices (`0`: any
    /// `u64`), recorded at `point`: the natural choice is always drawn, then replaced by the
    /// override for this index if there is one.
    pub fn decide(&mut self, point: DecisionPoint, options: u64) -> u64 {
        let natural = bounded(options, || self.next_u64());
        self.take(point, options, natural)
    }

    /// Like [`decide`](DecisionLog::decide), but once the log is [keyed by
    /// meaning](DecisionLog::key_by_meaning) the natural choice is a function of `point` and
    /// `meaning` alone (the stream is not touched). Before that it is `decide`.
    pub fn decide_keyed(&mut self, point: DecisionPoint, options: u64, meaning: &[u8]) -> u64 {
        let Some(key) = self.meaning_key else { return self.decide(point, options) };
        let words = point.to_string();
        let mut hasher = blake3::Hasher::new_keyed(&key);
        hasher.update(&(words.len() as u64).to_le_bytes());
        hasher.update(words.as_bytes());
        hasher.update(meaning);
        let mut xof = hasher.finalize_xof();
        let natural = bounded(options, || {
            let mut b = [0u8; 8];
            xof.fill(&mut b);
            u64::from_le_bytes(b)
        });
        self.take(point, options, natural)
    }

    /// Takes decision number [`len()`](DecisionLog::len) with `given` as its natural choice
    /// (reduced to the options), unless overridden: a choice fixed by meaning, as a test
    /// template's choices are when a bug's faults replay as a schedule. The stream is not
    /// touched.
    pub fn decide_given(&mut self, point: DecisionPoint, options: u64, given: u64) -> u64 {
        let natural = if options == 0 { given } else { given % options };
        self.take(point, options, natural)
    }

    /// Records decision number [`len()`](DecisionLog::len): `natural`, unless overridden.
    fn take(&mut self, point: DecisionPoint, options: u64, natural: u64) -> u64 {
        let index = self.decisions.len() as u64;
        let (choice, overridden) = match self.overrides.get(&index) {
            Some(&c) if options == 0 => (c, true),
            Some(&c) => (c % options, true),
            None => (natural, false),
        };
        self.decisions.push(DecisionRecord { index, point, options, choice, overridden, time_ns: self.time_ns });
        choice
    }

    fn next_u64(&mut self) -> u64 {
        let mut b = [0u8; 8];
        self.stream.fill(&mut b);
        u64::from_le_bytes(b)
    }

    /// Draws what [`decide`](DecisionLog::decide) draws for a decision among `options`, and
    /// records nothing (the stream of a log that is not keyed by meaning).
    pub(crate) fn redraw(&mut self, options: u64) {
        if self.meaning_key.is_none() {
            bounded(options, || self.next_u64());
        }
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
