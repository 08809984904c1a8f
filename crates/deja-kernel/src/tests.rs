//! Kernel-level tests: hand-built ELF images loaded into a [`FakeMemory`], then syscalls and
//! exceptions driven exactly as the shell would.
//!
//! This file holds the shared harness (image builders, [`FakeMemory`], the run helpers) and the
//! tests of loading, memory, exceptions and the basic syscalls; the larger subjects have files
//! of their own under `tests/` (the file system, FIFOs, sockets, threads, signals, decisions,
//! deja's syscall, the parts of the saved state).

use std::collections::BTreeMap;

use rand_chacha::rand_core::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::abi::auxv::*;
use crate::decisions::rng::RandomStream;
use crate::host::hostchan::Rewrite;
use crate::mm::stack::*;
use crate::mm::user_layout::*;
use crate::*;

mod antithesis;
mod decisions;
mod deja_syscall;
mod fifo;
mod fs;
mod jumps;
mod net;
mod persist;
mod procfs;
mod procs;
mod signals;
mod threads;
mod unix;
mod vdso;

/// One segment of a test image.
struct Seg {
    vaddr: u64,
    flags: u32,
    data: Vec<u8>,
    memsz: u64,
}

/// Code at the start of the text segment: rdtsc; hlt; rdtscp; rex.w cpuid.
const CODE: [u8; 9] = [0x0f, 0x31, 0xf4, 0x0f, 0x01, 0xf9, 0x48, 0x0f, 0xa2];

/// Builds an ELF64 image. The first `PT_LOAD` maps the headers (offset 0) at `base`.
fn build_elf(e_type: u16, machine: u16, base: u64, segs: &[Seg], interp: Option<&str>) -> Vec<u8> {
    let nph = 1 + segs.len() + usize::from(interp.is_some());
    let hdr_len = 64 + 56 * nph;
    let mut out = vec![0u8; hdr_len];
    let mut phdrs: Vec<[u64; 7]> = Vec::new(); // type|flags<<32, offset, vaddr, paddr, filesz, memsz, align
    phdrs.push([1 | (4 << 32), 0, base, base, hdr_len as u64, hdr_len as u64, 0x1000]);
    if let Some(i) = interp {
        let interp_off = out.len();
        out.extend_from_slice(i.as_bytes());
        out.push(0);
        let n = i.len() as u64 + 1;
        phdrs.push([3 | (4 << 32), interp_off as u64, 0, 0, n, n, 1]);
    }
    for s in segs {
        // Next offset congruent to vaddr mod page size.
        let mut off = out.len() as u64;
        let want = s.vaddr % 4096;
        off = off.div_ceil(4096) * 4096 + want;
        out.resize(off as usize, 0);
        out.extend_from_slice(&s.data);
        phdrs.push([1 | (u64::from(s.flags) << 32), off, s.vaddr, s.vaddr, s.data.len() as u64, s.memsz, 0x1000]);
    }
    let entry = segs.iter().find(|s| s.flags & 1 != 0).map_or(0, |s| s.vaddr);
    out[..4].copy_from_slice(b"\x7fELF");
    out[4] = 2;
    out[5] = 1;
    out[6] = 1;
    out[16..18].copy_from_slice(&e_type.to_le_bytes());
    out[18..20].copy_from_slice(&machine.to_le_bytes());
    out[20..24].copy_from_slice(&1u32.to_le_bytes());
    out[24..32].copy_from_slice(&entry.to_le_bytes());
    out[32..40].copy_from_slice(&64u64.to_le_bytes());
    out[52..54].copy_from_slice(&64u16.to_le_bytes());
    out[54..56].copy_from_slice(&56u16.to_le_bytes());
    out[56..58].copy_from_slice(&(nph as u16).to_le_bytes());
    for (i, p) in phdrs.iter().enumerate() {
        let o = 64 + i * 56;
        out[o..o + 4].copy_from_slice(&(p[0] as u32).to_le_bytes());
        out[o + 4..o + 8].copy_from_slice(&((p[0] >> 32) as u32).to_le_bytes());
        for (j, v) in p[1..].iter().enumerate() {
            out[o + 8 + j * 8..o + 16 + j * 8].copy_from_slice(&v.to_le_bytes());
        }
    }
    out
}

fn segs(base: u64) -> Vec<Seg> {
    vec![
        Seg { vaddr: base + 0x1000, flags: 1 | 4, data: CODE.to_vec(), memsz: CODE.len() as u64 },
        Seg { vaddr: base + 0x2010, flags: 2 | 4, data: b"hello data".to_vec(), memsz: 0x3000 },
    ]
}

fn exec_image() -> Vec<u8> {
    build_elf(2, 62, 0x40_0000, &segs(0x40_0000), None)
}

fn pie_image() -> Vec<u8> {
    build_elf(3, 62, 0, &segs(0), None)
}

/// Overrides the next decisions of `k` with `choices`, in order (replacing any overrides).
fn override_next(k: &mut Kernel, choices: Vec<u64>) {
    let start = k.decision_count();
    k.set_decision_overrides(choices.into_iter().zip(start..).map(|(c, i)| (i, c)).collect());
}

fn spec_with(image: Vec<u8>, seed: u64) -> ProgramSpec {
    let mut files = BTreeMap::new();
    files.insert("/data/input.txt".to_string(), b"line one\nline two\n".to_vec());
    files.insert("/data/empty".to_string(), Vec::new());
    ProgramSpec {
        image,
        exe_path: "/bin/prog".into(),
        argv: vec!["prog".into(), "arg with space".into()],
        env: vec!["HOME=/".into(), "X=1".into()],
        files,
        stdin: b"stdin bytes".to_vec(),
        seed,
        record_trace: true,
        ..Default::default()
    }
}

const FRAMES: u64 = 65536; // 256 MiB

fn boot() -> (Kernel, Entry, FakeMemory) {
    boot_spec(spec_with(exec_image(), 42))
}

fn boot_spec(spec: ProgramSpec) -> (Kernel, Entry, FakeMemory) {
    let mut m = FakeMemory::new(FRAMES);
    let (k, e) = Kernel::load(spec, &mut m).expect("load");
    (k, e, m)
}

fn nr(name: &str) -> u64 {
    syscalls::number(name).unwrap_or_else(|| panic!("no syscall {name}"))
}

/// Calls a syscall and returns RAX as i64; panics on Exit.
fn sc(k: &mut Kernel, m: &mut FakeMemory, name: &str, args: &[u64]) -> i64 {
    let mut a = [0u64; 6];
    a[..args.len()].copy_from_slice(args);
    match k.syscall(m, nr(name), a) {
        SyscallOutcome::Return(v) => v as i64,
        other => panic!("{name} ended the run: {other:?}"),
    }
}

fn sc_exit(k: &mut Kernel, m: &mut FakeMemory, name: &str, args: &[u64]) -> SyscallOutcome {
    let mut a = [0u64; 6];
    a[..args.len()].copy_from_slice(args);
    k.syscall(m, nr(name), a)
}

const EFAULT: i64 = -14;
const ENOENT: i64 = -2;
const EBADF: i64 = -9;
const EINVAL: i64 = -22;
const ENOMEM: i64 = -12;

/// An RW anonymous scratch mapping.
fn scratch(k: &mut Kernel, m: &mut FakeMemory, len: u64) -> u64 {
    let a = sc(k, m, "mmap", &[0, len, 3, 0x22, u64::MAX, 0]);
    assert!(a > 0, "mmap failed: {a}");
    a as u64
}

fn poke(k: &Kernel, m: &mut FakeMemory, addr: u64, data: &[u8]) {
    k.process.mappings.copy_out(m, addr, data).expect("poke");
}

fn peek(k: &Kernel, m: &mut FakeMemory, addr: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    k.process.mappings.copy_in(m, addr, &mut b).expect("peek");
    b
}

fn peek_u64(m: &FakeMemory, addr: u64) -> u64 {
    let mut b = [0u8; 8];
    m.read(addr, &mut b).unwrap();
    u64::from_le_bytes(b)
}

fn cstr_at(m: &FakeMemory, addr: u64) -> String {
    let mut out = Vec::new();
    let mut a = addr;
    loop {
        let mut b = [0u8; 1];
        m.read(a, &mut b).unwrap();
        if b[0] == 0 {
            break;
        }
        out.push(b[0]);
        a += 1;
    }
    String::from_utf8(out).unwrap()
}

fn path(k: &Kernel, m: &mut FakeMemory, at: u64, p: &str) -> u64 {
    let mut b = p.as_bytes().to_vec();
    b.push(0);
    poke(k, m, at, &b);
    at
}

// ---------------------------------------------------------------------------------------------
// Loading

#[test]
fn exec_layout_and_initial_stack() {
    let (k, e, mut m) = boot();
    assert_eq!(e.rip, 0x40_1000);
    assert_eq!(e.rsp % 16, 0);
    assert!(e.rsp < STACK_TOP && e.rsp > STACK_TOP - STACK_EAGER);
    // argc, argv, envp.
    assert_eq!(peek_u64(&m, e.rsp), 2);
    let argv0 = peek_u64(&m, e.rsp + 8);
    let argv1 = peek_u64(&m, e.rsp + 16);
    assert_eq!(peek_u64(&m, e.rsp + 24), 0);
    assert_eq!(cstr_at(&m, argv0), "prog");
    assert_eq!(cstr_at(&m, argv1), "arg with space");
    assert_eq!(cstr_at(&m, peek_u64(&m, e.rsp + 32)), "HOME=/");
    assert_eq!(cstr_at(&m, peek_u64(&m, e.rsp + 40)), "X=1");
    assert_eq!(peek_u64(&m, e.rsp + 48), 0);
    // auxv.
    let mut aux = BTreeMap::new();
    let mut a = e.rsp + 56;
    loop {
        let (key, val) = (peek_u64(&m, a), peek_u64(&m, a + 8));
        a += 16;
        if key == AT_NULL {
            break;
        }
        assert!(aux.insert(key, val).is_none(), "duplicate auxv {key}");
    }
    assert_eq!(aux[&AT_PHDR], 0x40_0040);
    assert_eq!(aux[&AT_PHENT], 56);
    assert_eq!(aux[&AT_PHNUM], 3);
    assert_eq!(aux[&AT_PAGESZ], 4096);
    assert_eq!(aux[&AT_ENTRY], 0x40_1000);
    assert_eq!(aux[&AT_BASE], 0);
    assert_eq!(aux[&AT_UID], 1000);
    assert_eq!(aux[&AT_EGID], 1000);
    assert_eq!(aux[&AT_SECURE], 0);
    assert_eq!(aux[&AT_CLKTCK], 100);
    assert_eq!(aux[&AT_HWCAP], HWCAP);
    // The vDSO: an ELF header where AT_SYSINFO_EHDR says.
    assert_eq!(aux[&33], crate::time::vdso::VDSO_ADDR);
    assert_eq!(&peek(&k, &mut m, aux[&33], 4)[..], b"\x7fELF");
    assert_eq!(cstr_at(&m, aux[&AT_PLATFORM]), "x86_64");
    assert_eq!(cstr_at(&m, aux[&AT_EXECFN]), "/bin/prog");
    let mut random = [0u8; 16];
    m.read(aux[&AT_RANDOM], &mut random).unwrap();
    let mut want = [0u8; 16];
    RandomStream::new(42).fill(&mut want);
    assert_eq!(random, want);
    // Strings sit above the tables and below the top.
    assert!(argv0 > aux[&AT_RANDOM] && argv0 < STACK_TOP);
    // The phdrs are readable at AT_PHDR.
    let mut ph = [0u8; 4];
    m.read(aux[&AT_PHDR], &mut ph).unwrap();
    assert_eq!(u32::from_le_bytes(ph), 1);
    // Segments: contents, bss, protections.
    let mut b = [0u8; 10];
    m.read(0x40_2010, &mut b).unwrap();
    assert_eq!(&b, b"hello data");
    let mut z = [0xffu8; 64];
    m.read(0x40_2010 + 10, &mut z).unwrap();
    assert!(z.iter().all(|x| *x == 0));
    assert_eq!(m.pages[&0x40_1000].0, Prot(5));
    assert_eq!(m.pages[&0x40_2000].0, Prot::RW);
    assert_eq!(m.pages[&0x40_5000].0, Prot::RW);
    assert_eq!(m.pages[&0x40_0000].0, Prot::READ);
    assert!(!m.pages.contains_key(&0x40_6000));
    assert_eq!(k.brk(), 0x40_6000);
    // Only the top of the stack is populated.
    assert!(m.pages.contains_key(&(STACK_TOP - STACK_EAGER)));
    assert!(!m.pages.contains_key(&(STACK_TOP - STACK_EAGER - PAGE_SIZE)));
}

#[test]
fn pie_is_loaded_at_the_fixed_bias() {
    let (k, e, m) = boot_spec(spec_with(pie_image(), 1));
    assert_eq!(e.rip, PIE_BASE + 0x1000);
    let mut b = [0u8; 10];
    m.read(PIE_BASE + 0x2010, &mut b).unwrap();
    assert_eq!(&b, b"hello data");
    assert_eq!(k.brk(), PIE_BASE + 0x6000);
    let maps = k.proc_maps();
    assert!(maps.starts_with("555555554000-555555555000 r--p 00000000 00:01 "), "{maps}");
}

#[test]
fn shared_boundary_page_gets_union_protection() {
    let s = vec![
        Seg { vaddr: 0x40_1000, flags: 5, data: vec![0x90; 0x10], memsz: 0x10 },
        Seg { vaddr: 0x40_1800, flags: 6, data: vec![7; 8], memsz: 0x900 },
    ];
    let img = build_elf(2, 62, 0x40_0000, &s, None);
    let (_, _, m) = boot_spec(spec_with(img, 0));
    assert_eq!(m.pages[&0x40_1000].0, Prot(7));
    assert_eq!(m.pages[&0x40_2000].0, Prot::RW);
    let mut b = [0u8; 1];
    m.read(0x40_1800, &mut b).unwrap();
    assert_eq!(b[0], 7);
}

fn load_err(image: Vec<u8>) -> LoadError {
    let mut m = FakeMemory::new(FRAMES);
    Kernel::load(spec_with(image, 0), &mut m).expect_err("load must fail")
}

#[test]
fn load_errors() {
    assert!(matches!(load_err(Vec::new()), LoadError::NotElf));
    assert!(matches!(load_err(b"#!/bin/sh\necho hi\n".to_vec()), LoadError::NotElf));
    let mut i = exec_image();
    i[4] = 1;
    assert!(matches!(load_err(i), LoadError::Not64Bit));
    assert!(matches!(
        load_err(build_elf(2, 183, 0x40_0000, &segs(0x40_0000), None)),
        LoadError::WrongMachine { machine: 183 }
    ));
    let dynamic = build_elf(3, 62, 0, &segs(0), Some("/lib64/ld-linux-x86-64.so.2"));
    match load_err(dynamic) {
        LoadError::Dynamic { interpreter } => assert_eq!(interpreter, "/lib64/ld-linux-x86-64.so.2"),
        e => panic!("{e:?}"),
    }
    assert!(matches!(load_err(build_elf(1, 62, 0, &segs(0), None)), LoadError::NotExecutable { e_type: 1 }));
    assert!(matches!(load_err(build_elf(4, 62, 0, &segs(0), None)), LoadError::NotExecutable { e_type: 4 }));
    let mut lib = pie_image();
    lib[24..32].copy_from_slice(&0u64.to_le_bytes());
    assert!(matches!(load_err(lib), LoadError::NotExecutable { e_type: 3 }));
    assert!(matches!(load_err(exec_image()[..40].to_vec()), LoadError::Malformed { .. }));
    let img = exec_image();
    assert!(matches!(load_err(img[..img.len() - 3].to_vec()), LoadError::Malformed { .. }));
    assert!(matches!(load_err(img[..100].to_vec()), LoadError::Malformed { .. }));
    let big = vec![Seg { vaddr: 0x40_1000, flags: 5, data: vec![1; 8], memsz: 1 }];
    assert!(matches!(load_err(build_elf(2, 62, 0x40_0000, &big, None)), LoadError::Malformed { .. }));
    let low = vec![Seg { vaddr: 0x1000, flags: 5, data: vec![1; 8], memsz: 8 }];
    assert!(matches!(load_err(build_elf(2, 62, 0x0, &low, None)), LoadError::Malformed { .. }));
    let mut m = FakeMemory::new(100);
    let e = Kernel::load(spec_with(exec_image(), 0), &mut m).expect_err("too small");
    assert!(matches!(e, LoadError::TooBig { .. }), "{e:?}");
    // Every message names the problem.
    assert!(LoadError::Dynamic { interpreter: "x".into() }.to_string().contains("crt-static"));
    let e = load_err(img[..100].to_vec());
    assert!(e.to_string().starts_with("malformed ELF: program header table ends at"), "{e}");
    assert!(e.to_string().ends_with("past the end of the file (0x64)"), "{e}");
    let damage = std::error::Error::source(&e).expect("what is damaged is the source").to_string();
    assert_eq!(e.to_string(), format!("malformed ELF: {damage}"));
}

#[test]
fn hostile_images_never_panic() {
    let base = exec_image();
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    for i in 0..3000 {
        let mut img = base.clone();
        let flips = 1 + rng.next_u32() % 8;
        for _ in 0..flips {
            let at = (rng.next_u32() as usize) % img.len().min(if i % 2 == 0 { 300 } else { usize::MAX });
            img[at] = rng.next_u32() as u8;
        }
        if i % 7 == 0 {
            img.truncate(rng.next_u32() as usize % img.len());
        }
        let mut m = FakeMemory::new(4096);
        let _ = Kernel::load(spec_with(img, 0), &mut m);
    }
}

// ---------------------------------------------------------------------------------------------
// I/O

#[test]
fn stdout_and_stderr_are_collected_in_order() {
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 4096);
    poke(&k, &mut m, buf, b"out1err1out2");
    assert_eq!(sc(&mut k, &mut m, "write", &[1, buf, 4]), 4);
    assert_eq!(sc(&mut k, &mut m, "write", &[2, buf + 4, 4]), 4);
    assert_eq!(sc(&mut k, &mut m, "write", &[1, buf + 8, 4]), 4);
    assert_eq!(sc(&mut k, &mut m, "write", &[1, buf, 0]), 0);
    let out = k.take_output();
    assert_eq!(
        out,
        vec![
            (Stream::Stdout, b"out1".to_vec()),
            (Stream::Stderr, b"err1".to_vec()),
            (Stream::Stdout, b"out2".to_vec())
        ]
    );
    assert!(k.take_output().is_empty());
    assert_eq!(sc(&mut k, &mut m, "write", &[0, buf, 4]), EBADF);
    assert_eq!(sc(&mut k, &mut m, "write", &[9, buf, 4]), EBADF);
    assert_eq!(sc(&mut k, &mut m, "write", &[1, 0x1234, 4]), EFAULT);
    assert_eq!(sc(&mut k, &mut m, "write", &[1, u64::MAX - 2, 4]), EFAULT);
    assert_eq!(sc(&mut k, &mut m, "write", &[1, 0x40_1000, 4]), 4, "text is readable");
    // writev gathers.
    let iov = buf + 256;
    let mut v = Vec::new();
    for (b, l) in [(buf, 3u64), (buf + 8, 4)] {
        v.extend_from_slice(&b.to_le_bytes());
        v.extend_from_slice(&l.to_le_bytes());
    }
    poke(&k, &mut m, iov, &v);
    k.take_output();
    assert_eq!(sc(&mut k, &mut m, "writev", &[1, iov, 2]), 7);
    assert_eq!(k.take_output(), vec![(Stream::Stdout, b"outout2".to_vec())]);
    assert_eq!(sc(&mut k, &mut m, "writev", &[1, 0x10, 2]), EFAULT);
    assert_eq!(sc(&mut k, &mut m, "writev", &[1, iov, 5000]), EINVAL);
}

/// `FIONREAD` at `fd`: what the kernel wrote, or the error.
fn bytes_ready(k: &mut Kernel, m: &mut FakeMemory, fd: u64, buf: u64) -> Result<u32, i64> {
    match sc(k, m, "ioctl", &[fd, 0x541b, buf]) {
        0 => Ok(u32::from_le_bytes(peek(k, m, buf, 4).try_into().unwrap())),
        e => Err(e),
    }
}

#[test]
fn fionread_counts_what_is_left_to_read() {
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 4096);
    assert_eq!(bytes_ready(&mut k, &mut m, 0, buf), Ok(11), "all of stdin");
    assert_eq!(sc(&mut k, &mut m, "read", &[0, buf + 64, 5]), 5);
    assert_eq!(bytes_ready(&mut k, &mut m, 0, buf), Ok(6), "stdin after a read");
    assert_eq!(bytes_ready(&mut k, &mut m, 1, buf), Ok(0), "stdout");
    let p = path(&k, &mut m, buf + 128, "/data/input.txt");
    assert_eq!(sc(&mut k, &mut m, "openat", &[AT_FDCWD, p, 0, 0]), 3);
    assert_eq!(sc(&mut k, &mut m, "read", &[3, buf + 64, 4]), 4);
    assert_eq!(bytes_ready(&mut k, &mut m, 3, buf), Ok(14), "a file after a read");
    assert_eq!(sc(&mut k, &mut m, "pipe2", &[buf + 256, 0]), 0);
    let (r, w) = (peek_u32(&k, &mut m, buf + 256), peek_u32(&k, &mut m, buf + 260));
    assert_eq!(sc(&mut k, &mut m, "write", &[u64::from(w), buf + 64, 3]), 3);
    assert_eq!(bytes_ready(&mut k, &mut m, u64::from(r), buf), Ok(3), "a pipe");
    let p = path(&k, &mut m, buf + 128, "/data");
    let dir = sc(&mut k, &mut m, "openat", &[AT_FDCWD, p, 0o200000, 0]) as u64;
    assert_eq!(bytes_ready(&mut k, &mut m, dir, buf), Err(-25), "ENOTTY for a directory");
    assert_eq!(bytes_ready(&mut k, &mut m, 99, buf), Err(EBADF));
}

/// The `u32` at `addr`.
fn peek_u32(k: &Kernel, m: &mut FakeMemory, addr: u64) -> u32 {
    u32::from_le_bytes(peek(k, m, addr, 4).try_into().unwrap())
}

#[test]
fn stdin_reads_then_eof() {
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 4096);
    assert_eq!(sc(&mut k, &mut m, "read", &[0, buf, 5]), 5);
    assert_eq!(peek(&k, &mut m, buf, 5), b"stdin");
    assert_eq!(sc(&mut k, &mut m, "read", &[0, 0xdead_0000, 5]), EFAULT);
    assert_eq!(sc(&mut k, &mut m, "read", &[0, buf, 100]), 6);
    assert_eq!(peek(&k, &mut m, buf, 6), b" bytes");
    assert_eq!(sc(&mut k, &mut m, "read", &[0, buf, 100]), 0);
    assert_eq!(sc(&mut k, &mut m, "read", &[1, buf, 100]), EBADF);
    assert_eq!(sc(&mut k, &mut m, "lseek", &[0, 0, 0]), -29);
    // Reading into read-only memory faults.
    let ro = sc(&mut k, &mut m, "mmap", &[0, 4096, 1, 0x22, u64::MAX, 0]) as u64;
    assert_eq!(sc(&mut k, &mut m, "read", &[0, ro, 1]), 0, "EOF: nothing copied");
}

#[test]
fn declared_files_open_read_stat_seek() {
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 8192);
    let p = path(&k, &mut m, buf + 4096, "/data/input.txt");
    let fd = sc(&mut k, &mut m, "openat", &[AT_FDCWD, p, 0x80000, 0]);
    assert_eq!(fd, 3);
    assert_eq!(sc(&mut k, &mut m, "read", &[3, buf, 4]), 4);
    assert_eq!(peek(&k, &mut m, buf, 4), b"line");
    assert_eq!(sc(&mut k, &mut m, "fstat", &[3, buf + 1024]), 0);
    let st = peek(&k, &mut m, buf + 1024, 144);
    assert_eq!(u64::from_le_bytes(st[48..56].try_into().unwrap()), 18);
    assert_eq!(u32::from_le_bytes(st[24..28].try_into().unwrap()) & 0o170000, 0o100000);
    assert_eq!(sc(&mut k, &mut m, "lseek", &[3, 0, 2]), 18);
    assert_eq!(sc(&mut k, &mut m, "read", &[3, buf, 4]), 0);
    assert_eq!(sc(&mut k, &mut m, "lseek", &[3, 5, 0]), 5);
    assert_eq!(sc(&mut k, &mut m, "read", &[3, buf, 3]), 3);
    assert_eq!(peek(&k, &mut m, buf, 3), b"one");
    assert_eq!(sc(&mut k, &mut m, "lseek", &[3, (-100i64) as u64, 1]), EINVAL);
    assert_eq!(sc(&mut k, &mut m, "pread64", &[3, buf, 4, 14]), 4);
    assert_eq!(peek(&k, &mut m, buf, 4), b"two\n");
    assert_eq!(sc(&mut k, &mut m, "fcntl", &[3, 1]), 1, "O_CLOEXEC");
    assert_eq!(sc(&mut k, &mut m, "write", &[3, buf, 1]), EBADF);
    // statx via AT_EMPTY_PATH, like std's File::metadata.
    let empty = path(&k, &mut m, buf + 4000, "");
    assert_eq!(sc(&mut k, &mut m, "statx", &[3, empty, 0x1000, 0xfff, buf + 2048]), 0);
    let sx = peek(&k, &mut m, buf + 2048, 256);
    assert_eq!(u64::from_le_bytes(sx[40..48].try_into().unwrap()), 18);
    assert_eq!(sc(&mut k, &mut m, "statx", &[0, 0, 0, 0xfff, 0]), EFAULT, "std's statx probe");
    assert_eq!(sc(&mut k, &mut m, "newfstatat", &[AT_FDCWD, p, buf + 1024, 0]), 0);
    assert_eq!(sc(&mut k, &mut m, "close", &[3]), 0);
    assert_eq!(sc(&mut k, &mut m, "close", &[3]), EBADF);
    // Relative paths resolve against "/".
    let rel = path(&k, &mut m, buf + 5000, "data/../data/input.txt");
    assert_eq!(sc(&mut k, &mut m, "open", &[rel, 0, 0]), 3);
    // Errors.
    let missing = path(&k, &mut m, buf + 6000, "/data/missing");
    assert_eq!(sc(&mut k, &mut m, "openat", &[AT_FDCWD, missing, 0, 0]), ENOENT);
    assert_eq!(sc(&mut k, &mut m, "access", &[missing, 0]), ENOENT);
    let in_proc = path(&k, &mut m, buf + 6100, "/proc/self/new");
    assert_eq!(sc(&mut k, &mut m, "openat", &[AT_FDCWD, in_proc, 0x41, 0o644]), -13, "EACCES");
    assert_eq!(sc(&mut k, &mut m, "openat", &[AT_FDCWD, p, 1, 0]), -30, "EROFS");
    assert_eq!(sc(&mut k, &mut m, "openat", &[AT_FDCWD, p, 2, 0]), -30);
    assert_eq!(sc(&mut k, &mut m, "openat", &[AT_FDCWD, p, 0x10000, 0]), -20, "ENOTDIR");
    assert_eq!(sc(&mut k, &mut m, "openat", &[AT_FDCWD, 0x10, 0, 0]), EFAULT);
    assert_eq!(sc(&mut k, &mut m, "openat", &[AT_FDCWD, u64::MAX, 0, 0]), EFAULT);
    assert_eq!(sc(&mut k, &mut m, "access", &[p, 4]), 0);
    assert_eq!(sc(&mut k, &mut m, "access", &[p, 2]), -30);
    assert_eq!(sc(&mut k, &mut m, "stat", &[missing, buf]), ENOENT);
    // Directories.
    let dir = path(&k, &mut m, buf + 7000, "/data");
    let dfd = sc(&mut k, &mut m, "openat", &[AT_FDCWD, dir, 0x10000, 0]);
    assert!(dfd > 0);
    assert_eq!(sc(&mut k, &mut m, "read", &[dfd as u64, buf, 10]), -21);
    let n = sc(&mut k, &mut m, "getdents64", &[dfd as u64, buf, 4096]);
    assert!(n > 0);
    let raw = peek(&k, &mut m, buf, n as usize);
    let mut names = Vec::new();
    let mut o = 0;
    while o < raw.len() {
        let reclen = u16::from_le_bytes([raw[o + 16], raw[o + 17]]) as usize;
        let name: Vec<u8> = raw[o + 19..o + reclen].iter().take_while(|b| **b != 0).copied().collect();
        names.push(String::from_utf8(name).unwrap());
        o += reclen;
    }
    assert_eq!(names, [".", "..", "empty", "input.txt"]);
    assert_eq!(sc(&mut k, &mut m, "getdents64", &[dfd as u64, buf, 4096]), 0);
    let relf = path(&k, &mut m, buf + 7100, "input.txt");
    assert!(sc(&mut k, &mut m, "openat", &[dfd as u64, relf, 0, 0]) > 0);
    assert_eq!(sc(&mut k, &mut m, "openat", &[1, relf, 0, 0]), -20);
}

#[test]
fn proc_self_maps_exe_and_devices() {
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 65536);
    let p = path(&k, &mut m, buf + 60000, "/proc/self/maps");
    let fd = sc(&mut k, &mut m, "openat", &[AT_FDCWD, p, 0x80000, 0]) as u64;
    let n = sc(&mut k, &mut m, "read", &[fd, buf, 50000]);
    let text = String::from_utf8(peek(&k, &mut m, buf, n as usize)).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let ino = crate::fs::ino_of("/bin/prog");
    assert!(lines[0].starts_with(&format!("00400000-00401000 r--p 00000000 00:01 {ino} ")), "{}", lines[0]);
    assert_eq!(lines[0].find("/bin/prog"), Some(73), "names start at column 73 like Linux");
    assert!(lines[0].ends_with(" /bin/prog"));
    assert!(lines.iter().any(|l| l.starts_with("00401000-00402000 r-xp ")));
    assert!(lines.iter().any(|l| l.starts_with("00402000-00406000 rw-p ")));
    let stack = lines.iter().find(|l| l.ends_with("[stack]")).expect("stack line");
    assert!(stack.starts_with("7fffff7ff000-7ffffffff000 rw-p 00000000 00:00 0 "), "{stack}");
    assert_eq!(stack.find("[stack]"), Some(73));
    let anon = lines.iter().find(|l| l.starts_with(&format!("{buf:x}-"))).expect("scratch line");
    assert!(anon.ends_with(" 00:00 0 "), "anonymous lines end with a space: {anon:?}");
    // glibc's pthread_getattr_np parses "%lx-%lx" and looks for __libc_stack_end.
    for l in &lines {
        let (range, _) = l.split_once(' ').unwrap();
        let (a, b) = range.split_once('-').unwrap();
        assert!(u64::from_str_radix(a, 16).unwrap() < u64::from_str_radix(b, 16).unwrap());
    }
    // /proc/self/exe.
    let exe = path(&k, &mut m, buf + 60000, "/proc/self/exe");
    assert_eq!(sc(&mut k, &mut m, "readlink", &[exe, buf, 100]), 9);
    assert_eq!(peek(&k, &mut m, buf, 9), b"/bin/prog");
    assert_eq!(sc(&mut k, &mut m, "readlink", &[exe, buf, 4]), 4);
    let efd = sc(&mut k, &mut m, "openat", &[AT_FDCWD, exe, 0, 0]) as u64;
    assert_eq!(sc(&mut k, &mut m, "read", &[efd, buf, 4]), 4);
    assert_eq!(peek(&k, &mut m, buf, 4), b"\x7fELF");
    // Devices.
    let null = path(&k, &mut m, buf + 60000, "/dev/null");
    let nfd = sc(&mut k, &mut m, "openat", &[AT_FDCWD, null, 2, 0]) as u64;
    assert_eq!(sc(&mut k, &mut m, "write", &[nfd, buf, 10]), 10);
    assert_eq!(sc(&mut k, &mut m, "read", &[nfd, buf, 10]), 0);
    let ur = path(&k, &mut m, buf + 60000, "/dev/urandom");
    let ufd = sc(&mut k, &mut m, "openat", &[AT_FDCWD, ur, 0, 0]) as u64;
    assert_eq!(sc(&mut k, &mut m, "read", &[ufd, buf, 16]), 16);
    assert_eq!(sc(&mut k, &mut m, "getcwd", &[buf, 100]), 2);
    assert_eq!(peek(&k, &mut m, buf, 2), b"/\0");
    assert_eq!(sc(&mut k, &mut m, "getcwd", &[buf, 1]), -34);
}

#[test]
fn the_working_directory_moves_and_relative_paths_follow_it() {
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 4096);
    let cwd = |k: &mut Kernel, m: &mut FakeMemory| {
        let n = sc(k, m, "getcwd", &[buf + 2048, 256]);
        assert!(n > 0, "getcwd: {n}");
        String::from_utf8(peek(k, m, buf + 2048, n as usize - 1)).unwrap()
    };
    let p = |k: &mut Kernel, m: &mut FakeMemory, s: &str| path(k, m, buf, s);
    let d = p(&mut k, &mut m, "/data/sub");
    assert_eq!(sc(&mut k, &mut m, "mkdir", &[d, 0o755]), 0);
    let d = p(&mut k, &mut m, "/data/sub");
    assert_eq!(sc(&mut k, &mut m, "chdir", &[d]), 0);
    assert_eq!(cwd(&mut k, &mut m), "/data/sub");
    assert_eq!(sc(&mut k, &mut m, "getcwd", &[buf + 2048, 9]), -34, "ERANGE: 10 bytes needed");
    // A relative create lands in it; `..` and AT_FDCWD with an empty path see it too.
    let f = p(&mut k, &mut m, "notes");
    assert_eq!(sc(&mut k, &mut m, "openat", &[AT_FDCWD, f, 0x41, 0o644]), 3);
    let abs = p(&mut k, &mut m, "/data/sub/notes");
    assert_eq!(sc(&mut k, &mut m, "access", &[abs, 0]), 0);
    let up = p(&mut k, &mut m, "..");
    assert_eq!(sc(&mut k, &mut m, "chdir", &[up]), 0);
    assert_eq!(cwd(&mut k, &mut m), "/data");
    let rel = p(&mut k, &mut m, "sub/notes");
    assert_eq!(sc(&mut k, &mut m, "access", &[rel, 0]), 0);
    // fchdir to a directory fd; not to a file.
    let sub = p(&mut k, &mut m, "sub");
    let dfd = sc(&mut k, &mut m, "openat", &[AT_FDCWD, sub, 0o200000, 0]) as u64;
    assert_eq!(sc(&mut k, &mut m, "fchdir", &[dfd]), 0);
    assert_eq!(cwd(&mut k, &mut m), "/data/sub");
    assert_eq!(sc(&mut k, &mut m, "fchdir", &[3]), -20, "ENOTDIR");
    assert_eq!(sc(&mut k, &mut m, "fchdir", &[99]), EBADF);
    let file = p(&mut k, &mut m, "notes");
    assert_eq!(sc(&mut k, &mut m, "chdir", &[file]), -20);
    let missing = p(&mut k, &mut m, "nope");
    assert_eq!(sc(&mut k, &mut m, "chdir", &[missing]), ENOENT);
    assert_eq!(sc(&mut k, &mut m, "chdir", &[0x10]), EFAULT);
    // A removed working directory: getcwd says ENOENT, relative paths find nothing, and a
    // directory made again under the same name is another one.
    let f = p(&mut k, &mut m, "notes");
    assert_eq!(sc(&mut k, &mut m, "unlinkat", &[AT_FDCWD, f, 0]), 0);
    let d = p(&mut k, &mut m, "/data/sub");
    assert_eq!(sc(&mut k, &mut m, "unlinkat", &[AT_FDCWD, d, 0x200]), 0);
    assert_eq!(sc(&mut k, &mut m, "getcwd", &[buf + 2048, 256]), ENOENT);
    let d = p(&mut k, &mut m, "/data/sub");
    assert_eq!(sc(&mut k, &mut m, "mkdir", &[d, 0o755]), 0);
    let f = p(&mut k, &mut m, "x");
    assert_eq!(sc(&mut k, &mut m, "openat", &[AT_FDCWD, f, 0x41, 0o644]), ENOENT);
    let root = p(&mut k, &mut m, "/");
    assert_eq!(sc(&mut k, &mut m, "chdir", &[root]), 0);
    assert_eq!(cwd(&mut k, &mut m), "/");
}

#[test]
fn a_program_may_start_in_another_directory() {
    let mut spec = spec_with(exec_image(), 42);
    spec.cwd = "/data".into();
    let (mut k, _, mut m) = boot_spec(spec);
    let buf = scratch(&mut k, &mut m, 4096);
    assert_eq!(sc(&mut k, &mut m, "getcwd", &[buf, 64]), 6);
    let rel = path(&k, &mut m, buf + 100, "input.txt");
    assert_eq!(sc(&mut k, &mut m, "openat", &[AT_FDCWD, rel, 0, 0]), 3, "the declared /data/input.txt");
    for (cwd, why) in
        [("data", "not an absolute path"), ("/nope", "no such directory"), ("/data/input.txt", "not a directory")]
    {
        let mut spec = spec_with(exec_image(), 42);
        spec.cwd = cwd.into();
        let mut m = FakeMemory::new(FRAMES);
        let Err(e) = Kernel::load(spec, &mut m) else { panic!("{cwd} was accepted") };
        let e = e.to_string();
        assert!(e.contains(why) && e.contains(cwd), "{cwd}: {e}");
    }
}

#[test]
fn fd_table_calls() {
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 4096);
    assert_eq!(sc(&mut k, &mut m, "dup", &[1]), 3);
    assert_eq!(sc(&mut k, &mut m, "dup2", &[1, 10]), 10);
    assert_eq!(sc(&mut k, &mut m, "dup2", &[10, 10]), 10);
    assert_eq!(sc(&mut k, &mut m, "dup3", &[10, 10, 0]), EINVAL);
    assert_eq!(sc(&mut k, &mut m, "dup3", &[1, 11, 0x80000]), 11);
    assert_eq!(sc(&mut k, &mut m, "fcntl", &[11, 1]), 1);
    assert_eq!(sc(&mut k, &mut m, "fcntl", &[1, 1030, 20]), 20);
    assert_eq!(sc(&mut k, &mut m, "fcntl", &[1, 3]), 1, "O_WRONLY");
    assert_eq!(sc(&mut k, &mut m, "fcntl", &[1, 4, 0o4000]), 0);
    assert_eq!(sc(&mut k, &mut m, "fcntl", &[1, 3]), 0o4001);
    assert_eq!(sc(&mut k, &mut m, "fcntl", &[99, 1]), EBADF);
    poke(&k, &mut m, buf, b"via dup");
    k.take_output();
    assert_eq!(sc(&mut k, &mut m, "write", &[3, buf, 7]), 7);
    assert_eq!(k.take_output(), vec![(Stream::Stdout, b"via dup".to_vec())]);
    assert_eq!(sc(&mut k, &mut m, "ioctl", &[1, 0x5401, buf]), -25, "TCGETS: not a tty");
    assert_eq!(sc(&mut k, &mut m, "ioctl", &[1, 0x5413, buf]), -25);
    assert_eq!(sc(&mut k, &mut m, "ioctl", &[77, 0x5401, buf]), EBADF);
    // poll on the std fds as Rust's runtime does at startup (events 0).
    let mut pfds = Vec::new();
    for fd in [0i32, 1, 2, 50] {
        pfds.extend_from_slice(&fd.to_le_bytes());
        pfds.extend_from_slice(&0u32.to_le_bytes());
    }
    poke(&k, &mut m, buf, &pfds);
    assert_eq!(sc(&mut k, &mut m, "poll", &[buf, 4, 0]), 1);
    let out = peek(&k, &mut m, buf, 32);
    assert_eq!(u16::from_le_bytes([out[30], out[31]]), 0x20, "POLLNVAL for a closed fd");
    assert_eq!(u16::from_le_bytes([out[6], out[7]]), 0);
    // stdin readable, stdout writable.
    let mut pfds = Vec::new();
    for (fd, ev) in [(0i32, 1u16), (1, 4)] {
        pfds.extend_from_slice(&fd.to_le_bytes());
        pfds.extend_from_slice(&ev.to_le_bytes());
        pfds.extend_from_slice(&0u16.to_le_bytes());
    }
    poke(&k, &mut m, buf, &pfds);
    assert_eq!(sc(&mut k, &mut m, "poll", &[buf, 2, u64::MAX]), 2);
    let t0 = k.virtual_time_ns();
    assert_eq!(sc(&mut k, &mut m, "poll", &[0, 0, 5]), 0);
    assert_eq!(k.virtual_time_ns() - t0, 5_000_000 + 1_000);
}

// ---------------------------------------------------------------------------------------------
// Memory

#[test]
fn mmap_munmap_mprotect_semantics() {
    let (mut k, _, mut m) = boot();
    // Anonymous mappings are placed top-down and are lazy.
    let a = sc(&mut k, &mut m, "mmap", &[0, 0x3000, 3, 0x22, u64::MAX, 0]) as u64;
    assert_eq!(a, MMAP_TOP - 0x3000);
    assert!(!m.pages.contains_key(&a));
    let b = sc(&mut k, &mut m, "mmap", &[0, 0x1000, 3, 0x22, u64::MAX, 0]) as u64;
    assert_eq!(b, a - 0x1000);
    // A free hint is honoured; a used one is not.
    let h = sc(&mut k, &mut m, "mmap", &[0x1000_0000, 0x2000, 3, 0x22, u64::MAX, 0]) as u64;
    assert_eq!(h, 0x1000_0000);
    let h2 = sc(&mut k, &mut m, "mmap", &[0x1000_0000, 0x1000, 3, 0x22, u64::MAX, 0]) as u64;
    assert_ne!(h2, 0x1000_0000);
    // MAP_FIXED_NOREPLACE and MAP_FIXED.
    assert_eq!(sc(&mut k, &mut m, "mmap", &[0x1000_0000, 0x1000, 3, 0x100022, u64::MAX, 0]), -17);
    poke(&k, &mut m, 0x1000_0000, b"old");
    assert_eq!(sc(&mut k, &mut m, "mmap", &[0x1000_0000, 0x1000, 3, 0x32, u64::MAX, 0]), 0x1000_0000);
    assert_eq!(peek(&k, &mut m, 0x1000_0000, 3), [0, 0, 0], "MAP_FIXED replaced the page");
    assert_eq!(sc(&mut k, &mut m, "mmap", &[0x1001, 0x1000, 3, 0x32, u64::MAX, 0]), EINVAL);
    assert_eq!(sc(&mut k, &mut m, "mmap", &[0x1000, 0x1000, 3, 0x32, u64::MAX, 0]), -1, "EPERM below mmap_min_addr");
    assert_eq!(sc(&mut k, &mut m, "mmap", &[0, 0, 3, 0x22, u64::MAX, 0]), EINVAL);
    assert_eq!(sc(&mut k, &mut m, "mmap", &[0, 0x1000, 3, 0x20, u64::MAX, 0]), EINVAL);
    assert_eq!(sc(&mut k, &mut m, "mmap", &[0, 0x1000, 1, 0x2, 55, 0]), EBADF);
    assert_eq!(sc(&mut k, &mut m, "mmap", &[0, u64::MAX, 3, 0x22, u64::MAX, 0]), ENOMEM);
    // munmap.
    poke(&k, &mut m, a, b"x");
    assert!(m.pages.contains_key(&a));
    assert_eq!(sc(&mut k, &mut m, "munmap", &[a, 0x3000]), 0);
    assert!(!m.pages.contains_key(&a));
    assert_eq!(sc(&mut k, &mut m, "munmap", &[a + 1, 0x1000]), EINVAL);
    assert_eq!(sc(&mut k, &mut m, "munmap", &[a, 0x1000]), 0, "unmapping nothing is fine");
    assert_eq!(sc(&mut k, &mut m, "write", &[1, a, 1]), EFAULT);
    // PROT_NONE reservation, then mprotect part of it RW (glibc's malloc arenas).
    let r = sc(&mut k, &mut m, "mmap", &[0, 0x40_0000, 0, 0x4022, u64::MAX, 0]) as u64;
    let ex = k.exception(&mut m, Exception::PageFault { addr: r, error_code: 6, rip: 0x40_1000 });
    assert!(matches!(ex, ExceptionOutcome::Fatal(ExitStatus::Signaled { signal: 11, .. })));
    assert_eq!(sc(&mut k, &mut m, "mprotect", &[r, 0x2000, 3]), 0);
    assert_eq!(
        k.exception(&mut m, Exception::PageFault { addr: r + 8, error_code: 6, rip: 0x40_1000 }),
        ExceptionOutcome::Retry
    );
    assert_eq!(m.pages[&r].0, Prot::RW);
    assert!(!m.pages.contains_key(&(r + 0x2000)), "fault-around is clipped to the VMA");
    assert_eq!(sc(&mut k, &mut m, "mprotect", &[r, 0x1000, 1]), 0);
    assert_eq!(m.pages[&r].0, Prot::READ);
    assert_eq!(sc(&mut k, &mut m, "mprotect", &[r + 1, 0x1000, 1]), EINVAL);
    assert_eq!(sc(&mut k, &mut m, "mprotect", &[0x2000_0000, 0x1000, 1]), ENOMEM);
    assert_eq!(sc(&mut k, &mut m, "mprotect", &[r, 0x1000, 0x80]), EINVAL);
    // madvise(DONTNEED) drops anonymous pages: they read back as zero.
    poke(&k, &mut m, r + 0x1000, b"data");
    assert_eq!(sc(&mut k, &mut m, "madvise", &[r + 0x1000, 0x1000, 4]), 0);
    assert_eq!(peek(&k, &mut m, r + 0x1000, 4), [0; 4]);
    assert_eq!(sc(&mut k, &mut m, "madvise", &[r, 0x1000, 999]), EINVAL);
    assert_eq!(sc(&mut k, &mut m, "madvise", &[0x2000_0000, 0x1000, 0]), ENOMEM);
}

#[test]
fn file_mappings_are_filled() {
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 4096);
    let p = path(&k, &mut m, buf, "/data/input.txt");
    let fd = sc(&mut k, &mut m, "openat", &[AT_FDCWD, p, 0, 0]) as u64;
    let a = sc(&mut k, &mut m, "mmap", &[0, 0x2000, 1, 2, fd, 0]) as u64;
    assert_eq!(peek(&k, &mut m, a, 8), b"line one");
    assert_eq!(m.pages[&a].0, Prot::READ);
    assert!(!m.pages.contains_key(&(a + 0x1000)), "past EOF stays lazy");
    assert_eq!(sc(&mut k, &mut m, "mmap", &[0, 0x1000, 3, 1, fd, 0]), -13, "EACCES: shared writable");
    assert_eq!(sc(&mut k, &mut m, "mmap", &[0, 0x1000, 1, 2, fd, 1]), EINVAL);
    assert_eq!(sc(&mut k, &mut m, "mmap", &[0, 0x1000, 1, 2, 1, 0]), -19, "ENODEV for a pipe");
    assert!(k.proc_maps().contains("/data/input.txt"));
    // A private writable copy; DONTNEED restores the file contents.
    let w = sc(&mut k, &mut m, "mmap", &[0, 0x1000, 3, 2, fd, 0]) as u64;
    poke(&k, &mut m, w, b"LINE");
    assert_eq!(peek(&k, &mut m, w, 8), b"LINE one");
    assert_eq!(sc(&mut k, &mut m, "madvise", &[w, 0x1000, 4]), 0);
    assert_eq!(peek(&k, &mut m, w, 8), b"line one");
}

#[test]
fn mremap_grows_in_place_moves_and_shrinks() {
    let (mut k, _, mut m) = boot();
    let a = sc(&mut k, &mut m, "mmap", &[0x2000_0000, 0x2000, 3, 0x22, u64::MAX, 0]) as u64;
    assert_eq!(a, 0x2000_0000);
    poke(&k, &mut m, a, b"keep me");
    poke(&k, &mut m, a + 0x1000, b"page two");
    // Grow in place.
    assert_eq!(sc(&mut k, &mut m, "mremap", &[a, 0x2000, 0x4000, 0]), a as i64);
    assert_eq!(peek(&k, &mut m, a + 0x3000, 1), [0]);
    // Block the space after it, then grow: must move.
    let blocker = sc(&mut k, &mut m, "mmap", &[a + 0x4000, 0x1000, 3, 0x100022, u64::MAX, 0]);
    assert_eq!(blocker, (a + 0x4000) as i64);
    assert_eq!(sc(&mut k, &mut m, "mremap", &[a, 0x4000, 0x8000, 0]), ENOMEM);
    let b = sc(&mut k, &mut m, "mremap", &[a, 0x4000, 0x8000, 1]) as u64;
    assert_ne!(b, a);
    assert_eq!(peek(&k, &mut m, b, 7), b"keep me");
    assert_eq!(peek(&k, &mut m, b + 0x1000, 8), b"page two");
    assert_eq!(sc(&mut k, &mut m, "write", &[1, a, 1]), EFAULT, "old range is gone");
    assert!(!m.pages.contains_key(&a));
    // Shrink.
    assert_eq!(sc(&mut k, &mut m, "mremap", &[b, 0x8000, 0x1000, 0]), b as i64);
    assert_eq!(sc(&mut k, &mut m, "write", &[1, b + 0x1000, 1]), EFAULT);
    // MREMAP_FIXED.
    let c = sc(&mut k, &mut m, "mremap", &[b, 0x1000, 0x1000, 3, 0x3000_0000]) as u64;
    assert_eq!(c, 0x3000_0000);
    assert_eq!(peek(&k, &mut m, c, 7), b"keep me");
    // Errors.
    assert_eq!(sc(&mut k, &mut m, "mremap", &[0x5000_0000, 0x1000, 0x2000, 1]), EFAULT);
    assert_eq!(sc(&mut k, &mut m, "mremap", &[c, 0x1000, 0, 1]), EINVAL);
    assert_eq!(sc(&mut k, &mut m, "mremap", &[c, 0x1000, 0x2000, 2]), EINVAL);
}

#[test]
fn brk_grows_shrinks_and_fails_like_linux() {
    let (mut k, _, mut m) = boot();
    let b0 = sc(&mut k, &mut m, "brk", &[0]) as u64;
    assert_eq!(b0, 0x40_6000);
    assert_eq!(sc(&mut k, &mut m, "brk", &[0x1000]) as u64, b0, "below the start: unchanged");
    assert_eq!(sc(&mut k, &mut m, "brk", &[b0 + 0x2345]) as u64, b0 + 0x2345);
    poke(&k, &mut m, b0 + 0x2000, b"heap");
    assert!(k.proc_maps().contains("[heap]"));
    assert_eq!(sc(&mut k, &mut m, "brk", &[b0 + 0x1000]) as u64, b0 + 0x1000);
    assert_eq!(sc(&mut k, &mut m, "write", &[1, b0 + 0x2000, 1]), EFAULT);
    assert_eq!(sc(&mut k, &mut m, "brk", &[b0 + 0x3000]) as u64, b0 + 0x3000);
    assert_eq!(peek(&k, &mut m, b0 + 0x2000, 4), [0; 4], "regrown heap is zero");
    // Colliding with a mapping fails and returns the old break.
    sc(&mut k, &mut m, "mmap", &[b0 + 0x10000, 0x1000, 3, 0x100022, u64::MAX, 0]);
    assert_eq!(sc(&mut k, &mut m, "brk", &[b0 + 0x20000]) as u64, b0 + 0x3000);
    // Asking for more than the VM has fails too.
    assert_eq!(sc(&mut k, &mut m, "brk", &[b0 + (1 << 40)]) as u64, b0 + 0x3000);
}

#[test]
fn commit_limit_gives_enomem() {
    let mut mem = FakeMemory::new(16384); // 64 MiB
    let (mut k, _) = Kernel::load(spec_with(exec_image(), 0), &mut mem).unwrap();
    let m = &mut mem;
    let (committed, cap) = k.commit();
    assert!(cap < 16384 && cap > 15800, "{cap}");
    assert!(committed > 2048);
    // 100 MiB writable: more than the VM has.
    assert_eq!(sc(&mut k, m, "mmap", &[0, 100 << 20, 3, 0x22, u64::MAX, 0]), ENOMEM);
    // MAP_NORESERVE does not help (strict accounting).
    assert_eq!(sc(&mut k, m, "mmap", &[0, 100 << 20, 3, 0x4022, u64::MAX, 0]), ENOMEM);
    // A PROT_NONE reservation is free; committing it piecewise works until the limit.
    let r = sc(&mut k, m, "mmap", &[0, 100 << 20, 0, 0x4022, u64::MAX, 0]) as u64;
    assert!(r > 0);
    assert_eq!(sc(&mut k, m, "mprotect", &[r, 16 << 20, 3]), 0);
    assert_eq!(sc(&mut k, m, "mprotect", &[r, 90 << 20, 3]), ENOMEM);
    let ok = sc(&mut k, m, "mmap", &[0, 20 << 20, 3, 0x22, u64::MAX, 0]);
    assert!(ok > 0);
    assert_eq!(sc(&mut k, m, "mremap", &[ok as u64, 20 << 20, 60 << 20, 1]), ENOMEM);
    // Freeing makes room again.
    assert_eq!(sc(&mut k, m, "munmap", &[r, 100 << 20]), 0);
    assert!(sc(&mut k, m, "mmap", &[0, 30 << 20, 3, 0x22, u64::MAX, 0]) > 0);
}

// ---------------------------------------------------------------------------------------------
// Exceptions

#[test]
fn demand_paging_retry_and_segv() {
    let (mut k, _, mut m) = boot();
    let a = sc(&mut k, &mut m, "mmap", &[0, 0x40000, 3, 0x22, u64::MAX, 0]) as u64;
    let fault = |addr, ec| Exception::PageFault { addr, error_code: ec, rip: 0x40_1000 };
    assert_eq!(k.exception(&mut m, fault(a + 0x12345, 6)), ExceptionOutcome::Retry);
    // An aligned 16-page window around the fault.
    let win = (a + 0x12345) & !0xffff;
    assert!(m.pages.contains_key(&win) && m.pages.contains_key(&(win + 0xf000)));
    assert!(!m.pages.contains_key(&(win + 0x10000)));
    // Stack below the eager part is demand-paged too.
    let s = STACK_TOP - STACK_EAGER - 8;
    assert_eq!(k.exception(&mut m, fault(s, 6)), ExceptionOutcome::Retry);
    // Unmapped.
    match k.exception(&mut m, fault(0x8, 4)) {
        ExceptionOutcome::Fatal(ExitStatus::Signaled { signal: 11, name, fault: Some(f) }) => {
            assert_eq!(name, "SIGSEGV");
            assert_eq!(f.vector, 14);
            assert_eq!(f.addr, Some(8));
            assert_eq!(f.rip, 0x40_1000);
            assert!(f.description.starts_with("page fault: read from unmapped address 0x8"), "{}", f.description);
        }
        o => panic!("{o:?}"),
    }
    // Write to read-only text.
    match k.exception(&mut m, fault(0x40_1000, 7)) {
        ExceptionOutcome::Fatal(ExitStatus::Signaled { signal: 11, fault: Some(f), .. }) => {
            assert!(f.description.contains("write to read-only"), "{}", f.description);
        }
        o => panic!("{o:?}"),
    }
    // Execute data.
    match k.exception(&mut m, fault(0x40_2000, 0x15)) {
        ExceptionOutcome::Fatal(ExitStatus::Signaled { signal: 11, fault: Some(f), .. }) => {
            assert!(f.description.contains("instruction fetch from non-executable"), "{}", f.description);
        }
        o => panic!("{o:?}"),
    }
    // Stack overflow.
    match k.exception(&mut m, fault(STACK_TOP - STACK_SIZE - 16, 6)) {
        ExceptionOutcome::Fatal(ExitStatus::Signaled { fault: Some(f), .. }) => {
            assert!(f.description.contains("stack overflow"), "{}", f.description);
        }
        o => panic!("{o:?}"),
    }
}

#[test]
fn out_of_frames_on_fault_is_sigkill() {
    let mut mem = FakeMemory::new(4096);
    let (mut k, _) = Kernel::load(spec_with(exec_image(), 0), &mut mem).unwrap();
    let a = sc(&mut k, &mut mem, "mmap", &[0, 1 << 20, 1, 0x22, u64::MAX, 0]) as u64;
    mem.frames_left = 0;
    match k.exception(&mut mem, Exception::PageFault { addr: a, error_code: 4, rip: 1 }) {
        ExceptionOutcome::Fatal(ExitStatus::Signaled { signal: 9, fault: Some(f), .. }) => {
            assert!(f.description.starts_with("out of guest memory"));
        }
        o => panic!("{o:?}"),
    }
}

#[test]
fn repeated_fault_is_not_an_endless_loop() {
    let (mut k, _, mut m) = boot();
    let a = sc(&mut k, &mut m, "mmap", &[0, 0x1000, 3, 0x22, u64::MAX, 0]) as u64;
    let f = Exception::PageFault { addr: a, error_code: 7, rip: 0x40_1000 };
    let mut outcomes = Vec::new();
    for _ in 0..10 {
        let o = k.exception(&mut m, f);
        let fatal = matches!(o, ExceptionOutcome::Fatal(_));
        outcomes.push(o);
        if fatal {
            break;
        }
    }
    assert!(matches!(outcomes.last(), Some(ExceptionOutcome::Fatal(_))));
    assert!(outcomes.len() > 1);
}

/// The registers an emulated instruction writes, and its length.
fn emulated(o: &ExceptionOutcome) -> (Vec<(u8, u64)>, Option<u64>, u64) {
    match o {
        ExceptionOutcome::Emulated { writes, flags, len, .. } => {
            (writes.iter().map(|w| (w.reg, w.apply(0xffff_ffff_ffff_ffff))).collect(), *flags, *len)
        }
        o => panic!("not emulated: {o:?}"),
    }
}

#[test]
fn host_traps_are_emulated_from_the_virtual_clock_and_the_table() {
    // The host's own traps (#GP under CR4.TSD and CPUID faulting), where the code is not
    // rewritten.
    let (mut k, _, mut m) = boot_spec(ProgramSpec { rewrite: Rewrite::Off, ..spec_with(exec_image(), 42) });
    assert_eq!(peek(&k, &mut m, 0x40_1000, 2), vec![0x0f, 0x31], "the code is left as it is");
    sc(&mut k, &mut m, "getpid", &[]);
    let o = k.exception(&mut m, Exception::GeneralProtection { rip: 0x40_1000, error_code: 0, eax: 0, ecx: 0 });
    let t = crate::time::clock::tsc_base(42) + k.virtual_time_ns() * 3;
    assert_eq!(emulated(&o), (vec![(RAX, t & 0xffff_ffff), (RDX, t >> 32)], None, 2));
    let o2 = k.exception(&mut m, Exception::GeneralProtection { rip: 0x40_1003, error_code: 0, eax: 0, ecx: 0 });
    let (w, _, len) = emulated(&o2);
    assert_eq!((w[2], len), ((RCX, 0), 3), "rdtscp: TSC_AUX is 0");
    assert!(w[0].1 > t & 0xffff_ffff, "the TSC moves on");
    // CPUID is answered from the fixed table, with no trace entry and no virtual time.
    let before = k.save();
    let o3 = k.exception(&mut m, Exception::GeneralProtection { rip: 0x40_1006, error_code: 0, eax: 1, ecx: 0 });
    let [a, b, c, d] = crate::host::cpuid::answer(1, 0);
    let wide = |v: u32| u64::from(v);
    assert_eq!(emulated(&o3), (vec![(RAX, wide(a)), (RBX, wide(b)), (RCX, wide(c)), (RDX, wide(d))], None, 3));
    assert_eq!(k.save(), before, "an emulated cpuid changes no state of the core");
    match k.exception(&mut m, Exception::GeneralProtection { rip: 0x40_1002, error_code: 0, eax: 0, ecx: 0 }) {
        ExceptionOutcome::Fatal(ExitStatus::Signaled { signal: 11, fault: Some(f), .. }) => {
            assert_eq!(f.vector, 13);
            assert!(f.description.starts_with("general protection fault"));
        }
        o => panic!("{o:?}"),
    }
    match k.exception(&mut m, Exception::GeneralProtection { rip: 0xdead_0000, error_code: 0, eax: 0, ecx: 0 }) {
        ExceptionOutcome::Fatal(ExitStatus::Signaled { signal: 11, .. }) => {}
        o => panic!("{o:?}"),
    }
    let sig = |k: &mut Kernel, m: &mut FakeMemory, v| match k.exception(m, Exception::Other { vector: v, rip: 5 }) {
        ExceptionOutcome::Fatal(ExitStatus::Signaled { signal, fault: Some(f), .. }) => {
            assert_eq!(f.vector, v);
            signal
        }
        o => panic!("{o:?}"),
    };
    assert_eq!(sig(&mut k, &mut m, 6), 4);
    assert_eq!(sig(&mut k, &mut m, 0), 8);
    assert_eq!(sig(&mut k, &mut m, 3), 5);
    assert_eq!(sig(&mut k, &mut m, 1), 5);
    assert_eq!(sig(&mut k, &mut m, 16), 8);
    assert_eq!(sig(&mut k, &mut m, 19), 8);
    assert_eq!(sig(&mut k, &mut m, 17), 7);
    assert_eq!(sig(&mut k, &mut m, 200), 11);
}

#[test]
fn rewritten_sites_trap_and_are_answered_from_deja_model() {
    let (mut k, _, mut m) = boot();
    // rdtsc; hlt; rdtscp; rex.w cpuid: each channel instruction is now ud2, padded with int3.
    assert_eq!(peek(&k, &mut m, 0x40_1000, 9), vec![0x0f, 0x0b, 0xf4, 0x0f, 0x0b, 0xcc, 0x0f, 0x0b, 0xcc]);
    let r = k.finish(&m, ExitStatus::Exited { code: 0 }).host_channels;
    assert_eq!(r.rewrite, Rewrite::On);
    assert_eq!((r.objects.len(), r.objects[0].name.as_str()), (2, "/bin/prog"));
    // The vDSO is planned like the program, and has nothing to rewrite.
    assert_eq!((r.objects[1].name.as_str(), r.objects[1].rewritten.total()), ("[vdso]", 0));
    let counts = r.rewritten();
    assert_eq!((counts.rdtsc, counts.rdtscp, counts.cpuid, counts.total()), (1, 1, 1, 3));
    let (mut k, _, mut m) = boot();
    sc(&mut k, &mut m, "getpid", &[]);
    let ud = |rip, eax, ecx| Exception::InvalidOpcode { rip, eax, ecx };
    let o = k.exception(&mut m, ud(0x40_1000, 0, 0));
    let t = crate::time::clock::tsc_base(42) + k.virtual_time_ns() * 3;
    assert_eq!(emulated(&o), (vec![(RAX, t & 0xffff_ffff), (RDX, t >> 32)], None, 2));
    let (w, _, len) = emulated(&k.exception(&mut m, ud(0x40_1003, 0, 0)));
    assert_eq!((w[2], len), ((RCX, 0), 3));
    let before = k.save();
    let [a, b, c, d] = crate::host::cpuid::answer(7, 0);
    let wide = |v: u32| u64::from(v);
    let o = k.exception(&mut m, ud(0x40_1006, 7, 0));
    assert_eq!(emulated(&o), (vec![(RAX, wide(a)), (RBX, wide(b)), (RCX, wide(c)), (RDX, wide(d))], None, 3));
    let after = k.save();
    assert_ne!(after, before, "the trap is counted");
    assert_eq!(k.finish(&m, ExitStatus::Exited { code: 0 }).host_channels.traps.cpuid, 1);
    // A #UD anywhere else is the program's own: SIGILL.
    match k.exception(&mut m, ud(0x40_1002, 0, 0)) {
        ExceptionOutcome::Fatal(ExitStatus::Signaled { signal: 4, fault: Some(f), .. }) => assert_eq!(f.vector, 6),
        o => panic!("{o:?}"),
    }
}

#[test]
fn the_virtual_tsc_follows_the_seed() {
    let read = |seed| {
        let (mut k, _, mut m) = boot_spec(spec_with(exec_image(), seed));
        emulated(&k.exception(&mut m, Exception::InvalidOpcode { rip: 0x40_1000, eax: 0, ecx: 0 })).0
    };
    assert_eq!(read(3), read(3));
    assert_ne!(read(3), read(4));
}

#[test]
fn rdrand_rdseed_rdpid_and_xgetbv_are_answered_at_their_registers() {
    // rdrand bx; rdseed r9; rdpid rsi; xgetbv; ret
    let code = vec![0x66, 0x0f, 0xc7, 0xf3, 0x49, 0x0f, 0xc7, 0xf9, 0xf3, 0x0f, 0xc7, 0xfe, 0x0f, 0x01, 0xd0, 0xc3];
    let image = build_elf(
        crate::mm::elf::ET_EXEC,
        crate::mm::elf::EM_X86_64,
        0x40_0000,
        &[Seg { vaddr: 0x40_1000, flags: 5, memsz: 4096, data: code }],
        None,
    );
    let (mut k, _, mut m) = boot_spec(spec_with(image.clone(), 9));
    let ud = |rip, ecx| Exception::InvalidOpcode { rip, eax: 0, ecx };
    let (w, flags, len) = emulated(&k.exception(&mut m, ud(0x40_1000, 0)));
    let w_first = w.clone();
    assert_eq!((w.len(), w[0].0, flags, len), (1, 3, Some(1), 4), "rdrand bx: 16 bits of BX, CF set");
    assert_eq!(w[0].1 >> 16, 0xffff_ffff_ffff, "a 16-bit write keeps the rest of RBX");
    let (w, flags, len) = emulated(&k.exception(&mut m, ud(0x40_1004, 0)));
    assert_eq!((w[0].0, flags, len), (9, Some(1), 4), "rdseed r9");
    let (w, _, len) = emulated(&k.exception(&mut m, ud(0x40_1008, 0)));
    assert_eq!((w, len), (vec![(6, 0)], 4), "rdpid rsi: core 0");
    let (w, _, len) = emulated(&k.exception(&mut m, ud(0x40_100c, 0)));
    assert_eq!((w, len), (vec![(RAX, crate::host::cpuid::XCR0), (RDX, 0)], 3));
    match k.exception(&mut m, ud(0x40_100c, 1)) {
        ExceptionOutcome::Fatal(ExitStatus::Signaled { signal: 11, .. }) => {}
        o => panic!("xgetbv of XCR1: {o:?}"),
    }
    // The random values come from the seeded stream: the same for the same seed.
    let rdrand = |seed| {
        let (mut k, _, mut m) = boot_spec(spec_with(image.clone(), seed));
        emulated(&k.exception(&mut m, ud(0x40_1000, 0))).0
    };
    assert_eq!(rdrand(9), w_first);
    assert_ne!(rdrand(10), w_first);
}

#[test]
fn code_made_executable_at_run_time_is_rewritten_and_forgotten_with_its_mapping() {
    let (mut k, _, mut m) = boot();
    // A JIT: anonymous memory, written, then made executable.
    let a = sc(&mut k, &mut m, "mmap", &[0, 4096, 3, 0x22, u64::MAX, 0]) as u64;
    let jit = [0x31, 0xc0, 0x0f, 0xa2, 0x0f, 0x31, 0xc3]; // xor eax, eax; cpuid; rdtsc; ret
    poke(&k, &mut m, a, &jit);
    assert_eq!(sc(&mut k, &mut m, "mprotect", &[a, 4096, 5]), 0);
    assert_eq!(peek(&k, &mut m, a, 7), vec![0x31, 0xc0, 0x0f, 0x0b, 0x0f, 0x0b, 0xc3]);
    assert!(matches!(
        k.exception(&mut m, Exception::InvalidOpcode { rip: a + 2, eax: 0, ecx: 0 }),
        ExceptionOutcome::Emulated { .. }
    ));
    // Written again and protected again: the new code is planned, the old sites are gone.
    assert_eq!(sc(&mut k, &mut m, "mprotect", &[a, 4096, 3]), 0);
    poke(&k, &mut m, a, &[0x90, 0x90, 0x90, 0x0f, 0x31, 0xc3]);
    assert_eq!(sc(&mut k, &mut m, "mprotect", &[a, 4096, 5]), 0);
    assert_eq!(peek(&k, &mut m, a, 6), vec![0x90, 0x90, 0x90, 0x0f, 0x0b, 0xc3]);
    assert!(matches!(
        k.exception(&mut m, Exception::InvalidOpcode { rip: a + 2, eax: 0, ecx: 0 }),
        ExceptionOutcome::Fatal(_)
    ));
    assert!(matches!(
        k.exception(&mut m, Exception::InvalidOpcode { rip: a + 3, eax: 0, ecx: 0 }),
        ExceptionOutcome::Emulated { .. }
    ));
    // Moved by mremap, the site moves with it; unmapped, it is forgotten.
    let b = sc(&mut k, &mut m, "mremap", &[a, 4096, 8192, 1, 0]) as u64;
    if b != a {
        assert!(matches!(
            k.exception(&mut m, Exception::InvalidOpcode { rip: b + 3, eax: 0, ecx: 0 }),
            ExceptionOutcome::Emulated { .. }
        ));
    }
    assert_eq!(sc(&mut k, &mut m, "munmap", &[b, 8192]), 0);
    let saved = k.save();
    let restored = Kernel::restore(&saved).unwrap();
    assert_eq!(restored.save(), saved);
    // A large reservation with code on one page: only the populated page is planned.
    let big = 64 << 20;
    let r = sc(&mut k, &mut m, "mmap", &[0, big, 3, 0x22, u64::MAX, 0]) as u64;
    poke(&k, &mut m, r + (32 << 20), &[0x0f, 0xa2, 0xc3]);
    assert_eq!(sc(&mut k, &mut m, "mprotect", &[r, big, 5]), 0);
    assert_eq!(peek(&k, &mut m, r + (32 << 20), 3), vec![0x0f, 0x0b, 0xc3]);
    let objects = k.finish(&m, ExitStatus::Exited { code: 0 }).host_channels.objects;
    assert!(objects.len() >= 4, "the image, two plans of the first region, the populated page: {objects:?}");
    let last = objects.last().unwrap();
    assert_eq!((last.start, last.end - last.start), (r + (32 << 20), 4096), "{last:?}");
}

#[test]
fn the_memory_hears_where_file_code_becomes_executable_rewritten_or_not() {
    for rewrite in [crate::host::hostchan::Rewrite::On, crate::host::hostchan::Rewrite::Off] {
        let mut spec = spec_with(exec_image(), 1);
        spec.rewrite = rewrite;
        spec.files.insert("/lib/libx.so".into(), vec![0x90; 3 * 4096]);
        let image_len = spec.image.len() as u64;
        let (mut k, _, mut m) = boot_spec(spec);
        // The program's own code, at load.
        assert!(!m.code.is_empty() && m.code.iter().all(|c| c.3 == image_len), "{:?}", m.code);
        m.code.clear();
        let buf = scratch(&mut k, &mut m, 4096);
        let p = path(&k, &mut m, buf, "/lib/libx.so");
        let fd = sc(&mut k, &mut m, "openat", &[AT_FDCWD, p, 0, 0]) as u64;
        // Read-only: no code. Executable from file offset 4096: base is the start minus it.
        let data = sc(&mut k, &mut m, "mmap", &[0, 4096, 1, 2, fd, 0]) as u64;
        assert!(m.code.is_empty(), "{:?}", m.code);
        let code = sc(&mut k, &mut m, "mmap", &[0, 8192, 5, 2, fd, 4096]) as u64;
        assert_eq!(m.code, [(code, code + 8192, code - 4096, 3 * 4096)], "{rewrite:?}");
        // Made executable again in part: told again for that part.
        assert_eq!(sc(&mut k, &mut m, "mprotect", &[data, 4096, 5]), 0);
        assert_eq!(sc(&mut k, &mut m, "mprotect", &[code + 4096, 4096, 5]), 0);
        assert_eq!(
            m.code[1..],
            [(data, data + 4096, data, 3 * 4096), (code + 4096, code + 8192, code - 4096, 3 * 4096)]
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Randomness, time, identity, signals

fn random_bytes(seed: u64, n: u64) -> (Vec<u8>, Vec<u8>) {
    let (mut k, _, mut m) = boot_spec(spec_with(exec_image(), seed));
    let buf = scratch(&mut k, &mut m, 4096);
    assert_eq!(sc(&mut k, &mut m, "getrandom", &[buf, n, 0]), n as i64);
    let a = peek(&k, &mut m, buf, n as usize);
    assert_eq!(sc(&mut k, &mut m, "getrandom", &[buf, n, 1]), n as i64);
    let b = peek(&k, &mut m, buf, n as usize);
    (a, b)
}

#[test]
fn getrandom_is_seeded_and_continues_the_at_random_stream() {
    let (a1, b1) = random_bytes(5, 32);
    let (a2, b2) = random_bytes(5, 32);
    let (a3, _) = random_bytes(6, 32);
    assert_eq!((&a1, &b1), (&a2, &b2));
    assert_ne!(a1, b1);
    assert_ne!(a1, a3);
    let mut stream = [0u8; 80];
    RandomStream::new(5).fill(&mut stream);
    assert_eq!(&a1[..], &stream[16..48], "AT_RANDOM took the first 16 bytes");
    assert_eq!(&b1[..], &stream[48..80]);
    let (mut k, _, mut m) = boot();
    assert_eq!(sc(&mut k, &mut m, "getrandom", &[0x10, 16, 0]), EFAULT);
    assert_eq!(sc(&mut k, &mut m, "getrandom", &[0x10, 16, 8]), EINVAL);
}

#[test]
fn virtual_clock() {
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 4096);
    let read_ts = |k: &Kernel, m: &mut FakeMemory| {
        let b = peek(k, m, buf, 16);
        u64::from_le_bytes(b[..8].try_into().unwrap()) * 1_000_000_000 + u64::from_le_bytes(b[8..].try_into().unwrap())
    };
    assert_eq!(sc(&mut k, &mut m, "clock_gettime", &[1, buf]), 0);
    let t1 = read_ts(&k, &mut m);
    assert_eq!(t1, k.virtual_time_ns());
    assert_eq!(sc(&mut k, &mut m, "clock_gettime", &[1, buf]), 0);
    let t2 = read_ts(&k, &mut m);
    assert_eq!(t2 - t1, time::clock::SYSCALL_COST_NS);
    assert_eq!(sc(&mut k, &mut m, "clock_gettime", &[0, buf]), 0);
    assert_eq!(read_ts(&k, &mut m), time::clock::REALTIME_EPOCH_S * 1_000_000_000 + k.virtual_time_ns());
    assert_eq!(sc(&mut k, &mut m, "clock_gettime", &[1, 0x100]), EFAULT);
    assert_eq!(sc(&mut k, &mut m, "clock_gettime", &[1, u64::MAX - 7]), EFAULT);
    assert_eq!(sc(&mut k, &mut m, "clock_gettime", &[99, buf]), EINVAL);
    // nanosleep advances by exactly the request (plus the syscall cost).
    poke(&k, &mut m, buf + 64, &[2u64.to_le_bytes(), 500u64.to_le_bytes()].concat());
    let before = k.virtual_time_ns();
    assert_eq!(sc(&mut k, &mut m, "nanosleep", &[buf + 64, 0]), 0);
    assert_eq!(k.virtual_time_ns() - before, 2_000_000_500 + 1_000);
    poke(&k, &mut m, buf + 64, &[0u64.to_le_bytes(), 2_000_000_000u64.to_le_bytes()].concat());
    assert_eq!(sc(&mut k, &mut m, "nanosleep", &[buf + 64, 0]), EINVAL);
    // clock_nanosleep with TIMER_ABSTIME wakes at the absolute time.
    let target = k.virtual_time_ns() + 10_000_000_000;
    poke(
        &k,
        &mut m,
        buf + 64,
        &[(target / 1_000_000_000).to_le_bytes(), (target % 1_000_000_000).to_le_bytes()].concat(),
    );
    assert_eq!(sc(&mut k, &mut m, "clock_nanosleep", &[1, 1, buf + 64, 0]), 0);
    assert_eq!(k.virtual_time_ns(), target);
    // A wake time in the past returns at once.
    assert_eq!(sc(&mut k, &mut m, "clock_nanosleep", &[1, 1, buf + 64, 0]), 0);
    assert_eq!(k.virtual_time_ns(), target + 1_000);
    assert_eq!(sc(&mut k, &mut m, "clock_getres", &[1, buf]), 0);
    assert_eq!(read_ts(&k, &mut m), 1);
    assert_eq!(sc(&mut k, &mut m, "gettimeofday", &[buf, 0]), 0);
    let s = sc(&mut k, &mut m, "time", &[0]);
    assert_eq!(s as u64, time::clock::REALTIME_EPOCH_S + k.virtual_time_ns() / 1_000_000_000);
    assert_eq!(k.virtual_time_ns() / 1_000_000_000, 12);
}

#[test]
fn identity_limits_uname_affinity() {
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 4096);
    assert_eq!(sc(&mut k, &mut m, "getpid", &[]), 1);
    assert_eq!(sc(&mut k, &mut m, "gettid", &[]), 1);
    assert_eq!(sc(&mut k, &mut m, "getppid", &[]), 0);
    assert_eq!(sc(&mut k, &mut m, "getuid", &[]), 1000);
    assert_eq!(sc(&mut k, &mut m, "getegid", &[]), 1000);
    assert_eq!(sc(&mut k, &mut m, "set_tid_address", &[buf]), 1);
    assert_eq!(sc(&mut k, &mut m, "set_robust_list", &[buf, 24]), 0);
    assert_eq!(sc(&mut k, &mut m, "set_robust_list", &[buf, 23]), EINVAL);
    assert_eq!(sc(&mut k, &mut m, "rseq", &[buf, 32, 0, 0x53053053]), -38);
    assert_eq!(sc(&mut k, &mut m, "uname", &[buf]), 0);
    let u = peek(&k, &mut m, buf, 390);
    let field = |i: usize| String::from_utf8(u[i * 65..].iter().take_while(|b| **b != 0).copied().collect()).unwrap();
    assert_eq!(field(0), "Linux");
    assert_eq!(field(1), "deja");
    assert_eq!(field(2), "6.1.0-deja");
    assert_eq!(field(4), "x86_64");
    assert_eq!(sc(&mut k, &mut m, "uname", &[0x20]), EFAULT);
    assert_eq!(sc(&mut k, &mut m, "sched_getaffinity", &[0, 128, buf]), 8);
    assert_eq!(peek(&k, &mut m, buf, 8), 1u64.to_le_bytes());
    assert_eq!(sc(&mut k, &mut m, "sched_getaffinity", &[0, 4, buf]), EINVAL);
    assert_eq!(sc(&mut k, &mut m, "prlimit64", &[0, 3, 0, buf]), 0);
    assert_eq!(peek(&k, &mut m, buf, 16), [(8u64 << 20).to_le_bytes(), u64::MAX.to_le_bytes()].concat());
    assert_eq!(sc(&mut k, &mut m, "getrlimit", &[7, buf]), 0);
    assert_eq!(peek(&k, &mut m, buf, 16), [1024u64.to_le_bytes(), 4096u64.to_le_bytes()].concat());
    poke(&k, &mut m, buf, &[512u64.to_le_bytes(), 8192u64.to_le_bytes()].concat());
    assert_eq!(sc(&mut k, &mut m, "setrlimit", &[7, buf]), -1, "raising the hard limit: EPERM");
    poke(&k, &mut m, buf, &[4u64.to_le_bytes(), 4096u64.to_le_bytes()].concat());
    assert_eq!(sc(&mut k, &mut m, "setrlimit", &[7, buf]), 0);
    assert_eq!(sc(&mut k, &mut m, "dup", &[0]), 3);
    assert_eq!(sc(&mut k, &mut m, "dup", &[0]), -24, "EMFILE under RLIMIT_NOFILE");
    assert_eq!(sc(&mut k, &mut m, "prlimit64", &[7, 3, 0, buf]), -3, "ESRCH");
    assert_eq!(sc(&mut k, &mut m, "arch_prctl", &[0x1002, 0x7000_1000]), 0);
    assert_eq!(k.fs_base(), 0x7000_1000);
    assert_eq!(sc(&mut k, &mut m, "arch_prctl", &[0x1003, buf]), 0);
    assert_eq!(peek(&k, &mut m, buf, 8), 0x7000_1000u64.to_le_bytes());
    assert_eq!(sc(&mut k, &mut m, "arch_prctl", &[0x1003, 0x30]), EFAULT);
    assert_eq!(sc(&mut k, &mut m, "arch_prctl", &[0x1002, 1 << 63]), -1);
    assert_eq!(sc(&mut k, &mut m, "arch_prctl", &[0x3001, buf]), EINVAL);
    assert_eq!(sc(&mut k, &mut m, "arch_prctl", &[0x1001, 0x55]), 0);
    assert_eq!(k.gs_base(), 0x55);
}

#[test]
fn signals_and_abort() {
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 4096);
    // sigaction: record and return the old one.
    let act = [0x40_1000u64, 0x0400_0004, 0x40_1002, 0].iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<_>>();
    poke(&k, &mut m, buf, &act);
    assert_eq!(sc(&mut k, &mut m, "rt_sigaction", &[11, buf, 0, 8]), 0);
    assert_eq!(sc(&mut k, &mut m, "rt_sigaction", &[11, 0, buf + 64, 8]), 0);
    assert_eq!(peek(&k, &mut m, buf + 64, 32), act);
    assert_eq!(sc(&mut k, &mut m, "rt_sigaction", &[9, buf, 0, 8]), EINVAL);
    assert_eq!(sc(&mut k, &mut m, "rt_sigaction", &[9, 0, buf + 64, 8]), 0);
    assert_eq!(sc(&mut k, &mut m, "rt_sigaction", &[11, buf, 0, 16]), EINVAL);
    assert_eq!(sc(&mut k, &mut m, "rt_sigaction", &[65, buf, 0, 8]), EINVAL);
    assert_eq!(sc(&mut k, &mut m, "rt_sigaction", &[11, 0x10, 0, 8]), EFAULT);
    // SIGPIPE ignored, as Rust's runtime does.
    poke(&k, &mut m, buf + 128, &[1u64.to_le_bytes(), [0; 8], [0; 8], [0; 8]].concat());
    assert_eq!(sc(&mut k, &mut m, "rt_sigaction", &[13, buf + 128, 0, 8]), 0);
    assert_eq!(sc(&mut k, &mut m, "kill", &[1, 13]), 0);
    // A handled signal waits for the thread's way back to ring 3 (see tests/signals.rs).
    assert_eq!(sc(&mut k, &mut m, "tgkill", &[1, 1, 11]), 0);
    assert!(k.signal_due());
    assert!(k.caught_signals().is_empty());
    assert_eq!(sc(&mut k, &mut m, "kill", &[1, 0]), 0);
    assert_eq!(sc(&mut k, &mut m, "kill", &[77, 0]), -3);
    assert_eq!(sc(&mut k, &mut m, "kill", &[1, 99]), EINVAL);
    assert_eq!(sc(&mut k, &mut m, "tgkill", &[1, 2, 6]), -3);
    assert_eq!(sc(&mut k, &mut m, "tgkill", &[0, 1, 6]), EINVAL);
    assert_eq!(sc(&mut k, &mut m, "kill", &[1, 17]), 0, "SIGCHLD is ignored by default");
    // sigaltstack.
    poke(&k, &mut m, buf + 256, &[0x1234_0000u64.to_le_bytes(), 0u64.to_le_bytes(), 0x4000u64.to_le_bytes()].concat());
    assert_eq!(sc(&mut k, &mut m, "sigaltstack", &[buf + 256, buf + 512]), 0);
    assert_eq!(peek(&k, &mut m, buf + 520, 4), 2u32.to_le_bytes(), "SS_DISABLE before");
    assert_eq!(sc(&mut k, &mut m, "sigaltstack", &[0, buf + 512]), 0);
    assert_eq!(peek(&k, &mut m, buf + 512, 8), 0x1234_0000u64.to_le_bytes());
    // glibc's abort(): raise() blocks all signals, tgkill, restores the mask.
    poke(&k, &mut m, buf + 768, &u64::MAX.to_le_bytes());
    assert_eq!(sc(&mut k, &mut m, "rt_sigprocmask", &[0, buf + 768, buf + 800, 8]), 0);
    assert_eq!(sc(&mut k, &mut m, "rt_sigprocmask", &[0, buf + 768, buf + 800, 4]), EINVAL);
    assert_eq!(sc(&mut k, &mut m, "rt_sigprocmask", &[7, buf + 768, 0, 8]), EINVAL);
    assert_eq!(sc(&mut k, &mut m, "tgkill", &[1, 1, 6]), 0, "blocked: pending");
    assert_eq!(sc(&mut k, &mut m, "rt_sigpending", &[buf + 832, 8]), 0);
    assert_eq!(
        peek(&k, &mut m, buf + 832, 8),
        (1u64 << 5 | 1 << 10).to_le_bytes(),
        "SIGABRT and the undelivered SIGSEGV"
    );
    assert_eq!(sc(&mut k, &mut m, "rt_sigpending", &[buf + 832, 9]), EINVAL);
    match sc_exit(&mut k, &mut m, "rt_sigprocmask", &[2, buf + 800, 0, 8]) {
        SyscallOutcome::Exit(ExitStatus::Signaled { signal: 6, name, fault: None }) => assert_eq!(name, "SIGABRT"),
        o => panic!("{o:?}"),
    }
    let report = k.finish(&m, ExitStatus::Signaled { signal: 6, name: "SIGABRT".into(), fault: None });
    assert_eq!(report.exit.code(), 134);
    assert_eq!(report.trace.last().unwrap().ret, None);
}

#[test]
fn futex_single_thread() {
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 4096);
    poke(&k, &mut m, buf, &7u32.to_le_bytes());
    assert_eq!(sc(&mut k, &mut m, "futex", &[buf, 128, 8, 0]), -11, "EAGAIN: value changed");
    assert_eq!(sc(&mut k, &mut m, "futex", &[buf, 129, 1]), 0, "wake: nobody");
    assert_eq!(sc(&mut k, &mut m, "futex", &[buf + 1, 129, 1]), EINVAL);
    assert_eq!(sc(&mut k, &mut m, "futex", &[0x10, 128, 7, 0]), EFAULT);
    poke(&k, &mut m, buf + 64, &[1u64.to_le_bytes(), 0u64.to_le_bytes()].concat());
    let t0 = k.virtual_time_ns();
    assert_eq!(sc(&mut k, &mut m, "futex", &[buf, 128, 7, buf + 64]), -110);
    assert_eq!(k.virtual_time_ns() - t0, 1_000_000_000 + 1_000);
    assert_eq!(sc(&mut k, &mut m, "futex", &[buf, 99, 7, 0]), -38);
    match sc_exit(&mut k, &mut m, "futex", &[buf, 128, 7, 0]) {
        SyscallOutcome::Exit(ExitStatus::Signaled { signal: 9, fault: Some(f), .. }) => {
            assert!(f.description.starts_with("deadlock: futex wait"), "{}", f.description);
        }
        o => panic!("{o:?}"),
    }
}

#[test]
fn exit_codes_and_unsupported_syscalls() {
    let (mut k, _, mut m) = boot();
    // A process sharing its parent's fds or working directory is not modelled.
    assert_eq!(sc(&mut k, &mut m, "clone", &[0x400 | 17]), -38);
    assert_eq!(sc(&mut k, &mut m, "clone", &[0x200 | 17]), -38);
    let r = k.syscall(&mut m, 1000, [0; 6]);
    assert_eq!(r, SyscallOutcome::Return((-38i64) as u64));
    assert_eq!(sc(&mut k, &mut m, "sched_yield", &[]), 0);
    let st = match sc_exit(&mut k, &mut m, "exit_group", &[256 + 3]) {
        SyscallOutcome::Exit(st) => st,
        o => panic!("{o:?}"),
    };
    assert_eq!(st, ExitStatus::Exited { code: 3 });
    assert_eq!(k.exit_status(), Some(&st));
    let report = k.finish(&m, st);
    assert_eq!(report.exit.code(), 3);
    assert_eq!(report.syscalls, 5);
    assert_eq!(report.unsupported.get("clone"), Some(&2));
    assert_eq!(report.unsupported.get("unknown_1000"), Some(&1));
    assert_eq!(report.unsupported.len(), 2, "rseq-like policies are not counted");
    assert_eq!(report.syscall_counts.get("sched_yield"), Some(&1));
    assert_eq!(report.syscall_counts.get("exit_group"), Some(&1));
    assert_eq!(report.entry_hashes.len(), 5);
    assert_eq!(report.trace.len(), 5);
    assert_eq!(report.trace[2].name, "unknown_1000");
    assert_eq!(report.trace[4].ret, None);
    assert_eq!(report.virtual_time_ns, 5_000);
    assert_eq!(report.digest.len(), 64);
    let (mut k2, _, mut m2) = boot();
    assert_eq!(
        sc_exit(&mut k2, &mut m2, "exit", &[0xffff_ffff]),
        SyscallOutcome::Exit(ExitStatus::Exited { code: 255 })
    );
}

// ---------------------------------------------------------------------------------------------
// Determinism and robustness

/// A fixed little program: allocations, I/O, randomness, time, a fault and an rdtsc.
fn scripted_run(seed: u64) -> RunReport {
    let (mut k, _, mut m) = boot_spec(spec_with(exec_image(), seed));
    let buf = scratch(&mut k, &mut m, 0x10000);
    sc(&mut k, &mut m, "getrandom", &[buf, 64, 0]);
    sc(&mut k, &mut m, "brk", &[0]);
    sc(&mut k, &mut m, "brk", &[0x40_9000]);
    sc(&mut k, &mut m, "read", &[0, buf + 100, 64]);
    sc(&mut k, &mut m, "clock_gettime", &[1, buf + 200]);
    k.exception(&mut m, Exception::PageFault { addr: buf + 0x8000, error_code: 6, rip: 0x40_1000 });
    k.exception(&mut m, Exception::InvalidOpcode { rip: 0x40_1000, eax: 0, ecx: 0 });
    sc(&mut k, &mut m, "write", &[1, buf, 64]);
    k.finish(&m, ExitStatus::Exited { code: 0 })
}

#[test]
fn same_spec_same_digest() {
    let a = scripted_run(1);
    let b = scripted_run(1);
    let c = scripted_run(2);
    assert_eq!(a, b);
    assert_eq!(a.entry_hashes, b.entry_hashes);
    assert_eq!(a.trace_digest, b.trace_digest);
    assert_ne!(a.memory_digest, c.memory_digest);
    assert_ne!(a.digest, c.digest);
    // The trace digest differs too: write(2)'s buffer differs only in memory, but the
    // getrandom/read results are identical; memory carries the seed.
    assert_eq!(a.syscalls, c.syscalls);
    assert_ne!(a.trace_digest, "");
}

#[test]
fn random_syscalls_never_panic() {
    let mut rng = ChaCha8Rng::seed_from_u64(1234);
    for round in 0..4 {
        let mut mem = FakeMemory::new(8192);
        let (mut k, _) = Kernel::load(spec_with(exec_image(), round), &mut mem).unwrap();
        let base = sc(&mut k, &mut mem, "mmap", &[0, 0x10000, 3, 0x22, u64::MAX, 0]) as u64;
        let p = path(&k, &mut mem, base + 0x8000, "/data/input.txt");
        // A catalog for the deja syscall, registered or not (the fuzz may register it).
        let (cat, ids) = deja_syscall::write_catalog(&k, &mut mem, base + 0x1000, &deja_syscall::SITES);
        if round % 2 == 0 {
            let word = deja_protocol::Request::Catalog.word();
            let _ = k.syscall(&mut mem, deja_protocol::DEJA_SYSCALL, [word, cat, ids.len() as u64, 0, 0, 0]);
        }
        let interesting = [
            0,
            1,
            2,
            3,
            0x1000,
            0x10000,
            u64::MAX,
            u64::MAX - 4095,
            1 << 63,
            (-100i64) as u64,
            0xffff_ffff,
            0x8000_0000,
            base,
            base + 0xff8,
            base + 0xfffe,
            p,
            0x40_1000,
            0x40_2000,
            STACK_TOP - 8,
            STACK_TOP,
            MMAP_TOP - 0x1000,
            cat,
            ids[0],
            ids[5],
            ids[10],
            deja_protocol::MAX_SITES as u64,
            deja_protocol::MAX_DETAILS as u64 + 1,
        ];
        for _ in 0..6000 {
            let nr = match rng.next_u32() % 10 {
                0 => u64::from(rng.next_u32()),
                1 | 2 => deja_protocol::DEJA_SYSCALL,
                _ => u64::from(rng.next_u32() % 340),
            };
            let mut args = [0u64; 6];
            for a in &mut args {
                *a = match rng.next_u32() % 4 {
                    0 => rng.next_u64(),
                    1 => u64::from(rng.next_u32() % 0x4000),
                    _ => interesting[rng.next_u32() as usize % interesting.len()],
                };
            }
            if nr == deja_protocol::DEJA_SYSCALL && rng.next_u32() % 4 != 0 {
                // Mostly the right version with a code around the valid ones.
                args[0] = (u64::from(deja_protocol::PROTOCOL_VERSION) << 32) | u64::from(rng.next_u32() % 9);
                if args[0] as u32 == deja_protocol::Request::Assert as u32 && rng.next_u32() % 2 == 0 {
                    // A well-formed assert of a catalogued site.
                    args[1] = ids[rng.next_u32() as usize % ids.len()];
                    args[2] = u64::from(rng.next_u32() % 2);
                    args[3] = base + u64::from(rng.next_u32() % 0x8000);
                    args[4] = u64::from(rng.next_u32() % 100);
                }
            }
            let _ = k.syscall(&mut mem, nr, args);
            if rng.next_u32() % 20 == 0 {
                let exc = match rng.next_u32() % 4 {
                    0 => Exception::PageFault { addr: args[0], error_code: args[1] & 0x1f, rip: args[2] },
                    1 => Exception::GeneralProtection { rip: args[0], error_code: 0, eax: 0, ecx: 0 },
                    2 => Exception::InvalidOpcode { rip: args[0], eax: args[1] as u32, ecx: args[2] as u32 },
                    _ => Exception::Other { vector: args[0] as u8, rip: args[1] },
                };
                let _ = k.exception(&mut mem, exc);
            }
        }
        k.take_output();
        let r = k.finish(&mem, ExitStatus::Exited { code: 0 });
        assert!(r.syscalls >= 6000);
        assert!(r.syscall_counts.get("deja").is_some_and(|n| *n > 600));
        assert!(!r.unsupported.contains_key("deja"));
        if round % 2 == 0 {
            assert!(r.assertions.iter().any(|a| a.hits > 0), "the fuzz reaches real assertion sites");
        }
    }
}

/// `AT_FDCWD` as a register value.
const AT_FDCWD: u64 = (-100i64) as u64;

// ---------------------------------------------------------------------------------------------
// Snapshots, forks and reseeding

/// Fixed scratch area of the snapshot script.
const SNAP_BUF: u64 = 0x1000_0000;
/// Number of steps of [`snapshot_step`].
const SNAP_STEPS: usize = 18;

/// One step of a script that touches every part of the kernel state: a declared file opened
/// and read in parts, `dup`, a file mapping, getrandom and /dev/urandom, sleeps, brk, demand
/// faults, rdtsc, a pending signal, output on both streams, and the exit.
fn snapshot_step(i: usize, k: &mut Kernel, m: &mut FakeMemory) {
    let b = SNAP_BUF;
    match i {
        0 => assert_eq!(sc(k, m, "mmap", &[b, 0x10000, 3, 0x32, u64::MAX, 0]), b as i64),
        1 => {
            let p = path(k, m, b, "/data/input.txt");
            assert_eq!(sc(k, m, "openat", &[AT_FDCWD, p, 0x80000, 0]), 3);
        }
        2 => assert_eq!(sc(k, m, "read", &[3, b + 0x100, 5]), 5),
        3 => assert_eq!(sc(k, m, "getrandom", &[b + 0x200, 24, 0]), 24),
        4 => {
            poke(k, m, b + 0x300, &[0u64.to_le_bytes(), 1500u64.to_le_bytes()].concat());
            assert_eq!(sc(k, m, "nanosleep", &[b + 0x300, 0]), 0);
        }
        5 => assert!(sc(k, m, "mmap", &[0, 0x2000, 1, 2, 3, 0]) > 0),
        6 => assert_eq!(sc(k, m, "dup", &[3]), 4),
        7 => assert_eq!(sc(k, m, "close", &[3]), 0),
        8 => assert_eq!(sc(k, m, "read", &[4, b + 0x105, 100]), 13),
        9 => {
            let p = path(k, m, b + 0x400, "/dev/urandom");
            assert_eq!(sc(k, m, "openat", &[AT_FDCWD, p, 0, 0]), 3);
            assert_eq!(sc(k, m, "read", &[3, b + 0x500, 10]), 10);
        }
        10 => {
            let r = k.exception(m, Exception::PageFault { addr: b + 0xc000, error_code: 6, rip: 0x40_1000 });
            assert_eq!(r, ExceptionOutcome::Retry);
        }
        11 => {
            let r = k.exception(m, Exception::InvalidOpcode { rip: 0x40_1000, eax: 0, ecx: 0 });
            assert!(matches!(r, ExceptionOutcome::Emulated { len: 2, .. }));
        }
        12 => assert_eq!(sc(k, m, "write", &[1, b + 0x100, 18]), 18),
        13 => assert_eq!(sc(k, m, "write", &[2, b + 0x200, 24]), 24),
        14 => {
            let top = sc(k, m, "brk", &[0]) as u64;
            assert_eq!(sc(k, m, "brk", &[top + 0x5000]), (top + 0x5000) as i64);
        }
        15 => {
            poke(k, m, b + 0x600, &(1u64 << 9).to_le_bytes());
            assert_eq!(sc(k, m, "rt_sigprocmask", &[0, b + 0x600, 0, 8]), 0);
            assert_eq!(sc(k, m, "kill", &[1, 10]), 0, "SIGUSR1 blocked: pending");
        }
        16 => {
            poke(k, m, b + 0x300, &[0u64.to_le_bytes(), 2_000_000u64.to_le_bytes()].concat());
            assert_eq!(sc(k, m, "nanosleep", &[b + 0x300, 0]), 0);
            assert_eq!(sc(k, m, "getrandom", &[b + 0x700, 40, 0]), 40);
            assert_eq!(sc(k, m, "write", &[1, b + 0x700, 40]), 40);
        }
        17 => assert_eq!(sc_exit(k, m, "exit_group", &[7]), SyscallOutcome::Exit(ExitStatus::Exited { code: 7 })),
        _ => unreachable!(),
    }
}

/// Runs steps `from..` and ends the run: the report and all output not yet taken.
fn snapshot_finish(mut k: Kernel, mut m: FakeMemory, from: usize) -> (RunReport, Vec<(Stream, Vec<u8>)>) {
    for i in from..SNAP_STEPS {
        snapshot_step(i, &mut k, &mut m);
    }
    let out = k.take_output();
    let exit = k.exit_status().cloned().unwrap_or(ExitStatus::Exited { code: 0 });
    (k.finish(&m, exit), out)
}

#[test]
fn save_restore_and_clone_continue_identically_at_every_step() {
    let (k0, _, m0) = boot();
    let (want, want_out) = snapshot_finish(k0.clone(), m0.clone(), 0);
    assert_eq!(want.exit, ExitStatus::Exited { code: 7 });
    assert_eq!(want_out.len(), 3, "stdout, stderr, stdout");
    let (mut k, mut m) = (k0, m0);
    for step in 0..=SNAP_STEPS {
        let bytes = k.save();
        let restored = Kernel::restore(&bytes).expect("restore");
        assert_eq!(restored.save(), bytes, "save(restore(s)) == s at step {step}");
        for (how, kk) in [("restored", restored), ("cloned", k.clone())] {
            let (got, out) = snapshot_finish(kk, m.clone(), step);
            assert_eq!(got, want, "{how} at step {step}");
            assert_eq!(got.entry_hashes, want.entry_hashes);
            assert_eq!(got.trace, want.trace);
            assert_eq!(out, want_out, "{how} output at step {step}");
        }
        if step < SNAP_STEPS {
            snapshot_step(step, &mut k, &mut m);
        }
    }
}

#[test]
fn restore_shares_file_contents() {
    let (mut k, _, mut m) = boot();
    for i in 0..6 {
        snapshot_step(i, &mut k, &mut m);
    }
    let r = Kernel::restore(&k.save()).unwrap();
    let id = r.files.fs.lookup_abs("/data/input.txt").unwrap();
    let Some(crate::fs::Kind::Static(vfs_data)) = r.files.fs.get(id).map(|i| i.kind.clone()) else { panic!("static") };
    let Ok(files::fd::OpenFile { kind: files::fd::FileKind::Inode { id: open_id, .. }, offset: 5, .. }) =
        r.files.fds.get(3)
    else {
        panic!("fd 3")
    };
    assert_eq!(*open_id, id);
    let shared = r.process.mappings.iter().any(
        |v| matches!(&v.kind, mm::mappings::VmaKind::File { data, .. } if std::sync::Arc::ptr_eq(&data.0, &vfs_data)),
    );
    assert!(shared, "the file mapping shares the contents too");
}

/// Runs the first `n` snapshot steps, forks, reseeds the child with `seed` (if any) and runs
/// `draw` more steps of randomness; the digest.
fn reseeded_digest(seed: Option<u64>, draw: bool) -> String {
    let (mut k, _, mut m) = boot();
    for i in 0..9 {
        snapshot_step(i, &mut k, &mut m);
    }
    let mut child = Kernel::restore(&k.save()).unwrap();
    let mut cm = m.clone();
    if let Some(s) = seed {
        child.reseed(s);
    }
    if draw {
        assert_eq!(sc(&mut child, &mut cm, "getrandom", &[SNAP_BUF + 0x800, 32, 0]), 32);
    }
    child.finish(&cm, ExitStatus::Exited { code: 0 }).digest
}

#[test]
fn reseed_separates_children() {
    for draw in [false, true] {
        let a = reseeded_digest(Some(1), draw);
        let b = reseeded_digest(Some(2), draw);
        assert_ne!(a, b, "different seeds, draw {draw}");
        assert_eq!(a, reseeded_digest(Some(1), draw), "same seed, draw {draw}");
        assert_ne!(a, reseeded_digest(None, draw), "reseeded vs not, draw {draw}");
    }
    // The reseeded stream is the stream of the new seed from its first byte.
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 4096);
    k.reseed(99);
    let used = k.random_bytes_used();
    sc(&mut k, &mut m, "getrandom", &[buf, 32, 0]);
    let mut want = [0u8; 32];
    RandomStream::new(99).fill(&mut want);
    assert_eq!(peek(&k, &mut m, buf, 32), want);
    assert_eq!(k.random_bytes_used(), used + 32);
}

#[test]
fn restore_refuses_garbage() {
    let (mut k, _, mut m) = boot();
    for i in 0..6 {
        snapshot_step(i, &mut k, &mut m);
    }
    let bytes = k.save();
    assert!(matches!(Kernel::restore(&[]), Err(RestoreError::Decode { .. })));
    let mut long = bytes.clone();
    long.push(0);
    let e = Kernel::restore(&long).unwrap_err();
    assert_eq!(e.to_string(), "kernel state is corrupt: 1 bytes after the end of the state");
    let mut bad = k.clone();
    bad.process.brk_cur = bad.process.brk_start - 1;
    assert!(matches!(Kernel::restore(&bad.save()), Err(RestoreError::Invalid { .. })));
    let mut bad = k.clone();
    *bad.record.counts.entry("read".into()).or_default() += 1;
    assert!(matches!(Kernel::restore(&bad.save()), Err(RestoreError::Invalid { .. })));
}

/// Every single-byte corruption and every truncation of a real state restores to an error or to
/// a kernel that keeps working: nothing panics, neither `restore` nor the syscalls after it.
#[test]
fn hostile_states_never_panic() {
    let (mut k, _, mut m) = boot();
    for i in 0..16 {
        snapshot_step(i, &mut k, &mut m);
    }
    let bytes = k.save();
    let mut ok = 0usize;
    let mut check = |b: &[u8]| {
        if let Ok(mut r) = Kernel::restore(b) {
            ok += 1;
            // A fresh memory: the kernel populates what it touches.
            let mut mem = FakeMemory::new(4096);
            for (nr, args) in [
                (0, [4, SNAP_BUF, 8, 0, 0, 0]),
                (0, [3, SNAP_BUF, 8, 0, 0, 0]),
                (318, [SNAP_BUF + 64, 100, 0, 0, 0, 0]),
                (9, [0, 0x3000, 3, 0x22, u64::MAX, 0]),
                (12, [0, 0, 0, 0, 0, 0]),
                (14, [1, 0, 0, 8, 0, 0]),
                (1, [1, SNAP_BUF, 8, 0, 0, 0]),
            ] {
                let _ = r.syscall(&mut mem, nr, args);
            }
            let _ = r.exception(&mut mem, Exception::PageFault { addr: SNAP_BUF + 0x9000, error_code: 6, rip: 1 });
            let _ = r.proc_maps();
            let exit = r.exit_status().cloned().unwrap_or(ExitStatus::Exited { code: 0 });
            let _ = r.finish(&mem, exit);
        }
    };
    for n in 0..bytes.len() {
        check(&bytes[..n]);
    }
    for i in 0..bytes.len() {
        for flip in [0x01u8, 0x80, 0xff] {
            let mut b = bytes.clone();
            b[i] ^= flip;
            check(&b);
        }
    }
    assert!(ok > 0, "some corruptions (inside file contents) still decode");
}

#[test]
fn statfs_and_extended_attributes_answer_for_a_file_system_without_them() {
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 8192);
    let p = path(&k, &mut m, buf + 4096, "/data/input.txt");
    let missing = path(&k, &mut m, buf + 4500, "/data/missing");
    let name = path(&k, &mut m, buf + 5000, "user.x");
    assert_eq!(sc(&mut k, &mut m, "statfs", &[p, buf]), 0);
    let st = peek(&k, &mut m, buf, 120);
    let word = |i: usize| u64::from_le_bytes(st[i * 8..i * 8 + 8].try_into().unwrap());
    assert_eq!((word(0), word(1), word(8), word(9)), (0xef53, 4096, 255, 4096), "ext4, 4 KiB blocks, 255-byte names");
    assert!(word(3) <= word(2) && word(2) > 0, "free blocks within the total");
    assert_eq!(sc(&mut k, &mut m, "statfs", &[missing, buf]), -2, "ENOENT");
    assert_eq!(sc(&mut k, &mut m, "fstatfs", &[99, buf]), EBADF);
    assert_eq!(sc(&mut k, &mut m, "getxattr", &[p, name, buf, 64]), -61, "ENODATA");
    assert_eq!(sc(&mut k, &mut m, "lgetxattr", &[missing, name, buf, 64]), -2, "ENOENT");
    assert_eq!(sc(&mut k, &mut m, "listxattr", &[p, buf, 64]), 0);
    assert_eq!(sc(&mut k, &mut m, "setxattr", &[p, name, buf, 1, 0]), -95, "EOPNOTSUPP");
    assert_eq!(sc(&mut k, &mut m, "removexattr", &[p, name]), -61, "ENODATA");
    assert_eq!(sc(&mut k, &mut m, "fgetxattr", &[99, name, buf, 64]), EBADF);
}

#[test]
fn a_dynamic_program_starts_in_its_declared_loader() {
    let loader_path = "/lib64/ld-linux-x86-64.so.2";
    let program = build_elf(3, 62, 0, &segs(0), Some(loader_path));
    // The loader is a shared object: its code at 0x1000 relative to wherever it lands.
    let loader = build_elf(3, 62, 0, &segs(0), None);
    let mut spec = spec_with(program.clone(), 0);
    spec.files.insert(loader_path.to_string(), loader.clone());
    let mut m = FakeMemory::new(FRAMES);
    let (k, e) = Kernel::load(spec, &mut m).expect("a dynamic program with its loader loads");
    let mut aux = BTreeMap::new();
    let argc = peek_u64(&m, e.rsp);
    let mut a = e.rsp + 8 * (argc + 2);
    while peek_u64(&m, a) != 0 {
        a += 8;
    }
    a += 8;
    loop {
        let (key, val) = (peek_u64(&m, a), peek_u64(&m, a + 8));
        a += 16;
        if key == AT_NULL {
            break;
        }
        aux.insert(key, val);
    }
    let base = aux[&AT_BASE];
    assert_ne!(base, 0, "AT_BASE is the loader's load address");
    assert_eq!(base % 4096, 0);
    assert!(base < crate::mm::user_layout::MMAP_TOP, "in the mmap area");
    assert_eq!(e.rip, base + 0x1000, "the run starts at the loader's entry");
    assert_eq!(aux[&AT_ENTRY], crate::mm::user_layout::PIE_BASE + 0x1000, "AT_ENTRY is the program's own entry");
    // The loader's bytes are in memory, its code rewritten like the program's.
    assert_eq!(peek(&k, &mut m, base + 0x2010, 10), b"hello data");
    assert_eq!(&peek(&k, &mut m, base + 0x1000, 2)[..], &deja_rewrite::TRAP, "its rdtsc is rewritten");
    // /proc/self/maps names it.
    let maps = k.proc_maps();
    let lines: Vec<&str> = maps.lines().filter(|l| l.ends_with(loader_path)).collect();
    assert_eq!(lines.len(), 3, "one mapping per protection, as Linux shows it: {maps}");
    assert!(lines.iter().all(|l| l.split_whitespace().nth(4) != Some("0")), "with the file's inode: {maps}");
    // Without it the program is refused, naming the loader; a loader that is a program is refused.
    match load_err(program.clone()) {
        LoadError::Dynamic { interpreter } => assert_eq!(interpreter, loader_path),
        e => panic!("{e:?}"),
    }
    let mut spec = spec_with(program, 0);
    spec.files.insert(loader_path.to_string(), exec_image());
    let mut m = FakeMemory::new(FRAMES);
    let e = Kernel::load(spec, &mut m).expect_err("an executable is no loader");
    assert!(matches!(e, LoadError::BadInterpreter { .. }), "{e:?}");
}

/// The loader may come from a read-only root, through its symlinks, as in a Debian image
/// (`/lib64/ld-linux-x86-64.so.2` → `/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2`, `/lib` →
/// `usr/lib`); its mappings are named by the path the program gave.
#[test]
fn a_dynamic_program_finds_its_loader_in_the_root_through_symlinks() {
    use crate::fs::{Root, RootNode};
    let loader_path = "/lib64/ld-linux-x86-64.so.2";
    let program = build_elf(3, 62, 0, &segs(0), Some(loader_path));
    let loader = build_elf(3, 62, 0, &segs(0), None);
    let nodes = BTreeMap::from([
        ("/lib".to_string(), RootNode::Symlink("usr/lib".into())),
        ("/lib64".to_string(), RootNode::Dir { mode: 0o755 }),
        (loader_path.to_string(), RootNode::Symlink("/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2".into())),
        ("/usr/lib/x86_64-linux-gnu".to_string(), RootNode::Dir { mode: 0o755 }),
        (
            "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2".to_string(),
            RootNode::File { mode: 0o755, data: std::sync::Arc::from(loader.as_slice()) },
        ),
    ]);
    let mut spec = spec_with(program.clone(), 0);
    spec.root = Some(std::sync::Arc::new(Root { nodes }));
    let mut m = FakeMemory::new(FRAMES);
    let (k, e) = Kernel::load(spec, &mut m).expect("the loader is found in the root");
    assert_ne!(e.rip, crate::mm::user_layout::PIE_BASE + 0x1000, "the run starts in the loader");
    assert_eq!(e.rip % 0x1000, 0);
    let maps = k.proc_maps();
    assert_eq!(maps.lines().filter(|l| l.ends_with(loader_path)).count(), 3, "{maps}");
    // A dangling link is no loader.
    let nodes = BTreeMap::from([(loader_path.to_string(), RootNode::Symlink("/nowhere/ld.so".into()))]);
    let mut spec = spec_with(program, 0);
    spec.root = Some(std::sync::Arc::new(Root { nodes }));
    let mut m = FakeMemory::new(FRAMES);
    let e = Kernel::load(spec, &mut m).expect_err("no loader");
    assert!(matches!(e, LoadError::Dynamic { .. }), "{e:?}");
}
