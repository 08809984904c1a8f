//! The [`Kernel`]: loading, syscall dispatch, exceptions and the final report.
//!
//! The syscall handlers live in [`sys_path`](crate::sys_path) (paths, opening, metadata),
//! [`sys_io`](crate::sys_io) (reading and writing fds), [`sys_fs`](crate::sys_fs) (durable
//! writes, syncs, the namespace), [`sys_mem`](crate::sys_mem) (the address space),
//! [`sys_net`](crate::sys_net) (sockets, pipes, epoll) and [`sys_proc`](crate::sys_proc)
//! (process, signals, time, identity), each reached through its row of the table in
//! [`syscalls`](crate::syscalls); this module owns the state.
//!
//! [`Kernel::save`] encodes the whole state as `postcard` of the derived serde form of
//! [`Kernel`] (through the private mirror `KernelDef`) and its parts, fields in declaration
//! order: changing the order or the set of fields of any saved struct changes the format. The bytes carry no version: the caller's
//! envelope carries the schema version. See [`persist`](crate::persist) for the helpers and
//! for what [`Kernel::restore`] checks.
//!
//! This module holds the state, its construction ([`Kernel::load`]) and its save and restore;
//! [`dispatch`] serves syscalls and exceptions, and [`report`] answers the shell's questions:
//! registers, counts, the disk and crash states, decisions and the final report.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use snafu::{OptionExt as _, ResultExt as _};

use crate::clock::{Clock, RDTSC_COST_NS, SYSCALL_COST_NS};
use crate::coverage::{CoverageRegion, MAX_COVERAGE_COUNTERS, SANCOV_SECTION};
use crate::cpuid::Emulated;
use crate::elf::{self, BiasOverflowsSnafu, OutsideLoadableSnafu, ET_DYN, PF_R, PF_W, PF_X};
use crate::errno::*;
use crate::faults::CrashState;
use crate::faults::{FaultKind, FaultRecord, FaultState};
use crate::fd::FdTable;
use crate::fs::Fs;
use crate::mappings::{Access, FaultError, Mappings, Vma, VmaKind};
use crate::oracle::Oracle;
use crate::persist::{ensure, DecodeSnafu, RestoreError, TrailingBytesSnafu};
use crate::rng::RandomStream;
use crate::signal::{self, Signals};
use crate::stack::{self, AuxInfo};
use crate::threads::{Threads, BLOCKED_RETURN};
use crate::trace::{memory_digest, DataHasher, ExceptionRecord, Tracer};
use crate::user_layout::*;
use crate::{
    ArgsTooBigSnafu, DiskOverCapacitySnafu, GuestPathSnafu, InvalidDiskSnafu, MalformedSnafu, OutOfMemorySnafu,
    TooBigSnafu,
};
use crate::{
    AssertionReport, Entry, Exception, ExceptionOutcome, ExitStatus, FaultInfo, LoadError, Memory, ProgramSpec, Prot,
    RunReport, Stream, SyscallOutcome, PAGE_SIZE,
};
use crate::{DecisionRecord, Disk};

mod dispatch;
mod report;

pub use report::CrashStates;

/// Share of the shell's free frames kept back for page tables when the commit capacity is
/// fixed at load time (3%).
pub const PAGE_TABLE_MARGIN_PERCENT: u64 = 3;
/// How often the same page fault may be retried at the same instruction before the kernel
/// gives up (the shell did not map what the kernel populated).
const MAX_FAULT_REPEATS: u32 = 4;
/// Largest transfer of one `read`/`write`-like call (like Linux's `MAX_RW_COUNT`, but smaller
/// so that one call never needs a huge host buffer); longer requests are partial.
pub const MAX_IO: u64 = 16 << 20;

/// Why a syscall handler stopped short of a plain return value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SysStop {
    /// Return `-errno`.
    Err(i32),
    /// The program is over.
    Exit(ExitStatus),
    /// Not implemented: `-ENOSYS`, counted in [`RunReport::unsupported`].
    Unsupported,
    /// The calling thread blocked or exited: no return value now (see [`crate::threads`]).
    Block,
}

impl From<i32> for SysStop {
    fn from(e: i32) -> Self {
        SysStop::Err(e)
    }
}

/// The result of a syscall handler.
pub(crate) type SysResult = Result<u64, SysStop>;

/// The syscall core of one program: its address space, fds, clock, random stream and trace.
///
/// The shell calls [`Kernel::load`] once, then [`Kernel::syscall`] for every trapped `syscall`
/// and [`Kernel::exception`] for every CPU exception of ring-3 code, until one of them ends the
/// program; then [`Kernel::finish`].
///
/// The whole state is `Clone` (for in-memory forks) and persistable with [`Kernel::save`] /
/// [`Kernel::restore`] (for snapshots).
#[derive(Clone)]
pub struct Kernel {
    pub(crate) mappings: Mappings,
    pub(crate) fs: Fs,
    pub(crate) faults: FaultState,
    pub(crate) locks: BTreeMap<(u64, u64), (u16, u64)>,
    pub(crate) fds: FdTable,
    pub(crate) clock: Clock,
    pub(crate) rng: RandomStream,
    pub(crate) tracer: Tracer,
    pub(crate) output: Vec<(Stream, Vec<u8>)>,
    pub(crate) counts: BTreeMap<String, u64>,
    pub(crate) unsupported: BTreeMap<String, u64>,
    pub(crate) fs_base: u64,
    pub(crate) gs_base: u64,
    pub(crate) brk_start: u64,
    pub(crate) brk_cur: u64,
    pub(crate) signals: Signals,
    pub(crate) rlimits: [(u64, u64); 16],
    pub(crate) umask: u32,
    pub(crate) clear_child_tid: u64,
    pub(crate) robust_list: (u64, u64),
    pub(crate) comm: [u8; 16],
    exec_stack: bool,
    last_fault: Option<(u64, u64)>,
    fault_repeats: u32,
    pub(crate) exit: Option<ExitStatus>,
    entry: Entry,
    pub(crate) oracle: Oracle,
    coverage: Option<CoverageRegion>,
    pub(crate) threads: Threads,
    pub(crate) net: crate::net::Net,
}

/// The saved form of [`Kernel`]: serde's remote derive, which reads and builds a `Kernel`
/// field by field. Its field order is the encoding. It must name every field of `Kernel`
/// (building the `Kernel` does not compile otherwise). It is private, and `Kernel` implements
/// no serde trait, so nothing decodes a `Kernel` around [`Kernel::restore`]'s checks.
#[derive(Serialize, Deserialize)]
#[serde(remote = "Kernel")]
struct KernelDef {
    mappings: Mappings,
    fs: Fs,
    faults: FaultState,
    locks: BTreeMap<(u64, u64), (u16, u64)>,
    fds: FdTable,
    clock: Clock,
    rng: RandomStream,
    tracer: Tracer,
    output: Vec<(Stream, Vec<u8>)>,
    counts: BTreeMap<String, u64>,
    unsupported: BTreeMap<String, u64>,
    fs_base: u64,
    gs_base: u64,
    brk_start: u64,
    brk_cur: u64,
    signals: Signals,
    rlimits: [(u64, u64); 16],
    umask: u32,
    clear_child_tid: u64,
    robust_list: (u64, u64),
    comm: [u8; 16],
    exec_stack: bool,
    last_fault: Option<(u64, u64)>,
    fault_repeats: u32,
    #[serde(with = "crate::persist::exit_status")]
    exit: Option<ExitStatus>,
    entry: Entry,
    oracle: Oracle,
    coverage: Option<CoverageRegion>,
    threads: Threads,
    net: crate::net::Net,
}

/// A `Kernel` to encode.
struct Saving<'a>(&'a Kernel);

impl Serialize for Saving<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        KernelDef::serialize(self.0, s)
    }
}

/// A decoded, not yet checked `Kernel`.
struct Unchecked(Kernel);

impl<'de> Deserialize<'de> for Unchecked {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        KernelDef::deserialize(d).map(Unchecked)
    }
}

impl std::fmt::Debug for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kernel")
            .field("syscalls", &self.tracer.syscalls())
            .field("virtual_time_ns", &self.clock.now_ns())
            .field("entry", &self.entry)
            .field("brk", &self.brk_cur)
            .field("fs_base", &self.fs_base)
            .field("mappings", &self.mappings.iter().count())
            .field("commit", &self.commit())
            .field("exit", &self.exit)
            .finish_non_exhaustive()
    }
}

impl Kernel {
    /// Loads the ELF image into `mem`, builds the initial stack and returns the entry state.
    pub fn load(spec: ProgramSpec, mem: &mut dyn Memory) -> Result<(Kernel, Entry), LoadError> {
        let img = elf::parse(&spec.image)?;
        let free = mem.free_frames();
        let capacity = free - free / 100 * PAGE_TABLE_MARGIN_PERCENT - (free % 100) * PAGE_TABLE_MARGIN_PERCENT / 100;
        let mut mappings = Mappings::new(capacity);

        // Where each segment goes.
        let min_page = page_down(img.min_vaddr());
        let reloc = |v: u64| -> Option<u64> {
            if img.e_type == ET_DYN {
                PIE_BASE.checked_add(v.checked_sub(min_page)?)
            } else {
                Some(v)
            }
        };
        let limit = STACK_TOP - STACK_SIZE;
        let mut segs = Vec::new();
        let mut total_pages = 0u64;
        for p in img.loads() {
            let (vaddr, memsz) = (p.p_vaddr, p.p_memsz);
            let end = reloc(vaddr).and_then(|start| Some((start, start.checked_add(memsz)?)));
            let (start, end) = end.context(BiasOverflowsSnafu { vaddr, memsz }).context(MalformedSnafu)?;
            if start < USER_START || end > limit {
                let outside = OutsideLoadableSnafu { start, end, low: USER_START, high: limit };
                return Err(outside.build()).context(MalformedSnafu);
            }
            let (ps, pe) = (page_down(start), page_up(end).unwrap_or(limit));
            total_pages += (pe - ps) / PAGE_SIZE;
            let mut prot = 0;
            if p.p_flags & PF_R != 0 {
                prot |= Prot::READ.0;
            }
            if p.p_flags & PF_W != 0 {
                prot |= Prot::WRITE.0;
            }
            if p.p_flags & PF_X != 0 {
                prot |= Prot::EXEC.0;
            }
            segs.push((start, *p, ps, pe, Prot(prot)));
        }
        let stack_pages = STACK_SIZE / PAGE_SIZE;
        if total_pages.saturating_add(stack_pages) > capacity {
            return TooBigSnafu { image_kib: total_pages * 4, stack_kib: stack_pages * 4, available_kib: capacity * 4 }
                .fail();
        }

        // Populate writable, copy file bytes, then compute the final per-page protection.
        // Page → (protection, file offset of the page).
        let mut page_prot: BTreeMap<u64, (Prot, u64)> = BTreeMap::new();
        for (start, p, ps, pe, prot) in &segs {
            mem.populate(*ps, pe - ps, Prot::RW).context(OutOfMemorySnafu { what: "the image" })?;
            let off = p.p_offset as usize;
            let data = &spec.image[off..off + p.p_filesz as usize];
            mem.write(*start, data).context(OutOfMemorySnafu { what: "the image" })?;
            let mut a = *ps;
            while a < *pe {
                let e = page_prot.entry(a).or_insert((Prot::NONE, page_down(p.p_offset) + (a - ps)));
                e.0 .0 |= prot.0;
                a += PAGE_SIZE;
            }
        }
        let mut run: Option<(u64, u64, Prot, u64)> = None;
        let mut runs = Vec::new();
        for (&a, &(prot, off)) in &page_prot {
            match &mut run {
                Some((s, end, p, o)) if *end == a && *p == prot && *o + (a - *s) == off => *end += PAGE_SIZE,
                _ => {
                    if let Some(r) = run.take() {
                        runs.push(r);
                    }
                    run = Some((a, a + PAGE_SIZE, prot, off));
                }
            }
        }
        runs.extend(run);
        for (a, b, prot, offset) in runs {
            mem.protect(a, b - a, prot);
            mappings.insert(Vma { start: a, end: b, prot, kind: VmaKind::Image { offset }, shared: false });
        }
        let brk_start = segs.iter().map(|s| s.3).max().unwrap_or(USER_START).max(USER_START);

        // The stack.
        mappings.insert(Vma {
            start: STACK_TOP - STACK_SIZE,
            end: STACK_TOP,
            prot: Prot::RW,
            kind: VmaKind::Stack,
            shared: false,
        });
        let mut rng = RandomStream::new(spec.seed);
        let mut random = [0u8; 16];
        rng.fill(&mut random);
        let entry_rip = reloc(img.entry).unwrap_or(0);
        let phdr = reloc(img.phdr_vaddr()).unwrap_or(0);
        let aux = AuxInfo { phdr, phnum: img.phdrs.len() as u64, entry: entry_rip };
        let st = stack::build(STACK_TOP, &spec.argv, &spec.env, &spec.exe_path, random, aux, STACK_SIZE / 4)
            .context(ArgsTooBigSnafu)?;
        let eager = page_up(STACK_TOP - st.rsp).unwrap_or(STACK_SIZE).max(STACK_EAGER);
        mem.populate(STACK_TOP - eager, eager, Prot::RW).context(OutOfMemorySnafu { what: "the stack" })?;
        mem.write(st.rsp, &st.bytes).context(OutOfMemorySnafu { what: "the stack" })?;

        if let Some(d) = &spec.disk {
            d.validate().context(InvalidDiskSnafu)?;
            let (bytes, capacity) = (d.data_bytes(), spec.fs.capacity_bytes);
            snafu::ensure!(bytes <= capacity, DiskOverCapacitySnafu { bytes, capacity });
        }
        if let Some((path, problem)) =
            spec.files.keys().find_map(|p| crate::fs::guest_path_problem(p).map(|why| (p.clone(), why)))
        {
            return GuestPathSnafu { path, problem }.fail();
        }
        let fs = Fs::new(spec.fs, spec.disk.as_ref(), &spec.files, &spec.exe_path, &spec.image);
        let faults = FaultState::new(spec.faults.clone(), spec.seed);
        let exe_name = spec.exe_path.rsplit('/').next().unwrap_or("");
        let mut comm = [0u8; 16];
        let n = exe_name.len().min(15);
        comm[..n].copy_from_slice(&exe_name.as_bytes()[..n]);
        let inf = u64::MAX;
        let mut rlimits = [(inf, inf); 16];
        rlimits[3] = (STACK_SIZE, inf); // RLIMIT_STACK
        rlimits[4] = (0, inf); // RLIMIT_CORE
        rlimits[7] = (1024, 4096); // RLIMIT_NOFILE
        rlimits[13] = (0, 0); // RLIMIT_NICE
        rlimits[14] = (0, 0); // RLIMIT_RTPRIO
        let entry = Entry { rip: entry_rip, rsp: st.rsp };
        // The coverage counters: an allocated section inside one loaded segment, not too big.
        let coverage = elf::find_section(&spec.image, SANCOV_SECTION.as_bytes())
            .filter(|&(addr, len)| {
                len <= MAX_COVERAGE_COUNTERS
                    && img
                        .loads()
                        .any(|p| addr >= p.p_vaddr && addr.checked_add(len).is_some_and(|e| e <= p.p_vaddr + p.p_memsz))
            })
            .and_then(|(addr, len)| Some(CoverageRegion { addr: reloc(addr)?, len }))
            .filter(|r| r.validate().is_ok());
        let kernel = Kernel {
            mappings,
            fs,
            faults,
            locks: BTreeMap::new(),
            fds: FdTable::new(&spec.stdin),
            clock: Clock::default(),
            rng,
            tracer: Tracer::new(spec.record_trace),
            output: Vec::new(),
            counts: BTreeMap::new(),
            unsupported: BTreeMap::new(),
            fs_base: 0,
            gs_base: 0,
            brk_start,
            brk_cur: brk_start,
            signals: Signals::default(),
            rlimits,
            umask: 0o022,
            clear_child_tid: 0,
            robust_list: (0, 0),
            comm,
            exec_stack: img.exec_stack,
            last_fault: None,
            fault_repeats: 0,
            exit: None,
            entry,
            oracle: Oracle::default(),
            coverage,
            threads: Threads::default(),
            net: crate::net::Net::default(),
        };
        Ok((kernel, entry))
    }

    /// The complete kernel state as bytes (postcard of the derived serde form; no header: wrap
    /// it in an envelope that carries the schema version).
    ///
    /// It holds the VMAs and commit capacity, brk, the fd table with offsets and flags, the
    /// file system (every inode with its volatile and durable layers, pending writes, link and
    /// open counts, the declared files' contents), the fault state (configuration, decision
    /// stream position, decision overrides, the decision log, ledger, counters), record locks, stdin and its
    /// position, the clock, the random stream's exact position, signal dispositions/mask/pending, rlimits, umask, fs/gs
    /// base, the tid address, the robust list, the fault-repeat state, syscall and unsupported
    /// counts, the trace (digest chain, entry hashes, recorded entries), output not yet taken,
    /// the exit status, the entry, the assertion oracle (catalog, counts, first failures,
    /// lifecycle records, events, protocol errors) and where the coverage counters are. Guest
    /// memory and vCPU registers are not included.
    pub fn save(&self) -> Vec<u8> {
        // Every saved type has a known length and no `serialize_any`; postcard only fails on
        // those (or on a full fixed buffer, and `to_stdvec` grows).
        postcard::to_stdvec(&Saving(self)).expect("postcard encodes every kernel state")
    }

    /// Rebuilds a kernel from [`Kernel::save`] output. Damaged or hostile bytes give an error,
    /// never a panic: the decoded state is checked against the invariants the syscall code
    /// relies on (VMAs sorted and non-overlapping, fds naming open descriptions, counts
    /// consistent with the trace, ...). File contents held by several parts of the state are
    /// shared again.
    pub fn restore(bytes: &[u8]) -> Result<Kernel, RestoreError> {
        let (Unchecked(mut k), rest) = postcard::take_from_bytes::<Unchecked>(bytes).context(DecodeSnafu)?;
        snafu::ensure!(rest.is_empty(), TrailingBytesSnafu { count: rest.len() });
        k.validate()?;
        k.mappings.share_file_data(&k.fs);
        Ok(k)
    }

    fn validate(&self) -> Result<(), RestoreError> {
        self.mappings.validate()?;
        self.fs.validate()?;
        self.fds.validate()?;
        let mut refs: BTreeMap<u64, u64> = BTreeMap::new();
        for d in self.fds.descriptions() {
            if let crate::fd::FileKind::Inode { id, .. } | crate::fd::FileKind::Dir { id, .. } = d.kind {
                *refs.entry(id).or_default() += 1;
            }
        }
        self.fs.validate_open(&refs)?;
        self.faults.validate()?;
        ensure(self.locks.len() <= crate::sys_fs::MAX_LOCKS, || format!("{} locks", self.locks.len()))?;
        self.rng.validate()?;
        self.tracer.validate()?;
        let n = self.tracer.syscalls();
        let total = self.counts.values().try_fold(0u64, |a, c| a.checked_add(*c));
        ensure(total == Some(n), || format!("syscall counts do not add up to {n}"))?;
        for (name, c) in &self.unsupported {
            let served = self.counts.get(name).copied().unwrap_or(0);
            ensure(*c <= served, || format!("{c} unsupported {name} calls but {served} calls"))?;
        }
        ensure(USER_START <= self.brk_start && self.brk_start <= self.brk_cur, || {
            format!("break {:#x} below its start {:#x}", self.brk_cur, self.brk_start)
        })?;
        ensure(self.fault_repeats <= MAX_FAULT_REPEATS, || format!("{} fault repeats", self.fault_repeats))?;
        self.oracle.validate(n)?;
        self.threads.validate(self.exit.is_some() || self.threads.idle)?;
        match &self.coverage {
            Some(c) => c.validate(),
            None => Ok(()),
        }
    }

    /// From now on random bytes (`getrandom`, `/dev/urandom`) come from the stream of `seed`,
    /// from its first byte: how a forked child takes other decisions than its parent. The
    /// reseed enters the trace digest (a pseudo-entry), so children reseeded differently have
    /// different digests even before they draw; [`Kernel::random_bytes_used`] keeps counting.
    /// The fault decision stream switches to `seed`'s too.
    pub fn reseed(&mut self, seed: u64) {
        self.rng.reseed(seed);
        self.reseed_decisions(seed);
        self.tracer.reseed(seed, self.clock.now_ns());
    }

    /// From now on decisions (SDK random values and choices, fault rolls) come from the
    /// stream of `seed`; random bytes and the trace are untouched. With overrides pinning the
    /// decisions before some index, a child keeps its parent's course up to there and
    /// draws everything after afresh.
    pub fn reseed_decisions(&mut self, seed: u64) {
        self.faults.log.stream.reseed_with_context(crate::faults::FAULT_CONTEXT, seed);
    }
}

/// `AT_FDCWD` as a register value.
pub(crate) const AT_FDCWD: u64 = -100i64 as u64;
/// `AT_SYMLINK_NOFOLLOW`.
pub(crate) const AT_SYMLINK_NOFOLLOW: u64 = 0x100;
