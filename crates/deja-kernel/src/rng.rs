//! The seeded random stream: every random byte the guest sees.
//!
//! One ChaCha20 stream per run, keyed from the seed with BLAKE3's key derivation (so the mapping
//! seed → stream is fixed by this file, not by a library's `seed_from_u64`). The stream is
//! consumed byte-exactly in order: `AT_RANDOM` takes the first 16 bytes, then `getrandom` and
//! `/dev/urandom` continue where the previous read stopped.

use rand_chacha::rand_core::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

/// BLAKE3 key-derivation context for the stream key.
const KEY_CONTEXT: &str = "deja 2025 guest random stream v1";

/// A byte-exact view of the seeded ChaCha20 stream.
#[derive(Debug, Clone)]
pub struct RandomStream {
    rng: ChaCha20Rng,
    buf: [u8; 64],
    pos: usize,
    consumed: u64,
}

impl RandomStream {
    /// The stream of `seed`.
    pub fn new(seed: u64) -> Self {
        let key = blake3::derive_key(KEY_CONTEXT, &seed.to_le_bytes());
        RandomStream { rng: ChaCha20Rng::from_seed(key), buf: [0; 64], pos: 64, consumed: 0 }
    }

    /// Fills `out` with the next bytes of the stream.
    pub fn fill(&mut self, out: &mut [u8]) {
        let mut done = 0;
        while done < out.len() {
            if self.pos == self.buf.len() {
                self.rng.fill_bytes(&mut self.buf);
                self.pos = 0;
            }
            let n = (self.buf.len() - self.pos).min(out.len() - done);
            out[done..done + n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
            self.pos += n;
            done += n;
        }
        self.consumed += out.len() as u64;
    }

    /// Number of bytes handed out so far.
    pub fn consumed(&self) -> u64 {
        self.consumed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_exact_continuation() {
        let mut a = RandomStream::new(7);
        let mut whole = [0u8; 200];
        a.fill(&mut whole);
        let mut b = RandomStream::new(7);
        let mut parts = Vec::new();
        for n in [3usize, 1, 60, 0, 77, 59] {
            let mut p = vec![0u8; n];
            b.fill(&mut p);
            parts.extend(p);
        }
        assert_eq!(&whole[..], &parts[..]);
        assert_eq!(b.consumed(), 200);
        let mut c = RandomStream::new(8);
        let mut other = [0u8; 200];
        c.fill(&mut other);
        assert_ne!(whole, other);
    }
}
