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
use std::net::{SocketAddr, UdpSocket};
use std::process;
use std::thread;
use std::time::{Duration, Instant};

use deja_sdk::serde_json::json;
use deja_sdk::{assert_always, assert_sometimes, history, lifecycle};
use register::client::{Client, EXIT_LOST, EXIT_NO_LEADER, EXIT_SOCKET};
use register::Args;

const USAGE: &str = "register-client --replicas IP:PORT,IP:PORT,IP:PORT --writes N [--interval-ms M] \
                     [--settle-ms S] [--write-budget-ms W] [--read-budget-ms R] [--bind IP:PORT] \
                     [--check assert|history]";

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
    let mut client = Client {
        socket,
        target: replicas[0],
        replicas,
        acked: BTreeMap::new(),
        writes,
        buf: vec![0u8; 65536],
        history,
    };

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
