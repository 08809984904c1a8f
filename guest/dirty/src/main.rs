//! Touches a working set, marks a point with `sched_yield`, dirties K pages (first argument),
//! marks again with `sched_yield`, and exits. The fork benchmark forks at the first mark and
//! measures the reset after the second.
use deja_guest_sys::syscall6;

const WORKING_SET_PAGES: usize = 12_000;

fn mark() {
    // SAFETY: sched_yield takes no arguments.
    unsafe { syscall6(24, [0; 6]) };
}

fn main() {
    let k: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(100);
    let mut set = vec![1u8; WORKING_SET_PAGES * 4096];
    mark();
    for page in 0..k.min(WORKING_SET_PAGES) {
        set[page * 4096 + 8] = set[page * 4096 + 8].wrapping_add(page as u8 | 1);
    }
    mark();
    let sum: u64 = set.iter().step_by(4096).map(|b| *b as u64).sum();
    println!("dirty: {k} pages, sum {sum}");
}
