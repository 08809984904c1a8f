//! A small key-value store with a write-ahead log, and a client in the same program that checks,
//! after every restart, that each put it saw acknowledged survived.
//!
//! `kv --variant fixed|buggy [puts]`
//!
//! Files under `/data`: `wal` (one `key=value` line per put), `snap` (the compacted state),
//! and the client's own `acks` log (opened O_APPEND|O_SYNC: each acknowledgment it records is
//! durable at once). Every fourth put the server compacts: it writes `snap.tmp`, fsyncs it,
//! renames it over `snap`, then truncates the WAL.
//!
//! * `fixed` fsyncs the WAL before acknowledging, and fsyncs `/data` after creating files and
//!   after the rename.
//! * `buggy` acknowledges a put before its WAL record is durable, and renames without fsyncing
//!   the directory.
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;

use deja_sdk::serde_json::json;
use deja_sdk::{assert_always, assert_reachable, assert_sometimes, lifecycle};

const O_SYNC: i32 = 0o4010000;
const DIR: &str = "/data";

/// The complete `key=value` records of a file; a last line without its newline was cut short
/// by a crash and does not count.
fn read_lines(path: &str) -> Vec<(String, String)> {
    let mut text = String::new();
    match File::open(path) {
        // A read error is the disk failing: stop, rather than take the file for empty.
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

/// Fail-stop on a storage error outside a put: say so and stop taking writes.
fn stop(what: &str, e: std::io::Error) -> ! {
    println!("kv: {what} failed ({e}); stopping");
    std::process::exit(0);
}

struct Server {
    fixed: bool,
    wal: File,
    state: BTreeMap<String, String>,
    since_compaction: u32,
}

impl Server {
    fn open(fixed: bool) -> Server {
        let mut state: BTreeMap<String, String> = read_lines("/data/snap").into_iter().collect();
        state.extend(read_lines("/data/wal"));
        let wal = OpenOptions::new().create(true).append(true).open("/data/wal").unwrap_or_else(|e| stop("opening the wal", e));
        if fixed {
            sync_dir().unwrap_or_else(|e| stop("fsync of /data", e));
        }
        Server { fixed, wal, state, since_compaction: 0 }
    }

    /// Stores a put; an error means it is not acknowledged (the storage failed).
    fn put(&mut self, key: &str, value: &str) -> std::io::Result<()> {
        self.wal.write_all(format!("{key}={value}\n").as_bytes())?;
        if self.fixed {
            self.wal.sync_data()?;
        }
        self.state.insert(key.to_string(), value.to_string());
        self.since_compaction += 1;
        if self.since_compaction == 4 {
            self.compact()?;
        }
        Ok(())
    }

    fn compact(&mut self) -> std::io::Result<()> {
        let mut tmp = File::create("/data/snap.tmp")?;
        let text: String = self.state.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
        tmp.write_all(text.as_bytes())?;
        tmp.sync_all()?;
        std::fs::rename("/data/snap.tmp", "/data/snap")?;
        if self.fixed {
            sync_dir()?;
        }
        self.wal.set_len(0)?;
        self.wal.sync_all()?;
        self.since_compaction = 0;
        assert_reachable!("the server compacts its log");
        Ok(())
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let fixed = match args.iter().position(|a| a == "--variant").and_then(|i| args.get(i + 1)).map(String::as_str) {
        Some("fixed") | None => true,
        Some("buggy") => false,
        Some(other) => {
            eprintln!("kv: unknown variant {other}");
            std::process::exit(2);
        }
    };
    let puts: usize = args.iter().filter_map(|a| a.parse().ok()).next().unwrap_or(10);

    // Recovery: the server rebuilds its state; the client checks its acknowledged puts.
    let mut server = Server::open(fixed);
    let acked = read_lines("/data/acks");
    let mut lost = 0;
    for (k, v) in &acked {
        let survived = server.state.get(k) == Some(v);
        assert_always!(survived, "every acknowledged put survives a crash", &json!({"key": k, "value": v}));
        if !survived {
            eprintln!("kv: LOST acknowledged put {k}={v}");
            lost += 1;
        }
    }
    assert_sometimes!(!acked.is_empty(), "the store restarts with acknowledged puts");
    lifecycle::setup_complete(&json!({"recovered_keys": server.state.len(), "acked": acked.len()}));
    if lost > 0 {
        std::process::exit(1);
    }

    let mut client_log = OpenOptions::new()
        .create(true)
        .append(true)
        .custom_flags(O_SYNC)
        .open("/data/acks")
        .unwrap_or_else(|e| stop("opening the client's ack log", e));
    // The client's own log is always made durable correctly.
    sync_dir().unwrap_or_else(|e| stop("fsync of /data", e));
    for i in acked.len()..puts {
        let (key, value) = (format!("k{i}"), format!("v{i}"));
        if let Err(e) = server.put(&key, &value) {
            // Fail-stop: the put is not acknowledged, and the store stops taking writes.
            println!("kv: put {key} failed ({e}); not acknowledged, stopping");
            break;
        }
        // The put is acknowledged: the client records it durably, in one write.
        if let Err(e) = client_log.write_all(format!("{key}={value}\n").as_bytes()) {
            println!("kv: the client could not record the ack of {key} ({e}); stopping");
            break;
        }
    }
    println!("kv: {} keys stored", server.state.len());
}
