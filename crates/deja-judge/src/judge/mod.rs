//! A program's check: its inputs ([`CheckInput`]: base, candidate, workload), its runs, the
//! capsule it freezes and maps by meaning, and [`check`], which judges it with the one
//! pipeline ([`crate::pipeline`]) through the program's [`crate::pipeline::Subject`] in
//! `subject.rs`.

use std::collections::BTreeMap;

use deja_explore::Outcome;
use deja_kernel::{FaultConfig, ProgramSpec};

use crate::capsule::{Capsule, Trigger};
use crate::certificate::Certificate;
use crate::search::{CrashKind, Machine, Plan, Steer};
pub use crate::verdict::Verdict;
use crate::RunFailure;

mod subject;

/// A program given to the check: where it came from and its bytes (`None`: unreadable), and
/// where it runs.
#[derive(Debug, Clone)]
pub struct Program {
    /// Host path (of the program, or of the image or tree it is in).
    pub path: String,
    /// The image, or why it could not be read.
    pub image: Result<Vec<u8>, std::sync::Arc<std::io::Error>>,
    /// Where it runs beyond the workload: declared files, root, its path in the guest.
    pub setting: Setting,
}

impl Program {
    /// A program from the host with nothing declared (a static program).
    pub fn plain(path: &str, image: Result<Vec<u8>, std::sync::Arc<std::io::Error>>) -> Program {
        Program { path: path.to_string(), image, setting: Setting::default() }
    }
}

/// Where a program runs, beyond the check's workload (arguments, environment, seed).
#[derive(Debug, Clone, Default)]
pub struct Setting {
    /// Its path in the guest, which is also argv\[0\] (empty: `/bin/NAME`); under a root, where
    /// the command's program is in it.
    pub exe_path: String,
    /// argv\[0\] when it is not `exe_path` (a name the root's `PATH` resolves).
    pub argv0: Option<String>,
    /// Declared read-only files: a dynamically linked program's loader and libraries from the
    /// host, or files given.
    pub files: BTreeMap<String, Vec<u8>>,
    /// The read-only root it runs in (an image's layers or a directory tree).
    pub root: Option<std::sync::Arc<deja_kernel::fs::Root>>,
    /// Where the root came from.
    pub root_input: Option<deja_inputs::image::RootInput>,
    /// The environment under the workload's (an image's), each replaced by a workload variable
    /// of the same name.
    pub env: Vec<String>,
    /// The starting working directory (empty: `/`).
    pub cwd: String,
}

impl Setting {
    /// What artifacts record of it.
    pub fn record(&self) -> deja_inputs::image::InputRecord {
        deja_inputs::image::InputRecord::of(&self.files, self.root_input.as_ref())
    }
}

/// Everything a check needs.
#[derive(Debug, Clone)]
pub struct CheckInput {
    /// The program with the bug.
    pub base: Program,
    /// The patched program.
    pub candidate: Program,
    /// A known-good program the capsule must pass on, if any.
    pub corrected: Option<Program>,
    /// The failure to judge against; found on the base when absent.
    pub capsule: Option<Capsule>,
    /// The workload: the program's arguments.
    pub args: Vec<String>,
    /// Its environment.
    pub env: Vec<String>,
    /// Its seed.
    pub seed: u64,
    /// Guest RAM in MiB.
    pub memory_mib: u64,
    /// Most kill points a sweep tries.
    pub max_kill_points: u64,
    /// Independent worlds the candidate's replay runs in.
    pub worlds: u32,
    /// Crash states a hunt and a sweep try at each crash point, at most.
    pub states_per_point: usize,
    /// The crash model the hunt's and the sweep's crash states come from (a capsule or bug
    /// file given carries its own).
    pub crash_model: deja_kernel::CrashModel,
    /// How a life of either program that ends non-zero after an injected I/O error is judged
    /// (a capsule carries its own, which the caller passes here).
    pub fail_stop: deja_kernel::FailStopMode,
    /// The run settings every VM of the check boots with (the `deja` command's); the capsule
    /// and the certificate record the host's fingerprint under them.
    pub settings: deja_vmm::Settings,
}

impl CheckInput {
    /// What every run of the check is made on: its guest RAM and its settings.
    pub fn machine(&self) -> Machine {
        Machine { memory_mib: self.memory_mib, settings: self.settings }
    }
}

/// The result of a check.
#[derive(Debug, Clone)]
pub struct Judgement {
    /// The verdict.
    pub verdict: Verdict,
    /// The capsule judged against (found or given).
    pub capsule: Option<Capsule>,
    /// Every check, chained.
    pub certificate: Certificate,
}

fn spec(image: &[u8], p: &Program, input: &CheckInput) -> ProgramSpec {
    let name = std::path::Path::new(&p.path).file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut s = ProgramSpec::for_program(image.to_vec(), &name, input.args.iter().cloned(), input.seed);
    let set = &p.setting;
    if !set.exe_path.is_empty() {
        s.exe_path = set.exe_path.clone();
        s.argv[0] = set.argv0.clone().unwrap_or_else(|| set.exe_path.clone());
    }
    s.env = deja_inputs::image::env_over(set.env.clone(), &input.env);
    s.files = set.files.clone();
    s.root = set.root.clone();
    s.cwd = set.cwd.clone();
    s.faults.crash_model = input.crash_model;
    s.faults.fail_stop = input.fail_stop.clone();
    s
}

/// Runs `spec` on `m` with `faults` and `overrides` from its first syscall on.
fn run(
    spec: &ProgramSpec,
    m: &Machine,
    faults: &FaultConfig,
    overrides: &BTreeMap<u64, u64>,
) -> Result<Outcome, RunFailure> {
    let input = deja_explore::Input { overrides: overrides.clone(), faults: faults.clone(), ..Default::default() };
    m.run_fresh(spec, 0, &input)
}

fn describe_event(name: &str, details: &str) -> String {
    let mut words = vec![name.to_string()];
    if let Ok(serde_json::Value::Object(map)) = serde_json::from_str::<serde_json::Value>(details) {
        for (k, v) in map {
            match v {
                serde_json::Value::String(s) => words.push(s),
                serde_json::Value::Bool(true) => words.push(k),
                serde_json::Value::Bool(false) => {}
                other => words.push(other.to_string()),
            }
        }
    }
    words.join(" ")
}

/// What happened, for a person: the events of every life (but a client's history records), the
/// crash between them.
pub fn timeline(out: &Outcome) -> String {
    let mut parts = Vec::new();
    for (i, life) in out.lives.iter().enumerate() {
        if i > 0 {
            parts.push("restart".to_string());
        }
        // A client's history records are the checker's, not the program's story.
        for e in life.run.report.events.iter().filter(|e| e.name != deja_protocol::HISTORY_EVENT) {
            parts.push(describe_event(&e.name, &e.details));
        }
        if life.crashed {
            let words = match &life.run.report.exit {
                deja_kernel::ExitStatus::Signaled { fault: Some(f), .. } => {
                    f.description.strip_prefix("node crashed by deja ").map(|w| format!("crash {w}"))
                }
                _ => None,
            };
            parts
                .push(words.unwrap_or_else(|| format!("crash after durable write {}", life.run.report.durable_writes)));
        }
    }
    if let Some(f) = &out.failure {
        parts.push(format!("FAILED: {f}"));
    }
    parts.join(" → ")
}

/// The trigger of a failing run that crashed: the event the crash follows, by meaning, and the
/// crash point by position (the durable write it concerns: the one it followed, or, for a crash
/// before a durable write, the one it came before).
pub fn trigger_of(out: &Outcome, crash: CrashKind) -> Option<(Trigger, u64)> {
    let first = out.lives.first()?;
    if !first.crashed {
        return None;
    }
    let k = first.run.report.durable_writes + u64::from(crash == CrashKind::Before);
    let events = &first.run.report.events;
    let before: Vec<_> = events.iter().filter(|e| e.durable_writes < k.max(1)).collect();
    let anchor = before.iter().rev().find(|e| e.name == "request").or(before.last()).copied();
    let trigger = match anchor {
        Some(e) => {
            Trigger { event: e.name.clone(), details: e.details.clone(), durable_writes_after: k - e.durable_writes }
        }
        None => Trigger { event: String::new(), details: String::new(), durable_writes_after: k },
    };
    Some((trigger, k))
}

/// Where the trigger falls in a run that did not crash: the absolute kill point, if any.
fn map_trigger(trigger: &Trigger, control: &Outcome) -> Option<u64> {
    let life = control.lives.first()?;
    let total = life.run.report.durable_writes;
    let base = if trigger.event.is_empty() {
        0
    } else {
        life.run.report.events.iter().find(|e| e.name == trigger.event && e.details == trigger.details)?.durable_writes
    };
    let k = base + trigger.durable_writes_after;
    if total == 0 || base >= total {
        return None;
    }
    Some(k.min(total))
}

/// Runs the whole check: the program as a [`crate::pipeline::Subject`] ([`subject`]), judged
/// by the one pipeline.
pub fn check(input: &CheckInput) -> Judgement {
    let mut s = subject::ProgramCheck::new(input);
    let j = crate::pipeline::judge(&mut s);
    Judgement { verdict: j.verdict, capsule: s.capsule, certificate: j.certificate }
}

/// Freezes a bug file that `deja explore` found on the program `target` as a capsule: the bug is
/// replayed exactly as `deja replay` does and must fail the same way; a bug that was not
/// minimized yet is minimized first, as `deja minimize` would (so that a verdict does not depend
/// on whether its finder minimized it), and the capsule says so. The failing run is frozen by
/// meaning, with the bug's steering (where its input applies, its overrides and reseed). Every
/// run is made under `settings`, and the capsule records the host's fingerprint under them.
pub fn freeze_bug(
    bug: &deja_explore::BugFile,
    target: &deja_explore::Target,
    settings: &deja_vmm::Settings,
) -> Result<Capsule, String> {
    let out = deja_explore::replay_under(bug, target, settings, &mut |_, _| {}).map_err(|e| e.to_string())?;
    if !out.failure.as_ref().is_some_and(|f| f.is_the_failure(&bug.signature)) {
        let got = out.failure.map_or_else(|| "it holds".to_string(), |f| f.to_string());
        return Err(format!("it does not reproduce on {} ({got})", target.path));
    }
    let (bug, out, origin) = if bug.minimized_from.is_none() && bug.input.size() > 1 {
        let m = deja_explore::minimize_under(bug, target, settings, &bug.reproduce)
            .map_err(|e| format!("it cannot be minimized: {e}"))?;
        let again = deja_explore::replay_under(&m.bug, target, settings, &mut |_, _| {}).map_err(|e| e.to_string())?;
        let origin = format!(
            "bug {}, minimized here as deja minimize does, in {} runs: {} of {} input elements kept",
            bug.id,
            m.tests,
            m.bug.input.size(),
            bug.input.size()
        );
        (m.bug, again, origin)
    } else {
        let why = if bug.minimized_from.is_some() { "minimized already" } else { "nothing to minimize" };
        (bug.clone(), out, format!("bug {} ({why})", bug.id))
    };
    let steer =
        Steer { at_setup: bug.fork_at_syscall > 0, overrides: bug.input.overrides.clone(), reseed: bug.input.reseed };
    let input = CheckInput {
        base: Program {
            path: target.path.clone(),
            image: Ok(Vec::new()),
            setting: Setting {
                exe_path: target.spec.exe_path.clone(),
                argv0: target.spec.argv.first().filter(|a| **a != target.spec.exe_path).cloned(),
                files: target.spec.files.clone(),
                root_input: target.root.clone(),
                cwd: target.spec.cwd.clone(),
                ..Setting::default()
            },
        },
        candidate: Program::plain("", Ok(Vec::new())),
        corrected: None,
        capsule: None,
        args: bug.argv.iter().skip(1).cloned().collect(),
        env: bug.env.clone(),
        seed: bug.seed,
        memory_mib: bug.memory_mib,
        max_kill_points: 0,
        worlds: 0,
        states_per_point: 0,
        crash_model: deja_kernel::CrashModel::PosixWeak,
        fail_stop: bug.input.faults.fail_stop.clone(),
        settings: *settings,
    };
    let base_hash = blake3::hash(&target.spec.image).to_hex().to_string();
    let mut c = capsule_from(&out, &base_hash, &input, &bug.input.faults, &steer)
        .ok_or_else(|| "it did not fail as its input says (a crash it names was never reached)".to_string())?;
    c.origin = origin;
    Ok(c.seal())
}

/// The plan a capsule names, on a program whose fault-free run was `control`: its crash point
/// mapped by meaning (`None` when the trigger does not occur there).
pub fn plan_of(c: &Capsule, control: &Outcome) -> Option<Plan> {
    let k = match c.crash {
        CrashKind::After | CrashKind::Before => map_trigger(&c.trigger, control)?,
        CrashKind::Exit | CrashKind::None => 0,
    };
    Some(Plan { crash: c.crash, k, kept: c.kept.clone(), faults: c.faults.clone() })
}

/// Freezes the failing run `out` of the base, made under `faults` and `overrides`, as a capsule
/// (for a failure found by the hunt, or by `deja explore` and replayed from its bug file). The
/// crash point is frozen by meaning (the event it follows), and so are the pending operations
/// the crash kept; placed errors are by meaning already. It records the host's fingerprint under
/// `input.settings`, those of the run. `None` when the run did not fail, or named a crash it
/// never reached.
pub fn capsule_from(
    out: &Outcome,
    base_blake3: &str,
    input: &CheckInput,
    faults: &FaultConfig,
    steer: &Steer,
) -> Option<Capsule> {
    let signature = out.failure.clone()?;
    let crash = if faults.crash_before_durable_write.is_some() {
        CrashKind::Before
    } else if faults.crash_at_exit {
        CrashKind::Exit
    } else if faults.crash_after_durable_write.is_some() {
        CrashKind::After
    } else {
        CrashKind::None
    };
    let (trigger, k) = match crash {
        CrashKind::None => (Trigger { event: String::new(), details: String::new(), durable_writes_after: 0 }, 0),
        CrashKind::Exit => {
            out.lives.first().filter(|l| l.crashed)?;
            (Trigger { event: String::new(), details: String::new(), durable_writes_after: 0 }, 0)
        }
        _ => trigger_of(out, crash)?,
    };
    let state = match crash {
        CrashKind::None => None,
        _ => out.lives[0].run.report.crash_state.as_ref(),
    };
    let kept = state.map(|c| crate::search::KeptOps::of(&c.state, &c.pending));
    let models = state.map(|c| c.models.clone()).unwrap_or_default();
    let mut frozen = faults.for_restart();
    frozen.errors = faults.errors.clone();
    frozen.crash_at = faults.crash_at.clone();
    Some(
        Capsule {
            schema: crate::capsule::CAPSULE_SCHEMA.id(),
            id: String::new(),
            deja_version: env!("CARGO_PKG_VERSION").into(),
            base_blake3: base_blake3.into(),
            args: input.args.clone(),
            env: input.env.clone(),
            // A program from the host runs as /bin/NAME of its own file; one in a root, where the
            // command finds it.
            program: match &input.base.setting.root_input {
                Some(_) => input.base.setting.argv0.clone().unwrap_or_else(|| input.base.setting.exe_path.clone()),
                None => String::new(),
            },
            cwd: input.base.setting.cwd.clone(),
            base_inputs: input.base.setting.record(),
            seed: input.seed,
            memory_mib: input.memory_mib,
            base_crash_after_durable_write: k,
            trigger,
            faults: frozen,
            overrides: steer.overrides.clone(),
            signature,
            timeline: timeline(out),
            crash,
            kept,
            models,
            host: crate::fingerprint(&input.settings),
            at_setup: steer.at_setup,
            reseed: steer.reseed,
            origin: String::new(),
        }
        .seal(),
    )
}

/// The first way two records of a program's inputs differ, in words.
pub fn inputs_difference(want: &deja_inputs::image::InputRecord, got: &deja_inputs::image::InputRecord) -> String {
    let root = |r: &Option<deja_inputs::image::RootInput>| {
        r.as_ref().map_or("no root".to_string(), |r| format!("the {} {} (BLAKE3 {})", r.kind, r.path, r.blake3))
    };
    if want.root.as_ref().map(|r| &r.blake3) != got.root.as_ref().map(|r| &r.blake3) {
        return format!("it needs {}, given {}", root(&want.root), root(&got.root));
    }
    for (path, hash) in &want.files {
        match got.files.get(path) {
            Some(h) if h == hash => {}
            Some(h) => return format!("{path} has BLAKE3 {h} here, the capsule needs {hash}"),
            None => return format!("{path} (BLAKE3 {hash}) is not declared here"),
        }
    }
    match got.files.keys().find(|p| !want.files.contains_key(*p)) {
        Some(p) => format!("{p} is declared here, not in the capsule"),
        None => "they differ".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_run_of_a_check_boots_under_its_settings() {
        let settings = deja_vmm::Settings { rewrite: false, vdso: false, ..deja_vmm::Settings::default() };
        let input = CheckInput {
            base: Program::plain("base", Ok(Vec::new())),
            candidate: Program::plain("candidate", Ok(Vec::new())),
            corrected: None,
            capsule: None,
            args: Vec::new(),
            env: Vec::new(),
            seed: 0,
            memory_mib: 64,
            max_kill_points: 0,
            worlds: 1,
            states_per_point: 1,
            crash_model: deja_kernel::CrashModel::PosixWeak,
            fail_stop: deja_kernel::FailStopMode::Auto,
            settings,
        };
        let m = input.machine();
        assert_eq!(m.memory_mib, 64);
        assert_eq!(m.boot_options().settings, settings, "the check's VMs boot under its settings, not the defaults");
    }
}
