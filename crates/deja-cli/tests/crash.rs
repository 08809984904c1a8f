//! Durable storage and crashes end to end: kill points at every durable write, restarts on
//! what survived, the reference key-value store, faults a guest can see.

mod common;

use common::*;

fn kv() -> String {
    guest("kv").to_string_lossy().into_owned()
}

fn sweep(variant: &str) -> (std::process::Output, serde_json::Value) {
    let out = deja(&["run", "--no-probe", "--json", "--crash-sweep", &kv(), "--", "--variant", variant, "8"]);
    let last = stderr(&out).lines().last().unwrap_or_default().to_string();
    let v = serde_json::from_str(&last).unwrap_or_else(|e| panic!("no sweep JSON ({e}): {}", stderr(&out)));
    (out, v)
}

/// Runs the command a sweep row gives and returns its output.
fn replay_row(row: &serde_json::Value) -> std::process::Output {
    let replay = row["replay"].as_str().unwrap();
    let words: Vec<&str> = replay.split(' ').collect();
    std::process::Command::new(words[0]).args(&words[1..]).output().unwrap()
}

#[test]
fn the_buggy_store_loses_an_acknowledged_put_and_the_sweep_says_where() {
    let (out, v) = sweep("buggy");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(v["verdict"], "failures");
    let d = v["durable_writes"].as_u64().unwrap();
    assert_eq!(v["crash_points"].as_u64().unwrap(), 2 * d + 1, "before and after each durable write, and at exit");
    let rows = v["rows"].as_array().unwrap();
    let failed: Vec<&serde_json::Value> = rows.iter().filter(|r| r["result"] == "failed").collect();
    assert!(!failed.is_empty());
    let first = failed[0];
    assert!(first["failed_assertions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|a| a == "every acknowledged put survives a crash"));
    assert!(first["restart_stderr"]
        .as_array()
        .unwrap()
        .iter()
        .any(|l| l.as_str().unwrap().contains("LOST acknowledged put")));
    // The one command that replays that crash point and state reproduces the loss.
    let again = replay_row(first);
    assert_eq!(again.status.code(), Some(123), "{}", stderr(&again));
    assert!(stderr(&again).contains("LOST acknowledged put"), "{}", stderr(&again));
    assert!(stderr(&again).contains("crashed"), "{}", stderr(&again));
    // A row whose image an earlier row restarted says how that restart ended, and its own
    // replay command fails the same way: a point is only as good as its images.
    let mut shared_failures = 0;
    for r in rows.iter().filter(|r| r["result"].as_str().unwrap().starts_with("same_image")) {
        let first =
            rows.iter().find(|f| f["image"] == r["image"] && (f["result"] == "held" || f["result"] == "failed"));
        let first = first.unwrap_or_else(|| panic!("no restart of the image of {r}"));
        assert_eq!(r["result"] == "same_image_failed", first["result"] == "failed", "{r}\n{first}");
        if r["result"] == "same_image_failed" && shared_failures == 0 {
            let again = replay_row(r);
            assert_eq!(again.status.code(), Some(123), "{}", stderr(&again));
        }
        shared_failures += usize::from(r["result"] == "same_image_failed");
    }
    assert!(shared_failures > 0, "after write K and before write K+1 give the same failing images");
    // The text report names the crash point, the state and the replay.
    let text = deja(&["run", "--no-probe", "--crash-sweep", &kv(), "--", "--variant", "buggy", "8"]);
    assert!(stderr(&text).contains("FAILED"), "{}", stderr(&text));
    assert!(stderr(&text).contains("replay: "), "{}", stderr(&text));
    assert!(stderr(&text).contains("crash model posix-weak"), "{}", stderr(&text));
}

#[test]
fn the_fixed_store_holds_at_every_crash_point_and_state_and_sweeps_repeat_exactly() {
    let (out, v) = sweep("fixed");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(v["verdict"], "all_held");
    assert!(v["durable_writes"].as_u64().unwrap() >= 10, "{v}");
    let rows = v["rows"].as_array().unwrap();
    assert!(rows.iter().all(|r| r["result"] == "held" || r["result"] == "same_image"), "{rows:?}");
    // Every distinct image is restarted once: later rows with the same image are not run.
    let restarted = rows.iter().filter(|r| r["result"] == "held").count() as u64;
    assert_eq!(restarted, v["restarts"].as_u64().unwrap());
    assert!(v["distinct_states"].as_u64().unwrap() >= restarted);
    assert!(v["states_tried"].as_u64().unwrap() >= v["distinct_states"].as_u64().unwrap());
    let (_, again) = sweep("fixed");
    assert_eq!(v["digest"], again["digest"], "the same sweep twice gives the same report");
    let (_, buggy1) = sweep("buggy");
    let (_, buggy2) = sweep("buggy");
    assert_eq!(buggy1["digest"], buggy2["digest"]);
    assert_ne!(buggy1["digest"], v["digest"]);
}

#[test]
fn a_store_that_needs_a_crash_before_a_barrier_fails_the_new_sweep_and_passed_the_old() {
    let pages = |v: &str| guest(&format!("pagestore-{v}")).to_string_lossy().into_owned();
    let run = |p: &str, old: bool| {
        let mut args = vec!["run", "--no-probe", "--json", "--crash-sweep"];
        if old {
            args.push("--after-writes-only");
        }
        args.extend([p, "--", "6"]);
        let out = deja(&args);
        let v: serde_json::Value = serde_json::from_str(stderr(&out).lines().last().unwrap()).unwrap();
        (out.status.code(), v)
    };
    // The header's new count reached the disk, the file's extension did not: only a crash
    // before the commit's fdatasync, with the pending operations reordered, shows it.
    let (code, v) = run(&pages("buggy"), false);
    assert_eq!(code, Some(1), "{v}");
    let failed = v["rows"].as_array().unwrap().iter().find(|r| r["result"] == "failed").unwrap();
    assert!(failed["crash_point"].as_str().unwrap().starts_with("before durable write"), "{failed}");
    assert!(failed["failed_assertions"].as_array().unwrap().iter().any(|a| a == "the store opens after a crash"));
    let again = replay_row(failed);
    assert_eq!(again.status.code(), Some(123), "{}", stderr(&again));
    assert!(stderr(&again).contains("the store does not open"), "{}", stderr(&again));
    assert!(stderr(&again).contains("crashed before durable write"), "{}", stderr(&again));
    let (code, old) = run(&pages("buggy"), true);
    assert_eq!(code, Some(0), "the sweep of crashes right after durable writes passes it: {old}");
    let (code, fixed) = run(&pages("fixed"), false);
    assert_eq!(code, Some(0), "{fixed}");
}

#[test]
fn a_swallowed_write_error_loses_an_acknowledged_put() {
    let acks = |v: &str| guest(&format!("ackstore-{v}")).to_string_lossy().into_owned();
    let buggy = deja(&["run", "--no-probe", "--fail", "write:/data/log:3:eio", &acks("buggy"), "--", "6"]);
    assert_eq!(buggy.status.code(), Some(123), "{}", stderr(&buggy));
    assert!(stderr(&buggy).contains("LOST acknowledged put k2=v2"), "{}", stderr(&buggy));
    assert!(stderr(&buggy).contains("--fail=write:/data/log:3:eio"), "the replay names the error: {}", stderr(&buggy));
    let fixed = deja(&["run", "--no-probe", "--fail", "write:/data/log:3:eio", &acks("fixed"), "--", "6"]);
    assert_eq!(fixed.status.code(), Some(0), "{}", stderr(&fixed));
    assert!(stdout(&fixed).contains("put k2 failed"), "{}", stdout(&fixed));
    // fsyncgate: the retried fdatasync succeeds, the data is gone from the disk, a crash shows it.
    let buggy =
        deja(&["run", "--no-probe", "--fail", "fsync:/data/log:3", "--crash-at-exit", &acks("buggy"), "--", "6"]);
    assert_eq!(buggy.status.code(), Some(123), "{}", stderr(&buggy));
    assert!(stdout(&buggy).contains("retrying"), "{}", stdout(&buggy));
    assert!(stderr(&buggy).contains("LOST acknowledged put k2=v2 (after a restart)"), "{}", stderr(&buggy));
    let fixed =
        deja(&["run", "--no-probe", "--fail", "fsync:/data/log:3", "--crash-at-exit", &acks("fixed"), "--", "6"]);
    assert_eq!(fixed.status.code(), Some(0), "{}", stderr(&fixed));
    let bad = deja(&["run", "--no-probe", "--fail", "frob:/x", &acks("fixed")]);
    assert_eq!(bad.status.code(), Some(2), "{}", stderr(&bad));
}

#[test]
fn one_crash_restarts_the_program_on_its_durable_disk() {
    let out = deja(&["run", "--no-probe", "--crash-after-durable-write", "7", &kv(), "--", "--variant", "fixed", "8"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("crashed after durable write 7"), "{err}");
    assert!(stdout(&out).contains("kv: 8 keys stored"), "{}", stdout(&out));
    let (_, a) = run_json(&["--crash-after-durable-write", "7", &kv(), "--", "--variant", "fixed", "8"]);
    let (_, b) = run_json(&["--crash-after-durable-write", "7", &kv(), "--", "--variant", "fixed", "8"]);
    assert_eq!(a["digest"], b["digest"], "crash and restart are deterministic");
}

#[test]
fn a_sweep_without_durable_writes_is_incomplete_evidence() {
    let out = deja(&["run", "--no-probe", "--crash-sweep", &guest("hello").to_string_lossy()]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stderr(&out).contains("no durable write and left nothing pending"), "{}", stderr(&out));
    let out = deja(&["run", "--no-probe", "--crash-sweep", "--after-writes-only", &guest("hello").to_string_lossy()]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
}

#[test]
fn file_system_errors_come_back_as_linux_errnos() {
    let (out, v) = run_json(&[&guest("fserr").to_string_lossy()]);
    assert_eq!(v["exit_code"], 0, "{}\n{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("fserr: all errors as on Linux"), "{}", stdout(&out));
}

#[test]
fn injected_fsync_errors_are_seen_and_ledgered() {
    let (out, v) = run_json(&["--eio-fsync-ppm", "1000000", &kv(), "--", "--variant", "fixed", "4"]);
    // The store fails stop: it says so and acknowledges nothing.
    assert!(stdout(&out).contains("failed (Input/output error"), "{}", stdout(&out));
    assert!(!stdout(&out).contains("keys stored"), "{}", stdout(&out));
    let faults = v["faults"].as_array().unwrap();
    let eio: Vec<&serde_json::Value> = faults.iter().filter(|f| f["kind"] == "eio").collect();
    assert!(!eio.is_empty(), "{faults:?}");
    assert!(eio.iter().all(|f| f["selected"] == true && f["applied"] == true));
    assert!(eio.iter().any(|f| f["observed"] == true), "the program saw the error: {eio:?}");
}

#[test]
fn files_copied_in_are_readable_and_the_result_can_be_exported() {
    let dir = std::env::temp_dir().join(format!("deja-fs-{}", std::process::id()));
    let export = dir.join("export");
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("seed.txt");
    std::fs::write(&input, "k0=v0\n").unwrap();
    let copy = format!("{}:/data/snap", input.display());
    let out = deja(&[
        "run",
        "--no-probe",
        "--copy-in",
        &copy,
        "--fs-export",
        &export.to_string_lossy(),
        &kv(),
        "--",
        "--variant",
        "fixed",
        "2",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let snap = std::fs::read_to_string(export.join("data/acks")).expect("exported acks");
    assert_eq!(snap, "k0=v0\nk1=v1\n");
    let wal = std::fs::read_to_string(export.join("data/wal")).expect("exported wal");
    assert!(wal.is_empty() || wal.contains("k1=v1"), "{wal:?}");
    std::fs::remove_dir_all(&dir).ok();
}
