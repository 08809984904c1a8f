//! The fault model's moves on a running cluster: partitions and heals, kills and restarts,
//! pauses and resumes, clock faults, scripted faults and the random faults' ticks, each noted
//! in the ledger (see the module above for the model itself).

use super::*;

impl Sim {
    pub(super) fn note(&mut self, kind: &str, detail: String) {
        self.ledger.push(FaultEvent::new(self.now, kind, detail));
    }

    /// Records a fault that a schedule can state: `action` on `node`, or with `groups`, or
    /// `from`/`to`, or by `ms`.
    pub(super) fn note_scripted(&mut self, kind: &str, detail: String, f: ScheduledFault) {
        let mut e = FaultEvent::new(self.now, kind, detail);
        e.scripted = Some(ScheduledFault { at_ms: self.now / 1_000_000, ..f });
        self.ledger.push(e);
    }

    pub(super) fn scripted_fault(&self, action: Action) -> ScheduledFault {
        ScheduledFault { at_ms: 0, action, groups: Vec::new(), from: Vec::new(), to: Vec::new(), node: None, ms: 0 }
    }

    pub(super) fn name_list(&self, idx: &[usize]) -> Vec<String> {
        idx.iter().map(|&i| self.nodes[i].cfg.name.clone()).collect()
    }

    pub(super) fn names(&self, idx: &[usize]) -> String {
        let v: Vec<&str> = idx.iter().map(|&i| self.nodes[i].cfg.name.as_str()).collect();
        v.join(",")
    }

    pub(super) fn partition(&mut self, groups: Vec<Vec<usize>>) {
        let mut groups = groups;
        let named: Vec<usize> = groups.iter().flatten().copied().collect();
        let rest: Vec<usize> = (0..self.nodes.len()).filter(|i| !named.contains(i)).collect();
        if !rest.is_empty() {
            groups.push(rest);
        }
        let desc: Vec<String> = groups.iter().map(|g| format!("[{}]", self.names(g))).collect();
        let f = ScheduledFault {
            groups: groups.iter().map(|g| self.name_list(g)).collect(),
            ..self.scripted_fault(Action::Partition)
        };
        self.note_scripted("partition", desc.join(" | "), f);
        self.net.partition(&groups);
        let t = self.now + self.net.tcp_timeout_ns();
        self.push(t, Event::TcpTimeout { epoch: self.net.epoch });
    }

    pub(super) fn one_way(&mut self, from: Vec<usize>, to: Vec<usize>) {
        let f = ScheduledFault {
            from: self.name_list(&from),
            to: self.name_list(&to),
            ..self.scripted_fault(Action::PartitionOneWay)
        };
        self.note_scripted("partition-one-way", format!("[{}] -> [{}] cut", self.names(&from), self.names(&to)), f);
        self.net.cut_one_way(&from, &to);
        let t = self.now + self.net.tcp_timeout_ns();
        self.push(t, Event::TcpTimeout { epoch: self.net.epoch });
    }

    pub(super) fn heal(&mut self) {
        if !self.net.partitioned() {
            return;
        }
        self.note_scripted("heal", String::new(), self.scripted_fault(Action::Heal));
        for d in self.net.heal(&mut self.log, &mut self.ledger, self.now) {
            self.push(d.at, Event::Deliver(Box::new(d)));
        }
    }

    /// The partition outlasted the TCP timeout: reset every connection it cuts.
    pub(super) fn partition_resets(&mut self) -> Result<(), ClusterError> {
        let cuts = self.net.cuts();
        let mut resets = Vec::new();
        for (a, b) in &cuts {
            self.net.drop_held(*a, *b);
            for (x, y) in [(*a, *b), (*b, *a)] {
                if let Some(live) = self.nodes[x].live.as_ref() {
                    for (local, remote) in live.kernel.connections() {
                        if self.net.node_of(remote) == Some(y) {
                            resets.push((x, Packet { src: remote, dst: local, payload: Payload::Rst }));
                        }
                    }
                }
            }
        }
        resets.sort_by_key(|(x, p)| (*x, p.src, p.dst));
        resets.dedup();
        if !resets.is_empty() {
            self.note(
                "tcp-reset",
                format!("{} connection ends reset by a partition longer than the TCP timeout", resets.len()),
            );
        }
        for (x, p) in resets {
            self.deliver(Delivery { at: self.now, node: x, packet: p })?;
        }
        Ok(())
    }

    pub(super) fn kill(&mut self, i: usize) {
        let n = &mut self.nodes[i];
        let Some(mut live) = n.live.take() else { return };
        if n.state == State::Exited {
            n.live = Some(live);
            return;
        }
        n.disk = Some(live.kernel.crash_image());
        let conns = live.kernel.connections();
        let status = sigkill("node killed by deja (fault injection)");
        let report = live.kernel.finish(&live.vm.space, status);
        let errors = injected_errors(&report);
        n.lives.push(report);
        n.state = State::Down;
        n.paused = false;
        let name = n.cfg.name.clone();
        self.retire(i, live);
        for (kind, point) in errors {
            self.note(&kind, format!("{name} {point}"));
        }
        let f = ScheduledFault { node: Some(name.clone()), ..self.scripted_fault(Action::Kill) };
        self.note_scripted("kill", name, f);
        self.reset_peers(i, conns);
    }

    pub(super) fn restart(&mut self, i: usize) -> Result<(), ClusterError> {
        if self.nodes[i].state != State::Down {
            return Ok(());
        }
        let name = self.nodes[i].cfg.name.clone();
        let f = ScheduledFault { node: Some(name.clone()), ..self.scripted_fault(Action::Restart) };
        self.note_scripted("restart", name, f);
        self.boot_node(i)
    }

    pub(super) fn pause(&mut self, i: usize) {
        let n = &mut self.nodes[i];
        if n.live.is_some() && !n.paused {
            n.paused = true;
            let name = n.cfg.name.clone();
            let f = ScheduledFault { node: Some(name.clone()), ..self.scripted_fault(Action::Pause) };
            self.note_scripted("pause", name, f);
        }
    }

    pub(super) fn resume(&mut self, i: usize) -> Result<(), ClusterError> {
        let now = self.now;
        let n = &mut self.nodes[i];
        if !n.paused {
            return Ok(());
        }
        n.paused = false;
        if let Some(live) = n.live.as_mut() {
            let runnable = live.kernel.resume(&mut live.vm.space, now, Vec::new());
            if n.state == State::Idle && runnable {
                n.state = State::Running;
            }
        }
        let name = n.cfg.name.clone();
        let f = ScheduledFault { node: Some(name.clone()), ..self.scripted_fault(Action::Resume) };
        self.note_scripted("resume", name, f);
        Ok(())
    }

    pub(super) fn clock_jump(&mut self, i: usize, ns: u64) {
        if let Some(live) = self.nodes[i].live.as_mut() {
            live.kernel.jump_clock(ns);
        }
        let name = self.nodes[i].cfg.name.clone();
        let f = ScheduledFault {
            node: Some(name.clone()),
            ms: (ns / 1_000_000) as i64,
            ..self.scripted_fault(Action::ClockJump)
        };
        self.note_scripted("clock-jump", format!("{name} +{} ms", ns / 1_000_000), f);
    }

    /// Why scripted fault `f` cannot be applied now, if it cannot: a kill of a node that is
    /// down or exited, a restart of one that is not down, a pause of one that is not up or
    /// already paused, a resume of one that is not paused.
    fn not_applicable(&self, f: &ScheduledFault, i: usize) -> Option<&'static str> {
        let n = &self.nodes[i];
        match f.action {
            Action::Kill => match n.state {
                State::Down => Some("the node is down"),
                State::Exited => Some("the node has exited"),
                _ => None,
            },
            Action::Restart => match n.state {
                State::Down => None,
                State::Exited => Some("the node has exited"),
                _ => Some("the node is running"),
            },
            Action::Pause if n.live.is_none() => Some("the node is not running"),
            Action::Pause if n.paused => Some("the node is paused already"),
            Action::Resume if !n.paused => Some("the node is not paused"),
            _ => None,
        }
    }

    pub(super) fn scripted(&mut self, f: &ScheduledFault) -> Result<(), ClusterError> {
        let idx = |s: &Vec<String>, sim: &Self| -> Vec<usize> { s.iter().map(|n| sim.index_of(n)).collect() };
        let node = f.node.as_deref().map(|n| self.index_of(n));
        if let Some(why) = node.and_then(|i| self.not_applicable(f, i)) {
            let name = f.node.clone().unwrap_or_default();
            self.note("not-applied", format!("{} {name} at {} ms: {why}", f.action.name(), f.at_ms));
            return Ok(());
        }
        match f.action {
            Action::Partition => {
                let groups = f.groups.iter().map(|g| idx(g, self)).collect();
                self.partition(groups);
            }
            Action::PartitionOneWay => {
                let (from, to) = (idx(&f.from, self), idx(&f.to, self));
                self.one_way(from, to);
            }
            Action::Heal => self.heal(),
            Action::Kill => self.kill(node.unwrap_or(0)),
            Action::Restart => self.restart(node.unwrap_or(0))?,
            Action::Pause => self.pause(node.unwrap_or(0)),
            Action::Resume => self.resume(node.unwrap_or(0))?,
            Action::ClockJump => self.clock_jump(node.unwrap_or(0), f.ms.max(0) as u64 * 1_000_000),
            Action::ClockSkew => {
                let i = node.unwrap_or(0);
                if let Some(live) = self.nodes[i].live.as_mut() {
                    live.kernel.skew_clock(f.ms.saturating_mul(1_000_000));
                }
                let name = self.nodes[i].cfg.name.clone();
                let sf =
                    ScheduledFault { node: Some(name.clone()), ms: f.ms, ..self.scripted_fault(Action::ClockSkew) };
                self.note_scripted("clock-skew", format!("{name} {} ms", f.ms), sf);
            }
        }
        Ok(())
    }

    /// A node random faults may hit, chosen by the decision `point`.
    pub(super) fn random_target(&mut self, r: &RandomFaults, point: DecisionPoint) -> usize {
        let t: Vec<usize> = if r.targets.is_empty() {
            (0..self.nodes.len()).collect()
        } else {
            r.targets.iter().map(|n| self.index_of(n)).collect()
        };
        t[self.log.decide(point, t.len() as u64) as usize]
    }

    pub(super) fn random_tick(&mut self, kind: RandomFault) -> Result<(), ClusterError> {
        let Some(r) = self.cfg.random_faults.clone() else { return Ok(()) };
        if r.until_ms.is_some_and(|u| self.now > u.saturating_mul(1_000_000)) {
            return Ok(());
        }
        let (every, _) = match kind {
            RandomFault::Partition => (r.partition_every_ms, r.partition_for_ms),
            RandomFault::Kill => (r.kill_every_ms, r.down_for_ms),
            RandomFault::Pause => (r.pause_every_ms, r.pause_for_ms),
            RandomFault::Clock => (r.clock_every_ms, r.clock_jump_ms),
        };
        let n = self.nodes.len();
        match kind {
            RandomFault::Partition if !self.random_partition_active && n > 1 => {
                // A random split into two non-empty sides (bit i of the mask: node i's side).
                let n = n.min(20);
                let mask = self.log.decide(DecisionPoint::PartitionSides, (1u64 << n) - 2) + 1;
                let (a, b): (Vec<usize>, Vec<usize>) = (0..n).partition(|&i| mask >> i & 1 == 1);
                if Network::strike(&mut self.log, r.one_way, DecisionPoint::PartitionOneWay) {
                    self.one_way(a, b);
                } else {
                    self.partition(vec![a, b]);
                }
                self.random_partition_active = true;
                let len = self.draw_ms(DecisionPoint::PartitionLength, r.partition_for_ms);
                let epoch = self.net.epoch;
                self.push(self.now + len, Event::Heal { epoch });
            }
            RandomFault::Kill => {
                let i = self.random_target(&r, DecisionPoint::Target(RandomFault::Kill));
                if self.nodes[i].state != State::Down && self.nodes[i].state != State::Exited {
                    self.kill(i);
                    let len = self.draw_ms(DecisionPoint::DownLength, r.down_for_ms);
                    self.push(self.now + len, Event::Restart(i));
                }
            }
            RandomFault::Pause => {
                let i = self.random_target(&r, DecisionPoint::Target(RandomFault::Pause));
                if !self.nodes[i].paused && self.nodes[i].live.is_some() {
                    self.pause(i);
                    let len = self.draw_ms(DecisionPoint::PauseLength, r.pause_for_ms);
                    self.push(self.now + len, Event::Resume(i));
                }
            }
            RandomFault::Clock => {
                let i = self.random_target(&r, DecisionPoint::Target(RandomFault::Clock));
                let jump = self.draw_ms(DecisionPoint::ClockJump, r.clock_jump_ms);
                self.clock_jump(i, jump);
            }
            RandomFault::Partition => {}
        }
        if let Some(range) = every {
            let gap = self.draw_ms(DecisionPoint::Gap(kind), range);
            self.push(self.now + gap, Event::RandomTick(kind));
        }
        Ok(())
    }
}
