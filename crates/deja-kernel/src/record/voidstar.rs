//! deja's `libvoidstar.so`: the library every Antithesis SDK loads when it finds it at
//! [`PATH`], through which it hands over its messages and asks for its random numbers.
//!
//! The SDKs (Go with cgo, C, C++, Java, JavaScript, Python, Rust, .NET) `dlopen` the library at
//! start-up and use three symbols: `fuzz_json_data(const char *, size_t)` (one JSON message),
//! `fuzz_flush(void)` and `fuzz_get_random(void) -> uint64_t`. deja's library implements each with
//! one deja syscall: a message is the `AntithesisMessage` request, read as the same line written
//! to the SDKs' local output file is ([`super::antithesis`]); a random number is the `Random`
//! request, a decision of the run that the explorer steers and replay and minimization keep, as
//! our SDK's random choices are; `fuzz_flush` has nothing to flush. The object is built here, as
//! the vDSO is ([`crate::mm::shared_object`]): position-independent code with no relocations, no
//! libraries it needs, no constructors, so that a program that cannot load it (one linked
//! statically) loses nothing and one that can runs exactly the three functions.
//!
//! The kernel places it ([`crate::fs::Fs::new`]) where the run's environment names the SDKs'
//! local output, the same switch as the output device, so that runs without it keep their
//! file systems and digests.

use crate::prelude::*;
use once_cell::race::OnceBox;

use deja_protocol::{Request, DEJA_SYSCALL};
use iced_x86::code_asm::*;

use crate::mm::shared_object::{self, Assembled, BuildError, Layout};

/// Where the Antithesis SDKs look for the library.
pub const PATH: &str = "/usr/lib/libvoidstar.so";

/// The functions, in the order their code is laid out.
pub const FUNCTIONS: [&str; 3] = ["fuzz_json_data", "fuzz_flush", "fuzz_get_random"];

/// The library's bytes (built on first use, the same in every run).
pub fn image() -> &'static [u8] {
    static IMAGE: OnceBox<Vec<u8>> = OnceBox::new();
    IMAGE.get_or_init(|| Box::new(build().unwrap_or_else(|e| panic!("deja's libvoidstar.so does not build: {}", e.0))))
}

fn assemble(text: u64) -> Result<Assembled, BuildError> {
    let mut a = CodeAssembler::new(64)?;
    let mut labels: Vec<CodeLabel> = FUNCTIONS.iter().map(|_| a.create_label()).collect();
    // fuzz_json_data(const char *message /* RDI */, size_t len /* RSI */)
    a.set_label(&mut labels[0])?;
    a.mov(rdx, rsi)?;
    a.mov(rsi, rdi)?;
    a.mov(rdi, Request::AntithesisMessage.word())?;
    a.mov(eax, DEJA_SYSCALL as u32)?;
    a.syscall()?;
    a.ret()?;
    // fuzz_flush(void)
    a.set_label(&mut labels[1])?;
    a.ret()?;
    // fuzz_get_random(void) -> uint64_t
    a.set_label(&mut labels[2])?;
    a.mov(rdi, Request::Random.word())?;
    a.mov(eax, DEJA_SYSCALL as u32)?;
    a.syscall()?;
    a.ret()?;
    let result = a.assemble_options(text, iced_x86::BlockEncoderOptions::RETURN_NEW_INSTRUCTION_OFFSETS)?;
    let code = result.inner.code_buffer.clone();
    let mut starts = Vec::new();
    for l in &labels {
        starts.push(result.label_ip(l)?);
    }
    let end = text + code.len() as u64;
    let spans = starts.iter().enumerate().map(|(i, &s)| (s, starts.get(i + 1).copied().unwrap_or(end) - s)).collect();
    Ok((code, spans))
}

fn build() -> Result<Vec<u8>, BuildError> {
    let symbols: Vec<(&str, bool, usize)> = FUNCTIONS.iter().enumerate().map(|(i, &n)| (n, true, i)).collect();
    let layout = Layout { soname: "libvoidstar.so", version: None, symbols: &symbols, buckets: 3, gnu_stack: true };
    Ok(shared_object::write(&layout, assemble)?.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use object::{Object, ObjectSymbol};

    #[test]
    fn the_library_exports_the_three_functions_and_asks_for_no_executable_stack() {
        let bytes = image();
        let file = object::File::parse(bytes).expect("an ELF file");
        assert_eq!(file.kind(), object::ObjectKind::Dynamic);
        let mut found: Vec<(String, u64)> =
            file.dynamic_symbols().map(|s| (s.name().unwrap().to_string(), s.size())).collect();
        found.sort();
        let names: Vec<&str> = found.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["fuzz_flush", "fuzz_get_random", "fuzz_json_data"]);
        assert!(found.iter().all(|(_, size)| *size > 0), "{found:?}");
        let elf = object::read::elf::ElfFile64::<object::Endianness>::parse(bytes).unwrap();
        use object::read::elf::ProgramHeader;
        let kinds: Vec<_> = elf.elf_program_headers().iter().map(|p| p.p_type(elf.endian())).collect();
        assert_eq!(kinds, [object::elf::PT_LOAD, object::elf::PT_DYNAMIC, object::elf::PT_GNU_STACK]);
        let stack = elf.elf_program_headers()[2].p_flags(elf.endian());
        assert_eq!(stack & object::elf::PF_X, object::elf::ProgramFlags(0), "a library that needs no executable stack");
        // The same bytes every time: the file is part of every run that has it.
        assert_eq!(build().ok().as_deref(), Some(bytes));
    }
}
