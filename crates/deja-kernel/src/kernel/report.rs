//! What the shell and the tools read from a kernel: registers and counts, the disk and what a
//! crash leaves of it (images, crash states), faults and decisions, and the final report.

use super::*;
use crate::DecisionPoint;
use serde::{Deserialize, Serialize};

impl Kernel {
    /// The FS base the program set with `arch_prctl(ARCH_SET_FS)`; the shell loads it into
    /// the vCPU whenever it changes.
    pub fn fs_base(&self) -> u64 {
        self.process.fs_base
    }

    /// The GS base the program set with `arch_prctl(ARCH_SET_GS)`.
    pub fn gs_base(&self) -> u64 {
        self.process.gs_base
    }

    /// Output the program wrote to stdout/stderr since the last call, in order.
    pub fn take_output(&mut self) -> Vec<(Stream, Vec<u8>)> {
        core::mem::take(&mut self.record.output)
    }

    /// Number of syscalls served so far.
    pub fn syscall_count(&self) -> u64 {
        self.record.tracer.syscalls()
    }

    /// The current virtual time in nanoseconds since boot.
    pub fn virtual_time_ns(&self) -> u64 {
        self.sched.clock.now_ns()
    }

    /// The entry state [`Kernel::load`] returned.
    pub fn entry(&self) -> Entry {
        self.process.entry
    }

    /// How the program ended, once a syscall or exception ended it.
    pub fn exit_status(&self) -> Option<&ExitStatus> {
        self.process.exit.as_ref()
    }

    /// True if the image's `PT_GNU_STACK` asked for an executable stack (noted only: the
    /// stack is always mapped read-write, not executable).
    pub fn wants_exec_stack(&self) -> bool {
        self.process.exec_stack
    }

    /// Number of bytes taken from the seeded random stream so far (`AT_RANDOM` included).
    pub fn random_bytes_used(&self) -> u64 {
        self.rng.consumed()
    }

    /// The current program break.
    pub fn brk(&self) -> u64 {
        self.process.brk_cur
    }

    /// `/proc/self/maps` as the guest would read it now.
    pub fn proc_maps(&self) -> String {
        self.process.mappings.maps(self.files.fs.exe_path())
    }

    /// Durable writes made so far (see [`crate::fs`]).
    pub fn durable_writes(&self) -> u64 {
        self.faults.durable_writes
    }

    /// The durable state after a crash now: the durable layer plus the pending operations the
    /// crash keeps (see [`crate::fs`]): exactly those of the configured
    /// [`CrashState`](crate::CrashState), or those decisions pick as `torn_writes` and
    /// `reordered_writes` allow. Each call takes fresh decisions (recorded in
    /// [`RunReport::decisions`]) and adds its records to the ledger: one `reordered_writes`
    /// record (what was kept), a `torn_write` record when a write was cut, and `lost_unsynced`
    /// per path whose image differs from the volatile view.
    pub fn crash_image(&mut self) -> Disk {
        let ops = self.files.fs.pending_ops();
        let sel = match (self.faults.config.crash_state.clone(), self.faults.crash_keep.clone()) {
            // A fail-stop's restart: the machine did not go down.
            _ if self.faults.fail_stopped => selection_of(&CrashState::all(ops.len()), &ops),
            (Some(state), _) => selection_of(&state, &ops),
            (None, Some(keep)) => {
                let names: Vec<String> = ops.iter().map(|o| o.what.clone()).collect();
                selection_of(&keep.state_over(&names), &ops)
            }
            (None, None) => self.decide_selection(&ops),
        };
        let model = self.faults.config.crash_model;
        let sel = if self.faults.fail_stopped { sel } else { model.project(&ops, &sel) };
        let image = self.files.fs.image_of(&ops, &sel);
        let state = state_of(&sel);
        let at = self.record.tracer.syscalls();
        let point = format!("crash image {}", self.crash_point_words());
        let changed = image != self.files.fs.durable_disk();
        let chosen = !self.faults.fail_stopped
            && (self.faults.config.crash_state.is_some()
                || self.faults.crash_keep.is_some()
                || self.faults.config.torn_writes
                || self.faults.config.reordered_writes);
        if chosen && !ops.is_empty() {
            self.faults.ledger.push(FaultRecord {
                kind: FaultKind::ReorderedWrites,
                point: format!("{point}: {}", state.describe(ops.len())),
                syscall_index: at,
                path: None,
                selected: !state.kept.is_empty() || state.torn.is_some(),
                applied: changed,
                observed: false,
            });
        }
        if let Some((i, k)) = sel.torn {
            self.faults.ledger.push(FaultRecord {
                kind: FaultKind::TornWrite,
                point: format!("{point}: {} cut after {k} sectors", ops[i].what),
                syscall_index: at,
                path: None,
                selected: true,
                applied: changed,
                observed: false,
            });
        }
        for path in crate::fs::diff_paths(&self.files.fs.volatile_disk(), &image) {
            self.faults.ledger.push(FaultRecord {
                kind: FaultKind::LostUnsynced,
                point: format!("{point}: {path}"),
                syscall_index: at,
                path: Some(path),
                selected: true,
                applied: true,
                observed: false,
            });
        }
        self.faults.last_crash_state = Some(crate::faults::CrashAt {
            state,
            pending: ops.iter().map(|o| o.what.clone()).collect(),
            models: crate::fs::CrashModel::allowing(&ops, &sel),
        });
        image
    }

    /// Where the configured crash happened, in words: `after durable write 3`, `before durable
    /// write 4`, `at exit (status 0)`.
    pub fn crash_point_words(&self) -> String {
        if self.faults.crash_point.is_empty() {
            format!("after durable write {}", self.faults.durable_writes)
        } else {
            self.faults.crash_point.clone()
        }
    }

    /// The crash placed by meaning ([`crate::OpCrash`]) that struck in this life, if one did.
    pub fn crash_struck(&self) -> Option<&crate::OpCrash> {
        self.faults.crash_struck.as_ref()
    }

    /// Decides which pending operations a crash keeps, as the fault modes allow:
    /// - neither mode: none;
    /// - `torn_writes` alone: a prefix in program order (one decision), and the operation after
    ///   it, when it is a write of several sectors, may be cut (one decision);
    /// - `reordered_writes`: each operation kept or lost (one decision each), and with
    ///   `torn_writes` one of the kept writes of several sectors may be cut (two decisions).
    fn decide_selection(&mut self, ops: &[crate::fs::PendingOp]) -> crate::fs::Selection {
        let (torn, reorder) = (self.faults.config.torn_writes, self.faults.config.reordered_writes);
        let n = ops.len();
        let mut sel = crate::fs::Selection { kept: vec![false; n], torn: None };
        if n == 0 || !(torn || reorder) {
            return sel;
        }
        if reorder {
            for (i, op) in ops.iter().enumerate() {
                sel.kept[i] = self.faults.decide(DecisionPoint::CrashKeep { what: op.what.clone() }, 2) == 1;
            }
            if torn {
                let cuttable: Vec<usize> =
                    (0..n).filter(|i| sel.kept[*i] && ops[*i].sectors.is_some_and(|s| s > 1)).collect();
                if !cuttable.is_empty() {
                    let c = self.faults.decide(DecisionPoint::CrashCutOne, cuttable.len() as u64 + 1);
                    if c > 0 {
                        let i = cuttable[c as usize - 1];
                        let s = ops[i].sectors.unwrap_or(1);
                        let point = DecisionPoint::CrashSectorsKept { what: ops[i].what.clone() };
                        let k = 1 + self.faults.decide(point, s - 1);
                        sel.kept[i] = false;
                        sel.torn = Some((i, k));
                    }
                }
            }
            return sel;
        }
        let p = self.faults.decide(DecisionPoint::CrashPrefix { pending: n as u64 }, n as u64 + 1) as usize;
        for k in sel.kept.iter_mut().take(p) {
            *k = true;
        }
        if let Some(s) = ops.get(p).and_then(|o| o.sectors).filter(|s| *s > 1) {
            let k = self.faults.decide(DecisionPoint::CrashSectorsReached { what: ops[p].what.clone() }, s);
            if k > 0 {
                sel.torn = Some((p, k));
            }
        }
        sel
    }

    /// The BLAKE3 of the disk a crash now with exactly `state` leaves (no decision, no record).
    pub fn fs_image_digest(&self, state: &CrashState) -> String {
        let ops = self.files.fs.pending_ops();
        self.files.fs.image_of(&ops, &selection_of(state, &ops)).digest()
    }

    /// The crash models that allow a crash now with exactly `state`, weakest first.
    pub fn models_allowing(&self, state: &CrashState) -> Vec<crate::fs::CrashModel> {
        let ops = self.files.fs.pending_ops();
        crate::fs::CrashModel::allowing(&ops, &selection_of(state, &ops))
    }

    /// The operations pending now, in program order (what a crash now may keep).
    pub fn pending_operations(&self) -> Vec<String> {
        self.files.fs.pending_ops().into_iter().map(|o| o.what).collect()
    }

    /// The distinct crash states of a crash now, in the order a sweep tries them, at most
    /// `budget`: everything persisted, nothing persisted, each pending operation dropped
    /// alone, each prefix, the torn variants of the last write, then random subsets (drawn
    /// from `seed`). States whose disk image another state already gives are skipped, so every
    /// state returned costs one restart that no other one could stand for.
    pub fn crash_states(&self, budget: usize, seed: u64) -> CrashStates {
        let ops = self.files.fs.pending_ops();
        let n = ops.len();
        let mut candidates: Vec<CrashState> = vec![CrashState::all(n), CrashState::none()];
        for i in 0..n as u32 {
            candidates.push(CrashState { kept: (0..n as u32).filter(|j| *j != i).collect(), torn: None });
        }
        for p in 1..n as u32 {
            candidates.push(CrashState { kept: (0..p).collect(), torn: None });
        }
        if let Some(last) = (0..n).rev().find(|i| ops[*i].sectors.is_some_and(|s| s > 1)) {
            let s = ops[last].sectors.unwrap_or(1);
            let steps = (s - 1).min(8);
            for j in 1..=steps {
                let k = (j * (s - 1)).div_ceil(steps).max(1);
                candidates.push(CrashState { kept: (0..last as u32).collect(), torn: Some((last as u32, k)) });
            }
        }
        let mut rng = crate::decisions::rng::RandomStream::with_context("deja 2026 crash-state sweep", seed);
        let mut word = || {
            let mut b = [0u8; 8];
            rng.fill(&mut b);
            u64::from_le_bytes(b)
        };
        let random_tries = if n > 0 { budget.saturating_mul(4) } else { 0 };
        for _ in 0..random_tries {
            let kept: Vec<u32> = (0..n as u32).filter(|_| word() & 1 == 1).collect();
            candidates.push(CrashState { kept, torn: None });
        }
        let model = self.faults.config.crash_model;
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        let mut states = Vec::new();
        let mut labels: Vec<Vec<crate::fs::CrashModel>> = Vec::new();
        let mut tried = 0u64;
        for c in candidates {
            tried += 1;
            let sel = model.project(&ops, &selection_of(&c, &ops));
            let allowing = crate::fs::CrashModel::allowing(&ops, &sel);
            let digest = self.files.fs.image_of(&ops, &sel).digest();
            match seen.get(&digest) {
                // The same image under another state: it is allowed by that state's models too.
                Some(&at) => {
                    labels[at].extend(allowing);
                    labels[at].sort();
                    labels[at].dedup();
                }
                None if states.len() < budget => {
                    seen.insert(digest.clone(), states.len());
                    states.push((state_of(&sel), digest));
                    labels.push(allowing);
                }
                None => {}
            }
        }
        CrashStates { pending: ops.into_iter().map(|o| o.what).collect(), tried, states, labels, model }
    }

    /// The volatile (current) file system as a [`Disk`] (for `--fs-export`).
    pub fn disk(&self) -> Disk {
        self.files.fs.volatile_disk()
    }

    /// Passes the previous incarnation's fault records (its crash-image records) into this
    /// run: their `observed` flips when this program opens, stats, lists or removes the path
    /// they name. They lead [`RunReport::faults`].
    pub fn note_previous_faults(&mut self, records: Vec<FaultRecord>) {
        // A life after a crash: what it does from its start is the fault's aftermath.
        self.faults.faulted |= !records.is_empty();
        self.faults.previous = records;
    }

    /// Steers decisions by their position in the decision log (see [the crate documentation](crate#decisions)): when
    /// decision number `i` (0-based, counting every decision since [`Kernel::load`], those
    /// taken before a fork or snapshot included) is taken and `overrides` holds `c` for `i`,
    /// the choice is `c % options` (`c` itself for a decision with `options == 0`) instead of
    /// the stream's. Replaces the whole set; overrides for decisions already taken have no
    /// effect. The stream advances as if nothing were overridden, so the natural choices of
    /// other decisions do not move. Works after load, on a clone (a forked child) and after
    /// [`Kernel::restore`]; the set is part of the saved state.
    pub fn set_decision_overrides(&mut self, overrides: BTreeMap<u64, u64>) {
        self.faults.log.overrides = overrides;
    }

    /// The decision overrides in force.
    pub fn decision_overrides(&self) -> &BTreeMap<u64, u64> {
        &self.faults.log.overrides
    }

    /// Number of decisions taken so far: the index the next decision gets.
    pub fn decision_count(&self) -> u64 {
        self.faults.log.decisions.len() as u64
    }

    /// The program has called `setup_complete` (in this life).
    pub fn setup_completed(&self) -> bool {
        self.oracle.setup_complete.is_some()
    }

    /// Replaces the fault configuration from now on (e.g. on a forked child). The counters keep
    /// counting from program start: `crash_after_durable_write: Some(k)` fires after the k-th
    /// durable write of the whole run, so a `k` already reached never fires.
    pub fn set_fault_config(&mut self, config: crate::FaultConfig) {
        self.faults.config = config;
    }

    /// The fault ledger so far (previous incarnation's records first).
    pub fn faults(&self) -> Vec<FaultRecord> {
        self.faults.previous.iter().chain(&self.faults.ledger).cloned().collect()
    }

    /// The decision log so far: every decision (faults, SDK `Random`/`Choice`), in order.
    pub fn decisions(&self) -> &[DecisionRecord] {
        &self.faults.log.decisions
    }

    /// Pages committed against the capacity, and the capacity (both in pages).
    pub fn commit(&self) -> (u64, u64) {
        (self.process.mappings.committed(), self.process.mappings.capacity())
    }

    /// Signals that arrived while a handler was installed, by number (handlers are not run).
    pub fn caught_signals(&self) -> &BTreeMap<i32, u64> {
        &self.process.signals.caught
    }

    /// Ends the run: computes the memory digest over `mem` (the current space, then each other
    /// space a live process runs in, by the lowest such pid) and returns the report.
    pub fn finish(&mut self, mem: &dyn Memory, exit: ExitStatus) -> RunReport {
        let trace = self.record.tracer.digest();
        let mut others: Vec<(u64, u64)> = Vec::new();
        for (&pid, p) in &self.procs.table {
            if p.live() && p.space != mem.space() && !others.iter().any(|&(_, s)| s == p.space) {
                others.push((pid, p.space));
            }
        }
        let memory = memory_digest(mem, &others);
        let mut h = blake3::Hasher::new();
        h.update(trace.as_bytes());
        h.update(memory.as_bytes());
        let recording = self.record.tracer.recording();
        let (pages, page_lines) = if recording { crate::record::trace::page_hashes(mem) } else { Default::default() };
        let disk = recording.then(|| self.disk());
        let mut report = RunReport {
            exit,
            syscalls: self.record.tracer.syscalls(),
            syscall_counts: self.record.counts.clone(),
            unsupported: self.record.unsupported.clone(),
            unmodelled: self.record.unmodelled.clone(),
            virtual_time_ns: self.sched.clock.now_ns(),
            trace_digest: trace.to_hex().to_string(),
            memory_digest: memory.to_hex().to_string(),
            digest: h.finalize().to_hex().to_string(),
            entry_hashes: self.record.tracer.entry_hashes().to_vec(),
            trace: self.record.tracer.entries().to_vec(),
            pages,
            page_lines,
            fs_digest: disk.as_ref().map(|d| d.digest()),
            fs_files: disk.as_ref().map(|d| d.entry_hashes()).unwrap_or_default(),
            assertions: Vec::new(),
            setup_complete: None,
            events: Vec::new(),
            events_dropped: 0,
            protocol_errors: 0,
            coverage: self.process.coverage.map(|c| c.summary(mem)),
            durable_writes: self.faults.durable_writes,
            faults: self.faults(),
            decisions: self.faults.log.decisions.clone(),
            io_ops: self
                .faults
                .op_counts
                .iter()
                .filter(|((_, path), _)| self.faults.faultable(path))
                .map(|((op, path), count)| crate::IoCount { op: *op, path: path.clone(), count: *count })
                .collect(),
            process_ops: self.faults.process_ops.iter().map(|(n, c)| (n.clone(), *c)).collect(),
            durable_ops: self.faults.durable_log.clone(),
            stopped_after_fault: self.faults.stopped_after_fault.clone(),
            not_fail_stop: self.faults.not_fail_stop.clone(),
            last_output: self.record.tail.lines(),
            marked_output: self.record.tail.marked(),
            crash_state: self.faults.last_crash_state.clone(),
            failed_syncs: self.faults.failed_syncs.clone(),
            after_fault: self.faults.after_fault.clone(),
            files: self.files.fs.volatile_disk().entries.into_keys().take(256).collect(),
            host_channels: self.process.host.report(),
            vdso_calls: self.process.vdso.map(|v| v.calls),
            not_found: self.lookups.not_found.clone(),
        };
        self.oracle.fill_report(&mut report);
        report
    }

    /// The assertion sites as they stand now (the same list [`RunReport::assertions`] will
    /// hold), sorted by (file, line, id).
    pub fn assertions(&self) -> Vec<AssertionReport> {
        self.oracle.assertions()
    }

    /// True if an assertion has already found a bug in this run.
    pub fn assertion_failed(&self) -> bool {
        self.oracle.bug_found()
    }

    /// The bucketed coverage map read from `mem` now (one byte per edge, AFL buckets), or
    /// `None` when the program has no `__sancov_cntrs` section. Reads only; populates nothing.
    pub fn coverage_map(&self, mem: &dyn Memory) -> Option<Vec<u8>> {
        self.process.coverage.map(|c| c.map(mem))
    }

    /// The buffer the current process's output goes to instead of the node's, if its session
    /// is captured.
    pub(crate) fn capture_of_current(&mut self) -> Option<&mut Vec<u8>> {
        if self.procs.captured.is_empty() {
            return None;
        }
        let sid = self.procs.table.get(&self.procs.current)?.sid;
        self.procs.captured.get_mut(&sid)
    }

    /// Appends output, merging with the previous chunk of the same stream (or to the capture
    /// of the current process's session).
    pub(crate) fn emit(&mut self, stream: Stream, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        if let Some(buf) = self.capture_of_current() {
            buf.extend_from_slice(data);
            return;
        }
        self.record.tail.push(stream, data, self.faults.config.failure_marker.as_deref());
        match self.record.output.last_mut() {
            Some((s, buf)) if *s == stream => buf.extend_from_slice(data),
            _ => self.record.output.push((stream, data.to_vec())),
        }
    }
}

/// A [`CrashState`] as the file system's [`Selection`](crate::fs::Selection) over `ops`
/// (positions past the end are ignored; a torn position must name a write).
fn selection_of(state: &CrashState, ops: &[crate::fs::PendingOp]) -> crate::fs::Selection {
    let mut kept = vec![false; ops.len()];
    for &i in &state.kept {
        if let Some(k) = kept.get_mut(i as usize) {
            *k = true;
        }
    }
    let torn = state.torn.and_then(|(i, k)| {
        let s = ops.get(i as usize)?.sectors?;
        (k > 0 && k < s && !kept[i as usize]).then_some((i as usize, k))
    });
    crate::fs::Selection { kept, torn }
}

/// The [`CrashState`] a selection is.
fn state_of(sel: &crate::fs::Selection) -> CrashState {
    CrashState {
        kept: sel.kept.iter().enumerate().filter(|(_, k)| **k).map(|(i, _)| i as u32).collect(),
        torn: sel.torn.map(|(i, k)| (i as u32, k)),
    }
}

/// The crash states a sweep tries at one crash point (see [`Kernel::crash_states`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CrashStates {
    /// The operations pending at the crash, in program order, in words.
    pub pending: Vec<String>,
    /// Candidate states whose images were computed.
    pub tried: u64,
    /// The distinct states, each with the BLAKE3 of its disk image.
    pub states: Vec<(CrashState, String)>,
    /// For each state, the crash models under which some candidate state leaves its image,
    /// weakest first (see [`crate::fs::CrashModel`]).
    pub labels: Vec<Vec<crate::fs::CrashModel>>,
    /// The model the states were drawn from.
    pub model: crate::fs::CrashModel,
}
