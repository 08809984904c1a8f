//! The ELF loader: any bytes as a program image, parsed and loaded into a fake memory (`Kernel::load` parses it first).
#![no_main]

use deja_kernel::{FakeMemory, Kernel, ProgramSpec};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|image: &[u8]| {
    let spec = ProgramSpec::for_program(image.to_vec(), "prog", ["prog".to_string()], 1);
    let mut mem = FakeMemory::new(4096);
    let _ = Kernel::load(spec, &mut mem);
});
