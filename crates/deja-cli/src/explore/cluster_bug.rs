//! A cluster bug file: known by its schema, loaded with the cluster it needs, replayed and
//! minimized.

use super::*;

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
/// checks. Every node runs under `settings`.
pub(super) fn replay_cluster(args: &ReplayArgs, settings: &deja_vmm::Settings) -> Exit {
    let (bug, mut target) = match load_cluster_bug(&args.bug, None, &args.program) {
        Ok(x) => x,
        Err(Failure { code, message: m }) => {
            eprintln!("deja: cannot replay: {m}");
            return code;
        }
    };
    target.cfg.settings = *settings;
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
    host_note("bug file", bug.host.as_ref(), settings);
    replay_verdict(&bug.id, &bug.signature, &bug.digest, out.failure.as_ref(), &out.report.digest, "cluster")
}

/// `deja minimize` of a cluster bug: [`Exit::Clean`] written and verified, [`Exit::Incomplete`]
/// not minimized, [`Exit::NotLoadable`] a bug file that fails its checks. Every node runs under
/// `settings`.
pub(super) fn minimize_cluster(args: &MinimizeArgs, settings: &deja_vmm::Settings) -> Exit {
    let (bug, mut target) = match load_cluster_bug(&args.bug, None, &args.program) {
        Ok(x) => x,
        Err(Failure { code, message: m }) => {
            eprintln!("deja: cannot minimize: {m}");
            return code;
        }
    };
    target.cfg.settings = *settings;
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
