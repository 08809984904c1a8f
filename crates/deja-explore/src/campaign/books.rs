//! A campaign's state and books: what its checkpoint keeps, learning a round's facts,
//! bugs and their confirmation, and its files (checkpoints, corpus entries, reports).

use super::*;

/// A campaign as its checkpoint keeps it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(bound(serialize = "I: Serialize, R: Serialize", deserialize = "I: DeserializeOwned, R: DeserializeOwned"))]
pub(crate) struct State<I, R> {
    pub(crate) schema: String,
    /// `program` or `cluster`.
    pub(crate) kind: String,
    /// Its path, as shown to people.
    #[serde(default)]
    pub(crate) subject: String,
    pub(crate) subject_blake3: String,
    pub(crate) strategy: Strategy,
    pub(crate) mode: Mode,
    pub(crate) seed: u64,
    /// Workers it runs with (0: any, for a merged campaign).
    pub(crate) jobs: u64,
    #[serde(default)]
    pub(crate) shard: Option<(u64, u64)>,
    #[serde(flatten)]
    pub(crate) books: Books,
    pub(crate) rng: ChaCha20Rng,
    pub(crate) reference: R,
    pub(crate) virgin: Vec<u8>,
    pub(crate) semantic: BTreeSet<u64>,
    /// Runs that showed each semantic edge.
    pub(crate) hits: BTreeMap<u64, u64>,
    /// The earliest decision index at which each progress edge has shown.
    pub(crate) earliest: BTreeMap<u64, u64>,
    pub(crate) corpus: Vec<Entry<I>>,
    /// Inputs of the current epoch not run yet.
    #[serde(default)]
    pub(crate) pending: Vec<I>,
    /// The rounds that took the frontier's plans, in order: the `k`-th took plan `k`
    /// ([`super::Subject::frontier`]), or passed it over (round 0). Planned rounds count; the
    /// reports count those learned.
    #[serde(default)]
    pub(crate) frontier: Vec<u64>,
    /// The frontier, once drawn (a function of the reference and the campaign's seed).
    #[serde(skip)]
    pub(crate) frontier_plans: Option<Vec<I>>,
    /// Plans learned rounds called for ([`super::Subject::follow_ups`]), not planned yet: they
    /// take the frontier's turns before its next plan.
    #[serde(default, skip_serializing_if = "VecDeque::is_empty")]
    pub(crate) follow_ups: VecDeque<I>,
    /// The keys of every follow-up called for (each is planned once).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub(crate) followed: BTreeSet<String>,
    /// The keys a learned round said to pass over; with `followed`, at most [`MAX_FOLLOW_UPS`].
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub(crate) passed_over: BTreeSet<String>,
    /// The rounds that took a follow-up, in order (planned rounds count; the reports count
    /// those learned).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) follow_rounds: Vec<u64>,
    /// For a merged campaign: the directories it was merged from.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) merged_from: Vec<String>,
}

/// Follow-ups a campaign calls for, at most (by key: a failed sync is one, with its crashes).
pub(crate) const MAX_FOLLOW_UPS: usize = 256;

/// A checkpoint of any subject, its inputs and reference as plain JSON.
pub(crate) type AnyState = State<serde_json::Value, serde_json::Value>;

/// Reads the checkpoint of the campaign in `dir`, whatever its subject.
pub(crate) fn read_state(dir: &Path) -> Result<AnyState, ExploreError> {
    let path = dir.join("checkpoint.json");
    Ok(CHECKPOINT_SCHEMA.read(&path)?)
}

/// Kinds of fail-stop a campaign lists, at most.
pub(crate) const MAX_FAIL_STOP_KINDS: usize = 50;

/// What an unconfirmed failure leaves: the file its round was written to, the command that
/// replays it, and the round's last output lines.
pub(crate) type Evidence = (Option<String>, Option<String>, Vec<String>);

/// The bookkeeping of a campaign: rounds, bugs, the timeline and the assertion lines.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Books {
    pub(crate) round: u64,
    pub(crate) bugs: Vec<report::BugSummary>,
    pub(crate) signatures: BTreeSet<FailureSignature>,
    pub(crate) unconfirmed: BTreeSet<FailureSignature>,
    /// Why each unconfirmed failure was not confirmed, and in which round.
    #[serde(default)]
    pub(crate) unconfirmed_why: BTreeMap<FailureSignature, (u64, String)>,
    /// The evidence of each unconfirmed failure: the file its round was written to, the command
    /// that replays it, and the round's last output lines.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) unconfirmed_evidence: BTreeMap<FailureSignature, Evidence>,
    /// The fail-stops seen, by kind ([`crate::fail_stops::FailStopSeen::key`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) fail_stops: BTreeMap<String, report::FailStopLine>,
    /// `--verify-forks`: the forked rounds checked against their booted runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) fork_checks: Option<report::ForkChecks>,
    pub(crate) timeline: Vec<report::RoundPoint>,
    pub(crate) assertions: BTreeMap<String, report::AssertionLine>,
    pub(crate) wall_seconds: f64,
    /// The CPU fingerprint of the host the campaign runs on.
    #[serde(default)]
    pub(crate) host: Option<deja_vmm::Fingerprint>,
    /// Rounds the no-progress watchdog stopped.
    #[serde(default)]
    pub(crate) no_progress_rounds: u64,
    /// The first of them: round and what the watchdog saw.
    #[serde(default)]
    pub(crate) no_progress: Vec<(u64, String)>,
    /// The rounds in which each kind of fault happened.
    #[serde(default)]
    pub(crate) faults: BTreeMap<String, u64>,
    /// The host time at some rounds (display only).
    #[serde(default)]
    pub(crate) wall_timeline: report::WallTimeline,
    /// Under block coverage: the round in which each block was first reached (0: the
    /// bootstrap).
    #[serde(default, with = "pairs")]
    pub(crate) first_reached: BTreeMap<u32, u64>,
}

/// A map with integer keys kept as a list of `[key, value]` pairs. The books are flattened into
/// the checkpoint, and serde hands a flattened struct's maps to their deserializer with string
/// keys, which an integer key refuses; a map written that way (an empty one, as older
/// checkpoints hold) still reads.
mod pairs {
    use std::collections::BTreeMap;

    use serde::de::{Error as _, MapAccess, SeqAccess, Visitor};
    use serde::{Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(m: &BTreeMap<u32, u64>, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(m.iter())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<u32, u64>, D::Error> {
        struct Pairs;
        impl<'de> Visitor<'de> for Pairs {
            type Value = BTreeMap<u32, u64>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a list of [block, round] pairs")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Self::Value, A::Error> {
                let mut m = BTreeMap::new();
                while let Some((k, v)) = a.next_element::<(u32, u64)>()? {
                    m.insert(k, v);
                }
                Ok(m)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Self::Value, A::Error> {
                let mut m = BTreeMap::new();
                while let Some((k, v)) = a.next_entry::<String, u64>()? {
                    m.insert(k.parse().map_err(A::Error::custom)?, v);
                }
                Ok(m)
            }
        }
        d.deserialize_any(Pairs)
    }
}

impl Books {
    /// Records this host's fingerprint under `settings` in a new campaign, or checks that a
    /// resumed one was started on a host with the same fingerprint: its corpus and decisions are
    /// only worth continuing where runs come out the same.
    pub(super) fn adopt_host(&mut self, checkpoint: &Path, settings: &deja_vmm::Settings) -> Result<(), ExploreError> {
        let here = settings.host().map_err(deja_vmm::RunError::from)?.fingerprint.clone();
        match &self.host {
            Some(recorded) if *recorded != here => Err(ExploreError::OtherHost {
                checkpoint: checkpoint.to_path_buf(),
                recorded: recorded.id.clone(),
                here: here.id.clone(),
                differences: here.differences(recorded).join("; "),
            }),
            _ => {
                self.host = Some(here);
                Ok(())
            }
        }
    }

    /// Counts a round the watchdog stopped, learned `wall` host seconds into the campaign: not a
    /// bug, nothing learned from it. Returns whether a checkpoint is due.
    pub(super) fn no_progress(&mut self, why: String, wall: f64) -> bool {
        self.round += 1;
        self.no_progress_rounds += 1;
        if self.no_progress.len() < 10 {
            self.no_progress.push((self.round, why));
        }
        let last = self.timeline.last().cloned().unwrap_or_default();
        self.timeline.push(report::RoundPoint { round: self.round, ..last });
        self.wall_timeline.record(self.round, wall);
        true
    }

    /// The signature of a failure not met before, which needs confirming.
    pub(super) fn unseen(&self, failure: Option<&FailureSignature>) -> Option<FailureSignature> {
        failure.filter(|s| !self.signatures.contains(*s) && !self.unconfirmed.contains(*s)).cloned()
    }

    /// Settles a new failure: when the confirming replay found no `difference`, `write` writes
    /// its bug file at the path given and returns the reproduce command and the number of
    /// decisions; otherwise it is set aside as unconfirmed, with the difference.
    ///
    /// An unconfirmed failure keeps its evidence: the round is written as
    /// `unconfirmed-<id>.json` (the bug file it would have been, with the round's digest), and
    /// `output` (its last lines) goes into the reports.
    pub(super) fn settle(
        &mut self,
        sig: FailureSignature,
        subject: &str,
        difference: Option<String>,
        output: Vec<String>,
        out: &Path,
        write: impl FnOnce(&Path) -> Result<WrittenBug, ExploreError>,
    ) -> Result<(), ExploreError> {
        if let Some(why) = difference {
            let file = format!("unconfirmed-{}.json", bug_id(&sig, subject));
            let written = write(&out.join(&file)).ok();
            let (file, reproduce) = match written {
                Some(w) => (Some(file), Some(w.reproduce)),
                None => (None, None),
            };
            self.unconfirmed_evidence.insert(sig.clone(), (file, reproduce, output));
            self.unconfirmed_why.insert(sig.clone(), (self.round, why));
            self.unconfirmed.insert(sig);
            return Ok(());
        }
        let id = bug_id(&sig, subject);
        let file = format!("bug-{id}.json");
        let WrittenBug { reproduce, decisions, window, crash } = write(&out.join(&file))?;
        self.signatures.insert(sig.clone());
        self.bugs.push(report::BugSummary {
            id,
            signature: sig.to_string(),
            first_round: self.round,
            file,
            reproduce,
            decisions,
            minimized: None,
            window,
            crash,
        });
        Ok(())
    }

    /// Counts a fail-stop seen in this round. The first of its kind keeps its node, its last
    /// output, and, when `as_failure` can write the round with every fail-stop counted as a
    /// failure, that file (`fail-stop-<id>.json`) and the command that replays it. At most
    /// [`MAX_FAIL_STOP_KINDS`] kinds are kept; later kinds are not listed. When `as_failure`
    /// fails, why is kept instead.
    pub(super) fn fail_stop(
        &mut self,
        seen: &crate::fail_stops::FailStopSeen,
        subject: String,
        out: &Path,
        as_failure: impl FnOnce(&Path) -> Result<Option<WrittenBug>, ExploreError>,
    ) {
        let key = seen.key();
        if let Some(line) = self.fail_stops.get_mut(&key) {
            line.stops += 1;
            return;
        }
        if self.fail_stops.len() >= MAX_FAIL_STOP_KINDS {
            return;
        }
        let id = blake3::hash(format!("deja fail-stop v1\n{subject}\n{key}").as_bytes()).to_hex()[..12].to_string();
        let file = format!("fail-stop-{id}.json");
        // A rerun that could not be made is said in the reports; the campaign goes on.
        let (written, not_run) = match as_failure(&out.join(&file)) {
            Ok(written) => (written, None),
            Err(e) => (None, Some(e.to_string())),
        };
        self.fail_stops.insert(
            key,
            report::FailStopLine {
                node: seen.node.clone(),
                words: seen.words.clone(),
                stops: 1,
                first_round: self.round,
                output: seen.output.clone(),
                reproduce: written.as_ref().map(|w| w.reproduce.clone()),
                file: written.map(|_| file),
                not_run,
            },
        );
    }

    /// The campaign as the reports show it.
    pub(crate) fn campaign<I, R>(&self, state: &State<I, R>, program: &Program) -> Campaign {
        report::Campaign {
            program: program.path.clone(),
            program_blake3: program.blake3.clone(),
            strategy: state.strategy.name().into(),
            mode: state.mode.name().into(),
            seed: state.seed,
            rounds: self.round,
            wall_seconds: self.wall_seconds,
            corpus_size: state.corpus.len() as u64,
            edges_total: if state.kind == "cluster" { 0 } else { state.virgin.len() as u64 },
            edges_hit: if state.kind == "cluster" { state.semantic.len() as u64 } else { edges_hit(&state.virgin) },
            timeline: self.timeline.clone(),
            wall_timeline: self.wall_timeline.points.clone(),
            faults: self.faults.clone(),
            bugs: self.bugs.clone(),
            assertions: self.assertions.values().cloned().collect(),
            baseline: None,
            host: self.host.as_ref().map(|h| format!("{} ({})", h.id, h.remedy)),
            unconfirmed: self
                .unconfirmed
                .iter()
                .map(|sig| {
                    let (round, why) = self.unconfirmed_why.get(sig).cloned().unwrap_or_default();
                    let (file, reproduce, output) = self.unconfirmed_evidence.get(sig).cloned().unwrap_or_default();
                    report::Unconfirmed { signature: sig.to_string(), round, why, file, reproduce, output }
                })
                .collect(),
            fail_stops: self.fail_stops.values().cloned().collect(),
            jobs: state.jobs,
            shard: state.shard.map(|(i, n)| format!("{i}/{n}")),
            shards: Vec::new(),
            no_progress_rounds: self.no_progress_rounds,
            no_progress: self
                .no_progress
                .iter()
                .map(|(round, why)| report::NoProgress { round: *round, why: why.clone() })
                .collect(),
            blocks: None,
            frontier: state.frontier_plans.as_ref().filter(|p| !p.is_empty()).map(|p| report::Frontier {
                tried: state.frontier.iter().filter(|r| **r > 0 && **r <= self.round).count() as u64,
                passed_over: state.frontier.iter().filter(|r| **r == 0).count() as u64,
                total: p.len() as u64,
                followed: state.follow_rounds.iter().filter(|r| **r <= self.round).count() as u64,
            }),
            fork_checks: self.fork_checks.clone(),
        }
    }
}

/// A bug's short id: the first 12 hex digits of the BLAKE3 of what failed (`subject`: the
/// program's BLAKE3, or each node's name and binary BLAKE3) and its signature. The same failure
/// of another program, or of other nodes, is another bug.
pub fn bug_id(signature: &FailureSignature, subject: &str) -> String {
    let words = format!("deja bug v2\n{subject}\n{signature}");
    blake3::hash(words.as_bytes()).to_hex()[..12].to_string()
}

pub(crate) fn write_json<T: Serialize>(path: &Path, v: &T) -> Result<(), ExploreError> {
    let bytes = serde_json::to_vec_pretty(v).expect("plain data serializes");
    deja_format::write_atomic(path, &bytes).context(crate::WriteSnafu { path })
}

pub(crate) fn edges_hit(virgin: &[u8]) -> u64 {
    virgin.iter().filter(|b| **b != 0).count() as u64
}

/// Adds `entry` to a corpus and writes it as `corpus/entry-NNNNNN.json`.
pub(crate) fn keep<T: Serialize>(out: &Path, corpus: &mut Vec<T>, entry: T) -> Result<(), ExploreError> {
    write_json(&out.join("corpus").join(format!("entry-{:06}.json", corpus.len())), &entry)?;
    corpus.push(entry);
    Ok(())
}

/// What a run brought that the campaign had not seen.
pub(crate) struct Novelty {
    /// New coverage bits and semantic edges.
    pub(crate) new: u64,
    /// The latest decision index at which a new semantic edge or block first showed, if
    /// known: the run's course up to there is what made it new.
    pub(crate) focus: Option<u64>,
    /// The coverage indices that were new.
    pub(crate) new_coverage: Vec<usize>,
    /// Of `new`, what counts toward the entry's energy: new blocks alone keep a run in the
    /// corpus but give it no more energy than its behaviours' rarity.
    pub(crate) weight: u64,
}

/// Folds what a run showed into the coverage seen so far.
pub(super) fn learn<I, R>(state: &mut State<I, R>, facts: &Facts) -> Novelty {
    if state.virgin.len() < facts.coverage.len() {
        state.virgin.resize(facts.coverage.len(), 0);
    }
    let (mut new_bits, mut bits_focus, mut new_coverage) = (0, None, Vec::new());
    for (i, (seen, b)) in state.virgin.iter_mut().zip(&facts.coverage).enumerate() {
        if b & !*seen != 0 {
            new_bits += 1;
            if *seen == 0 {
                new_coverage.push(i);
            }
            *seen |= b;
            if let Some(&at) = facts.coverage_at.get(&i) {
                bits_focus = bits_focus.max(Some(at));
            }
        }
    }
    let (mut new, mut focus) = (0, None);
    for (e, at) in &facts.semantic {
        *state.hits.entry(*e).or_default() += 1;
        let known = !state.semantic.insert(*e);
        // A known progress edge reached earlier than ever before counts as new too: the same
        // state with more of the run still ahead of it.
        let sooner = match (*at, state.earliest.get(e)) {
            (Some(i), Some(&best)) => i < best,
            (Some(_), None) => true,
            (None, _) => false,
        };
        if sooner {
            state.earliest.insert(*e, at.unwrap_or_default());
        }
        if !known || sooner {
            new += 1;
            focus = focus.max(*at);
        }
    }
    let weight = if facts.blocks {
        // Block coverage: most new blocks are incidental (an error message formatted, an
        // allocator's slow path), so a run's new blocks count as one thing new, its focus is
        // where new behaviour showed when it showed any, and they keep the run in the corpus
        // without adding to its energy (what new behaviour it showed does).
        let weight = new;
        if new_bits > 0 {
            new += 1;
            if focus.is_none() {
                focus = bits_focus;
            }
        }
        weight
    } else {
        new += new_bits;
        focus = focus.max(bits_focus);
        new
    };
    fold_assertions(&mut state.books.assertions, &facts.assertions);
    for &i in &new_coverage {
        state.books.first_reached.entry(i as u32).or_insert(state.books.round);
    }
    Novelty { new, focus, new_coverage, weight }
}

/// Folds one run's assertion reports into a campaign's assertion lines.
pub(crate) fn fold_assertions(lines: &mut BTreeMap<String, report::AssertionLine>, reports: &[AssertionReport]) {
    for a in reports {
        let key = format!("{}:{}:{}", a.file, a.line, a.message);
        let line = lines.entry(key).or_insert_with(|| report::AssertionLine {
            message: a.message.clone(),
            kind: a.kind.clone(),
            hits: 0,
            failures: 0,
            status: String::new(),
        });
        line.hits += a.hits;
        line.failures += a.failures;
        let passes_seen = line.status == "satisfied" || a.passes > 0;
        line.status = assertion_status(&line.kind, line.hits, line.failures, passes_seen).to_string();
    }
}

/// The campaign-wide verdict of an assertion line.
pub(crate) fn assertion_status(kind: &str, hits: u64, failures: u64, passes_seen: bool) -> &'static str {
    match kind {
        "always" | "always_or_unreachable" if failures > 0 => "failed",
        "unreachable" if hits > 0 => "failed",
        "sometimes" if passes_seen => "satisfied",
        "sometimes" if hits > 0 => "unsatisfied",
        "reachable" if hits > 0 => "reached",
        _ if hits == 0 => "unreached",
        _ => "passed",
    }
}

/// A new campaign's state, before its bootstrap.
pub(super) fn new_state<S: Subject>(cfg: &CampaignConfig, identity: &Program) -> State<S::Input, S::Reference> {
    State {
        schema: CHECKPOINT_SCHEMA.id(),
        kind: S::KIND.into(),
        subject: identity.path.clone(),
        subject_blake3: identity.blake3.clone(),
        strategy: cfg.strategy,
        mode: cfg.mode,
        seed: cfg.seed,
        jobs: cfg.jobs.max(1),
        shard: cfg.shard,
        books: Books::default(),
        rng: ChaCha20Rng::seed_from_u64(stream_seed(cfg.seed, cfg.shard)),
        reference: S::Reference::default(),
        virgin: Vec::new(),
        semantic: BTreeSet::new(),
        hits: BTreeMap::new(),
        earliest: BTreeMap::new(),
        corpus: Vec::new(),
        pending: Vec::new(),
        frontier: Vec::new(),
        frontier_plans: None,
        follow_ups: VecDeque::new(),
        followed: BTreeSet::new(),
        passed_over: BTreeSet::new(),
        follow_rounds: Vec::new(),
        merged_from: Vec::new(),
    }
}

/// The seed of a campaign's own random stream: its seed, or for a shard one of its own.
pub(super) fn stream_seed(seed: u64, shard: Option<(u64, u64)>) -> u64 {
    let Some((i, n)) = shard else { return seed };
    let mut h = blake3::Hasher::new();
    h.update(b"deja shard stream");
    for x in [seed, i, n] {
        h.update(&x.to_le_bytes());
    }
    let mut w = [0u8; 8];
    w.copy_from_slice(&h.finalize().as_bytes()[..8]);
    u64::from_le_bytes(w)
}

/// Loads the checkpoint of a campaign to continue, refusing one this invocation cannot.
pub(super) fn resume<S: Subject>(
    cfg: &CampaignConfig,
    checkpoint: &Path,
    identity: &Program,
) -> Result<State<S::Input, S::Reference>, ExploreError> {
    ensure!(cfg.resume, crate::CampaignExistsSnafu { out: &cfg.out });
    let s: State<S::Input, S::Reference> = CHECKPOINT_SCHEMA.read(checkpoint).map_err(|e| match e.check() {
        "schema" => ExploreError::CheckpointVersion { out: cfg.out.clone(), source: Box::new(e) },
        _ => e.into(),
    })?;
    let refuse = |mismatch| Err(ExploreError::NotResumable { checkpoint: checkpoint.to_path_buf(), mismatch });
    if s.kind != S::KIND || s.subject_blake3 != identity.blake3 {
        return refuse(Mismatch::Subject { kind: s.kind.to_string() });
    }
    if s.strategy != cfg.strategy || s.mode != cfg.mode {
        return refuse(Mismatch::Strategy { strategy: s.strategy.name(), mode: s.mode.name() });
    }
    if s.jobs != 0 && s.jobs != cfg.jobs.max(1) {
        return refuse(Mismatch::Jobs { jobs: s.jobs });
    }
    if s.shard != cfg.shard && s.merged_from.is_empty() {
        return refuse(Mismatch::Shard { shard: s.shard });
    }
    let mut s = s;
    s.jobs = cfg.jobs.max(1);
    s.shard = cfg.shard;
    Ok(s)
}

/// The campaign saved in `dir`: its report when it finished (a `report.json` of as many rounds as
/// its checkpoint), else what its checkpoint holds; `true` when it finished.
pub fn saved(dir: &Path) -> Result<(Campaign, bool), ExploreError> {
    let path = dir.join("report.json");
    let report = match std::fs::read_to_string(&path) {
        Ok(text) => Some(report::parse_json(&text).context(crate::NotAReportSnafu { path: &path })?),
        Err(_) => None,
    };
    if !dir.join("checkpoint.json").exists() {
        return report.map(|c| (c, true)).context(crate::NoCampaignSnafu { dir });
    }
    let state = read_state(dir)?;
    match report {
        Some(c) if c.rounds == state.books.round => Ok((c, true)),
        _ => {
            let program = Program { path: state.subject.clone(), blake3: state.subject_blake3.clone() };
            Ok((state.books.campaign(&state, &program), false))
        }
    }
}

/// Writes `report.txt`, `report.json` and `report.html` for a campaign.
pub fn write_reports(c: &Campaign, out: &Path) -> Result<(), ExploreError> {
    for (name, text) in [
        ("report.txt", report::render_text(c)),
        ("report.json", report::render_json(c)),
        ("report.html", report::render_html(c)),
    ] {
        let path = out.join(name);
        deja_format::write_atomic(&path, text.as_bytes()).context(crate::WriteSnafu { path: &path })?;
    }
    Ok(())
}
