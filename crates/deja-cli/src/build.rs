//! `deja build`: cargo build of a static program for deja, optionally with coverage.

use crate::exit::Exit;
use std::process::Command;

/// The target deja programs are built for, named explicitly so that the static flag reaches
/// the program and not its build scripts and proc-macros.
pub const TARGET: &str = "x86_64-unknown-linux-gnu";

/// SanitizerCoverage with inline 8-bit counters (edge level), which deja reads from guest
/// memory through the ELF's `__sancov_cntrs` section.
pub const COVERAGE_FLAGS: [&str; 6] = [
    "-C",
    "passes=sancov-module",
    "-C",
    "llvm-args=-sanitizer-coverage-level=3",
    "-C",
    "llvm-args=-sanitizer-coverage-inline-8bit-counters",
];

/// Arguments of `deja build`.
#[derive(Debug, clap::Args)]
pub struct BuildArgs {
    /// Instrument for coverage (the program must depend on `deja-sdk`, which supplies the hook
    /// the instrumentation calls).
    #[arg(long)]
    pub coverage: bool,
    /// Build in debug mode instead of release.
    #[arg(long)]
    pub debug: bool,
    /// Extra arguments for `cargo build` (after `--`), e.g. `-- -p myservice`.
    #[arg(last = true)]
    pub cargo_args: Vec<String>,
}

/// `deja build`: exits with cargo's code ([`Exit::Program`]; 128+N when cargo died of signal N).
pub fn main(args: BuildArgs) -> Exit {
    let mut flags = vec!["-C".to_string(), "target-feature=+crt-static".to_string()];
    if args.coverage {
        flags.extend(COVERAGE_FLAGS.iter().map(|s| s.to_string()));
    }
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.arg("build").args(["--target", TARGET]);
    if !args.debug {
        cmd.arg("--release");
    }
    cmd.args(&args.cargo_args);
    // One flag per line of CARGO_ENCODED_RUSTFLAGS (separated by 0x1f) survives spaces.
    cmd.env_remove("RUSTFLAGS").env("CARGO_ENCODED_RUSTFLAGS", flags.join("\u{1f}"));
    eprintln!(
        "deja: cargo build --target {TARGET}{} with {}",
        if args.debug { "" } else { " --release" },
        flags.join(" ")
    );
    match cmd.status() {
        Ok(s) if s.success() => {
            eprintln!(
                "deja: built; the executables are in target/{TARGET}/{}/ (or under --target-dir)",
                if args.debug { "debug" } else { "release" }
            );
            Exit::Clean
        }
        Ok(s) => {
            use std::os::unix::process::ExitStatusExt;
            Exit::Program(s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0)))
        }
        Err(e) => {
            eprintln!("deja: error: cannot start cargo: {e}");
            Exit::DejaFailed
        }
    }
}
