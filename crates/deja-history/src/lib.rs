//! Histories of operations and a linearizability checker, in the manner of Knossos and
//! Porcupine.
//!
//! Clients record each operation through the SDK (`deja_sdk::history`): its invocation, then
//! `ok` with what it returned, `fail` (it certainly did not happen) or nothing (its outcome is
//! unknown, as for a request that timed out: it may have taken effect at any time after its
//! invocation, or never). deja reads those records back from the run with their virtual times
//! ([`from_events`], from the events named `deja_protocol::HISTORY_EVENT`) and asks whether some order of the operations, consistent with real time
//! (an operation that returned before another was invoked comes first), explains every result
//! under a sequential [`Model`]:
//!
//! - [`Model::Register`]: `write V`, `read → V`, `cas [OLD, NEW]`; the register starts `null`;
//! - [`Model::Kv`]: the same per key (linearizability is local, so each key is checked alone);
//! - [`Model::Set`]: `add V`, `read → [V...]` (the whole set, in any order).
//!
//! The search ([`check`]) is Wing and Gong's, with Lowe's memo of (operations placed, state)
//! and a budget of steps; past it the answer is [`Verdict::Unknown`], never a pass. A
//! non-linearizable history comes with its shortest failing prefix: the operation whose
//! completion first makes the history impossible, the operations around it, and for the set
//! model what is missing or extra.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use snafu::{ensure, OptionExt, Snafu};

/// A sequential specification.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Model {
    /// One register: `write`, `read`, `cas`.
    Register,
    /// A map of registers: the same operations, each with a key.
    Kv,
    /// A set: `add`, `read` of the whole set.
    Set,
}

impl Model {
    /// The model's name, as clients give it.
    pub fn name(self) -> &'static str {
        match self {
            Model::Register => "register",
            Model::Kv => "kv",
            Model::Set => "set",
        }
    }

    fn parse(s: &str) -> Option<Model> {
        [Model::Register, Model::Kv, Model::Set].into_iter().find(|m| m.name() == s)
    }
}

/// How an operation ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "end")]
pub enum End {
    /// It returned `value` at `at_ns`.
    Ok {
        /// When it returned.
        at_ns: u64,
        /// What it returned (`null` for writes).
        value: Value,
    },
    /// It certainly did not take effect.
    Fail,
    /// Unknown: it may have taken effect at any time after its invocation, or never.
    Info,
}

/// One operation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Op {
    /// Who invoked it (a node's name, and the SDK's operation number there).
    pub process: String,
    /// `read`, `write`, `cas`, `add`.
    pub f: String,
    /// Its key (the kv model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Its argument (`null` for reads).
    pub value: Value,
    /// When it was invoked.
    pub invoke_ns: u64,
    /// How it ended.
    pub end: End,
}

impl Op {
    fn returned_ns(&self) -> u64 {
        match self.end {
            End::Ok { at_ns, .. } => at_ns,
            _ => u64::MAX,
        }
    }

    fn is_ok(&self) -> bool {
        matches!(self.end, End::Ok { .. })
    }

    /// The operation in words, for timelines: `add 7 → ok`, `read → [1,2]`.
    pub fn describe(&self) -> String {
        let key = self.key.as_ref().map_or(String::new(), |k| format!("[{k}] "));
        let arg = if self.value.is_null() { String::new() } else { format!(" {}", self.value) };
        let end = match &self.end {
            End::Ok { value, .. } if value.is_null() => "ok".to_string(),
            End::Ok { value, .. } => format!("→ {value}"),
            End::Fail => "failed".into(),
            End::Info => "no answer".into(),
        };
        format!("{key}{}{arg} {end}", self.f)
    }
}

/// A history: every operation of a run, under one model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct History {
    /// The model its clients named.
    pub model: Model,
    /// The operations, in invocation order.
    pub ops: Vec<Op>,
}

/// Why a history could not be read from a run's events. `index` is the record's position
/// among the history events.
#[derive(Debug, Clone, PartialEq, Eq, Snafu)]
pub enum HistoryError {
    /// A record's details are not JSON (the parser's message is kept as text so the error
    /// stays comparable).
    #[snafu(display("history record {index}: not JSON: {message}"))]
    NotJson {
        /// Its position among the history events.
        index: usize,
        /// The parser's complaint.
        message: String,
    },
    /// A record without an operation id.
    #[snafu(display("history record {index}: no operation id"))]
    NoId {
        /// Its position among the history events.
        index: usize,
    },
    /// An invocation without a model deja knows.
    #[snafu(display("history record {index}: no known model"))]
    UnknownModel {
        /// Its position among the history events.
        index: usize,
    },
    /// An invocation without an operation name.
    #[snafu(display("history record {index}: no operation name"))]
    NoOperationName {
        /// Its position among the history events.
        index: usize,
    },
    /// An operation invoked while the same process's operation of that id is open.
    #[snafu(display("history record {index}: invoked twice"))]
    InvokedTwice {
        /// Its position among the history events.
        index: usize,
    },
    /// A completion for an operation that is not open.
    #[snafu(display("history record {index}: {kind} for an operation that is not open"))]
    NotOpen {
        /// Its position among the history events.
        index: usize,
        /// `ok`, `fail` or `info`.
        kind: String,
    },
    /// A record of no known type.
    #[snafu(display("history record {index}: no known type (invoke, ok, fail, info)"))]
    UnknownType {
        /// Its position among the history events.
        index: usize,
    },
    /// Clients named two models.
    #[snafu(display("the history mixes the {first} and {second} models; one run checks one model"))]
    Models {
        /// The model named first.
        first: &'static str,
        /// The other one.
        second: &'static str,
    },
}

/// One history record as the SDK sends it, with where and when deja saw it.
#[derive(Debug, Clone)]
pub struct Record<'a> {
    /// The node (or program) that sent it.
    pub node: &'a str,
    /// The event's details (JSON).
    pub details: &'a str,
    /// Its virtual time.
    pub virtual_time_ns: u64,
}

/// The history of a run from its [`EVENT`] records; `None` when it has none.
pub fn from_events<'a>(records: impl IntoIterator<Item = Record<'a>>) -> Result<Option<History>, HistoryError> {
    let mut model: Option<Model> = None;
    let mut ops: Vec<Op> = Vec::new();
    let mut open: BTreeMap<(String, u64), usize> = BTreeMap::new();
    for (index, r) in records.into_iter().enumerate() {
        let v: Value =
            serde_json::from_str(r.details).map_err(|e| NotJsonSnafu { index, message: e.to_string() }.build())?;
        let id = v["id"].as_u64().context(NoIdSnafu { index })?;
        let process = (r.node.to_string(), id);
        match v["type"].as_str() {
            Some("invoke") => {
                let m = v["model"].as_str().and_then(Model::parse).context(UnknownModelSnafu { index })?;
                match model {
                    Some(prev) if prev != m => return ModelsSnafu { first: prev.name(), second: m.name() }.fail(),
                    _ => model = Some(m),
                }
                let f = v["f"].as_str().context(NoOperationNameSnafu { index })?.to_string();
                let key = v.get("key").and_then(|k| k.as_str()).map(String::from);
                ensure!(!open.contains_key(&process), InvokedTwiceSnafu { index });
                open.insert(process.clone(), ops.len());
                ops.push(Op {
                    process: format!("{}#{}", r.node, id),
                    f,
                    key,
                    value: v["value"].clone(),
                    invoke_ns: r.virtual_time_ns,
                    end: End::Info,
                });
            }
            Some(kind @ ("ok" | "fail" | "info")) => {
                let Some(i) = open.remove(&process) else {
                    return NotOpenSnafu { index, kind }.fail();
                };
                ops[i].end = match kind {
                    "ok" => End::Ok { at_ns: r.virtual_time_ns, value: v["value"].clone() },
                    "fail" => End::Fail,
                    _ => End::Info,
                };
            }
            _ => return UnknownTypeSnafu { index }.fail(),
        }
    }
    Ok(model.map(|model| History { model, ops }))
}

/// What the checker concluded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "verdict")]
pub enum Verdict {
    /// Some order explains every result.
    Linearizable {
        /// Operations checked (without the failed ones).
        ops: usize,
    },
    /// No order does.
    NotLinearizable(Box<Violation>),
    /// The search ran out of budget: no conclusion, and never a pass.
    Unknown {
        /// Why.
        reason: String,
    },
}

/// A history no order explains, and its shortest failing prefix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Violation {
    /// The model.
    pub model: Model,
    /// The key, under the kv model.
    pub key: Option<String>,
    /// The operation whose completion first makes the history impossible.
    pub culprit: Op,
    /// The operations of the window, in invocation order: those that overlap the culprit and
    /// the few completed just before it.
    pub window: Vec<Op>,
    /// What the model says is wrong, when it can say (the set model names what a read lacks
    /// or has in excess).
    pub why: Option<String>,
}

impl Violation {
    /// The failure's signature: stable across runs that fail the same way.
    pub fn signature(&self) -> String {
        let key = self.key.as_ref().map_or(String::new(), |k| format!(" on key {k}"));
        format!(
            "history not linearizable under the {} model{key}: a {} cannot be placed",
            self.model.name(),
            self.culprit.f
        )
    }

    /// The window on a timeline, one operation per line, times in seconds of virtual time.
    pub fn timeline(&self) -> String {
        let s = |ns: u64| format!("{:.3}", ns as f64 / 1e9);
        let mut out = vec![self.signature()];
        for op in &self.window {
            let end = match op.end {
                End::Ok { at_ns, .. } => s(at_ns),
                _ => "…".into(),
            };
            let mark = if *op == self.culprit { "  ← cannot be placed" } else { "" };
            out.push(format!("  {:>9} – {:>9} s  {:<12} {}{mark}", s(op.invoke_ns), end, op.process, op.describe()));
        }
        if let Some(why) = &self.why {
            out.push(format!("  {why}"));
        }
        out.join("\n")
    }
}

/// Steps the search may take before it answers [`Verdict::Unknown`].
pub const DEFAULT_BUDGET: u64 = 2_000_000;

/// Checks `h` under its model within `budget` search steps.
pub fn check(h: &History, budget: u64) -> Verdict {
    let ops: Vec<Op> = h.ops.iter().filter(|o| o.end != End::Fail).cloned().collect();
    let groups: Vec<(Option<String>, Vec<Op>)> = match h.model {
        Model::Kv => {
            let mut by_key: BTreeMap<Option<String>, Vec<Op>> = BTreeMap::new();
            for op in ops.iter() {
                by_key.entry(op.key.clone()).or_default().push(op.clone());
            }
            by_key.into_iter().collect()
        }
        _ => vec![(None, ops.clone())],
    };
    let mut spent = 0u64;
    for (key, group) in groups {
        match search(h.model, &group, budget.saturating_sub(spent)) {
            Search::Found(steps) => spent += steps,
            Search::Exhausted => {
                return Verdict::Unknown {
                    reason: format!("the search took more than {budget} steps over {} operations", ops.len()),
                }
            }
            Search::Impossible => return Verdict::NotLinearizable(Box::new(violation(h.model, key, &group, budget))),
        }
    }
    Verdict::Linearizable { ops: ops.len() }
}

/// The shortest failing prefix of a non-linearizable group: the first completion after which
/// the ops completed so far (with the later ones still open) cannot be ordered.
fn violation(model: Model, key: Option<String>, ops: &[Op], budget: u64) -> Violation {
    let mut returns: Vec<u64> = ops.iter().filter(|o| o.is_ok()).map(Op::returned_ns).collect();
    returns.sort_unstable();
    returns.dedup();
    let prefix = |upto: u64| -> Vec<Op> {
        ops.iter()
            .filter(|o| o.invoke_ns <= upto)
            .map(|o| if o.returned_ns() <= upto { o.clone() } else { Op { end: End::Info, ..o.clone() } })
            .collect()
    };
    let fails = |upto: u64| matches!(search(model, &prefix(upto), budget), Search::Impossible);
    let (mut lo, mut hi) = (0usize, returns.len().saturating_sub(1));
    while lo < hi {
        let mid = (lo + hi) / 2;
        if fails(returns[mid]) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    let at = returns.get(lo).copied().unwrap_or(0);
    let culprit = ops.iter().find(|o| o.returned_ns() == at).cloned().unwrap_or_else(|| ops[0].clone());
    let before: Vec<&Op> = ops.iter().filter(|o| o.returned_ns() < culprit.invoke_ns).collect();
    let recent: BTreeSet<usize> = {
        let mut idx: Vec<usize> = (0..ops.len()).filter(|&i| ops[i].returned_ns() < culprit.invoke_ns).collect();
        idx.sort_by_key(|&i| ops[i].returned_ns());
        idx.into_iter().rev().take(4).collect()
    };
    let (why, named) = match model {
        Model::Set => set_explanation(&before, &culprit, ops),
        _ => (None, BTreeSet::new()),
    };
    let window: Vec<Op> = ops
        .iter()
        .enumerate()
        .filter(|(i, o)| {
            recent.contains(i)
                || (o.invoke_ns <= at && o.returned_ns() >= culprit.invoke_ns)
                || (o.f == "add" && named.contains(&o.value.to_string()))
        })
        .map(|(_, o)| o.clone())
        .collect();
    Violation { model, key, culprit, window, why }
}

/// What a set read lacks or has in excess, in words, and the values it names.
fn set_explanation(before: &[&Op], read: &Op, all: &[Op]) -> (Option<String>, BTreeSet<String>) {
    let End::Ok { value: Value::Array(got), .. } = &read.end else { return (None, BTreeSet::new()) };
    let got: BTreeSet<String> = got.iter().map(Value::to_string).collect();
    let acked: BTreeSet<String> =
        before.iter().filter(|o| o.f == "add" && o.is_ok()).map(|o| o.value.to_string()).collect();
    let invoked: BTreeSet<String> =
        all.iter().filter(|o| o.f == "add" && o.invoke_ns <= read.returned_ns()).map(|o| o.value.to_string()).collect();
    let missing: Vec<&String> = acked.difference(&got).collect();
    let extra: Vec<&String> = got.difference(&invoked).collect();
    let list = |v: &[&String]| v.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ");
    let why = match (missing.is_empty(), extra.is_empty()) {
        (false, _) => Some(format!(
            "the read lacks {} acknowledged before it began: {}",
            if missing.len() == 1 { "an add" } else { "adds" },
            list(&missing)
        )),
        (true, false) => Some(format!("the read holds values no add had written yet: {}", list(&extra))),
        _ => None,
    };
    (why, missing.into_iter().cloned().collect())
}

enum Search {
    Found(u64),
    Impossible,
    Exhausted,
}

/// A value as the states hold it: its compact JSON (keys sorted).
fn canon(v: &Value) -> String {
    v.to_string()
}

/// The sequential state of a model.
#[derive(Clone, PartialEq, Eq, Hash)]
enum State {
    Register(String),
    Set(BTreeSet<String>),
}

impl State {
    fn initial(model: Model) -> State {
        match model {
            Model::Register | Model::Kv => State::Register(Value::Null.to_string()),
            Model::Set => State::Set(BTreeSet::new()),
        }
    }

    /// The state after `op`, if `op` can take effect here with the result it had.
    fn step(&self, op: &Op) -> Option<State> {
        let result = match &op.end {
            End::Ok { value, .. } => Some(value),
            _ => None,
        };
        match (self, op.f.as_str()) {
            (State::Register(_), "write") => Some(State::Register(op.value.to_string())),
            (State::Register(cur), "read") => match result {
                Some(v) if canon(v) != *cur => None,
                _ => Some(self.clone()),
            },
            (State::Register(cur), "cas") => {
                let (old, new) = (op.value.get(0)?, op.value.get(1)?);
                if canon(old) == *cur {
                    Some(State::Register(new.to_string()))
                } else {
                    None
                }
            }
            (State::Set(s), "add") => {
                let mut s = s.clone();
                s.insert(op.value.to_string());
                Some(State::Set(s))
            }
            (State::Set(s), "read") => match result {
                Some(Value::Array(v)) => {
                    let got: BTreeSet<String> = v.iter().map(Value::to_string).collect();
                    (got == *s).then(|| self.clone())
                }
                Some(_) => None,
                None => Some(self.clone()),
            },
            _ => None,
        }
    }
}

/// Wing and Gong's search with Lowe's memo: is there an order of `ops` consistent with real
/// time in which every ok operation's result is the model's?
fn search(model: Model, ops: &[Op], budget: u64) -> Search {
    let n = ops.len();
    let must: usize = ops.iter().filter(|o| o.is_ok()).count();
    let mut placed = vec![false; n];
    let mut seen: HashSet<(Vec<u64>, State)> = HashSet::new();
    let mut steps = 0u64;
    // Depth-first over (state, next candidate index), with the ops placed on a stack.
    let mut stack: Vec<(usize, State)> = Vec::new();
    let mut state = State::initial(model);
    let mut done_ok = 0usize;
    let mut from = 0usize;
    let bits = |placed: &[bool]| -> Vec<u64> {
        let mut w = vec![0u64; placed.len().div_ceil(64)];
        for (i, p) in placed.iter().enumerate() {
            if *p {
                w[i / 64] |= 1 << (i % 64);
            }
        }
        w
    };
    loop {
        if done_ok == must {
            return Search::Found(steps);
        }
        steps += 1;
        if steps > budget {
            return Search::Exhausted;
        }
        // The earliest return among the ops not yet placed: nothing invoked after it may go next.
        let horizon = (0..n).filter(|&i| !placed[i]).map(|i| ops[i].returned_ns()).min().unwrap_or(u64::MAX);
        let next = (from..n).find_map(|i| {
            if placed[i] || ops[i].invoke_ns > horizon {
                return None;
            }
            let after = state.step(&ops[i])?;
            placed[i] = true;
            let fresh = seen.insert((bits(&placed), after.clone()));
            placed[i] = false;
            fresh.then_some((i, after))
        });
        match next {
            Some((i, after)) => {
                placed[i] = true;
                if ops[i].is_ok() {
                    done_ok += 1;
                }
                stack.push((i, std::mem::replace(&mut state, after)));
                from = 0;
            }
            None => {
                let Some((i, before)) = stack.pop() else { return Search::Impossible };
                placed[i] = false;
                if ops[i].is_ok() {
                    done_ok -= 1;
                }
                state = before;
                from = i + 1;
            }
        }
    }
}

#[cfg(test)]
mod tests;
