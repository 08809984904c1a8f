//! The deja syscall (assertion oracle, lifecycle, SDK randomness) and coverage from guest memory.

use deja_protocol::{
    site_id, AssertKind, Request, DEJA_SYSCALL, MAX_DETAILS, MAX_SITES, MAX_TEXT, PROTOCOL_VERSION, SITE_RECORD_SIZE,
};

use super::*;

/// Calls the deja syscall with `req` and its arguments (RSI, RDX, R10, R8).
pub(super) fn deja(k: &mut Kernel, m: &mut FakeMemory, req: Request, args: &[u64]) -> i64 {
    deja_word(k, m, req.word(), args)
}

fn deja_word(k: &mut Kernel, m: &mut FakeMemory, word: u64, args: &[u64]) -> i64 {
    let mut a = [0u64; 6];
    a[0] = word;
    a[1..1 + args.len()].copy_from_slice(args);
    match k.syscall(m, DEJA_SYSCALL, a) {
        SyscallOutcome::Return(v) => v as i64,
        other => panic!("deja ended the run: {other:?}"),
    }
}

/// One catalog entry: kind, file, line, message.
pub(super) type SiteSpec = (AssertKind, &'static str, u32, &'static str);

/// Writes a catalog of `sites` at `at` (records) and `at + 0x4000` (strings); returns the
/// address of the records and the ids.
pub(super) fn write_catalog(k: &Kernel, m: &mut FakeMemory, at: u64, sites: &[SiteSpec]) -> (u64, Vec<u64>) {
    let mut strings = at + 0x4000;
    let mut records = Vec::new();
    let mut ids = Vec::new();
    for &(kind, file, line, message) in sites {
        let id = site_id(kind as u32, file, line, message);
        ids.push(id);
        let (mptr, fptr) = (strings, strings + message.len() as u64);
        poke(k, m, mptr, message.as_bytes());
        poke(k, m, fptr, file.as_bytes());
        strings = fptr + file.len() as u64;
        records.push(record(id, kind as u32, line, mptr, message.len() as u64, fptr, file.len() as u64));
    }
    poke(k, m, at, &records.concat());
    (at, ids)
}

fn record(id: u64, kind: u32, line: u32, mptr: u64, mlen: u64, fptr: u64, flen: u64) -> Vec<u8> {
    let mut r = Vec::with_capacity(SITE_RECORD_SIZE);
    r.extend_from_slice(&id.to_le_bytes());
    r.extend_from_slice(&kind.to_le_bytes());
    r.extend_from_slice(&line.to_le_bytes());
    for v in [mptr, mlen, fptr, flen] {
        r.extend_from_slice(&v.to_le_bytes());
    }
    r
}

/// Asserts `cond` at `id` with `details` written at `buf`.
fn assert_at(k: &mut Kernel, m: &mut FakeMemory, id: u64, cond: bool, buf: u64, details: &str) -> i64 {
    poke(k, m, buf, details.as_bytes());
    deja(k, m, Request::Assert, &[id, u64::from(cond), buf, details.len() as u64])
}

pub(super) const SITES: [SiteSpec; 12] = [
    (AssertKind::Always, "src/b.rs", 20, "b holds"),
    (AssertKind::Always, "src/a.rs", 10, "a holds"),
    (AssertKind::Always, "src/a.rs", 30, "never evaluated"),
    (AssertKind::AlwaysOrUnreachable, "src/c.rs", 1, "aou unhit"),
    (AssertKind::AlwaysOrUnreachable, "src/c.rs", 2, "aou fails"),
    (AssertKind::Sometimes, "src/d.rs", 1, "never true"),
    (AssertKind::Sometimes, "src/d.rs", 2, "true once"),
    (AssertKind::Sometimes, "src/d.rs", 3, "sometimes unhit"),
    (AssertKind::Reachable, "src/e.rs", 1, "reached"),
    (AssertKind::Reachable, "src/e.rs", 2, "not reached"),
    (AssertKind::Unreachable, "src/f.rs", 1, "reached anyway"),
    (AssertKind::Unreachable, "src/f.rs", 2, "really unreachable"),
];

fn find(r: &RunReport, id: u64) -> &AssertionReport {
    let id = format!("{id:016x}");
    r.assertions.iter().find(|a| a.id == id).unwrap_or_else(|| panic!("no site {id}"))
}

#[test]
fn catalog_and_assertions_of_every_kind() {
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 0x10000);
    let details = buf + 0x8000;
    assert_eq!(deja(&mut k, &mut m, Request::Hello, &[]), i64::from(PROTOCOL_VERSION));
    let (cat, ids) = write_catalog(&k, &mut m, buf, &SITES);
    // A record with an unknown kind (skipped) after the real ones.
    poke(&k, &mut m, cat + (SITES.len() * SITE_RECORD_SIZE) as u64, &record(0x99, 9, 1, 0, 0, 0, 0));
    assert_eq!(deja(&mut k, &mut m, Request::Catalog, &[cat, SITES.len() as u64 + 1]), 0);
    // A second catalog: a new site, and a known id with another message (the first one stays).
    let later: [SiteSpec; 1] = [(AssertKind::Always, "src/a.rs", 5, "later")];
    let (cat2, ids2) = write_catalog(&k, &mut m, buf + 0x2000, &later);
    poke(&k, &mut m, cat2 + 48, &record(ids[1], 1, 10, buf + 0x7000, 3, buf + 0x7000, 3));
    poke(&k, &mut m, buf + 0x7000, b"zzz");
    assert_eq!(deja(&mut k, &mut m, Request::Catalog, &[cat2, 2]), 0);

    let [b, a, _never, _aou_unhit, aou, never_true, once, _s_unhit, reached, _not_reached, unreach, _] =
        ids[..].try_into().unwrap();
    assert_eq!(assert_at(&mut k, &mut m, a, true, details, ""), 0);
    assert_eq!(assert_at(&mut k, &mut m, a, true, details, "{}"), 0);
    assert_eq!(assert_at(&mut k, &mut m, b, true, details, ""), 0);
    let first_b_failure = k.syscall_count();
    sc(&mut k, &mut m, "nanosleep", &[0, 0]); // some time passes
    let first_b_failure = first_b_failure + 1;
    assert_eq!(assert_at(&mut k, &mut m, b, false, details, r#"{"balance":-1}"#), 0);
    assert_eq!(assert_at(&mut k, &mut m, b, false, details, r#"{"balance":-2}"#), 0);
    assert_eq!(assert_at(&mut k, &mut m, aou, false, details, "aou"), 0);
    assert_eq!(assert_at(&mut k, &mut m, never_true, false, details, ""), 0);
    assert_eq!(assert_at(&mut k, &mut m, never_true, false, details, ""), 0);
    assert_eq!(assert_at(&mut k, &mut m, once, false, details, "no"), 0);
    let once_index = k.syscall_count();
    assert_eq!(assert_at(&mut k, &mut m, once, true, details, "yes"), 0);
    assert_eq!(assert_at(&mut k, &mut m, once, true, details, "again"), 0);
    assert_eq!(assert_at(&mut k, &mut m, reached, false, details, "cond ignored"), 0);
    let unreach_index = k.syscall_count();
    assert_eq!(assert_at(&mut k, &mut m, unreach, true, details, "oops"), 0);
    assert_eq!(assert_at(&mut k, &mut m, unreach, true, details, "oops again"), 0);
    assert!(k.assertion_failed());
    let deja_calls = k.syscall_count() - 2; // mmap and nanosleep
    let r = k.finish(&m, ExitStatus::Exited { code: 0 });

    assert_eq!(r.syscall_counts.get("deja"), Some(&deja_calls));
    assert!(r.unsupported.is_empty(), "{:?}", r.unsupported);
    assert!(r.trace.iter().filter(|t| t.nr == DEJA_SYSCALL).all(|t| t.name == "deja"));
    assert_eq!(r.protocol_errors, 0);
    assert!(r.assertion_failed());

    // Every catalogued site, sorted by (file, line, id); the unknown kind is not there.
    assert_eq!(r.assertions.len(), SITES.len() + 1);
    let order: Vec<(&str, u32)> = r.assertions.iter().map(|a| (a.file.as_str(), a.line)).collect();
    let mut sorted = order.clone();
    sorted.sort();
    assert_eq!(order, sorted);
    assert_eq!(order[..4], [("src/a.rs", 5), ("src/a.rs", 10), ("src/a.rs", 30), ("src/b.rs", 20)]);
    assert_eq!(find(&r, ids2[0]).message, "later");
    assert_eq!(find(&r, a).message, "a holds", "a duplicate id keeps its first record");
    assert!(r.assertions.iter().all(|x| x.id.len() == 16));

    let status = |id| {
        let x = find(&r, id);
        (x.status, x.bug, x.hits, x.passes, x.failures)
    };
    use AssertionStatus::*;
    let want = [
        (Failed, true, 3, 1, 2),
        (Passed, false, 2, 2, 0),
        (Unreached, false, 0, 0, 0),
        (Passed, false, 0, 0, 0),
        (Failed, true, 1, 0, 1),
        (Unsatisfied, false, 2, 0, 2),
        (Satisfied, false, 3, 2, 1),
        (Unreached, false, 0, 0, 0),
        (Reached, false, 1, 1, 0),
        (Unreached, false, 0, 0, 0),
        (Failed, true, 2, 0, 2),
        (Passed, false, 0, 0, 0),
    ];
    for (i, w) in want.iter().enumerate() {
        assert_eq!(status(ids[i]), *w, "site {i}: {:?}", SITES[i]);
    }

    // First-failure context: index of the deja syscall in the trace, its time, the details.
    let f = find(&r, b).first_failure.clone().unwrap();
    assert_eq!(f.syscall_index, first_b_failure);
    assert_eq!(f.details, r#"{"balance":-1}"#);
    assert_eq!((f.node, f.thread), (0, 1));
    let entry = &r.trace[f.syscall_index as usize];
    assert_eq!(entry.nr, DEJA_SYSCALL);
    assert_eq!(entry.args[1], b);
    assert_eq!(f.virtual_time_ns, entry.vtime_ns);
    assert!(f.virtual_time_ns > r.trace[f.syscall_index as usize - 2].vtime_ns + 1000);
    let u = find(&r, unreach).first_failure.clone().unwrap();
    assert_eq!((u.syscall_index, u.details.as_str()), (unreach_index, "oops"));
    let s = find(&r, once).first_satisfied.clone().unwrap();
    assert_eq!((s.syscall_index, s.details.as_str()), (once_index, "yes"));
    assert_eq!(s.virtual_time_ns, r.trace[once_index as usize].vtime_ns);
    assert!(find(&r, once).first_failure.is_some(), "a failed sometimes keeps its context too");
    assert!(find(&r, a).first_failure.is_none());

    // JSON: snake_case statuses, hex ids.
    let j = serde_json::to_value(&r.assertions).unwrap();
    assert_eq!(j[0]["status"], "unreached");
    assert_eq!(j[1]["status"], "passed");
    assert_eq!(j[3]["status"], "failed");
    assert_eq!(j[3]["kind"], "always");
    assert_eq!(j[3]["first_failure"]["details"], r#"{"balance":-1}"#);
    assert_eq!(j[0]["first_failure"], serde_json::Value::Null);
    let back: RunReport = serde_json::from_value(serde_json::to_value(&r).unwrap()).unwrap();
    assert_eq!(back.assertions, r.assertions);

    // Without a failing site there is no bug.
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 0x10000);
    let (cat, ids) = write_catalog(&k, &mut m, buf, &SITES[..2]);
    assert_eq!(deja(&mut k, &mut m, Request::Catalog, &[cat, 2]), 0);
    assert_eq!(assert_at(&mut k, &mut m, ids[0], true, buf + 0x8000, ""), 0);
    assert!(!k.assertion_failed());
    let r = k.finish(&m, ExitStatus::Exited { code: 0 });
    assert!(!r.assertion_failed());
    assert_eq!(r.assertions.len(), 2);
    assert_eq!(r.coverage, None);
}

#[test]
fn bad_requests_fail_and_count_as_protocol_errors() {
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 0x10000);
    let (cat, ids) = write_catalog(&k, &mut m, buf, &SITES[..3]);
    assert_eq!(deja(&mut k, &mut m, Request::Catalog, &[cat, 3]), 0);
    let v = |code: u64| (u64::from(PROTOCOL_VERSION) << 32) | code;
    let mut errors = 0;
    let mut expect = |k: &mut Kernel, m: &mut FakeMemory, word: u64, args: &[u64], want: i64| {
        assert_eq!(deja_word(k, m, word, args), want, "{word:#x} {args:x?}");
        if want < 0 {
            errors += 1;
        }
    };
    // Versions and codes.
    expect(&mut k, &mut m, 1, &[], EINVAL);
    expect(&mut k, &mut m, (2 << 32) | 1, &[], EINVAL);
    expect(&mut k, &mut m, v(0), &[], EINVAL);
    expect(&mut k, &mut m, v(8), &[], EINVAL);
    expect(&mut k, &mut m, u64::MAX, &[], EINVAL);
    expect(&mut k, &mut m, v(1), &[1, 2, 3, 4], 1);
    // Catalogs: too many records, unreadable records, unreadable strings (nothing registered).
    expect(&mut k, &mut m, v(2), &[cat, MAX_SITES as u64 + 1], EINVAL);
    expect(&mut k, &mut m, v(2), &[cat, u64::MAX], EINVAL);
    expect(&mut k, &mut m, v(2), &[0x10, 1], EFAULT);
    expect(&mut k, &mut m, v(2), &[u64::MAX - 10, 1], EFAULT);
    expect(&mut k, &mut m, v(2), &[buf + 0xfff0, 1], EFAULT);
    expect(&mut k, &mut m, v(2), &[cat, 0], 0);
    let fresh = [(AssertKind::Always, "x.rs", 1, "fresh"), (AssertKind::Always, "x.rs", 2, "bad string")];
    let (cat2, fresh_ids) = write_catalog(&k, &mut m, buf + 0x1000, &fresh);
    poke(&k, &mut m, cat2 + 48, &record(fresh_ids[1], 1, 2, 0x20, 4, buf, 1));
    expect(&mut k, &mut m, v(2), &[cat2, 2], EFAULT);
    expect(&mut k, &mut m, v(3), &[fresh_ids[0], 1, 0, 0], EINVAL);
    // Asserts: unknown ids, bad conditions, unreadable details (not counted).
    expect(&mut k, &mut m, v(3), &[0x1234, 1, 0, 0], EINVAL);
    expect(&mut k, &mut m, v(3), &[ids[0], 2, 0, 0], EINVAL);
    expect(&mut k, &mut m, v(3), &[ids[0], u64::MAX, 0, 0], EINVAL);
    expect(&mut k, &mut m, v(3), &[ids[0], 0, 0x10, 4], EFAULT);
    expect(&mut k, &mut m, v(3), &[ids[0], 0, u64::MAX, 4], EFAULT);
    expect(&mut k, &mut m, v(3), &[ids[0], 0, buf + 0xfffe, 4], EFAULT);
    expect(&mut k, &mut m, v(3), &[ids[0], 1, 0x10, 0], 0);
    // Over-long details are truncated to MAX_DETAILS (only that much is read).
    poke(&k, &mut m, buf + 0x8000, &[b'x'; MAX_DETAILS + 100]);
    expect(&mut k, &mut m, v(3), &[ids[1], 0, buf + 0x8000, u64::MAX], 0);
    // Lifecycle and randomness.
    expect(&mut k, &mut m, v(4), &[0x10, 1], EFAULT);
    expect(&mut k, &mut m, v(5), &[buf, 1, 0x10, 1], EFAULT);
    expect(&mut k, &mut m, v(5), &[0x10, 1, buf, 1], EFAULT);
    expect(&mut k, &mut m, v(7), &[0], EINVAL);
    expect(&mut k, &mut m, v(7), &[1], 0);
    let r = k.finish(&m, ExitStatus::Exited { code: 0 });
    assert_eq!(r.protocol_errors, errors);
    assert!(r.unsupported.is_empty());
    assert_eq!(r.assertions.len(), 3, "the failed catalog registered nothing");
    let s0 = find(&r, ids[0]);
    assert_eq!((s0.hits, s0.passes, s0.failures), (1, 1, 0), "failed asserts are not counted");
    let s1 = find(&r, ids[1]);
    assert_eq!(s1.first_failure.as_ref().unwrap().details, "x".repeat(MAX_DETAILS));
    assert!(r.setup_complete.is_none() && r.events.is_empty());
}

#[test]
fn catalog_strings_are_truncated_and_lossy() {
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 0x10000);
    poke(&k, &mut m, buf + 0x1000, &[b'm'; MAX_TEXT + 50]);
    poke(&k, &mut m, buf + 0x2000, b"f\xffile.rs");
    poke(&k, &mut m, buf, &record(5, 3, 7, buf + 0x1000, u64::MAX, buf + 0x2000, 8));
    assert_eq!(deja(&mut k, &mut m, Request::Catalog, &[buf, 1]), 0);
    let a = &k.assertions()[0];
    assert_eq!(a.message, "m".repeat(MAX_TEXT));
    assert_eq!(a.file, "f\u{fffd}ile.rs");
    assert_eq!((a.kind.as_str(), a.line, a.id.as_str()), ("sometimes", 7, "0000000000000005"));
}

#[test]
fn setup_complete_and_events() {
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 0x10000);
    poke(&k, &mut m, buf, b"{\"ready\":true}startedtick");
    sc(&mut k, &mut m, "nanosleep", &[0, 0]);
    let setup_index = k.syscall_count();
    assert_eq!(deja(&mut k, &mut m, Request::SetupComplete, &[buf, 14]), 0);
    assert_eq!(deja(&mut k, &mut m, Request::SetupComplete, &[buf + 14, 7]), 0);
    let event_index = k.syscall_count();
    assert_eq!(deja(&mut k, &mut m, Request::Event, &[buf + 14, 7, buf, 14]), 0);
    for _ in 0..MAX_EVENTS + 4 {
        assert_eq!(deja(&mut k, &mut m, Request::Event, &[buf + 21, 4, 0, 0]), 0);
    }
    let r = k.finish(&m, ExitStatus::Exited { code: 0 });
    let s = r.setup_complete.clone().unwrap();
    assert_eq!((s.syscall_index, s.details.as_str()), (setup_index, "{\"ready\":true}"));
    assert_eq!(s.virtual_time_ns, r.trace[setup_index as usize].vtime_ns);
    assert_eq!(r.events.len(), MAX_EVENTS);
    assert_eq!(r.events_dropped, 5);
    let e = &r.events[0];
    assert_eq!((e.name.as_str(), e.details.as_str(), e.syscall_index), ("started", "{\"ready\":true}", event_index));
    assert_eq!(e.virtual_time_ns, r.trace[event_index as usize].vtime_ns);
    assert_eq!((r.events[1].name.as_str(), r.events[1].details.as_str()), ("tick", ""));
    assert!(r.events.windows(2).all(|w| w[0].syscall_index < w[1].syscall_index));
    let j = serde_json::to_value(&r).unwrap();
    assert_eq!(j["setup_complete"]["details"], "{\"ready\":true}");
}

/// `n` Random draws and Choice draws of seed `seed`.
fn draws(seed: u64, n: usize) -> (Vec<u64>, Vec<u64>) {
    let (mut k, _, mut m) = boot_spec(spec_with(exec_image(), seed));
    let r = (0..n).map(|_| deja(&mut k, &mut m, Request::Random, &[]) as u64).collect();
    let c = (0..n).map(|_| deja(&mut k, &mut m, Request::Choice, &[1000]) as u64).collect();
    (r, c)
}

#[test]
fn random_and_choice_are_seeded_decisions() {
    let (r1, c1) = draws(1, 50);
    assert_eq!((r1.clone(), c1.clone()), draws(1, 50));
    let (r2, c2) = draws(2, 50);
    assert_ne!(r1, r2);
    assert_ne!(c1, c2);
    assert!(c1.iter().all(|c| *c < 1000));

    // Random and Choice are decisions: they come from the decision stream, not from the stream
    // getrandom reads, and are logged.
    let (mut k, _, mut m) = boot_spec(spec_with(exec_image(), 9));
    let mut decisions = RandomStream::with_context(crate::faults::FAULT_CONTEXT, 9);
    let mut b = [0u8; 16];
    decisions.fill(&mut b);
    let x = deja(&mut k, &mut m, Request::Random, &[]) as u64;
    assert_eq!(x, u64::from_le_bytes(b[..8].try_into().unwrap()));
    assert_eq!(k.random_bytes_used(), 16, "AT_RANDOM only");
    let buf = scratch(&mut k, &mut m, 4096);
    assert_eq!(sc(&mut k, &mut m, "getrandom", &[buf, 8, 0]), 8);
    let mut program = [0u8; 24];
    RandomStream::new(9).fill(&mut program);
    assert_eq!(peek(&k, &mut m, buf, 8), program[16..24]);
    assert_eq!(deja(&mut k, &mut m, Request::Random, &[]) as u64, u64::from_le_bytes(b[8..16].try_into().unwrap()));
    assert_eq!(k.random_bytes_used(), 24);
    let log = k.decisions().to_vec();
    assert_eq!(log.len(), 2);
    assert_eq!((log[1].index, &log[1].point, log[1].options), (1, &DecisionPoint::SdkRandom { n: 2 }, 0));

    // Choice: always below n, every value possible, roughly uniform; huge n rejects about half.
    assert_eq!(deja(&mut k, &mut m, Request::Choice, &[1]), 0);
    let mut hist = [0u32; 6];
    for _ in 0..6000 {
        let c = deja(&mut k, &mut m, Request::Choice, &[6]) as u64;
        hist[c as usize] += 1;
    }
    assert!(hist.iter().all(|h| (850..=1150).contains(h)), "{hist:?}");
    let n = (1u64 << 63) + 1;
    let before = k.faults.log.stream.consumed();
    let mut high = 0;
    for _ in 0..400 {
        let c = deja(&mut k, &mut m, Request::Choice, &[n]) as u64;
        assert!(c < n);
        high += u32::from(c >= 1 << 62);
    }
    let used = k.faults.log.stream.consumed() - before;
    assert!(used % 8 == 0 && used > 400 * 8 * 3 / 2, "rejection sampling draws again ({used} bytes)");
    assert!((200..=400).contains(&high), "{high}");
    for n in [2, 3, 7, 1000, u64::MAX] {
        for _ in 0..50 {
            assert!((deja(&mut k, &mut m, Request::Choice, &[n]) as u64) < n);
        }
    }
    assert_eq!(deja(&mut k, &mut m, Request::Choice, &[0]), EINVAL, "no decision");
    let r = k.finish(&m, ExitStatus::Exited { code: 0 });
    assert_eq!(r.protocol_errors, 1);
    assert!(r.unsupported.is_empty());
    let last = r.decisions.last().unwrap();
    assert_eq!(last.point.to_string(), "sdk choice #6651 of 18446744073709551615");
    assert_eq!((&last.point, last.options), (&DecisionPoint::SdkChoice { n: 6651, options: u64::MAX }, u64::MAX));
    assert_eq!(r.decisions.len(), 2 + 6651);
    assert!(r.decisions.iter().enumerate().all(|(i, d)| d.index == i as u64 && !d.overridden));
}

// ---------------------------------------------------------------------------------------------
// Save/restore and clone

const ORACLE_STEPS: usize = 12;
const OBUF: u64 = 0x2000_0000;

fn oracle_step(i: usize, k: &mut Kernel, m: &mut FakeMemory) {
    let ids: Vec<u64> = SITES.iter().map(|s| site_id(s.0 as u32, s.1, s.2, s.3)).collect();
    let details = OBUF + 0x8000;
    match i {
        0 => {
            assert_eq!(sc(k, m, "mmap", &[OBUF, 0x10000, 3, 0x32, u64::MAX, 0]), OBUF as i64);
            write_catalog(k, m, OBUF, &SITES);
        }
        1 => assert_eq!(deja(k, m, Request::Catalog, &[OBUF, SITES.len() as u64]), 0),
        2 => assert_eq!(assert_at(k, m, ids[1], true, details, "{\"a\":1}"), 0),
        3 => {
            poke(k, m, details, b"{\"setup\":1}");
            assert_eq!(deja(k, m, Request::SetupComplete, &[details, 11]), 0);
        }
        4 => assert_eq!(assert_at(k, m, ids[0], false, details, "{\"b\":2}"), 0),
        5 => {
            poke(k, m, details, b"phase2");
            assert_eq!(deja(k, m, Request::Event, &[details, 6, 0, 0]), 0);
        }
        6 => {
            let x = deja(k, m, Request::Random, &[]) as u64;
            poke(k, m, details + 0x100, &x.to_le_bytes());
        }
        7 => assert!((deja(k, m, Request::Choice, &[17]) as u64) < 17),
        8 => assert_eq!(assert_at(k, m, ids[6], true, details, "{\"once\":1}"), 0),
        9 => assert_eq!(assert_at(k, m, ids[10], true, details, "{\"boom\":1}"), 0),
        10 => assert_eq!(deja(k, m, Request::Assert, &[0xbad, 1, 0, 0]), EINVAL),
        11 => assert_eq!(sc_exit(k, m, "exit_group", &[3]), SyscallOutcome::Exit(ExitStatus::Exited { code: 3 })),
        _ => unreachable!(),
    }
}

fn oracle_finish(mut k: Kernel, mut m: FakeMemory, from: usize) -> RunReport {
    for i in from..ORACLE_STEPS {
        oracle_step(i, &mut k, &mut m);
    }
    let exit = k.exit_status().cloned().unwrap_or(ExitStatus::Exited { code: 0 });
    k.finish(&m, exit)
}

#[test]
fn oracle_survives_save_restore_and_clone() {
    let (k0, _, m0) = boot();
    let want = oracle_finish(k0.clone(), m0.clone(), 0);
    assert!(want.assertion_failed());
    assert_eq!(want.protocol_errors, 1);
    assert!(want.setup_complete.is_some());
    assert_eq!(want.events.len(), 1);
    let (mut k, mut m) = (k0, m0);
    for step in 0..=ORACLE_STEPS {
        let bytes = k.save();
        let restored = Kernel::restore(&bytes).expect("restore");
        assert_eq!(restored.save(), bytes, "save(restore(s)) == s at step {step}");
        assert_eq!(restored.assertions(), k.assertions());
        for (how, kk) in [("restored", restored), ("cloned", k.clone())] {
            let got = oracle_finish(kk, m.clone(), step);
            assert_eq!(got, want, "{how} at step {step}");
            assert_eq!(got.trace, want.trace);
        }
        if step < ORACLE_STEPS {
            oracle_step(step, &mut k, &mut m);
        }
    }
}

/// Corrupting the oracle's part of a saved state restores to an error or to a kernel that
/// keeps working.
#[test]
fn hostile_oracle_states_never_panic() {
    let (mut k, _, mut m) = boot();
    for i in 0..ORACLE_STEPS - 1 {
        oracle_step(i, &mut k, &mut m);
    }
    let bytes = k.save();
    let tail = bytes.len().saturating_sub(700);
    let mut ok = 0usize;
    let mut check = |b: &[u8]| {
        if let Ok(mut r) = Kernel::restore(b) {
            ok += 1;
            let mut mem = FakeMemory::new(4096);
            for args in [
                [Request::Assert.word(), 0, 1, OBUF + 0x8000, 8, 0],
                [Request::Event.word(), OBUF, 4, OBUF, 4, 0],
                [Request::Catalog.word(), OBUF, 12, 0, 0, 0],
                [Request::Choice.word(), 3, 0, 0, 0, 0],
            ] {
                let _ = r.syscall(&mut mem, DEJA_SYSCALL, args);
            }
            let _ = r.assertions();
            let _ = r.finish(&mem, ExitStatus::Exited { code: 0 });
        }
    };
    for n in tail..bytes.len() {
        check(&bytes[..n]);
    }
    for i in tail..bytes.len() {
        for flip in [0x01u8, 0x80, 0xff] {
            let mut b = bytes.clone();
            b[i] ^= flip;
            check(&b);
        }
    }
    assert!(ok > 0, "some corruptions (inside strings) still decode");
}

// ---------------------------------------------------------------------------------------------
// Coverage

/// One section header of a test image: name, flags, address, size.
type Sec = (&'static str, u64, u64, u64);

/// Appends a section header table (null section, `.shstrtab`, then `secs`) to `img`.
fn with_sections(mut img: Vec<u8>, secs: &[Sec]) -> Vec<u8> {
    let mut strtab = vec![0u8];
    let mut names = Vec::new();
    for name in std::iter::once(".shstrtab").chain(secs.iter().map(|s| s.0)) {
        names.push(strtab.len() as u32);
        strtab.extend_from_slice(name.as_bytes());
        strtab.push(0);
    }
    let str_off = img.len() as u64;
    img.extend_from_slice(&strtab);
    while !img.len().is_multiple_of(8) {
        img.push(0);
    }
    let shoff = img.len() as u64;
    let shdr = |name: u32, ty: u32, flags: u64, addr: u64, off: u64, size: u64| {
        let mut h = vec![0u8; 64];
        h[0..4].copy_from_slice(&name.to_le_bytes());
        h[4..8].copy_from_slice(&ty.to_le_bytes());
        h[8..16].copy_from_slice(&flags.to_le_bytes());
        h[16..24].copy_from_slice(&addr.to_le_bytes());
        h[24..32].copy_from_slice(&off.to_le_bytes());
        h[32..40].copy_from_slice(&size.to_le_bytes());
        h
    };
    img.extend(shdr(0, 0, 0, 0, 0, 0));
    img.extend(shdr(names[0], 3, 0, 0, str_off, strtab.len() as u64));
    for (i, &(_, flags, addr, size)) in secs.iter().enumerate() {
        img.extend(shdr(names[i + 1], 1, flags, addr, 0, size));
    }
    img[40..48].copy_from_slice(&shoff.to_le_bytes());
    img[58..60].copy_from_slice(&64u16.to_le_bytes());
    img[60..62].copy_from_slice(&(secs.len() as u16 + 2).to_le_bytes());
    img[62..64].copy_from_slice(&1u16.to_le_bytes());
    img
}

/// SHF_WRITE | SHF_ALLOC.
const WA: u64 = 3;

/// The ET_EXEC test image with counters at 0x40_3000 (0x1800 of them: two pages, the second
/// partly) and a decoy section before them.
fn cov_exec_image() -> Vec<u8> {
    with_sections(exec_image(), &[(".data", WA, 0x40_2010, 0x10), ("__sancov_cntrs", WA, 0x40_3000, 0x1800)])
}

#[test]
fn section_lookup() {
    let img = cov_exec_image();
    assert_eq!(mm::elf::find_section(&img, b"__sancov_cntrs"), Some((0x40_3000, 0x1800)));
    assert_eq!(mm::elf::find_section(&img, b".data"), Some((0x40_2010, 0x10)));
    assert_eq!(mm::elf::find_section(&img, b"__sancov"), None);
    assert_eq!(mm::elf::find_section(&img, b".shstrtab"), None, "not allocated");
    assert_eq!(mm::elf::find_section(&exec_image(), b"__sancov_cntrs"), None, "no section table");
    // Extended numbering: e_shnum 0, the count in section 0's sh_size; e_shstrndx in sh_link.
    let mut ext = img.clone();
    let shoff = u64::from_le_bytes(ext[40..48].try_into().unwrap()) as usize;
    ext[60..62].copy_from_slice(&0u16.to_le_bytes());
    ext[62..64].copy_from_slice(&0xffffu16.to_le_bytes());
    ext[shoff + 32..shoff + 40].copy_from_slice(&4u64.to_le_bytes());
    ext[shoff + 40..shoff + 44].copy_from_slice(&1u32.to_le_bytes());
    assert_eq!(mm::elf::find_section(&ext, b"__sancov_cntrs"), Some((0x40_3000, 0x1800)));
}

#[test]
fn hostile_section_tables_are_no_coverage() {
    let img = cov_exec_image();
    let shoff = u64::from_le_bytes(img[40..48].try_into().unwrap()) as usize;
    let set = |f: &dyn Fn(&mut Vec<u8>)| {
        let mut b = img.clone();
        f(&mut b);
        b
    };
    let put16 = |b: &mut Vec<u8>, at: usize, v: u16| b[at..at + 2].copy_from_slice(&v.to_le_bytes());
    let put64 = |b: &mut Vec<u8>, at: usize, v: u64| b[at..at + 8].copy_from_slice(&v.to_le_bytes());
    let sec = shoff + 3 * 64; // __sancov_cntrs
    let cases: Vec<Vec<u8>> = vec![
        set(&|b| put64(b, 40, 0)),
        set(&|b| put64(b, 40, u64::MAX - 10)),
        set(&|b| put64(b, 40, b.len() as u64 - 10)),
        set(&|b| put16(b, 58, 10)),
        set(&|b| put16(b, 60, 0xffff)),
        set(&|b| put16(b, 62, 9)),
        set(&|b| put16(b, 62, 0)),
        set(&|b| put64(b, shoff + 64 + 24, u64::MAX)),
        set(&|b| put64(b, shoff + 64 + 32, 1 << 40)),
        set(&|b| b[sec..sec + 4].copy_from_slice(&u32::MAX.to_le_bytes())),
        set(&|b| b.truncate(shoff + 100)),
        set(&|b| {
            put16(b, 60, 0);
            put64(b, shoff + 32, u64::MAX / 2)
        }),
    ];
    for (i, b) in cases.iter().enumerate() {
        assert_eq!(mm::elf::find_section(b, b"__sancov_cntrs"), None, "case {i}");
        let (k, _, m) = boot_spec(spec_with(b.clone(), 1));
        assert_eq!(k.coverage_map(&m), None, "case {i}");
    }
    // Sections the kernel will not read: outside every segment, straddling a segment's end,
    // too big, not allocated, empty.
    for secs in [
        ("__sancov_cntrs", WA, 0x50_0000, 0x100),
        ("__sancov_cntrs", WA, 0x40_5000, 0x100),
        ("__sancov_cntrs", WA, 0x40_3000, MAX_COVERAGE_COUNTERS + 1),
        ("__sancov_cntrs", WA, u64::MAX - 4, 0x100),
        ("__sancov_cntrs", 1, 0x40_3000, 0x100),
        ("__sancov_cntrs", WA, 0x40_3000, 0),
    ] {
        let (k, _, m) = boot_spec(spec_with(with_sections(exec_image(), &[secs]), 1));
        assert_eq!(k.coverage_map(&m), None, "{secs:x?}");
        assert_eq!(k.clone().finish(&m, ExitStatus::Exited { code: 0 }).coverage, None);
    }
    // Every byte of the section table flipped: no panic, in the lookup or in the kernel.
    for i in shoff..img.len() {
        for flip in [0x01u8, 0x80, 0xff] {
            let mut b = img.clone();
            b[i] ^= flip;
            let _ = mm::elf::find_section(&b, b"__sancov_cntrs");
            let mut m = FakeMemory::new(FRAMES);
            if let Ok((mut k, _)) = Kernel::load(spec_with(b, 1), &mut m) {
                let _ = k.finish(&m, ExitStatus::Exited { code: 0 });
            }
        }
    }
}

/// Boots `image`, sets counters (address, value) and returns the kernel and memory.
fn with_counters(image: Vec<u8>, counters: &[(u64, u8)]) -> (Kernel, FakeMemory) {
    let (k, _, mut m) = boot_spec(spec_with(image, 1));
    for &(a, v) in counters {
        m.write(a, &[v]).unwrap();
    }
    (k, m)
}

#[test]
fn coverage_map_from_guest_memory() {
    let base = 0x40_3000;
    let counters =
        [(base, 1), (base + 1, 2), (base + 2, 3), (base + 3, 5), (base + 4, 200), (base + 0x1010, 17), (base - 1, 99)];
    let (mut k, mut m) = with_counters(cov_exec_image(), &counters);
    m.write(base + 0x1800, &[42]).unwrap(); // just past the section
    let map = k.coverage_map(&m).unwrap();
    assert_eq!(map.len(), 0x1800);
    assert_eq!(map[..6], [1, 2, 4, 8, 128, 0]);
    assert_eq!(map[0x1010], 32);
    assert_eq!(map.iter().filter(|b| **b != 0).count(), 6);
    let r = k.clone().finish(&m, ExitStatus::Exited { code: 0 });
    let cov = r.coverage.clone().unwrap();
    assert_eq!((cov.counters, cov.edges_hit), (0x1800, 6));
    assert_eq!(cov.map, map);
    assert_eq!(cov.map_digest, blake3::hash(&map).to_hex().to_string());
    let j = serde_json::to_value(&r).unwrap();
    assert_eq!(j["coverage"]["edges_hit"], 6);
    assert!(j["coverage"].get("map").is_none());

    // Same counters, same digest; other counters (in bucket terms), another digest.
    let (mut k2, m2) = with_counters(cov_exec_image(), &counters);
    assert_eq!(k2.finish(&m2, ExitStatus::Exited { code: 0 }).coverage, Some(cov.clone()));
    let mut same_bucket = counters;
    same_bucket[3].1 = 7; // 5 and 7 are both in the 4..=7 bucket
    let (mut k3, m3) = with_counters(cov_exec_image(), &same_bucket);
    assert_eq!(k3.finish(&m3, ExitStatus::Exited { code: 0 }).coverage.unwrap().map_digest, cov.map_digest);
    let mut other = counters;
    other[0].1 = 0;
    let (mut k4, m4) = with_counters(cov_exec_image(), &other);
    let c4 = k4.finish(&m4, ExitStatus::Exited { code: 0 }).coverage.unwrap();
    assert_ne!(c4.map_digest, cov.map_digest);
    assert_eq!(c4.edges_hit, 5);

    // An absent page reads as zeros and stays absent.
    m.unmap(0x40_4000, 0x1000);
    let frames = m.free_frames();
    let map = k.coverage_map(&m).unwrap();
    assert_eq!(map[0x1010], 0);
    assert_eq!(map[..5], [1, 2, 4, 8, 128]);
    assert!(!m.pages.contains_key(&0x40_4000), "reading coverage populates nothing");
    assert_eq!(m.free_frames(), frames);
    m.unmap(0x40_3000, 0x1000);
    assert!(k.coverage_map(&m).unwrap().iter().all(|b| *b == 0));
    let r = k.finish(&m, ExitStatus::Exited { code: 0 });
    assert_eq!(r.coverage.unwrap().edges_hit, 0);
}

#[test]
fn coverage_of_a_pie_applies_the_load_bias() {
    let img = with_sections(pie_image(), &[("__sancov_cntrs", WA, 0x3000, 0x100)]);
    assert_eq!(mm::elf::find_section(&img, b"__sancov_cntrs"), Some((0x3000, 0x100)));
    let (mut k, m) = with_counters(img, &[(PIE_BASE + 0x3000, 1), (PIE_BASE + 0x30ff, 255)]);
    let map = k.coverage_map(&m).unwrap();
    assert_eq!((map.len(), map[0], map[0xff]), (0x100, 1, 128));
    let cov = k.finish(&m, ExitStatus::Exited { code: 0 }).coverage.unwrap();
    assert_eq!((cov.counters, cov.edges_hit), (0x100, 2));
    // The region is part of the saved state.
    let img = with_sections(pie_image(), &[("__sancov_cntrs", WA, 0x3000, 0x100)]);
    let (k, m) = with_counters(img, &[(PIE_BASE + 0x3001, 4)]);
    let r = Kernel::restore(&k.save()).unwrap();
    assert_eq!(r.coverage_map(&m), k.coverage_map(&m));
    assert_eq!(r.coverage_map(&m).unwrap()[1], 8);
}

#[test]
fn an_assertion_status_is_named_as_it_is_serialized() {
    for status in AssertionStatus::ALL {
        assert_eq!(serde_json::to_value(status).unwrap(), status.name(), "{status:?}");
    }
}
