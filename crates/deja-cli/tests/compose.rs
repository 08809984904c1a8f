//! docker-compose files as clusters: the bundled register (`examples/compose/`), its services
//! packed as `docker save` images, run, explored, replayed and judged; and files deja refuses.

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
        "services:\n  a:\n    image: IMAGE\n    healthcheck: {test: [CMD, \"true\"]}\n    restart: always\n\
         configs: {}\n",
    );
    let o = deja(&["run", "--no-probe", &keys]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("keys deja does not take") && e.contains("configs, services.a.healthcheck, services.a.restart"),
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
