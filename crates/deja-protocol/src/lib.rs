//! The wire format between the deja SDK (in a guest program) and the deja monitor.
//!
//! A guest talks to deja through one reserved syscall number, [`DEJA_SYSCALL`], which no Linux
//! kernel implements: on plain Linux it fails with `ENOSYS`, which is how the SDK knows deja is
//! absent. Arguments:
//!
//! | register | meaning |
//! |---|---|
//! | RAX | [`DEJA_SYSCALL`] |
//! | RDI | `(PROTOCOL_VERSION << 32) \| request code` (see [`Request`]) |
//! | RSI, RDX, R10, R8 | request arguments, below |
//!
//! | request | RSI | RDX | R10 | R8 | returns |
//! |---|---|---|---|---|---|
//! | `Hello` | – | – | – | – | [`PROTOCOL_VERSION`] |
//! | `Catalog` | address of `[`[`SiteRecord`]`]` | number of records | – | – | 0 |
//! | `Assert` | site id | condition (0/1) | details address | details length | 0 |
//! | `SetupComplete` | details address | details length | – | – | 0 |
//! | `Event` | name address | name length | details address | details length | 0 |
//! | `Random` | – | – | – | – | a random `u64` (a decision) |
//! | `Choice` | n (> 0) | – | – | – | an index in `0..n` (a decision) |
//! | `ExcludePath` | path address | path length | – | – | 0 |
//! | `FailStopIsFailure` | – | – | – | – | 0 |
//! | `AntithesisMessage` | message address | message length | – | – | 0 |
//!
//! Details are UTF-8 JSON text (the SDK writes them; the monitor stores them as given, up to
//! [`MAX_DETAILS`] bytes). A request with another protocol version, an unknown code or bad
//! arguments fails with `-EINVAL` (`-EFAULT` for unreadable memory); the SDK then falls back to
//! its local behaviour.
#![no_std]

/// The reserved syscall number ("de1a").
pub const DEJA_SYSCALL: u64 = 0xde1a;
/// The protocol version this crate speaks.
pub const PROTOCOL_VERSION: u32 = 1;
/// Longest message of the Antithesis SDKs the monitor reads (`AntithesisMessage`), in bytes.
pub const MAX_MESSAGE: usize = 65536;
/// Longest details or event name the monitor keeps, in bytes.
pub const MAX_DETAILS: usize = 4096;
/// Most catalog records the monitor accepts.
pub const MAX_SITES: usize = 65536;
/// Longest message or file name in a catalog record, in bytes.
pub const MAX_TEXT: usize = 1024;
/// The name of the events that carry a client's history records (`deja_sdk::history`).
pub const HISTORY_EVENT: &str = "deja.history";

/// Request codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Request {
    /// Is deja there, and which protocol does it speak?
    Hello = 1,
    /// Registers the assertion catalog.
    Catalog = 2,
    /// One evaluation of an assertion site.
    Assert = 3,
    /// The program finished its setup; faults and exploration may start.
    SetupComplete = 4,
    /// A named lifecycle event.
    Event = 5,
    /// A random `u64`.
    Random = 6,
    /// A random index below n.
    Choice = 7,
    /// Storage faults must never strike this path prefix (the program's own harness files,
    /// such as a log of what its client saw acknowledged).
    ExcludePath = 8,
    /// A stop (non-zero exit, panic, abort) after an injected fault is a failure of this
    /// program, not a fail-stop.
    FailStopIsFailure = 9,
    /// One message of the Antithesis SDKs, JSON as they hand it to `fuzz_json_data` (deja's
    /// `libvoidstar.so` makes this request): served as the same message written to their local
    /// output file is.
    AntithesisMessage = 10,
}

impl Request {
    /// The request for a code.
    pub fn from_code(code: u32) -> Option<Request> {
        Some(match code {
            1 => Request::Hello,
            2 => Request::Catalog,
            3 => Request::Assert,
            4 => Request::SetupComplete,
            5 => Request::Event,
            6 => Request::Random,
            7 => Request::Choice,
            8 => Request::ExcludePath,
            9 => Request::FailStopIsFailure,
            10 => Request::AntithesisMessage,
            _ => return None,
        })
    }

    /// RDI for this request.
    pub fn word(self) -> u64 {
        ((PROTOCOL_VERSION as u64) << 32) | self as u32 as u64
    }
}

/// Splits RDI into (protocol version, request code).
pub fn split_word(word: u64) -> (u32, u32) {
    ((word >> 32) as u32, word as u32)
}

/// Kinds of assertion sites.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u32)]
pub enum AssertKind {
    /// Must hold every time it is evaluated.
    Always = 1,
    /// Must hold every time it is evaluated; never evaluating it is fine.
    AlwaysOrUnreachable = 2,
    /// Must hold at least once over a run or a campaign.
    Sometimes = 3,
    /// Must be reached at least once.
    Reachable = 4,
    /// Must never be reached.
    Unreachable = 5,
}

impl AssertKind {
    /// The kind for a code.
    pub fn from_code(code: u32) -> Option<AssertKind> {
        Some(match code {
            1 => AssertKind::Always,
            2 => AssertKind::AlwaysOrUnreachable,
            3 => AssertKind::Sometimes,
            4 => AssertKind::Reachable,
            5 => AssertKind::Unreachable,
            _ => return None,
        })
    }

    /// Stable name, as reports print it.
    pub fn name(self) -> &'static str {
        match self {
            AssertKind::Always => "always",
            AssertKind::AlwaysOrUnreachable => "always_or_unreachable",
            AssertKind::Sometimes => "sometimes",
            AssertKind::Reachable => "reachable",
            AssertKind::Unreachable => "unreachable",
        }
    }
}

/// One assertion site as the SDK lays it out in guest memory (48 bytes, little endian): the
/// catalog the `Catalog` request points at is an array of these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct SiteRecord {
    /// Stable id: FNV-1a 64 of `kind:file:line:message` (see [`site_id`]).
    pub id: u64,
    /// [`AssertKind`] code.
    pub kind: u32,
    /// Source line.
    pub line: u32,
    /// Address of the message bytes (UTF-8).
    pub message_ptr: u64,
    /// Length of the message.
    pub message_len: u64,
    /// Address of the file name bytes (UTF-8).
    pub file_ptr: u64,
    /// Length of the file name.
    pub file_len: u64,
}

/// Size of a [`SiteRecord`] in guest memory.
pub const SITE_RECORD_SIZE: usize = 48;

impl SiteRecord {
    /// Decodes a record from its 48 bytes.
    pub fn from_bytes(b: &[u8; SITE_RECORD_SIZE]) -> SiteRecord {
        let u64_at = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(w)
        };
        let u32_at = |i: usize| {
            let mut w = [0u8; 4];
            w.copy_from_slice(&b[i..i + 4]);
            u32::from_le_bytes(w)
        };
        SiteRecord {
            id: u64_at(0),
            kind: u32_at(8),
            line: u32_at(12),
            message_ptr: u64_at(16),
            message_len: u64_at(24),
            file_ptr: u64_at(32),
            file_len: u64_at(40),
        }
    }
}

/// The stable id of a site: FNV-1a (64-bit) over `kind`, `file`, `line` and `message`, so it
/// survives recompilation and code motion elsewhere in the file.
pub const fn site_id(kind: u32, file: &str, line: u32, message: &str) -> u64 {
    const fn mix(mut h: u64, bytes: &[u8]) -> u64 {
        let mut i = 0;
        while i < bytes.len() {
            h ^= bytes[i] as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
            i += 1;
        }
        h
    }
    let mut h = 0xcbf2_9ce4_8422_2325;
    h = mix(h, &kind.to_le_bytes());
    h = mix(h, file.as_bytes());
    h = mix(h, &line.to_le_bytes());
    mix(h, message.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_round_trip() {
        for code in 1..=10 {
            let r = Request::from_code(code).unwrap();
            assert_eq!(split_word(r.word()), (PROTOCOL_VERSION, code));
        }
        assert!(Request::from_code(0).is_none());
        assert!(Request::from_code(11).is_none());
    }

    #[test]
    fn site_ids_are_stable_and_distinct() {
        let a = site_id(1, "src/main.rs", 10, "balance never negative");
        assert_eq!(a, site_id(1, "src/main.rs", 10, "balance never negative"));
        assert_ne!(a, site_id(3, "src/main.rs", 10, "balance never negative"));
        assert_ne!(a, site_id(1, "src/main.rs", 11, "balance never negative"));
        // Pinned: the id is part of the report format (FNV-1a 64 computed independently).
        assert_eq!(site_id(1, "src/main.rs", 10, "x"), 0xaeb5e866278b61af);
    }

    #[test]
    fn record_layout() {
        let mut b = [0u8; SITE_RECORD_SIZE];
        b[0] = 7;
        b[8] = 3;
        b[12] = 42;
        b[16] = 0x10;
        b[24] = 5;
        b[32] = 0x20;
        b[40] = 6;
        let r = SiteRecord::from_bytes(&b);
        assert_eq!(
            (r.id, r.kind, r.line, r.message_ptr, r.message_len, r.file_ptr, r.file_len),
            (7, 3, 42, 0x10, 5, 0x20, 6)
        );
        assert_eq!(core::mem::size_of::<SiteRecord>(), SITE_RECORD_SIZE);
    }
}
