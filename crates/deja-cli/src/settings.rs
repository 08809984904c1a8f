//! The settings every VM of this `deja` process is set up with ([`deja_vmm::Settings`]): read
//! here and nowhere else, once, from `DEJA_CPU_IDENTITY`, `DEJA_REWRITE`, `DEJA_VDSO` (and the
//! global `--no-vdso`) and `DEJA_NO_PROGRESS_S`, then passed to every command that boots a VM.
//! A child `deja` this process starts (an audit's fresh processes) is handed them back as its
//! environment ([`hand_to`], [`Settings::as_env`]: `deja-bench` hands them the same way to the
//! `deja` processes it starts).

use std::process::Command;

use deja_vmm::identity::{ENV, REWRITE_ENV, VDSO_ENV};
use deja_vmm::{watchdog, Settings};

/// The settings this process's environment asks for, with the vDSO off when `no_vdso`
/// (`--no-vdso` wins over `DEJA_VDSO`). A value that names no setting is refused, naming the
/// variable.
pub fn from_env(no_vdso: bool) -> Result<Settings, String> {
    let var = |name: &str| std::env::var(name).ok();
    let vdso = if no_vdso { Some("off".to_string()) } else { var(VDSO_ENV) };
    let settings = Settings::parse(var(ENV).as_deref(), var(REWRITE_ENV).as_deref(), vdso.as_deref())
        .map_err(|e| e.to_string())?;
    Ok(Settings { no_progress: watchdog::parse_limit(var(watchdog::ENV).as_deref()), ..settings })
}

/// Gives the `deja` process `cmd` will start these settings, as its environment.
pub fn hand_to<'c>(cmd: &'c mut Command, settings: &Settings) -> &'c mut Command {
    cmd.envs(settings.as_env())
}
