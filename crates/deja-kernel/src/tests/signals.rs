//! Signal handlers: faults and sent signals delivered on Linux's frame, and `rt_sigreturn`.

use super::*;
use crate::signal::bit;

const HANDLER: u64 = 0x40_1000;
const RESTORER: u64 = 0x40_1100;
const SA_SIGINFO: u64 = 4;
const SA_ONSTACK: u64 = 0x0800_0000;
const SA_RESTORER: u64 = 0x0400_0000;
const SA_NODEFER: u64 = 0x4000_0000;
const SA_RESETHAND: u64 = 0x8000_0000;

fn sigaction(k: &mut Kernel, m: &mut FakeMemory, buf: u64, sig: u64, flags: u64, mask: u64) {
    let act = [HANDLER, flags, RESTORER, mask].iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<_>>();
    poke(k, m, buf, &act);
    assert_eq!(sc(k, m, "rt_sigaction", &[sig, buf, 0, 8]), 0);
}

/// A thread's registers at a fault: every register distinct, some FPU state.
fn context(sp: u64) -> UserContext {
    let mut gprs = [0u64; 16];
    for (i, g) in gprs.iter_mut().enumerate() {
        *g = 0x1111_0000 + i as u64;
    }
    gprs[4] = sp;
    let mut fpu = init_fpu();
    fpu[160..176].copy_from_slice(&[0x5a; 16]);
    fpu[576..592].copy_from_slice(&[0xa5; 16]);
    fpu[512] = 7;
    UserContext { gprs, rip: 0x40_2000, rflags: 0x246, fpu }
}

fn u64_at(k: &Kernel, m: &mut FakeMemory, a: u64) -> u64 {
    u64::from_le_bytes(peek(k, m, a, 8).try_into().unwrap())
}

fn resume(k: &mut Kernel, m: &mut FakeMemory, sp: u64) -> UserContext {
    k.set_user_sp(sp);
    match sc_exit(k, m, "rt_sigreturn", &[]) {
        SyscallOutcome::Resume(ctx) => *ctx,
        o => panic!("rt_sigreturn: {o:?}"),
    }
}

#[test]
fn a_fault_runs_the_handler_on_the_alternate_stack_and_rt_sigreturn_resumes_it() {
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 4096);
    let alt = scratch(&mut k, &mut m, 0x4000);
    let stack = scratch(&mut k, &mut m, 0x4000);
    sigaction(&mut k, &mut m, buf, 11, SA_SIGINFO | SA_ONSTACK | SA_RESTORER, bit(10));
    poke(&k, &mut m, buf + 64, &[alt.to_le_bytes(), 0u64.to_le_bytes(), 0x4000u64.to_le_bytes()].concat());
    assert_eq!(sc(&mut k, &mut m, "sigaltstack", &[buf + 64, 0]), 0);
    assert!(!k.signal_due());

    // A read of address 0x10 (no mapping): SIGSEGV, SEGV_MAPERR, si_addr 0x10.
    let o = k.exception(&mut m, Exception::PageFault { addr: 0x10, error_code: 4, rip: 0x40_2000 });
    assert_eq!(o, ExceptionOutcome::Deliver);
    assert!(k.signal_due());
    let before = context(stack + 0x3000);
    let mut ctx = before.clone();
    assert_eq!(k.deliver_signal(&mut m, &mut ctx), Ok(Some(11)));
    assert!(!k.signal_due());
    assert_eq!(k.caught_signals().get(&11), Some(&1));
    let frame = ctx.gprs[4];
    assert!(frame > alt && frame < alt + 0x4000, "the frame is on the alternate stack: {frame:#x}");
    assert_eq!((frame + 8) % 16, 0, "aligned as after a call");
    assert_eq!((ctx.rip, ctx.gprs[7], ctx.gprs[6], ctx.gprs[2]), (HANDLER, 11, frame + 312, frame + 8));
    assert_eq!(ctx.fpu, init_fpu(), "the handler starts with a clean FPU");
    assert_eq!(u64_at(&k, &mut m, frame), RESTORER, "the handler returns to sa_restorer");
    let info = peek(&k, &mut m, frame + 312, 24);
    assert_eq!(&info[0..4], &11i32.to_le_bytes());
    assert_eq!(&info[8..12], &1i32.to_le_bytes(), "SEGV_MAPERR");
    assert_eq!(&info[16..24], &0x10u64.to_le_bytes());
    let uc = frame + 8;
    assert_eq!(u64_at(&k, &mut m, uc + 16), alt, "uc_stack");
    assert_eq!(u64_at(&k, &mut m, uc + 40 + 128), 0x40_2000, "the faulting RIP");
    assert_eq!(u64_at(&k, &mut m, uc + 40 + 15 * 8), stack + 0x3000, "the interrupted RSP");
    assert_eq!(u64_at(&k, &mut m, uc + 40 + 160), 14, "trapno");
    assert_eq!(u64_at(&k, &mut m, uc + 40 + 176), 0x10, "cr2");
    // Inside the handler: SIGSEGV and sa_mask are blocked, sigaltstack says SS_ONSTACK and
    // refuses a change.
    assert_eq!(k.process.signals.mask, bit(11) | bit(10));
    k.set_user_sp(frame);
    assert_eq!(sc(&mut k, &mut m, "sigaltstack", &[0, buf + 128]), 0);
    assert_eq!(peek(&k, &mut m, buf + 136, 4), 1u32.to_le_bytes(), "SS_ONSTACK");
    assert_eq!(sc(&mut k, &mut m, "sigaltstack", &[buf + 64, 0]), -1, "EPERM on the stack");

    // The handler skips the faulting instruction by editing the saved RIP, then returns.
    poke(&k, &mut m, uc + 40 + 128, &0x40_2004u64.to_le_bytes());
    let back = resume(&mut k, &mut m, frame + 8);
    assert_eq!(back.gprs, before.gprs);
    assert_eq!(back.rip, 0x40_2004);
    assert_eq!(back.fpu[160..176], before.fpu[160..176]);
    assert_eq!(back.fpu[576..592], before.fpu[576..592], "AVX state comes back");
    assert_eq!(k.process.signals.mask, 0, "the mask comes back");
    assert!(!k.signal_due());
}

#[test]
fn a_signal_sent_to_itself_runs_its_handler_with_sa_flags_honoured() {
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 4096);
    let stack = scratch(&mut k, &mut m, 0x4000);
    sigaction(&mut k, &mut m, buf, 10, SA_RESTORER | SA_NODEFER | SA_RESETHAND, 0);
    assert_eq!(sc(&mut k, &mut m, "tgkill", &[1, 1, 10]), 0);
    assert!(k.signal_due());
    let mut ctx = context(stack + 0x2000);
    ctx.gprs[0] = 0; // tgkill's return
    assert_eq!(k.deliver_signal(&mut m, &mut ctx), Ok(Some(10)));
    let frame = ctx.gprs[4];
    assert!(frame < stack + 0x2000 - 128 - 836, "below the red zone and the FPU area");
    assert_eq!(&peek(&k, &mut m, frame + 312 + 8, 4)[..], &(-6i32).to_le_bytes(), "SI_TKILL");
    assert_eq!(&peek(&k, &mut m, frame + 312 + 16, 4)[..], &1u32.to_le_bytes(), "si_pid");
    assert_eq!(k.process.signals.mask, 0, "SA_NODEFER: not blocked in its own handler");
    assert_eq!(k.process.signals.handler(10), 0, "SA_RESETHAND");
    // A second SIGUSR1 now takes the default action.
    match sc_exit(&mut k, &mut m, "kill", &[1, 10]) {
        SyscallOutcome::Exit(ExitStatus::Signaled { signal: 10, .. }) => {}
        o => panic!("{o:?}"),
    }
}

#[test]
fn faults_without_a_usable_handler_end_the_program() {
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 4096);
    let pf = Exception::PageFault { addr: 0x10, error_code: 4, rip: 0x40_2000 };
    // Blocked: fatal, as on Linux.
    sigaction(&mut k, &mut m, buf, 11, SA_RESTORER, 0);
    poke(&k, &mut m, buf + 64, &bit(11).to_le_bytes());
    assert_eq!(sc(&mut k, &mut m, "rt_sigprocmask", &[0, buf + 64, 0, 8]), 0);
    assert!(matches!(k.exception(&mut m, pf), ExceptionOutcome::Fatal(ExitStatus::Signaled { signal: 11, .. })));

    // No SA_RESTORER: the handler cannot return, so it is not run.
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 4096);
    sigaction(&mut k, &mut m, buf, 4, 0, 0);
    let ud = Exception::InvalidOpcode { rip: 0x40_2000, eax: 0, ecx: 0 };
    assert_eq!(k.exception(&mut m, ud), ExceptionOutcome::Deliver);
    let mut ctx = context(buf + 4000);
    let Err(ExitStatus::Signaled { signal: 11, fault: Some(f), .. }) = k.deliver_signal(&mut m, &mut ctx) else {
        panic!("delivered without a restorer")
    };
    assert!(f.description.contains("SIGILL could not be handled: its handler has no SA_RESTORER"), "{}", f.description);

    // A stack with no room for the frame (a stack overflow without an alternate stack).
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 4096);
    sigaction(&mut k, &mut m, buf, 8, SA_RESTORER, 0);
    assert_eq!(k.exception(&mut m, Exception::Other { vector: 0, rip: 0x40_2000 }), ExceptionOutcome::Deliver);
    let mut ctx = context(0x1000);
    let Err(ExitStatus::Signaled { signal: 11, fault: Some(f), .. }) = k.deliver_signal(&mut m, &mut ctx) else {
        panic!("a frame was written below the user space")
    };
    assert!(f.description.contains("SIGFPE could not be handled: its frame at"), "{}", f.description);
}

#[test]
fn rt_sigreturn_refuses_frames_the_cpu_would_not_take() {
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 0x4000);
    // A RIP outside the user half.
    let mut uc = vec![0u8; 304];
    uc[40 + 128..40 + 136].copy_from_slice(&(1u64 << 63).to_le_bytes());
    poke(&k, &mut m, buf + 8, &uc);
    k.set_user_sp(buf + 8);
    match sc_exit(&mut k, &mut m, "rt_sigreturn", &[]) {
        SyscallOutcome::Exit(ExitStatus::Signaled { signal: 11, fault: Some(f), .. }) => {
            assert!(f.description.contains("non-user address"), "{}", f.description)
        }
        o => panic!("{o:?}"),
    }
    // An FPU area with reserved MXCSR bits.
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 0x4000);
    let mut uc = vec![0u8; 304];
    uc[40 + 128..40 + 136].copy_from_slice(&0x40_2000u64.to_le_bytes());
    uc[40 + 144] = 0x33;
    uc[40 + 184..40 + 192].copy_from_slice(&(buf + 0x1000).to_le_bytes());
    poke(&k, &mut m, buf + 8, &uc);
    poke(&k, &mut m, buf + 0x1000 + 24, &u32::MAX.to_le_bytes());
    k.set_user_sp(buf + 8);
    assert!(matches!(sc_exit(&mut k, &mut m, "rt_sigreturn", &[]), SyscallOutcome::Exit(_)));
    // An unreadable frame.
    let (mut k, _, mut m) = boot();
    k.set_user_sp(0x10);
    assert!(matches!(sc_exit(&mut k, &mut m, "rt_sigreturn", &[]), SyscallOutcome::Exit(_)));
}

#[test]
fn a_signal_to_a_thread_waiting_on_a_futex_interrupts_the_wait() {
    let (mut k, mut m, buf) = super::threads::two_threads();
    sigaction(&mut k, &mut m, buf + 0x100, 12, SA_RESTORER, 0);
    // Thread 2 waits on a futex; thread 1 sends it SIGUSR2.
    override_next(&mut k, vec![1]);
    assert_eq!(sc(&mut k, &mut m, "gettid", &[]), 1);
    assert_eq!(k.current_tid(), 2);
    poke(&k, &mut m, buf + 0x200, &0u32.to_le_bytes());
    sc(&mut k, &mut m, "futex", &[buf + 0x200, 128, 0, 0]);
    assert_eq!(k.current_tid(), 1);
    k.take_wakeup_returns();
    override_next(&mut k, vec![0]);
    assert_eq!(sc(&mut k, &mut m, "tgkill", &[1, 2, 12]), 0);
    assert!(!k.signal_due(), "thread 1 does not take thread 2's signal");
    assert_eq!(k.take_wakeup_returns(), vec![(2, (-4i64) as u64)], "EINTR");
    override_next(&mut k, vec![1]);
    sc(&mut k, &mut m, "gettid", &[]);
    assert_eq!(k.current_tid(), 2);
    assert!(k.signal_due(), "thread 2 takes it on its way back");
}

#[test]
fn waits_for_signals_check_their_arguments_and_report_a_deadlock() {
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 4096);
    poke(&k, &mut m, buf, &0u64.to_le_bytes());
    assert_eq!(sc(&mut k, &mut m, "rt_sigsuspend", &[buf, 4]), EINVAL);
    assert_eq!(sc(&mut k, &mut m, "rt_sigsuspend", &[0x10, 8]), EFAULT);
    assert_eq!(sc(&mut k, &mut m, "rt_sigtimedwait", &[buf, 0, 0, 4]), EINVAL);
    poke(&k, &mut m, buf + 64, &[0u64.to_le_bytes(), 1_000_000_000u64.to_le_bytes()].concat());
    assert_eq!(sc(&mut k, &mut m, "rt_sigtimedwait", &[buf, 0, buf + 64, 8]), EINVAL);
    // A blocked SIGUSR1 sent to itself is taken by rt_sigtimedwait, not by a handler.
    poke(&k, &mut m, buf, &bit(10).to_le_bytes());
    assert_eq!(sc(&mut k, &mut m, "rt_sigprocmask", &[0, buf, 0, 8]), 0);
    assert_eq!(sc(&mut k, &mut m, "tgkill", &[1, 1, 10]), 0);
    assert_eq!(sc(&mut k, &mut m, "rt_sigtimedwait", &[buf, buf + 128, 0, 8]), 10);
    assert_eq!(peek(&k, &mut m, buf + 136, 4), (-6i32).to_le_bytes(), "SI_TKILL");
    assert!(k.pending_signals().is_empty() && !k.signal_due());
    // With nothing pending and no other thread, waiting for ever is a deadlock.
    match sc_exit(&mut k, &mut m, "pause", &[]) {
        SyscallOutcome::Exit(ExitStatus::Signaled { signal: 9, fault: Some(f), .. }) => {
            assert!(f.description.contains("deadlock"), "{}", f.description)
        }
        other => panic!("{other:?}"),
    }
}

/// `SI_QUEUE`, the code `sigqueue` gives.
const SI_QUEUE: i32 = -1;
const EPERM: i64 = -1;
const ESRCH: i64 = -3;
const EAGAIN: i64 = -11;
const E2BIG: i64 = -7;

/// Writes a `siginfo_t` at `at` as `sigqueue` fills it: `code`, `pid`, `uid` and `value`
/// (`si_value`), `si_signo` left for the kernel to set; bytes 48 and on hold `tail`.
fn siginfo(k: &Kernel, m: &mut FakeMemory, at: u64, code: i32, pid: u32, value: u64, tail: u8) {
    let mut b = [0u8; 128];
    b[0..4].copy_from_slice(&99i32.to_le_bytes());
    b[8..12].copy_from_slice(&code.to_le_bytes());
    b[16..20].copy_from_slice(&pid.to_le_bytes());
    b[20..24].copy_from_slice(&1000u32.to_le_bytes());
    b[24..32].copy_from_slice(&value.to_le_bytes());
    b[48..].fill(tail);
    poke(k, m, at, &b);
}

/// Takes one pending signal of `set` with `rt_sigtimedwait` (no waiting): its number and
/// the `siginfo_t` written for it, or the error.
fn take(k: &mut Kernel, m: &mut FakeMemory, buf: u64, set: u64) -> Result<(i64, Vec<u8>), i64> {
    poke(k, m, buf + 0x800, &set.to_le_bytes());
    poke(k, m, buf + 0x810, &[0u8; 16]);
    poke(k, m, buf + 0x900, &[0xeeu8; 128]);
    match sc(k, m, "rt_sigtimedwait", &[buf + 0x800, buf + 0x900, buf + 0x810, 8]) {
        s if s > 0 => Ok((s, peek(k, m, buf + 0x900, 128))),
        e => Err(e),
    }
}

fn int_at(info: &[u8], at: usize) -> i64 {
    i64::from(i32::from_le_bytes(info[at..at + 4].try_into().unwrap()))
}

/// `(si_code, si_pid, si_value)` of a `siginfo_t`.
fn code_pid_value(info: &[u8]) -> (i64, i64, u64) {
    (int_at(info, 8), int_at(info, 16), u64::from_le_bytes(info[24..32].try_into().unwrap()))
}

fn block(k: &mut Kernel, m: &mut FakeMemory, buf: u64, set: u64) {
    poke(k, m, buf + 0x7f0, &set.to_le_bytes());
    assert_eq!(sc(k, m, "rt_sigprocmask", &[0, buf + 0x7f0, 0, 8]), 0);
}

#[test]
fn queued_signals_keep_their_siginfo_and_real_time_ones_every_instance() {
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 0x1000);
    let (rt, usr1) = (bit(34), bit(10));
    block(&mut k, &mut m, buf, rt | usr1);
    for value in [1, 2, 3] {
        siginfo(&k, &mut m, buf, SI_QUEUE, 1, value, 0);
        assert_eq!(sc(&mut k, &mut m, "rt_sigqueueinfo", &[1, 34, buf]), 0);
    }
    for value in [7, 8] {
        siginfo(&k, &mut m, buf, SI_QUEUE, 1, value, 0);
        assert_eq!(sc(&mut k, &mut m, "rt_sigqueueinfo", &[1, 10, buf]), 0);
    }
    // Real-time: each instance in order, its siginfo as sent (si_signo the kernel's), the
    // rest zeros.
    for value in [1, 2, 3] {
        let (sig, info) = take(&mut k, &mut m, buf, rt).expect("an instance of SIGRTMIN+2");
        assert_eq!(sig, 34);
        assert_eq!(int_at(&info, 0), 34, "si_signo");
        assert_eq!(code_pid_value(&info), (i64::from(SI_QUEUE), 1, value));
        assert!(info[48..].iter().all(|&b| b == 0), "past the kernel's siginfo: zeros");
    }
    assert_eq!(take(&mut k, &mut m, buf, rt), Err(EAGAIN), "three sent, three taken");
    // Standard: the second is not queued; the first keeps its value.
    let (_, info) = take(&mut k, &mut m, buf, usr1).expect("SIGUSR1");
    assert_eq!(code_pid_value(&info).2, 7);
    assert_eq!(take(&mut k, &mut m, buf, usr1), Err(EAGAIN));
    // kill and tgkill of a real-time signal queue each instance too, with their own codes.
    assert_eq!(sc(&mut k, &mut m, "kill", &[1, 34]), 0);
    assert_eq!(sc(&mut k, &mut m, "tgkill", &[1, 1, 34]), 0);
    assert_eq!(sc(&mut k, &mut m, "kill", &[1, 34]), 0);
    assert_eq!(take(&mut k, &mut m, buf, rt).map(|(_, i)| code_pid_value(&i)), Ok((-6, 1, 0)), "the thread's first");
    assert_eq!(take(&mut k, &mut m, buf, rt).map(|(_, i)| code_pid_value(&i)), Ok((0, 1, 0)));
    assert_eq!(take(&mut k, &mut m, buf, rt).map(|(_, i)| code_pid_value(&i)), Ok((0, 1, 0)));
    assert_eq!(take(&mut k, &mut m, buf, rt), Err(EAGAIN));
    // A SIGPIPE a write raises says SI_USER, as Linux's does.
    let fds = buf + 0x100;
    assert_eq!(sc(&mut k, &mut m, "pipe2", &[fds, 0]), 0);
    let (r, w) = (u64::from(peek(&k, &mut m, fds, 1)[0]), u64::from(peek(&k, &mut m, fds + 4, 1)[0]));
    assert_eq!(sc(&mut k, &mut m, "close", &[r]), 0);
    block(&mut k, &mut m, buf, bit(13));
    assert_eq!(sc(&mut k, &mut m, "write", &[w, buf, 1]), -32);
    assert_eq!(take(&mut k, &mut m, buf, bit(13)).map(|(_, i)| code_pid_value(&i)), Ok((0, 1, 0)));
}

#[test]
fn a_queued_signal_reaches_its_handler_with_its_value() {
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 0x1000);
    let stack = scratch(&mut k, &mut m, 0x4000);
    sigaction(&mut k, &mut m, buf + 0x400, 40, SA_SIGINFO | SA_RESTORER, 0);
    siginfo(&k, &mut m, buf, SI_QUEUE, 1, 0xfeed, 0);
    assert_eq!(sc(&mut k, &mut m, "rt_sigqueueinfo", &[1, 40, buf]), 0);
    assert!(k.signal_due());
    let mut ctx = context(stack + 0x3000);
    assert_eq!(k.deliver_signal(&mut m, &mut ctx), Ok(Some(40)));
    let info = peek(&k, &mut m, ctx.gprs[6], 128);
    assert_eq!((int_at(&info, 0), code_pid_value(&info)), (40, (i64::from(SI_QUEUE), 1, 0xfeed)));
}

#[test]
fn rt_sigqueueinfo_checks_its_target_its_claim_and_its_siginfo() {
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 0x1000);
    block(&mut k, &mut m, buf, bit(34) | bit(10));
    siginfo(&k, &mut m, buf, SI_QUEUE, 1, 5, 0);
    assert_eq!(sc(&mut k, &mut m, "rt_sigqueueinfo", &[1, 34, 0x10]), EFAULT);
    assert_eq!(sc(&mut k, &mut m, "rt_sigqueueinfo", &[2, 34, buf]), ESRCH, "another process");
    assert_eq!(sc(&mut k, &mut m, "rt_sigqueueinfo", &[0, 34, buf]), ESRCH);
    assert_eq!(sc(&mut k, &mut m, "rt_sigqueueinfo", &[u64::MAX, 34, buf]), ESRCH);
    assert_eq!(sc(&mut k, &mut m, "rt_sigqueueinfo", &[1, 65, buf]), EINVAL);
    assert_eq!(sc(&mut k, &mut m, "rt_sigqueueinfo", &[1, 0, buf]), 0, "signal 0 checks only");
    assert!(k.pending_signals().is_empty() && take(&mut k, &mut m, buf, bit(34)).is_err());
    // Claiming SI_USER, SI_KERNEL or SI_TKILL is for a signal to oneself only.
    for code in [0, 0x80, -6] {
        siginfo(&k, &mut m, buf, code, 4242, 6, 0);
        assert_eq!(sc(&mut k, &mut m, "rt_sigqueueinfo", &[2, 34, buf]), EPERM, "code {code} to another");
        assert_eq!(sc(&mut k, &mut m, "rt_sigqueueinfo", &[1, 34, buf]), 0, "code {code} to itself");
        let (_, info) = take(&mut k, &mut m, buf, bit(34)).expect("taken");
        assert_eq!(code_pid_value(&info), (i64::from(code), 4242, 6), "delivered as claimed");
    }
    // A siginfo of a layout Linux knows may hold anything past its 48 bytes; one it does not
    // know must hold zeros there.
    siginfo(&k, &mut m, buf, SI_QUEUE, 1, 5, 0xaa);
    assert_eq!(sc(&mut k, &mut m, "rt_sigqueueinfo", &[1, 34, buf]), 0);
    assert!(take(&mut k, &mut m, buf, bit(34)).expect("taken").1[48..].iter().all(|&b| b == 0));
    siginfo(&k, &mut m, buf, -100, 1, 5, 0xaa);
    assert_eq!(sc(&mut k, &mut m, "rt_sigqueueinfo", &[1, 34, buf]), E2BIG);
    siginfo(&k, &mut m, buf, 50, 1, 5, 0xaa);
    assert_eq!(sc(&mut k, &mut m, "rt_sigqueueinfo", &[1, 10, buf]), E2BIG);
    siginfo(&k, &mut m, buf, -100, 1, 5, 0);
    assert_eq!(sc(&mut k, &mut m, "rt_sigqueueinfo", &[1, 34, buf]), 0);
    // Its last 48 bytes out of reach: EFAULT only when they are read.
    let end = buf + 0x1000 - 48;
    siginfo(&k, &mut m, buf, SI_QUEUE, 1, 5, 0);
    let head = peek(&k, &mut m, buf, 48);
    poke(&k, &mut m, end, &head);
    assert_eq!(sc(&mut k, &mut m, "rt_sigqueueinfo", &[1, 34, end]), 0);
    poke(&k, &mut m, end + 8, &(-100i32).to_le_bytes());
    assert_eq!(sc(&mut k, &mut m, "rt_sigqueueinfo", &[1, 34, end]), EFAULT);
}

#[test]
fn only_a_bounded_number_of_signals_queue() {
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 0x1000);
    block(&mut k, &mut m, buf, bit(34) | bit(35) | bit(10));
    siginfo(&k, &mut m, buf, SI_QUEUE, 1, 5, 0);
    for _ in 0..crate::signal::MAX_QUEUED {
        assert_eq!(sc(&mut k, &mut m, "rt_sigqueueinfo", &[1, 34, buf]), 0);
    }
    assert_eq!(sc(&mut k, &mut m, "rt_sigqueueinfo", &[1, 34, buf]), EAGAIN);
    assert_eq!(sc(&mut k, &mut m, "tgkill", &[1, 1, 35]), EAGAIN);
    assert_eq!(sc(&mut k, &mut m, "kill", &[1, 10]), 0, "a standard signal kill sends always has room");
    assert_eq!(take(&mut k, &mut m, buf, bit(10)).map(|(_, i)| code_pid_value(&i)), Ok((0, 1, 0)));

    // RLIMIT_SIGPENDING lower: nothing queues. kill of a real-time signal leaves it pending
    // without its siginfo (Linux's SI_USER with no sender), sigqueue of a standard one too.
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 0x1000);
    block(&mut k, &mut m, buf, bit(34) | bit(10));
    poke(&k, &mut m, buf + 0x200, &[0u64.to_le_bytes(), u64::MAX.to_le_bytes()].concat());
    assert_eq!(sc(&mut k, &mut m, "prlimit64", &[0, 11, buf + 0x200, 0]), 0);
    siginfo(&k, &mut m, buf, SI_QUEUE, 1, 5, 0);
    assert_eq!(sc(&mut k, &mut m, "rt_sigqueueinfo", &[1, 34, buf]), EAGAIN);
    assert_eq!(sc(&mut k, &mut m, "tgkill", &[1, 1, 34]), EAGAIN);
    assert_eq!(sc(&mut k, &mut m, "kill", &[1, 34]), 0);
    assert_eq!(sc(&mut k, &mut m, "kill", &[1, 34]), 0);
    assert_eq!(take(&mut k, &mut m, buf, bit(34)).map(|(_, i)| code_pid_value(&i)), Ok((0, 0, 0)));
    assert_eq!(take(&mut k, &mut m, buf, bit(34)), Err(EAGAIN), "one pending, however many were sent");
    assert_eq!(sc(&mut k, &mut m, "rt_sigqueueinfo", &[1, 10, buf]), 0);
    assert_eq!(take(&mut k, &mut m, buf, bit(10)).map(|(_, i)| code_pid_value(&i)), Ok((0, 0, 0)));
    assert_eq!(sc(&mut k, &mut m, "kill", &[1, 10]), 0);
    assert_eq!(take(&mut k, &mut m, buf, bit(10)).map(|(_, i)| code_pid_value(&i)), Ok((0, 1, 0)));
}

#[test]
fn rt_tgsigqueueinfo_queues_for_one_thread() {
    let (mut k, mut m, buf) = super::threads::two_threads();
    siginfo(&k, &mut m, buf + 0x100, SI_QUEUE, 1, 9, 0);
    let info = buf + 0x100;
    // Thread 1 keeps running.
    override_next(&mut k, vec![0; 9]);
    assert_eq!(sc(&mut k, &mut m, "rt_tgsigqueueinfo", &[1, 0, 34, info]), EINVAL);
    assert_eq!(sc(&mut k, &mut m, "rt_tgsigqueueinfo", &[0, 2, 34, info]), EINVAL);
    assert_eq!(sc(&mut k, &mut m, "rt_tgsigqueueinfo", &[1, 9, 34, info]), ESRCH);
    assert_eq!(sc(&mut k, &mut m, "rt_tgsigqueueinfo", &[2, 2, 34, info]), ESRCH, "another thread group");
    assert_eq!(sc(&mut k, &mut m, "rt_tgsigqueueinfo", &[1, 2, 65, info]), EINVAL);
    assert_eq!(sc(&mut k, &mut m, "rt_tgsigqueueinfo", &[1, 2, 34, 0x10]), EFAULT);
    siginfo(&k, &mut m, buf + 0x200, 0, 1, 9, 0);
    assert_eq!(sc(&mut k, &mut m, "rt_tgsigqueueinfo", &[1, 2, 34, buf + 0x200]), EPERM, "SI_USER to another");
    // Thread 2 blocks SIGRTMIN+2, so the instances wait for it, queued in order.
    k.sched.threads.threads.get_mut(&2).expect("thread 2").sigmask = bit(34);
    assert_eq!(sc(&mut k, &mut m, "rt_tgsigqueueinfo", &[1, 2, 34, info]), 0);
    siginfo(&k, &mut m, info, SI_QUEUE, 1, 10, 0);
    assert_eq!(sc(&mut k, &mut m, "rt_tgsigqueueinfo", &[1, 2, 34, info]), 0);
    let queued = &k.sched.threads.threads[&2].pending.queue;
    assert_eq!(queued.iter().map(|q| q.info()[24]).collect::<Vec<_>>(), [9, 10]);
    assert!(k.pending_signals().is_empty(), "not thread 1's");
    // A thread may claim SI_USER for itself, and a queued signal from another thread for the
    // process may not.
    override_next(&mut k, vec![1]);
    assert_eq!(sc(&mut k, &mut m, "gettid", &[]), 1);
    assert_eq!(k.current_tid(), 2);
    siginfo(&k, &mut m, buf + 0x200, 0, 1, 11, 0);
    override_next(&mut k, vec![1]);
    assert_eq!(sc(&mut k, &mut m, "rt_tgsigqueueinfo", &[1, 2, 34, buf + 0x200]), 0);
    override_next(&mut k, vec![1]);
    assert_eq!(sc(&mut k, &mut m, "rt_sigqueueinfo", &[1, 34, buf + 0x200]), EPERM, "thread 2 is not pid 1");
    assert_eq!(k.current_tid(), 2);
    assert_eq!(take(&mut k, &mut m, buf, bit(34)).map(|(_, i)| code_pid_value(&i).2), Ok(9));
}
