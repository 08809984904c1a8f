//! Processes: fork, exec, wait, exit, pipes between processes, signals between processes,
//! vfork, groups, and their state saved and restored.

use super::*;
use crate::task::threads::BLOCKED_RETURN;

const ECHILD: i64 = -10;
const ESRCH: i64 = -3;

/// Boots and forks; the scheduler's decision keeps the parent (thread 1) running. Returns the
/// kernel, the memory and a scratch buffer (mapped before the fork, so in both processes).
fn forked() -> (Kernel, FakeMemory, u64) {
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 4096);
    override_next(&mut k, vec![0]);
    assert_eq!(sc(&mut k, &mut m, "fork", &[]), 2);
    assert_eq!(k.current_tid(), 1);
    assert_eq!(k.take_spawned(), vec![SpawnedThread { tid: 2, stack: 0, tls: None, entry: None }]);
    run_next(&mut k, 1);
    (k, m, buf)
}

/// Makes thread `tid` run after each of the next syscalls while the same threads are
/// runnable (the scheduler's decisions pick it).
fn run_next(k: &mut Kernel, tid: u64) {
    let runnable = k.sched.threads.runnable();
    let i = runnable.iter().position(|&t| t == tid).expect("runnable") as u64;
    override_next(k, vec![i; 64]);
}

#[test]
fn fork_gives_the_child_its_own_memory_and_ids() {
    let (mut k, mut m, buf) = forked();
    poke(&k, &mut m, buf, b"parent");
    assert_eq!(sc(&mut k, &mut m, "getpid", &[]), 1);
    assert_eq!(sc(&mut k, &mut m, "getppid", &[]), 0);
    let parent_space = m.space();
    run_next(&mut k, 2);
    assert_eq!(sc(&mut k, &mut m, "getpid", &[]), 1, "the parent's call");
    assert_eq!(k.current_tid(), 2);
    assert_ne!(m.space(), parent_space, "the child runs in its own space");
    assert_eq!(peek(&k, &mut m, buf, 4096)[..6], [0u8; 6], "the copy was taken at the fork");
    poke(&k, &mut m, buf, b"child!");
    assert_eq!(sc(&mut k, &mut m, "getpid", &[]), 2);
    assert_eq!(sc(&mut k, &mut m, "getppid", &[]), 1);
    assert_eq!(sc(&mut k, &mut m, "getpgrp", &[]), 1, "the parent's group");
    assert_eq!(sc(&mut k, &mut m, "gettid", &[]), 2);
    run_next(&mut k, 1);
    assert_eq!(sc(&mut k, &mut m, "getpid", &[]), 2, "the child's call");
    assert_eq!(m.space(), parent_space);
    assert_eq!(&peek(&k, &mut m, buf, 6)[..], b"parent");
}

#[test]
fn a_child_that_exits_is_reaped_with_its_status_and_signals_its_parent() {
    let (mut k, mut m, buf) = forked();
    assert_eq!(sc(&mut k, &mut m, "wait4", &[u64::MAX, buf, 1, 0]), 0, "WNOHANG: still running");
    assert_eq!(sc(&mut k, &mut m, "wait4", &[7, buf, 1, 0]), ECHILD);
    // The parent waits; the child runs and exits with 3.
    assert_eq!(sc(&mut k, &mut m, "wait4", &[u64::MAX, buf, 0, 0]), BLOCKED_RETURN as i64);
    assert_eq!(k.current_tid(), 2);
    assert_eq!(sc(&mut k, &mut m, "exit_group", &[3]), BLOCKED_RETURN as i64, "the child's thread is gone");
    assert_eq!(k.current_tid(), 1);
    assert_eq!(k.take_wakeup_returns(), vec![(1, 2)], "wait4 returns the child's pid");
    assert_eq!(u32::from_le_bytes(peek(&k, &mut m, buf, 4).try_into().unwrap()), 3 << 8);
    assert!(k.pending_signals().is_empty(), "SIGCHLD is ignored by default, and not queued");
    assert_eq!(sc(&mut k, &mut m, "wait4", &[u64::MAX, buf, 0, 0]), ECHILD, "reaped");
    assert_eq!(k.thread_ids(), vec![1]);
    assert_eq!(m.others.len(), 0, "the child's space was freed");
    // The node ends with pid 1.
    assert!(matches!(
        sc_exit(&mut k, &mut m, "exit_group", &[0]),
        SyscallOutcome::Exit(ExitStatus::Exited { code: 0 })
    ));
}

#[test]
fn a_parent_that_ignores_sigchld_reaps_at_once() {
    let (mut k, mut m, buf) = boot_and_scratch();
    let act: Vec<u8> = [SIG_IGN_U, 0, 0, 0].iter().flat_map(|w: &u64| w.to_le_bytes()).collect();
    poke(&k, &mut m, buf + 512, &act);
    assert_eq!(sc(&mut k, &mut m, "rt_sigaction", &[17, buf + 512, 0, 8]), 0);
    run_next_after_fork(&mut k, &mut m, 2);
    assert_eq!(sc(&mut k, &mut m, "exit_group", &[0]), BLOCKED_RETURN as i64);
    assert_eq!(k.current_tid(), 1);
    assert_eq!(sc(&mut k, &mut m, "wait4", &[u64::MAX, buf, 1, 0]), ECHILD, "nothing to reap");
    assert!(k.pending_signals().is_empty());
}

const SIG_IGN_U: u64 = 1;

fn boot_and_scratch() -> (Kernel, FakeMemory, u64) {
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 4096);
    (k, m, buf)
}

/// Forks and lets `tid` run after the fork, and after the syscalls that follow.
fn run_next_after_fork(k: &mut Kernel, m: &mut FakeMemory, tid: u64) {
    override_next(k, vec![tid - 1; 64]);
    let pid = sc(k, m, "fork", &[]);
    assert!(pid > 0);
    assert_eq!(k.current_tid(), tid);
    k.take_spawned();
}

#[test]
fn a_pipe_carries_bytes_between_processes_and_ends_when_the_writer_does() {
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 4096);
    assert_eq!(sc(&mut k, &mut m, "pipe2", &[buf, 0]), 0);
    let fds = peek(&k, &mut m, buf, 8);
    let (r, w) = (u32::from_le_bytes(fds[0..4].try_into().unwrap()), u32::from_le_bytes(fds[4..8].try_into().unwrap()));
    run_next_after_fork(&mut k, &mut m, 2);
    // The child: closes the read end, writes, exits.
    assert_eq!(sc(&mut k, &mut m, "close", &[r.into()]), 0);
    poke(&k, &mut m, buf + 64, b"hello");
    run_next(&mut k, 1);
    assert_eq!(sc(&mut k, &mut m, "write", &[w.into(), buf + 64, 5]), 5);
    assert_eq!(k.current_tid(), 1);
    // The parent: closes the write end, reads what the child wrote, then end of file once the
    // child is gone.
    run_next(&mut k, 2);
    assert_eq!(sc(&mut k, &mut m, "close", &[w.into()]), 0);
    assert_eq!(k.current_tid(), 2);
    assert_eq!(sc(&mut k, &mut m, "exit_group", &[0]), BLOCKED_RETURN as i64);
    assert_eq!(sc(&mut k, &mut m, "read", &[r.into(), buf + 128, 64]), 5);
    assert_eq!(&peek(&k, &mut m, buf + 128, 5)[..], b"hello");
    assert_eq!(sc(&mut k, &mut m, "read", &[r.into(), buf + 128, 64]), 0, "end of file");
}

#[test]
fn execve_replaces_the_program_closes_cloexec_fds_and_keeps_the_rest() {
    let mut spec = spec_with(exec_image(), 42);
    let mut prog = exec_image();
    prog.extend_from_slice(b"second program");
    spec.files.insert("/bin/other".into(), prog);
    let (mut k, _, mut m) = boot_spec(spec);
    let buf = scratch(&mut k, &mut m, 4096);
    assert_eq!(sc(&mut k, &mut m, "pipe2", &[buf, 0o2000000]), 0, "O_CLOEXEC");
    assert_eq!(sc(&mut k, &mut m, "dup", &[1]), 5);
    run_next_after_fork(&mut k, &mut m, 2);
    poke(&k, &mut m, buf + 256, b"/bin/other\0one\0X=2\0");
    let argv = [buf + 256, buf + 267, 0];
    let envp = [buf + 271, 0];
    poke(&k, &mut m, buf + 512, &argv.iter().chain(&envp).flat_map(|w| w.to_le_bytes()).collect::<Vec<u8>>());
    let before = m.space();
    assert_eq!(sc(&mut k, &mut m, "execve", &[buf + 256, buf + 512, buf + 536]), 0);
    let entry = k.take_exec().expect("the thread restarts");
    assert!(k.take_exec().is_none());
    assert_ne!(m.space(), before, "a new address space");
    assert_eq!(entry.rip, 0x40_1000);
    // The new stack holds argc, argv and the environment.
    assert_eq!(peek_u64(&m, entry.rsp), 2);
    assert_eq!(cstr_at(&m, peek_u64(&m, entry.rsp + 8)), "/bin/other");
    assert_eq!(cstr_at(&m, peek_u64(&m, entry.rsp + 16)), "one");
    assert_eq!(cstr_at(&m, peek_u64(&m, entry.rsp + 32)), "X=2");
    assert_eq!(sc(&mut k, &mut m, "close", &[3]), EBADF, "close-on-exec");
    assert_eq!(sc(&mut k, &mut m, "close", &[5]), 0, "inherited");
    assert_eq!(sc(&mut k, &mut m, "getpid", &[]), 2);
    let mut link = vec![0u8; 64];
    poke(&k, &mut m, entry.rsp - 4096, b"/proc/self/exe\0");
    let n = sc(&mut k, &mut m, "readlink", &[entry.rsp - 4096, entry.rsp - 2048, 64]);
    link.truncate(n as usize);
    assert_eq!(&peek(&k, &mut m, entry.rsp - 2048, n as usize)[..], b"/bin/other");
    // A file that is no program, and one that does not exist.
    poke(&k, &mut m, entry.rsp - 4096, b"/data/input.txt\0");
    assert_eq!(sc(&mut k, &mut m, "execve", &[entry.rsp - 4096, 0, 0]), -13, "not executable");
    poke(&k, &mut m, entry.rsp - 4096, b"/nope\0");
    assert_eq!(sc(&mut k, &mut m, "execve", &[entry.rsp - 4096, 0, 0]), ENOENT);
}

#[test]
fn a_script_runs_its_interpreter_with_its_path() {
    let mut spec = spec_with(exec_image(), 42);
    spec.files.insert("/bin/sh".into(), exec_image());
    spec.files.insert("/bin/script".into(), b"#!/bin/sh -e\necho hi\n".to_vec());
    let (mut k, _, mut m) = boot_spec(spec);
    let buf = scratch(&mut k, &mut m, 4096);
    poke(&k, &mut m, buf, b"/bin/script\0arg\0");
    let argv = [buf, buf + 12, 0];
    poke(&k, &mut m, buf + 64, &argv.iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<u8>>());
    assert_eq!(sc(&mut k, &mut m, "execve", &[buf, buf + 64, 0]), 0);
    let e = k.take_exec().unwrap();
    assert_eq!(peek_u64(&m, e.rsp), 4, "sh -e /bin/script arg");
    let args: Vec<String> = (0..4).map(|i| cstr_at(&m, peek_u64(&m, e.rsp + 8 + 8 * i))).collect();
    assert_eq!(args, ["/bin/sh", "-e", "/bin/script", "arg"]);
}

#[test]
fn vfork_holds_the_parent_until_the_child_execs_or_exits() {
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 4096);
    let space = m.space();
    assert_eq!(sc(&mut k, &mut m, "vfork", &[]), BLOCKED_RETURN as i64);
    assert_eq!(k.current_tid(), 2, "only the child can run");
    assert_eq!(m.space(), space, "in the parent's memory");
    poke(&k, &mut m, buf, b"shared");
    assert_eq!(sc(&mut k, &mut m, "getpid", &[]), 2);
    assert_eq!(sc(&mut k, &mut m, "exit_group", &[1]), BLOCKED_RETURN as i64);
    assert_eq!(k.current_tid(), 1);
    assert_eq!(k.take_wakeup_returns(), vec![(1, 2)], "vfork returns the child's pid");
    assert_eq!(&peek(&k, &mut m, buf, 6)[..], b"shared", "the child wrote the parent's memory");
    assert_eq!(m.space(), space, "the space outlives the child");
    assert_eq!(sc(&mut k, &mut m, "wait4", &[2, buf, 0, 0]), 2);
}

#[test]
fn kill_ends_another_process_and_groups_are_the_targets_kill_names() {
    let (mut k, mut m, buf) = forked();
    assert_eq!(sc(&mut k, &mut m, "kill", &[99, 15]), ESRCH);
    assert_eq!(sc(&mut k, &mut m, "setpgid", &[2, 2]), 0, "the child leads its own group");
    assert_eq!(sc(&mut k, &mut m, "getpgid", &[2]), 2);
    assert_eq!(sc(&mut k, &mut m, "kill", &[(-2i64) as u64, 15]), 0, "SIGTERM to group 2");
    assert_eq!(k.thread_ids(), vec![1], "the child died of it");
    assert_eq!(sc(&mut k, &mut m, "wait4", &[u64::MAX, buf, 0, 0]), 2);
    assert_eq!(u32::from_le_bytes(peek(&k, &mut m, buf, 4).try_into().unwrap()), 15, "killed by SIGTERM");
    assert_eq!(sc(&mut k, &mut m, "getsid", &[0]), 1);
    assert_eq!(sc(&mut k, &mut m, "setsid", &[]), -1, "a group leader cannot start a session");
}

#[test]
fn futex_words_of_different_processes_are_different_words() {
    let (mut k, mut m, buf) = forked();
    // The parent waits on `buf`; the child wakes `buf` in its own memory: nobody.
    assert_eq!(sc(&mut k, &mut m, "futex", &[buf, 128, 0, 0]), BLOCKED_RETURN as i64);
    assert_eq!(k.current_tid(), 2);
    assert_eq!(sc(&mut k, &mut m, "futex", &[buf, 129, 1]), 0, "no waiter in the child's space");
}

#[test]
fn processes_save_and_restore_with_their_parts() {
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 4096);
    poke(&k, &mut m, buf, b"/data/input.txt\0");
    assert_eq!(sc(&mut k, &mut m, "open", &[buf, 0, 0]), 3);
    run_next_after_fork(&mut k, &mut m, 1);
    run_next(&mut k, 2);
    assert_eq!(sc(&mut k, &mut m, "close", &[3]), 0, "the parent's fd");
    assert_eq!(k.current_tid(), 2);
    let saved = k.save();
    let back = Kernel::restore(&saved).expect("restore");
    assert_eq!(back.save(), saved);
    let mut bad = k.clone();
    bad.procs.table.get_mut(&1).unwrap().parked = None;
    assert!(Kernel::restore(&bad.save()).is_err(), "a live process without its parts");
    let mut bad = k.clone();
    bad.sched.threads.threads.get_mut(&2).unwrap().pid = 7;
    assert!(Kernel::restore(&bad.save()).is_err(), "a thread of no process");
    // The restored kernel runs on the same: the child's fd 3 is still open, the parent's not.
    let (mut a, mut b) = (k, back);
    let (mut ma, mut mb) = (m.clone(), m);
    for (k, m) in [(&mut a, &mut ma), (&mut b, &mut mb)] {
        run_next(k, 1);
        assert_eq!(sc(k, m, "close", &[3]), 0, "the child's fd");
        assert_eq!(sc(k, m, "getpid", &[]), 1);
        assert_eq!(sc(k, m, "close", &[3]), EBADF);
    }
    assert_eq!(a.save(), b.save());
}

#[test]
fn a_process_killed_at_its_durable_operation_dies_alone_and_its_writes_stay_cached() {
    let mut spec = spec_with(exec_image(), 42);
    spec.faults.kill_process = vec![crate::ProcessKill::parse("prog:before:2").unwrap()];
    let (mut k, _, mut m) = boot_spec(spec);
    let buf = scratch(&mut k, &mut m, 4096);
    poke(&k, &mut m, buf, b"/data/f\0");
    // Pid 1's own durable operations never count for a kill.
    let fd = sc(&mut k, &mut m, "open", &[buf, 0o102, 0o644]) as u64;
    assert_eq!(sc(&mut k, &mut m, "fsync", &[fd]), 0);
    run_next_after_fork(&mut k, &mut m, 2);
    poke(&k, &mut m, buf + 64, b"abc");
    assert_eq!(sc(&mut k, &mut m, "write", &[fd, buf + 64, 3]), 3);
    assert_eq!(sc(&mut k, &mut m, "fsync", &[fd]), 0, "the child's first durable op");
    assert_eq!(sc(&mut k, &mut m, "fsync", &[fd]), BLOCKED_RETURN as i64, "killed before its second");
    assert_eq!(k.thread_ids(), vec![1]);
    assert_eq!(sc(&mut k, &mut m, "wait4", &[u64::MAX, buf + 128, 0, 0]), 2);
    assert_eq!(u32::from_le_bytes(peek(&k, &mut m, buf + 128, 4).try_into().unwrap()), 9, "SIGKILL");
    assert_eq!(sc(&mut k, &mut m, "pread64", &[fd, buf + 256, 16, 0]), 3, "the node went on with its page cache");
    let r = k.finish(&m, ExitStatus::Exited { code: 0 });
    assert_eq!(r.process_ops, vec![("prog".to_string(), 2)]);
    assert!(r
        .faults
        .iter()
        .any(|f| f.kind == crate::FaultKind::Kill && f.point == "prog killed before its durable op #2"));
}

#[test]
fn record_locks_are_each_processs_own_and_conflict_across_processes() {
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 4096);
    poke(&k, &mut m, buf, b"/data/l\0");
    let fd = sc(&mut k, &mut m, "open", &[buf, 0o102, 0o644]) as u64;
    let flock = |ty: u16, start: i64, len: i64| {
        let mut b = vec![0u8; 32];
        b[0..2].copy_from_slice(&ty.to_le_bytes());
        b[8..16].copy_from_slice(&start.to_le_bytes());
        b[16..24].copy_from_slice(&len.to_le_bytes());
        b
    };
    let fl = buf + 512;
    // The parent write-locks [10, 15) and [15, 20): one lock of [10, 20).
    poke(&k, &mut m, fl, &flock(1, 10, 5));
    assert_eq!(sc(&mut k, &mut m, "fcntl", &[fd, 6, fl]), 0);
    poke(&k, &mut m, fl, &flock(1, 15, 5));
    assert_eq!(sc(&mut k, &mut m, "fcntl", &[fd, 6, fl]), 0);
    assert_eq!(k.files.locks.len(), 1, "{:?}", k.files.locks);
    run_next_after_fork(&mut k, &mut m, 2);
    // The child sees the parent's lock, with its pid, and cannot take a read lock under it.
    poke(&k, &mut m, fl, &flock(0, 12, 1));
    assert_eq!(sc(&mut k, &mut m, "fcntl", &[fd, 5, fl]), 0);
    let got = peek(&k, &mut m, fl, 32);
    assert_eq!(u16::from_le_bytes([got[0], got[1]]), 1, "F_WRLCK");
    assert_eq!(i64::from_le_bytes(got[8..16].try_into().unwrap()), 10);
    assert_eq!(i64::from_le_bytes(got[16..24].try_into().unwrap()), 10);
    assert_eq!(i32::from_le_bytes(got[24..28].try_into().unwrap()), 1, "the parent's pid");
    poke(&k, &mut m, fl, &flock(0, 12, 1));
    assert_eq!(sc(&mut k, &mut m, "fcntl", &[fd, 6, fl]), -11, "EAGAIN");
    poke(&k, &mut m, fl, &flock(0, 30, 0));
    assert_eq!(sc(&mut k, &mut m, "fcntl", &[fd, 6, fl]), 0, "past the parent's range: granted");
    // F_SETLKW waits until the parent unlocks part of its range.
    poke(&k, &mut m, fl, &flock(1, 18, 2));
    assert_eq!(sc(&mut k, &mut m, "fcntl", &[fd, 7, fl]), BLOCKED_RETURN as i64);
    assert_eq!(k.current_tid(), 1);
    poke(&k, &mut m, fl, &flock(2, 16, 4));
    assert_eq!(sc(&mut k, &mut m, "fcntl", &[fd, 6, fl]), 0, "the parent unlocks [16, 20)");
    assert_eq!(k.take_wakeup_returns(), vec![(2, 0)], "the child's wait ends with its lock");
    let owners: Vec<(u64, u64, u64)> = k.files.locks.iter().map(|((_, o, s), (_, e))| (*o, *s, *e)).collect();
    assert_eq!(owners, vec![(1, 10, 16), (2, 18, 20), (2, 30, u64::MAX)]);
    // The child's end lets its locks go.
    assert_eq!(k.current_tid(), 2);
    assert_eq!(sc(&mut k, &mut m, "exit_group", &[0]), BLOCKED_RETURN as i64);
    let owners: Vec<u64> = k.files.locks.keys().map(|(_, o, _)| *o).collect();
    assert_eq!(owners, vec![1]);
}

#[test]
fn the_memory_digest_covers_every_live_process() {
    // The parent runs when the node ends; the child, still live, wrote `text` into its copy.
    let digest = |text: &[u8]| {
        let (mut k, mut m, buf) = forked();
        run_next(&mut k, 2);
        sc(&mut k, &mut m, "getpid", &[]);
        assert_eq!(k.current_tid(), 2);
        poke(&k, &mut m, buf, text);
        run_next(&mut k, 1);
        sc(&mut k, &mut m, "getpid", &[]);
        assert_eq!(k.current_tid(), 1);
        k.finish(&m, ExitStatus::Exited { code: 0 }).memory_digest
    };
    assert_eq!(digest(b"child!"), digest(b"child!"));
    assert_ne!(digest(b"child!"), digest(b"other!"), "the child's pages are in the digest");
    // A lone process's digest is its pages' alone.
    let (mut k, _, m) = boot();
    let own = crate::record::trace::memory_digest(&m, &[]).to_hex().to_string();
    assert_eq!(k.finish(&m, ExitStatus::Exited { code: 0 }).memory_digest, own);
}

#[test]
fn a_process_deja_starts_runs_its_program_in_a_session_of_its_own_and_its_end_waits_for_the_driver() {
    let mut spec = spec_with(exec_image(), 42);
    spec.files.insert("/opt/t/parallel_driver_w".into(), exec_image());
    spec.files.insert("/opt/t/helper_notes".into(), b"not a program".to_vec());
    let (mut k, _, mut m) = boot_spec(spec);
    let listed = k.list_dir("/opt/t").unwrap();
    assert!(listed.contains(&("parallel_driver_w".to_string(), true)), "{listed:?}");
    assert_eq!(k.list_dir("/data/input.txt"), Err(20), "ENOTDIR");
    assert_eq!(k.start_process(&mut m, "/nope", &[]), Err(2), "ENOENT");
    assert_eq!(k.start_process(&mut m, "opt/t/parallel_driver_w", &[]), Err(22), "EINVAL: not absolute");
    assert_eq!(k.start_process(&mut m, "/data/input.txt", &[]), Err(13), "EACCES: not executable");
    let home = m.space();
    let pid = k.start_process(&mut m, "/opt/t/parallel_driver_w", &[b"X=1".to_vec()]).unwrap();
    assert_eq!(pid, 2);
    assert_eq!(m.space(), home, "the caller's space is current again");
    let spawned = k.take_spawned();
    let entry = spawned[0].entry.expect("a new program's entry");
    assert_eq!((spawned[0].tid, spawned[0].stack, spawned[0].tls), (2, 0, None));
    assert_eq!(entry.rip, 0x40_1000);
    // It runs when the scheduler picks it, in its own space, with argv [path] and the env given.
    assert!(!k.yield_due());
    override_next(&mut k, vec![1; 8]);
    assert!(k.resume(&mut m, 0, Vec::new()));
    assert_eq!(k.current_tid(), 2);
    assert_ne!(m.space(), home);
    assert_eq!(peek_u64(&m, entry.rsp), 1);
    assert_eq!(cstr_at(&m, peek_u64(&m, entry.rsp + 8)), "/opt/t/parallel_driver_w");
    assert_eq!(cstr_at(&m, peek_u64(&m, entry.rsp + 24)), "X=1");
    assert_eq!(sc(&mut k, &mut m, "getpid", &[]), 2);
    assert_eq!(sc(&mut k, &mut m, "getppid", &[]), 0, "no parent in the node");
    assert_eq!(sc(&mut k, &mut m, "getsid", &[0]), 2);
    assert_eq!(sc(&mut k, &mut m, "read", &[0, entry.rsp - 4096, 16]), 0, "stdin is empty");
    assert_eq!(sc(&mut k, &mut m, "exit_group", &[3]), BLOCKED_RETURN as i64);
    // Nobody in the node reaps it: the driver hears of it, and the node stops for it.
    assert!(k.yield_due());
    assert_eq!(k.take_started_ended(), vec![(2, 3)]);
    assert!(!k.yield_due());
    assert!(k.take_started_ended().is_empty());
    // A kill by the driver is a SIGKILL, as a shell reports it.
    let second = k.start_process(&mut m, "/opt/t/parallel_driver_w", &[]).unwrap();
    k.take_spawned();
    k.kill_started(&mut m, second);
    assert_eq!(k.take_started_ended(), vec![(second, 128 + 9)]);
    k.kill_started(&mut m, second);
    assert!(k.take_started_ended().is_empty(), "once");
    assert!(k.procs.table.keys().all(|&p| p == 1), "both reaped: {:?}", k.procs.table.keys().collect::<Vec<_>>());
}

#[test]
fn a_command_started_to_capture_keeps_its_output_apart_and_every_process_is_seen_from_outside() {
    let mut spec = spec_with(exec_image(), 42);
    spec.files.insert("/bin/status".into(), exec_image());
    let (mut k, _, mut m) = boot_spec(spec);
    let argv = [b"/bin/status".to_vec(), b"--all".to_vec()];
    assert_eq!(k.start_command(&mut m, &[b"status".to_vec()], &[], true), Err(22), "EINVAL: not absolute");
    let pid = k.start_command(&mut m, &argv, &[], true).unwrap();
    let entry = k.take_spawned()[0].entry.expect("its entry");
    // Seen from outside: both processes, their threads, the started one's fds.
    let view = k.processes_view();
    assert_eq!(view.iter().map(|p| p.pid).collect::<Vec<_>>(), [1, pid]);
    let started = &view[1];
    assert_eq!((started.ppid, started.cmdline.as_str(), started.zombie), (0, "/bin/status --all", false));
    assert_eq!(started.threads.len(), 1);
    assert_eq!(started.threads[0].state, "runnable");
    assert_eq!(started.fds.iter().map(|(fd, _)| *fd).collect::<Vec<_>>(), [0, 1, 2]);
    assert!(started.fds[1].1.starts_with("pipe:["), "{:?}", started.fds);
    override_next(&mut k, vec![1; 8]);
    assert!(k.resume(&mut m, 0, Vec::new()));
    assert_eq!(k.current_tid(), pid);
    assert_eq!(cstr_at(&m, peek_u64(&m, entry.rsp + 16)), "--all");
    // What it writes is kept for the driver, not the node's output.
    let buf = entry.rsp - 4096;
    poke(&k, &mut m, buf, b"leader r2\n");
    assert_eq!(sc(&mut k, &mut m, "write", &[1, buf, 10]), 10);
    assert_eq!(sc(&mut k, &mut m, "write", &[2, buf, 7]), 7);
    assert!(k.record.output.is_empty(), "not the node's: {:?}", k.record.output);
    assert_eq!(k.take_captured(pid), b"leader r2\nleader ");
    assert_eq!(sc(&mut k, &mut m, "exit_group", &[0]), BLOCKED_RETURN as i64);
    // Its end waits for its own driver: the template's take passes it by.
    assert!(k.yield_due());
    assert!(!k.started_have_ended());
    assert!(k.take_started_ended().is_empty());
    assert_eq!(k.take_started_end(pid), Some(0));
    assert_eq!(k.take_started_end(pid), None, "once");
    assert!(k.take_captured(pid).is_empty());
}
