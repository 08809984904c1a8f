//! The reference cluster on a real Raft library (`guest/raftkv`, openraft): the planted bug in
//! our glue (a log append reported flushed without fsync) is found by exploring partitions,
//! kills with restarts, pauses and clock jumps, and `deja check` judges the fixed glue
//! `FIXED_FOR_THIS_CAPSULE`.

use std::path::PathBuf;

use crate::common::*;

fn example(name: &str) -> String {
    guests();
    root().join("examples/clusters").join(name).to_string_lossy().into_owned()
}

fn out_dir(name: &str) -> PathBuf {
    let d = root().join("target/test-raftkv").join(name);
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn explore_finds_the_unsynced_log_and_check_judges_the_fsync_fixed() {
    let campaign = out_dir("explore");
    let o = deja(&[
        "explore",
        "--quiet",
        "--out",
        campaign.to_str().unwrap(),
        "--runs",
        "20",
        "--stop-at-first-bug",
        "--mode",
        "faults",
        "--seed",
        "1",
        &example("raftkv-buggy.toml"),
    ]);
    assert_eq!(o.status.code(), Some(1), "the buggy glue loses acknowledged writes: {}", stderr(&o));
    let bug = bug_file(&campaign);
    // The replay shows the lost keys and the history checker's verdict on the same run.
    let r = deja(&["replay", &bug.to_string_lossy()]);
    assert_eq!(r.status.code(), Some(1), "{}", stderr(&r));
    assert!(stderr(&r).contains("history not linearizable under the kv model"), "{}", stderr(&r));
    let b: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&bug).unwrap()).unwrap();
    assert_eq!(b["signature"], "assertion failed on client: acknowledged writes survive", "{b}");

    let judged = out_dir("check");
    let o = deja(&[
        "check",
        "--bug",
        &bug.to_string_lossy(),
        "--candidate",
        &example("raftkv-fixed.toml"),
        "--out",
        judged.to_str().unwrap(),
        // A sweep of 16 crash points, spread over the nodes' durable operations: the default
        // (64) is the README's cluster checks'; here the verdict is the point, not the sweep.
        "--node-crash-points",
        "16",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("verdict FIXED_FOR_THIS_CAPSULE"), "{}", stderr(&o));
    assert!(stderr(&o).contains("16 crash points, before and after"), "{}", stderr(&o));
    std::fs::remove_dir_all(&campaign).ok();
    std::fs::remove_dir_all(&judged).ok();
}

#[test]
fn the_history_checker_finds_the_lost_writes_without_the_clients_assertion() {
    let o = deja(&["run", "--seed", "1", &example("raftkv-buggy-history.toml")]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(!err.contains("assertion failed"), "the client asserts nothing: {err}");
    assert!(
        err.contains("deja: history: history not linearizable under the kv model on key k1: a read cannot be placed"),
        "{err}"
    );
    // The fixed glue on the same seed: linearizable.
    let o = deja(&["run", "--seed", "1", &example("raftkv-fixed.toml")]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("deja: history: linearizable (60 operations)"), "{}", stderr(&o));
}
