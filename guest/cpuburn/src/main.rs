//! CPU-bound work with almost no syscalls: a xorshift walk and a prime sieve. Takes the amount
//! of work (millions of steps) as its first argument.
fn main() {
    let millions: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(200);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut acc: u64 = 0;
    for _ in 0..millions * 1_000_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        acc = acc.wrapping_add(x.rotate_left((x & 31) as u32));
    }
    let n = 2_000_000usize;
    let mut sieve = vec![true; n];
    let mut primes = 0u32;
    for i in 2..n {
        if sieve[i] {
            primes += 1;
            let mut j = i * i;
            while j < n {
                sieve[j] = false;
                j += i;
            }
        }
    }
    println!("cpuburn: {millions}M steps, acc {acc:016x}, {primes} primes below {n}");
}
