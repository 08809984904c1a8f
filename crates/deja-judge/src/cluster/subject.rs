//! A cluster bug as the pipeline's [`Subject`]: its runs over
//! `deja_explore::cluster::run_cluster_input` (one cluster round, base or candidate, under the
//! bug's faults by meaning in a world), `minimize_cluster` (the bug's smallest form) and the
//! storage sweep (`sweep.rs`), each told as a [`Run`]. It decides nothing; what it keeps between
//! steps is the bug's forms, the one chosen with its faults and schedule, and the candidate.
//!
//! Its steps: the bug reproduced as found, minimized, its faults by meaning on the base, the
//! no-fault control, the candidate without faults, fresh worlds (other seeds of the message
//! fates, where the base must fail first), the schedule shifted, and each node crashed before
//! and after its durable operations. It has no corrected program.

use std::ops::ControlFlow;

use deja_cluster::SteerAt;
use deja_explore::cluster::{minimize_cluster, run_cluster_input};

use super::meaning::{by_meaning, not_applicable, partner, run_of, shifted, timed};
use super::sweep::{run_all, sweep_points, SweepPoint};
use super::*;
use crate::pipeline::{
    Checks, ControlRule, Form, Forms, Found, Names, NoEvidence, Subject, Swept, Trial, Variant, Worlds,
};

/// The steps' names in a cluster's certificate.
const NAMES: Names = Names {
    find: "reproduce the bug on the base",
    minimize: Some("minimize the bug"),
    reproduce: "the faults by meaning fail the base",
    control: "no-fault control on the base",
    corrected: None,
    candidate: "the candidate runs",
    worlds: "the candidate in fresh worlds",
    shifted: Some("sweep the candidate: the schedule shifted, as a whole and fault by fault"),
    sweep: "sweep the candidate: each node crashed before and after its durable operations",
};

/// What a cluster check has learnt so far.
pub(super) struct ClusterSubject<'a> {
    c: &'a ClusterCheck,
    sweep: &'a Sweep,
    /// The bug's forms, in the order they are tried.
    forms: Vec<ClusterBug>,
    /// The form judged, once chosen: what `deja check` writes beside its certificate.
    pub(super) judged: Option<ClusterBug>,
    /// Its faults.
    faults: Vec<BugFault>,
    /// The shifted schedules, with their names.
    variants: Vec<(String, Vec<ScheduledFault>)>,
    /// The candidate cluster, once it could be had.
    cand: Option<ClusterTarget>,
}

/// The faults in words.
fn words(faults: &[BugFault]) -> String {
    faults.iter().map(BugFault::describe).collect::<Vec<_>>().join("; ")
}

impl<'a> ClusterSubject<'a> {
    pub(super) fn new(c: &'a ClusterCheck, sweep: &'a Sweep) -> ClusterSubject<'a> {
        ClusterSubject {
            c,
            sweep,
            forms: Vec::new(),
            judged: None,
            faults: Vec::new(),
            variants: Vec::new(),
            cand: None,
        }
    }

    fn bug(&self) -> Result<&ClusterBug, NoEvidence> {
        self.judged.as_ref().ok_or_else(|| NoEvidence::new("the check's steps ran out of order: no form chosen yet"))
    }

    fn cand(&self) -> Result<&ClusterTarget, NoEvidence> {
        self.cand.as_ref().ok_or_else(|| NoEvidence::new("the check's steps ran out of order: no candidate yet"))
    }

    /// Runs `input` on the base (`cand` false) or the candidate, weighed under `faults`.
    fn round(&self, cand: bool, input: &ClusterInput, faults: &[BugFault]) -> Result<Run, NoEvidence> {
        let (target, who) = if cand { (self.cand()?, "the candidate") } else { (&self.c.base, "the base") };
        let out = run_cluster_input(target, input, &mut |_, _, _| {})
            .map_err(|e| NoEvidence::new(format!("{who} cannot run: {e}")))?;
        Ok(run_of(&out, faults))
    }

    /// The shifted schedules of `schedule`: as a whole by ±200 and ±500 ms, and each of its
    /// first ten faults by ±300 ms together with the fault paired with it.
    fn variants_of(schedule: &[ScheduledFault]) -> Vec<(String, Vec<ScheduledFault>)> {
        let mut variants = Vec::new();
        if schedule.is_empty() {
            return variants;
        }
        for d in [-500i64, -200, 200, 500] {
            variants.push((format!("every fault {d:+} ms"), shifted(schedule, d, None)));
        }
        for (i, f) in schedule.iter().enumerate().take(10) {
            for d in [-300i64, 300] {
                let with = partner(schedule, i)
                    .map(|j| format!(" (with \"{}\")", describe_fault(&schedule[j])))
                    .unwrap_or_default();
                variants.push((format!("\"{}\"{with} {d:+} ms", describe_fault(f)), shifted(schedule, d, Some(i))));
            }
        }
        variants
    }
}

impl Subject for ClusterSubject<'_> {
    fn names(&self) -> Names {
        NAMES
    }

    fn control_rule(&self) -> ControlRule {
        ControlRule::SameFailure
    }

    /// The bug, exactly as `deja replay` runs it.
    fn find(&mut self) -> Result<Found, NoEvidence> {
        let given = &self.c.bug;
        let run = self.round(false, &given.input, &[])?;
        Ok(Found {
            signature: given.signature.clone(),
            detail: format!("reproduced: {}", given.signature),
            run: Some(run),
        })
    }

    /// The bug's smallest form first: the verdict must not depend on whether its finder
    /// minimized it, so an unminimized bug is minimized here (as `deja minimize` does); then
    /// the bug as found, judged on all its faults when its smallest form cannot be.
    fn forms(&mut self) -> Forms {
        let (given, base) = (&self.c.bug, &self.c.base);
        let all = given.fault_list(base);
        let mut out = Forms {
            advice: format!(
                "The failure depends on decisions beyond its faults and cannot be judged by meaning. What you can do: \
                 `deja replay {}` shows it as found; explore the candidate (`deja explore` of the cluster file with \
                 the candidate's binaries) to look for it there",
                given.reproduce.strip_prefix("deja replay ").unwrap_or(&given.reproduce)
            ),
            ..Forms::default()
        };
        let what = |b: &ClusterBug| {
            let faults = b.fault_list(base);
            format!("{} fault(s) by meaning ({})", faults.len(), words(&faults))
        };
        if given.minimized_from.is_some() || all.len() <= 1 {
            let why = if given.minimized_from.is_some() { "minimized already" } else { "nothing to minimize" };
            let how = format!("{why}: {} fault(s): {}", all.len(), words(&all));
            out.forms.push(Form { what: what(given), how, digests: vec![] });
            self.forms.push(given.clone());
            return out;
        }
        match minimize_cluster(given, base, "cluster-bug.json") {
            Ok(m) => {
                let how = format!(
                    "minimized here, as deja minimize does, in {} runs: {} of {} faults kept: {}",
                    m.tests,
                    m.bug.input.fault_words().len(),
                    all.len(),
                    m.bug.input.fault_words().join("; ")
                );
                out.forms.push(Form { what: what(&m.bug), how, digests: vec![m.bug.digest.clone()] });
                self.forms.push(m.bug);
            }
            Err(e) => out.notes.push(format!("it cannot be minimized ({e})")),
        }
        let how = format!("judged as found, with all {} faults: {}", all.len(), words(&all));
        out.forms.push(Form { what: what(given), how, digests: vec![] });
        self.forms.push(given.clone());
        out
    }

    fn choose(&mut self, form: usize) -> Checks {
        let bug = self.forms.get(form).cloned().unwrap_or_else(|| self.c.bug.clone());
        self.faults = bug.fault_list(&self.c.base);
        self.variants = ClusterSubject::variants_of(&timed(&self.faults));
        self.judged = Some(bug);
        Checks {
            faults: words(&self.faults),
            candidate_runs: vec![String::new()],
            worlds: Worlds::Others(self.c.worlds.max(1)),
            variants: self
                .variants
                .iter()
                .map(|(name, s)| Variant { name: name.clone(), not_applicable: not_applicable(s) })
                .collect(),
        }
    }

    fn run(&mut self, trial: Trial) -> Result<Run, NoEvidence> {
        match trial {
            Trial::Reproduce(i) => {
                let form = self.forms.get(i).ok_or_else(|| NoEvidence::new(format!("no form {i} of the bug")))?;
                let faults = form.fault_list(&self.c.base);
                self.round(false, &by_meaning(form, &faults, 0), &faults)
            }
            Trial::Control => self.round(false, &by_meaning(self.bug()?, &[], 0), &[]),
            Trial::Candidate(_) => {
                let nodes = self.c.candidate.as_ref().map_err(|e| NoEvidence::new(format!("no candidate: {e}")))?;
                let cand =
                    candidate_target(&self.c.base, nodes).map_err(|e| NoEvidence::new(format!("no candidate: {e}")))?;
                self.cand = Some(cand);
                self.round(true, &by_meaning(self.bug()?, &[], 0), &[])
            }
            Trial::WorldBase(k) => self.round(false, &by_meaning(self.bug()?, &self.faults, k), &self.faults),
            Trial::World(k) => self.round(true, &by_meaning(self.bug()?, &self.faults, k), &self.faults),
            Trial::Shifted(i) => {
                let (_, schedule) =
                    self.variants.get(i).ok_or_else(|| NoEvidence::new(format!("no shifted schedule {i}")))?;
                let storage = self.faults.iter().filter(|f| matches!(f, BugFault::Storage(_))).cloned();
                let all: Vec<BugFault> = schedule.iter().cloned().map(BugFault::Timed).chain(storage).collect();
                self.round(true, &by_meaning(self.bug()?, &all, 0), &all)
            }
            Trial::Corrected => Err(NoEvidence::new("a cluster check has no corrected program")),
        }
    }

    fn disagreement(&self, k: u32) -> String {
        format!("world {} differs from world 1", k + 1)
    }

    /// Each node crashed before and after its durable operations, under the bug's timed
    /// faults, with the crash states there. Its runs take their steering at boot, so that every
    /// durable operation can be a crash point; the points are those of the candidate's run
    /// under the timed faults alone, which comes first.
    fn sweep(&mut self, each: &mut dyn FnMut(Swept) -> ControlFlow<()>) -> Result<String, NoEvidence> {
        let (bug, cand) = (self.bug()?, self.cand()?);
        let timed_faults: Vec<BugFault> = timed(&self.faults).into_iter().map(BugFault::Timed).collect();
        let at_boot = |faults: &[BugFault]| ClusterInput { steer_at: SteerAt::Boot, ..by_meaning(bug, faults, 0) };
        let alone = run_cluster_input(cand, &at_boot(&timed_faults), &mut |_, _, _| {})
            .map_err(|e| NoEvidence::new(format!("the candidate cannot run: {e}")))?;
        let label = "the timed faults alone".to_string();
        if each(Swept::Ran { label, run: run_of(&alone, &timed_faults) }).is_break() {
            return Ok(String::new());
        }
        let (points, total) = sweep_points(&alone, self.sweep.crash_points);
        let input_of = |p: &SweepPoint| {
            let mut all = timed_faults.clone();
            all.push(p.fault());
            at_boot(&all)
        };
        // A queue in a fixed order: every point, then the other crash states of each point
        // before an operation, in the order of their points. It runs `jobs` at a time, and is
        // given in its order: the first run that decides, whatever the number of threads.
        let mut queue: Vec<(SweepPoint, bool)> = points.iter().map(|p| (p.clone(), true)).collect();
        let (mut next, mut runs) = (0usize, 0usize);
        while next < queue.len() {
            let chunk: Vec<(SweepPoint, bool)> = queue[next..queue.len().min(next + self.sweep.jobs.max(1))].to_vec();
            next += chunk.len();
            let inputs: Vec<ClusterInput> = chunk.iter().map(|(p, _)| input_of(p)).collect();
            let outs = run_all(cand, &inputs, self.sweep.states_per_point, self.sweep.jobs);
            for ((p, first), out) in chunk.into_iter().zip(outs) {
                runs += 1;
                let label = p.describe();
                let o = out.map_err(|e| NoEvidence::new(format!("{label}: the candidate cannot run: {e}")))?;
                let Some(crash) = o.report.crashes.iter().find(|r| r.node == p.node) else {
                    let digest = Some(o.report.digest.clone());
                    if each(Swept::Unreached { label, digest }).is_break() {
                        return Ok(String::new());
                    }
                    continue;
                };
                if each(Swept::Ran { label, run: run_of(&o, &timed_faults) }).is_break() {
                    return Ok(String::new());
                }
                // The other distinct crash states of a crash before the operation.
                if first && p.crash.when == When::Before {
                    let kept = crash.kept.as_ref();
                    for state in crash.states.iter().take(self.sweep.states_per_point).filter(|s| Some(*s) != kept) {
                        let q =
                            SweepPoint { crash: OpCrash { keep: Some(state.clone()), ..p.crash.clone() }, ..p.clone() };
                        queue.push((q, false));
                    }
                }
            }
        }
        let swept = if total == 0 {
            "no durable operation that made something durable on a node storage faults may strike: nothing to crash"
                .to_string()
        } else if total * 2 <= points.len() {
            format!("every one of the {total} durable operations that made something durable")
        } else {
            format!("{} of the {total} durable operations that made something durable, spread evenly", points.len() / 2)
        };
        Ok(format!(
            "all {runs} runs held: {} crash points, before and after {swept}, with their crash states",
            points.len()
        ))
    }

    fn certificate(&self) -> Certificate {
        let c = self.c;
        let cand_hash = match &c.candidate {
            Ok(nodes) => {
                let mut h = blake3::Hasher::new();
                for n in nodes {
                    h.update(n.name.as_bytes());
                    h.update(blake3::hash(&n.image).as_bytes());
                    h.update(serde_json::to_string(&(&n.args, &n.env)).unwrap_or_default().as_bytes());
                }
                h.finalize().to_hex().to_string()
            }
            Err(_) => String::new(),
        };
        let mut cert = Certificate::new(&c.bug.id, &c.base.file_blake3, &cand_hash);
        // The settings every run was made under: the base's, which the candidate's cluster
        // keeps (see `candidate_target`).
        cert.host = crate::fingerprint(&c.base.cfg.settings);
        cert
    }
}
