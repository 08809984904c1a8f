//! File system syscalls beyond open/read/write: writes to files with fault injection, the sync
//! family (durable writes), truncation, `fallocate`, the namespace calls (`mkdir`, `mknod`,
//! `unlink`, `rename`, `link`, `symlink`, ...), modes, times and locks.
//!
//! `sync_file_range` with `SYNC_FILE_RANGE_WRITE` (2) is an `fdatasync` of the whole file (a
//! durable write); without it (only the WAIT flags) it does nothing. Locks (`fcntl` record
//! locks, `flock`) are always granted (one process), `F_GETLK` always answers `F_UNLCK`; record
//! locks are kept per inode and start (at most [`MAX_LOCKS`](crate::files::MAX_LOCKS): then `ENOLCK`).
//!
//! The handlers are in one file per family: `points.rs` holds where storage faults strike (the
//! durable operations' counts and crash points, kills by meaning, the placed errors and rates,
//! the fail-stop rule), `sync.rs` the sync family, `data.rs` writes to files, truncation and
//! `fallocate`, `namespace.rs` the calls that change names, `meta.rs` modes, owners, times,
//! `statfs` and extended attributes, and `locks.rs` the locks.

mod data;
mod locks;
mod meta;
mod namespace;
mod points;
mod sync;

/// `AT_REMOVEDIR`.
pub(crate) const AT_REMOVEDIR: u64 = 0x200;
