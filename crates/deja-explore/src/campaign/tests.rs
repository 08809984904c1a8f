//! The campaign loop's pure parts, without `/dev/kvm`: picking by weight, energies, the
//! decision mutations and the seed spaces of shards.

use super::books::stream_seed;
use super::*;

fn rng(seed: u64) -> ChaCha20Rng {
    ChaCha20Rng::seed_from_u64(seed)
}

/// A decision of `options` that chose `choice`, changeable by the modes its flags say.
fn d(options: u64, choice: u64, random: bool, fault: bool, structural: bool) -> Decision {
    Decision { options, choice, random, fault, structural, cut: false }
}

/// A corpus entry of `decisions`, focused at `focus`.
fn entry(decisions: Vec<Decision>, focus: Option<u64>) -> Entry<()> {
    entry_of((), decisions, focus)
}

/// A corpus entry of `input` and `decisions`, focused at `focus`.
fn entry_of<I>(input: I, decisions: Vec<Decision>, focus: Option<u64>) -> Entry<I> {
    Entry {
        input,
        new: 1,
        picks: 0,
        decisions,
        focus,
        features: Vec::new(),
        found_round: 0,
        durable_writes: 0,
        io_ops: Vec::new(),
        pending_at_crash: None,
        nodes: Vec::new(),
    }
}

/// Twenty decisions: even ones random, odd ones faults, every fifth structural, two fixed.
fn mixed() -> Vec<Decision> {
    (0..20u64)
        .map(|i| match i {
            3 | 12 => d(1, 0, i % 2 == 0, i % 2 == 1, false),
            _ => d(2 + i, i % (2 + i), i % 2 == 0, i % 2 == 1, i % 5 == 0),
        })
        .collect()
}

#[test]
fn weighted_picks_follow_the_weights_and_never_take_a_weightless_entry() {
    let weights = [1u64, 3, 0, 6];
    let mut r = rng(1);
    let mut seen = [0u64; 4];
    for _ in 0..20_000 {
        seen[pick_weighted(&mut r, &weights)] += 1;
    }
    assert_eq!(seen[2], 0, "an entry of weight 0 was picked");
    for (i, w) in weights.iter().enumerate().filter(|(_, w)| **w > 0) {
        let expected = 20_000.0 * *w as f64 / 10.0;
        let got = seen[i] as f64;
        assert!((got - expected).abs() < expected * 0.1, "entry {i}: {got} picks, about {expected} expected");
    }
    assert_eq!(pick_weighted(&mut r, &[5]), 0);
}

#[test]
fn energy_favours_rare_behaviour_and_what_was_new_and_decays_with_picks() {
    let hits: BTreeMap<u64, u64> = [(1, 1), (2, 1000)].into_iter().collect();
    let rare = energy(&[1], &hits, 0, 0);
    let common = energy(&[2], &hits, 0, 0);
    assert!(rare > common, "a behaviour seen once ({rare}) outweighs one seen 1,000 times ({common})");
    assert!(energy(&[2], &hits, 3, 0) > common, "what an entry brought counts");
    assert!(energy(&[1], &hits, 0, 4) < rare, "picks lower the energy");
    assert!(energy(&[], &hits, 0, 1_000) >= 1, "every entry keeps a chance");
}

#[test]
fn decision_mutations_touch_only_what_the_mode_allows_after_the_fork_point() {
    let parent = entry(mixed(), Some(11));
    let first = 2;
    for mode in [Mode::Faults, Mode::Random, Mode::Both] {
        for seed in 0..500 {
            let (mut overrides, mut reseed) = (BTreeMap::new(), None);
            let changed =
                mutate_decisions(&mut rng(seed), Seeds::new(None), (&mut overrides, &mut reseed), &parent, first, mode);
            assert!(changed, "{mode:?} seed {seed}: there was something to change");
            if reseed.is_some() {
                // A tail cut: the parent's choices up to the cut, nothing after it.
                let cut = overrides.keys().next_back().map_or(first, |k| k + 1);
                assert!(overrides.keys().copied().eq(first..cut), "{mode:?} seed {seed}: {overrides:?}");
                for (i, c) in &overrides {
                    assert_eq!(*c, parent.decisions[*i as usize].choice);
                }
                continue;
            }
            assert!((1..=3).contains(&overrides.len()), "{mode:?} seed {seed}: {} point mutations", overrides.len());
            for (&i, &c) in &overrides {
                let dec = parent.decisions[i as usize];
                assert!(i >= first, "{mode:?} seed {seed}: decision {i} is before the fork point");
                assert_ne!(dec.options, 1, "{mode:?} seed {seed}: decision {i} has one option");
                assert!(c < dec.options, "{mode:?} seed {seed}: choice {c} of {}", dec.options);
                assert!((mode.faults() && dec.fault) || (mode.random() && dec.random), "{mode:?}: {i} {dec:?}");
            }
        }
    }
}

#[test]
fn tail_cuts_need_every_later_decision_changeable_and_fall_at_the_focus_most() {
    // Only fault decisions after the fork point: in faults mode every later one may change.
    let faults: Vec<Decision> = (0..30).map(|i| d(4, i % 4, false, true, false)).collect();
    let parent = entry(faults, Some(20));
    let mut at_focus = 0;
    let mut cuts = 0;
    for seed in 0..2_000 {
        let (mut overrides, mut reseed) = (BTreeMap::new(), None);
        mutate_decisions(&mut rng(seed), Seeds::new(None), (&mut overrides, &mut reseed), &parent, 0, Mode::Faults);
        if reseed.is_some() {
            cuts += 1;
            at_focus += u64::from(overrides.len() == 20);
        }
    }
    // Half of the mutations are tail cuts, and half of those are at the focus.
    assert!((800..1200).contains(&cuts), "{cuts} tail cuts of 2,000");
    assert!(at_focus * 10 > cuts * 4, "{at_focus} of {cuts} tail cuts at the focus");

    // A random decision after the fork point that faults mode may not change: no tail cut.
    let mut mixed_tail: Vec<Decision> = (0..30).map(|i| d(4, i % 4, false, true, false)).collect();
    mixed_tail[25] = d(4, 1, true, false, false);
    let parent = entry(mixed_tail, Some(20));
    for seed in 0..500 {
        let (mut overrides, mut reseed) = (BTreeMap::new(), None);
        mutate_decisions(&mut rng(seed), Seeds::new(None), (&mut overrides, &mut reseed), &parent, 0, Mode::Faults);
        assert!(reseed.is_none(), "seed {seed}: a tail cut would redraw decision 25, which faults mode keeps");
        assert!(!overrides.contains_key(&25));
    }
}

#[test]
fn nothing_to_change_is_said_and_changes_nothing() {
    // Every decision is fixed or belongs to the other mode.
    let parent = entry(vec![d(1, 0, true, true, false), d(3, 1, true, false, false)], Some(1));
    let (mut overrides, mut reseed) = (BTreeMap::new(), None);
    let changed =
        mutate_decisions(&mut rng(7), Seeds::new(None), (&mut overrides, &mut reseed), &parent, 0, Mode::Faults);
    assert!(!changed);
    assert!(overrides.is_empty() && reseed.is_none());
    // Everything before the fork point is out of reach too.
    let changed =
        mutate_decisions(&mut rng(7), Seeds::new(None), (&mut overrides, &mut reseed), &parent, 2, Mode::Random);
    assert!(!changed);
}

#[test]
fn a_shard_draws_only_seeds_of_its_residue_class() {
    for (i, n) in [(0u64, 2u64), (1, 2), (2, 5), (6, 7)] {
        let mut r = rng(i * 31 + n);
        let seeds = Seeds::new(Some((i, n)));
        for _ in 0..1_000 {
            assert_eq!(seeds.draw(&mut r) % n, i, "shard {i}/{n}");
        }
    }
    // One shard of one is the whole space, and the same stream gives the same seeds.
    let (mut a, mut b) = (rng(9), rng(9));
    for _ in 0..100 {
        assert_eq!(Seeds::new(Some((0, 1))).draw(&mut a), Seeds::new(None).draw(&mut b));
    }
    assert_ne!(stream_seed(5, Some((0, 2))), stream_seed(5, Some((1, 2))), "shards have streams of their own");
    assert_eq!(stream_seed(5, None), 5);
}

#[test]
fn a_decision_keeps_its_flags_through_its_compact_form() {
    for flags in 0u8..8 {
        let dec = Decision::from((7, 3, flags));
        assert_eq!(<(u64, u64, u8)>::from(dec), (7, 3, flags));
    }
    let json = serde_json::to_string(&d(5, 2, true, false, true)).unwrap();
    assert_eq!(json, "[5,2,5]");
    assert_eq!(serde_json::from_str::<Decision>(&json).unwrap(), d(5, 2, true, false, true));
}

#[test]
fn bug_ids_are_a_stable_function_of_the_signature_and_of_what_failed() {
    let on = |message: &str| FailureSignature::ClusterAssertions(vec![("n1".into(), message.into())]);
    let (a, b) = ("n1=aa,client=bb", "n1=cc,client=bb");
    assert_eq!(bug_id(&on("x"), a), bug_id(&on("x"), a));
    assert_ne!(bug_id(&on("x"), a), bug_id(&on("y"), a));
    assert_eq!(bug_id(&on("x"), a).len(), 12);
    // The same failure of other binaries, or of a node of another name, is another bug.
    assert_ne!(bug_id(&on("x"), a), bug_id(&on("x"), b));
    assert_ne!(bug_id(&on("x"), "n1=aa"), bug_id(&on("x"), "n2=aa"));
    // The id of the words, whatever variant reads them back.
    assert_eq!(bug_id(&FailureSignature::Other("something else".into()), a), bug_id(&"something else".into(), a));
    assert_eq!(
        bug_id(&on("x"), a),
        blake3::hash(b"deja bug v2\nn1=aa,client=bb\nassertion failed on n1: x").to_hex()[..12]
    );
}

/// A campaign state with nothing learned yet.
fn blank_state() -> State<(), ()> {
    blank()
}

fn blank<I>() -> State<I, ()> {
    State {
        schema: String::new(),
        kind: "program".into(),
        subject: String::new(),
        subject_blake3: String::new(),
        strategy: Strategy::Coverage,
        mode: Mode::Faults,
        seed: 1,
        jobs: 1,
        shard: None,
        books: Books::default(),
        rng: rng(1),
        reference: (),
        virgin: Vec::new(),
        semantic: BTreeSet::new(),
        hits: BTreeMap::new(),
        earliest: BTreeMap::new(),
        corpus: Vec::new(),
        pending: Vec::new(),
        frontier: Vec::new(),
        frontier_plans: None,
        follow_ups: Default::default(),
        followed: BTreeSet::new(),
        passed_over: BTreeSet::new(),
        follow_rounds: Vec::new(),
        merged_from: Vec::new(),
    }
}

#[test]
fn new_blocks_count_once_and_give_way_to_new_behaviour_while_sanitizer_edges_count_each() {
    // 40 new blocks, the last first reached at decision 30, and one new behaviour at 12.
    let facts = |blocks: bool| Facts {
        coverage: vec![1; 40],
        coverage_at: (0..40).map(|i| (i, 30 - (i as u64 % 3))).collect(),
        semantic: BTreeMap::from([(7, Some(12))]),
        blocks,
        ..Facts::default()
    };
    let n = books::learn(&mut blank_state(), &facts(true));
    assert_eq!((n.new, n.focus, n.new_coverage.len()), (2, Some(12), 40), "blocks: one for the blocks, one behaviour");
    assert_eq!(n.weight, 1, "the entry's energy counts the behaviour, not the blocks");
    // Blocks alone: one thing new (the run is kept), focused where the last of them was first
    // reached, and no energy beyond its behaviours' rarity.
    let only = Facts { semantic: BTreeMap::new(), ..facts(true) };
    let n = books::learn(&mut blank_state(), &only);
    assert_eq!((n.new, n.focus, n.weight), (1, Some(30), 0));
    // SanitizerCoverage: every new edge counts, toward the energy too, and the focus is the
    // latest of all.
    let n = books::learn(&mut blank_state(), &facts(false));
    assert_eq!((n.new, n.focus, n.weight), (41, Some(30), 41));
    // Nothing new the second time.
    let mut s = blank_state();
    books::learn(&mut s, &facts(true));
    assert_eq!(books::learn(&mut s, &facts(true)).new, 0);
}

#[test]
fn the_rounds_blocks_were_first_reached_in_survive_the_checkpoint() {
    let mut s = blank_state();
    s.books.first_reached = BTreeMap::from([(3, 7), (40, 0)]);
    let json = serde_json::to_string(&s).unwrap();
    assert!(json.contains("\"first_reached\":[[3,7],[40,0]]"), "{json}");
    let back: State<(), ()> = serde_json::from_str(&json).unwrap();
    assert_eq!(back.books.first_reached, s.books.first_reached);
    // A checkpoint that wrote them as a map still reads.
    let old = json.replace("\"first_reached\":[[3,7],[40,0]]", "\"first_reached\":{\"3\":7,\"40\":0}");
    let back: State<(), ()> = serde_json::from_str(&old).unwrap();
    assert_eq!(back.books.first_reached, s.books.first_reached);
}

#[test]
fn fail_stops_are_counted_by_kind_and_the_first_of_each_is_counted_as_a_failure_once() {
    use crate::fail_stops::FailStopSeen;
    let seen = |node: &str, words: &str, said: &str| FailStopSeen {
        node: node.into(),
        words: words.into(),
        output: vec![said.into()],
    };
    let mut books = Books::default();
    let out = std::path::Path::new("/campaign");
    let mut asked = Vec::new();
    let count = |books: &mut Books, asked: &mut Vec<std::path::PathBuf>, round: u64, s: &FailStopSeen, fails: bool| {
        books.round = round;
        books.fail_stop(s, "subject".into(), out, |path| {
            asked.push(path.to_path_buf());
            Ok(fails.then(|| WrittenBug {
                reproduce: format!("deja replay {}", path.display()),
                decisions: 0,
                window: None,
                crash: None,
            }))
        });
    };
    let lost = seen("", "status 1 after eio on write #N to /db/journal", "LOST batch 3");
    count(&mut books, &mut asked, 2, &lost, true);
    count(&mut books, &mut asked, 5, &seen("", &lost.words, "LOST batch 9"), true);
    count(&mut books, &mut asked, 6, &seen("r1", &lost.words, "wal: EIO"), false);
    assert_eq!(asked.len(), 2, "the first of each kind only: {asked:?}");
    let program = &books.fail_stops[&lost.key()];
    assert_eq!((program.stops, program.first_round), (2, 2));
    assert_eq!(program.output, ["LOST batch 3"], "the first one's output");
    let file = program.file.clone().unwrap();
    assert!(file.starts_with("fail-stop-") && asked[0] == out.join(&file), "{file}");
    assert_eq!(program.reproduce.as_deref(), Some(format!("deja replay /campaign/{file}").as_str()));
    let node = &books.fail_stops["node r1: status 1 after eio on write #N to /db/journal"];
    assert_eq!((node.stops, node.file.as_ref(), node.reproduce.as_ref()), (1, None, None), "it did not fail that way");
    // A rerun that cannot be made is said, and the campaign goes on.
    let stuck = seen("", "status 3 after eio on fsync #N of /db", "");
    books.fail_stop(&stuck, "subject".into(), out, |_| Err(ExploreError::NoProgress { why: "no VM".into() }));
    let line = &books.fail_stops[&stuck.key()];
    assert_eq!((line.file.as_ref(), line.not_run.as_deref().map(|w| w.contains("no VM"))), (None, Some(true)));
    books.fail_stops.remove(&stuck.key());
    // Bounded: kinds past the last kept are not listed, and not run again.
    for k in 0..super::books::MAX_FAIL_STOP_KINDS {
        count(&mut books, &mut asked, 7, &seen("", &format!("status {k} after x"), ""), false);
    }
    assert_eq!(books.fail_stops.len(), super::books::MAX_FAIL_STOP_KINDS);
    assert_eq!(asked.len(), super::books::MAX_FAIL_STOP_KINDS);
    let c = books.campaign(&blank_state(), &Program { path: "p".into(), blake3: String::new() });
    assert_eq!(c.fail_stops.len(), super::books::MAX_FAIL_STOP_KINDS);
}

/// A plan by number, for the campaign's planning over a fake subject.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct Plan {
    n: u64,
    overrides: BTreeMap<u64, u64>,
    reseed: Option<u64>,
}

fn plan(n: u64) -> Plan {
    Plan { n, ..Plan::default() }
}

/// Runs plan `n` as the outcome `n`. Its frontier holds plans 1 to 6; a mutation is plan 100. A
/// round of plan 2 (a failed sync the program went on past) calls for plans 20 and 21 under key
/// `a`, and so does a round of plan 20; a round of plan 3 (a failed sync it stopped at) says to
/// pass over key `b`. Frontier plans 4, 5 and 6 are compositions of keys `a`, `b` and `c`, and
/// so are 20 and 21 of key `a`.
struct Plans;

impl Subject for Plans {
    type Input = Plan;
    type Outcome = u64;
    type Worker = ();
    type Reference = ();
    const KIND: &'static str = "program";

    fn identity(&self) -> Program {
        Program { path: "plans".into(), blake3: String::new() }
    }
    fn bug_subject(&self) -> String {
        "plans".into()
    }
    fn input_files(&self) -> Vec<&[u8]> {
        Vec::new()
    }
    fn bootstrap(&self, _: &CampaignConfig) -> Result<((), Vec<u64>), ExploreError> {
        Ok(((), Vec::new()))
    }
    fn base_decisions(_: &()) -> u64 {
        0
    }
    fn origin(&self, _: &CampaignConfig, _: &()) -> Plan {
        Plan::default()
    }
    fn worker(&self, _: &(), _: Strategy) -> Result<(), ExploreError> {
        Ok(())
    }
    fn run(&self, _: &mut (), _: &(), input: &Plan) -> Result<u64, ExploreError> {
        Ok(input.n)
    }
    fn confirm(&self, _: &(), _: &Plan, _: &u64) -> Result<Option<String>, ExploreError> {
        Ok(None)
    }
    fn facts(&self, out: &u64) -> Facts {
        // Each plan shows a behaviour of its own.
        Facts { semantic: BTreeMap::from([(*out, None)]), ..Facts::default() }
    }
    fn steering(input: &mut Plan) -> (&mut BTreeMap<u64, u64>, &mut Option<u64>) {
        (&mut input.overrides, &mut input.reseed)
    }
    fn mutate_plan(&self, _: &mut ChaCha20Rng, _: Seeds, input: &mut Plan, _: &Entry<Plan>, _: &(), _: Mode, _: bool) {
        input.n = 100;
    }
    fn fresh(&self, _: &mut ChaCha20Rng, _: u64, _: &(), _: Strategy, _: Mode) -> Plan {
        plan(1000)
    }
    fn frontier(&self, _: &(), _: Mode, _: u64) -> Vec<Plan> {
        (1..=6).map(plan).collect()
    }
    fn follow_ups(&self, _: &Plan, out: &u64, _: Mode) -> Vec<FollowUp<Plan>> {
        let up = |key: &str, plans| vec![FollowUp { key: key.into(), plans }];
        match out {
            2 | 20 => up("a", vec![plan(20), plan(21)]),
            3 => up("b", Vec::new()),
            _ => Vec::new(),
        }
    }
    fn follow_key(&self, input: &Plan) -> Option<String> {
        match input.n {
            4 | 20 | 21 => Some("a".into()),
            5 => Some("b".into()),
            6 => Some("c".into()),
            _ => None,
        }
    }
    fn write_bug(&self, _: &(), _: &Plan, _: &u64, _: u64, _: &Path) -> Result<WrittenBug, ExploreError> {
        unreachable!("no round of the fake fails")
    }
}

#[test]
fn what_a_round_calls_for_takes_the_turns_of_the_frontiers_compositions_once_and_survives_the_checkpoint() {
    let cfg = CampaignConfig {
        runs: None,
        budget: None,
        seed: 7,
        out: std::env::temp_dir().join(format!("deja-follow-ups-{}", std::process::id())),
        resume: false,
        strategy: Strategy::Coverage,
        mode: Mode::Faults,
        stop_at_first_bug: false,
        jobs: 1,
        shard: None,
        block_coverage: false,
        cover: Vec::new(),
        late_forks: 0,
        verify_forks: 0,
        perturb_forks: false,
        settings: deja_vmm::Settings::default(),
    };
    std::fs::create_dir_all(cfg.out.join("corpus")).unwrap();
    let mut state = blank::<Plan>();
    state.corpus.push(entry_of(Plan::default(), mixed(), None));
    let mut ran = Vec::new();
    let mut saved = None;
    for _ in 0..40 {
        let input = plan_round(&Plans, &cfg, Seeds::new(None), &mut state);
        let out = input.n;
        ran.push(out);
        learn_round(&Plans, &cfg, &mut state, input, &out, 0.0).unwrap();
        if out == 2 {
            saved = Some(serde_json::to_string(&state).unwrap());
        }
    }
    let planned: Vec<u64> = ran.iter().copied().filter(|n| *n != 100).collect();
    // The follow-ups take the turn of the next composition (6), once; the compositions of what
    // they decided (4 and 5) are passed over; the single faults keep their turns (1 to 3).
    assert_eq!(planned, [1, 2, 3, 20, 21, 6], "{ran:?}");
    assert!(ran.iter().filter(|n| **n == 100).count() >= 4, "mutations keep their turns: {ran:?}");
    let c = state.books.campaign(&state, &Plans.identity());
    assert_eq!(c.frontier, Some(report::Frontier { tried: 4, total: 6, followed: 2, passed_over: 2 }));
    // What each showed counts, but a crash after a failed sync is no parent for mutations.
    assert_eq!(state.semantic.iter().copied().collect::<Vec<_>>(), [1, 2, 3, 6, 20, 21, 100]);
    let parents: Vec<u64> = state.corpus.iter().map(|e| e.input.n).collect();
    assert_eq!(parents, [0, 1, 2, 3, 100], "{parents:?}");
    assert_eq!(state.passed_over.iter().collect::<Vec<_>>(), ["b"]);
    // A checkpoint taken between the call and its rounds keeps them.
    let back: State<Plan, ()> = serde_json::from_str(&saved.unwrap()).unwrap();
    assert_eq!(back.follow_ups, [plan(20), plan(21)]);
    assert_eq!(back.followed.iter().collect::<Vec<_>>(), ["a"]);
    // A campaign whose rounds call for nothing plans as it did.
    let mut quiet = blank::<Plan>();
    quiet.corpus = state.corpus.clone();
    quiet.corpus.truncate(1);
    let none: Vec<u64> = (0..12).map(|_| plan_round(&Plans, &cfg, Seeds::new(None), &mut quiet).n).collect();
    assert!(none.iter().all(|n| *n <= 6 || *n == 100), "{none:?}");
    std::fs::remove_dir_all(&cfg.out).ok();
}
