//! deja's code rewriter: finds, in a program's executable code, the instructions through which a
//! guest could observe its host, and plans their replacement by a trap of the same length.
//!
//! Guest ring-3 code runs natively, and on some hosts the monitor cannot make these instructions
//! trap: CPUID faulting may be offered and not honoured, CR4.TSD may be ignored, and nothing in
//! KVM traps RDRAND, RDSEED or RDPID. Each one reads something of the host: its CPU model and
//! the physical core's APIC ID (`cpuid`), host time (`rdtsc`, `rdtscp`), the core's number
//! (`rdtscp`, `rdpid`), host randomness (`rdrand`, `rdseed`), the host's XCR0 (`xgetbv`). The
//! rewriter replaces each with `ud2` (`0f 0b`, two bytes, as long as the shortest of them) padded
//! with `int3` to the instruction's length; the monitor keeps the table of rewritten sites and
//! answers the `#UD` at one of them from its own model, then resumes after the original length.
//! A `ud2` the program wrote itself is not in the table and stays SIGILL.
//!
//! # Only instruction starts are touched
//!
//! Rewriting a byte that is not the start of an instruction corrupts the program, so a site is
//! rewritten only when two independent decodings agree that it starts an instruction:
//!
//! 1. **Recursive descent** from the declared roots (the entry point, every function symbol of
//!    `.symtab` and `.dynsym`, every function start in `.eh_frame`, every function entry of a Go
//!    binary's `.gopclntab`), following direct jumps, conditional branches, calls and the jump
//!    tables compilers emit for `switch`/`match` (bounded by the `cmp` that guards the index),
//!    and falling through where execution does. A path that
//!    decodes into the middle of an instruction another path decoded marks those bytes as
//!    *overlapping*.
//! 2. **Linear sweep** from the nearest declared root at or below the site, instruction after
//!    instruction (one byte forward over an invalid encoding), as a disassembler would.
//!
//! A channel instruction found by either becomes a [`Site`] when recursive descent decoded an
//! instruction starting exactly there, none of its bytes overlaps, and the sweep lands on it.
//! When the two disagree, or only the sweep found it (no path reaches it: data, or code reached
//! only through a pointer no root names), it is [`Refused`] with its address and the doubt, and
//! is left alone. Bytes that both decodings place inside another instruction (an immediate, a
//! displacement) are not an instruction at all and are neither rewritten nor reported.
//!
//! The crate is pure: it reads bytes and returns a [`Plan`]; the monitor applies it to guest
//! memory and answers the traps.
//!
//! With the same two decodings, [`syscalls`] plans which `syscall` instructions a jump can reach
//! an in-guest kernel from, without the trap.

#![cfg_attr(not(feature = "std"), no_std)]

use crate::prelude::*;
extern crate alloc;

/// What the standard prelude brings and a `no_std` crate must import: the allocating types and
/// macros, the same items in both placements.
mod prelude {
    pub(crate) use alloc::string::{String, ToString};
    pub(crate) use alloc::vec::Vec;
    pub(crate) use alloc::{format, vec};
}

use serde::{Deserialize, Serialize};
use snafu::Snafu;

mod analysis;
mod elf;
pub mod syscalls;
#[cfg(test)]
mod tests;

pub use analysis::Region;

/// The trap every rewritten instruction starts with: `ud2`.
pub const TRAP: [u8; 2] = [0x0f, 0x0b];
/// The byte that fills a rewritten instruction after the trap: `int3`, so that a jump into the
/// middle of one traps too.
pub const PAD: u8 = 0xcc;
/// The version of the rules: changes whenever the same bytes could be planned differently. It
/// enters every [`Plan::digest`].
pub const RULES_VERSION: u32 = 1;

/// One way for a guest to observe its host through an instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Channel {
    /// `cpuid`: the host's CPU model, features and the core's APIC ID.
    Cpuid,
    /// `rdtsc`: host time.
    Rdtsc,
    /// `rdtscp`: host time and the core's number (`TSC_AUX`).
    Rdtscp,
    /// `rdpid`: the core's number.
    Rdpid,
    /// `rdrand`: host randomness.
    Rdrand,
    /// `rdseed`: host randomness.
    Rdseed,
    /// `xgetbv`: the host's XCR0.
    Xgetbv,
}

impl Channel {
    /// Every channel, in order.
    pub const ALL: [Channel; 7] = [
        Channel::Cpuid,
        Channel::Rdtsc,
        Channel::Rdtscp,
        Channel::Rdpid,
        Channel::Rdrand,
        Channel::Rdseed,
        Channel::Xgetbv,
    ];

    /// The instruction's mnemonic.
    pub fn name(self) -> &'static str {
        match self {
            Channel::Cpuid => "cpuid",
            Channel::Rdtsc => "rdtsc",
            Channel::Rdtscp => "rdtscp",
            Channel::Rdpid => "rdpid",
            Channel::Rdrand => "rdrand",
            Channel::Rdseed => "rdseed",
            Channel::Xgetbv => "xgetbv",
        }
    }
}

impl core::fmt::Display for Channel {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

/// One instruction to rewrite.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Site {
    /// Its address: the ELF's virtual address for [`plan_elf`] (before any load bias), the
    /// address given for [`plan_code`].
    pub addr: u64,
    /// Its file offset for [`plan_elf`]; its offset from the region's start for [`plan_code`].
    pub offset: u64,
    /// The instruction's length, prefixes included (2 to 15).
    pub len: u8,
    /// What it reads.
    pub channel: Channel,
    /// The destination register of `rdrand`, `rdseed` and `rdpid` (0 = RAX … 15 = R15); 0 for
    /// the others.
    pub reg: u8,
    /// The operand size in bytes of `rdrand` and `rdseed` (2, 4 or 8) and `rdpid` (8); 0 for the
    /// others.
    pub width: u8,
    /// The original bytes.
    pub original: Vec<u8>,
}

impl Site {
    /// The bytes that replace the instruction: [`TRAP`], then [`PAD`] to its length.
    pub fn patch(&self) -> Vec<u8> {
        let mut p = TRAP.to_vec();
        p.resize(usize::from(self.len), PAD);
        p
    }
}

/// Why a channel instruction was left alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Doubt {
    /// Only the linear sweep decodes it; no path from a root reaches it (data, or code reached
    /// only through a pointer that no symbol or unwind entry names).
    NotReached,
    /// Two decoding paths overlap on its bytes.
    Overlapping,
    /// Recursive descent and the linear sweep disagree on where the instructions start there.
    Disagree,
}

/// A channel instruction that was not rewritten, with the reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refused {
    /// Its address (as [`Site::addr`]).
    pub addr: u64,
    /// Its offset (as [`Site::offset`]).
    pub offset: u64,
    /// What it would read.
    pub channel: Channel,
    /// Why it was left alone.
    pub doubt: Doubt,
}

impl core::fmt::Display for Refused {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let why = match self.doubt {
            Doubt::NotReached => "no decoding path from the entry point, a symbol or an unwind entry reaches it",
            Doubt::Overlapping => "two decoding paths overlap on its bytes",
            Doubt::Disagree => "recursive descent and the linear sweep disagree on where instructions start there",
        };
        write!(f, "{} at {:#x}: {why}", self.channel, self.addr)
    }
}

/// What the analysis covered.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    /// Bytes of executable code analysed.
    pub code_bytes: u64,
    /// Declared roots inside that code (entry, symbols, unwind entries).
    pub roots: u64,
    /// Instructions recursive descent decoded.
    pub decoded: u64,
    /// Bytes recursive descent decoded (as a share of `code_bytes`: how much of the code it
    /// reached).
    pub decoded_bytes: u64,
}

/// The start of a basic block recursive descent decoded: where an entry, a branch target or a
/// fall-through after a branch or call begins a run of instructions. A one-byte breakpoint
/// there is safe: it is an instruction's first byte on every path descent knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Block {
    /// Its address (as [`Site::addr`]).
    pub addr: u64,
    /// Its offset (as [`Site::offset`]).
    pub offset: u64,
}

/// A function an image's symbol table names (for coverage reports and scopes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Function {
    /// Its first address.
    pub addr: u64,
    /// Its size in bytes (0 when the symbol does not say).
    pub size: u64,
    /// Its name: the symbol's, a Rust one demangled without its hash (`std::io::stdio::print`).
    pub name: String,
    /// The source file of its first instruction, as the image's DWARF line tables name it
    /// (none without them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
}

/// The functions `image`'s symbol table names, by address (none for a stripped or malformed
/// image), each with its source file where the image has DWARF line tables.
pub fn functions(image: &[u8]) -> Vec<Function> {
    elf::functions(image)
}

/// The crates of Rust's standard library and of what it links in: never a program's own code.
const STD_CRATES: &[&str] = &[
    "std",
    "core",
    "alloc",
    "proc_macro",
    "test",
    "panic_unwind",
    "panic_abort",
    "unwind",
    "compiler_builtins",
    "std_detect",
    "hashbrown",
    "rustc_demangle",
    "addr2line",
    "gimli",
    "object",
    "miniz_oxide",
    "adler",
    "adler2",
    "memchr",
    "libc",
    "cfg_if",
];

/// The first path segment of a Rust name (`ackstore` of `ackstore::log::append`, and of
/// `<ackstore::Store as core::ops::drop::Drop>::drop`), if it is one.
fn crate_of(name: &str) -> Option<&str> {
    let name = name.strip_prefix('<').unwrap_or(name);
    let (first, _) = name.split_once("::")?;
    is_ident(first).then_some(first)
}

/// Whether `s` can name a crate: one or more ASCII letters, digits or underscores.
fn is_ident(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The coverage scope of a program's own code, as patterns of [`Function`] names (`*` any run
/// of characters), from the names its symbols give:
///
/// - a Go program (it has `main.main`): its `main` package, `main.*`;
/// - a Rust program: the crate that defines `main` and each crate whose name is a leading
///   `_`-separated part of it or begins with it (a package's library `pagestore` beside its
///   binary `pagestore_buggy`), each as `crate::*` and `<crate::*` (its impls);
/// - another program whose DWARF line tables name source files (a C program built with `-g`:
///   a static libc has none): the directories of those files outside `/usr/`, each as `dir/`;
/// - anything else (a C program without debug information, a stripped image): empty, meaning
///   every function.
///
/// Not the standard library, libc or a runtime: what a campaign's coverage is about by default.
pub fn own_code(functions: &[Function]) -> Vec<String> {
    if functions.iter().any(|f| f.name == "main.main") {
        return vec!["main.*".into()];
    }
    if !functions.iter().any(|f| f.name.starts_with("std::")) {
        let dirs: alloc::collections::BTreeSet<String> = functions
            .iter()
            .filter_map(|f| f.file.as_deref())
            .filter(|file| !file.starts_with("/usr/"))
            .filter_map(|file| file.rsplit_once('/').map(|(dir, _)| format!("{dir}/")))
            .collect();
        return dirs.into_iter().collect();
    }
    let mains: alloc::collections::BTreeSet<&str> = functions
        .iter()
        .filter_map(|f| f.name.strip_suffix("::main"))
        .filter(|c| is_ident(c) && !STD_CRATES.contains(c))
        .collect();
    let near = |c: &str, m: &str| {
        c == m
            || m.strip_prefix(c).is_some_and(|r| r.starts_with('_'))
            || c.strip_prefix(m).is_some_and(|r| r.starts_with('_'))
    };
    let crates: alloc::collections::BTreeSet<&str> = functions
        .iter()
        .filter_map(|f| crate_of(&f.name))
        .filter(|c| !STD_CRATES.contains(c) && mains.iter().any(|m| near(c, m)))
        .collect();
    crates.iter().flat_map(|c| [format!("{c}::*"), format!("<{c}::*")]).collect()
}

/// The rewriting plan for one image or region.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// The instructions to rewrite, by address.
    pub sites: Vec<Site>,
    /// The channel instructions left alone, by address.
    pub refused: Vec<Refused>,
    /// What the analysis covered.
    pub stats: Stats,
    /// The basic blocks descent found, by address, but those that start at a site (the block
    /// map for coverage; not part of the digest: nothing of it is written unless coverage is
    /// asked for).
    pub blocks: Vec<Block>,
}

impl Plan {
    /// How many sites of `channel` the plan rewrites.
    pub fn count(&self, channel: Channel) -> usize {
        self.sites.iter().filter(|s| s.channel == channel).count()
    }

    /// How many instructions of `channel` it leaves alone.
    pub fn refused_count(&self, channel: Channel) -> usize {
        self.refused.iter().filter(|s| s.channel == channel).count()
    }

    /// BLAKE3 of the rules' version and every site (address, length, channel, register, width,
    /// original bytes): two plans with the same digest rewrite the same bytes the same way.
    pub fn digest(&self) -> [u8; 32] {
        let mut h = blake3::Hasher::new();
        h.update(&RULES_VERSION.to_le_bytes());
        for s in &self.sites {
            h.update(&s.addr.to_le_bytes());
            h.update(&[s.len, s.channel as u8, s.reg, s.width]);
            h.update(&s.original);
        }
        *h.finalize().as_bytes()
    }
}

/// Why an ELF image could not be planned.
#[derive(Debug, Snafu)]
pub enum PlanError {
    /// The headers could not be read.
    #[snafu(display("cannot read the ELF headers for code rewriting: {what}"))]
    Elf {
        /// What was wrong.
        what: String,
    },
}

/// Plans the rewriting of an x86-64 ELF image: its executable sections (or, without section
/// headers, its executable segments), with the entry point, the function symbols and the
/// `.eh_frame` function starts as roots. Addresses are the image's virtual addresses.
pub fn plan_elf(image: &[u8]) -> Result<Plan, PlanError> {
    let (regions, data, roots, _) = elf::code_and_roots(image)?;
    Ok(analysis::analyze(&regions, &data, &roots))
}

/// Plans the rewriting of raw code at `base` (a region made executable at run time, where no
/// symbols are known): recursive descent from `roots` (at least `base`, the region's start, is
/// used), checked by a linear sweep from the region's start.
pub fn plan_code(base: u64, code: &[u8], roots: &[u64]) -> Plan {
    let region = Region { addr: base, offset: 0, bytes: code };
    let mut all = roots.to_vec();
    all.push(base);
    analysis::analyze(&[region], &[region], &all)
}
