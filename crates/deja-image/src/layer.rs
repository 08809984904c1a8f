//! Layers: decompressing a layer tarball, reading its entries and applying them to the tree
//! with the OCI rules (whiteouts, opaque directories, replacement, hard links).
//!
//! A layer is read whole before it is applied, so that its whiteouts act on what the earlier
//! layers left, whatever their place in the tar; its other entries are then applied in order.

use std::collections::BTreeMap;
use std::io::Read;
use std::sync::Arc;

use snafu::{ensure, ResultExt};
use tar::EntryType;

use crate::{
    BadWhiteoutSnafu, EmptySymlinkSnafu, HardLinkMissingSnafu, HeaderSnafu, ImageError, LayerError, LayerSnafu, Limits,
    Node, ReadSnafu, RootNotDirSnafu, TooLargeSnafu, TooManyEntriesSnafu, TruncatedSnafu,
};

/// The longest name of one path component, in bytes (Linux's `NAME_MAX`).
pub(crate) const NAME_MAX: usize = 255;
/// The longest path, in bytes (Linux's `PATH_MAX` less its NUL).
pub(crate) const PATH_MAX: usize = 4095;
/// The mode of a directory a layer implies without listing it, and of `/` by default.
const IMPLIED_DIR_MODE: u32 = 0o755;
/// The most bytes an entry's data buffer reserves before the data arrives (it grows as read).
const RESERVE_MAX: u64 = 8 << 20;
/// Whiteout prefix (OCI image spec, "Whiteouts").
const WHITEOUT: &str = ".wh.";
/// The opaque-directory marker's name.
const OPAQUE: &str = ".wh..wh..opq";

/// Applies named layers in order to a tree holding only `/`.
pub(crate) fn unpack(layers: &[(String, &[u8])], limits: &Limits) -> Result<BTreeMap<String, Node>, ImageError> {
    let mut unpacker = Unpacker::new(limits);
    for (name, bytes) in layers {
        unpacker.layer(bytes).context(LayerSnafu { layer: name.clone() })?;
    }
    Ok(unpacker.tree)
}

/// Why a path could not be normalized.
pub(crate) enum PathProblem {
    /// A `..` above the root.
    Escapes,
    /// Anything else, said for people.
    Bad(&'static str),
}

/// Normalizes a path from an archive into an absolute path: leading `./` and `/` dropped, `.`
/// and empty components dropped, `..` resolved (an error above the root), no NUL, UTF-8, names
/// of at most 255 bytes, at most 4095 bytes in all.
pub(crate) fn normalize(raw: &[u8]) -> Result<String, PathProblem> {
    if raw.contains(&0) {
        return Err(PathProblem::Bad("contains a NUL byte"));
    }
    let text = std::str::from_utf8(raw).map_err(|_| PathProblem::Bad("is not UTF-8"))?;
    let mut parts: Vec<&str> = Vec::new();
    for part in text.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    return Err(PathProblem::Escapes);
                }
            }
            name if name.len() > NAME_MAX => return Err(PathProblem::Bad("has a name longer than 255 bytes")),
            name => parts.push(name),
        }
    }
    let mut path = String::with_capacity(text.len() + 1);
    for part in &parts {
        path.push('/');
        path.push_str(part);
    }
    if path.is_empty() {
        path.push('/');
    }
    if path.len() > PATH_MAX {
        return Err(PathProblem::Bad("is longer than 4095 bytes"));
    }
    Ok(path)
}

/// A raw path for an error message: lossy UTF-8, cut to a readable length.
pub(crate) fn shown(raw: &[u8]) -> String {
    const MAX: usize = 200;
    let text = String::from_utf8_lossy(raw);
    match text.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text.into_owned(),
    }
}

/// The parent directory of a normalized path (`/` for `/` itself).
pub(crate) fn parent(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &path[..i],
    }
}

/// `dir` joined with a name.
fn join(dir: &str, name: &str) -> String {
    if dir == "/" {
        format!("/{name}")
    } else {
        format!("{dir}/{name}")
    }
}

/// gzip's magic bytes.
const GZIP: [u8; 2] = [0x1f, 0x8b];
/// zstd's magic bytes (a frame).
const ZSTD: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// Whether the bytes start with gzip's or zstd's magic (else they are taken for a plain tar).
pub(crate) fn is_compressed(bytes: &[u8]) -> bool {
    bytes.starts_with(&GZIP) || bytes.starts_with(&ZSTD)
}

/// Chooses the decompressor of a layer (or of an image archive) by its magic bytes.
pub(crate) fn decompressed(bytes: &[u8]) -> std::io::Result<Box<dyn Read + '_>> {
    Ok(if bytes.starts_with(&GZIP) {
        Box::new(flate2::read::MultiGzDecoder::new(bytes))
    } else if bytes.starts_with(&ZSTD) {
        Box::new(zstd::stream::read::Decoder::with_buffer(bytes)?)
    } else {
        Box::new(bytes)
    })
}

/// An entry of a layer, read and checked, waiting to be applied.
enum Op {
    /// `.wh.NAME`: remove this path and everything below it.
    Whiteout {
        /// The whiteout entry's own path (its parent must exist).
        at: String,
        /// The path removed.
        path: String,
    },
    /// `.wh..wh..opq`: remove everything below the directory.
    Opaque {
        /// The marker's own path.
        at: String,
        /// The directory.
        dir: String,
    },
    /// Anything else: put a node at the path.
    Put {
        /// The entry's path as written, for errors.
        entry: String,
        /// Its normalized path.
        path: String,
        /// What to put there.
        what: Put,
    },
}

/// What an entry puts in the tree.
enum Put {
    Dir(u32),
    File(u32, Arc<[u8]>),
    Symlink(String),
    /// A hard link: the normalized target, and the target as written for errors.
    HardLink(String, String),
}

/// The tree being built and what is left of the limits.
struct Unpacker {
    tree: BTreeMap<String, Node>,
    limits: Limits,
    /// Decompressed layer bytes left.
    stream_left: u64,
    /// File bytes left.
    file_left: u64,
    /// Layer entries left.
    entries_left: usize,
}

impl Unpacker {
    fn new(limits: &Limits) -> Self {
        let mut tree = BTreeMap::new();
        tree.insert("/".to_string(), Node::Dir { mode: IMPLIED_DIR_MODE });
        Unpacker {
            tree,
            limits: *limits,
            stream_left: limits.max_bytes,
            file_left: limits.max_bytes,
            entries_left: limits.max_entries,
        }
    }

    /// Reads one layer whole, then applies its whiteouts and then its other entries.
    fn layer(&mut self, bytes: &[u8]) -> Result<(), LayerError> {
        let reader = decompressed(bytes).context(ReadSnafu)?;
        // One byte past what is left, to tell "exactly at the limit" from "beyond it".
        let allowed = self.stream_left.saturating_add(1);
        let mut archive = tar::Archive::new(reader.take(allowed));
        let ops = self.entries(&mut archive);
        // Read the compressed stream to its end, so that a corrupt or truncated one (its
        // checksum, its last frame) is refused even when the tar inside ended in time.
        let mut rest = archive.into_inner();
        let drained = match ops {
            Ok(_) => std::io::copy(&mut rest, &mut std::io::sink()).map(|_| ()),
            Err(_) => Ok(()),
        };
        let consumed = allowed - rest.limit();
        // A stream cut short by the limit shows up as a broken tar: report the limit instead.
        ensure!(consumed <= self.stream_left, TooLargeSnafu { limit: self.limits.max_bytes });
        let ops = ops?;
        drained.context(ReadSnafu)?;
        self.stream_left -= consumed;
        let (whiteouts, puts): (Vec<Op>, Vec<Op>) = ops.into_iter().partition(|op| !matches!(op, Op::Put { .. }));
        for op in whiteouts.into_iter().chain(puts) {
            self.apply(op)?;
        }
        Ok(())
    }

    /// Reads and checks the entries of one layer.
    fn entries<R: Read>(&mut self, archive: &mut tar::Archive<R>) -> Result<Vec<Op>, LayerError> {
        let mut ops = Vec::new();
        for entry in archive.entries().context(ReadSnafu)? {
            let mut entry = entry.context(ReadSnafu)?;
            let kind = entry.header().entry_type();
            if matches!(kind, EntryType::XGlobalHeader | EntryType::XHeader) {
                continue;
            }
            ensure!(self.entries_left > 0, TooManyEntriesSnafu { limit: self.limits.max_entries });
            self.entries_left -= 1;
            let raw = entry.path_bytes().into_owned();
            let shown_entry = shown(&raw);
            let path = checked(&raw)?;
            let name = path.rsplit('/').next().unwrap_or_default();
            if let Some(removed) = name.strip_prefix(WHITEOUT) {
                let dir = parent(&path).to_string();
                if name == OPAQUE {
                    ops.push(Op::Opaque { at: path.clone(), dir });
                } else if removed.starts_with(WHITEOUT) {
                    // Other `.wh..wh.` names are AUFS's own bookkeeping, not whiteouts.
                } else {
                    ensure!(!matches!(removed, "" | "." | ".."), BadWhiteoutSnafu { entry: shown_entry });
                    let removed = join(&dir, removed);
                    ops.push(Op::Whiteout { at: path.clone(), path: removed });
                }
                continue;
            }
            let mode = || -> Result<u32, LayerError> {
                Ok(entry.header().mode().context(HeaderSnafu { entry: shown(&raw) })? & 0o7777)
            };
            let what = match kind {
                EntryType::Directory => Put::Dir(mode()?),
                // Old tars mark a directory by a trailing slash on a regular entry.
                EntryType::Regular if raw.ends_with(b"/") => Put::Dir(mode()?),
                EntryType::Regular | EntryType::Continuous | EntryType::GNUSparse => {
                    let mode = mode()?;
                    Put::File(mode, self.data(&mut entry, &shown_entry)?)
                }
                EntryType::Symlink => {
                    let target = entry.link_name_bytes().map(|t| t.into_owned()).unwrap_or_default();
                    Put::Symlink(symlink_target(&target, &shown_entry)?)
                }
                EntryType::Link => {
                    let target = entry.link_name_bytes().map(|t| t.into_owned()).unwrap_or_default();
                    let normalized = checked(&target).map_err(|error| match error {
                        LayerError::Escapes { entry } => {
                            LayerError::Escapes { entry: format!("{shown_entry} (a hard link to {entry})") }
                        }
                        other => other,
                    })?;
                    Put::HardLink(normalized, shown(&target))
                }
                // Devices, FIFOs and anything else a container image has no use for.
                _ => continue,
            };
            ensure!(path != "/" || matches!(what, Put::Dir(_)), RootNotDirSnafu { entry: shown_entry });
            ops.push(Op::Put { entry: shown_entry, path, what });
        }
        Ok(ops)
    }

    /// Reads a file's data within what is left of the limit.
    fn data<R: Read>(&mut self, entry: &mut tar::Entry<'_, R>, shown_entry: &str) -> Result<Arc<[u8]>, LayerError> {
        let size = entry.size();
        let allowed = self.file_left.saturating_add(1);
        let mut data = Vec::with_capacity(size.min(allowed).min(RESERVE_MAX) as usize);
        let read = entry.take(allowed).read_to_end(&mut data);
        ensure!(data.len() as u64 <= self.file_left, TooLargeSnafu { limit: self.limits.max_bytes });
        read.context(ReadSnafu)?;
        ensure!(data.len() as u64 == size, TruncatedSnafu { entry: shown_entry.to_string() });
        self.file_left -= size;
        Ok(data.into())
    }

    /// Applies one checked entry.
    fn apply(&mut self, op: Op) -> Result<(), LayerError> {
        match op {
            Op::Whiteout { at, path } => {
                self.parents(&at)?;
                self.remove_below(&path);
                self.tree.remove(&path);
            }
            Op::Opaque { at, dir } => {
                self.parents(&at)?;
                self.remove_below(&dir);
            }
            Op::Put { entry, path, what } => {
                if path == "/" {
                    if let Put::Dir(mode) = what {
                        self.tree.insert(path, Node::Dir { mode });
                    }
                    return Ok(());
                }
                self.parents(&path)?;
                let node = match what {
                    Put::Dir(mode) => Node::Dir { mode },
                    Put::File(mode, data) => Node::File { mode, data },
                    Put::Symlink(target) => Node::Symlink(target),
                    Put::HardLink(target, shown_target) => match self.tree.get(&target) {
                        Some(node) => node.clone(),
                        None => return HardLinkMissingSnafu { entry, target: shown_target }.fail(),
                    },
                };
                match (&node, self.tree.get_mut(&path)) {
                    (Node::Dir { mode }, Some(Node::Dir { mode: old })) => *old = *mode,
                    (Node::Dir { .. }, _) => self.insert(path, node)?,
                    _ => {
                        self.remove_below(&path);
                        self.insert(path, node)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Makes sure every parent of `path` is in the tree: a missing one, or a file where a
    /// directory must be, becomes a directory of mode 0755; a symbolic link stays (the entry is
    /// kept under its literal path; links are not followed while unpacking).
    fn parents(&mut self, path: &str) -> Result<(), LayerError> {
        for (end, _) in path.match_indices('/').skip(1) {
            let dir = &path[..end];
            if !matches!(self.tree.get(dir), Some(Node::Dir { .. } | Node::Symlink(_))) {
                self.insert(dir.to_string(), Node::Dir { mode: IMPLIED_DIR_MODE })?;
            }
        }
        Ok(())
    }

    /// Inserts a node, within the limit on the tree's size.
    fn insert(&mut self, path: String, node: Node) -> Result<(), LayerError> {
        self.tree.insert(path, node);
        ensure!(self.tree.len() <= self.limits.max_entries, TooManyEntriesSnafu { limit: self.limits.max_entries });
        Ok(())
    }

    /// Removes everything below `dir` (not `dir` itself).
    fn remove_below(&mut self, dir: &str) {
        let prefix = if dir == "/" { "/".to_string() } else { format!("{dir}/") };
        let below: Vec<String> = self
            .tree
            .range::<str, _>((std::ops::Bound::Included(prefix.as_str()), std::ops::Bound::Unbounded))
            .map(|(path, _)| path)
            .take_while(|path| path.starts_with(&prefix))
            .filter(|path| path.as_str() != dir)
            .cloned()
            .collect();
        for path in below {
            self.tree.remove(&path);
        }
    }
}

/// Normalizes an entry's path (or a hard link's target), as a layer error.
fn checked(raw: &[u8]) -> Result<String, LayerError> {
    normalize(raw).map_err(|problem| match problem {
        PathProblem::Escapes => LayerError::Escapes { entry: shown(raw) },
        PathProblem::Bad(why) => LayerError::BadPath { entry: shown(raw), why },
    })
}

/// Checks a symbolic link's target: not empty, no NUL, UTF-8, at most 4095 bytes. It is kept
/// verbatim.
fn symlink_target(raw: &[u8], entry: &str) -> Result<String, LayerError> {
    ensure!(!raw.is_empty(), EmptySymlinkSnafu { entry });
    let bad = |why| LayerError::BadPath { entry: format!("{entry} -> {}", shown(raw)), why };
    if raw.contains(&0) {
        return Err(bad("the link's target contains a NUL byte"));
    }
    if raw.len() > PATH_MAX {
        return Err(bad("the link's target is longer than 4095 bytes"));
    }
    String::from_utf8(raw.to_vec()).map_err(|_| bad("the link's target is not UTF-8"))
}
