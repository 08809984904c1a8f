//! Where an instruction may go next, decoded with iced-x86: the addresses a software single
//! step plants its one-shot breakpoints at (nested hosts give ring 3 no single-step trap, and
//! deja's own stepping is the same on every host). Pure.

use iced_x86::{Code, Decoder, DecoderOptions, FlowControl, Instruction, OpKind, Register};

/// The registers a successor may depend on.
#[derive(Debug, Clone, Copy, Default)]
pub struct Regs {
    /// RAX, RCX, RDX, RBX, RSP, RBP, RSI, RDI, R8–R15, in x86's encoding order.
    pub gprs: [u64; 16],
    /// The instruction's address.
    pub rip: u64,
    /// The FS base.
    pub fs_base: u64,
    /// The GS base.
    pub gs_base: u64,
}

impl Regs {
    fn value(&self, reg: Register) -> Option<u64> {
        let full = reg.full_register();
        let v = match full {
            Register::FS => return Some(self.fs_base),
            Register::GS => return Some(self.gs_base),
            Register::ES | Register::CS | Register::SS | Register::DS => return Some(0),
            Register::RIP => self.rip,
            _ => {
                let i = full.number().checked_sub(Register::RAX.number())?;
                *self.gprs.get(i)?
            }
        };
        Some(match reg.size() {
            8 => v,
            4 => v & 0xffff_ffff,
            2 => v & 0xffff,
            _ => return None,
        })
    }
}

/// Where the instruction in `code` (at `regs.rip`) goes next: every address it may continue at
/// (both ways of a conditional branch; the target of an indirect one, read through `read`;
/// after a `syscall`, the next instruction). `None` when it cannot be decoded or its target
/// cannot be read.
pub fn successors(code: &[u8], regs: &Regs, read: &mut dyn FnMut(u64) -> Option<u64>) -> Option<Vec<u64>> {
    let mut decoder = Decoder::with_ip(64, code, regs.rip, DecoderOptions::NONE);
    let insn: Instruction = decoder.decode();
    if insn.is_invalid() {
        return None;
    }
    let next = insn.next_ip();
    if insn.code() == Code::Syscall {
        return Some(vec![next]);
    }
    let indirect = |read: &mut dyn FnMut(u64) -> Option<u64>| -> Option<u64> {
        match insn.op0_kind() {
            OpKind::Register => regs.value(insn.op0_register()),
            OpKind::Memory => {
                let addr = insn.virtual_address(0, 0, |reg, _, _| regs.value(reg))?;
                read(addr)
            }
            _ => None,
        }
    };
    Some(match insn.flow_control() {
        FlowControl::UnconditionalBranch | FlowControl::Call => match insn.op0_kind() {
            OpKind::NearBranch64 => vec![insn.near_branch_target()],
            _ => return None,
        },
        FlowControl::ConditionalBranch => vec![next, insn.near_branch_target()],
        FlowControl::IndirectBranch | FlowControl::IndirectCall => vec![indirect(read)?],
        FlowControl::Return => vec![read(regs.gprs[4])?],
        // Every other instruction goes on to the next, and so does one deja emulates at a trap
        // (`ud2` at a rewritten site) or the kernel serves.
        _ => vec![next],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn regs() -> Regs {
        let mut r = Regs { rip: 0x40_1000, ..Default::default() };
        r.gprs[0] = 0x40_2000; // RAX
        r.gprs[4] = 0x7fff_f000; // RSP
        r
    }

    #[test]
    fn branches_calls_returns_and_syscalls_go_where_the_cpu_would() {
        let mut mem = |a: u64| match a {
            0x7fff_f000 => Some(0x40_3333),
            0x40_2008 => Some(0x40_4444),
            0x40_1106 => Some(0x40_5555),
            _ => None,
        };
        let r = regs();
        // jne +0x10
        assert_eq!(successors(&[0x75, 0x10], &r, &mut mem), Some(vec![0x40_1002, 0x40_1012]));
        // call rel32 +0x100
        assert_eq!(successors(&[0xe8, 0, 1, 0, 0], &r, &mut mem), Some(vec![0x40_1105]));
        // ret
        assert_eq!(successors(&[0xc3], &r, &mut mem), Some(vec![0x40_3333]));
        // jmp *%rax; call *0x8(%rax); jmp *0x100(%rip)
        assert_eq!(successors(&[0xff, 0xe0], &r, &mut mem), Some(vec![0x40_2000]));
        assert_eq!(successors(&[0xff, 0x50, 0x08], &r, &mut mem), Some(vec![0x40_4444]));
        assert_eq!(successors(&[0xff, 0x25, 0, 1, 0, 0], &r, &mut mem), Some(vec![0x40_5555]));
        // syscall; mov %rax,%rbx; ud2
        assert_eq!(successors(&[0x0f, 0x05], &r, &mut mem), Some(vec![0x40_1002]));
        assert_eq!(successors(&[0x48, 0x89, 0xc3], &r, &mut mem), Some(vec![0x40_1003]));
        assert_eq!(successors(&[0x0f, 0x0b], &r, &mut mem), Some(vec![0x40_1002]));
        // An indirect jump through memory that cannot be read, and bytes that decode to nothing.
        assert_eq!(successors(&[0xff, 0x60, 0x40], &r, &mut mem), None);
        assert_eq!(successors(&[0x0f], &r, &mut mem), None);
    }
}
