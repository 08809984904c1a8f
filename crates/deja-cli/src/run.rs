//! `deja run`: one run, or `--audit K` runs compared by trace digest.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use deja_kernel::{ExitStatus, ProgramSpec, RunReport, Stream};
use deja_vmm::{Incarnation, RunError, Session, Snapshot, SnapshotMeta};

use crate::exit::Exit;
use crate::run_report::print_text_summary;
pub use crate::run_report::{HostSummary, RunSummary};

/// Arguments of `deja run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Seed of every random byte the program sees (default 0; for a cluster file, the file's
    /// `seed`).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Run here and in K-1 fresh deja processes pinned in turn to each host core this process may
    /// use, and compare full digests; prints `identical` or the first diverging component.
    #[arg(long, value_name = "K")]
    pub audit: Option<u32>,
    /// Pin this process to host core N before anything runs (used by `--audit`'s processes).
    #[arg(long, value_name = "N", hide = true)]
    pub on_core: Option<u32>,
    /// Write this run's audit record to FILE (used by `--audit`'s processes).
    #[arg(long, value_name = "FILE", hide = true)]
    pub audit_record: Option<PathBuf>,
    /// Print the summary on stderr as one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Write the run report (the JSON summary) to FILE.
    #[arg(long, value_name = "FILE")]
    pub report_out: Option<PathBuf>,
    /// Write every syscall of the run to FILE as JSON lines.
    #[arg(long, value_name = "FILE")]
    pub trace_out: Option<PathBuf>,
    /// Declare an input file the program may open read-only, at GUEST (default: the same path,
    /// made absolute under `/`); a directory declares every file below it.
    #[arg(long = "file", value_name = "HOST[:GUEST]")]
    pub files: Vec<String>,
    /// The program's stdin (empty if not given).
    #[arg(long, value_name = "FILE")]
    pub stdin: Option<PathBuf>,
    /// An environment variable for the program; the host environment is never passed through.
    #[arg(long = "env", value_name = "K=V")]
    pub env: Vec<String>,
    /// The program's starting working directory: an absolute guest path to a directory it has
    /// (default `/`). Relative paths resolve from it; `chdir` moves it.
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<String>,
    /// How many CPUs the program sees (`sched_getaffinity`, which glibc's `get_nprocs`, Go's
    /// `GOMAXPROCS` and Rust's `available_parallelism` read). deja still runs one thread at a
    /// time, deterministically.
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=i64::from(deja_kernel::MAX_CPUS)))]
    pub cpus: u32,
    /// Guest RAM in MiB.
    #[arg(long, default_value_t = 1024, value_name = "MiB")]
    pub memory: u64,
    /// Do not list the host's determinism hazards in the summary. (They are measured anyway, once
    /// per process: the CPU identity remedy and the host fingerprint depend on them.)
    #[arg(long)]
    pub no_probe: bool,
    /// Capture a snapshot when the program traps for syscall N (0-based, before it is served),
    /// then run on to the end. Needs --snapshot-out.
    #[arg(long, value_name = "N", requires = "snapshot_out")]
    pub snapshot_at: Option<u64>,
    /// Where --snapshot-at writes the snapshot.
    #[arg(long, value_name = "FILE", requires = "snapshot_at")]
    pub snapshot_out: Option<PathBuf>,
    /// Crash the node right after its K-th durable write (fsync, fdatasync, O_SYNC write,
    /// directory fsync, syncfs), then restart the program on what was durable.
    #[arg(long, value_name = "K")]
    pub crash_after_durable_write: Option<u64>,
    /// Crash when the program makes its K-th durable write, before it takes effect (what it would
    /// have made durable is still pending), then restart on what survived.
    #[arg(long, value_name = "K", conflicts_with = "crash_after_durable_write")]
    pub crash_before_durable_write: Option<u64>,
    /// Crash when the program exits, then restart it on what survived.
    #[arg(long)]
    pub crash_at_exit: bool,
    /// Crash before or after the NTH durable operation on a path, by meaning:
    /// `before:/data/wal:3` (fsyncs, fdatasyncs and O_SYNC writes of /data/wal counted from 1),
    /// then restart on what survived.
    #[arg(long, value_name = "WHEN:PATH:NTH")]
    pub crash_at: Vec<String>,
    /// Kill a process of the program (not the first) with SIGKILL before or after the NTH
    /// durable operation processes of that name make: `worker:before:2`; a NAME of digits is
    /// a pid, whose own operations count (`3:after:1`). The program's other processes go on,
    /// and what the killed one wrote stays in the page cache (see docs/PROCESSES.md).
    #[arg(long, value_name = "NAME:WHEN:NTH")]
    pub kill_process: Vec<String>,
    /// Exactly which pending operations the crash keeps: `none`, `all`, or positions
    /// (0-based, in program order) such as `0,2,3`, optionally with one write torn: `0,2+5:3`
    /// (operation 5 cut after 3 sectors). Without it, decisions choose as --torn-writes and
    /// --reordered-writes allow.
    #[arg(long, value_name = "STATE")]
    pub crash_state: Option<String>,
    /// Crash before and after every durable write and at exit, try the distinct crash states
    /// at each point (see docs/DURABILITY.md), restart each, and report whether every restart
    /// held. Exits 0 if all held, 1 if any failed, 2 if the evidence is incomplete.
    #[arg(long, conflicts_with_all = ["crash_after_durable_write", "crash_before_durable_write", "crash_at_exit", "crash_at", "audit", "snapshot_at"])]
    pub crash_sweep: bool,
    /// The sweep's crash states per crash point, at most (distinct images only).
    #[arg(long, value_name = "N", default_value_t = 16)]
    pub states_per_point: usize,
    /// Also fail each fsync of the run once (EIO; at most N of them, spread over the paths),
    /// then crash at every crash point after the failure (fsyncgate; see docs/DURABILITY.md).
    #[arg(long, value_name = "N", default_value_t = 0, requires = "crash_sweep")]
    pub fsync_failures: usize,
    /// With --fsync-failures: for each failed fsync, also up to K of the subsets of what it
    /// covered that it may have written back before failing (each with its own crash points);
    /// 0: only Linux's usual outcome, everything it covered dropped.
    #[arg(long, value_name = "K", default_value_t = 0, requires = "fsync_failures")]
    pub fsync_writebacks: usize,
    /// Sweep only the points right after each durable write, with no state but the durable
    /// layer (the sweep deja had before crash states; for comparison).
    #[arg(long, requires = "crash_sweep")]
    pub after_writes_only: bool,
    /// The crash model crash states come from: posix-weak (any subset of the pending
    /// operations, the default), xfs, ext4-ordered or process-kill (see docs/DURABILITY.md).
    /// Decisions and sweeps keep to the states it allows.
    #[arg(long, value_name = "MODEL", default_value = "posix-weak", value_parser = parse_crash_model)]
    pub crash_model: deja_kernel::CrashModel,
    /// With --crash-sweep: the weakest model whose failures fail the sweep. A restart that fails
    /// only in states weaker models allow is reported as a portability hazard and exits 0.
    #[arg(long, value_name = "MODEL", default_value = "posix-weak", value_parser = parse_crash_model, requires = "crash_sweep")]
    pub fail_on: deja_kernel::CrashModel,
    /// At a crash, let a prefix of the pending operations reach the disk, the next one a write
    /// cut at a 512-byte sector boundary (decisions).
    #[arg(long)]
    pub torn_writes: bool,
    /// At a crash, let any subset of the pending operations (data, sizes, directory entries)
    /// reach the disk (a decision each): the weakest POSIX model.
    #[arg(long)]
    pub reordered_writes: bool,
    /// Fail a chosen operation: `OP:PATH[:NTH[:ERRNO[:START-END]]]`, e.g. `write:/data/wal:4:eio`
    /// (the 4th write to /data/wal fails with EIO; NTH 0 means every one). OP is write, fsync,
    /// truncate, fallocate, create, rename or read; ERRNO is eio (default) or enospc.
    #[arg(long = "fail", value_name = "RULE")]
    pub fail: Vec<String>,
    /// How a life that ends non-zero after an injected I/O error is judged: `auto` (default: a
    /// fail-stop, restarted on its disk, unless it went on committing after the error, writes
    /// made durable twice or more; then a failure), `never` (always a failure), `always` (always
    /// a fail-stop), or `exit=2,3` (a fail-stop only with one of these exit codes).
    #[arg(long, value_name = "MODE", default_value = "auto", value_parser = parse_fail_stop)]
    pub fail_stop: deja_kernel::FailStopMode,
    /// The text a failing program marks the line that says what failed with (`VIOLATION:`): a
    /// failure that is an exit code is named by the last line holding it, from the marker on,
    /// instead of by its last line of output.
    #[arg(long, value_name = "TEXT")]
    pub failure_marker: Option<String>,
    /// Fail writes with EIO with this probability, in parts per million (a decision each).
    #[arg(long, value_name = "PPM", default_value_t = 0)]
    pub eio_write_ppm: u32,
    /// Fail fsyncs with EIO with this probability, in parts per million.
    #[arg(long, value_name = "PPM", default_value_t = 0)]
    pub eio_fsync_ppm: u32,
    /// Fail writes with ENOSPC with this probability, in parts per million.
    #[arg(long, value_name = "PPM", default_value_t = 0)]
    pub enospc_write_ppm: u32,
    /// Copy a host file into the program's writable disk at GUEST (durable from the start).
    #[arg(long = "copy-in", value_name = "HOST:GUEST")]
    pub copy_in: Vec<String>,
    /// At the end, write the program's file system (as it left it) under DIR on the host.
    #[arg(long, value_name = "DIR")]
    pub fs_export: Option<PathBuf>,
    /// Continue a run from a snapshot instead of starting a program.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["program", "snapshot_at", "files", "stdin", "env", "seed", "memory"])]
    pub from_snapshot: Option<PathBuf>,
    /// Run a container image: an OCI image layout or a `docker save` archive. Its layers make
    /// the read-only root; its entrypoint, command, environment and working directory are the
    /// run's (PROGRAM and the arguments after `--` replace the command, as in `docker run`).
    #[arg(long, value_name = "IMAGE.tar", conflicts_with_all = ["root", "from_snapshot"])]
    pub image: Option<PathBuf>,
    /// With --image: the program to run instead of the image's entrypoint (its command is
    /// dropped, as `docker run --entrypoint` drops it).
    #[arg(long, value_name = "PROGRAM", requires = "image")]
    pub entrypoint: Option<String>,
    /// Run inside DIR, a directory tree (an unpacked image) that becomes the read-only root:
    /// PROGRAM is a path in it or a name in its PATH, and its loader and libraries come from it.
    #[arg(long, value_name = "DIR", conflicts_with = "from_snapshot")]
    pub root: Option<PathBuf>,
    /// The x86-64 program to run (static or dynamically linked), or a cluster file (`*.toml`,
    /// see docs/CLUSTERS.md). Under --root or --image, a path or name in the root.
    #[arg(required_unless_present_any = ["from_snapshot", "image"])]
    pub program: Option<PathBuf>,
    /// Arguments for the program (after `--`).
    #[arg(last = true)]
    pub args: Vec<String>,
}

/// A crash model named on the command line.
pub fn parse_crash_model(text: &str) -> Result<deja_kernel::CrashModel, String> {
    deja_kernel::CrashModel::parse(text)
}

/// A failure before or around a run, with its exit code.
pub struct Failure {
    pub code: Exit,
    pub message: String,
}

impl Failure {
    pub fn new(code: Exit, message: impl Into<String>) -> Self {
        Failure { code, message: message.into() }
    }
}

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
    let (image, exe_path, argv, env, cwd, root, root_input) = match crate::rootfs::open(&ask)? {
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
            let needs = deja_cluster::dynlink::host_closure(&image, program, &exe_path)
                .map_err(|e| Failure::new(Exit::NotLoadable, e))?;
            for (path, data) in needs {
                files.entry(path).or_insert(data);
            }
            let mut argv = vec![exe_path.clone()];
            argv.extend(args.args.iter().cloned());
            (image, exe_path, argv, args.env.clone(), args.cwd.clone().unwrap_or_default(), None, None)
        }
    };
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
        vdso: Default::default(),
        cwd,
        cpus: args.cpus,
    };
    Ok((spec, root_input))
}

/// Parses `none`, `all`, or `P,P,...[+T:K]` (see `--crash-state`). `all` becomes every
/// position up to 4095; positions past the end of the pending list are ignored.
pub fn parse_crash_state(text: &str) -> Result<deja_kernel::CrashState, String> {
    let (kept, torn) = match text.split_once('+') {
        Some((k, t)) => (k, Some(t)),
        None => (text, None),
    };
    let kept: Vec<u32> = match kept {
        "none" | "" => Vec::new(),
        "all" => (0..4096).collect(),
        list => {
            let mut v = list
                .split(',')
                .map(|p| p.trim().parse::<u32>().map_err(|_| format!("{p:?} is not a position")))
                .collect::<Result<Vec<_>, _>>()?;
            v.sort_unstable();
            v.dedup();
            v
        }
    };
    let torn = match torn {
        None => None,
        Some(t) => {
            let (p, k) = t.split_once(':').ok_or("a torn write is POSITION:SECTORS")?;
            let p: u32 = p.parse().map_err(|_| format!("{p:?} is not a position"))?;
            let k: u64 = k.parse().map_err(|_| format!("{k:?} is not a number of sectors"))?;
            if k == 0 || kept.contains(&p) {
                return Err("a torn write keeps at least one sector and is not also kept whole".into());
            }
            Some((p, k))
        }
    };
    Ok(deja_kernel::CrashState { kept, torn })
}

/// `--crash-state` for a state (the inverse of [`parse_crash_state`]).
pub fn crash_state_arg(s: &deja_kernel::CrashState) -> String {
    let mut out = if s.kept.is_empty() {
        "none".to_string()
    } else {
        s.kept.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(",")
    };
    if let Some((p, k)) = s.torn {
        out.push_str(&format!("+{p}:{k}"));
    }
    out
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

    /// This run as an audit compares it.
    pub fn audit_record(&self) -> deja_vmm::divergence::RunRecord {
        deja_vmm::divergence::RunRecord::program(deja_vmm::lives_digest(&self.lives), &self.lives, &self.output)
    }
}

fn one_life(run: deja_vmm::Run, seed: u64) -> Vec<Incarnation> {
    vec![Incarnation { run, crashed: false, seed, crash_disk_digest: None }]
}

/// Runs once; program output is passed through when `live`, else captured. With `snapshot`
/// (index, file) the run also writes a snapshot at that syscall.
pub fn run_once(
    source: &Source,
    memory_mib: u64,
    live: bool,
    snapshot: Option<(u64, &Path)>,
    export: Option<&mut Option<deja_kernel::Disk>>,
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
        (Source::Program(spec), None) => {
            let lives = Session::boot((**spec).clone(), memory_mib << 20)
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
            let meta = SnapshotMeta::of(spec, at).map_err(run_error)?;
            let mut session = Session::boot((**spec).clone(), memory_mib << 20).map_err(run_error)?;
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
            let run = Session::restore(snap).and_then(|mut s| s.run(&mut sink)).map_err(run_error)?;
            one_life(run, seed)
        }
    };
    Ok(RunResult { lives, output: captured })
}

pub(crate) fn describe_exit(status: &ExitStatus) -> String {
    match status {
        ExitStatus::Exited { code } => format!("exited with code {code}"),
        ExitStatus::Signaled { signal, name, fault } => {
            let mut s = format!("killed by {name} (signal {signal})");
            if let Some(f) = fault {
                s.push_str(&format!(": {}", f.description));
                // Not a CPU fault (a deadlock, a refused signal frame): no instruction to name.
                if f.vector != 0 || f.rip != 0 {
                    s.push_str(&format!(" at rip {:#x}", f.rip));
                }
                if let Some(a) = f.addr {
                    s.push_str(&format!(", address {a:#x}"));
                }
            }
            s
        }
    }
}

fn shell_quote(s: &str) -> String {
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_./:=,+@%".contains(&b)) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// Reads `--fail-stop`.
pub(crate) fn parse_fail_stop(text: &str) -> Result<deja_kernel::FailStopMode, String> {
    deja_kernel::FailStopMode::parse(text)
}

/// The one command that reproduces this run exactly.
pub fn replay_command(args: &RunArgs) -> String {
    replay_command_with(args, &[])
}

/// [`replay_command`] with extra flags for `run` (for example a kill point).
pub fn replay_command_with(args: &RunArgs, extra: &[String]) -> String {
    let exe = std::env::args().next().unwrap_or_else(|| "deja".into());
    let parts: Vec<String> = std::iter::once(exe).chain(replay_argv(args, extra)).collect();
    parts.iter().map(|p| shell_quote(p)).collect::<Vec<_>>().join(" ")
}

/// The arguments of `deja` (after the executable) that reproduce this run, with `extra` flags
/// for `run`.
pub fn replay_argv(args: &RunArgs, extra: &[String]) -> Vec<String> {
    let mut parts = vec!["run".to_string()];
    if let Some(snap) = &args.from_snapshot {
        parts.extend(["--from-snapshot".to_string(), snap.display().to_string()]);
    } else {
        parts.extend(["--seed".to_string(), args.seed.unwrap_or(0).to_string()]);
        if args.memory != 1024 {
            parts.extend(["--memory".to_string(), args.memory.to_string()]);
        }
        if let Some(image) = &args.image {
            parts.extend(["--image".to_string(), image.display().to_string()]);
        }
        if let Some(e) = &args.entrypoint {
            parts.extend(["--entrypoint".to_string(), e.clone()]);
        }
        if let Some(root) = &args.root {
            parts.extend(["--root".to_string(), root.display().to_string()]);
        }
        for f in &args.files {
            parts.extend(["--file".to_string(), f.clone()]);
        }
        if let Some(stdin) = &args.stdin {
            parts.extend(["--stdin".to_string(), stdin.display().to_string()]);
        }
        for kv in &args.env {
            parts.extend(["--env".to_string(), kv.clone()]);
        }
        if let Some(cwd) = &args.cwd {
            parts.extend(["--cwd".to_string(), cwd.clone()]);
        }
        if args.cpus != 1 {
            parts.extend(["--cpus".to_string(), args.cpus.to_string()]);
        }
        for c in &args.copy_in {
            parts.extend(["--copy-in".to_string(), c.clone()]);
        }
        if let Some(k) = args.crash_after_durable_write {
            parts.push(format!("--crash-after-durable-write={k}"));
        }
        if let Some(k) = args.crash_before_durable_write {
            parts.push(format!("--crash-before-durable-write={k}"));
        }
        if args.crash_at_exit {
            parts.push("--crash-at-exit".to_string());
        }
        for c in &args.crash_at {
            parts.push(format!("--crash-at={c}"));
        }
        for c in &args.kill_process {
            parts.push(format!("--kill-process={c}"));
        }
        if let Some(s) = &args.crash_state {
            parts.push(format!("--crash-state={s}"));
        }
        for f in &args.fail {
            parts.push(format!("--fail={f}"));
        }
        if args.crash_model != deja_kernel::CrashModel::PosixWeak {
            parts.push(format!("--crash-model={}", args.crash_model.name()));
        }
        if args.fail_stop != deja_kernel::FailStopMode::Auto {
            parts.push(format!("--fail-stop={}", args.fail_stop.words()));
        }
        if let Some(m) = &args.failure_marker {
            parts.push(format!("--failure-marker={m}"));
        }
        for (on, flag) in [(args.torn_writes, "--torn-writes"), (args.reordered_writes, "--reordered-writes")] {
            if on {
                parts.push(flag.to_string());
            }
        }
        for (ppm, flag) in [
            (args.eio_write_ppm, "--eio-write-ppm"),
            (args.eio_fsync_ppm, "--eio-fsync-ppm"),
            (args.enospc_write_ppm, "--enospc-write-ppm"),
        ] {
            if ppm > 0 {
                parts.push(format!("{flag}={ppm}"));
            }
        }
        parts.extend(extra.iter().cloned());
        if let Some(p) = &args.program {
            parts.push(p.display().to_string());
        }
        if !args.args.is_empty() {
            parts.push("--".to_string());
            parts.extend(args.args.iter().cloned());
        }
    }
    parts
}

fn write_trace(path: &Path, report: &RunReport) -> std::io::Result<()> {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    for entry in &report.trace {
        serde_json::to_writer(&mut f, entry)?;
        f.write_all(b"\n")?;
    }
    f.flush()
}

/// `deja run`.
pub fn main(args: RunArgs) -> Exit {
    if let Some(core) = args.on_core {
        if let Err(e) = deja_vmm::identity::pin_current_thread(core) {
            eprintln!("deja: error: cannot run on host core {core}: {e}");
            return Exit::DejaFailed;
        }
    }
    match run_main(&args) {
        Ok(code) => code,
        Err(f) => {
            eprintln!("deja: error: {}", f.message);
            f.code
        }
    }
}

fn run_main(args: &RunArgs) -> Result<Exit, Failure> {
    if let (None, None, None, Some(p)) = (&args.from_snapshot, &args.image, &args.root, &args.program) {
        if p.extension().is_some_and(|e| e == "toml") {
            return crate::cluster::run(args, p);
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
    let host = deja_vmm::identity::host().map_err(|e| Failure::new(Exit::DejaFailed, e.to_string()))?;
    if let Source::Snapshot(snap) = &source {
        if let Some(note) = deja_vmm::identity::compare_recorded(snap.meta.host.as_ref()) {
            eprintln!("deja: note: the snapshot was {note}");
        }
    }
    let runs = args.audit.unwrap_or(1).max(1);
    if args.crash_sweep {
        let Source::Program(spec) = source else {
            return Err(Failure::new(Exit::Usage, "--crash-sweep needs a program, not a snapshot"));
        };
        return Ok(crate::crash::sweep(args, *spec));
    }
    let mut final_disk = None;
    let export = args.fs_export.as_ref().map(|_| &mut final_disk);
    let live = args.audit_record.is_none();
    let result = run_once(&source, args.memory, live, snapshot, export)?;
    if let Some(path) = &args.audit_record {
        let mut record = result.audit_record();
        record.core = args.on_core;
        crate::audit::write_record(&record, path)?;
        return Ok(Exit::Clean);
    }
    let first = result.summary();
    if let (Some(dir), Some(disk)) = (&args.fs_export, &final_disk) {
        crate::crash::export_disk(disk, dir).map_err(|e| {
            Failure::new(Exit::DejaFailed, format!("cannot export the file system to {}: {e}", dir.display()))
        })?;
        eprintln!("deja: file system exported to {}", dir.display());
    }
    let mut audit = None;
    let mut diverged = false;
    if args.audit.is_some() {
        let verdict = crate::audit::audit(&result.audit_record(), &replay_argv(args, &[]), runs)?;
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
    let json = RunSummary::new(&first.report, &first, host, audit.as_ref(), &replay, inputs.as_ref()).to_json();
    if let Some(path) = &args.report_out {
        std::fs::write(path, serde_json::to_vec_pretty(&json).unwrap_or_default()).map_err(|e| {
            Failure::new(Exit::DejaFailed, format!("cannot write the report to {}: {e}", path.display()))
        })?;
    }
    if args.json {
        eprintln!("{json}");
    } else {
        print_text_summary(&first.report, &first, (!args.no_probe).then_some(host), &replay);
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
