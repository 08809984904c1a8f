//! Crashes placed by meaning ([`OpCrash`]: before or after the n-th durable operation on a
//! path) and what a crash image keeps: by position among the pending operations
//! ([`CrashState`]) or by what they are ([`KeptOps`]), and what a crash kept ([`CrashAt`]).

use crate::prelude::*;

use serde::{Deserialize, Serialize};

/// Which side of a durable operation a crash placed by meaning comes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum When {
    /// When the program makes the operation, before it takes effect: what it would have made
    /// durable is still pending.
    Before,
    /// Right after it took effect, before the program sees it return.
    After,
}

impl When {
    /// `before` or `after`.
    pub fn name(self) -> &'static str {
        match self {
            When::Before => "before",
            When::After => "after",
        }
    }
}

/// A crash placed by meaning: before or after the `nth` durable operation (an fsync,
/// fdatasync or `sync_file_range` of the path, an `O_SYNC`/`O_DSYNC` write to it; `syncfs` and
/// `sync` are path `/`) on `path`, counted from 1 in the life, keeping the pending operations
/// `keep` names (`None`: the run's decisions choose, as the crash-state modes allow).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct OpCrash {
    /// Before or after the operation.
    pub when: When,
    /// The guest path the operation makes durable.
    pub path: String,
    /// Which durable operation on `path`, from 1.
    pub nth: u64,
    /// What the crash image keeps of the pending operations, by what they are.
    #[serde(default)]
    pub keep: Option<KeptOps>,
}

impl OpCrash {
    /// In words: `before durable op #3 on /data/wal`.
    pub fn point(&self) -> String {
        format!("{} durable op #{} on {}", self.when.name(), self.nth, self.path)
    }

    /// Parses `WHEN:PATH:NTH` (`before:/data/wal:3`): the crash before or after the NTH durable
    /// operation on PATH, its state left to decisions.
    pub fn parse(text: &str) -> Result<OpCrash, String> {
        let mut parts = text.splitn(2, ':');
        let when = match parts.next() {
            Some("before") => When::Before,
            Some("after") => When::After,
            _ => return Err(format!("{text:?}: expected before:PATH:NTH or after:PATH:NTH")),
        };
        let rest = parts.next().unwrap_or_default();
        let (path, nth) = rest.rsplit_once(':').ok_or_else(|| format!("{text:?}: expected WHEN:PATH:NTH"))?;
        if !path.starts_with('/') {
            return Err(format!("{text:?}: give an absolute guest path"));
        }
        let nth: u64 =
            nth.parse().ok().filter(|n| *n > 0).ok_or_else(|| format!("{text:?}: {nth:?} is not a count from 1"))?;
        Ok(OpCrash { when, path: path.to_string(), nth, keep: None })
    }

    /// In words with what it keeps: `crash before durable op #3 on /data/wal, nothing pending kept`.
    pub fn describe(&self) -> String {
        match &self.keep {
            Some(k) => format!("crash {}, {}", self.point(), k.describe()),
            None => format!("crash {}", self.point()),
        }
    }
}

/// The pending operations a crash keeps, by what they are (`write of 256 bytes at 0 to
/// /data/pages`), so that a crash state can be replayed against another binary, whose pending
/// list at the same point may hold other operations.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct KeptOps {
    /// Kept whole, in program order.
    pub ops: Vec<String>,
    /// A write kept in part, and how many of its sectors.
    #[serde(default)]
    pub torn: Option<(String, u64)>,
}

impl KeptOps {
    /// The state `state` is, over the pending operations `pending` (in words).
    pub fn of(state: &CrashState, pending: &[String]) -> KeptOps {
        let name = |p: u32| pending.get(p as usize).cloned().unwrap_or_default();
        KeptOps { ops: state.kept.iter().map(|p| name(*p)).collect(), torn: state.torn.map(|(p, k)| (name(p), k)) }
    }

    /// The state over `pending` that keeps the operations named here (each name matches the
    /// first pending operation of that name not matched yet); names `pending` has not are lost.
    pub fn state_over(&self, pending: &[String]) -> CrashState {
        let mut used = vec![false; pending.len()];
        let mut find = |name: &str| {
            let at = (0..pending.len()).find(|i| !used[*i] && pending[*i] == name)?;
            used[at] = true;
            Some(at as u32)
        };
        let mut kept: Vec<u32> = self.ops.iter().filter_map(|n| find(n)).collect();
        kept.sort_unstable();
        let torn = self.torn.as_ref().and_then(|(n, k)| find(n).map(|p| (p, *k)));
        CrashState { kept, torn }
    }

    /// In words.
    pub fn describe(&self) -> String {
        let mut s = if self.ops.is_empty() {
            "nothing pending kept".to_string()
        } else {
            format!("kept: {}", self.ops.join("; "))
        };
        if let Some((n, k)) = &self.torn {
            s.push_str(&format!("; {n} cut after {k} sectors"));
        }
        s
    }
}

/// Exactly what a crash image keeps: the positions, among the operations pending at the crash
/// in program order (0-based), of those that reached the disk whole, and at most one write
/// that reached it in part: its position and how many of its 512-byte sectors made it.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct CrashState {
    /// Positions kept whole, ascending.
    pub kept: Vec<u32>,
    /// A write kept in part: (position, sectors).
    #[serde(default)]
    pub torn: Option<(u32, u64)>,
}

impl CrashState {
    /// Nothing pending reaches the disk.
    pub fn none() -> CrashState {
        CrashState::default()
    }

    /// Everything pending reaches the disk.
    pub fn all(n: usize) -> CrashState {
        CrashState { kept: (0..n as u32).collect(), torn: None }
    }

    /// The operations `pending` (in program order, in words), each marked by what the state
    /// did with it: `kept: …`, `dropped: …` or `torn after K sectors: …`.
    pub fn operations(&self, pending: &[String]) -> Vec<String> {
        pending
            .iter()
            .enumerate()
            .map(|(i, what)| {
                let i = i as u32;
                let mark = match self.torn {
                    Some((at, k)) if at == i => format!("torn after {k} sectors"),
                    _ if self.kept.contains(&i) => "kept".to_string(),
                    _ => "dropped".to_string(),
                };
                format!("{mark}: {what}")
            })
            .collect()
    }

    /// In words: `kept 3 of 7 pending operations`, `… and op 4 torn after 2 sectors`.
    pub fn describe(&self, pending: usize) -> String {
        let mut s = format!("kept {} of {pending} pending operations", self.kept.len());
        if let Some((at, k)) = self.torn {
            s.push_str(&format!(", operation {} torn after {k} sectors", at + 1));
        }
        s
    }
}

/// What a crash kept: the state, and the operations that were pending, in words (by meaning:
/// what lets a crash state be replayed against another binary).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CrashAt {
    /// The crash state the image took.
    pub state: CrashState,
    /// The operations pending at the crash, in program order, in words.
    pub pending: Vec<String>,
    /// The crash models that allow the state, weakest first.
    #[serde(default)]
    pub models: Vec<crate::fs::CrashModel>,
}
