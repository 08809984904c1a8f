//! The durable side of the file system: syncs that apply (or, failed, drop) a target's
//! pending operations, and the disks a crash leaves: the volatile and durable views, the
//! pending operations a crash state picks from, and the image of one state.

use crate::prelude::*;
use alloc::collections::{BTreeMap, BTreeSet};

use super::*;

impl Fs {
    /// Makes the data (file) or the entries (directory) of `id` durable: its pending
    /// operations reach the disk, in order.
    pub fn flush(&mut self, id: u64) {
        self.settle(id, true);
    }

    /// A sync of `id` failed: its pending operations are dropped without reaching the disk,
    /// as Linux drops the dirty pages after an fsync error, and a later sync succeeds with the
    /// data gone (Rebello et al., "Can applications recover from fsync failures?", ATC '20).
    pub fn drop_pending(&mut self, id: u64) {
        self.settle(id, false);
    }

    /// A sync of the file `id` failed after making the pending operations `keep` marks (by
    /// place in its pending list) durable: those reach the disk in order, the others are
    /// dropped (fsyncgate: a failed fsync may have written back any subset of what it covered,
    /// and the rest counts as clean). Directories drop everything, as [`Fs::drop_pending`].
    pub fn settle_failed(&mut self, id: u64, keep: &[bool]) {
        let Some(Inode { kind: Kind::File(f), .. }) = self.inodes.get_mut(&id) else {
            return self.drop_pending(id);
        };
        let ops = core::mem::take(&mut f.pending);
        for (i, (_, op)) in ops.iter().enumerate() {
            if keep.get(i).copied().unwrap_or(false) {
                op.apply(&mut f.durable);
            } else {
                f.dropped = true;
            }
        }
    }

    /// Ends the pending operations of `id`: applied to the durable layer (`apply`) or dropped.
    fn settle(&mut self, id: u64, apply: bool) {
        if apply && self.dirty(id) {
            self.journal_mark = self.seq;
        }
        if let Some(Kind::Dir(d)) = self.inodes.get(&id).map(|i| &i.kind) {
            let settled: BTreeSet<u64> = d.pending.iter().map(|p| p.0).collect();
            self.joined.retain(|a, b| !settled.contains(a) && !settled.contains(b));
        }
        let Some(i) = self.inodes.get_mut(&id) else { return };
        match &mut i.kind {
            Kind::File(f) => {
                if apply {
                    f.flush();
                } else if !f.pending.is_empty() {
                    f.pending.clear();
                    f.dropped = true;
                }
            }
            Kind::Dir(d) => {
                let ops: Vec<DirOp> = core::mem::take(&mut d.pending).into_iter().flat_map(|p| p.1).collect();
                if ops.is_empty() {
                    return;
                }
                let old = d.durable.clone();
                if apply {
                    apply_dir_ops(&mut d.durable, &ops);
                } else {
                    d.dropped = true;
                }
                let new = d.durable.clone();
                let mut touched = Vec::new();
                for op in &ops {
                    if let DirOp::Set(_, c) = op {
                        if let Some(n) = self.inodes.get_mut(c) {
                            n.pending_links -= 1;
                        }
                        touched.push(*c);
                    }
                }
                for c in new.values() {
                    if let Some(n) = self.inodes.get_mut(c) {
                        n.durable_links += 1;
                    }
                }
                for c in old.values() {
                    if let Some(n) = self.inodes.get_mut(c) {
                        n.durable_links -= 1;
                    }
                    touched.push(*c);
                }
                for c in touched {
                    self.collect(c);
                }
            }
            _ => {}
        }
    }

    /// `sync`: everything durable.
    pub fn flush_all(&mut self) {
        let ids: Vec<u64> = self.inodes.keys().copied().collect();
        for id in ids {
            self.flush(id);
        }
    }

    /// A `syncfs` failed: every pending operation is dropped.
    pub fn drop_all(&mut self) {
        let ids: Vec<u64> = self.inodes.keys().copied().collect();
        for id in ids {
            self.drop_pending(id);
        }
    }

    /// True if `id` is a writable regular file.
    pub fn is_file(&self, id: u64) -> bool {
        matches!(self.inodes.get(&id).map(|i| &i.kind), Some(Kind::File(_)))
    }

    /// True if `id` has unsynced data or entries.
    pub fn dirty(&self, id: u64) -> bool {
        match self.inodes.get(&id).map(|i| &i.kind) {
            Some(Kind::File(f)) => !f.pending.is_empty(),
            Some(Kind::Dir(d)) => !d.pending.is_empty(),
            _ => false,
        }
    }

    /// True if anything is pending anywhere (what a `sync` would make durable).
    pub fn any_dirty(&self) -> bool {
        self.inodes.keys().any(|id| self.dirty(*id))
    }

    /// The volatile view as a [`Disk`].
    pub fn volatile_disk(&self) -> Disk {
        self.export(&Layer::Volatile)
    }

    /// The durable layer alone as a [`Disk`]: what a crash that keeps nothing pending leaves.
    pub fn durable_disk(&self) -> Disk {
        self.export(&Layer::Durable(Overlay::default()))
    }

    /// A path for every persistent inode the volatile tree reaches (its first in path order),
    /// for naming pending operations.
    fn paths(&self) -> BTreeMap<u64, String> {
        let mut out = BTreeMap::from([(ROOT, "/".to_string())]);
        let mut stack = vec![(ROOT, "/".to_string())];
        while let Some((id, path)) = stack.pop() {
            let Some(d) = self.dir(id) else { continue };
            for (name, c) in d.entries.iter().chain(&d.durable) {
                let p = if path == "/" { format!("/{name}") } else { format!("{path}/{name}") };
                if !out.contains_key(c) {
                    out.insert(*c, p.clone());
                    if self.dir(*c).is_some() {
                        stack.push((*c, p));
                    }
                }
            }
        }
        out
    }

    /// Every operation still pending, in program order: what a crash now may keep or lose.
    pub fn pending_ops(&self) -> Vec<PendingOp> {
        let paths = self.paths();
        let name = |id: u64| paths.get(&id).cloned().unwrap_or_else(|| format!("(unlinked inode {id})"));
        let mark = self.journal_mark;
        let mut out = Vec::new();
        for (&id, i) in &self.inodes {
            if !i.persist {
                continue;
            }
            match &i.kind {
                Kind::File(f) => {
                    // A write reaching past the durable size depends on the size change that
                    // covers it, whatever earlier pending writes did: it is an append.
                    let durable = f.durable.len() as u64;
                    for (slot, (seq, op)) in f.pending.iter().enumerate() {
                        let (what, class) = match op {
                            Pending::Write { off, data } => {
                                let end = off + data.len() as u64;
                                let class = if end > durable { OpClass::Append } else { OpClass::Overwrite };
                                (format!("write of {} bytes at {off} to {}", data.len(), name(id)), class)
                            }
                            Pending::SetSize(n) => (format!("size of {} set to {n}", name(id)), OpClass::Size),
                            Pending::Replace(d) => {
                                (format!("merged writes to {} ({} bytes)", name(id), d.len()), OpClass::Size)
                            }
                        };
                        let sectors = matches!(op, Pending::Write { .. }).then(|| op.sectors());
                        let committed = class.journaled() && *seq < mark;
                        out.push(PendingOp {
                            seq: *seq,
                            target: id,
                            slot,
                            sectors,
                            what,
                            class,
                            joined: None,
                            committed,
                        });
                    }
                }
                Kind::Dir(d) => {
                    let mut replay = d.durable.clone();
                    for (slot, (seq, ops)) in d.pending.iter().enumerate() {
                        // A name set over one the directory held before the call: a rename
                        // replacing its target (the call may remove the old entry first).
                        let over: Vec<u64> = ops
                            .iter()
                            .filter_map(|op| match op {
                                DirOp::Set(n, c) if replay.get(n).is_some_and(|old| old != c) => Some(*c),
                                _ => None,
                            })
                            .collect();
                        apply_dir_ops(&mut replay, ops);
                        let parts: Vec<String> = ops
                            .iter()
                            .map(|op| match op {
                                DirOp::Set(n, _) => format!("entry {n} set"),
                                DirOp::Remove(n) => format!("entry {n} removed"),
                            })
                            .collect();
                        let what = format!("{} in {}", parts.join(" and "), name(id));
                        let committed = *seq < mark;
                        let class = OpClass::Entries { over };
                        out.push(PendingOp {
                            seq: *seq,
                            target: id,
                            slot,
                            sectors: None,
                            what,
                            class,
                            joined: None,
                            committed,
                        });
                    }
                }
                _ => {}
            }
        }
        out.sort_by_key(|o| o.seq);
        let at: BTreeMap<u64, usize> = out.iter().enumerate().map(|(i, o)| (o.seq, i)).collect();
        for (second, first) in &self.joined {
            if let (Some(&a), Some(&b)) = (at.get(first), at.get(second)) {
                out[a].joined = Some(b);
                out[b].joined = Some(a);
            }
        }
        out
    }

    /// The disk a crash leaves when exactly the operations `sel` names reach it (see
    /// [`Selection`]), applied in program order on the durable layer.
    pub fn image_of(&self, ops: &[PendingOp], sel: &Selection) -> Disk {
        let mut overlay = Overlay::default();
        for (i, op) in ops.iter().enumerate() {
            let torn = sel.torn.filter(|(at, _)| *at == i).map(|(_, k)| k);
            if !sel.kept.get(i).copied().unwrap_or(false) && torn.is_none() {
                continue;
            }
            match self.inodes.get(&op.target).map(|n| &n.kind) {
                Some(Kind::File(f)) => {
                    let Some((_, p)) = f.pending.get(op.slot) else { continue };
                    let c = overlay.files.entry(op.target).or_insert_with(|| f.durable.clone());
                    let part = match torn {
                        Some(k) => p.torn(k),
                        None => Some(p.clone()),
                    };
                    if let Some(p) = part {
                        p.apply(c);
                    }
                }
                Some(Kind::Dir(d)) => {
                    let Some((_, change)) = d.pending.get(op.slot) else { continue };
                    let e = overlay.dirs.entry(op.target).or_insert_with(|| d.durable.clone());
                    apply_dir_ops(e, change);
                }
                _ => {}
            }
        }
        self.export(&Layer::Durable(overlay))
    }

    /// Walks one layer from `/` into a [`Disk`] (a file with several links is copied to each).
    fn export(&self, layer: &Layer) -> Disk {
        let mut disk = Disk::default();
        if let Some(r) = self.inodes.get(&ROOT) {
            disk.entries.insert("/".into(), DiskEntry::Dir { mode: r.mode });
        }
        let mut seen_dirs = BTreeSet::from([ROOT]);
        // Depth-first in path order.
        let mut stack = vec![(ROOT, "/".to_string())];
        while let Some((id, path)) = stack.pop() {
            let Some(d) = self.dir(id) else { continue };
            let entries = match layer {
                Layer::Volatile => &d.entries,
                Layer::Durable(o) => o.dirs.get(&id).unwrap_or(&d.durable),
            };
            let mut subdirs = Vec::new();
            for (name, c) in entries {
                let Some(node) = self.inodes.get(c).filter(|n| n.persist) else { continue };
                let p = if path == "/" { format!("/{name}") } else { format!("{path}/{name}") };
                match &node.kind {
                    Kind::Dir(_) if seen_dirs.insert(*c) => {
                        disk.entries.insert(p.clone(), DiskEntry::Dir { mode: node.mode });
                        subdirs.push((*c, p));
                    }
                    Kind::File(f) => {
                        let data = match layer {
                            Layer::Volatile => f.data.clone(),
                            Layer::Durable(o) => o.files.get(c).unwrap_or(&f.durable).clone(),
                        };
                        disk.entries.insert(p, DiskEntry::File { mode: node.mode, data });
                    }
                    Kind::Symlink(t) => {
                        disk.entries.insert(p, DiskEntry::Symlink { target: t.clone() });
                    }
                    _ => {}
                }
            }
            stack.extend(subdirs.into_iter().rev());
        }
        disk
    }
}

/// Which layer an export walks.
enum Layer {
    /// What the program sees now.
    Volatile,
    /// The durable layer, with these files and directories replaced (a crash image).
    Durable(Overlay),
}

/// The files and directories of a crash image that differ from the durable layer.
#[derive(Default)]
struct Overlay {
    files: BTreeMap<u64, Vec<u8>>,
    dirs: BTreeMap<u64, BTreeMap<String, u64>>,
}

/// The first `bound` bytes of `durable` after `pending`, computed without holding more than
/// `bound` bytes; `None` when the operations overflow or the final size is not `bound`.
pub(super) fn simulate(durable: &[u8], pending: &[Pending], bound: usize) -> Option<Vec<u8>> {
    let mut c = durable[..durable.len().min(bound)].to_vec();
    let mut s = durable.len() as u64;
    let b = bound as u64;
    for op in pending {
        match op {
            Pending::Write { off, data } => {
                let end = off.checked_add(data.len() as u64)?;
                if *off < b {
                    let e = end.min(b) as usize;
                    if c.len() < e {
                        c.resize(e, 0);
                    }
                    c[*off as usize..e].copy_from_slice(&data[..e - *off as usize]);
                }
                s = s.max(end);
            }
            Pending::SetSize(n) => {
                s = *n;
                c.truncate(s.min(b) as usize);
            }
            Pending::Replace(d) => {
                c = d[..d.len().min(bound)].to_vec();
                s = d.len() as u64;
            }
        }
        let want = s.min(b) as usize;
        if c.len() < want {
            c.resize(want, 0);
        }
    }
    (s == b).then_some(c)
}

/// Paths of a [`Disk`] that differ between two views: present in one only, or different.
pub fn diff_paths(a: &Disk, b: &Disk) -> Vec<String> {
    let mut out = Vec::new();
    for (p, e) in &a.entries {
        if b.entries.get(p) != Some(e) {
            out.push(p.clone());
        }
    }
    for p in b.entries.keys() {
        if !a.entries.contains_key(p) {
            out.push(p.clone());
        }
    }
    out.sort();
    out.dedup();
    out
}
