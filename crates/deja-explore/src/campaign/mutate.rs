//! Choosing what a round runs: parents picked by energy, and the decision mutations.

use super::*;

/// Draws an index with probability proportional to its weight.
pub(crate) fn pick_weighted(rng: &mut ChaCha20Rng, weights: &[u64]) -> usize {
    let total: u64 = weights.iter().sum();
    let mut x = modulo_below(rng, total.max(1));
    for (i, w) in weights.iter().enumerate() {
        if x < *w {
            return i;
        }
        x -= w;
    }
    0
}

/// A corpus entry's energy: the rarity of the behaviours its run showed (one seen in `h` runs
/// counts `1000 / h`) plus what it brought that was new, lowered by how often it was picked.
pub(crate) fn energy(features: &[u64], hits: &BTreeMap<u64, u64>, new: u64, picks: u64) -> u64 {
    let rarity: u64 = features.iter().map(|f| 1000 / hits.get(f).copied().unwrap_or(1).max(1)).sum();
    1 + (rarity + 100 * new) / (1 + picks)
}

/// How many decisions before a corpus entry's focus count as leading to it.
pub(super) const FOCUS_WINDOW: u64 = 8;

/// The decision mutations, the same for every subject: a tail cut (keep the parent's course up
/// to a cut, draw everything after it afresh) or one to three point mutations. Returns whether
/// anything changed.
///
/// Half of the tail cuts fall right at the parent's focus, so the state the parent reached is
/// kept and what follows it is explored; a quarter after it; a quarter anywhere. A tail cut
/// redraws every later decision, so it is only made when the mode may change all of them.
/// Point mutations pick, half of the time, among the few decisions before the focus; otherwise,
/// half of the time, a decision that chooses which fault happens (a different partition keeps
/// the parent's timing, a different gap shifts every later fault).
pub(crate) fn mutate_decisions<I>(
    rng: &mut ChaCha20Rng,
    seeds: Seeds,
    steering: (&mut BTreeMap<u64, u64>, &mut Option<u64>),
    parent: &Entry<I>,
    first: u64,
    mode: Mode,
) -> bool {
    let (overrides, reseed) = steering;
    let count = parent.decisions.len() as u64;
    let eligible = |d: &Decision| (mode.random() && d.random) || (mode.faults() && d.fault);
    let candidates: Vec<u64> = (first..count)
        .filter(|&i| parent.decisions[i as usize].options != 1 && eligible(&parent.decisions[i as usize]))
        .collect();
    if candidates.is_empty() {
        return false;
    }
    let focus = parent.focus.filter(|f| (first..=count).contains(f));
    let within = |rng: &mut ChaCha20Rng, lo: u64, hi: u64| lo + modulo_below(rng, (hi - lo).max(1));
    let one_of = |rng: &mut ChaCha20Rng, v: &[u64]| v[modulo_below(rng, v.len() as u64) as usize];
    let all_eligible = parent.decisions[first as usize..].iter().all(|d| d.options == 1 || eligible(d));
    let roll = modulo_below(rng, 8);
    if all_eligible && roll < 4 {
        let cut = match (roll, focus) {
            (0 | 1, Some(f)) => f,
            (2, Some(f)) => within(rng, f, count + 1),
            _ => within(rng, first, count + 1),
        };
        *overrides = (first..cut).map(|i| (i, parent.decisions[i as usize].choice)).collect();
        *reseed = Some(seeds.draw(rng));
        return true;
    }
    let structural: Vec<u64> =
        candidates.iter().copied().filter(|&i| parent.decisions[i as usize].structural).collect();
    for _ in 0..1 + modulo_below(rng, 3) {
        let near: Vec<u64> = match focus {
            Some(f) if f > first && rng.next_u64().is_multiple_of(2) => {
                candidates.iter().copied().filter(|&i| i + FOCUS_WINDOW >= f && i < f).collect()
            }
            _ => Vec::new(),
        };
        let i = if !near.is_empty() {
            one_of(rng, &near)
        } else if !structural.is_empty() && rng.next_u64().is_multiple_of(2) {
            one_of(rng, &structural)
        } else {
            one_of(rng, &candidates)
        };
        let options = parent.decisions[i as usize].options;
        let choice = if options == 0 { rng.next_u64() } else { modulo_below(rng, options) };
        overrides.insert(i, choice);
    }
    true
}

/// The first decision index whose override differs between `a` and `b` (`None`: none does).
pub(crate) fn first_change(a: &BTreeMap<u64, u64>, b: &BTreeMap<u64, u64>) -> Option<u64> {
    a.keys().chain(b.keys()).copied().filter(|k| a.get(k) != b.get(k)).min()
}

/// Up to this many changeable decisions, each has an anchor of its own ([`late_anchor`]).
const FEW_ANCHORS: usize = 32;

/// Where a round mutated from `parent` whose first changed decision is `first` leaves a later
/// fork, or runs from the one a sibling left: the latest anchor of the parent's course at or
/// before `first`, past the fork point's `base` decisions. An anchor is the last cut (a
/// decision a later fork can be taken right before, [`Decision::cut`]) at or before a
/// decision: each decision `mode` may change when there are few (a faults campaign of a
/// cluster changes a dozen fault decisions, so a round starts right before the first it
/// changes), else each eighth of the decisions after the fork point and the window of point
/// mutations before the parent's focus, so that siblings share them.
pub(crate) fn late_anchor<I>(parent: &Entry<I>, first: u64, base: u64, mode: Mode) -> Option<u64> {
    let count = parent.decisions.len() as u64;
    let last_cut =
        |at: u64| (base + 1..=at.min(count.saturating_sub(1))).rev().find(|&i| parent.decisions[i as usize].cut);
    let changeable: Vec<u64> = (base..count)
        .filter(|&i| {
            let d = &parent.decisions[i as usize];
            d.options != 1 && ((mode.random() && d.random) || (mode.faults() && d.fault))
        })
        .collect();
    let anchors: Vec<u64> = if changeable.len() <= FEW_ANCHORS {
        changeable
    } else {
        let eighths = (1..8).map(|j| base + count.saturating_sub(base) * j / 8);
        eighths.chain(parent.focus.map(|f| f.saturating_sub(FOCUS_WINDOW))).collect()
    };
    anchors.into_iter().filter_map(last_cut).filter(|&k| k <= first).max()
}
