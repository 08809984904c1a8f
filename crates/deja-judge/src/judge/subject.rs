//! A program as the pipeline's [`Subject`]: its runs over the KVM code paths
//! (`deja_explore::input::run_fresh_under`, `deja_vmm::Session` through [`crate::search`]),
//! every one on the check's [`crate::search::Machine`] (its RAM and run settings), each told as
//! a [`Run`]. It decides nothing; what it keeps between steps is what the later ones need: the
//! base's fault-free run, the capsule found or given and its steering, the candidate's
//! fault-free runs on which the capsule is mapped, and the worlds (to name how they differ).
//!
//! Its steps: the hunt on the base (or the capsule given), the capsule reproduced by meaning,
//! the no-fault control, the corrected program (when given), the candidate without faults (and
//! with the capsule's steering when it has one), the replay in repeated worlds on different host
//! cores, and the sweep of every crash point with its states and an error on each file
//! operation. It has no minimization (a bug file is minimized as it is frozen, see
//! [`super::freeze_bug`]) and no schedule to shift.

use std::ops::ControlFlow;

use super::*;
use crate::pipeline::{
    Checks, ControlRule, End, Form, Forms, Found, Names, NoEvidence, Run, Subject, Swept, Trial, Worlds,
};
use crate::search::{run_plan, run_steered, search, Visit};

/// The steps' names in a program's certificate.
const NAMES: Names = Names {
    find: "hunt on the base",
    minimize: None,
    reproduce: "reproduce the capsule on the base",
    control: "no-fault control on the base",
    corrected: Some("the capsule holds on the corrected program"),
    candidate: "the candidate runs",
    worlds: "replay the capsule on the candidate",
    shifted: None,
    sweep: "sweep the candidate: crash points with their states, and I/O errors",
};

/// What a check of a program has learnt so far.
pub(super) struct ProgramCheck<'a> {
    input: &'a CheckInput,
    base_hash: String,
    cand_hash: String,
    /// The capsule judged against: given, or found by the hunt.
    pub(super) capsule: Option<Capsule>,
    base: Option<ProgramSpec>,
    /// The base's run without faults nor steering.
    plain: Option<Outcome>,
    steer: Steer,
    fork_base: u64,
    /// The base's run without faults under the capsule's steering: where its trigger is mapped.
    control: Option<Outcome>,
    cand: Option<ProgramSpec>,
    cand_plain: Option<Outcome>,
    fork_cand: u64,
    cand_control: Option<Outcome>,
    cand_plan: Option<Plan>,
    /// Each world's host core and run.
    worlds: Vec<(u32, Outcome)>,
}

/// A value an earlier step keeps, or no evidence (the steps ran out of order): never a panic.
fn need<'a, T>(x: &'a Option<T>, what: &str) -> Result<&'a T, NoEvidence> {
    x.as_ref().ok_or_else(|| NoEvidence::new(format!("the check's steps ran out of order: no {what} yet")))
}

fn blake3_of(p: &Program) -> String {
    p.image.as_ref().map(|i| blake3::hash(i).to_hex().to_string()).unwrap_or_default()
}

/// What a run of the program showed: its failure (a stop after an injected error that the
/// fail-stop rule let stand is none), its fail-stops, its timeline.
pub(super) fn run_of(o: &Outcome) -> Run {
    let stops = deja_explore::fail_stops::of_lives("", o.lives.iter().map(|l| &l.run.report));
    Run {
        digest: o.digest.clone(),
        end: o.failure.clone().map_or(End::Held, End::Failed),
        fail_stops: stops.iter().map(|s| s.key()).collect(),
        timeline: timeline(o),
    }
}

impl<'a> ProgramCheck<'a> {
    pub(super) fn new(input: &'a CheckInput) -> ProgramCheck<'a> {
        ProgramCheck {
            input,
            base_hash: blake3_of(&input.base),
            cand_hash: blake3_of(&input.candidate),
            capsule: input.capsule.clone(),
            base: None,
            plain: None,
            steer: Steer::default(),
            fork_base: 0,
            control: None,
            cand: None,
            cand_plain: None,
            fork_cand: 0,
            cand_control: None,
            cand_plan: None,
            worlds: Vec::new(),
        }
    }

    /// The hunt over the base's storage fault menu: its first failure, frozen as the capsule.
    fn hunt(&mut self, base: &ProgramSpec, plain: &Outcome) -> Result<Found, NoEvidence> {
        let input = self.input;
        let mut failure = None;
        let searched =
            search(base, &input.machine(), plain, input.max_kill_points, input.states_per_point, &mut |v| match v {
                // A failure after a crash and its restart, or under a placed error.
                Visit::Ran(r) if r.1.failure.is_some() && (r.0.crash == CrashKind::None || r.1.lives.len() > 1) => {
                    failure = Some(*r);
                    ControlFlow::Break(())
                }
                _ => ControlFlow::Continue(()),
            })
            .map_err(|e| NoEvidence::new(format!("the hunt did not run: {e}")))?;
        let Some((plan, o)) = failure else {
            return Err(NoEvidence {
                why: format!(
                    "no failure found on the base in {} runs: {} crash points with their crash states, and an error on \
                     each file operation",
                    searched.runs, searched.points
                ),
                digests: vec![plain.digest.clone()],
            });
        };
        let c = capsule_from(&o, &self.base_hash, input, &plan.faults_with_crash(), &Steer::default())
            .ok_or_else(|| NoEvidence::new("the failure cannot be frozen"))?;
        let found = Found {
            signature: c.signature.clone(),
            detail: format!("found by the hunt ({}): {}", plan.describe(), c.signature),
            run: Some(run_of(&o)),
        };
        self.capsule = Some(c);
        Ok(found)
    }

    /// The capsule's failure by meaning on the base: its steering, the steered control run its
    /// trigger is mapped on, and the run.
    fn reproduce(&mut self) -> Result<Run, NoEvidence> {
        let input = self.input;
        let c = need(&self.capsule, "capsule")?.clone();
        let base = need(&self.base, "base")?.clone();
        let plain = need(&self.plain, "fault-free run of the base")?;
        self.steer = c.steer();
        self.fork_base = self.steer.fork_at(plain);
        let control = if self.steer == Steer::default() {
            plain.clone()
        } else {
            run_steered(&base, &input.machine(), &self.steer, self.fork_base)
                .map_err(|e| NoEvidence::new(format!("the base does not run: {e}")))?
        };
        let plan = plan_of(&c, &control);
        self.control = Some(control);
        let plan = plan.ok_or_else(|| NoEvidence::new("the capsule's trigger does not occur on the base"))?;
        let o = run_plan(&base, &input.machine(), &plan, &self.steer, self.fork_base)
            .map_err(|e| NoEvidence::new(e.to_string()))?;
        Ok(run_of(&o))
    }

    /// The capsule on the known-good program: its own fault-free runs, the trigger mapped there.
    fn corrected(&mut self) -> Result<Run, NoEvidence> {
        let input = self.input;
        let c = need(&self.capsule, "capsule")?;
        let corr = input.corrected.as_ref().ok_or_else(|| NoEvidence::new("no corrected program given"))?;
        let image = corr.image.as_ref().map_err(|_| NoEvidence::new("the corrected program cannot be read"))?;
        let s = spec(image, corr, input);
        let cannot = |e: RunFailure| NoEvidence::new(format!("the corrected program cannot be run: {e}"));
        let m = input.machine();
        let plain = run(&s, &m, &FaultConfig::default(), &BTreeMap::new()).map_err(cannot)?;
        let at = self.steer.fork_at(&plain);
        let ctl = run_steered(&s, &m, &self.steer, at).map_err(cannot)?;
        let p = plan_of(c, &ctl)
            .ok_or_else(|| NoEvidence::new("the capsule's trigger does not occur on the corrected program"))?;
        Ok(run_of(&run_plan(&s, &m, &p, &self.steer, at).map_err(cannot)?))
    }

    /// The candidate without faults: it must be read, run and get past its start-up.
    fn candidate_plain(&mut self) -> Result<Run, NoEvidence> {
        let input = self.input;
        let image = input
            .candidate
            .image
            .as_ref()
            .map_err(|e| NoEvidence::new(format!("the candidate cannot be read: {e}")))?;
        let cand = spec(image, &input.candidate, input);
        let plain = run(&cand, &input.machine(), &FaultConfig::default(), &BTreeMap::new())
            .map_err(|e| NoEvidence::new(format!("the candidate cannot be run: {e}")))?;
        let mut r = run_of(&plain);
        if let Some(last) = plain.lives.last().map(|l| &l.run.report) {
            if matches!(last.exit, deja_kernel::ExitStatus::Signaled { .. }) && last.setup_complete.is_none() {
                r.end = End::NoVerdict(format!("the candidate crashes at start-up: {:?}", last.exit));
            }
        }
        self.fork_cand = self.steer.fork_at(&plain);
        if self.steer == Steer::default() {
            self.cand_control = Some(plain.clone());
        }
        self.cand = Some(cand);
        self.cand_plain = Some(plain);
        Ok(r)
    }

    /// The candidate without faults under the capsule's steering: where its trigger is mapped.
    fn candidate_steered(&mut self) -> Result<Run, NoEvidence> {
        let cand = need(&self.cand, "candidate")?;
        let o = run_steered(cand, &self.input.machine(), &self.steer, self.fork_cand)
            .map_err(|e| NoEvidence::new(format!("the candidate cannot be run: {e}")))?;
        let r = run_of(&o);
        self.cand_control = Some(o);
        Ok(r)
    }

    /// World `k`: the capsule mapped on the candidate, in a fresh VM on its own host core, in
    /// turn over the cores this process may use, so that a run that depends on where it ran
    /// cannot pass as deterministic.
    fn world(&mut self, k: u32) -> Result<Run, NoEvidence> {
        if self.cand_plan.is_none() {
            let c = need(&self.capsule, "capsule")?;
            let plan = plan_of(c, need(&self.cand_control, "fault-free run of the candidate")?)
                .ok_or_else(|| NoEvidence::new("the capsule's trigger does not occur on the candidate"))?;
            self.cand_plan = Some(plan);
        }
        let (cand, plan) = (need(&self.cand, "candidate")?, need(&self.cand_plan, "plan")?);
        let cores = deja_vmm::identity::initial_cores();
        let core = cores.get(k as usize % cores.len().max(1)).copied().unwrap_or(0);
        let o = deja_vmm::identity::on_core(core, || {
            run_plan(cand, &self.input.machine(), plan, &self.steer, self.fork_cand)
        })
        .map_err(RunFailure::from)
        .and_then(|r| r)
        .map_err(|e| NoEvidence::new(e.to_string()))?;
        let r = run_of(&o);
        self.worlds.push((core, o));
        Ok(r)
    }
}

impl Subject for ProgramCheck<'_> {
    fn names(&self) -> Names {
        Names { corrected: NAMES.corrected.filter(|_| self.input.corrected.is_some()), ..NAMES }
    }

    fn control_rule(&self) -> ControlRule {
        ControlRule::AnyFailure
    }

    fn find(&mut self) -> Result<Found, NoEvidence> {
        let input = self.input;
        let image = input.base.image.as_ref().map_err(|e| NoEvidence::new(format!("the base cannot be read: {e}")))?;
        let base = spec(image, &input.base, input);
        let plain = run(&base, &input.machine(), &FaultConfig::default(), &BTreeMap::new())
            .map_err(|e| NoEvidence::new(format!("the base does not run: {e}")))?;
        self.base = Some(base.clone());
        self.plain = Some(plain.clone());
        let record = input.base.setting.record();
        match &self.capsule {
            Some(c) if c.base_blake3 != self.base_hash => {
                Err(NoEvidence::new("the capsule was frozen on another base binary"))
            }
            Some(c) if c.base_inputs != record => Err(NoEvidence::new(format!(
                "the capsule was frozen with other inputs of the base: {}",
                inputs_difference(&c.base_inputs, &record)
            ))),
            Some(c) => Ok(Found {
                signature: c.signature.clone(),
                detail: if c.origin.is_empty() {
                    format!("capsule {} given", c.id)
                } else {
                    format!("capsule {}: {}", c.id, c.origin)
                },
                run: None,
            }),
            None => self.hunt(&base, &plain),
        }
    }

    fn forms(&mut self) -> Forms {
        let what = "the capsule by meaning".to_string();
        Forms { forms: vec![Form { what, how: String::new(), digests: vec![] }], ..Forms::default() }
    }

    fn choose(&mut self, _form: usize) -> Checks {
        let mut candidate_runs = vec![String::new()];
        if self.steer != Steer::default() {
            candidate_runs.push("with the capsule's decisions".into());
        }
        Checks {
            faults: "the capsule by meaning".into(),
            candidate_runs,
            worlds: Worlds::Repeats(self.input.worlds.max(1)),
            variants: Vec::new(),
        }
    }

    fn run(&mut self, trial: Trial) -> Result<Run, NoEvidence> {
        match trial {
            Trial::Reproduce(_) => self.reproduce(),
            Trial::Control => Ok(run_of(need(&self.control, "control run of the base")?)),
            Trial::Corrected => self.corrected(),
            Trial::Candidate(0) => self.candidate_plain(),
            Trial::Candidate(_) => self.candidate_steered(),
            Trial::World(k) => self.world(k),
            Trial::WorldBase(_) | Trial::Shifted(_) => Err(NoEvidence::new(format!("a program has no {trial:?} run"))),
        }
    }

    fn disagreement(&self, k: u32) -> String {
        let (Some((core0, first)), Some((core, other))) = (self.worlds.first(), self.worlds.get(k as usize)) else {
            return format!("world {} differs from world 1", k + 1);
        };
        let why = deja_explore::input::difference(first, other).unwrap_or_else(|| "how it ended".into());
        format!("world {} (host core {core}) differs from world 1 (host core {core0}) in {why}", k + 1)
    }

    fn sweep(&mut self, each: &mut dyn FnMut(Swept) -> ControlFlow<()>) -> Result<String, NoEvidence> {
        let input = self.input;
        let (cand, plain) =
            (need(&self.cand, "candidate")?, need(&self.cand_plain, "fault-free run of the candidate")?);
        let total = plain.durable_writes;
        if total > input.max_kill_points {
            return Err(NoEvidence::new(format!(
                "{total} durable writes: more than the sweep's {} crash points",
                input.max_kill_points
            )));
        }
        let swept =
            search(cand, &input.machine(), plain, input.max_kill_points, input.states_per_point, &mut |v| match v {
                Visit::Ran(r) => each(Swept::Ran { label: r.0.describe(), run: run_of(&r.1) }),
                Visit::Unreached(label) => each(Swept::Unreached { label, digest: None }),
            })
            .map_err(|e| NoEvidence::new(format!("the sweep did not run: {e}")))?;
        Ok(format!(
            "all {} runs held: {} crash points over {total} durable writes with their crash states, and an error on \
             each file operation",
            swept.runs, swept.points
        ))
    }

    fn certificate(&self) -> Certificate {
        let input = self.input;
        let id = self.capsule.as_ref().map(|c| c.id.as_str()).unwrap_or("");
        let mut cert = Certificate::new(id, &self.base_hash, &self.cand_hash);
        cert.base_inputs = input.base.setting.record();
        cert.candidate_inputs = input.candidate.setting.record();
        cert.host = crate::fingerprint(&input.settings);
        if let Some(c) = &self.capsule {
            cert.crash_model = Some(c.faults.crash_model);
            cert.fail_stop = Some(c.faults.fail_stop.clone());
            cert.models = c.models.clone();
        }
        cert
    }
}
