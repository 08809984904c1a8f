//! Syscall sites made jumps (`host::jumps`): the image's windows jump into trampolines below it,
//! which set RCX and jump through the slot to the gate; the area is the program's to see, not
//! to change.

use super::*;
use crate::host::jumps::{Jumps, GATE};
use deja_rewrite::syscalls::TRAMPOLINE_EXTRA;

/// mov $39,%eax; syscall; mov $60,%eax; xor %edi,%edi; syscall; lea 0(%rip),%rax; syscall; hlt
const CODE: [u8; 27] = [
    0xb8, 39, 0, 0, 0, 0x0f, 0x05, // a 5-byte window
    0xb8, 60, 0, 0, 0, 0x31, 0xff, 0x0f, 0x05, // a 7-byte window
    0x48, 0x8d, 0x05, 0, 0, 0, 0, 0x0f, 0x05, // reads RIP: left to the trap
    0xf4, 0xf4,
];

fn image(e_type: u16, base: u64) -> Vec<u8> {
    let segs = [
        Seg { vaddr: base + 0x1000, flags: 1 | 4, data: CODE.to_vec(), memsz: CODE.len() as u64 },
        Seg { vaddr: base + 0x2000, flags: 2 | 4, data: b"data".to_vec(), memsz: 0x1000 },
    ];
    build_elf(e_type, 62, base, &segs, None)
}

fn load(e_type: u16, base: u64, jumps: Jumps) -> (Kernel, FakeMemory) {
    let (k, _, m) = boot_spec(ProgramSpec { jumps, ..spec_with(image(e_type, base), 42) });
    (k, m)
}

fn decode(bytes: &[u8], ip: u64) -> Vec<iced_x86::Instruction> {
    iced_x86::Decoder::with_ip(64, bytes, ip, iced_x86::DecoderOptions::NONE).into_iter().collect()
}

#[test]
fn planned_sites_jump_through_trampolines_below_the_image_to_the_gate() {
    for (e_type, base, code) in [(2, 0x40_0000, 0x40_1000), (3, 0, PIE_BASE + 0x1000)] {
        let (mut k, mut m) = load(e_type, base, Jumps::On);
        let lowest = code - 0x1000;
        let r = k.finish(&m, ExitStatus::Exited { code: 0 }).host_channels.jumps;
        assert_eq!((r.mode, r.syscalls, r.sites, r.not_relocatable, r.unplaced), (Jumps::On, 3, 2, 1, 0), "{r:?}");
        let (start, end) = r.area.expect("an area");
        assert_eq!((start, end), (lowest - 0x1000, lowest), "one page right below the image");
        assert_eq!(peek_u64(&m, start), GATE, "the slot holds the gate");
        // The first window is a jump to the first trampoline.
        let w = decode(&peek(&k, &mut m, code, 5), code);
        assert_eq!((w[0].code(), w[0].near_branch_target()), (iced_x86::Code::Jmp_rel32_64, start + 8));
        let t = decode(&peek(&k, &mut m, start + 8, 5 + TRAMPOLINE_EXTRA), start + 8);
        assert_eq!(t[0].code(), iced_x86::Code::Mov_r32_imm32);
        assert_eq!(t[1].ip_rel_memory_address(), code + 7, "RCX: after the syscall");
        assert_eq!(t[2].ip_rel_memory_address(), start, "through the slot");
        // The second: its 7 bytes are a jump and int3 padding; the syscalls stay.
        let second = peek(&k, &mut m, code + 7, 9);
        assert_eq!(second[0], 0xe9);
        assert_eq!(&second[5..], &[0xcc, 0xcc, 0x0f, 0x05]);
        assert_eq!(peek(&k, &mut m, code + 5, 2), [0x0f, 0x05]);
        // The third keeps its bytes.
        assert_eq!(peek(&k, &mut m, code + 16, 9), &CODE[16..25]);
        assert!(k.proc_maps().contains("[deja-jumps]"), "{}", k.proc_maps());
    }
}

#[test]
fn without_jumps_the_code_is_as_loaded_and_no_area_is_mapped() {
    let (mut k, mut m) = load(2, 0x40_0000, Jumps::Off);
    assert_eq!(peek(&k, &mut m, 0x40_1000, CODE.len()), CODE);
    assert!(!k.proc_maps().contains("[deja-jumps]"));
    assert_eq!(k.finish(&m, ExitStatus::Exited { code: 0 }).host_channels.jumps, Default::default());
}

#[test]
fn the_program_cannot_unmap_move_protect_or_map_over_the_trampolines() {
    let (mut k, mut m) = load(2, 0x40_0000, Jumps::On);
    let area = 0x3f_f000;
    assert_eq!(sc(&mut k, &mut m, "munmap", &[area, 0x1000]), EINVAL);
    assert_eq!(sc(&mut k, &mut m, "munmap", &[area - 0x1000, 0x3000]), EINVAL, "a range that covers it");
    assert_eq!(sc(&mut k, &mut m, "mprotect", &[area, 0x1000, 7]), -13);
    assert_eq!(sc(&mut k, &mut m, "mmap", &[area, 0x1000, 3, 0x32, u64::MAX, 0]), -12, "MAP_FIXED onto it");
    assert_eq!(sc(&mut k, &mut m, "mremap", &[area, 0x1000, 0x2000, 1, 0, 0]), EINVAL);
    let a = sc(&mut k, &mut m, "mmap", &[0, 0x1000, 3, 0x22, u64::MAX, 0]) as u64;
    assert_eq!(sc(&mut k, &mut m, "mremap", &[a, 0x1000, 0x1000, 3, area]), -12, "MREMAP_FIXED onto it");
    // Nor move the code whose windows jump there.
    assert_eq!(sc(&mut k, &mut m, "mremap", &[0x40_1000, 0x1000, 0x1000, 1, 0]), EINVAL);
    let (mut plain, mut pm) = load(2, 0x40_0000, Jumps::Off);
    assert!(sc(&mut plain, &mut pm, "mremap", &[0x40_1000, 0x1000, 0x1000, 1, 0]) > 0, "without jump sites it moves");
    // The page below it is the program's.
    assert_eq!(sc(&mut k, &mut m, "mmap", &[area - 0x1000, 0x1000, 3, 0x32, u64::MAX, 0]) as u64, area - 0x1000);
    assert_eq!(peek_u64(&m, area), GATE);
}

#[test]
fn an_image_with_no_room_below_keeps_its_traps() {
    // The image's lowest page is the first user page: nothing fits below it.
    let (mut k, mut m) = load(2, USER_START, Jumps::On);
    let r = k.finish(&m, ExitStatus::Exited { code: 0 }).host_channels.jumps;
    assert_eq!((r.sites, r.unplaced, r.area), (0, 2, None));
    assert_eq!(peek(&k, &mut m, USER_START + 0x1000, CODE.len()), CODE);
}
