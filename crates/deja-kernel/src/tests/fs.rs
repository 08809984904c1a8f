//! The writable file system: syscall semantics and errnos, durability, crash images, fault
//! injection and the ledger, save/restore, determinism, a property test against an independent
//! reference model, and a hostile-input fuzz.
//!
//! One file on purpose, although long: every test here drives the same fake memory and the
//! same helpers, and the reference model at the end checks the semantics the tests above state
//! one by one.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::*;

const O_WRONLY: u64 = 1;
const O_RDWR: u64 = 2;
const O_CREAT: u64 = 0o100;
const O_EXCL: u64 = 0o200;
const O_TRUNC: u64 = 0o1000;
const O_APPEND: u64 = 0o2000;
const O_DIRECTORY: u64 = 0o200000;
const O_NOFOLLOW: u64 = 0o400000;
const O_DSYNC: u64 = 0o10000;
const O_SYNC: u64 = 0o4010000;
const O_TMPFILE: u64 = 0o20200000;

const EIO: i64 = -5;
const EEXIST: i64 = -17;
const ENOTDIR: i64 = -20;
const EISDIR: i64 = -21;
const EMFILE: i64 = -24;
const ENOSPC: i64 = -28;
const EROFS: i64 = -30;
const ENAMETOOLONG: i64 = -36;
const ENOTEMPTY: i64 = -39;
const ELOOP: i64 = -40;
const EACCES: i64 = -13;
const EPERM: i64 = -1;
const EOPNOTSUPP: i64 = -95;

/// A booted kernel with a scratch area and helpers.
struct H {
    k: Kernel,
    m: FakeMemory,
    buf: u64,
    slot: u64,
}

impl H {
    fn new() -> H {
        H::with(spec_with(exec_image(), 42))
    }

    fn with(spec: ProgramSpec) -> H {
        let (mut k, _, mut m) = boot_spec(spec);
        let buf = scratch(&mut k, &mut m, 0x10_0000);
        H { k, m, buf, slot: 0 }
    }

    /// Writes a NUL-terminated string into a rotating slot; its address.
    fn s(&mut self, s: &str) -> u64 {
        self.slot += 1;
        let at = self.buf + 0x8_0000 + (self.slot % 32) * 0x2000;
        path(&self.k, &mut self.m, at, s)
    }

    fn sc(&mut self, name: &str, args: &[u64]) -> i64 {
        sc(&mut self.k, &mut self.m, name, args)
    }

    fn open(&mut self, p: &str, flags: u64) -> i64 {
        let a = self.s(p);
        self.sc("openat", &[AT_FDCWD, a, flags, 0o666])
    }

    fn write(&mut self, fd: i64, data: &[u8]) -> i64 {
        poke(&self.k, &mut self.m, self.buf, data);
        self.sc("write", &[fd as u64, self.buf, data.len() as u64])
    }

    fn pwrite(&mut self, fd: i64, data: &[u8], off: u64) -> i64 {
        poke(&self.k, &mut self.m, self.buf, data);
        self.sc("pwrite64", &[fd as u64, self.buf, data.len() as u64, off])
    }

    fn pread(&mut self, fd: i64, n: usize, off: u64) -> Vec<u8> {
        let r = self.sc("pread64", &[fd as u64, self.buf, n as u64, off]);
        assert!(r >= 0, "pread64: {r}");
        peek(&self.k, &mut self.m, self.buf, r as usize)
    }

    fn read(&mut self, fd: i64, n: usize) -> Vec<u8> {
        let r = self.sc("read", &[fd as u64, self.buf, n as u64]);
        assert!(r >= 0, "read: {r}");
        peek(&self.k, &mut self.m, self.buf, r as usize)
    }

    /// `stat` (following): (mode, nlink, size, ino, mtime s).
    fn stat(&mut self, p: &str) -> Result<(u32, u64, u64, u64, u64), i64> {
        let a = self.s(p);
        let r = self.sc("newfstatat", &[AT_FDCWD, a, self.buf, 0]);
        if r < 0 {
            return Err(r);
        }
        let b = peek(&self.k, &mut self.m, self.buf, 144);
        let u = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
        Ok((u32::from_le_bytes(b[24..28].try_into().unwrap()), u(16), u(48), u(8), u(88)))
    }

    fn call2(&mut self, name: &str, a: &str, b: &str) -> i64 {
        let (x, y) = (self.s(a), self.s(b));
        self.sc(name, &[x, y])
    }

    fn call1(&mut self, name: &str, a: &str, rest: &[u64]) -> i64 {
        let x = self.s(a);
        let mut args = vec![x];
        args.extend_from_slice(rest);
        self.sc(name, &args)
    }

    fn fsync_path(&mut self, p: &str) -> i64 {
        let flags = if p == "/" || p.ends_with("/d") || p == "/data" || p == "/tmp" { O_DIRECTORY } else { 0 };
        let fd = self.open(p, flags);
        if fd < 0 {
            return fd;
        }
        let r = self.sc("fsync", &[fd as u64]);
        self.sc("close", &[fd as u64]);
        r
    }

    /// getdents64 of a directory fd with a `count`-byte buffer: (ino, off, type, name) records.
    fn dents(&mut self, fd: i64, count: u64) -> Vec<(u64, u64, u8, String)> {
        let n = self.sc("getdents64", &[fd as u64, self.buf, count]);
        assert!(n >= 0, "getdents64: {n}");
        let raw = peek(&self.k, &mut self.m, self.buf, n as usize);
        let mut out = Vec::new();
        let mut o = 0;
        while o < raw.len() {
            let ino = u64::from_le_bytes(raw[o..o + 8].try_into().unwrap());
            let off = u64::from_le_bytes(raw[o + 8..o + 16].try_into().unwrap());
            let reclen = u16::from_le_bytes([raw[o + 16], raw[o + 17]]) as usize;
            assert_eq!(reclen % 8, 0);
            let name: Vec<u8> = raw[o + 19..o + reclen].iter().take_while(|b| **b != 0).copied().collect();
            out.push((ino, off, raw[o + 18], String::from_utf8(name).unwrap()));
            o += reclen;
        }
        out
    }
}

#[test]
fn files_create_write_read_truncate() {
    let mut h = H::new();
    assert_eq!(h.k.disk().entries.keys().cloned().collect::<Vec<_>>(), ["/", "/bin", "/data", "/tmp"]);
    let fd = h.open("/data/a", O_CREAT | O_RDWR);
    assert_eq!(fd, 3);
    assert_eq!(h.write(fd, b"hello"), 5);
    assert_eq!(h.sc("lseek", &[3, 0, 0]), 0);
    assert_eq!(h.read(fd, 100), b"hello");
    let (mode, nlink, size, ino, mtime) = h.stat("/data/a").unwrap();
    assert_eq!((mode, nlink, size), (0o100644, 1, 5), "umask 022 applied");
    assert!(ino >= 1 << 32);
    assert_eq!(mtime, crate::time::clock::REALTIME_EPOCH_S, "virtual clock: ms after boot");
    // pwrite past the end leaves a hole of zeros; the offset does not move.
    assert_eq!(h.pwrite(fd, b"X", 10), 1);
    assert_eq!(h.sc("lseek", &[3, 0, 1]), 5);
    assert_eq!(h.k.disk().file("/data/a").unwrap(), b"hello\0\0\0\0\0X");
    // O_APPEND writes at the end whatever the offset.
    let afd = h.open("/data/a", O_WRONLY | O_APPEND);
    assert_eq!(h.write(afd, b"!"), 1);
    assert_eq!(h.k.disk().file("/data/a").unwrap(), b"hello\0\0\0\0\0X!");
    // writev/readv.
    let b = h.buf;
    poke(&h.k, &mut h.m, b + 0x100, b"ab");
    poke(&h.k, &mut h.m, b + 0x200, b"cde");
    let iov = [(b + 0x100).to_le_bytes(), 2u64.to_le_bytes(), (b + 0x200).to_le_bytes(), 3u64.to_le_bytes()].concat();
    poke(&h.k, &mut h.m, b + 0x300, &iov);
    let nfd = h.open("/tmp/v", O_CREAT | O_RDWR | O_TRUNC);
    assert_eq!(h.sc("writev", &[nfd as u64, b + 0x300, 2]), 5);
    assert_eq!(h.sc("lseek", &[nfd as u64, 1, 0]), 1);
    assert_eq!(h.sc("readv", &[nfd as u64, b + 0x300, 2]), 4);
    assert_eq!(peek(&h.k, &mut h.m, b + 0x100, 2), b"bc");
    assert_eq!(peek(&h.k, &mut h.m, b + 0x200, 3), b"dee");
    // Truncation and fallocate.
    assert_eq!(h.sc("ftruncate", &[fd as u64, 3]), 0);
    assert_eq!(h.k.disk().file("/data/a").unwrap(), b"hel");
    assert_eq!(h.call1("truncate", "/data/a", &[6]), 0);
    assert_eq!(h.k.disk().file("/data/a").unwrap(), b"hel\0\0\0");
    assert_eq!(h.sc("fallocate", &[fd as u64, 0, 0, 100]), 0);
    assert_eq!(h.stat("/data/a").unwrap().2, 100);
    assert_eq!(h.sc("fallocate", &[fd as u64, 1, 0, 1000]), 0, "KEEP_SIZE");
    assert_eq!(h.stat("/data/a").unwrap().2, 100);
    assert_eq!(h.sc("fallocate", &[fd as u64, 2, 0, 10]), EOPNOTSUPP);
    assert_eq!(h.sc("fallocate", &[fd as u64, 0, 0, 0]), EINVAL);
    // O_TRUNC on open.
    let t = h.open("/data/a", O_WRONLY | O_TRUNC);
    assert!(t > 0);
    assert_eq!(h.stat("/data/a").unwrap().2, 0);
    // lseek SEEK_DATA/SEEK_HOLE on a dense file.
    assert_eq!(h.sc("lseek", &[nfd as u64, 1, 3]), 1);
    assert_eq!(h.sc("lseek", &[nfd as u64, 1, 4]), 5);
    assert_eq!(h.sc("lseek", &[nfd as u64, 9, 3]), -6, "ENXIO");
    // Errnos.
    assert_eq!(h.open("/data/a", O_CREAT | O_EXCL | O_RDWR), EEXIST);
    assert_eq!(h.open("/data", O_WRONLY), EISDIR);
    assert_eq!(h.open("/data/a", O_DIRECTORY), ENOTDIR);
    assert_eq!(h.open("/data/a/", 0), ENOTDIR);
    assert_eq!(h.open("/data/new/", O_CREAT | O_RDWR), EISDIR);
    assert_eq!(h.open("/data/nope/x", O_CREAT | O_RDWR), ENOENT);
    assert_eq!(h.open("/data/a/x", O_CREAT | O_RDWR), ENOTDIR);
    assert_eq!(h.open("/data", O_TMPFILE | O_RDWR), EOPNOTSUPP);
    let ro = h.open("/data/a", 0);
    assert_eq!(h.write(ro, b"x"), EBADF);
    assert_eq!(h.sc("ftruncate", &[ro as u64, 0]), EINVAL);
    assert_eq!(h.sc("ftruncate", &[fd as u64, u64::MAX]), EINVAL);
    assert_eq!(h.sc("ftruncate", &[99, 0]), EBADF);
    assert_eq!(h.call1("truncate", "/data", &[0]), EISDIR);
    assert_eq!(h.sc("fsync", &[99]), EBADF);
    assert_eq!(h.sc("fsync", &[1]), EINVAL);
    // Declared inputs stay read-only.
    assert_eq!(h.open("/data/input.txt", O_RDWR), EROFS);
    assert_eq!(h.open("/data/input.txt", O_CREAT | O_WRONLY), EROFS);
    assert_eq!(h.call1("unlink", "/data/input.txt", &[]), EROFS);
    assert_eq!(h.call2("rename", "/data/input.txt", "/data/z"), EROFS);
    assert_eq!(h.call2("rename", "/data/a", "/data/input.txt"), EROFS);
    assert_eq!(h.call1("truncate", "/data/input.txt", &[0]), EROFS);
    assert_eq!(h.call1("access", "/data/input.txt", &[2]), EROFS);
    assert_eq!(h.call1("access", "/data/a", &[2]), 0);
    assert_eq!(h.call1("access", "/data/a", &[1]), EACCES);
    assert_eq!(h.call1("chmod", "/data/a", &[0o755]), 0);
    assert_eq!(h.call1("access", "/data/a", &[1]), 0);
    assert_eq!(h.stat("/data/a").unwrap().0, 0o100755);
    assert_eq!(h.sc("fchmod", &[fd as u64, 0o600]), 0);
    assert_eq!(h.stat("/data/a").unwrap().0, 0o100600);
    assert_eq!(h.k.disk().get("/data/a"), Some(&DiskEntry::File { mode: 0o600, data: vec![] }));
    // utimensat with explicit times.
    let ts = [7u64.to_le_bytes(), 5u64.to_le_bytes(), 1234u64.to_le_bytes(), 0u64.to_le_bytes()].concat();
    poke(&h.k, &mut h.m, h.buf + 0x400, &ts);
    let a = h.s("/data/a");
    assert_eq!(h.sc("utimensat", &[AT_FDCWD, a, h.buf + 0x400, 0]), 0);
    assert_eq!(h.stat("/data/a").unwrap().4, 1234);
    poke(&h.k, &mut h.m, h.buf + 0x408, &2_000_000_000u64.to_le_bytes());
    assert_eq!(h.sc("utimensat", &[AT_FDCWD, a, h.buf + 0x400, 0]), EINVAL);
    // A file mapping sees the contents at mmap time.
    assert_eq!(h.write(nfd, b"mapped"), 6);
    let map = h.sc("mmap", &[0, 4096, 1, 2, nfd as u64, 0]);
    assert!(map > 0);
    assert_eq!(peek(&h.k, &mut h.m, map as u64, 4), b"abcd");
}

#[test]
fn namespace_calls_and_errnos() {
    let mut h = H::new();
    assert_eq!(h.call1("mkdir", "/data/d", &[0o777]), 0);
    assert_eq!(h.stat("/data/d").unwrap().0, 0o40755);
    assert_eq!(h.call1("mkdir", "/data/d", &[0o777]), EEXIST);
    assert_eq!(h.call1("mkdir", "/data/nope/x", &[0o777]), ENOENT);
    assert_eq!(h.call1("mkdir", "/", &[0o777]), EEXIST);
    let f = h.open("/data/d/f", O_CREAT | O_RDWR);
    assert_eq!(h.write(f, b"content"), 7);
    assert_eq!(h.call1("mkdir", "/data/d/f/g", &[0o777]), ENOTDIR);
    assert_eq!(h.call1("rmdir", "/data/d", &[]), ENOTEMPTY);
    assert_eq!(h.call1("unlink", "/data/d", &[]), EISDIR);
    assert_eq!(h.call1("rmdir", "/data/d/f", &[]), ENOTDIR);
    assert_eq!(h.call1("unlink", "/data/d/f/", &[]), ENOTDIR);
    assert_eq!(h.call1("unlink", "/data/missing", &[]), ENOENT);
    assert_eq!(h.call1("rmdir", "/", &[]), -16, "EBUSY");
    assert_eq!(h.call1("rmdir", "/data/d/.", &[]), EINVAL);
    assert_eq!(h.stat("/data").unwrap().1, 3, "nlink of a directory: 2 + subdirectories");
    // rename and renameat2.
    assert_eq!(h.call2("rename", "/data/d/f", "/data/g"), 0);
    assert_eq!(h.stat("/data/d/f"), Err(ENOENT));
    assert_eq!(h.k.disk().file("/data/g").unwrap(), b"content");
    let g = h.open("/data/h", O_CREAT | O_RDWR);
    assert_eq!(h.write(g, b"other"), 5);
    let (a, b) = (h.s("/data/g"), h.s("/data/h"));
    assert_eq!(h.sc("renameat2", &[AT_FDCWD, a, AT_FDCWD, b, 1]), EEXIST, "RENAME_NOREPLACE");
    assert_eq!(h.sc("renameat2", &[AT_FDCWD, a, AT_FDCWD, b, 2]), 0, "RENAME_EXCHANGE");
    assert_eq!(h.k.disk().file("/data/g").unwrap(), b"other");
    assert_eq!(h.k.disk().file("/data/h").unwrap(), b"content");
    assert_eq!(h.sc("renameat2", &[AT_FDCWD, a, AT_FDCWD, b, 3]), EINVAL);
    let missing = h.s("/data/zz");
    assert_eq!(h.sc("renameat2", &[AT_FDCWD, a, AT_FDCWD, missing, 2]), ENOENT);
    assert_eq!(h.sc("renameat", &[AT_FDCWD, a, AT_FDCWD, b]), 0, "replaces");
    assert_eq!(h.k.disk().file("/data/h").unwrap(), b"other");
    assert_eq!(h.call2("rename", "/data/d", "/data/d/sub"), EINVAL, "into itself");
    assert_eq!(h.call2("rename", "/data/h", "/data/d"), EISDIR);
    assert_eq!(h.call2("rename", "/data/d", "/data/h"), ENOTDIR);
    assert_eq!(h.call1("mkdir", "/data/e", &[0o755]), 0);
    assert_eq!(h.call1("mkdir", "/data/e/x", &[0o755]), 0);
    assert_eq!(h.call2("rename", "/data/d", "/data/e"), ENOTEMPTY);
    assert_eq!(h.call2("rename", "/data/e/x", "/data/d"), 0, "over an empty directory");
    assert_eq!(h.call2("rename", "/data/zz", "/data/y"), ENOENT);
    assert_eq!(h.call2("rename", "/data/h", "/data/h"), 0);
    // Hard links.
    assert_eq!(h.call2("link", "/data/h", "/data/h2"), 0);
    assert_eq!(h.stat("/data/h").unwrap().1, 2);
    assert_eq!(h.stat("/data/h").unwrap().3, h.stat("/data/h2").unwrap().3, "same inode");
    assert_eq!(h.call2("link", "/data/h", "/data/h2"), EEXIST);
    assert_eq!(h.call2("link", "/data/d", "/data/d2"), EPERM);
    assert_eq!(h.call1("unlink", "/data/h", &[]), 0);
    assert_eq!(h.stat("/data/h2").unwrap().1, 1);
    // Symlinks.
    assert_eq!(h.call2("symlink", "h2", "/data/l"), 0);
    assert_eq!(h.call2("symlink", "h2", "/data/l"), EEXIST);
    let l = h.s("/data/l");
    assert_eq!(h.sc("readlink", &[l, h.buf, 100]), 2);
    assert_eq!(peek(&h.k, &mut h.m, h.buf, 2), b"h2");
    let h2 = h.s("/data/h2");
    assert_eq!(h.sc("readlink", &[h2, h.buf, 100]), EINVAL);
    let lfd = h.open("/data/l", 0);
    assert_eq!(h.read(lfd, 10), b"other");
    assert_eq!(h.open("/data/l", O_NOFOLLOW), ELOOP);
    let l = h.s("/data/l");
    assert_eq!(h.sc("lstat", &[l, h.buf]), 0);
    assert_eq!(u32::from_le_bytes(peek(&h.k, &mut h.m, h.buf + 24, 4).try_into().unwrap()) & 0o170000, 0o120000);
    assert_eq!(h.call2("symlink", "/data/loop2", "/data/loop1"), 0);
    assert_eq!(h.call2("symlink", "/data/loop1", "/data/loop2"), 0);
    assert_eq!(h.open("/data/loop1", 0), ELOOP);
    assert_eq!(h.call2("symlink", "/data", "/tmp/dl"), 0);
    assert!(h.open("/tmp/dl/h2", 0) > 0, "directory symlinks in the middle");
    assert_eq!(h.open("/tmp/dangling-target", 0), ENOENT);
    assert_eq!(h.call2("symlink", "created-through", "/tmp/dangling"), 0);
    assert!(h.open("/tmp/dangling", O_CREAT | O_RDWR) > 0, "O_CREAT creates the target");
    assert!(h.k.disk().file("/tmp/created-through").is_some());
    assert_eq!(h.open("/tmp/dangling", O_CREAT | O_EXCL | O_RDWR), EEXIST);
    // *at calls relative to a directory fd; unlinkat AT_REMOVEDIR.
    let dfd = h.open("/data/d", O_DIRECTORY);
    let rel = h.s("sub");
    assert_eq!(h.sc("mkdirat", &[dfd as u64, rel, 0o700]), 0);
    assert_eq!(h.stat("/data/d/sub").unwrap().0, 0o40700);
    assert_eq!(h.sc("unlinkat", &[dfd as u64, rel, 0]), EISDIR);
    assert_eq!(h.sc("unlinkat", &[dfd as u64, rel, 0x200]), 0);
    assert_eq!(h.sc("unlinkat", &[dfd as u64, rel, 0x1]), EINVAL);
    let (x, y) = (h.s("/data/h2"), h.s("linked"));
    assert_eq!(h.sc("linkat", &[AT_FDCWD, x, dfd as u64, y, 0]), 0);
    assert!(h.k.disk().file("/data/d/linked").is_some());
    let (t, y) = (h.s("target"), h.s("sl"));
    assert_eq!(h.sc("symlinkat", &[t, dfd as u64, y]), 0);
    // /proc and /dev are not writable.
    assert_eq!(h.call1("mkdir", "/proc/x", &[0o755]), EACCES);
    assert_eq!(h.call1("unlink", "/dev/null", &[]), EROFS);
    // Limits.
    let long = format!("/data/{}", "n".repeat(256));
    assert_eq!(h.open(&long, O_CREAT | O_RDWR), ENAMETOOLONG);
    assert_eq!(h.call1("mkdir", &long, &[0o755]), ENAMETOOLONG);
    let ok = format!("/data/{}", "n".repeat(255));
    assert!(h.open(&ok, O_CREAT | O_RDWR) > 0);
    let deep = format!("/data{}", "/x".repeat(2100));
    assert_eq!(h.open(&deep, 0), ENAMETOOLONG);
    // ENOENT through a missing middle component, ENOTDIR through a file.
    assert_eq!(h.stat("/data/nope/x"), Err(ENOENT));
    assert_eq!(h.stat("/data/h2/x"), Err(ENOTDIR));
}

#[test]
fn getdents64_real_directories() {
    let mut h = H::new();
    for n in ["b", "a", "c"] {
        let fd = h.open(&format!("/data/{n}"), O_CREAT | O_RDWR);
        h.sc("close", &[fd as u64]);
    }
    assert_eq!(h.call1("mkdir", "/data/sub", &[0o755]), 0);
    assert_eq!(h.call2("symlink", "a", "/data/ln"), 0);
    let dfd = h.open("/data", O_DIRECTORY);
    let all = h.dents(dfd, 4096);
    let names: Vec<&str> = all.iter().map(|e| e.3.as_str()).collect();
    assert_eq!(names, [".", "..", "a", "b", "c", "empty", "input.txt", "ln", "sub"]);
    let types: Vec<u8> = all.iter().map(|e| e.2).collect();
    assert_eq!(types, [4, 4, 8, 8, 8, 8, 8, 10, 4]);
    let offs: Vec<u64> = all.iter().map(|e| e.1).collect();
    assert_eq!(offs, (1..=9).collect::<Vec<_>>());
    assert_eq!(all[2].0, h.stat("/data/a").unwrap().3, "d_ino is st_ino");
    assert_eq!(all[0].0, h.stat("/data").unwrap().3);
    assert_eq!(all[1].0, 2, "/ has inode 2");
    assert_eq!(h.dents(dfd, 4096), vec![], "end of directory");
    // Rewind; read in small batches while unlinking what was returned: nothing is skipped.
    assert_eq!(h.sc("lseek", &[dfd as u64, 0, 0]), 0);
    let mut seen = Vec::new();
    loop {
        let batch = h.dents(dfd, 56);
        if batch.is_empty() {
            break;
        }
        for (_, _, t, n) in &batch {
            if *t == 8 && n.len() == 1 {
                assert_eq!(h.call1("unlink", &format!("/data/{n}"), &[]), 0);
            }
            seen.push(n.clone());
        }
    }
    assert_eq!(seen, names);
    assert_eq!(h.sc("lseek", &[dfd as u64, 0, 0]), 0);
    assert_eq!(h.sc("getdents64", &[dfd as u64, h.buf, 10]), EINVAL, "buffer too small");
    let f = h.open("/data/empty", 0);
    assert_eq!(h.sc("getdents64", &[f as u64, h.buf, 4096]), ENOTDIR);
}

impl H {
    /// `readlink` of `p` into a 256-byte buffer.
    fn readlink(&mut self, p: &str) -> Result<String, i64> {
        let a = self.s(p);
        let n = self.sc("readlink", &[a, self.buf, 256]);
        if n < 0 {
            return Err(n);
        }
        Ok(String::from_utf8(peek(&self.k, &mut self.m, self.buf, n as usize)).unwrap())
    }

    /// `lstat`: (mode, size, ino).
    fn lstat(&mut self, p: &str) -> Result<(u32, u64, u64), i64> {
        let a = self.s(p);
        let r = self.sc("newfstatat", &[AT_FDCWD, a, self.buf, 0x100]);
        if r < 0 {
            return Err(r);
        }
        let b = peek(&self.k, &mut self.m, self.buf, 144);
        let u = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
        Ok((u32::from_le_bytes(b[24..28].try_into().unwrap()), u(48), u(8)))
    }

    /// `fstat`'s `st_ino` of `fd`.
    fn fstat_ino(&mut self, fd: i64) -> u64 {
        assert_eq!(self.sc("fstat", &[fd as u64, self.buf]), 0);
        u64::from_le_bytes(peek(&self.k, &mut self.m, self.buf + 8, 8).try_into().unwrap())
    }

    /// The names a listing of the directory open on `fd` gives, read `count` bytes at a time.
    fn names(&mut self, fd: i64, count: u64) -> Vec<String> {
        let mut out = Vec::new();
        loop {
            let batch = self.dents(fd, count);
            if batch.is_empty() {
                return out;
            }
            out.extend(batch.into_iter().map(|e| e.3));
        }
    }
}

#[test]
fn proc_self_fd_is_the_fd_table_at_each_call() {
    const ENXIO: i64 = -6;
    let mut h = H::new();
    let file = h.open("/data/a", O_CREAT | O_RDWR);
    assert_eq!(file, 3);
    let pipe = h.buf + 0x7_0000;
    assert_eq!(h.sc("pipe2", &[pipe, 0]), 0);
    let ends = peek(&h.k, &mut h.m, pipe, 8);
    let (r, w) = (i32::from_le_bytes(ends[..4].try_into().unwrap()), i32::from_le_bytes(ends[4..].try_into().unwrap()));
    assert_eq!((r, w), (4, 5));
    assert_eq!(h.sc("socket", &[2, 1, 0]), 6);
    assert_eq!(h.sc("eventfd2", &[0, 0]), 7);
    assert_eq!(h.sc("epoll_create1", &[0]), 8);
    assert_eq!(h.open("/dev/null", O_WRONLY), 9);
    assert_eq!(h.open("/data", O_DIRECTORY), 10);
    let dir = h.open("/proc/self/fd", O_DIRECTORY);
    assert_eq!(dir, 11);
    // Every open fd, in numeric order (10 and 11 after 9, not after 1), each a link.
    let all = h.dents(dir, 4096);
    let names: Vec<&str> = all.iter().map(|e| e.3.as_str()).collect();
    assert_eq!(names, [".", "..", "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11"]);
    assert!(all[2..].iter().all(|e| e.2 == 10), "DT_LNK");
    assert_eq!(all[0].0, h.stat("/proc/self/fd").unwrap().3);
    assert_eq!(all[1].0, h.stat("/proc/self").unwrap().3);
    assert_eq!(all[5].0, h.lstat("/proc/self/fd/3").unwrap().2, "d_ino is the link's st_ino");
    // A listing reads the table as it is when it is read: after ".", "..", "0" to "3", fds 3
    // and 5 close and a new file takes fd 3, behind the listing: the rest lists neither.
    assert_eq!(h.sc("lseek", &[dir as u64, 0, 0]), 0);
    let first: Vec<String> = h.dents(dir, 144).into_iter().map(|e| e.3).collect();
    assert_eq!(first, [".", "..", "0", "1", "2", "3"]);
    assert_eq!(h.sc("close", &[3]), 0);
    assert_eq!(h.sc("close", &[5]), 0);
    assert_eq!(h.open("/data/b", O_CREAT | O_RDWR), 3);
    let rest = h.names(dir, 4096);
    assert_eq!(rest, ["4", "6", "7", "8", "9", "10", "11"]);
    // Past the last fd the listing is over: an fd opened now shows after a rewind.
    assert_eq!(h.open("/data/e", O_CREAT | O_RDWR), 5);
    assert_eq!(h.open("/data/f", O_CREAT | O_RDWR), 12);
    assert_eq!(h.dents(dir, 4096), vec![]);
    assert_eq!(h.sc("lseek", &[dir as u64, 0, 0]), 0);
    assert_eq!(h.names(dir, 4096).len(), 2 + 13);
    assert_eq!(h.sc("close", &[12]), 0);
    assert_eq!(h.sc("close", &[5]), 0);
    assert_eq!(h.sc("lseek", &[dir as u64, 0, 0]), 0);
    assert_eq!(h.names(dir, 48).len(), 2 + 11, "read one entry at a time: every open fd once");
    assert_eq!(h.sc("getdents64", &[dir as u64, h.buf, 8]), 0, "at the end: nothing to list");
    assert_eq!(h.sc("lseek", &[dir as u64, 0, 0]), 0);
    assert_eq!(h.sc("getdents64", &[dir as u64, h.buf, 8]), EINVAL, "no room for one");
    // What each link says.
    let pipe_ino = h.fstat_ino(4);
    let sock_ino = h.fstat_ino(6);
    assert_eq!(h.readlink("/proc/self/fd/3").unwrap(), "/data/b");
    assert_eq!(h.readlink("/proc/self/fd/4").unwrap(), format!("pipe:[{pipe_ino}]"));
    assert_eq!(h.readlink("/proc/self/fd/6").unwrap(), format!("socket:[{sock_ino}]"));
    assert_eq!(h.readlink("/proc/self/fd/7").unwrap(), "anon_inode:[eventfd]");
    assert_eq!(h.readlink("/proc/self/fd/8").unwrap(), "anon_inode:[eventpoll]");
    assert_eq!(h.readlink("/proc/self/fd/9").unwrap(), "/dev/null");
    assert_eq!(h.readlink("/proc/self/fd/10").unwrap(), "/data");
    assert_eq!(h.readlink("/proc/self/fd/11").unwrap(), "/proc/self/fd");
    assert_eq!(h.readlink("/proc/self/fd/0").unwrap(), format!("pipe:[{}]", h.fstat_ino(0)));
    assert_eq!(h.readlink("/dev/fd/1").unwrap(), format!("pipe:[{}]", h.fstat_ino(1)));
    assert_eq!(h.readlink("/dev/stdin").unwrap(), "/proc/self/fd/0");
    // lstat: a link whose bits are the fd's access mode; stat: what the fd has open.
    assert_eq!(h.lstat("/proc/self/fd/3").unwrap().0, 0o120700);
    assert_eq!(h.lstat("/proc/self/fd/4").unwrap().0, 0o120500);
    assert_eq!(h.lstat("/proc/self/fd/9").unwrap().0, 0o120300);
    assert_eq!(h.lstat("/proc/self/fd/3").unwrap().1, 64);
    assert_eq!(h.stat("/proc/self/fd/3").unwrap().0, 0o100644);
    assert_eq!(h.stat("/proc/self/fd/6").unwrap().0 & 0o170000, 0o140000);
    assert_eq!(h.stat("/proc/self/fd/6").unwrap().3, sock_ino);
    assert_eq!(h.stat("/proc/self/fd/10").unwrap().0 & 0o170000, 0o040000);
    // Closed fds and names that are not fds do not exist.
    for p in ["/proc/self/fd/5", "/proc/self/fd/99", "/proc/self/fd/03", "/proc/self/fd/x", "/proc/self/fd/-1"] {
        assert_eq!(h.stat(p), Err(ENOENT), "{p}");
        assert_eq!(h.readlink(p), Err(ENOENT), "{p}");
        assert_eq!(h.open(p, 0), ENOENT, "{p}");
    }
    assert_eq!(h.stat("/proc/self/fd/3/x"), Err(ENOTDIR), "through a file");
    assert_eq!(h.stat("/proc/self/fd/6/"), Err(ENOTDIR), "through a socket");
    // Through a directory's link, and through /dev/fd.
    assert_eq!(h.stat("/proc/self/fd/10/b").unwrap().3, h.stat("/data/b").unwrap().3);
    assert_eq!(h.stat("/dev/fd/10/b/"), Err(ENOTDIR));
    assert_eq!(h.stat("/dev/fd/10/../data/b").unwrap().3, h.stat("/data/b").unwrap().3);
    // Opening a file's link opens the file again: its own offset.
    assert_eq!(h.write(3, b"hello"), 5);
    let again = h.open("/proc/self/fd/3", 0);
    assert_eq!(again, 5, "the lowest free fd");
    assert_eq!(h.read(again, 100), b"hello");
    assert_eq!(h.sc("lseek", &[3, 0, 1]), 5, "the first description's offset stays");
    assert_eq!(h.readlink(&format!("/proc/self/fd/{again}")).unwrap(), "/data/b");
    // Renamed, then unlinked: the link follows the file, and still opens it.
    assert_eq!(h.call2("rename", "/data/b", "/data/c"), 0);
    assert_eq!(h.readlink("/proc/self/fd/3").unwrap(), "/data/c");
    assert_eq!(h.call1("unlink", "/data/c", &[]), 0);
    assert_eq!(h.readlink("/proc/self/fd/3").unwrap(), "/data/b (deleted)");
    let gone = h.open("/proc/self/fd/3", O_RDWR);
    assert_eq!(h.read(gone, 100), b"hello");
    // A pipe end opened for writing is one more writer of the same pipe.
    let wr = h.open("/proc/self/fd/4", O_WRONLY);
    assert_eq!(h.write(wr, b"through"), 7);
    assert_eq!(h.read(4, 100), b"through");
    assert_eq!(h.open("/proc/self/fd/4", O_RDWR), ENXIO);
    // Sockets, eventfds and epoll instances cannot be opened; O_PATH can have them.
    assert_eq!(h.open("/proc/self/fd/6", 0), ENXIO);
    assert_eq!(h.open("/proc/self/fd/7", O_RDWR), ENXIO);
    assert_eq!(h.open("/proc/self/fd/8", 0), ENXIO);
    let o_path = 0o10000000;
    let p = h.open("/proc/self/fd/6", o_path);
    assert_eq!(h.fstat_ino(p), sock_ino);
    // The link itself: O_NOFOLLOW refuses, with O_PATH it is an fd on the link.
    assert_eq!(h.open("/proc/self/fd/3", O_NOFOLLOW), ELOOP);
    let l = h.open("/proc/self/fd/3", O_NOFOLLOW | o_path);
    assert!(l > 0);
    assert_eq!(h.sc("fstat", &[l as u64, h.buf]), 0);
    assert_eq!(u32::from_le_bytes(peek(&h.k, &mut h.m, h.buf + 24, 4).try_into().unwrap()), 0o120700);
    assert_eq!(h.open("/proc/self/fd/3", O_CREAT | O_EXCL | O_RDWR), EEXIST);
    // /dev/stdout writes to the run's stdout; stdin cannot be written, stdout not read.
    let out = h.open("/dev/stdout", O_WRONLY | O_CREAT | O_TRUNC);
    h.k.take_output();
    assert_eq!(h.write(out, b"via /dev/stdout"), 15);
    assert_eq!(h.k.take_output(), vec![(Stream::Stdout, b"via /dev/stdout".to_vec())]);
    assert_eq!(h.open("/dev/stdin", O_WRONLY), ENXIO);
    assert_eq!(h.open("/dev/stdout", 0), ENXIO);
    // The directory's own entries cannot be made or removed.
    assert_eq!(h.call1("unlink", "/proc/self/fd/3", &[]), EACCES);
    assert_eq!(h.call1("mkdir", "/proc/self/fd/77", &[0o755]), EACCES);
}

#[test]
fn limits_emfile_enospc() {
    let mut spec = spec_with(exec_image(), 1);
    spec.fs.capacity_bytes = 4096;
    let mut h = H::with(spec);
    let fd = h.open("/data/big", O_CREAT | O_RDWR);
    let data = vec![7u8; 5000];
    assert_eq!(h.write(fd, &data), 4096, "partial write up to the capacity");
    assert_eq!(h.write(fd, b"x"), ENOSPC);
    assert_eq!(h.pwrite(fd, b"y", 0), 1, "overwriting needs no space");
    assert_eq!(h.sc("ftruncate", &[fd as u64, 10_000]), ENOSPC);
    assert_eq!(h.sc("fallocate", &[fd as u64, 1, 0, 10_000]), ENOSPC);
    assert_eq!(h.sc("ftruncate", &[fd as u64, 100]), 0);
    assert_eq!(h.call1("unlink", "/data/big", &[]), 0);
    assert_eq!(h.sc("close", &[fd as u64]), 0);
    assert_eq!(h.k.files.fs.used(), 0, "freed when the last reference went away");
    // A huge offset is ENOSPC (or EFBIG), never an allocation.
    let fd = h.open("/data/sparse", O_CREAT | O_RDWR);
    assert_eq!(h.pwrite(fd, b"z", 1 << 40), ENOSPC);
    assert_eq!(h.pwrite(fd, b"z", u64::MAX / 2), ENOSPC);
    // EMFILE.
    let lim = [16u64.to_le_bytes(), 16u64.to_le_bytes()].concat();
    poke(&h.k, &mut h.m, h.buf + 0x500, &lim);
    assert_eq!(h.sc("setrlimit", &[7, h.buf + 0x500]), 0);
    let mut last = 0;
    for i in 0..20 {
        last = h.open(&format!("/tmp/f{i}"), O_CREAT | O_RDWR);
        if last < 0 {
            break;
        }
    }
    assert_eq!(last, EMFILE);
    assert_eq!(h.stat("/tmp/f12"), Err(ENOENT), "EMFILE creates nothing");
}

#[test]
fn locks_are_granted_and_recorded() {
    let mut h = H::new();
    let fd = h.open("/data/l", O_CREAT | O_RDWR) as u64;
    let fl = |ty: u16, start: u64| {
        let mut b = vec![0u8; 32];
        b[0..2].copy_from_slice(&ty.to_le_bytes());
        b[8..16].copy_from_slice(&start.to_le_bytes());
        b[16..24].copy_from_slice(&10u64.to_le_bytes());
        b
    };
    poke(&h.k, &mut h.m, h.buf, &fl(1, 0));
    assert_eq!(h.sc("fcntl", &[fd, 6, h.buf]), 0);
    assert_eq!(h.k.files.locks.len(), 1);
    assert_eq!(h.sc("fcntl", &[fd, 7, h.buf]), 0);
    assert_eq!(h.sc("fcntl", &[fd, 5, h.buf]), 0);
    assert_eq!(&peek(&h.k, &mut h.m, h.buf, 2), &2u16.to_le_bytes(), "F_GETLK: F_UNLCK");
    poke(&h.k, &mut h.m, h.buf, &fl(2, 0));
    assert_eq!(h.sc("fcntl", &[fd, 6, h.buf]), 0);
    assert!(h.k.files.locks.is_empty());
    poke(&h.k, &mut h.m, h.buf, &fl(9, 0));
    assert_eq!(h.sc("fcntl", &[fd, 6, h.buf]), EINVAL);
    let ro = h.open("/data/l", 0) as u64;
    poke(&h.k, &mut h.m, h.buf, &fl(1, 0));
    assert_eq!(h.sc("fcntl", &[ro, 6, h.buf]), EBADF);
    assert_eq!(h.sc("fcntl", &[ro, 6, 0]), EFAULT);
    assert_eq!(h.sc("flock", &[fd, 2]), 0);
    assert_eq!(h.sc("flock", &[fd, 2 | 4]), 0);
    assert_eq!(h.sc("flock", &[fd, 8]), 0);
    assert_eq!(h.sc("flock", &[fd, 3]), EINVAL);
    assert_eq!(h.sc("flock", &[77, 2]), EBADF);
}

// ---------------------------------------------------------------------------------------------
// Durability

#[test]
fn durability_model_basics() {
    let mut h = H::new();
    let fd = h.open("/data/a", O_CREAT | O_RDWR);
    assert_eq!(h.write(fd, b"one"), 3);
    assert_eq!(h.k.crash_image().get("/data/a"), None, "the entry is not durable");
    assert_eq!(h.sc("fsync", &[fd as u64]), 0);
    assert_eq!(h.k.durable_writes(), 1);
    assert_eq!(h.k.crash_image().get("/data/a"), None, "fsync of the file does not make its entry durable");
    assert_eq!(h.fsync_path("/data"), 0);
    assert_eq!(h.k.crash_image().file("/data/a"), Some(&b"one"[..]));
    assert_eq!(h.write(fd, b" two"), 4);
    assert_eq!(h.k.crash_image().file("/data/a"), Some(&b"one"[..]), "unsynced data is lost");
    assert_eq!(h.sc("fdatasync", &[fd as u64]), 0);
    assert_eq!(h.k.crash_image().file("/data/a"), Some(&b"one two"[..]));
    // A rename is durable only once both directories are synced.
    assert_eq!(h.call1("mkdir", "/data/d", &[0o755]), 0);
    assert_eq!(h.fsync_path("/data"), 0);
    assert_eq!(h.call2("rename", "/data/a", "/data/d/b"), 0);
    let img = h.k.crash_image();
    assert!(img.file("/data/a").is_some() && img.get("/data/d/b").is_none());
    assert_eq!(h.fsync_path("/data/d"), 0);
    let img = h.k.crash_image();
    assert!(img.file("/data/a").is_some() && img.file("/data/d/b").is_some(), "both names survive");
    assert_eq!(h.fsync_path("/data"), 0);
    let img = h.k.crash_image();
    assert!(img.get("/data/a").is_none() && img.file("/data/d/b") == Some(&b"one two"[..]));
    // O_SYNC/O_DSYNC writes are durable writes and make the data durable (not the entry).
    let before = h.k.durable_writes();
    let s = h.open("/data/d/s", O_CREAT | O_WRONLY | O_SYNC);
    assert_eq!(h.write(s, b"sync"), 4);
    let ds = h.open("/data/d/b", O_WRONLY | O_DSYNC | O_APPEND);
    assert_eq!(h.write(ds, b"!"), 1);
    assert_eq!(h.k.durable_writes(), before + 2);
    let img = h.k.crash_image();
    assert_eq!(img.file("/data/d/b"), Some(&b"one two!"[..]));
    assert!(img.get("/data/d/s").is_none());
    // sync_file_range: WRITE flushes (the whole file); WAIT alone does nothing.
    assert_eq!(h.write(ds, b"?"), 1);
    let n = h.k.durable_writes();
    let plain = h.open("/data/d/b", O_RDWR) as u64;
    assert_eq!(h.pwrite(plain as i64, b"Z", 0), 1);
    assert_eq!(h.sc("sync_file_range", &[plain, 0, 1, 1]), 0);
    assert_eq!(h.k.durable_writes(), n);
    assert_eq!(h.sc("sync_file_range", &[plain, 0, 1, 8]), EINVAL);
    assert_eq!(h.sc("sync_file_range", &[1, 0, 1, 2]), -29, "ESPIPE");
    assert_eq!(h.sc("sync_file_range", &[plain, 0, 1, 2]), 0);
    assert_eq!(h.k.durable_writes(), n + 1);
    assert_eq!(h.k.crash_image().file("/data/d/b"), Some(&b"Zne two!?"[..]));
    // Unlink without a directory sync: the file comes back.
    assert_eq!(h.call1("unlink", "/data/d/b", &[]), 0);
    assert!(h.k.crash_image().file("/data/d/b").is_some());
    // syncfs and sync make everything durable; an fsync with nothing to flush still counts.
    let t = h.open("/tmp/t", O_CREAT | O_RDWR);
    assert_eq!(h.write(t, b"tmp"), 3);
    assert_eq!(h.sc("syncfs", &[t as u64]), 0);
    assert_eq!(h.k.crash_image(), h.k.disk());
    let n = h.k.durable_writes();
    assert_eq!(h.sc("fsync", &[t as u64]), 0);
    assert_eq!(h.sc("sync", &[]), 0);
    assert_eq!(h.k.durable_writes(), n + 2);
    // Declared inputs are never part of a disk.
    assert!(h.k.disk().get("/data/input.txt").is_none() && h.k.disk().get("/bin/prog").is_none());
    // The fault-free ledger has lost_unsynced records only, no decisions.
    let r = h.k.finish(&h.m, ExitStatus::Exited { code: 0 });
    assert!(r.decisions.is_empty());
    assert!(r.faults.iter().all(|f| f.kind == FaultKind::LostUnsynced && f.selected && f.applied));
    assert!(r.faults.iter().any(|f| f.path.as_deref() == Some("/data/a")));
    assert_eq!(r.durable_writes, h.k.durable_writes());
}

/// Runs a fixed workload with `faults`; returns the kernel (crashed or not), its memory and
/// whether it crashed.
fn workload(faults: FaultConfig, seed: u64, disk: Option<Disk>) -> (H, bool) {
    let mut spec = spec_with(exec_image(), seed);
    spec.faults = faults;
    spec.disk = disk;
    let mut h = H::with(spec);
    type Step = Box<dyn Fn(&mut H) -> SyscallOutcome>;
    let steps: Vec<Step> = vec![
        Box::new(|h| {
            let a = h.s("/data/wal");
            sc_exit(&mut h.k, &mut h.m, "openat", &[AT_FDCWD, a, O_CREAT | O_RDWR, 0o644])
        }),
        Box::new(|h| {
            poke(&h.k, &mut h.m, h.buf, &[b'A'; 1500]);
            sc_exit(&mut h.k, &mut h.m, "pwrite64", &[3, h.buf, 1500, 100])
        }),
        Box::new(|h| sc_exit(&mut h.k, &mut h.m, "fsync", &[3])),
        Box::new(|h| {
            let d = h.s("/data");
            let r = sc_exit(&mut h.k, &mut h.m, "openat", &[AT_FDCWD, d, O_DIRECTORY, 0]);
            assert_eq!(r, SyscallOutcome::Return(4));
            sc_exit(&mut h.k, &mut h.m, "fsync", &[4])
        }),
        Box::new(|h| {
            poke(&h.k, &mut h.m, h.buf, &[b'B'; 1100]);
            sc_exit(&mut h.k, &mut h.m, "pwrite64", &[3, h.buf, 1100, 1000])
        }),
        Box::new(|h| sc_exit(&mut h.k, &mut h.m, "ftruncate", &[3, 1800])),
        Box::new(|h| {
            poke(&h.k, &mut h.m, h.buf, b"tail");
            sc_exit(&mut h.k, &mut h.m, "pwrite64", &[3, h.buf, 4, 1800])
        }),
        Box::new(|h| sc_exit(&mut h.k, &mut h.m, "fsync", &[3])),
    ];
    for step in steps {
        match step(&mut h) {
            SyscallOutcome::Crash => return (h, true),
            SyscallOutcome::Exit(st) => panic!("exit {st:?}"),
            SyscallOutcome::Return(_) => {}
            SyscallOutcome::Idle | SyscallOutcome::Resume(_) => panic!("a lone node went idle or resumed"),
        }
    }
    (h, false)
}

#[test]
fn crash_point_outcome_restart_and_observed() {
    let faults = FaultConfig { crash_after_durable_write: Some(2), ..Default::default() };
    let (mut h, crashed) = workload(faults.clone(), 5, None);
    assert!(crashed);
    assert_eq!(h.k.durable_writes(), 2);
    let Some(ExitStatus::Signaled { signal: 9, fault: Some(info), .. }) = h.k.exit_status().cloned() else {
        panic!("{:?}", h.k.exit_status())
    };
    assert!(info.description.contains("durable write 2"));
    let last = h.k.syscall_count() - 1;
    let image = h.k.crash_image();
    let mut want = vec![0u8; 100];
    want.extend([b'A'; 1500]);
    assert_eq!(image.file("/data/wal"), Some(&want[..]), "the crashing fsync took effect");
    let exit = h.k.exit_status().cloned().unwrap();
    let r = h.k.finish(&h.m, exit);
    assert_eq!(r.trace.last().unwrap().ret, None, "the program never saw the return");
    assert_eq!(r.trace.last().unwrap().index, last);
    let crash = &r.faults[0];
    assert_eq!(
        (crash.kind, crash.point.as_str(), crash.selected, crash.applied),
        (FaultKind::Crash, "after durable write 2", true, true)
    );
    assert_eq!(r.durable_writes, 2);
    // A run without the crash point makes 3 durable writes and loses the unsynced tail only
    // if it crashes; restart from the crash image.
    let (h2, crashed) = workload(FaultConfig::default(), 5, Some(image.clone()));
    assert!(!crashed);
    assert_eq!(h2.k.durable_writes(), 3);
    // Previous faults: observed flips when the restarted program opens the path.
    let mut spec = spec_with(exec_image(), 6);
    spec.disk = Some(image);
    let mut h3 = H::with(spec);
    let prev = vec![FaultRecord {
        kind: FaultKind::LostUnsynced,
        point: "crash image after durable write 2: /data/wal".into(),
        syscall_index: 0,
        path: Some("/data/wal".into()),
        selected: true,
        applied: true,
        observed: false,
    }];
    h3.k.note_previous_faults(prev);
    assert!(!h3.k.faults()[0].observed);
    let fd = h3.open("/data/./wal", 0);
    assert_eq!(h3.read(fd, 4000).len(), 1600);
    let r3 = h3.k.finish(&h3.m, ExitStatus::Exited { code: 0 });
    assert!(r3.faults[0].observed);
    // An invalid disk is a load error.
    let mut bad = Disk::default();
    bad.entries.insert("/x/y".into(), DiskEntry::Dir { mode: 0o755 });
    let mut spec = spec_with(exec_image(), 1);
    spec.disk = Some(bad);
    let mut mem = FakeMemory::new(FRAMES);
    assert!(matches!(Kernel::load(spec, &mut mem), Err(LoadError::InvalidDisk { .. })));
    let mut spec = spec_with(exec_image(), 1);
    let mut big = Disk::default();
    big.insert_file("/data/x", vec![0; 100]).unwrap();
    spec.disk = Some(big);
    spec.fs.capacity_bytes = 10;
    assert!(matches!(Kernel::load(spec, &mut mem), Err(LoadError::DiskOverCapacity { .. })));
}

#[test]
fn torn_and_reordered_images_follow_decisions() {
    // Run to the end without the final fsync: pending = [write B@1000+1100, size 1800, write tail@1800].
    let faults = FaultConfig { crash_after_durable_write: Some(2), torn_writes: true, ..Default::default() };
    let (h0, _) = workload(faults, 5, None);
    let base = {
        let mut b = vec![0u8; 100];
        b.extend([b'A'; 1500]);
        b
    };
    // The crash came before the second write: nothing pending, no decision.
    let mut k = h0.k.clone();
    assert_eq!(k.crash_image().file("/data/wal"), Some(&base[..]));
    assert!(k.decisions().is_empty());
    // Let the workload continue past the durable writes to get pending operations.
    let faults = FaultConfig { torn_writes: true, ..Default::default() };
    let (mut h, _) = workload(faults, 5, None);
    poke(&h.k, &mut h.m, h.buf, &[b'C'; 1100]);
    assert_eq!(h.sc("pwrite64", &[3, h.buf, 1100, 1000]), 1100);
    assert_eq!(h.sc("ftruncate", &[3, 1500]), 0);
    let durable = h.k.files.fs.get(h.k.files.fs.lookup_abs("/data/wal").unwrap()).cloned().unwrap();
    let crate::fs::Kind::File(f) = &durable.kind else { panic!() };
    assert_eq!(f.pending.len(), 2);
    assert_eq!(
        h.k.pending_operations(),
        vec!["write of 1100 bytes at 1000 to /data/wal".to_string(), "size of /data/wal set to 1500".to_string()]
    );
    let image_with = |k: &Kernel, choices: Vec<u64>| {
        let mut k = k.clone();
        override_next(&mut k, choices);
        let img = k.crash_image();
        (img.file("/data/wal").unwrap().to_vec(), k.decisions().to_vec(), k.faults())
    };
    let full = h.k.disk().file("/data/wal").unwrap().to_vec();
    let durable_now = f.durable.clone();
    // Torn alone: a prefix of the pending operations, the next one (a write over offsets
    // 1000..2100: 4 sectors) cut at a sector boundary.
    let (c, d, l) = image_with(&h.k, vec![0, 0]);
    assert_eq!(c, durable_now);
    let points: Vec<(String, u64)> = d.iter().map(|d| (d.point.to_string(), d.options)).collect();
    assert_eq!(
        points,
        vec![
            ("crash state: prefix of the 2 pending operations".to_string(), 3),
            ("crash state: sectors of write of 1100 bytes at 1000 to /data/wal that reached the disk".to_string(), 4)
        ]
    );
    assert!(!l.iter().any(|r| r.kind == FaultKind::TornWrite));
    let (c, _, l) = image_with(&h.k, vec![0, 2]);
    let mut want = durable_now.clone();
    want[1000..1536].fill(b'C');
    assert_eq!(c, want, "two sectors: bytes 1000..1536");
    let torn = l.iter().find(|r| r.kind == FaultKind::TornWrite).unwrap();
    assert!(torn.selected && torn.applied);
    assert!(l.iter().any(|r| r.kind == FaultKind::LostUnsynced && r.path.as_deref() == Some("/data/wal")));
    let (c, d, _) = image_with(&h.k, vec![1]);
    assert_eq!(c.len(), 2100, "the whole first write, the truncate lost");
    assert_eq!(d.len(), 1, "the size change after the prefix cannot be torn");
    assert_ne!(c, full);
    assert_eq!(image_with(&h.k, vec![2]).0, full);
    // Reordered: keep only the truncate (op 2 of 2).
    let mut k = h.k.clone();
    k.set_fault_config(FaultConfig { reordered_writes: true, ..Default::default() });
    let (c, d, l) = image_with(&k, vec![0, 1]);
    let mut want = durable_now.clone();
    want.truncate(1500);
    assert_eq!(c, want);
    assert_eq!(d.len(), 2);
    assert_eq!(d[1].point, "crash state: keep size of /data/wal set to 1500");
    assert!(l.iter().any(|r| r.kind == FaultKind::ReorderedWrites && r.selected && r.applied));
    assert_eq!(image_with(&k, vec![1, 1]).0, full);
    // Both: both kept, the write cut to 1 sector.
    k.faults.config.torn_writes = true;
    let (c, d, _) = image_with(&k, vec![1, 1, 1, 0]);
    assert_eq!(d.len(), 4);
    assert_eq!(d[2].point, "crash state: cut one kept write");
    let mut want = durable_now.clone();
    want[1000..1024].fill(b'C');
    want.truncate(1500);
    assert_eq!(c, want);
    // An explicit state: exactly what it names, no decision.
    let mut k = h.k.clone();
    k.set_fault_config(FaultConfig {
        crash_state: Some(CrashState { kept: vec![1], torn: Some((0, 3)) }),
        ..Default::default()
    });
    let (c, d, _) = image_with(&k, vec![]);
    assert!(d.is_empty());
    let mut want = durable_now;
    want.resize(2048, 0);
    want[1000..2048].fill(b'C');
    want.truncate(1500);
    assert_eq!(c, want);
}

#[test]
fn eio_and_enospc_injection() {
    let faults = FaultConfig { eio_on_write_ppm: 1_000_000, ..Default::default() };
    let mut h = H::with({
        let mut s = spec_with(exec_image(), 3);
        s.faults = faults;
        s
    });
    let fd = h.open("/data/x", O_CREAT | O_RDWR);
    assert_eq!(h.write(fd, b"data"), EIO);
    assert_eq!(h.stat("/data/x").unwrap().2, 0, "nothing written");
    assert_eq!(h.write(1, b"stdout is not a file"), 20, "no decision for pipes");
    let r = h.k.finish(&h.m, ExitStatus::Exited { code: 0 });
    assert_eq!(r.decisions.len(), 1);
    assert_eq!(r.decisions[0].point, "eio on write #1 to /data/x");
    assert_eq!(r.faults.len(), 1);
    let f = &r.faults[0];
    assert_eq!((f.kind, f.selected, f.applied, f.observed), (FaultKind::Eio, true, true, true));
    // fsync EIO: nothing durable, not a durable write; an overridden "no" lets a retry through.
    let mut h = H::with({
        let mut s = spec_with(exec_image(), 3);
        s.faults = FaultConfig { eio_on_fsync_ppm: 999_999, enospc_on_write_ppm: 1, ..Default::default() };
        s
    });
    let fd = h.open("/data/x", O_CREAT | O_RDWR);
    override_next(&mut h.k, vec![999_999]);
    assert_eq!(h.write(fd, b"data"), 4);
    assert_eq!(h.sc("fsync", &[fd as u64]), EIO);
    assert_eq!(h.k.durable_writes(), 0);
    // fsyncgate: the failed fsync dropped the pending write; the retry and the directory's
    // fsync succeed, and the file is durable, empty.
    override_next(&mut h.k, vec![999_999, 999_999]);
    assert_eq!(h.sc("fsync", &[fd as u64]), 0, "a retried fsync succeeds");
    assert_eq!(h.fsync_path("/data"), 0);
    assert_eq!(h.k.durable_writes(), 2);
    assert_eq!(h.k.crash_image().file("/data/x"), Some(&b""[..]), "the dropped data is gone from the disk");
    assert_eq!(h.pread(fd, 16, 0), b"data".to_vec(), "but the program still reads it");
    assert_eq!(h.sc("syncfs", &[fd as u64]), EIO);
    assert_eq!(h.sc("sync", &[]), 0, "sync never fails");
    override_next(&mut h.k, vec![0]);
    assert_eq!(h.write(fd, b"more"), ENOSPC);
    let r = h.k.finish(&h.m, ExitStatus::Exited { code: 0 });
    let kinds: Vec<FaultKind> = r.faults.iter().map(|f| f.kind).collect();
    assert_eq!(kinds, [FaultKind::Eio, FaultKind::LostUnsynced, FaultKind::Eio, FaultKind::Enospc]);
    assert_eq!(r.faults[0].point, "eio on fsync #1 of /data/x");
    assert_eq!(r.faults[1].path.as_deref(), Some("/data/x"), "the crash image lost what the program still reads");
    assert_eq!(r.faults[2].point, "eio on fsync #1 of /");
    assert_eq!(r.faults[3].point, "enospc on write #2 to /data/x");
}

#[test]
fn placed_errors_strike_the_chosen_operation() {
    let rule = |t: &str| ErrorRule::parse(t).unwrap();
    let mut h = H::with({
        let mut s = spec_with(exec_image(), 3);
        s.faults = FaultConfig {
            errors: vec![
                rule("write:/data/x:2:eio"),
                rule("truncate:/data/x:1:enospc"),
                rule("create:/data/y"),
                rule("rename:/data/z:1"),
                rule("read:/data/x:0:eio:100-200"),
                rule("fsync:/data/x:2"),
                rule("fallocate:/data/x:1:enospc"),
            ],
            ..Default::default()
        };
        s
    });
    let fd = h.open("/data/x", O_CREAT | O_RDWR);
    assert_eq!(h.write(fd, b"one"), 3);
    assert_eq!(h.write(fd, b"two"), EIO, "the second write to /data/x");
    assert_eq!(h.write(fd, b"three"), 5);
    assert_eq!(h.sc("ftruncate", &[fd as u64, 1]), ENOSPC);
    assert_eq!(h.sc("fallocate", &[fd as u64, 0, 0, 4096]), ENOSPC);
    assert_eq!(h.sc("ftruncate", &[fd as u64, 300]), 0, "only the first truncate");
    assert_eq!(h.pread(fd, 50, 0).len(), 50, "a read outside the range");
    assert_eq!(h.sc("pread64", &[fd as u64, h.buf, 50, 150]), EIO, "a read inside the range");
    assert_eq!(h.sc("fsync", &[fd as u64]), 0);
    assert_eq!(h.sc("fsync", &[fd as u64]), EIO, "the second fsync");
    let a = h.s("/data/y");
    assert_eq!(sc(&mut h.k, &mut h.m, "openat", &[AT_FDCWD, a, O_CREAT | O_RDWR, 0o644]), EIO);
    assert!(h.stat("/data/y").is_err(), "a failed create creates nothing");
    assert_eq!(h.call2("rename", "/data/x", "/data/z"), EIO, "a rule may name the target");
    assert!(h.stat("/data/x").is_ok());
    let r = h.k.finish(&h.m, ExitStatus::Exited { code: 0 });
    assert!(r.decisions.is_empty(), "placed errors take no decision");
    let points: Vec<&str> = r.faults.iter().map(|f| f.point.as_str()).collect();
    assert_eq!(
        points,
        [
            "eio on write #2 to /data/x",
            "enospc on truncate #1 of /data/x",
            "enospc on fallocate #1 of /data/x",
            "eio on read #2 of /data/x",
            "eio on fsync #2 of /data/x",
            "eio on create #1 of /data/y",
            "eio on rename #1 of /data/x",
        ]
    );
    let ops: Vec<(IoOp, u64)> = r.io_ops.iter().filter(|c| c.path == "/data/x").map(|c| (c.op, c.count)).collect();
    assert_eq!(
        ops,
        [
            (IoOp::Write, 3),
            (IoOp::Fsync, 2),
            (IoOp::Truncate, 2),
            (IoOp::Fallocate, 1),
            (IoOp::Create, 1),
            (IoOp::Rename, 1),
            (IoOp::Read, 2)
        ]
    );
    assert!(!r.after_fault.is_empty(), "syscall outcomes after the first fault are recorded");
    assert_eq!(r.after_fault[0], (nr("write"), 5), "the failed write, then what the program did next");
    assert_eq!(r.after_fault[1], (nr("write"), 0));
    assert_eq!(ErrorRule::parse("write:/data/x:4:eio").unwrap().describe(), "EIO on write #4 to /data/x");
    for bad in
        ["frob:/x", "write:rel", "write:/x:n", "write:/x:1:eperm", "read:/x:1:eio:5-5", "write:/x:1:eio:1-2:more"]
    {
        assert!(ErrorRule::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn crash_points_before_a_durable_write_and_at_exit() {
    // Before the second fsync: the file's second batch is still pending.
    let faults = FaultConfig { crash_before_durable_write: Some(3), ..Default::default() };
    let (h, crashed) = workload(faults, 5, None);
    assert!(crashed);
    assert_eq!(h.k.durable_writes(), 2, "the crashing fsync did not take effect");
    assert_eq!(h.k.crash_point_words(), "before durable write 3");
    assert_eq!(h.k.pending_operations().len(), 3, "write, truncate, write");
    let states = h.k.crash_states(64, 1);
    assert_eq!(states.pending.len(), 3);
    // The 8 subsets of 3 operations give 7 images (the size change before the tail write
    // changes nothing the tail write does not), and the last write of several sectors (the
    // first one: the tail fits one sector) torn after 1, 2 and 3 of its 4 sectors gives 3 more.
    assert_eq!(states.states.len(), 10, "{:?}", states.states);
    assert_eq!(states.states.iter().filter(|s| s.0.torn.is_some()).count(), 3);
    let digests: BTreeSet<&String> = states.states.iter().map(|s| &s.1).collect();
    assert_eq!(digests.len(), states.states.len(), "distinct images");
    assert_eq!(states.states[0].0, CrashState::all(3));
    assert_eq!(states.states[1].0, CrashState::none());
    // At exit: a program that exits with data unsynced crashes there.
    let mut h = H::with({
        let mut s = spec_with(exec_image(), 3);
        s.faults = FaultConfig { crash_at_exit: true, ..Default::default() };
        s
    });
    let fd = h.open("/data/x", O_CREAT | O_RDWR);
    assert_eq!(h.write(fd, b"unsynced"), 8);
    assert_eq!(sc_exit(&mut h.k, &mut h.m, "exit_group", &[0]), SyscallOutcome::Crash);
    assert_eq!(h.k.crash_point_words(), "at exit (status 0)");
    assert!(h.k.crash_image().get("/data/x").is_none());
    assert_eq!(FaultConfig { crash_at_exit: true, ..Default::default() }.for_restart(), FaultConfig::default());
}

#[test]
fn same_spec_same_crash_image_and_ledger() {
    let run = |seed: u64| {
        let faults =
            FaultConfig { torn_writes: true, reordered_writes: true, eio_on_write_ppm: 200_000, ..Default::default() };
        let (mut h, _) = workload(faults, seed, None);
        for i in 0..20u64 {
            poke(&h.k, &mut h.m, h.buf, &[i as u8; 700]);
            h.sc("pwrite64", &[3, h.buf, 700, i * 300]);
        }
        let img = h.k.crash_image();
        let r = h.k.finish(&h.m, ExitStatus::Exited { code: 0 });
        (img.digest(), r.faults, r.decisions, r.digest)
    };
    let a = run(11);
    assert_eq!(a, run(11));
    assert!(!a.2.is_empty());
    let b = run(12);
    assert_ne!(a.2, b.2, "another seed, other decisions");
}

#[test]
fn save_restore_mid_run_keeps_the_file_system() {
    let faults = FaultConfig { reordered_writes: true, torn_writes: true, ..Default::default() };
    let (mut h, _) = workload(faults, 9, None);
    assert_eq!(h.call1("mkdir", "/data/d", &[0o755]), 0);
    assert_eq!(h.call2("symlink", "../wal", "/data/d/l"), 0);
    assert_eq!(h.call2("link", "/data/wal", "/data/d/hard"), 0);
    assert_eq!(h.call2("rename", "/data/wal", "/data/wal2"), 0);
    poke(&h.k, &mut h.m, h.buf, b"pending");
    assert_eq!(h.sc("pwrite64", &[3, h.buf, 7, 3]), 7);
    let dfd = h.open("/data", O_DIRECTORY);
    assert!(h.dents(dfd, 64).len() == 2);
    let bytes = h.k.save();
    let restored = Kernel::restore(&bytes).expect("restore");
    assert_eq!(restored.save(), bytes);
    assert_eq!(restored.files.fs, h.k.files.fs);
    let finish = |mut k: Kernel, mut m: FakeMemory| {
        let buf = h.buf;
        for i in 0..5u64 {
            poke(&k, &mut m, buf, &[i as u8; 600]);
            sc(&mut k, &mut m, "pwrite64", &[3, buf, 600, i * 200]);
        }
        let n = sc(&mut k, &mut m, "getdents64", &[dfd as u64, buf, 4096]);
        assert!(n > 0);
        sc(&mut k, &mut m, "fsync", &[dfd as u64]);
        sc(&mut k, &mut m, "close", &[3]);
        let img = k.crash_image();
        let disk = k.disk();
        (img, disk, k.finish(&m, ExitStatus::Exited { code: 0 }))
    };
    let a = finish(restored, h.m.clone());
    let b = finish(h.k.clone(), h.m.clone());
    assert_eq!(a, b);
    assert_eq!(a.1.file("/data/d/hard"), a.1.file("/data/wal2"));
    // Inconsistent file system states are refused.
    let mut bad = h.k.clone();
    let id = bad.files.fs.lookup_abs("/data/wal2").unwrap();
    bad.files.fds.close(3).unwrap();
    assert!(matches!(Kernel::restore(&bad.save()), Err(RestoreError::Invalid { .. })), "open count of {id}");
}

// ---------------------------------------------------------------------------------------------
// Property tests against an independent reference model

/// One operation of the property test. File names are `a`, `b`, `c`; the only directory
/// below `/data` is `d`.
#[derive(Debug, Clone)]
enum Op {
    Create(&'static str),
    Pwrite(&'static str, u64, usize, u8),
    Truncate(&'static str, u64),
    Rename(&'static str, &'static str),
    Unlink(&'static str),
    Mkdir,
    Rmdir,
    FsyncFile(&'static str),
    FsyncDir(&'static str),
    Syncfs,
}

const FILES: [&str; 4] = ["/data/a", "/data/b", "/data/d/a", "/data/d/c"];

fn op_strategy(max_len: usize) -> impl Strategy<Value = Op> {
    let f = proptest::sample::select(&FILES[..]);
    prop_oneof![
        2 => f.clone().prop_map(Op::Create),
        4 => (f.clone(), 0u64..1200, 1usize..max_len, any::<u8>()).prop_map(|(p, o, l, b)| Op::Pwrite(p, o, l, b)),
        1 => (f.clone(), 0u64..1500).prop_map(|(p, l)| Op::Truncate(p, l)),
        1 => (f.clone(), f.clone()).prop_map(|(a, b)| Op::Rename(a, b)),
        1 => f.clone().prop_map(Op::Unlink),
        1 => Just(Op::Mkdir),
        1 => Just(Op::Rmdir),
        2 => f.prop_map(Op::FsyncFile),
        2 => proptest::sample::select(&["/data", "/data/d"][..]).prop_map(Op::FsyncDir),
        1 => Just(Op::Syncfs),
    ]
}

/// A pending operation in the reference: data and size changes of a file, or the entry
/// changes one call made to one directory (`None`: the name removed).
#[derive(Debug, Clone)]
enum ROp {
    W(u64, Vec<u8>),
    S(u64),
    D(Vec<(String, Option<RNode>)>),
}

/// What a pending operation changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RTarget {
    F(usize),
    D(usize),
}

#[derive(Debug, Clone, Default)]
struct RFile {
    durable: Vec<u8>,
    cur: Vec<u8>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum RNode {
    F(usize),
    D(usize),
}

#[derive(Debug, Clone, Default)]
struct RDir {
    entries: BTreeMap<String, RNode>,
    durable: BTreeMap<String, RNode>,
}

/// The reference, written from the model in `docs/DURABILITY.md` and nothing else: files and
/// directories by identity (`dirs[0]` is `/data`), and one list of pending operations in
/// program order. A sync applies its target's pending operations in order; a crash keeps a
/// selection of them.
#[derive(Debug, Clone)]
struct Model {
    files: Vec<RFile>,
    dirs: Vec<RDir>,
    pending: Vec<(RTarget, ROp)>,
    /// For each pending operation, what the named crash models need to know of it.
    info: Vec<RInfo>,
    /// Program order of the next pending operation.
    seq: u64,
    /// Program order at the last sync that had something to make durable.
    mark: u64,
}

/// A pending operation as the named crash models of `docs/DURABILITY.md` see it.
#[derive(Debug, Clone, Default)]
struct RInfo {
    seq: u64,
    /// A write past the file's size at that point.
    append: bool,
    /// Names and sizes (directory changes, size changes).
    journaled: bool,
    /// Files a directory change installed over an existing name.
    over: Vec<usize>,
    /// The program order of the other half of a rename between two directories.
    pair: Option<u64>,
}

fn apply_rop(c: &mut Vec<u8>, op: &ROp) {
    match op {
        ROp::W(off, d) => {
            let end = *off as usize + d.len();
            if c.len() < end {
                c.resize(end, 0);
            }
            c[*off as usize..end].copy_from_slice(d);
        }
        ROp::S(n) => c.resize(*n as usize, 0),
        ROp::D(_) => {}
    }
}

fn apply_dir(e: &mut BTreeMap<String, RNode>, changes: &[(String, Option<RNode>)]) {
    for (n, node) in changes {
        match node {
            Some(x) => {
                e.insert(n.clone(), *x);
            }
            None => {
                e.remove(n);
            }
        }
    }
}

/// The first `k` 512-byte sectors of a write, by file offset.
fn tear(op: &ROp, k: u64) -> ROp {
    match op {
        ROp::W(off, d) => {
            let first = off / 512;
            let cut = ((first + k) * 512 - off) as usize;
            ROp::W(*off, d[..cut.min(d.len())].to_vec())
        }
        other => other.clone(),
    }
}

fn sectors_of(op: &ROp) -> u64 {
    match op {
        ROp::W(off, d) if !d.is_empty() => (off + d.len() as u64 - 1) / 512 - off / 512 + 1,
        _ => 1,
    }
}

/// A crash image of the reference: path below `/data` → contents (`None`: a directory).
type View = BTreeMap<String, Option<Vec<u8>>>;

impl Model {
    fn new() -> Self {
        Model { files: Vec::new(), dirs: vec![RDir::default()], pending: Vec::new(), info: Vec::new(), seq: 0, mark: 0 }
    }

    fn split(p: &str) -> (&str, &str) {
        p.rsplit_once('/').unwrap()
    }

    /// The directory at `/data` or `/data/d` (volatile).
    fn dir(&self, p: &str) -> Option<usize> {
        match p {
            "/data" => Some(0),
            "/data/d" => match self.dirs[0].entries.get("d") {
                Some(RNode::D(i)) => Some(*i),
                _ => None,
            },
            _ => None,
        }
    }

    fn file(&self, p: &str) -> Option<usize> {
        let (d, n) = Self::split(p);
        match self.dirs[self.dir(d)?].entries.get(n) {
            Some(RNode::F(i)) => Some(*i),
            _ => None,
        }
    }

    fn push(&mut self, t: RTarget, op: ROp, info: RInfo) {
        self.pending.push((t, op));
        self.info.push(RInfo { seq: self.seq, ..info });
        self.seq += 1;
    }

    fn change(&mut self, dir: usize, changes: Vec<(String, Option<RNode>)>) {
        let over = changes
            .iter()
            .filter_map(|(n, node)| match (node, self.dirs[dir].entries.get(n)) {
                (Some(RNode::F(i)), Some(old)) if *old != RNode::F(*i) => Some(*i),
                _ => None,
            })
            .collect();
        apply_dir(&mut self.dirs[dir].entries, &changes);
        self.push(RTarget::D(dir), ROp::D(changes), RInfo { journaled: true, over, ..Default::default() });
    }

    fn sync(&mut self, t: RTarget) {
        if self.pending.iter().any(|(x, _)| *x == t) {
            self.mark = self.seq;
        }
        let all: Vec<_> = std::mem::take(&mut self.pending).into_iter().zip(std::mem::take(&mut self.info)).collect();
        let (mine, rest): (Vec<_>, Vec<_>) = all.into_iter().partition(|((x, _), _)| *x == t);
        (self.pending, self.info) = rest.into_iter().unzip();
        let mine: Vec<(RTarget, ROp)> = mine.into_iter().map(|(p, _)| p).collect();
        for (_, op) in mine {
            match (t, &op) {
                (RTarget::F(i), _) => apply_rop(&mut self.files[i].durable, &op),
                (RTarget::D(i), ROp::D(c)) => apply_dir(&mut self.dirs[i].durable, c),
                _ => {}
            }
        }
    }

    /// Mirrors an operation the kernel completed successfully.
    fn apply(&mut self, op: &Op) {
        match op {
            Op::Create(p) => {
                if self.file(p).is_none() {
                    let (d, n) = Self::split(p);
                    let di = self.dir(d).unwrap();
                    self.files.push(RFile::default());
                    let id = self.files.len() - 1;
                    self.change(di, vec![(n.to_string(), Some(RNode::F(id)))]);
                }
            }
            Op::Pwrite(p, off, len, b) => {
                let i = self.file(p).unwrap();
                let op = ROp::W(*off, vec![*b; *len]);
                let append = *off + *len as u64 > self.files[i].durable.len() as u64;
                apply_rop(&mut self.files[i].cur, &op);
                self.push(RTarget::F(i), op, RInfo { append, ..Default::default() });
            }
            Op::Truncate(p, len) => {
                let i = self.file(p).unwrap();
                if self.files[i].cur.len() as u64 != *len {
                    let op = ROp::S(*len);
                    apply_rop(&mut self.files[i].cur, &op);
                    self.push(RTarget::F(i), op, RInfo { journaled: true, ..Default::default() });
                }
            }
            Op::Rename(a, b) => {
                let id = self.file(a).unwrap();
                if self.file(b) == Some(id) {
                    return;
                }
                let (da, na) = Self::split(a);
                let (db, nb) = Self::split(b);
                let (ia, ib) = (self.dir(da).unwrap(), self.dir(db).unwrap());
                if ia == ib {
                    // Atomic within one directory.
                    self.change(ia, vec![(na.to_string(), None), (nb.to_string(), Some(RNode::F(id)))]);
                } else {
                    // One pending change in each directory, in the order the calls made them: a
                    // replaced target first.
                    let replaced = self.dirs[ib].entries.contains_key(nb);
                    if replaced {
                        self.change(ib, vec![(nb.to_string(), Some(RNode::F(id)))]);
                        self.change(ia, vec![(na.to_string(), None)]);
                    } else {
                        self.change(ia, vec![(na.to_string(), None)]);
                        self.change(ib, vec![(nb.to_string(), Some(RNode::F(id)))]);
                    }
                    // One call: the halves are one journal transaction.
                    let n = self.info.len();
                    let (a, b) = (self.info[n - 2].seq, self.info[n - 1].seq);
                    self.info[n - 2].pair = Some(b);
                    self.info[n - 1].pair = Some(a);
                }
            }
            Op::Unlink(p) => {
                let (d, n) = Self::split(p);
                let di = self.dir(d).unwrap();
                self.change(di, vec![(n.to_string(), None)]);
            }
            Op::Mkdir => {
                self.dirs.push(RDir::default());
                let i = self.dirs.len() - 1;
                self.change(0, vec![("d".into(), Some(RNode::D(i)))]);
            }
            Op::Rmdir => self.change(0, vec![("d".into(), None)]),
            Op::FsyncFile(p) => {
                let i = self.file(p).unwrap();
                self.sync(RTarget::F(i));
            }
            Op::FsyncDir(p) => {
                let i = self.dir(p).unwrap();
                self.sync(RTarget::D(i));
            }
            Op::Syncfs => {
                if !self.pending.is_empty() {
                    self.mark = self.seq;
                }
                self.info.clear();
                for (t, op) in std::mem::take(&mut self.pending) {
                    match (t, &op) {
                        (RTarget::F(i), _) => apply_rop(&mut self.files[i].durable, &op),
                        (RTarget::D(i), ROp::D(c)) => apply_dir(&mut self.dirs[i].durable, c),
                        _ => {}
                    }
                }
            }
        }
    }

    /// The image when the pending operations `kept` reach the disk (in program order), and
    /// `torn` (position, sectors) in part.
    fn image(&self, kept: &[bool], torn: Option<(usize, u64)>) -> View {
        let mut files: Vec<Vec<u8>> = self.files.iter().map(|f| f.durable.clone()).collect();
        let mut dirs: Vec<BTreeMap<String, RNode>> = self.dirs.iter().map(|d| d.durable.clone()).collect();
        for (i, (t, op)) in self.pending.iter().enumerate() {
            let op = match torn {
                Some((at, k)) if at == i => tear(op, k),
                _ if kept[i] => op.clone(),
                _ => continue,
            };
            match (t, &op) {
                (RTarget::F(f), _) => apply_rop(&mut files[*f], &op),
                (RTarget::D(d), ROp::D(c)) => apply_dir(&mut dirs[*d], c),
                _ => {}
            }
        }
        let mut out = View::new();
        let mut stack = vec![(0usize, "/data".to_string())];
        let mut seen = BTreeSet::from([0usize]);
        while let Some((d, p)) = stack.pop() {
            for (n, node) in &dirs[d] {
                let path = format!("{p}/{n}");
                match node {
                    RNode::F(i) => {
                        out.insert(path, Some(files[*i].clone()));
                    }
                    RNode::D(i) => {
                        if seen.insert(*i) {
                            out.insert(path.clone(), None);
                            stack.push((*i, path));
                        }
                    }
                }
            }
        }
        out
    }

    /// Every image the model allows under the fault modes: nothing pending (neither mode); a
    /// prefix, the next operation torn when it is a write (`torn` alone); any subset (`reorder`),
    /// one kept write of several sectors torn (both).
    fn allowed(&self, torn: bool, reorder: bool) -> BTreeSet<View> {
        let n = self.pending.len();
        let sectors: Vec<u64> =
            self.pending.iter().map(|(_, op)| if matches!(op, ROp::W(..)) { sectors_of(op) } else { 1 }).collect();
        let mut out = BTreeSet::new();
        if !(torn || reorder) {
            out.insert(self.image(&vec![false; n], None));
            return out;
        }
        let selections: Vec<Vec<bool>> = if reorder {
            (0..1u32 << n).map(|m| (0..n).map(|j| m >> j & 1 == 1).collect()).collect()
        } else {
            (0..=n).map(|p| (0..n).map(|j| j < p).collect()).collect()
        };
        for kept in selections {
            out.insert(self.image(&kept, None));
            if !torn {
                continue;
            }
            let cuttable: Vec<usize> = if reorder {
                (0..n).filter(|j| kept[*j] && sectors[*j] > 1).collect()
            } else {
                let p = kept.iter().filter(|k| **k).count();
                (p..n).take(1).filter(|j| sectors[*j] > 1).collect()
            };
            for j in cuttable {
                for k in 1..sectors[j] {
                    let mut whole = kept.clone();
                    whole[j] = false;
                    out.insert(self.image(&whole, Some((j, k))));
                }
            }
        }
        out
    }
}

impl Model {
    /// True when the named model allows keeping `kept` whole and `torn` in part, as
    /// docs/DURABILITY.md states it: xfs keeps names and sizes in program order (a prefix, both
    /// halves of a rename between directories or neither, and every one a later sync with
    /// something to make durable came after), a file's appends in file order (the last one
    /// possibly torn), overwrites in any order; ext4-ordered also keeps, with a kept rename
    /// over an existing name, every earlier write of the file it installs, whole;
    /// process-kill keeps everything.
    fn model_allows(&self, model: CrashModel, kept: &[bool], torn: Option<(usize, u64)>) -> bool {
        let n = self.pending.len();
        let reached = |i: usize| kept[i] || torn.is_some_and(|(at, _)| at == i);
        match model {
            CrashModel::PosixWeak => true,
            CrashModel::ProcessKill => torn.is_none() && kept.iter().all(|k| *k),
            CrashModel::Xfs | CrashModel::Ext4Ordered => (0..n).all(|i| {
                let info = &self.info[i];
                let by_seq = |s: u64| self.info.iter().position(|x| x.seq == s);
                let pair_ok = info.pair.and_then(by_seq).is_none_or(|j| kept[j] == kept[i]);
                let journal_ok = !info.journaled
                    || ((!kept[i] || (0..i).all(|j| !self.info[j].journaled || kept[j]))
                        && (info.seq >= self.mark || kept[i]));
                let file = |j: usize| match self.pending[j].0 {
                    RTarget::F(f) => Some(f),
                    RTarget::D(_) => None,
                };
                let append_ok = !info.append
                    || !reached(i)
                    || (0..i)
                        .all(|j| !((self.info[j].append && file(j) == file(i)) || self.info[j].journaled) || kept[j]);
                let rename_ok = model != CrashModel::Ext4Ordered
                    || !kept[i]
                    || info.over.iter().all(|f| {
                        (0..i).all(|j| !(matches!(self.pending[j].1, ROp::W(..)) && file(j) == Some(*f)) || kept[j])
                    });
                pair_ok && journal_ok && append_ok && rename_ok
            }),
        }
    }

    /// Every image the named model allows (any subset and one torn write, filtered by it).
    fn allowed_under(&self, model: CrashModel) -> BTreeSet<View> {
        let n = self.pending.len();
        let sectors: Vec<u64> =
            self.pending.iter().map(|(_, op)| if matches!(op, ROp::W(..)) { sectors_of(op) } else { 1 }).collect();
        let mut out = BTreeSet::new();
        for m in 0..1u32 << n {
            let kept: Vec<bool> = (0..n).map(|j| m >> j & 1 == 1).collect();
            if self.model_allows(model, &kept, None) {
                out.insert(self.image(&kept, None));
            }
            for j in (0..n).filter(|j| kept[*j] && sectors[*j] > 1) {
                for k in 1..sectors[j] {
                    let mut whole = kept.clone();
                    whole[j] = false;
                    if self.model_allows(model, &whole, Some((j, k))) {
                        out.insert(self.image(&whole, Some((j, k))));
                    }
                }
            }
        }
        out
    }
}

/// Runs `ops` on a fresh kernel (crashing after durable write `crash_at`) and on the model;
/// returns both.
fn run_ops(ops: &[Op], crash_at: u64, faults: FaultConfig, seed: u64) -> (Kernel, Model) {
    let mut spec = spec_with(exec_image(), seed);
    spec.faults = FaultConfig { crash_after_durable_write: Some(crash_at), ..faults };
    let mut h = H::with(spec);
    let mut model = Model::new();
    for op in ops {
        let outcome = {
            let h = &mut h;
            let open = |h: &mut H, p: &str, flags: u64| {
                let a = h.s(p);
                match sc_exit(&mut h.k, &mut h.m, "openat", &[AT_FDCWD, a, flags, 0o644]) {
                    SyscallOutcome::Return(v) if (v as i64) >= 0 => Some(v),
                    _ => None,
                }
            };
            let on_fd = |h: &mut H, p: &str, name: &str, args: &[u64]| -> Option<SyscallOutcome> {
                let fd = open(h, p, O_RDWR)?;
                let mut a = vec![fd];
                a.extend_from_slice(args);
                let r = sc_exit(&mut h.k, &mut h.m, name, &a);
                if r != SyscallOutcome::Crash {
                    sc(&mut h.k, &mut h.m, "close", &[fd]);
                }
                Some(r)
            };
            match op {
                Op::Create(p) => open(h, p, O_CREAT | O_RDWR).map(|fd| {
                    sc(&mut h.k, &mut h.m, "close", &[fd]);
                    SyscallOutcome::Return(0)
                }),
                Op::Pwrite(p, off, len, b) => {
                    poke(&h.k, &mut h.m, h.buf, &vec![*b; *len]);
                    let buf = h.buf;
                    on_fd(h, p, "pwrite64", &[buf, *len as u64, *off])
                }
                Op::Truncate(p, len) => on_fd(h, p, "ftruncate", &[*len]),
                Op::Rename(a, b) => {
                    let (x, y) = (h.s(a), h.s(b));
                    Some(sc_exit(&mut h.k, &mut h.m, "rename", &[x, y]))
                }
                Op::Unlink(p) => {
                    let x = h.s(p);
                    Some(sc_exit(&mut h.k, &mut h.m, "unlink", &[x]))
                }
                Op::Mkdir => {
                    let x = h.s("/data/d");
                    Some(sc_exit(&mut h.k, &mut h.m, "mkdir", &[x, 0o755]))
                }
                Op::Rmdir => {
                    let x = h.s("/data/d");
                    Some(sc_exit(&mut h.k, &mut h.m, "rmdir", &[x]))
                }
                Op::FsyncFile(p) => on_fd(h, p, "fsync", &[]),
                Op::FsyncDir(p) => {
                    let fd = open(h, p, O_DIRECTORY);
                    fd.map(|fd| {
                        let r = sc_exit(&mut h.k, &mut h.m, "fsync", &[fd]);
                        if r != SyscallOutcome::Crash {
                            sc(&mut h.k, &mut h.m, "close", &[fd]);
                        }
                        r
                    })
                }
                Op::Syncfs => Some(sc_exit(&mut h.k, &mut h.m, "syncfs", &[0])),
            }
        };
        match outcome {
            Some(SyscallOutcome::Return(v)) if (v as i64) >= 0 => model.apply(op),
            Some(SyscallOutcome::Crash) => {
                model.apply(op);
                assert_eq!(h.k.durable_writes(), crash_at);
                break;
            }
            _ => {}
        }
    }
    assert!(h.k.files.fs.validate().is_ok());
    (h.k, model)
}

/// The image below `/data` as path → content (`None` for directories).
fn data_view(d: &Disk) -> View {
    d.entries
        .iter()
        .filter(|(p, _)| p.starts_with("/data/"))
        .map(|(p, e)| {
            let c = match e {
                DiskEntry::File { data, .. } => Some(data.clone()),
                _ => None,
            };
            (p.clone(), c)
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, .. ProptestConfig::default() })]

    /// (a) Every crash image, under random decisions, is one the model allows.
    #[test]
    fn crash_images_are_allowed_by_the_model(
        ops in proptest::collection::vec(op_strategy(1300), 1..30),
        crash_at in 1u64..10,
        torn in any::<bool>(),
        reorder in any::<bool>(),
        seed in any::<u64>(),
        replay in proptest::collection::vec(any::<u64>(), 0..20),
    ) {
        let faults = FaultConfig { torn_writes: torn, reordered_writes: reorder, ..Default::default() };
        let (mut k, model) = run_ops(&ops, crash_at, faults, seed);
        override_next(&mut k, replay);
        let image = k.crash_image();
        image.validate().unwrap();
        let allowed = model.allowed(torn, reorder);
        prop_assert!(allowed.contains(&data_view(&image)), "an image the model does not allow: {:?}", data_view(&image));
        // Restarting on the image gives back exactly the image.
        let mut spec = spec_with(exec_image(), seed);
        spec.disk = Some(image.clone());
        let (mut k2, _, _) = boot_spec(spec);
        prop_assert_eq!(k2.disk(), image.clone());
        prop_assert_eq!(Kernel::crash_image(&mut k2), image);
    }

    /// (c) Every state the sweep enumerates is one the model allows (with both modes, the
    /// weakest), and no two give the same image.
    #[test]
    fn sweep_states_are_allowed_by_the_model(
        ops in proptest::collection::vec(op_strategy(1300), 1..24),
        crash_at in 1u64..10,
        seed in any::<u64>(),
    ) {
        let (k, model) = run_ops(&ops, crash_at, FaultConfig::default(), seed);
        let allowed = model.allowed(true, true);
        let states = k.crash_states(24, seed);
        // The kernel forgets the pending writes of a file nothing can bring back (unlinked, its
        // entry settled); the reference keeps them, unreachable.
        prop_assert!(states.pending.len() <= model.pending.len());
        let mut images = BTreeSet::new();
        for (state, digest) in &states.states {
            let mut kk = k.clone();
            kk.set_fault_config(FaultConfig { crash_state: Some(state.clone()), ..Default::default() });
            let image = kk.crash_image();
            prop_assert_eq!(&image.digest(), digest);
            prop_assert!(allowed.contains(&data_view(&image)), "{:?} gives an image the model does not allow", state);
            prop_assert!(images.insert(image.digest()), "two states give one image");
        }
        prop_assert!(!states.states.is_empty());
    }

    /// (d) Under a named model, what decisions pick is an image the reference allows under that
    /// model; and every label a sweep gives a state is a model whose reference allows its image.
    #[test]
    fn named_models_keep_to_the_reference(
        ops in proptest::collection::vec(op_strategy(1300), 1..20),
        crash_at in 1u64..8,
        seed in any::<u64>(),
        replay in proptest::collection::vec(any::<u64>(), 0..20),
    ) {
        let (k, model) = run_ops(&ops, crash_at, FaultConfig::default(), seed);
        prop_assume!(model.pending.len() <= 12);
        for m in CrashModel::ALL {
            let mut kk = k.clone();
            kk.set_fault_config(FaultConfig { torn_writes: true, reordered_writes: true, crash_model: m, ..Default::default() });
            override_next(&mut kk, replay.clone());
            let image = data_view(&kk.crash_image());
            prop_assert!(model.allowed_under(m).contains(&image), "{} picked an image it does not allow: {:?}", m.name(), image);
        }
        let states = k.crash_states(24, seed);
        for ((state, _), labels) in states.states.iter().zip(&states.labels) {
            let mut kk = k.clone();
            kk.set_fault_config(FaultConfig { crash_state: Some(state.clone()), ..Default::default() });
            let image = data_view(&kk.crash_image());
            prop_assert!(labels.contains(&CrashModel::PosixWeak));
            for m in labels {
                prop_assert!(model.allowed_under(*m).contains(&image), "{:?} is labelled {} but the reference disagrees", state, m.name());
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, .. ProptestConfig::default() })]

    /// (b) For small cases (at most 3 pending operations), the images reachable by enumerating
    /// every decision sequence are exactly the images the model allows.
    #[test]
    fn every_allowed_image_is_reachable(
        ops in proptest::collection::vec(op_strategy(700), 1..8),
        torn in any::<bool>(),
        reorder in any::<bool>(),
    ) {
        let faults = FaultConfig { torn_writes: torn, reordered_writes: reorder, ..Default::default() };
        let (k, model) = run_ops(&ops, u64::MAX, faults, 1);
        prop_assume!(model.pending.len() <= 3);
        // Enumerate decision vectors with an odometer over the options actually offered.
        let mut reached: BTreeSet<View> = BTreeSet::new();
        let mut choices: Vec<u64> = Vec::new();
        let mut runs = 0;
        loop {
            let mut kk = k.clone();
            let mut c = choices.clone();
            c.resize(64, 0);
            override_next(&mut kk, c);
            let image = Kernel::crash_image(&mut kk);
            let taken: Vec<DecisionRecord> = kk.decisions()[k.decisions().len()..].to_vec();
            reached.insert(data_view(&image));
            runs += 1;
            prop_assert!(runs < 20_000, "too many decision vectors");
            // Next vector.
            let mut cur: Vec<u64> = taken.iter().map(|d| d.choice).collect();
            let mut i = cur.len();
            loop {
                if i == 0 {
                    break;
                }
                i -= 1;
                if cur[i] + 1 < taken[i].options {
                    cur[i] += 1;
                    cur.truncate(i + 1);
                    break;
                }
                if i == 0 {
                    cur.clear();
                    break;
                }
            }
            if cur.is_empty() {
                break;
            }
            choices = cur;
        }
        prop_assert_eq!(reached, model.allowed(torn, reorder));
    }
}

#[test]
fn hostile_fs_syscalls_never_panic() {
    use rand_chacha::rand_core::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(77);
    let fs_calls: Vec<u64> = [
        "open",
        "openat",
        "read",
        "write",
        "pread64",
        "pwrite64",
        "readv",
        "writev",
        "lseek",
        "close",
        "ftruncate",
        "truncate",
        "fallocate",
        "fsync",
        "fdatasync",
        "syncfs",
        "sync",
        "sync_file_range",
        "rename",
        "renameat",
        "renameat2",
        "unlink",
        "unlinkat",
        "mkdir",
        "mkdirat",
        "rmdir",
        "getdents64",
        "newfstatat",
        "statx",
        "fstat",
        "lstat",
        "fcntl",
        "flock",
        "link",
        "linkat",
        "symlink",
        "symlinkat",
        "readlink",
        "readlinkat",
        "chmod",
        "fchmod",
        "fchmodat",
        "utimensat",
        "access",
        "faccessat",
        "creat",
        "dup2",
        "mmap",
    ]
    .iter()
    .map(|n| nr(n))
    .collect();
    for round in 0..3u64 {
        let mut spec = spec_with(exec_image(), round);
        spec.fs.capacity_bytes = 1 << 20;
        spec.faults = FaultConfig {
            torn_writes: true,
            reordered_writes: round != 1,
            eio_on_write_ppm: 50_000,
            eio_on_fsync_ppm: 50_000,
            enospc_on_write_ppm: 20_000,
            ..Default::default()
        };
        let mut h = H::with(spec);
        let names = [
            "/data/a",
            "/data/d",
            "/data/d/b",
            "/tmp/x",
            "a",
            "d/b",
            "/data/input.txt",
            "/",
            "/data/..",
            "/proc/self/exe",
            "/proc/self/fd/3",
            "/dev/fd/0/",
            "/proc/self/fd",
            "/dev/null",
            "/data/l",
            "",
        ];
        let mut paths: Vec<u64> = names.iter().map(|n| h.s(n)).collect();
        // A deep path, a long component and an unterminated string at the end of the scratch area.
        let deep = "/d".repeat(3000);
        paths.push(path(&h.k, &mut h.m, h.buf + 0x1_0000, &deep));
        paths.push(path(&h.k, &mut h.m, h.buf + 0x2_0000, &"n".repeat(300)));
        poke(&h.k, &mut h.m, h.buf + 0x10_0000 - 4, b"/abc");
        paths.push(h.buf + 0x10_0000 - 4);
        let vals = [
            0,
            1,
            2,
            3,
            4,
            5,
            0o100 | 2,
            0o4010102,
            0o200000,
            0x200,
            0x1000,
            7,
            100,
            4096,
            1 << 20,
            u64::MAX,
            (-100i64) as u64,
            1 << 62,
            0x7fff_ffff_ffff_ffff,
        ];
        for i in 0..20_000u32 {
            let nrr = fs_calls[rng.next_u32() as usize % fs_calls.len()];
            let mut args = [0u64; 6];
            for a in &mut args {
                *a = match rng.next_u32() % 5 {
                    0 => rng.next_u64(),
                    1 | 2 => paths[rng.next_u32() as usize % paths.len()],
                    3 => h.buf + u64::from(rng.next_u32() % 0x10_0000),
                    _ => vals[rng.next_u32() as usize % vals.len()],
                };
            }
            if rng.next_u32() % 3 == 0 {
                args[0] = u64::from(rng.next_u32() % 12);
            }
            let _ = h.k.syscall(&mut h.m, nrr, args);
            if i % 2000 == 0 {
                let img = h.k.crash_image();
                img.validate().unwrap();
                h.k.disk().validate().unwrap();
                let bytes = h.k.save();
                let r = Kernel::restore(&bytes).expect("a fuzzed state restores");
                assert_eq!(r.save(), bytes);
            }
        }
        h.k.files.fs.validate().unwrap();
        let r = h.k.finish(&h.m, ExitStatus::Exited { code: 0 });
        assert!(r.syscalls >= 20_000);
    }
}

#[test]
fn a_fault_kind_is_named_as_it_is_serialized() {
    for kind in [
        FaultKind::Crash,
        FaultKind::LostUnsynced,
        FaultKind::TornWrite,
        FaultKind::ReorderedWrites,
        FaultKind::Eio,
        FaultKind::Enospc,
    ] {
        assert_eq!(serde_json::to_value(kind).unwrap(), kind.name(), "{kind:?}");
    }
}

/// Opens `/data/wal` and `/data/acked` (the second `O_SYNC`), writes and syncs the first
/// `rounds` times and appends to the second once per round, after an fsync of `/data`: the
/// durable operations of a write-ahead log and of a harness log.
fn wal_rounds(h: &mut H, rounds: u64) -> Vec<SyscallOutcome> {
    let wal = h.open("/data/wal", O_CREAT | O_RDWR | O_APPEND);
    let acked = h.open("/data/acked", O_CREAT | O_WRONLY | O_APPEND | O_SYNC);
    let dir = h.open("/data", O_DIRECTORY);
    let mut out = vec![sc_exit(&mut h.k, &mut h.m, "fsync", &[dir as u64])];
    h.sc("close", &[dir as u64]);
    for i in 0..rounds {
        poke(&h.k, &mut h.m, h.buf, format!("put k{i}\n").as_bytes());
        out.push(sc_exit(&mut h.k, &mut h.m, "write", &[wal as u64, h.buf, 7]));
        out.push(sc_exit(&mut h.k, &mut h.m, "fdatasync", &[wal as u64]));
        if out.last() == Some(&SyscallOutcome::Crash) {
            return out;
        }
        out.push(sc_exit(&mut h.k, &mut h.m, "write", &[acked as u64, h.buf, 7]));
        if out.last() == Some(&SyscallOutcome::Crash) {
            return out;
        }
    }
    out
}

#[test]
fn durable_operations_are_counted_per_path_and_reported() {
    let mut h = H::new();
    let out = wal_rounds(&mut h, 3);
    assert!(out.iter().all(|o| matches!(o, SyscallOutcome::Return(_))));
    let fd = h.open("/data", O_DIRECTORY);
    assert_eq!(h.sc("fsync", &[fd as u64]), 0);
    let r = h.k.finish(&h.m, ExitStatus::Exited { code: 0 });
    let ops: Vec<(String, u64, bool)> = r.durable_ops.iter().map(|d| (d.path.clone(), d.nth, d.promotes)).collect();
    let want = |p: &str, n, promotes| (p.to_string(), n, promotes);
    assert_eq!(
        ops,
        [
            want("/data", 1, true),
            want("/data/wal", 1, true),
            want("/data/acked", 1, true),
            want("/data/wal", 2, true),
            want("/data/acked", 2, true),
            want("/data/wal", 3, true),
            want("/data/acked", 3, true),
            want("/data", 2, false),
        ]
    );
    assert_eq!(r.durable_writes, 8, "each is a durable write too");
    assert!(r.durable_ops.windows(2).all(|w| w[0].virtual_time_ns < w[1].virtual_time_ns));
}

#[test]
fn a_crash_placed_by_meaning_strikes_its_durable_operation_with_the_state_it_names() {
    let crash = |when, nth, keep| FaultConfig {
        crash_at: vec![OpCrash { when, path: "/data/wal".into(), nth, keep }],
        ..Default::default()
    };
    // Before the second fdatasync of the WAL: its second record is pending and lost.
    let mut h = H::with({
        let mut s = spec_with(exec_image(), 3);
        s.faults = crash(When::Before, 2, None);
        s
    });
    let out = wal_rounds(&mut h, 3);
    assert_eq!(out.last(), Some(&SyscallOutcome::Crash));
    assert_eq!(out.len(), 6, "the directory's sync, write, sync, ack, write, the crashing sync");
    assert_eq!(h.k.crash_point_words(), "before durable op #2 on /data/wal");
    assert_eq!(h.k.pending_operations(), ["write of 7 bytes at 7 to /data/wal"]);
    let image = h.k.crash_image();
    assert!(matches!(image.get("/data/wal"), Some(DiskEntry::File { data, .. }) if data == b"put k0\n"));
    // The same point keeping that write, by what it is.
    let keep = KeptOps { ops: vec!["write of 7 bytes at 7 to /data/wal".into()], torn: None };
    let mut h = H::with({
        let mut s = spec_with(exec_image(), 3);
        s.faults = crash(When::Before, 2, Some(keep));
        s
    });
    wal_rounds(&mut h, 3);
    let image = h.k.crash_image();
    assert!(matches!(image.get("/data/wal"), Some(DiskEntry::File { data, .. }) if data == b"put k0\nput k1\n"));
    // After it: both records are durable, the crash comes before the program sees the return.
    let mut h = H::with({
        let mut s = spec_with(exec_image(), 3);
        s.faults = crash(When::After, 2, None);
        s
    });
    let out = wal_rounds(&mut h, 3);
    assert_eq!(out.len(), 6);
    assert_eq!(h.k.crash_point_words(), "after durable op #2 on /data/wal");
    assert!(h.k.pending_operations().is_empty());
    // A point the run never reaches, or on another path, never strikes.
    let mut h = H::with({
        let mut s = spec_with(exec_image(), 3);
        s.faults = crash(When::Before, 9, None);
        s
    });
    assert!(wal_rounds(&mut h, 3).iter().all(|o| matches!(o, SyscallOutcome::Return(_))));
    assert!(crash(When::After, 1, None).crashes());
    assert!(crash(When::After, 1, None).for_restart().crash_at.is_empty(), "a crash belongs to its life");
}

#[test]
fn storage_faults_strike_only_the_paths_they_target() {
    let eio = |path: &str| ErrorRule {
        op: IoOp::Write,
        path: path.into(),
        nth: 0,
        errno: IoErrno::Eio,
        range: None,
        keep: None,
    };
    // The configuration targets /data/wal: an error placed on the harness log never strikes.
    let mut h = H::with({
        let mut s = spec_with(exec_image(), 3);
        s.faults = FaultConfig {
            errors: vec![eio("/data/acked"), eio("/data/wal")],
            fault_paths: vec!["/data/wal".into()],
            ..Default::default()
        };
        s
    });
    let out = wal_rounds(&mut h, 1);
    assert_eq!(out[1], SyscallOutcome::Return((-5i64) as u64), "the WAL write fails");
    assert_eq!(out[3], SyscallOutcome::Return(7), "the harness log write does not");
    let r = h.k.finish(&h.m, ExitStatus::Exited { code: 0 });
    assert!(r.io_ops.iter().all(|c| c.path == "/data/wal"), "only targeted paths are offered: {:?}", r.io_ops);
    assert!(r.durable_ops.iter().all(|d| d.path == "/data/wal"));
    // A program excludes its harness files itself; rates spare them too.
    let mut h = H::with({
        let mut s = spec_with(exec_image(), 3);
        s.faults = FaultConfig { eio_on_write_ppm: 1_000_000, ..Default::default() };
        s
    });
    let at = h.s("/data/acked");
    assert_eq!(super::deja_syscall::deja(&mut h.k, &mut h.m, deja_protocol::Request::ExcludePath, &[at, 11]), 0);
    let out = wal_rounds(&mut h, 1);
    assert_eq!(out[1], SyscallOutcome::Return((-5i64) as u64));
    assert_eq!(out[3], SyscallOutcome::Return(7));
    assert!(under("/data/acked", "/data/acked") && under("/data/x", "/data") && under("/data/x", "/data/"));
    assert!(!under("/database", "/data") && !under("/dat", "/data"));
}

#[test]
fn a_stop_after_an_injected_error_is_a_fail_stop_restart_unless_the_program_says_otherwise() {
    // The program acknowledges after its failed fdatasync (an O_SYNC write to /data/acked) and,
    // given more rounds, commits on: under `auto` that is working on after the error.
    let spec_as = |fail_stop: FailStopMode| {
        let mut s = spec_with(exec_image(), 3);
        s.faults = FaultConfig {
            fail_stop,
            errors: vec![ErrorRule {
                op: IoOp::Fsync,
                path: "/data/wal".into(),
                nth: 1,
                errno: IoErrno::Eio,
                range: None,
                keep: None,
            }],
            ..Default::default()
        };
        s
    };
    let spec = || spec_as(FailStopMode::Always);
    let mut h = H::with(spec_as(FailStopMode::Auto));
    wal_rounds(&mut h, 2);
    assert!(matches!(sc_exit(&mut h.k, &mut h.m, "exit_group", &[2]), SyscallOutcome::Exit(_)));
    let r = h.k.finish(&h.m, ExitStatus::Exited { code: 2 });
    let why = r.not_fail_stop.unwrap_or_default();
    assert!(
        why.contains("status 2 after eio on fsync #1 of /data/wal") && why.contains("committed 3 time(s)"),
        "{why}"
    );
    // One commit after the error (the acknowledgement) is clean-up as far as `auto` can tell.
    let mut h = H::with(spec_as(FailStopMode::Auto));
    wal_rounds(&mut h, 1);
    assert_eq!(sc_exit(&mut h.k, &mut h.m, "exit_group", &[2]), SyscallOutcome::Crash);
    let mut h = H::with(spec());
    let out = wal_rounds(&mut h, 1);
    assert_eq!(out[2], SyscallOutcome::Return((-5i64) as u64));
    // Written after the failed fsync and not synced: pending when it stops.
    let wal = h.open("/data/wal", O_RDWR | O_APPEND);
    assert_eq!(h.write(wal, b"put k9\n"), 7);
    assert_eq!(sc_exit(&mut h.k, &mut h.m, "exit_group", &[2]), SyscallOutcome::Crash);
    assert_eq!(h.k.crash_point_words(), "at its fail-stop (status 2) after eio on fsync #1 of /data/wal");
    // The program restarts on its disk as it left it: what it wrote and did not sync is there,
    // what the failed fsync dropped is not (the first record).
    let image = h.k.crash_image();
    assert!(matches!(image.get("/data/wal"), Some(DiskEntry::File { data, .. }) if data == b"\0\0\0\0\0\0\0put k9\n"));
    // A clean exit after the error is an exit.
    let mut h = H::with(spec());
    wal_rounds(&mut h, 1);
    assert!(matches!(sc_exit(&mut h.k, &mut h.m, "exit_group", &[0]), SyscallOutcome::Exit(_)));
    // A stop without an injected error is an exit, whatever its status.
    let mut h = H::new();
    wal_rounds(&mut h, 1);
    assert!(matches!(sc_exit(&mut h.k, &mut h.m, "exit_group", &[2]), SyscallOutcome::Exit(_)));
    // The program's opt-out.
    let mut h = H::with(spec());
    assert_eq!(super::deja_syscall::deja(&mut h.k, &mut h.m, deja_protocol::Request::FailStopIsFailure, &[]), 0);
    wal_rounds(&mut h, 1);
    assert!(matches!(sc_exit(&mut h.k, &mut h.m, "exit_group", &[2]), SyscallOutcome::Exit(_)));
    let r = h.k.finish(&h.m, ExitStatus::Exited { code: 2 });
    assert_eq!(r.stopped_after_fault, None);
    // With its lives used up, the stop stands, marked as one after a fault.
    let mut h = H::with(spec());
    let crashes: Vec<FaultRecord> = (0..MAX_FAIL_STOP_LIVES)
        .map(|i| FaultRecord {
            kind: FaultKind::Crash,
            point: format!("life {i}"),
            syscall_index: 1,
            path: None,
            selected: true,
            applied: true,
            observed: false,
        })
        .collect();
    h.k.note_previous_faults(crashes);
    wal_rounds(&mut h, 1);
    assert!(matches!(sc_exit(&mut h.k, &mut h.m, "exit_group", &[2]), SyscallOutcome::Exit(_)));
    let r = h.k.finish(&h.m, ExitStatus::Exited { code: 2 });
    assert_eq!(
        r.stopped_after_fault.as_deref(),
        Some("at its fail-stop (status 2) after eio on fsync #1 of /data/wal")
    );
}

/// The labels of one crash point's states, by the paths below `/data` their images hold.
fn labelled_images(ops: &[Op], crash_at: u64) -> Vec<(View, Vec<CrashModel>)> {
    let (k, model) = run_ops(ops, crash_at, FaultConfig::default(), 1);
    let states = k.crash_states(64, 1);
    let mut out = Vec::new();
    for ((state, _), labels) in states.states.iter().zip(&states.labels) {
        let mut kk = k.clone();
        kk.set_fault_config(FaultConfig { crash_state: Some(state.clone()), ..Default::default() });
        let image = data_view(&kk.crash_image());
        for m in labels {
            assert!(model.allowed_under(*m).contains(&image), "{state:?} labelled {} against the reference", m.name());
        }
        out.push((image, labels.clone()));
    }
    out
}

#[test]
fn journaling_models_keep_what_a_sync_committed_and_renames_over_a_name_keep_the_new_data() {
    use Op::*;
    // The creation of /data/a is committed by the fsync of a's data: ext4 and XFS keep it, only
    // posix-weak may lose the name.
    let images = labelled_images(&[Create("/data/a"), Pwrite("/data/a", 0, 100, 7), FsyncFile("/data/a")], 1);
    let lost: Vec<&(View, Vec<CrashModel>)> = images.iter().filter(|(v, _)| !v.contains_key("/data/a")).collect();
    assert!(!lost.is_empty(), "{images:?}");
    for (_, labels) in lost {
        assert_eq!(labels, &vec![CrashModel::PosixWeak]);
    }
    // A new file written and renamed over an existing one: posix-weak and xfs may keep the
    // rename without the data, ext4-ordered (auto_da_alloc) may not.
    let images = labelled_images(
        &[
            Create("/data/a"),
            Pwrite("/data/a", 0, 10, 1),
            FsyncFile("/data/a"),
            FsyncDir("/data"),
            Create("/data/b"),
            FsyncDir("/data"),
            Pwrite("/data/b", 0, 10, 2),
            Rename("/data/b", "/data/a"),
        ],
        u64::MAX,
    );
    let empty_new: Vec<&(View, Vec<CrashModel>)> =
        images.iter().filter(|(v, _)| v.get("/data/a") == Some(&Some(Vec::new()))).collect();
    assert!(!empty_new.is_empty(), "{images:?}");
    for (_, labels) in &empty_new {
        assert!(labels.contains(&CrashModel::Xfs) && !labels.contains(&CrashModel::Ext4Ordered), "{labels:?}");
    }
    // Keeping everything is allowed by every model, process-kill included.
    assert!(images
        .iter()
        .any(|(v, labels)| v.get("/data/a") == Some(&Some(vec![2; 10])) && labels.contains(&CrashModel::ProcessKill)));
}

/// A kernel under `faults` with `/data/x` created (its name durable), 600 bytes of 1 written
/// to it and `HEAD` over its first 4 bytes, neither synced; and the file's descriptor.
fn two_pending_writes(faults: FaultConfig) -> (H, i64) {
    let mut s = spec_with(exec_image(), 3);
    s.faults = faults;
    let mut h = H::with(s);
    let fd = h.open("/data/x", O_CREAT | O_RDWR);
    assert_eq!(h.fsync_path("/data"), 0);
    assert_eq!(h.write(fd, &[1u8; 600]), 600);
    poke(&h.k, &mut h.m, h.buf, b"HEAD");
    let buf = h.buf;
    assert_eq!(h.sc("pwrite64", &[fd as u64, buf, 4, 0]), 4);
    (h, fd)
}

#[test]
fn a_failed_fsync_may_have_persisted_any_subset_of_what_it_covered() {
    // With reordered writes, a failed fsync keeps each pending write of its file by a decision:
    // here the second write reached the disk before the sync failed, the first did not.
    let boot = |model: CrashModel| {
        let (mut h, fd) = two_pending_writes(FaultConfig {
            errors: vec![ErrorRule::parse("fsync:/data/x:1:eio").unwrap()],
            reordered_writes: true,
            crash_model: model,
            ..Default::default()
        });
        h.k.set_decision_overrides(BTreeMap::from([(0, 0), (1, 1)]));
        assert_eq!(h.sc("fsync", &[fd as u64]), EIO);
        let points: Vec<String> = h.k.decisions().iter().map(|d| d.point.to_string()).collect();
        // The rest counts as clean: a retry succeeds.
        assert_eq!(h.sc("fsync", &[fd as u64]), 0);
        assert_eq!(h.pread(fd, 4, 0), b"HEAD".to_vec(), "the program still reads its own writes");
        (h.k.crash_image().file("/data/x").map(<[u8]>::to_vec), points)
    };
    let (image, points) = boot(CrashModel::PosixWeak);
    assert_eq!(
        points,
        ["failed sync: keep write of 600 bytes at 0 to /data/x", "failed sync: keep write of 4 bytes at 0 to /data/x"]
    );
    // posix-weak: exactly what the failed sync wrote back, the 4 bytes over an empty file.
    assert_eq!(image.as_deref(), Some(&b"HEAD"[..]));
    // xfs: both writes reach past the durable size, so they are kept in program order; the
    // first was not, so neither is.
    let (image, _) = boot(CrashModel::Xfs);
    assert_eq!(image.as_deref(), Some(&b""[..]));
    // process-kill: everything the program wrote.
    let (image, _) = boot(CrashModel::ProcessKill);
    let mut all = vec![1u8; 600];
    all[..4].copy_from_slice(b"HEAD");
    assert_eq!(image, Some(all));
    // Without reordered writes, a failed sync drops everything and takes no decision.
    let mut s = spec_with(exec_image(), 3);
    s.faults = FaultConfig { errors: vec![ErrorRule::parse("fsync:/data/x:1:eio").unwrap()], ..Default::default() };
    let mut h = H::with(s);
    let fd = h.open("/data/x", O_CREAT | O_RDWR);
    assert_eq!(h.write(fd, b"data"), 4);
    assert_eq!(h.sc("fsync", &[fd as u64]), EIO);
    assert!(h.k.decisions().is_empty());
    assert_eq!(h.sc("fsync", &[fd as u64]), 0);
    assert_eq!(h.fsync_path("/data"), 0);
    assert_eq!(h.k.crash_image().file("/data/x"), Some(&b""[..]));
    // A placed error can name what the failed sync wrote back (`keep=`, positions among the
    // file's pending operations): no decision, the named write durable, the rest dropped, and
    // the report says which.
    let rule = ErrorRule::parse("fsync:/data/x:1:eio:keep=1").unwrap();
    assert_eq!(rule.arg(), "fsync:/data/x:1:eio:keep=1");
    assert!(rule.describe().ends_with("writing back its pending operation(s) 2"), "{}", rule.describe());
    let (mut h, fd) = two_pending_writes(FaultConfig { errors: vec![rule], ..Default::default() });
    assert_eq!(h.sc("fsync", &[fd as u64]), EIO);
    assert!(h.k.decisions().is_empty());
    let failed = &h.k.faults.failed_syncs;
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].point, "eio on fsync #1 of /data/x");
    assert_eq!(failed[0].pending, ["write of 600 bytes at 0 to /data/x", "write of 4 bytes at 0 to /data/x"]);
    assert_eq!(failed[0].kept, [false, true]);
    assert_eq!(h.k.crash_image().file("/data/x"), Some(&b"HEAD"[..]));
    // Positions are checked, and only a sync takes them.
    assert_eq!(ErrorRule::parse("fsync:/x:2:eio:keep=2,0").unwrap().keep, Some(vec![0, 2]));
    assert!(ErrorRule::parse("write:/x:2:eio:keep=0").is_err());
    assert!(ErrorRule::parse("fsync:/x:2:eio:keep=a").is_err());
}

#[test]
fn ownership_changes_only_to_the_programs_own_ids() {
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 4096);
    let p = path(&k, &mut m, buf, "/tmp/owned");
    assert_eq!(sc(&mut k, &mut m, "openat", &[AT_FDCWD, p, 0o101, 0o644]), 3);
    assert_eq!(sc(&mut k, &mut m, "chown", &[p, 1000, 1000]), 0);
    assert_eq!(sc(&mut k, &mut m, "fchown", &[3, u64::from(u32::MAX), 1000]), 0);
    assert_eq!(sc(&mut k, &mut m, "chown", &[p, 0, 1000]), -1, "EPERM: root's uid");
    assert_eq!(sc(&mut k, &mut m, "fchown", &[3, 1000, 0]), -1, "EPERM: another group");
    assert_eq!(sc(&mut k, &mut m, "fchownat", &[AT_FDCWD, p, 1000, 1000, 0x8000]), EINVAL);
    let input = path(&k, &mut m, buf + 256, "/data/input.txt");
    assert_eq!(sc(&mut k, &mut m, "chown", &[input, 1000, 1000]), -30, "EROFS: a declared input");
    assert_eq!(sc(&mut k, &mut m, "fchown", &[99, 1000, 1000]), EBADF);
}

/// A read-only root (an image): its files read through its symlinks, nothing in it changes,
/// `/data` and `/tmp` stay the disk's, declared files sit on top, and none of it is on the disk.
#[test]
fn a_read_only_root_sits_under_the_disk_and_the_declared_files() {
    use crate::fs::{Root, RootNode};
    let file = |mode: u32, s: &str| RootNode::File { mode, data: std::sync::Arc::from(s.as_bytes()) };
    let nodes = BTreeMap::from([
        ("/etc".to_string(), RootNode::Dir { mode: 0o755 }),
        ("/etc/os-release".to_string(), file(0o644, "ID=img\n")),
        ("/etc/hosts".to_string(), file(0o644, "from the image\n")),
        ("/usr".to_string(), RootNode::Dir { mode: 0o755 }),
        ("/usr/lib".to_string(), RootNode::Dir { mode: 0o755 }),
        ("/usr/lib/tool".to_string(), file(0o750, "#!tool")),
        ("/lib".to_string(), RootNode::Symlink("usr/lib".into())),
        // Below a symlink: not reachable by that name, and it must not replace the link.
        ("/lib/hidden".to_string(), file(0o644, "no")),
        ("/tmp".to_string(), RootNode::Dir { mode: 0o755 }),
        ("/tmp/img".to_string(), file(0o644, "tmp file of the image")),
    ]);
    let mut spec = spec_with(exec_image(), 42);
    spec.root = Some(std::sync::Arc::new(Root { nodes }));
    spec.files.insert("/etc/hosts".into(), b"declared\n".to_vec());
    let mut h = H::with(spec);
    let fd = h.open("/lib/tool", 0);
    assert!(fd > 0, "through the root's symlink: {fd}");
    assert_eq!(h.read(fd, 100), b"#!tool");
    assert_eq!(h.stat("/usr/lib/tool").unwrap().0, 0o100750, "the image's mode");
    assert_eq!(h.open("/lib/hidden", 0), ENOENT);
    let fd = h.open("/etc/hosts", 0);
    assert_eq!(h.read(fd, 100), b"declared\n", "a declared file over the image's");
    // Nothing of the image changes.
    assert_eq!(h.open("/etc/os-release", O_RDWR), EROFS);
    assert_eq!(h.call1("unlink", "/etc/os-release", &[]), EROFS);
    assert_eq!(h.open("/etc/new", O_CREAT | O_WRONLY), EACCES);
    assert_eq!(h.call1("mkdir", "/usr/x", &[0o755]), EACCES);
    // /tmp is the disk's (writable), and the image's files under it are there, read-only.
    let fd = h.open("/tmp/mine", O_CREAT | O_WRONLY);
    assert!(fd > 0, "{fd}");
    assert_eq!(h.write(fd, b"x"), 1);
    let fd = h.open("/tmp/img", 0);
    assert_eq!(h.read(fd, 100), b"tmp file of the image");
    assert_eq!(h.fsync_path("/tmp/mine"), 0);
    assert_eq!(h.fsync_path("/tmp"), 0);
    // The disk holds what the program wrote, none of the image.
    let disk = h.k.disk();
    assert!(disk.get("/tmp/mine").is_some());
    for p in ["/etc", "/etc/os-release", "/usr/lib/tool", "/lib", "/tmp/img"] {
        assert!(disk.get(p).is_none(), "{p} is not the disk's");
    }
}

/// A read-only shared mapping follows its file (writes, growth, truncation), and one far
/// larger than its file costs only the file's pages.
#[test]
fn a_shared_file_mapping_follows_its_file_and_costs_only_its_pages() {
    let mut h = H::new();
    let fd = h.open("/data/db", O_CREAT | O_RDWR);
    assert_eq!(h.pwrite(fd, &[b'A'; 4096], 0), 4096);
    let small = h.sc("mmap", &[0, 1 << 20, 1, 1, fd as u64, 0]);
    assert!(small > 0);
    assert_eq!(h.call1("unlink", "/data/db", &[]), 0, "an unlinked file's mappings follow it too");
    assert_eq!(h.sc("munmap", &[small as u64, 1 << 20]), 0);
    let (committed, _) = h.k.commit();
    let big = h.sc("mmap", &[0, 16 << 30, 1, 1, fd as u64, 0]);
    assert!(big > 0, "a 16 GiB mapping of a 4 KiB file: {big}");
    let big = big as u64;
    assert_eq!(h.k.commit().0, committed + 1, "one page of file");
    assert_eq!(peek(&h.k, &mut h.m, big, 2), b"AA");
    assert_eq!(h.pwrite(fd, b"BC", 4095), 2);
    assert_eq!(peek(&h.k, &mut h.m, big + 4094, 3), b"ABC", "the write and the growth show");
    assert_eq!(h.k.commit().0, committed + 2);
    assert_eq!(h.sc("ftruncate", &[fd as u64, 100]), 0);
    assert_eq!(h.pwrite(fd, b"Z", 0), 1);
    assert_eq!(peek(&h.k, &mut h.m, big, 1), b"Z");
    assert_eq!(h.sc("ftruncate", &[fd as u64, 8192]), 0);
    assert_eq!(peek(&h.k, &mut h.m, big + 4096, 2), [0, 0], "cut, then grown again: zeros");
    assert_eq!(h.sc("munmap", &[big, 16 << 30]), 0);
    assert_eq!(h.k.commit().0, committed);
}
