//! The "credit" scenario: a service applies credit events to an account and marks each event
//! processed, on its own durable storage. A client in the same program delivers the events and
//! records each acknowledgment durably; after a restart it delivers again every event it has no
//! acknowledgment for (at-least-once delivery), and at the end the account is checked.
//!
//! Each variant is its own binary — `credit-buggy`, `credit-misleading-green`,
//! `credit-mark-first`, `credit-atomic` — so that `deja check` can judge one against another
//! with the same workload arguments (`[--deliver-twice]`).
//!
//! * `buggy`: credit, then mark, in separate durable writes, and no check for events already
//!   processed. Delivering an event twice credits it twice; so does a crash between the two
//!   writes followed by the client's retry.
//! * `misleading-green`: checks for events already processed, so it passes a test that
//!   delivers every event twice — but a crash between credit and mark still double-credits.
//! * `mark-first`: marks first, then credits: never double-credits, but a crash between the two
//!   loses the credit.
//! * `atomic`: the fix — balance and processed set in one durable write (write a new state
//!   file, fsync it, rename it over the old one, fsync the directory).
use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;

use deja_sdk::serde_json::json;
use deja_sdk::{assert_always, assert_reachable, lifecycle};

const O_SYNC: i32 = 0o4010000;
const EVENTS: [(&str, i64); 2] = [("E1", 2500), ("E2", 1000)];

/// Which implementation of the service runs.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// Credit, then mark, without checking for duplicates.
    Buggy,
    /// Credit, then mark, after checking for duplicates.
    MisleadingGreen,
    /// Mark, then credit.
    MarkFirst,
    /// Credit and mark in one durable write.
    Atomic,
}

fn read(path: &str) -> String {
    let mut text = String::new();
    if let Ok(mut f) = File::open(path) {
        let _ = f.read_to_string(&mut text);
    }
    text
}

/// Complete lines only: a line without its newline was cut short by a crash.
fn lines(text: &str) -> Vec<String> {
    match text.rfind('\n') {
        Some(end) => text[..end].lines().map(String::from).collect(),
        None => Vec::new(),
    }
}

fn write_durably(path: &str, text: &str) -> std::io::Result<()> {
    let mut f = File::create(path)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()
}

fn sync_dir() -> std::io::Result<()> {
    File::open("/data")?.sync_all()
}

fn money(cents: i64) -> String {
    format!("{}.{:02}", cents / 100, cents % 100)
}

struct Service {
    variant: Variant,
    balance: i64,
    processed: BTreeSet<String>,
}

impl Service {
    fn open(variant: Variant) -> std::io::Result<Service> {
        let (balance, processed) = if variant == Variant::Atomic {
            let state = lines(&read("/data/state"));
            let balance = state.iter().find_map(|l| l.strip_prefix("balance=")).and_then(|b| b.parse().ok()).unwrap_or(0);
            let processed = state.iter().filter_map(|l| l.strip_prefix("processed=")).map(String::from).collect();
            (balance, processed)
        } else {
            let balance = lines(&read("/data/balance")).first().and_then(|b| b.parse().ok()).unwrap_or(0);
            (balance, lines(&read("/data/processed")).into_iter().collect())
        };
        Ok(Service { variant, balance, processed })
    }

    fn apply(&mut self, id: &str, amount: i64) -> std::io::Result<()> {
        lifecycle::send_event("request", &json!({ "id": id, "amount": money(amount) }));
        if self.variant != Variant::Buggy && self.processed.contains(id) {
            return Ok(());
        }
        match self.variant {
            Variant::Buggy | Variant::MisleadingGreen => {
                self.credit(amount)?;
                self.mark(id)?;
            }
            Variant::MarkFirst => {
                self.mark(id)?;
                self.credit(amount)?;
            }
            Variant::Atomic => {
                self.balance += amount;
                self.processed.insert(id.to_string());
                let mut state = format!("balance={}\n", self.balance);
                for p in &self.processed {
                    state.push_str(&format!("processed={p}\n"));
                }
                lifecycle::send_event("credit+mark", &json!({ "amount": money(amount), "id": id }));
                write_durably("/data/state.tmp", &state)?;
                std::fs::rename("/data/state.tmp", "/data/state")?;
                sync_dir()?;
            }
        }
        Ok(())
    }

    fn credit(&mut self, amount: i64) -> std::io::Result<()> {
        lifecycle::send_event("credit", &json!({ "amount": money(amount) }));
        self.balance += amount;
        write_durably("/data/balance", &format!("{}\n", self.balance))?;
        sync_dir()
    }

    fn mark(&mut self, id: &str) -> std::io::Result<()> {
        lifecycle::send_event("mark", &json!({ "id": id }));
        self.processed.insert(id.to_string());
        let text: String = self.processed.iter().map(|p| format!("{p}\n")).collect();
        write_durably("/data/processed", &text)?;
        sync_dir()
    }
}

/// Runs the service and its client.
pub fn main_with(variant: Variant) {
    let args: Vec<String> = std::env::args().collect();
    let twice = args.iter().any(|a| a == "--deliver-twice");

    let mut service = match Service::open(variant) {
        Ok(s) => s,
        Err(e) => {
            println!("credit: cannot open the service's state ({e}); stopping");
            return;
        }
    };
    let restarted = std::path::Path::new("/data/acks").exists();
    let acked: BTreeSet<String> = lines(&read("/data/acks")).into_iter().collect();
    if restarted {
        lifecycle::send_event("recovered", &json!({ "balance": money(service.balance) }));
    }
    lifecycle::setup_complete(&json!({ "balance": money(service.balance) }));
    let mut client = match OpenOptions::new().create(true).append(true).custom_flags(O_SYNC).open("/data/acks") {
        Ok(f) => f,
        Err(e) => {
            println!("credit: the client cannot open its log ({e}); stopping");
            return;
        }
    };
    if sync_dir().is_err() {
        println!("credit: cannot make the client's log durable; stopping");
        return;
    }
    for (id, amount) in EVENTS {
        if acked.contains(id) {
            continue;
        }
        if restarted {
            lifecycle::send_event("retry", &json!({ "id": id }));
        }
        let deliveries = if twice { 2 } else { 1 };
        for _ in 0..deliveries {
            if let Err(e) = service.apply(id, amount) {
                println!("credit: applying {id} failed ({e}); not acknowledged, stopping");
                return;
            }
        }
        if let Err(e) = client.write_all(format!("{id}\n").as_bytes()) {
            println!("credit: the client could not record the ack of {id} ({e}); stopping");
            return;
        }
    }
    let expected: i64 = EVENTS.iter().filter(|(id, _)| service.processed.contains(*id)).map(|(_, a)| a).sum();
    lifecycle::send_event("balance", &json!({ "value": money(service.balance) }));
    assert_always!(
        service.balance <= expected,
        "no credit is applied twice",
        &json!({ "balance": money(service.balance), "credits_processed": money(expected) })
    );
    assert_always!(
        service.balance >= expected,
        "no processed credit is lost",
        &json!({ "balance": money(service.balance), "credits_processed": money(expected) })
    );
    assert_reachable!("every event was delivered");
    println!("credit: balance {} after {} events", money(service.balance), service.processed.len());
}
