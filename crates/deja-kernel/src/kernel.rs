//! The [`Kernel`]: loading, syscall dispatch, exceptions and the final report.
//!
//! The syscall handlers live in [`sys_io`](crate::sys_io) (files and fds),
//! [`sys_mem`](crate::sys_mem) (the address space) and [`sys_proc`](crate::sys_proc)
//! (process, signals, time, identity); this module owns the state and the dispatch table.
//!
//! [`Kernel::save`] encodes the whole state as `postcard` of the derived serde form of
//! [`Kernel`] (through the private mirror `KernelDef`) and its parts, fields in declaration
//! order: changing the order or the set of fields of any saved struct changes the format. The bytes carry no version: the caller's
//! envelope carries the schema version. See [`persist`](crate::persist) for the helpers and
//! for what [`Kernel::restore`] checks.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::clock::{Clock, RDTSC_COST_NS, SYSCALL_COST_NS};
use crate::coverage::{CoverageRegion, MAX_COVERAGE_COUNTERS, SANCOV_SECTION};
use crate::cpuid::Emulated;
use crate::elf::{self, ET_DYN, PF_R, PF_W, PF_X};
use crate::errno::*;
use crate::faults::CrashState;
use crate::faults::{FaultKind, FaultRecord, FaultState};
use crate::fd::FdTable;
use crate::fs::Fs;
use crate::layout::*;
use crate::oracle::Oracle;
use crate::persist::{ensure, RestoreError};
use crate::rng::RandomStream;
use crate::signal::{self, Signals};
use crate::stack::{self, AuxInfo};
use crate::threads::{Threads, BLOCKED_RETURN};
use crate::trace::{memory_digest, DataHasher, ExceptionRecord, Tracer};
use crate::vm::{Access, AddressSpace, FaultError, Vma, VmaKind};
use crate::{
    AssertionReport, Entry, Exception, ExceptionOutcome, ExitStatus, FaultInfo, LoadError, Memory, ProgramSpec, Prot,
    RunReport, Stream, SyscallOutcome, PAGE_SIZE,
};
use crate::{DecisionRecord, Disk};

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
pub(crate) enum Stop {
    /// Return `-errno`.
    Err(i32),
    /// The program is over.
    Exit(ExitStatus),
    /// Not implemented: `-ENOSYS`, counted in [`RunReport::unsupported`].
    Unsupported,
    /// The calling thread blocked or exited: no return value now (see [`crate::threads`]).
    Block,
}

impl From<i32> for Stop {
    fn from(e: i32) -> Self {
        Stop::Err(e)
    }
}

/// The result of a syscall handler.
pub(crate) type SysResult = Result<u64, Stop>;

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
    pub(crate) vm: AddressSpace,
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
    vm: AddressSpace,
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
            .field("mappings", &self.vm.iter().count())
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
        let mut vm = AddressSpace::new(capacity);

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
            let start = reloc(p.p_vaddr).ok_or_else(|| bad("segment address overflows"))?;
            let end = start.checked_add(p.p_memsz).ok_or_else(|| bad("segment overflows"))?;
            if start < USER_START || end > limit {
                return Err(bad(&format!(
                    "segment {start:#x}..{end:#x} is outside the loadable range {USER_START:#x}..{limit:#x}"
                )));
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
            return Err(LoadError::NoMemory(format!(
                "the image needs {} KiB and the stack {} KiB, but only {} KiB are available",
                total_pages * 4,
                stack_pages * 4,
                capacity * 4
            )));
        }
        let oom = |what: &str| LoadError::NoMemory(format!("out of frames while loading {what}"));

        // Populate writable, copy file bytes, then compute the final per-page protection.
        // Page → (protection, file offset of the page).
        let mut page_prot: BTreeMap<u64, (Prot, u64)> = BTreeMap::new();
        for (start, p, ps, pe, prot) in &segs {
            mem.populate(*ps, pe - ps, Prot::RW).map_err(|_| oom("the image"))?;
            let off = p.p_offset as usize;
            let data = &spec.image[off..off + p.p_filesz as usize];
            mem.write(*start, data).map_err(|_| oom("the image"))?;
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
            vm.insert(Vma { start: a, end: b, prot, kind: VmaKind::Image { offset }, shared: false });
        }
        let brk_start = segs.iter().map(|s| s.3).max().unwrap_or(USER_START).max(USER_START);

        // The stack.
        vm.insert(Vma {
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
            .ok_or_else(|| LoadError::NoMemory("argv and environment exceed a quarter of the 8 MiB stack".into()))?;
        let eager = page_up(STACK_TOP - st.rsp).unwrap_or(STACK_SIZE).max(STACK_EAGER);
        mem.populate(STACK_TOP - eager, eager, Prot::RW).map_err(|_| oom("the stack"))?;
        mem.write(st.rsp, &st.bytes).map_err(|_| oom("the stack"))?;

        if let Some(d) = &spec.disk {
            d.validate().map_err(|e| LoadError::Disk(e.to_string()))?;
            if d.data_bytes() > spec.fs.capacity_bytes {
                return Err(LoadError::Disk(format!(
                    "the disk holds {} bytes of files but the capacity is {}",
                    d.data_bytes(),
                    spec.fs.capacity_bytes
                )));
            }
        }
        if let Some((path, problem)) =
            spec.files.keys().find_map(|p| crate::fs::guest_path_problem(p).map(|why| (p.clone(), why)))
        {
            return Err(LoadError::GuestPath { path, problem });
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
            vm,
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
        let (Unchecked(mut k), rest) =
            postcard::take_from_bytes::<Unchecked>(bytes).map_err(|e| RestoreError::Decode(e.to_string()))?;
        if !rest.is_empty() {
            return Err(RestoreError::Decode(format!("{} bytes after the end of the state", rest.len())));
        }
        k.validate()?;
        k.vm.share_file_data(&k.fs);
        Ok(k)
    }

    fn validate(&self) -> Result<(), RestoreError> {
        self.vm.validate()?;
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

    /// Serves one syscall: `nr` from RAX, `args` from RDI, RSI, RDX, R10, R8, R9.
    pub fn syscall(&mut self, mem: &mut dyn Memory, nr: u64, args: [u64; 6]) -> SyscallOutcome {
        self.clock.advance(SYSCALL_COST_NS);
        self.faults.log.set_time(self.clock.now_ns());
        self.last_fault = None;
        let name = crate::syscalls::display_name(nr);
        *self.counts.entry(name.clone()).or_default() += 1;
        self.threads.call = (nr, args);
        let mut hashed = DataHasher::new(mem);
        let mut res = self.dispatch(&mut hashed, nr, args);
        let data = hashed.finish();
        // A crash at exit: the program exits believing its data is safe; the node dies there.
        if self.faults.config.crash_at_exit && !self.faults.crash_due {
            if let Err(Stop::Exit(ExitStatus::Exited { code })) = &res {
                self.faults.crash_point = format!("at exit (status {code})");
                self.faults.crash_due = true;
                res = Ok(0);
            }
        }
        if self.faults.faulted && self.faults.after_fault.len() < crate::faults::MAX_AFTER_FAULT {
            let errno = match &res {
                Err(Stop::Err(e)) => *e as u64,
                Err(Stop::Unsupported) => ENOSYS as u64,
                _ => 0,
            };
            self.faults.after_fault.push((nr, errno));
        }
        let res =
            if matches!(res, Err(Stop::Exit(_))) || self.faults.crash_due { res } else { self.schedule(mem, res) };
        let (outcome, ret) = match res {
            Ok(v) => (SyscallOutcome::Return(v), Some(v)),
            Err(Stop::Err(e)) => {
                let v = (-i64::from(e)) as u64;
                (SyscallOutcome::Return(v), Some(v))
            }
            Err(Stop::Unsupported) => {
                *self.unsupported.entry(name.clone()).or_default() += 1;
                let v = (-i64::from(ENOSYS)) as u64;
                (SyscallOutcome::Return(v), Some(v))
            }
            Err(Stop::Exit(st)) => {
                self.exit = Some(st.clone());
                (SyscallOutcome::Exit(st), None)
            }
            Err(Stop::Block) if self.threads.idle => (SyscallOutcome::Idle, Some(BLOCKED_RETURN)),
            Err(Stop::Block) => (SyscallOutcome::Return(BLOCKED_RETURN), Some(BLOCKED_RETURN)),
        };
        let (outcome, ret) = if self.faults.crash_due && !matches!(outcome, SyscallOutcome::Exit(_)) {
            self.faults.crash_due = false;
            let at = self.crash_point_words();
            self.faults.ledger.push(FaultRecord {
                kind: FaultKind::Crash,
                point: at.clone(),
                syscall_index: self.tracer.syscalls(),
                path: None,
                selected: true,
                applied: true,
                observed: false,
            });
            self.exit = Some(ExitStatus::Signaled {
                signal: signal::SIGKILL,
                name: signal::name(signal::SIGKILL),
                fault: Some(FaultInfo { description: format!("crash injected {at}"), vector: 0, rip: 0, addr: None }),
            });
            (SyscallOutcome::Crash, None)
        } else {
            (outcome, ret)
        };
        self.tracer.syscall(nr, &name, args, ret, self.clock.now_ns(), data);
        outcome
    }

    pub(crate) fn dispatch(&mut self, mem: &mut dyn Memory, nr: u64, a: [u64; 6]) -> SysResult {
        match nr {
            0 => self.sys_read(mem, a[0], a[1], a[2]),
            1 => self.sys_write(mem, a[0], a[1], a[2]),
            2 => self.sys_openat(mem, AT_FDCWD, a[0], a[1], a[2]),
            3 => self.sys_close(a[0]),
            4 => self.sys_fstatat(mem, AT_FDCWD, a[0], a[1], 0),
            5 => self.sys_fstat(mem, a[0], a[1]),
            6 => self.sys_fstatat(mem, AT_FDCWD, a[0], a[1], AT_SYMLINK_NOFOLLOW),
            7 => self.sys_poll(mem, a[0], a[1], a[2]),
            22 => self.sys_pipe2(mem, a[0], 0),
            23 => self.sys_select(mem, a),
            41 => self.sys_socket(a[0], a[1], a[2]),
            42 => self.sys_connect(mem, a[0], a[1], a[2]),
            43 => self.sys_accept4(mem, a[0], a[1], a[2], 0),
            44 => self.sys_sendto(mem, a),
            45 => self.sys_recvfrom(mem, a),
            46 => self.sys_sendmsg(mem, a[0], a[1], a[2]),
            47 => self.sys_recvmsg(mem, a[0], a[1], a[2]),
            48 => self.sys_shutdown(a[0], a[1]),
            49 => self.sys_bind(mem, a[0], a[1], a[2]),
            50 => self.sys_listen(a[0], a[1]),
            51 => self.sys_getsockname(mem, a[0], a[1], a[2], false),
            52 => self.sys_getsockname(mem, a[0], a[1], a[2], true),
            54 => self.sys_setsockopt(mem, a[0], a[1], a[2], a[3], a[4]),
            55 => self.sys_getsockopt(mem, a[0], a[1], a[2], a[3], a[4]),
            213 => {
                if (a[0] as i32) <= 0 {
                    Err(EINVAL.into())
                } else {
                    self.sys_epoll_create1(0)
                }
            }
            232 => self.sys_epoll_wait(mem, a[0], a[1], a[2], Kernel::ms_timeout(a[3])),
            233 => self.sys_epoll_ctl(mem, a[0], a[1], a[2], a[3]),
            270 => self.sys_pselect6(mem, a),
            281 => self.sys_epoll_wait(mem, a[0], a[1], a[2], Kernel::ms_timeout(a[3])),
            284 => self.sys_eventfd2(a[0], 0),
            288 => self.sys_accept4(mem, a[0], a[1], a[2], a[3]),
            290 => self.sys_eventfd2(a[0], a[1]),
            291 => self.sys_epoll_create1(a[0]),
            293 => self.sys_pipe2(mem, a[0], a[1]),
            441 => self.sys_epoll_pwait2(mem, a),
            8 => self.sys_lseek(a[0], a[1], a[2]),
            9 => self.sys_mmap(mem, a),
            10 => self.sys_mprotect(mem, a[0], a[1], a[2]),
            11 => self.sys_munmap(mem, a[0], a[1]),
            12 => self.sys_brk(mem, a[0]),
            13 => self.sys_rt_sigaction(mem, a[0], a[1], a[2], a[3]),
            14 => self.sys_rt_sigprocmask(mem, a[0], a[1], a[2], a[3]),
            16 => self.sys_ioctl(mem, a[0], a[1], a[2]),
            17 => self.sys_pread(mem, a[0], a[1], a[2], a[3]),
            18 => self.sys_pwrite(mem, a[0], a[1], a[2], a[3]),
            19 => self.sys_readv(mem, a[0], a[1], a[2]),
            20 => self.sys_writev(mem, a[0], a[1], a[2]),
            21 => self.sys_faccessat(mem, AT_FDCWD, a[0], a[1], 0),
            24 => Ok(0),
            25 => self.sys_mremap(mem, a),
            26 => self.sys_msync(a[0], a[1], a[2]),
            28 => self.sys_madvise(mem, a[0], a[1], a[2]),
            32 => self.sys_dup(a[0]),
            33 => self.sys_dup2(a[0], a[1]),
            35 => self.sys_nanosleep(mem, a[0], a[1]),
            39 => Ok(1),
            56 => self.sys_clone(mem, a),
            435 => self.sys_clone3(mem, a[0], a[1]),
            60 => self.sys_exit_thread(mem, a[0]),
            231 => Err(Stop::Exit(ExitStatus::Exited { code: (a[0] & 0xff) as i32 })),
            62 => self.sys_kill(a[0], a[1]),
            63 => self.sys_uname(mem, a[0]),
            72 => self.sys_fcntl(mem, a[0], a[1], a[2]),
            73 => self.sys_flock(a[0], a[1]),
            74 | 75 => self.sys_fsync(a[0], nr == 75),
            76 => self.sys_truncate(mem, a[0], a[1]),
            77 => self.sys_ftruncate(a[0], a[1]),
            82 => self.sys_renameat2(mem, AT_FDCWD, a[0], AT_FDCWD, a[1], 0),
            83 => self.sys_mkdirat(mem, AT_FDCWD, a[0], a[1]),
            84 => self.sys_unlinkat(mem, AT_FDCWD, a[0], crate::sys_fs::AT_REMOVEDIR),
            85 => self.sys_openat(mem, AT_FDCWD, a[0], 0o1101, a[1]),
            86 => self.sys_linkat(mem, AT_FDCWD, a[0], AT_FDCWD, a[1], 0),
            87 => self.sys_unlinkat(mem, AT_FDCWD, a[0], 0),
            88 => self.sys_symlinkat(mem, a[0], AT_FDCWD, a[1]),
            90 => self.sys_fchmodat(mem, AT_FDCWD, a[0], a[1]),
            91 => self.sys_fchmod(a[0], a[1]),
            162 => self.sys_sync(),
            258 => self.sys_mkdirat(mem, a[0], a[1], a[2]),
            263 => self.sys_unlinkat(mem, a[0], a[1], a[2]),
            264 => self.sys_renameat2(mem, a[0], a[1], a[2], a[3], 0),
            265 => self.sys_linkat(mem, a[0], a[1], a[2], a[3], a[4]),
            266 => self.sys_symlinkat(mem, a[0], a[1], a[2]),
            268 => self.sys_fchmodat(mem, a[0], a[1], a[2]),
            277 => self.sys_sync_file_range(a[0], a[1], a[2], a[3]),
            280 => self.sys_utimensat(mem, a[0], a[1], a[2], a[3]),
            285 => self.sys_fallocate(a[0], a[1], a[2], a[3]),
            306 => self.sys_syncfs(a[0]),
            316 => self.sys_renameat2(mem, a[0], a[1], a[2], a[3], a[4]),
            79 => self.sys_getcwd(mem, a[0], a[1]),
            89 => self.sys_readlinkat(mem, AT_FDCWD, a[0], a[1], a[2]),
            95 => {
                let old = self.umask;
                self.umask = (a[0] & 0o777) as u32;
                Ok(u64::from(old))
            }
            96 => self.sys_gettimeofday(mem, a[0], a[1]),
            97 => self.sys_prlimit(mem, 0, a[0], 0, a[1]),
            98 => self.sys_getrusage(mem, a[0], a[1]),
            99 => self.sys_sysinfo(mem, a[0]),
            100 => self.sys_times(mem, a[0]),
            102 | 104 | 107 | 108 => Ok(stack::GUEST_UID),
            110 => Ok(0),
            111 | 124 | 121 => Ok(1),
            115 => Ok(0),
            118 | 120 => self.sys_getresuid(mem, a[0], a[1], a[2]),
            131 => self.sys_sigaltstack(mem, a[0], a[1]),
            149 | 150 | 151 | 152 | 325 => Ok(0),
            157 => self.sys_prctl(mem, a),
            158 => self.sys_arch_prctl(mem, a[0], a[1]),
            160 => self.sys_prlimit(mem, 0, a[0], a[1], 0),
            186 => Ok(self.threads.current),
            200 => self.sys_tgkill(1, a[0], a[1]),
            201 => self.sys_time(mem, a[0]),
            202 => self.sys_futex(mem, a),
            203 => Ok(0),
            204 => self.sys_sched_getaffinity(mem, a[0], a[1], a[2]),
            217 => self.sys_getdents64(mem, a[0], a[1], a[2]),
            218 => {
                self.clear_child_tid = a[0];
                Ok(self.threads.current)
            }
            221 => self.fd_ok(a[0]),
            228 => self.sys_clock_gettime(mem, a[0], a[1]),
            229 => self.sys_clock_getres(mem, a[0], a[1]),
            230 => self.sys_clock_nanosleep(mem, a[0], a[1], a[2], a[3]),
            234 => self.sys_tgkill(a[0], a[1], a[2]),
            257 => self.sys_openat(mem, a[0], a[1], a[2], a[3]),
            262 => self.sys_fstatat(mem, a[0], a[1], a[2], a[3]),
            267 => self.sys_readlinkat(mem, a[0], a[1], a[2], a[3]),
            269 => self.sys_faccessat(mem, a[0], a[1], a[2], 0),
            439 => self.sys_faccessat(mem, a[0], a[1], a[2], a[3]),
            271 => self.sys_ppoll(mem, a[0], a[1], a[2], a[3], a[4]),
            273 => {
                if a[1] != 24 {
                    return Err(EINVAL.into());
                }
                self.robust_list = (a[0], a[1]);
                Ok(0)
            }
            292 => self.sys_dup3(a[0], a[1], a[2]),
            302 => self.sys_prlimit(mem, a[0], a[1], a[2], a[3]),
            309 => self.sys_getcpu(mem, a[0], a[1]),
            318 => self.sys_getrandom(mem, a[0], a[1], a[2]),
            324 => self.sys_membarrier(a[0], a[1]),
            332 => self.sys_statx(mem, a[0], a[1], a[2], a[3], a[4]),
            // rseq: deja answers ENOSYS on purpose (no restartable sequences without
            // preemption); glibc handles it. It is a policy, not a gap, so it is not counted
            // as unsupported.
            334 => Err(ENOSYS.into()),
            deja_protocol::DEJA_SYSCALL => self.sys_deja(mem, a),
            _ => Err(Stop::Unsupported),
        }
    }

    /// Decides what a CPU exception of ring-3 code means.
    ///
    /// A page fault inside a mapping that allows the access populates an aligned window of
    /// [`FAULT_AROUND_PAGES`] pages (clipped to the mapping) and answers
    /// [`ExceptionOutcome::Retry`]; `rdtsc`/`rdtscp` under `#GP` are emulated from the
    /// virtual clock and `cpuid` under `#GP` from the fixed table ([`crate::cpuid`]);
    /// everything else ends the program with the signal Linux would send.
    pub fn exception(&mut self, mem: &mut dyn Memory, exc: Exception) -> ExceptionOutcome {
        match exc {
            Exception::PageFault { addr, error_code, rip } => self.page_fault(mem, addr, error_code, rip),
            Exception::GeneralProtection { rip, error_code, eax, ecx } => {
                let mut code = [0u8; 15];
                let n = (0..code.len())
                    .take_while(|&i| self.vm.copy_in(mem, rip + i as u64, &mut code[i..=i]).is_ok())
                    .count();
                match crate::cpuid::decode(&code[..n]) {
                    Some((insn @ Emulated::Cpuid, len)) => {
                        // Answered from the fixed table, untraced and free: a host whose KVM
                        // answers CPUID itself gives the same run.
                        let [a, b, c, d] = crate::cpuid::answer(eax, ecx);
                        return ExceptionOutcome::Emulated { insn, eax: a, ebx: Some(b), ecx: Some(c), edx: d, len };
                    }
                    Some((insn, len)) => {
                        self.clock.advance(RDTSC_COST_NS);
                        let tsc = self.clock.tsc();
                        self.tracer.exception(
                            13,
                            rip,
                            0,
                            error_code,
                            ExceptionRecord::Emulated(tsc),
                            self.clock.now_ns(),
                        );
                        return ExceptionOutcome::Emulated {
                            insn,
                            eax: tsc as u32,
                            ebx: None,
                            ecx: (insn == Emulated::Rdtscp).then_some(0),
                            edx: (tsc >> 32) as u32,
                            len,
                        };
                    }
                    None => {}
                }
                if let Some(how) = entry_attempt(&code[..n]) {
                    return self.entry_attempt(how, rip);
                }
                self.fatal(
                    11,
                    "general protection fault (privileged instruction or bad address)".into(),
                    13,
                    rip,
                    None,
                    error_code,
                )
            }
            Exception::Other { vector: 6, rip } if self.entry_at(mem, rip).is_some() => {
                let how = self.entry_at(mem, rip).unwrap_or(EntryAttempt::Sysenter);
                self.entry_attempt(how, rip)
            }
            Exception::Other { vector, rip } => {
                let (sig, what) = match vector {
                    0 => (8, "divide error".to_string()),
                    1 => (5, "debug trap".to_string()),
                    3 => (5, "breakpoint (int3)".to_string()),
                    4 => (11, "overflow (into)".to_string()),
                    5 => (11, "bound range exceeded".to_string()),
                    6 => (4, "invalid opcode".to_string()),
                    7 => (11, "device not available".to_string()),
                    10 => (11, "invalid TSS".to_string()),
                    11 => (7, "segment not present".to_string()),
                    12 => (7, "stack segment fault".to_string()),
                    13 => (11, "general protection fault".to_string()),
                    14 => (11, "page fault".to_string()),
                    16 => (8, "x87 floating-point exception".to_string()),
                    17 => (7, "alignment check".to_string()),
                    18 => (7, "machine check".to_string()),
                    19 => (8, "SIMD floating-point exception".to_string()),
                    21 => (11, "control protection fault".to_string()),
                    v => (11, format!("CPU exception vector {v}")),
                };
                self.fatal(sig, what, vector, rip, None, 0)
            }
        }
    }

    /// The other way into a kernel at `rip`, if that is what is there.
    fn entry_at(&self, mem: &mut dyn Memory, rip: u64) -> Option<EntryAttempt> {
        let mut code = [0u8; 2];
        self.vm.copy_in(mem, rip, &mut code).ok()?;
        entry_attempt(&code)
    }

    /// `int N` to a gate ring 3 may not use (every one but `int3` and `into`), or `sysenter`.
    /// Hardware raises #GP for the first and, on Intel, for the second; AMD and some hosts'
    /// instruction emulators raise #UD. Each ends one way whatever the host, traced as one
    /// exception: `int N` as the #GP with the gate's error code and SIGSEGV (Linux without
    /// 32-bit emulation), `sysenter` as #UD and SIGILL (Linux on AMD64).
    fn entry_attempt(&mut self, how: EntryAttempt, rip: u64) -> ExceptionOutcome {
        let serves = "deja serves the 64-bit syscall instruction";
        match how {
            EntryAttempt::Int(n) => {
                let what =
                    format!("general protection fault: int {n:#x} (software interrupts are not served; {serves})");
                self.fatal(11, what, 13, rip, None, u64::from(n) << 3 | 2)
            }
            EntryAttempt::Sysenter => self.fatal(4, format!("invalid opcode: sysenter ({serves})"), 6, rip, None, 0),
        }
    }

    fn page_fault(&mut self, mem: &mut dyn Memory, addr: u64, error_code: u64, rip: u64) -> ExceptionOutcome {
        let access = if error_code & 16 != 0 {
            Access::Exec
        } else if error_code & 2 != 0 {
            Access::Write
        } else {
            Access::Read
        };
        let verb = match access {
            Access::Read => "read from",
            Access::Write => "write to",
            Access::Exec => "instruction fetch from",
        };
        let key = (page_down(addr), rip);
        if self.last_fault == Some(key) {
            self.fault_repeats += 1;
        } else {
            self.last_fault = Some(key);
            self.fault_repeats = 0;
        }
        if self.fault_repeats >= MAX_FAULT_REPEATS {
            let d =
                format!("page fault: {verb} {addr:#x} repeats after the page was mapped (error code {error_code:#x})");
            return self.fatal(11, d, 14, rip, Some(addr), error_code);
        }
        match self.vm.fault(mem, addr, access) {
            Ok(()) => ExceptionOutcome::Retry,
            Err(FaultError::Unmapped) => {
                let mut d = format!("page fault: {verb} unmapped address {addr:#x}");
                if addr < USER_START {
                    d.push_str(" (near NULL)");
                } else if (STACK_TOP - STACK_SIZE - (1 << 20)..STACK_TOP - STACK_SIZE).contains(&addr) {
                    d.push_str(" (just below the stack: stack overflow?)");
                }
                self.fatal(11, d, 14, rip, Some(addr), error_code)
            }
            Err(FaultError::Protection(prot)) => {
                let what = if !prot.readable() {
                    "inaccessible (PROT_NONE)"
                } else if access == Access::Write {
                    "read-only"
                } else {
                    "non-executable"
                };
                let d = format!("page fault: {verb} {what} address {addr:#x}");
                self.fatal(11, d, 14, rip, Some(addr), error_code)
            }
            Err(FaultError::OutOfMemory) => self.fatal(
                signal::SIGKILL,
                format!("out of guest memory (page fault at {addr:#x}); raise --memory"),
                14,
                rip,
                Some(addr),
                error_code,
            ),
        }
    }

    fn fatal(
        &mut self,
        sig: i32,
        description: String,
        vector: u8,
        rip: u64,
        addr: Option<u64>,
        error_code: u64,
    ) -> ExceptionOutcome {
        self.tracer.exception(
            vector,
            rip,
            addr.unwrap_or(0),
            error_code,
            ExceptionRecord::Fatal(sig),
            self.clock.now_ns(),
        );
        let st = ExitStatus::Signaled {
            signal: sig,
            name: signal::name(sig),
            fault: Some(FaultInfo { description, vector, rip, addr }),
        };
        self.exit = Some(st.clone());
        ExceptionOutcome::Fatal(st)
    }

    /// The FS base the program set with `arch_prctl(ARCH_SET_FS)`; the shell loads it into
    /// the vCPU whenever it changes.
    pub fn fs_base(&self) -> u64 {
        self.fs_base
    }

    /// The GS base the program set with `arch_prctl(ARCH_SET_GS)`.
    pub fn gs_base(&self) -> u64 {
        self.gs_base
    }

    /// Output the program wrote to stdout/stderr since the last call, in order.
    pub fn take_output(&mut self) -> Vec<(Stream, Vec<u8>)> {
        std::mem::take(&mut self.output)
    }

    /// Number of syscalls served so far.
    pub fn syscall_count(&self) -> u64 {
        self.tracer.syscalls()
    }

    /// The current virtual time in nanoseconds since boot.
    pub fn virtual_time_ns(&self) -> u64 {
        self.clock.now_ns()
    }

    /// The entry state [`Kernel::load`] returned.
    pub fn entry(&self) -> Entry {
        self.entry
    }

    /// How the program ended, once a syscall or exception ended it.
    pub fn exit_status(&self) -> Option<&ExitStatus> {
        self.exit.as_ref()
    }

    /// True if the image's `PT_GNU_STACK` asked for an executable stack (noted only: the
    /// stack is always mapped read-write, not executable).
    pub fn wants_exec_stack(&self) -> bool {
        self.exec_stack
    }

    /// Number of bytes taken from the seeded random stream so far (`AT_RANDOM` included).
    pub fn random_bytes_used(&self) -> u64 {
        self.rng.consumed()
    }

    /// The current program break.
    pub fn brk(&self) -> u64 {
        self.brk_cur
    }

    /// `/proc/self/maps` as the guest would read it now.
    pub fn proc_maps(&self) -> String {
        self.vm.maps(self.fs.exe_path())
    }

    /// Durable writes made so far (see [`crate::fs`]).
    pub fn durable_writes(&self) -> u64 {
        self.faults.durable_writes
    }

    /// The durable state after a crash now: the durable layer plus the pending operations the
    /// crash keeps (see [`crate::fs`]): exactly those of the configured
    /// [`CrashState`](crate::CrashState), or those decisions pick as `torn_writes` and
    /// `reordered_writes` allow. Each call takes fresh decisions (recorded in
    /// [`RunReport::decisions`]) and adds its records to the ledger: one `reordered_writes`
    /// record (what was kept), a `torn_write` record when a write was cut, and `lost_unsynced`
    /// per path whose image differs from the volatile view.
    pub fn crash_image(&mut self) -> Disk {
        let ops = self.fs.pending_ops();
        let sel = match self.faults.config.crash_state.clone() {
            Some(state) => selection_of(&state, &ops),
            None => self.decide_selection(&ops),
        };
        let image = self.fs.image_of(&ops, &sel);
        let state = state_of(&sel);
        let at = self.tracer.syscalls();
        let point = format!("crash image {}", self.crash_point_words());
        let changed = image != self.fs.durable_disk();
        let chosen = self.faults.config.crash_state.is_some()
            || self.faults.config.torn_writes
            || self.faults.config.reordered_writes;
        if chosen && !ops.is_empty() {
            self.faults.ledger.push(FaultRecord {
                kind: FaultKind::ReorderedWrites,
                point: format!("{point}: {}", state.describe(ops.len())),
                syscall_index: at,
                path: None,
                selected: !state.kept.is_empty() || state.torn.is_some(),
                applied: changed,
                observed: false,
            });
        }
        if let Some((i, k)) = sel.torn {
            self.faults.ledger.push(FaultRecord {
                kind: FaultKind::TornWrite,
                point: format!("{point}: {} cut after {k} sectors", ops[i].what),
                syscall_index: at,
                path: None,
                selected: true,
                applied: changed,
                observed: false,
            });
        }
        for path in crate::fs::diff_paths(&self.fs.volatile_disk(), &image) {
            self.faults.ledger.push(FaultRecord {
                kind: FaultKind::LostUnsynced,
                point: format!("{point}: {path}"),
                syscall_index: at,
                path: Some(path),
                selected: true,
                applied: true,
                observed: false,
            });
        }
        self.faults.last_crash_state =
            Some(crate::faults::CrashAt { state, pending: ops.iter().map(|o| o.what.clone()).collect() });
        image
    }

    /// Where the configured crash happened, in words: `after durable write 3`, `before durable
    /// write 4`, `at exit (status 0)`.
    pub fn crash_point_words(&self) -> String {
        if self.faults.crash_point.is_empty() {
            format!("after durable write {}", self.faults.durable_writes)
        } else {
            self.faults.crash_point.clone()
        }
    }

    /// Decides which pending operations a crash keeps, as the fault modes allow:
    /// - neither mode: none;
    /// - `torn_writes` alone: a prefix in program order (one decision), and the operation after
    ///   it, when it is a write of several sectors, may be cut (one decision);
    /// - `reordered_writes`: each operation kept or lost (one decision each), and with
    ///   `torn_writes` one of the kept writes of several sectors may be cut (two decisions).
    fn decide_selection(&mut self, ops: &[crate::fs::PendingOp]) -> crate::fs::Selection {
        let (torn, reorder) = (self.faults.config.torn_writes, self.faults.config.reordered_writes);
        let n = ops.len();
        let mut sel = crate::fs::Selection { kept: vec![false; n], torn: None };
        if n == 0 || !(torn || reorder) {
            return sel;
        }
        if reorder {
            for (i, op) in ops.iter().enumerate() {
                sel.kept[i] = self.faults.decide(format!("crash state: keep {}", op.what), 2) == 1;
            }
            if torn {
                let cuttable: Vec<usize> =
                    (0..n).filter(|i| sel.kept[*i] && ops[*i].sectors.is_some_and(|s| s > 1)).collect();
                if !cuttable.is_empty() {
                    let c = self.faults.decide("crash state: cut one kept write".into(), cuttable.len() as u64 + 1);
                    if c > 0 {
                        let i = cuttable[c as usize - 1];
                        let s = ops[i].sectors.unwrap_or(1);
                        let k = 1 + self.faults.decide(format!("crash state: sectors of {} kept", ops[i].what), s - 1);
                        sel.kept[i] = false;
                        sel.torn = Some((i, k));
                    }
                }
            }
            return sel;
        }
        let p = self.faults.decide(format!("crash state: prefix of the {n} pending operations"), n as u64 + 1) as usize;
        for k in sel.kept.iter_mut().take(p) {
            *k = true;
        }
        if let Some(s) = ops.get(p).and_then(|o| o.sectors).filter(|s| *s > 1) {
            let k = self.faults.decide(format!("crash state: sectors of {} that reached the disk", ops[p].what), s);
            if k > 0 {
                sel.torn = Some((p, k));
            }
        }
        sel
    }

    /// The BLAKE3 of the disk a crash now with exactly `state` leaves (no decision, no record).
    pub fn fs_image_digest(&self, state: &CrashState) -> String {
        let ops = self.fs.pending_ops();
        self.fs.image_of(&ops, &selection_of(state, &ops)).digest()
    }

    /// The operations pending now, in program order (what a crash now may keep).
    pub fn pending_operations(&self) -> Vec<String> {
        self.fs.pending_ops().into_iter().map(|o| o.what).collect()
    }

    /// The distinct crash states of a crash now, in the order a sweep tries them, at most
    /// `budget`: everything persisted, nothing persisted, each pending operation dropped
    /// alone, each prefix, the torn variants of the last write, then random subsets (drawn
    /// from `seed`). States whose disk image another state already gives are skipped, so every
    /// state returned costs one restart that no other one could stand for.
    pub fn crash_states(&self, budget: usize, seed: u64) -> CrashStates {
        let ops = self.fs.pending_ops();
        let n = ops.len();
        let mut candidates: Vec<CrashState> = vec![CrashState::all(n), CrashState::none()];
        for i in 0..n as u32 {
            candidates.push(CrashState { kept: (0..n as u32).filter(|j| *j != i).collect(), torn: None });
        }
        for p in 1..n as u32 {
            candidates.push(CrashState { kept: (0..p).collect(), torn: None });
        }
        if let Some(last) = (0..n).rev().find(|i| ops[*i].sectors.is_some_and(|s| s > 1)) {
            let s = ops[last].sectors.unwrap_or(1);
            let steps = (s - 1).min(8);
            for j in 1..=steps {
                let k = (j * (s - 1)).div_ceil(steps).max(1);
                candidates.push(CrashState { kept: (0..last as u32).collect(), torn: Some((last as u32, k)) });
            }
        }
        let mut rng = crate::rng::RandomStream::with_context("deja 2026 crash-state sweep", seed);
        let mut word = || {
            let mut b = [0u8; 8];
            rng.fill(&mut b);
            u64::from_le_bytes(b)
        };
        let random_tries = if n > 0 { budget.saturating_mul(4) } else { 0 };
        for _ in 0..random_tries {
            let kept: Vec<u32> = (0..n as u32).filter(|_| word() & 1 == 1).collect();
            candidates.push(CrashState { kept, torn: None });
        }
        let mut seen = std::collections::BTreeSet::new();
        let mut states = Vec::new();
        let mut tried = 0u64;
        for c in candidates {
            if states.len() >= budget {
                break;
            }
            tried += 1;
            let digest = self.fs.image_of(&ops, &selection_of(&c, &ops)).digest();
            if seen.insert(digest.clone()) {
                states.push((c, digest));
            }
        }
        CrashStates { pending: ops.into_iter().map(|o| o.what).collect(), tried, states }
    }

    /// The volatile (current) file system as a [`Disk`] (for `--fs-export`).
    pub fn disk(&self) -> Disk {
        self.fs.volatile_disk()
    }

    /// Passes the previous incarnation's fault records (its crash-image records) into this
    /// run: their `observed` flips when this program opens, stats, lists or removes the path
    /// they name. They lead [`RunReport::faults`].
    pub fn note_previous_faults(&mut self, records: Vec<FaultRecord>) {
        // A life after a crash: what it does from its start is the fault's aftermath.
        self.faults.faulted |= !records.is_empty();
        self.faults.previous = records;
    }

    /// Steers decisions by their position in the decision log (see [the crate documentation](crate#decisions)): when
    /// decision number `i` (0-based, counting every decision since [`Kernel::load`], those
    /// taken before a fork or snapshot included) is taken and `overrides` holds `c` for `i`,
    /// the choice is `c % options` (`c` itself for a decision with `options == 0`) instead of
    /// the stream's. Replaces the whole set; overrides for decisions already taken have no
    /// effect. The stream advances as if nothing were overridden, so the natural choices of
    /// other decisions do not move. Works after load, on a clone (a forked child) and after
    /// [`Kernel::restore`]; the set is part of the saved state.
    pub fn set_decision_overrides(&mut self, overrides: BTreeMap<u64, u64>) {
        self.faults.log.overrides = overrides;
    }

    /// The decision overrides in force.
    pub fn decision_overrides(&self) -> &BTreeMap<u64, u64> {
        &self.faults.log.overrides
    }

    /// Number of decisions taken so far: the index the next decision gets.
    pub fn decision_count(&self) -> u64 {
        self.faults.log.decisions.len() as u64
    }

    /// The program has called `setup_complete` (in this life).
    pub fn setup_completed(&self) -> bool {
        self.oracle.setup_complete.is_some()
    }

    /// Replaces the fault configuration from now on (e.g. on a forked child). The counters keep
    /// counting from program start: `crash_after_durable_write: Some(k)` fires after the k-th
    /// durable write of the whole run, so a `k` already reached never fires.
    pub fn set_fault_config(&mut self, config: crate::FaultConfig) {
        self.faults.config = config;
    }

    /// The fault ledger so far (previous incarnation's records first).
    pub fn faults(&self) -> Vec<FaultRecord> {
        self.faults.previous.iter().chain(&self.faults.ledger).cloned().collect()
    }

    /// The decision log so far: every decision (faults, SDK `Random`/`Choice`), in order.
    pub fn decisions(&self) -> &[DecisionRecord] {
        &self.faults.log.decisions
    }

    /// Pages committed against the capacity, and the capacity (both in pages).
    pub fn commit(&self) -> (u64, u64) {
        (self.vm.committed(), self.vm.capacity())
    }

    /// Signals that arrived while a handler was installed, by number (handlers are not run).
    pub fn caught_signals(&self) -> &BTreeMap<i32, u64> {
        &self.signals.caught
    }

    /// Ends the run: computes the memory digest over `mem` and returns the report.
    pub fn finish(&mut self, mem: &dyn Memory, exit: ExitStatus) -> RunReport {
        let trace = self.tracer.digest();
        let memory = memory_digest(mem);
        let mut h = blake3::Hasher::new();
        h.update(trace.as_bytes());
        h.update(memory.as_bytes());
        let mut report = RunReport {
            exit,
            syscalls: self.tracer.syscalls(),
            syscall_counts: self.counts.clone(),
            unsupported: self.unsupported.clone(),
            virtual_time_ns: self.clock.now_ns(),
            trace_digest: trace.to_hex().to_string(),
            memory_digest: memory.to_hex().to_string(),
            digest: h.finalize().to_hex().to_string(),
            entry_hashes: self.tracer.entry_hashes().to_vec(),
            trace: self.tracer.entries().to_vec(),
            pages: if self.tracer.recording() { crate::trace::page_hashes(mem) } else { Vec::new() },
            fs_digest: self.tracer.recording().then(|| self.disk().digest()),
            assertions: Vec::new(),
            setup_complete: None,
            events: Vec::new(),
            events_dropped: 0,
            protocol_errors: 0,
            coverage: self.coverage.map(|c| c.summary(mem)),
            durable_writes: self.faults.durable_writes,
            faults: self.faults(),
            decisions: self.faults.log.decisions.clone(),
            io_ops: self
                .faults
                .op_counts
                .iter()
                .map(|((op, path), count)| crate::IoCount { op: *op, path: path.clone(), count: *count })
                .collect(),
            crash_state: self.faults.last_crash_state.clone(),
            after_fault: self.faults.after_fault.clone(),
            files: self.fs.volatile_disk().entries.into_keys().take(256).collect(),
        };
        self.oracle.fill_report(&mut report);
        report
    }

    /// The assertion sites as they stand now (the same list [`RunReport::assertions`] will
    /// hold), sorted by (file, line, id).
    pub fn assertions(&self) -> Vec<AssertionReport> {
        self.oracle.assertions()
    }

    /// True if an assertion has already found a bug in this run.
    pub fn assertion_failed(&self) -> bool {
        self.oracle.bug_found()
    }

    /// The bucketed coverage map read from `mem` now (one byte per edge, AFL buckets), or
    /// `None` when the program has no `__sancov_cntrs` section. Reads only; populates nothing.
    pub fn coverage_map(&self, mem: &dyn Memory) -> Option<Vec<u8>> {
        self.coverage.map(|c| c.map(mem))
    }

    /// Appends output, merging with the previous chunk of the same stream.
    pub(crate) fn emit(&mut self, stream: Stream, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        match self.output.last_mut() {
            Some((s, buf)) if *s == stream => buf.extend_from_slice(data),
            _ => self.output.push((stream, data.to_vec())),
        }
    }

    fn fd_ok(&mut self, fd: u64) -> SysResult {
        self.fds.get(fd as i32)?;
        Ok(0)
    }
}

/// `AT_FDCWD` as a register value.
pub(crate) const AT_FDCWD: u64 = -100i64 as u64;
/// `AT_SYMLINK_NOFOLLOW`.
pub(crate) const AT_SYMLINK_NOFOLLOW: u64 = 0x100;

fn bad(msg: &str) -> LoadError {
    LoadError::Malformed(msg.to_string())
}

/// A [`CrashState`] as the file system's [`Selection`](crate::fs::Selection) over `ops`
/// (positions past the end are ignored; a torn position must name a write).
fn selection_of(state: &CrashState, ops: &[crate::fs::PendingOp]) -> crate::fs::Selection {
    let mut kept = vec![false; ops.len()];
    for &i in &state.kept {
        if let Some(k) = kept.get_mut(i as usize) {
            *k = true;
        }
    }
    let torn = state.torn.and_then(|(i, k)| {
        let s = ops.get(i as usize)?.sectors?;
        (k > 0 && k < s && !kept[i as usize]).then_some((i as usize, k))
    });
    crate::fs::Selection { kept, torn }
}

/// The [`CrashState`] a selection is.
fn state_of(sel: &crate::fs::Selection) -> CrashState {
    CrashState {
        kept: sel.kept.iter().enumerate().filter(|(_, k)| **k).map(|(i, _)| i as u32).collect(),
        torn: sel.torn.map(|(i, k)| (i as u32, k)),
    }
}

/// The crash states a sweep tries at one crash point (see [`Kernel::crash_states`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CrashStates {
    /// The operations pending at the crash, in program order, in words.
    pub pending: Vec<String>,
    /// Candidate states whose images were computed.
    pub tried: u64,
    /// The distinct states, each with the BLAKE3 of its disk image.
    pub states: Vec<(CrashState, String)>,
}

/// A way into a kernel other than `syscall`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EntryAttempt {
    /// `int N`.
    Int(u8),
    /// `sysenter`.
    Sysenter,
}

fn entry_attempt(code: &[u8]) -> Option<EntryAttempt> {
    match code {
        [0xcd, n, ..] => Some(EntryAttempt::Int(*n)),
        [0x0f, 0x34, ..] => Some(EntryAttempt::Sysenter),
        _ => None,
    }
}
