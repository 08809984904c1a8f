//! The last lines a life wrote to its stdout and stderr: what a failure that ends with an exit
//! code said before it ended (`LOST acknowledged batch 5 item 3`), so that a failure is named
//! by what failed and not by its exit code alone, and a fail-stop shows what the program said.
//!
//! Owns [`OutputTail`]; uses only [`Stream`]. Part of the saved record (a forked run names its
//! failure as its booted run does).

use crate::prelude::*;
use alloc::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::persist::{ensure, RestoreError};
use crate::Stream;

/// Complete lines kept, the newest last.
pub const TAIL_LINES: usize = 8;
/// Bytes kept of a line; the rest of a longer line is dropped.
pub const TAIL_LINE_BYTES: usize = 200;

/// The last [`TAIL_LINES`] non-blank lines of a life's output, stdout and stderr interleaved
/// in the order they were written, and the unfinished line of each stream.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct OutputTail {
    lines: VecDeque<String>,
    /// The last complete line that held the failure marker, from the marker on.
    marked: Option<String>,
    /// The line each stream has begun and not ended: stdout's, then stderr's.
    open: [Vec<u8>; 2],
}

impl OutputTail {
    /// Takes `data` written to `stream`; a complete line that holds `marker` is kept, from the
    /// marker on, as the marked line.
    pub(crate) fn push(&mut self, stream: Stream, data: &[u8], marker: Option<&str>) {
        let open = &mut self.open[usize::from(stream == Stream::Stderr)];
        for &b in data {
            if b == b'\n' {
                let line = core::mem::take(open);
                let text = String::from_utf8_lossy(&line).trim_end().to_string();
                if let Some(at) = marker.filter(|m| !m.is_empty()).and_then(|m| text.find(m)) {
                    self.marked = Some(text[at..].to_string());
                }
                if !text.trim().is_empty() {
                    if self.lines.len() == TAIL_LINES {
                        self.lines.pop_front();
                    }
                    self.lines.push_back(text);
                }
            } else if open.len() < TAIL_LINE_BYTES {
                open.push(b);
            }
        }
    }

    /// The lines, oldest first: the complete ones, then what each stream left unfinished.
    pub(crate) fn lines(&self) -> Vec<String> {
        let unfinished = self.open.iter().map(|l| String::from_utf8_lossy(l).trim_end().to_string());
        let mut all: Vec<String> =
            self.lines.iter().cloned().chain(unfinished.filter(|l| !l.trim().is_empty())).collect();
        let extra = all.len().saturating_sub(TAIL_LINES);
        all.drain(..extra);
        all
    }

    /// The last complete line that held the failure marker, from the marker on.
    pub(crate) fn marked(&self) -> Option<String> {
        self.marked.clone()
    }

    /// Checks a restored tail's bounds.
    pub(crate) fn validate(&self) -> Result<(), RestoreError> {
        ensure(self.lines.len() <= TAIL_LINES, || {
            format!("{} output lines kept, at most {TAIL_LINES}", self.lines.len())
        })?;
        // A kept line is at most TAIL_LINE_BYTES bytes, which lossy decoding may widen threefold.
        let long = self
            .lines
            .iter()
            .chain(&self.marked)
            .map(String::len)
            .chain(self.open.iter().map(Vec::len))
            .max()
            .unwrap_or(0);
        ensure(long <= 3 * TAIL_LINE_BYTES, || format!("an output line of {long} bytes kept"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_keeps_the_last_lines_of_both_streams_in_the_order_written() {
        let mut t = OutputTail::default();
        t.push(Stream::Stdout, b"one\ntw", None);
        t.push(Stream::Stderr, b"warn: x\n\n   \n", None);
        t.push(Stream::Stdout, b"o\r\n", None);
        t.push(Stream::Stdout, b"unfinished", None);
        assert_eq!(t.lines(), ["one", "warn: x", "two", "unfinished"]);
        for i in 0..20 {
            t.push(Stream::Stderr, format!("line {i}\n").as_bytes(), None);
        }
        let lines = t.lines();
        assert_eq!(lines.len(), TAIL_LINES);
        assert_eq!(lines.last().map(String::as_str), Some("unfinished"));
        assert_eq!(lines[TAIL_LINES - 2], "line 19");
        t.push(Stream::Stdout, &[b'x'; 1000], None);
        t.push(Stream::Stdout, b"\n", None);
        assert_eq!(t.lines().last().map(String::len), Some(TAIL_LINE_BYTES), "a long line is cut");
        assert!(t.validate().is_ok());
        assert_eq!(t.marked(), None);
    }

    #[test]
    fn the_last_line_holding_the_marker_is_kept_however_much_follows() {
        let mut t = OutputTail::default();
        let m = Some("VIOLATION:");
        t.push(Stream::Stdout, b"client: VIOLATION: logs diverge at slot 4\n", m);
        t.push(Stream::Stdout, b"client: VIOLATION: logs diverge at slot 7\n", m);
        for i in 0..50 {
            t.push(Stream::Stderr, format!("shutting down {i}\n").as_bytes(), m);
        }
        t.push(Stream::Stdout, b"VIOLATION: unfinished", m);
        assert_eq!(t.marked().as_deref(), Some("VIOLATION: logs diverge at slot 7"));
        assert!(!t.lines().iter().any(|l| l.contains("slot")), "long gone from the last lines");
    }
}
