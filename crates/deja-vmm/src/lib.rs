//! deja's KVM shell: the only crate that touches `/dev/kvm` or holds `unsafe`.
//!
//! It builds one VM with one vCPU whose kernel is the deja monitor: guest RAM with page tables
//! ([`paging`]), a GDT/IDT/TSS and a few bytes of trap stubs at a fixed layout ([`layout`]), a
//! fixed CPUID table ([`cpuid`], kept by the pure core), and a vCPU loop that hands every syscall
//! and exception of the ring-3 program to the pure syscall core ([`deja_kernel::Kernel`]).
//! [`identity`] decides how the guest's view of the host CPU is fixed (CPUID faulting, KVM's
//! table, pinning) and [`probe`] measures what a guest can still observe.

pub mod affinity;
pub mod cores;
pub mod coverage;
pub mod divergence;
pub mod fork;
pub mod hostcheck;
pub mod identity;
pub mod layout;
pub mod paging;
pub mod placement;
pub mod probe;
pub mod profile;
pub mod session;
pub mod snapshot;
pub mod vm;
pub mod watchdog;

use deja_kernel::{LoadError, RunReport};

pub use deja_kernel::host::cpuid;
pub use fork::{Fork, LateParent, Parent, ResetStats, LATE_FORKS};
pub use hostcheck::{check_host, probe, HostCheck};
pub use identity::{Fingerprint, HostProfile, Remedy, Settings};
pub use probe::HostProbe;
pub use session::{boot, BootOptions, DebugStop, Session};
pub use snapshot::{Snapshot, SnapshotError, SnapshotMeta};
pub use vm::{RegisterPath, Stop, UserRegs, Vm, VmError, VmStats};

/// Default guest RAM: 1 GiB (frames are only backed on the host once touched).
pub const DEFAULT_MEMORY: u64 = 1 << 30;

/// The result of a run.
#[derive(Debug, Clone)]
pub struct Run {
    /// What the syscall core recorded.
    pub report: RunReport,
    /// VM exit counters.
    pub stats: VmStats,
    /// The coverage breakpoints the life hit, in order ([`coverage`]); empty when its VM was
    /// not armed.
    pub blocks: Vec<coverage::BlockHit>,
    /// Each distinct count of decisions taken at a syscall's trap, ascending, since the run's
    /// fork point (or its boot): where a later fork of this course can be taken
    /// ([`Fork::run_child_late`]). Host-side only; no part of the report.
    pub cuts: Vec<u64>,
}

/// Why a run could not happen. A guest that crashes is not an error: it has an exit status.
#[derive(Debug, snafu::Snafu)]
pub enum RunError {
    /// The program image was refused.
    #[snafu(transparent)]
    Load {
        /// The loader's error.
        source: LoadError,
    },
    /// KVM or the monitor failed.
    #[snafu(transparent)]
    Vm {
        /// The shell's error.
        source: VmError,
    },
    /// A snapshot was refused.
    #[snafu(transparent)]
    Snapshot {
        /// Why the snapshot was refused.
        source: SnapshotError,
    },
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
