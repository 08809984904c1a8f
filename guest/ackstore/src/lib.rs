//! A log store that acknowledges puts, and a client in the same program that checks, at the end
//! of the run and after every restart, that each put it saw acknowledged is in the log.
//!
//! Three programs: `ackstore-buggy [puts]`, `ackstore-fixed [puts]` and
//! `ackstore-rejecting [puts] [--recover]`.
//!
//! A put appends one `key=value` line to `/data/log` and `fdatasync`s it.
//!
//! * `buggy` swallows a failed write: it notes the error and goes on to sync (which succeeds:
//!   nothing of the put is pending) and acknowledges. One EIO on a write to the log loses an
//!   acknowledged put. It also retries a failed `fdatasync` until it succeeds, and acknowledges
//!   then: on Linux the retry succeeds because the failed sync dropped the dirty pages, so the
//!   put is gone from the disk although the program still reads it (fsyncgate).
//! * `fixed` treats a failed write or sync as a failed put: not acknowledged, and the store
//!   stops taking writes (fail-stop).
//!
//! * `rejecting` is `fixed`, and its client also holds the store to a promise Linux does not
//!   keep: a put reported failed is not in the log after a restart. It records each rejected
//!   put in `/data/rejected` (O_SYNC) and checks the log against it when it starts. Where the
//!   failed `fdatasync` dropped the record, the promise holds; where it had written the record
//!   back before failing (fsyncgate: any subset may reach the disk), the rejected put comes
//!   back. With `--recover` the store keeps that promise itself: when it starts, it rewrites its
//!   log to the acknowledged puts (temp file, fsync, rename, directory fsync).
//!
//! The client records each acknowledgment in `/data/acks`, opened O_APPEND|O_SYNC. A read that
//! fails is the disk failing, not a lost put: the program says so and stops (fail-stop).
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;

use deja_sdk::serde_json::json;
use deja_sdk::{assert_always, assert_sometimes, lifecycle};

const O_SYNC: i32 = 0o4010000;

/// The complete `key=value` lines of a file (none when it does not exist); a read error is
/// the disk failing, reported as such (`Err`), never taken for an empty file.
fn lines(path: &str) -> std::io::Result<Vec<(String, String)>> {
    let mut text = String::new();
    match File::open(path) {
        Ok(mut f) => {
            f.read_to_string(&mut text)?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let complete = text.rfind('\n').map(|e| &text[..e]).unwrap_or("");
    Ok(complete.lines().filter_map(|l| l.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect())
}

fn stop(what: &str, e: std::io::Error) -> ! {
    println!("ackstore: {what} failed ({e}); stopping");
    std::process::exit(0);
}

/// The client's check: every acknowledged put is in the log as the store reads it back.
fn check(acked: &[(String, String)], when: &str) -> usize {
    let log = match lines("/data/log") {
        Ok(l) => l,
        Err(e) => stop(&format!("reading the log back ({when})"), e),
    };
    let mut lost = 0;
    for (k, v) in acked {
        let there = log.iter().any(|(a, b)| a == k && b == v);
        assert_always!(there, "every acknowledged put is in the log", &json!({"key": k, "when": when}));
        if !there {
            eprintln!("ackstore: LOST acknowledged put {k}={v} ({when})");
            lost += 1;
        }
    }
    lost
}

/// Rewrites the log to the acknowledged puts alone, durably.
fn recover(acked: &[(String, String)]) -> std::io::Result<()> {
    let text: String = acked.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
    let mut tmp = File::create("/data/log.tmp")?;
    tmp.write_all(text.as_bytes())?;
    tmp.sync_data()?;
    std::fs::rename("/data/log.tmp", "/data/log")?;
    File::open("/data")?.sync_all()
}

/// The rejecting client's check: no put reported failed (and not acknowledged since) is in
/// the log.
fn check_rejected(acked: &[(String, String)]) -> usize {
    let rejected = lines("/data/rejected").unwrap_or_else(|e| stop("reading the client's rejections", e));
    let log = lines("/data/log").unwrap_or_else(|e| stop("reading the log back (after a restart)", e));
    let mut back = 0;
    for (k, v) in rejected.iter().filter(|r| !acked.contains(r)) {
        let there = log.iter().any(|(a, b)| a == k && b == v);
        assert_always!(!there, "a put reported failed is not in the log", &json!({"key": k}));
        if there {
            eprintln!("ackstore: a put reported failed came back: {k}={v}");
            back += 1;
        }
    }
    back
}

/// The variants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// Swallows a failed write, retries a failed sync.
    Buggy,
    /// Stops at the first failed write or sync.
    Fixed,
    /// `Fixed`, with a client that takes a failed put to be absent.
    Rejecting,
}

/// The program: `fixed` chooses the variant; the first number among the arguments is the
/// number of puts.
pub fn run(fixed: bool) {
    run_variant(if fixed { Variant::Fixed } else { Variant::Buggy })
}

/// The program of one variant.
pub fn run_variant(variant: Variant) {
    let fixed = variant != Variant::Buggy;
    let args: Vec<String> = std::env::args().collect();
    let puts: usize = args.iter().filter_map(|a| a.parse().ok()).next().unwrap_or(6);

    let acked = lines("/data/acks").unwrap_or_else(|e| stop("reading the client's ack log", e));
    if variant == Variant::Rejecting && args.iter().any(|a| a == "--recover") {
        recover(&acked).unwrap_or_else(|e| stop("recovering the log", e));
    }
    let mut lost = check(&acked, "after a restart");
    if variant == Variant::Rejecting {
        lost += check_rejected(&acked);
    }
    assert_sometimes!(!acked.is_empty(), "the store restarts with acknowledged puts");
    lifecycle::setup_complete(&json!({"acked": acked.len()}));
    if lost > 0 {
        std::process::exit(1);
    }
    let mut log = OpenOptions::new().create(true).append(true).open("/data/log").unwrap_or_else(|e| stop("opening the log", e));
    let mut acks = OpenOptions::new()
        .create(true)
        .append(true)
        .custom_flags(O_SYNC)
        .open("/data/acks")
        .unwrap_or_else(|e| stop("opening the client's ack log", e));
    // The rejecting client's record of failed puts, its name made durable with the others.
    let mut rejected = (variant == Variant::Rejecting).then(|| {
        OpenOptions::new()
            .create(true)
            .append(true)
            .custom_flags(O_SYNC)
            .open("/data/rejected")
            .unwrap_or_else(|e| stop("opening the client's rejections", e))
    });
    File::open("/data").and_then(|d| d.sync_all()).unwrap_or_else(|e| stop("fsync of /data", e));
    let mut all = acked.clone();
    for i in acked.len()..puts {
        let (key, value) = (format!("k{i}"), format!("v{i}"));
        if let Err(e) = log.write_all(format!("{key}={value}\n").as_bytes()) {
            if fixed {
                println!("ackstore: put {key} failed ({e}); not acknowledged, stopping");
                break;
            }
            println!("ackstore: write of {key} failed ({e}); going on");
        }
        let mut synced = log.sync_data();
        if !fixed {
            while let Err(e) = synced {
                println!("ackstore: fdatasync for {key} failed ({e}); retrying");
                synced = log.sync_data();
            }
        }
        if let Err(e) = synced {
            println!("ackstore: put {key} failed ({e}); not acknowledged, stopping");
            if let Some(rejected) = rejected.as_mut() {
                rejected
                    .write_all(format!("{key}={value}\n").as_bytes())
                    .unwrap_or_else(|e| stop("recording a rejection", e));
            }
            break;
        }
        if let Err(e) = acks.write_all(format!("{key}={value}\n").as_bytes()) {
            println!("ackstore: the client could not record the ack of {key} ({e}); stopping");
            break;
        }
        all.push((key, value));
    }
    let lost = check(&all, "at the end of the run");
    println!("ackstore: {} puts acknowledged, {lost} lost", all.len());
    if lost > 0 {
        std::process::exit(1);
    }
}
