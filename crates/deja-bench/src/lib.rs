//! `deja bench`: deja against native execution, measured side by side in one process, with the
//! figures that need a fresh process each measured in `deja` processes it starts.
//!
//! Wall-clock time appears here and nowhere else that shapes a run: these figures describe the
//! host, not the guest.
//!
//! Owns the measurements and the figures they give, one JSON document ([`figures`], schema
//! `deja.bench/1`), and the two parts that run in processes of their own ([`forked_cluster`],
//! [`late_forks`]). Uses `deja-vmm`'s sessions and forks, `deja-cluster`'s runs and forks,
//! `deja-explore`'s campaigns, `deja-judge`'s checks, `deja-history`'s checker and
//! `deja-rewrite`'s planner. It prints nothing; of the command line it knows only the `deja`
//! executable it is given ([`BenchOptions::deja`]) and the commands it starts it with (`deja
//! run` to time the whole command, `deja bench --forked-cluster-only` and `--late-forks-only`
//! under each vDSO setting), each under the bench's settings ([`deja_vmm::Settings::as_env`]).
//!
//! The modules: `timing` (medians, one guest timed in deja or natively, a `deja` process),
//! `figures` (the whole set, in the order measured), `costs` (CPUID faulting, rewriting, block
//! coverage), `storage` (crash sweeps and the whole fault menu on the storage workloads),
//! `cluster` (the reference cluster, booted and forked rounds, the vDSO, workers, cluster
//! checks, the history checker), `late` (later forks) and `placement` (the kernel in the guest
//! against the kernel on the host).

use std::path::{Path, PathBuf};

use deja_vmm::Settings;
use snafu::Snafu;

mod cluster;
mod costs;
mod figures;
mod late;
mod placement;
mod storage;
mod timing;

/// What `deja bench` measures with.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// The directory holding the example guests (`target/guests`, where `cargo xtask guests`
    /// puts them); the cluster files are read from `examples/clusters/` two levels above it, at
    /// the root of the checkout.
    pub guests: PathBuf,
    /// The `deja` executable that the figures measured in fresh processes start.
    pub deja: PathBuf,
    /// Millions of steps for the CPU-bound example.
    pub steps: u64,
    /// Syscalls for the round-trip measurement (and SDK calls in deja).
    pub syscalls: u64,
    /// Repetitions of each measurement, the median reported (at least 1).
    pub repeat: u32,
    /// The settings of every VM booted and every `deja` process started, unless a figure
    /// compares settings.
    pub settings: Settings,
    /// The kernel image of the guest placement (`cargo xtask guest-kernel`), when built: the
    /// placements are compared only with it.
    pub kernel_image: Option<PathBuf>,
    /// Every campaign, sweep and steered series at a tenth of its rounds (at least 4), every
    /// check kept: whether each figure can be measured, in a fraction of the time, with
    /// figures too noisy to quote (`deja bench --quick`, what the README's test runs).
    pub quick: bool,
}

/// `rounds`, or a tenth of them (at least 4) when the bench is `quick`.
pub(crate) fn sized(quick: bool, rounds: u64) -> u64 {
    match quick {
        true => (rounds / 10).max(4),
        false => rounds,
    }
}

impl BenchOptions {
    /// The root of the checkout the guests were built in (two levels above them).
    fn root(&self) -> PathBuf {
        self.guests.parent().and_then(Path::parent).map(Path::to_path_buf).unwrap_or_default()
    }

    /// The reference cluster's file, `examples/clusters/register-fixed.toml`.
    fn register(&self) -> PathBuf {
        self.root().join("examples/clusters/register-fixed.toml")
    }
}

/// Every figure, measured side by side: the JSON `deja bench --json` prints (schema
/// `deja.bench/1`).
pub fn figures(opts: &BenchOptions) -> Result<serde_json::Value, BenchError> {
    figures::all(opts)
}

/// The register cluster's rounds booted and forked alone, under `opts.settings`: what `deja
/// bench --forked-cluster-only` prints, and what [`figures`] measures under each vDSO setting
/// in processes of its own.
pub fn forked_cluster(opts: &BenchOptions) -> Result<serde_json::Value, BenchError> {
    cluster::forked_cluster_figures(&opts.register(), &opts.settings, opts.quick)
}

/// Campaigns with later forks off and on, under `opts.settings`: what `deja bench
/// --late-forks-only` prints, and what [`figures`] measures under each vDSO setting in
/// processes of its own.
pub fn late_forks(opts: &BenchOptions) -> Result<serde_json::Value, BenchError> {
    late::campaigns(&opts.guests, &opts.register(), &opts.settings, opts.quick)
}

/// Why a measurement could not be made. Every figure is checked as it is measured (the same
/// digests, the expected verdicts, every round run): a check that fails stops the bench too.
#[derive(Debug, Snafu)]
#[snafu(visibility(pub(crate)))]
pub enum BenchError {
    /// A guest could not be read.
    #[snafu(display("cannot read {}: {source} (build the guests with `cargo xtask guests`)", path.display()))]
    Guest {
        /// The guest.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The reference cluster's file is not where the guests say the checkout is.
    #[snafu(display("examples/clusters/register-fixed.toml not found next to {}", guests.display()))]
    NoClusterFile {
        /// The guests' directory.
        guests: PathBuf,
    },
    /// A guest could not be booted or run in deja.
    #[snafu(display("{what}: {source}"))]
    Run {
        /// What was run: the guest, the fork.
        what: String,
        /// Why.
        #[snafu(source(from(deja_vmm::RunError, Box::new)))]
        source: Box<deja_vmm::RunError>,
    },
    /// KVM or the host's profile failed: a fork's reset, the host's CPUID faulting or remedy.
    #[snafu(display("{what}: {source}"))]
    Vm {
        /// What failed.
        what: &'static str,
        /// Why.
        #[snafu(source(from(deja_vmm::VmError, Box::new)))]
        source: Box<deja_vmm::VmError>,
    },
    /// A guest exited with a failure in deja.
    #[snafu(display("{} failed under deja: {exit}", path.display()))]
    FailedInDeja {
        /// The guest.
        path: PathBuf,
        /// How it ended.
        exit: String,
    },
    /// A run in the guest placement failed.
    #[snafu(display("{what} in the guest placement: {source}"))]
    Placement {
        /// The run.
        what: String,
        /// Why.
        #[snafu(source(from(deja_vmm::placement::PlacementError, Box::new)))]
        source: Box<deja_vmm::placement::PlacementError>,
    },
    /// A guest could not be started natively.
    #[snafu(display("cannot start {}: {source}", path.display()))]
    StartNative {
        /// The guest.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A guest exited with a failure natively.
    #[snafu(display("{} failed natively", path.display()))]
    FailedNatively {
        /// The guest.
        path: PathBuf,
    },
    /// The rewriter's planner refused a guest.
    #[snafu(display("{program}: {source}"))]
    Plan {
        /// The guest.
        program: String,
        /// Why.
        source: deja_rewrite::PlanError,
    },
    /// A campaign could not be run, or its bug read.
    #[snafu(display("{what}: {source}"))]
    Explore {
        /// The campaign.
        what: String,
        /// Why.
        #[snafu(source(from(deja_explore::ExploreError, Box::new)))]
        source: Box<deja_explore::ExploreError>,
    },
    /// A cluster file was refused.
    #[snafu(display("{}: {source}", path.display()))]
    ClusterFile {
        /// The file.
        path: PathBuf,
        /// Why.
        #[snafu(source(from(deja_cluster::ConfigError, Box::new)))]
        source: Box<deja_cluster::ConfigError>,
    },
    /// A cluster could not be run or forked.
    #[snafu(display("{what}: {source}"))]
    Cluster {
        /// What was run.
        what: &'static str,
        /// Why.
        #[snafu(source(from(deja_cluster::ClusterError, Box::new)))]
        source: Box<deja_cluster::ClusterError>,
    },
    /// A `deja` process could not be started.
    #[snafu(display("cannot start {} for {what}: {source}", deja.display()))]
    Spawn {
        /// The executable.
        deja: PathBuf,
        /// What it was to do: `deja run hello`, `deja bench --late-forks-only`.
        what: String,
        /// Why.
        source: std::io::Error,
    },
    /// A `deja` process failed.
    #[snafu(display("{what} failed: {stderr}"))]
    ChildFailed {
        /// What it was to do.
        what: String,
        /// What it printed on stderr.
        stderr: String,
    },
    /// A `deja` process did not print the JSON it was asked for.
    #[snafu(display("{what} printed no report ({source}): {stderr}"))]
    NoReport {
        /// What it was to do.
        what: String,
        /// Why its output is not the report.
        source: serde_json::Error,
        /// What it printed on stderr.
        stderr: String,
    },
    /// A campaign's report could not be turned into JSON, to compare two campaigns.
    #[snafu(display("the {workload} campaign's report as JSON: {source}"))]
    CampaignJson {
        /// The campaign's workload.
        workload: String,
        /// Why.
        source: serde_json::Error,
    },
    /// The dirty guest did not mark its fork point and its end.
    #[snafu(display("the dirty guest made {found} marks instead of 2"))]
    Marks {
        /// The marks it made.
        found: usize,
    },
    /// The crash run of the key-value store did not crash and restart once.
    #[snafu(display("the crash run had {found} lives instead of 2"))]
    Lives {
        /// The lives it had.
        found: usize,
    },
    /// A `deja check` whose candidate is fixed gave another verdict.
    #[snafu(display("{what} gave {verdict}"))]
    Verdict {
        /// The check.
        what: &'static str,
        /// The verdict it gave.
        verdict: &'static str,
    },
    /// The reference cluster did not complete.
    #[snafu(display("the reference cluster did not complete: {outcome}"))]
    Incomplete {
        /// How it ended.
        outcome: String,
    },
    /// A forked round of the register cluster differs from the same round booted.
    #[snafu(display("forked round {round} gave digest {forked} where the booted one gave {booted}"))]
    Digest {
        /// The round.
        round: u64,
        /// The forked round's digest.
        forked: String,
        /// The booted round's digest.
        booted: String,
    },
    /// The register cluster has no point where every node called `setup_complete`.
    #[snafu(display("the register cluster never had every node call setup_complete"))]
    NoSetup,
    /// Exploring the buggy register cluster found no split brain to check.
    #[snafu(display("exploring register-buggy for 40 rounds found no split brain"))]
    NoSplitBrain,
    /// A campaign ran another number of rounds than it was asked for.
    #[snafu(display("the {campaign} ran {ran} rounds of {rounds}"))]
    Rounds {
        /// The campaign: `kv campaign on 2 workers`.
        campaign: String,
        /// The rounds it ran.
        ran: u64,
        /// The rounds it was asked for.
        rounds: u64,
    },
    /// A campaign gave another campaign with later forks.
    #[snafu(display(
        "the {workload} campaign on {jobs} worker(s) differs with later forks: {without} without, {with} with"
    ))]
    LateForksDiffer {
        /// The campaign's workload.
        workload: String,
        /// Its workers.
        jobs: u64,
        /// Its fingerprint without later forks.
        without: String,
        /// Its fingerprint with them.
        with: String,
    },
    /// A generated linearizable history was judged otherwise.
    #[snafu(display("the generated history of {operations} operations was judged {verdict}"))]
    History {
        /// Its operations.
        operations: usize,
        /// The verdict, as the checker debug-prints it.
        verdict: String,
    },
}
