//! Watchpoints without debug registers: a watched location is compared at every syscall trap
//! (and at breakpoints), and the interval in which it changed is stepped one instruction at a
//! time to the instruction that changed it. The kernel's own writes (a `read` into a buffer)
//! show as the change made by the `syscall` instruction. Like gdb's watchpoints, a write of the
//! same value is no change.
//!
//! Backwards, the values at every trap from the start to now say which interval held the last
//! change; stepping that interval finds its last changing instruction, and the run stops before
//! it (as a reversed run meets it: gdb then sees the value go back from the later one to the
//! earlier, and shows the statement that wrote it).

use super::*;

/// The watched values at a moment: each location's bytes, `None` where nothing is mapped.
type Values = Vec<Option<Vec<u8>>>;

/// Where an interval's stepping ends.
enum End {
    /// At the trap of this syscall.
    Syscall(u64),
    /// After this many instructions.
    Steps(u64),
}

impl<T: Tracee> Engine<T> {
    /// Watches `len` bytes at `addr` for writes.
    pub fn watch(&mut self, addr: u64, len: u64) {
        if !self.watches.contains(&(addr, len)) {
            self.watches.push((addr, len));
        }
    }

    /// Stops watching them.
    pub fn unwatch(&mut self, addr: u64, len: u64) {
        self.watches.retain(|w| *w != (addr, len));
    }

    fn values(&self) -> Values {
        self.watches
            .iter()
            .map(|&(addr, len)| {
                let mut buf = vec![0u8; len.min(4096) as usize];
                self.tracee.read(addr, &mut buf).then_some(buf)
            })
            .collect()
    }

    /// The first watched location whose value differs between `a` and `b`.
    fn changed(&self, a: &Values, b: &Values) -> u64 {
        let i = a.iter().zip(b).position(|(x, y)| x != y).unwrap_or(0);
        self.watches.get(i).map_or(0, |w| w.0)
    }

    /// The trap to stop at next: this syscall's, or the next one's when the current
    /// instruction is the `syscall` of this one.
    fn next_trap(&mut self) -> u64 {
        let k = self.tracee.syscalls();
        match self.tracee.is_syscall() {
            true => k + 1,
            false => k,
        }
    }

    pub(super) fn cont_watching(&mut self) -> Result<Stopped, DebugError> {
        if self.ended {
            return Ok(Stopped::Ended);
        }
        let set = self.user.clone();
        let mut check = self.point.clone();
        let mut old = self.values();
        loop {
            let stop = self.next_trap();
            let event = self.resume(&set, Some(stop))?;
            let now = self.values();
            match event {
                Event::AtSyscall | Event::Breakpoint(_) if now != old => return self.first_change(&check, &old),
                Event::AtSyscall => {
                    check = Point { life: self.tracee.life(), base: Base::At(self.tracee.syscalls()), ops: Vec::new() }
                }
                Event::Breakpoint(at) => {
                    let mut p = check;
                    p.ops.push(Op::Cont(set));
                    self.point = p;
                    return Ok(Stopped::Breakpoint(at));
                }
                Event::NewLife => {
                    check = Point { life: self.tracee.life(), base: Base::Start, ops: Vec::new() };
                    old = now;
                }
                Event::Ended => {
                    self.ended = true;
                    return Ok(Stopped::Ended);
                }
            }
        }
    }

    /// From `check`, one instruction at a time to the first that changes a watched value.
    fn first_change(&mut self, check: &Point, old: &Values) -> Result<Stopped, DebugError> {
        self.goto(check)?;
        for _ in 0..MAX_STEPS {
            if self.forward(Op::Step)? == Stopped::Ended {
                return Ok(Stopped::Ended);
            }
            let now = self.values();
            if now != *old {
                return Ok(Stopped::Watch(self.changed(old, &now)));
            }
        }
        Err(DebugError::TooLong { steps: MAX_STEPS })
    }

    pub(super) fn reverse_watching(&mut self) -> Result<Stopped, DebugError> {
        let here = self.point.clone();
        // The arrival first: it starts from the current point, which the search for the change
        // moves.
        let arrival = match self.user.is_empty() {
            true => None,
            false => self.last_arrival()?,
        };
        let change = self.last_change(&here)?;
        // The later of the two: by the interval, then by the instructions into it.
        let key = |p: &Point| {
            (
                p.life,
                match p.base {
                    Base::Start => 0,
                    Base::At(k) => k + 1,
                },
            )
        };
        let take_arrival = match (&change, &arrival) {
            (None, None) => {
                self.goto(&Point::start())?;
                return Ok(Stopped::Begin);
            }
            (None, Some(_)) => true,
            (Some(_), None) => false,
            (Some((c, _)), Some((a, _))) if key(a) != key(c) => key(a) > key(c),
            (Some((c, _)), Some((a, _))) => self.count_steps(a)? > c.ops.len() as u64,
        };
        match (change, arrival) {
            (_, Some((a, at))) if take_arrival => {
                self.goto(&a)?;
                Ok(Stopped::Breakpoint(at))
            }
            (Some((c, addr)), _) => {
                self.goto(&c)?;
                Ok(Stopped::Watch(addr))
            }
            _ => Err(DebugError::Lost { what: "no moment to go back to".into() }),
        }
    }

    /// The last change of a watched value before `here`: the moment before the instruction that
    /// made it (as the base of its interval and the instructions from there), and where.
    fn last_change(&mut self, here: &Point) -> Result<Option<(Point, u64)>, DebugError> {
        self.replays += 1;
        self.tracee.reset()?;
        self.ended = false;
        self.fresh = true;
        self.plant_all();
        let none = Addrs::new();
        let mut checks: Vec<(Point, Values)> = vec![(Point::start(), self.values())];
        loop {
            let (life, k) = (self.tracee.life(), self.tracee.syscalls());
            let reached = life == here.life
                && match here.base {
                    Base::Start => checks.last().is_some_and(|(p, _)| p.life == life && p.base == Base::Start),
                    Base::At(b) => k == b && self.tracee.is_syscall(),
                };
            if reached {
                break;
            }
            let stop = self.next_trap();
            match self.resume(&none, Some(stop))? {
                Event::AtSyscall => {
                    let p = Point { life, base: Base::At(self.tracee.syscalls()), ops: Vec::new() };
                    checks.push((p, self.values()));
                }
                Event::NewLife => {
                    let p = Point { life: self.tracee.life(), base: Base::Start, ops: Vec::new() };
                    checks.push((p, self.values()));
                }
                e => return Err(DebugError::Lost { what: format!("{e:?} before the moment") }),
            }
        }
        for op in &here.ops {
            self.exec(op)?;
        }
        let now = self.values();
        let base = Point { ops: Vec::new(), ..here.clone() };
        let last = checks.last().map(|(_, v)| v.clone()).unwrap_or_default();
        // The interval holding the last change: from the moment's base to it, or between two
        // traps of one life.
        if last != now {
            let n = self.count_steps(here)?;
            if let Some(found) = self.change_in(&base, End::Steps(n))? {
                return Ok(Some(found));
            }
        }
        let pair = checks.windows(2).rev().find(|w| w[0].0.life == w[1].0.life && w[0].1 != w[1].1);
        match pair.map(|w| (w[0].0.clone(), w[1].0.base.clone())) {
            Some((from, Base::At(k))) => self.change_in(&from, End::Syscall(k)),
            _ => Ok(None),
        }
    }

    /// The last change of a watched value in the interval from `from` to `end`, stepped one
    /// instruction at a time: the moment before the instruction that made it.
    fn change_in(&mut self, from: &Point, end: End) -> Result<Option<(Point, u64)>, DebugError> {
        self.goto(from)?;
        let mut prev = self.values();
        let mut found: Option<(u64, u64)> = None;
        let mut m = 0u64;
        loop {
            let done = match end {
                End::Syscall(k) => self.tracee.syscalls() == k && self.tracee.is_syscall(),
                End::Steps(n) => m == n,
            };
            if done {
                break;
            }
            self.step_counted(&mut m, "looking for a change")?;
            let v = self.values();
            if v != prev {
                found = Some((m, self.changed(&prev, &v)));
            }
            prev = v;
        }
        // Backwards, a change is met before the instruction that made it: gdb sees the value
        // go from the later one back to the earlier.
        Ok(found.map(|(m, addr)| (Point { ops: vec![Op::Step; m as usize - 1], ..from.clone() }, addr)))
    }
}
