//! The host cores deja's threads run on: the calling thread's core and affinity, the cores the
//! process may use, and running work on a chosen core (confirmations on another core than the
//! run they confirm; the `pinned` CPU identity remedy).

use std::sync::OnceLock;

pub use crate::affinity::{allowed_cores, current_core, pin_current_thread, set_current_affinity};
use crate::vm::VmError;

static INITIAL_CORES: OnceLock<Vec<u32>> = OnceLock::new();

/// The cores the process's main thread could run on before deja pinned anything: call
/// [`remember_initial_cores`] first thing in `main`; otherwise the calling thread's mask at the
/// first call.
pub fn initial_cores() -> Vec<u32> {
    INITIAL_CORES.get_or_init(allowed_cores).clone()
}

/// Records the calling thread's affinity mask as the process's initial one (see
/// [`initial_cores`]).
pub fn remember_initial_cores() {
    let _ = INITIAL_CORES.set(allowed_cores());
}

/// The host cores a thread of this process may be pinned to, whatever its affinity mask now
/// (a `taskset` narrows the mask, not the cores the process may use). Measured on a scratch
/// thread, so the caller's own affinity is untouched.
pub fn schedulable_cores() -> Vec<u32> {
    // SAFETY: sysconf only reads a system setting.
    let configured = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) }.clamp(1, 1024) as u32;
    std::thread::scope(|s| {
        s.spawn(|| (0..configured).filter(|&c| pin_current_thread(c).is_ok()).collect::<Vec<u32>>())
            .join()
            .unwrap_or_default()
    })
}

/// The core the `pinned` remedy uses: the lowest-numbered schedulable core.
pub fn lowest_schedulable_core() -> Option<u32> {
    schedulable_cores().first().copied()
}

/// Runs `f` on a scratch thread pinned to a core this process may use that is not in `seen` (the
/// cores a run to compare with ran on), or to the first such core when every one was seen; returns
/// the core and what `f` returned. A confirmation run this way happens on another core than the
/// run it confirms whenever the machine has one.
pub fn on_another_core<T: Send>(seen: &[u32], f: impl FnOnce() -> T + Send) -> Result<(u32, T), VmError> {
    let cores = initial_cores();
    let core = cores.iter().copied().find(|c| !seen.contains(c)).or(cores.first().copied()).unwrap_or(0);
    Ok((core, on_core(core, f)?))
}

/// Runs `f` on a scratch thread pinned to host core `core`, and returns what it returned.
pub fn on_core<T: Send>(core: u32, f: impl FnOnce() -> T + Send) -> Result<T, VmError> {
    std::thread::scope(|s| {
        s.spawn(|| {
            pin_current_thread(core)
                .map_err(|e| VmError::Config { message: format!("cannot run on host core {core}: {e}") })?;
            Ok(f())
        })
        .join()
        .map_err(|_| VmError::Config { message: format!("the thread on host core {core} panicked") })?
    })
}
