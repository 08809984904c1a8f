//! The file system of a new run ([`Fs::new`]): the disk, the read-only root, the declared
//! files and the executable, `/proc`, `/dev` and `/sys`, placed as the durable starting state.

use crate::prelude::*;
use alloc::collections::{BTreeMap, BTreeSet};
use alloc::sync::Arc;

use super::*;

fn static_time() -> u64 {
    crate::fs::FILE_TIME_S * 1_000_000_000
}

impl Fs {
    /// The file system of a new run: the `disk` (or `/`, `/tmp`, `/data`), then the read-only
    /// root's entries where the disk has none (a directory both have stays the disk's), then the
    /// declared `files` (read-only, replacing whatever was there), the executable at
    /// `exe_path`, `/proc/self/{maps,exe,fd}`, `/dev/{null,random,urandom,zero,full}`, the device
    /// that takes the Antithesis SDKs' messages where `inputs` names one, the links `/dev/fd` (to `/proc/self/fd`) and `/dev/std{in,out,err}`, and what describes
    /// the program's `cpus` CPUs: `/proc/cpuinfo` and `/sys/devices/system/cpu/{online,
    /// possible,present}`, and `/proc/sys/fs/pipe-max-size`.
    ///
    /// `/proc/self` is the directory every `/proc/<pid>` shares: a walk with a [`ProcView`]
    /// reads the name `self` in `/proc` as a link to the current pid, and a pid's name as that
    /// directory for that process ([`Walked::pid`]); its files (`maps`, `exe`, `fd`,
    /// `cmdline`, `comm`, `stat`, `status`) are generated for the process at each open.
    pub fn new(
        config: FsConfig,
        disk: Option<&Disk>,
        inputs: Inputs<'_>,
        exe_path: &str,
        image: &[u8],
        cpus: u32,
    ) -> Fs {
        let t = static_time();
        let root = Inode {
            ino: 2,
            mode: 0o755,
            times: [t; 3],
            kind: Kind::Dir(DirData::default_for(ROOT)),
            nlink: 1,
            durable_links: 1,
            pending_links: 0,
            open: 0,
            persist: true,
            readonly: false,
        };
        let mut fs = Fs {
            inodes: BTreeMap::from([(ROOT, root)]),
            seq: 0,
            next_id: 1,
            next_ino: FIRST_INO,
            used: 0,
            capacity: config.capacity_bytes,
            exe_path: exe_path.to_string(),
            joined: BTreeMap::new(),
            journal_mark: 0,
            changed: Default::default(),
        };
        match disk {
            Some(d) => {
                if let Some(DiskEntry::Dir { mode }) = d.entries.get("/") {
                    fs.set_mode(ROOT, *mode);
                }
                for (p, e) in d.entries.iter().filter(|(p, _)| *p != "/") {
                    let kind = match e {
                        DiskEntry::Dir { .. } => Kind::Dir(DirData::default_for(ROOT)),
                        DiskEntry::File { data, .. } => Kind::File(FileData::new(data.clone())),
                        DiskEntry::Symlink { target } => Kind::Symlink(target.clone()),
                    };
                    let mode = match e {
                        DiskEntry::Dir { mode } | DiskEntry::File { mode, .. } => *mode,
                        DiskEntry::Symlink { .. } => 0o777,
                    };
                    fs.place(p, kind, mode, true, false);
                }
            }
            None => {
                fs.place("/tmp", Kind::Dir(DirData::default_for(ROOT)), 0o1777, true, false);
                fs.place("/data", Kind::Dir(DirData::default_for(ROOT)), 0o755, true, false);
            }
        }
        if let Some(root) = inputs.root {
            for (p, node) in root.nodes.iter().filter(|(p, _)| p.as_str() != "/") {
                let Ok((norm, _)) = crate::fs::normalize("/", p.as_bytes()) else { continue };
                // Below a symlink of the root: not reachable by that name.
                let mut above = crate::fs::parent_path(&norm);
                let mut hidden = false;
                while above != "/" && !hidden {
                    hidden = matches!(root.nodes.get(above), Some(RootNode::Symlink(_)));
                    above = crate::fs::parent_path(above);
                }
                if hidden || fs.lookup_abs(&norm).is_some() {
                    continue; // the disk's (after a crash, or `/tmp` and `/data`)
                }
                let (kind, mode) = match node {
                    RootNode::File { mode, data } => (Kind::Static(data.clone()), *mode),
                    RootNode::Dir { mode } => (Kind::Dir(DirData::default_for(ROOT)), *mode),
                    RootNode::Symlink(t) if !t.is_empty() => (Kind::Symlink(t.clone()), 0o777),
                    RootNode::Symlink(_) => continue,
                };
                fs.place(&norm, kind, mode & 0o7777, false, true);
            }
        }
        for (p, data) in inputs.files {
            if let Ok((norm, _)) = crate::fs::normalize("/", p.as_bytes()) {
                // A program or a script may be run (`execve`); other files are read.
                let runnable = data.starts_with(b"\x7fELF") || data.starts_with(b"#!");
                let mode = if runnable { 0o755 } else { 0o644 };
                fs.place(&norm, Kind::Static(Arc::from(data.as_slice())), mode, false, true);
            }
        }
        if let Ok((norm, _)) = crate::fs::normalize("/", exe_path.as_bytes()) {
            let declared =
                fs.lookup_abs(&norm).and_then(|id| fs.get(id)).is_some_and(|i| matches!(i.kind, Kind::Static(_)));
            if !declared {
                fs.place(&norm, Kind::Static(Arc::from(image)), 0o755, false, true);
            }
            fs.exe_path = norm;
        }
        for (p, kind, mode) in [
            ("/proc/self/maps", Kind::ProcMaps, 0o444),
            ("/proc/self/exe", Kind::ExeLink, 0o777),
            ("/proc/self/cmdline", Kind::ProcInfo(ProcFile::Cmdline), 0o444),
            ("/proc/self/comm", Kind::ProcInfo(ProcFile::Comm), 0o444),
            ("/proc/self/stat", Kind::ProcInfo(ProcFile::Stat), 0o444),
            ("/proc/self/status", Kind::ProcInfo(ProcFile::Status), 0o444),
            // Its entries are the fd table's, read at each walk and listing (`Fs::walk_fds`).
            (PROC_FD, Kind::Dir(DirData::default_for(ROOT)), 0o500),
            ("/dev/fd", Kind::Symlink(PROC_FD.into()), 0o777),
            ("/dev/stdin", Kind::Symlink("/proc/self/fd/0".into()), 0o777),
            ("/dev/stdout", Kind::Symlink("/proc/self/fd/1".into()), 0o777),
            ("/dev/stderr", Kind::Symlink("/proc/self/fd/2".into()), 0o777),
            ("/dev/null", Kind::DevNull, 0o666),
            ("/dev/random", Kind::Random(8), 0o666),
            ("/dev/urandom", Kind::Random(9), 0o666),
            ("/dev/zero", Kind::MemDev(5), 0o666),
            ("/dev/full", Kind::MemDev(7), 0o666),
        ] {
            fs.place(p, kind, mode, false, true);
        }
        // The Antithesis SDKs' output: a device, never durable, replacing what the path named;
        // and deja's libvoidstar.so, which the SDKs that can load a library use instead.
        if let Some(Ok((norm, _))) = inputs.sdk_output.map(|p| crate::fs::normalize("/", p.as_bytes())) {
            if norm != "/" && !fs.lookup_abs(&norm).and_then(|id| fs.get(id)).is_some_and(Inode::is_dir) {
                fs.place(&norm, Kind::MemDev(SDK_OUTPUT_MINOR), 0o666, false, false);
            }
            let lib = crate::record::voidstar::image();
            fs.place(crate::record::voidstar::PATH, Kind::Static(Arc::from(lib)), 0o755, false, true);
        }
        let list = crate::host::cpuid::cpu_list(cpus);
        for (p, text) in [
            ("/proc/cpuinfo", crate::host::cpuid::proc_cpuinfo(cpus)),
            ("/proc/sys/fs/pipe-max-size", format!("{}\n", crate::net::PIPE_MAX_SIZE)),
            ("/sys/devices/system/cpu/online", list.clone()),
            ("/sys/devices/system/cpu/possible", list.clone()),
            ("/sys/devices/system/cpu/present", list),
        ] {
            if fs.lookup_abs(p).is_none() {
                fs.place(p, Kind::Static(Arc::from(text.into_bytes())), 0o444, false, true);
            }
        }
        if let Some(id) = fs.lookup_abs("/proc/self") {
            fs.set_mode(id, 0o555);
        }
        for d in [
            "/proc",
            "/proc/self",
            PROC_FD,
            "/proc/sys",
            "/proc/sys/fs",
            "/dev",
            "/sys",
            "/sys/devices",
            "/sys/devices/system",
            "/sys/devices/system/cpu",
        ] {
            if let Some(id) = fs.lookup_abs(d) {
                if let Some(i) = fs.inodes.get_mut(&id) {
                    i.persist = false;
                    i.readonly = true;
                }
            }
        }
        // Everything placed so far is the durable starting state.
        for i in fs.inodes.values_mut() {
            if let Kind::Dir(d) = &mut i.kind {
                d.durable = d.entries.clone();
            }
        }
        fs.recount();
        fs
    }

    /// Places an inode at the absolute normalized `path`, creating directories above it and
    /// replacing what was there (an initial-state helper: no durability bookkeeping).
    fn place(&mut self, path: &str, kind: Kind, mode: u32, persist: bool, readonly: bool) {
        if path == "/" {
            return;
        }
        let mut dir = ROOT;
        let comps: Vec<&str> = path[1..].split('/').collect();
        for (i, c) in comps.iter().enumerate() {
            let last = i + 1 == comps.len();
            let existing = self.dir(dir).and_then(|d| d.entries.get(*c).copied());
            if last {
                if let Some(old) = existing {
                    if self.inodes.get(&old).is_some_and(|o| o.is_dir()) && matches!(kind, Kind::Dir(_)) {
                        return;
                    }
                }
                let ino = self.fresh_ino(path, readonly);
                let id = self.insert(ino, mode, kind, persist, readonly, static_time());
                if let Some(Inode { kind: Kind::Dir(d), .. }) = self.inodes.get_mut(&id) {
                    d.parent = dir;
                }
                self.set_entry_raw(dir, c, id);
                return;
            }
            dir = match existing {
                Some(id) if self.inodes.get(&id).is_some_and(|i| i.is_dir()) => id,
                _ => {
                    let sub: String = format!("/{}", comps[..=i].join("/"));
                    let ino = self.fresh_ino(&sub, false);
                    let id = self.insert(ino, 0o755, Kind::Dir(DirData::default_for(dir)), true, false, static_time());
                    self.set_entry_raw(dir, c, id);
                    id
                }
            };
        }
    }

    fn set_entry_raw(&mut self, dir: u64, name: &str, id: u64) {
        if let Some(Inode { kind: Kind::Dir(d), .. }) = self.inodes.get_mut(&dir) {
            d.entries.insert(name.to_string(), id);
        }
        // Unreachable leftovers (replaced disk entries) are dropped by `recount`.
    }

    /// Recomputes every link count from the trees, drops unreachable inodes, recomputes the
    /// space used. Only for the initial state (no open files yet).
    fn recount(&mut self) {
        let mut nlink: BTreeMap<u64, u64> = BTreeMap::new();
        let mut dlink: BTreeMap<u64, u64> = BTreeMap::new();
        for i in self.inodes.values() {
            if let Kind::Dir(d) = &i.kind {
                for id in d.entries.values() {
                    *nlink.entry(*id).or_default() += 1;
                }
                for id in d.durable.values() {
                    *dlink.entry(*id).or_default() += 1;
                }
            }
        }
        // Reachability from the root through either layer.
        let mut seen = BTreeSet::from([ROOT]);
        let mut work = vec![ROOT];
        while let Some(id) = work.pop() {
            if let Some(Inode { kind: Kind::Dir(d), .. }) = self.inodes.get(&id) {
                for c in d.entries.values().chain(d.durable.values()) {
                    if seen.insert(*c) {
                        work.push(*c);
                    }
                }
            }
        }
        self.inodes.retain(|id, _| seen.contains(id));
        for (id, i) in self.inodes.iter_mut() {
            if *id != ROOT {
                i.nlink = nlink.get(id).copied().unwrap_or(0);
                i.durable_links = dlink.get(id).copied().unwrap_or(0);
            }
        }
        self.used = self.inodes.values().map(file_len).sum();
    }

    pub(super) fn fresh_ino(&mut self, path: &str, hashed: bool) -> u64 {
        if hashed {
            ino_of(path)
        } else {
            self.next_ino += 1;
            self.next_ino - 1
        }
    }

    pub(super) fn insert(&mut self, ino: u64, mode: u32, kind: Kind, persist: bool, readonly: bool, now: u64) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.inodes.insert(
            id,
            Inode {
                ino,
                mode,
                times: [now; 3],
                kind,
                nlink: 0,
                durable_links: 0,
                pending_links: 0,
                open: 0,
                persist,
                readonly,
            },
        );
        id
    }
}
