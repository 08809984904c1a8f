//! The syscall core driven by any stream of syscalls: each 56 bytes are a number and six
//! arguments, against a program loaded into a fake memory. Whatever the guest asks, the core
//! answers (a value, an exit, a crash) and never panics.
//!
//! Numbers and arguments follow the kernel's syscall table (`deja_kernel::syscalls::TABLE`), so
//! most calls reach a handler with arguments of the right kind: a small fd, a pointer into the
//! program's stack (where its argument and environment strings are), a modest length; the
//! stack pointer is in that page too, so `rt_sigreturn` reads a frame made of them. A word
//! whose top nibble is `0xf` is passed as it is, so every hostile value still gets through.
#![no_main]

use deja_kernel::syscalls::{Arg, TABLE};
use deja_kernel::mm::user_layout::STACK_TOP;
use deja_kernel::SyscallOutcome;
use libfuzzer_sys::fuzz_target;

#[path = "program.rs"]
mod program;

/// An argument of `kind` made from `w`.
fn shaped(kind: Arg, w: u64) -> u64 {
    if w >> 60 == 0xf {
        return w;
    }
    match kind {
        // A low fd, or AT_FDCWD for the `*at` family.
        Arg::Fd if w & 1 << 59 != 0 => (-100i64) as u64,
        Arg::Fd => w % 16,
        // The top page of the stack: argv, envp and their strings.
        Arg::Path | Arg::Ptr => STACK_TOP - 1 - w % 4096,
        Arg::Len => w % 8192,
        Arg::Flags | Arg::Mode | Arg::Int => w,
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((mut kernel, mut mem)) = program::load() else { return };
    for call in data.chunks_exact(56) {
        let word = |i: usize| u64::from_le_bytes(call[8 * i..8 * i + 8].try_into().unwrap());
        // Mostly the table's numbers; the top nibble picks deja's own or any number at all.
        let (nr, kinds) = match word(0) >> 60 {
            0xf => (word(0), None),
            0xe => (0xde1a, None),
            _ => {
                let row = &TABLE[(word(0) % TABLE.len() as u64) as usize];
                (row.nr, row.args)
            }
        };
        let mut args = [word(1), word(2), word(3), word(4), word(5), word(6)];
        for (a, kind) in args.iter_mut().zip(kinds.unwrap_or(&[])) {
            *a = shaped(*kind, *a);
        }
        // The stack pointer `rt_sigreturn` reads its frame at and `sigaltstack` checks: the
        // stack's top page, from the first argument's word.
        kernel.set_user_sp(shaped(Arg::Ptr, word(1)));
        match kernel.syscall(&mut mem, nr, args) {
            SyscallOutcome::Return(_) => {}
            _ => return,
        }
    }
});
