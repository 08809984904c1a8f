//! Block coverage of unmodified programs, by one-shot breakpoints.
//!
//! The rewriter's block map ([`deja_kernel::hostchan::image_blocks`]) names every basic block
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

/// The blocks of one program image: addresses in order, and the original first byte of each.
/// A block's id is its index.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BlockImage {
    addrs: Vec<u64>,
    originals: Vec<u8>,
    /// The functions the image's symbols name that hold at least one block, by address.
    functions: Vec<Function>,
    /// For each block, the index in `functions` of the function holding it (`u32::MAX`: none).
    owner: Vec<u32>,
}

impl BlockImage {
    /// The blocks of `image` (a program ELF), as [`deja_kernel::hostchan::image_blocks`] finds
    /// them; with `scope` not empty, only those inside a function one of its patterns takes
    /// ([`in_scope`]).
    pub fn of_image(image: &[u8], scope: &[String]) -> Arc<BlockImage> {
        BlockImage::select(&deja_kernel::hostchan::image_blocks(image), scope)
    }

    /// The blocks of `image` in its own code ([`deja_rewrite::own_code`]) and that scope; the
    /// whole image and an empty scope when its own code holds no block. The image is read and
    /// planned once.
    pub fn of_own_code(image: &[u8]) -> (Arc<BlockImage>, Vec<String>) {
        let map = deja_kernel::hostchan::image_blocks(image);
        let scope = deja_rewrite::own_code(&map.functions);
        if !scope.is_empty() {
            let own = BlockImage::select(&map, &scope);
            if !own.is_empty() {
                return (own, scope);
            }
        }
        (BlockImage::select(&map, &[]), Vec::new())
    }

    /// The blocks of `map` inside a function one of `scope`'s patterns takes (all with
    /// `scope` empty).
    fn select(map: &deja_kernel::hostchan::ImageBlocks, scope: &[String]) -> Arc<BlockImage> {
        let funcs = &map.functions;
        // The function holding `addr`: the last one starting at or before it, if `addr` is
        // inside its size (or, for a symbol without size, before the next one starts).
        let holder = |addr: u64| -> Option<usize> {
            let i = funcs.partition_point(|f| f.addr <= addr).checked_sub(1)?;
            let f = &funcs[i];
            let end = match f.size {
                0 => funcs.get(i + 1).map_or(u64::MAX, |n| n.addr),
                n => f.addr.saturating_add(n),
            };
            (addr < end).then_some(i)
        };
        let mut out = BlockImage::default();
        let mut index: std::collections::BTreeMap<usize, u32> = std::collections::BTreeMap::new();
        for &(addr, byte) in &map.blocks {
            let f = holder(addr);
            if !scope.is_empty() && !f.is_some_and(|i| scope.iter().any(|p| in_scope(p, &funcs[i]))) {
                continue;
            }
            let owner = match f {
                Some(i) => *index.entry(i).or_insert_with(|| {
                    out.functions.push(funcs[i].clone());
                    (out.functions.len() - 1) as u32
                }),
                None => u32::MAX,
            };
            out.addrs.push(addr);
            out.originals.push(byte);
            out.owner.push(owner);
        }
        Arc::new(out)
    }

    /// An image of blocks at `addrs` (ascending) with their original bytes, without
    /// functions (for tests).
    #[cfg(test)]
    pub(crate) fn from_blocks(addrs: Vec<u64>, originals: Vec<u8>) -> BlockImage {
        let owner = vec![u32::MAX; addrs.len()];
        BlockImage { addrs, originals, functions: Vec::new(), owner }
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

    /// How many blocks.
    pub fn len(&self) -> usize {
        self.addrs.len()
    }

    /// True when the image has no block.
    pub fn is_empty(&self) -> bool {
        self.addrs.is_empty()
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

    /// The original byte of block `id`.
    pub fn original(&self, id: usize) -> u8 {
        self.originals[id]
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
