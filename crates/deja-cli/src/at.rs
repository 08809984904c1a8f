//! `deja at BUG --time MS | --decision K`: a cluster bug's run replayed up to a moment and held
//! there; prints what every node holds (or one node's), copies a node's file as it is there,
//! runs a command inside a node from there, or counts how continuations with fresh randomness
//! end. The bug's own run is never changed: each of these replays it anew.

use std::path::PathBuf;

use deja_cluster::moment::{At, Moment, Pause, Paused};
use deja_explore::cluster::moments;

use crate::exit::Exit;
use crate::explore::{is_cluster_bug, load_cluster_bug};

/// Arguments of `deja at`.
#[derive(Debug, clap::Args)]
pub struct AtArgs {
    /// The moment: the first scheduling step at or after this virtual time, in ms.
    #[arg(long, value_name = "MS", conflicts_with = "decision", required_unless_present = "decision")]
    pub time: Option<f64>,
    /// The moment: the first scheduling step with this many cluster decisions taken.
    #[arg(long, value_name = "K")]
    pub decision: Option<u64>,
    /// Print only this node (and the network); the node `--extract` and `--exec` act in.
    #[arg(long, value_name = "NAME")]
    pub node: Option<String>,
    /// Copy this file of the node (`--node`) as it is at the moment into `--to`.
    #[arg(long, value_name = "PATH", requires_all = ["node", "to"])]
    pub extract: Option<String>,
    /// The directory `--extract` writes the file to (under its own name).
    #[arg(long, value_name = "DIR")]
    pub to: Option<PathBuf>,
    /// With `--extract`: the file as a crash at the moment that kept none of the pending
    /// operations would leave it (what is durable).
    #[arg(long, requires = "extract")]
    pub crashed: bool,
    /// Run the command after `--` inside the node (`--node`) from the moment, as `docker exec`
    /// would, with no new fault while it runs and the rest of the cluster running on; print
    /// its output and status.
    #[arg(long, requires = "node")]
    pub exec: bool,
    /// With `--exec`: the virtual time the command may take, in ms.
    #[arg(long, value_name = "MS", default_value_t = 10_000)]
    pub exec_limit_ms: u64,
    /// Run N continuations from the moment, each with fresh randomness, and count how many
    /// fail as the bug did, and how the others end (the same counts in every process).
    #[arg(long, value_name = "N")]
    pub branches: Option<u64>,
    /// Threads for `--branches` (default: this host's cores; the counts do not depend on it).
    #[arg(long, value_name = "N")]
    pub jobs: Option<usize>,
    /// Print the moment as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Where a node's binary is (`NODE=PATH`) or the cluster file, as for `deja replay`.
    #[arg(long, value_name = "PATH|NODE=PATH")]
    pub program: Vec<String>,
    /// The cluster bug file (`deja explore`'s, or `deja minimize`'s).
    pub bug: PathBuf,
    /// The command `--exec` runs, after `--`.
    #[arg(last = true)]
    pub command: Vec<String>,
}

/// The cluster bug file `path` and its cluster under `settings`, for `deja COMMAND`
/// (`--program` as `deja replay` takes it); what is wrong is said, with its exit code.
pub(crate) fn cluster_bug(
    command: &str,
    path: &std::path::Path,
    program: &[String],
    settings: &deja_vmm::Settings,
) -> Result<(deja_explore::ClusterBug, deja_explore::ClusterTarget), Exit> {
    if !is_cluster_bug(path) {
        eprintln!(
            "deja: {command}: {} is not a cluster bug file; `deja {command}` takes the bug files of clusters (a \
             program can run as a cluster of one node)",
            path.display()
        );
        return Err(Exit::Usage);
    }
    let (bug, mut target) = load_cluster_bug(path, None, program).map_err(|f| {
        eprintln!("deja: {command}: {}", f.message);
        f.code
    })?;
    target.cfg.settings = *settings;
    Ok((bug, target))
}

/// Threads for branches: `asked`, or this host's cores.
pub(crate) fn jobs(asked: Option<usize>) -> usize {
    asked.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// The moment `args` name.
fn moment_of(args: &AtArgs) -> At {
    match (args.time, args.decision) {
        (_, Some(k)) => At::Decision(k),
        (Some(ms), None) => At::Time((ms.max(0.0) * 1e6).round() as u64),
        (None, None) => At::Time(0),
    }
}

fn ms(ns: u64) -> String {
    format!("{:.3} ms", ns as f64 / 1e6)
}

/// `deja at`: [`Exit::Clean`] when it printed (or extracted, or ran) what was asked;
/// [`Exit::Usage`] for a moment after the run's end, a node it does not have or a command that
/// cannot start; the load errors of `deja replay`.
pub fn main(args: AtArgs, settings: &deja_vmm::Settings) -> Exit {
    if args.exec && args.command.is_empty() {
        eprintln!("deja: at: --exec needs the command after `--`");
        return Exit::Usage;
    }
    let (bug, target) = match cluster_bug("at", &args.bug, &args.program, settings) {
        Ok(x) => x,
        Err(code) => return code,
    };
    let at = moment_of(&args);
    if let Some(n) = args.branches {
        return match moments::branches(&target, &bug.input, &bug.signature, at, n, jobs(args.jobs)) {
            Ok(b) => {
                if args.json {
                    println!("{}", serde_json::to_string_pretty(&b).unwrap_or_default());
                }
                eprintln!(
                    "deja: {n} branches from {} (decision {}), each with fresh randomness: {} failed as the bug \
                     did ({}), {} failed otherwise, {} did not fail",
                    ms(b.time_ns),
                    b.decision,
                    b.same,
                    bug.signature,
                    b.other.values().sum::<u64>(),
                    n - b.same - b.other.values().sum::<u64>()
                );
                for (what, count) in &b.other {
                    eprintln!("deja:   {count} × {what}");
                }
                Exit::Clean
            }
            Err(e) => {
                eprintln!("deja: at: {e}");
                Exit::Usage
            }
        };
    }
    let mut paused = match moments::pause(&target, &bug.input, at) {
        Ok(Pause::At(p)) => p,
        Ok(Pause::Ended(r)) => {
            eprintln!(
                "deja: at: the run ended ({:?}) at {}, before the moment {at:?}",
                r.outcome,
                ms(r.virtual_time_ns)
            );
            return Exit::Usage;
        }
        Err(e) => {
            eprintln!("deja: at: the replay failed to run: {e}");
            return Exit::Incomplete;
        }
    };
    let node = match args.node.as_deref().map(|n| (n, paused.node(n))) {
        Some((name, None)) => {
            eprintln!("deja: at: the cluster has no node {name} (it has {})", paused.node_names().join(", "));
            return Exit::Usage;
        }
        Some((_, Some(i))) => Some(i),
        None => None,
    };
    let moment = paused.moment();
    if let (Some(path), Some(dir), Some(i)) = (&args.extract, &args.to, node) {
        return extract(&paused, i, path, dir, args.crashed, &moment);
    }
    if let (true, Some(i)) = (args.exec, node) {
        return exec(&mut paused, i, &args.command, args.exec_limit_ms, &moment);
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&moment).unwrap_or_default());
    } else {
        print_moment(&moment, args.node.as_deref(), at);
    }
    Exit::Clean
}

/// `--extract`: the file written to `dir` under its own name.
fn extract(paused: &Paused, node: usize, path: &str, dir: &std::path::Path, crashed: bool, m: &Moment) -> Exit {
    let bytes = match paused.read_file(node, path, crashed) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("deja: at: {e}");
            return Exit::Usage;
        }
    };
    let name = path.rsplit('/').next().filter(|n| !n.is_empty()).unwrap_or("file");
    let out = dir.join(name);
    if let Err(e) = std::fs::create_dir_all(dir).and_then(|_| std::fs::write(&out, &bytes)) {
        eprintln!("deja: at: cannot write {}: {e}", out.display());
        return Exit::DejaFailed;
    }
    let how = if crashed { "as a crash there that kept nothing pending would leave it" } else { "as it is there" };
    eprintln!(
        "deja: {path} of {} at {} (decision {}), {how}: {} bytes, written to {}",
        paused.node_names()[node],
        ms(m.time_ns),
        m.decisions,
        bytes.len(),
        out.display()
    );
    Exit::Clean
}

/// `--exec`: the command's output on stdout, its status and time on stderr.
fn exec(paused: &mut Paused, node: usize, argv: &[String], limit_ms: u64, m: &Moment) -> Exit {
    let name = paused.node_names()[node].clone();
    match paused.exec(node, argv, limit_ms.saturating_mul(1_000_000)) {
        Ok(x) => {
            use std::io::Write;
            let _ = std::io::stdout().write_all(&x.output);
            let status = x.status.map_or_else(|| "no status".to_string(), |s| format!("exit status {s}"));
            eprintln!(
                "deja: `{}` in {name} from {} (decision {}), no new fault: {status} after {} of virtual time{}",
                argv.join(" "),
                ms(m.time_ns),
                m.decisions,
                ms(x.ran_ns),
                x.why.map(|w| format!(" ({w})")).unwrap_or_default()
            );
            Exit::Clean
        }
        Err(e) => {
            eprintln!("deja: at: {e}");
            Exit::Usage
        }
    }
}

/// The moment in words, every node's or `only`'s.
fn print_moment(m: &Moment, only: Option<&str>, at: At) {
    let asked = match at {
        At::Time(t) => format!("the first step at or after {}", ms(t)),
        At::Decision(k) => format!("the first step with {k} cluster decisions taken"),
    };
    println!("at {} with {} cluster decisions taken ({asked})", ms(m.time_ns), m.decisions);
    for n in m.nodes.iter().filter(|n| only.is_none_or(|o| o == n.name)) {
        let clock = n.clock_ns.map(|c| format!(", clock {}", ms(c))).unwrap_or_default();
        println!("\nnode {}: {}{clock}, life {}", n.name, n.state, n.lives);
        for p in &n.processes {
            let zombie = if p.zombie { " (ended, not reaped)" } else { "" };
            println!("  process {} (parent {}){zombie}: {}", p.pid, p.ppid, p.cmdline);
            for t in &p.threads {
                println!("    thread {}: {}", t.tid, t.state);
            }
            if !p.fds.is_empty() {
                let fds: Vec<String> = p.fds.iter().map(|(fd, what)| format!("{fd} {what}")).collect();
                println!("    fds: {}", fds.join(", "));
            }
        }
        if !n.pending.is_empty() {
            println!("  pending, not yet durable ({}): {}", n.pending.len(), n.pending.join("; "));
        }
        for (stream, lines) in [("stdout", &n.stdout_tail), ("stderr", &n.stderr_tail)] {
            if !lines.is_empty() {
                println!("  {stream}, last {} lines:", lines.len());
                for l in lines {
                    println!("    {l}");
                }
            }
        }
    }
    let shown: Vec<_> = m.in_flight.iter().filter(|p| only.is_none_or(|o| o == p.from || o == p.to)).collect();
    println!("\nnetwork: {} packet(s) in flight", shown.len());
    for p in shown {
        let when = p.at_ns.map_or_else(|| "held by a cut".to_string(), |t| format!("arrives at {}", ms(t)));
        println!("  {} → {}, {when}: {}", p.from, p.to, p.what);
    }
    if !m.cuts.is_empty() {
        let cuts: Vec<String> = m.cuts.iter().map(|(a, b)| format!("{a} ↛ {b}")).collect();
        println!("cuts: {}", cuts.join(", "));
    }
    println!("\nfaults so far: {}", m.faults.len());
    for f in &m.faults {
        println!("  {:>12}  {} {}", ms(f.time_ns), f.kind, f.detail);
    }
}
