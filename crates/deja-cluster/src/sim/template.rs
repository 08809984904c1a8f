//! The simulator's side of a test template ([`crate::template`]): the [`Composer`] of the
//! node that runs one, fed with the ends of the processes it started (after each stint of
//! that node) and woken at the times it asks for (an event in the queue), its lines written to
//! the node's stderr (`deja template: …`), its quiet period applied to the cluster, and its
//! verdict made the node's end.

use super::*;
use crate::template::{Composer, Host, Template, Verdict};

/// The simulator's part of a template run.
#[derive(Debug, Clone)]
pub(super) struct Templated {
    /// The node that runs it.
    pub(super) node: usize,
    pub(super) composer: Composer,
    /// The wake-up in the queue, if any.
    pub(super) wake: Option<u64>,
    /// Lines for the node's stderr, not yet handed to the sink.
    pub(super) lines: Vec<u8>,
    /// Its choices fixed by the steering ([`Steering::template`]), and how many it took.
    pub(super) given: Vec<u64>,
    pub(super) taken: usize,
    /// Its beginning is in the queue.
    pub(super) begins: bool,
}

/// What the composer drives in the node, through its kernel.
struct NodeHost<'a, M> {
    live: &'a mut Live<M>,
    log: &'a mut DecisionLog,
    env: &'a [Vec<u8>],
    quiet: bool,
    lines: &'a mut Vec<u8>,
    given: &'a [u64],
    taken: &'a mut usize,
}

impl<M: Machine> Host for NodeHost<'_, M> {
    fn start(&mut self, path: &str) -> Result<u64, String> {
        let Live { vm, kernel, .. } = &mut *self.live;
        kernel.start_process(vm.memory(), path, self.env).map_err(|e| format!("errno {e}"))
    }

    fn kill(&mut self, pid: u64) {
        let Live { vm, kernel, .. } = &mut *self.live;
        kernel.kill_started(vm.memory(), pid);
    }

    fn choose(&mut self, what: DecisionPoint, n: u64) -> u64 {
        let k = *self.taken;
        *self.taken += 1;
        match self.given.get(k) {
            Some(&v) => self.log.decide_given(what, n, v),
            None => self.log.decide(what, n),
        }
    }

    fn quiet(&mut self) {
        self.quiet = true;
    }

    fn say(&mut self, line: &str) {
        self.lines.extend_from_slice(format!("deja template: {line}\n").as_bytes());
    }
}

impl<M: Machine> Sim<M> {
    /// Reads the template of the node that runs one from its file system, once it has booted.
    pub(super) fn load_template(&mut self) -> Result<(), ClusterError> {
        let Some(i) = self.nodes.iter().position(|n| n.cfg.template.is_some()) else { return Ok(()) };
        let settings =
            self.nodes[i].cfg.template.clone().unwrap_or_else(|| crate::template::TemplateSettings::new("/"));
        let name = self.nodes[i].cfg.name.clone();
        let Some(live) = self.nodes[i].live.as_ref() else {
            return crate::TemplateRunSnafu { node: name, problem: "it ended before its template began" }.fail();
        };
        let entries = live.kernel.list_dir(&settings.dir).map_err(|e| {
            crate::TemplateRunSnafu { node: &name, problem: format!("{}: errno {e}", settings.dir) }.build()
        })?;
        let template = Template::new(&settings.dir, &entries)
            .map_err(|problem| crate::TemplateRunSnafu { node: &name, problem }.build())?;
        self.template = Some(Templated {
            node: i,
            composer: Composer::new(template, settings),
            wake: None,
            lines: Vec::new(),
            given: Vec::new(),
            taken: 0,
            begins: false,
        });
        Ok(())
    }

    /// Lets the composer act at the current time: `act` (begin or wake; none after a stint of
    /// its node), then the ends of the processes it started that the node reported; then its
    /// quiet period, its next wake-up and its verdict take effect. Nothing happens without an
    /// act or an end.
    pub(super) fn template_act(
        &mut self,
        act: Option<fn(&mut Composer, u64, &mut dyn Host)>,
    ) -> Result<(), ClusterError> {
        let Some(mut t) = self.template.take() else { return Ok(()) };
        let i = t.node;
        let n = &mut self.nodes[i];
        let Some(live) = n.live.as_mut().filter(|l| act.is_some() || l.kernel.started_have_ended()) else {
            self.template = Some(t);
            return Ok(());
        };
        let now = self.now.max(live.kernel.virtual_time_ns());
        let env: Vec<Vec<u8>> = n.cfg.env.iter().map(|e| e.clone().into_bytes()).collect();
        let mut host = NodeHost {
            live,
            log: &mut self.log,
            env: &env,
            quiet: false,
            lines: &mut t.lines,
            given: &t.given,
            taken: &mut t.taken,
        };
        if let Some(act) = act {
            act(&mut t.composer, now, &mut host);
        }
        loop {
            let ended = host.live.kernel.take_started_ended();
            if ended.is_empty() {
                break;
            }
            for (pid, status) in ended {
                t.composer.ended(pid, status, now, &mut host);
            }
        }
        let quiet = host.quiet;
        let Live { vm, kernel, .. } = &mut *host.live;
        let runnable = kernel.resume(vm.memory(), now, Vec::new());
        if n.state == State::Idle && runnable {
            n.state = State::Running;
        } else if n.state == State::Running && !runnable {
            n.state = State::Idle;
        }
        n.stderr.extend_from_slice(&t.lines);
        let verdict = t.composer.verdict().cloned();
        let wake = t.composer.wake_at();
        if wake.is_some() && wake != t.wake {
            self.push(wake.unwrap_or(now).max(now), Event::Template);
        }
        t.wake = wake;
        self.template = Some(t);
        if quiet {
            self.quiet_period()?;
        }
        match verdict {
            Some(Verdict::Passed) => self.template_end(i, 0),
            Some(Verdict::Failed(_)) => self.template_end(i, 1),
            Some(Verdict::Stopped(why)) => {
                self.template_stopped = Some(why);
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// Queues the template's beginning when it is due: at once for `start = "boot"`, else once
    /// a node has called `setup_complete`.
    pub(super) fn template_due(&mut self) {
        let Some(t) = self.template.as_ref().filter(|t| !t.begins) else { return };
        let due = match self.nodes[t.node].cfg.template.as_ref().map(|s| s.start) {
            Some(crate::template::TemplateStart::Boot) => true,
            _ => self.nodes.iter().any(|n| n.live.as_ref().is_some_and(|l| l.kernel.setup_completed())),
        };
        if due {
            if let Some(t) = self.template.as_mut() {
                t.begins = true;
            }
            self.push(self.now, Event::Template);
        }
    }

    /// Why the run ends without a verdict because its template never began, if it did not.
    pub(super) fn template_never_began(&self) -> Option<String> {
        let t = self.template.as_ref().filter(|t| !t.composer.begun())?;
        Some(format!(
            "the test template of {} never began: no node called setup_complete (`start = \"boot\"` begins it at boot)",
            self.nodes[t.node].cfg.name
        ))
    }

    /// Hands the template's lines to the sink.
    pub(super) fn flush_template_lines(&mut self, sink: Sink<'_>) {
        if let Some(t) = self.template.as_mut().filter(|t| !t.lines.is_empty()) {
            let lines = std::mem::take(&mut t.lines);
            sink(&self.nodes[t.node].cfg.name, Stream::Stderr, &lines);
        }
    }

    /// The quiet period: no new network, process or clock fault from now on, partitions
    /// heal, paused nodes resume, down nodes restart.
    fn quiet_period(&mut self) -> Result<(), ClusterError> {
        self.quiet = true;
        self.note("quiet", "the test template's quiet period: faults stop".to_string());
        self.heal();
        for i in 0..self.nodes.len() {
            if self.nodes[i].paused {
                self.resume(i)?;
            }
            if self.nodes[i].state == State::Down {
                self.restart(i)?;
            }
        }
        Ok(())
    }

    /// The template ended with a verdict: its node ends, exiting with `code`.
    fn template_end(&mut self, i: usize, code: i32) -> Result<(), ClusterError> {
        let n = &mut self.nodes[i];
        let Some(mut live) = n.live.take() else { return Ok(()) };
        let report = live.kernel.finish(live.vm.memory(), ExitStatus::Exited { code });
        n.lives.push(report);
        n.state = State::Exited;
        let conns = live.kernel.connections();
        self.retire(i, live);
        self.reset_peers(i, conns);
        Ok(())
    }
}
