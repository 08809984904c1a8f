//! A node's lives: one booted at the current time (its storage faults, counted over the
//! lives before it, installed), run to its first syscall, and ended by a crash at a durable
//! operation or by its own exit, its VM retired and what it injected noted in the ledger.

use super::*;

impl<M: Machine> Sim<M> {
    /// Runs node `i`, just booted, to its first syscall, before it is served: a clean ring-3
    /// stop, where a fork at boot keeps its VM. What a program does before its first syscall
    /// (the loader's work, a Go runtime's reads of the TSC) touches nothing another node or the
    /// network can see, but it may advance the node's clock (a rewritten `rdtsc` costs virtual
    /// time), and the scheduler orders nodes by their clocks: so every cluster run, booted or
    /// forked, takes this step for every node, in file order, before the scheduler's first
    /// decision. A node that ends on the way (a fault) has ended.
    pub(super) fn run_to_first_syscall(&mut self, i: usize) -> Result<(), ClusterError> {
        let n = &mut self.nodes[i];
        let name = n.cfg.name.clone();
        let Some(live) = n.live.as_mut() else { return Ok(()) };
        match live.vm.run_until(&mut live.kernel, &mut |_, _| {}, Some(0)) {
            Ok(Stop::AtSyscall) => Ok(()),
            Ok(Stop::Exited(_)) => self.ended(i),
            Ok(Stop::Crashed) => self.crashed(i),
            Ok(stop) => EndedBeforeFirstSyscallSnafu { node: name, stop }.fail(),
            Err(source) => Err(ClusterError::Vm { node: name, source }),
        }
    }

    /// Gives node `i`'s running life the storage faults in force that are still ahead of it:
    /// a fault counted over the node's run (its n-th durable operation on a path, its n-th
    /// write) becomes the one counted in this life, after what the earlier lives did; one
    /// whose count an earlier life reached has struck or passed. A node the storage targets
    /// leave out gets none.
    pub(super) fn install_storage(&mut self, i: usize) {
        let st = &self.cfg.storage;
        let n = &mut self.nodes[i];
        let Some(live) = n.live.as_mut() else { return };
        if !st.targets_node(&n.cfg.name) {
            // No storage faults, but its crashes (a kill) keep to the cluster's crash model.
            let fail_stop = n.cfg.fail_stop.clone();
            let failure_marker = n.cfg.failure_marker.clone();
            if st.crash_model != deja_kernel::CrashModel::PosixWeak
                || fail_stop != deja_kernel::FailStopMode::Auto
                || failure_marker.is_some()
            {
                live.kernel.set_fault_config(deja_kernel::FaultConfig {
                    crash_model: st.crash_model,
                    fail_stop,
                    failure_marker,
                    ..Default::default()
                });
            }
            return;
        }
        let durable = crate::durable_counts(&n.lives);
        let mut io: BTreeMap<(deja_kernel::IoOp, &str), u64> = BTreeMap::new();
        for life in &n.lives {
            for c in &life.io_ops {
                *io.entry((c.op, c.path.as_str())).or_default() += c.count;
            }
        }
        let mut f = deja_kernel::FaultConfig {
            torn_writes: st.torn_writes,
            reordered_writes: st.reordered_writes,
            fault_paths: st.paths.clone(),
            crash_model: st.crash_model,
            fail_stop: n.cfg.fail_stop.clone(),
            failure_marker: n.cfg.failure_marker.clone(),
            ..Default::default()
        };
        for fault in self.storage.iter().filter(|s| s.node == n.cfg.name) {
            match &fault.fault {
                NodeFault::Crash(c) => {
                    let done = durable.get(c.path.as_str()).copied().unwrap_or(0);
                    if c.nth > done {
                        f.crash_at.push(deja_kernel::OpCrash { nth: c.nth - done, ..c.clone() });
                    }
                }
                NodeFault::Error(r) => {
                    let done = io.get(&(r.op, r.path.as_str())).copied().unwrap_or(0);
                    if r.nth == 0 {
                        f.errors.push(r.clone());
                    } else if r.nth > done {
                        f.errors.push(deja_kernel::ErrorRule { nth: r.nth - done, ..r.clone() });
                    }
                }
                NodeFault::Kill(k) => {
                    // Counted over the node's lives, as crashes are.
                    let done: u64 = n
                        .lives
                        .iter()
                        .flat_map(|l| &l.process_ops)
                        .filter(|(name, _)| *name == k.name)
                        .map(|(_, c)| c)
                        .sum();
                    if k.nth > done {
                        f.kill_process.push(deja_kernel::ProcessKill { nth: k.nth - done, ..k.clone() });
                    }
                }
            }
        }
        live.kernel.set_fault_config(f);
    }

    /// A life of node `i` ended: its VM goes back to the fork if it was the fork's.
    pub(super) fn retire(&mut self, i: usize, mut live: Live<M>) {
        self.nodes[i].blocks.extend(live.vm.take_block_hits());
        if live.forked {
            self.spare[i] = Some(live.vm);
        }
    }

    /// Starts a node's next life at the current time.
    pub(super) fn boot_node(&mut self, i: usize) -> Result<(), ClusterError> {
        let memory = self.cfg.memory;
        let n = &mut self.nodes[i];
        let life = n.lives.len() as u64;
        let seed = if life == 0 { n.seed } else { deja_vmm::restart_seed(n.seed, life) };
        let mut spec = ProgramSpec::for_program(n.cfg.image.clone(), &n.cfg.program, n.cfg.args.clone(), seed);
        spec.exe_path = n.cfg.exe_path.clone();
        spec.argv[0] = n.cfg.argv0.clone();
        spec.root = n.cfg.root.clone();
        spec.env = n.cfg.env.clone();
        spec.cwd = n.cfg.cwd.clone();
        spec.cpus = n.cfg.cpus;
        spec.files = n.cfg.files.clone();
        spec.disk = n.disk.take();
        spec.record_trace = self.record_trace;
        // A cluster on its way to a fork point keeps dirty logs; a child's restarts boot plain
        // VMs of their own.
        let opts = BootOptions { dirty_log: self.dirty_log, ..BootOptions::new(self.cfg.settings) };
        let (mut vm, mut kernel) = M::boot(&spec, memory, opts).context(BootSnafu { node: &n.cfg.name })?;
        if let Some(Some((blocks, seen))) = self.cover.get(i) {
            vm.arm_blocks(blocks.clone(), seen);
            kernel.announce_code(vm.memory());
        }
        kernel.attach_network(n.cfg.address);
        kernel.resume(vm.memory(), self.now, Vec::new());
        n.live = Some(Live { vm, kernel, forked: self.dirty_log });
        n.state = State::Running;
        self.install_storage(i);
        Ok(())
    }

    /// Node `i` crashed at a durable operation, or at its fail-stop after an injected I/O
    /// error: its VM is gone, its disk is the crash image, its peers are reset, and it
    /// restarts at once on that disk.
    pub(super) fn crashed(&mut self, i: usize) -> Result<(), ClusterError> {
        let now = self.now;
        let budget = self.crash_states;
        let n = &mut self.nodes[i];
        let Some(mut live) = n.live.take() else { return Ok(()) };
        // A crash by meaning is named by its count over the node's run, not the life's.
        let point = match live.kernel.crash_struck() {
            Some(c) => {
                let before = crate::durable_counts(&n.lives).get(c.path.as_str()).copied().unwrap_or(0);
                deja_kernel::OpCrash { nth: c.nth + before, ..c.clone() }.point()
            }
            None => live.kernel.crash_point_words(),
        };
        let pending = live.kernel.pending_operations();
        let seed = n.seed ^ n.lives.len() as u64;
        let states: Vec<deja_kernel::KeptOps> = if budget > 0 {
            let found = live.kernel.crash_states(budget, seed).states;
            found.into_iter().map(|(s, _)| deja_kernel::KeptOps::of(&s, &pending)).collect()
        } else {
            Vec::new()
        };
        n.disk = Some(live.kernel.crash_image());
        let conns = live.kernel.connections();
        let status = live.kernel.exit_status().cloned().unwrap_or_else(|| sigkill("crashed by deja"));
        let report = live.kernel.finish(live.vm.memory(), status);
        let kept = report.crash_state.as_ref().map(|c| deja_kernel::KeptOps::of(&c.state, &c.pending));
        let errors = injected_errors(&report);
        n.lives.push(report);
        n.state = State::Down;
        n.paused = false;
        let name = n.cfg.name.clone();
        let life = n.lives.len() - 1;
        self.retire(i, live);
        for (kind, point) in errors {
            self.note(&kind, format!("{name} {point}"));
        }
        self.note("crash", format!("{name} {point}"));
        self.crashes.push(CrashRecord { node: name, life, time_ns: now, point, pending, kept, states });
        self.reset_peers(i, conns);
        self.push(now, Event::Revive(i));
        Ok(())
    }

    /// Node `i`'s program ended on its own.
    pub(super) fn ended(&mut self, i: usize) -> Result<(), ClusterError> {
        if self.template.as_ref().is_some_and(|t| t.node == i && t.composer.verdict().is_none()) {
            self.template_stopped =
                Some(format!("{}'s program exited before its template ended", self.nodes[i].cfg.name));
        }
        let n = &mut self.nodes[i];
        let Some(mut live) = n.live.take() else { return Ok(()) };
        let status = live.kernel.exit_status().cloned().unwrap_or(ExitStatus::Exited { code: 0 });
        let code = match status {
            ExitStatus::Exited { code } => Some(code),
            ExitStatus::Signaled { .. } => None,
        };
        let again = n.cfg.restart.again(code, n.relaunches);
        // Its host did not crash: the next life finds every write, synced or not.
        let disk = again.then(|| live.kernel.disk());
        let report = live.kernel.finish(live.vm.memory(), status);
        let errors = injected_errors(&report);
        n.lives.push(report);
        // By its restart policy it boots again after Docker's delay, on its disk; until then it
        // is down, as a container between its exit and its restart.
        n.state = if again { State::Down } else { State::Exited };
        let relaunch_at = again.then(|| self.now + crate::config::Restart::delay_ns(n.relaunches));
        if again {
            n.disk = disk;
        }
        // Its host is still up: what it had open is closed, which resets its peers.
        let conns = live.kernel.connections();
        let name = n.cfg.name.clone();
        if let Some(at) = relaunch_at {
            self.push(at, Event::Relaunch(i));
        }
        self.retire(i, live);
        for (kind, point) in errors {
            self.note(&kind, format!("{name} {point}"));
        }
        self.reset_peers(i, conns);
        Ok(())
    }
}

/// The I/O errors and process kills injected into a life, as (kind, point) for the cluster's
/// ledger.
pub(crate) fn injected_errors(report: &RunReport) -> Vec<(String, String)> {
    report
        .faults
        .iter()
        .filter(|f| {
            matches!(
                f.kind,
                deja_kernel::FaultKind::Eio | deja_kernel::FaultKind::Enospc | deja_kernel::FaultKind::Kill
            )
        })
        .map(|f| (f.kind.name().to_string(), f.point.clone()))
        .collect()
}

/// How a node that deja stopped ends: SIGKILL, with why.
pub(super) fn sigkill(why: &str) -> ExitStatus {
    ExitStatus::Signaled {
        signal: 9,
        name: "SIGKILL".into(),
        fault: Some(deja_kernel::FaultInfo { description: why.into(), vector: 0, rip: 0, addr: None }),
    }
}
