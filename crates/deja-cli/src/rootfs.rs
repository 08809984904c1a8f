//! A run inside a root: `deja run --image IMAGE.tar` (an OCI image layout or a `docker save`
//! archive, read by `deja-image`) or `--root DIR` (a directory tree, such as an unpacked image).
//! The tree becomes the run's read-only root ([`deja_kernel::fs::Root`]); the program is a path
//! in it, or a name looked up in the root's `PATH`, and its loader and libraries come from it,
//! not from the host. An image also gives the command, environment and working directory.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use deja_cluster::image;
use deja_image::Node;

use crate::exit::Exit;
use crate::run::Failure;

/// Where a run's root came from, as its reports and artifacts record it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RootInput {
    /// `image` or `dir`.
    pub kind: String,
    /// The host path it was read from.
    pub path: String,
    /// BLAKE3 of the image file's bytes, or of the tree ([`image::tree_digest`]).
    pub blake3: String,
    /// The image's own content address (its manifest's `sha256:` digest), for an image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_digest: Option<String>,
}

/// A program in a root, and where the root came from.
pub struct Rooted {
    /// The program in its root.
    pub rooted: image::Rooted,
    /// Where the root came from.
    pub input: RootInput,
}

/// What a command line asks of a root.
pub struct Ask<'a> {
    /// `--image`.
    pub image: Option<&'a Path>,
    /// `--root`.
    pub dir: Option<&'a Path>,
    /// `--entrypoint`.
    pub entrypoint: Option<&'a str>,
    /// The positional program, if any.
    pub program: Option<&'a Path>,
    /// The arguments after `--`.
    pub args: &'a [String],
    /// `--env`.
    pub env: &'a [String],
    /// `--cwd`.
    pub cwd: Option<&'a str>,
}

fn unreadable(what: &str, path: &Path, e: std::io::Error) -> Failure {
    let code = if e.kind() == std::io::ErrorKind::NotFound { Exit::NotFound } else { Exit::Usage };
    Failure::new(code, format!("cannot read {what} {}: {e}", path.display()))
}

/// The image or tree `ask` names, with the program in it; `None` when it names neither.
pub fn open(ask: &Ask) -> Result<Option<Rooted>, Failure> {
    // The command: an image's entrypoint and command, replaced as `docker run` replaces them;
    // under --root, the program and its arguments.
    let given: Vec<String> =
        ask.program.map(|p| p.display().to_string()).into_iter().chain(ask.args.iter().cloned()).collect();
    let (rooted, input) = match (ask.image, ask.dir) {
        (Some(path), _) => {
            let bytes = std::fs::read(path).map_err(|e| unreadable("the image", path, e))?;
            let r = image::open(&bytes, ask.entrypoint, &given, ask.env, ask.cwd).map_err(|e| {
                let code = if matches!(e, image::OpenError::Program(_)) { Exit::NotFound } else { Exit::NotLoadable };
                Failure::new(code, format!("{}: {e}", path.display()))
            })?;
            let input = RootInput {
                kind: "image".into(),
                path: path.display().to_string(),
                blake3: blake3::hash(&bytes).to_hex().to_string(),
                image_digest: Some(r.digest.clone()),
            };
            (r, input)
        }
        (None, Some(dir)) => {
            let tree = read_dir_tree(dir)?;
            let input = RootInput {
                kind: "dir".into(),
                path: dir.display().to_string(),
                blake3: image::tree_digest(&tree),
                image_digest: None,
            };
            let img = deja_image::Image { tree, config: Default::default(), digest: String::new() };
            let r = image::in_tree(img, given, ask.env, ask.cwd)
                .map_err(|e| Failure::new(Exit::NotFound, format!("--root {}: {e}", dir.display())))?;
            (r, input)
        }
        (None, None) => return Ok(None),
    };
    Ok(Some(Rooted { rooted, input }))
}

/// A host directory as a tree: directories, regular files and symlinks (kept as links, never
/// followed) with their permission bits; devices, sockets, FIFOs and names that are not UTF-8
/// are left out. At most [`LIMITS`].
pub fn read_dir_tree(dir: &Path) -> Result<BTreeMap<String, Node>, Failure> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(dir).map_err(|e| unreadable("the root", dir, e))?;
    if !meta.is_dir() {
        return Err(Failure::new(Exit::Usage, format!("--root {}: not a directory", dir.display())));
    }
    let mut tree = BTreeMap::from([("/".to_string(), Node::Dir { mode: meta.permissions().mode() & 0o7777 })]);
    let mut bytes = 0u64;
    let mut todo = vec![(dir.to_path_buf(), String::new())];
    while let Some((host, guest)) = todo.pop() {
        let entries = std::fs::read_dir(&host).map_err(|e| unreadable("the directory", &host, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| unreadable("the directory", &host, e))?;
            let Some(name) = entry.file_name().to_str().map(str::to_string) else { continue };
            let path = entry.path();
            let at = format!("{guest}/{name}");
            let meta = std::fs::symlink_metadata(&path).map_err(|e| unreadable("the file", &path, e))?;
            let mode = meta.permissions().mode() & 0o7777;
            let node = if meta.is_dir() {
                todo.push((path.clone(), at.clone()));
                Node::Dir { mode }
            } else if meta.is_file() {
                bytes += meta.len();
                if bytes > image::LIMITS.max_bytes {
                    let msg =
                        format!("--root {}: more than {} MiB of files", dir.display(), image::LIMITS.max_bytes >> 20);
                    return Err(Failure::new(Exit::Usage, msg));
                }
                let data = std::fs::read(&path).map_err(|e| unreadable("the file", &path, e))?;
                Node::File { mode, data: Arc::from(data) }
            } else if meta.file_type().is_symlink() {
                let target = std::fs::read_link(&path).map_err(|e| unreadable("the link", &path, e))?;
                match target.to_str() {
                    Some(t) if !t.is_empty() => Node::Symlink(t.to_string()),
                    _ => continue,
                }
            } else {
                continue; // a device, socket or FIFO of the host
            };
            tree.insert(at, node);
            if tree.len() > image::LIMITS.max_entries {
                let msg = format!("--root {}: more than {} entries", dir.display(), image::LIMITS.max_entries);
                return Err(Failure::new(Exit::Usage, msg));
            }
        }
    }
    Ok(tree)
}
