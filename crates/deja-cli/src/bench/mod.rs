//! `deja bench`: its arguments, turned into [`deja_bench::BenchOptions`]; the figures
//! `deja-bench` measures, printed as text or JSON; the exit code.

use crate::exit::Exit;
use std::path::{Path, PathBuf};

use deja_bench::BenchOptions;
use deja_vmm::Settings;

mod print;

/// Arguments of `deja bench`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Directory holding the example guests (default: `guests` in this binary's target
    /// directory, where `cargo xtask guests` puts them).
    #[arg(long, value_name = "DIR")]
    pub guests: Option<PathBuf>,
    /// Millions of steps for the CPU-bound example.
    #[arg(long, default_value_t = 400)]
    pub steps: u64,
    /// Syscalls for the round-trip measurement.
    #[arg(long, default_value_t = 5000)]
    pub syscalls: u64,
    /// Repetitions of each measurement (the median is reported).
    #[arg(long, default_value_t = 3)]
    pub repeat: u32,
    /// Print the figures as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Every campaign and steered series at a tenth of its rounds (at least 4), every check
    /// kept: shows that each figure can be measured, in a fraction of the time; its figures
    /// are too noisy to quote.
    #[arg(long)]
    pub quick: bool,
    /// Measure only the register cluster's booted and forked rounds (what the vDSO figures
    /// run in a process of their own for each setting).
    #[arg(long, hide = true)]
    pub forked_cluster_only: bool,
    /// Measure only campaigns with later forks off and on (what the later-fork figures run in a
    /// process of their own for each vDSO setting).
    #[arg(long, hide = true)]
    pub late_forks_only: bool,
}

fn default_guest_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    // target/{release,debug}/deja → target/guests
    exe.parent().and_then(Path::parent).map(|t| t.join("guests")).unwrap_or_default()
}

/// `deja bench`, its VMs (and the `deja` processes it starts, this executable) under `settings`
/// unless a figure compares settings.
pub fn main(args: BenchArgs, settings: &Settings) -> Exit {
    let deja = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => {
            eprintln!("deja: bench failed: cannot find this executable to start it again: {e}");
            return Exit::DejaFailed;
        }
    };
    let opts = BenchOptions {
        guests: args.guests.clone().unwrap_or_else(default_guest_dir),
        deja,
        steps: args.steps,
        syscalls: args.syscalls,
        repeat: args.repeat,
        settings: *settings,
        kernel_image: crate::placement::kernel_image().ok(),
        quick: args.quick,
    };
    let result = if args.forked_cluster_only {
        deja_bench::forked_cluster(&opts)
    } else if args.late_forks_only {
        deja_bench::late_forks(&opts)
    } else {
        deja_bench::figures(&opts)
    };
    match result {
        Ok(v) => {
            if args.json {
                println!("{v:#}");
            } else {
                print::text(&v);
            }
            Exit::Clean
        }
        Err(e) => {
            eprintln!("deja: bench failed: {e}");
            Exit::DejaFailed
        }
    }
}
