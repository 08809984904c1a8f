//! A client of an etcd cluster for deja: puts and linearizable gets of one key through etcd's
//! JSON gateway (`POST /v3/kv/put`, `POST /v3/kv/range`, the v3 API over HTTP/1.1), each
//! recorded as a `deja_sdk::history` operation on a register, for deja's linearizability
//! checker. It asserts nothing itself and exits 0 once its operations are done.
//!
//! `etcd-client --endpoints IP:PORT,IP:PORT,... --ops N [--key K] [--interval-ms M]
//! [--timeout-ms T]`
//!
//! Each operation is a put of the next value (`1`, `2`, ...) or a get, chosen by a deja random
//! decision, sent to an endpoint chosen by another. A put that got no answer, or an error, may
//! still take effect (etcd may have committed it), so it stays open in the history. A get that
//! failed certainly changed nothing. Between operations it sleeps `M` ms (default 200).
//!
//! Exit codes: 0 done; 2 usage error.
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use deja_sdk::serde_json::{self, json, Value};
use deja_sdk::{history, random};

const USAGE: &str =
    "etcd-client --endpoints IP:PORT,IP:PORT,... --ops N [--key K] [--interval-ms M] [--timeout-ms T]";

struct Args {
    endpoints: Vec<SocketAddr>,
    ops: u64,
    key: String,
    interval: Duration,
    timeout: Duration,
}

fn usage(why: &str) -> ! {
    eprintln!("etcd-client: {why}\nusage: {USAGE}");
    std::process::exit(2);
}

fn args() -> Args {
    let mut a = Args {
        endpoints: Vec::new(),
        ops: 0,
        key: "k".into(),
        interval: Duration::from_millis(200),
        timeout: Duration::from_millis(1000),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_else(|| usage(&format!("{flag} needs a value")));
        let num = |v: &str| v.parse::<u64>().unwrap_or_else(|_| usage(&format!("{flag} {v}: not a number")));
        match flag.as_str() {
            "--endpoints" => {
                a.endpoints = value
                    .split(',')
                    .map(|e| e.parse().unwrap_or_else(|_| usage(&format!("{e}: not IP:PORT"))))
                    .collect()
            }
            "--ops" => a.ops = num(&value),
            "--key" => a.key = value,
            "--interval-ms" => a.interval = Duration::from_millis(num(&value)),
            "--timeout-ms" => a.timeout = Duration::from_millis(num(&value)),
            _ => usage(&format!("unknown flag {flag}")),
        }
    }
    if a.endpoints.is_empty() || a.ops == 0 {
        usage("give --endpoints and --ops");
    }
    a
}

/// One POST of `body` to `path` on `to`: the HTTP status and the body of the answer.
fn post(to: SocketAddr, path: &str, body: &Value, timeout: Duration) -> std::io::Result<(u32, Vec<u8>)> {
    let mut s = TcpStream::connect_timeout(&to, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    let body = serde_json::to_vec(body).expect("JSON");
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {to}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes())?;
    s.write_all(&body)?;
    let mut answer = Vec::new();
    s.read_to_end(&mut answer)?;
    let bad = || std::io::Error::new(std::io::ErrorKind::InvalidData, "not an HTTP answer");
    let split = answer.windows(4).position(|w| w == b"\r\n\r\n").ok_or_else(bad)?;
    let head = String::from_utf8_lossy(&answer[..split]).to_ascii_lowercase();
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).ok_or_else(bad)?;
    let mut body = answer[split + 4..].to_vec();
    if head.contains("transfer-encoding: chunked") {
        body = unchunk(&body).ok_or_else(bad)?;
    }
    Ok((status, body))
}

/// The bytes of a chunked HTTP body.
fn unchunk(mut b: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line = b.windows(2).position(|w| w == b"\r\n")?;
        let size = usize::from_str_radix(std::str::from_utf8(&b[..line]).ok()?.split(';').next()?.trim(), 16).ok()?;
        b = &b[line + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(b.get(..size)?);
        b = b.get(size + 2..)?;
    }
}

fn main() {
    let a = args();
    let key = B64.encode(&a.key);
    let mut next = 1u64;
    for _ in 0..a.ops {
        let to = *random::random_choice(&a.endpoints).expect("endpoints");
        if random::get_random() % 2 == 0 {
            let v = next;
            next += 1;
            let op = history::invoke("register", "write", json!(v));
            let body = json!({ "key": key, "value": B64.encode(v.to_string()) });
            match post(to, "/v3/kv/put", &body, a.timeout) {
                Ok((200, _)) => {
                    println!("put {v} to {to}: ok");
                    op.ok(Value::Null);
                }
                // etcd may have committed it: its outcome is unknown.
                Ok((status, b)) => {
                    println!("put {v} to {to}: HTTP {status} {}", String::from_utf8_lossy(&b).trim());
                    op.info();
                }
                Err(e) => {
                    println!("put {v} to {to}: {:?}", e.kind());
                    op.info();
                }
            }
        } else {
            let op = history::invoke("register", "read", Value::Null);
            match post(to, "/v3/kv/range", &json!({ "key": key }), a.timeout) {
                Ok((200, b)) => {
                    let answer: Value = serde_json::from_slice(&b).unwrap_or(Value::Null);
                    let value = answer["kvs"][0]["value"]
                        .as_str()
                        .and_then(|v| B64.decode(v).ok())
                        .and_then(|v| String::from_utf8(v).ok()?.parse::<u64>().ok());
                    match (answer.get("header"), value) {
                        (Some(_), v) => {
                            println!("get from {to}: {v:?}");
                            op.ok(v.map_or(Value::Null, |v| json!(v)));
                        }
                        (None, _) => {
                            println!("get from {to}: unreadable answer");
                            op.fail();
                        }
                    }
                }
                Ok((status, _)) => {
                    println!("get from {to}: HTTP {status}");
                    op.fail();
                }
                Err(e) => {
                    println!("get from {to}: {:?}", e.kind());
                    op.fail();
                }
            }
        }
        std::thread::sleep(a.interval);
    }
}
