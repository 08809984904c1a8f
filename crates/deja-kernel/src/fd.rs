//! The guest's file system view and file descriptor table.
//!
//! The file system is read-only and tiny: the declared input files, the program's own
//! executable at its `exe_path`, `/proc/self/maps` (generated from the VMA list when opened),
//! `/proc/self/exe`, `/dev/null`, `/dev/random` and `/dev/urandom` (the seeded stream), and
//! every directory above them. fds 0, 1 and 2 are pipes: 0 reads [`ProgramSpec::stdin`], 1
//! and 2 collect output.
//!
//! [`ProgramSpec::stdin`]: crate::ProgramSpec::stdin

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::errno::*;
use crate::persist::{arc_bytes, arc_bytes_map, ensure, RestoreError};

/// `S_IFIFO`.
pub const S_IFIFO: u32 = 0o010000;
/// `S_IFCHR`.
pub const S_IFCHR: u32 = 0o020000;
/// `S_IFDIR`.
pub const S_IFDIR: u32 = 0o040000;
/// `S_IFREG`.
pub const S_IFREG: u32 = 0o100000;
/// `S_IFLNK`.
pub const S_IFLNK: u32 = 0o120000;

/// `O_WRONLY`.
pub const O_WRONLY: u32 = 1;
/// `O_RDWR`.
pub const O_RDWR: u32 = 2;
/// `O_ACCMODE`.
pub const O_ACCMODE: u32 = 3;
/// `O_CREAT`.
pub const O_CREAT: u32 = 0o100;
/// `O_EXCL`.
pub const O_EXCL: u32 = 0o200;
/// `O_TRUNC`.
pub const O_TRUNC: u32 = 0o1000;
/// `O_APPEND`.
pub const O_APPEND: u32 = 0o2000;
/// `O_NONBLOCK`.
pub const O_NONBLOCK: u32 = 0o4000;
/// `O_LARGEFILE` (always set by 64-bit `open`).
pub const O_LARGEFILE: u32 = 0o100000;
/// `O_DIRECTORY`.
pub const O_DIRECTORY: u32 = 0o200000;
/// `O_NOFOLLOW`.
pub const O_NOFOLLOW: u32 = 0o400000;
/// `O_CLOEXEC`.
pub const O_CLOEXEC: u32 = 0o2000000;
/// `O_PATH`.
pub const O_PATH: u32 = 0o10000000;
/// `O_TMPFILE` (includes `O_DIRECTORY`).
pub const O_TMPFILE: u32 = 0o20200000;

/// Fixed timestamp of every file (the realtime epoch of the virtual clock).
pub const FILE_TIME_S: u64 = crate::clock::REALTIME_EPOCH_S;

/// Path of the generated memory map.
pub const PROC_MAPS: &str = "/proc/self/maps";
/// Path of the self-executable link.
pub const PROC_EXE: &str = "/proc/self/exe";

/// What a path names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    /// A regular file with these contents.
    File(Arc<[u8]>),
    /// `/proc/self/maps` (contents generated at open).
    ProcMaps,
    /// A directory.
    Dir,
    /// The `/proc/self/exe` symlink.
    ExeLink,
    /// `/dev/null`.
    DevNull,
    /// `/dev/urandom` or `/dev/random` (device minor number).
    Random(u32),
}

/// Status facts of a file, for `stat`/`statx`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stat {
    /// Device.
    pub dev: u64,
    /// Inode.
    pub ino: u64,
    /// Mode (type and permissions).
    pub mode: u32,
    /// Link count.
    pub nlink: u64,
    /// Size in bytes.
    pub size: u64,
    /// Device number of a character device.
    pub rdev: u64,
}

/// The read-only file system.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Vfs {
    #[serde(with = "arc_bytes_map")]
    files: BTreeMap<String, Arc<[u8]>>,
    dirs: BTreeSet<String>,
    exe_path: String,
}

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

fn parent(path: &str) -> Option<&str> {
    if path == "/" {
        return None;
    }
    match path.rfind('/') {
        Some(0) => Some("/"),
        Some(i) => Some(&path[..i]),
        None => None,
    }
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
    let path = std::str::from_utf8(path).map_err(|_| ENOENT)?;
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

impl Vfs {
    /// The file system of a run: `files` plus the executable at `exe_path`.
    pub fn new(files: &BTreeMap<String, Vec<u8>>, exe_path: &str, image: &[u8]) -> Self {
        let mut v = Vfs { exe_path: exe_path.to_string(), ..Default::default() };
        for (p, data) in files {
            if let Ok((norm, _)) = normalize("/", p.as_bytes()) {
                v.files.insert(norm, Arc::from(data.as_slice()));
            }
        }
        if let Ok((norm, _)) = normalize("/", exe_path.as_bytes()) {
            v.files.entry(norm.clone()).or_insert_with(|| Arc::from(image));
            v.exe_path = norm;
        }
        let specials = ["/proc/self/maps", "/proc/self/exe", "/dev/null", "/dev/urandom"];
        let all: Vec<String> = v.files.keys().cloned().chain(specials.iter().map(|s| s.to_string())).collect();
        v.dirs.insert("/".to_string());
        for p in all {
            let mut cur = p.as_str();
            while let Some(par) = parent(cur) {
                v.dirs.insert(par.to_string());
                cur = par;
            }
        }
        v
    }

    /// Checks the invariants of a restored file system: normalized absolute paths, every
    /// directory above a file listed. (The executable path is free: it is whatever the spec
    /// named, normalized when it could be.)
    pub fn validate(&self) -> Result<(), RestoreError> {
        let normal = |p: &str| normalize("/", p.as_bytes()).is_ok_and(|(n, _)| n == p);
        for p in self.files.keys().chain(&self.dirs) {
            ensure(normal(p), || format!("path {p:?} is not normalized"))?;
            let mut cur = p.as_str();
            while let Some(par) = parent(cur) {
                ensure(self.dirs.contains(par), || format!("directory {par:?} of {p:?} is missing"))?;
                cur = par;
            }
        }
        ensure(self.dirs.contains("/"), || "the root directory is missing".into())
    }

    /// The contents of the declared file `path`, if they are equal to `data` (to share them).
    pub fn same_file(&self, path: &str, data: &Arc<[u8]>) -> Option<Arc<[u8]>> {
        self.files.get(path).filter(|d| d[..] == data[..]).cloned()
    }

    /// The normalized executable path.
    pub fn exe_path(&self) -> &str {
        &self.exe_path
    }

    /// What `path` (absolute, normalized) names. `/proc/self/exe` resolves to the link unless
    /// `follow` is set.
    pub fn lookup(&self, path: &str, follow: bool) -> Option<Node> {
        match path {
            PROC_MAPS => return Some(Node::ProcMaps),
            // (An executable at `/proc/self/exe` itself would make this recurse forever.)
            PROC_EXE if follow && self.exe_path != PROC_EXE => return self.lookup(&self.exe_path.clone(), true),
            PROC_EXE => return Some(Node::ExeLink),
            "/dev/null" => return Some(Node::DevNull),
            "/dev/urandom" => return Some(Node::Random(9)),
            "/dev/random" => return Some(Node::Random(8)),
            _ => {}
        }
        if let Some(d) = self.files.get(path) {
            return Some(Node::File(d.clone()));
        }
        self.dirs.contains(path).then_some(Node::Dir)
    }

    /// The status of `path` as named by `node`.
    pub fn stat(&self, path: &str, node: &Node) -> Stat {
        let (mode, size, rdev) = match node {
            Node::File(d) => {
                let perm = if path == self.exe_path { 0o755 } else { 0o644 };
                (S_IFREG | perm, d.len() as u64, 0)
            }
            Node::ProcMaps => (S_IFREG | 0o444, 0, 0),
            Node::Dir => (S_IFDIR | 0o755, 4096, 0),
            Node::ExeLink => (S_IFLNK | 0o777, 0, 0),
            Node::DevNull => (S_IFCHR | 0o666, 0, (1 << 8) | 3),
            Node::Random(minor) => (S_IFCHR | 0o666, 0, (1 << 8) | u64::from(*minor)),
        };
        let dev = match node {
            Node::ProcMaps | Node::ExeLink => 0x16,
            Node::DevNull | Node::Random(_) => 0x5,
            _ => 0x801,
        };
        let nlink = if matches!(node, Node::Dir) { 2 } else { 1 };
        Stat { dev, ino: ino_of(path), mode, nlink, size, rdev }
    }

    /// Entries of directory `dir`: `(name, d_type, ino)`, sorted, after `.` and `..`.
    pub fn list(&self, dir: &str) -> Vec<(String, u8, u64)> {
        let mut out =
            vec![(".".to_string(), 4u8, ino_of(dir)), ("..".to_string(), 4u8, ino_of(parent(dir).unwrap_or("/")))];
        let prefix = if dir == "/" { "/".to_string() } else { format!("{dir}/") };
        let mut names: BTreeMap<String, u8> = BTreeMap::new();
        let specials = [(PROC_MAPS, 8u8), (PROC_EXE, 10u8), ("/dev/null", 2), ("/dev/urandom", 2)];
        let all = self
            .files
            .keys()
            .map(|k| (k.as_str(), 8u8))
            .chain(self.dirs.iter().map(|d| (d.as_str(), 4u8)))
            .chain(specials);
        for (p, t) in all {
            if let Some(rest) = p.strip_prefix(&prefix) {
                if !rest.is_empty() && !rest.contains('/') {
                    names.insert(rest.to_string(), t);
                }
            }
        }
        for (n, t) in names {
            let ino = ino_of(&format!("{prefix}{n}"));
            out.push((n, t, ino));
        }
        out
    }
}

/// What an open file description refers to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum FileKind {
    /// The read end of the stdin pipe.
    Stdin(#[serde(with = "arc_bytes")] Arc<[u8]>),
    /// The stdout pipe.
    Stdout,
    /// The stderr pipe.
    Stderr,
    /// A regular (read-only) file.
    Regular {
        /// Path it was opened by.
        path: String,
        /// Contents.
        #[serde(with = "arc_bytes")]
        data: Arc<[u8]>,
        /// Status.
        stat: Stat,
    },
    /// A directory.
    Dir {
        /// Path.
        path: String,
    },
    /// `/dev/null`.
    DevNull,
    /// `/dev/urandom`.
    Random(u32),
}

/// An open file description (shared by `dup`ed fds).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenFile {
    /// The file.
    pub kind: FileKind,
    /// File offset (or directory position).
    pub offset: u64,
    /// Access mode and status flags (`O_RDONLY`/`O_WRONLY`, `O_APPEND`, `O_NONBLOCK`, ...).
    pub flags: u32,
    refs: u32,
}

impl OpenFile {
    /// A description with `flags`.
    pub fn new(kind: FileKind, flags: u32) -> Self {
        OpenFile { kind, offset: 0, flags, refs: 0 }
    }

    /// True if opened for reading.
    pub fn readable(&self) -> bool {
        self.flags & O_ACCMODE != O_WRONLY && self.flags & O_PATH == 0
    }

    /// True if opened for writing.
    pub fn writable(&self) -> bool {
        matches!(self.flags & O_ACCMODE, O_WRONLY | O_RDWR) && self.flags & O_PATH == 0
    }
}

/// One fd.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FdEntry {
    /// Index of the open file description.
    pub desc: u64,
    /// `FD_CLOEXEC`.
    pub cloexec: bool,
}

/// The fd table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FdTable {
    fds: BTreeMap<i32, FdEntry>,
    descs: BTreeMap<u64, OpenFile>,
    next_desc: u64,
}

impl FdTable {
    /// The table of a new process: 0 stdin, 1 stdout, 2 stderr.
    pub fn new(stdin: &[u8]) -> Self {
        let mut t = FdTable::default();
        let _ = t.install(OpenFile::new(FileKind::Stdin(Arc::from(stdin)), 0), 0, 3, false);
        let _ = t.install(OpenFile::new(FileKind::Stdout, O_WRONLY), 1, 3, false);
        let _ = t.install(OpenFile::new(FileKind::Stderr, O_WRONLY), 2, 3, false);
        t
    }

    fn lowest_free(&self, min: i32, limit: u64) -> Result<i32, i32> {
        let mut fd = min;
        for (k, _) in self.fds.range(min..) {
            if *k != fd {
                break;
            }
            fd += 1;
        }
        if (fd as u64) < limit {
            Ok(fd)
        } else {
            Err(EMFILE)
        }
    }

    /// Installs a new description at the lowest free fd ≥ `min`.
    pub fn install(&mut self, file: OpenFile, min: i32, limit: u64, cloexec: bool) -> Result<i32, i32> {
        let fd = self.lowest_free(min, limit)?;
        let desc = self.next_desc;
        self.next_desc += 1;
        self.descs.insert(desc, OpenFile { refs: 1, ..file });
        self.fds.insert(fd, FdEntry { desc, cloexec });
        Ok(fd)
    }

    /// Checks the invariants of a restored table: fds are non-negative and name existing
    /// descriptions, each description's reference count is its number of fds, and the next
    /// description index is unused.
    pub fn validate(&self) -> Result<(), RestoreError> {
        let mut refs: BTreeMap<u64, u32> = BTreeMap::new();
        for (&fd, e) in &self.fds {
            ensure(fd >= 0, || format!("fd {fd} is negative"))?;
            ensure(self.descs.contains_key(&e.desc), || format!("fd {fd} names a missing description {}", e.desc))?;
            *refs.entry(e.desc).or_default() += 1;
        }
        for (&d, f) in &self.descs {
            let n = refs.get(&d).copied().unwrap_or(0);
            ensure(f.refs == n, || format!("description {d} counts {} references but has {n}", f.refs))?;
            ensure(d < self.next_desc, || format!("description {d} is not below the next index {}", self.next_desc))?;
        }
        Ok(())
    }

    /// Replaces the contents of every open regular file by the equal contents of the declared
    /// file in `vfs` (so a restored state shares them instead of holding copies).
    pub fn share_file_data(&mut self, vfs: &Vfs) {
        for f in self.descs.values_mut() {
            if let FileKind::Regular { path, data, .. } = &mut f.kind {
                if let Some(d) = vfs.same_file(path, data) {
                    *data = d;
                }
            }
        }
    }

    /// The entry of `fd`.
    pub fn entry(&self, fd: i32) -> Result<FdEntry, i32> {
        self.fds.get(&fd).copied().ok_or(EBADF)
    }

    /// The description behind `fd`.
    pub fn get(&self, fd: i32) -> Result<&OpenFile, i32> {
        let e = self.entry(fd)?;
        self.descs.get(&e.desc).ok_or(EBADF)
    }

    /// The description behind `fd`, mutably.
    pub fn get_mut(&mut self, fd: i32) -> Result<&mut OpenFile, i32> {
        let e = self.entry(fd)?;
        self.descs.get_mut(&e.desc).ok_or(EBADF)
    }

    /// Sets `FD_CLOEXEC`.
    pub fn set_cloexec(&mut self, fd: i32, on: bool) -> Result<(), i32> {
        self.fds.get_mut(&fd).ok_or(EBADF)?.cloexec = on;
        Ok(())
    }

    /// Closes `fd`.
    pub fn close(&mut self, fd: i32) -> Result<(), i32> {
        let e = self.fds.remove(&fd).ok_or(EBADF)?;
        if let Some(d) = self.descs.get_mut(&e.desc) {
            d.refs -= 1;
            if d.refs == 0 {
                self.descs.remove(&e.desc);
            }
        }
        Ok(())
    }

    /// `dup`/`F_DUPFD`: a new fd ≥ `min` for the description of `fd`.
    pub fn dup(&mut self, fd: i32, min: i32, limit: u64, cloexec: bool) -> Result<i32, i32> {
        let e = self.entry(fd)?;
        let new = self.lowest_free(min, limit)?;
        self.link(e.desc, new, cloexec);
        Ok(new)
    }

    /// `dup2`/`dup3`: makes `new` refer to the description of `old` (closing `new` first).
    pub fn dup_to(&mut self, old: i32, new: i32, cloexec: bool) -> Result<i32, i32> {
        let e = self.entry(old)?;
        let _ = self.close(new);
        self.link(e.desc, new, cloexec);
        Ok(new)
    }

    fn link(&mut self, desc: u64, fd: i32, cloexec: bool) {
        if let Some(d) = self.descs.get_mut(&desc) {
            d.refs += 1;
        }
        self.fds.insert(fd, FdEntry { desc, cloexec });
    }
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

    #[test]
    fn vfs_tree() {
        let mut files = BTreeMap::new();
        files.insert("/data/in.txt".to_string(), b"abc".to_vec());
        let v = Vfs::new(&files, "/bin/prog", b"ELF");
        assert_eq!(v.lookup("/data/in.txt", true), Some(Node::File(Arc::from(&b"abc"[..]))));
        assert_eq!(v.lookup("/data", true), Some(Node::Dir));
        assert_eq!(v.lookup("/proc/self", true), Some(Node::Dir));
        assert_eq!(v.lookup("/proc/self/exe", true), Some(Node::File(Arc::from(&b"ELF"[..]))));
        assert_eq!(v.lookup("/nope", true), None);
        let names: Vec<String> = v.list("/").into_iter().map(|e| e.0).collect();
        assert_eq!(names, [".", "..", "bin", "data", "dev", "proc"]);
    }

    #[test]
    fn vfs_and_fd_table_round_trip() {
        let mut files = BTreeMap::new();
        files.insert("/data/in.txt".to_string(), b"abc".to_vec());
        files.insert("/data/empty".to_string(), Vec::new());
        let v = Vfs::new(&files, "/bin/prog", b"ELF");
        let w: Vfs = postcard::from_bytes(&postcard::to_stdvec(&v).unwrap()).unwrap();
        assert_eq!(v, w);
        w.validate().unwrap();
        assert_eq!(w.list("/data"), v.list("/data"));

        let mut t = FdTable::new(b"stdin");
        let data: Arc<[u8]> = Arc::from(&b"abc"[..]);
        let stat = v.stat("/data/in.txt", &Node::File(data.clone()));
        let kind = FileKind::Regular { path: "/data/in.txt".into(), data, stat };
        let fd = t.install(OpenFile::new(kind, O_LARGEFILE), 0, 1024, true).unwrap();
        t.get_mut(fd).unwrap().offset = 2;
        t.dup(fd, 10, 1024, false).unwrap();
        t.get_mut(0).unwrap().offset = 3;
        t.close(2).unwrap();
        let mut u: FdTable = postcard::from_bytes(&postcard::to_stdvec(&t).unwrap()).unwrap();
        assert_eq!(t, u);
        u.validate().unwrap();
        // Restored sharing: the dup still shares the offset, the contents come from the Vfs.
        u.share_file_data(&w);
        u.get_mut(10).unwrap().offset = 1;
        assert_eq!(u.get(fd).unwrap().offset, 1);
        let FileKind::Regular { data, .. } = &u.get(fd).unwrap().kind else { panic!() };
        assert!(Arc::ptr_eq(data, &w.files["/data/in.txt"]));
        assert_eq!(u.install(OpenFile::new(FileKind::DevNull, 0), 0, 1024, false), Ok(2));

        let mut bad = t.clone();
        bad.descs.values_mut().for_each(|d| d.refs = 0);
        assert!(bad.validate().is_err(), "reference counts");
        let mut bad = t.clone();
        bad.fds.insert(7, FdEntry { desc: 99, cloexec: false });
        assert!(bad.validate().is_err(), "dangling fd");
        let mut bad = t.clone();
        bad.next_desc = 0;
        assert!(bad.validate().is_err(), "next index in use");
        let mut bad = w.clone();
        bad.files.insert("data/../x".into(), Arc::from(&[][..]));
        assert!(bad.validate().is_err(), "unnormalized path");
        let mut bad = w.clone();
        bad.dirs.remove("/data");
        assert!(bad.validate().is_err(), "missing directory");
        let mut exe_loop = w;
        exe_loop.exe_path = PROC_EXE.into();
        assert_eq!(exe_loop.lookup(PROC_EXE, true), Some(Node::ExeLink));
    }

    #[test]
    fn fd_table_dup_close() {
        let mut t = FdTable::new(b"in");
        assert_eq!(t.dup(1, 0, 1024, false), Ok(3));
        t.get_mut(3).unwrap().offset = 5;
        assert_eq!(t.get(1).unwrap().offset, 5);
        t.close(1).unwrap();
        assert_eq!(t.get(3).unwrap().kind, FileKind::Stdout);
        assert_eq!(t.close(1), Err(EBADF));
        assert_eq!(t.dup_to(3, 1, false), Ok(1));
        assert_eq!(t.dup(0, 0, 4, false), Err(EMFILE));
        assert_eq!(t.get(-1), Err(EBADF));
    }
}
