//! The Nix flake stays honest without Nix evaluating it here: every Nix file parses, the names
//! the README uses exist in the flake, and the simulation checks the flake runs (listed as data
//! in `nix/checks.nix`) are run by this test suite with the very same `deja` commands.

mod common;

use common::*;
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

#[test]
fn the_flake_checks_run_the_commands_this_suite_runs() {
    let out = Command::new("nix-instantiate")
        .args(["--eval", "--strict", "--json"])
        .arg(root().join("nix/checks.nix"))
        .output()
        .expect("nix-instantiate");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let checks: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert!(checks.len() >= 2);
    // mk-deja-test.nix builds: deja explore --quiet --seed S --mode M --runs N --out $out PROGRAM -- ARGS
    let mk = std::fs::read_to_string(root().join("nix/mk-deja-test.nix")).unwrap();
    assert!(
        mk.contains(r#"[ "${deja}/bin/deja" "explore" "--quiet" "--seed" (toString seed) "--mode" mode ] ++ limit"#)
    );
    for c in checks {
        let dir = std::env::temp_dir().join(format!("deja-nix-{}-{}", std::process::id(), c["name"].as_str().unwrap()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut cmd: Vec<String> = vec![
            "explore".into(),
            "--quiet".into(),
            "--seed".into(),
            c["seed"].to_string(),
            "--mode".into(),
            c["mode"].as_str().unwrap().into(),
            "--runs".into(),
            c["runs"].to_string(),
            "--out".into(),
            dir.to_string_lossy().into_owned(),
            guest(c["program"].as_str().unwrap()).to_string_lossy().into_owned(),
            "--".into(),
        ];
        cmd.extend(c["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap().to_string()));
        let args: Vec<&str> = cmd.iter().map(String::as_str).collect();
        let o = deja(&args);
        let want = if c["expect"] == "no-bugs" { 0 } else { 1 };
        assert_eq!(o.status.code(), Some(want), "flake check {}: {}", c["name"], stderr(&o));
        std::fs::remove_dir_all(&dir).ok();
    }
}
