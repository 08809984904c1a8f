//! Naming the first difference between two runs that should have been the same.
//!
//! A [`RunRecord`] keeps, for every life of a run, what a comparison needs: how it ended, the
//! trace digest and per-syscall hashes (with the syscalls themselves when the trace was
//! recorded), the memory digest and per-page hashes, the file-system digest, the VM exit counts,
//! and the output. [`first_difference`] walks two records in a fixed order and names the first
//! component that differs: `--audit`, the explorer's bug confirmation, the worlds of `deja check`
//! and `deja replay` all report a divergence this way.

use deja_kernel::{ExitStatus, RunReport, TraceEntry};
use serde::{Deserialize, Serialize};

use crate::identity::Fingerprint;
use crate::Incarnation;

/// `deja.run-record/1`: a run as two runs are compared.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunRecord {
    /// `deja.run-record/1`.
    pub schema: String,
    /// The core the run's process or thread was pinned to (`None`: not pinned).
    pub core: Option<u32>,
    /// The host cores its vCPU threads were seen on.
    pub host_cores: Vec<u32>,
    /// The host CPU fingerprint of the settings it ran under (set by whoever knows them:
    /// [`RunRecord::new`] leaves it out).
    pub fingerprint: Option<Fingerprint>,
    /// The run's digest.
    pub digest: String,
    /// BLAKE3 of everything the program wrote, stream-tagged, in order.
    pub output_blake3: String,
    /// BLAKE3 of the cluster's decisions and fault ledger (empty for a program).
    pub decisions_blake3: String,
    /// Each life in order: a program's lives, or every life of every node of a cluster.
    pub lives: Vec<LifeRecord>,
}

/// One life of an audited run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LifeRecord {
    /// `life 0`, or `node r1 life 0`.
    pub name: String,
    /// How it ended.
    pub exit: ExitStatus,
    /// Trace digest.
    pub trace_digest: String,
    /// Memory digest.
    pub memory_digest: String,
    /// File-system digest at the end.
    pub fs_digest: Option<String>,
    /// Per-syscall hashes.
    pub entry_hashes: Vec<u64>,
    /// The syscalls (for naming the first diverging one).
    pub trace: Vec<TraceEntry>,
    /// Present pages: (address, hash).
    pub pages: Vec<(u64, u64)>,
    /// Per page, a hash of each 64-byte line (to name the offset where two pages differ).
    #[serde(default)]
    pub page_lines: Vec<Vec<u16>>,
    /// Each path of the file system left, with a hash of what it holds.
    #[serde(default)]
    pub fs_files: Vec<(String, String)>,
    /// VM exits by kind, interruptions excluded: syscalls, exceptions, emulated cpuid,
    /// page-table syncs, thread switches (zero where not counted).
    pub exits: [u64; 5],
}

impl LifeRecord {
    /// The record of one life.
    pub fn new(name: String, report: &RunReport, stats: Option<&crate::VmStats>) -> LifeRecord {
        LifeRecord {
            name,
            exit: report.exit.clone(),
            trace_digest: report.trace_digest.clone(),
            memory_digest: report.memory_digest.clone(),
            fs_digest: report.fs_digest.clone(),
            entry_hashes: report.entry_hashes.clone(),
            trace: report.trace.clone(),
            pages: report.pages.clone(),
            page_lines: report.page_lines.clone(),
            fs_files: report.fs_files.clone(),
            exits: stats
                .map(|s| [s.syscall_exits, s.exception_exits, s.cpuid_exits, s.pt_syncs, s.thread_switches])
                .unwrap_or_default(),
        }
    }
}

/// BLAKE3 (hex) of `bytes`.
pub fn hash(bytes: &[u8]) -> String {
    blake3::hash(bytes).to_hex().to_string()
}

impl RunRecord {
    /// The record of a program run made of `lives`, whose output was `output`.
    pub fn program(digest: String, lives: &[Incarnation], output: &[u8]) -> RunRecord {
        let records = lives
            .iter()
            .enumerate()
            .map(|(i, l)| LifeRecord::new(format!("life {i}"), &l.run.report, Some(&l.run.stats)))
            .collect();
        let cores = lives.iter().flat_map(|l| l.run.stats.host_cores.iter().copied()).collect();
        RunRecord::new(digest, records, output, String::new(), cores)
    }

    /// A record from its parts; `host_cores` in any order.
    pub fn new(
        digest: String,
        lives: Vec<LifeRecord>,
        output: &[u8],
        decisions_blake3: String,
        mut host_cores: Vec<u32>,
    ) -> RunRecord {
        host_cores.sort_unstable();
        host_cores.dedup();
        RunRecord {
            schema: "deja.run-record/1".into(),
            core: None,
            host_cores,
            fingerprint: None,
            digest,
            output_blake3: hash(output),
            decisions_blake3,
            lives,
        }
    }
}

/// The first component in which `b` differs from `a`, in words; `None` if they agree.
///
/// Lives are compared by name. Of the lives both runs have, the one whose syscall trace
/// diverges earliest in virtual time (when the syscalls were recorded; else the first in order)
/// is named first: in a cluster a life more or fewer, or one that ended otherwise, is usually
/// the consequence of an earlier divergence, which this finds.
pub fn first_difference(a: &RunRecord, b: &RunRecord) -> Option<String> {
    let names = |r: &RunRecord| r.lives.iter().map(|l| l.name.clone()).collect::<Vec<_>>();
    let common: Vec<(&LifeRecord, &LifeRecord)> =
        a.lives.iter().filter_map(|x| b.lives.iter().find(|y| y.name == x.name).map(|y| (x, y))).collect();
    // The earliest trace divergence among the common lives.
    let earliest = common
        .iter()
        .enumerate()
        .filter(|(_, (x, y))| x.trace_digest != y.trace_digest)
        .min_by_key(|(k, (x, y))| (divergence_time(x, y).unwrap_or(u64::MAX), *k))
        .map(|(_, p)| *p);
    if let Some((x, y)) = earliest {
        let more = if names(a) != names(b) {
            format!(" (and the runs' lives differ: {} against {})", names(a).join(", "), names(b).join(", "))
        } else {
            String::new()
        };
        return Some(format!("{}: the syscall trace, {}{more}", x.name, trace_difference(x, y)));
    }
    if names(a) != names(b) {
        return Some(format!("lives: {} against {}", names(a).join(", "), names(b).join(", ")));
    }
    for (x, y) in a.lives.iter().zip(&b.lives) {
        let at = &x.name;
        if x.exit != y.exit {
            return Some(format!("{at}: how it ended: {:?} against {:?}", x.exit, y.exit));
        }
        if x.memory_digest != y.memory_digest {
            return Some(format!("{at}: memory, {}", page_difference(x, y)));
        }
        if x.fs_digest != y.fs_digest {
            return Some(format!("{at}: the file system it left{}", file_difference(&x.fs_files, &y.fs_files)));
        }
    }
    if a.decisions_blake3 != b.decisions_blake3 {
        return Some("the cluster's decisions or fault ledger".into());
    }
    for (x, y) in a.lives.iter().zip(&b.lives) {
        if x.exits != y.exits {
            return Some(format!(
                "{}: VM exit counts (syscalls, exceptions, cpuid, page-table syncs, thread switches) {:?} against {:?}",
                x.name, x.exits, y.exits
            ));
        }
    }
    if a.output_blake3 != b.output_blake3 {
        return Some("the program's output".into());
    }
    if a.digest != b.digest {
        return Some(format!("the digest ({} against {}) though every component agrees", a.digest, b.digest));
    }
    None
}

fn describe_entry(life: &LifeRecord, i: usize) -> String {
    match life.trace.get(i) {
        Some(e) => format!(
            "{} at {} ns{}",
            e.text,
            e.vtime_ns,
            e.data.as_ref().map(|d| format!(", data {d}")).unwrap_or_default()
        ),
        None if i < life.entry_hashes.len() => format!("entry {:016x} (syscalls not recorded)", life.entry_hashes[i]),
        None => "nothing (the run had ended)".into(),
    }
}

fn trace_difference(x: &LifeRecord, y: &LifeRecord) -> String {
    let diverging = x.entry_hashes.iter().zip(&y.entry_hashes).position(|(p, q)| p != q);
    let i = match diverging {
        Some(i) => i,
        None if x.entry_hashes.len() != y.entry_hashes.len() => x.entry_hashes.len().min(y.entry_hashes.len()),
        None => return "every syscall agrees; an exception, a completion or a reseed between them differs".into(),
    };
    match (x.trace.get(i), y.trace.get(i)) {
        (Some(a), Some(b)) => format!("first at syscall {i}, {}: {}", field_difference(a, b), a.text),
        _ => format!("first at syscall {i}: {} against {}", describe_entry(x, i), describe_entry(y, i)),
    }
}

/// The argument registers of a syscall, in order.
const ARG_REGISTERS: [&str; 6] = ["rdi", "rsi", "rdx", "r10", "r8", "r9"];

/// The first field in which two recorded syscalls differ, with both values: the number, an
/// argument register (named, and said to be unused when the call takes fewer arguments), the
/// result, the virtual time or the bytes it moved.
fn field_difference(a: &TraceEntry, b: &TraceEntry) -> String {
    if a.nr != b.nr {
        return format!("the syscall: {} against {}", a.text, b.text);
    }
    if let Some(k) = (0..6).find(|&k| a.args[k] != b.args[k]) {
        let used = deja_kernel::syscalls::args(a.nr).is_none_or(|kinds| k < kinds.len());
        let unused = if used { String::new() } else { format!(", which {} does not take", a.name) };
        return format!(
            "register {} (argument {}{unused}): {:#x} against {:#x}",
            ARG_REGISTERS[k],
            k + 1,
            a.args[k],
            b.args[k]
        );
    }
    if a.ret != b.ret {
        let show = |r: Option<u64>| r.map_or("no return (exit)".to_string(), |v| format!("{:#x}", v));
        return format!("the result: {} against {}", show(a.ret), show(b.ret));
    }
    if a.vtime_ns != b.vtime_ns {
        return format!("the virtual time: {} ns against {} ns", a.vtime_ns, b.vtime_ns);
    }
    if a.data != b.data {
        let show = |d: &Option<String>| d.clone().unwrap_or_else(|| "none".into());
        return format!("the bytes it moved: data {} against {}", show(&a.data), show(&b.data));
    }
    "the entries' hashes, though every recorded field agrees".into()
}

/// The virtual time of the first syscall where two lives differ, when both recorded it there.
fn divergence_time(x: &LifeRecord, y: &LifeRecord) -> Option<u64> {
    let i = first_diverging_syscall(x, y)? as usize;
    match (x.trace.get(i), y.trace.get(i)) {
        (Some(p), Some(q)) => Some(p.vtime_ns.min(q.vtime_ns)),
        (Some(p), None) | (None, Some(p)) => Some(p.vtime_ns),
        (None, None) => None,
    }
}

/// The index of the first syscall where two lives differ, if their traces differ there.
pub fn first_diverging_syscall(x: &LifeRecord, y: &LifeRecord) -> Option<u64> {
    if x.trace_digest == y.trace_digest {
        return None;
    }
    let i = x.entry_hashes.iter().zip(&y.entry_hashes).position(|(p, q)| p != q);
    i.or((x.entry_hashes.len() != y.entry_hashes.len()).then(|| x.entry_hashes.len().min(y.entry_hashes.len())))
        .map(|i| i as u64)
}

fn page_difference(a: &LifeRecord, b: &LifeRecord) -> String {
    let (x, y) = (&a.pages, &b.pages);
    if x.is_empty() && y.is_empty() {
        return "the memory digest (pages were not recorded)".into();
    }
    let (mut i, mut j) = (0, 0);
    while i < x.len() || j < y.len() {
        match (x.get(i), y.get(j)) {
            (Some(p), Some(q)) if p.0 == q.0 => {
                if p.1 != q.1 {
                    let line = match (a.page_lines.get(i), b.page_lines.get(j)) {
                        (Some(l), Some(m)) => l.iter().zip(m).position(|(u, v)| u != v),
                        _ => None,
                    };
                    return match line {
                        Some(n) => {
                            let off = n * deja_kernel::record::trace::PAGE_LINE;
                            format!(
                                "first at the page at {:#x}, in its bytes {off:#x}..{:#x} (address {:#x})",
                                p.0,
                                off + deja_kernel::record::trace::PAGE_LINE,
                                p.0 + off as u64
                            )
                        }
                        None => format!("first at the page at {:#x}", p.0),
                    };
                }
                i += 1;
                j += 1;
            }
            (Some(p), Some(q)) if p.0 < q.0 => return format!("the page at {:#x} is present in one run only", p.0),
            (Some(_), Some(q)) => return format!("the page at {:#x} is present in one run only", q.0),
            (Some(p), None) => return format!("the page at {:#x} is present in one run only", p.0),
            (None, Some(q)) => return format!("the page at {:#x} is present in one run only", q.0),
            (None, None) => break,
        }
    }
    "every page agrees by its hash".into()
}

/// `: /data/wal differs` (or is in one run only), from the per-path hashes, when recorded.
fn file_difference(x: &[(String, String)], y: &[(String, String)]) -> String {
    let a: std::collections::BTreeMap<&str, &str> = x.iter().map(|(p, h)| (p.as_str(), h.as_str())).collect();
    let b: std::collections::BTreeMap<&str, &str> = y.iter().map(|(p, h)| (p.as_str(), h.as_str())).collect();
    let paths: std::collections::BTreeSet<&str> = a.keys().chain(b.keys()).copied().collect();
    for p in paths {
        match (a.get(p), b.get(p)) {
            (Some(h), Some(k)) if h != k => return format!(": {p} differs (contents or mode)"),
            (Some(_), None) | (None, Some(_)) => return format!(": {p} exists in one run only"),
            _ => {}
        }
    }
    String::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn life(name: &str, hashes: &[u64], memory: &str, pages: &[(u64, u64)]) -> LifeRecord {
        LifeRecord {
            name: name.into(),
            exit: ExitStatus::Exited { code: 0 },
            trace_digest: format!("{hashes:?}"),
            memory_digest: memory.into(),
            fs_digest: Some("fs".into()),
            entry_hashes: hashes.to_vec(),
            trace: Vec::new(),
            pages: pages.to_vec(),
            page_lines: Vec::new(),
            fs_files: Vec::new(),
            exits: [3, 1, 0, 0, 0],
        }
    }

    fn record(lives: Vec<LifeRecord>) -> RunRecord {
        RunRecord {
            schema: "deja.run-record/1".into(),
            core: None,
            host_cores: vec![0],
            fingerprint: None,
            digest: "d".into(),
            output_blake3: "o".into(),
            decisions_blake3: String::new(),
            lives,
        }
    }

    #[test]
    fn identical_records_have_no_difference() {
        let a = record(vec![life("life 0", &[1, 2, 3], "m", &[(0x1000, 7)])]);
        assert_eq!(first_difference(&a, &a.clone()), None);
    }

    #[test]
    fn each_component_is_named_in_order() {
        let a = record(vec![life("life 0", &[1, 2, 3], "m", &[(0x1000, 7), (0x2000, 8)])]);
        let mut b = a.clone();
        b.lives[0].entry_hashes[1] = 9;
        b.lives[0].trace_digest = "other".into();
        b.lives[0].memory_digest = "other".into();
        let d = first_difference(&a, &b).unwrap();
        assert!(d.starts_with("life 0: the syscall trace, first at syscall 1"), "{d}");
        assert_eq!(first_diverging_syscall(&a.lives[0], &b.lives[0]), Some(1));

        let mut c = a.clone();
        c.lives[0].memory_digest = "other".into();
        c.lives[0].pages[1].1 = 0;
        assert_eq!(first_difference(&a, &c).unwrap(), "life 0: memory, first at the page at 0x2000");
        c.lives[0].pages.push((0x3000, 1));
        c.lives[0].pages[1].1 = 8;
        assert_eq!(first_difference(&a, &c).unwrap(), "life 0: memory, the page at 0x3000 is present in one run only");

        let mut f = a.clone();
        f.lives[0].fs_digest = None;
        assert_eq!(first_difference(&a, &f).unwrap(), "life 0: the file system it left");

        let mut e = a.clone();
        e.lives[0].exits[2] = 5;
        assert!(first_difference(&a, &e).unwrap().contains("VM exit counts"));

        let mut o = a.clone();
        o.output_blake3 = "x".into();
        assert_eq!(first_difference(&a, &o).unwrap(), "the program's output");

        let mut l = a.clone();
        l.lives.push(life("life 1", &[], "m", &[]));
        assert!(first_difference(&a, &l).unwrap().starts_with("lives: life 0 against life 0, life 1"));
    }

    #[test]
    fn of_two_clusters_the_earliest_trace_divergence_is_named_before_a_life_more_or_less() {
        // Node b diverged first, in virtual time; node a's later divergence cost it a restart.
        let timed = |name: &str, hashes: &[u64], t0: u64| {
            let mut l = life(name, hashes, "m", &[]);
            l.trace = hashes
                .iter()
                .enumerate()
                .map(|(i, h)| TraceEntry {
                    index: i as u64,
                    vtime_ns: t0 + i as u64 * 1000,
                    text: format!("call {h}"),
                    ..entry([0; 6], 0)
                })
                .collect();
            l
        };
        let a = record(vec![
            timed("node a life 0", &[1, 2, 3, 4], 0),
            timed("node a life 1", &[1], 9000),
            timed("node b life 0", &[5, 6, 7], 0),
        ]);
        let b = record(vec![timed("node a life 0", &[1, 2, 3, 9], 0), timed("node b life 0", &[5, 8, 7], 0)]);
        let d = first_difference(&a, &b).unwrap();
        assert!(d.starts_with("node b life 0: the syscall trace, first at syscall 1"), "{d}");
        assert!(d.contains("and the runs' lives differ"), "{d}");
    }

    fn entry(args: [u64; 6], ret: u64) -> TraceEntry {
        TraceEntry {
            index: 40,
            nr: 131,
            name: "sigaltstack".into(),
            args,
            ret: Some(ret),
            vtime_ns: 41_000,
            data: Some("0c552b971ca64540".into()),
            text: "sigaltstack(NULL, 0x7fffffffed60) = 0".into(),
        }
    }

    #[test]
    fn a_trace_divergence_names_the_field_and_both_values() {
        let mut a = record(vec![life("life 0", &[1, 2], "m", &[])]);
        a.lives[0].trace = vec![entry([0; 6], 0), entry([0, 0x7fff_ffff_ed60, 0, 0, 0x1234_0000_0001, 0], 0)];
        let mut b = a.clone();
        b.lives[0].entry_hashes[1] = 3;
        b.lives[0].trace_digest = "other".into();
        b.lives[0].trace[1].args[4] = 0x5678_0000_0001;
        let d = first_difference(&a, &b).unwrap();
        assert!(
            d.contains("first at syscall 1, register r8 (argument 5, which sigaltstack does not take): 0x123400000001 against 0x567800000001"),
            "{d}"
        );
        b.lives[0].trace[1].args[4] = 0x1234_0000_0001;
        b.lives[0].trace[1].ret = Some(u64::MAX - 13);
        assert!(first_difference(&a, &b).unwrap().contains("the result: 0x0 against 0xfffffffffffffff2"));
        b.lives[0].trace[1].ret = Some(0);
        b.lives[0].trace[1].data = Some("ffff".into());
        assert!(first_difference(&a, &b).unwrap().contains("the bytes it moved: data 0c552b971ca64540 against ffff"));
    }

    #[test]
    fn a_memory_divergence_names_the_offset_and_a_file_one_the_path() {
        let mut a = record(vec![life("life 0", &[1], "m", &[(0x1000, 7)])]);
        a.lives[0].page_lines = vec![vec![0; 64]];
        a.lives[0].fs_files = vec![("/data/a".into(), "1".into()), ("/data/b".into(), "2".into())];
        let mut b = a.clone();
        b.lives[0].memory_digest = "other".into();
        b.lives[0].pages[0].1 = 8;
        b.lives[0].page_lines[0][3] = 9;
        assert_eq!(
            first_difference(&a, &b).unwrap(),
            "life 0: memory, first at the page at 0x1000, in its bytes 0xc0..0x100 (address 0x10c0)"
        );
        let mut c = a.clone();
        c.lives[0].fs_digest = Some("other".into());
        c.lives[0].fs_files[1].1 = "3".into();
        assert_eq!(
            first_difference(&a, &c).unwrap(),
            "life 0: the file system it left: /data/b differs (contents or mode)"
        );
        c.lives[0].fs_files.pop();
        assert_eq!(
            first_difference(&a, &c).unwrap(),
            "life 0: the file system it left: /data/b exists in one run only"
        );
    }

    #[test]
    fn a_shorter_trace_diverges_where_it_ends() {
        let a = record(vec![life("life 0", &[1, 2, 3], "m", &[])]);
        let b = record(vec![life("life 0", &[1, 2], "m", &[])]);
        let d = first_difference(&a, &b).unwrap();
        assert!(d.contains("first at syscall 2") && d.contains("nothing (the run had ended)"), "{d}");
    }
}
