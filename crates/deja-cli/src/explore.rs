//! `deja explore`, `deja replay` and `deja minimize`.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use deja_explore::{BugFile, CampaignConfig, FailureSignature, Mode, Strategy, Target};

use crate::exit::Exit;
use crate::run::Failure;

/// Arguments of `deja explore`.
#[derive(Debug, clap::Args)]
pub struct ExploreArgs {
    /// Rounds to run (in total, counting a resumed campaign's).
    #[arg(long, value_name = "N")]
    pub runs: Option<u64>,
    /// Wall time to explore in this invocation, e.g. 90s, 10m, 1h.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub budget: Option<Duration>,
    /// Seed of the program's run and of the explorer's choices.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Directory of the campaign: corpus, checkpoint, bug files, reports.
    #[arg(long, default_value = "deja-out")]
    pub out: PathBuf,
    /// Continue the campaign in --out.
    #[arg(long)]
    pub resume: bool,
    /// `coverage` (guided, forking) or `random` (independent seeds: the baseline).
    #[arg(long, default_value = "coverage", value_parser = ["coverage", "random"])]
    pub strategy: String,
    /// What mutations change: `faults`, `random` (SDK random choices) or `both`.
    #[arg(long, default_value = "both", value_parser = ["faults", "random", "both"])]
    pub mode: String,
    /// The crash model every crash state comes from: posix-weak (the default), xfs,
    /// ext4-ordered or process-kill (see docs/DURABILITY.md).
    #[arg(long, value_name = "MODEL", default_value = "posix-weak", value_parser = crate::run::parse_crash_model)]
    pub crash_model: deja_kernel::CrashModel,
    /// How a life that ends non-zero after an injected I/O error is judged: auto (a fail-stop,
    /// restarted on its disk, unless it went on committing after the error), never, always, or
    /// exit=CODES (the codes that mean a stop on purpose). Every bug file keeps it; a cluster
    /// file says it per node (`fail_stop`).
    #[arg(long, value_name = "MODE", default_value = "auto", value_parser = crate::run::parse_fail_stop)]
    pub fail_stop: deja_kernel::FailStopMode,
    /// The text the program marks the line that says what failed with (`VIOLATION:`): a failure
    /// that is an exit code is named by the last line holding it, from the marker on. Every bug
    /// file keeps it; a cluster file says it per node (`failure_marker`).
    #[arg(long, value_name = "TEXT")]
    pub failure_marker: Option<String>,
    /// Also run the random strategy on the same number of rounds and compare in the report.
    #[arg(long)]
    pub baseline: bool,
    /// Declare an input file the program may open read-only (a directory: every file below it).
    #[arg(long = "file", value_name = "HOST[:GUEST]")]
    pub files: Vec<String>,
    /// An environment variable for the program.
    #[arg(long = "env", value_name = "K=V")]
    pub env: Vec<String>,
    /// Guest RAM in MiB.
    #[arg(long, default_value_t = 1024, value_name = "MiB")]
    pub memory: u64,
    /// No progress display.
    #[arg(long)]
    pub quiet: bool,
    /// At the end, print where the campaign's wall time went: inside `KVM_RUN`, in deja's
    /// syscall handling (per syscall kind), exceptions, fork resets, and the rest (planning,
    /// learning, checkpoints, the cluster driver).
    #[arg(long)]
    pub profile: bool,
    /// End the campaign at the first confirmed bug.
    #[arg(long)]
    pub stop_at_first_bug: bool,
    /// Later forks each worker of a cluster campaign keeps: whole clusters kept where a round's
    /// course reached an anchor of its parent's, so that rounds changing only what comes after
    /// run from there (0: every round runs from the fork point). The campaign is the same.
    #[arg(long, value_name = "N", default_value_t = deja_cluster::LATE_FORKS)]
    pub late_forks: usize,
    /// Every N-th round that ran from a fork is booted again from scratch with the same input,
    /// on another host core, and the two runs compared digest for digest (0: never). A
    /// difference is a determinism defect of deja: the report names the first differing
    /// component and writes the round as `divergence-round-R.json`.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub verify_forks: u64,
    /// Test only: every forked cluster round is made to differ from its booted run, to test
    /// what deja reports of a round that does not replay the same.
    #[arg(long, hide = true)]
    pub perturb_forks: bool,
    /// Workers running rounds in parallel, one VM (or one cluster) each, over one corpus
    /// (default: the machine's available parallelism). The campaign is a function of
    /// (program, seed, jobs, rounds).
    #[arg(long, value_name = "N")]
    pub jobs: Option<u64>,
    /// Run shard I (0-based) of N: an independent slice of the campaign with its own seeds;
    /// `deja merge` puts the shards together.
    #[arg(long, value_name = "I/N", value_parser = parse_shard)]
    pub shard: Option<(u64, u64)>,
    /// Show the campaign live in a browser at ADDR (PORT, HOST:PORT; default 127.0.0.1 and a
    /// free port), printed at start. The campaign is the same with or without it.
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "127.0.0.1:0",
          value_parser = crate::serve::parse_addr)]
    pub serve: Option<std::net::SocketAddr>,
    /// With --serve: start the campaign once the page (its event stream) is open.
    #[arg(long, requires = "serve")]
    pub serve_wait: bool,
    /// Measure the blocks an uninstrumented program reaches (one-shot breakpoints at the blocks
    /// the code rewriter finds) and guide on them: the default. Programs built with `deja build
    /// --coverage` use their own counters instead.
    #[arg(long)]
    pub block_coverage: bool,
    /// Guide an uninstrumented program on its behaviour alone (syscall outcomes, files, how the
    /// run ended, output): no breakpoints, no block coverage.
    #[arg(long, conflicts_with_all = ["block_coverage", "cover"])]
    pub no_block_coverage: bool,
    /// Block coverage counts only blocks in functions whose name matches PATTERN (`*`
    /// matches any run of characters; Rust names demangled, e.g. `ackstore::*`). Repeatable.
    /// A PATTERN with a `/` names source files instead (`src/store/`, `/util.c`), where the
    /// program has DWARF line tables. Without it, the program's own code: a Rust program's crate
    /// of `main` and the crates named like it, a Go program's `main` package, the sources
    /// outside `/usr/` that line tables name, else all; `--cover '*'` takes every function, the
    /// standard library, libc and the runtime's included.
    #[arg(long = "cover", value_name = "PATTERN")]
    pub cover: Vec<String>,
    /// Explore a program in a container image (an OCI image layout or a `docker save`
    /// archive), as `deja run --image` runs it: its entrypoint and command (PROGRAM and the
    /// arguments replace the command), environment and working directory, its layers the
    /// read-only root. The image is kept under `inputs/` by BLAKE3.
    #[arg(long, value_name = "IMAGE.tar", conflicts_with = "root")]
    pub image: Option<PathBuf>,
    /// With --image: the program to run instead of the image's entrypoint.
    #[arg(long, value_name = "PROGRAM", requires = "image")]
    pub entrypoint: Option<String>,
    /// Explore PROGRAM inside DIR, a directory tree that becomes the read-only root (as
    /// `deja run --root`).
    #[arg(long, value_name = "DIR")]
    pub root: Option<PathBuf>,
    /// The program's starting working directory (an absolute guest path; default `/`, or the
    /// image's).
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<String>,
    /// The program to explore (static or dynamically linked), or a cluster file (`*.toml`).
    /// Under --root or --image, a path or name in the root.
    #[arg(required_unless_present = "image")]
    pub program: Option<PathBuf>,
    /// Arguments for the program (after `--`).
    #[arg(last = true)]
    pub args: Vec<String>,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = num.parse().map_err(|_| format!("{s}: expected a number with s, m or h"))?;
    let secs = match unit {
        "" | "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        _ => return Err(format!("{s}: unknown unit {unit:?} (use s, m or h)")),
    };
    Ok(Duration::from_secs(secs))
}

fn parse_shard(s: &str) -> Result<(u64, u64), String> {
    let bad = || format!("{s}: expected I/N with 0 <= I < N, e.g. 0/4");
    let (i, n) = s.split_once('/').ok_or_else(bad)?;
    let (i, n): (u64, u64) = (i.trim().parse().map_err(|_| bad())?, n.trim().parse().map_err(|_| bad())?);
    if n == 0 || i >= n {
        return Err(bad());
    }
    Ok((i, n))
}

/// The default number of workers: every core this process may use.
fn default_jobs() -> u64 {
    std::thread::available_parallelism().map(|n| n.get() as u64).unwrap_or(1)
}

fn target(args: &ExploreArgs) -> Result<Target, Failure> {
    let ask = crate::rootfs::Ask {
        image: args.image.as_deref(),
        dir: args.root.as_deref(),
        entrypoint: args.entrypoint.as_deref(),
        program: args.program.as_deref(),
        args: &args.args,
        env: &args.env,
        cwd: args.cwd.as_deref(),
    };
    let files = crate::run::read_declared(&args.files)?;
    let (mut spec, path, root) = match crate::rootfs::open(&ask)? {
        Some(crate::rootfs::Rooted { rooted: r, input }) => {
            let spec = deja_kernel::ProgramSpec {
                image: r.image,
                exe_path: r.exe_path,
                argv: r.argv,
                env: r.env,
                cwd: r.cwd,
                root: Some(r.root),
                files,
                seed: args.seed,
                ..Default::default()
            };
            (spec, input.path.clone(), Some(input))
        }
        None => {
            let program = args.program.as_deref().ok_or_else(|| Failure::new(Exit::Usage, "name a program"))?;
            let image = std::fs::read(program)
                .map_err(|e| Failure::new(Exit::NotFound, format!("cannot read program {}: {e}", program.display())))?;
            let name = program.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            let mut spec = deja_kernel::ProgramSpec::for_program(image, &name, args.args.iter().cloned(), args.seed);
            spec.env = args.env.clone();
            spec.cwd = args.cwd.clone().unwrap_or_default();
            spec.files = files;
            let needs = deja_cluster::dynlink::host_closure(&spec.image, program, &spec.exe_path)
                .map_err(|e| Failure::new(Exit::NotLoadable, e))?;
            for (path, data) in needs {
                spec.files.entry(path).or_insert(data);
            }
            (spec, program.display().to_string(), None)
        }
    };
    spec.faults.crash_model = args.crash_model;
    spec.faults.fail_stop = args.fail_stop.clone();
    spec.faults.failure_marker = args.failure_marker.clone();
    Ok(Target { spec, memory: args.memory << 20, path, root })
}

/// Keeps the image a campaign's program runs in under `out/inputs/` by BLAKE3, as the campaign
/// keeps its declared files, so that its bugs replay when the image is gone from where it was
/// (a hard link where the file system allows one).
fn keep_image(out: &Path, root: &deja_cluster::image::RootInput) -> Result<(), String> {
    if root.kind != "image" {
        return Ok(());
    }
    let dir = out.join(deja_explore::INPUTS_DIR);
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let kept = dir.join(&root.blake3);
    if kept.exists() {
        return Ok(());
    }
    let part = kept.with_extension("part");
    let _ = std::fs::remove_file(&part);
    std::fs::hard_link(&root.path, &part)
        .or_else(|_| std::fs::copy(&root.path, &part).map(|_| ()))
        .and_then(|()| std::fs::rename(&part, &kept))
        .map_err(|e| format!("cannot keep the image {} in {}: {e}", root.path, dir.display()))
}

fn config(args: &ExploreArgs, strategy: Strategy, out: PathBuf) -> CampaignConfig {
    CampaignConfig {
        runs: args.runs,
        budget: args.budget,
        seed: args.seed,
        out,
        resume: args.resume,
        strategy,
        mode: match args.mode.as_str() {
            "faults" => Mode::Faults,
            "random" => Mode::Random,
            _ => Mode::Both,
        },
        stop_at_first_bug: args.stop_at_first_bug,
        jobs: args.jobs.unwrap_or_else(default_jobs).max(1),
        shard: args.shard,
        block_coverage: !args.no_block_coverage,
        cover: args.cover.clone(),
        late_forks: args.late_forks,
        verify_forks: args.verify_forks,
        perturb_forks: args.perturb_forks,
    }
}

/// `deja explore`: [`Exit::Clean`] when no bug was found, [`Exit::Failure`] when bugs were found,
/// [`Exit::Incomplete`] when the campaign ran no round, [`Exit::DejaFailed`] when deja failed.
/// `--profile`: where the campaign's time went, over its workers' time (wall × workers).
fn print_profile(
    err: &mut impl Write,
    p: &deja_vmm::profile::Profile,
    wall: std::time::Duration,
    jobs: u64,
    rounds: u64,
) {
    let total = wall.as_nanos() as f64 * jobs.max(1) as f64;
    let pct = |ns: u64| 100.0 * ns as f64 / total.max(1.0);
    let rest = total - (p.kvm_run_ns + p.syscall_ns + p.exception_ns + p.reset_ns) as f64;
    let _ = writeln!(
        err,
        "deja: profile: {:.2} s wall x {} worker(s), {} rounds ({:.1} ms each): KVM_RUN {:.1}% ({} exits, {:.1} us each with the guest's code), syscall handling {:.1}%, exceptions {:.1}%, fork resets {:.1}%, the rest (planning, learning, checkpoints, the cluster driver) {:.1}%",
        wall.as_secs_f64(),
        jobs.max(1),
        rounds,
        wall.as_secs_f64() * 1e3 * jobs.max(1) as f64 / rounds.max(1) as f64,
        pct(p.kvm_run_ns),
        p.exits,
        p.kvm_run_ns as f64 / 1e3 / p.exits.max(1) as f64,
        pct(p.syscall_ns),
        pct(p.exception_ns),
        pct(p.reset_ns),
        100.0 * rest.max(0.0) / total.max(1.0)
    );
    let kinds: Vec<String> = p
        .by_syscall
        .iter()
        .take(6)
        .map(|(name, count, ns)| {
            format!("{name} {:.1}% ({count}, {:.1} us each)", pct(*ns), *ns as f64 / 1e3 / (*count).max(1) as f64)
        })
        .collect();
    let _ = writeln!(err, "deja: profile: syscall handling by kind: {}", kinds.join(", "));
    if p.children > 0 {
        let _ = writeln!(
            err,
            "deja: profile: later forks: {} kept ({:.1}% of the time capturing them), {} of {} forked rounds ran from one, skipping {:.0} decisions each on average",
            p.late_taken,
            pct(p.late_capture_ns),
            p.late_children,
            p.children,
            p.late_skipped as f64 / p.late_children.max(1) as f64
        );
    }
}

pub fn main(args: ExploreArgs) -> Exit {
    if args.runs.is_none() && args.budget.is_none() {
        eprintln!("deja: error: give a budget: --runs N or --budget 10m");
        return Exit::Usage;
    }
    if args.jobs == Some(0) {
        eprintln!("deja: error: --jobs takes at least 1");
        return Exit::Usage;
    }
    let strategy = if args.strategy == "random" { Strategy::Random } else { Strategy::Coverage };
    let cluster =
        args.image.is_none() && args.program.as_ref().is_some_and(|p| p.extension().is_some_and(|e| e == "toml"));
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
            Ok(t) => Some(t),
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
    let cfg = config(&args, strategy, args.out.clone());
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
    if let Ok(deja_vmm::Remedy { pinned_core: Some(core), .. }) = deja_vmm::identity::remedy() {
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
        let mut base_args = config(&args, Strategy::Random, args.out.join("baseline"));
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

/// The fail-stops of a campaign, most frequent first: what stopped, how often, what it said last,
/// and the round counted as a failure.
fn print_fail_stops(err: &mut impl Write, lines: &[deja_explore_report::FailStopLine]) {
    if lines.is_empty() {
        return;
    }
    let stops: u64 = lines.iter().map(|f| f.stops).sum();
    let _ = writeln!(
        err,
        "deja:   fail-stops (not failures; --fail-stop never counts them): {stops} in {} kind(s)",
        lines.len()
    );
    for f in deja_explore_report::FailStopLine::by_frequency(lines).into_iter().take(5) {
        let said = deja_explore::signature::last_words(&f.output).map_or(String::new(), |l| format!(": {l}"));
        let _ = writeln!(err, "deja:     {}× {} (first round {}){said}", f.stops, f.kind(), f.first_round);
        if let Some(cmd) = &f.reproduce {
            let _ = writeln!(err, "deja:       counted as a failure: {cmd}");
        }
        if let Some(why) = &f.not_run {
            let _ = writeln!(err, "deja:       not run again counted as a failure: {why}");
        }
    }
}

/// Starts the live view of the campaign `cfg` describes and prints its address; with
/// `--serve-wait`, returns once a page is open.
fn serve_live(
    addr: std::net::SocketAddr,
    args: &ExploreArgs,
    cfg: &CampaignConfig,
) -> Result<(crate::serve::Live, crate::serve::Feed), String> {
    let header = deja_explore::Campaign {
        program: args.image.as_ref().or(args.program.as_ref()).map(|p| p.display().to_string()).unwrap_or_default(),
        program_blake3: String::new(),
        strategy: cfg.strategy.name().into(),
        mode: cfg.mode.name().into(),
        seed: cfg.seed,
        rounds: 0,
        wall_seconds: 0.0,
        corpus_size: 0,
        edges_total: 0,
        edges_hit: 0,
        timeline: Vec::new(),
        wall_timeline: Vec::new(),
        faults: BTreeMap::new(),
        bugs: Vec::new(),
        assertions: Vec::new(),
        baseline: None,
        host: None,
        unconfirmed: Vec::new(),
        fail_stops: Vec::new(),
        jobs: cfg.jobs,
        shard: cfg.shard.map(|(i, n)| format!("{i}/{n}")),
        shards: Vec::new(),
        no_progress_rounds: 0,
        no_progress: Vec::new(),
        blocks: None,
        frontier: None,
        fork_checks: None,
    };
    let (live, feed) = crate::serve::Live::start(addr, &cfg.out, &header)?;
    announce(&live.server().url, addr);
    if args.serve_wait {
        eprintln!("deja: waiting for the page to open before the campaign starts");
        live.server().wait_for_viewer();
    }
    Ok((live, feed))
}

/// Prints where the live view is, and a warning when it is not on loopback.
fn announce(url: &str, addr: std::net::SocketAddr) {
    eprintln!("deja: live view at {url}");
    if !addr.ip().is_loopback() {
        eprintln!(
            "deja: note: {} is not a loopback address: anyone who can reach it can see the campaign and read its files",
            addr.ip()
        );
    }
}

/// Arguments of `deja serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Where to listen: PORT or HOST:PORT (default 127.0.0.1 and a free port).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:0", value_parser = crate::serve::parse_addr)]
    pub addr: std::net::SocketAddr,
    /// The campaign's directory (`deja explore --out`).
    pub dir: PathBuf,
}

/// `deja serve`: serves the campaign saved in a directory until killed; [`Exit::Incomplete`] when
/// it holds none, [`Exit::Usage`] when nothing can listen on the address.
pub fn serve(args: ServeArgs) -> Exit {
    let (campaign, finished) = match deja_explore::saved(&args.dir) {
        Ok(c) => c,
        Err(e) => return failed(&e),
    };
    let book = crate::serve::Book::saved(&campaign, finished);
    let server = match crate::serve::Server::start(args.addr, &args.dir, book) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("deja: error: {e}");
            return Exit::Usage;
        }
    };
    eprintln!(
        "deja: {} campaign in {}: {} rounds, {} bug(s)",
        if finished { "the finished" } else { "the checkpointed" },
        args.dir.display(),
        campaign.rounds,
        campaign.bugs.len()
    );
    announce(&server.url, args.addr);
    server.forever()
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

/// Arguments of `deja replay`.
#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    /// Judge the bug's run with this fail-stop rule instead of the one it records (auto, never,
    /// always or exit=CODES; a cluster file says it per node).
    #[arg(long, value_name = "MODE", value_parser = crate::run::parse_fail_stop)]
    pub fail_stop: Option<deja_kernel::FailStopMode>,
    /// Print the last syscalls of the failing run.
    #[arg(long)]
    pub trace: bool,
    /// Where the program is, when it is not where the bug file says or beside it; for a
    /// cluster bug, `NODE=PATH` for a node's binary (repeatable) or the cluster file.
    #[arg(long, value_name = "PATH|NODE=PATH")]
    pub program: Vec<String>,
    /// Declared input files again, as `deja explore` was given them.
    #[arg(long = "file", value_name = "HOST[:GUEST]")]
    pub files: Vec<String>,
    /// The bug file.
    pub bug: PathBuf,
}

/// What `--fail-stop` on a cluster says: the cluster file decides, node by node.
pub(crate) const FAIL_STOP_PER_NODE: &str =
    "deja: error: --fail-stop and --failure-marker do not apply to a cluster; put \
                                             fail_stop or failure_marker in the node's section of its cluster file";

/// A bug's input judged with `mode` (`--fail-stop` of replay, minimize and check) instead of the
/// fail-stop rule it records, said when they differ.
pub(crate) fn judge_fail_stop_with(bug: &mut BugFile, mode: Option<&deja_kernel::FailStopMode>) {
    let Some(mode) = mode.filter(|m| **m != bug.input.faults.fail_stop) else { return };
    eprintln!(
        "deja: judging with --fail-stop {} instead of the bug's {}: its run may differ from the one found",
        mode.words(),
        bug.input.faults.fail_stop.words()
    );
    bug.input.faults.fail_stop = mode.clone();
}

/// `--program` values: the binaries of named nodes (`NODE=PATH`), and a plain path (a program,
/// or a cluster file).
pub(crate) fn program_args(values: &[String]) -> Result<(BTreeMap<String, PathBuf>, Option<PathBuf>), Failure> {
    let mut nodes = BTreeMap::new();
    let mut plain = None;
    for v in values {
        match v.split_once('=') {
            Some((node, path)) if !node.is_empty() && !node.contains('/') => {
                nodes.insert(node.to_string(), PathBuf::from(path));
            }
            _ if plain.is_none() => plain = Some(PathBuf::from(v)),
            _ => return Err(Failure::new(Exit::Usage, format!("--program {v}: give one PATH and any NODE=PATH"))),
        }
    }
    Ok((nodes, plain))
}

/// The directory a bug file is in.
fn beside(bug: &Path) -> PathBuf {
    bug.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new(".")).to_path_buf()
}

/// Reads a program bug file and its program: `--program PATH`, else where the bug says, else
/// a file of the same name beside the bug file that has the BLAKE3 the bug records.
pub(crate) fn load_bug(bug: &Path, program: &[String], files: &[String]) -> Result<(BugFile, Target), Failure> {
    let b = BugFile::read(bug).map_err(|e| Failure::new(Exit::NotLoadable, e.to_string()))?;
    let (_, given) = program_args(program)?;
    if let Some(root) = &b.root {
        // The program is in its root: the image or tree is read again and the program found
        // in it as the bug's command found it.
        let kept = beside(bug).join(deja_explore::INPUTS_DIR);
        let crate::rootfs::Rooted { rooted, input } =
            crate::rootfs::reopen(root, given.as_deref(), &kept, &b.argv, &b.env, &b.cwd)?;
        let files = bug_inputs(&b, bug, None, crate::run::read_declared(files)?);
        let path = input.path.clone();
        let t = b
            .target(rooted.image, files, Some((rooted.root, input)), &path)
            .map_err(|e| Failure::new(Exit::Incomplete, e.to_string()))?;
        return Ok((b, t));
    }
    let recorded = PathBuf::from(&b.program);
    let path = match given {
        Some(p) => p,
        None => {
            let near = beside(bug).join(recorded.file_name().unwrap_or_default());
            let matches =
                |p: &Path| std::fs::read(p).is_ok_and(|img| blake3::hash(&img).to_hex().as_str() == b.program_blake3);
            if !matches(&recorded) && matches(&near) {
                near
            } else {
                recorded
            }
        }
    };
    let image = std::fs::read(&path).map_err(|e| {
        Failure::new(
            Exit::Incomplete,
            format!(
                "cannot read the program {}: {e}; give it with --program PATH (the bug needs BLAKE3 {})",
                path.display(),
                b.program_blake3
            ),
        )
    })?;
    let files = bug_inputs(&b, bug, Some((&image, &path)), crate::run::read_declared(files)?);
    let t = b
        .target(image, files, None, &path.display().to_string())
        .map_err(|e| Failure::new(Exit::Incomplete, e.to_string()))?;
    Ok((b, t))
}

/// The declared files a program bug is replayed with: those given, then (for a program from the
/// host, `host`: its bytes and path) a dynamically linked program's loader and libraries from
/// this host, and for each file whose BLAKE3 is not the one the bug records, the recorded file
/// from `inputs/` beside the bug file if it is there.
fn bug_inputs(
    b: &BugFile,
    bug: &Path,
    host: Option<(&[u8], &Path)>,
    mut files: BTreeMap<String, Vec<u8>>,
) -> BTreeMap<String, Vec<u8>> {
    let exe_guest = b.exe_path.clone().or_else(|| b.argv.first().cloned()).unwrap_or_default();
    // A closure that cannot be found here is not an error yet: `inputs/` may hold it.
    if let Some((image, program)) = host {
        for (path, data) in deja_cluster::dynlink::host_closure(image, program, &exe_guest).unwrap_or_default() {
            files.entry(path).or_insert(data);
        }
    }
    let kept = beside(bug).join(deja_explore::INPUTS_DIR);
    for (guest, want) in &b.files {
        let hash = |d: &[u8]| blake3::hash(d).to_hex().to_string();
        if files.get(guest).is_some_and(|d| hash(d) == *want) {
            continue;
        }
        if let Ok(data) = std::fs::read(kept.join(want)) {
            if hash(&data) == *want {
                eprintln!("deja: note: {guest} differs on this host; replaying with the recorded one ({want})");
                files.insert(guest.clone(), data);
            }
        }
    }
    files
}

/// `deja replay`: [`Exit::Failure`] when the failure reproduced (same signature and digest),
/// [`Exit::Clean`] when it did not, [`Exit::Incomplete`] when the evidence is incomplete (missing
/// or different program), [`Exit::NotLoadable`] when the bug file fails its checks.
pub fn replay(args: ReplayArgs) -> Exit {
    if is_cluster_bug(&args.bug) {
        if args.fail_stop.is_some() {
            eprintln!("{FAIL_STOP_PER_NODE}");
            return Exit::Usage;
        }
        return replay_cluster(&args);
    }
    let (mut bug, mut t) = match load_bug(&args.bug, &args.program, &args.files) {
        Ok(x) => x,
        Err(Failure { code, message: m }) => {
            eprintln!("deja: cannot replay: {m}");
            return code;
        }
    };
    judge_fail_stop_with(&mut bug, args.fail_stop.as_ref());
    t.spec.record_trace = args.trace;
    let mut stdout = std::io::stdout().lock();
    let out = match deja_explore::replay(&bug, &t, &mut |s, b| {
        let _ = match s {
            deja_kernel::Stream::Stdout => stdout.write_all(b),
            deja_kernel::Stream::Stderr => std::io::stderr().write_all(b),
        };
    }) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("deja: replay failed to run: {e}");
            return Exit::Incomplete;
        }
    };
    if args.trace {
        for (i, life) in out.lives.iter().enumerate() {
            let trace = &life.run.report.trace;
            eprintln!("deja: life {i}: last {} of {} syscalls:", trace.len().min(20), trace.len());
            for e in trace.iter().skip(trace.len().saturating_sub(20)) {
                eprintln!("deja:   #{:<5} {}", e.index, e.text);
            }
        }
    }
    host_note("bug file", bug.host.as_ref());
    if out.digest != bug.digest {
        // Is this host at least consistent with itself? Replay again on another core.
        let seen: Vec<u32> = out.lives.iter().flat_map(|l| l.run.stats.host_cores.iter().copied()).collect();
        match deja_vmm::identity::on_another_core(&seen, || deja_explore::replay(&bug, &t, &mut |_, _| {})) {
            Ok((core, Ok(again))) => match deja_explore::input::difference(&out, &again) {
                Some(d) => eprintln!(
                    "deja: this host does not reproduce its own run: a second replay on host core {core} differs in {d}"
                ),
                None => eprintln!(
                    "deja: a second replay on host core {core} gave this host's digest again: the difference is \
                     with the host or the deja that recorded the bug"
                ),
            },
            Ok((_, Err(e))) => eprintln!("deja: a second replay could not run: {e}"),
            Err(e) => eprintln!("deja: a second replay could not run: {e}"),
        }
    }
    replay_verdict(&bug.id, &bug.signature, &bug.digest, out.failure.as_ref(), &out.digest, "run")
}

/// Says how the host an artifact was recorded on differs from this one, if it does.
pub fn host_note(what: &str, recorded: Option<&deja_vmm::Fingerprint>) {
    if let Some(note) = deja_vmm::identity::compare_recorded(recorded) {
        eprintln!("deja: note: the {what} was {note}");
    }
}

/// Compares a replay with its bug and prints the verdict: [`Exit::Failure`] when the failure
/// reproduced, [`Exit::Clean`] when it did not (`what` names the thing that ran: `run`, `cluster`).
fn replay_verdict(
    id: &str,
    signature: &FailureSignature,
    digest: &str,
    failure: Option<&FailureSignature>,
    got: &str,
    what: &str,
) -> Exit {
    match failure {
        Some(sig) if sig.is_the_failure(signature) && got == digest => {
            eprintln!("deja: reproduced bug {id}: {sig} (digest {got})");
            Exit::Failure
        }
        Some(sig) if sig.is_the_failure(signature) => {
            eprintln!("deja: the failure reproduced but the {what} differs (digest {got} instead of {digest})");
            Exit::Failure
        }
        Some(sig) => {
            eprintln!("deja: not reproduced: the {what} failed differently: {sig}");
            Exit::Clean
        }
        None if got != digest => {
            eprintln!("deja: not reproduced: the {what} held (digest {got} instead of {digest})");
            Exit::Clean
        }
        None => {
            eprintln!("deja: not reproduced: the {what} held (digest {got})");
            Exit::Clean
        }
    }
}

/// Arguments of `deja minimize`.
#[derive(Debug, clap::Args)]
pub struct MinimizeArgs {
    /// Judge the bug's run with this fail-stop rule instead of the one it records (auto, never,
    /// always or exit=CODES; a cluster file says it per node).
    #[arg(long, value_name = "MODE", value_parser = crate::run::parse_fail_stop)]
    pub fail_stop: Option<deja_kernel::FailStopMode>,
    /// Where to write the minimized bug file (default: next to the input, `.min.json`).
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Where the program is, when it is not where the bug file says or beside it; for a
    /// cluster bug, `NODE=PATH` for a node's binary (repeatable) or the cluster file.
    #[arg(long, value_name = "PATH|NODE=PATH")]
    pub program: Vec<String>,
    /// Declared input files again.
    #[arg(long = "file", value_name = "HOST[:GUEST]")]
    pub files: Vec<String>,
    /// The bug file.
    pub bug: PathBuf,
}

/// `deja minimize`: [`Exit::Clean`] when a verified minimized bug file was written,
/// [`Exit::Incomplete`] when the bug did not reproduce or its program could not be loaded,
/// [`Exit::NotLoadable`] when the bug file fails its checks.
pub fn minimize(args: MinimizeArgs) -> Exit {
    if is_cluster_bug(&args.bug) {
        if args.fail_stop.is_some() {
            eprintln!("{FAIL_STOP_PER_NODE}");
            return Exit::Usage;
        }
        return minimize_cluster(&args);
    }
    let (mut bug, t) = match load_bug(&args.bug, &args.program, &args.files) {
        Ok(x) => x,
        Err(Failure { code, message: m }) => {
            eprintln!("deja: cannot minimize: {m}");
            return code;
        }
    };
    judge_fail_stop_with(&mut bug, args.fail_stop.as_ref());
    let out = args.out.clone().unwrap_or_else(|| args.bug.with_extension("min.json"));
    match deja_explore::minimize(&bug, &t, &out.display().to_string()) {
        Ok(m) => {
            if let Err(e) = m.bug.write(&out) {
                eprintln!("deja: error: {e}");
                return Exit::DejaFailed;
            }
            eprintln!(
                "deja: minimized bug {} in {} runs: {} of {} input elements kept; removed: {}",
                bug.id,
                m.tests,
                m.bug.input.size(),
                bug.input.size(),
                if m.bug.removed.is_empty() { "nothing".to_string() } else { m.bug.removed.join(", ") }
            );
            eprintln!("deja: verified by replay; written to {} (reproduce: {})", out.display(), m.bug.reproduce);
            Exit::Clean
        }
        Err(e) => {
            eprintln!("deja: cannot minimize: {e}");
            Exit::Incomplete
        }
    }
}

/// True if `path` holds a cluster bug file: its `schema` says so, or, when it is too damaged to
/// parse, it names that schema (so the cluster reader says what is wrong with it).
pub(crate) fn is_cluster_bug(path: &Path) -> bool {
    let family = format!("\"{}/", deja_explore::cluster::CLUSTER_BUG_SCHEMA.family);
    let Ok(text) = std::fs::read_to_string(path) else { return false };
    match serde_json::from_str::<serde_json::Value>(&text) {
        Ok(v) => v["schema"].as_str().is_some_and(|s| format!("\"{s}").starts_with(&family)),
        Err(_) => text.contains(&family),
    }
}

/// Reads a cluster bug file and the cluster it needs, from any directory: `config` is the
/// cluster file when given; the nodes' binaries are found by the BLAKE3 the bug records
/// (`--program NODE=PATH`, where the cluster file names them, beside the bug file).
pub(crate) fn load_cluster_bug(
    args_bug: &Path,
    config: Option<&Path>,
    program: &[String],
) -> Result<(deja_explore::ClusterBug, deja_explore::ClusterTarget), Failure> {
    let bug = deja_explore::ClusterBug::read(args_bug).map_err(|e| Failure::new(Exit::NotLoadable, e.to_string()))?;
    let (nodes, plain) = program_args(program)?;
    let config = config.map(Path::to_path_buf).or(plain);
    let target = bug
        .target(config.as_deref(), &nodes, Some(&beside(args_bug)))
        .map_err(|e| Failure::new(Exit::Incomplete, e.to_string()))?;
    Ok((bug, target))
}

/// `deja replay` of a cluster bug: [`Exit::Failure`] reproduced, [`Exit::Clean`] not,
/// [`Exit::Incomplete`] evidence incomplete, [`Exit::NotLoadable`] a bug file that fails its
/// checks.
fn replay_cluster(args: &ReplayArgs) -> Exit {
    let (bug, target) = match load_cluster_bug(&args.bug, None, &args.program) {
        Ok(x) => x,
        Err(Failure { code, message: m }) => {
            eprintln!("deja: cannot replay: {m}");
            return code;
        }
    };
    let mut prefix = crate::cluster::Prefixer::default();
    let out = match deja_explore::cluster::run_cluster_input(&target, &bug.input, &mut |n, s, b| prefix.write(n, s, b))
    {
        Ok(o) => o,
        Err(e) => {
            eprintln!("deja: replay failed to run: {e}");
            return Exit::Incomplete;
        }
    };
    prefix.flush();
    if args.trace {
        eprintln!("deja: the faults leading up to it:");
        for f in &out.report.faults {
            eprintln!("deja:   {:>10.3} ms  {} {}", f.time_ns as f64 / 1e6, f.kind, f.detail);
        }
        for n in &out.report.nodes {
            let lines: Vec<&str> = n.stdout.lines().collect();
            eprintln!("deja: {}: last {} of {} output lines:", n.name, lines.len().min(8), lines.len());
            for l in lines.iter().skip(lines.len().saturating_sub(8)) {
                eprintln!("deja:   {l}");
            }
        }
    }
    crate::cluster::history_summary(&out.history);
    host_note("bug file", bug.host.as_ref());
    replay_verdict(&bug.id, &bug.signature, &bug.digest, out.failure.as_ref(), &out.report.digest, "cluster")
}

/// `deja minimize` of a cluster bug: [`Exit::Clean`] written and verified, [`Exit::Incomplete`]
/// not minimized, [`Exit::NotLoadable`] a bug file that fails its checks.
fn minimize_cluster(args: &MinimizeArgs) -> Exit {
    let (bug, target) = match load_cluster_bug(&args.bug, None, &args.program) {
        Ok(x) => x,
        Err(Failure { code, message: m }) => {
            eprintln!("deja: cannot minimize: {m}");
            return code;
        }
    };
    let out = args.out.clone().unwrap_or_else(|| args.bug.with_extension("min.json"));
    match deja_explore::minimize_cluster(&bug, &target, &out.display().to_string()) {
        Ok(m) => {
            if let Err(e) = m.bug.write(&out) {
                eprintln!("deja: error: {e}");
                return Exit::DejaFailed;
            }
            let kept = m.bug.input.fault_words();
            eprintln!(
                "deja: minimized cluster bug {} in {} runs: {} fault(s) kept, {} removed",
                bug.id,
                m.tests,
                kept.len(),
                m.bug.removed.len()
            );
            for f in kept {
                eprintln!("deja:   kept: {f}");
            }
            eprintln!("deja: verified by replay; written to {} (reproduce: {})", out.display(), m.bug.reproduce);
            Exit::Clean
        }
        Err(e) => {
            eprintln!("deja: cannot minimize: {e}");
            Exit::Incomplete
        }
    }
}
