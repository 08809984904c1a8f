//! Programs of several processes under faults: a supervisor whose worker (forked, then
//! re-executed) keeps a log with fsync, swept at every durable write and explored; a server
//! that forks a child per connection, run as a cluster, crashed at its durable writes and
//! explored. See docs/PROCESSES.md.

use crate::common::*;
use std::path::{Path, PathBuf};

fn supervisor() -> String {
    guest("supervisor").to_string_lossy().into_owned()
}

fn example(name: &str) -> String {
    guests();
    root().join("examples/clusters").join(name).to_string_lossy().into_owned()
}

/// `deja run --crash-sweep --json` on the supervisor with `extra` flags; (output, report).
fn sweep(variant: &str, extra: &[&str]) -> (std::process::Output, serde_json::Value) {
    let s = supervisor();
    let mut args = vec!["run", "--no-probe", "--json", "--crash-sweep"];
    args.extend_from_slice(extra);
    args.extend([s.as_str(), "--", variant]);
    let out = deja(&args);
    let last = stderr(&out).lines().last().unwrap_or_default().to_string();
    let v = serde_json::from_str(&last).unwrap_or_else(|e| panic!("no sweep JSON ({e}): {}", stderr(&out)));
    (out, v)
}

/// Runs the command a sweep row gives.
fn replay_row(row: &serde_json::Value) -> std::process::Output {
    let words: Vec<&str> = row["replay"].as_str().unwrap().split(' ').collect();
    std::process::Command::new(words[0]).args(&words[1..]).output().unwrap()
}

fn lines(v: &serde_json::Value) -> Vec<String> {
    v.as_array().map(|a| a.iter().map(|l| l.as_str().unwrap_or_default().to_string()).collect()).unwrap_or_default()
}

fn out_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("deja-processes-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn explore(out: &Path, flags: &[&str], target: &[&str]) -> std::process::Output {
    let mut cmd = vec!["explore", "--quiet", "--out", out.to_str().unwrap()];
    cmd.extend_from_slice(flags);
    cmd.extend_from_slice(target);
    deja(&cmd)
}

fn campaign(out: &Path) -> serde_json::Value {
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    v["campaign"].clone()
}

/// What the supervisor prints when nothing crashes: the first worker writes two records and
/// kills itself, the supervisor reaps it (wait4: killed by signal 9) and starts another, which
/// recovers the two records and writes the other three.
const SUPERVISED: &str = "\
supervisor 1: starting the fixed worker
worker 2: recovered 0 records
worker 2: wrote record 1
worker 2: wrote record 2
worker 2: killing itself after record 2
supervisor: worker 2 killed by signal 9, restarting
worker 3: recovered 2 records
worker 3: wrote record 3
worker 3: wrote record 4
worker 3: wrote record 5
worker 3: log complete with 5 records
supervisor: worker 3 exited 0
";

#[test]
fn the_supervisor_restarts_its_killed_worker_and_runs_are_identical() {
    let s = supervisor();
    let (out, r) = run_json(&[&s, "--", "fixed"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), SUPERVISED);
    let counts = &r["syscall_counts"];
    let count = |name: &str| counts[name].as_u64().unwrap_or(0);
    // Two forks (glibc's fork is clone), two execves of /proc/self/exe, two wait4s, one kill.
    assert_eq!((count("clone"), count("execve"), count("wait4"), count("kill")), (2, 2, 2, 1), "{counts}");
    // The fixed worker's fsyncs: /data once, then one per record.
    assert_eq!(count("fsync"), 6, "{counts}");
    assert_eq!(r["durable_writes"], 6);
    assert!(r["unsupported_syscalls"].as_object().is_none_or(|m| m.is_empty()), "{}", r["unsupported_syscalls"]);

    // The buggy worker prints the same when nothing crashes: its bug needs a crash.
    let buggy = deja(&["run", "--no-probe", &s, "--", "buggy"]);
    assert_eq!(buggy.status.code(), Some(0), "{}", stderr(&buggy));
    assert_eq!(stdout(&buggy), SUPERVISED.replace("the fixed worker", "the buggy worker"));

    // One process killed at a durable operation it makes (a re-executed /proc/self/exe is
    // named `exe`, as on Linux): the first worker before its fsync of record 2. The node goes
    // on, and the next worker reads record 2 from the page cache.
    let killed = deja(&["run", "--no-probe", "--kill-process", "exe:before:3", &s, "--", "fixed"]);
    assert_eq!(killed.status.code(), Some(0), "{}", stderr(&killed));
    assert!(
        stdout(&killed).contains(
            "worker 2: wrote record 1\nsupervisor: worker 2 killed by signal 9, restarting\nworker 3: recovered 2 records\n"
        ),
        "{}",
        stdout(&killed)
    );
    assert!(!stderr(&killed).contains("never struck"), "{}", stderr(&killed));
    // A kill placed on a name no process has is said to have never struck.
    let missed = deja(&["run", "--no-probe", "--kill-process", "worker:before:1", &s, "--", "fixed"]);
    assert_eq!(missed.status.code(), Some(0), "{}", stderr(&missed));
    assert!(
        stderr(&missed).contains(
            "deja: note: --kill-process worker:before:1 never struck: processes named \"worker\" made 0 durable operation(s)"
        ),
        "{}",
        stderr(&missed)
    );

    // Three runs, two of them in fresh processes on other cores, give one digest.
    let audit = deja(&["run", "--no-probe", "--audit", "3", &s, "--", "fixed"]);
    assert_eq!(audit.status.code(), Some(0), "{}", stderr(&audit));
    assert!(stderr(&audit).contains("deja: audit: identical over 3 runs"), "{}", stderr(&audit));
}

#[test]
fn the_crash_sweep_reaches_the_workers_fsyncs_and_the_fixed_log_holds() {
    let (plain, r) = run_json(&[&supervisor(), "--", "fixed"]);
    assert_eq!(plain.status.code(), Some(0));
    let fsyncs = r["syscall_counts"]["fsync"].as_u64().unwrap();
    let (out, v) = sweep("fixed", &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(v["verdict"], "all_held", "{v}");
    // pid 1 makes no durable write: every one the sweep crashes at is a worker's (a child of
    // pid 1 that re-executed the binary), in both workers.
    let d = v["durable_writes"].as_u64().unwrap();
    assert_eq!(d, fsyncs, "{v}");
    let points = v["crash_points"].as_u64().unwrap();
    assert_eq!(points, 2 * d + 1, "before and after each durable write, and at exit");
    assert!(points >= fsyncs);
    let rows = v["rows"].as_array().unwrap();
    assert!(rows.iter().all(|r| r["result"] == "held" || r["result"] == "same_image"), "{rows:?}");
    // Crashes in the second worker's life: its fsyncs are durable writes 4 to 6.
    assert!(rows.iter().any(|r| r["crash_point"] == "before durable write 6"), "{rows:?}");
    // The same sweep twice gives the same report.
    let (_, again) = sweep("fixed", &[]);
    assert_eq!(v["digest"], again["digest"]);
}

#[test]
fn the_crash_sweep_finds_the_buggy_workers_torn_record() {
    let (plain, r) = run_json(&[&supervisor(), "--", "buggy"]);
    assert_eq!(plain.status.code(), Some(0));
    let fsyncs = r["syscall_counts"]["fsync"].as_u64().unwrap();
    assert_eq!(fsyncs, 4, "after records 2 and 4, before the first worker kills itself, and at the end");
    let (out, v) = sweep("buggy", &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(v["verdict"], "failures");
    let points = v["crash_points"].as_u64().unwrap();
    assert!(points >= fsyncs, "{v}");
    assert_eq!(points, 2 * v["durable_writes"].as_u64().unwrap() + 1);
    let rows = v["rows"].as_array().unwrap();
    let failed: Vec<&serde_json::Value> = rows.iter().filter(|r| r["result"] == "failed").collect();
    assert!(!failed.is_empty());
    for f in &failed {
        assert_eq!(f["restart_exit_code"], 3, "{f}");
        assert!(lines(&f["restart_stderr"]).iter().any(|l| l.starts_with("CORRUPT /data/log: record ")), "{f}");
        assert!(f["crash_point"].as_str().unwrap().starts_with("before durable write"), "{f}");
    }
    // Not only a portability hazard: a record's first half kept and its second lost is a bug
    // on ext4-ordered (the appends are kept in file order, the last one torn off).
    let torn = failed
        .iter()
        .find(|f| f["bug_on"] == "ext4-ordered")
        .unwrap_or_else(|| panic!("no failure on ext4-ordered: {failed:?}"));
    assert!(lines(&torn["restart_stderr"]).iter().any(|l| l.contains("is torn")), "{torn}");
    // A hole: a later record kept, an earlier one lost (only posix-weak allows it).
    assert!(
        failed.iter().any(|f| f["bug_on"] == "posix-weak"
            && lines(&f["restart_stderr"])
                .iter()
                .any(|l| l.contains("torn or out of sequence") || l.contains("missing"))),
        "{failed:?}"
    );
    // The row's command replays it: the restarted supervisor reports the corrupt log.
    let again = replay_row(torn);
    assert_eq!(again.status.code(), Some(3), "{}", stderr(&again));
    assert!(stdout(&again).contains("reported a corrupt log (exit 3)"), "{}", stdout(&again));
    assert!(stderr(&again).contains("CORRUPT /data/log"), "{}", stderr(&again));
    assert!(stderr(&again).contains("crashed before durable write"), "{}", stderr(&again));
}

#[test]
fn a_supervisor_that_restarts_its_worker_after_a_failed_fsync_breaks_its_log() {
    // The fixed supervisor stops on the worker's I/O error (a fail-stop: the node restarts
    // on what the disk holds); it holds with every fsync failing once, then every crash after.
    let (out, v) = sweep("fixed", &["--fsync-failures", "6"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(v["verdict"], "all_held", "{v}");
    // Restarting the worker instead builds on a record the failed fsync dropped from the disk
    // but the page cache still shows: a crash after leaves a hole.
    let (out, v) = sweep("retry-eio", &["--fsync-failures", "6"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let rows = v["rows"].as_array().unwrap();
    let hole = rows
        .iter()
        .find(|r| {
            r["result"] == "failed"
                && r["crash_point"].as_str().unwrap().starts_with("EIO on fsync #1 of /data/log, then")
                && lines(&r["restart_stderr"]).iter().any(|l| l.contains("record 1 is missing"))
        })
        .unwrap_or_else(|| panic!("{rows:?}"));
    assert_eq!(hole["bug_on"], "process-kill", "a bug on every file system: {hole}");
    let again = replay_row(hole);
    assert_eq!(again.status.code(), Some(3), "{}", stderr(&again));
    assert!(stdout(&again).contains("worker 2 exited 4, restarting"), "{}", stdout(&again));
    assert!(stderr(&again).contains("CORRUPT /data/log: record 1 is missing"), "{}", stderr(&again));
}

#[test]
fn exploring_finds_the_buggy_supervisor_and_not_the_fixed_one() {
    let s = supervisor();
    let out = out_dir("supervisor-buggy");
    // Seeds 1 to 8 find it in rounds 20, 4, 1, 5, 3, 7, 17 and 13: a crash before an fsync
    // with only some pending writes kept, or an I/O error on a record's write (the worker stops
    // with half a record in the log, which the next life's worker reports torn).
    let o = explore(
        &out,
        &["--runs", "150", "--stop-at-first-bug", "--mode", "faults", "--seed", "1"],
        &[&s, "--", "buggy"],
    );
    assert_eq!(o.status.code(), Some(1), "a bug found: {}", stderr(&o));
    let c = campaign(&out);
    assert_eq!(c["bugs"].as_array().unwrap().len(), 1, "{c}");
    assert!(c["bugs"][0]["signature"].as_str().unwrap().starts_with("exit code 3: "), "named by what it said: {c}");
    assert!(c["rounds"].as_u64().unwrap() < 150, "it stopped at the bug: {}", c["rounds"]);
    assert!(c["unconfirmed"].as_array().unwrap().is_empty(), "{}", c["unconfirmed"]);
    let bug = bug_file(&out);
    let r = deja(&["replay", bug.to_str().unwrap()]);
    assert_eq!(r.status.code(), Some(1), "{}", stderr(&r));
    assert!(stderr(&r).contains("reproduced bug"), "{}", stderr(&r));
    // The worker's complaint and its supervisor's, from two processes of the replayed node.
    assert!(stderr(&r).contains("CORRUPT /data/log"), "{}", stderr(&r));
    assert!(stdout(&r).contains("reported a corrupt log (exit 3)"), "{}", stdout(&r));
    std::fs::remove_dir_all(&out).ok();

    let out = out_dir("supervisor-fixed");
    let o = explore(&out, &["--runs", "60", "--mode", "faults", "--seed", "1"], &[&s, "--", "fixed"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let c = campaign(&out);
    assert_eq!(c["rounds"], 60);
    assert!(c["bugs"].as_array().unwrap().is_empty(), "{c}");
    assert!(c["faults"]["crash"].as_u64().unwrap_or(0) > 0, "rounds crashed the node: {}", c["faults"]);
    std::fs::remove_dir_all(&out).ok();
}

fn node<'a>(r: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    r["nodes"].as_array().unwrap().iter().find(|n| n["name"] == name).unwrap_or_else(|| panic!("no node {name}"))
}

#[test]
fn the_forkserver_serves_each_connection_in_a_child_and_reaps_them() {
    let (out, r) = run_json(&[&example("forkserver.toml")]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));
    assert!(text.contains("[client] client: all answers right"), "{text}");
    assert!(text.contains("[client] client: server reaped every earlier child"), "{text}");
    // Two connections open at once, served by two children side by side.
    let second = text.find("[server] server: connection 2 from 10.0.0.2:").expect(&text);
    let first_closed = text.find("[server] server: child 2: connection 1 closed").expect(&text);
    assert!(second < first_closed, "{text}");
    for want in [
        "[server] server: child 3: PUT banana yellow -> OK",
        "[server] server: child 2: GET banana -> VALUE yellow",
        "[server] server: child 4: PUT cherry dark-red -> OK",
        "[server] server: reaped child 2 (exit 0)",
        "[server] server: reaped child 3 (exit 0)",
        "[server] server: reaped child 4 (exit 0)",
    ] {
        assert!(text.contains(want), "{want}: {text}");
    }
    assert_eq!(node(&r, "client")["lives"][0]["exit"], serde_json::json!({"kind": "exited", "code": 0}));
    let server = &node(&r, "server")["lives"][0];
    let count = |name: &str| server["syscall_counts"][name].as_u64().unwrap_or(0);
    assert!(count("clone") >= 4, "a fork per connection: {}", server["syscall_counts"]);
    assert!(count("wait4") >= 4, "waitpid: {}", server["syscall_counts"]);
    assert!(count("rt_sigreturn") >= 1, "the SIGCHLD handler ran: {}", server["syscall_counts"]);
    // Every PUT is durable before its answer: a file fsync and a directory fsync each.
    assert_eq!(count("fsync"), 8, "{}", server["syscall_counts"]);

    let audit = deja(&["run", "--no-probe", "--audit", "3", &example("forkserver.toml")]);
    assert_eq!(audit.status.code(), Some(0), "{}", stderr(&audit));
    assert!(stderr(&audit).contains("deja: audit: identical over 3 runs"), "{}", stderr(&audit));
}

/// The server waiting in `ppoll` with `SIGCHLD` blocked outside it (`forkserver server 7000
/// ppoll`), the race-free way on Linux: the call's own mask lets `SIGCHLD` through, so the
/// parent's `ppoll` ends with `EINTR`, its handler runs, and the children are reaped before
/// the client's `STATS` check, as natively.
#[test]
fn the_forkserver_waiting_in_ppoll_takes_sigchld_through_the_calls_mask() {
    let text = std::fs::read_to_string(example("forkserver.toml"))
        .unwrap()
        .replace("args = [\"server\", \"7000\"]", "args = [\"server\", \"7000\", \"ppoll\"]");
    assert!(text.contains("\"ppoll\""), "the example's server arguments changed");
    let dir = root().join("target/test-clusters");
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("forkserver-ppoll.toml");
    std::fs::write(&p, text.replace("../../target/guests", &guests().to_string_lossy())).unwrap();
    let (out, r) = run_json(&[&p.to_string_lossy()]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));
    assert!(text.contains("[client] client: server reaped every earlier child"), "{text}");
    let calls = &node(&r, "server")["lives"][0]["syscall_counts"];
    assert!(calls["ppoll"].as_u64().unwrap_or(0) > 0 && calls["rt_sigreturn"].as_u64().unwrap_or(0) > 0, "{calls}");
}

/// The example cluster with a crash of the server node before its third durable operation on
/// /data (the directory fsync of the third PUT) and EIO on the fifth (counted over the node's
/// run: the second PUT after the restart).
fn crashing_cluster() -> PathBuf {
    let text = std::fs::read_to_string(example("forkserver.toml")).unwrap().replace(
        "[[node]]\nname = \"server\"",
        "[[faults.storage.crash]]\nnode = \"server\"\nwhen = \"before\"\npath = \"/data\"\nnth = 3\n\n\
         [[faults.storage.error]]\nnode = \"server\"\nop = \"fsync\"\npath = \"/data\"\nnth = 5\nerrno = \"eio\"\n\n\
         [[node]]\nname = \"server\"",
    );
    let dir = root().join("target/test-clusters");
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("forkserver-crash.toml");
    let g = guests();
    std::fs::write(&p, text.replace("../../target/guests", &g.to_string_lossy())).unwrap();
    p
}

#[test]
fn a_crash_of_the_forkserver_node_ends_every_process_and_the_client_still_sees_its_writes() {
    let p = crashing_cluster();
    let (out, r) = run_json(&[&p.to_string_lossy()]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));
    let kinds: Vec<String> =
        r["faults"].as_array().unwrap().iter().map(|f| f["kind"].as_str().unwrap().to_string()).collect();
    assert_eq!(kinds, ["crash", "restart", "eio"], "{}", r["faults"]);
    let server = node(&r, "server");
    assert_eq!(server["lives"].as_array().unwrap().len(), 2);
    // The crash came while two children served the two open connections: both break.
    assert_eq!(text.matches("[server] server: pid 1 listening on port 7000").count(), 2, "{text}");
    assert_eq!(text.matches("connection broken: reconnecting").count(), 2, "{text}");
    // The restarted server's children number from 2 again, and serve what was acknowledged.
    assert!(text.contains("[server] server: child 3: GET apple -> VALUE green"), "{text}");
    assert!(text.contains("[client] client: GET banana -> VALUE yellow"), "{text}");
    // The failed directory fsync is answered ERR and the PUT retried on a new connection.
    assert!(text.contains("-> ERR put cherry: Input/output error"), "{text}");
    assert!(text.contains("[client] client: PUT cherry dark-red -> OK"), "{text}");
    assert!(text.contains("[client] client: all answers right"), "{text}");
}

#[test]
fn exploring_the_forkserver_cluster_runs_its_rounds() {
    let out = out_dir("forkserver");
    let o = explore(&out, &["--runs", "20", "--mode", "faults", "--seed", "1"], &[&example("forkserver.toml")]);
    // The server is right under crashes and I/O errors (200 rounds find nothing either): a bug
    // here would be the guest's or deja's, and its replay says which.
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("explored 20 cluster rounds"), "{}", stderr(&o));
    let c = campaign(&out);
    assert_eq!(c["rounds"], 20);
    assert!(c["bugs"].as_array().unwrap().is_empty(), "{}", c["bugs"]);
    assert!(c["unconfirmed"].as_array().unwrap().is_empty(), "{}", c["unconfirmed"]);
    // Rounds crashed the server node (every process of it) at its durable writes and
    // restarted it.
    let crashes = c["faults"]["crash"].as_u64().unwrap_or(0);
    assert!(crashes > 0 && c["faults"]["restart"].as_u64().unwrap_or(0) == crashes, "{}", c["faults"]);
    // The behaviours are mostly the nodes' output lines (numbers masked), most of those the
    // server's children's (`child #: PUT apple red -> OK`): these rounds show 41.
    assert!(c["edges_hit"].as_u64().unwrap() > 30, "{c}");
    std::fs::remove_dir_all(&out).ok();
}
