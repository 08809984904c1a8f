//! Hostile guests (`guest/hostile/`): programs that attack one thing each. Every outcome is a
//! clear status, the monitor neither panics nor hangs, and the outcome is the same in separate
//! processes on different host cores.

use std::process::{Command, Output};

use crate::common::*;
use serde_json::Value;

/// `deja <args>` in its own process pinned to `core`, with the watchdog's limit at `limit_s`.
fn deja_on(core: usize, limit_s: &str, args: &[&str]) -> Output {
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    Command::new("taskset")
        .arg("-c")
        .arg((core % cores).to_string())
        .arg(deja_bin())
        .args(args)
        .env("DEJA_NO_PROGRESS_S", limit_s)
        .output()
        .expect("taskset (util-linux) runs deja")
}

/// The syscall count in a NO_PROGRESS message.
fn stalled_after(err: &str) -> u64 {
    let at = err.find("after syscall ").unwrap_or_else(|| panic!("no syscall count in: {err}"));
    err[at + 14..].chars().take_while(char::is_ascii_digit).collect::<String>().parse().unwrap()
}

#[test]
fn a_loop_without_syscalls_ends_as_no_progress_after_the_same_syscall_on_every_core() {
    let spin = guest("spin").to_string_lossy().into_owned();
    let mut after = Vec::new();
    for core in [0, 1] {
        let start = std::time::Instant::now();
        let o = deja_on(core, "1", &["run", &spin]);
        let took = start.elapsed();
        assert_eq!(o.status.code(), Some(122), "NO_PROGRESS has its own exit code: {}", stderr(&o));
        let err = stderr(&o);
        assert!(err.contains("NO_PROGRESS") && err.contains("DEJA_NO_PROGRESS_S"), "{err}");
        assert!(err.contains("the program (thread 1) ran") && !err.contains("never got a turn"), "{err}");
        assert_eq!(stdout(&o), "spin always\n", "what it did before the loop is kept");
        // The limit bounds it from below: it is never cut short (the upper side is the host's
        // business and is not asserted).
        assert!(took >= std::time::Duration::from_secs(1), "stopped after {took:?}");
        after.push(stalled_after(&err));
    }
    assert_eq!(after[0], after[1], "the run stalls after the same syscall on every core");
}

#[test]
fn the_message_names_the_spinning_thread_and_the_threads_behind_it() {
    let spin = guest("spin").to_string_lossy().into_owned();
    let o = deja_on(0, "0.5", &["run", &spin, "--", "threaded"]);
    assert_eq!(o.status.code(), Some(122), "{}", stderr(&o));
    let err = stderr(&o);
    // Whichever thread the scheduler ran first spins; the other one waits behind it.
    let named = ["(thread 1) ran", "(thread 2) ran"].iter().position(|t| err.contains(t));
    let other = match named {
        Some(0) => "2",
        Some(_) => "1",
        None => panic!("no spinning thread named: {err}"),
    };
    assert!(err.contains(&format!("runnable thread(s) {other} never got a turn")), "{err}");
    assert!(!err.contains("CPUs"), "one CPU: no word of them: {err}");
    // Shown more CPUs, the program may be a runtime that spin-waits for another thread: the
    // message says what to try.
    let o = deja_on(0, "0.5", &["run", "--cpus", "2", &spin, "--", "threaded"]);
    assert_eq!(o.status.code(), Some(122), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("the program is shown 2 CPUs") && stderr(&o).contains("try --cpus 1"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn the_limit_is_the_users_and_zero_turns_the_watchdog_off() {
    let burn = guest("cpuburn").to_string_lossy().into_owned();
    // 1,500 million xorshift steps: 2 to 5 s of computing without a syscall or a fault on
    // this project's hosts, several times the 0.25 s limit on the fastest of them.
    let steps = "1500";
    let cut = deja_on(0, "0.25", &["run", &burn, "--", steps]);
    assert_eq!(cut.status.code(), Some(122), "{}", stderr(&cut));
    let off = deja_on(1, "0", &["run", &burn, "--", steps]);
    assert_eq!(off.status.code(), Some(0), "{}", stderr(&off));
    let default = deja_on(0, "", &["run", &burn, "--", steps]);
    assert_eq!(default.status.code(), Some(0), "the default limit (30 s) lets it finish: {}", stderr(&default));
}

#[test]
fn explore_counts_rounds_without_progress_and_calls_none_of_them_a_bug() {
    let spin = guest("spin").to_string_lossy().into_owned();
    let dirs: Vec<std::path::PathBuf> = (0..2)
        .map(|i| {
            let d = std::env::temp_dir().join(format!("deja-hostile-{}-explore-{i}", std::process::id()));
            let _ = std::fs::remove_dir_all(&d);
            d
        })
        .collect();
    for (core, d) in dirs.iter().enumerate() {
        let o = deja_on(
            core,
            "0.5",
            &[
                "explore",
                "--quiet",
                "--runs",
                "12",
                "--jobs",
                "2",
                "--mode",
                "random",
                "--out",
                &d.to_string_lossy(),
                &spin,
                "--",
                "sometimes",
            ],
        );
        assert_eq!(o.status.code(), Some(0), "no bug: {}", stderr(&o));
        assert!(stderr(&o).contains("made no progress and were stopped by the watchdog (not bugs)"), "{}", stderr(&o));
    }
    let (a, b) = (campaign_report(&dirs[0]), campaign_report(&dirs[1]));
    assert_eq!(a["rounds"], 12);
    assert!(a["bugs"].as_array().unwrap().is_empty());
    let stalled = a["no_progress_rounds"].as_u64().unwrap();
    assert!((1..12).contains(&stalled), "some rounds spin, some finish: {stalled}");
    assert!(a["no_progress"][0]["why"].as_str().unwrap().contains("after syscall"), "{a}");
    assert_eq!(a, b, "the same campaign in two processes on two cores");
    let text = std::fs::read_to_string(dirs[0].join("report.txt")).unwrap();
    assert!(text.contains("rounds without progress"), "{text}");
    for d in &dirs {
        std::fs::remove_dir_all(d).ok();
    }
    // A program that never progresses leaves nothing to explore, and says so.
    let d = std::env::temp_dir().join(format!("deja-hostile-{}-never", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    let o =
        deja_on(0, "0.5", &["explore", "--quiet", "--runs", "5", "--out", &d.to_string_lossy(), &spin, "--", "always"]);
    assert_eq!(o.status.code(), Some(122), "{}", stderr(&o));
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn a_cluster_node_that_spins_ends_the_run_as_no_progress() {
    let dir = root().join("target/test-clusters");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("spin.toml");
    let text = format!(
        "seed = 1\ntime_limit_ms = 5000\n\n[[node]]\nname = \"spinner\"\naddress = \"10.0.0.1\"\nbinary = \"{}\"\nargs = [\"always\"]\n",
        guest("spin").display()
    );
    std::fs::write(&file, text).unwrap();
    let o = deja_on(1, "0.5", &["run", "--no-probe", &file.to_string_lossy()]);
    assert_eq!(o.status.code(), Some(122), "{}", stderr(&o));
    assert!(stderr(&o).contains("node spinner") && stderr(&o).contains("NO_PROGRESS"), "{}", stderr(&o));
}

/// `deja run --json attack NAME` on `core`: the exit code, stdout and the run's JSON summary.
fn attack(core: usize, name: &str, extra: &[&str]) -> (Option<i32>, String, Value) {
    let a = guest("attack").to_string_lossy().into_owned();
    let mut args = vec!["run", "--no-probe", "--json"];
    args.extend_from_slice(extra);
    args.extend([a.as_str(), "--", name]);
    let o = deja_on(core, "10", &args);
    let err = stderr(&o);
    assert!(!err.contains("panicked"), "{name}: the monitor panicked:\n{err}");
    let summary: Value = err
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("{name}: no run summary; deja said:\n{err}"));
    (o.status.code(), stdout(&o), summary)
}

/// Every attack with its documented outcome (docs/HOSTILE.md): the exit code and a line the
/// run must print (on stdout, or in deja's summary on stderr).
const ATTACKS: [(&str, i32, &str); 43] = [
    ("syscalls-wild", 0, "survived syscalls-wild"),
    ("syscalls-straddle", 0, "survived syscalls-straddle"),
    ("int80", 139, "int 0x80 (software interrupts are not served"),
    ("sysenter", 132, "invalid opcode: sysenter"),
    ("iretq", 139, "SIGSEGV"),
    ("lgdt", 139, "SIGSEGV"),
    ("mov-cr3", 139, "SIGSEGV"),
    ("wrmsr", 139, "SIGSEGV"),
    ("invlpg", 139, "SIGSEGV"),
    ("out-80", 139, "SIGSEGV"),
    ("stub-write", 139, "SIGSEGV"),
    ("stub-jump", 139, "SIGSEGV"),
    ("direct-map-read", 139, "SIGSEGV"),
    ("direct-map-jump", 139, "SIGSEGV"),
    ("smc", 0, "smc: 1 then 2"),
    ("fd-exhaust", 0, "then Some(Some(24))"),
    ("thread-bomb", 0, "then Some(11)"),
    ("memory-bomb", 0, "survived memory-bomb"),
    // Rust's own handler, on its alternate stack, reports the overflow and aborts, as natively.
    ("stack-bomb", 134, "\"name\":\"SIGABRT\""),
    ("fs-fill", 0, "then Some(28)"),
    ("escape", 0, "/etc/passwd: Err(Some(2))"),
    ("mmap-storm", 0, "survived mmap-storm"),
    ("socket-storm", 0, "400 in epoll, 100 connected"),
    ("deadlock", 137, "deadlock: every thread is blocked"),
    ("block-socket", 137, "deadlock: every thread is blocked: tid 1 waiting for I/O in recvfrom"),
    ("hlt", 139, "SIGSEGV"),
    ("cli", 139, "SIGSEGV"),
    ("ud2", 132, "invalid opcode"),
    ("int3", 133, "breakpoint (int3)"),
    ("int-pf", 139, "int 0xe (software interrupts are not served"),
    ("int-gp", 139, "int 0xd (software interrupts are not served"),
    ("sgdt", 0, "sgdt: limit 0x47 base 0xffff888000001000"),
    ("sidt", 0, "sidt: limit 0xfff base 0xffff888000002000"),
    ("out-deja-port", 139, "SIGSEGV"),
    ("in-deja-port", 139, "SIGSEGV"),
    ("out-ptsync", 139, "SIGSEGV"),
    ("out-exception-port", 139, "SIGSEGV"),
    ("monitor-remap", 0, "mprotect the stub: errno 12"),
    ("brk-storm", 0, "mmap 128 TiB: errno 12"),
    // Children that end unreaped fill the process table (512 processes): EAGAIN.
    ("fork-bomb", 0, "forked 511, then -11"),
    // The host's programs are not the guest's; /proc/self/exe is, and runs the attack again,
    // with no attack named (exit 2).
    ("exec-host", 2, "execve /usr/bin/env: errno 2"),
    ("sigreturn-forge", 139, "rt_sigreturn refused the signal frame"),
    ("sigreturn-iopl", 0, "after rt_sigreturn: cs 0x33, iopl 0"),
];

#[test]
fn hostile_guests_end_with_a_clear_status_the_same_way_on_every_core() {
    let mut table = String::from("| attack | exit | outcome |\n|---|---|---|\n");
    // Every attack on core 0, and the same attacks in fresh processes on core 1, audited across
    // processes: the two passes run side by side, each pinned to its core.
    let (first, second) = std::thread::scope(|scope| {
        let on = |core: usize, extra: &'static [&'static str]| {
            scope.spawn(move || ATTACKS.map(|(name, _, _)| attack(core, name, extra)))
        };
        let (a, b) = (on(0, &[]), on(1, &["--audit", "2"]));
        let join = |h: std::thread::ScopedJoinHandle<'_, _>| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e));
        (join(a), join(b))
    });
    for (((name, code, line), (c0, out0, s0)), (c1, out1, s1)) in ATTACKS.into_iter().zip(first).zip(second) {
        assert_eq!(c0, Some(code), "{name}: {out0}\n{s0}");
        let exit = &s0["exit"];
        let shown = match exit["kind"].as_str() {
            Some("signaled") => {
                let why = exit["fault"]["description"].as_str().unwrap_or("");
                // A deadlock names addresses; the table keeps what it says, not where.
                format!("{}: {}", exit["name"].as_str().unwrap_or(""), why.split(" on 0x").next().unwrap_or(why))
            }
            _ => out0.lines().rev().find(|l| !l.starts_with("survived")).unwrap_or("").to_string(),
        };
        assert!(
            format!("{out0}{s0}").contains(line),
            "{name} showed neither on stdout nor in its summary {line:?}:\n{out0}\n{s0}"
        );
        assert_eq!((c1, &out1), (c0, &out0), "{name}: the same outcome on another core, and audited: {s1}");
        assert_eq!(s0["digest"], s1["digest"], "{name}: the same digest on another core");
        table.push_str(&format!("| `{name}` | {code} | {} |\n", shown.replace('|', "\\|")));
    }
    let path = root().join("target/hostile-outcomes.md");
    std::fs::write(&path, &table).unwrap();
    println!("{table}");
}

#[test]
fn nothing_outside_the_declared_tree_is_reachable() {
    let (code, out, _) = attack(0, "escape", &[]);
    assert_eq!(code, Some(0), "{out}");
    for p in [
        "/etc/passwd",
        "/proc/self/environ",
        "/proc/1/root/etc/passwd",
        "/../../etc/passwd",
        "/data/../../etc/shadow",
        "/root",
    ] {
        assert!(out.contains(&format!("{p}: Err(Some(2))")), "{p} must not exist in the guest:\n{out}");
    }
    // A symlink may be made, and points at nothing the guest has; a hard link to a file that
    // does not exist fails.
    assert!(out.contains("through it: Err(Some(2))"), "{out}");
    assert!(out.contains("hard link: Err(Some(2))"), "{out}");
    // A declaration whose guest path climbs, or is not normal, is refused before anything runs.
    let hello = guest("hello").to_string_lossy().into_owned();
    let host = root().join("README.md").to_string_lossy().into_owned();
    for bad in ["/data/../../etc/passwd", "/../x", "/data/./x", "//x", "/data/", "relative"] {
        let o = deja_on(0, "10", &["run", "--no-probe", "--file", &format!("{host}:{bad}"), &hello]);
        assert_eq!(o.status.code(), Some(2), "{bad}: {}", stderr(&o));
        assert!(stderr(&o).contains("the guest path must"), "{bad}: {}", stderr(&o));
        assert!(o.stdout.is_empty(), "{bad}: nothing ran");
    }
    let dir = root().join("target/test-clusters");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("climb.toml");
    let text = format!(
        "[[node]]\nname = \"n\"\naddress = \"10.0.0.1\"\nbinary = \"{}\"\nfiles = {{ \"/data/../../etc/x\" = \"{host}\" }}\n",
        guest("hello").display()
    );
    std::fs::write(&file, text).unwrap();
    let o = deja(&["run", &file.to_string_lossy()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("the guest path must be normal"), "{}", stderr(&o));
}
