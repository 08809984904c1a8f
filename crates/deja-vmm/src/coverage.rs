//! Block coverage of unmodified programs, by one-shot breakpoints.
//!
//! The rewriter's block map ([`deja_kernel::host::hostchan::image_blocks`]) names every basic block
//! of a program image that recursive descent proved to start with an instruction. To measure
//! which ones a run reaches, the VM is *armed*: an `int3` (`cc`) replaces the first byte of
//! every block not seen yet. When one executes, the exit loop puts the byte back, records the
//! block with the decision count of the core at that moment ([`BlockHit`]), and resumes at the
//! block: the block costs one exit the first time, nothing after. The core never hears of it:
//! no trace entry, no virtual time, no decision.
//!
//! A campaign *disarms* what it has learned: in a fork's parent image as well as in the VM
//! ([`crate::Fork::disarm_blocks`]), so that a block seen anywhere costs nothing in any later
//! round. What a round reports is therefore every block it reached that was still armed in its
//! VM; what is *new* is decided where rounds are learned in order, against what the campaign
//! has seen, which makes it a function of the rounds and not of which worker disarmed what
//! when.
//!
//! The core reads guest memory through [`crate::paging::AddressSpace`], which shows every block
//! with its original byte ([`BlockImage::overlay`]): syscalls that read code, the memory digest
//! and the per-page hashes are the same armed or not. The program's own reads of its code do
//! see the breakpoints (as they see the rewritten sites): `deja doctor` names it.

use std::sync::Arc;

use deja_rewrite::Function;

/// Whether `name` matches `pattern`, where `*` matches any run of characters (`ackstore::*`,
/// `*::commit`, `main.*`) and every other character itself.
pub fn glob(pattern: &str, name: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = name.strip_prefix(first) else { return false };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else { return rest.is_empty() };
    for p in middle {
        match rest.find(p) {
            Some(i) => rest = &rest[i + p.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// Whether function `f` is in the scope `pattern` names: a pattern with a `/` names source
/// files (the file of the function's first instruction, as its DWARF line tables name it,
/// matches `*pattern*`: `src/store/`, `/util.c`), any other pattern names functions ([`glob`]).
pub fn in_scope(pattern: &str, f: &Function) -> bool {
    match pattern.contains('/') {
        true => f.file.as_deref().is_some_and(|file| glob(&format!("*{pattern}*"), file)),
        false => glob(pattern, &f.name),
    }
}

/// The breakpoint byte.
pub const INT3: u8 = 0xcc;

/// The blocks of one program image: addresses in order, and the original first byte of each,
/// then the blocks of the shared objects it may map ([`ObjectBlocks`]). A block's id is its
/// index: the image's first, then each object's in turn.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BlockImage {
    addrs: Vec<u64>,
    /// The file offset of each of the image's blocks.
    offsets: Vec<u64>,
    originals: Vec<u8>,
    /// The program image's size and BLAKE3: a process that executes the same bytes (loaded at
    /// the same addresses: the kernel's loader is a function of the image) runs these blocks.
    image: (u64, [u8; 32]),
    /// The shared objects, their ids after the image's.
    objects: Vec<ObjectBlocks>,
    /// The functions the image's and the objects' symbols name that hold at least one block,
    /// by object and address.
    functions: Vec<Function>,
    /// For each block, the index in `functions` of the function holding it (`u32::MAX`: none).
    owner: Vec<u32>,
}

/// The blocks of one shared object, which have no address until a process maps the object's
/// code ([`Placed`]): each block's file offset (ascending) and original first byte.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ObjectBlocks {
    /// The object's path in the run's file system.
    pub path: String,
    /// Its size and BLAKE3 hash: a mapping of the same bytes, by whatever name, is the object.
    len: u64,
    hash: [u8; 32],
    /// The id of its first block.
    first: u32,
    offsets: Vec<u64>,
    originals: Vec<u8>,
}

impl ObjectBlocks {
    /// The ids of its blocks.
    pub fn ids(&self) -> std::ops::Range<usize> {
        self.first as usize..self.first as usize + self.offsets.len()
    }
}

/// Where one process maps code of a shared object of the [`BlockImage`]: the object's blocks
/// whose file offset falls in `[start - base, end - base)` are at `base + offset` in the space
/// `space` (the frame of its PML4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Placed {
    /// The address space.
    pub space: u64,
    /// The mapped code's first address.
    pub start: u64,
    /// Its end.
    pub end: u64,
    /// The address of the object's file offset 0.
    pub base: u64,
    /// The object's index in [`BlockImage::objects`].
    pub object: u32,
}

/// The shared objects of the C and C++ runtimes, by the start of their file names: left out of
/// a program's own code (`--cover '*'` takes them).
const RUNTIME_OBJECTS: &[&str] = &[
    "ld-linux",
    "libc.so",
    "libm.so",
    "libmvec.so",
    "libpthread.so",
    "libdl.so",
    "librt.so",
    "libresolv.so",
    "libutil.so",
    "libanl.so",
    "libgcc_s.so",
    "libstdc++.so",
    "libcrypt.so",
    "libnss_",
];

/// Whether the file at `path` is a shared object a program may map: an ELF file whose name
/// has `.so` in it (`libz.so.1`, `ld-linux-x86-64.so.2`).
pub fn is_shared_object(path: &str, data: &[u8]) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    data.starts_with(b"\x7fELF") && (name.ends_with(".so") || name.contains(".so."))
}

/// Whether the file `data` is code a process may map or execute: an ELF file (a shared object,
/// or a program another one executes).
pub fn is_code_object(data: &[u8]) -> bool {
    data.starts_with(b"\x7fELF")
}

/// Whether the shared object at `path` is part of the C or C++ runtime (libc, the loader,
/// libm, libstdc++, ...), not a program's own code.
pub fn is_runtime_object(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    RUNTIME_OBJECTS.iter().any(|r| name.starts_with(r))
}

impl BlockImage {
    /// The blocks of `image` (a program ELF), as [`deja_kernel::host::hostchan::image_blocks`] finds
    /// them; with `scope` not empty, only those inside a function one of its patterns takes
    /// ([`in_scope`]).
    pub fn of_image(image: &[u8], scope: &[String]) -> Arc<BlockImage> {
        let mut out =
            BlockImage { image: (image.len() as u64, *blake3::hash(image).as_bytes()), ..BlockImage::default() };
        out.add_image(&deja_kernel::host::hostchan::image_blocks(image), scope, "");
        Arc::new(out)
    }

    /// The blocks of the program `image` (at `exe_path`) and of the code objects among `files`
    /// (path and bytes: [`is_code_object`]: the shared objects it may load and the programs it
    /// may execute), in the functions `scope` takes, and that scope. An empty `scope` means the
    /// program's own code: in the image and in each program among the files, what
    /// [`deja_rewrite::own_code`] names (all of it when that holds no block), and every shared
    /// object outside the C and C++ runtimes ([`is_runtime_object`]), named by its path. A
    /// pattern with a `/` takes an object's functions when it matches the object's path. The
    /// image and each object are read and planned once.
    pub fn of_program(
        image: &[u8],
        exe_path: &str,
        files: &[(&str, &[u8])],
        scope: &[String],
    ) -> (Arc<BlockImage>, Vec<String>) {
        let map = deja_kernel::host::hostchan::image_blocks(image);
        let objects: Vec<(&str, &[u8])> =
            files.iter().copied().filter(|(_, d)| is_code_object(d) && *d != image).collect();
        let fresh =
            || BlockImage { image: (image.len() as u64, *blake3::hash(image).as_bytes()), ..BlockImage::default() };
        let mut out = fresh();
        let mut scope = scope.to_vec();
        if scope.is_empty() {
            let own = deja_rewrite::own_code(&map.functions);
            if !own.is_empty() && out.add_image(&map, &own, exe_path) > 0 {
                scope = own;
            } else {
                out = fresh();
                out.add_image(&map, &[], exe_path);
            }
            let own: Vec<&(&str, &[u8])> = objects.iter().filter(|(p, _)| !is_runtime_object(p)).collect();
            if !own.is_empty() && scope.is_empty() {
                scope.push(exe_path.to_string());
            }
            for &&(path, data) in &own {
                // A program it may execute: its own code, as the image's; a shared object (or
                // a program whose own code holds nothing): all of it.
                if !is_shared_object(path, data) {
                    let mine = deja_rewrite::own_code(&deja_rewrite::functions(data));
                    if !mine.is_empty() && out.add_object(path, data, &mine) > 0 {
                        scope.extend(mine.into_iter().filter(|p| !scope.contains(p)).collect::<Vec<_>>());
                        continue;
                    }
                }
                if out.add_object(path, data, &[]) > 0 {
                    scope.push(path.to_string());
                }
            }
        } else {
            out.add_image(&map, &scope, exe_path);
            for (path, data) in &objects {
                out.add_object(path, data, &scope);
            }
        }
        (Arc::new(out), scope)
    }

    /// Adds the function holding `addr` among `funcs` (by address) to the image's functions,
    /// once, and returns its index (`u32::MAX`: no function holds it), given whether `scope`
    /// takes it (false: `None`, the block is left out). `path` is the path of the image or
    /// object, for patterns with a `/`; `shared` names a shared object's function without
    /// line tables by it.
    fn owner_of(
        &mut self,
        funcs: &[Function],
        index: &mut std::collections::BTreeMap<usize, u32>,
        addr: u64,
        scope: &[String],
        path: &str,
        shared: bool,
    ) -> Option<u32> {
        // The function holding `addr`: the last one starting at or before it, if `addr` is
        // inside its size (or, for a symbol without size, before the next one starts).
        let holder = || -> Option<usize> {
            let i = funcs.partition_point(|f| f.addr <= addr).checked_sub(1)?;
            let f = &funcs[i];
            let end = match f.size {
                0 => funcs.get(i + 1).map_or(u64::MAX, |n| n.addr),
                n => f.addr.saturating_add(n),
            };
            (addr < end).then_some(i)
        };
        let f = holder();
        let taken = |p: &String| {
            f.is_some_and(|i| in_scope(p, &funcs[i]))
                || (p.contains('/') && !path.is_empty() && glob(&format!("*{p}*"), path))
        };
        if !scope.is_empty() && !scope.iter().any(taken) {
            return None;
        }
        Some(match f {
            Some(i) => *index.entry(i).or_insert_with(|| {
                let mut f = funcs[i].clone();
                // A function of an object without line tables is shown in the object.
                if f.file.is_none() && shared {
                    f.file = Some(path.to_string());
                }
                self.functions.push(f);
                (self.functions.len() - 1) as u32
            }),
            None => u32::MAX,
        })
    }

    /// Adds the blocks of `map` (the program image) that `scope` takes (all with `scope`
    /// empty), the program at `path`; returns how many. Only before any object.
    fn add_image(&mut self, map: &deja_kernel::host::hostchan::ImageBlocks, scope: &[String], path: &str) -> usize {
        let mut index = std::collections::BTreeMap::new();
        for &(addr, offset, byte) in &map.blocks {
            let Some(owner) = self.owner_of(&map.functions, &mut index, addr, scope, path, false) else { continue };
            self.addrs.push(addr);
            self.offsets.push(offset);
            self.originals.push(byte);
            self.owner.push(owner);
        }
        self.addrs.len()
    }

    /// Adds the blocks of the shared object `data` at `path` that `scope` takes; returns how
    /// many. An object without any is not kept.
    fn add_object(&mut self, path: &str, data: &[u8], scope: &[String]) -> usize {
        let map = deja_kernel::host::hostchan::file_blocks(data);
        let mut index = std::collections::BTreeMap::new();
        let functions = self.functions.len();
        let mut blocks: Vec<(u64, u8, u32)> = Vec::new();
        for &(addr, offset, byte) in &map.blocks {
            let Some(owner) = self.owner_of(&map.functions, &mut index, addr, scope, path, true) else { continue };
            blocks.push((offset, byte, owner));
        }
        if blocks.is_empty() {
            self.functions.truncate(functions);
            return 0;
        }
        blocks.sort_unstable_by_key(|b| b.0);
        blocks.dedup_by_key(|b| b.0);
        let object = ObjectBlocks {
            path: path.to_string(),
            len: data.len() as u64,
            hash: *blake3::hash(data).as_bytes(),
            first: self.owner.len() as u32,
            offsets: blocks.iter().map(|b| b.0).collect(),
            originals: blocks.iter().map(|b| b.1).collect(),
        };
        self.owner.extend(blocks.iter().map(|b| b.2));
        self.objects.push(object);
        blocks.len()
    }

    /// The shared objects.
    pub fn objects(&self) -> &[ObjectBlocks] {
        &self.objects
    }

    /// Whether `data` is the program image's bytes.
    pub fn is_image(&self, data: &[u8]) -> bool {
        data.len() as u64 == self.image.0 && !self.addrs.is_empty() && *blake3::hash(data).as_bytes() == self.image.1
    }

    /// The ids of the image's blocks in `[start, end)` when code of the image mapped there with
    /// its file offset 0 at `base` puts them at their addresses (the kernel's loader does; a
    /// mapping of the program's file elsewhere, by a loader or another program, does not):
    /// `None` otherwise, or when none is there.
    pub fn image_in(&self, start: u64, end: u64, base: u64) -> Option<std::ops::Range<usize>> {
        let from = self.addrs.partition_point(|&a| a < start);
        let to = self.addrs.partition_point(|&a| a < end);
        let fits = (from..to).all(|i| self.addrs[i].wrapping_sub(self.offsets[i]) == base);
        (from < to && fits).then_some(from..to)
    }

    /// The index of the shared object whose bytes are `data`, if one is.
    pub fn object_of(&self, data: &[u8]) -> Option<u32> {
        let len = data.len() as u64;
        if !self.objects.iter().any(|o| o.len == len) {
            return None;
        }
        let hash = *blake3::hash(data).as_bytes();
        self.objects.iter().position(|o| o.len == len && o.hash == hash).map(|i| i as u32)
    }

    /// The blocks of `at`'s object inside its range: `(id, address)`, ascending.
    pub fn placed_blocks(&self, at: &Placed) -> Vec<(usize, u64)> {
        let Some(o) = self.objects.get(at.object as usize) else { return Vec::new() };
        let (lo, hi) = (at.start.wrapping_sub(at.base), at.end.wrapping_sub(at.base));
        let from = o.offsets.partition_point(|&off| off < lo);
        o.offsets[from..]
            .iter()
            .take_while(|&&off| off < hi)
            .enumerate()
            .filter(|&(i, _)| o.originals[from + i] != INT3)
            .map(|(i, &off)| (o.first as usize + from + i, at.base.wrapping_add(off)))
            .collect()
    }

    /// The block of `at`'s object at `addr`, if one starts there inside its range and can carry
    /// a breakpoint.
    pub fn placed_find(&self, at: &Placed, addr: u64) -> Option<usize> {
        let o = self.objects.get(at.object as usize)?;
        if !(at.start..at.end).contains(&addr) {
            return None;
        }
        let i = o.offsets.binary_search(&addr.wrapping_sub(at.base)).ok()?;
        (o.originals[i] != INT3).then_some(o.first as usize + i)
    }

    /// The address of block `id` in `at`, if it is a block of `at`'s object inside its range.
    pub fn placed_addr(&self, at: &Placed, id: usize) -> Option<u64> {
        let o = self.objects.get(at.object as usize)?;
        let i = id.checked_sub(o.first as usize).filter(|&i| i < o.offsets.len())?;
        let addr = at.base.wrapping_add(o.offsets[i]);
        (at.start..at.end).contains(&addr).then_some(addr)
    }

    /// The original byte of block `id`, wherever it is.
    pub fn original_of(&self, id: usize) -> Option<u8> {
        if let Some(&b) = self.originals.get(id) {
            return Some(b);
        }
        let o = self.objects.iter().find(|o| o.ids().contains(&id))?;
        Some(o.originals[id - o.first as usize])
    }

    /// Puts back the original byte of every block of `at`'s object inside `buf`, which holds
    /// memory from `addr`.
    pub fn placed_overlay(&self, at: &Placed, addr: u64, buf: &mut [u8]) {
        let Some(o) = self.objects.get(at.object as usize) else { return };
        let (lo, hi) = (at.start.max(addr), at.end.min(addr.saturating_add(buf.len() as u64)));
        if lo >= hi {
            return;
        }
        // In file offsets: a mapping's range is a contiguous run of them, whatever its base.
        let first = lo.wrapping_sub(at.base);
        let last = first.saturating_add(hi - lo);
        let from = o.offsets.partition_point(|&off| off < first);
        for (i, &off) in o.offsets.iter().enumerate().skip(from) {
            if off >= last {
                break;
            }
            buf[(lo + (off - first) - addr) as usize] = o.originals[i];
        }
    }

    /// An image of blocks at `addrs` (ascending) with their original bytes, without
    /// functions (for tests).
    #[cfg(test)]
    pub(crate) fn from_blocks(addrs: Vec<u64>, originals: Vec<u8>) -> BlockImage {
        let owner = vec![u32::MAX; addrs.len()];
        BlockImage { offsets: addrs.clone(), addrs, originals, owner, ..BlockImage::default() }
    }

    /// A program image `data` with blocks at the file offsets `offsets` (ascending), loaded
    /// with file offset 0 at `base`, without functions (for tests).
    #[cfg(test)]
    pub(crate) fn with_image(data: &[u8], offsets: Vec<u64>, base: u64) -> BlockImage {
        BlockImage {
            image: (data.len() as u64, *blake3::hash(data).as_bytes()),
            addrs: offsets.iter().map(|&o| base + o).collect(),
            originals: offsets.iter().map(|&o| data[o as usize]).collect(),
            owner: vec![u32::MAX; offsets.len()],
            offsets,
            ..BlockImage::default()
        }
    }

    /// An image without blocks of its own and one shared object, `data`, with blocks at the
    /// file offsets `offsets` (ascending), without functions (for tests).
    #[cfg(test)]
    pub(crate) fn with_object(data: &[u8], offsets: Vec<u64>) -> BlockImage {
        let object = ObjectBlocks {
            path: "/lib/test.so".into(),
            len: data.len() as u64,
            hash: *blake3::hash(data).as_bytes(),
            first: 0,
            originals: offsets.iter().map(|&o| data[o as usize]).collect(),
            offsets,
        };
        let owner = vec![u32::MAX; object.offsets.len()];
        BlockImage { objects: vec![object], owner, ..BlockImage::default() }
    }

    /// The functions holding blocks, by address ([`BlockImage::function_of`] indexes them).
    pub fn functions(&self) -> &[Function] {
        &self.functions
    }

    /// The index in [`BlockImage::functions`] of the function holding block `id`, if a symbol
    /// names one.
    pub fn function_of(&self, id: usize) -> Option<usize> {
        self.owner.get(id).filter(|&&o| o != u32::MAX).map(|&o| o as usize)
    }

    /// How many blocks: the image's and the objects'.
    pub fn len(&self) -> usize {
        self.owner.len()
    }

    /// How many blocks the program image has (ids below it are the image's).
    pub fn image_len(&self) -> usize {
        self.addrs.len()
    }

    /// True when neither the image nor an object has a block.
    pub fn is_empty(&self) -> bool {
        self.owner.is_empty()
    }

    /// The address of block `id`.
    pub fn addr(&self, id: usize) -> Option<u64> {
        self.addrs.get(id).copied()
    }

    /// The block starting at `addr`, if one does and can carry a breakpoint (its original byte
    /// is not itself an `int3`).
    pub fn find(&self, addr: u64) -> Option<usize> {
        let i = self.addrs.binary_search(&addr).ok()?;
        (self.originals[i] != INT3).then_some(i)
    }

    /// Puts back the original byte of every block inside `buf`, which holds memory from
    /// `addr`.
    pub fn overlay(&self, addr: u64, buf: &mut [u8]) {
        let end = addr.saturating_add(buf.len() as u64);
        let from = self.addrs.partition_point(|&a| a < addr);
        for i in from..self.addrs.len() {
            let a = self.addrs[i];
            if a >= end {
                break;
            }
            buf[(a - addr) as usize] = self.originals[i];
        }
    }

    /// True if a block starts in `[addr, addr + len)`.
    pub fn any_in(&self, addr: u64, len: u64) -> bool {
        let from = self.addrs.partition_point(|&a| a < addr);
        self.addrs.get(from).is_some_and(|&a| a < addr.saturating_add(len))
    }
}

/// A set of block ids (a bit each).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Seen(Vec<u64>);

impl Seen {
    /// Adds `id`; true if it was not there.
    pub fn insert(&mut self, id: usize) -> bool {
        let (w, b) = (id / 64, id % 64);
        if self.0.len() <= w {
            self.0.resize(w + 1, 0);
        }
        let new = self.0[w] & (1 << b) == 0;
        self.0[w] |= 1 << b;
        new
    }

    /// True if `id` is in the set.
    pub fn contains(&self, id: usize) -> bool {
        self.0.get(id / 64).is_some_and(|w| w & (1 << (id % 64)) != 0)
    }

    /// How many ids.
    pub fn count(&self) -> usize {
        self.0.iter().map(|w| w.count_ones() as usize).sum()
    }
}

/// A block a run reached while it was armed, and the number of decisions the core had taken
/// then (where in the run's course it was first reached).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BlockHit {
    /// The block's id.
    pub block: u32,
    /// Decisions taken before it.
    pub decision: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlay_finds_and_sets_work_on_addresses_and_ids() {
        let image = BlockImage {
            addrs: vec![0x1000, 0x1005, 0x2000],
            originals: vec![0x55, INT3, 0x48],
            ..BlockImage::default()
        };
        assert_eq!(image.find(0x1000), Some(0));
        assert_eq!(image.find(0x1005), None, "a block that starts with an int3 of its own takes no breakpoint");
        assert_eq!(image.find(0x1001), None);
        let mut buf = [INT3; 8];
        image.overlay(0x0ffe, &mut buf);
        assert_eq!(buf, [INT3, INT3, 0x55, INT3, INT3, INT3, INT3, INT3]);
        assert!(image.any_in(0x1fff, 2) && !image.any_in(0x1006, 0x100));
        let mut seen = Seen::default();
        assert!(seen.insert(130) && !seen.insert(130));
        assert!(seen.contains(130) && !seen.contains(2));
        assert_eq!(seen.count(), 1);
    }

    #[test]
    fn glob_matches_stars_and_nothing_else() {
        assert!(glob("ackstore::*", "ackstore::commit"));
        assert!(!glob("ackstore::*", "std::ackstore::commit"));
        assert!(glob("*::commit", "ackstore::log::commit"));
        assert!(!glob("*::commit", "ackstore::commit_all"));
        assert!(glob("main.*", "main.worker"));
        assert!(glob("a*b*c", "axxbyyc") && !glob("a*b*c", "axxcyyb"));
        assert!(glob("exact", "exact") && !glob("exact", "exactly"));
        assert!(glob("*", "") && glob("ab*ab", "abab") && !glob("ab*ab", "aba"));
    }
}
