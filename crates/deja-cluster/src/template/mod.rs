//! Test templates: a directory of commands whose name prefixes say when they run, the
//! convention of Antithesis's test composer, run in one node of a cluster.
//!
//! The commands of a template (`/opt/antithesis/test/v1/NAME/`, or any directory a node names)
//! are the directory's executable files whose names start with a known prefix; `helper_` and
//! any other name is left alone. deja runs them in the node as processes it starts itself
//! ([`deja_kernel::Kernel::start_process`]), as `docker exec` would, and a run of the cluster
//! goes through these phases, every choice a cluster decision (`template …`) the explorer
//! mutates and replay keeps:
//!
//! 0. **Start.** The template begins at the first `setup_complete` any node sends (the system
//!    says it is ready, as Antithesis's test composer waits for it), or at boot with `start =
//!    "boot"`. One that never begins leaves the run without a verdict (`stuck`).
//! 1. **First.** Each `first_` command, one after another in name order. One that exits
//!    non-zero stops the template: the run has no verdict (the cluster is `stuck`, with why).
//! 2. **Drive**, faults on. Either one `singleton_driver_` alone (decision `template
//!    singleton`, then `template command`), or a number of driver starts (`template drivers`,
//!    1 to `max_drivers`), each a `parallel_driver_` or `serial_driver_` (`template command`):
//!    a parallel driver starts at once and may overlap every other parallel driver, the next
//!    start following after a gap (`template gap`, in `gap_ms`); a serial driver waits until no
//!    driver runs, and runs alone. `anytime_` commands start at gaps of their own, besides the
//!    drivers, until the drivers are done (up to `max_drivers` of them); a template with only
//!    `anytime_` commands starts them as its drivers. The phase ends when every driver started
//!    has ended (the drivers *completed*), or at `drive_ms` after it began: then the drivers
//!    and `anytime_` commands still running are killed (SIGKILL).
//! 3. **Quiet**, for `quiet_ms`: the cluster's network, process and clock faults stop (no new
//!    fault; partitions heal, paused nodes resume, killed nodes restart), so the system can
//!    recover.
//! 4. **Check.** Each `eventually_` command, then, if the drivers completed, each `finally_`
//!    command, one after another in name order. The first that exits non-zero is the run's
//!    failure; when all pass, the template passed.
//!
//! Exit statuses of drivers, `anytime_` commands and `first_` commands other than the above
//! are not failures: a driver running under faults may fail. A failing `Always` assertion in
//! any command is a failure as in any program. The template's end is its node's end: the node
//! exits 0 when the template passed, 1 when it failed.
//!
//! [`Composer`] is the pure state machine: it is driven by the simulator through [`Host`]
//! (start and kill processes, draw decisions, stop the faults, write a line to the node's
//! output) and tested over fakes.

use std::collections::BTreeMap;

use deja_kernel::DecisionPoint;
use serde::{Deserialize, Serialize};

#[cfg(test)]
mod tests;

/// Where Antithesis's convention keeps test templates.
pub const TEMPLATE_ROOT: &str = "/opt/antithesis/test/v1";

/// The kind of a test command, from its name's prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Prefix {
    /// `first_`: set-up, before anything else.
    First,
    /// `parallel_driver_`: a driver that may overlap other parallel drivers.
    ParallelDriver,
    /// `singleton_driver_`: the only driver of its run.
    SingletonDriver,
    /// `serial_driver_`: a driver that runs while no other driver does.
    SerialDriver,
    /// `anytime_`: may run at any time while the drivers run.
    Anytime,
    /// `eventually_`: checks after the quiet period.
    Eventually,
    /// `finally_`: checks after the quiet period, when the drivers completed.
    Finally,
}

impl Prefix {
    /// Every prefix with its word.
    pub const ALL: [(Prefix, &'static str); 7] = [
        (Prefix::First, "first_"),
        (Prefix::ParallelDriver, "parallel_driver_"),
        (Prefix::SingletonDriver, "singleton_driver_"),
        (Prefix::SerialDriver, "serial_driver_"),
        (Prefix::Anytime, "anytime_"),
        (Prefix::Eventually, "eventually_"),
        (Prefix::Finally, "finally_"),
    ];

    /// The prefix of a command's file name, if it has one.
    pub fn of(name: &str) -> Option<Prefix> {
        Prefix::ALL.iter().find(|(_, w)| name.starts_with(w) && name.len() > w.len()).map(|(p, _)| *p)
    }
}

/// A template's settings (a node's `template` table, a compose service's `x-deja.template`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TemplateSettings {
    /// The template's directory in the node.
    pub dir: String,
    /// The longest the drive phase lasts, ms of virtual time.
    #[serde(default = "default_drive_ms")]
    pub drive_ms: u64,
    /// The quiet period, ms.
    #[serde(default = "default_quiet_ms")]
    pub quiet_ms: u64,
    /// Most driver starts in a run (and most `anytime_` starts).
    #[serde(default = "default_max_drivers")]
    pub max_drivers: u64,
    /// The gap between two starts, ms, drawn uniformly.
    #[serde(default = "default_gap_ms")]
    pub gap_ms: [u64; 2],
    /// When it begins: at the first `setup_complete` any node sends (default), or at boot.
    #[serde(default)]
    pub start: TemplateStart,
}

/// When a template begins.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TemplateStart {
    /// At the first `setup_complete` of any node (our SDK's lifecycle call, or the Antithesis
    /// SDKs' `setup_complete`), as Antithesis's test composer waits for it.
    #[default]
    Setup,
    /// As soon as the cluster has booted.
    Boot,
}

fn default_drive_ms() -> u64 {
    20_000
}
fn default_quiet_ms() -> u64 {
    2_000
}
fn default_max_drivers() -> u64 {
    4
}
fn default_gap_ms() -> [u64; 2] {
    [0, 500]
}

impl TemplateSettings {
    /// Settings with every default, for `dir`.
    pub fn new(dir: &str) -> TemplateSettings {
        TemplateSettings {
            dir: dir.to_string(),
            drive_ms: default_drive_ms(),
            quiet_ms: default_quiet_ms(),
            max_drivers: default_max_drivers(),
            gap_ms: default_gap_ms(),
            start: TemplateStart::Setup,
        }
    }

    /// What is wrong with them, if anything.
    pub fn problem(&self) -> Option<String> {
        if !self.dir.starts_with('/') {
            return Some(format!("template dir {:?} is not an absolute path", self.dir));
        }
        if !(1..=64).contains(&self.max_drivers) {
            return Some(format!("template max_drivers {} is not in 1..=64", self.max_drivers));
        }
        if self.gap_ms[0] > self.gap_ms[1] {
            return Some(format!("template gap_ms {:?} is not a range", self.gap_ms));
        }
        if self.drive_ms == 0 {
            return Some("template drive_ms is 0".into());
        }
        None
    }
}

/// One command of a template.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Command {
    /// Its file name.
    pub name: String,
    /// Its kind.
    pub prefix: Prefix,
}

/// The commands of a template directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Template {
    /// The directory.
    pub dir: String,
    /// Its commands, by name.
    pub commands: Vec<Command>,
}

impl Template {
    /// The template of directory `dir` whose entries are `entries` (name, executable). A file
    /// with a prefix that is not executable, or a template without a driver or `anytime_`
    /// command, is refused.
    pub fn new(dir: &str, entries: &[(String, bool)]) -> Result<Template, String> {
        let mut commands = Vec::new();
        for (name, runs) in entries {
            let Some(prefix) = Prefix::of(name) else { continue };
            if !runs {
                return Err(format!("{dir}/{name} is not an executable file"));
            }
            commands.push(Command { name: name.clone(), prefix });
        }
        commands.sort_by(|a, b| a.name.cmp(&b.name));
        let drives = commands.iter().any(|c| {
            matches!(
                c.prefix,
                Prefix::ParallelDriver | Prefix::SingletonDriver | Prefix::SerialDriver | Prefix::Anytime
            )
        });
        if !drives {
            return Err(format!(
                "{dir} has no parallel_driver_, singleton_driver_, serial_driver_ or anytime_ command"
            ));
        }
        Ok(Template { dir: dir.trim_end_matches('/').to_string(), commands })
    }

    /// The path of command `i`.
    pub fn path(&self, i: usize) -> String {
        format!("{}/{}", self.dir, self.commands[i].name)
    }

    fn of(&self, p: &[Prefix]) -> Vec<usize> {
        (0..self.commands.len()).filter(|&i| p.contains(&self.commands[i].prefix)).collect()
    }
}

/// A template's part of a cluster report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TemplateReport {
    /// The node that ran it.
    pub node: String,
    /// Its directory.
    pub dir: String,
    /// Its commands, by name.
    pub commands: Vec<String>,
    /// Whether it began (it waits for `setup_complete` unless it starts at boot).
    pub began: bool,
    /// How it ended, if it did.
    pub verdict: Option<Verdict>,
}

/// What the composer asks of the simulator.
pub trait Host {
    /// Starts the command at `path` in the template's node; its pid, or why it could not start.
    fn start(&mut self, path: &str) -> Result<u64, String>;
    /// Kills process `pid` (one [`Host::start`] gave).
    fn kill(&mut self, pid: u64);
    /// A decision among `n` choices.
    fn choose(&mut self, what: DecisionPoint, n: u64) -> u64;
    /// Stops the cluster's faults and undoes those in force (the quiet period).
    fn quiet(&mut self);
    /// Writes a line to the node's output.
    fn say(&mut self, line: &str);
}

/// How a template's run ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "detail", rename_all = "snake_case")]
pub enum Verdict {
    /// Every check passed.
    Passed,
    /// A check failed: which, and how.
    Failed(String),
    /// The template could not go on (a `first_` command failed, a command could not start):
    /// no verdict.
    Stopped(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    First,
    Driver,
    Anytime,
    Check,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    NotBegun,
    First(usize),
    Drive,
    Quiet { until: u64 },
    Check(usize),
    Done,
}

/// The state of one run of a template.
#[derive(Debug, Clone)]
pub struct Composer {
    template: Template,
    settings: TemplateSettings,
    phase: Phase,
    running: BTreeMap<u64, (usize, Role)>,
    /// Driver starts to make, and made.
    budget: u64,
    launched: u64,
    /// When the drive phase ends at the latest.
    deadline: u64,
    next_launch: Option<u64>,
    serial_waiting: Option<usize>,
    /// `anytime_` starts left, and when the next is due.
    anytime_left: u64,
    anytime_next: Option<u64>,
    /// The commands the drive phase starts (`anytime_` ones when there is no driver).
    drivers: Vec<usize>,
    completed: bool,
    checks: Vec<usize>,
    verdict: Option<Verdict>,
}

impl Composer {
    /// A run of `template` with `settings`, not begun.
    pub fn new(template: Template, settings: TemplateSettings) -> Composer {
        Composer {
            template,
            settings,
            phase: Phase::NotBegun,
            running: BTreeMap::new(),
            budget: 0,
            launched: 0,
            deadline: 0,
            next_launch: None,
            serial_waiting: None,
            anytime_left: 0,
            anytime_next: None,
            drivers: Vec::new(),
            completed: false,
            checks: Vec::new(),
            verdict: None,
        }
    }

    /// The template.
    pub fn template(&self) -> &Template {
        &self.template
    }

    /// Its part of the report of the run on node `node`.
    pub fn report(&self, node: &str) -> TemplateReport {
        TemplateReport {
            node: node.to_string(),
            dir: self.template.dir.clone(),
            commands: self.template.commands.iter().map(|c| c.name.clone()).collect(),
            began: self.begun(),
            verdict: self.verdict.clone(),
        }
    }

    /// True once it has begun.
    pub fn begun(&self) -> bool {
        self.phase != Phase::NotBegun
    }

    /// How the run of the template ended, once it has.
    pub fn verdict(&self) -> Option<&Verdict> {
        self.verdict.as_ref()
    }

    /// When it next wants to act by itself ([`Composer::wake`]), if ever.
    pub fn wake_at(&self) -> Option<u64> {
        match self.phase {
            Phase::Drive => [self.next_launch, self.anytime_next, Some(self.deadline)].into_iter().flatten().min(),
            Phase::Quiet { until } => Some(until),
            _ => None,
        }
    }

    /// Begins the run at virtual time `now` (ns).
    pub fn begin(&mut self, now: u64, host: &mut dyn Host) {
        if self.begun() {
            return;
        }
        self.phase = Phase::First(0);
        self.next_first(now, host);
    }

    /// Process `pid` ended with `status` (a shell's `$?`) at `now`.
    pub fn ended(&mut self, pid: u64, status: i32, now: u64, host: &mut dyn Host) {
        let Some((cmd, role)) = self.running.remove(&pid) else { return };
        let name = self.template.commands[cmd].name.clone();
        host.say(&format!("{name} (pid {pid}) exited with {status}"));
        if self.verdict.is_some() {
            return;
        }
        match role {
            Role::First if status != 0 => self.stop(Verdict::Stopped(format!("{name} exited with {status}")), host),
            Role::First => {
                if let Phase::First(k) = self.phase {
                    self.phase = Phase::First(k + 1);
                }
                self.next_first(now, host);
            }
            Role::Driver => {
                if self.phase == Phase::Drive {
                    self.drive_progress(now, host);
                }
            }
            Role::Anytime => {
                if self.phase == Phase::Drive {
                    self.drive_end_if_done(now, host);
                }
            }
            Role::Check if status != 0 => self.stop(Verdict::Failed(format!("{name} exited with {status}")), host),
            Role::Check => {
                if let Phase::Check(k) = self.phase {
                    self.phase = Phase::Check(k + 1);
                }
                self.next_check(host);
            }
        }
    }

    /// Acts on what is due at `now` (see [`Composer::wake_at`]).
    pub fn wake(&mut self, now: u64, host: &mut dyn Host) {
        match self.phase {
            Phase::Drive => {
                if now >= self.deadline {
                    host.say(&format!("drivers stopped at drive_ms ({} ms)", self.settings.drive_ms));
                    self.end_drive(now, false, host);
                    return;
                }
                if self.next_launch.is_some_and(|t| t <= now) {
                    self.next_launch = None;
                    self.launch(now, host);
                }
                if self.anytime_next.is_some_and(|t| t <= now) {
                    self.anytime_next = None;
                    self.anytime(now, host);
                }
            }
            Phase::Quiet { until } if now >= until => {
                self.phase = Phase::Check(0);
                let mut checks = self.template.of(&[Prefix::Eventually]);
                if self.completed {
                    checks.extend(self.template.of(&[Prefix::Finally]));
                }
                self.checks = checks;
                self.next_check(host);
            }
            _ => {}
        }
    }

    fn start(&mut self, cmd: usize, role: Role, host: &mut dyn Host) -> bool {
        let path = self.template.path(cmd);
        match host.start(&path) {
            Ok(pid) => {
                host.say(&format!("started {} (pid {pid})", self.template.commands[cmd].name));
                self.running.insert(pid, (cmd, role));
                true
            }
            Err(why) => {
                self.stop(Verdict::Stopped(format!("{path} could not start: {why}")), host);
                false
            }
        }
    }

    fn stop(&mut self, verdict: Verdict, host: &mut dyn Host) {
        match &verdict {
            Verdict::Passed => host.say("template passed"),
            Verdict::Failed(w) => host.say(&format!("template failed: {w}")),
            Verdict::Stopped(w) => host.say(&format!("template stopped: {w}")),
        }
        for (&pid, _) in self.running.iter() {
            host.kill(pid);
        }
        self.phase = Phase::Done;
        self.verdict = Some(verdict);
    }

    fn gap(&self, now: u64, host: &mut dyn Host) -> u64 {
        let [a, b] = self.settings.gap_ms;
        let k = if b > a { host.choose(DecisionPoint::TemplateGap, (b - a).min(100_000) + 1) } else { 0 };
        now + (a + k).saturating_mul(1_000_000)
    }

    fn next_first(&mut self, now: u64, host: &mut dyn Host) {
        let Phase::First(k) = self.phase else { return };
        let firsts = self.template.of(&[Prefix::First]);
        match firsts.get(k) {
            Some(&c) => {
                self.start(c, Role::First, host);
            }
            None => self.begin_drive(now, host),
        }
    }

    fn begin_drive(&mut self, now: u64, host: &mut dyn Host) {
        self.phase = Phase::Drive;
        self.deadline = now + self.settings.drive_ms.saturating_mul(1_000_000);
        let singles = self.template.of(&[Prefix::SingletonDriver]);
        let mut drivers = self.template.of(&[Prefix::ParallelDriver, Prefix::SerialDriver]);
        let anytime = self.template.of(&[Prefix::Anytime]);
        let only_anytime = drivers.is_empty() && singles.is_empty();
        if only_anytime {
            drivers = anytime.clone();
        } else if !anytime.is_empty() {
            self.anytime_left = self.settings.max_drivers;
            self.anytime_next = Some(self.gap(now, host));
        }
        let singleton =
            !singles.is_empty() && (drivers.is_empty() || host.choose(DecisionPoint::TemplateSingleton, 2) == 1);
        if singleton {
            let k = host.choose(DecisionPoint::TemplateCommand, singles.len() as u64) as usize;
            self.budget = 1;
            self.launched = 1;
            self.start(singles[k], Role::Driver, host);
            return;
        }
        self.drivers = drivers;
        self.budget = 1 + host.choose(DecisionPoint::TemplateDrivers, self.settings.max_drivers);
        self.launch(now, host);
    }

    fn drivers_running(&self) -> usize {
        self.running.values().filter(|(_, r)| *r == Role::Driver).count()
    }

    /// Makes the next driver start, unless a serial driver waits or runs.
    fn launch(&mut self, now: u64, host: &mut dyn Host) {
        if self.serial_waiting.is_some() || self.launched >= self.budget {
            return;
        }
        let k = host.choose(DecisionPoint::TemplateCommand, self.drivers.len() as u64) as usize;
        let c = self.drivers[k];
        self.launched += 1;
        if self.template.commands[c].prefix == Prefix::SerialDriver {
            if self.drivers_running() == 0 {
                self.start_serial(c, host);
            } else {
                self.serial_waiting = Some(c);
            }
            return;
        }
        if self.start(c, Role::Driver, host) && self.launched < self.budget {
            self.next_launch = Some(self.gap(now, host));
        }
    }

    fn start_serial(&mut self, c: usize, host: &mut dyn Host) {
        self.serial_waiting = None;
        self.start(c, Role::Driver, host);
    }

    fn serial_running(&self) -> bool {
        self.running
            .values()
            .any(|(c, r)| *r == Role::Driver && self.template.commands[*c].prefix == Prefix::SerialDriver)
    }

    fn drive_progress(&mut self, now: u64, host: &mut dyn Host) {
        if let Some(c) = self.serial_waiting {
            if self.drivers_running() == 0 {
                self.start_serial(c, host);
                if self.verdict.is_some() {
                    return;
                }
            }
        } else if !self.serial_running() && self.next_launch.is_none() && self.launched < self.budget {
            self.next_launch = Some(self.gap(now, host));
        }
        self.drive_end_if_done(now, host);
    }

    fn drive_end_if_done(&mut self, now: u64, host: &mut dyn Host) {
        let drivers_done = self.launched >= self.budget && self.serial_waiting.is_none() && self.drivers_running() == 0;
        if !drivers_done {
            return;
        }
        // No new `anytime_` command once the drivers are done; those running may finish.
        self.anytime_left = 0;
        self.anytime_next = None;
        if self.running.is_empty() {
            host.say("drivers completed");
            self.end_drive(now, true, host);
        }
    }

    fn anytime(&mut self, now: u64, host: &mut dyn Host) {
        if self.anytime_left == 0 {
            return;
        }
        self.anytime_left -= 1;
        let anytime = self.template.of(&[Prefix::Anytime]);
        let k = host.choose(DecisionPoint::TemplateCommand, anytime.len() as u64) as usize;
        if self.start(anytime[k], Role::Anytime, host) && self.anytime_left > 0 {
            self.anytime_next = Some(self.gap(now, host));
        }
    }

    fn end_drive(&mut self, now: u64, completed: bool, host: &mut dyn Host) {
        for (&pid, (c, _)) in &self.running {
            host.say(&format!("killing {} (pid {pid})", self.template.commands[*c].name));
            host.kill(pid);
        }
        self.completed = completed;
        self.next_launch = None;
        self.anytime_next = None;
        self.serial_waiting = None;
        host.quiet();
        host.say(&format!("quiet period of {} ms", self.settings.quiet_ms));
        self.phase = Phase::Quiet { until: now + self.settings.quiet_ms.saturating_mul(1_000_000) };
    }

    fn next_check(&mut self, host: &mut dyn Host) {
        let Phase::Check(k) = self.phase else { return };
        match self.checks.get(k) {
            Some(&c) => {
                self.start(c, Role::Check, host);
            }
            None => self.stop(Verdict::Passed, host),
        }
    }
}
