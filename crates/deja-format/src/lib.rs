//! The one file format of everything deja writes.
//!
//! Every artifact (a snapshot today; bug reports, capsules and certificates later) is an
//! *envelope*: a fixed header, then the payload compressed with zstd. The header names the kind
//! of artifact and the schema version of its payload, carries the payload's sizes and its
//! BLAKE3, and is itself protected by a BLAKE3 of its bytes. An artifact's identity is the BLAKE3
//! of its kind and uncompressed payload ([`Envelope::id`]), so the same content always has the
//! same name, whatever the compression level.
//!
//! ```text
//! offset size field
//!      0    8 magic "DEJA\x00ART"
//!      8    2 envelope version (1), little endian
//!     10    2 kind (1 = snapshot)
//!     12    4 payload schema version
//!     16    4 flags (bit 0: payload is zstd-compressed)
//!     20    8 payload length, uncompressed
//!     28    8 payload length, stored
//!     36   32 BLAKE3 of the uncompressed payload
//!     68   32 BLAKE3 of the stored payload
//!    100   32 BLAKE3 of bytes 0..100
//!    132    … stored payload
//! ```
//!
//! [`decode`] refuses, each with its own error: another file type, an envelope or schema
//! version this build does not know, a header or payload that fails its checksum (a flipped
//! bit), a file shorter or longer than its header says, and sizes above [`MAX_PAYLOAD`].

pub mod json;

use snafu::{ensure, OptionExt, ResultExt, Snafu};
use std::io::Write;
use std::path::Path;

/// First eight bytes of every deja artifact.
pub const MAGIC: [u8; 8] = *b"DEJA\x00ART";
/// The envelope layout version this build reads and writes.
pub const ENVELOPE_VERSION: u16 = 1;
/// Header size in bytes.
pub const HEADER_LEN: usize = 132;
/// Largest uncompressed payload accepted (16 GiB): a cap, so a forged header cannot make deja
/// allocate without bound.
pub const MAX_PAYLOAD: u64 = 16 << 30;
const FLAG_ZSTD: u32 = 1;
const ZSTD_LEVEL: i32 = 3;

/// What an artifact is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A VM snapshot (`deja run --snapshot-out`).
    Snapshot,
}

impl Kind {
    fn code(self) -> u16 {
        match self {
            Kind::Snapshot => 1,
        }
    }

    fn from_code(code: u16) -> Option<Kind> {
        match code {
            1 => Some(Kind::Snapshot),
            _ => None,
        }
    }

    /// Stable name, as printed by `deja inspect`.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Snapshot => "snapshot",
        }
    }
}

/// Why an artifact was refused. Messages say what is wrong and what to do.
#[derive(Debug, Snafu)]
#[snafu(visibility(pub(crate)))]
pub enum FormatError {
    /// The file does not start with the deja magic.
    #[snafu(display("not a deja artifact (bad magic); expected a file written by deja"))]
    NotDeja,
    /// An envelope version this build does not read.
    #[snafu(display(
        "envelope version {found} is not supported (this deja reads version {ENVELOPE_VERSION}); use the deja that wrote it"
    ))]
    EnvelopeVersion {
        /// The version in the file.
        found: u16,
    },
    /// An artifact kind this build does not know.
    #[snafu(display("unknown artifact kind {code}; it was written by a newer deja"))]
    UnknownKind {
        /// The kind code in the header.
        code: u16,
    },
    /// Another kind than the caller needs.
    #[snafu(display("this is a {found}, not a {expected}"))]
    WrongKind {
        /// What the caller needs.
        expected: &'static str,
        /// What the file is.
        found: &'static str,
    },
    /// A payload schema version the caller does not read.
    #[snafu(display(
        "{kind} schema version {found} is not supported (this deja reads version {supported}); read it with a deja that reads version {found}"
    ))]
    SchemaVersion {
        /// The artifact kind.
        kind: &'static str,
        /// The version in the file.
        found: u32,
        /// The version this build reads.
        supported: u32,
    },
    /// The header fails its checksum.
    #[snafu(display("the header is damaged (checksum mismatch); the file was corrupted after deja wrote it"))]
    HeaderCorrupt,
    /// The file is shorter than its header says.
    #[snafu(display("truncated: the header announces {expected} bytes of payload, the file holds {found}"))]
    Truncated {
        /// Announced stored length.
        expected: u64,
        /// Bytes present.
        found: u64,
    },
    /// The file is longer than its header says.
    #[snafu(display("{extra} unexpected bytes after the payload; the file was altered after deja wrote it"))]
    TrailingBytes {
        /// Bytes past the announced payload.
        extra: u64,
    },
    /// Sizes above the cap.
    #[snafu(display("payload of {size} bytes exceeds the {MAX_PAYLOAD}-byte cap"))]
    TooLarge {
        /// The larger of the announced sizes.
        size: u64,
    },
    /// The compressed payload does not decompress.
    #[snafu(display("the payload does not decompress: {source}"))]
    Decompress {
        /// zstd's error.
        source: std::io::Error,
    },
    /// The payload decompresses to another size than the header announces.
    #[snafu(display("the payload does not decompress: {found} bytes instead of {expected}"))]
    DecompressedLength {
        /// Announced uncompressed length.
        expected: u64,
        /// Length it decompressed to.
        found: u64,
    },
    /// An uncompressed payload whose two announced lengths differ.
    #[snafu(display("the payload does not decompress: uncompressed payload with two different lengths"))]
    UncompressedLengths,
    /// The payload fails its checksum.
    #[snafu(display("the payload is damaged (BLAKE3 mismatch); the file was corrupted after deja wrote it"))]
    PayloadCorrupt,
    /// Reading the file failed.
    #[snafu(display("{path}: {source}"))]
    Read {
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// Writing the file failed.
    #[snafu(display("{path}: {source}"))]
    Write {
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
}

/// A decoded artifact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope {
    /// What it is.
    pub kind: Kind,
    /// Schema version of the payload.
    pub schema: u32,
    /// The uncompressed payload.
    pub payload: Vec<u8>,
}

impl Envelope {
    /// The artifact's content address: BLAKE3 (hex) of its kind and payload.
    pub fn id(&self) -> String {
        id(self.kind, &self.payload)
    }

    /// Checks kind and schema version; returns the payload.
    pub fn expect(self, kind: Kind, schema: u32) -> Result<Vec<u8>, FormatError> {
        ensure!(self.kind == kind, WrongKindSnafu { expected: kind.name(), found: self.kind.name() });
        ensure!(self.schema == schema, SchemaVersionSnafu { kind: kind.name(), found: self.schema, supported: schema });
        Ok(self.payload)
    }
}

/// Content address of a payload of `kind`.
pub fn id(kind: Kind, payload: &[u8]) -> String {
    let mut h = blake3::Hasher::new();
    h.update(&kind.code().to_le_bytes());
    h.update(payload);
    h.finalize().to_hex().to_string()
}

/// Encodes an artifact.
pub fn encode(kind: Kind, schema: u32, payload: &[u8]) -> Vec<u8> {
    let stored = zstd::bulk::compress(payload, ZSTD_LEVEL).expect("zstd compression of an in-memory buffer");
    let mut out = Vec::with_capacity(HEADER_LEN + stored.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&ENVELOPE_VERSION.to_le_bytes());
    out.extend_from_slice(&kind.code().to_le_bytes());
    out.extend_from_slice(&schema.to_le_bytes());
    out.extend_from_slice(&FLAG_ZSTD.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(&(stored.len() as u64).to_le_bytes());
    out.extend_from_slice(blake3::hash(payload).as_bytes());
    out.extend_from_slice(blake3::hash(&stored).as_bytes());
    let header_hash = blake3::hash(&out);
    out.extend_from_slice(header_hash.as_bytes());
    out.extend_from_slice(&stored);
    out
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap_or([0; 4]))
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or([0; 8]))
}

/// Decodes and verifies an artifact.
pub fn decode(bytes: &[u8]) -> Result<Envelope, FormatError> {
    ensure!(bytes.len() >= MAGIC.len() && bytes[..MAGIC.len()] == MAGIC, NotDejaSnafu);
    ensure!(bytes.len() >= HEADER_LEN, TruncatedSnafu { expected: HEADER_LEN as u64, found: bytes.len() as u64 });
    ensure!(blake3::hash(&bytes[..100]).as_bytes() == &bytes[100..132], HeaderCorruptSnafu);
    let version = u16_at(bytes, 8);
    ensure!(version == ENVELOPE_VERSION, EnvelopeVersionSnafu { found: version });
    let code = u16_at(bytes, 10);
    let kind = Kind::from_code(code).context(UnknownKindSnafu { code })?;
    let schema = u32_at(bytes, 12);
    let flags = u32_at(bytes, 16);
    let raw_len = u64_at(bytes, 20);
    let stored_len = u64_at(bytes, 28);
    ensure!(raw_len <= MAX_PAYLOAD && stored_len <= MAX_PAYLOAD, TooLargeSnafu { size: raw_len.max(stored_len) });
    let present = (bytes.len() - HEADER_LEN) as u64;
    ensure!(present >= stored_len, TruncatedSnafu { expected: stored_len, found: present });
    ensure!(present <= stored_len, TrailingBytesSnafu { extra: present - stored_len });
    let stored = &bytes[HEADER_LEN..];
    ensure!(blake3::hash(stored).as_bytes() == &bytes[68..100], PayloadCorruptSnafu);
    let payload = if flags & FLAG_ZSTD != 0 {
        let p = zstd::bulk::decompress(stored, raw_len as usize).context(DecompressSnafu)?;
        ensure!(p.len() as u64 == raw_len, DecompressedLengthSnafu { expected: raw_len, found: p.len() as u64 });
        p
    } else {
        ensure!(stored_len == raw_len, UncompressedLengthsSnafu);
        stored.to_vec()
    };
    ensure!(blake3::hash(&payload).as_bytes() == &bytes[36..68], PayloadCorruptSnafu);
    Ok(Envelope { kind, schema, payload })
}

/// Writes `bytes` to `path` atomically: a temporary file in the same directory, fsynced, then
/// renamed over the target, so a reader never sees half an artifact.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), FormatError> {
    let io = || WriteSnafu { path: path.display().to_string() };
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let mut f = std::fs::File::create(&tmp).context(io())?;
    f.write_all(bytes).and_then(|_| f.sync_all()).context(io())?;
    std::fs::rename(&tmp, path).context(io())
}

/// Reads and verifies the artifact at `path`.
pub fn read_file(path: &Path) -> Result<Envelope, FormatError> {
    let bytes = std::fs::read(path).context(ReadSnafu { path: path.display().to_string() })?;
    decode(&bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> Vec<u8> {
        let payload: Vec<u8> = (0..10_000u32).flat_map(|i| (i % 251).to_le_bytes()).collect();
        encode(Kind::Snapshot, 3, &payload)
    }

    #[test]
    fn round_trip_and_identity() {
        let payload = b"state".repeat(1000);
        let bytes = encode(Kind::Snapshot, 7, &payload);
        assert!(bytes.len() < payload.len(), "compressed");
        let env = decode(&bytes).unwrap();
        assert_eq!(env.payload, payload);
        assert_eq!(env.schema, 7);
        assert_eq!(env.id(), id(Kind::Snapshot, &payload));
        assert_eq!(env.clone().expect(Kind::Snapshot, 7).unwrap(), payload);
        assert!(matches!(env.expect(Kind::Snapshot, 8), Err(FormatError::SchemaVersion { found: 7, .. })));
    }

    #[test]
    fn every_flipped_bit_in_the_header_is_refused() {
        let good = sample();
        for byte in 0..HEADER_LEN {
            for bit in 0..8 {
                let mut bad = good.clone();
                bad[byte] ^= 1 << bit;
                assert!(decode(&bad).is_err(), "flip of bit {bit} in byte {byte} was accepted");
            }
        }
    }

    #[test]
    fn flipped_payload_bits_are_refused() {
        let good = sample();
        for at in (HEADER_LEN..good.len()).step_by(7) {
            let mut bad = good.clone();
            bad[at] ^= 0x10;
            let err = decode(&bad).unwrap_err();
            assert!(matches!(err, FormatError::PayloadCorrupt), "{err}");
        }
    }

    #[test]
    fn truncation_and_trailing_bytes_are_refused() {
        let good = sample();
        for len in 0..good.len() {
            assert!(decode(&good[..len]).is_err(), "truncated at {len} was accepted");
        }
        let err = decode(&good[..good.len() - 1]).unwrap_err();
        assert!(err.to_string().starts_with("truncated"), "{err}");
        let mut long = good.clone();
        long.push(0);
        assert!(matches!(decode(&long), Err(FormatError::TrailingBytes { extra: 1 })));
    }

    #[test]
    fn other_files_versions_and_kinds_are_refused() {
        assert!(matches!(decode(b"\x7fELF\x02\x01\x01"), Err(FormatError::NotDeja)));
        let mut v2 = sample();
        v2[8] = 2;
        let h = blake3::hash(&v2[..100]);
        v2[100..132].copy_from_slice(h.as_bytes());
        let err = decode(&v2).unwrap_err();
        assert!(matches!(err, FormatError::EnvelopeVersion { found: 2 }), "{err}");
        assert!(err.to_string().contains("not supported"));
        let mut kind = sample();
        kind[10] = 99;
        let h = blake3::hash(&kind[..100]);
        kind[100..132].copy_from_slice(h.as_bytes());
        assert!(matches!(decode(&kind), Err(FormatError::UnknownKind { code: 99 })));
    }

    #[test]
    fn forged_sizes_hit_the_cap() {
        let mut big = sample();
        big[20..28].copy_from_slice(&(MAX_PAYLOAD + 1).to_le_bytes());
        let h = blake3::hash(&big[..100]);
        big[100..132].copy_from_slice(h.as_bytes());
        assert!(matches!(decode(&big), Err(FormatError::TooLarge { .. })));
    }

    #[test]
    fn atomic_write_then_read() {
        let dir = std::env::temp_dir().join(format!("deja-format-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.deja");
        write_atomic(&path, &sample()).unwrap();
        assert_eq!(read_file(&path).unwrap().schema, 3);
        let missing = read_file(&dir.join("missing")).unwrap_err();
        assert!(missing.to_string().contains("missing"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        /// The parser never panics on arbitrary bytes, with or without a valid magic.
        #[test]
        fn decode_never_panics(mut bytes in proptest::collection::vec(any::<u8>(), 0..400), magic in any::<bool>()) {
            if magic && bytes.len() >= 8 {
                bytes[..8].copy_from_slice(&MAGIC);
            }
            let _ = decode(&bytes);
        }

        /// Changing any byte of a valid artifact gets it refused.
        #[test]
        fn every_mutation_is_refused(at in 0usize..1 << 20, xor in 1u8..=255) {
            let good = sample();
            let at = at % good.len();
            let mut bad = good.clone();
            bad[at] ^= xor;
            prop_assert!(decode(&bad).is_err());
        }
    }
}
