//! Snapshots and forks end to end on real KVM: equivalence with uninterrupted runs, exact fork
//! resets, refusal of damaged files.

use crate::common::*;
use deja_kernel::ProgramSpec;
use std::path::{Path, PathBuf};

fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("deja-snap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// The trace of a run, as `--trace-out` writes it.
fn trace(args: &[&str]) -> Vec<serde_json::Value> {
    let path = tmp(&format!("trace-{}.jsonl", args.len()));
    let mut full = vec!["--trace-out", path.to_str().unwrap()];
    full.extend_from_slice(args);
    run_json(&full);
    let lines = std::fs::read_to_string(&path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    std::fs::remove_file(&path).ok();
    lines
}

/// Runs whole, then with a snapshot at `n` restored in a fresh process, and compares.
fn assert_equivalent_at(n: u64, run_args: &[&str]) {
    let (full, full_v) = run_json(run_args);
    let snap = tmp(&format!("at-{n}.deja"));
    let mut with_snap = vec!["--snapshot-at".to_string(), n.to_string(), "--snapshot-out".into(), s(&snap)];
    with_snap.extend(run_args.iter().map(|a| a.to_string()));
    let with_snap: Vec<&str> = with_snap.iter().map(String::as_str).collect();
    let (first, first_v) = run_json(&with_snap);
    assert_eq!(first.stdout, full.stdout, "taking a snapshot must not change the run");
    assert_eq!(first_v["digest"], full_v["digest"]);
    let (resumed, resumed_v) = run_json(&["--from-snapshot", &s(&snap)]);
    assert_eq!(resumed_v["digest"], full_v["digest"], "snapshot at {n}: {}", stderr(&resumed));
    assert_eq!(resumed_v["exit_code"], full_v["exit_code"]);
    assert!(full.stdout.ends_with(&resumed.stdout), "snapshot at {n}: the continuation printed something else");
    let inspect = deja(&["inspect", "--json", &s(&snap)]);
    let v: serde_json::Value = serde_json::from_slice(&inspect.stdout).unwrap();
    assert_eq!(v["kind"], "snapshot");
    assert_eq!(v["snapshot"]["syscall_index"], n);
    std::fs::remove_file(&snap).ok();
}

#[test]
fn snapshot_restore_in_a_fresh_process_equals_the_full_run() {
    // timerand: at the first syscall, right after getrandom, in the middle, at exit.
    let t = s(&guest("timerand"));
    let args = ["--seed", "11", t.as_str()];
    let tr = trace(&args);
    let getrandom = tr.iter().position(|e| e["name"] == "getrandom").expect("timerand draws randomness") as u64;
    let last = tr.len() as u64 - 1;
    for n in [0, getrandom + 1, tr.len() as u64 / 2, last] {
        assert_equivalent_at(n, &args);
    }
    assert!(!tr.is_empty());
}

#[test]
fn snapshot_inside_a_file_read_continues_the_read() {
    let data = tmp("big.txt");
    let text: String = (0..4000).map(|i| format!("line {i}\n")).collect();
    std::fs::write(&data, &text).unwrap();
    let decl = format!("{}:/data/big.txt", data.display());
    let cat = s(&guest("cat"));
    let args = ["--file", decl.as_str(), cat.as_str(), "--", "/data/big.txt"];
    let tr = trace(&args);
    let open = tr.iter().position(|e| e["name"] == "openat" && e["ret"].as_u64().unwrap_or(u64::MAX) < 100).unwrap();
    let fd = tr[open]["ret"].as_u64().unwrap();
    let reads: Vec<u64> =
        tr.iter().filter(|e| e["name"] == "read" && e["args"][0] == fd).map(|e| e["index"].as_u64().unwrap()).collect();
    assert!(reads.len() >= 2, "the file is read in several calls: {reads:?}");
    // Between two reads of the same file: the offset lives in the snapshot.
    assert_equivalent_at(reads[1], &args);
    std::fs::remove_file(&data).ok();
}

#[test]
fn snapshot_point_after_the_end_is_missing_evidence() {
    let out = deja(&[
        "run",
        "--no-probe",
        "--snapshot-at",
        "100000",
        "--snapshot-out",
        &s(&tmp("never.deja")),
        &s(&guest("hello")),
    ]);
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(stderr(&out).contains("no snapshot was written"), "{}", stderr(&out));
    assert!(!tmp("never.deja").exists());
}

#[test]
fn damaged_snapshots_are_refused_with_clear_errors() {
    let good = tmp("good.deja");
    let out = deja(&["run", "--no-probe", "--snapshot-at", "3", "--snapshot-out", &s(&good), &s(&guest("hello"))]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let bytes = std::fs::read(&good).unwrap();
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "flipped",
            {
                let mut b = bytes.clone();
                let at = b.len() / 2;
                b[at] ^= 0x01;
                b
            },
            "damaged",
        ),
        ("truncated", bytes[..bytes.len() - 100].to_vec(), "truncated"),
        (
            "version",
            {
                let mut b = bytes.clone();
                b[8] = 9;
                let h = blake3::hash(&b[..100]);
                b[100..132].copy_from_slice(h.as_bytes());
                b
            },
            "version 9 is not supported",
        ),
        ("notdeja", b"#!/bin/sh\n".to_vec(), "not a deja artifact"),
    ];
    for (name, data, message) in cases {
        let path = tmp(&format!("{name}.deja"));
        std::fs::write(&path, data).unwrap();
        for cmd in [
            vec!["run", "--no-probe", "--from-snapshot", path.to_str().unwrap()],
            vec!["inspect", path.to_str().unwrap()],
        ] {
            let out = deja(&cmd);
            assert_eq!(out.status.code(), Some(126), "{name} {cmd:?}: {}", stderr(&out));
            assert!(stderr(&out).contains(message), "{name} {cmd:?}: {}", stderr(&out));
            assert!(out.stdout.is_empty(), "nothing ran");
        }
    }
    let out = deja(&["inspect", &s(&good)]);
    assert_eq!(out.status.code(), Some(0));
    assert!(stdout(&out).contains("at syscall        3"), "{}", stdout(&out));
}

fn spec(name: &str, args: &[&str], seed: u64) -> ProgramSpec {
    let path = guest(name);
    let mut argv = vec![format!("/bin/{name}")];
    argv.extend(args.iter().map(|a| a.to_string()));
    ProgramSpec { image: std::fs::read(path).unwrap(), exe_path: argv[0].clone(), argv, seed, ..Default::default() }
}

#[test]
fn a_hundred_children_of_one_parent_agree_and_another_decision_diverges() {
    let mut traced = spec("timerand", &[], 4);
    traced.record_trace = true;
    let whole = deja_vmm::Session::boot(traced.clone(), 256 << 20).unwrap().run(&mut |_, _| {}).unwrap();
    let at = whole.report.trace.iter().position(|e| e.name == "getrandom").unwrap() as u64;
    let mut fork =
        deja_vmm::Fork::new(spec("timerand", &[], 4), 256 << 20, &deja_vmm::Settings::default(), at, &mut |_, _| {})
            .unwrap();
    let mut digests = std::collections::BTreeSet::new();
    let mut outputs = std::collections::BTreeSet::new();
    for _ in 0..100 {
        let mut out = Vec::new();
        let child = fork.run_child(None, &mut |_, b| out.extend_from_slice(b)).unwrap();
        digests.insert(child.report.digest.clone());
        outputs.insert(out);
    }
    assert_eq!(digests.len(), 1, "100 children of one parent must agree");
    assert_eq!(outputs.len(), 1);
    assert_eq!(digests.first().unwrap(), &whole.report.digest, "a child equals the uninterrupted run");
    let other = fork.run_child(Some(99), &mut |_, _| {}).unwrap();
    assert_ne!(&other.report.digest, digests.first().unwrap(), "a child with other random decisions diverges");
    let again = fork.run_child(None, &mut |_, _| {}).unwrap();
    assert_eq!(&again.report.digest, digests.first().unwrap(), "and the next child is back to the parent's course");
    // The children mapped memory the parent had not: resetting replays those entries.
    let stats = fork.reset().unwrap();
    assert!(stats.resynced_entries > 0, "{stats:?}");
}

#[test]
fn fork_reset_restores_the_parents_memory_bit_for_bit() {
    let mut traced = spec("dirty", &["3000"], 1);
    traced.record_trace = true;
    let whole = deja_vmm::Session::boot(traced, 256 << 20).unwrap().run(&mut |_, _| {}).unwrap();
    let marks: Vec<u64> = whole.report.trace.iter().filter(|e| e.name == "sched_yield").map(|e| e.index).collect();
    let mut fork = deja_vmm::Fork::new(
        spec("dirty", &["3000"], 1),
        256 << 20,
        &deja_vmm::Settings::default(),
        marks[0],
        &mut |_, _| {},
    )
    .unwrap();
    let parent = fork.parent_ram_digest();
    assert_eq!(fork.ram_digest(), parent, "the parent image is what the VM holds");
    let child = fork.run_child(None, &mut |_, _| {}).unwrap();
    assert_eq!(child.report.digest, whole.report.digest);
    assert_ne!(fork.ram_digest(), parent, "the child changed guest memory");
    let stats = fork.reset().unwrap();
    assert!(stats.dirty_frames >= 3000, "{stats:?}");
    assert_eq!(fork.ram_digest(), parent, "reset restores every byte of guest RAM");
    // And the VM still runs correctly from there, many times.
    for _ in 0..5 {
        let child = fork.run_child(None, &mut |_, _| {}).unwrap();
        assert_eq!(child.report.digest, whole.report.digest);
    }
}

/// One child of a program's fork: its lives' digests, its decisions and its cuts.
fn late_child(
    fork: &mut deja_vmm::Fork,
    overrides: &std::collections::BTreeMap<u64, u64>,
    reseed: Option<u64>,
    take: Option<u64>,
) -> (Vec<String>, Vec<(u64, u64)>, Vec<u64>) {
    let mut prepare = |k: &mut deja_kernel::Kernel| {
        k.set_decision_overrides(overrides.clone());
        if let Some(s) = reseed {
            k.reseed_decisions(s);
        }
    };
    let lives = fork.run_child_late(&mut prepare, b"faults", overrides, reseed, take, &mut |_, _| {}).unwrap();
    let digests = lives.iter().map(|l| l.run.report.digest.clone()).collect();
    let decisions = lives[0].run.report.decisions.iter().map(|d| (d.options, d.choice)).collect();
    (digests, decisions, lives[0].run.cuts.clone())
}

#[test]
fn a_programs_child_from_a_later_fork_is_the_child_of_the_fork_point() {
    use std::collections::BTreeMap;
    let fresh = || {
        deja_vmm::Fork::new(spec("bank", &["20"], 4), 256 << 20, &deja_vmm::Settings::default(), 1, &mut |_, _| {})
            .unwrap()
    };
    let (mut fork, mut plain) = (fresh(), fresh());
    plain.set_late_forks(0);
    let base = fork.parent_kernel().decision_count();
    let none = BTreeMap::new();
    let whole = late_child(&mut plain, &none, None, None);
    let n = whole.1.len() as u64;
    assert!(n > base + 20, "{n} decisions, {base} before the fork point");
    let cuts = &whole.2;
    assert!(cuts.windows(2).all(|w| w[0] < w[1]) && cuts.len() > 10, "{cuts:?}");
    let k = cuts.iter().copied().filter(|&c| c > base && c <= base + (n - base) / 2).max().expect("a cut");

    // The child that leaves the later fork is the fork point's child.
    assert_eq!(late_child(&mut fork, &none, None, Some(k)), whole, "the child leaving a later fork at {k}");
    assert_eq!((fork.late_forks(), fork.last_start), (1, base));
    let flip = |at: u64| {
        let (options, choice) = whole.1[at as usize];
        BTreeMap::from([(at, (choice + 1) % options.max(2))])
    };
    let pinned = |to: u64| (base..to).map(|i| (i, whole.1[i as usize].1)).collect::<BTreeMap<u64, u64>>();
    let later = (k..n).find(|&i| whole.1[i as usize].0 > 1).expect("a decision to change");
    let earlier = (base..k).find(|&i| whole.1[i as usize].0 > 1).expect("a decision to change");
    for (what, overrides, reseed, start) in [
        ("a decision after it changed", flip(later), None, k),
        ("a tail cut after it, reseeded", pinned(k + 3), Some(77), k),
        ("the choices up to it pinned, the same stream", pinned(k), None, k),
        ("the untouched course", none.clone(), None, k),
        ("reseeded from the fork point", none.clone(), Some(77), base),
        ("a decision before it changed", flip(earlier), None, base),
        ("a tail cut before it, reseeded", pinned(k - 1), Some(78), base),
    ] {
        let expected = late_child(&mut plain, &overrides, reseed, None);
        let child = late_child(&mut fork, &overrides, reseed, None);
        assert_eq!(fork.last_start, start, "{what}: where the child started");
        assert_eq!(child, expected, "{what}: the same lives, decisions and cuts");
    }
    // A later fork of a later fork, then its child.
    let second = flip(later);
    let course = late_child(&mut plain, &second, None, None);
    let k2 = course.2.iter().copied().filter(|&c| c > later).min().expect("a cut after the change");
    assert_eq!(late_child(&mut fork, &second, None, Some(k2)), course);
    assert_eq!((fork.late_forks(), fork.last_start), (2, k));
    assert_eq!(late_child(&mut fork, &second, None, None), course);
    assert_eq!(fork.last_start, k2, "from the second later fork");
}
