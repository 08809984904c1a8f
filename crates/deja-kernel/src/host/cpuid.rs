//! The fixed CPU every deja guest sees: one CPUID table, and the rule for leaves it does not list.
//!
//! The table does not start from the host's answers: it is the same on every host, so a program
//! that tunes itself by CPUID (glibc picks `memcpy` variants and cache thresholds this way, Rust's
//! `is_x86_feature_detected!` and crates such as `blake3` and `memchr` pick code paths) takes the
//! same paths everywhere. It describes one 64-bit Intel-compatible core at the x86-64-v3 level
//! (SSE4.2, AVX, AVX2, BMI1/2, FMA, MOVBE) with APIC ID 0, without RDRAND, RDSEED, RDTSCP, RDPID,
//! AVX-512, hypervisor leaves, TSC-deadline, invariant TSC or x2APIC.
//!
//! The shell gives this table to KVM (`KVM_SET_CPUID2`) and, where the host offers CPUID
//! faulting, makes every ring-3 `cpuid` trap so that [`crate::Kernel::exception`] answers it from
//! [`answer`] itself: then no host can rewrite a bit or leak which core the vCPU runs on. An
//! emulated `cpuid` is neither traced nor charged virtual time, so a run is the same whether the
//! host's KVM or the core answered.
//!
//! A program shown more than one CPU (`--cpus`) gets the same table with its topology leaves
//! counting them ([`table_for`]).
//!
//! A leaf the table does not list answers all zeros, and so does an unlisted subleaf, except for
//! the topology leaf `0xb`, whose subleaves past the last level report an invalid level with the
//! subleaf number in ECX\[7:0\], as hardware does.

use crate::prelude::*;
use deja_rewrite::Channel;

/// One CPUID answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Leaf {
    /// EAX input.
    pub function: u32,
    /// ECX input (subleaf), meaningful when `indexed`.
    pub index: u32,
    /// True if the answer depends on ECX.
    pub indexed: bool,
    /// Output registers.
    pub eax: u32,
    /// Output registers.
    pub ebx: u32,
    /// Output registers.
    pub ecx: u32,
    /// Output registers.
    pub edx: u32,
}

const fn leaf(function: u32, eax: u32, ebx: u32, ecx: u32, edx: u32) -> Leaf {
    Leaf { function, index: 0, indexed: false, eax, ebx, ecx, edx }
}

const fn sub(function: u32, index: u32, eax: u32, ebx: u32, ecx: u32, edx: u32) -> Leaf {
    Leaf { function, index, indexed: true, eax, ebx, ecx, edx }
}

/// Leaf 1 ECX: SSE3, PCLMULQDQ, SSSE3, FMA, CX16, SSE4.1, SSE4.2, MOVBE, POPCNT, AES, XSAVE,
/// OSXSAVE, AVX, F16C. Not: x2APIC (21), TSC-deadline (24), RDRAND (30), hypervisor (31).
pub const LEAF1_ECX: u32 = (1 << 0)
    | (1 << 1)
    | (1 << 9)
    | (1 << 12)
    | (1 << 13)
    | (1 << 19)
    | (1 << 20)
    | (1 << 22)
    | (1 << 23)
    | (1 << 25)
    | (1 << 26)
    | (1 << 27)
    | (1 << 28)
    | (1 << 29);
/// Leaf 1 EDX: FPU, DE, PSE, TSC, MSR, PAE, MCE, CX8, SEP, MTRR, PGE, MCA, CMOV, PAT, PSE36,
/// CLFSH, MMX, FXSR, SSE, SSE2.
pub const LEAF1_EDX: u32 = (1 << 0)
    | (1 << 2)
    | (1 << 3)
    | (1 << 4)
    | (1 << 5)
    | (1 << 6)
    | (1 << 7)
    | (1 << 8)
    | (1 << 11)
    | (1 << 12)
    | (1 << 13)
    | (1 << 14)
    | (1 << 15)
    | (1 << 16)
    | (1 << 17)
    | (1 << 19)
    | (1 << 23)
    | (1 << 24)
    | (1 << 25)
    | (1 << 26);
/// Leaf 7 EBX: BMI1, AVX2, BMI2, ERMS, ADX. Not: RDSEED (18).
pub const LEAF7_EBX: u32 = (1 << 3) | (1 << 5) | (1 << 8) | (1 << 9) | (1 << 19);
/// Leaf 0x8000_0001 ECX: LAHF/SAHF, LZCNT, PREFETCHW.
pub const EXT1_ECX: u32 = (1 << 0) | (1 << 5) | (1 << 8);
/// Leaf 0x8000_0001 EDX: SYSCALL, NX, LM. Not: RDTSCP (27), 1 GiB pages.
pub const EXT1_EDX: u32 = (1 << 11) | (1 << 20) | (1 << 29);
/// XCR0 of every guest: x87, SSE and AVX state.
pub const XCR0: u64 = 0x7;
/// Family 6, model 0x55, stepping 4.
pub const SIGNATURE: u32 = 0x0005_0654;

fn brand() -> [u32; 12] {
    let mut bytes = [0u8; 48];
    let text = b"deja virtual CPU @ 3.00GHz";
    bytes[..text.len()].copy_from_slice(text);
    let mut words = [0u32; 12];
    for (i, w) in words.iter_mut().enumerate() {
        *w = u32::from_le_bytes([bytes[4 * i], bytes[4 * i + 1], bytes[4 * i + 2], bytes[4 * i + 3]]);
    }
    words
}

/// The table of a program shown `cpus` CPUs ([`crate::ProgramSpec::cpus`]): [`table`] with
/// its topology saying `cpus` cores of one thread each in one package (leaf 1's count of
/// logical processors and HTT, leaf 4's cores per package and the threads that share the L3,
/// leaf `0xb`'s core level), so that CPUID agrees with the affinity mask and `/proc/cpuinfo`.
/// Every CPU has APIC ID 0 as far as CPUID tells: threads take turns on one.
pub fn table_for(cpus: u32) -> Vec<Leaf> {
    let mut t = table();
    if cpus <= 1 {
        return t;
    }
    let pow2 = cpus.next_power_of_two();
    let shift = pow2.trailing_zeros();
    for l in &mut t {
        match (l.function, l.index) {
            (1, _) => {
                l.ebx = (l.ebx & !0x00ff_0000) | (pow2.min(255) << 16);
                l.edx |= 1 << 28;
            }
            (4, i @ 0..=3) => {
                let sharing = if i == 3 { pow2 - 1 } else { 0 };
                l.eax = (l.eax & 0x3fff) | ((sharing.min(0xfff)) << 14) | ((pow2 - 1).min(63) << 26);
            }
            (0xb, 1) => {
                l.eax = shift;
                l.ebx = cpus;
            }
            _ => {}
        }
    }
    t
}

/// What `cpuid` answers to a program shown `cpus` CPUs (see [`table_for`] and [`answer`]).
pub fn answer_for(cpus: u32, function: u32, index: u32) -> [u32; 4] {
    if cpus <= 1 {
        return answer(function, index);
    }
    match table_for(cpus).into_iter().find(|l| l.function == function && (!l.indexed || l.index == index)) {
        Some(l) => [l.eax, l.ebx, l.ecx, l.edx],
        None => answer(function, index),
    }
}

/// The size of the XSAVE area leaf 0xd gives (`EBX`, `ECX`): the standard-format size of every
/// component an x86-64 host enables today, through AMX's tile data (bit 18, ending at 11,008
/// bytes), although deja's XCR0 is x87 | SSE | AVX (832 bytes). Where the host does not enforce
/// the XCR0 deja sets (nested PVM, whose guests run with the host's, 0x602e7 on the Intel
/// hosts), `xsave` writes the host's components; a program that sizes its save area by this
/// leaf (glibc's loader, saving registers around lazy binding) must not be overrun by it. The
/// number is the same on every host.
pub const XSAVE_AREA: u32 = 11_008;

/// The table, in the order it is installed.
pub fn table() -> Vec<Leaf> {
    let b = brand();
    vec![
        // Max basic leaf 0xd, "GenuineIntel".
        leaf(0, 0xd, 0x756e_6547, 0x6c65_746e, 0x4965_6e69),
        // Signature; CLFLUSH line 8 qwords, one logical processor, APIC id 0.
        leaf(1, SIGNATURE, 0x0001_0800, LEAF1_ECX, LEAF1_EDX),
        // Cache descriptors: 0xff = "see leaf 4".
        leaf(2, 0x00fe_ff01, 0, 0, 0),
        // Deterministic cache parameters: L1d 32K 8-way, L1i 32K 8-way, L2 1M 16-way,
        // L3 32M 16-way, 64-byte lines, shared by one thread.
        sub(4, 0, 0x121, 0x01c0_003f, 63, 0),
        sub(4, 1, 0x122, 0x01c0_003f, 63, 0),
        sub(4, 2, 0x143, 0x03c0_003f, 1023, 0),
        sub(4, 3, 0x163, 0x03c0_003f, 32767, 0),
        sub(4, 4, 0, 0, 0, 0),
        leaf(5, 0, 0, 0, 0),
        leaf(6, 0, 0, 0, 0),
        sub(7, 0, 0, LEAF7_EBX, 0, 0),
        leaf(0xa, 0, 0, 0, 0),
        // Topology: one thread, one core.
        sub(0xb, 0, 0, 1, 0x100, 0),
        sub(0xb, 1, 0, 1, 0x201, 0),
        sub(0xb, 2, 0, 0, 2, 0),
        // XSAVE: x87 + SSE + AVX; no XSAVEOPT/XSAVEC/XSAVES; the area's size is XSAVE_AREA.
        sub(0xd, 0, XCR0 as u32, XSAVE_AREA, XSAVE_AREA, 0),
        sub(0xd, 1, 0, 0, 0, 0),
        sub(0xd, 2, 256, 576, 0, 0),
        leaf(0x8000_0000, 0x8000_0008, 0, 0, 0),
        leaf(0x8000_0001, 0, 0, EXT1_ECX, EXT1_EDX),
        leaf(0x8000_0002, b[0], b[1], b[2], b[3]),
        leaf(0x8000_0003, b[4], b[5], b[6], b[7]),
        leaf(0x8000_0004, b[8], b[9], b[10], b[11]),
        leaf(0x8000_0006, 0, 0, 0x0400_6040, 0),
        // No invariant TSC.
        leaf(0x8000_0007, 0, 0, 0, 0),
        // 39 physical, 48 virtual address bits.
        leaf(0x8000_0008, 0x3027, 0, 0, 0),
    ]
}

/// The answer the table gives for `(function, index)`, as the guest should see it.
pub fn lookup(function: u32, index: u32) -> Option<Leaf> {
    table().into_iter().find(|l| l.function == function && (!l.indexed || l.index == index))
}

/// What `cpuid` with EAX = `function` and ECX = `index` returns to a deja guest: EAX, EBX, ECX,
/// EDX. Listed leaves come from [`table`]; everything else is zero (see the module docs).
pub fn answer(function: u32, index: u32) -> [u32; 4] {
    match lookup(function, index) {
        Some(l) => [l.eax, l.ebx, l.ecx, l.edx],
        None if function == 0xb => [0, 0, index & 0xff, 0],
        None => [0; 4],
    }
}

/// Decodes the instruction at the start of `code` (up to 15 bytes, as many as could be read) if
/// it is one the host traps under CPUID faulting or CR4.TSD (`cpuid`, `rdtsc`, `rdtscp`):
/// returns it and its length, legacy and REX prefixes included.
pub fn decode(code: &[u8]) -> Option<(Channel, u64)> {
    let prefixes = code
        .iter()
        .take(14)
        .take_while(|b| matches!(b, 0x26 | 0x2e | 0x36 | 0x3e | 0x64 | 0x65 | 0x66 | 0x67 | 0xf2 | 0xf3 | 0x40..=0x4f))
        .count();
    let rest = &code[prefixes..];
    let (insn, len) = match rest {
        [0x0f, 0xa2, ..] => (Channel::Cpuid, 2),
        [0x0f, 0x31, ..] => (Channel::Rdtsc, 2),
        [0x0f, 0x01, 0xf9, ..] => (Channel::Rdtscp, 3),
        _ => return None,
    };
    Some((insn, (prefixes + len) as u64))
}

/// Linux's `/proc/cpuinfo` names of the feature bits of leaf 1 EDX, leaf 1 ECX, leaf 7 EBX, leaf
/// 0x8000_0001 EDX and ECX (in Linux's order), for the bits the table may set.
const FLAG_NAMES: [(u32, u32, u32, &str); 44] = [
    (1, 3, 0, "fpu"),
    (1, 3, 2, "de"),
    (1, 3, 3, "pse"),
    (1, 3, 4, "tsc"),
    (1, 3, 5, "msr"),
    (1, 3, 6, "pae"),
    (1, 3, 7, "mce"),
    (1, 3, 8, "cx8"),
    (1, 3, 11, "sep"),
    (1, 3, 12, "mtrr"),
    (1, 3, 13, "pge"),
    (1, 3, 14, "mca"),
    (1, 3, 15, "cmov"),
    (1, 3, 16, "pat"),
    (1, 3, 17, "pse36"),
    (1, 3, 19, "clflush"),
    (1, 3, 23, "mmx"),
    (1, 3, 24, "fxsr"),
    (1, 3, 25, "sse"),
    (1, 3, 26, "sse2"),
    (0x8000_0001, 3, 11, "syscall"),
    (0x8000_0001, 3, 20, "nx"),
    (0x8000_0001, 3, 27, "rdtscp"),
    (0x8000_0001, 3, 29, "lm"),
    (1, 2, 0, "pni"),
    (1, 2, 1, "pclmulqdq"),
    (1, 2, 9, "ssse3"),
    (1, 2, 12, "fma"),
    (1, 2, 13, "cx16"),
    (1, 2, 19, "sse4_1"),
    (1, 2, 20, "sse4_2"),
    (1, 2, 22, "movbe"),
    (1, 2, 23, "popcnt"),
    (1, 2, 25, "aes"),
    (1, 2, 26, "xsave"),
    (1, 2, 28, "avx"),
    (1, 2, 29, "f16c"),
    (1, 2, 30, "rdrand"),
    (0x8000_0001, 2, 0, "lahf_lm"),
    (0x8000_0001, 2, 5, "abm"),
    (0x8000_0001, 2, 8, "3dnowprefetch"),
    (7, 1, 3, "bmi1"),
    (7, 1, 5, "avx2"),
    (7, 1, 8, "bmi2"),
];

/// `/proc/cpuinfo` for `cpus` CPUs of the table's kind, in Linux's layout: one block per
/// CPU, each a core of its own in one package (APIC ID = CPU number), with the flags the table
/// sets (and `erms` and `adx` of leaf 7).
pub fn proc_cpuinfo(cpus: u32) -> String {
    let sig = SIGNATURE;
    let family = ((sig >> 8) & 0xf) + if (sig >> 8) & 0xf == 0xf { (sig >> 20) & 0xff } else { 0 };
    let model = ((sig >> 4) & 0xf) | (((sig >> 16) & 0xf) << 4);
    let name: Vec<u8> = (0x8000_0002..=0x8000_0004u32)
        .flat_map(|l| answer(l, 0).into_iter().flat_map(u32::to_le_bytes))
        .take_while(|&b| b != 0)
        .collect();
    let name = String::from_utf8_lossy(&name).trim().to_string();
    let mut flags: Vec<&str> = FLAG_NAMES
        .iter()
        .filter(|&&(l, r, bit, _)| answer(l, 0)[r as usize] >> bit & 1 == 1)
        .map(|&(_, _, _, n)| n)
        .collect();
    for (bit, n) in [(9, "erms"), (19, "adx")] {
        if answer(7, 0)[1] >> bit & 1 == 1 {
            flags.push(n);
        }
    }
    let flags = flags.join(" ");
    let mut out = String::new();
    for cpu in 0..cpus {
        out.push_str(&format!(
            "processor\t: {cpu}\nvendor_id\t: GenuineIntel\ncpu family\t: {family}\nmodel\t\t: {model}\n\
             model name\t: {name}\nstepping\t: {}\ncpu MHz\t\t: 3000.000\ncache size\t: 32768 KB\n\
             physical id\t: 0\nsiblings\t: {cpus}\ncore id\t\t: {cpu}\ncpu cores\t: {cpus}\napicid\t\t: {cpu}\n\
             initial apicid\t: {cpu}\nfpu\t\t: yes\nfpu_exception\t: yes\ncpuid level\t: {}\nwp\t\t: yes\n\
             flags\t\t: {flags}\nbogomips\t: 6000.00\nclflush size\t: 64\ncache_alignment\t: 64\n\
             address sizes\t: 39 bits physical, 48 bits virtual\npower management:\n\n",
            sig & 0xf,
            answer(0, 0)[0],
        ));
    }
    out
}

/// A CPU list as `/sys/devices/system/cpu/online` writes it: `0` or `0-N`.
pub fn cpu_list(cpus: u32) -> String {
    if cpus <= 1 {
        "0\n".to_string()
    } else {
        format!("0-{}\n", cpus - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_topology_counts_the_cpus_a_program_is_shown() {
        assert_eq!(table_for(1), table());
        let [_, b, _, d] = answer_for(6, 1, 0);
        assert_eq!((b >> 16) & 0xff, 8, "logical processors, a power of two");
        assert_eq!(d >> 28 & 1, 1, "HTT: the count is valid");
        assert_eq!(b >> 24, 0, "APIC ID 0");
        let [a, ..] = answer_for(6, 4, 0);
        assert_eq!((a >> 26) + 1, 8, "cores per package");
        assert_eq!((a >> 14) & 0xfff, 0, "the L1 is a core's own");
        assert_eq!((answer_for(6, 4, 3)[0] >> 14) & 0xfff, 7, "the L3 is shared");
        assert_eq!(answer_for(6, 0xb, 1)[..2], [3, 6], "the core level: shift and count");
        assert_eq!(answer_for(6, 0xb, 0)[1], 1, "one thread per core");
        assert_eq!(answer_for(6, 7, 0), answer(7, 0), "features do not change");
        assert_eq!(answer_for(6, 0x4000_0000, 0), [0; 4]);
    }

    #[test]
    fn cpuinfo_names_each_cpu_and_the_tables_features() {
        let one = proc_cpuinfo(1);
        assert_eq!(one.matches("processor\t: ").count(), 1);
        assert!(one.contains("model name\t: deja virtual CPU @ 3.00GHz\n"), "{one}");
        assert!(one.contains("cpu family\t: 6\nmodel\t\t: 85\n"), "{one}");
        let flags = one.lines().find(|l| l.starts_with("flags")).unwrap();
        for f in [" sse2 ", " avx2", " bmi2", " lm ", " popcnt "] {
            assert!(flags.contains(f), "{f} in {flags}");
        }
        for f in ["rdrand", "rdtscp", "hypervisor", "avx512"] {
            assert!(!flags.contains(f), "{f} is not in the table: {flags}");
        }
        let four = proc_cpuinfo(4);
        assert_eq!(four.matches("processor\t: ").count(), 4);
        assert!(four.contains("processor\t: 3\n") && four.contains("siblings\t: 4\n"));
        assert_eq!((cpu_list(1), cpu_list(4)), ("0\n".to_string(), "0-3\n".to_string()));
    }

    #[test]
    fn hazards_are_absent() {
        assert_eq!(lookup(1, 0).unwrap().ecx & (1 << 30), 0, "RDRAND");
        assert_eq!(lookup(1, 0).unwrap().ecx & (1 << 31), 0, "hypervisor bit");
        assert_eq!(lookup(1, 0).unwrap().ecx & (1 << 24), 0, "TSC deadline");
        assert_eq!(lookup(7, 0).unwrap().ebx & (1 << 18), 0, "RDSEED");
        assert_eq!(lookup(0x8000_0001, 0).unwrap().edx & (1 << 27), 0, "RDTSCP");
        assert_eq!(lookup(0x8000_0007, 0).unwrap().edx & (1 << 8), 0, "invariant TSC");
        assert!(lookup(0x4000_0000, 0).is_none(), "hypervisor leaves");
    }

    #[test]
    fn vendor_and_brand_are_fixed() {
        let l0 = lookup(0, 0).unwrap();
        let mut v = Vec::new();
        for r in [l0.ebx, l0.edx, l0.ecx] {
            v.extend_from_slice(&r.to_le_bytes());
        }
        assert_eq!(&v, b"GenuineIntel");
        let l = lookup(0x8000_0002, 0).unwrap();
        assert_eq!(&l.eax.to_le_bytes(), b"deja");
    }

    #[test]
    fn unlisted_leaves_are_zero_and_identity_is_fixed() {
        assert_eq!(answer(0x4000_0000, 0), [0; 4], "no hypervisor leaf");
        assert_eq!(answer(0x1f, 0), [0; 4], "leaves past the maximum basic leaf");
        assert_eq!(answer(0x8000_0009, 0), [0; 4], "leaves past the maximum extended leaf");
        assert_eq!(answer(4, 9), [0; 4], "a cache subleaf past the last cache");
        assert_eq!(answer(0xb, 7), [0, 0, 7, 0], "topology past the last level");
        assert_eq!(answer(1, 0)[1] >> 24, 0, "initial APIC ID");
        assert_eq!(answer(1, 5), answer(1, 0), "leaf 1 ignores ECX");
        for level in 0..4 {
            assert_eq!(answer(0xb, level)[3], 0, "x2APIC ID");
        }
    }

    #[test]
    fn decode_knows_the_emulated_instructions_and_their_prefixes() {
        assert_eq!(decode(&[0x0f, 0xa2]), Some((Channel::Cpuid, 2)));
        assert_eq!(decode(&[0x48, 0x0f, 0xa2, 0x90]), Some((Channel::Cpuid, 3)));
        assert_eq!(decode(&[0x0f, 0x31]), Some((Channel::Rdtsc, 2)));
        assert_eq!(decode(&[0x0f, 0x01, 0xf9]), Some((Channel::Rdtscp, 3)));
        assert_eq!(decode(&[0x0f, 0x01]), None, "a truncated rdtscp");
        assert_eq!(decode(&[0x0f, 0x01, 0xd0]), None, "xgetbv is not emulated");
        assert_eq!(decode(&[]), None);
        assert_eq!(decode(&[0x66; 15]), None, "only prefixes");
    }

    #[test]
    fn every_indexed_leaf_is_unique() {
        let t = table();
        for (i, a) in t.iter().enumerate() {
            for b in &t[i + 1..] {
                assert!(!(a.function == b.function && a.index == b.index), "duplicate {a:?}");
            }
        }
    }
}
