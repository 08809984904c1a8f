//! The five steps of a check and the verdict.

use std::collections::BTreeMap;

use deja_explore::Outcome;
use deja_kernel::{FaultConfig, ProgramSpec};

use crate::capsule::{Capsule, Trigger};
use crate::certificate::{Certificate, CheckStatus};
use crate::search::{run_plan, run_steered, search, CrashKind, Plan, Steer};
pub use crate::verdict::Verdict;
use crate::RunFailure;

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
    pub root_input: Option<deja_cluster::image::RootInput>,
    /// The environment under the workload's (an image's), each replaced by a workload variable
    /// of the same name.
    pub env: Vec<String>,
    /// The starting working directory (empty: `/`).
    pub cwd: String,
}

impl Setting {
    /// What artifacts record of it.
    pub fn record(&self) -> deja_cluster::image::InputRecord {
        deja_cluster::image::InputRecord::of(&self.files, self.root_input.as_ref())
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
    s.env = deja_cluster::image::env_over(set.env.clone(), &input.env);
    s.files = set.files.clone();
    s.root = set.root.clone();
    s.cwd = set.cwd.clone();
    s.faults.crash_model = input.crash_model;
    s.faults.fail_stop = input.fail_stop.clone();
    s
}

/// Runs `spec` with `faults` and `overrides` from its first syscall on.
fn run(
    spec: &ProgramSpec,
    memory_mib: u64,
    faults: &FaultConfig,
    overrides: &BTreeMap<u64, u64>,
) -> Result<Outcome, RunFailure> {
    let target = deja_explore::Target { spec: spec.clone(), memory: memory_mib << 20, path: String::new(), root: None };
    let input = deja_explore::Input { overrides: overrides.clone(), faults: faults.clone(), ..Default::default() };
    Ok(deja_explore::input::run_fresh(&target, 0, &input, &mut |_, _| {})?)
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

/// Runs the whole check.
pub fn check(input: &CheckInput) -> Judgement {
    let mut steps: Vec<(&str, CheckStatus, String, Vec<String>)> = Vec::new();
    let names = [
        "hunt on the base",
        "reproduce the capsule on the base",
        "no-fault control on the base",
        "the capsule holds on the corrected program",
        "the candidate runs",
        "replay the capsule on the candidate",
        "sweep the candidate: crash points with their states, and I/O errors",
    ];
    let base_hash = input.base.image.as_ref().map(|i| blake3::hash(i).to_hex().to_string()).unwrap_or_default();
    let cand_hash = input.candidate.image.as_ref().map(|i| blake3::hash(i).to_hex().to_string()).unwrap_or_default();
    let mut capsule = input.capsule.clone();
    let mut timeline_text = String::new();
    let verdict = (|| -> Verdict {
        let base_image = match &input.base.image {
            Ok(i) => i,
            Err(e) => {
                steps.push((names[0], CheckStatus::Incomplete, format!("the base cannot be read: {e}"), vec![]));
                return Verdict::EvidenceIncomplete;
            }
        };
        let base = spec(base_image, &input.base, input);
        let plain = match run(&base, input.memory_mib, &FaultConfig::default(), &BTreeMap::new()) {
            Ok(o) => o,
            Err(e) => {
                steps.push((names[0], CheckStatus::Incomplete, format!("the base does not run: {e}"), vec![]));
                return Verdict::EvidenceIncomplete;
            }
        };
        // 1. Hunt (or take the capsule).
        match &capsule {
            Some(c) if c.base_blake3 != base_hash => {
                steps.push((
                    names[0],
                    CheckStatus::Incomplete,
                    "the capsule was frozen on another base binary".into(),
                    vec![],
                ));
                return Verdict::EvidenceIncomplete;
            }
            Some(c) if c.base_inputs != input.base.setting.record() => {
                let why = inputs_difference(&c.base_inputs, &input.base.setting.record());
                steps.push((
                    names[0],
                    CheckStatus::Incomplete,
                    format!("the capsule was frozen with other inputs of the base: {why}"),
                    vec![],
                ));
                return Verdict::EvidenceIncomplete;
            }
            Some(c) if c.origin.is_empty() => {
                steps.push((names[0], CheckStatus::Passed, format!("capsule {} given", c.id), vec![]))
            }
            Some(c) => steps.push((names[0], CheckStatus::Passed, format!("capsule {}: {}", c.id, c.origin), vec![])),
            None => {
                let found = match search(
                    &base,
                    input.memory_mib,
                    &plain,
                    input.max_kill_points,
                    input.states_per_point,
                    true,
                ) {
                    Ok(f) => f,
                    Err(e) => {
                        steps.push((names[0], CheckStatus::Incomplete, format!("the hunt did not run: {e}"), vec![]));
                        return Verdict::EvidenceIncomplete;
                    }
                };
                let Some((plan, o)) = found.failure else {
                    steps.push((
                        names[0],
                        CheckStatus::Incomplete,
                        format!(
                            "no failure found on the base in {} runs: {} crash points with their crash states, and an \
                             error on each file operation",
                            found.runs, found.points
                        ),
                        vec![plain.digest.clone()],
                    ));
                    return Verdict::EvidenceIncomplete;
                };
                let Some(c) = capsule_from(&o, &base_hash, input, &plan.faults_with_crash(), &Steer::default()) else {
                    steps.push((names[0], CheckStatus::Incomplete, "the failure cannot be frozen".into(), vec![]));
                    return Verdict::EvidenceIncomplete;
                };
                steps.push((
                    names[0],
                    CheckStatus::Passed,
                    format!("found by the hunt ({}): {}", plan.describe(), c.signature),
                    vec![o.digest.clone()],
                ));
                capsule = Some(c);
            }
        }
        let c = capsule.clone().expect("set above");
        // The capsule's steering, and the fault-free run under it on which its crash is mapped.
        let steer = c.steer();
        let fork_base = steer.fork_at(&plain);
        let control = if steer == Steer::default() {
            plain.clone()
        } else {
            match run_steered(&base, input.memory_mib, &steer, fork_base) {
                Ok(o) => o,
                Err(e) => {
                    steps.push((names[1], CheckStatus::Incomplete, format!("the base does not run: {e}"), vec![]));
                    return Verdict::EvidenceIncomplete;
                }
            }
        };
        // 2. Reproduce on the base, by meaning.
        let Some(plan) = plan_of(&c, &control) else {
            steps.push((
                names[1],
                CheckStatus::Incomplete,
                "the capsule's trigger does not occur on the base".into(),
                vec![],
            ));
            return Verdict::EvidenceIncomplete;
        };
        match run_plan(&base, input.memory_mib, &plan, &steer, fork_base) {
            Ok(o) if o.failure.as_ref().is_some_and(|f| f.is_the_failure(&c.signature)) => steps.push((
                names[1],
                CheckStatus::Passed,
                format!("reproduced: {}", timeline(&o)),
                vec![o.digest.clone()],
            )),
            Ok(o) => {
                steps.push((
                    names[1],
                    CheckStatus::Incomplete,
                    format!("the capsule does not reproduce on the base: {}", timeline(&o)),
                    vec![o.digest],
                ));
                return Verdict::EvidenceIncomplete;
            }
            Err(e) => {
                steps.push((names[1], CheckStatus::Incomplete, e.to_string(), vec![]));
                return Verdict::EvidenceIncomplete;
            }
        }
        // 3. No-fault control.
        if let Some(f) = &control.failure {
            steps.push((
                names[2],
                CheckStatus::Failed,
                format!("the base fails without any fault: {f}"),
                vec![control.digest.clone()],
            ));
            return Verdict::NotFaultInduced;
        }
        steps.push((
            names[2],
            CheckStatus::Passed,
            "the base holds without faults".into(),
            vec![control.digest.clone()],
        ));
        // Optional: the corrected program must pass the capsule.
        if let Some(corr) = &input.corrected {
            let Ok(image) = &corr.image else {
                steps.push((names[3], CheckStatus::Incomplete, "the corrected program cannot be read".into(), vec![]));
                return Verdict::EvidenceIncomplete;
            };
            let s = spec(image, corr, input);
            let ok = run(&s, input.memory_mib, &FaultConfig::default(), &BTreeMap::new()).ok().and_then(|plain| {
                let at = steer.fork_at(&plain);
                let ctl = run_steered(&s, input.memory_mib, &steer, at).ok()?;
                let p = plan_of(&c, &ctl)?;
                run_plan(&s, input.memory_mib, &p, &steer, at).ok()
            });
            match ok {
                Some(o) if o.failure.is_none() => {
                    steps.push((names[3], CheckStatus::Passed, timeline(&o), vec![o.digest.clone()]))
                }
                other => {
                    let why =
                        other.map(|o| timeline(&o)).unwrap_or_else(|| "it could not be run at the trigger".into());
                    steps.push((
                        names[3],
                        CheckStatus::Incomplete,
                        format!("the capsule fails on the corrected program: {why}"),
                        vec![],
                    ));
                    return Verdict::EvidenceIncomplete;
                }
            }
        }
        // 4. The candidate runs at all.
        let cand_image = match &input.candidate.image {
            Ok(i) => i,
            Err(e) => {
                steps.push((names[4], CheckStatus::Incomplete, format!("the candidate cannot be read: {e}"), vec![]));
                return Verdict::EvidenceIncomplete;
            }
        };
        let cand = spec(cand_image, &input.candidate, input);
        let cand_control = match run(&cand, input.memory_mib, &FaultConfig::default(), &BTreeMap::new()) {
            Ok(o) => o,
            Err(e) => {
                steps.push((names[4], CheckStatus::Incomplete, format!("the candidate cannot be run: {e}"), vec![]));
                return Verdict::EvidenceIncomplete;
            }
        };
        let last = &cand_control.lives.last().expect("a life").run.report;
        let died_at_start =
            matches!(last.exit, deja_kernel::ExitStatus::Signaled { .. }) && last.setup_complete.is_none();
        if died_at_start {
            steps.push((
                names[4],
                CheckStatus::Incomplete,
                format!("the candidate crashes at start-up: {:?}", last.exit),
                vec![cand_control.digest.clone()],
            ));
            return Verdict::EvidenceIncomplete;
        }
        if let Some(f) = &cand_control.failure {
            timeline_text = timeline(&cand_control);
            steps.push((
                names[4],
                CheckStatus::Failed,
                format!("the candidate fails without faults: {f}"),
                vec![cand_control.digest.clone()],
            ));
            return Verdict::NewFailure;
        }
        let cand_plain = cand_control;
        let fork_cand = steer.fork_at(&cand_plain);
        let cand_control = if steer == Steer::default() {
            cand_plain.clone()
        } else {
            match run_steered(&cand, input.memory_mib, &steer, fork_cand) {
                Ok(o) => o,
                Err(e) => {
                    steps.push((
                        names[4],
                        CheckStatus::Incomplete,
                        format!("the candidate cannot be run: {e}"),
                        vec![],
                    ));
                    return Verdict::EvidenceIncomplete;
                }
            }
        };
        if let Some(f) = &cand_control.failure {
            timeline_text = timeline(&cand_control);
            steps.push((
                names[4],
                CheckStatus::Failed,
                format!("the candidate fails without faults, with the capsule's decisions: {f}"),
                vec![cand_control.digest.clone()],
            ));
            return Verdict::NewFailure;
        }
        steps.push((
            names[4],
            CheckStatus::Passed,
            "the candidate holds without faults".into(),
            vec![cand_plain.digest.clone(), cand_control.digest.clone()],
        ));
        // 5. Replay by meaning, in several fresh worlds that must agree.
        let Some(plan) = plan_of(&c, &cand_control) else {
            steps.push((
                names[5],
                CheckStatus::Incomplete,
                "the capsule's trigger does not occur on the candidate".into(),
                vec![],
            ));
            return Verdict::EvidenceIncomplete;
        };
        // Each world is a fresh VM on its own host core, in turn over the cores this process may
        // use, so a run that depends on where it ran cannot pass as deterministic.
        let cores = deja_vmm::identity::initial_cores();
        let mut worlds = Vec::new();
        for w in 0..input.worlds.max(1) as usize {
            let core = cores.get(w % cores.len().max(1)).copied().unwrap_or(0);
            let world =
                deja_vmm::identity::on_core(core, || run_plan(&cand, input.memory_mib, &plan, &steer, fork_cand))
                    .map_err(RunFailure::from)
                    .and_then(|r| r);
            match world {
                Ok(o) => worlds.push((core, o)),
                Err(e) => {
                    steps.push((names[5], CheckStatus::Incomplete, e.to_string(), vec![]));
                    return Verdict::EvidenceIncomplete;
                }
            }
        }
        let digests: Vec<String> = worlds.iter().map(|(_, o)| o.digest.clone()).collect();
        let (core0, first) = &worlds[0];
        if let Some((w, (core, why))) = worlds
            .iter()
            .enumerate()
            .skip(1)
            .find_map(|(w, (core, o))| deja_explore::input::difference(first, o).map(|why| (w, (core, why))))
        {
            steps.push((
                names[5],
                CheckStatus::Incomplete,
                format!(
                    "the worlds disagree: world {} (host core {core}) differs from world 1 (host core {core0}) in {why}; \
                     the candidate is not deterministic here",
                    w + 1
                ),
                digests,
            ));
            return Verdict::EvidenceIncomplete;
        }
        let worlds: Vec<Outcome> = worlds.into_iter().map(|(_, o)| o).collect();
        let replay = &worlds[0];
        timeline_text = timeline(replay);
        match &replay.failure {
            Some(f) if f.is_the_failure(&c.signature) => {
                steps.push((
                    names[5],
                    CheckStatus::Failed,
                    format!("the failure reproduces ({}): {timeline_text}", plan.describe()),
                    digests,
                ));
                return Verdict::StillReproduces;
            }
            Some(f) => {
                steps.push((
                    names[5],
                    CheckStatus::Failed,
                    format!("another failure ({}): {f}", plan.describe()),
                    digests,
                ));
                return Verdict::NewFailure;
            }
            None => steps.push((
                names[5],
                CheckStatus::Passed,
                format!("held in {} worlds ({}): {timeline_text}", worlds.len(), plan.describe()),
                digests,
            )),
        }
        // 6. Sweep the candidate: every crash point with its crash states, and an error on each
        // of its file operations.
        let total = cand_plain.durable_writes;
        if total > input.max_kill_points {
            steps.push((
                names[6],
                CheckStatus::Incomplete,
                format!("{total} durable writes: more than the sweep's {} crash points", input.max_kill_points),
                vec![],
            ));
            return Verdict::EvidenceIncomplete;
        }
        let swept =
            match search(&cand, input.memory_mib, &cand_plain, input.max_kill_points, input.states_per_point, false) {
                Ok(s) => s,
                Err(e) => {
                    steps.push((names[6], CheckStatus::Incomplete, format!("the sweep did not run: {e}"), vec![]));
                    return Verdict::EvidenceIncomplete;
                }
            };
        if let Some((plan, o)) = &swept.failure {
            timeline_text = timeline(o);
            let same = o.failure.as_ref().is_some_and(|f| f.is_the_failure(&c.signature));
            steps.push((
                names[6],
                CheckStatus::Failed,
                format!("{}: {timeline_text}", plan.describe()),
                swept.digests.clone(),
            ));
            return if same { Verdict::StillReproduces } else { Verdict::NewFailure };
        }
        if !swept.unreached.is_empty() {
            steps.push((
                names[6],
                CheckStatus::Incomplete,
                format!("crash points never reached: {}", swept.unreached.join(", ")),
                swept.digests,
            ));
            return Verdict::EvidenceIncomplete;
        }
        steps.push((
            names[6],
            CheckStatus::Passed,
            format!(
                "all {} runs held: {} crash points over {total} durable writes with their crash states, and an error on \
                 each file operation",
                swept.runs, swept.points
            ),
            swept.digests,
        ));
        Verdict::FixedForThisCapsule
    })();

    let mut cert = Certificate::new(capsule.as_ref().map(|c| c.id.as_str()).unwrap_or(""), &base_hash, &cand_hash);
    cert.base_inputs = input.base.setting.record();
    cert.candidate_inputs = input.candidate.setting.record();
    cert.host = deja_vmm::identity::host().ok().map(|h| h.fingerprint.clone());
    if let Some(c) = &capsule {
        cert.crash_model = Some(c.faults.crash_model);
        cert.fail_stop = Some(c.faults.fail_stop.clone());
        cert.models = c.models.clone();
    }
    for name in names {
        match steps.iter().find(|s| s.0 == name) {
            Some((_, status, detail, digests)) => cert.push(name, *status, detail.clone(), digests.clone()),
            None if name == names[3] && input.corrected.is_none() => {
                cert.push(name, CheckStatus::NotRun, "no corrected program given".into(), vec![])
            }
            None => cert.push(name, CheckStatus::NotRun, "not reached: an earlier check decided".into(), vec![]),
        }
    }
    // A pass needs every check executed: an optional check that was not asked for does not count
    // against it, but nothing else may be missing.
    let verdict = if verdict == Verdict::FixedForThisCapsule
        && cert
            .checks
            .iter()
            .any(|r| r.status != CheckStatus::Passed && !(r.name == names[3] && input.corrected.is_none()))
    {
        Verdict::EvidenceIncomplete
    } else {
        verdict
    };
    if input.corrected.is_none() {
        cert.checks.retain(|r| r.name != names[3]);
        // Re-chain without the absent optional check.
        let kept = std::mem::take(&mut cert.checks);
        for r in kept {
            cert.push(&r.name, r.status, r.detail, r.digests);
        }
    }
    cert.seal(verdict, timeline_text);
    Judgement { verdict, capsule, certificate: cert }
}

/// Freezes a bug file that `deja explore` found on the program `target` as a capsule: the bug is
/// replayed exactly as `deja replay` does and must fail the same way; a bug that was not
/// minimized yet is minimized first, as `deja minimize` would (so that a verdict does not depend
/// on whether its finder minimized it), and the capsule says so. The failing run is frozen by
/// meaning, with the bug's steering (where its input applies, its overrides and reseed).
pub fn freeze_bug(bug: &deja_explore::BugFile, target: &deja_explore::Target) -> Result<Capsule, String> {
    let out = deja_explore::replay(bug, target, &mut |_, _| {}).map_err(|e| e.to_string())?;
    if !out.failure.as_ref().is_some_and(|f| f.is_the_failure(&bug.signature)) {
        let got = out.failure.map_or_else(|| "it holds".to_string(), |f| f.to_string());
        return Err(format!("it does not reproduce on {} ({got})", target.path));
    }
    let (bug, out, origin) = if bug.minimized_from.is_none() && bug.input.size() > 1 {
        let m =
            deja_explore::minimize(bug, target, &bug.reproduce).map_err(|e| format!("it cannot be minimized: {e}"))?;
        let again = deja_explore::replay(&m.bug, target, &mut |_, _| {}).map_err(|e| e.to_string())?;
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
/// the crash kept; placed errors are by meaning already. `None` when the run did not fail, or
/// named a crash it never reached.
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
            host: deja_vmm::identity::host().ok().map(|h| h.fingerprint.clone()),
            at_setup: steer.at_setup,
            reseed: steer.reseed,
            origin: String::new(),
        }
        .seal(),
    )
}

/// The first way two records of a program's inputs differ, in words.
pub fn inputs_difference(want: &deja_cluster::image::InputRecord, got: &deja_cluster::image::InputRecord) -> String {
    let root = |r: &Option<deja_cluster::image::RootInput>| {
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
