//! Repository tasks, run as `cargo xtask <task>`:
//!
//! * `guests`: builds the example guests static, for the host target, with the stable toolchain:
//!   static-PIE into `target/guest/release/`, and a non-PIE (`ET_EXEC`) `hello` into
//!   `target/guest-nopie/release/`.
//! * `demo`: builds the guests and `deja`, then runs the bundled examples through deja.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask lives in the repository").to_path_buf()
}

fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

fn status(what: &str, cmd: &mut Command) -> Result<(), String> {
    let s = cmd.status().map_err(|e| format!("{what}: cannot start: {e}"))?;
    if s.success() {
        Ok(())
    } else {
        Err(format!("{what} failed ({s})"))
    }
}

/// Builds every guest. The guest workspace has its own `.cargo/config.toml` with
/// `+crt-static`, which cargo only reads when started inside `guest/`.
fn guests() -> Result<(), String> {
    let root = root();
    let guest = root.join("guest");
    status(
        "building the example guests",
        cargo()
            .current_dir(&guest)
            .args(["build", "--release", "--quiet", "--target-dir"])
            .arg(root.join("target/guest"))
            .env_remove("RUSTFLAGS")
            .env_remove("CARGO_ENCODED_RUSTFLAGS"),
    )?;
    status(
        "building the non-PIE hello guest",
        cargo()
            .current_dir(&guest)
            .args(["build", "--release", "--quiet", "-p", "hello", "--target-dir"])
            .arg(root.join("target/guest-nopie"))
            .env_remove("CARGO_ENCODED_RUSTFLAGS")
            .env("RUSTFLAGS", "-C target-feature=+crt-static -C relocation-model=static"),
    )?;
    Ok(())
}

fn demo() -> Result<(), String> {
    guests()?;
    let root = root();
    status("building deja", cargo().current_dir(&root).args(["build", "--release", "--quiet", "-p", "deja-cli"]))?;
    let deja = root.join("target/release/deja");
    let g = root.join("target/guest/release");
    let step = |title: &str, args: &[&str]| -> Result<(), String> {
        println!("\n$ deja {}", args.join(" "));
        println!("# {title}");
        let s = Command::new(&deja).args(args).status().map_err(|e| e.to_string())?;
        if s.success() {
            Ok(())
        } else {
            Err(format!("deja {} failed ({s})", args.join(" ")))
        }
    };
    let hello = g.join("hello");
    let timerand = g.join("timerand");
    let (hello, timerand) = (hello.to_string_lossy(), timerand.to_string_lossy());
    step("a static Rust program, unchanged, in a KVM VM whose kernel is deja", &["run", &hello])?;
    step("clock and randomness come from the seed: run it twice, same output", &["run", "--seed", "7", &timerand])?;
    step("...and once more with seed 7", &["run", "--seed", "7", "--no-probe", &timerand])?;
    step("another seed, other bytes", &["run", "--seed", "8", "--no-probe", &timerand])?;
    step(
        "--audit runs it 3 times and compares trace digests",
        &["run", "--seed", "7", "--no-probe", "--audit", "3", &timerand],
    )?;
    Ok(())
}

fn main() -> ExitCode {
    let task = std::env::args().nth(1).unwrap_or_default();
    let result = match task.as_str() {
        "guests" => guests(),
        "demo" => demo(),
        _ => Err("usage: cargo xtask <guests|demo>".to_string()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}
