//! The crash points of a run, enumerated once for every caller: `deja run --crash-sweep`, the
//! explorer's frontier and its hunt, the program judge's search and the cluster judge's storage
//! sweep all take their points from [`crash_points`] (and, when a budget allows fewer than the
//! run's durable operations, pick the operations with [`spread`]).
//!
//! A program's crash point is before or after its k-th durable write (1-based), or at its exit
//! ([`CrashPoint`]); a [`FaultConfig`] places at most one ([`CrashPoint::place`],
//! [`CrashPoint::of`]). A cluster node's crash point names its durable operation by path and
//! count instead ([`crate::OpCrash`]), and takes the same [`When`] sides in the same order.
//!
//! Owns nothing; uses only [`FaultConfig`] and [`When`].

use crate::prelude::*;

use crate::faults::{FaultConfig, When};

/// Where a crash of a program strikes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CrashPoint {
    /// When the program makes its k-th durable write, before it takes effect: what it would
    /// have made durable is still pending.
    Before(u64),
    /// Right after its k-th durable write took effect.
    After(u64),
    /// When the program exits, instead of exiting.
    AtExit,
}

impl CrashPoint {
    /// The crash point `faults` places, if it places one.
    pub fn of(faults: &FaultConfig) -> Option<CrashPoint> {
        match (faults.crash_before_durable_write, faults.crash_after_durable_write, faults.crash_at_exit) {
            (Some(k), _, _) => Some(CrashPoint::Before(k)),
            (None, Some(k), _) => Some(CrashPoint::After(k)),
            (None, None, true) => Some(CrashPoint::AtExit),
            (None, None, false) => None,
        }
    }

    /// Places this crash point in `faults`, instead of any it placed (its crash state too).
    pub fn place(self, faults: &mut FaultConfig) {
        clear(faults);
        match self {
            CrashPoint::Before(k) => faults.crash_before_durable_write = Some(k),
            CrashPoint::After(k) => faults.crash_after_durable_write = Some(k),
            CrashPoint::AtExit => faults.crash_at_exit = true,
        }
    }

    /// `base` with this crash point placed.
    pub fn on(self, base: &FaultConfig) -> FaultConfig {
        let mut f = base.clone();
        self.place(&mut f);
        f
    }

    /// The durable write it concerns (0 at exit).
    pub fn write(self) -> u64 {
        match self {
            CrashPoint::Before(k) | CrashPoint::After(k) => k,
            CrashPoint::AtExit => 0,
        }
    }

    /// Its side of the durable write (`None` at exit).
    pub fn side(self) -> Option<When> {
        match self {
            CrashPoint::Before(_) => Some(When::Before),
            CrashPoint::After(_) => Some(When::After),
            CrashPoint::AtExit => None,
        }
    }

    /// In words: `before durable write 3`, `after durable write 3`, `at exit`.
    pub fn words(self) -> String {
        match self {
            CrashPoint::Before(k) => format!("before durable write {k}"),
            CrashPoint::After(k) => format!("after durable write {k}"),
            CrashPoint::AtExit => "at exit".into(),
        }
    }

    /// The `deja run` flag that places it: `--crash-before-durable-write=3`.
    pub fn flag(self) -> String {
        match self {
            CrashPoint::Before(k) => format!("--crash-before-durable-write={k}"),
            CrashPoint::After(k) => format!("--crash-after-durable-write={k}"),
            CrashPoint::AtExit => "--crash-at-exit".into(),
        }
    }
}

/// Removes the crash point `faults` places and the crash state it names.
pub fn clear(faults: &mut FaultConfig) {
    faults.crash_before_durable_write = None;
    faults.crash_after_durable_write = None;
    faults.crash_at_exit = false;
    faults.crash_state = None;
}

/// The crash points of a run that made `durable_writes` durable writes: for each write in order,
/// one point per side of `sides` in that order, then the crash at exit when `at_exit`.
///
/// The callers' orders: the sweep and the frontier try before, then after (the sweep's rows read
/// in time order); the judge's search and the hunt try after first, the durable layer alone,
/// which needs no crash state, before the states of the crash before.
pub fn crash_points(durable_writes: u64, sides: &[When], at_exit: bool) -> Vec<CrashPoint> {
    let mut out = Vec::new();
    for k in 1..=durable_writes {
        out.extend(sides.iter().map(|side| match side {
            When::Before => CrashPoint::Before(k),
            When::After => CrashPoint::After(k),
        }));
    }
    if at_exit {
        out.push(CrashPoint::AtExit);
    }
    out
}

/// Which of `total` durable operations get crash points when at most `take` may (`take` at
/// least 1): all of them when they fit, else `take` spread evenly over them in order (the
/// first always among them). Indices into the operations.
pub fn spread(total: usize, take: usize) -> Vec<usize> {
    let take = take.max(1);
    if total <= take {
        (0..total).collect()
    } else {
        (0..take).map(|i| i * total / take).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_come_per_write_in_the_sides_order_then_at_exit() {
        let both = crash_points(2, &[When::Before, When::After], true);
        use CrashPoint::*;
        assert_eq!(both, [Before(1), After(1), Before(2), After(2), AtExit]);
        assert_eq!(crash_points(2, &[When::After, When::Before], false), [After(1), Before(1), After(2), Before(2)]);
        assert_eq!(crash_points(3, &[When::After], false), [After(1), After(2), After(3)]);
        assert_eq!(crash_points(0, &[When::Before, When::After], true), [AtExit]);
        assert!(crash_points(0, &[When::After], false).is_empty());
    }

    #[test]
    fn a_point_placed_is_the_point_read_back_and_replaces_any_other() {
        for p in [CrashPoint::Before(4), CrashPoint::After(1), CrashPoint::AtExit] {
            let mut f = FaultConfig { crash_after_durable_write: Some(9), crash_at_exit: true, ..Default::default() };
            f.crash_state = Some(crate::CrashState::none());
            p.place(&mut f);
            assert_eq!(CrashPoint::of(&f), Some(p));
            assert!(f.crashes() && f.crash_state.is_none());
            assert_eq!(
                usize::from(f.crash_before_durable_write.is_some())
                    + usize::from(f.crash_after_durable_write.is_some())
                    + usize::from(f.crash_at_exit),
                1
            );
        }
        let mut f = CrashPoint::After(2).on(&FaultConfig::default());
        clear(&mut f);
        assert_eq!(CrashPoint::of(&f), None);
        assert_eq!(CrashPoint::Before(3).words(), "before durable write 3");
        assert_eq!(CrashPoint::After(3).flag(), "--crash-after-durable-write=3");
        assert_eq!(CrashPoint::AtExit.flag(), "--crash-at-exit");
        assert_eq!((CrashPoint::Before(3).write(), CrashPoint::AtExit.write()), (3, 0));
        assert_eq!(
            (CrashPoint::Before(3).side(), CrashPoint::After(1).side(), CrashPoint::AtExit.side()),
            (Some(When::Before), Some(When::After), None)
        );
    }

    #[test]
    fn spread_keeps_all_that_fit_and_else_spaces_them_evenly() {
        assert_eq!(spread(3, 5), [0, 1, 2]);
        assert_eq!(spread(10, 5), [0, 2, 4, 6, 8]);
        assert_eq!(spread(7, 3), [0, 2, 4]);
        assert_eq!(spread(4, 0), [0]);
        assert!(spread(0, 4).is_empty());
    }
}
