//! What an ELF image says about its code: the executable regions and the declared roots (entry
//! point, function symbols, `.eh_frame` function starts).

use crate::prelude::*;
use gimli::{BaseAddresses, CieOrFde, EhFrame, UnwindSection as _};
use object::elf::{self as defs, FileHeader64};
use object::read::elf::{FileHeader as _, ProgramHeader as _, SectionHeader as _, SectionTable, Sym as _};
use object::{LittleEndian, ReadRef as _};

use crate::analysis::Region;
use crate::PlanError;

const LE: LittleEndian = LittleEndian;

fn bad(what: impl core::fmt::Display) -> PlanError {
    PlanError::Elf { what: what.to_string() }
}

/// What the analysis of an image reads: its executable regions (with their file offsets), every
/// loaded segment's file bytes (where jump tables are read), its declared roots, and the ranges
/// `.eh_frame` describes as signal frames (a handler's return: [`eh_frame_starts`]).
type CodeAndRoots<'a> = (Vec<Region<'a>>, Vec<Region<'a>>, Vec<u64>, Vec<(u64, u64)>);

/// The executable regions of `image`, its loaded bytes and its declared roots.
pub(crate) fn code_and_roots(image: &[u8]) -> Result<CodeAndRoots<'_>, PlanError> {
    let header = image.read_at::<FileHeader64<LittleEndian>>(0).map_err(|_| bad("truncated ELF header"))?;
    let phdrs = header.program_headers(LE, image).map_err(bad)?;
    // The file-backed part of every executable PT_LOAD: (vaddr, offset, size).
    let segments: Vec<(u64, u64, u64)> = phdrs
        .iter()
        .filter(|p| p.p_type(LE) == defs::PT_LOAD && p.p_flags(LE).0 & defs::PF_X.0 != 0)
        .map(|p| (p.p_vaddr(LE), p.p_offset(LE), p.p_filesz(LE)))
        .collect();
    let in_segment = |addr: u64, size: u64| {
        segments.iter().find(|(v, _, s)| addr >= *v && addr.checked_add(size).is_some_and(|e| e <= v + s)).copied()
    };
    let slice = |offset: u64, size: u64| -> Option<&[u8]> {
        let start = usize::try_from(offset).ok()?;
        image.get(start..start.checked_add(usize::try_from(size).ok()?)?)
    };

    let data: Vec<Region<'_>> = phdrs
        .iter()
        .filter(|p| p.p_type(LE) == defs::PT_LOAD)
        .filter_map(|p| {
            Some(Region { addr: p.p_vaddr(LE), offset: p.p_offset(LE), bytes: slice(p.p_offset(LE), p.p_filesz(LE))? })
        })
        .collect();
    let mut regions = Vec::new();
    let mut roots = vec![header.e_entry(LE)];
    let mut signal = Vec::new();
    let sections = header.sections(LE, image).ok();
    if let Some(sections) = &sections {
        for s in sections.iter() {
            let flags = s.sh_flags(LE).0;
            let wanted = defs::SHF_ALLOC.0 | defs::SHF_EXECINSTR.0;
            if flags & wanted != wanted || s.sh_type(LE) != defs::SHT_PROGBITS || s.sh_size(LE) == 0 {
                continue;
            }
            let (addr, size) = (s.sh_addr(LE), s.sh_size(LE));
            // A section is code only inside an executable segment's file bytes.
            let Some((v, o, _)) = in_segment(addr, size) else { continue };
            if let Some(bytes) = slice(o + (addr - v), size) {
                regions.push(Region { addr, offset: o + (addr - v), bytes });
            }
        }
        for kind in [defs::SHT_SYMTAB, defs::SHT_DYNSYM] {
            let Ok(symbols) = sections.symbols(LE, image, kind) else { continue };
            for sym in symbols.iter() {
                let t = sym.st_type();
                if (t == defs::STT_FUNC || t == defs::STT_GNU_IFUNC) && sym.st_shndx(LE) != defs::SHN_UNDEF {
                    roots.push(sym.st_value(LE));
                }
            }
        }
        let named = |name: &[u8]| sections.iter().find(|s| sections.section_name(LE, s).ok() == Some(name));
        if let Some(eh) = named(b".eh_frame") {
            if let Some(bytes) = slice(eh.sh_offset(LE), eh.sh_size(LE)) {
                let (starts, returns) = eh_frame_starts(bytes, eh.sh_addr(LE));
                roots.extend(starts);
                signal = returns;
            }
        }
        // Go binaries keep every function's entry in their pc-line table, stripped or not.
        if let Some(pcln) = named(b".gopclntab") {
            if let Some(bytes) = slice(pcln.sh_offset(LE), pcln.sh_size(LE)) {
                roots.extend(go_function_starts(bytes));
            }
        }
    }
    if regions.is_empty() {
        // No section headers (or none marked as code): the executable segments themselves.
        for &(v, o, s) in &segments {
            if let Some(bytes) = slice(o, s) {
                regions.push(Region { addr: v, offset: o, bytes });
            }
        }
    }
    Ok((regions, data, roots, signal))
}

/// The start of every function `.eh_frame` describes (a damaged entry ends the walk; what was
/// read before it stays), and the ranges it describes as signal frames.
///
/// A signal frame's description (augmentation `S`) is no function start: it begins a byte before
/// the code, so that an unwinder's `return address - 1` lands inside it (glibc describes
/// `__restore_rt` from the last byte of the padding before it, and descent from there decodes
/// `00 48 c7`, an `add` over the first two bytes of its `mov $15,%rax`, and a wrong instruction
/// after it). Its range is returned instead of a root: unwinders (libgcc's fallback among
/// them) recognise a signal return by its bytes, so its code is never rewritten.
fn eh_frame_starts(bytes: &[u8], addr: u64) -> (Vec<u64>, Vec<(u64, u64)>) {
    let eh = EhFrame::new(bytes, gimli::LittleEndian);
    let bases = BaseAddresses::default().set_eh_frame(addr);
    let mut entries = eh.entries(&bases);
    let (mut starts, mut signal) = (Vec::new(), Vec::new());
    while let Ok(Some(entry)) = entries.next() {
        if let CieOrFde::Fde(partial) = entry {
            if let Ok(fde) = partial.parse(EhFrame::cie_from_offset) {
                let start = fde.initial_address();
                if fde.is_signal_trampoline() {
                    signal.push((start, start.saturating_add(fde.len())));
                } else {
                    starts.push(start);
                }
            }
        }
    }
    (starts, signal)
}

/// The entry of every function a Go pc-line table (`.gopclntab`, Go 1.16 and later) lists:
/// after the header (magic, two pad bytes, the instruction size quantum, the pointer size), the
/// function count and, from Go 1.18, the text start, then offsets to the other tables; the
/// function table holds (entry, offset) pairs, the entry an offset from the text start in 32
/// bits from Go 1.18, an address before. Anything else (another version, a damaged table)
/// gives no roots.
fn go_function_starts(t: &[u8]) -> Vec<u64> {
    let u32_at = |at: usize| t.get(at..at + 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    let u64_at = |at: usize| t.get(at..at + 8).map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])));
    let (Some(magic), Some(&ptr_size)) = (u32_at(0), t.get(7)) else { return Vec::new() };
    if ptr_size != 8 {
        return Vec::new();
    }
    let word = |i: usize| u64_at(8 + 8 * i);
    let (go118, nfunc, text, functab) = match magic {
        // Go 1.18 and 1.19, Go 1.20 and later: nfunc, nfiles, textStart, funcname, cu,
        // filetab, pctab, pcln offsets.
        0xffff_fff0 | 0xffff_fff1 => (true, word(0), word(2), word(7)),
        // Go 1.16 and 1.17: nfunc, nfiles, funcname, cu, filetab, pctab, pcln offsets.
        0xffff_fffa => (false, word(0), Some(0), word(6)),
        _ => return Vec::new(),
    };
    let (Some(nfunc), Some(text), Some(functab)) = (nfunc, text, functab) else { return Vec::new() };
    let Ok(functab) = usize::try_from(functab) else { return Vec::new() };
    let stride = if go118 { 8 } else { 16 };
    (0..nfunc.min(t.len() as u64 / stride as u64) as usize)
        .map_while(|i| {
            let at = functab.checked_add(i.checked_mul(stride)?)?;
            match go118 {
                true => u32_at(at).map(|e| text.wrapping_add(u64::from(e))),
                false => u64_at(at),
            }
        })
        .collect()
}

/// The named functions of `image`'s `.symtab` (or, without one, `.dynsym`): defined `FUNC`
/// symbols with their start, size and name (Rust names demangled, without their hash), by
/// address. An image without symbols has none.
pub(crate) fn functions(image: &[u8]) -> Vec<crate::Function> {
    let Ok(header) = image.read_at::<FileHeader64<LittleEndian>>(0) else { return Vec::new() };
    let Ok(sections) = header.sections(LE, image) else { return Vec::new() };
    let mut out = Vec::new();
    for kind in [defs::SHT_SYMTAB, defs::SHT_DYNSYM] {
        let Ok(symbols) = sections.symbols(LE, image, kind) else { continue };
        for sym in symbols.iter() {
            let t = sym.st_type();
            if (t != defs::STT_FUNC && t != defs::STT_GNU_IFUNC) || sym.st_shndx(LE) == defs::SHN_UNDEF {
                continue;
            }
            let Ok(name) = symbols.symbol_name(LE, sym) else { continue };
            if name.is_empty() {
                continue;
            }
            out.push(crate::Function {
                addr: sym.st_value(LE),
                size: sym.st_size(LE),
                name: demangle(&String::from_utf8_lossy(name)),
                file: None,
            });
        }
        if !out.is_empty() {
            break;
        }
    }
    out.sort_by(|a, b| (a.addr, &a.name).cmp(&(b.addr, &b.name)));
    out.dedup_by_key(|f| f.addr);
    source_files(image, &sections, &mut out);
    out
}

/// Sets the source file of each of `funcs` from `image`'s DWARF line tables (`addr2line`), if
/// it has them uncompressed; leaves them as they are otherwise.
fn source_files(image: &[u8], sections: &SectionTable<'_, FileHeader64<LittleEndian>>, funcs: &mut [crate::Function]) {
    let load = |id: gimli::SectionId| -> Result<gimli::EndianSlice<'_, gimli::LittleEndian>, gimli::Error> {
        let data = sections
            .section_by_name(LE, id.name().as_bytes())
            .filter(|(_, s)| s.sh_flags(LE).0 & defs::SHF_COMPRESSED.0 == 0)
            .and_then(|(_, s)| s.data(LE, image).ok())
            .unwrap_or(&[]);
        Ok(gimli::EndianSlice::new(data, gimli::LittleEndian))
    };
    if sections.section_by_name(LE, b".debug_line").is_none() {
        return;
    }
    let Ok(dwarf) = gimli::Dwarf::load(load) else { return };
    let Ok(ctx) = addr2line::Context::from_dwarf(dwarf) else { return };
    for f in funcs {
        if let Ok(Some(loc)) = ctx.find_location(f.addr) {
            f.file = loc.file.map(str::to_string);
        }
    }
}

/// A Rust symbol's readable name (`std::io::stdio::print`), or the name as it is.
fn demangle(name: &str) -> String {
    match rustc_demangle::try_demangle(name) {
        Ok(d) => format!("{d:#}"),
        Err(_) => name.to_string(),
    }
}
