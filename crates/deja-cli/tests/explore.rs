//! `deja explore`, `deja replay` and `deja minimize` end to end.

use crate::common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

fn out_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("deja-explore-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn explore(out: &Path, extra: &[&str], program: &str, args: &[&str]) -> std::process::Output {
    let mut cmd = vec!["explore", "--quiet", "--out", out.to_str().unwrap()];
    cmd.extend_from_slice(extra);
    cmd.push(program);
    cmd.push("--");
    cmd.extend_from_slice(args);
    deja(&cmd)
}

fn report(out: &Path) -> serde_json::Value {
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    v["campaign"].clone()
}

#[test]
fn exploring_crash_points_finds_the_lost_write_and_the_files_say_so() {
    let kv = guest("kv").to_string_lossy().into_owned();
    let out = out_dir("kv-buggy");
    let o = explore(&out, &["--runs", "40", "--mode", "faults"], &kv, &["--variant", "buggy", "6"]);
    assert_eq!(o.status.code(), Some(1), "bugs found exit 1: {}", stderr(&o));
    for f in ["checkpoint.json", "report.txt", "report.json", "report.html", "corpus/entry-000000.json"] {
        assert!(out.join(f).exists(), "{f} written");
    }
    let bugs = bug_files(&out);
    assert_eq!(bugs.len(), 1, "deduplicated by signature: {bugs:?}");
    let bug: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&bugs[0]).unwrap()).unwrap();
    assert!(bug["signature"].as_str().unwrap().contains("every acknowledged put survives a crash"));
    let crashes = |f: &serde_json::Value| {
        f["crash_after_durable_write"].is_u64()
            || f["crash_before_durable_write"].is_u64()
            || f["crash_at_exit"] == true
    };
    assert!(crashes(&bug["input"]["faults"]), "{}", bug["input"]);
    assert_eq!(bug["program_blake3"].as_str().unwrap().len(), 64);
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("<title>1 bug found"), "the page says so");
    assert!(
        html.contains("<script id=\"deja-data\"") && html.contains(bug["id"].as_str().unwrap()),
        "and embeds the campaign its views draw (tests/serve.rs draws it in Chromium)"
    );
    assert_eq!(report(&out)["rounds"], 40);

    // Replay reproduces it exactly.
    let r = deja(&["replay", bugs[0].to_str().unwrap()]);
    assert_eq!(r.status.code(), Some(1), "{}", stderr(&r));
    assert!(stderr(&r).contains("reproduced bug"), "{}", stderr(&r));
    assert!(stderr(&r).contains(bug["digest"].as_str().unwrap()), "same digest");
    let traced = deja(&["replay", "--trace", bugs[0].to_str().unwrap()]);
    assert!(stderr(&traced).contains("last "), "{}", stderr(&traced));

    // The same input against the fixed program does not fail: replay says "not reproduced".
    let mut fixed_bug = bug.clone();
    fixed_bug["argv"][2] = "fixed".into();
    let fixed_path = out.join("fixed.json");
    std::fs::write(&fixed_path, serde_json::to_string(&fixed_bug).unwrap()).unwrap();
    let r = deja(&["replay", fixed_path.to_str().unwrap()]);
    assert_eq!(r.status.code(), Some(126), "an edited bug file fails its seal check: {}", stderr(&r));
    assert!(stderr(&r).contains("fixed.json: the seal check failed"), "{}", stderr(&r));
    let r = deja(&["reseal", fixed_path.to_str().unwrap()]);
    assert_eq!(r.status.code(), Some(0), "{}", stderr(&r));
    let r = deja(&["replay", fixed_path.to_str().unwrap()]);
    assert_eq!(r.status.code(), Some(0), "{}", stderr(&r));
    // Another binary than the bug's is incomplete evidence.
    let r = deja(&["replay", "--program", &guest("hello").to_string_lossy(), bugs[0].to_str().unwrap()]);
    assert_eq!(r.status.code(), Some(3), "{}", stderr(&r));

    // Minimization keeps only what the failure needs and verifies it.
    let m = deja(&["minimize", bugs[0].to_str().unwrap()]);
    assert_eq!(m.status.code(), Some(0), "{}", stderr(&m));
    let min_path = bugs[0].with_extension("min.json");
    let min: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&min_path).unwrap()).unwrap();
    assert_eq!(min["signature"], bug["signature"]);
    assert!(crashes(&min["input"]["faults"]), "the crash is what the bug needs: {}", min["input"]);
    assert!(min["input"]["overrides"].as_object().unwrap().is_empty());
    let r = deja(&["replay", min_path.to_str().unwrap()]);
    assert_eq!(r.status.code(), Some(1));
    std::fs::remove_dir_all(&out).ok();
}

#[test]
fn the_fixed_store_survives_exploration() {
    let kv = guest("kv").to_string_lossy().into_owned();
    let out = out_dir("kv-fixed");
    let o = explore(&out, &["--runs", "40", "--mode", "faults", "--profile"], &kv, &["--variant", "fixed", "6"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(bug_files(&out).is_empty());
    // --profile: where the campaign's time went, with the store's own syscalls by kind.
    let err = stderr(&o);
    let line = err.lines().find(|l| l.starts_with("deja: profile: ") && l.contains("KVM_RUN")).expect(&err);
    let share = |what: &str| -> f64 {
        let at = line.find(what).unwrap_or_else(|| panic!("no {what} in {line}")) + what.len();
        line[at..].trim_start().split('%').next().unwrap().parse().unwrap_or_else(|e| panic!("{e}: {line}"))
    };
    let (kvm, sys, rest) = (share("KVM_RUN"), share("syscall handling"), share("the cluster driver)"));
    assert!(kvm > 0.0 && sys > 0.0 && kvm + sys + rest <= 100.5, "{line}");
    let kinds = err.lines().find(|l| l.starts_with("deja: profile: syscall handling by kind: ")).expect(&err);
    assert!(kinds.contains("fsync") || kinds.contains("fdatasync") || kinds.contains("write"), "{kinds}");
    std::fs::remove_dir_all(&out).ok();
}

#[test]
fn random_choices_reach_a_rare_bug_and_campaigns_are_deterministic() {
    let bank = guest("bank").to_string_lossy().into_owned();
    let a = out_dir("bank-a");
    let b = out_dir("bank-b");
    let args = ["--rare-bug", "5"];
    let flags = ["--runs", "150", "--seed", "4", "--mode", "random"];
    let oa = explore(&a, &flags, &bank, &args);
    let ob = explore(&b, &flags, &bank, &args);
    assert_eq!(ob.status.code(), Some(1), "{}", stderr(&ob));
    assert_eq!(oa.status.code(), Some(1), "{}", stderr(&oa));
    let (ra, rb) = (report(&a), report(&b));
    let strip = |v: &serde_json::Value| -> Vec<(String, String, u64)> {
        v["bugs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| {
                (
                    b["id"].as_str().unwrap().into(),
                    b["signature"].as_str().unwrap().into(),
                    b["first_round"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    assert_eq!(strip(&ra), strip(&rb), "the same seed finds the same bugs in the same rounds");
    assert_eq!(ra["timeline"], rb["timeline"]);
    assert!(ra["bugs"][0]["signature"].as_str().unwrap().contains("money is neither created nor destroyed"));
    // The program run alone with that seed does not fail: exploration found it.
    let (_, plain) = run_json(&["--seed", "4", &bank, "--", "--rare-bug", "5"]);
    assert_eq!(plain["assertion_failed"], false);
    std::fs::remove_dir_all(&a).ok();
    std::fs::remove_dir_all(&b).ok();
}

#[test]
fn guidance_climbs_to_the_deep_bank_bug_and_the_fixed_bank_holds() {
    let bank = guest("bank").to_string_lossy().into_owned();
    let out = out_dir("fraud-buggy");
    let flags = ["--runs", "300", "--stop-at-first-bug", "--seed", "5", "--mode", "random"];
    let o = explore(&out, &flags, &bank, &["--fraud", "buggy", "20"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let r = report(&out);
    assert!(r["bugs"][0]["signature"].as_str().unwrap().contains("money is neither created nor destroyed"));
    assert!(r["rounds"].as_u64().unwrap() < 300, "it stopped at the bug: {}", r["rounds"]);
    // The corpus climbed: entries kept for new behaviour remember where it showed, and their
    // children keep the course up to there and redraw the rest.
    let entries: Vec<serde_json::Value> = std::fs::read_dir(out.join("corpus"))
        .unwrap()
        .map(|e| serde_json::from_str(&std::fs::read_to_string(e.unwrap().path()).unwrap()).unwrap())
        .collect();
    assert!(entries.iter().any(|e| e["focus"].is_u64() && e["input"]["reseed"].is_u64()), "{entries:?}");
    let bugs = bug_files(&out);
    let r = deja(&["replay", bugs[0].to_str().unwrap()]);
    assert_eq!(r.status.code(), Some(1), "{}", stderr(&r));

    let fixed = out_dir("fraud-fixed");
    let flags = ["--runs", "300", "--seed", "5", "--mode", "random"];
    let o = explore(&fixed, &flags, &bank, &["--fraud", "fixed", "20"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let lines = report(&fixed)["assertions"].as_array().unwrap().clone();
    let status = |m: &str| lines.iter().find(|a| a["message"] == m).map(|a| a["status"].clone());
    assert_eq!(status("held money is released when an account thaws"), Some("satisfied".into()), "{lines:?}");
    std::fs::remove_dir_all(&out).ok();
    std::fs::remove_dir_all(&fixed).ok();
}

#[test]
fn a_resumed_campaign_continues_where_it_stopped() {
    let bank = guest("bank").to_string_lossy().into_owned();
    let whole = out_dir("resume-whole");
    let split = out_dir("resume-split");
    let args = ["--rare-bug", "5"];
    // One worker: every round learns from all before it (tests/scale.rs resumes on two).
    explore(&whole, &["--runs", "60", "--jobs", "1", "--seed", "1", "--mode", "random"], &bank, &args);
    explore(&split, &["--runs", "5", "--jobs", "1", "--seed", "1", "--mode", "random"], &bank, &args);
    let again = explore(&split, &["--runs", "60", "--jobs", "1", "--seed", "1", "--mode", "random"], &bank, &args);
    assert_eq!(again.status.code(), Some(3), "an existing campaign is not overwritten: {}", stderr(&again));
    assert!(report(&split)["bugs"].as_array().unwrap().is_empty(), "the bug comes after the split");
    explore(&split, &["--runs", "60", "--jobs", "1", "--seed", "1", "--mode", "random", "--resume"], &bank, &args);
    let (w, s) = (report(&whole), report(&split));
    assert_eq!(s["rounds"], 60);
    assert_eq!(w["bugs"].as_array().unwrap().len(), 1, "{w}");
    assert_eq!(w["timeline"], s["timeline"], "resuming loses nothing and changes nothing");
    assert_eq!(w["bugs"][0]["first_round"], s["bugs"][0]["first_round"]);
    assert_eq!(w["bugs"][0]["id"], s["bugs"][0]["id"]);
    std::fs::remove_dir_all(&whole).ok();
    std::fs::remove_dir_all(&split).ok();
}

#[test]
fn the_frontier_tries_every_single_fault_once_and_a_resumed_campaign_takes_it_up() {
    // The fixed page store holds under every fault: the campaign goes through the whole
    // frontier (each crash point in a state of its own, EIO and ENOSPC on each operation, each
    // failed sync followed by crashes) and finds nothing; split and resumed half-way through it,
    // it is the same campaign.
    let store = guest("pagestore-fixed").to_string_lossy().into_owned();
    let (whole, split) = (out_dir("frontier-whole"), out_dir("frontier-split"));
    let flags = |runs: &'static str| ["--runs", runs, "--jobs", "1", "--seed", "2", "--mode", "faults"];
    let o = explore(&whole, &flags("240"), &store, &["6"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let w = report(&whole);
    let f = |k: &str| w["frontier"][k].as_u64().unwrap();
    let (tried, total, passed_over, followed) = (f("tried"), f("total"), f("passed_over"), f("followed"));
    // Every plan was tried or passed over: the store goes on past each failed sync (it retries),
    // so those syncs were followed with crashes in the rounds that showed it, and the frontier's
    // own compositions of them were passed over.
    assert!(total > 60 && tried + passed_over == total && passed_over > 0 && followed > 0, "{}", w["frontier"]);
    assert!(stderr(&o).contains(&format!("frontier: {tried} of {total} faults tried")), "{}", stderr(&o));
    let said = format!("failed syncs: {followed} rounds crashed after one the program went on past, {passed_over} compositions passed over");
    assert!(stderr(&o).contains(&said), "{}", stderr(&o));
    for kind in ["crash", "eio", "enospc"] {
        assert!(w["faults"][kind].as_u64().unwrap_or(0) > 0, "{kind}: {}", w["faults"]);
    }
    explore(&split, &flags("50"), &store, &["6"]);
    let part = report(&split);
    assert!(part["frontier"]["tried"].as_u64().unwrap() < total, "{}", part["frontier"]);
    let mut resume = flags("240").to_vec();
    resume.push("--resume");
    explore(&split, &resume, &store, &["6"]);
    let s = report(&split);
    assert_eq!((&s["frontier"], &s["timeline"], &s["faults"]), (&w["frontier"], &w["timeline"], &w["faults"]));
    std::fs::remove_dir_all(&whole).ok();
    std::fs::remove_dir_all(&split).ok();
}

#[test]
fn the_random_baseline_runs_beside_a_campaign() {
    let kv = guest("kv").to_string_lossy().into_owned();
    let out = out_dir("baseline");
    let o = explore(&out, &["--runs", "20", "--mode", "faults", "--baseline"], &kv, &["--variant", "buggy", "4"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let r = report(&out);
    assert_eq!(r["baseline"]["strategy"], "random");
    assert_eq!(r["baseline"]["rounds"], 20);
    assert!(stderr(&o).contains("random baseline on the same budget"));
    let text = std::fs::read_to_string(out.join("report.txt")).unwrap();
    assert!(text.contains("random baseline"), "{text}");
    std::fs::remove_dir_all(&out).ok();
}

#[test]
fn explore_needs_a_budget() {
    let o = deja(&["explore", &guest("hello").to_string_lossy()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--runs N or --budget"), "{}", stderr(&o));
}

#[test]
fn a_campaign_killed_mid_way_resumes_without_losing_anything() {
    let kv = guest("kv").to_string_lossy().into_owned();
    let whole = out_dir("kill-whole");
    let killed = out_dir("kill-killed");
    let flags = ["--runs", "400", "--seed", "4", "--mode", "both"];
    let args = ["--variant", "buggy", "6"];
    explore(&whole, &flags, &kv, &args);
    // Start the same campaign and SIGKILL it once it has a checkpoint with a bug in it.
    let mut child = Command::new(deja_bin())
        .args(["explore", "--quiet", "--out", killed.to_str().unwrap()])
        .args(flags)
        .arg(&kv)
        .arg("--")
        .args(args)
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let has_bug =
            std::fs::read_to_string(killed.join("checkpoint.json")).is_ok_and(|t| t.contains("\"first_round\""));
        if has_bug || std::time::Instant::now() > deadline {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.kill().unwrap();
    let status = child.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(9), "the explorer was killed (SIGKILL) before it finished: {status:?}");
    let before: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(killed.join("checkpoint.json")).unwrap()).unwrap();
    assert!(before["round"].as_u64().unwrap() < 400, "killed mid-campaign");
    let resumed = explore(&killed, &["--runs", "400", "--seed", "4", "--mode", "both", "--resume"], &kv, &args);
    assert_eq!(resumed.status.code(), Some(1), "{}", stderr(&resumed));
    let (w, k) = (report(&whole), report(&killed));
    assert_eq!(w["rounds"], k["rounds"]);
    assert_eq!(w["corpus_size"], k["corpus_size"], "no corpus entry lost");
    assert_eq!(w["timeline"], k["timeline"]);
    let ids = |v: &serde_json::Value| -> Vec<String> {
        v["bugs"].as_array().unwrap().iter().map(|b| b["id"].as_str().unwrap().to_string()).collect()
    };
    assert_eq!(ids(&w), ids(&k), "no bug lost");
    std::fs::remove_dir_all(&whole).ok();
    std::fs::remove_dir_all(&killed).ok();
}

#[test]
fn a_bug_of_a_dynamically_linked_program_replays_with_its_inputs_kept_by_hash() {
    // grep as Debian ships it, failing on a declared file: the bug file records the file's and
    // the host libraries' BLAKE3, and the campaign keeps each of them under inputs/.
    let out = out_dir("dynamic-inputs");
    std::fs::create_dir_all(&out).unwrap();
    let data = out.join("in.txt");
    std::fs::write(&data, "hello\n").unwrap();
    let decl = format!("{}:/in.txt", data.display());
    let o = explore(&out, &["--runs", "3", "--file", &decl], "/bin/grep", &["-q", "nomatch", "/in.txt"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let bug = bug_file(&out);
    let recorded = deja_explore::BugFile::read(&bug).unwrap().files;
    let want = blake3::hash(b"hello\n").to_hex().to_string();
    assert_eq!(recorded["/in.txt"], want);
    assert!(recorded.keys().any(|k| k.ends_with("/libc.so.6")), "{recorded:?}");
    assert_eq!(std::fs::read(out.join("inputs").join(&want)).unwrap(), b"hello\n");
    let bug = bug.to_str().unwrap();
    // The replay finds the libraries on the host and the declared file by its hash, even with
    // the file on the host changed and none given.
    std::fs::write(&data, "changed\n").unwrap();
    let r = deja(&["replay", bug]);
    assert_eq!(r.status.code(), Some(1), "{}", stderr(&r));
    assert!(stderr(&r).contains("reproduced bug"), "{}", stderr(&r));
    // Without the kept copy, the replay refuses, naming the file and both hashes.
    std::fs::remove_dir_all(out.join("inputs")).unwrap();
    let r = deja(&["replay", "--file", &decl, bug]);
    assert_eq!(r.status.code(), Some(3), "{}", stderr(&r));
    let got = blake3::hash(b"changed\n").to_hex().to_string();
    let err = stderr(&r);
    assert!(
        err.contains(&format!("the declared file /in.txt has BLAKE3 {got} here; the bug needs BLAKE3 {want}")),
        "{err}"
    );
    let r = deja(&["replay", bug]);
    assert_eq!(r.status.code(), Some(3), "{}", stderr(&r));
    assert!(stderr(&r).contains("the declared file /in.txt is missing"), "{}", stderr(&r));
    std::fs::remove_dir_all(&out).ok();
}
