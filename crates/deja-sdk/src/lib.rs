//! deja's guest SDK: tell deja what "wrong" means, mark your program's lifecycle, and take
//! random decisions deja can steer.
//!
//! ```ignore
//! use deja_sdk::{assert_always, assert_sometimes, assert_unreachable, lifecycle, random};
//! use serde_json::json;
//!
//! lifecycle::setup_complete(&json!({"accounts": 3}));
//! let amount = random::random_choice(&[10, 20, 50]).copied().unwrap_or(10);
//! assert_always!(balance >= 0, "balance never negative", &json!({"balance": balance}));
//! assert_sometimes!(retried, "a request is retried");
//! ```
//!
//! Every assertion site is registered at compile time (with `linkme`) with its kind, message,
//! file, line and a stable id, and the whole catalog is sent to deja when the program starts, so
//! sites that are never reached still show up in the report.
//!
//! Under deja each call is one request on the reserved syscall of [`deja_protocol`]. Outside
//! deja that syscall fails with `ENOSYS`; the SDK notices once and from then on evaluates
//! assertions locally, writing a JSON line to stderr for each site's first evaluation and for
//! every failure; random values come from the kernel's `getrandom`. It never aborts the program.
//!
//! Programs built with SanitizerCoverage's inline 8-bit counters (`deja build`) need the hook
//! `__sanitizer_cov_8bit_counters_init`, which this crate supplies; deja reads the counters from
//! guest memory itself.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

pub use deja_protocol::AssertKind as Kind;
#[doc(hidden)]
pub use linkme;
pub use serde_json;

use deja_protocol::{Request, SiteRecord, DEJA_SYSCALL};

/// One assertion site, placed in the catalog by the assertion macros.
#[derive(Debug)]
pub struct Site {
    /// The kind of assertion.
    pub kind: Kind,
    /// Its message.
    pub message: &'static str,
    /// Source file.
    pub file: &'static str,
    /// Source line.
    pub line: u32,
    /// Stable id (see [`deja_protocol::site_id`]).
    pub id: u64,
    seen: AtomicBool,
}

impl Site {
    /// A site; used by the macros.
    pub const fn new(kind: Kind, message: &'static str, file: &'static str, line: u32) -> Site {
        Site {
            kind,
            message,
            file,
            line,
            id: deja_protocol::site_id(kind as u32, file, line, message),
            seen: AtomicBool::new(false),
        }
    }
}

/// Every assertion site of the program.
#[linkme::distributed_slice]
pub static CATALOG: [Site];

const UNKNOWN: u8 = 0;
const PRESENT: u8 = 1;
const ABSENT: u8 = 2;
static STATE: AtomicU8 = AtomicU8::new(UNKNOWN);

fn raw_syscall(nr: u64, a: [u64; 5]) -> i64 {
    let ret: i64;
    // SAFETY: `syscall` clobbers only RCX and R11; the arguments are plain integers, and any
    // pointer among them refers to memory this crate owns for the duration of the call.
    unsafe {
        core::arch::asm!(
            "syscall",
            inlateout("rax") nr as i64 => ret,
            in("rdi") a[0], in("rsi") a[1], in("rdx") a[2], in("r10") a[3], in("r8") a[4],
            lateout("rcx") _, lateout("r11") _,
            options(nostack)
        );
    }
    ret
}

fn request(req: Request, a: [u64; 4]) -> Option<i64> {
    if !present() {
        return None;
    }
    let r = raw_syscall(DEJA_SYSCALL, [req.word(), a[0], a[1], a[2], a[3]]);
    (r >= 0).then_some(r)
}

/// True when the program runs under deja (decided once, on first use).
pub fn present() -> bool {
    match STATE.load(Ordering::Relaxed) {
        PRESENT => true,
        ABSENT => false,
        _ => {
            let r = raw_syscall(DEJA_SYSCALL, [Request::Hello.word(), 0, 0, 0, 0]);
            let present = r == deja_protocol::PROTOCOL_VERSION as i64;
            STATE.store(if present { PRESENT } else { ABSENT }, Ordering::Relaxed);
            if present {
                send_catalog();
            }
            present
        }
    }
}

fn send_catalog() {
    let records: Vec<SiteRecord> = CATALOG
        .iter()
        .map(|s| SiteRecord {
            id: s.id,
            kind: s.kind as u32,
            line: s.line,
            message_ptr: s.message.as_ptr() as u64,
            message_len: s.message.len() as u64,
            file_ptr: s.file.as_ptr() as u64,
            file_len: s.file.len() as u64,
        })
        .collect();
    raw_syscall(DEJA_SYSCALL, [Request::Catalog.word(), records.as_ptr() as u64, records.len() as u64, 0, 0]);
}

/// Runs at program start (an ELF constructor): finds deja and reports the catalog.
extern "C" fn start() {
    present();
}

#[used]
#[link_section = ".init_array"]
static START: extern "C" fn() = start;

fn local_line(kind: &str, fields: serde_json::Value) {
    let line = serde_json::json!({ "deja": kind, "fields": fields });
    eprintln!("{line}");
}

#[doc(hidden)]
pub mod __private {
    //! Called by the macros; not part of the API.
    use super::*;

    /// Evaluates one assertion site.
    pub fn evaluate(site: &'static Site, condition: bool, details: Option<&serde_json::Value>) {
        // Referencing the constructor keeps it linked into every program that asserts.
        std::hint::black_box(&START);
        let text = details.map(|d| d.to_string()).unwrap_or_default();
        let sent = request(Request::Assert, [site.id, condition as u64, text.as_ptr() as u64, text.len() as u64]);
        if sent.is_some() {
            return;
        }
        let failed = match site.kind {
            Kind::Always | Kind::AlwaysOrUnreachable => !condition,
            Kind::Unreachable => true,
            Kind::Sometimes | Kind::Reachable => false,
        };
        let first = !site.seen.swap(true, Ordering::Relaxed);
        if first || failed {
            local_line(
                "assertion",
                serde_json::json!({
                    "id": format!("{:016x}", site.id), "kind": site.kind.name(), "message": site.message,
                    "file": site.file, "line": site.line, "condition": condition, "failed": failed,
                    "details": details,
                }),
            );
        }
    }
}

/// Asserts that `cond` holds every time this line runs: `assert_always!(cond, "message")` or
/// `assert_always!(cond, "message", &json!({...}))`.
#[macro_export]
macro_rules! assert_always {
    ($cond:expr, $msg:literal $(, $details:expr)? $(,)?) => {
        $crate::__site!($crate::Kind::Always, $cond, $msg $(, $details)?)
    };
}

/// Like [`assert_always!`], but never reaching the line is fine too.
#[macro_export]
macro_rules! assert_always_or_unreachable {
    ($cond:expr, $msg:literal $(, $details:expr)? $(,)?) => {
        $crate::__site!($crate::Kind::AlwaysOrUnreachable, $cond, $msg $(, $details)?)
    };
}

/// Asserts that `cond` holds at least once over a run (or a campaign).
#[macro_export]
macro_rules! assert_sometimes {
    ($cond:expr, $msg:literal $(, $details:expr)? $(,)?) => {
        $crate::__site!($crate::Kind::Sometimes, $cond, $msg $(, $details)?)
    };
}

/// Asserts that this line is reached at least once.
#[macro_export]
macro_rules! assert_reachable {
    ($msg:literal $(, $details:expr)? $(,)?) => {
        $crate::__site!($crate::Kind::Reachable, true, $msg $(, $details)?)
    };
}

/// Asserts that this line is never reached.
#[macro_export]
macro_rules! assert_unreachable {
    ($msg:literal $(, $details:expr)? $(,)?) => {
        $crate::__site!($crate::Kind::Unreachable, false, $msg $(, $details)?)
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __site {
    ($kind:expr, $cond:expr, $msg:literal $(, $details:expr)?) => {{
        #[$crate::linkme::distributed_slice($crate::CATALOG)]
        #[linkme(crate = $crate::linkme)]
        static SITE: $crate::Site = $crate::Site::new($kind, $msg, file!(), line!());
        $crate::__private::evaluate(&SITE, $cond, $crate::__details!($($details)?));
    }};
}

#[doc(hidden)]
#[macro_export]
macro_rules! __details {
    () => {
        None
    };
    ($details:expr) => {
        Some($details)
    };
}

pub mod lifecycle {
    //! Marks in the program's life that deja uses.
    use super::*;

    /// The program finished starting up: deja may begin injecting faults and exploring from
    /// here.
    pub fn setup_complete(details: &serde_json::Value) {
        let text = details.to_string();
        if request(Request::SetupComplete, [text.as_ptr() as u64, text.len() as u64, 0, 0]).is_none() {
            local_line("setup_complete", details.clone());
        }
    }

    /// A named event with details, recorded on deja's timeline.
    pub fn send_event(name: &str, details: &serde_json::Value) {
        let text = details.to_string();
        let sent =
            request(Request::Event, [name.as_ptr() as u64, name.len() as u64, text.as_ptr() as u64, text.len() as u64]);
        if sent.is_none() {
            local_line("event", serde_json::json!({ "name": name, "details": details }));
        }
    }
}

pub mod history {
    //! A client's operations, for deja's linearizability checker.
    //!
    //! ```no_run
    //! use deja_sdk::history;
    //! use deja_sdk::serde_json::json;
    //! let op = history::invoke("set", "add", json!(7));
    //! // ... send the request; on the answer:
    //! op.ok(json!(null));
    //! let read = history::invoke("set", "read", json!(null));
    //! read.ok(json!([7]));
    //! ```
    //!
    //! Each record is an event deja keeps with its virtual time. At the end of a run deja checks
    //! the history against the model the operations name: `register` (`write V`, `read`, `cas
    //! [OLD, NEW]`), `kv` (the same with a key, [`invoke_key`]) or `set` (`add V`, `read` of the
    //! whole set). A history no order explains is a failure of the run, found and reported like
    //! a failed assertion. An operation that ends neither `ok` nor `fail` (a request that timed
    //! out) may have taken effect at any time after its invocation, or never.
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    static NEXT: AtomicU64 = AtomicU64::new(1);

    /// An operation in flight.
    #[derive(Debug)]
    #[must_use = "end the operation with ok, fail or info"]
    pub struct Op {
        id: u64,
    }

    fn record(details: serde_json::Value) {
        lifecycle::send_event(deja_protocol::HISTORY_EVENT, &details);
    }

    /// Invokes `f` with `value` under `model` (`register`, `set`; `kv` needs [`invoke_key`]).
    pub fn invoke(model: &str, f: &str, value: serde_json::Value) -> Op {
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        record(serde_json::json!({ "id": id, "type": "invoke", "model": model, "f": f, "value": value }));
        Op { id }
    }

    /// Invokes `f` on `key` with `value` under the `kv` model.
    pub fn invoke_key(key: &str, f: &str, value: serde_json::Value) -> Op {
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        record(serde_json::json!({ "id": id, "type": "invoke", "model": "kv", "key": key, "f": f, "value": value }));
        Op { id }
    }

    impl Op {
        /// It returned `value` (`null` for a write).
        pub fn ok(self, value: serde_json::Value) {
            record(serde_json::json!({ "id": self.id, "type": "ok", "value": value }));
        }

        /// It certainly did not take effect.
        pub fn fail(self) {
            record(serde_json::json!({ "id": self.id, "type": "fail" }));
        }

        /// Its outcome is unknown (the same as never ending it).
        pub fn info(self) {
            record(serde_json::json!({ "id": self.id, "type": "info" }));
        }
    }
}

pub mod faults {
    //! What deja's storage faults may strike, and how a stop after one is judged.
    //!
    //! deja injects storage faults (I/O errors, crashes at durable operations) into the system
    //! under test, not into the harness: a program excludes its own harness files with
    //! [`exclude_path`] (a log of what its client saw acknowledged, say). And a program that
    //! stops on a failing disk (a non-zero exit, a panic, an abort right after an injected
    //! I/O error) is fail-stop by default: deja crashes it there and restarts it on its
    //! durable disk, and what fails is an invariant after the restart. [`fail_stop_is_failure`]
    //! turns that off for a program that must never stop. Outside deja both do nothing.
    use super::*;

    /// Storage faults never strike `prefix` or anything under it (an absolute guest path).
    pub fn exclude_path(prefix: &str) {
        let _ = request(Request::ExcludePath, [prefix.as_ptr() as u64, prefix.len() as u64, 0, 0]);
    }

    /// A stop after an injected fault is a failure of this program, not a fail-stop.
    pub fn fail_stop_is_failure() {
        let _ = request(Request::FailStopIsFailure, [0, 0, 0, 0]);
    }
}

pub mod random {
    //! Random values that are decisions under deja: recorded, replayed, and steerable by the
    //! explorer. Outside deja they come from the kernel's `getrandom`.
    use super::*;

    fn os_random() -> u64 {
        let mut v = 0u64;
        // getrandom(&mut v, 8, 0) fills the buffer this frame owns.
        let r = raw_syscall(318, [&mut v as *mut u64 as u64, 8, 0, 0, 0]);
        if r == 8 {
            v
        } else {
            0
        }
    }

    /// A random `u64`.
    pub fn get_random() -> u64 {
        if present() {
            // The value is all of RAX: every bit pattern is a value here, none is an error.
            raw_syscall(DEJA_SYSCALL, [Request::Random.word(), 0, 0, 0, 0]) as u64
        } else {
            os_random()
        }
    }

    /// One element of `options`, chosen by deja (`None` if `options` is empty).
    pub fn random_choice<T>(options: &[T]) -> Option<&T> {
        if options.is_empty() {
            return None;
        }
        let n = options.len() as u64;
        let i = match request(Request::Choice, [n, 0, 0, 0]) {
            Some(i) => i as u64,
            None => os_random() % n,
        };
        options.get(i.min(n - 1) as usize)
    }
}

/// SanitizerCoverage calls this from each instrumented module's constructor with the bounds of
/// its inline 8-bit counters. deja finds the counters through the ELF's `__sancov_cntrs`
/// section instead, so there is nothing to do here; the symbol must exist for instrumented
/// programs to link.
#[no_mangle]
pub extern "C" fn __sanitizer_cov_8bit_counters_init(_start: *mut u8, _end: *mut u8) {}

/// SanitizerCoverage's PC-table hook (only used with `-sanitizer-coverage-pc-table`).
#[no_mangle]
pub extern "C" fn __sanitizer_cov_pcs_init(_start: *const usize, _end: *const usize) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outside_deja_everything_runs_locally() {
        // The test process is not under deja: the reserved syscall fails with ENOSYS.
        assert!(!present());
        assert_always!(1 + 1 == 2, "arithmetic holds");
        assert_always!(false, "a failing always is reported, not fatal", &serde_json::json!({"x": 1}));
        assert_sometimes!(true, "sometimes");
        assert_reachable!("reached");
        assert_always_or_unreachable!(true, "fine");
        lifecycle::setup_complete(&serde_json::json!({}));
        lifecycle::send_event("tick", &serde_json::json!({"n": 1}));
        let a = random::get_random();
        let b = random::get_random();
        assert_ne!(a, b, "getrandom fallback gives fresh values");
        assert_eq!(random::random_choice::<u8>(&[]), None);
        faults::exclude_path("/data/acked");
        faults::fail_stop_is_failure();
        assert!([1, 2, 3].contains(random::random_choice(&[1, 2, 3]).unwrap()));
    }

    #[test]
    fn the_catalog_holds_every_site_with_stable_ids() {
        fn never_called() {
            assert_unreachable!("never called");
        }
        let _ = never_called;
        let site = CATALOG.iter().find(|s| s.message == "never called").expect("registered at compile time");
        assert_eq!(site.kind, Kind::Unreachable);
        assert!(site.file.ends_with("lib.rs"));
        assert_eq!(site.id, deja_protocol::site_id(Kind::Unreachable as u32, site.file, site.line, site.message));
        assert!(CATALOG.len() >= 6);
    }
}
