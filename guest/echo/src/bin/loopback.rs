//! Sockets and pipes inside one program, over loopback: a TCP echo between two threads, a UDP
//! round trip, a pipe, and the errors a program meets (refused connect, address in use, reads
//! that would block, a peer that went away).
//!
//! `loopback`: prints one line per check and exits 0 when every check passed, 1 otherwise.
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream, UdpSocket};
use std::time::Duration;

fn check(ok: bool, what: &str, failures: &mut u32) {
    println!("{} {what}", if ok { "ok" } else { "FAILED" });
    if !ok {
        *failures += 1;
    }
}

fn main() {
    let mut failures = 0;

    // TCP: a listener on an ephemeral port, an echo thread, a client.
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("local_addr");
    check(addr.port() != 0, "an ephemeral port is assigned", &mut failures);
    check(
        TcpListener::bind(addr).err().map(|e| e.kind()) == Some(ErrorKind::AddrInUse),
        "binding the same port again is EADDRINUSE",
        &mut failures,
    );
    let server = std::thread::spawn(move || {
        let (mut s, peer) = listener.accept().expect("accept");
        let mut buf = [0u8; 64];
        let mut total = 0;
        loop {
            let n = s.read(&mut buf).expect("server read");
            if n == 0 {
                break;
            }
            total += n;
            s.write_all(&buf[..n]).expect("server write");
        }
        (peer, total)
    });
    let mut c = TcpStream::connect(addr).expect("connect");
    c.set_nodelay(true).expect("nodelay");
    c.write_all(b"hello over loopback").expect("write");
    let mut back = [0u8; 19];
    c.read_exact(&mut back).expect("read back");
    check(&back == b"hello over loopback", "TCP echo between two threads", &mut failures);
    c.set_read_timeout(Some(Duration::from_millis(50))).expect("timeout");
    let e = c.read(&mut back).err().map(|e| e.kind());
    check(e == Some(ErrorKind::WouldBlock), "a read with nothing to read times out", &mut failures);
    c.shutdown(Shutdown::Write).expect("shutdown");
    let (peer, total) = server.join().expect("server thread");
    check(peer == c.local_addr().expect("local") && total == 19, "the server saw the client's address and bytes", &mut failures);
    check(c.read(&mut back).map(|n| n == 0).unwrap_or(false), "end of file after the server closed", &mut failures);

    let refused = TcpStream::connect(addr).err().map(|e| e.kind());
    check(refused == Some(ErrorKind::ConnectionRefused), "connecting to a closed port is refused", &mut failures);

    // UDP round trip.
    let a = UdpSocket::bind("127.0.0.1:0").expect("udp bind");
    let b = UdpSocket::bind("127.0.0.1:0").expect("udp bind");
    a.send_to(b"ping", b.local_addr().unwrap()).expect("send_to");
    let mut buf = [0u8; 16];
    let (n, from) = b.recv_from(&mut buf).expect("recv_from");
    check(&buf[..n] == b"ping" && from == a.local_addr().unwrap(), "UDP datagram with its sender", &mut failures);
    b.set_nonblocking(true).expect("nonblocking");
    let e = b.recv_from(&mut buf).err().map(|e| e.kind());
    check(e == Some(ErrorKind::WouldBlock), "a non-blocking UDP read with nothing queued", &mut failures);

    // A pipe between two threads.
    let (mut r, mut w) = std::io::pipe().expect("pipe");
    let writer = std::thread::spawn(move || {
        w.write_all(b"through the pipe").expect("pipe write");
    });
    let mut s = String::new();
    r.read_to_string(&mut s).expect("pipe read");
    writer.join().expect("writer");
    check(s == "through the pipe", "a pipe carries bytes and ends when the writer closes", &mut failures);

    println!("loopback: {failures} failures");
    std::process::exit(i32::from(failures > 0));
}
