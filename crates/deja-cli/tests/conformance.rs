//! The conformance suite: small programs, one per area, each run natively and under deja.
//! Their output and exit status must be the same; where a value is the host's (a thread id),
//! only what is deterministic is compared, and the case says what it normalizes. Each run
//! under deja is `--audit 3`: the same digest in this process and in fresh processes pinned to
//! every host core. docs/CONFORMANCE.md lists the cases and what each covers.

use std::os::unix::process::ExitStatusExt;
use std::process::Command;

use crate::common::*;

/// What a run showed: the program's stdout, its stderr (deja's own lines removed) and its
/// exit status as a shell gives it (128 + signal for a signal).
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    stdout: String,
    stderr: String,
    status: i32,
}

fn native(name: &str, args: &[&str]) -> Seen {
    let out = Command::new(guest(name)).args(args).output().expect("run natively");
    let status = out.status.code().unwrap_or_else(|| 128 + out.status.signal().unwrap_or(0));
    Seen { stdout: stdout(&out), stderr: stderr(&out), status }
}

fn under_deja(name: &str, args: &[&str]) -> Seen {
    let prog = guest(name).to_string_lossy().into_owned();
    let mut full = vec!["run", "--no-probe", "--audit", "3", &prog, "--"];
    full.extend_from_slice(args);
    let out = deja(&full);
    let err = stderr(&out);
    assert!(err.contains("deja: audit: identical over 3 runs"), "{name} is not deterministic under deja:\n{err}");
    let own: Vec<&str> = err.lines().filter(|l| !l.starts_with("deja: ")).collect();
    let mut stderr = own.join("\n");
    if !own.is_empty() {
        stderr.push('\n');
    }
    Seen { stdout: stdout(&out), stderr, status: out.status.code().expect("deja exits") }
}

/// Runs one case both ways and compares, after `normalize` of each stream.
fn case(name: &str, args: &[&str], normalize: fn(&str) -> String) -> Seen {
    let n = native(name, args);
    let d = under_deja(name, args);
    let n = Seen { stdout: normalize(&n.stdout), stderr: normalize(&n.stderr), status: n.status };
    let d = Seen { stdout: normalize(&d.stdout), stderr: normalize(&d.stderr), status: d.status };
    assert_eq!(d, n, "{name}: under deja (left) and natively (right) differ");
    d
}

fn same(s: &str) -> String {
    s.to_string()
}

/// Each of `lines` is a whole line of what the case printed: it ran to there.
fn printed(seen: &Seen, lines: &[&str]) {
    for line in lines {
        assert!(seen.stdout.lines().any(|l| l == *line), "no {line:?} in:\n{}", seen.stdout);
    }
}

#[test]
fn signals_faults_handlers_and_masks_match_linux() {
    let seen = case("conformance-signals", &[], same);
    // The cases ran, to the end: each prints its line, and abort() ends it with SIGABRT.
    printed(
        &seen,
        &[
            "segv: sig=11 code=1 addr=0x18 altstack=1",
            "accerr: sig=11 code=2 addr-is-main=1",
            "fpe: sig=8 code=1",
            "ill: sig=4 code=2 handled=1, resumed after the instruction",
            "skip: sig=11 code=1 handled=1 kept=0x1234567",
            "trap: sig=5 handled=1",
            "raise: handled=1",
            "blocked: handled=2 pending=1",
            "unblocked: handled=3",
            "mask inside: own=1 usr2=1",
            "fpu kept: 2.50",
            "abort handler ran",
        ],
    );
    assert_eq!(seen.status, 134);
}

#[test]
fn a_go_nil_dereference_is_recovered_as_natively() {
    let seen = case("go-recover", &[], same);
    assert!(
        seen.stdout.contains(
            "nil field: recovered runtime error: runtime error: invalid memory address or nil pointer dereference"
        ),
        "{}",
        seen.stdout
    );
    assert!(seen.stdout.contains("divide: recovered runtime error: runtime error: integer divide by zero"));
    assert!(seen.stdout.ends_with("still running\n"));
    assert_eq!(seen.status, 0);
}

/// Rust names the overflowing thread by its tid, which is the host's natively.
fn without_tid(s: &str) -> String {
    match s.find("thread 'main' (") {
        Some(i) => {
            let rest = &s[i + "thread 'main' (".len()..];
            let end = rest.find(')').unwrap_or(0);
            format!("{}thread 'main' (TID{}", &s[..i], &rest[end..])
        }
        None => s.to_string(),
    }
}

#[test]
fn a_rust_stack_overflow_is_reported_by_rusts_own_handler() {
    let seen = case("overflow", &[], without_tid);
    assert!(seen.stderr.contains("thread 'main' (TID) has overflowed its stack"), "{}", seen.stderr);
    assert_eq!(seen.status, 134, "SIGABRT from Rust's handler, not SIGSEGV");
}

#[test]
fn working_directories_and_relative_paths_match_linux() {
    let seen = case("conformance-dirs", &[], same);
    printed(
        &seen,
        &[
            "getcwd: BASE/a",
            "read back: relative",
            "fchdir to a file: ENOTDIR",
            "chdir nope: ENOENT",
            "getcwd into 4 bytes: ERANGE",
            "create in a removed directory: ENOENT",
            "rmdir base: ok",
        ],
    );
    assert_eq!(seen.status, 0);
}

#[test]
fn unix_sockets_match_linux() {
    let seen = case("conformance-unix", &[], same);
    printed(
        &seen,
        &[
            "read after close, data was unread: ECONNRESET",
            "recvmsg 3 of 6: 3 abc truncated=1",
            "is a socket: 1, size 0",
            "open a socket: ENXIO",
            "getsockname: 11 srv.sock",
            "SO_PEERCRED: pid is ours 1, uid is ours 1, length 12",
            "echo: THIRD AND LAST",
            "connect after unlink: ENOENT",
            "connect from inside sub: 0",
            "epoll after the client closed: 1, IN 1 OUT 1 RDHUP 1 HUP 1",
            "recvfrom: from cl from cl.sock (length 10)",
            "a third socket sends to srv: EPERM",
            "send to a closed peer: ECONNREFUSED",
            "rmdir base: 0",
        ],
    );
    assert_eq!(seen.status, 0);
}

#[test]
fn a_go_program_serves_on_unix_sockets_as_natively() {
    let seen = case("go-unix", &[], same);
    printed(
        &seen,
        &[
            "echo: CLIENT 1 LINE 2",
            "socket file: true",
            "unixgram: \"one datagram\" from b.sock",
            "reply: \"a reply\"",
            "abstract: @deja-go-abstract",
            "removed when the listener closed: true",
        ],
    );
    assert_eq!(seen.status, 0);
}

#[test]
fn the_clock_read_through_the_vdso_matches_linux() {
    let seen = case("conformance-clock", &["2"], same);
    printed(
        &seen,
        &[
            "vdso: present",
            "spin to a 2 ms deadline: ended, time never went back",
            "time, gettimeofday and CLOCK_REALTIME agree: yes",
            "timezone: 0 minutes west, dst 0",
            "resolution: 0.000000001 s",
            "clock_gettime(CLOCK_THREAD_CPUTIME_ID): 0",
            "clock_gettime(10): EINVAL",
            "getcpu(NULL, NULL): 0",
        ],
    );
}

#[test]
fn copies_between_descriptors_ownership_and_mincore_match_linux() {
    let seen = case("conformance-files", &[], same);
    printed(
        &seen,
        &[
            "position now 26, source offset still 10",
            "the socket gave pqrs",
            "positions now 26 and 13, offsets still 5 and 5",
            "overlapping within one file: EINVAL",
            "chown to our own ids: 0",
            "mincore over a hole: ENOMEM",
            "rmdir base: 0",
            "4096-byte writes until EAGAIN: 65536 bytes, then EAGAIN",
            "F_SETPIPE_SZ 100000: 131072",
            "a write of 7 pages, 6 fit: 24576",
        ],
    );
    assert_eq!(seen.status, 0);
}

#[test]
fn waits_with_a_signal_mask_of_their_own_match_linux() {
    let seen = case("conformance-pwait", &[], same);
    printed(
        &seen,
        &[
            "ppoll, pending and let through: -1 Interrupted system call, handler ran 1, blocked after 1",
            "pselect, pending and blocked by its mask: 0, handler ran 0, still pending 1",
            "epoll_pwait, ready and nothing pending: 1, handler ran 0, blocked after 1",
            "epoll_pwait, sent while waiting: -1 Interrupted system call, handler ran 1, blocked after 1",
            "ppoll, no mask: 0, handler ran 0",
            "sigsuspend: -1 Interrupted system call, handler ran 1, blocked after 1",
        ],
    );
}

#[test]
fn waiting_for_signals_matches_linux() {
    let seen = case("conformance-sigwait", &[], same);
    printed(
        &seen,
        &[
            "sigsuspend: EINTR",
            "handled 1, SIGUSR1 blocked inside the handler 1",
            "after: SIGUSR1 blocked again 1",
            "pause ended after the handler of SIGUSR2",
            "sigtimedwait, nothing pending, 10 ms: EAGAIN",
            "si_code 0 (SI_USER), si_pid is ours 1, si_uid is ours 1",
            "handlers ran: 0",
        ],
    );
    assert_eq!(seen.status, 0);
}

#[test]
fn a_signal_ends_or_restarts_a_blocked_call_as_linux_does() {
    let seen = case("conformance-eintr", &[], same);
    printed(
        &seen,
        &[
            "read, handler without SA_RESTART",
            "  the call: EINTR, handler ran 1",
            "read, handler with SA_RESTART",
            "  the call: 5 data, handler ran 1",
            "poll, handler with SA_RESTART",
            "recv with SO_RCVTIMEO, handler with SA_RESTART",
            "  the call: 1 (accepted), handler ran 1",
            "  unblocked: handler ran 1",
            "open of a FIFO, handler without SA_RESTART",
            "  a writer opens: ENXIO",
            "  the call: 5 fifo, handler ran 1",
        ],
    );
    assert_eq!(seen.stdout.matches("the call: EINTR").count(), 4, "{}", seen.stdout);
    assert_eq!(seen.status, 0);
}

#[test]
fn queued_signals_match_linux() {
    let seen = case("conformance-sigqueue", &[], same);
    printed(
        &seen,
        &[
            "handler: signal +0, value 42, si_code -1 (SI_QUEUE -1), from us 1",
            "third: signal +1, si_code -1, value 3, from us 1, si_pid 0 0",
            "a fourth: EAGAIN",
            "SIGUSR1 sent twice: taken 1 with value 5",
            "kill, second: signal +1, si_code 0, value 0, from us 1, si_pid 0 0",
            "the thread took signal +2, si_code -1, value 77",
            "claiming SI_USER to another process: EPERM",
            "taken: si_code 0, si_pid 4242, value 8",
            "an si_code Linux does not know, with bytes past 48: E2BIG",
            "rt_sigqueueinfo claiming SI_USER from a thread that is not the process: EPERM",
            "the process's, from the thread: signal +1, si_code -1, value 2, from us 1, si_pid 0 0",
            "sigqueue of a real-time signal: EAGAIN",
            "taken: signal +1, si_code 0, value 0, from us 0, si_pid 0 1",
            "sigqueue again: 0",
        ],
    );
    assert_eq!(seen.status, 0);
}

#[test]
fn fifos_and_mknod_match_linux() {
    let seen = case("conformance-fifo", &[], same);
    printed(
        &seen,
        &[
            "stat f: FIFO, mode 0644, size 0, links 1",
            "stat r0: regular, mode 0644, size 0, links 1",
            "connect to it: ECONNREFUSED",
            "mknod of a directory: EPERM",
            "getdents: 3 FIFOs, 2 regular, 1 sockets",
            "open for writing, no reader, O_NONBLOCK: ENXIO",
            "poll, no writer yet: none",
            "poll of the reader: IN HUP",
            "the second reader reads 1: a",
            "SIGPIPE handled: 1",
            "read after every opener closed: a new pipe: EAGAIN",
            "the reader thread read \"to the reader thread\"",
            "read \"from the writer thread\"",
            "read: 5 \"still\"",
            "rmdir base: 0",
        ],
    );
    assert_eq!(seen.status, 0);
}

#[test]
fn the_interval_timer_matches_linux() {
    let seen = case("conformance-timers", &[], same);
    printed(
        &seen,
        &[
            "alarm(2), 5 s were left: 5",
            "armed for 1.5 s: left between 1 and 1.5 s 1, interval 0.250000",
            "pause: EINTR",
            "  ticks 1, si_code 128 (SI_KERNEL 128)",
            "  ticks 2, what was left between 0.9 and 1 s: 1",
            "read of an empty pipe, handler without SA_RESTART: EINTR",
            "an interval timer ticked: 3",
            "a loop reading the clock took the alarm: 1",
            "setitimer with 1000000 us: EINVAL",
            "waiting on a pipe no one writes",
        ],
    );
    assert!(!seen.stdout.contains("not reached"));
    assert_eq!(seen.status, 128 + 14, "SIGALRM's default action ends it");
}

/// Go's verdicts: each test's result line without its duration (the host's, natively), and
/// the final one. The logs between them name temporary paths the host draws natively.
fn go_results(s: &str) -> String {
    s.lines()
        .filter(|l| l.starts_with("--- ") || *l == "PASS" || *l == "FAIL")
        .map(|l| l.rfind(" (").map_or(l, |i| &l[..i]))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn gos_own_net_tests_of_unix_sockets_pass_as_natively() {
    let seen = case("go-nettest", &["-test.run", "Unix|NotTemporaryRead", "-test.v"], go_results);
    let passed = seen.stdout.lines().filter(|l| l.starts_with("--- PASS")).count();
    assert_eq!(passed, 16, "{}", seen.stdout);
    assert!(seen.stdout.contains("--- PASS: TestUnixConnReadMsgUnixSCMRightsCloseOnExec"), "{}", seen.stdout);
    assert!(seen.stdout.contains("--- PASS: TestNotTemporaryRead"), "a zero SO_LINGER resets");
    assert!(!seen.stdout.contains("--- FAIL"));
    assert_eq!(seen.status, 0);
}

#[test]
fn ipv6_loopback_dual_stack_sockets_and_netlink_match_linux() {
    let seen = case("conformance-inet6", &[], same);
    printed(
        &seen,
        &[
            "client peer: family 10 len 28 ::1 port 47311",
            "got: hello",
            "connect to nobody: ECONNREFUSED",
            "send after the reset: ECONNRESET",
            "send again: EPIPE",
            "bind 0.0.0.0 beside it: EADDRINUSE",
            "v4 peer as v6 sees it: family 10 len 28 ::ffff:127.0.0.1 port set",
            "bind 0.0.0.0 beside v6only: 0",
            "the v4 listener has it: 1",
            "connect it to a mapped address: ENETUNREACH",
            "from: family 10 len 28 ::ffff:127.0.0.1 port set",
            "  recv: ECONNREFUSED",
            "lo inet6 ::1 mask ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff flags UP LOOPBACK RUNNING",
            "address of lo: ::1/128 family 10 scope 254 multi 1",
            "link 999: error ENODEV, seq 9",
            "netlink socket of another protocol: EPROTONOSUPPORT",
        ],
    );
    assert_eq!(seen.status, 0);
}

#[test]
fn gos_own_net_tests_of_interfaces_and_dual_stack_pass_as_natively() {
    let seen = case("go-nettest", &["-test.run", "Interface|DualStack|IPv6", "-test.v", "-test.short"], go_results);
    for test in [
        "TestInterfaces",
        "TestInterfaceAddrs",
        "TestInterfaceUnicastAddrs",
        "TestInterfaceMulticastAddrs",
        "TestDualStackTCPListener",
        "TestDualStackUDPListener",
        "TestDialerDualStackFDLeak",
        "TestIPv6WriteMsgUDPAddrPortTargetAddrIPVersion",
    ] {
        assert!(seen.stdout.contains(&format!("--- PASS: {test}\n")), "{test}:\n{}", seen.stdout);
    }
    assert!(!seen.stdout.contains("--- FAIL"), "{}", seen.stdout);
    assert_eq!(seen.status, 0);
}

#[test]
fn a_program_shown_the_hosts_cpus_counts_them_as_natively() {
    let host = std::thread::available_parallelism().map_or(1, |n| n.get()).to_string();
    let prog = guest("conformance-cpus").to_string_lossy().into_owned();
    let n = native("conformance-cpus", &[]);
    let out = deja(&["run", "--no-probe", "--audit", "3", "--cpus", &host, &prog]);
    assert!(stderr(&out).contains("deja: audit: identical over 3 runs"), "{}", stderr(&out));
    assert_eq!(stdout(&out), n.stdout, "under deja --cpus {host} (left) and natively (right) differ");
    assert!(n.stdout.contains(&format!("get_nprocs: {host}\n")), "{}", n.stdout);
    assert!(n.stdout.contains(&format!("/proc/cpuinfo: {host} processors")), "{}", n.stdout);
    // And the default: one CPU, whatever the host has.
    let one = deja(&["run", "--no-probe", &prog]);
    assert!(stdout(&one).contains("CPUs in the mask: 1\nget_nprocs: 1\n"), "{}", stdout(&one));
    assert!(stdout(&one).contains("/sys/devices/system/cpu/online: 0\n"), "{}", stdout(&one));
    assert!(stdout(&one).contains("/proc/cpuinfo: 1 processors, the last numbered 0"), "{}", stdout(&one));
    assert!(stdout(&one).contains("sched_setaffinity past the last CPU: EINVAL"), "{}", stdout(&one));
    // Go sizes its scheduler from the same mask.
    let go = guest("go-goroutines").to_string_lossy().into_owned();
    for cpus in ["1", "3"] {
        let out = deja(&["run", "--no-probe", "--cpus", cpus, "--env", "GODEBUG=schedtrace=1", &go]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert!(stderr(&out).contains(&format!("gomaxprocs={cpus} ")), "{}", stderr(&out));
    }
    // CPUID agrees: leaf 1 counts 4 logical processors (HTT set), leaf 0xb's core level 4,
    // whether deja answers a rewritten `cpuid` or a trapped one (CPUID faulting; on a host
    // without it the vCPU asks KVM, whose table deja sets to the same).
    let info = guest("hostinfo").to_string_lossy().into_owned();
    for env in [None, Some(("DEJA_REWRITE", "off"))] {
        let mut cmd = std::process::Command::new(deja_bin());
        cmd.args(["run", "--no-probe", "--cpus", "4", &info]);
        if let Some((k, v)) = env {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        let text = stdout(&out);
        assert!(text.contains("cpuid 0x00000001.0: 00050654 00040800 3ed83203 178bf9fd\n"), "{env:?}: {text}");
        assert!(text.contains("cpuid 0x0000000b.1: 00000002 00000004 00000201 00000000\n"), "{env:?}: {text}");
    }
    // The replay command carries it, and the working directory.
    let (_, r) = run_json(&["--cwd", "/data", "--cpus", "3", &prog]);
    let replay = r["replay"].as_str().unwrap_or_default();
    assert!(replay.contains("--cwd /data --cpus 3"), "{replay}");
    // Out of range is refused before the program runs.
    let out = deja(&["run", "--no-probe", "--cpus", "0", &prog]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

#[test]
fn a_program_starts_in_the_directory_it_is_given() {
    let dir = std::env::temp_dir().join(format!("deja-conformance-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let host = dir.join("x.txt");
    std::fs::write(&host, "from --cwd\n").unwrap();
    let cat = guest("cat").to_string_lossy().into_owned();
    let decl = format!("{}:/data/in/x.txt", host.display());
    let out = deja(&["run", "--no-probe", "--cwd", "/data/in", "--file", &decl, &cat, "--", "x.txt"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("x.txt: \"from --cwd\\n\""), "{}", stdout(&out));
    // A directory the program does not have is refused before it runs, with the reason.
    let out = deja(&["run", "--no-probe", "--cwd", "/data/nope", &cat]);
    assert_eq!(out.status.code(), Some(126), "{}", stderr(&out));
    assert!(stderr(&out).contains("working directory \"/data/nope\": no such directory"), "{}", stderr(&out));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn splice_tee_and_vmsplice_match_linux() {
    let seen = case("conformance-splice", &[], same);
    printed(
        &seen,
        &[
            "socket to pipe: 13",
            "offset pointer now 108, file offset 5",
            "client reads: 8 \", shello\"",
            "second pipe: 10 \"abcdabcdef\"",
            "got vms|plice",
            "vmsplice out of an empty pipe, SPLICE_F_NONBLOCK: EAGAIN",
            "splice into a full pipe, SPLICE_F_NONBLOCK: EAGAIN",
            "waiting splice: 4",
            "file at 200: late",
            "offset on a socket: EINVAL",
            "to a pipe without readers: EPIPE",
        ],
    );
    assert_eq!(seen.status, 0);
}

#[test]
fn permission_bits_and_memory_devices_match_linux() {
    let seen = case("conformance-perms", &[], same);
    printed(
        &seen,
        &[
            "setuid to root: EPERM",
            "setuid(-1): EINVAL",
            "connect to a socket without write permission: EACCES",
            "setresuid(own, -1, root): EPERM",
            "setgroups: EPERM",
            "setfsuid to root gives the one before: 1000",
            "read-only file, O_WRONLY: EACCES",
            "access f: F ok, R EACCES, W ok, X EACCES",
            "write through it: 3",
            "open it again: EACCES",
            "create in a read-only directory: EACCES",
            "rename in it: EACCES",
            "truncate it to a negative length: EINVAL",
            "rename a read-only directory to another parent: EACCES",
            "rename it within its parent: 0",
            "chdir into it: EACCES",
            "its listing: EACCES",
            "mapped: 0, written: 7",
            "/dev/zero: char 1, rdev 1:5, mode 666",
            "write /dev/full: ENOSPC",
        ],
    );
    assert_eq!(seen.status, 0);
}

#[test]
fn shared_file_mappings_follow_their_files_as_linux_s_page_cache() {
    let seen = case("conformance-mmap", &[], same);
    printed(
        &seen,
        &[
            "after a pwrite over it: B B",
            "after the file grew: C C",
            "appended: DDDD then 0",
            "what was cut is gone: 0, the rest stays: B",
            "an unlinked file's mapping still follows it: E",
            "mmap 16 GiB of it: 0",
            "and it follows too: F",
            "a writable shared mapping of a read-only descriptor: EACCES",
        ],
    );
    assert_eq!(seen.status, 0);
}

#[test]
fn proc_self_fd_matches_linux() {
    let seen = case("conformance-procfd", &[], same);
    printed(
        &seen,
        &[
            "inherited fds closed",
            "listing: . .. 0 1 2 3 4 5 6 7 8 9 10 11 12 13 (2 directories, 14 links; the listing's own fd 13)",
            "readlink 1: pipe:[=fstat]",
            "readlink 3: BASE/f",
            "lstat 3: link 0700 size 64 nlink 1",
            "stat 3: file, as fstat",
            "readlink 4: pipe:[=fstat]",
            "lstat 5: link 0300 size 64 nlink 1",
            "readlink 6: socket:[=fstat]",
            "stat 8: socket, as fstat",
            "readlink 9: anon_inode:[eventfd]",
            "readlink 10: anon_inode:[eventpoll]",
            "stat 10: anonymous, as fstat",
            "readlink 11: /dev/null",
            "readlink 12: BASE",
            "read: hello",
            "the first fd's offset: 5",
            "read: through",
            "open entry 6: ENXIO",
            "open entry 9: ENXIO",
            "open entry 12: ok",
            "open with O_NOFOLLOW: ELOOP",
            "readlink after rename: BASE/g",
            "readlink after unlink: BASE/f (deleted)",
            "read the unlinked file through it: 5",
            "stat a closed fd's entry: ENOENT",
            "stat /proc/self/fd/03: ENOENT",
            "first 6: . .. 0 1 2 3",
            "the rest: 4 6 7 8 9 10 11 12",
            "opened after the listing ended: 5",
            "at the end:",
            "rewound, no room: EINVAL",
            "readlink /dev/fd: /proc/self/fd",
            "readlink /dev/stdin: /proc/self/fd/0",
            "written to /dev/stdout",
            "it is a directory",
        ],
    );
    assert_eq!(seen.status, 0);
}

/// The routes deja gives a node at 10.0.0.5, as `conformance-procfd routes` prints them (a host
/// has its own routes: this is compared with deja's model, not with Linux's output; the
/// layout, the attributes and their order are Linux's, which the native run shows).
const ROUTES_OF_10_0_0_5: &[&str] = &[
    "inet main unicast default dev 2 proto 3 scope 253 table 254 attrs 15,4 multi 1",
    "inet main unicast 10.0.0.0/24 src 10.0.0.5 dev 2 proto 2 scope 253 table 254 attrs 15,1,7,4 multi 1",
    "inet local local 10.0.0.5/32 src 10.0.0.5 dev 2 proto 2 scope 254 table 255 attrs 15,1,7,4 multi 1",
    "inet local broadcast 10.0.0.255/32 src 10.0.0.5 dev 2 proto 2 scope 253 table 255 attrs 15,1,7,4 multi 1",
    "inet local local 127.0.0.0/8 src 127.0.0.1 dev 1 proto 2 scope 254 table 255 attrs 15,1,7,4 multi 1",
    "inet local local 127.0.0.1/32 src 127.0.0.1 dev 1 proto 2 scope 254 table 255 attrs 15,1,7,4 multi 1",
    "inet local broadcast 127.255.255.255/32 src 127.0.0.1 dev 1 proto 2 scope 253 table 255 attrs 15,1,7,4 multi 1",
    "inet6 main unicast ::1/128 metric 256 dev 1 proto 2 scope 0 table 254 attrs 15,1,6,4,12,20 multi 1",
    "inet6 main unicast fd00:6465:6a61::/96 metric 256 dev 2 proto 2 scope 0 table 254 attrs 15,1,6,4,12,20 multi 1",
    "inet6 main unicast default metric 1024 dev 2 proto 3 scope 0 table 254 attrs 15,6,4,12,20 multi 1",
    "inet6 local local ::1/128 metric 0 dev 1 proto 2 scope 0 table 255 attrs 15,1,6,4,12,20 multi 1",
    "inet6 local local fd00:6465:6a61::a00:5/128 metric 0 dev 2 proto 2 scope 0 table 255 attrs 15,1,6,4,12,20 multi 1",
];

#[test]
fn a_node_dumps_its_routes_and_finds_its_default_host() {
    // Natively: the host's routes, in the same layout; the case parses them to the end.
    let n = native("conformance-procfd", &["routes"]);
    assert!(n.stdout.starts_with("netlink socket: ok\ninet "), "{}", n.stdout);
    assert!(n.stdout.contains("\none route: "), "{}", n.stdout);
    // Under deja, on a cluster's network.
    let dir = std::env::temp_dir().join(format!("deja-conformance-routes-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let toml = format!(
        "seed = 1\n[[node]]\nname = \"n\"\naddress = \"10.0.0.5\"\nbinary = \"{}\"\nargs = [\"routes\"]\n",
        guest("conformance-procfd").display()
    );
    std::fs::write(dir.join("routes.toml"), toml).unwrap();
    let out = deja(&["run", "--no-probe", "--audit", "2", dir.join("routes.toml").to_str().unwrap()]);
    std::fs::remove_dir_all(&dir).ok();
    let err = stderr(&out);
    assert!(err.contains("deja: audit: identical over 2 runs"), "{err}");
    let printed = stdout(&out);
    let lines: Vec<&str> = printed.lines().map(|l| l.strip_prefix("[n] ").unwrap_or(l)).collect();
    let mut want = vec!["netlink socket: ok"];
    want.extend_from_slice(ROUTES_OF_10_0_0_5);
    want.extend(["default route's interface: 2", "default host: 10.0.0.5", "IPv4 only:"]);
    want.extend_from_slice(&ROUTES_OF_10_0_0_5[..7]);
    want.push("one route: error EOPNOTSUPP");
    assert_eq!(lines, want);
    assert_eq!(out.status.code(), Some(0), "{err}");
    // Alone, without a network: loopback's routes and no default route.
    let d = under_deja("conformance-procfd", &["routes"]);
    let mut want = vec!["netlink socket: ok"];
    want.extend_from_slice(&ROUTES_OF_10_0_0_5[4..7]);
    want.push(ROUTES_OF_10_0_0_5[7]);
    want.push(ROUTES_OF_10_0_0_5[10]);
    want.extend(["default route's interface: 0", "IPv4 only:"]);
    want.extend_from_slice(&ROUTES_OF_10_0_0_5[4..7]);
    want.push("one route: error EOPNOTSUPP");
    assert_eq!(d.stdout.lines().collect::<Vec<_>>(), want);
    assert_eq!(d.status, 0);
}

#[test]
fn processes_match_linux() {
    let n = native("conformance-procs", &[]);
    let seen = under_deja("conformance-procs", &[]);
    assert_eq!(seen, n, "under deja (left) and natively (right) differ");
    printed(
        &seen,
        &[
            "_exit(263), wait4 gave the child 1: exited 7 (status 0x700)",
            "_exit(42), wait4 gave the child 1: exited 42 (status 0x2a00)",
            "  it: killed by SIGTERM, core 0 (status 0xf)",
            "SIGTERM ignored, WNOHANG: 0",
            "then SIGKILL: killed by SIGKILL, core 0 (status 0x9)",
            "abort(): killed by SIGABRT, core 0 (status 0x6)",
            "a store to address 16: killed by SIGSEGV, core 0 (status 0xb)",
            "a division by zero: killed by SIGFPE, core 0 (status 0x8)",
            "a write to a pipe without readers: killed by SIGPIPE, core 0 (status 0xd)",
            "before it ends: 0, status untouched 1",
            "after it ended, WNOHANG gives the child: 1",
            "  si_pid is the child 1, si_signo 17, si_code 1 (CLD_EXITED 1), si_status 5, si_uid ours 1",
            "  si_pid is the child 1, si_code 2 (CLD_KILLED 2), si_status 15",
            "waitpid of a grandchild: ECHILD",
            "exit(3): handled 1, signo 17, si_code 1 (CLD_EXITED), si_status 3, si_pid is the child 1, si_uid ours 1",
            "two children ended while blocked: SIGCHLD pending 1",
            "wait: ECHILD",
            "MAP_SHARED 2, MAP_PRIVATE 1, a global 1, the heap parent",
            "the file offset the child moved: 3",
            "exit_group(11): exited 11 (status 0xb00)",
            "execve with another thread: exited 12 (status 0xc00)",
            "a child another thread forked, reaped by the main thread: exited 21 (status 0x1500)",
            "through two children: HELLO FROM THE FIRST CHILD",
            "after we closed it: TWO, then 0",
            "  O_CLOEXEC: EBADF",
            "  dup: open, FD_CLOEXEC 0",
            "  read from the shared offset: 6 \"456789\"",
            "our offset after the program read: 10",
            "  argv[0] custom-name",
            "  env DEJA_TWO=two words",
            "  the pid it had before execve: 1, its parent still: 1",
            "  SIGUSR2 still blocked: 1, still pending: 1",
            "  the alarm still set: 1",
            "two scripts naming each other: ELOOP",
            "a text file without #!: ENOEXEC",
            "  argv[1] interp with  spaces",
            "  argv[2] BASE/with-arg",
            "vfork and _exit: the child wrote our memory 1",
            "vfork and a failed execve: ENOENT",
            "clone(CLONE_VM | CLONE_VFORK): the child wrote our memory 1",
            "  fd 26, a file action's dup2: 4 \"data\"",
            "posix_spawn with an open that fails: ENOENT",
            "child: setsid as a group leader: EPERM",
            "parent: setpgid of a child in another session: EPERM",
            "setpgid of a grandchild: ESRCH",
            "leader: second child: killed by SIGUSR1, core 0 (status 0xa)",
            "  second: killed by SIGTERM, core 0 (status 0xf)",
            "  after execve, PR_GET_PDEATHSIG: 10",
            "grandchild: its parent was the middle process 1; got signal 10, si_code 0; now getppid is the subreaper 1",
            "the orphan, reaped by us: exited 17 (status 0x1100)",
            "wait: no child left: ECHILD",
            "rmdir base: 0",
        ],
    );
    assert_eq!(seen.status, 0);
}

#[test]
fn a_go_program_runs_itself_through_os_exec_as_natively() {
    let seen = case("go-exec", &[], same);
    printed(
        &seen,
        &[
            "Output: \"hello|two words|\\n\"",
            "  read: \"THROUGH A STDIN PIPE\"",
            "  its error: exit status 3 (ExitCode 3, Exited true, Signaled false)",
            "Env: \"DEJA_GO=1\\nEMPTY=\\nTWO=two words\\n\"",
            "ExitError's Stderr when Output captured it: \"stderr before exit 4\\n\"",
            "  Wait: signal: killed (ExitCode -1, Exited false, Signaled true, killed)",
            "  Signal after Wait: os: process already finished",
            "  Wait after cancel: signal: killed (ExitCode -1, Exited false, Signaled true, killed)",
            "a missing program: fork/exec /deja/no/such/program: no such file or directory",
            "  fd 3 gave: \"written to fd 3 by the child\"",
            "Dir /tmp: \"/tmp\\n\"",
            "Setsid: group is its pid true, session is its pid true, parent is true",
            "  gave \"DOWN|THE|PIPELINE\\n\"",
            "four children at once: 12 lines, first \"line 1 of child 0\", last \"line 3 of child 3\"",
            "  Wait4: the child true, exited true, status 0, err <nil>",
            "  Wait: exit status 7, code 7, err <nil>",
            "done",
        ],
    );
    assert_eq!(seen.status, 0);
}

/// A fork of a process with 560 MiB of private memory written (more than half of the default
/// guest memory, so only copy-on-write lets it happen), both sides writing after it; then the
/// monitor's own write into a child's page, protections changed after the fork, a read-only
/// page written (SIGSEGV), a private file mapping, a shared mapping and a fork of a fork.
#[test]
fn fork_copies_on_write_as_linux_does() {
    let seen = case("conformance-cow", &[], same);
    assert_eq!(
        seen.stdout.lines().collect::<Vec<_>>(),
        [
            "big: fork with 560 MiB written: ok",
            "big: the child saw its own writes and the memory as at the fork (0: yes): exit 0",
            "big: pages of the parent the child changed: 0",
            "child: its buffer \"from the pipe\", its page \"child's page\", the grandchild kept to its own",
            "small: the child: killed by SEGV",
            "parent: its buffer \"parent's buffer\", its page \"parent's page\", its read-only page \"read-only\"",
            "parent: the private file mapping \"file as written\"",
            "parent: the file \"file as written\"",
            "parent: the shared mapping \"grandchild\"",
        ]
    );
    assert_eq!(seen.status, 0);
}

/// Debian's static busybox (the `busybox-static` package `.ci/run` installs).
const BUSYBOX: &str = "/usr/bin/busybox";

/// A fresh directory tree to run as `--root`: busybox at `/bin/busybox` with each of
/// `applets` linked to it in `/bin`, and each host program of `programs` at its own path with
/// the loader and libraries it needs. An empty `/data` is the programs' to write in.
fn root_of(name: &str, applets: &[&str], programs: &[&str]) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let root = std::env::temp_dir().join(format!("deja-{name}-root-{}", std::process::id()));
    std::fs::remove_dir_all(&root).ok();
    let put = |path: &str, bytes: &[u8]| {
        let at = root.join(path.trim_start_matches('/'));
        std::fs::create_dir_all(at.parent().unwrap()).unwrap();
        std::fs::write(&at, bytes).unwrap();
        std::fs::set_permissions(&at, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    put("/bin/busybox", &std::fs::read(BUSYBOX).unwrap());
    for applet in applets {
        std::os::unix::fs::symlink("busybox", root.join("bin").join(applet)).unwrap();
    }
    for prog in programs {
        let bytes = std::fs::read(prog).unwrap();
        put(prog, &bytes);
        for (path, data) in deja_inputs::dynlink::host_closure(&bytes, std::path::Path::new(prog), prog).unwrap() {
            put(&path, &data);
        }
    }
    std::fs::create_dir_all(root.join("data")).unwrap();
    root
}

/// Runs `prog args` under deja, `--audit 3`, with `root` as its root and `envs` in its
/// environment, then removes the root. The audit must find the runs identical and the
/// program's stdout must equal `native`'s. Gives stdout, deja's stderr and the exit status.
fn in_root(
    what: &str,
    root: &std::path::Path,
    envs: &[(&str, &str)],
    prog: &str,
    args: &[&str],
    native: &std::process::Output,
) -> (String, String, Option<i32>) {
    let r = root.to_string_lossy().into_owned();
    let env: Vec<String> = envs.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let mut full = vec!["run", "--no-probe", "--audit", "3", "--root", &r];
    for e in &env {
        full.extend_from_slice(&["--env", e]);
    }
    full.extend_from_slice(&[prog, "--"]);
    full.extend_from_slice(args);
    let out = deja(&full);
    std::fs::remove_dir_all(root).ok();
    let err = stderr(&out);
    assert!(err.contains("deja: audit: identical over 3 runs"), "{what} is not deterministic under deja:\n{err}");
    assert_eq!(stdout(&out), stdout(native), "under deja (left) and natively (right) differ; deja said:\n{err}");
    (stdout(&out), err, out.status.code())
}

/// The script of [`redis_saves_in_the_background_and_loads_what_it_saved_as_natively`]: a
/// server started in the background, 100,001 keys, `BGSAVE` (the server forks a child that
/// writes the snapshot while the parent serves), the snapshot loaded by a second server.
/// It waits by asking the server, never by sleeping a guessed time. `$D` is the data directory,
/// `$P` the port.
const REDIS_SCRIPT: &str = r#"
up() { until redis-cli -p $P ping 2>/dev/null | grep -q PONG; do sleep 0.05; done; }
redis-server --port $P --save "" --dir $D --logfile $D/first.log --enable-debug-command yes &
up
redis-cli -p $P set greeting hello
redis-cli -p $P debug populate 100000
redis-cli -p $P bgsave
while redis-cli -p $P info persistence | grep -q rdb_bgsave_in_progress:1; do sleep 0.05; done
redis-cli -p $P set after the-save
redis-cli -p $P info persistence | grep -E "^rdb_(last_bgsave_status|saves|changes_since_last_save)"
redis-cli -p $P shutdown nosave
wait
redis-server --port $P --save "" --dir $D --logfile $D/second.log &
up
redis-cli -p $P dbsize
redis-cli -p $P get greeting
redis-cli -p $P get key:99999
redis-cli -p $P exists after
redis-cli -p $P shutdown nosave
wait
echo "servers: ended"
"#;

/// A multi-process server no one here wrote: Debian's Redis (dynamically linked, jemalloc)
/// saving in the background, as it ships. Its `BGSAVE` forks a child that writes the snapshot
/// of the 100,001 keys the fork froze (copy-on-write), while the parent goes on and changes
/// them; the second server loads the snapshot. Compared with the same script run natively by
/// the same binaries (`redis-server` from Debian's package, which `.ci/run` installs).
#[test]
fn redis_saves_in_the_background_and_loads_what_it_saved_as_natively() {
    let (server, cli, bb) = ("/usr/bin/redis-server", "/usr/bin/redis-cli", BUSYBOX);
    needs(&[server, cli, bb], "redis-server redis-tools busybox-static");
    // A root with busybox and its applets, both Redis programs and their libraries.
    let root = root_of("redis", &["sh", "grep", "sleep"], &[server, cli]);

    // Natively: the same busybox shell and Redis binaries, a fresh directory, a free port.
    let data = std::env::temp_dir().join(format!("deja-redis-data-{}", std::process::id()));
    std::fs::remove_dir_all(&data).ok();
    std::fs::create_dir_all(&data).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port().to_string();
    let native = Command::new(bb)
        .args(["sh", "-c", REDIS_SCRIPT])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("D", &data)
        .env("P", &port)
        .output()
        .expect("run busybox natively");
    std::fs::remove_dir_all(&data).ok();

    let (out, _, status) = in_root(
        "Redis",
        &root,
        &[("PATH", "/usr/bin:/bin"), ("D", "/data"), ("P", "6379")],
        "sh",
        &["-c", REDIS_SCRIPT],
        &native,
    );
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "OK",
            "OK",
            "Background saving started",
            "OK",
            "rdb_changes_since_last_save:1",
            "rdb_last_bgsave_status:ok",
            "rdb_saves:1",
            "100001",
            "hello",
            "value:99999",
            "0",
            "servers: ended",
        ]
    );
    assert_eq!(status, Some(0));
}

/// The script of [`perl_starts_processes_as_natively`].
const PERL_SCRIPT: &str = r#"
$| = 1;
my $x = qx(echo hi | tr a-z A-Z);
print "qx: $x";
print "qx status: ", $? >> 8, "\n";
my $me = $$;
my $p = fork();
if ($p == 0) { print "child: its parent is us ", (getppid() == $me ? 1 : 0), "\n"; exit 3 }
waitpid($p, 0);
print "fork: the child exited ", $? >> 8, "\n";
system("sh", "-c", "exit 5");
print "system: ", $? >> 8, "\n";
open(my $fh, "-|", "echo", "piped") or die "open: $!";
my $l = <$fh>;
close $fh;
print "open -|: $l";
open(my $out, "|-", "tr", "a-z", "A-Z") or die "open: $!";
print $out "to a pipe\n";
close $out;
pipe(my $r, my $w) or die "pipe: $!";
my $k = fork();
if (!$k) { close $r; print $w "through pipe()\n"; close $w; exit 0 }
close $w;
my $got = <$r>;
print "pipe: $got";
waitpid($k, 0);
my @kids = map { my $c = fork(); if (!$c) { exit $_ } $c } 1 .. 3;
print "three children: ", join(" ", map { waitpid($_, 0); $? >> 8 } @kids), "\n";
my $s = fork();
if (!$s) { sleep 100; exit 0 }
kill 'TERM', $s;
waitpid($s, 0);
print "killed by signal ", $? & 127, "\n";
my $e = fork();
if (!$e) { exec("sh", "-c", "echo exec replaced the child; exit 9") or die "exec: $!" }
waitpid($e, 0);
print "exec: ", $? >> 8, "\n";
print "wait with no child left: ", wait(), "\n";
"#;

/// An interpreter no one here wrote: Debian's perl (dynamically linked, from `perl-base`)
/// running commands through `qx`, `system`, pipes opened both ways, `pipe` and `fork`, `kill`
/// and `exec`, with busybox as its `/bin/sh`, against the same script run natively.
#[test]
fn perl_starts_processes_as_natively() {
    let perl = "/usr/bin/perl";
    needs(&[perl, BUSYBOX], "perl-base busybox-static");
    let root = root_of("perl", &["sh", "echo", "tr"], &[perl]);
    let native =
        Command::new(perl).args(["-e", PERL_SCRIPT]).env_clear().env("PATH", "/usr/bin:/bin").output().unwrap();
    let (out, _, status) = in_root("perl", &root, &[("PATH", "/usr/bin:/bin")], perl, &["-e", PERL_SCRIPT], &native);
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "qx: HI",
            "qx status: 0",
            "child: its parent is us 1",
            "fork: the child exited 3",
            "system: 5",
            "open -|: piped",
            "TO A PIPE",
            "pipe: through pipe()",
            "three children: 1 2 3",
            "killed by signal 15",
            "exec replaced the child",
            "exec: 9",
            "wait with no child left: -1",
        ]
    );
    assert_eq!(status, Some(0));
}

/// The configuration of [`nginx_serves_with_its_workers_and_shuts_down_as_natively`]: a master
/// and two workers, everything it writes under `DIR`, pages from `WWW`, on `PORT`.
const NGINX_CONF: &str = "daemon off;
master_process on;
worker_processes 2;
user root;
error_log DIR/error.log info;
pid DIR/nginx.pid;
events { worker_connections 64; }
http {
    access_log DIR/access.log;
    client_body_temp_path DIR/body;
    proxy_temp_path DIR/proxy;
    fastcgi_temp_path DIR/fastcgi;
    uwsgi_temp_path DIR/uwsgi;
    scgi_temp_path DIR/scgi;
    server {
        listen 127.0.0.1:PORT;
        root WWW;
        location / { }
    }
}
";

/// The script: nginx started in the background and waited for by asking it, a page and a
/// missing one, a graceful shutdown (`SIGQUIT`: the master tells its workers, reaps them and
/// exits), and what its logs say of its workers. `$C` is the configuration, `$D` its
/// directory, `$P` the port.
const NGINX_SCRIPT: &str = r#"
nginx -c $C &
until wget -q -O /dev/null http://127.0.0.1:$P/ 2>/dev/null; do sleep 0.05; done
wget -q -O - http://127.0.0.1:$P/
wget -S -O /dev/null http://127.0.0.1:$P/nope 2>&1 | grep "HTTP/"
kill -QUIT $(cat $D/nginx.pid)
wait
echo "nginx ended: $?"
echo "workers started: $(grep -c 'start worker process [0-9]' $D/error.log)"
echo "workers exited with 0: $(grep -c 'worker process [0-9]* exited with code 0' $D/error.log)"
echo "requests logged: $(wc -l < $D/access.log)"
"#;

/// A multi-process server no one here wrote: Debian's nginx (`nginx-light`, dynamically
/// linked) as it ships, a master and two workers forked from it, each with a socket pair to
/// the master (which asks for signal-driven I/O on its end: recorded, no `SIGIO` sent, and the
/// summary says so), the workers sharing the listening socket, served pages fetched by
/// busybox's `wget`, and a graceful shutdown. Compared with the same script run natively.
#[test]
fn nginx_serves_with_its_workers_and_shuts_down_as_natively() {
    let nginx = "/usr/sbin/nginx";
    needs(&[nginx, BUSYBOX], "nginx-light busybox-static");
    let applets = ["sh", "wget", "sleep", "grep", "cat", "kill", "wc"];
    let conf =
        |dir: &str, www: &str, port: &str| NGINX_CONF.replace("DIR", dir).replace("WWW", www).replace("PORT", port);
    let page = b"hello from nginx\n";

    // Natively: busybox's applets first in PATH, a fresh directory, a free port.
    let base = std::env::temp_dir().join(format!("deja-nginx-native-{}", std::process::id()));
    std::fs::remove_dir_all(&base).ok();
    for d in ["bin", "data", "www"] {
        std::fs::create_dir_all(base.join(d)).unwrap();
    }
    for applet in applets {
        std::os::unix::fs::symlink(BUSYBOX, base.join("bin").join(applet)).unwrap();
    }
    std::fs::write(base.join("www/index.html"), page).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port().to_string();
    let data = base.join("data").to_string_lossy().into_owned();
    let conf_path = base.join("nginx.conf");
    std::fs::write(&conf_path, conf(&data, &base.join("www").to_string_lossy(), &port)).unwrap();
    let native = Command::new(BUSYBOX)
        .args(["sh", "-c", NGINX_SCRIPT])
        .env_clear()
        .env("PATH", format!("{}:/usr/sbin", base.join("bin").display()))
        .env("C", &conf_path)
        .env("D", &data)
        .env("P", &port)
        .output()
        .unwrap();
    std::fs::remove_dir_all(&base).ok();

    let root = root_of("nginx", &applets, &[nginx]);
    std::fs::create_dir_all(root.join("www")).unwrap();
    std::fs::write(root.join("www/index.html"), page).unwrap();
    std::fs::create_dir_all(root.join("etc/nginx")).unwrap();
    std::fs::write(root.join("etc/nginx/nginx.conf"), conf("/data", "/www", "8080")).unwrap();
    let (out, err, status) = in_root(
        "nginx",
        &root,
        &[("PATH", "/bin:/usr/sbin"), ("C", "/etc/nginx/nginx.conf"), ("D", "/data"), ("P", "8080")],
        "sh",
        &["-c", NGINX_SCRIPT],
        &native,
    );
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "hello from nginx",
            "  HTTP/1.1 404 Not Found",
            "wget: server returned error: HTTP/1.1 404 Not Found",
            "nginx ended: 0",
            "workers started: 2",
            "workers exited with 0: 2",
            "requests logged: 3",
        ]
    );
    assert!(err.contains("deja: served without what Linux would add: SIGIO (O_ASYNC with an owner) ×2"), "{err}");
    assert_eq!(status, Some(0));
}
