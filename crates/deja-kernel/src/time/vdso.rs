//! deja's vDSO: the clock without an exit.
//!
//! Linux maps a small shared object, the vDSO, into every process and names it in the
//! auxiliary vector (`AT_SYSINFO_EHDR`); glibc, musl and the Go runtime find
//! `__vdso_clock_gettime` in it and call it instead of making the syscall. deja does the same,
//! so that a runtime that reads the clock thousands of times a second (tokio, Go) does not pay
//! a VM exit for each read.
//!
//! # The image
//!
//! [`image`] builds, once per process, an ELF shared object with the symbols Linux's x86-64
//! vDSO exports under version `LINUX_2.6` (`__vdso_clock_gettime`, `__vdso_gettimeofday`,
//! `__vdso_time`, `__vdso_getcpu`, `__vdso_clock_getres`, and their weak aliases without the
//! prefix), a SysV hash table, version definitions and a dynamic section, written with
//! `object`'s ELF writer; the code is assembled with iced-x86's assembler. It is mapped
//! read-only and executable at [`VDSO_ADDR`], after one writable page, the *vvar*, at
//! [`VVAR_ADDR`], which the code reaches relative to its own address.
//!
//! # The same run, fewer exits
//!
//! The vvar holds what the kernel published at the program's last exit ([`Vvar`]): the local
//! time then (`base`), the wall clock's offset, the cost of one call ([`CALL_COST_NS`], the
//! cost of a syscall), the latest time a call may show without an exit (`limit`), and a counter
//! of the calls made since. Call `n` after an exit shows `base + n × cost` and stores `n`; a
//! call that would show more than `limit` makes the syscall instead. At every entry the kernel
//! folds the counter into the virtual clock (`n × cost`, at most what `limit` allowed) and at
//! every way back it publishes again. So a program that spins reading the clock sees time
//! advance exactly as its calls dictate, and two runs of one program read the same times.
//!
//! `limit` is the point where a syscall would have changed more than the clock: just before the
//! earliest deadline of a blocked thread (whose expiry makes it runnable), just before a cluster
//! node's yield point (where the node stops), and no call at all while another thread could run
//! (each syscall is a point where the scheduler may switch). Below it, a syscall would only have
//! advanced the clock by its cost and returned it; so a run with the vDSO computes exactly what
//! the same run without it computes (the same output, virtual times and decisions), in fewer
//! exits. Only what counts syscalls differs: their number, their indices, the trace digest.

use crate::prelude::*;
use once_cell::race::OnceBox;

use iced_x86::code_asm::*;

use serde::{Deserialize, Serialize};

use crate::mm::mappings::{Mappings, Vma, VmaKind};
use crate::mm::shared_object::{self, Assembled, BuildError, Layout};
use crate::mm::user_layout::MMAP_TOP;
use crate::persist::{ensure, RestoreError};
use crate::{MemError, Memory, Prot, PAGE_SIZE};

/// Where the vvar page is mapped: 16 MiB above the `mmap` area, so that running off the end
/// of the highest mapping still faults.
pub const VVAR_ADDR: u64 = MMAP_TOP + (16 << 20);
/// Where the vDSO's ELF header is mapped (`AT_SYSINFO_EHDR`).
pub const VDSO_ADDR: u64 = VVAR_ADDR + PAGE_SIZE;
/// Virtual time one call through the vDSO costs: what the syscall it stands for costs.
pub const CALL_COST_NS: u64 = crate::time::clock::SYSCALL_COST_NS;

/// Offset in the vvar of the calls made since the last exit (written by the vDSO).
pub const VV_CALLS: u64 = 0;
/// Offset of the latest local time a call may show.
pub const VV_LIMIT: u64 = 8;
/// Offset of the local time at the last exit.
pub const VV_BASE: u64 = 16;
/// Offset of `CLOCK_REALTIME` minus local time.
pub const VV_REALTIME: u64 = 24;
/// Offset of the cost of one call, in ns.
pub const VV_COST: u64 = 32;

/// The clock ids the vDSO serves as local time (monotonic, raw, coarse, boottime and their
/// alarms), as a bit mask by id.
const MONOTONIC_IDS: u32 = 1 << 1 | 1 << 4 | 1 << 6 | 1 << 7 | 1 << 9;
/// The clock ids it serves as wall time (realtime, coarse, alarm, TAI).
const REALTIME_IDS: u32 = 1 << 0 | 1 << 5 | 1 << 8 | 1 << 11;

/// The vDSO's protection: read and execute.
const RX: Prot = Prot(Prot::READ.0 | Prot::EXEC.0);

/// Whether a program gets a vDSO (on unless `DEJA_VDSO=off` or `--no-vdso`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum VdsoMode {
    /// Mapped, named by `AT_SYSINFO_EHDR`.
    #[default]
    On,
    /// Not mapped: every clock read is a syscall.
    Off,
}

/// What the kernel keeps of a process's vDSO (saved with the process).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct VdsoState {
    /// Where its vvar page is.
    pub vvar: u64,
    /// The `base` last published.
    pub base: u64,
    /// The `limit` last published.
    pub limit: u64,
    /// Calls served without an exit so far (folded into the clock).
    pub calls: u64,
}

impl VdsoState {
    /// Checks a restored state: the vvar where deja maps it, and a base below the limit's
    /// bound arithmetic.
    pub fn validate(&self) -> Result<(), RestoreError> {
        ensure(self.vvar == VVAR_ADDR, || format!("vvar at {:#x}", self.vvar))
    }
}

/// Maps the vvar and the vDSO into `mem` and `mappings` (at load, before anything ran). The
/// vvar is published by the kernel right after.
pub(crate) fn map(mem: &mut dyn Memory, mappings: &mut Mappings) -> Result<VdsoState, MemError> {
    let img = image();
    mem.populate(VVAR_ADDR, PAGE_SIZE, Prot::RW)?;
    let len = img.pages() * PAGE_SIZE;
    mem.populate(VDSO_ADDR, len, Prot::RW)?;
    mem.write(VDSO_ADDR, &img.bytes)?;
    mem.protect(VDSO_ADDR, len, RX);
    mappings.insert(Vma { start: VVAR_ADDR, end: VDSO_ADDR, prot: Prot::RW, kind: VmaKind::Vvar, shared: false });
    mappings.insert(Vma {
        start: VDSO_ADDR,
        end: VDSO_ADDR + len,
        prot: RX,
        kind: VmaKind::Vdso { offset: 0 },
        shared: false,
    });
    Ok(VdsoState { vvar: VVAR_ADDR, base: 0, limit: 0, calls: 0 })
}

/// What the kernel publishes in the vvar at every way back to the program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Vvar {
    /// Calls since the last exit.
    pub calls: u64,
    /// The latest local time a call may show.
    pub limit: u64,
    /// Local time at the last exit.
    pub base: u64,
    /// `CLOCK_REALTIME` minus local time (wrapping).
    pub realtime: u64,
    /// The cost of one call.
    pub cost: u64,
}

impl Vvar {
    /// The bytes of the vvar's first 40 bytes.
    pub fn encode(&self) -> [u8; 40] {
        let mut b = [0u8; 40];
        for (i, v) in [self.calls, self.limit, self.base, self.realtime, self.cost].into_iter().enumerate() {
            b[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
        }
        b
    }
}

/// How many calls a vvar published with `base` and `limit` lets the program make: the bound
/// on the counter the kernel folds, whatever the program wrote there.
pub fn calls_allowed(base: u64, limit: u64) -> u64 {
    limit.saturating_sub(base) / CALL_COST_NS
}

/// The vDSO's exported functions: name, offset of their code in the text, length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Function {
    /// Linux's name (`__vdso_clock_gettime`).
    pub name: &'static str,
    /// Address relative to the image's start.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
}

/// The vDSO: its bytes and its functions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    /// The ELF file, as mapped at [`VDSO_ADDR`].
    pub bytes: Vec<u8>,
    /// The exported functions.
    pub functions: Vec<Function>,
}

impl Image {
    /// Pages the image spans.
    pub fn pages(&self) -> u64 {
        (self.bytes.len() as u64).div_ceil(PAGE_SIZE)
    }
}

/// The vDSO image (built on first use, the same bytes in every process of every run).
pub fn image() -> &'static Image {
    static IMAGE: OnceBox<Image> = OnceBox::new();
    IMAGE.get_or_init(|| Box::new(build().unwrap_or_else(|e| panic!("deja's vDSO does not build: {}", e.0))))
}

/// The functions deja exports, in symbol-table order, each under Linux's `__vdso_` name
/// (global) and its plain name (weak), as Linux does.
const EXPORTS: [(&str, &str); 5] = [
    ("__vdso_clock_gettime", "clock_gettime"),
    ("__vdso_gettimeofday", "gettimeofday"),
    ("__vdso_time", "time"),
    ("__vdso_getcpu", "getcpu"),
    ("__vdso_clock_getres", "clock_getres"),
];

/// The code, assembled for `text` (its address relative to the image), and where each export
/// starts and ends (relative to the image).
fn assemble(text: u64) -> Result<Assembled, BuildError> {
    let ip = VDSO_ADDR + text;
    // From the first instruction (the `tick` routine) back to the vvar.
    let to_vvar = |field: u64| -> i32 { (VVAR_ADDR as i64 + field as i64 - ip as i64) as i32 };
    let mut a = CodeAssembler::new(64)?;
    let mut tick = a.create_label();
    let mut starts = Vec::new();
    let mut labels: Vec<CodeLabel> = (0..EXPORTS.len()).map(|_| a.create_label()).collect();

    // tick: one call. CF set: no calls left, make the syscall. Otherwise RAX is the local time
    // this call shows and R11 the vvar. Clobbers R10 and the flags only.
    let mut out = a.create_label();
    a.set_label(&mut tick)?;
    a.lea(r11, ptr(tick))?;
    a.mov(rax, qword_ptr(r11 + to_vvar(VV_CALLS)))?;
    a.add(rax, 1)?;
    a.mov(r10, rax)?;
    a.imul_2(r10, qword_ptr(r11 + to_vvar(VV_COST)))?;
    a.add(r10, qword_ptr(r11 + to_vvar(VV_BASE)))?;
    a.cmp(r10, qword_ptr(r11 + to_vvar(VV_LIMIT)))?;
    a.ja(out)?;
    a.mov(qword_ptr(r11 + to_vvar(VV_CALLS)), rax)?;
    a.mov(rax, r10)?;
    a.clc()?;
    a.ret()?;
    a.set_label(&mut out)?;
    a.stc()?;
    a.ret()?;

    // Splits RAX (ns) into RAX (s) and RDX (ns within the second).
    fn split(a: &mut CodeAssembler) -> Result<(), IcedError> {
        a.xor(edx, edx)?;
        a.mov(ecx, 1_000_000_000u32)?;
        a.div(rcx)
    }
    // At `sys`: the syscall the function stands for, with the caller's arguments untouched.
    fn syscall_at(a: &mut CodeAssembler, sys: &mut CodeLabel, nr: u32) -> Result<(), IcedError> {
        a.set_label(sys)?;
        a.mov(eax, nr)?;
        a.syscall()?;
        a.ret()
    }
    // Returns 0; at `sys`, the syscall instead.
    fn zero_or_syscall(a: &mut CodeAssembler, sys: &mut CodeLabel, nr: u32) -> Result<(), IcedError> {
        a.xor(eax, eax)?;
        a.ret()?;
        syscall_at(a, sys, nr)
    }
    // Runs `body` unless the pointer in `reg` is NULL.
    fn if_given(
        a: &mut CodeAssembler,
        reg: AsmRegister64,
        body: impl FnOnce(&mut CodeAssembler) -> Result<(), IcedError>,
    ) -> Result<(), IcedError> {
        let mut skip = a.create_label();
        a.test(reg, reg)?;
        a.jz(skip)?;
        body(a)?;
        a.set_label(&mut skip)
    }
    // Jumps to `other` unless EDI is a clock id in `mask`.
    fn unless_clock(a: &mut CodeAssembler, mask: u32, other: CodeLabel) -> Result<(), IcedError> {
        a.cmp(edi, 11)?;
        a.ja(other)?;
        a.mov(eax, 1)?;
        a.mov(ecx, edi)?;
        a.shl(eax, cl)?;
        a.test(eax, mask)?;
        a.jz(other)
    }
    let realtime = qword_ptr(r11 + to_vvar(VV_REALTIME));

    // clock_gettime(clockid_t id /* EDI */, struct timespec *tp /* RSI */)
    {
        let (mut sys, mut mono, mut store) = (a.create_label(), a.create_label(), a.create_label());
        a.set_label(&mut labels[0])?;
        unless_clock(&mut a, MONOTONIC_IDS | REALTIME_IDS, sys)?;
        a.test(eax, MONOTONIC_IDS)?;
        a.jnz(mono)?;
        a.call(tick)?;
        a.jc(sys)?;
        a.add(rax, realtime)?;
        a.jmp(store)?;
        a.set_label(&mut mono)?;
        a.call(tick)?;
        a.jc(sys)?;
        a.set_label(&mut store)?;
        split(&mut a)?;
        a.mov(qword_ptr(rsi), rax)?;
        a.mov(qword_ptr(rsi + 8), rdx)?;
        zero_or_syscall(&mut a, &mut sys, 228)?;
    }
    // gettimeofday(struct timeval *tv /* RDI */, struct timezone *tz /* RSI */)
    {
        let mut sys = a.create_label();
        a.set_label(&mut labels[1])?;
        a.call(tick)?;
        a.jc(sys)?;
        if_given(&mut a, rdi, |a| {
            a.add(rax, realtime)?;
            split(a)?;
            a.mov(qword_ptr(rdi), rax)?;
            a.mov(rax, rdx)?;
            a.xor(edx, edx)?;
            a.mov(ecx, 1000u32)?;
            a.div(rcx)?;
            a.mov(qword_ptr(rdi + 8), rax)
        })?;
        if_given(&mut a, rsi, |a| a.mov(qword_ptr(rsi), 0))?;
        zero_or_syscall(&mut a, &mut sys, 96)?;
    }
    // time(time_t *tloc /* RDI */)
    {
        let mut sys = a.create_label();
        a.set_label(&mut labels[2])?;
        a.call(tick)?;
        a.jc(sys)?;
        a.add(rax, realtime)?;
        split(&mut a)?;
        if_given(&mut a, rdi, |a| a.mov(qword_ptr(rdi), rax))?;
        a.ret()?;
        syscall_at(&mut a, &mut sys, 201)?;
    }
    // getcpu(unsigned *cpu /* RDI */, unsigned *node /* RSI */, void *cache): CPU 0, node 0.
    {
        let mut sys = a.create_label();
        a.set_label(&mut labels[3])?;
        a.call(tick)?;
        a.jc(sys)?;
        if_given(&mut a, rdi, |a| a.mov(dword_ptr(rdi), 0))?;
        if_given(&mut a, rsi, |a| a.mov(dword_ptr(rsi), 0))?;
        zero_or_syscall(&mut a, &mut sys, 309)?;
    }
    // clock_getres(clockid_t id /* EDI */, struct timespec *res /* RSI */): 1 ns.
    {
        let mut sys = a.create_label();
        a.set_label(&mut labels[4])?;
        unless_clock(&mut a, MONOTONIC_IDS | REALTIME_IDS, sys)?;
        a.call(tick)?;
        a.jc(sys)?;
        if_given(&mut a, rsi, |a| {
            a.mov(qword_ptr(rsi), 0)?;
            a.mov(qword_ptr(rsi + 8), 1)
        })?;
        zero_or_syscall(&mut a, &mut sys, 229)?;
    }
    let result = a.assemble_options(ip, iced_x86::BlockEncoderOptions::RETURN_NEW_INSTRUCTION_OFFSETS)?;
    let code = result.inner.code_buffer.clone();
    for l in &labels {
        starts.push(result.label_ip(l)? - VDSO_ADDR);
    }
    let end = text + code.len() as u64;
    let spans = starts.iter().enumerate().map(|(i, &s)| (s, starts.get(i + 1).copied().unwrap_or(end) - s)).collect();
    Ok((code, spans))
}

/// The ELF `.hash` bucket count (any positive number works; one per two exports).
const HASH_BUCKETS: u32 = 5;

fn build() -> Result<Image, BuildError> {
    // Symbols: per export the global `__vdso_` name and the weak plain name.
    let symbols: Vec<(&str, bool, usize)> =
        EXPORTS.iter().enumerate().flat_map(|(i, &(vdso, plain))| [(vdso, true, i), (plain, false, i)]).collect();
    let layout = Layout {
        soname: "linux-vdso.so.1",
        version: Some("LINUX_2.6"),
        symbols: &symbols,
        buckets: HASH_BUCKETS,
        gnu_stack: false,
    };
    let (bytes, spans) = shared_object::write(&layout, assemble)?;
    let functions =
        EXPORTS.iter().zip(&spans).map(|(&(name, _), &(offset, len))| Function { name, offset, len }).collect();
    Ok(Image { bytes, functions })
}
