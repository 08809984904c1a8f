//! What a run looked for that this host has and the run was not given: the paths a program's
//! lookups failed on (`RunReport::not_found`), compared with the host's files, each with the
//! `--file` that would provide it. Nothing here reaches the run: the comparison is made after
//! it, for the report, and no host file is ever passed through.

use deja_kernel::record::not_found::NotFound;
use serde::Serialize;

/// A host path the run lacked, and the `--file` that provides it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NotGiven {
    /// The host path to give: a directory three levels down (`/usr/lib/python3.11`,
    /// `/usr/share/zoneinfo`) or a shallower file (`/etc/hostname`).
    pub path: String,
    /// The paths the program looked for in it.
    pub looked_for: Vec<String>,
    /// The option that gives it: `--file PATH`.
    pub provide: String,
}

/// Levels below `/` of the directory given for a path looked for deeper down: a package's own
/// directory (`/usr/lib/python3.11`), not the whole of `/usr/lib`.
const GIVEN_DEPTH: usize = 3;

/// What the host has of `not_found`. Each path looked for is given through its ancestor
/// [`GIVEN_DEPTH`] levels down (the path itself when shallower), or through its missing
/// component when that is deeper, and a shared library alone; `host(path)` says whether the
/// host has `path`. Paths the host lacks are not listed (nor given through a directory it
/// has); each host path is listed once, the most looked-for first, shared libraries first among
/// equals, then in the order first looked for.
pub fn on_host(not_found: &[NotFound], host: impl Fn(&str) -> bool) -> Vec<NotGiven> {
    let mut out: Vec<NotGiven> = Vec::new();
    for n in not_found {
        let floor = depth(&n.missing).max(1);
        for p in &n.paths {
            // A shared library is given alone (the loader looks for it in directories as large
            // as /usr/lib/x86_64-linux-gnu); a package's other files through its directory.
            let given = if shared_library(p) { p.as_str() } else { ancestor(p, depth(p).min(GIVEN_DEPTH).max(floor)) };
            // Only what the host has: giving the directory would not give the rest.
            if !host(p) || !host(given) {
                continue;
            }
            match out.iter_mut().find(|g| g.path == given) {
                Some(g) => g.looked_for.push(p.clone()),
                None => out.push(NotGiven {
                    path: given.to_string(),
                    looked_for: vec![p.clone()],
                    provide: format!("--file {given}"),
                }),
            }
        }
    }
    // What the program looked for most first (a standard library before a locale file), and
    // among equals a shared library (a loader that does not find one fails) before the rest.
    out.sort_by_key(|g| (core::cmp::Reverse(g.looked_for.len()), !shared_library(&g.path)));
    out
}

/// [`on_host`] against this host's file system (symlinks followed).
pub fn on_this_host(not_found: &[NotFound]) -> Vec<NotGiven> {
    on_host(not_found, |p| std::path::Path::new(p).exists())
}

/// True if `p` names a shared library (`libffi.so.8`, `libc.so`).
fn shared_library(p: &str) -> bool {
    let name = p.rsplit('/').next().unwrap_or_default();
    name.ends_with(".so") || name.contains(".so.")
}

/// Components of an absolute path.
fn depth(p: &str) -> usize {
    p.split('/').filter(|c| !c.is_empty()).count()
}

/// The ancestor of absolute `p` with `levels` components (`p` when it has no more).
fn ancestor(p: &str, levels: usize) -> &str {
    match p.match_indices('/').nth(levels) {
        Some((i, _)) => &p[..i],
        None => p,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nf(missing: &str, paths: &[&str]) -> NotFound {
        NotFound { missing: missing.into(), paths: paths.iter().map(|p| p.to_string()).collect(), lookups: 3 }
    }

    fn fake(p: &str) -> bool {
        matches!(
            p,
            "/usr/lib/python3.11"
                | "/usr/lib/python3.11/os.py"
                | "/usr/lib/python3.11/encodings"
                | "/usr/lib/locale"
                | "/usr/lib/locale/locale-archive"
                | "/etc/hostname"
                | "/opt/app/conf/deep"
                | "/opt/app/conf/deep/x"
        )
    }

    #[test]
    fn a_package_directory_is_given_whole_and_a_shallow_file_alone() {
        let got = on_host(
            &[
                nf("/usr", &["/usr/lib/locale/locale-archive", "/usr/lib/python311.zip", "/usr/lib/python3.11/os.py"]),
                nf("/etc", &["/etc/ld.so.preload", "/etc/hostname"]),
                nf("/usr/lib/python3.11", &["/usr/lib/python3.11/encodings"]),
                nf("/opt/app/conf/deep", &["/opt/app/conf/deep/x"]),
                nf("/nowhere", &["/nowhere/at/all"]),
            ],
            fake,
        );
        let given: Vec<(&str, usize)> = got.iter().map(|g| (g.provide.as_str(), g.looked_for.len())).collect();
        assert_eq!(
            given,
            [
                ("--file /usr/lib/python3.11", 2),
                ("--file /usr/lib/locale", 1),
                ("--file /etc/hostname", 1),
                ("--file /opt/app/conf/deep", 1),
            ]
        );
    }

    #[test]
    fn a_shared_library_is_given_alone_and_only_where_the_host_has_it() {
        let host = |p: &str| matches!(p, "/usr/lib/x86_64-linux-gnu" | "/usr/lib/x86_64-linux-gnu/libffi.so.8");
        let got = on_host(
            &[nf(
                "/usr/lib/x86_64-linux-gnu",
                &[
                    "/usr/lib/x86_64-linux-gnu/glibc-hwcaps/x86-64-v3/libffi.so.8",
                    "/usr/lib/x86_64-linux-gnu/libffi.so.8",
                ],
            )],
            host,
        );
        let given: Vec<&str> = got.iter().map(|g| g.provide.as_str()).collect();
        assert_eq!(given, ["--file /usr/lib/x86_64-linux-gnu/libffi.so.8"]);
        assert!(shared_library("/lib/libc.so") && !shared_library("/usr/lib/python3.11/os.py"));
    }

    #[test]
    fn ancestors_by_depth() {
        assert_eq!(ancestor("/usr/lib/python3.11/os.py", 3), "/usr/lib/python3.11");
        assert_eq!(ancestor("/etc/hostname", 3), "/etc/hostname");
        assert_eq!(ancestor("/etc/hostname", 1), "/etc");
        assert_eq!(depth("/usr/lib/python3.11"), 3);
    }
}
