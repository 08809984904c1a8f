//! Syscall sites a jump can reach the kernel from without the `syscall` trap: the plan of the
//! fourth stage of the kernel inside the VM (docs/ARCHITECTURE.md, "The kernel inside the VM").
//!
//! A `syscall` instruction traps: 13.9 µs to the L1 hypervisor on nested hosts like ours, about
//! 0.1 µs on VMX/SVM hosts. An in-guest kernel is reached in nanoseconds by a jump instead. The
//! instructions just before a proven `syscall`, a *window* of whole instructions of at least 5
//! bytes, become a `jmp rel32` to a per-site trampoline (and `int3` after it to the window's
//! end), which runs the displaced instructions, sets RCX to the address after the `syscall` as
//! the instruction would, and jumps to the kernel's entry through a pointer near it (the entry
//! may be anywhere in the address space); the kernel returns there. The
//! `syscall` itself stays where it was: a restarted call (RIP moved back two bytes), a stop at a
//! syscall, a branch to the `syscall`: each still finds it, and reaches the same kernel through
//! the trap. A jump touches no stack, so unlike a `call` (zpoline's `call *%rax`) it never
//! writes the 8 bytes below RSP, the red zone a leaf function may be using.
//!
//! A `syscall` is planned when both decodings agree it is an instruction (as for every rewritten
//! instruction, see the crate's doc) and a window exists: walking back from it over whole
//! instructions that recursive descent decoded, each ending where the next begins, until 5
//! bytes are covered, which the linear sweep decodes the same way (the same instruction starts),
//! where
//! - no path enters the window except at its first instruction (no leader inside it: a branch
//!   target, a root, the instruction after a call);
//! - every instruction of the window runs the same anywhere: it neither reads RIP (a
//!   RIP-relative operand) nor changes the flow (a branch, a call, a return, an interrupt), and
//!   is no host-channel instruction (those become traps) and no `syscall`.
//!
//! Anything else is [`SyscallRefused`], with its reason, and keeps reaching the kernel through
//! the trap. Paths the decodings cannot see (a landing pad the unwinder jumps to, a computed
//! jump no table bounds) are the residual risk, as they are for every rewritten byte.

use crate::prelude::*;
use alloc::collections::{BTreeMap, BTreeSet};

use iced_x86::{Code as Op, FlowControl, Instruction};
use serde::{Deserialize, Serialize};

use crate::analysis::{self, channel_of, Region, INSIDE, LEADER, OVERLAP, START};
use crate::{Doubt, PlanError};

/// The bytes a window must cover: a `jmp rel32`.
pub const WINDOW: usize = 5;

/// A `syscall` whose window becomes a jump.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JumpSite {
    /// The `syscall`'s address (as [`crate::Site::addr`]).
    pub syscall: u64,
    /// Its offset (as [`crate::Site::offset`]).
    pub offset: u64,
    /// The window's first address: the jump goes there.
    pub window: u64,
    /// The window's bytes (whole instructions, at least [`WINDOW`]), which the trampoline runs.
    pub displaced: Vec<u8>,
}

/// The bytes a trampoline adds to its displaced instructions: `lea back(%rip),%rcx` (7) and
/// `jmp *slot(%rip)` (6).
pub const TRAMPOLINE_EXTRA: usize = 13;

/// One site's rewrite: what replaces its window, and its trampoline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rewritten {
    /// The window's new bytes: `jmp trampoline` (`e9` and a 32-bit displacement), then `int3` to
    /// the window's end, so that a path into the rest of the window traps.
    pub patch: Vec<u8>,
    /// The trampoline: the displaced instructions, `lea back(%rip),%rcx` (RCX = the address
    /// after the `syscall`, as the instruction sets it) and `jmp *slot(%rip)`.
    pub trampoline: Vec<u8>,
}

/// A 32-bit displacement from the instruction that ends at `end` to `to`, if it reaches.
fn rel32(end: u64, to: u64) -> Option<[u8; 4]> {
    let d = to.wrapping_sub(end) as i64;
    i32::try_from(d).ok().map(i32::to_le_bytes)
}

impl JumpSite {
    /// The address after the `syscall`: where the kernel returns to.
    pub fn back(&self) -> u64 {
        self.syscall + 2
    }

    /// The rewrite of this site with its trampoline at `at`, which jumps on through the 8-byte
    /// pointer at `slot` (the kernel's entry, anywhere in the address space: the kernel returns
    /// to RCX); `None` when the window and the trampoline, or the trampoline and the slot, are
    /// more than 2 GiB apart.
    pub fn rewrite(&self, at: u64, slot: u64) -> Option<Rewritten> {
        let mut patch = vec![0xe9];
        patch.extend(rel32(self.window + 5, at)?);
        patch.resize(self.displaced.len(), crate::PAD);
        let n = self.displaced.len() as u64;
        let mut trampoline = self.displaced.clone();
        trampoline.extend([0x48, 0x8d, 0x0d]);
        trampoline.extend(rel32(at + n + 7, self.back())?);
        trampoline.extend([0xff, 0x25]);
        trampoline.extend(rel32(at + n + TRAMPOLINE_EXTRA as u64, slot)?);
        Some(Rewritten { patch, trampoline })
    }
}

/// Why a `syscall` keeps its trap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unjumpable {
    /// The decodings do not agree it is an instruction.
    Unproven(Doubt),
    /// A path enters the window after its first instruction (a branch target, a root, the
    /// instruction after a call).
    BranchTarget,
    /// An instruction of the window reads RIP or changes the flow, or is a host channel.
    NotRelocatable,
    /// Fewer than [`WINDOW`] bytes of whole instructions precede it in its block.
    ShortWindow,
    /// A signal handler's return (`.eh_frame` describes it as a signal frame), whose bytes
    /// unwinders read to recognise it.
    SignalReturn,
}

impl Unjumpable {
    /// The reason in words.
    pub fn describe(self) -> &'static str {
        match self {
            Unjumpable::Unproven(Doubt::NotReached) => "no decoding path reaches it",
            Unjumpable::Unproven(Doubt::Overlapping) => "decoding paths overlap there",
            Unjumpable::Unproven(Doubt::Disagree) => "the two decodings disagree there",
            Unjumpable::BranchTarget => "a path enters the instructions before it",
            Unjumpable::NotRelocatable => "an instruction before it reads RIP or changes the flow",
            Unjumpable::ShortWindow => "fewer than 5 bytes of whole instructions before it",
            Unjumpable::SignalReturn => "a signal handler's return, which unwinders recognise by its bytes",
        }
    }
}

/// A `syscall` left to its trap, with the reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyscallRefused {
    /// Its address.
    pub addr: u64,
    /// Its offset.
    pub offset: u64,
    /// Why.
    pub why: Unjumpable,
}

/// The syscall sites of an image or region.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyscallPlan {
    /// The sites a jump reaches the kernel from, by address.
    pub sites: Vec<JumpSite>,
    /// The `syscall` instructions left to their trap, by address.
    pub refused: Vec<SyscallRefused>,
}

impl SyscallPlan {
    /// How many `syscall` instructions the plan covers.
    pub fn total(&self) -> usize {
        self.sites.len() + self.refused.len()
    }

    /// How many were refused for `why`.
    pub fn refused_for(&self, why: Unjumpable) -> usize {
        self.refused.iter().filter(|r| r.why == why).count()
    }
}

/// Plans the syscall sites of an x86-64 ELF image (roots and regions as [`crate::plan_elf`]).
pub fn plan_syscalls_elf(image: &[u8]) -> Result<SyscallPlan, PlanError> {
    let (regions, data, roots, signal) = crate::elf::code_and_roots(image)?;
    let mut out = plan(&regions, &data, &roots);
    // A signal handler's return keeps its bytes (see `elf::eh_frame_starts`).
    let returning = |addr: u64| signal.iter().any(|&(a, b)| (a..b).contains(&addr));
    let (kept, sites): (Vec<JumpSite>, Vec<JumpSite>) = out.sites.into_iter().partition(|s| returning(s.syscall));
    out.sites = sites;
    let why = Unjumpable::SignalReturn;
    out.refused.extend(kept.into_iter().map(|s| SyscallRefused { addr: s.syscall, offset: s.offset, why }));
    // Whatever else kept one, that is the reason that holds.
    out.refused.iter_mut().filter(|r| returning(r.addr)).for_each(|r| r.why = why);
    out.refused.sort_by_key(|r| r.addr);
    Ok(out)
}

/// Plans the syscall sites of raw code at `base` (as [`crate::plan_code`]).
pub fn plan_syscalls_code(base: u64, code: &[u8], roots: &[u64]) -> SyscallPlan {
    let region = Region { addr: base, offset: 0, bytes: code };
    let mut all = roots.to_vec();
    all.push(base);
    plan(&[region], &[region], &all)
}

fn is_syscall(insn: &Instruction) -> bool {
    insn.code() == Op::Syscall
}

/// Whether `insn`, which falls through, runs the same at any address.
fn relocatable(insn: &Instruction) -> bool {
    !insn.is_ip_rel_memory_operand() && channel_of(insn).is_none() && !is_syscall(insn) && insn.code() != Op::Sysenter
}

fn plan(regions: &[Region<'_>], data: &[Region<'_>], roots: &[u64]) -> SyscallPlan {
    let mut p = analysis::prepare(regions, data, roots);
    analysis::descend(&mut p.code, &p.roots, &mut BTreeMap::new());
    // Candidates: every `0f 05` that descent decoded as an instruction start or that a linear
    // sweep from the nearest root below it lands on.
    let mut by_root: BTreeMap<(usize, usize), usize> = BTreeMap::new();
    let mut descended = BTreeSet::new();
    for (ri, r) in p.code.regions.iter().enumerate() {
        for (off, w) in r.bytes.windows(2).enumerate() {
            if w != [0x0f, 0x05] {
                continue;
            }
            if p.code.marks[ri][off] & START != 0 && p.code.decode(ri, off).is_some_and(|i| is_syscall(&i)) {
                descended.insert((ri, off));
            }
            let last = by_root.entry((ri, p.sweep_root(ri, off))).or_insert(off);
            *last = (*last).max(off);
        }
    }
    let mut swept = BTreeSet::new();
    for (&(ri, root), &last) in &by_root {
        analysis::sweep(&p.code, ri, root, last + 1, &mut |off, insn| {
            if is_syscall(insn) {
                swept.insert((ri, off));
            }
        });
    }
    let mut out = SyscallPlan::default();
    for &(ri, off) in descended.union(&swept) {
        let r = &p.code.regions[ri];
        let (addr, offset) = (r.addr + off as u64, r.offset + off as u64);
        let marks = &p.code.marks[ri][off..off + 2];
        let reached = marks.iter().any(|&m| m != 0);
        let doubt = if marks.iter().any(|&m| m & OVERLAP != 0) {
            Some(Doubt::Overlapping)
        } else if descended.contains(&(ri, off)) && swept.contains(&(ri, off)) {
            None
        } else if !reached {
            Some(Doubt::NotReached)
        } else {
            Some(Doubt::Disagree)
        };
        let result = match doubt {
            Some(d) => Err(Unjumpable::Unproven(d)),
            None => window(&p.code, ri, off).and_then(|start| {
                // The window's instructions are proven as the `syscall` is: the linear sweep from
                // the nearest root below finds the same instruction starts in it (a path only
                // descent followed, into the middle of another decoding's instruction, must not
                // move a jump onto bytes the program runs otherwise).
                let root = p.sweep_root(ri, off);
                let mut swept_starts = Vec::new();
                analysis::sweep(&p.code, ri, root, off, &mut |o, _| {
                    if o >= start {
                        swept_starts.push(o);
                    }
                });
                let descended_starts: Vec<usize> = (start..off).filter(|&o| p.code.marks[ri][o] & START != 0).collect();
                match root <= start && swept_starts == descended_starts {
                    true => Ok(start),
                    false => Err(Unjumpable::Unproven(Doubt::Disagree)),
                }
            }),
        };
        match result {
            Ok(start) => out.sites.push(JumpSite {
                syscall: addr,
                offset,
                window: r.addr + start as u64,
                displaced: r.bytes[start..off].to_vec(),
            }),
            Err(why) => out.refused.push(SyscallRefused { addr, offset, why }),
        }
    }
    out
}

/// The start of the window before the `syscall` at `off` of region `ri`.
fn window(code: &analysis::Code<'_>, ri: usize, off: usize) -> Result<usize, Unjumpable> {
    let marks = &code.marks[ri];
    let mut start = off;
    while off - start < WINDOW {
        // A path lands on the window's current first instruction: nothing before it may join.
        if start != off && marks[start] & LEADER != 0 {
            return Err(Unjumpable::BranchTarget);
        }
        // The instruction descent decoded that ends exactly here.
        let prev = (1..=15.min(start)).find_map(|k| {
            let at = start - k;
            let m = marks[at];
            if m & START == 0 || m & OVERLAP != 0 || marks[at + 1..start].iter().any(|&m| m & INSIDE == 0) {
                return None;
            }
            code.decode(ri, at).filter(|i| i.len() == k).map(|i| (at, i))
        });
        let Some((at, insn)) = prev else { return Err(Unjumpable::ShortWindow) };
        if insn.flow_control() != FlowControl::Next {
            // The block begins after it.
            return Err(Unjumpable::ShortWindow);
        }
        if !relocatable(&insn) {
            return Err(Unjumpable::NotRelocatable);
        }
        start = at;
    }
    Ok(start)
}

#[cfg(test)]
mod tests;
