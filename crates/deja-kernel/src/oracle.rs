//! The monitor's side of the deja protocol: the assertion oracle, lifecycle records, and the
//! SDK's randomness.
//!
//! A guest linked with the deja SDK talks to the monitor through one reserved syscall,
//! [`DEJA_SYSCALL`](deja_protocol::DEJA_SYSCALL) (see [`deja_protocol`] for the wire format). The kernel answers it here:
//!
//! - `Hello` returns [`PROTOCOL_VERSION`].
//! - `Catalog(ptr, n)` registers `n` ≤ [`MAX_SITES`] [`SiteRecord`]s (messages and file names
//!   truncated to [`MAX_TEXT`] bytes, UTF-8 lossy). A later catalog adds sites; an id already
//!   known keeps its first record; a record with an unknown kind is skipped; sites past a total
//!   of [`MAX_SITES`] are dropped. The call is all or nothing: unreadable memory anywhere
//!   (`-EFAULT`) registers none of it.
//! - `Assert(id, cond, details, len)` counts one evaluation of a known site (`cond` must be 0
//!   or 1; details are truncated to [`MAX_DETAILS`] bytes). The first failure and the first
//!   satisfaction keep their context (syscall index, virtual time, node, thread, details).
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

use std::collections::BTreeMap;

use deja_protocol::{
    split_word, AssertKind, Request, SiteRecord, MAX_DETAILS, MAX_SITES, MAX_TEXT, PROTOCOL_VERSION, SITE_RECORD_SIZE,
};
use serde::{Deserialize, Serialize};

use crate::errno::{EFAULT, EINVAL};
use crate::kernel::{SysResult, SysStop};
use crate::persist::{ensure, RestoreError};
use crate::{
    AssertionContext, AssertionReport, AssertionStatus, EventRecord, Kernel, LifecycleRecord, Memory, RunReport,
};

/// Most lifecycle events a run keeps; later ones are counted in
/// [`RunReport::events_dropped`](crate::RunReport::events_dropped).
pub const MAX_EVENTS: usize = 10_000;
/// The node every context names (one program per run).
const NODE: u32 = 0;
/// The thread every context names (the guest is single-threaded).
const THREAD: u32 = 1;

/// One catalogued assertion site and what the run saw of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Site {
    /// [`AssertKind`] code (valid: checked on registration and on restore).
    kind: u32,
    line: u32,
    message: String,
    file: String,
    hits: u64,
    passes: u64,
    failures: u64,
    first_failure: Option<AssertionContext>,
    first_satisfied: Option<AssertionContext>,
}

impl Site {
    fn kind(&self) -> AssertKind {
        // Registration and restore only admit valid codes.
        AssertKind::from_code(self.kind).unwrap_or(AssertKind::Always)
    }
}

/// The oracle state of a run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Oracle {
    sites: BTreeMap<u64, Site>,
    pub(crate) setup_complete: Option<LifecycleRecord>,
    events: Vec<EventRecord>,
    events_dropped: u64,
    protocol_errors: u64,
}

impl Oracle {
    /// Checks the invariants of a restored oracle; `syscalls` is the number of syscalls in the
    /// trace (every recorded index lies below it).
    pub(crate) fn validate(&self, syscalls: u64) -> Result<(), RestoreError> {
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

impl Kernel {
    /// Serves the deja syscall (`a` = RDI, RSI, RDX, R10, R8, R9); a failure is counted as a
    /// protocol error.
    pub(crate) fn sys_deja(&mut self, mem: &mut dyn Memory, a: [u64; 6]) -> SysResult {
        let r = self.deja_request(mem, a);
        if r.is_err() {
            self.oracle.protocol_errors = self.oracle.protocol_errors.saturating_add(1);
        }
        r
    }

    fn deja_request(&mut self, mem: &mut dyn Memory, a: [u64; 6]) -> SysResult {
        let (version, code) = split_word(a[0]);
        if version != PROTOCOL_VERSION {
            return Err(EINVAL.into());
        }
        match Request::from_code(code).ok_or(SysStop::Err(EINVAL))? {
            Request::Hello => Ok(u64::from(PROTOCOL_VERSION)),
            Request::Catalog => self.deja_catalog(mem, a[1], a[2]),
            Request::Assert => self.deja_assert(mem, a[1], a[2], a[3], a[4]),
            Request::SetupComplete => {
                let details = self.guest_text(mem, a[1], a[2], MAX_DETAILS)?;
                if self.oracle.setup_complete.is_none() {
                    let (syscall_index, virtual_time_ns) = self.deja_now();
                    self.oracle.setup_complete = Some(LifecycleRecord { syscall_index, virtual_time_ns, details });
                }
                Ok(0)
            }
            Request::Event => {
                let name = self.guest_text(mem, a[1], a[2], MAX_DETAILS)?;
                let details = self.guest_text(mem, a[3], a[4], MAX_DETAILS)?;
                if self.oracle.events.len() < MAX_EVENTS {
                    let (syscall_index, virtual_time_ns) = self.deja_now();
                    let durable_writes = self.faults.durable_writes;
                    self.oracle.events.push(EventRecord {
                        name,
                        details,
                        syscall_index,
                        virtual_time_ns,
                        durable_writes,
                    });
                } else {
                    self.oracle.events_dropped = self.oracle.events_dropped.saturating_add(1);
                }
                Ok(0)
            }
            Request::Random => Ok(self.faults.sdk_random()),
            Request::Choice => {
                let n = a[1];
                if n == 0 {
                    return Err(EINVAL.into());
                }
                Ok(self.faults.sdk_choice(n))
            }
        }
    }

    /// (index of the syscall being served, virtual time).
    fn deja_now(&self) -> (u64, u64) {
        (self.tracer.syscalls(), self.clock.now_ns())
    }

    /// Reads `min(len, max)` bytes at `addr` as UTF-8 (lossy); nothing is read when `len` is 0.
    fn guest_text(&self, mem: &mut dyn Memory, addr: u64, len: u64, max: usize) -> Result<String, SysStop> {
        let n = usize::try_from(len).unwrap_or(usize::MAX).min(max);
        if n == 0 {
            return Ok(String::new());
        }
        let mut b = vec![0u8; n];
        self.mappings.copy_in(mem, addr, &mut b).map_err(|_| SysStop::Err(EFAULT))?;
        Ok(String::from_utf8_lossy(&b).into_owned())
    }

    fn deja_catalog(&mut self, mem: &mut dyn Memory, ptr: u64, n: u64) -> SysResult {
        let count = usize::try_from(n).ok().filter(|c| *c <= MAX_SITES).ok_or(SysStop::Err(EINVAL))?;
        if count == 0 {
            return Ok(0);
        }
        let mut raw = vec![0u8; count * SITE_RECORD_SIZE];
        self.mappings.copy_in(mem, ptr, &mut raw).map_err(|_| SysStop::Err(EFAULT))?;
        let mut new: Vec<(u64, Site)> = Vec::new();
        for chunk in raw.chunks_exact(SITE_RECORD_SIZE) {
            let mut b = [0u8; SITE_RECORD_SIZE];
            b.copy_from_slice(chunk);
            let rec = SiteRecord::from_bytes(&b);
            if AssertKind::from_code(rec.kind).is_none() {
                continue;
            }
            let message = self.guest_text(mem, rec.message_ptr, rec.message_len, MAX_TEXT)?;
            let file = self.guest_text(mem, rec.file_ptr, rec.file_len, MAX_TEXT)?;
            new.push((
                rec.id,
                Site {
                    kind: rec.kind,
                    line: rec.line,
                    message,
                    file,
                    hits: 0,
                    passes: 0,
                    failures: 0,
                    first_failure: None,
                    first_satisfied: None,
                },
            ));
        }
        let sites = &mut self.oracle.sites;
        for (id, site) in new {
            if sites.len() >= MAX_SITES && !sites.contains_key(&id) {
                continue;
            }
            sites.entry(id).or_insert(site);
        }
        Ok(0)
    }

    fn deja_assert(&mut self, mem: &mut dyn Memory, id: u64, cond: u64, ptr: u64, len: u64) -> SysResult {
        if !self.oracle.sites.contains_key(&id) || cond > 1 {
            return Err(EINVAL.into());
        }
        let details = self.guest_text(mem, ptr, len, MAX_DETAILS)?;
        let (syscall_index, virtual_time_ns) = self.deja_now();
        let decision_index = self.faults.log.len();
        let Some(site) = self.oracle.sites.get_mut(&id) else { return Err(EINVAL.into()) };
        let held = match site.kind() {
            AssertKind::Always | AssertKind::AlwaysOrUnreachable | AssertKind::Sometimes => cond == 1,
            AssertKind::Reachable => true,
            AssertKind::Unreachable => false,
        };
        let ctx =
            || AssertionContext { syscall_index, virtual_time_ns, decision_index, node: NODE, thread: THREAD, details };
        site.hits = site.hits.saturating_add(1);
        if held {
            site.passes = site.passes.saturating_add(1);
            let satisfiable = matches!(site.kind(), AssertKind::Sometimes | AssertKind::Reachable);
            if satisfiable && site.first_satisfied.is_none() {
                site.first_satisfied = Some(ctx());
            }
        } else {
            site.failures = site.failures.saturating_add(1);
            if site.first_failure.is_none() {
                site.first_failure = Some(ctx());
            }
        }
        Ok(0)
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
            o.validate(10).unwrap();
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
        good.validate(10).unwrap();
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
            assert!(o.validate(10).is_err(), "corruption {i}");
        }
    }
}
