//! `deja debug BUG`: a GDB remote-protocol server for a program bug's replay, forwards and
//! backwards (docs/DEBUGGING.md). The work is `deja_debug`'s; this loads the bug, listens, and
//! says how the session ended.

use std::io::Write;
use std::net::TcpListener;
use std::path::PathBuf;

use clap::Args;

use crate::exit::Exit;
use crate::explore::{is_cluster_bug, load_bug};

/// `deja debug` arguments.
#[derive(Debug, Args)]
pub struct DebugArgs {
    /// The TCP port to listen on, on 127.0.0.1 (0: any free one, said on stderr).
    #[arg(long, default_value_t = 1234)]
    pub port: u16,
    /// Where the program is, when it is not where the bug file says or beside it.
    #[arg(long, value_name = "PATH")]
    pub program: Vec<String>,
    /// Declared input files again, as `deja explore` was given them.
    #[arg(long = "file", value_name = "HOST[:GUEST]")]
    pub files: Vec<String>,
    /// The bug file (a program's: `deja explore` of one program wrote it).
    pub bug: PathBuf,
}

/// Serves one debugger session: 0 when it ended with the bug's digest or before the run's end,
/// 1 when the run ended with another digest without a change by the debugger (the replay did not
/// reproduce), 3 when the bug cannot be replayed.
pub fn main(args: DebugArgs, settings: &deja_vmm::Settings) -> Exit {
    if is_cluster_bug(&args.bug) {
        eprintln!(
            "deja debug: {} is a cluster bug; `deja debug` serves program bugs (open a cluster bug's moments with `deja at`)",
            args.bug.display()
        );
        return Exit::Usage;
    }
    let (bug, target) = match load_bug(&args.bug, &args.program, &args.files) {
        Ok(x) => x,
        Err(f) => {
            eprintln!("deja debug: cannot replay: {}", f.message);
            return f.code;
        }
    };
    let out: deja_debug::replay::Output = Box::new(|s, bytes| {
        let _ = match s {
            deja_kernel::Stream::Stdout => std::io::stdout().write_all(bytes),
            deja_kernel::Stream::Stderr => std::io::stderr().write_all(bytes),
        };
    });
    let program = target.path.clone();
    let replay = match deja_debug::replay::Replay::new(target, *settings, bug.fork_at_syscall, bug.input.clone(), out) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("deja debug: cannot boot the replay: {e}");
            return Exit::Incomplete;
        }
    };
    let listener = match TcpListener::bind(("127.0.0.1", args.port)) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("deja debug: cannot listen on 127.0.0.1:{}: {e}", args.port);
            return Exit::Usage;
        }
    };
    let port = listener.local_addr().map(|a| a.port()).unwrap_or(args.port);
    eprintln!("deja debug: listening on 127.0.0.1:{port} for bug {}", bug.id);
    eprintln!("deja debug: connect with: gdb {program} -ex 'target remote :{port}'");
    let (mut stream, peer) = match listener.accept() {
        Ok(x) => x,
        Err(e) => {
            eprintln!("deja debug: no debugger connected: {e}");
            return Exit::Incomplete;
        }
    };
    let _ = stream.set_nodelay(true);
    eprintln!("deja debug: debugger connected from {peer}");
    let mut engine = deja_debug::engine::Engine::new(replay);
    let mut log = |line: &str| eprintln!("{line}");
    let served = deja_debug::server::Server::new(&mut engine, &mut log).serve(&mut stream);
    if let Err(e) = served {
        eprintln!("deja debug: the connection ended: {e}");
    }
    let Some(outcome) = engine.tracee.outcome().filter(|_| engine.ended()) else {
        eprintln!("deja debug: the session ended before the run did ({} replays)", engine.replays);
        return Exit::Clean;
    };
    eprintln!("deja debug: {} replays from the start in this session", engine.replays);
    if outcome.digest == bug.digest {
        eprintln!("deja debug: the run ended with the bug's digest {}: the debugger changed nothing", bug.digest);
        Exit::Clean
    } else {
        eprintln!(
            "deja debug: the run ended with digest {}, not the bug's {} (a branch the debugger made, or a replay that differs)",
            outcome.digest, bug.digest
        );
        Exit::Failure
    }
}
