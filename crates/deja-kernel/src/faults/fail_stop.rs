//! The fail-stop rule: whether a life that ends non-zero after an injected I/O error stopped
//! *because of* the error (a fail-stop: the program is restarted on its disk, and what it
//! acknowledged is judged after the restart) or failed (its exit is its verdict).
//!
//! An exit code cannot tell the two apart: a server that exits 2 on a WAL error and a harness
//! that carries on after a swallowed error, then finds an acknowledged batch missing and exits
//! 1, both end non-zero after an error. What tells them apart is what the program did between
//! the error and its end. By default ([`FailStopMode::Auto`]) a stop is a fail-stop unless the
//! life went on committing after the first injected error: a *commit* is a successful write to
//! a file the faults may strike followed by a successful durable operation (an fsync or
//! fdatasync, an `O_SYNC`/`O_DSYNC` write, a rename, a directory sync) on such a file, and
//! [`AUTO_COMMITS`] of them after the error make the stop a failure. One commit is clean-up a
//! careful program may do before it stops (SQLite rolls its journal back and syncs the
//! database, then exits with `SQLITE_IOERR`); a server that logs the error to a file before it
//! stops has not committed at all. The user can say otherwise (`--fail-stop
//! never|always|exit=CODES`; `fail_stop` per node in cluster files), and the SDK's
//! `fail_stop_is_failure` is `never`.
//!
//! Owns [`FailStop`] and the rule itself ([`FaultState::fail_stop`]); its setting,
//! [`FailStopMode`], is one of the words of faults (`decisions/fault_kinds.rs`). Uses only the fault state.

pub use crate::decisions::fault_kinds::FailStopMode;
use crate::faults::{FaultKind, FaultState, MAX_FAIL_STOP_LIVES};
use crate::prelude::*;

/// Commits after the first injected error from which, under [`FailStopMode::Auto`], a
/// non-zero stop is a failure: one commit is what a careful program's clean-up may make before
/// it stops (SQLite rolls its journal back into the database and syncs it, then exits with
/// `SQLITE_IOERR`); a second is working on.
pub const AUTO_COMMITS: u64 = 2;

/// How a life that stops after an injected fault is treated (see [`FaultState::fail_stop`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FailStop {
    /// Not a fail-stop: the exit stands as the life's verdict.
    No,
    /// A fail-stop: the program is restarted there on its disk as it left it (what it wrote
    /// and did not sync is kept, as a process restart keeps the page cache; what a failed sync
    /// dropped is not); the words say where.
    Restart(String),
    /// A fail-stop that ends the run (the lives are used up): it is not a failure by itself.
    Stands(String),
}

impl FaultState {
    /// The first injected I/O error of this life, in words (`eio on write #1 to /data/wal`).
    pub(crate) fn injected_error(&self) -> Option<&str> {
        self.ledger.iter().find(|r| matches!(r.kind, FaultKind::Eio | FaultKind::Enospc)).map(|r| r.point.as_str())
    }

    /// A write to `path` succeeded: noted when it follows an injected error and the faults may
    /// strike `path`.
    pub(crate) fn note_write(&mut self, path: &str) {
        if !self.wrote_after_error && self.faultable(path) && self.injected_error().is_some() {
            self.wrote_after_error = true;
        }
    }

    /// A durable operation on `path` succeeded: a commit after the error when a write came
    /// before it since the error or the previous commit, and the faults may strike `path`.
    pub(crate) fn note_durable(&mut self, path: &str) {
        if self.wrote_after_error && self.faultable(path) {
            self.wrote_after_error = false;
            self.durable_after_error = self.durable_after_error.saturating_add(1);
        }
    }

    /// What a life that ends with `exit` is, under the fail-stop rule and the configured
    /// [`FailStopMode`]: a fail-stop is restarted there (so what it acknowledged is checked
    /// after the restart), or, once the run has had [`MAX_FAIL_STOP_LIVES`] lives, ends the
    /// run and is not a failure by itself. When the rule finds a failure instead, the second
    /// value says why.
    pub fn fail_stop(&self, exit: &crate::ExitStatus) -> (FailStop, Option<String>) {
        if matches!(exit, crate::ExitStatus::Exited { code: 0 }) {
            return (FailStop::No, None);
        }
        let Some(fault) = self.injected_error() else { return (FailStop::No, None) };
        let how = match exit {
            crate::ExitStatus::Exited { code } => format!("status {code}"),
            crate::ExitStatus::Signaled { name, .. } => name.clone(),
        };
        let failed =
            |why: String| (FailStop::No, Some(format!("{how} after {fault} is a failure, not a fail-stop: {why}")));
        if self.fail_stop_is_failure {
            return failed("the program declared it so (the SDK's fail_stop_is_failure)".into());
        }
        match &self.config.fail_stop {
            FailStopMode::Always => {}
            FailStopMode::Never => return failed("--fail-stop never".into()),
            FailStopMode::Auto if self.durable_after_error >= AUTO_COMMITS => {
                return failed(format!(
                    "it committed {} time(s) after the error (wrote, then made it durable), so it went on working \
                     (--fail-stop always counts it as a fail-stop)",
                    self.durable_after_error
                ));
            }
            FailStopMode::Auto => {}
            FailStopMode::Exit(codes) => match exit {
                crate::ExitStatus::Exited { code } if codes.contains(code) => {}
                _ => return failed(format!("--fail-stop {} does not name it", self.config.fail_stop.words())),
            },
        }
        let words = format!("at its fail-stop ({how}) after {fault}");
        let lives = 1 + self.previous.iter().filter(|r| r.kind == FaultKind::Crash).count();
        if lives >= MAX_FAIL_STOP_LIVES {
            (FailStop::Stands(words), None)
        } else {
            (FailStop::Restart(words), None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::{FaultConfig, FaultRecord};
    use crate::ExitStatus;

    fn errored(mode: FailStopMode, after: u64) -> FaultState {
        let mut f = FaultState::new(FaultConfig { fail_stop: mode, ..FaultConfig::default() }, 1);
        f.ledger.push(FaultRecord {
            kind: FaultKind::Eio,
            point: "eio on write #3 to /db/journal".into(),
            syscall_index: 7,
            path: Some("/db/journal".into()),
            selected: true,
            applied: true,
            observed: false,
        });
        f.durable_after_error = after;
        f
    }

    const ONE: ExitStatus = ExitStatus::Exited { code: 1 };
    const TWO: ExitStatus = ExitStatus::Exited { code: 2 };

    fn restarts(f: &FaultState, exit: &ExitStatus) -> bool {
        matches!(f.fail_stop(exit).0, FailStop::Restart(_))
    }

    #[test]
    fn auto_is_a_fail_stop_only_when_nothing_durable_followed_the_error() {
        assert!(restarts(&errored(FailStopMode::Auto, 0), &ONE), "a server that stops on its WAL error");
        assert!(restarts(&errored(FailStopMode::Auto, 1), &ONE), "a clean-up commit before the stop");
        let (stop, why) = errored(FailStopMode::Auto, 4).fail_stop(&ONE);
        assert_eq!(stop, FailStop::No, "a program that went on committing, then reported a loss");
        let why = why.unwrap();
        assert!(why.contains("status 1 after eio on write #3 to /db/journal") && why.contains("committed 4"), "{why}");
        assert_eq!(errored(FailStopMode::Auto, 4).fail_stop(&ExitStatus::Exited { code: 0 }), (FailStop::No, None));
    }

    #[test]
    fn never_always_and_exit_codes_decide_as_the_user_said() {
        assert_eq!(errored(FailStopMode::Never, 0).fail_stop(&ONE).0, FailStop::No);
        assert!(restarts(&errored(FailStopMode::Always, 9), &ONE));
        let codes = FailStopMode::Exit(vec![2, 3]);
        assert!(restarts(&errored(codes.clone(), 9), &TWO));
        assert_eq!(errored(codes, 0).fail_stop(&ONE).0, FailStop::No);
        let mut sdk = errored(FailStopMode::Always, 0);
        sdk.fail_stop_is_failure = true;
        assert_eq!(sdk.fail_stop(&TWO).0, FailStop::No, "the SDK's call is never");
    }

    #[test]
    fn no_injected_error_is_no_fail_stop() {
        let f = FaultState::new(FaultConfig { fail_stop: FailStopMode::Always, ..FaultConfig::default() }, 1);
        assert_eq!(f.fail_stop(&ONE), (FailStop::No, None));
    }

    #[test]
    fn modes_read_and_write_their_words() {
        for w in ["auto", "never", "always", "exit=2,3"] {
            assert_eq!(FailStopMode::parse(w).unwrap().words(), w);
        }
        for bad in ["sometimes", "exit=", "exit=0", "exit=2,x", "exit=300"] {
            assert!(FailStopMode::parse(bad).is_err(), "{bad}");
        }
    }
}
