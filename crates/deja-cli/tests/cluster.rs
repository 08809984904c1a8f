//! Clusters: several programs in their own VMs on the simulated network, with partitions,
//! kills and restarts; determinism across runs and seeds; the split-brain reference workload.

use std::path::PathBuf;

use crate::common::*;

fn example(name: &str) -> String {
    guests();
    root().join("examples/clusters").join(name).to_string_lossy().into_owned()
}

fn node<'a>(r: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    r["nodes"].as_array().unwrap().iter().find(|n| n["name"] == name).unwrap_or_else(|| panic!("no node {name}"))
}

fn last_exit(n: &serde_json::Value) -> serde_json::Value {
    n["lives"].as_array().unwrap().last().unwrap()["exit"].clone()
}

#[test]
fn echo_server_and_client_on_two_nodes() {
    let (out, r) = run_json(&[&example("echo.toml")]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));
    for k in 1..=3 {
        assert!(text.contains(&format!("[client] echoed: hello {k}")), "{text}");
    }
    assert!(text.contains("[server] accepted 10.0.0.2:"), "{text}");
    assert_eq!(r["outcome"]["kind"], "completed");
    assert_eq!(last_exit(node(&r, "client")), serde_json::json!({"kind": "exited", "code": 0}));
    assert_eq!(last_exit(node(&r, "server")), serde_json::json!({"kind": "exited", "code": 0}));
    assert!(r["network"]["delivered"].as_u64().unwrap() >= 8, "{}", r["network"]);
}

#[test]
fn nodes_reach_each_other_over_ipv6_and_a_dual_stack_listener_takes_ipv4_too() {
    let p = temp_cluster(
        "ipv6",
        r#"
seed = 2
time_limit_ms = 10000
[[node]]
name = "server"
address = "10.0.0.1"
binary = "GUESTS/echo-server"
args = ["--listen", "[::]:7000", "--connections", "2"]
[[node]]
name = "six"
address = "10.0.0.2"
binary = "GUESTS/echo-client"
args = ["--connect", "[fd00:6465:6a61::10.0.0.1]:7000", "--messages", "2", "--retry-for-ms", "2000"]
[[node]]
name = "four"
address = "10.0.0.3"
binary = "GUESTS/echo-client"
args = ["--connect", "10.0.0.1:7000", "--messages", "2", "--retry-for-ms", "2000"]
"#,
    );
    let (out, r) = run_json(&[&p.to_string_lossy()]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));
    assert!(text.contains("[six] echoed: hello 2") && text.contains("[four] echoed: hello 2"), "{text}");
    // Each client as the server sees it: by its node's IPv6 address, and IPv4-mapped.
    assert!(text.contains("[server] accepted [fd00:6465:6a61::a00:2]:"), "{text}");
    assert!(text.contains("[server] accepted [::ffff:10.0.0.3]:"), "{text}");
    assert_eq!(r["outcome"]["kind"], "completed");
}

#[test]
fn tokio_echo_on_current_and_multi_thread_runtimes() {
    for flavor in ["current", "multi"] {
        let p = temp_cluster(
            &format!("tokio-{flavor}"),
            &format!(
                r#"
seed = 3
time_limit_ms = 10000
[[node]]
name = "server"
address = "10.0.0.1"
binary = "GUESTS/tokio-echo-server"
args = ["--listen", "10.0.0.1:7000", "--connections", "2", "--flavor", "{flavor}"]
[[node]]
name = "c1"
address = "10.0.0.2"
binary = "GUESTS/tokio-echo-client"
args = ["--connect", "10.0.0.1:7000", "--messages", "3", "--retry-for-ms", "2000", "--flavor", "{flavor}"]
[[node]]
name = "c2"
address = "10.0.0.3"
binary = "GUESTS/tokio-echo-client"
args = ["--connect", "10.0.0.1:7000", "--messages", "2", "--retry-for-ms", "2000", "--flavor", "{flavor}"]
"#
            ),
        );
        let (out, r) = run_json(&[&p.to_string_lossy()]);
        let text = stdout(&out);
        assert_eq!(out.status.code(), Some(0), "{flavor}: {text}{}", stderr(&out));
        assert!(text.contains("[c1] echoed: hello 3") && text.contains("[c2] echoed: hello 2"), "{text}");
        let server = &node(&r, "server")["lives"][0];
        assert!(server["syscall_counts"]["epoll_wait"].as_u64().unwrap_or(0) > 0, "{flavor}: mio waits in epoll");
        assert!(server["unsupported"].as_object().unwrap().is_empty(), "{flavor}: {}", server["unsupported"]);
        if flavor == "multi" {
            assert!(server["syscall_counts"]["clone3"].as_u64().unwrap_or(0) >= 2, "worker threads");
        }
    }
}

#[test]
fn a_partition_times_out_connects_and_the_heal_lets_one_through() {
    let (out, r) = run_json(&[&example("partition.toml")]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));
    assert!(text.contains("[client] connect attempt 1 failed: TimedOut"), "{text}");
    assert!(text.contains("[client] connected to 10.0.0.1:7000"), "{text}");
    let kinds: Vec<&str> = r["faults"].as_array().unwrap().iter().map(|f| f["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["partition", "heal"]);
    // The connection is made after the heal at 2.5 s.
    assert!(r["virtual_time_ns"].as_u64().unwrap() > 2_500_000_000, "{}", r["virtual_time_ns"]);

    // Without the heal, every attempt times out and the client gives up.
    let never = std::fs::read_to_string(example("partition.toml"))
        .unwrap()
        .replace("at_ms = 2500", "at_ms = 60000")
        .replace("args = [\"--listen\", \"10.0.0.1:7000\"]", "args = [\"--listen\", \"10.0.0.1:7000\"]\nwait = false");
    let p = temp_cluster("partition-never-heals", &never.replace("../../target/guests", "GUESTS"));
    let (out, r) = run_json(&[&p.to_string_lossy()]);
    assert_eq!(out.status.code(), Some(1), "a waited node failed: {}", stderr(&out));
    assert_eq!(last_exit(node(&r, "client")), serde_json::json!({"kind": "exited", "code": 3}), "timed out");
    assert!(!stdout(&out).contains("connected to"));
}

#[test]
fn a_one_way_partition_cuts_one_direction() {
    let p = temp_cluster(
        "one-way",
        r#"
seed = 2
time_limit_ms = 5000
[[faults.schedule]]
at_ms = 0
action = "partition-one-way"
from = ["pong"]
to = ["ping"]
[[node]]
name = "pong"
address = "10.0.0.1"
binary = "GUESTS/udp-pong"
args = ["--bind", "10.0.0.1:9000"]
wait = false
[[node]]
name = "ping"
address = "10.0.0.2"
binary = "GUESTS/udp-ping"
args = ["--bind", "10.0.0.2:9000", "--peer", "10.0.0.1:9000", "--count", "3", "--timeout-ms", "100"]
"#,
    );
    let (out, _) = run_json(&[&p.to_string_lossy()]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));
    assert!(text.contains("[pong] pong 1 to 10.0.0.2:9000"), "pings get through: {text}");
    assert!(text.contains("[ping] sent 3 received 0"), "pongs do not: {text}");
}

#[test]
fn a_killed_node_restarts_with_its_durable_files() {
    let (out, r) = run_json(&[&example("restart.toml")]);
    assert_eq!(out.status.code(), Some(0), "{}{}", stdout(&out), stderr(&out));
    let kv = node(&r, "kv");
    let lives = kv["lives"].as_array().unwrap();
    assert_eq!(lives.len(), 2, "killed once, restarted once");
    assert_eq!(lives[0]["exit"]["signal"], 9);
    let details: serde_json::Value =
        serde_json::from_str(lives[1]["setup_complete"]["details"].as_str().unwrap()).unwrap();
    let (recovered, acked) = (details["recovered_keys"].as_u64().unwrap(), details["acked"].as_u64().unwrap());
    assert!(
        recovered > 0 && acked > 0,
        "the second life found the first one's durable puts: {}",
        lives[1]["setup_complete"]
    );
    let kinds: Vec<&str> = r["faults"].as_array().unwrap().iter().map(|f| f["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["kill", "restart"]);
}

#[test]
fn a_peer_that_dies_resets_the_connection() {
    let p = temp_cluster(
        "peer-dies",
        r#"
seed = 4
time_limit_ms = 5000
[[faults.schedule]]
at_ms = 100
action = "kill"
node = "server"
[[node]]
name = "server"
address = "10.0.0.1"
binary = "GUESTS/echo-server"
args = ["--listen", "10.0.0.1:7000"]
wait = false
[[node]]
name = "client"
address = "10.0.0.2"
binary = "GUESTS/echo-client"
args = ["--connect", "10.0.0.1:7000", "--messages", "1000"]
"#,
    );
    let (out, r) = run_json(&[&p.to_string_lossy()]);
    assert_eq!(last_exit(node(&r, "client")), serde_json::json!({"kind": "exited", "code": 5}), "{}", stdout(&out));
    assert_eq!(node(&r, "server")["ended"], "down");
}

#[test]
fn cluster_runs_are_deterministic_and_seeds_change_the_interleaving() {
    let out = deja(&["run", "--no-probe", "--audit", "5", &example("register-buggy.toml")]);
    let err = stderr(&out);
    assert!(err.contains("deja: audit: identical over 5 runs (this process and 4 fresh processes"), "{err}");
    let digests: std::collections::BTreeSet<String> = (1..=4)
        .map(|s| {
            let (_, r) = run_json(&["--seed", &s.to_string(), &example("echo.toml")]);
            r["digest"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(digests.len(), 4, "four seeds, four interleavings");
}

#[test]
fn split_brain_shows_in_the_buggy_register_and_never_in_the_fixed_one() {
    let mut hits = Vec::new();
    for seed in 1..=20 {
        let s = seed.to_string();
        let buggy = deja(&["run", "--no-probe", "--seed", &s, &example("register-buggy.toml")]);
        let fixed = deja(&["run", "--no-probe", "--seed", &s, &example("register-fixed.toml")]);
        assert_eq!(fixed.status.code(), Some(0), "fixed, seed {seed}: {}", stderr(&fixed));
        match buggy.status.code() {
            Some(123) => {
                assert!(stderr(&buggy).contains("acknowledged writes survive"), "{}", stderr(&buggy));
                assert!(stdout(&buggy).contains("lost: ["), "{}", stdout(&buggy));
                hits.push(seed);
            }
            Some(0) => {}
            c => panic!("buggy, seed {seed}: exit {c:?}: {}", stderr(&buggy)),
        }
    }
    assert!(!hits.is_empty(), "some partition schedule out of 20 seeds splits the brain");
    assert!(hits.len() < 20, "not every schedule does: {hits:?}");
}

#[test]
fn sockets_pipes_and_errors_inside_one_program() {
    let (out, v) = run_json(&[&guest("loopback").to_string_lossy()]);
    let text = stdout(&out);
    assert_eq!(v["exit_code"], 0, "{text}");
    assert!(text.contains("loopback: 0 failures"), "{text}");
    let audit = deja(&["run", "--no-probe", "--audit", "3", &guest("loopback").to_string_lossy()]);
    assert!(stderr(&audit).contains("audit: identical"), "{}", stderr(&audit));
}

#[test]
fn bad_cluster_files_get_clear_errors() {
    let cases = [
        ("unknown-field", "colour = 1\n[[node]]\nname = \"a\"\naddress = \"10.0.0.1\"\nbinary = \"GUESTS/hello\"\n", 2, "unknown field"),
        ("no-nodes", "seed = 1\n", 2, "at least one node"),
        (
            "same-address",
            "[[node]]\nname = \"a\"\naddress = \"10.0.0.1\"\nbinary = \"GUESTS/hello\"\n[[node]]\nname = \"b\"\naddress = \"10.0.0.1\"\nbinary = \"GUESTS/hello\"\n",
            2,
            "is taken",
        ),
        ("loopback", "[[node]]\nname = \"a\"\naddress = \"127.0.0.1\"\nbinary = \"GUESTS/hello\"\n", 2, "loopback"),
        ("missing-binary", "[[node]]\nname = \"a\"\naddress = \"10.0.0.1\"\nbinary = \"GUESTS/nope\"\n", 2, "cannot read"),
        (
            "unknown-node",
            "[[faults.schedule]]\nat_ms = 1\naction = \"kill\"\nnode = \"zz\"\n[[node]]\nname = \"a\"\naddress = \"10.0.0.1\"\nbinary = \"GUESTS/hello\"\n",
            2,
            "unknown node",
        ),
    ];
    for (name, text, code, msg) in cases {
        let p = temp_cluster(name, text);
        let out = deja(&["run", "--no-probe", &p.to_string_lossy()]);
        assert_eq!(out.status.code(), Some(code), "{name}: {}", stderr(&out));
        assert!(stderr(&out).contains(msg), "{name}: {}", stderr(&out));
    }
    let out = deja(&["run", "--no-probe", "/nonexistent/cluster.toml"]);
    assert_eq!(out.status.code(), Some(127), "{}", stderr(&out));
    let out = deja(&["run", "--no-probe", "--stdin", "/dev/null", &example("echo.toml")]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("does not apply to a cluster file"), "{}", stderr(&out));
}

#[test]
fn the_monitor_opens_no_host_sockets() {
    // While a cluster with a listening server and a client runs, deja's open files are KVM fds,
    // pipes and files: never a socket. A CPU-bound node keeps the run going long enough to look.
    let p = temp_cluster(
        "no-host-sockets",
        r#"
seed = 1
time_limit_ms = 60000
[[node]]
name = "server"
address = "10.0.0.1"
binary = "GUESTS/echo-server"
args = ["--listen", "10.0.0.1:7000", "--connections", "2"]
wait = false
[[node]]
name = "client"
address = "10.0.0.2"
binary = "GUESTS/echo-client"
args = ["--connect", "10.0.0.1:7000"]
[[node]]
name = "busy"
address = "10.0.0.3"
binary = "GUESTS/cpuburn"
args = ["200"]
"#,
    );
    let mut child = std::process::Command::new(deja_bin())
        .args(["run", "--no-probe", &p.to_string_lossy()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let fd_dir = PathBuf::from(format!("/proc/{}/fd", child.id()));
    let (mut looks_with_vms, mut sockets) = (0, Vec::new());
    while child.try_wait().unwrap().is_none() {
        let targets: Vec<String> = std::fs::read_dir(&fd_dir)
            .into_iter()
            .flatten()
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .map(|t| t.to_string_lossy().into_owned())
            .collect();
        if targets.iter().filter(|t| t.contains("kvm-vm")).count() >= 3 {
            looks_with_vms += 1;
        }
        sockets.extend(targets.into_iter().filter(|t| t.starts_with("socket:")));
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert!(child.wait().unwrap().success());
    assert!(looks_with_vms > 0, "the fds were read while the three VMs existed");
    assert!(sockets.is_empty(), "deja opened host sockets: {sockets:?}");
}

fn out_dir(name: &str) -> PathBuf {
    let d = root().join("target/test-cluster-explore").join(name);
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn explore_cluster(out: &std::path::Path, file: &str, flags: &[&str]) -> std::process::Output {
    let mut args = vec!["explore", "--quiet", "--out", out.to_str().unwrap()];
    args.extend_from_slice(flags);
    args.push(file);
    deja(&args)
}

#[test]
fn explore_finds_replays_and_minimizes_split_brain() {
    let out = out_dir("split-brain");
    let o = explore_cluster(
        &out,
        &example("register-buggy.toml"),
        &["--runs", "60", "--stop-at-first-bug", "--mode", "faults", "--seed", "1"],
    );
    assert_eq!(o.status.code(), Some(1), "a bug was found: {}", stderr(&o));
    assert!(stderr(&o).contains("assertion failed on client: acknowledged writes survive"), "{}", stderr(&o));
    let bug = bug_file(&out);
    let b: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&bug).unwrap()).unwrap();
    assert_eq!(b["schema"], "deja.cluster-bug/2");
    assert!(b["binaries"]["r1"].as_str().unwrap().len() == 64 && b["digest"].as_str().unwrap().len() == 64);
    assert!(b["faults"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["kind"] == "partition" || f["kind"] == "partition-one-way"));
    for report in ["report.txt", "report.json", "report.html"] {
        assert!(out.join(report).exists(), "{report}");
    }

    let r = deja(&["replay", "--trace", bug.to_str().unwrap()]);
    assert_eq!(r.status.code(), Some(1), "reproduced: {}", stderr(&r));
    assert!(stderr(&r).contains(&format!("digest {}", b["digest"].as_str().unwrap())), "{}", stderr(&r));
    assert!(stderr(&r).contains("the faults leading up to it"), "{}", stderr(&r));

    let m = deja(&["minimize", bug.to_str().unwrap()]);
    assert_eq!(m.status.code(), Some(0), "{}", stderr(&m));
    let min = bug.with_extension("min.json");
    let mb: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&min).unwrap()).unwrap();
    let kept = mb["input"]["schedule"].as_array().unwrap().len();
    let all = b["faults"].as_array().unwrap().iter().filter(|f| f["scripted"].is_object()).count();
    assert!(kept >= 1 && kept <= all, "kept {kept} of {all} faults");
    assert_eq!(mb["signature"], b["signature"]);
    let again = deja(&["replay", min.to_str().unwrap()]);
    assert_eq!(again.status.code(), Some(1), "the minimized schedule still fails: {}", stderr(&again));
    let shown = deja(&["inspect", min.to_str().unwrap()]);
    assert_eq!(shown.status.code(), Some(0), "{}", stderr(&shown));
    assert!(stdout(&shown).contains("deja.cluster-bug/2") && stdout(&shown).contains("schedule"), "{}", stdout(&shown));
    // A cut the found run healed stays healed in the smallest schedule.
    let actions = |schedule: Vec<&serde_json::Value>| -> Vec<String> {
        let mut s: Vec<(u64, String)> = schedule
            .into_iter()
            .map(|f| (f["at_ms"].as_u64().unwrap(), f["action"].as_str().unwrap().to_string()))
            .collect();
        s.sort();
        s.into_iter().map(|(_, a)| a).collect()
    };
    let found =
        actions(b["faults"].as_array().unwrap().iter().map(|f| &f["scripted"]).filter(|f| f.is_object()).collect());
    let smallest = actions(mb["input"]["schedule"].as_array().unwrap().iter().collect());
    let healed_after = |a: &[String], i: usize| a[i + 1..].iter().any(|x| x == "heal");
    for (i, a) in smallest.iter().enumerate() {
        if a.starts_with("partition") && found.iter().any(|x| x == "heal") {
            assert!(healed_after(&smallest, i), "a cut lost its heal: {found:?} became {smallest:?}");
        }
    }
    // The judge gives a correct candidate the same verdict against the bug as found and
    // against its smallest form, and the buggy one too.
    let g = guests();
    let replicas = |bin: &str| {
        let p = g.join(bin).to_string_lossy().into_owned();
        format!("r1={p},r2={p},r3={p}")
    };
    for (candidate, code, verdict) in
        [("register-replica-patched", 0, "FIXED_FOR_THIS_CAPSULE"), ("register-replica", 1, "STILL_REPRODUCES")]
    {
        for (which, file) in [("found", &bug), ("minimized", &min)] {
            let judged = out.join(format!("check-{candidate}-{which}"));
            let c = deja(&[
                "check",
                "--bug",
                file.to_str().unwrap(),
                "--candidate",
                &replicas(candidate),
                "--out",
                judged.to_str().unwrap(),
            ]);
            assert_eq!(c.status.code(), Some(code), "{candidate} against the {which} bug: {}", stderr(&c));
            assert!(stderr(&c).contains(&format!("verdict {verdict}")), "{which}: {}", stderr(&c));
        }
    }

    // Replay refuses a cluster whose binaries changed.
    let text = std::fs::read_to_string(&bug).unwrap().replace(b["binaries"]["r1"].as_str().unwrap(), &"0".repeat(64));
    let tampered = out.join("tampered.json");
    std::fs::write(&tampered, text).unwrap();
    let t = deja(&["replay", tampered.to_str().unwrap()]);
    assert_eq!(t.status.code(), Some(126), "{}", stderr(&t));
    assert!(stderr(&t).contains("the seal check failed"), "an edit breaks the seal: {}", stderr(&t));
    let r = deja(&["reseal", tampered.to_str().unwrap()]);
    assert_eq!(r.status.code(), Some(0), "{}", stderr(&r));
    let t = deja(&["replay", tampered.to_str().unwrap()]);
    assert_eq!(t.status.code(), Some(3), "{}", stderr(&t));
    // Resealed (an edit meant), the binary with the BLAKE3 it names is nowhere: the one the
    // cluster file names is said to have changed, and the option to give it is named.
    assert!(stderr(&t).contains("register-replica changed since the bug was found"), "{}", stderr(&t));
    assert!(stderr(&t).contains("give it with --program r1=PATH"), "{}", stderr(&t));
    std::fs::remove_dir_all(&out).ok();
}

#[test]
fn exploring_the_fixed_register_finds_nothing() {
    let out = out_dir("fixed");
    let o =
        explore_cluster(&out, &example("register-fixed.toml"), &["--runs", "60", "--mode", "faults", "--seed", "1"]);
    assert_eq!(o.status.code(), Some(0), "no bug in the fixed variant: {}", stderr(&o));
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    let r = &r["campaign"];
    assert_eq!(r["rounds"], 60, "the budget that finds the buggy variant's split brain");
    assert!(r["corpus_size"].as_u64().unwrap() >= 1);
    std::fs::remove_dir_all(&out).ok();
}

#[test]
fn a_killed_cluster_campaign_resumes_without_losing_anything() {
    let whole = out_dir("kill-whole");
    let killed = out_dir("kill-killed");
    let file = example("register-buggy.toml");
    let flags = ["--runs", "45", "--mode", "both", "--seed", "2"];
    let w = explore_cluster(&whole, &file, &flags);
    assert!(matches!(w.status.code(), Some(0 | 1)), "{}", stderr(&w));
    let mut child = std::process::Command::new(deja_bin())
        .args(["explore", "--quiet", "--out", killed.to_str().unwrap()])
        .args(flags)
        .arg(&file)
        .spawn()
        .unwrap();
    // SIGKILL once a checkpoint exists past round 10.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let round = std::fs::read_to_string(killed.join("checkpoint.json"))
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .and_then(|v| v["round"].as_u64())
            .unwrap_or(0);
        if round >= 10 || std::time::Instant::now() > deadline {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.kill().unwrap();
    let status = child.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(9), "killed before it finished: {status:?}");
    let mut resume = flags.to_vec();
    resume.push("--resume");
    let k = explore_cluster(&killed, &file, &resume);
    assert_eq!(k.status.code(), w.status.code(), "{}", stderr(&k));
    let read = |d: &std::path::Path| -> serde_json::Value {
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(d.join("report.json")).unwrap()).unwrap();
        v["campaign"].clone()
    };
    let (a, b) = (read(&whole), read(&killed));
    assert_eq!(a["rounds"], 45);
    assert!(a["timeline"].as_array().is_some_and(|t| t.len() == 45), "{a}");
    assert_eq!(a["rounds"], b["rounds"]);
    assert_eq!(a["corpus_size"], b["corpus_size"], "no corpus entry lost");
    assert_eq!(a["timeline"], b["timeline"]);
    let bugs = |r: &serde_json::Value| -> Vec<(String, u64, String)> {
        r["bugs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| {
                (
                    b["id"].as_str().unwrap().into(),
                    b["first_round"].as_u64().unwrap(),
                    b["signature"].as_str().unwrap().into(),
                )
            })
            .collect()
    };
    assert_eq!(bugs(&a), bugs(&b), "no bug lost");
    std::fs::remove_dir_all(&whole).ok();
    std::fs::remove_dir_all(&killed).ok();
}

#[test]
fn a_paused_node_misses_its_deadlines_and_catches_up() {
    let p = temp_cluster(
        "pause",
        r#"
seed = 5
time_limit_ms = 10000
[[faults.schedule]]
at_ms = 50
action = "pause"
node = "pong"
[[faults.schedule]]
at_ms = 600
action = "resume"
node = "pong"
[[node]]
name = "pong"
address = "10.0.0.1"
binary = "GUESTS/udp-pong"
args = ["--bind", "10.0.0.1:9000"]
wait = false
[[node]]
name = "ping"
address = "10.0.0.2"
binary = "GUESTS/udp-ping"
args = ["--bind", "10.0.0.2:9000", "--peer", "10.0.0.1:9000", "--count", "20", "--timeout-ms", "100", "--interval-ms", "20"]
"#,
    );
    let (out, r) = run_json(&[&p.to_string_lossy()]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));
    let line = text.lines().find(|l| l.starts_with("[ping] sent 20 received")).expect("summary line");
    let received: u32 = line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(received > 0 && received < 20, "pings during the pause time out, the others get through: {line}");
    assert!(text.contains("[ping] lost"), "{text}");
    let kinds: Vec<&str> = r["faults"].as_array().unwrap().iter().map(|f| f["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["pause", "resume"]);
}

#[test]
fn clock_faults_move_what_one_node_reads() {
    let p = temp_cluster(
        "clock",
        r#"
seed = 6
time_limit_ms = 5000
[[faults.schedule]]
at_ms = 0
action = "clock-skew"
node = "skewed"
ms = -5000
[[faults.schedule]]
at_ms = 100
action = "clock-jump"
node = "jumped"
ms = 3000
[[node]]
name = "skewed"
address = "10.0.0.1"
binary = "GUESTS/timerand"
[[node]]
name = "jumped"
address = "10.0.0.2"
binary = "GUESTS/timerand"
[[node]]
name = "plain"
address = "10.0.0.3"
binary = "GUESTS/timerand"
"#,
    );
    let (out, r) = run_json(&[&p.to_string_lossy()]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));
    let wall = |node: &str| -> u64 {
        let l = text.lines().find(|l| l.starts_with(&format!("[{node}] wall clock: "))).expect("wall clock line");
        l.split_whitespace().nth(3).unwrap().split('.').next().unwrap().parse().unwrap()
    };
    assert_eq!(wall("plain"), 1_700_000_000);
    assert_eq!(wall("skewed"), 1_700_000_000 - 5, "the wall clock is 5 s behind");
    // timerand sleeps 250 ms and reads the monotonic clock: the jump lands in the middle.
    let elapsed = |node: &str| -> String {
        text.lines()
            .find(|l| l.starts_with(&format!("[{node}] slept; monotonic elapsed: ")))
            .expect("elapsed")
            .to_string()
    };
    assert!(elapsed("plain").ends_with("250.01ms") || elapsed("plain").contains("250."), "{}", elapsed("plain"));
    assert!(elapsed("jumped").contains("3.25"), "the jump shows in the elapsed time: {}", elapsed("jumped"));
    let kinds: Vec<&str> = r["faults"].as_array().unwrap().iter().map(|f| f["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["clock-skew", "clock-jump"]);
}

#[test]
fn exploring_nodes_built_with_coverage_reads_their_edges() {
    let text = std::fs::read_to_string(example("register-buggy.toml")).unwrap();
    let cov = temp_cluster("register-cov", &text.replace("../../target/guests/register", "GUESTS/cov/register"));
    let plain = temp_cluster("register-plain", &text.replace("../../target/guests/register", "GUESTS/register"));
    let behaviours = |file: &std::path::Path, name: &str| -> u64 {
        let out = out_dir(name);
        let o = explore_cluster(&out, &file.to_string_lossy(), &["--runs", "3", "--mode", "faults", "--seed", "1"]);
        assert!(matches!(o.status.code(), Some(0 | 1)), "{}", stderr(&o));
        let r: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
        std::fs::remove_dir_all(&out).ok();
        r["campaign"]["edges_hit"].as_u64().unwrap()
    };
    let (with_edges, without) = (behaviours(&cov, "cov"), behaviours(&plain, "plain"));
    assert!(without > 10, "behaviours of the plain build: {without}");
    assert!(with_edges > without + 100, "edges of the instrumented nodes count as coverage: {with_edges} vs {without}");
}

#[test]
fn the_history_checker_finds_the_split_brain_without_the_clients_assertion() {
    // One run that splits the brain: the client asserts nothing, and deja's linearizability
    // checker names the read and the acknowledged adds it lacks.
    let buggy = example("register-buggy-history.toml");
    let o = deja(&["run", "--seed", "4", &buggy]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(!err.contains("assertion failed"), "the client asserts nothing: {err}");
    assert!(err.contains("deja: history not linearizable under the set model: a read cannot be placed"), "{err}");
    assert!(err.contains("the read lacks adds acknowledged before it began: 18, 19, 20, 21, 22"), "{err}");
    assert!(err.contains("← cannot be placed"), "the window on a timeline: {err}");
    assert!(stdout(&o).contains("[client] acknowledged 30 of 30 writes; lost: [18, 19, 20, 21, 22]"), "{}", stdout(&o));
    // A seed that does not split it: the history is linearizable.
    let o = deja(&["run", "--seed", "1", &buggy]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("deja: history: linearizable (31 operations)"), "{}", stderr(&o));

    // The explorer finds it as a bug of its own, and the replay shows the window again.
    let out = out_dir("history");
    let o = explore_cluster(&out, &buggy, &["--runs", "40", "--mode", "faults", "--seed", "1"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let bug = bug_file(&out);
    let b: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&bug).unwrap()).unwrap();
    assert_eq!(b["signature"], "history not linearizable under the set model: a read cannot be placed");
    assert!(b["history"].as_str().unwrap().contains("the read lacks"), "{}", b["history"]);
    let r = deja(&["replay", &bug.to_string_lossy()]);
    assert_eq!(r.status.code(), Some(1), "{}", stderr(&r));
    assert!(stderr(&r).contains("deja: history:   the read lacks"), "{}", stderr(&r));
    // Both reports show the window on its timeline under the bug.
    let text = std::fs::read_to_string(out.join("report.txt")).unwrap();
    let id = b["id"].as_str().unwrap();
    let heading = format!("bug {id}: the shortest window of the history that no order explains:");
    assert!(text.contains(&heading), "{text}");
    assert!(text.contains("← cannot be placed") && text.contains("  the read lacks"), "{text}");
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("the read lacks adds acknowledged before it began"), "the window is in report.html");
    std::fs::remove_dir_all(&out).ok();

    // The fixed replicas under the same faults: no history fails.
    let out = out_dir("history-fixed");
    let o = explore_cluster(
        &out,
        &example("register-fixed-history.toml"),
        &["--runs", "60", "--mode", "faults", "--seed", "1"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    std::fs::remove_dir_all(&out).ok();
}

#[test]
fn deja_check_judges_a_cluster_bug_by_meaning() {
    let g = guests();
    let nodes = |bin: &str| {
        let p = g.join(bin).to_string_lossy().into_owned();
        format!("r1={p},r2={p},r3={p}")
    };
    let check = |bug: &std::path::Path, candidate: &str, name: &str| {
        let out = out_dir(name);
        let o = deja(&[
            "check",
            "--bug",
            &bug.to_string_lossy(),
            "--candidate",
            candidate,
            "--out",
            &out.to_string_lossy(),
            // 16 crash points in the storage sweep (the default, 64, is the README's checks').
            "--node-crash-points",
            "16",
        ]);
        (o, out)
    };
    for (file, seed) in [("register-buggy.toml", "1"), ("register-buggy-history.toml", "1")] {
        let campaign = out_dir(&format!("judge-{file}"));
        let o = explore_cluster(&campaign, &example(file), &["--runs", "40", "--mode", "faults", "--seed", seed]);
        assert_eq!(o.status.code(), Some(1), "{file}: {}", stderr(&o));
        let bug = bug_file(&campaign);

        // The patched replicas hold: every check ran and passed, and the certificate verifies.
        let (o, out) = check(&bug, &nodes("register-replica-patched"), "judge-patched");
        assert_eq!(o.status.code(), Some(0), "{file}: {}", stderr(&o));
        let err = stderr(&o);
        assert!(err.contains("verdict FIXED_FOR_THIS_CAPSULE"), "{err}");
        assert!(err.contains("passed     the faults by meaning fail the base"), "{err}");
        assert!(err.contains("passed     sweep the candidate"), "{err}");
        let cert: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("certificate.json")).unwrap()).unwrap();
        let checks = cert["checks"].as_array().unwrap();
        assert_eq!(checks.len(), 8);
        assert!(checks.iter().all(|c| c["status"] == "passed"), "{cert}");
        let v = deja(&["verify-certificate", &out.join("certificate.json").to_string_lossy()]);
        assert_eq!(v.status.code(), Some(0), "{}", stderr(&v));

        // The buggy replicas as the candidate: the failure is still there.
        let (o, _) = check(&bug, &nodes("register-replica"), "judge-buggy");
        assert_eq!(o.status.code(), Some(1), "{file}: {}", stderr(&o));
        assert!(stderr(&o).contains("verdict STILL_REPRODUCES"), "{}", stderr(&o));

        // A candidate that is not there is missing evidence, never a pass.
        let (o, _) = check(&bug, "r1=/nonexistent/register-replica", "judge-missing");
        assert_eq!(o.status.code(), Some(3), "{file}: {}", stderr(&o));
        assert!(stderr(&o).contains("verdict EVIDENCE_INCOMPLETE"), "{}", stderr(&o));
        assert!(stderr(&o).contains("INCOMPLETE the candidate runs: no candidate"), "{}", stderr(&o));
        std::fs::remove_dir_all(&campaign).ok();
    }
    // A candidate cluster file: the fixed deployment (the same binary with --variant fixed).
    let campaign = out_dir("judge-deploy");
    let o = explore_cluster(
        &campaign,
        &example("register-buggy.toml"),
        &["--runs", "40", "--mode", "faults", "--seed", "1"],
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let (o, _) = check(&bug_file(&campaign), &example("register-fixed.toml"), "judge-deploy-check");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let (o, _) = check(&bug_file(&campaign), "r9=/bin/true", "judge-unknown-node");
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(stderr(&o).contains("which the cluster does not have"), "{}", stderr(&o));
    std::fs::remove_dir_all(&campaign).ok();
}

/// `deja explore` on a cluster file, killed if it has not ended after `limit`: a campaign that
/// hangs fails the test instead of hanging it.
fn explore_cluster_within(
    limit: std::time::Duration,
    out: &std::path::Path,
    file: &str,
    flags: &[&str],
) -> std::process::Output {
    let logs = out.with_extension("logs");
    std::fs::create_dir_all(&logs).unwrap();
    let (o, e) = (logs.join("stdout"), logs.join("stderr"));
    let mut child = std::process::Command::new(deja_bin())
        .args(["explore", "--quiet", "--out", out.to_str().unwrap()])
        .args(flags)
        .arg(file)
        .stdout(std::fs::File::create(&o).unwrap())
        .stderr(std::fs::File::create(&e).unwrap())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > limit {
            child.kill().ok();
            child.wait().ok();
            panic!(
                "deja explore {flags:?} {file} did not end within {limit:?}; its stderr:\n{}",
                std::fs::read_to_string(&e).unwrap_or_default()
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let output =
        std::process::Output { status, stdout: std::fs::read(&o).unwrap(), stderr: std::fs::read(&e).unwrap() };
    std::fs::remove_dir_all(&logs).ok();
    output
}

#[test]
fn a_cluster_whose_only_node_reads_files_and_fails_at_once_is_explored_to_its_budget() {
    // One node, no cluster decision, no durable operation and no write: only reads (a
    // dynamically linked /bin/false reads its libraries; the static cat, the file it is given).
    // The storage menu drew a fault for a fresh round until one came, and none could: the
    // campaign hung before its first round. Now such a node offers nothing, and the campaign
    // runs its rounds and reports the failure of its first one as a bug, as a program's does.
    let data = root().join("target/test-clusters/read-only-input.txt");
    std::fs::create_dir_all(data.parent().unwrap()).unwrap();
    std::fs::write(&data, "read, never written\n").unwrap();
    let files = format!("files = {{ \"/in.txt\" = \"{}\" }}", data.display());
    let cases = [
        ("false", "binary = \"/bin/false\"".to_string(), Some("node a exited with 1")),
        (
            "cat-fails",
            format!("binary = \"GUESTS/cat\"\nargs = [\"/in.txt\", \"/missing\"]\n{files}"),
            // Named by what it said, its numbers masked.
            Some("node a exited with 1: cat: /missing: No such file or directory (os error N)"),
        ),
        ("cat-passes", format!("binary = \"GUESTS/cat\"\nargs = [\"/in.txt\"]\n{files}"), None),
    ];
    for (name, node, failure) in cases {
        let file = temp_cluster(
            &format!("read-only-{name}"),
            &format!("seed = 1\ntime_limit_ms = 5000\n[[node]]\nname = \"a\"\naddress = \"10.0.0.1\"\n{node}\n"),
        );
        for jobs in ["1", "2"] {
            let out = out_dir(&format!("read-only-{name}-{jobs}"));
            // Fresh rounds (every third round, and with two workers the first round beside the
            // seed round) are the ones that drew storage faults.
            let o = explore_cluster_within(
                std::time::Duration::from_secs(240),
                &out,
                file.to_str().unwrap(),
                &["--runs", "12", "--jobs", jobs, "--seed", "3"],
            );
            let err = stderr(&o);
            let r: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
            assert_eq!(r["campaign"]["rounds"], 12, "{name}, {jobs} job(s): the whole budget ran: {err}");
            match failure {
                Some(words) => {
                    assert_eq!(o.status.code(), Some(1), "{name}, {jobs} job(s): a bug: {err}");
                    assert!(err.contains(&format!("(round 1): {words}")), "{name}, {jobs} job(s): {err}");
                    let bug = bug_file(&out);
                    let b: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&bug).unwrap()).unwrap();
                    assert_eq!(b["signature"], words, "{name}");
                    let replay = deja(&["replay", bug.to_str().unwrap()]);
                    assert_eq!(replay.status.code(), Some(1), "{name}: the bug replays: {}", stderr(&replay));
                }
                None => {
                    assert_eq!(o.status.code(), Some(0), "{name}, {jobs} job(s): no bug: {err}");
                    assert!(bug_files(&out).is_empty(), "{name}, {jobs} job(s): {err}");
                }
            }
            std::fs::remove_dir_all(&out).ok();
        }
    }
}

#[test]
fn a_cluster_bug_replays_with_the_libraries_it_was_found_with() {
    // A node's binary of a C project: its own library beside it (found through $ORIGIN) and
    // glibc's from the host. The library changes after the bug was found: the replay takes the
    // recorded one from the campaign's inputs/, and without it refuses, naming both hashes.
    let dir = root().join("target/test-clusters/origin-node");
    std::fs::remove_dir_all(&dir).ok();
    std::fs::create_dir_all(dir.join("lib")).unwrap();
    let lib = |words: &str| {
        let src = format!("const char *greeting(void) {{ return \"{words}\"; }}\n");
        std::fs::write(dir.join("greet.c"), src).unwrap();
        let o = std::process::Command::new("gcc")
            .args(["-shared", "-fPIC", "-o", "lib/libgreet.so", "greet.c"])
            .current_dir(&dir)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        blake3::hash(&std::fs::read(dir.join("lib/libgreet.so")).unwrap()).to_hex().to_string()
    };
    let first = lib("hello from the first build");
    let main = "#include <stdio.h>\nconst char *greeting(void);\nint main(void) { puts(greeting()); return 1; }\n";
    std::fs::write(dir.join("main.c"), main).unwrap();
    let o = std::process::Command::new("gcc")
        .args(["-o", "prog", "main.c", "-Llib", "-lgreet", "-Wl,--enable-new-dtags,-rpath,$ORIGIN/lib"])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let file = temp_cluster(
        "origin-node",
        &format!(
            "seed = 1\ntime_limit_ms = 5000\n[[node]]\nname = \"a\"\naddress = \"10.0.0.1\"\nbinary = \"{}\"\n",
            dir.join("prog").display()
        ),
    );
    let out = out_dir("origin-node");
    let o = explore_cluster_within(std::time::Duration::from_secs(240), &out, file.to_str().unwrap(), &["--runs", "3"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let bug = bug_file(&out);
    let recorded: serde_json::Value = serde_json::from_slice(&std::fs::read(&bug).unwrap()).unwrap();
    assert_eq!(recorded["node_files"]["a"]["/bin/lib/libgreet.so"], first.as_str(), "{recorded}");
    let replay = || deja(&["replay", bug.to_str().unwrap()]);
    let o = replay();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("reproduced bug"), "{}", stderr(&o));
    let second = lib("hello from the second build");
    assert_ne!(first, second);
    let o = replay();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("node a's /bin/lib/libgreet.so differs on this host"), "{}", stderr(&o));
    assert!(stderr(&o).contains("reproduced bug"), "{}", stderr(&o));
    std::fs::remove_file(out.join("inputs").join(&first)).unwrap();
    let o = replay();
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains(&first) && err.contains(&second) && err.contains("/bin/lib/libgreet.so"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

/// A forked round that is not its booted run (made so by a test-only switch) is deja's defect,
/// never a bug: its failure is kept as unconfirmed, with the round written as a file that
/// `deja replay` boots from scratch, its last output and both digests; `--verify-forks` finds
/// the rounds that held differ too; the campaign exits 124, not 0 or 1.
#[test]
fn a_forked_round_that_is_not_its_booted_run_is_evidence_of_a_defect_not_a_bug() {
    let out = out_dir("perturbed");
    let flags = ["--runs", "30", "--mode", "faults", "--seed", "1", "--jobs", "1", "--verify-forks", "5"];
    let mut perturbed = flags.to_vec();
    perturbed.push("--perturb-forks");
    let o = explore_cluster(&out, &example("register-buggy.toml"), &perturbed);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(124), "{err}");
    assert!(
        err.contains("0 bug(s)")
            && !out.read_dir().unwrap().flatten().any(|e| e.file_name().to_string_lossy().starts_with("bug-")),
        "{err}"
    );
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    let c = &r["campaign"];
    let u = &c["unconfirmed"][0];
    assert_eq!(u["signature"], "assertion failed on client: acknowledged writes survive", "{c}");
    let why = u["why"].as_str().unwrap();
    assert!(why.contains("gave digest") && why.contains("instead of") && why.contains("it differs in node "), "{why}");
    assert!(u["output"].as_array().unwrap().iter().any(|l| l.as_str().unwrap().starts_with("[client] ")), "{u}");
    let file = out.join(u["file"].as_str().unwrap());
    let recorded: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert!(why.contains(&format!("instead of {}", recorded["digest"].as_str().unwrap())), "{why}");
    let text = std::fs::read_to_string(out.join("report.txt")).unwrap();
    assert!(text.contains("a determinism defect of deja, not a flaky bug of the program"), "{text}");
    assert!(text.contains(u["reproduce"].as_str().unwrap()), "{text}");
    // The command shows the divergence: the booted run is not the recorded one.
    let replay = deja(&["replay", file.to_str().unwrap()]);
    let said = stderr(&replay);
    assert!(said.contains(&format!("instead of {}", recorded["digest"].as_str().unwrap())), "{said}");
    let checks = &c["fork_checks"];
    assert_eq!((checks["every"].as_u64(), checks["checked"].as_u64()), (Some(5), Some(6)), "{checks}");
    let diverged = checks["diverged"].as_array().unwrap();
    assert_eq!(diverged.len(), 6, "{checks}");
    assert!(diverged.iter().all(|d| out.join(d["file"].as_str().unwrap()).exists()), "{checks}");

    // The same campaign without the switch: every round checked is its booted run.
    let clean = out_dir("perturbed-not");
    let o = explore_cluster(&clean, &example("register-buggy.toml"), &flags);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(clean.join("report.json")).unwrap()).unwrap();
    let checks = &r["campaign"]["fork_checks"];
    assert!(checks["checked"].as_u64().unwrap() >= 4 && checks["diverged"].as_array().unwrap().is_empty(), "{checks}");
    assert!(r["campaign"]["unconfirmed"].as_array().unwrap().is_empty());
    std::fs::remove_dir_all(&out).ok();
    std::fs::remove_dir_all(&clean).ok();
}

/// Two failures of one cluster that both exit 1 are two bugs. The node (busybox's shell, which
/// nobody wrote for deja) says what failed on a line it marks `VIOLATION:`, then prints more;
/// with `failure_marker` each failure is named by its marked line, found as a bug of its own,
/// replayed, and minimized into itself, never into the other. Without the marker both would be
/// named by their last line, the same for both: one bug.
#[test]
fn two_failures_that_exit_1_are_two_bugs_and_each_minimizes_to_itself() {
    needs(&["/bin/busybox"], "busybox-static");
    let script = "mkdir -p /data; \
                  echo one > /data/a || { echo \"VIOLATION: lost write of a at $$\"; echo cleaning up; exit 1; }; \
                  echo two > /data/b || { echo \"VIOLATION: lost write of b at $$\"; echo cleaning up; exit 1; }; \
                  echo done";
    let file = temp_cluster(
        "two-exit-1",
        &format!(
            "seed = 1\ntime_limit_ms = 5000\n[faults.storage]\nnodes = [\"app\"]\npaths = [\"/data\"]\n[[node]]\n\
             name = \"app\"\naddress = \"10.0.0.1\"\nbinary = \"/bin/busybox\"\nargs = [\"sh\", \"-c\", '{script}']\n\
             fail_stop = \"never\"\nfailure_marker = \"VIOLATION:\"\n"
        ),
    );
    let out = out_dir("two-exit-1");
    let o = explore_cluster(&out, file.to_str().unwrap(), &["--runs", "100", "--mode", "faults", "--seed", "1"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let mut found: Vec<(String, PathBuf)> = bug_files(&out)
        .into_iter()
        .map(|b| {
            let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&b).unwrap()).unwrap();
            (v["signature"].as_str().unwrap().to_string(), b)
        })
        .collect();
    found.sort();
    let names: Vec<&str> = found.iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(
        names,
        [
            "node app exited with 1: VIOLATION: lost write of a at N",
            "node app exited with 1: VIOLATION: lost write of b at N"
        ],
        "{}",
        stderr(&o)
    );
    for (signature, bug) in &found {
        let r = deja(&["replay", bug.to_str().unwrap()]);
        assert_eq!(r.status.code(), Some(1), "{signature}: {}", stderr(&r));
        let min = bug.with_extension("min.json");
        let m = deja(&["minimize", "--out", min.to_str().unwrap(), bug.to_str().unwrap()]);
        assert_eq!(m.status.code(), Some(0), "{signature}: {}", stderr(&m));
        let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&min).unwrap()).unwrap();
        assert_eq!(v["signature"], signature.as_str(), "minimized into itself: {v}");
        let r = deja(&["replay", min.to_str().unwrap()]);
        assert_eq!(r.status.code(), Some(1), "{signature}, minimized: {}", stderr(&r));
    }
    std::fs::remove_dir_all(&out).ok();
}
