//! `deja at` and `deja explain` on cluster bugs: a moment's state, a node's file as it was and
//! as a crash there would leave it, a command run inside a node from there, branches counted
//! the same in two processes, and the moment a bug became inevitable.

use crate::common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

fn out_dir(name: &str) -> PathBuf {
    let d = root().join("target/test-moments").join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `examples/clusters/walkv-buggy.toml` with the guests by absolute path and `cat` in the
/// server's file system, at `/bin/cat`.
fn walkv_with_cat() -> PathBuf {
    let text = std::fs::read_to_string(root().join("examples/clusters/walkv-buggy.toml"))
        .unwrap()
        .replace("../../target/guests/", "GUESTS/")
        .replace("wait = false\n", "wait = false\nfiles = { \"/bin/cat\" = \"GUESTS/cat\" }\n");
    temp_cluster("walkv-buggy-with-cat", &text)
}

/// A bug of `cluster`, found by `deja explore` (faults, seed 1, one worker).
fn found(name: &str, cluster: &Path, runs: u32) -> PathBuf {
    let out = out_dir(name);
    let o = explore_to_first_bug(&out, runs, &["--mode", "faults"], &[&s(cluster)]);
    assert_eq!(o.status.code(), Some(1), "a bug is found: {}", stderr(&o));
    bug_file(&out)
}

#[test]
fn a_moment_before_the_crash_shows_each_node_its_files_as_they_were_and_runs_a_command_there() {
    let bug = found("walkv", &walkv_with_cat(), 50);
    let b: Value = serde_json::from_str(&std::fs::read_to_string(&bug).unwrap()).unwrap();
    let crash = b["faults"].as_array().unwrap().iter().find(|f| f["kind"] == "crash").expect("a crash").clone();
    let crash_ns = crash["time_ns"].as_u64().unwrap();
    let t_ns = crash_ns - 1_000_000;
    let t = format!("{:.3}", t_ns as f64 / 1e6);
    let bug_path = s(&bug);
    let at = |extra: &[&str]| deja(&[&["at", "--time", &t, &bug_path][..], extra].concat());

    // The moment: every node, the server's program, the faults before it and none after.
    let o = at(&["--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let m: Value = serde_json::from_slice(&o.stdout).unwrap();
    let names: Vec<&str> = m["nodes"].as_array().unwrap().iter().map(|n| n["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["server", "client"]);
    let time = m["time_ns"].as_u64().unwrap();
    assert!(time >= t_ns && time <= crash_ns, "the first step at or after {t_ns}: {time}");
    let server = &m["nodes"][0];
    assert_eq!(server["processes"][0]["pid"], 1);
    assert!(server["processes"][0]["cmdline"].as_str().unwrap().contains("walkv-buggy"), "{server}");
    assert!(!server["processes"][0]["threads"].as_array().unwrap().is_empty());
    let faults = m["faults"].as_array().unwrap();
    assert!(faults.iter().all(|f| f["time_ns"].as_u64().unwrap() <= time), "{faults:?}");
    assert!(faults.iter().all(|f| f["kind"] != "crash"), "the crash comes after: {faults:?}");

    // The same in words.
    let o = at(&[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    for want in ["node server:", "node client:", "process 1 (parent 0)", "network:", "faults so far:"] {
        assert!(text.contains(want), "{want}: {text}");
    }

    // The log as it is there, and as a crash there that kept nothing pending would leave it:
    // they differ exactly when writes are pending.
    let (now, crashed) = (out_dir("walkv-now"), out_dir("walkv-crashed"));
    let o = at(&["--node", "server", "--extract", "/data/wal", "--to", &s(&now)]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = at(&["--node", "server", "--extract", "/data/wal", "--crashed", "--to", &s(&crashed)]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let (a, c) = (std::fs::read(now.join("wal")).unwrap(), std::fs::read(crashed.join("wal")).unwrap());
    let pending = server["pending"].as_array().unwrap();
    assert!(!a.is_empty(), "the server has logged writes by then");
    assert_eq!(a == c, pending.iter().all(|p| !p.as_str().unwrap().contains("/data/wal")), "{pending:?}");
    assert!(c.len() <= a.len());

    // A command inside the server from there sees the same log; its output is its own.
    let o = at(&["--node", "server", "--exec", "--", "cat", "/data/wal"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // The `cat` guest prints its argv, environment, stdin, then each file as a Rust string.
    let printed = stdout(&o);
    assert!(printed.starts_with("argv: [\"/bin/cat\", \"/data/wal\"]\n"), "{printed}");
    assert!(printed.contains("stdin: \"\"\n"), "stdin is empty: {printed}");
    let log = format!("/data/wal: {:?}\n", String::from_utf8_lossy(&a));
    assert!(printed.ends_with(&log), "it reads the log as it is at the moment: {printed} / {log}");
    assert!(stderr(&o).contains("exit status 0"), "{}", stderr(&o));

    // The crash is in the bug's input: the failure is certain from the start, and that is said.
    let out = out_dir("walkv-explain");
    let o = deja(&["explain", "--moments", "2", "--branches", "2", "--out", &s(&out), &bug_path]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let said = stdout(&o);
    assert!(said.contains("from the start of the run"), "{said}");
    assert!(said.contains("placed by the input: crash server"), "{said}");

    // What cannot be done is said.
    let o = at(&["--node", "server", "--exec", "--", "no-such-command"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("cannot start no-such-command in server"), "{}", stderr(&o));
    let o = at(&["--node", "nowhere"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("has no node nowhere"), "{}", stderr(&o));
    let o = deja(&["at", "--time", "99999999", &s(&bug)]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("before the moment"), "{}", stderr(&o));
}

#[test]
fn branches_from_a_moment_are_counted_the_same_in_two_processes_and_explain_draws_the_curve() {
    let bug = found("register", &root().join("examples/clusters/register-buggy.toml"), 40);
    let b: Value = serde_json::from_str(&std::fs::read_to_string(&bug).unwrap()).unwrap();
    let decisions = b["decisions"].as_u64().unwrap();
    let k = (decisions / 2).to_string();
    let cores = host_cores();
    let runs: Vec<Value> = [cores[0], *cores.last().unwrap()]
        .iter()
        .map(|&c| {
            let o = deja_on(c, &[], &["at", "--decision", &k, "--branches", "6", "--json", &s(&bug)]);
            assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
            serde_json::from_slice(&o.stdout).unwrap()
        })
        .collect();
    assert_eq!(runs[0], runs[1], "the same counts on every core");
    let r = &runs[0];
    assert_eq!(r["runs"], 6);
    assert!(r["decision"].as_u64().unwrap() >= decisions / 2, "{r}");
    let other: u64 = r["other"].as_object().unwrap().values().map(|v| v.as_u64().unwrap()).sum();
    assert!(r["same"].as_u64().unwrap() + other <= 6, "{r}");

    // From the moments of the run: the curve, in the terminal, as JSON and as a plot.
    let out = out_dir("explain");
    let o = deja(&["explain", "--moments", "4", "--branches", "4", "--refine", "3", "--out", &s(&out), &s(&bug)]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("failed as the bug did"), "{}", stdout(&o));
    let e: Value = serde_json::from_str(&std::fs::read_to_string(out.join("explain.json")).unwrap()).unwrap();
    let curve = e["explanation"]["curve"].as_array().unwrap();
    assert!(curve.len() >= 5, "{e}");
    assert_eq!(curve[0]["time_ns"], 0, "the first moment is the run's start: {e}");
    assert!(curve.windows(2).all(|w| w[0]["decision"].as_u64() < w[1]["decision"].as_u64()), "{e}");
    assert!(curve.iter().all(|c| c["runs"] == 4), "{e}");
    let last = curve.last().unwrap();
    assert_eq!(last["decision"].as_u64(), Some(decisions), "the last moment is the run's end: {e}");
    match e["explanation"]["inevitable"].as_array() {
        Some(pair) => {
            let first = &pair[0];
            assert!(first["same"].as_u64().unwrap() * 10 >= 9 * first["runs"].as_u64().unwrap(), "{e}");
            assert!(stdout(&o).contains("inevitable"), "{}", stdout(&o));
            assert!(!e["step"].as_array().unwrap().is_empty(), "the step is named: {e}");
        }
        None => assert!(stdout(&o).contains("never inevitable"), "{}", stdout(&o)),
    }
    assert!(std::fs::read_to_string(out.join("explain.html")).unwrap().contains("<svg"));
}
