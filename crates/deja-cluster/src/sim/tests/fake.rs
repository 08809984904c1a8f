//! Fake nodes for the simulator's tests: a [`Machine`] whose program is a Rust state machine
//! making syscalls into deja's real kernel, over a [`FakeMemory`]. What the simulator sees is
//! what it sees of a VM: syscalls served, stops when the node blocks, yields, exits or crashes,
//! the kernel's packets and clocks. No `/dev/kvm`.
//!
//! A node's program is chosen by its arguments (see [`program_for`]); the image is a minimal
//! ELF whose code never runs, with scratch memory at [`SCRATCH`].

use deja_kernel::{FakeMemory, Memory, SyscallOutcome, UserContext, PAGE_SIZE};
use deja_vmm::VmError;

use super::super::*;

/// Where a fake program's scratch memory is (the image's bss).
pub const SCRATCH: u64 = 0x60_0000;
const SCRATCH_LEN: u64 = 0x4000;

/// A static x86-64 ELF: the headers and a few bytes of code at 0x40_0000 (read-only,
/// executable), and [`SCRATCH`] as bss.
pub fn image() -> Vec<u8> {
    let phdrs = 2u64;
    let len = 64 + 56 * phdrs + 16;
    let mut out = vec![0u8; len as usize];
    out[..4].copy_from_slice(b"\x7fELF");
    out[4] = 2; // 64-bit
    out[5] = 1; // little-endian
    out[6] = 1;
    out[16..18].copy_from_slice(&2u16.to_le_bytes()); // ET_EXEC
    out[18..20].copy_from_slice(&62u16.to_le_bytes()); // x86-64
    out[20..24].copy_from_slice(&1u32.to_le_bytes());
    out[24..32].copy_from_slice(&(0x40_0000 + len - 16).to_le_bytes()); // entry
    out[32..40].copy_from_slice(&64u64.to_le_bytes()); // phoff
    out[52..54].copy_from_slice(&64u16.to_le_bytes());
    out[54..56].copy_from_slice(&56u16.to_le_bytes());
    out[56..58].copy_from_slice(&(phdrs as u16).to_le_bytes());
    // type, flags, offset, vaddr, paddr, filesz, memsz, align
    let load = |flags: u32, vaddr: u64, filesz: u64, memsz: u64| {
        let mut p = Vec::with_capacity(56);
        p.extend_from_slice(&1u32.to_le_bytes());
        p.extend_from_slice(&flags.to_le_bytes());
        for v in [0, vaddr, vaddr, filesz, memsz, 0x1000] {
            p.extend_from_slice(&v.to_le_bytes());
        }
        p
    };
    out[64..120].copy_from_slice(&load(5, 0x40_0000, len, len));
    out[120..176].copy_from_slice(&load(6, SCRATCH, 0, SCRATCH_LEN));
    out[len as usize - 16..].fill(0x90);
    out
}

/// A syscall a fake program makes.
#[derive(Debug, Clone, Copy)]
pub struct Call {
    /// Its name.
    pub name: &'static str,
    /// Its arguments.
    pub args: [u64; 6],
}

/// `name(args…)`.
pub fn call(name: &'static str, args: &[u64]) -> Call {
    let mut a = [0u64; 6];
    a[..args.len()].copy_from_slice(args);
    Call { name, args: a }
}

/// What a fake node runs.
pub trait Program {
    /// The next syscall, given the return of the last one (`None` before the first).
    fn next(&mut self, last: Option<i64>, mem: &mut dyn Memory) -> Call;
}

/// A `sockaddr_in` for `ip:port` written at `at`; its length.
pub fn sockaddr(mem: &mut dyn Memory, at: u64, ip: [u8; 4], port: u16) -> u64 {
    let mut b = [0u8; 16];
    b[..2].copy_from_slice(&2u16.to_le_bytes());
    b[2..4].copy_from_slice(&port.to_be_bytes());
    b[4..8].copy_from_slice(&ip);
    mem.write(at, &b).expect("scratch");
    16
}

/// `write(fd, text)` from scratch memory at `at`.
pub fn say(mem: &mut dyn Memory, at: u64, fd: u64, text: &str) -> Call {
    mem.write(at, text.as_bytes()).expect("scratch");
    call("write", &[fd, at, text.len() as u64])
}

/// A fake node's machine.
pub struct Fake {
    mem: FakeMemory,
    program: Box<dyn Program>,
    /// The return of the last syscall, as the program sees it.
    last: Option<i64>,
    /// A call made but not served (the run stopped before it).
    pending: Option<Call>,
    calls: u64,
}

fn unexpected(what: &str) -> VmError {
    VmError::Unexpected { what: format!("fake machine: {what}"), rip: 0 }
}

impl Fake {
    /// As the VM does after a syscall returns and before the thread runs on: the kernel's wakeup
    /// returns (for the one thread), its pre-run work, and a signal taken on the way back.
    fn back_to_user(&mut self, kernel: &mut Kernel) -> Result<Option<ExitStatus>, VmError> {
        if !kernel.take_spawned().is_empty() || kernel.take_exec().is_some() {
            return Err(unexpected("fake programs have one thread and never exec"));
        }
        let tid = kernel.current_tid();
        for (t, rax) in kernel.take_wakeup_returns() {
            if t == tid {
                self.last = Some(rax as i64);
            }
        }
        if kernel.signal_due() {
            let mut ctx = UserContext { gprs: [0; 16], rip: 0, rflags: 0x202, fpu: vec![0; deja_kernel::FPU_BYTES] };
            return match kernel.deliver_signal(&mut self.mem, &mut ctx) {
                Err(status) => Ok(Some(status)),
                Ok(None) => Ok(None),
                Ok(Some(_)) => Err(unexpected("fake programs install no signal handlers")),
            };
        }
        Ok(None)
    }
}

impl Machine for Fake {
    fn boot(spec: &ProgramSpec, memory: u64, _opts: BootOptions) -> Result<(Fake, Kernel), deja_vmm::RunError> {
        let mut mem = FakeMemory::new(memory / PAGE_SIZE);
        let spec = ProgramSpec {
            rewrite: deja_kernel::host::hostchan::Rewrite::Off,
            vdso: deja_kernel::time::vdso::VdsoMode::Off,
            ..spec.clone()
        };
        let (kernel, _) = Kernel::load(spec.clone(), &mut mem)?;
        let program = program_for(&spec.argv[1..]);
        Ok((Fake { mem, program, last: None, pending: None, calls: 0 }, kernel))
    }

    fn run_until(
        &mut self,
        kernel: &mut Kernel,
        sink: &mut dyn FnMut(Stream, &[u8]),
        stop_at: Option<u64>,
    ) -> Result<Stop, VmError> {
        if let Some(status) = self.back_to_user(kernel)? {
            return Ok(Stop::Exited(status));
        }
        loop {
            let c = match self.pending.take() {
                Some(c) => c,
                None => self.program.next(self.last, &mut self.mem),
            };
            if stop_at == Some(kernel.syscall_count()) {
                self.pending = Some(c);
                return Ok(Stop::AtSyscall);
            }
            self.calls += 1;
            let nr = deja_kernel::syscalls::number(c.name).ok_or_else(|| unexpected(c.name))?;
            let outcome = kernel.syscall(&mut self.mem, nr, c.args);
            for (stream, bytes) in kernel.take_output() {
                sink(stream, &bytes);
            }
            match outcome {
                SyscallOutcome::Return(v) => {
                    self.last = Some(v as i64);
                    if let Some(status) = self.back_to_user(kernel)? {
                        return Ok(Stop::Exited(status));
                    }
                    kernel.before_run(&mut self.mem);
                    if kernel.yield_due() {
                        return Ok(Stop::Yield);
                    }
                }
                SyscallOutcome::Idle => {
                    self.last = Some(deja_kernel::task::threads::BLOCKED_RETURN as i64);
                    return Ok(Stop::Idle);
                }
                SyscallOutcome::Exit(status) => return Ok(Stop::Exited(status)),
                SyscallOutcome::Crash => return Ok(Stop::Crashed),
                SyscallOutcome::Resume(_) => return Err(unexpected("rt_sigreturn")),
            }
        }
    }

    fn memory(&mut self) -> &mut dyn Memory {
        &mut self.mem
    }

    fn counters(&self) -> Counters {
        Counters { exits: self.calls, host_run_ns: 0, host_cores: Vec::new() }
    }

    fn arm_blocks(&mut self, _blocks: Arc<BlockImage>, _seen: &Seen) {}

    fn take_block_hits(&mut self) -> Vec<BlockHit> {
        Vec::new()
    }
}

/// The program a fake node's arguments name:
/// - `echo PORT`: a TCP server that answers each message with the same bytes, one client after
///   another, and never ends;
/// - `client IP PORT N`: connects, sends N 8-byte messages, checks each answer, prints
///   `done N` and exits 0; any failed call is printed on stderr and exits 1;
/// - `sleep MS`: sleeps, prints `slept`, exits 0;
/// - `spin`: calls `getpid` forever;
/// - `log N`: opens `/data/log` for appending (creating it, and syncing `/data`), prints `found B` (its size in bytes), appends N
///   8-byte records, each made durable by `fdatasync`, prints `logged N`, exits 0.
pub fn program_for(args: &[String]) -> Box<dyn Program> {
    let arg = |i: usize| args.get(i).map(String::as_str).unwrap_or("");
    match arg(0) {
        "echo" => Box::new(Echo { port: arg(1).parse().expect("port"), at: EchoAt::Start, conn: 0 }),
        "client" => Box::new(Client {
            ip: crate::config::parse_ip(arg(1)).expect("ip"),
            port: arg(2).parse().expect("port"),
            count: arg(3).parse().expect("count"),
            at: ClientAt::Start,
            sent: 0,
            got: 0,
        }),
        "sleep" => Box::new(Sleep { ms: arg(1).parse().expect("ms"), step: 0 }),
        "spin" => Box::new(Spin),
        "exit" => Box::new(Quit { code: arg(1).parse().expect("code"), step: 0 }),
        "log" => Box::new(Log { count: arg(1).parse().expect("count"), at: LogAt::Start, fd: 0, done: 0 }),
        other => panic!("no fake program {other:?}"),
    }
}

const MSG: u64 = 8;
/// Scratch offsets: an address, a message, an answer, text.
const ADDR: u64 = SCRATCH;
const OUT: u64 = SCRATCH + 0x100;
const IN: u64 = SCRATCH + 0x200;
const TEXT: u64 = SCRATCH + 0x300;
const EXIT: &str = "exit_group";

/// Where an echo server is.
enum EchoAt {
    Start,
    Socket,
    Bound,
    Listening,
    Accepted,
    Read,
    Wrote,
    Closed,
}

struct Echo {
    port: u16,
    at: EchoAt,
    conn: u64,
}

impl Program for Echo {
    fn next(&mut self, last: Option<i64>, mem: &mut dyn Memory) -> Call {
        let r = last.unwrap_or(0);
        let (at, c) = match self.at {
            EchoAt::Start => (EchoAt::Socket, call("socket", &[2, 1, 0])),
            EchoAt::Socket => {
                assert_eq!(r, 3, "the listening socket");
                let len = sockaddr(mem, ADDR, [0; 4], self.port);
                (EchoAt::Bound, call("bind", &[3, ADDR, len]))
            }
            EchoAt::Bound => (EchoAt::Listening, call("listen", &[3, 16])),
            EchoAt::Listening | EchoAt::Closed => (EchoAt::Accepted, call("accept", &[3, 0, 0])),
            // A failed accept: the next connection.
            EchoAt::Accepted if r < 0 => (EchoAt::Accepted, call("accept", &[3, 0, 0])),
            EchoAt::Accepted => {
                self.conn = r as u64;
                (EchoAt::Read, call("read", &[self.conn, IN, MSG]))
            }
            // The connection ended (or was reset): close it, serve the next.
            EchoAt::Read if r <= 0 => (EchoAt::Closed, call("close", &[self.conn])),
            EchoAt::Read => (EchoAt::Wrote, call("write", &[self.conn, IN, r as u64])),
            EchoAt::Wrote if r < 0 => (EchoAt::Closed, call("close", &[self.conn])),
            EchoAt::Wrote => (EchoAt::Read, call("read", &[self.conn, IN, MSG])),
        };
        self.at = at;
        c
    }
}

/// Where a client is.
enum ClientAt {
    Start,
    Socket,
    Connecting,
    Sending,
    Reading,
    Exiting(u64),
}

struct Client {
    ip: [u8; 4],
    port: u16,
    count: u64,
    at: ClientAt,
    sent: u64,
    /// Bytes of the current answer read so far.
    got: u64,
}

impl Client {
    fn fail(&mut self, mem: &mut dyn Memory, what: &str, r: i64) -> Call {
        self.at = ClientAt::Exiting(1);
        say(mem, TEXT, 2, &format!("client: {what} failed: {r}\n"))
    }

    /// The next message, or `done` when every one was answered.
    fn send(&mut self, mem: &mut dyn Memory) -> Call {
        if self.sent == self.count {
            self.at = ClientAt::Exiting(0);
            return say(mem, TEXT, 1, &format!("done {}\n", self.count));
        }
        mem.write(OUT, format!("ping{:04}", self.sent).as_bytes()).expect("scratch");
        self.sent += 1;
        self.at = ClientAt::Sending;
        call("write", &[3, OUT, MSG])
    }
}

impl Program for Client {
    fn next(&mut self, last: Option<i64>, mem: &mut dyn Memory) -> Call {
        let r = last.unwrap_or(0);
        match self.at {
            ClientAt::Start => {
                self.at = ClientAt::Socket;
                call("socket", &[2, 1, 0])
            }
            ClientAt::Socket => {
                assert_eq!(r, 3, "the client's socket");
                let len = sockaddr(mem, ADDR, self.ip, self.port);
                self.at = ClientAt::Connecting;
                call("connect", &[3, ADDR, len])
            }
            ClientAt::Connecting if r < 0 => self.fail(mem, "connect", r),
            ClientAt::Connecting => self.send(mem),
            ClientAt::Sending if r < 0 => self.fail(mem, "write", r),
            ClientAt::Sending => {
                self.got = 0;
                self.at = ClientAt::Reading;
                call("read", &[3, IN, MSG])
            }
            ClientAt::Reading if r < 0 => self.fail(mem, "read", r),
            ClientAt::Reading if r == 0 => self.fail(mem, "read (the connection closed)", 0),
            ClientAt::Reading => {
                self.got += r as u64;
                if self.got < MSG {
                    return call("read", &[3, IN + self.got, MSG - self.got]);
                }
                let mut answer = [0u8; MSG as usize];
                mem.read(IN, &mut answer).expect("scratch");
                let want = format!("ping{:04}", self.sent - 1);
                assert_eq!(&answer, want.as_bytes(), "the echo answers what was sent");
                self.send(mem)
            }
            ClientAt::Exiting(code) => call(EXIT, &[code]),
        }
    }
}

struct Sleep {
    ms: u64,
    step: u32,
}

impl Program for Sleep {
    fn next(&mut self, _last: Option<i64>, mem: &mut dyn Memory) -> Call {
        self.step += 1;
        match self.step {
            1 => {
                let ts = [self.ms / 1000, (self.ms % 1000) * 1_000_000];
                let b: Vec<u8> = ts.iter().flat_map(|v| v.to_le_bytes()).collect();
                mem.write(ADDR, &b).expect("scratch");
                call("nanosleep", &[ADDR, 0])
            }
            2 => say(mem, TEXT, 1, "slept\n"),
            _ => call(EXIT, &[0]),
        }
    }
}

/// Says `bye` and exits with `code`.
struct Quit {
    code: u64,
    step: u32,
}

impl Program for Quit {
    fn next(&mut self, _last: Option<i64>, mem: &mut dyn Memory) -> Call {
        self.step += 1;
        match self.step {
            1 => say(mem, TEXT, 1, "bye\n"),
            _ => call(EXIT, &[self.code]),
        }
    }
}

struct Spin;

impl Program for Spin {
    fn next(&mut self, _last: Option<i64>, _mem: &mut dyn Memory) -> Call {
        call("getpid", &[])
    }
}

/// Where a logger is.
enum LogAt {
    Start,
    Opened,
    DirOpened,
    DirSynced,
    Sized,
    Said,
    Wrote,
    Synced,
    Exiting,
}

struct Log {
    count: u64,
    at: LogAt,
    fd: u64,
    done: u64,
}

impl Program for Log {
    fn next(&mut self, last: Option<i64>, mem: &mut dyn Memory) -> Call {
        let r = last.unwrap_or(0);
        let (at, c) = match self.at {
            LogAt::Start => {
                mem.write(ADDR, b"/data/log\0").expect("scratch");
                (LogAt::Opened, call("openat", &[-100i64 as u64, ADDR, 0x441, 0o644]))
            }
            LogAt::Opened => {
                assert!(r >= 0, "open: {r}");
                self.fd = r as u64;
                // The file's name is durable only once its directory is synced.
                mem.write(ADDR, b"/data\0").expect("scratch");
                (LogAt::DirOpened, call("openat", &[-100i64 as u64, ADDR, 0o200000, 0]))
            }
            LogAt::DirOpened => {
                assert!(r >= 0, "open /data: {r}");
                (LogAt::DirSynced, call("fsync", &[r as u64]))
            }
            LogAt::DirSynced => (LogAt::Sized, call("lseek", &[self.fd, 0, 2])),
            LogAt::Sized => (LogAt::Said, say(mem, TEXT, 1, &format!("found {r}\n"))),
            LogAt::Said | LogAt::Synced if self.done == self.count => {
                (LogAt::Exiting, say(mem, TEXT, 1, &format!("logged {}\n", self.count)))
            }
            LogAt::Said | LogAt::Synced => {
                mem.write(OUT, format!("rec{:04}\n", self.done).as_bytes()).expect("scratch");
                (LogAt::Wrote, call("write", &[self.fd, OUT, MSG]))
            }
            LogAt::Wrote => {
                assert_eq!(r, MSG as i64, "write");
                self.done += 1;
                (LogAt::Synced, call("fdatasync", &[self.fd]))
            }
            LogAt::Exiting => (LogAt::Exiting, call(EXIT, &[0])),
        };
        self.at = at;
        c
    }
}
