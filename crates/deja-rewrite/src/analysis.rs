//! The two decodings and their comparison: recursive descent from the roots, a linear sweep from
//! the nearest root, and the plan that keeps only what both agree on.

use crate::prelude::*;
use alloc::collections::{BTreeMap, VecDeque};
use core::cell::RefCell;

use iced_x86::{Code as Op, Decoder, DecoderOptions, FlowControl, Instruction, Register};

use crate::{Block, Channel, Doubt, Plan, Refused, Site, Stats};

/// A stretch of executable code: where it is and its bytes.
#[derive(Debug, Clone, Copy)]
pub struct Region<'a> {
    /// Virtual address of the first byte.
    pub addr: u64,
    /// File offset of the first byte (0 for code that is not from a file).
    pub offset: u64,
    /// The code.
    pub bytes: &'a [u8],
}

impl Region<'_> {
    fn end(&self) -> u64 {
        self.addr + self.bytes.len() as u64
    }
}

/// Per-byte marks of recursive descent.
pub(crate) const START: u8 = 1;
pub(crate) const INSIDE: u8 = 2;
pub(crate) const OVERLAP: u8 = 4;
/// A basic block starts here: a walk started here, or execution falls through to here after a
/// conditional branch or a call.
pub(crate) const LEADER: u8 = 8;

/// What the channel instruction at an address is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Found {
    channel: Channel,
    len: u8,
    reg: u8,
    width: u8,
}

/// The channel an instruction reads, with its destination register and width where it has one.
pub(crate) fn channel_of(insn: &Instruction) -> Option<Found> {
    let (channel, dest) = match insn.code() {
        Op::Cpuid => (Channel::Cpuid, None),
        Op::Rdtsc => (Channel::Rdtsc, None),
        Op::Rdtscp => (Channel::Rdtscp, None),
        Op::Xgetbv => (Channel::Xgetbv, None),
        Op::Rdpid_r64 | Op::Rdpid_r32 => (Channel::Rdpid, Some(insn.op0_register())),
        Op::Rdrand_r16 | Op::Rdrand_r32 | Op::Rdrand_r64 => (Channel::Rdrand, Some(insn.op0_register())),
        Op::Rdseed_r16 | Op::Rdseed_r32 | Op::Rdseed_r64 => (Channel::Rdseed, Some(insn.op0_register())),
        _ => return None,
    };
    let (reg, width) = match dest {
        None => (0, 0),
        Some(r) => {
            let full = r.full_register();
            let reg = (full as u32).wrapping_sub(Register::RAX as u32);
            if reg > 15 {
                return None;
            }
            let width = if insn.code() == Op::Rdpid_r32 { 8 } else { r.size() as u8 };
            (reg as u8, width)
        }
    };
    Some(Found { channel, len: insn.len() as u8, reg, width })
}

pub(crate) struct Code<'a> {
    pub(crate) regions: Vec<Region<'a>>,
    /// Everything of the image that is loaded, code or not (jump tables live in read-only data).
    data: Vec<Region<'a>>,
    pub(crate) marks: Vec<Vec<u8>>,
    /// One decoder per region, moved to where each instruction is decoded.
    decoders: Vec<RefCell<Decoder<'a>>>,
}

impl<'a> Code<'a> {
    /// `n` loaded bytes at `addr`, if the image holds them.
    fn read(&self, addr: u64, n: usize) -> Option<&'a [u8]> {
        self.data.iter().find_map(|r| {
            let off = usize::try_from(addr.checked_sub(r.addr)?).ok()?;
            r.bytes.get(off..off.checked_add(n)?)
        })
    }

    pub(crate) fn locate(&self, addr: u64) -> Option<(usize, usize)> {
        let i = self.regions.partition_point(|r| r.end() <= addr);
        let r = self.regions.get(i)?;
        (addr >= r.addr).then(|| (i, (addr - r.addr) as usize))
    }

    /// Decodes the instruction at `off` of region `ri`; `None` if it is invalid or runs past the
    /// region's end.
    pub(crate) fn decode(&self, ri: usize, off: usize) -> Option<Instruction> {
        let mut d = self.decoders[ri].borrow_mut();
        d.set_position(off).ok()?;
        d.set_ip(self.regions[ri].addr + off as u64);
        let insn = d.decode();
        (!insn.is_invalid()).then_some(insn)
    }
}

/// Recursive descent from `roots`: marks every byte it decodes, adds the channel instructions it
/// decodes to `found`, and returns how many instructions and bytes it decoded.
pub(crate) fn descend(code: &mut Code<'_>, roots: &[u64], found: &mut BTreeMap<(usize, usize), Found>) -> (u64, u64) {
    let mut work: Vec<u64> = roots.to_vec();
    work.sort_unstable_by(|a, b| b.cmp(a));
    let (mut decoded, mut bytes) = (0u64, 0u64);
    // The instructions of the current straight-line walk, most recent last (for jump tables).
    let mut recent: VecDeque<Instruction> = VecDeque::with_capacity(RECENT);
    while let Some(start) = work.pop() {
        let mut at = start;
        let mut leader = true;
        recent.clear();
        while let Some((ri, off)) = code.locate(at) {
            if core::mem::take(&mut leader) {
                code.marks[ri][off] |= LEADER;
            }
            let m = code.marks[ri][off] & !LEADER;
            if m & START != 0 {
                break;
            }
            if m & INSIDE != 0 {
                // A path into the middle of an instruction another path decoded: whatever starts
                // here is ambiguous, and reported if it is a channel instruction.
                code.marks[ri][off] |= OVERLAP;
                if let Some(f) = code.decode(ri, off).as_ref().and_then(channel_of) {
                    for m in &mut code.marks[ri][off..off + usize::from(f.len)] {
                        *m |= OVERLAP;
                    }
                    found.insert((ri, off), f);
                }
                break;
            }
            let Some(insn) = code.decode(ri, off) else { break };
            let len = insn.len();
            let marks = &mut code.marks[ri];
            if marks[off + 1..off + len].iter().any(|&m| m & !LEADER != 0) {
                for m in &mut marks[off..off + len] {
                    *m |= OVERLAP;
                }
                if let Some(f) = channel_of(&insn) {
                    found.insert((ri, off), f);
                }
                break;
            }
            marks[off] |= START;
            for m in &mut marks[off + 1..off + len] {
                *m |= INSIDE;
            }
            decoded += 1;
            bytes += len as u64;
            if let Some(f) = channel_of(&insn) {
                found.insert((ri, off), f);
            }
            if recent.len() == RECENT {
                recent.pop_front();
            }
            recent.push_back(insn);
            let next = insn.next_ip();
            match insn.flow_control() {
                FlowControl::Next | FlowControl::XbeginXabortXend => at = next,
                FlowControl::IndirectCall => {
                    leader = true;
                    at = next;
                }
                FlowControl::Call | FlowControl::ConditionalBranch => {
                    work.push(insn.near_branch_target());
                    leader = true;
                    at = next;
                }
                FlowControl::UnconditionalBranch => {
                    work.push(insn.near_branch_target());
                    break;
                }
                FlowControl::Interrupt if insn.code() != Op::Int3 => at = next,
                FlowControl::IndirectBranch => {
                    work.extend(jump_table(code, recent.make_contiguous()));
                    break;
                }
                FlowControl::Return | FlowControl::Interrupt | FlowControl::Exception => break,
            }
        }
    }
    (decoded, bytes)
}

/// How many instructions of a walk [`jump_table`] looks back over.
const RECENT: usize = 8;
/// The most entries a jump table is read for.
const MAX_TABLE: u64 = 4096;

/// The targets of the jump table an indirect `jmp` (the last of `recent`) dispatches through, in
/// the two forms compilers emit on x86-64, each bounded by the `cmp` and unsigned `ja`/`jae`
/// that guard the index in the same walk:
///
/// * position-independent: `lea B, [rip+T]`; `movsxd L, dword [B+I*4]`; `add R, X` (one of R, X
///   is L, the other B); `jmp R` — each entry a 32-bit offset from T;
/// * absolute: `jmp qword [T+I*8]` — each entry an address.
///
/// Anything else — another form, no bound, an index written between the `cmp` and its use, a
/// table the image does not hold — gives no targets: the cases stay unreached (and a channel
/// instruction there is refused, never guessed at).
fn jump_table(code: &Code<'_>, recent: &[Instruction]) -> Vec<u64> {
    use iced_x86::{OpKind, Register as R};
    let Some((jmp, before)) = recent.split_last() else { return Vec::new() };
    let full = |r: R| r.full_register();
    // (table, index register, entry size, position of the load in `before` or its length)
    let (table, index, size, load_at) = if jmp.op0_kind() == OpKind::Memory {
        if jmp.memory_base() != R::None || jmp.memory_index_scale() != 8 || jmp.memory_index() == R::None {
            return Vec::new();
        }
        (jmp.memory_displacement64(), full(jmp.memory_index()), 8usize, before.len())
    } else if jmp.op0_kind() == OpKind::Register {
        let target = full(jmp.op0_register());
        let Some(add_at) = before.iter().rposition(|i| i.mnemonic() == iced_x86::Mnemonic::Add) else {
            return Vec::new();
        };
        let add = &before[add_at];
        if add.op0_kind() != OpKind::Register
            || add.op1_kind() != OpKind::Register
            || full(add.op0_register()) != target
        {
            return Vec::new();
        }
        let (x, y) = (full(add.op0_register()), full(add.op1_register()));
        let Some(load_at) = before[..add_at].iter().rposition(|i| i.code() == Op::Movsxd_r64_rm32) else {
            return Vec::new();
        };
        let load = &before[load_at];
        let loaded = full(load.op0_register());
        let base = if loaded == x {
            y
        } else if loaded == y {
            x
        } else {
            return Vec::new();
        };
        if load.op1_kind() != OpKind::Memory
            || full(load.memory_base()) != base
            || load.memory_index_scale() != 4
            || load.memory_index() == R::None
        {
            return Vec::new();
        }
        let Some(lea) = before[..load_at]
            .iter()
            .rev()
            .find(|i| i.mnemonic() == iced_x86::Mnemonic::Lea && full(i.op0_register()) == base)
        else {
            return Vec::new();
        };
        if !lea.is_ip_rel_memory_operand() {
            return Vec::new();
        }
        (lea.ip_rel_memory_address(), full(load.memory_index()), 4, load_at)
    } else {
        return Vec::new();
    };
    // The bound: `cmp I, imm` then `ja` (index <= imm) or `jae` (index < imm), with nothing in
    // between writing the index.
    let Some(cmp_at) = before[..load_at].iter().rposition(|i| {
        i.mnemonic() == iced_x86::Mnemonic::Cmp && i.op0_kind() == OpKind::Register && full(i.op0_register()) == index
    }) else {
        return Vec::new();
    };
    let cmp = &before[cmp_at];
    let imm = match cmp.op1_kind() {
        OpKind::Immediate8to32
        | OpKind::Immediate8to64
        | OpKind::Immediate32
        | OpKind::Immediate32to64
        | OpKind::Immediate8 => cmp.immediate(1),
        _ => return Vec::new(),
    };
    let mut count = None;
    for i in &before[cmp_at + 1..load_at] {
        match i.mnemonic() {
            iced_x86::Mnemonic::Ja if count.is_none() => count = imm.checked_add(1),
            iced_x86::Mnemonic::Jae if count.is_none() => count = Some(imm),
            _ if i.op0_kind() == OpKind::Register && full(i.op0_register()) == index => return Vec::new(),
            _ => {}
        }
    }
    let Some(count) = count.filter(|&n| n > 0 && n <= MAX_TABLE) else { return Vec::new() };
    (0..count)
        .filter_map(|k| {
            let at = table.checked_add(k * size as u64)?;
            let b = code.read(at, size)?;
            Some(match size {
                4 => table.wrapping_add(i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as i64 as u64),
                _ => u64::from_le_bytes(b.try_into().ok()?),
            })
        })
        .collect()
}

/// Linear sweep of region `ri` from `from` up to `until` (exclusive): calls `f(offset, insn)`
/// for each instruction decoded; an invalid encoding is skipped one byte at a time. Returns the
/// offset it stopped at (the first instruction start at or past `until`).
pub(crate) fn sweep(
    code: &Code<'_>,
    ri: usize,
    from: usize,
    until: usize,
    f: &mut dyn FnMut(usize, &Instruction),
) -> usize {
    let r = &code.regions[ri];
    let mut d = code.decoders[ri].borrow_mut();
    let mut off = from;
    let mut insn = Instruction::default();
    while off < until && off < r.bytes.len() {
        if d.set_position(off).is_err() {
            break;
        }
        d.set_ip(r.addr + off as u64);
        d.decode_out(&mut insn);
        if insn.is_invalid() {
            off += 1;
            continue;
        }
        f(off, &insn);
        off += insn.len();
    }
    off
}

/// The code of an image or region, prepared for both decodings: its regions (sorted, without
/// overlaps), the declared roots inside them, and by region the offsets a linear sweep may start
/// from (the roots and the region's start).
pub(crate) struct Prepared<'a> {
    pub(crate) code: Code<'a>,
    pub(crate) roots: Vec<u64>,
    pub(crate) declared: Vec<Vec<usize>>,
}

impl Prepared<'_> {
    /// The nearest offset of region `ri` a sweep may start from at or below `off`.
    pub(crate) fn sweep_root(&self, ri: usize, off: usize) -> usize {
        let roots = &self.declared[ri];
        roots[roots.partition_point(|&r| r <= off) - 1]
    }
}

pub(crate) fn prepare<'a>(regions: &[Region<'a>], data: &[Region<'a>], roots: &[u64]) -> Prepared<'a> {
    let mut regions: Vec<Region<'_>> = regions.iter().copied().filter(|r| !r.bytes.is_empty()).collect();
    regions.sort_by_key(|r| r.addr);
    // Overlapping regions (sections listed twice): keep the first.
    let mut kept: Vec<Region<'_>> = Vec::new();
    for r in regions {
        if kept.last().is_none_or(|k| k.end() <= r.addr) {
            kept.push(r);
        }
    }
    let marks = kept.iter().map(|r| vec![0u8; r.bytes.len()]).collect();
    let decoders =
        kept.iter().map(|r| RefCell::new(Decoder::with_ip(64, r.bytes, r.addr, DecoderOptions::NONE))).collect();
    let code = Code { regions: kept, data: data.to_vec(), marks, decoders };

    // Declared roots per region, region starts included (the sweep's roots of last resort).
    let mut declared: Vec<Vec<usize>> = vec![Vec::new(); code.regions.len()];
    let mut inside_roots = Vec::new();
    for &a in roots {
        if let Some((ri, off)) = code.locate(a) {
            declared[ri].push(off);
            inside_roots.push(a);
        }
    }
    inside_roots.sort_unstable();
    inside_roots.dedup();
    for d in &mut declared {
        d.push(0);
        d.sort_unstable();
        d.dedup();
    }
    Prepared { code, roots: inside_roots, declared }
}

/// Runs both decodings over `regions` from `roots` and keeps the channel instructions they agree
/// on.
pub(crate) fn analyze<'a>(regions: &[Region<'a>], data: &[Region<'a>], roots: &[u64]) -> Plan {
    let Prepared { mut code, roots: inside_roots, declared } = prepare(regions, data, roots);

    // Candidates: what recursive descent decoded, and what the linear sweep decodes around
    // every `0f` escape byte that could begin one of the channel opcodes (`0f a2`, `0f 31`,
    // `0f 01`, `0f c7`). The sweep runs from the nearest declared root at or below each such
    // place, which both finds what descent did not reach and confirms what it did.
    let mut candidates: BTreeMap<(usize, usize), Found> = BTreeMap::new();
    let (decoded, decoded_bytes) = descend(&mut code, &inside_roots, &mut candidates);
    let mut by_root: BTreeMap<(usize, usize), usize> = BTreeMap::new();
    let mut wanted = |ri: usize, off: usize| {
        let roots = &declared[ri];
        let root = roots[roots.partition_point(|&r| r <= off) - 1];
        let last = by_root.entry((ri, root)).or_insert(off);
        *last = (*last).max(off);
    };
    for &(ri, off) in candidates.keys() {
        wanted(ri, off);
    }
    for (ri, r) in code.regions.iter().enumerate() {
        for (off, w) in r.bytes.windows(2).enumerate() {
            if w[0] == 0x0f && matches!(w[1], 0xa2 | 0x31 | 0x01 | 0xc7) {
                wanted(ri, off);
            }
        }
    }
    let mut swept_starts: alloc::collections::BTreeSet<(usize, usize)> = Default::default();
    for (&(ri, root), &last) in &by_root {
        sweep(&code, ri, root, last + 1, &mut |off, insn| {
            if let Some(f) = channel_of(insn) {
                candidates.entry((ri, off)).or_insert(f);
                swept_starts.insert((ri, off));
            }
        });
    }

    let mut plan = Plan {
        stats: Stats {
            code_bytes: code.regions.iter().map(|r| r.bytes.len() as u64).sum(),
            roots: inside_roots.len() as u64,
            decoded,
            decoded_bytes,
        },
        ..Plan::default()
    };
    for (&(ri, off), f) in &candidates {
        let r = &code.regions[ri];
        let marks = &code.marks[ri][off..off + usize::from(f.len)];
        let addr = r.addr + off as u64;
        let offset = r.offset + off as u64;
        let descent_start = marks[0] & START != 0;
        let reached = marks.iter().any(|&m| m != 0);
        let overlap = marks.iter().any(|&m| m & OVERLAP != 0);
        let swept = swept_starts.contains(&(ri, off));
        let doubt = if overlap {
            Some(Doubt::Overlapping)
        } else if descent_start && swept {
            None
        } else if !reached {
            // Only the sweep saw it; if not even the confirming sweep does, it is no instruction.
            if !swept {
                continue;
            }
            Some(Doubt::NotReached)
        } else if !descent_start && !swept {
            // Both place these bytes inside other instructions.
            continue;
        } else {
            Some(Doubt::Disagree)
        };
        match doubt {
            None => plan.sites.push(Site {
                addr,
                offset,
                len: f.len,
                channel: f.channel,
                reg: f.reg,
                width: f.width,
                original: r.bytes[off..off + usize::from(f.len)].to_vec(),
            }),
            Some(doubt) => plan.refused.push(Refused { addr, offset, channel: f.channel, doubt }),
        }
    }
    // The basic blocks: leaders that descent decoded as an instruction start, no path overlaps
    // and no site covers.
    let mut sites = plan.sites.iter().map(|s| (s.addr, s.addr + u64::from(s.len))).peekable();
    for (ri, r) in code.regions.iter().enumerate() {
        for (off, &m) in code.marks[ri].iter().enumerate() {
            if m & (START | LEADER | OVERLAP) != START | LEADER {
                continue;
            }
            let addr = r.addr + off as u64;
            while sites.peek().is_some_and(|&(_, end)| end <= addr) {
                sites.next();
            }
            if sites.peek().is_some_and(|&(start, _)| start <= addr) {
                continue;
            }
            plan.blocks.push(Block { addr, offset: r.offset + off as u64 });
        }
    }
    plan
}
