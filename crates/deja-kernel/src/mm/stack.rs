//! The initial process stack, laid out exactly like Linux's `create_elf_tables`.
//!
//! From the top down: an 8-byte zero word, the `AT_EXECFN` string, the argv and envp strings
//! (argv[0] lowest), the `AT_PLATFORM` string, the 16 `AT_RANDOM` bytes, then (16-byte aligned)
//! `argc`, the argv pointers, NULL, the envp pointers, NULL, and the auxv pairs ending in
//! `AT_NULL`. RSP points at `argc`.

use crate::abi::auxv::*;
use crate::prelude::*;

/// The fixed `AT_HWCAP` (CPUID.1:EDX of a generic x86-64 CPU).
pub const HWCAP: u64 = 0x178b_fbff;
/// The fixed `AT_MINSIGSTKSZ` (a fixed value so glibc does not derive it from the host's XSAVE
/// size).
pub const MINSIGSTKSZ: u64 = 4096;
/// The uid and gid every guest runs as.
pub const GUEST_UID: u64 = 1000;

/// Facts of the loaded image the auxv reports.
#[derive(Debug, Clone, Copy)]
pub struct AuxInfo {
    /// Address of the program headers in memory.
    pub phdr: u64,
    /// Number of program headers.
    pub phnum: u64,
    /// Entry point.
    pub entry: u64,
    /// The dynamic loader's load bias (`AT_BASE`; 0 for a static program).
    pub base: u64,
    /// Where the vDSO's ELF header is (`AT_SYSINFO_EHDR`), if the program has one.
    pub vdso: Option<u64>,
}

/// The built stack: its bytes live at `[rsp, top)`.
#[derive(Debug, Clone)]
pub struct InitialStack {
    /// Initial RSP (points at argc, 16-byte aligned).
    pub rsp: u64,
    /// Contents of `[rsp, top)`.
    pub bytes: Vec<u8>,
}

/// Builds the stack image below `top`; `None` if it would not fit in `limit` bytes.
pub fn build<S: AsRef<[u8]>>(
    top: u64,
    argv: &[S],
    env: &[S],
    execfn: &str,
    random: [u8; 16],
    aux: AuxInfo,
    limit: u64,
) -> Option<InitialStack> {
    let strings: u64 = argv.iter().chain(env).map(|s| s.as_ref().len() as u64 + 1).sum();
    let fixed = 8 + execfn.len() as u64 + 1 + 7 + 16;
    let aux_entries = 20 + u64::from(aux.vdso.is_some());
    let words = 1 + argv.len() as u64 + 1 + env.len() as u64 + 1 + 2 * aux_entries;
    let total = strings.checked_add(fixed)?.checked_add(words * 8)?.checked_add(16)?;
    if total > limit {
        return None;
    }
    let base = top - total - 16;
    let mut buf = vec![0u8; (top - base) as usize];
    let mut put = |addr: u64, data: &[u8]| {
        let o = (addr - base) as usize;
        buf[o..o + data.len()].copy_from_slice(data);
    };
    let mut p = top - 8;
    p -= execfn.len() as u64 + 1;
    let execfn_addr = p;
    put(p, execfn.as_bytes());
    p -= strings;
    let mut ptrs = Vec::with_capacity(argv.len() + env.len());
    let mut q = p;
    for s in argv.iter().chain(env) {
        ptrs.push(q);
        put(q, s.as_ref());
        q += s.as_ref().len() as u64 + 1;
    }
    p -= 7;
    let platform = p;
    put(p, b"x86_64\0");
    p -= 16;
    let random_addr = p;
    put(p, &random);
    // Linux puts the vDSO first.
    let vdso = aux.vdso.map(|a| (AT_SYSINFO_EHDR, a));
    let auxv = vdso.into_iter().chain([
        (AT_MINSIGSTKSZ, MINSIGSTKSZ),
        (AT_HWCAP, HWCAP),
        (AT_PAGESZ, crate::PAGE_SIZE),
        (AT_CLKTCK, 100),
        (AT_PHDR, aux.phdr),
        (AT_PHENT, crate::mm::elf::PHDR_SIZE),
        (AT_PHNUM, aux.phnum),
        (AT_BASE, aux.base),
        (AT_FLAGS, 0),
        (AT_ENTRY, aux.entry),
        (AT_UID, GUEST_UID),
        (AT_EUID, GUEST_UID),
        (AT_GID, GUEST_UID),
        (AT_EGID, GUEST_UID),
        (AT_SECURE, 0),
        (AT_RANDOM, random_addr),
        (AT_HWCAP2, 0),
        (AT_EXECFN, execfn_addr),
        (AT_PLATFORM, platform),
        (AT_NULL, 0),
    ]);
    let mut table: Vec<u64> = Vec::with_capacity(words as usize);
    table.push(argv.len() as u64);
    table.extend(&ptrs[..argv.len()]);
    table.push(0);
    table.extend(&ptrs[argv.len()..]);
    table.push(0);
    for (k, v) in auxv {
        table.push(k);
        table.push(v);
    }
    let rsp = (p - table.len() as u64 * 8) & !15;
    let mut at = rsp;
    for w in &table {
        put(at, &w.to_le_bytes());
        at += 8;
    }
    let off = (rsp - base) as usize;
    Some(InitialStack { rsp, bytes: buf.split_off(off) })
}
