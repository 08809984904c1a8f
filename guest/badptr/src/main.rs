//! Passes wild pointers to the kernel on purpose and prints what each syscall returned.
//! Every call must fail with EFAULT (-14), never crash the process or the monitor.
use deja_guest_sys::syscall6;

fn main() {
    let exe = b"/proc/self/exe\0";
    // SAFETY: a valid NUL-terminated path.
    let fd = unsafe { syscall6(257, [(-100i64) as u64, exe.as_ptr() as u64, 0, 0, 0, 0]) };
    assert!(fd >= 0, "cannot open /proc/self/exe: {fd}");
    let wild = [0x10u64, 0xdead_0000_0000, 0xffff_8000_0000_0000, u64::MAX - 3];
    let mut all_efault = true;
    for p in wild {
        // SAFETY: deliberately invalid pointers; the kernel must refuse them.
        let results = unsafe {
            [
                ("write", syscall6(1, [1, p, 8, 0, 0, 0])),
                ("read", syscall6(0, [fd as u64, p, 8, 0, 0, 0])),
                ("openat", syscall6(257, [(-100i64) as u64, p, 0, 0, 0, 0])),
                ("clock_gettime", syscall6(228, [1, p, 0, 0, 0, 0])),
                ("getrandom", syscall6(318, [p, 16, 0, 0, 0, 0])),
                ("uname", syscall6(63, [p, 0, 0, 0, 0, 0])),
            ]
        };
        for (name, r) in results {
            println!("{name}({p:#x}) = {r}");
            all_efault &= r == -14;
        }
    }
    println!("all EFAULT: {all_efault}");
    std::process::exit(if all_efault { 0 } else { 1 });
}
