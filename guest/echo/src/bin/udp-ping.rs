//! Measures a UDP path: sends numbered pings and counts the pongs that come back in time.
//!
//! `udp-ping --bind IP:PORT --peer IP:PORT --count N [--timeout-ms T] [--interval-ms I]`
//!
//! Binds a `UdpSocket` on `--bind` and, for K = 1..N, sends the datagram `ping K` to `--peer`,
//! then waits up to `T` ms (default 1000; `set_read_timeout`) for `pong K` from the peer,
//! printing `pong K` or `lost K`. Datagrams from other addresses and stale pongs (of earlier
//! pings) are skipped without extending the wait. After a pong it waits `I` ms (default 0)
//! before the next ping. Ends with `sent N received M`.
//!
//! Exit codes: 0 always once the socket is bound (it is a measurement tool; read the counts);
//! 2 usage error; 6 binding failed.
use std::net::{SocketAddr, UdpSocket};
use std::process;
use std::thread;
use std::time::{Duration, Instant};

use echo::{Args, EXIT_OK, EXIT_OTHER_IO};

const USAGE: &str = "udp-ping --bind IP:PORT --peer IP:PORT --count N [--timeout-ms T] [--interval-ms I]";

/// Waits for `pong k` from `peer` until `deadline`; true if it came.
fn wait_pong(socket: &UdpSocket, peer: SocketAddr, k: u64, deadline: Instant) -> bool {
    let expected = format!("pong {k}");
    let mut buf = [0u8; 1500];
    loop {
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        if socket.set_read_timeout(Some(deadline - now)).is_err() {
            return false;
        }
        match socket.recv_from(&mut buf) {
            Ok((n, from)) => {
                if from == peer && &buf[..n] == expected.as_bytes() {
                    return true;
                }
                // A late pong, or a stranger: keep waiting for ours.
            }
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                return false
            }
            Err(e) => {
                println!("recv error: {:?}", e.kind());
                // Do not spin on a persistent error: wait out the rest of the timeout.
                thread::sleep(deadline.saturating_duration_since(Instant::now()));
                return false;
            }
        }
    }
}

fn main() {
    let args = Args::parse(USAGE, &["bind", "peer", "count", "timeout-ms", "interval-ms"]);
    let bind = args.addr("bind");
    let peer = args.addr("peer");
    let count: u64 = args.required("count");
    let timeout = Duration::from_millis(args.get("timeout-ms", 1000));
    let interval = Duration::from_millis(args.get("interval-ms", 0));
    if timeout.is_zero() {
        echo::usage_error(USAGE, "--timeout-ms must be positive");
    }

    let socket = UdpSocket::bind(bind).unwrap_or_else(|e| {
        eprintln!("bind {bind}: {e}");
        process::exit(EXIT_OTHER_IO);
    });
    println!("bound {}", socket.local_addr().unwrap_or(bind));

    let mut received = 0;
    for k in 1..=count {
        let ping = format!("ping {k}");
        let sent_at = Instant::now();
        if let Err(e) = socket.send_to(ping.as_bytes(), peer) {
            // Still counts as sent (and lost): the measurement is of the path.
            println!("send error: {:?}", e.kind());
        }
        if wait_pong(&socket, peer, k, sent_at + timeout) {
            received += 1;
            println!("pong {k}");
            if !interval.is_zero() {
                thread::sleep(interval);
            }
        } else {
            println!("lost {k}");
        }
    }
    println!("sent {count} received {received}");
    process::exit(EXIT_OK);
}
