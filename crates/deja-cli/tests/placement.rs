//! The guest placement (docs/ARCHITECTURE.md, "The kernel inside the VM", stage 2): the kernel
//! image booted in a VM's window, its state crossing in and out whole, and a program's syscalls
//! served in the guest with no VM exit, leaving the kernel in the state the host placement's
//! kernel reaches from the same calls.

use std::path::PathBuf;
use std::sync::OnceLock;

use deja_kernel::host::jumps::Jumps;
use deja_kernel::mm::mem::FakeMemory;
use deja_kernel::placement::Failure;
use deja_kernel::{ExitStatus, Kernel, ProgramSpec, RunReport, SyscallOutcome};
use deja_vmm::placement::{run_program, run_raw, syscall_loop, PlacementError, CODE_VA, DATA_VA, KEPT, LOOP_RETURN};
use deja_vmm::session::BootOptions;
use deja_vmm::Settings;

use crate::common::*;

const GETPPID: u32 = 110;
const GETPID: u32 = 39;
const HEAP: u64 = 128 << 20;

/// The image, built once per test binary (`cargo xtask guest-kernel`).
fn image() -> &'static [u8] {
    static IMAGE: OnceLock<Vec<u8>> = OnceLock::new();
    IMAGE.get_or_init(|| {
        let path = PathBuf::from(xtask("guest-kernel").lines().last().unwrap_or_default().trim());
        std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    })
}

/// A kernel that loaded a real program (a static-PIE Rust guest), saved.
fn saved_kernel(seed: u64) -> Vec<u8> {
    let bytes = std::fs::read(guest("hello")).unwrap();
    let mut spec = ProgramSpec::for_program(bytes, "hello", ["a".to_string()], seed);
    spec.vdso = deja_kernel::time::vdso::VdsoMode::Off;
    let (kernel, _) = Kernel::load(spec, &mut FakeMemory::new(1 << 16)).unwrap();
    kernel.save()
}

/// The host placement's kernel after the same calls as [`syscall_loop`]: `count` calls of `nr`
/// with `args`, then `exit_group(status)` (with the loop's other argument registers); its state
/// and the last call's result.
fn on_the_host(state: &[u8], nr: u32, args: [u64; 6], count: u32, status: u32) -> (Vec<u8>, u64) {
    let mut kernel = Kernel::restore(state).unwrap();
    let mut mem = FakeMemory::new(16);
    let mut last = 0;
    for _ in 0..count {
        match kernel.syscall(&mut mem, u64::from(nr), args) {
            SyscallOutcome::Return(v) => last = v,
            other => panic!("{other:?}"),
        }
    }
    let exit = kernel.syscall(&mut mem, 231, [u64::from(status), args[1], args[2], args[3], args[4], args[5]]);
    assert!(matches!(exit, SyscallOutcome::Exit(_)), "{exit:?}");
    (kernel.save(), last)
}

fn word(data: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(data[at..at + 8].try_into().unwrap())
}

/// Arguments the loop passes: a getppid or getpid ignores them, the trace digest does not.
const ARGS: [u64; 6] = [0xa1a1, 0xa2a2, 0xa3a3, 0xa4a4, 0xa5a5, 0xa6a6];

#[test]
fn syscalls_served_in_the_guest_leave_the_kernel_as_the_host_placement_does() {
    let state = saved_kernel(7);
    let count = 2000;
    let run = run_raw(image(), &state, &syscall_loop(GETPPID, ARGS, count, 3), HEAP).unwrap();
    assert!(run.booted == state, "the state crossed into the guest and back byte for byte");
    assert_eq!(run.served, u64::from(count) + 1, "every call, exit_group included, was served in the guest");
    assert_eq!(run.program_exits, 1, "no exit but the kernel's last host call");
    let (host, last) = on_the_host(&state, GETPPID, ARGS, count, 3);
    assert!(run.finished == host, "the kernel's state after the calls differs between the placements");
    assert_eq!(word(&run.data, 0), last, "the program saw the host placement's answer");
    for (i, kept) in KEPT.iter().chain(&ARGS).enumerate() {
        assert_eq!(word(&run.data, 8 + 8 * i), *kept, "register {i} survived the calls");
    }
    assert_eq!(word(&run.data, 96), DATA_VA + 0x800, "RSP is the program's again");
    assert_eq!(word(&run.data, 104), CODE_VA + LOOP_RETURN, "RCX holds the return address, as after a syscall");
    let mut finished = Kernel::restore(&run.finished).unwrap();
    let status = finished.exit_status().cloned().unwrap();
    assert_eq!(status, ExitStatus::Exited { code: 3 });
    let report = finished.finish(&FakeMemory::new(1), status);
    assert_eq!(report.syscalls, u64::from(count) + 1);
    eprintln!(
        "{count} getppid calls in the guest: {:.2} µs each, {} exit; boot {:.1} ms ({} bytes of state); digest {}",
        run.program_ns as f64 / 1e3 / f64::from(count),
        run.program_exits,
        run.boot_ns as f64 / 1e6,
        state.len(),
        report.trace_digest
    );
}

#[test]
fn a_state_larger_than_the_output_area_crosses_in_pieces() {
    let state = saved_kernel(7);
    let cap = 64 << 10;
    assert!(state.len() > 16 * cap, "{} bytes of state", state.len());
    let run =
        deja_vmm::placement::run_raw_with_output(image(), &state, &syscall_loop(GETPPID, ARGS, 3, 0), HEAP, cap as u64)
            .unwrap();
    assert!(run.booted == state, "the boot's hand-over, in pieces");
    assert!(run.finished == on_the_host(&state, GETPPID, ARGS, 3, 0).0, "the end's");
}

#[test]
fn other_seeds_and_calls_match_the_host_placement_and_differ_from_each_other() {
    let (a, b) = (saved_kernel(1), saved_kernel(2));
    assert!(a != b, "the seed is part of the state");
    let mut finished = Vec::new();
    for state in [&a, &b] {
        for nr in [GETPID, GETPPID] {
            let run = run_raw(image(), state, &syscall_loop(nr, ARGS, 10, 0), HEAP).unwrap();
            assert!(run.finished == on_the_host(state, nr, ARGS, 10, 0).0, "syscall {nr}");
            finished.push(run.finished);
        }
    }
    for i in 0..finished.len() {
        for j in i + 1..finished.len() {
            assert!(finished[i] != finished[j], "runs {i} and {j} ended in the same state");
        }
    }
}

#[test]
fn a_call_that_needs_what_this_stage_does_not_serve_stops_the_run_instead_of_answering_otherwise() {
    // An injected crash is a stop the guest placement does not make yet: the kernel says so
    // instead of answering where the host placement would crash the program.
    let bytes = std::fs::read(guest("hello")).unwrap();
    let mut spec = ProgramSpec::for_program(bytes, "hello", ["a".to_string()], 7);
    spec.vdso = deja_kernel::time::vdso::VdsoMode::Off;
    spec.faults.crash_at_exit = true;
    let (kernel, _) = Kernel::load(spec, &mut FakeMemory::new(1 << 16)).unwrap();
    let state = kernel.save();
    let err = run_raw(image(), &state, &syscall_loop(GETPPID, ARGS, 1, 0), HEAP).unwrap_err();
    assert!(matches!(err, PlacementError::Failed { why: Failure::Outcome, served: 2, .. }), "{err}");
    assert!(err.to_string().contains("exit_group came to an injected crash"), "{err}");
    // A null pointer is refused from the kernel's own map of the program, as on the host.
    let state = saved_kernel(7);
    let run = run_raw(image(), &state, &syscall_loop(1, [1, 0, 5, 0, 0, 0], 5, 0), HEAP).unwrap();
    assert_eq!(word(&run.data, 0) as i64, -14, "EFAULT");
    assert!(run.finished == on_the_host(&state, 1, [1, 0, 5, 0, 0, 0], 5, 0).0);
}

#[test]
fn a_damaged_state_or_image_is_refused_with_what_is_wrong() {
    let mut state = saved_kernel(7);
    state.truncate(state.len() / 2);
    let err = run_raw(image(), &state, &syscall_loop(GETPPID, ARGS, 1, 0), HEAP).unwrap_err();
    assert!(matches!(err, PlacementError::Failed { why: Failure::Restore, served: 0, .. }), "{err}");
    let err = run_raw(&image()[..4096], &saved_kernel(7), &syscall_loop(GETPPID, ARGS, 1, 0), HEAP).unwrap_err();
    assert!(matches!(err, PlacementError::BadImage { .. }), "{err}");
    // A heap too small for the state: the kernel's allocation fails inside the guest, which
    // ends the run; the monitor is untouched.
    let err = run_raw(image(), &saved_kernel(7), &syscall_loop(GETPPID, ARGS, 1, 0), 64 << 10).unwrap_err();
    assert!(matches!(err, PlacementError::Failed { why: Failure::Panic, .. }), "{err}");
}

/// `spec` run to its end in the host placement: its report and output.
fn on_the_host_placement(spec: &ProgramSpec) -> (RunReport, Vec<u8>) {
    let (mut vm, mut kernel) = deja_vmm::session::boot(spec, MEMORY, BootOptions::new(Settings::default())).unwrap();
    let mut out = Vec::new();
    let status = vm.run(&mut kernel, &mut |_, b| out.extend_from_slice(b)).unwrap();
    (kernel.finish(&vm.space, status), out)
}

/// Runs `spec` in both placements and returns (host report, guest report, host output, guest
/// output, the guest run's figures).
fn both_placements(spec: &ProgramSpec) -> (RunReport, RunReport, Vec<u8>, Vec<u8>, deja_vmm::placement::GuestRun) {
    let opts = || BootOptions::new(Settings::default());
    let (host, host_out) = on_the_host_placement(spec);
    let mut guest_out = Vec::new();
    let mut g = run_program(image(), spec, MEMORY, HEAP, opts(), &mut |_, b| guest_out.extend_from_slice(b))
        .unwrap_or_else(|e| panic!("{}: {e}", spec.exe_path));
    assert!(g.kernel.take_output().is_empty(), "the output was passed on as it was written");
    let status = g.kernel.exit_status().cloned().unwrap();
    let guest = g.kernel.finish(&g.vm.space, status);
    (host, guest, host_out, guest_out, g.run)
}

const MEMORY: u64 = 512 << 20;

#[test]
fn a_real_program_runs_in_the_guest_placement_with_the_host_placements_digest() {
    let bytes = std::fs::read(guest("hello")).unwrap();
    let spec = ProgramSpec::for_program(bytes, "hello", ["one".to_string(), "two".to_string()], 7);
    let (host, guest, host_out, guest_out, run) = both_placements(&spec);
    assert_eq!(guest.exit, host.exit);
    assert_eq!(String::from_utf8_lossy(&guest_out), String::from_utf8_lossy(&host_out));
    assert_eq!(guest.syscalls, host.syscalls);
    assert_eq!(guest.trace_digest, host.trace_digest, "the same run in both placements");
    assert_eq!(guest.digest, host.digest, "memory and files included");
    eprintln!(
        "hello: {} syscalls, {} served in the guest, {} exits ({} in the host placement)",
        guest.syscalls, run.served, run.program_exits, host.syscalls
    );
}

/// Runs `spec` in both placements; panics if the guest placement answers differently or stops
/// short.
fn compare(spec: &ProgramSpec) {
    let opts = || BootOptions::new(Settings::default());
    let (host, host_out) = on_the_host_placement(spec);
    let mut guest_out = Vec::new();
    let mut g = run_program(image(), spec, MEMORY, HEAP, opts(), &mut |_, b| guest_out.extend_from_slice(b))
        .unwrap_or_else(|e| panic!("{}: {e}", spec.exe_path));
    let status = g.kernel.exit_status().cloned().unwrap();
    let guest = g.kernel.finish(&g.vm.space, status);
    if spec.jumps == Jumps::On {
        let j = &guest.host_channels.jumps;
        assert!(j.sites > 0 && j.sites == host.host_channels.jumps.sites, "{}: {j:?}", spec.exe_path);
    }
    assert_eq!(guest.exit, host.exit, "{}", spec.exe_path);
    assert_eq!(String::from_utf8_lossy(&guest_out), String::from_utf8_lossy(&host_out), "{}", spec.exe_path);
    assert_eq!(guest.trace_digest, host.trace_digest, "{}", spec.exe_path);
    assert_eq!(guest.digest, host.digest, "{}: the run's digest, memory and files included", spec.exe_path);
}

/// The test guests that run alone: every one gives the host placement's run in the guest
/// placement (processes, threads and signals included). Guests that need arguments, files or a
/// peer, and the syscall-bound benchmark (in `deja bench`), are left out.
const SAME: &[&str] = &[
    "ackstore-buggy",
    "ackstore-fixed",
    "ackstore-rejecting",
    "badptr",
    "bank",
    "batchdb",
    "cat",
    "conformance-clock",
    "conformance-cow",
    "conformance-cpus",
    "conformance-dirs",
    "conformance-eintr",
    "conformance-fifo",
    "conformance-files",
    "conformance-inet6",
    "conformance-mmap",
    "conformance-perms",
    "conformance-procfd",
    "conformance-procs",
    "conformance-pwait",
    "conformance-signals",
    "conformance-sigqueue",
    "conformance-sigwait",
    "conformance-splice",
    "conformance-timers",
    "conformance-unix",
    "cpuburn",
    "credit-atomic",
    "credit-buggy",
    "credit-mark-first",
    "credit-misleading-green",
    "dirty",
    "echo-client",
    "echo-server",
    "forkserver",
    "fserr",
    "go-exec",
    "go-goroutines",
    "go-recover",
    "go-unix",
    "hello",
    "hostchan",
    "hostinfo",
    "kv",
    "ledger",
    "loopback",
    "memhog",
    "overflow",
    "pagestore-buggy",
    "pagestore-fixed",
    "pagestore-retry",
    "privileged",
    "raftkv-client",
    "raftkv-node",
    "register-client",
    "register-replica",
    "register-replica-patched",
    "spawner",
    "supervisor",
    "threads",
    "timerand",
    "tokio-echo-client",
    "tokio-echo-server",
    "udp-ping",
    "udp-pong",
    "walkv-buggy",
    "walkv-client",
    "walkv-fixed",
    "walkv-wrong",
];

#[test]
fn every_test_guest_gives_the_host_placements_run() {
    let only = std::env::var("DEJA_PLACEMENT_GUESTS").unwrap_or_default();
    let wanted = |name: &str| only.is_empty() || only.split(',').any(|n| n == name);
    // With the image's syscall sites made jumps, as `deja run --kernel guest` runs them, in both
    // placements (`a_real_program_runs_in_the_guest_placement_with_the_host_placements_digest`
    // keeps every `syscall` a trap).
    let spec = |name: &str| {
        let bytes = std::fs::read(guest(name)).unwrap();
        ProgramSpec { jumps: Jumps::On, ..ProgramSpec::for_program(bytes, name, Vec::<String>::new(), 7) }
    };
    for name in SAME.iter().copied().filter(|n| wanted(n)) {
        compare(&spec(name));
    }
    eprintln!("{} guests with the host placement's digest", SAME.len());
}

#[test]
fn deja_run_kernel_guest_gives_the_host_placements_run_and_refuses_what_it_does_not_serve() {
    image();
    let hello = guest("hello");
    let hello = hello.to_str().unwrap();
    // `--kernel guest` makes the image's syscall sites jumps: the host placement's run with the
    // same jump sites is the same run.
    let (host, h) = run_json(&["--syscall-jumps", "on", "--seed", "3", hello, "--", "a", "b"]);
    let (guest_run, g) = run_json(&["--kernel", "guest", "--seed", "3", hello, "--", "a", "b"]);
    assert!(guest_run.status.success(), "{}", stderr(&guest_run));
    assert_eq!(stdout(&guest_run), stdout(&host));
    assert_eq!(g["trace_digest"], h["trace_digest"], "{g}");
    assert_eq!(g["digest"], h["digest"], "the run's digest, memory and files included");
    assert_eq!(g["syscalls"], h["syscalls"]);
    assert!(g["vm"]["host_calls"].as_u64().unwrap_or(0) > 0, "{g}");
    assert_eq!(h["vm"]["host_calls"].as_u64(), Some(0), "{h}");
    assert_eq!((g["kernel"].as_str(), h["kernel"].as_str()), (Some("guest"), Some("host")));
    assert!(g["replay"].as_str().unwrap_or("").contains("--kernel=guest"), "{g}");
    assert!(h["replay"].as_str().unwrap_or("").contains("--syscall-jumps=on"), "{h}");
    // Every `syscall` a trap: the host placement's default run.
    let (_, plain) = run_json(&["--seed", "3", hello, "--", "a", "b"]);
    let (_, trapped) = run_json(&["--kernel", "guest", "--syscall-jumps", "off", "--seed", "3", hello, "--", "a", "b"]);
    assert_eq!(trapped["digest"], plain["digest"], "{trapped}");
    assert_eq!(trapped["host_channels"]["jumps"]["mode"], "off");
    assert_ne!(plain["digest"], h["digest"], "jump sites change the code's bytes: an input of the run");
    // The guest placement is deterministic across processes pinned to different cores.
    let timerand = guest("timerand");
    let out =
        deja(&["run", "--kernel", "guest", "--no-probe", "--seed", "7", "--audit", "2", timerand.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("identical"), "{}", stderr(&out));
    // Processes: forks, `execve`, waits and the ends of children, each address space made by the
    // monitor on the kernel's request; the same run across processes pinned to different cores.
    let procs = guest("conformance-procs");
    let out = deja(&["run", "--no-probe", "--kernel", "guest", "--audit", "2", procs.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("identical"), "{}", stderr(&out));
    // A dynamically linked program as Debian ships it, its loader and libc mapped by the kernel in
    // the guest: the host placement's run.
    let (g, gj) = run_json(&["--kernel", "guest", "/bin/echo", "--", "from", "Debian"]);
    let (h, hj) = run_json(&["--syscall-jumps", "on", "/bin/echo", "--", "from", "Debian"]);
    assert!(g.status.success(), "{}", stderr(&g));
    assert_eq!(stdout(&g), "from Debian\n");
    assert_eq!((&gj["trace_digest"], &gj["digest"]), (&hj["trace_digest"], &hj["digest"]));
    assert_eq!(stdout(&h), stdout(&g));
    // Threads run, each switch made by the kernel in the guest, and an audit across processes
    // pinned to different cores finds the same run.
    let threads = guest("threads");
    let out = deja(&["run", "--no-probe", "--kernel", "guest", "--audit", "2", threads.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("identical"), "{}", stderr(&out));
    let echo = root().join("examples/clusters/echo.toml");
    let out = deja(&["run", "--kernel", "guest", echo.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let out = deja(&["run", "--kernel", "guest", "--snapshot-at", "3", "--snapshot-out", "/dev/null", hello]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

#[test]
fn debians_busybox_shell_etcd_and_sqlite_give_the_host_placements_run() {
    image();
    needs(&["/bin/busybox", "/usr/bin/etcd", "/usr/bin/sqlite3"], "busybox-static etcd-server sqlite3");
    let same = |args: &[&str]| {
        let mut guest = vec!["--kernel", "guest"];
        guest.extend_from_slice(args);
        let mut host = vec!["--syscall-jumps", "on"];
        host.extend_from_slice(args);
        let ((g, gj), (h, hj)) = (run_json(&guest), run_json(&host));
        assert!(g.status.success(), "{args:?}: {}", stderr(&g));
        assert_eq!(stdout(&g), stdout(&h), "{args:?}");
        assert_eq!((&gj["trace_digest"], &gj["digest"]), (&hj["trace_digest"], &hj["digest"]), "{args:?}");
        stdout(&g)
    };
    // Pipelines: children forked, exec'd and reaped, SIGCHLD handled. The kernel in the guest
    // writes the shell's stack (a signal frame) on a page it shares copy-on-write with a child:
    // the page moves to a frame of its own, and the monitor replays its entry before the shell
    // runs (without the replay the CPU kept the shared frame and the handler returned to 0).
    let script =
        "true | true; echo a | /bin/busybox tr a b; x=$(echo sub); echo $x; for i in 1 2; do echo $i; done | tac";
    assert_eq!(same(&["/bin/busybox", "--", "sh", "-c", script]), "b\nsub\n2\n1\n");
    // A Go program of 21 MB, whose kernel state outgrows a fixed heap at its end.
    assert!(same(&["/usr/bin/etcd", "--", "--version"]).contains("etcd Version"));
    // A C program with its shared libraries.
    let sql = "create table t(a); insert into t values (1), (2); select sum(a) from t;";
    assert_eq!(same(&["/usr/bin/sqlite3", "--", ":memory:", sql]), "3\n");
}

#[test]
fn jump_sites_reach_the_kernel_in_the_guest_without_an_exit() {
    image();
    let syscalls = guest("syscalls");
    let syscalls = syscalls.to_str().unwrap();
    let (out, g) = run_json(&["--kernel", "guest", syscalls, "--", "20000"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let calls = g["syscalls"].as_u64().unwrap();
    let exits = g["vm"]["exits"].as_u64().unwrap();
    let j = &g["host_channels"]["jumps"];
    assert_eq!(j["mode"], "on", "{j}");
    assert!(j["sites"].as_u64().unwrap() > 100, "{j}");
    assert!(calls > 20_000 && exits * 100 < calls, "{exits} exits for {calls} syscalls: {g}");
    // The same run as the host placement's with the same jump sites, where each jump goes back
    // to its `syscall`, which exits.
    let (_, h) = run_json(&["--kernel", "host", "--syscall-jumps", "on", syscalls, "--", "20000"]);
    assert_eq!((&g["trace_digest"], &g["digest"]), (&h["trace_digest"], &h["digest"]));
    assert!(h["vm"]["exits"].as_u64().unwrap() > calls, "{h}");
    // Every call reaching the kernel in the guest through the trap (LSTAR) instead: the same run
    // as the host placement's default.
    let (_, t) = run_json(&["--kernel", "guest", "--syscall-jumps", "off", syscalls, "--", "20000"]);
    let (_, p) = run_json(&[syscalls, "--", "20000"]);
    assert_eq!((&t["trace_digest"], &t["digest"]), (&p["trace_digest"], &p["digest"]));
    assert_eq!(t["host_channels"]["jumps"]["sites"], 0);
    // The text summary says what jumped.
    let out = deja(&["run", "--no-probe", "--kernel", "guest", syscalls, "--", "10"]);
    assert!(stderr(&out).contains("syscall jumps: "), "{}", stderr(&out));
}

/// Raw code that writes `block` over the boot block, as a hostile program can on hosts where
/// nothing protects the kernel's window from ring 3, then calls the kernel's host-call
/// instruction itself, then exits.
fn forge(block: &deja_kernel::placement::BootBlock, hostcall: u64) -> Vec<u8> {
    let mut c = Vec::new();
    for (i, word) in block.encode().chunks(8).enumerate() {
        c.extend_from_slice(&[0x48, 0xb8]);
        c.extend_from_slice(word);
        c.extend_from_slice(&[0x48, 0xa3]);
        c.extend_from_slice(&(deja_kernel::placement::BOOT_BLOCK + 8 * i as u64).to_le_bytes());
    }
    c.extend_from_slice(&[0x48, 0xb8]);
    c.extend_from_slice(&hostcall.to_le_bytes());
    c.extend_from_slice(&[0xff, 0xd0, 0xb8, 0xe7, 0, 0, 0, 0x31, 0xff, 0x0f, 0x05]);
    c
}

#[test]
fn a_program_that_forges_the_kernels_requests_is_stopped_with_what_it_did() {
    use deja_kernel::placement::{image::Image, output_cap_for, BootBlock, MemOp, Request, WINDOW};
    let img = Image::parse(image()).unwrap();
    let state = saved_kernel(7);
    let honest = BootBlock::for_input(HEAP, state.len() as u64, output_cap_for(state.len() as u64));
    let forged =
        |block: BootBlock| run_raw(image(), &state, &forge(&block, img.hostcall), HEAP).unwrap_err().to_string();
    // A page request onto the kernel's own window.
    let grab =
        BootBlock { request: Request::Memory.code(), op: MemOp::Populate.code(), args: [WINDOW, 0x1000, 7], ..honest };
    assert!(forged(grab).contains("asked for page operation 1"), "{}", forged(grab));
    // A page request outside the user half, and one of no known kind.
    let high =
        BootBlock { request: Request::Memory.code(), op: MemOp::Unmap.code(), args: [1 << 47, 0x1000, 0], ..honest };
    assert!(forged(high).contains("page operation 3"));
    let unknown = BootBlock { request: Request::Memory.code(), op: 99, ..honest };
    assert!(forged(unknown).contains("page operation 99"));
    // A fork naming more shared ranges than the output area holds, and one whose range (the
    // output area's zeros) is no range of the program's.
    let fork = |count: u64| BootBlock {
        request: Request::Memory.code(),
        op: MemOp::ForkSpace.code(),
        args: [count, 0, 0],
        ..honest
    };
    assert!(forged(fork(honest.output_cap / 16 + 1)).contains("page operation 6"));
    assert!(forged(fork(1)).contains("not all of them the program's"), "{}", forged(fork(1)));
    // Output records that do not parse, and a block that is no boot block at all.
    let output = BootBlock { request: Request::Output.code(), output_len: 64, ..honest };
    assert!(forged(output).contains("damaged output records"), "{}", forged(output));
    let mut damaged = honest.encode();
    damaged[0] ^= 0xff;
    let mut c = Vec::new();
    c.extend_from_slice(&[0x48, 0xb8]);
    c.extend_from_slice(&damaged[..8]);
    c.extend_from_slice(&[0x48, 0xa3]);
    c.extend_from_slice(&deja_kernel::placement::BOOT_BLOCK.to_le_bytes());
    c.extend_from_slice(&[0x48, 0xb8]);
    c.extend_from_slice(&img.hostcall.to_le_bytes());
    c.extend_from_slice(&[0xff, 0xd0]);
    let err = run_raw(image(), &state, &c, HEAP).unwrap_err().to_string();
    assert!(err.contains("boot block is damaged"), "{err}");
    // The kernel's code is read-only: a program writing over it dies of SIGSEGV, served by the
    // kernel itself.
    let mut c = vec![0x48, 0xb8];
    c.extend_from_slice(&img.syscall_entry.to_le_bytes());
    c.extend_from_slice(&[0xc6, 0x00, 0xcc]); // mov byte [rax], 0xcc
    let run = run_raw(image(), &state, &c, HEAP).unwrap();
    let exit = Kernel::restore(&run.finished).unwrap().exit_status().cloned();
    assert!(matches!(exit, Some(ExitStatus::Signaled { signal: 11, .. })), "{exit:?}");
}
