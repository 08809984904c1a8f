//! The simulator over fake nodes ([`fake`]): scheduling, the network, faults, lives, steering
//! and the report, with each node's program a Rust state machine making syscalls into deja's
//! real kernel. What only a VM shows (a real program's code, forks through dirty pages, block
//! coverage) is tested end to end.

use super::*;
use crate::config::NetworkConfig;
use crate::config::{NodeFault, StorageFault};
use deja_kernel::DecisionRecord;

mod fake;
use fake::Fake;

const SERVER: [u8; 4] = [10, 0, 0, 1];
const CLIENT: [u8; 4] = [10, 0, 0, 2];
const MS: u64 = 1_000_000;

fn node(name: &str, address: [u8; 4], args: &[&str], wait: bool) -> NodeConfig {
    NodeConfig {
        template: None,
        restart: crate::config::Restart::No,
        env_files: BTreeMap::new(),
        name: name.into(),
        address,
        image: fake::image(),
        program: "fake".into(),
        exe_path: "/bin/fake".into(),
        argv0: "fake".into(),
        args: args.iter().map(|a| a.to_string()).collect(),
        root: None,
        env: Vec::new(),
        files: BTreeMap::new(),
        cwd: String::new(),
        cpus: 1,
        wait,
        fail_stop: deja_kernel::FailStopMode::Auto,
        failure_marker: None,
    }
}

fn cluster(nodes: Vec<NodeConfig>) -> ClusterConfig {
    ClusterConfig {
        seed: 7,
        time_limit_ns: 60_000 * MS,
        memory: 16 << 20,
        network: NetworkConfig::default(),
        random_faults: None,
        schedule: Vec::new(),
        storage: Default::default(),
        nodes,
        binary_hashes: BTreeMap::new(),
        file_blake3: String::new(),
        settings: deja_vmm::Settings::default(),
    }
}

/// An echo server, and a client that sends it `n` messages.
fn echo(n: u64) -> ClusterConfig {
    let count = n.to_string();
    cluster(vec![
        node("server", SERVER, &["echo", "80"], false),
        node("client", CLIENT, &["client", "10.0.0.1", "80", &count], true),
    ])
}

fn steered(cfg: ClusterConfig, steering: Steering) -> ClusterReport {
    let opts = RunOptions { sink: &mut |_, _, _| {}, steering, record_trace: false };
    run_on::<Fake>(cfg, opts).expect("the cluster runs")
}

fn run(cfg: ClusterConfig) -> ClusterReport {
    steered(cfg, Steering::default())
}

fn at(at_ms: u64, action: Action, node: Option<&str>) -> ScheduledFault {
    ScheduledFault::new(at_ms, action, node)
}

fn partition(at_ms: u64) -> ScheduledFault {
    ScheduledFault { groups: vec![vec!["server".into()], vec!["client".into()]], ..at(at_ms, Action::Partition, None) }
}

fn node_of<'a>(r: &'a ClusterReport, name: &str) -> &'a NodeReport {
    r.nodes.iter().find(|n| n.name == name).expect("the node is in the report")
}

fn exit_code(n: &NodeReport) -> Option<i32> {
    match n.lives.last().map(|l| &l.exit) {
        Some(ExitStatus::Exited { code }) => Some(*code),
        _ => None,
    }
}

fn kinds(r: &ClusterReport) -> Vec<&str> {
    r.faults.iter().map(|f| f.kind.as_str()).collect()
}

fn latencies(r: &ClusterReport) -> usize {
    r.decisions.iter().filter(|d| d.point == DecisionPoint::NetworkLatency).count()
}

#[test]
fn fake_nodes_talk_over_the_simulated_network() {
    let r = run(echo(5));
    assert_eq!(r.outcome, Outcome::Completed);
    let client = node_of(&r, "client");
    assert_eq!(client.stdout, "done 5\n", "{}", client.stderr);
    assert_eq!(exit_code(client), Some(0));
    assert_eq!(client.ended, "exited");
    // The server never ends on its own: it is stopped with the run.
    let server = node_of(&r, "server");
    assert_eq!(server.ended, "running");
    assert!(matches!(server.lives[0].exit, ExitStatus::Signaled { signal: 9, .. }));
    // Every packet draws a latency in [1, 2] ms: the handshake and five round trips, each
    // two packets, take 12 to 24 ms of virtual time.
    assert!(latencies(&r) >= 12, "{} latencies", latencies(&r));
    assert!((12 * MS..=25 * MS).contains(&r.virtual_time_ns), "{} ns", r.virtual_time_ns);
    assert!(r.faults.is_empty(), "{:?}", r.faults);
}

#[test]
fn the_same_inputs_give_the_same_run_and_another_seed_another() {
    let a = run(echo(4));
    let b = run(echo(4));
    assert_eq!(a.digest, b.digest);
    assert_eq!(a.decisions, b.decisions);
    assert_eq!(a.virtual_time_ns, b.virtual_time_ns);
    let c = run(ClusterConfig { seed: 8, ..echo(4) });
    assert_eq!(c.outcome, Outcome::Completed);
    assert_ne!(a.decisions, c.decisions, "the latencies come from the seed");
    assert_ne!(a.digest, c.digest);
}

#[test]
fn a_partition_shorter_than_the_tcp_timeout_holds_the_traffic_until_the_heal() {
    let mut cfg = echo(20);
    cfg.schedule = vec![partition(10), at(300, Action::Heal, None)];
    let r = run(cfg);
    assert_eq!(r.outcome, Outcome::Completed);
    assert_eq!(node_of(&r, "client").stdout, "done 20\n");
    assert_eq!(kinds(&r), ["partition", "heal"]);
    assert_eq!(r.faults[0].time_ns, 10 * MS);
    // Nothing crossed the cut: the run finished after the heal.
    assert!(r.virtual_time_ns > 300 * MS, "{} ns", r.virtual_time_ns);
    let unhindered = run(echo(20));
    assert!(unhindered.virtual_time_ns < 100 * MS);
}

#[test]
fn a_partition_longer_than_the_tcp_timeout_resets_the_connection() {
    let mut cfg = echo(20);
    cfg.network.tcp_timeout_ms = 1_000;
    cfg.schedule = vec![partition(10)];
    let r = run(cfg);
    assert_eq!(r.outcome, Outcome::Completed);
    assert_eq!(kinds(&r), ["partition", "tcp-reset"]);
    assert_eq!(r.faults[1].time_ns, 1_010 * MS);
    let client = node_of(&r, "client");
    assert_eq!(exit_code(client), Some(1));
    assert!(client.stderr.contains("failed: -104"), "ECONNRESET: {}", client.stderr);
}

#[test]
fn a_killed_server_resets_its_client_and_restarts_on_its_disk() {
    // Killed for good: its peers hear of it only by the RST the kill sends across the network.
    let mut cfg = echo(20);
    cfg.schedule = vec![at(10, Action::Kill, Some("server"))];
    let r = run(cfg);
    assert_eq!(r.outcome, Outcome::Completed);
    assert_eq!(kinds(&r), ["kill"]);
    let server = node_of(&r, "server");
    assert_eq!(server.ended, "down");
    assert!(matches!(&server.lives[0].exit, ExitStatus::Signaled { signal: 9, .. }));
    let client = node_of(&r, "client");
    assert_eq!(exit_code(client), Some(1));
    assert!(client.stderr.contains("failed: -104"), "ECONNRESET: {}", client.stderr);
    assert!((11 * MS..=13 * MS).contains(&r.virtual_time_ns), "one latency after the kill: {} ns", r.virtual_time_ns);
    // Restarted at once: a second life, and the client still sees its connection reset.
    let mut cfg = echo(20);
    cfg.schedule = vec![at(10, Action::Kill, Some("server")), at(10, Action::Restart, Some("server"))];
    let r = run(cfg);
    assert_eq!(kinds(&r), ["kill", "restart"]);
    assert_eq!(node_of(&r, "server").lives.len(), 2, "the killed life and the restarted one");
    assert_eq!(node_of(&r, "server").ended, "running");
    assert_eq!(exit_code(node_of(&r, "client")), Some(1));
    // A kill scripted for a node that is down is not applied, and the ledger says why.
    let mut cfg = echo(20);
    cfg.schedule = vec![at(10, Action::Kill, Some("server")), at(11, Action::Kill, Some("server"))];
    let r = run(cfg);
    assert_eq!(kinds(&r), ["kill", "not-applied"]);
    assert!(r.faults[1].detail.contains("the node is down"), "{}", r.faults[1].detail);
}

#[test]
fn a_paused_server_holds_its_client_until_it_resumes() {
    let mut cfg = echo(20);
    cfg.schedule = vec![at(5, Action::Pause, Some("server")), at(500, Action::Resume, Some("server"))];
    let r = run(cfg);
    assert_eq!(r.outcome, Outcome::Completed);
    assert_eq!(kinds(&r), ["pause", "resume"]);
    assert_eq!(node_of(&r, "client").stdout, "done 20\n");
    assert_eq!(node_of(&r, "server").lives.len(), 1, "a pause is not a restart");
    assert!(r.virtual_time_ns > 500 * MS, "{} ns", r.virtual_time_ns);
}

#[test]
fn a_connect_nobody_answers_times_out() {
    let cfg = cluster(vec![node("client", CLIENT, &["client", "10.0.0.9", "80", "1"], true)]);
    let r = run(cfg);
    assert_eq!(r.outcome, Outcome::Completed);
    assert_eq!(kinds(&r), ["connect-timeout"]);
    let client = node_of(&r, "client");
    assert!(client.stderr.contains("connect failed: -110"), "ETIMEDOUT: {}", client.stderr);
    assert_eq!(r.virtual_time_ns / MS, 3_000, "the default connect timeout");
}

#[test]
fn a_run_no_node_can_advance_is_stuck() {
    let cfg = cluster(vec![node("server", SERVER, &["echo", "80"], true)]);
    let r = run(cfg);
    let Outcome::Stuck(why) = &r.outcome else { panic!("{:?}", r.outcome) };
    assert!(why.contains("server (blocked)"), "{why}");
}

#[test]
fn the_time_budget_ends_a_run_that_never_finishes() {
    let cfg = ClusterConfig { time_limit_ns: 2 * MS, ..cluster(vec![node("spin", SERVER, &["spin"], true)]) };
    let r = run(cfg);
    assert_eq!(r.outcome, Outcome::TimeLimit);
    assert_eq!(r.virtual_time_ns, 2 * MS);
    let spin = &node_of(&r, "spin").lives[0];
    let ExitStatus::Signaled { signal: 9, fault: Some(why), .. } = &spin.exit else { panic!("{:?}", spin.exit) };
    assert_eq!(why.description, "still running when the time budget ran out");
    // Every syscall costs 1 µs of virtual time.
    assert!((1_900..=2_100).contains(&spin.syscalls), "{} syscalls", spin.syscalls);
}

#[test]
fn busy_nodes_take_turns_and_each_tie_is_a_decision_a_steering_can_change() {
    let cfg = || {
        cluster(vec![
            node("a", SERVER, &["spin"], false),
            node("b", CLIENT, &["spin"], false),
            node("timer", [10, 0, 0, 3], &["sleep", "1"], true),
        ])
    };
    let r = run(cfg());
    assert_eq!(r.outcome, Outcome::Completed);
    assert_eq!(node_of(&r, "timer").stdout, "slept\n");
    let (a, b) = (node_of(&r, "a").lives[0].syscalls, node_of(&r, "b").lives[0].syscalls);
    assert!(a.abs_diff(b) <= 2 && a > 900, "they alternate syscall by syscall: {a} and {b}");
    let ties: Vec<&DecisionRecord> =
        r.decisions.iter().filter(|d| matches!(d.point, DecisionPoint::RunNode { .. })).collect();
    assert!(ties.len() > 100, "{} ties", ties.len());
    // Overriding one tie changes the run, and the steered run is itself a pure function.
    let first = ties[0];
    let steering = Steering {
        overrides: [(first.index, (first.choice + 1) % first.options)].into_iter().collect(),
        ..Steering::default()
    };
    let s = steered(cfg(), steering.clone());
    assert_ne!(s.digest, r.digest);
    assert!(s.decisions[first.index as usize].overridden);
    assert_eq!(steered(cfg(), steering).digest, s.digest);
}

#[test]
fn random_kills_are_drawn_from_the_seed_and_replay_exactly() {
    let cfg = || {
        let mut c = echo(30);
        c.random_faults = Some(RandomFaults {
            kill_every_ms: Some([5, 20]),
            down_for_ms: [1, 3],
            targets: vec!["server".into()],
            ..RandomFaults::default()
        });
        c
    };
    let r = run(cfg());
    assert!(kinds(&r).contains(&"kill"), "{:?}", kinds(&r));
    assert!(node_of(&r, "server").lives.len() >= 2);
    let again = run(cfg());
    assert_eq!(again.digest, r.digest);
    assert_eq!(again.faults.len(), r.faults.len());
    // The first kill's gap is a decision: steering it moves the kill.
    let gap = r.decisions.iter().find(|d| d.point == DecisionPoint::Gap(RandomFault::Kill)).expect("a kill gap");
    let steering = Steering {
        overrides: [(gap.index, (gap.choice + 7) % gap.options)].into_iter().collect(),
        ..Steering::default()
    };
    let s = steered(cfg(), steering);
    let first_kill = |r: &ClusterReport| r.faults.iter().find(|f| f.kind == "kill").map(|f| f.time_ns);
    assert_ne!(first_kill(&s), first_kill(&r));
}

#[test]
fn a_reseed_at_boot_draws_what_follows_from_the_new_seed() {
    // Reseeding at boot draws every later decision from the new seed's stream.
    let r = run(echo(4));
    let s = steered(echo(4), Steering { reseed: Some(99), ..Steering::default() });
    assert_eq!(s.outcome, Outcome::Completed);
    assert_ne!(s.decisions, r.decisions);
    assert_eq!(s.seed, r.seed, "the report keeps the file's seed");
    let t = run(ClusterConfig { seed: 99, ..echo(4) });
    assert_eq!(
        s.decisions.iter().map(|d| d.choice).collect::<Vec<_>>(),
        t.decisions.iter().map(|d| d.choice).collect::<Vec<_>>(),
        "a reseed at boot is the run of that seed's cluster stream"
    );
}

#[test]
fn a_node_that_crashes_at_a_durable_operation_restarts_on_what_was_durable() {
    let mut db = node("db", SERVER, &["log", "5"], true);
    db.files.insert("/data/README".into(), b"the log lives here".to_vec());
    let crash = deja_kernel::OpCrash::parse("after:/data/log:3").expect("a crash point");
    let mut cfg = cluster(vec![db]);
    cfg.storage.faults = vec![StorageFault { node: "db".into(), fault: NodeFault::Crash(crash) }];
    let r = run(cfg.clone());
    assert_eq!(r.outcome, Outcome::Completed);
    let db = node_of(&r, "db");
    assert_eq!(db.lives.len(), 2);
    // The first life made three records durable and never said so; the second found them and
    // appended five more: a crash counted over the node's run strikes once.
    assert_eq!(db.stdout, "found 0\nfound 24\nlogged 5\n");
    assert_eq!(exit_code(db), Some(0));
    assert_eq!(kinds(&r), ["crash", "restart"]);
    assert_eq!(r.crashes.len(), 1);
    assert_eq!(r.crashes[0].point, "after durable op #3 on /data/log");
    assert_eq!(r.crashes[0].life, 0);
    // Asked for, the crash lists the states the file system could have been left in.
    let s = steered(cfg, Steering { crash_states: 4, ..Steering::default() });
    assert_eq!(s.crashes.len(), 1);
    assert!(!s.crashes[0].states.is_empty());
}

#[test]
fn a_restart_policy_starts_a_node_again_after_its_exit_with_dockers_delays() {
    let restarting = |policy: &str, code: &str, wait: bool| {
        let mut n = node("server", SERVER, &["exit", code], wait);
        n.restart = crate::config::Restart::parse(policy).unwrap();
        n
    };
    let relaunches = |r: &ClusterReport| -> Vec<u64> {
        r.faults.iter().filter(|f| f.kind == "relaunch").map(|f| f.time_ns / MS).collect()
    };
    // on-failure:2 after exit 1: two more lives, 100 ms then 200 ms after each exit; the last
    // life's exit is the node's.
    let r = run(cluster(vec![restarting("on-failure:2", "1", true)]));
    assert_eq!(r.outcome, Outcome::Completed);
    assert_eq!(r.nodes[0].lives.len(), 3);
    assert_eq!(relaunches(&r), [100, 300]);
    assert_eq!(r.nodes[0].stdout, "bye\nbye\nbye\n");
    assert_eq!(r.first_failure().map(|f| f.0), Some("server"));
    assert!(r.faults.iter().all(|f| f.scripted.is_none()), "a policy's restart is no fault");
    // on-failure after exit 0: done.
    let r = run(cluster(vec![restarting("on-failure", "0", true)]));
    assert_eq!((r.nodes[0].lives.len(), relaunches(&r).len()), (1, 0));
    // always: again and again, whatever the exit, while the run lasts (a waited sleeper).
    let r = run(cluster(vec![restarting("always", "0", false), node("client", CLIENT, &["sleep", "1000"], true)]));
    assert_eq!(r.outcome, Outcome::Completed);
    assert_eq!(relaunches(&r), [100, 300, 700], "delays of 100, 200, 400 ms; the next at 1500 ms is past the end");
    assert_eq!(r.nodes[0].lives.len(), 4);
    assert_eq!(r.nodes[0].ended, "down", "between an exit and its restart");
    // The policies as Docker writes them.
    assert_eq!(crate::config::Restart::parse("unless-stopped"), Ok(crate::config::Restart::Always));
    assert!(crate::config::Restart::parse("on-failure:x").is_err());
    assert_eq!(crate::config::Restart::delay_ns(20), 60_000 * MS, "at most a minute");
}

/// The run of `cfg` held at `at`.
fn held(cfg: ClusterConfig, at: moment::At) -> Box<moment::Paused<Fake>> {
    match moment::pause_on::<Fake>(cfg, &Steering::default(), at).expect("the cluster runs") {
        moment::Pause::At(p) => p,
        moment::Pause::Ended(r) => panic!("the run ended first: {:?}", r.outcome),
    }
}

#[test]
fn a_run_held_at_a_moment_shows_its_nodes_the_cut_and_what_is_held_by_it() {
    let mut cfg = echo(20);
    cfg.schedule = vec![partition(10), at(300, Action::Heal, None)];
    let m = held(cfg.clone(), moment::At::Time(100 * MS)).moment();
    assert!(m.time_ns >= 100 * MS, "{}", m.time_ns);
    assert_eq!(m.nodes.iter().map(|n| n.name.as_str()).collect::<Vec<_>>(), ["server", "client"]);
    let server = &m.nodes[0];
    assert_eq!(server.processes[0].pid, 1);
    assert!(server.processes[0].cmdline.starts_with("fake"), "{:?}", server.processes);
    assert!(server.processes[0].fds.iter().any(|(_, what)| what.starts_with("socket:[")), "{:?}", server.processes);
    assert_eq!(m.cuts.len(), 2, "both directions: {:?}", m.cuts);
    assert!(m.in_flight.iter().any(|p| p.at_ns.is_none()), "a packet held by the cut: {:?}", m.in_flight);
    assert_eq!(m.faults.iter().map(|f| f.kind.as_str()).collect::<Vec<_>>(), ["partition"]);
    // Holding it is replaying it: the same moment twice, and a moment by its decisions too.
    let again = held(cfg.clone(), moment::At::Time(100 * MS)).moment();
    assert_eq!(serde_json::to_value(&m).unwrap(), serde_json::to_value(&again).unwrap());
    let by_decision = held(cfg.clone(), moment::At::Decision(m.decisions)).moment();
    assert_eq!(by_decision.decisions, m.decisions);
    assert!(by_decision.time_ns <= m.time_ns);
    // Past the end there is no moment: the run's report instead.
    match moment::pause_on::<Fake>(cfg.clone(), &Steering::default(), moment::At::Time(u64::MAX)).unwrap() {
        moment::Pause::Ended(r) => assert_eq!(r.outcome, Outcome::Completed),
        moment::Pause::At(_) => panic!("a moment after the end"),
    }
    // A branch from the moment runs to the end with its own randomness; the scripted heal
    // still comes.
    let a = held(cfg.clone(), moment::At::Time(100 * MS)).branch(1).unwrap();
    let b = held(cfg.clone(), moment::At::Time(100 * MS)).branch(1).unwrap();
    let c = held(cfg.clone(), moment::At::Time(100 * MS)).branch(2).unwrap();
    assert_eq!(a.outcome, Outcome::Completed);
    assert_eq!(node_of(&a, "client").stdout, "done 20\n");
    assert!(kinds(&a).contains(&"heal"), "{:?}", kinds(&a));
    assert_eq!(a.digest, b.digest);
    assert_ne!(a.decisions, c.decisions, "another branch, other latencies");
    let whole = run(cfg);
    let k = m.decisions as usize;
    assert_eq!(a.decisions[..k], whole.decisions[..k], "the branch shares the run up to the moment");
}
