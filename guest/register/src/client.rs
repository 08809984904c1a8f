//! The register's client side, shared by `register-client` and `register-workload`: writes
//! that follow the leader, late acks, and the leader's read (see `register-client`'s docs).

use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::net::{SocketAddr, UdpSocket};
use std::process;
use std::thread;
use std::time::{Duration, Instant};

use deja_sdk::history;
use deja_sdk::serde_json::json;

pub const EXIT_LOST: i32 = 1;
pub const EXIT_NO_LEADER: i32 = 3;
pub const EXIT_SOCKET: i32 = 6;

/// How long to wait for one answer before trying another replica.
const ANSWER_TIMEOUT: Duration = Duration::from_millis(200);
/// Pause after `redirect none` (an election is probably under way).
const NO_LEADER_PAUSE: Duration = Duration::from_millis(50);

pub struct Client {
    pub socket: UdpSocket,
    pub replicas: Vec<SocketAddr>,
    /// Where the next request goes: the replica believed to lead.
    pub target: SocketAddr,
    /// Acknowledged values and the term of the leader that acknowledged them.
    pub acked: BTreeMap<u64, u64>,
    pub writes: u64,
    pub buf: Vec<u8>,
    /// With `--check history`: the writes in flight, by value, as history operations.
    pub history: Option<BTreeMap<u64, history::Op>>,
}

pub enum Reply {
    Ack { value: u64, term: u64 },
    Redirect(Option<SocketAddr>),
    Value { log: Vec<u64>, term: u64 },
}

impl Client {
    /// The replica after `target` in `--replicas`.
    pub fn next_replica(&mut self) {
        let i = self.replicas.iter().position(|r| *r == self.target).map_or(0, |i| i + 1);
        self.target = self.replicas[i % self.replicas.len()];
    }

    pub fn send(&self, msg: &str) {
        if let Err(e) = self.socket.send_to(msg.as_bytes(), self.target) {
            println!("send to {} failed: {:?}", self.target, e.kind());
        }
    }

    /// The next reply until `deadline`: `None` once it passes. Acks are recorded whatever their
    /// source; other replies count only from the current target.
    pub fn receive(&mut self, deadline: Instant) -> Option<Reply> {
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
    pub fn late_ack(&mut self, value: u64, term: u64) {
        if (1..=self.writes).contains(&value) && !self.acked.contains_key(&value) {
            println!("late ack {value} term {term}");
            self.acked.insert(value, term);
            self.acknowledged(value);
        }
    }

    /// Ends the history operation of write `value`, now acknowledged.
    pub fn acknowledged(&mut self, value: u64) {
        if let Some(op) = self.history.as_mut().and_then(|h| h.remove(&value)) {
            op.ok(json!(null));
        }
    }

    /// Follows a redirect: to the named leader, or on to the next replica after a pause.
    pub fn follow(&mut self, to: Option<SocketAddr>) {
        match to {
            Some(addr) if addr != self.target => self.target = addr,
            _ => {
                thread::sleep(NO_LEADER_PAUSE);
                self.next_replica();
            }
        }
    }

    /// Writes `value`; true once acknowledged.
    pub fn write(&mut self, value: u64, budget: Duration) -> bool {
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
    pub fn drain(&mut self, deadline: Instant) {
        while Instant::now() < deadline {
            if let Some(Reply::Ack { value, term }) = self.receive(deadline) {
                self.late_ack(value, term);
            }
        }
    }

    /// The leader's log and term, or `None` if no leader answered within `budget`.
    pub fn read(&mut self, budget: Duration) -> Option<(Vec<u64>, u64)> {
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
