//! Behavioural features: what a run did, as ids the explorer counts as coverage. A program
//! without SanitizerCoverage gets its feedback from these alone; an instrumented one gets them
//! on top of its edges.
//!
//! For a program run (every life): the sequence of (syscall, errno) outcomes after the first
//! injected fault (and from the start of a life after a crash), as consecutive pairs; the files
//! left at the end, with numbers masked; how the last life ended; and the output lines with
//! numbers masked. For a cluster round: each node's output lines, assertion outcomes and edges,
//! and the kinds of faults that struck (see [`crate::cluster`]).

use std::collections::BTreeMap;

use deja_vmm::Incarnation;

/// Masks every number, and every run of numbers joined by `,`, `.`, `:` or spaces, in an
/// output line: `#`.
pub fn template(line: &str) -> String {
    let c: Vec<char> = line.chars().collect();
    let mut out = String::with_capacity(line.len());
    let mut i = 0;
    while i < c.len() {
        if !c[i].is_ascii_digit() {
            out.push(c[i]);
            i += 1;
            continue;
        }
        let mut j = i;
        loop {
            while j < c.len() && c[j].is_ascii_digit() {
                j += 1;
            }
            let mut k = j;
            while k < c.len() && matches!(c[k], ',' | '.' | ':' | ' ') {
                k += 1;
            }
            if k > j && k < c.len() && c[k].is_ascii_digit() {
                j = k;
            } else {
                break;
            }
        }
        out.push('#');
        i = j;
    }
    out
}

/// A behaviour's id: the first 8 bytes of the BLAKE3 of its parts.
pub fn feature(parts: &[&str]) -> u64 {
    let mut h = blake3::Hasher::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update(&[0]);
    }
    let mut w = [0u8; 8];
    w.copy_from_slice(&h.finalize().as_bytes()[..8]);
    u64::from_le_bytes(w)
}

/// Output lines, files and syscall outcomes considered at most, per life.
const MAX_ITEMS: usize = 256;

/// The behavioural features of a program run made of `lives` that printed `stdout`, into
/// `out` (with no place in the decision log: none of them is progress of an assertion).
pub fn program_features(lives: &[Incarnation], stdout: &[u8], out: &mut BTreeMap<u64, Option<u64>>) {
    for (i, life) in lives.iter().enumerate() {
        let r = &life.run.report;
        let n = i.min(2).to_string();
        let mut prev = "start".to_string();
        for (nr, errno) in r.after_fault.iter().take(MAX_ITEMS) {
            let cur = format!("{nr}/{errno}");
            out.entry(feature(&["after fault", &n, &prev, &cur])).or_insert(None);
            prev = cur;
        }
    }
    if let Some(last) = lives.last() {
        let r = &last.run.report;
        for f in r.files.iter().take(MAX_ITEMS) {
            out.entry(feature(&["file", &template(f)])).or_insert(None);
        }
        let end = match &r.exit {
            deja_kernel::ExitStatus::Exited { code } => format!("exit {code}"),
            deja_kernel::ExitStatus::Signaled { name, .. } => format!("signal {name}"),
        };
        out.entry(feature(&["end", &end])).or_insert(None);
    }
    for line in String::from_utf8_lossy(stdout).lines().take(MAX_ITEMS) {
        out.entry(feature(&["line", &template(line)])).or_insert(None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_mask_numbers_and_runs_of_them() {
        assert_eq!(template("put k12 failed after 3.5 s"), "put k# failed after # s");
        assert_eq!(template("10.0.0.1:7000 accepted"), "# accepted");
        assert_eq!(template("no digits"), "no digits");
        assert_ne!(feature(&["a", "bc"]), feature(&["ab", "c"]), "parts are separated");
    }
}
