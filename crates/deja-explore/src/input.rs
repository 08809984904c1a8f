//! What a run is made of (the target and an input), what came out of it (an outcome), and the
//! bug file that freezes a failure.

use std::collections::BTreeMap;

use deja_format::json::Schema;
use deja_kernel::{FaultConfig, Kernel, ProgramSpec, RunReport, Stream};
use deja_vmm::{BootOptions, Fork, Incarnation, Session, Settings};
use serde::{Deserialize, Serialize};

use crate::signature::FailureSignature;
use crate::ExploreError;
use snafu::ensure;

/// The program under exploration.
#[derive(Debug, Clone)]
pub struct Target {
    /// What deja runs.
    pub spec: ProgramSpec,
    /// Guest RAM in bytes.
    pub memory: u64,
    /// The program's host path, for messages and reproduce commands (for a program in an
    /// image or a directory tree: the image or the tree).
    pub path: String,
    /// Where `spec.root` came from, for the bug files' record.
    pub root: Option<deja_inputs::image::RootInput>,
}

/// How a child is steered away from the parent's course.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Input {
    /// Decision index → choice. Every other decision takes the seed's natural choice.
    pub overrides: BTreeMap<u64, u64>,
    /// Faults for the child (from the steering point on).
    pub faults: FaultConfig,
    /// Draws every decision that is not overridden from this seed's stream instead of the
    /// run's own (from the steering point on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reseed: Option<u64>,
    /// Runs the program with this seed instead of the target's (the random strategy's
    /// independent runs; a fork child always has its parent's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Where the round leaves a later fork of its worker's fork, if it runs from one
    /// ([`deja_vmm::Fork::run_child_late`]): planning only, never written, and no part of the run.
    #[serde(skip)]
    pub fork_at: Option<u64>,
}

impl Input {
    /// What determines a forked child's course besides its decisions: its faults and its seed
    /// (the key of a later fork, [`deja_vmm::Fork::run_child_late`]).
    pub fn course_key(&self) -> Vec<u8> {
        serde_json::to_vec(&(&self.faults, self.seed)).unwrap_or_default()
    }

    /// Applies this input to a core at the steering point.
    pub fn prepare(&self, kernel: &mut Kernel) {
        kernel.set_fault_config(self.faults.clone());
        kernel.set_decision_overrides(self.overrides.clone());
        if let Some(seed) = self.reseed {
            kernel.reseed_decisions(seed);
        }
    }

    /// How many elements minimization can remove: each override, and each fault switched on.
    pub fn size(&self) -> usize {
        let f = &self.faults;
        self.overrides.len()
            + usize::from(f.crash_after_durable_write.is_some())
            + usize::from(f.crash_before_durable_write.is_some())
            + usize::from(f.crash_at_exit)
            + usize::from(f.crash_state.is_some())
            + f.errors.len()
            + f.crash_at.len()
            + usize::from(f.torn_writes)
            + usize::from(f.reordered_writes)
            + usize::from(f.eio_on_write_ppm > 0)
            + usize::from(f.eio_on_fsync_ppm > 0)
            + usize::from(f.enospc_on_write_ppm > 0)
            + usize::from(self.reseed.is_some())
    }
}

/// One decision of a run, as a bug file lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoggedDecision {
    /// Position in the run's decision log.
    pub index: u64,
    /// What was decided, e.g. `sdk choice #2 of 3` or `crash state: cut one kept write`.
    pub point: deja_kernel::DecisionPoint,
    /// Number of options (0: any u64).
    pub options: u64,
    /// The choice taken.
    pub choice: u64,
    /// The choice came from the input, not from the seed.
    pub overridden: bool,
}

/// `decisions` as the run booted from scratch under `input` logs them: a decision of the first
/// life is overridden exactly when the input overrides its index (later lives take no
/// overrides). A round run from a fork inherits the decisions before the fork point as its
/// parent took them, naturally, though the input overrides them with the same choices; so the
/// same bug found from a fork or from boot (which a worker's fork cache decides) is written
/// the same.
pub(crate) fn as_booted(decisions: &[LoggedDecision], input: &Input) -> Vec<LoggedDecision> {
    let mut first_life = true;
    let mut previous: Option<u64> = None;
    decisions
        .iter()
        .map(|d| {
            // Each life's log starts again at index 0.
            if previous.is_some_and(|p| d.index <= p) {
                first_life = false;
            }
            previous = Some(d.index);
            LoggedDecision { overridden: first_life && input.overrides.contains_key(&d.index), ..d.clone() }
        })
        .collect()
}

/// What one run showed.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Every life of the run.
    pub lives: Vec<Incarnation>,
    /// Digest over every life in order.
    pub digest: String,
    /// The failure's signature, if the run failed.
    pub failure: Option<FailureSignature>,
    /// The bucketed SanitizerCoverage map of the final life (empty without instrumentation),
    /// or, under block coverage, a 1 for each block any life reached while it was armed.
    pub coverage: Vec<u8>,
    /// Under block coverage: for each block reached, the decision index at which the first
    /// life reached it (the first life's decision count for a block reached only later).
    pub coverage_at: BTreeMap<usize, u64>,
    /// Semantic edges (the SDK assertions' outcomes and the shape of the run), each with the
    /// decision index where the run first showed it, when the core recorded one.
    pub semantic: BTreeMap<u64, Option<u64>>,
    /// The full decision log, over every life.
    pub decisions: Vec<LoggedDecision>,
    /// Durable writes of the first life (the range of crash points worth trying).
    pub durable_writes: u64,
    /// The first life's file operations by kind and path (where errors can be placed).
    pub io_ops: Vec<deja_kernel::IoCount>,
    /// When the first life crashed: how many operations were pending (the crash states worth
    /// trying).
    pub pending_at_crash: Option<u64>,
}

/// The signature of a failed run, or `None` when it held: the first failed assertion of any life,
/// else how the last life ended if it was not a clean exit. An injected crash is not a failure,
/// and neither is a fail-stop (a stop after an injected I/O error: the kernel turns it into a
/// crash and a restart, or, with no lives left, marks it).
fn failure(lives: &[Incarnation]) -> Option<FailureSignature> {
    for life in lives {
        if let Some(a) = life.run.report.assertions.iter().find(|a| a.bug) {
            return Some(FailureSignature::Assertion {
                kind: a.kind.clone(),
                message: a.message.clone(),
                file: a.file.clone(),
                line: a.line,
            });
        }
    }
    let last = &lives.last()?.run.report;
    // A stop after an injected fault with no lives left to restart it is a fail-stop, not a
    // failure by itself (what fails is an invariant after a restart).
    if last.stopped_after_fault.is_some() {
        return None;
    }
    match &last.exit {
        deja_kernel::ExitStatus::Exited { code: 0 } => None,
        deja_kernel::ExitStatus::Exited { code } => {
            Some(FailureSignature::ExitCode { code: *code, said: crate::signature::said_of(last) })
        }
        deja_kernel::ExitStatus::Signaled { name, fault, .. } => {
            Some(FailureSignature::killed(name, fault.as_ref().map(|f| f.description.as_str())))
        }
    }
}

/// Adds a life's semantic edges. A `sometimes` holding or a `reachable` reached for the first
/// time is progress, so its edge keeps the decision index where it first did (for the first
/// life only, whose decision log is the one an input steers); a mere evaluation or a failure
/// marks no place.
fn semantic_edges(report: &RunReport, first_life: bool, out: &mut BTreeMap<u64, Option<u64>>) {
    for a in &report.assertions {
        let id = u64::from_str_radix(&a.id, 16).unwrap_or(0);
        let at =
            |c: &Option<deja_kernel::AssertionContext>| c.as_ref().filter(|_| first_life).map(|c| c.decision_index);
        for (seen, edge, first) in
            [(a.hits > 0, id ^ 1, None), (a.passes > 0, id ^ 2, at(&a.first_satisfied)), (a.failures > 0, id ^ 4, None)]
        {
            if seen {
                out.entry(edge).or_insert(first);
            }
        }
    }
}

/// Adds the edges of the Antithesis SDKs' guideposts (the `antithesis_guidance` events): a
/// numeric guidepost's progress (`left - right` when it maximizes, `right - left` when it
/// minimizes) by sign and order of magnitude, a boolean one's count of the booleans it wants
/// (true when it maximizes, false when it does not). A run that takes a guidepost to a level no
/// run reached shows new behaviour and joins the corpus, so rounds climb toward what the
/// guidepost names (a value that makes its assertion fail) a level at a time.
pub(crate) fn guidance_edges(events: &[deja_kernel::EventRecord], out: &mut BTreeMap<u64, Option<u64>>) {
    for e in events.iter().filter(|e| e.name == deja_kernel::record::antithesis::GUIDANCE_EVENT) {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&e.details) else { continue };
        let id = v["id"].as_str().or(v["message"].as_str()).unwrap_or_default();
        let maximize = v["maximize"].as_bool().unwrap_or(true);
        let data = &v["guidance_data"];
        let level = match v["guidance_type"].as_str() {
            Some("numeric") => {
                let (Some(left), Some(right)) = (data["left"].as_f64(), data["right"].as_f64()) else { continue };
                magnitude(if maximize { left - right } else { right - left })
            }
            Some("boolean") => {
                let Some(m) = data.as_object() else { continue };
                m.values().filter(|b| b.as_bool() == Some(maximize)).count() as i64
            }
            _ => continue,
        };
        // FNV-1a over the guidepost and its level.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in b"guidance\0".iter().chain(id.as_bytes()).chain(&level.to_le_bytes()) {
            h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
        out.entry(h).or_insert(None);
    }
}

/// `g`'s sign times the bits of its magnitude: 0 for 0, ±1 for up to 1, ±2 up to 3, ±3 up to 7...
fn magnitude(g: f64) -> i64 {
    if !g.is_finite() {
        return 0;
    }
    let m = (g.abs() + 1.0).log2().ceil() as i64;
    if g < 0.0 {
        -m
    } else {
        m
    }
}

/// Turns the lives of a run that printed `stdout` into an outcome.
pub fn outcome(lives: Vec<Incarnation>, stdout: &[u8]) -> Outcome {
    let digest = deja_vmm::lives_digest(&lives);
    let last = &lives.last().expect("a run has a life").run.report;
    let coverage = last.coverage.as_ref().map(|c| c.map.clone()).unwrap_or_default();
    let mut semantic = BTreeMap::new();
    for (i, l) in lives.iter().enumerate() {
        semantic_edges(&l.run.report, i == 0, &mut semantic);
        guidance_edges(&l.run.report.events, &mut semantic);
    }
    semantic.insert(0x5eed_0000 + lives.len() as u64, None);
    crate::features::program_features(&lives, stdout, &mut semantic);
    let decisions = lives
        .iter()
        .flat_map(|l| l.run.report.decisions.iter())
        .map(|d| LoggedDecision {
            index: d.index,
            point: d.point.clone(),
            options: d.options,
            choice: d.choice,
            overridden: d.overridden,
        })
        .collect();
    Outcome {
        failure: failure(&lives),
        digest,
        coverage,
        coverage_at: BTreeMap::new(),
        semantic,
        decisions,
        durable_writes: lives[0].run.report.durable_writes,
        io_ops: lives[0].run.report.io_ops.clone(),
        pending_at_crash: lives[0].run.report.crash_state.as_ref().map(|c| c.pending.len() as u64),
        lives,
    }
}

/// Runs `input` as a child of `fork`.
pub fn run_on_fork(fork: &mut Fork, input: &Input) -> Result<Outcome, ExploreError> {
    let mut stdout = Vec::new();
    let lives = fork.run_child_late(
        &mut |k| input.prepare(k),
        &input.course_key(),
        &input.overrides,
        input.reseed,
        input.fork_at,
        &mut |s, b| keep_stdout(&mut stdout, s, b),
    )?;
    Ok(outcome(lives, &stdout))
}

/// Under block coverage of `blocks` blocks: the outcome's coverage map is the blocks its lives
/// reached while armed, each with where the first life's course reached it (a later life's at
/// the first life's end: its log is its own).
pub fn with_blocks(mut out: Outcome, blocks: usize) -> Outcome {
    let mut map = vec![0u8; blocks];
    let first_end = out.lives[0].run.report.decisions.len() as u64;
    for (i, life) in out.lives.iter().enumerate() {
        for hit in &life.run.blocks {
            let id = hit.block as usize;
            if id < blocks {
                map[id] = 1;
                out.coverage_at.entry(id).or_insert(if i == 0 { hit.decision } else { first_end });
            }
        }
    }
    out.coverage = map;
    out
}

/// Keeps what a run prints on stdout (for its behavioural features), up to 64 KiB.
pub fn keep_stdout(out: &mut Vec<u8>, stream: Stream, bytes: &[u8]) {
    if stream == Stream::Stdout && out.len() < 64 << 10 {
        out.extend_from_slice(&bytes[..bytes.len().min((64 << 10) - out.len())]);
    }
}

/// Runs `input` from scratch under `settings`: the program runs untouched to `fork_at`, takes
/// the input there, and runs on — the same run a fork child at `fork_at` makes.
pub fn run_fresh_under(
    target: &Target,
    settings: &Settings,
    fork_at: u64,
    input: &Input,
    sink: &mut dyn FnMut(Stream, &[u8]),
) -> Result<Outcome, ExploreError> {
    run_fresh_covered(target, settings, fork_at, input, None, sink)
}

/// [`run_fresh_under`] with every block of `blocks` armed ([`deja_vmm::coverage`]).
pub fn run_fresh_covered(
    target: &Target,
    settings: &Settings,
    fork_at: u64,
    input: &Input,
    blocks: Option<std::sync::Arc<deja_vmm::coverage::BlockImage>>,
    sink: &mut dyn FnMut(Stream, &[u8]),
) -> Result<Outcome, ExploreError> {
    let mut stdout = Vec::new();
    let mut both = |s: Stream, b: &[u8]| {
        keep_stdout(&mut stdout, s, b);
        sink(s, b)
    };
    let mut spec = target.spec.clone();
    spec.seed = input.seed.unwrap_or(spec.seed);
    let mut session = Session::boot_with(spec, target.memory, BootOptions::new(*settings))?;
    if let Some(b) = &blocks {
        session.cover_blocks(b.clone(), deja_vmm::coverage::Seen::default());
    }
    if session.run_to_syscall(fork_at, &mut both)? {
        input.prepare(session.kernel_mut());
    }
    let lives = session.lives(&mut both, None)?;
    let out = outcome(lives, &stdout);
    Ok(match &blocks {
        Some(b) => with_blocks(out, b.len()),
        None => out,
    })
}

/// The first syscall of `restart` whose call or result differs from `reference` (the restart
/// from the same crash that kept everything pending), in words: where a crash state first
/// showed to the program. `None` when they agree as far as both go.
pub fn first_restart_difference(
    restart: &[deja_kernel::TraceEntry],
    reference: &[deja_kernel::TraceEntry],
) -> Option<String> {
    let same = |a: &deja_kernel::TraceEntry, b: &deja_kernel::TraceEntry| {
        a.nr == b.nr && a.ret == b.ret && a.data == b.data && a.text == b.text
    };
    let i = restart.iter().zip(reference).position(|(a, b)| !same(a, b))?;
    let (a, b) = (&restart[i], &reference[i]);
    Some(if a.text == b.text {
        format!(
            "syscall {i} of the restart: {}, which moved other bytes than in the restart that kept everything",
            a.text
        )
    } else {
        format!("syscall {i} of the restart: {}, where the restart that kept everything had {}", a.text, b.text)
    })
}

/// For a failing `input` whose first life crashed into a state that dropped something: the
/// first syscall of its restart that differs from the restart of the same crash with every
/// pending operation kept, when that restart holds (when it fails too, the state is not what
/// broke the program). Both runs are made again from scratch, with their syscalls traced.
pub fn crash_difference(
    target: &Target,
    settings: &Settings,
    fork_at: u64,
    input: &Input,
    out: &Outcome,
) -> Option<String> {
    let c = out.lives.first()?.run.report.crash_state.as_ref()?;
    if out.lives.len() < 2 || c.state == deja_kernel::CrashState::all(c.pending.len()) {
        return None;
    }
    let mut traced = target.clone();
    traced.spec.record_trace = true;
    let mut everything = input.clone();
    everything.faults.crash_state = Some(deja_kernel::CrashState::all(c.pending.len()));
    let reference = run_fresh_under(&traced, settings, fork_at, &everything, &mut |_, _| {}).ok()?;
    let crashed_alike = reference.lives.first()?.run.report.crash_state.as_ref()?.pending == c.pending;
    if reference.failure.is_some() || reference.lives.len() < 2 || !crashed_alike {
        return None;
    }
    let again = run_fresh_under(&traced, settings, fork_at, input, &mut |_, _| {}).ok()?;
    first_restart_difference(&again.lives.get(1)?.run.report.trace, &reference.lives[1].run.report.trace)
}

/// Confirms a failing outcome `out` of `input`: replays it from scratch under `settings` on
/// another host core than the one `out` ran on (when the machine has one). Returns `None` when
/// the replay gave the same run, or the first component that differed.
pub fn confirm(
    target: &Target,
    settings: &Settings,
    fork_at: u64,
    input: &Input,
    out: &Outcome,
) -> Result<Option<String>, ExploreError> {
    let seen: Vec<u32> = out.lives.iter().flat_map(|l| l.run.stats.host_cores.iter().copied()).collect();
    let (core, again) = deja_vmm::identity::on_another_core(&seen, || {
        run_fresh_under(target, settings, fork_at, input, &mut |_, _| {})
    })
    .map_err(deja_vmm::RunError::from)?;
    let again = again?;
    Ok(difference(out, &again).map(|d| format!("the replay on host core {core} differs in {d}")))
}

/// The first component in which run `b` differs from run `a` (by their lives), if any.
pub fn difference(a: &Outcome, b: &Outcome) -> Option<String> {
    use deja_vmm::divergence::{first_difference, LifeRecord, RunRecord};
    if a.digest == b.digest && a.failure == b.failure {
        return None;
    }
    // Exit counts are not compared: a fork child and a fresh run fault in different pages.
    let record = |o: &Outcome| {
        let lives = o
            .lives
            .iter()
            .enumerate()
            .map(|(i, l)| LifeRecord::new(format!("life {i}"), &l.run.report, None))
            .collect();
        RunRecord::new(o.digest.clone(), lives, &[], String::new(), Vec::new())
    };
    Some(first_difference(&record(a), &record(b)).unwrap_or_else(|| match (&a.failure, &b.failure) {
        (x, y) if x != y => {
            let words = |f: &Option<FailureSignature>| f.as_ref().map(FailureSignature::to_string);
            format!("its failure: {:?} against {:?}", words(x), words(y))
        }
        _ => format!("its digest: {} against {}", a.digest, b.digest),
    }))
}

/// The schema of bug files: version 2 added the seal (`deja_format::json`).
pub const BUG_SCHEMA: Schema = Schema { family: "deja.bug", what: "bug file", current: 2, oldest: 1, sealed_since: 2 };

/// A failure, frozen: everything needed to reproduce it exactly.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BugFile {
    /// `deja.bug/2` ([`BUG_SCHEMA`]; `deja.bug/1` files, unsealed, still read).
    pub schema: String,
    /// Short id: the first 12 hex digits of the signature's BLAKE3.
    pub id: String,
    /// What failed.
    pub signature: FailureSignature,
    /// The program's host path when it was found.
    pub program: String,
    /// BLAKE3 of the program image.
    pub program_blake3: String,
    /// argv (argv[0] is the guest path).
    pub argv: Vec<String>,
    /// Environment.
    pub env: Vec<String>,
    /// Declared read-only files: guest path → BLAKE3 of the contents (the files themselves
    /// are given again on replay).
    pub files: BTreeMap<String, String>,
    /// The run's seed.
    pub seed: u64,
    /// Guest RAM in MiB.
    pub memory_mib: u64,
    /// The syscall before which the input was applied.
    pub fork_at_syscall: u64,
    /// The input.
    pub input: Input,
    /// Every decision of the failing run.
    pub decisions: Vec<LoggedDecision>,
    /// Digest of the failing run (over every life).
    pub digest: String,
    /// Round of the campaign that found it.
    pub found_at_round: u64,
    /// The command that reproduces it.
    pub reproduce: String,
    /// For a minimized bug: the bug file it was minimized from.
    #[serde(default)]
    pub minimized_from: Option<String>,
    /// For a minimized bug: the input elements minimization removed.
    #[serde(default)]
    pub removed: Vec<String>,
    /// The CPU fingerprint of the host that found it (absent in bug files of older deja).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<deja_vmm::Fingerprint>,
    /// The root the program ran in (`--image` or `--root`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<deja_inputs::image::RootInput>,
    /// Where the program is in the guest, when it is not argv\[0\] (a program in a root found
    /// through its `PATH`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exe_path: Option<String>,
    /// The program's starting working directory, when it is not `/`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cwd: String,
}

impl BugFile {
    /// Builds the bug file of a failed outcome of a run under `settings` (whose fingerprint it
    /// records).
    pub fn new(
        target: &Target,
        settings: &Settings,
        fork_at: u64,
        input: &Input,
        out: &Outcome,
        round: u64,
        file: &str,
    ) -> BugFile {
        let signature = out.failure.clone().unwrap_or_else(|| FailureSignature::Other(String::new()));
        let program_blake3 = blake3::hash(&target.spec.image).to_hex().to_string();
        let id = crate::campaign::bug_id(&signature, &program_blake3);
        BugFile {
            schema: BUG_SCHEMA.id(),
            id,
            signature,
            program: target.path.clone(),
            program_blake3,
            argv: target.spec.argv.clone(),
            env: target.spec.env.clone(),
            files: target.spec.files.iter().map(|(k, v)| (k.clone(), blake3::hash(v).to_hex().to_string())).collect(),
            seed: input.seed.unwrap_or(target.spec.seed),
            memory_mib: target.memory >> 20,
            fork_at_syscall: fork_at,
            input: input.clone(),
            decisions: as_booted(&out.decisions, input),
            digest: out.digest.clone(),
            found_at_round: round,
            reproduce: crate::replay_command(file),
            minimized_from: None,
            removed: Vec::new(),
            host: settings.host().ok().map(|h| h.fingerprint.clone()),
            root: target.root.clone(),
            exe_path: Some(target.spec.exe_path.clone()).filter(|p| target.spec.argv.first() != Some(p)),
            cwd: target.spec.cwd.clone(),
        }
    }

    /// Reads and checks a bug file.
    pub fn read(path: &std::path::Path) -> Result<BugFile, ExploreError> {
        Ok(BUG_SCHEMA.read(path)?)
    }

    /// Checks the bytes of a bug file read from `path` (named in errors).
    pub fn parse(path: &str, bytes: &[u8]) -> Result<BugFile, ExploreError> {
        let (doc, _) = BUG_SCHEMA.check(path, bytes)?;
        Ok(BUG_SCHEMA.typed(path, doc)?)
    }

    /// Writes the bug file atomically, sealed.
    pub fn write(&self, path: &std::path::Path) -> Result<(), ExploreError> {
        Ok(BUG_SCHEMA.write(path, self)?)
    }

    /// The target this bug file describes, with the program image, the declared files and the
    /// root given again; refuses an image, a file or a root whose hash differs.
    pub fn target(
        &self,
        image: Vec<u8>,
        files: BTreeMap<String, Vec<u8>>,
        root: Option<(std::sync::Arc<deja_kernel::fs::Root>, deja_inputs::image::RootInput)>,
        path: &str,
    ) -> Result<Target, ExploreError> {
        let hash = blake3::hash(&image).to_hex().to_string();
        ensure!(
            hash == self.program_blake3,
            crate::NotTheProgramSnafu { path, found: hash, expected: &self.program_blake3 }
        );
        for (guest, want) in &self.files {
            let got = files.get(guest).map(|d| blake3::hash(d).to_hex().to_string());
            ensure!(
                got.as_deref() == Some(want.as_str()),
                crate::DeclaredFileSnafu { guest, expected: want, found: got.clone() }
            );
        }
        let given = root.as_ref().map(|(_, r)| r.blake3.clone());
        if let Some(want) = &self.root {
            ensure!(
                given.as_deref() == Some(want.blake3.as_str()),
                crate::NotTheRootSnafu { path: &want.path, expected: &want.blake3, found: given.clone() }
            );
        }
        let (root, root_input) = match (root, &self.root) {
            (Some((tree, input)), Some(_)) => (Some(tree), Some(input)),
            _ => (None, None),
        };
        let spec = ProgramSpec {
            image,
            exe_path: self.exe_path.clone().or_else(|| self.argv.first().cloned()).unwrap_or_default(),
            argv: self.argv.clone(),
            env: self.env.clone(),
            files,
            root,
            cwd: self.cwd.clone(),
            seed: self.seed,
            ..Default::default()
        };
        Ok(Target { spec, memory: self.memory_mib << 20, path: path.to_string(), root: root_input })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signature::older_id;

    fn guidance(kind: &str, maximize: bool, data: &str) -> deja_kernel::EventRecord {
        deja_kernel::EventRecord {
            name: deja_kernel::record::antithesis::GUIDANCE_EVENT.into(),
            details: format!(
                r#"{{"guidance_type":"{kind}","message":"g","id":"g","maximize":{maximize},"guidance_data":{data},"hit":true}}"#
            ),
            syscall_index: 0,
            virtual_time_ns: 0,
            durable_writes: 0,
        }
    }

    fn edges(events: &[deja_kernel::EventRecord]) -> BTreeMap<u64, Option<u64>> {
        let mut out = BTreeMap::new();
        guidance_edges(events, &mut out);
        out
    }

    #[test]
    fn a_bug_files_decisions_are_marked_as_the_booted_run_marks_them() {
        let d = |index: u64, overridden: bool| LoggedDecision {
            index,
            point: deja_kernel::DecisionPoint::SdkRandom { n: index + 1 },
            options: 0,
            choice: 7,
            overridden,
        };
        // From a fork: decisions 0 and 1 inherited unmarked; a second life starts at 0 again.
        let forked = [d(0, false), d(1, false), d(2, true), d(0, false), d(1, false)];
        let input = Input { overrides: [(0, 7), (2, 7)].into(), ..Input::default() };
        let marks: Vec<bool> = as_booted(&forked, &input).iter().map(|x| x.overridden).collect();
        assert_eq!(marks, [true, false, true, false, false]);
    }

    #[test]
    fn a_guidepost_is_an_edge_per_level_of_progress() {
        // assert_always_greater_than!(balance, 0): minimizes balance - 0.
        let at = |balance: i64| edges(&[guidance("numeric", false, &format!(r#"{{"left":{balance},"right":0}}"#))]);
        assert_eq!(at(100), at(90), "one order of magnitude: one edge");
        assert_ne!(at(100), at(40), "closer to the failure: a new edge");
        assert_ne!(at(1), at(0));
        assert_ne!(at(0), at(-1), "past it");
        // Which way is progress matters: maximizing the same values names other levels.
        let up = edges(&[guidance("numeric", true, r#"{"left":100,"right":0}"#)]);
        assert_ne!(up, at(100));
        // A boolean guidepost counts the booleans it wants.
        let all = |data: &str| edges(&[guidance("boolean", true, data)]);
        assert_eq!(all(r#"{"a":true,"b":false}"#), all(r#"{"a":false,"b":true}"#));
        assert_ne!(all(r#"{"a":true,"b":false}"#), all(r#"{"a":true,"b":true}"#));
        // Other events and malformed guidance add nothing.
        let mut other = guidance("numeric", true, r#"{"left":1,"right":0}"#);
        other.name = "ready".into();
        assert!(edges(&[other, guidance("numeric", true, r#"{"left":"x"}"#), guidance("json", true, "{}")]).is_empty());
        assert_eq!(magnitude(0.0), 0);
        assert_eq!((magnitude(1.0), magnitude(3.0), magnitude(4.0), magnitude(-7.0)), (1, 2, 3, -3));
    }

    /// A bug file as an older deja wrote it, with `signature` as plain words and the id of
    /// those words.
    fn old_bug_file(signature: &str) -> Vec<u8> {
        let bug = BugFile {
            schema: BUG_SCHEMA.id(),
            id: String::new(),
            signature: FailureSignature::Stuck,
            program: "bank".into(),
            program_blake3: "00".repeat(32),
            argv: vec!["/bank".into()],
            env: Vec::new(),
            files: BTreeMap::new(),
            seed: 7,
            memory_mib: 64,
            fork_at_syscall: 3,
            input: Input::default(),
            decisions: Vec::new(),
            digest: "ab".repeat(32),
            found_at_round: 40,
            reproduce: "deja replay campaign/bug.json".into(),
            minimized_from: None,
            removed: Vec::new(),
            host: None,
            root: None,
            exe_path: None,
            cwd: String::new(),
        };
        let doc = crate::signature::as_older_deja_wrote_it(serde_json::to_value(&bug).unwrap(), signature);
        BUG_SCHEMA.to_bytes(&doc)
    }

    #[test]
    fn a_bug_file_with_a_signature_no_variant_reads_loads_and_writes_back_the_same() {
        for words in ["panicked at 'index out of bounds', src/main.rs:3", "assertion always 'x' failed at a.rs:1"] {
            let bytes = old_bug_file(words);
            let bug = BugFile::parse("bug-old.json", &bytes).unwrap();
            assert!(matches!(&bug.signature, FailureSignature::Other(s) if s == words), "{:?}", bug.signature);
            assert_eq!(older_id(&bug.signature), bug.id, "the id it was written with");
            assert_eq!(BUG_SCHEMA.to_bytes(&bug), bytes, "written back byte for byte");
        }
    }

    #[test]
    fn a_bug_file_with_a_signature_of_a_variant_writes_back_the_same() {
        let words = "assertion always \"money is neither created nor destroyed\" failed at bank/src/main.rs:153";
        let bytes = old_bug_file(words);
        let bug = BugFile::parse("bug-old.json", &bytes).unwrap();
        assert!(matches!(bug.signature, FailureSignature::Assertion { line: 153, .. }), "{:?}", bug.signature);
        assert_eq!(older_id(&bug.signature), bug.id);
        assert_eq!(BUG_SCHEMA.to_bytes(&bug), bytes);
    }
}
