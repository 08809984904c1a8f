//! Syscall sites reached by a jump instead of the `syscall` trap (docs/ARCHITECTURE.md, "The
//! kernel inside the VM", stage 4).
//!
//! When a program image is loaded with [`Jumps::On`], the kernel plans its `syscall` sites
//! ([`deja_rewrite::syscalls`]) and, for each planned site, writes a trampoline into a
//! *trampoline area* right below the image's lowest page and replaces the site's window (the
//! whole instructions before the `syscall`) with a jump to it. The area starts with one 8-byte
//! slot holding [`GATE`]; each trampoline runs the displaced instructions, sets RCX to the
//! address after the `syscall` (as the instruction does) and jumps through the slot. The area
//! is a mapping of its own ([`crate::mm::mappings::VmaKind::Jumps`], `[deja-jumps]` in
//! `/proc/self/maps`), read and execute only; `mmap` never places there (it is below the image,
//! far under the mmap area) and `MAP_FIXED`, `MREMAP_FIXED`, `munmap` and `mprotect` onto it
//! are refused, as onto the reserved range.
//!
//! The gate is a page of the monitor's, mapped into every address space at the same address in
//! both placements (the upper half's stub page), and the only part that differs between them:
//! - **host placement:** `lea -2(%rcx),%rcx; jmp *%rcx`: back to the `syscall`, which traps to
//!   the monitor with every register as if the jump had never happened (RCX and R11 are written
//!   by the instruction; `lea` leaves the flags alone);
//! - **guest placement:** `jmp *entry(%rip)` into the in-guest kernel's `deja_jump_entry`,
//!   which saves RFLAGS into R11 as the instruction would and serves the call without a trap.
//!
//! So both placements give a program the same bytes, the same mappings and the same digests, and
//! the mode is an input of the run (it changes the code's bytes), recorded in its report.

use crate::prelude::*;

use deja_rewrite::syscalls::{JumpSite, SyscallPlan, Unjumpable, TRAMPOLINE_EXTRA};
use serde::{Deserialize, Serialize};

use crate::host::hostchan::holds;
use crate::mm::mappings::{Mappings, Vma, VmaKind};
use crate::mm::user_layout::{page_down, USER_START};
use crate::{MemError, Memory, Prot, PAGE_SIZE};

/// Where every trampoline jumps: the monitor's gate, in the upper half's stub page (the same
/// address in every address space and both placements).
pub const GATE: u64 = 0xffff_ffff_ff60_0800;

/// The host placement's gate: `lea -0x2(%rcx),%rcx; jmp *%rcx`, back to the `syscall`.
pub const HOST_GATE: [u8; 6] = [0x48, 0x8d, 0x49, 0xfe, 0xff, 0xe1];

/// The guest placement's gate: `jmp *0(%rip)` followed by the entry's address.
pub fn guest_gate(entry: u64) -> [u8; 14] {
    let mut g = [0u8; 14];
    g[..6].copy_from_slice(&[0xff, 0x25, 0, 0, 0, 0]);
    g[6..].copy_from_slice(&entry.to_le_bytes());
    g
}

/// Whether a program's `syscall` sites become jumps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Jumps {
    /// Every `syscall` traps (the default of the host placement).
    #[default]
    Off,
    /// The image's planned sites jump (the default of the guest placement).
    On,
}

/// What jump sites did to the program image (part of [`crate::host::hostchan::HostChannelReport`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JumpReport {
    /// Whether sites were made jumps.
    pub mode: Jumps,
    /// The trampoline area, `[start, end)`, when one was mapped.
    pub area: Option<(u64, u64)>,
    /// `syscall` instructions of the image the plan covered.
    pub syscalls: u64,
    /// Sites that jump.
    pub sites: u64,
    /// Sites left to the trap because a path enters their window.
    pub branch_target: u64,
    /// Sites left to the trap because an instruction before them reads RIP or changes the flow.
    pub not_relocatable: u64,
    /// Sites left to the trap because fewer than 5 bytes of whole instructions precede them.
    pub short_window: u64,
    /// Sites left to the trap because the decodings do not prove them.
    pub unproven: u64,
    /// Planned sites left to the trap: no room for the area below the image, the area out of a
    /// jump's reach, or bytes that were not the planned ones.
    pub unplaced: u64,
}

impl JumpReport {
    fn count(&mut self, plan: &SyscallPlan) {
        self.syscalls = plan.total() as u64;
        for r in &plan.refused {
            *match r.why {
                Unjumpable::BranchTarget => &mut self.branch_target,
                Unjumpable::NotRelocatable => &mut self.not_relocatable,
                Unjumpable::ShortWindow => &mut self.short_window,
                // A signal handler's return is left for the same reason as an unproven site:
                // rewriting it is not known to be harmless (unwinders read its bytes).
                Unjumpable::Unproven(_) | Unjumpable::SignalReturn => &mut self.unproven,
            } += 1;
        }
    }
}

/// Makes the sites of `plan` (addresses as the image's headers give them, `bias` added where it
/// is loaded) jumps into trampolines written in an area right below `lowest` (the image's lowest
/// page), and maps that area in `mappings`. The image's code pages must still be writable. A
/// site whose bytes are not the planned ones, or that the area is out of reach of, keeps its
/// trap; so does every site when the area has no room (counted in [`JumpReport::unplaced`]).
pub(crate) fn apply(
    mem: &mut dyn Memory,
    mappings: &mut Mappings,
    plan: &SyscallPlan,
    bias: u64,
    lowest: u64,
) -> Result<JumpReport, MemError> {
    let mut report = JumpReport { mode: Jumps::On, ..JumpReport::default() };
    report.count(plan);
    let sites: Vec<JumpSite> = plan
        .sites
        .iter()
        .map(|s| JumpSite { syscall: bias.wrapping_add(s.syscall), window: bias.wrapping_add(s.window), ..s.clone() })
        .filter(|s| holds(&*mem, s.window, &s.displaced) && holds(&*mem, s.syscall, &[0x0f, 0x05]))
        .collect();
    report.unplaced = (plan.sites.len() - sites.len()) as u64;
    if sites.is_empty() {
        return Ok(report);
    }
    let bytes: u64 = 8 + sites.iter().map(|s| (s.displaced.len() + TRAMPOLINE_EXTRA) as u64).sum::<u64>();
    let len = bytes.div_ceil(PAGE_SIZE) * PAGE_SIZE;
    let end = page_down(lowest);
    let room = end.checked_sub(len).filter(|&start| start >= USER_START && mappings.is_free(start, end));
    let Some(start) = room else {
        report.unplaced += sites.len() as u64;
        return Ok(report);
    };
    mem.populate(start, len, Prot::RW)?;
    mem.write(start, &GATE.to_le_bytes())?;
    let mut at = start + 8;
    for s in &sites {
        let Some(r) = s.rewrite(at, start) else {
            report.unplaced += 1;
            continue;
        };
        mem.write(at, &r.trampoline)?;
        mem.write(s.window, &r.patch)?;
        at += r.trampoline.len() as u64;
        report.sites += 1;
    }
    let prot = Prot(Prot::READ.0 | Prot::EXEC.0);
    mem.protect(start, len, prot);
    mappings.insert(Vma { start, end, prot, kind: VmaKind::Jumps, shared: false });
    report.area = Some((start, end));
    Ok(report)
}
