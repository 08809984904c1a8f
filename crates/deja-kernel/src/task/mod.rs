//! Tasks: the running process's parts, the node's process table, the threads and the
//! deterministic scheduler.
//!
//! Owns [`Process`](process::Process) (`process.rs`: the address space's parts and the
//! process's identity and attributes), [`Procs`](procs::Procs) (`procs.rs`: parents, groups,
//! sessions, address spaces, parked parts and zombies), the threads, their futex waits and the
//! deterministic scheduler (`threads.rs`), and [`Sched`](sched::Sched), the threads with the
//! virtual clock as one saved part (`sched.rs`). Uses the state rooms below it: [`crate::mm`],
//! [`crate::host`], [`crate::time`], [`crate::signal`], [`crate::files`], [`crate::fs`],
//! [`crate::abi`] and [`crate::persist`].

pub(crate) mod process;
pub(crate) mod procs;
pub(crate) mod sched;
pub mod threads;
