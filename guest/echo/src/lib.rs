//! Shared bits of the networked example programs: a tiny `--flag value` parser and the exit codes.
//!
//! The binaries live in `src/bin/`: `echo-server`, `echo-client` (TCP, std::net) and
//! `udp-ping`, `udp-pong` (UDP, std::net). The `echo-tokio` package reuses this module for its
//! tokio versions of the TCP pair, so both speak the same command line; the `register` package
//! reuses the parser.
use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::process;
use std::str::FromStr;

/// Exit code: success.
pub const EXIT_OK: i32 = 0;
/// Exit code: bad command line.
pub const EXIT_USAGE: i32 = 2;
/// Exit code: connecting timed out (the last attempt's error was `TimedOut`).
pub const EXIT_CONNECT_TIMEOUT: i32 = 3;
/// Exit code: the connection was refused (the last attempt's error was `ConnectionRefused`).
pub const EXIT_REFUSED: i32 = 4;
/// Exit code: the connection was reset or closed early, or an echo did not match.
pub const EXIT_BROKEN: i32 = 5;
/// Exit code: any other I/O error (for example `NetworkUnreachable` while connecting).
pub const EXIT_OTHER_IO: i32 = 6;

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
                process::exit(EXIT_OK);
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

    /// The socket address given with `--name` (`IP:PORT`, or `HOST:PORT` resolved as the
    /// system resolves it, from `/etc/hosts`); exits 2 if absent, malformed or unresolved.
    pub fn addr(&self, name: &str) -> SocketAddr {
        let text: String = self.required(name);
        self.resolve(name, &text)
    }

    /// A comma-separated list of socket addresses given with `--name`, each as [`Args::addr`]
    /// takes it; exits 2 if absent, malformed or unresolved.
    pub fn addrs(&self, name: &str) -> Vec<SocketAddr> {
        let text: String = self.required(name);
        text.split(',').filter(|s| !s.is_empty()).map(|s| self.resolve(name, s)).collect()
    }

    /// `text` as an address: parsed when it is `IP:PORT` (no lookup), else resolved to its
    /// first IPv4 address.
    fn resolve(&self, name: &str, text: &str) -> SocketAddr {
        if let Ok(a) = text.parse() {
            return a;
        }
        let found = std::net::ToSocketAddrs::to_socket_addrs(text).ok().and_then(|mut all| all.find(SocketAddr::is_ipv4));
        found.unwrap_or_else(|| self.error(&format!("bad address in --{name}: {text:?} (IP:PORT or HOST:PORT)")))
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

/// The exit code for a failed connection attempt.
pub fn connect_exit_code(kind: io::ErrorKind) -> i32 {
    match kind {
        io::ErrorKind::TimedOut => EXIT_CONNECT_TIMEOUT,
        io::ErrorKind::ConnectionRefused => EXIT_REFUSED,
        _ => EXIT_OTHER_IO,
    }
}

/// The exit code for an I/O error on an established connection.
pub fn stream_exit_code(kind: io::ErrorKind) -> i32 {
    match kind {
        io::ErrorKind::ConnectionReset
        | io::ErrorKind::ConnectionAborted
        | io::ErrorKind::BrokenPipe
        | io::ErrorKind::UnexpectedEof => EXIT_BROKEN,
        _ => EXIT_OTHER_IO,
    }
}
