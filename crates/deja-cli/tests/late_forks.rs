//! Later forks (`deja explore --late-forks N`): a cluster campaign whose rounds run from forks
//! taken down their parents' courses is the same campaign as one whose rounds all run from the
//! fork point — same corpus, coverage, blocks and bugs — in processes on different host cores,
//! with one worker and with two; and the rounds that ran from a later fork are counted.

use std::path::{Path, PathBuf};

use crate::common::*;

fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("deja-late-{name}-{}", std::process::id()));
    std::fs::remove_dir_all(&d).ok();
    d
}

/// `(kept, from one, forked rounds)` of the `--profile` line on later forks.
fn late_counts(err: &str) -> (u64, u64, u64) {
    let line = err.lines().find(|l| l.starts_with("deja: profile: later forks: ")).expect("a later-forks line");
    let words: Vec<&str> = line.split_whitespace().collect();
    let num = |w: &str| w.trim_start_matches('(').parse::<u64>().unwrap_or_else(|_| panic!("{w} in {line}"));
    let kept = num(words[4]);
    let forked = words.iter().position(|w| *w == "forked").expect("forked");
    (kept, num(words[forked - 3]), num(words[forked - 1]))
}

fn same_campaign(file: &str, runs: &str, jobs: &str, bug: bool) {
    let cores = host_cores();
    guests();
    let file = s(&root().join("examples/clusters").join(file));
    let (a, b) = (dir(&format!("off-{jobs}")), dir(&format!("on-{jobs}")));
    let args = |out: &Path, late: &str| {
        [
            "explore",
            "--runs",
            runs,
            "--mode",
            "faults",
            "--seed",
            "5",
            "--jobs",
            jobs,
            "--quiet",
            "--profile",
            "--late-forks",
            late,
            "--out",
            &s(out),
            &file,
        ]
        .iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
    };
    let on = |core: u32, a: Vec<String>| deja_on(core, &[], &a.iter().map(String::as_str).collect::<Vec<_>>());
    let code = Some(if bug { 1 } else { 0 });
    let off = on(cores[0], args(&a, "0"));
    assert_eq!(off.status.code(), code, "{}", stderr(&off));
    let (kept, from, forked) = late_counts(&stderr(&off));
    assert_eq!((kept, from), (0, 0), "no later forks with --late-forks 0");
    assert!(forked > 0, "{}", stderr(&off));
    let late = on(*cores.last().unwrap(), args(&b, "8"));
    assert_eq!(late.status.code(), code, "{}", stderr(&late));
    let (kept, from, forked) = late_counts(&stderr(&late));
    assert!(kept > 0 && from > 0 && from < forked, "later forks kept {kept}, rounds from one {from} of {forked}");
    let strip = |v: serde_json::Value, dir: &str| {
        serde_json::from_str::<serde_json::Value>(&v.to_string().replace(dir, "OUT")).unwrap()
    };
    assert_eq!(
        strip(campaign_report(&a), &s(&a)),
        strip(campaign_report(&b), &s(&b)),
        "same corpus, coverage and bugs"
    );
    assert_eq!(tree(&a.join("corpus")), tree(&b.join("corpus")), "the same corpus entries");
    if bug {
        let r = deja(&["replay", &s(&bug_file(&b))]);
        assert_eq!(r.status.code(), Some(1), "the bug found from a later fork replays from scratch: {}", stderr(&r));
    }
    for d in [a, b] {
        std::fs::remove_dir_all(d).ok();
    }
}

#[test]
fn a_register_campaign_is_the_same_with_later_forks_on_another_core() {
    same_campaign("register-fixed.toml", "40", "1", false);
}

#[test]
fn a_walkv_campaign_with_kills_finds_the_same_bug_with_later_forks_on_two_workers() {
    same_campaign("walkv-buggy-kills.toml", "48", "2", true);
}
