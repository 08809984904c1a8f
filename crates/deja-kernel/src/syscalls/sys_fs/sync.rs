//! The sync family: `fsync`, `fdatasync`, `sync_file_range`, `syncfs` and `sync`, each a durable
//! write when it succeeds, and what a failed sync leaves of its file's pending operations.

use crate::abi::errno::*;
use crate::faults::{DecisionPoint, IoOp};
use crate::kernel::{Kernel, SysResult};
use crate::prelude::*;

impl Kernel {
    fn sync_one(&mut self, fd: u64) -> SysResult {
        let (id, path) = self.files.fds.get(fd as i32)?.sync_target(&self.files.fs)?;
        self.faults.syncs += 1;
        if let Err(e) = self.io_point(IoOp::Fsync, &path, None, (self.faults.config.eio_on_fsync_ppm, 0)) {
            // Linux drops the dirty pages of a failed sync: a retry succeeds, the data is gone.
            // With reordered writes, the sync may have written any subset back before it
            // failed (decisions, projected onto the crash model).
            if let Some(id) = id {
                self.failed_sync(id);
            }
            return Err(e.into());
        }
        let promotes = id.is_some_and(|id| self.files.fs.dirty(id));
        if self.durable_before(&path, promotes) {
            return Ok(0);
        }
        if let Some(id) = id {
            self.files.fs.flush(id);
        }
        self.durable_after(&path);
        Ok(0)
    }

    /// Settles the pending operations of a file whose sync failed: all dropped; or those the
    /// placed error names ([`crate::ErrorRule::keep`]) written back; or, when the crash model's
    /// weakest mode is on (`reordered_writes`), each kept or dropped by a decision. What is
    /// written back is projected onto the configured crash model, and recorded.
    fn failed_sync(&mut self, id: u64) {
        let named = self.faults.struck_keep.take();
        if !self.files.fs.is_file(id) {
            return self.files.fs.drop_pending(id);
        }
        let all = self.files.fs.pending_ops();
        let mine: Vec<crate::fs::PendingOp> = all.iter().filter(|o| o.target == id).cloned().collect();
        let mut sel = crate::fs::Selection { kept: vec![false; mine.len()], torn: None };
        let chosen = match named {
            Some(keep) => {
                for i in keep.into_iter().map(|i| i as usize).filter(|i| *i < mine.len()) {
                    sel.kept[i] = true;
                }
                true
            }
            None if self.faults.config.reordered_writes => {
                for (i, op) in mine.iter().enumerate() {
                    let point = DecisionPoint::FailedSyncKeep { what: op.what.clone() };
                    sel.kept[i] = self.faults.decide(point, 2) == 1;
                }
                true
            }
            None => false,
        };
        // Linux's usual outcome, everything dropped, is the fault itself: no model has a say.
        let sel = if chosen { self.faults.config.crash_model.project(&mine, &sel) } else { sel };
        if self.faults.failed_syncs.len() < crate::faults::MAX_DURABLE_LOG {
            let point = self.faults.ledger.last().map(|r| r.point.clone()).unwrap_or_default();
            let pending = mine.iter().map(|o| o.what.clone()).collect();
            let nothing = !sel.kept.contains(&true);
            let models = crate::fs::CrashModel::ALL
                .into_iter()
                .filter(|m| nothing || *m == crate::fs::CrashModel::ProcessKill || m.allows(&mine, &sel))
                .collect();
            self.faults.failed_syncs.push(crate::FailedSync { point, pending, kept: sel.kept.clone(), models });
        }
        self.files.fs.settle_failed(id, &sel.kept);
    }

    pub(crate) fn sys_fsync(&mut self, fd: u64, data_only: bool) -> SysResult {
        let _ = data_only;
        self.sync_one(fd)
    }

    pub(crate) fn sys_sync_file_range(&mut self, fd: u64, off: u64, n: u64, flags: u64) -> SysResult {
        if flags & !7 != 0
            || (off as i64) < 0
            || (n as i64) < 0
            || off.checked_add(n).is_none_or(|e| e > i64::MAX as u64)
        {
            return Err(EINVAL.into());
        }
        self.files.fds.get(fd as i32)?.kind.sync_range()?;
        if flags & 2 == 0 {
            return Ok(0);
        }
        self.sync_one(fd)
    }

    pub(crate) fn sys_syncfs(&mut self, fd: u64) -> SysResult {
        self.files.fds.get(fd as i32)?;
        self.faults.syncs += 1;
        if let Err(e) = self.io_point(IoOp::Fsync, "/", None, (self.faults.config.eio_on_fsync_ppm, 0)) {
            self.files.fs.drop_all();
            return Err(e.into());
        }
        let promotes = self.files.fs.any_dirty();
        if self.durable_before("/", promotes) {
            return Ok(0);
        }
        self.files.fs.flush_all();
        self.durable_after("/");
        Ok(0)
    }

    pub(crate) fn sys_sync(&mut self) -> SysResult {
        self.faults.syncs += 1;
        let promotes = self.files.fs.any_dirty();
        if self.durable_before("/", promotes) {
            return Ok(0);
        }
        self.files.fs.flush_all();
        self.durable_after("/");
        Ok(0)
    }
}
