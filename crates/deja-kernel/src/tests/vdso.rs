//! deja's vDSO: the image Linux's loaders expect, and a clock that stays a pure function of
//! the run when the program reads it without an exit.

use super::*;
use crate::time::vdso::{self, image, Vvar, CALL_COST_NS, VDSO_ADDR, VVAR_ADDR};
use object::read::elf::{ElfFile64, FileHeader as _};
use object::{Object, ObjectSymbol};

/// The vvar as the kernel last published it.
fn vvar(m: &FakeMemory) -> Vvar {
    let w = |i: u64| peek_u64(m, VVAR_ADDR + i * 8);
    Vvar { calls: w(0), limit: w(1), base: w(2), realtime: w(3), cost: w(4) }
}

/// What the vDSO's code does on `n` calls: it counts them in the vvar.
fn read_clock(m: &mut FakeMemory, n: u64) {
    m.write(VVAR_ADDR + vdso::VV_CALLS, &n.to_le_bytes()).unwrap();
}

#[test]
fn the_image_exports_linux_symbols_under_linux_2_6_through_its_hash_table() {
    let img = image();
    let file = ElfFile64::<object::Endianness>::parse(&img.bytes[..]).expect("an ELF file");
    assert_eq!(file.kind(), object::ObjectKind::Dynamic);
    let endian = file.endian();
    let data = &img.bytes[..];
    let sections = file.elf_header().sections(endian, data).unwrap();
    let symbols = sections.symbols(endian, data, object::elf::SHT_DYNSYM).unwrap();
    let (hash, _) = sections.hash(endian, data).unwrap().expect("a .hash section");
    let versions = sections.versions(endian, data).unwrap().expect("version definitions");
    for f in &img.functions {
        let plain = f.name.trim_start_matches("__vdso_");
        for name in [f.name, plain] {
            let h = object::elf::hash(name.as_bytes());
            let (index, sym) = hash
                .find(endian, name.as_bytes(), h, None, &symbols, &versions)
                .unwrap_or_else(|| panic!("{name} is found through .hash"));
            let v = versions.version(versions.version_index(endian, index).index()).unwrap().expect("a version");
            assert_eq!((v.name(), v.hash()), (&b"LINUX_2.6"[..], object::elf::hash(b"LINUX_2.6")), "{name}");
            assert_eq!(object::read::elf::Sym::st_value(sym, endian), f.offset, "{name}");
        }
        let s = file.dynamic_symbols().find(|s| s.name() == Ok(f.name)).unwrap();
        assert!(s.is_global() && s.kind() == object::SymbolKind::Text && s.size() == f.len);
    }
    assert!(img.pages() <= 2, "{} bytes", img.bytes.len());
    // Every byte of the code decodes as one valid instruction.
    let text = file.section_by_name(".text").unwrap();
    let code = object::ObjectSection::data(&text).unwrap();
    let mut d = iced_x86::Decoder::with_ip(64, code, VDSO_ADDR + object::ObjectSection::address(&text), 0);
    let mut syscalls = 0;
    while d.can_decode() {
        let i = d.decode();
        assert!(!i.is_invalid(), "invalid instruction at {:#x}", i.ip());
        syscalls += usize::from(i.mnemonic() == iced_x86::Mnemonic::Syscall);
    }
    assert_eq!(syscalls, 5, "every function falls back to its syscall");
    // The rewriter plans it like program code and finds nothing to rewrite.
    assert!(crate::host::hostchan::plan_file(&img.bytes).sites.is_empty());
}

#[test]
fn a_program_gets_the_vdso_and_the_vvar_and_can_go_without() {
    let (k, _, mut m) = boot();
    let maps = k.proc_maps();
    assert!(maps
        .lines()
        .any(|l| l.starts_with(&format!("{VVAR_ADDR:08x}-{VDSO_ADDR:08x} rw-p")) && l.ends_with("[vvar]")));
    assert!(maps
        .lines()
        .any(|l| l.starts_with(&format!("{VDSO_ADDR:08x}-")) && l.contains(" r-xp ") && l.ends_with("[vdso]")));
    let v = vvar(&m);
    assert_eq!((v.calls, v.limit, v.base, v.cost), (0, u64::MAX, 0, CALL_COST_NS), "one thread: no limit");
    assert_eq!(v.realtime, crate::time::clock::REALTIME_EPOCH_S * crate::time::clock::NS_PER_S);
    assert_eq!(peek(&k, &mut m, VDSO_ADDR, image().bytes.len()), image().bytes);
    let mut spec = spec_with(exec_image(), 42);
    spec.vdso = crate::time::vdso::VdsoMode::Off;
    let (mut k, e, m) = boot_spec(spec);
    assert!(!k.proc_maps().contains("[vdso]") && !k.proc_maps().contains("[vvar]"));
    let mut a = e.rsp + 8 * 4;
    while peek_u64(&m, a) != 0 {
        a += 8;
    }
    a += 8;
    while peek_u64(&m, a) != 0 {
        a += 8;
    }
    a += 8;
    while peek_u64(&m, a) != crate::abi::auxv::AT_NULL {
        assert_ne!(peek_u64(&m, a), crate::abi::auxv::AT_SYSINFO_EHDR);
        a += 16;
    }
    assert_eq!(k.finish(&m, ExitStatus::Exited { code: 0 }).vdso_calls, None);
}

#[test]
fn calls_without_an_exit_advance_the_clock_at_the_next_entry_as_syscalls_would() {
    let (mut k, _, mut m) = boot();
    let t0 = k.virtual_time_ns();
    read_clock(&mut m, 1000);
    sc(&mut k, &mut m, "getpid", &[]);
    assert_eq!(
        k.virtual_time_ns(),
        t0 + 1001 * crate::time::clock::SYSCALL_COST_NS,
        "each call costs what a syscall costs"
    );
    let v = vvar(&m);
    assert_eq!((v.calls, v.base), (0, k.virtual_time_ns()), "published again for the next stretch");
    // Call n shows base + n × cost: what the n-th clock_gettime syscall returns.
    let tp = scratch(&mut k, &mut m, 16);
    let base = vvar(&m).base;
    sc(&mut k, &mut m, "clock_gettime", &[1, tp]);
    let ns = peek_u64(&m, tp) * 1_000_000_000 + peek_u64(&m, tp + 8);
    assert_eq!(ns, base + CALL_COST_NS);
    assert_eq!(k.finish(&m, ExitStatus::Exited { code: 0 }).vdso_calls, Some(1000));
}

#[test]
fn the_count_of_calls_enters_the_trace_digest() {
    let digest = |calls: u64| {
        let (mut k, _, mut m) = boot();
        read_clock(&mut m, calls);
        sc(&mut k, &mut m, "getpid", &[]);
        k.finish(&m, ExitStatus::Exited { code: 0 }).trace_digest
    };
    assert_eq!(digest(7), digest(7));
    assert_ne!(digest(7), digest(8));
}

#[test]
fn a_counter_the_program_forged_is_bounded_by_the_published_limit() {
    let (mut k, _, mut m) = boot();
    // A cluster's yield point 1 ms ahead: calls may show anything before it, nothing at it.
    let base = k.virtual_time_ns();
    k.set_yield_at(Some(base + 1_000_000));
    k.before_run(&mut m);
    let v = vvar(&m);
    assert_eq!(v.limit, base + 1_000_000 - 1);
    read_clock(&mut m, u64::MAX);
    sc(&mut k, &mut m, "getpid", &[]);
    let allowed = (1_000_000 - 1) / CALL_COST_NS;
    assert_eq!(k.virtual_time_ns(), base + allowed * CALL_COST_NS + crate::time::clock::SYSCALL_COST_NS);
    assert!(k.yield_due(), "the syscall that followed reached the yield point, as the calls' syscalls would have");
}

#[test]
fn no_call_goes_without_an_exit_while_another_thread_could_run_nor_past_a_deadline() {
    let (mut k, _, mut m) = boot();
    // A second thread (clone with CLONE_VM | CLONE_THREAD and friends, on its own stack).
    let stack = scratch(&mut k, &mut m, 0x4000);
    let flags = 0x100 | 0x200 | 0x400 | 0x800 | 0x10000 | 0x40000;
    let tid = sc(&mut k, &mut m, "clone", &[flags, stack + 0x4000, 0, 0, 0]);
    assert!(tid > 0);
    let v = vvar(&m);
    assert_eq!(v.limit, v.base, "another thread could run: every call is a syscall, a point to switch");
    // The other thread sleeps for 1 ms: its deadline bounds the stretch then.
    let ts = scratch(&mut k, &mut m, 16);
    poke(&k, &mut m, ts + 8, &1_000_000u64.to_le_bytes());
    let mut guard = 0;
    while k.current_tid() != tid as u64 && guard < 8 {
        sc(&mut k, &mut m, "sched_yield", &[]);
        guard += 1;
    }
    assert_eq!(k.current_tid(), tid as u64);
    let asleep = k.virtual_time_ns();
    sc(&mut k, &mut m, "nanosleep", &[ts, 0]);
    assert_ne!(k.current_tid(), tid as u64);
    let deadline = asleep + crate::time::clock::SYSCALL_COST_NS + 1_000_000;
    assert_eq!(vvar(&m).limit, deadline - 1, "just before the sleeper wakes");
}

#[test]
fn the_kernel_never_writes_a_vvar_the_program_replaced() {
    let (mut k, _, mut m) = boot();
    // The program maps its own page where the vvar was.
    assert_eq!(sc(&mut k, &mut m, "mmap", &[VVAR_ADDR, 0x1000, 3, 0x32, u64::MAX, 0]), VVAR_ADDR as i64);
    poke(&k, &mut m, VVAR_ADDR, &[0xaa; 40]);
    let t0 = k.virtual_time_ns();
    sc(&mut k, &mut m, "getpid", &[]);
    assert_eq!(peek(&k, &mut m, VVAR_ADDR, 40), vec![0xaa; 40], "its bytes are its own");
    assert_eq!(k.virtual_time_ns(), t0 + crate::time::clock::SYSCALL_COST_NS, "and are no count of calls");
}
