//! A 3-node replicated key-value service on openraft, over TCP with tokio, whose Raft log lives
//! in a file it fsyncs; and a client that checks acknowledged writes survive.
//!
//! * `raftkv-node --id N --listen IP:PORT --peers 1=IP:PORT,2=IP:PORT,3=IP:PORT --data DIR
//!   [--variant fixed|buggy]` (see `src/bin/raftkv-node.rs`)
//! * `raftkv-client --nodes IP:PORT,... --writes N [...]` (see `src/bin/raftkv-client.rs`)
//!
//! Everything openraft does not decide is ours: the log store ([`store::LogStore`]), the state
//! machine ([`store::StateMachine`]), the network ([`net`]) and the client protocol. One TCP port
//! per node carries both, one request per line and one answer per line:
//!
//! | request | answer |
//! | --- | --- |
//! | `put K V` | `ok`, `redirect ID` (the leader as far as this node knows, or `none`), `err ...` |
//! | `get K` | `value V`, `none` (no such key), `redirect ID`, `err ...` |
//! | `raft-append JSON`, `raft-vote JSON`, `raft-snapshot JSON` | the JSON of openraft's `Result` |
//!
//! Keys and values are single words. A `get` is linearizable: the leader confirms its leadership
//! with a quorum (openraft's `ensure_linearizable`) and waits until its state machine has applied
//! everything committed before answering.
//!
//! The planted bug (`--variant buggy`) is in the log store: it reports an append flushed to
//! openraft without calling `fsync` (unless the append carries a membership change), so a
//! follower acknowledges, and a leader counts itself in the quorum for, entries a kill throws
//! away.

use std::io::Cursor;

use serde::{Deserialize, Serialize};

pub mod net;
pub mod store;

pub use echo::Args;

/// A write of the replicated map.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// The key.
    pub key: String,
    /// Its new value.
    pub value: String,
}

/// What applying a [`Request`] answers (nothing beyond success).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Response {}

openraft::declare_raft_types!(
    /// The service's openraft types.
    pub TypeConfig:
        D = Request,
        R = Response,
        NodeId = u64,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

/// The openraft handle of a node.
pub type Raft = openraft::Raft<TypeConfig>;

/// Which log store a node runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// fsync the log before reporting an append flushed.
    Fixed,
    /// Report an append flushed without fsync (the planted bug).
    Buggy,
}

impl std::str::FromStr for Variant {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "fixed" => Ok(Variant::Fixed),
            "buggy" => Ok(Variant::Buggy),
            _ => Err(format!("unknown variant {s:?} (fixed or buggy)")),
        }
    }
}
