//! Every command the README shows in a `console` block runs and succeeds. The test command
//! itself (`cargo test ...`) is what is running this, so it is the one line not re-run here.

use crate::common::*;
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

/// What a README command writes or reads under `target/` that another command may write or
/// read too: `target/readme-explore` for `--out target/readme-explore` and for
/// `target/readme-explore/bug-….json`, `target/timerand.snap`. The guests and the release build
/// are read by every command and written by none (the demo, run first, builds them).
fn shared_paths(cmd: &str) -> Vec<String> {
    cmd.split_whitespace()
        .filter_map(|w| w.strip_prefix("target/"))
        .map(|rest| rest.split('/').next().unwrap_or_default().to_string())
        .filter(|first| !matches!(first.as_str(), "guests" | "release"))
        .collect()
}

/// The README's commands after the first (the demo) in chains: a command joins the chain of the
/// commands it shares a path under `target/` with (a campaign and the replay of its bug, a
/// snapshot and the run from it), in README order; chains share nothing, so they may run at the
/// same time.
fn chains(cmds: &[String]) -> Vec<Vec<String>> {
    let mut chains: Vec<(Vec<String>, Vec<String>)> = Vec::new();
    for cmd in cmds {
        let paths = shared_paths(cmd);
        let joined: Vec<usize> = (0..chains.len()).filter(|&i| paths.iter().any(|p| chains[i].1.contains(p))).collect();
        let mut chain = (vec![], paths);
        for &i in joined.iter().rev() {
            let (c, p) = chains.remove(i);
            chain.0.splice(0..0, c);
            chain.1.extend(p);
        }
        chain.0.push(cmd.clone());
        chains.push(chain);
    }
    chains.sort_by_key(|(c, _)| cmds.iter().position(|x| *x == c[0]));
    chains.into_iter().map(|(c, _)| c).collect()
}

#[test]
fn readme_chains_keep_each_campaign_with_its_replays() {
    let cmds: Vec<String> = [
        "deja run target/guests/hello",
        "deja explore --out target/readme-explore target/guests/bank",
        "deja run --snapshot-out target/timerand.snap target/guests/timerand",
        "deja replay target/readme-explore/bug-????????????.json",
        "deja run --from-snapshot target/timerand.snap",
        "deja minimize target/readme-explore/bug-????????????.json",
    ]
    .map(String::from)
    .to_vec();
    let c = chains(&cmds);
    assert_eq!(c.len(), 3, "{c:?}");
    assert_eq!(c[0], [cmds[0].clone()]);
    assert_eq!(c[1], [cmds[1].clone(), cmds[3].clone(), cmds[5].clone()]);
    assert_eq!(c[2], [cmds[2].clone(), cmds[4].clone()]);
    let all = chains(&readme_commands()[2..]);
    let readme: Vec<&Vec<String>> =
        all.iter().filter(|c| c.iter().any(|x| x.contains("target/readme-walkv/"))).collect();
    assert_eq!(readme.len(), 1);
    assert_eq!(readme[0].len(), 3, "the walkv campaign and its two checks: {:?}", readme[0]);
}

/// The exit code the README's text says a command ends with.
fn expected_exit(cmd: &str) -> i32 {
    // `deja explore` exits 1 when it found a bug and `deja replay` when the bug reproduced:
    // the README's examples are about exactly that.
    // The buggy register's seed 4, the buggy raftkv's seed 1 and ackstore with a placed error
    // are the README's examples of a failed assertion (123); the buggy pagestore's sweep finds
    // its failures (1).
    if cmd.contains("deja explore") || cmd.contains("deja replay") {
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
    }
}

/// Runs one README command and checks how it ended.
fn run_readme_command(cmd: &str) {
    // `deja bench` defaults to a long measurement; the README's figures come from it. Here it
    // runs every measurement once, with small sizes and its campaigns at a tenth of their
    // rounds (`--quick`: every check of every figure kept), so the suite stays quick.
    let cmd = match cmd.contains("deja bench") {
        true => format!("{} --quick --steps 20 --syscalls 200", cmd.replace("--repeat 3", "--repeat 1")),
        false => cmd.to_string(),
    };
    let out = Command::new("bash").arg("-c").arg(&cmd).current_dir(root()).output().expect("bash");
    assert!(
        out.status.code() == Some(expected_exit(&cmd)),
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

#[test]
fn every_readme_command_runs() {
    let cmds = readme_commands();
    assert!(cmds.len() >= 5, "{cmds:?}");
    // The README's exploration writes a campaign here; a campaign is never overwritten.
    for dir in ["readme-explore", "readme-cluster-explore", "readme-live", "readme-walkv", "readme-blocks"] {
        let _ = std::fs::remove_dir_all(root().join("target").join(dir));
    }
    // The demo first: it builds the guests and deja that every other command runs. Then the
    // chains of the others, two at a time (each chain in README order).
    run_readme_command(&cmds[0]);
    let rest: Vec<String> = cmds[1..].iter().filter(|c| !c.starts_with("cargo test")).cloned().collect();
    // The longest chain, the benchmark's, starts first.
    let mut chains = chains(&rest);
    chains.sort_by_key(|c| !c.iter().any(|x| x.contains("deja bench")));
    let queue = std::sync::Mutex::new(chains.into_iter());
    std::thread::scope(|s| {
        let lanes: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| loop {
                    let Some(chain) = queue.lock().unwrap().next() else { break };
                    for cmd in &chain {
                        run_readme_command(cmd);
                    }
                })
            })
            .collect();
        for lane in lanes {
            if let Err(e) = lane.join() {
                std::panic::resume_unwind(e);
            }
        }
    });
}
