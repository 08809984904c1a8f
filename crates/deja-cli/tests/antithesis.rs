//! Programs instrumented with the published Antithesis SDKs, end to end: `votes` is built with
//! the `antithesis_sdk` crate and nothing of deja's, and its messages reach deja through
//! `ANTITHESIS_SDK_LOCAL_OUTPUT`.

use crate::common::*;

fn votes() -> String {
    guest("votes").to_string_lossy().into_owned()
}

#[test]
fn the_sdks_assertions_setup_and_events_join_the_report() {
    let (out, v) = run_json(&[&votes()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "votes 3 of 3 voters\n");
    let expect = [
        ("never more votes than voters", "always", "passed"),
        ("the last voter votes", "sometimes", "satisfied"),
        ("nobody votes", "sometimes", "unsatisfied"),
        ("the tally ends", "reachable", "reached"),
        ("the voters outnumber the votes", "always", "passed"),
        // Never reached: listed from the SDK's catalog entry.
        ("a vote is refused", "unreachable", "passed"),
    ];
    assert_eq!(v["assertions"].as_array().unwrap().len(), expect.len(), "{v}");
    for (message, kind, status) in expect {
        let a = assertion_site(&v, message);
        assert_eq!((a["kind"].as_str(), a["status"].as_str()), (Some(kind), Some(status)), "{a}");
        assert_eq!(a["file"], "votes/src/bin/votes.rs", "{a}");
        assert!(a["line"].as_u64().unwrap() > 10, "{a}");
    }
    assert_eq!(assertion_site(&v, "a vote is refused")["hits"], 0);
    assert_eq!(v["assertion_failed"], false);
    assert_eq!(v["setup_complete"]["details"], r#"{"voters":3}"#);
    // The tally's event and the numeric assertion's guidepost; the SDK's own version message
    // is not an event.
    assert_eq!(v["events"], 2, "{v}");
    assert_eq!(v["protocol_errors"], 0);
}

#[test]
fn a_failing_always_from_the_sdk_is_a_bug_that_replays_exactly_on_another_core() {
    let cores = host_cores();
    let run = |core: u32| deja_on(core, &[], &["run", "--json", "--no-probe", &votes(), "--", "--buggy"]);
    let first = run(cores[0]);
    assert_eq!(first.status.code(), Some(123), "{}", stderr(&first));
    let v = summary(&first);
    let a = assertion_site(&v, "never more votes than voters");
    assert_eq!((a["status"].as_str(), a["bug"].as_bool()), (Some("failed"), Some(true)), "{a}");
    assert_eq!(a["first_failure"]["details"], r#"{"voters":3,"votes":4}"#);
    assert_eq!(assertion_site(&v, "the last voter votes")["status"], "satisfied");
    let again = summary(&run(*cores.last().unwrap()));
    assert_eq!(again["digest"], v["digest"]);
    assert_eq!(again["assertions"], v["assertions"]);
    // The kernel in the guest reads the device as the kernel on the host does.
    xtask("guest-kernel");
    let (_, g) = run_json(&["--kernel", "guest", "--syscall-jumps", "off", &votes(), "--", "--buggy"]);
    assert_eq!((&g["kernel"], &g["digest"]), (&serde_json::json!("guest"), &v["digest"]), "{g}");
    assert_eq!(g["assertions"], v["assertions"]);
    // Without the variable the program speaks to no one: the same bug goes unseen.
    let (off, w) = run_json(&["--antithesis-sdk", "off", &votes(), "--", "--buggy"]);
    assert_eq!(off.status.code(), Some(0), "{}", stderr(&off));
    assert_eq!(stdout(&off), "votes 4 of 3 voters\n");
    assert_eq!(w["assertions"].as_array().map(Vec::len), Some(0), "{w}");
}

#[test]
fn explore_finds_the_sdks_failing_always_and_its_bug_file_replays() {
    let out = std::env::temp_dir().join(format!("deja-antithesis-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let o = deja(&["explore", "--quiet", "--runs", "2", "--out", out.to_str().unwrap(), &votes(), "--", "--buggy"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let bug = bug_file(&out);
    let text = std::fs::read_to_string(&bug).unwrap();
    assert!(text.contains("never more votes than voters"), "the bug is the SDK's assertion: {text}");
    let r = deja(&["replay", bug.to_str().unwrap()]);
    assert_eq!(r.status.code(), Some(1), "{}", stderr(&r));
    assert!(stderr(&r).contains("reproduced bug"), "{}", stderr(&r));
    let _ = std::fs::remove_dir_all(&out);
}

/// Debian's Python without its standard library declared fails in its own words; the summary
/// names the directory it looked for, which this host has, and the `--file` that provides it.
#[test]
fn a_program_denied_its_files_is_told_which_and_how_to_give_them() {
    needs(&["/usr/bin/python3.11", "/usr/lib/python3.11/os.py"], "python3.11");
    let out = deja(&["run", "--no-probe", "/usr/bin/python3.11", "--", "-c", "print(1)"]);
    let err = stderr(&out);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("No module named 'encodings'"), "Python's own words: {err}");
    assert!(err.contains("the program looked for files this host has and the run was not given"), "{err}");
    assert!(err.contains(": --file /usr/lib/python3.11\n"), "{err}");
    let (_, v) = run_json(&["/usr/bin/python3.11", "--", "-c", "print(1)"]);
    let given = v["not_given"].as_array().expect("not_given in the summary");
    let python = given.iter().find(|g| g["path"] == "/usr/lib/python3.11").expect("the standard library");
    assert_eq!(python["provide"], "--file /usr/lib/python3.11");
    assert!(python["looked_for"]
        .as_array()
        .unwrap()
        .iter()
        .all(|p| p == "/usr/lib/python3.11" || p.as_str().unwrap().starts_with("/usr/lib/python3.11/")));
    // The kernel in the guest keeps the same record.
    xtask("guest-kernel");
    let (_, g) =
        run_json(&["--kernel", "guest", "--syscall-jumps", "off", "/usr/bin/python3.11", "--", "-c", "print(1)"]);
    assert_eq!((&g["digest"], &g["not_given"]), (&v["digest"], &v["not_given"]), "{g}");
    // Given what it named, the same program runs.
    let out =
        deja(&["run", "--no-probe", "--file", "/usr/lib/python3.11", "/usr/bin/python3.11", "--", "-c", "print(1)"]);
    assert_eq!((out.status.code(), stdout(&out).as_str()), (Some(0), "1\n"), "{}", stderr(&out));
}

/// A cluster's node speaks the same way once its environment names the file: its failing
/// `Always` is the cluster's failure, named by the node.
#[test]
fn a_cluster_node_instrumented_with_the_sdk_fails_the_cluster_by_its_assertion() {
    let file = temp_cluster(
        "antithesis-votes",
        "seed = 1\ntime_limit_ms = 5000\n\n[[node]]\nname = \"tally\"\naddress = \"10.0.0.1\"\n\
         binary = \"GUESTS/votes\"\nargs = [\"--buggy\"]\n\
         env = { ANTITHESIS_SDK_LOCAL_OUTPUT = \"/dev/antithesis-sdk.jsonl\" }\n",
    );
    let out = deja(&["run", "--no-probe", file.to_str().unwrap()]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(123), "{err}");
    assert!(err.contains("never more votes than voters"), "{err}");
}

fn voidstar() -> String {
    guest("voidstar").to_string_lossy().into_owned()
}

#[test]
fn a_program_that_loads_libvoidstar_speaks_through_it_alike_in_both_placements() {
    let (out, v) = run_json(&[&voidstar()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // Its messages came through the library: deja syscalls, no file written.
    assert_eq!(v["syscall_counts"]["deja"], 10, "{}", v["syscall_counts"]);
    assert_eq!(v["syscall_counts"].get("write").and_then(|w| w.as_u64()), Some(1), "only its one line of output");
    let always = assertion_site(&v, "not every draw is 0 mod 16");
    assert_eq!((always["kind"].as_str(), always["status"].as_str()), (Some("always"), Some("passed")), "{always}");
    assert_eq!((always["file"].as_str(), always["line"].as_u64()), (Some("guest/c/voidstar.c"), Some(90)));
    assert_eq!(assertion_site(&v, "the first draw is 0 mod 16")["kind"], "sometimes");
    assert_eq!(v["setup_complete"]["details"], "", "the SDK's null details");
    assert_eq!((v["events"].as_u64(), v["protocol_errors"].as_u64()), (Some(1), Some(0)), "{v}");
    // Each fuzz_get_random is a decision of the run.
    assert_eq!(v["decisions"], 3, "{v}");
    // The kernel in the guest serves the library as the kernel on the host does.
    xtask("guest-kernel");
    let (_, g) = run_json(&["--kernel", "guest", "--syscall-jumps", "off", &voidstar()]);
    assert_eq!((&g["kernel"], &g["digest"]), (&serde_json::json!("guest"), &v["digest"]), "{g}");
    assert_eq!(g["assertions"], v["assertions"]);
    // Without the SDKs' switch there is no library to load.
    let off = deja(&["run", "--no-probe", "--antithesis-sdk", "off", &voidstar()]);
    assert_eq!(off.status.code(), Some(3), "{}", stderr(&off));
    assert!(stdout(&off).is_empty() && stderr(&off).contains("/usr/lib/libvoidstar.so"), "{}", stderr(&off));
}

#[test]
fn explore_chooses_fuzz_get_random_values_and_its_bug_replays_and_minimizes_to_the_draws() {
    let out = std::env::temp_dir().join(format!("deja-voidstar-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let o = explore_to_first_bug(&out, 1500, &["--mode", "random"], &[&voidstar()]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let bug = bug_file(&out);
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&bug).unwrap()).unwrap();
    assert!(v["signature"].as_str().unwrap().contains("\"not every draw is 0 mod 16\" failed"), "{}", v["signature"]);
    // The bug is the three draws, each 0 mod 16 (one run in 4096 by chance), that the explorer
    // chose: overrides of the run's decisions.
    let draws: Vec<u64> = v["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["point"].as_str().unwrap().starts_with("sdk random"))
        .inspect(|d| assert_eq!(d["overridden"], true, "{d}"))
        .map(|d| d["choice"].as_u64().unwrap())
        .collect();
    assert_eq!(draws.len(), 3, "{}", v["decisions"]);
    assert!(draws.iter().all(|d| d % 16 == 0), "{draws:?}");
    assert!(v["input"]["overrides"].as_object().is_some_and(|o| !o.is_empty()), "{}", v["input"]);
    let replay = deja(&["replay", &bug.to_string_lossy()]);
    assert_eq!(replay.status.code(), Some(1), "{}", stderr(&replay));
    assert!(stderr(&replay).contains("reproduced bug"), "{}", stderr(&replay));
    let min = out.join("min.json");
    let m = deja(&["minimize", &bug.to_string_lossy(), "--out", &min.to_string_lossy()]);
    assert_eq!(m.status.code(), Some(0), "{}", stderr(&m));
    let kept: serde_json::Value = serde_json::from_slice(&std::fs::read(&min).unwrap()).unwrap();
    assert_eq!(kept["input"]["overrides"].as_object().unwrap().len(), 3, "every draw is needed: {}", kept["input"]);
    let again = deja(&["replay", &min.to_string_lossy()]);
    assert_eq!(again.status.code(), Some(1), "{}", stderr(&again));
}

fn sdkjson() -> String {
    guest("go-sdkjson").to_string_lossy().into_owned()
}

#[test]
fn a_go_program_without_cgo_speaks_the_json_fallback_and_its_failing_always_is_a_bug() {
    let (out, v) = run_json(&[&sdkjson()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(v["syscall_counts"].get("deja"), None, "a program without cgo cannot load the library");
    for (message, status) in [
        ("the balance never goes negative", "passed"),
        ("a withdrawal is refused", "satisfied"),
        ("the ledger closes", "reached"),
    ] {
        assert_eq!(assertion_site(&v, message)["status"], status, "{message}: {v}");
    }
    let cores = host_cores();
    let run = |core: u32| deja_on(core, &[], &["run", "--json", "--no-probe", &sdkjson(), "--", "-buggy"]);
    let buggy = run(cores[0]);
    assert_eq!(buggy.status.code(), Some(123), "{}", stderr(&buggy));
    let b = summary(&buggy);
    let a = assertion_site(&b, "the balance never goes negative");
    assert_eq!(a["status"], "failed", "{a}");
    let details: serde_json::Value = serde_json::from_str(a["first_failure"]["details"].as_str().unwrap()).unwrap();
    assert!(details["balance"].as_i64().unwrap() < 0, "{details}");
    assert_eq!(summary(&run(*cores.last().unwrap()))["digest"], b["digest"]);
}

/// The Antithesis Python SDK as PyPI ships it (`antithesis` 0.4.0, pure Python) in Debian's
/// Python: it loads deja's `libvoidstar.so` through `ctypes` (whose own library, libffi, the run
/// declares), its assertions join the report, its `get_random` draws are decisions, and explore
/// finds its failing `Always` and the bug replays.
#[test]
fn the_python_sdk_from_pypi_speaks_through_libvoidstar_in_debians_python() {
    needs(
        &["/usr/bin/python3.11", "/usr/lib/python3.11/os.py", "/usr/lib/python3/dist-packages/pip"],
        "python3.11 python3-pip",
    );
    let downloads = root().join("target/pypi");
    let site = downloads.join("antithesis-0.4.0");
    if !site.join("antithesis/assertions.py").exists() {
        let python = |args: &[&str]| {
            let o = std::process::Command::new("/usr/bin/python3.11").args(args).output().expect("python3.11");
            assert!(o.status.success(), "python3.11 {args:?}: {}", String::from_utf8_lossy(&o.stderr));
        };
        let d = downloads.to_string_lossy().into_owned();
        python(&["-m", "pip", "download", "--quiet", "--no-deps", "antithesis==0.4.0", "-d", &d]);
        let wheel = downloads.join("antithesis-0.4.0-py3-none-any.whl");
        python(&["-m", "zipfile", "-e", &wheel.to_string_lossy(), &site.to_string_lossy()]);
    }
    let program = root().join("crates/deja-cli/tests/data/antithesis_sdk_program.py");
    let site_file = format!("{}:/site", site.display());
    let program_file = format!("{}:/prog.py", program.display());
    // The arguments of a run of the program with `extra`, libffi declared or not.
    let run_with = |ffi: bool, extra: &[&str]| -> Vec<String> {
        let mut a: Vec<String> = ["--file", "/usr/lib/python3.11", "--file", &site_file, "--file", &program_file]
            .iter()
            .map(|s| s.to_string())
            .collect();
        if ffi {
            a.extend(["--file".to_string(), "/lib/x86_64-linux-gnu/libffi.so.8".to_string()]);
        }
        a.extend(["--env", "PYTHONPATH=/site", "/usr/bin/python3.11", "--", "/prog.py"].map(String::from));
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    let run = |extra: &[&str]| run_with(true, extra);
    // Without ctypes' own library, Python says so in its words and the summary names the file.
    let mut no_ffi = vec!["run".to_string(), "--no-probe".to_string()];
    no_ffi.extend(run_with(false, &[]));
    let no_ffi = deja(&no_ffi.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(stderr(&no_ffi).contains("libffi.so.8: cannot open shared object file"), "{}", stderr(&no_ffi));
    assert!(stderr(&no_ffi).contains(": --file /lib/x86_64-linux-gnu/libffi.so.8\n"), "{}", stderr(&no_ffi));
    let args = run(&[]);
    let (out, v) = run_json(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(v["syscall_counts"]["deja"].as_u64().unwrap() >= 8, "through the library: {}", v["syscall_counts"]);
    assert_eq!(v["decisions"], 3, "the three get_random draws");
    let total = assertion_site(&v, "the total stays under twelve");
    assert_eq!((total["status"].as_str(), total["file"].as_str()), (Some("passed"), Some("/prog.py")), "{total}");
    assert_eq!(assertion_site(&v, "the program ends")["status"], "reached");
    assert_eq!(v["setup_complete"]["details"], r#"{"stage":"start"}"#);
    assert_eq!(v["protocol_errors"], 0);
    // Its failing Always is a bug that explore finds and replay reproduces.
    let out_dir = std::env::temp_dir().join(format!("deja-python-sdk-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out_dir);
    let mut explore = vec!["explore".to_string(), "--quiet".into(), "--runs".into(), "2".into(), "--out".into()];
    explore.push(out_dir.to_string_lossy().into_owned());
    explore.extend(run(&["--buggy"]));
    let o = deja(&explore.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let bug = bug_file(&out_dir);
    assert!(std::fs::read_to_string(&bug).unwrap().contains("the buggy path holds"));
    let r = deja(&["replay", &bug.to_string_lossy()]);
    assert_eq!(r.status.code(), Some(1), "{}", stderr(&r));
    assert!(stderr(&r).contains("reproduced bug"), "{}", stderr(&r));
    let _ = std::fs::remove_dir_all(&out_dir);
}

/// The SDK's guidance steers exploration: `climb`'s numeric assertion fails in about one run
/// in 4,800 by chance, and its guidepost (the sum against 50) keeps each round that comes
/// closer in the corpus, so the campaign climbs to it.
#[test]
fn explore_follows_the_sdks_guideposts_to_a_rare_failure() {
    let out = std::env::temp_dir().join(format!("deja-climb-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let climb = guest("climb").to_string_lossy().into_owned();
    let o = explore_to_first_bug(&out, 1500, &["--mode", "random"], &[&climb]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let report = campaign_report(&out);
    // The corpus holds the rounds that reached new guidepost levels: nothing else of the run
    // differs with the digits.
    assert!(report["corpus_size"].as_u64().unwrap() >= 3, "{}", report["corpus_size"]);
    let bug: serde_json::Value = serde_json::from_slice(&std::fs::read(bug_file(&out)).unwrap()).unwrap();
    assert!(bug["signature"].as_str().unwrap().contains("the digits sum below fifty"), "{}", bug["signature"]);
    let digits: u64 = bug["decisions"].as_array().unwrap().iter().map(|d| d["choice"].as_u64().unwrap() % 10).sum();
    assert!(digits >= 50, "the bug's six draws sum to {digits}");
    let _ = std::fs::remove_dir_all(&out);
}
