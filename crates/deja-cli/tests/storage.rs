//! Storage faults as real storage fails, end to end on the reference workloads: a store that
//! needs a crash before a barrier (pagestore) and one that swallows an I/O error (ackstore).
//! `deja explore` finds each planted bug within a stated budget, replays it, minimizes it to
//! its faults, and `deja check` judges the fixed variant against it; each fixed variant holds
//! for the same budget.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::Value;

fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("deja-storage-{name}-{}", std::process::id()));
    std::fs::remove_dir_all(&d).ok();
    d
}

fn bug_file(d: &Path, suffix: &str) -> PathBuf {
    std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            let n = p.file_name().unwrap().to_string_lossy().into_owned();
            n.starts_with("bug-") && n.ends_with(suffix) && (suffix == ".min.json" || !n.ends_with(".min.json"))
        })
        .unwrap_or_else(|| panic!("no bug file in {}", d.display()))
}

/// Explores `program` in faults mode, finds a bug within `budget` rounds, replays and minimizes
/// it, and judges `fixed` against it. Returns the minimized input's faults.
fn find_replay_minimize_judge(program: &str, fixed: &str, seed: u64, budget: u64) -> Value {
    let out_dir = dir(&format!("{program}-{seed}"));
    let o = deja(&[
        "explore",
        "--runs",
        &budget.to_string(),
        "--stop-at-first-bug",
        "--mode",
        "faults",
        "--seed",
        &seed.to_string(),
        "--out",
        &s(&out_dir),
        &s(&guest(program)),
        "--",
        "6",
    ]);
    assert_eq!(o.status.code(), Some(1), "{program}: a bug within {budget} rounds: {}", stderr(&o));
    let bug = bug_file(&out_dir, ".json");
    let r = deja(&["replay", &s(&bug)]);
    assert_eq!(r.status.code(), Some(1), "{}", stderr(&r));
    assert!(stderr(&r).contains("reproduced bug"), "{}", stderr(&r));
    let m = deja(&["minimize", &s(&bug)]);
    assert_eq!(m.status.code(), Some(0), "{}", stderr(&m));
    let min = bug_file(&out_dir, ".min.json");
    let r = deja(&["replay", &s(&min)]);
    assert_eq!(r.status.code(), Some(1), "the minimized bug reproduces: {}", stderr(&r));
    let v: Value = serde_json::from_slice(&std::fs::read(&min).unwrap()).unwrap();
    let check_dir = dir(&format!("{program}-check"));
    for (candidate, code, verdict) in [(fixed, 0, "FIXED_FOR_THIS_CAPSULE"), (program, 1, "STILL_REPRODUCES")] {
        let c = deja(&[
            "check",
            "--bug",
            &s(&min),
            "--base",
            &s(&guest(program)),
            "--candidate",
            &s(&guest(candidate)),
            "--out",
            &s(&check_dir),
            "--",
            "6",
        ]);
        assert_eq!(c.status.code(), Some(code), "{candidate}: {}", stderr(&c));
        assert!(stderr(&c).contains(verdict), "{}", stderr(&c));
        std::fs::remove_dir_all(&check_dir).ok();
    }
    std::fs::remove_dir_all(&out_dir).ok();
    v["input"]["faults"].clone()
}

#[test]
fn a_crash_before_the_barrier_is_found_minimized_and_judged() {
    let faults = find_replay_minimize_judge("pagestore-buggy", "pagestore-fixed", 5, 60);
    // The one fault: a crash before a durable write, under the weakest crash model (or a named
    // state); nothing else is left.
    assert!(faults["crash_before_durable_write"].is_u64(), "{faults}");
    assert!(faults["reordered_writes"] == true || faults["crash_state"].is_object(), "{faults}");
    assert_eq!(faults["errors"], serde_json::json!([]), "{faults}");
    assert_eq!(faults["eio_on_write_ppm"], 0);
}

#[test]
fn an_io_error_is_found_minimized_and_judged() {
    let faults = find_replay_minimize_judge("ackstore-buggy", "ackstore-fixed", 4, 60);
    let errors = faults["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 1, "one placed error: {faults}");
    assert_eq!(errors[0]["path"], "/data/log");
    // The planted bug swallows any failed write: EIO and ENOSPC both expose it.
    assert!(errors[0]["errno"] == "eio" || errors[0]["errno"] == "enospc", "{faults}");
}

#[test]
fn the_fixed_stores_hold_for_the_same_budget() {
    for program in ["pagestore-fixed", "ackstore-fixed"] {
        let d = dir(program);
        let o = deja(&[
            "explore",
            "--runs",
            "300",
            "--mode",
            "faults",
            "--seed",
            "1",
            "--out",
            &s(&d),
            &s(&guest(program)),
            "--",
            "6",
        ]);
        assert_eq!(o.status.code(), Some(0), "{program}: no bug in 300 rounds: {}", stderr(&o));
        let report: Value = serde_json::from_slice(&std::fs::read(d.join("report.json")).unwrap()).unwrap();
        assert_eq!(report["campaign"]["rounds"], 300);
        assert_eq!(report["campaign"]["bugs"], serde_json::json!([]));
        std::fs::remove_dir_all(&d).ok();
    }
}

#[test]
fn uninstrumented_programs_get_behaviour_feedback() {
    // Without SanitizerCoverage and without block coverage the explorer still learns: syscall
    // outcomes after a fault, the files left, how the run ended, the output lines.
    let d = dir("features");
    let o = deja(&[
        "explore",
        "--no-block-coverage",
        "--runs",
        "40",
        "--mode",
        "faults",
        "--seed",
        "2",
        "--out",
        &s(&d),
        &s(&guest("ackstore-fixed")),
        "--",
        "6",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let report: Value = serde_json::from_slice(&std::fs::read(d.join("report.json")).unwrap()).unwrap();
    let c = &report["campaign"];
    assert_eq!(c["edges_total"], 0, "no instrumentation");
    assert!(c["corpus_size"].as_u64().unwrap() > 2, "behaviours grew the corpus: {c}");
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn check_hunts_the_same_menu_without_a_capsule() {
    for (program, fixed) in [("pagestore-buggy", "pagestore-fixed"), ("ackstore-buggy", "ackstore-fixed")] {
        let d = dir(&format!("hunt-{program}"));
        let c = deja(&[
            "check",
            "--base",
            &s(&guest(program)),
            "--candidate",
            &s(&guest(fixed)),
            "--out",
            &s(&d),
            "--",
            "6",
        ]);
        assert_eq!(c.status.code(), Some(0), "{program}: {}", stderr(&c));
        let capsule: Value = serde_json::from_slice(&std::fs::read(d.join("capsule.json")).unwrap()).unwrap();
        if program.starts_with("pagestore") {
            assert_eq!(capsule["crash"], "before", "{capsule}");
            assert!(capsule["kept"]["ops"].as_array().is_some(), "the kept operations by meaning: {capsule}");
        } else {
            assert_eq!(capsule["crash"], "none", "an error alone: {capsule}");
            assert_eq!(capsule["faults"]["errors"][0]["op"], "write", "{capsule}");
        }
        std::fs::remove_dir_all(&d).ok();
    }
}

/// The fail-stop rule decided by evidence, on a program without the SDK that judges itself by
/// its exit code (guest/batchdb): the buggy release swallows a write error, goes on committing
/// and syncing, then finds an acknowledged batch missing and exits 1. That exit is the verdict
/// (`--fail-stop auto`, the default); `always` takes it for a fail-stop and restarts the program,
/// which then passes; `exit=2` does not name it; the fixed release, which stops committing at
/// its first error, passes on every seed.
#[test]
fn a_program_that_goes_on_after_an_injected_error_and_reports_a_loss_fails_its_run() {
    let db = guest("batchdb");
    let run = |seed: u64, variant: &str, extra: &[&str]| {
        let seed = seed.to_string();
        let mut args = vec!["run", "--no-probe", "--seed", &seed, "--eio-write-ppm", "20000"];
        args.extend_from_slice(extra);
        let db = s(&db);
        args.extend_from_slice(&[&db, "--", variant, "30"]);
        deja(&args)
    };
    let mut lost = Vec::new();
    for seed in 1..=8 {
        let o = run(seed, "buggy", &[]);
        let (out, err) = (stdout(&o), stderr(&o));
        if out.contains("LOST acknowledged batch") {
            assert_eq!(o.status.code(), Some(1), "seed {seed}: {err}");
            assert!(
                err.contains("is a failure, not a fail-stop")
                    && err.contains("time(s) after the error (wrote, then made it durable)"),
                "{err}"
            );
            lost.push(seed);
        } else {
            assert_eq!(o.status.code(), Some(0), "seed {seed}: {out}{err}");
        }
        let f = run(seed, "fixed", &[]);
        assert_eq!(f.status.code(), Some(0), "the fixed release, seed {seed}: {}{}", stdout(&f), stderr(&f));
        assert!(stdout(&f).contains("acknowledged batches present"), "{}", stdout(&f));
    }
    assert!(lost.len() >= 3, "the buggy release lost an acknowledged batch on seeds {lost:?}");
    let seed = lost[0];
    // `always`: the stop is taken for a fail-stop, and the restarted life passes.
    let a = run(seed, "buggy", &["--fail-stop", "always"]);
    let err = stderr(&a);
    assert_eq!(a.status.code(), Some(0), "{err}");
    assert!(err.contains("crashed at its fail-stop (status 1) after eio on write"), "{err}");
    let e = run(seed, "buggy", &["--fail-stop", "exit=2"]);
    assert_eq!(e.status.code(), Some(1), "{}", stderr(&e));
    assert!(stderr(&e).contains("--fail-stop exit=2 does not name it"), "{}", stderr(&e));
    assert!(stderr(&e).contains("--fail-stop=exit=2"), "the replay command keeps the setting: {}", stderr(&e));
    let x = run(seed, "buggy", &["--fail-stop", "exit=1"]);
    assert_eq!(x.status.code(), Some(0), "{}", stderr(&x));
    let bad = run(seed, "buggy", &["--fail-stop", "sometimes"]);
    assert_eq!(bad.status.code(), Some(2), "{}", stderr(&bad));
    assert!(stderr(&bad).contains("expected auto, never, always or exit=CODES"), "{}", stderr(&bad));

    // `deja explore` with its defaults finds the loss, and the bug file records the setting.
    let d = dir("batchdb");
    let o = deja(&[
        "explore",
        "--quiet",
        "--runs",
        "300",
        "--stop-at-first-bug",
        "--out",
        &s(&d),
        &s(&db),
        "--",
        "buggy",
        "30",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let bug: Value = serde_json::from_str(&std::fs::read_to_string(bug_file(&d, ".json")).unwrap()).unwrap();
    assert_eq!(bug["signature"], "exit code 1", "{bug}");
    assert_eq!(bug["input"]["faults"]["fail_stop"], "auto", "{bug}");
    let r = deja(&["replay", &s(&bug_file(&d, ".json"))]);
    assert_eq!(r.status.code(), Some(1), "{}", stderr(&r));
    let f = dir("batchdb-fixed");
    let o = deja(&["explore", "--quiet", "--runs", "300", "--out", &s(&f), &s(&db), "--", "fixed", "30"]);
    assert_eq!(o.status.code(), Some(0), "the fixed release: {}", stderr(&o));
    std::fs::remove_dir_all(&d).ok();
    std::fs::remove_dir_all(&f).ok();
}
