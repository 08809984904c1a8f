//! Allocates, touches and checksums N MiB (first argument, default 256). An allocation the
//! system refuses is reported and exits with code 3 instead of aborting.
fn main() {
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
