//! Prints what a program can learn about the CPU it runs on without a syscall: CPUID (vendor,
//! signature, feature leaves, the APIC IDs of leaves 1, 0xb and 0x1f, cache and XSAVE leaves, the
//! hypervisor range, the brand string), the descriptor-table registers (`sgdt`, `sidt`, `sldt`,
//! `str`, `smsw`), XCR0 (`xgetbv`) and, what std's feature detection concludes from them.
//!
//! With the argument `core`, it also prints what `rdtscp` and `rdpid` return: the host core's
//! number (`TSC_AUX`) on hosts that run them natively.

use core::arch::x86_64::{CpuidResult, __cpuid_count};

fn cpuid(leaf: u32, sub: u32) -> CpuidResult {
    __cpuid_count(leaf, sub)
}

fn show(leaf: u32, sub: u32) {
    let r = cpuid(leaf, sub);
    println!("cpuid {leaf:#010x}.{sub}: {:08x} {:08x} {:08x} {:08x}", r.eax, r.ebx, r.ecx, r.edx);
}

#[repr(C, packed)]
#[derive(Default, Clone, Copy)]
struct TableRegister {
    limit: u16,
    base: u64,
}

fn main() {
    let max = cpuid(0, 0).eax;
    let vendor: Vec<u8> = [cpuid(0, 0).ebx, cpuid(0, 0).edx, cpuid(0, 0).ecx].iter().flat_map(|r| r.to_le_bytes()).collect();
    println!("vendor {} (max basic leaf {max:#x})", String::from_utf8_lossy(&vendor));
    for (leaf, sub) in [(1, 0), (4, 0), (4, 1), (4, 2), (4, 3), (6, 0), (7, 0), (7, 1), (0xb, 0), (0xb, 1), (0xd, 0), (0xd, 1), (0x1f, 0)] {
        show(leaf, sub);
    }
    println!("initial APIC ID {} x2APIC ID {}", cpuid(1, 0).ebx >> 24, cpuid(0xb, 0).edx);
    for leaf in [0x4000_0000, 0x8000_0000, 0x8000_0001, 0x8000_0007, 0x8000_0008] {
        show(leaf, 0);
    }
    let brand: Vec<u8> = (0x8000_0002u32..=0x8000_0004)
        .flat_map(|l| {
            let r = cpuid(l, 0);
            [r.eax, r.ebx, r.ecx, r.edx]
        })
        .flat_map(|r| r.to_le_bytes())
        .collect();
    println!("brand {:?}", String::from_utf8_lossy(&brand).trim_end_matches('\0'));

    let (mut gdt, mut idt) = (TableRegister::default(), TableRegister::default());
    let (ldt, tr, msw): (u16, u16, u64);
    // SAFETY: these read descriptor-table registers into locals; they are allowed in ring 3
    // unless UMIP is on, and then the kernel emulates or faults them (a fault ends the program).
    unsafe {
        core::arch::asm!("sgdt [{}]", in(reg) &mut gdt, options(nostack));
        core::arch::asm!("sidt [{}]", in(reg) &mut idt, options(nostack));
        core::arch::asm!("sldt {0:x}", out(reg) ldt, options(nostack, nomem));
        core::arch::asm!("str {0:x}", out(reg) tr, options(nostack, nomem));
        core::arch::asm!("smsw {}", out(reg) msw, options(nostack, nomem));
    }
    let (gl, gb, il, ib) = (gdt.limit, gdt.base, idt.limit, idt.base);
    println!("sgdt {gl:#x} {gb:#x} sidt {il:#x} {ib:#x} sldt {ldt:#x} str {tr:#x} smsw {msw:#x}");
    let (lo, hi): (u32, u32);
    // SAFETY: xgetbv with ECX = 0 reads XCR0; CPUID.1:ECX.OSXSAVE says it is enabled.
    unsafe { core::arch::asm!("xgetbv", in("ecx") 0, out("eax") lo, out("edx") hi, options(nostack, nomem)) };
    println!("xcr0 {:#x}", (hi as u64) << 32 | lo as u64);
    println!(
        "std detects: sse4.2 {} avx {} avx2 {} avx512f {} rdrand {} rdseed {} bmi2 {}",
        is_x86_feature_detected!("sse4.2"),
        is_x86_feature_detected!("avx"),
        is_x86_feature_detected!("avx2"),
        is_x86_feature_detected!("avx512f"),
        is_x86_feature_detected!("rdrand"),
        is_x86_feature_detected!("rdseed"),
        is_x86_feature_detected!("bmi2"),
    );
    if std::env::args().nth(1).as_deref() == Some("core") {
        let (aux, pid): (u32, u64);
        // SAFETY: rdtscp and rdpid only read TSC_AUX (and the TSC); where the CPU lacks them they
        // raise #UD and the program ends with SIGILL.
        unsafe {
            core::arch::asm!("rdtscp", out("eax") _, out("edx") _, out("ecx") aux, options(nostack, nomem));
            core::arch::asm!("rdpid {}", out(reg) pid, options(nostack, nomem));
        }
        println!("rdtscp TSC_AUX {aux} rdpid {pid}");
    }
}
