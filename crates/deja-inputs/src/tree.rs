//! Host directory trees: one read as a run's root (`deja run --root DIR`: directories, regular
//! files and symlinks with their permission bits, within limits), and a run's disk written out
//! as one (`deja run --fs-export DIR`), never outside the directory.
//!
//! Owns the walk of a host directory and the export of a [`Disk`]. Uses [`crate::image`] for
//! the limits, the tree's digest and the record of where a root came from; the tree's nodes are
//! `deja-image`'s (the kernel's own root nodes).

use std::collections::BTreeMap;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use deja_image::{Limits, Node};
use deja_kernel::{Disk, DiskEntry};
use snafu::{ensure, ResultExt, Snafu};

use crate::image::{self, RootInput};

/// Why a host directory cannot be a root.
#[derive(Debug, Snafu)]
pub enum TreeError {
    /// The host refused to read a part of the tree.
    #[snafu(display("cannot read {what} {}: {source}", path.display()))]
    Read {
        /// `the root`, `the directory`, `the file` or `the link`.
        what: &'static str,
        /// Where.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The root is not a directory.
    #[snafu(display("{}: not a directory", path.display()))]
    NotADirectory {
        /// The root.
        path: PathBuf,
    },
    /// The tree's files hold more bytes than the limit.
    #[snafu(display("{}: more than {} MiB of files", path.display(), max_bytes >> 20))]
    TooLarge {
        /// The root.
        path: PathBuf,
        /// The limit.
        max_bytes: u64,
    },
    /// The tree has more entries than the limit.
    #[snafu(display("{}: more than {max_entries} entries", path.display()))]
    TooManyEntries {
        /// The root.
        path: PathBuf,
        /// The limit.
        max_entries: usize,
    },
}

impl TreeError {
    /// Whether the error is a part of the tree (the root itself among them) that does not exist.
    pub fn not_found(&self) -> bool {
        matches!(self, TreeError::Read { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }
}

/// The host directory `dir` as a tree: directories, regular files and symlinks (kept as links,
/// never followed) with their permission bits; devices, sockets, FIFOs and names that are not
/// UTF-8 are left out. At most `limits` (bytes of files, entries).
pub fn read_tree(dir: &Path, limits: &Limits) -> Result<BTreeMap<String, Node>, TreeError> {
    let meta = std::fs::metadata(dir).context(ReadSnafu { what: "the root", path: dir })?;
    ensure!(meta.is_dir(), NotADirectorySnafu { path: dir });
    let mut tree = BTreeMap::from([("/".to_string(), Node::Dir { mode: meta.permissions().mode() & 0o7777 })]);
    let mut bytes = 0u64;
    let mut todo = vec![(dir.to_path_buf(), String::new())];
    while let Some((host, guest)) = todo.pop() {
        let entries = std::fs::read_dir(&host).context(ReadSnafu { what: "the directory", path: &host })?;
        for entry in entries {
            let entry = entry.context(ReadSnafu { what: "the directory", path: &host })?;
            let Some(name) = entry.file_name().to_str().map(str::to_string) else { continue };
            let path = entry.path();
            let at = format!("{guest}/{name}");
            let meta = std::fs::symlink_metadata(&path).context(ReadSnafu { what: "the file", path: &path })?;
            let mode = meta.permissions().mode() & 0o7777;
            let node = if meta.is_dir() {
                todo.push((path.clone(), at.clone()));
                Node::Dir { mode }
            } else if meta.is_file() {
                bytes += meta.len();
                ensure!(bytes <= limits.max_bytes, TooLargeSnafu { path: dir, max_bytes: limits.max_bytes });
                let data = std::fs::read(&path).context(ReadSnafu { what: "the file", path: &path })?;
                Node::File { mode, data: Arc::from(data) }
            } else if meta.file_type().is_symlink() {
                let target = std::fs::read_link(&path).context(ReadSnafu { what: "the link", path: &path })?;
                match target.to_str() {
                    Some(t) if !t.is_empty() => Node::Symlink(t.to_string()),
                    _ => continue,
                }
            } else {
                continue; // a device, socket or FIFO of the host
            };
            tree.insert(at, node);
            ensure!(
                tree.len() <= limits.max_entries,
                TooManyEntriesSnafu { path: dir, max_entries: limits.max_entries }
            );
        }
    }
    Ok(tree)
}

/// The host directory `dir` as a root: its tree ([`read_tree`] within [`image::LIMITS`]) as an
/// image with an empty config, and the record of it (its BLAKE3 is [`image::tree_digest`]).
pub fn read_root(dir: &Path) -> Result<(deja_image::Image, RootInput), TreeError> {
    let tree = read_tree(dir, &image::LIMITS)?;
    let input = RootInput {
        kind: "dir".into(),
        path: dir.display().to_string(),
        blake3: image::tree_digest(&tree),
        image_digest: None,
    };
    Ok((deja_image::Image { tree, config: Default::default(), digest: String::new() }, input))
}

/// Why a disk could not be written out.
#[derive(Debug, Snafu)]
pub enum ExportError {
    /// A path of the disk that could land outside the directory (`..`, `.` or an empty
    /// component).
    #[snafu(display("refusing to export the path {path:?}"))]
    Refused {
        /// The guest path.
        path: String,
    },
    /// The host refused a write (the caller names the directory).
    #[snafu(display("{source}"))]
    Write {
        /// Where on the host.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
}

/// Writes `disk` under `dir` on the host. Directories and files first, symlinks last, so no
/// write ever goes through a link the guest made; a path with `..` or an empty component is
/// refused, so nothing lands outside `dir`.
pub fn export_disk(disk: &Disk, dir: &Path) -> Result<(), ExportError> {
    let host_path = |path: &str| -> Result<PathBuf, ExportError> {
        let rel = path.trim_start_matches('/');
        let unsafe_part = |c: &str| c == ".." || c == "." || (c.is_empty() && !rel.is_empty());
        ensure!(!rel.split('/').any(unsafe_part), RefusedSnafu { path });
        Ok(dir.join(rel))
    };
    let create_dir = |at: &Path| std::fs::create_dir_all(at).context(WriteSnafu { path: at });
    create_dir(dir)?;
    for (path, entry) in &disk.entries {
        let target = host_path(path)?;
        match entry {
            DiskEntry::Dir { .. } => create_dir(&target)?,
            DiskEntry::File { data, .. } => {
                if let Some(parent) = target.parent() {
                    create_dir(parent)?;
                }
                std::fs::write(&target, data).context(WriteSnafu { path: &target })?;
            }
            DiskEntry::Symlink { .. } => {}
        }
    }
    for (path, entry) in &disk.entries {
        if let DiskEntry::Symlink { target } = entry {
            let at = host_path(path)?;
            let _ = std::fs::remove_file(&at);
            std::os::unix::fs::symlink(target, &at).context(WriteSnafu { path: &at })?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh directory under the system's temporary directory, removed when dropped.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str) -> Scratch {
            let dir = std::env::temp_dir().join(format!("deja-inputs-tree-{}-{name}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).expect("a temporary directory");
            Scratch(dir)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn chmod(path: &Path, mode: u32) {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    }

    const ROOMY: Limits = Limits { max_bytes: 1 << 20, max_entries: 100 };

    #[test]
    fn a_tree_keeps_directories_files_links_and_their_modes() {
        let s = Scratch::new("kinds");
        let d = &s.0;
        std::fs::create_dir_all(d.join("bin")).unwrap();
        std::fs::create_dir_all(d.join("etc/empty")).unwrap();
        std::fs::write(d.join("bin/tool"), b"\x7fELF").unwrap();
        chmod(&d.join("bin/tool"), 0o755);
        std::fs::write(d.join("etc/conf"), b"k=v\n").unwrap();
        chmod(&d.join("etc/conf"), 0o640);
        chmod(&d.join("etc/empty"), 0o700);
        std::os::unix::fs::symlink("/bin/tool", d.join("link")).unwrap();
        std::os::unix::fs::symlink("../nowhere", d.join("etc/dangling")).unwrap();
        chmod(d, 0o755);
        let tree = read_tree(d, &ROOMY).expect("a tree");
        let paths: Vec<&str> = tree.keys().map(String::as_str).collect();
        assert_eq!(paths, ["/", "/bin", "/bin/tool", "/etc", "/etc/conf", "/etc/dangling", "/etc/empty", "/link"]);
        assert_eq!(tree["/"], Node::Dir { mode: 0o755 });
        assert_eq!(tree["/etc/empty"], Node::Dir { mode: 0o700 });
        assert_eq!(tree["/bin/tool"], Node::File { mode: 0o755, data: Arc::from(&b"\x7fELF"[..]) });
        assert_eq!(tree["/etc/conf"], Node::File { mode: 0o640, data: Arc::from(&b"k=v\n"[..]) });
        // Links are kept as links, never followed (a dangling one too).
        assert_eq!(tree["/link"], Node::Symlink("/bin/tool".into()));
        assert_eq!(tree["/etc/dangling"], Node::Symlink("../nowhere".into()));
    }

    #[test]
    fn a_root_is_recorded_by_the_digest_of_its_tree() {
        let s = Scratch::new("root");
        std::fs::write(s.0.join("f"), b"one").unwrap();
        let (img, input) = read_root(&s.0).expect("a root");
        assert_eq!(input.kind, "dir");
        assert_eq!(input.path, s.0.display().to_string());
        assert_eq!(input.image_digest, None);
        assert_eq!(input.blake3, image::tree_digest(&img.tree));
        assert!(img.digest.is_empty() && img.config.env.is_empty());
        std::fs::write(s.0.join("f"), b"two").unwrap();
        let (_, again) = read_root(&s.0).expect("a root");
        assert_ne!(again.blake3, input.blake3, "a changed file changes the digest");
    }

    #[test]
    fn a_missing_root_or_a_file_is_refused() {
        let s = Scratch::new("refused");
        let missing = read_tree(&s.0.join("nope"), &ROOMY).expect_err("missing");
        assert!(missing.not_found(), "{missing}");
        assert!(missing.to_string().starts_with("cannot read the root "), "{missing}");
        std::fs::write(s.0.join("file"), b"x").unwrap();
        let file = read_tree(&s.0.join("file"), &ROOMY).expect_err("a file");
        assert!(matches!(file, TreeError::NotADirectory { .. }), "{file}");
        assert!(!file.not_found());
        assert_eq!(file.to_string(), format!("{}: not a directory", s.0.join("file").display()));
    }

    #[test]
    fn the_limits_hold_for_bytes_and_entries() {
        let s = Scratch::new("limits");
        std::fs::write(s.0.join("a"), vec![0u8; 3 << 20]).unwrap();
        let big = read_tree(&s.0, &Limits { max_bytes: 2 << 20, max_entries: 100 }).expect_err("too large");
        assert!(matches!(big, TreeError::TooLarge { max_bytes, .. } if max_bytes == 2 << 20), "{big}");
        assert!(big.to_string().ends_with(": more than 2 MiB of files"), "{big}");
        for i in 0..4 {
            std::fs::write(s.0.join(format!("f{i}")), b"").unwrap();
        }
        let many = read_tree(&s.0, &Limits { max_bytes: 1 << 30, max_entries: 3 }).expect_err("too many");
        assert!(many.to_string().ends_with(": more than 3 entries"), "{many}");
        assert_eq!(read_tree(&s.0, &Limits { max_bytes: 1 << 30, max_entries: 6 }).expect("fits").len(), 6);
    }

    fn disk(entries: &[(&str, DiskEntry)]) -> Disk {
        let mut d = Disk::default();
        d.entries.extend(entries.iter().map(|(p, e)| (p.to_string(), e.clone())));
        d
    }

    #[test]
    fn an_exported_disk_reads_back_as_the_same_tree() {
        let s = Scratch::new("export");
        let out = s.0.join("out");
        let d = disk(&[
            ("/data", DiskEntry::Dir { mode: 0o755 }),
            ("/data/wal", DiskEntry::File { mode: 0o644, data: b"entry\n".to_vec() }),
            ("/data/latest", DiskEntry::Symlink { target: "wal".into() }),
            ("/top", DiskEntry::File { mode: 0o644, data: vec![] }),
        ]);
        export_disk(&d, &out).expect("exported");
        let tree = read_tree(&out, &ROOMY).expect("a tree");
        let paths: Vec<&str> = tree.keys().map(String::as_str).collect();
        assert_eq!(paths, ["/", "/data", "/data/latest", "/data/wal", "/top"]);
        assert!(matches!(&tree["/data/wal"], Node::File { data, .. } if &data[..] == b"entry\n"));
        assert_eq!(tree["/data/latest"], Node::Symlink("wal".into()));
        // Exporting again over it replaces the links rather than failing on them.
        export_disk(&d, &out).expect("exported again");
    }

    #[test]
    fn an_export_never_leaves_its_directory() {
        let s = Scratch::new("escape");
        for bad in ["/../escaped", "/a/./b", "/a//b"] {
            let d = disk(&[(bad, DiskEntry::File { mode: 0o644, data: b"x".to_vec() })]);
            let e = export_disk(&d, &s.0.join("out")).expect_err("refused");
            assert!(matches!(&e, ExportError::Refused { path } if path == bad), "{e}");
            assert_eq!(e.to_string(), format!("refusing to export the path {bad:?}"));
        }
        assert!(!s.0.join("escaped").exists());
    }
}
