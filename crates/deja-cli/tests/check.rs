//! `deja check` on the credit scenario: verdicts, capsules, certificates, missing evidence.

use crate::common::*;
use std::path::PathBuf;

fn out(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("deja-check-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn credit(variant: &str) -> String {
    guest(&format!("credit-{variant}")).to_string_lossy().into_owned()
}

fn check(
    base: &str,
    candidate: &str,
    extra: &[&str],
    dir: &std::path::Path,
) -> (std::process::Output, serde_json::Value) {
    check_with(&[], base, candidate, extra, dir)
}

/// `deja check --json` with `env` set: its output and the certificate it printed.
fn check_with(
    env: &[(&str, &str)],
    base: &str,
    candidate: &str,
    extra: &[&str],
    dir: &std::path::Path,
) -> (std::process::Output, serde_json::Value) {
    let mut args = vec!["check", "--json", "--base", base, "--candidate", candidate, "--out", dir.to_str().unwrap()];
    args.extend_from_slice(extra);
    let o = std::process::Command::new(deja_bin()).args(&args).envs(env.iter().copied()).output().expect("start deja");
    let cert = serde_json::from_slice(&o.stdout).unwrap_or(serde_json::Value::Null);
    (o, cert)
}

#[test]
fn each_variant_gets_its_verdict_against_the_frozen_buggy_capsule() {
    // Freeze the capsule once, from the buggy base, then judge every candidate against it.
    let hunt = out("hunt");
    let (o, cert) = check(&credit("buggy"), &credit("buggy"), &[], &hunt);
    assert_eq!(o.status.code(), Some(1), "the base against itself: {}", stderr(&o));
    assert_eq!(cert["verdict"], "STILL_REPRODUCES");
    let capsule = hunt.join("capsule.json");
    let c: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&capsule).unwrap()).unwrap();
    assert!(c["signature"].as_str().unwrap().contains("no credit is applied twice"));
    assert_eq!(c["trigger"]["event"], "request");
    let cap = capsule.to_str().unwrap();
    for (variant, verdict, code) in [
        ("atomic", "FIXED_FOR_THIS_CAPSULE", 0),
        ("misleading-green", "STILL_REPRODUCES", 1),
        ("mark-first", "NEW_FAILURE", 1),
        ("buggy", "STILL_REPRODUCES", 1),
    ] {
        let dir = out(variant);
        let (o, cert) = check(&credit("buggy"), &credit(variant), &["--capsule", cap], &dir);
        assert_eq!(o.status.code(), Some(code), "{variant}: {}", stderr(&o));
        assert_eq!(cert["verdict"], verdict, "{variant}");
        assert_eq!(cert["capsule_id"], c["id"]);
        let v = deja(&["verify-certificate", dir.join("certificate.json").to_str().unwrap()]);
        assert_eq!(v.status.code(), Some(0), "{variant}: {}", stderr(&v));
        if variant == "atomic" {
            let checks = cert["checks"].as_array().unwrap();
            assert!(checks.iter().all(|c| c["status"] == "passed"), "{checks:?}");
            assert!(checks
                .iter()
                .any(|c| c["name"] == "sweep the candidate: crash points with their states, and I/O errors"
                    && c["detail"].as_str().unwrap().contains("crash points over")));
            assert!(stderr(&o).contains("retry E1"), "a timeline a person can read: {}", stderr(&o));
        }
        if variant == "misleading-green" {
            // It passes an ordinary test that delivers every event twice; the buggy base does not.
            let (_, green) = run_json(&[&credit("misleading-green"), "--", "--deliver-twice"]);
            assert_eq!(green["assertion_failed"], false);
            let (_, buggy) = run_json(&[&credit("buggy"), "--", "--deliver-twice"]);
            assert_eq!(buggy["assertion_failed"], true);
        }
        std::fs::remove_dir_all(&dir).ok();
    }
    std::fs::remove_dir_all(&hunt).ok();
}

#[test]
fn verdicts_repeat_exactly() {
    let (a, b) = (out("rep-a"), out("rep-b"));
    let (_, ca) = check(&credit("buggy"), &credit("atomic"), &[], &a);
    let (_, cb) = check(&credit("buggy"), &credit("atomic"), &[], &b);
    assert_eq!(ca["verdict"], "FIXED_FOR_THIS_CAPSULE");
    assert_eq!(ca["certificate_hash"], cb["certificate_hash"], "the same check twice gives the same certificate");
    std::fs::remove_dir_all(&a).ok();
    std::fs::remove_dir_all(&b).ok();
}

#[test]
fn tampered_capsules_and_certificates_are_refused() {
    let dir = out("tamper");
    let (o, _) = check(&credit("buggy"), &credit("atomic"), &[], &dir);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // A capsule with one changed field.
    let text = std::fs::read_to_string(dir.join("capsule.json")).unwrap();
    let mut c: serde_json::Value = serde_json::from_str(&text).unwrap();
    c["trigger"]["durable_writes_after"] = serde_json::json!(99);
    let bad = dir.join("bad-capsule.json");
    std::fs::write(&bad, serde_json::to_string(&c).unwrap()).unwrap();
    let (o, _) = check(&credit("buggy"), &credit("atomic"), &["--capsule", bad.to_str().unwrap()], &out("tamper2"));
    assert_eq!(o.status.code(), Some(126));
    assert!(stderr(&o).contains("altered"), "{}", stderr(&o));
    // A certificate with a changed verdict, or a changed check.
    let cert_text = std::fs::read_to_string(dir.join("certificate.json")).unwrap();
    for edit in [("FIXED_FOR_THIS_CAPSULE", "STILL_REPRODUCES"), ("runs held:", "runs passed:")] {
        assert!(cert_text.contains(edit.0), "{}", edit.0);
        let forged = dir.join("forged.json");
        std::fs::write(&forged, cert_text.replacen(edit.0, edit.1, 1)).unwrap();
        let v = deja(&["verify-certificate", forged.to_str().unwrap()]);
        assert_eq!(v.status.code(), Some(1), "{edit:?}: {}", stderr(&v));
        assert!(stderr(&v).contains("refused"));
        // `deja inspect` verifies before it shows.
        let i = deja(&["inspect", forged.to_str().unwrap()]);
        assert_eq!(i.status.code(), Some(126), "{}", stderr(&i));
    }
    let i = deja(&["inspect", dir.join("certificate.json").to_str().unwrap()]);
    assert_eq!(i.status.code(), Some(0));
    assert!(stdout(&i).contains("FIXED_FOR_THIS_CAPSULE"), "{}", stdout(&i));
    let i = deja(&["inspect", bad.to_str().unwrap()]);
    assert_eq!(i.status.code(), Some(126), "an altered capsule: {}", stderr(&i));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn the_judge_runs_under_the_settings_deja_is_given() {
    // The capsule and the certificate record the host's fingerprint under the settings every
    // run of the check was made with: code rewritten by default, not with DEJA_REWRITE=off.
    for (name, env, rewritten) in
        [("rewrite-on", &[][..], true), ("rewrite-off", &[("DEJA_REWRITE", "off")][..], false)]
    {
        let dir = out(name);
        let (o, cert) = check_with(env, &credit("buggy"), &credit("atomic"), &[], &dir);
        assert_eq!(o.status.code(), Some(0), "{name}: {}", stderr(&o));
        assert_eq!(cert["verdict"], "FIXED_FOR_THIS_CAPSULE", "{name}");
        let capsule: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("capsule.json")).unwrap()).unwrap();
        for (what, host) in [("certificate", &cert["host"]), ("capsule", &capsule["host"])] {
            assert_eq!(host["remedy"]["rewrite"], rewritten, "{name}: the {what}'s host: {host}");
            assert_eq!(host["rewrite_rules"].as_u64().unwrap() > 0, rewritten, "{name}: the {what}'s host: {host}");
        }
        let v = deja(&["verify-certificate", dir.join("certificate.json").to_str().unwrap()]);
        assert_eq!(v.status.code(), Some(0), "{name}: {}", stderr(&v));
        std::fs::remove_dir_all(&dir).ok();
    }
    // A setting deja cannot read is refused before anything runs, as for every other command.
    let dir = out("rewrite-bad");
    let (o, _) = check_with(&[("DEJA_REWRITE", "sometimes")], &credit("buggy"), &credit("atomic"), &[], &dir);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("DEJA_REWRITE"), "{}", stderr(&o));
    assert!(!dir.exists(), "nothing was judged");
}

#[test]
fn a_candidate_that_cannot_run_is_never_a_pass() {
    let dir = out("broken");
    let (o, cert) = check(&credit("buggy"), "/nonexistent/candidate", &[], &dir);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert_eq!(cert["verdict"], "EVIDENCE_INCOMPLETE");
    // The host's /bin/true (dynamically linked) runs, and does none of the work: no evidence.
    let (o, cert) = check(&credit("buggy"), "/bin/true", &[], &out("dynamic"));
    assert_eq!(o.status.code(), Some(3), "a candidate that does nothing: {}", stderr(&o));
    assert_eq!(cert["verdict"], "EVIDENCE_INCOMPLETE");
    let crashes = guest("privileged").to_string_lossy().into_owned();
    let (o, cert) = check(&credit("buggy"), &crashes, &[], &out("crashes"));
    assert_eq!(o.status.code(), Some(3), "crashes at start-up: {}", stderr(&o));
    assert_eq!(cert["verdict"], "EVIDENCE_INCOMPLETE");
    let checks = cert["checks"].as_array().unwrap();
    assert!(checks.iter().any(|c| c["status"] == "not_run"), "checks that did not run are listed: {checks:?}");
    // A base with no crash-induced failure at all: nothing to judge against.
    let (o, cert) = check(&credit("atomic"), &credit("atomic"), &[], &out("nobug"));
    assert_eq!(o.status.code(), Some(3));
    assert_eq!(cert["verdict"], "EVIDENCE_INCOMPLETE");
}

#[test]
fn a_base_that_fails_without_faults_is_not_fault_induced() {
    // With every event delivered twice, the buggy base double-credits without any crash.
    let dir = out("nfi");
    let (o, cert) = check(&credit("buggy"), &credit("atomic"), &["--", "--deliver-twice"], &dir);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert_eq!(cert["verdict"], "NOT_FAULT_INDUCED");
}

#[test]
fn a_bug_found_by_explore_can_be_judged() {
    let campaign = out("explore");
    let o = deja(&[
        "explore",
        "--quiet",
        "--runs",
        "40",
        "--mode",
        "faults",
        "--out",
        campaign.to_str().unwrap(),
        &credit("buggy"),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let bug = std::fs::read_dir(&campaign)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with("bug-"))
        .unwrap();
    let (o, cert) = check(&credit("buggy"), &credit("atomic"), &["--bug", bug.to_str().unwrap()], &out("from-bug"));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(cert["verdict"], "FIXED_FOR_THIS_CAPSULE");
    let (o, cert) =
        check(&credit("buggy"), &credit("misleading-green"), &["--bug", bug.to_str().unwrap()], &out("from-bug2"));
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert_eq!(cert["verdict"], "STILL_REPRODUCES");
    // A bug file of another program is refused.
    let (o, _) = check(&credit("atomic"), &credit("atomic"), &["--bug", bug.to_str().unwrap()], &out("from-bug3"));
    assert_eq!(o.status.code(), Some(3));
    assert!(stderr(&o).contains("cannot be used"), "{}", stderr(&o));
    std::fs::remove_dir_all(&campaign).ok();
}

#[test]
fn dynamically_linked_programs_are_judged_with_their_libraries_on_record() {
    // store-buggy and store-fixed are C, linked against the host's libc: the judge declares
    // each one's loader and libraries, and records them by BLAKE3 in the capsule and certificate.
    let (buggy, fixed) = (guest("store-buggy").display().to_string(), guest("store-fixed").display().to_string());
    let hunt = out("dyn-hunt");
    let (o, cert) = check(&buggy, &fixed, &[], &hunt);
    assert_eq!(
        (o.status.code(), cert["verdict"].as_str()),
        (Some(0), Some("FIXED_FOR_THIS_CAPSULE")),
        "{}",
        stderr(&o)
    );
    let libc = std::fs::read("/lib/x86_64-linux-gnu/libc.so.6").unwrap();
    let libc = blake3::hash(&libc).to_hex().to_string();
    for inputs in [&cert["base_inputs"], &cert["candidate_inputs"]] {
        assert_eq!(inputs["files"]["/lib/x86_64-linux-gnu/libc.so.6"], libc.as_str(), "{cert}");
        assert!(inputs["files"]["/lib64/ld-linux-x86-64.so.2"].is_string(), "{cert}");
    }
    let capsule = hunt.join("capsule.json");
    let c: serde_json::Value = serde_json::from_slice(&std::fs::read(&capsule).unwrap()).unwrap();
    assert_eq!(c["signature"], "exit code 1: torn record: N bytes", "named by what it said");
    assert_eq!(c["base_inputs"], cert["base_inputs"]);
    let cap = capsule.to_str().unwrap();
    let (o, cert) = check(&buggy, &buggy, &["--capsule", cap], &out("dyn-same"));
    assert_eq!((o.status.code(), cert["verdict"].as_str()), (Some(1), Some("STILL_REPRODUCES")), "{}", stderr(&o));
    // A base with other inputs than the capsule's (one more declared file) is not judged.
    let (o, cert) =
        check(&buggy, &fixed, &["--capsule", cap, "--file", &format!("{buggy}:/etc/extra")], &out("dyn-other"));
    assert_eq!((o.status.code(), cert["verdict"].as_str()), (Some(3), Some("EVIDENCE_INCOMPLETE")), "{}", stderr(&o));
    assert!(stderr(&o).contains("/etc/extra is declared here, not in the capsule"), "{}", stderr(&o));
    // A bug explore finds in it is judged from its bug file.
    let campaign = out("dyn-explore");
    let o =
        deja(&["explore", "--quiet", "--runs", "30", "--mode", "faults", "--out", campaign.to_str().unwrap(), &buggy]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let bug = bug_file(&campaign);
    let (o, cert) = check(&buggy, &fixed, &["--bug", bug.to_str().unwrap()], &out("dyn-bug"));
    assert_eq!(
        (o.status.code(), cert["verdict"].as_str()),
        (Some(0), Some("FIXED_FOR_THIS_CAPSULE")),
        "{}",
        stderr(&o)
    );
    let (o, cert) = check(&buggy, &buggy, &["--bug", bug.to_str().unwrap()], &out("dyn-bug2"));
    assert_eq!((o.status.code(), cert["verdict"].as_str()), (Some(1), Some("STILL_REPRODUCES")), "{}", stderr(&o));
    for d in ["dyn-hunt", "dyn-same", "dyn-other", "dyn-explore", "dyn-bug", "dyn-bug2"] {
        std::fs::remove_dir_all(out(d)).ok();
    }
}

#[test]
fn sqlite_holds_through_the_hunt_and_is_caught_without_its_journal() {
    // A real storage engine, as Debian ships it (dynamically linked, with libsqlite3 from the
    // host). Configured as shipped, a rollback journal and full syncs, it survives every crash
    // point of the hunt with its crash states and an error on each file operation: no failure,
    // so no verdict but incomplete evidence. Without the journal and the syncs, the hunt finds
    // the crash that leaves the database malformed (SQLITE_CORRUPT, exit code 11).
    needs(&["/usr/bin/sqlite3"], "sqlite3");
    let check_sql = "select case when (select count(*) from pragma_integrity_check where integrity_check != 'ok') > 0 \
                     then abs(-9223372036854775808) end;";
    let work =
        "create table if not exists t(x integer primary key, v text); insert into t(v) select hex(randomblob(200)) \
                from (with recursive c(n) as (select 1 union all select n + 1 from c where n < 50) select n from c);";
    let shipped = format!("{work} {check_sql}");
    let (o, cert) =
        check("/usr/bin/sqlite3", "/usr/bin/sqlite3", &["--", "-bail", "/data/db", &shipped], &out("sqlite-shipped"));
    assert_eq!((o.status.code(), cert["verdict"].as_str()), (Some(3), Some("EVIDENCE_INCOMPLETE")), "{}", stderr(&o));
    let hunt = &cert["checks"][0]["detail"];
    assert!(hunt.as_str().unwrap().starts_with("no failure found on the base"), "{hunt}");
    let unsafe_sql = format!("pragma journal_mode=off; pragma synchronous=off; {work} {check_sql}");
    let (o, cert) =
        check("/usr/bin/sqlite3", "/usr/bin/sqlite3", &["--", "-bail", "/data/db", &unsafe_sql], &out("sqlite-unsafe"));
    assert_eq!((o.status.code(), cert["verdict"].as_str()), (Some(1), Some("STILL_REPRODUCES")), "{}", stderr(&o));
    assert!(stderr(&o).contains("FAILED: exit code 11"), "{}", stderr(&o));
    for d in ["sqlite-shipped", "sqlite-unsafe"] {
        std::fs::remove_dir_all(out(d)).ok();
    }
}

#[test]
fn a_bug_is_judged_with_the_libraries_it_was_found_with_when_they_changed_since() {
    // store.c with its own library beside it ($ORIGIN/lib), as a project ships it. The library
    // is rebuilt after explore found the bug: the check takes the recorded one from the
    // campaign's inputs/ for the base and the candidate alike, and without it refuses to judge.
    let dir = out("dyn-origin");
    std::fs::create_dir_all(dir.join("lib")).unwrap();
    let cc = |args: &[&str]| {
        let o = std::process::Command::new("gcc").args(args).current_dir(&dir).output().unwrap();
        assert!(o.status.success(), "gcc {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    };
    let lib = |words: &str| {
        std::fs::write(dir.join("greet.c"), format!("const char *greeting(void) {{ return \"{words}\"; }}\n")).unwrap();
        cc(&["-shared", "-fPIC", "-o", "lib/libgreet.so", "greet.c"]);
        blake3::hash(&std::fs::read(dir.join("lib/libgreet.so")).unwrap()).to_hex().to_string()
    };
    let first = lib("the first build");
    let store = root().join("guest/c/store.c").display().to_string();
    for (name, fixed) in [("buggy", false), ("fixed", true)] {
        let mut args =
            vec!["-DGREET", "-o", name, &store, "-Llib", "-lgreet", "-Wl,--enable-new-dtags,-rpath,$ORIGIN/lib"];
        if fixed {
            args.insert(0, "-DFIXED");
        }
        cc(&args);
    }
    let (buggy, fixed) = (dir.join("buggy").display().to_string(), dir.join("fixed").display().to_string());
    let campaign = dir.join("campaign");
    let flags = ["--runs", "200", "--seed", "1", "--stop-at-first-bug", "--mode", "faults"];
    let o =
        deja(&[&["explore", "--quiet", "--out", campaign.to_str().unwrap()][..], &flags, &[buggy.as_str()]].concat());
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let bug = bug_file(&campaign);
    let second = lib("the second build");
    assert_ne!(first, second);
    let (o, cert) = check(&buggy, &fixed, &["--bug", bug.to_str().unwrap()], &dir.join("judged"));
    assert_eq!(
        (o.status.code(), cert["verdict"].as_str()),
        (Some(0), Some("FIXED_FOR_THIS_CAPSULE")),
        "{}",
        stderr(&o)
    );
    for side in ["base_inputs", "candidate_inputs"] {
        assert_eq!(cert[side]["files"]["/bin/lib/libgreet.so"], first.as_str(), "{side}: {cert}");
    }
    assert!(stderr(&o).contains("/bin/lib/libgreet.so differs on this host"), "{}", stderr(&o));
    let (o, cert) = check(&buggy, &buggy, &["--bug", bug.to_str().unwrap()], &dir.join("same"));
    assert_eq!((o.status.code(), cert["verdict"].as_str()), (Some(1), Some("STILL_REPRODUCES")), "{}", stderr(&o));
    // Without the recorded library there is nothing to judge with: incomplete, both hashes named.
    std::fs::remove_file(campaign.join("inputs").join(&first)).unwrap();
    let (o, _) = check(&buggy, &fixed, &["--bug", bug.to_str().unwrap()], &dir.join("gone"));
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(stderr(&o).contains(&first) && stderr(&o).contains(&second), "{}", stderr(&o));
    std::fs::remove_dir_all(&dir).ok();
}
