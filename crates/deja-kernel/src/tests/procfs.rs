//! `/proc/<pid>` for every process of the node and `/proc/self` as a link to the caller's
//! pid: what each process reads of itself and of the others (`cmdline`, `comm`, `stat`,
//! `status`, `maps`, `exe`), through `fork`, `execve`, the end of a process and its reaping,
//! the listing of `/proc`, hostile names, and the state saved and restored.

use super::*;
use crate::task::threads::BLOCKED_RETURN;

const EACCES: i64 = -13;
const O_DIRECTORY: u64 = 0o200000;
const O_NOFOLLOW: u64 = 0o400000;
const ELOOP: i64 = -40;

/// The whole file at `p` as the current process reads it, `at` being 64 KiB of scratch
/// memory; the errno if it does not open.
fn cat(k: &mut Kernel, m: &mut FakeMemory, at: u64, p: &str) -> Result<Vec<u8>, i64> {
    let pa = path(k, m, at + 60000, p);
    let fd = sc(k, m, "openat", &[AT_FDCWD, pa, 0, 0]);
    if fd < 0 {
        return Err(fd);
    }
    let mut out = Vec::new();
    loop {
        let n = sc(k, m, "read", &[fd as u64, at, 4096]);
        assert!(n >= 0, "read of {p}: {n}");
        if n == 0 {
            break;
        }
        out.extend(peek(k, m, at, n as usize));
    }
    assert_eq!(sc(k, m, "close", &[fd as u64]), 0);
    Ok(out)
}

/// [`cat`] as text; the file must open.
fn text(k: &mut Kernel, m: &mut FakeMemory, at: u64, p: &str) -> String {
    String::from_utf8(cat(k, m, at, p).unwrap_or_else(|e| panic!("{p}: {e}"))).expect("text")
}

/// `readlink(p)`, or the errno.
fn link(k: &mut Kernel, m: &mut FakeMemory, at: u64, p: &str) -> Result<String, i64> {
    let pa = path(k, m, at + 60000, p);
    let n = sc(k, m, "readlink", &[pa, at, 4096]);
    if n < 0 {
        return Err(n);
    }
    Ok(String::from_utf8(peek(k, m, at, n as usize)).expect("text"))
}

/// The names `getdents64` gives for the directory `p`, read 256 bytes at a time.
fn listing(k: &mut Kernel, m: &mut FakeMemory, at: u64, p: &str) -> Vec<String> {
    let pa = path(k, m, at + 60000, p);
    let fd = sc(k, m, "openat", &[AT_FDCWD, pa, O_DIRECTORY, 0]);
    assert!(fd >= 0, "open {p}: {fd}");
    let mut out = Vec::new();
    loop {
        let n = sc(k, m, "getdents64", &[fd as u64, at, 256]);
        assert!(n >= 0, "getdents64 of {p}: {n}");
        if n == 0 {
            break;
        }
        let raw = peek(k, m, at, n as usize);
        let mut o = 0;
        while o < raw.len() {
            let reclen = u16::from_le_bytes([raw[o + 16], raw[o + 17]]) as usize;
            let name: Vec<u8> = raw[o + 19..o + reclen].iter().take_while(|b| **b != 0).copied().collect();
            out.push(String::from_utf8(name).expect("a name"));
            o += reclen;
        }
    }
    assert_eq!(sc(k, m, "close", &[fd as u64]), 0);
    out
}

/// `stat` (or `lstat`) of `p`: (errno or 0, `st_mode`, `st_ino`).
fn stat_of(k: &mut Kernel, m: &mut FakeMemory, at: u64, p: &str, follow: bool) -> (i64, u32, u64) {
    let pa = path(k, m, at + 60000, p);
    let flags = if follow { 0 } else { 0x100 };
    let r = sc(k, m, "newfstatat", &[AT_FDCWD, pa, at, flags]);
    let b = peek(k, m, at, 32);
    (r, u32::from_le_bytes(b[24..28].try_into().unwrap()), u64::from_le_bytes(b[8..16].try_into().unwrap()))
}

/// The fields of a `stat` line: `pid`, `(comm)`, then the 50 others.
fn fields(line: &str) -> Vec<String> {
    assert!(line.ends_with('\n'), "{line:?}");
    let (head, rest) = line.trim_end().split_once(") ").expect("pid (comm) ...");
    let (pid, comm) = head.split_once(" (").expect("pid (comm");
    let mut f = vec![pid.to_string(), comm.to_string()];
    f.extend(rest.split(' ').map(str::to_string));
    f
}

/// A node whose files hold a second program, `/bin/other`.
fn boot_with_other() -> (Kernel, FakeMemory, u64) {
    let mut spec = spec_with(exec_image(), 42);
    let mut prog = exec_image();
    prog.extend_from_slice(b"second program");
    spec.files.insert("/bin/other".into(), prog);
    let (mut k, _, mut m) = boot_spec(spec);
    let buf = scratch(&mut k, &mut m, 65536);
    (k, m, buf)
}

/// Forks; the parent (thread 1) goes on running after this and the next syscalls.
fn fork_keep_parent(k: &mut Kernel, m: &mut FakeMemory) {
    override_next(k, vec![0; 64]);
    assert_eq!(sc(k, m, "fork", &[]), 2);
    assert_eq!(k.current_tid(), 1);
    k.take_spawned();
}

#[test]
fn proc_self_is_a_link_to_the_pid_and_the_pid_directory_is_the_same() {
    let (mut k, _, mut m) = boot();
    let at = scratch(&mut k, &mut m, 65536);
    let (k, m) = (&mut k, &mut m);
    assert_eq!(link(k, m, at, "/proc/self").as_deref(), Ok("1"));
    let (r, mode, _) = stat_of(k, m, at, "/proc/self", false);
    assert_eq!((r, mode & 0o170000), (0, 0o120000), "lstat: a symlink");
    let (r, mode, ino) = stat_of(k, m, at, "/proc/self", true);
    assert_eq!((r, mode & 0o170000), (0, 0o040000), "stat: the directory");
    assert_eq!(stat_of(k, m, at, "/proc/1", true), (0, mode, ino), "the same directory as /proc/1");
    let pa = path(k, m, at + 60000, "/proc/self");
    assert_eq!(sc(k, m, "openat", &[AT_FDCWD, pa, O_NOFOLLOW | O_DIRECTORY, 0]), ELOOP);
    // The generated files, by either name.
    for f in ["cmdline", "comm", "stat", "status", "maps"] {
        let own = text(k, m, at, &format!("/proc/self/{f}"));
        assert_eq!(text(k, m, at, &format!("/proc/1/{f}")), own, "/proc/1/{f}");
    }
    assert_eq!(text(k, m, at, "/proc/1/cmdline"), "prog\0arg with space\0");
    assert_eq!(text(k, m, at, "/proc/1/comm"), "prog\n");
    assert_eq!(text(k, m, at, "/proc/1/maps"), k.proc_maps());
    let stat = fields(&text(k, m, at, "/proc/self/stat"));
    assert_eq!(stat.len(), 52, "{stat:?}");
    assert_eq!(stat[..8], ["1", "prog", "R", "0", "1", "1", "0", "-1"]);
    assert_eq!(stat[19], "1", "num_threads");
    assert_eq!(stat[37], "17", "exit_signal");
    let status = text(k, m, at, "/proc/1/status");
    for line in ["Name:\tprog", "State:\tR (running)", "Tgid:\t1", "Pid:\t1", "PPid:\t0", "Threads:\t1", "Umask:\t0022"]
    {
        assert!(status.lines().any(|l| l == line), "no {line:?} in {status}");
    }
    assert!(status.starts_with("Name:\tprog\nUmask:\t0022\nState:\tR (running)\nTgid:\t1\n"), "{status}");
    assert_eq!(link(k, m, at, "/proc/1/exe").as_deref(), Ok("/bin/prog"));
    assert_eq!(link(k, m, at, "/proc/self/exe").as_deref(), Ok("/bin/prog"));
    assert_eq!(link(k, m, at, "/proc/1/../1/exe").as_deref(), Ok("/bin/prog"));
    assert_eq!(cat(k, m, at, "/proc/1/exe").map(|b| b[..4].to_vec()), Ok(b"\x7fELF".to_vec()));
    // The fds: the current process's, by either name.
    assert_eq!(link(k, m, at, "/proc/1/fd/1"), link(k, m, at, "/proc/self/fd/1"));
    assert!(listing(k, m, at, "/proc/1/fd").contains(&"2".to_string()));
    // `/proc` lists the process, and `self` as a link.
    let names = listing(k, m, at, "/proc");
    for n in ["1", "self", "cpuinfo", "sys"] {
        assert!(names.contains(&n.to_string()), "no {n} in {names:?}");
    }
    // Names of no process.
    for p in [
        "/proc/2",
        "/proc/2/stat",
        "/proc/0",
        "/proc/0/stat",
        "/proc/-1",
        "/proc/01/stat",
        "/proc/+1/stat",
        "/proc/99999999999999999999/x",
        "/proc/18446744073709551616/stat",
        "/proc/18446744073709551615/stat",
        "/proc/1/nope",
        "/proc/self/nope",
    ] {
        assert_eq!(cat(k, m, at, p), Err(ENOENT), "{p}");
        assert_eq!(stat_of(k, m, at, p, true).0, ENOENT, "{p}");
        assert_eq!(link(k, m, at, p), Err(ENOENT), "{p}");
    }
    // Nothing of it may be written or created.
    let pa = path(k, m, at + 60000, "/proc/1/comm");
    assert_eq!(sc(k, m, "openat", &[AT_FDCWD, pa, 1, 0]), EACCES);
    let pa = path(k, m, at + 60000, "/proc/7");
    assert!(sc(k, m, "mkdir", &[pa, 0o755]) < 0);
}

#[test]
fn each_process_reads_itself_and_the_others_through_fork_exec_end_and_reaping() {
    let (mut k, mut m, at) = boot_with_other();
    let (k, m) = (&mut k, &mut m);
    let parent_maps = text(k, m, at, "/proc/self/maps");
    fork_keep_parent(k, m);
    // The parent reads the child, which runs its copy of the parent's program.
    assert_eq!(text(k, m, at, "/proc/2/cmdline"), "prog\0arg with space\0");
    assert_eq!(text(k, m, at, "/proc/2/comm"), "prog\n");
    assert_eq!(text(k, m, at, "/proc/2/maps"), parent_maps, "a copy of the parent's space");
    assert_eq!(link(k, m, at, "/proc/2/exe").as_deref(), Ok("/bin/prog"));
    let child = fields(&text(k, m, at, "/proc/2/stat"));
    assert_eq!(child[..6], ["2", "prog", "R", "1", "1", "1"], "runnable, its parent 1, its group and session");
    let status = text(k, m, at, "/proc/2/status");
    assert!(status.contains("\nPid:\t2\nPPid:\t1\n"), "{status}");
    assert_eq!(link(k, m, at, "/proc/self").as_deref(), Ok("1"));
    let names = listing(k, m, at, "/proc");
    assert!(names.contains(&"1".to_string()) && names.contains(&"2".to_string()), "{names:?}");
    // Another process's fds are not shown.
    let pa = path(k, m, at + 60000, "/proc/2/fd");
    assert_eq!(sc(k, m, "openat", &[AT_FDCWD, pa, O_DIRECTORY, 0]), EACCES);
    assert_eq!(link(k, m, at, "/proc/2/fd/1"), Err(EACCES));
    // A directory fd of /proc/2 names the child's files.
    let pa = path(k, m, at + 60000, "/proc/2");
    let dir = sc(k, m, "openat", &[AT_FDCWD, pa, O_DIRECTORY, 0]);
    assert!(dir > 0);
    let stat_name = path(k, m, at + 60000, "stat");
    let fd = sc(k, m, "openat", &[dir as u64, stat_name, 0, 0]);
    let n = sc(k, m, "read", &[fd as u64, at, 4096]);
    assert!(String::from_utf8(peek(k, m, at, n as usize)).unwrap().starts_with("2 (prog) R 1 "));
    assert_eq!(sc(k, m, "close", &[fd as u64]), 0);
    assert_eq!(sc(k, m, "fstat", &[dir as u64, at]), 0);
    assert_eq!(peek(k, m, at + 8, 8), crate::fs::ino_of("/proc/2").to_le_bytes());
    assert_eq!(sc(k, m, "close", &[dir as u64]), 0);

    // The parent sleeps: the child runs, and reads itself and its sleeping parent.
    poke(k, m, at + 0x800, &[1u64.to_le_bytes(), 0u64.to_le_bytes()].concat());
    assert_eq!(sc(k, m, "nanosleep", &[at + 0x800, 0]), BLOCKED_RETURN as i64);
    assert_eq!(k.current_tid(), 2);
    assert_eq!(link(k, m, at, "/proc/self").as_deref(), Ok("2"));
    let own = text(k, m, at, "/proc/self/stat");
    assert_eq!(fields(&own)[..6], ["2", "prog", "R", "1", "1", "1"]);
    assert_eq!(text(k, m, at, "/proc/2/stat"), own);
    assert_eq!(fields(&text(k, m, at, "/proc/1/stat"))[..6], ["1", "prog", "S", "0", "1", "1"], "asleep");
    assert!(text(k, m, at, "/proc/1/status").contains("\nState:\tS (sleeping)\n"));
    assert_eq!(link(k, m, at, "/proc/2/fd/1"), link(k, m, at, "/proc/self/fd/1"), "its own fds");
    let pa = path(k, m, at + 60000, "/proc/1/fd");
    assert_eq!(sc(k, m, "openat", &[AT_FDCWD, pa, O_DIRECTORY, 0]), EACCES, "its parent's are not");

    // The child runs another program: its argv and name are the new ones.
    poke(k, m, at + 256, b"/bin/other\0one\0X=2\0");
    let argv = [at + 256, at + 267, 0];
    let envp = [at + 271, 0];
    poke(k, m, at + 512, &argv.iter().chain(&envp).flat_map(|w| w.to_le_bytes()).collect::<Vec<u8>>());
    assert_eq!(sc(k, m, "execve", &[at + 256, at + 512, at + 536]), 0);
    let entry = k.take_exec().expect("the thread restarts");
    let c = entry.rsp - 0x20000; // the child's scratch: the old one went with the old space
    assert_eq!(text(k, m, c, "/proc/self/cmdline"), "/bin/other\0one\0");
    assert_eq!(text(k, m, c, "/proc/2/comm"), "other\n");
    assert_eq!(link(k, m, c, "/proc/2/exe").as_deref(), Ok("/bin/other"));
    assert_eq!(text(k, m, c, "/proc/self/maps"), k.proc_maps());
    assert_eq!(fields(&text(k, m, c, "/proc/self/stat"))[..4], ["2", "other", "R", "1"]);
    assert_eq!(text(k, m, c, "/proc/1/cmdline"), "prog\0arg with space\0", "the parent's own");
    assert_eq!(text(k, m, c, "/proc/1/maps"), parent_maps, "the parent's space, parked");

    // The child ends: a zombie until its parent reaps it.
    assert_eq!(sc(k, m, "exit_group", &[3]), BLOCKED_RETURN as i64);
    assert_eq!(k.current_tid(), 1, "the parent woke");
    let zombie = fields(&text(k, m, at, "/proc/2/stat"));
    assert_eq!(zombie[..6], ["2", "other", "Z", "1", "1", "1"]);
    assert_eq!(zombie[51], (3 << 8).to_string(), "exit_code: the wait status");
    assert_eq!(text(k, m, at, "/proc/2/cmdline"), "", "a zombie has no argv");
    assert_eq!(text(k, m, at, "/proc/2/comm"), "other\n");
    assert_eq!(text(k, m, at, "/proc/2/maps"), "");
    assert!(text(k, m, at, "/proc/2/status").contains("\nState:\tZ (zombie)\n"));
    assert_eq!(link(k, m, at, "/proc/2/exe"), Err(ENOENT), "no program any more");
    assert!(listing(k, m, at, "/proc").contains(&"2".to_string()));
    assert_eq!(sc(k, m, "wait4", &[u64::MAX, at, 0, 0]), 2);
    for p in ["/proc/2", "/proc/2/stat", "/proc/2/cmdline", "/proc/2/comm"] {
        assert_eq!(cat(k, m, at, p), Err(ENOENT), "{p} once reaped");
    }
    let names = listing(k, m, at, "/proc");
    assert!(names.contains(&"1".to_string()) && !names.contains(&"2".to_string()), "{names:?}");
}

#[test]
fn argv_and_names_are_saved_with_the_process_table() {
    let (mut k, mut m, at) = boot_with_other();
    fork_keep_parent(&mut k, &mut m);
    // The child execs; the parent forks again (a third process that shares nothing).
    run_child(&mut k, &mut m);
    poke(&k, &mut m, at + 256, b"/bin/other\0two\0three\0");
    let argv = [at + 256, at + 267, at + 271, 0];
    poke(&k, &mut m, at + 512, &argv.iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<u8>>());
    assert_eq!(sc(&mut k, &mut m, "execve", &[at + 256, at + 512, 0]), 0);
    let entry = k.take_exec().expect("restarts");
    let child_at = entry.rsp - 0x20000;
    let before = text(&mut k, &mut m, child_at, "/proc/2/cmdline");
    assert_eq!(before, "/bin/other\0two\0three\0");
    let saved = k.save();
    let mut back = Kernel::restore(&saved).expect("restore");
    assert_eq!(back.save(), saved);
    let mut m2 = m.clone();
    assert_eq!(text(&mut back, &mut m2, child_at, "/proc/self/cmdline"), before);
    assert_eq!(text(&mut back, &mut m2, child_at, "/proc/1/cmdline"), "prog\0arg with space\0");
    assert_eq!(text(&mut back, &mut m2, child_at, "/proc/2/comm"), "other\n");
}

/// Lets the child (thread 2) run after the next syscall, made by the parent.
fn run_child(k: &mut Kernel, m: &mut FakeMemory) {
    let runnable = k.sched.threads.runnable();
    let i = runnable.iter().position(|&t| t == 2).expect("the child is runnable") as u64;
    override_next(k, vec![i; 64]);
    assert_eq!(sc(k, m, "getpid", &[]), 1);
    assert_eq!(k.current_tid(), 2);
}
