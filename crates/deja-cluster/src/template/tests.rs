use super::*;

/// A fake simulator: processes are pids from 100, decisions come from a script (then 0), and
/// everything the composer does is logged.
#[derive(Default)]
struct Fake {
    next_pid: u64,
    choices: Vec<u64>,
    asked: Vec<(String, u64)>,
    started: Vec<(u64, String)>,
    killed: Vec<u64>,
    quiet: usize,
    said: Vec<String>,
    refuse: Option<String>,
}

impl Host for Fake {
    fn start(&mut self, path: &str) -> Result<u64, String> {
        if self.refuse.as_deref() == Some(path) {
            return Err("ENOEXEC".into());
        }
        self.next_pid += 1;
        let pid = 100 + self.next_pid;
        self.started.push((pid, path.rsplit('/').next().unwrap().to_string()));
        Ok(pid)
    }
    fn kill(&mut self, pid: u64) {
        self.killed.push(pid);
    }
    fn choose(&mut self, what: DecisionPoint, n: u64) -> u64 {
        self.asked.push((what.to_string(), n));
        let c = if self.choices.is_empty() { 0 } else { self.choices.remove(0) };
        assert!(c < n, "{what}: {c} of {n}");
        c
    }
    fn quiet(&mut self) {
        self.quiet += 1;
    }
    fn say(&mut self, line: &str) {
        self.said.push(line.to_string());
    }
}

fn template(names: &[&str]) -> Template {
    let entries: Vec<(String, bool)> = names.iter().map(|n| (n.to_string(), true)).collect();
    Template::new("/opt/antithesis/test/v1/main/", &entries).unwrap()
}

fn settings() -> TemplateSettings {
    TemplateSettings { gap_ms: [10, 10], ..TemplateSettings::new("/opt/antithesis/test/v1/main") }
}

const MS: u64 = 1_000_000;

fn pid_of(f: &Fake, name: &str) -> u64 {
    f.started.iter().rev().find(|s| s.1 == name).unwrap().0
}

#[test]
fn prefixes_and_refusals() {
    assert_eq!(Prefix::of("parallel_driver_write.sh"), Some(Prefix::ParallelDriver));
    assert_eq!(Prefix::of("helper_x"), None);
    assert_eq!(Prefix::of("first_"), None, "a prefix alone names no command");
    let t = template(&["helper_lib.py", "finally_b", "eventually_a", "parallel_driver_w", "README"]);
    let names: Vec<&str> = t.commands.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["eventually_a", "finally_b", "parallel_driver_w"]);
    assert_eq!(t.path(2), "/opt/antithesis/test/v1/main/parallel_driver_w");
    let e = Template::new("/t", &[("first_x".into(), true), ("eventually_y".into(), true)]).unwrap_err();
    assert!(e.contains("no parallel_driver_"), "{e}");
    let e = Template::new("/t", &[("parallel_driver_x".into(), false)]).unwrap_err();
    assert!(e.contains("/t/parallel_driver_x is not an executable file"), "{e}");
    assert!(TemplateSettings { gap_ms: [5, 1], ..settings() }.problem().unwrap().contains("gap_ms"));
    assert!(TemplateSettings::new("rel").problem().unwrap().contains("absolute"));
    assert_eq!(settings().problem(), None);
}

#[test]
fn first_then_parallel_drivers_then_quiet_then_checks_in_order() {
    let t = template(&["first_setup", "parallel_driver_a", "parallel_driver_b", "eventually_e", "finally_f"]);
    let mut c = Composer::new(t, settings());
    // drivers: 1 + 2 = 3 starts; commands b, a, b.
    let mut f = Fake { choices: vec![2, 1, 0, 1], ..Fake::default() };
    c.begin(0, &mut f);
    assert_eq!(f.started, [(101, "first_setup".to_string())]);
    assert_eq!(c.wake_at(), None, "nothing by itself while first_ runs");
    c.ended(101, 0, 5 * MS, &mut f);
    // First driver at once; the next after the 10 ms gap.
    assert_eq!(f.started.last().unwrap().1, "parallel_driver_b");
    assert_eq!(c.wake_at(), Some(15 * MS));
    c.wake(15 * MS, &mut f);
    assert_eq!(f.started.last().unwrap().1, "parallel_driver_a");
    c.wake(25 * MS, &mut f);
    assert_eq!(f.started.len(), 4, "three drivers, overlapping: {:?}", f.started);
    assert_eq!(c.wake_at(), Some(5 * MS + 20_000 * MS), "only the deadline is left");
    for (pid, _) in f.started.clone().into_iter().skip(1) {
        c.ended(pid, 1, 30 * MS, &mut f); // a driver's failure is not the run's
    }
    assert_eq!(f.quiet, 1);
    assert_eq!(c.wake_at(), Some(30 * MS + 2_000 * MS));
    c.wake(30 * MS + 2_000 * MS, &mut f);
    assert_eq!(f.started.last().unwrap().1, "eventually_e");
    c.ended(pid_of(&f, "eventually_e"), 0, 3_000 * MS, &mut f);
    assert_eq!(f.started.last().unwrap().1, "finally_f", "the drivers completed: finally_ runs");
    assert_eq!(c.verdict(), None);
    c.ended(pid_of(&f, "finally_f"), 0, 3_100 * MS, &mut f);
    assert_eq!(c.verdict(), Some(&Verdict::Passed));
    let points: Vec<&str> = f.asked.iter().map(|a| a.0.as_str()).collect();
    assert_eq!(
        points,
        ["template drivers", "template command", "template command", "template command"],
        "a 10..10 ms gap is no decision"
    );
    assert_eq!(f.asked[0].1, 4, "1 to max_drivers starts");
}

#[test]
fn a_failing_check_is_the_failure_and_the_deadline_skips_finally() {
    let t = template(&["parallel_driver_a", "eventually_e", "finally_f"]);
    let mut c = Composer::new(t, settings());
    let mut f = Fake { choices: vec![0, 0], ..Fake::default() };
    c.begin(0, &mut f);
    let driver = pid_of(&f, "parallel_driver_a");
    // The driver never ends: the deadline kills it.
    c.wake(20_000 * MS, &mut f);
    assert_eq!(f.killed, [driver]);
    assert_eq!(f.quiet, 1);
    c.ended(driver, 137, 20_000 * MS, &mut f);
    c.wake(22_000 * MS, &mut f);
    assert_eq!(f.started.last().unwrap().1, "eventually_e");
    c.ended(pid_of(&f, "eventually_e"), 3, 22_500 * MS, &mut f);
    assert_eq!(c.verdict(), Some(&Verdict::Failed("eventually_e exited with 3".into())));
    assert!(!f.started.iter().any(|s| s.1 == "finally_f"), "finally_ needs completed drivers");
    assert!(f.said.iter().any(|l| l == "template failed: eventually_e exited with 3"), "{:?}", f.said);
}

#[test]
fn a_serial_driver_waits_for_the_others_and_runs_alone() {
    let t = template(&["parallel_driver_p", "serial_driver_s", "finally_f"]);
    let mut c = Composer::new(t, settings());
    // 3 starts: p, s, p.
    let mut f = Fake { choices: vec![2, 0, 1, 0], ..Fake::default() };
    c.begin(0, &mut f);
    let p1 = pid_of(&f, "parallel_driver_p");
    c.wake(10 * MS, &mut f);
    assert_eq!(f.started.len(), 1, "the serial driver waits for p: {:?}", f.started);
    assert_eq!(c.wake_at(), Some(20_000 * MS));
    c.ended(p1, 0, 50 * MS, &mut f);
    assert_eq!(f.started.last().unwrap().1, "serial_driver_s");
    assert_eq!(c.wake_at(), Some(20_000 * MS), "nothing starts beside a serial driver");
    c.ended(pid_of(&f, "serial_driver_s"), 0, 60 * MS, &mut f);
    assert_eq!(c.wake_at(), Some(70 * MS));
    c.wake(70 * MS, &mut f);
    assert_eq!(f.started.last().unwrap().1, "parallel_driver_p");
    c.ended(pid_of(&f, "parallel_driver_p"), 0, 80 * MS, &mut f);
    assert_eq!(f.quiet, 1);
    c.wake(2_080 * MS, &mut f);
    c.ended(pid_of(&f, "finally_f"), 0, 2_100 * MS, &mut f);
    assert_eq!(c.verdict(), Some(&Verdict::Passed));
}

#[test]
fn singleton_runs_alone_and_anytime_runs_beside_drivers() {
    let t = template(&["singleton_driver_x", "parallel_driver_p", "anytime_a"]);
    let mut c = Composer::new(t, settings());
    // anytime gap (none: fixed), singleton yes, which singleton.
    let mut f = Fake { choices: vec![1, 0, 0], ..Fake::default() };
    c.begin(0, &mut f);
    assert_eq!(f.started.iter().map(|s| s.1.as_str()).collect::<Vec<_>>(), ["singleton_driver_x"]);
    c.wake(10 * MS, &mut f);
    assert_eq!(f.started.last().unwrap().1, "anytime_a");
    let a = pid_of(&f, "anytime_a");
    c.ended(pid_of(&f, "singleton_driver_x"), 0, 15 * MS, &mut f);
    assert_eq!(f.quiet, 0, "an anytime_ command still runs");
    c.ended(a, 0, 16 * MS, &mut f);
    assert_eq!(f.quiet, 1);
    assert!(!f.started.iter().any(|s| s.1 == "parallel_driver_p"));
    c.wake(2_016 * MS, &mut f);
    assert_eq!(c.verdict(), Some(&Verdict::Passed), "no check: passed");
}

#[test]
fn a_failing_first_or_a_command_that_cannot_start_stops_without_a_verdict_of_failure() {
    let t = template(&["first_a", "parallel_driver_p"]);
    let mut c = Composer::new(t.clone(), settings());
    let mut f = Fake::default();
    c.begin(0, &mut f);
    c.ended(101, 2, 1, &mut f);
    assert_eq!(c.verdict(), Some(&Verdict::Stopped("first_a exited with 2".into())));
    let mut c = Composer::new(t, settings());
    let mut f = Fake { refuse: Some("/opt/antithesis/test/v1/main/parallel_driver_p".into()), ..Fake::default() };
    c.begin(0, &mut f);
    c.ended(101, 0, 1, &mut f);
    let Some(Verdict::Stopped(why)) = c.verdict() else { panic!("{:?}", c.verdict()) };
    assert!(why.contains("parallel_driver_p could not start: ENOEXEC"), "{why}");
}

#[test]
fn only_anytime_commands_are_the_drivers() {
    let t = template(&["anytime_a"]);
    let mut c = Composer::new(t, settings());
    let mut f = Fake { choices: vec![1], ..Fake::default() };
    c.begin(0, &mut f);
    assert_eq!(f.started.len(), 1);
    c.wake(10 * MS, &mut f);
    assert_eq!(f.started.len(), 2, "two starts");
    c.ended(101, 0, 11 * MS, &mut f);
    c.ended(102, 0, 12 * MS, &mut f);
    assert_eq!(f.quiet, 1);
}
