//! deja's vDSO changes how many exits a run takes, never what it computes: with it and without
//! it (`--no-vdso`, `DEJA_VDSO=off`), a program prints the same, ends at the same virtual time
//! and takes the same decisions; only the syscalls it makes (and so the trace digest) differ.

use std::process::Command;

use crate::common::*;

/// `deja run --json --no-probe <args>` with the vDSO on or off (by the environment variable, or
/// by the flag when `flag`): (stdout, summary).
fn run(vdso: bool, flag: bool, args: &[&str]) -> (String, serde_json::Value) {
    let mut cmd = Command::new(deja_bin());
    if !vdso && flag {
        cmd.arg("--no-vdso");
    }
    if !vdso && !flag {
        cmd.env("DEJA_VDSO", "off");
    }
    let out = cmd.args(["run", "--json", "--no-probe"]).args(args).output().expect("start deja");
    let err = stderr(&out);
    let v: serde_json::Value = serde_json::from_str(err.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("no JSON summary ({e}) in:\n{err}"));
    (stdout(&out), v)
}

/// The clock syscalls a summary counts (what the vDSO stands for).
fn clock_syscalls(counts: &serde_json::Value) -> u64 {
    ["clock_gettime", "gettimeofday", "time", "getcpu", "clock_getres"]
        .iter()
        .map(|n| counts[n].as_u64().unwrap_or(0))
        .sum()
}

#[test]
fn programs_compute_the_same_with_the_vdso_in_fewer_exits() {
    let clock = guest("conformance-clock").to_string_lossy().into_owned();
    let go = guest("go-goroutines").to_string_lossy().into_owned();
    let threads = guest("threads").to_string_lossy().into_owned();
    for (i, args) in
        [vec![clock.as_str(), "--", "3", "count"], vec![go.as_str()], vec![threads.as_str()]].iter().enumerate()
    {
        let (out_on, on) = run(true, false, args);
        let (out_off, off) = run(false, i == 0, args);
        let name = args[0].rsplit('/').next().unwrap_or_default();
        assert_eq!(on["exit"], off["exit"], "{name}");
        // conformance-clock says whether the auxiliary vector names a vDSO; nothing else may differ.
        let seen = |s: &str| s.lines().filter(|l| !l.starts_with("vdso: ")).collect::<Vec<_>>().join("\n");
        assert_eq!(seen(&out_on), seen(&out_off), "{name}: the same output");
        assert_eq!(on["virtual_time_ns"], off["virtual_time_ns"], "{name}: the same virtual time");
        assert_eq!(on["decisions"], off["decisions"], "{name}: the same decisions");
        assert!(off["vdso_calls"].is_null(), "{name}: no vDSO: {}", off["vdso_calls"]);
        let calls = on["vdso_calls"].as_u64().expect("calls counted");
        let (c_on, c_off) = (clock_syscalls(&on["syscall_counts"]), clock_syscalls(&off["syscall_counts"]));
        assert_eq!(c_on + calls, c_off, "{name}: every call the vDSO served is a syscall less");
        assert_eq!(
            on["syscalls"].as_u64().unwrap() + calls,
            off["syscalls"].as_u64().unwrap(),
            "{name}: and nothing else changed"
        );
        assert_ne!(on["trace_digest"], off["trace_digest"], "{name}: the trace names the calls differently");
        if i < 2 {
            assert!(calls > c_on, "{name}: most clock reads need no exit: {calls} served, {c_on} syscalls");
        }
    }
    let (out, _) = run(true, false, &[&clock, "--", "3", "count"]);
    assert!(out.contains("vdso: present") && out.contains("spin: 3000 reads, last at 3015000 ns"), "{out}");
    let (out, _) = run(false, true, &[&clock, "--", "3"]);
    assert!(out.contains("vdso: absent"), "--no-vdso maps none: {out}");
}

#[test]
fn the_register_cluster_is_the_same_cluster_with_fewer_exits() {
    let file = root().join("examples/clusters/register-fixed.toml").to_string_lossy().into_owned();
    let (_, on) = run(true, false, &["--seed", "4", &file]);
    let (_, off) = run(false, false, &["--seed", "4", &file]);
    assert_eq!(on["virtual_time_ns"], off["virtual_time_ns"]);
    assert_eq!(on["decisions"], off["decisions"], "the same schedule, faults and latencies");
    let (mut calls, mut clock_on, mut clock_off, mut exits_on, mut exits_off) = (0, 0, 0, 0, 0);
    for (a, b) in on["nodes"].as_array().unwrap().iter().zip(off["nodes"].as_array().unwrap()) {
        assert_eq!(a["stdout"], b["stdout"], "node {}", a["name"]);
        let (la, lb) = (&a["lives"][0], &b["lives"][0]);
        assert_eq!(la["virtual_time_ns"], lb["virtual_time_ns"], "node {}", a["name"]);
        calls += la["vdso_calls"].as_u64().expect("the node had a vDSO");
        clock_on += clock_syscalls(&la["syscall_counts"]);
        clock_off += clock_syscalls(&lb["syscall_counts"]);
        exits_on += a["vm_exits"].as_u64().unwrap();
        exits_off += b["vm_exits"].as_u64().unwrap();
    }
    assert_eq!(clock_on + calls, clock_off);
    assert!(calls * 2 > clock_off, "at least half the clock reads need no exit: {calls} of {clock_off}");
    assert_eq!(exits_on + calls, exits_off, "each call served is an exit saved");
}

#[test]
fn an_audit_with_the_vdso_off_is_identical_in_every_process() {
    // `--no-vdso` reaches the audit's fresh processes; each reads the clock by syscalls alone.
    let clock = guest("conformance-clock").to_string_lossy().into_owned();
    let o = deja(&["--no-vdso", "run", "--no-probe", "--audit", "3", &clock, "--", "2", "count"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("deja: audit: identical over 3 runs"), "{}", stderr(&o));
    assert!(stderr(&o).contains("deja: vDSO: off"), "{}", stderr(&o));
    assert!(stdout(&o).contains("vdso: absent"), "{}", stdout(&o));
}
