//! The program the core-driving targets load: a real static program (`DEJA_FUZZ_PROGRAM`,
//! default the bundled `hello`), loaded afresh into a fake memory for every input.

use std::sync::OnceLock;

use deja_kernel::{FakeMemory, Kernel, ProgramSpec};

fn image() -> &'static [u8] {
    static IMAGE: OnceLock<Vec<u8>> = OnceLock::new();
    IMAGE.get_or_init(|| {
        let path = std::env::var("DEJA_FUZZ_PROGRAM")
            .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../target/guests/hello").to_string());
        std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e} (build the guests with `cargo xtask guests`)"))
    })
}

/// The core and its memory, at the program's entry.
pub fn load() -> Option<(Kernel, FakeMemory)> {
    let spec = ProgramSpec::for_program(image().to_vec(), "hello", ["hello".to_string()], 7);
    let mut mem = FakeMemory::new(8192);
    let (kernel, _entry) = Kernel::load(spec, &mut mem).ok()?;
    Some((kernel, mem))
}
