//! The syscall trace and its digest.
//!
//! Every syscall is encoded in a fixed little-endian binary form and folded into a hash chain:
//! `chain = BLAKE3(chain || encoding)`, starting from 32 zero bytes. The trace digest
//! ([`RunReport::trace_digest`]) is the chain value after the last entry, so the whole state of
//! the digest is 32 bytes and can be saved and restored (a running `blake3::Hasher` cannot).
//! The first 8 bytes of the chain value after each syscall's entry form
//! [`RunReport::entry_hashes`]: the first syscall whose hashes two runs disagree on is the first
//! after which their traces differ. Emulated and fatal CPU exceptions and reseeds of the random
//! stream enter the chain too, as pseudo-entries with their own tag (so a difference in one
//! shows at the next syscall's hash; `entry_hashes` stays one hash per syscall).
//!
//! Encoding of a syscall entry (tag 1): `tag u8, index u64, nr u64, args 6×u64, has_ret u8,
//! ret u64, vtime u64, has_data u8, data [u8; 32]` where `data` is the BLAKE3 of every byte the
//! syscall copied from or to the program's memory (see [`DataHasher`]), so two runs whose
//! syscalls agree in arguments but not in the bytes they wrote or read still diverge. Encoding
//! of an exception entry (tag 2): `tag u8, seq u64, vector u8,
//! rip u64, addr u64, error_code u64, outcome u8, value u64, vtime u64` where `outcome` is
//! 1 = emulated (value = TSC), 2 = fatal (value = signal). Encoding of a reseed entry (tag 3,
//! see [`Kernel::reseed`]): `tag u8, seed u64, syscalls u64, vtime u64` where `syscalls` is
//! the number of syscalls recorded before it. Encoding of an I/O completion (tag 4, a blocked
//! socket/pipe/poll call served later): `tag u8, tid u64, nr u64, ret u64, syscalls u64, vtime
//! u64, has_data u8, data [u8; 32]`. Encoding of the calls the program made through the vDSO
//! since its last entry (tag 5, see [`crate::time::vdso`]): `tag u8, calls u64, syscalls u64, vtime
//! u64`.
//!
//! The saved state of a [`Tracer`] is the chain value, the entry hashes, the recorded entries
//! (when recording) and the counters. A recorded entry also carries its rendering
//! ([`crate::syscalls::render`]), which is not in the encoding: the path strings it shows
//! change neither the chain nor the entry hashes.
//!
//! [`RunReport::entry_hashes`]: crate::RunReport::entry_hashes
//! [`RunReport::trace_digest`]: crate::RunReport::trace_digest
//! [`Kernel::reseed`]: crate::Kernel::reseed

use crate::prelude::*;
use crate::{MemError, Memory, Prot};

/// One syscall as recorded in the trace.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TraceEntry {
    /// 0-based position in the run.
    pub index: u64,
    /// Syscall number.
    pub nr: u64,
    /// Syscall name (`unknown_<nr>` when deja has no name for it).
    pub name: String,
    /// The six argument registers.
    pub args: [u64; 6],
    /// The value returned in RAX (two's complement errno on failure), or `None` for exit.
    pub ret: Option<u64>,
    /// Virtual time (ns since boot) when the syscall returned.
    pub vtime_ns: u64,
    /// BLAKE3 (first 16 hex digits) of the bytes the syscall moved between the program's
    /// memory and the kernel, in order, or `None` when it moved none.
    pub data: Option<String>,
    /// The syscall as strace would write it, its arguments shown by the kinds of its row and
    /// its paths as the program's memory held them at its entry ([`syscalls::render`](crate::syscalls::render)), e.g.
    /// `write(1, 0x7ffd1000, 12) = 12`.
    pub text: String,
}

/// Tag of a syscall entry.
const TAG_SYSCALL: u8 = 1;
/// Bytes of a syscall entry's encoding: tag, index, number, six arguments, whether it returned
/// and its value, virtual time, whether data was hashed and its hash.
const SYSCALL_ENC: usize = 1 + 8 + 8 + 6 * 8 + 1 + 8 + 8 + 1 + 32;
/// Tag of an exception pseudo-entry.
const TAG_EXCEPTION: u8 = 2;
/// Tag of a reseed pseudo-entry.
const TAG_RESEED: u8 = 3;
/// Tag of an I/O completion pseudo-entry.
const TAG_COMPLETION: u8 = 4;
/// Tag of a vDSO-calls pseudo-entry.
const TAG_VDSO_CALLS: u8 = 5;

/// How an exception was resolved, for the digest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExceptionRecord {
    /// Emulated instruction; the TSC value returned.
    Emulated(u64),
    /// The program died of this signal.
    Fatal(i32),
    /// The fault became this signal, which the program's handler took.
    Handled(i32),
}

/// The running trace.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Tracer {
    /// The hash chain: BLAKE3 of the previous value and the last entry's encoding.
    chain: [u8; 32],
    entry_hashes: Vec<u64>,
    trace: Vec<TraceEntry>,
    record: bool,
    syscalls: u64,
    exceptions: u64,
}

impl Tracer {
    /// A fresh trace; `record` keeps the full entries.
    pub fn new(record: bool) -> Self {
        Tracer { chain: [0; 32], entry_hashes: Vec::new(), trace: Vec::new(), record, syscalls: 0, exceptions: 0 }
    }

    /// Number of syscalls recorded.
    pub fn syscalls(&self) -> u64 {
        self.syscalls
    }

    /// Records one syscall. `describe` gives its name and its rendering
    /// (`openat(AT_FDCWD, "/data/wal", 0x241, 0o644) = 3`), which the syscall table makes; it is
    /// called only when entries are recorded, and neither enters the digest.
    pub fn syscall(
        &mut self,
        nr: u64,
        args: [u64; 6],
        ret: Option<u64>,
        vtime: u64,
        data: Option<[u8; 32]>,
        describe: impl FnOnce() -> (String, String),
    ) {
        let index = self.syscalls;
        self.syscalls = self.syscalls.saturating_add(1);
        // The encoding, on the stack: this runs on every syscall.
        let mut enc = [0u8; SYSCALL_ENC];
        let mut at = 0;
        let mut put = |bytes: &[u8]| {
            enc[at..at + bytes.len()].copy_from_slice(bytes);
            at += bytes.len();
        };
        put(&[TAG_SYSCALL]);
        put(&index.to_le_bytes());
        put(&nr.to_le_bytes());
        for a in args {
            put(&a.to_le_bytes());
        }
        put(&[u8::from(ret.is_some())]);
        put(&ret.unwrap_or(0).to_le_bytes());
        put(&vtime.to_le_bytes());
        put(&[u8::from(data.is_some())]);
        put(&data.unwrap_or([0; 32]));
        debug_assert_eq!(at, SYSCALL_ENC);
        self.chain_in(&enc);
        // The entry's hash is the chain's value after it: the first entry two runs disagree on is
        // the first whose hashes differ (an exception or completion before it included), for no
        // hashing beyond the chain's.
        let mut first = [0u8; 8];
        first.copy_from_slice(&self.chain[..8]);
        self.entry_hashes.push(u64::from_le_bytes(first));
        if self.record {
            let data = data.map(|d| d[..8].iter().map(|b| format!("{b:02x}")).collect());
            let (name, text) = describe();
            self.trace.push(TraceEntry { index, nr, name, args, ret, vtime_ns: vtime, data, text });
        }
    }

    /// Records an emulated, handled or fatal exception.
    pub fn exception(&mut self, vector: u8, rip: u64, addr: u64, error_code: u64, rec: ExceptionRecord, vtime: u64) {
        let seq = self.exceptions;
        self.exceptions = self.exceptions.saturating_add(1);
        let mut enc = Vec::with_capacity(60);
        enc.push(TAG_EXCEPTION);
        enc.extend_from_slice(&seq.to_le_bytes());
        enc.push(vector);
        enc.extend_from_slice(&rip.to_le_bytes());
        enc.extend_from_slice(&addr.to_le_bytes());
        enc.extend_from_slice(&error_code.to_le_bytes());
        let (outcome, value) = match rec {
            ExceptionRecord::Emulated(tsc) => (1u8, tsc),
            ExceptionRecord::Fatal(sig) => (2u8, sig as u64),
            ExceptionRecord::Handled(sig) => (3u8, sig as u64),
        };
        enc.push(outcome);
        enc.extend_from_slice(&value.to_le_bytes());
        enc.extend_from_slice(&vtime.to_le_bytes());
        self.chain_in(&enc);
    }

    /// Records that the random stream was reseeded with `seed`.
    pub fn reseed(&mut self, seed: u64, vtime: u64) {
        let mut enc = Vec::with_capacity(25);
        enc.push(TAG_RESEED);
        enc.extend_from_slice(&seed.to_le_bytes());
        enc.extend_from_slice(&self.syscalls.to_le_bytes());
        enc.extend_from_slice(&vtime.to_le_bytes());
        self.chain_in(&enc);
    }

    /// Records that a blocked I/O call of thread `tid` completed with `ret`, outside any
    /// syscall of the program (see [`crate::net`]).
    pub fn completion(&mut self, tid: u64, nr: u64, ret: u64, vtime: u64, data: Option<[u8; 32]>) {
        let mut enc = Vec::with_capacity(75);
        enc.push(TAG_COMPLETION);
        for v in [tid, nr, ret, self.syscalls, vtime] {
            enc.extend_from_slice(&v.to_le_bytes());
        }
        enc.push(u8::from(data.is_some()));
        enc.extend_from_slice(&data.unwrap_or([0; 32]));
        self.chain_in(&enc);
    }

    /// Records that the program made `calls` calls through the vDSO since its last entry into
    /// deja (counted, not traced one by one: they are not syscalls).
    pub fn vdso_calls(&mut self, calls: u64, vtime: u64) {
        let mut enc = Vec::with_capacity(25);
        enc.push(TAG_VDSO_CALLS);
        for v in [calls, self.syscalls, vtime] {
            enc.extend_from_slice(&v.to_le_bytes());
        }
        self.chain_in(&enc);
    }

    /// `chain = BLAKE3(chain || enc)`.
    fn chain_in(&mut self, enc: &[u8]) {
        let mut h = blake3::Hasher::new();
        h.update(&self.chain);
        h.update(enc);
        self.chain = *h.finalize().as_bytes();
    }

    /// The digest of everything recorded so far (the chain value).
    pub fn digest(&self) -> blake3::Hash {
        blake3::Hash::from_bytes(self.chain)
    }

    /// Checks the invariants of a restored trace: one entry hash per syscall, and the full
    /// entries exactly when recording.
    pub fn validate(&self) -> Result<(), crate::persist::RestoreError> {
        use crate::persist::ensure;
        let n = self.syscalls;
        ensure(self.entry_hashes.len() as u64 == n, || {
            format!("{} entry hashes for {n} syscalls", self.entry_hashes.len())
        })?;
        let want = if self.record { n } else { 0 };
        ensure(self.trace.len() as u64 == want, || format!("{} trace entries for {n} syscalls", self.trace.len()))
    }

    /// Per-syscall hashes.
    pub fn entry_hashes(&self) -> &[u64] {
        &self.entry_hashes
    }

    /// Whether the full trace is being kept.
    pub fn recording(&self) -> bool {
        self.record
    }

    /// The recorded entries (empty unless recording).
    pub fn entries(&self) -> &[TraceEntry] {
        &self.trace
    }
}

/// Every present page as (address, first 8 bytes of the BLAKE3 of its contents), in address
/// order, and for each page the first 2 bytes of the BLAKE3 of each of its 64-byte lines (to
/// name where in a page two runs differ).
pub fn page_hashes(mem: &dyn crate::Memory) -> (Vec<(u64, u64)>, Vec<Vec<u16>>) {
    let (mut out, mut lines) = (Vec::new(), Vec::new());
    mem.for_each_page(&mut |addr, data| {
        if reserved_page(addr) {
            return;
        }
        let h = blake3::hash(data);
        let mut w = [0u8; 8];
        w.copy_from_slice(&h.as_bytes()[..8]);
        out.push((addr, u64::from_le_bytes(w)));
        lines.push(
            data.chunks(PAGE_LINE)
                .map(|l| {
                    let h = blake3::hash(l);
                    u16::from_le_bytes([h.as_bytes()[0], h.as_bytes()[1]])
                })
                .collect(),
        );
    });
    (out, lines)
}

/// The granularity of [`page_hashes`]' line hashes, in bytes.
pub const PAGE_LINE: usize = 64;

/// BLAKE3 over every present page of the current space: `address u64 LE || 4096 bytes`, in
/// address order; then, for each of `others` (a process's pid and the space it runs in, the
/// current one excluded), `b"process" || pid u64 LE` and its pages the same way. A lone
/// process's digest is its own pages'.
pub fn memory_digest(mem: &dyn crate::Memory, others: &[(u64, u64)]) -> blake3::Hash {
    let mut h = blake3::Hasher::new();
    mem.for_each_page(&mut |addr, data| {
        if !reserved_page(addr) {
            h.update(&addr.to_le_bytes());
            h.update(data);
        }
    });
    for &(pid, space) in others {
        h.update(b"process");
        h.update(&pid.to_le_bytes());
        mem.for_each_page_in(space, &mut |addr, data| {
            if !reserved_page(addr) {
                h.update(&addr.to_le_bytes());
                h.update(data);
            }
        });
    }
    h.finalize()
}

/// True for a page the program cannot own: one in the range the guest placement keeps for its
/// kernel ([`crate::mm::user_layout::RESERVED_START`]), part of no digest in either placement.
fn reserved_page(addr: u64) -> bool {
    crate::mm::user_layout::reserved(addr, addr + 1)
}

/// A [`Memory`] that hashes every byte the kernel reads from or writes to the program while it
/// serves one syscall, tagged by direction and address.
pub(crate) struct DataHasher<'a> {
    inner: &'a mut dyn Memory,
    // `Memory::read` takes `&self`; the hasher is the only state it changes.
    hasher: core::cell::RefCell<blake3::Hasher>,
    moved: core::cell::Cell<bool>,
}

impl<'a> DataHasher<'a> {
    pub(crate) fn new(inner: &'a mut dyn Memory) -> Self {
        DataHasher { inner, hasher: Default::default(), moved: Default::default() }
    }

    /// The digest of the bytes moved, if any were.
    pub(crate) fn finish(&self) -> Option<[u8; 32]> {
        self.moved.get().then(|| *self.hasher.borrow().finalize().as_bytes())
    }

    fn note(&self, dir: u8, addr: u64, bytes: &[u8]) {
        self.moved.set(true);
        let mut h = self.hasher.borrow_mut();
        h.update(&[dir]);
        h.update(&addr.to_le_bytes());
        h.update(&(bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    }
}

impl Memory for DataHasher<'_> {
    fn populate(&mut self, addr: u64, len: u64, prot: Prot) -> Result<(), MemError> {
        self.inner.populate(addr, len, prot)
    }
    fn protect(&mut self, addr: u64, len: u64, prot: Prot) {
        self.inner.protect(addr, len, prot)
    }
    fn unmap(&mut self, addr: u64, len: u64) {
        self.inner.unmap(addr, len)
    }
    fn move_pages(&mut self, from: u64, to: u64, len: u64) {
        self.inner.move_pages(from, to, len)
    }
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemError> {
        self.inner.read(addr, buf)?;
        self.note(b'r', addr, buf);
        Ok(())
    }
    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), MemError> {
        self.inner.write(addr, data)?;
        self.note(b'w', addr, data);
        Ok(())
    }
    fn for_each_page(&self, f: &mut dyn FnMut(u64, &[u8])) {
        self.inner.for_each_page(f)
    }
    fn for_each_page_in(&self, space: u64, f: &mut dyn FnMut(u64, &[u8])) {
        self.inner.for_each_page_in(space, f)
    }
    fn free_frames(&self) -> u64 {
        self.inner.free_frames()
    }
    fn space(&self) -> u64 {
        self.inner.space()
    }
    fn fork_space(&mut self, shared: &[(u64, u64)]) -> Result<u64, MemError> {
        self.inner.fork_space(shared)
    }
    fn unshare(&mut self, addr: u64) -> Result<bool, MemError> {
        self.inner.unshare(addr)
    }
    fn new_space(&mut self) -> Result<u64, MemError> {
        self.inner.new_space()
    }
    fn switch_space(&mut self, id: u64) {
        self.inner.switch_space(id)
    }
    fn drop_space(&mut self, id: u64) {
        self.inner.drop_space(id)
    }
    fn code_mapped(&mut self, data: &[u8], start: u64, end: u64, base: u64) {
        self.inner.code_mapped(data, start, end, base)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `AT_FDCWD` as a register holds it.
    const AT_FDCWD: u64 = -100i64 as u64;

    /// A syscall recorded without a name or a rendering.
    fn unnamed() -> (String, String) {
        (String::new(), String::new())
    }

    #[test]
    fn digest_depends_on_every_field() {
        let base = |f: &dyn Fn(&mut Tracer)| {
            let mut t = Tracer::new(true);
            f(&mut t);
            t.digest()
        };
        let a = base(&|t| t.syscall(1, [1, 2, 3, 4, 5, 6], Some(3), 1000, None, unnamed));
        let b = base(&|t| t.syscall(1, [1, 2, 3, 4, 5, 6], Some(3), 1000, None, unnamed));
        assert_eq!(a, b);
        let c = base(&|t| t.syscall(1, [1, 2, 3, 4, 5, 7], Some(3), 1000, None, unnamed));
        let d = base(&|t| t.syscall(1, [1, 2, 3, 4, 5, 6], None, 1000, None, unnamed));
        let e = base(&|t| t.syscall(1, [1, 2, 3, 4, 5, 6], Some(3), 1001, None, unnamed));
        let f = base(&|t| t.syscall(1, [1, 2, 3, 4, 5, 6], Some(3), 1000, Some([9; 32]), unnamed));
        assert!(a != c && a != d && a != e && c != d && a != f);
        let openat = || ("openat".to_string(), "openat(AT_FDCWD, \"/data/wal\", 0x241, 0o644) = 3".to_string());
        let g = base(&|t| t.syscall(257, [AT_FDCWD, 0x1000, 0x241, 0o644, 0, 0], Some(3), 1000, None, openat));
        let h = base(&|t| t.syscall(257, [AT_FDCWD, 0x1000, 0x241, 0o644, 0, 0], Some(3), 1000, None, unnamed));
        assert_eq!(g, h, "the name and the rendering stay out of the digest");
        let mut t = Tracer::new(true);
        t.syscall(257, [AT_FDCWD, 0x1000, 0x241, 0o644, 0, 0], Some(3), 1000, None, openat);
        assert_eq!(t.entries()[0].text, "openat(AT_FDCWD, \"/data/wal\", 0x241, 0o644) = 3");
        assert_eq!(t.entries()[0].name, "openat");
        let mut t = Tracer::new(false);
        t.syscall(0, [0; 6], Some(0), 1, None, unnamed);
        t.exception(13, 0x401000, 0, 0, ExceptionRecord::Emulated(3), 2);
        assert_eq!(t.entry_hashes().len(), 1);
        assert!(t.entries().is_empty());
        let before = t.digest();
        t.reseed(5, 3);
        assert_ne!(t.digest(), before, "a reseed enters the chain");
        assert_eq!(t.entry_hashes().len(), 1, "but not the entry hashes");
    }

    #[test]
    fn digest_is_the_hash_chain() {
        let mut t = Tracer::new(false);
        assert_eq!(t.digest().as_bytes(), &[0u8; 32]);
        t.reseed(1, 2);
        let mut enc = vec![TAG_RESEED];
        for v in [1u64, 0, 2] {
            enc.extend_from_slice(&v.to_le_bytes());
        }
        let mut h = blake3::Hasher::new();
        h.update(&[0u8; 32]);
        h.update(&enc);
        assert_eq!(t.digest(), h.finalize());
    }

    #[test]
    fn save_restore_round_trip() {
        for record in [false, true] {
            let mut t = Tracer::new(record);
            t.syscall(1, [1, 2, 3, 4, 5, 6], Some(3), 1000, Some([7; 32]), unnamed);
            t.exception(13, 0x401000, 0, 0, ExceptionRecord::Emulated(3), 2);
            let mut r: Tracer = postcard::from_bytes(&postcard::to_stdvec(&t).unwrap()).unwrap();
            r.validate().unwrap();
            assert_eq!(r, t);
            for x in [&mut t, &mut r] {
                x.syscall(0, [0; 6], Some(0), 3000, None, unnamed);
                x.exception(14, 0x401000, 8, 6, ExceptionRecord::Fatal(11), 4000);
            }
            assert_eq!(r.digest(), t.digest());
            assert_eq!(r.entry_hashes(), t.entry_hashes());
            assert_eq!(r.entries(), t.entries());
            let mut bad = r.clone();
            bad.syscalls += 1;
            assert!(bad.validate().is_err());
        }
    }

    #[test]
    fn data_hasher_sees_bytes_in_both_directions() {
        let mut mem = crate::FakeMemory::new(4);
        mem.populate(0x1000, 0x1000, Prot::RW).unwrap();
        let digest = |payload: &[u8]| {
            let mut m = mem.clone();
            let mut h = DataHasher::new(&mut m);
            h.write(0x1000, payload).unwrap();
            let mut back = [0u8; 3];
            h.read(0x1000, &mut back).unwrap();
            h.finish()
        };
        assert_eq!(digest(b"abc"), digest(b"abc"));
        assert_ne!(digest(b"abc"), digest(b"abd"));
        let mut m = mem.clone();
        assert_eq!(DataHasher::new(&mut m).finish(), None, "no bytes moved, no data hash");
    }
}
