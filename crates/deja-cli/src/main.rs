//! `deja`: run programs deterministically in KVM VMs whose kernel is the deja monitor.
//!
//! Every command ends with an [`exit::Exit`]: the one table of exit codes, which the README's
//! "Exit codes" section shows.

mod at;
mod audit;
mod bench;
mod build;
mod check;
mod cluster;
mod crash;
mod debug;
mod doctor;
mod dogfood;
mod exit;
mod explain;
mod explore;
mod inspect;
mod placement;
mod rootfs;
mod run;
mod run_args;
mod run_report;
mod serve;
mod settings;

use clap::{Parser, Subcommand};

/// deja runs static x86-64 Linux programs deterministically in KVM VMs.
#[derive(Debug, Parser)]
#[command(name = "deja", version, about, long_about = None)]
struct Cli {
    /// Give programs no vDSO: every clock read is a syscall (as `DEJA_VDSO=off`, which it wins
    /// over; for comparison, recorded in every artifact's fingerprint).
    #[arg(long, global = true)]
    no_vdso: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a static program in a fresh deterministic VM, or a cluster of them (a `.toml` or docker-compose file).
    Run(Box<run::RunArgs>),
    /// Check /dev/kvm and measure this host's determinism hazards.
    Doctor(doctor::DoctorArgs),
    /// Measure deja against native execution and print the figures.
    Bench(bench::BenchArgs),
    /// Explore a program or a cluster: coverage-guided runs over forked snapshots, faults and
    /// random choices.
    Explore(Box<explore::ExploreArgs>),
    /// Merge campaign directories (the shards of one campaign) into one: corpus, bugs, report.
    Merge(explore::MergeArgs),
    /// Show a finished or checkpointed campaign (an `explore --out` directory) in a browser,
    /// read-only, until killed.
    Serve(explore::ServeArgs),
    /// Replay a bug file exactly: exit 1 if the failure reproduced, 0 if not, 3 if incomplete.
    Replay(explore::ReplayArgs),
    /// Minimize a bug file's input with delta debugging and verify the result by replay.
    Minimize(explore::MinimizeArgs),
    /// Open a moment of a cluster bug's run: every node's state, a node's file as it was, a
    /// command run inside a node from there, or continuations with fresh randomness.
    At(Box<at::AtArgs>),
    /// When did a cluster bug become inevitable: continuations from moments of its run.
    Explain(explain::ExplainArgs),
    /// Debug a program bug's replay in gdb, forwards and backwards (a GDB remote-protocol server).
    Debug(debug::DebugArgs),
    /// Judge a patch against a frozen failure: verdict, timeline and certificate.
    Check(Box<check::CheckArgs>),
    /// Re-check a certificate's hash chain; refuses any edit.
    VerifyCertificate(check::VerifyArgs),
    /// Regenerate (or check) the committed exploration results in dogfood-results/.
    Dogfood(dogfood::DogfoodArgs),
    /// Build a static (optionally coverage-instrumented) program for deja with cargo.
    Build(build::BuildArgs),
    /// Print what a deja artifact (a snapshot) holds, after verifying it.
    Inspect(inspect::InspectArgs),
    /// Seal a bug file, cluster bug file or campaign checkpoint again after an edit you meant.
    Reseal(inspect::ResealArgs),
    /// Print the table of exit codes every command follows (the README's "Exit codes").
    ExitCodes,
}

fn main() {
    // Before any vCPU thread is pinned: the cores an audit spreads its processes over.
    deja_vmm::identity::remember_initial_cores();
    let cli = Cli::parse();
    // The one place the VM settings are read; every command that boots a VM is given them.
    let settings = settings::from_env(cli.no_vdso);
    let code = match (cli.command, settings) {
        (Command::Reseal(args), _) => inspect::reseal(args),
        (Command::Build(args), _) => build::main(args),
        (Command::VerifyCertificate(args), _) => check::verify(args),
        (Command::Merge(args), _) => explore::merge(args),
        (Command::Serve(args), _) => explore::serve(args),
        (Command::ExitCodes, _) => {
            print!("{}", exit::Exit::markdown());
            exit::Exit::Clean
        }
        (_, Err(e)) => {
            eprintln!("deja: error: {e}");
            exit::Exit::Usage
        }
        (Command::Check(args), Ok(s)) => check::main(*args, &s),
        (Command::Run(args), Ok(s)) => run::main(*args, &s),
        (Command::Doctor(args), Ok(s)) => doctor::main(args, &s),
        (Command::Bench(args), Ok(s)) => bench::main(args, &s),
        (Command::Inspect(args), Ok(s)) => inspect::main(args, &s),
        (Command::Dogfood(args), Ok(s)) => dogfood::main(args, &s),
        (Command::Explore(args), Ok(s)) => explore::main(*args, &s),
        (Command::Replay(args), Ok(s)) => explore::replay(args, &s),
        (Command::Minimize(args), Ok(s)) => explore::minimize(args, &s),
        (Command::At(args), Ok(s)) => at::main(*args, &s),
        (Command::Explain(args), Ok(s)) => explain::main(args, &s),
        (Command::Debug(args), Ok(s)) => debug::main(args, &s),
    };
    std::process::exit(code.code());
}
