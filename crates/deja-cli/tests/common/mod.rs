//! Shared helpers of the end-to-end tests: build the example guests once, run `deja`.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The repository root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("repository root")
}

/// Builds the guests (once per test binary; cargo makes concurrent builds wait) and returns the
/// directory of the static-PIE ones.
pub fn guests() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            xtask("guests");
            root().join("target/guests")
        })
        .clone()
}

/// Runs `cargo xtask TASK` in the checkout (cargo makes concurrent builds wait); panics unless it
/// succeeds, and returns what it printed on stdout.
pub fn xtask(task: &str) -> String {
    let out = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .current_dir(root())
        .args(["xtask", task])
        .output()
        .unwrap_or_else(|e| panic!("cargo xtask {task}: {e}"));
    assert!(out.status.success(), "cargo xtask {task} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Path of one coverage-instrumented example guest.
pub fn cov_guest(name: &str) -> PathBuf {
    guests().join("cov").join(name)
}

/// Path of one example guest.
pub fn guest(name: &str) -> PathBuf {
    guests().join(name)
}

/// The `deja` binary under test.
pub fn deja_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_deja"))
}

/// Runs `deja` with `args`.
pub fn deja(args: &[&str]) -> Output {
    Command::new(deja_bin()).args(args).output().expect("start deja")
}

/// Runs `deja run <args>` with the JSON summary and returns (output, summary).
pub fn run_json(args: &[&str]) -> (Output, serde_json::Value) {
    let mut full = vec!["run", "--json", "--no-probe"];
    full.extend_from_slice(args);
    let out = deja(&full);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = stderr.lines().last().unwrap_or_default().to_string();
    let v: serde_json::Value =
        serde_json::from_str(&last).unwrap_or_else(|e| panic!("no JSON summary ({e}) in:\n{stderr}"));
    (out, v)
}

/// stdout as text.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// stderr as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The bug files of a campaign directory, sorted, without minimized ones (`bug-<id>.json`).
pub fn bug_files(out: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let n = p.file_name().unwrap().to_string_lossy().into_owned();
            n.starts_with("bug-") && n.ends_with(".json") && !n.ends_with(".min.json")
        })
        .collect();
    v.sort();
    v
}

/// The first bug file of a campaign directory.
pub fn bug_file(out: &Path) -> PathBuf {
    bug_files(out).into_iter().next().expect("a bug file")
}

/// A report as written, or a checkpoint without its seal once the seal holds: the seal covers
/// the host times too, so it differs exactly as they do, and the content it seals is compared.
pub fn unsealed(bytes: &[u8]) -> serde_json::Value {
    let mut v: serde_json::Value = serde_json::from_slice(bytes).unwrap();
    if v.get("seal").is_some() {
        deja_explore::campaign::CHECKPOINT_SCHEMA.check("checkpoint.json", bytes).expect("the checkpoint's seal holds");
        v.as_object_mut().unwrap().remove("seal");
    }
    v
}

/// `v` with every host-timed figure (each `wall_seconds`: the campaign's and its wall
/// timeline's) set to zero, and how many there were. Nothing else in a report or checkpoint
/// depends on the host's timing.
pub fn zero_wall_time(v: &mut serde_json::Value) -> usize {
    match v {
        serde_json::Value::Object(m) => m
            .iter_mut()
            .map(|(k, x)| match k.as_str() {
                "wall_seconds" if x.is_number() => {
                    *x = serde_json::Value::from(0.0);
                    1
                }
                _ => zero_wall_time(x),
            })
            .sum(),
        serde_json::Value::Array(a) => a.iter_mut().map(zero_wall_time).sum(),
        _ => 0,
    }
}

/// A report or checkpoint (as written, its seal checked and removed) with its host-timed
/// figures set to zero; at least the campaign's own must be there.
pub fn without_wall_time(bytes: &[u8]) -> serde_json::Value {
    let mut v = unsealed(bytes);
    let obj = if v.get("campaign").is_some() { &mut v["campaign"] } else { &mut v };
    assert!(obj.get("wall_seconds").is_some_and(|w| w.is_number()), "the wall time is where the schema says");
    zero_wall_time(obj);
    v
}

/// The campaign of `dir/report.json`, host-timed figures set to zero.
pub fn campaign_report(dir: &Path) -> serde_json::Value {
    let bytes = std::fs::read(dir.join("report.json")).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    without_wall_time(&bytes)["campaign"].clone()
}

/// Every file under `dir`, by its path relative to `dir`.
pub fn tree(dir: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p);
            } else {
                out.insert(p.strip_prefix(dir).unwrap().display().to_string(), std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

/// The host cores this test process may use (its affinity mask).
pub fn host_cores() -> Vec<u32> {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let list = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).expect("Cpus_allowed_list").trim();
    let mut out = Vec::new();
    for part in list.split(',') {
        match part.split_once('-') {
            Some((a, b)) => out.extend(a.parse::<u32>().unwrap()..=b.parse::<u32>().unwrap()),
            None => out.push(part.parse().unwrap()),
        }
    }
    out
}

/// `deja <args>` in a fresh process pinned to host core `core` with `taskset`, with `env` set.
pub fn deja_on(core: u32, env: &[(&str, &str)], args: &[&str]) -> Output {
    Command::new("taskset")
        .args(["-c", &core.to_string()])
        .arg(deja_bin())
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("taskset (util-linux) runs deja")
}

/// The JSON summary on the last line of `o`'s stderr.
pub fn summary(o: &Output) -> serde_json::Value {
    let err = stderr(o);
    serde_json::from_str(err.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("no JSON summary ({e}) in:\n{err}"))
}

/// `deja doctor --json` with `env` set.
pub fn doctor_json(env: &[(&str, &str)]) -> serde_json::Value {
    let out =
        Command::new(deja_bin()).args(["doctor", "--json"]).envs(env.iter().copied()).output().expect("deja doctor");
    serde_json::from_slice(&out.stdout).expect("doctor --json")
}

/// Debian's Chromium, which `.ci/run` installs.
pub const CHROMIUM: &str = "/usr/bin/chromium";

/// Fails the test unless every one of `paths` exists: the host programs it runs, from Debian's
/// `packages` (which `.ci/run` installs). A test of a real program never passes without it.
pub fn needs(paths: &[&str], packages: &str) {
    let missing = || -> Vec<&str> { paths.iter().copied().filter(|p| !Path::new(p).exists()).collect() };
    if !missing().is_empty() {
        // A fresh machine: the test provisions what it runs (`cargo xtask provision`).
        let out = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
            .current_dir(root())
            .args(["xtask", "provision"])
            .args(packages.split_whitespace())
            .output()
            .expect("cargo xtask provision");
        assert!(out.status.success(), "provisioning {packages} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let left = missing();
    assert!(left.is_empty(), "missing {left:?} after apt-get install {packages}");
}

/// The page in headless Chromium once its scripts ran: the DOM.
pub fn chromium_dom(url: &str) -> String {
    // The live view's tests draw the pages in headless Chromium.
    needs(&[CHROMIUM], "chromium");
    static PROFILES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let profile = std::env::temp_dir().join(format!(
        "deja-chromium-{}-{}",
        std::process::id(),
        PROFILES.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let out = Command::new(CHROMIUM)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run"])
        .args(["--disable-background-networking", "--disable-component-update", "--disable-sync"])
        .arg(format!("--user-data-dir={}", profile.display()))
        // Virtual time stands still while the event stream is open, so this is the page after `done`.
        .args(["--virtual-time-budget=5000", "--dump-dom", url])
        .stderr(std::process::Stdio::null())
        .output()
        .expect("run chromium");
    std::fs::remove_dir_all(&profile).ok();
    assert!(out.status.success(), "chromium failed on {url}: {:?}", out.status);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The assertion site with `message` in a run summary's catalog.
pub fn assertion_site<'a>(v: &'a serde_json::Value, message: &str) -> &'a serde_json::Value {
    v["assertions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["message"] == message)
        .unwrap_or_else(|| panic!("{message} not in the catalog: {v}"))
}

/// A cluster file in `target/test-clusters`, with `GUESTS` in `text` naming the guests'
/// directory by absolute path.
pub fn temp_cluster(name: &str, text: &str) -> PathBuf {
    let dir = root().join("target/test-clusters");
    std::fs::create_dir_all(&dir).unwrap();
    let g = guests();
    let p = dir.join(format!("{name}.toml"));
    std::fs::write(&p, text.replace("GUESTS", &g.to_string_lossy())).unwrap();
    p
}

/// `deja explore --quiet --stop-at-first-bug --jobs 1 --seed 1 --runs RUNS --out OUT` with
/// `flags` before `subject` (a program and its arguments, or a cluster file): one worker, so
/// the campaign is the same on every run of the test.
pub fn explore_to_first_bug(out: &Path, runs: u32, flags: &[&str], subject: &[&str]) -> Output {
    let (runs, out) = (runs.to_string(), out.to_string_lossy().into_owned());
    let mut args = vec!["explore", "--quiet", "--stop-at-first-bug", "--jobs", "1", "--seed", "1"];
    args.extend(["--runs", &runs, "--out", &out]);
    args.extend(flags);
    args.extend(subject);
    deja(&args)
}
