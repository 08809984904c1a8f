//! The guest's user memory as the syscall core sees it.
//!
//! The core decides the address-space layout (which ranges exist, with which protection); the
//! shell that owns the real guest memory implements [`Memory`] by editing page tables and
//! frames. Unit tests use [`FakeMemory`], a page map in a `BTreeMap`.

use crate::prelude::*;
use alloc::collections::BTreeMap;

use snafu::{OptionExt as _, Snafu};

/// Size of one guest page.
pub const PAGE_SIZE: u64 = 4096;

/// Page protection of a user mapping (a subset of Linux's `PROT_*` bits, same values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize)]
pub struct Prot(pub u32);

impl Prot {
    /// No access.
    pub const NONE: Prot = Prot(0);
    /// Readable.
    pub const READ: Prot = Prot(1);
    /// Writable.
    pub const WRITE: Prot = Prot(2);
    /// Executable.
    pub const EXEC: Prot = Prot(4);
    /// Read and write.
    pub const RW: Prot = Prot(3);

    /// True if the mapping may be read (x86 cannot map write-only or exec-only pages).
    pub fn readable(self) -> bool {
        self.0 & 7 != 0
    }
    /// True if the mapping may be written.
    pub fn writable(self) -> bool {
        self.0 & 2 != 0
    }
    /// True if the mapping may be executed.
    pub fn executable(self) -> bool {
        self.0 & 4 != 0
    }
}

/// Why a memory operation of the shell failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Snafu)]
#[snafu(visibility(pub))]
pub enum MemError {
    /// A page in the range is not present.
    #[snafu(display("guest address {addr:#x} is not mapped"))]
    NotPresent {
        /// The first address found absent.
        addr: u64,
    },
    /// The VM has no free frame left.
    #[snafu(display("guest memory exhausted"))]
    OutOfFrames,
    /// The address is outside the user half of the address space.
    #[snafu(display("guest address {addr:#x} is outside user space"))]
    OutOfRange {
        /// The address.
        addr: u64,
    },
}

/// The user half of the guest address space, implemented by the shell.
///
/// All addresses and lengths passed by the core are page aligned, except for `read`/`write`.
/// The core never reads or writes a page it has not populated.
pub trait Memory {
    /// Makes every page of `[addr, addr+len)` present with protection `prot`. Pages that were not
    /// present get fresh zeroed frames; present pages keep their contents and get `prot`.
    fn populate(&mut self, addr: u64, len: u64, prot: Prot) -> Result<(), MemError>;
    /// Changes the protection of the present pages in the range. Absent pages stay absent.
    fn protect(&mut self, addr: u64, len: u64, prot: Prot);
    /// Removes every present page of the range and frees its frame.
    fn unmap(&mut self, addr: u64, len: u64);
    /// Moves the present pages of `[from, from+len)` to `[to, to+len)` (the ranges do not
    /// overlap; the destination range is empty).
    fn move_pages(&mut self, from: u64, to: u64, len: u64);
    /// Reads bytes; every page touched must be present (any protection).
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemError>;
    /// Writes bytes; every page touched must be present (any protection: this is the monitor).
    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), MemError>;
    /// Calls `f(address, contents)` for every present user page, in address order.
    fn for_each_page(&self, f: &mut dyn FnMut(u64, &[u8]));
    /// [`Memory::for_each_page`] in the address space `space` (nothing for an id that is no
    /// live space); the current space stays current.
    fn for_each_page_in(&self, space: u64, f: &mut dyn FnMut(u64, &[u8]));
    /// Number of free frames the shell still has for user pages and page tables.
    fn free_frames(&self) -> u64;

    /// The address space every other method acts on: an id the shell chose (the first space
    /// is the one the memory started with). Processes of one node each have one; the shell
    /// runs the guest in the current one.
    fn space(&self) -> u64;
    /// A new address space holding a copy of the current one's user pages (`fork`): pages in
    /// the ranges of `shared` are the same frames in both spaces (`MAP_SHARED`), every other
    /// page is a copy (the shell may share its frame copy-on-write until either space writes
    /// it: see [`Memory::unshare`]). The current space's contents are unchanged and it stays
    /// current.
    fn fork_space(&mut self, shared: &[(u64, u64)]) -> Result<u64, MemError>;
    /// Serves a write fault of the program at `addr` on a copy-on-write page that it may
    /// write: gives the current space a writable frame of its own with the same contents, and
    /// returns true. Returns false for any other page (absent, not copy-on-write, or not
    /// writable), which the core then serves as usual.
    fn unshare(&mut self, addr: u64) -> Result<bool, MemError>;
    /// A new address space with no user pages (`execve`). The current space stays current.
    fn new_space(&mut self) -> Result<u64, MemError>;
    /// Makes `id` current: later calls act on it, and the guest runs in it from its next
    /// entry. An id that is no live space is ignored.
    fn switch_space(&mut self, id: u64);
    /// Frees every user page (a frame shared with another space stays while that space maps
    /// it) and every page table of space `id`. The current space is never dropped.
    fn drop_space(&mut self, id: u64);
    /// The code of the file `data` now fills `[start, end)` of the current space, executable,
    /// its file offset 0 at `base` (a shared object mapped by the loader): a shell measuring
    /// block coverage places the file's blocks there. Called after the pages are filled and
    /// the host channels closed, again for every `mprotect` that makes part of it executable.
    fn code_mapped(&mut self, data: &[u8], start: u64, end: u64, base: u64);
}

/// Pages of a [`FakeMemory`] space: address → (protection, contents).
pub type FakePages = BTreeMap<u64, (Prot, Box<[u8]>)>;

/// An in-memory [`Memory`] for tests: pages in a map, a fixed frame budget. Shared ranges of
/// a forked space are copied like the rest (the fake has no frames to share).
#[derive(Debug, Clone, Default)]
pub struct FakeMemory {
    /// Present pages of the current space: address → (protection, contents).
    pub pages: FakePages,
    /// Frames the fake may still hand out.
    pub frames_left: u64,
    /// The current space's id.
    pub current: u64,
    /// The other spaces' pages, by id.
    pub others: BTreeMap<u64, FakePages>,
    /// The next id to hand out (0: 1).
    pub next_space: u64,
    /// Every [`Memory::code_mapped`] call: start, end, base and the file's size.
    pub code: Vec<(u64, u64, u64, u64)>,
}

impl FakeMemory {
    /// A fake with room for `frames` pages; its first space is 1 (no thread's space is 0, so
    /// a missing one never matches it by accident).
    pub fn new(frames: u64) -> Self {
        FakeMemory { pages: BTreeMap::new(), frames_left: frames, current: 1, next_space: 2, ..Default::default() }
    }

    fn alloc_space(&mut self, pages: FakePages) -> Result<u64, MemError> {
        let n = pages.len() as u64;
        if self.frames_left < n {
            return OutOfFramesSnafu.fail();
        }
        self.frames_left -= n;
        self.next_space = self.next_space.max(self.current + 1).max(1);
        let id = self.next_space;
        self.next_space += 1;
        self.others.insert(id, pages);
        Ok(id)
    }

    fn page_mut(&mut self, addr: u64) -> Result<&mut [u8], MemError> {
        self.pages.get_mut(&(addr & !(PAGE_SIZE - 1))).map(|(_, data)| &mut data[..]).context(NotPresentSnafu { addr })
    }
}

impl Memory for FakeMemory {
    fn unshare(&mut self, _addr: u64) -> Result<bool, MemError> {
        // Its forks copy every page at once: nothing is ever copy-on-write.
        Ok(false)
    }

    fn populate(&mut self, addr: u64, len: u64, prot: Prot) -> Result<(), MemError> {
        let mut a = addr;
        while a < addr + len {
            match self.pages.get_mut(&a) {
                Some(page) => page.0 = prot,
                None => {
                    if self.frames_left == 0 {
                        return OutOfFramesSnafu.fail();
                    }
                    self.frames_left -= 1;
                    self.pages.insert(a, (prot, vec![0u8; PAGE_SIZE as usize].into_boxed_slice()));
                }
            }
            a += PAGE_SIZE;
        }
        Ok(())
    }

    fn protect(&mut self, addr: u64, len: u64, prot: Prot) {
        for (_, page) in self.pages.range_mut(addr..addr + len) {
            page.0 = prot;
        }
    }

    fn unmap(&mut self, addr: u64, len: u64) {
        let keys: Vec<u64> = self.pages.range(addr..addr + len).map(|(k, _)| *k).collect();
        for k in keys {
            self.pages.remove(&k);
            self.frames_left += 1;
        }
    }

    fn move_pages(&mut self, from: u64, to: u64, len: u64) {
        let keys: Vec<u64> = self.pages.range(from..from + len).map(|(k, _)| *k).collect();
        for k in keys {
            if let Some(page) = self.pages.remove(&k) {
                self.pages.insert(k - from + to, page);
            }
        }
    }

    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemError> {
        let mut done = 0usize;
        while done < buf.len() {
            let a = addr + done as u64;
            let page = a & !(PAGE_SIZE - 1);
            let off = (a - page) as usize;
            let n = (PAGE_SIZE as usize - off).min(buf.len() - done);
            let data = self.pages.get(&page).context(NotPresentSnafu { addr: a })?;
            buf[done..done + n].copy_from_slice(&data.1[off..off + n]);
            done += n;
        }
        Ok(())
    }

    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), MemError> {
        let mut done = 0usize;
        while done < data.len() {
            let a = addr + done as u64;
            let off = (a & (PAGE_SIZE - 1)) as usize;
            let n = (PAGE_SIZE as usize - off).min(data.len() - done);
            self.page_mut(a)?[off..off + n].copy_from_slice(&data[done..done + n]);
            done += n;
        }
        Ok(())
    }

    fn for_each_page(&self, f: &mut dyn FnMut(u64, &[u8])) {
        for (addr, (_, data)) in &self.pages {
            f(*addr, data);
        }
    }

    fn for_each_page_in(&self, space: u64, f: &mut dyn FnMut(u64, &[u8])) {
        let pages = if space == self.current { Some(&self.pages) } else { self.others.get(&space) };
        for (addr, (_, data)) in pages.into_iter().flatten() {
            f(*addr, data);
        }
    }

    fn free_frames(&self) -> u64 {
        self.frames_left
    }

    fn space(&self) -> u64 {
        self.current
    }

    fn fork_space(&mut self, _shared: &[(u64, u64)]) -> Result<u64, MemError> {
        let copy = self.pages.clone();
        self.alloc_space(copy)
    }

    fn new_space(&mut self) -> Result<u64, MemError> {
        self.alloc_space(BTreeMap::new())
    }

    fn switch_space(&mut self, id: u64) {
        if id == self.current {
            return;
        }
        if let Some(pages) = self.others.remove(&id) {
            let old = core::mem::replace(&mut self.pages, pages);
            self.others.insert(self.current, old);
            self.current = id;
        }
    }

    fn drop_space(&mut self, id: u64) {
        if id != self.current {
            if let Some(p) = self.others.remove(&id) {
                self.frames_left += p.len() as u64;
            }
        }
    }
    fn code_mapped(&mut self, data: &[u8], start: u64, end: u64, base: u64) {
        self.code.push((start, end, base, data.len() as u64));
    }
}
