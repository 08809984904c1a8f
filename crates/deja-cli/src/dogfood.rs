//! `deja dogfood`: the exploration results committed in `dogfood-results/explore.md` — rounds to
//! the first bug with coverage guidance against the random baseline, on the reference workloads,
//! over fixed seeds. `--check` regenerates the table and fails when the committed one differs.

use crate::exit::Exit;
use std::path::PathBuf;

use deja_explore::{CampaignConfig, Mode, Strategy, Target};
use deja_vmm::Settings;

/// Arguments of `deja dogfood`.
#[derive(Debug, clap::Args)]
pub struct DogfoodArgs {
    /// Directory holding the example guests (default: `target/guests` beside this binary).
    #[arg(long, value_name = "DIR")]
    pub guests: Option<PathBuf>,
    /// Write the table to FILE.
    #[arg(long, value_name = "FILE", conflicts_with = "check")]
    pub out: Option<PathBuf>,
    /// Regenerate and compare with FILE: exit 0 when equal, 1 when it differs.
    #[arg(long, value_name = "FILE")]
    pub check: Option<PathBuf>,
    /// Campaign seeds 1..=N per row (the committed table uses 5).
    #[arg(long, value_name = "N", default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub seeds: u64,
    /// Instead of the committed table: block coverage against behaviour-only guidance and the
    /// random baseline, on the uninstrumented reference bugs, over seeds 1..=N and `--runs`
    /// rounds each (docs/EXPLORE.md, "Block coverage").
    #[arg(long, conflicts_with = "check")]
    pub blocks: bool,
    /// With --blocks: the rounds each campaign may take.
    #[arg(long, value_name = "N", default_value_t = 1000, requires = "blocks")]
    pub runs: u64,
}

/// Rounds a campaign may take, unless its row says otherwise.
const BUDGET: u64 = 300;
/// Rounds for the deep bank bug, which independent runs hit a few times in a thousand.
const DEEP_BUDGET: u64 = 1000;

/// What a dogfood row explores.
enum Subject<'a> {
    Program(&'a Target),
    Cluster(&'a deja_explore::ClusterTarget),
}

fn first_bug(
    target: Subject<'_>,
    settings: &Settings,
    strategy: Strategy,
    mode: Mode,
    seed: u64,
    budget: u64,
) -> Result<Option<u64>, String> {
    first_bug_with(target, settings, strategy, mode, seed, budget, true)
}

fn first_bug_with(
    target: Subject<'_>,
    settings: &Settings,
    strategy: Strategy,
    mode: Mode,
    seed: u64,
    budget: u64,
    block_coverage: bool,
) -> Result<Option<u64>, String> {
    let out = std::env::temp_dir().join(format!("deja-dogfood-{}-{seed}-{strategy:?}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let cfg = CampaignConfig {
        runs: Some(budget),
        budget: None,
        seed,
        out: out.clone(),
        resume: false,
        strategy,
        mode,
        stop_at_first_bug: true,
        jobs: 1,
        shard: None,
        block_coverage,
        cover: Vec::new(),
        late_forks: deja_cluster::LATE_FORKS,
        verify_forks: 0,
        perturb_forks: false,
        settings: *settings,
    };
    let c = match target {
        Subject::Program(t) => deja_explore::explore(t, &cfg, &mut |_| {}),
        Subject::Cluster(t) => deja_explore::explore_cluster(t, &cfg, &mut |_| {}),
    }
    .map_err(|e| e.to_string())?;
    let _ = std::fs::remove_dir_all(&out);
    Ok(c.bugs.first().map(|b| b.first_round))
}

/// The reference workload `guest` (its `image`) with `args`, seeded with `seed`.
fn program_target(image: &[u8], guest: &str, args: &[&str], seed: u64) -> Target {
    let spec = deja_kernel::ProgramSpec::for_program(image.to_vec(), guest, args.iter().map(|a| a.to_string()), seed);
    Target { spec, memory: 1 << 30, path: guest.to_string(), root: None }
}

/// `f` of each of `1..=n`, in that order, computed on as many threads as the host has cores.
/// Each campaign of a row runs on one worker of its own and is a function of its seed alone,
/// so the table does not depend on how many run at once; the first error in seed order wins.
fn per_seed<T: Send>(n: u64, f: impl Fn(u64) -> Result<T, String> + Sync) -> Result<Vec<T>, String> {
    let lanes = std::thread::available_parallelism().map_or(1, |n| n.get()).min(n as usize).max(1);
    let next = std::sync::atomic::AtomicU64::new(1);
    let mut done: Vec<(u64, Result<T, String>)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..lanes)
            .map(|_| {
                s.spawn(|| {
                    let mut out = Vec::new();
                    loop {
                        let seed = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if seed > n {
                            break out;
                        }
                        out.push((seed, f(seed)));
                    }
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().unwrap_or_else(|e| std::panic::resume_unwind(e))).collect()
    });
    done.sort_by_key(|(seed, _)| *seed);
    done.into_iter().map(|(_, r)| r).collect()
}

fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v[v.len() / 2]
}

/// The table, as committed, every campaign under `settings`.
pub fn table(dir: &std::path::Path, seeds: u64, settings: &Settings) -> Result<String, String> {
    let workloads: [(&str, &str, Vec<&str>, Mode, u64); 5] = [
        ("kv, lost acknowledged write", "kv", vec!["--variant", "buggy", "6"], Mode::Faults, BUDGET),
        ("pagestore, header durable before the extension", "pagestore-buggy", vec!["6"], Mode::Faults, DEEP_BUDGET),
        ("ackstore, swallowed I/O error", "ackstore-buggy", vec!["6"], Mode::Faults, BUDGET),
        ("bank, rare double credit", "bank", vec!["--rare-bug", "5"], Mode::Random, BUDGET),
        ("bank, double release after a freeze", "bank", vec!["--fraud", "buggy", "20"], Mode::Random, DEEP_BUDGET),
    ];
    let mut md = String::from(
        "# Exploration results on the reference workloads\n\n\
         Generated by `cargo xtask dogfood` (`deja dogfood`); the test suite regenerates it and fails when it\n\
         differs. Rounds to the first confirmed bug within the row's budget of rounds (`-` = not found),\n\
         coverage-guided (forking, corpus, block coverage of the program's own code; a cluster round forks\n\
         every VM from where all nodes called `setup_complete`) against\n\
         `--strategy random` (independent seeds).\n\n",
    );
    md.push_str(&format!(
        "| workload | mode | budget | strategy | rounds to the first bug, seeds 1–{seeds} | median (not found = budget) |\n\
         |---|---|---|---|---|---|\n"
    ));
    let mut medians = Vec::new();
    for (title, guest, args, mode, budget) in &workloads {
        let image = std::fs::read(dir.join(guest))
            .map_err(|e| format!("{guest}: {e} (build the guests: cargo xtask guests)"))?;
        for strategy in [Strategy::Coverage, Strategy::Random] {
            let mut cells = Vec::new();
            let mut rounds = Vec::new();
            let found = per_seed(seeds, |seed| {
                let target = program_target(&image, guest, args, seed);
                first_bug(Subject::Program(&target), settings, strategy, *mode, seed, *budget)
            })?;
            for r in found {
                cells.push(r.map(|r| r.to_string()).unwrap_or_else(|| "-".into()));
                rounds.push(r.unwrap_or(*budget));
            }
            let m = median(rounds);
            medians.push(m);
            md.push_str(&format!(
                "| {title} | {} | {budget} | {} | {} | {m} |\n",
                match mode {
                    Mode::Faults => "faults",
                    Mode::Random => "random",
                    Mode::Both => "both",
                },
                match strategy {
                    Strategy::Coverage => "coverage",
                    Strategy::Random => "random",
                },
                cells.join(", ")
            ));
        }
    }
    // The cluster workload: every round boots the four nodes (no forks).
    let examples =
        dir.parent().and_then(std::path::Path::parent).map(|r| r.join("examples/clusters")).unwrap_or_default();
    let load = |file: &str| {
        let mut t = deja_explore::ClusterTarget::load(&examples.join(file)).map_err(|e| e.to_string())?;
        t.cfg.settings = *settings;
        Ok::<_, String>(t)
    };
    let buggy = load("register-buggy.toml")?;
    let split = "register (3 replicas + client), split brain";
    for strategy in [Strategy::Coverage, Strategy::Random] {
        let mut cells = Vec::new();
        let mut rounds = Vec::new();
        let found = per_seed(seeds, |seed| {
            first_bug(Subject::Cluster(&buggy), settings, strategy, Mode::Faults, seed, BUDGET)
        })?;
        for r in found {
            cells.push(r.map(|r| r.to_string()).unwrap_or_else(|| "-".into()));
            rounds.push(r.unwrap_or(BUDGET));
        }
        let m = median(rounds);
        medians.push(m);
        let name = if strategy == Strategy::Coverage { "coverage" } else { "random" };
        md.push_str(&format!("| {split} | faults | {BUDGET} | {name} | {} | {m} |\n", cells.join(", ")));
    }
    md.push_str("\nRatio of medians, random baseline over coverage-guided (above 1: guidance finds it sooner):\n\n");
    let titles: Vec<&str> = workloads.iter().map(|w| w.0).chain([split]).collect();
    for (i, title) in titles.iter().enumerate() {
        let (c, r) = (medians[2 * i].max(1), medians[2 * i + 1].max(1));
        md.push_str(&format!("- {title}: {:.2}\n", r as f64 / c as f64));
    }

    // Split brain over 100 seeds of `deja run`: how often the random partitions expose it.
    let fixed = load("register-fixed.toml")?;
    md.push_str(
        "\n## Split brain over 100 seeds\n\n\
         `deja run --seed N examples/clusters/register-{buggy,fixed}.toml` for N = 1..100: random partitions\n\
         during the first 5 s, then the client's check that every acknowledged write survived.\n\n\
         | variant | seeds where an acknowledged write was lost | other failures | first seeds that hit it |\n\
         |---|---|---|---|\n",
    );
    for (name, t) in [("buggy", &buggy), ("fixed", &fixed)] {
        let (mut hits, mut other) = (Vec::new(), 0);
        let runs = per_seed(100, |seed| {
            let input = deja_explore::ClusterInput { seed, ..Default::default() };
            deja_explore::cluster::run_cluster_input(t, &input, &mut |_, _, _| {}).map_err(|e| e.to_string())
        })?;
        for (seed, out) in (1..=100u64).zip(runs) {
            match &out.failure {
                Some(deja_explore::FailureSignature::ClusterAssertions(failed))
                    if failed.iter().any(|(_, message)| message.contains("acknowledged writes survive")) =>
                {
                    hits.push(seed)
                }
                Some(_) => other += 1,
                None => {}
            }
        }
        let first: Vec<String> = hits.iter().take(5).map(u64::to_string).collect();
        md.push_str(&format!(
            "| {name} | {} of 100 | {other} | {} |\n",
            hits.len(),
            if first.is_empty() { "-".to_string() } else { first.join(", ") }
        ));
    }
    Ok(md)
}

/// The block-coverage table: on each uninstrumented reference bug, rounds to the first bug with
/// block coverage, with behaviour features only, and with independent runs, under `settings`.
pub fn blocks_table(dir: &std::path::Path, seeds: u64, runs: u64, settings: &Settings) -> Result<String, String> {
    let workloads: [(&str, &str, Vec<&str>, Mode); 4] = [
        ("pagestore, header durable before the extension", "pagestore-buggy", vec!["6"], Mode::Faults),
        ("ackstore, swallowed I/O error", "ackstore-buggy", vec!["6"], Mode::Faults),
        ("kv, lost acknowledged write", "kv", vec!["--variant", "buggy", "6"], Mode::Faults),
        ("bank, double release after a freeze", "bank", vec!["--fraud", "buggy", "20"], Mode::Random),
    ];
    let mut md = format!(
        "Rounds to the first confirmed bug (`-`: not found in {runs}), seeds 1–{seeds}, uninstrumented \
         programs (`deja dogfood --blocks --seeds {seeds} --runs {runs}`):\n\n\
         | workload | blocks (the default): guided on blocks and behaviours | behaviours only (`--no-block-coverage`) | random |\n|---|---|---|---|\n"
    );
    for (title, guest, args, mode) in &workloads {
        let image = std::fs::read(dir.join(guest))
            .map_err(|e| format!("{guest}: {e} (build the guests: cargo xtask guests)"))?;
        let mut cols = Vec::new();
        for (strategy, blocks) in [(Strategy::Coverage, true), (Strategy::Coverage, false), (Strategy::Random, false)] {
            let (mut cells, mut rounds) = (Vec::new(), Vec::new());
            let found = per_seed(seeds, |seed| {
                let target = program_target(&image, guest, args, seed);
                first_bug_with(Subject::Program(&target), settings, strategy, *mode, seed, runs, blocks)
            })?;
            for r in found {
                cells.push(r.map(|r| r.to_string()).unwrap_or_else(|| "-".into()));
                rounds.push(r.unwrap_or(runs));
            }
            let found = cells.iter().filter(|c| *c != "-").count();
            cols.push(format!("{}: median {}, {found} of {seeds} found", cells.join(", "), median(rounds)));
        }
        md.push_str(&format!("| {title} | {} |\n", cols.join(" | ")));
    }
    Ok(md)
}

/// `deja dogfood`, every campaign and run under `settings`.
pub fn main(args: DogfoodArgs, settings: &Settings) -> Exit {
    let dir = args.guests.clone().unwrap_or_else(|| {
        let exe = std::env::current_exe().unwrap_or_default();
        exe.parent().and_then(std::path::Path::parent).map(|t| t.join("guests")).unwrap_or_default()
    });
    let made = match args.blocks {
        true => blocks_table(&dir, args.seeds, args.runs, settings),
        false => table(&dir, args.seeds, settings),
    };
    let md = match made {
        Ok(md) => md,
        Err(e) => {
            eprintln!("deja: dogfood failed: {e}");
            return Exit::DejaFailed;
        }
    };
    if let Some(path) = &args.check {
        let committed = std::fs::read_to_string(path).unwrap_or_default();
        if committed == md {
            eprintln!("deja: {} matches what the code produces", path.display());
            return Exit::Clean;
        }
        eprintln!(
            "deja: {} differs from what the code produces now; regenerate with `cargo xtask dogfood`:\n{md}",
            path.display()
        );
        return Exit::Failure;
    }
    match &args.out {
        Some(path) => {
            if let Err(e) = std::fs::write(path, &md) {
                eprintln!("deja: {}: {e}", path.display());
                return Exit::DejaFailed;
            }
            eprintln!("deja: wrote {}", path.display());
        }
        None => print!("{md}"),
    }
    Exit::Clean
}
