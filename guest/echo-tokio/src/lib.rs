//! The tokio versions of `echo-server` and `echo-client` (see the `echo` package): same command
//! line, same output, same exit codes, plus `--flavor current|multi` to pick the runtime.
//!
//! * `tokio-echo-server --listen IP:PORT [--connections N] [--flavor current|multi]`
//! * `tokio-echo-client --connect IP:PORT [--messages N] [--connect-timeout-ms T]
//!   [--retry-for-ms R] [--flavor current|multi]`
//!
//! `current` (the default) is `Builder::new_current_thread()`; `multi` is
//! `Builder::new_multi_thread().worker_threads(2)`; both with `enable_all()` (I/O and time
//! drivers).
use std::future::Future;
use std::process;

use echo::{usage_error, Args, EXIT_OTHER_IO};

/// Builds the runtime `--flavor` asks for, runs `main` on it, shuts the runtime down and
/// exits with the code `main` returned.
pub fn run<F>(args: &Args, usage: &'static str, main: F) -> !
where
    F: Future<Output = i32>,
{
    let flavor: String = args.get("flavor", "current".to_string());
    let mut builder = match flavor.as_str() {
        "current" => tokio::runtime::Builder::new_current_thread(),
        "multi" => {
            let mut b = tokio::runtime::Builder::new_multi_thread();
            b.worker_threads(2);
            b
        }
        other => usage_error(usage, &format!("bad value for --flavor: {other:?} (current|multi)")),
    };
    let runtime = builder.enable_all().build().unwrap_or_else(|e| {
        eprintln!("building the {flavor} runtime: {e}");
        process::exit(EXIT_OTHER_IO);
    });
    let code = runtime.block_on(main);
    drop(runtime);
    process::exit(code)
}
