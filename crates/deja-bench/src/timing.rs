//! One measurement's parts: the median of repeated measurements, a guest's spec, one guest
//! timed in a fresh session or natively, and a `deja` process under the bench's settings.

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use deja_kernel::ProgramSpec;
use deja_vmm::{BootOptions, RegisterPath, Settings};
use snafu::{ensure, ResultExt};

use crate::{
    BenchError, FailedInDejaSnafu, FailedNativelySnafu, GuestSnafu, NoReportSnafu, RunSnafu, SpawnSnafu,
    StartNativeSnafu,
};

/// The median of `v`, not empty (of an even count, the upper of the two in the middle).
pub(crate) fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// The median of `v`, not empty, in `f64`'s total order (of an even count, the upper of the two
/// in the middle).
pub(crate) fn median_f64(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The guest at `path` with `args`, from seed 1.
pub(crate) fn spec(path: &Path, args: &[&str]) -> Result<ProgramSpec, BenchError> {
    let image = std::fs::read(path).context(GuestSnafu { path })?;
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    Ok(ProgramSpec::for_program(image, &name, args.iter().map(|s| s.to_string()), 1))
}

/// A run's name in an error: its argv.
pub(crate) fn named(spec: &ProgramSpec) -> String {
    spec.argv.join(" ")
}

/// One life of `spec` in a fresh session under `settings`.
pub(crate) fn run_once(spec: ProgramSpec, memory: u64, settings: &Settings) -> Result<deja_vmm::Run, BenchError> {
    let what = named(&spec);
    deja_vmm::Session::boot_with(spec, memory, BootOptions::new(*settings))
        .and_then(|mut s| s.run(&mut |_, _| {}))
        .context(RunSnafu { what })
}

/// The guest at `path` with `args` booted and run to its end in deja, timed, with the register
/// path the monitor uses; it must exit 0.
pub(crate) fn time_deja(
    path: &Path,
    args: &[&str],
    settings: &Settings,
) -> Result<(Duration, deja_vmm::Run), BenchError> {
    time_deja_with(path, args, RegisterPath::SyncRegs, settings)
}

/// [`time_deja`] with the register path `regs`.
pub(crate) fn time_deja_with(
    path: &Path,
    args: &[&str],
    regs: RegisterPath,
    settings: &Settings,
) -> Result<(Duration, deja_vmm::Run), BenchError> {
    let spec = spec(path, args)?;
    let what = named(&spec);
    let start = Instant::now();
    let opts = BootOptions { register_path: regs, ..BootOptions::new(*settings) };
    let run = deja_vmm::Session::boot_with(spec, deja_vmm::DEFAULT_MEMORY, opts)
        .and_then(|mut s| s.run(&mut |_, _| {}))
        .context(RunSnafu { what })?;
    let elapsed = start.elapsed();
    ensure!(run.report.exit.code() == 0, FailedInDejaSnafu { path, exit: format!("{:?}", run.report.exit) });
    Ok((elapsed, run))
}

/// The guest at `path` with `args` run natively, timed; it must succeed.
pub(crate) fn time_native(path: &Path, args: &[&str]) -> Result<Duration, BenchError> {
    let start = Instant::now();
    let out = Command::new(path).args(args).output().context(StartNativeSnafu { path })?;
    let elapsed = start.elapsed();
    ensure!(out.status.success(), FailedNativelySnafu { path });
    Ok(elapsed)
}

/// A `deja` process (the executable `deja`) under `settings`, handed them as its environment.
pub(crate) fn deja(deja: &Path, settings: &Settings) -> Command {
    let mut cmd = Command::new(deja);
    cmd.envs(settings.as_env());
    cmd
}

/// What the `deja` process `cmd` (of the executable `deja`) printed, once it ended; `what` names
/// it in an error.
pub(crate) fn output(cmd: &mut Command, deja: &Path, what: &str) -> Result<Output, BenchError> {
    cmd.output().context(SpawnSnafu { deja, what })
}

/// The JSON summary a `deja run --json` process printed as the last line of its stderr.
pub(crate) fn summary(out: &Output, what: &str) -> Result<serde_json::Value, BenchError> {
    let err = String::from_utf8_lossy(&out.stderr);
    serde_json::from_str(err.lines().last().unwrap_or_default()).context(NoReportSnafu { what, stderr: &*err })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The median is the middle of the sorted measurements, whatever their order; of an even
    /// count, the upper of the two in the middle.
    #[test]
    fn the_median_is_the_middle_measurement() {
        let ms = |v: &[u64]| v.iter().map(|&m| Duration::from_millis(m)).collect::<Vec<_>>();
        assert_eq!(median(ms(&[7])), Duration::from_millis(7));
        assert_eq!(median(ms(&[9, 1, 5])), Duration::from_millis(5));
        assert_eq!(median(ms(&[4, 1, 3, 2])), Duration::from_millis(3));
        assert_eq!(median(ms(&[2, 2, 100, 1, 2])), Duration::from_millis(2));
        assert_eq!(median_f64(vec![2.5]), 2.5);
        assert_eq!(median_f64(vec![3.0, -1.0, 10.0]), 3.0);
        assert_eq!(median_f64(vec![0.5, 4.0, 1.5, 2.0]), 2.0);
    }

    /// A guest that is not there names the file and the command that builds the guests.
    #[test]
    fn a_missing_guest_says_how_to_build_the_guests() {
        let e = spec(Path::new("/nonexistent/guests/cpuburn"), &["1"]).unwrap_err();
        let text = e.to_string();
        assert!(matches!(e, BenchError::Guest { .. }), "{text}");
        assert!(text.contains("/nonexistent/guests/cpuburn") && text.contains("cargo xtask guests"), "{text}");
    }

    /// A `deja` process is handed the bench's settings as its environment.
    #[test]
    fn a_deja_process_is_handed_the_settings() {
        let settings = Settings { vdso: false, ..Settings::default() };
        let cmd = deja(Path::new("/bin/deja"), &settings);
        let env: Vec<_> = cmd.get_envs().map(|(k, v)| (k.to_owned(), v.map(|v| v.to_owned()))).collect();
        for (k, v) in settings.as_env() {
            assert!(env.contains(&(k.into(), Some(v.clone().into()))), "{k}={v} missing from {env:?}");
        }
    }
}
