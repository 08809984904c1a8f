//! Sockets, pipes, eventfds, epoll and poll in one kernel: loopback, blocking, readiness, a
//! networked node's idle state and packets, and hostile arguments.

use super::*;
use crate::net::{Packet, Payload, SockAddr};

const AF_INET: u64 = 2;
const SOCK_STREAM: u64 = 1;
const SOCK_DGRAM: u64 = 2;
const SOCK_NONBLOCK: u64 = 0o4000;
const EAGAIN: i64 = -11;
const EPIPE: i64 = -32;
const ENOTSOCK: i64 = -88;
const EAFNOSUPPORT: i64 = -97;
const EADDRINUSE: i64 = -98;
const ECONNREFUSED: i64 = -111;
const ENETUNREACH: i64 = -101;
const EINPROGRESS: i64 = -115;
const EISCONN: i64 = -106;
const ENOTCONN: i64 = -107;
const EPERM: i64 = -1;

/// Writes a `sockaddr_in` at `at`.
fn sockaddr(k: &Kernel, m: &mut FakeMemory, at: u64, ip: [u8; 4], port: u16) -> u64 {
    let mut b = [0u8; 16];
    b[..2].copy_from_slice(&2u16.to_le_bytes());
    b[2..4].copy_from_slice(&port.to_be_bytes());
    b[4..8].copy_from_slice(&ip);
    poke(k, m, at, &b);
    at
}

fn read_sockaddr(k: &Kernel, m: &mut FakeMemory, at: u64) -> SockAddr {
    let b = peek(k, m, at, 8);
    SockAddr::new([b[4], b[5], b[6], b[7]], u16::from_be_bytes([b[2], b[3]]))
}

/// A listener on 127.0.0.1:`port` and a connected pair: (listener, client, server side).
pub(super) fn tcp_pair(k: &mut Kernel, m: &mut FakeMemory, buf: u64, port: u16) -> (u64, u64, u64) {
    let l = sc(k, m, "socket", &[AF_INET, SOCK_STREAM, 0]) as u64;
    let a = sockaddr(k, m, buf, [127, 0, 0, 1], port);
    assert_eq!(sc(k, m, "bind", &[l, a, 16]), 0);
    assert_eq!(sc(k, m, "listen", &[l, 16]), 0);
    let c = sc(k, m, "socket", &[AF_INET, SOCK_STREAM, 0]) as u64;
    // Loopback completes the handshake inside the call.
    assert_eq!(sc(k, m, "connect", &[c, a, 16]), 0);
    let s = sc(k, m, "accept4", &[l, buf + 64, buf + 128, 0]);
    assert!(s > 0, "accept4: {s}");
    (l, c, s as u64)
}

#[test]
fn tcp_over_loopback_in_one_thread() {
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 8192);
    poke(&k, &mut m, buf + 128, &16u32.to_le_bytes());
    let (l, c, s) = tcp_pair(&mut k, &mut m, buf, 7000);
    let peer = read_sockaddr(&k, &mut m, buf + 64);
    assert_eq!(peer.v4(), Some([127, 0, 0, 1]));
    assert!(peer.port >= crate::net::EPHEMERAL_FIRST);
    poke(&k, &mut m, buf + 256, b"hello");
    assert_eq!(sc(&mut k, &mut m, "sendto", &[c, buf + 256, 5, 0, 0, 0]), 5);
    // MSG_PEEK leaves the bytes.
    assert_eq!(sc(&mut k, &mut m, "recvfrom", &[s, buf + 512, 64, 2, 0, 0]), 5);
    assert_eq!(sc(&mut k, &mut m, "read", &[s, buf + 512, 3]), 3);
    assert_eq!(peek(&k, &mut m, buf + 512, 3), b"hel");
    assert_eq!(sc(&mut k, &mut m, "read", &[s, buf + 512, 64]), 2);
    // Nothing left: a non-blocking read would block.
    assert_eq!(sc(&mut k, &mut m, "recvfrom", &[s, buf + 512, 64, 0x40, 0, 0]), EAGAIN);
    // Names.
    poke(&k, &mut m, buf + 1024, &16u32.to_le_bytes());
    assert_eq!(sc(&mut k, &mut m, "getpeername", &[c, buf + 1040, buf + 1024]), 0);
    assert_eq!(read_sockaddr(&k, &mut m, buf + 1040), SockAddr::new([127, 0, 0, 1], 7000));
    assert_eq!(sc(&mut k, &mut m, "getpeername", &[l, buf + 1040, buf + 1024]), ENOTCONN);
    assert_eq!(sc(&mut k, &mut m, "connect", &[c, buf, 16]), EISCONN);
    // Half close: the server reads end of file, can still write.
    assert_eq!(sc(&mut k, &mut m, "shutdown", &[c, 1]), 0);
    assert_eq!(sc(&mut k, &mut m, "read", &[s, buf + 512, 64]), 0);
    assert_eq!(sc(&mut k, &mut m, "write", &[s, buf + 256, 5]), 5);
    assert_eq!(sc(&mut k, &mut m, "read", &[c, buf + 512, 64]), 5);
    assert_eq!(sc(&mut k, &mut m, "write", &[c, buf + 256, 5]), EPIPE);
    assert!(k.signal_due(), "with SIGPIPE, taken on the way back to ring 3");
    assert_eq!(k.pending_signals(), vec![13]);
    k.sched.threads.threads.values_mut().for_each(|t| t.pending = Default::default());
    assert_eq!(sc(&mut k, &mut m, "sendto", &[c, buf + 256, 5, 0x4000, 0, 0]), EPIPE);
    assert!(!k.signal_due(), "MSG_NOSIGNAL");
    // The port is taken while the listener lives; refused once it is closed.
    let again = sc(&mut k, &mut m, "socket", &[AF_INET, SOCK_STREAM, 0]) as u64;
    assert_eq!(sc(&mut k, &mut m, "bind", &[again, buf, 16]), EADDRINUSE);
    assert_eq!(sc(&mut k, &mut m, "close", &[l]), 0);
    assert_eq!(sc(&mut k, &mut m, "connect", &[again, buf, 16]), ECONNREFUSED);
    // A refused socket can try again (and is refused again).
    assert_eq!(sc(&mut k, &mut m, "connect", &[again, buf, 16]), ECONNREFUSED);
}

#[test]
fn udp_datagrams_with_their_senders() {
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 8192);
    let a = sc(&mut k, &mut m, "socket", &[AF_INET, SOCK_DGRAM, 0]) as u64;
    let b = sc(&mut k, &mut m, "socket", &[AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0]) as u64;
    let addr_b = sockaddr(&k, &mut m, buf, [127, 0, 0, 1], 9000);
    assert_eq!(sc(&mut k, &mut m, "bind", &[b, addr_b, 16]), 0);
    let addr_a = sockaddr(&k, &mut m, buf + 32, [127, 0, 0, 1], 9001);
    assert_eq!(sc(&mut k, &mut m, "bind", &[a, addr_a, 16]), 0);
    poke(&k, &mut m, buf + 256, b"0123456789");
    assert_eq!(sc(&mut k, &mut m, "sendto", &[a, buf + 256, 10, 0, addr_b, 16]), 10);
    poke(&k, &mut m, buf + 128, &16u32.to_le_bytes());
    // A short buffer truncates the datagram; MSG_TRUNC reports its real length.
    assert_eq!(sc(&mut k, &mut m, "recvfrom", &[b, buf + 512, 4, 0x20, buf + 64, buf + 128]), 10);
    assert_eq!(peek(&k, &mut m, buf + 512, 4), b"0123");
    assert_eq!(read_sockaddr(&k, &mut m, buf + 64), SockAddr::new([127, 0, 0, 1], 9001));
    assert_eq!(sc(&mut k, &mut m, "recvfrom", &[b, buf + 512, 64, 0, 0, 0]), EAGAIN);
    // A connected datagram socket only hears its peer.
    let c = sc(&mut k, &mut m, "socket", &[AF_INET, SOCK_DGRAM, 0]) as u64;
    assert_eq!(sc(&mut k, &mut m, "bind", &[a, addr_a, 16]), EINVAL, "already bound");
    assert_eq!(sc(&mut k, &mut m, "connect", &[b, addr_a, 16]), 0);
    assert_eq!(sc(&mut k, &mut m, "sendto", &[c, buf + 256, 3, 0, addr_b, 16]), 3);
    assert_eq!(sc(&mut k, &mut m, "recvfrom", &[b, buf + 512, 64, 0, 0, 0]), EAGAIN, "dropped: not the peer");
    assert_eq!(sc(&mut k, &mut m, "sendto", &[a, buf + 256, 2, 0, addr_b, 16]), 2);
    assert_eq!(sc(&mut k, &mut m, "read", &[b, buf + 512, 64]), 2);
    // Without a network, other addresses are unreachable.
    let far = sockaddr(&k, &mut m, buf + 1024, [10, 0, 0, 9], 1);
    assert_eq!(sc(&mut k, &mut m, "sendto", &[a, buf + 256, 2, 0, far, 16]), ENETUNREACH);
}

#[test]
fn pipes_and_eventfds() {
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 4096);
    assert_eq!(sc(&mut k, &mut m, "pipe2", &[buf, 0o4000]), 0);
    let fds = peek(&k, &mut m, buf, 8);
    let (r, w) = (
        u32::from_le_bytes(fds[..4].try_into().unwrap()) as u64,
        u32::from_le_bytes(fds[4..].try_into().unwrap()) as u64,
    );
    assert_eq!(sc(&mut k, &mut m, "read", &[r, buf + 64, 8]), EAGAIN);
    poke(&k, &mut m, buf + 128, b"abc");
    assert_eq!(sc(&mut k, &mut m, "write", &[w, buf + 128, 3]), 3);
    assert_eq!(sc(&mut k, &mut m, "write", &[r, buf + 128, 3]), EBADF, "the read end");
    assert_eq!(sc(&mut k, &mut m, "read", &[r, buf + 64, 8]), 3);
    assert_eq!(sc(&mut k, &mut m, "lseek", &[r, 0, 0]), -29, "ESPIPE");
    assert_eq!(sc(&mut k, &mut m, "close", &[w]), 0);
    assert_eq!(sc(&mut k, &mut m, "read", &[r, buf + 64, 8]), 0, "end of file with no writer");
    assert_eq!(sc(&mut k, &mut m, "pipe2", &[buf, 0o4000]), 0);
    let fds = peek(&k, &mut m, buf, 8);
    let (r2, w2) = (
        u32::from_le_bytes(fds[..4].try_into().unwrap()) as u64,
        u32::from_le_bytes(fds[4..].try_into().unwrap()) as u64,
    );
    assert_eq!(sc(&mut k, &mut m, "close", &[r2]), 0);
    assert_eq!(sc(&mut k, &mut m, "write", &[w2, buf + 128, 3]), EPIPE);
    assert_eq!(sc(&mut k, &mut m, "pipe2", &[buf, 1]), EINVAL);

    // eventfd: counter semantics, semaphore mode.
    let e = sc(&mut k, &mut m, "eventfd2", &[3, 0o4000]) as u64;
    assert_eq!(sc(&mut k, &mut m, "read", &[e, buf + 64, 8]), 8);
    assert_eq!(peek_u64(&m, buf + 64), 3);
    assert_eq!(sc(&mut k, &mut m, "read", &[e, buf + 64, 8]), EAGAIN);
    assert_eq!(sc(&mut k, &mut m, "read", &[e, buf + 64, 4]), EINVAL, "eventfd reads are 8 bytes");
    let s = sc(&mut k, &mut m, "eventfd2", &[2, 0o4000 | 1]) as u64;
    assert_eq!(sc(&mut k, &mut m, "read", &[s, buf + 64, 8]), 8);
    assert_eq!(peek_u64(&m, buf + 64), 1, "semaphore: one at a time");
    poke(&k, &mut m, buf + 128, &u64::MAX.to_le_bytes());
    assert_eq!(sc(&mut k, &mut m, "write", &[s, buf + 128, 8]), EINVAL);
}

#[test]
fn epoll_level_and_edge_triggered() {
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 4096);
    let ep = sc(&mut k, &mut m, "epoll_create1", &[0o2000000]) as u64;
    let lt = sc(&mut k, &mut m, "eventfd2", &[0, 0o4000]) as u64;
    let et = sc(&mut k, &mut m, "eventfd2", &[0, 0o4000]) as u64;
    let event = |k: &Kernel, m: &mut FakeMemory, at: u64, events: u32, data: u64| {
        let mut b = events.to_le_bytes().to_vec();
        b.extend_from_slice(&data.to_le_bytes());
        poke(k, m, at, &b);
        at
    };
    let ev = event(&k, &mut m, buf, 1, 11);
    assert_eq!(sc(&mut k, &mut m, "epoll_ctl", &[ep, 1, lt, ev]), 0);
    let ev = event(&k, &mut m, buf, 1 | (1 << 31), 22);
    assert_eq!(sc(&mut k, &mut m, "epoll_ctl", &[ep, 1, et, ev]), 0);
    assert_eq!(sc(&mut k, &mut m, "epoll_ctl", &[ep, 1, et, ev]), -17, "EEXIST");
    // Nothing ready: a zero timeout returns 0.
    assert_eq!(sc(&mut k, &mut m, "epoll_wait", &[ep, buf + 256, 8, 0]), 0);
    poke(&k, &mut m, buf + 128, &1u64.to_le_bytes());
    for fd in [lt, et] {
        assert_eq!(sc(&mut k, &mut m, "write", &[fd, buf + 128, 8]), 8);
    }
    assert_eq!(sc(&mut k, &mut m, "epoll_wait", &[ep, buf + 256, 8, 0]), 2);
    assert_eq!(peek_u64(&m, buf + 256 + 4), 11);
    assert_eq!(peek_u64(&m, buf + 256 + 16), 22);
    // Level-triggered reports again; edge-triggered only after a new write.
    assert_eq!(sc(&mut k, &mut m, "epoll_wait", &[ep, buf + 256, 8, 0]), 1);
    assert_eq!(peek_u64(&m, buf + 256 + 4), 11);
    assert_eq!(sc(&mut k, &mut m, "write", &[et, buf + 128, 8]), 8);
    assert_eq!(sc(&mut k, &mut m, "epoll_wait", &[ep, buf + 256, 8, 0]), 2, "every write is a new edge");
    // A duplicate of the epoll fd is the same instance (mio registers through one).
    let dup = sc(&mut k, &mut m, "fcntl", &[ep, 1030, 3]) as u64;
    assert_eq!(sc(&mut k, &mut m, "epoll_ctl", &[dup, 2, lt, 0]), 0);
    assert_eq!(sc(&mut k, &mut m, "epoll_wait", &[ep, buf + 256, 8, 0]), 0);
    // One-shot: disabled after one report until modified.
    let ev = event(&k, &mut m, buf, 1 | (1 << 30), 33);
    assert_eq!(sc(&mut k, &mut m, "epoll_ctl", &[ep, 1, lt, ev]), 0);
    assert_eq!(sc(&mut k, &mut m, "epoll_wait", &[ep, buf + 256, 8, 0]), 1);
    assert_eq!(sc(&mut k, &mut m, "epoll_wait", &[ep, buf + 256, 8, 0]), 0);
    assert_eq!(sc(&mut k, &mut m, "epoll_ctl", &[ep, 3, lt, ev]), 0);
    assert_eq!(sc(&mut k, &mut m, "epoll_wait", &[ep, buf + 256, 8, 0]), 1);
    // A wait with a timeout and nothing ready sleeps on the virtual clock.
    assert_eq!(sc(&mut k, &mut m, "read", &[lt, buf + 64, 8]), 8);
    let before = k.virtual_time_ns();
    assert_eq!(sc(&mut k, &mut m, "epoll_wait", &[ep, buf + 256, 8, 250]), 0);
    assert!(k.virtual_time_ns() >= before + 250_000_000);
    // Errors.
    assert_eq!(sc(&mut k, &mut m, "epoll_wait", &[ep, buf + 256, 0, 0]), EINVAL);
    assert_eq!(sc(&mut k, &mut m, "epoll_wait", &[lt, buf + 256, 8, 0]), EINVAL, "not an epoll fd");
    assert_eq!(sc(&mut k, &mut m, "epoll_ctl", &[ep, 1, ep, ev]), EINVAL, "itself");
    let maps = path(&k, &mut m, buf + 2048, "/proc/self/maps");
    let f = sc(&mut k, &mut m, "openat", &[u64::MAX - 99, maps, 0, 0]) as u64;
    assert_eq!(sc(&mut k, &mut m, "epoll_ctl", &[ep, 1, f, ev]), EPERM, "a regular file");
}

#[test]
fn poll_and_select_see_readiness_and_time_out_on_the_virtual_clock() {
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 4096);
    let e = sc(&mut k, &mut m, "eventfd2", &[0, 0]) as u64;
    // pollfd {fd, events = POLLIN, revents}
    let mut pfd = (e as i32).to_le_bytes().to_vec();
    pfd.extend_from_slice(&1u16.to_le_bytes());
    pfd.extend_from_slice(&0u16.to_le_bytes());
    poke(&k, &mut m, buf, &pfd);
    let before = k.virtual_time_ns();
    assert_eq!(sc(&mut k, &mut m, "poll", &[buf, 1, 100]), 0);
    assert!(k.virtual_time_ns() >= before + 100_000_000, "the timeout ran on the virtual clock");
    poke(&k, &mut m, buf + 128, &5u64.to_le_bytes());
    assert_eq!(sc(&mut k, &mut m, "write", &[e, buf + 128, 8]), 8);
    assert_eq!(sc(&mut k, &mut m, "poll", &[buf, 1, u64::MAX]), 1);
    assert_eq!(peek(&k, &mut m, buf + 6, 2), [1, 0], "POLLIN");
    // select: bit e in the read set.
    let mut set = [0u8; 8];
    set[(e / 8) as usize] |= 1 << (e % 8);
    poke(&k, &mut m, buf + 256, &set);
    assert_eq!(sc(&mut k, &mut m, "select", &[e + 1, buf + 256, 0, 0, 0]), 1);
    assert_eq!(peek(&k, &mut m, buf + 256, 8), set);
    assert_eq!(sc(&mut k, &mut m, "select", &[u64::MAX, buf + 256, 0, 0, 0]), EINVAL);
    // A blocking read that nothing can ever satisfy is a deadlock, not a hang.
    assert_eq!(sc(&mut k, &mut m, "read", &[e, buf + 64, 8]), 8);
    match sc_exit(&mut k, &mut m, "read", &[e, buf + 64, 8]) {
        SyscallOutcome::Exit(ExitStatus::Signaled { signal: 9, fault: Some(f), .. }) => {
            assert!(f.description.contains("deadlock"), "{}", f.description)
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_networked_node_goes_idle_and_resumes_with_packets() {
    let (mut k, _, mut m) = boot();
    k.attach_network([10, 0, 0, 1]);
    let buf = scratch(&mut k, &mut m, 4096);
    let s = sc(&mut k, &mut m, "socket", &[AF_INET, SOCK_DGRAM, 0]) as u64;
    let me = sockaddr(&k, &mut m, buf, [10, 0, 0, 1], 5000);
    assert_eq!(sc(&mut k, &mut m, "bind", &[s, me, 16]), 0);
    // A blocking receive with nothing queued: the node is idle, not deadlocked.
    assert_eq!(sc_exit(&mut k, &mut m, "recvfrom", &[s, buf + 512, 64, 0, 0, 0]), SyscallOutcome::Idle);
    assert!(k.is_idle());
    assert_eq!(k.next_deadline(), None);
    let from = SockAddr::new([10, 0, 0, 2], 6000);
    let p = Packet { src: from, dst: SockAddr::new([10, 0, 0, 1], 5000), payload: Payload::Datagram(b"hi".to_vec()) };
    assert!(k.resume(&mut m, 5_000_000, vec![p]));
    assert!(!k.is_idle());
    assert_eq!(k.take_wakeup_returns(), vec![(1, 2)], "the blocked call completed with 2 bytes");
    assert_eq!(peek(&k, &mut m, buf + 512, 2), b"hi");
    assert!(k.virtual_time_ns() >= 5_000_000);
    // Packets to other nodes leave through the outbox.
    let c = sc(&mut k, &mut m, "socket", &[AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0]) as u64;
    let far = sockaddr(&k, &mut m, buf + 64, [10, 0, 0, 2], 7000);
    assert_eq!(sc(&mut k, &mut m, "connect", &[c, far, 16]), EINPROGRESS);
    let out = k.take_packets();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].payload, Payload::Syn);
    assert_eq!(out[0].dst, SockAddr::new([10, 0, 0, 2], 7000));
    // The peer refuses: SO_ERROR says so once.
    let rst = Packet { src: out[0].dst, dst: out[0].src, payload: Payload::Rst };
    assert!(k.resume(&mut m, 6_000_000, vec![rst]));
    poke(&k, &mut m, buf + 256, &4u32.to_le_bytes());
    assert_eq!(sc(&mut k, &mut m, "getsockopt", &[c, 1, 4, buf + 260, buf + 256]), 0);
    assert_eq!(peek(&k, &mut m, buf + 260, 4), 111i32.to_le_bytes(), "ECONNREFUSED");
    assert_eq!(sc(&mut k, &mut m, "getsockopt", &[c, 1, 4, buf + 260, buf + 256]), 0);
    assert_eq!(peek(&k, &mut m, buf + 260, 4), [0; 4]);
}

#[test]
fn hostile_socket_arguments_get_errors() {
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 4096);
    assert_eq!(sc(&mut k, &mut m, "socket", &[5, SOCK_STREAM, 0]), EAFNOSUPPORT, "AppleTalk");
    assert_eq!(sc(&mut k, &mut m, "socket", &[16, SOCK_STREAM, 0]), -94, "a netlink stream: ESOCKTNOSUPPORT");
    assert_eq!(sc(&mut k, &mut m, "socket", &[16, 3, 16]), -93, "generic netlink: EPROTONOSUPPORT");
    assert_eq!(sc(&mut k, &mut m, "socket", &[AF_INET, 0xff00, 0]), EINVAL);
    assert_eq!(sc(&mut k, &mut m, "socket", &[AF_INET, SOCK_STREAM, 17]), -93, "EPROTONOSUPPORT");
    let s = sc(&mut k, &mut m, "socket", &[AF_INET, SOCK_STREAM, 0]) as u64;
    assert_eq!(sc(&mut k, &mut m, "bind", &[s, 0x10, 16]), EFAULT);
    assert_eq!(sc(&mut k, &mut m, "bind", &[s, buf, 4]), EINVAL);
    assert_eq!(sc(&mut k, &mut m, "connect", &[s, u64::MAX - 7, 16]), EFAULT);
    assert_eq!(sc(&mut k, &mut m, "sendto", &[s, u64::MAX - 7, 8, 0, 0, 0]), EFAULT);
    assert_eq!(sc(&mut k, &mut m, "recvfrom", &[s, buf, 8, 0, 0, 0]), ENOTCONN);
    assert_eq!(sc(&mut k, &mut m, "listen", &[1, 1]), ENOTSOCK);
    assert_eq!(sc(&mut k, &mut m, "accept4", &[s, 0, 0, 0xdead]), EINVAL);
    assert_eq!(sc(&mut k, &mut m, "getsockopt", &[s, 1, 4, buf, 0x10]), EFAULT);
    assert_eq!(sc(&mut k, &mut m, "setsockopt", &[s, 1, 20, buf, 4]), EINVAL, "a timeval is 16 bytes");
    assert_eq!(sc(&mut k, &mut m, "recvmsg", &[s, 0x10, 0]), EFAULT);
    assert_eq!(sc(&mut k, &mut m, "poll", &[buf, u64::MAX, 0]), EINVAL);
    assert_eq!(sc(&mut k, &mut m, "epoll_ctl", &[99, 1, s, buf]), EBADF);
    // Garbage into every socket call: errors, never a panic.
    let mut deadlocks = 0;
    let mut buf = buf;
    let calls = [
        "socket",
        "bind",
        "listen",
        "accept4",
        "connect",
        "shutdown",
        "sendto",
        "recvfrom",
        "sendmsg",
        "recvmsg",
        "getsockname",
        "getpeername",
        "setsockopt",
        "getsockopt",
        "epoll_create1",
        "epoll_ctl",
        "epoll_wait",
        "epoll_pwait2",
        "poll",
        "ppoll",
        "select",
        "pselect6",
        "pipe2",
        "eventfd2",
    ];
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for i in 0..4000 {
        let name = calls[i % calls.len()];
        let mut args = [0u64; 6];
        for a in &mut args {
            *a = match next() % 5 {
                0 => next() % 8,
                1 => buf + next() % 4096,
                2 => next(),
                3 => u64::MAX - next() % 64,
                _ => 0,
            };
        }
        if matches!(
            name,
            "epoll_wait"
                | "epoll_pwait2"
                | "poll"
                | "ppoll"
                | "select"
                | "pselect6"
                | "recvfrom"
                | "recvmsg"
                | "accept4"
                | "connect"
        ) {
            // Keep waits from blocking forever on a lone kernel: a zero timeout where one exists.
            args[3] = 0;
            args[2] %= 4;
        }
        match k.syscall(&mut m, nr(name), args) {
            SyscallOutcome::Return(_) => {}
            SyscallOutcome::Exit(_) => {
                // A blocking call nothing can satisfy ends the program as a deadlock: a clean end,
                // not a panic. Start a fresh program and go on.
                deadlocks += 1;
                (k, _, m) = boot();
                buf = scratch(&mut k, &mut m, 4096);
            }
            other => panic!("{name}: {other:?}"),
        }
    }
    assert!(deadlocks < 4000, "the garbage reached more than deadlocks");
}

#[test]
fn a_fast_writer_is_held_back_by_the_window_and_loses_nothing() {
    let (mut k, _, mut m) = boot();
    let big = 6 << 20;
    let buf = scratch(&mut k, &mut m, big + 8192);
    poke(&k, &mut m, buf + 128, &16u32.to_le_bytes());
    let (_, c, s) = tcp_pair(&mut k, &mut m, buf, 7100);
    let flags = sc(&mut k, &mut m, "fcntl", &[c, 3, 0]) as u64;
    assert_eq!(sc(&mut k, &mut m, "fcntl", &[c, 4, flags | 0o4000]), 0);
    let data = buf + 4096;
    let pattern: Vec<u8> = (0..big).map(|i| (i % 251) as u8).collect();
    poke(&k, &mut m, data, &pattern);
    let window = crate::net::WINDOW as i64;
    assert_eq!(sc(&mut k, &mut m, "write", &[c, data, big]), window, "a partial write up to the window");
    assert_eq!(sc(&mut k, &mut m, "write", &[c, data + window as u64, big - window as u64]), EAGAIN);
    // poll says the socket is not writable.
    let mut pfd = (c as i32).to_le_bytes().to_vec();
    pfd.extend_from_slice(&4u16.to_le_bytes());
    pfd.extend_from_slice(&0u16.to_le_bytes());
    poke(&k, &mut m, buf + 1024, &pfd);
    assert_eq!(sc(&mut k, &mut m, "poll", &[buf + 1024, 1, 0]), 0);
    // The reader reads 1 MiB: credit comes back and the writer can go on.
    let mut received = Vec::new();
    let chunk = crate::net::ACK_EVERY;
    let out = scratch(&mut k, &mut m, chunk);
    assert_eq!(sc(&mut k, &mut m, "read", &[s, out, chunk]), chunk as i64);
    received.extend(peek(&k, &mut m, out, chunk as usize));
    assert_eq!(sc(&mut k, &mut m, "poll", &[buf + 1024, 1, 0]), 1);
    let mut sent = window as u64;
    while sent < big {
        let n = sc(&mut k, &mut m, "write", &[c, data + sent, big - sent]);
        if n == EAGAIN {
            let r = sc(&mut k, &mut m, "read", &[s, out, chunk]);
            assert!(r > 0);
            received.extend(peek(&k, &mut m, out, r as usize));
            continue;
        }
        assert!(n > 0, "{n}");
        sent += n as u64;
    }
    assert_eq!(sc(&mut k, &mut m, "close", &[c]), 0);
    loop {
        let r = sc(&mut k, &mut m, "read", &[s, out, chunk]);
        assert!(r >= 0, "{r}");
        if r == 0 {
            break;
        }
        received.extend(peek(&k, &mut m, out, r as usize));
    }
    assert_eq!(received.len(), pattern.len());
    assert!(received == pattern, "every byte arrived, in order");
}

#[test]
fn closing_with_a_zero_linger_resets_the_connection() {
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 4096);
    poke(&k, &mut m, buf + 128, &16u32.to_le_bytes());
    let (_, c, s) = tcp_pair(&mut k, &mut m, buf, 7100);
    poke(&k, &mut m, buf + 512, &[1i32.to_le_bytes(), 0i32.to_le_bytes()].concat());
    assert_eq!(sc(&mut k, &mut m, "setsockopt", &[c, 1, 13, buf + 512, 8]), 0);
    poke(&k, &mut m, buf + 600, &8u32.to_le_bytes());
    assert_eq!(sc(&mut k, &mut m, "getsockopt", &[c, 1, 13, buf + 608, buf + 600]), 0);
    assert_eq!(peek(&k, &mut m, buf + 608, 8), [1i32.to_le_bytes(), 0i32.to_le_bytes()].concat());
    assert_eq!(sc(&mut k, &mut m, "close", &[c]), 0);
    assert_eq!(sc(&mut k, &mut m, "read", &[s, buf + 256, 16]), -104, "ECONNRESET, not end of file");
    assert_eq!(sc(&mut k, &mut m, "read", &[s, buf + 256, 16]), 0);
    // A linger with a timeout still finishes the connection.
    let (_, c, s) = tcp_pair(&mut k, &mut m, buf, 7101);
    poke(&k, &mut m, buf + 512, &[1i32.to_le_bytes(), 5i32.to_le_bytes()].concat());
    assert_eq!(sc(&mut k, &mut m, "setsockopt", &[c, 1, 13, buf + 512, 8]), 0);
    assert_eq!(sc(&mut k, &mut m, "close", &[c]), 0);
    assert_eq!(sc(&mut k, &mut m, "read", &[s, buf + 256, 16]), 0, "end of file");
}

/// A `nlmsghdr` of `len` bytes (its header's length field says `said`) with `body`.
fn nlmsg(said: u32, ty: u16, flags: u16, seq: u32, body: &[u8]) -> Vec<u8> {
    let mut b = said.to_le_bytes().to_vec();
    b.extend_from_slice(&ty.to_le_bytes());
    b.extend_from_slice(&flags.to_le_bytes());
    b.extend_from_slice(&seq.to_le_bytes());
    b.extend_from_slice(&0u32.to_le_bytes());
    b.extend_from_slice(body);
    b
}

#[test]
fn netlink_answers_what_it_can_and_survives_what_it_cannot_parse() {
    let (mut k, _, mut m) = boot();
    k.attach_network([10, 0, 0, 7]);
    let buf = scratch(&mut k, &mut m, 8192);
    let fd = sc(&mut k, &mut m, "socket", &[16, 3, 0]) as u64;
    let second = sc(&mut k, &mut m, "socket", &[16, 3, 0]) as u64;
    // Sending autobinds: the first socket gets the pid, the next Linux's -4096.
    let dump = nlmsg(20, 22, 0x301, 5, &[0, 0, 0, 0]);
    poke(&k, &mut m, buf, &dump);
    assert_eq!(sc(&mut k, &mut m, "sendto", &[fd, buf, 20, 0, 0, 0]), 20);
    assert_eq!(sc(&mut k, &mut m, "sendto", &[second, buf, 20, 0, 0, 0]), 20);
    poke(&k, &mut m, buf + 4000, &12u32.to_le_bytes());
    assert_eq!(sc(&mut k, &mut m, "getsockname", &[second, buf + 4100, buf + 4000]), 0);
    assert_eq!(peek_u32(&k, &mut m, buf + 4104), 0xffff_f000);
    // The dump: lo's and eth0's addresses, IPv4 first, each stamped with the request's
    // sequence number and the socket's port; then NLMSG_DONE on its own.
    let n = sc(&mut k, &mut m, "recvfrom", &[fd, buf + 1000, 2000, 0, 0, 0]);
    let got = peek(&k, &mut m, buf + 1000, n as usize);
    let mut at = 0;
    let mut families = Vec::new();
    while at < got.len() {
        let len = u32::from_le_bytes(got[at..at + 4].try_into().unwrap()) as usize;
        assert_eq!(u16::from_le_bytes([got[at + 4], got[at + 5]]), 20, "RTM_NEWADDR");
        assert_eq!(u32::from_le_bytes(got[at + 8..at + 12].try_into().unwrap()), 5, "seq");
        assert_eq!(u32::from_le_bytes(got[at + 12..at + 16].try_into().unwrap()), 1, "port");
        families.push((got[at + 16], got[at + 17], got[at + 20]));
        at += len.next_multiple_of(4);
    }
    assert_eq!(families, [(2, 8, 1), (2, 24, 2), (10, 128, 1), (10, 96, 2)]);
    let n = sc(&mut k, &mut m, "recvfrom", &[fd, buf + 1000, 2000, 0, 0, 0]);
    assert_eq!(n, 20);
    assert_eq!(u16::from_le_bytes(peek(&k, &mut m, buf + 1004, 2).try_into().unwrap()), 3, "NLMSG_DONE");
    // Malformed requests: a length below the header, beyond the datagram, a huge one, a
    // datagram shorter than a header, an empty one. None is answered; none stops the next.
    for bad in [
        nlmsg(8, 22, 0x301, 1, &[]),
        nlmsg(400, 22, 0x301, 1, &[0; 4]),
        nlmsg(u32::MAX, 18, 0x301, 1, &[0; 4]),
        vec![1, 2, 3],
        vec![],
    ] {
        poke(&k, &mut m, buf, &bad);
        assert_eq!(sc(&mut k, &mut m, "sendto", &[fd, buf, bad.len() as u64, 0, 0, 0]), bad.len() as i64);
    }
    assert_eq!(sc(&mut k, &mut m, "recvfrom", &[fd, buf + 1000, 2000, 0x40, 0, 0]), EAGAIN, "nothing answered");
    // A request the kernel does not serve (one route, RTM_GETROUTE without NLM_F_DUMP):
    // NLMSG_ERROR, EOPNOTSUPP.
    let route = nlmsg(20, 26, 0x1, 9, &[0; 4]);
    poke(&k, &mut m, buf, &route);
    sc(&mut k, &mut m, "sendto", &[fd, buf, 20, 0, 0, 0]);
    let n = sc(&mut k, &mut m, "recvfrom", &[fd, buf + 1000, 2000, 0, 0, 0]);
    assert_eq!(n, 36);
    let e = peek(&k, &mut m, buf + 1000, 20);
    assert_eq!(u16::from_le_bytes([e[4], e[5]]), 2, "NLMSG_ERROR");
    assert_eq!(i32::from_le_bytes(e[16..20].try_into().unwrap()), -95);
}

/// Sends one dump request of type `ty` for `family` on the netlink socket `fd` and reads the
/// answers up to `NLMSG_DONE`: each message's type, flags and body.
fn netlink_dump(
    k: &mut Kernel,
    m: &mut FakeMemory,
    buf: u64,
    fd: u64,
    ty: u16,
    family: u8,
) -> Vec<(u16, u16, Vec<u8>)> {
    // A 17-byte request, `rtgenmsg` alone, as Go's `syscall.NetlinkRIB` sends it.
    let req = nlmsg(17, ty, 0x301, 1, &[family]);
    poke(k, m, buf, &req);
    assert_eq!(sc(k, m, "sendto", &[fd, buf, 17, 0, 0, 0]), 17);
    let mut out = Vec::new();
    loop {
        let n = sc(k, m, "recvfrom", &[fd, buf + 1000, 8000, 0, 0, 0]);
        assert!(n > 0, "recvfrom: {n}");
        let got = peek(k, m, buf + 1000, n as usize);
        let mut at = 0;
        while at < got.len() {
            let len = u32::from_le_bytes(got[at..at + 4].try_into().unwrap()) as usize;
            let ty = u16::from_le_bytes([got[at + 4], got[at + 5]]);
            let flags = u16::from_le_bytes([got[at + 6], got[at + 7]]);
            assert_eq!(u32::from_le_bytes(got[at + 8..at + 12].try_into().unwrap()), 1, "seq");
            if ty == 3 {
                return out;
            }
            out.push((ty, flags, got[at + 16..at + len].to_vec()));
            at += len.next_multiple_of(4);
        }
    }
}

/// A route message's `rtmsg` fields (family, dst_len, table, protocol, scope, type) and its
/// attributes (type, value) in order.
fn route_of(body: &[u8]) -> ([u8; 6], Vec<(u16, Vec<u8>)>) {
    assert_eq!(u32::from_le_bytes(body[8..12].try_into().unwrap()), 0, "rtm_flags");
    assert_eq!((body[2], body[3]), (0, 0), "no source prefix, no tos");
    let head = [body[0], body[1], body[4], body[5], body[6], body[7]];
    let mut attrs = Vec::new();
    let mut at = 12;
    while at < body.len() {
        let len = u16::from_le_bytes([body[at], body[at + 1]]) as usize;
        let ty = u16::from_le_bytes([body[at + 2], body[at + 3]]);
        assert!(len >= 4 && at + len <= body.len(), "attribute of {len} bytes at {at}");
        attrs.push((ty, body[at + 4..at + len].to_vec()));
        at += len.next_multiple_of(4);
    }
    (head, attrs)
}

#[test]
fn netlink_dumps_the_routes_of_the_nodes_addresses() {
    const TABLE: u16 = 15;
    const DST: u16 = 1;
    const PREFSRC: u16 = 7;
    const OIF: u16 = 4;
    const PRIORITY: u16 = 6;
    let u32b = |v: u32| v.to_le_bytes().to_vec();
    let (mut k, _, mut m) = boot();
    k.attach_network([10, 0, 0, 7]);
    let buf = scratch(&mut k, &mut m, 16384);
    let fd = sc(&mut k, &mut m, "socket", &[16, 3, 0]) as u64;
    let v4 = netlink_dump(&mut k, &mut m, buf, fd, 26, 2);
    assert!(v4.iter().all(|(ty, flags, _)| *ty == 24 && *flags == 2), "RTM_NEWROUTE, NLM_F_MULTI");
    let routes: Vec<_> = v4.iter().map(|(_, _, b)| route_of(b)).collect();
    let route = |dst: &[u8], src: Option<[u8; 4]>, oif: u32, table: u32| {
        let mut a = vec![(TABLE, u32b(table))];
        if !dst.is_empty() {
            a.push((DST, dst.to_vec()));
        }
        if let Some(s) = src {
            a.push((PREFSRC, s.to_vec()));
        }
        a.push((OIF, u32b(oif)));
        a
    };
    let me = Some([10, 0, 0, 7]);
    let lo = Some([127, 0, 0, 1]);
    assert_eq!(
        routes,
        vec![
            // main: the default route on eth0 (no gateway: every address is on the link), the subnet
            ([2, 0, 254, 3, 253, 1], route(&[], None, 2, 254)),
            ([2, 24, 254, 2, 253, 1], route(&[10, 0, 0, 0], me, 2, 254)),
            // local, by destination: the node's own address and broadcast, then loopback's
            ([2, 32, 255, 2, 254, 2], route(&[10, 0, 0, 7], me, 2, 255)),
            ([2, 32, 255, 2, 253, 3], route(&[10, 0, 0, 255], me, 2, 255)),
            ([2, 8, 255, 2, 254, 2], route(&[127, 0, 0, 0], lo, 1, 255)),
            ([2, 32, 255, 2, 254, 2], route(&[127, 0, 0, 1], lo, 1, 255)),
            ([2, 32, 255, 2, 253, 3], route(&[127, 255, 255, 255], lo, 1, 255)),
        ]
    );
    // What etcd's GetDefaultHost does: the main table's route with no destination names an
    // interface, whose IPv4 address RTM_GETADDR gives.
    let default = routes.iter().find(|(h, _)| h[1] == 0 && h[2] == 254).expect("a default route");
    let oif = default.1.iter().find(|a| a.0 == OIF).map(|a| u32::from_le_bytes(a.1[..].try_into().unwrap()));
    let addrs = netlink_dump(&mut k, &mut m, buf, fd, 22, 2);
    let addr = addrs.iter().find(|(_, _, b)| Some(u32::from_le_bytes(b[4..8].try_into().unwrap())) == oif).unwrap();
    assert_eq!(&addr.2[12..16], &[10, 0, 0, 7], "IFA_ADDRESS of the default route's interface");
    // IPv6: metrics, cache info and the preference Linux adds; main, then local.
    let v6 = netlink_dump(&mut k, &mut m, buf, fd, 26, 10);
    let heads: Vec<[u8; 6]> = v6.iter().map(|(_, _, b)| route_of(b).0).collect();
    assert_eq!(
        heads,
        [
            [10, 128, 254, 2, 0, 1],
            [10, 96, 254, 2, 0, 1],
            [10, 0, 254, 3, 0, 1],
            [10, 128, 255, 2, 0, 2],
            [10, 128, 255, 2, 0, 2]
        ]
    );
    let prefix = route_of(&v6[1].2).1;
    let types: Vec<u16> = prefix.iter().map(|a| a.0).collect();
    assert_eq!(types, [TABLE, DST, PRIORITY, OIF, 12, 20]);
    assert_eq!(prefix[1].1, [0xfd, 0, 0x64, 0x65, 0x6a, 0x61, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(prefix[2].1, u32b(256));
    assert_eq!(route_of(&v6[2].2).1[1], (PRIORITY, u32b(1024)), "the default route has no destination");
    assert_eq!(route_of(&v6[4].2).1[1].1, crate::net::node_v6([10, 0, 0, 7]).to_vec());
    // Both families, IPv4 first; another family has none.
    assert_eq!(netlink_dump(&mut k, &mut m, buf, fd, 26, 0).len(), 12);
    assert_eq!(netlink_dump(&mut k, &mut m, buf, fd, 26, 7).len(), 0);
    // A node without a network: loopback's routes, and no default route.
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 16384);
    let fd = sc(&mut k, &mut m, "socket", &[16, 3, 0]) as u64;
    let all: Vec<_> = netlink_dump(&mut k, &mut m, buf, fd, 26, 0).iter().map(|(_, _, b)| route_of(b).0).collect();
    assert_eq!(
        all,
        [
            [2, 8, 255, 2, 254, 2],
            [2, 32, 255, 2, 254, 2],
            [2, 32, 255, 2, 253, 3],
            [10, 128, 254, 2, 0, 1],
            [10, 128, 255, 2, 0, 2]
        ]
    );
}

#[test]
fn ipv6_sockets_on_a_networked_node_send_from_its_node_address() {
    let (mut k, _, mut m) = boot();
    k.attach_network([10, 0, 0, 7]);
    let buf = scratch(&mut k, &mut m, 4096);
    let s = sc(&mut k, &mut m, "socket", &[10, SOCK_STREAM | SOCK_NONBLOCK, 0]) as u64;
    // connect to [fd00:6465:6a61::10.0.0.9]:80
    let mut a = [0u8; 28];
    a[..2].copy_from_slice(&10u16.to_le_bytes());
    a[2..4].copy_from_slice(&80u16.to_be_bytes());
    a[8..24].copy_from_slice(&crate::net::node_v6([10, 0, 0, 9]));
    poke(&k, &mut m, buf, &a);
    assert_eq!(sc(&mut k, &mut m, "connect", &[s, buf, 28]), EINPROGRESS);
    let out = k.take_packets();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].src.ip, crate::net::node_v6([10, 0, 0, 7]));
    assert_eq!(out[0].dst.node_v4(), Some([10, 0, 0, 9]));
    assert_eq!(out[0].payload, Payload::Syn);
    // An IPv6 address outside the simulated network has no route.
    let t = sc(&mut k, &mut m, "socket", &[10, SOCK_STREAM, 0]) as u64;
    a[8..24].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    poke(&k, &mut m, buf, &a);
    assert_eq!(sc(&mut k, &mut m, "connect", &[t, buf, 28]), ENETUNREACH);
}

#[test]
fn an_idle_node_wakes_at_its_interval_timer() {
    let (mut k, _, mut m) = boot();
    k.attach_network([10, 0, 0, 1]);
    let buf = scratch(&mut k, &mut m, 4096);
    let s = sc(&mut k, &mut m, "socket", &[AF_INET, SOCK_DGRAM, 0]) as u64;
    let me = sockaddr(&k, &mut m, buf, [10, 0, 0, 1], 5000);
    assert_eq!(sc(&mut k, &mut m, "bind", &[s, me, 16]), 0);
    assert_eq!(sc(&mut k, &mut m, "alarm", &[2]), 0);
    let start = k.virtual_time_ns();
    assert_eq!(sc_exit(&mut k, &mut m, "recvfrom", &[s, buf + 512, 64, 0, 0, 0]), SyscallOutcome::Idle);
    let at = k.next_deadline().expect("the timer is a deadline");
    assert!(at >= start + 2_000_000_000 && at < start + 2_001_000_000, "{at} vs {start}");
    // The cluster brings the clock there: SIGALRM's default action ends the program.
    assert!(!k.resume(&mut m, at, vec![]));
    assert_eq!(k.exit_status().map(|e| e.code()), Some(128 + 14));
}
