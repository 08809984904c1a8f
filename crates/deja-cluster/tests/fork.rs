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

#[test]
fn an_armed_child_is_the_booted_run_and_reports_only_blocks_not_yet_disarmed() {
    use deja_vmm::coverage::BlockImage;
    let cfg = config("walkv-buggy.toml");
    let blocks: Vec<Option<std::sync::Arc<BlockImage>>> = cfg
        .nodes
        .iter()
        .map(|n| {
            let files: Vec<(&str, &[u8])> = n.files.iter().map(|(p, d)| (p.as_str(), d.as_slice())).collect();
            Some(BlockImage::of_program(&n.image, &n.exe_path, &files, &[]).0)
        })
        .collect();
    assert!(blocks.iter().all(|b| b.as_ref().is_some_and(|b| !b.is_empty())));
    let at = SteerAt::Setup;
    let (mut fork, setup) =
        Fork::with_blocks(cfg.clone(), at, blocks, &mut |_, _, _| {}).expect("fork").expect("a fork");
    assert!(setup.iter().all(|h| !h.is_empty()), "every node reached blocks in its setup");
    let plain = Steering { at, ..Steering::default() };
    let first = fork.run_child(&plain, &mut |_, _, _| {}).expect("child");
    same_run(&first, &booted(&cfg, &plain), "armed child");
    let reached: Vec<Vec<u32>> = first.nodes.iter().map(|n| n.blocks.iter().map(|h| h.block).collect()).collect();
    assert!(reached.iter().any(|r| !r.is_empty()), "the round reached blocks its setup did not");
    for (i, n) in setup.iter().enumerate() {
        assert!(
            n.iter().all(|h| !reached[i].contains(&h.block)),
            "a block the parent's setup reached stays disarmed in its children"
        );
    }
    // Everything that round reached, disarmed: the same round again reaches nothing armed.
    for (i, ids) in reached.iter().enumerate() {
        fork.disarm_blocks(i, ids);
    }
    let again = fork.run_child(&plain, &mut |_, _, _| {}).expect("child");
    same_run(&again, &first, "the same round, disarmed");
    assert!(
        again.nodes.iter().all(|n| n.blocks.is_empty()),
        "{:?}",
        again.nodes.iter().map(|n| n.blocks.len()).collect::<Vec<_>>()
    );
    // Another course is still the booted run's.
    let other = Steering { at, reseed: Some(7), ..Steering::default() };
    same_run(&fork.run_child(&other, &mut |_, _, _| {}).expect("child"), &booted(&cfg, &other), "reseeded child");
}
