//! redb under deja: a client acknowledges each committed put in an O_SYNC log and checks,
//! after every restart, that every acknowledged put is in the database.
//!
//! `redbload [N] [--dirsync] [--one-phase]`
//!   N           number of puts (default 6)
//!   --dirsync   the glue fsyncs /data after opening/creating the database file
//!               (redb itself never fsyncs the directory)
//!   --pad B     append B x-bytes to every value (the file then grows during the puts)
//!   --one-phase do not enable two-phase commit (redb's default); Durability::Immediate always
//!   --open-errors-stop  a database that cannot be opened stops the program with exit 0
//!               (fail-stop, for placed I/O errors); by default it exits 3, since a crash
//!               that leaves a database no one can open has lost all of it
//!
//! Built against redb 2.6 by default, against redb 4.2 with `--no-default-features --features v4`.
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;

#[cfg(all(feature = "v2", not(feature = "v4")))]
use redb2 as redb;
#[cfg(feature = "v4")]
use redb4 as redb;
#[cfg(feature = "v4")]
use redb::ReadableDatabase;
use redb::{Database, Durability, ReadableTableMetadata, TableDefinition};

const O_SYNC: i32 = 0o4010000;
const DIR: &str = "/data";
const DB: &str = "/data/db.redb";
const ACKS: &str = "/data/acks";
const TABLE: TableDefinition<&str, &str> = TableDefinition::new("kv");

fn stop(what: &str, e: impl std::fmt::Display) -> ! {
    println!("redbload: {what} failed ({e}); stopping");
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
    let two_phase = !args.iter().any(|a| a == "--one-phase");
    let open_errors_stop = args.iter().any(|a| a == "--open-errors-stop");
    // --pad B: pad each value with B bytes ('x'), so the file grows during the puts
    let pad: usize = args.iter().position(|a| a == "--pad").and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(0);

    // The client reads its acks, then makes its own log durable (file and name) before the
    // engine touches the disk, so that the client's directory fsync does not cover the engine.
    let acked = read_lines(ACKS);
    let mut client_log = OpenOptions::new()
        .create(true)
        .append(true)
        .custom_flags(O_SYNC)
        .open(ACKS)
        .unwrap_or_else(|e| stop("opening the client's ack log", e));
    sync_dir().unwrap_or_else(|e| stop("fsync of /data (client)", e));

    // Recovery: open (or create) the database.
    let db = match Database::create(DB) {
        Ok(db) => db,
        Err(e) if open_errors_stop => stop("opening the database", e),
        Err(e) => {
            // A database that cannot be opened is a service that stays down: a failure.
            eprintln!("redbload: the database cannot be opened ({e})");
            std::process::exit(3);
        }
    };
    if dirsync {
        sync_dir().unwrap_or_else(|e| stop("fsync of /data (glue)", e));
    }

    // The client checks its acknowledged puts.
    let mut lost = 0;
    {
        let rtx = db.begin_read().unwrap_or_else(|e| stop("begin_read", e));
        let table = match rtx.open_table(TABLE) {
            Ok(t) => Some(t),
            Err(redb::TableError::TableDoesNotExist(_)) => None,
            Err(e) => stop("open_table (read)", e),
        };
        for (k, v) in &acked {
            let got = match &table {
                Some(t) => t.get(k.as_str()).unwrap_or_else(|e| stop("get", e)).map(|g| g.value().to_string()),
                None => None,
            };
            if got.as_deref() != Some(v.as_str()) {
                eprintln!("redbload: LOST acknowledged put {k}={v} (found {got:?})");
                lost += 1;
            }
        }
        let n = table.as_ref().map(|t| t.len().unwrap_or_else(|e| stop("len", e))).unwrap_or(0);
        println!("redbload: recovered {n} keys, {} acked", acked.len());
    }
    if lost > 0 {
        std::process::exit(1);
    }

    for i in acked.len()..puts {
        let (key, value) = (format!("k{i}"), format!("v{i}{}", "x".repeat(pad)));
        let r: Result<(), String> = (|| {
            let mut wtx = db.begin_write().map_err(|e| e.to_string())?;
            #[cfg(feature = "v4")]
            wtx.set_durability(Durability::Immediate).map_err(|e| e.to_string())?;
            #[cfg(not(feature = "v4"))]
            wtx.set_durability(Durability::Immediate);
            wtx.set_two_phase_commit(two_phase);
            {
                let mut t = wtx.open_table(TABLE).map_err(|e| e.to_string())?;
                t.insert(key.as_str(), value.as_str()).map_err(|e| e.to_string())?;
            }
            wtx.commit().map_err(|e| e.to_string())
        })();
        if let Err(e) = r {
            // Fail-stop: the put is not acknowledged.
            println!("redbload: put {key} failed ({e}); not acknowledged, stopping");
            std::process::exit(0);
        }
        if let Err(e) = client_log.write_all(format!("{key}={value}\n").as_bytes()) {
            println!("redbload: the client could not record the ack of {key} ({e}); stopping");
            std::process::exit(0);
        }
    }
    println!("done: {puts} keys");
}
