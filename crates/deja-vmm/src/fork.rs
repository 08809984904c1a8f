//! In-process forks: one parent state kept in memory ([`Parent`]), many children run from it.
//!
//! The parent is a program stopped at a syscall boundary ([`crate::Vm::run_until`]). Its RAM
//! image (up to the allocator's high-water mark), allocator state, vCPU state and syscall core
//! are copied once. Each child then runs in the same VM; [`Fork::reset`] brings the VM back to
//! the parent by rewriting only the frames written since the last reset — the guest's writes
//! from KVM's dirty-page log, the monitor's own writes from [`crate::paging`]'s host dirty map —
//! and by restoring REGS/SREGS (through the sync area) and XSAVE. Page-table entries that the
//! child had made present and the reset changed are replayed from ring 0 so that no shadow MMU
//! or TLB keeps the child's mappings. Whole memory is never copied on a fork.

use std::collections::BTreeMap;
use std::time::Instant;

use deja_kernel::{Kernel, ProgramSpec, Stream, PAGE_SIZE};

use std::sync::Arc;

use crate::coverage::{BlockHit, BlockImage, Seen};
use crate::identity::Settings;
use crate::paging::{canonical, lookup_with, FrameState, PTE_ADDR, PTE_P};
use crate::session::{BootOptions, Session};
use crate::snapshot::VcpuState;
use crate::vm::{Vm, VmError};
use crate::{Run, RunError};

/// What one reset did.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct ResetStats {
    /// Frames rewritten from the parent image.
    pub dirty_frames: u64,
    /// Page-table entries replayed from ring 0.
    pub resynced_entries: u64,
    /// Wall time of the reset in nanoseconds (host time; for benchmarks).
    pub reset_ns: u64,
}

/// A VM's state at a stop, kept in memory to reset that VM to: its RAM image up to the
/// allocator's high-water mark, the allocator's state, the vCPU, the threads and the core.
#[derive(Debug)]
pub struct Parent {
    ram: Vec<u8>,
    frames: FrameState,
    vcpu: VcpuState,
    kernel: Kernel,
    bases: (u64, u64),
    /// The thread in the vCPU and the other threads' saved contexts.
    threads: (u64, Vec<(u64, crate::vm::ThreadContext)>),
}

/// A later state of a [`Parent`], kept as the pages where it differs from it
/// ([`Parent::capture_late`]): a fork taken further down a child's course, whose own children
/// reset the same VM to it ([`Parent::reset_to`]) and skip the course up to it.
#[derive(Debug)]
pub struct LateParent {
    pages: BTreeMap<u64, Box<[u8]>>,
    frames: FrameState,
    vcpu: VcpuState,
    kernel: Kernel,
    bases: (u64, u64),
    threads: (u64, Vec<(u64, crate::vm::ThreadContext)>),
}

impl LateParent {
    /// The bytes of guest memory it keeps.
    pub fn bytes(&self) -> u64 {
        self.pages.len() as u64 * PAGE_SIZE
    }

    /// The frames where it differs from its parent, ascending.
    pub fn frames(&self) -> Vec<u64> {
        self.pages.keys().copied().collect()
    }

    /// The core as it was at the capture.
    pub fn kernel(&self) -> &Kernel {
        &self.kernel
    }

    /// [`Parent::disarm_blocks`] for this state, whose parent is `root` (already disarmed):
    /// the original byte goes back in the pages it keeps, and a frame it translates a block
    /// to that it does not keep becomes one it keeps, copied from `root` and mended.
    pub fn disarm_blocks(&mut self, root: &Parent, blocks: &BlockImage, ids: &[u32]) {
        let mut mend: Vec<(u64, u8)> = Vec::new();
        {
            let read = |gpa: u64| {
                let page = gpa & !(PAGE_SIZE - 1);
                let off = (gpa - page) as usize;
                let bytes = match self.pages.get(&page) {
                    Some(p) => p.get(off..off + 8),
                    None => root.ram.get(gpa as usize..gpa as usize + 8),
                };
                bytes.map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
            };
            for (space, addr, original) in block_sites(&self.frames, blocks, ids) {
                let page = addr & !(PAGE_SIZE - 1);
                if let Some((_, pte)) = lookup_with(read, space, page) {
                    mend.push(((pte & PTE_ADDR) | (addr & (PAGE_SIZE - 1)), original));
                }
            }
        }
        for (gpa, original) in mend {
            let frame = gpa & !(PAGE_SIZE - 1);
            let page = self.pages.entry(frame).or_insert_with(|| {
                let mut p = vec![0u8; PAGE_SIZE as usize].into_boxed_slice();
                if let Some(src) = root.ram.get(frame as usize..(frame + PAGE_SIZE) as usize) {
                    p.copy_from_slice(src);
                }
                p
            });
            page[(gpa - frame) as usize] = original;
        }
    }
}

impl Parent {
    /// Puts the original byte of each block of `ids` of `blocks` back in the parent's image:
    /// the program's blocks in the spaces running it, a shared object's where the parent had
    /// placed it. A child reset to it no longer stops there.
    pub fn disarm_blocks(&mut self, blocks: &BlockImage, ids: &[u32]) {
        // Addresses are translated in the parent's own page tables (its image): a child's
        // spaces and frames need not be the parent's.
        let ram = &mut self.ram;
        for (root, addr, original) in block_sites(&self.frames, blocks, ids) {
            if let Some(b) = translate_image(ram, root, addr).and_then(|gpa| ram.get_mut(gpa as usize)) {
                *b = original;
            }
        }
    }

    /// Captures `vm` (stopped by [`Vm::run_until`], with its dirty log on) and `kernel`, and
    /// clears the dirty logs: from here on they hold what a child wrote.
    pub fn capture(vm: &mut Vm, kernel: &Kernel) -> Result<Parent, VmError> {
        let (threads, vcpu, frames) = stopped_state(vm, kernel)?;
        let mut ram = vec![0u8; frames.bump as usize];
        vm.space.read_phys(0, &mut ram);
        vm.take_guest_dirty()?;
        vm.space.take_host_dirty();
        Ok(Parent { ram, frames, vcpu, kernel: kernel.clone(), bases: vm.bases(), threads })
    }

    /// The core as the parent left it.
    pub fn kernel(&self) -> &Kernel {
        &self.kernel
    }

    /// Resets `vm` (the one captured) to the parent, rewriting only what changed since the
    /// last reset.
    pub fn reset(&self, vm: &mut Vm) -> Result<ResetStats, VmError> {
        self.reset_to(vm, &[], None)
    }

    /// Captures `vm` as a later state of this parent: `vm` was captured as this parent, then
    /// reset to it or to one of its later states whose pages are `based` (empty: to the parent
    /// itself), and has run on to a stop. Only the frames that differ from the parent are kept:
    /// `based` and what was written since the reset. The dirty logs are cleared, so `vm` is at
    /// the new state, whose [`LateParent::frames`] are its new `based`.
    pub fn capture_late(&self, vm: &mut Vm, kernel: &Kernel, based: &[u64]) -> Result<LateParent, VmError> {
        let start = Instant::now();
        let (threads, vcpu, frames) = stopped_state(vm, kernel)?;
        let mut written = vm.take_guest_dirty()?;
        written.extend(vm.space.take_host_dirty());
        written.extend_from_slice(based);
        written.sort_unstable();
        written.dedup();
        let mut pages = BTreeMap::new();
        for frame in written {
            let mut page = vec![0u8; PAGE_SIZE as usize].into_boxed_slice();
            vm.space.read_phys(frame, &mut page);
            pages.insert(frame, page);
        }
        crate::profile::late_capture(start.elapsed().as_nanos() as u64);
        Ok(LateParent { pages, frames, vcpu, kernel: kernel.clone(), bases: vm.bases(), threads })
    }

    /// Whether `vm` stands where a state can be captured: its vCPU runs in the space its page
    /// tables name current (else [`Parent::capture_late`] refuses, and a later fork is not
    /// taken there).
    pub fn capturable(vm: &mut Vm) -> Result<bool, VmError> {
        Ok(vm.vcpu_state()?.sregs.cr3 == vm.space.frame_state().root)
    }

    /// The parent's page at `frame`, or a later state's (`to`) where that differs.
    fn page<'a>(&'a self, to: Option<&'a LateParent>, frame: u64, zero: &'a [u8]) -> &'a [u8] {
        if let Some(page) = to.and_then(|l| l.pages.get(&frame)) {
            return page;
        }
        if frame < self.frames.bump {
            &self.ram[frame as usize..(frame + PAGE_SIZE) as usize]
        } else {
            zero
        }
    }

    /// Resets `vm` to the parent (`to` `None`) or to a later state of it ([`Parent::capture_late`]),
    /// rewriting only what changed since the last reset. `based` are the frames where the state
    /// `vm` was last reset to (or captured at) differs from the parent: empty for the parent
    /// itself, else that later state's [`LateParent::frames`].
    pub fn reset_to(&self, vm: &mut Vm, based: &[u64], to: Option<&LateParent>) -> Result<ResetStats, VmError> {
        let start = Instant::now();
        let mut frames = vm.take_guest_dirty()?;
        frames.extend(vm.space.take_host_dirty());
        frames.extend_from_slice(based);
        if let Some(l) = to {
            frames.extend(l.pages.keys().copied());
        }
        frames.sort_unstable();
        frames.dedup();
        let zero = [0u8; PAGE_SIZE as usize];
        let mut current = [0u8; PAGE_SIZE as usize];
        // Entries the child removed and the guest has not seen replayed yet (a space dropped
        // just before the child ended) are replayed with the parent's values.
        let mut resync = vm.space.take_stale();
        for &frame in &frames {
            let parent = self.page(to, frame, &zero);
            if let Some((level, base)) = vm.space.page_table(frame) {
                vm.space.read_phys(frame, &mut current);
                let span = 1u64 << (12 + 9 * level);
                for i in 0..512usize {
                    let cur = u64::from_le_bytes(current[8 * i..8 * i + 8].try_into().unwrap_or([0; 8]));
                    let par = u64::from_le_bytes(parent[8 * i..8 * i + 8].try_into().unwrap_or([0; 8]));
                    if cur != par && cur & PTE_P != 0 {
                        resync.push((frame + 8 * i as u64, canonical(base + i as u64 * span)));
                    }
                }
            }
            vm.space.write_phys(frame, parent);
        }
        let (state, threads, vcpu, bases) = match to {
            Some(l) => (&l.frames, &l.threads, &l.vcpu, l.bases),
            None => (&self.frames, &self.threads, &self.vcpu, self.bases),
        };
        vm.space.set_frame_state(state);
        resync.sort_unstable();
        resync.dedup();
        if !resync.is_empty() {
            vm.pt_sync_entries(&resync)?;
            // The routine's own writes are the parent's values; forget them.
            vm.take_guest_dirty()?;
        }
        vm.space.take_host_dirty();
        vm.set_thread_contexts(threads.0, &threads.1);
        vm.set_child_state(vcpu, bases.0, bases.1)?;
        vm.cuts.clear();
        let reset_ns = start.elapsed().as_nanos() as u64;
        crate::profile::reset(reset_ns);
        Ok(ResetStats { dirty_frames: frames.len() as u64, resynced_entries: resync.len() as u64, reset_ns })
    }

    /// BLAKE3 (hex) of the guest RAM the parent had in a VM of `size` bytes: its image, then
    /// zeros.
    pub fn ram_digest(&self, size: u64) -> String {
        let mut h = blake3::Hasher::new();
        h.update(&self.ram);
        let zero = vec![0u8; 1 << 20];
        let mut left = size - self.ram.len() as u64;
        while left > 0 {
            let n = left.min(zero.len() as u64) as usize;
            h.update(&zero[..n]);
            left -= n as u64;
        }
        h.finalize().to_hex().to_string()
    }
}

/// The threads, vCPU and allocator of `vm` at a stop, refused where the vCPU does not run in
/// the space its page tables name current.
#[allow(clippy::type_complexity)]
fn stopped_state(
    vm: &mut Vm,
    kernel: &Kernel,
) -> Result<((u64, Vec<(u64, crate::vm::ThreadContext)>), VcpuState, FrameState), VmError> {
    let threads = vm.thread_contexts(kernel);
    let vcpu = vm.vcpu_state()?;
    let frames = vm.space.frame_state();
    if vcpu.sregs.cr3 != frames.root {
        return Err(VmError::Unexpected {
            what: format!(
                "the vCPU runs in space {:#x}, the page tables' current is {:#x}",
                vcpu.sregs.cr3, frames.root
            ),
            rip: vcpu.regs.rip,
        });
    }
    Ok((threads, vcpu, frames))
}

/// Where each block of `ids` carries a breakpoint in a state whose allocator is `frames`, as
/// (space, address, original byte): the program's blocks in the spaces running it, a shared
/// object's where the state had placed it.
fn block_sites(frames: &FrameState, blocks: &BlockImage, ids: &[u32]) -> Vec<(u64, u64, u8)> {
    let mut at = Vec::new();
    for &id in ids {
        let id = id as usize;
        let Some(original) = blocks.original_of(id) else { continue };
        if let Some(addr) = blocks.addr(id) {
            at.extend(frames.blocks_spaces.iter().map(|&space| (space, addr, original)));
        }
        for p in &frames.placed {
            at.extend(blocks.placed_addr(p, id).map(|addr| (p.space, addr, original)));
        }
    }
    at
}

/// The guest-physical address of user address `va` in the space at `root` of a RAM image.
fn translate_image(ram: &[u8], root: u64, va: u64) -> Option<u64> {
    let read = |gpa: u64| {
        let at = gpa as usize;
        ram.get(at..at + 8).map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
    };
    let page = va & !(PAGE_SIZE - 1);
    lookup_with(read, root, page).map(|(_, pte)| (pte & PTE_ADDR) | (va & (PAGE_SIZE - 1)))
}

/// How many later forks a program's [`Fork`] keeps by default ([`Fork::set_late_forks`]).
pub const LATE_FORKS: usize = 8;

/// The guest memory a fork's later forks may keep between them (of a program, or of every
/// node of a cluster): beyond it the least recently used go, and a later fork that alone
/// would pass it is not kept.
pub const LATE_BYTES: u64 = 512 << 20;

/// A later fork of a program: its state at the first syscall trap with `at` decisions taken,
/// down a child's course. It serves every child whose course is its creator's up to there.
#[derive(Debug)]
struct Late {
    at: u64,
    /// What determined its creator's course besides its decisions (the caller's words for it).
    key: Vec<u8>,
    /// Its creator's reseed.
    reseed: Option<u64>,
    parent: LateParent,
    /// The breakpoints its creator hit on the way, and its cuts.
    hits: Vec<BlockHit>,
    cuts: Vec<u64>,
    used: u64,
}

/// A parent state in memory and the session its children run in.
#[derive(Debug)]
pub struct Fork {
    session: Session,
    parent: Parent,
    /// The syscall index the parent stopped at.
    pub at_syscall: u64,
    /// What the last reset did.
    pub last_reset: ResetStats,
    /// The frames where the state the VM was last reset to differs from the parent's.
    based: Vec<u64>,
    late: Vec<Late>,
    late_cap: usize,
    children: u64,
    /// The decisions taken where the last child started: the parent's, or a later fork's.
    pub last_start: u64,
}

impl Fork {
    /// Runs `spec` under `settings` until it traps for syscall `at_syscall` and keeps that state
    /// as the parent. Output the parent writes on the way goes to `sink`.
    pub fn new(
        spec: ProgramSpec,
        memory: u64,
        settings: &Settings,
        at_syscall: u64,
        sink: &mut dyn FnMut(Stream, &[u8]),
    ) -> Result<Fork, RunError> {
        Fork::with_blocks(spec, memory, settings, at_syscall, None, sink).map(|(f, _)| f)
    }

    /// [`Fork::new`] with block coverage ([`crate::coverage`]): every block of `blocks` armed
    /// from the first instruction, so the parent's own run records what it reaches (returned)
    /// and its image keeps a breakpoint on every other block for the children.
    pub fn with_blocks(
        spec: ProgramSpec,
        memory: u64,
        settings: &Settings,
        at_syscall: u64,
        blocks: Option<Arc<BlockImage>>,
        sink: &mut dyn FnMut(Stream, &[u8]),
    ) -> Result<(Fork, Vec<BlockHit>), RunError> {
        let opts = BootOptions { dirty_log: true, ..BootOptions::new(*settings) };
        let mut session = Session::boot_with(spec, memory, opts)?;
        if let Some(b) = blocks {
            session.cover_blocks(b, Seen::default());
        }
        if !session.run_to_syscall(at_syscall, sink)? {
            return Err(RunError::Vm {
                source: VmError::Unexpected {
                    what: format!("the program stopped before syscall {at_syscall}"),
                    rip: 0,
                },
            });
        }
        let (vm, kernel) = session.parts();
        let hits = vm.take_block_hits();
        let parent = Parent::capture(vm, kernel)?;
        let fork = Fork {
            session,
            parent,
            at_syscall,
            last_reset: ResetStats::default(),
            based: Vec::new(),
            late: Vec::new(),
            late_cap: LATE_FORKS,
            children: 0,
            last_start: 0,
        };
        Ok((fork, hits))
    }

    /// The blocks `ids` are seen by the campaign: their breakpoints come out of the parent's
    /// image as well as the VM, so no later child stops there.
    pub fn disarm_blocks(&mut self, ids: &[u32]) {
        let fresh = self.session.disarm_blocks(ids);
        let (vm, _) = self.session.parts();
        let Some(blocks) = vm.space.armed_blocks().cloned() else { return };
        self.parent.disarm_blocks(&blocks, &fresh);
        for late in &mut self.late {
            late.parent.disarm_blocks(&self.parent, &blocks, &fresh);
        }
    }

    /// Resets the VM to the parent, rewriting only what changed since the last reset.
    pub fn reset(&mut self) -> Result<ResetStats, VmError> {
        let vm = self.session.parts().0;
        self.last_reset = self.parent.reset_to(vm, &self.based, None)?;
        self.based.clear();
        vm.take_block_hits();
        self.session.set_kernel(self.parent.kernel.clone());
        Ok(self.last_reset)
    }

    /// How many later forks it keeps now.
    pub fn late_forks(&self) -> usize {
        self.late.len()
    }

    /// Keeps at most `n` later forks (0: none are taken, and those kept are dropped), and
    /// at most [`LATE_BYTES`] of guest memory in them.
    pub fn set_late_forks(&mut self, n: usize) {
        self.late_cap = n;
        while self.late.len() > self.late_cap || self.late.iter().map(|l| l.parent.bytes()).sum::<u64>() > LATE_BYTES {
            let Some(i) = self.late.iter().enumerate().min_by_key(|(_, l)| l.used).map(|(i, _)| i) else { break };
            self.late.remove(i);
        }
    }

    /// Whether `late` serves a child with `key`, `overrides` and `reseed`: the same key, and
    /// the same choice at every decision between the fork point and the later fork — pinned by
    /// an override that gives the choice its creator took, or drawn by both from the same
    /// stream.
    fn serves(&self, late: &Late, key: &[u8], overrides: &BTreeMap<u64, u64>, reseed: Option<u64>) -> bool {
        let base = self.parent.kernel.decision_count() as usize;
        let taken = late.parent.kernel.decisions();
        key == late.key.as_slice()
            && taken.get(base..late.at as usize).is_some_and(|span| {
                span.iter().all(|d| match overrides.get(&d.index) {
                    Some(&c) => (if d.options == 0 { c } else { c % d.options }) == d.choice,
                    None => reseed == late.reseed && !d.overridden,
                })
            })
    }

    /// [`Fork::run_child_with`] from the latest later fork that serves the child (its course is
    /// the child's up to there), if one is kept; and, when `take` names a count of decisions
    /// past where the child starts, leaving a later fork at the first syscall trap with that
    /// many decisions taken (one of [`Run::cuts`] of a run steered the same up to there),
    /// unless one is kept there.
    ///
    /// `key` names what determines a child's course besides its decisions (its faults), and
    /// `overrides` and `reseed` are what `prepare` gives the core. A later fork serves a child
    /// with its creator's key whose every decision up to it has its creator's choice: pinned by
    /// an override, or drawn from the same stream. From a later fork the child's core is the
    /// fork's, with the child's overrides and its decision stream
    /// ([`Kernel::restream_decisions`]); from the parent, `prepare` adjusts it. The lives are
    /// the same whichever fork the child ran from, its breakpoint hits and cuts included.
    #[allow(clippy::too_many_arguments)]
    pub fn run_child_late(
        &mut self,
        prepare: &mut dyn FnMut(&mut Kernel),
        key: &[u8],
        overrides: &BTreeMap<u64, u64>,
        reseed: Option<u64>,
        take: Option<u64>,
        sink: &mut dyn FnMut(Stream, &[u8]),
    ) -> Result<Vec<crate::Incarnation>, RunError> {
        self.children += 1;
        let base = self.parent.kernel.decision_count();
        let from = (0..self.late.len())
            .filter(|&j| self.serves(&self.late[j], key, overrides, reseed))
            .max_by_key(|&j| self.late[j].at);
        match from {
            Some(j) => {
                let late = &mut self.late[j];
                late.used = self.children;
                let vm = self.session.parts().0;
                self.last_reset = self.parent.reset_to(vm, &self.based, Some(&late.parent))?;
                self.based = late.parent.frames();
                vm.take_block_hits();
                vm.block_hits = late.hits.clone();
                vm.cuts = late.cuts.clone();
                let mut kernel = late.parent.kernel.clone();
                kernel.set_decision_overrides(overrides.clone());
                if reseed != late.reseed {
                    kernel.restream_decisions(&self.parent.kernel, reseed);
                }
                self.session.set_kernel(kernel);
                crate::profile::child(Some(late.at - base));
            }
            None => {
                self.reset()?;
                prepare(self.session.kernel_mut());
                crate::profile::child(None);
            }
        }
        let start = self.session.parts().1.decision_count();
        self.last_start = start;
        let kept = |l: &Late| l.at == take.unwrap_or(0) && self.serves(l, key, overrides, reseed);
        let wanted = take.filter(|&t| self.late_cap > 0 && t > start && !self.late.iter().any(kept));
        if let Some(at) = wanted {
            if self.session.run_to_decisions(at, sink)? && Parent::capturable(self.session.parts().0)? {
                let based = std::mem::take(&mut self.based);
                let (vm, kernel) = self.session.parts();
                let parent = self.parent.capture_late(vm, kernel, &based)?;
                self.based = parent.frames();
                let late = Late {
                    at,
                    key: key.to_vec(),
                    reseed,
                    parent,
                    hits: vm.block_hits.clone(),
                    cuts: vm.cuts.clone(),
                    used: self.children,
                };
                self.late.push(late);
                crate::profile::late_taken();
                self.set_late_forks(self.late_cap);
            }
        }
        self.session.lives(sink, None)
    }

    /// Resets to the parent, then runs one child to the end. `reseed` gives the child a random
    /// stream of its own: a different decision than the parent would have taken.
    pub fn run_child(&mut self, reseed: Option<u64>, sink: &mut dyn FnMut(Stream, &[u8])) -> Result<Run, RunError> {
        self.reset()?;
        if let Some(seed) = reseed {
            self.session.kernel_mut().reseed(seed);
        }
        self.session.run(sink)
    }

    /// Resets to the parent, lets `prepare` adjust the child's core (decision overrides, faults),
    /// then runs the child to its end — restarting it in fresh VMs after injected crashes. The
    /// same `prepare` applied to a fresh session stopped at this fork's syscall is the same run.
    pub fn run_child_with(
        &mut self,
        prepare: &mut dyn FnMut(&mut Kernel),
        sink: &mut dyn FnMut(Stream, &[u8]),
    ) -> Result<Vec<crate::Incarnation>, RunError> {
        self.reset()?;
        prepare(self.session.kernel_mut());
        self.session.lives(sink, None)
    }

    /// The syscall core as the parent left it (for reading its decision count, its report).
    pub fn parent_kernel(&self) -> &Kernel {
        &self.parent.kernel
    }

    /// Runs a child until it traps for syscall `n`, without finishing it (for benchmarks that
    /// measure resets after a known amount of work).
    pub fn run_child_until(&mut self, n: u64, sink: &mut dyn FnMut(Stream, &[u8])) -> Result<(), RunError> {
        self.reset()?;
        self.session.run_to_syscall(n, sink)?;
        Ok(())
    }

    /// BLAKE3 (hex) of the whole guest RAM as it is now.
    pub fn ram_digest(&self) -> String {
        let space = &self.session.vm().space;
        let mut h = blake3::Hasher::new();
        let mut buf = vec![0u8; 1 << 20];
        let mut at = 0;
        while at < space.size() {
            let n = buf.len().min((space.size() - at) as usize);
            space.read_phys(at, &mut buf[..n]);
            h.update(&buf[..n]);
            at += n as u64;
        }
        h.finalize().to_hex().to_string()
    }

    /// BLAKE3 (hex) of the guest RAM the parent had: its image, then zeros.
    pub fn parent_ram_digest(&self) -> String {
        self.parent.ram_digest(self.session.vm().space.size())
    }

    /// Writes the parent's whole RAM back (image and zeros), as a restore without dirty
    /// tracking would; returns its wall time in nanoseconds. For comparison in benchmarks.
    pub fn whole_memory_restore(&mut self) -> u64 {
        let start = Instant::now();
        let space = &mut self.session.parts().0.space;
        space.write_phys(0, &self.parent.ram);
        let zero = vec![0u8; 1 << 20];
        let mut at = self.parent.ram.len() as u64;
        while at < space.size() {
            let n = zero.len().min((space.size() - at) as usize);
            space.write_phys(at, &zero[..n]);
            at += n as u64;
        }
        let ns = start.elapsed().as_nanos() as u64;
        space.take_host_dirty();
        ns
    }
}
