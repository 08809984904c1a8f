//! Points of a replayed run, and how the debugger goes forwards and backwards between them.
//!
//! A run under deja is a pure function of its inputs, so any moment of it can be reached again
//! by running it from the start. What needs care is naming a moment exactly without a
//! performance counter. Syscalls are exact boundaries: the kernel counts them. Between two
//! syscalls only one thread runs (deja switches threads at syscalls), and a moment there is
//! named by what the debugger did since the boundary: a [`Point`] is a life, a base (the life's
//! start, or the trap of its syscall K, before it is served), and the operations that led on
//! from there: run on to the first arrival at one of a set of addresses ([`Op::Cont`]), or
//! execute one instruction ([`Op::Step`]). Breakpoints change nothing the program computes, so
//! the same operations from the same base arrive at the same moment in every replay.
//!
//! - *Reverse continue*: the run is replayed from the start to now with the breakpoints in,
//!   recording every arrival at them (life, syscalls served, address); the last one before now
//!   is the J-th arrival after the trap of syscall K-1, reached again as K-1 then J times
//!   `Cont`.
//! - *Reverse step*: the instructions from the base to now are counted by stepping each one;
//!   the moment before is the base and one step fewer. At a base, the count runs from the
//!   previous base to the syscall instruction.
//!
//! The engine works over a [`Tracee`]: the KVM replay of a bug ([`crate::replay`]), or the
//! fake program of the unit tests.

use std::collections::BTreeSet;

/// A set of code addresses.
pub type Addrs = BTreeSet<u64>;

/// What the debugger did since a point's base.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Run on to the first arrival at one of these addresses (the instruction there not yet
    /// executed); an arrival where the run starts does not count.
    Cont(Addrs),
    /// Execute one instruction.
    Step,
}

/// Where a point's operations start from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Base {
    /// The life's first instruction, before it runs.
    Start,
    /// The trap of the life's syscall K (0-based), before it is served.
    At(u64),
}

/// A moment of the run, reachable again from the start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Point {
    /// The life (0 is the first; a crash starts the next).
    pub life: usize,
    /// Where the operations start.
    pub base: Base,
    /// The operations since.
    pub ops: Vec<Op>,
}

impl Point {
    /// The start of the run.
    pub fn start() -> Point {
        Point { life: 0, base: Base::Start, ops: Vec::new() }
    }

    /// The base of a moment in `life` after `syscalls` syscalls were served: the trap of the
    /// last one, or the life's start.
    fn base_for(syscalls: u64) -> Base {
        match syscalls {
            0 => Base::Start,
            k => Base::At(k - 1),
        }
    }
}

/// What a [`Tracee`] stopped at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A breakpoint at this address was reached (its instruction not executed).
    Breakpoint(u64),
    /// The syscall asked for trapped, before it was served.
    AtSyscall,
    /// A life crashed; the next one is at its first instruction.
    NewLife,
    /// The run ended.
    Ended,
}

/// Why the debugger could not do what it was asked.
#[derive(Debug, snafu::Snafu)]
pub enum DebugError {
    /// The run itself failed.
    #[snafu(display("{message}"))]
    Run {
        /// What happened.
        message: String,
    },
    /// A breakpoint's address holds no code yet.
    #[snafu(display("cannot plant a breakpoint at {at:#x}: no page is mapped there"))]
    NoPage {
        /// The address.
        at: u64,
    },
    /// The instruction to step could not be decoded.
    #[snafu(display("cannot decode the instruction at {at:#x}"))]
    Decode {
        /// Its address.
        at: u64,
    },
    /// Stepping backwards would step through too many instructions.
    #[snafu(display("more than {steps} instructions between two syscalls: too many to step backwards"))]
    TooLong {
        /// The limit.
        steps: u64,
    },
    /// A replay did not reach the moment it was going to.
    #[snafu(display("the replay did not come back to the moment it was going to ({what})"))]
    Lost {
        /// What it met instead.
        what: String,
    },
}

/// A program the engine can run, stop and restart.
pub trait Tracee {
    /// Starts over: the first life booted, before its first instruction.
    fn reset(&mut self) -> Result<(), DebugError>;
    /// Runs on until a breakpoint is reached, syscall `stop_at` of the current life traps, a
    /// life crashes, or the run ends. A breakpoint at the current instruction is reached at
    /// once.
    fn run(&mut self, stop_at: Option<u64>) -> Result<Event, DebugError>;
    /// Plants a breakpoint; `false` when no code is mapped there.
    fn set_breakpoint(&mut self, at: u64) -> bool;
    /// Takes one out.
    fn clear_breakpoint(&mut self, at: u64);
    /// Whether one is planted at `at`.
    fn is_breakpoint(&self, at: u64) -> bool;
    /// Where the instruction at the current address may go next.
    fn successors(&mut self) -> Result<Vec<u64>, DebugError>;
    /// Whether the instruction at the current address is `syscall`.
    fn is_syscall(&mut self) -> bool;
    /// The current instruction's address.
    fn pc(&self) -> u64;
    /// The running thread.
    fn tid(&self) -> u64;
    /// Reads the program's memory; `false` where nothing is mapped.
    fn read(&self, va: u64, buf: &mut [u8]) -> bool;
    /// The current life.
    fn life(&self) -> usize;
    /// Syscalls the current life has served.
    fn syscalls(&self) -> u64;
}

/// An arrival at a recorded breakpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Hit {
    life: usize,
    syscalls: u64,
    at: u64,
}

/// Where a command left the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// At a breakpoint.
    Breakpoint(u64),
    /// After one instruction, forwards or backwards.
    Step,
    /// At the start of the run: nothing earlier to go back to.
    Begin,
    /// After the instruction that changed a watched location (its address).
    Watch(u64),
    /// The run ended.
    Ended,
}

/// The most instructions a backward step counts from a base.
pub const MAX_STEPS: u64 = 500_000;

/// The debugger's engine: the current point, the user's breakpoints, and the moves.
pub struct Engine<T: Tracee> {
    /// The program.
    pub tracee: T,
    user: Addrs,
    point: Point,
    ended: bool,
    /// While replaying to record: the addresses recorded and the arrivals at them.
    recording: Option<(Addrs, Vec<Hit>)>,
    /// Replays made from the start so far (each backward move makes one or two).
    pub replays: u64,
    /// At a life's first instruction, not yet arrived at: a breakpoint there is still to be
    /// reached.
    fresh: bool,
    /// Watched locations: address and length.
    watches: Vec<(u64, u64)>,
}

impl<T: Tracee> Engine<T> {
    /// The engine over `tracee`, which is at the start of the run.
    pub fn new(tracee: T) -> Engine<T> {
        Engine {
            tracee,
            user: Addrs::new(),
            point: Point::start(),
            ended: false,
            recording: None,
            replays: 0,
            fresh: true,
            watches: Vec::new(),
        }
    }

    /// The current point.
    pub fn point(&self) -> &Point {
        &self.point
    }

    /// Whether the run ended.
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// Adds a breakpoint; `false` when no code is mapped there yet.
    pub fn insert(&mut self, at: u64) -> bool {
        self.user.insert(at);
        self.tracee.set_breakpoint(at)
    }

    /// Removes a breakpoint.
    pub fn remove(&mut self, at: u64) {
        self.user.remove(&at);
        if !self.recorded(at) {
            self.tracee.clear_breakpoint(at);
        }
    }

    fn recorded(&self, at: u64) -> bool {
        self.recording.as_ref().is_some_and(|(r, _)| r.contains(&at))
    }

    /// Plants every breakpoint the engine wants where code is mapped (after a reset or in a new
    /// life, whose VM has none).
    fn plant_all(&mut self) {
        let mut all = self.user.clone();
        if let Some((r, _)) = &self.recording {
            all.extend(r.iter().copied());
        }
        for at in all {
            self.tracee.set_breakpoint(at);
        }
    }

    fn arrive(&mut self, at: u64) {
        let (life, syscalls) = (self.tracee.life(), self.tracee.syscalls());
        if let Some((r, hits)) = &mut self.recording {
            if r.contains(&at) {
                hits.push(Hit { life, syscalls, at });
            }
        }
    }

    /// Executes one instruction of the running thread: [`Event::Breakpoint`] with the address
    /// arrived at, or the trap, crash or end the instruction led to.
    fn step_raw(&mut self, stop_at: Option<u64>, depth: u32) -> Result<Event, DebugError> {
        if std::mem::take(&mut self.fresh) {
            let pc = self.tracee.pc();
            if self.tracee.is_breakpoint(pc) {
                self.arrive(pc);
            }
        }
        let t = &mut self.tracee;
        let (pc, tid) = (t.pc(), t.tid());
        // A jump to itself would trap at once, before executing: it is never stepped onto.
        let succ: Vec<u64> = t.successors()?.into_iter().filter(|&s| s != pc).collect();
        if succ.is_empty() {
            return Err(DebugError::Decode { at: pc });
        }
        let had = t.is_breakpoint(pc);
        if had {
            t.clear_breakpoint(pc);
        }
        let mut temps = Vec::new();
        for &s in &succ {
            if !t.is_breakpoint(s) {
                if !t.set_breakpoint(s) {
                    for &x in &temps {
                        t.clear_breakpoint(x);
                    }
                    if had {
                        t.set_breakpoint(pc);
                    }
                    return Err(DebugError::NoPage { at: s });
                }
                temps.push(s);
            }
        }
        let out = loop {
            match self.tracee.run(stop_at) {
                Ok(Event::Breakpoint(a)) if succ.contains(&a) && self.tracee.tid() == tid => {
                    self.arrive(a);
                    break Ok(Event::Breakpoint(a));
                }
                // Another thread (after a syscall that switched) reached a breakpoint: it goes
                // on past it.
                Ok(Event::Breakpoint(a)) if depth < 8 => {
                    self.arrive(a);
                    match self.step_raw(stop_at, depth + 1) {
                        Ok(Event::Breakpoint(b)) if succ.contains(&b) && self.tracee.tid() == tid => {
                            break Ok(Event::Breakpoint(b))
                        }
                        Ok(Event::Breakpoint(_)) => continue,
                        other => break other,
                    }
                }
                Ok(Event::Breakpoint(a)) => {
                    break Err(DebugError::Lost { what: format!("breakpoints nested at {a:#x}") })
                }
                other => break other,
            }
        };
        let new_life = matches!(out, Ok(Event::NewLife | Event::Ended));
        if !new_life {
            for s in temps {
                if !self.user.contains(&s) && !self.recorded(s) {
                    self.tracee.clear_breakpoint(s);
                }
            }
            if had {
                self.tracee.set_breakpoint(pc);
            }
        } else {
            self.fresh = true;
            self.plant_all();
        }
        out
    }

    /// Runs on until an arrival at `stop`, the trap of `stop_at`, a new life or the end.
    fn resume(&mut self, stop: &Addrs, stop_at: Option<u64>) -> Result<Event, DebugError> {
        loop {
            let pc = self.tracee.pc();
            if self.tracee.is_breakpoint(pc) && !self.fresh {
                match self.step_raw(stop_at, 0)? {
                    Event::Breakpoint(a) if stop.contains(&a) => return Ok(Event::Breakpoint(a)),
                    Event::Breakpoint(_) => continue,
                    other => return Ok(other),
                }
            }
            self.fresh = false;
            match self.tracee.run(stop_at)? {
                Event::Breakpoint(a) => {
                    self.arrive(a);
                    if stop.contains(&a) {
                        return Ok(Event::Breakpoint(a));
                    }
                }
                Event::NewLife => {
                    self.fresh = true;
                    self.plant_all();
                    return Ok(Event::NewLife);
                }
                other => return Ok(other),
            }
        }
    }

    fn exec(&mut self, op: &Op) -> Result<Event, DebugError> {
        match op {
            Op::Step => self.step_raw(None, 0),
            Op::Cont(set) => {
                // The addresses a point names are stopped at even when their breakpoints were
                // taken out since.
                let mut temps = Vec::new();
                for &a in set {
                    if !self.tracee.is_breakpoint(a) && self.tracee.set_breakpoint(a) {
                        temps.push(a);
                    }
                }
                let out = loop {
                    match self.resume(set, None) {
                        Ok(Event::NewLife) => continue,
                        other => break other,
                    }
                };
                for a in temps {
                    if !self.user.contains(&a) && !self.recorded(a) {
                        self.tracee.clear_breakpoint(a);
                    }
                }
                out
            }
        }
    }

    /// Replays the run from the start to `p`.
    fn goto(&mut self, p: &Point) -> Result<(), DebugError> {
        self.replays += 1;
        self.tracee.reset()?;
        self.ended = false;
        self.fresh = true;
        self.plant_all();
        let none = Addrs::new();
        while self.tracee.life() < p.life {
            match self.resume(&none, None)? {
                Event::NewLife => {}
                e => return Err(DebugError::Lost { what: format!("{e:?} before life {}", p.life) }),
            }
        }
        if let Base::At(k) = p.base {
            loop {
                match self.resume(&none, Some(k))? {
                    Event::AtSyscall if self.tracee.syscalls() == k => break,
                    Event::AtSyscall => continue,
                    e => return Err(DebugError::Lost { what: format!("{e:?} before syscall {k} of life {}", p.life) }),
                }
            }
        }
        for op in &p.ops {
            match self.exec(op)? {
                Event::Breakpoint(_) => {}
                e => return Err(DebugError::Lost { what: format!("{e:?} while going to a point") }),
            }
        }
        self.point = p.clone();
        Ok(())
    }

    /// After a move that failed part way: the run back at the current point, so that what the
    /// debugger is shown and where the run is agree again.
    pub fn resync(&mut self) -> Result<(), DebugError> {
        if self.ended {
            return Ok(());
        }
        let here = self.point.clone();
        self.goto(&here)
    }

    /// Runs forwards to the next breakpoint, change of a watched location, or the end.
    pub fn cont(&mut self) -> Result<Stopped, DebugError> {
        if !self.watches.is_empty() {
            return self.cont_watching();
        }
        let set = self.user.clone();
        self.forward(Op::Cont(set))
    }

    /// Executes one instruction forwards.
    pub fn step(&mut self) -> Result<Stopped, DebugError> {
        self.forward(Op::Step)
    }

    fn forward(&mut self, op: Op) -> Result<Stopped, DebugError> {
        if self.ended {
            return Ok(Stopped::Ended);
        }
        let before = (self.tracee.life(), self.tracee.syscalls());
        let stop_set = match &op {
            Op::Cont(set) => set.clone(),
            Op::Step => self.tracee.successors()?.into_iter().collect(),
        };
        let event = self.exec(&op)?;
        let now = (self.tracee.life(), self.tracee.syscalls());
        match event {
            Event::Ended => {
                self.ended = true;
                return Ok(Stopped::Ended);
            }
            Event::NewLife => {
                self.point = Point { life: now.0, base: Base::Start, ops: Vec::new() };
                return Ok(Stopped::Step);
            }
            Event::AtSyscall => return Err(DebugError::Lost { what: "a syscall trap nobody asked for".into() }),
            Event::Breakpoint(_) => {}
        }
        if now == before {
            self.point.ops.push(op.clone());
        } else {
            // The moment is the first arrival at the stop set since the last syscall's trap.
            self.point = Point { life: now.0, base: Point::base_for(now.1), ops: vec![Op::Cont(stop_set)] };
        }
        Ok(match (op, event) {
            (Op::Cont(_), Event::Breakpoint(a)) => Stopped::Breakpoint(a),
            _ => Stopped::Step,
        })
    }

    /// Goes back to the last arrival at a breakpoint, or change of a watched location, before
    /// now (or to the start).
    pub fn reverse_cont(&mut self) -> Result<Stopped, DebugError> {
        if !self.watches.is_empty() {
            return self.reverse_watching();
        }
        self.reverse_breakpoints()
    }

    /// The last arrival at a breakpoint before now: where it is, without going there.
    fn last_arrival(&mut self) -> Result<Option<(Point, u64)>, DebugError> {
        let here = self.point.clone();
        let set = self.user.clone();
        self.recording = Some((set.clone(), Vec::new()));
        let went = self.goto(&here);
        let (_, mut hits) = self.recording.take().unwrap_or_default();
        went?;
        let now = Hit { life: self.tracee.life(), syscalls: self.tracee.syscalls(), at: self.tracee.pc() };
        if set.contains(&now.at) && hits.last() == Some(&now) {
            hits.pop();
        }
        let Some(&last) = hits.last() else { return Ok(None) };
        let j = hits.iter().rev().take_while(|h| h.life == last.life && h.syscalls == last.syscalls).count();
        let target = Point { life: last.life, base: Point::base_for(last.syscalls), ops: vec![Op::Cont(set); j] };
        Ok(Some((target, last.at)))
    }

    fn reverse_breakpoints(&mut self) -> Result<Stopped, DebugError> {
        let Some((target, at)) = self.last_arrival()? else {
            self.goto(&Point::start())?;
            return Ok(Stopped::Begin);
        };
        self.goto(&target)?;
        if self.tracee.pc() != at {
            return Err(DebugError::Lost { what: format!("{:#x} instead of {at:#x}", self.tracee.pc()) });
        }
        Ok(Stopped::Breakpoint(at))
    }

    /// Goes back one instruction.
    pub fn reverse_step(&mut self) -> Result<Stopped, DebugError> {
        let here = self.point.clone();
        let n = self.count_steps(&here)?;
        let target = if n >= 1 {
            Point { ops: vec![Op::Step; n as usize - 1], ..here.clone() }
        } else {
            let (base, k) = match here.base {
                Base::Start => {
                    self.goto(&here)?;
                    return Ok(Stopped::Begin);
                }
                Base::At(0) => (Base::Start, 0),
                Base::At(k) => (Base::At(k - 1), k),
            };
            let m = self.steps_to_syscall(here.life, base.clone(), k)?;
            if m == 0 {
                self.goto(&here)?;
                return Ok(Stopped::Begin);
            }
            Point { life: here.life, base, ops: vec![Op::Step; m as usize - 1] }
        };
        self.goto(&target)?;
        Ok(Stopped::Step)
    }

    /// Executes one instruction of a count `n` kept by the caller (one of at most [`MAX_STEPS`]);
    /// anything but an arrival is a replay gone astray while doing `what`.
    fn step_counted(&mut self, n: &mut u64, what: &str) -> Result<(), DebugError> {
        match self.step_raw(None, 0)? {
            Event::Breakpoint(_) => {}
            e => return Err(DebugError::Lost { what: format!("{e:?} while {what}") }),
        }
        *n += 1;
        if *n > MAX_STEPS {
            return Err(DebugError::TooLong { steps: MAX_STEPS });
        }
        Ok(())
    }

    /// How many instructions lead from `p`'s base to `p`, stepped one by one.
    fn count_steps(&mut self, p: &Point) -> Result<u64, DebugError> {
        self.goto(&Point { ops: Vec::new(), ..p.clone() })?;
        let mut n = 0u64;
        for op in &p.ops {
            loop {
                self.step_counted(&mut n, "counting instructions")?;
                match op {
                    Op::Step => break,
                    Op::Cont(set) if set.contains(&self.tracee.pc()) => break,
                    Op::Cont(_) => {}
                }
            }
        }
        Ok(n)
    }

    /// How many instructions lead from `base` to the trap of syscall `k` (the `syscall`
    /// instruction reached with `k` served).
    fn steps_to_syscall(&mut self, life: usize, base: Base, k: u64) -> Result<u64, DebugError> {
        self.goto(&Point { life, base, ops: Vec::new() })?;
        let mut m = 0u64;
        while !(self.tracee.syscalls() == k && self.tracee.is_syscall()) {
            self.step_counted(&mut m, "counting instructions")?;
        }
        Ok(m)
    }

    /// Goes to the trap of syscall `k` of `life` (`monitor goto`).
    pub fn goto_syscall(&mut self, life: usize, k: u64) -> Result<(), DebugError> {
        self.goto(&Point { life, base: Base::At(k), ops: Vec::new() })
    }
}

mod watch;

#[cfg(test)]
mod tests;
