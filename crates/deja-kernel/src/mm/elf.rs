//! ELF64 parsing and validation for static x86-64 executables.
//!
//! The structures are read with the `object` crate (its ELF definitions and bounds-checked,
//! endian-aware readers); this module adds what loading a program needs on top: the checks that
//! refuse what deja cannot run, each with its own message. A hostile or truncated image yields a
//! [`LoadError`] (an [`ElfError`] says what is damaged), never a panic.

use crate::prelude::*;
use object::elf::{self as defs, FileHeader64, ProgramHeader64};
use object::read::elf::{FileHeader as _, ProgramHeader as _, SectionHeader as _};
use object::{LittleEndian, ReadRef as _};
use snafu::{IntoError, NoneError, OptionExt as _, ResultExt as _, Snafu};

use crate::mm::user_layout;
use crate::{DynamicSnafu, LoadError, MalformedSnafu, PAGE_SIZE};

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
    /// The dynamic loader `PT_INTERP` names, for a dynamically linked program.
    pub interp: Option<String>,
}

/// What is damaged in an ELF image that is otherwise one deja would run.
#[derive(Debug, Clone, PartialEq, Eq, Snafu)]
#[snafu(visibility(pub(crate)))]
pub enum ElfError {
    /// The file is shorter than an ELF64 header.
    #[snafu(display("truncated ELF header ({len} bytes, need 64)"))]
    TruncatedHeader {
        /// The file's length.
        len: usize,
    },
    /// `EI_CLASS` is neither 32- nor 64-bit.
    #[snafu(display("unknown ELF class {class}"))]
    UnknownClass {
        /// `EI_CLASS`.
        class: u8,
    },
    /// `EI_DATA` says big-endian.
    #[snafu(display("big-endian ELF; x86-64 programs are little-endian"))]
    BigEndian,
    /// `EI_DATA` is neither little- nor big-endian.
    #[snafu(display("unknown ELF data encoding {encoding}"))]
    UnknownEncoding {
        /// `EI_DATA`.
        encoding: u8,
    },
    /// `e_phnum` is 0.
    #[snafu(display("no program headers"))]
    NoProgramHeaders,
    /// `e_phnum` is `PN_XNUM`: the count would be in section 0.
    #[snafu(display("extended program header count (PN_XNUM) is not supported"))]
    ExtendedPhnum,
    /// `e_phentsize` is smaller than a program header.
    #[snafu(display("program header size {size}, expected {PHDR_SIZE}"))]
    PhentSize {
        /// `e_phentsize`.
        size: u16,
    },
    /// `e_phoff + e_phnum * e_phentsize` overflows.
    #[snafu(display("program header table offset overflows"))]
    PhdrTableOverflows,
    /// The program header table ends past the end of the file.
    #[snafu(display("program header table ends at {end:#x}, past the end of the file ({len:#x})"))]
    PhdrTablePastEnd {
        /// Where the table ends.
        end: u64,
        /// The file's length.
        len: usize,
    },
    /// A program header inside the table could not be read.
    #[snafu(display("program header {index} cannot be read"))]
    Phdr {
        /// Its index.
        index: u64,
    },
    /// `p_offset + p_filesz` overflows.
    #[snafu(display("segment at {vaddr:#x}: its file range overflows"))]
    SegmentFileOverflows {
        /// `p_vaddr`.
        vaddr: u64,
    },
    /// A segment reads bytes past the end of the file.
    #[snafu(display("segment at {vaddr:#x} reads file bytes up to {end:#x}, past the end of the file ({len:#x})"))]
    SegmentPastEnd {
        /// `p_vaddr`.
        vaddr: u64,
        /// `p_offset + p_filesz`.
        end: u64,
        /// The file's length.
        len: usize,
    },
    /// A segment has more file bytes than memory.
    #[snafu(display("segment at {vaddr:#x} has p_filesz > p_memsz"))]
    FileszOverMemsz {
        /// `p_vaddr`.
        vaddr: u64,
    },
    /// A segment ends above user space.
    #[snafu(display("segment at {vaddr:#x} (size {memsz:#x}) does not fit in user space"))]
    OutsideUserSpace {
        /// `p_vaddr`.
        vaddr: u64,
        /// `p_memsz`.
        memsz: u64,
    },
    /// A segment's address and file offset differ within a page.
    #[snafu(display("segment at {vaddr:#x} is not page-congruent with its file offset {offset:#x}"))]
    NotCongruent {
        /// `p_vaddr`.
        vaddr: u64,
        /// `p_offset`.
        offset: u64,
    },
    /// No `PT_LOAD` segment has a size.
    #[snafu(display("no loadable segments"))]
    NoLoads,
    /// Two segments share addresses.
    #[snafu(display("segments at {first:#x} and {second:#x} overlap"))]
    Overlap {
        /// The lower `p_vaddr`.
        first: u64,
        /// The higher one.
        second: u64,
    },
    /// A segment's address overflows once the load bias is applied.
    #[snafu(display("segment at {vaddr:#x} (size {memsz:#x}) overflows at the load address"))]
    BiasOverflows {
        /// `p_vaddr`.
        vaddr: u64,
        /// `p_memsz`.
        memsz: u64,
    },
    /// A segment lands outside the range the loader maps programs into.
    #[snafu(display("segment {start:#x}..{end:#x} is outside the loadable range {low:#x}..{high:#x}"))]
    OutsideLoadable {
        /// Its first address after the load bias.
        start: u64,
        /// Its end after the load bias.
        end: u64,
        /// The lowest loadable address.
        low: u64,
        /// The end of the loadable range (the bottom of the stack).
        high: u64,
    },
}

/// `Ok` if `ok`, else the load error of the damage `damage` describes.
fn elf_check(ok: bool, damage: impl IntoError<ElfError, Source = NoneError>) -> Result<(), LoadError> {
    if ok {
        Ok(())
    } else {
        Err(MalformedSnafu.into_error(damage.into_error(NoneError)))
    }
}

/// Parses and validates `image`.
pub fn parse(image: &[u8]) -> Result<ElfImage, LoadError> {
    if image.get(..4) != Some(&defs::ELFMAG[..]) {
        return Err(LoadError::NotElf);
    }
    let header = image
        .read_at::<FileHeader64<LittleEndian>>(0)
        .ok()
        .context(TruncatedHeaderSnafu { len: image.len() })
        .context(MalformedSnafu)?;
    let ident = header.e_ident();
    match ident.class {
        defs::ELFCLASS32 => return Err(LoadError::Not64Bit),
        defs::ELFCLASS64 => {}
        c => return Err(MalformedSnafu.into_error(UnknownClassSnafu { class: c.0 }.build())),
    }
    match ident.data {
        defs::ELFDATA2LSB => {}
        defs::ELFDATA2MSB => return Err(MalformedSnafu.into_error(BigEndianSnafu.build())),
        d => return Err(MalformedSnafu.into_error(UnknownEncodingSnafu { encoding: d.0 }.build())),
    }
    let e_type = header.e_type(LE).0;
    let machine = header.e_machine(LE).0;
    if machine != EM_X86_64 {
        return Err(LoadError::WrongMachine { machine });
    }
    if e_type != ET_EXEC && e_type != ET_DYN {
        return Err(LoadError::NotExecutable { e_type });
    }
    let entry = header.e_entry(LE);
    let phoff = header.e_phoff(LE);
    let phentsize = header.e_phentsize(LE);
    let phnum = header.e_phnum(LE);
    elf_check(phnum != 0, NoProgramHeadersSnafu)?;
    elf_check(phnum != defs::PN_XNUM, ExtendedPhnumSnafu)?;
    elf_check(u64::from(phentsize) >= PHDR_SIZE, PhentSizeSnafu { size: phentsize })?;
    let phentsize = u64::from(phentsize);
    let table_end = u64::from(phnum)
        .checked_mul(phentsize)
        .and_then(|n| n.checked_add(phoff))
        .context(PhdrTableOverflowsSnafu)
        .context(MalformedSnafu)?;
    elf_check(table_end <= image.len() as u64, PhdrTablePastEndSnafu { end: table_end, len: image.len() })?;
    // Every entry is inside the file from here on: `phoff + i * phentsize + 56 <= table_end`.
    let phdrs = (0..u64::from(phnum))
        .map(|index| {
            let ph = image.read_at::<ProgramHeader64<LittleEndian>>(phoff + index * phentsize);
            ph.ok().map(Phdr::read).context(PhdrSnafu { index }).context(MalformedSnafu)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let interp = match phdrs.iter().find(|p| p.p_type == PT_INTERP) {
        Some(p) => {
            let bytes = image.read_bytes_at(p.p_offset, p.p_filesz).unwrap_or(&[]);
            let bytes = bytes.split(|b| *b == 0).next().unwrap_or(&[]);
            match core::str::from_utf8(bytes) {
                Ok(name) if name.starts_with('/') => Some(name.to_string()),
                _ => {
                    let name = String::from_utf8_lossy(bytes).into_owned();
                    let interpreter = if name.is_empty() { "<unreadable>".to_string() } else { name };
                    return DynamicSnafu { interpreter }.fail();
                }
            }
        }
        None => None,
    };
    if e_type == ET_DYN && entry == 0 {
        return Err(LoadError::NotExecutable { e_type });
    }
    let mut loads: Vec<&Phdr> = Vec::new();
    for p in phdrs.iter().filter(|p| p.p_type == PT_LOAD) {
        let vaddr = p.p_vaddr;
        let end =
            p.p_offset.checked_add(p.p_filesz).context(SegmentFileOverflowsSnafu { vaddr }).context(MalformedSnafu)?;
        elf_check(end <= image.len() as u64, SegmentPastEndSnafu { vaddr, end, len: image.len() })?;
        elf_check(p.p_filesz <= p.p_memsz, FileszOverMemszSnafu { vaddr })?;
        let fits = vaddr.checked_add(p.p_memsz).is_some_and(|e| e <= user_layout::USER_END);
        elf_check(fits, OutsideUserSpaceSnafu { vaddr, memsz: p.p_memsz })?;
        elf_check((vaddr ^ p.p_offset) & (PAGE_SIZE - 1) == 0, NotCongruentSnafu { vaddr, offset: p.p_offset })?;
        if p.p_memsz > 0 {
            loads.push(p);
        }
    }
    elf_check(!loads.is_empty(), NoLoadsSnafu)?;
    let mut sorted = loads.clone();
    sorted.sort_by_key(|p| p.p_vaddr);
    for w in sorted.windows(2) {
        let (first, second) = (w[0].p_vaddr, w[1].p_vaddr);
        elf_check(first + w[0].p_memsz <= second, OverlapSnafu { first, second })?;
    }
    let exec_stack = phdrs.iter().any(|p| p.p_type == PT_GNU_STACK && p.p_flags & PF_X != 0);
    Ok(ElfImage { e_type, entry, phoff, phdrs, exec_stack, interp })
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

/// What a dynamically linked program or library asks of the loader besides itself: the
/// libraries it needs (`DT_NEEDED`, in order) and the directories to look in first
/// (`:`-separated in the file, `$ORIGIN` unexpanded). The two lists are kept apart because the
/// loader treats them differently: an object's `DT_RPATH` is searched only when it has no
/// `DT_RUNPATH`, but it is also searched for the libraries its dependencies need.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DynamicNeeds {
    /// `DT_NEEDED` names.
    pub needed: Vec<String>,
    /// `DT_RUNPATH` directories.
    pub runpath: Vec<String>,
    /// `DT_RPATH` directories (kept even when a `DT_RUNPATH` overrides them).
    pub rpath: Vec<String>,
}

/// The dynamic section's needs of `image` (through its section headers); empty for an image
/// without one, and for a damaged table.
pub fn dynamic_needs(image: &[u8]) -> DynamicNeeds {
    use object::read::elf::Dyn as _;
    let mut needs = DynamicNeeds::default();
    let Ok(header) = image.read_at::<FileHeader64<LittleEndian>>(0) else { return needs };
    let Ok(sections) = header.sections(LE, image) else { return needs };
    let Ok(table) = sections.dynamic_table(LE, image) else { return needs };
    for d in table.dynamics() {
        let tag = d.tag(LE);
        if tag == defs::DT_NULL {
            break;
        }
        let Ok(s) = d.string(LE, *table.strings()) else { continue };
        let s = String::from_utf8_lossy(s).into_owned();
        match tag {
            defs::DT_NEEDED => needs.needed.push(s),
            defs::DT_RUNPATH => needs.runpath.extend(s.split(':').filter(|p| !p.is_empty()).map(String::from)),
            defs::DT_RPATH => needs.rpath.extend(s.split(':').filter(|p| !p.is_empty()).map(String::from)),
            _ => {}
        }
    }
    needs
}
