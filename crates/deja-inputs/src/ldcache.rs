//! glibc's `/etc/ld.so.cache`, read the way the x86-64 loader reads it, so that
//! [`crate::dynlink`] can find a library the host's loader finds only through the cache (one in
//! a directory that `/etc/ld.so.conf` lists, such as `/usr/local/lib`).
//!
//! The file is the "new" format: a 48-byte header (`glibc-ld.so.cache` `1.1`, the number of
//! entries, the size of the string table, an endianness flag and an extension offset), then
//! 24-byte entries (flags `i32`, name and path as `u32` offsets from the start of that header,
//! the required OS version `u32`, a hwcap word `u64`), then the strings. Older glibc wrote the
//! libc5-era `ld.so-1.7.0` table first, with the new header after it at the next multiple of
//! eight; the old table is then skipped, as the loader does. `ldconfig` sorts the entries by
//! name, with glibc's `_dl_cache_libcmp` order (digit runs compare as numbers), in decreasing
//! order, and the loader finds a name by binary search.
//!
//! Only entries for x86-64 glibc objects (`FLAG_ELF_LIBC6 | FLAG_X8664_LIB64`, `0x0303`) count:
//! the loader skips every other flag value (i386, x32, libc5).
//!
//! **Hwcaps entries.** A name may have several entries: builds of the same library for CPU
//! levels (`glibc-hwcaps/x86-64-v3/…`, marked by bit 62 of the hwcap word, with the ISA level the
//! object needs in bits 32–41 and the subdirectory's index in the low bits) and, before glibc
//! 2.37, the legacy hwcap and platform subdirectories (`tls/`, `haswell/`, `x86_64/`, marked by
//! other hwcap bits). `ldconfig` puts them before the plain entry (hwcap word 0). The loader
//! takes the hwcaps entry of highest priority that its CPU supports and, failing that, the
//! first ordinary entry its CPU accepts; it never looks past the first plain entry, which every
//! CPU accepts. Which one that is depends on the CPU and on the loader's version, so
//! [`LdCache::lookup`] does not choose: it returns every entry the loader could choose
//! ([`Lookup::choices`]) and the plain one ([`Lookup::plain`]), and `dynlink` declares them all.
//! That is equivalent to choosing as the loader does, and does not depend on modelling it: the
//! guest's loader takes one of the choices, finds it declared, and loads it. An entry with a
//! non-zero required OS version counts as a possible choice, not as a certain one (the loader
//! skips it when the kernel it runs on reports an older version).
//!
//! **A malformed cache** is an error ([`LdCacheError`], saying what is wrong) and never a panic:
//! every count and offset is checked against the file's length. `dynlink` then treats the cache
//! as absent: it does not declare it, so the guest's loader, which finds no cache, searches the
//! default directories exactly as `dynlink` did, and the error is named if a library is then
//! not found. A cache the loader would reject or could misread counts as malformed too: one of
//! the other byte order, and one whose entries are not in `ldconfig`'s order (the loader's
//! binary search could then miss entries a linear reading sees).

use std::cmp::Ordering;

use snafu::{ensure, Snafu};

/// Where glibc's loader looks for the cache.
pub const PATH: &str = "/etc/ld.so.cache";

/// The largest cache read (glibc's own caches are tens of KiB).
pub const MAX_BYTES: usize = 64 << 20;

/// `FLAG_ELF_LIBC6`: a glibc (libc6) ELF object.
pub const FLAG_ELF_LIBC6: i32 = 0x0003;
/// `FLAG_X8664_LIB64`: for x86-64 (64-bit) programs.
pub const FLAG_X8664_LIB64: i32 = 0x0300;
/// The only flags the x86-64 loader accepts.
pub const X86_64_LIBC6: i32 = FLAG_ELF_LIBC6 | FLAG_X8664_LIB64;
/// Bit 62 of the hwcap word: the entry is in a `glibc-hwcaps` subdirectory.
pub const HWCAP_EXTENSION: u64 = 1 << 62;
/// Bits 32–41 of the hwcap word of a `glibc-hwcaps` entry: the ISA level the object needs.
const ISA_LEVEL_MASK: u64 = ((1 << 10) - 1) << 32;

const MAGIC_NEW: &[u8] = b"glibc-ld.so.cache1.1";
const MAGIC_OLD: &[u8] = b"ld.so-1.7.0";
/// `struct cache_file_new`.
const NEW_HEADER: usize = 48;
/// `struct file_entry_new`.
const NEW_ENTRY: usize = 24;
/// `struct cache_file` (11 bytes of magic, padding, `nlibs`).
const OLD_HEADER: usize = 16;
/// `struct file_entry`.
const OLD_ENTRY: usize = 12;
/// The endianness bits of the new header's flags byte: unset (0) or little-endian (2) here.
const ENDIAN_MASK: u8 = 3;
const ENDIAN_LITTLE: u8 = 2;

/// Why a cache cannot be used.
#[derive(Debug, Snafu, PartialEq, Eq)]
pub enum LdCacheError {
    /// Past [`MAX_BYTES`].
    #[snafu(display("{len} bytes is more than the {MAX_BYTES} a cache may have"))]
    TooLarge {
        /// Its length.
        len: usize,
    },
    /// Neither magic at the start.
    #[snafu(display("not a glibc ld.so.cache (no glibc-ld.so.cache1.1 or ld.so-1.7.0 magic)"))]
    NotACache,
    /// Only the libc5-era format, which glibc stopped writing in 2.32.
    #[snafu(display("only the old ld.so-1.7.0 format, without the glibc-ld.so.cache1.1 part (run ldconfig)"))]
    OldFormatOnly,
    /// The old table does not fit in the file.
    #[snafu(display("the old-format table of {count} entries runs past the end ({len} bytes)"))]
    OldTablePastEnd {
        /// Entries it claims.
        count: u32,
        /// The file's length.
        len: usize,
    },
    /// Written for big-endian machines, or marked invalid by `ldconfig`.
    #[snafu(display("its header says byte order {flags:#x}, not little-endian"))]
    WrongEndianness {
        /// The header's flags byte.
        flags: u8,
    },
    /// The entries do not fit in the file.
    #[snafu(display("{count} entries at offset {start} run past the end ({len} bytes)"))]
    EntriesPastEnd {
        /// Entries it claims.
        count: u32,
        /// Where the new header is.
        start: usize,
        /// The file's length.
        len: usize,
    },
    /// A name or path offset outside the file, or a string without its terminating NUL.
    #[snafu(display("entry {index}: string at offset {offset} is outside the file or not NUL-terminated"))]
    BadString {
        /// The entry.
        index: usize,
        /// Its offset (from the new header).
        offset: u32,
    },
    /// Entries out of `ldconfig`'s order.
    #[snafu(display("entries {index} and {} are not in ldconfig's order, which the loader's search needs", index + 1))]
    NotSorted {
        /// The first of the two.
        index: usize,
    },
}

/// One entry of the new table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// `FLAG_*` bits ([`X86_64_LIBC6`] for the entries the x86-64 loader uses).
    pub flags: i32,
    /// The name a `DT_NEEDED` entry asks for (the library's soname).
    pub name: String,
    /// The file the loader opens for it.
    pub path: String,
    /// The kernel version the object requires (0: any).
    pub osversion: u32,
    /// The hwcap word (0 for a library in the directory itself).
    pub hwcap: u64,
}

impl Entry {
    /// True for an entry in a `glibc-hwcaps` subdirectory: bit 62 and nothing else in the high
    /// half besides the ISA level (glibc's `dl_cache_hwcap_extension`).
    pub fn is_hwcaps_subdirectory(&self) -> bool {
        (self.hwcap & !ISA_LEVEL_MASK) >> 32 == HWCAP_EXTENSION >> 32
    }

    /// True for an entry every loader takes when it reaches it: no hwcap requirement (neither
    /// a `glibc-hwcaps` nor a legacy subdirectory) and no OS version.
    pub fn is_plain(&self) -> bool {
        self.hwcap == 0 && self.osversion == 0
    }
}

/// A parsed cache.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LdCache {
    entries: Vec<Entry>,
}

/// What the loader may take from the cache for one name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lookup<'a> {
    /// Every path the loader could choose, in the cache's order: the x86-64 entries for the
    /// name up to and including the first plain one.
    pub choices: Vec<&'a str>,
    /// The first plain entry: the loader's choice when its CPU takes no hwcaps entry. `None`
    /// when the name has none, and then the loader may choose nothing and go on to the default
    /// directories.
    pub plain: Option<&'a str>,
}

impl LdCache {
    /// Parses a cache file's bytes.
    pub fn parse(bytes: &[u8]) -> Result<LdCache, LdCacheError> {
        let len = bytes.len();
        ensure!(len <= MAX_BYTES, TooLargeSnafu { len });
        let start = if bytes.starts_with(MAGIC_NEW) {
            0
        } else if bytes.starts_with(MAGIC_OLD) {
            let count = u32_at(bytes, 12).ok_or(LdCacheError::NotACache)?;
            // At most 64 MiB / 12 entries fit, so the product cannot overflow a u64.
            let end = OLD_HEADER as u64 + u64::from(count) * OLD_ENTRY as u64;
            ensure!(end <= len as u64, OldTablePastEndSnafu { count, len });
            let start = (end as usize).next_multiple_of(8);
            ensure!(bytes.get(start..).is_some_and(|b| b.starts_with(MAGIC_NEW)), OldFormatOnlySnafu);
            start
        } else {
            return NotACacheSnafu.fail();
        };
        let count = u32_at(bytes, start + 20).unwrap_or(0);
        let table = start + NEW_HEADER;
        let fits = (table as u64 + u64::from(count) * NEW_ENTRY as u64) <= len as u64;
        ensure!(len >= table && fits, EntriesPastEndSnafu { count, start, len });
        let flags = bytes[start + 28];
        ensure!(flags == 0 || flags & ENDIAN_MASK == ENDIAN_LITTLE, WrongEndiannessSnafu { flags });
        let strings = &bytes[start..];
        let mut keys: Vec<&[u8]> = Vec::with_capacity(count as usize);
        let mut entries = Vec::with_capacity(count as usize);
        for (index, raw) in bytes[table..].chunks_exact(NEW_ENTRY).take(count as usize).enumerate() {
            let field = |at: usize| u32::from_le_bytes([raw[at], raw[at + 1], raw[at + 2], raw[at + 3]]);
            let string = |offset: u32| {
                let tail = strings.get(offset as usize..).ok_or(LdCacheError::BadString { index, offset })?;
                let end = tail.iter().position(|b| *b == 0).ok_or(LdCacheError::BadString { index, offset })?;
                Ok(&tail[..end])
            };
            let (key, value) = (string(field(4))?, string(field(8))?);
            keys.push(key);
            entries.push(Entry {
                flags: field(0) as i32,
                name: String::from_utf8_lossy(key).into_owned(),
                path: String::from_utf8_lossy(value).into_owned(),
                osversion: field(12),
                hwcap: u64::from(field(16)) | u64::from(field(20)) << 32,
            });
        }
        if let Some(index) = keys.windows(2).position(|w| libcmp(w[0], w[1]) == Ordering::Less) {
            return NotSortedSnafu { index }.fail();
        }
        Ok(LdCache { entries })
    }

    /// Every entry, in the file's order.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// What the loader may take for `name` (compared as the loader compares: `libfoo.so.01` is
    /// `libfoo.so.1`).
    pub fn lookup(&self, name: &str) -> Lookup<'_> {
        let mut found = Lookup::default();
        let same = |e: &&Entry| libcmp(name.as_bytes(), e.name.as_bytes()) == Ordering::Equal;
        for e in self.entries.iter().filter(same).filter(|e| e.flags == X86_64_LIBC6) {
            found.choices.push(&e.path);
            if e.is_plain() {
                found.plain = Some(&e.path);
                break;
            }
        }
        found
    }
}

fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(bytes.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

/// glibc's `_dl_cache_libcmp`: bytes compare as the C `char`s they are (signed on x86-64), but a
/// run of digits compares as a number with a run of digits, and above any other byte.
pub fn libcmp(a: &[u8], b: &[u8]) -> Ordering {
    let at = |s: &[u8], i: usize| s.get(i).copied().unwrap_or(0);
    let signed = |c: u8| i32::from(c as i8);
    // The end of a digit run starting at `i`, and the run without its leading zeros.
    fn run(s: &[u8], i: usize) -> (usize, &[u8]) {
        let end = i + s[i..].iter().take_while(|c| c.is_ascii_digit()).count();
        let first = s[i..end].iter().position(|c| *c != b'0').map_or(end, |p| i + p);
        (end, &s[first..end])
    }
    let (mut i, mut j) = (0, 0);
    loop {
        let (c1, c2) = (at(a, i), at(b, j));
        if c1 == 0 {
            return 0.cmp(&signed(c2));
        }
        match (c1.is_ascii_digit(), c2.is_ascii_digit()) {
            (true, true) => {
                let ((e1, n1), (e2, n2)) = (run(a, i), run(b, j));
                let order = n1.len().cmp(&n2.len()).then_with(|| n1.cmp(n2));
                if order != Ordering::Equal {
                    return order;
                }
                (i, j) = (e1, e2);
            }
            (true, false) => return Ordering::Greater,
            (false, true) => return Ordering::Less,
            (false, false) if c1 != c2 => return signed(c1).cmp(&signed(c2)),
            (false, false) => (i, j) = (i + 1, j + 1),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// (flags, name, path, osversion, hwcap)
    pub(crate) type Row<'a> = (i32, &'a str, &'a str, u32, u64);

    /// A cache file with `rows` in the given order, in the new format, or after an old-format
    /// table of the same entries when `old` is set.
    pub(crate) fn build(rows: &[Row], old: bool) -> Vec<u8> {
        let mut strings = Vec::new();
        let mut offsets = Vec::new();
        let table = NEW_HEADER + rows.len() * NEW_ENTRY;
        for (_, name, path, _, _) in rows {
            let key = (table + strings.len()) as u32;
            strings.extend_from_slice(name.as_bytes());
            strings.push(0);
            let value = (table + strings.len()) as u32;
            strings.extend_from_slice(path.as_bytes());
            strings.push(0);
            offsets.push((key, value));
        }
        let mut new = Vec::new();
        new.extend_from_slice(MAGIC_NEW);
        new.extend_from_slice(&(rows.len() as u32).to_le_bytes());
        new.extend_from_slice(&(strings.len() as u32).to_le_bytes());
        new.push(ENDIAN_LITTLE);
        new.resize(NEW_HEADER, 0);
        for ((flags, _, _, osversion, hwcap), (key, value)) in rows.iter().zip(&offsets) {
            for word in [*flags as u32, *key, *value, *osversion] {
                new.extend_from_slice(&word.to_le_bytes());
            }
            new.extend_from_slice(&hwcap.to_le_bytes());
        }
        new.extend_from_slice(&strings);
        if !old {
            return new;
        }
        // The old table's strings are relative to its end: the new part's own strings, past
        // the padding and the new header.
        let end = OLD_HEADER + rows.len() * OLD_ENTRY;
        let start = end.next_multiple_of(8);
        let mut file = Vec::new();
        file.extend_from_slice(MAGIC_OLD);
        file.push(0);
        file.extend_from_slice(&(rows.len() as u32).to_le_bytes());
        for ((flags, ..), (key, value)) in rows.iter().zip(&offsets) {
            for word in [*flags as u32, *key + (start - end) as u32, *value + (start - end) as u32] {
                file.extend_from_slice(&word.to_le_bytes());
            }
        }
        file.resize(start, 0);
        file.extend_from_slice(&new);
        file
    }

    const X: i32 = X86_64_LIBC6;
    /// glibc-hwcaps/x86-64-v3 (index 1 of the subdirectory list).
    const V3: u64 = HWCAP_EXTENSION | 1;

    fn sample() -> Vec<Row<'static>> {
        vec![
            (X, "libz.so.1", "/lib/x86_64-linux-gnu/libz.so.1", 0, 0),
            (X, "libgreet.so.10", "/opt/new/libgreet.so.10", 0, 0),
            (X, "libgreet.so.9", "/opt/lib/glibc-hwcaps/x86-64-v3/libgreet.so.9", 0, V3),
            (X, "libgreet.so.9", "/opt/lib/tls/libgreet.so.9", 0, 1 << 63),
            (0x0003, "libgreet.so.9", "/opt/lib32/libgreet.so.9", 0, 0),
            (X, "libgreet.so.9", "/opt/lib/libgreet.so.9", 0, 0),
            (X, "libgreet.so.9", "/usr/lib/x86_64-linux-gnu/libgreet.so.9", 0, 0),
            (X, "libc.so.6", "/lib/x86_64-linux-gnu/libc.so.6", 0, 0),
            (0x0803, "libc.so.6", "/libx32/libc.so.6", 0, 0),
        ]
    }

    #[test]
    fn the_new_format_and_the_old_one_before_it_read_the_same() {
        for old in [false, true] {
            let cache = LdCache::parse(&build(&sample(), old)).unwrap();
            assert_eq!(cache.entries().len(), 9);
            assert_eq!(cache.entries()[3].hwcap, 1 << 63);
            assert_eq!(cache.lookup("libz.so.1").plain, Some("/lib/x86_64-linux-gnu/libz.so.1"));
            // The x32 entry does not count.
            let libc = cache.lookup("libc.so.6");
            assert_eq!(libc.choices, ["/lib/x86_64-linux-gnu/libc.so.6"]);
            assert_eq!(cache.lookup("libnone.so.1"), Lookup::default());
        }
    }

    #[test]
    fn a_lookup_gives_every_entry_the_loader_could_choose_up_to_the_first_plain_one() {
        let cache = LdCache::parse(&build(&sample(), false)).unwrap();
        let l = cache.lookup("libgreet.so.9");
        // The hwcaps and legacy entries first, not the i386 one, and nothing past the plain
        // entry (the loader stops there).
        assert_eq!(
            l.choices,
            ["/opt/lib/glibc-hwcaps/x86-64-v3/libgreet.so.9", "/opt/lib/tls/libgreet.so.9", "/opt/lib/libgreet.so.9"]
        );
        assert_eq!(l.plain, Some("/opt/lib/libgreet.so.9"));
        assert!(cache.entries()[2].is_hwcaps_subdirectory() && !cache.entries()[2].is_plain());
        assert!(!cache.entries()[3].is_hwcaps_subdirectory(), "a legacy tls entry is not a glibc-hwcaps one");
        // The ISA level bits do not hide an extension entry.
        let e = Entry { hwcap: HWCAP_EXTENSION | (3 << 32) | 2, ..cache.entries()[2].clone() };
        assert!(e.is_hwcaps_subdirectory());
        // Names compare as the loader compares them.
        assert_eq!(cache.lookup("libgreet.so.09").plain, Some("/opt/lib/libgreet.so.9"));
        assert_eq!(cache.lookup("libgreet.so.10").plain, Some("/opt/new/libgreet.so.10"));
    }

    #[test]
    fn a_name_with_only_hwcaps_entries_has_no_plain_choice() {
        let rows = [(X, "libv3.so", "/opt/lib/glibc-hwcaps/x86-64-v3/libv3.so", 0, V3), (X, "liba.so", "/a", 7, 0)];
        let cache = LdCache::parse(&build(&rows, false)).unwrap();
        let l = cache.lookup("libv3.so");
        assert_eq!((l.choices.len(), l.plain), (1, None));
        // An OS version requirement makes an entry a possible choice only.
        assert_eq!(cache.lookup("liba.so"), Lookup { choices: vec!["/a"], plain: None });
    }

    #[test]
    fn libcmp_orders_as_glibc_does() {
        use Ordering::*;
        for (a, b, want) in [
            ("libz.so.1", "libz.so.1", Equal),
            ("libz.so.01", "libz.so.1", Equal),
            ("libz.so.10", "libz.so.9", Greater),
            ("libz3.so", "libzstd.so", Greater),
            ("libz.so", "libz.so.1", Less),
            ("libzstd.so.1", "libz.so.1", Greater),
            ("lib\u{e9}.so", "libe.so", Less),
            ("", "", Equal),
        ] {
            assert_eq!(libcmp(a.as_bytes(), b.as_bytes()), want, "{a} vs {b}");
            assert_eq!(libcmp(b.as_bytes(), a.as_bytes()), want.reverse(), "{b} vs {a}");
        }
    }

    #[test]
    fn malformed_caches_are_errors_that_say_what_is_wrong() {
        let good = build(&sample(), false);
        let set = |at: usize, bytes: &[u8]| {
            let mut b = good.clone();
            b[at..at + bytes.len()].copy_from_slice(bytes);
            b
        };
        let entry = NEW_HEADER;
        let last_path = u32_at(&good, entry + 8 * NEW_ENTRY + 8).unwrap();
        let cases: Vec<(Vec<u8>, LdCacheError)> = vec![
            (b"hello".to_vec(), LdCacheError::NotACache),
            (good[..30].to_vec(), LdCacheError::EntriesPastEnd { count: 9, start: 0, len: 30 }),
            (set(20, &1000u32.to_le_bytes()), LdCacheError::EntriesPastEnd { count: 1000, start: 0, len: good.len() }),
            (set(28, &[3]), LdCacheError::WrongEndianness { flags: 3 }),
            (set(28, &[1]), LdCacheError::WrongEndianness { flags: 1 }),
            (set(entry + 4, &u32::MAX.to_le_bytes()), LdCacheError::BadString { index: 0, offset: u32::MAX }),
            (
                set(entry + 24 + 8, &(good.len() as u32).to_le_bytes()),
                LdCacheError::BadString { index: 1, offset: good.len() as u32 },
            ),
            // The last path without its NUL.
            (good[..good.len() - 1].to_vec(), LdCacheError::BadString { index: 8, offset: last_path }),
            (vec![0; MAX_BYTES + 1], LdCacheError::TooLarge { len: MAX_BYTES + 1 }),
        ];
        for (i, (bytes, want)) in cases.into_iter().enumerate() {
            let got = LdCache::parse(&bytes).unwrap_err();
            assert_eq!(got, want, "case {i}: {got}");
        }
        let mut swapped = sample();
        swapped.swap(0, 1);
        let err = LdCache::parse(&build(&swapped, false)).unwrap_err();
        assert_eq!(err, LdCacheError::NotSorted { index: 0 });
        assert!(err.to_string().contains("not in ldconfig's order"), "{err}");
        // The old format alone, and an old table that runs past the end.
        let old = build(&sample(), true);
        let start = (OLD_HEADER + 9 * OLD_ENTRY).next_multiple_of(8);
        assert_eq!(LdCache::parse(&old[..start]).unwrap_err(), LdCacheError::OldFormatOnly);
        let mut long = old.clone();
        long[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(
            LdCache::parse(&long).unwrap_err(),
            LdCacheError::OldTablePastEnd { count: u32::MAX, len: old.len() }
        );
        assert_eq!(LdCache::parse(&old[..13]).unwrap_err(), LdCacheError::NotACache);
    }

    #[test]
    fn no_truncation_or_byte_flip_panics() {
        for old in [false, true] {
            let good = build(&sample(), old);
            for cut in 0..good.len() {
                let _ = LdCache::parse(&good[..cut]);
            }
            for at in 0..good.len() {
                for bit in [0x01, 0x10, 0x80, 0xff] {
                    let mut b = good.clone();
                    b[at] ^= bit;
                    if let Ok(cache) = LdCache::parse(&b) {
                        let _ = cache.lookup("libgreet.so.9");
                    }
                }
            }
        }
    }

    #[test]
    fn the_hosts_cache_lists_libc() {
        let Ok(bytes) = std::fs::read(PATH) else {
            eprintln!("{PATH} is absent: nothing to read");
            return;
        };
        let cache = LdCache::parse(&bytes).unwrap_or_else(|e| panic!("{PATH}: {e}"));
        let libc = cache.lookup("libc.so.6");
        let path = libc.plain.unwrap_or_else(|| panic!("no plain libc.so.6 among {:?}", libc.choices));
        assert!(path.starts_with('/') && path.ends_with("/libc.so.6"), "{path}");
        assert!(std::path::Path::new(path).exists(), "{path}");
    }
}
