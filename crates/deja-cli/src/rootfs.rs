//! A run inside a root: `deja run --image IMAGE.tar` (an OCI image layout or a `docker save`
//! archive, read by `deja-image`) or `--root DIR` (a directory tree, such as an unpacked image).
//! The tree becomes the run's read-only root ([`deja_kernel::fs::Root`]); the program is a path
//! in it, or a name looked up in the root's `PATH`, and its loader and libraries come from it,
//! not from the host. An image also gives the command, environment and working directory.
//! Reading them is `deja-inputs`'s ([`deja_inputs::image`], [`deja_inputs::tree`]); this module
//! turns the flags into what it reads and its errors into messages and exit codes.

use std::path::Path;

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

/// The directory tree at `dir` as an image with an empty config, and its record
/// ([`deja_inputs::tree::read_root`]).
pub fn read_dir(dir: &Path) -> Result<(deja_image::Image, RootInput), Failure> {
    deja_inputs::tree::read_root(dir).map_err(|e| {
        use deja_inputs::tree::TreeError;
        match &e {
            TreeError::Read { .. } => {
                Failure::new(if e.not_found() { Exit::NotFound } else { Exit::Usage }, e.to_string())
            }
            TreeError::NotADirectory { .. } | TreeError::TooLarge { .. } | TreeError::TooManyEntries { .. } => {
                Failure::new(Exit::Usage, format!("--root {e}"))
            }
        }
    })
}
