//! Exploration at scale: several workers, resumption mid-epoch, shards and their merge.
//!
//! Each campaign is its own `deja` process. The two runs that must agree run in different
//! working directories (the same relative `--out`), one pinned to a single host core (both
//! workers share it) and one free on every core, so their threads interleave differently.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::*;
use serde_json::Value;

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("deja-scale-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `deja explore --quiet --out campaign ...` run in `cwd`, pinned to `cores` when given.
fn explore_in(cwd: &Path, cores: Option<&str>, flags: &[&str], program: &str, args: &[&str]) -> Output {
    let mut cmd = match cores {
        Some(c) => {
            let mut cmd = Command::new("taskset");
            cmd.arg("-c").arg(c).arg(deja_bin());
            cmd
        }
        None => Command::new(deja_bin()),
    };
    cmd.current_dir(cwd)
        .args(["explore", "--quiet", "--out", "campaign"])
        .args(flags)
        .arg(program)
        .arg("--")
        .args(args);
    cmd.output().expect("deja runs")
}

fn json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every file of the corpus, by name.
fn corpus(campaign: &Path) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = std::fs::read_dir(campaign.join("corpus"))
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read_to_string(&p).unwrap())
        })
        .collect();
    v.sort();
    v
}

fn bug_ids(r: &Value) -> Vec<String> {
    r["bugs"].as_array().unwrap().iter().map(|b| b["id"].as_str().unwrap().to_string()).collect()
}

fn signatures(r: &Value) -> Vec<String> {
    let mut v: Vec<String> =
        r["bugs"].as_array().unwrap().iter().map(|b| b["signature"].as_str().unwrap().to_string()).collect();
    v.sort();
    v
}

fn available_cores() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

#[test]
fn two_workers_give_the_same_campaign_in_separate_processes_whatever_the_thread_timing() {
    let bank = s(&guest("bank"));
    let (a, b) = (dir("jobs-a"), dir("jobs-b"));
    let flags = ["--runs", "240", "--jobs", "2", "--seed", "2", "--mode", "random"];
    let args = ["--fraud", "buggy", "20"];
    let all = format!("0-{}", available_cores() - 1);
    let oa = explore_in(&a, Some("0"), &flags, &bank, &args);
    let ob = explore_in(&b, Some(&all), &flags, &bank, &args);
    for o in [&oa, &ob] {
        assert!(matches!(o.status.code(), Some(0 | 1)), "{}", stderr(o));
    }
    assert_eq!(oa.status.code(), ob.status.code());
    let (ra, rb) = (campaign_report(&a.join("campaign")), campaign_report(&b.join("campaign")));
    assert_eq!(ra["jobs"], 2);
    assert_eq!(ra["rounds"], 240);
    assert!(ra["corpus_size"].as_u64().unwrap() > 1, "the corpus grew: {ra}");
    assert_eq!(ra, rb, "the same command on two workers gives the same report");
    assert_eq!(corpus(&a.join("campaign")), corpus(&b.join("campaign")), "and the same corpus, file by file");
    for id in bug_ids(&ra) {
        let f = format!("campaign/bug-{id}.json");
        assert_eq!(json(&a.join(&f)), json(&b.join(&f)), "bug file {f}");
    }
    std::fs::remove_dir_all(&a).ok();
    std::fs::remove_dir_all(&b).ok();
}

#[test]
fn two_workers_give_the_same_cluster_campaign_in_separate_processes() {
    // The seed round runs beside a fresh round planned before it.
    // The fixed register: a failure's confirmation replays it on another host core, and on a host
    // whose cores answer CPUID differently that replay differs from a run on the first core.
    guests();
    let cluster = root().join("examples/clusters/register-fixed.toml").to_string_lossy().into_owned();
    let (a, b) = (dir("cluster-jobs-a"), dir("cluster-jobs-b"));
    let flags = ["--runs", "40", "--jobs", "2", "--seed", "1", "--mode", "faults"];
    let all = format!("0-{}", available_cores() - 1);
    let oa = explore_in(&a, Some("0"), &flags, &cluster, &[]);
    let ob = explore_in(&b, Some(&all), &flags, &cluster, &[]);
    for o in [&oa, &ob] {
        assert!(matches!(o.status.code(), Some(0 | 1)), "{}", stderr(o));
    }
    assert_eq!(oa.status.code(), ob.status.code());
    let (ra, rb) = (campaign_report(&a.join("campaign")), campaign_report(&b.join("campaign")));
    assert_eq!(ra["rounds"], 40);
    assert!(ra["corpus_size"].as_u64().unwrap() > 1, "the corpus grew: {ra}");
    assert_eq!(ra, rb, "the same cluster campaign on two workers gives the same report");
    assert_eq!(corpus(&a.join("campaign")), corpus(&b.join("campaign")), "and the same corpus, file by file");
    for id in bug_ids(&ra) {
        let f = format!("campaign/bug-{id}.json");
        assert_eq!(json(&a.join(&f)), json(&b.join(&f)), "bug file {f}");
    }
    // Stopped after the round that ran beside the seed round, and resumed: the same campaign.
    let c = dir("cluster-jobs-c");
    let mut first = flags.to_vec();
    first[1] = "1";
    let o = explore_in(&c, Some("0"), &first, &cluster, &[]);
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", stderr(&o));
    assert_eq!(json(&c.join("campaign/checkpoint.json"))["round"], 1);
    let mut resumed = flags.to_vec();
    resumed.push("--resume");
    let o = explore_in(&c, Some("0"), &resumed, &cluster, &[]);
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", stderr(&o));
    assert_eq!(campaign_report(&c.join("campaign")), ra, "stopping after the first round changes nothing");
    assert_eq!(corpus(&c.join("campaign")), corpus(&a.join("campaign")));
    for d in [a, b, c] {
        std::fs::remove_dir_all(&d).ok();
    }
}

#[test]
fn a_campaign_resumed_mid_epoch_is_the_uninterrupted_one() {
    let kv = s(&guest("kv"));
    let (whole, split) = (dir("epoch-whole"), dir("epoch-split"));
    let args = ["--variant", "buggy", "6"];
    let flags = |runs: &'static str| ["--runs", runs, "--jobs", "2", "--seed", "3", "--mode", "both"];
    let o = explore_in(&whole, None, &flags("90"), &kv, &args);
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", stderr(&o));
    // 37 rounds end inside the third epoch of 16: the rest of that epoch is kept for the resume.
    let o = explore_in(&split, None, &flags("37"), &kv, &args);
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", stderr(&o));
    assert_eq!(json(&split.join("campaign/checkpoint.json"))["round"], 37);
    let mut resumed = flags("90").to_vec();
    resumed.push("--resume");
    let o = explore_in(&split, None, &resumed, &kv, &args);
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", stderr(&o));
    let (w, r) = (campaign_report(&whole.join("campaign")), campaign_report(&split.join("campaign")));
    assert_eq!(w["rounds"], 90);
    assert_eq!(w, r, "stopping and resuming changes nothing");
    assert_eq!(corpus(&whole.join("campaign")), corpus(&split.join("campaign")));
    // Another number of workers is another campaign: refused, with the number to use.
    let mut other = flags("120").to_vec();
    other[3] = "1";
    other.push("--resume");
    let o = explore_in(&split, None, &other, &kv, &args);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(stderr(&o).contains("resume it with --jobs 2"), "{}", stderr(&o));
    std::fs::remove_dir_all(&whole).ok();
    std::fs::remove_dir_all(&split).ok();
}

#[test]
fn shards_explore_disjoint_seeds_and_merge_into_their_union() {
    let kv = s(&guest("kv"));
    let root = dir("shards");
    let args = ["--variant", "buggy", "6"];
    let mut reports = Vec::new();
    for shard in ["0/2", "1/2"] {
        let cwd = root.join(shard.replace('/', "-"));
        std::fs::create_dir_all(&cwd).unwrap();
        let flags = ["--runs", "60", "--jobs", "1", "--seed", "4", "--mode", "both", "--shard", shard];
        let o = explore_in(&cwd, None, &flags, &kv, &args);
        assert!(matches!(o.status.code(), Some(0 | 1)), "{}", stderr(&o));
        let r = campaign_report(&cwd.join("campaign"));
        assert_eq!(r["shard"], shard);
        reports.push(r);
    }
    assert_ne!(reports[0]["timeline"], reports[1]["timeline"], "the shards ran different rounds");
    let merged = root.join("merged");
    let dirs = [root.join("0-2/campaign"), root.join("1-2/campaign")];
    let o = deja(&["merge", "--out", &s(&merged), &s(&dirs[0]), &s(&dirs[1])]);
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", stderr(&o));
    let m = campaign_report(&merged);
    assert_eq!(m["rounds"], 120, "{m}");
    let mut union: Vec<String> = reports.iter().flat_map(signatures).collect();
    union.sort();
    union.dedup();
    assert!(!union.is_empty(), "the shards found the lost write");
    assert_eq!(signatures(&m), union, "the merge keeps every distinct bug once");
    assert_eq!(o.status.code(), Some(1), "bugs were found: exit 1");
    assert_eq!(m["shards"].as_array().unwrap().len(), 2);
    for id in bug_ids(&m) {
        let file = merged.join(format!("bug-{id}.json"));
        let r = deja(&["replay", &s(&file)]);
        assert_eq!(r.status.code(), Some(1), "a merged bug replays: {}", stderr(&r));
    }
    let corpus_sum: u64 = reports.iter().map(|r| r["corpus_size"].as_u64().unwrap()).sum();
    assert!(m["corpus_size"].as_u64().unwrap() <= corpus_sum && m["corpus_size"].as_u64().unwrap() >= 2);
    let text = std::fs::read_to_string(merged.join("report.txt")).unwrap();
    assert!(text.contains("merged from"), "{text}");
    // The merged campaign goes on as one campaign.
    let flags = ["explore", "--quiet", "--out", &s(&merged), "--runs", "140", "--jobs", "1", "--seed", "4"];
    let mut cmd = flags.to_vec();
    cmd.extend(["--mode", "both", "--resume", &kv, "--", "--variant", "buggy", "6"]);
    let o = deja(&cmd);
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", stderr(&o));
    assert_eq!(campaign_report(&merged)["rounds"], 140);
    // One shard twice is not a union.
    let twice = root.join("twice");
    let o = deja(&["merge", "--out", &s(&twice), &s(&dirs[0]), &s(&dirs[0])]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    std::fs::remove_dir_all(&root).ok();
}

#[test]
fn a_checkpoint_of_an_earlier_schema_is_refused_with_how_to_go_on() {
    let kv = s(&guest("kv"));
    let cwd = dir("old-schema");
    std::fs::create_dir_all(cwd.join("campaign")).unwrap();
    std::fs::write(cwd.join("campaign/checkpoint.json"), r#"{"schema":"deja.explore-checkpoint/3","round":12}"#)
        .unwrap();
    let o = explore_in(&cwd, None, &["--runs", "20", "--resume"], &kv, &["--variant", "buggy", "6"]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("the schema check failed") && err.contains("its bug files still replay"), "{err}");
    assert_eq!(
        std::fs::read_to_string(cwd.join("campaign/checkpoint.json")).unwrap(),
        r#"{"schema":"deja.explore-checkpoint/3","round":12}"#,
        "the old checkpoint is left as it was"
    );
    std::fs::remove_dir_all(&cwd).ok();
}

fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

#[test]
fn a_sharded_cluster_campaign_finds_the_split_brain_and_its_merged_bug_replays_and_minimizes() {
    let root = dir("cluster-shards");
    let file = s(&crate::common::root().join("examples/clusters/register-buggy.toml"));
    let mut dirs = Vec::new();
    for shard in ["0/2", "1/2"] {
        let out = root.join(shard.replace('/', "-"));
        let o = deja(&[
            "explore",
            "--quiet",
            "--out",
            &s(&out),
            "--runs",
            "30",
            "--jobs",
            "2",
            "--seed",
            "2",
            "--mode",
            "faults",
            "--shard",
            shard,
            &file,
        ]);
        assert!(matches!(o.status.code(), Some(0 | 1)), "{}", stderr(&o));
        let r = campaign_report(&out);
        assert_eq!(r["rounds"], 30);
        dirs.push(s(&out));
    }
    let merged = root.join("merged");
    let o = deja(&["merge", "--out", &s(&merged), &dirs[0], &dirs[1]]);
    assert_eq!(o.status.code(), Some(1), "the union holds the split brain: {}", stderr(&o));
    let m = campaign_report(&merged);
    assert!(signatures(&m).iter().any(|sig| sig.contains("acknowledged writes survive")), "{:?}", signatures(&m));
    let id = bug_ids(&m)[0].clone();
    let bug = merged.join(format!("bug-{id}.json"));
    let b = json(&bug);
    assert_eq!(b["forked_from"]["at"], "setup", "forked rounds say where they were forked: {b}");
    let r = deja(&["replay", &s(&bug)]);
    assert_eq!(r.status.code(), Some(1), "{}", stderr(&r));
    assert!(stderr(&r).contains(&b["digest"].as_str().unwrap()[..16]), "the replay is exact: {}", stderr(&r));
    let min = root.join("min.json");
    let o = deja(&["minimize", "--out", &s(&min), &s(&bug)]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let r = deja(&["replay", &s(&min)]);
    assert_eq!(r.status.code(), Some(1), "the minimized bug fails the same way: {}", stderr(&r));
    std::fs::remove_dir_all(&root).ok();
}

#[test]
fn merged_shards_keep_the_inputs_their_bugs_replay_with() {
    // store-buggy is linked against the host's libc: each shard keeps its loader and libraries
    // under inputs/ by BLAKE3, and the merge brings them along with the bugs.
    let store = s(&guest("store-buggy"));
    let root = dir("merge-inputs");
    let mut dirs = Vec::new();
    for shard in ["0/2", "1/2"] {
        let out = root.join(shard.replace('/', "-"));
        let o = deja(&[
            "explore",
            "--quiet",
            "--out",
            &s(&out),
            "--runs",
            "20",
            "--jobs",
            "1",
            "--mode",
            "faults",
            "--shard",
            shard,
            &store,
        ]);
        assert!(matches!(o.status.code(), Some(0 | 1)), "{}", stderr(&o));
        dirs.push(out);
    }
    let merged = root.join("merged");
    let o = deja(&["merge", "--out", &s(&merged), &s(&dirs[0]), &s(&dirs[1])]);
    assert_eq!(o.status.code(), Some(1), "the shards found the torn record: {}", stderr(&o));
    let libc = blake3::hash(&std::fs::read("/lib/x86_64-linux-gnu/libc.so.6").unwrap()).to_hex().to_string();
    let kept = merged.join("inputs").join(&libc);
    assert_eq!(blake3::hash(&std::fs::read(&kept).unwrap()).to_hex().to_string(), libc);
    let files = |d: &Path| {
        let mut v: Vec<String> = std::fs::read_dir(d.join("inputs"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    };
    assert_eq!(files(&merged), files(&dirs[0]), "every input, once");
    let bug = bug_file(&merged);
    let r = deja(&["replay", &s(&bug)]);
    assert_eq!(r.status.code(), Some(1), "a merged bug replays: {}", stderr(&r));
    std::fs::remove_dir_all(&root).ok();
}
