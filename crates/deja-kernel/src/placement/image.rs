//! The kernel image made ready to map: `deja-guestkernel` is a static position-independent
//! executable for `x86_64-unknown-none`; [`Image::parse`] lays its loaded segments out flat at
//! [`IMAGE_BASE`], applies its `R_X86_64_RELATIVE` relocations (the only kind a static PIE with
//! no dynamic symbols has), gives each page the union of the protections of the segments it
//! holds, and finds the five addresses the monitor needs by their symbols: where it boots, where
//! `LSTAR` points, where the jump sites' gate leads, the one instruction that calls the host, and
//! where an exception enters. Anything else (another relocation kind, thread-local storage, a
//! segment past [`IMAGE_MAX`], a missing symbol) is an
//! [`ImageError`] that says what, never a panic.

use crate::prelude::*;
use object::elf::{self as defs, FileHeader64};
use object::read::elf::{FileHeader as _, ProgramHeader as _, Rela as _, SectionHeader as _, Sym as _};
use object::{LittleEndian, ReadRef as _};
use snafu::Snafu;

use super::{IMAGE_BASE, IMAGE_MAX};
use crate::mm::mem::Prot;
use crate::PAGE_SIZE;

const LE: LittleEndian = LittleEndian;

/// The symbol of the image's boot entry: the monitor enters it in ring 3 with RSP at
/// [`super::STACK_TOP`].
pub const BOOT_SYMBOL: &str = "deja_boot";
/// The symbol `LSTAR` points at: every `syscall` of the program lands there.
pub const SYSCALL_SYMBOL: &str = "deja_syscall_entry";
/// The symbol the jump sites' gate leads to (`crate::host::jumps`): a planned `syscall` site
/// reaches the kernel there without a trap.
pub const JUMP_SYMBOL: &str = "deja_jump_entry";
/// The symbol the monitor enters with a program's exception in the boot block's frame.
pub const EXCEPTION_SYMBOL: &str = "deja_exception_entry";
/// The symbol of the image's one `out` to deja's port: an exit at it is a host call.
pub const HOSTCALL_SYMBOL: &str = "deja_hostcall";

/// Why an image cannot be mapped.
#[derive(Debug, Snafu, PartialEq, Eq)]
#[snafu(visibility(pub(crate)))]
pub enum ImageError {
    /// The bytes are not a 64-bit little-endian x86-64 ELF file.
    #[snafu(display("the kernel image is not an x86-64 ELF file: {what}"))]
    NotElf {
        /// What is wrong.
        what: String,
    },
    /// The file is not position independent (`ET_DYN`).
    #[snafu(display("the kernel image is not position independent (ELF type {kind})"))]
    NotPie {
        /// Its `e_type`.
        kind: u16,
    },
    /// A segment kind the window does not provide.
    #[snafu(display("the kernel image has a segment of type {kind:#x} the window does not provide (thread-local storage or an interpreter)"))]
    Segment {
        /// Its `p_type`.
        kind: u32,
    },
    /// The loaded segments span more than the window gives the image, or none is loaded.
    #[snafu(display("the kernel image spans {span} bytes; the window gives it 1 to {IMAGE_MAX}"))]
    Span {
        /// Bytes from the lowest to the highest loaded address.
        span: u64,
    },
    /// A relocation other than `R_X86_64_RELATIVE`, or one outside the loaded bytes.
    #[snafu(display("the kernel image has a relocation the loader does not apply: type {kind} at {at:#x}"))]
    Relocation {
        /// Its type.
        kind: u32,
        /// Its offset.
        at: u64,
    },
    /// A symbol the monitor needs is missing.
    #[snafu(display("the kernel image has no symbol {name}"))]
    Symbol {
        /// The symbol.
        name: &'static str,
    },
}

/// The image as it lies in the window, from [`IMAGE_BASE`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    /// The bytes from [`IMAGE_BASE`], a whole number of pages: the segments' file bytes, zeros
    /// for the rest (their `.bss` and the gaps between them), relocated.
    pub bytes: Vec<u8>,
    /// Each page's protection, in order.
    pub prots: Vec<Prot>,
    /// Where the image boots ([`BOOT_SYMBOL`]).
    pub boot: u64,
    /// Where `LSTAR` points ([`SYSCALL_SYMBOL`]).
    pub syscall_entry: u64,
    /// Where the jump sites' gate leads ([`JUMP_SYMBOL`]).
    pub jump_entry: u64,
    /// The address of the host-call instruction ([`HOSTCALL_SYMBOL`]).
    pub hostcall: u64,
    /// Where the monitor enters with an exception ([`EXCEPTION_SYMBOL`]).
    pub exception_entry: u64,
    /// How many relocations were applied.
    pub relocations: usize,
}

impl Image {
    /// Lays `elf` out at [`IMAGE_BASE`]; see the module's docs.
    pub fn parse(elf: &[u8]) -> Result<Image, ImageError> {
        let not_elf = |what: &str| ImageError::NotElf { what: what.to_string() };
        let header = elf.read_at::<FileHeader64<LittleEndian>>(0).map_err(|_| not_elf("truncated header"))?;
        if !header.is_supported() || header.is_big_endian() || header.e_machine(LE) != defs::EM_X86_64 {
            return Err(not_elf("not ELF64 little-endian x86-64"));
        }
        if header.e_type(LE) != defs::ET_DYN {
            return Err(ImageError::NotPie { kind: header.e_type(LE).0 });
        }
        let phdrs = header.program_headers(LE, elf).map_err(|_| not_elf("program headers out of the file"))?;
        let mut loads = Vec::new();
        for p in phdrs {
            let kind = p.p_type(LE);
            if kind == defs::PT_TLS || kind == defs::PT_INTERP {
                return Err(ImageError::Segment { kind: kind.0 });
            }
            if kind != defs::PT_LOAD || p.p_memsz(LE) == 0 {
                continue;
            }
            let (vaddr, memsz, filesz, offset) = (p.p_vaddr(LE), p.p_memsz(LE), p.p_filesz(LE), p.p_offset(LE));
            let end = vaddr.checked_add(memsz).filter(|e| *e <= IMAGE_MAX && filesz <= memsz);
            let end = end.ok_or(ImageError::Span { span: vaddr.saturating_add(memsz) })?;
            let file =
                elf.read_bytes_at(offset, filesz).map_err(|_| not_elf("a segment's bytes lie outside the file"))?;
            loads.push((vaddr, end, file, flags_prot(p.p_flags(LE).0)));
        }
        let span = loads.iter().map(|l| l.1).max().unwrap_or(0);
        if span == 0 {
            return Err(ImageError::Span { span });
        }
        let pages = span.div_ceil(PAGE_SIZE);
        let mut bytes = vec![0u8; (pages * PAGE_SIZE) as usize];
        let mut prots = vec![Prot::NONE; pages as usize];
        for (vaddr, end, file, prot) in &loads {
            bytes[*vaddr as usize..*vaddr as usize + file.len()].copy_from_slice(file);
            for page in vaddr / PAGE_SIZE..end.div_ceil(PAGE_SIZE) {
                prots[page as usize] = Prot(prots[page as usize].0 | prot.0);
            }
        }
        let sections = header.sections(LE, elf).map_err(|_| not_elf("section headers out of the file"))?;
        let mut relocations = 0;
        for s in sections.iter() {
            if s.sh_type(LE) == defs::SHT_REL || s.sh_type(LE) == defs::SHT_RELR {
                return Err(ImageError::Relocation { kind: 0, at: s.sh_addr(LE) });
            }
            let Ok(Some((relas, _))) = s.rela(LE, elf) else { continue };
            for r in relas {
                let (kind, at) = (r.r_type(LE, false), r.r_offset(LE));
                let bad = ImageError::Relocation { kind: kind.0, at };
                if kind != defs::R_X86_64_RELATIVE {
                    return Err(bad);
                }
                let slot = at.checked_add(8).filter(|e| *e <= bytes.len() as u64).ok_or(bad)?;
                let value = IMAGE_BASE.wrapping_add(r.r_addend(LE) as u64);
                bytes[at as usize..slot as usize].copy_from_slice(&value.to_le_bytes());
                relocations += 1;
            }
        }
        let symbol = |name: &'static str| -> Result<u64, ImageError> {
            let symbols = sections.symbols(LE, elf, defs::SHT_SYMTAB).ok();
            let found = symbols.as_ref().and_then(|t| {
                t.iter()
                    .find(|s| s.st_shndx(LE) != defs::SHN_UNDEF && t.symbol_name(LE, s).ok() == Some(name.as_bytes()))
            });
            let value = found.map(|s| s.st_value(LE)).filter(|v| *v < span);
            value.map(|v| IMAGE_BASE + v).ok_or(ImageError::Symbol { name })
        };
        Ok(Image {
            boot: symbol(BOOT_SYMBOL)?,
            syscall_entry: symbol(SYSCALL_SYMBOL)?,
            jump_entry: symbol(JUMP_SYMBOL)?,
            hostcall: symbol(HOSTCALL_SYMBOL)?,
            exception_entry: symbol(EXCEPTION_SYMBOL)?,
            bytes,
            prots,
            relocations,
        })
    }

    /// The runs of pages with one protection: (address, length, protection), in order.
    pub fn runs(&self) -> Vec<(u64, u64, Prot)> {
        let mut runs: Vec<(u64, u64, Prot)> = Vec::new();
        for (i, prot) in self.prots.iter().enumerate() {
            let at = IMAGE_BASE + i as u64 * PAGE_SIZE;
            match runs.last_mut() {
                Some(last) if last.2 == *prot && last.0 + last.1 == at => last.1 += PAGE_SIZE,
                _ => runs.push((at, PAGE_SIZE, *prot)),
            }
        }
        runs
    }
}

/// A segment's `PF_*` flags as page protections.
fn flags_prot(flags: u32) -> Prot {
    let mut p = 0;
    if flags & defs::PF_R.0 != 0 {
        p |= Prot::READ.0;
    }
    if flags & defs::PF_W.0 != 0 {
        p |= Prot::WRITE.0;
    }
    if flags & defs::PF_X.0 != 0 {
        p |= Prot::EXEC.0;
    }
    Prot(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ELF64 static PIE: one RWX segment of `body`, one `.rela.dyn` section and a
    /// symbol table naming the five entries at offsets 0x10, 0x20, 0x30, 0x40, 0x50.
    fn pie(relas: &[(u64, u32, i64)], body_len: usize) -> Vec<u8> {
        use object::write::elf::{FileHeader, ProgramHeader, Rel, SectionHeader, Sym, Writer};
        let mut out = Vec::new();
        let mut w = Writer::new(object::Endianness::Little, true, &mut out);
        w.reserve_file_header();
        w.reserve_program_headers(1);
        let body_at = w.reserve(body_len as u64, 4096);
        let names: Vec<_> = [BOOT_SYMBOL, SYSCALL_SYMBOL, HOSTCALL_SYMBOL, EXCEPTION_SYMBOL, JUMP_SYMBOL]
            .iter()
            .map(|n| w.add_string(n.as_bytes()))
            .collect();
        let rela_name = w.add_section_name(b".rela.dyn");
        let text_name = w.add_section_name(b".text");
        w.reserve_null_section_index();
        let text = w.reserve_section_index();
        w.reserve_section_index();
        w.reserve_null_symbol_index();
        for _ in &names {
            w.reserve_symbol_index(Some(text));
        }
        let symtab = w.reserve_symtab_section_index();
        w.reserve_strtab_section_index();
        w.reserve_shstrtab_section_index();
        let rela_at = w.reserve_relocations(relas.len(), true);
        w.reserve_symtab();
        w.reserve_strtab().unwrap();
        w.reserve_shstrtab().unwrap();
        w.reserve_section_headers();
        w.write_file_header(&FileHeader {
            os_abi: defs::OsAbi(0),
            abi_version: 0,
            e_type: defs::ET_DYN,
            e_machine: defs::EM_X86_64,
            e_entry: 0x10,
            e_flags: defs::FileFlags(0),
        })
        .unwrap();
        w.write_align_program_headers();
        w.write_program_header(&ProgramHeader {
            p_type: defs::PT_LOAD,
            p_flags: defs::ProgramFlags(defs::PF_R.0 | defs::PF_W.0 | defs::PF_X.0),
            p_offset: body_at,
            p_vaddr: 0,
            p_paddr: 0,
            p_filesz: body_len as u64,
            p_memsz: body_len as u64 + 4096,
            p_align: 4096,
        });
        w.write_align(4096);
        w.write(&vec![0xccu8; body_len]);
        w.write_align_relocation();
        for (at, kind, addend) in relas {
            w.write_relocation(
                true,
                &Rel { r_offset: *at, r_sym: 0, r_type: defs::RelocationType(*kind), r_addend: *addend },
            );
        }
        w.write_null_symbol();
        for (i, n) in names.iter().enumerate() {
            let st_name = w.string_offset(Some(*n));
            w.write_symbol(&Sym {
                st_name,
                section: Some(text.0),
                st_info: defs::SymbolInfo(0x12),
                st_other: defs::SymbolOther(0),
                st_shndx: defs::SymbolSection(0),
                st_value: 0x10 * (i as u64 + 1),
                st_size: 0,
            });
        }
        w.write_strtab();
        w.write_shstrtab();
        w.write_null_section_header();
        let sh_name = w.section_name_offset(Some(text_name));
        w.write_section_header(&SectionHeader {
            sh_name,
            sh_type: defs::SHT_PROGBITS,
            sh_flags: defs::SectionFlags(defs::SHF_ALLOC.0 | defs::SHF_EXECINSTR.0),
            sh_addr: 0,
            sh_offset: body_at,
            sh_size: body_len as u64,
            sh_link: 0,
            sh_info: 0,
            sh_addralign: 16,
            sh_entsize: 0,
        });
        w.write_relocation_section_header(rela_name, text, symtab, rela_at, relas.len(), true);
        w.write_symtab_section_header(1);
        w.write_strtab_section_header();
        w.write_shstrtab_section_header();
        out
    }

    const RELATIVE: u32 = defs::R_X86_64_RELATIVE.0;

    #[test]
    fn a_static_pie_is_laid_out_relocated_and_its_entries_found() {
        let image = Image::parse(&pie(&[(0x100, RELATIVE, 0x40), (0x108, RELATIVE, 0x1000)], 0x200)).unwrap();
        assert_eq!(image.bytes.len(), 0x2000, "0x200 bytes of file and 0x1000 of bss: two pages");
        assert_eq!(image.prots, vec![Prot(7), Prot(7)]);
        assert_eq!(image.runs(), vec![(IMAGE_BASE, 0x2000, Prot(7))]);
        assert_eq!(image.bytes[0x100..0x108], (IMAGE_BASE + 0x40).to_le_bytes());
        assert_eq!(image.bytes[0x108..0x110], (IMAGE_BASE + 0x1000).to_le_bytes());
        assert_eq!(image.bytes[0x110], 0xcc, "bytes no relocation names are the file's");
        assert_eq!(image.bytes[0x1fff], 0, "bss is zero");
        assert_eq!(
            (image.boot, image.syscall_entry, image.hostcall),
            (IMAGE_BASE + 0x10, IMAGE_BASE + 0x20, IMAGE_BASE + 0x30)
        );
        assert_eq!((image.exception_entry, image.jump_entry), (IMAGE_BASE + 0x40, IMAGE_BASE + 0x50));
        assert_eq!(image.relocations, 2);
    }

    #[test]
    fn what_the_loader_cannot_apply_is_refused_with_what_it_is() {
        let absolute = defs::R_X86_64_64.0;
        assert_eq!(
            Image::parse(&pie(&[(0x100, absolute, 0)], 0x200)),
            Err(ImageError::Relocation { kind: absolute, at: 0x100 })
        );
        assert_eq!(
            Image::parse(&pie(&[(0x1ffc, RELATIVE, 0)], 0x200)),
            Err(ImageError::Relocation { kind: RELATIVE, at: 0x1ffc }),
            "a relocation whose 8 bytes pass the image's end"
        );
        assert!(matches!(Image::parse(b"\x7fELF"), Err(ImageError::NotElf { .. })));
        let mut exec = pie(&[], 0x200);
        exec[16] = defs::ET_EXEC.0 as u8;
        assert_eq!(Image::parse(&exec), Err(ImageError::NotPie { kind: 2 }));
        let mut truncated = pie(&[], 0x200);
        truncated.truncate(0x1100);
        assert!(Image::parse(&truncated).is_err());
    }

    #[test]
    fn no_bytes_of_a_hostile_image_panic_the_loader() {
        let good = pie(&[(0x100, RELATIVE, 0x40)], 0x200);
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..2000 {
            let mut bad = good.clone();
            for _ in 0..4 {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let at = (state % bad.len() as u64) as usize;
                bad[at] = (state >> 32) as u8;
            }
            let _ = Image::parse(&bad);
        }
    }
}
