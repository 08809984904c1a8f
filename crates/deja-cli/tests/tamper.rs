//! Tampering: one real artifact of every kind deja reads back (a bug file, a cluster bug file,
//! a campaign checkpoint, a capsule, a certificate and a snapshot), each byte of it flipped, each
//! length of it cut, and a copy of it from a newer schema. Every damaged copy is refused, naming
//! the file and the check that failed, or reads as exactly what was written (a flip that only
//! changes formatting); a newer one is refused with the version it needs. The commands that
//! read each kind refuse the damaged copies with their exit code and lose nothing.

use crate::common::*;
use std::path::{Path, PathBuf};

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("deja-tamper-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

fn only_bug(out: &Path) -> PathBuf {
    let bugs = bug_files(out);
    assert_eq!(bugs.len(), 1, "{bugs:?}");
    bugs[0].clone()
}

/// Flips one bit of every byte (bit `i % 8` of byte `i`, and every bit of the first 64 bytes),
/// and cuts the file at every length: each result is refused with a message that passes
/// `named`, or reads back equal to the original. Returns (refused, unchanged). The damaged
/// copies are read on every core, each thread taking every n-th of them.
fn every_byte<T: PartialEq + std::fmt::Debug + Sync>(
    what: &str,
    good: &[u8],
    open: impl Fn(&[u8]) -> Result<T, String> + Sync,
    named: impl Fn(&str) -> bool + Sync,
) -> (u64, u64) {
    let original = open(good).unwrap_or_else(|e| panic!("{what}: the good file is refused: {e}"));
    // True when refused, false when read back unchanged.
    let judge = |bad: &[u8], how: &str| match open(bad) {
        Err(e) => {
            assert!(named(&e), "{what}, {how}: the message does not name the file and its check: {e}");
            true
        }
        Ok(back) => {
            assert_eq!(back, original, "{what}, {how}: accepted with another content");
            false
        }
    };
    // Every damaged copy, as (byte, bit) for a flip or (length, None) for a cut.
    let mut damage: Vec<(usize, Option<u32>)> = Vec::new();
    for at in 0..good.len() {
        let bits: Vec<u32> = if at < 64 { (0..8).collect() } else { vec![at as u32 % 8] };
        damage.extend(bits.into_iter().map(|bit| (at, Some(bit))));
    }
    damage.extend((0..good.len()).map(|len| (len, None)));
    let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let one = |&(at, bit): &(usize, Option<u32>)| match bit {
        Some(bit) => {
            let mut bad = good.to_vec();
            bad[at] ^= 1 << bit;
            judge(&bad, &format!("bit {bit} of byte {at} flipped"))
        }
        None => {
            let was_refused = judge(&good[..at], &format!("cut at {at} bytes"));
            if good[at..].iter().any(|b| !b.is_ascii_whitespace()) {
                assert!(was_refused, "{what}: a file cut at {at} of {} bytes was accepted", good.len());
            }
            was_refused
        }
    };
    let refused: u64 = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let (damage, one) = (&damage, &one);
                scope.spawn(move || damage.iter().skip(t).step_by(threads).filter(|d| one(d)).count() as u64)
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap_or_else(|e| std::panic::resume_unwind(e))).sum()
    });
    let unchanged = damage.len() as u64 - refused;
    assert!(refused > good.len() as u64, "{what}: {refused} refusals");
    (refused, unchanged)
}

/// A JSON artifact with its `schema` set to `schema`, resealed when it carries a seal.
fn with_schema(good: &[u8], schema: &str) -> Vec<u8> {
    let mut v: serde_json::Value = serde_json::from_slice(good).unwrap();
    v["schema"] = schema.into();
    if v.get("seal").is_some() {
        v["seal"] = deja_format::json::seal_of(&v).into();
    }
    serde_json::to_vec_pretty(&v).unwrap()
}

struct Artifacts {
    bug: PathBuf,
    checkpoint_dir: PathBuf,
    cluster_bug: PathBuf,
    capsule: PathBuf,
    certificate: PathBuf,
    snapshot: PathBuf,
}

fn artifacts(d: &Path) -> Artifacts {
    let kv = s(&guest("kv"));
    let campaign = d.join("kv");
    let o = deja(&[
        "explore",
        "--quiet",
        "--out",
        &s(&campaign),
        "--runs",
        "6",
        "--mode",
        "faults",
        &kv,
        "--",
        "--variant",
        "buggy",
        "6",
    ]);
    assert_eq!(o.status.code(), Some(1), "a bug: {}", stderr(&o));
    let register = s(&root().join("examples/clusters/register-buggy.toml"));
    let cluster = d.join("register");
    let o = deja(&[
        "explore",
        "--quiet",
        "--out",
        &s(&cluster),
        "--runs",
        "30",
        "--mode",
        "faults",
        "--seed",
        "1",
        &register,
    ]);
    assert_eq!(o.status.code(), Some(1), "a cluster bug: {}", stderr(&o));
    let check = d.join("check");
    let o = deja(&[
        "check",
        "--base",
        &s(&guest("credit-buggy")),
        "--candidate",
        &s(&guest("credit-atomic")),
        "--out",
        &s(&check),
    ]);
    assert_eq!(o.status.code(), Some(0), "a certificate: {}", stderr(&o));
    let snapshot = d.join("hello.deja");
    let o = deja(&["run", "--no-probe", "--snapshot-at", "3", "--snapshot-out", &s(&snapshot), &s(&guest("hello"))]);
    assert_eq!(o.status.code(), Some(0), "a snapshot: {}", stderr(&o));
    Artifacts {
        bug: only_bug(&campaign),
        checkpoint_dir: campaign,
        cluster_bug: only_bug(&cluster),
        capsule: check.join("capsule.json"),
        certificate: check.join("certificate.json"),
        snapshot,
    }
}

fn check_named(name: &str) -> impl Fn(&str) -> bool + '_ {
    move |e: &str| {
        e.starts_with(&format!("{name}: the "))
            && ["json", "schema", "seal", "fields", "id", "chain", "verdict"]
                .iter()
                .any(|c| e.contains(&format!("the {c} check failed")))
    }
}

#[test]
fn every_flipped_byte_of_every_kind_is_refused_or_changes_nothing() {
    let d = dir("flips");
    let a = artifacts(&d);
    let mut table = vec!["| artifact | bytes | refused | unchanged (formatting only) |".to_string()];
    let mut row = |what: &str, len: usize, (r, u): (u64, u64)| table.push(format!("| {what} | {len} | {r} | {u} |"));

    let bug = std::fs::read(&a.bug).unwrap();
    let f = |b: &[u8]| deja_explore::BugFile::parse("bug.json", b).map_err(|e| e.to_string());
    row("bug file", bug.len(), every_byte("bug file", &bug, f, check_named("bug.json")));

    let cbug = std::fs::read(&a.cluster_bug).unwrap();
    let f = |b: &[u8]| deja_explore::ClusterBug::parse("cbug.json", b).map_err(|e| e.to_string());
    row("cluster bug file", cbug.len(), every_byte("cluster bug file", &cbug, f, check_named("cbug.json")));

    let checkpoint = std::fs::read(a.checkpoint_dir.join("checkpoint.json")).unwrap();
    let schema = deja_explore::campaign::CHECKPOINT_SCHEMA;
    let f = |b: &[u8]| schema.check("checkpoint.json", b).map(|(doc, _)| doc).map_err(|e| e.to_string());
    row(
        "campaign checkpoint",
        checkpoint.len(),
        every_byte("checkpoint", &checkpoint, f, check_named("checkpoint.json")),
    );

    let capsule = std::fs::read(&a.capsule).unwrap();
    let f = |b: &[u8]| deja_judge::Capsule::parse("capsule.json", b).map_err(|e| e.to_string());
    row("capsule", capsule.len(), every_byte("capsule", &capsule, f, check_named("capsule.json")));

    let cert = std::fs::read(&a.certificate).unwrap();
    let f = |b: &[u8]| {
        let c = deja_judge::Certificate::parse("cert.json", b).map_err(|e| e.to_string())?;
        c.verify().map_err(|e| format!("cert.json: {e}"))?;
        Ok(c)
    };
    row("certificate", cert.len(), every_byte("certificate", &cert, f, check_named("cert.json")));

    // A snapshot is a binary envelope: no flip leaves it readable (the CLI names the file).
    let snap = std::fs::read(&a.snapshot).unwrap();
    let f = |b: &[u8]| deja_vmm::Snapshot::from_artifact(b).map(|s| s.to_artifact()).map_err(|e| e.to_string());
    let (r, u) = every_byte("snapshot", &snap, f, |e| !e.is_empty());
    assert_eq!(u, 0, "a snapshot with a flipped bit read back");
    row("snapshot", snap.len(), (r, u));

    let text = table.join("\n");
    eprintln!("{text}");
    std::fs::write(root().join("target/tamper-table.md"), format!("{text}\n")).unwrap();
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn the_commands_refuse_damaged_and_newer_artifacts_and_lose_nothing() {
    let d = dir("commands");
    let a = artifacts(&d);
    let write = |name: &str, bytes: &[u8]| {
        let p = d.join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    };
    let run = |args: &[&str], code: i32, needles: &[&str]| {
        let o = deja(args);
        assert_eq!(o.status.code(), Some(code), "{args:?}: {}", stderr(&o));
        for n in needles {
            assert!(stderr(&o).contains(n), "{args:?}: no {n:?} in {}", stderr(&o));
        }
    };
    let altered = |good: &[u8], needle: &str| {
        let mut b = good.to_vec();
        // The first digit of the value after `needle`, changed.
        let at = String::from_utf8_lossy(good).find(needle).unwrap_or_else(|| panic!("no {needle}")) + needle.len();
        b[at] = if b[at] == b'9' { b'8' } else { b[at] + 1 };
        b
    };

    // Bug files and cluster bug files: a changed digit, a cut, a newer schema. `replay`,
    // `minimize` and `inspect` refuse each and leave it as it was.
    let bug = std::fs::read(&a.bug).unwrap();
    let cbug = std::fs::read(&a.cluster_bug).unwrap();
    let cases = [
        ("bug-flipped.json", altered(&bug, "\"seed\": "), "the seal check failed"),
        ("bug-cut.json", bug[..bug.len() / 2].to_vec(), "the json check failed"),
        ("bug-newer.json", with_schema(&bug, "deja.bug/7"), "is deja.bug/7, written by a newer deja"),
        ("cbug-flipped.json", altered(&cbug, "\"found_at_round\": "), "the seal check failed"),
        ("cbug-cut.json", cbug[..cbug.len() - 3].to_vec(), "the json check failed"),
        ("cbug-newer.json", with_schema(&cbug, "deja.cluster-bug/3"), "is deja.cluster-bug/3, written by a newer deja"),
    ];
    for (name, bytes, needle) in &cases {
        let p = write(name, bytes);
        for cmd in ["replay", "minimize", "inspect"] {
            run(&[cmd, &s(&p)], 126, &[&s(&p), needle]);
        }
        assert_eq!(&std::fs::read(&p).unwrap(), bytes, "{name}: the refused file is left as it was");
    }
    run(&["replay", &s(&a.bug)], 1, &["reproduced bug"]);

    // Checkpoints: resume and merge refuse them and leave the campaign as it was.
    let cp_path = a.checkpoint_dir.join("checkpoint.json");
    let cp = std::fs::read(&cp_path).unwrap();
    let kv = s(&guest("kv"));
    for (bytes, needle) in [
        (altered(&cp, "\"round\": "), "the seal check failed"),
        (cp[..cp.len() - 10].to_vec(), "the json check failed"),
        (with_schema(&cp, "deja.campaign-checkpoint/9"), "is deja.campaign-checkpoint/9, written by a newer deja"),
    ] {
        std::fs::write(&cp_path, &bytes).unwrap();
        let out = s(&a.checkpoint_dir);
        run(
            &[
                "explore",
                "--quiet",
                "--resume",
                "--out",
                &out,
                "--runs",
                "8",
                "--mode",
                "faults",
                &kv,
                "--",
                "--variant",
                "buggy",
                "6",
            ],
            3,
            &[&s(&cp_path), needle],
        );
        run(&["merge", "--out", &s(&d.join("merged")), &out], 3, &[&s(&cp_path), needle]);
        run(&["inspect", &s(&cp_path)], 126, &[&s(&cp_path), needle]);
        assert_eq!(std::fs::read(&cp_path).unwrap(), bytes, "the refused checkpoint is left as it was");
    }
    std::fs::write(&cp_path, &cp).unwrap();
    run(&["inspect", &s(&cp_path)], 0, &[]);

    // Capsules and certificates.
    let capsule = std::fs::read(&a.capsule).unwrap();
    let (base, cand) = (s(&guest("credit-buggy")), s(&guest("credit-atomic")));
    for (name, bytes, needle) in [
        ("capsule-flipped.json", altered(&capsule, "\"seed\": "), "the id check failed"),
        ("capsule-cut.json", capsule[..capsule.len() / 3].to_vec(), "the json check failed"),
        ("capsule-newer.json", with_schema(&capsule, "deja.capsule/2"), "is deja.capsule/2, written by a newer deja"),
    ] {
        let p = write(name, &bytes);
        let out = s(&d.join(format!("{name}.out")));
        run(
            &["check", "--base", &base, "--candidate", &cand, "--capsule", &s(&p), "--out", &out],
            126,
            &[&s(&p), needle],
        );
        run(&["inspect", &s(&p)], 126, &[&s(&p), needle]);
    }
    let cert = std::fs::read(&a.certificate).unwrap();
    for (name, bytes, needle) in [
        ("cert-flipped.json", altered(&cert, "\"exit_code\": "), "the chain check failed"),
        ("cert-cut.json", cert[..cert.len() - 1].to_vec(), "the json check failed"),
        ("cert-newer.json", with_schema(&cert, "deja.certificate/2"), "is deja.certificate/2, written by a newer deja"),
    ] {
        let p = write(name, &bytes);
        run(&["verify-certificate", &s(&p)], 1, &[&s(&p), needle]);
        run(&["inspect", &s(&p)], 126, &[&s(&p), needle]);
    }

    // Snapshots: a newer payload schema names the version it needs.
    let snap = std::fs::read(&a.snapshot).unwrap();
    let env = deja_format::decode(&snap).unwrap();
    let newer = deja_format::encode(deja_format::Kind::Snapshot, env.schema + 1, &env.payload);
    let p = write("newer.deja", &newer);
    let need = format!("snapshot schema version {} is not supported", env.schema + 1);
    let reads = format!("read it with a deja that reads version {}", env.schema + 1);
    run(&["run", "--no-probe", "--from-snapshot", &s(&p)], 126, &[&s(&p), &need, &reads]);
    run(&["inspect", &s(&p)], 126, &[&s(&p), &need]);
    std::fs::remove_dir_all(&d).ok();
}
