//! ELF64 parsing and validation for static x86-64 executables.
//!
//! The structures are read with the `object` crate (its ELF definitions and bounds-checked,
//! endian-aware readers); this module adds what loading a program needs on top: the checks that
//! refuse what deja cannot run, each with its own message. A hostile or truncated image yields a
//! [`LoadError`], never a panic.

use object::elf::{self as defs, FileHeader64, ProgramHeader64};
use object::read::elf::{FileHeader as _, ProgramHeader as _, SectionHeader as _};
use object::{LittleEndian, ReadRef as _};

use crate::LoadError;

/// `ET_EXEC`.
pub const ET_EXEC: u16 = defs::ET_EXEC.0;
/// `ET_DYN`.
pub const ET_DYN: u16 = defs::ET_DYN.0;
/// `EM_X86_64`.
pub const EM_X86_64: u16 = defs::EM_X86_64.0;
/// `PT_LOAD`.
pub const PT_LOAD: u32 = defs::PT_LOAD.0;
/// `PT_INTERP`.
pub const PT_INTERP: u32 = defs::PT_INTERP.0;
/// `PT_PHDR`.
pub const PT_PHDR: u32 = defs::PT_PHDR.0;
/// `PT_GNU_STACK`.
pub const PT_GNU_STACK: u32 = defs::PT_GNU_STACK.0;
/// Segment flag: executable.
pub const PF_X: u32 = defs::PF_X.0;
/// Segment flag: writable.
pub const PF_W: u32 = defs::PF_W.0;
/// Segment flag: readable.
pub const PF_R: u32 = defs::PF_R.0;
/// Size of an ELF64 program header.
pub const PHDR_SIZE: u64 = size_of::<ProgramHeader64<LittleEndian>>() as u64;

/// x86-64 programs are little-endian: every field is read so.
const LE: LittleEndian = LittleEndian;

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

impl Phdr {
    fn read(ph: &ProgramHeader64<LittleEndian>) -> Phdr {
        Phdr {
            p_type: ph.p_type(LE).0,
            p_flags: ph.p_flags(LE).0,
            p_offset: ph.p_offset(LE),
            p_vaddr: ph.p_vaddr(LE),
            p_filesz: ph.p_filesz(LE),
            p_memsz: ph.p_memsz(LE),
        }
    }
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

fn malformed(msg: impl Into<String>) -> LoadError {
    LoadError::Malformed(msg.into())
}

/// Parses and validates `image`.
pub fn parse(image: &[u8]) -> Result<ElfImage, LoadError> {
    if image.get(..4) != Some(&defs::ELFMAG[..]) {
        return Err(LoadError::NotElf);
    }
    let Ok(header) = image.read_at::<FileHeader64<LittleEndian>>(0) else {
        return Err(malformed(format!("truncated ELF header ({} bytes, need 64)", image.len())));
    };
    let ident = header.e_ident();
    match ident.class {
        defs::ELFCLASS32 => return Err(LoadError::Not64Bit),
        defs::ELFCLASS64 => {}
        c => return Err(malformed(format!("unknown ELF class {}", c.0))),
    }
    match ident.data {
        defs::ELFDATA2LSB => {}
        defs::ELFDATA2MSB => return Err(malformed("big-endian ELF; x86-64 programs are little-endian")),
        d => return Err(malformed(format!("unknown ELF data encoding {}", d.0))),
    }
    let e_type = header.e_type(LE).0;
    let machine = header.e_machine(LE).0;
    if machine != EM_X86_64 {
        return Err(LoadError::WrongMachine(machine));
    }
    if e_type != ET_EXEC && e_type != ET_DYN {
        return Err(LoadError::NotExecutable(e_type));
    }
    let entry = header.e_entry(LE);
    let phoff = header.e_phoff(LE);
    let phentsize = u64::from(header.e_phentsize(LE));
    let phnum = header.e_phnum(LE);
    if phnum == 0 {
        return Err(malformed("no program headers"));
    }
    if phnum == defs::PN_XNUM {
        return Err(malformed("extended program header count (PN_XNUM) is not supported"));
    }
    if phentsize < PHDR_SIZE {
        return Err(malformed(format!("program header size {phentsize}, expected {PHDR_SIZE}")));
    }
    let table_end = u64::from(phnum)
        .checked_mul(phentsize)
        .and_then(|n| n.checked_add(phoff))
        .ok_or_else(|| malformed("program header table offset overflows"))?;
    if table_end > image.len() as u64 {
        return Err(malformed(format!(
            "program header table ends at {table_end:#x}, past the end of the file ({:#x})",
            image.len()
        )));
    }
    // Every entry is inside the file from here on: `phoff + i * phentsize + 56 <= table_end`.
    let phdrs = (0..u64::from(phnum))
        .map(|i| image.read_at::<ProgramHeader64<LittleEndian>>(phoff + i * phentsize).map(Phdr::read))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| malformed("truncated phdr"))?;
    if let Some(interp) = phdrs.iter().find(|p| p.p_type == PT_INTERP) {
        let bytes = image.read_bytes_at(interp.p_offset, interp.p_filesz).unwrap_or(&[]);
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

/// The address and size (before the load bias) of the first allocated (`SHF_ALLOC`) section
/// named `name` with a non-zero size, from the section header table (`e_shoff`, `e_shnum`,
/// `e_shstrndx`; extended numbering through section 0 is understood). A missing, truncated or
/// hostile table gives `None`, never a panic.
pub fn find_section(image: &[u8], name: &[u8]) -> Option<(u64, u64)> {
    let header = image.read_at::<FileHeader64<LittleEndian>>(0).ok()?;
    let sections = header.sections(LE, image).ok()?;
    sections.iter().find_map(|s| {
        if sections.section_name(LE, s).ok()? != name {
            return None;
        }
        let (addr, size) = (s.sh_addr(LE), s.sh_size(LE));
        (s.sh_flags(LE).0 & defs::SHF_ALLOC.0 != 0 && size > 0).then_some((addr, size))
    })
}
