//! The one pipeline of `deja check`, for every kind of subject: it runs the steps in order,
//! weighs every run, records every step (ran or not, passed or not) and decides the verdict.
//!
//! A [`Subject`] is what is judged — a program ([`crate::judge`]) or a cluster
//! ([`crate::cluster`]) — and knows how to *run* itself, base or candidate, under the failure's
//! faults, a world, a shifted schedule or a crash point, and what it saw ([`Run`]). It decides
//! nothing: the pipeline does, with one set of rules for both.
//!
//! The steps, in the order the certificate lists them ([`Step`]):
//!
//! 1. **find**: the failure on the base (a program's hunt or capsule; a cluster bug's own run,
//!    which must fail the same way);
//! 2. **minimize** (a subject that offers it): its forms, smallest first, are tried in turn;
//! 3. **reproduce**: the first form whose faults by meaning fail the base the same way is
//!    judged; none: `EVIDENCE_INCOMPLETE`;
//! 4. **control**: the base without faults; failing the same way (or, by the subject's
//!    [`ControlRule`], at all) is `NOT_FAULT_INDUCED`;
//! 5. **corrected** (when a known-good program is given): the failure must not fail it;
//! 6. **the candidate runs**: without faults it must hold;
//! 7. **worlds**: the failure by meaning on the candidate, in several worlds ([`Worlds`]);
//! 8. **shifted** (a subject that offers it): the schedule shifted, variant by variant;
//! 9. **sweep**: the candidate crashed at its crash points (and, for a program, an error on
//!    each file operation), run by run in the subject's fixed order.
//!
//! How a run weighs: a failure with the failure's signature is `STILL_REPRODUCES`, another one
//! `NEW_FAILURE`; a run that gives no verdict (it ran out of its budget, a fault never came)
//! and a run that could not be made ([`NoEvidence`]: a harness error, a trigger that does not
//! occur) are `EVIDENCE_INCOMPLETE`, never a failure and never a pass; a stop after an injected
//! I/O error that the fail-stop rule let stand is counted, never a failure. The first run that
//! does not hold decides, and every later step is recorded as not run. A pass needs every step
//! recorded and passed: no evidence is never a pass.

use std::ops::ControlFlow;

use deja_explore::FailureSignature;

use crate::certificate::{Certificate, CheckStatus};
use crate::verdict::Verdict;

/// The steps of a check, in the order a certificate lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The failure on the base: found, given, or replayed as found.
    Find,
    /// Its smaller forms (a subject that minimizes).
    Minimize,
    /// Its faults by meaning fail the base the same way.
    Reproduce,
    /// The base holds without faults.
    Control,
    /// The failure does not fail a known-good program (when one is given).
    Corrected,
    /// The candidate holds without faults.
    CandidateRuns,
    /// The candidate holds under the failure, in several worlds.
    Worlds,
    /// The candidate holds under the schedule shifted (a subject with a schedule).
    Shifted,
    /// The candidate holds at each of its crash points.
    Sweep,
}

/// A subject's name for each step in its certificate; `None` for a step it does not have,
/// which is then not recorded at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Names {
    /// [`Step::Find`].
    pub find: &'static str,
    /// [`Step::Minimize`].
    pub minimize: Option<&'static str>,
    /// [`Step::Reproduce`].
    pub reproduce: &'static str,
    /// [`Step::Control`].
    pub control: &'static str,
    /// [`Step::Corrected`].
    pub corrected: Option<&'static str>,
    /// [`Step::CandidateRuns`].
    pub candidate: &'static str,
    /// [`Step::Worlds`].
    pub worlds: &'static str,
    /// [`Step::Shifted`].
    pub shifted: Option<&'static str>,
    /// [`Step::Sweep`].
    pub sweep: &'static str,
}

impl Names {
    /// Each step the subject has, with its name, in certificate order.
    pub fn in_order(&self) -> Vec<(Step, &'static str)> {
        let all = [
            (Step::Find, Some(self.find)),
            (Step::Minimize, self.minimize),
            (Step::Reproduce, Some(self.reproduce)),
            (Step::Control, Some(self.control)),
            (Step::Corrected, self.corrected),
            (Step::CandidateRuns, Some(self.candidate)),
            (Step::Worlds, Some(self.worlds)),
            (Step::Shifted, self.shifted),
            (Step::Sweep, Some(self.sweep)),
        ];
        all.into_iter().filter_map(|(s, n)| n.map(|n| (s, n))).collect()
    }

    fn has(&self, step: Step) -> bool {
        self.in_order().iter().any(|(s, _)| *s == step)
    }
}

/// How a run ended, as a verdict weighs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// It ran to its end and held.
    Held,
    /// It failed, with this signature.
    Failed(FailureSignature),
    /// It gives no verdict, for this reason: it ran out of its time budget, a fault it was
    /// given could not be applied or never came, it died before it was set up.
    NoVerdict(String),
    /// A fault it was given fell where faults are off (a test template's quiet period): it ran
    /// another schedule than the one it was given. A shifted variant that ends so is named and
    /// set aside, as one that cannot be applied at all; anywhere else it gives no verdict.
    NotApplicable(String),
}

/// One run of the base or the candidate, as the pipeline sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    /// Its digest, over every life.
    pub digest: String,
    /// How it ended.
    pub end: End,
    /// The stops after an injected I/O error that the fail-stop rule let stand (the program
    /// restarted on its disk): never a failure by themselves, counted in the step's detail.
    pub fail_stops: Vec<String>,
    /// What happened, for a person (empty when the subject has no words for it).
    pub timeline: String,
}

impl Run {
    /// Did it fail with `sig`?
    pub fn fails_as(&self, sig: &FailureSignature) -> bool {
        matches!(&self.end, End::Failed(f) if f.is_the_failure(sig))
    }

    /// What it showed, in words: its timeline, else how it ended.
    pub fn words(&self) -> String {
        if !self.timeline.is_empty() {
            return self.timeline.clone();
        }
        match &self.end {
            End::Held => "it holds".into(),
            End::Failed(f) => f.to_string(),
            End::NoVerdict(why) | End::NotApplicable(why) => why.clone(),
        }
    }
}

/// Why a run or a step gave no evidence: it could not be made (the VM, the explorer, a
/// candidate that cannot be read: a harness error) or placed (a trigger that does not occur).
/// Never a failure, never a pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoEvidence {
    /// Why, in words.
    pub why: String,
    /// The digests of the runs made on the way, if any.
    pub digests: Vec<String>,
}

impl NoEvidence {
    /// No evidence, for this reason.
    pub fn new(why: impl Into<String>) -> NoEvidence {
        NoEvidence { why: why.into(), digests: Vec::new() }
    }
}

/// The failure on the base, as [`Subject::find`] has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// What failed: every later run is weighed against it.
    pub signature: FailureSignature,
    /// How it was had, in words.
    pub detail: String,
    /// The run of the base that showed it, when one was made here (it must fail the same way);
    /// `None` for a failure given frozen, which [`Step::Reproduce`] replays.
    pub run: Option<Run>,
}

/// One form of the failure ([`Subject::forms`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Form {
    /// Its faults, in words.
    pub what: String,
    /// How it came to be (minimized here, minimized already, as found).
    pub how: String,
    /// The digests of the runs that made it.
    pub digests: Vec<String>,
}

/// The forms of the failure to try, in order: the first whose faults by meaning fail the base
/// the same way is judged.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Forms {
    /// The forms, the preferred (smallest) first.
    pub forms: Vec<Form>,
    /// What the subject has to say about them (why it could not minimize).
    pub notes: Vec<String>,
    /// What a person can do when no form fails the base again.
    pub advice: String,
}

/// What the worlds of [`Step::Worlds`] are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Worlds {
    /// The same run repeated this many times in fresh VMs: they must all agree (digest and
    /// end) before any is weighed, else the candidate is not deterministic there.
    Repeats(u32),
    /// This many worlds: the failure's own, then others (other seeds of the message fates),
    /// in each of which the base must first fail the same way, else it says nothing about the
    /// fix and is set aside.
    Others(u32),
}

/// A shifted schedule ([`Step::Shifted`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Variant {
    /// What was shifted, in words.
    pub name: String,
    /// Why it cannot be applied, when it cannot: it is then named and not run.
    pub not_applicable: Option<String>,
}

/// What the subject runs for the form it judges ([`Subject::choose`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checks {
    /// The faults replayed on the candidate, in words.
    pub faults: String,
    /// The candidate's runs without faults, each by what sets it apart ("" for the plain one).
    pub candidate_runs: Vec<String>,
    /// The worlds.
    pub worlds: Worlds,
    /// The shifted schedules (for a subject that has [`Step::Shifted`]).
    pub variants: Vec<Variant>,
}

/// A run a subject makes: the pipeline asks for each by what it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trial {
    /// The base under form `i`'s faults by meaning, in the failure's own world.
    Reproduce(usize),
    /// The base without faults, steered as the failure is.
    Control,
    /// The known-good program under the failure by meaning.
    Corrected,
    /// The candidate without faults: its `i`-th run of [`Checks::candidate_runs`].
    Candidate(usize),
    /// The base under the failure in world `k` ([`Worlds::Others`], `k > 0`).
    WorldBase(u32),
    /// The candidate under the failure in world `k`.
    World(u32),
    /// The candidate under [`Checks::variants`]`[i]`.
    Shifted(usize),
}

/// One run of the sweep, in the subject's fixed order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Swept {
    /// A run, labelled by where it crashed (or what it placed).
    Ran {
        /// Its crash point or fault, in words.
        label: String,
        /// The run.
        run: Run,
    },
    /// A crash point the candidate never reached: it says nothing.
    Unreached {
        /// The crash point, in words.
        label: String,
        /// The run's digest, when a run was made.
        digest: Option<String>,
    },
}

/// Which failures of the base without faults make the failure not fault-induced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlRule {
    /// Any: the failure was found by a hunt after crashes, so a base that fails at all without
    /// them cannot show the failure needs them (a program).
    AnyFailure,
    /// Only the failure's own: another one without faults is noted (a cluster bug, whose
    /// signature its finder fixed).
    SameFailure,
}

/// What is judged, base and candidate: it runs itself and tells what it saw; the pipeline
/// ([`judge`]) decides. Methods are called in step order; a subject may keep what a step
/// learnt (the failure found, the form chosen) for the later ones.
pub trait Subject {
    /// The certificate's name of each step.
    fn names(&self) -> Names;

    /// Which failures of the base without faults make it [`Verdict::NotFaultInduced`].
    fn control_rule(&self) -> ControlRule;

    /// [`Step::Find`]: the failure on the base.
    fn find(&mut self) -> Result<Found, NoEvidence>;

    /// [`Step::Minimize`]: the forms to try (a subject that does not minimize gives one).
    fn forms(&mut self) -> Forms;

    /// Judges form `form` from now on, and says what runs that takes.
    fn choose(&mut self, form: usize) -> Checks;

    /// Makes one run.
    fn run(&mut self, trial: Trial) -> Result<Run, NoEvidence>;

    /// How world `k` differs from the first, in words, for repeats that disagree.
    fn disagreement(&self, k: u32) -> String;

    /// [`Step::Sweep`]: runs the sweep in its fixed order, giving each run to `each` and
    /// stopping when it says so; what was swept in words, or why it could not be.
    fn sweep(&mut self, each: &mut dyn FnMut(Swept) -> ControlFlow<()>) -> Result<String, NoEvidence>;

    /// An empty certificate with this check's header (made after the steps: the header names
    /// the failure found).
    fn certificate(&self) -> Certificate;
}

/// A check's verdict and its sealed certificate.
#[derive(Debug, Clone)]
pub struct Judged {
    /// The verdict.
    pub verdict: Verdict,
    /// Every step, chained.
    pub certificate: Certificate,
}

/// What one run weighs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Weight {
    /// It held.
    Held,
    /// It failed: the verdict, and the failure.
    Fails(Verdict, FailureSignature),
    /// It gives no verdict, and why.
    NoVerdict(String),
}

/// How a candidate's run weighs against the failure `sig`: its own failure still reproduces,
/// another is a new one; no verdict is no verdict; fail-stops are not failures.
pub fn weigh(run: &Run, sig: &FailureSignature) -> Weight {
    match &run.end {
        End::Held => Weight::Held,
        End::Failed(f) => Weight::Fails(failing(f, sig), f.clone()),
        End::NoVerdict(why) | End::NotApplicable(why) => Weight::NoVerdict(why.clone()),
    }
}

/// The verdict of a candidate that failed with `failure`: the failure's own signature or another.
pub fn failing(failure: &FailureSignature, sig: &FailureSignature) -> Verdict {
    if failure.is_the_failure(sig) {
        Verdict::StillReproduces
    } else {
        Verdict::NewFailure
    }
}

/// The detail of a step when it is not run.
pub const NOT_REACHED: &str = "not reached: an earlier check decided the verdict";

/// One step's record, before it is chained.
#[derive(Debug, Clone)]
struct Record {
    step: Step,
    status: CheckStatus,
    detail: String,
    digests: Vec<String>,
}

/// The records so far and the candidate's timeline.
struct Book {
    names: Names,
    records: Vec<Record>,
    timeline: String,
}

impl Book {
    fn push(&mut self, step: Step, status: CheckStatus, detail: String, digests: Vec<String>) {
        if self.names.has(step) {
            self.records.push(Record { step, status, detail, digests });
        }
    }

    fn pass(&mut self, step: Step, detail: String, digests: Vec<String>) {
        self.push(step, CheckStatus::Passed, detail, digests);
    }

    fn incomplete(&mut self, step: Step, detail: String, digests: Vec<String>) -> Verdict {
        self.push(step, CheckStatus::Incomplete, detail, digests);
        Verdict::EvidenceIncomplete
    }

    fn no_evidence(&mut self, step: Step, e: NoEvidence, mut digests: Vec<String>) -> Verdict {
        digests.extend(e.digests);
        self.incomplete(step, e.why, digests)
    }

    fn failed(&mut self, step: Step, verdict: Verdict, detail: String, digests: Vec<String>) -> Verdict {
        self.push(step, CheckStatus::Failed, detail, digests);
        verdict
    }

    /// Weighs a candidate's run of `step` at `place`: `None` when it held (its fail-stops
    /// counted in `stops`), else the verdict, recorded.
    fn weigh(
        &mut self,
        step: Step,
        place: &str,
        run: &Run,
        sig: &FailureSignature,
        digests: &[String],
        stops: &mut usize,
    ) -> Option<Verdict> {
        match weigh(run, sig) {
            Weight::Held => {
                *stops += run.fail_stops.len();
                None
            }
            Weight::Fails(v, _) => {
                self.timeline = format!("{place}: {}", run.words());
                Some(self.failed(step, v, format!("{place}: the candidate fails: {}", run.words()), digests.to_vec()))
            }
            Weight::NoVerdict(why) => Some(self.incomplete(step, format!("{place}: {why}"), digests.to_vec())),
        }
    }
}

/// `detail`, with the fail-stops its runs saw.
fn with_stops(detail: String, stops: usize) -> String {
    if stops == 0 {
        return detail;
    }
    format!(
        "{detail} ({stops} stop(s) after an injected I/O error: fail-stops, restarted and judged after, not failures)"
    )
}

/// Runs every step of the check on `s` and decides: the verdict and the sealed certificate.
pub fn judge<S: Subject>(s: &mut S) -> Judged {
    let names = s.names();
    let mut book = Book { names, records: Vec::new(), timeline: String::new() };
    let verdict = steps(s, &mut book);
    let mut cert = s.certificate();
    for (step, name) in names.in_order() {
        match book.records.iter().find(|r| r.step == step) {
            Some(r) => cert.push(name, r.status, r.detail.clone(), r.digests.clone()),
            None => cert.push(name, CheckStatus::NotRun, NOT_REACHED.into(), vec![]),
        }
    }
    let verdict = earned(verdict, &cert);
    cert.seal(verdict, book.timeline);
    Judged { verdict, certificate: cert }
}

/// `verdict`, unless it is a pass the certificate's steps do not earn: a pass needs at least
/// one step, and every step executed and passed. Any other verdict stands.
pub fn earned(verdict: Verdict, cert: &Certificate) -> Verdict {
    let unearned = cert.checks.is_empty() || cert.checks.iter().any(|r| r.status != CheckStatus::Passed);
    if verdict == Verdict::FixedForThisCapsule && unearned {
        Verdict::EvidenceIncomplete
    } else {
        verdict
    }
}

fn steps<S: Subject>(s: &mut S, book: &mut Book) -> Verdict {
    // 1. The failure on the base.
    let found = match s.find() {
        Ok(f) => f,
        Err(e) => return book.no_evidence(Step::Find, e, vec![]),
    };
    let sig = found.signature.clone();
    match &found.run {
        Some(run) if !run.fails_as(&sig) => {
            let detail = format!("it does not reproduce: {}", run.words());
            return book.incomplete(Step::Find, detail, vec![run.digest.clone()]);
        }
        Some(run) => book.pass(Step::Find, found.detail, vec![run.digest.clone()]),
        None => book.pass(Step::Find, found.detail, vec![]),
    }
    // 2, 3. Its forms, smallest first: the first whose faults by meaning fail the base.
    let forms = s.forms();
    let mut tried = Vec::new();
    let mut tried_digests = Vec::new();
    let mut chosen = None;
    for (i, form) in forms.forms.iter().enumerate() {
        match s.run(Trial::Reproduce(i)) {
            Ok(run) if run.fails_as(&sig) => {
                chosen = Some((i, run));
                break;
            }
            Ok(run) => {
                tried_digests.push(run.digest.clone());
                tried.push(format!("{}: the base does not fail the same way: {}", form.what, run.words()));
            }
            Err(e) => {
                let how: Vec<String> = forms.notes.iter().chain(forms.forms.iter().map(|f| &f.how)).cloned().collect();
                book.pass(Step::Minimize, how.join("; "), vec![]);
                return book.no_evidence(Step::Reproduce, e, tried_digests);
            }
        }
    }
    let Some((i, run)) = chosen else {
        let why: Vec<String> = forms.notes.iter().chain(tried.iter()).cloned().collect();
        book.pass(Step::Minimize, why.join("; "), vec![]);
        let mut detail = tried.join("; ");
        if !forms.advice.is_empty() {
            detail = if detail.is_empty() { forms.advice.clone() } else { format!("{detail}. {}", forms.advice) };
        }
        if forms.forms.is_empty() {
            detail = format!("no form of the failure to reproduce. {detail}");
        }
        return book.incomplete(Step::Reproduce, detail, tried_digests);
    };
    let form = &forms.forms[i];
    let how: Vec<String> = forms.notes.iter().chain(tried.iter()).chain([&form.how]).cloned().collect();
    book.pass(Step::Minimize, how.join("; "), form.digests.clone());
    book.pass(
        Step::Reproduce,
        format!("{}: the base fails the same way: {}", form.what, run.words()),
        vec![run.digest],
    );
    let checks = s.choose(i);
    // 4. No faults: the base must hold.
    match s.run(Trial::Control) {
        Err(e) => return book.no_evidence(Step::Control, e, vec![]),
        Ok(run) => match &run.end {
            End::Failed(f) if f.is_the_failure(&sig) || s.control_rule() == ControlRule::AnyFailure => {
                let detail = format!("the base fails without any fault: {f}");
                return book.failed(Step::Control, Verdict::NotFaultInduced, detail, vec![run.digest]);
            }
            End::Failed(f) => {
                book.pass(Step::Control, format!("without faults the base fails only otherwise: {f}"), vec![run.digest])
            }
            End::NoVerdict(why) | End::NotApplicable(why) => {
                return book.incomplete(Step::Control, format!("without faults: {why}"), vec![run.digest]);
            }
            End::Held => book.pass(Step::Control, "the base holds without faults".into(), vec![run.digest]),
        },
    }
    // 5. A known-good program, when one is given: the failure must not fail it.
    if book.names.corrected.is_some() {
        match s.run(Trial::Corrected) {
            Err(e) => return book.no_evidence(Step::Corrected, e, vec![]),
            Ok(run) if run.end == End::Held => book.pass(Step::Corrected, run.words(), vec![run.digest]),
            Ok(run) => {
                let detail = format!("the failure by meaning does not hold on the corrected program: {}", run.words());
                return book.incomplete(Step::Corrected, detail, vec![run.digest]);
            }
        }
    }
    // 6. The candidate without faults.
    let mut digests = Vec::new();
    let mut stops = 0;
    for (i, label) in checks.candidate_runs.iter().enumerate() {
        let place = if label.is_empty() { "without faults".to_string() } else { format!("without faults, {label}") };
        match s.run(Trial::Candidate(i)) {
            Err(e) => return book.no_evidence(Step::CandidateRuns, e, digests),
            Ok(run) => {
                digests.push(run.digest.clone());
                if let Some(v) = book.weigh(Step::CandidateRuns, &place, &run, &sig, &digests, &mut stops) {
                    return v;
                }
            }
        }
    }
    book.pass(Step::CandidateRuns, "the candidate holds without faults".into(), digests);
    // 7. The failure by meaning on the candidate, in its worlds.
    let (held, first) = match worlds(s, book, &checks, &sig) {
        Ok(w) => w,
        Err(v) => return v,
    };
    // 8. The schedule shifted (a subject that has one).
    let mut shifted = None;
    if book.names.shifted.is_some() {
        let (mut ran, mut skipped, mut digests, mut stops) = (0usize, Vec::new(), Vec::new(), 0);
        for (i, v) in checks.variants.iter().enumerate() {
            if let Some(why) = &v.not_applicable {
                skipped.push(format!("{}: {why}", v.name));
                continue;
            }
            let place = format!("with {}", v.name);
            match s.run(Trial::Shifted(i)) {
                Ok(Run { end: End::NotApplicable(why), digest, .. }) => {
                    digests.push(digest);
                    skipped.push(format!("{}: {why}", v.name));
                    continue;
                }
                Err(e) => {
                    return book.no_evidence(
                        Step::Shifted,
                        NoEvidence { why: format!("{place}: {}", e.why), ..e },
                        digests,
                    )
                }
                Ok(run) => {
                    ran += 1;
                    digests.push(run.digest.clone());
                    if let Some(v) = book.weigh(Step::Shifted, &place, &run, &sig, &digests, &mut stops) {
                        return v;
                    }
                }
            }
        }
        let detail = if checks.variants.is_empty() {
            "no timed fault to shift".to_string()
        } else if skipped.is_empty() {
            format!("all {ran} variants held")
        } else {
            format!(
                "all {ran} variants held; {} variant(s) not applicable, not run: {}",
                skipped.len(),
                skipped.join("; ")
            )
        };
        book.pass(Step::Shifted, with_stops(detail, stops), digests);
        shifted = Some(ran);
    }
    // 9. The sweep: every run in the subject's order, the first that does not hold decides.
    let (mut digests, mut unreached, mut stops, mut runs) = (Vec::new(), Vec::new(), 0, 0usize);
    let mut decided = None;
    let swept = s.sweep(&mut |r| match r {
        Swept::Ran { label, run } => {
            runs += 1;
            digests.push(run.digest.clone());
            let place = format!("with {label}");
            match book.weigh(Step::Sweep, &place, &run, &sig, &digests, &mut stops) {
                None => ControlFlow::Continue(()),
                Some(v) => {
                    decided = Some(v);
                    ControlFlow::Break(())
                }
            }
        }
        Swept::Unreached { label, digest } => {
            digests.extend(digest);
            unreached.push(label);
            ControlFlow::Continue(())
        }
    });
    if let Some(v) = decided {
        return v;
    }
    match swept {
        Err(e) => return book.no_evidence(Step::Sweep, e, digests),
        Ok(_) if !unreached.is_empty() => {
            return book.incomplete(
                Step::Sweep,
                format!("crash points never reached: {}", unreached.join(", ")),
                digests,
            );
        }
        Ok(words) => book.pass(Step::Sweep, with_stops(words, stops), digests),
    }
    let start = if first.is_empty() { format!("the candidate held under {}", checks.faults) } else { first };
    let shifted = shifted.map(|n| format!(", {n} shifted schedule(s)")).unwrap_or_default();
    book.timeline = format!("{start} (in {held} world(s){shifted} and {runs} sweep run(s))");
    Verdict::FixedForThisCapsule
}

/// [`Step::Worlds`]: how many worlds held and the first one's words, or the verdict.
fn worlds<S: Subject>(
    s: &mut S,
    book: &mut Book,
    checks: &Checks,
    sig: &FailureSignature,
) -> Result<(u32, String), Verdict> {
    let (count, repeats) = match checks.worlds {
        Worlds::Repeats(n) => (n.max(1), true),
        Worlds::Others(n) => (n.max(1), false),
    };
    let (mut held, mut set_aside, mut digests, mut stops, mut runs) = (0u32, 0u32, Vec::new(), 0, Vec::new());
    for k in 0..count {
        let place = format!("world {}", k + 1);
        if k > 0 && !repeats {
            match s.run(Trial::WorldBase(k)) {
                Err(e) => {
                    let e = NoEvidence { why: format!("{place}: the base: {}", e.why), ..e };
                    return Err(book.no_evidence(Step::Worlds, e, digests));
                }
                Ok(run) if run.fails_as(sig) => {}
                Ok(_) => {
                    set_aside += 1;
                    continue;
                }
            }
        }
        let run = match s.run(Trial::World(k)) {
            Ok(run) => run,
            Err(e) => {
                let e = NoEvidence { why: format!("{place}: {}", e.why), ..e };
                return Err(book.no_evidence(Step::Worlds, e, digests));
            }
        };
        digests.push(run.digest.clone());
        if repeats {
            runs.push(run);
            continue;
        }
        if let Some(v) = book.weigh(Step::Worlds, &place, &run, sig, &digests, &mut stops) {
            return Err(v);
        }
        held += 1;
        runs.push(run);
    }
    if repeats {
        // Repeats must agree before any is weighed: a run that depends on where it ran gives
        // no verdict.
        if let Some(k) = runs.iter().position(|r| r.digest != runs[0].digest || r.end != runs[0].end) {
            let why = s.disagreement(k as u32);
            let detail = format!("the worlds disagree: {why}; the candidate is not deterministic here");
            return Err(book.incomplete(Step::Worlds, detail, digests));
        }
        for (k, run) in runs.iter().enumerate() {
            if let Some(v) = book.weigh(Step::Worlds, &format!("world {}", k + 1), run, sig, &digests, &mut stops) {
                return Err(v);
            }
            held += 1;
        }
    }
    let first = runs.first().map(|r| r.timeline.clone()).unwrap_or_default();
    let aside = if repeats {
        String::new()
    } else {
        format!(" where the base fails ({set_aside} world(s) where the base holds set aside)")
    };
    let what = if checks.faults.is_empty() { String::new() } else { format!(" under {}", checks.faults) };
    let detail = if first.is_empty() {
        format!("held in {held} world(s){aside}{what}")
    } else {
        format!("held in {held} world(s){aside}{what}: {first}")
    };
    book.pass(Step::Worlds, with_stops(detail, stops), digests);
    Ok((held, first))
}

#[cfg(test)]
mod tests;
