//! Prints clock readings and random bytes: under deja both come from the seed and the virtual
//! clock, so the output is identical for the same seed and differs for another.
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

fn main() {
    let start = Instant::now();
    let wall = SystemTime::now().duration_since(UNIX_EPOCH).expect("clock after 1970");
    println!("wall clock: {}.{:09} s since the epoch", wall.as_secs(), wall.subsec_nanos());
    // RandomState seeds itself with getrandom.
    let mut h = RandomState::new().build_hasher();
    h.write_u64(42);
    println!("hash seed sample: {:016x}", h.finish());
    let mut buf = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut buf))
        .unwrap_or(());
    let hex: String = buf.iter().map(|b| format!("{b:02x}")).collect();
    println!("urandom bytes: {hex}");
    std::thread::sleep(Duration::from_millis(250));
    println!("slept; monotonic elapsed: {:?}", start.elapsed());
}
