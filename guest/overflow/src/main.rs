//! Recurses until the main thread's stack is exhausted. Rust's runtime catches the fault on
//! its alternate signal stack, sees it in the guard page below the stack, prints
//! "thread 'main' (TID) has overflowed its stack" and aborts: the program ends with SIGABRT,
//! not SIGSEGV, under Linux and under deja alike.

fn depth(n: u64, pad: &mut [u8; 4096]) -> u64 {
    pad[0] = n as u8;
    let mut next = [0u8; 4096];
    std::hint::black_box(&mut next);
    // Not a tail call: the frame stays until the stack runs out.
    let below = if n < u64::MAX { depth(n + 1, &mut next) } else { 0 };
    below + u64::from(pad[7])
}

fn main() {
    println!("recursing");
    let mut pad = [0u8; 4096];
    println!("{}", depth(0, &mut pad));
}
