//! deja's KVM shell: the only crate that touches `/dev/kvm` or holds `unsafe`.
//!
//! It builds one VM with one vCPU whose kernel is the deja monitor: guest RAM with page tables
//! ([`paging`]), a GDT/IDT/TSS and a few bytes of trap stubs at a fixed layout ([`layout`]), a
//! fixed CPUID table ([`cpuid`]), and a vCPU loop that hands every syscall and exception of the
//! ring-3 program to the pure syscall core ([`deja_kernel::Kernel`]). [`probe`] measures which
//! determinism settings this host honours.

pub mod cpuid;
pub mod fork;
pub mod layout;
pub mod paging;
pub mod probe;
pub mod snapshot;
pub mod vm;

use deja_kernel::{Kernel, LoadError, ProgramSpec, RunReport, Stream};

pub use fork::{Fork, ResetStats};
pub use probe::{check_host, probe, HostCheck, HostProbe};
pub use snapshot::{Snapshot, SnapshotError, SnapshotMeta};
pub use vm::{RegisterPath, Vm, VmError, VmStats};

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
    };
    let mut vm = Vm::new(memory)?;
    let (mut kernel, entry) = Kernel::load(spec, &mut vm.space)?;
    vm.space.take_stale();
    vm.enter_user(entry.rip, entry.rsp, 0)?;
    let mut snapshot = None;
    let status = match vm.run_until(&mut kernel, sink, Some(at))? {
        Some(status) => status,
        None => {
            let meta = SnapshotMeta { virtual_time_ns: kernel.virtual_time_ns(), ..meta };
            snapshot = Some(Snapshot::capture(&mut vm, &kernel, meta)?);
            vm.run(&mut kernel, sink)?
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
