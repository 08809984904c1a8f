//! The host files a dynamically linked program needs, found the way glibc's loader finds them,
//! so that `deja run` can declare them: the loader its `PT_INTERP` names and, transitively, every
//! library a `DT_NEEDED` entry names, looked up in the object's `DT_RUNPATH`/`DT_RPATH`
//! (`$ORIGIN` expanded: the object's directory as the loader sees it, read from the host's) and
//! then in the loader's default directories. Each is declared at the path the loader will open,
//! with the host file's bytes (symlinks followed), and so becomes an input of the run like any
//! declared file; nothing else of the host is visible.
//! `/etc/ld.so.cache` is not declared: without it the loader searches the default directories,
//! in the same order as here.

use std::collections::BTreeMap;
use std::path::Path;

/// The directories glibc's loader searches after an object's own, on x86-64 Debian and
/// derivatives (multiarch first), then the generic ones.
pub const DEFAULT_DIRS: [&str; 6] =
    ["/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"];

/// The most objects one program may pull in.
const MAX_OBJECTS: usize = 512;

/// Every host file `image` needs at its guest path (the loader and the libraries), read from the
/// host; empty for a static program. An object that cannot be found is an error naming it and
/// the object that needs it.
pub fn host_closure(image: &[u8], exe: &Path, exe_guest: &str) -> Result<BTreeMap<String, Vec<u8>>, String> {
    let Some(interp) = deja_kernel::elf_interpreter(image) else { return Ok(BTreeMap::new()) };
    let mut files = BTreeMap::new();
    let loader = std::fs::read(&interp).map_err(|e| format!("cannot read the interpreter {interp}: {e}"))?;
    files.insert(interp.clone(), loader);
    // The directory of an object (`.` for a bare file name, as the host sees it).
    let dir = |p: &str| match Path::new(p).parent().map(|d| d.display().to_string()) {
        Some(d) if !d.is_empty() => d,
        _ => ".".to_string(),
    };
    // (where the object is on the host, where the loader sees it, its bytes): the program first
    // (at its guest path), then each library found (at the same path on both sides).
    let mut todo: Vec<(String, String, Vec<u8>)> =
        vec![(exe.display().to_string(), exe_guest.to_string(), image.to_vec())];
    let mut found: BTreeMap<String, String> = BTreeMap::new(); // soname -> guest path
    while let Some((host_path, guest_path, bytes)) = todo.pop() {
        let needs = deja_kernel::dynamic_needs(&bytes);
        // `$ORIGIN` is the object's directory as the loader sees it (the guest's), read here
        // from the host's.
        let (host_origin, guest_origin) = (dir(&host_path), dir(&guest_path));
        let expand = |d: &str, origin: &str| d.replace("${ORIGIN}", origin).replace("$ORIGIN", origin);
        for name in needs.needed {
            if found.contains_key(&name) {
                continue;
            }
            let candidates: Vec<(String, String)> = if name.contains('/') {
                vec![(name.clone(), name.clone())]
            } else {
                let own = needs.search.iter().map(|d| (expand(d, &host_origin), expand(d, &guest_origin)));
                own.chain(DEFAULT_DIRS.iter().map(|d| (d.to_string(), d.to_string())))
                    .map(|(h, g)| {
                        (format!("{}/{name}", h.trim_end_matches('/')), format!("{}/{name}", g.trim_end_matches('/')))
                    })
                    .collect()
            };
            let Some((at, data)) = candidates.iter().find_map(|(h, g)| Some((g.clone(), std::fs::read(h).ok()?)))
            else {
                let tried: Vec<&str> = candidates.iter().map(|c| c.0.as_str()).collect();
                return Err(format!("{host_path} needs {name}, which is in none of {}", tried.join(", ")));
            };
            if files.len() >= MAX_OBJECTS {
                return Err(format!("{} needs more than {MAX_OBJECTS} shared objects", exe.display()));
            }
            found.insert(name, at.clone());
            if !files.contains_key(&at) {
                files.insert(at.clone(), data.clone());
                let host = candidates.iter().find(|c| c.1 == at).map_or(at.clone(), |c| c.0.clone());
                todo.push((host, at, data));
            }
        }
    }
    Ok(files)
}
