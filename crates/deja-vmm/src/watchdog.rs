//! The no-progress watchdog.
//!
//! A guest that loops without a syscall or an exception never leaves `KVM_RUN`, and nothing in
//! the guest's model of time moves (virtual time advances at syscalls). deja cannot tell such a
//! loop from a long computation, so it bounds the *host* time a vCPU may spend in guest code
//! between two events: the limit of the run's settings ([`crate::identity::Settings`], which the
//! CLI reads from `DEJA_NO_PROGRESS_S` seconds, default 30; `0` turns the watchdog off).
//! Past that, the run ends as [`crate::VmError::NoProgress`] — its own status and exit code,
//! never a bug found and never silent.
//!
//! The limit decides only *when deja gives up*, never what the guest observes: the guest sees
//! no interrupt, no clock, nothing. Everything up to the stall (the syscalls made, their
//! results, the trace digest so far) is the deterministic run, so the same input stalls after
//! the same syscall on every replay, and the report names it.
//!
//! How: while a vCPU thread runs guest code, a POSIX timer of that thread (`SIGEV_THREAD_ID`)
//! sends it a real-time signal every [`TICK`]; the handler does nothing, `KVM_RUN` returns
//! `EINTR`, and the exit loop checks the time since the last guest event. The handler is
//! installed with `SA_RESTART`, so the monitor's own host syscalls on that thread are restarted
//! (`KVM_RUN` returns `EINTR`, which is never restarted). The timer is armed only inside the
//! exit loop.

use std::cell::Cell;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Once;
use std::time::Duration;

/// How often an armed timer interrupts guest code.
pub const TICK: Duration = Duration::from_millis(250);

/// The environment variable the CLI reads the limit from, in seconds (0: no limit).
pub const ENV: &str = "DEJA_NO_PROGRESS_S";

/// The limit when none is given.
pub const DEFAULT_LIMIT: Duration = Duration::from_secs(30);

/// The limit a value of `DEJA_NO_PROGRESS_S` asks for: seconds, `0` for none (`None`); unset
/// or unreadable, [`DEFAULT_LIMIT`].
pub fn parse_limit(value: Option<&str>) -> Option<Duration> {
    let secs = value.and_then(|s| s.trim().parse::<f64>().ok()).filter(|s| s.is_finite() && *s >= 0.0);
    match secs {
        None => Some(DEFAULT_LIMIT),
        Some(s) => Some(Duration::from_millis((s * 1000.0) as u64)).filter(|d| !d.is_zero()),
    }
}

fn signal() -> libc::c_int {
    libc::SIGRTMIN() + 3
}

extern "C" fn on_tick(_: libc::c_int) {}

fn install() -> Result<(), String> {
    static ONCE: Once = Once::new();
    static FAILED: AtomicI32 = AtomicI32::new(0);
    ONCE.call_once(|| {
        // SAFETY: a zeroed `sigaction` is a valid POD value; the handler is an `extern "C"`
        // function that touches nothing, and the call's arguments are valid for its duration.
        let rc = unsafe {
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = on_tick as *const () as usize;
            act.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut act.sa_mask);
            libc::sigaction(signal(), &act, std::ptr::null_mut())
        };
        if rc != 0 {
            FAILED.store(std::io::Error::last_os_error().raw_os_error().unwrap_or(-1), Ordering::Relaxed);
        }
    });
    match FAILED.load(Ordering::Relaxed) {
        0 => Ok(()),
        e => Err(format!("cannot install the watchdog's signal handler (errno {e})")),
    }
}

/// A thread's timer, created on first use and deleted when the thread ends.
struct ThreadTimer(Cell<Option<libc::timer_t>>);

impl Drop for ThreadTimer {
    fn drop(&mut self) {
        if let Some(t) = self.0.take() {
            // SAFETY: the timer was created by this thread's `timer_create` and is deleted once.
            unsafe { libc::timer_delete(t) };
        }
    }
}

thread_local! {
    static TIMER: ThreadTimer = const { ThreadTimer(Cell::new(None)) };
}

fn thread_timer() -> Result<libc::timer_t, String> {
    if let Some(t) = TIMER.with(|t| t.0.get()) {
        return Ok(t);
    }
    install()?;
    // SAFETY: `sev` is a valid POD value filled below; `timer` is written by the call.
    let timer = unsafe {
        let mut sev: libc::sigevent = std::mem::zeroed();
        sev.sigev_notify = libc::SIGEV_THREAD_ID;
        sev.sigev_signo = signal();
        sev.sigev_notify_thread_id = libc::gettid();
        let mut timer: libc::timer_t = std::ptr::null_mut();
        if libc::timer_create(libc::CLOCK_MONOTONIC, &mut sev, &mut timer) != 0 {
            return Err(format!("cannot create the watchdog's timer: {}", std::io::Error::last_os_error()));
        }
        timer
    };
    TIMER.with(|t| t.0.set(Some(timer)));
    Ok(timer)
}

fn set(timer: libc::timer_t, period: Duration) {
    let ts =
        libc::timespec { tv_sec: period.as_secs() as libc::time_t, tv_nsec: period.subsec_nanos() as libc::c_long };
    let spec = libc::itimerspec { it_interval: ts, it_value: ts };
    // SAFETY: `timer` is this thread's live timer and `spec` is valid for the call.
    unsafe { libc::timer_settime(timer, 0, &spec, std::ptr::null_mut()) };
}

/// The timer armed for the current thread while the guest runs; disarmed on drop.
pub(crate) struct Armed(Option<libc::timer_t>);

impl Armed {
    /// Arms this thread's timer when the watchdog is on (`limit` is some).
    pub(crate) fn arm(limit: Option<Duration>) -> Result<Armed, String> {
        if limit.is_none() {
            return Ok(Armed(None));
        }
        let timer = thread_timer()?;
        set(timer, TICK);
        Ok(Armed(Some(timer)))
    }
}

impl Drop for Armed {
    fn drop(&mut self) {
        if let Some(t) = self.0 {
            set(t, Duration::ZERO);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_is_read_as_seconds_and_zero_turns_it_off() {
        assert_eq!(parse_limit(None), Some(DEFAULT_LIMIT));
        assert_eq!(parse_limit(Some("2.5")), Some(Duration::from_millis(2500)));
        assert_eq!(parse_limit(Some(" 7 ")), Some(Duration::from_secs(7)));
        assert_eq!(parse_limit(Some("0")), None);
        for unreadable in ["", "soon", "-1", "inf", "NaN"] {
            assert_eq!(parse_limit(Some(unreadable)), Some(DEFAULT_LIMIT), "{unreadable:?}");
        }
    }
}
