//! Allocates, touches and checksums N MiB (first argument, default 256). An allocation the
//! system refuses is reported and exits with code 3 instead of aborting.
//!
//! `memhog remap N` instead maps, touches and unmaps one 36 KiB block N times with raw `mmap` and
//! `munmap`: the block lands at the same address every time, so the same instruction faults on
//! the same page once per round (as a program that retries a failing `posix_spawn` with a fresh
//! stack does).
fn remap(rounds: usize) {
    const LEN: u64 = 36 << 10;
    let mut sum = 0u64;
    for i in 0..rounds {
        // SAFETY: an anonymous private mapping (PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS),
        // written inside its bounds and then unmapped; nothing else refers to it.
        unsafe {
            let p = deja_guest_sys::syscall6(9, [0, LEN, 3, 0x22, u64::MAX, 0]);
            if p < 0 {
                println!("memhog: mmap refused in round {i}: errno {}", -p);
                std::process::exit(3);
            }
            let top = (p as u64 + LEN - 8) as *mut u64;
            std::ptr::write_volatile(top, i as u64);
            sum += std::ptr::read_volatile(top) + (p as u64 & 0xfff);
            deja_guest_sys::syscall6(11, [p as u64, LEN, 0, 0, 0, 0]);
        }
    }
    println!("memhog: remapped {rounds} times, checksum {sum}");
}

fn main() {
    if std::env::args().nth(1).as_deref() == Some("remap") {
        return remap(std::env::args().nth(2).and_then(|a| a.parse().ok()).unwrap_or(32));
    }
    let mib: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(256);
    let bytes = mib << 20;
    let mut v: Vec<u8> = Vec::new();
    if v.try_reserve_exact(bytes).is_err() {
        println!("memhog: allocation of {mib} MiB refused (ENOMEM)");
        std::process::exit(3);
    }
    v.resize(bytes, 0);
    for (i, page) in v.chunks_mut(4096).enumerate() {
        page[0] = (i % 251) as u8;
    }
    // Grow a vector step by step to exercise realloc/mremap.
    let mut grow: Vec<u64> = Vec::new();
    for i in 0..(mib as u64 * 16_384) {
        grow.push(i);
    }
    let sum: u64 = v.iter().step_by(4096).map(|b| *b as u64).sum::<u64>() + grow.iter().sum::<u64>();
    drop(v);
    println!("memhog: touched {mib} MiB, checksum {sum}");
}
