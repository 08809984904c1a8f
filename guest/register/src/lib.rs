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
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process;
use std::str::FromStr;

/// Exit code for a bad command line.
pub const EXIT_USAGE: i32 = 2;

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

/// `--name value` pairs from the command line. Flags not listed in `known` are usage errors.
pub struct Args {
    usage: &'static str,
    values: BTreeMap<String, String>,
}

impl Args {
    /// Parses `std::env::args()`; on a malformed or unknown flag prints `usage` and exits 2.
    pub fn parse(usage: &'static str, known: &[&str]) -> Args {
        let mut values = BTreeMap::new();
        let mut it = std::env::args().skip(1);
        while let Some(flag) = it.next() {
            if flag == "-h" || flag == "--help" {
                println!("usage: {usage}");
                process::exit(0);
            }
            let Some(name) = flag.strip_prefix("--").filter(|n| known.contains(n)) else {
                usage_error(usage, &format!("unknown argument {flag:?}"));
            };
            let Some(value) = it.next() else {
                usage_error(usage, &format!("--{name} needs a value"));
            };
            values.insert(name.to_string(), value);
        }
        Args { usage, values }
    }

    /// The raw value of `--name`, if given.
    pub fn raw(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }

    /// The value of `--name` parsed as `T`, or `default` if absent; exits 2 if it does not parse.
    pub fn get<T: FromStr>(&self, name: &str, default: T) -> T {
        match self.values.get(name) {
            None => default,
            Some(v) => v.parse().unwrap_or_else(|_| self.error(&format!("bad value for --{name}: {v:?}"))),
        }
    }

    /// The value of `--name` parsed as `T`; exits 2 if absent or malformed.
    pub fn required<T: FromStr>(&self, name: &str) -> T {
        match self.values.get(name) {
            None => self.error(&format!("--{name} is required")),
            Some(v) => v.parse().unwrap_or_else(|_| self.error(&format!("bad value for --{name}: {v:?}"))),
        }
    }

    /// A comma-separated list of socket addresses given with `--name`; exits 2 if absent or
    /// malformed.
    pub fn addrs(&self, name: &str) -> Vec<SocketAddr> {
        let text: String = self.required(name);
        text.split(',')
            .filter(|s| !s.is_empty())
            .map(|s| s.parse().unwrap_or_else(|_| self.error(&format!("bad address in --{name}: {s:?}"))))
            .collect()
    }

    /// Prints `problem` and the usage to stderr and exits 2.
    pub fn error(&self, problem: &str) -> ! {
        usage_error(self.usage, problem)
    }
}

/// Prints the problem and the usage to stderr and exits 2.
pub fn usage_error(usage: &str, problem: &str) -> ! {
    eprintln!("error: {problem}");
    eprintln!("usage: {usage}");
    process::exit(EXIT_USAGE)
}
