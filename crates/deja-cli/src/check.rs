//! `deja check` and `deja verify-certificate`.

use crate::exit::Exit;
use crate::run::Failure;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use deja_judge::{Capsule, Certificate, CheckInput, CheckStatus};

/// Arguments of `deja check`.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// The program with the bug: an x86-64 program (static, or dynamically linked with its
    /// loader and libraries from the host), a container image (OCI layout or `docker save`
    /// archive: its program runs in its layers), or a directory tree (the program named after
    /// `--` runs in it). For a cluster bug file: not needed, the bug names its cluster.
    #[arg(long, value_name = "PROGRAM|IMAGE|DIR")]
    pub base: Option<PathBuf>,
    /// The patched program to judge, of the same kind as the base (an image or tree runs the
    /// base's command); for a cluster bug file, the nodes' patched binaries as
    /// `NODE=PATH,NODE=PATH`, or a cluster file (TOML or docker-compose) that names them.
    #[arg(long, value_name = "PROGRAM|IMAGE|DIR")]
    pub candidate: PathBuf,
    /// For images: the program to run instead of the base image's entrypoint.
    #[arg(long, value_name = "PROGRAM")]
    pub entrypoint: Option<String>,
    /// Declare an input file both programs may open read-only (a directory: every file below
    /// it), as `deja run --file`.
    #[arg(long = "file", value_name = "HOST[:GUEST]")]
    pub files: Vec<String>,
    /// A frozen failure to judge against (default: hunt one on the base: every crash point with
    /// its crash states, then an error on each file operation).
    #[arg(long, value_name = "FILE")]
    pub capsule: Option<PathBuf>,
    /// A bug file from `deja explore` on the base: it is replayed and frozen as the capsule.
    #[arg(long, value_name = "FILE", conflicts_with = "capsule")]
    pub bug: Option<PathBuf>,
    /// A known-good program the capsule must pass on (validates the capsule itself).
    #[arg(long, value_name = "PROGRAM")]
    pub corrected: Option<PathBuf>,
    /// For a cluster bug file: the base cluster file, instead of the one the bug carries.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// For a cluster bug file: where a node's base binary is, `NODE=PATH` (repeatable), when
    /// it is neither where the cluster file says nor beside the bug file.
    #[arg(long, value_name = "NODE=PATH")]
    pub program: Vec<String>,
    /// Directory for capsule.json and certificate.json.
    #[arg(long, default_value = "deja-check")]
    pub out: PathBuf,
    /// Print the certificate as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Seed of the workload's runs.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// An environment variable for the program.
    #[arg(long = "env", value_name = "K=V")]
    pub env: Vec<String>,
    /// Without a bug file: whether the program is given `ANTITHESIS_SDK_LOCAL_OUTPUT` (as
    /// `deja run --antithesis-sdk`): `on` (default) or `off`. A bug file's environment is its own.
    #[arg(long, value_enum, default_value_t = crate::run_args::OnOff::On, value_name = "ON_OFF")]
    pub antithesis_sdk: crate::run_args::OnOff,
    /// Guest RAM in MiB.
    #[arg(long, default_value_t = 1024, value_name = "MiB")]
    pub memory: u64,
    /// Most kill points a sweep tries (a program's: every durable write up to this, more is
    /// incomplete evidence).
    #[arg(long, default_value_t = 500)]
    pub max_kill_points: u64,
    /// For a cluster bug file: most crash points the storage sweep tries, before and after the
    /// nodes' durable operations (spread evenly over them when they are more).
    #[arg(long, default_value_t = 64)]
    pub node_crash_points: u64,
    /// Fresh worlds the candidate's replay must agree in.
    #[arg(long, default_value_t = 3)]
    pub worlds: u32,
    /// Crash states the hunt and the sweep try at each crash point, at most.
    #[arg(long, default_value_t = 8)]
    pub states_per_point: usize,
    /// The crash model the hunt's and the sweep's crash states come from: posix-weak (the
    /// default), xfs, ext4-ordered or process-kill. A capsule or bug file carries its own.
    #[arg(long, value_name = "MODEL", default_value = "posix-weak", value_parser = crate::run::parse_crash_model)]
    pub crash_model: deja_kernel::CrashModel,
    /// How a life that ends non-zero after an injected I/O error is judged on both programs:
    /// auto, never, always or exit=CODES. A bug file or capsule carries its own; this judges a
    /// bug file's run with another, and must agree with a capsule's.
    #[arg(long, value_name = "MODE", value_parser = crate::run::parse_fail_stop)]
    pub fail_stop: Option<deja_kernel::FailStopMode>,
    /// The workload: arguments for both programs (after `--`).
    #[arg(last = true)]
    pub args: Vec<String>,
}

/// The workload both programs run: the command (argv\[0\] empty for programs from the host,
/// which run as `/bin/NAME` of their own file), the environment and the working directory.
struct Workload {
    argv0: String,
    args: Vec<String>,
    env: Vec<String>,
    cwd: Option<String>,
}

/// A program the check is given, as the judge runs it: from the host (with its loader and
/// libraries when dynamically linked), or the command of `work` in an image or a tree. A file
/// that is neither an ELF program nor an image, or a program that cannot be set up, is given as
/// unreadable, with why: its check is then incomplete evidence, not a verdict.
fn program(path: &Path, work: &Workload, declared: &BTreeMap<String, Vec<u8>>) -> deja_judge::Program {
    let setup = || -> Result<deja_judge::Program, String> {
        let at = path.display().to_string();
        let (img, input) = if path.is_dir() {
            crate::rootfs::read_dir(path).map_err(|f| f.message)?
        } else {
            let bytes = std::fs::read(path).map_err(|e| format!("{at}: {e}"))?;
            if bytes.starts_with(b"\x7fELF") {
                if !work.argv0.is_empty() {
                    return Err(format!("{at} is a program from the host, and the base is an image or a tree"));
                }
                let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                let mut files = declared.clone();
                for (p, d) in deja_inputs::dynlink::host_closure(&bytes, path, &format!("/bin/{name}"))? {
                    files.entry(p).or_insert(d);
                }
                let setting = deja_judge::judge::Setting {
                    files,
                    cwd: work.cwd.clone().unwrap_or_default(),
                    ..Default::default()
                };
                return Ok(deja_judge::Program { path: at, image: Ok(bytes), setting });
            }
            crate::rootfs::read_image(path).map_err(|f| format!("not an x86-64 program, and {}", f.message))?
        };
        if work.argv0.is_empty() {
            return Err(format!("{at} is an image or a tree, and the base is a program from the host"));
        }
        let argv: Vec<String> = std::iter::once(work.argv0.clone()).chain(work.args.iter().cloned()).collect();
        let r =
            deja_inputs::image::in_tree(img, argv, &work.env, work.cwd.as_deref()).map_err(|e| format!("{at}: {e}"))?;
        let setting = deja_judge::judge::Setting {
            argv0: Some(r.argv[0].clone()).filter(|a| *a != r.exe_path),
            exe_path: r.exe_path,
            files: declared.clone(),
            root: Some(r.root),
            root_input: Some(input),
            env: r.env,
            cwd: r.cwd,
        };
        Ok(deja_judge::Program { path: at, image: Ok(r.image), setting })
    };
    setup().unwrap_or_else(|e| {
        deja_judge::Program::plain(&path.display().to_string(), Err(Arc::new(std::io::Error::other(e))))
    })
}

/// Replaces each file `p` declares whose BLAKE3 is not the one `want` records at that path by
/// the recorded file from `kept` (`inputs/`, named by BLAKE3), when it is there: a library
/// upgraded on this host since the failure was found.
fn recorded_files(want: &deja_inputs::image::InputRecord, kept: &Path, p: &mut deja_judge::Program) {
    for (guest, hash) in &want.files {
        let Some(have) = p.setting.files.get(guest) else { continue };
        if blake3::hash(have).to_hex().as_str() == hash {
            continue;
        }
        if let Ok(data) = std::fs::read(kept.join(hash)) {
            if blake3::hash(&data).to_hex().as_str() == hash {
                eprintln!("deja: note: {guest} differs on this host; {} runs with the recorded one ({hash})", p.path);
                p.setting.files.insert(guest.clone(), data);
            }
        }
    }
}

/// The workload of a check: the capsule's, or the command line's (for an image base, its
/// command, with the arguments after `--` replacing the image's, as `docker run` does).
fn workload(args: &CheckArgs, base: &Path, capsule: Option<&Capsule>) -> Result<Workload, Failure> {
    if let Some(c) = capsule {
        let cwd = Some(c.cwd.clone()).filter(|d| !d.is_empty());
        return Ok(Workload { argv0: c.program.clone(), args: c.args.clone(), env: c.env.clone(), cwd });
    }
    let mut w = command_line_workload(args, base)?;
    crate::run::antithesis_output(&mut w.env, args.antithesis_sdk);
    Ok(w)
}

/// The workload the command line names (no capsule).
fn command_line_workload(args: &CheckArgs, base: &Path) -> Result<Workload, Failure> {
    let host =
        |args: &CheckArgs| Workload { argv0: String::new(), args: args.args.clone(), env: args.env.clone(), cwd: None };
    if base.is_dir() {
        let Some((first, rest)) = args.args.split_first() else {
            return Err(Failure::new(
                Exit::Usage,
                format!("--base {}: a tree: name the program in it after --", base.display()),
            ));
        };
        return Ok(Workload { argv0: first.clone(), args: rest.to_vec(), env: args.env.clone(), cwd: None });
    }
    let bytes = std::fs::read(base).map_err(|e| Failure::new(Exit::Incomplete, format!("{}: {e}", base.display())))?;
    if bytes.starts_with(b"\x7fELF") {
        if args.entrypoint.is_some() {
            return Err(Failure::new(Exit::Usage, "--entrypoint is for an image base"));
        }
        return Ok(host(args));
    }
    let (img, _) = crate::rootfs::read_image(base)?;
    let argv = deja_inputs::image::command(&img, args.entrypoint.as_deref(), &args.args)
        .map_err(|e| Failure::new(Exit::NotFound, format!("{}: {e}", base.display())))?;
    let (first, rest) = argv.split_first().expect("a command has a program");
    Ok(Workload { argv0: first.clone(), args: rest.to_vec(), env: args.env.clone(), cwd: None })
}

/// `deja check`, every run of it (the base's, the candidate's, the corrected program's, a
/// cluster's nodes') under `settings`: [`Exit::Clean`] FIXED_FOR_THIS_CAPSULE, [`Exit::Failure`]
/// STILL_REPRODUCES / NEW_FAILURE, [`Exit::Incomplete`] EVIDENCE_INCOMPLETE / NOT_FAULT_INDUCED
/// or a bug file that does not fail on the base, [`Exit::NotLoadable`] a capsule or bug file
/// that fails its checks.
pub fn main(args: CheckArgs, settings: &deja_vmm::Settings) -> Exit {
    if let Some(bug) = args.bug.as_deref().filter(|b| crate::explore::is_cluster_bug(b)) {
        if args.crash_model != deja_kernel::CrashModel::PosixWeak {
            eprintln!(
                "deja: error: --crash-model does not apply to a cluster bug; its cluster file's [faults.storage] \
                 crash_model does"
            );
            return Exit::Usage;
        }
        if args.fail_stop.is_some() {
            eprintln!("{}", crate::explore::FAIL_STOP_PER_NODE);
            return Exit::Usage;
        }
        return check_cluster(&args, bug, settings);
    }
    if args.config.is_some() || !args.program.is_empty() {
        eprintln!("deja: error: --config and --program are for a cluster bug file; give that file with --bug");
        return Exit::Usage;
    }
    let Some(base) = args.base.as_deref() else {
        eprintln!("deja: error: --base PROGRAM is needed (only a cluster bug file names its own base)");
        return Exit::Usage;
    };
    let capsule = match &args.capsule {
        Some(p) => match Capsule::read(p) {
            Ok(c) => Some(c),
            Err(e) => {
                eprintln!("deja: error: refusing the capsule: {e}");
                return Exit::NotLoadable;
            }
        },
        None => None,
    };
    let declared = match crate::run::read_declared(&args.files) {
        Ok(d) => d,
        Err(Failure { code, message: e }) => {
            eprintln!("deja: error: {e}");
            return code;
        }
    };
    let capsule = match (&args.bug, capsule) {
        (Some(path), _) => match capsule_from_bug(path, base, &args.files, args.fail_stop.as_ref(), settings) {
            Ok(c) => Some(c),
            Err(Failure { code, message: e }) => {
                eprintln!("deja: error: the bug file cannot be used: {e}");
                return code;
            }
        },
        (None, c) => c,
    };
    let fail_stop = match (&capsule, &args.fail_stop) {
        (Some(c), Some(mode)) if c.faults.fail_stop != *mode => {
            eprintln!(
                "deja: error: the capsule was frozen with --fail-stop {}; a check judges as its finder did (give the bug \
                 file with --bug to judge it with --fail-stop {})",
                c.faults.fail_stop.words(),
                mode.words()
            );
            return Exit::Usage;
        }
        (Some(c), _) => c.faults.fail_stop.clone(),
        (None, mode) => mode.clone().unwrap_or_default(),
    };
    let work = match workload(&args, base, capsule.as_ref()) {
        Ok(w) => w,
        Err(Failure { code, message: e }) => {
            eprintln!("deja: error: {e}");
            return code;
        }
    };
    // Every program of the check runs with the files the failure was found with, when this
    // host's differ and the campaign (or whoever froze the capsule) kept them.
    let kept = args.bug.as_deref().or(args.capsule.as_deref()).map(|f| {
        f.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new(".")).join(deja_explore::INPUTS_DIR)
    });
    let with_recorded = |mut p: deja_judge::Program| {
        if let (Some(c), Some(kept)) = (&capsule, &kept) {
            recorded_files(&c.base_inputs, kept, &mut p);
        }
        p
    };
    let input = CheckInput {
        base: with_recorded(program(base, &work, &declared)),
        candidate: with_recorded(program(&args.candidate, &work, &declared)),
        corrected: args.corrected.as_deref().map(|p| with_recorded(program(p, &work, &declared))),
        capsule: capsule.clone(),
        args: work.args.clone(),
        env: work.env.clone(),
        seed: capsule.as_ref().map(|c| c.seed).unwrap_or(args.seed),
        memory_mib: capsule.as_ref().map(|c| c.memory_mib).unwrap_or(args.memory),
        max_kill_points: args.max_kill_points,
        worlds: args.worlds,
        states_per_point: args.states_per_point,
        crash_model: args.crash_model,
        fail_stop,
        settings: *settings,
    };
    let j = deja_judge::check(&input);
    if let Err(e) = std::fs::create_dir_all(&args.out) {
        eprintln!("deja: error: {}: {e}", args.out.display());
        return Exit::DejaFailed;
    }
    if let Some(c) = &j.capsule {
        if args.capsule.is_none() {
            if let Err(e) = c.write(&args.out.join("capsule.json")) {
                eprintln!("deja: error: {e}");
                return Exit::DejaFailed;
            }
        }
    }
    let cert_path = args.out.join("certificate.json");
    if let Err(e) = j.certificate.write(&cert_path) {
        eprintln!("deja: error: {e}");
        return Exit::DejaFailed;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&j.certificate).unwrap_or_default());
    }
    let code = verdict_exit(j.verdict);
    eprintln!("deja: verdict {} (exit {})", j.verdict.name(), code.code());
    if let Some(c) = &j.capsule {
        eprintln!("deja: capsule {}: {}", c.id, c.signature);
        eprintln!("deja:   on the base: {}", c.timeline);
        eprintln!("deja:   {}", model_words(c));
        eprintln!("deja:   stops after an injected error judged by --fail-stop {}", c.faults.fail_stop.words());
    }
    print_checks(&j.certificate, &cert_path);
    code
}

/// The crash model a check kept to, and what the capsule's crash state is: `under
/// ext4-ordered; the base's crash state is allowed by posix-weak, xfs, ext4-ordered: a bug on
/// ext4-ordered (and xfs, posix-weak)`.
fn model_words(c: &deja_judge::Capsule) -> String {
    let mut s = format!("under the crash model {}", c.faults.crash_model.name());
    if let Some(strongest) = deja_kernel::CrashModel::strongest(&c.models) {
        let names: Vec<&str> = c.models.iter().map(|m| m.name()).collect();
        s.push_str(&format!(
            "; the base's crash state is allowed by {}: {}",
            names.join(", "),
            strongest.failure_words()
        ));
    }
    s
}

/// The exit of a verdict.
fn verdict_exit(v: deja_judge::Verdict) -> Exit {
    match v {
        deja_judge::Verdict::FixedForThisCapsule => Exit::Clean,
        deja_judge::Verdict::StillReproduces | deja_judge::Verdict::NewFailure => Exit::Failure,
        deja_judge::Verdict::EvidenceIncomplete | deja_judge::Verdict::NotFaultInduced => Exit::Incomplete,
    }
}

/// Every check of a certificate, its timeline and where it was written.
fn print_checks(cert: &deja_judge::Certificate, path: &std::path::Path) {
    for r in &cert.checks {
        let mark = match r.status {
            CheckStatus::Passed => "passed    ",
            CheckStatus::Failed => "FAILED    ",
            CheckStatus::Incomplete => "INCOMPLETE",
            CheckStatus::NotRun => "not run   ",
        };
        eprintln!("deja:   {mark} {}: {}", r.name, r.detail);
    }
    if !cert.timeline.is_empty() {
        eprintln!("deja: on the candidate: {}", cert.timeline);
    }
    eprintln!("deja: certificate {} ({})", path.display(), cert.certificate_hash);
}

/// `deja check --bug CLUSTER-BUG --candidate NODE=PATH,...`: the cluster bug judged by meaning
/// (see `deja_judge::cluster`), every node of the base and the candidate under `settings`; the
/// same verdicts and exit codes as for one program.
fn check_cluster(args: &CheckArgs, bug_path: &std::path::Path, settings: &deja_vmm::Settings) -> Exit {
    let (bug, mut base) = match crate::explore::load_cluster_bug(bug_path, args.config.as_deref(), &args.program) {
        Ok(x) => x,
        Err(Failure { code, message }) => {
            eprintln!("deja: error: the bug file cannot be used: {message}");
            return code;
        }
    };
    // The candidate's cluster is the base's with its nodes in place: it keeps these settings.
    base.cfg.settings = *settings;
    let candidate = deja_judge::cluster::candidate_nodes(&args.candidate.to_string_lossy(), &base);
    let sweep = deja_judge::cluster::Sweep {
        crash_points: args.node_crash_points,
        states_per_point: args.states_per_point,
        ..Default::default()
    };
    let j = deja_judge::cluster::check_cluster_with(
        &deja_judge::cluster::ClusterCheck { bug: bug.clone(), base, candidate, worlds: args.worlds },
        &sweep,
    );
    let mut judged = j.judged.clone().unwrap_or_else(|| bug.clone());
    if judged != bug {
        // The bug as the check minimized it: it replays from where it is written.
        judged.reproduce = deja_explore::replay_command(&args.out.join("cluster-bug.json").display().to_string());
    }
    let written = std::fs::create_dir_all(&args.out)
        .map_err(|e| format!("{}: {e}", args.out.display()))
        .and_then(|_| judged.write(&args.out.join("cluster-bug.json")).map_err(|e| e.to_string()))
        .and_then(|_| j.certificate.write(&args.out.join("certificate.json")).map_err(|e| e.to_string()));
    if let Err(e) = written {
        eprintln!("deja: error: {e}");
        return Exit::DejaFailed;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&j.certificate).unwrap_or_default());
    }
    let code = verdict_exit(j.verdict);
    eprintln!("deja: verdict {} (exit {})", j.verdict.name(), code.code());
    eprintln!("deja: cluster bug {}: {}", bug.id, bug.signature);
    print_checks(&j.certificate, &args.out.join("certificate.json"));
    code
}

/// Replays an explore bug file on the base (for a bug of a program in a root: `base` is the
/// image or tree, else the bug's own, found as `deja replay` finds it) and freezes the failing
/// run as a capsule (minimized first when it was not), every run under `settings`; the exit
/// with the error: [`Exit::NotLoadable`] when the bug file fails its checks,
/// [`Exit::Incomplete`] when it cannot be judged on this base.
fn capsule_from_bug(
    path: &Path,
    base: &Path,
    files: &[String],
    fail_stop: Option<&deja_kernel::FailStopMode>,
    settings: &deja_vmm::Settings,
) -> Result<Capsule, Failure> {
    let given = [base.display().to_string()];
    let (mut bug, target) = crate::explore::load_bug(path, &given, files).map_err(|f| match f.code {
        Exit::NotLoadable | Exit::Usage => f,
        _ => Failure::new(Exit::Incomplete, f.message),
    })?;
    crate::explore::judge_fail_stop_with(&mut bug, fail_stop);
    deja_judge::judge::freeze_bug(&bug, &target, settings).map_err(|e| Failure::new(Exit::Incomplete, e))
}

/// Arguments of `deja verify-certificate`.
#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    /// The certificate.
    pub file: PathBuf,
}

/// `deja verify-certificate`: [`Exit::Clean`] when the chain is intact, [`Exit::Failure`] when
/// it was tampered with, [`Exit::Incomplete`] when the file cannot be read.
pub fn verify(args: VerifyArgs) -> Exit {
    let c = match Certificate::read(&args.file) {
        Ok(c) => c,
        Err(deja_judge::JudgeError::Read { source, .. }) => {
            eprintln!("deja: cannot read {}: {source}", args.file.display());
            return Exit::Incomplete;
        }
        Err(e) => {
            eprintln!("deja: refused: {e}");
            return Exit::Failure;
        }
    };
    match c.verify() {
        Ok(()) => {
            eprintln!(
                "deja: certificate intact: {} checks, verdict {} ({})",
                c.checks.len(),
                c.verdict,
                c.certificate_hash
            );
            Exit::Clean
        }
        Err(e) => {
            eprintln!("deja: refused: {}: {e}", args.file.display());
            Exit::Failure
        }
    }
}

#[cfg(test)]
mod tests {
    use deja_judge::Verdict::*;

    #[test]
    fn the_process_exits_with_the_code_the_certificate_records() {
        for v in [FixedForThisCapsule, StillReproduces, NewFailure, EvidenceIncomplete, NotFaultInduced] {
            assert_eq!(super::verdict_exit(v).code(), v.exit_code(), "{v}");
        }
    }
}
