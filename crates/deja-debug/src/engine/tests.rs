//! The engine over a fake program: a fixed course of instructions (the run is deterministic),
//! some of them syscalls, one a crash that starts the next life. The position in the course is
//! the truth every move is checked against.

use super::*;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Plain,
    Syscall,
    /// A syscall during which the life crashes.
    Crash,
    /// A store of this byte at this address.
    Store(u64, u8),
}

struct Fake {
    course: Vec<(u64, Kind)>,
    i: usize,
    life: usize,
    syscalls: u64,
    bps: Addrs,
    resets: u64,
    mem: std::collections::BTreeMap<u64, u8>,
}

impl Fake {
    /// Life 0: a loop over 0x10..0x14 three times with a syscall at 0x14 each time, then a
    /// crash at 0x20. Life 1: 0x100, the loop once more, a syscall, the end.
    fn new() -> Fake {
        use Kind::*;
        let mut course = vec![(0x1, Plain), (0x2, Syscall)];
        for _ in 0..3 {
            course.extend([(0x10, Plain), (0x11, Plain), (0x12, Plain), (0x14, Syscall)]);
        }
        course.extend([(0x18, Plain), (0x20, Crash)]);
        course.extend([(0x100, Plain), (0x10, Plain), (0x11, Plain), (0x12, Plain), (0x14, Syscall), (0x30, Plain)]);
        Fake { course, i: 0, life: 0, syscalls: 0, bps: Addrs::new(), resets: 0, mem: Default::default() }
    }
}

impl Tracee for Fake {
    fn reset(&mut self) -> Result<(), DebugError> {
        (self.i, self.life, self.syscalls) = (0, 0, 0);
        self.bps.clear();
        self.mem.clear();
        self.resets += 1;
        Ok(())
    }

    fn run(&mut self, stop_at: Option<u64>) -> Result<Event, DebugError> {
        loop {
            let Some(&(pc, kind)) = self.course.get(self.i) else { return Ok(Event::Ended) };
            if self.bps.contains(&pc) {
                return Ok(Event::Breakpoint(pc));
            }
            match kind {
                Kind::Plain => self.i += 1,
                Kind::Store(a, v) => {
                    self.mem.insert(a, v);
                    self.i += 1;
                }
                Kind::Syscall | Kind::Crash if stop_at == Some(self.syscalls) => return Ok(Event::AtSyscall),
                Kind::Syscall => {
                    self.syscalls += 1;
                    self.i += 1;
                }
                Kind::Crash => {
                    (self.life, self.syscalls) = (self.life + 1, 0);
                    self.bps.clear();
                    self.i += 1;
                    return Ok(Event::NewLife);
                }
            }
        }
    }

    fn set_breakpoint(&mut self, at: u64) -> bool {
        self.bps.insert(at);
        true
    }

    fn clear_breakpoint(&mut self, at: u64) {
        self.bps.remove(&at);
    }

    fn is_breakpoint(&self, at: u64) -> bool {
        self.bps.contains(&at)
    }

    fn successors(&mut self) -> Result<Vec<u64>, DebugError> {
        // What a decoder would say: the next address of the course, and for the loop's end a
        // branch target it does not take the last time.
        let next = self.course.get(self.i + 1).map(|c| c.0);
        Ok(next.into_iter().chain([0x10]).collect())
    }

    fn is_syscall(&mut self) -> bool {
        matches!(self.course.get(self.i), Some((_, Kind::Syscall | Kind::Crash)))
    }

    fn pc(&self) -> u64 {
        self.course.get(self.i).map_or(0, |c| c.0)
    }

    fn tid(&self) -> u64 {
        1
    }

    fn read(&self, va: u64, buf: &mut [u8]) -> bool {
        for (i, b) in buf.iter_mut().enumerate() {
            *b = self.mem.get(&(va + i as u64)).copied().unwrap_or(0);
        }
        true
    }

    fn life(&self) -> usize {
        self.life
    }

    fn syscalls(&self) -> u64 {
        self.syscalls
    }
}

fn at(e: &Engine<Fake>) -> usize {
    e.tracee.i
}

#[test]
fn reverse_continue_returns_to_each_earlier_arrival_and_then_to_the_start() {
    let mut e = Engine::new(Fake::new());
    e.tracee.reset().unwrap();
    e.insert(0x11);
    e.insert(0x30);
    let mut forward = Vec::new();
    loop {
        match e.cont().unwrap() {
            Stopped::Breakpoint(_) => forward.push(at(&e)),
            Stopped::Ended => break,
            s => panic!("{s:?}"),
        }
    }
    // Three arrivals in life 0, one in life 1, then 0x30.
    assert_eq!(forward, [3, 7, 11, 18, 21]);
    // The run ended: go back to the last breakpoint by replaying to its moment.
    e.goto(&Point { life: 1, base: Base::At(0), ops: vec![Op::Cont([0x30].into())] }).unwrap();
    assert_eq!(at(&e), 21);
    let mut back = Vec::new();
    loop {
        match e.reverse_cont().unwrap() {
            Stopped::Breakpoint(0x11) => back.push(at(&e)),
            Stopped::Begin => break,
            s => panic!("{s:?} at {}", at(&e)),
        }
    }
    assert_eq!(back, [18, 11, 7, 3], "every earlier arrival, across the crash, newest first");
    assert_eq!(at(&e), 0);
    // And forwards again from the start: the same arrivals.
    assert_eq!(e.cont().unwrap(), Stopped::Breakpoint(0x11));
    assert_eq!(at(&e), 3);
}

#[test]
fn reverse_step_goes_back_one_instruction_at_a_time_across_syscalls() {
    let mut e = Engine::new(Fake::new());
    e.tracee.reset().unwrap();
    e.insert(0x12);
    for _ in 0..3 {
        e.cont().unwrap();
    }
    assert_eq!(at(&e), 12, "the third arrival at 0x12");
    // Forwards two instructions (across the syscall at 0x14), then back three.
    e.step().unwrap();
    e.step().unwrap();
    assert_eq!(at(&e), 14);
    for want in [13, 12, 11, 10, 9, 8, 7] {
        assert_eq!(e.reverse_step().unwrap(), Stopped::Step);
        assert_eq!(at(&e), want);
    }
    // Back to the very first instruction, and no further.
    while at(&e) > 0 {
        e.reverse_step().unwrap();
    }
    assert_eq!(e.reverse_step().unwrap(), Stopped::Begin);
    assert_eq!(at(&e), 0);
}

#[test]
fn a_point_reached_by_reverse_moves_goes_on_forwards_as_the_original_run() {
    let mut e = Engine::new(Fake::new());
    e.tracee.reset().unwrap();
    e.insert(0x10);
    e.cont().unwrap();
    e.cont().unwrap();
    assert_eq!(at(&e), 6);
    e.reverse_step().unwrap();
    assert_eq!(at(&e), 5, "the syscall at 0x14 before the second pass");
    e.step().unwrap();
    assert_eq!(at(&e), 6);
    e.remove(0x10);
    e.insert(0x100);
    assert_eq!(e.cont().unwrap(), Stopped::Breakpoint(0x100));
    assert_eq!((at(&e), e.tracee.life), (16, 1));
    let replays = e.replays;
    assert_eq!(e.reverse_cont().unwrap(), Stopped::Begin, "no earlier arrival at 0x100");
    assert_eq!(e.replays, replays + 2, "one replay to record, one to go to the start");
}

/// A course that stores to 0x900: twice in the first interval, once after a syscall, and once
/// with the value it already holds.
fn storing() -> Fake {
    use Kind::*;
    let course = vec![
        (0x1, Plain),
        (0x2, Store(0x900, 1)),
        (0x3, Store(0x900, 2)),
        (0x4, Syscall),
        (0x5, Plain),
        (0x6, Store(0x900, 3)),
        (0x7, Syscall),
        (0x8, Store(0x900, 3)),
        (0x9, Plain),
        (0xa, Syscall),
        (0xb, Plain),
    ];
    Fake { course, ..Fake::new() }
}

#[test]
fn a_watched_byte_stops_the_run_after_each_change_forwards_and_backwards() {
    let mut e = Engine::new(storing());
    e.tracee.reset().unwrap();
    e.watch(0x900, 1);
    let mut forward = Vec::new();
    loop {
        match e.cont().unwrap() {
            Stopped::Watch(0x900) => forward.push(at(&e)),
            Stopped::Ended => break,
            s => panic!("{s:?}"),
        }
    }
    assert_eq!(forward, [2, 3, 6], "after each store that changed the byte; not the one that kept it");
    e.goto(&Point { life: 0, base: Base::At(2), ops: vec![Op::Step] }).unwrap();
    assert_eq!(at(&e), 10);
    let mut back = Vec::new();
    loop {
        match e.reverse_cont().unwrap() {
            Stopped::Watch(0x900) => back.push(at(&e)),
            Stopped::Begin => break,
            s => panic!("{s:?}"),
        }
    }
    assert_eq!(back, [5, 2, 1], "backwards: before each store that changed it, newest first");
    // A breakpoint later than the last change wins going backwards; an earlier one does not.
    e.goto(&Point { life: 0, base: Base::At(2), ops: vec![Op::Step] }).unwrap();
    e.insert(0x9);
    assert_eq!(e.reverse_cont().unwrap(), Stopped::Breakpoint(0x9));
    assert_eq!(at(&e), 8);
    e.remove(0x9);
    e.insert(0x1);
    assert_eq!(e.reverse_cont().unwrap(), Stopped::Watch(0x900));
    assert_eq!(at(&e), 5);
    // Forwards from there, the breakpoint that is now behind is not met again.
    e.unwatch(0x900, 1);
    assert_eq!(e.cont().unwrap(), Stopped::Ended);
}
