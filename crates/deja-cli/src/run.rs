//! `deja run`: one run, or `--audit K` runs compared by trace digest.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use deja_kernel::{ProgramSpec, RunReport, Stream};
use deja_vmm::{BootOptions, Incarnation, RunError, Session, Settings, Snapshot, SnapshotMeta};

use crate::exit::Exit;
pub(crate) use crate::run_args::parse_fail_stop;
pub use crate::run_args::{parse_crash_model, parse_crash_state, replay_argv, replay_command, Failure, RunArgs};
use crate::run_report::print_text_summary;
pub use crate::run_report::RunSummary;

fn guest_path(host: &str) -> String {
    let trimmed = host.trim_start_matches("./");
    if trimmed.starts_with('/') {
        trimmed.to_string()
    } else {
        format!("/{trimmed}")
    }
}

/// The most bytes a run's declared inputs may hold together.
const DECLARED_MAX: u64 = 1 << 30;

/// Reads every `--file HOST[:GUEST]`: a file, or a directory with every regular file below it
/// (symlinks followed, in name order), each at its place under GUEST. Directories with no file
/// below them are not made. A run's declared inputs hold at most [`DECLARED_MAX`] bytes.
pub fn read_declared(decls: &[String]) -> Result<BTreeMap<String, Vec<u8>>, Failure> {
    let mut files = BTreeMap::new();
    let mut total = 0u64;
    for decl in decls {
        let (host, guest) = match decl.split_once(':') {
            Some((h, g)) => (h.to_string(), g.to_string()),
            None => (decl.clone(), guest_path(decl)),
        };
        if let Some(problem) = deja_kernel::fs::guest_path_problem(&guest) {
            return Err(Failure::new(Exit::Usage, format!("--file {decl}: {problem}")));
        }
        let unreadable = |path: &Path, e: std::io::Error| {
            let code = if e.kind() == std::io::ErrorKind::NotFound { Exit::NotFound } else { Exit::Usage };
            Failure::new(code, format!("cannot read declared file {}: {e}", path.display()))
        };
        let mut todo = vec![(PathBuf::from(&host), guest.trim_end_matches('/').to_string(), true)];
        let mut seen_dirs = std::collections::BTreeSet::new();
        while let Some((path, at, top)) = todo.pop() {
            let meta = match std::fs::metadata(&path) {
                Ok(m) => m,
                // Below the top, a dangling symlink is not an input.
                Err(e) if !top && e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(unreadable(&path, e)),
            };
            if meta.is_dir() {
                // Each directory once: a symlink back up the tree would never end.
                let real = std::fs::canonicalize(&path).map_err(|e| unreadable(&path, e))?;
                if !seen_dirs.insert(real) {
                    continue;
                }
                if seen_dirs.len() > 100_000 {
                    return Err(Failure::new(Exit::Usage, format!("--file {decl}: more than 100000 directories")));
                }
                let mut names: Vec<_> = std::fs::read_dir(&path)
                    .map_err(|e| unreadable(&path, e))?
                    .filter_map(|e| e.ok().map(|e| e.file_name()))
                    .collect();
                names.sort();
                // Popped last first: pushed in reverse so the files are read in name order.
                for n in names.into_iter().rev() {
                    // A name that is not UTF-8 cannot be a guest path.
                    let Some(name) = n.to_str() else { continue };
                    todo.push((path.join(&n), format!("{at}/{name}"), false));
                }
                continue;
            }
            if !meta.is_file() {
                continue; // a device, socket or FIFO of the host: never an input
            }
            let at = if at.is_empty() { "/".to_string() } else { at };
            if let Some(problem) = deja_kernel::fs::guest_path_problem(&at) {
                return Err(Failure::new(Exit::Usage, format!("--file {decl}: {at}: {problem}")));
            }
            total += meta.len();
            if total > DECLARED_MAX {
                return Err(Failure::new(
                    Exit::Usage,
                    format!("--file {decl}: the declared inputs come to more than {} MiB", DECLARED_MAX >> 20),
                ));
            }
            let data = std::fs::read(&path).map_err(|e| unreadable(&path, e))?;
            files.insert(at, data);
        }
    }
    Ok(files)
}

/// With `on`, gives the program `ANTITHESIS_SDK_LOCAL_OUTPUT` naming deja's device for the
/// Antithesis SDKs' messages, unless its environment names a path already (which then becomes
/// that device).
pub fn antithesis_output(env: &mut Vec<String>, on: crate::run_args::OnOff) {
    let var = deja_kernel::ANTITHESIS_LOCAL_OUTPUT;
    let named = env.iter().any(|e| e.strip_prefix(var).is_some_and(|r| r.starts_with('=')));
    if on == crate::run_args::OnOff::On && !named {
        env.push(format!("{var}={}", deja_kernel::ANTITHESIS_OUTPUT));
    }
}

/// Builds the run's spec from the command line, reading every declared input.
pub fn build_spec(
    args: &RunArgs,
    program: Option<&Path>,
) -> Result<(ProgramSpec, Option<crate::rootfs::RootInput>), Failure> {
    let ask = crate::rootfs::Ask {
        image: args.image.as_deref(),
        dir: args.root.as_deref(),
        entrypoint: args.entrypoint.as_deref(),
        program,
        args: &args.args,
        env: &args.env,
        cwd: args.cwd.as_deref(),
    };
    let mut files = read_declared(&args.files)?;
    let (image, exe_path, argv, mut env, cwd, root, root_input) = match crate::rootfs::open(&ask)? {
        Some(crate::rootfs::Rooted { rooted: r, input }) => {
            (r.image, r.exe_path, r.argv, r.env, r.cwd, Some(r.root), Some(input))
        }
        None => {
            let program = program.ok_or_else(|| Failure::new(Exit::Usage, "name a program"))?;
            let image = std::fs::read(program).map_err(|e| {
                let code = if e.kind() == std::io::ErrorKind::NotFound { Exit::NotFound } else { Exit::NotLoadable };
                Failure::new(code, format!("cannot read program {}: {e}", program.display()))
            })?;
            let name =
                program.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "program".into());
            let exe_path = format!("/bin/{name}");
            // A dynamically linked program brings its loader and libraries from the host, unless
            // the command line declared them itself.
            let needs = deja_inputs::dynlink::host_closure(&image, program, &exe_path)
                .map_err(|e| Failure::new(Exit::NotLoadable, e))?;
            for (path, data) in needs {
                files.entry(path).or_insert(data);
            }
            let mut argv = vec![exe_path.clone()];
            argv.extend(args.args.iter().cloned());
            (image, exe_path, argv, args.env.clone(), args.cwd.clone().unwrap_or_default(), None, None)
        }
    };
    antithesis_output(&mut env, args.antithesis_sdk);
    let stdin = match &args.stdin {
        Some(p) => std::fs::read(p).map_err(|e| {
            let code = if e.kind() == std::io::ErrorKind::NotFound { Exit::NotFound } else { Exit::Usage };
            Failure::new(code, format!("cannot read --stdin {}: {e}", p.display()))
        })?,
        None => Vec::new(),
    };
    if !(16..=65536).contains(&args.memory) {
        return Err(Failure::new(
            Exit::Usage,
            format!("--memory {}: guest RAM must be between 16 and 65536 MiB", args.memory),
        ));
    }
    for kv in &args.env {
        if !kv.contains('=') {
            return Err(Failure::new(Exit::Usage, format!("--env {kv}: expected KEY=VALUE")));
        }
    }
    let errors = args
        .fail
        .iter()
        .map(|r| deja_kernel::ErrorRule::parse(r).map_err(|e| Failure::new(Exit::Usage, format!("--fail {e}"))))
        .collect::<Result<Vec<_>, _>>()?;
    let crash_at = args
        .crash_at
        .iter()
        .map(|c| deja_kernel::OpCrash::parse(c).map_err(|e| Failure::new(Exit::Usage, format!("--crash-at {e}"))))
        .collect::<Result<Vec<_>, _>>()?;
    let kill_process = args
        .kill_process
        .iter()
        .map(|c| {
            deja_kernel::ProcessKill::parse(c).map_err(|e| Failure::new(Exit::Usage, format!("--kill-process {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let crash_state = match &args.crash_state {
        None => None,
        Some(text) => {
            Some(parse_crash_state(text).map_err(|e| Failure::new(Exit::Usage, format!("--crash-state {text}: {e}")))?)
        }
    };
    let faults = deja_kernel::FaultConfig {
        crash_after_durable_write: args.crash_after_durable_write,
        crash_before_durable_write: args.crash_before_durable_write,
        crash_at_exit: args.crash_at_exit,
        crash_state,
        torn_writes: args.torn_writes,
        reordered_writes: args.reordered_writes,
        eio_on_write_ppm: args.eio_write_ppm,
        eio_on_fsync_ppm: args.eio_fsync_ppm,
        enospc_on_write_ppm: args.enospc_write_ppm,
        errors,
        crash_at,
        fault_paths: Vec::new(),
        crash_model: args.crash_model,
        kill_process,
        fail_stop: args.fail_stop.clone(),
        failure_marker: args.failure_marker.clone(),
    };
    let mut disk = None;
    for decl in &args.copy_in {
        let Some((host, guest)) = decl.split_once(':') else {
            return Err(Failure::new(Exit::Usage, format!("--copy-in {decl}: expected HOST:GUEST")));
        };
        let data = std::fs::read(host).map_err(|e| {
            let code = if e.kind() == std::io::ErrorKind::NotFound { Exit::NotFound } else { Exit::Usage };
            Failure::new(code, format!("cannot read --copy-in file {host}: {e}"))
        })?;
        let d: &mut deja_kernel::Disk = disk.get_or_insert_with(deja_kernel::Disk::default);
        d.insert_file(guest, data).map_err(|e| Failure::new(Exit::Usage, format!("--copy-in {decl}: {e}")))?;
    }
    let spec = ProgramSpec {
        faults,
        disk,
        fs: Default::default(),
        image,
        exe_path,
        argv,
        env,
        files,
        root,
        stdin,
        seed: args.seed.unwrap_or(0),
        record_trace: args.trace_out.is_some(),
        rewrite: Default::default(),
        jumps: args.jumps(),
        vdso: Default::default(),
        cwd,
        cpus: args.cpus,
    };
    Ok((spec, root_input))
}

/// Where a run starts.
pub enum Source {
    /// A program, from its first instruction.
    Program(Box<ProgramSpec>),
    /// A snapshot, from the syscall it was taken at.
    Snapshot(Box<Snapshot>),
}

fn run_error(e: RunError) -> Failure {
    match e {
        RunError::Load { source: e } => Failure::new(Exit::NotLoadable, format!("cannot load the program: {e}")),
        RunError::Snapshot { source: e } => {
            Failure::new(Exit::NotLoadable, format!("cannot restore the snapshot: {e}"))
        }
        RunError::Vm { source: e @ deja_vmm::VmError::NoProgress { .. } } => {
            Failure::new(Exit::NoProgress, e.to_string())
        }
        RunError::Vm { source: e } => Failure::new(Exit::DejaFailed, e.to_string()),
    }
}

/// One run: every life (a snapshot continuation or a snapshotting run has one), the program's
/// output (stream-tagged, in order), and the digest over the lives.
pub struct RunResult {
    /// Every life, in order.
    pub lives: Vec<Incarnation>,
    /// What the program wrote: per chunk a stream tag (`1`/`2`), a length and the bytes.
    pub output: Vec<u8>,
}

impl RunResult {
    /// The last life's run, carrying the digest over every life.
    pub fn summary(&self) -> deja_vmm::Run {
        let mut last = self.lives.last().expect("one life at least").run.clone();
        last.report.digest = deja_vmm::lives_digest(&self.lives);
        last
    }

    /// This run as an audit compares it, made on a host with `fingerprint` (its settings').
    pub fn audit_record(&self, fingerprint: &deja_vmm::Fingerprint) -> deja_vmm::divergence::RunRecord {
        let mut record =
            deja_vmm::divergence::RunRecord::program(deja_vmm::lives_digest(&self.lives), &self.lives, &self.output);
        record.fingerprint = Some(fingerprint.clone());
        record
    }
}

fn one_life(run: deja_vmm::Run, seed: u64) -> Vec<Incarnation> {
    vec![Incarnation { run, crashed: false, seed, crash_disk_digest: None }]
}

/// Runs once under `settings` (a snapshot is restored under them too); program output is passed
/// through when `live`, else captured. With `snapshot` (index, file) the run also writes a
/// snapshot at that syscall.
pub fn run_once(
    source: &Source,
    memory_mib: u64,
    settings: &Settings,
    live: bool,
    snapshot: Option<(u64, &Path)>,
    export: Option<&mut Option<deja_kernel::Disk>>,
    kernel: crate::run_args::Placement,
) -> Result<RunResult, Failure> {
    let mut captured = Vec::new();
    let mut stdout = std::io::stdout().lock();
    let mut sink = |stream: Stream, bytes: &[u8]| {
        if live {
            let _ = match stream {
                Stream::Stdout => stdout.write_all(bytes).and_then(|_| stdout.flush()),
                Stream::Stderr => std::io::stderr().write_all(bytes),
            };
        }
        captured.push(match stream {
            Stream::Stdout => b'1',
            Stream::Stderr => b'2',
        });
        captured.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        captured.extend_from_slice(bytes);
    };
    let lives = match (source, snapshot) {
        (Source::Program(spec), None) if kernel == crate::run_args::Placement::Guest => {
            one_life(crate::placement::run(spec, memory_mib, settings, &mut sink)?, spec.seed)
        }
        (Source::Program(spec), None) => {
            let lives = Session::boot_with((**spec).clone(), memory_mib << 20, BootOptions::new(*settings))
                .and_then(|mut s| s.lives(&mut sink, export))
                .map_err(run_error)?;
            for (i, life) in lives.iter().enumerate().filter(|(_, l)| l.crashed) {
                if live {
                    let point = life
                        .run
                        .report
                        .faults
                        .iter()
                        .rev()
                        .find(|f| f.kind == deja_kernel::FaultKind::Crash)
                        .map(|f| f.point.clone())
                        .unwrap_or_else(|| format!("after durable write {}", life.run.report.durable_writes));
                    eprintln!(
                        "deja: life {i} crashed {point} (disk {}); restarting with seed {}",
                        life.crash_disk_digest.as_deref().unwrap_or(""),
                        lives[i + 1].seed
                    );
                    if point.starts_with("at its fail-stop") {
                        eprintln!(
                            "deja:   a fail-stop, restarted on its disk (--fail-stop never counts it as a failure)"
                        );
                        let said = &life.run.report.last_output;
                        for line in &said[said.len().saturating_sub(3)..] {
                            eprintln!("deja:   | {line}");
                        }
                    }
                }
            }
            lives
        }
        (Source::Program(spec), Some((at, path))) => {
            let meta = SnapshotMeta::of(spec, at);
            let mut session = Session::boot_with((**spec).clone(), memory_mib << 20, BootOptions::new(*settings))
                .map_err(run_error)?;
            let snap = match session.run_to_syscall(at, &mut sink).map_err(run_error)? {
                true => Some(session.snapshot(meta).map_err(run_error)?),
                false => None,
            };
            let run = session.run(&mut sink).map_err(run_error)?;
            let Some(snap) = snap else {
                return Err(Failure::new(
                    Exit::DejaFailed,
                    format!(
                        "the program ended after {} syscalls, before syscall {at}: no snapshot was written",
                        run.report.syscalls
                    ),
                ));
            };
            deja_format::write_atomic(path, &snap.to_artifact())
                .map_err(|e| Failure::new(Exit::DejaFailed, format!("cannot write the snapshot: {e}")))?;
            eprintln!("deja: snapshot at syscall {at} written to {}", path.display());
            one_life(run, spec.seed)
        }
        (Source::Snapshot(snap), _) => {
            let seed = snap.meta.seed;
            let run = Session::restore(snap, settings).and_then(|mut s| s.run(&mut sink)).map_err(run_error)?;
            one_life(run, seed)
        }
    };
    Ok(RunResult { lives, output: captured })
}

fn write_trace(path: &Path, report: &RunReport) -> std::io::Result<()> {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    for entry in &report.trace {
        serde_json::to_writer(&mut f, entry)?;
        f.write_all(b"\n")?;
    }
    f.flush()
}

/// `deja run`, its VMs set up under `settings`.
pub fn main(args: RunArgs, settings: &Settings) -> Exit {
    if let Some(core) = args.on_core {
        if let Err(e) = deja_vmm::identity::pin_current_thread(core) {
            eprintln!("deja: error: cannot run on host core {core}: {e}");
            return Exit::DejaFailed;
        }
    }
    match run_main(&args, settings) {
        Ok(code) => code,
        Err(f) => {
            eprintln!("deja: error: {}", f.message);
            f.code
        }
    }
}

fn run_main(args: &RunArgs, settings: &Settings) -> Result<Exit, Failure> {
    if let (None, None, None, Some(p)) = (&args.from_snapshot, &args.image, &args.root, &args.program) {
        if deja_cluster::config::is_cluster_file(p) {
            if args.kernel == crate::run_args::Placement::Guest {
                return Err(Failure::new(Exit::Usage, "--kernel guest runs one program, not a cluster, yet"));
            }
            return crate::cluster::run(args, p, settings);
        }
    }
    let mut inputs = None;
    let source = match (&args.from_snapshot, &args.program) {
        (Some(path), _) => {
            let bytes = std::fs::read(path).map_err(|e| {
                let code = if e.kind() == std::io::ErrorKind::NotFound { Exit::NotFound } else { Exit::NotLoadable };
                Failure::new(code, format!("cannot read snapshot {}: {e}", path.display()))
            })?;
            let snap = Snapshot::from_artifact(&bytes)
                .map_err(|e| Failure::new(Exit::NotLoadable, format!("cannot restore {}: {e}", path.display())))?;
            Source::Snapshot(Box::new(snap))
        }
        (None, program) if program.is_some() || args.image.is_some() => {
            let (spec, root) = build_spec(args, program.as_deref())?;
            inputs = Some(crate::run_report::RunInputs::of(&spec, root.as_ref()));
            Source::Program(Box::new(spec))
        }
        (None, _) => return Err(Failure::new(Exit::Usage, "name a program or --from-snapshot FILE")),
    };
    let auditing = args.audit.is_some_and(|k| k > 1) || args.audit_record.is_some();
    let source = match source {
        Source::Program(mut spec) if auditing => {
            // An audited run keeps its trace, page hashes and file-system digest, so that a
            // divergence can be named.
            spec.record_trace = true;
            Source::Program(spec)
        }
        other => other,
    };
    let snapshot = args.snapshot_at.zip(args.snapshot_out.as_deref());
    let host = settings.host().map_err(|e| Failure::new(Exit::DejaFailed, e.to_string()))?;
    if let Source::Snapshot(snap) = &source {
        if let Some(note) = deja_vmm::identity::compare_recorded(snap.meta.host.as_ref(), settings) {
            eprintln!("deja: note: the snapshot was {note}");
        }
    }
    let runs = args.audit.unwrap_or(1).max(1);
    if args.kernel == crate::run_args::Placement::Guest {
        let refused = [
            (matches!(source, Source::Snapshot(_)), "--from-snapshot"),
            (args.snapshot_at.is_some(), "--snapshot-at"),
            (args.fs_export.is_some(), "--fs-export"),
            (args.crash_sweep, "--crash-sweep"),
        ];
        if let Some((_, flag)) = refused.iter().find(|(on, _)| *on) {
            return Err(Failure::new(Exit::Usage, format!("--kernel guest does not take {flag} yet")));
        }
    }
    if args.crash_sweep {
        let Source::Program(spec) = source else {
            return Err(Failure::new(Exit::Usage, "--crash-sweep needs a program, not a snapshot"));
        };
        return crate::crash::sweep(args, *spec, settings);
    }
    let mut final_disk = None;
    let export = args.fs_export.as_ref().map(|_| &mut final_disk);
    let live = args.audit_record.is_none();
    let result = run_once(&source, args.memory, settings, live, snapshot, export, args.kernel)?;
    if let Some(path) = &args.audit_record {
        let mut record = result.audit_record(&host.fingerprint);
        record.core = args.on_core;
        crate::audit::write_record(&record, path)?;
        return Ok(Exit::Clean);
    }
    let first = result.summary();
    if let (Some(dir), Some(disk)) = (&args.fs_export, &final_disk) {
        deja_inputs::tree::export_disk(disk, dir).map_err(|e| {
            Failure::new(Exit::DejaFailed, format!("cannot export the file system to {}: {e}", dir.display()))
        })?;
        eprintln!("deja: file system exported to {}", dir.display());
    }
    let mut audit = None;
    let mut diverged = false;
    if args.audit.is_some() {
        let record = result.audit_record(&host.fingerprint);
        let verdict = crate::audit::audit(&record, &replay_argv(args, &[]), runs, settings)?;
        diverged = verdict.result != "identical";
        if !args.json {
            crate::audit::print(&verdict);
        }
        audit = Some(serde_json::to_value(&verdict).expect("plain data serializes"));
    }
    if let Some(path) = &args.trace_out {
        write_trace(path, &first.report).map_err(|e| {
            Failure::new(Exit::DejaFailed, format!("cannot write the trace to {}: {e}", path.display()))
        })?;
    }
    let replay = replay_command(args);
    let summary = RunSummary::new(&first.report, &first, host, audit.as_ref(), &replay, inputs.as_ref());
    let json = summary.to_json();
    if let Some(path) = &args.report_out {
        std::fs::write(path, serde_json::to_vec_pretty(&json).unwrap_or_default()).map_err(|e| {
            Failure::new(Exit::DejaFailed, format!("cannot write the report to {}: {e}", path.display()))
        })?;
    }
    if args.json {
        eprintln!("{json}");
    } else {
        print_text_summary(&first.report, &first, (!args.no_probe).then_some(host), &replay, &summary.not_given);
        // A kill placed where no process came: say so, rather than let it look survived.
        for rule in &args.kill_process {
            let Ok(k) = deja_kernel::ProcessKill::parse(rule) else { continue };
            let struck =
                first.report.faults.iter().any(|f| f.kind == deja_kernel::FaultKind::Kill && f.point == k.point());
            if struck {
                continue;
            }
            match k.pid() {
                Some(pid) => eprintln!(
                    "deja: note: --kill-process {rule} never struck: process {pid} made fewer durable operations, or never ran (pid 1 never counts)"
                ),
                None => {
                    let made = first.report.process_ops.iter().find(|(n, _)| *n == k.name).map_or(0, |(_, c)| *c);
                    eprintln!(
                        "deja: note: --kill-process {rule} never struck: processes named {:?} made {made} durable operation(s) (pid 1 never counts)",
                        k.name
                    );
                }
            }
        }
    }
    if diverged {
        return Ok(Exit::AuditDiverged);
    }
    if first.report.assertion_failed() {
        return Ok(Exit::AssertionFailed);
    }
    Ok(Exit::Program(first.report.exit.code()))
}
