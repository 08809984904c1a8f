//! The fail-stops a round saw: lives that ended non-zero after an injected I/O error and were
//! taken for stops *because of* it (docs/DURABILITY.md#fail-stop), so restarted on their disk
//! and not counted as failures. The explore report counts them by kind and shows what each
//! said, so that a loss the fail-stop rule let through is seen without looking for it.

use deja_kernel::{FaultKind, RunReport};

/// What the kernel's words for a fail-stop begin with (`at its fail-stop (status 1) after eio
/// on write #3 to /db/journal`).
const FAIL_STOP: &str = "at its fail-stop (";

/// A fail-stop seen in a round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailStopSeen {
    /// The node whose life stopped (empty for a program).
    pub node: String,
    /// `status 1 after eio on write #N to /db/journal`: how the life ended and the injected error
    /// it followed, the error's numbers masked so that the same kind of stop counts together.
    pub words: String,
    /// The stopped life's last lines of output.
    pub output: Vec<String>,
}

impl FailStopSeen {
    /// The kind it is counted under: its words, after its node's name for a cluster.
    pub fn key(&self) -> String {
        if self.node.is_empty() {
            self.words.clone()
        } else {
            format!("node {}: {}", self.node, self.words)
        }
    }
}

/// The kind of fail-stop the kernel's `point` words name (`at its fail-stop (status 1) after eio on
/// write #24 to /db/journal` is `status 1 after eio on write #N to /db/journal`); `None` for
/// another point.
fn words_of(point: &str) -> Option<String> {
    let (how, fault) = point.strip_prefix(FAIL_STOP)?.split_once(") after ")?;
    Some(format!("{how} after {}", crate::signature::mask(fault)))
}

/// The fail-stops among `lives` (of a program, or of the node named `node`): each life that the
/// rule restarted, and a last one it let stand because no lives were left.
pub fn of_lives<'a>(node: &str, lives: impl IntoIterator<Item = &'a RunReport>) -> Vec<FailStopSeen> {
    let mut seen = Vec::new();
    // A life's ledger begins with the records of the lives before it.
    let mut earlier = 0;
    for life in lives {
        let own = life.faults.get(earlier..).unwrap_or_default();
        earlier = life.faults.len();
        let restarted = own.iter().rev().find(|f| f.kind == FaultKind::Crash).map(|f| f.point.as_str());
        let point = restarted.filter(|p| p.starts_with(FAIL_STOP)).or(life.stopped_after_fault.as_deref());
        if let Some(words) = point.and_then(words_of) {
            seen.push(FailStopSeen { node: node.to_string(), words, output: life.last_output.clone() });
        }
    }
    seen
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fail_stop_is_named_by_how_it_ended_and_the_error_it_followed() {
        let w = |p: &str| words_of(p);
        assert_eq!(
            w("at its fail-stop (status 1) after eio on write #24 to /db/journal").as_deref(),
            Some("status 1 after eio on write #N to /db/journal")
        );
        assert_eq!(
            w("at its fail-stop (SIGABRT) after enospc on write #3 to /data/wal").as_deref(),
            Some("SIGABRT after enospc on write #N to /data/wal")
        );
        assert_eq!(w("after durable write 3"), None, "a crash the faults placed is no fail-stop");
        let seen =
            FailStopSeen { node: String::new(), words: "status 2 after eio on fsync #N of /w".into(), output: vec![] };
        assert_eq!(seen.key(), seen.words);
        let on_node = FailStopSeen { node: "r1".into(), ..seen };
        assert_eq!(on_node.key(), "node r1: status 2 after eio on fsync #N of /w");
    }
}
