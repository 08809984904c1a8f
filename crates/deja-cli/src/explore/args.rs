//! The arguments of `deja explore` and what they describe: the program (from the host, a
//! directory tree or an image) as a [`Target`], its image kept under `inputs/`, and the
//! campaign's [`CampaignConfig`].

use super::*;

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
    /// Whether the program is given `ANTITHESIS_SDK_LOCAL_OUTPUT` (as `deja run
    /// --antithesis-sdk`): `on` (default) or `off`.
    #[arg(long, value_enum, default_value_t = crate::run_args::OnOff::On, value_name = "ON_OFF")]
    pub antithesis_sdk: crate::run_args::OnOff,
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
    /// The program to explore (static or dynamically linked), or a cluster file (`*.toml`, or docker-compose `*.yaml`).
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

pub(super) fn target(args: &ExploreArgs) -> Result<Target, Failure> {
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
            let needs = deja_inputs::dynlink::host_closure(&spec.image, program, &spec.exe_path)
                .map_err(|e| Failure::new(Exit::NotLoadable, e))?;
            for (path, data) in needs {
                spec.files.entry(path).or_insert(data);
            }
            (spec, program.display().to_string(), None)
        }
    };
    crate::run::antithesis_output(&mut spec.env, args.antithesis_sdk);
    spec.faults.crash_model = args.crash_model;
    spec.faults.fail_stop = args.fail_stop.clone();
    spec.faults.failure_marker = args.failure_marker.clone();
    Ok(Target { spec, memory: args.memory << 20, path, root })
}

/// Keeps the image a campaign's program runs in under `out/inputs/` by BLAKE3, as the campaign
/// keeps its declared files, so that its bugs replay when the image is gone from where it was
/// (a hard link where the file system allows one).
pub(super) fn keep_image(out: &Path, root: &deja_inputs::image::RootInput) -> Result<(), String> {
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

pub(super) fn config(
    args: &ExploreArgs,
    strategy: Strategy,
    out: PathBuf,
    settings: &deja_vmm::Settings,
) -> CampaignConfig {
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
        settings: *settings,
    }
}
