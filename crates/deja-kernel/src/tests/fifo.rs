//! FIFOs and the rest of `mknod`: the nodes it makes, opening a FIFO (waiting for the other
//! side, or not), the pipe its openers share, what a crash and a snapshot keep of them. The
//! behaviours a program sees are compared with Linux by the conformance case
//! `guest/conformance/fifo.c`.

use super::threads::two_threads;
use super::*;
use crate::persist::Persist;
use crate::task::threads::BLOCKED_RETURN;

const S_IFIFO: u64 = 0o010000;
const S_IFCHR: u64 = 0o020000;
const S_IFDIR: u64 = 0o040000;
const S_IFBLK: u64 = 0o060000;
const S_IFREG: u64 = 0o100000;
const S_IFSOCK: u64 = 0o140000;
const O_WRONLY: u64 = 1;
const O_RDWR: u64 = 2;
const O_NONBLOCK: u64 = 0o4000;
const O_PATH: u64 = 0o10000000;
const EPERM: i64 = -1;
const ENXIO: i64 = -6;
const EAGAIN: i64 = -11;
const EEXIST: i64 = -17;
const EPIPE: i64 = -32;
const ECONNREFUSED: i64 = -111;
const BLOCKED: i64 = BLOCKED_RETURN as i64;

/// `mknodat(AT_FDCWD, p, mode, 0)`.
fn mknod(k: &mut Kernel, m: &mut FakeMemory, buf: u64, p: &str, mode: u64) -> i64 {
    let at = path(k, m, buf, p);
    sc(k, m, "mknodat", &[AT_FDCWD, at, mode, 0])
}

/// `openat(AT_FDCWD, p, flags)`.
fn open(k: &mut Kernel, m: &mut FakeMemory, buf: u64, p: &str, flags: u64) -> i64 {
    let at = path(k, m, buf, p);
    sc(k, m, "openat", &[AT_FDCWD, at, flags, 0])
}

/// `st_mode` and `st_ino` of `p` (`stat`), or the error.
fn mode_ino(k: &mut Kernel, m: &mut FakeMemory, buf: u64, p: &str) -> Result<(u32, u64), i64> {
    let at = path(k, m, buf, p);
    match sc(k, m, "newfstatat", &[AT_FDCWD, at, buf + 0x100, 0]) {
        0 => {
            let st = peek(k, m, buf + 0x100, 144);
            Ok((u32::from_le_bytes(st[24..28].try_into().unwrap()), u64::from_le_bytes(st[8..16].try_into().unwrap())))
        }
        e => Err(e),
    }
}

fn read(k: &mut Kernel, m: &mut FakeMemory, buf: u64, fd: i64) -> Result<Vec<u8>, i64> {
    match sc(k, m, "read", &[fd as u64, buf + 0x400, 64]) {
        n if n >= 0 => Ok(peek(k, m, buf + 0x400, n as usize)),
        e => Err(e),
    }
}

fn write(k: &mut Kernel, m: &mut FakeMemory, buf: u64, fd: i64, data: &[u8]) -> i64 {
    poke(k, m, buf + 0x300, data);
    sc(k, m, "write", &[fd as u64, buf + 0x300, data.len() as u64])
}

/// `poll` of `fd` for reading without waiting: `revents`.
fn revents(k: &mut Kernel, m: &mut FakeMemory, buf: u64, fd: i64) -> u16 {
    let mut p = (fd as i32).to_le_bytes().to_vec();
    p.extend_from_slice(&1u16.to_le_bytes());
    p.extend_from_slice(&0u16.to_le_bytes());
    poke(k, m, buf + 0x500, &p);
    sc(k, m, "poll", &[buf + 0x500, 1, 0]);
    u16::from_le_bytes(peek(k, m, buf + 0x506, 2).try_into().unwrap())
}

#[test]
fn mknod_makes_fifos_files_and_sockets_and_refuses_devices() {
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 0x1000);
    assert_eq!(mknod(&mut k, &mut m, buf, "/data/f", S_IFIFO | 0o666), 0);
    let (mode, ino) = mode_ino(&mut k, &mut m, buf, "/data/f").expect("stat of the FIFO");
    assert_eq!(mode, 0o010644, "a FIFO, the umask taken off");
    assert_eq!(mknod(&mut k, &mut m, buf, "/data/f", S_IFIFO | 0o600), EEXIST);
    assert_eq!(mknod(&mut k, &mut m, buf, "/data/f", S_IFCHR | 0o600), EEXIST, "taken before it is a device");
    // Type 0 and S_IFREG make an empty regular file; the directory entry is pending as a
    // creation's is.
    assert_eq!(mknod(&mut k, &mut m, buf, "/data/r", 0o600), 0);
    assert_eq!(mknod(&mut k, &mut m, buf, "/data/r2", S_IFREG | 0o640), 0);
    assert_eq!(mode_ino(&mut k, &mut m, buf, "/data/r").map(|s| s.0), Ok(0o100600));
    assert_eq!(mode_ino(&mut k, &mut m, buf, "/data/r2").map(|s| s.0), Ok(0o100640));
    let fd = open(&mut k, &mut m, buf, "/data/r", 0);
    assert_eq!(read(&mut k, &mut m, buf, fd), Ok(Vec::new()));
    assert!(k.pending_operations().iter().any(|o| o.contains("entry r set")));
    // Devices need CAP_MKNOD; a directory is mkdir's; other types do not exist.
    assert_eq!(mknod(&mut k, &mut m, buf, "/data/c", S_IFCHR | 0o600), EPERM);
    assert_eq!(mknod(&mut k, &mut m, buf, "/data/b", S_IFBLK | 0o600), EPERM);
    assert_eq!(mknod(&mut k, &mut m, buf, "/data/d", S_IFDIR | 0o700), EPERM);
    assert_eq!(mknod(&mut k, &mut m, buf, "/data/x", 0o170000), EINVAL);
    assert_eq!(mknod(&mut k, &mut m, buf, "/data/x", 0o030000), EINVAL);
    assert_eq!(mknod(&mut k, &mut m, buf, "/nowhere/x", S_IFIFO | 0o600), ENOENT);
    assert_eq!(mknod(&mut k, &mut m, buf, "/data/x/", S_IFIFO | 0o600), ENOENT, "a name ending with /");
    assert_eq!(mknod(&mut k, &mut m, buf, "/data/.", S_IFIFO | 0o600), EEXIST);
    assert_eq!(mknod(&mut k, &mut m, buf, "/data/f", 0o10_0000_0000 | S_IFIFO), EEXIST, "umode_t is 16 bits");
    assert_eq!(sc(&mut k, &mut m, "mknodat", &[AT_FDCWD, 0x10, S_IFIFO, 0]), EFAULT);
    assert!(mode_ino(&mut k, &mut m, buf, "/data/c").is_err(), "nothing made");
    // A socket's name: a socket file nothing listens on.
    assert_eq!(mknod(&mut k, &mut m, buf, "/data/s", S_IFSOCK | 0o600), 0);
    assert_eq!(mode_ino(&mut k, &mut m, buf, "/data/s").map(|s| s.0), Ok(0o140600));
    let s = sc(&mut k, &mut m, "socket", &[1, 1, 0]) as u64;
    let mut sun = 1u16.to_le_bytes().to_vec();
    sun.extend_from_slice(b"/data/s\0");
    poke(&k, &mut m, buf + 0x200, &sun);
    assert_eq!(sc(&mut k, &mut m, "connect", &[s, buf + 0x200, sun.len() as u64]), ECONNREFUSED);
    // mknod is mknodat from the working directory.
    let rel = path(&k, &mut m, buf, "data/g");
    assert_eq!(sc(&mut k, &mut m, "mknod", &[rel, S_IFIFO | 0o600, 0]), 0);
    // A FIFO can have a second name and be renamed; its inode stays.
    let (a, b) = (path(&k, &mut m, buf + 0x600, "/data/f"), path(&k, &mut m, buf + 0x680, "/data/f2"));
    assert_eq!(sc(&mut k, &mut m, "link", &[a, b]), 0);
    assert_eq!(mode_ino(&mut k, &mut m, buf, "/data/f2"), Ok((0o010644, ino)));
    assert_eq!(sc(&mut k, &mut m, "unlink", &[a]), 0);
    assert_eq!(mode_ino(&mut k, &mut m, buf, "/data/f2"), Ok((0o010644, ino)));
    assert_eq!(k.files.fs.validate(), Ok(()));
}

#[test]
fn a_fifo_is_in_no_crash_image() {
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 0x1000);
    assert_eq!(mknod(&mut k, &mut m, buf, "/data/f", S_IFIFO | 0o600), 0);
    assert_eq!(mknod(&mut k, &mut m, buf, "/data/kept", 0o600), 0);
    let dir = open(&mut k, &mut m, buf, "/data", 0o200000) as u64;
    assert_eq!(sc(&mut k, &mut m, "fsync", &[dir]), 0);
    assert!(k.disk().entries.contains_key("/data/kept"));
    assert!(!k.disk().entries.contains_key("/data/f"), "not in the exported file system");
    let image = k.crash_image();
    assert!(image.entries.contains_key("/data/kept"));
    assert!(!image.entries.contains_key("/data/f"));
}

#[test]
fn opening_a_fifo_waits_for_the_other_side() {
    let (mut k, mut m, buf) = two_threads();
    override_next(&mut k, vec![0]);
    assert_eq!(mknod(&mut k, &mut m, buf + 0x800, "/data/f", S_IFIFO | 0o600), 0);
    // Thread 1 opens for reading: no writer yet, it waits; thread 2 runs.
    assert_eq!(open(&mut k, &mut m, buf + 0x800, "/data/f", 0), BLOCKED);
    assert_eq!(k.current_tid(), 2);
    assert!(k.take_wakeup_returns().is_empty());
    // Thread 2 opens for writing: a reader is there, so it does not wait, and the reader's
    // open is done too, on the same pipe.
    override_next(&mut k, vec![1]);
    let w = open(&mut k, &mut m, buf + 0x800, "/data/f", O_WRONLY);
    assert_eq!(w, 3);
    assert_eq!(k.take_wakeup_returns(), vec![(1, 4)], "the reader got fd 4");
    assert_eq!(k.current_tid(), 2);
    // Thread 1 runs from here on.
    override_next(&mut k, vec![0; 12]);
    assert_eq!(write(&mut k, &mut m, buf, w, b"through"), 7);
    assert_eq!(k.current_tid(), 1);
    assert_eq!(read(&mut k, &mut m, buf, 4), Ok(b"through".to_vec()));
    // fstat of either end is the FIFO's.
    let ino = mode_ino(&mut k, &mut m, buf + 0x800, "/data/f").expect("stat").1;
    assert_eq!(sc(&mut k, &mut m, "fstat", &[4, buf + 0x100]), 0);
    assert_eq!(peek(&k, &mut m, buf + 0x108, 8), ino.to_le_bytes());
    assert_eq!(peek(&k, &mut m, buf + 0x118, 4), 0o010600u32.to_le_bytes());
    // Every writer gone: end of file, a hang-up; every opener gone: the pipe goes.
    assert_eq!(sc(&mut k, &mut m, "close", &[3]), 0);
    assert_eq!(read(&mut k, &mut m, buf, 4), Ok(Vec::new()));
    assert_eq!(revents(&mut k, &mut m, buf, 4), 0x10, "POLLHUP without POLLIN");
    assert_eq!(sc(&mut k, &mut m, "close", &[4]), 0);
    assert!(k.net.fifos.is_empty() && k.net.objects.is_empty());

    // A writer waits for a reader the same way.
    assert_eq!(k.current_tid(), 1);
    assert_eq!(open(&mut k, &mut m, buf + 0x800, "/data/f", O_WRONLY), BLOCKED);
    assert_eq!(k.current_tid(), 2);
    let r = open(&mut k, &mut m, buf + 0x800, "/data/f", O_NONBLOCK);
    assert_eq!(k.take_wakeup_returns(), vec![(1, 4)]);
    assert_eq!(r, 3, "a reader that does not wait");
}

#[test]
fn opens_that_do_not_wait() {
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 0x1000);
    assert_eq!(mknod(&mut k, &mut m, buf + 0x800, "/data/f", S_IFIFO | 0o600), 0);
    let f = |k: &mut Kernel, m: &mut FakeMemory, flags| open(k, m, buf + 0x800, "/data/f", flags);
    assert_eq!(f(&mut k, &mut m, O_WRONLY | O_NONBLOCK), ENXIO, "no reader");
    assert!(k.net.objects.is_empty(), "nothing left behind");
    let r = f(&mut k, &mut m, O_NONBLOCK);
    assert_eq!(read(&mut k, &mut m, buf, r), Ok(Vec::new()), "no writer: end of file");
    assert_eq!(revents(&mut k, &mut m, buf, r), 0, "no hang-up before a writer came");
    let w = f(&mut k, &mut m, O_WRONLY | O_NONBLOCK);
    assert!(w > r, "a reader is there now");
    assert_eq!(read(&mut k, &mut m, buf, r), Err(EAGAIN), "a writer that wrote nothing yet");
    assert_eq!(write(&mut k, &mut m, buf, w, b"abc"), 3);
    assert_eq!(revents(&mut k, &mut m, buf, r), 1, "POLLIN");
    assert_eq!(sc(&mut k, &mut m, "close", &[w as u64]), 0);
    assert_eq!(revents(&mut k, &mut m, buf, r), 0x11, "bytes left and a writer gone: POLLIN and POLLHUP");
    assert_eq!(read(&mut k, &mut m, buf, r), Ok(b"abc".to_vec()));
    // O_RDWR never waits, and meets the others on the same pipe.
    let rw = f(&mut k, &mut m, O_RDWR);
    assert_eq!(write(&mut k, &mut m, buf, rw, b"xy"), 2);
    assert_eq!(read(&mut k, &mut m, buf, r), Ok(b"xy".to_vec()));
    // The reader leaves: a write is EPIPE with SIGPIPE.
    assert_eq!(sc(&mut k, &mut m, "close", &[r as u64]), 0);
    let w = f(&mut k, &mut m, O_WRONLY);
    assert_eq!(write(&mut k, &mut m, buf, w, b"kept"), 4, "the O_RDWR opener reads");
    assert_eq!(sc(&mut k, &mut m, "close", &[rw as u64]), 0);
    assert!(k.pending_signals().is_empty());
    assert_eq!(write(&mut k, &mut m, buf, w, b"z"), EPIPE);
    assert_eq!(k.pending_signals(), vec![13]);
    k.sched.threads.threads.values_mut().for_each(|t| t.pending = Default::default());
    // Once every opener closed, the bytes left go with the pipe: the next openers start empty.
    assert_eq!(sc(&mut k, &mut m, "close", &[w as u64]), 0);
    assert!(k.net.fifos.is_empty());
    let rw = f(&mut k, &mut m, O_RDWR | O_NONBLOCK);
    assert_eq!(read(&mut k, &mut m, buf, rw), Err(EAGAIN));
    // O_PATH opens the name, not the pipe.
    let p = f(&mut k, &mut m, O_PATH);
    assert_eq!(read(&mut k, &mut m, buf, p), Err(EBADF));
    assert_eq!(k.net.fifos.len(), 1);
    // A FIFO's descriptions are not files: no seek, no sync of a range, no mapping.
    assert_eq!(sc(&mut k, &mut m, "lseek", &[rw as u64, 0, 0]), -29);
    assert_eq!(sc(&mut k, &mut m, "sync_file_range", &[rw as u64, 0, 0, 2]), -29);
    assert_eq!(sc(&mut k, &mut m, "mmap", &[0, 4096, 1, 1, rw as u64, 0]), -19);
}

#[test]
fn a_fifo_no_other_thread_can_open_is_a_deadlock() {
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 0x1000);
    assert_eq!(mknod(&mut k, &mut m, buf, "/data/f", S_IFIFO | 0o600), 0);
    let p = path(&k, &mut m, buf, "/data/f");
    match sc_exit(&mut k, &mut m, "openat", &[AT_FDCWD, p, 0, 0]) {
        SyscallOutcome::Exit(ExitStatus::Signaled { signal: 9, fault: Some(f), .. }) => {
            assert!(f.description.contains("deadlock") && f.description.contains("openat"), "{}", f.description)
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_wait_to_open_survives_a_snapshot_and_a_fork() {
    let (mut k, mut m, buf) = two_threads();
    override_next(&mut k, vec![0]);
    assert_eq!(mknod(&mut k, &mut m, buf + 0x800, "/data/f", S_IFIFO | 0o600), 0);
    assert_eq!(open(&mut k, &mut m, buf + 0x800, "/data/f", 0), BLOCKED);
    assert_eq!(k.net.fifos.values().next().map(|f| f.waiting.len()), Some(1));
    let mut restored = Kernel::restore(&k.save()).expect("restore");
    assert_eq!(restored.save(), k.save());
    for k in [&mut k, &mut restored] {
        let mut m = m.clone();
        override_next(k, vec![1]);
        assert_eq!(open(k, &mut m, buf + 0x800, "/data/f", O_WRONLY), 3);
        assert_eq!(k.take_wakeup_returns(), vec![(1, 4)]);
        assert!(k.net.fifos.values().all(|f| f.waiting.is_empty()));
    }
    // A FIFO's pipe must be a pipe of its own.
    let mut bad = k.net.clone();
    let obj = bad.fifos.values().next().expect("open").obj;
    bad.fifos.insert(99, crate::net::Fifo { obj, opened: [1, 1], waiting: Default::default() });
    assert!(bad.validate(&()).unwrap_err().to_string().contains("not a pipe of its own"));
    let mut bad = k.net.clone();
    bad.objects.remove(&obj);
    assert!(bad.validate(&()).is_err());
}
