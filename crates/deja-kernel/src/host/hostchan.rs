//! The host channels closed by rewriting: which sites of the guest's code were rewritten to
//! traps, and what the program sees when it reaches one.
//!
//! When code becomes executable — the image's segments at load, a file or anonymous memory
//! mapped or `mprotect`ed with `PROT_EXEC` — [`deja_rewrite`] plans which `cpuid`, `rdtsc`,
//! `rdtscp`, `rdpid`, `rdrand`, `rdseed` and `xgetbv` instructions to replace with `ud2`, and
//! the kernel writes the patches and keeps every site in [`HostChannels`] with its original
//! bytes. A `#UD` at a known site whose memory still holds the trap is answered by
//! [`Kernel::emulate`](crate::Kernel) from deja's own model:
//!
//! | instruction | answer |
//! |---|---|
//! | `cpuid` | deja's fixed table ([`crate::host::cpuid::answer`]) |
//! | `rdtsc`, `rdtscp` | the virtual TSC ([`crate::time::clock::Clock::tsc`]), charged [`crate::time::clock::RDTSC_COST_NS`]; `TSC_AUX` (ECX) is 0 |
//! | `rdpid` | 0, the one core's number |
//! | `rdrand`, `rdseed` | the next bytes of the seeded random stream, CF set |
//! | `xgetbv` | deja's XCR0 ([`crate::host::cpuid::XCR0`]) for ECX = 0; #GP otherwise |
//!
//! The image's sites are planned once at load. A file mapped executable is planned as an ELF
//! (its symbols and unwind entries as roots) or, when it is not one, as raw code from the
//! mapping's start; so is anonymous memory made executable (code a program wrote: a JIT), each
//! run of its populated pages on its own.
//! Sites are forgotten with their mapping (`munmap`, `MAP_FIXED`), move with it (`mremap`),
//! and are planned again, from the current bytes, whenever a non-image range becomes executable
//! again; a site whose bytes the program has replaced is forgotten, and one that no longer
//! plans is given its original bytes back.
//!
//! What stays open: a program that reads its own code sees the traps, not the original bytes;
//! code written into memory that is writable and executable at once, and executed without a
//! later `mprotect`, is not rewritten; the sites the rewriter refused (see
//! [`deja_rewrite::Doubt`]) run natively. Each is named in the run report.

use crate::prelude::*;
use alloc::collections::BTreeMap;
use alloc::sync::Arc;

use deja_rewrite::syscalls::SyscallPlan;
use deja_rewrite::{Channel, Doubt, Plan};
use serde::{Deserialize, Serialize};

use crate::host::cpuid::XCR0;
use crate::host::jumps::JumpReport;
use crate::persist::{ensure, RestoreError};
use crate::{Gpr, MemError, Memory, RegWrite, PAGE_SIZE, RAX, RBX, RCX, RDX};

/// How many code objects a report lists (a JIT may make many); the rest are counted.
pub const MAX_OBJECTS: usize = 256;

/// Whether deja rewrites host-channel instructions in a program's code.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rewrite {
    /// Rewrite them (the default).
    #[default]
    On,
    /// Leave the code as it is (for comparison: the host's mechanisms alone).
    Off,
}

/// A count per channel.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelCounts {
    /// `cpuid`.
    pub cpuid: u64,
    /// `rdtsc`.
    pub rdtsc: u64,
    /// `rdtscp`.
    pub rdtscp: u64,
    /// `rdpid`.
    pub rdpid: u64,
    /// `rdrand`.
    pub rdrand: u64,
    /// `rdseed`.
    pub rdseed: u64,
    /// `xgetbv`.
    pub xgetbv: u64,
}

impl ChannelCounts {
    fn slot(&mut self, c: Channel) -> &mut u64 {
        match c {
            Channel::Cpuid => &mut self.cpuid,
            Channel::Rdtsc => &mut self.rdtsc,
            Channel::Rdtscp => &mut self.rdtscp,
            Channel::Rdpid => &mut self.rdpid,
            Channel::Rdrand => &mut self.rdrand,
            Channel::Rdseed => &mut self.rdseed,
            Channel::Xgetbv => &mut self.xgetbv,
        }
    }

    /// The count of `c`.
    pub fn get(&self, c: Channel) -> u64 {
        *self.clone().slot(c)
    }

    /// Adds `n` to `c`.
    pub fn add(&mut self, c: Channel, n: u64) {
        *self.slot(c) += n;
    }

    /// The sum over every channel.
    pub fn total(&self) -> u64 {
        Channel::ALL.iter().map(|&c| self.get(c)).sum()
    }
}

/// A channel instruction the rewriter left alone, where it is in the running program.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefusedSite {
    /// Its address.
    pub addr: u64,
    /// What it reads.
    pub channel: Channel,
    /// Why it was left alone.
    pub doubt: Doubt,
}

/// What rewriting did to one piece of code: the image, a mapped file, or a region of memory
/// made executable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CodeObject {
    /// The program's path, the file's path, or `anonymous`.
    pub name: String,
    /// The range planned.
    pub start: u64,
    /// End of the range (exclusive).
    pub end: u64,
    /// Bytes of code analysed.
    pub code_bytes: u64,
    /// Bytes recursive descent reached.
    pub decoded_bytes: u64,
    /// The first 16 hex digits of the plan's digest ([`Plan::digest`]).
    pub plan: String,
    /// Sites rewritten, per channel.
    pub rewritten: ChannelCounts,
    /// Channel instructions left alone, with why.
    pub refused: Vec<RefusedSite>,
}

/// What code rewriting did in a run (part of [`crate::RunReport`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostChannelReport {
    /// Whether code was rewritten.
    pub rewrite: Rewrite,
    /// Each code object planned: the image, mapped files, regions made executable (at most
    /// [`MAX_OBJECTS`]).
    pub objects: Vec<CodeObject>,
    /// Code objects past [`MAX_OBJECTS`], counted.
    pub objects_dropped: u64,
    /// Traps answered at rewritten sites, per channel.
    pub traps: ChannelCounts,
    /// What jump sites did to the program image ([`crate::host::jumps`]).
    #[serde(default)]
    pub jumps: JumpReport,
}

impl HostChannelReport {
    /// The sites rewritten over every object, per channel.
    pub fn rewritten(&self) -> ChannelCounts {
        let mut c = ChannelCounts::default();
        for o in &self.objects {
            for ch in Channel::ALL {
                c.add(ch, o.rewritten.get(ch));
            }
        }
        c
    }

    /// Every site left alone, over every object.
    pub fn refused(&self) -> impl Iterator<Item = &RefusedSite> {
        self.objects.iter().flat_map(|o| o.refused.iter())
    }
}

/// A rewritten site, with what it was.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct KnownSite {
    pub(crate) channel: Channel,
    pub(crate) len: u8,
    pub(crate) reg: u8,
    pub(crate) width: u8,
    pub(crate) original: Vec<u8>,
}

impl KnownSite {
    fn patch(&self) -> Vec<u8> {
        let mut p = deja_rewrite::TRAP.to_vec();
        p.resize(usize::from(self.len), deja_rewrite::PAD);
        p
    }
}

/// The table of rewritten sites and what rewriting did (part of the process state).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct HostChannels {
    /// Whether code is rewritten.
    pub(crate) mode: Rewrite,
    /// Every rewritten site, by address.
    pub(crate) sites: BTreeMap<u64, KnownSite>,
    /// What rewriting did, per code object, in the order they were planned (at most
    /// [`MAX_OBJECTS`]).
    pub(crate) objects: Vec<CodeObject>,
    /// Code objects planned past [`MAX_OBJECTS`].
    pub(crate) objects_dropped: u64,
    /// Traps answered, per channel.
    pub(crate) traps: ChannelCounts,
    /// What jump sites did to the image ([`crate::host::jumps`]); absent in states saved before
    /// there were any.
    #[serde(default)]
    pub(crate) jumps: JumpReport,
}

/// Where a plan's sites go: its offsets (file offsets, or offsets in a region) mapped to
/// addresses, for those inside `[start, end)`.
pub(crate) struct Placement {
    /// The object's name for the report.
    pub(crate) name: String,
    /// The range to apply.
    pub(crate) start: u64,
    /// End (exclusive).
    pub(crate) end: u64,
    /// Address of offset 0 (the load bias for an image: addresses are `bias + site.addr`).
    pub(crate) base: u64,
    /// Whether sites are placed by address (`base + addr`: an image) or by offset (`base +
    /// offset`: a file mapping, whose `base` is its address of file offset 0).
    pub(crate) by_addr: bool,
}

fn read_lenient(mem: &dyn Memory, addr: u64, buf: &mut [u8]) {
    // Page by page: an absent page reads as the zeros it would be populated with.
    let mut done = 0usize;
    while done < buf.len() {
        let a = addr + done as u64;
        let in_page = ((PAGE_SIZE - a % PAGE_SIZE) as usize).min(buf.len() - done);
        if mem.read(a, &mut buf[done..done + in_page]).is_err() {
            buf[done..done + in_page].fill(0);
        }
        done += in_page;
    }
}

/// The runs of present pages in `[start, end)` (page aligned), in order.
pub(crate) fn present_runs(mem: &dyn Memory, start: u64, end: u64) -> Vec<(u64, u64)> {
    let mut runs: Vec<(u64, u64)> = Vec::new();
    let mut byte = [0u8; 1];
    let mut a = start;
    while a < end {
        if mem.read(a, &mut byte).is_ok() {
            match runs.last_mut() {
                Some(r) if r.1 == a => r.1 = a + PAGE_SIZE,
                _ => runs.push((a, a + PAGE_SIZE)),
            }
        }
        a += PAGE_SIZE;
    }
    runs
}

/// Whether `mem` holds `bytes` at `addr`.
pub(crate) fn holds(mem: &dyn Memory, addr: u64, bytes: &[u8]) -> bool {
    let mut buf = vec![0u8; bytes.len()];
    mem.read(addr, &mut buf).is_ok() && buf == bytes
}

impl HostChannels {
    /// A table that rewrites or not.
    pub(crate) fn new(mode: Rewrite) -> HostChannels {
        HostChannels { mode, ..HostChannels::default() }
    }

    /// The site at `rip` if memory there still holds its trap.
    pub(crate) fn site_at(&self, mem: &dyn Memory, rip: u64) -> Option<&KnownSite> {
        let s = self.sites.get(&rip)?;
        holds(mem, rip, &deja_rewrite::TRAP).then_some(s)
    }

    /// Applies `plan` to the memory of `at`: writes the trap of every site inside the range
    /// whose bytes are the original ones, and records the object.
    pub(crate) fn apply(&mut self, mem: &mut dyn Memory, plan: &Plan, at: &Placement) -> Result<(), MemError> {
        let place = |addr: u64, offset: u64| -> Option<u64> {
            let a = at.base.wrapping_add(if at.by_addr { addr } else { offset });
            (a >= at.start && a < at.end).then_some(a)
        };
        let mut object = CodeObject {
            name: at.name.clone(),
            start: at.start,
            end: at.end,
            code_bytes: plan.stats.code_bytes,
            decoded_bytes: plan.stats.decoded_bytes,
            plan: plan.digest().iter().take(8).map(|b| format!("{b:02x}")).collect(),
            rewritten: ChannelCounts::default(),
            refused: Vec::new(),
        };
        for s in &plan.sites {
            let Some(a) = place(s.addr, s.offset) else { continue };
            let known =
                KnownSite { channel: s.channel, len: s.len, reg: s.reg, width: s.width, original: s.original.clone() };
            if holds(mem, a, &s.original) {
                mem.write(a, &known.patch())?;
            } else if !holds(mem, a, &known.patch()) {
                // The bytes are neither the planned instruction nor its trap.
                continue;
            }
            object.rewritten.add(s.channel, 1);
            self.sites.insert(a, known);
        }
        for r in &plan.refused {
            if let Some(a) = place(r.addr, r.offset) {
                object.refused.push(RefusedSite { addr: a, channel: r.channel, doubt: r.doubt });
            }
        }
        if self.objects.len() < MAX_OBJECTS {
            self.objects.push(object);
        } else {
            self.objects_dropped += 1;
        }
        Ok(())
    }

    /// The bytes of `[start, end)` as the program wrote them: memory, with every known site
    /// that still holds its trap given its original bytes back.
    pub(crate) fn original_bytes(&self, mem: &dyn Memory, start: u64, end: u64) -> Vec<u8> {
        let mut buf = vec![0u8; (end - start) as usize];
        read_lenient(mem, start, &mut buf);
        for (&a, s) in self.sites.range(start..end) {
            let off = (a - start) as usize;
            let n = usize::from(s.len).min(buf.len() - off);
            if buf[off..off + n] == s.patch()[..n] {
                buf[off..off + n].copy_from_slice(&s.original[..n]);
            }
        }
        buf
    }

    /// Before `[start, end)` is planned again: gives every known site there that still holds
    /// its trap its original bytes back, and forgets them all.
    pub(crate) fn unpatch(&mut self, mem: &mut dyn Memory, start: u64, end: u64) -> Result<(), MemError> {
        let inside: Vec<u64> = self.sites.range(start..end).map(|(a, _)| *a).collect();
        for a in inside {
            if let Some(s) = self.sites.remove(&a) {
                if holds(mem, a, &s.patch()) {
                    mem.write(a, &s.original)?;
                }
            }
        }
        Ok(())
    }

    /// Writes the trap again over every known site in `[start, end)` whose memory holds its
    /// original bytes (a file's pages refilled), and forgets those holding neither.
    pub(crate) fn repatch(&mut self, mem: &mut dyn Memory, start: u64, end: u64) -> Result<(), MemError> {
        let inside: Vec<u64> = self.sites.range(start..end).map(|(a, _)| *a).collect();
        for a in inside {
            let Some(s) = self.sites.get(&a) else { continue };
            if holds(mem, a, &s.original) {
                mem.write(a, &s.patch())?;
            } else if !holds(mem, a, &s.patch()) {
                self.sites.remove(&a);
            }
        }
        Ok(())
    }

    /// Forgets the sites of `[start, end)` (unmapped).
    pub(crate) fn forget(&mut self, start: u64, end: u64) {
        let inside: Vec<u64> = self.sites.range(start..end).map(|(a, _)| *a).collect();
        for a in inside {
            self.sites.remove(&a);
        }
    }

    /// Moves the sites of `[from, from + len)` to start at `to` (`mremap`).
    pub(crate) fn shift(&mut self, from: u64, len: u64, to: u64) {
        let moved: Vec<(u64, KnownSite)> = self.sites.range(from..from + len).map(|(a, s)| (*a, s.clone())).collect();
        for (a, _) in &moved {
            self.sites.remove(a);
        }
        for (a, s) in moved {
            self.sites.insert(a - from + to, s);
        }
    }

    /// What the report says of it.
    pub(crate) fn report(&self) -> HostChannelReport {
        HostChannelReport {
            rewrite: self.mode,
            objects: self.objects.clone(),
            objects_dropped: self.objects_dropped,
            traps: self.traps,
            jumps: self.jumps.clone(),
        }
    }

    /// Counts a trap answered at a site.
    pub(crate) fn count_trap(&mut self, c: Channel) {
        self.traps.add(c, 1);
    }

    /// Checks a restored table: every site is a plausible instruction.
    pub(crate) fn validate(&self) -> Result<(), RestoreError> {
        for (a, s) in &self.sites {
            ensure((2..=15).contains(&s.len) && usize::from(s.len) == s.original.len(), || {
                format!("rewritten site at {a:#x} has length {} with {} original bytes", s.len, s.original.len())
            })?;
            ensure(s.reg <= 15 && matches!(s.width, 0 | 2 | 4 | 8), || {
                format!("rewritten site at {a:#x} names register {} of width {}", s.reg, s.width)
            })?;
            ensure(a.checked_add(u64::from(s.len)).is_some(), || format!("rewritten site at {a:#x} wraps"))?;
        }
        ensure(self.objects.len() <= MAX_OBJECTS, || format!("{} code objects", self.objects.len()))
    }
}

/// The block map of a program image, at the addresses [`crate::Kernel::load`] puts it (the load
/// bias of a static-PIE image added): what block coverage arms and reports by.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageBlocks {
    /// The basic blocks its code's recursive descent found ([`deja_rewrite::Plan::blocks`]), in
    /// order: `(address, file offset, first byte)`.
    pub blocks: Vec<(u64, u64, u8)>,
    /// The functions its symbol table names, by address.
    pub functions: Vec<deja_rewrite::Function>,
}

/// The block map of `image` ([`ImageBlocks`]); empty for an image that does not load.
pub fn image_blocks(image: &[u8]) -> ImageBlocks {
    let Ok(img) = crate::mm::elf::parse(image) else { return ImageBlocks::default() };
    let min_page = crate::mm::user_layout::page_down(img.min_vaddr());
    let base = match img.e_type == crate::mm::elf::ET_DYN {
        true => crate::mm::user_layout::PIE_BASE.wrapping_sub(min_page),
        false => 0,
    };
    let plan = plan_file(image);
    let blocks = plan
        .blocks
        .iter()
        .filter_map(|b| Some((base.wrapping_add(b.addr), b.offset, *image.get(usize::try_from(b.offset).ok()?)?)))
        .collect();
    let functions = deja_rewrite::functions(image)
        .into_iter()
        .map(|f| deja_rewrite::Function { addr: base.wrapping_add(f.addr), ..f })
        .collect();
    ImageBlocks { blocks, functions }
}

/// The block map of a file the program maps as code (a shared object): each block's address
/// as the file's own headers give it, its file offset (where a mapping places it: the
/// mapping's base plus the offset) and its first byte, and the functions the file's symbols
/// name, at their addresses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileBlocks {
    /// `(address, file offset, first byte)` of each block, in address order.
    pub blocks: Vec<(u64, u64, u8)>,
    /// The functions its symbol table (or dynamic symbol table) names, by address.
    pub functions: Vec<deja_rewrite::Function>,
}

/// The block map of the file `bytes` ([`FileBlocks`]), planned as the kernel plans it when a
/// process maps it executable.
pub fn file_blocks(bytes: &[u8]) -> FileBlocks {
    let plan = plan_file(bytes);
    let blocks = plan
        .blocks
        .iter()
        .filter_map(|b| Some((b.addr, b.offset, *bytes.get(usize::try_from(b.offset).ok()?)?)))
        .collect();
    FileBlocks { blocks, functions: deja_rewrite::functions(bytes) }
}

/// What `channel` answers in deja's model: the registers it writes and the arithmetic flags it
/// sets, given EAX and ECX at the trap, the destination register and operand size (`dest`) of
/// `rdrand`, `rdseed` and `rdpid`, the virtual TSC, the next 8 random bytes of the seeded
/// stream (the caller draws them only for the channels that read them) and the CPUs the
/// program is shown (for `cpuid`'s topology). `None`: the instruction raises #GP (`xgetbv` of
/// an XCR other than XCR0).
pub fn answer(
    channel: Channel,
    dest: (Gpr, u8),
    (eax, ecx): (u32, u32),
    tsc: u64,
    random: u64,
    cpus: u32,
) -> Option<Answer> {
    let w32 = |reg, v: u32| RegWrite { reg, value: u64::from(v), width: 4 };
    Some(match channel {
        Channel::Cpuid => {
            let [a, b, c, d] = crate::host::cpuid::answer_for(cpus, eax, ecx);
            (vec![w32(RAX, a), w32(RBX, b), w32(RCX, c), w32(RDX, d)], None)
        }
        Channel::Xgetbv if ecx != 0 => return None,
        Channel::Xgetbv => (vec![w32(RAX, XCR0 as u32), w32(RDX, (XCR0 >> 32) as u32)], None),
        Channel::Rdtsc => (vec![w32(RAX, tsc as u32), w32(RDX, (tsc >> 32) as u32)], None),
        Channel::Rdtscp => (vec![w32(RAX, tsc as u32), w32(RDX, (tsc >> 32) as u32), w32(RCX, 0)], None),
        Channel::Rdpid => (vec![RegWrite { reg: dest.0, value: 0, width: 8 }], None),
        // CF = 1: a random value was available; the other arithmetic flags are cleared.
        Channel::Rdrand | Channel::Rdseed => (vec![RegWrite { reg: dest.0, value: random, width: dest.1 }], Some(1)),
    })
}

/// The registers an emulated instruction writes, and the arithmetic flags it sets.
pub type Answer = (Vec<RegWrite>, Option<u64>);

/// Plans `bytes` as an ELF image (or raw code from `base` when it is not one), once per
/// distinct content in this process when the host placement runs it: a campaign boots the same
/// program thousands of times. In the guest placement a VM plans each image it loads.
pub(crate) fn plan_file(bytes: &[u8]) -> Arc<Plan> {
    memo::plan(bytes, || {
        Arc::new(match bytes.starts_with(b"\x7fELF") {
            true => deja_rewrite::plan_elf(bytes).unwrap_or_else(|_| deja_rewrite::plan_code(0, bytes, &[])),
            false => deja_rewrite::plan_code(0, bytes, &[]),
        })
    })
}

/// The syscall sites of the ELF image `bytes` ([`deja_rewrite::syscalls`]), memoized as
/// [`plan_file`]'s plans are; an image that does not plan has none.
pub(crate) fn plan_syscalls_file(bytes: &[u8]) -> Arc<deja_rewrite::syscalls::SyscallPlan> {
    memo::syscalls(bytes, || Arc::new(deja_rewrite::syscalls::plan_syscalls_elf(bytes).unwrap_or_default()))
}

/// The host placement's memo of plans, keyed by the image's BLAKE3 hash (the last 64 images'
/// channel plans, the last 16 images' syscall plans).
#[cfg(feature = "std")]
mod memo {
    extern crate std;
    use super::{Arc, Plan, SyscallPlan};
    use alloc::vec::Vec;
    use std::sync::Mutex;

    type Memo<T> = Mutex<Vec<([u8; 32], Arc<T>)>>;

    /// The plan of `bytes` in `memo`, or `make`'s, kept there (the oldest of `keep` dropped).
    fn memoized<T>(memo: &Memo<T>, keep: usize, bytes: &[u8], make: impl FnOnce() -> Arc<T>) -> Arc<T> {
        let key = *blake3::hash(bytes).as_bytes();
        if let Ok(memo) = memo.lock() {
            if let Some((_, p)) = memo.iter().find(|(k, _)| *k == key) {
                return p.clone();
            }
        }
        let plan = make();
        if let Ok(mut memo) = memo.lock() {
            if memo.len() >= keep {
                memo.remove(0);
            }
            memo.push((key, plan.clone()));
        }
        plan
    }

    pub(super) fn plan(bytes: &[u8], make: impl FnOnce() -> Arc<Plan>) -> Arc<Plan> {
        static MEMO: Memo<Plan> = Mutex::new(Vec::new());
        memoized(&MEMO, 64, bytes, make)
    }

    pub(super) fn syscalls(bytes: &[u8], make: impl FnOnce() -> Arc<SyscallPlan>) -> Arc<SyscallPlan> {
        static MEMO: Memo<SyscallPlan> = Mutex::new(Vec::new());
        memoized(&MEMO, 16, bytes, make)
    }
}

/// The guest placement plans each image it loads: no lock, no process-wide state.
#[cfg(not(feature = "std"))]
mod memo {
    use super::{Arc, Plan, SyscallPlan};

    pub(super) fn plan(_bytes: &[u8], make: impl FnOnce() -> Arc<Plan>) -> Arc<Plan> {
        make()
    }

    pub(super) fn syscalls(_bytes: &[u8], make: impl FnOnce() -> Arc<SyscallPlan>) -> Arc<SyscallPlan> {
        make()
    }
}
