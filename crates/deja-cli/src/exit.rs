//! The one table of deja's exit codes: every command returns an [`Exit`].
//!
//! The README's "Exit codes" table is [`Exit::TABLE`] (a unit test compares them row by row).

/// How a deja command ended, and the exit code that says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Clean: the program exited 0, no bug was found, the failure did not reproduce, the patch
    /// fixed it, the certificate is intact, every restart held.
    Clean,
    /// The failure is there: bugs found, the failure reproduced or still reproduces (or a new one
    /// appeared), a restart failed, a waited node failed or the clients' history is not
    /// linearizable, a certificate was tampered with, committed results differ.
    Failure,
    /// Bad command line (clap's own code): a flag, value or combination that cannot be run as
    /// asked, a `DEJA_*` setting with a value it does not take, a cluster file that says
    /// something impossible, an address nothing can listen on.
    Usage,
    /// The evidence is incomplete: nothing can be concluded either way.
    Incomplete,
    /// A cluster is stuck: no node could run any more.
    Stuck,
    /// The program ran the watchdog's limit of host time without a syscall or an exception.
    NoProgress,
    /// An SDK assertion failed (an `always` that did not hold, an `unreachable` reached).
    AssertionFailed,
    /// `--audit` found runs that diverged.
    AuditDiverged,
    /// deja itself failed (no `/dev/kvm`, a monitor error, a file it could not write).
    DejaFailed,
    /// The program or an artifact could not be loaded, or failed its checks.
    NotLoadable,
    /// The program or a declared file does not exist.
    NotFound,
    /// The program's own exit code (128+N when it died of signal N), passed through.
    Program(i32),
}

impl Exit {
    /// The table the README shows, every outcome once with what it means command by command: the
    /// program's own codes first, then deja's in order.
    pub const TABLE: [(Exit, &'static str); 12] = [
        (
            Exit::Program(0),
            "`deja run`: the program's own exit code; 128+N when it died of signal N (SIGSEGV → 139, \
                      SIGILL → 132, SIGABRT → 134); `deja build`: cargo's",
        ),
        (
            Exit::Clean,
            "`deja explore`, `deja merge`: no bug; `deja replay`: not reproduced; `deja check`: \
                      `FIXED_FOR_THIS_CAPSULE`; `deja verify-certificate`: intact; `--crash-sweep`: every restart \
                      held; a cluster file: every waited node exited 0",
        ),
        (
            Exit::Failure,
            "the failure is there: `deja explore`, `deja merge`: bugs found; `deja replay`: reproduced; \
                      `deja check`: `STILL_REPRODUCES` or `NEW_FAILURE`; `deja verify-certificate`: tampered; \
                      `--crash-sweep`: a restart failed; a cluster file: a waited node failed or the clients' \
                      history is not linearizable; `deja dogfood --check`: the results differ",
        ),
        (
            Exit::Usage,
            "bad command line: a flag, value or combination that cannot run as asked, a `DEJA_*` \
                      setting with a value it does not take, a cluster file that says something impossible, an \
                      address `deja explore --serve` or `deja serve` cannot listen on",
        ),
        (
            Exit::Incomplete,
            "the evidence is incomplete: `deja check`: `EVIDENCE_INCOMPLETE` or `NOT_FAULT_INDUCED` \
                      (or a bug file that does not fail on the base); `deja replay`: a missing or different \
                      program; `deja minimize`: nothing verified to minimize; `--crash-sweep`: the sweep cannot \
                      tell; `deja explore`: no round ran, or the directory holds another campaign or a checkpoint it \
                      cannot continue; `deja merge`: the directories do not belong together; `deja serve`: the directory holds no campaign; \
                      `deja verify-certificate`: unreadable; a cluster file: the virtual-time budget ran out",
        ),
        (Exit::Stuck, "a cluster file: no node could run any more"),
        (
            Exit::NoProgress,
            "`NO_PROGRESS`: the program ran `DEJA_NO_PROGRESS_S` seconds of host time (default 30; 0 = \
                      no limit) without a syscall or an exception; `deja explore` counts such rounds in its \
                      report and never calls them bugs, and exits 122 only when even its first run made no \
                      progress",
        ),
        (Exit::AssertionFailed, "an SDK assertion failed (an `always` that did not hold, an `unreachable` reached)"),
        (
            Exit::AuditDiverged,
            "`--audit` found runs that diverged; `deja explore` found no bug, but a failing round did not \
                      replay the same from scratch, or a round `--verify-forks` checked differed from its booted run \
                      (a determinism defect of deja, with its evidence in the report)",
        ),
        (
            Exit::DejaFailed,
            "deja itself failed (no `/dev/kvm`, a monitor error, a file it could not write; `deja \
                      doctor`: this host cannot run deja)",
        ),
        (
            Exit::NotLoadable,
            "the program or artifact could not be loaded (not ELF, a dynamic loader or library that cannot be found, 32-bit, \
                      malformed; a damaged, truncated or newer snapshot, capsule, bug file, cluster bug file or \
                      checkpoint)",
        ),
        (Exit::NotFound, "the program or a declared file does not exist"),
    ];

    /// The process exit code.
    pub fn code(self) -> i32 {
        match self {
            Exit::Clean => 0,
            Exit::Failure => 1,
            Exit::Usage => 2,
            Exit::Incomplete => 3,
            Exit::Stuck => 4,
            Exit::NoProgress => 122,
            Exit::AssertionFailed => 123,
            Exit::AuditDiverged => 124,
            Exit::DejaFailed => 125,
            Exit::NotLoadable => 126,
            Exit::NotFound => 127,
            Exit::Program(code) => code,
        }
    }

    /// The outcome's name in the table.
    pub fn name(self) -> &'static str {
        match self {
            Exit::Clean => "clean",
            Exit::Failure => "failure",
            Exit::Usage => "usage",
            Exit::Incomplete => "incomplete",
            Exit::Stuck => "stuck",
            Exit::NoProgress => "no-progress",
            Exit::AssertionFailed => "assertion-failed",
            Exit::AuditDiverged => "audit-diverged",
            Exit::DejaFailed => "deja-failed",
            Exit::NotLoadable => "not-loadable",
            Exit::NotFound => "not-found",
            Exit::Program(_) => "program",
        }
    }

    /// 0 as [`Exit::Clean`], 1 as [`Exit::Failure`]: a yes/no outcome.
    pub fn failure_if(failed: bool) -> Exit {
        if failed {
            Exit::Failure
        } else {
            Exit::Clean
        }
    }

    /// The table as the README writes it (markdown, with its header).
    pub fn markdown() -> String {
        let mut s = String::from("| code | name | meaning |\n|---|---|---|\n");
        for (e, meaning) in &Exit::TABLE {
            let code = match e {
                Exit::Program(_) => "0–255".to_string(),
                e => e.code().to_string(),
            };
            s.push_str(&format!("| {code} | `{}` | {meaning} |\n", e.name()));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_lists_every_outcome_once() {
        let names: Vec<&str> = Exit::TABLE.iter().map(|(e, _)| e.name()).collect();
        let mut codes: Vec<i32> = Exit::TABLE[1..].iter().map(|(e, _)| e.code()).collect();
        assert!(codes.windows(2).all(|w| w[0] < w[1]), "deja's codes in order, none twice: {codes:?}");
        codes.dedup();
        assert_eq!(codes.len() + 1, names.len());
        // Every variant has its row (a new variant fails to compile here until it is added).
        for e in [Exit::Clean, Exit::Program(7)] {
            let row = match e {
                Exit::Clean
                | Exit::Failure
                | Exit::Usage
                | Exit::Incomplete
                | Exit::Stuck
                | Exit::NoProgress
                | Exit::AssertionFailed
                | Exit::AuditDiverged
                | Exit::DejaFailed
                | Exit::NotLoadable
                | Exit::NotFound
                | Exit::Program(_) => e.name(),
            };
            assert!(names.contains(&row), "{row}");
        }
        assert_eq!(names.len(), 12, "one row per variant");
        assert_eq!(Exit::Program(139).code(), 139);
    }

    #[test]
    fn the_readme_table_is_the_enum() {
        let readme = include_str!("../../../README.md");
        let start = readme.find("### Exit codes").expect("the README has an Exit codes section");
        let section = &readme[start..];
        let body = &section[section.find('\n').unwrap_or(0)..];
        let end = body.find("\n#").unwrap_or(body.len());
        let table: String = body[..end].lines().filter(|l| l.starts_with('|')).map(|l| format!("{l}\n")).collect();
        assert_eq!(
            table,
            Exit::markdown(),
            "the README's exit-code table differs from deja-cli's exit.rs; put this in its place:\n{}",
            Exit::markdown()
        );
    }
}
