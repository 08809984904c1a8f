//! A run inside a root: `deja run --image IMAGE.tar` (an OCI image layout or a `docker save`
//! archive, read by `deja-image`) or `--root DIR` (a directory tree, such as an unpacked image).
//! The tree becomes the run's read-only root ([`deja_kernel::fs::Root`]); the program is a path
//! in it, or a name looked up in the root's `PATH`, and its loader and libraries come from it,
//! not from the host. An image also gives the command, environment and working directory.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use deja_image::Node;
use deja_inputs::image;

use crate::exit::Exit;
use crate::run_args::Failure;

pub use deja_inputs::image::RootInput;

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
    let (img, input, argv) = match (ask.image, ask.dir) {
        (Some(path), _) => {
            let (img, input) = read_image(path)?;
            let argv = image::command(&img, ask.entrypoint, &given).map_err(|e| in_root(path, e))?;
            (img, input, argv)
        }
        (None, Some(dir)) => {
            let (img, input) = read_dir(dir)?;
            (img, input, given)
        }
        (None, None) => return Ok(None),
    };
    let at = Path::new(&input.path).to_path_buf();
    let rooted = image::in_tree(img, argv, ask.env, ask.cwd).map_err(|e| in_root(&at, e))?;
    Ok(Some(Rooted { rooted, input }))
}

/// The root a bug file records, read again with the bug's command: from `given` (`--program`),
/// else from where it was read, else (an image) from `kept` (a campaign's `inputs/`) by its
/// BLAKE3. A root whose BLAKE3 differs everywhere is refused, naming both hashes.
pub fn reopen(
    record: &RootInput,
    given: Option<&Path>,
    kept: &Path,
    argv: &[String],
    env: &[String],
    cwd: &str,
) -> Result<Rooted, Failure> {
    let first = given.map_or_else(|| Path::new(&record.path).to_path_buf(), Path::to_path_buf);
    let mut places = vec![(first, false)];
    if record.kind == "image" {
        places.push((kept.join(&record.blake3), true));
    }
    let mut found = None;
    for (place, is_kept) in places {
        let read = if record.kind == "image" { read_image(&place) } else { read_dir(&place) };
        match read {
            Ok((img, mut input)) if input.blake3 == record.blake3 => {
                if is_kept {
                    eprintln!("deja: note: replaying with the image kept as {}", place.display());
                    input.path = record.path.clone();
                }
                let rooted = image::in_tree(img, argv.to_vec(), env, Some(cwd)).map_err(|e| in_root(&place, e))?;
                return Ok(Rooted { rooted, input });
            }
            Ok((_, input)) => {
                found.get_or_insert(input.blake3);
            }
            Err(_) => {}
        }
    }
    let e = deja_explore::ExploreError::NotTheRoot {
        path: given.map_or_else(|| record.path.clone(), |p| p.display().to_string()),
        expected: record.blake3.clone(),
        found,
    };
    Err(Failure::new(Exit::Incomplete, e.to_string()))
}

/// A failure to run the command in the root at `path`.
fn in_root(path: &Path, e: image::OpenError) -> Failure {
    let code = if matches!(e, image::OpenError::Program(_)) { Exit::NotFound } else { Exit::NotLoadable };
    Failure::new(code, format!("{}: {e}", path.display()))
}

/// The image archive at `path`, and its record.
pub fn read_image(path: &Path) -> Result<(deja_image::Image, RootInput), Failure> {
    let bytes = std::fs::read(path).map_err(|e| unreadable("the image", path, e))?;
    let img = image::read(&bytes).map_err(|e| in_root(path, e))?;
    let input = RootInput {
        kind: "image".into(),
        path: path.display().to_string(),
        blake3: blake3::hash(&bytes).to_hex().to_string(),
        image_digest: Some(img.digest.clone()),
    };
    Ok((img, input))
}

/// The directory tree at `dir` as an image with an empty config, and its record.
pub fn read_dir(dir: &Path) -> Result<(deja_image::Image, RootInput), Failure> {
    let tree = read_dir_tree(dir)?;
    let input = RootInput {
        kind: "dir".into(),
        path: dir.display().to_string(),
        blake3: image::tree_digest(&tree),
        image_digest: None,
    };
    Ok((deja_image::Image { tree, config: Default::default(), digest: String::new() }, input))
}

/// A host directory as a tree: directories, regular files and symlinks (kept as links, never
/// followed) with their permission bits; devices, sockets, FIFOs and names that are not UTF-8
/// are left out. At most [`image::LIMITS`].
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
