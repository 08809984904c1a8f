//! Measures the determinism hazards of this host.
//!
//! A tiny ring-3 probe runs in a VM configured exactly like a program's: it executes CPUID for
//! the leaves deja fixes, XGETBV and RDTSC, stores what it saw, and makes one syscall. The
//! monitor compares the answers with the fixed table and notes whether RDTSC trapped (CR4.TSD
//! honoured) or ran natively.

use crate::cpuid;
use crate::vm::{Vm, VmError};

/// The probe's code (ring 3, RBP = data page):
///
/// ```text
/// for leaf in [0, 1, 7, 0x80000001, 0x40000000]: cpuid(leaf, 0); store eax,ebx,ecx,edx
/// xgetbv(0); store eax,edx
/// rdtsc;     store eax,edx
/// mov $60,%eax ; syscall ; hlt
/// ```
const PROBE_CODE: &[u8] = &[
    0x31, 0xc0, 0x0f, 0xa2, 0x89, 0x45, 0x00, 0x89, 0x5d, 0x04, 0x89, 0x4d, 0x08, 0x89, 0x55, 0x0c, //
    0xb8, 0x01, 0x00, 0x00, 0x00, 0x31, 0xc9, 0x0f, 0xa2, 0x89, 0x45, 0x10, 0x89, 0x5d, 0x14, 0x89, 0x4d, 0x18, 0x89,
    0x55, 0x1c, //
    0xb8, 0x07, 0x00, 0x00, 0x00, 0x31, 0xc9, 0x0f, 0xa2, 0x89, 0x45, 0x20, 0x89, 0x5d, 0x24, 0x89, 0x4d, 0x28, 0x89,
    0x55, 0x2c, //
    0xb8, 0x01, 0x00, 0x00, 0x80, 0x31, 0xc9, 0x0f, 0xa2, 0x89, 0x45, 0x30, 0x89, 0x5d, 0x34, 0x89, 0x4d, 0x38, 0x89,
    0x55, 0x3c, //
    0xb8, 0x00, 0x00, 0x00, 0x40, 0x31, 0xc9, 0x0f, 0xa2, 0x89, 0x45, 0x40, 0x89, 0x5d, 0x44, 0x89, 0x4d, 0x48, 0x89,
    0x55, 0x4c, //
    0x31, 0xc9, 0x0f, 0x01, 0xd0, 0x89, 0x45, 0x50, 0x89, 0x55, 0x54, //
    0x0f, 0x31, 0x89, 0x45, 0x58, 0x89, 0x55, 0x5c, //
    0xb8, 0x3c, 0x00, 0x00, 0x00, 0x0f, 0x05, 0xf4,
];
const RDTSC_OFFSET: u64 = 0x6f;
const CODE_VA: u64 = 0x40_0000;
const DATA_VA: u64 = 0x60_0000;

/// One CPUID register the guest saw differently from the table.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CpuidDiff {
    /// Leaf (EAX input).
    pub leaf: u32,
    /// Register name.
    pub register: &'static str,
    /// What the fixed table says.
    pub expected: u32,
    /// What the guest saw.
    pub seen: u32,
}

/// What the probe measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct HostProbe {
    /// RDTSC in ring 3 raised #GP under CR4.TSD, so deja serves it from the virtual clock.
    pub rdtsc_trapped: bool,
    /// XCR0 as the guest's XGETBV returned it.
    pub guest_xcr0: u64,
    /// CPUID registers that differ from the fixed table.
    pub cpuid_diffs: Vec<CpuidDiff>,
    /// Hypervisor leaf 0x4000_0000 answered with a non-zero signature.
    pub hypervisor_leaf_visible: bool,
}

impl HostProbe {
    /// The hazards in plain words; empty when the host honours every determinism setting.
    pub fn hazards(&self) -> Vec<String> {
        let mut out = Vec::new();
        if !self.rdtsc_trapped {
            out.push("RDTSC is not trappable here: a program that reads the TSC directly sees host time".to_string());
        }
        let bits = |leaf: u32, reg: &str, mask: u32| {
            self.cpuid_diffs
                .iter()
                .any(|d| d.leaf == leaf && d.register == reg && (d.seen & mask) != (d.expected & mask))
        };
        if bits(1, "ecx", 1 << 30) {
            out.push(
                "CPUID still shows RDRAND (feature bits are not filterable here); RDRAND runs natively".to_string(),
            );
        }
        if bits(7, "ebx", 1 << 18) {
            out.push("CPUID still shows RDSEED; RDSEED runs natively".to_string());
        }
        let other: Vec<String> = self.cpuid_diffs.iter().map(|d| format!("{:#x}.{}", d.leaf, d.register)).collect();
        if !other.is_empty() {
            out.push(format!("CPUID answers differ from deja's fixed table in {}", other.join(", ")));
        }
        if self.guest_xcr0 != cpuid::XCR0 {
            out.push(format!("XGETBV returns the host XCR0 {:#x}, not {:#x}", self.guest_xcr0, cpuid::XCR0));
        }
        if self.hypervisor_leaf_visible {
            out.push("the hypervisor CPUID leaf 0x40000000 is visible".to_string());
        }
        out
    }
}

/// Runs the probe in a fresh small VM.
pub fn probe() -> Result<HostProbe, VmError> {
    let mut vm = Vm::new(16 << 20)?;
    vm.load_raw(CODE_VA, PROBE_CODE, DATA_VA)?;
    vm.enter_user(CODE_VA, DATA_VA + 0x800, DATA_VA)?;
    let exceptions = vm.run_probe()?;
    let mut data = [0u8; 0x60];
    vm.read_user(DATA_VA, &mut data);
    let word = |i: usize| u32::from_le_bytes([data[4 * i], data[4 * i + 1], data[4 * i + 2], data[4 * i + 3]]);
    let mut diffs = Vec::new();
    for (slot, leaf) in [0u32, 1, 7, 0x8000_0001].iter().enumerate() {
        let expected = cpuid::lookup(*leaf, 0).unwrap_or(cpuid::Leaf {
            function: *leaf,
            index: 0,
            indexed: false,
            eax: 0,
            ebx: 0,
            ecx: 0,
            edx: 0,
        });
        for (r, (name, exp)) in
            [("eax", expected.eax), ("ebx", expected.ebx), ("ecx", expected.ecx), ("edx", expected.edx)]
                .into_iter()
                .enumerate()
        {
            let seen = word(slot * 4 + r);
            if seen != exp {
                diffs.push(CpuidDiff { leaf: *leaf, register: name, expected: exp, seen });
            }
        }
    }
    let rdtsc_trapped = exceptions.iter().any(|(v, rip)| *v == 13 && *rip == CODE_VA + RDTSC_OFFSET);
    Ok(HostProbe {
        rdtsc_trapped,
        guest_xcr0: word(20) as u64 | ((word(21) as u64) << 32),
        cpuid_diffs: diffs,
        hypervisor_leaf_visible: word(17) != 0 || word(18) != 0 || word(19) != 0,
    })
}

/// One KVM capability deja uses.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CapCheck {
    /// KVM's name for it.
    pub name: &'static str,
    /// Whether this host has it.
    pub present: bool,
    /// Whether deja cannot run without it.
    pub required: bool,
    /// What deja uses it for.
    pub used_for: &'static str,
}

/// Everything `deja doctor` reports.
#[derive(Debug, Clone, serde::Serialize)]
pub struct HostCheck {
    /// `/dev/kvm` could be opened (or why not).
    pub kvm: Result<i32, String>,
    /// Capabilities.
    pub caps: Vec<CapCheck>,
    /// The hazard probe (or why it failed).
    pub probe: Result<HostProbe, String>,
}

impl HostCheck {
    /// True if deja can run programs on this host.
    pub fn usable(&self) -> bool {
        self.kvm.is_ok() && self.caps.iter().all(|c| c.present || !c.required) && self.probe.is_ok()
    }
}

/// Opens `/dev/kvm`, lists the capabilities deja needs and runs the probe.
pub fn check_host() -> HostCheck {
    use kvm_ioctls::{Cap, Kvm};
    let kvm = match Kvm::new() {
        Ok(k) => k,
        Err(e) => {
            return HostCheck {
                kvm: Err(format!("cannot open /dev/kvm: {e}")),
                caps: Vec::new(),
                probe: Err("not run: no KVM".into()),
            }
        }
    };
    let caps = [
        (Cap::UserMemory, "KVM_CAP_USER_MEMORY", true, "guest RAM"),
        (Cap::SyncRegs, "KVM_CAP_SYNC_REGS", true, "registers without ioctls on every syscall"),
        (Cap::Xcrs, "KVM_CAP_XCRS", true, "a fixed XCR0"),
        (Cap::ExtCpuid, "KVM_CAP_EXT_CPUID", true, "the fixed CPUID table"),
        (Cap::ImmediateExit, "KVM_CAP_IMMEDIATE_EXIT", false, "interrupting a running guest"),
        (Cap::TscControl, "KVM_CAP_TSC_CONTROL", false, "a fixed guest TSC frequency"),
        (Cap::DirtyLogRing, "KVM_CAP_DIRTY_LOG_RING", false, "dirty-page tracking without bitmap scans"),
    ]
    .into_iter()
    .map(|(cap, name, required, used_for)| CapCheck { name, present: kvm.check_extension(cap), required, used_for })
    .collect();
    HostCheck { kvm: Ok(kvm.get_api_version()), caps, probe: probe().map_err(|e| e.to_string()) }
}
