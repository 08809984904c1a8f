//! The process: its address space (the VMAs, the program break, where the image starts and
//! where its coverage counters are) and its identity and attributes (the current thread's FS
//! and GS bases, signals, rlimits, umask, the tid address, the robust list, the name, how it
//! ended), with the state of the page fault being retried.
//!
//! [`Process`] is a saved part of the kernel state (see [`persist`](crate::persist)); its
//! fields are its encoding, in declaration order.

use crate::prelude::*;
use serde::{Deserialize, Serialize};

use crate::host::coverage::CoverageRegion;
use crate::host::hostchan::HostChannels;
use crate::mm::mappings::Mappings;
use crate::mm::user_layout::USER_START;
use crate::persist::{ensure, Persist, RestoreError};
use crate::signal::Signals;
use crate::{Entry, ExitStatus};

/// How often the same page fault may be retried at the same instruction before the kernel
/// gives up (the shell did not map what the kernel populated).
pub(crate) const MAX_FAULT_REPEATS: u32 = 4;

/// The address space and the identity of the one process a kernel runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Process {
    /// The VMAs and the commit capacity.
    pub(crate) mappings: Mappings,
    /// The first address of the heap (the page after the highest loaded segment).
    pub(crate) brk_start: u64,
    /// The current program break.
    pub(crate) brk_cur: u64,
    /// The image asks for an executable stack (`PT_GNU_STACK` with `PF_X`).
    pub(crate) exec_stack: bool,
    /// Where the program started.
    pub(crate) entry: Entry,
    /// How the program ended, once it has.
    #[serde(with = "crate::persist::exit_status")]
    pub(crate) exit: Option<ExitStatus>,
    /// The current thread's FS base (`arch_prctl`).
    pub(crate) fs_base: u64,
    /// The current thread's GS base (`arch_prctl`).
    pub(crate) gs_base: u64,
    /// Signal dispositions, the current thread's mask, pending signals.
    pub(crate) signals: Signals,
    /// Soft and hard limit of each resource, by `RLIMIT_*` number.
    pub(crate) rlimits: [(u64, u64); 16],
    /// The file mode creation mask.
    pub(crate) umask: u32,
    /// The current thread's `clear_child_tid` address (`set_tid_address`).
    pub(crate) clear_child_tid: u64,
    /// The current thread's robust list head and length (recorded only).
    pub(crate) robust_list: (u64, u64),
    /// The program's name (`prctl(PR_SET_NAME)`, `/proc/self/comm`), NUL-padded.
    pub(crate) comm: [u8; 16],
    /// The last page fault served (instruction, address), to notice a repeating fault.
    pub(crate) last_fault: Option<(u64, u64)>,
    /// How often [`Process::last_fault`] repeated (at most [`MAX_FAULT_REPEATS`]).
    pub(crate) fault_repeats: u32,
    /// Where the image's coverage counters are, if it has any.
    pub(crate) coverage: Option<CoverageRegion>,
    /// The code sites rewritten to traps, and what rewriting did.
    pub(crate) host: HostChannels,
    /// The vDSO, when the program has one.
    pub(crate) vdso: Option<crate::time::vdso::VdsoState>,
    /// How many CPUs the program sees (1 to [`crate::MAX_CPUS`]).
    #[serde(default = "one_cpu")]
    pub(crate) cpus: u32,
    /// The interval timer (`ITIMER_REAL`): its deadline in virtual ns and its interval.
    #[serde(default)]
    pub(crate) itimer_real: Option<(u64, u64)>,
}

fn one_cpu() -> u32 {
    1
}

impl Persist for Process {
    /// Nothing: the checks need no other part.
    type Context = ();

    /// Checks the invariants of a restored process: sorted, non-overlapping VMAs within the
    /// commit capacity, a break at or above its start, the fault-repeat bound, pending signals
    /// that are queued as they can be, and a coverage region inside the user half.
    fn validate(&self, _: &()) -> Result<(), RestoreError> {
        self.mappings.validate()?;
        ensure(USER_START <= self.brk_start && self.brk_start <= self.brk_cur, || {
            format!("break {:#x} below its start {:#x}", self.brk_cur, self.brk_start)
        })?;
        ensure(self.fault_repeats <= MAX_FAULT_REPEATS, || format!("{} fault repeats", self.fault_repeats))?;
        self.host.validate()?;
        ensure((1..=crate::MAX_CPUS).contains(&self.cpus), || format!("{} CPUs", self.cpus))?;
        self.signals.pending.validate("the process")?;
        if let Some(v) = &self.vdso {
            v.validate()?;
        }
        match &self.coverage {
            Some(c) => c.validate(),
            None => Ok(()),
        }
    }
}
