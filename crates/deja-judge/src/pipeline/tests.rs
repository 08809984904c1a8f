//! The verdict logic over a fake subject, without `/dev/kvm`: right patches, wrong patches
//! caught at every step that can catch them, a base that fails without faults, worlds that
//! disagree, missing evidence in each of its forms, fail-stops, harness errors and shifted
//! schedules. Each test checks the verdict and the steps recorded (status and words), and the
//! runs the pipeline asked for.

use super::*;

fn the_failure() -> FailureSignature {
    FailureSignature::ExitCode { code: 1, said: Some("LOST acknowledged write N".into()) }
}

fn another_failure() -> FailureSignature {
    FailureSignature::Assertion {
        kind: "always".into(),
        message: "\"the log is readable\"".into(),
        file: "src/main.rs".into(),
        line: 40,
    }
}

fn held(digest: &str) -> Run {
    Run { digest: digest.into(), end: End::Held, fail_stops: vec![], timeline: String::new() }
}

fn fails(digest: &str, f: FailureSignature) -> Run {
    Run { end: End::Failed(f), ..held(digest) }
}

fn no_verdict(digest: &str, why: &str) -> Run {
    Run { end: End::NoVerdict(why.into()), ..held(digest) }
}

fn sweep_run(label: &str, run: Run) -> Swept {
    Swept::Ran { label: label.into(), run }
}

/// A subject whose every run is written in advance: a run the pipeline asks for that the test
/// did not write panics, so a test also proves which runs were (not) made.
struct Fake {
    names: Names,
    rule: ControlRule,
    found: Result<Found, NoEvidence>,
    forms: Forms,
    checks: Checks,
    runs: Vec<(Trial, Result<Run, NoEvidence>)>,
    sweep: Vec<Swept>,
    sweep_end: Result<String, NoEvidence>,
    /// The runs made, in order.
    made: Vec<Trial>,
    /// The sweep's runs handed to the pipeline.
    swept: usize,
    chosen: Option<usize>,
}

const PROGRAM: Names = Names {
    find: "hunt on the base",
    minimize: None,
    reproduce: "reproduce the capsule on the base",
    control: "no-fault control on the base",
    corrected: None,
    candidate: "the candidate runs",
    worlds: "replay the capsule on the candidate",
    shifted: None,
    sweep: "sweep the candidate: crash points with their states, and I/O errors",
};

const CLUSTER: Names = Names {
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

impl Fake {
    /// A program's check whose candidate is the fix: a capsule given, three repeated worlds that
    /// agree, a sweep of three runs, all holding.
    fn program() -> Fake {
        let mut w = held("world");
        w.timeline = "request E1 → crash after durable write 3 → restart → recovered".into();
        Fake {
            names: PROGRAM,
            rule: ControlRule::AnyFailure,
            found: Ok(Found { signature: the_failure(), detail: "capsule c1 given".into(), run: None }),
            forms: Forms {
                forms: vec![Form { what: "the capsule by meaning".into(), how: String::new(), digests: vec![] }],
                ..Forms::default()
            },
            checks: Checks {
                faults: "crash after durable write 3".into(),
                candidate_runs: vec![String::new()],
                worlds: Worlds::Repeats(3),
                variants: vec![],
            },
            runs: vec![
                (Trial::Reproduce(0), Ok(fails("base-fails", the_failure()))),
                (Trial::Control, Ok(held("base-plain"))),
                (Trial::Candidate(0), Ok(held("cand-plain"))),
                (Trial::World(0), Ok(w.clone())),
                (Trial::World(1), Ok(w.clone())),
                (Trial::World(2), Ok(w)),
            ],
            sweep: vec![
                sweep_run("crash after durable write 1", held("s1")),
                sweep_run("crash before durable write 1", held("s2")),
                sweep_run("EIO on write #1 to /data/wal", held("s3")),
            ],
            sweep_end: Ok("all 3 runs held: 2 crash points over 1 durable writes with their crash states, and an \
                           error on each file operation"
                .into()),
            made: vec![],
            swept: 0,
            chosen: None,
        }
    }

    /// A cluster's check whose candidate is the fix: the bug replayed as found, minimized
    /// here, three worlds of which the third is set aside (the base holds there), three shifted
    /// schedules of which one cannot be applied, a sweep of two runs.
    fn cluster() -> Fake {
        Fake {
            names: CLUSTER,
            rule: ControlRule::SameFailure,
            found: Ok(Found {
                signature: the_failure(),
                detail: "reproduced: exit code 1".into(),
                run: Some(fails("bug", the_failure())),
            }),
            forms: Forms {
                forms: vec![
                    Form {
                        what: "2 fault(s) by meaning".into(),
                        how: "minimized here, as deja minimize does, in 9 runs: 2 of 7 faults kept".into(),
                        digests: vec!["min".into()],
                    },
                    Form {
                        what: "7 fault(s) by meaning".into(),
                        how: "judged as found, with all 7 faults".into(),
                        digests: vec![],
                    },
                ],
                notes: vec![],
                advice: "`deja replay bug.json` shows it as found".into(),
            },
            checks: Checks {
                faults: "kill server at 30 ms; restart server at 80 ms".into(),
                candidate_runs: vec![String::new()],
                worlds: Worlds::Others(3),
                variants: vec![
                    Variant { name: "every fault -500 ms".into(), not_applicable: None },
                    Variant {
                        name: "\"restart server\" -300 ms".into(),
                        not_applicable: Some("it would restart a node that is up".into()),
                    },
                    Variant { name: "every fault +500 ms".into(), not_applicable: None },
                ],
            },
            runs: vec![
                (Trial::Reproduce(0), Ok(fails("min-base", the_failure()))),
                (Trial::Control, Ok(held("base-plain"))),
                (Trial::Candidate(0), Ok(held("cand-plain"))),
                (Trial::World(0), Ok(held("w0"))),
                (Trial::WorldBase(1), Ok(fails("b1", the_failure()))),
                (Trial::World(1), Ok(held("w1"))),
                (Trial::WorldBase(2), Ok(held("b2"))),
                (Trial::Shifted(0), Ok(held("v0"))),
                (Trial::Shifted(2), Ok(held("v2"))),
            ],
            sweep: vec![
                sweep_run("under the timed faults alone", held("t")),
                sweep_run("crash server before durable op #1 on /data/wal", held("c1")),
            ],
            sweep_end: Ok("all 2 runs held: 2 crash points, before and after every one of the 1 durable operations \
                           that made something durable, with their crash states"
                .into()),
            made: vec![],
            swept: 0,
            chosen: None,
        }
    }

    fn set(&mut self, trial: Trial, run: Result<Run, NoEvidence>) -> &mut Fake {
        match self.runs.iter_mut().find(|(t, _)| *t == trial) {
            Some(slot) => slot.1 = run,
            None => self.runs.push((trial, run)),
        }
        self
    }
}

impl Subject for Fake {
    fn names(&self) -> Names {
        self.names
    }

    fn control_rule(&self) -> ControlRule {
        self.rule
    }

    fn find(&mut self) -> Result<Found, NoEvidence> {
        self.found.clone()
    }

    fn forms(&mut self) -> Forms {
        self.forms.clone()
    }

    fn choose(&mut self, form: usize) -> Checks {
        self.chosen = Some(form);
        self.checks.clone()
    }

    fn run(&mut self, trial: Trial) -> Result<Run, NoEvidence> {
        self.made.push(trial);
        match self.runs.iter().find(|(t, _)| *t == trial) {
            Some((_, r)) => r.clone(),
            None => panic!("the pipeline asked for a run the check should not make: {trial:?}"),
        }
    }

    fn disagreement(&self, k: u32) -> String {
        format!("world {} (host core {k}) differs from world 1 (host core 0) in life 0's syscall 12", k + 1)
    }

    fn sweep(&mut self, each: &mut dyn FnMut(Swept) -> ControlFlow<()>) -> Result<String, NoEvidence> {
        for r in self.sweep.clone() {
            self.swept += 1;
            if each(r).is_break() {
                return Ok(String::new());
            }
        }
        self.sweep_end.clone()
    }

    fn certificate(&self) -> Certificate {
        Certificate::new("capsule-id", "base-blake3", "candidate-blake3")
    }
}

/// Each step of a certificate: its name and status.
fn statuses(j: &Judged) -> Vec<(String, CheckStatus)> {
    j.certificate.checks.iter().map(|r| (r.name.clone(), r.status)).collect()
}

/// The record of the step named `name`.
fn step<'a>(j: &'a Judged, name: &str) -> &'a crate::certificate::CheckRecord {
    j.certificate.checks.iter().find(|r| r.name == name).unwrap_or_else(|| panic!("no step {name}: {:?}", statuses(j)))
}

/// The statuses in order: `passed` steps, then the one that decided, then steps not run.
fn expect(j: &Judged, names: &Names, passed: usize, deciding: Option<CheckStatus>) {
    use CheckStatus::*;
    let want: Vec<(String, CheckStatus)> = names
        .in_order()
        .iter()
        .enumerate()
        .map(|(i, (_, n))| {
            let s = if i < passed {
                Passed
            } else if i == passed {
                deciding.unwrap_or(Passed)
            } else {
                NotRun
            };
            (n.to_string(), s)
        })
        .collect();
    assert_eq!(statuses(j), want);
    for r in j.certificate.checks.iter().filter(|r| r.status == NotRun) {
        assert_eq!(r.detail, NOT_REACHED);
    }
    j.certificate.verify().expect("every certificate the pipeline seals verifies");
    assert_eq!(j.certificate.verdict, j.verdict);
    assert_eq!(j.certificate.exit_code, j.verdict.exit_code());
}

#[test]
fn the_fix_of_a_program_passes_every_step_in_order() {
    let mut f = Fake::program();
    let j = judge(&mut f);
    assert_eq!(j.verdict, Verdict::FixedForThisCapsule);
    expect(&j, &PROGRAM, 6, None);
    assert_eq!(j.certificate.checks.len(), 6, "a program has no minimize, corrected or shifted step");
    use Trial::*;
    assert_eq!(f.made, [Reproduce(0), Control, Candidate(0), World(0), World(1), World(2)]);
    assert_eq!(f.swept, 3, "the whole sweep ran");
    let worlds = step(&j, PROGRAM.worlds);
    assert!(
        worlds.detail.starts_with("held in 3 world(s) under crash after durable write 3: request E1"),
        "{}",
        worlds.detail
    );
    assert_eq!(worlds.digests, ["world", "world", "world"]);
    assert_eq!(step(&j, PROGRAM.sweep).digests, ["s1", "s2", "s3"]);
    assert!(step(&j, PROGRAM.sweep).detail.contains("crash points over"));
    assert!(
        j.certificate.timeline.starts_with("request E1 → crash after durable write 3"),
        "{}",
        j.certificate.timeline
    );
    assert!(j.certificate.timeline.contains("in 3 world(s) and 3 sweep run(s)"), "{}", j.certificate.timeline);
}

#[test]
fn the_fix_of_a_cluster_passes_every_step_and_sets_aside_a_world_where_the_base_holds() {
    let mut f = Fake::cluster();
    let j = judge(&mut f);
    assert_eq!(j.verdict, Verdict::FixedForThisCapsule);
    expect(&j, &CLUSTER, 8, None);
    use Trial::*;
    // World 3's base holds: the candidate is not run there; the variant that cannot be
    // applied is named, not run.
    assert_eq!(
        f.made,
        [Reproduce(0), Control, Candidate(0), World(0), WorldBase(1), World(1), WorldBase(2), Shifted(0), Shifted(2)]
    );
    assert_eq!(f.chosen, Some(0), "the smallest form is judged");
    let min = step(&j, "minimize the bug");
    assert_eq!(min.detail, "minimized here, as deja minimize does, in 9 runs: 2 of 7 faults kept");
    assert_eq!(min.digests, ["min"]);
    let worlds = step(&j, CLUSTER.worlds);
    assert!(
        worlds
            .detail
            .starts_with("held in 2 world(s) where the base fails (1 world(s) where the base holds set aside)"),
        "{}",
        worlds.detail
    );
    let shifted = step(&j, CLUSTER.shifted.unwrap());
    assert!(
        shifted.detail.starts_with("all 2 variants held; 1 variant(s) not applicable, not run:"),
        "{}",
        shifted.detail
    );
    assert!(shifted.detail.contains("restart a node that is up"), "{}", shifted.detail);
    assert!(step(&j, CLUSTER.sweep).detail.contains("crash points, before and after"));
    assert!(
        j.certificate.timeline.starts_with("the candidate held under kill server at 30 ms"),
        "{}",
        j.certificate.timeline
    );
}

/// Where a wrong patch can be caught, in each kind of check: the trial that fails (or the
/// sweep's run at that index), the step that must record the failure, and how many steps
/// passed before it.
#[derive(Debug, Clone, Copy)]
enum Place {
    Trial(Trial),
    SweepRun(usize),
}

fn catch(mut f: Fake, place: Place, failure: FailureSignature) -> (Judged, Fake) {
    let failing = fails("the-failing-run", failure);
    match (place, f.checks.worlds) {
        // Repeats must agree: a wrong patch that fails there fails in every world.
        (Place::Trial(Trial::World(_)), Worlds::Repeats(n)) => {
            for k in 0..n {
                f.set(Trial::World(k), Ok(failing.clone()));
            }
        }
        (Place::Trial(t), _) => {
            f.set(t, Ok(failing));
        }
        (Place::SweepRun(i), _) => {
            let Swept::Ran { label, .. } = f.sweep[i].clone() else { unreachable!("a run") };
            f.sweep[i] = sweep_run(&label, failing);
        }
    }
    let j = judge(&mut f);
    (j, f)
}

#[test]
fn a_wrong_patch_is_caught_at_every_step_that_can_catch_it_same_failure_or_another() {
    use Trial::*;
    let program = [
        (Place::Trial(Candidate(0)), PROGRAM.candidate, 3),
        (Place::Trial(World(0)), PROGRAM.worlds, 4),
        (Place::SweepRun(0), PROGRAM.sweep, 5),
        (Place::SweepRun(2), PROGRAM.sweep, 5),
    ];
    let cluster = [
        (Place::Trial(Candidate(0)), CLUSTER.candidate, 4),
        (Place::Trial(World(0)), CLUSTER.worlds, 5),
        (Place::Trial(World(1)), CLUSTER.worlds, 5),
        (Place::Trial(Shifted(0)), CLUSTER.shifted.unwrap(), 6),
        (Place::Trial(Shifted(2)), CLUSTER.shifted.unwrap(), 6),
        (Place::SweepRun(0), CLUSTER.sweep, 7),
        (Place::SweepRun(1), CLUSTER.sweep, 7),
    ];
    let cases = program
        .iter()
        .map(|c| (Fake::program as fn() -> Fake, PROGRAM, *c))
        .chain(cluster.iter().map(|c| (Fake::cluster as fn() -> Fake, CLUSTER, *c)));
    for (make, names, (place, name, passed)) in cases {
        for (failure, verdict) in [(the_failure(), Verdict::StillReproduces), (another_failure(), Verdict::NewFailure)]
        {
            let (j, f) = catch(make(), place, failure.clone());
            assert_eq!(j.verdict, verdict, "{place:?} with {failure}");
            expect(&j, &names, passed, Some(CheckStatus::Failed));
            let r = step(&j, name);
            assert!(
                r.detail.contains("the candidate fails: ") && r.detail.contains(&failure.to_string()),
                "{place:?}: {}",
                r.detail
            );
            assert!(r.digests.contains(&"the-failing-run".to_string()), "{place:?}: {:?}", r.digests);
            assert!(j.certificate.timeline.contains(&failure.to_string()), "{place:?}: {}", j.certificate.timeline);
            // The first failure decides: nothing after it runs.
            match place {
                Place::SweepRun(i) => assert_eq!(f.swept, i + 1, "{place:?}: the sweep stops at its first failure"),
                Place::Trial(t) => {
                    assert_eq!(f.swept, 0, "{place:?}: no sweep after a failure");
                    if !matches!(t, World(_)) || matches!(f.checks.worlds, Worlds::Others(_)) {
                        assert_eq!(f.made.last(), Some(&t), "{place:?}: no run after the failure: {:?}", f.made);
                    }
                }
            }
        }
    }
}

#[test]
fn a_failure_in_any_single_repeated_world_is_a_disagreement_never_a_verdict() {
    for k in 0..3 {
        for bad in [fails("other", the_failure()), held("other-digest"), no_verdict("world", "ran out of its budget")] {
            let mut f = Fake::program();
            f.set(Trial::World(k), Ok(bad.clone()));
            let j = judge(&mut f);
            assert_eq!(j.verdict, Verdict::EvidenceIncomplete, "world {k}: {bad:?}");
            expect(&j, &PROGRAM, 4, Some(CheckStatus::Incomplete));
            let r = step(&j, PROGRAM.worlds);
            // The first world is the reference: when it is the odd one, the second differs from it.
            let differs = if k == 0 { 2 } else { k + 1 };
            assert!(r.detail.starts_with("the worlds disagree: world "), "{}", r.detail);
            assert!(r.detail.contains(&format!("world {differs} (host core")), "{}", r.detail);
            assert!(r.detail.ends_with("the candidate is not deterministic here"), "{}", r.detail);
            assert_eq!(f.swept, 0);
        }
    }
}

#[test]
fn a_base_that_fails_without_faults_is_not_fault_induced() {
    // The failure itself, for either kind of subject.
    for (mut f, names) in [(Fake::program(), PROGRAM), (Fake::cluster(), CLUSTER)] {
        f.set(Trial::Control, Ok(fails("plain", the_failure())));
        let j = judge(&mut f);
        assert_eq!(j.verdict, Verdict::NotFaultInduced);
        let passed = names.in_order().iter().position(|(s, _)| *s == Step::Control).unwrap();
        expect(&j, &names, passed, Some(CheckStatus::Failed));
        assert!(step(&j, names.control).detail.starts_with("the base fails without any fault: "));
        assert!(!f.made.contains(&Trial::Candidate(0)), "the candidate is not judged");
    }
    // Another failure: not fault-induced for a program's hunt, noted for a cluster bug.
    let mut f = Fake::program();
    f.set(Trial::Control, Ok(fails("plain", another_failure())));
    assert_eq!(judge(&mut f).verdict, Verdict::NotFaultInduced);
    let mut f = Fake::cluster();
    f.set(Trial::Control, Ok(fails("plain", another_failure())));
    let j = judge(&mut f);
    assert_eq!(j.verdict, Verdict::FixedForThisCapsule);
    assert!(step(&j, CLUSTER.control).detail.starts_with("without faults the base fails only otherwise: "));
}

#[test]
fn no_evidence_is_never_a_pass() {
    use Trial::*;
    let none = |why: &str| Err(NoEvidence::new(why));
    type Edit = Box<dyn Fn(&mut Fake)>;
    // (what is missing, the edit, the step that is incomplete, the words it must say)
    let cases: Vec<(&str, Edit, &str, &str)> = vec![
        (
            "the hunt found nothing",
            Box::new(|f| f.found = Err(NoEvidence::new("no failure found on the base in 9 runs"))),
            PROGRAM.find,
            "no failure found on the base in 9 runs",
        ),
        (
            "the capsule does not reproduce on the base",
            Box::new(|f| {
                f.set(Reproduce(0), Ok(held("b")));
            }),
            PROGRAM.reproduce,
            "the capsule by meaning: the base does not fail the same way: it holds",
        ),
        (
            "it reproduces otherwise",
            Box::new(|f| {
                f.set(Reproduce(0), Ok(fails("b", another_failure())));
            }),
            PROGRAM.reproduce,
            ": the base does not fail the same way: assertion always",
        ),
        (
            "the trigger does not occur on the base",
            Box::new(move |f| {
                f.set(Reproduce(0), none("the capsule's trigger does not occur on the base"));
            }),
            PROGRAM.reproduce,
            "the capsule's trigger does not occur on the base",
        ),
        (
            "the control ran out of its budget",
            Box::new(|f| {
                f.set(Control, Ok(no_verdict("c", "the run ran out of its time budget")));
            }),
            PROGRAM.control,
            "without faults: the run ran out of its time budget",
        ),
        (
            "the candidate cannot be read",
            Box::new(move |f| {
                f.set(Candidate(0), none("the candidate cannot be read: no such file"));
            }),
            PROGRAM.candidate,
            "the candidate cannot be read: no such file",
        ),
        (
            "the candidate dies at start-up",
            Box::new(|f| {
                f.set(Candidate(0), Ok(no_verdict("c", "the candidate crashes at start-up")));
            }),
            PROGRAM.candidate,
            "without faults: the candidate crashes at start-up",
        ),
        (
            "the trigger does not occur on the candidate",
            Box::new(move |f| {
                f.set(World(0), none("the capsule's trigger does not occur on the candidate"));
            }),
            PROGRAM.worlds,
            "world 1: the capsule's trigger does not occur on the candidate",
        ),
        (
            "the worlds all time out",
            Box::new(|f| {
                for k in 0..3 {
                    f.set(World(k), Ok(no_verdict("w", "ran out of its time budget with client still running")));
                }
            }),
            PROGRAM.worlds,
            "world 1: ran out of its time budget with client still running",
        ),
        (
            "too many durable writes to sweep",
            Box::new(|f| {
                f.sweep_end = Err(NoEvidence::new("900 durable writes: more than the sweep's 500 crash points"))
            }),
            PROGRAM.sweep,
            "900 durable writes: more than the sweep's 500 crash points",
        ),
        (
            "a crash point never reached",
            Box::new(|f| {
                f.sweep.insert(1, Swept::Unreached { label: "crash before durable write 7".into(), digest: None })
            }),
            PROGRAM.sweep,
            "crash points never reached: crash before durable write 7",
        ),
        (
            "a sweep run that lost track of its fault",
            Box::new(|f| f.sweep[2] = sweep_run("crash at exit", no_verdict("s", "the replay lost track"))),
            PROGRAM.sweep,
            "with crash at exit: the replay lost track",
        ),
    ];
    for (what, edit, name, words) in cases {
        let mut f = Fake::program();
        edit(&mut f);
        let j = judge(&mut f);
        assert_eq!(j.verdict, Verdict::EvidenceIncomplete, "{what}");
        let passed = PROGRAM.in_order().iter().position(|(_, n)| *n == name).unwrap();
        expect(&j, &PROGRAM, passed, Some(CheckStatus::Incomplete));
        let r = step(&j, name);
        assert!(r.detail.contains(words), "{what}: {}", r.detail);
        assert_eq!(j.certificate.exit_code, 3, "{what}");
    }
}

#[test]
fn a_cluster_with_missing_evidence_is_incomplete_at_the_step_that_missed_it() {
    use Trial::*;
    // The bug as found does not fail the base again.
    let mut f = Fake::cluster();
    f.found = Ok(Found { run: Some(held("bug")), ..f.found.clone().unwrap() });
    let j = judge(&mut f);
    assert_eq!(j.verdict, Verdict::EvidenceIncomplete);
    expect(&j, &CLUSTER, 0, Some(CheckStatus::Incomplete));
    assert_eq!(step(&j, CLUSTER.find).detail, "it does not reproduce: it holds");
    assert!(f.made.is_empty());
    // Neither form's faults fail the base: the advice is given, nothing is judged.
    let mut f = Fake::cluster();
    f.set(Reproduce(0), Ok(held("r0"))).set(Reproduce(1), Ok(fails("r1", another_failure())));
    let j = judge(&mut f);
    assert_eq!(j.verdict, Verdict::EvidenceIncomplete);
    expect(&j, &CLUSTER, 2, Some(CheckStatus::Incomplete));
    let r = step(&j, CLUSTER.reproduce);
    assert!(
        r.detail.starts_with("2 fault(s) by meaning: the base does not fail the same way: it holds; 7 fault(s)"),
        "{}",
        r.detail
    );
    assert!(r.detail.ends_with("`deja replay bug.json` shows it as found"), "{}", r.detail);
    assert_eq!(f.chosen, None);
    // A world's base cannot run.
    let mut f = Fake::cluster();
    f.set(WorldBase(1), Err(NoEvidence::new("the base cannot run: no VM")));
    let j = judge(&mut f);
    assert_eq!(j.verdict, Verdict::EvidenceIncomplete);
    expect(&j, &CLUSTER, 5, Some(CheckStatus::Incomplete));
    assert_eq!(step(&j, CLUSTER.worlds).detail, "world 2: the base: the base cannot run: no VM");
    // A shifted schedule whose fault never came.
    let mut f = Fake::cluster();
    f.set(Shifted(2), Ok(no_verdict("v2", "the replay lost track: the run ended before its fault \"kill\" came")));
    let j = judge(&mut f);
    assert_eq!(j.verdict, Verdict::EvidenceIncomplete);
    expect(&j, &CLUSTER, 6, Some(CheckStatus::Incomplete));
    assert!(step(&j, CLUSTER.shifted.unwrap()).detail.starts_with("with every fault +500 ms: the replay lost track"));
}

#[test]
fn the_smallest_form_that_does_not_fail_again_gives_way_to_the_bug_as_found() {
    let mut f = Fake::cluster();
    f.set(Trial::Reproduce(0), Ok(held("r0"))).set(Trial::Reproduce(1), Ok(fails("r1", the_failure())));
    let j = judge(&mut f);
    assert_eq!(j.verdict, Verdict::FixedForThisCapsule);
    assert_eq!(f.chosen, Some(1), "the form as found is judged");
    let min = step(&j, "minimize the bug");
    assert!(
        min.detail.starts_with("2 fault(s) by meaning: the base does not fail the same way: it holds; judged as found"),
        "{}",
        min.detail
    );
    assert_eq!(step(&j, CLUSTER.reproduce).digests, ["r1"]);
    assert!(step(&j, CLUSTER.reproduce).detail.starts_with("7 fault(s) by meaning: the base fails the same way"));
}

#[test]
fn a_fail_stop_under_an_injected_error_is_never_a_failure_but_a_failure_after_it_is() {
    let stop = "status 2 after eio on write #N to /data/wal".to_string();
    // The fix stops at every error the sweep places: fail-stops, counted, and the fix passes.
    let mut f = Fake::program();
    for s in f.sweep.iter_mut() {
        if let Swept::Ran { run, .. } = s {
            run.fail_stops = vec![stop.clone()];
        }
    }
    let j = judge(&mut f);
    assert_eq!(j.verdict, Verdict::FixedForThisCapsule);
    expect(&j, &PROGRAM, 6, None);
    let sweep = step(&j, PROGRAM.sweep);
    assert!(
        sweep.detail.contains("an error on each file operation (3 stop(s) after an injected I/O error: fail-stops"),
        "{}",
        sweep.detail
    );
    // A stop, then the restarted program loses the write: that is the failure.
    let mut f = Fake::program();
    let mut lost = fails("lost", the_failure());
    lost.fail_stops = vec![stop];
    f.sweep[2] = sweep_run("EIO on write #1 to /data/wal", lost);
    let j = judge(&mut f);
    assert_eq!(j.verdict, Verdict::StillReproduces);
    expect(&j, &PROGRAM, 5, Some(CheckStatus::Failed));
}

#[test]
fn a_harness_error_is_never_a_failure_and_never_a_pass() {
    fn error<T>() -> Result<T, NoEvidence> {
        Err(NoEvidence { why: "the VM could not be made: KVM_CREATE_VM: EBUSY".into(), digests: vec!["d".into()] })
    }
    for (make, names) in [(Fake::program as fn() -> Fake, PROGRAM), (Fake::cluster as fn() -> Fake, CLUSTER)] {
        let trials: Vec<Trial> = make().runs.iter().map(|(t, _)| *t).collect();
        for t in trials {
            let mut f = make();
            f.set(t, error());
            let j = judge(&mut f);
            assert_eq!(j.verdict, Verdict::EvidenceIncomplete, "{t:?}");
            let r =
                j.certificate.checks.iter().find(|r| r.status == CheckStatus::Incomplete).expect("an incomplete step");
            assert!(r.detail.contains("the VM could not be made"), "{t:?}: {}", r.detail);
            assert!(r.digests.contains(&"d".to_string()), "{t:?}: the runs made on the way are kept");
            assert!(j.certificate.checks.iter().all(|r| r.status != CheckStatus::Failed), "{t:?}");
            j.certificate.verify().unwrap();
        }
        // In the sweep, after runs that held.
        let mut f = make();
        f.sweep_end = error();
        let j = judge(&mut f);
        assert_eq!(j.verdict, Verdict::EvidenceIncomplete);
        let passed = names.in_order().len() - 1;
        expect(&j, &names, passed, Some(CheckStatus::Incomplete));
        // A failure the sweep saw before its harness broke still decides: it was seen.
        let mut f = make();
        let Swept::Ran { label, .. } = f.sweep[0].clone() else { unreachable!() };
        f.sweep[0] = sweep_run(&label, fails("s", the_failure()));
        f.sweep_end = error();
        assert_eq!(judge(&mut f).verdict, Verdict::StillReproduces);
    }
}

#[test]
fn shifted_schedules_expose_a_failure_the_worlds_missed() {
    // The worlds hold; moving the kill and its restart 500 ms later loses the write.
    let mut f = Fake::cluster();
    f.set(Trial::Shifted(2), Ok(fails("late", the_failure())));
    let j = judge(&mut f);
    assert_eq!(j.verdict, Verdict::StillReproduces);
    expect(&j, &CLUSTER, 6, Some(CheckStatus::Failed));
    let r = step(&j, CLUSTER.shifted.unwrap());
    assert_eq!(r.detail, format!("with every fault +500 ms: the candidate fails: {}", the_failure()));
    assert_eq!(r.digests, ["v0", "late"]);
    assert!(!f.made.contains(&Trial::Shifted(1)), "the variant that cannot be applied is not run");
    assert_eq!(f.swept, 0);
    assert!(j.certificate.timeline.starts_with("with every fault +500 ms: "), "{}", j.certificate.timeline);
}

#[test]
fn a_shifted_variant_whose_fault_fell_in_the_quiet_period_is_set_aside_and_named_elsewhere_it_gives_no_verdict() {
    // Moved 500 ms later, the partition falls in the test template's quiet period: that run
    // tested another schedule. It is named and set aside; the other variant still decides.
    let quiet = "a scripted fault fell in the test template's quiet period: partition at 1570 ms: the quiet period";
    let mut f = Fake::cluster();
    f.set(Trial::Shifted(2), Ok(Run { end: End::NotApplicable(quiet.into()), ..held("late") }));
    let j = judge(&mut f);
    assert_eq!(j.verdict, Verdict::FixedForThisCapsule);
    let r = step(&j, CLUSTER.shifted.unwrap());
    assert!(r.detail.starts_with("all 1 variants held; 2 variant(s) not applicable, not run: "), "{}", r.detail);
    assert!(r.detail.ends_with(&format!("every fault +500 ms: {quiet}")), "{}", r.detail);
    assert_eq!(r.digests, ["v0", "late"]);
    // The same in the worlds (the candidate's run) or the control is no verdict.
    let mut f = Fake::cluster();
    f.set(Trial::World(1), Ok(Run { end: End::NotApplicable(quiet.into()), ..held("w1") }));
    let j = judge(&mut f);
    assert_eq!(j.verdict, Verdict::EvidenceIncomplete);
    assert!(step(&j, CLUSTER.worlds).detail.contains(quiet), "{}", step(&j, CLUSTER.worlds).detail);
    // A variant that fails while one of its faults fell in the quiet period still fails.
    let mut f = Fake::cluster();
    f.set(Trial::Shifted(2), Ok(fails("late", the_failure())));
    assert_eq!(judge(&mut f).verdict, Verdict::StillReproduces);
}

#[test]
fn the_corrected_program_must_hold_the_failure() {
    let names = Names { corrected: Some("the capsule holds on the corrected program"), ..PROGRAM };
    let mut f = Fake::program();
    f.names = names;
    f.set(Trial::Corrected, Ok(held("good")));
    let j = judge(&mut f);
    assert_eq!(j.verdict, Verdict::FixedForThisCapsule);
    expect(&j, &names, 7, None);
    // The failure fails the known-good program too: the capsule is suspect, the candidate not
    // judged.
    let mut f = Fake::program();
    f.names = names;
    f.set(Trial::Corrected, Ok(fails("good", the_failure())));
    let j = judge(&mut f);
    assert_eq!(j.verdict, Verdict::EvidenceIncomplete);
    expect(&j, &names, 3, Some(CheckStatus::Incomplete));
    assert!(!f.made.contains(&Trial::Candidate(0)));
}

#[test]
fn a_pass_is_earned_only_by_every_step_executed_and_passed() {
    use CheckStatus::*;
    let cert = |statuses: &[CheckStatus]| {
        let mut c = Certificate::new("c", "b", "k");
        for (i, s) in statuses.iter().enumerate() {
            c.push(&format!("step {i}"), *s, String::new(), vec![]);
        }
        c
    };
    let fixed = Verdict::FixedForThisCapsule;
    assert_eq!(earned(fixed, &cert(&[Passed, Passed])), fixed);
    for unearned in [&[][..], &[Passed, NotRun], &[Incomplete, Passed], &[Passed, Failed]] {
        assert_eq!(earned(fixed, &cert(unearned)), Verdict::EvidenceIncomplete, "{unearned:?}");
    }
    for v in [Verdict::StillReproduces, Verdict::NewFailure, Verdict::NotFaultInduced, Verdict::EvidenceIncomplete] {
        assert_eq!(earned(v, &cert(&[Passed, Failed, NotRun])), v, "{v}: a verdict that is not a pass stands");
    }
    // Every certificate the pipeline seals as a pass has each of the subject's steps passed.
    for (mut f, names) in [(Fake::program(), PROGRAM), (Fake::cluster(), CLUSTER)] {
        let j = judge(&mut f);
        assert_eq!(j.verdict, fixed);
        assert_eq!(j.certificate.checks.len(), names.in_order().len());
        assert!(j.certificate.checks.iter().all(|r| r.status == Passed));
    }
}
