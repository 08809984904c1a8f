//! What a campaign explores, as the loop sees it: the [`Subject`] a program or a cluster
//! implements, the [`Facts`] a round showed, the seeds it may draw, its identity and what a bug
//! file written for it shows.

use super::*;

/// What a learned round says of a key's frontier plans ([`Subject::follow_ups`]).
#[derive(Debug, Clone, PartialEq)]
pub struct FollowUp<I> {
    /// The key (`failed sync #3 of /data/pages`).
    pub key: String,
    /// The plans it calls for, before the frontier's next; none to pass over the frontier's
    /// plans of the key.
    pub plans: Vec<I>,
}

/// What a run showed, as the campaign loop sees it.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    /// The failure's signature, if the run failed.
    pub failure: Option<FailureSignature>,
    /// The coverage map: SanitizerCoverage's bucketed edge counters, or, for a program without
    /// them, a 1 for each block the run reached while it was armed (empty without either).
    pub coverage: Vec<u8>,
    /// For the blocks of `coverage`: the decision index at which the run first reached each
    /// (where its course made that block new).
    pub coverage_at: BTreeMap<usize, u64>,
    /// `coverage` is block coverage of an uninstrumented program (one-shot breakpoints), not
    /// SanitizerCoverage: new blocks then weigh less than new behaviour ([`books::learn`]).
    pub blocks: bool,
    /// Semantic edges and behaviours, each with the decision index where the run first showed
    /// it, when that is progress.
    pub semantic: BTreeMap<u64, Option<u64>>,
    /// The steerable decisions, in order.
    pub decisions: Vec<Decision>,
    /// Durable writes of the first life (programs).
    pub durable_writes: u64,
    /// The file operations of the first life (programs).
    pub io_ops: Vec<deja_kernel::IoCount>,
    /// Operations pending at the first life's crash (programs).
    pub pending_at_crash: Option<u64>,
    /// Every assertion report of every life (of every node).
    pub assertions: Vec<AssertionReport>,
    /// The kinds of fault that happened in the run (`crash`, `eio`, `partition`, ...), each once
    /// or more.
    pub faults: Vec<String>,
    /// What each node offers to storage faults (clusters).
    pub nodes: Vec<crate::menu::NodeMenu>,
    /// The lives the fail-stop rule restarted (or let stand), of every node.
    pub fail_stops: Vec<crate::fail_stops::FailStopSeen>,
}

/// What a campaign explored: a path and a BLAKE3 (of the program image or the cluster file).
#[derive(Debug, Clone)]
pub struct Program {
    /// As shown to people.
    pub path: String,
    /// BLAKE3 (hex).
    pub blake3: String,
}

/// Where the seeds a campaign draws come from: all of `u64`, or one shard's residue class.
#[derive(Debug, Clone, Copy)]
pub struct Seeds {
    shard: Option<(u64, u64)>,
}

impl Seeds {
    /// The seed space of a campaign that is `shard` (or the whole one).
    pub fn new(shard: Option<(u64, u64)>) -> Seeds {
        Seeds { shard }
    }

    /// A seed from `rng`, in this campaign's class: `i` modulo `n` for shard `i` of `n`.
    pub fn draw(self, rng: &mut ChaCha20Rng) -> u64 {
        let raw = rng.next_u64();
        match self.shard {
            Some((i, n)) if n > 1 => raw % (u64::MAX / n) * n + i,
            _ => raw,
        }
    }
}

/// What a campaign explores: a program or a cluster.
pub trait Subject: Sync {
    /// How a round is steered.
    type Input: Clone + Default + PartialEq + std::fmt::Debug + Serialize + DeserializeOwned + Send + Sync;
    /// What a round showed.
    type Outcome: Send;
    /// What a worker keeps between rounds (a fork); made and used on the worker's thread.
    type Worker;
    /// What the bootstrap learned (where rounds fork, what the reference run did).
    type Reference: Clone + Default + std::fmt::Debug + Serialize + DeserializeOwned + Send + Sync;

    /// `program` or `cluster` (in checkpoints).
    const KIND: &'static str;

    /// Its path and BLAKE3.
    fn identity(&self) -> Program;

    /// What identifies it in a bug's id ([`bug_id`]): the program's BLAKE3, or each node's
    /// name and binary BLAKE3.
    fn bug_subject(&self) -> String;

    /// The bytes of every declared input file (a dynamically linked program's loader and
    /// libraries among them), kept by BLAKE3 under the campaign's `inputs/` so that its bug
    /// files replay on a host whose files differ ([`INPUTS_DIR`]).
    fn input_files(&self) -> Vec<&[u8]>;

    /// The bootstrap: what rounds need to know before they start, and the outcomes of the runs
    /// it made (learned before the first round).
    fn bootstrap(&self, cfg: &CampaignConfig) -> Result<(Self::Reference, Vec<Self::Outcome>), ExploreError>;

    /// Decisions taken before the fork point: mutations start after them.
    fn base_decisions(reference: &Self::Reference) -> u64;

    /// The input of corpus entry 0 (the untouched run).
    fn origin(&self, cfg: &CampaignConfig, reference: &Self::Reference) -> Self::Input;

    /// A worker for rounds of `strategy`.
    fn worker(&self, reference: &Self::Reference, strategy: Strategy) -> Result<Self::Worker, ExploreError>;

    /// Runs one round.
    fn run(
        &self,
        worker: &mut Self::Worker,
        reference: &Self::Reference,
        input: &Self::Input,
    ) -> Result<Self::Outcome, ExploreError>;

    /// Replays a failing round from scratch on another host core than the one it ran on:
    /// `None` when it gave the same run, else the first component that differed.
    fn confirm(
        &self,
        reference: &Self::Reference,
        input: &Self::Input,
        out: &Self::Outcome,
    ) -> Result<Option<String>, ExploreError>;

    /// What the round showed.
    fn facts(&self, out: &Self::Outcome) -> Facts;

    /// The last lines of what the round wrote (a cluster's: each node's, prefixed with its
    /// name), for the evidence of a round that did not replay the same.
    fn last_output(&self, _out: &Self::Outcome) -> Vec<String> {
        Vec::new()
    }

    /// The campaign has learned coverage indices `indices` (in round order, or all of them when
    /// a campaign resumes): a subject that measures coverage with one-shot breakpoints takes
    /// them out of its workers' VMs.
    fn learned_coverage(&self, _indices: &[usize]) {}

    /// Under block coverage, what the blocks reached say of the program's functions, given the
    /// round in which each block was first reached; `None` for SanitizerCoverage or none.
    fn block_coverage(
        &self,
        _reference: &Self::Reference,
        _first_reached: &BTreeMap<u32, u64>,
    ) -> Option<report::BlockCoverage> {
        None
    }

    /// The input's decision overrides and reseed, for the decision mutations.
    fn steering(input: &mut Self::Input) -> (&mut BTreeMap<u64, u64>, &mut Option<u64>);

    /// Changes the input's plan after the decision mutations (the fault plan of a program; a
    /// new course for a cluster whose decisions could not change); `changed` says whether the
    /// decision mutations changed anything.
    #[allow(clippy::too_many_arguments)]
    fn mutate_plan(
        &self,
        rng: &mut ChaCha20Rng,
        seeds: Seeds,
        input: &mut Self::Input,
        parent: &Entry<Self::Input>,
        reference: &Self::Reference,
        mode: Mode,
        changed: bool,
    );

    /// An independent round's input: a new seed, faults drawn from scratch.
    fn fresh(
        &self,
        rng: &mut ChaCha20Rng,
        seed: u64,
        reference: &Self::Reference,
        strategy: Strategy,
        mode: Mode,
    ) -> Self::Input;

    /// In the coverage strategy, about one round in this many runs a fresh input instead of a
    /// mutation (0: never).
    fn fresh_every(&self) -> u64 {
        0
    }

    /// The coverage strategy's frontier: plans it tries once each, in this order (the
    /// campaign's stream seed `seed` draws it), on three rounds in four until each was tried.
    /// A program in a faults mode has one: every single fault its reference run offers
    /// ([`crate::menu::frontier`]). None by default.
    fn frontier(&self, _reference: &Self::Reference, _mode: Mode, _seed: u64) -> Vec<Self::Input> {
        Vec::new()
    }

    /// What a learned round says of the frontier's compositions: a program in a faults mode
    /// says, of each failed sync its first life reached, whether it went on past it
    /// ([`crate::menu::after_failed_syncs`]). When it did, the follow-up's plans (a crash after
    /// that failure in the round as it ran, [`crate::menu::sync_then_crash`]) take the frontier's
    /// turns before its next plan; when it stopped there, the follow-up has no plans, and the
    /// frontier passes over its plans of that key ([`Subject::follow_key`]). The first round
    /// that says something of a key decides it, for at most [`books::MAX_FOLLOW_UPS`] keys.
    /// Nothing by default.
    fn follow_ups(&self, _input: &Self::Input, _out: &Self::Outcome, _mode: Mode) -> Vec<FollowUp<Self::Input>> {
        Vec::new()
    }

    /// The key of the follow-up a frontier plan belongs to, if any (a program's crash after a
    /// failed sync: `failed sync #3 of /data/pages`).
    fn follow_key(&self, _input: &Self::Input) -> Option<String> {
        None
    }

    /// A frontier plan as a round runs it: what the plan leaves open, drawn from `rng`.
    fn frontier_round(&self, _rng: &mut ChaCha20Rng, input: Self::Input) -> Self::Input {
        input
    }

    /// A round in which a life fail-stopped, with every such stop counted as a failure: run again
    /// from scratch and, when it fails, written at `path` as a bug file (what `deja replay` and
    /// `deja check --bug` take). `None` when the subject cannot (a cluster's nodes say their
    /// rule in its file) or the run did not fail that way.
    fn as_failure(
        &self,
        _reference: &Self::Reference,
        _input: &Self::Input,
        _round: u64,
        _path: &Path,
    ) -> Result<Option<WrittenBug>, ExploreError> {
        Ok(None)
    }

    /// Writes the bug file of a confirmed failure at `path`; returns what the reports show of it.
    fn write_bug(
        &self,
        reference: &Self::Reference,
        input: &Self::Input,
        out: &Self::Outcome,
        round: u64,
        path: &Path,
    ) -> Result<WrittenBug, ExploreError>;
}

/// What the reports show of a bug file just written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrittenBug {
    /// The command that replays it.
    pub reproduce: String,
    /// How many decisions the failing run took.
    pub decisions: u64,
    /// A history's shortest failing window on a timeline, when the failure is one.
    pub window: Option<String>,
    /// The crash states the run's crashes took, when it crashed (see
    /// [`report::BugSummary::crash`]).
    pub crash: Option<String>,
}
