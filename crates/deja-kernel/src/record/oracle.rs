//! The monitor's side of the deja protocol: the assertion oracle, lifecycle records, and the
//! SDK's randomness.
//!
//! A guest linked with the deja SDK talks to the monitor through one reserved syscall,
//! [`DEJA_SYSCALL`](deja_protocol::DEJA_SYSCALL) (see [`deja_protocol`] for the wire format).
//! The kernel answers it in [`sys_deja`](crate::syscalls::sys_deja) and keeps what it learns here:
//!
//! - `Hello` returns [`PROTOCOL_VERSION`](deja_protocol::PROTOCOL_VERSION).
//! - `Catalog(ptr, n)` registers `n` ≤ [`MAX_SITES`]
//!   [`SiteRecord`](deja_protocol::SiteRecord)s (messages and file names truncated to
//!   [`MAX_TEXT`](deja_protocol::MAX_TEXT) bytes, UTF-8 lossy). A later catalog adds sites; an
//!   id already known keeps its first record; a record with an unknown kind is skipped; sites
//!   past a total of [`MAX_SITES`] are dropped. The call is all or nothing: unreadable memory
//!   anywhere (`-EFAULT`) registers none of it.
//! - `Assert(id, cond, details, len)` counts one evaluation of a known site (`cond` must be 0
//!   or 1; details are truncated to [`MAX_DETAILS`](deja_protocol::MAX_DETAILS) bytes). The
//!   first failure and the first satisfaction keep their context (syscall index, virtual time,
//!   node, thread, details).
//! - `SetupComplete(details, len)` records the first call; `Event(name, len, details, len)`
//!   appends up to [`MAX_EVENTS`] events and counts the rest.
//! - `Random` and `Choice(n)` are decisions (see [the crate documentation](crate#decisions)): taken from the seeded
//!   decision stream (not the stream `getrandom` reads, so steering them never shifts the
//!   program's random bytes), logged in [`RunReport::decisions`](crate::RunReport::decisions)
//!   as `sdk random #k` (options 0: any `u64`) and `sdk choice #k of n` (options `n`, an
//!   unbiased index below `n`; `n == 0` is `-EINVAL` and takes no decision), and overridable
//!   by position. Their results are part of the trace like any other return value.
//!
//! Every failed request (`-EINVAL`: another protocol version, an unknown code, bad arguments,
//! an unknown assertion id; `-EFAULT`: unreadable memory) changes no state but
//! [`RunReport::protocol_errors`](crate::RunReport::protocol_errors).
//!
//! The saved form of an [`Oracle`] is its fields in declaration order (postcard); a site's kind
//! is saved as its protocol code.

use crate::prelude::*;
use alloc::collections::BTreeMap;

use deja_protocol::{AssertKind, MAX_SITES};
use serde::{Deserialize, Serialize};

use crate::persist::{ensure, Persist, RestoreError};
use crate::RunReport;

/// Most lifecycle events a run keeps; later ones are counted in
/// [`RunReport::events_dropped`](crate::RunReport::events_dropped).
pub const MAX_EVENTS: usize = 10_000;
/// The node every context names (one program per run).
pub(crate) const NODE: u32 = 0;

/// What one run concluded about an assertion site.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AssertionStatus {
    /// `always`/`always_or_unreachable` held every time; `unreachable` was never reached.
    Passed,
    /// `always`/`always_or_unreachable` failed at least once, or `unreachable` was reached.
    Failed,
    /// `always`, `sometimes` or `reachable` was never evaluated.
    Unreached,
    /// `sometimes` held at least once.
    Satisfied,
    /// `sometimes` was evaluated but never held.
    Unsatisfied,
    /// `reachable` was reached.
    Reached,
}

impl AssertionStatus {
    /// Its name, as serialized (`passed`, `failed`, `unreached`, `satisfied`, `unsatisfied`,
    /// `reached`).
    pub fn name(self) -> &'static str {
        match self {
            AssertionStatus::Passed => "passed",
            AssertionStatus::Failed => "failed",
            AssertionStatus::Unreached => "unreached",
            AssertionStatus::Satisfied => "satisfied",
            AssertionStatus::Unsatisfied => "unsatisfied",
            AssertionStatus::Reached => "reached",
        }
    }

    /// Every status, in order.
    pub const ALL: [AssertionStatus; 6] = [
        AssertionStatus::Passed,
        AssertionStatus::Failed,
        AssertionStatus::Unreached,
        AssertionStatus::Satisfied,
        AssertionStatus::Unsatisfied,
        AssertionStatus::Reached,
    ];
}

/// Where and when an assertion was evaluated.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AssertionContext {
    /// Index of the deja syscall in the trace.
    pub syscall_index: u64,
    /// Virtual time of the syscall, in ns since boot.
    pub virtual_time_ns: u64,
    /// Decisions taken before it: where in the decision log the run stood.
    #[serde(default)]
    pub decision_index: u64,
    /// The node (0 for a program alone; the cluster names nodes by index).
    pub node: u32,
    /// The thread that evaluated it (its tid).
    pub thread: u32,
    /// The details the SDK sent (UTF-8 JSON text, at most [`deja_protocol::MAX_DETAILS`] bytes).
    pub details: String,
    /// The process that evaluated it (its pid: 1 is the node's first program).
    #[serde(default = "first_pid")]
    pub pid: u64,
    /// That process's name (its `comm`).
    #[serde(default)]
    pub process: String,
}

fn first_pid() -> u64 {
    1
}

/// One assertion site with its counts and verdict.
///
/// Counting: every evaluation is a hit. `always`, `always_or_unreachable` and `sometimes`
/// count a pass when the condition held and a failure when it did not; `reachable` counts
/// every hit as a pass and `unreachable` every hit as a failure (their condition is ignored).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AssertionReport {
    /// The site id, 16 hex digits.
    pub id: String,
    /// The kind, as [`deja_protocol::AssertKind::name`] spells it.
    pub kind: String,
    /// The assertion's message.
    pub message: String,
    /// Source file.
    pub file: String,
    /// Source line.
    pub line: u32,
    /// Evaluations.
    pub hits: u64,
    /// Evaluations that held.
    pub passes: u64,
    /// Evaluations that failed.
    pub failures: u64,
    /// The verdict.
    pub status: AssertionStatus,
    /// True if this run proves a bug (a failed `always`/`always_or_unreachable`, a reached
    /// `unreachable`); a `sometimes` is never a bug in one run.
    pub bug: bool,
    /// The first failure (for `unreachable`: the first hit).
    pub first_failure: Option<AssertionContext>,
    /// The first evaluation that held (`sometimes`) or the first hit (`reachable`).
    pub first_satisfied: Option<AssertionContext>,
}

/// The program's `SetupComplete`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LifecycleRecord {
    /// Index of the deja syscall in the trace.
    pub syscall_index: u64,
    /// Virtual time of the syscall, in ns since boot.
    pub virtual_time_ns: u64,
    /// The details the SDK sent.
    pub details: String,
}

/// A named lifecycle event.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EventRecord {
    /// The event's name.
    pub name: String,
    /// The details the SDK sent.
    pub details: String,
    /// Index of the deja syscall in the trace.
    pub syscall_index: u64,
    /// Virtual time of the syscall, in ns since boot.
    pub virtual_time_ns: u64,
    /// Durable writes the program had made before the event: events anchor crash points by
    /// meaning ("the second durable write after request R").
    #[serde(default)]
    pub durable_writes: u64,
}

/// One catalogued assertion site and what the run saw of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Site {
    /// [`AssertKind`] code (valid: checked on registration and on restore).
    pub(crate) kind: u32,
    pub(crate) line: u32,
    pub(crate) message: String,
    pub(crate) file: String,
    pub(crate) hits: u64,
    pub(crate) passes: u64,
    pub(crate) failures: u64,
    pub(crate) first_failure: Option<AssertionContext>,
    pub(crate) first_satisfied: Option<AssertionContext>,
}

impl Site {
    /// A site not yet evaluated.
    pub(crate) fn new(kind: AssertKind, line: u32, message: String, file: String) -> Site {
        Site {
            kind: kind as u32,
            line,
            message,
            file,
            hits: 0,
            passes: 0,
            failures: 0,
            first_failure: None,
            first_satisfied: None,
        }
    }

    pub(crate) fn kind(&self) -> AssertKind {
        // Registration and restore only admit valid codes.
        AssertKind::from_code(self.kind).unwrap_or(AssertKind::Always)
    }
}

/// The oracle state of a run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Oracle {
    pub(crate) sites: BTreeMap<u64, Site>,
    pub(crate) setup_complete: Option<LifecycleRecord>,
    pub(crate) events: Vec<EventRecord>,
    pub(crate) events_dropped: u64,
    pub(crate) protocol_errors: u64,
}

impl Persist for Oracle {
    /// The number of syscalls in the trace.
    type Context = u64;

    /// Checks the invariants of a restored oracle; `syscalls` is the number of syscalls in the
    /// trace (every recorded index lies below it).
    fn validate(&self, syscalls: &u64) -> Result<(), RestoreError> {
        let syscalls = *syscalls;
        ensure(self.sites.len() <= MAX_SITES, || format!("{} assertion sites", self.sites.len()))?;
        ensure(self.events.len() <= MAX_EVENTS, || format!("{} events", self.events.len()))?;
        let index_ok = |i: u64| i < syscalls;
        for (id, s) in &self.sites {
            let kind = AssertKind::from_code(s.kind);
            ensure(kind.is_some(), || format!("site {id:016x} has kind code {}", s.kind))?;
            let total = s.passes.checked_add(s.failures);
            ensure(total == Some(s.hits), || format!("site {id:016x}: passes and failures do not add up to hits"))?;
            match kind {
                Some(AssertKind::Reachable) => ensure(s.failures == 0, || format!("reachable site {id:016x} failed"))?,
                Some(AssertKind::Unreachable) => {
                    ensure(s.passes == 0, || format!("unreachable site {id:016x} passed"))?
                }
                _ => {}
            }
            ensure(s.first_failure.is_some() == (s.failures > 0), || format!("site {id:016x}: first failure"))?;
            let satisfiable = matches!(kind, Some(AssertKind::Sometimes | AssertKind::Reachable));
            ensure(s.first_satisfied.is_some() == (satisfiable && s.passes > 0), || {
                format!("site {id:016x}: first satisfaction")
            })?;
            for c in s.first_failure.iter().chain(&s.first_satisfied) {
                ensure(index_ok(c.syscall_index), || format!("site {id:016x}: syscall index {}", c.syscall_index))?;
            }
        }
        if let Some(l) = &self.setup_complete {
            ensure(index_ok(l.syscall_index), || format!("setup complete at syscall {}", l.syscall_index))?;
        }
        for e in &self.events {
            ensure(index_ok(e.syscall_index), || format!("event at syscall {}", e.syscall_index))?;
        }
        Ok(())
    }
}

impl Oracle {
    /// Every site's report, sorted by (file, line, id).
    pub(crate) fn assertions(&self) -> Vec<AssertionReport> {
        let mut out: Vec<AssertionReport> = self.sites.iter().map(|(id, s)| site_report(*id, s)).collect();
        out.sort_by(|a, b| (&a.file, a.line, &a.id).cmp(&(&b.file, b.line, &b.id)));
        out
    }

    /// True if some site already proves a bug.
    pub(crate) fn bug_found(&self) -> bool {
        self.sites.values().any(|s| verdict(s.kind(), s).1)
    }

    /// Fills the oracle's part of a report.
    pub(crate) fn fill_report(&self, r: &mut RunReport) {
        r.assertions = self.assertions();
        r.setup_complete = self.setup_complete.clone();
        r.events = self.events.clone();
        r.events_dropped = self.events_dropped;
        r.protocol_errors = self.protocol_errors;
    }
}

/// The verdict on one site (the rules are in [`AssertionStatus`]'s and [`AssertionReport`]'s
/// docs).
fn verdict(kind: AssertKind, s: &Site) -> (AssertionStatus, bool) {
    use AssertionStatus::*;
    match kind {
        AssertKind::Always if s.failures > 0 => (Failed, true),
        AssertKind::Always if s.hits == 0 => (Unreached, false),
        AssertKind::Always => (Passed, false),
        AssertKind::AlwaysOrUnreachable if s.failures > 0 => (Failed, true),
        AssertKind::AlwaysOrUnreachable => (Passed, false),
        AssertKind::Sometimes if s.hits == 0 => (Unreached, false),
        AssertKind::Sometimes if s.passes == 0 => (Unsatisfied, false),
        AssertKind::Sometimes => (Satisfied, false),
        AssertKind::Reachable if s.hits == 0 => (Unreached, false),
        AssertKind::Reachable => (Reached, false),
        AssertKind::Unreachable if s.hits > 0 => (Failed, true),
        AssertKind::Unreachable => (Passed, false),
    }
}

fn site_report(id: u64, s: &Site) -> AssertionReport {
    let kind = s.kind();
    let (status, bug) = verdict(kind, s);
    AssertionReport {
        id: format!("{id:016x}"),
        kind: kind.name().to_string(),
        message: s.message.clone(),
        file: s.file.clone(),
        line: s.line,
        hits: s.hits,
        passes: s.passes,
        failures: s.failures,
        status,
        bug,
        first_failure: s.first_failure.clone(),
        first_satisfied: s.first_satisfied.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(kind: AssertKind, hits: u64, passes: u64, failures: u64) -> Site {
        let ctx = |i| AssertionContext {
            syscall_index: i,
            virtual_time_ns: 1000,
            decision_index: 0,
            node: 0,
            thread: 1,
            details: "{}".into(),
            pid: 1,
            process: "prog".into(),
        };
        let satisfiable = matches!(kind, AssertKind::Sometimes | AssertKind::Reachable);
        Site {
            kind: kind as u32,
            line: 1,
            message: "m".into(),
            file: "f".into(),
            hits,
            passes,
            failures,
            first_failure: (failures > 0).then(|| ctx(3)),
            first_satisfied: (satisfiable && passes > 0).then(|| ctx(4)),
        }
    }

    #[test]
    fn verdict_table() {
        use AssertKind::*;
        use AssertionStatus::*;
        let cases = [
            (Always, 0, 0, 0, Unreached, false),
            (Always, 2, 2, 0, Passed, false),
            (Always, 2, 1, 1, Failed, true),
            (AlwaysOrUnreachable, 0, 0, 0, Passed, false),
            (AlwaysOrUnreachable, 3, 3, 0, Passed, false),
            (AlwaysOrUnreachable, 1, 0, 1, Failed, true),
            (Sometimes, 0, 0, 0, Unreached, false),
            (Sometimes, 2, 0, 2, Unsatisfied, false),
            (Sometimes, 2, 1, 1, Satisfied, false),
            (Reachable, 0, 0, 0, Unreached, false),
            (Reachable, 4, 4, 0, Reached, false),
            (Unreachable, 0, 0, 0, Passed, false),
            (Unreachable, 1, 0, 1, Failed, true),
        ];
        for (kind, hits, passes, failures, status, bug) in cases {
            let s = site(kind, hits, passes, failures);
            assert_eq!(verdict(kind, &s), (status, bug), "{kind:?} {hits}/{passes}/{failures}");
            let mut o = Oracle::default();
            o.sites.insert(7, s);
            o.validate(&10).unwrap();
            assert_eq!(o.bug_found(), bug);
            let r = &o.assertions()[0];
            assert_eq!(
                (r.status, r.bug, r.kind.as_str(), r.id.as_str()),
                (status, bug, kind.name(), "0000000000000007")
            );
        }
    }

    #[test]
    fn validate_refuses_inconsistent_oracles() {
        let good = {
            let mut o = Oracle::default();
            o.sites.insert(1, site(AssertKind::Always, 2, 1, 1));
            o.sites.insert(2, site(AssertKind::Sometimes, 1, 1, 0));
            o.events.push(EventRecord {
                name: "e".into(),
                details: String::new(),
                syscall_index: 5,
                virtual_time_ns: 1,
                durable_writes: 0,
            });
            o
        };
        good.validate(&10).unwrap();
        type Corruption = Box<dyn Fn(&mut Oracle)>;
        let bad: Vec<Corruption> = vec![
            Box::new(|o| o.sites.get_mut(&1).unwrap().kind = 9),
            Box::new(|o| o.sites.get_mut(&1).unwrap().hits = 3),
            Box::new(|o| o.sites.get_mut(&1).unwrap().first_failure = None),
            Box::new(|o| o.sites.get_mut(&2).unwrap().first_satisfied = None),
            Box::new(|o| o.sites.get_mut(&1).unwrap().first_failure.as_mut().unwrap().syscall_index = 10),
            Box::new(|o| o.sites.insert(3, site(AssertKind::Reachable, 1, 0, 1)).map_or((), |_| ())),
            Box::new(|o| o.sites.insert(3, site(AssertKind::Unreachable, 1, 1, 0)).map_or((), |_| ())),
            Box::new(|o| o.events[0].syscall_index = 10),
            Box::new(|o| {
                o.setup_complete =
                    Some(LifecycleRecord { syscall_index: 99, virtual_time_ns: 0, details: String::new() })
            }),
            Box::new(|o| {
                let e = o.events[0].clone();
                o.events.resize(MAX_EVENTS + 1, e);
            }),
        ];
        for (i, f) in bad.iter().enumerate() {
            let mut o = good.clone();
            f(&mut o);
            assert!(o.validate(&10).is_err(), "corruption {i}");
        }
    }
}
