//! The session with a debugger: requests in, replies out, over any byte stream (a TCP
//! connection from `gdb`'s `target remote`).
//!
//! The program never sees the debugger: breakpoints and steps change nothing it computes, so a
//! session that only stops, looks and goes on ends with the replay's digest. A write to a
//! register or to memory changes the run: from then on it is a branch, which the session says,
//! and it can no longer go backwards (the moments behind it belong to the unchanged run).

use std::io::{Read, Write};

use deja_kernel::ExitStatus;

use crate::engine::{Engine, Stopped};
use crate::replay::Replay;
use crate::rsp::{self, Incoming, Request};

/// What the session tells its caller as it goes (for the terminal `deja debug` runs in).
pub type Log<'a> = &'a mut dyn FnMut(&str);

/// The order of `gdb`'s amd64 general registers (RAX, RBX, RCX, RDX, RSI, RDI, RBP, RSP,
/// R8–R15) as indices into x86's encoding order.
const GDB_GPRS: [usize; 16] = [0, 3, 1, 2, 6, 7, 5, 4, 8, 9, 10, 11, 12, 13, 14, 15];
/// The selectors `gdb` shows after EFLAGS: CS, SS, DS, ES, FS, GS (deja's user segments).
const SELECTORS: [u32; 6] = [0x33, 0x2b, 0, 0, 0, 0];

/// `qXfer` data from `offset`, at most `len` bytes: `l` when it is the last part, `m` before.
/// Binary bytes travel as they are ([`rsp::frame`] escapes what must be).
fn part(data: &[u8], offset: u64, len: u64) -> String {
    let from = (offset as usize).min(data.len());
    let to = from.saturating_add(len as usize).min(data.len());
    let more = if to < data.len() { 'm' } else { 'l' };
    let mut out = String::from(more);
    // One char per byte (Latin-1), which `frame` writes back as that byte.
    out.extend(data[from..to].iter().map(|&b| b as char));
    out
}

/// A debugger's session with one replay.
pub struct Server<'a> {
    engine: &'a mut Engine<Replay>,
    no_ack: bool,
    branched: bool,
    /// The thread whose registers are read (`None`: the running one).
    selected: Option<u64>,
    log: Log<'a>,
}

impl<'a> Server<'a> {
    /// A session over `engine`, telling `log` what happens.
    pub fn new(engine: &'a mut Engine<Replay>, log: Log<'a>) -> Server<'a> {
        Server { engine, no_ack: false, branched: false, selected: None, log }
    }

    /// Answers requests from `stream` until the debugger detaches, kills the program or hangs up.
    pub fn serve(&mut self, stream: &mut (impl Read + Write)) -> std::io::Result<()> {
        let mut decoder = rsp::Decoder::default();
        let mut buf = [0u8; 4096];
        loop {
            let n = stream.read(&mut buf)?;
            if n == 0 {
                return Ok(());
            }
            for item in decoder.push(&buf[..n]) {
                let packet = match item {
                    Incoming::Packet(p) => p,
                    Incoming::Corrupt => {
                        stream.write_all(b"-")?;
                        continue;
                    }
                    Incoming::Ack | Incoming::Nack | Incoming::Interrupt => continue,
                };
                if !self.no_ack {
                    stream.write_all(b"+")?;
                }
                let request = rsp::parse(&packet);
                let (console, reply) = self.answer(&request);
                for line in console {
                    stream.write_all(&rsp::frame(format!("O{}", rsp::hex(line.as_bytes())).as_bytes()))?;
                }
                if request == Request::Kill {
                    return Ok(());
                }
                // Replies are ASCII but for `qXfer` data, one char per byte.
                let bytes: Vec<u8> = reply.chars().map(|c| c as u8).collect();
                stream.write_all(&rsp::frame(&bytes))?;
                stream.flush()?;
                if request == Request::NoAck {
                    self.no_ack = true;
                }
                if request == Request::Detach {
                    return Ok(());
                }
            }
        }
    }

    /// The reply to one request, and lines for the debugger's console before it.
    fn answer(&mut self, request: &Request) -> (Vec<String>, String) {
        let none = Vec::new();
        let reply = match request {
            Request::Supported => {
                "PacketSize=4000;QStartNoAckMode+;ReverseContinue+;ReverseStep+;swbreak+;hwbreak+;qXfer:exec-file:read+;qXfer:auxv:read+"
                    .to_string()
            }
            Request::NoAck | Request::SetThread => "OK".into(),
            Request::ThreadAlive(tid) => match self.threads().contains(tid) {
                true => "OK".into(),
                false => "E01".into(),
            },
            Request::SelectThread(tid) => match tid {
                Some(t) if !self.threads().contains(t) => "E01".into(),
                _ => {
                    self.selected = *tid;
                    "OK".into()
                }
            },
            Request::ExecFile(offset, len) => part(self.engine.tracee.program_path().as_bytes(), *offset, *len),
            Request::Auxv(offset, len) => part(self.engine.tracee.auxv(), *offset, *len),
            Request::Why => self.stop_reply(Stopped::Step),
            Request::Attached => "1".into(),
            Request::CurrentThread => format!("QC{:x}", self.tid()),
            Request::FirstThreads => {
                let tids: Vec<String> = self.threads().iter().map(|t| format!("{t:x}")).collect();
                format!("m{}", tids.join(","))
            }
            Request::MoreThreads => "l".into(),
            Request::ReadRegisters if self.engine.ended() => "E01".into(),
            Request::ReadRegisters => self.registers(),
            Request::ReadRegister(n) => self.register(*n).unwrap_or_else(|| "E01".into()),
            Request::WriteRegister(n, v) => return self.write_register(*n, v),
            Request::WriteRegisters(_) => "E01".into(),
            Request::ReadMemory(addr, len) => self.memory(*addr, *len),
            Request::WriteMemory(addr, data) => {
                if self.engine.ended() || !self.engine.tracee.write(*addr, data) {
                    "E14".into()
                } else {
                    return (self.branch("memory at ".to_string() + &format!("{addr:#x}")), "OK".into());
                }
            }
            Request::Breakpoint(true, addr) => match self.engine.insert(*addr) {
                true => "OK".into(),
                false => {
                    self.engine.remove(*addr);
                    "E01".into()
                }
            },
            Request::Breakpoint(false, addr) => {
                self.engine.remove(*addr);
                "OK".into()
            }
            Request::Continue => return self.go(|e| e.cont()),
            Request::Step => return self.go(|e| e.step()),
            Request::ReverseContinue | Request::ReverseStep if self.branched => {
                let line = "deja: this run is a branch (a register or memory was written): it cannot go backwards\n";
                return (vec![line.to_string()], "E02".into());
            }
            Request::ReverseContinue => return self.go(|e| e.reverse_cont()),
            Request::ReverseStep => return self.go(|e| e.reverse_step()),
            Request::Monitor(cmd) => return (self.monitor(cmd), "OK".into()),
            Request::Detach | Request::Kill => "OK".into(),
            Request::Watchpoint(true, 2, addr, len) => {
                self.engine.watch(*addr, *len);
                "OK".into()
            }
            Request::Watchpoint(false, 2, addr, len) => {
                self.engine.unwatch(*addr, *len);
                "OK".into()
            }
            Request::Watchpoint(..) | Request::Unknown(_) => String::new(),
        };
        (none, reply)
    }

    fn tid(&self) -> u64 {
        match self.engine.ended() {
            true => 1,
            false => self.engine.tracee.kernel().current_tid(),
        }
    }

    /// The running process's threads.
    fn threads(&self) -> Vec<u64> {
        match self.engine.ended() {
            true => vec![1],
            false => self.engine.tracee.threads(),
        }
    }

    /// The registers of the selected thread.
    fn regs(&self) -> Option<deja_vmm::UserRegs> {
        match self.selected {
            Some(t) => self.engine.tracee.thread_regs(t),
            None => Some(self.engine.tracee.regs()),
        }
    }

    fn go(
        &mut self,
        f: impl FnOnce(&mut Engine<Replay>) -> Result<Stopped, crate::engine::DebugError>,
    ) -> (Vec<String>, String) {
        match f(self.engine) {
            Ok(stopped) => {
                let mut console = Vec::new();
                if stopped == Stopped::Ended {
                    let line = self.ended_line();
                    (self.log)(&line);
                    console.push(line + "\n");
                }
                (console, self.stop_reply(stopped))
            }
            Err(e) => {
                let mut lines = vec![format!("deja: {e}")];
                if let Err(again) = self.engine.resync() {
                    lines.push(format!("deja: and the run could not be put back where it was: {again}"));
                }
                for l in &lines {
                    (self.log)(l);
                }
                (lines.into_iter().map(|l| l + "\n").collect(), "E01".into())
            }
        }
    }

    /// How the run ended, with its digest.
    fn ended_line(&self) -> String {
        match self.engine.tracee.outcome() {
            Some(o) => {
                let branch = match self.branched {
                    true => " (a branch: the debugger changed the run)",
                    false => "",
                };
                let failure = o.failure.as_ref().map_or("no failure".to_string(), |f| f.to_string());
                format!("deja: the run ended ({failure}); digest {}{branch}", o.digest)
            }
            None => "deja: the run ended".into(),
        }
    }

    fn stop_reply(&self, stopped: Stopped) -> String {
        if self.engine.ended() {
            let status = self.engine.tracee.outcome().and_then(|o| o.lives.last().map(|l| l.run.report.exit.clone()));
            return match status {
                Some(ExitStatus::Exited { code }) => format!("W{:02x}", code & 0xff),
                Some(ExitStatus::Signaled { signal, .. }) => format!("X{:02x}", signal & 0xff),
                None => "W00".into(),
            };
        }
        let tid = self.tid();
        match stopped {
            Stopped::Breakpoint(_) => format!("T05swbreak:;thread:{tid:x};"),
            Stopped::Begin => format!("T05replaylog:begin;thread:{tid:x};"),
            Stopped::Watch(addr) => format!("T05watch:{addr:x};thread:{tid:x};"),
            Stopped::Step | Stopped::Ended => format!("T05thread:{tid:x};"),
        }
    }

    fn registers(&self) -> String {
        let Some(r) = self.regs() else { return "E01".into() };
        let mut out = String::new();
        for i in GDB_GPRS {
            out.push_str(&rsp::hex(&r.gprs[i].to_le_bytes()));
        }
        out.push_str(&rsp::hex(&r.rip.to_le_bytes()));
        out.push_str(&rsp::hex(&(r.rflags as u32).to_le_bytes()));
        for s in SELECTORS {
            out.push_str(&rsp::hex(&s.to_le_bytes()));
        }
        out
    }

    fn register(&self, n: u64) -> Option<String> {
        if self.engine.ended() {
            return None;
        }
        let r = self.regs()?;
        Some(match n {
            0..=15 => rsp::hex(&r.gprs[GDB_GPRS[n as usize]].to_le_bytes()),
            16 => rsp::hex(&r.rip.to_le_bytes()),
            17 => rsp::hex(&(r.rflags as u32).to_le_bytes()),
            18..=23 => rsp::hex(&SELECTORS[n as usize - 18].to_le_bytes()),
            _ => return None,
        })
    }

    fn write_register(&mut self, n: u64, value: &[u8]) -> (Vec<String>, String) {
        let other = self.selected.is_some_and(|t| t != self.tid());
        if self.engine.ended() || other || n > 16 || value.len() != 8 {
            return (Vec::new(), "E01".into());
        }
        let v = u64::from_le_bytes(value.try_into().unwrap_or([0; 8]));
        let mut r = self.engine.tracee.regs();
        match n {
            16 => r.rip = v,
            _ => r.gprs[GDB_GPRS[n as usize]] = v,
        }
        self.engine.tracee.set_regs(&r);
        (self.branch(format!("register {n}")), "OK".into())
    }

    fn branch(&mut self, what: String) -> Vec<String> {
        let first = !self.branched;
        self.branched = true;
        let line = format!("deja: the debugger wrote {what}: the run is now a branch, no longer the replay");
        (self.log)(&line);
        match first {
            true => vec![line + "\n"],
            false => Vec::new(),
        }
    }

    fn memory(&self, addr: u64, len: u64) -> String {
        if self.engine.ended() {
            return "E14".into();
        }
        let len = len.min(0x1000) as usize;
        let mut buf = vec![0u8; len];
        if self.engine.tracee.read(addr, &mut buf) {
            return rsp::hex(&buf);
        }
        // As much as is mapped from the start.
        let mut got = Vec::new();
        for i in 0..len as u64 {
            let mut b = [0u8];
            if !self.engine.tracee.read(addr + i, &mut b) {
                break;
            }
            got.push(b[0]);
        }
        match got.is_empty() {
            true => "E14".into(),
            false => rsp::hex(&got),
        }
    }

    /// `monitor` commands: deja's own view of the moment.
    fn monitor(&mut self, cmd: &str) -> Vec<String> {
        let words: Vec<&str> = cmd.split_whitespace().collect();
        match words.as_slice() {
            ["when"] | ["where"] | ["time"] => vec![self.when()],
            ["digest"] => vec![match self.engine.ended() {
                true => self.ended_line() + "\n",
                false => "deja: the run has not ended; continue to its end for its digest\n".into(),
            }],
            ["goto", "syscall", k] | ["goto", "syscall", k, "life", _] => {
                let life = match words.get(4) {
                    Some(l) => l.parse().unwrap_or(usize::MAX),
                    None => self.engine.point().life,
                };
                match (k.parse::<u64>(), self.branched) {
                    (_, true) => {
                        vec!["deja: this run is a branch: it cannot go back to a moment of the replay\n".into()]
                    }
                    (Ok(k), false) => match self.engine.goto_syscall(life, k) {
                        Ok(()) => vec![
                            format!(
                                "deja: at the trap of syscall {k} of life {life}; `flushregs` shows its registers\n"
                            ),
                            self.when(),
                        ],
                        Err(e) => vec![format!("deja: {e}\n")],
                    },
                    (Err(_), _) => vec![format!("deja: not a syscall number: {k}\n")],
                }
            }
            _ => vec![
                "deja monitor commands:\n".into(),
                "  when                       the life, syscalls served, virtual time and decisions of this moment\n"
                    .into(),
                "  goto syscall K [life L]    the trap of syscall K (before it is served)\n".into(),
                "  digest                     the run's digest, once it ended\n".into(),
            ],
        }
    }

    fn when(&self) -> String {
        if self.engine.ended() {
            return self.ended_line() + "\n";
        }
        let k = self.engine.tracee.kernel();
        format!(
            "deja: life {}, {} syscalls served, virtual time {} ns, {} decisions taken, thread {}; {} replays so far\n",
            self.engine.point().life,
            k.syscall_count(),
            k.virtual_time_ns(),
            k.decision_count(),
            k.current_tid(),
            self.engine.replays,
        )
    }
}
