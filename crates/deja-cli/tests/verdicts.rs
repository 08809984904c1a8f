//! Verdicts only the evidence can give: a fail-stop after an injected fault is no failure,
//! storage faults strike the system under test and not its harness, a scripted fault that
//! cannot be applied is reported, a run that ran out of its budget is incomplete evidence, the
//! verdict does not depend on whether the bug was minimized, and whatever `deja replay`
//! reproduces `deja check --bug` reproduces, for every kind of fault the explorer draws.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::common::*;
use serde_json::Value;

fn walkv(variant: &str) -> String {
    guest(&format!("walkv-{variant}")).to_string_lossy().into_owned()
}

fn out_dir(name: &str) -> PathBuf {
    let d = root().join("target/test-verdicts").join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A cluster file in its own directory: the write-ahead-log server `server` (a walkv binary
/// name, with `server_args` after its address and data) and the client writing `writes` keys,
/// with `extra` TOML before the nodes, and 30 s of virtual time.
fn cluster(name: &str, server: &str, server_args: &[&str], writes: u64, extra: &str) -> PathBuf {
    cluster_within(name, server, server_args, writes, extra, 30_000)
}

/// [`cluster`] with a budget of `time_limit_ms` of virtual time.
fn cluster_within(
    name: &str,
    server: &str,
    server_args: &[&str],
    writes: u64,
    extra: &str,
    time_limit_ms: u64,
) -> PathBuf {
    let g = guests().display().to_string();
    let mut args = vec!["--listen", "10.0.0.1:7000", "--data", "/data"];
    args.extend_from_slice(server_args);
    let text = format!(
        "seed = 1\ntime_limit_ms = {time_limit_ms}\n[network]\nlatency_ms = [1, 2]\n{extra}\n\
         [[node]]\nname = \"server\"\naddress = \"10.0.0.1\"\nbinary = \"{g}/{server}\"\nargs = {args:?}\nwait = false\n\
         [[node]]\nname = \"client\"\naddress = \"10.0.0.10\"\nbinary = \"{g}/walkv-client\"\n\
         args = [\"--server\", \"10.0.0.1:7000\", \"--writes\", \"{writes}\"]\n"
    );
    let path = out_dir(name).join("cluster.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn check(out: &Path, args: &[&str]) -> (i32, Value, String) {
    let mut all = vec!["check", "--json", "--out", out.to_str().unwrap()];
    all.extend_from_slice(args);
    let o = deja(&all);
    let cert: Value = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
    (o.status.code().unwrap_or(-1), cert, stderr(&o))
}

#[test]
fn a_stop_after_an_injected_io_error_is_a_fail_stop_not_a_failure_unless_the_program_says_so() {
    // The fixed server stops (exit 2) when a write of its log fails: deja restarts it on its
    // disk, and the client's check after the restart holds.
    let o = deja(&["run", "--no-probe", "--fail", "write:/data/wal:3", &walkv("fixed"), "--", "--single", "8"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("at its fail-stop (status 2) after eio on write #3 to /data/wal"), "{err}");
    // The program's opt-out: the same stop is then its failure.
    let o = deja(&[
        "run",
        "--no-probe",
        "--fail",
        "write:/data/wal:3",
        &walkv("fixed"),
        "--",
        "--single",
        "8",
        "--fail-stop-is-failure",
        "yes",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    // A cluster node that stops on an injected error restarts; the waited client holds.
    let file = cluster(
        "fail-stop-cluster",
        "walkv-fixed",
        &[],
        10,
        "[[faults.storage.error]]\nnode = \"server\"\nop = \"write\"\npath = \"/data/wal\"\nnth = 4\n",
    );
    let o = deja(&["run", "--no-probe", file.to_str().unwrap()]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("crash server at its fail-stop (status 2) after eio on write #4 to /data/wal"), "{err}");
    assert!(err.contains("restart server after its crash"), "{err}");
    // The judge: every error the sweep places on the fixed server's files ends in a fail-stop,
    // and the verdict is the fix's.
    let out = out_dir("fail-stop-check");
    let (code, cert, err) =
        check(&out, &["--base", &walkv("buggy"), "--candidate", &walkv("fixed"), "--", "--single", "20"]);
    assert_eq!((code, cert["verdict"].as_str()), (0, Some("FIXED_FOR_THIS_CAPSULE")), "{err}");
}

#[test]
fn storage_faults_strike_the_system_under_test_not_its_harness() {
    // The single program's client logs acknowledgements in /data/acked and excludes it: an
    // error placed there never strikes, and the report offers none of its operations.
    let (o, report) = run_json(&["--fail", "write:/data/acked:1", &walkv("fixed"), "--", "--single", "5"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(report["assertion_failed"], false);
    assert!(!stderr(&o).contains("eio"), "no error struck: {}", stderr(&o));
    // A cluster file names the nodes and paths storage faults may strike, and refuses a fault
    // outside them.
    let outside = cluster(
        "targets-node",
        "walkv-fixed",
        &[],
        5,
        "[faults.storage]\nnodes = [\"server\"]\n[[faults.storage.crash]]\nnode = \"client\"\nwhen = \"after\"\npath = \"/data/x\"\nnth = 1\n",
    );
    let o = deja(&["run", "--no-probe", outside.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("crash client after durable op #1 on /data/x is outside faults.storage"),
        "{}",
        stderr(&o)
    );
    let narrowed = cluster(
        "targets-path",
        "walkv-buggy",
        &[],
        5,
        "[faults.storage]\nnodes = [\"server\"]\npaths = [\"/data/wal\"]\n",
    );
    let (o, report) = run_json(&[narrowed.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let nodes = report["nodes"].as_array().unwrap();
    let node = |name: &str| nodes.iter().find(|n| n["name"] == name).unwrap();
    assert_eq!(node("client")["storage_faults"], false);
    assert_eq!(node("server")["storage_faults"], true);
    let ops: Vec<&Value> =
        node("server")["lives"].as_array().unwrap().iter().flat_map(|l| l["durable_ops"].as_array().unwrap()).collect();
    assert!(!ops.is_empty() && ops.iter().all(|d| d["path"] == "/data/wal"), "only the targeted path: {ops:?}");
}

#[test]
fn a_scripted_fault_that_cannot_be_applied_is_reported_never_dropped() {
    // The server is killed once and restarted twice: the second restart finds it running.
    let file = cluster(
        "not-applied",
        "walkv-fixed",
        &[],
        10,
        "[[faults.schedule]]\nat_ms = 50\naction = \"kill\"\nnode = \"server\"\n\
         [[faults.schedule]]\nat_ms = 100\naction = \"restart\"\nnode = \"server\"\n\
         [[faults.schedule]]\nat_ms = 150\naction = \"restart\"\nnode = \"server\"\n",
    );
    let o = deja(&["run", "--no-probe", file.to_str().unwrap()]);
    let err = stderr(&o);
    assert!(err.contains("not-applied restart server at 150 ms: the node is running"), "{err}");
}

#[test]
fn a_run_out_of_its_budget_is_incomplete_evidence_and_a_node_still_running_is_not_dead() {
    // 400 writes 20 ms apart do not fit in 2 s of virtual time.
    let file = cluster_within("budget-run", "walkv-fixed", &[], 400, "", 2_000);
    let o = deja(&["run", "--no-probe", file.to_str().unwrap()]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(err.contains("still running when the time budget ran out"), "{err}");
    assert!(err.contains("(still running: client)"), "{err}");
    assert!(!err.contains("died of SIGKILL") && !err.contains("SIGKILL (still running"), "{err}");
    // The judge: a candidate whose client cannot finish within the budget gives no verdict.
    let base = cluster(
        "budget-base",
        "walkv-buggy",
        &[],
        20,
        "[[faults.storage.crash]]\nnode = \"server\"\nwhen = \"before\"\npath = \"/data/wal\"\nnth = 2\n",
    );
    let campaign = out_dir("budget-campaign");
    let e = deja(&[
        "explore",
        "--quiet",
        "--runs",
        "1",
        "--jobs",
        "1",
        "--out",
        campaign.to_str().unwrap(),
        base.to_str().unwrap(),
    ]);
    assert_eq!(e.status.code(), Some(1), "{}", stderr(&e));
    let slow = cluster("budget-candidate", "walkv-fixed", &[], 5000, "");
    let (code, cert, err) = check(
        &out_dir("budget-check"),
        &["--bug", bug_file(&campaign).to_str().unwrap(), "--candidate", slow.to_str().unwrap()],
    );
    assert_eq!((code, cert["verdict"].as_str()), (3, Some("EVIDENCE_INCOMPLETE")), "{err}");
    assert!(err.contains("ran out of its time budget with client still running"), "{err}");
}

#[test]
fn the_verdict_does_not_depend_on_whether_the_bug_was_minimized() {
    // A bug found under random kills carries every kill and restart of its run; the check
    // minimizes it itself, says so, and gives the verdict the minimized bug gets.
    let campaign = out_dir("minimized-campaign");
    let file = root().join("examples/clusters/walkv-buggy-kills.toml");
    let e = deja(&[
        "explore",
        "--quiet",
        "--runs",
        "30",
        "--stop-at-first-bug",
        "--mode",
        "faults",
        "--seed",
        "1",
        "--jobs",
        "1",
        "--out",
        campaign.to_str().unwrap(),
        file.to_str().unwrap(),
    ]);
    assert_eq!(e.status.code(), Some(1), "{}", stderr(&e));
    let bug = bug_file(&campaign);
    let found: Value = serde_json::from_str(&std::fs::read_to_string(&bug).unwrap()).unwrap();
    assert!(found["faults"].as_array().unwrap().len() > 2, "an unminimized bug: {found}");
    let m = deja(&["minimize", bug.to_str().unwrap()]);
    assert_eq!(m.status.code(), Some(0), "{}", stderr(&m));
    let min = bug.with_extension("min.json");
    for candidate in ["fixed", "wrong"] {
        let server = format!("server={}", walkv(candidate));
        let (a, ca, ea) =
            check(&out_dir(&format!("found-{candidate}")), &["--bug", bug.to_str().unwrap(), "--candidate", &server]);
        let (b, cb, eb) =
            check(&out_dir(&format!("min-{candidate}")), &["--bug", min.to_str().unwrap(), "--candidate", &server]);
        assert_eq!((a, &ca["verdict"]), (b, &cb["verdict"]), "{candidate}:\n{ea}\n{eb}");
        assert!(ea.contains("minimize the bug: minimized here, as deja minimize does"), "{ea}");
        assert!(eb.contains("minimize the bug: minimized already"), "{eb}");
    }
}

/// A program bug file, as `deja explore` writes it: `input` applied at the syscall after the
/// program's `setup_complete` (or, for an input with a seed of its own, a round of the random
/// strategy, from the start), on `program` with `args`; `None` when the run does not fail.
fn program_bug(dir: &Path, program: &str, args: &[&str], input: deja_explore::Input) -> Option<PathBuf> {
    let image = std::fs::read(program).unwrap();
    let name = Path::new(program).file_name().unwrap().to_string_lossy().into_owned();
    let spec = deja_kernel::ProgramSpec::for_program(image, &name, args.iter().map(|s| s.to_string()), 0);
    let target = deja_explore::Target { spec, memory: 1024 << 20, path: program.to_string(), root: None };
    let settings = deja_vmm::Settings::default();
    let plain = deja_explore::input::run_fresh_under(
        &target,
        &settings,
        u64::MAX,
        &deja_explore::Input::default(),
        &mut |_, _| {},
    )
    .unwrap();
    let setup = plain.lives[0].run.report.setup_complete.as_ref().map_or(0, |s| s.syscall_index + 1);
    let fork_at = if input.seed.is_some() { 0 } else { setup };
    let out = deja_explore::input::run_fresh_under(&target, &settings, fork_at, &input, &mut |_, _| {}).unwrap();
    out.failure.as_ref()?;
    let path = dir.join("bug.json");
    let bug = deja_explore::BugFile::new(&target, &settings, fork_at, &input, &out, 1, &path.display().to_string());
    bug.write(&path).unwrap();
    Some(path)
}

#[test]
fn whatever_replay_reproduces_check_reproduces_for_every_kind_of_fault() {
    use deja_kernel::{CrashState, ErrorRule, FaultConfig, IoErrno, IoOp, OpCrash, When};
    let crash = |f: FaultConfig| deja_explore::Input { faults: f, ..Default::default() };
    let error = |op, path: &str, nth, errno| ErrorRule { op, path: path.into(), nth, errno, range: None, keep: None };
    let single = ["--single", "20"];
    let single_timer = ["--single", "20", "--sync-every-ms", "30"];
    let ack = ["8"];
    let cases: Vec<(&str, String, &[&str], deja_explore::Input)> = vec![
        (
            "crash after a durable write",
            walkv("buggy"),
            &single,
            crash(FaultConfig { crash_after_durable_write: Some(8), ..Default::default() }),
        ),
        (
            "crash before a durable write, the state by decisions",
            walkv("buggy"),
            &single,
            crash(FaultConfig {
                crash_before_durable_write: Some(9),
                reordered_writes: true,
                torn_writes: true,
                ..Default::default()
            }),
        ),
        (
            "crash before a durable write, the state named",
            walkv("buggy"),
            &single,
            crash(FaultConfig {
                crash_before_durable_write: Some(9),
                crash_state: Some(CrashState { kept: vec![0], torn: None }),
                ..Default::default()
            }),
        ),
        ("crash at exit", walkv("buggy"), &single, crash(FaultConfig { crash_at_exit: true, ..Default::default() })),
        (
            "crash at a durable operation by meaning",
            walkv("buggy"),
            &single_timer,
            crash(FaultConfig {
                crash_at: vec![OpCrash { when: When::Before, path: "/data/wal".into(), nth: 2, keep: None }],
                ..Default::default()
            }),
        ),
        (
            "a crash with the decisions of another seed",
            walkv("buggy"),
            &single,
            deja_explore::Input {
                reseed: Some(77),
                ..crash(FaultConfig { crash_after_durable_write: Some(10), ..Default::default() })
            },
        ),
        (
            "EIO on a write",
            guest("ackstore-buggy").display().to_string(),
            &ack,
            crash(FaultConfig { errors: vec![error(IoOp::Write, "/data/log", 3, IoErrno::Eio)], ..Default::default() }),
        ),
        (
            "ENOSPC on a write",
            guest("ackstore-buggy").display().to_string(),
            &ack,
            crash(FaultConfig {
                errors: vec![error(IoOp::Write, "/data/log", 2, IoErrno::Enospc)],
                ..Default::default()
            }),
        ),
        (
            "EIO on an fsync, then a crash",
            guest("ackstore-buggy").display().to_string(),
            &ack,
            crash(FaultConfig {
                errors: vec![error(IoOp::Fsync, "/data/log", 3, IoErrno::Eio)],
                crash_at_exit: true,
                ..Default::default()
            }),
        ),
        (
            "EIO at a rate, in a round of its own seed",
            guest("ackstore-buggy").display().to_string(),
            &ack,
            deja_explore::Input {
                seed: Some(1),
                ..crash(FaultConfig { eio_on_write_ppm: 300_000, ..Default::default() })
            },
        ),
    ];
    for (i, (what, program, args, input)) in cases.into_iter().enumerate() {
        let dir = out_dir(&format!("kinds-{i}"));
        let bug = program_bug(&dir, &program, args, input).unwrap_or_else(|| panic!("{what}: the run does not fail"));
        let b = bug.to_str().unwrap();
        let r = deja(&["replay", b]);
        assert_eq!(r.status.code(), Some(1), "{what}: replay: {}", stderr(&r));
        let (code, cert, err) = check(&dir.join("check"), &["--bug", b, "--base", &program, "--candidate", &program]);
        assert_eq!((code, cert["verdict"].as_str()), (1, Some("STILL_REPRODUCES")), "{what}:\n{err}");
    }
    // A cluster bug with every kind of storage fault and timed faults beside them.
    let kinds: BTreeMap<&str, &str> = BTreeMap::from([
        ("crash before", "[[faults.storage.crash]]\nnode = \"server\"\nwhen = \"before\"\npath = \"/data/wal\"\nnth = 2\n"),
        ("crash after", "[[faults.storage.crash]]\nnode = \"server\"\nwhen = \"after\"\npath = \"/data/wal\"\nnth = 1\n[[faults.storage.crash]]\nnode = \"server\"\nwhen = \"before\"\npath = \"/data/wal\"\nnth = 3\n"),
        ("errors and a crash", "[[faults.storage.error]]\nnode = \"server\"\nop = \"write\"\npath = \"/data/wal\"\nnth = 3\n[[faults.storage.error]]\nnode = \"server\"\nop = \"write\"\npath = \"/data/wal\"\nnth = 5\nerrno = \"enospc\"\n[[faults.storage.error]]\nnode = \"server\"\nop = \"fsync\"\npath = \"/data/wal\"\nnth = 1\n[[faults.storage.crash]]\nnode = \"server\"\nwhen = \"before\"\npath = \"/data/wal\"\nnth = 3\n"),
        ("kills and a crash", "[[faults.schedule]]\nat_ms = 120\naction = \"kill\"\nnode = \"server\"\n[[faults.schedule]]\nat_ms = 180\naction = \"restart\"\nnode = \"server\"\n[[faults.storage.crash]]\nnode = \"server\"\nwhen = \"before\"\npath = \"/data/wal\"\nnth = 3\n"),
    ]);
    for (i, (what, faults)) in kinds.into_iter().enumerate() {
        let file = cluster(&format!("cluster-kinds-{i}"), "walkv-buggy", &[], 20, faults);
        let campaign = out_dir(&format!("cluster-kinds-{i}-campaign"));
        let e = deja(&[
            "explore",
            "--quiet",
            "--runs",
            "1",
            "--jobs",
            "1",
            "--out",
            campaign.to_str().unwrap(),
            file.to_str().unwrap(),
        ]);
        assert_eq!(e.status.code(), Some(1), "{what}: {}", stderr(&e));
        let bug = bug_file(&campaign);
        let r = deja(&["replay", bug.to_str().unwrap()]);
        assert_eq!(r.status.code(), Some(1), "{what}: replay: {}", stderr(&r));
        let server = format!("server={}", walkv("buggy"));
        let (code, cert, err) = check(
            &out_dir(&format!("cluster-kinds-{i}-check")),
            &["--bug", bug.to_str().unwrap(), "--candidate", &server],
        );
        assert_eq!((code, cert["verdict"].as_str()), (1, Some("STILL_REPRODUCES")), "{what}:\n{err}");
    }
}
