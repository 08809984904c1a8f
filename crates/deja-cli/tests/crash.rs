//! Durable storage and crashes end to end: kill points at every durable write, restarts on
//! what survived, the reference key-value store, faults a guest can see.

use crate::common::*;

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

fn ledger_sweep(variant: &str, extra: &[&str]) -> (std::process::Output, serde_json::Value) {
    let ledger = guest("ledger").to_string_lossy().into_owned();
    let mut args = vec!["run", "--no-probe", "--json", "--crash-sweep"];
    args.extend_from_slice(extra);
    args.extend_from_slice(&[&ledger, "--", variant]);
    let out = deja(&args);
    let last = stderr(&out).lines().last().unwrap_or_default().to_string();
    let v = serde_json::from_str(&last).unwrap_or_else(|e| panic!("no sweep JSON ({e}): {}", stderr(&out)));
    (out, v)
}

/// What the failing rows of a sweep are a bug on (`bug_on`), each once.
fn bugs_on(v: &serde_json::Value) -> std::collections::BTreeSet<String> {
    v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["result"] == "failed" || r["result"] == "same_image_failed")
        .map(|r| r["bug_on"].as_str().unwrap_or("none").to_string())
        .collect()
}

#[test]
fn each_ledger_failure_is_labelled_by_the_file_systems_that_can_produce_it() {
    // Creates its log, fsyncs it, and publishes the count with a rename, without fsyncing the
    // directory after the creation: only posix-weak can keep the rename and drop the creation.
    let (out, v) = ledger_sweep("hazard", &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(v["schema"], "deja.crash-sweep/3");
    assert_eq!(bugs_on(&v), ["posix-weak".to_string()].into(), "{v}");
    let row = v["rows"].as_array().unwrap().iter().find(|r| r["result"] == "failed").unwrap();
    assert_eq!(row["models"], serde_json::json!(["posix-weak"]));
    let ops: Vec<&str> = row["operations"].as_array().unwrap().iter().map(|o| o.as_str().unwrap()).collect();
    assert!(ops.contains(&"dropped: entry ledger.log set in /data"), "{ops:?}");
    assert!(ops.iter().any(|o| o.starts_with("kept: ") && o.contains("entry count set")), "{ops:?}");
    // The first read of the restart that saw the difference: the directory listing, one entry
    // short of the restart that kept everything.
    let diff = row["first_difference"].as_str().unwrap_or_else(|| panic!("{row}"));
    assert!(diff.contains("getdents64") && diff.contains("where the restart that kept everything had"), "{diff}");
    // CI that only cares about ext4 lets it pass, and says why in one line.
    let (out, v) = ledger_sweep("hazard", &["--fail-on", "ext4-ordered"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        (v["verdict"].as_str(), v["failures"].as_u64(), v["hazards"].as_u64()),
        (Some("hazards_only"), Some(0), Some(1))
    );
    let ledger = guest("ledger").to_string_lossy().into_owned();
    let text = deja(&["run", "--no-probe", "--crash-sweep", "--fail-on", "ext4-ordered", &ledger, "--", "hazard"]);
    assert_eq!(text.status.code(), Some(0));
    assert!(
        stderr(&text).contains("portability hazards, not failures under --fail-on ext4-ordered"),
        "{}",
        stderr(&text)
    );
    assert!(stderr(&text).contains("a portability hazard: only posix-weak allows this state"), "{}", stderr(&text));

    // Makes the count durable before the record it counts: a bug on ext4-ordered (and so on
    // xfs and posix-weak), but kill -9 loses nothing (the record is in the page cache).
    let (out, v) = ledger_sweep("count-first", &["--fail-on", "ext4-ordered"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let on = bugs_on(&v);
    assert!(on.contains("ext4-ordered") && !on.contains("process-kill"), "{on:?}");
    let (out, _) = ledger_sweep("count-first", &["--fail-on", "process-kill"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    // Keeps its records in memory while the count is durable: even a process kill loses them.
    let (out, v) = ledger_sweep("buffered", &["--fail-on", "process-kill"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(bugs_on(&v).contains("process-kill"), "{v}");

    // The correct ledger holds in every state of the weakest model.
    let (out, v) = ledger_sweep("fixed", &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(v["verdict"], "all_held");
}

#[test]
fn a_crash_model_restricts_the_sweep_to_the_states_it_allows() {
    for (variant, model, code) in [
        ("hazard", "ext4-ordered", 0),
        ("hazard", "xfs", 0),
        ("count-first", "ext4-ordered", 1),
        ("count-first", "process-kill", 0),
        ("buffered", "process-kill", 1),
    ] {
        let (out, v) = ledger_sweep(variant, &["--crash-model", model]);
        assert_eq!(out.status.code(), Some(code), "{variant} under {model}: {}", stderr(&out));
        assert_eq!(v["model"], model);
        for r in v["rows"].as_array().unwrap().iter().filter(|r| r["result"] != "incomplete") {
            assert!(r["models"].as_array().unwrap().iter().any(|m| m == model), "{variant}: {r}");
            assert!(r["replay"].as_str().unwrap().contains(&format!("--crash-model={model}")), "{r}");
        }
        if code == 1 {
            // The replay of a failing row fails the same way, under the same model.
            let row = v["rows"].as_array().unwrap().iter().find(|r| r["result"] == "failed").unwrap();
            let again = replay_row(row);
            assert_ne!(again.status.code(), Some(0), "{}", stderr(&again));
            assert!(stderr(&again).contains("ledger: LOST"), "{}", stderr(&again));
        }
    }
}

#[test]
fn an_fsync_failure_then_a_crash_finds_the_store_that_acknowledges_after_a_retried_fsync() {
    let store = |v: &str| guest(&format!("ackstore-{v}")).to_string_lossy().into_owned();
    // The plain sweep cannot reach it: every crash state of a store whose syncs succeed holds.
    let plain = deja(&["run", "--no-probe", "--json", "--crash-sweep", &store("buggy"), "--", "6"]);
    assert_eq!(plain.status.code(), Some(0), "{}", stderr(&plain));
    // Each fsync failing once, then a crash at every later point: the retried fdatasync
    // succeeded with the record dropped, the put was acknowledged, and the crash loses it.
    let out =
        deja(&["run", "--no-probe", "--json", "--crash-sweep", "--fsync-failures", "4", &store("buggy"), "--", "6"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_str(stderr(&out).lines().last().unwrap()).unwrap();
    assert_eq!(v["fsync_failures"], 4);
    let failed: Vec<&serde_json::Value> =
        v["rows"].as_array().unwrap().iter().filter(|r| r["result"] == "failed").collect();
    assert!(!failed.is_empty());
    for r in &failed {
        assert!(r["crash_point"].as_str().unwrap().starts_with("EIO on fsync #"), "{r}");
    }
    // The error alone, without a crash, does not lose the put: the program still reads it.
    assert!(v["rows"].as_array().unwrap().iter().any(|r| r["state"] == "no crash" && r["result"] == "held"));
    let again = replay_row(failed[0]);
    assert_ne!(again.status.code(), Some(0), "{}", stderr(&again));
    assert!(replay_row(failed[0]).status.code() == again.status.code());
    // The fixed store stops taking writes after a failed sync, and holds.
    let fixed = deja(&["run", "--no-probe", "--crash-sweep", "--fsync-failures", "4", &store("fixed"), "--", "6"]);
    assert_eq!(fixed.status.code(), Some(0), "{}", stderr(&fixed));
}

#[test]
fn a_failed_fsync_may_have_written_back_what_it_covered_and_the_sweep_tries_it() {
    // The rejecting store's client takes a put reported failed to be absent after a restart.
    let store = guest("ackstore-rejecting").to_string_lossy().into_owned();
    let sweep = |extra: &[&str]| {
        let mut args = vec!["run", "--no-probe", "--json", "--crash-sweep", "--fsync-failures", "4"];
        args.extend_from_slice(extra);
        args.push(&store);
        args.extend(["--", "6"]);
        let out = deja(&args);
        let v: serde_json::Value =
            serde_json::from_str(stderr(&out).lines().last().unwrap_or("null")).unwrap_or(serde_json::Value::Null);
        (out, v)
    };
    // Linux's usual outcome alone (the failed fsync drops the record): the promise holds.
    let (plain, _) = sweep(&[]);
    assert_eq!(plain.status.code(), Some(0), "{}", stderr(&plain));
    // A failed fsync may have written the record back before it failed: the rejected put
    // comes back after the crash, on every file system.
    let (out, v) = sweep(&["--fsync-writebacks", "4"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let failed: Vec<&serde_json::Value> =
        v["rows"].as_array().unwrap().iter().filter(|r| r["result"] == "failed").collect();
    assert!(!failed.is_empty(), "{v}");
    for r in &failed {
        let point = r["crash_point"].as_str().unwrap();
        assert!(point.contains("which wrote back 1 of 1: write of 6 bytes at "), "{r}");
        assert!(point.contains(" to /data/log, then "), "{r}");
        assert!(r["replay"].as_str().unwrap().contains(":eio:keep=0"), "{r}");
        assert_eq!(r["bug_on"], "process-kill", "{r}");
    }
    let again = replay_row(failed[0]);
    assert_ne!(again.status.code(), Some(0), "{}", stderr(&again));
    assert!(stderr(&again).contains("a put reported failed came back"), "{}", stderr(&again));
    // The store that rewrites its log to the acknowledged puts when it starts keeps the promise.
    let recover = deja(&[
        "run",
        "--no-probe",
        "--crash-sweep",
        "--fsync-failures",
        "4",
        "--fsync-writebacks",
        "4",
        &store,
        "--",
        "6",
        "--recover",
    ]);
    assert_eq!(recover.status.code(), Some(0), "{}", stderr(&recover));
}

#[test]
fn explore_reports_the_crash_state_a_bug_needs_and_keeps_to_its_crash_model() {
    let ledger = guest("ledger").to_string_lossy().into_owned();
    let dir = std::env::temp_dir().join(format!("deja-crash-models-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = dir.join("weak");
    let found =
        deja(&["explore", "--runs", "60", "--seed", "1", "--out", out.to_str().unwrap(), &ledger, "--", "hazard"]);
    assert_eq!(found.status.code(), Some(1), "{}", stderr(&found));
    let text = std::fs::read_to_string(out.join("report.txt")).unwrap();
    assert!(text.contains("the crash state it needs:"), "{text}");
    assert!(text.contains("a portability hazard: only posix-weak allows this state"), "{text}");
    assert!(text.contains("dropped: entry ledger.log set in /data"), "{text}");
    // Where the state first showed: the restart lists /data and finds fewer names than the
    // restart of the same crash that kept everything.
    assert!(text.contains("the first read that saw the difference: syscall"), "{text}");
    assert!(text.contains("getdents64"), "{text}");
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("the first read that saw the difference"), "the HTML report shows it too");
    // Under ext4-ordered no crash state drops the log's creation and keeps the later rename:
    // the same campaign finds nothing, and every crash it made was in an ext4 state.
    let out = dir.join("ext4");
    let none = deja(&[
        "explore",
        "--runs",
        "60",
        "--seed",
        "1",
        "--crash-model",
        "ext4-ordered",
        "--out",
        out.to_str().unwrap(),
        &ledger,
        "--",
        "hazard",
    ]);
    assert_eq!(none.status.code(), Some(0), "{}", stderr(&none));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn check_judges_under_the_crash_model_it_is_given() {
    let dir = std::env::temp_dir().join(format!("deja-check-models-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let judge = |model: &str, store: &str, candidate: &str, name: &str, extra: &[&str]| {
        let program = |v: &str| guest(&format!("{store}-{v}")).to_string_lossy().into_owned();
        let out = dir.join(format!("{model}-{store}-{name}"));
        let (base, candidate) = (program("buggy"), program(candidate));
        let args = ["check", "--json", "--crash-model", model, "--base", &base, "--candidate", &candidate, "--out"];
        let mut args: Vec<&str> = args.to_vec();
        let out_arg = out.to_string_lossy().into_owned();
        args.push(out_arg.as_str());
        args.extend_from_slice(extra);
        args.extend(["--", "6"]);
        let o = deja(&args);
        let cert: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or(serde_json::Value::Null);
        (o, cert, out)
    };
    let check = |model: &str| {
        let (o, _, out) = judge(model, "pagestore", "fixed", "fixed", &[]);
        (o, out)
    };
    // The page store's header outlives the file's extension on ext4 too (an overwrite is not
    // ordered with the size change): the fix is judged, and the capsule names the model.
    let (ext4, out) = check("ext4-ordered");
    assert_eq!(ext4.status.code(), Some(0), "{}", stderr(&ext4));
    let capsule: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("capsule.json")).unwrap()).unwrap();
    assert_eq!(capsule["faults"]["crash_model"], "ext4-ordered", "{capsule}");
    // The base's crash state (the header kept, the extension dropped) is one ext4 allows: the
    // capsule and the certificate label it, and the certificate's chain covers the labels.
    assert_eq!(capsule["models"], serde_json::json!(["posix-weak", "xfs", "ext4-ordered"]), "{capsule}");
    assert!(stderr(&ext4).contains("a bug on ext4-ordered"), "{}", stderr(&ext4));
    let text = std::fs::read_to_string(out.join("certificate.json")).unwrap();
    let cert: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!((&cert["crash_model"], &cert["models"]), (&capsule["faults"]["crash_model"], &capsule["models"]));
    let forged = out.join("forged.json");
    std::fs::write(&forged, text.replacen("\"ext4-ordered\"", "\"process-kill\"", 1)).unwrap();
    let v = deja(&["verify-certificate", forged.to_str().unwrap()]);
    assert_eq!(v.status.code(), Some(1), "a certificate with another model is refused: {}", stderr(&v));
    // A wrong patch (the buggy store again) judged against that capsule under the same model
    // still reproduces: the model narrows the states, it never hides the bug.
    let cap = out.join("capsule.json").to_string_lossy().into_owned();
    let (wrong, cert, _) = judge("ext4-ordered", "pagestore", "buggy", "wrong", &["--capsule", &cap]);
    assert_eq!(wrong.status.code(), Some(1), "{}", stderr(&wrong));
    assert_eq!(cert["verdict"], "STILL_REPRODUCES", "{cert}");
    // A store that stops at its first failed write or sync is correct, not failing: the
    // acknowledging store's fix is a pass under ext4-ordered, and the buggy one is not.
    let (stop, cert, out) = judge("ext4-ordered", "ackstore", "fixed", "fixed", &[]);
    assert_eq!(stop.status.code(), Some(0), "{}", stderr(&stop));
    assert_eq!(cert["verdict"], "FIXED_FOR_THIS_CAPSULE", "{cert}");
    let cap = out.join("capsule.json").to_string_lossy().into_owned();
    let (again, cert, _) = judge("ext4-ordered", "ackstore", "buggy", "wrong", &["--capsule", &cap]);
    assert_eq!(again.status.code(), Some(1), "{}", stderr(&again));
    assert_eq!(cert["verdict"], "STILL_REPRODUCES", "{cert}");
    // After a process kill nothing is lost, so the hunt finds no failure on the base: no
    // evidence, never a pass.
    let (kill, _) = check("process-kill");
    assert_eq!(kill.status.code(), Some(3), "{}", stderr(&kill));
    assert!(stderr(&kill).contains("EVIDENCE_INCOMPLETE"), "{}", stderr(&kill));
    let _ = std::fs::remove_dir_all(&dir);
}
