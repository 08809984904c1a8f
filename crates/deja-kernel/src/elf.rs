//! ELF64 parsing and validation for static x86-64 executables.
//!
//! Hand-rolled and bounds-checked: every offset and size read from the image is checked before
//! use, so a hostile or truncated image yields a [`LoadError`], never a panic.

use crate::LoadError;

/// `ET_EXEC`.
pub const ET_EXEC: u16 = 2;
/// `ET_DYN`.
pub const ET_DYN: u16 = 3;
/// `EM_X86_64`.
pub const EM_X86_64: u16 = 62;
/// `PT_LOAD`.
pub const PT_LOAD: u32 = 1;
/// `PT_INTERP`.
pub const PT_INTERP: u32 = 3;
/// `PT_PHDR`.
pub const PT_PHDR: u32 = 6;
/// `PT_GNU_STACK`.
pub const PT_GNU_STACK: u32 = 0x6474_e551;
/// Segment flag: executable.
pub const PF_X: u32 = 1;
/// Segment flag: writable.
pub const PF_W: u32 = 2;
/// Segment flag: readable.
pub const PF_R: u32 = 4;
/// Size of an ELF64 program header.
pub const PHDR_SIZE: u64 = 56;

/// One program header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Phdr {
    /// `p_type`.
    pub p_type: u32,
    /// `p_flags`.
    pub p_flags: u32,
    /// `p_offset`.
    pub p_offset: u64,
    /// `p_vaddr`.
    pub p_vaddr: u64,
    /// `p_filesz`.
    pub p_filesz: u64,
    /// `p_memsz`.
    pub p_memsz: u64,
}

/// A validated static x86-64 executable.
#[derive(Debug, Clone)]
pub struct ElfImage {
    /// `ET_EXEC` or `ET_DYN`.
    pub e_type: u16,
    /// `e_entry` (before the load bias).
    pub entry: u64,
    /// `e_phoff`.
    pub phoff: u64,
    /// Every program header, in file order.
    pub phdrs: Vec<Phdr>,
    /// True if `PT_GNU_STACK` asks for an executable stack (noted only).
    pub exec_stack: bool,
}

fn u16_at(b: &[u8], off: u64) -> Option<u16> {
    let o = usize::try_from(off).ok()?;
    let s = b.get(o..o.checked_add(2)?)?;
    Some(u16::from_le_bytes([s[0], s[1]]))
}

fn u32_at(b: &[u8], off: u64) -> Option<u32> {
    let o = usize::try_from(off).ok()?;
    let s = b.get(o..o.checked_add(4)?)?;
    Some(u32::from_le_bytes(s.try_into().ok()?))
}

fn u64_at(b: &[u8], off: u64) -> Option<u64> {
    let o = usize::try_from(off).ok()?;
    let s = b.get(o..o.checked_add(8)?)?;
    Some(u64::from_le_bytes(s.try_into().ok()?))
}

fn malformed(msg: impl Into<String>) -> LoadError {
    LoadError::Malformed(msg.into())
}

/// Parses and validates `image`.
pub fn parse(image: &[u8]) -> Result<ElfImage, LoadError> {
    if image.len() < 4 || &image[..4] != b"\x7fELF" {
        return Err(LoadError::NotElf);
    }
    if image.len() < 64 {
        return Err(malformed(format!("truncated ELF header ({} bytes, need 64)", image.len())));
    }
    match image[4] {
        1 => return Err(LoadError::Not64Bit),
        2 => {}
        c => return Err(malformed(format!("unknown ELF class {c}"))),
    }
    match image[5] {
        1 => {}
        2 => return Err(malformed("big-endian ELF; x86-64 programs are little-endian")),
        d => return Err(malformed(format!("unknown ELF data encoding {d}"))),
    }
    let e_type = u16_at(image, 16).unwrap_or(0);
    let machine = u16_at(image, 18).unwrap_or(0);
    if machine != EM_X86_64 {
        return Err(LoadError::WrongMachine(machine));
    }
    if e_type != ET_EXEC && e_type != ET_DYN {
        return Err(LoadError::NotExecutable(e_type));
    }
    let entry = u64_at(image, 24).unwrap_or(0);
    let phoff = u64_at(image, 32).unwrap_or(0);
    let phentsize = u64::from(u16_at(image, 54).unwrap_or(0));
    let phnum = u64::from(u16_at(image, 56).unwrap_or(0));
    if phnum == 0 {
        return Err(malformed("no program headers"));
    }
    if phnum == 0xffff {
        return Err(malformed("extended program header count (PN_XNUM) is not supported"));
    }
    if phentsize < PHDR_SIZE {
        return Err(malformed(format!("program header size {phentsize}, expected 56")));
    }
    let table_end = phnum
        .checked_mul(phentsize)
        .and_then(|n| n.checked_add(phoff))
        .ok_or_else(|| malformed("program header table offset overflows"))?;
    if table_end > image.len() as u64 {
        return Err(malformed(format!(
            "program header table ends at {table_end:#x}, past the end of the file ({:#x})",
            image.len()
        )));
    }
    let mut phdrs = Vec::with_capacity(phnum as usize);
    for i in 0..phnum {
        let o = phoff + i * phentsize;
        let get = |f: u64| u64_at(image, o + f).ok_or_else(|| malformed("truncated phdr"));
        phdrs.push(Phdr {
            p_type: u32_at(image, o).ok_or_else(|| malformed("truncated phdr"))?,
            p_flags: u32_at(image, o + 4).ok_or_else(|| malformed("truncated phdr"))?,
            p_offset: get(8)?,
            p_vaddr: get(16)?,
            p_filesz: get(32)?,
            p_memsz: get(40)?,
        });
    }
    if let Some(interp) = phdrs.iter().find(|p| p.p_type == PT_INTERP) {
        let bytes = usize::try_from(interp.p_offset)
            .ok()
            .and_then(|s| Some((s, s.checked_add(usize::try_from(interp.p_filesz).ok()?)?)))
            .and_then(|(s, e)| image.get(s..e))
            .unwrap_or(&[]);
        let bytes = bytes.split(|b| *b == 0).next().unwrap_or(&[]);
        let mut name = String::from_utf8_lossy(bytes).into_owned();
        if name.is_empty() {
            name = "<unreadable>".to_string();
        }
        return Err(LoadError::Dynamic(name));
    }
    if e_type == ET_DYN && entry == 0 {
        return Err(LoadError::NotExecutable(e_type));
    }
    let mut loads: Vec<&Phdr> = Vec::new();
    for p in phdrs.iter().filter(|p| p.p_type == PT_LOAD) {
        let file_end = p.p_offset.checked_add(p.p_filesz).ok_or_else(|| malformed("segment file range overflows"))?;
        if file_end > image.len() as u64 {
            return Err(malformed(format!(
                "segment at {:#x} reads file bytes up to {file_end:#x}, past the end of the file ({:#x})",
                p.p_vaddr,
                image.len()
            )));
        }
        if p.p_filesz > p.p_memsz {
            return Err(malformed(format!("segment at {:#x} has p_filesz > p_memsz", p.p_vaddr)));
        }
        if p.p_vaddr.checked_add(p.p_memsz).is_none_or(|e| e > crate::layout::USER_END) {
            return Err(malformed(format!(
                "segment at {:#x} (size {:#x}) does not fit in user space",
                p.p_vaddr, p.p_memsz
            )));
        }
        if (p.p_vaddr ^ p.p_offset) & (crate::PAGE_SIZE - 1) != 0 {
            return Err(malformed(format!(
                "segment at {:#x} is not page-congruent with its file offset {:#x}",
                p.p_vaddr, p.p_offset
            )));
        }
        if p.p_memsz > 0 {
            loads.push(p);
        }
    }
    if loads.is_empty() {
        return Err(malformed("no loadable segments"));
    }
    let mut sorted = loads.clone();
    sorted.sort_by_key(|p| p.p_vaddr);
    for w in sorted.windows(2) {
        if w[0].p_vaddr + w[0].p_memsz > w[1].p_vaddr {
            return Err(malformed(format!("segments at {:#x} and {:#x} overlap", w[0].p_vaddr, w[1].p_vaddr)));
        }
    }
    let exec_stack = phdrs.iter().any(|p| p.p_type == PT_GNU_STACK && p.p_flags & PF_X != 0);
    Ok(ElfImage { e_type, entry, phoff, phdrs, exec_stack })
}

impl ElfImage {
    /// The `PT_LOAD` segments with a non-zero size, in file order.
    pub fn loads(&self) -> impl Iterator<Item = &Phdr> {
        self.phdrs.iter().filter(|p| p.p_type == PT_LOAD && p.p_memsz > 0)
    }

    /// Lowest segment address (before bias).
    pub fn min_vaddr(&self) -> u64 {
        self.loads().map(|p| p.p_vaddr).min().unwrap_or(0)
    }

    /// Where the program headers are in memory (before bias), as Linux computes `AT_PHDR`.
    pub fn phdr_vaddr(&self) -> u64 {
        if let Some(p) = self.phdrs.iter().find(|p| p.p_type == PT_PHDR) {
            return p.p_vaddr;
        }
        for p in self.loads() {
            if self.phoff >= p.p_offset && self.phoff - p.p_offset < p.p_filesz {
                return p.p_vaddr + (self.phoff - p.p_offset);
            }
        }
        let first = self.loads().min_by_key(|p| p.p_offset);
        first.map_or(0, |p| p.p_vaddr.wrapping_sub(p.p_offset).wrapping_add(self.phoff))
    }
}

/// `SHF_ALLOC`: the section occupies memory at run time.
pub const SHF_ALLOC: u64 = 2;
/// Size of an ELF64 section header.
pub const SHDR_SIZE: u64 = 64;
/// `SHN_XINDEX`: the real `e_shstrndx` is in section 0's `sh_link`.
const SHN_XINDEX: u64 = 0xffff;

/// The address and size (before the load bias) of the first allocated (`SHF_ALLOC`) section
/// named `name` with a non-zero size, from the section header table (`e_shoff`, `e_shnum`,
/// `e_shstrndx`; extended numbering through section 0 is understood). Every offset is
/// bounds-checked: a missing, truncated or hostile table gives `None`, never a panic.
pub fn find_section(image: &[u8], name: &[u8]) -> Option<(u64, u64)> {
    let shoff = u64_at(image, 40)?;
    let shentsize = u64::from(u16_at(image, 58)?);
    let mut shnum = u64::from(u16_at(image, 60)?);
    let mut shstrndx = u64::from(u16_at(image, 62)?);
    if shoff == 0 || shentsize < SHDR_SIZE {
        return None;
    }
    if shnum == 0 {
        shnum = u64_at(image, shoff.checked_add(32)?)?;
    }
    if shstrndx == SHN_XINDEX {
        shstrndx = u64::from(u32_at(image, shoff.checked_add(40)?)?);
    }
    let table_end = shnum.checked_mul(shentsize)?.checked_add(shoff)?;
    if table_end > image.len() as u64 || shstrndx >= shnum {
        return None;
    }
    // Every header is inside the file from here on: `shoff + i * shentsize + 64 <= table_end`.
    let hdr = |i: u64| shoff + i * shentsize;
    let str_off = usize::try_from(u64_at(image, hdr(shstrndx) + 24)?).ok()?;
    let str_size = usize::try_from(u64_at(image, hdr(shstrndx) + 32)?).ok()?;
    let strtab = image.get(str_off..str_off.checked_add(str_size)?)?;
    (0..shnum).find_map(|i| {
        let o = hdr(i);
        let name_off = usize::try_from(u32_at(image, o)?).ok()?;
        let rest = strtab.get(name_off..)?;
        let nul = rest.iter().position(|b| *b == 0)?;
        if &rest[..nul] != name {
            return None;
        }
        let flags = u64_at(image, o + 8)?;
        let (addr, size) = (u64_at(image, o + 16)?, u64_at(image, o + 32)?);
        (flags & SHF_ALLOC != 0 && size > 0).then_some((addr, size))
    })
}
