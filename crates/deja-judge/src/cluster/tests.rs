//! The cluster check's pure parts, without `/dev/kvm`: the candidate's nodes, shifted
//! schedules, worlds and the verdict of a failing candidate.

use super::meaning::{not_applicable, partner, shifted};
use super::*;
use crate::pipeline::failing;
use deja_cluster::config::Action;
use deja_explore::FailureSignature;

/// A two-node cluster file in a directory of its own, with stand-in binaries (nothing here runs
/// them).
fn base(name: &str) -> (std::path::PathBuf, ClusterTarget) {
    let dir = std::env::temp_dir().join(format!("deja-judge-unit-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("a.bin"), b"node a, version 1").unwrap();
    std::fs::write(dir.join("b.bin"), b"node b, version 1").unwrap();
    std::fs::write(dir.join("b2.bin"), b"node b, version 2").unwrap();
    let toml = r#"
seed = 4
[[node]]
name = "a"
address = "10.0.0.1"
binary = "a.bin"
args = ["--id", "1"]
[[node]]
name = "b"
address = "10.0.0.2"
binary = "b.bin"
args = ["--id", "2"]
"#;
    std::fs::write(dir.join("cluster.toml"), toml).unwrap();
    let t = ClusterTarget::load(&dir.join("cluster.toml")).unwrap();
    (dir, t)
}

fn fault(at_ms: u64) -> ScheduledFault {
    ScheduledFault {
        at_ms,
        action: Action::Heal,
        groups: Vec::new(),
        from: Vec::new(),
        to: Vec::new(),
        node: None,
        ms: 0,
    }
}

#[test]
fn a_candidate_binary_replaces_only_its_node_and_keeps_the_arguments() {
    let (dir, t) = base("replace");
    let spec = format!("b={}", dir.join("b2.bin").display());
    let nodes = candidate_nodes(&spec, &t).unwrap();
    assert_eq!(nodes.len(), 1);
    assert_eq!(nodes[0].name, "b");
    assert_eq!(nodes[0].image, b"node b, version 2");
    assert_eq!(nodes[0].args, ["--id", "2"]);
    let c = candidate_target(&t, &nodes).unwrap();
    assert_eq!(c.cfg.nodes[0].image, b"node a, version 1", "the other node keeps the base's binary");
    assert_eq!(c.cfg.nodes[1].image, b"node b, version 2");
    assert_eq!(c.cfg.binary_hashes["b"], blake3::hash(b"node b, version 2").to_hex().to_string());
    assert_eq!(c.cfg.binary_hashes["a"], t.cfg.binary_hashes["a"]);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_candidate_that_names_no_node_of_the_cluster_or_no_file_is_refused_saying_why() {
    let (dir, t) = base("refuse");
    let unknown = candidate_nodes(&format!("c={}", dir.join("b2.bin").display()), &t).unwrap_err().to_string();
    assert!(unknown.contains("node c") && unknown.contains("a, b"), "{unknown}");
    let shape = candidate_nodes("b", &t).unwrap_err().to_string();
    assert!(shape.contains("NODE=PATH"), "{shape}");
    let empty = candidate_nodes("b=", &t).unwrap_err().to_string();
    assert!(empty.contains("NODE=PATH"), "{empty}");
    let missing = candidate_nodes(&format!("b={}", dir.join("nothing").display()), &t).unwrap_err().to_string();
    assert!(missing.contains("nothing"), "{missing}");
    std::fs::remove_dir_all(&dir).ok();
}

fn on(at_ms: u64, action: Action, node: &str) -> ScheduledFault {
    ScheduledFault { node: Some(node.into()), action, ..fault(at_ms) }
}

#[test]
fn shifted_schedules_move_the_chosen_faults_and_stop_at_zero() {
    let s = [fault(40), fault(100), fault(250)];
    let all: Vec<u64> = shifted(&s, 50, None).iter().map(|f| f.at_ms).collect();
    assert_eq!(all, [90, 150, 300]);
    let one: Vec<u64> = shifted(&s, -60, Some(0)).iter().map(|f| f.at_ms).collect();
    assert_eq!(one, [0, 100, 250], "only fault 0 moves, and not below 0");
    let back: Vec<u64> = shifted(&s, -1_000, None).iter().map(|f| f.at_ms).collect();
    assert_eq!(back, [0, 0, 0]);
    assert_eq!(shifted(&s, 0, None), s.to_vec());
}

#[test]
fn a_kill_moves_with_its_restart_and_a_schedule_that_cannot_apply_is_named() {
    // The false alarm of an unminimized bug: a kill moved 300 ms past its own restart left the
    // node down for good. Moved together, the kill and its restart keep their order.
    let s = [
        on(3_474, Action::Kill, "server"),
        on(3_600, Action::Restart, "server"),
        on(5_000, Action::Kill, "server"),
        on(5_400, Action::Restart, "server"),
    ];
    assert_eq!(partner(&s, 0), Some(1));
    assert_eq!(partner(&s, 1), Some(0));
    assert_eq!(partner(&s, 2), Some(3));
    let moved = shifted(&s, 300, Some(0));
    let at: Vec<(u64, Action)> = moved.iter().map(|f| (f.at_ms, f.action)).collect();
    assert_eq!(at, [(3_774, Action::Kill), (3_900, Action::Restart), (5_000, Action::Kill), (5_400, Action::Restart)]);
    assert_eq!(not_applicable(&moved), None);
    // Moved alone, it would have come after the restart: that schedule is named, not run.
    let mut alone = s.to_vec();
    alone[0].at_ms = 3_774;
    alone.sort_by_key(|f| f.at_ms);
    let why = not_applicable(&alone).expect("a restart of a running node");
    assert!(why.contains("restart at 3600 ms server") && why.contains("restart a node that is up"), "{why}");
    // A pair moved into the next pair overlaps it: named too.
    let into = shifted(&s, 1_700, Some(0));
    assert!(not_applicable(&into).is_some_and(|w| w.contains("kill a node that is down")), "{into:?}");
    // Pauses pair with resumes, partitions with heals.
    let p = [on(10, Action::Pause, "a"), on(20, Action::Resume, "a"), fault(30)];
    assert_eq!(partner(&p, 0), Some(1));
    let cut = ScheduledFault { action: Action::Partition, groups: vec![vec!["a".into()]], ..fault(5) };
    let q = [cut, fault(50)];
    assert_eq!(partner(&q, 0), Some(1));
    assert_eq!(partner(&q, 1), Some(0));
    assert_eq!(not_applicable(&[on(1, Action::Resume, "a")]).map(|w| w.contains("not paused")), Some(true));
}

#[test]
fn a_failing_candidate_still_reproduces_only_with_the_bugs_own_signature() {
    let on = |node: &str, message: &str| FailureSignature::ClusterAssertions(vec![(node.into(), message.into())]);
    assert_eq!(failing(&on("n1", "x"), &on("n1", "x")), Verdict::StillReproduces);
    assert_eq!(failing(&on("n1", "y"), &on("n1", "x")), Verdict::NewFailure);
    assert_eq!(failing(&FailureSignature::Stuck, &on("n1", "x")), Verdict::NewFailure);
    // A bug file's signature that reads back as words only is still the same failure.
    let read: FailureSignature = "assertion failed on n1: x; y".parse().unwrap();
    assert_eq!(failing(&on("n1", "x; y"), &read), Verdict::StillReproduces);
}
