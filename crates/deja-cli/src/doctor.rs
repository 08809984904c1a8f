//! `deja doctor`: can this host run deja, and what can a guest learn about it?

use crate::exit::Exit;
use std::io::Write;

/// Arguments of `deja doctor`.
#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    /// Print the findings as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

/// `deja doctor`, of the CPU identity under `settings`: [`Exit::Clean`] if deja can run here
/// (hazards are reported, not fatal), [`Exit::DejaFailed`] if not.
pub fn main(args: DoctorArgs, settings: &deja_vmm::Settings) -> Exit {
    let check = deja_vmm::check_host(settings);
    let usable = check.usable();
    if args.json {
        let profile = check.profile.as_ref().ok();
        let variation = check.raw_variation();
        let v = serde_json::json!({
            "schema": "deja.doctor/2",
            "usable": usable,
            "kvm_api_version": check.kvm.as_ref().ok(),
            "kvm_error": check.kvm.as_ref().err(),
            "capabilities": check.caps,
            "cpu_identity": profile,
            "cpu_identity_error": check.profile.as_ref().err(),
            "cpuid_varies_with_host_core": variation.as_ref().map(|(a, b, leaves)| serde_json::json!({
                "cores": [a, b], "leaves": leaves,
            })),
            "core_number_varies_with_host_core": check.core_number_varies(),
            "raw_per_core": check.raw_per_core.as_ref().ok(),
            "raw_per_core_error": check.raw_per_core.as_ref().err(),
            "hazards": profile.map(|p| p.hazards()),
            "channels": profile.map(|p| p.channels()),
            "rewriting_leaves_open": profile.filter(|p| p.remedy.rewrite).map(|_| deja_vmm::identity::REWRITING_LEAVES_OPEN),
        });
        println!("{v:#}");
        return if usable { Exit::Clean } else { Exit::DejaFailed };
    }
    let mut o = std::io::stdout().lock();
    match &check.kvm {
        Ok(v) => {
            let _ = writeln!(o, "ok      /dev/kvm opens (KVM API version {v})");
        }
        Err(e) => {
            let _ = writeln!(o, "FAIL    {e}");
            let _ = writeln!(o, "        deja needs KVM: load the kvm module and give your user access to /dev/kvm");
        }
    }
    for c in &check.caps {
        let mark = match (c.present, c.required) {
            (true, _) => "ok     ",
            (false, true) => "FAIL   ",
            (false, false) => "missing",
        };
        let _ = writeln!(o, "{mark} {} ({})", c.name, c.used_for);
    }
    let _ = writeln!(o, "\nCPU identity: what a guest can learn about this host's CPU");
    match &check.raw_per_core {
        Ok(per_core) => {
            let cores: Vec<String> = per_core.iter().map(|(c, _)| c.to_string()).collect();
            match check.raw_variation() {
                Some((a, b, leaves)) => {
                    let _ = writeln!(
                        o,
                        "hazard  CPUID varies with the host core: with KVM's table alone, cores {a} and {b} answer {} differently",
                        leaves.join(", ")
                    );
                }
                None => {
                    let _ = writeln!(
                        o,
                        "ok      CPUID does not vary with the host core here (KVM's table alone, probed on cores {})",
                        cores.join(", ")
                    );
                }
            }
            if check.core_number_varies() {
                let seen: Vec<String> = per_core
                    .iter()
                    .map(|(c, p)| format!("{} on core {c}", p.rdpid.or(p.rdtscp_aux.map(u64::from)).unwrap_or(0)))
                    .collect();
                let _ = writeln!(o, "hazard  RDTSCP/RDPID return the host core's number natively: {}", seen.join(", "));
            }
        }
        Err(e) => {
            let _ = writeln!(o, "FAIL    the per-core probe did not run: {e}");
        }
    }
    match &check.profile {
        Ok(p) => {
            let _ = writeln!(
                o,
                "ok      remedy in force: {} (policy {:?}; set {}=auto|faulting|table|pinned to choose)",
                p.remedy,
                p.policy,
                deja_vmm::identity::ENV
            );
            if !p.faulting_offered {
                let _ = writeln!(o, "missing CPUID faulting (MSR_PLATFORM_INFO bit 31): CPUID comes from KVM's table");
            } else if !p.faulting_honoured {
                let _ = writeln!(
                    o,
                    "hazard  CPUID faulting is offered but not honoured: the MSR bit sticks, yet ring-3 cpuid does not trap; CPUID comes from KVM's table"
                );
            }
            if let Some(core) = p.remedy.pinned_core {
                let _ = writeln!(
                    o,
                    "note    every VM of a deja process runs on host core {core}: `deja explore --jobs N` runs its N workers on that one core"
                );
            }
            if p.probe.cpuid_diffs.is_empty() {
                let _ = writeln!(
                    o,
                    "ok      the guest sees exactly deja's fixed CPUID table ({} leaves checked)",
                    deja_vmm::probe::LEAVES.len()
                );
            }
            let _ = writeln!(
                o,
                "ok      host CPU fingerprint {} (every artifact records it; a replay elsewhere compares)",
                p.fingerprint.id
            );
            let _ = writeln!(
                o,
                "\nHost channels: what closes each on this host ({}=on|off)",
                deja_vmm::identity::REWRITE_ENV
            );
            for c in p.channels() {
                let mark = match c.mechanism {
                    deja_vmm::identity::Mechanism::Open => "open   ",
                    _ => "closed ",
                };
                let _ = writeln!(o, "{mark} {:<7} {:?}: {}", c.channel.name(), c.mechanism, c.how);
            }
            if p.remedy.rewrite {
                for what in deja_vmm::identity::REWRITING_LEAVES_OPEN {
                    let _ = writeln!(o, "note    {what}");
                }
            }
            for h in p.hazards().iter().filter(|h| !h.starts_with("RDTSC in ring 3")) {
                let _ = writeln!(o, "hazard  {h}");
            }
            if !p.hazards().is_empty() {
                let _ = writeln!(
                    o,
                    "        runs stay reproducible as long as programs take time and randomness from syscalls;\n        `deja run --audit K` runs a program in K processes on different cores and compares"
                );
            }
        }
        Err(e) => {
            let _ = writeln!(o, "FAIL    the probe VM did not run: {e}");
        }
    }
    let _ =
        writeln!(o, "{}", if usable { "deja can run programs on this host" } else { "deja cannot run on this host" });
    if usable {
        Exit::Clean
    } else {
        Exit::DejaFailed
    }
}
