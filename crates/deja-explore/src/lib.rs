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
//! log, and the command that reproduces it. [`replay_under`] and [`minimize_under`] work from
//! that file.
//! Every rule of a campaign is a function of its seed: the same seed and the same number of
//! rounds give the same corpus, coverage and bugs.

use std::path::PathBuf;

use snafu::Snafu;

pub mod blockmap;
pub mod campaign;
pub mod cluster;
pub mod fail_stops;
pub mod features;
pub mod input;
pub mod menu;
pub mod merge;
pub mod minimize;
pub mod program;
pub mod signature;
pub mod sweep;

pub use campaign::{saved, write_reports, Campaign, CampaignConfig, Mode, Progress, Strategy, Subject, INPUTS_DIR};
pub use cluster::{explore_cluster, minimize_cluster, ClusterBug, ClusterInput, ClusterSubject, ClusterTarget};
pub use input::{first_restart_difference, BugFile, Input, Outcome, Target};
pub use merge::merge;
pub use minimize::minimize_under;
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
#[derive(Debug, Snafu)]
#[snafu(visibility(pub))]
pub enum ExploreError {
    /// The program could not be run.
    #[snafu(transparent)]
    Run {
        /// Why.
        source: deja_vmm::RunError,
    },
    /// A cluster file was refused.
    #[snafu(transparent)]
    ClusterFile {
        /// Why.
        #[snafu(source(from(deja_cluster::ConfigError, Box::new)))]
        source: Box<deja_cluster::ConfigError>,
    },
    /// A cluster could not be run.
    #[snafu(transparent)]
    Cluster {
        /// Why.
        #[snafu(source(from(deja_cluster::ClusterError, Box::new)))]
        source: Box<deja_cluster::ClusterError>,
    },
    /// A file of the campaign could not be written.
    #[snafu(display("{}: {source}", path.display()))]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: deja_format::FormatError,
    },
    /// A directory of the campaign could not be made.
    #[snafu(display("{}: {source}", path.display()))]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A bug file or checkpoint failed one of its checks (json, schema, seal, fields).
    #[snafu(transparent)]
    Artifact {
        /// Why.
        source: deja_format::json::ArtifactError,
    },
    /// A run went past the no-progress watchdog's limit (`deja_vmm::watchdog`).
    #[snafu(display("{why}"))]
    NoProgress {
        /// What the watchdog saw, as [`no_progress_after`] says it.
        why: String,
    },
    /// Neither a program nor a cluster was given.
    #[snafu(display("nothing to explore"))]
    NothingToExplore,
    /// The program given is not the one of the bug.
    #[snafu(display(
        "{path} is not the program of this bug: it changed since the bug was found (its BLAKE3 is now {found}, the \
         bug needs {expected}); give the program it was found with, with --program PATH"
    ))]
    NotTheProgram {
        /// The program given.
        path: String,
        /// Its BLAKE3.
        found: String,
        /// The bug's program's BLAKE3.
        expected: String,
    },
    /// A file the bug declares is missing or differs.
    #[snafu(display(
        "the declared file {guest} {}; the bug needs BLAKE3 {expected} (give the file with --file HOST:{guest}, or put it in {} beside the bug file, named by that hash)",
        found.as_ref().map_or("is missing".to_string(), |h| format!("has BLAKE3 {h} here")),
        crate::campaign::INPUTS_DIR
    ))]
    DeclaredFile {
        /// Its guest path.
        guest: String,
        /// BLAKE3 of the file the bug was found with.
        expected: String,
        /// BLAKE3 of the file given now, if one was.
        found: Option<String>,
    },
    /// The root given (an image or a directory tree) is not the one of the bug.
    #[snafu(display(
        "the root {path} {}; the bug needs BLAKE3 {expected} (give it with --image or --root, or put an image in {} \
         beside the bug file, named by that hash)",
        found.as_ref().map_or("is missing".to_string(), |h| format!("has BLAKE3 {h} here")),
        crate::campaign::INPUTS_DIR
    ))]
    NotTheRoot {
        /// Where the bug's root was read from.
        path: String,
        /// BLAKE3 of the root the bug was found with.
        expected: String,
        /// BLAKE3 of the root given now, if one was.
        found: Option<String>,
    },
    /// A cluster's binaries are not those of the bug.
    #[snafu(display("the binaries of {} are not the ones of this bug: {why}", path.display()))]
    NotTheBinaries {
        /// The cluster file.
        path: PathBuf,
        /// Which differ, and how.
        why: String,
    },
    /// A file of a cluster node (declared, or a library deja declared for its binary) differs
    /// from the one the bug records, and the campaign's `inputs/` does not have it.
    #[snafu(display(
        "node {node}'s file {guest} {}; the bug needs BLAKE3 {expected} (put that file in {} beside the bug file, named by its hash)",
        found.as_ref().map_or("is missing".to_string(), |h| format!("has BLAKE3 {h} here")),
        crate::campaign::INPUTS_DIR
    ))]
    NodeFile {
        /// The node.
        node: String,
        /// The file's guest path.
        guest: String,
        /// BLAKE3 of the file the bug was found with.
        expected: String,
        /// BLAKE3 of the file here, if there is one.
        found: Option<String>,
    },
    /// A node's binary (or file) with the BLAKE3 the bug records is nowhere to be found.
    #[snafu(display("node {node} needs {what} with BLAKE3 {blake3}: {looked}; give it with --program {node}=PATH"))]
    BinaryNotFound {
        /// The node.
        node: String,
        /// `its binary walkv-buggy`, `its file /etc/app.toml`.
        what: String,
        /// The BLAKE3 the bug records.
        blake3: String,
        /// Where deja looked and what it found there.
        looked: String,
    },
    /// The cluster file a bug names cannot be read, and the bug does not carry it.
    #[snafu(display(
        "{source}; give the cluster file with --config FILE (or --program FILE for replay and minimize): the bug \
         needs one with BLAKE3 {blake3}"
    ))]
    ClusterFileMissing {
        /// Why it could not be read.
        #[snafu(source(from(deja_cluster::ConfigError, Box::new)))]
        source: Box<deja_cluster::ConfigError>,
        /// The BLAKE3 the bug records for it.
        blake3: String,
    },
    /// A moment of a bug's run was asked for after the run had ended.
    #[snafu(display("{problem}"))]
    MomentAfterEnd {
        /// When the run ended, and how.
        problem: String,
    },
    /// A cluster reached its fork point another way than the bootstrap did.
    #[snafu(display(
        "the cluster did not reach its fork point the way the bootstrap did: it does not run the same way twice"
    ))]
    ClusterNotDeterministic,
    /// A program's fork took another number of decisions than the bootstrap's.
    #[snafu(display(
        "the fork at syscall {fork_at} took {found} decisions, the bootstrap's {expected}: the program does not run \
         the same way twice"
    ))]
    ProgramNotDeterministic {
        /// The fork's syscall.
        fork_at: u64,
        /// Decisions the fork took.
        found: u64,
        /// Decisions the bootstrap took.
        expected: u64,
    },
    /// A bug's input does not fail the same way when run again: nothing to minimize.
    #[snafu(display("bug {bug} does not reproduce with its own input; nothing to minimize"))]
    DoesNotReproduce {
        /// The bug's id.
        bug: String,
    },
    /// A cluster bug's faults as a fixed schedule do not fail the same way.
    #[snafu(display(
        "bug {bug}: its {faults} faults as a fixed schedule do not fail the same way (the failure also depends on \
         the random faults' decisions); not minimized"
    ))]
    ScheduleDoesNotReproduce {
        /// The bug's id.
        bug: String,
        /// Its faults.
        faults: usize,
    },
    /// The minimized input or schedule does not fail again.
    #[snafu(display("the minimized {what} did not fail again on replay"))]
    MinimizedDoesNotFail {
        /// `input` or `schedule`.
        what: &'static str,
    },
    /// A checkpoint started on a host of another CPU fingerprint.
    #[snafu(display(
        "{} was started on a host with CPU fingerprint {recorded}, and this host is {here} ({differences}); resume \
         it there, or start a new campaign here",
        checkpoint.display()
    ))]
    OtherHost {
        /// The checkpoint.
        checkpoint: PathBuf,
        /// The fingerprint it records.
        recorded: String,
        /// This host's.
        here: String,
        /// How the two differ.
        differences: String,
    },
    /// A worker thread is gone.
    #[snafu(display("a worker thread stopped"))]
    WorkerStopped,
    /// A worker could not set up its fork.
    #[snafu(display("worker {worker} could not start: {why}"))]
    WorkerStart {
        /// The worker.
        worker: usize,
        /// Why (every input of the worker reports it, so it is kept as text).
        why: String,
    },
    /// `--out` already holds a campaign and `--resume` was not given.
    #[snafu(display(
        "{} already holds a campaign; add --resume to continue it or choose another --out",
        out.display()
    ))]
    CampaignExists {
        /// The directory.
        out: PathBuf,
    },
    /// A checkpoint of a schema version this deja does not continue.
    #[snafu(display(
        "{source}. This deja cannot continue its corpus; its bug files still replay (deja replay \
         {}/bug-<id>.json). Start a new campaign with another --out, or move this directory away",
        out.display()
    ))]
    CheckpointVersion {
        /// The campaign directory.
        out: PathBuf,
        /// The schema check's error.
        source: Box<deja_format::json::ArtifactError>,
    },
    /// A checkpoint that these settings cannot continue.
    #[snafu(display("{} {mismatch}; it cannot be resumed with these settings", checkpoint.display()))]
    NotResumable {
        /// The checkpoint.
        checkpoint: PathBuf,
        /// What differs.
        mismatch: Mismatch,
    },
    /// A `report.json` that is not a campaign report.
    #[snafu(display("{}: not a campaign report: {source}", path.display()))]
    NotAReport {
        /// The file.
        path: PathBuf,
        /// The parser's complaint.
        source: serde_json::Error,
    },
    /// A directory without a campaign.
    #[snafu(display("{} holds no campaign (no report.json, no checkpoint.json)", dir.display()))]
    NoCampaign {
        /// The directory.
        dir: PathBuf,
    },
    /// `deja merge` without directories.
    #[snafu(display("give the campaign directories to merge"))]
    NothingToMerge,
    /// `deja merge` into a directory that holds a campaign.
    #[snafu(display("{} already holds a campaign; merge into a new directory", out.display()))]
    MergeInto {
        /// The directory.
        out: PathBuf,
    },
    /// Two campaigns that are not shards of one.
    #[snafu(display(
        "{} explored with another {what} than {}; only runs of one campaign merge",
        dir.display(),
        first.display()
    ))]
    MergeDiffers {
        /// The directory that differs.
        dir: PathBuf,
        /// The first directory.
        first: PathBuf,
        /// What differs.
        what: String,
    },
    /// One shard given twice.
    #[snafu(display(
        "{} and {} are the same shard of the same campaign (seed {seed}{shard}): merging them would count its \
         rounds twice",
        a.display(),
        b.display()
    ))]
    SameShard {
        /// One directory.
        a: PathBuf,
        /// The other.
        b: PathBuf,
        /// Their seed.
        seed: u64,
        /// `, shard i/n`, or nothing.
        shard: String,
    },
}

/// What a checkpoint was started with that this invocation differs in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mismatch {
    /// Another subject (program or cluster, or another BLAKE3).
    Subject {
        /// The checkpoint's kind.
        kind: String,
    },
    /// Another strategy or mode.
    Strategy {
        /// The checkpoint's strategy.
        strategy: &'static str,
        /// The checkpoint's mode.
        mode: &'static str,
    },
    /// Another number of workers.
    Jobs {
        /// The checkpoint's.
        jobs: u64,
    },
    /// Another shard.
    Shard {
        /// The checkpoint's.
        shard: Option<(u64, u64)>,
    },
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Mismatch::Subject { kind } => write!(f, "belongs to another {kind}"),
            Mismatch::Strategy { strategy, mode } => write!(f, "was started with --strategy {strategy} --mode {mode}"),
            Mismatch::Jobs { jobs } => write!(
                f,
                "was started with --jobs {jobs} (a campaign's rounds depend on its number of workers: resume it with \
                 --jobs {jobs})"
            ),
            Mismatch::Shard { shard: None } => write!(f, "was started with no --shard"),
            Mismatch::Shard { shard: Some((i, n)) } => write!(f, "was started with --shard {i}/{n}"),
        }
    }
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
            ExploreError::NoProgress { why } => Some(why.clone()),
            ExploreError::Run {
                source: deja_vmm::RunError::Vm { source: deja_vmm::VmError::NoProgress { syscalls, .. } },
            } => Some(no_progress_after(None, *syscalls)),
            _ => None,
        }
    }

    /// Whether the error refuses what it was given (files that do not belong together, a
    /// campaign that cannot go on), rather than deja failing or a run making no progress.
    pub fn is_refusal(&self) -> bool {
        !matches!(
            self,
            ExploreError::Run { .. }
                | ExploreError::Write { .. }
                | ExploreError::CreateDir { .. }
                | ExploreError::NoProgress { .. }
        )
    }
}

/// Replays a bug file from scratch under `settings`: the same program, seed, steering point and
/// input.
pub fn replay_under(
    bug: &BugFile,
    target: &Target,
    settings: &deja_vmm::Settings,
    sink: &mut dyn FnMut(deja_kernel::Stream, &[u8]),
) -> Result<Outcome, ExploreError> {
    input::run_fresh_under(target, settings, bug.fork_at_syscall, &bug.input, sink)
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
