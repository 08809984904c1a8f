//! Each part of the kernel state saved and restored on its own: a kernel with open files,
//! pending writes, a lock, a connected socket with unread data, an open FIFO holding bytes,
//! a queued signal, two threads, assertions and pending output has every part round-trip to
//! the same bytes, keeps running as before with any one part restored, and refuses damaged
//! encodings of every part.

use deja_protocol::{AssertKind, Request};

use super::deja_syscall::{deja, write_catalog};
use super::net::tcp_pair;
use super::threads::GLIBC_FLAGS;
use super::*;
use crate::persist::Persist;
use crate::record::oracle::Oracle;

/// `O_CREAT | O_RDWR`.
const CREATE_RW: u64 = 0o102;

/// A kernel in a state where every part holds something, its memory and a scratch buffer.
fn busy_kernel() -> (Kernel, FakeMemory, u64) {
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 0x10000);
    // Files: a declared file read in part, a new file with a durable and a pending write, a
    // record lock.
    let p = path(&k, &mut m, buf, "/data/input.txt");
    assert_eq!(sc(&mut k, &mut m, "openat", &[AT_FDCWD, p, 0, 0]), 3);
    assert_eq!(sc(&mut k, &mut m, "read", &[3, buf + 0x100, 5]), 5);
    let p = path(&k, &mut m, buf + 0x200, "/data/out");
    assert_eq!(sc(&mut k, &mut m, "openat", &[AT_FDCWD, p, CREATE_RW, 0o644]), 4);
    poke(&k, &mut m, buf + 0x300, b"durable pending");
    assert_eq!(sc(&mut k, &mut m, "write", &[4, buf + 0x300, 7]), 7);
    assert_eq!(sc(&mut k, &mut m, "fsync", &[4]), 0);
    assert_eq!(sc(&mut k, &mut m, "write", &[4, buf + 0x307, 8]), 8);
    let mut lock = [0u8; 32];
    lock[0..2].copy_from_slice(&1u16.to_le_bytes());
    lock[16..24].copy_from_slice(&10u64.to_le_bytes());
    poke(&k, &mut m, buf + 0x400, &lock);
    assert_eq!(sc(&mut k, &mut m, "fcntl", &[4, 6, buf + 0x400]), 0);
    // Net: a connected pair with bytes the server side has not read.
    let (_, client, server) = tcp_pair(&mut k, &mut m, buf + 0x1000, 8080);
    assert_eq!((client, server), (6, 7), "finish_busy reads the server side");
    assert_eq!(sc(&mut k, &mut m, "write", &[client, buf + 0x300, 15]), 15);
    // Oracle: two sites, one failed.
    let sites = [(AssertKind::Always, "p.rs", 1, "holds"), (AssertKind::Sometimes, "p.rs", 2, "sometimes")];
    let (cat, ids) = write_catalog(&k, &mut m, buf + 0x2000, &sites);
    assert_eq!(deja(&mut k, &mut m, Request::Catalog, &[cat, 2]), 0);
    assert_eq!(deja(&mut k, &mut m, Request::Assert, &[ids[0], 1, buf, 0]), 0);
    assert_eq!(deja(&mut k, &mut m, Request::Assert, &[ids[1], 0, buf, 0]), 0);
    // Files and net: a FIFO open for reading and writing, holding bytes.
    let p = path(&k, &mut m, buf + 0x200, "/data/fifo");
    assert_eq!(sc(&mut k, &mut m, "mknodat", &[AT_FDCWD, p, 0o010600, 0]), 0);
    assert_eq!(sc(&mut k, &mut m, "openat", &[AT_FDCWD, p, 2, 0]), 8);
    assert_eq!(sc(&mut k, &mut m, "write", &[8, buf + 0x300, 7]), 7);
    // Process: a grown break, blocked signals left pending, one queued with its value.
    let top = sc(&mut k, &mut m, "brk", &[0]) as u64;
    assert_eq!(sc(&mut k, &mut m, "brk", &[top + 0x3000]), (top + 0x3000) as i64);
    poke(&k, &mut m, buf + 0x700, &((1u64 << 9) | (1 << 33)).to_le_bytes());
    assert_eq!(sc(&mut k, &mut m, "rt_sigprocmask", &[0, buf + 0x700, 0, 8]), 0);
    assert_eq!(sc(&mut k, &mut m, "kill", &[1, 10]), 0);
    let mut info = [0u8; 128];
    info[8..12].copy_from_slice(&(-1i32).to_le_bytes());
    info[24..32].copy_from_slice(&0x5eed_u64.to_le_bytes());
    poke(&k, &mut m, buf + 0x780, &info);
    assert_eq!(sc(&mut k, &mut m, "rt_sigqueueinfo", &[1, 34, buf + 0x780]), 0);
    poke(&k, &mut m, buf + 0x710, &(1u64 << 33).to_le_bytes());
    poke(&k, &mut m, buf + 0x720, &[0u8; 16]);
    // Sched: a second thread, the clock moved by a sleep.
    override_next(&mut k, vec![0]);
    assert_eq!(sc(&mut k, &mut m, "clone", &[GLIBC_FLAGS, buf + 0x8000, buf + 0x500, buf + 0x504, 0x7000_0000]), 2);
    poke(&k, &mut m, buf + 0x600, &[0u64.to_le_bytes(), 2500u64.to_le_bytes()].concat());
    sc(&mut k, &mut m, "nanosleep", &[buf + 0x600, 0]);
    // Record: output not taken.
    assert_eq!(sc(&mut k, &mut m, "write", &[1, buf + 0x300, 15]), 15);
    (k, m, buf)
}

/// What a continued run gives: the report, the output and the syscalls' return values.
type Finished = (RunReport, Vec<(Stream, Vec<u8>)>, Vec<i64>);

/// Continues a [`busy_kernel`] with calls that read every part, then ends the run.
fn finish_busy(mut k: Kernel, mut m: FakeMemory, buf: u64) -> Finished {
    let mut returns = Vec::new();
    for (name, args) in [
        ("read", vec![3, buf + 0x900, 64]),
        ("pread64", vec![4, buf + 0x900, 64, 0]),
        ("write", vec![4, buf + 0x900, 20]),
        ("fsync", vec![4]),
        ("read", vec![7, buf + 0xa00, 64]),
        ("gettid", vec![]),
        ("getrandom", vec![buf + 0xb00, 16, 0]),
        ("brk", vec![0]),
        ("rt_sigpending", vec![buf + 0xc00, 8]),
        ("clock_gettime", vec![1, buf + 0xd00]),
        ("write", vec![2, buf + 0x900, 20]),
        ("read", vec![8, buf + 0xe00, 64]),
        ("rt_sigtimedwait", vec![buf + 0x710, buf + 0xe80, buf + 0x720, 8]),
    ] {
        returns.push(sc(&mut k, &mut m, name, &args));
    }
    let ids = k.oracle.sites.keys().copied().collect::<Vec<_>>();
    assert_eq!(deja(&mut k, &mut m, Request::Assert, &[ids[0], 1, buf, 0]), 0);
    let out = k.take_output();
    (k.finish(&m, ExitStatus::Exited { code: 0 }), out, returns)
}

/// `part` restored from its own bytes; the bytes it saves are the bytes it came from.
fn round_trip<P: Persist>(part: &P, context: &P::Context) -> P {
    let bytes = part.save();
    let back = P::restore(&bytes, context).expect("restore");
    assert_eq!(back.save(), bytes, "save(restore(s)) == s");
    back
}

/// A copy of `k` with one part replaced by its round trip, for every part, with its name.
fn each_part_restored(k: &Kernel) -> Vec<(&'static str, Kernel)> {
    let exited = k.process.exit.is_some();
    let syscalls = k.record.syscalls();
    let with = |f: &dyn Fn(&mut Kernel)| {
        let mut c = k.clone();
        f(&mut c);
        c
    };
    vec![
        ("process", with(&|c| c.process = round_trip(&k.process, &()))),
        ("files", with(&|c| c.files = round_trip(&k.files, &()))),
        ("net", with(&|c| c.net = round_trip(&k.net, &()))),
        ("sched", with(&|c| c.sched = round_trip(&k.sched, &exited))),
        ("record", with(&|c| c.record = round_trip(&k.record, &()))),
        ("oracle", with(&|c| c.oracle = round_trip(&k.oracle, &syscalls))),
        ("faults", with(&|c| c.faults = round_trip(&k.faults, &()))),
        ("rng", with(&|c| c.rng = round_trip(&k.rng, &()))),
        ("kernel", Kernel::restore(&k.save()).expect("restore the kernel")),
    ]
}

#[test]
fn every_part_round_trips_and_runs_on_the_same() {
    let (k, m, buf) = busy_kernel();
    assert_eq!(k.sched.threads.threads.len(), 2);
    assert!(!k.net.objects.is_empty() && !k.files.locks.is_empty() && !k.record.output.is_empty());
    assert!(!k.pending_operations().is_empty(), "a write is still pending");
    let (want, want_out, want_returns) = finish_busy(k.clone(), m.clone(), buf);
    assert!(want.assertions.iter().any(|a| a.failures == 1));
    assert_eq!(want_returns[..5], [13, 15, 20, 0, 15], "the continuation reads the files and the socket");
    assert_eq!(want_returns[11..], [7, 34], "and the FIFO and the queued signal");
    for (name, restored) in each_part_restored(&k) {
        assert_eq!(restored.save(), k.save(), "{name}: the whole state saves the same");
        let (got, out, returns) = finish_busy(restored, m.clone(), buf);
        assert_eq!(returns, want_returns, "{name}: return values");
        assert_eq!(got.digest, want.digest, "{name}: trace digest");
        assert_eq!(got, want, "{name}: report");
        assert_eq!(out, want_out, "{name}: output");
    }
}

/// Every cut of `part`'s bytes is a decode error, one byte more is trailing bytes, and the
/// `broken` copy (an invariant not holding) is inconsistent.
fn refuses_damage<P: Persist>(name: &str, part: &P, broken: Option<&P>, context: &P::Context) {
    let bytes = part.save();
    for n in 0..bytes.len() {
        let e = P::restore(&bytes[..n], context).err();
        assert!(matches!(e, Some(RestoreError::Decode { .. })), "{name} cut at {n}: {e:?}");
    }
    let mut long = bytes.clone();
    long.push(0);
    let e = P::restore(&long, context).err();
    assert!(matches!(e, Some(RestoreError::TrailingBytes { count: 1 })), "{name} with a byte more: {e:?}");
    if let Some(b) = broken {
        let e = P::restore(&b.save(), context).err();
        assert!(matches!(e, Some(RestoreError::Invalid { .. })), "{name} broken: {e:?}");
    }
}

#[test]
fn every_part_refuses_damaged_bytes() {
    let (k, _, _) = busy_kernel();
    let exited = k.process.exit.is_some();
    let syscalls = k.record.syscalls();
    let mut process = k.process.clone();
    process.brk_cur = process.brk_start - 1;
    refuses_damage("process", &k.process, Some(&process), &());
    let mut files = k.files.clone();
    files.locks.extend((0..crate::files::MAX_LOCKS as u64).map(|i| ((u64::MAX, 1, i), (1, i + 1))));
    refuses_damage("files", &k.files, Some(&files), &());
    let mut net = k.net.clone();
    net.next_obj = 0;
    refuses_damage("net", &k.net, Some(&net), &());
    let mut sched = k.sched.clone();
    sched.threads.current = 99;
    refuses_damage("sched", &k.sched, Some(&sched), &exited);
    let mut record = k.record.clone();
    *record.counts.entry("read".into()).or_default() += 1;
    refuses_damage("record", &k.record, Some(&record), &());
    refuses_damage("oracle", &k.oracle, None, &syscalls);
    let e = Oracle::restore(&k.oracle.save(), &0).err();
    assert!(matches!(e, Some(RestoreError::Invalid { .. })), "assertions after the trace's syscalls: {e:?}");
    let mut faults = k.faults.clone();
    faults.log.decisions[0].index = 7;
    refuses_damage("faults", &k.faults, Some(&faults), &());
    refuses_damage("rng", &k.rng, None, &());
}
