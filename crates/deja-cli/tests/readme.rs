//! Every command the README shows in a `console` block runs and succeeds. The test command
//! itself (`cargo test ...`) is what is running this, so it is the one line not re-run here.

mod common;

use common::*;
use std::process::Command;

fn readme_commands() -> Vec<String> {
    let text = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    let mut out = Vec::new();
    let mut in_console = false;
    for line in text.lines() {
        if line.starts_with("```") {
            in_console = line.trim() == "```console";
            continue;
        }
        if in_console {
            if let Some(cmd) = line.strip_prefix("$ ") {
                out.push(cmd.to_string());
            }
        }
    }
    out
}

#[test]
fn readme_opens_with_the_two_commands() {
    let cmds = readme_commands();
    assert_eq!(cmds[0], "cargo xtask demo");
    assert_eq!(cmds[1], "cargo test --release --workspace");
    let ci = std::fs::read_to_string(root().join(".ci/run")).unwrap();
    assert!(ci.lines().any(|l| l.trim().starts_with(&cmds[1])), ".ci/run must run the README's test command");
}

#[test]
fn every_readme_command_runs() {
    let cmds = readme_commands();
    assert!(cmds.len() >= 5, "{cmds:?}");
    // The README's exploration writes a campaign here; a campaign is never overwritten.
    let _ = std::fs::remove_dir_all(root().join("target/readme-explore"));
    let _ = std::fs::remove_dir_all(root().join("target/readme-cluster-explore"));
    let _ = std::fs::remove_dir_all(root().join("target/readme-live"));
    let _ = std::fs::remove_dir_all(root().join("target/readme-walkv"));
    let _ = std::fs::remove_dir_all(root().join("target/readme-blocks"));
    for cmd in cmds.iter().filter(|c| !c.starts_with("cargo test")) {
        // `deja bench` defaults to a long measurement; the README's figures come from it. Here
        // it runs with the same flags plus small sizes so the suite stays quick.
        let cmd = if cmd.contains("deja bench") { format!("{cmd} --steps 20 --syscalls 200") } else { cmd.clone() };
        let out = Command::new("bash").arg("-c").arg(&cmd).current_dir(root()).output().expect("bash");
        // `deja explore` exits 1 when it found a bug and `deja replay` when the bug reproduced:
        // the README's examples are about exactly that.
        // The buggy register's seed 4, the buggy raftkv's seed 1 and ackstore with a placed error
        // are the README's examples of a failed assertion (123); the buggy pagestore's sweep finds
        // its failures (1).
        let expected = if cmd.contains("deja explore") || cmd.contains("deja replay") {
            1
        } else if cmd.contains("register-buggy-history") {
            // The history checker's verdict on the same split brain: not linearizable.
            1
        } else if cmd.contains("register-buggy")
            || cmd.contains("raftkv-buggy")
            || (cmd.contains("ackstore-buggy") && cmd.contains("--fail"))
        {
            123
        } else if cmd.contains("pagestore-buggy") && cmd.contains("--crash-sweep") {
            1
        } else if cmd.contains("deja check") && cmd.contains("walkv-wrong") {
            // The wrong patch of the write-ahead-log server: STILL_REPRODUCES.
            1
        } else {
            0
        };
        assert!(
            out.status.code() == Some(expected),
            "README command failed: {cmd}\nstdout:\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!out.stdout.is_empty() || !out.stderr.is_empty(), "README command printed nothing: {cmd}");
        if cmd.contains("deja build --coverage") {
            let built = root().join("target/guest-build/readme/x86_64-unknown-linux-gnu/release/bank");
            let image = std::fs::read(&built).expect("deja build wrote the program");
            assert!(image.windows(14).any(|w| w == b"__sancov_cntrs"), "the build is instrumented");
        }
    }
}
