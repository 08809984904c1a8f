//! Merging campaigns: the shards of one campaign (or several runs of it) into one directory.
//!
//! [`merge`] reads each directory's checkpoint, refuses directories that are not shards of one
//! campaign (another program or cluster file, strategy, mode or fork point) or the same shard
//! twice, and writes one campaign:
//!
//! - the corpus: every shard's entries, in directory order;
//! - coverage: the union of the edges and behaviours, with the runs that showed each summed;
//! - bugs: deduplicated by signature, the first directory's bug file of each (its reproduce
//!   command pointing at the copy); a failure one shard could not confirm and another confirmed
//!   is a bug;
//! - the assertion lines, summed;
//! - a report that lists each shard (rounds, corpus, edges, bugs, time).
//!
//! The merged directory holds a checkpoint too: `deja explore --resume` continues from the
//! union corpus (with any `--jobs`), and a merged directory can be merged again.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use deja_explore_report as report;
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha20Rng;
use serde_json::Value;

use crate::campaign::{
    assertion_status, edges_hit, keep, read_state, AnyState, Books, Campaign, Entry, Program, CHECKPOINT_SCHEMA,
};
use crate::cluster::CLUSTER_BUG_SCHEMA;
use crate::input::BUG_SCHEMA;
use crate::signature::FailureSignature;
use crate::ExploreError;
use snafu::{ensure, ResultExt};

/// Brings the input files a campaign in `dir` kept (`inputs/`, each named by its BLAKE3) into
/// `out`'s, so that the merged bugs replay where the shards' did: a hard link where the file
/// system allows one, else a copy; a file of that name already there is kept.
fn merge_inputs(dir: &Path, out: &Path) -> Result<(), ExploreError> {
    let from = dir.join(crate::campaign::INPUTS_DIR);
    let Ok(entries) = std::fs::read_dir(&from) else { return Ok(()) };
    let to = out.join(crate::campaign::INPUTS_DIR);
    std::fs::create_dir_all(&to).context(crate::CreateDirSnafu { path: &to })?;
    for entry in entries.flatten() {
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        if !src.is_file() || dst.exists() {
            continue;
        }
        std::fs::hard_link(&src, &dst)
            .or_else(|_| std::fs::copy(&src, &dst).map(|_| ()))
            .context(crate::CreateDirSnafu { path: &dst })?;
    }
    Ok(())
}

/// Merges the campaigns in `dirs` into `out` and writes its checkpoint, corpus, bug files and
/// reports; returns the merged campaign.
pub fn merge(dirs: &[PathBuf], out: &Path) -> Result<Campaign, ExploreError> {
    ensure!(!dirs.is_empty(), crate::NothingToMergeSnafu);
    ensure!(!out.join("checkpoint.json").exists(), crate::MergeIntoSnafu { out });
    let states: Vec<AnyState> = dirs.iter().map(|d| read_state(d)).collect::<Result<_, _>>()?;
    let first = &states[0];
    for (d, s) in dirs.iter().zip(&states).skip(1) {
        let differs = |what: &str| crate::MergeDiffersSnafu { dir: d, first: &dirs[0], what }.fail();
        if s.kind != first.kind || s.subject_blake3 != first.subject_blake3 {
            return differs(&format!("{} (BLAKE3 {})", s.kind, s.subject_blake3));
        }
        if s.strategy != first.strategy || s.mode != first.mode {
            return differs("strategy or mode");
        }
        if s.reference != first.reference {
            return differs("fork point (another --seed?)");
        }
    }
    for (a, sa) in states.iter().enumerate() {
        for (b, sb) in states.iter().enumerate().skip(a + 1) {
            if sa.merged_from.is_empty() && sb.merged_from.is_empty() && (sa.seed, sa.shard) == (sb.seed, sb.shard) {
                return crate::SameShardSnafu {
                    a: &dirs[a],
                    b: &dirs[b],
                    seed: sa.seed,
                    shard: sa.shard.map(|(i, n)| format!(", shard {i}/{n}")).unwrap_or_default(),
                }
                .fail();
            }
        }
    }
    std::fs::create_dir_all(out.join("corpus")).context(crate::CreateDirSnafu { path: out })?;
    for dir in dirs {
        merge_inputs(dir, out)?;
    }

    let hosts: Vec<&deja_vmm::Fingerprint> = states.iter().filter_map(|s| s.books.host.as_ref()).collect();
    let one_host = hosts.windows(2).all(|w| w[0] == w[1]);
    let mut merged = AnyState {
        schema: CHECKPOINT_SCHEMA.id(),
        kind: first.kind.clone(),
        subject: first.subject.clone(),
        subject_blake3: first.subject_blake3.clone(),
        strategy: first.strategy,
        mode: first.mode,
        seed: first.seed,
        jobs: 0,
        shard: None,
        books: Books { host: if one_host { hosts.first().map(|h| (*h).clone()) } else { None }, ..Books::default() },
        rng: ChaCha20Rng::seed_from_u64(merge_stream_seed(&states)),
        reference: first.reference.clone(),
        virgin: Vec::new(),
        semantic: Default::default(),
        hits: BTreeMap::new(),
        earliest: BTreeMap::new(),
        corpus: Vec::new(),
        pending: Vec::new(),
        // The shards went through the frontier in orders of their own: the merged campaign
        // goes on from the furthest.
        frontier: states.iter().map(|s| s.frontier.clone()).max_by_key(Vec::len).unwrap_or_default(),
        frontier_plans: None,
        // Likewise the follow-ups of the shard that called for the most; none is called for again.
        follow_ups: states.iter().max_by_key(|s| s.followed.len()).map(|s| s.follow_ups.clone()).unwrap_or_default(),
        followed: states.iter().flat_map(|s| s.followed.iter().cloned()).collect(),
        passed_over: states.iter().flat_map(|s| s.passed_over.iter().cloned()).collect(),
        follow_rounds: Vec::new(),
        merged_from: dirs.iter().map(|d| d.display().to_string()).collect(),
    };
    let mut shards = Vec::new();
    for (dir, s) in dirs.iter().zip(&states) {
        let b = &s.books;
        shards.push(report::ShardLine {
            dir: dir.display().to_string(),
            shard: s.shard.map(|(i, n)| format!("{i}/{n}")).unwrap_or_else(|| "-".into()),
            rounds: b.round,
            corpus_size: s.corpus.len() as u64,
            edges_hit: if s.kind == "cluster" { s.semantic.len() as u64 } else { edges_hit(&s.virgin) },
            bugs: b.bugs.len() as u64,
            wall_seconds: b.wall_seconds,
        });
        let m = &mut merged.books;
        m.round += b.round;
        m.wall_seconds = m.wall_seconds.max(b.wall_seconds);
        for bug in &b.bugs {
            if !m.signatures.insert(FailureSignature::from(bug.signature.as_str())) {
                continue;
            }
            let file = out.join(&bug.file);
            let reproduce = crate::replay_command(&file.display().to_string());
            copy_bug(&dir.join(&bug.file), &file, &reproduce)?;
            m.bugs.push(report::BugSummary { reproduce, ..bug.clone() });
        }
        for sig in &b.unconfirmed {
            m.unconfirmed.insert(sig.clone());
            if let Some(why) = b.unconfirmed_why.get(sig) {
                m.unconfirmed_why.entry(sig.clone()).or_insert_with(|| why.clone());
            }
        }
        for (key, line) in &b.assertions {
            let l = m.assertions.entry(key.clone()).or_insert_with(|| report::AssertionLine {
                hits: 0,
                failures: 0,
                status: String::new(),
                ..line.clone()
            });
            let satisfied = l.status == "satisfied" || line.status == "satisfied";
            l.hits += line.hits;
            l.failures += line.failures;
            l.status = assertion_status(&l.kind, l.hits, l.failures, satisfied).to_string();
        }
        for (kind, rounds) in &b.faults {
            *m.faults.entry(kind.clone()).or_default() += rounds;
        }
        if merged.virgin.len() < s.virgin.len() {
            merged.virgin.resize(s.virgin.len(), 0);
        }
        for (seen, b) in merged.virgin.iter_mut().zip(&s.virgin) {
            *seen |= b;
        }
        merged.semantic.extend(s.semantic.iter().copied());
        for (e, n) in &s.hits {
            *merged.hits.entry(*e).or_default() += n;
        }
        for (e, i) in &s.earliest {
            let best = merged.earliest.entry(*e).or_insert(*i);
            *best = (*best).min(*i);
        }
        for entry in &s.corpus {
            keep(out, &mut merged.corpus, Entry { picks: 0, ..entry.clone() })?;
        }
    }
    let confirmed = merged.books.signatures.clone();
    merged.books.unconfirmed.retain(|s| !confirmed.contains(s));
    merged.books.unconfirmed_why.retain(|s, _| !confirmed.contains(s));
    CHECKPOINT_SCHEMA.write(&out.join("checkpoint.json"), &merged)?;

    let program = Program { path: merged.subject.clone(), blake3: merged.subject_blake3.clone() };
    let mut campaign = merged.books.campaign(&merged, &program);
    campaign.shards = shards;
    if !one_host {
        let mut ids: Vec<String> = hosts.iter().map(|h| format!("{} ({})", h.id, h.remedy)).collect();
        ids.dedup();
        campaign.host = Some(format!("{} hosts: {}", ids.len(), ids.join(", ")));
    }
    crate::write_reports(&campaign, out)?;
    Ok(campaign)
}

/// Copies a bug file, pointing its reproduce command at the copy.
fn copy_bug(from: &Path, to: &Path, reproduce: &str) -> Result<(), ExploreError> {
    let schema = match BUG_SCHEMA.open(from) {
        Err(deja_format::json::ArtifactError::Family { .. }) => CLUSTER_BUG_SCHEMA,
        _ => BUG_SCHEMA,
    };
    let (mut bug, _) = schema.open(from)?;
    if let Some(obj) = bug.as_object_mut() {
        obj.insert("reproduce".into(), Value::String(reproduce.to_string()));
    }
    Ok(schema.write(to, &bug)?)
}

/// The merged campaign's own random stream: from every merged campaign's seed and shard.
fn merge_stream_seed(states: &[AnyState]) -> u64 {
    let mut h = blake3::Hasher::new();
    h.update(b"deja merged stream");
    for s in states {
        let (i, n) = s.shard.unwrap_or((0, 0));
        for x in [s.seed, i, n, s.books.round] {
            h.update(&x.to_le_bytes());
        }
    }
    let mut w = [0u8; 8];
    w.copy_from_slice(&h.finalize().as_bytes()[..8]);
    u64::from_le_bytes(w)
}
