//! The signal frame: what Linux x86-64 pushes on a thread's stack when it runs a signal handler,
//! and what `rt_sigreturn` reads back. Pure layout, no kernel state.
//!
//! The frame is the kernel's `struct rt_sigframe` followed (above it) by the FPU state:
//!
//! ```text
//! frame + 0    pretcode     the handler's return address: sa_restorer (SA_RESTORER is required)
//! frame + 8    ucontext     uc_flags, uc_link, uc_stack, uc_mcontext (struct sigcontext), uc_sigmask
//! frame + 312  siginfo      128 bytes
//! fpstate      XSAVE area   832 bytes (x87, SSE, AVX), 64-byte aligned, then FP_XSTATE_MAGIC2
//! ```
//!
//! The stack pointer is chosen as Linux does: below the 128-byte red zone, or at the top of
//! the alternate stack for a handler with `SA_ONSTACK` when the thread is not already on it;
//! the FPU area is rounded down to 64 bytes, and the frame below it is placed so that the
//! handler starts with `RSP + 8` 16-byte aligned, as after a `call`.

use crate::prelude::*;
use crate::UserContext;

/// Bytes of the FPU state deja's CPU has (XCR0 = x87 | SSE | AVX): the legacy region, the
/// XSAVE header and the upper halves of the YMM registers.
pub const FPU_BYTES: usize = 832;
/// `sizeof(struct rt_sigframe)`.
const FRAME_BYTES: u64 = 440;
/// The FPU area in the frame: the XSAVE image and `FP_XSTATE_MAGIC2`.
const MATH_BYTES: u64 = FPU_BYTES as u64 + 4;
const FP_XSTATE_MAGIC1: u32 = 0x4650_5853;
const FP_XSTATE_MAGIC2: u32 = 0x4650_5845;
/// x87 | SSE | AVX.
const XFEATURES: u64 = 7;
/// `UC_FP_XSTATE | UC_SIGCONTEXT_SS | UC_STRICT_RESTORE_SS`.
const UC_FLAGS: u64 = 7;
/// `__USER_CS`, `__USER_DS`.
const USER_CS: u16 = 0x33;
const USER_SS: u16 = 0x2b;
/// The flags `rt_sigreturn` takes from the frame: AC, OF, DF, SF, ZF, AF, PF, CF (Linux's
/// `FIX_EFLAGS` without TF and RF: deja does not single-step ring 3).
const RESTORED_FLAGS: u64 = 0x4_0000 | 0x800 | 0x400 | 0x80 | 0x40 | 0x10 | 0x4 | 0x1;
/// The red zone below a thread's stack pointer that a handler's frame skips.
const RED_ZONE: u64 = 128;
/// Lowest non-user address: a restored RIP must be below it.
const USER_END: u64 = 0x0000_8000_0000_0000;

/// The order `struct sigcontext` keeps the general-purpose registers in, as indices of
/// [`UserContext::gprs`] (x86 encoding order): r8–r15, rdi, rsi, rbp, rbx, rdx, rax, rcx, rsp.
const SIGCONTEXT_ORDER: [usize; 16] = [8, 9, 10, 11, 12, 13, 14, 15, 7, 6, 5, 3, 2, 0, 1, 4];

/// `siginfo_t`, 128 bytes.
pub(crate) type SigInfo = [u8; 128];

/// A `siginfo_t` for a fault: `si_code` and `si_addr`.
pub(crate) fn info_fault(sig: i32, code: i32, addr: u64) -> SigInfo {
    let mut i = [0u8; 128];
    i[0..4].copy_from_slice(&sig.to_le_bytes());
    i[8..12].copy_from_slice(&code.to_le_bytes());
    i[16..24].copy_from_slice(&addr.to_le_bytes());
    i
}

/// Where a handler's frame and FPU area go, given the thread's stack pointer and the top of
/// the alternate stack to switch to (if it does).
pub(crate) fn place(sp: u64, altstack_top: Option<u64>) -> (u64, u64) {
    let sp = altstack_top.unwrap_or(sp.wrapping_sub(RED_ZONE));
    let fpstate = sp.wrapping_sub(MATH_BYTES) & !63;
    let frame = (fpstate.wrapping_sub(FRAME_BYTES).wrapping_add(8) & !15).wrapping_sub(8);
    (frame, fpstate)
}

/// What goes into a frame besides the registers.
pub(crate) struct FrameParts {
    pub info: SigInfo,
    pub restorer: u64,
    /// The mask before delivery (`uc_sigmask`, `oldmask`).
    pub old_mask: u64,
    /// The alternate stack as `uc_stack` records it: `ss_sp`, `ss_flags`, `ss_size`.
    pub uc_stack: (u64, u32, u64),
    /// `trapno`, `err`, `cr2` of the fault (zero for a signal that was sent).
    pub trap: (u64, u64, u64),
}

/// The bytes of a frame whose FPU area is at `fpstate`, and of that area.
pub(crate) fn encode(ctx: &UserContext, parts: &FrameParts, fpstate: u64) -> (Vec<u8>, Vec<u8>) {
    let mut f = vec![0u8; FRAME_BYTES as usize];
    let put = |f: &mut Vec<u8>, at: usize, v: u64| f[at..at + 8].copy_from_slice(&v.to_le_bytes());
    put(&mut f, 0, parts.restorer);
    put(&mut f, 8, UC_FLAGS);
    put(&mut f, 24, parts.uc_stack.0);
    f[32..36].copy_from_slice(&parts.uc_stack.1.to_le_bytes());
    put(&mut f, 40, parts.uc_stack.2);
    let sc = 48;
    for (i, &g) in SIGCONTEXT_ORDER.iter().enumerate() {
        put(&mut f, sc + 8 * i, ctx.gprs[g]);
    }
    put(&mut f, sc + 128, ctx.rip);
    put(&mut f, sc + 136, ctx.rflags);
    f[sc + 144..sc + 146].copy_from_slice(&USER_CS.to_le_bytes());
    f[sc + 150..sc + 152].copy_from_slice(&USER_SS.to_le_bytes());
    put(&mut f, sc + 152, parts.trap.1);
    put(&mut f, sc + 160, parts.trap.0);
    put(&mut f, sc + 168, parts.old_mask);
    put(&mut f, sc + 176, parts.trap.2);
    put(&mut f, sc + 184, fpstate);
    put(&mut f, 304, parts.old_mask);
    f[312..440].copy_from_slice(&parts.info);

    let mut x = vec![0u8; MATH_BYTES as usize];
    let n = ctx.fpu.len().min(FPU_BYTES);
    x[..n].copy_from_slice(&ctx.fpu[..n]);
    // The software-reserved bytes of the legacy region say an XSAVE image follows.
    x[464..468].copy_from_slice(&FP_XSTATE_MAGIC1.to_le_bytes());
    x[468..472].copy_from_slice(&(MATH_BYTES as u32).to_le_bytes());
    x[472..480].copy_from_slice(&XFEATURES.to_le_bytes());
    x[480..484].copy_from_slice(&(FPU_BYTES as u32).to_le_bytes());
    x[484..512].fill(0);
    // Like Linux, x87 and SSE are always marked present in the header.
    let bv = u64::from_le_bytes(x[512..520].try_into().unwrap_or_default()) | 3;
    x[512..520].copy_from_slice(&(bv & XFEATURES).to_le_bytes());
    x[520..576].fill(0);
    x[FPU_BYTES..].copy_from_slice(&FP_XSTATE_MAGIC2.to_le_bytes());
    (f, x)
}

/// The registers a handler starts with: RSP at the frame, RIP at the handler, the signal, the
/// `siginfo_t` and the `ucontext_t` as arguments, DF and TF clear, a fresh FPU.
pub(crate) fn enter(ctx: &mut UserContext, handler: u64, sig: i32, frame: u64) {
    ctx.gprs[4] = frame;
    ctx.gprs[7] = sig as u64;
    ctx.gprs[6] = frame + 312;
    ctx.gprs[2] = frame + 8;
    ctx.gprs[0] = 0;
    ctx.rip = handler;
    ctx.rflags &= !(0x400 | 0x100 | 0x1_0000);
    ctx.fpu = init_fpu();
}

/// The FPU in its initial state (`fninit`, MXCSR 0x1f80), as a new handler gets it.
pub fn init_fpu() -> Vec<u8> {
    let mut x = vec![0u8; FPU_BYTES];
    x[0..2].copy_from_slice(&0x037fu16.to_le_bytes());
    x[24..28].copy_from_slice(&0x1f80u32.to_le_bytes());
    x[28..32].copy_from_slice(&0xffffu32.to_le_bytes());
    x[512..520].copy_from_slice(&3u64.to_le_bytes());
    x
}

/// What `rt_sigreturn` found in a frame.
#[derive(Debug)]
pub(crate) struct Restored {
    pub ctx: UserContext,
    pub mask: u64,
    pub uc_stack: (u64, u32, u64),
    /// The FPU area's address (0: none).
    pub fpstate: u64,
}

/// The RFLAGS bits a thread in ring 3 always has (IF and the reserved bit 1): what
/// `rt_sigreturn` does not take from a frame.
const USER_FLAGS: u64 = 0x202;

/// Reads the `ucontext` of a frame (`uc`: its 304 bytes). Err: why the frame is refused.
pub(crate) fn decode(uc: &[u8; 304]) -> Result<Restored, String> {
    let get = |at: usize| u64::from_le_bytes(uc[at..at + 8].try_into().unwrap_or_default());
    let sc = 40;
    let mut gprs = [0u64; 16];
    for (i, &g) in SIGCONTEXT_ORDER.iter().enumerate() {
        gprs[g] = get(sc + 8 * i);
    }
    let rip = get(sc + 128);
    if rip >= USER_END {
        return Err(format!("rt_sigreturn to a non-user address {rip:#x}"));
    }
    // Like Linux, the segments come back with RPL 3; anything but user code (or, when the
    // frame asks for its SS to be restored, user data) cannot be returned to.
    let seg = |at: usize| u16::from_le_bytes([uc[at], uc[at + 1]]) | 3;
    if seg(sc + 144) != USER_CS {
        return Err(format!("code segment {:#x} is not user code", seg(sc + 144)));
    }
    if get(0) & 4 != 0 && seg(sc + 150) != USER_SS {
        return Err(format!("stack segment {:#x} is not user data", seg(sc + 150)));
    }
    let rflags = USER_FLAGS | (get(sc + 136) & RESTORED_FLAGS);
    let uc_stack = (get(16), u32::from_le_bytes(uc[24..28].try_into().unwrap_or_default()), get(32));
    Ok(Restored {
        ctx: UserContext { gprs, rip, rflags, fpu: init_fpu() },
        mask: get(296),
        uc_stack,
        fpstate: get(sc + 184),
    })
}

/// The FPU state to restore from the `MATH_BYTES` at a frame's `fpstate`: the whole XSAVE
/// image when the magic numbers say it is one, the legacy region alone otherwise. Err: a state
/// the CPU would refuse (reserved MXCSR bits, unknown features, a compacted header).
pub(crate) fn restore_fpu(x: &[u8]) -> Result<Vec<u8>, String> {
    if x.len() < MATH_BYTES as usize {
        return Err("short FPU area".into());
    }
    let u32_at = |at: usize| u32::from_le_bytes(x[at..at + 4].try_into().unwrap_or_default());
    let mxcsr = u32_at(24);
    if mxcsr & !0xffff != 0 {
        return Err(format!("MXCSR {mxcsr:#x} sets reserved bits"));
    }
    let xsave = u32_at(464) == FP_XSTATE_MAGIC1
        && u32_at(468) == MATH_BYTES as u32
        && u32_at(480) == FPU_BYTES as u32
        && u32_at(FPU_BYTES) == FP_XSTATE_MAGIC2;
    let mut out = vec![0u8; FPU_BYTES];
    if xsave {
        out.copy_from_slice(&x[..FPU_BYTES]);
        let bv = u64::from_le_bytes(out[512..520].try_into().unwrap_or_default());
        if bv & !XFEATURES != 0 || out[520..576].iter().any(|&b| b != 0) {
            return Err(format!("XSAVE header {bv:#x} names features deja's CPU does not have"));
        }
    } else {
        out[..512].copy_from_slice(&x[..512]);
        out[512..520].copy_from_slice(&3u64.to_le_bytes());
    }
    out[464..512].fill(0);
    out[28..32].copy_from_slice(&0xffffu32.to_le_bytes());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> UserContext {
        let mut gprs = [0u64; 16];
        for (i, g) in gprs.iter_mut().enumerate() {
            *g = 0x1000 + i as u64;
        }
        let mut fpu = init_fpu();
        fpu[160..176].copy_from_slice(&[0xab; 16]); // XMM0
        fpu[576..592].copy_from_slice(&[0xcd; 16]); // YMM0's upper half
        fpu[512] = 7;
        UserContext { gprs, rip: 0x40_1234, rflags: 0x246 | 0x400, fpu }
    }

    #[test]
    fn a_frame_round_trips_through_rt_sigreturn() {
        let c = ctx();
        let parts = FrameParts {
            info: info_fault(11, 1, 0x10),
            restorer: 0x40_2000,
            old_mask: 1 << 5,
            uc_stack: (0x7000_0000, 0, 0x4000),
            trap: (14, 6, 0x10),
        };
        let (frame, fpstate) = place(0x7fff_0000_1238, None);
        assert_eq!(fpstate % 64, 0);
        assert!(fpstate + MATH_BYTES <= 0x7fff_0000_1238 - RED_ZONE);
        assert_eq!((frame + 8) % 16, 0);
        assert!(frame + FRAME_BYTES <= fpstate);
        let (f, x) = encode(&c, &parts, fpstate);
        let uc: [u8; 304] = f[8..312].try_into().unwrap();
        let r = decode(&uc).unwrap();
        assert_eq!(r.ctx.gprs, c.gprs);
        assert_eq!(r.ctx.rip, c.rip);
        assert_eq!(r.ctx.rflags, 0x202 | 0x400 | 0x40 | 0x4, "DF, ZF and PF come back, IF stays the monitor's");
        assert_eq!(r.mask, 1 << 5);
        assert_eq!(r.uc_stack, parts.uc_stack);
        assert_eq!(r.fpstate, fpstate);
        assert_eq!(&f[312..316], &11i32.to_le_bytes());
        assert_eq!(&f[328..336], &0x10u64.to_le_bytes());
        let fpu = restore_fpu(&x).unwrap();
        assert_eq!(fpu[160..176], c.fpu[160..176]);
        assert_eq!(fpu[576..592], c.fpu[576..592], "the AVX upper halves come back");
    }

    #[test]
    fn the_alternate_stack_and_bad_frames() {
        let (frame, fpstate) = place(0x1234, Some(0x7000_4000));
        assert!(frame < fpstate && fpstate + MATH_BYTES <= 0x7000_4000);
        let mut uc = [0u8; 304];
        uc[40 + 128..40 + 136].copy_from_slice(&(1u64 << 47).to_le_bytes());
        assert!(decode(&uc).unwrap_err().contains("non-user"));
        uc[40 + 128..40 + 136].copy_from_slice(&0x40_1000u64.to_le_bytes());
        assert!(decode(&uc).unwrap_err().contains("code segment 0x3 is not user code"));
        uc[40 + 144] = 0x08;
        assert!(decode(&uc).unwrap_err().contains("code segment 0xb"), "ring 0 code is refused");
        uc[40 + 144] = 0x33;
        uc[40 + 136..40 + 144].copy_from_slice(&0x3202u64.to_le_bytes());
        assert_eq!(decode(&uc).unwrap().ctx.rflags, 0x202, "IOPL is never taken from a frame");
        uc[0] = 4;
        assert!(decode(&uc).unwrap_err().contains("stack segment 0x3"));
        let (_, mut x) = encode(
            &ctx(),
            &FrameParts {
                info: crate::signal::Queued::sent(10, -6, 1, 0).info(),
                restorer: 1,
                old_mask: 0,
                uc_stack: (0, 2, 0),
                trap: (0, 0, 0),
            },
            0,
        );
        x[512] = 0xff;
        assert!(restore_fpu(&x).unwrap_err().contains("features"));
        x[512] = 3;
        x[24..28].copy_from_slice(&0x1_0000u32.to_le_bytes());
        assert!(restore_fpu(&x).unwrap_err().contains("MXCSR"));
        // Without the magic numbers only the legacy region is taken; AVX starts clean.
        x[24..28].copy_from_slice(&0x1f80u32.to_le_bytes());
        x[464] = 0;
        x[576] = 0x55;
        let fpu = restore_fpu(&x).unwrap();
        assert_eq!(fpu[576], 0);
        assert_eq!(fpu[512], 3);
    }
}
