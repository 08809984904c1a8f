//! Looking things up in an image as its programs would: paths through symbolic links, a
//! command through `PATH`, the command line from the config and the user's overrides.

use crate::{Image, ImageError, Node};

/// The most symbolic links one lookup follows (Linux's `MAXSYMLINKS`).
const MAX_LINKS: usize = 40;
/// `PATH` when the image's environment has none (Docker's default).
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

impl Image {
    /// argv the image runs: `entrypoint_override` (if Some) replaces Entrypoint; `args` (if
    /// non-empty) replaces Cmd; result = entrypoint ++ cmd. Error ([`ImageError::NoCommand`]) if
    /// that is empty.
    pub fn command(&self, entrypoint_override: Option<&[String]>, args: &[String]) -> Result<Vec<String>, ImageError> {
        let entrypoint = entrypoint_override.unwrap_or(&self.config.entrypoint);
        let cmd = if args.is_empty() { &self.config.cmd } else { args };
        let argv: Vec<String> = entrypoint.iter().chain(cmd).cloned().collect();
        if argv.is_empty() {
            return Err(ImageError::NoCommand);
        }
        Ok(argv)
    }

    /// Follows symlinks inside the tree (absolute targets from the image root, relative ones
    /// from the link's directory; intermediate components too; at most 40 links; never escapes
    /// the root: `..` at `/` stays at `/`). Returns the canonical path and the node (never a
    /// symbolic link), or None: a component is missing, a file is used as a directory, or there
    /// are too many links (a loop). A relative `path` is taken from `/`; an empty one is None.
    pub fn resolve(&self, path: &str) -> Option<(String, &Node)> {
        if path.is_empty() {
            return None;
        }
        // Components still to walk, the next one last.
        let mut pending: Vec<&str> = path.split('/').rev().collect();
        // The canonical path walked so far ("" is the root), and where each component starts.
        let mut at = String::new();
        let mut starts: Vec<usize> = Vec::new();
        let mut links = 0;
        while let Some(component) = pending.pop() {
            match component {
                "" | "." => continue,
                ".." => {
                    if let Some(start) = starts.pop() {
                        at.truncate(start);
                    }
                    continue;
                }
                name => {
                    starts.push(at.len());
                    at.push('/');
                    at.push_str(name);
                }
            }
            match self.tree.get(&at)? {
                Node::Dir { .. } => {}
                // A file has no children: anything after it (even "/", "." or "..") fails.
                Node::File { .. } => {
                    if !pending.is_empty() {
                        return None;
                    }
                }
                Node::Symlink(target) => {
                    links += 1;
                    if links > MAX_LINKS {
                        return None;
                    }
                    // Back to the link's directory, or to the root for an absolute target.
                    if let Some(start) = starts.pop() {
                        at.truncate(start);
                    }
                    if target.starts_with('/') {
                        at.clear();
                        starts.clear();
                    }
                    pending.extend(target.split('/').rev());
                }
            }
        }
        let canonical = if at.is_empty() { "/".to_string() } else { at };
        let node = self.tree.get(&canonical)?;
        Some((canonical, node))
    }

    /// Finds `argv[0]` as the image's shell would: a name with '/' is resolved (relative to
    /// working_dir); a bare name is searched in the PATH of the image's env (default
    /// "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"), the first that resolves
    /// to a File. Returns the path as found (not canonicalized) or None.
    ///
    /// The path found is absolute: a relative one is joined to the working directory (`/` when
    /// the image sets none), as is an empty or relative `PATH` entry.
    pub fn which(&self, name: &str) -> Option<String> {
        if name.is_empty() {
            return None;
        }
        let is_file = |path: &str| matches!(self.resolve(path), Some((_, Node::File { .. })));
        if name.contains('/') {
            let path = self.absolute(name);
            return is_file(&path).then_some(path);
        }
        let search = self.config.env.iter().find_map(|var| var.strip_prefix("PATH=")).unwrap_or(DEFAULT_PATH);
        search.split(':').find_map(|dir| {
            let candidate = match dir.trim_end_matches('/') {
                "" if dir.is_empty() => self.absolute(name),
                "" => format!("/{name}"),
                dir => self.absolute(&format!("{dir}/{name}")),
            };
            is_file(&candidate).then_some(candidate)
        })
    }

    /// A path made absolute against the working directory.
    fn absolute(&self, path: &str) -> String {
        if path.starts_with('/') {
            return path.to_string();
        }
        let dir = self.config.working_dir.trim_end_matches('/');
        if dir.starts_with('/') {
            format!("{dir}/{path}")
        } else if dir.is_empty() {
            format!("/{path}")
        } else {
            format!("/{dir}/{path}")
        }
    }
}
