//! Determinism across processes and host cores.
//!
//! Every comparison here is between separate `deja` processes pinned to different host cores
//! with `taskset`, never between runs inside one process: that is the class of fault (a guest
//! that sees which core it runs on) a single process cannot see. On a machine with one core the
//! runs are still separate processes, and each test says so.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::*;
use serde_json::Value;

fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// The host cores this test process may use (its affinity mask).
fn cores() -> Vec<u32> {
    let out = host_cores();
    if out.len() < 2 {
        eprintln!("only one host core is available: these runs differ by process, not by core");
    }
    out
}

/// The ways of closing the host channels the determinism tests run under, as environment
/// settings: the default (code rewriting, with the host's own traps behind it), rewriting alone
/// (`table`: no CPUID faulting, so rewriting is the only mechanism even on a host that honours
/// faulting), and no rewriting (the host's mechanisms, pinning where CPUID varies by core).
const MODES: [(&str, &[(&str, &str)]); 3] = [
    ("rewriting, the host's traps behind it", &[]),
    ("rewriting alone", &[("DEJA_CPU_IDENTITY", "table")]),
    ("no rewriting", &[("DEJA_REWRITE", "off")]),
];

/// The host core the remedy under `env` pins every vCPU thread to, if it pins (`deja doctor`):
/// without rewriting, where CPUID faulting is not honoured and the answers differ between cores.
fn remedy_core(env: &[(&str, &str)]) -> Option<u64> {
    doctor_json(env)["cpu_identity"]["remedy"]["pinned_core"].as_u64()
}

/// What must be the same between two runs of one program: everything the run reports except
/// the host-side counters under `vm` (wall time, the cores it happened to run on).
fn deterministic_part(mut v: Value) -> Value {
    let map = v.as_object_mut().expect("a summary object");
    map.remove("vm");
    map.remove("replay");
    map.get_mut("host").and_then(|h| h.as_object_mut()).map(|h| h.remove("hazards")).unwrap_or_default();
    v
}

/// Runs `deja run --json --no-probe <args>` on every core and asserts the runs are identical:
/// exit, trace, memory and full digests, every reported fact, and the output bytes.
fn same_on_every_core(what: &str, env: &[(&str, &str)], args: &[&str]) -> Value {
    let mut full = vec!["run", "--json", "--no-probe"];
    full.extend_from_slice(args);
    let runs: Vec<(u32, Output)> = cores().into_iter().map(|c| (c, deja_on(c, env, &full))).collect();
    let (c0, first) = &runs[0];
    let reference = summary(first);
    let pinned = remedy_core(env);
    for (c, out) in &runs[1..] {
        let v = summary(out);
        for key in ["digest", "trace_digest", "memory_digest", "exit"] {
            assert_eq!(v[key], reference[key], "{what}: {key} differs between core {c0} and core {c}");
        }
        assert_eq!(deterministic_part(v.clone()), deterministic_part(reference.clone()), "{what}: core {c0} vs {c}");
        assert_eq!(out.stdout, first.stdout, "{what}: stdout differs between core {c0} and core {c}");
        let core = pinned.unwrap_or(u64::from(*c));
        assert_eq!(v["vm"]["host_cores"], serde_json::json!([core]), "{what}: the vCPU ran on the pinned core");
    }
    reference
}

#[test]
fn every_bundled_guest_has_one_digest_on_every_core() {
    let g = |n: &str| s(&guest(n));
    let data = std::env::temp_dir().join(format!("deja-cores-{}.txt", std::process::id()));
    std::fs::write(&data, "one\ntwo\n").unwrap();
    let file = format!("{}:/in.txt", s(&data));
    let cases: Vec<(&str, Vec<String>)> = vec![
        ("hello", vec![g("hello")]),
        ("non-PIE hello", vec![s(&guests().join("nopie/hello"))]),
        ("timerand", vec!["--seed".into(), "3".into(), g("timerand")]),
        ("cpuburn", vec![g("cpuburn"), "--".into(), "3".into()]),
        ("memhog", vec![g("memhog"), "--".into(), "32".into()]),
        ("cat", vec!["--file".into(), file.clone(), g("cat"), "--".into(), "/in.txt".into(), "/proc/self/maps".into()]),
        ("syscalls", vec![g("syscalls"), "--".into(), "10".into()]),
        ("dirty", vec![g("dirty"), "--".into(), "300".into()]),
        ("bank", vec![g("bank"), "--".into(), "30".into()]),
        ("instrumented bank", vec![s(&cov_guest("bank")), "--".into(), "--mode".into(), "bulk".into(), "10".into()]),
        ("kv", vec![g("kv"), "--".into(), "--variant".into(), "fixed".into(), "8".into()]),
        (
            "kv crashed after durable write 5 and restarted",
            vec![
                "--crash-after-durable-write".into(),
                "5".into(),
                "--torn-writes".into(),
                g("kv"),
                "--".into(),
                "--variant".into(),
                "buggy".into(),
                "8".into(),
            ],
        ),
        ("fserr", vec![g("fserr")]),
        ("credit-buggy", vec![g("credit-buggy")]),
        ("threads (several threads, scheduled by the seed)", vec!["--seed".into(), "4".into(), g("threads")]),
        ("loopback sockets", vec![g("loopback")]),
        (
            "processes: a supervisor restarting its forked worker, killed by a fault",
            vec!["--kill-process".into(), "exe:before:3".into(), g("supervisor"), "--".into(), "fixed".into()],
        ),
        ("hostinfo", vec![g("hostinfo")]),
    ];
    for (mode, env) in MODES {
        for (what, args) in &cases {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let v = same_on_every_core(&format!("{what} ({mode})"), env, &args);
            assert!(v["syscalls"].as_u64().unwrap() > 0, "{what}: the run executed syscalls");
            let rewritten = v["host_channels"]["objects"].as_array().is_some_and(|o| !o.is_empty());
            assert_eq!(rewritten, !mode.starts_with("no "), "{what} ({mode}): {}", v["host_channels"]);
        }
        let restarted = same_on_every_core(
            &format!("kv crash ({mode})"),
            env,
            &["--crash-after-durable-write", "5", &g("kv"), "--", "--variant", "fixed", "8"],
        );
        assert!(restarted["faults"].as_array().is_some_and(|f| !f.is_empty()), "the crash run injected a crash");
    }
    std::fs::remove_file(&data).ok();
}

#[test]
fn every_cluster_has_one_digest_on_every_core() {
    guests();
    let dir = root().join("examples/clusters");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    assert!(files.len() >= 5, "the bundled clusters");
    for (f, (mode, env)) in files.iter().flat_map(|f| MODES.iter().map(move |m| (f, m))) {
        // etcd is a Go program: without rewriting, `rdtsc` runs natively, and the Go runtime
        // reads it (cputicks seeds its random scheduling choices), so two runs differ even on
        // one core. That is the host channel rewriting closes, and `deja doctor` names it.
        if mode.starts_with("no ") && f.ends_with("etcd.toml") {
            continue;
        }
        let runs: Vec<(u32, Output)> =
            cores().into_iter().map(|c| (c, deja_on(c, env, &["run", "--json", "--no-probe", &s(f)]))).collect();
        let f = &f.with_extension(format!("toml ({mode})"));
        let (c0, first) = &runs[0];
        let a = summary(first);
        assert!(a["nodes"].as_array().is_some_and(|n| !n.is_empty()), "{}", f.display());
        for (c, out) in &runs[1..] {
            let b = summary(out);
            assert_eq!(a["digest"], b["digest"], "{}: digest differs between core {c0} and core {c}", f.display());
            for (x, y) in a["nodes"].as_array().unwrap().iter().zip(b["nodes"].as_array().unwrap()) {
                assert_eq!(x["lives"], y["lives"], "{}: node {} differs between cores", f.display(), x["name"]);
                assert_eq!(x["stdout"], y["stdout"], "{}: node {} printed differently", f.display(), x["name"]);
            }
            assert_eq!(a["decisions"], b["decisions"], "{}", f.display());
            assert_eq!(a["faults"], b["faults"], "{}", f.display());
        }
    }
}

/// deja's fixed CPUID answer for a leaf, as hostinfo prints it.
fn table_line(leaf: u32, sub: u32) -> String {
    let [a, b, c, d] = deja_kernel::host::cpuid::answer(leaf, sub);
    format!("cpuid {leaf:#010x}.{sub}: {a:08x} {b:08x} {c:08x} {d:08x}")
}

#[test]
fn a_program_that_reads_cpuid_sees_the_same_cpu_on_every_core() {
    for (mode, env) in MODES {
        reads_cpuid(mode, env);
    }
}

fn reads_cpuid(mode: &str, env: &[(&str, &str)]) {
    let hostinfo = s(&guest("hostinfo"));
    let outputs: Vec<(u32, String)> =
        cores().into_iter().map(|c| (c, stdout(&deja_on(c, env, &["run", "--no-probe", &hostinfo])))).collect();
    let (c0, first) = &outputs[0];
    assert!(first.contains("initial APIC ID 0 x2APIC ID 0"), "{mode}: {first}");
    for (c, text) in &outputs[1..] {
        assert_eq!(text, first, "{mode}: hostinfo printed differently on core {c0} and core {c}");
    }
    // Where deja answers CPUID itself (rewriting, or CPUID faulting), the guest sees exactly
    // the fixed table, whatever the host's own answers: every leaf line matches it bit for bit.
    let doctor = doctor_json(env);
    let remedy = &doctor["cpu_identity"]["remedy"];
    if remedy["rewrite"] == true || remedy["cpuid"] == "faulting" {
        for (leaf, sub) in
            [(1, 0), (4, 0), (7, 0), (0xb, 0), (0xb, 1), (0xd, 0), (0x1f, 0), (0x4000_0000, 0), (0x8000_0001, 0)]
        {
            let line = table_line(leaf, sub);
            assert!(first.contains(&line), "expected {line:?} in:\n{first}");
        }
        assert!(
            first.contains("avx512f false rdrand false rdseed false"),
            "std's detection follows the table: {first}"
        );
        let v = summary(&deja_on(outputs[0].0, env, &["run", "--json", "--no-probe", &hostinfo]));
        assert!(v["vm"]["cpuid_exits"].as_u64().unwrap() > 20, "{mode}: every cpuid trapped: {}", v["vm"]);
    } else {
        eprintln!("{mode}: this host offers no CPUID faulting: compared across cores only");
    }
}

#[test]
fn the_core_number_leaks_only_where_doctor_says_and_pinning_closes_it() {
    let hostinfo = s(&guest("hostinfo"));
    let cores = cores();
    for (mode, env) in MODES {
        let doctor = doctor_json(env);
        // Rewritten, rdtscp and rdpid read deja's core 0; under a remedy that pins the vCPU
        // threads, every process reads the same core number.
        let leaks = doctor["core_number_varies_with_host_core"].as_bool().unwrap()
            && doctor["cpu_identity"]["remedy"]["pinned_core"].is_null()
            && doctor["cpu_identity"]["remedy"]["rewrite"] == false;
        // The audit spreads its processes over the cores and names the first diverging syscall:
        // the write of the line that prints the core number.
        let k = (cores.len() + 1).to_string();
        let out = Command::new(deja_bin())
            .args(["run", "--json", "--no-probe", "--audit", &k, &hostinfo, "--", "core"])
            .envs(env.iter().copied())
            .output()
            .unwrap();
        let v = summary(&out);
        let audit = &v["audit"];
        if leaks && cores.len() > 1 {
            assert_eq!(audit["result"], "diverged", "{mode}: {audit}");
            assert_eq!(out.status.code(), Some(124));
            let component = audit["component"].as_str().unwrap();
            assert!(
                component.contains("the syscall trace, first at syscall") && component.contains("write("),
                "{component}"
            );
        } else {
            assert_eq!(audit["result"], "identical", "{mode}: {audit}");
        }
    }
    // DEJA_CPU_IDENTITY=pinned runs every vCPU thread on one fixed core, whatever the process's
    // own affinity: the lowest core it may use.
    let pinned = [("DEJA_CPU_IDENTITY", "pinned")];
    let runs: Vec<Output> =
        cores.iter().map(|c| deja_on(*c, &pinned, &["run", "--json", "--no-probe", &hostinfo, "--", "core"])).collect();
    let fixed = summary(&runs[0])["host"]["fingerprint"]["remedy"]["pinned_core"].as_u64().expect("a pinned core");
    for (c, out) in cores.iter().zip(&runs) {
        let v = summary(out);
        assert_eq!(v["vm"]["host_cores"], serde_json::json!([fixed]), "started on core {c}: {}", v["vm"]);
        assert_eq!(out.stdout, runs[0].stdout, "pinned runs print the same, started on core {c}");
        assert_eq!(v["digest"], summary(&runs[0])["digest"]);
    }
}

#[test]
fn audit_runs_fresh_processes_on_every_core() {
    for (mode, env) in MODES {
        audit_on_every_core(mode, env);
    }
}

fn audit_on_every_core(mode: &str, env: &[(&str, &str)]) {
    let t = s(&guest("timerand"));
    let cores = cores();
    let k = (cores.len() + 1).to_string();
    let out = Command::new(deja_bin())
        .args(["run", "--json", "--no-probe", "--audit", &k, "--seed", "3", &t])
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let v = summary(&out);
    assert_eq!(out.status.code(), Some(0), "{mode}: {}", stderr(&out));
    let audit = &v["audit"];
    assert_eq!(audit["result"], "identical", "{mode}: {audit}");
    let pinned: Vec<u64> = audit["cores"].as_array().unwrap().iter().map(|c| c.as_u64().unwrap()).collect();
    let remedy = remedy_core(env);
    for c in &cores {
        assert!(pinned.contains(&(*c as u64)), "a fresh process ran on core {c}: {audit}");
        if remedy.is_none() {
            assert!(audit["host_cores_seen"].as_array().unwrap().contains(&Value::from(*c)), "{audit}");
        }
    }
    if let Some(core) = remedy {
        assert_eq!(audit["host_cores_seen"], serde_json::json!([core]), "every vCPU on the remedy's core: {audit}");
    }
}

#[test]
fn the_same_explore_command_on_two_cores_finds_the_same_bugs_and_writes_the_same_report() {
    let kv = s(&guest("kv"));
    let cores = cores();
    let pair = [cores[0], *cores.last().unwrap()];
    let mut trees = Vec::new();
    for (i, core) in pair.iter().enumerate() {
        let cwd = std::env::temp_dir().join(format!("deja-cores-explore-{}-{i}", std::process::id()));
        std::fs::remove_dir_all(&cwd).ok();
        std::fs::create_dir_all(&cwd).unwrap();
        let out = Command::new("taskset")
            .current_dir(&cwd)
            .args(["-c", &core.to_string()])
            .arg(deja_bin())
            .args(["explore", "--runs", "60", "--mode", "faults", "--seed", "6", "--out", "campaign", &kv, "--"])
            .args(["--variant", "buggy", "6"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "the lost write is found on core {core}: {}", stderr(&out));
        trees.push(tree(&cwd.join("campaign")));
        std::fs::remove_dir_all(&cwd).ok();
    }
    let (a, b) = (&trees[0], &trees[1]);
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>(), "the same files: bug ids, corpus");
    assert!(a.keys().any(|k| k.starts_with("bug-")), "{:?}", a.keys());
    for (name, bytes) in a {
        match name.as_str() {
            // The campaign's wall time is host time; everything else must be the same.
            "report.json" | "checkpoint.json" => {
                assert_eq!(without_wall_time(bytes), without_wall_time(&b[name]), "{name}")
            }
            "report.txt" | "report.html" => {}
            _ => assert_eq!(bytes, &b[name], "{name} differs between core {} and core {}", pair[0], pair[1]),
        }
    }
    let text = |t: &std::collections::BTreeMap<String, Vec<u8>>| {
        String::from_utf8_lossy(&t["report.txt"])
            .lines()
            .filter(|l| !l.trim_start().starts_with("time"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(text(a), text(b), "the text report, but for its wall time");
}

#[test]
fn a_bug_replays_to_its_digest_on_every_core() {
    let kv = s(&guest("kv"));
    let dir = std::env::temp_dir().join(format!("deja-cores-replay-{}", std::process::id()));
    std::fs::remove_dir_all(&dir).ok();
    let out = deja(&[
        "explore",
        "--runs",
        "40",
        "--stop-at-first-bug",
        "--mode",
        "faults",
        "--seed",
        "2",
        "--out",
        &s(&dir),
        &kv,
        "--",
        "--variant",
        "buggy",
        "6",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let bug = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with("bug-"))
        .expect("a bug file");
    let recorded: Value = serde_json::from_slice(&std::fs::read(&bug).unwrap()).unwrap();
    assert!(recorded["host"]["id"].is_string(), "the bug file records the host fingerprint");
    let digest = recorded["digest"].as_str().unwrap();
    for c in cores() {
        let out = deja_on(c, &[], &["replay", &s(&bug)]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains(&format!("(digest {digest})")), "core {c} replays to the recorded digest: {err}");
        assert!(!err.contains("note: the bug file was"), "same host, no fingerprint note: {err}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn deja_check_gives_the_same_certificate_on_every_core() {
    let credit = |v: &str| s(&guest(&format!("credit-{v}")));
    let mut hashes = Vec::new();
    for c in cores() {
        let dir = std::env::temp_dir().join(format!("deja-cores-check-{}-{c}", std::process::id()));
        std::fs::remove_dir_all(&dir).ok();
        let out = deja_on(
            c,
            &[],
            &["check", "--base", &credit("buggy"), "--candidate", &credit("atomic"), "--out", &s(&dir)],
        );
        assert_eq!(out.status.code(), Some(0), "FIXED on core {c}: {}", stderr(&out));
        let cert: Value = serde_json::from_slice(&std::fs::read(dir.join("certificate.json")).unwrap()).unwrap();
        assert_eq!(cert["verdict"], "FIXED_FOR_THIS_CAPSULE");
        assert!(cert["host"]["id"].is_string(), "the certificate binds the host fingerprint");
        hashes.push((c, cert["certificate_hash"].as_str().unwrap().to_string()));
        std::fs::remove_dir_all(&dir).ok();
    }
    for (c, h) in &hashes[1..] {
        assert_eq!(h, &hashes[0].1, "certificate on core {c} against core {}", hashes[0].0);
    }
}
