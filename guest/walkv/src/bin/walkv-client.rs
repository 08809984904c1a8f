//! The client of the write-ahead-log service in a cluster.
//!
//! `walkv-client --server IP:PORT --writes N [--interval-ms M] [--settle-ms S]`
//!
//! 1. Waits for the server to answer, then calls `setup_complete`.
//! 2. Writes `kI = I` for I in 1..=N, `M` ms apart (default 20), each retried (after a
//!    reconnect) until acknowledged or 2 s have passed; a write given up stays open in the
//!    history (it may have happened).
//! 3. Waits `S` ms (default 300), then reads every key back.
//! 4. Records every operation in a `kv` history (`deja_sdk::history`) and asserts that every
//!    acknowledged write reads back its value: `acknowledged writes survive`.
//!
//! Exit codes: 0 every acknowledged write survived; 1 one did not; 2 usage error; 3 the
//! server stopped answering.
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use deja_sdk::serde_json::json;
use deja_sdk::{assert_always, lifecycle};
use walkv::{Args, Client};

const USAGE: &str = "walkv-client --server IP:PORT --writes N [--interval-ms M] [--settle-ms S]";

fn main() {
    let args = Args::parse(USAGE, &["server", "writes", "interval-ms", "settle-ms"]);
    let writes: u64 = args.required("writes");
    let interval = Duration::from_millis(args.get("interval-ms", 20));
    let settle = Duration::from_millis(args.get("settle-ms", 300));
    let mut client = Client::new(args.addr("server"));
    if client.until_answered("get k0", Instant::now() + Duration::from_secs(10)).is_none() {
        println!("walkv-client: the server never answered");
        std::process::exit(3);
    }
    lifecycle::setup_complete(&json!({ "writes": writes }));
    let mut acked = BTreeMap::new();
    for i in 1..=writes {
        let key = format!("k{i}");
        if client.put(&key, &i.to_string(), Duration::from_secs(2)) {
            acked.insert(key, i.to_string());
        } else {
            println!("walkv-client: write {key} unacknowledged");
        }
        std::thread::sleep(interval);
    }
    std::thread::sleep(settle);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut lost = Vec::new();
    for i in 1..=writes {
        let key = format!("k{i}");
        match client.get(&key, deadline) {
            Some(got) => {
                if let Some(want) = acked.get(&key) {
                    if got.as_ref() != Some(want) {
                        println!(
                            "walkv-client: read {key} -> {} but {want} was acknowledged",
                            got.as_deref().unwrap_or("none")
                        );
                        lost.push(key);
                    }
                }
            }
            None => {
                println!("walkv-client: the server stopped answering");
                std::process::exit(3);
            }
        }
    }
    println!("walkv-client: acknowledged {} of {writes} writes; lost: {lost:?}", acked.len());
    assert_always!(lost.is_empty(), "acknowledged writes survive", &json!({ "lost": lost }));
    if !lost.is_empty() {
        std::process::exit(1);
    }
}
