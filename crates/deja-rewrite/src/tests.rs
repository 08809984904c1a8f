//! The rewriter's rules, on hand-made code, generated code and a real binary.

use proptest::prelude::*;

use crate::*;

const BASE: u64 = 0x40_1000;

fn sites(p: &Plan) -> Vec<(u64, Channel, u8)> {
    p.sites.iter().map(|s| (s.addr - BASE, s.channel, s.len)).collect()
}

#[test]
fn every_channel_instruction_is_found_with_its_length_register_and_width() {
    let code = [
        0x0f, 0xa2, // cpuid
        0x48, 0x0f, 0xa2, // rex.w cpuid
        0x0f, 0x31, // rdtsc
        0x0f, 0x01, 0xf9, // rdtscp
        0xf3, 0x0f, 0xc7, 0xf9, // rdpid rcx
        0x66, 0x0f, 0xc7, 0xf0, // rdrand ax
        0x48, 0x0f, 0xc7, 0xf3, // rdrand rbx
        0x41, 0x0f, 0xc7, 0xf8, // rdseed r8d
        0x0f, 0x01, 0xd0, // xgetbv
        0xc3, // ret
    ];
    let p = plan_code(BASE, &code, &[]);
    assert!(p.refused.is_empty(), "{:?}", p.refused);
    assert_eq!(
        sites(&p),
        vec![
            (0, Channel::Cpuid, 2),
            (2, Channel::Cpuid, 3),
            (5, Channel::Rdtsc, 2),
            (7, Channel::Rdtscp, 3),
            (10, Channel::Rdpid, 4),
            (14, Channel::Rdrand, 4),
            (18, Channel::Rdrand, 4),
            (22, Channel::Rdseed, 4),
            (26, Channel::Xgetbv, 3),
        ]
    );
    let regs: Vec<(u8, u8)> = p.sites.iter().map(|s| (s.reg, s.width)).collect();
    assert_eq!(regs, vec![(0, 0), (0, 0), (0, 0), (0, 0), (1, 8), (0, 2), (3, 8), (8, 4), (0, 0)]);
    assert_eq!(p.sites[1].original, vec![0x48, 0x0f, 0xa2]);
    assert_eq!(p.sites[1].patch(), vec![0x0f, 0x0b, 0xcc]);
    assert_eq!(p.sites[0].patch(), TRAP.to_vec());
    assert_eq!(p.stats.decoded, 10);
}

#[test]
fn channel_bytes_inside_immediates_and_displacements_are_not_instructions() {
    let code = [
        0xb8, 0x0f, 0xa2, 0x00, 0x00, // mov eax, 0xa20f
        0x8b, 0x05, 0x0f, 0x31, 0x00, 0x00, // mov eax, [rip+0x310f]
        0x48, 0xb9, 0x0f, 0x01, 0xd0, 0x0f, 0xc7, 0xf8, 0x0f, 0x31, // mov rcx, imm64 of channel bytes
        0x0f, 0x31, // rdtsc: the one real site
        0xc3,
    ];
    let p = plan_code(BASE, &code, &[]);
    assert_eq!(sites(&p), vec![(21, Channel::Rdtsc, 2)]);
    assert!(p.refused.is_empty(), "both decodings agree the others are inside instructions: {:?}", p.refused);
}

#[test]
fn channel_bytes_in_data_inside_the_text_are_refused_and_named() {
    // jmp over; .byte 0f 31 (data); over: cpuid; ret
    let code = [0xeb, 0x02, 0x0f, 0x31, 0x0f, 0xa2, 0xc3];
    let p = plan_code(BASE, &code, &[]);
    assert_eq!(sites(&p), vec![(4, Channel::Cpuid, 2)]);
    assert_eq!(p.refused.len(), 1);
    let r = &p.refused[0];
    assert_eq!((r.addr - BASE, r.channel, r.doubt), (2, Channel::Rdtsc, Doubt::NotReached));
    assert_eq!(
        r.to_string(),
        format!(
            "rdtsc at {:#x}: no decoding path from the entry point, a symbol or an unwind entry reaches it",
            BASE + 2
        )
    );
}

#[test]
fn a_jump_into_the_middle_of_an_instruction_makes_it_ambiguous() {
    // mov eax, 0xa20f (bytes 0f a2 inside); jmp back into the mov's immediate, where the same
    // bytes are a cpuid.
    let code = [0xb8, 0x0f, 0xa2, 0x00, 0x00, 0xeb, 0xfa];
    let p = plan_code(BASE, &code, &[]);
    assert!(p.sites.is_empty(), "{:?}", p.sites);
    assert_eq!(p.refused.len(), 1, "{:?}", p.refused);
    assert_eq!((p.refused[0].addr - BASE, p.refused[0].doubt), (1, Doubt::Overlapping));
}

#[test]
fn descent_and_sweep_disagreeing_leaves_the_site_alone() {
    // A root (a symbol, say) at offset 1 starts a cpuid that the sweep from offset 0 places
    // inside a mov; descent from 0 is never taken (the only root is 1 and the region start).
    // Descent from 0 decodes the mov, descent from 1 overlaps it.
    let code = [0xb8, 0x0f, 0xa2, 0x00, 0x00, 0xc3];
    let p = plan_code(BASE, &code, &[BASE + 1]);
    assert!(p.sites.is_empty());
    assert!(p.refused.iter().all(|r| r.doubt != Doubt::NotReached), "{:?}", p.refused);
    assert_eq!(p.refused.len(), 1);
}

#[test]
fn branches_calls_and_fallthrough_are_followed() {
    // 0: je +4 -> 6; 2: call +3 -> 10 (rel32 short form not used: e8 rel32)
    let mut code = vec![0x74, 0x05]; // je 7
    code.extend([0xe8, 0x02, 0x00, 0x00, 0x00]); // call 9 (next 7 + 2)
    code.extend([0x0f, 0x31]); // 7: rdtsc (reached by je and by fallthrough after call)
    code.extend([0xc3]); // 9: ret... wait: call target is 9
    code.extend([0x0f, 0xa2, 0xc3]); // 10: cpuid (reached only by the fallthrough of 9? no: ret stops)
    let p = plan_code(BASE, &code, &[]);
    // 10 is reached by no path (ret at 9 stops), the sweep finds it.
    assert_eq!(sites(&p), vec![(7, Channel::Rdtsc, 2)]);
    assert_eq!(p.refused.len(), 1);
    assert_eq!(p.refused[0].doubt, Doubt::NotReached);
    let p = plan_code(BASE, &code, &[BASE + 10]);
    assert_eq!(sites(&p), vec![(7, Channel::Rdtsc, 2), (10, Channel::Cpuid, 2)], "a symbol reaches it");
}

/// A `switch` on RAX (0..=2) through a jump table, in the position-independent form (`lea`,
/// `movsxd`, `add`, `jmp reg`) or the absolute one (`jmp [T+rax*8]`); each case runs one channel
/// instruction. `guard` says whether a `cmp rax, 2; ja` bounds the index.
fn switch(pic: bool, guard: bool) -> Vec<u8> {
    let mut c = if guard { vec![0x48, 0x83, 0xf8, 0x02, 0x77, 0x00] } else { vec![0x90; 6] };
    let table = 48u64;
    if pic {
        c.extend([0x48, 0x8d, 0x0d]); // lea rcx, [rip+disp]
        c.extend(((table - 13) as u32).to_le_bytes());
        c.extend([0x48, 0x63, 0x04, 0x81]); // movsxd rax, dword [rcx+rax*4]
        c.extend([0x48, 0x01, 0xc8]); // add rax, rcx
        c.extend([0xff, 0xe0]); // jmp rax
    } else {
        c.extend([0xff, 0x24, 0xc5]); // jmp qword [rax*8+disp32]
        c.extend(((BASE + table) as u32).to_le_bytes());
        c.extend([0x90; 6]);
    }
    let default = c.len();
    if guard {
        c[5] = (default - 6) as u8; // ja default
    }
    c.push(0xc3);
    let cases = [c.len(), c.len() + 3, c.len() + 6];
    c.extend([0x0f, 0x31, 0xc3, 0x0f, 0xa2, 0xc3, 0x0f, 0x01, 0xd0, 0xc3]); // rdtsc; cpuid; xgetbv
    c.resize(table as usize, 0xcc);
    for case in cases {
        if pic {
            c.extend((case as i32 - table as i32).to_le_bytes());
        } else {
            c.extend((BASE + case as u64).to_le_bytes());
        }
    }
    c
}

#[test]
fn jump_tables_guarded_by_a_bound_are_followed_in_both_forms() {
    for pic in [true, false] {
        let p = plan_code(BASE, &switch(pic, true), &[]);
        let got: Vec<Channel> = p.sites.iter().map(|s| s.channel).collect();
        assert_eq!(got, vec![Channel::Rdtsc, Channel::Cpuid, Channel::Xgetbv], "pic {pic}: {:?}", p.refused);
        assert!(p.refused.is_empty(), "pic {pic}: {:?}", p.refused);
        // Without the bound the table is not read: the cases stay unreached, and refused.
        let p = plan_code(BASE, &switch(pic, false), &[]);
        assert!(p.sites.is_empty(), "pic {pic}: {:?}", p.sites);
        assert_eq!(p.refused.len(), 3, "pic {pic}");
        assert!(p.refused.iter().all(|r| r.doubt == Doubt::NotReached));
    }
}

#[test]
fn basic_blocks_start_at_entries_targets_and_fall_throughs_but_never_at_a_site() {
    // 0: cmp eax, 1; 3: je 9; 5: call 12; 10: nop; 11: ret; 12: rdtsc; 14: nop; 15: ret
    let code = [0x83, 0xf8, 0x01, 0x74, 0x04, 0xe8, 0x02, 0x00, 0x00, 0x00, 0x90, 0xc3, 0x0f, 0x31, 0x90, 0xc3];
    let p = plan_code(BASE, &code, &[]);
    let blocks: Vec<u64> = p.blocks.iter().map(|b| b.addr - BASE).collect();
    // 0 (the entry), 5 (after je), 9 is inside the call: the je's target is no instruction
    // start there and becomes an overlap; 10 (after the call); 12 is the call's target, but a
    // site (rdtsc), so not a block.
    assert!(blocks.contains(&0) && blocks.contains(&5) && blocks.contains(&10), "{blocks:?}");
    assert!(!blocks.contains(&12), "a site is no breakpoint: {blocks:?}");
    assert!(p.blocks.windows(2).all(|w| w[0] < w[1]), "in address order");
    for b in &p.blocks {
        assert!(!p.sites.iter().any(|s| (s.addr..s.addr + u64::from(s.len)).contains(&b.addr)));
    }
}

#[test]
fn plans_are_stable_and_their_digest_names_the_rewrite() {
    let code = [0x0f, 0xa2, 0x0f, 0x31, 0xc3];
    let a = plan_code(BASE, &code, &[]);
    assert_eq!(a.digest(), plan_code(BASE, &code, &[]).digest());
    assert_ne!(a.digest(), plan_code(BASE + 16, &code, &[]).digest(), "the addresses count");
    assert_ne!(a.digest(), plan_code(BASE, &[0x0f, 0xa2, 0xc3], &[]).digest());
    assert_eq!(plan_code(BASE, &[], &[]), Plan::default());
}

/// One generated instruction: its bytes, and which channel it really is.
fn instruction() -> impl Strategy<Value = (Vec<u8>, Option<Channel>)> {
    let noise = prop::sample::select(vec![
        vec![0x0f, 0xa2, 0x00, 0x00],
        vec![0x0f, 0x31, 0x0f, 0x31],
        vec![0x0f, 0x01, 0xf9, 0x90],
        vec![0x0f, 0xc7, 0xf0, 0x0f],
        vec![0xc7, 0xf8, 0x0f, 0x01],
    ]);
    prop_oneof![
        Just((vec![0x90], None)),
        Just((vec![0x0f, 0xa2], Some(Channel::Cpuid))),
        Just((vec![0x0f, 0x31], Some(Channel::Rdtsc))),
        Just((vec![0x48, 0x0f, 0xc7, 0xf0], Some(Channel::Rdrand))),
        Just((vec![0x0f, 0x01, 0xd0], Some(Channel::Xgetbv))),
        noise.clone().prop_map(|imm| {
            let mut v = vec![0xb8];
            v.extend(imm);
            (v, None)
        }),
        noise.clone().prop_map(|d| {
            let mut v = vec![0x8b, 0x05];
            v.extend(d);
            (v, None)
        }),
        (noise.clone(), noise).prop_map(|(a, b)| {
            let mut v = vec![0x48, 0xb8];
            v.extend(a);
            v.extend(b);
            (v, None)
        }),
        any::<u8>().prop_map(|d| (vec![0x74, d % 4], None)),
    ]
}

proptest! {
    /// Straight-line code with conditional branches over channel bytes in immediates and
    /// displacements: every site is a real channel instruction's start, and every real one that
    /// execution can reach is a site.
    #[test]
    fn only_real_instruction_starts_are_rewritten(insns in prop::collection::vec(instruction(), 1..60)) {
        let mut code = Vec::new();
        let mut starts = std::collections::BTreeSet::new();
        let mut real = std::collections::BTreeMap::new();
        for (bytes, ch) in &insns {
            starts.insert(code.len() as u64);
            if let Some(c) = ch {
                real.insert(code.len() as u64, *c);
            }
            code.extend(bytes);
        }
        // A je's target may land inside a later instruction: pad with nops so that such a path
        // is a real (if unusual) path of execution, and count what it decodes as real too.
        code.extend([0xc3]);
        let p = plan_code(BASE, &code, &[]);
        for s in &p.sites {
            let at = s.addr - BASE;
            prop_assert!(starts.contains(&at), "site at {at} is not an instruction start");
            prop_assert_eq!(real.get(&at), Some(&s.channel));
        }
        // Every real channel instruction is rewritten or reported, never silently left.
        for (at, c) in &real {
            let rewritten = p.sites.iter().any(|s| s.addr - BASE == *at);
            let refused = p.refused.iter().any(|r| r.addr - BASE == *at);
            prop_assert!(rewritten || refused, "{c} at {at} neither rewritten nor refused");
        }
    }

    /// Arbitrary bytes never panic the planner, and whatever it rewrites decodes as the channel
    /// it names.
    #[test]
    fn arbitrary_bytes_plan_without_panicking(code in prop::collection::vec(any::<u8>(), 0..400), root in 0u64..400) {
        let p = plan_code(BASE, &code, &[BASE + root]);
        for s in &p.sites {
            let off = (s.addr - BASE) as usize;
            prop_assert_eq!(&code[off..off + usize::from(s.len)], &s.original[..]);
        }
    }
}

#[test]
fn arbitrary_bytes_are_refused_as_elf() {
    assert!(plan_elf(b"not an elf").is_err());
    assert!(plan_elf(&[]).is_err());
}

#[test]
fn the_test_binary_itself_is_planned_with_every_site_agreed() {
    let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
    let p = plan_elf(&exe).unwrap();
    assert!(p.stats.code_bytes > 100_000, "{:?}", p.stats);
    assert!(p.stats.decoded_bytes * 4 > p.stats.code_bytes * 3, "descent reaches most of it: {:?}", p.stats);
    assert!(p.stats.roots > 1_000, "symbols and unwind entries are roots: {:?}", p.stats);
    // Descent does not follow jump tables, so switch arms and padding stay unreached.
    assert!(
        p.stats.decoded_bytes * 3 > p.stats.code_bytes * 2,
        "descent reaches most of a symbolized binary: {:?}",
        p.stats
    );
    assert!(p.refused.is_empty(), "a compiler's code gives no doubt: {:?}", p.refused);
    assert!(p.blocks.len() as u64 > p.stats.decoded / 10, "blocks: {} of {:?}", p.blocks.len(), p.stats);
    assert!(p.count(Channel::Cpuid) >= 1, "std's feature detection executes cpuid");
    for s in &p.sites {
        let off = s.offset as usize;
        assert_eq!(&exe[off..off + usize::from(s.len)], &s.original[..]);
    }
}

fn named(names: &[&str]) -> Vec<Function> {
    names
        .iter()
        .enumerate()
        .map(|(i, n)| Function { addr: i as u64 * 16, size: 16, name: n.to_string(), file: None })
        .collect()
}

#[test]
fn a_rust_programs_own_code_is_its_main_crate_and_the_crates_named_like_it() {
    let f = named(&[
        "main",
        "std::rt::lang_start_internal",
        "pagestore_buggy::main",
        "pagestore::Store::open",
        "<pagestore::Store as core::ops::drop::Drop>::drop",
        "<alloc::vec::Vec<pagestore::Page> as core::ops::drop::Drop>::drop",
        "deja_sdk::assert_always",
        "page::unrelated",
        "core::fmt::write",
        "memcpy",
    ]);
    assert_eq!(own_code(&f), ["pagestore::*", "<pagestore::*", "pagestore_buggy::*", "<pagestore_buggy::*"]);
    let one = named(&[
        "std::rt::lang_start_internal",
        "bank::main",
        "bank::transfer",
        "tokio::runtime::Runtime::block_on",
        "std::main",
    ]);
    assert_eq!(own_code(&one), ["bank::*", "<bank::*"], "no crate of the runtime or std, none named otherwise");
}

#[test]
fn a_go_programs_own_code_is_its_main_package_and_a_c_programs_is_everything() {
    assert_eq!(own_code(&named(&["runtime.main", "main.main", "main.(*server).serve", "net.Dial"])), ["main.*"]);
    assert!(own_code(&named(&["main", "store_put", "malloc"])).is_empty(), "no Rust or Go names: no scope");
    assert!(own_code(&[]).is_empty());
}

#[test]
fn a_c_programs_own_code_is_where_its_debug_information_puts_its_sources() {
    let mut f = named(&["main", "store_put", "log_append", "memcpy", "vsnprintf"]);
    f[0].file = Some("/home/me/store/src/main.c".into());
    f[1].file = Some("/home/me/store/src/main.c".into());
    f[2].file = Some("/home/me/store/lib/log.c".into());
    f[3].file = Some("/usr/include/x86_64-linux-gnu/bits/string_fortified.h".into());
    assert_eq!(own_code(&f), ["/home/me/store/lib/", "/home/me/store/src/"], "its directories, not the system's");
}
