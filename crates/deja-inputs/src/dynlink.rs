//! The host files a dynamically linked program needs, found the way glibc's loader finds them,
//! so that `deja run` can declare them: the loader its `PT_INTERP` names and, transitively, every
//! library a `DT_NEEDED` entry names. Each is declared at the path the loader will open, with the
//! host file's bytes (symlinks followed), and so becomes an input of the run like any declared
//! file; nothing else of the host is visible.
//!
//! The objects are visited breadth first, as the loader maps them, and each name is looked up
//! once, for the first object that needs it, in the loader's order:
//! 1. a name with a `/` in it is that path;
//! 2. if the object has no `DT_RUNPATH`: its `DT_RPATH`, then the `DT_RPATH` of the object that
//!    brought it in, and so on up to the program;
//! 3. the object's `DT_RUNPATH`;
//! 4. `/etc/ld.so.cache` ([`crate::ldcache`]), as below;
//! 5. the loader's default directories, [`DEFAULT_DIRS`].
//!
//! `$ORIGIN` is the object's directory as the loader sees it (the guest's), read from the
//! host's. Not considered: `LD_LIBRARY_PATH` and `LD_PRELOAD` (the libraries are chosen before
//! the run, whose environment is not the host's), `/etc/ld.so.preload`, `$LIB` and `$PLATFORM`,
//! `DF_1_NODEFLIB`, and the `glibc-hwcaps` and legacy hwcap subdirectories of the search
//! directories (the guest's loader tries them first, finds nothing declared there, and goes on
//! to the directory itself).
//!
//! **The cache** is declared (at [`ldcache::PATH`], with the host's bytes) only when it changes
//! what the loader opens: when, for some library, the cache's plain entry (the one the loader
//! takes when no hwcaps build suits its CPU) is a readable file other than the one the default
//! directories give: a library only in a directory that `/etc/ld.so.conf` lists, such as
//! `/usr/local/lib`, or one there that comes before the system's. Otherwise the closure is the
//! one without a cache, and the guest's loader, which then finds no cache, searches the default
//! directories and opens exactly the declared files; the run's inputs do not change when an
//! unrelated host package rewrites the cache. When the cache is declared, the guest's loader
//! consults it for every library an object's own directories do not hold, so each such library
//! is declared at every path the loader could take from the cache, each with its own
//! dependencies: the `glibc-hwcaps` and legacy hwcap builds as well as the plain entry (which of
//! them the loader takes depends on its CPU; [`ldcache`] explains why declaring all of them is
//! equivalent to choosing as it does). The default directories' file is declared as well when
//! the loader could end up there: the loader goes on to the default directories when the cache
//! has no entry its CPU takes, or when the file it takes does not open (one the cache names but
//! the host does not have). A cache that cannot be parsed is treated as absent (not declared;
//! the guest's loader then searches the default directories, as here), and its error is named
//! if a library is not found.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io;
use std::path::Path;

use crate::ldcache::{self, LdCache};

/// The directories glibc's loader searches after an object's own, on x86-64 Debian and
/// derivatives (multiarch first), then the generic ones.
pub const DEFAULT_DIRS: [&str; 6] =
    ["/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"];

/// The most objects one program may pull in.
const MAX_OBJECTS: usize = 512;

/// Every host file `image` needs at its guest path (the loader, the libraries and, when it
/// matters, `/etc/ld.so.cache`), read from the host; empty for a static program. An object that
/// cannot be found is an error naming it and the object that needs it.
pub fn host_closure(image: &[u8], exe: &Path, exe_guest: &str) -> Result<BTreeMap<String, Vec<u8>>, String> {
    if deja_kernel::elf_interpreter(image).is_none() {
        return Ok(BTreeMap::new());
    }
    let cache = read_host_cache();
    closure(image, exe, exe_guest, cache.as_deref(), &|path: &str| std::fs::read(path))
}

/// The host's cache, cut one byte past the most [`LdCache::parse`] takes; `None` if there is
/// none (or it cannot be read, which the loader treats the same way).
fn read_host_cache() -> Option<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    let file = std::fs::File::open(ldcache::PATH).ok()?;
    file.take(ldcache::MAX_BYTES as u64 + 1).read_to_end(&mut bytes).ok()?;
    Some(bytes)
}

/// [`host_closure`] over any file system: `read` gives the bytes of a file by the path the
/// loader would open (the program's own bytes are `image`; `exe` only locates its `$ORIGIN`),
/// and `cache` those of `/etc/ld.so.cache`, if there is one.
pub fn closure(
    image: &[u8],
    exe: &Path,
    exe_guest: &str,
    cache: Option<&[u8]>,
    read: &dyn Fn(&str) -> io::Result<Vec<u8>>,
) -> Result<BTreeMap<String, Vec<u8>>, String> {
    let Some(interp) = deja_kernel::elf_interpreter(image) else { return Ok(BTreeMap::new()) };
    let parsed = cache.map(LdCache::parse);
    let not_found_note = match &parsed {
        None => String::new(),
        Some(Ok(_)) => format!(", nor through {}", ldcache::PATH),
        Some(Err(e)) => format!(" ({} was not used: {e})", ldcache::PATH),
    };
    let walk = Walk {
        image,
        exe,
        exe_guest,
        interp: &interp,
        read,
        cache: parsed.as_ref().and_then(|c| c.as_ref().ok()),
        not_found_note,
    };
    match walk.run(false) {
        Ok(files) => Ok(files),
        Err(Stop::Failed(problem)) => Err(problem),
        Err(Stop::NeedsCache) => {
            let mut files = walk.run(true).map_err(Stop::problem)?;
            files.insert(ldcache::PATH.to_string(), cache.unwrap_or_default().to_vec());
            Ok(files)
        }
    }
}

/// Why a walk stopped.
enum Stop {
    /// A library resolves through the cache to a file the default directories do not give.
    NeedsCache,
    /// The closure cannot be made (for people).
    Failed(String),
}

impl Stop {
    fn problem(self) -> String {
        match self {
            Stop::NeedsCache => "the walk with the cache declared asked for it again".to_string(),
            Stop::Failed(problem) => problem,
        }
    }
}

/// A directory to search, as the host sees it and as the loader will.
type Dir = (String, String);

/// A file found for a name: where it is on the host, where the loader opens it, its bytes.
type Found = (String, String, Vec<u8>);

/// One object to visit.
struct Object {
    /// Where it is on the host.
    host: String,
    /// Where the loader sees it.
    guest: String,
    /// Its bytes.
    bytes: Vec<u8>,
    /// The `DT_RPATH` directories of the objects that brought it in, nearest first.
    inherited: Vec<Dir>,
}

/// One walk over a program's dependencies.
struct Walk<'a> {
    image: &'a [u8],
    exe: &'a Path,
    exe_guest: &'a str,
    interp: &'a str,
    read: &'a dyn Fn(&str) -> io::Result<Vec<u8>>,
    cache: Option<&'a LdCache>,
    /// Appended to a "not found" error.
    not_found_note: String,
}

impl Walk<'_> {
    /// The closure as the guest's loader sees it with the cache declared (`declare`) or
    /// without it. Without it, stops with [`Stop::NeedsCache`] as soon as a library resolves
    /// through the cache to a file the default directories do not give.
    fn run(&self, declare: bool) -> Result<BTreeMap<String, Vec<u8>>, Stop> {
        let interp = self.interp;
        let loader =
            (self.read)(interp).map_err(|e| Stop::Failed(format!("cannot read the interpreter {interp}: {e}")))?;
        let mut files = BTreeMap::from([(interp.to_string(), loader)]);
        let mut queue = VecDeque::from([Object {
            host: self.exe.display().to_string(),
            guest: self.exe_guest.to_string(),
            bytes: self.image.to_vec(),
            inherited: Vec::new(),
        }]);
        let mut looked_up = BTreeSet::new();
        while let Some(object) = queue.pop_front() {
            let needs = deja_kernel::dynamic_needs(&object.bytes);
            // `$ORIGIN` is the object's directory as the loader sees it (the guest's), read
            // here from the host's.
            let (host_origin, guest_origin) = (dir(&object.host), dir(&object.guest));
            let both = |d: &String| (expand(d, &host_origin), expand(d, &guest_origin));
            let mut rpath: Vec<Dir> = needs.rpath.iter().map(both).collect();
            rpath.extend(object.inherited.iter().cloned());
            let own = if needs.runpath.is_empty() { rpath.clone() } else { needs.runpath.iter().map(both).collect() };
            for name in needs.needed {
                if !looked_up.insert(name.clone()) {
                    continue;
                }
                for (host, guest, bytes) in self.resolve(&name, &own, declare, &object.host)? {
                    if files.contains_key(&guest) {
                        continue;
                    }
                    if files.len() >= MAX_OBJECTS {
                        let exe = self.exe.display();
                        return Err(Stop::Failed(format!("{exe} needs more than {MAX_OBJECTS} shared objects")));
                    }
                    files.insert(guest.clone(), bytes.clone());
                    queue.push_back(Object { host, guest, bytes, inherited: rpath.clone() });
                }
            }
        }
        Ok(files)
    }

    /// The files to declare for `name`, needed by the object at `needer` whose own directories
    /// are `own`: one, or, through a declared cache, every one the loader could open.
    fn resolve(&self, name: &str, own: &[Dir], declare: bool, needer: &str) -> Result<Vec<Found>, Stop> {
        let read = |path: &str| (self.read)(path).ok();
        if name.contains('/') {
            return match read(name) {
                Some(bytes) => Ok(vec![(name.to_string(), name.to_string(), bytes)]),
                None => Err(Stop::Failed(format!("{needer} needs {name}, which is in none of {name}"))),
            };
        }
        let join = |d: &str| format!("{}/{name}", d.trim_end_matches('/'));
        for (host, guest) in own {
            if let Some(bytes) = read(&join(host)) {
                return Ok(vec![(join(host), join(guest), bytes)]);
            }
        }
        let default = DEFAULT_DIRS.iter().find_map(|d| Some((join(d), read(&join(d))?)));
        // A cache path that is not absolute would be the guest's working directory's: not used.
        let read_cached = |path: &str| if path.starts_with('/') { read(path) } else { None };
        let mut found: Vec<Found> = Vec::new();
        if let Some(cache) = self.cache {
            let lookup = cache.lookup(name);
            if !declare {
                let default_path = default.as_ref().map(|d| d.0.as_str());
                if lookup.plain.is_some_and(|plain| Some(plain) != default_path && read_cached(plain).is_some()) {
                    return Err(Stop::NeedsCache);
                }
            } else {
                // The loader goes on to the default directories when it takes no entry, or
                // one whose file does not open.
                let mut may_fall_through = lookup.plain.is_none();
                for path in lookup.choices {
                    match read_cached(path) {
                        Some(bytes) => found.push((path.to_string(), path.to_string(), bytes)),
                        None => may_fall_through = true,
                    }
                }
                if !may_fall_through {
                    return Ok(found);
                }
            }
        }
        if let Some((path, bytes)) = default {
            if !found.iter().any(|f| f.1 == path) {
                found.push((path.clone(), path, bytes));
            }
        }
        if found.is_empty() {
            let tried: Vec<String> =
                own.iter().map(|d| join(&d.0)).chain(DEFAULT_DIRS.iter().map(|d| join(d))).collect();
            let (tried, note) = (tried.join(", "), &self.not_found_note);
            return Err(Stop::Failed(format!("{needer} needs {name}, which is in none of {tried}{note}")));
        }
        Ok(found)
    }
}

/// The directory of an object (`.` for a bare file name, as the host sees it).
fn dir(path: &str) -> String {
    match Path::new(path).parent().map(|d| d.display().to_string()) {
        Some(d) if !d.is_empty() => d,
        _ => ".".to_string(),
    }
}

/// `d` with `$ORIGIN` (or `${ORIGIN}`) replaced by `origin`.
fn expand(d: &str, origin: &str) -> String {
    d.replace("${ORIGIN}", origin).replace("$ORIGIN", origin)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DT_NEEDED: u64 = 1;
    const DT_RPATH: u64 = 15;
    const DT_RUNPATH: u64 = 29;
    const LOADER: &str = "/lib64/ld-linux-x86-64.so.2";
    const LIBC: &str = "/lib/x86_64-linux-gnu/libc.so.6";

    /// A minimal x86-64 ELF executable: one `PT_LOAD` of the whole file, a `PT_INTERP` naming
    /// the loader, and a dynamic section (found through the section headers) holding `dynamic`
    /// (tag, string) entries.
    fn elf(dynamic: &[(u64, &str)]) -> Vec<u8> {
        let put = |out: &mut Vec<u8>, at: usize, bytes: &[u8]| out[at..at + bytes.len()].copy_from_slice(bytes);
        let mut out = vec![0u8; 64 + 2 * 56];
        let interp_at = out.len();
        out.extend_from_slice(LOADER.as_bytes());
        out.push(0);
        let dynstr_at = out.len();
        let mut entries = Vec::new();
        out.push(0);
        for (tag, s) in dynamic {
            entries.push((*tag, (out.len() - dynstr_at) as u64));
            out.extend_from_slice(s.as_bytes());
            out.push(0);
        }
        let dynstr_len = out.len() - dynstr_at;
        out.resize(out.len().next_multiple_of(8), 0);
        let dynamic_at = out.len();
        for (tag, value) in entries.iter().chain(&[(0, 0)]) {
            out.extend_from_slice(&tag.to_le_bytes());
            out.extend_from_slice(&value.to_le_bytes());
        }
        let dynamic_len = out.len() - dynamic_at;
        let shoff = out.len();
        out.resize(shoff + 3 * 64, 0);
        // Section 1: .dynstr (SHT_STRTAB); section 2: .dynamic (SHT_DYNAMIC, linked to 1).
        for (i, (ty, at, len, link, entsize)) in
            [(3u32, dynstr_at, dynstr_len, 0u32, 0u64), (6, dynamic_at, dynamic_len, 1, 16)].into_iter().enumerate()
        {
            let sh = shoff + (i + 1) * 64;
            put(&mut out, sh + 4, &ty.to_le_bytes());
            put(&mut out, sh + 8, &2u64.to_le_bytes()); // SHF_ALLOC
            put(&mut out, sh + 16, &(0x40_0000 + at as u64).to_le_bytes());
            put(&mut out, sh + 24, &(at as u64).to_le_bytes());
            put(&mut out, sh + 32, &(len as u64).to_le_bytes());
            put(&mut out, sh + 40, &link.to_le_bytes());
            put(&mut out, sh + 48, &8u64.to_le_bytes());
            put(&mut out, sh + 56, &entsize.to_le_bytes());
        }
        let len = out.len() as u64;
        put(&mut out, 0, b"\x7fELF\x02\x01\x01");
        put(&mut out, 16, &2u16.to_le_bytes()); // ET_EXEC
        put(&mut out, 18, &62u16.to_le_bytes()); // EM_X86_64
        put(&mut out, 20, &1u32.to_le_bytes());
        put(&mut out, 24, &0x40_0000u64.to_le_bytes());
        put(&mut out, 32, &64u64.to_le_bytes());
        put(&mut out, 40, &(shoff as u64).to_le_bytes());
        // .dynstr doubles as the section names' table (every name is its empty first string).
        for (at, v) in [(52, 64u16), (54, 56), (56, 2), (58, 64), (60, 3), (62, 1)] {
            put(&mut out, at, &v.to_le_bytes());
        }
        // PT_LOAD of everything, then PT_INTERP.
        let phdrs: [[u64; 7]; 2] = [
            [1 | (5 << 32), 0, 0x40_0000, 0x40_0000, len, len, 0x1000],
            [3 | (4 << 32), interp_at as u64, 0, 0, LOADER.len() as u64 + 1, LOADER.len() as u64 + 1, 1],
        ];
        for (i, p) in phdrs.iter().enumerate() {
            for (j, v) in p.iter().enumerate() {
                // p_type and p_flags share the first word.
                put(&mut out, 64 + i * 56 + j * 8, &v.to_le_bytes());
            }
        }
        out
    }

    fn needing(names: &[&str]) -> Vec<u8> {
        elf(&names.iter().map(|n| (DT_NEEDED, *n)).collect::<Vec<_>>())
    }

    /// A cache file (new format) with `rows` (name, path, hwcap), sorted as `ldconfig` sorts.
    fn cache(rows: &[(&str, &str, u64)]) -> Vec<u8> {
        let mut rows: Vec<ldcache::tests::Row> =
            rows.iter().map(|&(name, path, hwcap)| (ldcache::X86_64_LIBC6, name, path, 0, hwcap)).collect();
        // Stable: entries of one name keep their order (hwcaps builds before the plain one).
        rows.sort_by(|a, b| ldcache::libcmp(b.1.as_bytes(), a.1.as_bytes()));
        ldcache::tests::build(&rows, false)
    }

    /// A file system of `files` (path, bytes).
    fn fs(files: Vec<(&str, Vec<u8>)>) -> impl Fn(&str) -> io::Result<Vec<u8>> {
        let files: BTreeMap<String, Vec<u8>> = files.into_iter().map(|(p, b)| (p.to_string(), b)).collect();
        move |path| files.get(path).cloned().ok_or_else(|| io::ErrorKind::NotFound.into())
    }

    fn run(
        prog: &[u8],
        cache: Option<&[u8]>,
        files: Vec<(&str, Vec<u8>)>,
    ) -> Result<BTreeMap<String, Vec<u8>>, String> {
        let read = fs(files);
        closure(prog, Path::new("/app/prog"), "/bin/prog", cache, &read)
    }

    fn paths(files: &BTreeMap<String, Vec<u8>>) -> Vec<&str> {
        files.keys().map(String::as_str).collect()
    }

    /// The loader and libc where Debian has them.
    fn base() -> Vec<(&'static str, Vec<u8>)> {
        vec![(LOADER, b"ld.so".to_vec()), (LIBC, b"libc".to_vec())]
    }

    const V3: u64 = ldcache::HWCAP_EXTENSION | 1;

    #[test]
    fn a_library_only_the_cache_lists_is_found_and_the_cache_declared() {
        let prog = needing(&["libgreet.so.1", "libc.so.6"]);
        let mut files = base();
        files.push(("/opt/lib/libgreet.so.1", needing(&["libdep.so.2"])));
        files.push(("/opt/lib/libdep.so.2", b"dep".to_vec()));
        let c = cache(&[
            ("libgreet.so.1", "/opt/lib/libgreet.so.1", 0),
            ("libdep.so.2", "/opt/lib/libdep.so.2", 0),
            ("libc.so.6", LIBC, 0),
        ]);
        let got = run(&prog, Some(&c), files.clone()).unwrap();
        assert_eq!(
            paths(&got),
            [ldcache::PATH, LIBC, LOADER, "/opt/lib/libdep.so.2", "/opt/lib/libgreet.so.1"],
            "the library, its own dependency (found through the cache too) and the cache"
        );
        assert_eq!(got[ldcache::PATH], c, "the cache is declared with the bytes that were read");
        // Without a cache, or with one that cannot be parsed, the library is not found.
        let err = run(&prog, None, files.clone()).unwrap_err();
        assert!(err.starts_with("/app/prog needs libgreet.so.1, which is in none of /lib/x86_64-linux-gnu/"), "{err}");
        let err = run(&prog, Some(&c[..60]), files.clone()).unwrap_err();
        assert!(
            err.contains("(/etc/ld.so.cache was not used: 3 entries at offset 0 run past the end (60 bytes))"),
            "{err}"
        );
        // Nor does a relative path (the loader would open it in the guest's working directory).
        let relative = cache(&[("libgreet.so.1", "opt/lib/libgreet.so.1", 0)]);
        let mut with_relative = files.clone();
        with_relative.push(("opt/lib/libgreet.so.1", b"greet".to_vec()));
        let err = run(&prog, Some(&relative), with_relative).unwrap_err();
        assert!(err.contains("needs libgreet.so.1, which is in none of"), "{err}");
        // A cache entry whose file the host does not have does not count.
        files.retain(|f| f.0 != "/opt/lib/libdep.so.2");
        let err = run(&prog, Some(&c), files).unwrap_err();
        assert!(
            err.contains("needs libdep.so.2, which is in none of") && err.ends_with(", nor through /etc/ld.so.cache")
        );
    }

    #[test]
    fn the_cache_is_not_declared_when_the_default_directories_find_the_same_files() {
        let prog = needing(&["libc.so.6", "libz.so.1"]);
        let mut files = base();
        files.push(("/usr/lib/x86_64-linux-gnu/libz.so.1", b"z".to_vec()));
        files.push(("/lib/x86_64-linux-gnu/glibc-hwcaps/x86-64-v3/libc.so.6", b"libc v3".to_vec()));
        // The cache agrees with the default directories. A hwcaps build alone does not bring the
        // cache in: without it the loader opens the default directories' build, as declared.
        let c = cache(&[
            ("libc.so.6", "/lib/x86_64-linux-gnu/glibc-hwcaps/x86-64-v3/libc.so.6", V3),
            ("libc.so.6", LIBC, 0),
            ("libz.so.1", "/usr/lib/x86_64-linux-gnu/libz.so.1", 0),
            ("libother.so.1", "/usr/local/lib/libother.so.1", 0),
        ]);
        let got = run(&prog, Some(&c), files.clone()).unwrap();
        assert_eq!(paths(&got), [LIBC, LOADER, "/usr/lib/x86_64-linux-gnu/libz.so.1"]);
        assert_eq!(got, run(&prog, None, files).unwrap(), "the same as with no cache at all");
    }

    #[test]
    fn a_cache_entry_before_the_default_directories_copy_is_followed() {
        // /usr/local/lib comes first in Debian's ld.so.conf: its libz overrides the system's.
        let prog = needing(&["libz.so.1"]);
        let mut files = base();
        files.push(("/usr/local/lib/libz.so.1", b"local z".to_vec()));
        files.push(("/lib/x86_64-linux-gnu/libz.so.1", b"system z".to_vec()));
        let c =
            cache(&[("libz.so.1", "/usr/local/lib/libz.so.1", 0), ("libz.so.1", "/lib/x86_64-linux-gnu/libz.so.1", 0)]);
        let got = run(&prog, Some(&c), files).unwrap();
        assert_eq!(paths(&got), [ldcache::PATH, LOADER, "/usr/local/lib/libz.so.1"]);
    }

    #[test]
    fn with_the_cache_declared_every_build_the_loader_could_take_is_declared() {
        let prog = needing(&["libgreet.so.1", "libc.so.6"]);
        let mut files = base();
        files.push(("/opt/lib/libgreet.so.1", b"greet".to_vec()));
        // The x86-64-v3 build needs one more library, also found through the cache.
        files.push(("/opt/lib/glibc-hwcaps/x86-64-v3/libgreet.so.1", needing(&["libfast.so.1"])));
        files.push(("/opt/lib/libfast.so.1", b"fast".to_vec()));
        // libc's v3 build is in the cache but not on the host: the loader, if it takes it,
        // goes on to the default directories.
        let c = cache(&[
            ("libgreet.so.1", "/opt/lib/glibc-hwcaps/x86-64-v3/libgreet.so.1", V3),
            ("libgreet.so.1", "/opt/lib/libgreet.so.1", 0),
            ("libfast.so.1", "/opt/lib/libfast.so.1", 0),
            ("libc.so.6", "/lib/x86_64-linux-gnu/glibc-hwcaps/x86-64-v3/libc.so.6", V3),
            ("libc.so.6", LIBC, 0),
        ]);
        let got = run(&prog, Some(&c), files.clone()).unwrap();
        assert_eq!(
            paths(&got),
            [
                ldcache::PATH,
                LIBC,
                LOADER,
                "/opt/lib/glibc-hwcaps/x86-64-v3/libgreet.so.1",
                "/opt/lib/libfast.so.1",
                "/opt/lib/libgreet.so.1",
            ]
        );
        // A library the cache has only as a hwcaps build: the loader may take none, and then
        // finds the default directories' copy, which is declared too.
        files.push(("/usr/lib/x86_64-linux-gnu/libz.so.1", b"z".to_vec()));
        files.push(("/opt/lib/glibc-hwcaps/x86-64-v3/libz.so.1", b"z v3".to_vec()));
        let mut rows = vec![
            ("libgreet.so.1", "/opt/lib/libgreet.so.1", 0),
            ("libz.so.1", "/opt/lib/glibc-hwcaps/x86-64-v3/libz.so.1", V3),
            ("libc.so.6", LIBC, 0),
        ];
        let got = run(&needing(&["libgreet.so.1", "libz.so.1"]), Some(&cache(&rows)), files.clone()).unwrap();
        assert_eq!(
            paths(&got),
            [
                ldcache::PATH,
                LOADER,
                "/opt/lib/glibc-hwcaps/x86-64-v3/libz.so.1",
                "/opt/lib/libgreet.so.1",
                "/usr/lib/x86_64-linux-gnu/libz.so.1",
            ]
        );
        // Without the library that needs the cache, the hwcaps-only entry does not bring it in.
        rows.remove(0);
        let got = run(&needing(&["libz.so.1"]), Some(&cache(&rows)), files).unwrap();
        assert_eq!(paths(&got), [LOADER, "/usr/lib/x86_64-linux-gnu/libz.so.1"]);
    }

    #[test]
    fn an_objects_own_directories_come_before_the_cache() {
        // DT_RUNPATH with $ORIGIN finds the program's own libgreet; the cache's is not used.
        let prog = elf(&[(DT_NEEDED, "libgreet.so.1"), (DT_RUNPATH, "$ORIGIN/lib")]);
        let mut files = base();
        files.push(("/app/lib/libgreet.so.1", b"own".to_vec()));
        files.push(("/opt/lib/libgreet.so.1", b"cache's".to_vec()));
        let c = cache(&[("libgreet.so.1", "/opt/lib/libgreet.so.1", 0)]);
        let got = run(&prog, Some(&c), files).unwrap();
        assert_eq!(paths(&got), ["/bin/lib/libgreet.so.1", LOADER]);
        assert_eq!(got["/bin/lib/libgreet.so.1"], b"own");
    }

    #[test]
    fn a_programs_rpath_serves_its_libraries_and_its_runpath_does_not() {
        // liba has no path of its own: the loader looks for libb in the DT_RPATH of the object
        // that brought liba in, the program. A DT_RUNPATH is not inherited.
        let liba = needing(&["libb.so"]);
        let mut files = base();
        files.push(("/app/lib/liba.so", liba));
        files.push(("/app/lib/libb.so", b"b".to_vec()));
        let rpath = elf(&[(DT_NEEDED, "liba.so"), (DT_RPATH, "$ORIGIN/lib")]);
        let got = run(&rpath, None, files.clone()).unwrap();
        assert_eq!(paths(&got), ["/bin/lib/liba.so", "/bin/lib/libb.so", LOADER]);
        let runpath = elf(&[(DT_NEEDED, "liba.so"), (DT_RUNPATH, "$ORIGIN/lib")]);
        let err = run(&runpath, None, files.clone()).unwrap_err();
        assert!(err.starts_with("/app/lib/liba.so needs libb.so, which is in none of /lib/"), "{err}");
        // With both, the DT_RUNPATH is the program's own path, but its DT_RPATH still serves
        // liba.
        let both = elf(&[(DT_NEEDED, "liba.so"), (DT_RUNPATH, "$ORIGIN/lib"), (DT_RPATH, "/app/lib")]);
        let got = run(&both, None, files).unwrap();
        assert_eq!(paths(&got), ["/app/lib/libb.so", "/bin/lib/liba.so", LOADER]);
    }

    #[test]
    fn a_name_is_looked_up_for_the_first_object_that_needs_it_breadth_first() {
        // The program needs liba then libb; each needs libx, from its own DT_RUNPATH. The loader
        // maps liba's dependencies before libb's, so libx is liba's.
        let prog = needing(&["liba.so", "libb.so"]);
        let mut files = base();
        files.push(("/lib/x86_64-linux-gnu/liba.so", elf(&[(DT_NEEDED, "libx.so"), (DT_RUNPATH, "/ra")])));
        files.push(("/lib/x86_64-linux-gnu/libb.so", elf(&[(DT_NEEDED, "libx.so"), (DT_RUNPATH, "/rb")])));
        files.push(("/ra/libx.so", b"a's".to_vec()));
        files.push(("/rb/libx.so", b"b's".to_vec()));
        let got = run(&prog, None, files).unwrap();
        assert_eq!(
            paths(&got),
            ["/lib/x86_64-linux-gnu/liba.so", "/lib/x86_64-linux-gnu/libb.so", LOADER, "/ra/libx.so"]
        );
    }

    #[test]
    fn a_static_program_needs_nothing_and_a_missing_loader_is_named() {
        assert!(run(b"not even ELF", None, base()).unwrap().is_empty());
        let err = run(&needing(&[]), None, vec![]).unwrap_err();
        assert!(err.starts_with("cannot read the interpreter /lib64/ld-linux-x86-64.so.2"), "{err}");
    }
}
