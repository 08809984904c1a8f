//! The storage fault menu: every fault the explorer's mutations, its random baseline and
//! `deja check`'s hunt choose from, so that the three see the same faults.
//!
//! - **Crash points:** before or after the k-th durable write, or at exit.
//! - **Crash states:** which operations pending at the crash reach the disk: decided by the
//!   run's decisions under `torn_writes`/`reordered_writes`, or named exactly (nothing, all,
//!   all but one, a prefix, a random subset, one write torn).
//! - **Placed errors:** EIO or ENOSPC on the n-th write, fsync, truncate, fallocate, create,
//!   rename or read of a path the parent run touched (its [`IoCount`]s).
//! - **Rates:** EIO on writes and fsyncs, ENOSPC on writes, in parts per million.
//!
//! A cluster's storage menu is the same per node, by meaning ([`NodeMenu`]): a crash of a node
//! before or after one of its durable operations (named by path and index over the node's
//! run), and EIO or ENOSPC on one of its writes or fsyncs. Half the crash points are drawn near
//! the parent's focus: the durable operations that came just before the decision where the
//! parent made progress.

use deja_cluster::{NodeFault, StorageFault};
use deja_kernel::faults::crash_points::{self, crash_points};
use deja_kernel::{CrashPoint, CrashState, ErrorRule, FaultConfig, IoCount, IoErrno, IoOp, OpCrash, ProcessKill, When};
use rand_chacha::rand_core::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};

/// What a parent run offers to fault: its durable writes, its file operations, and how many
/// operations were pending when it crashed.
#[derive(Debug, Clone, Copy)]
pub struct Menu<'a> {
    /// Durable writes of the run (crash points 1..=this).
    pub durable_writes: u64,
    /// Its file operations by kind and path.
    pub io_ops: &'a [IoCount],
    /// Operations pending at its crash, if it crashed.
    pub pending_at_crash: Option<u64>,
    /// Durable operations of the program's other processes, by name (where a process kill can
    /// be placed).
    pub processes: &'a [(String, u64)],
}

/// Placed errors an input carries at most.
const MAX_ERRORS: usize = 3;

/// A uniform draw below `n` (`n > 0`), without modulo bias (Lemire's multiply-and-reject).
pub fn below(rng: &mut ChaCha20Rng, n: u64) -> u64 {
    if n <= 1 {
        return 0;
    }
    loop {
        let m = u128::from(rng.next_u64()) * u128::from(n);
        if (m as u64) >= n.wrapping_neg() % n {
            return (m >> 64) as u64;
        }
    }
}

/// A uniform draw below `n` (`n > 0`) that is the draw modulo `n`, made unbiased by
/// rejection: a draw in the top `2^64 mod n` values (the incomplete last round of `0..n`) is
/// thrown away and drawn again, so every value below `n` has the same chance.
///
/// Unlike [`below`], which maps a draw by multiplication, a kept draw gives `x % n`, the value
/// the explorer's `next_u64() % n` always gave: a campaign takes the same course as before
/// except after a draw in the rejected zone, whose probability is `(2^64 mod n) / 2^64`, below
/// `n / 2^64` (about one in 2^60 for the explorer's largest `n`). It always takes at least one
/// draw, also for `n == 1`.
pub fn modulo_below(rng: &mut ChaCha20Rng, n: u64) -> u64 {
    modulo_below_from(n, || rng.next_u64())
}

/// [`modulo_below`] over the words `next` gives.
fn modulo_below_from(n: u64, mut next: impl FnMut() -> u64) -> u64 {
    // 2^64 mod n: the draws above u64::MAX - zone are rejected (none when n divides 2^64), so
    // the accepted 0..=u64::MAX - zone holds a whole number of rounds of 0..n.
    let zone = n.wrapping_neg() % n;
    loop {
        let x = next();
        if x <= u64::MAX - zone {
            return x % n;
        }
    }
}

/// True with probability 1 / `n`.
fn one_in(rng: &mut ChaCha20Rng, n: u64) -> bool {
    below(rng, n) == 0
}

/// Sets a crash point drawn from the menu: before or after a durable write, or at exit.
fn crash_point(rng: &mut ChaCha20Rng, f: &mut FaultConfig, menu: &Menu) {
    let k = menu.durable_writes;
    let point = match below(rng, if k > 0 { 5 } else { 1 }) {
        0 => CrashPoint::AtExit,
        1 | 2 => CrashPoint::Before(1 + below(rng, k)),
        _ => CrashPoint::After(1 + below(rng, k)),
    };
    point.place(f);
}

/// A crash state over `n` pending operations.
fn crash_state(rng: &mut ChaCha20Rng, n: u64) -> CrashState {
    let all: Vec<u32> = (0..n as u32).collect();
    let mut s = match below(rng, 5) {
        0 => CrashState::none(),
        1 => CrashState::all(n as usize),
        2 => {
            let drop = below(rng, n) as u32;
            CrashState { kept: all.into_iter().filter(|i| *i != drop).collect(), torn: None }
        }
        3 => CrashState { kept: (0..below(rng, n + 1) as u32).collect(), torn: None },
        _ => CrashState { kept: all.into_iter().filter(|_| one_in(rng, 2)).collect(), torn: None },
    };
    if one_in(rng, 3) {
        // A torn write where the state stops keeping operations (ignored unless it is a write).
        let at = s.kept.last().map_or(0, |l| l + 1);
        if u64::from(at) < n {
            s.torn = Some((at, 1 + below(rng, 7)));
        }
    }
    s
}

/// A placed error on one of the run's operations.
fn placed_error(rng: &mut ChaCha20Rng, ops: &[IoCount]) -> Option<ErrorRule> {
    if ops.is_empty() {
        return None;
    }
    let c = &ops[below(rng, ops.len() as u64) as usize];
    let errno = match c.op {
        IoOp::Write | IoOp::Fallocate | IoOp::Create | IoOp::Truncate if one_in(rng, 3) => IoErrno::Enospc,
        _ => IoErrno::Eio,
    };
    Some(ErrorRule::at(c.op, &c.path, 1 + below(rng, c.count.max(1)), errno))
}

/// Pending operations a crash state is drawn over when the parent's count is unknown:
/// positions past the real count are ignored, so a random subset of these is a random subset of
/// whatever is pending.
const ASSUMED_PENDING: u64 = 8;

/// Changes one thing of `f`, drawn from the menu (a quarter of the time it starts over from
/// no fault, so that faults do not only pile up).
pub fn mutate(rng: &mut ChaCha20Rng, f: &mut FaultConfig, menu: &Menu) {
    if one_in(rng, 4) {
        *f = FaultConfig::default();
    }
    // A program of one process draws exactly what it drew before processes existed.
    if !menu.processes.is_empty() && one_in(rng, 6) {
        process_kill(rng, f, menu.processes);
        return;
    }
    let pending = menu.pending_at_crash.filter(|n| *n > 0).unwrap_or(ASSUMED_PENDING);
    match below(rng, 10) {
        0..=2 => {
            crash_point(rng, f, menu);
            // The crash state: named exactly half the time, else left to the run's decisions
            // under the weakest model. (A campaign's seed is fixed, so decisions alone would
            // keep drawing the same subset at the same point.)
            if one_in(rng, 2) {
                f.crash_state = Some(crash_state(rng, pending));
            } else {
                f.reordered_writes = true;
            }
            if one_in(rng, 2) {
                f.errors.clear();
            }
        }
        3 => {
            if !f.crashes() {
                crash_point(rng, f, menu);
            }
            f.crash_state = Some(crash_state(rng, pending));
        }
        4 => f.torn_writes = !f.torn_writes,
        5 => f.reordered_writes = !f.reordered_writes,
        6 | 7 => match placed_error(rng, menu.io_ops) {
            Some(rule) => {
                if let Some(i) = f.errors.iter().position(|r| (r.op, &r.path, r.nth) == (rule.op, &rule.path, rule.nth))
                {
                    f.errors.remove(i);
                } else if f.errors.len() >= MAX_ERRORS {
                    let i = below(rng, f.errors.len() as u64) as usize;
                    f.errors[i] = rule;
                } else {
                    f.errors.push(rule);
                }
            }
            None => crash_point(rng, f, menu),
        },
        8 => {
            if !f.errors.is_empty() && one_in(rng, 2) {
                f.errors.clear();
            } else {
                crash_points::clear(f);
            }
        }
        _ => match below(rng, 3) {
            0 => f.eio_on_write_ppm = if f.eio_on_write_ppm == 0 { 20_000 } else { 0 },
            1 => f.enospc_on_write_ppm = if f.enospc_on_write_ppm == 0 { 20_000 } else { 0 },
            _ => f.eio_on_fsync_ppm = if f.eio_on_fsync_ppm == 0 { 200_000 } else { 0 },
        },
    }
}

/// Kills a process of the program at one of its durable operations (or takes the kill
/// away): supervisors and their restarts.
fn process_kill(rng: &mut ChaCha20Rng, f: &mut FaultConfig, processes: &[(String, u64)]) {
    if !f.kill_process.is_empty() && one_in(rng, 3) {
        f.kill_process.clear();
        return;
    }
    let (name, ops) = &processes[below(rng, processes.len() as u64) as usize];
    let when = if one_in(rng, 2) { When::Before } else { When::After };
    f.kill_process = vec![ProcessKill { name: name.clone(), when, nth: 1 + below(rng, (*ops).max(1)) }];
}

/// A fault configuration drawn from scratch (the random baseline): a crash point half the
/// time (with a crash state named half of those times), the crash-state modes, and a placed
/// error half the time.
pub fn random(rng: &mut ChaCha20Rng, menu: &Menu) -> FaultConfig {
    let mut f = FaultConfig::default();
    if one_in(rng, 2) {
        crash_point(rng, &mut f, menu);
        if one_in(rng, 2) {
            f.crash_state = Some(crash_state(rng, ASSUMED_PENDING));
        }
    }
    f.torn_writes = one_in(rng, 4);
    f.reordered_writes = one_in(rng, 2);
    if one_in(rng, 2) {
        if let Some(rule) = placed_error(rng, menu.io_ops) {
            f.errors.push(rule);
        }
    }
    f
}

/// The errors a single fault places on an operation: EIO on any, and ENOSPC on those that can
/// run out of space (the frontier and the hunt).
fn single_errnos(op: IoOp) -> &'static [IoErrno] {
    match op {
        IoOp::Write | IoOp::Fallocate | IoOp::Create => &[IoErrno::Eio, IoErrno::Enospc],
        _ => &[IoErrno::Eio],
    }
}

/// The most single faults a frontier holds.
pub const MAX_FRONTIER: usize = 1024;

/// Of each kind of operation on each path, the frontier fails the first this many.
pub const FRONTIER_PER_OPERATION: u64 = 64;

/// Of each path's syncs, the frontier fails the first this many, each followed by the crashes
/// of [`sync_then_crash`]; a hunt, the first [`HUNT_FAILED_SYNCS`] of the run's syncs.
pub const FRONTIER_FAILED_SYNCS: u64 = 16;

/// The failed syncs a hunt follows with crashes, at most (each with its two crashes).
pub const HUNT_FAILED_SYNCS: usize = 16;

/// A failed sync followed by a crash (fsyncgate: Linux drops what a failed sync could not write,
/// a retry then succeeds, and what the program built on top of it is durable while the data is
/// not): EIO on the `nth` sync (fsync, fdatasync) of `path`, then a crash placed by meaning,
/// nearest the failure first: before the next sync of the path, after it, after the one after
/// (the retry, then the commit that trusts it), and at exit. A failed sync is not a durable
/// operation, so the path's next durable operation is its `nth` when the syncs before it
/// succeeded.
pub fn sync_then_crash(path: &str, nth: u64) -> Vec<FaultConfig> {
    let error = vec![ErrorRule::at(IoOp::Fsync, path, nth, IoErrno::Eio)];
    let at = |when, nth| OpCrash { when, path: path.to_string(), nth, keep: None };
    let mut out: Vec<FaultConfig> = [at(When::Before, nth), at(When::After, nth), at(When::After, nth + 1)]
        .into_iter()
        .map(|c| FaultConfig { errors: error.clone(), crash_at: vec![c], ..Default::default() })
        .collect();
    out.push(FaultConfig { errors: error, crash_at_exit: true, ..Default::default() });
    out
}

/// What a life did after the syncs placed to fail: for each EIO its faults place on one sync
/// (the `nth` fsync or fdatasync) of a path that the life reached, and only when they place no
/// crash, the path, `nth`, and whether the life went on past the failure: it synced the path
/// again (its `io_ops` count more than `nth` syncs of it: a retry, then what trusts it), or it
/// ended with status 0. A life that stopped at the error (a fail-stop) did not go on. A failed
/// sync the program went on past is worth following with a crash ([`sync_then_crash`]): the
/// program built on something the failure may have dropped; one it stopped at is not.
pub fn after_failed_syncs(faults: &FaultConfig, io_ops: &[IoCount], exited_zero: bool) -> Vec<(String, u64, bool)> {
    if faults.crashes() {
        return Vec::new();
    }
    let syncs = |path: &str| io_ops.iter().find(|c| c.op == IoOp::Fsync && c.path == path).map_or(0, |c| c.count);
    faults
        .errors
        .iter()
        .filter(|e| e.op == IoOp::Fsync && e.errno == IoErrno::Eio && e.nth > 0 && e.keep.is_none())
        .filter(|e| syncs(&e.path) >= e.nth)
        .map(|e| (e.path.clone(), e.nth, syncs(&e.path) > e.nth || exited_zero))
        .collect()
}

/// The failed sync a composition of [`sync_then_crash`] places (its path and `nth`), if it is one.
pub fn composed_sync(faults: &FaultConfig) -> Option<(&str, u64)> {
    match faults.errors.as_slice() {
        [e] if faults.crashes() && e.op == IoOp::Fsync && e.errno == IoErrno::Eio && e.nth > 0 => {
            Some((e.path.as_str(), e.nth))
        }
        _ => None,
    }
}

/// The frontier's single faults, in the order a campaign of stream seed `seed` tries them, at
/// most [`MAX_FRONTIER`]: four kinds taken in turn (the last every other turn), each in a seeded order of its own (so
/// every crash point is tried once within the first rounds whatever the number of operations
/// the run made):
/// - a crash before and after each durable write, and at exit (each with its state left open:
///   [`frontier_round`] names one);
/// - EIO on every operation of the run (and ENOSPC where it applies), up to the
///   [`FRONTIER_PER_OPERATION`]-th of each kind on each path;
/// - a kill of each other process before and after each of its durable operations;
/// - a failed sync followed by a crash ([`sync_then_crash`]), on each of the first
///   [`FRONTIER_FAILED_SYNCS`] syncs of each path the run synced.
pub fn frontier(menu: &Menu, seed: u64) -> Vec<FaultConfig> {
    let crashes: Vec<FaultConfig> = crash_points(menu.durable_writes, &[When::Before, When::After], true)
        .into_iter()
        .map(|p| p.on(&FaultConfig::default()))
        .collect();
    let mut errors = Vec::new();
    for c in menu.io_ops {
        for nth in 1..=c.count.min(FRONTIER_PER_OPERATION) {
            for &errno in single_errnos(c.op) {
                errors
                    .push(FaultConfig { errors: vec![ErrorRule::at(c.op, &c.path, nth, errno)], ..Default::default() });
            }
        }
    }
    let mut kills = Vec::new();
    for (name, ops) in menu.processes {
        for nth in 1..=*ops {
            for when in [When::Before, When::After] {
                let kill = ProcessKill { name: name.clone(), when, nth };
                kills.push(FaultConfig { kill_process: vec![kill], ..Default::default() });
            }
        }
    }
    let mut synced = Vec::new();
    for c in menu.io_ops.iter().filter(|c| c.op == IoOp::Fsync) {
        for nth in 1..=c.count.min(FRONTIER_FAILED_SYNCS) {
            synced.extend(sync_then_crash(&c.path, nth));
        }
    }
    let mut rng = ChaCha20Rng::seed_from_u64(seed ^ 0x6672_6f6e_7469_6572);
    let mut kinds: Vec<std::vec::IntoIter<FaultConfig>> = [crashes, errors, kills, synced]
        .into_iter()
        .map(|mut kind| {
            shuffle(&mut rng, &mut kind);
            kind.into_iter()
        })
        .collect();
    // The single faults take a turn each time round; the failed syncs then crashes (two faults
    // each) every other time, so that they do not slow the single faults down by a quarter.
    let mut out = Vec::new();
    let mut turn = 0usize;
    while out.len() < MAX_FRONTIER && kinds.iter().any(|k| k.len() > 0) {
        for (i, kind) in kinds.iter_mut().enumerate() {
            if i < 3 || turn.is_multiple_of(2) {
                out.extend(kind.next());
            }
        }
        turn += 1;
    }
    out.truncate(MAX_FRONTIER);
    out
}

/// Fisher–Yates over `rng`.
fn shuffle<T>(rng: &mut ChaCha20Rng, v: &mut [T]) {
    for i in (1..v.len()).rev() {
        let j = modulo_below(rng, i as u64 + 1) as usize;
        v.swap(i, j);
    }
}

/// A frontier fault as a round runs it: a crash keeps a uniformly drawn subset of the
/// operations pending at it (each kept or dropped with even odds, over
/// [`ASSUMED_PENDING`] positions: those past the real count are ignored), so that each crash
/// point is tried in a state of its own rather than the one the campaign seed's decisions would
/// pick every time.
pub fn frontier_round(rng: &mut ChaCha20Rng, mut f: FaultConfig) -> FaultConfig {
    // A crash after a failed sync keeps what its decisions choose: the failure decided what is
    // pending.
    if f.crashes() && f.errors.is_empty() {
        f.crash_state =
            Some(CrashState { kept: (0..ASSUMED_PENDING as u32).filter(|_| one_in(rng, 2)).collect(), torn: None });
    }
    f
}

/// The faults a hunt tries, in order, at most `budget`: the crash points (before and after each
/// durable write, at exit) with the weakest crash model, then EIO (and ENOSPC where it applies)
/// on each operation of the run, first occurrence first, then the first
/// [`HUNT_FAILED_SYNCS`] syncs failed, each followed by a crash after the path's next two
/// syncs and at exit (the last two of [`sync_then_crash`]).
pub fn hunt(menu: &Menu, budget: usize) -> Vec<FaultConfig> {
    let mut out = Vec::new();
    // After a durable write the durable layer alone; before one and at exit, under the weakest
    // crash model.
    let weak = FaultConfig { reordered_writes: true, torn_writes: true, ..Default::default() };
    let durable_layer = FaultConfig::default();
    for p in crash_points(menu.durable_writes, &[When::After, When::Before], true) {
        out.push(p.on(if matches!(p, CrashPoint::After(_)) { &durable_layer } else { &weak }));
    }
    let most = menu.io_ops.iter().map(|c| c.count).max().unwrap_or(0);
    for nth in 1..=most {
        for c in menu.io_ops.iter().filter(|c| c.count >= nth) {
            for &errno in single_errnos(c.op) {
                let rule = ErrorRule::at(c.op, &c.path, nth, errno);
                out.push(FaultConfig { errors: vec![rule], ..Default::default() });
            }
        }
    }
    let syncs = (1..=most).flat_map(|nth| {
        menu.io_ops.iter().filter(move |c| c.op == IoOp::Fsync && c.count >= nth).map(move |c| (c.path.as_str(), nth))
    });
    for (path, nth) in syncs.take(HUNT_FAILED_SYNCS) {
        out.extend(sync_then_crash(path, nth).into_iter().skip(2));
    }
    out.truncate(budget);
    out
}

/// What one node of a parent cluster run offers to storage faults.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeMenu {
    /// The node.
    pub node: String,
    /// Its durable operations, numbered over its run, at most [`MAX_NODE_POINTS`].
    pub durable: Vec<DurablePoint>,
    /// Its file operations by kind and path, counted over its run (errors are drawn on its
    /// writes and fsyncs).
    pub io_ops: Vec<IoCount>,
}

impl NodeMenu {
    /// A storage fault can be drawn from it: it has a durable operation to crash at, or a write
    /// or fsync to fail. A node that only read files (a dynamically linked binary's libraries,
    /// its declared inputs) offers nothing.
    pub fn offers(&self) -> bool {
        !self.durable.is_empty() || self.io_ops.iter().any(|c| matches!(c.op, IoOp::Write | IoOp::Fsync))
    }
}

/// One durable operation a crash can be placed at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "(String, u64, u64, bool)", into = "(String, u64, u64, bool)")]
pub struct DurablePoint {
    /// The path.
    pub path: String,
    /// Its number among the node's durable operations on the path.
    pub nth: u64,
    /// The cluster decision index at its time (what a focus is).
    pub at: u64,
    /// Something was pending on its target.
    pub promotes: bool,
}

impl From<(String, u64, u64, bool)> for DurablePoint {
    fn from((path, nth, at, promotes): (String, u64, u64, bool)) -> DurablePoint {
        DurablePoint { path, nth, at, promotes }
    }
}

impl From<DurablePoint> for (String, u64, u64, bool) {
    fn from(d: DurablePoint) -> (String, u64, u64, bool) {
        (d.path, d.nth, d.at, d.promotes)
    }
}

/// Durable operations of one node a menu keeps, at most (the first ones).
pub const MAX_NODE_POINTS: usize = 512;

/// Storage faults a cluster input carries at most.
const MAX_STORAGE: usize = 3;

/// A crash at one of `menu`'s durable operations: half the time one of the four that came
/// last before `focus`, else any (three times in four one that had something to make durable).
fn node_crash(rng: &mut ChaCha20Rng, menu: &NodeMenu, focus: Option<u64>) -> Option<StorageFault> {
    let points = &menu.durable;
    if points.is_empty() {
        return None;
    }
    let near: Vec<&DurablePoint> = match focus {
        Some(f) if one_in(rng, 2) => {
            let before: Vec<&DurablePoint> = points.iter().filter(|p| p.at <= f).collect();
            before.iter().rev().take(4).copied().collect()
        }
        _ => Vec::new(),
    };
    let promoting: Vec<&DurablePoint> = points.iter().filter(|p| p.promotes).collect();
    let p = if !near.is_empty() {
        near[below(rng, near.len() as u64) as usize]
    } else if !promoting.is_empty() && !one_in(rng, 4) {
        promoting[below(rng, promoting.len() as u64) as usize]
    } else {
        &points[below(rng, points.len() as u64) as usize]
    };
    let when = if below(rng, 5) < 3 { When::Before } else { When::After };
    let crash = OpCrash { when, path: p.path.clone(), nth: p.nth, keep: None };
    Some(StorageFault { node: menu.node.clone(), fault: NodeFault::Crash(crash) })
}

/// An EIO or ENOSPC on one of `menu`'s writes or fsyncs.
fn node_error(rng: &mut ChaCha20Rng, menu: &NodeMenu) -> Option<StorageFault> {
    let ops: Vec<&IoCount> = menu.io_ops.iter().filter(|c| matches!(c.op, IoOp::Write | IoOp::Fsync)).collect();
    if ops.is_empty() {
        return None;
    }
    let c = ops[below(rng, ops.len() as u64) as usize];
    let errno = if c.op == IoOp::Write && one_in(rng, 3) { IoErrno::Enospc } else { IoErrno::Eio };
    let rule = ErrorRule::at(c.op, &c.path, 1 + below(rng, c.count.max(1)), errno);
    Some(StorageFault { node: menu.node.clone(), fault: NodeFault::Error(rule) })
}

/// Changes one thing of a cluster input's storage faults, drawn from the nodes' menus: a
/// crash at a durable operation (eight times in ten, aimed near `focus` half the time), an
/// I/O error (one in ten), or the removal of one; a quarter of the time it starts over from
/// none. Crash points come first: they are what a cluster cannot reach otherwise (a kill lands
/// on a whole millisecond, an fsync takes one microsecond). Nothing is drawn when no
/// node [offers](NodeMenu::offers) anything.
pub fn mutate_storage(rng: &mut ChaCha20Rng, plan: &mut Vec<StorageFault>, nodes: &[NodeMenu], focus: Option<u64>) {
    let offered: Vec<&NodeMenu> = nodes.iter().filter(|n| n.offers()).collect();
    if offered.is_empty() {
        return;
    }
    if one_in(rng, 4) {
        plan.clear();
    }
    let menu = offered[below(rng, offered.len() as u64) as usize];
    let drawn = match below(rng, 10) {
        0..=7 => node_crash(rng, menu, focus).or_else(|| node_error(rng, menu)),
        8 => node_error(rng, menu).or_else(|| node_crash(rng, menu, focus)),
        _ => {
            if !plan.is_empty() {
                let i = below(rng, plan.len() as u64) as usize;
                plan.remove(i);
            }
            None
        }
    };
    if let Some(f) = drawn {
        if let Some(i) = plan.iter().position(|p| *p == f) {
            plan.remove(i);
        } else if plan.len() >= MAX_STORAGE {
            let i = below(rng, plan.len() as u64) as usize;
            plan[i] = f;
        } else {
            plan.push(f);
        }
    }
}

/// Storage faults drawn from scratch for a fresh cluster round: half the time one, from the
/// nodes' menus; none, and no draw, when no node [offers](NodeMenu::offers) anything. (Every
/// pass of the loop picks a node that offers something, and nine passes in ten draw a fault
/// from it, so it ends.)
pub fn random_storage(rng: &mut ChaCha20Rng, nodes: &[NodeMenu]) -> Vec<StorageFault> {
    let mut plan = Vec::new();
    if nodes.iter().any(NodeMenu::offers) && one_in(rng, 2) {
        while plan.is_empty() {
            mutate_storage(rng, &mut plan, nodes, None);
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_chacha::rand_core::SeedableRng;

    fn ops() -> Vec<IoCount> {
        vec![
            IoCount { op: IoOp::Write, path: "/data/wal".into(), count: 4 },
            IoCount { op: IoOp::Fsync, path: "/data/wal".into(), count: 2 },
        ]
    }

    #[test]
    fn the_frontier_holds_every_single_fault_once_kinds_in_turn_in_an_order_of_each_seed() {
        let io = ops();
        let processes = vec![("worker".to_string(), 2)];
        let menu = Menu { durable_writes: 3, io_ops: &io, pending_at_crash: None, processes: &processes };
        let f = frontier(&menu, 1);
        // 7 crash points (before and after 3 writes, at exit), 4 writes × EIO and ENOSPC plus 2
        // fsyncs × EIO, 2 durable operations × before and after for the kill, 2 failed fsyncs
        // × 4 crashes after them.
        assert_eq!(f.len(), 7 + 10 + 4 + 8);
        let mut keys: Vec<String> = f.iter().map(|c| format!("{c:?}")).collect();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), f.len(), "a single fault came twice");
        // The kinds in turn while each lasts: crash, error, kill, failed sync then crash.
        let kind = |c: &FaultConfig| match (c.crashes(), c.errors.is_empty()) {
            (true, true) => 'c',
            (true, false) => 's',
            (false, false) => 'e',
            _ => 'k',
        };
        let kinds: String = f.iter().map(kind).collect();
        assert_eq!(&kinds[..14], "cekscekcekscek", "a failed sync then a crash every other turn");
        assert!(f.iter().all(|c| c.crash_state.is_none() && !c.reordered_writes));
        // The same seed, the same order; another seed, another.
        assert_eq!(format!("{:?}", frontier(&menu, 1)), format!("{f:?}"));
        assert_ne!(format!("{:?}", frontier(&menu, 2)), format!("{f:?}"));
        // A round names a crash's state, leaves an error as it is.
        let mut r = ChaCha20Rng::seed_from_u64(3);
        let crash = f.iter().find(|c| c.crashes()).unwrap().clone();
        assert!(frontier_round(&mut r, crash).crash_state.is_some());
        let error = f.iter().find(|c| !c.errors.is_empty()).unwrap().clone();
        assert_eq!(frontier_round(&mut r, error.clone()), error);
        // Bounded: a run of a million writes gives the first 64 of each, and at most 1024 in all.
        let many = vec![
            IoCount { op: IoOp::Write, path: "/a".into(), count: 1_000_000 },
            IoCount { op: IoOp::Write, path: "/b".into(), count: 1_000_000 },
            IoCount { op: IoOp::Fsync, path: "/a".into(), count: 1_000_000 },
        ];
        let big = Menu { durable_writes: 1_000_000, io_ops: &many, pending_at_crash: None, processes: &[] };
        let f = frontier(&big, 1);
        assert_eq!(f.len(), MAX_FRONTIER);
        assert!(f.iter().flat_map(|c| &c.errors).all(|e| e.nth <= FRONTIER_PER_OPERATION));
    }

    #[test]
    fn a_failed_sync_is_followed_by_crashes_nearest_first_in_the_frontier_and_the_hunt() {
        let f = sync_then_crash("/data/pages", 3);
        let words: Vec<String> = f
            .iter()
            .map(|c| {
                let crash = c.crash_at.first().map_or("at exit".to_string(), OpCrash::point);
                format!("{}, then {crash}", c.errors[0].describe())
            })
            .collect();
        assert_eq!(
            words,
            [
                "EIO on fsync #3 of /data/pages, then before durable op #3 on /data/pages",
                "EIO on fsync #3 of /data/pages, then after durable op #3 on /data/pages",
                "EIO on fsync #3 of /data/pages, then after durable op #4 on /data/pages",
                "EIO on fsync #3 of /data/pages, then at exit",
            ]
        );
        assert!(f[3].crash_at_exit && f.iter().all(|c| c.crashes()));
        // Bounded per path in the frontier, and in all in the hunt.
        let many = vec![IoCount { op: IoOp::Fsync, path: "/a".into(), count: 1000 }];
        let menu = Menu { durable_writes: 0, io_ops: &many, pending_at_crash: None, processes: &[] };
        let synced = frontier(&menu, 1).into_iter().filter(|c| c.crashes() && !c.errors.is_empty()).count();
        assert_eq!(synced as u64, 4 * FRONTIER_FAILED_SYNCS);
        let io = ops();
        let menu = Menu { durable_writes: 3, io_ops: &io, pending_at_crash: None, processes: &[] };
        let hunted: Vec<_> =
            hunt(&menu, usize::MAX).into_iter().filter(|c| c.crashes() && !c.errors.is_empty()).collect();
        assert_eq!(hunted.len(), 2 * 2, "each of the 2 fsyncs, then after the next two and at exit");
        assert!(hunted.iter().all(|c| c.crash_at_exit || c.crash_at[0].when == When::After));
    }

    #[test]
    fn a_failed_sync_is_followed_only_when_the_life_went_on_past_it() {
        let eio = |path: &str, nth| FaultConfig {
            errors: vec![ErrorRule::at(IoOp::Fsync, path, nth, IoErrno::Eio)],
            ..Default::default()
        };
        let syncs = |n| vec![IoCount { op: IoOp::Fsync, path: "/d".into(), count: n }];
        let on = |path: &str, nth, went| vec![(path.to_string(), nth, went)];
        // It synced the file again after the failed 3rd sync: a retry, whatever its status.
        assert_eq!(after_failed_syncs(&eio("/d", 3), &syncs(5), false), on("/d", 3, true));
        // It stopped at the failure: a fail-stop, nothing built on it.
        assert_eq!(after_failed_syncs(&eio("/d", 3), &syncs(3), false), on("/d", 3, false));
        // It reached the failure, never synced again, and ended well: it went on.
        assert_eq!(after_failed_syncs(&eio("/d", 3), &syncs(3), true), on("/d", 3, true));
        // It never reached the placed sync: the error did not strike, nothing is said.
        assert!(after_failed_syncs(&eio("/d", 3), &syncs(2), true).is_empty());
        assert!(after_failed_syncs(&eio("/e", 1), &syncs(9), true).is_empty(), "another path's syncs");
        // A plan that already crashes, an ENOSPC, a write error, every sync: nothing is said.
        let crashing = FaultConfig { crash_at_exit: true, ..eio("/d", 3) };
        assert!(after_failed_syncs(&crashing, &syncs(5), true).is_empty());
        let other =
            |op, errno, nth| FaultConfig { errors: vec![ErrorRule::at(op, "/d", nth, errno)], ..Default::default() };
        assert!(after_failed_syncs(&other(IoOp::Fsync, IoErrno::Enospc, 3), &syncs(5), true).is_empty());
        assert!(after_failed_syncs(&other(IoOp::Write, IoErrno::Eio, 3), &syncs(5), true).is_empty());
        assert!(after_failed_syncs(&other(IoOp::Fsync, IoErrno::Eio, 0), &syncs(5), true).is_empty());
        // The compositions name the failed sync they place; a lone error or a lone crash none.
        assert!(sync_then_crash("/d", 3).iter().all(|f| composed_sync(f) == Some(("/d", 3))));
        assert_eq!(composed_sync(&eio("/d", 3)), None);
        assert_eq!(composed_sync(&FaultConfig { crash_at_exit: true, ..Default::default() }), None);
    }

    #[test]
    fn modulo_below_keeps_the_modulo_draw_and_stays_in_range() {
        // Small n: the values today's `% n` gave, and a fair spread.
        for n in [1u64, 2, 3, 7, 8, 1000] {
            let mut a = ChaCha20Rng::seed_from_u64(n);
            let mut b = ChaCha20Rng::seed_from_u64(n);
            let mut seen = vec![0u32; n as usize];
            for _ in 0..20_000 {
                let x = modulo_below(&mut a, n);
                assert_eq!(x, b.next_u64() % n, "outside the rejected zone it is the modulo draw");
                seen[x as usize] += 1;
            }
            let mean = 20_000 / n as u32;
            if n <= 8 {
                assert!(seen.iter().all(|&c| c.abs_diff(mean) < mean / 5), "n {n}: {seen:?}");
            }
        }
        // n = 1 still takes a draw, as `% 1` did.
        let (mut a, mut b) = (ChaCha20Rng::seed_from_u64(9), ChaCha20Rng::seed_from_u64(9));
        assert_eq!(modulo_below(&mut a, 1), 0);
        b.next_u64();
        assert_eq!(a.next_u64(), b.next_u64());
        // Huge n: with n = 2^63 + 1 the zone is 2^63 - 1 values, nearly half of all draws.
        for n in [(1u64 << 63) + 1, (1 << 63) + (1 << 62), u64::MAX, 1 << 63] {
            let zone = n.wrapping_neg() % n;
            let mut rng = ChaCha20Rng::seed_from_u64(n);
            let mut plain = ChaCha20Rng::seed_from_u64(n);
            let mut draws = Vec::new();
            for _ in 0..2000 {
                let x = modulo_below(&mut rng, n);
                assert!(x < n);
                // The same value as the first draw of the plain stream outside the zone.
                let raw = loop {
                    let r = plain.next_u64();
                    if r <= u64::MAX - zone {
                        break r;
                    }
                };
                assert_eq!(x, raw % n);
                draws.push(x);
            }
            if n == (1 << 63) + (1 << 62) {
                // Unbiased: the values below 2^62 (which `%` alone hit with probability 1/2)
                // come with their share of 0..n, one third.
                let low = draws.iter().filter(|&&x| x < 1 << 62).count();
                assert!((567..767).contains(&low), "{low} of 2000 low draws");
            }
        }
    }

    #[test]
    fn modulo_below_rejects_exactly_the_top_zone() {
        let scripted = |n: u64, words: &[u64]| {
            let mut words = words.iter().copied();
            modulo_below_from(n, || words.next().expect("a word left"))
        };
        // n = 3: 2^64 mod 3 = 1, so u64::MAX alone is rejected.
        assert_eq!(scripted(3, &[u64::MAX, u64::MAX, u64::MAX - 1]), (u64::MAX - 1) % 3);
        assert_eq!(scripted(3, &[7]), 1);
        // n = 2^63 + 1: the top 2^63 - 1 values are rejected; the first kept is 2^63 + 1 - 1.
        let n = (1u64 << 63) + 1;
        assert_eq!(scripted(n, &[u64::MAX, 1 << 63 | 1, 1 << 63]), 1 << 63);
        // A power of two rejects nothing.
        assert_eq!(scripted(8, &[u64::MAX]), 7);
        assert_eq!(scripted(1, &[u64::MAX]), 0);
        // The accepted range is a whole number of rounds of 0..n, the zone shorter than one.
        for n in [1u64, 2, 3, 5, 6, 7, 1000, (1 << 63) + 1, u64::MAX] {
            let zone = n.wrapping_neg() % n;
            assert_eq!((u128::from(u64::MAX - zone) + 1) % u128::from(n), 0, "n {n}");
            assert!(zone < n);
            let top = u64::MAX - zone;
            assert_eq!(scripted(n, &[top]), top % n, "the top of the accepted range is kept");
            if zone > 0 {
                assert_eq!(scripted(n, &[top + 1, 5]), 5 % n, "the bottom of the zone is rejected");
            }
        }
    }

    #[test]
    fn below_is_uniform_enough_and_in_range() {
        let mut rng = ChaCha20Rng::seed_from_u64(1);
        let mut seen = [0u32; 3];
        for _ in 0..3000 {
            seen[below(&mut rng, 3) as usize] += 1;
        }
        assert!(seen.iter().all(|n| (900..1100).contains(n)), "{seen:?}");
        assert_eq!(below(&mut rng, 1), 0);
        assert_eq!(below(&mut rng, 0), 0);
    }

    #[test]
    fn a_program_with_other_processes_gets_kills_of_them_and_one_without_gets_none() {
        let ops = ops();
        let processes = [("worker".to_string(), 3)];
        let menu = Menu { durable_writes: 5, io_ops: &ops, pending_at_crash: None, processes: &processes };
        let mut rng = ChaCha20Rng::seed_from_u64(3);
        let (mut before, mut after) = (std::collections::BTreeSet::new(), std::collections::BTreeSet::new());
        let mut f = FaultConfig::default();
        for _ in 0..600 {
            mutate(&mut rng, &mut f, &menu);
            for k in &f.kill_process {
                assert_eq!(k.name, "worker");
                match k.when {
                    When::Before => before.insert(k.nth),
                    When::After => after.insert(k.nth),
                };
            }
        }
        let all: std::collections::BTreeSet<u64> = (1..=3).collect();
        assert_eq!((before, after), (all.clone(), all), "every durable op of the worker, both sides");
        // Alone, the draws are the ones a program of one process always made.
        let alone = Menu { processes: &[], ..menu };
        let (mut a, mut b) = (ChaCha20Rng::seed_from_u64(9), FaultConfig::default());
        for _ in 0..200 {
            mutate(&mut a, &mut b, &alone);
            assert!(b.kill_process.is_empty());
        }
    }

    #[test]
    fn mutations_reach_every_kind_of_fault() {
        let ops = ops();
        let menu = Menu { durable_writes: 5, io_ops: &ops, pending_at_crash: Some(3), processes: &[] };
        let mut rng = ChaCha20Rng::seed_from_u64(7);
        let (mut before, mut after, mut exit, mut state, mut eio, mut enospc, mut fsync) =
            (false, false, false, false, false, false, false);
        let mut f = FaultConfig::default();
        for _ in 0..2000 {
            mutate(&mut rng, &mut f, &menu);
            before |= f.crash_before_durable_write.is_some_and(|k| (1..=5).contains(&k));
            after |= f.crash_after_durable_write.is_some_and(|k| (1..=5).contains(&k));
            exit |= f.crash_at_exit;
            state |= f.crash_state.is_some();
            for r in &f.errors {
                assert!(r.nth >= 1 && r.nth <= 4 && r.path == "/data/wal");
                eio |= r.errno == IoErrno::Eio && r.op == IoOp::Write;
                enospc |= r.errno == IoErrno::Enospc;
                fsync |= r.op == IoOp::Fsync;
            }
            assert!(f.errors.len() <= MAX_ERRORS);
        }
        assert!(before && after && exit && state && eio && enospc && fsync);
    }

    #[test]
    fn the_baseline_draws_from_the_same_menu() {
        let ops = ops();
        let menu = Menu { durable_writes: 2, io_ops: &ops, pending_at_crash: None, processes: &[] };
        let mut rng = ChaCha20Rng::seed_from_u64(3);
        let drawn: Vec<FaultConfig> = (0..400).map(|_| random(&mut rng, &menu)).collect();
        assert!(drawn.iter().any(|f| f.crash_before_durable_write.is_some()));
        assert!(drawn.iter().any(|f| f.crash_at_exit));
        assert!(drawn.iter().any(|f| f.errors.iter().any(|r| r.op == IoOp::Fsync)));
    }

    fn server_menu() -> NodeMenu {
        let point = |nth, at, promotes| DurablePoint { path: "/data/wal".into(), nth, at, promotes };
        NodeMenu {
            node: "server".into(),
            durable: vec![point(1, 10, true), point(2, 20, false), point(3, 30, true), point(4, 40, true)],
            io_ops: vec![
                IoCount { op: IoOp::Write, path: "/data/wal".into(), count: 6 },
                IoCount { op: IoOp::Fsync, path: "/data/wal".into(), count: 4 },
                IoCount { op: IoOp::Read, path: "/data/wal".into(), count: 1 },
            ],
        }
    }

    #[test]
    fn cluster_mutations_reach_crashes_before_and_after_and_errors_on_writes_and_fsyncs() {
        let nodes = [server_menu(), NodeMenu { node: "client".into(), durable: vec![], io_ops: vec![] }];
        let mut rng = ChaCha20Rng::seed_from_u64(5);
        let mut plan = Vec::new();
        let (mut before, mut after, mut eio_write, mut enospc, mut eio_fsync) = (false, false, false, false, false);
        for _ in 0..2000 {
            mutate_storage(&mut rng, &mut plan, &nodes, Some(25));
            assert!(plan.len() <= MAX_STORAGE);
            for f in &plan {
                assert_eq!(f.node, "server", "the client offers nothing");
                match &f.fault {
                    NodeFault::Crash(c) => {
                        assert!((1..=4).contains(&c.nth) && c.path == "/data/wal");
                        before |= c.when == When::Before;
                        after |= c.when == When::After;
                    }
                    NodeFault::Kill(_) => panic!("no process to kill"),
                    NodeFault::Error(r) => {
                        assert_ne!(r.op, IoOp::Read, "errors go on writes and fsyncs");
                        assert!(r.nth >= 1 && r.nth <= 6);
                        eio_write |= r.op == IoOp::Write && r.errno == IoErrno::Eio;
                        enospc |= r.errno == IoErrno::Enospc;
                        eio_fsync |= r.op == IoOp::Fsync;
                    }
                }
            }
        }
        assert!(before && after && eio_write && enospc && eio_fsync);
        // Aimed at the focus: the points before decision 25 come up far more often than their
        // share.
        let mut rng = ChaCha20Rng::seed_from_u64(6);
        let mut near = 0;
        for _ in 0..1000 {
            if let Some(StorageFault { fault: NodeFault::Crash(c), .. }) = node_crash(&mut rng, &nodes[0], Some(25)) {
                near += u32::from(c.nth <= 2);
            }
        }
        assert!(near > 550, "{near} of 1000 at or before the focus");
        // Nothing offered: nothing drawn, and no draw taken.
        let mut a = ChaCha20Rng::seed_from_u64(7);
        let b = a.clone();
        let mut plan = Vec::new();
        mutate_storage(&mut a, &mut plan, &nodes[1..], None);
        assert!(plan.is_empty() && random_storage(&mut a, &[]).is_empty());
        assert_eq!(a, b);
    }

    #[test]
    fn a_node_that_only_read_files_offers_nothing() {
        // A dynamically linked `/bin/false`: it read its libraries, wrote nothing, made nothing
        // durable. `random_storage` once looped forever on it, waiting for a fault no draw could
        // give; the draws run on a thread of their own so that a regression fails here.
        let reader = NodeMenu {
            node: "a".into(),
            durable: vec![],
            io_ops: vec![
                IoCount { op: IoOp::Read, path: "/lib/x86_64-linux-gnu/libc.so.6".into(), count: 3 },
                IoCount { op: IoOp::Create, path: "/tmp/x".into(), count: 1 },
            ],
        };
        assert!(!reader.offers() && server_menu().offers());
        let (tx, rx) = std::sync::mpsc::channel();
        let nodes = vec![reader];
        std::thread::spawn(move || {
            for seed in 0..64 {
                let mut a = ChaCha20Rng::seed_from_u64(seed);
                let b = a.clone();
                let fresh = random_storage(&mut a, &nodes);
                let mut plan = Vec::new();
                mutate_storage(&mut a, &mut plan, &nodes, None);
                // Nothing drawn, and no draw taken.
                tx.send(fresh.is_empty() && plan.is_empty() && a == b).unwrap();
            }
        });
        for seed in 0..64 {
            let ok = rx.recv_timeout(std::time::Duration::from_secs(20)).expect("the storage draws never ended");
            assert!(ok, "seed {seed}: a storage fault drawn from a node that offers none");
        }
    }

    #[test]
    fn the_hunt_tries_each_single_fault_once() {
        let ops = ops();
        let menu = Menu { durable_writes: 2, io_ops: &ops, pending_at_crash: None, processes: &[] };
        let all = hunt(&menu, 1000);
        // 2 × (after, before) + exit + writes 4 × (EIO, ENOSPC) + fsyncs 2 × EIO, then each of
        // the 2 fsyncs failed and followed by 2 crashes.
        assert_eq!(all.len(), 5 + 8 + 2 + 4);
        let mut unique = all.clone();
        unique.sort_by_key(|f| format!("{f:?}"));
        unique.dedup();
        assert_eq!(unique.len(), all.len());
        assert_eq!(hunt(&menu, 3).len(), 3);
    }
}
