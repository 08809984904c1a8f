//! A program that runs itself as a child with `std::process::Command` (Rust's `posix_spawn`
//! path: `clone(CLONE_VM | CLONE_VFORK)`, then `execve`), reads what the child prints through
//! a pipe, and gets its exit status. Both make SDK assertions: the parent's holds, the child's
//! fails when run with `--fail`, so a report names the process that failed.

use std::process::Command;

use deja_sdk::serde_json::json;
use deja_sdk::{assert_always, assert_reachable};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("child") {
        let fail = args.iter().any(|a| a == "--fail");
        assert_always!(!fail, "the child's books balance", &json!({"pid": std::process::id()}));
        println!("child {}: parent {}", std::process::id(), std::os::unix::process::parent_id());
        std::process::exit(7);
    }
    assert_reachable!("the parent runs");
    let mut child = Command::new("/proc/self/exe");
    child.arg("child").args(args.iter().skip(1));
    let out = child.output().expect("run the child");
    print!("{}", String::from_utf8_lossy(&out.stdout));
    println!("parent {}: the child exited with {:?}", std::process::id(), out.status.code());
}
