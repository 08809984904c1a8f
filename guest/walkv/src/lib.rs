//! A key-value service with a write-ahead log in a file, and a client that checks that
//! acknowledged writes survive.
//!
//! * `walkv-buggy|walkv-fixed|walkv-wrong --listen IP:PORT --data DIR`: the server. It keeps
//!   its map in memory and every put in `DIR/wal`, one `K V` line each; on start it replays the
//!   log (a last line without its newline was cut short by a crash and does not count).
//!   `--sync-every-ms MS` gives `walkv-buggy` or `walkv-wrong` another timer (the same bug
//!   with any window); `--fail-stop-is-failure yes` declares, through the SDK, that the
//!   server's own stop on a failing disk is a failure, not a fail-stop.
//! * `walkv-buggy|walkv-fixed|walkv-wrong --single WRITES`: the same server on `127.0.0.1:7000`
//!   and a client in the same program, which logs every acknowledged put in `/data/acked`
//!   (`O_SYNC`, a harness file it excludes from deja's storage faults) and, after every
//!   restart, checks that each of them survived.
//! * `walkv-client --server IP:PORT --writes N [--interval-ms M] [--settle-ms S]`: the client
//!   of a cluster (`src/bin/walkv-client.rs`).
//!
//! One request per line, one answer per line: `put K V` → `ok`; `get K` → `value V` | `none`.
//!
//! The three servers differ in one thing, when a put is acknowledged:
//!
//! | binary | acknowledges | fsyncs the log |
//! | --- | --- | --- |
//! | `walkv-buggy` | once `write` returns | on a 200 ms timer |
//! | `walkv-fixed` | after `sync_data` | before every acknowledgement |
//! | `walkv-wrong` | once `write` returns | on a 2 ms timer: a narrower window, the same bug |
//!
//! Every server stops (exit 2) on any error of its log: fail-stop, as a server on a failing
//! disk should.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::OpenOptionsExt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use deja_sdk::serde_json::json;
use deja_sdk::{assert_always, history, lifecycle};
pub use echo::Args;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

/// When a server acknowledges a put.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// Once the record is written; the log is fsynced every 200 ms.
    Buggy,
    /// After `sync_data`.
    Fixed,
    /// Once the record is written; the log is fsynced every 2 ms.
    Wrong,
}

/// A server: its variant, and the timer of a variant that has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Server {
    /// When it acknowledges.
    pub variant: Variant,
    /// How often the log is fsynced in the background (`None`: before every acknowledgement).
    pub timer: Option<Duration>,
}

impl Variant {
    /// The variant with its own timer.
    fn server(self) -> Server {
        let timer = match self {
            Variant::Buggy => Some(Duration::from_millis(200)),
            Variant::Wrong => Some(Duration::from_millis(2)),
            Variant::Fixed => None,
        };
        Server { variant: self, timer }
    }
}

const USAGE: &str = "walkv-{buggy,fixed,wrong} (--listen IP:PORT --data DIR | --single WRITES) [--sync-every-ms MS] \
                     [--fail-stop-is-failure yes]";

/// Fail-stop: the log failed, the server stops.
fn stop(what: &str, e: std::io::Error) -> ! {
    println!("walkv: {what} failed ({e}); stopping");
    std::process::exit(2);
}

/// The complete `K V` lines of a file; a last line without its newline does not count.
pub fn read_records(path: &str) -> Vec<(String, String)> {
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
    complete.lines().filter_map(|l| l.split_once(' ')).map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// The map and its write-ahead log.
struct Store {
    variant: Variant,
    wal: File,
    map: BTreeMap<String, String>,
    /// Records written since the last fsync.
    dirty: bool,
}

impl Store {
    /// Replays the log, then opens it for appending; its name is made durable.
    fn open(variant: Variant, dir: &str) -> Store {
        let path = format!("{dir}/wal");
        let map: BTreeMap<String, String> = read_records(&path).into_iter().collect();
        let wal =
            OpenOptions::new().create(true).append(true).open(&path).unwrap_or_else(|e| stop("opening the log", e));
        File::open(dir).and_then(|d| d.sync_all()).unwrap_or_else(|e| stop("fsync of the data directory", e));
        println!("walkv: recovered {} keys", map.len());
        Store { variant, wal, map, dirty: false }
    }

    /// Logs a put; when it returns, the put may be acknowledged.
    fn put(&mut self, key: &str, value: &str) {
        self.wal.write_all(format!("{key} {value}\n").as_bytes()).unwrap_or_else(|e| stop("writing the log", e));
        if self.variant == Variant::Fixed {
            self.wal.sync_data().unwrap_or_else(|e| stop("fsync of the log", e));
        } else {
            self.dirty = true;
        }
        self.map.insert(key.to_string(), value.to_string());
    }

    /// The timer's fsync.
    fn sync(&mut self) {
        if self.dirty {
            self.wal.sync_data().unwrap_or_else(|e| stop("fsync of the log", e));
            self.dirty = false;
        }
    }

    fn answer(&mut self, line: &str) -> String {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["put", k, v] => {
                self.put(k, v);
                "ok".into()
            }
            ["get", k] => match self.map.get(*k) {
                Some(v) => format!("value {v}"),
                None => "none".into(),
            },
            _ => "err bad request".into(),
        }
    }
}

/// Runs `server` on `listen` with its log in `dir`, for ever.
pub fn serve(server: Server, listen: SocketAddr, dir: &str) -> ! {
    let store = Arc::new(Mutex::new(Store::open(server.variant, dir)));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime");
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(listen).await.unwrap_or_else(|e| stop("listening", e));
        lifecycle::setup_complete(&json!({ "keys": store.lock().expect("one thread").map.len() }));
        if let Some(period) = server.timer {
            let store = store.clone();
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(period).await;
                    store.lock().expect("one thread").sync();
                }
            });
        }
        loop {
            let Ok((conn, _)) = listener.accept().await else { continue };
            let store = store.clone();
            tokio::spawn(async move {
                let (read, mut write) = conn.into_split();
                let mut lines = tokio::io::BufReader::new(read).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    let answer = store.lock().expect("one thread").answer(&line);
                    if write.write_all(format!("{answer}\n").as_bytes()).await.is_err() {
                        break;
                    }
                }
            });
        }
    })
}

/// A client connection to the server, re-opened after any error.
pub struct Client {
    server: SocketAddr,
    conn: Option<BufReader<TcpStream>>,
}

/// How long one request may go unanswered.
const ANSWER_TIMEOUT: Duration = Duration::from_millis(500);
/// Pause after a failed request (the server may be restarting).
const RETRY_PAUSE: Duration = Duration::from_millis(20);

impl Client {
    /// A client of `server` (not connected yet).
    pub fn new(server: SocketAddr) -> Client {
        Client { server, conn: None }
    }

    /// One request; `None` when it failed (the connection is dropped).
    fn request(&mut self, line: &str) -> Option<String> {
        if self.conn.is_none() {
            let s = TcpStream::connect_timeout(&self.server, ANSWER_TIMEOUT).ok()?;
            let _ = s.set_nodelay(true);
            s.set_read_timeout(Some(ANSWER_TIMEOUT)).ok()?;
            self.conn = Some(BufReader::new(s));
        }
        let conn = self.conn.as_mut()?;
        let mut reply = String::new();
        let res = conn.get_mut().write_all(format!("{line}\n").as_bytes()).and_then(|_| conn.read_line(&mut reply));
        match res {
            Ok(n) if n > 0 && reply.ends_with('\n') => Some(reply.trim_end().to_string()),
            _ => {
                self.conn = None;
                None
            }
        }
    }

    /// Sends `line` until it is answered or `deadline` passes.
    pub fn until_answered(&mut self, line: &str, deadline: Instant) -> Option<String> {
        while Instant::now() < deadline {
            if let Some(a) = self.request(line) {
                return Some(a);
            }
            std::thread::sleep(RETRY_PAUSE);
        }
        None
    }

    /// Writes `key = value`, recorded in the history; true when the server acknowledged it.
    pub fn put(&mut self, key: &str, value: &str, budget: Duration) -> bool {
        lifecycle::send_event("request", &json!({ "put": key }));
        let op = history::invoke_key(key, "write", json!(value));
        match self.until_answered(&format!("put {key} {value}"), Instant::now() + budget).as_deref() {
            Some("ok") => {
                op.ok(json!(null));
                true
            }
            _ => {
                op.info();
                false
            }
        }
    }

    /// Reads `key`, recorded in the history: `Some(value or None)`, or `None` when unanswered.
    pub fn get(&mut self, key: &str, deadline: Instant) -> Option<Option<String>> {
        let op = history::invoke_key(key, "read", json!(null));
        let answer = self.until_answered(&format!("get {key}"), deadline);
        let value = match answer.as_deref() {
            Some("none") => None,
            Some(a) => match a.strip_prefix("value ") {
                Some(v) => Some(v.to_string()),
                None => {
                    op.info();
                    return None;
                }
            },
            None => {
                op.info();
                return None;
            }
        };
        op.ok(json!(value));
        Some(value)
    }
}

/// The harness's log of acknowledged puts in `--single` mode.
const ACKED: &str = "/data/acked";

/// `--single WRITES`: the server of `variant` and a client in one program. After a restart the
/// client first checks that every put its log says was acknowledged reads back, then writes
/// the puts not acknowledged yet, logging each acknowledgement durably.
fn single(server: Server, writes: u64) -> ! {
    deja_sdk::faults::exclude_path(ACKED);
    let listen: SocketAddr = "127.0.0.1:7000".parse().expect("an address");
    std::thread::spawn(move || serve(server, listen, "/data"));
    let mut client = Client::new(listen);
    let acked = read_records(ACKED);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut lost = Vec::new();
    for (key, want) in &acked {
        match client.get(key, deadline) {
            Some(got) if got.as_ref() == Some(want) => {}
            Some(got) => {
                println!("walkv: {key} was acknowledged as {want} but reads {}", got.as_deref().unwrap_or("none"));
                lost.push(key.clone());
            }
            None => {
                println!("walkv: the server does not answer");
                std::process::exit(3);
            }
        }
    }
    assert_always!(lost.is_empty(), "acknowledged writes survive", &json!({ "lost": lost }));
    if !lost.is_empty() {
        std::process::exit(1);
    }
    lifecycle::setup_complete(&json!({ "acknowledged": acked.len(), "writes": writes }));
    let mut log = OpenOptions::new()
        .create(true)
        .append(true)
        .custom_flags(O_SYNC)
        .open(ACKED)
        .unwrap_or_else(|e| stop("opening the harness log", e));
    let done: BTreeMap<String, String> = acked.into_iter().collect();
    for i in 1..=writes {
        let key = format!("k{i}");
        if done.contains_key(&key) {
            continue;
        }
        if !client.put(&key, &i.to_string(), Duration::from_secs(2)) {
            println!("walkv: put {key} unacknowledged");
            std::process::exit(3);
        }
        log.write_all(format!("{key} {i}\n").as_bytes()).unwrap_or_else(|e| stop("writing the harness log", e));
        std::thread::sleep(Duration::from_millis(5));
    }
    println!("walkv: {writes} puts acknowledged");
    std::process::exit(0);
}

const O_SYNC: i32 = 0o4010000;

/// The entry point of the three servers.
pub fn main(variant: Variant) -> ! {
    let args = Args::parse(USAGE, &["listen", "data", "single", "sync-every-ms", "fail-stop-is-failure"]);
    match args.raw("fail-stop-is-failure") {
        None | Some("no") => {}
        Some("yes") => deja_sdk::faults::fail_stop_is_failure(),
        Some(_) => args.error("--fail-stop-is-failure is yes or no"),
    }
    let mut server = variant.server();
    if let Some(ms) = args.raw("sync-every-ms") {
        let ms: u64 = ms.parse().unwrap_or_else(|_| args.error("--sync-every-ms takes milliseconds"));
        if server.timer.is_none() {
            args.error("walkv-fixed fsyncs before every acknowledgement: it has no timer");
        }
        server.timer = Some(Duration::from_millis(ms.max(1)));
    }
    if let Some(n) = args.raw("single") {
        let writes = n.parse().unwrap_or_else(|_| args.error("--single takes the number of writes"));
        single(server, writes);
    }
    serve(server, args.addr("listen"), &args.get("data", "/data".to_string()))
}
