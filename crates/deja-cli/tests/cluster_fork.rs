//! A forked cluster child is the same run as a cluster booted from scratch and steered the
//! same way: same digest, same decisions, same faults. The simulator's own logic is tested
//! over fake nodes in deja-cluster; this is what only VMs show (forks through dirty pages,
//! block coverage), through the library.

use std::path::PathBuf;

use deja_cluster::{ClusterConfig, ClusterReport, Fork, RunOptions, SteerAt, Steering};

use crate::common::*;

fn config(name: &str) -> ClusterConfig {
    guests();
    let path: PathBuf = root().join("examples/clusters").join(name);
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

/// A steering that overrides decision `i` of `r` with another of its choices.
fn flipped(mut s: Steering, r: &ClusterReport, i: u64) -> Steering {
    let d = &r.decisions[i as usize];
    s.overrides.insert(i, (d.choice + 1) % d.options.max(2));
    s
}

/// The first decision at or after `from` that has more than one option.
fn choosable(r: &ClusterReport, from: u64) -> u64 {
    (from..r.decisions.len() as u64).find(|&i| r.decisions[i as usize].options > 1).expect("a decision to change")
}

/// The latest cut of `r` at or below `at`.
fn cut_below(r: &ClusterReport, at: u64) -> u64 {
    r.cuts.iter().copied().filter(|&c| c <= at).max().expect("a cut")
}

/// Later forks: each child run from one is the booted run steered the same way, whether it
/// left one, ran from one, ran from a later fork of a later fork, or could not use one (its
/// steering differs before it), in any order, with nodes that crash and restart after the
/// later fork (their VMs come back to the fork and are reset from another state next time).
fn late_children_match(name: &str, kills: bool) {
    let mut cfg = config(name);
    if kills {
        let r = cfg.random_faults.as_mut().expect("random faults");
        r.kill_every_ms = Some([1500, 3000]);
        r.down_for_ms = [50, 400];
    }
    let at = SteerAt::Setup;
    let mut fork = Fork::new(cfg.clone(), at, &mut |_, _, _| {}).expect("fork").expect("the fork point is reached");
    let plain = Steering { at, ..Steering::default() };
    let base = booted(&cfg, &plain);
    let n = base.decisions.len() as u64;
    assert!(n > fork.base_decisions + 40, "{name}: {n} decisions, {} before the fork", fork.base_decisions);
    assert!(base.cuts.len() > 10 && base.cuts.windows(2).all(|w| w[0] < w[1]), "{name}: cuts {:?}", base.cuts);
    // Decisions taken before the first restart (all of them without one).
    let index_at = |r: &ClusterReport, t: u64| r.decisions.iter().filter(|d| d.time_ns < t).count() as u64;
    let restart = base.faults.iter().find(|f| f.kind == "restart").map(|f| f.time_ns);
    assert_eq!(restart.is_some(), kills, "{name}: {:?}", base.faults);
    let kill = base.faults.iter().find(|f| f.kind == "kill").map_or(n, |f| index_at(&base, f.time_ns));
    let limit = (fork.base_decisions + (n - fork.base_decisions) / 3).min(kill.saturating_sub(1));
    let k1 = cut_below(&base, fork.base_decisions + (limit - fork.base_decisions) / 2);
    assert!(k1 > fork.base_decisions, "{name}: a cut before the first kill");

    // The child that leaves the later fork is the booted run.
    let first = fork.run_child_at(&plain, Some(k1), &mut |_, _, _| {}).expect("child");
    same_run(&first, &base, &format!("{name}: the child leaving a later fork at {k1}"));
    assert_eq!(fork.late_stats.taken, 1, "{name}: {:?}", fork.late_stats);

    // Children that change a decision at or after it run from it.
    let mut late_children = 0;
    for (what, s) in [
        ("a decision after the later fork changed", flipped(plain.clone(), &base, choosable(&base, k1 + 5))),
        ("the first decision the later fork leaves open changed", flipped(plain.clone(), &base, choosable(&base, k1))),
        ("the untouched course again", plain.clone()),
    ] {
        let child = fork.run_child(&s, &mut |_, _, _| {}).expect("child");
        late_children += 1;
        assert_eq!(fork.late_stats.children, late_children, "{name}: {what} ran from the later fork");
        same_run(&child, &booted(&cfg, &s), &format!("{name}: {what}"));
    }

    // A child whose steering differs before it cannot use it; nor can a reseeded one.
    let early = flipped(plain.clone(), &base, choosable(&base, fork.base_decisions));
    assert!(early.overrides.keys().all(|&i| i < k1));
    let reseeded = Steering { reseed: Some(11), ..plain.clone() };
    for (what, s) in [("a decision before the later fork changed", &early), ("a reseeded child", &reseeded)] {
        let child = fork.run_child(s, &mut |_, _, _| {}).expect("child");
        assert_eq!(fork.late_stats.children, late_children, "{name}: {what} ran from the fork point");
        same_run(&child, &booted(&cfg, s), &format!("{name}: {what}"));
    }

    // A later fork of a later fork: a child from the first leaves a second further on.
    let d1 = choosable(&base, k1 + 2);
    let second = flipped(plain.clone(), &base, d1);
    let second_run = booted(&cfg, &second);
    let n2 = second_run.decisions.len() as u64;
    let kill2 = second_run.faults.iter().find(|f| f.kind == "kill").map_or(n2, |f| index_at(&second_run, f.time_ns));
    let k2 = cut_below(&second_run, (d1 + (n2 - d1) / 2).min(kill2.saturating_sub(1)));
    assert!(k2 > d1, "{name}: a cut after {d1}");
    let child = fork.run_child_at(&second, Some(k2), &mut |_, _, _| {}).expect("child");
    late_children += 1;
    same_run(&child, &second_run, &format!("{name}: the child leaving a second later fork at {k2}"));
    assert_eq!((fork.late_stats.taken, fork.late_stats.children), (2, late_children), "{name}");
    let deep = flipped(second.clone(), &second_run, choosable(&second_run, k2));
    let skipped = fork.late_stats.decisions_skipped;
    let child = fork.run_child(&deep, &mut |_, _, _| {}).expect("child");
    assert_eq!(fork.late_stats.decisions_skipped - skipped, k2 - fork.base_decisions, "{name}: from the second");
    same_run(&child, &booted(&cfg, &deep), &format!("{name}: a child of the second later fork"));
    // Back to the fork point, then to the first later fork: every VM is reset from wherever it was.
    for s in [&reseeded, &plain, &deep, &early] {
        let child = fork.run_child(s, &mut |_, _, _| {}).expect("child");
        same_run(&child, &booted(&cfg, s), &format!("{name}: again, {s:?}"));
    }
    // After a restart a node runs in a VM of its own, which no later fork can keep.
    if let Some(t) = restart {
        let after = base.cuts.iter().copied().find(|&c| c > index_at(&base, t) + 2).expect("a cut after the restart");
        let refused = fork.late_stats.refused;
        let child = fork.run_child_at(&plain, Some(after), &mut |_, _, _| {}).expect("child");
        assert_eq!(fork.late_stats.refused, refused + 1, "{name}: {:?}", fork.late_stats);
        same_run(&child, &base, &format!("{name}: a later fork refused"));
    }

    // Without later forks none is taken or used, and the runs are the same.
    let used = fork.late_stats.children;
    fork.set_late_forks(0);
    let child = fork.run_child_at(&deep, Some(k2), &mut |_, _, _| {}).expect("child");
    same_run(&child, &booted(&cfg, &deep), &format!("{name}: no later forks"));
    assert_eq!(fork.late_stats.children, used, "{name}: {:?}", fork.late_stats);
    assert_eq!(fork.late_stats.taken, 2, "{name}: {:?}", fork.late_stats);
}

#[test]
fn a_register_child_from_a_later_fork_is_the_booted_run() {
    late_children_match("register-buggy.toml", false);
}

#[test]
fn a_register_child_from_a_later_fork_with_kills_and_restarts_is_the_booted_run() {
    late_children_match("register-fixed.toml", true);
}

/// A real multi-threaded cluster nobody wrote for deja: Debian's etcd (a dynamically linked Go
/// program), three members and a client, under the file's random partitions, kills and clock
/// jumps. Each forked child, from the fork at boot (etcd never calls `setup_complete`), is the
/// booted run steered the same way, component by component; the first that differs is named.
fn etcd_children_match(at: SteerAt, steerings: &[Steering]) {
    // A fresh machine: provision Debian's etcd-server as the README's test command does.
    needs(&["/usr/bin/etcd"], "etcd-server");
    let cfg = config("etcd.toml");
    let mut fork = Fork::new(cfg.clone(), at, &mut |_, _, _| {}).expect("fork").expect("the fork point is reached");
    for (k, s) in steerings.iter().enumerate() {
        let child = fork.run_child(s, &mut |_, _, _| {}).expect("child");
        let fresh = booted(&cfg, s);
        if let Some(d) = fresh.difference(&child) {
            panic!("etcd child {k} ({s:?}) differs from its booted run in {d}");
        }
        same_run(&child, &fresh, &format!("etcd child {k} ({s:?})"));
    }
}

#[test]
fn forked_etcd_children_are_their_booted_runs() {
    let at = SteerAt::Boot;
    etcd_children_match(
        at,
        &[Steering { at, ..Steering::default() }, Steering { at, reseed: Some(3), ..Steering::default() }],
    );
}
