//! The cluster check's pure parts, without `/dev/kvm`: the candidate's nodes, shifted
//! schedules, worlds and the verdict of a failing candidate.

use super::*;
use deja_cluster::config::Action;

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

#[test]
fn shifted_schedules_move_the_chosen_faults_and_stop_at_zero() {
    let s = [fault(100), fault(250), fault(40)];
    let all: Vec<u64> = shifted(&s, 50, None).iter().map(|f| f.at_ms).collect();
    assert_eq!(all, [150, 300, 90]);
    let one: Vec<u64> = shifted(&s, -60, Some(2)).iter().map(|f| f.at_ms).collect();
    assert_eq!(one, [100, 250, 0], "only fault 2 moves, and not below 0");
    let back: Vec<u64> = shifted(&s, -1_000, None).iter().map(|f| f.at_ms).collect();
    assert_eq!(back, [0, 0, 0]);
    assert_eq!(shifted(&s, 0, None), s.to_vec());
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
