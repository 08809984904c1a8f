//! The syscall-site rules on hand-made code; real programs are planned in the end-to-end tests
//! (`crates/deja-cli/tests/syscall_sites.rs`).

use super::*;

const BASE: u64 = 0x40_1000;

fn plan_at(code: &[u8]) -> SyscallPlan {
    plan_syscalls_code(BASE, code, &[])
}

fn refused(p: &SyscallPlan) -> Vec<(u64, Unjumpable)> {
    p.refused.iter().map(|r| (r.addr - BASE, r.why)).collect()
}

#[test]
fn glibcs_mov_then_syscall_becomes_a_jump_over_the_mov() {
    // mov $0x27,%eax; syscall; ret
    let code = [0xb8, 0x27, 0, 0, 0, 0x0f, 0x05, 0xc3];
    let p = plan_at(&code);
    assert_eq!(p.refused, []);
    assert_eq!(
        p.sites,
        [JumpSite { syscall: BASE + 5, offset: 5, window: BASE, displaced: vec![0xb8, 0x27, 0, 0, 0] }]
    );
}

#[test]
fn a_window_takes_whole_instructions_until_it_covers_five_bytes() {
    // mov %rdi,%rax; mov %rsi,%rdi; mov %rdx,%rsi; syscall; ret
    let code = [0x48, 0x89, 0xf8, 0x48, 0x89, 0xf7, 0x48, 0x89, 0xd6, 0x0f, 0x05, 0xc3];
    let p = plan_at(&code);
    assert_eq!(p.sites.len(), 1, "{:?}", p.refused);
    // Two 3-byte moves cover five bytes; the first is not displaced.
    assert_eq!(p.sites[0].window, BASE + 3);
    assert_eq!(p.sites[0].displaced, code[3..9]);
}

#[test]
fn a_branch_into_the_window_keeps_the_trap() {
    // je +3 (to the second mov); mov %rdi,%rax; mov %rsi,%rdi; syscall; ret
    let code = [0x74, 0x03, 0x48, 0x89, 0xf8, 0x48, 0x89, 0xf7, 0x0f, 0x05, 0xc3];
    assert_eq!(refused(&plan_at(&code)), [(8, Unjumpable::BranchTarget)]);
    // A branch to the window's first instruction, or to the syscall itself, is no obstacle.
    // je +0; mov $1,%eax; syscall; ret — and — je +5 (to the syscall); mov $1,%eax; syscall; ret
    for code in [[0x74, 0x00, 0xb8, 1, 0, 0, 0, 0x0f, 0x05, 0xc3], [0x74, 0x05, 0xb8, 1, 0, 0, 0, 0x0f, 0x05, 0xc3]] {
        let p = plan_at(&code);
        assert_eq!(p.refused, [], "{code:x?}");
        assert_eq!(p.sites[0].window, BASE + 2);
    }
}

#[test]
fn a_window_that_reads_rip_or_holds_a_channel_keeps_the_trap() {
    // mov 0x10(%rip),%rax; syscall; ret
    let code = [0x48, 0x8b, 0x05, 0x10, 0, 0, 0, 0x0f, 0x05, 0xc3];
    assert_eq!(refused(&plan_at(&code)), [(7, Unjumpable::NotRelocatable)]);
    // mov %rdi,%rax; rdtsc; syscall; ret: the rdtsc becomes a trap of its own.
    let code = [0x48, 0x89, 0xf8, 0x0f, 0x31, 0x0f, 0x05, 0xc3];
    assert_eq!(refused(&plan_at(&code)), [(5, Unjumpable::NotRelocatable)]);
}

#[test]
fn a_syscall_too_close_to_its_blocks_start_keeps_the_trap() {
    // syscall; ret — then, after a call, mov %rdi,%rax; syscall; ret
    assert_eq!(refused(&plan_at(&[0x0f, 0x05, 0xc3])), [(0, Unjumpable::ShortWindow)]);
    // call +0 (the next instruction); mov %edi,%eax (2 bytes); syscall: the call ends the block
    let code = [0xe8, 0, 0, 0, 0, 0x89, 0xf8, 0x0f, 0x05, 0xc3];
    assert_eq!(refused(&plan_at(&code)), [(7, Unjumpable::BranchTarget)]);
    // jmp +0; mov %edi,%eax; syscall: a jump ends the block before the window is whole.
    let code = [0xeb, 0x00, 0x89, 0xf8, 0x89, 0xf8, 0x0f, 0x05, 0xc3];
    assert_eq!(refused(&plan_at(&code)), [(6, Unjumpable::BranchTarget)]);
}

#[test]
fn only_proven_syscalls_are_planned() {
    // ret; then bytes no path reaches: mov $1,%eax; syscall
    let code = [0xc3, 0xb8, 1, 0, 0, 0, 0x0f, 0x05];
    assert_eq!(refused(&plan_at(&code)), [(6, Unjumpable::Unproven(Doubt::NotReached))]);
    // `0f 05` inside an immediate is no instruction at all: mov $0x050f,%eax; ret
    let p = plan_at(&[0xb8, 0x0f, 0x05, 0, 0, 0xc3]);
    assert_eq!(p.total(), 0, "{p:?}");
}

/// The instructions `bytes` decode to at `ip`.
fn decode(bytes: &[u8], ip: u64) -> Vec<Instruction> {
    iced_x86::Decoder::with_ip(64, bytes, ip, iced_x86::DecoderOptions::NONE).into_iter().collect()
}

#[test]
fn a_site_becomes_a_jump_to_its_trampoline_which_sets_rcx_and_jumps_through_the_slot() {
    // mov %rdi,%rax; mov %rsi,%rdi; mov %rdx,%rsi; syscall; ret: a 6-byte window.
    let code = [0x48, 0x89, 0xf8, 0x48, 0x89, 0xf7, 0x48, 0x89, 0xd6, 0x0f, 0x05, 0xc3];
    let site = plan_at(&code).sites.remove(0);
    let (at, slot) = (0x7ffe_0000_0000 - 0x1000_0000, 0x7ffe_0000_0000);
    assert!(site.rewrite(at, slot).is_none(), "the trampoline is out of a jump's reach of the site");
    assert!(site.rewrite(BASE - 0x1000, BASE + 0x9000_0000).is_none(), "the slot is out of reach");
    for (at, slot) in [(BASE + 0x10_0000, BASE + 0x20_0000), (BASE - 0x1000, BASE + 0x7000_0000)] {
        let r = site.rewrite(at, slot).expect("in reach");
        // The window: a jump to the trampoline, then int3 to its end.
        assert_eq!(r.patch.len(), site.displaced.len());
        let jmp = decode(&r.patch[..5], site.window);
        assert_eq!(jmp[0].code(), Op::Jmp_rel32_64);
        assert_eq!(jmp[0].near_branch_target(), at);
        assert!(r.patch[5..].iter().all(|&b| b == crate::PAD));
        // The trampoline: the displaced moves, RCX = the address after the syscall, the entry.
        assert_eq!(r.trampoline.len(), site.displaced.len() + TRAMPOLINE_EXTRA);
        let t = decode(&r.trampoline, at);
        assert_eq!(t.len(), 4, "{t:?}");
        assert_eq!(&r.trampoline[..site.displaced.len()], &site.displaced[..]);
        assert_eq!(t[2].code(), Op::Lea_r64_m);
        assert_eq!(t[2].op0_register(), iced_x86::Register::RCX);
        assert_eq!(t[2].ip_rel_memory_address(), site.back());
        assert_eq!(site.back(), BASE + 11);
        assert_eq!(t[3].code(), Op::Jmp_rm64);
        assert!(t[3].is_ip_rel_memory_operand());
        assert_eq!(t[3].ip_rel_memory_address(), slot);
    }
}

#[test]
fn a_window_the_linear_sweep_decodes_otherwise_keeps_the_trap() {
    // jmp .+4 (into the middle of the mov); mov $0xf,%rax; syscall; ret. Descent follows the
    // jump and decodes `ror $0,(%rdi)` and `add %al,(%rax)` before the syscall; the sweep from
    // the root decodes the mov. Both find the syscall, but a jump over the descent's window
    // would land on the mov's middle: glibc's `__restore_rt` met exactly this.
    let code = [0xeb, 0x02, 0x48, 0xc7, 0xc0, 0x0f, 0, 0, 0, 0x0f, 0x05, 0xc3];
    let p = plan_at(&code);
    assert_eq!(p.sites, []);
    assert_eq!(refused(&p), [(9, Unjumpable::Unproven(Doubt::Disagree))]);
}
