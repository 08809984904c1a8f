//! `deja explore`, `deja replay` and `deja minimize`.
//!
//! Here: `deja explore` itself and `deja merge`; the arguments of `deja explore` and the
//! campaign they describe in `args.rs`, what it prints at the end beyond the summary in
//! `print.rs`, the live view (`--serve`, `deja serve`) in `live.rs`, a program bug replayed and
//! minimized in `replay.rs`, a cluster bug in `cluster_bug.rs`.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use deja_explore::{BugFile, CampaignConfig, FailureSignature, Mode, Strategy, Target};

use crate::exit::Exit;
use crate::run::Failure;

mod args;
mod cluster_bug;
mod live;
mod print;
mod replay;

pub use args::ExploreArgs;
use args::{config, keep_image, target};
pub(crate) use cluster_bug::{is_cluster_bug, load_cluster_bug};
use cluster_bug::{minimize_cluster, replay_cluster};
use live::serve_live;
pub use live::{serve, ServeArgs};
use print::{print_fail_stops, print_profile};
use replay::{beside, replay_verdict};
pub use replay::{host_note, minimize, replay, MinimizeArgs, ReplayArgs};
pub(crate) use replay::{judge_fail_stop_with, load_bug, program_args, FAIL_STOP_PER_NODE};

/// `deja explore`, every VM set up under `settings`: [`Exit::Clean`] when no bug was found,
/// [`Exit::Failure`] when bugs were found,
pub fn main(args: ExploreArgs, settings: &deja_vmm::Settings) -> Exit {
    if args.runs.is_none() && args.budget.is_none() {
        eprintln!("deja: error: give a budget: --runs N or --budget 10m");
        return Exit::Usage;
    }
    if args.jobs == Some(0) {
        eprintln!("deja: error: --jobs takes at least 1");
        return Exit::Usage;
    }
    let strategy = if args.strategy == "random" { Strategy::Random } else { Strategy::Coverage };
    let cluster = args.image.is_none() && args.program.as_deref().is_some_and(deja_cluster::config::is_cluster_file);
    if cluster
        && (!args.files.is_empty()
            || !args.env.is_empty()
            || !args.args.is_empty()
            || args.root.is_some()
            || args.cwd.is_some())
    {
        eprintln!(
            "deja: error: --file, --env, --root, --cwd and program arguments do not apply to a cluster file (its nodes \
             say what they run)"
        );
        return Exit::Usage;
    }
    let cluster_target = if cluster {
        if args.crash_model != deja_kernel::CrashModel::PosixWeak {
            eprintln!(
                "deja: error: --crash-model does not apply to a cluster file; put crash_model in its [faults.storage]"
            );
            return Exit::Usage;
        }
        if args.fail_stop != deja_kernel::FailStopMode::Auto || args.failure_marker.is_some() {
            eprintln!("{FAIL_STOP_PER_NODE}");
            return Exit::Usage;
        }
        let file = args.program.as_deref().unwrap_or(Path::new(""));
        if !file.exists() {
            eprintln!("deja: error: cannot read cluster file {}", file.display());
            return Exit::NotFound;
        }
        match deja_explore::ClusterTarget::load(file) {
            Ok(mut t) => {
                t.cfg.settings = *settings;
                Some(t)
            }
            Err(e) => {
                eprintln!("deja: error: {e}");
                return Exit::Usage;
            }
        }
    } else {
        None
    };
    let target = match &cluster_target {
        Some(_) => None,
        None => match target(&args) {
            Ok(t) => Some(t),
            Err(Failure { code, message: m }) => {
                eprintln!("deja: error: {m}");
                return code;
            }
        },
    };
    if let Some(root) = target.as_ref().and_then(|t| t.root.as_ref()) {
        if let Err(e) = keep_image(&args.out, root) {
            eprintln!("deja: error: {e}");
            return Exit::DejaFailed;
        }
    }
    let run_campaign =
        |cfg: &CampaignConfig, show: &mut dyn FnMut(&deja_explore::Progress)| match (&cluster_target, &target) {
            (Some(c), _) => deja_explore::explore_cluster(c, cfg, show),
            (None, Some(t)) => deja_explore::explore(t, cfg, show),
            (None, None) => Err(deja_explore::ExploreError::NothingToExplore),
        };
    let bar =
        if args.quiet { indicatif::ProgressBar::hidden() } else { indicatif::ProgressBar::new(args.runs.unwrap_or(0)) };
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} round {pos}{len_fmt} | {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
    );
    let cfg = config(&args, strategy, args.out.clone(), settings);
    let (live, mut feed) = match args.serve {
        Some(addr) => match serve_live(addr, &args, &cfg) {
            Ok((l, f)) => (Some(l), Some(f)),
            Err(e) => {
                eprintln!("deja: error: {e}");
                return Exit::Usage;
            }
        },
        None => (None, None),
    };
    let mut show = |p: &deja_explore::Progress| {
        if let Some(f) = feed.as_mut() {
            f.observe(p);
        }
        bar.set_position(p.round);
        let workers: Vec<String> = p.worker_rates.iter().map(|r| format!("{r:.1}")).collect();
        bar.set_message(format!(
            "{:.1} rounds/s ({} per worker) | edges {} + {} semantic | corpus {} | bugs {}",
            p.rate(),
            workers.join(" + "),
            p.edges,
            p.semantic,
            p.corpus,
            p.bugs
        ));
    };
    if let Ok(deja_vmm::Remedy { pinned_core: Some(core), .. }) = settings.remedy() {
        if cfg.jobs > 1 {
            eprintln!(
                "deja: note: this host gives no control of the CPU identity, so every VM runs pinned to host core \
                 {core}: the {} workers share it",
                cfg.jobs
            );
        }
    }
    let (profiled, started) = (deja_vmm::profile::snapshot(), std::time::Instant::now());
    let result = run_campaign(&cfg, &mut show);
    let profile = deja_vmm::profile::snapshot().since(&profiled);
    let wall = started.elapsed();
    bar.finish_and_clear();
    let mut campaign = match result {
        Ok(c) => c,
        Err(e) => return failed(&e),
    };
    if args.baseline && strategy == Strategy::Coverage {
        let mut base_args = config(&args, Strategy::Random, args.out.join("baseline"), settings);
        base_args.runs = Some(campaign.rounds);
        base_args.budget = None;
        match run_campaign(&base_args, &mut |_| {}) {
            Ok(b) => campaign.baseline = Some(Box::new(b)),
            Err(e) => eprintln!("deja: the random baseline failed: {e}"),
        }
    }
    if let Err(e) = deja_explore::write_reports(&campaign, &args.out) {
        eprintln!("deja: error: {e}");
        return Exit::DejaFailed;
    }
    if let Some(l) = live {
        l.finish(&campaign);
    }
    let mut err = std::io::stderr().lock();
    let blocks = |b: &deja_explore_report::BlockCoverage| {
        format!(
            "{} of {} blocks, {} of {} functions{}",
            b.blocks_hit,
            b.blocks_total,
            b.functions_reached,
            b.functions_total,
            if b.scope.is_empty() { String::new() } else { format!(" (scope {})", b.scope.join(", ")) }
        )
    };
    if cluster {
        let _ = writeln!(
            err,
            "deja: explored {} cluster rounds ({} strategy): {}{} behaviours seen, corpus {}, {} bug(s)",
            campaign.rounds,
            campaign.strategy,
            campaign.blocks.as_ref().map_or(String::new(), |b| format!("{}, ", blocks(b))),
            campaign.edges_hit,
            campaign.corpus_size,
            campaign.bugs.len()
        );
    } else if let Some(b) = &campaign.blocks {
        let _ = writeln!(
            err,
            "deja: explored {} rounds ({} strategy): {}, corpus {}, {} bug(s)",
            campaign.rounds,
            campaign.strategy,
            blocks(b),
            campaign.corpus_size,
            campaign.bugs.len()
        );
    } else if campaign.edges_total == 0 {
        // No SanitizerCoverage and no block coverage: what guided it is behaviour.
        let _ = writeln!(
            err,
            "deja: explored {} rounds ({} strategy): {} behaviours seen (no code coverage: the program has no \
             SanitizerCoverage, and no block in scope was measured), corpus {}, {} bug(s)",
            campaign.rounds,
            campaign.strategy,
            campaign.timeline.last().map_or(0, |p| p.semantic),
            campaign.corpus_size,
            campaign.bugs.len()
        );
    } else {
        let _ = writeln!(
            err,
            "deja: explored {} rounds ({} strategy): {} of {} edges, corpus {}, {} bug(s)",
            campaign.rounds,
            campaign.strategy,
            campaign.edges_hit,
            campaign.edges_total,
            campaign.corpus_size,
            campaign.bugs.len()
        );
    }
    if let Some(f) = campaign.frontier {
        let _ = writeln!(err, "deja:   frontier: {} of {} faults tried", f.tried, f.total);
        if f.followed > 0 || f.passed_over > 0 {
            let _ = writeln!(
                err,
                "deja:     failed syncs: {} rounds crashed after one the program went on past, {} compositions \
                 passed over",
                f.followed, f.passed_over
            );
        }
    }
    if args.profile {
        print_profile(&mut err, &profile, wall, cfg.jobs, campaign.rounds);
    }
    if campaign.no_progress_rounds > 0 {
        let _ = writeln!(
            err,
            "deja:   {} round(s) made no progress and were stopped by the watchdog (not bugs), first: {}",
            campaign.no_progress_rounds,
            campaign.no_progress.first().map_or(String::new(), |n| format!("round {}: {}", n.round, n.why))
        );
    }
    for b in &campaign.bugs {
        let _ = writeln!(err, "deja:   bug {} (round {}): {}", b.id, b.first_round, b.signature);
        let _ = writeln!(err, "deja:     reproduce: {}", b.reproduce);
    }
    print_fail_stops(&mut err, &campaign.fail_stops);
    let diverged = campaign.fork_checks.as_ref().map_or(&[][..], |f| &f.diverged[..]);
    if let Some(f) = &campaign.fork_checks {
        let _ = writeln!(
            err,
            "deja:   forks verified: {} round(s) booted again from scratch, {} differed",
            f.checked,
            f.diverged.len()
        );
    }
    // Rounds that did not replay the same: deja's defects, each with the round as it ran.
    let unconfirmed = campaign.unconfirmed.iter().map(|u| (u, format!("unconfirmed failure {}", u.signature)));
    for (u, what) in unconfirmed.chain(diverged.iter().map(|u| (u, "differed from its booted run".to_string()))) {
        let _ = writeln!(
            err,
            "deja:   round {} {what}: {} (a determinism defect of deja, not a flaky bug of the program)",
            u.round, u.why
        );
        if let Some(cmd) = &u.reproduce {
            let _ = writeln!(err, "deja:     the round as it ran: {cmd}");
        }
    }
    if let Some(base) = &campaign.baseline {
        let _ = writeln!(
            err,
            "deja: random baseline on the same budget: {} of {} edges, {} bug(s)",
            base.edges_hit,
            base.edges_total,
            base.bugs.len()
        );
    }
    let _ = writeln!(err, "deja: reports in {}/report.{{txt,json,html}}", args.out.display());
    if campaign.rounds == 0 {
        Exit::Incomplete
    } else if campaign.bugs.is_empty() && !(campaign.unconfirmed.is_empty() && diverged.is_empty()) {
        Exit::AuditDiverged
    } else {
        Exit::failure_if(!campaign.bugs.is_empty())
    }
}

/// Arguments of `deja merge`.
#[derive(Debug, clap::Args)]
pub struct MergeArgs {
    /// Directory of the merged campaign (new).
    #[arg(long, default_value = "deja-merged")]
    pub out: PathBuf,
    /// The campaign directories to merge (the shards' --out).
    #[arg(required = true)]
    pub dirs: Vec<PathBuf>,
}

/// Prints a campaign error: [`Exit::Incomplete`] when the directories and the campaign do not
/// belong together or a checkpoint cannot be continued, [`Exit::DejaFailed`] when deja failed.
fn failed(e: &deja_explore::ExploreError) -> Exit {
    eprintln!("deja: error: {e}");
    match e {
        e if e.is_refusal() => Exit::Incomplete,
        e if e.no_progress().is_some() => Exit::NoProgress,
        _ => Exit::DejaFailed,
    }
}

/// `deja merge`: [`Exit::Clean`] when the merged campaign has no bug, [`Exit::Failure`] when it
/// has bugs, [`Exit::Incomplete`] when the directories do not merge, [`Exit::DejaFailed`] when a
/// file could not be read or written.
pub fn merge(args: MergeArgs) -> Exit {
    let c = match deja_explore::merge(&args.dirs, &args.out) {
        Ok(c) => c,
        Err(e) => return failed(&e),
    };
    let mut err = std::io::stderr().lock();
    let _ = writeln!(
        err,
        "deja: merged {} campaigns: {} rounds, corpus {}, {} bug(s)",
        c.shards.len(),
        c.rounds,
        c.corpus_size,
        c.bugs.len()
    );
    for b in &c.bugs {
        let _ = writeln!(err, "deja:   bug {}: {}", b.id, b.signature);
        let _ = writeln!(err, "deja:     reproduce: {}", b.reproduce);
    }
    let _ = writeln!(err, "deja: reports in {}/report.{{txt,json,html}}", args.out.display());
    Exit::failure_if(!c.bugs.is_empty())
}
