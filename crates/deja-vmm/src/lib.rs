//! deja's KVM shell: the only crate that touches `/dev/kvm` or holds `unsafe`.
//!
//! It builds one VM with one vCPU whose kernel is the deja monitor: guest RAM with page tables
//! ([`paging`]), a GDT/IDT/TSS and a few bytes of trap stubs at a fixed layout ([`layout`]), a
//! fixed CPUID table ([`cpuid`], kept by the pure core), and a vCPU loop that hands every syscall
//! and exception of the ring-3 program to the pure syscall core ([`deja_kernel::Kernel`]).
//! [`identity`] decides how the guest's view of the host CPU is fixed (CPUID faulting, KVM's
//! table, pinning) and [`probe`] measures what a guest can still observe.

pub mod divergence;
pub mod fork;
pub mod identity;
pub mod layout;
pub mod paging;
pub mod probe;
pub mod snapshot;
pub mod vm;

use deja_kernel::{Kernel, LoadError, ProgramSpec, RunReport, Stream};

pub use deja_kernel::cpuid;
pub use fork::{Fork, ResetStats};
pub use identity::{Fingerprint, HostProfile, Remedy};
pub use probe::{check_host, probe, HostCheck, HostProbe};
pub use snapshot::{Snapshot, SnapshotError, SnapshotMeta};
pub use vm::{RegisterPath, Stop, Vm, VmError, VmStats};

/// Default guest RAM: 1 GiB (frames are only backed on the host once touched).
pub const DEFAULT_MEMORY: u64 = 1 << 30;

/// The result of a run.
#[derive(Debug, Clone)]
pub struct Run {
    /// What the syscall core recorded.
    pub report: RunReport,
    /// VM exit counters.
    pub stats: VmStats,
}

/// Why a run could not happen. A guest that crashes is not an error: it has an exit status.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The program image was refused.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// KVM or the monitor failed.
    #[error(transparent)]
    Vm(#[from] VmError),
    /// A snapshot was refused.
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
}

/// Runs `spec` in a fresh VM with `memory` bytes of RAM; the program's output goes to `sink`.
pub fn run(spec: ProgramSpec, memory: u64, sink: &mut dyn FnMut(Stream, &[u8])) -> Result<Run, RunError> {
    run_with(spec, memory, RegisterPath::SyncRegs, sink)
}

/// [`run`] with an explicit register path (for measuring the candidates).
pub fn run_with(
    spec: ProgramSpec,
    memory: u64,
    path: RegisterPath,
    sink: &mut dyn FnMut(Stream, &[u8]),
) -> Result<Run, RunError> {
    let mut vm = Vm::new(memory)?;
    vm.set_register_path(path);
    let (mut kernel, entry) = Kernel::load(spec, &mut vm.space)?;
    // Loading may have narrowed fresh pages; nothing ran yet, so nothing is cached.
    vm.space.take_stale();
    vm.enter_user(entry.rip, entry.rsp, 0)?;
    let status = vm.run(&mut kernel, sink)?;
    let report = kernel.finish(&vm.space, status);
    Ok(Run { report, stats: vm.stats.clone() })
}

/// Runs `spec` like [`run`] and captures a snapshot when the program traps for syscall `at`
/// (before it is served), then runs on to the end. The snapshot is `None` if the program ended
/// first.
pub fn run_snapshotting(
    spec: ProgramSpec,
    memory: u64,
    at: u64,
    sink: &mut dyn FnMut(Stream, &[u8]),
) -> Result<(Run, Option<Snapshot>), RunError> {
    let meta = SnapshotMeta {
        deja_version: env!("CARGO_PKG_VERSION").to_string(),
        program_blake3: blake3::hash(&spec.image).to_hex().to_string(),
        exe_path: spec.exe_path.clone(),
        argv: spec.argv.clone(),
        seed: spec.seed,
        syscall_index: at,
        virtual_time_ns: 0,
        host: Some(identity::host()?.fingerprint.clone()),
    };
    let mut vm = Vm::new(memory)?;
    let (mut kernel, entry) = Kernel::load(spec, &mut vm.space)?;
    vm.space.take_stale();
    vm.enter_user(entry.rip, entry.rsp, 0)?;
    let mut snapshot = None;
    let status = match vm.run_until(&mut kernel, sink, Some(at))? {
        Stop::Exited(status) => status,
        Stop::AtSyscall => {
            let meta = SnapshotMeta { virtual_time_ns: kernel.virtual_time_ns(), ..meta };
            snapshot = Some(Snapshot::capture(&mut vm, &kernel, meta)?);
            vm.run(&mut kernel, sink)?
        }
        Stop::Crashed | Stop::Idle | Stop::Yield => {
            return Err(RunError::Vm(VmError::Unexpected {
                what: "unexpected stop during a snapshot run".into(),
                rip: 0,
            }))
        }
    };
    let report = kernel.finish(&vm.space, status);
    Ok((Run { report, stats: vm.stats.clone() }, snapshot))
}

/// Restores `snapshot` into a fresh VM and runs the program on to the end.
pub fn resume(snapshot: &Snapshot, sink: &mut dyn FnMut(Stream, &[u8])) -> Result<Run, RunError> {
    let (mut vm, mut kernel) = snapshot.restore()?;
    let status = vm.run(&mut kernel, sink)?;
    let report = kernel.finish(&vm.space, status);
    Ok(Run { report, stats: vm.stats.clone() })
}

/// One life of a node: from a start (or restart) to its exit or crash.
#[derive(Debug, Clone)]
pub struct Incarnation {
    /// What the syscall core recorded in this life.
    pub run: Run,
    /// The life ended in an injected crash (after `durable_writes` durable writes).
    pub crashed: bool,
    /// The seed of this life's random stream.
    pub seed: u64,
    /// BLAKE3 (hex) of the durable disk the next life starts from, if this one crashed.
    pub crash_disk_digest: Option<String>,
}

/// The digest of a run made of several lives: a life's own digest when there is one, else the
/// BLAKE3 of every life's digest in order.
pub fn lives_digest(lives: &[Incarnation]) -> String {
    if let [one] = lives {
        return one.run.report.digest.clone();
    }
    let mut h = blake3::Hasher::new();
    for life in lives {
        h.update(life.run.report.digest.as_bytes());
    }
    h.finalize().to_hex().to_string()
}

/// The seed of the `n`-th restart of a run seeded with `seed`: a new stream per life.
pub fn restart_seed(seed: u64, n: u64) -> u64 {
    let mut h = blake3::Hasher::new();
    h.update(b"deja restart seed");
    h.update(&seed.to_le_bytes());
    h.update(&n.to_le_bytes());
    let mut w = [0u8; 8];
    w.copy_from_slice(&h.finalize().as_bytes()[..8]);
    u64::from_le_bytes(w)
}

/// Runs `spec`; when the core injects a crash (see [`deja_kernel::FaultConfig`]), throws the VM
/// and all volatile state away and restarts the program from its binary on the durable disk,
/// with the same argv and environment and a new seed stream. Returns every life in order; the
/// last one ended on its own. `final_disk` receives the last life's file system as the program
/// left it.
pub fn run_with_restarts(
    spec: ProgramSpec,
    memory: u64,
    sink: &mut dyn FnMut(Stream, &[u8]),
    final_disk: Option<&mut Option<deja_kernel::Disk>>,
) -> Result<Vec<Incarnation>, RunError> {
    run_steered(spec, memory, None, sink, final_disk)
}

/// Where and how a run is steered: it runs untouched until it traps for syscall `at_syscall`,
/// then `prepare` adjusts the core (decision overrides, a fault configuration) and the run goes
/// on. A fork child prepared the same way at the same syscall is the same run.
pub struct Steering<'a> {
    /// The syscall before which `prepare` runs.
    pub at_syscall: u64,
    /// Adjusts the core.
    pub prepare: &'a mut dyn FnMut(&mut Kernel),
}

/// [`run_with_restarts`], steered at a syscall (see [`Steering`]). If the program ends before
/// the steering point, that is the run.
pub fn run_steered(
    spec: ProgramSpec,
    memory: u64,
    steering: Option<Steering<'_>>,
    sink: &mut dyn FnMut(Stream, &[u8]),
    final_disk: Option<&mut Option<deja_kernel::Disk>>,
) -> Result<Vec<Incarnation>, RunError> {
    let mut vm = Vm::new(memory)?;
    let (mut kernel, entry) = Kernel::load(spec.clone(), &mut vm.space)?;
    vm.space.take_stale();
    vm.enter_user(entry.rip, entry.rsp, 0)?;
    let mut first_stop = None;
    if let Some(st) = steering {
        match vm.run_until(&mut kernel, sink, Some(st.at_syscall))? {
            Stop::AtSyscall => (st.prepare)(&mut kernel),
            other => first_stop = Some(other),
        }
    }
    continue_lives(spec, memory, &mut vm, kernel, first_stop, sink, final_disk)
}

/// A program stopped at its configured crash point (see [`run_to_crash`]): the syscall core as
/// the crash found it, before any crash image was taken, so that each crash state can be tried.
pub struct Crashed {
    spec: ProgramSpec,
    memory: u64,
    vm: Vm,
    kernel: Kernel,
}

impl Crashed {
    /// The core at the crash: its pending operations, [`Kernel::crash_states`].
    pub fn kernel(&self) -> &Kernel {
        &self.kernel
    }

    /// Crashes with exactly `state` and runs the restarted program to its end: the lives, the
    /// crashed one first.
    pub fn restart(
        &mut self,
        state: &deja_kernel::CrashState,
        sink: &mut dyn FnMut(Stream, &[u8]),
    ) -> Result<Vec<Incarnation>, RunError> {
        let mut kernel = self.kernel.clone();
        let mut faults = self.spec.faults.clone();
        faults.crash_state = Some(state.clone());
        kernel.set_fault_config(faults);
        continue_lives(self.spec.clone(), self.memory, &mut self.vm, kernel, Some(Stop::Crashed), sink, None)
    }
}

/// How [`run_to_crash`] ended.
pub enum ToCrash {
    /// The program reached its crash point.
    Crashed(Box<Crashed>),
    /// It ended first: this was the whole run.
    Ended(Vec<Incarnation>),
}

/// Runs `spec`, whose fault configuration names a crash point, until it crashes there, and
/// keeps it there (see [`Crashed`]).
pub fn run_to_crash(spec: ProgramSpec, memory: u64, sink: &mut dyn FnMut(Stream, &[u8])) -> Result<ToCrash, RunError> {
    let mut vm = Vm::new(memory)?;
    let (mut kernel, entry) = Kernel::load(spec.clone(), &mut vm.space)?;
    vm.space.take_stale();
    vm.enter_user(entry.rip, entry.rsp, 0)?;
    match vm.run_until(&mut kernel, sink, None)? {
        Stop::Crashed => Ok(ToCrash::Crashed(Box::new(Crashed { spec, memory, vm, kernel }))),
        stop => Ok(ToCrash::Ended(continue_lives(spec, memory, &mut vm, kernel, Some(stop), sink, None)?)),
    }
}

/// Runs a loaded program (in `vm`, with `kernel`) to its end, restarting it after every
/// injected crash. `first_stop` is how the current life already stopped, if it did.
pub(crate) fn continue_lives(
    spec: ProgramSpec,
    memory: u64,
    vm: &mut Vm,
    kernel: Kernel,
    first_stop: Option<Stop>,
    sink: &mut dyn FnMut(Stream, &[u8]),
    final_disk: Option<&mut Option<deja_kernel::Disk>>,
) -> Result<Vec<Incarnation>, RunError> {
    let mut lives = Vec::new();
    let mut spec = spec;
    let mut kernel = kernel;
    let mut stop = first_stop;
    let mut owned: Option<Vm> = None;
    loop {
        let vm: &mut Vm = match owned.as_mut() {
            Some(v) => v,
            None => &mut *vm,
        };
        let seed = spec.seed;
        let this_stop = match stop.take() {
            Some(s) => s,
            None => vm.run_until(&mut kernel, sink, None)?,
        };
        match this_stop {
            Stop::Exited(status) => {
                if let Some(out) = final_disk {
                    *out = Some(kernel.disk());
                }
                let report = kernel.finish(&vm.space, status);
                lives.push(Incarnation {
                    run: Run { report, stats: vm.stats.clone() },
                    crashed: false,
                    seed,
                    crash_disk_digest: None,
                });
                return Ok(lives);
            }
            Stop::Crashed => {
                let disk = kernel.crash_image();
                let digest = disk.digest();
                let point = kernel.crash_point_words();
                let status = deja_kernel::ExitStatus::Signaled {
                    signal: 9,
                    name: "SIGKILL".into(),
                    fault: Some(deja_kernel::FaultInfo {
                        description: format!("node crashed by deja {point}"),
                        vector: 0,
                        rip: 0,
                        addr: None,
                    }),
                };
                let report = kernel.finish(&vm.space, status);
                let previous_faults = report.faults.clone();
                lives.push(Incarnation {
                    run: Run { report, stats: vm.stats.clone() },
                    crashed: true,
                    seed,
                    crash_disk_digest: Some(digest),
                });
                spec.disk = Some(disk);
                spec.seed = restart_seed(seed, lives.len() as u64);
                spec.faults = spec.faults.for_restart();
                let mut next = Vm::new(memory)?;
                let (mut k, entry) = Kernel::load(spec.clone(), &mut next.space)?;
                k.note_previous_faults(previous_faults);
                next.space.take_stale();
                next.enter_user(entry.rip, entry.rsp, 0)?;
                kernel = k;
                owned = Some(next);
            }
            Stop::AtSyscall | Stop::Idle | Stop::Yield => {
                return Err(RunError::Vm(VmError::Unexpected { what: "stopped without a stop point".into(), rip: 0 }))
            }
        }
    }
}
