//! A test template's commands for the register, one binary under the names of the template
//! (`examples/compose/register-template.yaml`): what it does is chosen by the name it was
//! started as, its argv\[0\], as a multi-call binary's is. Test commands take no arguments:
//! the replicas are in `REPLICAS` (`HOST:PORT,...`), the writes per driver in `WRITES`
//! (default 5).
//!
//! * `first_*`: waits until a leader answers a read (up to 10 s); exits 3 if none did.
//! * `parallel_driver_*`: writes `WRITES` values, each unique (its pid times 1000 plus its
//!   number), 100 ms apart, and appends each acknowledged one to
//!   `/var/lib/workload/acked` as a line. Exits 0 whatever was acknowledged: under faults a
//!   write may go unacknowledged.
//! * `anytime_*`: one read of the register, printed; exits 0 whatever it read.
//! * `eventually_*` and `finally_*`: reads the leader's log and checks that every value in
//!   `/var/lib/workload/acked` is in it (`assert_always!` "acknowledged writes survive"); exits
//!   1 if one is lost, 3 if no leader answered.
//! * any other name (the image's entrypoint): idles, as a workload container does while the
//!   test composer runs its commands (the replicas' `setup_complete` begins the template).
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::net::{SocketAddr, UdpSocket};
use std::process;
use std::thread;
use std::time::Duration;

use deja_sdk::assert_always;
use deja_sdk::serde_json::json;
use register::client::{Client, EXIT_LOST, EXIT_NO_LEADER, EXIT_SOCKET};

const ACKED: &str = "/var/lib/workload/acked";

fn replicas() -> Vec<SocketAddr> {
    let text = std::env::var("REPLICAS").unwrap_or_default();
    let all: Vec<SocketAddr> = text
        .split(',')
        .filter(|s| !s.is_empty())
        .filter_map(|s| {
            s.parse().ok().or_else(|| {
                std::net::ToSocketAddrs::to_socket_addrs(s).ok().and_then(|mut a| a.find(SocketAddr::is_ipv4))
            })
        })
        .collect();
    if all.is_empty() {
        eprintln!("REPLICAS names no address: {text:?}");
        process::exit(2);
    }
    all
}

fn client(writes: u64) -> Client {
    let socket = UdpSocket::bind(SocketAddr::from(([0, 0, 0, 0], 0))).unwrap_or_else(|e| {
        eprintln!("bind: {e}");
        process::exit(EXIT_SOCKET);
    });
    let replicas = replicas();
    Client {
        socket,
        target: replicas[0],
        replicas,
        acked: BTreeMap::new(),
        writes,
        buf: vec![0u8; 65536],
        history: None,
    }
}

fn read_leader(c: &mut Client, name: &str) -> Vec<u64> {
    match c.read(Duration::from_secs(10)) {
        Some((log, term)) => {
            println!("{name}: leader of term {term} holds {} values", log.len());
            log
        }
        None => {
            println!("{name}: no leader answered");
            process::exit(EXIT_NO_LEADER);
        }
    }
}

fn main() {
    let argv0 = std::env::args().next().unwrap_or_default();
    let name = argv0.rsplit('/').next().unwrap_or_default().to_string();
    if name.starts_with("first_") {
        read_leader(&mut client(0), &name);
    } else if name.starts_with("parallel_driver_") {
        let writes: u64 = std::env::var("WRITES").ok().and_then(|w| w.parse().ok()).unwrap_or(5);
        let base = u64::from(process::id()) * 1000;
        let mut c = client(base + writes);
        let _ = std::fs::create_dir_all("/var/lib/workload");
        let mut acked = std::fs::OpenOptions::new().create(true).append(true).open(ACKED).unwrap_or_else(|e| {
            eprintln!("{ACKED}: {e}");
            process::exit(4);
        });
        let mut n = 0;
        for v in base + 1..=base + writes {
            if c.write(v, Duration::from_millis(1000)) {
                n += 1;
                let _ = acked.write_all(format!("{v}\n").as_bytes());
            }
            thread::sleep(Duration::from_millis(100));
        }
        println!("{name}: {n} of {writes} writes acknowledged");
    } else if name.starts_with("anytime_") {
        read_leader(&mut client(0), &name);
    } else if name.starts_with("eventually_") || name.starts_with("finally_") {
        let mut c = client(0);
        let log = read_leader(&mut c, &name);
        let present: BTreeSet<u64> = log.into_iter().collect();
        let acked: Vec<u64> =
            std::fs::read_to_string(ACKED).unwrap_or_default().lines().filter_map(|l| l.parse().ok()).collect();
        let lost: Vec<u64> = acked.iter().copied().filter(|v| !present.contains(v)).collect();
        println!("{name}: {} acknowledged writes; lost: {lost:?}", acked.len());
        assert_always!(lost.is_empty(), "acknowledged writes survive", &json!({ "lost": lost, "acknowledged": acked }));
        if !lost.is_empty() {
            process::exit(EXIT_LOST);
        }
    } else {
        loop {
            thread::sleep(Duration::from_secs(3600));
        }
    }
}
