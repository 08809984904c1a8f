//! `deja doctor`: can this host run deja, and which determinism settings does it honour?

use std::io::Write;

/// Arguments of `deja doctor`.
#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    /// Print the findings as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

/// `deja doctor`: exit 0 if deja can run here (hazards are reported, not fatal), 1 if not.
pub fn main(args: DoctorArgs) -> i32 {
    let check = deja_vmm::check_host();
    let usable = check.usable();
    if args.json {
        let hazards = check.probe.as_ref().ok().map(|p| p.hazards());
        let v = serde_json::json!({
            "schema": "deja.doctor/1",
            "usable": usable,
            "kvm_api_version": check.kvm.as_ref().ok(),
            "kvm_error": check.kvm.as_ref().err(),
            "capabilities": check.caps,
            "probe": check.probe.as_ref().ok(),
            "probe_error": check.probe.as_ref().err(),
            "hazards": hazards,
        });
        println!("{v:#}");
        return if usable { 0 } else { 1 };
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
    match &check.probe {
        Ok(p) => {
            let _ = writeln!(o, "ok      a ring-3 probe ran and its syscall trapped to the monitor");
            let _ = writeln!(
                o,
                "{}  RDTSC in ring 3 {}",
                if p.rdtsc_trapped { "ok    " } else { "hazard" },
                if p.rdtsc_trapped {
                    "traps and is served from the virtual clock"
                } else {
                    "runs natively (CR4.TSD is not honoured)"
                }
            );
            let hazards = p.hazards();
            if hazards.is_empty() {
                let _ = writeln!(o, "ok      the guest sees exactly deja's fixed CPUID table");
            }
            for h in hazards.iter().filter(|h| !h.starts_with("RDTSC")) {
                let _ = writeln!(o, "hazard  {h}");
            }
            if !hazards.is_empty() {
                let _ = writeln!(
                    o,
                    "        runs stay reproducible as long as programs take time and randomness from syscalls;\n        `deja run --audit K` checks a program"
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
        0
    } else {
        1
    }
}
