//! What each decision is about ([`DecisionPoint`]): one variant per kind of decision a node
//! kernel or a cluster takes, written in logs and bug files as the words the log has always
//! recorded, and read back from them exactly (words no variant writes stay [`DecisionPoint::Other`]).

use crate::prelude::*;
use serde::{Deserialize, Serialize};

use crate::decisions::fault_kinds::{IoErrno, IoOp};

/// A random fault of a cluster's schedule (see `deja-cluster`): the kinds a [`DecisionPoint`]
/// names in its gaps and targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RandomFault {
    /// A random partition.
    Partition,
    /// A random kill (and its restart).
    Kill,
    /// A random pause (and its resume).
    Pause,
    /// A random clock jump.
    Clock,
}

impl RandomFault {
    /// Its name in decision points: `partition`, `kill`, `pause`, `clock`.
    pub fn name(self) -> &'static str {
        match self {
            RandomFault::Partition => "partition",
            RandomFault::Kill => "kill",
            RandomFault::Pause => "pause",
            RandomFault::Clock => "clock",
        }
    }

    /// Every kind, in order.
    pub const ALL: [RandomFault; 4] =
        [RandomFault::Partition, RandomFault::Kill, RandomFault::Pause, RandomFault::Clock];

    fn from_name(s: &str) -> Option<RandomFault> {
        RandomFault::ALL.into_iter().find(|k| k.name() == s)
    }
}

/// Where a decision is taken: one variant per kind of decision, with its data.
///
/// Serialized (JSON in bug files and reports, postcard in snapshots) as its [`Display`]
/// string, the words the log has always recorded (`eio on write #4 to /data/wal`, `network
/// latency`), and read back with [`FromStr`]. A string no variant parses exactly (the points
/// of files written before a kind existed or after it changed) reads as
/// [`DecisionPoint::Other`] and writes back unchanged, so every existing file still loads and
/// keeps its bytes. Parsing is exact: a variant is chosen only when its `Display` gives the
/// string back byte for byte (`sdk random #07` is `Other`).
///
/// [`Display`]: core::fmt::Display
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum DecisionPoint {
    /// `sdk random #N`: the SDK's `Random` request number `n` (from 1).
    SdkRandom {
        /// Which `Random` request, from 1.
        n: u64,
    },
    /// `sdk choice #N of K`: the SDK's `Choice(options)` request number `n` (from 1).
    SdkChoice {
        /// Which `Choice` request, from 1.
        n: u64,
        /// The options the program asked for.
        options: u64,
    },
    /// `eio on write #N to PATH`, `enospc on fsync #N of PATH`: whether the `nth` `op` on
    /// `path` fails with `errno` (a rate's strike).
    IoError {
        /// The error the rate injects.
        errno: IoErrno,
        /// The operation.
        op: IoOp,
        /// Which occurrence of `op` on `path`, from 1.
        nth: u64,
        /// The guest path.
        path: String,
    },
    /// `schedule after syscall N`: which runnable thread runs after syscall `syscall`.
    Schedule {
        /// The syscall count it follows (from 1).
        syscall: u64,
    },
    /// `crash state: keep OP`: whether a crash image keeps a pending operation.
    CrashKeep {
        /// The operation, in words (`write of 4096 bytes at 0 to /data/wal`).
        what: String,
    },
    /// `crash state: cut one kept write`: which kept write, if any, a crash image cuts.
    CrashCutOne,
    /// `crash state: sectors of OP kept`: how many sectors of the write it cuts stay.
    CrashSectorsKept {
        /// The write, in words.
        what: String,
    },
    /// `crash state: prefix of the N pending operations`: how many of them reach the disk.
    CrashPrefix {
        /// The pending operations.
        pending: u64,
    },
    /// `crash state: sectors of OP that reached the disk`: how much of the write after the
    /// prefix reached the disk.
    CrashSectorsReached {
        /// The write, in words.
        what: String,
    },
    /// `failed sync: keep OP`: whether a sync that failed had made a pending operation of its
    /// target durable before it failed (fsyncgate: any subset of what it covered).
    FailedSyncKeep {
        /// The operation, in words.
        what: String,
    },
    /// `network latency`: a message's latency step.
    NetworkLatency,
    /// `udp loss`: whether a datagram is lost.
    UdpLoss,
    /// `udp reorder`: whether a datagram is held back.
    UdpReorder,
    /// `udp duplicate`: whether a datagram is duplicated.
    UdpDuplicate,
    /// `run node at T`: which of the nodes ready at virtual time `t` (ns) runs first.
    RunNode {
        /// The virtual time, in ns.
        at: u64,
    },
    /// `partition gap`, `kill gap`, …: the time to a random fault of this kind.
    Gap(RandomFault),
    /// `kill target`, `pause target`, `clock target`: the node a random fault hits.
    Target(RandomFault),
    /// `partition sides`: the two sides of a random partition.
    PartitionSides,
    /// `partition one way`: whether a random partition cuts one direction only.
    PartitionOneWay,
    /// `partition length`: how long a random partition lasts.
    PartitionLength,
    /// `down length`: how long a randomly killed node stays down.
    DownLength,
    /// `pause length`: how long a randomly paused node stays paused.
    PauseLength,
    /// `clock jump`: how far a random clock jump goes.
    ClockJump,
    /// `template singleton`: whether a test template's run is one `singleton_driver_` alone.
    TemplateSingleton,
    /// `template drivers`: how many driver commands a test template's run starts.
    TemplateDrivers,
    /// `template command`: which command of its kind a test template starts next.
    TemplateCommand,
    /// `template gap`: the time to a test template's next start.
    TemplateGap,
    /// Any other point, kept as it was written (no variant parses it).
    Other(String),
}

impl DecisionPoint {
    /// True for a decision of a cluster's fault model (random faults, UDP faults), false for
    /// a message's latency and the scheduler's order (what the explorer calls random).
    /// [`Other`](DecisionPoint::Other) points are judged by their words: those starting
    /// `partition`, `kill`, `down`, `pause`, `clock` or `udp`.
    pub fn is_fault_point(&self) -> bool {
        match self {
            DecisionPoint::UdpLoss
            | DecisionPoint::UdpReorder
            | DecisionPoint::UdpDuplicate
            | DecisionPoint::Gap(_)
            | DecisionPoint::Target(_)
            | DecisionPoint::PartitionSides
            | DecisionPoint::PartitionOneWay
            | DecisionPoint::PartitionLength
            | DecisionPoint::DownLength
            | DecisionPoint::PauseLength
            | DecisionPoint::ClockJump => true,
            DecisionPoint::Other(p) => {
                ["partition", "kill", "down", "pause", "clock", "udp"].iter().any(|k| p.starts_with(k))
            }
            _ => false,
        }
    }

    /// True for a decision of a test template (`template …`).
    pub fn is_template(&self) -> bool {
        matches!(
            self,
            DecisionPoint::TemplateSingleton
                | DecisionPoint::TemplateDrivers
                | DecisionPoint::TemplateCommand
                | DecisionPoint::TemplateGap
        )
    }

    /// True for a decision that chooses *which* fault (its sides, direction or target) rather
    /// than when. [`Other`](DecisionPoint::Other) points are judged by their words: those
    /// ending `sides`, `one way`, `direction` or `target`.
    pub fn is_structural(&self) -> bool {
        match self {
            DecisionPoint::PartitionSides | DecisionPoint::PartitionOneWay | DecisionPoint::Target(_) => true,
            DecisionPoint::Other(p) => ["sides", "one way", "direction", "target"].iter().any(|k| p.ends_with(k)),
            _ => false,
        }
    }

    /// The words of a variant without data.
    fn fixed_words(&self) -> Option<&'static str> {
        use DecisionPoint as P;
        Some(match self {
            P::CrashCutOne => "crash state: cut one kept write",
            P::NetworkLatency => "network latency",
            P::UdpLoss => "udp loss",
            P::UdpReorder => "udp reorder",
            P::UdpDuplicate => "udp duplicate",
            P::PartitionSides => "partition sides",
            P::PartitionOneWay => "partition one way",
            P::PartitionLength => "partition length",
            P::DownLength => "down length",
            P::PauseLength => "pause length",
            P::ClockJump => "clock jump",
            P::TemplateSingleton => "template singleton",
            P::TemplateDrivers => "template drivers",
            P::TemplateCommand => "template command",
            P::TemplateGap => "template gap",
            _ => return None,
        })
    }

    /// The variants without data: each is always the same words.
    pub const WORDS_ONLY: [DecisionPoint; 15] = [
        DecisionPoint::CrashCutOne,
        DecisionPoint::NetworkLatency,
        DecisionPoint::UdpLoss,
        DecisionPoint::UdpReorder,
        DecisionPoint::UdpDuplicate,
        DecisionPoint::PartitionSides,
        DecisionPoint::PartitionOneWay,
        DecisionPoint::PartitionLength,
        DecisionPoint::DownLength,
        DecisionPoint::PauseLength,
        DecisionPoint::ClockJump,
        DecisionPoint::TemplateSingleton,
        DecisionPoint::TemplateDrivers,
        DecisionPoint::TemplateCommand,
        DecisionPoint::TemplateGap,
    ];

    /// Parses `s` as a variant, `None` when none gives it back exactly.
    fn parse_variant(s: &str) -> Option<DecisionPoint> {
        use DecisionPoint as P;
        if let Some(p) = P::WORDS_ONLY.into_iter().find(|p| p.fixed_words() == Some(s)) {
            return Some(p);
        }
        if let Some(n) = s.strip_prefix("sdk random #") {
            return Some(P::SdkRandom { n: number(n)? });
        }
        if let Some(rest) = s.strip_prefix("sdk choice #") {
            let (n, options) = rest.split_once(" of ")?;
            return Some(P::SdkChoice { n: number(n)?, options: number(options)? });
        }
        if let Some(n) = s.strip_prefix("schedule after syscall ") {
            return Some(P::Schedule { syscall: number(n)? });
        }
        if let Some(t) = s.strip_prefix("run node at ") {
            return Some(P::RunNode { at: number(t)? });
        }
        if let Some(what) = s.strip_prefix("failed sync: keep ") {
            return Some(P::FailedSyncKeep { what: what.to_string() });
        }
        if let Some(rest) = s.strip_prefix("crash state: ") {
            if let Some(what) = rest.strip_prefix("keep ") {
                return Some(P::CrashKeep { what: what.to_string() });
            }
            if let Some(n) = rest.strip_prefix("prefix of the ").and_then(|r| r.strip_suffix(" pending operations")) {
                return Some(P::CrashPrefix { pending: number(n)? });
            }
            let what = rest.strip_prefix("sectors of ")?;
            if let Some(what) = what.strip_suffix(" that reached the disk") {
                return Some(P::CrashSectorsReached { what: what.to_string() });
            }
            return Some(P::CrashSectorsKept { what: what.strip_suffix(" kept")?.to_string() });
        }
        for errno in [IoErrno::Eio, IoErrno::Enospc] {
            let Some(rest) = s.strip_prefix(errno.name()).and_then(|r| r.strip_prefix(" on ")) else { continue };
            let (op, rest) = rest.split_once(" #")?;
            let op = IoOp::ALL.into_iter().find(|o| o.name() == op)?;
            let (nth, path) = rest.split_once(if op == IoOp::Write { " to " } else { " of " })?;
            return Some(P::IoError { errno, op, nth: number(nth)?, path: path.to_string() });
        }
        let (kind, what) = s.split_once(' ')?;
        let kind = RandomFault::from_name(kind)?;
        match what {
            "gap" => Some(P::Gap(kind)),
            "target" => Some(P::Target(kind)),
            _ => None,
        }
    }
}

/// `s` as a `u64` written the way `Display` writes it (no sign, no leading zero).
fn number(s: &str) -> Option<u64> {
    s.parse().ok().filter(|n: &u64| n.to_string() == s)
}

impl core::fmt::Display for DecisionPoint {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        use DecisionPoint as P;
        if let Some(words) = self.fixed_words() {
            return f.write_str(words);
        }
        match self {
            P::SdkRandom { n } => write!(f, "sdk random #{n}"),
            P::SdkChoice { n, options } => write!(f, "sdk choice #{n} of {options}"),
            P::IoError { errno, op, nth, path } => {
                let prep = if *op == IoOp::Write { "to" } else { "of" };
                write!(f, "{} on {} #{nth} {prep} {path}", errno.name(), op.name())
            }
            P::Schedule { syscall } => write!(f, "schedule after syscall {syscall}"),
            P::CrashKeep { what } => write!(f, "crash state: keep {what}"),
            P::FailedSyncKeep { what } => write!(f, "failed sync: keep {what}"),
            P::CrashSectorsKept { what } => write!(f, "crash state: sectors of {what} kept"),
            P::CrashPrefix { pending } => write!(f, "crash state: prefix of the {pending} pending operations"),
            P::CrashSectorsReached { what } => write!(f, "crash state: sectors of {what} that reached the disk"),
            P::RunNode { at } => write!(f, "run node at {at}"),
            P::Gap(kind) => write!(f, "{} gap", kind.name()),
            P::Target(kind) => write!(f, "{} target", kind.name()),
            P::Other(s) => f.write_str(s),
            // Written above.
            P::CrashCutOne
            | P::NetworkLatency
            | P::UdpLoss
            | P::UdpReorder
            | P::UdpDuplicate
            | P::PartitionSides
            | P::PartitionOneWay
            | P::PartitionLength
            | P::DownLength
            | P::PauseLength
            | P::ClockJump
            | P::TemplateSingleton
            | P::TemplateDrivers
            | P::TemplateCommand
            | P::TemplateGap => Ok(()),
        }
    }
}

impl core::str::FromStr for DecisionPoint {
    type Err = core::convert::Infallible;

    /// Never fails: a string no variant parses exactly is [`DecisionPoint::Other`].
    fn from_str(s: &str) -> Result<DecisionPoint, Self::Err> {
        Ok(DecisionPoint::parse_variant(s).unwrap_or_else(|| DecisionPoint::Other(s.to_string())))
    }
}

impl From<&str> for DecisionPoint {
    fn from(s: &str) -> DecisionPoint {
        match s.parse() {
            Ok(p) => p,
            Err(never) => match never {},
        }
    }
}

impl PartialEq<&str> for DecisionPoint {
    /// Compares the point's words.
    fn eq(&self, other: &&str) -> bool {
        /// Consumes `0` while what is written matches it.
        struct Rest<'a>(&'a str);
        impl core::fmt::Write for Rest<'_> {
            fn write_str(&mut self, s: &str) -> core::fmt::Result {
                self.0 = self.0.strip_prefix(s).ok_or(core::fmt::Error)?;
                Ok(())
            }
        }
        let mut rest = Rest(other);
        core::fmt::write(&mut rest, format_args!("{self}")).is_ok() && rest.0.is_empty()
    }
}

impl Serialize for DecisionPoint {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for DecisionPoint {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<DecisionPoint, D::Error> {
        let s = String::deserialize(deserializer)?;
        Ok(DecisionPoint::from(s.as_str()))
    }
}
