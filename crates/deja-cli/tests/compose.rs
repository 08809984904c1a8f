//! docker-compose files as clusters: the bundled register (`examples/compose/`), its services
//! packed as `docker save` images, run, explored, replayed and judged; the same register driven
//! by a test template in a workload service; and files deja refuses.

use std::path::PathBuf;

use crate::common::*;

fn example(name: &str) -> String {
    guests();
    root().join("examples/compose").join(name).to_string_lossy().into_owned()
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("deja-compose-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn a_compose_file_runs_as_a_cluster_whose_services_reach_each_other_by_name_alike_on_two_cores() {
    let file = example("register.yaml");
    let cores = host_cores();
    let (a, b) = (cores[0], *cores.last().unwrap());
    let runs: Vec<_> = [a, b].iter().map(|&c| deja_on(c, &[], &["run", "--json", "--no-probe", &file])).collect();
    let out = &runs[0];
    let text = stdout(out);
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(out));
    let r = summary(out);
    let nodes: Vec<(&str, &str)> = r["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (n["name"].as_str().unwrap(), n["address"].as_str().unwrap()))
        .collect();
    // Each service a node; addresses from the default subnet in the file's order.
    assert_eq!(nodes, [("r1", "10.0.0.2"), ("r2", "10.0.0.3"), ("r3", "10.0.0.4"), ("client", "10.0.0.5")]);
    // The replicas and the client named each other by service name, resolved through /etc/hosts.
    assert!(text.contains("[client] acknowledged 29 of 30 writes; lost: []"), "{text}");
    assert!(text.contains("following 10.0.0."), "{text}");
    // The same run in another process on another core.
    assert_eq!(summary(&runs[1])["digest"], r["digest"], "cores {a} and {b}");
    assert_eq!(stdout(&runs[1]), text);
}

#[test]
fn a_compose_clusters_bug_is_found_replayed_and_a_patched_image_judged_fixed_and_the_buggy_one_not() {
    let out = scratch("explore");
    let o = explore_to_first_bug(&out, 100, &[], &[&example("register.yaml")]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let bug = bug_file(&out);
    let text = std::fs::read_to_string(&bug).unwrap();
    assert!(text.contains("acknowledged writes survive"), "{text}");
    let replay = deja(&["replay", &bug.to_string_lossy()]);
    assert_eq!(replay.status.code(), Some(1), "{}", stderr(&replay));
    assert!(stderr(&replay).contains("reproduced bug"), "{}", stderr(&replay));
    let check = |candidate: &str, dir: &str| {
        deja(&[
            "check",
            "--bug",
            &bug.to_string_lossy(),
            "--out",
            &out.join(dir).to_string_lossy(),
            "--candidate",
            &example(candidate),
        ])
    };
    let fixed = check("register-patched.yaml", "fixed");
    assert_eq!(fixed.status.code(), Some(0), "{}", stderr(&fixed));
    assert!(stderr(&fixed).contains("verdict FIXED_FOR_THIS_CAPSULE"), "{}", stderr(&fixed));
    let same = check("register.yaml", "same");
    assert_eq!(same.status.code(), Some(1), "{}", stderr(&same));
    assert!(stderr(&same).contains("verdict STILL_REPRODUCES"), "{}", stderr(&same));
}

/// The lines a template run wrote, in order.
fn template_lines(text: &str) -> Vec<&str> {
    text.lines().filter_map(|l| l.strip_prefix("[workload] deja template: ")).collect()
}

#[test]
fn a_test_template_runs_its_commands_in_the_workload_node_in_their_phases_alike_on_two_cores() {
    let file = example("register-template.yaml");
    let cores = host_cores();
    let (a, b) = (cores[0], *cores.last().unwrap());
    let runs: Vec<_> = [a, b].iter().map(|&c| deja_on(c, &[], &["run", "--json", "--no-probe", &file])).collect();
    let out = &runs[0];
    let text = stdout(out);
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(out));
    // deja's lines go to the node's stderr.
    let err = stderr(out);
    let lines = template_lines(&err);
    // first_ alone and first; then drivers (started, exited); the quiet period once they all
    // completed; then the finally_ check, which passed.
    assert!(lines[0].starts_with("started first_wait_for_leader (pid "), "{lines:?}");
    assert!(lines[1].starts_with("first_wait_for_leader (pid ") && lines[1].ends_with(" exited with 0"), "{lines:?}");
    let at = |what: &str| lines.iter().position(|l| *l == what).unwrap_or_else(|| panic!("{what}: {lines:?}"));
    let (completed, quiet) = (at("drivers completed"), at("quiet period of 2000 ms"));
    assert_eq!(quiet, completed + 1);
    let drivers = lines[..completed].iter().filter(|l| l.starts_with("started parallel_driver_write")).count();
    let ended = lines[..completed].iter().filter(|l| l.starts_with("parallel_driver_write (pid ")).count();
    assert!((1..=4).contains(&drivers) && ended == drivers, "{lines:?}");
    assert!(lines[quiet + 1].starts_with("started finally_acknowledged_writes_survive"), "{lines:?}");
    assert_eq!(lines.last(), Some(&"template passed"));
    // Its commands are processes of the workload node, sharing its file system.
    assert!(text.contains("[workload] finally_acknowledged_writes_survive: "), "{text}");
    assert!(text.contains("acknowledged writes; lost: []"), "{text}");
    let r = summary(out);
    let workload = r["nodes"].as_array().unwrap().iter().find(|n| n["name"] == "workload").unwrap().clone();
    assert_eq!(workload["ended"], "exited");
    assert_eq!(r["template"]["verdict"], serde_json::json!({"kind": "passed"}));
    assert_eq!(r["template"]["commands"].as_array().map(Vec::len), Some(4));
    let plain = stderr(&deja(&["run", "--no-probe", &file]));
    assert!(
        plain.contains("deja:   test template /opt/antithesis/test/v1/main (4 commands) on workload: passed"),
        "{plain}"
    );
    assert_eq!(workload["lives"][0]["exit"], serde_json::json!({"kind": "exited", "code": 0}));
    // The same run in another process on another core.
    assert_eq!(summary(&runs[1])["digest"], r["digest"], "cores {a} and {b}");
    assert_eq!(stdout(&runs[1]), text);
    assert_eq!(template_lines(&stderr(&runs[1])), lines);
}

#[test]
fn a_test_templates_finally_check_finds_the_lost_write_which_replays_and_the_patched_image_fixes() {
    let out = scratch("template");
    let o = explore_to_first_bug(&out, 200, &[], &[&example("register-template.yaml")]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let bug = bug_file(&out);
    let replay = deja(&["replay", &bug.to_string_lossy()]);
    assert_eq!(replay.status.code(), Some(1), "{}", stderr(&replay));
    let lines = stdout(&replay);
    let err = stderr(&replay);
    let ours = template_lines(&err);
    // The finally_ command's exit is the workload node's: the run fails at the check.
    let failed = ours.last().copied().unwrap_or_default();
    assert!(failed.starts_with("template failed: finally_acknowledged_writes_survive exited with 1"), "{ours:?}");
    let check = lines
        .lines()
        .find(|l| l.starts_with("[workload] finally_acknowledged_writes_survive: ") && l.contains("lost: "));
    assert!(check.is_some_and(|l| !l.ends_with("lost: []")), "{lines}");
    assert!(err.contains("reproduced bug") && err.contains("acknowledged writes survive"), "{err}");
    let check = |candidate: &str, dir: &str| {
        deja(&[
            "check",
            "--bug",
            &bug.to_string_lossy(),
            "--out",
            &out.join(dir).to_string_lossy(),
            "--candidate",
            &example(candidate),
        ])
    };
    let fixed = check("register-template-patched.yaml", "fixed");
    assert_eq!(fixed.status.code(), Some(0), "{}", stderr(&fixed));
    assert!(stderr(&fixed).contains("verdict FIXED_FOR_THIS_CAPSULE"), "{}", stderr(&fixed));
    let same = check("register-template.yaml", "same");
    assert_eq!(same.status.code(), Some(1), "{}", stderr(&same));
    assert!(stderr(&same).contains("verdict STILL_REPRODUCES"), "{}", stderr(&same));
}

#[test]
fn a_template_waits_for_setup_complete_and_one_that_cannot_go_on_gives_no_verdict() {
    guests();
    let dir = scratch("template-start");
    let image = root().join("target/guests/images/register-workload.tar");
    let file = |start: &str| {
        let p = dir.join(format!("{start}.yaml"));
        let text = format!(
            "services:\n  workload:\n    image: {}\n    environment: {{REPLICAS: \"10.0.0.9:7000\"}}\n    \
             x-deja: {{template: {{dir: /opt/antithesis/test/v1/main, start: {start}}}}}\n\
             x-deja: {{time_limit_ms: 20000}}\n",
            image.display()
        );
        std::fs::write(&p, text).unwrap();
        p.to_string_lossy().into_owned()
    };
    // Nothing ever calls setup_complete: the template never begins, and the run says so.
    let o = deja(&["run", "--no-probe", &file("setup")]);
    let e = stderr(&o);
    assert_ne!(o.status.code(), Some(0), "{e}");
    assert!(e.contains("the test template of workload never began: no node called setup_complete"), "{e}");
    assert!(!e.contains("deja template: started"), "{e}");
    // At boot it begins; its first_ command finds no leader and exits 3: the template stops, and
    // the run has no verdict (never a failure of the system).
    let o = deja(&["run", "--no-probe", &file("boot")]);
    let e = stderr(&o);
    assert!(e.contains("deja template: started first_wait_for_leader"), "{e}");
    assert!(e.contains("the test template stopped: first_wait_for_leader exited with 3"), "{e}");
    assert!(!e.contains("started parallel_driver_write"), "{e}");
    assert_ne!(o.status.code(), Some(1), "a stopped template is no bug: {e}");
}

#[test]
fn a_compose_file_deja_cannot_run_as_docker_would_is_refused_naming_every_key() {
    guests();
    let dir = scratch("refused");
    let image = root().join("target/guests/images/register-client.tar");
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text.replace("IMAGE", &image.to_string_lossy())).unwrap();
        p.to_string_lossy().into_owned()
    };
    let keys = write(
        "keys.yaml",
        "services:\n  a:\n    image: IMAGE\n    healthcheck: {test: [CMD, \"true\"]}\n    secrets: [s]\n\
         configs: {}\n",
    );
    let o = deja(&["run", "--no-probe", &keys]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("keys deja does not take") && e.contains("configs, services.a.healthcheck, services.a.secrets"),
        "{e}"
    );
    let registry = write("registry.yaml", "services:\n  a:\n    image: redis:7\n");
    let e = stderr(&deja(&["explore", "--runs", "1", &registry]));
    assert!(e.contains("services.a.image: \"redis:7\" names no archive: map it to one in x-deja.images"), "{e}");
    let missing = write("missing.yaml", "services:\n  a:\n    image: nowhere.tar\n");
    let o = deja(&["run", "--no-probe", &missing]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("nowhere.tar"), "{}", stderr(&o));
}
