//! `deja debug`: a GDB remote-protocol server for a replayed run, forwards and backwards.
//!
//! - [`rsp`]: the protocol's packets and requests (pure).
//! - [`engine`]: points of a run and the moves between them over a [`engine::Tracee`] (pure,
//!   tested over a fake program).
//! - [`step`]: where an instruction may go next, decoded (pure).
//! - [`replay`]: the KVM tracee, a bug's replay in a [`deja_vmm::Session`].
//! - [`server`]: the session with a debugger over a byte stream.

pub mod engine;
pub mod replay;
pub mod rsp;
pub mod server;
pub mod step;
