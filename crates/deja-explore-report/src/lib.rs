//! Renders the report of an exploration campaign (`deja explore`) three ways:
//!
//! - [`render_text`]: a plain report for a terminal;
//! - [`render_json`]: the [`Campaign`] model wrapped as `{"schema": "deja.explore-report/1", "campaign": {...}}`,
//!   read back with [`parse_json`];
//! - [`render_html`]: one self-contained HTML page: the campaign embedded as JSON, drawn by the views of
//!   `view.js` and `view.css` (inline, no external resources).
//!
//! [`live_page`] is the page of `deja explore --serve` and `deja serve`: the same views, fed by a server-sent
//! event stream instead of embedded data. Both pages include the one copy of the views.
//!
//! The crate is pure: it only turns a [`Campaign`] into strings. Every renderer copes with an empty timeline, a
//! program without coverage instrumentation (`edges_total == 0`) and a campaign without bugs.

mod html;
mod text;

use std::collections::BTreeMap;

pub use html::{live_page, render_html, thin_timeline};
pub use text::render_text;

/// The `schema` tag at the top level of [`render_json`]'s output.
pub const SCHEMA: &str = "deja.explore-report/1";

/// Everything one exploration campaign found, as the renderers show it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Campaign {
    /// The guest path or program file, as shown to the user.
    pub program: String,
    /// The BLAKE3 hash (hex) of the program.
    pub program_blake3: String,
    /// How inputs were chosen: `"coverage"` or `"random"`.
    pub strategy: String,
    /// What was varied: `"faults"`, `"random"` or `"both"`.
    pub mode: String,
    /// The campaign's seed.
    pub seed: u64,
    /// How many rounds (runs of the program) the campaign made.
    pub rounds: u64,
    /// Wall-clock duration in seconds; for display only.
    pub wall_seconds: f64,
    /// How many inputs the corpus held at the end.
    pub corpus_size: u64,
    /// How many edges the program is instrumented with (0 if the program has no coverage).
    pub edges_total: u64,
    /// How many distinct edges the campaign hit.
    pub edges_hit: u64,
    /// Progress, one point per round (or sampled), in round order.
    pub timeline: Vec<RoundPoint>,
    /// The host time at some of those rounds (at most [`WallTimeline::MAX_POINTS`], one every
    /// `2^k` rounds); for display only.
    #[serde(default)]
    pub wall_timeline: Vec<WallPoint>,
    /// The fault mix: for each kind of fault (`crash`, `eio`, `torn_write`, `partition`, `kill`,
    /// `clock-jump`, ...), the rounds in which it happened.
    #[serde(default)]
    pub faults: BTreeMap<String, u64>,
    /// The distinct bugs found.
    pub bugs: Vec<BugSummary>,
    /// Campaign-wide assertion verdicts.
    pub assertions: Vec<AssertionLine>,
    /// A random-strategy run on the same budget, for comparison, if any.
    pub baseline: Option<Box<Campaign>>,
    /// The host CPU fingerprint the campaign ran under, with its remedy (see `deja doctor`).
    #[serde(default)]
    pub host: Option<String>,
    /// Failures that a confirming replay on another host core did not reproduce: not bugs, but
    /// evidence that something in the run is not deterministic.
    #[serde(default)]
    pub unconfirmed: Vec<Unconfirmed>,
    /// Lives the fail-stop rule took for stops because of an injected error (restarted on
    /// their disk, not counted as failures), by kind (absent in reports of older deja).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fail_stops: Vec<FailStopLine>,
    /// Workers that ran rounds in parallel (0 for a merged campaign).
    #[serde(default = "one")]
    pub jobs: u64,
    /// For one shard of a campaign: `i/n` (0-based `i`).
    #[serde(default)]
    pub shard: Option<String>,
    /// For a merged campaign: each shard it was merged from.
    #[serde(default)]
    pub shards: Vec<ShardLine>,
    /// Rounds the no-progress watchdog stopped (not bugs: deja cannot tell a long computation
    /// from a loop that never ends).
    #[serde(default)]
    pub no_progress_rounds: u64,
    /// The first of them.
    #[serde(default)]
    pub no_progress: Vec<NoProgress>,
    /// Block coverage of a program without SanitizerCoverage (`--block-coverage`): then
    /// `edges_total` and `edges_hit` count blocks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocks: Option<BlockCoverage>,
    /// The coverage strategy's frontier of single faults (a program in a faults mode): how
    /// many it holds and how many were tried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frontier: Option<Frontier>,
    /// `--verify-forks N`: forked rounds booted again from scratch and compared, digest for
    /// digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fork_checks: Option<ForkChecks>,
}

/// Forked rounds checked against the same input booted from scratch ([`Campaign::fork_checks`]).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ForkChecks {
    /// Every how many rounds one was checked.
    pub every: u64,
    /// Rounds checked.
    pub checked: u64,
    /// Those whose booted run differed: each a determinism defect of deja.
    pub diverged: Vec<Unconfirmed>,
}

/// The frontier of single faults a coverage campaign tries once each ([`Campaign::frontier`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Frontier {
    /// Single faults tried.
    pub tried: u64,
    /// Single faults it holds.
    pub total: u64,
    /// Rounds that followed a failed sync the program went on past with a crash (each tried
    /// before the frontier's next plan; absent in reports of older deja).
    #[serde(default)]
    pub followed: u64,
    /// Plans passed over: crashes after a failed sync a round had followed already, or that the
    /// program stopped at (absent in reports of older deja).
    #[serde(default)]
    pub passed_over: u64,
}

/// What block coverage measured ([`Campaign::blocks`]).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BlockCoverage {
    /// Blocks armed (in scope).
    pub blocks_total: u64,
    /// Blocks reached.
    pub blocks_hit: u64,
    /// The `--cover` patterns (empty: the whole program).
    pub scope: Vec<String>,
    /// Functions holding blocks in scope.
    pub functions_total: u64,
    /// Functions with at least one block reached.
    pub functions_reached: u64,
    /// Functions first reached per round, for the rounds where that count grew: (round,
    /// functions reached so far).
    pub functions_over_rounds: Vec<(u64, u64)>,
    /// The functions reached last (the rarest: no earlier round got there), latest first, at
    /// most [`BlockCoverage::LISTED`].
    pub latest: Vec<FunctionLine>,
    /// Functions never reached, largest first, at most [`BlockCoverage::LISTED`].
    pub never: Vec<FunctionLine>,
    /// The source files of the functions in scope, by path, where the program's DWARF line
    /// tables name them (empty without).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<FileLine>,
}

/// One source file in a block-coverage report: its functions and blocks in scope, and those
/// reached.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FileLine {
    /// Its path, as the line tables name it.
    pub file: String,
    /// Functions starting in it.
    pub functions: u64,
    /// Those with a block reached.
    pub functions_reached: u64,
    /// Their blocks.
    pub blocks: u64,
    /// Those reached.
    pub blocks_reached: u64,
}

impl BlockCoverage {
    /// How many functions each list keeps.
    pub const LISTED: usize = 20;
}

/// One function in a block-coverage list.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FunctionLine {
    /// Its name (Rust names demangled).
    pub name: String,
    /// Its blocks in scope.
    pub blocks: u64,
    /// Those reached.
    pub reached: u64,
    /// The round in which it was first reached (0: the bootstrap), if it was.
    pub first_round: Option<u64>,
    /// Its source file, where the program's DWARF line tables name it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
}

/// A round the no-progress watchdog stopped.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct NoProgress {
    /// The round.
    pub round: u64,
    /// What the watchdog saw (the syscall it stalled after, where).
    pub why: String,
}

fn one() -> u64 {
    1
}

/// One shard of a merged campaign.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ShardLine {
    /// Its directory.
    pub dir: String,
    /// `i/n`, or `-` for a campaign that was not a shard.
    pub shard: String,
    /// Rounds it ran.
    pub rounds: u64,
    /// Its corpus.
    pub corpus_size: u64,
    /// Edges (or behaviours) it hit.
    pub edges_hit: u64,
    /// Bugs it found (before deduplication).
    pub bugs: u64,
    /// Its wall time, seconds (display only).
    pub wall_seconds: f64,
}

/// A kind of fail-stop a campaign saw: lives that ended non-zero after an injected I/O error and
/// that the fail-stop rule took for stops because of it.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FailStopLine {
    /// The node (empty for a program).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub node: String,
    /// `status 1 after eio on write #N to /db/journal`: how the life ended and the error it
    /// followed.
    pub words: String,
    /// Stops of this kind seen.
    pub stops: u64,
    /// The round of the first.
    pub first_round: u64,
    /// The first one's last lines of output.
    #[serde(default)]
    pub output: Vec<String>,
    /// The first one's round written with every fail-stop counted as a failure (a bug file),
    /// when it then failed (programs; a cluster file says its rule per node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// The command that replays that file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reproduce: Option<String>,
    /// Why the first one could not be run again counted as a failure, when it could not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_run: Option<String>,
}

impl FailStopLine {
    /// Its kind in words: `status 1 after eio on write #N to /db/journal`, after `node r1: ` on
    /// a cluster.
    pub fn kind(&self) -> String {
        if self.node.is_empty() {
            self.words.clone()
        } else {
            format!("node {}: {}", self.node, self.words)
        }
    }

    /// `lines`, the most frequent first (then the earliest).
    pub fn by_frequency(lines: &[FailStopLine]) -> Vec<&FailStopLine> {
        let mut sorted: Vec<&FailStopLine> = lines.iter().collect();
        sorted.sort_by(|a, b| b.stops.cmp(&a.stops).then(a.first_round.cmp(&b.first_round)));
        sorted
    }
}

/// A failure whose confirming replay did not give the same run.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Unconfirmed {
    /// The failure's signature.
    pub signature: String,
    /// The round that saw it.
    pub round: u64,
    /// How the replay differed (the first diverging component).
    pub why: String,
    /// The round as it ran, written as a bug file (its input, its decisions and digest): `deja
    /// replay` of it boots the round from scratch and shows the difference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// The command that replays it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reproduce: Option<String>,
    /// The last lines of the round's output (a cluster's: each node's, prefixed with its name).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub output: Vec<String>,
}

/// The campaign's progress after one round.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RoundPoint {
    /// The round number.
    pub round: u64,
    /// Distinct edges hit so far: SanitizerCoverage edges and semantic edges and behaviours.
    pub edges_hit: u64,
    /// The semantic edges and behaviours among them (0 in reports of an earlier deja).
    #[serde(default)]
    pub semantic: u64,
    /// Corpus size so far.
    pub corpus_size: u64,
    /// Distinct bugs found so far.
    pub bugs: u64,
}

/// The host time when a round was learned.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct WallPoint {
    /// The round.
    pub round: u64,
    /// Host seconds since the campaign started (over every invocation of a resumed one; display only).
    pub wall_seconds: f64,
}

/// A bounded series of [`WallPoint`]s: one point every `every` rounds, and when there are more than
/// [`WallTimeline::MAX_POINTS`], every other point is dropped and `every` doubles. Which rounds hold a point
/// depends only on the number of rounds, so two runs of one campaign sample the same rounds.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct WallTimeline {
    /// Rounds between two points (a power of two).
    pub every: u64,
    /// The points, in round order.
    pub points: Vec<WallPoint>,
}

impl Default for WallTimeline {
    fn default() -> WallTimeline {
        WallTimeline { every: 1, points: Vec::new() }
    }
}

impl WallTimeline {
    /// The most points kept.
    pub const MAX_POINTS: usize = 512;

    /// Notes that `round` was learned `wall_seconds` into the campaign.
    pub fn record(&mut self, round: u64, wall_seconds: f64) {
        let every = self.every.max(1);
        if !round.is_multiple_of(every) {
            return;
        }
        self.points.push(WallPoint { round, wall_seconds });
        if self.points.len() > Self::MAX_POINTS {
            let wider = every.saturating_mul(2);
            self.points.retain(|p| p.round.is_multiple_of(wider));
            self.every = wider;
        }
    }
}

/// One distinct bug.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BugSummary {
    /// A short identifier.
    pub id: String,
    /// What went wrong, as one line (the failure's signature).
    pub signature: String,
    /// The round in which it was first found.
    pub first_round: u64,
    /// The file holding the reproducer (`bug-<id>.json`).
    pub file: String,
    /// The command that reproduces it.
    pub reproduce: String,
    /// How many decisions the failing run made.
    pub decisions: u64,
    /// How many decisions remain after minimization, if it was minimized.
    pub minimized: Option<u64>,
    /// For a history that no order explains: its shortest failing window, as a timeline (one
    /// line per operation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<String>,
    /// For a run that crashed: per crashed life, the crash state, the crash models that allow
    /// it and what a failure in it is (a bug on the strongest, or a portability hazard), then
    /// the pending operations in program order, each kept, dropped or torn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crash: Option<String>,
}

/// The campaign-wide verdict on one assertion site.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct AssertionLine {
    /// The assertion's message.
    pub message: String,
    /// Its kind (`always`, `sometimes`, `reachable`, ...).
    pub kind: String,
    /// How many times it was evaluated.
    pub hits: u64,
    /// How many of those evaluations were false.
    pub failures: u64,
    /// Its status (`passed`, `failed`, `satisfied`, `unsatisfied`, `reached`, `unreached`, ...).
    pub status: String,
}

#[derive(serde::Serialize)]
struct Wrapped<'a> {
    schema: &'static str,
    campaign: &'a Campaign,
}

#[derive(serde::Deserialize)]
struct Unwrapped {
    schema: String,
    campaign: Campaign,
}

/// The campaign as pretty JSON: `{"schema": "deja.explore-report/1", "campaign": {...}}`.
///
/// A non-finite `wall_seconds` is written as `null` (JSON has no NaN), which [`parse_json`] rejects.
pub fn render_json(c: &Campaign) -> String {
    serde_json::to_string_pretty(&Wrapped { schema: SCHEMA, campaign: c }).expect("a Campaign always serializes")
}

/// Reads back what [`render_json`] wrote, checking the schema tag.
pub fn parse_json(s: &str) -> Result<Campaign, serde_json::Error> {
    let w: Unwrapped = serde_json::from_str(s)?;
    if w.schema != SCHEMA {
        return Err(serde::de::Error::custom(format!("unknown schema {:?}, expected {SCHEMA:?}", w.schema)));
    }
    Ok(w.campaign)
}

/// Escapes `&`, `<`, `>`, `"` and `'` for HTML text and attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(ch),
        }
    }
    out
}

/// `1234567` as `1,234,567`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// A wall-clock duration for people; `-` when it is not a usable number.
fn duration(secs: f64) -> String {
    if !secs.is_finite() || secs < 0.0 {
        return "-".to_string();
    }
    if secs < 60.0 {
        return format!("{secs:.1} s");
    }
    let whole = secs.round() as u64;
    if whole < 3600 {
        format!("{}m {:02}s", whole / 60, whole % 60)
    } else {
        format!("{}h {:02}m", whole / 3600, whole % 3600 / 60)
    }
}

/// `hit / total` as a percentage with one decimal, or `None` when there are no edges.
fn percent(hit: u64, total: u64) -> Option<String> {
    (total > 0).then(|| format!("{:.1}%", hit as f64 * 100.0 / total as f64))
}

/// `"1 bug"`, `"2 bugs"`.
fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{} {}", thousands(n), if n == 1 { one } else { many })
}

/// How the strategy is named in comparisons.
fn strategy_label(strategy: &str) -> String {
    match strategy {
        "coverage" => "coverage-guided".to_string(),
        other => other.to_string(),
    }
}

/// The one-line comparison with the baseline, if there is one.
fn comparison_line(c: &Campaign) -> Option<String> {
    let b = c.baseline.as_deref()?;
    let side = |c: &Campaign| {
        format!(
            "{} edges, {} in {} rounds",
            thousands(c.edges_hit),
            plural(c.bugs.len() as u64, "bug", "bugs"),
            thousands(c.rounds)
        )
    };
    Some(format!("{}: {}; {} baseline: {}", strategy_label(&c.strategy), side(c), b.strategy, side(b)))
}

#[cfg(test)]
mod tests;
