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
    Entry {
        input: (),
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
        books
            .fail_stop(s, "subject".into(), out, |path| {
                asked.push(path.to_path_buf());
                Ok(fails.then(|| WrittenBug {
                    reproduce: format!("deja replay {}", path.display()),
                    decisions: 0,
                    window: None,
                    crash: None,
                }))
            })
            .unwrap();
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
    // Bounded: kinds past the last kept are not listed, and not run again.
    for k in 0..super::books::MAX_FAIL_STOP_KINDS {
        count(&mut books, &mut asked, 7, &seen("", &format!("status {k} after x"), ""), false);
    }
    assert_eq!(books.fail_stops.len(), super::books::MAX_FAIL_STOP_KINDS);
    assert_eq!(asked.len(), super::books::MAX_FAIL_STOP_KINDS);
    let c = books.campaign(&blank_state(), &Program { path: "p".into(), blake3: String::new() });
    assert_eq!(c.fail_stops.len(), super::books::MAX_FAIL_STOP_KINDS);
}
