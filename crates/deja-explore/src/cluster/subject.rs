//! The [`Subject`] of a cluster: its workers (a forked cluster each, or none when every round
//! boots afresh), block coverage over the nodes' programs, what a campaign learns from its
//! bootstrap ([`ClusterReference`]), rounds run and confirmed, their facts, and the plans of
//! storage faults and later forks a round is mutated to.

use super::*;

/// How many of each node's last lines of output (on each stream) a round's evidence keeps.
const LAST_LINES: usize = 6;

/// A cluster under exploration.
pub struct ClusterSubject<'a> {
    target: &'a ClusterTarget,
    /// Block coverage: the distinct programs of the nodes without SanitizerCoverage, in one id
    /// space (empty without block coverage).
    programs: Vec<NodeProgram>,
    /// For each node, the index in `programs` of what it runs, if measured.
    node_program: Vec<Option<usize>>,
    /// The blocks the campaign has learned, by id, in the order learned.
    learned: std::sync::Mutex<Vec<u32>>,
    /// How many later forks each worker keeps (0: none).
    late_forks: usize,
    /// Every forked round made to differ from its booted run (test only).
    perturb: bool,
}

/// One program of a cluster's nodes under block coverage: its blocks, their scope and the id
/// of its first block in the campaign's id space.
struct NodeProgram {
    blocks: std::sync::Arc<BlockImage>,
    scope: Vec<String>,
    first: u32,
}

impl<'a> ClusterSubject<'a> {
    /// The subject of `target`; `block_coverage` measures blocks with one-shot breakpoints in
    /// each node whose program has no SanitizerCoverage counters, in the functions `scope`
    /// names or, when it names none, in its own code ([`BlockImage::of_program`]). Nodes
    /// running the same program with the same shared objects share its blocks.
    pub fn new(target: &'a ClusterTarget, block_coverage: bool, scope: &[String]) -> ClusterSubject<'a> {
        let mut programs: Vec<NodeProgram> = Vec::new();
        let mut keys: Vec<blake3::Hash> = Vec::new();
        let mut node_program = Vec::new();
        for n in &target.cfg.nodes {
            let instrumented = deja_kernel::elf_section(&n.image, deja_kernel::SANCOV_SECTION.as_bytes()).is_some();
            if !block_coverage || instrumented {
                node_program.push(None);
                continue;
            }
            let files: Vec<(&str, &[u8])> = n.files.iter().map(|(p, d)| (p.as_str(), d.as_slice())).collect();
            let mut key = blake3::Hasher::new();
            key.update(&n.image);
            key.update(n.exe_path.as_bytes());
            for (path, data) in files.iter().filter(|(_, d)| deja_vmm::coverage::is_code_object(d)) {
                key.update(path.as_bytes());
                key.update(blake3::hash(data).as_bytes());
            }
            let key = key.finalize();
            if let Some(i) = keys.iter().position(|k| *k == key) {
                node_program.push(Some(i));
                continue;
            }
            let (blocks, taken) = BlockImage::of_program(&n.image, &n.exe_path, &files, scope);
            if blocks.is_empty() {
                node_program.push(None);
                continue;
            }
            let first = programs.last().map_or(0, |p| p.first + p.blocks.len() as u32);
            keys.push(key);
            programs.push(NodeProgram { blocks, scope: taken, first });
            node_program.push(Some(programs.len() - 1));
        }
        ClusterSubject {
            target,
            programs,
            node_program,
            learned: std::sync::Mutex::new(Vec::new()),
            late_forks: deja_cluster::LATE_FORKS,
            perturb: false,
        }
    }

    /// With `on`, every forked round differs from its booted run (a test-only switch:
    /// [`deja_cluster::Fork::set_perturb`]).
    pub fn with_perturbed_forks(mut self, on: bool) -> Self {
        self.perturb = on;
        self
    }

    /// Keeps at most `n` later forks in each worker (0: rounds always run from the fork point).
    pub fn with_late_forks(mut self, n: usize) -> Self {
        self.late_forks = n;
        self
    }

    /// How many blocks the campaign's id space holds (0: no block coverage).
    fn blocks_total(&self) -> u64 {
        self.programs.last().map_or(0, |p| u64::from(p.first) + p.blocks.len() as u64)
    }

    /// The blocks to arm in each node, when `r` measures them.
    fn node_blocks(&self, r: &ClusterReference) -> Option<Vec<Option<std::sync::Arc<BlockImage>>>> {
        (r.blocks != 0 && r.blocks == self.blocks_total())
            .then(|| self.node_program.iter().map(|p| p.map(|i| self.programs[i].blocks.clone())).collect())
    }

    /// The campaign's ids of the blocks `hits` of node `node`.
    fn global_ids<'h>(&'h self, node: usize, hits: &'h [BlockHit]) -> impl Iterator<Item = usize> + 'h {
        let first = self.node_program.get(node).copied().flatten().map(|i| self.programs[i].first);
        hits.iter().filter_map(move |h| first.map(|f| (f + h.block) as usize))
    }

    fn config(&self, seed: u64) -> ClusterConfig {
        let mut cfg = self.target.cfg.clone();
        cfg.seed = seed;
        cfg
    }
}

/// What a cluster campaign learned from its bootstrap.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterReference {
    /// The cluster seed of forked rounds.
    pub seed: u64,
    /// Where rounds fork (and take their steering).
    pub steer_at: SteerAt,
    /// Cluster decisions taken before it.
    pub base_decisions: u64,
    /// Its virtual time, ns.
    pub virtual_time_ns: u64,
    /// What each node of the untouched run offers to storage faults (fresh rounds draw from
    /// it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<crate::menu::NodeMenu>,
    /// The blocks of the nodes' programs when the campaign measures block coverage, else 0.
    #[serde(default)]
    pub blocks: u64,
}

/// A worker of a cluster campaign: its fork (none for independent runs), the blocks (by the
/// campaign's ids) its setup reached, which every round it forks reaches too, and how many of
/// the learned blocks it has taken out of it.
pub struct ClusterWorker {
    fork: Option<Fork>,
    setup: Vec<usize>,
    applied: usize,
}

/// What each node of a round offers to storage faults: the durable operations and the file
/// operations of the nodes storage faults may strike, each durable operation with the cluster
/// decision index at its time. A node that [offers](crate::menu::NodeMenu::offers) nothing
/// (it only read files) is left out.
pub fn node_menus(report: &ClusterReport) -> Vec<crate::menu::NodeMenu> {
    let index_at = |t: u64| report.decisions.iter().filter(|d| d.time_ns <= t).count() as u64;
    report
        .nodes
        .iter()
        .filter(|n| n.storage_faults)
        .map(|n| crate::menu::NodeMenu {
            node: n.name.clone(),
            durable: n
                .durable_ops()
                .into_iter()
                .take(crate::menu::MAX_NODE_POINTS)
                .map(|d| crate::menu::DurablePoint {
                    path: d.path,
                    nth: d.nth,
                    at: index_at(d.virtual_time_ns),
                    promotes: d.promotes,
                })
                .collect(),
            io_ops: n.io_ops(),
        })
        .filter(crate::menu::NodeMenu::offers)
        .collect()
}

impl Subject for ClusterSubject<'_> {
    type Input = ClusterInput;
    type Outcome = ClusterOutcome;
    type Worker = ClusterWorker;
    type Reference = ClusterReference;
    const KIND: &'static str = "cluster";

    fn identity(&self) -> Program {
        Program { path: self.target.path.clone(), blake3: self.target.file_blake3.clone() }
    }

    fn input_files(&self) -> Vec<&[u8]> {
        self.target.cfg.nodes.iter().flat_map(|n| n.files.values().map(Vec::as_slice)).collect()
    }

    fn bug_subject(&self) -> String {
        cluster_subject(&self.target.cfg.binary_hashes)
    }

    fn bootstrap(&self, cfg: &CampaignConfig) -> Result<(ClusterReference, Vec<ClusterOutcome>), ExploreError> {
        let mut r = ClusterReference { seed: cfg.seed, ..ClusterReference::default() };
        if cfg.strategy == Strategy::Coverage {
            r.blocks = self.blocks_total();
        }
        // The untouched run: what its nodes offer to storage faults, for fresh rounds. It is not
        // learned (the seed round is the campaign's first). With several workers it runs on a
        // thread of its own beside the fork: the two are independent.
        let untouched = || -> Result<Vec<crate::menu::NodeMenu>, ExploreError> {
            if !cfg.mode.faults() {
                return Ok(Vec::new());
            }
            let input = ClusterInput { seed: cfg.seed, ..ClusterInput::default() };
            Ok(node_menus(&run_cluster_input(self.target, &input, &mut |_, _, _| {})?.report))
        };
        let fork = || -> Result<Option<(u64, u64)>, ExploreError> {
            if cfg.strategy != Strategy::Coverage {
                return Ok(None);
            }
            let fork = Fork::new(self.config(cfg.seed), SteerAt::Setup, &mut |_, _, _| {}).map_err(cluster_err)?;
            Ok(fork.map(|f| (f.base_decisions, f.virtual_time_ns)))
        };
        let (nodes, forked) = if cfg.jobs > 1 {
            std::thread::scope(|s| {
                let beside = s.spawn(untouched);
                let forked = fork();
                let nodes = beside.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
                (nodes, forked)
            })
        } else {
            (untouched(), fork())
        };
        r.nodes = nodes?;
        if let Some((base_decisions, virtual_time_ns)) = forked? {
            r.steer_at = SteerAt::Setup;
            r.base_decisions = base_decisions;
            r.virtual_time_ns = virtual_time_ns;
        }
        Ok((r, Vec::new()))
    }

    fn base_decisions(r: &ClusterReference) -> u64 {
        r.base_decisions
    }

    fn origin(&self, _cfg: &CampaignConfig, r: &ClusterReference) -> ClusterInput {
        ClusterInput { seed: r.seed, steer_at: r.steer_at, ..ClusterInput::default() }
    }

    fn worker(&self, r: &ClusterReference, strategy: Strategy) -> Result<ClusterWorker, ExploreError> {
        if strategy == Strategy::Random {
            return Ok(ClusterWorker { fork: None, setup: Vec::new(), applied: 0 });
        }
        let blocks = self.node_blocks(r).unwrap_or_default();
        let fork =
            Fork::with_blocks(self.config(r.seed), r.steer_at, blocks, &mut |_, _, _| {}).map_err(cluster_err)?;
        match fork {
            Some((mut f, hits)) if f.base_decisions == r.base_decisions && f.virtual_time_ns == r.virtual_time_ns => {
                f.set_late_forks(self.late_forks);
                f.set_perturb(self.perturb);
                let mut setup: Vec<usize> =
                    hits.iter().enumerate().flat_map(|(node, h)| self.global_ids(node, h)).collect();
                setup.sort_unstable();
                setup.dedup();
                Ok(ClusterWorker { fork: Some(f), setup, applied: 0 })
            }
            _ => Err(ExploreError::ClusterNotDeterministic),
        }
    }

    fn run(
        &self,
        worker: &mut ClusterWorker,
        r: &ClusterReference,
        input: &ClusterInput,
    ) -> Result<ClusterOutcome, ExploreError> {
        let measured = self.node_blocks(r).is_some();
        match &mut worker.fork {
            Some(fork) if input.seed == r.seed && input.schedule.is_none() => {
                if measured {
                    // What the campaign learned since this worker's last round, out of every node
                    // running the program it belongs to.
                    let learned: Vec<u32> = match self.learned.lock() {
                        Ok(l) => l[worker.applied..].to_vec(),
                        Err(_) => Vec::new(),
                    };
                    worker.applied += learned.len();
                    for (node, program) in self.node_program.iter().enumerate() {
                        let Some(p) = program.map(|i| &self.programs[i]) else { continue };
                        let ids: Vec<u32> = learned
                            .iter()
                            .filter_map(|&id| id.checked_sub(p.first).filter(|&l| (l as usize) < p.blocks.len()))
                            .collect();
                        fork.disarm_blocks(node, &ids);
                    }
                }
                let report =
                    fork.run_child_at(&input.steering(), input.fork_at, &mut |_, _, _| {}).map_err(cluster_err)?;
                let mut out = outcome(report);
                if measured {
                    let mut map = vec![0u8; self.blocks_total() as usize];
                    let reached = out.report.nodes.iter().enumerate().flat_map(|(i, n)| self.global_ids(i, &n.blocks));
                    for id in worker.setup.iter().copied().chain(reached) {
                        if let Some(b) = map.get_mut(id) {
                            *b = 1;
                        }
                    }
                    out.blocks = map;
                }
                Ok(out)
            }
            _ => run_cluster_input(self.target, input, &mut |_, _, _| {}),
        }
    }

    fn learned_coverage(&self, indices: &[usize]) {
        if !self.programs.is_empty() {
            if let Ok(mut l) = self.learned.lock() {
                l.extend(indices.iter().map(|&i| i as u32));
            }
        }
    }

    fn block_coverage(
        &self,
        r: &ClusterReference,
        first_reached: &BTreeMap<u32, u64>,
    ) -> Option<deja_explore_report::BlockCoverage> {
        self.node_blocks(r)?;
        let parts: Vec<(&BlockImage, u32)> = self.programs.iter().map(|p| (&*p.blocks, p.first)).collect();
        let mut scope: Vec<String> = Vec::new();
        for s in self.programs.iter().flat_map(|p| p.scope.iter()) {
            if !scope.contains(s) {
                scope.push(s.clone());
            }
        }
        Some(crate::blockmap::summarize_all(&parts, first_reached, &scope))
    }

    fn confirm(
        &self,
        _r: &ClusterReference,
        input: &ClusterInput,
        out: &ClusterOutcome,
    ) -> Result<Option<String>, ExploreError> {
        let seen: Vec<u32> = out.report.nodes.iter().flat_map(|n| n.host_cores.iter().copied()).collect();
        let (core, again) =
            deja_vmm::identity::on_another_core(&seen, || run_cluster_input(self.target, input, &mut |_, _, _| {}))
                .map_err(deja_vmm::RunError::from)?;
        let again = again?;
        Ok(if again.report.digest != out.report.digest {
            let component = out.report.difference(&again.report).unwrap_or_else(|| "its digest".into());
            Some(format!(
                "the replay from scratch on host core {core} gave digest {} instead of {}: it differs in {component}",
                again.report.digest, out.report.digest
            ))
        } else if again.failure != out.failure {
            let words = again.failure.as_ref().map(FailureSignature::to_string);
            Some(format!("the replay from scratch on host core {core} failed differently: {words:?}"))
        } else {
            None
        })
    }

    fn facts(&self, out: &ClusterOutcome) -> Facts {
        let decisions = out
            .report
            .decisions
            .iter()
            .map(|d| {
                let fault = d.point.is_fault_point();
                Decision {
                    options: d.options,
                    choice: d.choice,
                    random: !fault,
                    fault,
                    structural: d.point.is_structural(),
                    cut: out.report.cuts.binary_search(&d.index).is_ok(),
                }
            })
            .collect();
        Facts {
            coverage: out.blocks.clone(),
            coverage_at: BTreeMap::new(),
            blocks: !out.blocks.is_empty(),
            failure: out.failure.clone(),
            semantic: out.features.clone(),
            decisions,
            assertions: out
                .report
                .nodes
                .iter()
                .flat_map(|n| n.lives.iter().flat_map(|l| l.assertions.iter().cloned()))
                .collect(),
            faults: out.report.faults.iter().map(|f| f.kind.clone()).collect(),
            nodes: node_menus(&out.report),
            fail_stops: out.report.nodes.iter().flat_map(|n| crate::fail_stops::of_lives(&n.name, &n.lives)).collect(),
            ..Facts::default()
        }
    }

    fn last_output(&self, out: &ClusterOutcome) -> Vec<String> {
        let mut lines = Vec::new();
        for n in &out.report.nodes {
            for text in [&n.stdout, &n.stderr] {
                let all: Vec<&str> = text.lines().collect();
                let tail = all.iter().skip(all.len().saturating_sub(LAST_LINES));
                lines.extend(tail.map(|l| format!("[{}] {l}", n.name)));
            }
        }
        lines
    }

    fn steering(input: &mut ClusterInput) -> (&mut BTreeMap<u64, u64>, &mut Option<u64>) {
        (&mut input.overrides, &mut input.reseed)
    }

    fn mutate_plan(
        &self,
        rng: &mut ChaCha20Rng,
        seeds: Seeds,
        input: &mut ClusterInput,
        parent: &Entry<ClusterInput>,
        r: &ClusterReference,
        mode: Mode,
        changed: bool,
    ) {
        // The storage menu: always when the decisions did not change, else half the time. (A
        // checkpoint of an older deja may keep nodes that offer nothing: they do not count.)
        let offered = mode.faults() && parent.nodes.iter().any(crate::menu::NodeMenu::offers);
        let storage = offered && (!changed || crate::menu::below(rng, 2) == 0);
        if storage {
            crate::menu::mutate_storage(rng, &mut input.storage, &parent.nodes, parent.focus);
        }
        // Nothing the mode may change was there to change: a new course from the fork point.
        if !changed && !storage {
            input.overrides.clear();
            input.reseed = Some(seeds.draw(rng));
        }
        input.fork_at = late_fork_at(parent, input, r.base_decisions, mode);
    }

    fn fresh(
        &self,
        rng: &mut ChaCha20Rng,
        seed: u64,
        r: &ClusterReference,
        strategy: Strategy,
        mode: Mode,
    ) -> ClusterInput {
        let storage = if mode.faults() { crate::menu::random_storage(rng, &r.nodes) } else { Vec::new() };
        match strategy {
            Strategy::Random => ClusterInput { seed, storage, ..ClusterInput::default() },
            Strategy::Coverage => ClusterInput {
                seed: r.seed,
                reseed: Some(seed),
                steer_at: r.steer_at,
                storage,
                ..ClusterInput::default()
            },
        }
    }

    fn fresh_every(&self) -> u64 {
        3
    }

    fn write_bug(
        &self,
        r: &ClusterReference,
        input: &ClusterInput,
        out: &ClusterOutcome,
        round: u64,
        path: &Path,
    ) -> Result<WrittenBug, ExploreError> {
        let mut bug = ClusterBug::new(self.target, input, out, round, &path.display().to_string());
        if input.seed == r.seed && input.steer_at == SteerAt::Setup {
            bug.forked_from = Some(ForkRecord {
                at: r.steer_at,
                virtual_time_ns: r.virtual_time_ns,
                base_decisions: r.base_decisions,
            });
        }
        bug.write(path)?;
        Ok(WrittenBug { reproduce: bug.reproduce, decisions: bug.decisions, window: bug.history, crash: None })
    }
}

/// Where a round mutated from `parent` leaves a later fork, or runs from the one its siblings
/// left ([`crate::campaign::late_anchor`]), when everything but its overrides is the parent's
/// (a reseed, other fates or other storage faults change the course from the fork point on).
pub fn late_fork_at(parent: &Entry<ClusterInput>, input: &ClusterInput, base: u64, mode: Mode) -> Option<u64> {
    let p = &parent.input;
    let same = input.seed == p.seed
        && input.reseed == p.reseed
        && input.steer_at == p.steer_at
        && input.fates == p.fates
        && input.storage == p.storage
        && input.schedule.is_none()
        && p.schedule.is_none();
    if !same {
        return None;
    }
    crate::campaign::late_anchor(parent, crate::campaign::first_change(&p.overrides, &input.overrides)?, base, mode)
}

fn cluster_err(e: deja_cluster::ClusterError) -> ExploreError {
    match e {
        deja_cluster::ClusterError::NoProgress { node, syscalls, .. } => {
            ExploreError::NoProgress { why: crate::no_progress_after(Some(&node), syscalls) }
        }
        source => ExploreError::Cluster { source: Box::new(source) },
    }
}
