//! The decision log: SDK and fault decisions, overrides by position, forks and snapshots.

use deja_protocol::Request;

use super::deja_syscall::deja;
use super::*;

const O_CREAT_RDWR: u64 = 0o102;
const EIO: i64 = -5;

/// What a run observed: the values the program got back (SDK results, write results), the
/// bytes `getrandom` gave it, and the decision log.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    values: Vec<u64>,
    random: Vec<u8>,
    log: Vec<DecisionRecord>,
}

/// A guest that mixes SDK requests, fault-prone writes and getrandom.
struct Guest {
    k: Kernel,
    m: FakeMemory,
    buf: u64,
    fd: u64,
    seen: Seen,
}

impl Guest {
    /// Boots on `seed` with a 50% EIO chance per write; opens `/data/x`.
    fn boot(seed: u64) -> Guest {
        let mut spec = spec_with(exec_image(), seed);
        spec.faults = FaultConfig { eio_on_write_ppm: 500_000, ..Default::default() };
        let (mut k, _, mut m) = boot_spec(spec);
        let buf = scratch(&mut k, &mut m, 4096);
        poke(&k, &mut m, buf, b"/data/x\0");
        let fd = sc(&mut k, &mut m, "openat", &[AT_FDCWD, buf, O_CREAT_RDWR, 0o644]);
        assert!(fd >= 0, "{fd}");
        Guest { k, m, buf, fd: fd as u64, seen: Seen { values: Vec::new(), random: Vec::new(), log: Vec::new() } }
    }

    /// Step `i`: one decision (SDK Random, Choice(3), Choice(1000) or a write) and a getrandom.
    fn step(&mut self, i: usize) {
        let (k, m) = (&mut self.k, &mut self.m);
        let v = match i % 4 {
            0 => deja(k, m, Request::Random, &[]) as u64,
            1 => deja(k, m, Request::Choice, &[3]) as u64,
            2 => deja(k, m, Request::Choice, &[1000]) as u64,
            _ => sc(k, m, "write", &[self.fd, self.buf, 4]) as u64,
        };
        self.seen.values.push(v);
        assert_eq!(sc(k, m, "getrandom", &[self.buf + 64, 8, 0]), 8);
        self.seen.random.extend(peek(k, m, self.buf + 64, 8));
    }

    fn run(&mut self, steps: std::ops::Range<usize>) -> &mut Self {
        for i in steps {
            self.step(i);
        }
        self
    }

    fn finish(mut self) -> Seen {
        let r = self.k.finish(&self.m, ExitStatus::Exited { code: 0 });
        assert_eq!(r.decisions, self.k.decisions());
        self.seen.log = r.decisions;
        self.seen
    }
}

const STEPS: usize = 16;

fn run_with(seed: u64, overrides: BTreeMap<u64, u64>) -> Seen {
    let mut g = Guest::boot(seed);
    g.k.set_decision_overrides(overrides);
    g.run(0..STEPS);
    g.finish()
}

/// An override that differs from the natural choice `d`.
fn other_choice(d: &DecisionRecord) -> u64 {
    match d.options {
        0 => d.choice ^ 0xdead_beef_0000_0001,
        1_000_000 if d.choice < 500_000 => 999_999,
        1_000_000 => 0,
        n => (d.choice + 1) % n,
    }
}

fn choices(s: &Seen) -> Vec<u64> {
    s.log.iter().map(|d| d.choice).collect()
}

#[test]
fn the_log_covers_sdk_and_fault_decisions() {
    let s = run_with(7, BTreeMap::new());
    assert_eq!(s.log.len(), STEPS);
    for (i, d) in s.log.iter().enumerate() {
        assert_eq!(d.index, i as u64);
        assert!(!d.overridden);
        let n = (i / 4 + 1) as u64;
        let (point, options) = match i % 4 {
            0 => (format!("sdk random #{n}"), 0),
            1 => (format!("sdk choice #{} of 3", 2 * n - 1), 3),
            2 => (format!("sdk choice #{} of 1000", 2 * n), 1000),
            _ => (format!("eio on write #{n} to /data/x"), 1_000_000),
        };
        assert_eq!((d.point.to_string(), d.options), (point, options));
        if i % 4 == 3 {
            let failed = d.choice < 500_000;
            assert_eq!(s.values[i] as i64 == EIO, failed, "write {n}");
        } else {
            assert_eq!(s.values[i], d.choice);
        }
    }
    // Determinism per seed; another seed takes other decisions but the same structure.
    assert_eq!(s, run_with(7, BTreeMap::new()));
    let t = run_with(8, BTreeMap::new());
    assert_ne!(choices(&s), choices(&t));
    assert_ne!(s.random, t.random);
    assert!(t.log.iter().zip(&s.log).all(|(a, b)| (a.index, &a.point, a.options) == (b.index, &b.point, b.options)));
}

#[test]
fn an_override_changes_only_its_decision() {
    let base = run_with(7, BTreeMap::new());
    for i in 0..STEPS {
        let want = other_choice(&base.log[i]);
        let s = run_with(7, BTreeMap::from([(i as u64, want)]));
        assert_eq!(s.random, base.random, "getrandom bytes do not move (override {i})");
        for (j, (d, b)) in s.log.iter().zip(&base.log).enumerate() {
            assert_eq!((d.index, &d.point, d.options), (b.index, &b.point, b.options));
            if j == i {
                assert_eq!((d.choice, d.overridden), (want, true), "decision {i}");
                assert_ne!(d.choice, b.choice);
            } else {
                assert_eq!((d.choice, d.overridden), (b.choice, false), "decision {j} with {i} overridden");
                assert_eq!(s.values[j], base.values[j]);
            }
        }
        if i % 4 == 3 {
            assert_ne!(s.values[i], base.values[i], "the overridden write's outcome flips");
        } else {
            assert_eq!(s.values[i], want);
        }
    }
}

#[test]
fn overrides_are_reduced_except_for_full_range_decisions() {
    let big = u64::MAX - 3;
    let s = run_with(3, BTreeMap::from([(0, big), (1, big), (2, 1_000_000_007), (3, 1_999_999), (4, 0)]));
    assert_eq!(s.values[0], big, "options 0: the full value");
    assert_eq!(s.log[0].choice, big);
    assert_eq!(s.values[1], big % 3);
    assert_eq!(s.values[2], 7);
    assert_eq!(s.log[3].choice, 999_999);
    assert_ne!(s.values[3] as i64, EIO, "no strike");
    assert_eq!((s.values[4], s.log[4].options), (0, 0), "a zero Random");
    assert!(s.log[..5].iter().all(|d| d.overridden) && !s.log[5].overridden);
    // Overrides past the end of the run, or for indices no decision reaches, change nothing.
    let base = run_with(3, BTreeMap::new());
    assert_eq!(run_with(3, BTreeMap::from([(STEPS as u64, 1), (u64::MAX, 2)])), base);
}

#[test]
fn overrides_survive_save_restore_and_clone() {
    let overrides = BTreeMap::from([(3, 0), (6, 1), (8, 5), (13, 2)]);
    let want = run_with(5, overrides.clone());
    assert!(want.log.iter().filter(|d| d.overridden).count() == 4);
    for cut in [0, 4, 7, 12] {
        let mut g = Guest::boot(5);
        g.k.set_decision_overrides(overrides.clone());
        g.run(0..cut);
        assert_eq!(g.k.decision_count(), cut as u64);
        // Clone.
        let mut c = Guest { k: g.k.clone(), m: g.m.clone(), buf: g.buf, fd: g.fd, seen: g.seen.clone() };
        c.run(cut..STEPS);
        assert_eq!(c.finish(), want, "clone at {cut}");
        // Save and restore.
        let k = Kernel::restore(&g.k.save()).unwrap();
        assert_eq!(k.decision_overrides(), &overrides);
        assert_eq!(k.decisions(), g.k.decisions());
        let mut r = Guest { k, m: g.m.clone(), buf: g.buf, fd: g.fd, seen: g.seen.clone() };
        r.run(cut..STEPS);
        assert_eq!(r.finish(), want, "restore at {cut}");
    }
}

#[test]
fn overrides_set_on_a_fork_steer_only_later_decisions() {
    let cut = 6;
    let mut parent = Guest::boot(11);
    parent.run(0..cut);
    let mut child = Guest { k: parent.k.clone(), m: parent.m.clone(), buf: 0, fd: 0, seen: parent.seen.clone() };
    (child.buf, child.fd) = (parent.buf, parent.fd);
    parent.run(cut..STEPS);
    let parent = parent.finish();
    // Decision 2 was taken before the fork: its override is too late. 9 and 11 are steered.
    let (late, early) = (9usize, 2usize);
    let steer = BTreeMap::from([
        (early as u64, other_choice(&parent.log[early])),
        (late as u64, other_choice(&parent.log[late])),
        (11, other_choice(&parent.log[11])),
    ]);
    child.k.set_decision_overrides(steer.clone());
    child.run(cut..STEPS);
    let child = child.finish();
    assert_eq!(child.random, parent.random);
    for (j, (c, p)) in child.log.iter().zip(&parent.log).enumerate() {
        if j == late || j == 11 {
            assert_eq!((c.choice, c.overridden), (steer[&(j as u64)], true));
        } else {
            assert_eq!((c.choice, c.overridden), (p.choice, false), "decision {j}");
        }
    }
    // Replacing the set drops the earlier overrides.
    let mut g = Guest::boot(11);
    g.k.set_decision_overrides(steer);
    g.k.set_decision_overrides(BTreeMap::new());
    g.run(0..STEPS);
    assert_eq!(g.finish(), parent);
}

#[test]
fn fault_config_can_change_mid_run() {
    let mut g = Guest::boot(4);
    g.k.set_fault_config(FaultConfig::default());
    g.run(0..4);
    assert_eq!(g.k.decision_count(), 3, "no write decision without faults");
    g.k.set_fault_config(FaultConfig { eio_on_write_ppm: 1_000_000, ..Default::default() });
    g.run(4..8);
    assert_eq!(g.seen.values[7] as i64, EIO);
    assert_eq!(g.k.decisions()[6].point, "eio on write #2 to /data/x", "write counting goes on");
    // The crash point counts durable writes from program start.
    let (k, m, fd) = (&mut g.k, &mut g.m, g.fd);
    k.set_fault_config(FaultConfig::default());
    assert_eq!(sc(k, m, "fsync", &[fd]), 0);
    let d = k.durable_writes();
    assert!(d >= 1);
    k.set_fault_config(FaultConfig { crash_after_durable_write: Some(d), ..Default::default() });
    assert_eq!(sc(k, m, "write", &[fd, g.buf, 4]), 4);
    assert_eq!(sc(k, m, "fsync", &[fd]), 0, "a crash point already passed never fires");
    let d = k.durable_writes();
    k.set_fault_config(FaultConfig { crash_after_durable_write: Some(d + 1), ..Default::default() });
    assert_eq!(sc(k, m, "write", &[fd, g.buf, 4]), 4);
    assert_eq!(sc_exit(k, m, "fsync", &[fd, 0]), SyscallOutcome::Crash);
}

#[test]
fn restore_checks_the_decision_log() {
    let mut g = Guest::boot(2);
    g.run(0..8);
    let good = g.k.clone();
    Kernel::restore(&good.save()).unwrap();
    type Corruption = Box<dyn Fn(&mut Kernel)>;
    let bad: Vec<Corruption> = vec![
        Box::new(|k| k.faults.log.decisions[3].index = 4),
        Box::new(|k| k.faults.log.decisions[1].choice = 3),
        Box::new(|k| {
            k.faults.log.decisions.remove(0);
        }),
        Box::new(|k| k.faults.sdk_randoms = 7),
        Box::new(|k| k.faults.sdk_choices = u64::MAX),
    ];
    for (i, f) in bad.iter().enumerate() {
        let mut k = good.clone();
        f(&mut k);
        assert!(matches!(Kernel::restore(&k.save()), Err(RestoreError::Invalid { .. })), "corruption {i}");
    }
    // A full-range decision may hold any value.
    let mut k = good.clone();
    k.faults.log.decisions[0].choice = u64::MAX;
    Kernel::restore(&k.save()).unwrap();
}

#[test]
fn a_decision_reseed_keeps_the_pinned_prefix_and_redraws_the_rest() {
    let parent = run_with(1, BTreeMap::new());
    let cut = 6u64;
    let pinned: BTreeMap<u64, u64> = parent.log.iter().take(cut as usize).map(|d| (d.index, d.choice)).collect();
    let child = |seed: u64| {
        let mut g = Guest::boot(1);
        g.k.set_decision_overrides(pinned.clone());
        g.k.reseed_decisions(seed);
        g.run(0..STEPS);
        g.finish()
    };
    let (a, b) = (child(99), child(99));
    assert_eq!(a, b, "a reseeded child is deterministic");
    let choices = |s: &Seen| s.log.iter().map(|d| d.choice).collect::<Vec<_>>();
    assert_eq!(choices(&a)[..cut as usize], choices(&parent)[..cut as usize], "the prefix is the parent's");
    assert_ne!(choices(&a)[cut as usize..], choices(&parent)[cut as usize..], "what follows is drawn afresh");
    assert_eq!(a.random, parent.random, "random bytes are not decisions: they stay the run's own");
    assert_ne!(choices(&child(100))[cut as usize..], choices(&a)[cut as usize..], "another seed, another course");
}

/// One point of every variant, with odd data (spaces, the other variants' words, extremes).
fn every_point() -> Vec<DecisionPoint> {
    use DecisionPoint as P;
    let what = "write of 1100 bytes at 1000 to /data/wal kept that reached the disk";
    let mut v = vec![
        P::SdkRandom { n: 1 },
        P::SdkRandom { n: u64::MAX },
        P::SdkChoice { n: 6651, options: u64::MAX },
        P::SdkChoice { n: 0, options: 0 },
        P::Schedule { syscall: 12 },
        P::CrashKeep { what: what.into() },
        P::CrashKeep { what: String::new() },
        P::FailedSyncKeep { what: what.into() },
        P::CrashSectorsKept { what: what.into() },
        P::CrashSectorsKept { what: "x that reached the disk".into() },
        P::CrashPrefix { pending: 7 },
        P::CrashSectorsReached { what: what.into() },
        P::CrashSectorsReached { what: "x kept".into() },
        P::RunNode { at: 1_500_000_000 },
        P::Other("torn /data/wal".into()),
        P::Other("sdk random #07".into()),
        P::Other(String::new()),
    ];
    v.extend(P::WORDS_ONLY);
    for errno in [IoErrno::Eio, IoErrno::Enospc] {
        for op in IoOp::ALL {
            v.push(P::IoError { errno, op, nth: 4, path: "/data/a dir/of to x".into() });
        }
    }
    for kind in RandomFault::ALL {
        v.push(P::Gap(kind));
        v.push(P::Target(kind));
    }
    v
}

#[test]
fn every_decision_point_reads_back_from_its_words() {
    for p in every_point() {
        let words = p.to_string();
        assert_eq!(words.parse::<DecisionPoint>().unwrap(), p, "{words:?}");
        assert!(p == words.as_str() && p != format!("{words} ").as_str() && (words.is_empty() || p != &words[1..]));
        let json = serde_json::to_string(&p).unwrap();
        assert_eq!(json, serde_json::to_string(&words).unwrap(), "serialized as its words");
        assert_eq!(serde_json::from_str::<DecisionPoint>(&json).unwrap(), p);
        let bytes = postcard::to_allocvec(&p).unwrap();
        assert_eq!(bytes, postcard::to_allocvec(&words).unwrap(), "postcard: as a string");
        assert_eq!(postcard::from_bytes::<DecisionPoint>(&bytes).unwrap(), p);
    }
}

#[test]
fn the_points_deja_writes_parse_to_their_variants() {
    use DecisionPoint as P;
    let cases = [
        ("sdk random #3", P::SdkRandom { n: 3 }),
        ("sdk choice #5 of 3", P::SdkChoice { n: 5, options: 3 }),
        (
            "eio on write #4 to /data/wal",
            P::IoError { errno: IoErrno::Eio, op: IoOp::Write, nth: 4, path: "/data/wal".into() },
        ),
        ("eio on fsync #1 of /", P::IoError { errno: IoErrno::Eio, op: IoOp::Fsync, nth: 1, path: "/".into() }),
        (
            "enospc on write #2 to /data/x",
            P::IoError { errno: IoErrno::Enospc, op: IoOp::Write, nth: 2, path: "/data/x".into() },
        ),
        ("schedule after syscall 41", P::Schedule { syscall: 41 }),
        (
            "crash state: keep size of /data/wal set to 1500",
            P::CrashKeep { what: "size of /data/wal set to 1500".into() },
        ),
        ("crash state: cut one kept write", P::CrashCutOne),
        (
            "crash state: sectors of write of 4096 bytes at 0 to /data/wal kept",
            P::CrashSectorsKept { what: "write of 4096 bytes at 0 to /data/wal".into() },
        ),
        ("crash state: prefix of the 2 pending operations", P::CrashPrefix { pending: 2 }),
        (
            "crash state: sectors of write of 1100 bytes at 1000 to /data/wal that reached the disk",
            P::CrashSectorsReached { what: "write of 1100 bytes at 1000 to /data/wal".into() },
        ),
        ("network latency", P::NetworkLatency),
        ("udp loss", P::UdpLoss),
        ("udp reorder", P::UdpReorder),
        ("udp duplicate", P::UdpDuplicate),
        ("run node at 2000000", P::RunNode { at: 2_000_000 }),
        ("partition gap", P::Gap(RandomFault::Partition)),
        ("kill gap", P::Gap(RandomFault::Kill)),
        ("pause gap", P::Gap(RandomFault::Pause)),
        ("clock gap", P::Gap(RandomFault::Clock)),
        ("kill target", P::Target(RandomFault::Kill)),
        ("pause target", P::Target(RandomFault::Pause)),
        ("clock target", P::Target(RandomFault::Clock)),
        ("partition sides", P::PartitionSides),
        ("partition one way", P::PartitionOneWay),
        ("partition length", P::PartitionLength),
        ("down length", P::DownLength),
        ("pause length", P::PauseLength),
        ("clock jump", P::ClockJump),
        // Points of older files, and near misses, are kept as written.
        ("torn /data/wal", P::Other("torn /data/wal".into())),
        ("reorder /data/wal op 2/3", P::Other("reorder /data/wal op 2/3".into())),
        ("sdk choice #+5 of 3", P::Other("sdk choice #+5 of 3".into())),
        ("eio on sync #1 of /", P::Other("eio on sync #1 of /".into())),
        ("eio on write #1 of /x", P::Other("eio on write #1 of /x".into())),
        ("crash state: sectors of x", P::Other("crash state: sectors of x".into())),
        ("partition direction", P::Other("partition direction".into())),
    ];
    for (words, want) in cases {
        let p: DecisionPoint = words.parse().unwrap();
        assert_eq!(p, want, "{words:?}");
        assert_eq!(p.to_string(), words);
    }
}

#[test]
fn fault_and_structural_points_are_those_the_words_said() {
    // The rules the explorer applied to the words, before points had a type.
    let fault = |p: &str| ["partition", "kill", "down", "pause", "clock", "udp"].iter().any(|k| p.starts_with(k));
    let structural = |p: &str| ["sides", "one way", "direction", "target"].iter().any(|k| p.ends_with(k));
    let kernel = |p: &DecisionPoint| {
        matches!(
            p,
            DecisionPoint::SdkRandom { .. }
                | DecisionPoint::SdkChoice { .. }
                | DecisionPoint::IoError { .. }
                | DecisionPoint::Schedule { .. }
                | DecisionPoint::CrashKeep { .. }
                | DecisionPoint::CrashCutOne
                | DecisionPoint::CrashSectorsKept { .. }
                | DecisionPoint::CrashPrefix { .. }
                | DecisionPoint::CrashSectorsReached { .. }
                | DecisionPoint::FailedSyncKeep { .. }
        )
    };
    let mut points = every_point();
    points.push(DecisionPoint::Other("partition direction".into()));
    points.push(DecisionPoint::Other("udp corrupt".into()));
    for p in points {
        let words = p.to_string();
        // A cluster's log, the only one the explorer classifies, holds no kernel point.
        if kernel(&p) {
            assert!(!p.is_fault_point() && !p.is_structural(), "{words:?}");
            continue;
        }
        assert_eq!(p.is_fault_point(), fault(&words), "{words:?}");
        assert_eq!(p.is_structural(), structural(&words), "{words:?}");
    }
}
