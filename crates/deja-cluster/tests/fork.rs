//! A forked cluster child is the same run as a cluster booted from scratch and steered the
//! same way: same digest, same decisions, same faults. Needs `/dev/kvm` and the guests
//! (`cargo xtask guests`).

use std::path::{Path, PathBuf};

use deja_cluster::{ClusterConfig, ClusterReport, Fork, RunOptions, SteerAt, Steering};

fn config(name: &str) -> ClusterConfig {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let path: PathBuf = root.join("examples/clusters").join(name);
    ClusterConfig::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn booted(cfg: &ClusterConfig, steering: &Steering) -> ClusterReport {
    deja_cluster::run(
        cfg.clone(),
        RunOptions { sink: &mut |_, _, _| {}, steering: steering.clone(), record_trace: false },
    )
    .expect("booted run")
}

fn same_run(a: &ClusterReport, b: &ClusterReport, what: &str) {
    assert_eq!(a.outcome, b.outcome, "{what}: outcome");
    assert_eq!(a.faults, b.faults, "{what}: fault ledger");
    assert_eq!(a.decisions.len(), b.decisions.len(), "{what}: decision count");
    assert_eq!(a.decisions, b.decisions, "{what}: decisions");
    for (x, y) in a.nodes.iter().zip(&b.nodes) {
        let dx: Vec<&str> = x.lives.iter().map(|l| l.digest.as_str()).collect();
        let dy: Vec<&str> = y.lives.iter().map(|l| l.digest.as_str()).collect();
        assert_eq!(dx, dy, "{what}: node {} life digests", x.name);
    }
    assert_eq!(a.digest, b.digest, "{what}: digest");
}

fn children_match(name: &str, at: SteerAt) {
    let cfg = config(name);
    let mut fork = Fork::new(cfg.clone(), at, &mut |_, _, _| {}).expect("fork").expect("the fork point is reached");
    let steerings = [
        Steering { at, ..Steering::default() },
        Steering { at, reseed: Some(7), ..Steering::default() },
        Steering { at, reseed: Some(8), ..Steering::default() },
        // Back to the first: a child after other children starts from the same fork.
        Steering { at, ..Steering::default() },
    ];
    for (k, s) in steerings.iter().enumerate() {
        let child = fork.run_child(s, &mut |_, _, _| {}).expect("child");
        let fresh = booted(&cfg, s);
        same_run(&child, &fresh, &format!("{name} child {k} ({s:?})"));
        assert!(fork.last_reset.nodes.iter().flatten().count() > 0, "a reset touched no node");
    }
}

#[test]
fn a_forked_register_child_at_setup_is_the_booted_run() {
    children_match("register-buggy.toml", SteerAt::Setup);
}

#[test]
fn a_forked_register_child_at_boot_is_the_booted_run() {
    children_match("register-buggy.toml", SteerAt::Boot);
}
