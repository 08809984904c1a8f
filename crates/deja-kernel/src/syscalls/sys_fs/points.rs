//! Where storage faults strike a file system call: the count of durable operations and the
//! crash points before and after them (by number or placed by meaning), processes killed by
//! meaning, the placed errors and rates an operation on a path meets, and the fail-stop rule.

use crate::faults::fail_stop::FailStop;
use crate::faults::{DecisionPoint, DurableOp, FaultKind, FaultRecord, IoErrno, IoOp, When};
use crate::kernel::{Kernel, SysResult, SysStop};
use crate::prelude::*;

impl Kernel {
    /// A durable operation on `path` is about to take effect (`promotes`: something is pending
    /// on its target): counts it, and says whether the configured crash comes right before it
    /// (it is then armed, and the operation never happens). The crash comes before it when it is
    /// the durable write `crash_before_durable_write` names, or the `Before` crash placed on
    /// this operation by meaning ([`crate::faults::OpCrash`]).
    pub(super) fn durable_before(&mut self, path: &str, promotes: bool) -> bool {
        let nth = {
            let c = self.faults.durable_ops.entry(path.to_string()).or_default();
            *c += 1;
            *c
        };
        if self.faults.durable_log.len() < crate::faults::MAX_DURABLE_LOG && self.faults.faultable(path) {
            let op = DurableOp { path: path.to_string(), nth, virtual_time_ns: self.sched.clock.now_ns(), promotes };
            self.faults.durable_log.push(op);
        }
        let next = self.faults.durable_writes + 1;
        if self.faults.config.crash_before_durable_write == Some(next) {
            self.faults.crash_due = true;
            self.faults.crash_point = format!("before durable write {next}");
            return true;
        }
        // The count of the processes of its name (not pid 1: its end is the node's), for
        // kills by meaning.
        if self.procs.current != 1 {
            *self.faults.process_ops.entry(self.process_name()).or_default() += 1;
            *self.faults.pid_ops.entry(self.procs.current).or_default() += 1;
        }
        self.crash_by_meaning(When::Before, path, nth) || self.kill_by_meaning(When::Before)
    }

    /// The durable operation on `path` took effect: counts the durable write and arms the crash
    /// when it is the configured one (`crash_after_durable_write`, or the `After` crash placed
    /// on it by meaning).
    pub(super) fn durable_after(&mut self, path: &str) {
        self.faults.durable_writes += 1;
        self.faults.note_durable(path);
        if self.faults.config.crash_after_durable_write == Some(self.faults.durable_writes) {
            self.faults.crash_due = true;
            self.faults.crash_point = format!("after durable write {}", self.faults.durable_writes);
            return;
        }
        let nth = self.faults.durable_ops.get(path).copied().unwrap_or(0);
        if !self.crash_by_meaning(When::After, path, nth) {
            self.kill_by_meaning(When::After);
        }
    }

    /// Arms the kill placed at `when` on the durable operation the current process just made
    /// (counted over the processes of its name, or its pid's own), if there is one (never for
    /// pid 1). True if it struck: the operation does not happen when it struck before it.
    fn kill_by_meaning(&mut self, when: When) -> bool {
        let pid = self.procs.current;
        if pid == 1 || self.faults.kill_due.is_some() {
            return false;
        }
        let name = self.process_name();
        let by_name = self.faults.process_ops.get(&name).copied().unwrap_or(0);
        let by_pid = self.faults.pid_ops.get(&pid).copied().unwrap_or(0);
        let Some(k) = self.faults.config.kill_process.iter().find(|k| {
            k.when == when
                && match k.pid() {
                    Some(p) => p == pid && k.nth == by_pid,
                    None => k.name == name && k.nth == by_name,
                }
        }) else {
            return false;
        };
        let point = k.point();
        self.faults.ledger.push(crate::faults::FaultRecord {
            kind: crate::faults::FaultKind::Kill,
            point: point.clone(),
            syscall_index: self.record.tracer.syscalls(),
            path: None,
            selected: true,
            applied: true,
            observed: false,
        });
        self.faults.kill_due = Some(point);
        true
    }

    /// Arms the crash placed by meaning on the `nth` durable operation on `path`, at `when`, if
    /// there is one and storage faults may strike the path.
    fn crash_by_meaning(&mut self, when: When, path: &str, nth: u64) -> bool {
        if !self.faults.faultable(path) {
            return false;
        }
        let Some(c) = self.faults.config.crash_at.iter().find(|c| c.when == when && c.nth == nth && c.path == path)
        else {
            return false;
        };
        self.faults.crash_point = c.point();
        self.faults.crash_keep = c.keep.clone();
        self.faults.crash_struck = Some(c.clone());
        self.faults.crash_due = true;
        true
    }

    /// The fail-stop rule ([`crate::faults::FaultState::fail_stop`]) on a syscall's result: a
    /// program that stops after an injected I/O error ends its life there as a crash whose
    /// image keeps everything pending (so it restarts on its disk as it left it), or, with no
    /// lives left, its stop is marked as one after a fault.
    pub(crate) fn fail_stop(&mut self, res: &mut SysResult) {
        if self.faults.crash_due {
            return;
        }
        let Err(SysStop::Exit(status)) = &*res else { return };
        let (stop, why) = self.faults.fail_stop(status);
        self.faults.not_fail_stop = why;
        match stop {
            FailStop::No => {}
            FailStop::Restart(words) => {
                self.faults.crash_point = words;
                self.faults.crash_due = true;
                self.faults.fail_stopped = true;
                *res = Ok(0);
            }
            FailStop::Stands(words) => self.faults.stopped_after_fault = Some(words),
        }
    }

    /// Counts one `op` on `path` and decides whether it fails: a placed error
    /// ([`crate::faults::ErrorRule`]) for this occurrence, else the configured rates (`rates`:
    /// EIO then ENOSPC, in parts per million). `range` is the byte range of a read. Records a
    /// strike in the ledger and returns its errno.
    pub(crate) fn io_point(
        &mut self,
        op: IoOp,
        path: &str,
        range: Option<(u64, u64)>,
        rates: (u32, u32),
    ) -> Result<(), i32> {
        self.io_point_as(op, path, None, range, rates)
    }

    /// [`Kernel::io_point`] for an operation with a second path a rule may name (a rename's
    /// target); it is counted under `path`.
    pub(crate) fn io_point_as(
        &mut self,
        op: IoOp,
        path: &str,
        alias: Option<&str>,
        range: Option<(u64, u64)>,
        rates: (u32, u32),
    ) -> Result<(), i32> {
        let n = {
            let c = self.faults.op_counts.entry((op, path.to_string())).or_default();
            *c += 1;
            *c
        };
        let point = format!("{} #{n} {} {path}", op.name(), if op == IoOp::Write { "to" } else { "of" });
        if !self.faults.faultable(path) && !alias.is_some_and(|a| self.faults.faultable(a)) {
            return Ok(());
        }
        let placed = self.faults.config.errors.iter().find(|r| {
            r.op == op
                && (r.nth == 0 || r.nth == n)
                && (r.path == path || alias == Some(r.path.as_str()))
                && match (r.range, range) {
                    (Some((a, b)), Some((x, y))) => x < b && a < y,
                    (Some(_), None) => false,
                    (None, _) => true,
                }
        });
        self.faults.struck_keep = placed.and_then(|r| r.keep.clone());
        let errno = match placed {
            Some(rule) => Some(rule.errno),
            None => {
                let (eio, enospc) = rates;
                let at = |errno| DecisionPoint::IoError { errno, op, nth: n, path: path.to_string() };
                if self.faults.strike(eio, at(IoErrno::Eio)) {
                    Some(IoErrno::Eio)
                } else if self.faults.strike(enospc, at(IoErrno::Enospc)) {
                    Some(IoErrno::Enospc)
                } else {
                    None
                }
            }
        };
        let Some(errno) = errno else { return Ok(()) };
        self.faults.ledger.push(FaultRecord {
            kind: if errno == IoErrno::Enospc { FaultKind::Enospc } else { FaultKind::Eio },
            point: format!("{} on {point}", errno.name()),
            syscall_index: self.record.tracer.syscalls(),
            path: Some(path.to_string()),
            selected: true,
            applied: true,
            observed: true,
        });
        self.faults.faulted = true;
        Err(errno.value())
    }
}
