//! A tiny replicated register: three replicas elect a leader over UDP and replicate an
//! append-only log of written values, and a client that checks every write it saw
//! acknowledged is still there after the cluster settles. One variant has a planted
//! split-brain bug.
//!
//! * `register-replica --id I --listen IP:PORT --peers IP:PORT,... --variant fixed|buggy
//!   [--run-for-ms MS] [--drop-peers-between-ms A,B]` (see `src/bin/register-replica.rs`)
//! * `register-client --replicas IP:PORT,IP:PORT,IP:PORT --writes N [--interval-ms M]
//!   [--settle-ms S] [--bind IP:PORT]` (see `src/bin/register-client.rs`)
//!
//! Every message is one UDP datagram of space-separated ASCII words:
//!
//! | message | from → to | meaning |
//! | --- | --- | --- |
//! | `hb T L LOG` | leader → follower | heartbeat of leader id `L` in term `T`, carrying its whole log |
//! | `hb-ack T N` | follower → leader | the follower is in term `T` and holds `N` entries |
//! | `vote-req T C LT N` | candidate → replica | candidate `C` asks for a vote in term `T`; its last entry has term `LT`, its log `N` entries |
//! | `vote T G` | replica → candidate | the replica is in term `T`; `G` = 1 if it grants its vote |
//! | `write V` | client → replica | append value `V` |
//! | `ack V T` | leader → client | `V` is durable (on a majority, in the fixed variant), written in term `T` |
//! | `read` | client → replica | ask for the register |
//! | `value CSV T` | leader → client | the log's values (`-` if empty), from the leader of term `T` |
//! | `redirect ADDR` | replica → client | ask `ADDR` (the leader as far as this replica knows) or `none` |
//!
//! A log on the wire is `V:T,V:T,...` (value and the term it was written in) or `-`.

pub use echo::Args;

pub mod client;

/// One log entry: a value and the term of the leader that appended it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The written value.
    pub value: u64,
    /// The leader's term when it appended the value.
    pub term: u64,
}

/// `V:T,V:T,...`, or `-` for an empty log.
pub fn encode_log(log: &[Entry]) -> String {
    if log.is_empty() {
        return "-".to_string();
    }
    log.iter().map(|e| format!("{}:{}", e.value, e.term)).collect::<Vec<_>>().join(",")
}

/// The inverse of [`encode_log`]; `None` if malformed.
pub fn decode_log(text: &str) -> Option<Vec<Entry>> {
    if text == "-" {
        return Some(Vec::new());
    }
    text.split(',')
        .map(|e| {
            let (v, t) = e.split_once(':')?;
            Some(Entry { value: v.parse().ok()?, term: t.parse().ok()? })
        })
        .collect()
}

/// The values of a log, comma-separated (`-` if empty).
pub fn values_csv(log: &[Entry]) -> String {
    if log.is_empty() {
        return "-".to_string();
    }
    log.iter().map(|e| e.value.to_string()).collect::<Vec<_>>().join(",")
}
