//! Measures what a guest can observe about this host.
//!
//! A tiny ring-3 probe runs in a VM configured like a program's: it executes `cpuid` for the
//! leaves below, `xgetbv`, `rdtsc`, `rdtscp`, `rdpid` and `rdrand`, stores what it saw, and makes
//! one syscall. Each instruction that traps is handled as a program's would be (`cpuid` under
//! CPUID faulting is answered from deja's table), or skipped and noted. The monitor compares the
//! answers with the fixed table. [`crate::identity`] runs it once per process to choose the
//! remedy and compute the fingerprint; `deja doctor` runs it on every core, with and without
//! faulting.

use deja_kernel::host::cpuid;
use deja_kernel::RegWrite;
use serde::{Deserialize, Serialize};

use crate::affinity::current_core;
use crate::cores::{on_core, schedulable_cores};
use crate::vm::{CpuSetup, CpuidSource, ProbeAnswer, Vm, VmError};

/// The CPUID leaves and subleaves the probe asks: the identity leaves (1, 0xb, 0x1f), the
/// feature leaves, the cache and XSAVE leaves, and the hypervisor range.
pub const LEAVES: [(u32, u32); 18] = [
    (0, 0),
    (1, 0),
    (4, 0),
    (4, 1),
    (6, 0),
    (7, 0),
    (7, 1),
    (0xb, 0),
    (0xb, 1),
    (0xd, 0),
    (0xd, 1),
    (0x1f, 0),
    (0x4000_0000, 0),
    (0x4000_0001, 0),
    (0x8000_0000, 0),
    (0x8000_0001, 0),
    (0x8000_0007, 0),
    (0x8000_0008, 0),
];

const CODE_VA: u64 = 0x40_0000;
const DATA_VA: u64 = 0x60_0000;
/// Offsets in the data page of the results after the CPUID block.
const XGETBV_AT: u32 = 0x400;
const RDTSC_AT: u32 = 0x410;
const RDTSCP_AT: u32 = 0x420;
const RDPID_AT: u32 = 0x430;
const RDRAND_AT: u32 = 0x440;

/// Which probe instruction an offset in the code holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Probed {
    Cpuid,
    Xgetbv,
    Rdtsc,
    Rdtscp,
    Rdpid,
    Rdrand,
}

/// The probe's code, and where each probed instruction sits (offset, length, what).
struct ProbeCode {
    bytes: Vec<u8>,
    marks: Vec<(u64, u64, Probed)>,
}

impl ProbeCode {
    fn mov_imm(&mut self, opcode: u8, v: u32) {
        self.bytes.push(opcode);
        self.bytes.extend_from_slice(&v.to_le_bytes());
    }
    /// `mov [rbp+disp32], r32` (or r64 with `wide`), register number `reg`.
    fn store(&mut self, reg: u8, disp: u32, wide: bool) {
        if wide {
            self.bytes.push(0x48);
        }
        self.bytes.extend_from_slice(&[0x89, 0x80 | (reg << 3) | 5]);
        self.bytes.extend_from_slice(&disp.to_le_bytes());
    }
    fn insn(&mut self, what: Probed, code: &[u8]) {
        self.marks.push((self.bytes.len() as u64, code.len() as u64, what));
        self.bytes.extend_from_slice(code);
    }

    fn build() -> ProbeCode {
        const EAX: u8 = 0;
        const ECX: u8 = 1;
        const EDX: u8 = 2;
        const EBX: u8 = 3;
        let mut c = ProbeCode { bytes: Vec::new(), marks: Vec::new() };
        for (i, (leaf, sub)) in LEAVES.iter().enumerate() {
            let at = 16 * i as u32;
            c.mov_imm(0xb8, *leaf);
            c.mov_imm(0xb9, *sub);
            c.insn(Probed::Cpuid, &[0x0f, 0xa2]);
            for (k, reg) in [EAX, EBX, ECX, EDX].into_iter().enumerate() {
                c.store(reg, at + 4 * k as u32, false);
            }
        }
        c.mov_imm(0xb9, 0);
        c.insn(Probed::Xgetbv, &[0x0f, 0x01, 0xd0]);
        c.store(EAX, XGETBV_AT, false);
        c.store(EDX, XGETBV_AT + 4, false);
        c.insn(Probed::Rdtsc, &[0x0f, 0x31]);
        c.store(EAX, RDTSC_AT, false);
        c.store(EDX, RDTSC_AT + 4, false);
        c.insn(Probed::Rdtscp, &[0x0f, 0x01, 0xf9]);
        c.store(ECX, RDTSCP_AT, false);
        c.insn(Probed::Rdpid, &[0xf3, 0x0f, 0xc7, 0xf8]);
        c.store(EAX, RDPID_AT, true);
        c.insn(Probed::Rdrand, &[0x48, 0x0f, 0xc7, 0xf0]);
        // setc byte [rbp+RDRAND_AT]
        c.bytes.extend_from_slice(&[0x0f, 0x92, 0x85]);
        c.bytes.extend_from_slice(&RDRAND_AT.to_le_bytes());
        // exit(0): mov eax, 60; syscall; hlt
        c.mov_imm(0xb8, 60);
        c.bytes.extend_from_slice(&[0x0f, 0x05, 0xf4]);
        c
    }
}

/// One CPUID register the guest saw differently from the table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuidDiff {
    /// Leaf (EAX input).
    pub leaf: u32,
    /// Subleaf (ECX input).
    pub subleaf: u32,
    /// Register name.
    pub register: String,
    /// What the fixed table says.
    pub expected: u32,
    /// What the guest saw.
    pub seen: u32,
}

/// One CPUID answer as the guest saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuidAnswer {
    /// Leaf (EAX input).
    pub leaf: u32,
    /// Subleaf (ECX input).
    pub subleaf: u32,
    /// EAX, EBX, ECX, EDX.
    pub regs: [u32; 4],
}

/// What the probe measured.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostProbe {
    /// Ring-3 `cpuid` trapped (CPUID faulting in force, or the site was rewritten) and deja
    /// answered it.
    pub cpuid_trapped: bool,
    /// Ring-3 `rdtsc` trapped (CR4.TSD honoured, or the site was rewritten), so deja serves it
    /// from the virtual clock.
    pub rdtsc_trapped: bool,
    /// XCR0 as the guest's `xgetbv` returned it.
    pub guest_xcr0: u64,
    /// Every answer of [`LEAVES`], as the guest saw it.
    pub cpuid: Vec<CpuidAnswer>,
    /// CPUID registers that differ from the fixed table.
    pub cpuid_diffs: Vec<CpuidDiff>,
    /// Hypervisor leaf 0x4000_0000 answered with a non-zero signature.
    pub hypervisor_leaf_visible: bool,
    /// `rdtscp` ran natively and returned this `TSC_AUX` (Linux keeps the core number there);
    /// `None` when it trapped or was undefined.
    pub rdtscp_aux: Option<u32>,
    /// `rdpid` ran natively and returned this; `None` when it trapped or was undefined.
    pub rdpid: Option<u64>,
    /// `rdrand` ran natively (whatever CPUID says).
    pub rdrand_runs: bool,
    /// The host core the probe ran on, when it stayed on one.
    pub core: Option<u32>,
    /// The probe's code was rewritten as a program's is: this is what a program sees under
    /// rewriting.
    #[serde(default)]
    pub rewritten: bool,
}

impl HostProbe {
    /// The hazards in plain words; empty when the guest can observe nothing of this host.
    pub fn hazards(&self) -> Vec<String> {
        let mut out = Vec::new();
        if !self.rdtsc_trapped {
            out.push("RDTSC in ring 3 runs natively (CR4.TSD is not honoured): a program that reads the TSC directly sees host time".to_string());
        }
        if self.rdtscp_aux.is_some() || self.rdpid.is_some() {
            out.push(
                "RDTSCP and RDPID run natively and return the host core's number (TSC_AUX): a program that uses them \
                 sees which core it ran on (DEJA_CPU_IDENTITY=pinned fixes the core)"
                    .to_string(),
            );
        }
        if self.rdrand_runs {
            out.push(
                "RDRAND and RDSEED execute natively if a program uses them without asking CPUID: their values are \
                 host randomness"
                    .to_string(),
            );
        }
        let bits = |leaf: u32, reg: &str, mask: u32| {
            self.cpuid_diffs
                .iter()
                .any(|d| d.leaf == leaf && d.register == reg && (d.seen & mask) != (d.expected & mask))
        };
        if bits(1, "ecx", 1 << 30) || bits(7, "ebx", 1 << 18) {
            out.push("CPUID shows RDRAND or RDSEED although deja's table hides them".to_string());
        }
        if bits(1, "ebx", 0xff00_0000) || bits(0xb, "edx", u32::MAX) || bits(0x1f, "edx", u32::MAX) {
            out.push("CPUID shows an APIC ID that is not deja's (leaf 1 EBX, 0xb or 0x1f EDX)".to_string());
        }
        let other: Vec<String> =
            self.cpuid_diffs.iter().map(|d| format!("{:#x}.{}.{}", d.leaf, d.subleaf, d.register)).collect();
        if !other.is_empty() {
            out.push(format!("CPUID answers differ from deja's fixed table in {}", other.join(", ")));
        }
        if self.guest_xcr0 != cpuid::XCR0 {
            out.push(format!(
                "XGETBV returns the host XCR0 {:#x}, not {:#x} (recorded in the host fingerprint)",
                self.guest_xcr0,
                cpuid::XCR0
            ));
        }
        if self.hypervisor_leaf_visible {
            out.push("the hypervisor CPUID leaf 0x40000000 is visible".to_string());
        }
        out
    }

    /// The probe's CPUID answer for `(leaf, subleaf)`.
    pub fn answer(&self, leaf: u32, subleaf: u32) -> Option<[u32; 4]> {
        self.cpuid.iter().find(|a| a.leaf == leaf && a.subleaf == subleaf).map(|a| a.regs)
    }
}

/// Runs the probe in a fresh small VM whose CPUID comes from `source`, on whatever core the
/// calling thread is on: what the host itself does with each instruction.
pub fn probe_with(source: CpuidSource) -> Result<HostProbe, VmError> {
    run(source, false)
}

/// Runs the probe with its code rewritten as a program's is ([`deja_rewrite`]): what a
/// program sees under rewriting, each rewritten instruction answered as the kernel answers it
/// ([`deja_kernel::host::hostchan::answer`]).
pub fn probe_rewritten(source: CpuidSource) -> Result<HostProbe, VmError> {
    run(source, true)
}

/// Runs the probe, rewritten or not ([`probe_with`], [`probe_rewritten`]).
pub fn run(source: CpuidSource, rewrite: bool) -> Result<HostProbe, VmError> {
    let setup = CpuSetup { faulting: source == CpuidSource::Faulting, pin: None };
    let mut vm = Vm::with_setup(16 << 20, setup)?;
    let mut code = ProbeCode::build();
    let plan = match rewrite {
        true => deja_rewrite::plan_code(CODE_VA, &code.bytes, &[]),
        false => deja_rewrite::Plan::default(),
    };
    for site in &plan.sites {
        let at = (site.addr - CODE_VA) as usize;
        code.bytes[at..at + usize::from(site.len)].copy_from_slice(&site.patch());
    }
    vm.load_raw(CODE_VA, &code.bytes, DATA_VA)?;
    vm.enter_user(CODE_VA, DATA_VA + 0x800, DATA_VA)?;
    let core_before = current_core();
    let answer = |rip: u64, vector: u8, gprs: &[u64; 16]| -> Option<ProbeAnswer> {
        let (_, len, what) = code.marks.iter().find(|(off, _, _)| CODE_VA + off == rip)?;
        let (eax, ecx) = (gprs[0] as u32, gprs[1] as u32);
        if let Some(site) = plan.sites.iter().find(|s| s.addr == rip).filter(|_| vector == 6) {
            let (writes, flags) =
                deja_kernel::host::hostchan::answer(site.channel, (site.reg, site.width), (eax, ecx), 0, 0, 1)?;
            return Some(ProbeAnswer { writes, flags, len: *len });
        }
        let w = |reg, value| RegWrite { reg, value, width: 8 };
        let writes = match (what, vector) {
            (Probed::Cpuid, 13) => {
                let [a, b, c, d] = cpuid::answer(eax, ecx);
                [(0, a), (3, b), (1, c), (2, d)].map(|(r, v)| w(r, u64::from(v))).to_vec()
            }
            _ => vec![w(0, 0xdead_beef), w(2, 0xdead_beef)],
        };
        Some(ProbeAnswer { writes, flags: None, len: *len })
    };
    let exceptions = vm.run_probe(&answer)?;
    let core_after = current_core();
    let mut data = [0u8; 0x800];
    vm.read_user(DATA_VA, &mut data);
    let word = |at: u32| {
        let i = at as usize;
        u32::from_le_bytes([data[i], data[i + 1], data[i + 2], data[i + 3]])
    };
    let faulted = |what: Probed| {
        code.marks.iter().any(|(off, _, w)| *w == what && exceptions.iter().any(|(_, rip)| *rip == CODE_VA + off))
    };
    let faulted_with = |what: Probed, vector: u8| {
        code.marks
            .iter()
            .any(|(off, _, w)| *w == what && exceptions.iter().any(|(v, rip)| *v == vector && *rip == CODE_VA + off))
    };
    let mut answers = Vec::new();
    let mut diffs = Vec::new();
    for (i, (leaf, sub)) in LEAVES.iter().enumerate() {
        let regs = [0, 1, 2, 3].map(|k| word(16 * i as u32 + 4 * k));
        let expected = cpuid::answer(*leaf, *sub);
        for (k, name) in ["eax", "ebx", "ecx", "edx"].iter().enumerate() {
            if regs[k] != expected[k] {
                diffs.push(CpuidDiff {
                    leaf: *leaf,
                    subleaf: *sub,
                    register: name.to_string(),
                    expected: expected[k],
                    seen: regs[k],
                });
            }
        }
        answers.push(CpuidAnswer { leaf: *leaf, subleaf: *sub, regs });
    }
    let hv = answers.iter().find(|a| a.leaf == 0x4000_0000).map(|a| a.regs).unwrap_or_default();
    Ok(HostProbe {
        cpuid_trapped: faulted_with(Probed::Cpuid, 13) || faulted_with(Probed::Cpuid, 6),
        rdtsc_trapped: faulted_with(Probed::Rdtsc, 13) || faulted_with(Probed::Rdtsc, 6),
        rewritten: rewrite,
        guest_xcr0: word(XGETBV_AT) as u64 | ((word(XGETBV_AT + 4) as u64) << 32),
        cpuid: answers,
        cpuid_diffs: diffs,
        hypervisor_leaf_visible: hv[1] != 0 || hv[2] != 0 || hv[3] != 0,
        rdtscp_aux: (!faulted(Probed::Rdtscp)).then(|| word(RDTSCP_AT)),
        rdpid: (!faulted(Probed::Rdpid)).then(|| word(RDPID_AT) as u64 | ((word(RDPID_AT + 4) as u64) << 32)),
        rdrand_runs: !faulted(Probed::Rdrand),
        core: core_before.filter(|c| Some(*c) == core_after),
    })
}

/// Runs the probe on a scratch thread pinned to host core `core`.
pub fn probe_on_core(core: u32, source: CpuidSource) -> Result<HostProbe, VmError> {
    on_core(core, || probe_with(source))?
}

/// Runs the probe on every core this process may use (at most 64) with CPUID from `source`, and
/// returns the first two cores whose CPUID answers differ, if any.
pub fn cpuid_variation(source: CpuidSource) -> Result<Option<(u32, u32)>, VmError> {
    let per_core = probe_every_core(source)?;
    let Some((first_core, first)) = per_core.first() else { return Ok(None) };
    Ok(per_core.iter().find(|(_, p)| p.cpuid != first.cpuid).map(|(c, _)| (*first_core, *c)))
}

/// The probe on every core this process may use (at most 64), in core order.
pub fn probe_every_core(source: CpuidSource) -> Result<Vec<(u32, HostProbe)>, VmError> {
    schedulable_cores().into_iter().take(64).map(|c| Ok((c, probe_on_core(c, source)?))).collect()
}

/// Whether this host offers CPUID faulting to its guests: `MSR_PLATFORM_INFO` bit 31 reads as
/// set and `MSR_MISC_FEATURES_ENABLES` bit 0 sticks.
pub fn faulting_offered() -> Result<bool, VmError> {
    let mut vm = Vm::with_setup(16 << 20, CpuSetup { faulting: false, pin: None })?;
    vm.try_enable_cpuid_faulting()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_code_marks_every_probed_instruction() {
        let c = ProbeCode::build();
        let cpuids = c.marks.iter().filter(|m| m.2 == Probed::Cpuid).count();
        assert_eq!(cpuids, LEAVES.len());
        for (off, len, what) in &c.marks {
            let at = &c.bytes[*off as usize..(*off + *len) as usize];
            if *what == Probed::Cpuid {
                assert_eq!(cpuid::decode(at), Some((deja_rewrite::Channel::Cpuid, 2)));
            }
        }
        assert_eq!(&c.bytes[c.bytes.len() - 3..], &[0x0f, 0x05, 0xf4], "ends in exit");
        assert!(c.bytes.len() < 4096, "one page");
    }

    #[test]
    fn rewriting_the_probe_rewrites_every_probed_instruction_and_nothing_else() {
        let c = ProbeCode::build();
        let plan = deja_rewrite::plan_code(CODE_VA, &c.bytes, &[]);
        assert!(plan.refused.is_empty(), "{:?}", plan.refused);
        let sites: Vec<(u64, u64)> = plan.sites.iter().map(|s| (s.addr - CODE_VA, u64::from(s.len))).collect();
        let marks: Vec<(u64, u64)> = c.marks.iter().map(|(off, len, _)| (*off, *len)).collect();
        assert_eq!(sites, marks);
    }
}
