//! deja's container image reader: turns the bytes of an image archive into the flattened file
//! tree a container would see and the parts of the image config that say how to run it, for
//! `deja run --image IMAGE.tar`.
//!
//! # What it reads
//!
//! Two archive formats, both plain tars (a gzip- or zstd-compressed tar is accepted too):
//!
//! - **An OCI image layout**, as `skopeo copy … oci-archive:` and `docker save` (Docker 25 and
//!   later) write it: `oci-layout`, `index.json` and `blobs/sha256/<hex>`. The index is followed
//!   through nested indexes (OCI image indexes and Docker manifest lists) to one image manifest:
//!   the only one, or the one whose platform is linux/amd64. Every blob reached from `index.json`
//!   is checked against its `sha256:` digest (and its size) before it is used. The image's
//!   [`Image::digest`] is the chosen manifest's digest.
//! - **A classic `docker save` archive**: `manifest.json` =
//!   `[{"Config": "<hex>.json", "RepoTags": [...], "Layers": ["<id>/layer.tar", ...]}]`. The first
//!   entry is used; [`Image::digest`] is `sha256:` and the SHA-256 of the config file.
//!
//! An archive holding both (Docker 25 writes both) is read as an OCI layout. Symbolic and hard
//! links inside the archive (older `docker save` links layers it has already written) are
//! followed when a file is looked up.
//!
//! The layers are applied in order ([`from_layers`]) with the OCI rules: whiteouts
//! (`.wh.NAME`) and opaque directories (`.wh..wh..opq`) remove what earlier layers left, a later
//! entry replaces an earlier one, hard links copy the node they name. The image config gives
//! `Entrypoint`, `Cmd`, `Env`, `WorkingDir` and `User` ([`Config`]); an image for another OS or
//! architecture than linux/amd64 is refused.
//!
//! # Untrusted bytes
//!
//! An image is input from a user and may have been made by anyone. The reader never panics on
//! it, allocates within [`Limits`] (decompressed bytes are read through `Read::take`, so a
//! decompression bomb stops at the limit), and refuses malformed input with an [`ImageError`]
//! that names the file, blob or entry that is wrong. Paths are normalized and may not climb above
//! the root; nothing is ever written to the host.
//!
//! # Dependencies
//!
//! - `tar`: the archive format, of the image archive and of each layer (ustar, GNU long names,
//!   PAX headers).
//! - `flate2` (its pure-Rust backend) and `zstd`: layer compression (`tar+gzip`, `tar+zstd`),
//!   recognised by magic bytes.
//! - `sha2`: the content addresses of an OCI layout, `sha256:<hex>`, verified for every blob.
//! - `serde` and `serde_json`: `index.json`, the manifests, `manifest.json` and the config.
//! - `snafu`: the error types, as in the rest of the workspace.
//!
//! The crate is pure: bytes in, a tree out; no host I/O, no clock.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;

use snafu::Snafu;

mod archive;
mod layer;
mod resolve;
#[cfg(test)]
mod tests;

pub use resolve::DEFAULT_PATH;

/// How much an image may unpack to. Everything the reader holds is bounded by these, whatever
/// the archive claims.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Bytes at most, counted separately for: the files of the image archive held in memory
    /// (those read out of a compressed archive), the decompressed bytes of all layers together
    /// (tar headers included), and the data of all files unpacked from the layers.
    pub max_bytes: u64,
    /// Entries at most, counted separately for: the entries of the image archive, the entries
    /// of all layers together, and the nodes of the tree.
    pub max_entries: usize,
}

impl Default for Limits {
    /// 1 GiB and 200,000 entries.
    fn default() -> Self {
        Limits { max_bytes: 1 << 30, max_entries: 200_000 }
    }
}

/// One node of the flattened file tree: the kernel's own entry of a read-only root
/// ([`deja_kernel::fs::RootNode`]), so that a tree becomes a run's root without a copy.
pub use deja_kernel::fs::RootNode as Node;

/// How the image says it is run: the `config` object of the image config. A field the image
/// leaves out (or sets to `null`) is empty.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Config {
    /// `Entrypoint`: the start of the command line.
    pub entrypoint: Vec<String>,
    /// `Cmd`: the rest of the command line, the default arguments.
    pub cmd: Vec<String>,
    /// `Env`: `NAME=value` strings.
    pub env: Vec<String>,
    /// `WorkingDir`: the directory the command starts in (empty: `/`).
    pub working_dir: String,
    /// `User`: the user (and group) to run as, as the image writes it (`1000`, `app:app`...).
    pub user: String,
}

/// A container image read from an archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    /// The flattened file tree, by normalized absolute path (`/`, `/etc`, `/etc/passwd`: no
    /// trailing slash, no `.` or `..`, no empty component). It always holds `/` as a directory,
    /// and every parent of every entry. A parent is a directory, except where a layer stored an
    /// entry below a path that is a symbolic link in the tree: the entry is kept under its literal
    /// path, the link stays, and [`Image::resolve`] (which follows the link) does not reach it.
    pub tree: BTreeMap<String, Node>,
    /// How the image is run.
    pub config: Config,
    /// What identifies the image, `sha256:<hex>`: the chosen manifest's digest in an OCI layout,
    /// the config file's SHA-256 in a `docker save` archive.
    pub digest: String,
}

/// Why an image archive could not be read. Each names the file, blob or layer it concerns.
#[derive(Debug, Snafu)]
#[snafu(visibility(pub(crate)))]
pub enum ImageError {
    /// The image archive itself is not a readable tar.
    #[snafu(display("the image archive is not a readable tar: {source}"))]
    Archive {
        /// What the tar reader (or the decompressor) said.
        source: std::io::Error,
    },
    /// A file of the image archive ends before the size its header gives.
    #[snafu(display("the image archive is truncated in {name:?}"))]
    ArchiveTruncated {
        /// The file's name in the archive.
        name: String,
    },
    /// The image archive holds more than [`Limits::max_bytes`] of files.
    #[snafu(display("the image archive's files are larger than the limit of {limit} bytes"))]
    ArchiveTooLarge {
        /// The limit.
        limit: u64,
    },
    /// The image archive has more than [`Limits::max_entries`] entries.
    #[snafu(display("the image archive has more than {limit} entries"))]
    ArchiveTooManyEntries {
        /// The limit.
        limit: usize,
    },
    /// Neither `index.json` nor `manifest.json` at the archive's root.
    #[snafu(display("neither an OCI image layout (no index.json) nor a docker save archive (no manifest.json)"))]
    NotAnImage,
    /// A file the image refers to is not in the archive.
    #[snafu(display("{name:?}, named by {named_by}, is not in the image archive"))]
    MissingFile {
        /// The file (or blob) as named.
        name: String,
        /// Where it is named.
        named_by: String,
    },
    /// A JSON file of the image is not what its format says.
    #[snafu(display("{file} is not a valid {what}: {source}"))]
    Json {
        /// The file (or blob).
        file: String,
        /// What it should be (`OCI image index`, `image config`...).
        what: &'static str,
        /// What the JSON parser said.
        source: serde_json::Error,
    },
    /// A digest that is not `sha256:` and 64 lowercase hex digits.
    #[snafu(display("digest {digest:?} in {named_by}: only sha256:<64 lowercase hex digits> is supported"))]
    BadDigest {
        /// The digest as written.
        digest: String,
        /// Where it is written.
        named_by: String,
    },
    /// A blob whose contents do not hash to its digest.
    #[snafu(display("blob {blob} does not match its digest: its contents hash to {actual}"))]
    DigestMismatch {
        /// The blob's digest, as named.
        blob: String,
        /// The digest of its contents.
        actual: String,
    },
    /// A blob whose size is not the one its descriptor gives.
    #[snafu(display("blob {blob} is {actual} bytes; its descriptor says {expected}"))]
    SizeMismatch {
        /// The blob's digest.
        blob: String,
        /// The descriptor's size.
        expected: u64,
        /// The blob's size.
        actual: u64,
    },
    /// An index (or `manifest.json`) that lists no image.
    #[snafu(display("{file} lists no image manifest"))]
    NoManifest {
        /// The file.
        file: String,
    },
    /// Indexes nested deeper than the reader follows.
    #[snafu(display("image indexes are nested more than {depth} deep at {blob}"))]
    NestedTooDeep {
        /// The depth followed.
        depth: usize,
        /// The index that was too deep.
        blob: String,
    },
    /// Several images, none for linux/amd64.
    #[snafu(display("no linux/amd64 image among the {count} the index lists (platforms: {platforms})"))]
    NoPlatform {
        /// How many image manifests were found.
        count: usize,
        /// Their platforms, `os/architecture`, comma-separated.
        platforms: String,
    },
    /// The image config names another platform than linux/amd64.
    #[snafu(display("the image is for {os}/{architecture}; deja runs linux/amd64 images"))]
    Platform {
        /// The config's `os`.
        os: String,
        /// The config's `architecture`.
        architecture: String,
    },
    /// A layer could not be applied.
    #[snafu(display("layer {layer}: {source}"))]
    Layer {
        /// Which layer: its position (from 1) and, in an archive, its file.
        layer: String,
        /// What is wrong with it.
        source: LayerError,
    },
    /// [`Image::command`] has nothing to run.
    #[snafu(display("no command to run: the image has no Entrypoint or Cmd and none was given"))]
    NoCommand,
}

/// What is wrong with one layer. Each names the entry it concerns, if any.
#[derive(Debug, Snafu)]
#[snafu(visibility(pub(crate)))]
pub enum LayerError {
    /// The layer is not a readable tar (or its compression is corrupt or truncated).
    #[snafu(display("not a readable tar: {source}"))]
    Read {
        /// What the tar reader or the decompressor said.
        source: std::io::Error,
    },
    /// An entry's data ends before the size its header gives.
    #[snafu(display("entry {entry:?} is truncated"))]
    Truncated {
        /// The entry's path as written.
        entry: String,
    },
    /// An entry's header cannot be read (its mode, here).
    #[snafu(display("entry {entry:?} has an unreadable header: {source}"))]
    Header {
        /// The entry's path as written.
        entry: String,
        /// What the tar reader said.
        source: std::io::Error,
    },
    /// The layers unpack to more than [`Limits::max_bytes`].
    #[snafu(display("the layers unpack to more than the limit of {limit} bytes"))]
    TooLarge {
        /// The limit.
        limit: u64,
    },
    /// The layers hold more than [`Limits::max_entries`] entries, or the tree would.
    #[snafu(display("the layers have more than {limit} entries"))]
    TooManyEntries {
        /// The limit.
        limit: usize,
    },
    /// A path with `..` that climbs above the root.
    #[snafu(display("entry {entry:?} climbs above the root"))]
    Escapes {
        /// The entry's path (or a hard link's target) as written.
        entry: String,
    },
    /// A path that cannot be a Linux path.
    #[snafu(display("entry {entry:?}: {why}"))]
    BadPath {
        /// The entry's path (or a link's target) as written.
        entry: String,
        /// What is wrong (`contains a NUL byte`, `a name is longer than 255 bytes`...).
        why: &'static str,
    },
    /// Something other than a directory at `/`.
    #[snafu(display("entry {entry:?} puts a non-directory at the root"))]
    RootNotDir {
        /// The entry's path as written.
        entry: String,
    },
    /// A whiteout with no name to remove (`.wh.`, `.wh..`, `.wh...`).
    #[snafu(display("entry {entry:?} is a whiteout of no valid name"))]
    BadWhiteout {
        /// The entry's path as written.
        entry: String,
    },
    /// A symbolic link with an empty target.
    #[snafu(display("symbolic link {entry:?} has an empty target"))]
    EmptySymlink {
        /// The entry's path as written.
        entry: String,
    },
    /// A hard link to a path that is not in the tree.
    #[snafu(display("hard link {entry:?} names {target:?}, which is not in the image"))]
    HardLinkMissing {
        /// The link's path as written.
        entry: String,
        /// Its target as written.
        target: String,
    },
}

/// Reads an image archive (an OCI image layout or a `docker save` archive, see the crate's doc)
/// into its flattened tree, config and digest.
pub fn read(bytes: &[u8], limits: &Limits) -> Result<Image, ImageError> {
    archive::read(bytes, limits)
}

/// Applies layer tarballs (plain, gzip or zstd, told apart by their magic bytes) in order to a
/// tree that holds only `/`, and returns the tree. The limits apply to all layers together.
pub fn from_layers(layers: &[&[u8]], limits: &Limits) -> Result<BTreeMap<String, Node>, ImageError> {
    let n = layers.len();
    let named: Vec<(String, &[u8])> =
        layers.iter().enumerate().map(|(i, bytes)| (format!("{} of {n}", i + 1), *bytes)).collect();
    layer::unpack(&named, limits)
}
