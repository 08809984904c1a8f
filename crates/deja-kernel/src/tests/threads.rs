//! Threads, blocking futexes and the scheduler.

use super::*;
use crate::task::threads::BLOCKED_RETURN;

/// glibc's `pthread_create` clone flags.
pub(super) const GLIBC_FLAGS: u64 = 0x3d0f00;
const BLOCKED: i64 = BLOCKED_RETURN as i64;
const ETIMEDOUT: i64 = -110;
const EAGAIN: i64 = -11;

/// Boots and creates thread 2 (clone with glibc's flags), forcing thread 1 to keep running.
/// Returns the scratch buffer: `buf` = parent_tid, `buf + 4` = child_tid (the join word).
pub(super) fn two_threads() -> (Kernel, FakeMemory, u64) {
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 4096);
    override_next(&mut k, vec![0]);
    let tid = sc(&mut k, &mut m, "clone", &[GLIBC_FLAGS, buf + 0x800, buf, buf + 4, 0x7000_0000]);
    assert_eq!(tid, 2);
    assert_eq!(k.current_tid(), 1);
    (k, m, buf)
}

fn u32_at(k: &Kernel, m: &mut FakeMemory, a: u64) -> u32 {
    u32::from_le_bytes(peek(k, m, a, 4).try_into().unwrap())
}

#[test]
fn clone_writes_tids_and_spawns() {
    let (mut k, mut m, buf) = two_threads();
    assert_eq!(u32_at(&k, &mut m, buf), 2, "CLONE_PARENT_SETTID");
    assert_eq!(
        k.take_spawned(),
        vec![SpawnedThread { tid: 2, stack: buf + 0x800, tls: Some(0x7000_0000), entry: None }]
    );
    assert!(k.take_spawned().is_empty());
    assert_eq!(k.thread_fs_base(2), 0x7000_0000);
    assert_eq!(k.thread_fs_base(1), 0);
    let d = k.decisions().last().unwrap().clone();
    assert_eq!((d.options, d.choice, d.overridden), (2, 0, true));
    assert!(matches!(d.point, DecisionPoint::Schedule { .. }), "{}", d.point);
    // A second thread: tid 3; steer to it.
    override_next(&mut k, vec![2]);
    assert_eq!(sc(&mut k, &mut m, "clone", &[GLIBC_FLAGS, buf + 0x900, buf + 8, buf + 12, 0x7000_1000]), 3);
    assert_eq!(k.current_tid(), 3);
    assert_eq!(k.take_spawned()[0].tid, 3);
    assert_eq!(k.fs_base(), 0x7000_1000, "fs_base is the current thread's");
    assert_eq!(k.decisions().last().unwrap().options, 3);
    override_next(&mut k, vec![0]);
    assert_eq!(sc(&mut k, &mut m, "gettid", &[]), 3);
    assert_eq!(k.current_tid(), 1);
    assert_eq!(k.fs_base(), 0);
    // Processes sharing fds (CLONE_FILES) or the working directory (CLONE_FS) are not
    // modelled; bad combinations are EINVAL / EPERM / EFAULT.
    assert_eq!(sc(&mut k, &mut m, "clone", &[0x400 | 17, 0, 0, 0, 0]), -38);
    assert_eq!(sc(&mut k, &mut m, "clone", &[0x200 | 17, 0, 0, 0, 0]), -38);
    assert_eq!(sc(&mut k, &mut m, "clone", &[0x10100, 0, 0, 0, 0]), EINVAL, "THREAD without SIGHAND");
    assert_eq!(sc(&mut k, &mut m, "clone", &[GLIBC_FLAGS, 0, buf, buf, 1 << 63]), -1);
    assert!(k.take_spawned().is_empty(), "nothing created by failed clones");
    override_next(&mut k, vec![0]);
    assert_eq!(sc(&mut k, &mut m, "clone", &[GLIBC_FLAGS, 0, 0x10, 0x10, 0]), 4, "unwritable tids: ignored");
    let r = k.finish(&m, ExitStatus::Exited { code: 0 });
    assert_eq!(r.unsupported.get("clone"), Some(&2));
}

#[test]
fn clone3_creates_threads() {
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 4096);
    let args = [GLIBC_FLAGS, 0, buf + 4, buf, 0, buf + 0x400, 0x400, 0x6000_0000];
    let bytes: Vec<u8> = args.iter().flat_map(|w| w.to_le_bytes()).collect();
    poke(&k, &mut m, buf + 0x100, &bytes);
    override_next(&mut k, vec![0]);
    assert_eq!(sc(&mut k, &mut m, "clone3", &[buf + 0x100, 64]), 2);
    assert_eq!(
        k.take_spawned(),
        vec![SpawnedThread { tid: 2, stack: buf + 0x800, tls: Some(0x6000_0000), entry: None }]
    );
    assert_eq!(sc(&mut k, &mut m, "clone3", &[buf + 0x100, 8]), EINVAL);
    assert_eq!(sc(&mut k, &mut m, "clone3", &[buf + 0x100, 8192]), -7);
    assert_eq!(sc(&mut k, &mut m, "clone3", &[0x10, 64]), EFAULT);
    let fork: Vec<u8> = [0x200u64, 0, 0, 0, 17, 0, 0, 0].iter().flat_map(|w| w.to_le_bytes()).collect();
    poke(&k, &mut m, buf + 0x200, &fork);
    assert_eq!(sc(&mut k, &mut m, "clone3", &[buf + 0x200, 64]), -38);
}

#[test]
fn futex_wait_wake_between_threads() {
    let (mut k, mut m, buf) = two_threads();
    let word = buf + 0x40;
    poke(&k, &mut m, word, &5u32.to_le_bytes());
    override_next(&mut k, vec![0]);
    assert_eq!(sc(&mut k, &mut m, "futex", &[word, 128, 6, 0]), EAGAIN, "mismatch: no block");
    assert_eq!(k.current_tid(), 1);
    // Thread 1 waits: thread 2 is the only runnable one, no decision.
    let n = k.decision_count();
    assert_eq!(sc(&mut k, &mut m, "futex", &[word, 128, 5, 0]), BLOCKED);
    assert_eq!(k.current_tid(), 2);
    assert_eq!(k.decision_count(), n);
    assert!(k.take_wakeup_returns().is_empty());
    assert_eq!(sc(&mut k, &mut m, "gettid", &[]), 2);
    assert_eq!(k.decision_count(), n, "one runnable thread: no decision");
    poke(&k, &mut m, word, &6u32.to_le_bytes());
    override_next(&mut k, vec![0]);
    assert_eq!(sc(&mut k, &mut m, "futex", &[word, 129, 1]), 1, "woke one");
    assert_eq!(k.current_tid(), 1, "overridden pick");
    assert_eq!(k.take_wakeup_returns(), vec![(1, 0)]);
    assert_eq!(k.decision_count(), n + 1);
    assert_eq!(sc(&mut k, &mut m, "futex", &[word, 129, 1]), 0, "nobody waits");
}

#[test]
fn wake_is_fifo_and_requeue_moves() {
    let (mut k, mut m, buf) = two_threads();
    override_next(&mut k, vec![0]);
    assert_eq!(sc(&mut k, &mut m, "clone", &[GLIBC_FLAGS, 0, 0, 0, 0]), 3);
    let (a, b) = (buf + 0x40, buf + 0x80);
    // 1 waits on a, then 2 (steered), then 3 wakes 1 of them: thread 1 (first in).
    override_next(&mut k, vec![0]);
    assert_eq!(sc(&mut k, &mut m, "futex", &[a, 128, 0, 0]), BLOCKED);
    assert_eq!(k.current_tid(), 2);
    assert_eq!(sc(&mut k, &mut m, "futex", &[a, 128, 0, 0]), BLOCKED);
    assert_eq!(k.current_tid(), 3);
    assert_eq!(sc(&mut k, &mut m, "futex", &[a, 129, 1]), 1);
    assert_eq!(k.take_wakeup_returns(), vec![(1, 0)]);
    // Requeue thread 2 onto b, then WAKE_OP on (b, a): op SET 1 on a, compare old == 0.
    override_next(&mut k, vec![1]);
    assert_eq!(sc(&mut k, &mut m, "futex", &[a, 132, 0, 1, b, 0]), 1, "cmp_requeue moved one");
    assert_eq!(k.current_tid(), 3);
    assert_eq!(sc(&mut k, &mut m, "futex", &[a, 132, 0, 1, b, 9]), EAGAIN);
    assert_eq!(sc(&mut k, &mut m, "futex", &[a, 129, 1]), 0, "nobody left on a");
    override_next(&mut k, vec![2, 2]);
    assert_eq!(sc(&mut k, &mut m, "futex", &[0x100 + buf, 133, 1, 1, buf + 0xc0, 0x0000_1000]), 0, "nobody waits");
    assert_eq!(u32_at(&k, &mut m, buf + 0xc0), 1, "FUTEX_OP_SET");
    assert_eq!(sc(&mut k, &mut m, "futex", &[b, 133, 1, 1, buf + 0xc0, 0x0000_1000]), 1);
    assert_eq!(k.take_wakeup_returns(), vec![(2, 0)]);
}

#[test]
fn timeouts_advance_the_virtual_clock() {
    let (mut k, mut m, buf) = two_threads();
    let word = buf + 0x40;
    poke(&k, &mut m, buf + 0x60, &[0u64.to_le_bytes(), 5_000_000u64.to_le_bytes()].concat());
    // Thread 1 waits 5 ms; thread 2 waits forever: the clock jumps, thread 1 times out.
    assert_eq!(sc(&mut k, &mut m, "futex", &[word, 128, 0, buf + 0x60]), BLOCKED);
    let t0 = k.virtual_time_ns();
    assert_eq!(k.current_tid(), 2);
    assert_eq!(sc(&mut k, &mut m, "futex", &[word, 128, 0, 0]), BLOCKED);
    assert_eq!(k.current_tid(), 1);
    assert_eq!(k.take_wakeup_returns(), vec![(1, ETIMEDOUT as u64)]);
    assert_eq!(k.virtual_time_ns(), t0 + 5_000_000);
    // A sleep with another runnable thread... thread 2 is blocked: the clock jumps too.
    let t1 = k.virtual_time_ns();
    assert_eq!(sc(&mut k, &mut m, "nanosleep", &[buf + 0x60, 0]), 0);
    assert_eq!(k.virtual_time_ns(), t1 + 1_000 + 5_000_000);
    // Wake 2; then 1 sleeps while 2 runs: the sleeper waits for the clock.
    override_next(&mut k, vec![0]);
    assert_eq!(sc(&mut k, &mut m, "futex", &[word, 129, 1]), 1);
    assert_eq!(k.take_wakeup_returns(), vec![(2, 0)]);
    let t2 = k.virtual_time_ns();
    assert_eq!(sc(&mut k, &mut m, "nanosleep", &[buf + 0x60, 0]), BLOCKED);
    assert_eq!(k.current_tid(), 2);
    assert_eq!(k.virtual_time_ns(), t2 + 1_000, "no jump while thread 2 runs");
    assert_eq!(sc(&mut k, &mut m, "getpid", &[]), 1);
    // Thread 2 waits with an absolute deadline beyond the sleeper's: the sleeper wakes first.
    let abs = k.virtual_time_ns() + 10_000_000;
    poke(
        &k,
        &mut m,
        buf + 0x70,
        &[abs / 1_000_000_000, abs % 1_000_000_000].iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<_>>(),
    );
    assert_eq!(sc(&mut k, &mut m, "futex", &[word, 137, 0, buf + 0x70, 0, u64::from(u32::MAX)]), BLOCKED);
    assert_eq!(k.current_tid(), 1);
    assert_eq!(k.take_wakeup_returns(), vec![(1, 0)]);
    assert_eq!(k.virtual_time_ns(), t2 + 1_000 + 5_000_000);
    // Thread 1 exits (not last): thread 2's deadline is all that is left.
    assert_eq!(sc(&mut k, &mut m, "exit", &[0]), BLOCKED);
    assert_eq!(k.current_tid(), 2);
    assert_eq!(k.take_wakeup_returns(), vec![(2, ETIMEDOUT as u64)]);
    assert_eq!(k.virtual_time_ns(), abs);
}

#[test]
fn child_cleartid_wakes_the_joiner() {
    let (mut k, mut m, buf) = two_threads();
    let join = buf + 4;
    poke(&k, &mut m, join, &2u32.to_le_bytes());
    assert_eq!(sc(&mut k, &mut m, "futex", &[join, 0, 2, 0]), BLOCKED, "pthread_join");
    assert_eq!(k.current_tid(), 2);
    assert_eq!(sc(&mut k, &mut m, "exit", &[0]), BLOCKED);
    assert_eq!(k.current_tid(), 1);
    assert_eq!(u32_at(&k, &mut m, join), 0);
    assert_eq!(k.take_wakeup_returns(), vec![(1, 0)]);
    assert_eq!(sc(&mut k, &mut m, "tgkill", &[1, 2, 0]), -3, "thread 2 is gone");
    assert_eq!(sc_exit(&mut k, &mut m, "exit", &[4]), SyscallOutcome::Exit(ExitStatus::Exited { code: 4 }));
}

#[test]
fn deadlock_and_tgkill_end_the_program() {
    let (mut k, mut m, buf) = two_threads();
    assert_eq!(sc(&mut k, &mut m, "futex", &[buf + 0x40, 128, 0, 0]), BLOCKED);
    match sc_exit(&mut k, &mut m, "futex", &[buf + 0x40, 128, 0, 0]) {
        SyscallOutcome::Exit(ExitStatus::Signaled { signal: 9, fault: Some(f), .. }) => {
            assert!(f.description.starts_with("deadlock: every thread is blocked"), "{}", f.description);
        }
        o => panic!("{o:?}"),
    }
    let (mut k, mut m, _) = two_threads();
    assert_eq!(sc(&mut k, &mut m, "tgkill", &[1, 3, 15]), -3);
    match sc_exit(&mut k, &mut m, "tgkill", &[1, 2, 15]) {
        SyscallOutcome::Exit(ExitStatus::Signaled { signal: 15, .. }) => {}
        o => panic!("{o:?}"),
    }
}

#[test]
fn per_thread_state() {
    let (mut k, mut m, buf) = two_threads();
    poke(&k, &mut m, buf + 0x40, &u64::MAX.to_le_bytes());
    override_next(&mut k, vec![0, 0, 1, 1, 1, 0, 0]);
    assert_eq!(sc(&mut k, &mut m, "rt_sigprocmask", &[0, buf + 0x40, 0, 8]), 0);
    assert_eq!(sc(&mut k, &mut m, "set_tid_address", &[buf + 0x100]), 1);
    assert_eq!(sc(&mut k, &mut m, "arch_prctl", &[0x1001, 0x99]), 0);
    assert_eq!(k.current_tid(), 2);
    assert_eq!(sc(&mut k, &mut m, "rt_sigprocmask", &[0, 0, buf + 0x48, 8]), 0);
    assert_eq!(peek(&k, &mut m, buf + 0x48, 8), [0; 8], "thread 2 keeps its own mask");
    assert_eq!(k.gs_base(), 0, "thread 1's gs is its own");
    assert_eq!(sc(&mut k, &mut m, "set_tid_address", &[0]), 2);
    assert_eq!(sc(&mut k, &mut m, "gettid", &[]), 2);
    assert_eq!(k.current_tid(), 1);
    assert_eq!(k.gs_base(), 0x99);
    assert_eq!(sc(&mut k, &mut m, "rt_sigprocmask", &[0, 0, buf + 0x48, 8]), 0);
    assert_eq!(peek(&k, &mut m, buf + 0x48, 8), (!(1u64 << 8) & !(1 << 18)).to_le_bytes());
    assert_eq!(k.process.clear_child_tid, buf + 0x100);
}

#[test]
fn save_restore_mid_run_with_threads() {
    let (k0, m0, buf) = two_threads();
    let mut want_k = k0.clone();
    let mut wm = m0.clone();
    let want = mt_steps_range(&mut want_k, &mut wm, buf, 0, 40);
    assert!(want_k.decisions().len() > 5, "scheduling decisions were taken");
    let want_digest = want_k.clone().finish(&wm, ExitStatus::Exited { code: 0 }).digest;
    for step in [0usize, 7, 19, 24, 31, 40] {
        let mut b = k0.clone();
        let mut bm = m0.clone();
        let mut got = mt_steps_range(&mut b, &mut bm, buf, 0, step);
        let bytes = b.save();
        let mut r = Kernel::restore(&bytes).expect("restore");
        assert_eq!(r.save(), bytes);
        got.extend(mt_steps_range(&mut r, &mut bm, buf, step, 40));
        assert_eq!(got, want, "restored at step {step}");
        assert_eq!(r.decisions(), want_k.decisions());
        assert_eq!(r.finish(&bm, ExitStatus::Exited { code: 0 }).digest, want_digest);
    }
    let mut bad = k0.clone();
    bad.sched.threads.current = 99;
    assert!(Kernel::restore(&bad.save()).is_err());
    let mut bad = k0.clone();
    bad.sched.threads.wakeups.push((1, 0));
    bad.sched.threads.wakeups.push((1, 0));
    assert!(Kernel::restore(&bad.save()).is_err());
}

/// What one step observed: the caller, its return, the wakeup returns.
type Step = (u64, u64, Vec<(u64, u64)>);

/// Steps `from..to` of a multi-threaded run: threads clone, wait (with timeouts), wake, sleep
/// and exit; per step the caller, its return and the wakeup returns.
fn mt_steps_range(k: &mut Kernel, m: &mut FakeMemory, buf: u64, from: usize, to: usize) -> Vec<Step> {
    let mut seen = Vec::new();
    poke(k, m, buf + 0x60, &[0u64.to_le_bytes(), 3_000u64.to_le_bytes()].concat());
    for i in from..to {
        let tid = k.current_tid();
        let a = match (i + tid as usize) % 5 {
            0 => (nr("futex"), [buf + 0x40, 128, 0, buf + 0x60, 0, 0]),
            1 => (nr("futex"), [buf + 0x40, 129, 2, 0, 0, 0]),
            2 => (nr("nanosleep"), [buf + 0x60, 0, 0, 0, 0, 0]),
            3 if i == 23 => (nr("exit"), [0; 6]),
            _ => (nr("clone"), [GLIBC_FLAGS, 0, buf, buf + 4 * (i as u64 % 8), 0, 0]),
        };
        match k.syscall(m, a.0, a.1) {
            SyscallOutcome::Return(v) => seen.push((tid, v, k.take_wakeup_returns())),
            o => panic!("{o:?}"),
        }
        let _ = k.take_spawned();
    }
    seen
}

/// Hostile clone, clone3 and futex arguments never panic, and every state stays restorable.
#[test]
fn hostile_thread_args_never_panic() {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    for _ in 0..40 {
        let (mut k, mut m, buf) = two_threads();
        let vals = [0, 1, 2, 3, 4, 5, 7, 9, 10, 13, 128, 129, 133, 137, 256 + 9, GLIBC_FLAGS, u64::MAX, 1 << 63];
        for _ in 0..60 {
            let mut a = [0u64; 6];
            for x in a.iter_mut() {
                *x = match rng.next_u32() % 4 {
                    0 => vals[rng.next_u32() as usize % vals.len()],
                    1 => buf + u64::from(rng.next_u32() % 0x1100),
                    2 => rng.next_u64(),
                    _ => u64::from(rng.next_u32() % 64),
                };
            }
            let nrs = [56, 435, 202, 202, 202, 60, 186, 24, 234, 218, 35];
            let n = nrs[rng.next_u32() as usize % nrs.len()];
            let out = k.syscall(&mut m, n, a);
            let _ = (k.take_spawned(), k.take_wakeup_returns());
            Kernel::restore(&k.save()).expect("restorable");
            if !matches!(out, SyscallOutcome::Return(_)) {
                break;
            }
        }
    }
}
