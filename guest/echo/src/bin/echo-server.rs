//! A line echo server over TCP, with nothing but `std::net`.
//!
//! `echo-server --listen IP:PORT [--connections N]`
//!
//! Binds a `TcpListener` on `IP:PORT`, prints `listening on IP:PORT`, then accepts `N`
//! connections (default 1) one after the other. On each it reads lines and writes every line
//! back unchanged (a last line without a newline is echoed too) until the peer closes its write
//! half, then prints `closed <peer> after <n> bytes` (`n` = bytes received). A connection that
//! fails mid-way prints `error <peer> after <n> bytes: <kind>` and still counts.
//!
//! Exit codes: 0 after `N` connections; 2 usage error; 6 binding or accepting failed.
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process;

use echo::{Args, EXIT_OK, EXIT_OTHER_IO};

const USAGE: &str = "echo-server --listen IP:PORT [--connections N]";

/// Echoes lines until EOF; returns the number of bytes received.
fn serve(stream: &TcpStream, received: &mut u64) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream);
    let mut writer = stream;
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = reader.read_until(b'\n', &mut line)?;
        if n == 0 {
            return Ok(());
        }
        *received += n as u64;
        writer.write_all(&line)?;
    }
}

fn main() {
    let args = Args::parse(USAGE, &["listen", "connections"]);
    let listen: SocketAddr = args.addr("listen");
    let connections: u64 = args.get("connections", 1);

    let listener = TcpListener::bind(listen).unwrap_or_else(|e| {
        eprintln!("bind {listen}: {e}");
        process::exit(EXIT_OTHER_IO);
    });
    let local = listener.local_addr().unwrap_or(listen);
    println!("listening on {local}");

    for _ in 0..connections {
        let (stream, peer) = listener.accept().unwrap_or_else(|e| {
            eprintln!("accept: {e}");
            process::exit(EXIT_OTHER_IO);
        });
        println!("accepted {peer}");
        let mut received = 0;
        match serve(&stream, &mut received) {
            Ok(()) => println!("closed {peer} after {received} bytes"),
            Err(e) => println!("error {peer} after {received} bytes: {:?}", e.kind()),
        }
        // Dropping the stream closes it.
    }
    process::exit(EXIT_OK);
}
