//! The artifact envelope, a snapshot in it, and the syscall core's saved state: any bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let _ = deja_format::decode(bytes);
    let _ = deja_vmm::snapshot::Snapshot::from_artifact(bytes);
    let _ = deja_kernel::Kernel::restore(bytes);
});
