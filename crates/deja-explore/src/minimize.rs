//! Delta debugging (ddmin) over a bug's input: the smallest set of decision overrides and fault
//! switches that still fails with the same signature.

use crate::input::{run_fresh_under, BugFile, Input, Target};
use crate::ExploreError;
use deja_vmm::Settings;
use snafu::ensure;

/// One removable element of an input.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Element {
    Override(u64, u64),
    Crash(u64),
    CrashBefore(u64),
    CrashAtExit,
    /// The crash state is named exactly (without it, decisions choose).
    State,
    /// The named crash state keeps pending operation `p`.
    StateKeeps(u32),
    /// The named crash state cuts pending write `p` after `k` sectors.
    StateTears(u32, u64),
    Error(deja_kernel::ErrorRule),
    CrashAt(deja_kernel::OpCrash),
    Kill(deja_kernel::ProcessKill),
    Torn,
    Reordered,
    EioWrite(u32),
    EioFsync(u32),
    Enospc(u32),
    Reseed(u64),
}

impl Element {
    fn describe(&self) -> String {
        match self {
            Element::Override(i, c) => format!("decision {i} = {c}"),
            Element::Crash(k) => format!("crash after durable write {k}"),
            Element::CrashBefore(k) => format!("crash before durable write {k}"),
            Element::CrashAtExit => "crash at exit".into(),
            Element::State => "a named crash state".into(),
            Element::StateKeeps(p) => format!("the crash keeps pending operation {}", p + 1),
            Element::StateTears(p, k) => format!("the crash cuts pending operation {} after {k} sectors", p + 1),
            Element::Error(r) => r.describe(),
            Element::CrashAt(c) => c.describe(),
            Element::Kill(k) => k.point(),
            Element::Torn => "torn writes".into(),
            Element::Reordered => "reordered writes".into(),
            Element::EioWrite(p) => format!("EIO on write ({p} ppm)"),
            Element::EioFsync(p) => format!("EIO on fsync ({p} ppm)"),
            Element::Enospc(p) => format!("ENOSPC on write ({p} ppm)"),
            Element::Reseed(s) => format!("decisions drawn from seed {s}"),
        }
    }
}

fn elements(input: &Input) -> Vec<Element> {
    let f = &input.faults;
    let mut v: Vec<Element> = input.overrides.iter().map(|(i, c)| Element::Override(*i, *c)).collect();
    if let Some(k) = f.crash_after_durable_write {
        v.push(Element::Crash(k));
    }
    if let Some(k) = f.crash_before_durable_write {
        v.push(Element::CrashBefore(k));
    }
    if f.crash_at_exit {
        v.push(Element::CrashAtExit);
    }
    if let Some(s) = &f.crash_state {
        v.push(Element::State);
        v.extend(s.kept.iter().map(|p| Element::StateKeeps(*p)));
        v.extend(s.torn.map(|(p, k)| Element::StateTears(p, k)));
    }
    v.extend(f.errors.iter().cloned().map(Element::Error));
    v.extend(f.crash_at.iter().cloned().map(Element::CrashAt));
    v.extend(f.kill_process.iter().cloned().map(Element::Kill));
    if f.torn_writes {
        v.push(Element::Torn);
    }
    if f.reordered_writes {
        v.push(Element::Reordered);
    }
    if f.eio_on_write_ppm > 0 {
        v.push(Element::EioWrite(f.eio_on_write_ppm));
    }
    if f.eio_on_fsync_ppm > 0 {
        v.push(Element::EioFsync(f.eio_on_fsync_ppm));
    }
    if f.enospc_on_write_ppm > 0 {
        v.push(Element::Enospc(f.enospc_on_write_ppm));
    }
    if let Some(s) = input.reseed {
        v.push(Element::Reseed(s));
    }
    v
}

fn build(elements: &[Element]) -> Input {
    let mut input = Input::default();
    // Positions of a named crash state count only when the state itself is kept.
    let mut state = deja_kernel::CrashState::none();
    for e in elements {
        match e {
            Element::Override(i, c) => {
                input.overrides.insert(*i, *c);
            }
            Element::Crash(k) => input.faults.crash_after_durable_write = Some(*k),
            Element::CrashBefore(k) => input.faults.crash_before_durable_write = Some(*k),
            Element::CrashAtExit => input.faults.crash_at_exit = true,
            Element::State => input.faults.crash_state = Some(deja_kernel::CrashState::none()),
            Element::StateKeeps(p) => state.kept.push(*p),
            Element::StateTears(p, k) => state.torn = Some((*p, *k)),
            Element::Error(r) => input.faults.errors.push(r.clone()),
            Element::CrashAt(c) => input.faults.crash_at.push(c.clone()),
            Element::Kill(k) => input.faults.kill_process.push(k.clone()),
            Element::Torn => input.faults.torn_writes = true,
            Element::Reordered => input.faults.reordered_writes = true,
            Element::EioWrite(p) => input.faults.eio_on_write_ppm = *p,
            Element::EioFsync(p) => input.faults.eio_on_fsync_ppm = *p,
            Element::Enospc(p) => input.faults.enospc_on_write_ppm = *p,
            Element::Reseed(s) => input.reseed = Some(*s),
        }
    }
    if input.faults.crash_state.is_some() {
        state.kept.sort_unstable();
        input.faults.crash_state = Some(state);
    }
    input
}

/// The result of a minimization.
#[derive(Debug, Clone)]
pub struct Minimized {
    /// The minimized bug (already verified by a replay).
    pub bug: BugFile,
    /// Runs it took.
    pub tests: u64,
}

/// Delta debugging (ddmin): a 1-minimal subset of `all` for which `fails` still holds
/// (`fails(all)` must hold). Tries complements of ever smaller chunks.
pub(crate) fn ddmin<T: Clone, E>(all: &[T], fails: &mut dyn FnMut(&[T]) -> Result<bool, E>) -> Result<Vec<T>, E> {
    let mut current = all.to_vec();
    let mut n = 2usize;
    while current.len() >= 2 {
        let chunk = current.len().div_ceil(n);
        let mut reduced = false;
        for start in (0..current.len()).step_by(chunk) {
            let complement: Vec<T> = current
                .iter()
                .enumerate()
                .filter(|(i, _)| *i < start || *i >= start + chunk)
                .map(|(_, e)| e.clone())
                .collect();
            if fails(&complement)? {
                current = complement;
                n = (n - 1).max(2);
                reduced = true;
                break;
            }
        }
        if !reduced {
            if n >= current.len() {
                break;
            }
            n = (2 * n).min(current.len());
        }
    }
    if current.len() == 1 && fails(&[])? {
        current.clear();
    }
    Ok(current)
}

/// Minimizes `bug` with ddmin; every candidate is replayed from scratch under `settings` and
/// kept only if it fails with the same signature. The result is replayed once more to verify
/// it.
pub fn minimize_under(
    bug: &BugFile,
    target: &Target,
    settings: &Settings,
    new_file: &str,
) -> Result<Minimized, ExploreError> {
    let mut tests = 0u64;
    // Where storage faults may strike, the crash model and the fail-stop rule are settings of
    // the run, not elements.
    let build = |els: &[Element]| {
        let mut input = build(els);
        input.faults.fault_paths = bug.input.faults.fault_paths.clone();
        input.faults.take_settings(&bug.input.faults);
        input
    };
    let mut fails = |els: &[Element]| -> Result<bool, ExploreError> {
        tests += 1;
        let out = run_fresh_under(target, settings, bug.fork_at_syscall, &build(els), &mut |_, _| {})?;
        Ok(out.failure.as_ref().is_some_and(|f| f.is_the_failure(&bug.signature)))
    };
    let all = elements(&bug.input);
    ensure!(fails(&all)?, crate::DoesNotReproduceSnafu { bug: &bug.id });
    let current = ddmin(&all, &mut fails)?;
    let input = build(&current);
    let out = run_fresh_under(target, settings, bug.fork_at_syscall, &input, &mut |_, _| {})?;
    tests += 1;
    ensure!(
        out.failure.as_ref().is_some_and(|f| f.is_the_failure(&bug.signature)),
        crate::MinimizedDoesNotFailSnafu { what: "input" }
    );
    let removed: Vec<String> = all.iter().filter(|e| !current.contains(e)).map(Element::describe).collect();
    let mut min = BugFile::new(target, settings, bug.fork_at_syscall, &input, &out, bug.found_at_round, new_file);
    min.minimized_from = Some(crate::replayed_file(&bug.reproduce).to_string());
    min.removed = removed;
    Ok(Minimized { bug: min, tests })
}

#[cfg(test)]
mod tests {
    use super::{build, ddmin, elements};
    use std::convert::Infallible;

    #[test]
    fn every_fault_of_an_input_is_an_element_and_builds_back() {
        use deja_kernel::{CrashState, ErrorRule, FaultConfig, ProcessKill, When};
        let input = crate::Input {
            overrides: [(3, 1)].into(),
            reseed: Some(9),
            faults: FaultConfig {
                crash_before_durable_write: Some(4),
                crash_state: Some(CrashState { kept: vec![0, 2], torn: Some((1, 3)) }),
                errors: vec![ErrorRule::at(deja_kernel::IoOp::Write, "/db/journal", 2, deja_kernel::IoErrno::Eio)],
                kill_process: vec![ProcessKill { name: "worker".into(), when: When::After, nth: 2 }],
                torn_writes: true,
                eio_on_fsync_ppm: 10,
                ..FaultConfig::default()
            },
            ..crate::Input::default()
        };
        assert_eq!(build(&elements(&input)), input, "nothing an input places is lost to minimization");
    }

    /// ddmin over `n` elements where the failure needs every element of `needed`.
    fn run(n: usize, needed: &[usize]) -> (Vec<usize>, u64) {
        let all: Vec<usize> = (0..n).collect();
        let mut tests = 0;
        let mut fails = |s: &[usize]| -> Result<bool, Infallible> {
            tests += 1;
            Ok(needed.iter().all(|x| s.contains(x)))
        };
        let Ok(kept) = ddmin(&all, &mut fails);
        (kept, tests)
    }

    #[test]
    fn it_keeps_exactly_the_elements_a_conjunction_needs() {
        // Every needed set of up to three elements among up to 24, at a stride of positions.
        for n in 1..=24 {
            for a in 0..n {
                for needed in [vec![a], vec![a, (a * 7 + 3) % n], vec![a, (a + n / 2) % n, (a * 5 + 1) % n]] {
                    let mut want = needed.clone();
                    want.sort();
                    want.dedup();
                    let (kept, _) = run(n, &want);
                    assert_eq!(kept, want, "n {n}, needed {want:?}");
                }
            }
        }
    }

    #[test]
    fn a_failure_that_needs_nothing_minimizes_to_nothing() {
        assert_eq!(run(10, &[]).0, Vec::<usize>::new());
        assert_eq!(run(1, &[]).0, Vec::<usize>::new());
        assert_eq!(run(0, &[]).0, Vec::<usize>::new());
    }

    #[test]
    fn the_result_is_one_minimal_and_the_tests_stay_few() {
        // A failure that needs any two of {3, 9, 14} (not a conjunction): the result fails and
        // removing any one element makes it pass.
        let fails = |s: &[usize]| [3, 9, 14].iter().filter(|x| s.contains(x)).count() >= 2;
        let all: Vec<usize> = (0..64).collect();
        let mut tests = 0u64;
        let Ok(kept) = ddmin(&all, &mut |s: &[usize]| -> Result<bool, Infallible> {
            tests += 1;
            Ok(fails(s))
        });
        assert!(fails(&kept));
        for i in 0..kept.len() {
            let mut fewer = kept.clone();
            fewer.remove(i);
            assert!(!fails(&fewer), "{kept:?} without {} still fails", kept[i]);
        }
        assert!(tests < 200, "{tests} tests for 64 elements");
        let (_, one) = run(1024, &[700]);
        assert!(one < 80, "one element of 1,024 in {one} tests");
    }

    #[test]
    fn an_error_stops_the_search_and_is_returned() {
        let all: Vec<u8> = (0..16).collect();
        let mut calls = 0;
        let r = ddmin(&all, &mut |_s: &[u8]| -> Result<bool, String> {
            calls += 1;
            if calls == 3 {
                Err("the replay failed".into())
            } else {
                Ok(false)
            }
        });
        assert_eq!(r, Err("the replay failed".to_string()));
        assert_eq!(calls, 3);
    }
}
