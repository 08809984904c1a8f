//! A small batch store and the harness a user would write for it, without deja's SDK: the
//! program judges itself and says so by its exit code.
//!
//! `batchdb buggy|fixed [batches]`, or the release named by how the program's name ends
//! (`batchdb-fixed [batches]`). A batch of four items is committed by appending one line
//! per item (`B I`) to `/db/journal`, one `write` each, then `fdatasync`.
//!
//! * `buggy` swallows an error on a journal write or sync, as an embedded engine's release did:
//!   it goes on and acknowledges the batch.
//! * `fixed` returns the error: the commit fails and the batch is not acknowledged.
//!
//! The harness commits batches until one fails (or all are done), then reopens the journal in
//! the same process and checks that every item of every acknowledged batch is there. A missing
//! one is printed as `LOST acknowledged batch B item I` and the program exits 1; otherwise it
//! prints `all N acknowledged batches present` and exits 0. Under injected write errors the
//! buggy release goes on committing after the error, so its exit 1 is a failure, not a
//! fail-stop.
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::io::AsRawFd;

const ITEMS: u32 = 4;
const JOURNAL: &str = "/db/journal";

extern "C" {
    fn fdatasync(fd: i32) -> i32;
}

/// Commits batch `b`: `Err` when the engine reports a failure.
fn commit(journal: &mut File, b: u32, buggy: bool) -> std::io::Result<()> {
    for i in 0..ITEMS {
        if let Err(e) = journal.write_all(format!("{b} {i}\n").as_bytes()) {
            if !buggy {
                return Err(e);
            }
            // The buggy release notes the error and carries on.
            eprintln!("batchdb: write of batch {b} item {i} failed ({e}); ignored");
        }
    }
    // SAFETY: an open file descriptor of `journal`.
    if unsafe { fdatasync(journal.as_raw_fd()) } != 0 {
        let e = std::io::Error::last_os_error();
        if !buggy {
            return Err(e);
        }
        eprintln!("batchdb: sync of batch {b} failed ({e}); ignored");
    }
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    // The release: the first argument, or how the program's name ends (`batchdb-fixed 30`, so
    // that the base and the candidate of a check take the same arguments).
    let name = args.first().map(|a| a.rsplit('/').next().unwrap_or(a)).unwrap_or_default();
    let (buggy, rest) = match args.get(1).map(String::as_str) {
        Some("buggy") => (true, 2),
        Some("fixed") => (false, 2),
        _ if name.ends_with("-buggy") => (true, 1),
        _ if name.ends_with("-fixed") => (false, 1),
        _ => {
            eprintln!("usage: batchdb buggy|fixed [batches], or batchdb-buggy|batchdb-fixed [batches]");
            std::process::exit(2);
        }
    };
    let batches: u32 = args.get(rest).and_then(|a| a.parse().ok()).unwrap_or(30);
    std::fs::create_dir_all("/db").expect("mkdir /db");
    let mut journal =
        OpenOptions::new().create(true).append(true).open(JOURNAL).expect("open the journal for appending");
    let mut acked = Vec::new();
    for b in 0..batches {
        match commit(&mut journal, b, buggy) {
            Ok(()) => acked.push(b),
            Err(e) => {
                println!("batch {b} failed: {e}");
                break;
            }
        }
    }
    drop(journal);
    // Reopen and check.
    let mut text = String::new();
    if let Err(e) = File::open(JOURNAL).and_then(|mut f| f.read_to_string(&mut text)) {
        println!("cannot read the journal back: {e}");
        std::process::exit(3);
    }
    let present: std::collections::BTreeSet<&str> = text.lines().collect();
    for &b in &acked {
        for i in 0..ITEMS {
            if !present.contains(format!("{b} {i}").as_str()) {
                println!("LOST acknowledged batch {b} item {i}");
                std::process::exit(1);
            }
        }
    }
    println!("all {} acknowledged batches present", acked.len());
}
