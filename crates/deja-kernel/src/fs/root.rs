//! A read-only root file system under the run: an unpacked container image or a host directory
//! tree (`deja run --image`, `--root`). Its directories, files and symlinks are placed in the
//! file system of a new run like declared inputs: read-only (files give `EROFS`, directories
//! `EACCES` to a change), never part of the disk, and the same in every life of the node. The
//! disk's `/`, `/tmp` and `/data` and the declared files sit on top of it.

use crate::prelude::*;
use alloc::collections::BTreeMap;
use alloc::sync::Arc;

/// One entry of a [`Root`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RootNode {
    /// A regular file: permission bits and contents.
    File {
        /// Permission bits (`0o7777` at most).
        mode: u32,
        /// The file's bytes.
        data: Arc<[u8]>,
    },
    /// A directory and its permission bits.
    Dir {
        /// Permission bits.
        mode: u32,
    },
    /// A symbolic link and its target, as the image stores it.
    Symlink(String),
}

/// A read-only root: normalized absolute paths (`/etc/passwd`) to what is there. Parents come
/// before their children (the map's order), and a path whose parent is missing gets a
/// directory made for it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Root {
    /// Every entry by path; `/` itself is ignored (the disk's root is the run's `/`).
    pub nodes: BTreeMap<String, RootNode>,
}
