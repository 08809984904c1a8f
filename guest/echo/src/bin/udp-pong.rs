//! Answers UDP pings: the other half of `udp-ping`.
//!
//! `udp-pong --bind IP:PORT [--count N]`
//!
//! Binds a `UdpSocket` on `--bind`, prints `bound IP:PORT`, and answers every datagram
//! `ping K` with `pong K` sent back to its source, printing `pong K to <peer>`. Anything else is
//! ignored (printed as `ignored <n> bytes from <peer>`). With `--count N` it exits after
//! answering `N` pings; without it it runs forever.
//!
//! Exit codes: 0 after `N` pings; 2 usage error; 6 binding or receiving failed.
use std::net::UdpSocket;
use std::process;

use echo::{Args, EXIT_OK, EXIT_OTHER_IO};

const USAGE: &str = "udp-pong --bind IP:PORT [--count N]";

fn main() {
    let args = Args::parse(USAGE, &["bind", "count"]);
    let bind = args.addr("bind");
    let count: u64 = args.get("count", u64::MAX);

    let socket = UdpSocket::bind(bind).unwrap_or_else(|e| {
        eprintln!("bind {bind}: {e}");
        process::exit(EXIT_OTHER_IO);
    });
    println!("bound {}", socket.local_addr().unwrap_or(bind));

    let mut buf = [0u8; 1500];
    let mut answered = 0;
    while answered < count {
        let (n, from) = match socket.recv_from(&mut buf) {
            Ok(r) => r,
            // Linux reports an earlier ICMP error on a later receive; it is not ours to handle.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => continue,
            Err(e) => {
                eprintln!("recv: {e}");
                process::exit(EXIT_OTHER_IO);
            }
        };
        let k = std::str::from_utf8(&buf[..n])
            .ok()
            .and_then(|s| s.strip_prefix("ping "))
            .and_then(|k| k.parse::<u64>().ok());
        let Some(k) = k else {
            println!("ignored {n} bytes from {from}");
            continue;
        };
        let pong = format!("pong {k}");
        match socket.send_to(pong.as_bytes(), from) {
            Ok(_) => println!("pong {k} to {from}"),
            Err(e) => println!("send to {from} failed: {:?}", e.kind()),
        }
        answered += 1;
    }
    process::exit(EXIT_OK);
}
