//! What `deja run` says about a run: the JSON summary (`--json`, `--report-out`) and the text
//! on stderr.

use std::collections::BTreeMap;
use std::io::Write;

use deja_kernel::{ExitStatus, RunReport};
use serde::Serialize;

/// The schema of a run's JSON summary (`contracts/run-report.schema.json`).
pub const RUN_REPORT_SCHEMA: &str = "deja.run-report/1";

/// The JSON summary of a run ([`RUN_REPORT_SCHEMA`]): what `--json` prints and `--report-out`
/// writes. Its fields are declared in the order the summary lists them, by name; it is written
/// through [`RunSummary::to_json`], which orders the members of the objects inside it by name
/// as well.
#[derive(Debug, Clone, Serialize)]
pub struct RunSummary<'a> {
    /// The program's last life failed an assertion.
    pub assertion_failed: bool,
    /// The assertion catalogue and its outcomes.
    pub assertions: &'a [deja_kernel::AssertionReport],
    /// The `--audit` verdict, if one was asked for.
    pub audit: Option<&'a serde_json::Value>,
    /// The coverage summary, for instrumented programs.
    pub coverage: &'a Option<deja_kernel::CoverageSummary>,
    /// How many decisions the run took.
    pub decisions: usize,
    /// The run's digest.
    pub digest: &'a str,
    /// Durable writes the program made.
    pub durable_writes: u64,
    /// How many SDK events it emitted.
    pub events: usize,
    /// How it ended.
    pub exit: &'a ExitStatus,
    /// The exit code `deja run` gives for it.
    pub exit_code: i32,
    /// The fault ledger.
    pub faults: &'a [deja_kernel::FaultRecord],
    /// The host's identity.
    pub host: HostSummary<'a>,
    /// What the run was made of, by BLAKE3 (`None` for a run continued from a snapshot).
    pub inputs: Option<&'a RunInputs>,
    /// What code rewriting did: the code objects, sites rewritten and refused, traps answered.
    pub host_channels: &'a deja_kernel::host::hostchan::HostChannelReport,
    /// The host's determinism hazards under the remedy in force.
    pub host_hazards: Vec<String>,
    /// The digest of the final memory.
    pub memory_digest: &'a str,
    /// Paths the program looked for that this host has and the run was not given, each with
    /// the `--file` that provides it (a run in a root, or continued from a snapshot: none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub not_given: Vec<deja_inputs::not_given::NotGiven>,
    /// Malformed SDK requests.
    pub protocol_errors: u64,
    /// The command that reproduces the run.
    pub replay: &'a str,
    /// [`RUN_REPORT_SCHEMA`].
    pub schema: &'static str,
    /// When the program declared its setup complete.
    pub setup_complete: &'a Option<deja_kernel::LifecycleRecord>,
    /// Syscalls by name.
    pub syscall_counts: &'a BTreeMap<String, u64>,
    /// Syscalls served.
    pub syscalls: u64,
    /// The digest of the syscall trace.
    pub trace_digest: &'a str,
    /// Where the kernel model served the run: `host` or `guest` (`--kernel`).
    pub kernel: &'static str,
    /// Calls served without what Linux would add (see `RunReport::unmodelled`), when any.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub unmodelled: &'a BTreeMap<String, u64>,
    /// Unsupported syscalls by name.
    pub unsupported_syscalls: &'a BTreeMap<String, u64>,
    /// Calls (clock reads, `getcpu`) served by the vDSO without an exit (`None`: no vDSO).
    pub vdso_calls: Option<u64>,
    /// Virtual time at the end, in ns.
    pub virtual_time_ns: u64,
    /// The VM's counters.
    pub vm: &'a deja_vmm::VmStats,
}

/// Every input of a run by BLAKE3: what a replay must be given again.
#[derive(Debug, Clone, Serialize)]
pub struct RunInputs {
    /// The program's path in the guest.
    pub program: String,
    /// BLAKE3 of the program's bytes.
    pub program_blake3: String,
    /// Each declared file (with a dynamically linked program's loader and libraries from the
    /// host): guest path → BLAKE3 of its bytes.
    pub files: BTreeMap<String, String>,
    /// The root the run had (`--image` or `--root`).
    pub root: Option<crate::rootfs::RootInput>,
    /// BLAKE3 of the bytes on stdin.
    pub stdin_blake3: String,
}

impl RunInputs {
    /// The inputs of `spec`, whose root came from `root`.
    pub fn of(spec: &deja_kernel::ProgramSpec, root: Option<&crate::rootfs::RootInput>) -> RunInputs {
        let hash = |b: &[u8]| blake3::hash(b).to_hex().to_string();
        RunInputs {
            program: spec.exe_path.clone(),
            program_blake3: hash(&spec.image),
            files: spec.files.iter().map(|(p, d)| (p.clone(), hash(d))).collect(),
            root: root.cloned(),
            stdin_blake3: hash(&spec.stdin),
        }
    }
}

impl<'a> RunSummary<'a> {
    /// The summary of `report`, a life of `run` on `host`.
    pub fn new(
        report: &'a RunReport,
        run: &'a deja_vmm::Run,
        host: &'a deja_vmm::HostProfile,
        audit: Option<&'a serde_json::Value>,
        replay: &'a str,
        inputs: Option<&'a RunInputs>,
    ) -> RunSummary<'a> {
        RunSummary {
            assertion_failed: report.assertion_failed(),
            assertions: &report.assertions,
            audit,
            coverage: &report.coverage,
            decisions: report.decisions.len(),
            digest: &report.digest,
            durable_writes: report.durable_writes,
            events: report.events.len(),
            exit: &report.exit,
            exit_code: report.exit.code(),
            faults: &report.faults,
            host: HostSummary::new(host),
            inputs,
            host_channels: &report.host_channels,
            host_hazards: host.hazards(),
            memory_digest: &report.memory_digest,
            not_given: match inputs {
                Some(i) if i.root.is_none() => deja_inputs::not_given::on_this_host(&report.not_found),
                _ => Vec::new(),
            },
            protocol_errors: report.protocol_errors,
            replay,
            schema: RUN_REPORT_SCHEMA,
            setup_complete: &report.setup_complete,
            syscall_counts: &report.syscall_counts,
            syscalls: report.syscalls,
            trace_digest: &report.trace_digest,
            kernel: if run.stats.host_calls > 0 { "guest" } else { "host" },
            unmodelled: &report.unmodelled,
            unsupported_syscalls: &report.unsupported,
            vdso_calls: report.vdso_calls,
            virtual_time_ns: report.virtual_time_ns,
            vm: &run.stats,
        }
    }

    /// As JSON, every object's members ordered by name (the layout the summary has always had).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("plain data serializes")
    }
}

/// The `host` object of a report: the fingerprint, the remedy in force, what closes each host
/// channel and the hazards left.
#[derive(Debug, Clone, Serialize)]
pub struct HostSummary<'a> {
    /// What closes each host channel here.
    pub channels: Vec<deja_vmm::identity::ChannelStatus>,
    /// The fingerprint every artifact records.
    pub fingerprint: &'a deja_vmm::Fingerprint,
    /// The determinism hazards left.
    pub hazards: Vec<String>,
    /// What `DEJA_CPU_IDENTITY` asked for.
    pub policy: &'a deja_vmm::identity::Policy,
    /// The remedy in force, in words.
    pub remedy: String,
}

impl<'a> HostSummary<'a> {
    /// The summary of `host`.
    pub fn new(host: &'a deja_vmm::HostProfile) -> HostSummary<'a> {
        HostSummary {
            channels: host.channels(),
            fingerprint: &host.fingerprint,
            hazards: host.hazards(),
            policy: &host.policy,
            remedy: host.remedy.to_string(),
        }
    }

    /// As JSON, every object's members ordered by name.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("plain data serializes")
    }
}

pub(crate) fn print_assertions(e: &mut impl Write, report: &RunReport, replay: &str) {
    if report.assertions.is_empty() {
        return;
    }
    let failed = report.assertions.iter().filter(|a| a.bug).count();
    let _ = writeln!(e, "deja: assertions ({} catalogued, {failed} failed):", report.assertions.len());
    for a in &report.assertions {
        let status = a.status.name().to_string();
        let _ = writeln!(
            e,
            "deja:   {:<11} {:<21} {:<48} {}:{}  (hits {}, passes {}, failures {})",
            if a.bug { status.to_uppercase() } else { status },
            a.kind,
            format!("{:?}", a.message),
            a.file,
            a.line,
            a.hits,
            a.passes,
            a.failures
        );
        if let (true, Some(f)) = (a.bug, &a.first_failure) {
            let _ = writeln!(
                e,
                "deja:               first failure at syscall {}, virtual time {} ns, node {}, thread {}: {}",
                f.syscall_index,
                f.virtual_time_ns,
                f.node,
                f.thread,
                if f.details.is_empty() { "(no details)" } else { &f.details }
            );
        }
    }
    if failed > 0 {
        let _ = writeln!(e, "deja: replay this run exactly: {replay}");
    }
    if let Some(c) = &report.coverage {
        let _ = writeln!(e, "deja: coverage: {} of {} edges hit, map digest {}", c.edges_hit, c.counters, c.map_digest);
    }
}

pub(crate) fn print_text_summary(
    report: &RunReport,
    run: &deja_vmm::Run,
    host: Option<&deja_vmm::HostProfile>,
    replay: &str,
    not_given: &[deja_inputs::not_given::NotGiven],
) {
    let mut e = std::io::stderr().lock();
    let _ = writeln!(e, "deja: {}", describe_exit(&report.exit));
    // A program that failed may have failed for want of what it was not given.
    if report.exit.code() != 0 && !not_given.is_empty() {
        let _ = writeln!(e, "deja: the program looked for files this host has and the run was not given:");
        for n in not_given.iter().take(5) {
            let first = match n.looked_for.as_slice() {
                [only] if *only == n.path => String::new(),
                [first, ..] => format!(" (looked for {first}{})", if n.looked_for.len() > 1 { ", ..." } else { "" }),
                [] => String::new(),
            };
            let _ = writeln!(e, "deja:   {}{first}: {}", n.path, n.provide);
        }
        if not_given.len() > 5 {
            let _ = writeln!(e, "deja:   and {} more (--json lists them as not_given)", not_given.len() - 5);
        }
    }
    if let Some(why) = &report.not_fail_stop {
        let _ = writeln!(e, "deja: {why}");
        let _ = writeln!(e, "deja: replay this run exactly: {replay}");
    }
    print_assertions(&mut e, report, replay);
    let mut counts: Vec<(&String, &u64)> = report.syscall_counts.iter().collect();
    counts.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let top: Vec<String> = counts.iter().take(8).map(|(n, c)| format!("{n} {c}")).collect();
    let _ = writeln!(e, "deja: {} syscalls ({})", report.syscalls, top.join(", "));
    if report.unsupported.is_empty() {
        let _ = writeln!(e, "deja: unsupported syscalls: none");
    } else {
        let list: Vec<String> = report.unsupported.iter().map(|(n, c)| format!("{n} ×{c}")).collect();
        let _ = writeln!(e, "deja: unsupported syscalls (answered ENOSYS): {}", list.join(", "));
    }
    if !report.unmodelled.is_empty() {
        let list: Vec<String> = report.unmodelled.iter().map(|(n, c)| format!("{n} ×{c}")).collect();
        let _ = writeln!(e, "deja: served without what Linux would add: {}", list.join(", "));
    }
    match report.vdso_calls {
        Some(n) => {
            let _ = writeln!(e, "deja: vDSO calls (clock reads, getcpu) served without an exit: {n}");
        }
        None => {
            let _ = writeln!(e, "deja: vDSO: off (every clock read is a syscall)");
        }
    }
    let vt = report.virtual_time_ns;
    let _ = writeln!(e, "deja: virtual time {}.{:06} s", vt / 1_000_000_000, (vt % 1_000_000_000) / 1000);
    let _ = writeln!(e, "deja: trace digest {}", report.digest);
    let host_calls = match run.stats.host_calls {
        0 => String::new(),
        n => format!(", {n} host calls of the kernel in the guest"),
    };
    let _ = writeln!(
        e,
        "deja: {} VM exits ({} syscalls, {} exceptions, {} page-table syncs{host_calls}), {:.1} ms in the guest",
        run.stats.exits,
        run.stats.syscall_exits,
        run.stats.exception_exits,
        run.stats.pt_syncs,
        run.stats.host_run_ns as f64 / 1e6
    );
    print_host_channels(&mut e, &report.host_channels);
    match host {
        None => {
            let _ = writeln!(e, "deja: host determinism hazards: not listed (--no-probe)");
        }
        Some(p) => {
            let _ = writeln!(e, "deja: host CPU fingerprint {} ({})", p.fingerprint.id, p.remedy);
            let hazards = p.hazards();
            if hazards.is_empty() {
                let _ = writeln!(e, "deja: host determinism hazards: none");
            } else {
                let _ = writeln!(e, "deja: host determinism hazards:");
                for h in hazards {
                    let _ = writeln!(e, "deja:   - {h}");
                }
            }
        }
    }
}

/// One line per code object rewriting planned (`deja: code rewritten: /bin/kv: 30 cpuid, 1
/// xgetbv`), its refused sites, and the traps answered.
pub(crate) fn print_host_channels(e: &mut impl Write, hc: &deja_kernel::host::hostchan::HostChannelReport) {
    use deja_rewrite::Channel;
    if hc.rewrite == deja_kernel::host::hostchan::Rewrite::Off {
        let _ = writeln!(e, "deja: code rewriting: off (DEJA_REWRITE=off)");
        return;
    }
    let list = |c: &deja_kernel::host::hostchan::ChannelCounts| {
        let v: Vec<String> =
            Channel::ALL.iter().filter(|&&ch| c.get(ch) > 0).map(|&ch| format!("{} {ch}", c.get(ch))).collect();
        if v.is_empty() {
            "nothing".to_string()
        } else {
            v.join(", ")
        }
    };
    for o in &hc.objects {
        let _ = writeln!(
            e,
            "deja: code rewritten: {} ({} KiB of code): {}{}",
            o.name,
            o.code_bytes.div_ceil(1024),
            list(&o.rewritten),
            if o.refused.is_empty() { String::new() } else { format!("; {} left alone", o.refused.len()) }
        );
        for r in o.refused.iter().take(8) {
            let why = match r.doubt {
                deja_rewrite::Doubt::NotReached => "no decoding path reaches it",
                deja_rewrite::Doubt::Overlapping => "decoding paths overlap there",
                deja_rewrite::Doubt::Disagree => "the two decodings disagree there",
            };
            let _ = writeln!(e, "deja:   left alone, runs natively: {} at {:#x} ({why})", r.channel, r.addr);
        }
    }
    if hc.objects_dropped > 0 {
        let _ = writeln!(e, "deja: code rewritten in {} more regions (not listed)", hc.objects_dropped);
    }
    if hc.traps.total() > 0 {
        let _ = writeln!(e, "deja: rewritten instructions answered by deja: {}", list(&hc.traps));
    }
    let j = &hc.jumps;
    if j.mode == deja_kernel::host::jumps::Jumps::On {
        let left = j.syscalls - j.sites;
        let _ = writeln!(
            e,
            "deja: syscall jumps: {} of the image's {} syscall sites jump to the kernel{}",
            j.sites,
            j.syscalls,
            match left {
                0 => String::new(),
                n => format!(
                    "; {n} trap ({} a path enters the window, {} a window reads RIP or branches, {} short, {} unproven, {} unplaced)",
                    j.branch_target, j.not_relocatable, j.short_window, j.unproven, j.unplaced
                ),
            }
        );
    }
}

/// How a life ended, in words (`exited with code 1`, `killed by SIGSEGV (signal 11): … at rip …`).
pub(crate) fn describe_exit(status: &ExitStatus) -> String {
    match status {
        ExitStatus::Exited { code } => format!("exited with code {code}"),
        ExitStatus::Signaled { signal, name, fault } => {
            let mut s = format!("killed by {name} (signal {signal})");
            if let Some(f) = fault {
                s.push_str(&format!(": {}", f.description));
                // Not a CPU fault (a deadlock, a refused signal frame): no instruction to name.
                if f.vector != 0 || f.rip != 0 {
                    s.push_str(&format!(" at rip {:#x}", f.rip));
                }
                if let Some(a) = f.addr {
                    s.push_str(&format!(", address {a:#x}"));
                }
            }
            s
        }
    }
}
