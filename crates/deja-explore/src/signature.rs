//! Failure signatures: what a failed run or cluster round is deduplicated by, the key of its
//! bug file (`bug-<id>.json`, the id being the first 12 hex digits of the signature's BLAKE3).

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// How a run failed, in the words its bug file and reports record: one variant per kind of
/// failure, with its data.
///
/// Serialized as its [`Display`](fmt::Display) string, the signature deja has always written,
/// and read back with [`FromStr`]. A string no variant gives back exactly (a signature of an
/// older deja, or a message no variant can carry) reads as [`FailureSignature::Other`] and
/// writes back unchanged, so every bug file keeps its id.
///
/// Two signatures are the same failure when their words are the same: equality, order and hash
/// go by the words, so a failure found now equals the one a bug file recorded even where the
/// words read back as [`FailureSignature::Other`] (an assertion message with `; ` in it, say),
/// and signatures sort as their words do.
#[derive(Debug, Clone)]
pub enum FailureSignature {
    /// `assertion always "money is conserved" failed at bank/src/main.rs:153`: the first
    /// failed SDK assertion of any life of a program.
    Assertion {
        /// The assertion's kind (`always`, `unreachable`, …).
        kind: String,
        /// Its message (written quoted, as Rust's `Debug` quotes it).
        message: String,
        /// The source file.
        file: String,
        /// The source line.
        line: u32,
    },
    /// `exit code 1: LOST acknowledged batch N item N`: the program's last life exited with a
    /// non-zero code, and what it said last ([`said`]); `exit code 3` when it said nothing (and
    /// in bug files of older deja, which match any words of that code:
    /// [`FailureSignature::is_the_failure`]).
    ExitCode {
        /// The exit code.
        code: i32,
        /// Its last line of output, masked ([`said`]).
        said: Option<String>,
    },
    /// `killed by SIGSEGV: page fault`, `killed by SIGKILL`: the last life was killed by a
    /// signal; for a CPU fault, what the fault was (its description up to ` at `, without the
    /// addresses that vary between builds).
    Killed {
        /// The signal's name.
        signal: String,
        /// The fault, without where it happened.
        fault: Option<String>,
    },
    /// `assertion failed on n1: lost write; assertion failed on n2: …`: the SDK assertions
    /// that failed in a cluster round, by node, sorted and deduplicated.
    ClusterAssertions(Vec<(String, String)>),
    /// `history not linearizable under the kv model on key x: a read cannot be placed`: the
    /// clients' history is not linearizable (the checker's own signature).
    NotLinearizable(String),
    /// `the clients' history cannot be read: …`.
    HistoryUnreadable(String),
    /// `the cluster got stuck`.
    Stuck,
    /// `node n1 exited with 3: VIOLATION: logs diverge at slot N`: a waited node exited
    /// non-zero, and what its last life said last ([`said`]).
    NodeExited {
        /// The node's name.
        node: String,
        /// Its exit code.
        code: i32,
        /// Its last line of output, masked ([`said`]).
        said: Option<String>,
    },
    /// `node n1 died of SIGSEGV`.
    NodeDied {
        /// The node's name.
        node: String,
        /// The signal's name.
        signal: String,
    },
    /// Any other signature, kept as it was written.
    Other(String),
}

impl FailureSignature {
    /// A program killed by `signal`, with the fault `description` if a CPU fault killed it:
    /// only the part before ` at ` is kept.
    pub fn killed(signal: &str, description: Option<&str>) -> FailureSignature {
        FailureSignature::Killed {
            signal: signal.to_string(),
            fault: description.map(|d| d.split(" at ").next().unwrap_or(d).to_string()),
        }
    }

    /// The SDK assertions that failed in a cluster round, as `(node, message)`: sorted and
    /// deduplicated by their words, as the signature lists them.
    pub fn cluster_assertions(mut failed: Vec<(String, String)>) -> FailureSignature {
        let words = |(node, message): &(String, String)| format!("assertion failed on {node}: {message}");
        failed.sort_by_cached_key(words);
        failed.dedup_by(|a, b| words(a) == words(b));
        FailureSignature::ClusterAssertions(failed)
    }

    /// Parses `s` as a variant, `None` when none applies.
    fn parse_variant(s: &str) -> Option<FailureSignature> {
        use FailureSignature as F;
        if s == "the cluster got stuck" {
            return Some(F::Stuck);
        }
        if s.starts_with("history not linearizable under the ") {
            return Some(F::NotLinearizable(s.to_string()));
        }
        if let Some(e) = s.strip_prefix("the clients' history cannot be read: ") {
            return Some(F::HistoryUnreadable(e.to_string()));
        }
        if let Some(rest) = s.strip_prefix("exit code ") {
            let (code, said) = split_said(rest);
            return Some(F::ExitCode { code: code.parse().ok()?, said });
        }
        if let Some(rest) = s.strip_prefix("killed by ") {
            return Some(match rest.split_once(": ") {
                Some((signal, fault)) => F::Killed { signal: signal.into(), fault: Some(fault.into()) },
                None => F::Killed { signal: rest.into(), fault: None },
            });
        }
        if s.starts_with("assertion failed on ") {
            let mut failed = Vec::new();
            for one in s.split("; ") {
                let (node, message) = one.strip_prefix("assertion failed on ")?.split_once(": ")?;
                failed.push((node.to_string(), message.to_string()));
            }
            return Some(F::ClusterAssertions(failed));
        }
        if let Some(rest) = s.strip_prefix("assertion ") {
            let (kind, rest) = rest.split_once(' ')?;
            let (quoted, place) = rest.rsplit_once(" failed at ")?;
            let (file, line) = place.rsplit_once(':')?;
            // The message as Rust's `Debug` quoted it; JSON reads the quoting of plain text
            // alike, and the exactness check in `from_str` refuses the rest.
            let message: String = serde_json::from_str(quoted).ok()?;
            return Some(F::Assertion { kind: kind.into(), message, file: file.into(), line: line.parse().ok()? });
        }
        if let Some(rest) = s.strip_prefix("node ") {
            if let Some((node, rest)) = rest.split_once(" exited with ") {
                let (code, said) = split_said(rest);
                return Some(F::NodeExited { node: node.into(), code: code.parse().ok()?, said });
            }
            let (node, signal) = rest.rsplit_once(" died of ")?;
            return Some(F::NodeDied { node: node.into(), signal: signal.into() });
        }
        None
    }

    /// True when this failure, found now, is the failure `recorded` (in a bug file, a capsule, a
    /// campaign): the same words, or, for a recorded exit that names no words (a bug file of an
    /// older deja, or a program that said nothing), the same exit of the same node.
    pub fn is_the_failure(&self, recorded: &FailureSignature) -> bool {
        use FailureSignature as F;
        match (recorded, self) {
            (F::ExitCode { code: a, said: None }, F::ExitCode { code: b, .. }) => a == b,
            (F::NodeExited { node: n, code: a, said: None }, F::NodeExited { node: m, code: b, .. }) => {
                n == m && a == b
            }
            _ => self == recorded,
        }
    }
}

/// `1: said` as the code and the words, `1` as the code alone.
fn split_said(rest: &str) -> (&str, Option<String>) {
    match rest.split_once(": ") {
        Some((code, said)) => (code, Some(said.to_string())),
        None => (rest, None),
    }
}

/// Most characters of what a failure said that its name keeps.
pub const SAID_CHARS: usize = 120;

/// What a failing life said, as its failure is named: the line it marked (`marked`: the last
/// one holding the failure marker, from the marker on, [`deja_kernel::RunReport::marked_output`])
/// when there is one, else the last of `lines` (its last lines of output, oldest first) that is
/// not a runtime's boilerplate (Rust's note after a panic); with numbers and addresses masked
/// ([`mask`]) so that the same failure is named alike on every seed, and cut at
/// [`SAID_CHARS`]. `None` when there is no such line.
pub fn said(marked: Option<&str>, lines: &[String]) -> Option<String> {
    let line = match marked {
        Some(m) => m,
        None => last_words(lines)?,
    };
    let masked: String = mask(line.trim()).chars().take(SAID_CHARS).collect();
    Some(masked.trim_end().to_string())
}

/// The last of `lines` that says something: not blank, not a runtime's boilerplate.
pub fn last_words(lines: &[String]) -> Option<&str> {
    lines.iter().rev().map(|l| l.trim()).find(|l| !l.is_empty() && !is_boilerplate(l))
}

/// [`said`] of a failing life's report.
pub fn said_of(life: &deja_kernel::RunReport) -> Option<String> {
    said(life.marked_output.as_deref(), &life.last_output)
}

/// Lines runtimes print after every failure of a kind, which say nothing of the failure (Rust's
/// note after a panic's message): passed over when a failure is named by its last line.
const BOILERPLATE: &[&str] = &["note: run with `RUST_BACKTRACE=", "note: Some details are omitted"];

fn is_boilerplate(line: &str) -> bool {
    BOILERPLATE.iter().any(|b| line.starts_with(b))
}

/// `line` with what varies between runs of the same failure masked: a word of eight or more
/// hexadecimal digits with a digit in it, or `0x` and hexadecimal digits, is `N` (`0xN`); any
/// other run of decimal digits is `N` (`batch 5 item 3` reads `batch N item N`). Control
/// characters become spaces.
pub fn mask(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        let w = std::mem::take(word);
        if w.len() >= 8 && w.chars().all(|c| c.is_ascii_hexdigit()) && w.chars().any(|c| c.is_ascii_digit()) {
            out.push('N');
        } else if w.strip_prefix("0x").is_some_and(|h| !h.is_empty() && h.chars().all(|c| c.is_ascii_hexdigit())) {
            out.push_str("0xN");
        } else {
            let mut in_digits = false;
            for c in w.chars() {
                if c.is_ascii_digit() {
                    if !in_digits {
                        out.push('N');
                    }
                    in_digits = true;
                } else {
                    out.push(c);
                    in_digits = false;
                }
            }
        }
    };
    for c in line.chars() {
        if c.is_ascii_alphanumeric() || c == '_' {
            word.push(c);
        } else {
            flush(&mut word, &mut out);
            out.push(if c.is_control() { ' ' } else { c });
        }
    }
    flush(&mut word, &mut out);
    out
}

impl fmt::Display for FailureSignature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use FailureSignature as F;
        match self {
            F::Assertion { kind, message, file, line } => {
                write!(f, "assertion {kind} {message:?} failed at {file}:{line}")
            }
            F::ExitCode { code, said } => {
                write!(f, "exit code {code}")?;
                said.iter().try_for_each(|s| write!(f, ": {s}"))
            }
            F::Killed { signal, fault: Some(fault) } => write!(f, "killed by {signal}: {fault}"),
            F::Killed { signal, fault: None } => write!(f, "killed by {signal}"),
            F::ClusterAssertions(failed) => {
                for (i, (node, message)) in failed.iter().enumerate() {
                    if i > 0 {
                        f.write_str("; ")?;
                    }
                    write!(f, "assertion failed on {node}: {message}")?;
                }
                Ok(())
            }
            F::NotLinearizable(s) | F::Other(s) => f.write_str(s),
            F::HistoryUnreadable(e) => write!(f, "the clients' history cannot be read: {e}"),
            F::Stuck => f.write_str("the cluster got stuck"),
            F::NodeExited { node, code, said } => {
                write!(f, "node {node} exited with {code}")?;
                said.iter().try_for_each(|s| write!(f, ": {s}"))
            }
            F::NodeDied { node, signal } => write!(f, "node {node} died of {signal}"),
        }
    }
}

impl PartialEq for FailureSignature {
    fn eq(&self, other: &FailureSignature) -> bool {
        self.to_string() == other.to_string()
    }
}

impl Eq for FailureSignature {}

impl PartialOrd for FailureSignature {
    fn partial_cmp(&self, other: &FailureSignature) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for FailureSignature {
    fn cmp(&self, other: &FailureSignature) -> Ordering {
        self.to_string().cmp(&other.to_string())
    }
}

impl Hash for FailureSignature {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.to_string().hash(state);
    }
}

impl FromStr for FailureSignature {
    type Err = std::convert::Infallible;

    /// Never fails: a string no variant gives back byte for byte is
    /// [`FailureSignature::Other`].
    fn from_str(s: &str) -> Result<FailureSignature, Self::Err> {
        Ok(match FailureSignature::parse_variant(s) {
            Some(f) if f.to_string() == s => f,
            _ => FailureSignature::Other(s.to_string()),
        })
    }
}

impl From<&str> for FailureSignature {
    fn from(s: &str) -> FailureSignature {
        match s.parse() {
            Ok(f) => f,
            Err(never) => match never {},
        }
    }
}

impl Serialize for FailureSignature {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for FailureSignature {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<FailureSignature, D::Error> {
        let s = String::deserialize(deserializer)?;
        Ok(FailureSignature::from(s.as_str()))
    }
}

/// A bug file's JSON as an older deja wrote it: `signature` as the plain `words`, and the id of
/// those words.
#[cfg(test)]
pub(crate) fn as_older_deja_wrote_it(mut doc: serde_json::Value, words: &str) -> serde_json::Value {
    doc["signature"] = serde_json::Value::String(words.into());
    doc["id"] = serde_json::Value::String(older_id(&FailureSignature::Other(words.into())));
    doc
}

/// The id an older deja gave a bug: from its signature's words alone.
#[cfg(test)]
pub(crate) fn older_id(signature: &FailureSignature) -> String {
    blake3::hash(signature.to_string().as_bytes()).to_hex()[..12].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The variant and its data: equality goes by the words, this tells the variants apart.
    fn variant(f: &FailureSignature) -> String {
        format!("{f:?}")
    }

    fn every_signature() -> Vec<FailureSignature> {
        use FailureSignature as F;
        vec![
            F::Assertion {
                kind: "always".into(),
                message: "money is neither created nor destroyed".into(),
                file: "bank/src/main.rs".into(),
                line: 153,
            },
            F::Assertion {
                kind: "unreachable".into(),
                message: "a \"quoted\" one".into(),
                file: "a:b.rs".into(),
                line: 1,
            },
            F::ExitCode { code: 3, said: None },
            F::ExitCode { code: -1, said: None },
            F::ExitCode { code: 1, said: Some("LOST acknowledged batch N item N: it: was".into()) },
            F::killed("SIGSEGV", Some("page fault at rip 0x401000")),
            F::killed("SIGKILL", None),
            F::ClusterAssertions(vec![("n1".into(), "lost write".into()), ("n2".into(), "stale read".into())]),
            F::NotLinearizable("history not linearizable under the kv model on key x: a read cannot be placed".into()),
            F::HistoryUnreadable("line 3: bad event".into()),
            F::Stuck,
            F::NodeExited { node: "r1".into(), code: 101, said: None },
            F::NodeExited { node: "r 1".into(), code: 1, said: Some("VIOLATION: logs diverge at slot N".into()) },
            F::NodeDied { node: "r 2".into(), signal: "SIGABRT".into() },
            F::Other("something else".into()),
        ]
    }

    #[test]
    fn every_signature_reads_back_from_its_words() {
        for f in every_signature() {
            let words = f.to_string();
            assert_eq!(variant(&words.parse::<FailureSignature>().unwrap()), variant(&f), "{words:?}");
            let json = serde_json::to_string(&f).unwrap();
            assert_eq!(json, serde_json::to_string(&words).unwrap(), "serialized as its words");
            assert_eq!(variant(&serde_json::from_str::<FailureSignature>(&json).unwrap()), variant(&f));
        }
    }

    #[test]
    fn the_signatures_deja_writes_parse_to_their_variants() {
        use FailureSignature as F;
        let cases = [
            (
                "assertion always \"money is neither created nor destroyed\" failed at bank/src/main.rs:153",
                F::Assertion {
                    kind: "always".into(),
                    message: "money is neither created nor destroyed".into(),
                    file: "bank/src/main.rs".into(),
                    line: 153,
                },
            ),
            ("exit code 1", F::ExitCode { code: 1, said: None }),
            ("exit code 1: LOST batch N", F::ExitCode { code: 1, said: Some("LOST batch N".into()) }),
            ("killed by SIGSEGV: page fault", F::Killed { signal: "SIGSEGV".into(), fault: Some("page fault".into()) }),
            ("killed by SIGKILL", F::Killed { signal: "SIGKILL".into(), fault: None }),
            (
                "assertion failed on r1: acked write lost",
                F::ClusterAssertions(vec![("r1".into(), "acked write lost".into())]),
            ),
            ("the cluster got stuck", F::Stuck),
            ("node r2 exited with 101", F::NodeExited { node: "r2".into(), code: 101, said: None }),
            (
                "node client exited with 1: no replica answers",
                F::NodeExited { node: "client".into(), code: 1, said: Some("no replica answers".into()) },
            ),
            ("node r2 died of SIGSEGV", F::NodeDied { node: "r2".into(), signal: "SIGSEGV".into() }),
            // Near misses are kept as written.
            ("exit code 01", F::Other("exit code 01".into())),
            ("assertion always 'x' failed at a.rs:1", F::Other("assertion always 'x' failed at a.rs:1".into())),
        ];
        for (words, want) in cases {
            let f: FailureSignature = words.parse().unwrap();
            assert_eq!(variant(&f), variant(&want), "{words:?}");
            assert_eq!(f.to_string(), words);
        }
    }

    #[test]
    fn a_fault_is_cut_before_where_it_happened() {
        let f = FailureSignature::killed("SIGSEGV", Some("page fault at 0x10 at rip 0x401000"));
        assert_eq!(f.to_string(), "killed by SIGSEGV: page fault");
    }

    #[test]
    fn a_signature_equals_what_its_words_read_back_as() {
        use FailureSignature as F;
        // A message with the separator in it cannot be split again: it reads back as Other,
        // and is still the same failure, with the same place among the others.
        let found = F::ClusterAssertions(vec![("n1".into(), "lost; twice".into())]);
        let read: FailureSignature = found.to_string().parse().unwrap();
        assert!(matches!(read, F::Other(_)), "{read:?}");
        assert_eq!(read, found);
        let hash = |f: &FailureSignature| {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            f.hash(&mut h);
            h.finish()
        };
        assert_eq!(hash(&read), hash(&found));
        assert_ne!(found, F::ClusterAssertions(vec![("n1".into(), "lost".into())]));
    }

    #[test]
    fn signatures_sort_as_their_words() {
        let mut signatures = every_signature();
        signatures.sort();
        let mut words: Vec<String> = every_signature().iter().map(FailureSignature::to_string).collect();
        words.sort();
        assert_eq!(signatures.iter().map(FailureSignature::to_string).collect::<Vec<_>>(), words);
    }

    #[test]
    fn a_rounds_assertions_are_listed_as_their_words_sort() {
        let pair = |node: &str, message: &str| (node.to_string(), message.to_string());
        let f = FailureSignature::cluster_assertions(vec![
            pair("n1 b", "x"),
            pair("n1", "y"),
            pair("n1 b", "x"),
            pair("n0", "z"),
        ]);
        // `n1:` sorts after `n1 b:` as words, though `n1` comes first as a name.
        assert_eq!(f.to_string(), "assertion failed on n0: z; assertion failed on n1 b: x; assertion failed on n1: y");
    }

    #[test]
    fn a_failure_is_named_by_its_last_line_with_what_varies_masked() {
        let lines = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let said_of = |l: &[&str], m: Option<&str>| said(m, &lines(l));
        assert_eq!(
            said_of(&["all 4 batches", "LOST acknowledged batch 5 item 3"], None).as_deref(),
            Some("LOST acknowledged batch N item N")
        );
        assert_eq!(
            said_of(&["LOST acknowledged batch 17 item 0"], None),
            said_of(&["LOST acknowledged batch 5 item 3"], None),
            "the same failure on another seed"
        );
        assert_eq!(mask("fault at 0x7ffd3a2b10 in e2, hash 9f86d081884c7d65 ok"), "fault at 0xN in eN, hash N ok");
        assert_eq!(mask("deadbeef and 12ab and v1.2.3\tx"), "deadbeef and Nab and vN.N.N x");
        assert_eq!(mask("tab\there"), "tab here");
        // A marked line (the last that held the failure marker) names it, whatever came after.
        let out = ["retrying 3 times", "bye"];
        assert_eq!(
            said_of(&out, Some("VIOLATION: logs diverge at slot 4")).as_deref(),
            Some("VIOLATION: logs diverge at slot N")
        );
        assert_eq!(said_of(&[], None), None);
        assert_eq!(said_of(&["note: run with `RUST_BACKTRACE=1` environment variable"], None), None);
        let panic = [
            "thread 'main' (1) panicked at batchdb/src/main.rs:67:36:",
            "mkdir /db: Os { code: 5, kind: Uncategorized }",
            "note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace",
        ];
        assert_eq!(said_of(&panic, None).as_deref(), Some("mkdir /db: Os { code: N, kind: Uncategorized }"));
        let long = "x".repeat(500);
        assert_eq!(said_of(&[&long], None).map(|s| s.len()), Some(SAID_CHARS));
    }

    #[test]
    fn a_failure_is_the_recorded_one_by_its_words_and_an_older_exit_by_its_code() {
        use FailureSignature as F;
        let lost = F::ExitCode { code: 1, said: Some("LOST acknowledged batch N item N".into()) };
        let unreachable = F::ExitCode { code: 1, said: Some("no replica reachable".into()) };
        assert!(lost.is_the_failure(&lost.clone()));
        assert!(!unreachable.is_the_failure(&lost), "another failure with the same exit code");
        assert!(lost.is_the_failure(&F::from("exit code 1")), "a bug file of an older deja names the code alone");
        assert!(!lost.is_the_failure(&F::from("exit code 2")));
        assert!(!F::from("exit code 1").is_the_failure(&lost), "a recorded name is not matched by silence");
        let node = |n: &str, said: &str| F::NodeExited { node: n.into(), code: 1, said: Some(said.into()) };
        assert!(node("client", "VIOLATION: x").is_the_failure(&F::from("node client exited with 1")));
        assert!(!node("client", "VIOLATION: x").is_the_failure(&node("client", "no replica reachable")));
        assert!(!node("c2", "x").is_the_failure(&F::from("node client exited with 1")));
    }
}
