//! A program bug file and its program loaded again (by its BLAKE3, beside the bug file, with its
//! kept inputs), `deja replay` and `deja minimize` of it, and the verdict of a replay.

use super::*;

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
pub(super) fn beside(bug: &Path) -> PathBuf {
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
        for (path, data) in deja_inputs::dynlink::host_closure(image, program, &exe_guest).unwrap_or_default() {
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
/// or different program), [`Exit::NotLoadable`] when the bug file fails its checks. Runs under
/// `settings`.
pub fn replay(args: ReplayArgs, settings: &deja_vmm::Settings) -> Exit {
    if is_cluster_bug(&args.bug) {
        if args.fail_stop.is_some() {
            eprintln!("{FAIL_STOP_PER_NODE}");
            return Exit::Usage;
        }
        return replay_cluster(&args, settings);
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
    let out = match deja_explore::replay_under(&bug, &t, settings, &mut |s, b| {
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
    host_note("bug file", bug.host.as_ref(), settings);
    if out.digest != bug.digest {
        // Is this host at least consistent with itself? Replay again on another core.
        let seen: Vec<u32> = out.lives.iter().flat_map(|l| l.run.stats.host_cores.iter().copied()).collect();
        match deja_vmm::identity::on_another_core(&seen, || {
            deja_explore::replay_under(&bug, &t, settings, &mut |_, _| {})
        }) {
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

/// Says how the host an artifact was recorded on differs from this one under `settings`, if it
/// does.
pub fn host_note(what: &str, recorded: Option<&deja_vmm::Fingerprint>, settings: &deja_vmm::Settings) {
    if let Some(note) = deja_vmm::identity::compare_recorded(recorded, settings) {
        eprintln!("deja: note: the {what} was {note}");
    }
}

/// Compares a replay with its bug and prints the verdict: [`Exit::Failure`] when the failure
/// reproduced, [`Exit::Clean`] when it did not (`what` names the thing that ran: `run`, `cluster`).
pub(super) fn replay_verdict(
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
/// [`Exit::NotLoadable`] when the bug file fails its checks. Runs under `settings`.
pub fn minimize(args: MinimizeArgs, settings: &deja_vmm::Settings) -> Exit {
    if is_cluster_bug(&args.bug) {
        if args.fail_stop.is_some() {
            eprintln!("{FAIL_STOP_PER_NODE}");
            return Exit::Usage;
        }
        return minimize_cluster(&args, settings);
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
    match deja_explore::minimize_under(&bug, &t, settings, &out.display().to_string()) {
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
