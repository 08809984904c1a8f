//! The host channels closed by rewriting, on programs no part of deja was written for: a C
//! program that executes every channel instruction in inline assembly, and a Go program whose
//! runtime seeds its scheduler from the TSC.
//!
//! Every comparison is between separate `deja` processes pinned to different host cores with
//! `taskset`.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Output};

use crate::common::*;

fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// The value after `key ` on the line starting with `key`.
fn field<'a>(text: &'a str, key: &str) -> &'a str {
    text.lines().find_map(|l| l.strip_prefix(&format!("{key} "))).unwrap_or_else(|| panic!("no {key} in:\n{text}"))
}

#[test]
fn a_c_program_reading_every_channel_sees_deja_model_on_every_core() {
    let prog = s(&guest("hostchan"));
    let runs: Vec<(u32, Output)> = host_cores()
        .into_iter()
        .map(|c| (c, deja_on(c, &[], &["run", "--json", "--no-probe", "--seed", "5", &prog])))
        .collect();
    let (c0, first) = &runs[0];
    let text = stdout(first);
    let v = summary(first);
    assert_eq!(v["exit_code"], 0, "{}", stderr(first));
    for (c, out) in &runs[1..] {
        assert_eq!(stdout(out), text, "the program printed differently on core {c0} and core {c}");
        assert_eq!(summary(out)["digest"], v["digest"], "digest on core {c0} and core {c}");
    }
    // Every answer is deja's: the fixed CPUID table, core 0, its XCR0, a TSC from the seed.
    let [a, b, c, d] = deja_kernel::host::cpuid::answer(1, 0);
    assert_eq!(field(&text, "cpuid 00000001.0:"), format!("{a:08x} {b:08x} {c:08x} {d:08x}"));
    let [a, b, c, d] = deja_kernel::host::cpuid::answer(0xb, 1);
    assert_eq!(field(&text, "cpuid 0000000b.1:"), format!("{a:08x} {b:08x} {c:08x} {d:08x}"));
    assert!(field(&text, "rdtscp").ends_with(" aux 0"), "{text}");
    assert_eq!(field(&text, "rdpid"), "0");
    assert_eq!(field(&text, "xgetbv"), format!("{:#x}", deja_kernel::host::cpuid::XCR0));
    let tsc: u64 = field(&text, "rdtsc").parse().unwrap();
    let base = deja_kernel::time::clock::tsc_base(5);
    assert!(tsc > base && tsc - base < 3_000_000_000, "the virtual TSC, from the seed's base: {tsc} (base {base})");
    for line in ["rdrand", "rdseed"] {
        let values = field(&text, line);
        assert_eq!(values.matches("/1").count(), 3, "CF set at 16, 32 and 64 bits: {values}");
    }
    // The run report names what was rewritten and what trapped.
    let hc = &v["host_channels"];
    assert_eq!(hc["rewrite"], "on");
    let image = &hc["objects"][0];
    assert!(image["name"].as_str().unwrap().ends_with("hostchan"), "{image}");
    assert!(image["refused"].as_array().unwrap().is_empty(), "every site agreed: {image}");
    let rewritten = &image["rewritten"];
    assert!(rewritten["cpuid"].as_u64().unwrap() >= 6, "main's six and glibc's own: {rewritten}");
    for (k, n) in [("rdtscp", 1), ("rdpid", 1), ("rdrand", 3), ("rdseed", 3)] {
        assert_eq!(rewritten[k], n, "{k}: {rewritten}");
        assert_eq!(hc["traps"][k], n, "{k} trapped once per execution: {hc}");
    }
    assert!(hc["traps"]["cpuid"].as_u64().unwrap() >= 6, "{hc}");
    assert!(v["vm"]["rewrite_exits"].as_u64().unwrap() >= 14, "{}", v["vm"]);

    // Another seed: another TSC and other random values; the CPU stays the same.
    let other = stdout(&deja(&["run", "--no-probe", "--seed", "6", &prog]));
    assert_ne!(field(&other, "rdtsc"), field(&text, "rdtsc"));
    assert_ne!(field(&other, "rdrand"), field(&text, "rdrand"));
    assert_eq!(field(&other, "cpuid 00000001.0:"), field(&text, "cpuid 00000001.0:"));
}

#[test]
fn without_rewriting_the_same_program_reads_the_host_where_doctor_says_it_can() {
    let prog = s(&guest("hostchan"));
    let off = [("DEJA_REWRITE", "off")];
    let d = doctor_json(&off);
    let hw = &d["cpu_identity"]["hardware"];
    let text = stdout(&deja_on(host_cores()[0], &off, &["run", "--no-probe", "--seed", "5", &prog]));
    let again = stdout(&deja_on(host_cores()[0], &off, &["run", "--no-probe", "--seed", "5", &prog]));
    let channels = d["channels"].as_array().unwrap();
    let open = |name: &str| channels.iter().any(|c| c["channel"] == name && c["mechanism"] == "open");
    if !hw["rdtsc_trapped"].as_bool().unwrap() {
        assert!(open("rdtsc"), "{channels:?}");
        assert_ne!(field(&text, "rdtsc"), field(&again, "rdtsc"), "host time, run after run");
    }
    if hw["rdrand_runs"].as_bool().unwrap() {
        assert!(open("rdrand"), "{channels:?}");
        assert_ne!(field(&text, "rdrand"), field(&again, "rdrand"), "host randomness, run after run");
    }
    // With rewriting, doctor lists no open channel.
    let on = doctor_json(&[]);
    for c in on["channels"].as_array().unwrap() {
        assert_eq!(c["mechanism"], "rewriting", "{c}");
    }
}

/// The order line of the Go program.
fn order(o: &Output) -> String {
    stdout(o).lines().find(|l| l.starts_with("order ")).unwrap_or_else(|| panic!("no order in {}", stderr(o))).into()
}

#[test]
fn a_go_program_is_the_same_on_every_core_and_its_scheduler_follows_the_seed() {
    let prog = s(&guest("go-goroutines"));
    for seed in ["1", "2", "3"] {
        let (out, v) = run_json(&["--audit", "4", "--seed", seed, &prog, "--", "/data"]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert_eq!(v["audit"]["result"], "identical", "seed {seed}: {}", v["audit"]);
        let text = stdout(&out);
        assert!(text.contains("reply echo hello over loopback"), "{text}");
        assert!(text.contains("file order ["), "{text}");
        assert!(
            v["host_channels"]["traps"]["rdtsc"].as_u64().unwrap()
                + v["host_channels"]["traps"]["rdtscp"].as_u64().unwrap()
                > 0,
            "the runtime read the TSC: {}",
            v["host_channels"]
        );
    }
    // With four Ps the scheduler's choices show in the order. Natively, runs differ by host
    // timing; under deja, by seed, about as often.
    let four = [("GOMAXPROCS", "4")];
    let under_deja: BTreeSet<String> = (1..=10)
        .map(|seed| {
            let o = Command::new(deja_bin())
                .args(["run", "--no-probe", "--seed", &seed.to_string(), "--env", "GOMAXPROCS=4", &prog, "--", "/data"])
                .output()
                .unwrap();
            order(&o)
        })
        .collect();
    let tmp = std::env::temp_dir();
    let native: BTreeSet<String> = (0..10)
        .map(|_| order(&Command::new(&prog).arg(&tmp).envs(four).output().expect("the Go program runs natively")))
        .collect();
    eprintln!("distinct orders over 10 runs: {} under deja (10 seeds), {} natively", under_deja.len(), native.len());
    assert!(under_deja.len() >= 3 && under_deja.len() * 2 >= native.len(), "deja {under_deja:?}, native {native:?}");
    // And the same seed always gives the same order.
    let a = deja(&["run", "--no-probe", "--seed", "7", "--env", "GOMAXPROCS=4", &prog, "--", "/data"]);
    let b = deja(&["run", "--no-probe", "--seed", "7", "--env", "GOMAXPROCS=4", &prog, "--", "/data"]);
    assert_eq!(order(&a), order(&b));
}

#[test]
fn without_rewriting_a_go_program_diverges_where_the_host_does_not_trap_rdtsc_and_the_audit_names_what_differs() {
    let prog = s(&guest("go-goroutines"));
    let off = [("DEJA_REWRITE", "off")];
    if doctor_json(&off)["cpu_identity"]["hardware"]["rdtsc_trapped"].as_bool().unwrap() {
        eprintln!("this host traps rdtsc itself (CR4.TSD): nothing to diverge");
        return;
    }
    let out = Command::new(deja_bin())
        .args([
            "run",
            "--json",
            "--no-probe",
            "--audit",
            "4",
            "--seed",
            "3",
            "--env",
            "GOMAXPROCS=4",
            &prog,
            "--",
            "/data",
        ])
        .envs(off)
        .output()
        .unwrap();
    let v = summary(&out);
    assert_eq!(v["audit"]["result"], "diverged", "{}", v["audit"]);
    let component = v["audit"]["component"].as_str().unwrap();
    // It names the field and both sides, which differ: never two identical renderings. A side
    // is a value (`the result: 5 against 7`) or, where the runs made different calls, a whole
    // syscall (`the syscall: sigaltstack(...) = 0 against clock_gettime(...) = 0`).
    let (left, right) = component.rsplit_once(" against ").expect("two sides");
    let ours = left.rsplit_once(": ").map_or(left, |(_, v)| v).trim();
    let theirs = right.split(": ").next().unwrap_or_default().trim();
    assert!(!ours.is_empty() && !theirs.is_empty(), "{component}");
    assert_ne!(ours, theirs, "{component}");
}

#[test]
fn a_stripped_go_program_is_rewritten_from_its_pc_line_table_alone() {
    let full = s(&guest("go-goroutines"));
    let stripped = s(&guest("go-goroutines-stripped"));
    let symbols = std::process::Command::new("readelf").args(["-S", &stripped]).output().unwrap();
    assert!(!stdout(&symbols).contains(".symtab"), "the stripped build has no symbol table");
    let (out, v) = run_json(&["--audit", "3", "--seed", "4", &stripped, "--", "/data"]);
    assert_eq!(v["audit"]["result"], "identical", "{}", stderr(&out));
    let (_, w) = run_json(&["--seed", "4", &full, "--", "/data"]);
    let (a, b) = (&v["host_channels"]["objects"][0], &w["host_channels"]["objects"][0]);
    assert!(a["refused"].as_array().unwrap().is_empty(), "{a}");
    assert_eq!(a["rewritten"], b["rewritten"], "the same sites with and without symbols");
    assert_eq!(order_of(&stdout(&out)), order_of(&stdout_of_run(&full)));
}

fn order_of(text: &str) -> String {
    text.lines().find(|l| l.starts_with("order ")).unwrap_or_default().to_string()
}

fn stdout_of_run(prog: &str) -> String {
    stdout(&deja(&["run", "--no-probe", "--seed", "4", prog, "--", "/data"]))
}

#[test]
fn code_a_program_writes_and_makes_executable_is_rewritten_too() {
    let prog = s(&guest("hostchan"));
    let runs: Vec<Output> = host_cores()
        .into_iter()
        .map(|c| deja_on(c, &[], &["run", "--json", "--no-probe", "--seed", "8", &prog, "--", "jit"]))
        .collect();
    let text = stdout(&runs[0]);
    for out in &runs[1..] {
        assert_eq!(stdout(out), text, "the same on every core");
    }
    let (a, b) = field(&text, "jit rdtsc").split_once(" then ").unwrap();
    let (a, b): (u64, u64) = (a.parse().unwrap(), b.parse().unwrap());
    assert!(a > deja_kernel::time::clock::tsc_base(8) && b > a, "the virtual TSC: {text}");
    // What stays open, as doctor says: the program reading its own code sees the trap.
    assert_eq!(field(&text, "jit code now"), "0f 0b");
    let v = summary(&runs[0]);
    // The program, the vDSO (nothing to rewrite), then the code it wrote.
    assert_eq!(v["host_channels"]["objects"][1]["name"], "[vdso]");
    let jit = &v["host_channels"]["objects"][2];
    assert_eq!((jit["name"].as_str(), jit["rewritten"]["rdtsc"].as_u64()), (Some("anonymous"), Some(1)), "{jit}");
    assert_eq!(v["host_channels"]["traps"]["rdtsc"], 2, "{}", v["host_channels"]);
}
