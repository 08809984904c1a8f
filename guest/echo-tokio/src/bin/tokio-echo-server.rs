//! A line echo server over TCP on tokio: one task per connection.
//!
//! `tokio-echo-server --listen IP:PORT [--connections N] [--flavor current|multi]`
//!
//! Binds a `tokio::net::TcpListener` on `IP:PORT`, prints `listening on IP:PORT`, accepts `N`
//! connections (default 1) and `tokio::spawn`s a task for each (so connections are served
//! concurrently), printing `accepted <peer>`. Each task reads lines and writes every line back
//! until EOF, then prints `closed <peer> after <n> bytes` (`n` = bytes received), or
//! `error <peer> after <n> bytes: <kind>` if the connection failed. After the `N`th accept
//! the server stops accepting and exits once every task has finished.
//!
//! Exit codes: 0 after `N` connections were served; 2 usage error; 6 binding or accepting
//! failed.
use std::net::SocketAddr;

use echo::{Args, EXIT_OK, EXIT_OTHER_IO};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

const USAGE: &str = "tokio-echo-server --listen IP:PORT [--connections N] [--flavor current|multi]";

async fn serve(mut stream: TcpStream, received: &mut u64) -> std::io::Result<()> {
    let (read, mut write) = stream.split();
    let mut reader = BufReader::new(read);
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = reader.read_until(b'\n', &mut line).await?;
        if n == 0 {
            return Ok(());
        }
        *received += n as u64;
        write.write_all(&line).await?;
    }
}

async fn server(listen: SocketAddr, connections: u64) -> i32 {
    let listener = match TcpListener::bind(listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("bind {listen}: {e}");
            return EXIT_OTHER_IO;
        }
    };
    println!("listening on {}", listener.local_addr().unwrap_or(listen));
    let mut tasks = Vec::new();
    for _ in 0..connections {
        let (stream, peer) = match listener.accept().await {
            Ok(a) => a,
            Err(e) => {
                eprintln!("accept: {e}");
                return EXIT_OTHER_IO;
            }
        };
        println!("accepted {peer}");
        tasks.push(tokio::spawn(async move {
            let mut received = 0;
            match serve(stream, &mut received).await {
                Ok(()) => println!("closed {peer} after {received} bytes"),
                Err(e) => println!("error {peer} after {received} bytes: {:?}", e.kind()),
            }
        }));
    }
    drop(listener);
    for task in tasks {
        if let Err(e) = task.await {
            eprintln!("connection task failed: {e}");
            return EXIT_OTHER_IO;
        }
    }
    EXIT_OK
}

fn main() {
    let args = Args::parse(USAGE, &["listen", "connections", "flavor"]);
    let listen = args.addr("listen");
    let connections: u64 = args.get("connections", 1);
    echo_tokio::run(&args, USAGE, server(listen, connections));
}
