//! The write-ahead-log service (`guest/walkv`): a server that acknowledges a put before it
//! fsyncs it is found by crashing it at its durable writes, as a cluster node and as one
//! program, on seeds 1 to 5; `deja check` judges the fix `FIXED_FOR_THIS_CAPSULE` against the
//! bug as found and as minimized; a server that still acknowledges before it fsyncs, whatever
//! its timer, is `STILL_REPRODUCES` or `NEW_FAILURE`.

use std::path::{Path, PathBuf};

use crate::common::*;
use serde_json::Value;

fn example(name: &str) -> String {
    guests();
    root().join("examples/clusters").join(name).to_string_lossy().into_owned()
}

fn walkv(variant: &str) -> String {
    guest(&format!("walkv-{variant}")).to_string_lossy().into_owned()
}

fn out_dir(name: &str) -> PathBuf {
    let d = root().join("target/test-walkv").join(name);
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// `deja explore` of `subject` on `seed` until the first bug: its bug file.
fn explore(name: &str, seed: u64, subject: &[&str]) -> PathBuf {
    let campaign = out_dir(name);
    let seed = seed.to_string();
    let mut args = vec![
        "explore",
        "--quiet",
        "--runs",
        "100",
        "--stop-at-first-bug",
        "--mode",
        "faults",
        "--jobs",
        "1",
        "--seed",
        &seed,
        "--out",
        campaign.to_str().unwrap(),
    ];
    args.extend_from_slice(subject);
    let o = deja(&args);
    assert_eq!(o.status.code(), Some(1), "{name}: the lost write is found: {}", stderr(&o));
    bug_file(&campaign)
}

/// `deja minimize`: the minimized bug file.
fn minimize(bug: &Path) -> PathBuf {
    let o = deja(&["minimize", bug.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    bug.with_extension("min.json")
}

/// `deja check --json` with `args`: the exit code and the certificate.
fn check(name: &str, args: &[&str]) -> (i32, Value) {
    let out = out_dir(name);
    let mut all = vec!["check", "--json", "--out", out.to_str().unwrap()];
    all.extend_from_slice(args);
    let o = deja(&all);
    let cert: Value = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
    assert!(cert.is_object(), "{name}: no certificate: {}", stderr(&o));
    (o.status.code().unwrap_or(-1), cert)
}

/// The detail of the check named `name` in a certificate.
fn detail<'a>(cert: &'a Value, name: &str) -> &'a str {
    cert["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .and_then(|c| c["detail"].as_str())
        .unwrap_or("")
}

fn still_failing(code: i32, cert: &Value) -> bool {
    code == 1 && (cert["verdict"] == "STILL_REPRODUCES" || cert["verdict"] == "NEW_FAILURE")
}

#[test]
fn as_a_cluster_the_lost_write_is_found_at_a_durable_write_and_only_the_fix_passes() {
    for seed in 1..=5u64 {
        let bug = explore(&format!("cluster-{seed}"), seed, &[&example("walkv-buggy.toml")]);
        let b = json(&bug);
        assert_eq!(b["signature"], "assertion failed on client: acknowledged writes survive", "seed {seed}");
        // The bug file names the crash at a durable write that lost it.
        let crashes: Vec<&str> = b["faults"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["kind"] == "crash")
            .filter_map(|f| f["detail"].as_str())
            .collect();
        assert!(
            crashes.iter().any(|d| d.contains("durable op #") && d.contains("/data/wal")),
            "seed {seed}: {crashes:?}"
        );
        let r = deja(&["replay", bug.to_str().unwrap()]);
        assert_eq!(r.status.code(), Some(1), "seed {seed}: {}", stderr(&r));
        let min = minimize(&bug);
        let m = json(&min);
        let kept = m["input"]["storage"].as_array().cloned().unwrap_or_default();
        assert!(kept.iter().any(|s| s["crash"]["path"] == "/data/wal"), "seed {seed}: minimized to a crash: {m}");
        // The fix holds against the bug as found and as minimized: the same verdict.
        for (which, file) in [("found", &bug), ("minimized", &min)] {
            let server = format!("server={}", walkv("fixed"));
            // 16 crash points in the storage sweep, spread over the durable operations (the
            // default, 64, is the README's checks' of this bug).
            let (code, cert) = check(
                &format!("cluster-{seed}-fixed-{which}"),
                &["--bug", file.to_str().unwrap(), "--candidate", &server, "--node-crash-points", "16"],
            );
            assert_eq!(
                (code, cert["verdict"].as_str()),
                (0, Some("FIXED_FOR_THIS_CAPSULE")),
                "seed {seed}, {which}: {cert}"
            );
            let sweep = detail(&cert, "sweep the candidate: each node crashed before and after its durable operations");
            assert!(sweep.contains("16 crash points, before and after"), "seed {seed}: {sweep}");
        }
        // Every server that acknowledges before it fsyncs fails.
        for variant in ["wrong", "buggy"] {
            let server = format!("server={}", walkv(variant));
            let (code, cert) =
                check(&format!("cluster-{seed}-{variant}"), &["--bug", bug.to_str().unwrap(), "--candidate", &server]);
            assert!(still_failing(code, &cert), "seed {seed}, {variant}: {cert}");
        }
    }
}

/// A copy of `walkv-buggy-kills.toml` whose server runs `binary` with `extra` arguments.
fn kills_candidate(name: &str, binary: &str, extra: &[&str]) -> PathBuf {
    let text = std::fs::read_to_string(example("walkv-buggy-kills.toml")).unwrap();
    let guests = guests().display().to_string();
    let mut args: Vec<String> =
        ["--listen", "10.0.0.1:7000", "--data", "/data"].iter().map(|s| s.to_string()).collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    let text = text
        .replace("../../target/guests/walkv-buggy", &format!("{guests}/{binary}"))
        .replace("../../target/guests/walkv-client", &format!("{guests}/walkv-client"))
        .replace(r#"args = ["--listen", "10.0.0.1:7000", "--data", "/data"]"#, &format!("args = {args:?}"));
    let dir = out_dir(name);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("candidate.toml");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn a_narrower_window_under_random_kills_still_fails_the_sweep_at_durable_writes() {
    // Random kills find the 200 ms window between an acknowledgement and its fsync; they
    // almost never find a 2 ms one. The crash sweep at the durable writes does, whatever the
    // timer, while the fix holds.
    let bug = explore("kills", 1, &[&example("walkv-buggy-kills.toml")]);
    let b = bug.to_str().unwrap();
    let fixed = format!("server={}", walkv("fixed"));
    let (code, cert) = check("kills-fixed", &["--bug", b, "--candidate", &fixed]);
    assert_eq!((code, cert["verdict"].as_str()), (0, Some("FIXED_FOR_THIS_CAPSULE")), "{cert}");
    let wrong = format!("server={}", walkv("wrong"));
    let (code, cert) = check("kills-wrong", &["--bug", b, "--candidate", &wrong]);
    assert!(still_failing(code, &cert), "{cert}");
    for ms in ["1", "20"] {
        let file = kills_candidate(&format!("kills-timer-{ms}"), "walkv-buggy", &["--sync-every-ms", ms]);
        let (code, cert) =
            check(&format!("kills-timer-{ms}-check"), &["--bug", b, "--candidate", file.to_str().unwrap()]);
        assert!(still_failing(code, &cert), "a {ms} ms timer: {cert}");
    }
}

/// On `seed`, as one program: the lost write is found through a crash at a durable write, the
/// fix is `FIXED_FOR_THIS_CAPSULE` against the bug as found (and, with `minimized`, as
/// minimized too), and the wrong fix still fails. One test per seed, so that the harness runs
/// them side by side; the minimized bug is judged on seed 1 (that a verdict does not depend on
/// minimization is `verdicts::the_verdict_does_not_depend_on_whether_the_bug_was_minimized`).
fn as_one_program_on(seed: u64, minimized: bool) {
    let bug = explore(&format!("single-{seed}"), seed, &[&walkv("buggy"), "--", "--single", "20"]);
    let b = json(&bug);
    assert!(b["signature"].as_str().unwrap().contains("acknowledged writes survive"), "seed {seed}: {b}");
    let faults = &b["input"]["faults"];
    assert!(
        !faults["crash_before_durable_write"].is_null() || !faults["crash_after_durable_write"].is_null(),
        "seed {seed}: found through a crash at a durable write: {faults}"
    );
    let mut judged = vec![("found", bug.clone())];
    if minimized {
        judged.push(("minimized", minimize(&bug)));
    }
    let base = walkv("buggy");
    for (which, file) in &judged {
        let f = file.to_str().unwrap();
        let (code, cert) = check(
            &format!("single-{seed}-fixed-{which}"),
            &["--bug", f, "--base", &base, "--candidate", &walkv("fixed")],
        );
        assert_eq!(
            (code, cert["verdict"].as_str()),
            (0, Some("FIXED_FOR_THIS_CAPSULE")),
            "seed {seed}, {which}: {cert}"
        );
        // The sweep placed an error on each file operation: the server's own fail-stop on
        // the errors of its log was no failure.
        let sweep = detail(&cert, "sweep the candidate: crash points with their states, and I/O errors");
        assert!(sweep.contains("an error on each file operation"), "{sweep}");
    }
    let (code, cert) = check(
        &format!("single-{seed}-wrong"),
        &["--bug", bug.to_str().unwrap(), "--base", &base, "--candidate", &walkv("wrong")],
    );
    assert!(still_failing(code, &cert), "seed {seed}: {cert}");
}

#[test]
fn as_one_program_the_lost_write_is_found_at_a_durable_write_and_only_the_fix_passes_seed_1() {
    as_one_program_on(1, true);
}

#[test]
fn as_one_program_the_lost_write_is_found_at_a_durable_write_and_only_the_fix_passes_seed_2() {
    as_one_program_on(2, false);
}

#[test]
fn as_one_program_the_lost_write_is_found_at_a_durable_write_and_only_the_fix_passes_seed_3() {
    as_one_program_on(3, false);
}

#[test]
fn as_one_program_the_lost_write_is_found_at_a_durable_write_and_only_the_fix_passes_seed_4() {
    as_one_program_on(4, false);
}

#[test]
fn as_one_program_the_lost_write_is_found_at_a_durable_write_and_only_the_fix_passes_seed_5() {
    as_one_program_on(5, false);
}

#[test]
fn as_one_program_without_a_bug_file_the_hunt_finds_the_lost_write_and_only_the_fix_passes() {
    // Without a bug file, the hunt finds it on the base and judges the same way.
    let base = walkv("buggy");
    let (code, cert) =
        check("single-hunt-fixed", &["--base", &base, "--candidate", &walkv("fixed"), "--", "--single", "20"]);
    assert_eq!((code, cert["verdict"].as_str()), (0, Some("FIXED_FOR_THIS_CAPSULE")), "{cert}");
    let (code, cert) =
        check("single-hunt-wrong", &["--base", &base, "--candidate", &walkv("wrong"), "--", "--single", "20"]);
    assert!(still_failing(code, &cert), "{cert}");
}

#[test]
fn a_cluster_bug_file_carries_its_cluster_and_finds_its_binaries_by_their_blake3() {
    let bug = explore("portable", 3, &[&example("walkv-buggy.toml")]);
    let b = json(&bug);
    // The id is what failed and where: the register's client asserts the same message, and
    // its bug is another one.
    let register = explore("portable-register", 1, &[&example("register-buggy.toml")]);
    let r = json(&register);
    assert_eq!(b["signature"], r["signature"], "the same words");
    assert_ne!(b["id"], r["id"], "other binaries, another bug");
    // Moved elsewhere with its binaries beside it, the bug replays from any directory.
    let away = out_dir("portable-away");
    std::fs::create_dir_all(&away).unwrap();
    let mut moved: Value = b.clone();
    moved["cluster_dir"] = Value::String("/nonexistent/clusters".into());
    let file = away.join("bug.json");
    std::fs::write(&file, serde_json::to_vec_pretty(&moved).unwrap()).unwrap();
    assert_eq!(deja(&["reseal", file.to_str().unwrap()]).status.code(), Some(0));
    let replay = |cwd: &Path, extra: &[&str]| {
        let mut args = vec!["replay".to_string()];
        args.extend(extra.iter().map(|s| s.to_string()));
        args.push(file.display().to_string());
        std::process::Command::new(deja_bin()).args(&args).current_dir(cwd).output().unwrap()
    };
    // Without its binaries: the error names the node, the BLAKE3 it needs and the option.
    let o = replay(&std::env::temp_dir(), &[]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let want = b["binaries"]["server"].as_str().unwrap();
    assert!(
        stderr(&o).contains(&format!("node server needs its binary walkv-buggy with BLAKE3 {want}")),
        "{}",
        stderr(&o)
    );
    assert!(stderr(&o).contains("give it with --program server=PATH"), "{}", stderr(&o));
    // Another build beside it is named as changed.
    std::fs::copy(walkv("fixed"), away.join("walkv-buggy")).unwrap();
    let o = replay(&std::env::temp_dir(), &[]);
    assert!(stderr(&o).contains("walkv-buggy changed since the bug was found (its BLAKE3 is now"), "{}", stderr(&o));
    // The right binaries: one beside it by name, one under another name found by its BLAKE3,
    // or given with --program.
    std::fs::copy(walkv("buggy"), away.join("walkv-buggy")).unwrap();
    std::fs::copy(walkv("client"), away.join("some-client")).unwrap();
    let o = replay(&std::env::temp_dir(), &[]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("reproduced bug"), "{}", stderr(&o));
    std::fs::remove_file(away.join("some-client")).unwrap();
    let client = format!("client={}", walkv("client"));
    let o = replay(&std::env::temp_dir(), &["--program", &client]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
}

#[test]
fn exploring_the_fixed_server_finds_nothing_though_it_crashes_it_and_fails_its_disk() {
    // The fixed server stops (exit 2) on every error of its log: a fail-stop, restarted and
    // judged by what it acknowledged, is no bug.
    for (name, runs, subject) in [
        ("fixed-cluster", "60", vec![example("walkv-fixed.toml")]),
        ("fixed-single", "150", vec![walkv("fixed"), "--".into(), "--single".into(), "20".into()]),
    ] {
        let campaign = out_dir(name);
        let mut args =
            vec!["explore", "--quiet", "--runs", runs, "--mode", "faults", "--seed", "1", "--jobs", "1", "--out"];
        let out = campaign.display().to_string();
        args.push(&out);
        args.extend(subject.iter().map(String::as_str));
        let o = deja(&args);
        assert_eq!(o.status.code(), Some(0), "{name}: no bug: {}", stderr(&o));
        let report = json(&campaign.join("report.json"));
        let faults = &report["campaign"]["faults"];
        assert!(
            faults["crash"].as_u64().unwrap_or(0) > 0 && faults["eio"].as_u64().unwrap_or(0) > 0,
            "{name}: {faults}"
        );
    }
}

#[test]
fn a_clusters_crash_model_is_its_files_and_every_node_crash_keeps_to_it() {
    // Found under posix-weak: a crash of the server at its log drops an acknowledged record.
    let bug = explore("model-weak", 1, &[&example("walkv-buggy.toml")]);
    let weak = json(&bug);
    assert!(weak["input"]["storage"].as_array().unwrap().iter().any(|s| s["crash"]["path"] == "/data/wal"), "{weak}");
    // The same cluster on file systems that lose nothing at a crash (`crash_model` in its
    // file): the crash keeps every pending record, and the bug does not reproduce there, so
    // judging it gives no evidence, never a pass.
    let text = std::fs::read_to_string(example("walkv-buggy.toml")).unwrap();
    let guests = guests().display().to_string();
    let text = text
        .replace("[faults.storage]\n", "[faults.storage]\ncrash_model = \"process-kill\"\n")
        .replace("../../target/guests/", &format!("{guests}/"));
    let dir = out_dir("model-kill");
    std::fs::create_dir_all(&dir).unwrap();
    let killed = dir.join("walkv-buggy-process-kill.toml");
    std::fs::write(&killed, text).unwrap();
    let fixed = format!("server={}", walkv("fixed"));
    let (code, cert) = check(
        "model-kill-check",
        &["--bug", bug.to_str().unwrap(), "--config", killed.to_str().unwrap(), "--candidate", &fixed],
    );
    assert_eq!((code, cert["verdict"].as_str()), (3, Some("EVIDENCE_INCOMPLETE")), "{cert}");
    assert!(detail(&cert, "reproduce the bug on the base").contains("does not reproduce"), "{cert}");
    // Exploring it still finds the server's bug, by the one way a process kill allows: a
    // failed fsync drops the acknowledged record (as Linux does), and the server stops.
    let found = explore("model-kill-explore", 1, &[killed.to_str().unwrap()]);
    let b = json(&found);
    let storage = b["input"]["storage"].as_array().unwrap();
    assert!(storage.iter().any(|s| s["error"]["op"] == "fsync"), "{b}");
    // The flag is for single programs; a cluster's model is in its file.
    let o = deja(&["explore", "--runs", "1", "--crash-model", "xfs", &example("walkv-buggy.toml")]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("crash_model in its [faults.storage]"), "{}", stderr(&o));
}
