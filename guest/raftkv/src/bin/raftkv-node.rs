//! A node of the replicated key-value service.
//!
//! `raftkv-node --id N --listen IP:PORT --peers 1=IP:PORT,2=IP:PORT,3=IP:PORT --data DIR
//! [--variant fixed|buggy]`
//!
//! Opens its log under `DIR` (replaying what survived a crash), starts openraft on a
//! current-thread tokio runtime, and serves the line protocol of the crate's docs on `--listen`.
//! On its first boot (an empty log and no vote) node 1 initializes the cluster with the three
//! members. Runs until killed.
//!
//! Exit codes: 2 usage error; 6 the log or the listening socket could not be opened; 7 openraft
//! stopped (a fatal storage error).
use std::collections::{BTreeMap, BTreeSet};
use std::process;
use std::sync::Arc;

use deja_sdk::lifecycle;
use deja_sdk::serde_json::json;
use openraft::error::{CheckIsLeaderError, ClientWriteError, RaftError};
use openraft::{BasicNode, Config, SnapshotPolicy};
use raftkv::store::{LogStore, StateMachine};
use raftkv::{net, Args, Raft, Request, Variant};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

const USAGE: &str =
    "raftkv-node --id N --listen IP:PORT --peers 1=IP:PORT,2=IP:PORT,3=IP:PORT --data DIR [--variant fixed|buggy]";

fn main() {
    let args = Args::parse(USAGE, &["id", "listen", "peers", "data", "variant"]);
    let id: u64 = args.required("id");
    let listen: String = args.required("listen");
    let data: String = args.required("data");
    let variant: Variant = args.get("variant", Variant::Fixed);
    let peers_text: String = args.required("peers");
    let mut peers = BTreeMap::new();
    for p in peers_text.split(',').filter(|s| !s.is_empty()) {
        let Some((n, addr)) = p.split_once('=') else { args.error(&format!("bad peer {p:?} (ID=IP:PORT)")) };
        let Ok(n) = n.parse::<u64>() else { args.error(&format!("bad peer id in {p:?}")) };
        peers.insert(n, BasicNode { addr: addr.to_string() });
    }
    if !peers.contains_key(&id) {
        args.error("--peers must name this node's --id");
    }
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap_or_else(|e| {
        eprintln!("tokio runtime: {e}");
        process::exit(6)
    });
    rt.block_on(run(id, listen, data, variant, peers));
}

async fn run(id: u64, listen: String, data: String, variant: Variant, peers: BTreeMap<u64, BasicNode>) {
    let log = LogStore::open(std::path::Path::new(&data), variant).unwrap_or_else(|e| {
        eprintln!("opening the log under {data}: {e}");
        process::exit(6)
    });
    let (entries, vote) = log.summary();
    println!(
        "node {id} ({variant:?}) recovered {entries} log entries, vote {}",
        vote.map_or("none".into(), |v| v.to_string())
    );
    let config = Config {
        cluster_name: "raftkv".into(),
        heartbeat_interval: 100,
        election_timeout_min: 400,
        election_timeout_max: 800,
        snapshot_policy: SnapshotPolicy::Never,
        ..Default::default()
    };
    let config = Arc::new(config.validate().expect("a valid openraft config"));
    let sm = StateMachine::default();
    let state = sm.data.clone();
    let raft = Raft::new(id, config, net::Network, log, sm).await.unwrap_or_else(|e| {
        eprintln!("openraft: {e}");
        process::exit(7)
    });
    let listener = TcpListener::bind(&listen).await.unwrap_or_else(|e| {
        eprintln!("listening on {listen}: {e}");
        process::exit(6)
    });
    if id == 1 && entries == 0 && vote.is_none() {
        match raft.initialize(peers.clone()).await {
            Ok(()) => println!("node {id} initialized the cluster {:?}", peers.keys().collect::<BTreeSet<_>>()),
            Err(e) => println!("node {id} initialize: {e}"),
        }
    }
    lifecycle::setup_complete(&json!({ "id": id, "listen": listen }));
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let raft = raft.clone();
                let state = state.clone();
                tokio::spawn(async move { serve(stream, raft, state).await });
            }
            Err(e) => println!("accept: {e}"),
        }
    }
}

type Shared = Arc<std::sync::Mutex<raftkv::store::Data>>;

/// Serves one connection, one request per line, answers in order.
async fn serve(stream: TcpStream, raft: Raft, state: Shared) {
    let _ = stream.set_nodelay(true);
    let mut conn = BufReader::new(stream);
    let mut line = String::new();
    loop {
        line.clear();
        match conn.read_line(&mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let answer = answer(line.trim_end(), &raft, &state).await;
        if conn.get_mut().write_all(format!("{answer}\n").as_bytes()).await.is_err() {
            return;
        }
    }
}

fn to_json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_else(|e| format!("\"unserializable: {e}\""))
}

fn redirect(leader: Option<u64>) -> String {
    leader.map_or("redirect none".to_string(), |l| format!("redirect {l}"))
}

async fn answer(line: &str, raft: &Raft, state: &Shared) -> String {
    let (verb, rest) = line.split_once(' ').unwrap_or((line, ""));
    match verb {
        "raft-append" => match serde_json::from_str(rest) {
            Ok(rpc) => to_json(&raft.append_entries(rpc).await),
            Err(e) => format!("\"bad request: {e}\""),
        },
        "raft-vote" => match serde_json::from_str(rest) {
            Ok(rpc) => to_json(&raft.vote(rpc).await),
            Err(e) => format!("\"bad request: {e}\""),
        },
        "raft-snapshot" => match serde_json::from_str(rest) {
            Ok(rpc) => to_json(&raft.install_snapshot(rpc).await),
            Err(e) => format!("\"bad request: {e}\""),
        },
        "put" => {
            let mut words = rest.split_whitespace();
            let (Some(key), Some(value), None) = (words.next(), words.next(), words.next()) else {
                return "err usage: put KEY VALUE".into();
            };
            let req = Request { key: key.into(), value: value.into() };
            match raft.client_write(req).await {
                Ok(_) => "ok".into(),
                Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => redirect(f.leader_id),
                Err(e) => format!("err {e}"),
            }
        }
        "get" => {
            let key = rest.trim();
            if key.is_empty() || key.contains(' ') {
                return "err usage: get KEY".into();
            }
            match raft.ensure_linearizable().await {
                Ok(_) => match state.lock().unwrap().kv.get(key) {
                    Some(v) => format!("value {v}"),
                    None => "none".into(),
                },
                Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f))) => redirect(f.leader_id),
                Err(e) => format!("err {e}"),
            }
        }
        _ => "err unknown request".into(),
    }
}
