//! A ledger of fixed-size records in `/data/ledger.log`, with the number of records it
//! promises in `/data/count` (replaced through a temporary file, fsync, rename and a directory
//! fsync). Each variant orders its writes differently, so that each crash model has a ledger
//! that holds on it and one that does not:
//!
//! - `fixed`: creates the log, appends and fsyncs it, fsyncs `/data` once the log's name is
//!   new, then replaces the count. Holds under every model.
//! - `hazard`: as `fixed`, without the directory fsync after creating the log. Only a file
//!   system that may persist the count's rename and not the earlier creation of the log in the
//!   same directory loses it: a portability hazard, not a bug on ext4, XFS or btrfs.
//! - `count-first`: appends the record, then makes the count durable, and only then fsyncs the
//!   log. The record is in the page cache, so `kill -9` loses nothing; a crash between the two
//!   fsyncs loses a promised record on every journaling file system (an append is not ordered
//!   with a later rename of another file).
//! - `buffered`: keeps records in memory and writes them only at the end, while the count
//!   is made durable at every step. Even `kill -9` loses promised records.
//!
//! A life that finds anything in `/data` checks the ledger (every promised record present and
//! intact) and exits: 0 when it holds, 1 when it does not.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};

const LOG: &str = "/data/ledger.log";
const COUNT: &str = "/data/count";
const RECORD: usize = 16;
const STEPS: u64 = 3;

fn record(i: u64) -> Vec<u8> {
    format!("record {i:08}\n").into_bytes()
}

fn sync_dir() {
    File::open("/data").and_then(|d| d.sync_all()).expect("fsync /data");
}

fn write_count(n: u64) {
    let mut t = File::create("/data/count.tmp").expect("create /data/count.tmp");
    t.write_all(format!("{n}\n").as_bytes()).expect("write the count");
    t.sync_all().expect("fsync the count");
    std::fs::rename("/data/count.tmp", COUNT).expect("rename the count");
    sync_dir();
}

fn append(i: u64, sync: bool) {
    let mut log = OpenOptions::new().create(true).append(true).open(LOG).expect("open the log");
    log.write_all(&record(i)).expect("append a record");
    if sync {
        log.sync_all().expect("fsync the log");
    }
}

/// Checks what a crash left: every record the count promises is in the log, intact.
fn check() -> Result<u64, String> {
    let promised = match std::fs::read_to_string(COUNT) {
        Ok(text) => text.trim().parse::<u64>().map_err(|_| format!("the count {text:?} is not a number"))?,
        Err(_) => 0,
    };
    let mut log = Vec::new();
    if let Ok(mut f) = File::open(LOG) {
        f.read_to_end(&mut log).map_err(|e| format!("reading the log: {e}"))?;
    } else if promised > 0 {
        return Err(format!("the count promises {promised} records and the log is gone"));
    }
    for i in 0..promised {
        let at = i as usize * RECORD;
        if log.get(at..at + RECORD) != Some(&record(i)[..]) {
            return Err(format!(
                "record {i} of {promised} promised is missing or damaged ({} bytes in the log)",
                log.len()
            ));
        }
    }
    Ok(promised)
}

fn main() {
    let variant = std::env::args().nth(1).unwrap_or_else(|| "fixed".into());
    if !["fixed", "hazard", "count-first", "buffered"].contains(&variant.as_str()) {
        eprintln!("ledger: unknown variant {variant:?} (fixed, hazard, count-first or buffered)");
        std::process::exit(2);
    }
    let restarted = std::fs::read_dir("/data").map(|d| d.count() > 0).unwrap_or(false);
    if restarted {
        match check() {
            Ok(n) => println!("ledger: {n} promised records intact"),
            Err(e) => {
                eprintln!("ledger: LOST: {e}");
                std::process::exit(1);
            }
        }
        return;
    }
    for i in 0..STEPS {
        match variant.as_str() {
            "count-first" => {
                append(i, false);
                write_count(i + 1);
                File::open(LOG).and_then(|f| f.sync_all()).expect("fsync the log");
                if i == 0 {
                    sync_dir();
                }
            }
            "buffered" => write_count(i + 1),
            _ => {
                append(i, true);
                if i == 0 && variant == "fixed" {
                    sync_dir();
                }
                write_count(i + 1);
            }
        }
    }
    if variant == "buffered" {
        for i in 0..STEPS {
            append(i, false);
        }
        File::open(LOG).and_then(|f| f.sync_all()).expect("fsync the log");
        sync_dir();
    }
    println!("ledger: {STEPS} records written");
}
