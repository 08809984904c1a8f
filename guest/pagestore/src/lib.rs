//! A page store: fixed 256-byte records after a 256-byte header that says how many there are,
//! and a client in the same program that checks, after every restart, that each put it saw
//! acknowledged survived.
//!
//! Three programs: `pagestore-buggy [puts]`, `pagestore-fixed [puts]` and `pagestore-retry
//! [puts]`.
//!
//! A put grows `/data/pages` by one record with `ftruncate` (Rust's `set_len`), writes the
//! record into the new space, and writes the header with the new count.
//!
//! * `buggy` makes the put durable with one `fdatasync` at the end. A crash before that barrier
//!   may leave the header's new count on the disk while the extension of the file did not make
//!   it (the weakest POSIX model keeps any subset of pending operations): on restart the header
//!   promises a record the file does not hold, the store refuses to open, and every
//!   acknowledged put is out of reach.
//! * `fixed` syncs the extension and the record before it writes the header, and syncs again:
//!   the header never names a record that is not durable.
//! * `retry` is `fixed` as engines were before fsyncgate: when the sync of the extension fails
//!   it syncs again, and the retry succeeds, because Linux dropped the dirty pages it could not
//!   write. The put is acknowledged while its record exists only in the page cache; a crash
//!   after the header's sync leaves a header that counts a record the file does not hold. Only
//!   a failed sync followed by a crash shows it: crashes alone and errors alone do not.
//!
//! The client records each acknowledgment in `/data/acks`, opened O_APPEND|O_SYNC. A read or
//! write error while opening is the disk failing, not corruption: the program says so and stops
//! (fail-stop).
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};

use deja_sdk::serde_json::json;
use deja_sdk::{assert_always, assert_sometimes, lifecycle};

const O_SYNC: i32 = 0o4010000;
const PAGE: u64 = 256;
const MAGIC: &[u8; 8] = b"PGSTORE1";

fn stop(what: &str, e: std::io::Error) -> ! {
    println!("pagestore: {what} failed ({e}); stopping");
    std::process::exit(0);
}

/// The header: magic, record count, and a checksum of both.
fn header(count: u64) -> Vec<u8> {
    let mut h = vec![0u8; PAGE as usize];
    h[..8].copy_from_slice(MAGIC);
    h[8..16].copy_from_slice(&count.to_le_bytes());
    let sum = checksum(&h[..16]);
    h[16..24].copy_from_slice(&sum.to_le_bytes());
    h
}

fn checksum(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, x| (h ^ u64::from(*x)).wrapping_mul(0x100_0000_01b3))
}

fn record(key: &str, value: &str) -> Vec<u8> {
    let mut r = vec![0u8; PAGE as usize];
    let text = format!("{key}={value}");
    r[8..8 + text.len()].copy_from_slice(text.as_bytes());
    let sum = checksum(&r[8..]);
    r[..8].copy_from_slice(&sum.to_le_bytes());
    r
}

/// Why the store does not open.
enum Refusal {
    /// The disk failed: fail-stop, not a bug of the store.
    Io(String),
    /// What is on the disk does not hold together.
    Corrupt(String),
}

/// Which release of the store runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// One sync after the header: the header may become durable before the extension.
    Buggy,
    /// The extension synced before the header; a failed sync fails the put.
    Fixed,
    /// `Fixed`, but a failed sync of the extension is retried (and the retry succeeds).
    Retry,
}

struct Store {
    variant: Variant,
    file: File,
    records: Vec<(String, String)>,
}

impl Store {
    /// Opens the store, creating it when there is none. `Err` says why it cannot be opened:
    /// `Io` when the disk failed (a read or write error), `Corrupt` when what it read does not
    /// hold together.
    fn open(variant: Variant) -> Result<Store, Refusal> {
        if std::fs::metadata("/data/pages").is_err() {
            // A new store appears whole: written under a temporary name, synced, renamed, and
            // the directory synced.
            let init = || -> std::io::Result<()> {
                let tmp = File::create("/data/pages.tmp")?;
                tmp.write_all_at(&header(0), 0)?;
                tmp.sync_all()?;
                std::fs::rename("/data/pages.tmp", "/data/pages")?;
                File::open("/data")?.sync_all()
            };
            init().map_err(|e| Refusal::Io(format!("init: {e}")))?;
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open("/data/pages")
            .map_err(|e| Refusal::Io(format!("open: {e}")))?;

        let mut all = Vec::new();
        (&file).read_to_end(&mut all).map_err(|e| Refusal::Io(format!("read: {e}")))?;
        let corrupt = |why: String| Err(Refusal::Corrupt(why));
        if all.len() < PAGE as usize || &all[..8] != MAGIC {
            return corrupt(format!("no valid header ({} bytes)", all.len()));
        }
        let count = u64::from_le_bytes(all[8..16].try_into().expect("8 bytes"));
        if u64::from_le_bytes(all[16..24].try_into().expect("8 bytes")) != checksum(&all[..16]) {
            return corrupt("the header's checksum is wrong".into());
        }
        let need = PAGE * (1 + count);
        if (all.len() as u64) < need {
            return corrupt(format!(
                "the header counts {count} records but the file holds {} bytes of the {need}",
                all.len()
            ));
        }
        let mut records = Vec::new();
        for i in 0..count {
            let r = &all[(PAGE * (1 + i)) as usize..(PAGE * (2 + i)) as usize];
            if u64::from_le_bytes(r[..8].try_into().expect("8 bytes")) != checksum(&r[8..]) {
                return corrupt(format!("record {i} is damaged"));
            }
            let text = String::from_utf8_lossy(&r[8..]).trim_end_matches('\0').to_string();
            let Some((k, v)) = text.split_once('=') else { return corrupt(format!("record {i} is malformed")) };
            records.push((k.to_string(), v.to_string()));
        }
        Ok(Store { variant, file, records })
    }

    fn put(&mut self, key: &str, value: &str) -> std::io::Result<()> {
        let n = self.records.len() as u64;
        self.file.set_len(PAGE * (n + 2))?;
        self.file.write_all_at(&record(key, value), PAGE * (n + 1))?;
        if self.variant != Variant::Buggy {
            if let Err(e) = self.file.sync_data() {
                if self.variant != Variant::Retry {
                    return Err(e);
                }
                println!("pagestore: the sync of the new record failed ({e}); retrying");
                self.file.sync_data()?;
            }
        }
        self.file.write_all_at(&header(n + 1), 0)?;
        self.file.sync_data()?;
        self.records.push((key.to_string(), value.to_string()));
        Ok(())
    }
}

/// The client's acknowledged puts; a read error stops the program (the disk failed).
fn read_acks() -> Vec<(String, String)> {
    let mut text = String::new();
    match File::open("/data/acks") {
        Ok(mut f) => {
            if let Err(e) = f.read_to_string(&mut text) {
                stop("reading the client's ack log", e);
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => stop("opening the client's ack log", e),
    }
    let complete = text.rfind('\n').map(|e| &text[..e]).unwrap_or("");
    complete.lines().filter_map(|l| l.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// The program: `variant` is the release; the first number among the arguments is the number of
/// puts.
pub fn run(variant: Variant) {
    let args: Vec<String> = std::env::args().collect();
    let puts: usize = args.iter().filter_map(|a| a.parse().ok()).next().unwrap_or(6);

    let acked = read_acks();
    let opened = Store::open(variant);
    if let Err(Refusal::Io(why)) = &opened {
        println!("pagestore: the disk failed ({why}); stopping");
        std::process::exit(0);
    }
    let corrupt = match &opened {
        Err(Refusal::Corrupt(why) | Refusal::Io(why)) => Some(why.clone()),
        Ok(_) => None,
    };
    assert_always!(corrupt.is_none(), "the store opens after a crash", &json!({ "error": corrupt }));
    let mut store = match opened {
        Ok(s) => s,
        Err(Refusal::Corrupt(why) | Refusal::Io(why)) => {
            eprintln!("pagestore: the store does not open: {why}; {} acknowledged puts are out of reach", acked.len());
            std::process::exit(1);
        }
    };
    let mut lost = 0;
    for (k, v) in &acked {
        let survived = store.records.iter().any(|(a, b)| a == k && b == v);
        assert_always!(survived, "every acknowledged put survives a crash", &json!({"key": k}));
        if !survived {
            eprintln!("pagestore: LOST acknowledged put {k}={v}");
            lost += 1;
        }
    }
    assert_sometimes!(!acked.is_empty(), "the store restarts with acknowledged puts");
    lifecycle::setup_complete(&json!({"records": store.records.len(), "acked": acked.len()}));
    if lost > 0 {
        std::process::exit(1);
    }
    let mut acks = OpenOptions::new()
        .create(true)
        .append(true)
        .custom_flags(O_SYNC)
        .open("/data/acks")
        .unwrap_or_else(|e| stop("opening the client's ack log", e));
    File::open("/data").and_then(|d| d.sync_all()).unwrap_or_else(|e| stop("fsync of /data", e));
    for i in acked.len()..puts {
        let (key, value) = (format!("k{i}"), format!("v{i}"));
        if let Err(e) = store.put(&key, &value) {
            println!("pagestore: put {key} failed ({e}); not acknowledged, stopping");
            break;
        }
        if let Err(e) = acks.write_all(format!("{key}={value}\n").as_bytes()) {
            println!("pagestore: the client could not record the ack of {key} ({e}); stopping");
            break;
        }
    }
    println!("pagestore: {} records", store.records.len());
}
