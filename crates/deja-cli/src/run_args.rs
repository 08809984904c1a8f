//! The arguments of `deja run` and what reads and writes them: the flags as clap parses them,
//! the crash state and fail-stop values, the one command that reproduces a run, and the
//! failure every command turns into its exit code. A leaf of the CLI: the commands use it, it
//! uses none of them.

use std::path::PathBuf;

use crate::exit::Exit;

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
    /// Where the kernel model runs: `host` (the monitor, every syscall a VM exit) or `guest`
    /// (inside the VM, syscalls without an exit; one program, no snapshots or crash sweeps yet).
    #[arg(long, value_enum, default_value_t = Placement::Host, value_name = "WHERE")]
    pub kernel: Placement,
    /// Whether the image's `syscall` sites become jumps into the kernel instead of traps: `on`
    /// or `off` (default: on with `--kernel guest`, where a jump reaches the kernel without an
    /// exit, off with `--kernel host`). An input of the run (it changes the code's bytes): the
    /// same value gives the same digests in both placements.
    #[arg(long, value_enum, value_name = "ON_OFF")]
    pub syscall_jumps: Option<OnOff>,
    /// Whether the program is given `ANTITHESIS_SDK_LOCAL_OUTPUT`, naming a device whose
    /// writes deja reads as the Antithesis SDKs' messages (assertions, setup, events; see
    /// docs/SDK.md): `on` (default) or `off`. A value the program's environment already sets
    /// is kept, and its path becomes that device.
    #[arg(long, value_enum, default_value_t = OnOff::On, value_name = "ON_OFF")]
    pub antithesis_sdk: OnOff,
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
    /// The x86-64 program to run (static or dynamically linked), or a cluster file (`*.toml`, or docker-compose `*.yaml`,
    /// see docs/CLUSTERS.md and docs/COMPOSE.md). Under --root or --image, a path or name in the root.
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
        if args.kernel == Placement::Guest {
            parts.push("--kernel=guest".to_string());
        }
        if let Some(j) = args.syscall_jumps {
            parts.push(format!("--syscall-jumps={}", if j == OnOff::On { "on" } else { "off" }));
        }
        if args.antithesis_sdk == OnOff::Off {
            parts.push("--antithesis-sdk=off".to_string());
        }
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

/// A switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OnOff {
    /// On.
    On,
    /// Off.
    Off,
}

impl RunArgs {
    /// Whether the image's `syscall` sites become jumps: as asked, or the placement's default.
    pub fn jumps(&self) -> deja_kernel::host::jumps::Jumps {
        use deja_kernel::host::jumps::Jumps;
        match (self.syscall_jumps, self.kernel) {
            (Some(OnOff::On), _) | (None, Placement::Guest) => Jumps::On,
            (Some(OnOff::Off), _) | (None, Placement::Host) => Jumps::Off,
        }
    }
}

/// Where the kernel runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Placement {
    /// In the monitor on the host, every syscall a VM exit (the reference).
    #[default]
    Host,
    /// In the VM, in ring 3 beside the program: syscalls without an exit.
    Guest,
}
