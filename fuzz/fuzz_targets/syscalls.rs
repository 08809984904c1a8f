//! The syscall core driven by any stream of syscalls: each 56 bytes are a number and six
//! arguments, against a program loaded into a fake memory. Whatever the guest asks, the core
//! answers (a value, an exit, a crash) and never panics.
#![no_main]

use deja_kernel::SyscallOutcome;
use libfuzzer_sys::fuzz_target;

#[path = "program.rs"]
mod program;

fuzz_target!(|data: &[u8]| {
    let Some((mut kernel, mut mem)) = program::load() else { return };
    for call in data.chunks_exact(56) {
        let word = |i: usize| u64::from_le_bytes(call[8 * i..8 * i + 8].try_into().unwrap());
        // Mostly real syscall numbers; the top nibble picks deja's own or any number at all.
        let nr = match word(0) >> 60 {
            0xf => word(0),
            0xe => 0xde1a,
            _ => word(0) % 336,
        };
        let args = [word(1), word(2), word(3), word(4), word(5), word(6)];
        match kernel.syscall(&mut mem, nr, args) {
            SyscallOutcome::Return(_) => {}
            _ => return,
        }
    }
});
