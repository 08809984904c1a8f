//! Paths as the file system names them: normalization against a directory, the deterministic
//! inode number of a path, and the path of the self-executable link.

use crate::prelude::*;

use crate::abi::errno::{ENAMETOOLONG, ENOENT};

/// Path of the self-executable link.
pub const PROC_EXE: &str = "/proc/self/exe";

/// A deterministic inode number for `path`.
pub fn ino_of(path: &str) -> u64 {
    if path == "/" {
        return 2;
    }
    let h = blake3::hash(path.as_bytes());
    let mut b = [0u8; 8];
    b.copy_from_slice(&h.as_bytes()[..8]);
    (u64::from_le_bytes(b) & 0xff_ffff) + 16
}

/// Normalizes `path` against the directory `base` (an absolute normalized path): collapses
/// `//`, `.` and `..`. Returns the absolute path and whether it had a trailing slash.
pub fn normalize(base: &str, path: &[u8]) -> Result<(String, bool), i32> {
    if path.is_empty() {
        return Err(ENOENT);
    }
    if path.len() >= 4096 {
        return Err(ENAMETOOLONG);
    }
    let path = core::str::from_utf8(path).map_err(|_| ENOENT)?;
    let mut parts: Vec<&str> = Vec::new();
    if !path.starts_with('/') {
        parts.extend(base.split('/').filter(|c| !c.is_empty()));
    }
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            c => {
                if c.len() > 255 {
                    return Err(ENAMETOOLONG);
                }
                parts.push(c)
            }
        }
    }
    let trailing = path.ends_with('/') || path.ends_with("/.") || path.ends_with("/..");
    Ok((format!("/{}", parts.join("/")), trailing))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_paths() {
        assert_eq!(normalize("/", b"a/b").unwrap(), ("/a/b".into(), false));
        assert_eq!(normalize("/x/y", b"../z/").unwrap(), ("/x/z".into(), true));
        assert_eq!(normalize("/", b"//a/./b/../../..").unwrap(), ("/".into(), true));
        assert_eq!(normalize("/", b""), Err(ENOENT));
        assert_eq!(normalize("/", &[0xff]), Err(ENOENT));
    }
}
