//! [`Disk`]: a node's file system as a plain, serializable tree (the durable state a program
//! starts from, a crash image, or the volatile view for `--fs-export`).
//!
//! A disk is a map from absolute normalized paths to entries. `/` is always present and a
//! directory; every other path's parent is present and a directory; names are 1..=255 bytes
//! and never `.` or `..`. Only the program's own files are in it: the declared input files,
//! the executable, `/proc` and `/dev` are not (they come from the [`ProgramSpec`] again on
//! every start). Hard links are not kept: each link is a separate file with the same contents.
//! Modes are the permission bits (`0o7777` at most).
//!
//! In JSON, file contents are lowercase hex strings; in binary encodings, byte strings.
//!
//! [`ProgramSpec`]: crate::ProgramSpec

use crate::prelude::*;
use alloc::collections::BTreeMap;

use snafu::Snafu;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Longest symlink target (`PATH_MAX - 1`).
pub const MAX_SYMLINK_TARGET: usize = 4095;

/// One entry of a [`Disk`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DiskEntry {
    /// A directory (its entries are the paths below it).
    Dir {
        /// Permission bits.
        mode: u32,
    },
    /// A regular file.
    File {
        /// Permission bits.
        mode: u32,
        /// Contents.
        #[serde(with = "hex_bytes")]
        data: Vec<u8>,
    },
    /// A symbolic link.
    Symlink {
        /// Where it points (not resolved, not checked).
        target: String,
    },
}

/// A file system tree: absolute path → entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Disk {
    /// Every path, sorted; `/` included.
    pub entries: BTreeMap<String, DiskEntry>,
}

impl Default for Disk {
    /// The empty disk: just `/`.
    fn default() -> Self {
        let mut entries = BTreeMap::new();
        entries.insert("/".to_string(), DiskEntry::Dir { mode: 0o755 });
        Disk { entries }
    }
}

/// Why a [`Disk`] is not a valid tree.
#[derive(Debug, Clone, PartialEq, Eq, Snafu)]
#[snafu(display("invalid disk: {problem}"))]
pub struct DiskError {
    /// What is wrong, naming the path.
    pub problem: String,
}

/// The parent of a normalized absolute path other than `/`.
pub(crate) fn parent_of(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &path[..i],
    }
}

impl Disk {
    /// Each path with the first 16 hex digits of a BLAKE3 of its kind, mode and contents (or
    /// target), in path order: to name the file two runs disagree on.
    pub fn entry_hashes(&self) -> Vec<(String, String)> {
        self.entries
            .iter()
            .map(|(p, e)| {
                let h = match e {
                    DiskEntry::Dir { mode } => blake3::hash(format!("d {mode:o}").as_bytes()),
                    DiskEntry::File { mode, data } => {
                        let mut h = blake3::Hasher::new();
                        h.update(format!("f {mode:o} ").as_bytes());
                        h.update(data);
                        h.finalize()
                    }
                    DiskEntry::Symlink { target } => blake3::hash(format!("l {target}").as_bytes()),
                };
                (p.clone(), h.to_hex()[..16].to_string())
            })
            .collect()
    }

    /// BLAKE3 (hex) over the canonical encoding: for each entry in path order, a tag byte
    /// (`d`, `f`, `l`), the path's length (u64 LE) and bytes, then the mode (u32 LE) and the
    /// contents' length and bytes (files), the mode (directories) or the target's length and
    /// bytes (symlinks).
    pub fn digest(&self) -> String {
        let mut h = blake3::Hasher::new();
        let bytes = |h: &mut blake3::Hasher, b: &[u8]| {
            h.update(&(b.len() as u64).to_le_bytes());
            h.update(b);
        };
        for (p, e) in &self.entries {
            match e {
                DiskEntry::Dir { mode } => {
                    h.update(b"d");
                    bytes(&mut h, p.as_bytes());
                    h.update(&mode.to_le_bytes());
                }
                DiskEntry::File { mode, data } => {
                    h.update(b"f");
                    bytes(&mut h, p.as_bytes());
                    h.update(&mode.to_le_bytes());
                    bytes(&mut h, data);
                }
                DiskEntry::Symlink { target } => {
                    h.update(b"l");
                    bytes(&mut h, p.as_bytes());
                    bytes(&mut h, target.as_bytes());
                }
            }
        }
        h.finalize().to_hex().to_string()
    }

    /// Total bytes of file contents.
    pub fn data_bytes(&self) -> u64 {
        self.entries
            .values()
            .map(|e| match e {
                DiskEntry::File { data, .. } => data.len() as u64,
                _ => 0,
            })
            .sum()
    }

    /// Checks that the map is a tree (see the module documentation).
    pub fn validate(&self) -> Result<(), DiskError> {
        let err = |problem: String| DiskSnafu { problem }.fail();
        match self.entries.get("/") {
            Some(DiskEntry::Dir { .. }) => {}
            _ => return err("`/` is missing or not a directory".into()),
        }
        for (p, e) in &self.entries {
            if !p.starts_with('/') {
                return err(format!("path {p:?} is not absolute"));
            }
            if p != "/" {
                if p.ends_with('/') {
                    return err(format!("path {p:?} ends with `/`"));
                }
                for c in p[1..].split('/') {
                    if c.is_empty() || c == "." || c == ".." || c.len() > 255 || c.contains('\0') {
                        return err(format!("path {p:?} has an invalid component {c:?}"));
                    }
                }
                match self.entries.get(parent_of(p)) {
                    Some(DiskEntry::Dir { .. }) => {}
                    _ => return err(format!("the parent of {p:?} is missing or not a directory")),
                }
            }
            match e {
                DiskEntry::Dir { mode } | DiskEntry::File { mode, .. } if *mode & !0o7777 != 0 => {
                    return err(format!("{p:?} has mode {mode:#o}"))
                }
                DiskEntry::Symlink { target }
                    if target.is_empty() || target.len() > MAX_SYMLINK_TARGET || target.contains('\0') =>
                {
                    return err(format!("symlink {p:?} has an invalid target"))
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Adds a regular file (mode `0o644`) at `path` (absolute; `.`/`..`/`//` are normalized),
    /// creating missing directories above it (mode `0o755`) and replacing a file or symlink
    /// already there. Fails on a relative path, an invalid name, a directory at `path` or a
    /// non-directory above it.
    pub fn insert_file(&mut self, path: &str, data: Vec<u8>) -> Result<(), DiskError> {
        if !path.starts_with('/') {
            return DiskSnafu { problem: format!("{path:?} is not an absolute path") }.fail();
        }
        let (norm, _) = crate::fs::normalize("/", path.as_bytes())
            .map_err(|_| DiskSnafu { problem: format!("{path:?} is not a valid path") }.build())?;
        if norm == "/" {
            return DiskSnafu { problem: "cannot replace `/` by a file" }.fail();
        }
        if matches!(self.entries.get(&norm), Some(DiskEntry::Dir { .. })) {
            return DiskSnafu { problem: format!("{norm:?} is a directory") }.fail();
        }
        self.entries.entry("/".into()).or_insert(DiskEntry::Dir { mode: 0o755 });
        let mut cur = String::new();
        let comps: Vec<&str> = norm[1..].split('/').collect();
        for c in &comps[..comps.len() - 1] {
            cur.push('/');
            cur.push_str(c);
            match self.entries.get(&cur) {
                None => {
                    self.entries.insert(cur.clone(), DiskEntry::Dir { mode: 0o755 });
                }
                Some(DiskEntry::Dir { .. }) => {}
                Some(_) => return DiskSnafu { problem: format!("{cur:?} above {norm:?} is not a directory") }.fail(),
            }
        }
        self.entries.insert(norm, DiskEntry::File { mode: 0o644, data });
        Ok(())
    }

    /// The entry at `path`.
    pub fn get(&self, path: &str) -> Option<&DiskEntry> {
        self.entries.get(path)
    }

    /// The contents of the file at `path`.
    pub fn file(&self, path: &str) -> Option<&[u8]> {
        match self.entries.get(path) {
            Some(DiskEntry::File { data, .. }) => Some(data),
            _ => None,
        }
    }
}

/// Bytes as a hex string for human-readable formats, a byte string otherwise.
mod hex_bytes {
    use super::*;

    pub(super) fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            let mut out = String::with_capacity(v.len() * 2);
            for b in v {
                out.push(char::from(b"0123456789abcdef"[usize::from(b >> 4)]));
                out.push(char::from(b"0123456789abcdef"[usize::from(b & 15)]));
            }
            s.serialize_str(&out)
        } else {
            s.serialize_bytes(v)
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        if d.is_human_readable() {
            let s = String::deserialize(d)?;
            let digit = |c: u8| match c {
                b'0'..=b'9' => Ok(c - b'0'),
                b'a'..=b'f' => Ok(c - b'a' + 10),
                b'A'..=b'F' => Ok(c - b'A' + 10),
                _ => Err(serde::de::Error::custom("invalid hex digit")),
            };
            if s.len() % 2 != 0 {
                return Err(serde::de::Error::custom("odd number of hex digits"));
            }
            s.as_bytes().chunks(2).map(|c| Ok(digit(c[0])? << 4 | digit(c[1])?)).collect()
        } else {
            crate::persist::vec_bytes::deserialize(d)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validate_digest_and_json() {
        let mut d = Disk::default();
        d.entries.insert("/a".into(), DiskEntry::Dir { mode: 0o700 });
        d.entries.insert("/a/f".into(), DiskEntry::File { mode: 0o644, data: b"\x00hi\xff".to_vec() });
        d.entries.insert("/l".into(), DiskEntry::Symlink { target: "a/f".into() });
        d.validate().unwrap();
        let json = serde_json::to_string(&d).unwrap();
        assert!(json.contains("\"006869ff\""), "{json}");
        let back: Disk = serde_json::from_str(&json).unwrap();
        assert_eq!(back, d);
        let bin: Disk = postcard::from_bytes(&postcard::to_stdvec(&d).unwrap()).unwrap();
        assert_eq!(bin, d);
        assert_eq!(bin.digest(), d.digest());
        assert_eq!(d.digest().len(), 64);
        let mut e = d.clone();
        e.entries.insert("/a/f".into(), DiskEntry::File { mode: 0o644, data: b"\x00hi".to_vec() });
        assert_ne!(e.digest(), d.digest());
        for (bad_path, entry) in [
            ("/x/y", DiskEntry::Dir { mode: 0o755 }),
            ("/a/f/g", DiskEntry::Dir { mode: 0o755 }),
            ("rel", DiskEntry::Dir { mode: 0o755 }),
            ("/a/", DiskEntry::Dir { mode: 0o755 }),
            ("/a/..", DiskEntry::Dir { mode: 0o755 }),
            ("/m", DiskEntry::Dir { mode: 0o17777 }),
            ("/s", DiskEntry::Symlink { target: String::new() }),
        ] {
            let mut b = d.clone();
            b.entries.insert(bad_path.into(), entry);
            assert!(b.validate().is_err(), "{bad_path}");
        }
        let mut b = d.clone();
        b.entries.remove("/");
        assert!(b.validate().is_err());
        let mut i = Disk::default();
        i.insert_file("/x/./y//z", b"1".to_vec()).unwrap();
        i.validate().unwrap();
        assert_eq!(i.file("/x/y/z"), Some(&b"1"[..]));
        assert!(i.insert_file("/x/y", vec![]).is_err(), "a directory");
        assert!(i.insert_file("/x/y/z/w", vec![]).is_err(), "below a file");
        assert!(i.insert_file("rel", vec![]).is_err());
        assert!(serde_json::from_str::<Disk>(r#"{"entries":{"/":{"file":{"mode":0,"data":"0"}}}}"#).is_err());
    }
}
