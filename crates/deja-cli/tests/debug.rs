//! `deja debug`: Debian's gdb drives a program bug's replay forwards and backwards over the
//! remote protocol, and the run keeps the replay's digest unless the debugger changes it.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::common::*;

/// A log that acknowledges each record after writing and syncing it, without checking the write:
/// an injected I/O error loses an acknowledged record, which the check at the end reports.
const ACK_LOG: &str = r#"#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static int acknowledged = 0;

/* Tells the client that record n is stored. */
void ack(int n) {
    acknowledged = n;
    printf("ack %d\n", n);
    fflush(stdout);
}

/* Reports acknowledged records that are not in the log. */
void lost(int acked, int found) {
    fprintf(stderr, "LOST: %d acknowledged, %d found\n", acked, found);
    exit(1);
}

int main(void) {
    int fd = open("/data/log", O_CREAT | O_WRONLY | O_APPEND, 0644);
    if (fd < 0) return 2;
    for (int i = 1; i <= 4; i++) {
        char rec[16];
        int len = snprintf(rec, sizeof rec, "rec %d\n", i);
        write(fd, rec, len); /* the bug: a failed write is not noticed */
        fsync(fd);
        ack(i);
    }
    close(fd);
    char buf[256] = {0};
    fd = open("/data/log", O_RDONLY);
    int n = read(fd, buf, sizeof buf - 1);
    close(fd);
    int found = 0;
    for (int i = 0; i < n; i++)
        if (buf[i] == '\n') found++;
    if (found < acknowledged) lost(acknowledged, found);
    printf("all %d records present\n", found);
    return 0;
}
"#;

fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// The program built with debug information, and a bug explore found in it.
fn ack_log_bug() -> (PathBuf, PathBuf) {
    needs(&["/usr/bin/gdb", "/usr/bin/gcc"], "gdb gcc libc6-dev");
    let dir = std::env::temp_dir().join(format!("deja-debug-{}", std::process::id()));
    std::fs::remove_dir_all(&dir).ok();
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("acklog.c"), ACK_LOG).unwrap();
    let cc = Command::new("gcc")
        .args(["-g", "-O0", "-static-pie", "-o", "acklog", "acklog.c"])
        .current_dir(&dir)
        .output()
        .expect("gcc");
    assert!(cc.status.success(), "{}", String::from_utf8_lossy(&cc.stderr));
    let out = dir.join("out");
    let o = deja(&[
        "explore",
        "--runs",
        "40",
        "--mode",
        "faults",
        "--seed",
        "1",
        "--jobs",
        "1",
        "--quiet",
        "--out",
        &s(&out),
        &s(&dir.join("acklog")),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    (dir.join("acklog"), bug_file(&out))
}

/// The port `deja debug` says it listens on, read from its stderr; `None` if it ended first.
fn listening_port(err: &mut BufReader<std::process::ChildStderr>) -> Option<u16> {
    let mut line = String::new();
    loop {
        line.clear();
        if err.read_line(&mut line).unwrap_or(0) == 0 {
            return None;
        }
        if let Some(rest) = line.split("listening on 127.0.0.1:").nth(1) {
            return rest.split_whitespace().next()?.parse().ok();
        }
    }
}

/// Runs gdb in batch mode against `deja debug` (on a free port) with `commands`: gdb's output,
/// deja's exit code and what it said. gdb is not told the program: it asks `deja debug` for its
/// path, and for the auxiliary vector that places it (a static-PIE program loads where the
/// kernel model put it).
fn session(bug: &Path, commands: &[&str]) -> (String, Option<i32>, String) {
    let mut child = Command::new(deja_bin())
        .args(["debug", "--port", "0", &s(bug)])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start deja debug");
    let mut err = child.stderr.take().map(BufReader::new);
    let port = err.as_mut().and_then(listening_port);
    let mut text = String::new();
    if let Some(port) = port {
        let mut gdb = Command::new("gdb");
        gdb.args(["-batch", "-nx", "-ex", "set pagination off", "-ex", &format!("target remote :{port}")]);
        for c in commands {
            gdb.args(["-ex", c]);
        }
        if let Ok(out) = gdb.output() {
            text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        }
    }
    let status = child.wait();
    let mut rest = String::new();
    if let Some(e) = err.as_mut() {
        let _ = std::io::Read::read_to_string(e, &mut rest);
    }
    assert!(port.is_some(), "deja debug ended before it listened: {status:?}: {rest}");
    (text, status.ok().and_then(|s| s.code()), rest)
}

/// The value after `key` in `text`, up to the next `,` or `)`.
fn field(text: &str, key: &str) -> u32 {
    let at = text.find(key).unwrap_or_else(|| panic!("no {key} in:\n{text}")) + key.len();
    text[at..].split([',', ')']).next().unwrap().trim().parse().unwrap()
}

#[test]
fn gdb_goes_back_from_the_loss_to_the_acknowledgement_and_forwards_again_keeping_the_digest() {
    let (program, bug) = ack_log_bug();
    let replay = deja(&["replay", &s(&bug)]);
    assert_eq!(replay.status.code(), Some(1), "{}", stderr(&replay));
    let digest = stderr(&replay).split("(digest ").nth(1).unwrap().split(')').next().unwrap().to_string();

    let (gdb, code, said) = session(
        &bug,
        &[
            "break lost",
            "continue",
            "info threads",
            "break ack",
            "reverse-continue",
            "print n",
            "print acknowledged",
            "reverse-continue",
            "print n",
            "continue",
            "reverse-finish",
            "reverse-next",
            "reverse-next",
            "print len",
            "next",
            "delete 2",
            "continue",
            "continue",
        ],
    );
    // gdb found the program by asking (a static-PIE one, placed by the auxiliary vector it read).
    assert!(gdb.contains(&s(&program)), "{gdb}");
    assert!(gdb.contains("* 1    Thread 1 "), "{gdb}");
    // The failure, then the last acknowledgement before it, with the variable not yet set.
    let acked = field(&gdb, "lost (acked=");
    let found = field(&gdb, "found=");
    assert!(found < acked, "{gdb}");
    let back = gdb.split("Breakpoint 1, lost (acked=").nth(1).unwrap();
    assert!(back.contains(&format!("Breakpoint 2, ack (n={acked})")), "{gdb}");
    assert!(back.contains(&format!("$1 = {acked}")) && back.contains(&format!("$2 = {}", acked - 1)), "{gdb}");
    // One more back: the acknowledgement before; forwards: the last one again.
    assert!(back.contains(&format!("ack (n={})", acked - 1)) && back.contains(&format!("$3 = {}", acked - 1)), "{gdb}");
    // Out of ack into main, back over `fsync` (a syscall) to the line of the write, whose
    // record is 6 bytes.
    assert!(back.contains("in main () at acklog.c:29"), "{gdb}");
    assert!(back.contains("28\t        fsync(fd);") && back.contains("$4 = 6"), "{gdb}");
    // Forwards again to the loss and the end: the replay's digest.
    assert_eq!(gdb.matches(&format!("Breakpoint 1, lost (acked={acked}, found={found})")).count(), 2, "{gdb}");
    assert!(gdb.contains("exited with code 01"), "{gdb}");
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains(&format!("the run ended with the bug's digest {digest}")), "{said}");

    // Without a breakpoint: straight to the end, the same digest.
    let (gdb, code, said) = session(&bug, &["continue"]);
    assert!(gdb.contains("exited with code 01"), "{gdb}");
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains(&format!("the bug's digest {digest}")), "{said}");

    // Watchpoints, backwards: from the loss to the write that set the variable last, and to the
    // kernel's write into a buffer (the `syscall` of `read`); forwards again over the same
    // write, and on to the end with the replay's digest.
    let (gdb, code, said) = session(
        &bug,
        &[
            "break lost",
            "continue",
            "up",
            "watch -l buf[0]",
            "reverse-continue",
            "x/i $pc",
            "continue",
            "delete",
            "break lost",
            "continue",
            "watch acknowledged",
            "reverse-continue",
            "print n",
            "delete",
            "continue",
        ],
    );
    let back = gdb.split_once("lost (acked=").unwrap().1;
    assert!(back.contains(&format!("Old value = {acked}\nNew value = {}", acked - 1)), "{gdb}");
    assert!(
        back.contains(&format!("in ack (n={acked}) at acklog.c:10")) && back.contains(&format!("$1 = {acked}")),
        "{gdb}"
    );
    assert!(back.contains("Old value = 114 'r'\nNew value = 0 '\\000'") && back.contains("in read ()"), "{gdb}");
    assert!(back.contains("<read+") && back.contains(":\tsyscall"), "{gdb}");
    assert!(back.contains("Old value = 0 '\\000'\nNew value = 114 'r'"), "{gdb}");
    assert!(gdb.contains("exited with code 01"), "{gdb}");
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains(&format!("the bug's digest {digest}")), "{said}");

    // A write by the debugger makes a branch: it is said, there is no going back, and the run
    // ends otherwise (the check at line 39 no longer counts the loss).
    let (gdb, code, said) =
        session(&bug, &["break 39", "continue", "set var acknowledged = 0", "reverse-continue", "continue"]);
    assert!(said.contains("the run is now a branch"), "{said}");
    assert!(gdb.contains("cannot go backwards"), "{gdb}");
    assert!(gdb.contains("exited normally"), "{gdb}");
    assert_eq!(code, Some(1), "a branch does not end with the bug's digest: {said}");
    assert!(said.contains("a branch the debugger made"), "{said}");
}
