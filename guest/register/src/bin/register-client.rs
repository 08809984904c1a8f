//! The register's client: writes values, then checks that every acknowledged write survived.
//!
//! `register-client --replicas IP:PORT,IP:PORT,IP:PORT --writes N [--interval-ms M]
//! [--settle-ms S] [--write-budget-ms W] [--read-budget-ms R] [--bind IP:PORT]`
//!
//! 1. Writes the values 1..=N one at a time, `M` ms apart (default 100). Each `write V` goes to
//!    the replica the client believes leads (at first the first of `--replicas`); a
//!    `redirect ADDR` sends it there, a `redirect none` (no leader known) or no answer within
//!    200 ms moves on to the next replica in the list. A write not acknowledged within `W` ms
//!    (default 1000) is given up and counted as unacknowledged. Prints `write V acked by ADDR
//!    term T` or `write V unacknowledged`. An `ack` that arrives late, for a write already
//!    given up, still counts as acknowledged (`late ack V term T`).
//! 2. Waits `S` ms (default 3000) for the cluster to heal and settle, still collecting late
//!    acks.
//! 3. Reads the register from the leader (`read`, following redirects, trying the replicas in
//!    turn, for up to `R` ms, default 10000) and prints `final log CSV term T`.
//! 4. Checks that every acknowledged value is in the final log, the invariant
//!    `acknowledged writes survive`, and prints `acknowledged K of N writes; lost: [..]`.
//!
//! With `--check history` the client asserts nothing and exits 0 whatever it read. It records
//! its operations instead (`deja_sdk::history`, the `set` model: each write is an `add`, the
//! final read a `read` of the whole register) and leaves the judgement to deja's
//! linearizability checker.
//!
//! The client's UDP socket is bound to `--bind` (default `0.0.0.0:0`, any address, an
//! ephemeral port).
//!
//! Exit codes: 0 no acknowledged write was lost; 1 some acknowledged write is missing from the
//! final log; 2 usage error; 3 no leader answered the final read; 6 socket error.
use std::collections::{BTreeMap, BTreeSet};
use std::io::ErrorKind;
use std::net::{SocketAddr, UdpSocket};
use std::process;
use std::thread;
use std::time::{Duration, Instant};

use deja_sdk::serde_json::json;
use deja_sdk::{assert_always, assert_sometimes, history, lifecycle};
use register::Args;

const USAGE: &str = "register-client --replicas IP:PORT,IP:PORT,IP:PORT --writes N [--interval-ms M] \
                     [--settle-ms S] [--write-budget-ms W] [--read-budget-ms R] [--bind IP:PORT] \
                     [--check assert|history]";
const EXIT_LOST: i32 = 1;
const EXIT_NO_LEADER: i32 = 3;
const EXIT_SOCKET: i32 = 6;

/// How long to wait for one answer before trying another replica.
const ANSWER_TIMEOUT: Duration = Duration::from_millis(200);
/// Pause after `redirect none` (an election is probably under way).
const NO_LEADER_PAUSE: Duration = Duration::from_millis(50);

struct Client {
    socket: UdpSocket,
    replicas: Vec<SocketAddr>,
    /// Where the next request goes: the replica believed to lead.
    target: SocketAddr,
    /// Acknowledged values and the term of the leader that acknowledged them.
    acked: BTreeMap<u64, u64>,
    writes: u64,
    buf: Vec<u8>,
    /// With `--check history`: the writes in flight, by value, as history operations.
    history: Option<BTreeMap<u64, history::Op>>,
}

enum Reply {
    Ack { value: u64, term: u64 },
    Redirect(Option<SocketAddr>),
    Value { log: Vec<u64>, term: u64 },
}

impl Client {
    /// The replica after `target` in `--replicas`.
    fn next_replica(&mut self) {
        let i = self.replicas.iter().position(|r| *r == self.target).map_or(0, |i| i + 1);
        self.target = self.replicas[i % self.replicas.len()];
    }

    fn send(&self, msg: &str) {
        if let Err(e) = self.socket.send_to(msg.as_bytes(), self.target) {
            println!("send to {} failed: {:?}", self.target, e.kind());
        }
    }

    /// The next reply until `deadline`: `None` once it passes. Acks are recorded whatever their
    /// source; other replies count only from the current target.
    fn receive(&mut self, deadline: Instant) -> Option<Reply> {
        loop {
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            if let Err(e) = self.socket.set_read_timeout(Some(deadline - now)) {
                eprintln!("set_read_timeout: {e}");
                process::exit(EXIT_SOCKET);
            }
            let (n, from) = match self.socket.recv_from(&mut self.buf) {
                Ok(r) => r,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => return None,
                Err(e) if e.kind() == ErrorKind::ConnectionRefused => continue,
                Err(e) => {
                    eprintln!("recv: {e}");
                    process::exit(EXIT_SOCKET);
                }
            };
            let text = String::from_utf8_lossy(&self.buf[..n]).into_owned();
            let words: Vec<&str> = text.split_whitespace().collect();
            let num = |i: usize| words.get(i).and_then(|w| w.parse::<u64>().ok());
            let reply = match words.first().copied() {
                Some("ack") => match (num(1), num(2)) {
                    (Some(value), Some(term)) => Reply::Ack { value, term },
                    _ => continue,
                },
                _ if from != self.target => continue,
                Some("redirect") => match words.get(1).copied() {
                    Some("none") => Reply::Redirect(None),
                    Some(a) => match a.parse() {
                        Ok(addr) => Reply::Redirect(Some(addr)),
                        Err(_) => continue,
                    },
                    None => continue,
                },
                Some("value") => {
                    let log = match words.get(1).copied() {
                        Some("-") => Vec::new(),
                        Some(csv) => match csv.split(',').map(|v| v.parse::<u64>()).collect() {
                            Ok(log) => log,
                            Err(_) => continue,
                        },
                        None => continue,
                    };
                    match num(2) {
                        Some(term) => Reply::Value { log, term },
                        None => continue,
                    }
                }
                _ => continue,
            };
            return Some(reply);
        }
    }

    /// Records an ack that is not for the write in flight: a late one, for a write already
    /// given up (or a duplicate).
    fn late_ack(&mut self, value: u64, term: u64) {
        if (1..=self.writes).contains(&value) && !self.acked.contains_key(&value) {
            println!("late ack {value} term {term}");
            self.acked.insert(value, term);
            self.acknowledged(value);
        }
    }

    /// Ends the history operation of write `value`, now acknowledged.
    fn acknowledged(&mut self, value: u64) {
        if let Some(op) = self.history.as_mut().and_then(|h| h.remove(&value)) {
            op.ok(json!(null));
        }
    }

    /// Follows a redirect: to the named leader, or on to the next replica after a pause.
    fn follow(&mut self, to: Option<SocketAddr>) {
        match to {
            Some(addr) if addr != self.target => self.target = addr,
            _ => {
                thread::sleep(NO_LEADER_PAUSE);
                self.next_replica();
            }
        }
    }

    /// Writes `value`; true once acknowledged.
    fn write(&mut self, value: u64, budget: Duration) -> bool {
        if let Some(h) = self.history.as_mut() {
            h.insert(value, history::invoke("set", "add", json!(value)));
        }
        let give_up = Instant::now() + budget;
        while Instant::now() < give_up {
            self.send(&format!("write {value}"));
            let deadline = (Instant::now() + ANSWER_TIMEOUT).min(give_up);
            loop {
                match self.receive(deadline) {
                    Some(Reply::Ack { value: v, term }) if v == value => {
                        println!("write {value} acked by {} term {term}", self.target);
                        self.acked.insert(value, term);
                        self.acknowledged(value);
                        return true;
                    }
                    Some(Reply::Ack { value: v, term }) => self.late_ack(v, term),
                    Some(Reply::Redirect(to)) => {
                        self.follow(to);
                        break;
                    }
                    Some(Reply::Value { .. }) => {}
                    None => {
                        println!("write {value}: no answer from {}", self.target);
                        self.next_replica();
                        break;
                    }
                }
            }
        }
        false
    }

    /// Collects late acks until `deadline`.
    fn drain(&mut self, deadline: Instant) {
        while Instant::now() < deadline {
            if let Some(Reply::Ack { value, term }) = self.receive(deadline) {
                self.late_ack(value, term);
            }
        }
    }

    /// The leader's log and term, or `None` if no leader answered within `budget`.
    fn read(&mut self, budget: Duration) -> Option<(Vec<u64>, u64)> {
        let give_up = Instant::now() + budget;
        while Instant::now() < give_up {
            self.send("read");
            let deadline = (Instant::now() + ANSWER_TIMEOUT).min(give_up);
            loop {
                match self.receive(deadline) {
                    Some(Reply::Value { log, term }) => return Some((log, term)),
                    Some(Reply::Ack { value, term }) => self.late_ack(value, term),
                    Some(Reply::Redirect(to)) => {
                        self.follow(to);
                        break;
                    }
                    None => {
                        println!("read: no answer from {}", self.target);
                        self.next_replica();
                        break;
                    }
                }
            }
        }
        None
    }
}

fn main() {
    let args = Args::parse(
        USAGE,
        &["replicas", "writes", "interval-ms", "settle-ms", "write-budget-ms", "read-budget-ms", "bind", "check"],
    );
    let replicas = args.addrs("replicas");
    if replicas.is_empty() {
        args.error("--replicas needs at least one address");
    }
    let writes: u64 = args.required("writes");
    let interval = Duration::from_millis(args.get("interval-ms", 100));
    let settle = Duration::from_millis(args.get("settle-ms", 3000));
    let write_budget = Duration::from_millis(args.get("write-budget-ms", 1000));
    let read_budget = Duration::from_millis(args.get("read-budget-ms", 10000));
    let bind: SocketAddr = args.get("bind", SocketAddr::from(([0, 0, 0, 0], 0)));
    let check: String = args.get("check", "assert".to_string());
    if check != "assert" && check != "history" {
        args.error("--check is assert or history");
    }

    let socket = UdpSocket::bind(bind).unwrap_or_else(|e| {
        eprintln!("bind {bind}: {e}");
        process::exit(EXIT_SOCKET);
    });
    println!("client bound {}", socket.local_addr().unwrap_or(bind));
    lifecycle::setup_complete(&json!({ "writes": writes }));
    let history = (check == "history").then(BTreeMap::new);
    let mut client =
        Client { socket, target: replicas[0], replicas, acked: BTreeMap::new(), writes, buf: vec![0u8; 65536], history };

    for value in 1..=writes {
        let ok = client.write(value, write_budget);
        if !ok {
            println!("write {value} unacknowledged");
        }
        lifecycle::send_event("write", &json!({ "value": value, "acked": ok }));
        assert_sometimes!(ok, "a write is acknowledged");
        assert_sometimes!(!ok, "a write goes unacknowledged");
        thread::sleep(interval);
    }

    println!("settling for {} ms", settle.as_millis());
    client.drain(Instant::now() + settle);

    let read_op = client.history.is_some().then(|| history::invoke("set", "read", json!(null)));
    let Some((log, term)) = client.read(read_budget) else {
        println!("no leader answered the read");
        if let Some(op) = read_op {
            op.fail();
        }
        process::exit(EXIT_NO_LEADER);
    };
    if let Some(op) = read_op {
        op.ok(json!(log));
    }
    println!("final log {} term {term}", if log.is_empty() { "-".to_string() } else { join(&log) });

    let present: BTreeSet<u64> = log.iter().copied().collect();
    let lost: Vec<u64> = client.acked.keys().copied().filter(|v| !present.contains(v)).collect();
    let acked: Vec<u64> = client.acked.keys().copied().collect();
    println!("acknowledged {} of {writes} writes; lost: {lost:?}", acked.len());
    if client.history.is_some() {
        // deja judges the history; the client itself asserts nothing.
        process::exit(0);
    }
    assert_always!(
        lost.is_empty(),
        "acknowledged writes survive",
        &json!({ "lost": lost, "acknowledged": acked, "writes": writes, "final_log": log, "final_term": term })
    );
    process::exit(if lost.is_empty() { 0 } else { EXIT_LOST });
}

fn join(values: &[u64]) -> String {
    values.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(",")
}
