//! What a run is given besides its program's bytes, for a single program (`deja run`, `deja
//! explore`, `deja check`) and for a cluster's nodes alike:
//!
//! - [`dynlink`]: a dynamically linked program's loader and libraries, from the host (or any
//!   file source), as the files a run declares;
//! - [`ldcache`]: glibc's `/etc/ld.so.cache`, read to find them as the loader would;
//! - [`image`]: a program in a root, a container image or a directory tree read by
//!   `deja-image`, with its command, environment and working directory, and the record of a
//!   run's inputs that capsules and certificates keep;
//! - [`not_given`]: what a run looked for that the host has and the run was not given, with
//!   the `--file` that would provide it;
//! - [`tree`]: a host directory read as a root (`--root`), and a run's disk written out as one
//!   (`--fs-export`).

pub mod dynlink;
pub mod image;
pub mod ldcache;
pub mod not_given;
pub mod tree;
