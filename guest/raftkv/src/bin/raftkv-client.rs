//! The service's client: writes keys through the leader, then reads every one back.
//!
//! `raftkv-client --nodes IP:PORT,IP:PORT,IP:PORT --writes N [--interval-ms M] [--settle-ms S]
//! [--write-budget-ms W] [--read-budget-ms R] [--check assert|history]`
//!
//! `--nodes` lists the nodes in id order (node 1 first), so `redirect ID` names the address.
//!
//! 1. Writes `kI = I` for I in 1..=N, `M` ms apart (default 100), each to the node believed to
//!    lead: `redirect ID` sends it there, `redirect none`, an error or no answer in 500 ms moves
//!    on to the next node. A write not acknowledged within `W` ms (default 2000) is given up:
//!    its history operation stays open (it may have happened). Prints `write kI acked by ID` or
//!    `write kI unacknowledged`.
//! 2. Waits `S` ms (default 4000) for the faults to end and the cluster to settle.
//! 3. Reads every key back through the leader (a linearizable `get`), for up to `R` ms in all
//!    (default 15000), recording each read in the history (`kv` model).
//! 4. Checks that every acknowledged key reads back its value: `acknowledged writes survive`,
//!    and prints `acknowledged K of N writes; lost: [..]; unread: [..]`; and that every key
//!    could be read at all: `every key reads back after the faults end`.
//!
//! With `--check history` the client asserts nothing and exits 0: the judgement is left to
//! deja's linearizability checker on the history it recorded.
//!
//! Exit codes: 0 no acknowledged write was lost; 1 some acknowledged key is missing or wrong;
//! 2 usage error; 3 some key could not be read back within the budget.
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::process;
use std::thread;
use std::time::{Duration, Instant};

use deja_sdk::serde_json::json;
use deja_sdk::{assert_always, history, lifecycle};
use raftkv::Args;

const USAGE: &str = "raftkv-client --nodes IP:PORT,IP:PORT,IP:PORT --writes N [--interval-ms M] [--settle-ms S] \
                     [--write-budget-ms W] [--read-budget-ms R] [--check assert|history]";

/// How long one request may go unanswered before the next node is tried.
const ANSWER_TIMEOUT: Duration = Duration::from_millis(500);
/// Pause after `redirect none` or an error (an election is probably under way).
const RETRY_PAUSE: Duration = Duration::from_millis(50);

struct Client {
    nodes: Vec<SocketAddr>,
    /// Index into `nodes` of the node believed to lead.
    target: usize,
    conns: BTreeMap<usize, BufReader<TcpStream>>,
}

enum Answer {
    Ok,
    Value(Option<String>),
    Redirect(Option<usize>),
    Failed,
}

impl Client {
    /// One request to the current target; any failure drops the connection.
    fn request(&mut self, line: &str) -> Answer {
        let i = self.target;
        if !self.conns.contains_key(&i) {
            match TcpStream::connect_timeout(&self.nodes[i], ANSWER_TIMEOUT) {
                Ok(s) => {
                    let _ = s.set_nodelay(true);
                    if s.set_read_timeout(Some(ANSWER_TIMEOUT)).is_err() {
                        return Answer::Failed;
                    }
                    self.conns.insert(i, BufReader::new(s));
                }
                Err(_) => return Answer::Failed,
            }
        }
        let conn = self.conns.get_mut(&i).expect("connected above");
        let mut reply = String::new();
        let res = conn.get_mut().write_all(format!("{line}\n").as_bytes()).and_then(|_| conn.read_line(&mut reply));
        match res {
            Ok(n) if n > 0 && reply.ends_with('\n') => {}
            Ok(_) => {
                self.conns.remove(&i);
                return Answer::Failed;
            }
            Err(_) => {
                self.conns.remove(&i);
                return Answer::Failed;
            }
        }
        let words: Vec<&str> = reply.split_whitespace().collect();
        match words.as_slice() {
            ["ok"] => Answer::Ok,
            ["value", v] => Answer::Value(Some(v.to_string())),
            ["none"] => Answer::Value(None),
            ["redirect", "none"] => Answer::Redirect(None),
            ["redirect", id] => match id.parse::<usize>() {
                Ok(id) if (1..=self.nodes.len()).contains(&id) => Answer::Redirect(Some(id - 1)),
                _ => Answer::Failed,
            },
            _ => Answer::Failed,
        }
    }

    fn next_node(&mut self) {
        self.target = (self.target + 1) % self.nodes.len();
    }

    /// Sends `line` until a final answer (`ok` or a value) or `deadline`.
    fn until_answered(&mut self, line: &str, deadline: Instant) -> Option<Answer> {
        while Instant::now() < deadline {
            match self.request(line) {
                a @ (Answer::Ok | Answer::Value(_)) => return Some(a),
                Answer::Redirect(Some(i)) if i != self.target => self.target = i,
                Answer::Redirect(_) => {
                    self.next_node();
                    thread::sleep(RETRY_PAUSE);
                }
                Answer::Failed => {
                    self.next_node();
                    thread::sleep(RETRY_PAUSE);
                }
            }
        }
        None
    }
}

fn main() {
    let args = Args::parse(
        USAGE,
        &["nodes", "writes", "interval-ms", "settle-ms", "write-budget-ms", "read-budget-ms", "check"],
    );
    let nodes = args.addrs("nodes");
    if nodes.is_empty() {
        args.error("--nodes needs at least one address");
    }
    let writes: u64 = args.required("writes");
    let interval = Duration::from_millis(args.get("interval-ms", 100));
    let settle = Duration::from_millis(args.get("settle-ms", 4000));
    let write_budget = Duration::from_millis(args.get("write-budget-ms", 2000));
    let read_budget = Duration::from_millis(args.get("read-budget-ms", 15000));
    let check: String = args.get("check", "assert".to_string());
    let assert = match check.as_str() {
        "assert" => true,
        "history" => false,
        _ => args.error("--check is assert or history"),
    };
    let mut client = Client { nodes, target: 0, conns: BTreeMap::new() };

    // Connected: the nodes are listening (they start at the same time as the client).
    let start = Instant::now();
    while client.request("get k0").is_failed() && start.elapsed() < Duration::from_secs(10) {
        client.next_node();
        thread::sleep(RETRY_PAUSE);
    }
    lifecycle::setup_complete(&json!({ "writes": writes }));

    let mut acked = BTreeMap::new();
    for i in 1..=writes {
        let key = format!("k{i}");
        let op = history::invoke_key(&key, "write", json!(i.to_string()));
        match client.until_answered(&format!("put {key} {i}"), Instant::now() + write_budget) {
            Some(_) => {
                op.ok(json!(null));
                println!("write {key} acked by {}", client.target + 1);
                acked.insert(key, i.to_string());
            }
            None => println!("write {key} unacknowledged"),
        }
        thread::sleep(interval);
    }
    thread::sleep(settle);

    let deadline = Instant::now() + read_budget;
    let mut lost = Vec::new();
    let mut unread = Vec::new();
    for i in 1..=writes {
        let key = format!("k{i}");
        let op = history::invoke_key(&key, "read", json!(null));
        match client.until_answered(&format!("get {key}"), deadline) {
            Some(Answer::Value(v)) => {
                op.ok(json!(v));
                if let Some(want) = acked.get(&key) {
                    if v.as_ref() != Some(want) {
                        println!("read {key} -> {} but {want} was acknowledged", v.as_deref().unwrap_or("none"));
                        lost.push(key);
                    }
                }
            }
            _ => unread.push(key),
        }
    }
    println!("acknowledged {} of {writes} writes; lost: {lost:?}; unread: {unread:?}", acked.len());
    if !assert {
        return;
    }
    assert_always!(lost.is_empty(), "acknowledged writes survive", &json!({ "lost": lost }));
    assert_always!(unread.is_empty(), "every key reads back after the faults end", &json!({ "unread": unread }));
    if !lost.is_empty() {
        process::exit(1);
    }
    if !unread.is_empty() {
        process::exit(3);
    }
}

impl Answer {
    fn is_failed(&self) -> bool {
        matches!(self, Answer::Failed)
    }
}
