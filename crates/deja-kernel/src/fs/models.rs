//! Named crash models: which of the states the weakest model allows (any subset of the pending
//! operations, one write torn) a real file system can leave.
//!
//! The file system records every change as a pending operation in program order (see
//! [`super`]); a crash state is a [`Selection`] of them. Each model here is a predicate over a
//! selection ([`CrashModel::allows`]) and a projection onto the states it allows
//! ([`CrashModel::project`], what decisions become under `--crash-model`). The models form a
//! chain, each allowing a subset of the states of the one before it:
//!
//! - **`posix-weak`**: every state. POSIX promises nothing before a sync (ALICE's weakest
//!   abstract file system, Pillai et al., OSDI '14).
//! - **`xfs`**: metadata is logged in program order. The changes of names and sizes
//!   ([`OpClass::journaled`]) a state keeps are a prefix of them in program order (a rename
//!   between two directories is one transaction: both halves or neither), and every one a
//!   later successful sync came after is kept (a log force commits everything logged before
//!   it). Writes past the file's durable size (appends) carry the size that covers them and
//!   are kept in program order: a file's appends kept are a prefix of its appends, the last
//!   one possibly torn at a sector. That size (and the blocks under it) is logged when the
//!   data is written back, after every name and size change made before the write, so an
//!   append kept means every such change before it is kept too (a write into the room an
//!   uncommitted `ftruncate` made cannot outlive the `ftruncate`). Writes inside the durable
//!   size (overwrites) reach the disk in any order, torn at sectors.
//!   (Documentation/filesystems/xfs/xfs-delayed-logging-design.rst; ALICE Table 1.)
//! - **`ext4-ordered`**: ext4 with `data=ordered` (the default): as `xfs`, and a rename over an
//!   existing name keeps every earlier write of the file it installs, whole: `auto_da_alloc`
//!   allocates and writes the new file's delayed blocks before the rename commits
//!   (Documentation/admin-guide/ext4.rst, `auto_da_alloc`; ALICE's "safe rename").
//! - **`process-kill`**: every pending operation kept, nothing torn: what `kill -9` leaves with
//!   the machine still up (the page cache survives the process).
//!
//! btrfs is not a model of its own: ALICE measured it to keep directory operations out of
//! order, so its states lie between `posix-weak` and `xfs`, and `posix-weak` covers them.

use crate::prelude::*;
use alloc::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::{PendingOp, Selection};

/// What kind of change a pending operation is, as the crash models tell them apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpClass {
    /// Bytes written within the file's durable size.
    Overwrite,
    /// Bytes written past the file's durable size: the data and the size that covers it.
    Append,
    /// The size set (`ftruncate`, `O_TRUNC`, a growing `fallocate`), or merged older writes.
    Size,
    /// Directory entries changed; `over` holds the inodes installed over an existing name (a
    /// rename replacing its target).
    Entries {
        /// Inodes installed over an existing name.
        over: Vec<u64>,
    },
}

impl OpClass {
    /// Metadata a journaling file system logs in program order: names and sizes.
    pub fn journaled(&self) -> bool {
        matches!(self, OpClass::Size | OpClass::Entries { .. })
    }

    fn writes(&self) -> bool {
        matches!(self, OpClass::Overwrite | OpClass::Append)
    }
}

/// A named crash model (see the [module documentation](self)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CrashModel {
    /// Any subset of the pending operations, one write torn.
    #[default]
    PosixWeak,
    /// Metadata logged in program order, appends in file order.
    Xfs,
    /// As `xfs`, and a rename over a name keeps the new file's earlier writes.
    Ext4Ordered,
    /// Everything the program wrote survives.
    ProcessKill,
}

impl CrashModel {
    /// Every model, weakest first: each allows a subset of the states of the ones before it.
    pub const ALL: [CrashModel; 4] =
        [CrashModel::PosixWeak, CrashModel::Xfs, CrashModel::Ext4Ordered, CrashModel::ProcessKill];

    /// Its name: `posix-weak`, `xfs`, `ext4-ordered`, `process-kill`.
    pub fn name(self) -> &'static str {
        match self {
            CrashModel::PosixWeak => "posix-weak",
            CrashModel::Xfs => "xfs",
            CrashModel::Ext4Ordered => "ext4-ordered",
            CrashModel::ProcessKill => "process-kill",
        }
    }

    /// What it keeps, in a line.
    pub fn words(self) -> &'static str {
        match self {
            CrashModel::PosixWeak => {
                "each file's data and each directory's entries durable only through their own syncs; a crash \
                 keeps any subset of the pending operations, one write possibly torn"
            }
            CrashModel::Xfs => {
                "names and sizes logged in program order and committed by any sync, appends kept in file order, \
                 overwrites in any order and torn at sectors"
            }
            CrashModel::Ext4Ordered => {
                "ext4 data=ordered: as xfs, and a rename over an existing name keeps the new file's earlier \
                 writes (auto_da_alloc)"
            }
            CrashModel::ProcessKill => "everything the program wrote survives, as after kill -9 with the machine up",
        }
    }

    /// What a failing restart from a state whose strongest allowing model is this one is.
    pub fn failure_words(self) -> String {
        match self {
            CrashModel::ProcessKill => "a bug even after a process kill (every file system)".into(),
            CrashModel::PosixWeak => "a portability hazard: only posix-weak allows this state".into(),
            m => {
                let weaker: Vec<&str> = CrashModel::ALL.iter().rev().filter(|w| **w < m).map(|w| w.name()).collect();
                format!("a bug on {} (and {})", m.name(), weaker.join(", "))
            }
        }
    }

    /// The model of a name.
    pub fn parse(text: &str) -> Result<CrashModel, String> {
        CrashModel::ALL.into_iter().find(|m| m.name() == text).ok_or_else(|| {
            let names: Vec<&str> = CrashModel::ALL.iter().map(|m| m.name()).collect();
            format!("unknown crash model {text:?} (expected one of {})", names.join(", "))
        })
    }

    /// True when the model allows the crash state `sel` over `ops` (the pending operations in
    /// program order).
    pub fn allows(self, ops: &[PendingOp], sel: &Selection) -> bool {
        let whole = |i: usize| sel.kept.get(i).copied().unwrap_or(false);
        let torn = |i: usize| sel.torn.is_some_and(|(at, _)| at == i);
        match self {
            CrashModel::PosixWeak => true,
            CrashModel::ProcessKill => sel.torn.is_none() && (0..ops.len()).all(whole),
            CrashModel::Xfs | CrashModel::Ext4Ordered => {
                let mut gap = false;
                let mut stopped = BTreeSet::new();
                for (i, op) in ops.iter().enumerate() {
                    if op.joined.is_some_and(|j| whole(j) != whole(i)) {
                        return false;
                    }
                    if op.class.journaled() {
                        if whole(i) && gap {
                            return false;
                        }
                        if !whole(i) {
                            if op.committed {
                                return false;
                            }
                            gap = true;
                        }
                    }
                    if op.class == OpClass::Append {
                        if (stopped.contains(&op.target) || gap) && (whole(i) || torn(i)) {
                            return false;
                        }
                        if !whole(i) {
                            stopped.insert(op.target);
                        }
                    }
                    if self == CrashModel::Ext4Ordered && whole(i) {
                        if let OpClass::Entries { over } = &op.class {
                            let unkept = ops[..i]
                                .iter()
                                .enumerate()
                                .any(|(j, w)| w.class.writes() && over.contains(&w.target) && !whole(j));
                            if unkept {
                                return false;
                            }
                        }
                    }
                }
                true
            }
        }
    }

    /// The state of this model closest below `sel`: `sel` itself when the model allows it;
    /// otherwise what is left after dropping every operation the model cannot keep without one
    /// `sel` dropped (for `process-kill`: everything kept). What decisions pick is projected
    /// so under `--crash-model`.
    pub fn project(self, ops: &[PendingOp], sel: &Selection) -> Selection {
        let n = ops.len();
        match self {
            CrashModel::PosixWeak => sel.clone(),
            CrashModel::ProcessKill => Selection { kept: vec![true; n], torn: None },
            CrashModel::Xfs | CrashModel::Ext4Ordered => {
                let mut s = Selection {
                    kept: (0..n).map(|i| sel.kept.get(i).copied().unwrap_or(false)).collect(),
                    torn: sel.torn,
                };
                // Committed metadata is on the disk whatever the state says, and on ext4 so is
                // every earlier write of a file a committed rename installed.
                let mut forced: Vec<usize> = Vec::new();
                for (i, op) in ops.iter().enumerate().filter(|(_, o)| o.committed) {
                    forced.push(i);
                    if let (CrashModel::Ext4Ordered, OpClass::Entries { over }) = (self, &op.class) {
                        forced.extend((0..i).filter(|j| ops[*j].class.writes() && over.contains(&ops[*j].target)));
                    }
                }
                for i in forced {
                    s.kept[i] = true;
                    if s.torn.is_some_and(|(at, _)| at == i) {
                        s.torn = None;
                    }
                }
                loop {
                    let before = s.clone();
                    let mut gap = false;
                    let mut stopped = BTreeSet::new();
                    for i in 0..n {
                        let op = &ops[i];
                        if let Some(j) = op.joined {
                            if s.kept[j] != s.kept[i] {
                                s.kept[i] = false;
                                s.kept[j] = false;
                            }
                        }
                        if op.class.journaled() {
                            if gap {
                                s.kept[i] = false;
                            }
                            gap |= !s.kept[i];
                        }
                        if op.class == OpClass::Append {
                            let torn_here = s.torn.is_some_and(|(at, _)| at == i);
                            if stopped.contains(&op.target) || gap {
                                s.kept[i] = false;
                                if torn_here {
                                    s.torn = None;
                                }
                            }
                            if !s.kept[i] {
                                stopped.insert(op.target);
                            }
                        }
                        if self == CrashModel::Ext4Ordered && s.kept[i] {
                            if let OpClass::Entries { over } = &op.class {
                                if (0..i).any(|j| ops[j].class.writes() && over.contains(&ops[j].target) && !s.kept[j])
                                {
                                    s.kept[i] = false;
                                }
                            }
                        }
                    }
                    if s == before {
                        return s;
                    }
                }
            }
        }
    }

    /// The models that allow `sel`, weakest first.
    pub fn allowing(ops: &[PendingOp], sel: &Selection) -> Vec<CrashModel> {
        CrashModel::ALL.into_iter().filter(|m| m.allows(ops, sel)).collect()
    }

    /// The strongest of `models`: what a failure in a state they allow is a bug on.
    pub fn strongest(models: &[CrashModel]) -> Option<CrashModel> {
        models.iter().copied().max()
    }
}
