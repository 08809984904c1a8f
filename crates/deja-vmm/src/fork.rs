//! In-process forks: one parent state kept in memory, many children run from it.
//!
//! The parent is a program stopped at a syscall boundary ([`crate::Vm::run_until`]). Its RAM
//! image (up to the allocator's high-water mark), allocator state, vCPU state and syscall core
//! are copied once. Each child then runs in the same VM; [`Fork::reset`] brings the VM back to
//! the parent by rewriting only the frames written since the last reset — the guest's writes
//! from KVM's dirty-page log, the monitor's own writes from [`crate::paging`]'s host dirty map —
//! and by restoring REGS/SREGS (through the sync area) and XSAVE. Page-table entries that the
//! child had made present and the reset changed are replayed from ring 0 so that no shadow MMU
//! or TLB keeps the child's mappings. Whole memory is never copied on a fork.

use std::time::Instant;

use deja_kernel::{Kernel, ProgramSpec, Stream, PAGE_SIZE};

use crate::paging::{canonical, FrameState, PTE_P};
use crate::snapshot::VcpuState;
use crate::vm::{Stop, Vm, VmError};
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

/// A parent state in memory and the VM its children run in.
#[derive(Debug)]
pub struct Fork {
    vm: Vm,
    spec: ProgramSpec,
    memory: u64,
    parent_ram: Vec<u8>,
    parent_frames: FrameState,
    parent_vcpu: VcpuState,
    parent_kernel: Kernel,
    parent_bases: (u64, u64),
    /// The parent's thread in the vCPU and its other threads' saved contexts.
    parent_threads: (u64, Vec<(u64, crate::vm::ThreadContext)>),
    /// The syscall index the parent stopped at.
    pub at_syscall: u64,
    /// What the last reset did.
    pub last_reset: ResetStats,
}

impl Fork {
    /// Runs `spec` until it traps for syscall `at_syscall` and keeps that state as the parent.
    /// Output the parent writes on the way goes to `sink`.
    pub fn new(
        spec: ProgramSpec,
        memory: u64,
        at_syscall: u64,
        sink: &mut dyn FnMut(Stream, &[u8]),
    ) -> Result<Fork, RunError> {
        let mut vm = Vm::new(memory)?;
        vm.enable_dirty_log()?;
        let (mut kernel, entry) = Kernel::load(spec.clone(), &mut vm.space)?;
        vm.space.take_stale();
        vm.enter_user(entry.rip, entry.rsp, 0)?;
        let stop = vm.run_until(&mut kernel, sink, Some(at_syscall))?;
        if stop != Stop::AtSyscall {
            return Err(RunError::Vm(VmError::Unexpected {
                what: format!("the program stopped ({stop:?}) before syscall {at_syscall}"),
                rip: 0,
            }));
        }
        let parent_threads = vm.thread_contexts(&kernel);
        let parent_vcpu = vm.vcpu_state()?;
        let parent_frames = vm.space.frame_state();
        let mut parent_ram = vec![0u8; parent_frames.bump as usize];
        vm.space.read_phys(0, &mut parent_ram);
        vm.take_guest_dirty()?;
        vm.space.take_host_dirty();
        let parent_bases = vm.bases();
        Ok(Fork {
            vm,
            spec,
            memory,
            parent_ram,
            parent_frames,
            parent_vcpu,
            parent_kernel: kernel,
            parent_bases,
            parent_threads,
            at_syscall,
            last_reset: ResetStats::default(),
        })
    }

    /// Resets the VM to the parent, rewriting only what changed since the last reset.
    pub fn reset(&mut self) -> Result<ResetStats, VmError> {
        let start = Instant::now();
        let mut frames = self.vm.take_guest_dirty()?;
        frames.extend(self.vm.space.take_host_dirty());
        frames.sort_unstable();
        frames.dedup();
        let zero = [0u8; PAGE_SIZE as usize];
        let mut current = [0u8; PAGE_SIZE as usize];
        let mut resync = Vec::new();
        for &frame in &frames {
            let parent: &[u8] = if frame < self.parent_frames.bump {
                &self.parent_ram[frame as usize..(frame + PAGE_SIZE) as usize]
            } else {
                &zero
            };
            if let Some((level, base)) = self.vm.space.page_table(frame) {
                self.vm.space.read_phys(frame, &mut current);
                let span = 1u64 << (12 + 9 * level);
                for i in 0..512usize {
                    let cur = u64::from_le_bytes(current[8 * i..8 * i + 8].try_into().unwrap_or([0; 8]));
                    let par = u64::from_le_bytes(parent[8 * i..8 * i + 8].try_into().unwrap_or([0; 8]));
                    if cur != par && cur & PTE_P != 0 {
                        resync.push((frame + 8 * i as u64, canonical(base + i as u64 * span)));
                    }
                }
            }
            self.vm.space.write_phys(frame, parent);
        }
        self.vm.space.set_frame_state(&self.parent_frames);
        if !resync.is_empty() {
            self.vm.pt_sync_entries(&resync)?;
            // The routine's own writes are the parent's values; forget them.
            self.vm.take_guest_dirty()?;
        }
        self.vm.space.take_host_dirty();
        self.vm.set_thread_contexts(self.parent_threads.0, &self.parent_threads.1);
        self.vm.set_child_state(&self.parent_vcpu, self.parent_bases.0, self.parent_bases.1)?;
        self.last_reset = ResetStats {
            dirty_frames: frames.len() as u64,
            resynced_entries: resync.len() as u64,
            reset_ns: start.elapsed().as_nanos() as u64,
        };
        Ok(self.last_reset)
    }

    /// Resets to the parent, then runs one child to the end. `reseed` gives the child a random
    /// stream of its own: a different decision than the parent would have taken.
    pub fn run_child(&mut self, reseed: Option<u64>, sink: &mut dyn FnMut(Stream, &[u8])) -> Result<Run, RunError> {
        self.reset()?;
        let mut kernel = self.parent_kernel.clone();
        if let Some(seed) = reseed {
            kernel.reseed(seed);
        }
        let status = self.vm.run(&mut kernel, sink)?;
        let report = kernel.finish(&self.vm.space, status);
        Ok(Run { report, stats: self.vm.stats.clone() })
    }

    /// Resets to the parent, lets `prepare` adjust the child's core (decision overrides, faults),
    /// then runs the child to its end — restarting it in fresh VMs after injected crashes. The
    /// same `prepare` applied by [`crate::run_steered`] at this fork's syscall is the same run.
    pub fn run_child_with(
        &mut self,
        prepare: &mut dyn FnMut(&mut Kernel),
        sink: &mut dyn FnMut(Stream, &[u8]),
    ) -> Result<Vec<crate::Incarnation>, RunError> {
        self.reset()?;
        let mut kernel = self.parent_kernel.clone();
        prepare(&mut kernel);
        crate::continue_lives(self.spec.clone(), self.memory, &mut self.vm, kernel, None, sink, None)
    }

    /// The syscall core as the parent left it (for reading its decision count, its report).
    pub fn parent_kernel(&self) -> &Kernel {
        &self.parent_kernel
    }

    /// Runs a child until it traps for syscall `n`, without finishing it (for benchmarks that
    /// measure resets after a known amount of work).
    pub fn run_child_until(&mut self, n: u64, sink: &mut dyn FnMut(Stream, &[u8])) -> Result<(), RunError> {
        self.reset()?;
        let mut kernel = self.parent_kernel.clone();
        self.vm.run_until(&mut kernel, sink, Some(n))?;
        Ok(())
    }

    /// BLAKE3 (hex) of the whole guest RAM as it is now.
    pub fn ram_digest(&self) -> String {
        let mut h = blake3::Hasher::new();
        let mut buf = vec![0u8; 1 << 20];
        let mut at = 0;
        while at < self.vm.space.size() {
            let n = buf.len().min((self.vm.space.size() - at) as usize);
            self.vm.space.read_phys(at, &mut buf[..n]);
            h.update(&buf[..n]);
            at += n as u64;
        }
        h.finalize().to_hex().to_string()
    }

    /// BLAKE3 (hex) of the guest RAM the parent had: its image, then zeros.
    pub fn parent_ram_digest(&self) -> String {
        let mut h = blake3::Hasher::new();
        h.update(&self.parent_ram);
        let zero = vec![0u8; 1 << 20];
        let mut left = self.vm.space.size() - self.parent_ram.len() as u64;
        while left > 0 {
            let n = left.min(zero.len() as u64) as usize;
            h.update(&zero[..n]);
            left -= n as u64;
        }
        h.finalize().to_hex().to_string()
    }

    /// Writes the parent's whole RAM back (image and zeros), as a restore without dirty
    /// tracking would; returns its wall time in nanoseconds. For comparison in benchmarks.
    pub fn whole_memory_restore(&mut self) -> u64 {
        let start = Instant::now();
        self.vm.space.write_phys(0, &self.parent_ram);
        let zero = vec![0u8; 1 << 20];
        let mut at = self.parent_ram.len() as u64;
        while at < self.vm.space.size() {
            let n = zero.len().min((self.vm.space.size() - at) as usize);
            self.vm.space.write_phys(at, &zero[..n]);
            at += n as u64;
        }
        let ns = start.elapsed().as_nanos() as u64;
        self.vm.space.take_host_dirty();
        ns
    }
}
