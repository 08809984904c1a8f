//! deja's explorer.
//!
//! A campaign explores one program. It runs the program once to its `setup_complete` (or to its
//! start), forks there ([`deja_vmm::Fork`]), and then, round after round:
//!
//! 1. picks an entry of the corpus from the frontier (entries that found new coverage score
//!    higher, entries picked often score lower);
//! 2. mutates its *input*: the overrides of its decision log (SDK random values and choices,
//!    fault decisions, each addressed by its position in the run's decision log) and its fault
//!    plan (crash after durable write K, torn or reordered writes at the crash, EIO on fsync);
//! 3. resets the fork and runs the child with that input to its end (restarting it after an
//!    injected crash);
//! 4. records coverage — SanitizerCoverage edges read from guest memory, bucketed AFL-style, plus
//!    the SDK assertions' outcomes as semantic edges — and the failures.
//!
//! A failure (a failed SDK assertion, a non-zero exit or a fatal signal of the final life) is
//! deduplicated by its signature, replayed from scratch to confirm it gives the same digest, and
//! written as `bug-<id>.json`: binary hash, argv, env, seed, the input and the full decision
//! log, and the command that reproduces it. [`replay`] and [`minimize`] work from that file.
//! Every rule of a campaign is a function of its seed: the same seed and the same number of
//! rounds give the same corpus, coverage and bugs.

pub mod campaign;
pub mod cluster;
pub mod features;
pub mod input;
pub mod menu;
pub mod merge;
pub mod minimize;
pub mod program;
pub mod signature;

pub use campaign::{saved, write_reports, Campaign, CampaignConfig, Mode, Progress, Strategy, Subject};
pub use cluster::{explore_cluster, minimize_cluster, ClusterBug, ClusterInput, ClusterSubject, ClusterTarget};
pub use input::{BugFile, Input, Outcome, Target};
pub use merge::merge;
pub use minimize::minimize;
pub use program::{explore, ProgramSubject};
pub use signature::FailureSignature;

/// The command that replays the bug file at `file`, as bug files and reports give it.
pub fn replay_command(file: &str) -> String {
    format!("{REPLAY} {file}")
}

/// The bug file a [`replay_command`] replays.
pub fn replayed_file(command: &str) -> &str {
    command.strip_prefix(REPLAY).map_or(command, str::trim_start)
}

const REPLAY: &str = "deja replay";

/// Errors of the explorer.
#[derive(Debug, thiserror::Error)]
pub enum ExploreError {
    /// The program could not be run.
    #[error(transparent)]
    Run(#[from] deja_vmm::RunError),
    /// A file of the campaign could not be read or written.
    #[error("{path}: {message}")]
    File {
        /// The file.
        path: String,
        /// What went wrong.
        message: String,
    },
    /// A bug file or checkpoint does not describe this program.
    #[error("{0}")]
    Invalid(String),
    /// A bug file or checkpoint failed one of its checks (json, schema, seal, fields).
    #[error(transparent)]
    Artifact(#[from] deja_format::json::ArtifactError),
    /// A run went past the no-progress watchdog's limit (`deja_vmm::watchdog`).
    #[error("{0}")]
    NoProgress(String),
}

/// What a campaign records of a round the watchdog stopped: only what replays the same (the
/// syscall it stalled after), not the host time or the instruction it happened to be at.
pub(crate) fn no_progress_after(node: Option<&str>, syscalls: u64) -> String {
    let on = node.map_or(String::new(), |n| format!(" on node {n}"));
    format!("NO_PROGRESS{on}: no syscall or exception within the watchdog's limit after syscall {syscalls}")
}

impl ExploreError {
    /// What the watchdog saw, when the run made no progress: such a round is counted, never a
    /// bug and never a failure of the campaign.
    pub fn no_progress(&self) -> Option<String> {
        match self {
            ExploreError::NoProgress(why) => Some(why.clone()),
            ExploreError::Run(deja_vmm::RunError::Vm(deja_vmm::VmError::NoProgress { syscalls, .. })) => {
                Some(no_progress_after(None, *syscalls))
            }
            _ => None,
        }
    }
}

/// Replays a bug file from scratch: the same program, seed, steering point and input.
pub fn replay(
    bug: &BugFile,
    target: &Target,
    sink: &mut dyn FnMut(deja_kernel::Stream, &[u8]),
) -> Result<Outcome, ExploreError> {
    input::run_fresh(target, bug.fork_at_syscall, &bug.input, sink)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_replay_command_gives_back_its_file() {
        for file in ["out/bug-1.json", "/tmp/a b/bug.json", "bug"] {
            assert_eq!(super::replayed_file(&super::replay_command(file)), file);
        }
        assert_eq!(super::replay_command("x.json"), "deja replay x.json");
    }
}
