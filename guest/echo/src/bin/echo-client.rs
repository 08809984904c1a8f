//! A line echo client over TCP, with nothing but `std::net`.
//!
//! `echo-client --connect IP:PORT [--messages N] [--connect-timeout-ms T] [--retry-for-ms R]`
//!
//! Connects with `TcpStream::connect_timeout` (`T` ms, default 1000). If that fails it prints
//! `connect attempt K failed: <error kind>`; when `R` > 0 (default 0) it sleeps 100 ms and tries
//! again until `R` ms have passed since the first attempt (measured with `Instant`). Once
//! connected it prints `connected to IP:PORT`, sends `N` lines (default 3) `hello 1` ..
//! `hello N`, reading each echo back before sending the next and printing `echoed: hello K`,
//! then shuts down its write half, closes the connection and prints `done`.
//!
//! Exit codes:
//! * 0 every line came back;
//! * 2 usage error;
//! * 3 connecting failed and the last attempt timed out (`TimedOut`);
//! * 4 connecting failed and the last attempt was refused (`ConnectionRefused`);
//! * 5 the connection was reset or closed early, or an echo did not match;
//! * 6 any other I/O error (for example `NetworkUnreachable` while connecting).
use std::io::{BufRead, BufReader, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::process;
use std::thread;
use std::time::{Duration, Instant};

use echo::{connect_exit_code, stream_exit_code, Args, EXIT_BROKEN, EXIT_OK};

const USAGE: &str = "echo-client --connect IP:PORT [--messages N] [--connect-timeout-ms T] [--retry-for-ms R]";

fn connect(addr: SocketAddr, timeout: Duration, retry_for: Duration) -> TcpStream {
    let start = Instant::now();
    let mut attempt = 0;
    loop {
        attempt += 1;
        match TcpStream::connect_timeout(&addr, timeout) {
            Ok(stream) => return stream,
            Err(e) => {
                println!("connect attempt {attempt} failed: {:?}", e.kind());
                if start.elapsed() >= retry_for {
                    process::exit(connect_exit_code(e.kind()));
                }
                thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

fn main() {
    let args = Args::parse(USAGE, &["connect", "messages", "connect-timeout-ms", "retry-for-ms"]);
    let addr = args.addr("connect");
    let messages: u64 = args.get("messages", 3);
    let timeout_ms: u64 = args.get("connect-timeout-ms", 1000);
    let retry_for_ms: u64 = args.get("retry-for-ms", 0);
    if timeout_ms == 0 {
        echo::usage_error(USAGE, "--connect-timeout-ms must be positive");
    }

    let stream = connect(addr, Duration::from_millis(timeout_ms), Duration::from_millis(retry_for_ms));
    println!("connected to {addr}");

    let fail = |what: &str, e: std::io::Error| -> ! {
        println!("{what} failed: {:?}", e.kind());
        process::exit(stream_exit_code(e.kind()));
    };
    let mut reader = BufReader::new(&stream);
    let mut writer = &stream;
    let mut reply = String::new();
    for k in 1..=messages {
        let line = format!("hello {k}\n");
        if let Err(e) = writer.write_all(line.as_bytes()) {
            fail("write", e);
        }
        reply.clear();
        match reader.read_line(&mut reply) {
            Err(e) => fail("read", e),
            Ok(0) => {
                println!("connection closed before echo of hello {k}");
                process::exit(EXIT_BROKEN);
            }
            Ok(_) if reply != line => {
                println!("mismatch: sent {:?}, got {:?}", line.trim_end(), reply);
                process::exit(EXIT_BROKEN);
            }
            Ok(_) => println!("echoed: {}", line.trim_end()),
        }
    }
    if let Err(e) = stream.shutdown(Shutdown::Write) {
        fail("shutdown", e);
    }
    drop(reader);
    drop(stream);
    println!("done");
    process::exit(EXIT_OK);
}
