//! Moments of a cluster run, for `deja at` and `deja explain`: the run replayed up to a point
//! and held there ([`pause`]), what every node holds at that point ([`Moment`]), a node's file
//! as it is there or as a crash there would leave it, a command run inside a node from there
//! with the fault injector stopped, and continuations from there with fresh randomness.
//!
//! A run is held only at the top of a scheduling step, where its own course passes too, and
//! before anything of that step happens, so the run up to a moment is the run itself: a
//! moment at a virtual time is the first step that would act at or after it (a node that was
//! running when the time came is shown at its clock, which may be past it); a moment at a
//! decision is the first step with that many cluster decisions taken.

use super::*;

/// Where a run is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum At {
    /// The first step that would act at or after this virtual time (ns).
    Time(u64),
    /// The first step with at least this many cluster decisions taken.
    Decision(u64),
}

/// A process started from outside, until it ends.
#[derive(Debug, Clone)]
pub(super) struct Watch {
    node: usize,
    pid: u64,
    /// How it ended, as a shell's `$?`, once it has.
    pub(super) status: Option<i32>,
}

/// What [`pause`] came to.
pub enum Pause<M = Vm> {
    /// The run is held at the moment.
    At(Box<Paused<M>>),
    /// The run ended before it: its report.
    Ended(Box<ClusterReport>),
}

/// A run held at a moment.
pub struct Paused<M = Vm> {
    sim: Sim<M>,
    /// The run's steering, when the moment came before its point (`SteerAt::Setup`): what of
    /// it is input (storage faults, template choices, fates) a branch still applies.
    unsteered: Option<Steering>,
}

/// One node at a moment.
#[derive(Debug, Clone, Serialize)]
pub struct NodeMoment {
    /// Its name.
    pub name: String,
    /// `running`, `blocked`, `paused`, `down` or `exited`.
    pub state: String,
    /// Its clock (virtual ns), while it has a life.
    pub clock_ns: Option<u64>,
    /// Its lives so far (the current one included).
    pub lives: usize,
    /// Its processes, with their threads and open files.
    pub processes: Vec<deja_kernel::ProcessView>,
    /// The operations a crash now could lose, in program order.
    pub pending: Vec<String>,
    /// The last lines of its stdout and stderr.
    pub stdout_tail: Vec<String>,
    /// See [`NodeMoment::stdout_tail`].
    pub stderr_tail: Vec<String>,
}

/// A packet on the network at a moment.
#[derive(Debug, Clone, Serialize)]
pub struct InFlight {
    /// The sending node's name.
    pub from: String,
    /// The receiving node's name.
    pub to: String,
    /// When it arrives (virtual ns); `None` while a cut holds it.
    pub at_ns: Option<u64>,
    /// Its addresses and contents, in words.
    pub what: String,
}

/// Everything at a moment.
#[derive(Debug, Clone, Serialize)]
pub struct Moment {
    /// The cluster's time (virtual ns).
    pub time_ns: u64,
    /// Cluster decisions taken so far.
    pub decisions: u64,
    /// Every node.
    pub nodes: Vec<NodeMoment>,
    /// Packets scheduled for delivery or held by a cut.
    pub in_flight: Vec<InFlight>,
    /// The cuts in force: (from, to) node names, each direction that cannot pass.
    pub cuts: Vec<(String, String)>,
    /// The fault ledger so far.
    pub faults: Vec<FaultEvent>,
}

/// How a command run inside a node ended.
#[derive(Debug, Clone, Serialize)]
pub struct Exec {
    /// Its pid in the node.
    pub pid: u64,
    /// Its status as a shell's `$?` gives it; `None` when it did not end (see `why`).
    pub status: Option<i32>,
    /// What it and the processes of its session wrote to stdout and stderr.
    pub output: Vec<u8>,
    /// Virtual time it ran for (ns).
    pub ran_ns: u64,
    /// Why it has no status.
    pub why: Option<String>,
}

/// `ENOENT`: the command is not at this place on the search path.
const ENOENT: i32 = 2;

/// Lines kept of each stream in a [`NodeMoment`].
const TAIL: usize = 10;

/// The search path of a node whose environment names none (Docker's default).
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

fn tail(bytes: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(bytes);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(TAIL)..].iter().map(|l| l.to_string()).collect()
}

fn packet_words(p: &Packet) -> String {
    let what = match &p.payload {
        Payload::Data(d) => format!("{} bytes", d.len()),
        other => format!("{other:?}").to_lowercase(),
    };
    format!("{} → {}: {what}", p.src, p.dst)
}

/// Replays `cfg` under `steering` (as [`run`] does) and holds it at `at`, or runs it to its
/// end if it ends first.
pub fn pause(cfg: ClusterConfig, steering: &Steering, at: At) -> Result<Pause, ClusterError> {
    pause_on::<Vm>(cfg, steering, at)
}

/// [`pause`], each node's lives on machines of type `M`.
pub fn pause_on<M: Machine>(cfg: ClusterConfig, steering: &Steering, at: At) -> Result<Pause<M>, ClusterError> {
    let wall = Instant::now();
    let mut sim = Sim::<M>::boot(cfg, false, false, Vec::new())?;
    sim.crash_states = steering.crash_states;
    sim.moment = Some(at);
    let mut sink = |_: &str, _: Stream, _: &[u8]| {};
    let mut unsteered = None;
    let ended = match steering.at {
        SteerAt::Boot => {
            sim.steer(steering);
            sim.main_loop(&mut sink, false)?
        }
        SteerAt::Setup => {
            sim.arm();
            match sim.main_loop(&mut sink, true)? {
                None if sim.moment.is_some() => {
                    sim.steer(steering);
                    sim.main_loop(&mut sink, false)?
                }
                None => {
                    unsteered = Some(steering.clone());
                    None
                }
                other => other,
            }
        }
    };
    Ok(match ended {
        None => Pause::At(Box::new(Paused { sim, unsteered })),
        Some(outcome) => Pause::Ended(Box::new(sim.report(outcome, wall.elapsed().as_nanos() as u64))),
    })
}

impl<M: Machine> Sim<M> {
    /// True (and the moment cleared) when the run reaches its moment at the top of a step with
    /// `taken` decisions taken, about to act at `next` (when known); a moment at a time sets the
    /// cluster's time to it (nothing happened since the last step).
    pub(super) fn moment_due(&mut self, taken: u64, next: Option<u64>) -> bool {
        let due = match self.moment {
            Some(At::Decision(k)) => taken >= k,
            Some(At::Time(t)) => next.is_some_and(|n| n >= t),
            None => false,
        };
        if due {
            // Nothing happens between the last thing done and `t`: the cluster is at `t`.
            if let Some(At::Time(t)) = self.moment {
                self.now = self.now.max(t);
            }
            self.moment = None;
        }
        due
    }

    /// After a stint of node `i`: the watched process's end, if it was its and it ended.
    pub(super) fn watch_ended(&mut self, i: usize) {
        let Some(w) = self.watch.as_mut().filter(|w| w.node == i && w.status.is_none()) else { return };
        if let Some(live) = self.nodes[i].live.as_mut() {
            w.status = live.kernel.take_started_end(w.pid);
        }
    }
}

impl<M: Machine> Paused<M> {
    /// The index of the node named `name`.
    pub fn node(&self, name: &str) -> Option<usize> {
        self.sim.nodes.iter().position(|n| n.cfg.name == name)
    }

    /// The nodes' names, in the cluster file's order.
    pub fn node_names(&self) -> Vec<String> {
        self.sim.nodes.iter().map(|n| n.cfg.name.clone()).collect()
    }

    /// Everything at the moment.
    pub fn moment(&self) -> Moment {
        let sim = &self.sim;
        let name = |i: usize| sim.nodes.get(i).map_or_else(|| format!("node {i}"), |n| n.cfg.name.clone());
        let nodes = sim
            .nodes
            .iter()
            .map(|n| {
                let live = n.live.as_ref();
                NodeMoment {
                    name: n.cfg.name.clone(),
                    state: state_name(n).to_string(),
                    clock_ns: live.map(|l| l.kernel.virtual_time_ns()),
                    lives: n.lives.len() + usize::from(live.is_some()),
                    processes: live.map(|l| l.kernel.processes_view()).unwrap_or_default(),
                    pending: live.map(|l| l.kernel.pending_operations()).unwrap_or_default(),
                    stdout_tail: tail(&n.stdout),
                    stderr_tail: tail(&n.stderr),
                }
            })
            .collect();
        let mut in_flight: Vec<InFlight> = sim
            .events
            .iter()
            .filter_map(|((at, _), e)| match e {
                Event::Deliver(d) => Some(InFlight {
                    from: sim.net.node_of(d.packet.src).map_or_else(|| d.packet.src.to_string(), name),
                    to: name(d.node),
                    at_ns: Some(*at),
                    what: packet_words(&d.packet),
                }),
                _ => None,
            })
            .collect();
        in_flight.extend(sim.net.held_packets().into_iter().map(|(from, to, p)| InFlight {
            from: name(from),
            to: name(to),
            at_ns: None,
            what: packet_words(p),
        }));
        Moment {
            time_ns: sim.now,
            decisions: sim.log.records().len() as u64,
            nodes,
            in_flight,
            cuts: sim.net.cuts().into_iter().map(|(a, b)| (name(a), name(b))).collect(),
            faults: sim.ledger.clone(),
        }
    }

    /// The file at `path` in node `node` as it is at the moment, or (`crashed`) as a crash there
    /// that kept none of the pending operations would leave it. A node that is down has only
    /// the disk its crash left.
    pub fn read_file(&self, node: usize, path: &str, crashed: bool) -> Result<Vec<u8>, String> {
        let n = self.sim.nodes.get(node).ok_or_else(|| format!("no node {node}"))?;
        let disk = match (n.live.as_ref(), &n.disk) {
            (Some(l), _) if crashed => l.kernel.durable_disk(),
            (Some(l), _) => l.kernel.disk(),
            (None, Some(d)) => d.clone(),
            (None, None) => return Err(format!("{} has no file system at this moment", n.cfg.name)),
        };
        match disk.entries.get(path) {
            Some(deja_kernel::DiskEntry::File { data, .. }) => Ok(data.clone()),
            Some(_) => Err(format!("{path} in {} is not a regular file", n.cfg.name)),
            None => Err(format!("{path} does not exist in {} at this moment", n.cfg.name)),
        }
    }

    /// Runs `argv` inside node `node` from the moment, as `docker exec` would (the node's
    /// environment; a bare name found on its `PATH`), with no new fault and the rest of the
    /// cluster running on, for at most `limit_ns` of virtual time. The run is changed by it:
    /// it is a branch.
    pub fn exec(&mut self, node: usize, argv: &[String], limit_ns: u64) -> Result<Exec, ClusterError> {
        let sim = &mut self.sim;
        let Some(n) = sim.nodes.get_mut(node) else {
            return crate::MomentSnafu { problem: format!("no node {node}") }.fail();
        };
        let name = n.cfg.name.clone();
        if n.paused || n.live.is_none() {
            return crate::MomentSnafu { problem: format!("{name} is {} at this moment", state_name(n)) }.fail();
        }
        let Some(live) = n.live.as_mut() else { return crate::MomentSnafu { problem: name }.fail() };
        let env: Vec<Vec<u8>> = n.cfg.env.iter().map(|e| e.clone().into_bytes()).collect();
        let path = n.cfg.env.iter().find_map(|e| e.strip_prefix("PATH=")).unwrap_or(DEFAULT_PATH).to_string();
        let first = argv.first().cloned().unwrap_or_default();
        let candidates: Vec<String> = match first.contains('/') {
            true => vec![first.clone()],
            false => path.split(':').filter(|d| d.starts_with('/')).map(|d| format!("{d}/{first}")).collect(),
        };
        let Live { vm, kernel, .. } = live;
        let mut started = Err(ENOENT);
        for c in &candidates {
            let mut args: Vec<Vec<u8>> = vec![c.clone().into_bytes()];
            args.extend(argv.iter().skip(1).map(|a| a.clone().into_bytes()));
            started = kernel.start_command(vm.memory(), &args, &env, true);
            if started != Err(ENOENT) {
                break;
            }
        }
        let pid = match started {
            Ok(pid) => pid,
            Err(errno) => {
                let problem =
                    format!("cannot start {first} in {name}: errno {errno} (tried {})", candidates.join(", "));
                return crate::MomentSnafu { problem }.fail();
            }
        };
        let now = sim.now.max(kernel.virtual_time_ns());
        let runnable = kernel.resume(vm.memory(), now, Vec::new());
        if n.state == State::Idle && runnable {
            n.state = State::Running;
        }
        let began = sim.now;
        sim.quiet = true;
        sim.note("exec", format!("{name}: {} started (pid {pid}); faults stop", argv.join(" ")));
        sim.watch = Some(Watch { node, pid, status: None });
        sim.moment = Some(At::Time(began.saturating_add(limit_ns)));
        let mut sink = |_: &str, _: Stream, _: &[u8]| {};
        let ended = sim.main_loop(&mut sink, false)?;
        sim.moment = None;
        let status = sim.watch.take().and_then(|w| w.status);
        let output = sim.nodes[node].live.as_mut().map(|l| l.kernel.take_captured(pid)).unwrap_or_default();
        let why = match (status, ended) {
            (Some(_), _) => None,
            (None, Some(outcome)) => Some(format!("the cluster's run ended first: {outcome:?}")),
            (None, None) if sim.nodes[node].live.is_none() => Some(format!("{name} ended first")),
            (None, None) => Some(format!("it did not end within {} ms of virtual time", limit_ns / 1_000_000)),
        };
        Ok(Exec { pid, status, output, ran_ns: sim.now - began, why })
    }

    /// The run from the moment on with fresh randomness: every cluster and node decision after
    /// it drawn from `seed`'s streams, to its end. What the input places is kept: a scripted
    /// fault comes at its time, and a storage fault or template choice the run's steering would
    /// have placed after the moment is placed at it.
    pub fn branch(mut self, seed: u64) -> Result<ClusterReport, ClusterError> {
        let wall = Instant::now();
        let mut steering = Steering { reseed: Some(seed), ..Steering::default() };
        if let Some(s) = self.unsteered.take() {
            steering = Steering { storage: s.storage, template: s.template, fates: s.fates, ..steering };
        }
        let sim = &mut self.sim;
        sim.steer(&steering);
        let mut sink = |_: &str, _: Stream, _: &[u8]| {};
        let outcome = sim.main_loop(&mut sink, false)?;
        Ok(sim.report(outcome.unwrap_or(Outcome::TimeLimit), wall.elapsed().as_nanos() as u64))
    }
}
