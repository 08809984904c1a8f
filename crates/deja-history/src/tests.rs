//! The checker against histories with known answers: hand-written ones, and ones generated from
//! the sequential model (linearizable by construction), then perturbed and judged by brute
//! force over every order.

use super::*;
use serde_json::json;

fn op(f: &str, value: Value, invoke: u64, end: End) -> Op {
    Op { process: format!("p{invoke}"), f: f.into(), key: None, value, invoke_ns: invoke, end }
}

fn ok(at: u64, value: Value) -> End {
    End::Ok { at_ns: at, value }
}

fn verdict(model: Model, ops: Vec<Op>) -> Verdict {
    check(&History { model, ops }, DEFAULT_BUDGET)
}

fn linearizable(v: &Verdict) -> bool {
    matches!(v, Verdict::Linearizable { .. })
}

#[test]
fn hand_written_registers() {
    // Sequential: write 1, read 1.
    let h = vec![op("write", json!(1), 0, ok(10, Value::Null)), op("read", Value::Null, 20, ok(30, json!(1)))];
    assert!(linearizable(&verdict(Model::Register, h)));
    // A stale read after the write returned.
    let h = vec![op("write", json!(1), 0, ok(10, Value::Null)), op("read", Value::Null, 20, ok(30, Value::Null))];
    let Verdict::NotLinearizable(v) = verdict(Model::Register, h) else { panic!("a stale read") };
    assert_eq!(v.culprit.f, "read");
    assert!(v.signature().contains("register model: a read cannot be placed"), "{}", v.signature());
    // The same read concurrent with the write may see either value.
    for seen in [Value::Null, json!(1)] {
        let h = vec![op("write", json!(1), 0, ok(30, Value::Null)), op("read", Value::Null, 10, ok(20, seen))];
        assert!(linearizable(&verdict(Model::Register, h)));
    }
    // A write with no answer may have happened, or not.
    for seen in [Value::Null, json!(2)] {
        let h = vec![op("write", json!(2), 0, End::Info), op("read", Value::Null, 50, ok(60, seen))];
        assert!(linearizable(&verdict(Model::Register, h)));
    }
    // A failed write did not happen.
    let h = vec![op("write", json!(2), 0, End::Fail), op("read", Value::Null, 50, ok(60, json!(2)))];
    assert!(!linearizable(&verdict(Model::Register, h)));
    // Two reads that disagree on the order of two concurrent writes: 1 then 2, then 1 again.
    let h = vec![
        op("write", json!(1), 0, ok(100, Value::Null)),
        op("write", json!(2), 0, ok(100, Value::Null)),
        op("read", Value::Null, 110, ok(120, json!(2))),
        op("read", Value::Null, 130, ok(140, json!(1))),
    ];
    assert!(!linearizable(&verdict(Model::Register, h)));
    // Compare-and-set.
    let h = vec![
        op("write", json!(1), 0, ok(10, Value::Null)),
        op("cas", json!([1, 3]), 20, ok(30, Value::Null)),
        op("read", Value::Null, 40, ok(50, json!(3))),
    ];
    assert!(linearizable(&verdict(Model::Register, h)));
    let h = vec![op("cas", json!([1, 3]), 20, ok(30, Value::Null))];
    assert!(!linearizable(&verdict(Model::Register, h)), "a cas from a value the register never had");
}

#[test]
fn hand_written_kv_and_sets() {
    let kv = |key: &str, f: &str, v: Value, t: u64, end: End| Op { key: Some(key.into()), ..op(f, v, t, end) };
    let h = vec![
        kv("a", "write", json!(1), 0, ok(10, Value::Null)),
        kv("b", "write", json!(2), 0, ok(10, Value::Null)),
        kv("a", "read", Value::Null, 20, ok(30, json!(1))),
        kv("b", "read", Value::Null, 20, ok(30, json!(2))),
    ];
    assert!(linearizable(&verdict(Model::Kv, h.clone())));
    let mut bad = h;
    bad[3].end = ok(30, json!(1));
    let Verdict::NotLinearizable(v) = verdict(Model::Kv, bad) else { panic!("key b read a's value") };
    assert_eq!(v.key.as_deref(), Some("b"));

    // The split brain: an acknowledged add is missing from a later read.
    let mut h: Vec<Op> = (1..=3).map(|i| op("add", json!(i), i * 100, ok(i * 100 + 10, Value::Null))).collect();
    h.push(op("add", json!(4), 400, End::Info));
    h.push(op("read", Value::Null, 1000, ok(1010, json!([1, 3]))));
    let Verdict::NotLinearizable(v) = verdict(Model::Set, h.clone()) else { panic!("a lost add") };
    assert_eq!(v.why.as_deref(), Some("the read lacks an add acknowledged before it began: 2"));
    assert!(v.timeline().contains("← cannot be placed"), "{}", v.timeline());
    // The unanswered add may be there or not.
    for got in [json!([1, 2, 3]), json!([3, 2, 1, 4])] {
        let n = h.len() - 1;
        h[n].end = ok(1010, got);
        assert!(linearizable(&verdict(Model::Set, h.clone())));
    }
}

#[test]
fn histories_from_events() {
    let recs = [
        ("c", r#"{"id":1,"type":"invoke","model":"set","f":"add","value":7}"#, 5),
        ("c", r#"{"id":2,"type":"invoke","model":"set","f":"read","value":null}"#, 6),
        ("c", r#"{"id":1,"type":"ok","value":null}"#, 9),
        ("c", r#"{"id":2,"type":"ok","value":[7]}"#, 12),
    ];
    let h =
        from_events(recs.iter().map(|(n, d, t)| Record { node: n, details: d, virtual_time_ns: *t })).unwrap().unwrap();
    assert_eq!(h.model, Model::Set);
    assert_eq!(h.ops[0].end, ok(9, Value::Null));
    assert!(linearizable(&check(&h, DEFAULT_BUDGET)));
    let bad = [("c", r#"{"id":1,"type":"ok"}"#, 1)];
    assert!(from_events(bad.iter().map(|(n, d, t)| Record { node: n, details: d, virtual_time_ns: *t })).is_err());
    assert_eq!(from_events(std::iter::empty()).unwrap(), None);
}

/// A small deterministic generator (xorshift).
struct Gen(u64);
impl Gen {
    fn next(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// A history linearizable by construction: each op takes effect at its own instant, inside a
/// random interval around it; some writes end without an answer, and some of those never
/// take effect.
fn generated(g: &mut Gen, model: Model, n: usize) -> Vec<Op> {
    let mut state = State::initial(model);
    let mut ops = Vec::new();
    for i in 0..n {
        let point = 1000 + 100 * i as u64;
        let (invoke, ret) = (point - 1 - g.next(150), point + 1 + g.next(150));
        let write = g.next(2) == 0;
        let v = json!(g.next(3));
        let (f, arg) = match (model, write) {
            (Model::Set, true) => ("add", v),
            (_, true) => ("write", v),
            (_, false) => ("read", Value::Null),
        };
        let mut o = op(f, arg, invoke, End::Info);
        let unanswered = write && g.next(4) == 0;
        let happens = !unanswered || g.next(2) == 0;
        if happens {
            state = state.step(&o).unwrap_or(state);
        }
        if !unanswered {
            let result = match (&state, write) {
                (_, true) => Value::Null,
                (State::Register(s), false) => serde_json::from_str(s).unwrap(),
                (State::Set(s), false) => Value::Array(s.iter().map(|x| serde_json::from_str(x).unwrap()).collect()),
            };
            o.end = ok(ret, result);
        }
        ops.push(o);
    }
    ops
}

/// Every order of every subset of the unanswered ops with all the answered ones.
fn brute_force(model: Model, ops: &[Op]) -> bool {
    let ops: Vec<&Op> = ops.iter().filter(|o| o.end != End::Fail).collect();
    let info: Vec<usize> = (0..ops.len()).filter(|&i| !ops[i].is_ok()).collect();
    for mask in 0..(1u32 << info.len()) {
        let chosen: Vec<usize> = (0..ops.len())
            .filter(|i| ops[*i].is_ok() || mask >> info.iter().position(|j| j == i).unwrap() & 1 == 1)
            .collect();
        if permutations(&chosen).any(|order| {
            let respects = order
                .iter()
                .enumerate()
                .all(|(a, &i)| order[a + 1..].iter().all(|&j| ops[j].returned_ns() >= ops[i].invoke_ns));
            respects && order.iter().try_fold(State::initial(model), |s, &i| s.step(ops[i])).is_some()
        }) {
            return true;
        }
    }
    false
}

fn permutations(items: &[usize]) -> impl Iterator<Item = Vec<usize>> {
    let mut all = Vec::new();
    let mut v = items.to_vec();
    heap(v.len(), &mut v, &mut all);
    all.into_iter()
}

fn heap(k: usize, v: &mut Vec<usize>, out: &mut Vec<Vec<usize>>) {
    if k <= 1 {
        out.push(v.clone());
        return;
    }
    for i in 0..k {
        heap(k - 1, v, out);
        let j = if k.is_multiple_of(2) { i } else { 0 };
        v.swap(j, k - 1);
    }
}

#[test]
fn generated_histories_are_linearizable_and_perturbed_ones_are_judged_as_brute_force_does() {
    let mut g = Gen(0x2545_f491_4f6c_dd1d);
    let (mut agreed, mut violations) = (0, 0);
    for round in 0..400usize {
        let model = if round.is_multiple_of(2) { Model::Register } else { Model::Set };
        let n = 3 + (round % 4);
        let ops = generated(&mut g, model, n);
        assert!(linearizable(&verdict(model, ops.clone())), "generated history {round} is linearizable: {ops:#?}");
        // Perturb one answered read's result.
        let reads: Vec<usize> = (0..ops.len()).filter(|&i| ops[i].f == "read" && ops[i].is_ok()).collect();
        if reads.is_empty() {
            continue;
        }
        let mut bad = ops.clone();
        let i = reads[g.next(reads.len() as u64) as usize];
        let at = bad[i].returned_ns();
        bad[i].end = ok(
            at,
            match model {
                Model::Set => Value::Array((0..g.next(3)).map(|x| json!(x)).collect()),
                _ => json!(g.next(4)),
            },
        );
        let expected = brute_force(model, &bad);
        let got = verdict(model, bad.clone());
        assert_eq!(linearizable(&got), expected, "history {round}: checker and brute force disagree: {bad:#?}");
        agreed += 1;
        if !expected {
            violations += 1;
            let Verdict::NotLinearizable(v) = got else { unreachable!() };
            assert!(v.window.contains(&v.culprit));
        }
    }
    assert!(agreed > 300 && violations > 50, "{agreed} perturbed histories, {violations} violations");
}

#[test]
fn the_budget_gives_unknown_never_a_pass() {
    // Many concurrent writes and a read no order explains: the search must try them all.
    let mut ops: Vec<Op> = (0..40).map(|i| op("write", json!(i), 0, ok(1000, Value::Null))).collect();
    ops.push(op("read", Value::Null, 2000, ok(2001, json!(99))));
    let v = check(&History { model: Model::Register, ops }, 50);
    assert!(matches!(v, Verdict::Unknown { .. }), "{v:?}");
}
