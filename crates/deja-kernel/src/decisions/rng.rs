//! The seeded random stream: every random byte the guest sees.
//!
//! One ChaCha20 stream per run, keyed from the seed with BLAKE3's key derivation (so the mapping
//! seed → stream is fixed by this file, not by a library's `seed_from_u64`). The stream is
//! consumed byte-exactly in order: `AT_RANDOM` takes the first 16 bytes, then `getrandom` and
//! `/dev/urandom` continue where the previous read stopped. [`RandomStream::reseed`] switches
//! to the stream of another seed from its first byte (how a forked child diverges).
//!
//! Saved state: the generator's abstract ChaCha state (key, stream, word position: the form
//! `rand_chacha`'s own serde support writes and keeps stable, written here by [`chacha`] so that
//! the kernel needs no serde `std`), the unread rest of the current 64-byte block, and the byte
//! count.

use crate::prelude::*;
use rand_chacha::rand_core::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;

use crate::persist::{ensure, Persist, RestoreError};

/// BLAKE3 key-derivation context for the stream key.
const KEY_CONTEXT: &str = "deja 2025 guest random stream v1";

/// A byte-exact view of the seeded ChaCha20 stream.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RandomStream {
    #[serde(with = "chacha")]
    rng: ChaCha20Rng,
    #[serde(with = "crate::persist::array")]
    buf: [u8; 64],
    pos: usize,
    consumed: u64,
}

impl RandomStream {
    /// The stream of `seed`.
    pub fn new(seed: u64) -> Self {
        Self::with_context(KEY_CONTEXT, seed)
    }

    /// The stream of `seed` under another key-derivation context (an independent stream, e.g.
    /// the fault decisions).
    pub fn with_context(context: &str, seed: u64) -> Self {
        let key = blake3::derive_key(context, &seed.to_le_bytes());
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
        self.consumed = self.consumed.saturating_add(out.len() as u64);
    }

    /// Continues with the stream of `seed` from its first byte; [`consumed`] keeps counting.
    ///
    /// [`consumed`]: RandomStream::consumed
    pub fn reseed(&mut self, seed: u64) {
        *self = RandomStream { consumed: self.consumed, ..RandomStream::new(seed) };
    }

    /// Like [`reseed`](RandomStream::reseed) for a stream made by
    /// [`with_context`](RandomStream::with_context).
    pub fn reseed_with_context(&mut self, context: &str, seed: u64) {
        *self = RandomStream { consumed: self.consumed, ..RandomStream::with_context(context, seed) };
    }

    /// Checks the invariants of a restored stream.
    pub fn validate(&self) -> Result<(), RestoreError> {
        ensure(self.pos <= self.buf.len(), || format!("random buffer position {}", self.pos))
    }

    /// Number of bytes handed out so far.
    pub fn consumed(&self) -> u64 {
        self.consumed
    }
}

impl Persist for RandomStream {
    /// Nothing: the checks need no other part.
    type Context = ();

    /// Checks the invariants of a restored stream.
    fn validate(&self, _: &()) -> Result<(), RestoreError> {
        RandomStream::validate(self)
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

    #[test]
    fn save_restore_continues_byte_exact() {
        // Save at positions inside a block, at a block boundary and before the first block.
        for skip in [0usize, 5, 64, 100, 128, 1000] {
            let mut a = RandomStream::new(7);
            a.fill(&mut vec![0u8; skip]);
            let mut b: RandomStream = postcard::from_bytes(&postcard::to_stdvec(&a).unwrap()).unwrap();
            b.validate().unwrap();
            assert_eq!(a, b);
            let (mut x, mut y) = ([0u8; 300], [0u8; 300]);
            a.fill(&mut x);
            b.fill(&mut y);
            assert_eq!(x, y, "after {skip} bytes");
            assert_eq!(a.consumed(), b.consumed());
        }
        let mut bad = RandomStream::new(1);
        bad.pos = 65;
        assert!(bad.validate().is_err());
    }

    /// The saved generator is written byte for byte as `rand_chacha`'s serde form writes it, so
    /// snapshots saved while the kernel used that form still read, in postcard and in JSON.
    #[test]
    fn the_generator_is_saved_in_rand_chachas_own_form() {
        #[derive(serde::Serialize, serde::Deserialize)]
        struct Ours(#[serde(with = "chacha")] ChaCha20Rng);
        for skip in [0usize, 1, 64, 1000, 5000] {
            let mut rng = ChaCha20Rng::from_seed([7; 32]);
            rng.set_stream(0x1234_5678_9abc);
            rng.fill_bytes(&mut vec![0u8; skip]);
            let theirs = postcard::to_stdvec(&rng).unwrap();
            assert_eq!(postcard::to_stdvec(&Ours(rng.clone())).unwrap(), theirs, "after {skip} bytes");
            assert_eq!(serde_json::to_string(&Ours(rng.clone())).unwrap(), serde_json::to_string(&rng).unwrap());
            let Ours(mut back) = postcard::from_bytes(&theirs).unwrap();
            assert_eq!(back, rng);
            let (mut x, mut y) = ([0u8; 100], [0u8; 100]);
            back.fill_bytes(&mut x);
            rng.fill_bytes(&mut y);
            assert_eq!(x, y);
        }
    }

    #[test]
    fn reseed_starts_the_other_stream() {
        let mut a = RandomStream::new(7);
        a.fill(&mut [0u8; 10]);
        a.reseed(9);
        let mut x = [0u8; 100];
        a.fill(&mut x);
        let mut y = [0u8; 100];
        RandomStream::new(9).fill(&mut y);
        assert_eq!(x, y);
        assert_eq!(a.consumed(), 110);
    }
}

/// The saved form of a ChaCha20 generator: its abstract state (seed, stream, word position), in
/// the field order and types of `rand_chacha`'s own serde form, so the bytes are the same.
pub(crate) mod chacha {
    use rand_chacha::rand_core::SeedableRng;
    use rand_chacha::ChaCha20Rng;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    /// What determines every later output of the generator.
    #[derive(Serialize, Deserialize)]
    struct Abstract {
        seed: [u8; 32],
        stream: u64,
        word_pos: u128,
    }

    /// Writes `rng`'s abstract state.
    pub fn serialize<S: Serializer>(rng: &ChaCha20Rng, s: S) -> Result<S::Ok, S::Error> {
        Abstract { seed: rng.get_seed(), stream: rng.get_stream(), word_pos: rng.get_word_pos() }.serialize(s)
    }

    /// The generator in the abstract state read.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<ChaCha20Rng, D::Error> {
        let a = Abstract::deserialize(d)?;
        let mut rng = ChaCha20Rng::from_seed(a.seed);
        rng.set_stream(a.stream);
        rng.set_word_pos(a.word_pos);
        Ok(rng)
    }
}
