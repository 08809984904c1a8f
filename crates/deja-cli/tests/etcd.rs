//! The reference for programs as people ship them: etcd 3.4 from Debian's etcd-server package,
//! a dynamically linked Go program, unmodified, as a three-member cluster under partitions,
//! kills and restarts and clock jumps, with a client recording a history
//! (examples/clusters/etcd.toml). `.ci/run` installs the package.

mod common;

use common::*;

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
