//! Where this process's time goes, over every VM it runs: inside `KVM_RUN`, in the core's
//! syscall handling (per syscall number), in its exception handling, and in fork resets.
//! Counters only (relaxed atomics, shared by every worker thread); host time, display only, in
//! no digest. `deja explore --profile` prints the difference over a campaign.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// deja's own syscall (the SDK's requests).
const DEJA_SYSCALL: u64 = 0xde1a;

/// Syscall numbers counted one by one; the last slot counts deja's own (`0xde1a`, the SDK's)
/// and any number past Linux's table.
const SLOTS: usize = 512;

static KVM_RUN_NS: AtomicU64 = AtomicU64::new(0);
static EXITS: AtomicU64 = AtomicU64::new(0);
static SYSCALL_NS: AtomicU64 = AtomicU64::new(0);
static EXCEPTION_NS: AtomicU64 = AtomicU64::new(0);
static RESET_NS: AtomicU64 = AtomicU64::new(0);
static LATE_CAPTURE_NS: AtomicU64 = AtomicU64::new(0);
static LATE_TAKEN: AtomicU64 = AtomicU64::new(0);
static LATE_CHILDREN: AtomicU64 = AtomicU64::new(0);
static LATE_SKIPPED: AtomicU64 = AtomicU64::new(0);
static CHILDREN: AtomicU64 = AtomicU64::new(0);
static BY_NR: [(AtomicU64, AtomicU64); SLOTS] = [const { (AtomicU64::new(0), AtomicU64::new(0)) }; SLOTS];

pub(crate) fn kvm_run(ns: u64) {
    KVM_RUN_NS.fetch_add(ns, Relaxed);
    EXITS.fetch_add(1, Relaxed);
}

pub(crate) fn syscall(nr: u64, ns: u64) {
    SYSCALL_NS.fetch_add(ns, Relaxed);
    let (count, time) = &BY_NR[(nr as usize).min(SLOTS - 1)];
    count.fetch_add(1, Relaxed);
    time.fetch_add(ns, Relaxed);
}

pub(crate) fn exception(ns: u64) {
    EXCEPTION_NS.fetch_add(ns, Relaxed);
}

pub(crate) fn reset(ns: u64) {
    RESET_NS.fetch_add(ns, Relaxed);
}

pub(crate) fn late_capture(ns: u64) {
    LATE_CAPTURE_NS.fetch_add(ns, Relaxed);
}

/// A forked child started: from a later fork that had `skipped` decisions past its fork point
/// (`Some`), or from the fork point (`None`). Called by the forks of programs and clusters.
pub fn child(skipped: Option<u64>) {
    CHILDREN.fetch_add(1, Relaxed);
    if let Some(d) = skipped {
        LATE_CHILDREN.fetch_add(1, Relaxed);
        LATE_SKIPPED.fetch_add(d, Relaxed);
    }
}

/// A later fork was kept.
pub fn late_taken() {
    LATE_TAKEN.fetch_add(1, Relaxed);
}

/// The counters at one moment; [`Profile::since`] gives what happened between two.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Profile {
    /// ns inside `KVM_RUN` (guest code and each exit's round trip).
    pub kvm_run_ns: u64,
    /// `KVM_RUN` calls that returned (exits).
    pub exits: u64,
    /// ns in the core's syscall handling.
    pub syscall_ns: u64,
    /// ns in its exception handling.
    pub exception_ns: u64,
    /// ns resetting forks.
    pub reset_ns: u64,
    /// ns capturing later forks (the pages each VM's course changed).
    pub late_capture_ns: u64,
    /// Forked children.
    pub children: u64,
    /// Later forks kept.
    pub late_taken: u64,
    /// Forked children that started from a later fork.
    pub late_children: u64,
    /// Decisions those children did not run again.
    pub late_skipped: u64,
    /// Per syscall name: count and ns, most expensive first.
    pub by_syscall: Vec<(String, u64, u64)>,
}

/// The counters now.
pub fn snapshot() -> Profile {
    let mut by_syscall: Vec<(String, u64, u64)> = BY_NR
        .iter()
        .enumerate()
        .filter_map(|(nr, (c, t))| {
            let c = c.load(Relaxed);
            let nr = if nr == SLOTS - 1 { DEJA_SYSCALL } else { nr as u64 };
            (c > 0).then(|| (deja_kernel::syscalls::display_name(nr), c, t.load(Relaxed)))
        })
        .collect();
    by_syscall.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(&b.0)));
    Profile {
        kvm_run_ns: KVM_RUN_NS.load(Relaxed),
        exits: EXITS.load(Relaxed),
        syscall_ns: SYSCALL_NS.load(Relaxed),
        exception_ns: EXCEPTION_NS.load(Relaxed),
        reset_ns: RESET_NS.load(Relaxed),
        late_capture_ns: LATE_CAPTURE_NS.load(Relaxed),
        children: CHILDREN.load(Relaxed),
        late_taken: LATE_TAKEN.load(Relaxed),
        late_children: LATE_CHILDREN.load(Relaxed),
        late_skipped: LATE_SKIPPED.load(Relaxed),
        by_syscall,
    }
}

impl Profile {
    /// What happened between `earlier` and `self`.
    pub fn since(&self, earlier: &Profile) -> Profile {
        let mut by_syscall: Vec<(String, u64, u64)> = self
            .by_syscall
            .iter()
            .map(|(n, c, t)| {
                let (c0, t0) = earlier.by_syscall.iter().find(|e| &e.0 == n).map_or((0, 0), |e| (e.1, e.2));
                (n.clone(), c - c0, t - t0)
            })
            .filter(|e| e.1 > 0)
            .collect();
        by_syscall.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(&b.0)));
        Profile {
            kvm_run_ns: self.kvm_run_ns - earlier.kvm_run_ns,
            exits: self.exits - earlier.exits,
            syscall_ns: self.syscall_ns - earlier.syscall_ns,
            exception_ns: self.exception_ns - earlier.exception_ns,
            reset_ns: self.reset_ns - earlier.reset_ns,
            late_capture_ns: self.late_capture_ns - earlier.late_capture_ns,
            children: self.children - earlier.children,
            late_taken: self.late_taken - earlier.late_taken,
            late_children: self.late_children - earlier.late_children,
            late_skipped: self.late_skipped - earlier.late_skipped,
            by_syscall,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_profile_is_the_difference_of_two_snapshots() {
        let before = snapshot();
        syscall(228, 700);
        syscall(228, 300);
        syscall(1, 50);
        syscall(0xde1a, 5);
        kvm_run(9000);
        reset(40);
        let d = snapshot().since(&before);
        // Other tests of this process may count too: what this one added is at least there.
        assert!(d.syscall_ns >= 1055 && d.kvm_run_ns >= 9000 && d.exits >= 1 && d.reset_ns >= 40);
        let clock = d.by_syscall.iter().find(|e| e.0 == "clock_gettime").expect("counted by name");
        assert!(clock.1 >= 2 && clock.2 >= 1000);
        assert!(d.by_syscall.windows(2).all(|w| w[0].2 >= w[1].2), "most expensive first");
    }
}
