//! The fault model's moves on a running cluster: partitions and heals, kills and restarts,
//! pauses and resumes, clock faults, scripted faults and the random faults' ticks, each noted
//! in the ledger (see the module above for the model itself).

use super::*;

impl<M: Machine> Sim<M> {
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
        ScheduledFault::new(0, action, None)
    }

    pub(super) fn name_list(&self, idx: &[usize]) -> Vec<String> {
        idx.iter().map(|&i| self.nodes[i].cfg.name.clone()).collect()
    }

    pub(super) fn names(&self, idx: &[usize]) -> String {
        let v: Vec<&str> = idx.iter().map(|&i| self.nodes[i].cfg.name.as_str()).collect();
        v.join(",")
    }

    /// Cuts both directions between every two of `groups`. Nodes no group names are on both
    /// sides of the cut: they keep reaching, and being reached by, every node (the ledger says
    /// so: `partition [e3] | [e1,e2] (client reaches all)`).
    pub(super) fn partition(&mut self, groups: Vec<Vec<usize>>) {
        let named: Vec<usize> = groups.iter().flatten().copied().collect();
        let free: Vec<usize> = (0..self.nodes.len()).filter(|i| !named.contains(i)).collect();
        let sides: Vec<String> = groups.iter().map(|g| self.names(g)).collect();
        let f = ScheduledFault {
            groups: groups.iter().map(|g| self.name_list(g)).collect(),
            ..self.scripted_fault(Action::Partition)
        };
        self.note_scripted("partition", partition_words(&sides, &self.name_list(&free)), f);
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
        let report = live.kernel.finish(live.vm.memory(), status);
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
            let runnable = live.kernel.resume(live.vm.memory(), now, Vec::new());
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
        if self.quiet {
            if matches!(f.action, Action::Heal | Action::Resume | Action::Restart) {
                // The quiet period undid what this fault undoes: it applies as the no-op it is.
                self.note_scripted(f.action.name(), f.node.clone().unwrap_or_default(), f.clone());
                return Ok(());
            }
            let what = match &f.node {
                Some(n) => format!("{} {n}", f.action.name()),
                None => f.action.name().to_string(),
            };
            self.note("not-applied", format!("{what} at {} ms: the quiet period", f.at_ms));
            return Ok(());
        }
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
            // Every node but the one that runs the test template (it holds the run's commands).
            (0..self.nodes.len()).filter(|&i| self.template.as_ref().is_none_or(|t| t.node != i)).collect()
        } else {
            r.targets.iter().map(|n| self.index_of(n)).collect()
        };
        t[self.log.decide(point, t.len() as u64) as usize]
    }

    pub(super) fn random_tick(&mut self, kind: RandomFault) -> Result<(), ClusterError> {
        let Some(r) = self.cfg.random_faults.clone() else { return Ok(()) };
        if self.quiet {
            return Ok(());
        }
        if r.until_ms.is_some_and(|u| self.now > u.saturating_mul(1_000_000)) {
            return Ok(());
        }
        let (every, _) = match kind {
            RandomFault::Partition => (r.partition_every_ms, r.partition_for_ms),
            RandomFault::Kill => (r.kill_every_ms, r.down_for_ms),
            RandomFault::Pause => (r.pause_every_ms, r.pause_for_ms),
            RandomFault::Clock => (r.clock_every_ms, r.clock_jump_ms),
        };
        let scope = match kind {
            RandomFault::Partition => partition_scope(&r, self.nodes.len(), |name| self.index_of(name)),
            _ => Vec::new(),
        };
        match kind {
            RandomFault::Partition if !self.random_partition_active && scope.len() > 1 => {
                let (a, b) = draw_split(&mut self.log, &scope);
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

/// The nodes random partitions split, in node order: `partition_targets`, or every node when
/// it is empty. `targets` (whom kills, pauses and clock faults strike) does not scope them.
/// Nodes outside the scope are in neither side of a random split, so they keep reaching every
/// node. `index_of` gives a node's index by its name.
pub(super) fn partition_scope(r: &RandomFaults, nodes: usize, index_of: impl Fn(&str) -> usize) -> Vec<usize> {
    if r.partition_targets.is_empty() {
        return (0..nodes).collect();
    }
    let mut scope: Vec<usize> = r.partition_targets.iter().map(|n| index_of(n)).collect();
    scope.sort_unstable();
    scope.dedup();
    scope
}

/// A random split of `scope` (at least two nodes) into two non-empty sides, drawn by the
/// decision `partition sides` among `2^k - 2` options for the first `k = min(len, 20)` nodes of
/// the scope (bit i of the mask: the side of `scope[i]`). Over every node, as when nothing
/// scopes partitions, it is the draw it has always been.
pub(super) fn draw_split(log: &mut DecisionLog, scope: &[usize]) -> (Vec<usize>, Vec<usize>) {
    let k = scope.len().min(20);
    let mask = log.decide(DecisionPoint::PartitionSides, (1u64 << k) - 2) + 1;
    let side = |on: bool| -> Vec<usize> {
        scope[..k].iter().enumerate().filter(|&(i, _)| (mask >> i & 1 == 1) == on).map(|(_, &n)| n).collect()
    };
    (side(true), side(false))
}

/// A partition in the ledger's words: its groups (each a comma-separated list of names), then
/// the nodes no group names, which reach all: `[e3] | [e1,e2] (client reaches all)`.
pub(super) fn partition_words(groups: &[String], free: &[String]) -> String {
    let sides: Vec<String> = groups.iter().map(|g| format!("[{g}]")).collect();
    let sides = sides.join(" | ");
    match free {
        [] => sides,
        [one] => format!("{sides} ({one} reaches all)"),
        many => format!("{sides} ({} reach all)", many.join(",")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::NetworkConfig;

    fn random(partition_targets: &[&str]) -> RandomFaults {
        RandomFaults {
            partition_every_ms: Some([100, 200]),
            partition_targets: partition_targets.iter().map(|s| s.to_string()).collect(),
            ..RandomFaults::default()
        }
    }

    const NAMES: [&str; 4] = ["e1", "e2", "e3", "client"];

    fn index_of(name: &str) -> usize {
        NAMES.iter().position(|n| *n == name).unwrap()
    }

    #[test]
    fn random_partitions_split_every_node_unless_scoped() {
        assert_eq!(partition_scope(&random(&[]), 4, index_of), [0, 1, 2, 3]);
        // `targets` scopes kills, pauses and clock faults, not partitions.
        let targets = RandomFaults { targets: vec!["e1".into(), "e2".into()], ..random(&[]) };
        assert_eq!(partition_scope(&targets, 4, index_of), [0, 1, 2, 3]);
        // In node order whatever the file's order.
        assert_eq!(partition_scope(&random(&["e3", "e1", "e2"]), 4, index_of), [0, 1, 2]);
    }

    #[test]
    fn an_unscoped_split_draws_as_before() {
        // The draw every recorded campaign took: options 2^n - 2 over nodes 0..n, mask + 1.
        for n in 2..=6usize {
            for seed in 0..50 {
                let mut old = DecisionLog::new("split", seed);
                let mask = old.decide(DecisionPoint::PartitionSides, (1u64 << n) - 2) + 1;
                let before: (Vec<usize>, Vec<usize>) = (0..n).partition(|&i| mask >> i & 1 == 1);
                let mut new = DecisionLog::new("split", seed);
                let scope = partition_scope(&random(&[]), n, |_| unreachable!());
                assert_eq!(draw_split(&mut new, &scope), before, "n {n} seed {seed}");
                assert_eq!(old.records(), new.records());
            }
        }
    }

    #[test]
    fn a_scoped_random_split_never_cuts_a_node_outside_the_scope() {
        let scope = partition_scope(&random(&["e1", "e2", "e3"]), 4, index_of);
        let client = index_of("client");
        let mut seen = std::collections::BTreeSet::new();
        for seed in 0..200 {
            let mut log = DecisionLog::new("scoped split", seed);
            let (a, b) = draw_split(&mut log, &scope);
            assert_eq!(log.records()[0].options, 6, "2^3 - 2 splits of three nodes");
            assert!(!a.is_empty() && !b.is_empty(), "{a:?} {b:?}");
            assert!(!a.contains(&client) && !b.contains(&client));
            seen.insert(a.clone());
            // Both directions, and one way only: the client is never cut.
            for one_way in [false, true] {
                let mut net = Network::new(
                    NetworkConfig::default(),
                    &[[10, 0, 0, 1], [10, 0, 0, 2], [10, 0, 0, 3], [10, 0, 0, 4]],
                );
                if one_way {
                    net.cut_one_way(&a, &b);
                } else {
                    net.partition(&[a.clone(), b.clone()]);
                }
                assert!(net.partitioned());
                for other in 0..4 {
                    assert!(!net.is_cut(client, other) && !net.is_cut(other, client), "seed {seed} {a:?} {b:?}");
                }
                for (&x, &y) in a.iter().zip(&b) {
                    assert!(net.is_cut(x, y));
                }
            }
        }
        assert_eq!(seen.len(), 6, "every split of the scope is drawn: {seen:?}");
    }

    #[test]
    fn the_ledger_names_the_nodes_a_partition_leaves_free() {
        let g = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(partition_words(&g(&["e3", "e1,e2"]), &g(&["client"])), "[e3] | [e1,e2] (client reaches all)");
        assert_eq!(partition_words(&g(&["a", "b"]), &g(&["c", "d"])), "[a] | [b] (c,d reach all)");
        assert_eq!(partition_words(&g(&["a", "b,c"]), &[]), "[a] | [b,c]", "as before when every node is named");
    }
}
