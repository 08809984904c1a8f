//! Snapshots: a running program captured whole at a syscall boundary, written as a deja
//! artifact, and restored into a fresh VM in this or another process.
//!
//! A snapshot holds everything the continuation depends on:
//!
//! * the vCPU: REGS, SREGS, XSAVE (x87/SSE/AVX state), XCRS, DEBUGREGS, VCPU_EVENTS, MP_STATE
//!   and the MSRs in [`SNAPSHOT_MSRS`];
//! * guest RAM up to the allocator's high-water mark (every frame above it is still zero), and
//!   the allocator's state (free frames, page-table frames);
//! * the syscall core's whole state ([`deja_kernel::Kernel::save`]): memory map, fds, declared
//!   files, clock, random stream position, signals, trace digest so far.
//!
//! It is taken when the program traps for syscall N, with the vCPU rewound to the `syscall`
//! instruction (see [`crate::Vm::run_until`]), so restoring it and running re-issues syscall N.
//! Not captured: host-side counters ([`crate::VmStats`]) and the host hazard probe.

use deja_kernel::{Kernel, PAGE_SIZE};
use serde::{Deserialize, Serialize};

use crate::paging::FrameState;
pub use crate::vm::{VcpuState, SNAPSHOT_MSRS};
use crate::vm::{Vm, VmError};

/// Schema version of the snapshot payload inside its envelope (15: the frames carry the
/// address spaces of processes; 16: the core's process table holds each process's argv and
/// name, and a directory's fd the process whose `/proc/<pid>` it is; 17: the frames carry
/// where the spaces place the coverage blocks of shared objects; 18: the core's fault state
/// holds the fail-stop setting and the durable operations after an injected error; 19: the
/// core's record keeps the last lines of output). The core's
/// state inside is not self-describing, so an artifact of another schema is refused at its
/// envelope.
pub const SNAPSHOT_SCHEMA: u32 = 19;

/// Facts about the program, for `deja inspect` and for refusing a mismatched continuation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotMeta {
    /// The deja version that wrote it.
    pub deja_version: String,
    /// BLAKE3 (hex) of the program image.
    pub program_blake3: String,
    /// The guest path of the program.
    pub exe_path: String,
    /// argv.
    pub argv: Vec<String>,
    /// The run's seed.
    pub seed: u64,
    /// The syscall the program was about to make (0-based): the number already served.
    pub syscall_index: u64,
    /// Virtual time at the snapshot.
    pub virtual_time_ns: u64,
    /// The CPU fingerprint of the host it was taken on.
    pub host: Option<crate::identity::Fingerprint>,
}

impl SnapshotMeta {
    /// The facts of a snapshot of `spec` taken before syscall `at` (its virtual time and the
    /// fingerprint of the session's settings are set when it is taken:
    /// [`crate::Session::snapshot`]).
    pub fn of(spec: &deja_kernel::ProgramSpec, at: u64) -> SnapshotMeta {
        SnapshotMeta {
            deja_version: env!("CARGO_PKG_VERSION").to_string(),
            program_blake3: blake3::hash(&spec.image).to_hex().to_string(),
            exe_path: spec.exe_path.clone(),
            argv: spec.argv.clone(),
            seed: spec.seed,
            syscall_index: at,
            virtual_time_ns: 0,
            host: None,
        }
    }
}

/// A whole VM at a syscall boundary.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Snapshot {
    /// What it is a snapshot of.
    pub meta: SnapshotMeta,
    /// Guest RAM size in bytes.
    pub memory_size: u64,
    /// vCPU state.
    pub vcpu: VcpuState,
    /// Frame allocator state.
    pub frames: FrameState,
    /// Guest RAM from 0 to `frames.bump`.
    #[serde(with = "bytes")]
    pub ram: Vec<u8>,
    /// The syscall core's state.
    #[serde(with = "bytes")]
    pub kernel: Vec<u8>,
    /// FS base the monitor last loaded (also in SREGS).
    pub fs_base: u64,
    /// GS base the monitor last loaded (also in SREGS).
    pub gs_base: u64,
    /// The thread the vCPU runs (its registers are `vcpu`).
    pub current_tid: u64,
    /// Every other live thread's saved registers, by tid.
    pub threads: Vec<(u64, crate::vm::ThreadContext)>,
}

/// Errors restoring a snapshot.
#[derive(Debug, snafu::Snafu)]
pub enum SnapshotError {
    /// The file could not be read or is not a valid artifact.
    #[snafu(transparent)]
    Format {
        /// The envelope's error.
        source: deja_format::FormatError,
    },
    /// The payload does not decode.
    #[snafu(display("the snapshot payload is corrupt: {source}"))]
    Decode {
        /// postcard's error.
        source: postcard::Error,
    },
    /// The payload decodes but is inconsistent.
    #[snafu(display("the snapshot is inconsistent: {detail}"))]
    Invalid {
        /// What does not fit.
        detail: String,
    },
    /// The syscall core's state is refused.
    #[snafu(transparent)]
    Kernel {
        /// The core's error.
        source: deja_kernel::RestoreError,
    },
    /// KVM refused the state.
    #[snafu(transparent)]
    Vm {
        /// The shell's error.
        source: VmError,
    },
}

mod bytes {
    //! `Vec<u8>` as one serde byte string (postcard writes it as length + raw bytes).
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(v)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let b: &[u8] = <&[u8]>::deserialize(d)?;
        Ok(b.to_vec())
    }
}

impl Snapshot {
    /// Captures `vm` and `kernel` (the VM must be stopped by [`Vm::run_until`]).
    pub fn capture(vm: &mut Vm, kernel: &Kernel, meta: SnapshotMeta) -> Result<Snapshot, VmError> {
        let (current_tid, threads) = vm.thread_contexts(kernel);
        let vcpu = vm.vcpu_state()?;
        let frames = vm.space.frame_state();
        let mut ram = vec![0u8; frames.bump as usize];
        vm.space.read_phys(0, &mut ram);
        let (fs_base, gs_base) = vm.bases();
        Ok(Snapshot {
            meta,
            memory_size: vm.space.size(),
            vcpu,
            frames,
            ram,
            kernel: kernel.save(),
            fs_base,
            gs_base,
            current_tid,
            threads,
        })
    }

    /// Encodes the snapshot as a deja artifact.
    pub fn to_artifact(&self) -> Vec<u8> {
        let payload = postcard::to_stdvec(self).expect("postcard encodes plain data");
        deja_format::encode(deja_format::Kind::Snapshot, SNAPSHOT_SCHEMA, &payload)
    }

    /// Decodes and validates a snapshot artifact.
    pub fn from_artifact(bytes: &[u8]) -> Result<Snapshot, SnapshotError> {
        let envelope = deja_format::decode(bytes)?;
        let decode = |e: postcard::Error| SnapshotError::Decode { source: e };
        let payload = envelope.expect(deja_format::Kind::Snapshot, SNAPSHOT_SCHEMA)?;
        let snap: Snapshot = postcard::from_bytes(&payload).map_err(decode)?;
        snap.validate()?;
        Ok(snap)
    }

    fn validate(&self) -> Result<(), SnapshotError> {
        let bad = |detail: String| Err(SnapshotError::Invalid { detail });
        let mib = self.memory_size >> 20;
        if !(16..=65536).contains(&mib) || !self.memory_size.is_multiple_of(PAGE_SIZE) {
            return bad(format!("guest RAM of {} bytes", self.memory_size));
        }
        if self.ram.len() as u64 != self.frames.bump
            || self.frames.bump > self.memory_size
            || !self.frames.bump.is_multiple_of(PAGE_SIZE)
        {
            return bad(format!("RAM image of {} bytes for a high-water mark of {}", self.ram.len(), self.frames.bump));
        }
        let in_use = |f: u64| f.is_multiple_of(PAGE_SIZE) && f < self.frames.bump;
        if !self.frames.free.iter().all(|f| in_use(*f))
            || !self.frames.pt_frames.iter().all(|(f, l, _)| in_use(*f) && *l <= 3)
            || !self.frames.pt_pool.iter().all(|(f, l)| in_use(*f) && *l <= 3)
        {
            return bad("frame lists point outside the RAM image".into());
        }
        let f = &self.frames;
        let is_root = |r: &u64| *r == crate::layout::PML4_PHYS || f.pt_frames.iter().any(|(p, l, _)| p == r && *l == 3);
        if !f.spaces.contains(&f.root)
            || !f.spaces.iter().all(is_root)
            || !f.blocks_spaces.iter().all(|s| f.spaces.contains(s))
            || !f.placed.iter().all(|p| f.spaces.contains(&p.space) && p.start <= p.end)
            || !f.shared.iter().all(|(fr, n)| in_use(*fr) && *n > 1)
        {
            return bad("the address spaces do not fit the frame lists".into());
        }
        if self.vcpu.sregs.cr3 != f.root {
            return bad(format!("the vCPU runs in space {:#x}, the frames say {:#x}", self.vcpu.sregs.cr3, f.root));
        }
        if self.vcpu.msrs.len() != SNAPSHOT_MSRS.len() {
            return bad(format!("{} MSRs instead of {}", self.vcpu.msrs.len(), SNAPSHOT_MSRS.len()));
        }
        Ok(())
    }

    /// Builds a fresh VM holding this snapshot, set up under `settings` (the restoring run's),
    /// and the syscall core to continue with.
    pub fn restore(&self, settings: &crate::identity::Settings) -> Result<(Vm, Kernel), SnapshotError> {
        let kernel = Kernel::restore(&self.kernel)?;
        // The shell's threads must be the core's: the one in the vCPU and a context for each other.
        let mut shell: Vec<u64> = self.threads.iter().map(|t| t.0).chain([self.current_tid]).collect();
        shell.sort_unstable();
        if kernel.current_tid() != self.current_tid
            || shell != kernel.thread_ids()
            || shell.windows(2).any(|w| w[0] == w[1])
        {
            return Err(SnapshotError::Invalid {
                detail: format!(
                    "the saved threads {shell:?} (running {}) are not the core's {:?} (running {})",
                    self.current_tid,
                    kernel.thread_ids(),
                    kernel.current_tid()
                ),
            });
        }
        let mut vm = Vm::new(self.memory_size, settings)?;
        vm.show_cpus(kernel.cpus())?;
        vm.space.write_phys(0, &self.ram);
        vm.space.set_frame_state(&self.frames);
        vm.space.take_host_dirty();
        vm.set_vcpu_state(&self.vcpu, self.fs_base, self.gs_base)?;
        vm.set_thread_contexts(self.current_tid, &self.threads);
        Ok((vm, kernel))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::PML4_PHYS;
    use kvm_bindings::{
        kvm_debugregs, kvm_mp_state, kvm_msr_entry, kvm_regs, kvm_sregs, kvm_vcpu_events, kvm_xcrs, kvm_xsave,
    };

    fn snapshot() -> Snapshot {
        let mut vcpu = VcpuState {
            regs: kvm_regs::default(),
            sregs: kvm_sregs::default(),
            xsave: kvm_xsave::default(),
            xcrs: kvm_xcrs::default(),
            debugregs: kvm_debugregs::default(),
            events: kvm_vcpu_events::default(),
            mp_state: kvm_mp_state::default(),
            msrs: SNAPSHOT_MSRS.map(|index| kvm_msr_entry { index, ..Default::default() }).to_vec(),
        };
        vcpu.sregs.cr3 = PML4_PHYS;
        let bump = 0x14000;
        Snapshot {
            meta: SnapshotMeta {
                deja_version: "test".into(),
                program_blake3: String::new(),
                exe_path: "/bin/t".into(),
                argv: vec![],
                seed: 1,
                syscall_index: 3,
                virtual_time_ns: 0,
                host: None,
            },
            memory_size: 16 << 20,
            vcpu,
            frames: FrameState {
                bump,
                free: vec![0x13000],
                pt_frames: vec![(PML4_PHYS, 3, 0), (0x11000, 2, 0)],
                root: PML4_PHYS,
                spaces: vec![PML4_PHYS],
                shared: vec![],
                pt_pool: vec![],
                blocks_spaces: vec![PML4_PHYS],
                placed: vec![],
            },
            ram: vec![0; bump as usize],
            kernel: vec![1, 2, 3],
            fs_base: 0,
            gs_base: 0,
            current_tid: 1,
            threads: vec![],
        }
    }

    #[test]
    fn a_snapshot_of_an_earlier_schema_is_refused_at_its_envelope() {
        let snap = snapshot();
        let payload = postcard::to_stdvec(&snap).unwrap();
        for schema in [16, 17, 18] {
            let artifact = deja_format::encode(deja_format::Kind::Snapshot, schema, &payload);
            let err = Snapshot::from_artifact(&artifact).unwrap_err().to_string();
            assert!(err.contains(&format!("{schema}")) && err.contains(&SNAPSHOT_SCHEMA.to_string()), "{err}");
        }
        assert!(Snapshot::from_artifact(&snap.to_artifact()).is_ok());
    }

    #[test]
    fn a_snapshot_whose_cr3_is_not_its_current_space_is_refused() {
        let mut snap = snapshot();
        snap.frames.spaces.push(0x12000);
        snap.frames.pt_frames.push((0x12000, 3, 0));
        assert!(Snapshot::from_artifact(&snap.to_artifact()).is_ok());
        snap.frames.root = 0x12000;
        let err = Snapshot::from_artifact(&snap.to_artifact()).unwrap_err().to_string();
        assert!(err.contains("the vCPU runs in space 0x10000"), "{err}");
        snap.frames.spaces.push(0x13000);
        snap.vcpu.sregs.cr3 = 0x12000;
        let err = Snapshot::from_artifact(&snap.to_artifact()).unwrap_err().to_string();
        assert!(err.contains("address spaces"), "{err}");
    }
}
