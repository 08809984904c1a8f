//! Linux's numbers as x86-64 programs see them: errno values and their names (`errno.rs`),
//! open flags and file mode types (`file.rs`), the auxiliary vector's keys (`auxv.rs`), clock
//! ids (`time.rs`), signal numbers and the special dispositions (`signal.rs`), and the `EPOLL*`
//! bits (`epoll.rs`).
//!
//! Pure definitions, no state and no behaviour beyond naming errno values. Uses nothing of the
//! crate: every other room may use it. The constants only one handler needs stay beside that
//! handler, in [`crate::syscalls`].

pub mod auxv;
pub mod epoll;
pub mod errno;
pub mod file;
pub mod signal;
pub mod time;
