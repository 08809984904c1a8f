//! The reference for programs as people ship them: etcd 3.4 from Debian's etcd-server package,
//! a dynamically linked Go program, unmodified, as a three-member cluster under partitions,
//! kills and restarts and clock jumps, with a client recording a history
//! (examples/clusters/etcd.toml). `.ci/run` installs the package.

use crate::common::*;

fn etcd_cluster(crash_model: &str) -> std::path::PathBuf {
    needs(&["/usr/bin/etcd"], "etcd-server");
    guests();
    let text = std::fs::read_to_string(root().join("examples/clusters/etcd.toml")).unwrap();
    let client = guest("etcd-client").display().to_string();
    let text = text
        .replace("\"../../target/guests/etcd-client\"", &format!("{client:?}"))
        .replace("crash_model = \"ext4-ordered\"", &format!("crash_model = {crash_model:?}"));
    let path = std::env::temp_dir().join(format!("deja-etcd-{crash_model}-{}.toml", std::process::id()));
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn an_etcd_cluster_stays_linearizable_under_partitions_kills_and_clock_jumps() {
    let file = etcd_cluster("ext4-ordered");
    let out = deja(&["run", "--no-probe", "--audit", "2", &file.display().to_string()]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("deja: audit: identical over 2 runs"), "{err}");
    let ops: u64 = err
        .lines()
        .find_map(|l| l.strip_prefix("deja: history: linearizable (")?.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no linearizable history in:\n{err}"));
    assert!(ops >= 40, "the client's operations reached the cluster: {ops}\n{err}");
    let text = stdout(&out);
    let acked = text.lines().filter(|l| l.starts_with("[client] put") && l.ends_with(": ok")).count();
    let read = text.lines().filter(|l| l.starts_with("[client] get") && l.contains(": Some(")).count();
    assert!(acked >= 10 && read >= 10, "puts acknowledged and values read: {acked}, {read}\n{text}");
    for fault in ["kill e", "restart e", "partition [", "clock-jump e"] {
        assert!(err.contains(fault), "no {fault} in:\n{err}");
    }
    assert!(err.contains("(3 lives,") || err.contains("(2 lives,"), "a member restarted: {err}");
    std::fs::remove_file(&file).ok();
}

#[test]
fn under_the_weakest_crash_model_a_restarted_etcd_member_has_lost_its_wal_directory() {
    // etcd 3.4 makes its data directories (`--data-dir` and `member/`) without syncing their
    // parents; ext4 commits them with the next fsync's journal transaction, the weakest POSIX
    // model need not. A killed member then finds no WAL directory, while its peers know it as
    // bootstrapped, and refuses to start.
    let file = etcd_cluster("posix-weak");
    let out = deja(&["run", "--no-probe", &file.display().to_string()]);
    let err = stderr(&out);
    assert!(
        err.lines().any(|l| l.contains("\"level\":\"fatal\"") && l.contains("has already been bootstrapped")),
        "{err}"
    );
    assert!(err.contains("exit 1 (2 lives"), "{err}");
    std::fs::remove_file(&file).ok();
}

/// Exploring Debian's etcd: every round runs from a fork of the booted cluster, and the failure
/// it reaches (members waited for, under the weakest crash model a restarted member refuses to
/// start) is confirmed by booting the round from scratch, written as a bug file that replays
/// with the same digest; `--verify-forks 1` boots every other round from scratch too and
/// finds each the same run.
#[test]
fn explored_etcd_rounds_are_their_booted_runs_and_a_failure_found_replays() {
    let file = etcd_cluster("posix-weak");
    let text = std::fs::read_to_string(&file).unwrap().replace("wait = false", "wait = true");
    std::fs::write(&file, text).unwrap();
    let out = root().join("target/test-etcd-explore");
    let _ = std::fs::remove_dir_all(&out);
    let o = deja(&[
        "explore",
        "--quiet",
        "--runs",
        "3",
        "--jobs",
        "1",
        "--mode",
        "faults",
        "--seed",
        "1",
        "--verify-forks",
        "1",
        "--out",
        out.to_str().unwrap(),
        &file.display().to_string(),
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "a confirmed bug: {err}");
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    let c = &r["campaign"];
    assert!(c["unconfirmed"].as_array().unwrap().is_empty(), "{c}");
    let bug = &c["bugs"][0];
    assert!(bug["signature"].as_str().unwrap().starts_with("node e"), "{bug}");
    let checks = &c["fork_checks"];
    assert!(checks["checked"].as_u64().unwrap() >= 1, "{checks}");
    assert!(checks["diverged"].as_array().unwrap().is_empty(), "{checks}");
    let path = out.join(bug["file"].as_str().unwrap());
    let b: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let replay = deja(&["replay", path.to_str().unwrap()]);
    let said = stderr(&replay);
    assert_eq!(replay.status.code(), Some(1), "{said}");
    assert!(said.contains(&format!("reproduced bug {}", b["id"].as_str().unwrap())), "{said}");
    assert!(said.contains(&format!("digest {}", b["digest"].as_str().unwrap())), "{said}");
    std::fs::remove_file(&file).ok();
    std::fs::remove_dir_all(&out).ok();
}
