//! Makes N cheap syscalls (getppid) in a loop, for the syscall round-trip benchmark; also calls
//! one syscall deja does not implement, so the run report lists it. `syscalls N sdk` makes N
//! SDK assertion calls instead, for the SDK-call benchmark.
use deja_guest_sys::syscall6;

fn main() {
    let n: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(1000);
    if std::env::args().nth(2).as_deref() == Some("sdk") {
        for i in 0..n {
            deja_sdk::assert_always!(i < u64::MAX, "loop index in range");
        }
        println!("syscalls: {n} SDK calls");
        return;
    }
    let mut acc = 0i64;
    for _ in 0..n {
        // SAFETY: getppid takes no arguments.
        acc = acc.wrapping_add(unsafe { syscall6(110, [0; 6]) });
    }
    // SAFETY: io_uring_setup with a null params pointer is refused by any kernel.
    let unsupported = unsafe { syscall6(425, [1, 0, 0, 0, 0, 0]) };
    println!("syscalls: {n} calls, acc {acc}, io_uring_setup -> {unsupported}");
}
