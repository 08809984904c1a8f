//! The record of the run: what it did, kept for the report and the digest.
//!
//! Owns [`RunRecord`] (this file: the trace, output the shell has not taken yet, the last lines
//! of output, and how often each syscall was served and left unsupported), the trace and its
//! digest (`trace.rs`), each life's last lines of output (`tail.rs`) and the assertion oracle
//! of the deja protocol (`oracle.rs`), with the Antithesis SDKs' messages read as its requests
//! (`antithesis.rs`), and the paths the program looked for and did not get (`not_found.rs`). Uses [`crate::mm`] (the memory digest and the bytes a
//! syscall moved) and [`crate::persist`].
//!
//! [`RunRecord`] is a saved part of the kernel state (see [`persist`](crate::persist)); its
//! fields are its encoding, in declaration order.

use crate::prelude::*;
use alloc::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::persist::{ensure, Persist, RestoreError};
use trace::Tracer;

pub mod antithesis;
pub mod not_found;
pub(crate) mod oracle;
pub(crate) mod tail;
pub mod trace;
pub mod voidstar;
use crate::Stream;

/// What the run has done so far, as the report and the trace digest tell it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RunRecord {
    /// The digest chain, entry hashes and recorded entries.
    pub(crate) tracer: Tracer,
    /// Output written to stdout and stderr, in order, not yet taken by the shell.
    pub(crate) output: Vec<(Stream, Vec<u8>)>,
    /// Syscalls served, by name.
    pub(crate) counts: BTreeMap<String, u64>,
    /// Syscalls answered `-ENOSYS`, by name.
    pub(crate) unsupported: BTreeMap<String, u64>,
    /// Calls served without all Linux would do (signal-driven I/O's `SIGIO`), by what is
    /// missing.
    pub(crate) unmodelled: BTreeMap<String, u64>,
    /// The last lines of output (taken or not), for the report.
    pub(crate) tail: tail::OutputTail,
}

impl RunRecord {
    /// An empty record; `record_trace` keeps every trace entry (not only the digest).
    pub(crate) fn new(record_trace: bool) -> Self {
        RunRecord {
            tracer: Tracer::new(record_trace),
            output: Vec::new(),
            counts: BTreeMap::new(),
            unsupported: BTreeMap::new(),
            unmodelled: BTreeMap::new(),
            tail: tail::OutputTail::default(),
        }
    }

    /// The number of syscalls in the trace.
    pub(crate) fn syscalls(&self) -> u64 {
        self.tracer.syscalls()
    }
}

impl Persist for RunRecord {
    /// Nothing: the checks need no other part.
    type Context = ();

    /// Checks the invariants of a restored record: the trace's own, counts adding up to the
    /// syscalls of the trace, and no more unsupported calls of a name than calls.
    fn validate(&self, _: &()) -> Result<(), RestoreError> {
        self.tracer.validate()?;
        self.tail.validate()?;
        let n = self.tracer.syscalls();
        let total = self.counts.values().try_fold(0u64, |a, c| a.checked_add(*c));
        ensure(total == Some(n), || format!("syscall counts do not add up to {n}"))?;
        for (name, c) in &self.unsupported {
            let served = self.counts.get(name).copied().unwrap_or(0);
            ensure(*c <= served, || format!("{c} unsupported {name} calls but {served} calls"))?;
        }
        Ok(())
    }
}
