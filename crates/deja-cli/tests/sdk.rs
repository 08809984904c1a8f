//! The guest SDK end to end: the assertion catalog and oracle, replay of a failure, coverage
//! read from guest memory, and the same binary running natively.

use crate::common::*;
use std::process::Command;

fn bank() -> String {
    guest("bank").to_string_lossy().into_owned()
}

#[test]
fn every_assertion_kind_gets_its_status() {
    let (out, v) = run_json(&[&bank(), "--", "30"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(v["assertion_failed"], false);
    let expect = [
        ("balance never negative", "always", "passed"),
        ("some transfer is rejected for lack of funds", "sometimes", "satisfied"),
        ("bulk mode only ever adds to account 0", "always_or_unreachable", "passed"),
        ("an unknown mode is refused before it runs", "unreachable", "passed"),
        ("money is neither created nor destroyed", "always", "passed"),
        ("more rejections than transfers (never happens)", "reachable", "unreached"),
        ("all transfers processed", "reachable", "reached"),
        // Fraud protection is off without --fraud: its sites are listed, never evaluated.
        ("an account makes two large transfers in a row", "sometimes", "unreached"),
        ("an account is one large transfer short of a freeze", "sometimes", "unreached"),
        ("fraud protection freezes an account", "reachable", "unreached"),
        ("money sent to a frozen account is held", "reachable", "unreached"),
        ("held money is released when an account thaws", "sometimes", "unreached"),
    ];
    assert_eq!(v["assertions"].as_array().unwrap().len(), expect.len(), "the whole catalog, reached or not");
    for (message, kind, status) in expect {
        let a = assertion_site(&v, message);
        assert_eq!(a["kind"], kind, "{message}");
        assert_eq!(a["status"], status, "{message}: {a}");
        assert_eq!(a["bug"], false);
        assert!(a["file"].as_str().unwrap().ends_with("bank/src/main.rs"));
    }
    // A never-reached site is listed with zero hits.
    assert_eq!(assertion_site(&v, "more rejections than transfers (never happens)")["hits"], 0);
    assert_eq!(v["setup_complete"]["details"], r#"{"accounts":3,"mode":"careful"}"#);
    assert_eq!(v["events"], 30);
}

#[test]
fn a_failing_always_is_located_and_replays_exactly() {
    let out = deja(&["run", "--no-probe", &bank(), "--", "--overdraft-bug", "30"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(123), "{err}");
    assert!(err.contains("FAILED      always"), "{err}");
    let source = std::fs::read_to_string(root().join("guest/bank/src/main.rs")).unwrap();
    let line = source.lines().position(|l| l.contains("\"balance never negative\"")).unwrap() + 1;
    assert!(err.contains(&format!("bank/src/main.rs:{line}")), "the location of the assertion: {err}");
    assert!(err.contains("first failure at syscall"), "{err}");
    let replay = err.lines().find_map(|l| l.strip_prefix("deja: replay this run exactly: ")).expect("a replay command");
    let words: Vec<&str> = replay.split(' ').collect();
    // The printed command, with `--json` added to read its summary.
    let mut with_json = vec![words[1], "--json"];
    with_json.extend_from_slice(&words[2..]);
    let again = Command::new(words[0]).args(&with_json).output().unwrap();
    assert_eq!(again.status.code(), Some(123));
    let (_, first) = run_json(&[&bank(), "--", "--overdraft-bug", "30"]);
    let last = stderr(&again).lines().last().unwrap().to_string();
    let replayed: serde_json::Value = serde_json::from_str(&last).unwrap();
    assert_eq!(replayed["digest"], first["digest"], "the replay is the same run");
    let a = assertion_site(&replayed, "balance never negative");
    assert_eq!(a["status"], "failed");
    assert_eq!(a["bug"], true);
    assert_eq!(a["first_failure"], assertion_site(&first, "balance never negative")["first_failure"]);
    assert!(a["first_failure"]["details"].as_str().unwrap().contains("balance"));
}

#[test]
fn coverage_maps_follow_branches_and_repeat_exactly() {
    let cov = cov_guest("bank").to_string_lossy().into_owned();
    let (_, careful) = run_json(&[&cov, "--", "--mode", "careful", "10"]);
    let (_, careful2) = run_json(&[&cov, "--", "--mode", "careful", "10"]);
    let (_, bulk) = run_json(&[&cov, "--", "--mode", "bulk", "10"]);
    let c = &careful["coverage"];
    assert!(c["counters"].as_u64().unwrap() > 100, "{c}");
    assert!(c["edges_hit"].as_u64().unwrap() > 10, "{c}");
    assert_eq!(c["map_digest"], careful2["coverage"]["map_digest"], "same input, same map");
    assert_ne!(c["map_digest"], bulk["coverage"]["map_digest"], "other branches, other map");
    let (_, plain) = run_json(&[&bank(), "--", "10"]);
    assert!(plain["coverage"].is_null(), "an uninstrumented program has no coverage");
}

#[test]
fn the_same_binary_runs_natively_and_reports_locally() {
    let out = Command::new(guest("bank")).args(["--overdraft-bug", "30"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "deja's absence never crashes the program");
    assert!(stdout(&out).starts_with("bank: mode careful, 30 transfers"));
    let lines: Vec<serde_json::Value> =
        stderr(&out).lines().map(|l| serde_json::from_str(l).expect("every SDK line is JSON")).collect();
    assert!(lines.iter().any(|l| l["deja"] == "setup_complete"));
    let failures: Vec<&serde_json::Value> =
        lines.iter().filter(|l| l["deja"] == "assertion" && l["fields"]["failed"] == true).collect();
    // Natively the random choices differ from run to run; with the bug, balances go negative
    // in almost every run, but a run without a failure is possible, so check the shape.
    for f in &failures {
        assert_eq!(f["fields"]["kind"], "always");
        assert_eq!(f["fields"]["message"], "balance never negative");
    }
    assert!(lines.iter().any(|l| l["deja"] == "assertion" && l["fields"]["message"] == "all transfers processed"));
}
