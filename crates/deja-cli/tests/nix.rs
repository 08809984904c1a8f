//! The Nix flake stays honest without Nix evaluating it here: every Nix file parses, the names
//! the README uses exist in the flake, and the simulation checks the flake runs (listed as data
//! in `nix/checks.nix`) are run by this test suite with the very same `deja` commands.

use crate::common::*;
use std::process::Command;

fn nix_files() -> Vec<std::path::PathBuf> {
    let mut v = vec![root().join("flake.nix")];
    for e in std::fs::read_dir(root().join("nix")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "nix") {
            v.push(p);
        }
    }
    v.sort();
    v
}

#[test]
fn every_nix_file_parses() {
    needs(&["/usr/bin/nix-instantiate"], "nix-bin");
    let files = nix_files();
    assert!(files.len() >= 5, "{files:?}");
    for f in files {
        let out = Command::new("nix-instantiate")
            .arg("--parse")
            .arg(&f)
            .output()
            .expect("nix-instantiate (Debian's nix-bin)");
        assert!(out.status.success(), "{}: {}", f.display(), String::from_utf8_lossy(&out.stderr));
    }
    let lock: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root().join("flake.lock")).unwrap()).unwrap();
    assert_eq!(lock["version"], 7);
    assert_eq!(lock["nodes"]["nixpkgs"]["locked"]["narHash"].as_str().unwrap().len(), 51);
}

/// The pure tier (`nix build` with `pureTests`) tests every crate whose tests need no `/dev/kvm`:
/// all but the two whose tests boot VMs and the guest SDK. A new crate joins one side or the
/// other here.
#[test]
fn the_pure_tier_names_every_crate_whose_tests_need_no_kvm() {
    let nix = std::fs::read_to_string(root().join("nix/deja.nix")).unwrap();
    let listed: std::collections::BTreeSet<String> = nix
        .split("cargoTestFlags = [")
        .nth(1)
        .and_then(|s| s.split(']').next())
        .unwrap()
        .split_whitespace()
        .map(|w| w.trim_matches('"').to_string())
        .filter(|w| w != "-p")
        .collect();
    let booting = ["deja-cli", "deja-vmm", "deja-sdk"];
    // A workspace of its own, built for `x86_64-unknown-none` by `cargo xtask guest-kernel`,
    // with no tests of its own: the end-to-end tests (`placement::`) run the image it makes.
    let apart = ["deja-guestkernel"];
    let mut crates = std::collections::BTreeSet::new();
    for e in std::fs::read_dir(root().join("crates")).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        if !booting.contains(&name.as_str()) && !apart.contains(&name.as_str()) {
            crates.insert(name);
        }
    }
    assert_eq!(listed, crates, "nix/deja.nix's pure tier");
}

#[test]
fn the_readme_names_exist_in_the_flake() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let flake = std::fs::read_to_string(root().join("flake.nix")).unwrap();
    for used in ["nix run .#explore", "nix flake check", "nix build .#guests", "mkDejaTest"] {
        assert!(readme.contains(used), "the README shows {used}");
    }
    for defined in [
        "explore = { type = \"app\"",
        "default = { type = \"app\"",
        "inherit deja guests",
        "mkDejaTest = ",
        "devShells.${system}.default",
        "checks.${system}",
        "./nix/checks.nix",
    ] {
        assert!(flake.contains(defined), "flake.nix defines {defined}");
    }
    // Every `.#name` the README uses is an app or a package of the flake.
    for name in readme.split(".#").skip(1).map(|s| s.split(|c: char| !c.is_alphanumeric() && c != '-').next().unwrap())
    {
        assert!(
            flake.contains(&format!("{name} = {{ type = \"app\""))
                || flake.contains(&format!("inherit deja {name}"))
                || name == "default",
            "README uses .#{name}, which the flake does not define"
        );
    }
    let mk = std::fs::read_to_string(root().join("nix/mk-deja-test.nix")).unwrap();
    assert!(mk.contains("requiredSystemFeatures = [ \"kvm\" ]"));
}

/// Evaluates `nix/mk-deja-test.nix` on `args` (a Nix attribute set) with a minimal `lib` and a
/// `runCommand` that returns its script instead of building it; `deja` is this build's binary.
/// Gives the check's script and, for a sharded check, each shard's name and script.
fn mk_deja_test(args: &str, stores: &std::path::Path) -> serde_json::Value {
    needs(&["/usr/bin/nix-instantiate"], "nix-bin");
    let bin = stores.join("deja/bin");
    std::fs::create_dir_all(&bin).unwrap();
    let _ = std::fs::remove_file(bin.join("deja"));
    std::os::unix::fs::symlink(deja_bin(), bin.join("deja")).unwrap();
    let expr = format!(
        r#"
        let
          escape = a: "'" + builtins.replaceStrings ["'"] ["'\\''"] (toString a) + "'";
          range = a: b: if a > b then [ ] else [ a ] ++ range (a + 1) b;
          lib = {{
            assertMsg = ok: msg: if ok then true else throw msg;
            escapeShellArgs = l: builtins.concatStringsSep " " (map escape l);
            mod = a: b: a - b * (a / b);
            inherit range;
          }};
          runCommand = name: env: script:
            {{ inherit name script; outPath = "{stores}/" + name; }} // (env.passthru or {{ }});
          mk = import {mk} {{ inherit lib runCommand; deja = "{stores}/deja"; }};
          check = mk ({args});
        in {{
          script = check.script;
          shards = map (s: {{ inherit (s) name script; }}) (check.shards or [ ]);
        }}"#,
        stores = stores.display(),
        mk = root().join("nix/mk-deja-test.nix").display(),
    );
    let out = Command::new("nix-instantiate")
        .args(["--eval", "--strict", "--json", "--expr", &expr])
        .output()
        .expect("nix-instantiate");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Runs a builder script as Nix would: `bash -e`, `$out` set to `out`, which does not exist yet.
fn build(script: &str, out: &std::path::Path) -> std::process::Output {
    let _ = std::fs::remove_dir_all(out);
    Command::new("bash").args(["-e", "-c", script]).env("out", out).output().expect("bash")
}

#[test]
fn the_flake_checks_run_and_judge_as_the_suite_expects() {
    needs(&["/usr/bin/nix-instantiate"], "nix-bin");
    let out = Command::new("nix-instantiate")
        .args(["--eval", "--strict", "--json"])
        .arg(root().join("nix/checks.nix"))
        .output()
        .expect("nix-instantiate");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let checks: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert!(checks.len() >= 2);
    let stores = std::env::temp_dir().join(format!("deja-nix-{}", std::process::id()));
    for c in checks {
        let args: Vec<String> = c["args"].as_array().unwrap().iter().map(|a| a.to_string()).collect();
        let attrs = format!(
            "{{ name = {}; program = {:?}; args = [ {} ]; runs = {}; seed = {}; mode = {}; expect = {}; }}",
            c["name"],
            guest(c["program"].as_str().unwrap()).to_string_lossy(),
            args.join(" "),
            c["runs"],
            c["seed"],
            c["mode"],
            c["expect"],
        );
        let check = mk_deja_test(&attrs, &stores);
        assert_eq!(check["shards"].as_array().unwrap().len(), 0);
        let dir = stores.join(c["name"].as_str().unwrap());
        let o = build(check["script"].as_str().unwrap(), &dir);
        assert!(o.status.success(), "flake check {} failed: {}", c["name"], stderr(&o));
        let report = std::fs::read_to_string(dir.join("report.json")).expect("the check's output holds its report");
        let report: serde_json::Value = serde_json::from_str(&report).unwrap();
        assert_eq!(report["campaign"]["rounds"], c["runs"], "{}", c["name"]);
        assert_eq!(report["campaign"]["bugs"].as_array().unwrap().is_empty(), c["expect"] == "no-bugs");
    }
    // The opposite expectation fails the check: the judge is not a formality.
    let wrong = format!(
        "{{ name = \"kv-wrong\"; program = {:?}; args = [ \"--variant\" \"buggy\" \"6\" ]; runs = 40; mode = \"faults\"; expect = \"no-bugs\"; }}",
        guest("kv").to_string_lossy()
    );
    let check = mk_deja_test(&wrong, &stores);
    let o = build(check["script"].as_str().unwrap(), &stores.join("kv-wrong"));
    assert!(!o.status.success());
    assert!(stderr(&o).contains("deja explore exited 1, expected 0 (no-bugs)"), "{}", stderr(&o));
    std::fs::remove_dir_all(&stores).ok();
}

#[test]
fn a_sharded_flake_check_builds_its_shards_and_judges_their_merge() {
    let stores = std::env::temp_dir().join(format!("deja-nix-shards-{}", std::process::id()));
    let attrs = format!(
        "{{ name = \"kv\"; program = {:?}; args = [ \"--variant\" \"buggy\" \"6\" ]; runs = 81; mode = \"faults\"; \
         expect = \"bugs\"; shards = 3; jobs = 1; }}",
        guest("kv").to_string_lossy()
    );
    let check = mk_deja_test(&attrs, &stores);
    let shards = check["shards"].as_array().unwrap();
    assert_eq!(shards.len(), 3);
    let mut rounds = 0;
    for (i, s) in shards.iter().enumerate() {
        let name = s["name"].as_str().unwrap();
        assert_eq!(name, format!("deja-test-kv-shard-{i}-of-3"));
        let dir = stores.join(name);
        let o = build(s["script"].as_str().unwrap(), &dir);
        assert!(o.status.success(), "shard {i}: {}", stderr(&o));
        let r: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap();
        assert_eq!(r["campaign"]["shard"], format!("{i}/3"));
        assert_eq!(r["campaign"]["rounds"], 27);
        rounds += 27;
    }
    let merged = stores.join("deja-test-kv");
    let o = build(check["script"].as_str().unwrap(), &merged);
    assert!(o.status.success(), "the merge: {}", stderr(&o));
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(merged.join("report.json")).unwrap()).unwrap();
    assert_eq!(r["campaign"]["rounds"], rounds);
    assert_eq!(r["campaign"]["shards"].as_array().unwrap().len(), 3);
    assert!(!r["campaign"]["bugs"].as_array().unwrap().is_empty());
    std::fs::remove_dir_all(&stores).ok();
}
