//! Unix-domain sockets in one kernel: full buffers and queues, what a damaged snapshot may
//! not claim, and hostile arguments. The behaviours a program sees are compared with Linux
//! by the conformance case `guest/conformance/unix.c`.

use super::*;
use crate::net::{ObjKind, UnixKey, UNIX_BUFFER, UNIX_DGRAM_QLEN, UNIX_MSG_COST};
use crate::persist::Persist;

const AF_UNIX: u64 = 1;
const SOCK_STREAM: u64 = 1;
const SOCK_DGRAM: u64 = 2;
const SOCK_NONBLOCK: u64 = 0o4000;
const EAGAIN: i64 = -11;
const ENOTDIR: i64 = -20;
const ETOOMANYREFS: i64 = -109;
const ESOCKTNOSUPPORT: i64 = -94;
const MSG_DONTWAIT: u64 = 0x40;

/// A `socketpair` of `ty`: its two fds.
fn pair(k: &mut Kernel, m: &mut FakeMemory, buf: u64, ty: u64) -> (u64, u64) {
    assert_eq!(sc(k, m, "socketpair", &[AF_UNIX, ty, 0, buf]), 0);
    let b = peek(k, m, buf, 8);
    (
        u64::from(u32::from_le_bytes(b[..4].try_into().unwrap())),
        u64::from(u32::from_le_bytes(b[4..].try_into().unwrap())),
    )
}

/// An `SCM_RIGHTS` control message passing `fds`.
fn rights(fds: &[i32]) -> Vec<u8> {
    let mut c = (16 + 4 * fds.len() as u64).to_le_bytes().to_vec();
    c.extend_from_slice(&1i32.to_le_bytes());
    c.extend_from_slice(&1i32.to_le_bytes());
    for fd in fds {
        c.extend_from_slice(&fd.to_le_bytes());
    }
    c.resize(c.len().next_multiple_of(8), 0);
    c
}

/// Sends one byte on `s` with `fds` passed; the result.
fn send_rights(k: &mut Kernel, m: &mut FakeMemory, buf: u64, s: u64, fds: &[i32]) -> i64 {
    let c = rights(fds);
    poke(k, m, buf, &c);
    let iov = [buf + 0x100, 1u64].iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<_>>();
    poke(k, m, buf + 0x80, &iov);
    let msg = [0u64, 0, buf + 0x80, 1, buf, c.len() as u64, 0].iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<_>>();
    poke(k, m, buf + 0xc0, &msg);
    sc(k, m, "sendmsg", &[s, buf + 0xc0, 0])
}

/// Writes a path `sockaddr_un` at `at`; its length.
fn sun(k: &Kernel, m: &mut FakeMemory, at: u64, path: &[u8]) -> u64 {
    let mut b = 1u16.to_le_bytes().to_vec();
    b.extend_from_slice(path);
    b.push(0);
    poke(k, m, at, &b);
    b.len() as u64
}

#[test]
fn a_full_stream_buffer_stops_the_writer_until_the_reader_drains_it() {
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 0x80000);
    let (a, b) = pair(&mut k, &mut m, buf, SOCK_STREAM | SOCK_NONBLOCK);
    let big = buf + 0x1000;
    assert_eq!(sc(&mut k, &mut m, "write", &[a, big, 0x40000]), UNIX_BUFFER as i64, "a partial write up to the buffer");
    assert_eq!(sc(&mut k, &mut m, "write", &[a, big, 1]), EAGAIN);
    assert_eq!(sc(&mut k, &mut m, "read", &[b, big, 1000]), 1000);
    assert_eq!(sc(&mut k, &mut m, "write", &[a, big, 0x40000]), 1000, "exactly the room the read made");
    // A blocking write with no reader able to run is a deadlock, reported as one.
    assert_eq!(sc(&mut k, &mut m, "fcntl", &[a, 4, 0]), 0);
    match sc_exit(&mut k, &mut m, "write", &[a, big, 1]) {
        SyscallOutcome::Exit(ExitStatus::Signaled { signal: 9, fault: Some(f), .. }) => {
            assert!(f.description.contains("deadlock"), "{}", f.description)
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn datagram_queues_are_bounded_even_for_empty_datagrams() {
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 0x4000);
    // Between a pair, bytes (with a cost per datagram) bound the queue.
    let (a, _) = pair(&mut k, &mut m, buf, SOCK_DGRAM | SOCK_NONBLOCK);
    let mut sent = 0;
    while sc(&mut k, &mut m, "write", &[a, buf, 0]) == 0 {
        sent += 1;
        assert!(sent <= UNIX_BUFFER / UNIX_MSG_COST + 1, "the queue grows without bound");
    }
    assert_eq!(sc(&mut k, &mut m, "write", &[a, buf, 0]), EAGAIN);
    assert_eq!(sent, UNIX_BUFFER / UNIX_MSG_COST + 1);
    // From a socket it is not connected to, Linux's max_dgram_qlen bounds it.
    let srv = sc(&mut k, &mut m, "socket", &[AF_UNIX, SOCK_DGRAM, 0]) as u64;
    let name = buf + 0x100;
    let len = sun(&k, &mut m, name, b"/tmp/q.sock");
    assert_eq!(sc(&mut k, &mut m, "bind", &[srv, name, len]), 0);
    let cl = sc(&mut k, &mut m, "socket", &[AF_UNIX, SOCK_DGRAM, 0]) as u64;
    for _ in 0..=UNIX_DGRAM_QLEN {
        assert_eq!(sc(&mut k, &mut m, "sendto", &[cl, buf, 1, MSG_DONTWAIT, name, len]), 1);
    }
    assert_eq!(sc(&mut k, &mut m, "sendto", &[cl, buf, 1, MSG_DONTWAIT, name, len]), EAGAIN);
    assert_eq!(sc(&mut k, &mut m, "recvfrom", &[srv, buf + 0x200, 16, 0, 0, 0]), 1);
    assert_eq!(sc(&mut k, &mut m, "sendto", &[cl, buf, 1, MSG_DONTWAIT, name, len]), 1);
}

#[test]
fn a_restored_name_must_belong_to_a_socket_bound_to_it() {
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 0x1000);
    let s = sc(&mut k, &mut m, "socket", &[AF_UNIX, SOCK_STREAM, 0]) as u64;
    let len = sun(&k, &mut m, buf, b"/tmp/s.sock");
    assert_eq!(sc(&mut k, &mut m, "bind", &[s, buf, len]), 0);
    assert_eq!(k.net.validate(&()), Ok(()));
    let (key, id) = k.net.unix_names.iter().next().map(|(k, v)| (k.clone(), *v)).unwrap();
    assert!(matches!(key, UnixKey::Inode(_)));
    let mut bad = k.net.clone();
    bad.unix_names.insert(UnixKey::Abstract(b"\0other".to_vec()), id);
    assert!(bad.validate(&()).unwrap_err().to_string().contains("not bound to it"));
    let mut bad = k.net.clone();
    let pipe = bad.add(ObjKind::Pipe { buf: Default::default(), readers: 1, writers: 1, cap: crate::net::PIPE_SIZE });
    bad.unix_names.insert(key, pipe);
    assert!(bad.validate(&()).is_err());
}

#[test]
fn hostile_unix_socket_arguments_get_errors() {
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 0x1000);
    assert_eq!(sc(&mut k, &mut m, "socket", &[AF_UNIX, 4, 0]), ESOCKTNOSUPPORT);
    assert_eq!(sc(&mut k, &mut m, "socketpair", &[AF_UNIX, 9, 0, buf]), ESOCKTNOSUPPORT);
    assert_eq!(sc(&mut k, &mut m, "socketpair", &[AF_UNIX, SOCK_STREAM, 0, 0x10]), EFAULT);
    assert_eq!(sc(&mut k, &mut m, "socketpair", &[AF_UNIX, SOCK_STREAM, 0, u64::MAX - 3]), EFAULT);
    let s = sc(&mut k, &mut m, "socket", &[AF_UNIX, SOCK_STREAM, 0]);
    assert_eq!(s, 3, "the failed calls left no descriptor behind");
    // AF_UNSPEC in the last two bytes of the highest mapping: a datagram socket reads the family
    // alone, as Linux does, and dissolves its association.
    assert_eq!(buf + 0x1000, MMAP_TOP, "the scratch page is the highest mapping");
    let d = sc(&mut k, &mut m, "socket", &[AF_UNIX, SOCK_DGRAM, 0]) as u64;
    poke(&k, &mut m, buf + 0xffe, &0u16.to_le_bytes());
    assert_eq!(sc(&mut k, &mut m, "connect", &[d, buf + 0xffe, 2]), 0);
    assert_eq!(sc(&mut k, &mut m, "close", &[d]), 0);
    let s = s as u64;
    let len = sun(&k, &mut m, buf, b"/tmp/x.sock");
    assert_eq!(sc(&mut k, &mut m, "bind", &[s, buf, 1]), EINVAL);
    assert_eq!(sc(&mut k, &mut m, "bind", &[s, buf, 111]), EINVAL);
    assert_eq!(sc(&mut k, &mut m, "bind", &[s, 0x10, len]), EFAULT);
    assert_eq!(sc(&mut k, &mut m, "connect", &[s, buf, 0]), EINVAL);
    poke(&k, &mut m, buf, &2u16.to_le_bytes());
    assert_eq!(sc(&mut k, &mut m, "bind", &[s, buf, len]), EINVAL, "another family");
    // A name below a regular file.
    let p = path(&k, &mut m, buf + 0x100, "/tmp/file");
    assert_eq!(sc(&mut k, &mut m, "openat", &[AT_FDCWD, p, 0o101, 0o644]), 4);
    let len = sun(&k, &mut m, buf, b"/tmp/file/x.sock");
    assert_eq!(sc(&mut k, &mut m, "bind", &[s, buf, len]), ENOTDIR);
    // Passing a descriptor that is not open.
    let (a, _) = pair(&mut k, &mut m, buf + 0x200, SOCK_STREAM);
    let iov = [buf + 0x400, 1u64].iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<_>>();
    poke(&k, &mut m, buf + 0x380, &iov);
    poke(&k, &mut m, buf + 0x300, &rights(&[99]));
    let msg = [0u64, 0, buf + 0x380, 1, buf + 0x300, 24, 0].iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<_>>();
    poke(&k, &mut m, buf + 0x500, &msg);
    assert_eq!(sc(&mut k, &mut m, "sendmsg", &[a, buf + 0x500, 0]), EBADF);
    // A header that claims more than the control buffer holds.
    let mut lying = rights(&[a as i32]);
    lying[..8].copy_from_slice(&400u64.to_le_bytes());
    poke(&k, &mut m, buf + 0x300, &lying);
    assert_eq!(sc(&mut k, &mut m, "sendmsg", &[a, buf + 0x500, 0]), EINVAL);
    // A control length that runs off the mapping.
    let msg =
        [0u64, 0, buf + 0x380, 1, buf + 0xff8, 1 << 40, 0].iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<_>>();
    poke(&k, &mut m, buf + 0x500, &msg);
    assert_eq!(sc(&mut k, &mut m, "sendmsg", &[a, buf + 0x500, 0]), EFAULT);
}

#[test]
fn descriptors_in_flight_are_bounded_and_let_go_with_their_socket() {
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 0x1000);
    let (a, b) = pair(&mut k, &mut m, buf, SOCK_DGRAM | SOCK_NONBLOCK);
    // RLIMIT_NOFILE bounds the copies in flight, as in Linux.
    let lim = [16u64, 16u64].iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<_>>();
    poke(&k, &mut m, buf + 0x800, &lim);
    assert_eq!(sc(&mut k, &mut m, "prlimit64", &[0, 7, buf + 0x800, 0]), 0);
    let eight = [a as i32; 8];
    assert_eq!(send_rights(&mut k, &mut m, buf + 0x200, a, &eight), 1);
    assert_eq!(send_rights(&mut k, &mut m, buf + 0x200, a, &eight), 1);
    assert_eq!(send_rights(&mut k, &mut m, buf + 0x200, a, &[a as i32]), ETOOMANYREFS);
    assert_eq!(k.files.fds.in_flight(), 16);
    // Every copy is of a, queued at b: closing a keeps it open; closing b drops its queue,
    // and a with it.
    let objects = k.net.objects.len();
    assert_eq!(sc(&mut k, &mut m, "close", &[a]), 0);
    assert_eq!(k.net.objects.len(), objects, "a stays open while it is in flight");
    assert_eq!(sc(&mut k, &mut m, "close", &[b]), 0);
    assert_eq!(k.files.fds.in_flight(), 0);
    assert_eq!(k.net.objects.len(), objects - 2);
    assert_eq!(k.files.fds.validate(), Ok(()));
}

#[test]
fn a_socket_file_is_not_part_of_any_crash_image() {
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 0x1000);
    let s = sc(&mut k, &mut m, "socket", &[AF_UNIX, SOCK_STREAM, 0]) as u64;
    let len = sun(&k, &mut m, buf, b"/data/s.sock");
    assert_eq!(sc(&mut k, &mut m, "bind", &[s, buf, len]), 0);
    let p = path(&k, &mut m, buf + 0x100, "/data/kept");
    let f = sc(&mut k, &mut m, "openat", &[AT_FDCWD, p, 0o101, 0o644]) as u64;
    assert_eq!(sc(&mut k, &mut m, "fsync", &[f]), 0);
    let d = path(&k, &mut m, buf + 0x200, "/data");
    let dir = sc(&mut k, &mut m, "openat", &[AT_FDCWD, d, 0o200000, 0]) as u64;
    assert_eq!(sc(&mut k, &mut m, "fsync", &[dir]), 0);
    assert!(k.disk().entries.contains_key("/data/kept"));
    assert!(!k.disk().entries.contains_key("/data/s.sock"), "not in the exported file system");
    let states = k.crash_states(16, 1);
    assert!(!states.states.is_empty());
    let image = k.crash_image();
    assert!(image.entries.contains_key("/data/kept"));
    assert!(!image.entries.contains_key("/data/s.sock"));
    assert_eq!(k.files.fs.validate(), Ok(()));
}
