//! Storage faults as real storage fails, end to end on the reference workloads: a store that
//! needs a crash before a barrier (pagestore) and one that swallows an I/O error (ackstore).
//! `deja explore` finds each planted bug within a stated budget, replays it, minimizes it to
//! its faults, and `deja check` judges the fixed variant against it; each fixed variant holds
//! for the same budget.

use std::path::{Path, PathBuf};

use crate::common::*;
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

/// `deja explore --quiet --out OUT FLAGS GUEST -- 6`: a store of the guests with six puts.
fn explore_6(out: &Path, program: &str, flags: &[&str]) -> std::process::Output {
    let (out, program) = (s(out), s(&guest(program)));
    let mut args = vec!["explore", "--quiet", "--out", &out];
    args.extend_from_slice(flags);
    args.extend_from_slice(&[&program, "--", "6"]);
    deja(&args)
}

/// A failed sync followed by a crash, found with explore's default options: the retrying store
/// (guest/pagestore `retry`) acknowledges a put whose extension a failed fdatasync dropped, and a
/// crash after the header's sync leaves a header that counts a record the file does not hold.
/// Crashes alone and errors alone do not show it; the frontier's failed sync then crash does,
/// within 300 rounds on seeds 1 to 5. The minimized bug keeps both faults, `deja check` judges
/// the fixed store against it and the retrying store again, and the fixed store holds.
#[test]
fn a_failed_sync_then_a_crash_is_on_the_default_menu() {
    for seed in 1..=5u64 {
        let d = dir(&format!("retry-{seed}"));
        let seed_flag = format!("--seed={seed}");
        let o = explore_6(&d, "pagestore-retry", &["--runs", "300", "--stop-at-first-bug", &seed_flag]);
        assert_eq!(o.status.code(), Some(1), "seed {seed}: a bug within 300 rounds: {}", stderr(&o));
        let bug: Value = serde_json::from_str(&std::fs::read_to_string(bug_file(&d, ".json")).unwrap()).unwrap();
        let faults = &bug["input"]["faults"];
        assert!(
            faults["errors"].as_array().unwrap().iter().any(|e| e["op"] == "fsync"),
            "seed {seed}: a failed sync: {faults}"
        );
        assert!(
            faults["crash_at_exit"] == true || !faults["crash_at"].as_array().unwrap().is_empty(),
            "seed {seed}: then a crash: {faults}"
        );
        if seed == 1 {
            let m = deja(&["minimize", &s(&bug_file(&d, ".json"))]);
            assert_eq!(m.status.code(), Some(0), "{}", stderr(&m));
            let min = bug_file(&d, ".min.json");
            let v: Value = serde_json::from_slice(&std::fs::read(&min).unwrap()).unwrap();
            assert_eq!(v["input"]["faults"]["errors"].as_array().unwrap().len(), 1, "the failed sync stays: {v}");
            for (candidate, code) in [("pagestore-fixed", 0), ("pagestore-retry", 1)] {
                let c = deja(&[
                    "check",
                    "--bug",
                    &s(&min),
                    "--base",
                    &s(&guest("pagestore-retry")),
                    "--candidate",
                    &s(&guest(candidate)),
                    "--out",
                    &s(&d.join(format!("check-{candidate}"))),
                    "--",
                    "6",
                ]);
                assert_eq!(c.status.code(), Some(code), "{candidate}: {}", stderr(&c));
            }
        }
        std::fs::remove_dir_all(&d).ok();
    }
    let d = dir("retry-fixed");
    let o = explore_6(&d, "pagestore-fixed", &["--runs", "300"]);
    assert_eq!(o.status.code(), Some(0), "the fixed store holds: {}", stderr(&o));
    std::fs::remove_dir_all(&d).ok();
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
    assert_eq!(bug["signature"], "exit code 1: LOST acknowledged batch N item N", "named by what it said: {bug}");
    assert_eq!(bug["input"]["faults"]["fail_stop"], "auto", "{bug}");
    let r = deja(&["replay", &s(&bug_file(&d, ".json"))]);
    assert_eq!(r.status.code(), Some(1), "{}", stderr(&r));
    let f = dir("batchdb-fixed");
    let o = deja(&["explore", "--quiet", "--runs", "300", "--out", &s(&f), &s(&db), "--", "fixed", "30"]);
    assert_eq!(o.status.code(), Some(0), "the fixed release: {}", stderr(&o));
    // The same in a cluster: one node runs the store and its harness, storage faults on its /db.
    for (variant, code) in [("buggy", 1), ("fixed", 0)] {
        let file = d.join(format!("{variant}.toml"));
        std::fs::write(
            &file,
            format!(
                "seed = 1\ntime_limit_ms = 10000\n[faults.storage]\nnodes = [\"db\"]\npaths = [\"/db\"]\n[[node]]\n\
                 name = \"db\"\naddress = \"10.0.0.1\"\nbinary = \"{}\"\nargs = [\"{variant}\", \"12\"]\n",
                s(&db)
            ),
        )
        .unwrap();
        let out = d.join(format!("cluster-{variant}"));
        let o = deja(&["explore", "--quiet", "--runs", "300", "--stop-at-first-bug", "--out", &s(&out), &s(&file)]);
        assert_eq!(o.status.code(), Some(code), "the {variant} release in a cluster: {}", stderr(&o));
        if code == 1 {
            let bug: Value = serde_json::from_str(&std::fs::read_to_string(bug_file(&out, ".json")).unwrap()).unwrap();
            assert_eq!(bug["signature"], "node db exited with 1: LOST acknowledged batch N item N", "{bug}");
        }
    }
    std::fs::remove_dir_all(&d).ok();
    std::fs::remove_dir_all(&f).ok();
}

/// The fail-stop setting travels with the bug: `deja explore --fail-stop always` takes the loss
/// for a fail-stop and finds nothing; `deja replay --fail-stop always` and `deja minimize` judge a
/// found bug with another setting, said; `deja check` of the fixed release against the buggy one
/// records the setting in its capsule and certificate, a wrong patch (the buggy release again)
/// still reproduces, and under `always` the check has no evidence; a capsule judged with
/// another setting than its own, and `--fail-stop` on a cluster file, are refused.
#[test]
fn the_fail_stop_setting_travels_with_explore_replay_minimize_and_check() {
    let db = guest("batchdb");
    let d = dir("fail-stop-setting");
    std::fs::create_dir_all(d.join("wrong")).unwrap();
    for (name, to) in [("batchdb-buggy", d.join("batchdb-buggy")), ("batchdb-fixed", d.join("batchdb-fixed"))] {
        std::fs::copy(&db, &to).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    std::fs::copy(&db, d.join("wrong/batchdb-buggy")).unwrap();
    let explore = |out: &str, extra: &[&str]| {
        let out = s(&d.join(out));
        let mut args = vec!["explore", "--quiet", "--runs", "150", "--stop-at-first-bug", "--out", &out];
        args.extend_from_slice(extra);
        let buggy = s(&d.join("batchdb-buggy"));
        args.extend_from_slice(&[&buggy, "--", "6"]);
        deja(&args)
    };
    let always = explore("always", &["--fail-stop", "always"]);
    assert_eq!(always.status.code(), Some(0), "every loss is a fail-stop under always: {}", stderr(&always));
    let found = explore("auto", &[]);
    assert_eq!(found.status.code(), Some(1), "{}", stderr(&found));
    let bug = bug_file(&d.join("auto"), ".json");
    let r = deja(&["replay", "--fail-stop", "always", &s(&bug)]);
    assert_eq!(r.status.code(), Some(0), "{}", stderr(&r));
    assert!(stderr(&r).contains("judging with --fail-stop always instead of the bug's auto"), "{}", stderr(&r));
    let min = d.join("min.json");
    let m = deja(&["minimize", "--fail-stop", "exit=1", "--out", &s(&min), &s(&bug)]);
    assert_eq!(m.status.code(), Some(3), "a loss that is a stop on purpose does not fail: {}", stderr(&m));
    let m = deja(&["minimize", "--out", &s(&min), &s(&bug)]);
    assert_eq!(m.status.code(), Some(0), "{}", stderr(&m));
    let minimized: Value = serde_json::from_str(&std::fs::read_to_string(&min).unwrap()).unwrap();
    assert_eq!(minimized["signature"], "exit code 1: LOST acknowledged batch N item N", "{minimized}");
    assert_eq!(minimized["input"]["faults"]["fail_stop"], "auto", "{minimized}");

    let check = |candidate: &str, out: &str, extra: &[&str]| {
        let out = s(&d.join(out));
        let (base, candidate) = (s(&d.join("batchdb-buggy")), s(&d.join(candidate)));
        let mut args = vec!["check", "--base", &base, "--candidate", &candidate, "--out", &out];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--", "6"]);
        deja(&args)
    };
    let fixed = check("batchdb-fixed", "check-fixed", &[]);
    assert_eq!(fixed.status.code(), Some(0), "{}", stderr(&fixed));
    assert!(stderr(&fixed).contains("verdict FIXED_FOR_THIS_CAPSULE"), "{}", stderr(&fixed));
    let capsule: Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("check-fixed/capsule.json")).unwrap()).unwrap();
    assert_eq!(capsule["faults"]["fail_stop"], "auto", "{capsule}");
    assert_eq!(capsule["signature"], "exit code 1: LOST acknowledged batch N item N", "{capsule}");
    let cert: Value =
        serde_json::from_str(&std::fs::read_to_string(d.join("check-fixed/certificate.json")).unwrap()).unwrap();
    assert_eq!(cert["fail_stop"], "auto", "{cert}");
    let v = deja(&["verify-certificate", &s(&d.join("check-fixed/certificate.json"))]);
    assert_eq!(v.status.code(), Some(0), "{}", stderr(&v));
    let wrong = check("wrong/batchdb-buggy", "check-wrong", &[]);
    assert_eq!(wrong.status.code(), Some(1), "{}", stderr(&wrong));
    assert!(stderr(&wrong).contains("verdict STILL_REPRODUCES"), "{}", stderr(&wrong));
    let none = check("batchdb-fixed", "check-always", &["--fail-stop", "always"]);
    assert_eq!(none.status.code(), Some(3), "no failure to judge against is no evidence: {}", stderr(&none));
    assert!(stderr(&none).contains("no failure found on the base"), "{}", stderr(&none));
    let capsule_path = s(&d.join("check-fixed/capsule.json"));
    let refused = check("batchdb-fixed", "check-refused", &["--capsule", &capsule_path, "--fail-stop", "always"]);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert!(stderr(&refused).contains("the capsule was frozen with --fail-stop auto"), "{}", stderr(&refused));
    let by_bug = check("batchdb-fixed", "check-bug", &["--bug", &s(&bug)]);
    assert_eq!(by_bug.status.code(), Some(0), "{}", stderr(&by_bug));

    let cluster = root().join("examples/clusters/register-buggy.toml");
    let c = deja(&["explore", "--fail-stop", "never", "--runs", "1", "--out", &s(&d.join("c")), &s(&cluster)]);
    assert_eq!(c.status.code(), Some(2), "{}", stderr(&c));
    assert!(stderr(&c).contains("fail_stop or failure_marker in the node's section"), "{}", stderr(&c));
    std::fs::remove_dir_all(&d).ok();
}
