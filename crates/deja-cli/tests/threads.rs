//! std::thread, Mutex and channels under deja: one thread at a time, switches at syscalls, the
//! next thread a decision of the seed.

use crate::common::*;

fn threads() -> String {
    guest("threads").to_string_lossy().into_owned()
}

#[test]
fn std_threads_run_and_join() {
    let (out, v) = run_json(&[&threads(), "--", "4"]);
    let text = stdout(&out);
    assert_eq!(v["exit_code"], 0, "{text}{}", stderr(&out));
    assert!(text.contains("threads: 4 workers, counter 20, 20 messages, results [0, 10, 20, 30]"), "{text}");
    assert!(v["vm"]["thread_switches"].as_u64().unwrap() > 0, "{v}");
    assert!(v["syscall_counts"]["clone3"].as_u64().or(v["syscall_counts"]["clone"].as_u64()).unwrap() >= 4);
}

#[test]
fn the_schedule_follows_the_seed() {
    let a = deja(&["run", "--no-probe", "--seed", "5", &threads()]);
    let b = deja(&["run", "--no-probe", "--seed", "5", &threads()]);
    assert_eq!(a.stdout, b.stdout, "the same seed gives the same interleaving");
    let audit = deja(&["run", "--no-probe", "--audit", "3", "--seed", "5", &threads()]);
    assert!(stderr(&audit).contains("audit: identical"), "{}", stderr(&audit));
    let orders: std::collections::BTreeSet<Vec<u8>> =
        (0..6).map(|s| deja(&["run", "--no-probe", "--seed", &s.to_string(), &threads()]).stdout).collect();
    assert!(orders.len() > 1, "other seeds give other interleavings");
}

#[test]
fn snapshots_and_forks_of_a_program_running_several_threads() {
    let dir = std::env::temp_dir().join(format!("deja-thread-snap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (whole, v) = run_json(&["--seed", "5", &threads(), "--", "4"]);
    let digest = v["digest"].as_str().unwrap().to_string();
    let syscalls = v["syscalls"].as_u64().unwrap();
    // Snapshots taken while 1, 2, 3 or 4 worker threads are alive (and after some exited) resume
    // to the very same run.
    let mut points = 0;
    for at in (30..syscalls).step_by(17) {
        let snap = dir.join(format!("at-{at}.snap"));
        let taken = deja(&[
            "run",
            "--no-probe",
            "--seed",
            "5",
            "--snapshot-at",
            &at.to_string(),
            "--snapshot-out",
            snap.to_str().unwrap(),
            &threads(),
            "--",
            "4",
        ]);
        assert_eq!(taken.status.code(), Some(0), "{}", stderr(&taken));
        let (resumed, r) = run_json(&["--from-snapshot", snap.to_str().unwrap()]);
        assert_eq!(r["digest"].as_str().unwrap(), digest, "resumed at syscall {at}");
        assert!(whole.stdout.ends_with(&resumed.stdout), "at {at}: the rest of the output");
        points += 1;
    }
    assert!(points >= 4);
    // Forks: every child of a parent stopped with live threads is the uninterrupted run.
    let image = std::fs::read(guest("threads")).unwrap();
    let mut spec = deja_kernel::ProgramSpec::for_program(image, "threads", ["4".to_string()], 5);
    // What `deja run` gives every program.
    spec.env.push(format!("{}={}", deja_kernel::ANTITHESIS_LOCAL_OUTPUT, deja_kernel::ANTITHESIS_OUTPUT));
    let mut fork = deja_vmm::Fork::new(spec, 256 << 20, &deja_vmm::Settings::default(), 70, &mut |_, _| {}).unwrap();
    assert!(fork.parent_kernel().thread_ids().len() > 1, "the parent runs several threads");
    for _ in 0..5 {
        let child = fork.run_child(None, &mut |_, _| {}).unwrap();
        assert_eq!(child.report.digest, digest, "a child equals the uninterrupted run");
    }
    let other = fork.run_child(Some(77), &mut |_, _| {}).unwrap();
    assert_ne!(other.report.digest, digest, "a reseeded child schedules its threads otherwise");
    std::fs::remove_dir_all(&dir).ok();
}
