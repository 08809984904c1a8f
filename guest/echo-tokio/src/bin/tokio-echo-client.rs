//! A line echo client over TCP on tokio.
//!
//! `tokio-echo-client --connect IP:PORT [--messages N] [--connect-timeout-ms T]
//! [--retry-for-ms R] [--flavor current|multi]`
//!
//! Connects with `tokio::net::TcpStream::connect` wrapped in `tokio::time::timeout` (`T` ms,
//! default 1000; running out counts as `TimedOut`). If that fails it prints
//! `connect attempt K failed: <error kind>`; when `R` > 0 (default 0) it sleeps 100 ms
//! (`tokio::time::sleep`) and tries again until `R` ms have passed since the first attempt
//! (measured with `std::time::Instant`). Once connected it prints `connected to IP:PORT`, sends
//! `N` lines (default 3) `hello 1` .. `hello N`, reading each echo back before sending the next
//! and printing `echoed: hello K`, then shuts down its write half, closes the connection and
//! prints `done`.
//!
//! Exit codes (as `echo-client`):
//! * 0 every line came back;
//! * 2 usage error;
//! * 3 connecting failed and the last attempt timed out;
//! * 4 connecting failed and the last attempt was refused (`ConnectionRefused`);
//! * 5 the connection was reset or closed early, or an echo did not match;
//! * 6 any other I/O error (for example `NetworkUnreachable` while connecting).
use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use echo::{connect_exit_code, stream_exit_code, Args, EXIT_BROKEN, EXIT_OK};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

const USAGE: &str = "tokio-echo-client --connect IP:PORT [--messages N] [--connect-timeout-ms T] \
                     [--retry-for-ms R] [--flavor current|multi]";

async fn connect(addr: SocketAddr, timeout: Duration, retry_for: Duration) -> Result<TcpStream, i32> {
    let start = Instant::now();
    let mut attempt = 0;
    loop {
        attempt += 1;
        let result = match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
            Ok(r) => r,
            Err(_elapsed) => Err(io::Error::from(io::ErrorKind::TimedOut)),
        };
        match result {
            Ok(stream) => return Ok(stream),
            Err(e) => {
                println!("connect attempt {attempt} failed: {:?}", e.kind());
                if start.elapsed() >= retry_for {
                    return Err(connect_exit_code(e.kind()));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn client(addr: SocketAddr, messages: u64, timeout: Duration, retry_for: Duration) -> i32 {
    let mut stream = match connect(addr, timeout, retry_for).await {
        Ok(s) => s,
        Err(code) => return code,
    };
    println!("connected to {addr}");

    let fail = |what: &str, e: io::Error| -> i32 {
        println!("{what} failed: {:?}", e.kind());
        stream_exit_code(e.kind())
    };
    let (read, mut write) = stream.split();
    let mut reader = BufReader::new(read);
    let mut reply = String::new();
    for k in 1..=messages {
        let line = format!("hello {k}\n");
        if let Err(e) = write.write_all(line.as_bytes()).await {
            return fail("write", e);
        }
        reply.clear();
        match reader.read_line(&mut reply).await {
            Err(e) => return fail("read", e),
            Ok(0) => {
                println!("connection closed before echo of hello {k}");
                return EXIT_BROKEN;
            }
            Ok(_) if reply != line => {
                println!("mismatch: sent {:?}, got {:?}", line.trim_end(), reply);
                return EXIT_BROKEN;
            }
            Ok(_) => println!("echoed: {}", line.trim_end()),
        }
    }
    if let Err(e) = write.shutdown().await {
        return fail("shutdown", e);
    }
    drop(reader);
    drop(stream);
    println!("done");
    EXIT_OK
}

fn main() {
    let args = Args::parse(USAGE, &["connect", "messages", "connect-timeout-ms", "retry-for-ms", "flavor"]);
    let addr = args.addr("connect");
    let messages: u64 = args.get("messages", 3);
    let timeout_ms: u64 = args.get("connect-timeout-ms", 1000);
    let retry_for_ms: u64 = args.get("retry-for-ms", 0);
    if timeout_ms == 0 {
        echo::usage_error(USAGE, "--connect-timeout-ms must be positive");
    }
    let main = client(addr, messages, Duration::from_millis(timeout_ms), Duration::from_millis(retry_for_ms));
    echo_tokio::run(&args, USAGE, main);
}
