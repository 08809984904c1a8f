//! Writing the small ELF shared objects deja gives programs: its vDSO ([`crate::time::vdso`])
//! and `libvoidstar.so` ([`crate::record::voidstar`]). Each is one read-and-execute `PT_LOAD`
//! of position-independent code with no relocations, a `PT_DYNAMIC` with a SysV hash table, the
//! dynamic symbols and their strings, and optionally one version definition for every symbol
//! (the vDSO's `LINUX_2.6`) and a `PT_GNU_STACK` (a library `dlopen` loads, so that the loader
//! does not make the stack executable). Written with `object`'s ELF writer; the code is
//! assembled by the caller for the offset its text lands at.

use crate::prelude::*;

use object::elf;
use object::write::elf::{FileHeader, ProgramHeader, SectionHeader, Sym, Verdef, Writer};
use object::Endianness;

use crate::PAGE_SIZE;

/// Why an image could not be built (a bug in deja, never the program's doing): the assembler's
/// or the ELF writer's message. Not an `Error` itself, so that every error with a message
/// converts into it with `?` (iced-x86's errors are `Error`s only when it has `std`).
pub(crate) struct BuildError(pub String);

impl<E: core::fmt::Display> From<E> for BuildError {
    fn from(e: E) -> Self {
        BuildError(e.to_string())
    }
}

/// Each function's start and length relative to the image.
pub(crate) type Spans = Vec<(u64, u64)>;

/// Machine code and its functions' [`Spans`].
pub(crate) type Assembled = (Vec<u8>, Spans);

/// What a shared object holds besides its code.
pub(crate) struct Layout<'a> {
    /// `DT_SONAME`.
    pub soname: &'a str,
    /// The one version every symbol has (`LINUX_2.6`), if any.
    pub version: Option<&'a str>,
    /// The dynamic symbols: name, global (else weak), and the function it names (an index in
    /// the spans the code's assembler returns).
    pub symbols: &'a [(&'a str, bool, usize)],
    /// SysV hash buckets (any positive number works).
    pub buckets: u32,
    /// Add a `PT_GNU_STACK` that asks for no executable stack.
    pub gnu_stack: bool,
}

/// Writes the shared object `l` describes, with the code `assemble` gives for the offset of its
/// text; returns its bytes and the functions' spans.
pub(crate) fn write(
    l: &Layout<'_>,
    assemble: impl FnOnce(u64) -> Result<Assembled, BuildError>,
) -> Result<(Vec<u8>, Spans), BuildError> {
    let mut out = Vec::new();
    let mut w = Writer::new(Endianness::Little, true, &mut out);
    // Phase one: reserve every range, in file order.
    w.reserve_file_header();
    w.reserve_program_headers(if l.gnu_stack { 3 } else { 2 });
    let soname = w.add_dynamic_string(l.soname.as_bytes());
    let version = l.version.map(|v| w.add_dynamic_string(v.as_bytes()));
    let name_ids: Vec<_> = l.symbols.iter().map(|(n, _, _)| w.add_dynamic_string(n.as_bytes())).collect();
    w.reserve_null_dynamic_symbol_index();
    for _ in l.symbols {
        w.reserve_dynamic_symbol_index();
    }
    let symbol_count = l.symbols.len() as u32 + 1;
    let hash_off = w.reserve_hash(l.buckets, symbol_count);
    let dynsym_off = w.reserve_dynsym();
    let dynstr_off = w.reserve_dynstr()?;
    let versions = version.map(|_| (w.reserve_gnu_versym(), w.reserve_gnu_verdef(2, 2)));
    let dynamic_entries = if versions.is_some() { 10 } else { 7 };
    let dynamic_off = w.reserve_dynamic(dynamic_entries);
    let text_off = w.reserve(0, 16);
    let (code, spans) = assemble(text_off)?;
    w.reserve(code.len() as u64, 1);
    let _ = w.reserve_null_section_index();
    let _ = w.reserve_hash_section_index();
    let _ = w.reserve_dynsym_section_index();
    let _ = w.reserve_dynstr_section_index();
    if versions.is_some() {
        let _ = w.reserve_gnu_versym_section_index();
        let _ = w.reserve_gnu_verdef_section_index();
    }
    let _ = w.reserve_dynamic_section_index();
    let text_name = w.add_section_name(b".text");
    let text_idx = w.reserve_section_index();
    let _ = w.reserve_shstrtab_section_index();
    w.reserve_shstrtab()?;
    w.reserve_section_headers();
    let len = w.reserved_len();

    // Phase two: write in the same order.
    w.write_file_header(&FileHeader {
        os_abi: elf::ELFOSABI_NONE,
        abi_version: 0,
        e_type: elf::ET_DYN,
        e_machine: elf::EM_X86_64,
        e_entry: 0,
        e_flags: Default::default(),
    })?;
    w.write_align_program_headers();
    w.write_program_header(&ProgramHeader {
        p_type: elf::PT_LOAD,
        p_flags: elf::PF_R | elf::PF_X,
        p_offset: 0,
        p_vaddr: 0,
        p_paddr: 0,
        p_filesz: len,
        p_memsz: len,
        p_align: PAGE_SIZE,
    });
    let dynamic_len = (dynamic_entries * 16) as u64;
    w.write_program_header(&ProgramHeader {
        p_type: elf::PT_DYNAMIC,
        p_flags: elf::PF_R,
        p_offset: dynamic_off,
        p_vaddr: dynamic_off,
        p_paddr: dynamic_off,
        p_filesz: dynamic_len,
        p_memsz: dynamic_len,
        p_align: 8,
    });
    if l.gnu_stack {
        w.write_program_header(&ProgramHeader {
            p_type: elf::PT_GNU_STACK,
            p_flags: elf::PF_R | elf::PF_W,
            p_offset: 0,
            p_vaddr: 0,
            p_paddr: 0,
            p_filesz: 0,
            p_memsz: 0,
            p_align: 16,
        });
    }
    let hashes: Vec<u32> = l.symbols.iter().map(|(n, _, _)| elf::hash(n.as_bytes())).collect();
    w.write_hash(l.buckets, symbol_count, |i| if i == 0 { None } else { hashes.get(i as usize - 1).copied() });
    w.write_null_dynamic_symbol();
    for (i, &(_, global, function)) in l.symbols.iter().enumerate() {
        let (start, size) = spans[function];
        let bind = if global { elf::STB_GLOBAL } else { elf::STB_WEAK };
        w.write_dynamic_symbol(&Sym {
            section: Some(text_idx.0),
            st_name: w.dynamic_string_offset(Some(name_ids[i])),
            st_info: elf::SymbolInfo::new(bind, elf::STT_FUNC),
            st_other: Default::default(),
            st_shndx: Default::default(),
            st_value: start,
            st_size: size,
        });
    }
    w.write_dynstr();
    if let (Some(version), Some(name)) = (version, l.version) {
        w.write_null_gnu_versym();
        for _ in l.symbols {
            w.write_gnu_versym(elf::VersionIndex(2).versym(false));
        }
        w.write_align_gnu_verdef();
        w.write_gnu_verdef(&Verdef {
            version: elf::VER_DEF_CURRENT,
            flags: elf::VER_FLG_BASE,
            index: elf::VersionIndex(1),
            aux_count: 1,
            name: w.dynamic_string_offset(Some(soname)),
            hash: elf::hash(l.soname.as_bytes()),
        });
        w.write_gnu_verdef(&Verdef {
            version: elf::VER_DEF_CURRENT,
            flags: Default::default(),
            index: elf::VersionIndex(2),
            aux_count: 1,
            name: w.dynamic_string_offset(Some(version)),
            hash: elf::hash(name.as_bytes()),
        });
    }
    w.write_align_dynamic();
    w.write_dynamic(elf::DT_HASH, hash_off)?;
    w.write_dynamic(elf::DT_STRTAB, dynstr_off)?;
    w.write_dynamic(elf::DT_SYMTAB, dynsym_off)?;
    w.write_dynamic(elf::DT_STRSZ, w.dynstr_len() as u64)?;
    w.write_dynamic(elf::DT_SYMENT, 24)?;
    w.write_dynamic_string(elf::DT_SONAME, soname)?;
    if let Some((versym_off, verdef_off)) = versions {
        w.write_dynamic(elf::DT_VERSYM, versym_off)?;
        w.write_dynamic(elf::DT_VERDEF, verdef_off)?;
        w.write_dynamic(elf::DT_VERDEFNUM, 2)?;
    }
    w.write_dynamic(elf::DT_NULL, 0)?;
    w.write_align(16);
    w.write(&code);
    w.write_shstrtab();
    w.write_null_section_header();
    w.write_hash_section_header(hash_off);
    w.write_dynsym_section_header(dynsym_off, 1);
    w.write_dynstr_section_header(dynstr_off);
    if let Some((versym_off, verdef_off)) = versions {
        w.write_gnu_versym_section_header(versym_off);
        w.write_gnu_verdef_section_header(verdef_off);
    }
    w.write_dynamic_section_header(dynamic_off);
    w.write_section_header(&SectionHeader {
        sh_name: w.section_name_offset(Some(text_name)),
        sh_type: elf::SHT_PROGBITS,
        sh_flags: elf::SHF_ALLOC | elf::SHF_EXECINSTR,
        sh_addr: text_off,
        sh_offset: text_off,
        sh_size: code.len() as u64,
        sh_link: 0,
        sh_info: 0,
        sh_addralign: 16,
        sh_entsize: 0,
    });
    w.write_shstrtab_section_header();
    debug_assert_eq!(w.len(), len);
    drop(w);
    Ok((out, spans))
}
