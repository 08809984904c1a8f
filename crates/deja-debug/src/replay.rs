//! The KVM tracee: a program bug's replay in a [`Session`], made as `deja replay` makes it
//! (the program runs untouched to the bug's steering point, takes its input there, and runs on
//! through every life), with breakpoints, software single steps and restarts from scratch.
//!
//! What the program prints reaches `out` once: a replay from the start prints only what goes
//! beyond what earlier replays printed, so going backwards and forwards again never repeats it.

use deja_explore::input::{Input, Outcome, Target};
use deja_kernel::{Kernel, Stream};
use deja_vmm::{BootOptions, DebugStop, Session, Settings, UserRegs};

use crate::engine::{DebugError, Event, Tracee};
use crate::step::{self, Regs};

/// Where the program's output goes.
pub type Output = Box<dyn FnMut(Stream, &[u8])>;

/// A bug's replay under the debugger.
pub struct Replay {
    target: Target,
    settings: Settings,
    fork_at: u64,
    input: Input,
    session: Session,
    prepared: bool,
    life: usize,
    /// Bytes of stdout and stderr this replay produced, and the most any replay printed.
    seen: [u64; 2],
    printed: [u64; 2],
    out: Output,
    stdout: Vec<u8>,
    /// The current life's auxiliary vector as its stack holds it at the entry (what gdb reads
    /// to place a position-independent program and find the dynamic loader).
    auxv: Vec<u8>,
}

fn run_error(e: impl std::fmt::Display) -> DebugError {
    DebugError::Run { message: e.to_string() }
}

fn boot(target: &Target, settings: &Settings, input: &Input) -> Result<Session, DebugError> {
    let mut spec = target.spec.clone();
    spec.seed = input.seed.unwrap_or(spec.seed);
    Session::boot_with(spec, target.memory, BootOptions::new(*settings)).map_err(run_error)
}

impl Replay {
    /// Boots the replay of `input` (steered at syscall `fork_at`) of `target`, at its start.
    pub fn new(
        target: Target,
        settings: Settings,
        fork_at: u64,
        input: Input,
        out: Output,
    ) -> Result<Replay, DebugError> {
        let session = boot(&target, &settings, &input)?;
        Ok(Replay {
            target,
            settings,
            fork_at,
            input,
            session,
            prepared: false,
            life: 0,
            seen: [0; 2],
            printed: [0; 2],
            out,
            stdout: Vec::new(),
            auxv: Vec::new(),
        })
        .map(|mut r| {
            r.auxv = r.read_auxv();
            r
        })
    }

    /// The auxiliary vector on the stack the program starts with: after `argc`, the argument
    /// pointers and the environment pointers (each list ending in 0), pairs up to `AT_NULL`.
    fn read_auxv(&self) -> Vec<u8> {
        let mut at = self.regs().gprs[4];
        let word = |a: u64| self.read_u64(a);
        let Some(argc) = word(at) else { return Vec::new() };
        at += 8 * (argc + 2);
        for _ in 0..4096 {
            match word(at) {
                Some(0) => break,
                Some(_) => at += 8,
                None => return Vec::new(),
            }
        }
        at += 8;
        let mut out = Vec::new();
        for _ in 0..64 {
            let (Some(key), Some(value)) = (word(at), word(at + 8)) else { return Vec::new() };
            out.extend_from_slice(&key.to_le_bytes());
            out.extend_from_slice(&value.to_le_bytes());
            at += 16;
            if key == 0 {
                break;
            }
        }
        out
    }

    /// The current life's auxiliary vector, as bytes.
    pub fn auxv(&self) -> &[u8] {
        &self.auxv
    }

    /// The run's outcome (its lives, digest and failure), once it ended.
    pub fn outcome(&self) -> Option<Outcome> {
        let lives = self.session.debug_lives();
        (lives.last().is_some_and(|l| !l.crashed)).then(|| deja_explore::input::outcome(lives.to_vec(), &self.stdout))
    }

    /// The current life's kernel.
    pub fn kernel(&self) -> &Kernel {
        self.session.kernel()
    }

    /// The running thread's registers.
    pub fn regs(&self) -> UserRegs {
        self.session.vm().user_regs()
    }

    /// The threads of the running thread's process, ascending.
    pub fn threads(&self) -> Vec<u64> {
        let current = self.session.kernel().current_tid();
        let procs = self.session.kernel().processes_view();
        let mine = procs.iter().find(|p| p.threads.iter().any(|t| t.tid == current));
        mine.map_or(vec![current], |p| p.threads.iter().map(|t| t.tid).collect())
    }

    /// The registers of thread `tid` of the running process.
    pub fn thread_regs(&self, tid: u64) -> Option<UserRegs> {
        self.threads().contains(&tid).then(|| self.session.vm().thread_regs(tid)).flatten()
    }

    /// The program's host path.
    pub fn program_path(&self) -> &str {
        &self.target.path
    }

    /// Sets them (a change of the run).
    pub fn set_regs(&mut self, regs: &UserRegs) {
        self.session.vm_mut().set_user_regs(regs);
    }

    /// Reads memory as the program sees it; `false` where no page is present.
    pub fn read(&self, va: u64, buf: &mut [u8]) -> bool {
        self.session.vm().read_debug(va, buf)
    }

    /// Writes memory (a change of the run).
    pub fn write(&mut self, va: u64, data: &[u8]) -> bool {
        self.session.vm_mut().write_debug(va, data)
    }

    fn read_u64(&self, va: u64) -> Option<u64> {
        let mut b = [0u8; 8];
        self.read(va, &mut b).then(|| u64::from_le_bytes(b))
    }

    /// Up to 16 bytes of code at `va`, as many as are mapped.
    fn code_at(&self, va: u64) -> Vec<u8> {
        let room = (0x1000 - (va & 0xfff)).min(16) as usize;
        let mut buf = vec![0u8; 16];
        if self.read(va, &mut buf) {
            return buf;
        }
        buf.truncate(room);
        match self.read(va, &mut buf) {
            true => buf,
            false => Vec::new(),
        }
    }
}

impl Tracee for Replay {
    fn reset(&mut self) -> Result<(), DebugError> {
        self.session = boot(&self.target, &self.settings, &self.input)?;
        self.prepared = false;
        self.life = 0;
        self.seen = [0; 2];
        self.stdout.clear();
        self.auxv = self.read_auxv();
        Ok(())
    }

    fn run(&mut self, stop_at: Option<u64>) -> Result<Event, DebugError> {
        loop {
            let steering = !self.prepared && self.life == 0;
            let at = match (steering, stop_at) {
                (true, Some(k)) => Some(k.min(self.fork_at)),
                (true, None) => Some(self.fork_at),
                (false, k) => k,
            };
            let Replay { session, seen, printed, out, stdout, .. } = self;
            let mut sink = |s: Stream, bytes: &[u8]| {
                let i = usize::from(s == Stream::Stderr);
                deja_explore::input::keep_stdout(stdout, s, bytes);
                let start = seen[i];
                seen[i] += bytes.len() as u64;
                if seen[i] > printed[i] {
                    let skip = printed[i].saturating_sub(start) as usize;
                    out(s, &bytes[skip..]);
                    printed[i] = seen[i];
                }
            };
            let stop = session.debug_run(&mut sink, at).map_err(run_error)?;
            match stop {
                DebugStop::AtSyscall if steering && self.session.kernel().syscall_count() == self.fork_at => {
                    self.input.prepare(self.session.kernel_mut());
                    self.prepared = true;
                    if stop_at == Some(self.fork_at) {
                        return Ok(Event::AtSyscall);
                    }
                }
                DebugStop::AtSyscall => return Ok(Event::AtSyscall),
                DebugStop::Breakpoint(at) => return Ok(Event::Breakpoint(at)),
                DebugStop::NewLife => {
                    self.life += 1;
                    self.auxv = self.read_auxv();
                    return Ok(Event::NewLife);
                }
                DebugStop::Ended => return Ok(Event::Ended),
            }
        }
    }

    fn set_breakpoint(&mut self, at: u64) -> bool {
        self.session.vm_mut().set_breakpoint(at)
    }

    fn clear_breakpoint(&mut self, at: u64) {
        self.session.vm_mut().clear_breakpoint(at);
    }

    fn is_breakpoint(&self, at: u64) -> bool {
        self.session.vm().is_breakpoint(at)
    }

    fn successors(&mut self) -> Result<Vec<u64>, DebugError> {
        let r = self.regs();
        let code = self.code_at(r.rip);
        let regs = Regs { gprs: r.gprs, rip: r.rip, fs_base: r.fs_base, gs_base: r.gs_base };
        step::successors(&code, &regs, &mut |va| self.read_u64(va)).ok_or(DebugError::Decode { at: r.rip })
    }

    fn is_syscall(&mut self) -> bool {
        let mut b = [0u8; 2];
        self.read(self.regs().rip, &mut b) && b == [0x0f, 0x05]
    }

    fn pc(&self) -> u64 {
        self.regs().rip
    }

    fn tid(&self) -> u64 {
        self.session.kernel().current_tid()
    }

    fn read(&self, va: u64, buf: &mut [u8]) -> bool {
        Replay::read(self, va, buf)
    }

    fn life(&self) -> usize {
        self.life
    }

    fn syscalls(&self) -> u64 {
        self.session.kernel().syscall_count()
    }
}
