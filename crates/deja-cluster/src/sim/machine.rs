//! What runs a node's program between the kernel's calls: the simulator asks a [`Machine`] to
//! boot a life, to run it until it stops (a syscall that blocks the node, its clock past a
//! point, its end), and for the memory the kernel reads when packets arrive or the life ends.
//!
//! Every real run uses a KVM virtual machine ([`Vm`]). The simulator's own logic (scheduling,
//! the network, faults, lives, steering, the report) does not depend on how the program runs,
//! and its unit tests drive it over fake machines whose programs are Rust state machines making
//! syscalls into the same kernel (see the tests beside this module).

use std::sync::Arc;

use deja_kernel::{Kernel, Memory, ProgramSpec, Stream};
use deja_vmm::coverage::{BlockHit, BlockImage, Seen};
use deja_vmm::{BootOptions, RunError, Stop, Vm, VmError};

/// Host-side counters of a machine, cumulative over its life.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counters {
    /// Times the program left for the monitor.
    pub exits: u64,
    /// Host time spent running the program, ns.
    pub host_run_ns: u64,
    /// Host cores it ran on, ascending.
    pub host_cores: Vec<u32>,
}

/// What runs one life of a node's program.
pub trait Machine: Sized {
    /// Boots a life: `spec` loaded into a new machine of `memory` bytes, and its kernel.
    fn boot(spec: &ProgramSpec, memory: u64, opts: BootOptions) -> Result<(Self, Kernel), RunError>;

    /// Runs the program until it stops (see [`Vm::run_until`]), serving its syscalls with
    /// `kernel` and handing its output to `sink`; with `stop_at`, stops before serving that
    /// syscall ([`Stop::AtSyscall`]).
    fn run_until(
        &mut self,
        kernel: &mut Kernel,
        sink: &mut dyn FnMut(Stream, &[u8]),
        stop_at: Option<u64>,
    ) -> Result<Stop, VmError>;

    /// The program's memory, for the kernel's calls outside a syscall.
    fn memory(&mut self) -> &mut dyn Memory;

    /// Its host-side counters so far.
    fn counters(&self) -> Counters;

    /// Arms block coverage (see [`Vm::arm_blocks`]); a machine without coverage ignores it.
    fn arm_blocks(&mut self, blocks: Arc<BlockImage>, seen: &Seen);

    /// The blocks reached since the last call.
    fn take_block_hits(&mut self) -> Vec<BlockHit>;
}

impl Machine for Vm {
    fn boot(spec: &ProgramSpec, memory: u64, opts: BootOptions) -> Result<(Vm, Kernel), RunError> {
        deja_vmm::boot(spec, memory, opts)
    }

    fn run_until(
        &mut self,
        kernel: &mut Kernel,
        sink: &mut dyn FnMut(Stream, &[u8]),
        stop_at: Option<u64>,
    ) -> Result<Stop, VmError> {
        Vm::run_until(self, kernel, sink, stop_at)
    }

    fn memory(&mut self) -> &mut dyn Memory {
        &mut self.space
    }

    fn counters(&self) -> Counters {
        Counters {
            exits: self.stats.exits,
            host_run_ns: self.stats.host_run_ns,
            host_cores: self.stats.host_cores.clone(),
        }
    }

    fn arm_blocks(&mut self, blocks: Arc<BlockImage>, seen: &Seen) {
        Vm::arm_blocks(self, blocks, seen);
    }

    fn take_block_hits(&mut self) -> Vec<BlockHit> {
        Vm::take_block_hits(self)
    }
}
