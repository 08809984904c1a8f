//! What the scheduler decides over: the threads and the virtual clock.
//!
//! [`Sched`] is a saved part of the kernel state (see [`persist`](crate::persist)); its fields
//! are its encoding, in declaration order.

use serde::{Deserialize, Serialize};

use crate::persist::{Persist, RestoreError};
use crate::task::threads::Threads;
use crate::time::clock::Clock;

/// The threads of the process and the clock they run by.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Sched {
    /// Every live thread, the current one, blocked calls and wakeups (see [`crate::task::threads`]).
    pub(crate) threads: Threads,
    /// The virtual clock.
    pub(crate) clock: Clock,
}

impl Persist for Sched {
    /// Whether the program has ended.
    type Context = bool;

    /// Checks the invariants of restored threads; `exited` says the program has ended (then
    /// the current thread may be blocked or gone).
    fn validate(&self, exited: &bool) -> Result<(), RestoreError> {
        self.threads.validate(*exited || self.threads.idle)
    }
}
