//! One program in one VM: the single way deja boots a program ([`boot`]) and the one session
//! type every run goes through ([`Session`]).
//!
//! A session is a loaded program and the VM it runs in. It can run to a syscall and stop
//! there (to snapshot it, fork it, or steer it: [`Session::run_to_syscall`]), run to its
//! configured crash point and stay there ([`Session::run_to_crash`]), and run on to the end
//! of its life ([`Session::run`]) or of its last life, restarting it from its durable disk
//! after every injected crash ([`Session::lives`]). A fork ([`crate::Fork`]) is a session with
//! a parent state it resets to; a cluster node is a session the cluster driver steps.

use deja_kernel::host::hostchan::Rewrite;
use deja_kernel::time::vdso::VdsoMode;
use deja_kernel::{Disk, ExitStatus, FaultInfo, Kernel, ProgramSpec, Stream};

use std::sync::Arc;

use crate::coverage::{BlockImage, Seen};
use crate::identity::Settings;
use crate::snapshot::{Snapshot, SnapshotMeta};
use crate::vm::{RegisterPath, Stop, Vm, VmError};
use crate::{restart_seed, Incarnation, Run, RunError};

/// How a VM is built.
#[derive(Debug, Clone, Copy)]
pub struct BootOptions {
    /// The run's settings: CPU identity, code rewriting, the vDSO, the watchdog.
    pub settings: Settings,
    /// How registers cross the VM exit (for measuring the candidates).
    pub register_path: RegisterPath,
    /// Keep KVM's dirty-page log (for forks, which reset only what a child wrote).
    pub dirty_log: bool,
}

impl BootOptions {
    /// A plain VM under `settings`: registers through the shared page, no dirty log.
    pub fn new(settings: Settings) -> BootOptions {
        BootOptions { settings, register_path: RegisterPath::SyncRegs, dirty_log: false }
    }
}

/// Boots `spec` in a fresh VM of `memory` bytes: builds the VM, loads the image into its RAM
/// and puts the vCPU at the entry point, in ring 3. Nothing has run yet.
///
/// The VM is set up with the remedy of `opts.settings` ([`Settings::remedy`]), and the
/// program's code is rewritten ([`deja_kernel::host::hostchan`]) and given deja's vDSO as those
/// settings say, whatever `spec.rewrite` and `spec.vdso` say: the remedy in force, which every
/// artifact's fingerprint records, and the program's load agree.
pub fn boot(spec: &ProgramSpec, memory: u64, opts: BootOptions) -> Result<(Vm, Kernel), RunError> {
    let mut vm = Vm::new(memory, &opts.settings)?;
    vm.set_register_path(opts.register_path);
    if opts.dirty_log {
        vm.enable_dirty_log()?;
    }
    let remedy = opts.settings.remedy()?;
    let rewrite = match remedy.rewrite {
        true => Rewrite::On,
        false => Rewrite::Off,
    };
    let vdso = match remedy.vdso {
        true => VdsoMode::On,
        false => VdsoMode::Off,
    };
    let (kernel, entry) = Kernel::load(ProgramSpec { rewrite, vdso, ..spec.clone() }, &mut vm.space)?;
    vm.show_cpus(kernel.cpus())?;
    // Loading may have narrowed fresh pages; nothing ran yet, so nothing is cached.
    vm.space.take_stale();
    vm.enter_user(entry.rip, entry.rsp, 0)?;
    Ok((vm, kernel))
}

/// A loaded program and its VM.
#[derive(Debug)]
pub struct Session {
    /// What was booted (absent for a session restored from a snapshot, which cannot restart).
    spec: Option<ProgramSpec>,
    memory: u64,
    /// The settings it was booted (or restored) with, and every later life boots with.
    settings: Settings,
    /// The seed of the current life's random stream (as booted).
    seed: u64,
    vm: Vm,
    kernel: Kernel,
    /// How the current life already stopped, when a run to a syscall or a crash ended early.
    stopped: Option<Stop>,
    /// Block coverage: the image's blocks and those seen, to arm every VM a life boots in.
    cover: Option<(Arc<BlockImage>, Seen)>,
    /// The lives a debugged run ended ([`Session::debug_run`]), and whether the last one did.
    debug_lives: Vec<Incarnation>,
    debug_ended: bool,
}

impl Session {
    /// Boots `spec` under the default settings ([`Settings::default`]), not those a `deja`
    /// command was given: for tests that need no other. Everything a command runs boots with its
    /// own settings ([`Session::boot_with`]).
    pub fn boot(spec: ProgramSpec, memory: u64) -> Result<Session, RunError> {
        Session::boot_with(spec, memory, BootOptions::new(Settings::default()))
    }

    /// Boots `spec` (see [`boot`]).
    pub fn boot_with(spec: ProgramSpec, memory: u64, opts: BootOptions) -> Result<Session, RunError> {
        let (vm, kernel) = boot(&spec, memory, opts)?;
        Ok(Session::of(spec.seed, Some(spec), memory, opts.settings, vm, kernel))
    }

    /// A session of a VM and its kernel that have not run yet.
    fn of(seed: u64, spec: Option<ProgramSpec>, memory: u64, settings: Settings, vm: Vm, kernel: Kernel) -> Session {
        Session {
            seed,
            spec,
            memory,
            settings,
            vm,
            kernel,
            stopped: None,
            cover: None,
            debug_lives: Vec::new(),
            debug_ended: false,
        }
    }

    /// Arms block coverage ([`crate::coverage`]) in this session's VM, and in the VM of every
    /// life it boots after a crash: a breakpoint at each block of `blocks` not in `seen`.
    pub fn cover_blocks(&mut self, blocks: Arc<BlockImage>, seen: Seen) {
        self.vm.arm_blocks(blocks.clone(), &seen);
        self.kernel.announce_code(&mut self.vm.space);
        self.cover = Some((blocks, seen));
    }

    /// The blocks `ids` are seen: their breakpoints come out of this VM and of the VMs later
    /// lives boot in. Returns the ids that were not seen yet.
    pub fn disarm_blocks(&mut self, ids: &[u32]) -> Vec<u32> {
        let Some((_, seen)) = self.cover.as_mut() else { return Vec::new() };
        let fresh: Vec<u32> = ids.iter().copied().filter(|&id| seen.insert(id as usize)).collect();
        self.vm.disarm_blocks(&fresh);
        fresh
    }

    /// A fresh VM holding `snapshot`, set up under `settings` (the restoring run's: the
    /// fingerprint the snapshot records is only compared), ready to go on. A restored program
    /// cannot be restarted after an injected crash: the snapshot holds its state, not its spec.
    pub fn restore(snapshot: &Snapshot, settings: &Settings) -> Result<Session, RunError> {
        let (vm, kernel) = snapshot.restore(settings)?;
        Ok(Session::of(snapshot.meta.seed, None, snapshot.memory_size, *settings, vm, kernel))
    }

    /// The syscall core.
    pub fn kernel(&self) -> &Kernel {
        &self.kernel
    }

    /// The syscall core, to adjust (decision overrides, faults) at a stop.
    pub fn kernel_mut(&mut self) -> &mut Kernel {
        &mut self.kernel
    }

    /// The VM.
    pub fn vm(&self) -> &Vm {
        &self.vm
    }

    pub(crate) fn parts(&mut self) -> (&mut Vm, &mut Kernel) {
        (&mut self.vm, &mut self.kernel)
    }

    /// Replaces the core (a fork child starts from a copy of its parent's).
    pub(crate) fn set_kernel(&mut self, kernel: Kernel) {
        self.kernel = kernel;
        self.stopped = None;
    }

    /// Runs until the program traps for syscall `n` (0-based, before it is served): `true`.
    /// If it stopped first (it ended, or crashed), `false`; the stop is kept, and [`run`] or
    /// [`lives`] go on from it.
    ///
    /// [`run`]: Session::run
    /// [`lives`]: Session::lives
    pub fn run_to_syscall(&mut self, n: u64, sink: &mut dyn FnMut(Stream, &[u8])) -> Result<bool, RunError> {
        if self.stopped.is_some() {
            return Ok(false);
        }
        match self.vm.run_until(&mut self.kernel, sink, Some(n))? {
            Stop::AtSyscall => Ok(true),
            other => {
                self.stopped = Some(other);
                Ok(false)
            }
        }
    }

    /// Runs until the first syscall trap with `k` of the core's decisions taken, and stays
    /// there (`true`), as [`Session::run_to_syscall`] does; `false` when the program stopped
    /// first, or when that syscall was not made by a `syscall` instruction (the run then went on
    /// to its next stop, which it keeps).
    pub fn run_to_decisions(&mut self, k: u64, sink: &mut dyn FnMut(Stream, &[u8])) -> Result<bool, RunError> {
        if self.stopped.is_some() {
            return Ok(false);
        }
        self.vm.stop_at_decisions = Some(k);
        self.vm.late_refused = false;
        let stop = self.vm.run_until(&mut self.kernel, sink, None);
        self.vm.stop_at_decisions = None;
        match stop? {
            Stop::AtSyscall if !self.vm.late_refused => Ok(true),
            other => {
                self.stopped = Some(other);
                Ok(false)
            }
        }
    }

    /// Runs until the core injects the crash its fault configuration names, and stays there
    /// (`true`), so that each crash state can be tried ([`Session::restart_crashed`]); `false`
    /// when the program ended first.
    pub fn run_to_crash(&mut self, sink: &mut dyn FnMut(Stream, &[u8])) -> Result<bool, RunError> {
        if self.stopped.is_none() {
            self.stopped = Some(self.vm.run_until(&mut self.kernel, sink, None)?);
        }
        Ok(self.stopped == Some(Stop::Crashed))
    }

    /// The settings its VMs are set up with.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Captures the program as it stands at a stop, with the fingerprint of this session's
    /// settings.
    pub fn snapshot(&mut self, meta: SnapshotMeta) -> Result<Snapshot, RunError> {
        let host = Some(self.settings.host()?.fingerprint.clone());
        let meta = SnapshotMeta { virtual_time_ns: self.kernel.virtual_time_ns(), host, ..meta };
        Ok(Snapshot::capture(&mut self.vm, &self.kernel, meta)?)
    }

    /// Runs the current life to its end. An injected crash is an error here: a run that plans
    /// one goes through [`Session::lives`].
    pub fn run(&mut self, sink: &mut dyn FnMut(Stream, &[u8])) -> Result<Run, RunError> {
        let status = match self.stopped.take() {
            Some(Stop::Exited(status)) => status,
            Some(_) => {
                return Err(RunError::Vm {
                    source: VmError::Unexpected { what: "a crash was injected where none was planned".into(), rip: 0 },
                })
            }
            None => self.vm.run(&mut self.kernel, sink)?,
        };
        let report = self.kernel.finish(&self.vm.space, status);
        Ok(Run { report, stats: self.vm.stats.clone(), blocks: self.vm.take_block_hits(), cuts: self.vm.take_cuts() })
    }

    /// Runs to the end of the last life: after every injected crash, the VM and all volatile
    /// state are thrown away and the program restarts from its binary on the durable disk, with
    /// the same argv and environment and a new seed stream (the first life keeps this session's
    /// VM). Returns every life in order; the last one ended on its own. `final_disk` receives
    /// the last life's file system as the program left it.
    pub fn lives(
        &mut self,
        sink: &mut dyn FnMut(Stream, &[u8]),
        final_disk: Option<&mut Option<Disk>>,
    ) -> Result<Vec<Incarnation>, RunError> {
        let kernel = self.kernel.clone();
        let stop = self.stopped.take();
        self.continue_lives(kernel, stop, sink, final_disk)
    }

    /// For a session stopped at its crash point ([`Session::run_to_crash`]): crashes with
    /// exactly `state` and runs the restarted program to its end. The lives, the crashed one
    /// first. The session stays at the crash point, for the next state.
    pub fn restart_crashed(
        &mut self,
        state: &deja_kernel::CrashState,
        sink: &mut dyn FnMut(Stream, &[u8]),
    ) -> Result<Vec<Incarnation>, RunError> {
        if self.stopped != Some(Stop::Crashed) {
            return Err(RunError::Vm {
                source: VmError::Config { message: "the program is not stopped at its crash point".into() },
            });
        }
        let mut kernel = self.kernel.clone();
        let mut faults = self.spec.as_ref().map(|s| s.faults.clone()).unwrap_or_default();
        faults.crash_state = Some(state.clone());
        kernel.set_fault_config(faults);
        self.continue_lives(kernel, Some(Stop::Crashed), sink, None)
    }

    /// Runs `kernel` in this session's VM to the end of its last life (see [`Session::lives`]).
    fn continue_lives(
        &mut self,
        kernel: Kernel,
        first_stop: Option<Stop>,
        sink: &mut dyn FnMut(Stream, &[u8]),
        final_disk: Option<&mut Option<Disk>>,
    ) -> Result<Vec<Incarnation>, RunError> {
        let mut lives = Vec::new();
        let mut spec = self.spec.clone();
        let mut kernel = kernel;
        let mut stop = first_stop;
        let mut owned: Option<Vm> = None;
        let mut seed = self.seed;
        loop {
            let vm: &mut Vm = owned.as_mut().unwrap_or(&mut self.vm);
            let this_stop = match stop.take() {
                Some(s) => s,
                None => vm.run_until(&mut kernel, sink, None)?,
            };
            match this_stop {
                Stop::Exited(status) => {
                    if let Some(out) = final_disk {
                        *out = Some(kernel.disk());
                    }
                    lives.push(ended_life(vm, &mut kernel, status, seed));
                    return Ok(lives);
                }
                Stop::Crashed => {
                    let (life, disk) = crashed_life(vm, &mut kernel, seed);
                    lives.push(life);
                    let (next, k) = self.next_life(spec.as_mut(), disk, &mut seed, lives.len(), &lives)?;
                    kernel = k;
                    owned = Some(next);
                }
                Stop::AtSyscall | Stop::Idle | Stop::Yield | Stop::Breakpoint(_) => {
                    return Err(RunError::Vm {
                        source: VmError::Unexpected { what: "stopped without a stop point".into(), rip: 0 },
                    })
                }
            }
        }
    }

    /// Boots the life after a crash: `spec` with the durable `disk`, the next seed, the faults
    /// a restart keeps, block coverage armed as before, and the faults of the lives so far.
    fn next_life(
        &self,
        spec: Option<&mut ProgramSpec>,
        disk: Disk,
        seed: &mut u64,
        n: usize,
        lives: &[Incarnation],
    ) -> Result<(Vm, Kernel), RunError> {
        let Some(next_spec) = spec else {
            return Err(RunError::Vm {
                source: VmError::Config {
                    message: "a program restored from a snapshot crashed and cannot be restarted".into(),
                },
            });
        };
        next_spec.disk = Some(disk);
        *seed = restart_seed(*seed, n as u64);
        next_spec.seed = *seed;
        next_spec.faults = next_spec.faults.for_restart();
        let (mut next, mut k) = boot(next_spec, self.memory, BootOptions::new(self.settings))?;
        if let Some((blocks, seen)) = &self.cover {
            next.arm_blocks(blocks.clone(), seen);
            k.announce_code(&mut next.space);
        }
        if let Some(last) = lives.last() {
            k.note_previous_faults(last.run.report.faults.clone());
        }
        Ok((next, k))
    }

    /// Runs the current life as `deja debug` does: until syscall `stop_at` traps (before it is
    /// served), a breakpoint is reached, the life crashes (the next life is booted in its place
    /// and has not run yet: [`DebugStop::NewLife`]), or the last life ends. The lives that ended
    /// are kept ([`Session::debug_lives`]); every breakpoint is taken out before a life's end
    /// is recorded, so its digests are those of the run without them.
    pub fn debug_run(
        &mut self,
        sink: &mut dyn FnMut(Stream, &[u8]),
        stop_at: Option<u64>,
    ) -> Result<DebugStop, RunError> {
        if self.debug_ended {
            return Ok(DebugStop::Ended);
        }
        let stop = match self.stopped.take() {
            Some(s) => s,
            None => self.vm.run_until(&mut self.kernel, sink, stop_at)?,
        };
        match stop {
            Stop::AtSyscall => Ok(DebugStop::AtSyscall),
            Stop::Breakpoint(at) => Ok(DebugStop::Breakpoint(at)),
            Stop::Exited(status) => {
                self.vm.clear_breakpoints();
                let life = ended_life(&mut self.vm, &mut self.kernel, status, self.seed);
                self.debug_lives.push(life);
                self.debug_ended = true;
                Ok(DebugStop::Ended)
            }
            Stop::Crashed => {
                self.vm.clear_breakpoints();
                let (life, disk) = crashed_life(&mut self.vm, &mut self.kernel, self.seed);
                self.debug_lives.push(life);
                let mut spec = self.spec.take();
                let mut seed = self.seed;
                let next = self.next_life(spec.as_mut(), disk, &mut seed, self.debug_lives.len(), &self.debug_lives);
                self.spec = spec;
                let (vm, kernel) = next?;
                (self.vm, self.kernel, self.seed) = (vm, kernel, seed);
                Ok(DebugStop::NewLife)
            }
            Stop::Idle | Stop::Yield => Err(RunError::Vm {
                source: VmError::Unexpected {
                    what: "a lone program stopped as if it were a cluster node".into(),
                    rip: 0,
                },
            }),
        }
    }

    /// The lives a debugged run ended so far ([`Session::debug_run`]), in order.
    pub fn debug_lives(&self) -> &[Incarnation] {
        &self.debug_lives
    }

    /// The VM, to plant breakpoints and read registers in at a debugged run's stop.
    pub fn vm_mut(&mut self) -> &mut Vm {
        &mut self.vm
    }
}

/// Where [`Session::debug_run`] stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DebugStop {
    /// At the trap of the syscall asked for, before it is served.
    AtSyscall,
    /// At a breakpoint, before the instruction at this address.
    Breakpoint(u64),
    /// A life crashed and the next one is booted, at its entry.
    NewLife,
    /// The last life ended.
    Ended,
}

/// Records the life that ended with `status`.
fn ended_life(vm: &mut Vm, kernel: &mut Kernel, status: ExitStatus, seed: u64) -> Incarnation {
    let report = kernel.finish(&vm.space, status);
    Incarnation {
        run: Run { report, stats: vm.stats.clone(), blocks: vm.take_block_hits(), cuts: vm.take_cuts() },
        crashed: false,
        seed,
        crash_disk_digest: None,
    }
}

/// Records the life that crashed at its injected crash, and the durable disk it left.
fn crashed_life(vm: &mut Vm, kernel: &mut Kernel, seed: u64) -> (Incarnation, Disk) {
    let disk = kernel.crash_image();
    let digest = disk.digest();
    let status = ExitStatus::Signaled {
        signal: 9,
        name: "SIGKILL".into(),
        fault: Some(FaultInfo {
            description: format!("node crashed by deja {}", kernel.crash_point_words()),
            vector: 0,
            rip: 0,
            addr: None,
        }),
    };
    let report = kernel.finish(&vm.space, status);
    let life = Incarnation {
        run: Run { report, stats: vm.stats.clone(), blocks: vm.take_block_hits(), cuts: vm.take_cuts() },
        crashed: true,
        seed,
        crash_disk_digest: Some(digest),
    };
    (life, disk)
}
