//! The guest's user memory as the syscall core sees it.
//!
//! The core decides the address-space layout (which ranges exist, with which protection); the
//! shell that owns the real guest memory implements [`Memory`] by editing page tables and
//! frames. Unit tests use [`FakeMemory`], a page map in a `BTreeMap`.

use std::collections::BTreeMap;

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
    /// Number of free frames the shell still has for user pages and page tables.
    fn free_frames(&self) -> u64;
}

/// An in-memory [`Memory`] for tests: pages in a map, a fixed frame budget.
#[derive(Debug, Clone, Default)]
pub struct FakeMemory {
    /// Present pages: address → (protection, contents).
    pub pages: BTreeMap<u64, (Prot, Box<[u8]>)>,
    /// Frames the fake may still hand out.
    pub frames_left: u64,
}

impl FakeMemory {
    /// A fake with room for `frames` pages.
    pub fn new(frames: u64) -> Self {
        FakeMemory { pages: BTreeMap::new(), frames_left: frames }
    }

    fn page_mut(&mut self, addr: u64) -> Result<&mut [u8], MemError> {
        self.pages.get_mut(&(addr & !(PAGE_SIZE - 1))).map(|(_, data)| &mut data[..]).context(NotPresentSnafu { addr })
    }
}

impl Memory for FakeMemory {
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

    fn free_frames(&self) -> u64 {
        self.frames_left
    }
}
