//! The [`Kernel`]: its state in parts, loading, save and restore, and the final report.
//!
//! Owns [`Kernel`], one field per saved part. Uses every state room below it; only the handler
//! layer ([`crate::syscalls`]) is above it.
//!
//! # Layers
//!
//! 1. **State rooms** hold one concern each, and each saved part has its own save and restore
//!    ([`Persist`](crate::persist::Persist)): [`Process`](crate::task::process::Process) (the
//!    address space and the process's identity, over [`mm`](crate::mm), [`host`](crate::host),
//!    [`time`](crate::time) and [`signal`](crate::signal)), [`Files`](crate::files::Files) (over
//!    [`fs`](crate::fs), the fd table and what each kind of description does),
//!    [`Net`](crate::net::Net), [`Sched`](crate::task::sched::Sched) (the threads and the
//!    clock), [`RunRecord`](crate::record::RunRecord) and
//!    [`Oracle`](crate::record::oracle::Oracle) (in [`record`](crate::record)),
//!    [`FaultState`](crate::faults::FaultState) (in [`faults`](crate::faults)),
//!    [`RandomStream`](crate::decisions::rng::RandomStream) (in [`decisions`](crate::decisions))
//!    and [`Procs`](crate::task::procs::Procs) (in [`task`](crate::task)). None of them knows the
//!    [`Kernel`].
//! 2. **This room** puts the parts together: [`Kernel`] is one field per part. It depends on
//!    the state rooms only.
//! 3. **The handler layer**, [`syscalls`](crate::syscalls), serves syscalls as methods of
//!    [`Kernel`] over its parts: [`sys_path`](crate::syscalls::sys_path) (paths, opening,
//!    metadata), [`sys_io`](crate::syscalls::sys_io) (reading and writing fds),
//!    [`sys_fs`](crate::syscalls::sys_fs) (durable writes, syncs, the namespace),
//!    [`sys_mem`](crate::syscalls::sys_mem) (the address space),
//!    [`sys_net`](crate::syscalls::sys_net) (sockets, pipes, epoll),
//!    [`sys_proc`](crate::syscalls::sys_proc) (process, time, identity),
//!    [`sys_signal`](crate::syscalls::sys_signal) (signals, their handlers' frames,
//!    `rt_sigreturn`), [`sys_sched`](crate::syscalls::sys_sched) (threads, futexes, sleeps and
//!    the scheduler), [`sys_process`](crate::syscalls::sys_process) (processes) and
//!    [`sys_deja`](crate::syscalls::sys_deja) (the deja syscall), each reached through its row of
//!    the table in [`syscalls`](crate::syscalls); and [`serve`](crate::syscalls::serve), which
//!    serves one syscall (the clock, faults, the trace) through the table, and the exceptions.
//!    It depends on this room and on the state rooms.
//!
//! # Saving
//!
//! [`Kernel::save`] writes each part's own bytes ([`Persist::save`](crate::persist::Persist::save):
//! `postcard` of its fields in declaration order) as one byte string, in the order of the
//! fields of [`Kernel`]; [`Kernel::restore`] restores and checks each part in that order,
//! giving each the facts it needs from the parts before it. Changing the order or the set of
//! fields of any saved struct changes the format. The bytes carry no version: the caller's
//! envelope carries the schema version. See [`persist`](crate::persist) for the helpers.
//!
//! This module holds the state, its construction ([`Kernel::load`]) and its save and restore;
//! [`report`] answers the shell's questions: registers, counts, the disk and crash states,
//! decisions and the final report.

use crate::prelude::*;
use alloc::collections::BTreeMap;

use snafu::{OptionExt as _, ResultExt as _};

use crate::decisions::rng::RandomStream;
use crate::faults::CrashState;
use crate::faults::{FaultKind, FaultRecord, FaultState};
use crate::files::fd::FdTable;
use crate::files::Files;
use crate::fs::Fs;
use crate::host::coverage::{CoverageRegion, MAX_COVERAGE_COUNTERS, SANCOV_SECTION};
use crate::host::hostchan::{plan_file, HostChannels, Placement, Rewrite};
use crate::host::jumps::Jumps;
use crate::mm::elf::{self, BiasOverflowsSnafu, OutsideLoadableSnafu, ET_DYN, PF_R, PF_W, PF_X};
use crate::mm::mappings::{Mappings, Vma, VmaKind};
use crate::mm::stack::{self, AuxInfo};
use crate::mm::user_layout::*;
use crate::net::Net;
use crate::persist::{DecodeSnafu, Persist, RawBytes, RestoreError, TrailingBytesSnafu};
use crate::record::not_found::Lookups;
use crate::record::oracle::Oracle;
use crate::record::trace::memory_digest;
use crate::record::RunRecord;
use crate::signal::Signals;
use crate::task::process::Process;
use crate::task::procs::Procs;
use crate::task::sched::Sched;
use crate::time::clock::Clock;
use crate::time::vdso::{self, VdsoMode, VDSO_ADDR, VVAR_ADDR};
use crate::{
    ArgsTooBigSnafu, BadInterpreterSnafu, CwdSnafu, DiskOverCapacitySnafu, DynamicSnafu, GuestPathSnafu,
    InvalidDiskSnafu, MalformedSnafu, OutOfMemorySnafu, TooBigSnafu,
};
use crate::{AssertionReport, Entry, ExitStatus, LoadError, Memory, ProgramSpec, Prot, RunReport, Stream, PAGE_SIZE};
use crate::{DecisionRecord, Disk};

mod report;

pub use report::CrashStates;

/// Share of the shell's free frames kept back for page tables when the commit capacity is
/// fixed at load time (3%).
pub const PAGE_TABLE_MARGIN_PERCENT: u64 = 3;
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
    /// The calling thread blocked or exited: no return value now (see [`crate::task::threads`]).
    Block,
    /// `rt_sigreturn`: the thread continues with this context.
    Resume(Box<crate::UserContext>),
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
    /// The address space and the identity of the process.
    pub(crate) process: Process,
    /// The file system, the fd table and the record locks.
    pub(crate) files: Files,
    /// Sockets, pipes, eventfds and epoll instances, and the attachment to the network.
    pub(crate) net: Net,
    /// The threads and the virtual clock.
    pub(crate) sched: Sched,
    /// The trace, pending output and the syscall counts.
    pub(crate) record: RunRecord,
    /// The assertion oracle and the lifecycle records.
    pub(crate) oracle: Oracle,
    /// The fault model and the decision log (faults, the scheduler and the SDK decide
    /// through it).
    pub(crate) faults: FaultState,
    /// The program's random bytes (`getrandom`, `/dev/urandom`, `AT_RANDOM`).
    pub(crate) rng: RandomStream,
    /// The node's processes: parents, groups, address spaces, the ones not running, zombies.
    pub(crate) procs: Procs,
    /// The paths the program looked for and did not get.
    pub(crate) lookups: Lookups,
}

impl core::fmt::Debug for Kernel {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Kernel")
            .field("syscalls", &self.record.tracer.syscalls())
            .field("virtual_time_ns", &self.sched.clock.now_ns())
            .field("entry", &self.process.entry)
            .field("brk", &self.process.brk_cur)
            .field("fs_base", &self.process.fs_base)
            .field("mappings", &self.process.mappings.iter().count())
            .field("commit", &self.commit())
            .field("exit", &self.process.exit)
            .finish_non_exhaustive()
    }
}

/// A segment's protection from its `p_flags`.
fn segment_prot(flags: u32) -> Prot {
    let bit = |f: u32, p: Prot| if flags & f != 0 { p.0 } else { 0 };
    Prot(bit(PF_R, Prot::READ) | bit(PF_W, Prot::WRITE) | bit(PF_X, Prot::EXEC))
}

/// Adds the pages `[ps, pe)` of a segment at file offset `p_offset` to `pages` (page → its
/// protection, the union of every segment on it, and the file offset of the page).
fn add_segment_pages(pages: &mut BTreeMap<u64, (Prot, u64)>, ps: u64, pe: u64, prot: Prot, p_offset: u64) {
    let mut a = ps;
    while a < pe {
        let e = pages.entry(a).or_insert((Prot::NONE, page_down(p_offset) + (a - ps)));
        e.0 .0 |= prot.0;
        a += PAGE_SIZE;
    }
}

/// `pages` as runs `(start, end, prot, file offset)` of adjacent pages with one protection and
/// consecutive file offsets: one mapping each.
fn page_runs(pages: &BTreeMap<u64, (Prot, u64)>) -> Vec<(u64, u64, Prot, u64)> {
    let mut run: Option<(u64, u64, Prot, u64)> = None;
    let mut runs = Vec::new();
    for (&a, &(prot, off)) in pages {
        match &mut run {
            Some((s, end, p, o)) if *end == a && *p == prot && *o + (a - *s) == off => *end += PAGE_SIZE,
            _ => {
                runs.extend(run.take());
                run = Some((a, a + PAGE_SIZE, prot, off));
            }
        }
    }
    runs.extend(run);
    runs
}

/// Tells `mem` where the executable segments of the ELF `bytes` (parsed: `img`), loaded with
/// `bias` added to its addresses, put its code ([`Memory::code_mapped`]): each segment's pages,
/// with the address of file offset 0 as that segment places it.
fn code_mapped(mem: &mut dyn Memory, bytes: &[u8], bias: u64, img: &elf::ElfImage) {
    for p in img.loads().filter(|p| p.p_flags & PF_X != 0) {
        let start = bias.wrapping_add(p.p_vaddr);
        let Some(end) = page_up(start.saturating_add(p.p_memsz)) else { continue };
        mem.code_mapped(bytes, page_down(start), end, start.wrapping_sub(p.p_offset));
    }
}

/// Maps the dynamic loader `path` (its bytes `bytes`, parsed as `img`) below the mmap area's top,
/// as a private mapping of the file, its code rewritten like the program's. Returns its load
/// bias (`AT_BASE`) and its entry point.
fn map_loader(
    mem: &mut dyn Memory,
    mappings: &mut Mappings,
    host: &mut HostChannels,
    rewrite: Rewrite,
    path: &str,
    bytes: &alloc::sync::Arc<[u8]>,
    img: &elf::ElfImage,
) -> Result<(u64, u64), LoadError> {
    let malformed = |vaddr: u64, memsz: u64| BiasOverflowsSnafu { vaddr, memsz };
    let low = page_down(img.min_vaddr());
    let high = img.loads().map(|p| p.p_vaddr.saturating_add(p.p_memsz)).max().unwrap_or(low);
    let span = page_up(high - low).context(malformed(low, high - low)).context(MalformedSnafu)?;
    let base = mappings
        .find_free(span, crate::mm::user_layout::MMAP_TOP)
        .ok_or(crate::mm::mem::MemError::OutOfFrames)
        .context(OutOfMemorySnafu { what: "the loader" })?;
    let bias = base - low;
    let mut page_prot: BTreeMap<u64, (Prot, u64)> = BTreeMap::new();
    let mut exec: Option<(u64, u64)> = None;
    for p in img.loads() {
        let start = bias + p.p_vaddr;
        let (ps, pe) = (page_down(start), page_up(start + p.p_memsz).unwrap_or(base + span));
        mem.populate(ps, pe - ps, Prot::RW).context(OutOfMemorySnafu { what: "the loader" })?;
        let data = &bytes[p.p_offset as usize..(p.p_offset + p.p_filesz) as usize];
        mem.write(start, data).context(OutOfMemorySnafu { what: "the loader" })?;
        if p.p_flags & PF_X != 0 {
            exec = Some(exec.map_or((ps, pe), |(a, b)| (a.min(ps), b.max(pe))));
        }
        add_segment_pages(&mut page_prot, ps, pe, segment_prot(p.p_flags), p.p_offset);
    }
    if let (Rewrite::On, Some((start, end))) = (rewrite, exec) {
        let at = Placement { name: path.to_string(), start, end, base: bias, by_addr: true };
        host.apply(mem, &plan_file(bytes), &at).context(OutOfMemorySnafu { what: "the loader" })?;
    }
    code_mapped(mem, bytes, bias, img);
    for (a, b, prot, offset) in page_runs(&page_prot) {
        mem.protect(a, b - a, prot);
        let kind = VmaKind::File {
            path: path.to_string(),
            data: crate::mm::mappings::FileBytes(bytes.clone()),
            offset,
            size: bytes.len() as u64,
            ino: 0, // the file's, once the file system exists (`Mappings::share_file_data`)
        };
        mappings.insert(Vma { start: a, end: b, prot, kind, shared: false });
    }
    Ok((bias, bias + img.entry))
}

/// A program to map: its bytes, parsed, the path it runs as (`/proc/self/exe`, the maps) and
/// the path it was executed by (`AT_EXECFN`).
pub(crate) struct Image<'a> {
    pub(crate) bytes: &'a [u8],
    pub(crate) img: &'a elf::ElfImage,
    pub(crate) path: &'a str,
    pub(crate) execfn: &'a str,
}

/// Maps a program into the current (empty) address space of `mem`, as Linux's
/// `load_elf_binary` does: its segments (code rewritten), its loader from `fs` when it is
/// dynamically linked, the vDSO, and a stack holding `argv`, `env` and the auxiliary vector.
/// Returns the address space's description and where the program starts.
#[allow(clippy::too_many_arguments)]
pub(crate) fn map_program<S: AsRef<[u8]>>(
    mem: &mut dyn Memory,
    fs: &Fs,
    image: &Image<'_>,
    argv: &[S],
    env: &[S],
    rewrite: Rewrite,
    jumps: Jumps,
    vdso_mode: VdsoMode,
    capacity: u64,
    random: [u8; 16],
) -> Result<(crate::task::procs::Mm, Entry), LoadError> {
    let img = image.img;
    // A dynamically linked program starts in its loader, found in the run's file system as
    // the program would find it (declared, or in the root, through its symlinks).
    let interp = match &img.interp {
        Some(path) => {
            let bytes = fs.static_at(path).context(DynamicSnafu { interpreter: path.clone() })?;
            let loader = elf::parse(&bytes)?;
            let shared = loader.e_type == ET_DYN && loader.interp.is_none();
            snafu::ensure!(shared, BadInterpreterSnafu { interpreter: path.clone() });
            Some((path.clone(), loader, bytes))
        }
        None => None,
    };
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
        segs.push((start, *p, ps, pe, segment_prot(p.p_flags)));
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
        let data = &image.bytes[off..off + p.p_filesz as usize];
        mem.write(*start, data).context(OutOfMemorySnafu { what: "the image" })?;
        add_segment_pages(&mut page_prot, *ps, *pe, *prot, p.p_offset);
    }
    let runs = page_runs(&page_prot);
    // Close the host channels in the code before it can run: rewrite the planned sites of
    // the executable segments (their pages are still writable here).
    let mut host = HostChannels::new(rewrite);
    if rewrite == Rewrite::On {
        let exec: Vec<(u64, u64)> =
            segs.iter().filter(|(_, p, ..)| p.p_flags & PF_X != 0).map(|(_, _, ps, pe, _)| (*ps, *pe)).collect();
        if let (Some(start), Some(end)) = (exec.iter().map(|r| r.0).min(), exec.iter().map(|r| r.1).max()) {
            let plan = plan_file(image.bytes);
            let base = if img.e_type == ET_DYN { PIE_BASE.wrapping_sub(min_page) } else { 0 };
            let at = Placement { name: image.path.to_string(), start, end, base, by_addr: true };
            host.apply(mem, &plan, &at).context(OutOfMemorySnafu { what: "the image" })?;
        }
    }
    let bias = reloc(min_page).map_or(0, |b| b.wrapping_sub(min_page));
    // The image's `syscall` sites become jumps into trampolines below it, while its pages are
    // still writable.
    if jumps == Jumps::On {
        let lowest = segs.iter().map(|s| s.2).min().unwrap_or(USER_START);
        let plan = crate::host::hostchan::plan_syscalls_file(image.bytes);
        host.jumps = crate::host::jumps::apply(mem, &mut mappings, &plan, bias, lowest)
            .context(OutOfMemorySnafu { what: "the image's jump sites" })?;
    }
    code_mapped(mem, image.bytes, bias, img);
    for (a, b, prot, offset) in runs {
        mem.protect(a, b - a, prot);
        mappings.insert(Vma { start: a, end: b, prot, kind: VmaKind::Image { offset }, shared: false });
    }
    let brk_start = segs.iter().map(|s| s.3).max().unwrap_or(USER_START).max(USER_START);
    // The loader, where Linux's `load_elf_binary` puts it: in the mmap area, top-down.
    let loader = match &interp {
        Some((path, loader, bytes)) => Some(map_loader(mem, &mut mappings, &mut host, rewrite, path, bytes, loader)?),
        None => None,
    };
    let vdso = match vdso_mode {
        VdsoMode::On if mappings.is_free(VVAR_ADDR, VDSO_ADDR + vdso::image().pages() * PAGE_SIZE) => {
            let state = vdso::map(mem, &mut mappings).context(OutOfMemorySnafu { what: "the vDSO" })?;
            if rewrite == Rewrite::On {
                let img = vdso::image();
                let end = VDSO_ADDR + img.pages() * PAGE_SIZE;
                let at = Placement { name: "[vdso]".into(), start: VDSO_ADDR, end, base: VDSO_ADDR, by_addr: true };
                host.apply(mem, &plan_file(&img.bytes), &at).context(OutOfMemorySnafu { what: "the vDSO" })?;
            }
            Some(state)
        }
        _ => None,
    };

    // The stack.
    mappings.insert(Vma {
        start: STACK_TOP - STACK_SIZE,
        end: STACK_TOP,
        prot: Prot::RW,
        kind: VmaKind::Stack,
        shared: false,
    });
    let program_entry = reloc(img.entry).unwrap_or(0);
    let phdr = reloc(img.phdr_vaddr()).unwrap_or(0);
    let aux = AuxInfo {
        phdr,
        phnum: img.phdrs.len() as u64,
        entry: program_entry,
        base: loader.map_or(0, |l| l.0),
        vdso: vdso.map(|_| VDSO_ADDR),
    };
    let entry_rip = loader.map_or(program_entry, |l| l.1);
    let st = stack::build(STACK_TOP, argv, env, image.execfn, random, aux, STACK_SIZE / 4).context(ArgsTooBigSnafu)?;
    let eager = page_up(STACK_TOP - st.rsp).unwrap_or(STACK_SIZE).max(STACK_EAGER);
    mem.populate(STACK_TOP - eager, eager, Prot::RW).context(OutOfMemorySnafu { what: "the stack" })?;
    mem.write(st.rsp, &st.bytes).context(OutOfMemorySnafu { what: "the stack" })?;

    // The loader's mappings share the file system's copy of its bytes, and its inode.
    mappings.share_file_data(fs);
    let entry = Entry { rip: entry_rip, rsp: st.rsp };
    // The coverage counters: an allocated section inside one loaded segment, not too big.
    let coverage = elf::find_section(image.bytes, SANCOV_SECTION.as_bytes())
        .filter(|&(addr, len)| {
            len <= MAX_COVERAGE_COUNTERS
                && img
                    .loads()
                    .any(|p| addr >= p.p_vaddr && addr.checked_add(len).is_some_and(|e| e <= p.p_vaddr + p.p_memsz))
        })
        .and_then(|(addr, len)| Some(CoverageRegion { addr: reloc(addr)?, len }))
        .filter(|r| r.validate().is_ok());
    let mm = crate::task::procs::Mm {
        mappings,
        brk_start,
        brk_cur: brk_start,
        exec_stack: img.exec_stack,
        entry,
        coverage,
        host,
        vdso,
    };
    Ok((mm, entry))
}

impl Kernel {
    /// Loads the ELF image into `mem`, builds the initial stack and returns the entry state.
    pub fn load(spec: ProgramSpec, mem: &mut dyn Memory) -> Result<(Kernel, Entry), LoadError> {
        let img = elf::parse(&spec.image)?;
        // A dynamically linked program starts in its loader, which must be among the run's files.
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
        snafu::ensure!(spec.cpus <= crate::MAX_CPUS, crate::CpusSnafu { cpus: spec.cpus });
        let fs = Fs::new(
            spec.fs,
            spec.disk.as_ref(),
            crate::fs::Inputs {
                root: spec.root.as_deref(),
                files: &spec.files,
                sdk_output: crate::record::antithesis::output_path(&spec.env),
            },
            &spec.exe_path,
            &spec.image,
            spec.cpus.max(1),
        );
        let free = mem.free_frames();
        let capacity = free - free / 100 * PAGE_TABLE_MARGIN_PERCENT - (free % 100) * PAGE_TABLE_MARGIN_PERCENT / 100;
        let mut rng = RandomStream::new(spec.seed);
        let mut random = [0u8; 16];
        rng.fill(&mut random);
        let image = Image { bytes: &spec.image, img: &img, path: &spec.exe_path, execfn: &spec.exe_path };
        let (mm, entry) = map_program(
            mem,
            &fs,
            &image,
            &spec.argv,
            &spec.env,
            spec.rewrite,
            spec.jumps,
            spec.vdso,
            capacity,
            random,
        )?;
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
        let mut process = Process {
            mappings: Mappings::default(),
            brk_start: USER_START,
            brk_cur: USER_START,
            exec_stack: false,
            entry,
            exit: None,
            fs_base: 0,
            gs_base: 0,
            signals: Signals::default(),
            rlimits,
            umask: 0o022,
            clear_child_tid: 0,
            robust_list: (0, 0),
            comm,
            last_fault: None,
            fault_repeats: 0,
            coverage: None,
            host: HostChannels::new(spec.rewrite),
            vdso: None,
            cpus: spec.cpus.max(1),
            itimer_real: None,
        };
        mm.put(&mut process);
        let cwd = if spec.cwd.is_empty() || spec.cwd == "/" {
            crate::fs::ROOT
        } else {
            let problem = |problem: &str| CwdSnafu { path: spec.cwd.clone(), problem: problem.to_string() };
            snafu::ensure!(spec.cwd.starts_with('/'), problem("not an absolute path"));
            match fs.walk(crate::fs::ROOT, spec.cwd.as_bytes(), true) {
                Ok(crate::fs::Walked { id: Some(id), .. }) if fs.get(id).is_some_and(|i| i.is_dir()) => id,
                Ok(crate::fs::Walked { id: Some(_), .. }) => return problem("not a directory").fail(),
                _ => return problem("no such directory").fail(),
            }
        };
        let files = Files { fs, locks: BTreeMap::new(), fds: FdTable::new(&spec.stdin), cwd };
        let mut sched = Sched { clock: Clock::new(spec.seed), ..Sched::default() };
        for t in sched.threads.threads.values_mut() {
            t.space = mem.space();
        }
        let procs = Procs::first(mem.space(), files.fs.exe_path(), &spec.argv);
        let mut kernel = Kernel {
            process,
            files,
            net: Net::default(),
            sched,
            record: RunRecord::new(spec.record_trace),
            oracle: Oracle::default(),
            faults,
            rng,
            procs,
            lookups: Lookups::default(),
        };
        kernel.publish_clock(mem);
        Ok((kernel, entry))
    }

    /// The complete kernel state as bytes (each part's [`Persist::save`] as a postcard byte
    /// string, in field order; no header: wrap it in an envelope that carries the schema
    /// version).
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
        let parts = [
            self.process.save(),
            self.files.save(),
            self.net.save(),
            self.sched.save(),
            self.record.save(),
            self.oracle.save(),
            self.faults.save(),
            self.rng.save(),
            self.procs.save(),
            self.lookups.save(),
        ];
        let mut out = Vec::with_capacity(parts.iter().map(|p| p.len() + 10).sum());
        for p in &parts {
            // Writing into a `Vec` cannot fail.
            out = postcard::to_extend(&RawBytes(p), out).expect("postcard writes a byte string");
        }
        out
    }

    /// Rebuilds a kernel from [`Kernel::save`] output. Damaged or hostile bytes give an error,
    /// never a panic: each part is checked against the invariants the syscall code relies on
    /// (VMAs sorted and non-overlapping, fds naming open descriptions, counts consistent with
    /// the trace, ...), given what its checks need from the parts before it. File contents
    /// held by several parts of the state are shared again.
    pub fn restore(bytes: &[u8]) -> Result<Kernel, RestoreError> {
        let mut rest = bytes;
        let mut part = || -> Result<&[u8], RestoreError> {
            let (part, after) = postcard::take_from_bytes::<&[u8]>(rest).context(DecodeSnafu)?;
            rest = after;
            Ok(part)
        };
        let mut process = Process::restore(part()?, &())?;
        let files = Files::restore(part()?, &())?;
        let net = Net::restore(part()?, &())?;
        let sched = Sched::restore(part()?, &process.exit.is_some())?;
        let record = RunRecord::restore(part()?, &())?;
        let oracle = Oracle::restore(part()?, &record.syscalls())?;
        let faults = FaultState::restore(part()?, &())?;
        let rng = RandomStream::restore(part()?, &())?;
        let mut procs = Procs::restore(part()?, &())?;
        // The last part is optional: states saved before it existed have none.
        let lookups = match rest {
            [] => Lookups::default(),
            _ => {
                let (part, after) = postcard::take_from_bytes::<&[u8]>(rest).context(DecodeSnafu)?;
                rest = after;
                Lookups::restore(part, &())?
            }
        };
        snafu::ensure!(rest.is_empty(), TrailingBytesSnafu { count: rest.len() });
        process.mappings.share_file_data(&files.fs);
        for mm in procs.spaces.values_mut() {
            mm.mappings.share_file_data(&files.fs);
        }
        for p in procs.table.values_mut() {
            if let Some(q) = &mut p.parked {
                q.mappings.share_file_data(&files.fs);
            }
        }
        crate::task::procs::check_against(&procs, &sched, &files)?;
        Ok(Kernel { process, files, net, sched, record, oracle, faults, rng, procs, lookups })
    }

    /// From now on random bytes (`getrandom`, `/dev/urandom`) come from the stream of `seed`,
    /// from its first byte: how a forked child takes other decisions than its parent. The
    /// reseed enters the trace digest (a pseudo-entry), so children reseeded differently have
    /// different digests even before they draw; [`Kernel::random_bytes_used`] keeps counting.
    /// The fault decision stream switches to `seed`'s too.
    pub fn reseed(&mut self, seed: u64) {
        self.rng.reseed(seed);
        self.reseed_decisions(seed);
        self.record.tracer.reseed(seed, self.sched.clock.now_ns());
    }

    /// From now on decisions (SDK random values and choices, fault rolls) come from the
    /// stream of `seed`; random bytes and the trace are untouched. With overrides pinning the
    /// decisions before some index, a child keeps its parent's course up to there and
    /// draws everything after afresh.
    pub fn reseed_decisions(&mut self, seed: u64) {
        self.faults.log.stream.reseed_with_context(crate::faults::FAULT_CONTEXT, seed);
    }

    /// Gives this core, a later state of `parent` down some course, the decision stream a child
    /// of `parent` reseeded with `reseed` (`None`: not reseeded) would have here after taking the
    /// same decisions: `parent`'s stream, reseeded, then advanced by the natural draw of every
    /// decision taken since `parent` (each decision draws one, overridden or not). A later fork
    /// whose course every decision of which a child pins with its overrides serves that child
    /// whatever its reseed.
    pub fn restream_decisions(&mut self, parent: &Kernel, reseed: Option<u64>) {
        let mut log = parent.faults.log.clone();
        if let Some(seed) = reseed {
            log.stream.reseed_with_context(crate::faults::FAULT_CONTEXT, seed);
        }
        let from = parent.faults.log.decisions.len();
        for d in self.faults.log.decisions.get(from..).unwrap_or_default() {
            log.redraw(d.options);
        }
        self.faults.log.stream = log.stream;
    }
}

/// `AT_FDCWD` as a register value.
pub(crate) const AT_FDCWD: u64 = -100i64 as u64;
/// `AT_SYMLINK_NOFOLLOW`.
pub(crate) const AT_SYMLINK_NOFOLLOW: u64 = 0x100;
