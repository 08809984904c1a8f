//! The words of faults, shared by the fault configuration, the decision points, the file
//! system's crash records and the fail-stop rule: which operation an error strikes
//! ([`IoOp`]), which error ([`IoErrno`]), which kind of fault the ledger records
//! ([`FaultKind`]), and how a stop after an injected error is judged ([`FailStopMode`]). A
//! leaf: it uses nothing of the crate but errno values.

use crate::prelude::*;
use serde::{Deserialize, Serialize};

/// An operation an [`ErrorRule`](crate::ErrorRule) can fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IoOp {
    /// `write`, `pwrite64`, `writev`, `pwritev` to a regular file.
    Write,
    /// `fsync`, `fdatasync`, `sync_file_range` with WRITE (of the file or directory), `syncfs`
    /// (path `/`).
    Fsync,
    /// `truncate`, `ftruncate`, `O_TRUNC` of a non-empty file.
    Truncate,
    /// A growing `fallocate`.
    Fallocate,
    /// Creating a file (`open` with `O_CREAT` of a new name) or a directory (`mkdir`).
    Create,
    /// `rename`/`renameat2` (the rule's path is the source or the target).
    Rename,
    /// `read`, `pread64`, `readv`, `preadv` of a regular file.
    Read,
}

impl IoOp {
    /// Its name in decision points and the ledger.
    pub fn name(self) -> &'static str {
        match self {
            IoOp::Write => "write",
            IoOp::Fsync => "fsync",
            IoOp::Truncate => "truncate",
            IoOp::Fallocate => "fallocate",
            IoOp::Create => "create",
            IoOp::Rename => "rename",
            IoOp::Read => "read",
        }
    }

    /// Every kind, in order.
    pub const ALL: [IoOp; 7] =
        [IoOp::Write, IoOp::Fsync, IoOp::Truncate, IoOp::Fallocate, IoOp::Create, IoOp::Rename, IoOp::Read];
}

/// The error an [`ErrorRule`](crate::ErrorRule) injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IoErrno {
    /// `EIO`.
    Eio,
    /// `ENOSPC`.
    Enospc,
}

impl IoErrno {
    /// The errno value.
    pub fn value(self) -> i32 {
        match self {
            IoErrno::Eio => crate::abi::errno::EIO,
            IoErrno::Enospc => crate::abi::errno::ENOSPC,
        }
    }

    /// `eio` or `enospc`.
    pub fn name(self) -> &'static str {
        match self {
            IoErrno::Eio => "eio",
            IoErrno::Enospc => "enospc",
        }
    }
}

/// What kind of fault a [`FaultRecord`](crate::FaultRecord) is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    /// The node crashed (before or after a durable write, or at exit).
    Crash,
    /// A crash lost unsynced data or directory changes of a path.
    LostUnsynced,
    /// A process of the node was killed (`SIGKILL`); the node went on.
    Kill,
    /// A crash kept a sector prefix of a pending write.
    TornWrite,
    /// A crash kept a subset of the pending operations.
    ReorderedWrites,
    /// An operation failed with EIO.
    Eio,
    /// An operation failed with ENOSPC.
    Enospc,
}

impl FaultKind {
    /// Its name, as serialized (`crash`, `lost_unsynced`, `kill`, `torn_write`, `reordered_writes`, `eio`,
    /// `enospc`).
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Crash => "crash",
            FaultKind::LostUnsynced => "lost_unsynced",
            FaultKind::Kill => "kill",
            FaultKind::TornWrite => "torn_write",
            FaultKind::ReorderedWrites => "reordered_writes",
            FaultKind::Eio => "eio",
            FaultKind::Enospc => "enospc",
        }
    }
}

/// How a life that ends non-zero after an injected I/O error is judged.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailStopMode {
    /// A fail-stop unless the life committed [`AUTO_COMMITS`](crate::faults::fail_stop::AUTO_COMMITS) times or more after the first
    /// injected error (wrote to a file the faults may strike, then made it durable); otherwise
    /// a failure.
    #[default]
    Auto,
    /// Never a fail-stop: the exit is the verdict.
    Never,
    /// Always a fail-stop, whatever the program did after the error.
    Always,
    /// A fail-stop when the program exits with one of these codes ("stopped on purpose");
    /// any other status, and every signal, is a failure.
    Exit(Vec<i32>),
}

impl FailStopMode {
    /// Reads `auto`, `never`, `always` or `exit=2,3`.
    pub fn parse(text: &str) -> Result<FailStopMode, String> {
        match text.trim() {
            "auto" => Ok(FailStopMode::Auto),
            "never" => Ok(FailStopMode::Never),
            "always" => Ok(FailStopMode::Always),
            t => {
                let Some(codes) = t.strip_prefix("exit=") else {
                    return Err(format!(
                        "fail-stop {t:?}: expected auto, never, always or exit=CODES (exit=2,3: the exit codes that \
                         mean a stop on purpose)"
                    ));
                };
                let codes: Result<Vec<i32>, String> = codes
                    .split(',')
                    .map(|c| match c.trim().parse::<i32>() {
                        Ok(n) if (1..=255).contains(&n) => Ok(n),
                        _ => Err(format!("fail-stop {t:?}: {c:?} is not an exit code from 1 to 255")),
                    })
                    .collect();
                Ok(FailStopMode::Exit(codes?))
            }
        }
    }

    /// Its words, as [`FailStopMode::parse`] reads them.
    pub fn words(&self) -> String {
        match self {
            FailStopMode::Auto => "auto".into(),
            FailStopMode::Never => "never".into(),
            FailStopMode::Always => "always".into(),
            FailStopMode::Exit(codes) => {
                format!("exit={}", codes.iter().map(i32::to_string).collect::<Vec<_>>().join(","))
            }
        }
    }
}
