//! What a guest can learn about the host's CPU, and what deja does about it.
//!
//! A guest's ring-3 code runs natively, so every instruction that reads CPU state the monitor
//! does not set is a way for a run to depend on the host: on some hosts CPUID answers (the APIC
//! IDs of leaves 1, 0xb and 0x1f among them) come from whichever physical core the vCPU thread
//! happens to run on, and glibc keeps them in memory. This module picks, for the settings a run
//! asks for ([`Settings`]), the *remedy* in force:
//!
//! * **CPUID faulting** (`MSR_PLATFORM_INFO` bit 31, enabled with `MSR_MISC_FEATURES_ENABLES`
//!   bit 0): every ring-3 `cpuid` raises #GP and the core answers it from deja's fixed table
//!   ([`deja_kernel::host::cpuid`]). Exact on every host that honours it, whatever its KVM does to
//!   `KVM_SET_CPUID2` entries. Chosen whenever the host honours it: the MSR bit sticking is not
//!   enough (some hosts accept it and go on answering `cpuid` themselves), so the probe runs a
//!   ring-3 `cpuid` under faulting and faulting counts only if it trapped.
//! * **KVM's CPUID table** (`KVM_SET_CPUID2`): exact only where the host's KVM honours the
//!   entries. Used where faulting is missing or not honoured; the probe then runs on every core the process may
//!   use, and when the answers differ between cores every vCPU thread is **pinned** to one core,
//!   chosen the same way every time: the lowest-numbered core the process may be scheduled on,
//!   whatever its current affinity mask.
//!
//! What a run asks for is a [`Settings`] value: the policy (`auto`, the default, `faulting`,
//! `table`, or `pinned`: the best CPUID source, plus pinning, the only remedy for
//! `rdtscp`/`rdpid`, which read the host core's `TSC_AUX` natively on hosts that cannot trap
//! them), whether programs' code is rewritten, whether they get deja's vDSO, and the
//! no-progress watchdog's limit. Nothing here reads the environment: the CLI reads
//! `DEJA_CPU_IDENTITY`, `DEJA_REWRITE`, `DEJA_VDSO` (and `--no-vdso`) and `DEJA_NO_PROGRESS_S`
//! once and parses them with [`Settings::parse`]; the value travels with every boot
//! ([`crate::BootOptions`]). The host profile of a value ([`Settings::host`]) is measured on its
//! first use and kept for the process, one per distinct value (the probe VMs are costly).
//!
//! What the guest can still observe under the remedy in force is measured by the probe
//! ([`crate::probe`]) and summarized as a [`Fingerprint`], which every artifact records, so that
//! replaying on a host with another fingerprint says so instead of silently diverging.

use std::sync::OnceLock;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use deja_rewrite::Channel;

use crate::probe::HostProbe;
use crate::vm::{CpuSetup, Vm, VmError};

pub use crate::cores::{
    allowed_cores, current_core, initial_cores, lowest_schedulable_core, on_another_core, on_core, pin_current_thread,
    remember_initial_cores, schedulable_cores, set_current_affinity,
};
pub use crate::vm::CpuidSource;

/// The environment variable the CLI reads the policy from.
pub const ENV: &str = "DEJA_CPU_IDENTITY";
/// The environment variable the CLI reads code rewriting from: `off`, or `on` (the default).
pub const REWRITE_ENV: &str = "DEJA_REWRITE";
/// The environment variable the CLI reads deja's vDSO from: `off`, or `on` (the default).
pub const VDSO_ENV: &str = "DEJA_VDSO";

/// What `DEJA_CPU_IDENTITY` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Policy {
    /// CPUID faulting where offered; otherwise KVM's table, pinned when answers vary by core.
    Auto,
    /// CPUID faulting, or refuse to run.
    Faulting,
    /// KVM's CPUID table only, never pinned (for measuring hosts).
    Table,
    /// The best CPUID source, and every vCPU thread pinned to one fixed core.
    Pinned,
}

impl Policy {
    /// Every policy, in the order of [`Policy::name`]'s words.
    pub const ALL: [Policy; 4] = [Policy::Auto, Policy::Faulting, Policy::Table, Policy::Pinned];

    /// The word `DEJA_CPU_IDENTITY` says it with.
    pub fn name(self) -> &'static str {
        match self {
            Policy::Auto => "auto",
            Policy::Faulting => "faulting",
            Policy::Table => "table",
            Policy::Pinned => "pinned",
        }
    }

    /// The policy `value` names (unset or empty: [`Policy::Auto`]).
    pub fn parse(value: Option<&str>) -> Result<Policy, VmError> {
        match value.unwrap_or_default() {
            "" => Ok(Policy::Auto),
            v => Policy::ALL.into_iter().find(|p| p.name() == v).ok_or_else(|| VmError::Config {
                message: format!("{ENV}={v:?} is not a CPU identity policy; use auto, faulting, table or pinned"),
            }),
        }
    }
}

/// How a run's VMs are set up: the CPU identity it asks for, whether programs' code is
/// rewritten ([`deja_kernel::host::hostchan`]) and get deja's vDSO ([`deja_kernel::time::vdso`]), and how
/// long the watchdog lets guest code run without an event ([`crate::watchdog`]). A plain value:
/// the CLI builds it once and passes it to everything that boots a VM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Settings {
    /// The CPU identity policy (`DEJA_CPU_IDENTITY`).
    pub cpu_identity: Policy,
    /// Rewrite programs' host channels to traps deja answers (`DEJA_REWRITE`).
    pub rewrite: bool,
    /// Map deja's vDSO into programs (`DEJA_VDSO`, `--no-vdso`).
    pub vdso: bool,
    /// Host time guest code may run without a syscall or an exception (`DEJA_NO_PROGRESS_S`;
    /// `None`: no limit).
    pub no_progress: Option<Duration>,
}

impl Default for Settings {
    /// `auto`, rewriting on, the vDSO on, the watchdog at [`crate::watchdog::DEFAULT_LIMIT`].
    fn default() -> Settings {
        Settings {
            cpu_identity: Policy::Auto,
            rewrite: true,
            vdso: true,
            no_progress: Some(crate::watchdog::DEFAULT_LIMIT),
        }
    }
}

/// `on` (or unset, or empty) or `off`, as the variable `name` says it.
fn on_off(name: &str, value: Option<&str>) -> Result<bool, VmError> {
    match value.unwrap_or_default() {
        "" | "on" => Ok(true),
        "off" => Ok(false),
        other => Err(VmError::Config { message: format!("{name}={other:?}: use on or off") }),
    }
}

impl Settings {
    /// The settings the values of `DEJA_CPU_IDENTITY`, `DEJA_REWRITE` and `DEJA_VDSO` ask for
    /// (`None`: unset); the watchdog at its default. A wrong value is refused with a message
    /// naming the variable.
    pub fn parse(cpu_identity: Option<&str>, rewrite: Option<&str>, vdso: Option<&str>) -> Result<Settings, VmError> {
        Ok(Settings {
            cpu_identity: Policy::parse(cpu_identity)?,
            rewrite: on_off(REWRITE_ENV, rewrite)?,
            vdso: on_off(VDSO_ENV, vdso)?,
            ..Settings::default()
        })
    }

    /// The environment that asks a `deja` process for these settings, to hand them to a child.
    pub fn as_env(&self) -> [(&'static str, String); 4] {
        let on_off = |b: bool| if b { "on" } else { "off" }.to_string();
        let limit = self.no_progress.map_or_else(|| "0".to_string(), |d| d.as_secs_f64().to_string());
        [
            (ENV, self.cpu_identity.name().to_string()),
            (REWRITE_ENV, on_off(self.rewrite)),
            (VDSO_ENV, on_off(self.vdso)),
            (crate::watchdog::ENV, limit),
        ]
    }

    /// The host profile under these settings: measured on first use in this process (a few
    /// probe VMs, a few milliseconds), then kept, one per distinct CPU identity setting.
    pub fn host(&self) -> Result<&'static HostProfile, VmError> {
        /// The profiles measured so far, by [`Settings::slot`]: a cache keyed by the value.
        static HOSTS: [OnceLock<Result<HostProfile, String>>; SLOTS] = [const { OnceLock::new() }; SLOTS];
        HOSTS[self.slot()]
            .get_or_init(|| measure(self).map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|e| VmError::Config { message: e.clone() })
    }

    /// The remedy every VM booted with these settings is set up with.
    pub fn remedy(&self) -> Result<Remedy, VmError> {
        self.host().map(|h| h.remedy)
    }

    /// The remedy that a CPUID source and a pinned core (what the host and the policy gave)
    /// make under these settings.
    pub fn remedy_with(&self, cpuid: CpuidSource, pinned_core: Option<u32>) -> Remedy {
        Remedy { cpuid, pinned_core, rewrite: self.rewrite, vdso: self.vdso }
    }

    /// The index of the CPU identity part of these settings among every possible one (the
    /// watchdog's limit does not change the host profile).
    fn slot(&self) -> usize {
        let policy = Policy::ALL.iter().position(|p| *p == self.cpu_identity).unwrap_or(0);
        policy * 4 + usize::from(self.rewrite) * 2 + usize::from(self.vdso)
    }
}

/// How many distinct host profiles there can be: four policies, rewriting on or off, the vDSO
/// on or off.
const SLOTS: usize = 16;

/// The remedy in force under a [`Settings`] value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Remedy {
    /// Where CPUID answers come from.
    pub cpuid: CpuidSource,
    /// The host core every vCPU thread is pinned to, if any.
    pub pinned_core: Option<u32>,
    /// Programs' `cpuid`, `rdtsc`, `rdtscp`, `rdpid`, `rdrand`, `rdseed` and `xgetbv` are
    /// rewritten to traps that deja answers ([`deja_kernel::host::hostchan`]); the CPUID source
    /// above then answers only what the rewriter left alone. Absent in artifacts of a deja
    /// that did not rewrite.
    #[serde(default)]
    pub rewrite: bool,
    /// Programs get deja's vDSO, and read the clock through it without an exit
    /// ([`deja_kernel::time::vdso`]). Absent in artifacts of a deja without one.
    #[serde(default)]
    pub vdso: bool,
}

impl std::fmt::Display for Remedy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.rewrite {
            write!(
                f,
                "code rewriting: cpuid, rdtsc, rdtscp, rdpid, rdrand, rdseed and xgetbv trap to deja, which answers \
                 from its own model; behind it, "
            )?;
        }
        match self.cpuid {
            CpuidSource::Faulting => {
                write!(f, "CPUID faulting: every ring-3 cpuid traps and deja answers from its table")?
            }
            CpuidSource::KvmTable => write!(f, "KVM's CPUID table (KVM_SET_CPUID2), as far as the host honours it")?,
        }
        if let Some(c) = self.pinned_core {
            write!(f, "; every vCPU thread pinned to host core {c}")?;
        }
        if !self.vdso {
            write!(f, "; no vDSO (every clock read is a syscall)")?;
        }
        Ok(())
    }
}

/// What a guest can observe about its host under the remedy in force: two hosts (or two
/// processes) with the same fingerprint give the same runs. Recorded in every artifact.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fingerprint {
    /// The first 16 hex digits of the BLAKE3 of the other fields.
    pub id: String,
    /// The remedy in force.
    pub remedy: Remedy,
    /// BLAKE3 (hex) of the CPUID answers the guest sees, over the probe's leaves.
    pub cpuid_blake3: String,
    /// XCR0 as the guest's `xgetbv` reads it.
    pub xcr0: u64,
    /// Ring-3 `rdtsc` traps and is served from the virtual clock.
    pub rdtsc_trapped: bool,
    /// `rdtscp`/`rdpid` run natively and return the host core's number (`TSC_AUX`); which
    /// number depends on the core, fixed only when the remedy pins the vCPU threads.
    pub core_number_visible: bool,
    /// The rewriter's rules ([`deja_rewrite::RULES_VERSION`]) when the remedy rewrites code, 0
    /// when it does not: two versions may rewrite the same program differently.
    #[serde(default)]
    pub rewrite_rules: u32,
}

impl Fingerprint {
    /// The fingerprint of what `probe` saw under `remedy`.
    pub fn new(remedy: Remedy, probe: &HostProbe) -> Fingerprint {
        let mut h = blake3::Hasher::new();
        for a in &probe.cpuid {
            h.update(&a.leaf.to_le_bytes());
            h.update(&a.subleaf.to_le_bytes());
            for r in a.regs {
                h.update(&r.to_le_bytes());
            }
        }
        let cpuid_blake3 = h.finalize().to_hex().to_string();
        let mut f = Fingerprint {
            id: String::new(),
            remedy,
            cpuid_blake3,
            xcr0: probe.guest_xcr0,
            rdtsc_trapped: probe.rdtsc_trapped,
            core_number_visible: probe.rdpid.is_some() || probe.rdtscp_aux.is_some(),
            rewrite_rules: if remedy.rewrite { deja_rewrite::RULES_VERSION } else { 0 },
        };
        let body = serde_json::to_vec(&f).expect("plain data serializes");
        f.id = blake3::hash(&body).to_hex()[..16].to_string();
        f
    }

    /// The ways `other` (recorded elsewhere) differs from this host, in words; empty when the
    /// two are the same.
    pub fn differences(&self, other: &Fingerprint) -> Vec<String> {
        let mut out = Vec::new();
        if self.remedy != other.remedy {
            out.push(format!("CPU identity remedy: recorded {}, here {}", other.remedy, self.remedy));
        }
        if self.cpuid_blake3 != other.cpuid_blake3 {
            out.push("the CPUID answers the guest sees differ".into());
        }
        if self.xcr0 != other.xcr0 {
            out.push(format!("XCR0: recorded {:#x}, here {:#x}", other.xcr0, self.xcr0));
        }
        if self.rdtsc_trapped != other.rdtsc_trapped {
            out.push(format!("rdtsc: recorded {}, here {}", trapped(other.rdtsc_trapped), trapped(self.rdtsc_trapped)));
        }
        if self.core_number_visible != other.core_number_visible {
            out.push(format!(
                "rdtscp/rdpid: recorded {}, here {}",
                visible(other.core_number_visible),
                visible(self.core_number_visible)
            ));
        }
        if self.rewrite_rules != other.rewrite_rules {
            let rules = |r: u32| if r == 0 { "code not rewritten".to_string() } else { format!("version {r}") };
            out.push(format!(
                "code rewriting rules: recorded {}, here {}",
                rules(other.rewrite_rules),
                rules(self.rewrite_rules)
            ));
        }
        if out.is_empty() && self.id != other.id {
            out.push(format!("fingerprint id: recorded {}, here {}", other.id, self.id));
        }
        out
    }
}

fn trapped(t: bool) -> &'static str {
    if t {
        "trapped"
    } else {
        "native"
    }
}

fn visible(v: bool) -> &'static str {
    if v {
        "return the host core's number"
    } else {
        "trap or are undefined"
    }
}

/// What a recorded fingerprint means for a replay on this host under `settings`: `None` when
/// they agree, else a sentence naming the differences (an artifact with no fingerprint predates
/// them).
pub fn compare_recorded(recorded: Option<&Fingerprint>, settings: &Settings) -> Option<String> {
    let here = match settings.host() {
        Ok(h) => &h.fingerprint,
        Err(e) => return Some(format!("this host's CPU fingerprint could not be measured: {e}")),
    };
    match recorded {
        None => Some(format!(
            "the artifact records no host CPU fingerprint (written by an older deja); this host is {}",
            here.id
        )),
        Some(r) if r == here => None,
        Some(r) => Some(format!(
            "recorded on a host with CPU fingerprint {}, this host is {}: {}",
            r.id,
            here.id,
            here.differences(r).join("; ")
        )),
    }
}

/// The CPU identity under one [`Settings`] value: the policy, the remedy in force, what the
/// probe saw under it and the resulting fingerprint. Measured once per process and value.
#[derive(Debug, Clone, Serialize)]
pub struct HostProfile {
    /// What `DEJA_CPU_IDENTITY` asked for.
    pub policy: Policy,
    /// Whether this host offers CPUID faulting (`MSR_MISC_FEATURES_ENABLES` bit 0 sticks).
    pub faulting_offered: bool,
    /// Whether it honours it: under faulting, the probe's ring-3 `cpuid` trapped. Only then is
    /// faulting the remedy.
    pub faulting_honoured: bool,
    /// The remedy in force.
    pub remedy: Remedy,
    /// Under the table without faulting: the CPUID answers differed between these two host
    /// cores (which is why the vCPU threads are pinned).
    pub cpuid_varied_between: Option<(u32, u32)>,
    /// What the guest sees under the remedy (with its code rewritten when the remedy rewrites).
    pub probe: HostProbe,
    /// What the host itself does with each instruction, the code not rewritten (the same probe
    /// as `probe` when the remedy does not rewrite).
    pub hardware: HostProbe,
    /// The fingerprint every artifact records.
    pub fingerprint: Fingerprint,
}

/// How a host channel is closed on this host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mechanism {
    /// Rewritten to a trap deja answers ([`deja_kernel::host::hostchan`]).
    Rewriting,
    /// The host traps it (CPUID faulting, CR4.TSD) and deja answers.
    HardwareTrap,
    /// The host's KVM answers from deja's values (its CPUID table, its XCR0).
    KvmTable,
    /// Every vCPU thread runs on one fixed core, so what it reads of the core is fixed.
    Pinned,
    /// The instruction is undefined here: a program gets SIGILL, as on a CPU without it.
    Undefined,
    /// Nothing closes it: a program that executes it reads the host.
    Open,
}

/// One host channel and what closes it here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelStatus {
    /// The instruction.
    pub channel: Channel,
    /// What closes it.
    pub mechanism: Mechanism,
    /// In words, with what stands behind it.
    pub how: String,
}

impl HostProfile {
    /// For each host channel, what closes it on this host under the remedy in force: measured
    /// by the probe, rewritten ([`HostProfile::probe`]) and not ([`HostProfile::hardware`]).
    pub fn channels(&self) -> Vec<ChannelStatus> {
        let (p, hw) = (&self.probe, &self.hardware);
        let pinned = self.remedy.pinned_core;
        let hardware = |c: Channel| -> (Mechanism, String) {
            use Mechanism::*;
            match c {
                Channel::Cpuid if self.remedy.cpuid == CpuidSource::Faulting && hw.cpuid_trapped => {
                    (HardwareTrap, "CPUID faulting".into())
                }
                Channel::Cpuid if hw.cpuid_diffs.is_empty() && pinned.is_none() => {
                    (KvmTable, "KVM's CPUID table, which this host honours".into())
                }
                Channel::Cpuid => match pinned {
                    Some(core) => (Pinned, format!("KVM's CPUID table, every vCPU thread on core {core}")),
                    None => (Open, "KVM's CPUID table, partly rewritten by the host".into()),
                },
                Channel::Rdtsc | Channel::Rdtscp if hw.rdtsc_trapped && hw.rdtscp_aux.is_none() => {
                    (HardwareTrap, "CR4.TSD".into())
                }
                Channel::Rdtsc if hw.rdtsc_trapped => (HardwareTrap, "CR4.TSD".into()),
                Channel::Rdtsc => (Open, "runs natively and reads host time".into()),
                Channel::Rdtscp | Channel::Rdpid => match (hw.rdpid.or(hw.rdtscp_aux.map(u64::from)), pinned) {
                    (None, _) if c == Channel::Rdpid => (Undefined, "#UD (SIGILL), as on a CPU without it".into()),
                    (_, Some(core)) => (Pinned, format!("runs natively; the core number is {core}, pinned")),
                    _ => (Open, "runs natively and reads host time and the host core's number".into()),
                },
                Channel::Rdrand | Channel::Rdseed if !hw.rdrand_runs => {
                    (Undefined, "#UD (SIGILL), as on a CPU without it".into())
                }
                Channel::Rdrand | Channel::Rdseed => (Open, "runs natively and reads host randomness".into()),
                Channel::Xgetbv if hw.guest_xcr0 == deja_kernel::host::cpuid::XCR0 => {
                    (KvmTable, "deja's XCR0 is in force".into())
                }
                Channel::Xgetbv => (Open, format!("reads the host's XCR0 {:#x}", hw.guest_xcr0)),
            }
        };
        let rewritten = |c: Channel| {
            self.remedy.rewrite
                && p.rewritten
                && match c {
                    Channel::Cpuid => p.cpuid_trapped && p.cpuid_diffs.is_empty(),
                    Channel::Rdtsc => p.rdtsc_trapped,
                    Channel::Rdtscp => p.rdtsc_trapped && p.rdtscp_aux.is_none(),
                    Channel::Rdpid => p.rdpid.is_none(),
                    Channel::Rdrand | Channel::Rdseed => !p.rdrand_runs,
                    Channel::Xgetbv => p.guest_xcr0 == deja_kernel::host::cpuid::XCR0,
                }
        };
        Channel::ALL
            .into_iter()
            .map(|c| {
                let (m, how) = hardware(c);
                if rewritten(c) {
                    let behind = match m {
                        Mechanism::Open => String::new(),
                        _ => format!("; behind it: {how}"),
                    };
                    let how = format!("rewritten to a trap that deja answers{behind}");
                    ChannelStatus { channel: c, mechanism: Mechanism::Rewriting, how }
                } else {
                    ChannelStatus { channel: c, mechanism: m, how }
                }
            })
            .collect()
    }
}

/// What stays observable under rewriting, whatever the host: named by `deja doctor` and
/// docs/ARCHITECTURE.md.
pub const REWRITING_LEAVES_OPEN: [&str; 4] = [
    "a program that reads its own code sees the traps (ud2) where the instructions were, not the original bytes",
    "code written into memory that is writable and executable at once, and run without a later mprotect, is not rewritten",
    "an instruction the rewriter cannot prove to be one (data, or code no decoding path reaches) runs natively; each \
     is listed in the run report (host_channels)",
    "under `deja explore` with block coverage (the default), a program that reads its own code or its libraries' \
     also sees a breakpoint (int3) on the first byte of each block in scope the campaign has not reached yet; deja's \
     own reads (digests, syscalls) see the original bytes",
];

impl HostProfile {
    /// The determinism hazards that remain under the remedy in force, in plain words.
    pub fn hazards(&self) -> Vec<String> {
        let mut out = self.probe.hazards();
        if let Some(core) = self.remedy.pinned_core {
            // Pinned, the core number they read is the same in every process.
            for h in out.iter_mut().filter(|h| h.starts_with("RDTSCP and RDPID run natively")) {
                *h = format!(
                    "RDTSCP and RDPID run natively and return the host core's number (TSC_AUX): {core} in every \
                     process, the core the vCPU threads are pinned to"
                );
            }
        }
        if let Some((a, b)) = self.cpuid_varied_between {
            out.insert(
                0,
                format!(
                    "CPUID varies with the host core (cores {a} and {b} answer differently); remedy: {}",
                    self.remedy
                ),
            );
        }
        out
    }
}

/// Whether every vCPU thread must be pinned to one fixed core under `policy`, given the CPUID
/// source chosen and whether code is rewritten.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pinning {
    /// Never.
    No,
    /// Always (`pinned`).
    Always,
    /// Where the CPUID answers differ between cores (`auto` on KVM's table, without rewriting).
    IfCpuidVaries,
}

fn pinning(policy: Policy, cpuid: CpuidSource, rewrite: bool) -> Pinning {
    match (policy, cpuid) {
        (Policy::Pinned, _) => Pinning::Always,
        // Rewritten, no program reads the host core through cpuid, rdtscp or rdpid: nothing to pin.
        (Policy::Auto, CpuidSource::KvmTable) if !rewrite => Pinning::IfCpuidVaries,
        _ => Pinning::No,
    }
}

fn measure(settings: &Settings) -> Result<HostProfile, VmError> {
    let (policy, rewrite) = (settings.cpu_identity, settings.rewrite);
    let faulting_offered = crate::probe::faulting_offered()?;
    // Offered is not honoured: some hosts accept the MSR bit and still answer ring-3 `cpuid`
    // themselves. Faulting counts only where the probe's `cpuid` trapped; that probe is also
    // the one the fingerprint is made of when faulting is the remedy.
    let faulting_probe = match faulting_offered && policy != Policy::Table {
        true => Some(crate::probe::probe_with(CpuidSource::Faulting)?),
        false => None,
    };
    let faulting_honoured = faulting_probe.as_ref().is_some_and(|p| p.cpuid_trapped);
    let cpuid = cpuid_source(policy, faulting_offered, faulting_honoured)?;
    let fixed_core = || {
        lowest_schedulable_core()
            .ok_or_else(|| VmError::Config { message: "no host core accepts this process's threads".into() })
    };
    let mut varied = None;
    let pinned_core = match pinning(policy, cpuid, rewrite) {
        Pinning::Always => Some(fixed_core()?),
        Pinning::IfCpuidVaries => {
            varied = crate::probe::cpuid_variation(CpuidSource::KvmTable)?;
            match varied {
                Some(_) => Some(fixed_core()?),
                None => None,
            }
        }
        Pinning::No => None,
    };
    let remedy = settings.remedy_with(cpuid, pinned_core);
    let hardware = match (pinned_core, faulting_probe) {
        (Some(c), _) => crate::probe::probe_on_core(c, cpuid)?,
        (None, Some(p)) if cpuid == CpuidSource::Faulting => p,
        _ => crate::probe::probe_with(cpuid)?,
    };
    // The probe under the remedy: rewritten when programs are, so that it sees what they see.
    let probe = match (rewrite, pinned_core) {
        (false, _) => hardware.clone(),
        (true, Some(c)) => on_core(c, || crate::probe::probe_rewritten(cpuid))??,
        (true, None) => crate::probe::probe_rewritten(cpuid)?,
    };
    let fingerprint = Fingerprint::new(remedy, &probe);
    Ok(HostProfile {
        policy,
        faulting_offered,
        faulting_honoured,
        remedy,
        cpuid_varied_between: varied,
        probe,
        hardware,
        fingerprint,
    })
}

/// Where CPUID answers come from under `policy`, given whether the host offers CPUID faulting
/// (the MSR bit sticks) and honours it (ring-3 `cpuid` traps on every core).
fn cpuid_source(policy: Policy, offered: bool, honoured: bool) -> Result<CpuidSource, VmError> {
    match policy {
        Policy::Table => Ok(CpuidSource::KvmTable),
        Policy::Faulting if !offered => Err(VmError::Config {
            message: format!(
                "{ENV}=faulting, but this host does not offer CPUID faulting (MSR_PLATFORM_INFO bit 31); \
                 unset {ENV} to let deja choose"
            ),
        }),
        Policy::Faulting if !honoured => Err(VmError::Config {
            message: format!(
                "{ENV}=faulting, but this host does not honour CPUID faulting: the MSR bit sticks, yet ring-3 \
                 cpuid does not trap; unset {ENV} to let deja choose (it pins the vCPU threads instead)"
            ),
        }),
        _ if honoured => Ok(CpuidSource::Faulting),
        _ => Ok(CpuidSource::KvmTable),
    }
}

impl CpuSetup {
    /// The setup of a VM under `remedy`.
    pub fn of(remedy: &Remedy) -> CpuSetup {
        CpuSetup { faulting: remedy.cpuid == CpuidSource::Faulting, pin: remedy.pinned_core }
    }
}

impl Vm {
    /// Creates a VM with `memory` bytes of RAM, the monitor's structures and a vCPU ready for
    /// ring 3 (but no program yet), with the CPU identity remedy of `settings` and its watchdog.
    pub fn new(memory: u64, settings: &Settings) -> Result<Vm, VmError> {
        let mut vm = Vm::with_setup(memory, CpuSetup::of(&settings.remedy()?))?;
        vm.set_no_progress(settings.no_progress);
        Ok(vm)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::CpuidAnswer;

    fn probe(xcr0: u64, rdpid: Option<u64>) -> HostProbe {
        HostProbe {
            cpuid_trapped: true,
            rdtsc_trapped: false,
            guest_xcr0: xcr0,
            cpuid: vec![CpuidAnswer { leaf: 1, subleaf: 0, regs: deja_kernel::host::cpuid::answer(1, 0) }],
            cpuid_diffs: Vec::new(),
            hypervisor_leaf_visible: false,
            rdtscp_aux: rdpid.map(|c| c as u32),
            rdpid,
            rdrand_runs: true,
            core: None,
            rewritten: false,
        }
    }

    const FAULTING: Remedy = Remedy { cpuid: CpuidSource::Faulting, pinned_core: None, rewrite: false, vdso: true };

    #[test]
    fn fingerprints_are_stable_and_name_what_differs() {
        let a = Fingerprint::new(FAULTING, &probe(0x7, None));
        assert_eq!(a, Fingerprint::new(FAULTING, &probe(0x7, None)));
        assert_eq!(a.id.len(), 16);
        assert!(a.differences(&a).is_empty());
        let b = Fingerprint::new(FAULTING, &probe(0x602e7, Some(1)));
        assert_ne!(a.id, b.id);
        let d = a.differences(&b).join("; ");
        assert!(d.contains("XCR0: recorded 0x602e7, here 0x7"), "{d}");
        assert!(d.contains("rdtscp/rdpid: recorded return the host core's number, here trap"), "{d}");
        let pinned = Remedy { pinned_core: Some(0), ..FAULTING };
        let c = Fingerprint::new(pinned, &probe(0x7, None));
        assert!(a.differences(&c)[0].contains("pinned to host core 0"));
    }

    #[test]
    fn fingerprints_survive_json() {
        let a = Fingerprint::new(FAULTING, &probe(0x7, Some(3)));
        assert_eq!(
            a,
            Fingerprint::new(FAULTING, &probe(0x7, Some(1))),
            "the core number itself is not a property of the host"
        );
        let back: Fingerprint = serde_json::from_str(&serde_json::to_string(&a).unwrap()).unwrap();
        assert_eq!(a, back);
    }

    #[test]
    fn affinity_round_trips_on_a_scratch_thread() {
        let before = allowed_cores();
        assert!(!before.is_empty());
        let core = before[0];
        let seen = on_core(core, || (allowed_cores(), current_core())).unwrap();
        assert_eq!(seen, (vec![core], Some(core)));
        assert_eq!(allowed_cores(), before, "the caller's mask is untouched");
        assert!(schedulable_cores().contains(&core));
    }

    #[test]
    fn settings_parse_as_the_variables_say() {
        let default = Settings::parse(None, None, None).unwrap();
        assert_eq!(default, Settings::default());
        assert_eq!(Settings::parse(Some(""), Some(""), Some("")).unwrap(), default, "empty is unset");
        assert_eq!((default.cpu_identity, default.rewrite, default.vdso), (Policy::Auto, true, true));
        for p in Policy::ALL {
            assert_eq!(Settings::parse(Some(p.name()), None, None).unwrap().cpu_identity, p);
        }
        let off = Settings::parse(Some("table"), Some("off"), Some("off")).unwrap();
        assert_eq!((off.cpu_identity, off.rewrite, off.vdso), (Policy::Table, false, false));
        assert_eq!(Settings::parse(None, Some("on"), Some("on")).unwrap(), default);
        // Refused with the messages deja always gave.
        let err = |c, r, v| Settings::parse(c, r, v).unwrap_err().to_string();
        assert_eq!(
            err(Some("fast"), None, None),
            "CPU identity: DEJA_CPU_IDENTITY=\"fast\" is not a CPU identity policy; use auto, faulting, table or pinned"
        );
        assert_eq!(err(None, Some("no"), None), "CPU identity: DEJA_REWRITE=\"no\": use on or off");
        assert_eq!(err(None, None, Some("0")), "CPU identity: DEJA_VDSO=\"0\": use on or off");
    }

    #[test]
    fn settings_go_to_a_child_as_its_environment_and_come_back_the_same() {
        let limits = [Some(crate::watchdog::DEFAULT_LIMIT), None, Some(std::time::Duration::from_millis(2500))];
        let mut slots = std::collections::BTreeSet::new();
        for cpu_identity in Policy::ALL {
            for (rewrite, vdso) in [(true, true), (true, false), (false, true), (false, false)] {
                for no_progress in limits {
                    let s = Settings { cpu_identity, rewrite, vdso, no_progress };
                    let env: std::collections::BTreeMap<&str, String> = s.as_env().into_iter().collect();
                    let var = |name: &str| env.get(name).map(String::as_str);
                    let back = Settings {
                        no_progress: crate::watchdog::parse_limit(var(crate::watchdog::ENV)),
                        ..Settings::parse(var(ENV), var(REWRITE_ENV), var(VDSO_ENV)).unwrap()
                    };
                    assert_eq!(back, s);
                    assert!(s.slot() < SLOTS);
                    slots.insert((s.slot(), no_progress.is_some()));
                }
            }
        }
        assert_eq!(slots.len(), 2 * SLOTS, "one host profile per CPU identity setting, whatever the watchdog");
    }

    #[test]
    fn different_settings_give_different_remedies() {
        use CpuidSource::{Faulting, KvmTable};
        let on = |cpu_identity| Settings { cpu_identity, ..Settings::default() };
        // Where the host honours faulting, `table` alone keeps KVM's table.
        assert_eq!(cpuid_source(on(Policy::Auto).cpu_identity, true, true).unwrap(), Faulting);
        assert_eq!(cpuid_source(on(Policy::Table).cpu_identity, true, true).unwrap(), KvmTable);
        // Pinning: always under `pinned`; under `auto` on KVM's table only without rewriting.
        assert_eq!(pinning(Policy::Pinned, Faulting, true), Pinning::Always);
        assert_eq!(pinning(Policy::Auto, KvmTable, false), Pinning::IfCpuidVaries);
        assert_eq!(pinning(Policy::Auto, KvmTable, true), Pinning::No, "rewritten, nothing reads the core");
        assert_eq!(pinning(Policy::Auto, Faulting, false), Pinning::No);
        assert_eq!(pinning(Policy::Table, KvmTable, false), Pinning::No, "table is never pinned");
        // Rewriting and the vDSO flow from the settings into the remedy and its fingerprint.
        let default = Settings::default();
        let plain = Settings { rewrite: false, vdso: false, ..default };
        let (a, b) = (default.remedy_with(Faulting, None), plain.remedy_with(Faulting, None));
        assert_eq!((a.rewrite, a.vdso, b.rewrite, b.vdso), (true, true, false, false));
        let (fa, fb) = (Fingerprint::new(a, &probe(0x7, None)), Fingerprint::new(b, &probe(0x7, None)));
        assert_ne!(fa.id, fb.id);
        let d = fa.differences(&fb).join("; ");
        assert!(d.contains("no vDSO") && d.contains("code rewriting rules: recorded code not rewritten"), "{d}");
        let no_vdso = Settings { vdso: false, ..default }.remedy_with(Faulting, None);
        assert_ne!(Fingerprint::new(no_vdso, &probe(0x7, None)).id, fa.id);
        // The watchdog's limit changes no remedy, and shares the host profile.
        let quick = Settings { no_progress: None, ..default };
        assert_eq!(quick.remedy_with(Faulting, None), a);
        assert_eq!(quick.slot(), default.slot());
    }

    #[test]
    fn faulting_is_the_remedy_only_where_it_is_honoured() {
        use CpuidSource::{Faulting, KvmTable};
        for policy in [Policy::Auto, Policy::Pinned] {
            assert_eq!(cpuid_source(policy, true, true).unwrap(), Faulting);
            assert_eq!(cpuid_source(policy, true, false).unwrap(), KvmTable, "offered, not honoured");
            assert_eq!(cpuid_source(policy, false, false).unwrap(), KvmTable);
        }
        assert_eq!(cpuid_source(Policy::Table, true, true).unwrap(), KvmTable);
        assert_eq!(cpuid_source(Policy::Faulting, true, true).unwrap(), Faulting);
        let refused = cpuid_source(Policy::Faulting, true, false).unwrap_err().to_string();
        assert!(refused.contains("does not honour CPUID faulting"), "{refused}");
        let refused = cpuid_source(Policy::Faulting, false, false).unwrap_err().to_string();
        assert!(refused.contains("does not offer CPUID faulting"), "{refused}");
    }
}
