//! What the program looked for and did not get: the paths whose lookup failed with `ENOENT`,
//! by the first component of each that the run's file system lacks. A program that fails
//! because a run was not given its files (Python without its standard library) says so in its
//! own words; the monitor compares these with the host's files and names the `--file` that
//! would provide them (it never passes them through).
//!
//! Owns [`Lookups`] and [`NotFound`]; uses [`crate::persist`]. The optional last part of the
//! saved state (a state saved before it existed restores with none).

use crate::prelude::*;

use serde::{Deserialize, Serialize};

use crate::persist::{ensure, Persist, RestoreError};

/// Most missing paths kept (by their first missing component); later ones are counted.
pub const MAX_NOT_FOUND: usize = 256;
/// Most paths kept for each missing component (the first ones looked for through it).
pub const MAX_PATHS: usize = 8;
/// Most bytes of paths kept in all (a program that looks for many long paths cannot make the
/// record, which every snapshot saves, large); past it, lookups are counted only.
pub const MAX_BYTES: usize = 64 << 10;

/// A path the run's file system lacks and the program looked for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotFound {
    /// The first component of the looked-for paths that was missing (a directory when a
    /// path below it was asked for), absolute.
    pub missing: String,
    /// The first distinct paths looked for through it (at most [`MAX_PATHS`]).
    pub paths: Vec<String>,
    /// How many lookups failed there.
    pub lookups: u64,
}

/// The record of failed lookups of a run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Lookups {
    pub(crate) not_found: Vec<NotFound>,
    /// Failed lookups past [`MAX_NOT_FOUND`] missing components.
    pub(crate) dropped: u64,
}

impl Lookups {
    /// Notes that looking up `path` failed at its missing component `missing`.
    pub(crate) fn note(&mut self, path: &str, missing: &str) {
        let kept: usize =
            self.not_found.iter().map(|n| n.missing.len() + n.paths.iter().map(String::len).sum::<usize>()).sum();
        let room = |extra: usize| kept + extra <= MAX_BYTES;
        if let Some(n) = self.not_found.iter_mut().find(|n| n.missing == missing) {
            n.lookups = n.lookups.saturating_add(1);
            if n.paths.len() < MAX_PATHS && room(path.len()) && !n.paths.iter().any(|p| p == path) {
                n.paths.push(path.into());
            }
        } else if self.not_found.len() < MAX_NOT_FOUND && room(missing.len() + path.len()) {
            self.not_found.push(NotFound { missing: missing.into(), paths: vec![path.into()], lookups: 1 });
        } else {
            self.dropped = self.dropped.saturating_add(1);
        }
    }
}

impl Persist for Lookups {
    type Context = ();

    fn validate(&self, _: &()) -> Result<(), RestoreError> {
        ensure(self.not_found.len() <= MAX_NOT_FOUND, || format!("{} missing paths", self.not_found.len()))?;
        for n in &self.not_found {
            let below = |p: &String| *p == n.missing || p.starts_with(&format!("{}/", n.missing));
            let paths_ok = !n.paths.is_empty() && n.paths.len() <= MAX_PATHS && n.paths.iter().all(below);
            ensure(n.missing.starts_with('/') && paths_ok && n.lookups > 0, || format!("missing path {}", n.missing))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups_are_kept_by_their_missing_component_and_counted_past_the_limit() {
        let mut l = Lookups::default();
        l.note("/usr/lib/python3.11/os.py", "/usr/lib/python3.11");
        l.note("/usr/lib/python3.11/encodings", "/usr/lib/python3.11");
        l.note("/etc/localtime", "/etc/localtime");
        assert_eq!(l.not_found.len(), 2);
        assert_eq!(l.not_found[0].paths, ["/usr/lib/python3.11/os.py", "/usr/lib/python3.11/encodings"]);
        assert_eq!(l.not_found[0].lookups, 2);
        assert_eq!(l.validate(&()), Ok(()));
        for i in 0..MAX_NOT_FOUND {
            l.note(&format!("/x{i}"), &format!("/x{i}"));
        }
        assert_eq!((l.not_found.len(), l.dropped), (MAX_NOT_FOUND, 2));
        // Long paths fill the byte budget first: past it, lookups are only counted.
        let mut long = Lookups::default();
        let name = "/".to_string() + &"x".repeat(4000);
        for i in 0..64 {
            long.note(&format!("{name}{i}"), &format!("{name}{i}"));
        }
        let kept: usize = long.not_found.iter().map(|n| n.missing.len() + n.paths[0].len()).sum();
        assert!(kept <= MAX_BYTES && long.not_found.len() == 8, "{} kept", long.not_found.len());
        assert_eq!(long.dropped, 56);
        let mut bad = Lookups::default();
        bad.note("/a/b", "/c");
        assert!(bad.validate(&()).is_err());
    }
}
