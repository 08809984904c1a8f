//! A program in a root: a container image (`deja run --image`, a node's `image =`) or a
//! directory tree (`deja run --root`, read from the host by [`crate::tree`]), as a `deja-image`
//! tree. The tree becomes the run's
//! read-only root ([`deja_kernel::fs::Root`]); the program is a path in it, or a name looked up
//! in the root's `PATH`, and its loader and libraries come from it, not from the host. An image
//! also gives the command, environment and working directory, replaced as `docker run`
//! replaces them.

use std::collections::BTreeMap;
use std::sync::Arc;

use deja_image::Node;
use deja_kernel::fs::Root;

/// The most bytes and entries a root may hold.
pub const LIMITS: deja_image::Limits = deja_image::Limits { max_bytes: 1 << 30, max_entries: 200_000 };

/// A program in a root, ready to become a spec.
#[derive(Debug, Clone)]
pub struct Rooted {
    /// The root.
    pub root: Arc<Root>,
    /// The program's ELF bytes.
    pub image: Vec<u8>,
    /// Where the program is in the root.
    pub exe_path: String,
    /// argv (argv\[0\] as the command gave it).
    pub argv: Vec<String>,
    /// The environment: the image's, then the ones given (replacing the image's of that name).
    pub env: Vec<String>,
    /// The working directory (empty: `/`).
    pub cwd: String,
    /// The image's content address (`sha256:…`; empty for a directory tree).
    pub digest: String,
}

/// Why a program in a root cannot run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpenError {
    /// The image archive is malformed or of another platform.
    Image(String),
    /// The command names no program, or none that is a file in the root.
    Program(String),
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpenError::Image(m) | OpenError::Program(m) => f.write_str(m),
        }
    }
}

/// The program of the image archive `bytes`: `entrypoint` replaces the image's (and drops its
/// command), non-empty `args` replace its command, `env` (`KEY=VALUE`) is added over its
/// environment, `cwd` replaces its working directory.
pub fn open(
    bytes: &[u8],
    entrypoint: Option<&str>,
    args: &[String],
    env: &[String],
    cwd: Option<&str>,
) -> Result<Rooted, OpenError> {
    let img = read(bytes)?;
    let argv = command(&img, entrypoint, args)?;
    in_tree(img, argv, env, cwd)
}

/// The image archive `bytes`, read within [`LIMITS`].
pub fn read(bytes: &[u8]) -> Result<deja_image::Image, OpenError> {
    deja_image::read(bytes, &LIMITS).map_err(|e| OpenError::Image(e.to_string()))
}

/// The command `img` runs: `entrypoint` replaces the image's (and drops its command), non-empty
/// `args` replace its command.
pub fn command(img: &deja_image::Image, entrypoint: Option<&str>, args: &[String]) -> Result<Vec<String>, OpenError> {
    match entrypoint {
        Some(e) => Ok(std::iter::once(e.to_string()).chain(args.iter().cloned()).collect()),
        None => img.command(None, args).map_err(|e| OpenError::Program(format!("{e}; name a program"))),
    }
}

/// The program `argv[0]` in the tree of `img` (an image, or a directory tree with an empty
/// config), with `env` over the image's and `cwd` over its working directory.
pub fn in_tree(
    mut img: deja_image::Image,
    argv: Vec<String>,
    env: &[String],
    cwd: Option<&str>,
) -> Result<Rooted, OpenError> {
    let name = argv.first().cloned().ok_or_else(|| OpenError::Program("no program to run in the root".into()))?;
    let all = env_over(img.config.env.clone(), env);
    let cwd = cwd.map(str::to_string).unwrap_or_else(|| img.config.working_dir.clone());
    img.config.working_dir = cwd.clone();
    img.config.env = all.clone();
    let found =
        img.which(&name).ok_or_else(|| OpenError::Program(format!("{name} is not a file in it (nor in its PATH)")))?;
    let Some((_, Node::File { data, .. })) = img.resolve(&found) else {
        return Err(OpenError::Program(format!("{found} is not a regular file in it")));
    };
    let image = data.to_vec();
    Ok(Rooted { root: Arc::new(to_root(&img.tree)), image, exe_path: found, argv, env: all, cwd, digest: img.digest })
}

/// The environment `base` with each `KEY=VALUE` of `over` added, replacing the variable of that
/// name (as `docker run --env` over an image's `Env`). Applying it twice with the same `over`
/// gives the same list.
pub fn env_over(mut base: Vec<String>, over: &[String]) -> Vec<String> {
    let key = |kv: &str| kv.split_once('=').map_or(kv, |(k, _)| k).to_string();
    for kv in over {
        base.retain(|e| key(e) != key(kv));
        base.push(kv.clone());
    }
    base
}

/// The kernel's root of a tree (the nodes are the kernel's own; the bytes are shared, not
/// copied).
pub fn to_root(tree: &BTreeMap<String, Node>) -> Root {
    Root { nodes: tree.clone() }
}

/// BLAKE3 over a tree, entry by entry in path order: the path, the kind, the mode and the
/// contents (a file's bytes, a link's target).
pub fn tree_digest(tree: &BTreeMap<String, Node>) -> String {
    let mut h = blake3::Hasher::new();
    for (path, node) in tree {
        h.update(&(path.len() as u64).to_le_bytes());
        h.update(path.as_bytes());
        let (tag, mode, body): (u8, u32, &[u8]) = match node {
            Node::File { mode, data } => (b'f', *mode, data),
            Node::Dir { mode } => (b'd', *mode, &[]),
            Node::Symlink(t) => (b'l', 0o777, t.as_bytes()),
        };
        h.update(&[tag]);
        h.update(&mode.to_le_bytes());
        h.update(&(body.len() as u64).to_le_bytes());
        h.update(body);
    }
    h.finalize().to_hex().to_string()
}

/// Where a run's root came from, as its reports and artifacts record it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RootInput {
    /// `image` or `dir`.
    pub kind: String,
    /// The host path it was read from.
    pub path: String,
    /// BLAKE3 of the image file's bytes, or of the tree ([`tree_digest`]).
    pub blake3: String,
    /// The image's own content address (its manifest's `sha256:` digest), for an image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_digest: Option<String>,
}

/// The inputs of a program's run besides the program and its workload, by BLAKE3, as artifacts
/// record them: the declared files (a dynamically linked program's loader and libraries from
/// the host among them) and the root.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct InputRecord {
    /// Guest path → BLAKE3 of the file's bytes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub files: BTreeMap<String, String>,
    /// The root (`--image` or `--root`), if the run had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<RootInput>,
}

impl InputRecord {
    /// The record of `files` under `root`.
    pub fn of(files: &BTreeMap<String, Vec<u8>>, root: Option<&RootInput>) -> InputRecord {
        InputRecord {
            files: files.iter().map(|(p, d)| (p.clone(), blake3::hash(d).to_hex().to_string())).collect(),
            root: root.cloned(),
        }
    }

    /// Whether there is nothing on record (a static program with no files and no root).
    pub fn is_empty(&self) -> bool {
        self.files.is_empty() && self.root.is_none()
    }
}
