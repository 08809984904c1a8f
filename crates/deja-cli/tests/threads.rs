//! std::thread, Mutex and channels under deja: one thread at a time, switches at syscalls, the
//! next thread a decision of the seed.

mod common;

use common::*;

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
