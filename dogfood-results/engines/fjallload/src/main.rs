//! fjall under deja: a client acknowledges each committed put in an O_SYNC log and checks,
//! after every restart, that every acknowledged put is in the keyspace.
//!
//! `fjallload [N] [--dirsync] [--partsync] [--insert] [--pad B]`
//!   N          number of puts (default 6)
//!   --dirsync  the glue fsyncs /data after opening the keyspace (fjall fsyncs the keyspace
//!              folder and its subfolders, not the parent of the keyspace folder)
//!   --partsync the glue fsyncs /data/fjall/partitions after opening the partition (fjall
//!              does not fsync the parent of a new partition's folder)
//!   --insert   partition.insert + keyspace.persist(SyncAll) instead of a batch with
//!              durability SyncAll
//!   --pad B    append B x-bytes to every value
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;

use fjall::{Config, PartitionCreateOptions, PersistMode};

const O_SYNC: i32 = 0o4010000;
const DIR: &str = "/data";
const KS: &str = "/data/fjall";
const ACKS: &str = "/data/acks";

fn stop(what: &str, e: impl std::fmt::Display) -> ! {
    println!("fjallload: {what} failed ({e}); stopping");
    std::process::exit(0);
}

/// Complete `key=value` lines; a last line without newline was cut short and does not count.
fn read_lines(path: &str) -> Vec<(String, String)> {
    let mut text = String::new();
    match File::open(path) {
        Ok(mut f) => {
            if let Err(e) = f.read_to_string(&mut text) {
                stop(&format!("reading {path}"), e);
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => stop(&format!("opening {path}"), e),
    }
    let complete = match text.rfind('\n') {
        Some(end) => &text[..end],
        None => "",
    };
    complete.lines().filter_map(|l| l.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn sync_dir() -> std::io::Result<()> {
    File::open(DIR)?.sync_all()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let puts: usize = args.iter().skip(1).take_while(|a| *a != "--pad").filter_map(|a| a.parse().ok()).next().unwrap_or(6);
    let dirsync = args.iter().any(|a| a == "--dirsync");
    let single = args.iter().any(|a| a == "--insert");
    let partsync = args.iter().any(|a| a == "--partsync");
    let pad: usize = args.iter().position(|a| a == "--pad").and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(0);

    // The client reads its acks and makes its own log durable (file and name) before the engine
    // touches the disk, so that the client's directory fsync does not cover the engine.
    let acked = read_lines(ACKS);
    let mut client_log = OpenOptions::new()
        .create(true)
        .append(true)
        .custom_flags(O_SYNC)
        .open(ACKS)
        .unwrap_or_else(|e| stop("opening the client's ack log", e));
    sync_dir().unwrap_or_else(|e| stop("fsync of /data (client)", e));

    let ks = match Config::new(KS).open() {
        Ok(ks) => ks,
        Err(e) => stop("opening the keyspace", e),
    };
    if dirsync {
        sync_dir().unwrap_or_else(|e| stop("fsync of /data (glue)", e));
    }
    let part = match ks.open_partition("kv", PartitionCreateOptions::default()) {
        Ok(p) => p,
        Err(e) => stop("opening the partition", e),
    };
    if partsync {
        File::open("/data/fjall/partitions").and_then(|d| d.sync_all()).unwrap_or_else(|e| stop("fsync of /data/fjall/partitions (glue)", e));
    }

    let mut lost = 0;
    for (k, v) in &acked {
        let got = part.get(k.as_bytes()).unwrap_or_else(|e| stop("get", e)).map(|g| String::from_utf8_lossy(&g).into_owned());
        if got.as_deref() != Some(v.as_str()) {
            let shown = got.as_deref().map(|g| if g.len() > 20 { format!("{}...({} bytes)", &g[..20], g.len()) } else { g.to_string() });
            eprintln!("fjallload: LOST acknowledged put {k}={} (found {shown:?})", if v.len() > 20 { &v[..20] } else { v });
            lost += 1;
        }
    }
    println!("fjallload: {} acked, {} checked", acked.len(), acked.len() - lost);
    if lost > 0 {
        std::process::exit(1);
    }

    for i in acked.len()..puts {
        let (key, value) = (format!("k{i}"), format!("v{i}{}", "x".repeat(pad)));
        let r = if single {
            part.insert(key.as_bytes(), value.as_bytes()).and_then(|_| ks.persist(PersistMode::SyncAll))
        } else {
            let mut b = ks.batch().durability(Some(PersistMode::SyncAll));
            b.insert(&part, key.as_bytes(), value.as_bytes());
            b.commit()
        };
        if let Err(e) = r {
            println!("fjallload: put {key} failed ({e}); not acknowledged, stopping");
            std::process::exit(0);
        }
        if let Err(e) = client_log.write_all(format!("{key}={value}\n").as_bytes()) {
            println!("fjallload: the client could not record the ack of {key} ({e}); stopping");
            std::process::exit(0);
        }
    }
    println!("done: {puts} keys");
}
