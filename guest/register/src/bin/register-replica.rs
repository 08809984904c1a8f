//! One replica of the replicated register (see the crate docs for the wire protocol).
//!
//! `register-replica --id I --listen HOST:PORT --peers HOST:PORT,... --variant fixed|buggy
//! [--run-for-ms MS] [--drop-peers-between-ms A,B]`
//!
//! `--peers` lists the other replicas (the replica's own `--listen` address may be in the list;
//! it is skipped). Each replica has one UDP socket on `--listen` and a single-threaded event
//! loop that waits with `set_read_timeout` until its next timer.
//!
//! * Election, Raft-style: terms, one vote per term, and a vote only for a candidate whose log
//!   is at least as up to date (last entry's term, then length). A follower or candidate that
//!   hears no heartbeat for its election timeout, `300 + 100 * id` ms, starts an election. A
//!   replica that sees a higher term in any message adopts it and becomes a follower.
//! * Replication: the leader sends `hb` with its whole log every 50 ms and at once after each
//!   write. A follower adopts the log of the leader it follows (entries it had that the leader
//!   lacks are dropped, and printed as `discarded [..]`).
//! * Writes: a non-leader answers `redirect <leader or none>`. The leader appends the value and
//!   answers `ack V T` once the write counts as durable on a majority (2 of 3, itself
//!   included). A leader that steps down forgets its pending writes (they are never acked).
//! * Reads: the leader answers `value CSV T`, in the fixed variant only if a majority (itself
//!   included) answered its heartbeats within the last 200 ms; otherwise `redirect none`.
//!
//! Variants:
//! * `fixed`: a write is durable when a majority has acknowledged holding it.
//! * `buggy`: the leader also counts as holding the write every peer it heard from in the last
//!   second, on the theory that the heartbeat carrying it is already on its way. When the
//!   leader is cut off from both peers it keeps acknowledging writes for a second while the
//!   others elect a new leader; when the partition heals it steps down, adopts the new
//!   leader's log, and the writes it acknowledged are gone: split brain. Its reads also skip
//!   the majority check.
//!
//! `--drop-peers-between-ms A,B` is a test aid for running natively, where there is no way to
//! partition the network: between `A` and `B` ms after start the replica neither sends to nor
//! accepts messages from other replicas (clients still reach it), as if it were partitioned
//! from them. Under deja, partition the simulated network instead.
//!
//! Output: `replica I listening on ADDR variant V`, then state changes: `started election
//! term T`, `became leader term T`, `stepped down term T`, `following ADDR term T`,
//! `acked V term T`, `discarded [..] adopting log of ADDR term T`, and at the end
//! `exiting term T role R log CSV`.
//!
//! Assertions (deja SDK): `a leader steps down` and `a replica discards log entries` are
//! reachability markers for exploration; the invariant itself is checked by the client.
//!
//! Exit codes: 0 after `--run-for-ms` (default: run forever); 2 usage error; 6 socket error.
use std::collections::BTreeSet;
use std::net::{SocketAddr, UdpSocket};
use std::process;
use std::time::{Duration, Instant};

use deja_sdk::{assert_reachable, lifecycle};
use deja_sdk::serde_json::json;
use register::{decode_log, encode_log, values_csv, Args, Entry};

const USAGE: &str = "register-replica --id I --listen HOST:PORT --peers HOST:PORT,... --variant fixed|buggy \
                     [--run-for-ms MS] [--drop-peers-between-ms A,B]";
const EXIT_SOCKET: i32 = 6;

const HEARTBEAT: Duration = Duration::from_millis(50);
/// How recently a majority must have answered for the fixed leader to serve a read (less than
/// any election timeout, so no other leader can have been elected meanwhile).
const READ_LEASE: Duration = Duration::from_millis(200);
/// A peer heard from this recently is "up" (buggy variant's durability shortcut).
const PEER_ALIVE: Duration = Duration::from_millis(1000);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Follower,
    Candidate,
    Leader,
}

struct Peer {
    addr: SocketAddr,
    /// When it last answered one of our heartbeats in our current term.
    last_heard: Option<Instant>,
    /// How many entries of our log (as leader) it has acknowledged holding.
    match_len: usize,
}

struct Pending {
    /// Log length once the write is in: the write is durable when this many entries are.
    len: usize,
    value: u64,
    client: SocketAddr,
}

struct Replica {
    id: u64,
    me: SocketAddr,
    socket: UdpSocket,
    buggy: bool,
    peers: Vec<Peer>,
    term: u64,
    voted_for: Option<u64>,
    role: Role,
    leader: Option<SocketAddr>,
    log: Vec<Entry>,
    /// The term of the leader whose log we hold (our own term when we lead).
    log_term: u64,
    votes: BTreeSet<SocketAddr>,
    election_timeout: Duration,
    election_deadline: Instant,
    next_heartbeat: Instant,
    pending: Vec<Pending>,
    start: Instant,
    drop_window: Option<(Duration, Duration)>,
    cut_off: bool,
}

impl Replica {
    /// More than half of the cluster (the peers and us): 2 of 3.
    fn majority(&self) -> usize {
        let cluster = self.peers.len() + 1;
        cluster / 2 + 1
    }

    fn last_term(&self) -> u64 {
        self.log.last().map_or(0, |e| e.term)
    }

    /// True while the native test aid says peer traffic is to be dropped.
    fn update_cut_off(&mut self, now: Instant) {
        let cut = self.drop_window.is_some_and(|(a, b)| {
            let t = now - self.start;
            t >= a && t < b
        });
        if cut != self.cut_off {
            self.cut_off = cut;
            println!("{}", if cut { "test partition: ignoring peers" } else { "test partition: over" });
        }
    }

    fn send(&self, to: SocketAddr, msg: &str) {
        // A lost datagram is just a lost message; the protocol retries.
        if let Err(e) = self.socket.send_to(msg.as_bytes(), to) {
            println!("send to {to} failed: {:?}", e.kind());
        }
    }

    fn send_peer(&self, to: SocketAddr, msg: &str) {
        if !self.cut_off {
            self.send(to, msg);
        }
    }

    fn send_heartbeats(&mut self, now: Instant) {
        let msg = format!("hb {} {} {}", self.term, self.id, encode_log(&self.log));
        for p in &self.peers {
            self.send_peer(p.addr, &msg);
        }
        self.next_heartbeat = now + HEARTBEAT;
    }

    /// Adopts `term` (if higher) and becomes a follower. A follower's election timer keeps
    /// running: only a heartbeat or a granted vote resets it, or a replica with a stale log and
    /// the shortest timeout could keep everyone else from ever starting an election.
    fn become_follower(&mut self, term: u64, now: Instant) {
        let was_follower = self.role == Role::Follower;
        if term > self.term {
            self.term = term;
            self.voted_for = None;
            self.leader = None;
        }
        if self.role == Role::Leader {
            println!("stepped down term {}", self.term);
            assert_reachable!("a leader steps down", &json!({ "id": self.id, "term": self.term }));
            if !self.pending.is_empty() {
                let values: Vec<u64> = self.pending.iter().map(|p| p.value).collect();
                println!("dropped pending writes {values:?}");
                self.pending.clear();
            }
            self.leader = None;
        }
        self.role = Role::Follower;
        if !was_follower {
            self.election_deadline = now + self.election_timeout;
        }
    }

    fn start_election(&mut self, now: Instant) {
        self.term += 1;
        self.role = Role::Candidate;
        self.voted_for = Some(self.id);
        self.votes.clear();
        self.leader = None;
        self.election_deadline = now + self.election_timeout;
        println!("started election term {}", self.term);
        let msg = format!("vote-req {} {} {} {}", self.term, self.id, self.last_term(), self.log.len());
        for p in &self.peers {
            self.send_peer(p.addr, &msg);
        }
        self.check_votes(now);
    }

    fn check_votes(&mut self, now: Instant) {
        if self.role == Role::Candidate && self.votes.len() + 1 >= self.majority() {
            self.role = Role::Leader;
            self.leader = Some(self.me);
            self.log_term = self.term;
            for p in &mut self.peers {
                p.match_len = 0;
                p.last_heard = None;
            }
            println!("became leader term {}", self.term);
            self.send_heartbeats(now);
        }
    }

    /// Does `peer` count as holding the first `len` entries of our log?
    fn holds(&self, peer: &Peer, len: usize, now: Instant) -> bool {
        if peer.match_len >= len {
            return true;
        }
        if self.buggy {
            // Heartbeats carry the whole log and a write triggers one at once, so a peer that
            // answered within the last second will have this entry by the time the client
            // reads our ack: count it now instead of waiting a round trip.
            return peer.last_heard.is_some_and(|t| now - t < PEER_ALIVE);
        }
        false
    }

    /// Acknowledges every pending write that is now durable.
    fn try_commit(&mut self, now: Instant) {
        if self.role != Role::Leader {
            return;
        }
        let majority = self.majority();
        let mut done = Vec::new();
        for (i, p) in self.pending.iter().enumerate() {
            let holders = 1 + self.peers.iter().filter(|peer| self.holds(peer, p.len, now)).count();
            if holders >= majority {
                done.push(i);
            }
        }
        for i in done.into_iter().rev() {
            let p = self.pending.remove(i);
            println!("acked {} term {}", p.value, self.term);
            self.send(p.client, &format!("ack {} {}", p.value, self.term));
        }
    }

    /// Has a majority (counting ourselves) answered within `window`?
    fn has_quorum(&self, window: Duration, now: Instant) -> bool {
        let recent = self.peers.iter().filter(|p| p.last_heard.is_some_and(|t| now - t < window)).count();
        1 + recent >= self.majority()
    }

    fn redirect(&self, to: SocketAddr) {
        let target = match (self.role, self.leader) {
            (Role::Follower, Some(leader)) => leader.to_string(),
            _ => "none".to_string(),
        };
        self.send(to, &format!("redirect {target}"));
    }

    fn peer_index(&self, addr: SocketAddr) -> Option<usize> {
        self.peers.iter().position(|p| p.addr == addr)
    }

    fn handle(&mut self, msg: &str, from: SocketAddr, now: Instant) {
        let words: Vec<&str> = msg.split_whitespace().collect();
        let num = |i: usize| words.get(i).and_then(|w| w.parse::<u64>().ok());
        let from_peer = self.peer_index(from);
        match words.first().copied() {
            Some("hb" | "hb-ack" | "vote-req" | "vote") if from_peer.is_none() || self.cut_off => {}
            Some("hb") => {
                let (Some(term), Some(_leader_id), Some(log)) =
                    (num(1), num(2), words.get(3).and_then(|l| decode_log(l)))
                else {
                    return println!("malformed from {from}: {msg:?}");
                };
                if term < self.term {
                    return self.send_peer(from, &format!("hb-ack {} {}", self.term, self.log.len()));
                }
                if term > self.term || self.role != Role::Follower {
                    self.become_follower(term, now);
                }
                if self.leader != Some(from) {
                    self.leader = Some(from);
                    println!("following {from} term {term}");
                }
                self.election_deadline = now + self.election_timeout;
                // Within one term the leader's log only grows: a shorter log in our own leader's
                // term is an old, reordered heartbeat.
                if term > self.log_term || log.len() >= self.log.len() {
                    let common = self.log.iter().zip(&log).take_while(|(a, b)| a == b).count();
                    if common < self.log.len() {
                        let discarded = values(&self.log[common..]);
                        println!("discarded {discarded:?} adopting log of {from} term {term}");
                        assert_reachable!(
                            "a replica discards log entries",
                            &json!({ "id": self.id, "term": term, "discarded": discarded })
                        );
                    }
                    self.log = log;
                    self.log_term = term;
                }
                self.send_peer(from, &format!("hb-ack {} {}", self.term, self.log.len()));
            }
            Some("hb-ack") => {
                let (Some(term), Some(len), Some(i)) = (num(1), num(2), from_peer) else {
                    return println!("malformed from {from}: {msg:?}");
                };
                if term > self.term {
                    self.become_follower(term, now);
                } else if term == self.term && self.role == Role::Leader {
                    let peer = &mut self.peers[i];
                    peer.last_heard = Some(now);
                    peer.match_len = peer.match_len.max(len as usize);
                    self.try_commit(now);
                }
            }
            Some("vote-req") => {
                let (Some(term), Some(candidate), Some(last_term), Some(len)) = (num(1), num(2), num(3), num(4)) else {
                    return println!("malformed from {from}: {msg:?}");
                };
                if term > self.term {
                    self.become_follower(term, now);
                }
                let up_to_date = (last_term, len) >= (self.last_term(), self.log.len() as u64);
                let grant = term == self.term
                    && self.role == Role::Follower
                    && self.voted_for.is_none_or(|v| v == candidate)
                    && up_to_date;
                if grant {
                    self.voted_for = Some(candidate);
                    self.election_deadline = now + self.election_timeout;
                    println!("voted for {candidate} term {term}");
                }
                self.send_peer(from, &format!("vote {} {}", self.term, grant as u8));
            }
            Some("vote") => {
                let (Some(term), Some(granted)) = (num(1), num(2)) else {
                    return println!("malformed from {from}: {msg:?}");
                };
                if term > self.term {
                    self.become_follower(term, now);
                } else if term == self.term && self.role == Role::Candidate && granted == 1 {
                    self.votes.insert(from);
                    self.check_votes(now);
                }
            }
            Some("write") => {
                let Some(value) = num(1) else {
                    return println!("malformed from {from}: {msg:?}");
                };
                if self.role != Role::Leader {
                    return self.redirect(from);
                }
                self.log.push(Entry { value, term: self.term });
                self.pending.push(Pending { len: self.log.len(), value, client: from });
                self.send_heartbeats(now);
                self.try_commit(now);
            }
            Some("read") => {
                if self.role == Role::Leader && (self.buggy || self.has_quorum(READ_LEASE, now)) {
                    self.send(from, &format!("value {} {}", values_csv(&self.log), self.term));
                } else {
                    self.redirect(from);
                }
            }
            _ => println!("ignored from {from}: {msg:?}"),
        }
    }

    fn tick(&mut self, now: Instant) {
        match self.role {
            Role::Leader => {
                if now >= self.next_heartbeat {
                    self.send_heartbeats(now);
                }
                self.try_commit(now);
            }
            Role::Follower | Role::Candidate => {
                if now >= self.election_deadline {
                    self.start_election(now);
                }
            }
        }
    }

    fn next_timer(&self) -> Instant {
        let mut next = match self.role {
            Role::Leader => self.next_heartbeat,
            _ => self.election_deadline,
        };
        if let Some((a, b)) = self.drop_window {
            for edge in [self.start + a, self.start + b] {
                if edge > Instant::now() {
                    next = next.min(edge);
                }
            }
        }
        next
    }
}

fn values(log: &[Entry]) -> Vec<u64> {
    log.iter().map(|e| e.value).collect()
}

fn main() {
    run(false);
}

/// The replica. `patched`: the fix is built in (`register-replica-patched`): whatever
/// `--variant` says, it runs the fixed variant.
pub(crate) fn run(patched: bool) {
    let args = Args::parse(USAGE, &["id", "listen", "peers", "variant", "run-for-ms", "drop-peers-between-ms"]);
    let id: u64 = args.required("id");
    let me: SocketAddr = args.addr("listen");
    let peers: Vec<SocketAddr> = args.addrs("peers").into_iter().filter(|p| *p != me).collect();
    let buggy = match args.raw("variant") {
        Some("fixed") => false,
        Some("buggy") => true,
        _ => args.error("--variant must be fixed or buggy"),
    } && !patched;
    let run_for: Option<u64> = args.raw("run-for-ms").map(|_| args.required("run-for-ms"));
    let drop_window = args.raw("drop-peers-between-ms").map(|w| {
        let parsed = w.split_once(',').and_then(|(a, b)| Some((a.parse::<u64>().ok()?, b.parse::<u64>().ok()?)));
        let Some((a, b)) = parsed else { args.error("--drop-peers-between-ms takes A,B (milliseconds)") };
        (Duration::from_millis(a), Duration::from_millis(b))
    });

    let socket = UdpSocket::bind(me).unwrap_or_else(|e| {
        eprintln!("bind {me}: {e}");
        process::exit(EXIT_SOCKET);
    });
    // Listening: a cluster explorer may fork every round from the point where each node is here.
    lifecycle::setup_complete(&json!({ "id": id, "listen": me.to_string() }));
    let start = Instant::now();
    let election_timeout = Duration::from_millis(300 + 100 * id.min(1_000_000));
    let mut r = Replica {
        id,
        me,
        socket,
        buggy,
        peers: peers.iter().map(|&addr| Peer { addr, last_heard: None, match_len: 0 }).collect(),
        term: 0,
        voted_for: None,
        role: Role::Follower,
        leader: None,
        log: Vec::new(),
        log_term: 0,
        votes: BTreeSet::new(),
        election_timeout,
        election_deadline: start + election_timeout,
        next_heartbeat: start,
        pending: Vec::new(),
        start,
        drop_window,
        cut_off: false,
    };
    println!("replica {id} listening on {me} variant {}", if buggy { "buggy" } else { "fixed" });

    let end = run_for.map(|ms| start + Duration::from_millis(ms));
    let mut buf = vec![0u8; 65536];
    loop {
        let now = Instant::now();
        if end.is_some_and(|end| now >= end) {
            break;
        }
        r.update_cut_off(now);
        r.tick(now);
        let mut next = r.next_timer();
        if let Some(end) = end {
            next = next.min(end);
        }
        let wait = next.saturating_duration_since(now).max(Duration::from_millis(1));
        if let Err(e) = r.socket.set_read_timeout(Some(wait)) {
            eprintln!("set_read_timeout: {e}");
            process::exit(EXIT_SOCKET);
        }
        match r.socket.recv_from(&mut buf) {
            Ok((n, from)) => {
                let now = Instant::now();
                r.update_cut_off(now);
                match std::str::from_utf8(&buf[..n]) {
                    Ok(msg) => r.handle(msg, from, now),
                    Err(_) => println!("ignored {n} bytes from {from}"),
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::ConnectionRefused
                ) => {}
            Err(e) => {
                eprintln!("recv: {e}");
                process::exit(EXIT_SOCKET);
            }
        }
    }
    let role = match r.role {
        Role::Follower => "follower",
        Role::Candidate => "candidate",
        Role::Leader => "leader",
    };
    println!("exiting term {} role {role} log {}", r.term, values_csv(&r.log));
    process::exit(0);
}
