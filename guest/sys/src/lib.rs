//! Raw Linux syscalls for the example guests that need to pass deliberately bad arguments.
#![no_std]

/// Issues syscall `nr` with up to six arguments and returns RAX (negative errno on failure).
///
/// # Safety
/// The caller vouches for the arguments; the kernel (or deja) validates user pointers.
pub unsafe fn syscall6(nr: u64, a: [u64; 6]) -> i64 {
    let ret: i64;
    // SAFETY: the syscall instruction clobbers rcx and r11 only; pointers are checked by the
    // kernel that serves the call.
    unsafe {
        core::arch::asm!(
            "syscall",
            inlateout("rax") nr as i64 => ret,
            in("rdi") a[0], in("rsi") a[1], in("rdx") a[2],
            in("r10") a[3], in("r8") a[4], in("r9") a[5],
            lateout("rcx") _, lateout("r11") _,
            options(nostack)
        );
    }
    ret
}
