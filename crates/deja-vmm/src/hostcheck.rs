//! What `deja doctor` reports of the host: `/dev/kvm`, the capabilities deja uses, the CPU
//! identity under the settings it is given ([`crate::identity`]) and the probe
//! ([`crate::probe`]) on every core.

use crate::identity::Settings;
use crate::probe::{probe_every_core, HostProbe};
use crate::vm::{CpuidSource, VmError};

/// Runs the probe under the remedy of `settings`.
pub fn probe(settings: &Settings) -> Result<HostProbe, VmError> {
    Ok(settings.host()?.probe.clone())
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
    /// The CPU identity under the settings asked for: remedy, probe under it, fingerprint (or
    /// why it failed).
    pub profile: Result<crate::identity::HostProfile, String>,
    /// The probe on every core with KVM's CPUID table alone (no faulting): what the host itself
    /// shows a guest, core by core.
    pub raw_per_core: Result<Vec<(u32, HostProbe)>, String>,
}

impl HostCheck {
    /// True if deja can run programs on this host.
    pub fn usable(&self) -> bool {
        self.kvm.is_ok() && self.caps.iter().all(|c| c.present || !c.required) && self.profile.is_ok()
    }

    /// Whether the host's own CPUID answers (KVM's table, no faulting) vary with the core:
    /// the first two cores that differ and the leaves where they do.
    pub fn raw_variation(&self) -> Option<(u32, u32, Vec<String>)> {
        let per_core = self.raw_per_core.as_ref().ok()?;
        let (c0, p0) = per_core.first()?;
        per_core.iter().find_map(|(c, p)| {
            let leaves: Vec<String> = p0
                .cpuid
                .iter()
                .zip(&p.cpuid)
                .filter(|(a, b)| a.regs != b.regs)
                .map(|(a, _)| format!("{:#x}.{}", a.leaf, a.subleaf))
                .collect();
            (!leaves.is_empty()).then_some((*c0, *c, leaves))
        })
    }

    /// Whether `rdtscp`/`rdpid` return different values on different cores.
    pub fn core_number_varies(&self) -> bool {
        let Ok(per_core) = self.raw_per_core.as_ref() else { return false };
        let ids: std::collections::BTreeSet<_> = per_core.iter().map(|(_, p)| (p.rdpid, p.rdtscp_aux)).collect();
        ids.len() > 1
    }
}

/// Opens `/dev/kvm`, lists the capabilities deja needs, measures the CPU identity under
/// `settings` and runs the raw probe on every core.
pub fn check_host(settings: &Settings) -> HostCheck {
    use kvm_ioctls::{Cap, Kvm};
    let kvm = match Kvm::new() {
        Ok(k) => k,
        Err(e) => {
            return HostCheck {
                kvm: Err(format!("cannot open /dev/kvm: {e}")),
                caps: Vec::new(),
                profile: Err("not run: no KVM".into()),
                raw_per_core: Err("not run: no KVM".into()),
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
    HostCheck {
        kvm: Ok(kvm.get_api_version()),
        caps,
        profile: settings.host().cloned().map_err(|e| e.to_string()),
        raw_per_core: probe_every_core(CpuidSource::KvmTable).map_err(|e| e.to_string()),
    }
}
