//! `deja explain BUG`: when did a cluster bug become inevitable? From moments spread over the
//! bug's run (by cluster decision), continuations with fresh randomness estimate how likely the
//! same failure still is; bisection narrows the step where it crosses 90%, and the decisions and
//! faults taken in that step are named. Prints the curve; writes it with a plot to
//! `OUT/explain.json` and `OUT/explain.html`.

use std::fmt::Write as _;
use std::path::PathBuf;

use deja_cluster::moment::At;
use deja_explore::cluster::moments::{self, Branches, Estimator, Explanation};
use deja_explore::{ClusterInput, ClusterTarget, ExploreError, FailureSignature};

use crate::exit::Exit;

/// Arguments of `deja explain`.
#[derive(Debug, clap::Args)]
pub struct ExplainArgs {
    /// Moments spread evenly over the run's cluster decisions, besides its start.
    #[arg(long, default_value_t = 8)]
    pub moments: u64,
    /// Continuations from each moment (the sample each estimate is made of).
    #[arg(long, default_value_t = 8)]
    pub branches: u64,
    /// Bisections between the last moment below 90% and the first of those at or above it.
    #[arg(long, default_value_t = 6)]
    pub refine: u32,
    /// Threads (default: this host's cores; the estimates do not depend on it).
    #[arg(long, value_name = "N")]
    pub jobs: Option<usize>,
    /// Directory for explain.json and explain.html.
    #[arg(long, default_value = "deja-explain")]
    pub out: PathBuf,
    /// Where a node's binary is (`NODE=PATH`) or the cluster file, as for `deja replay`.
    #[arg(long, value_name = "PATH|NODE=PATH")]
    pub program: Vec<String>,
    /// The cluster bug file.
    pub bug: PathBuf,
}

/// Branches of the bug's run from a moment at a decision.
struct Bug<'a> {
    target: &'a ClusterTarget,
    input: &'a ClusterInput,
    signature: &'a FailureSignature,
    jobs: usize,
}

impl Estimator for Bug<'_> {
    fn estimate(&mut self, decision: u64, n: u64) -> Result<Branches, ExploreError> {
        let b = moments::branches(self.target, self.input, self.signature, At::Decision(decision), n, self.jobs)?;
        eprintln!(
            "deja:   from decision {decision:>6} ({:>10.3} ms): {}/{} failed as the bug did",
            b.time_ns as f64 / 1e6,
            b.same,
            b.runs
        );
        Ok(b)
    }
}

/// `deja explain`: [`Exit::Clean`] with the curve (whether or not the failure ever became
/// inevitable), [`Exit::Incomplete`] when the bug does not reproduce or a branch could not run,
/// and the load errors of `deja replay`.
pub fn main(args: ExplainArgs, settings: &deja_vmm::Settings) -> Exit {
    let (bug, target) = match crate::at::cluster_bug("explain", &args.bug, &args.program, settings) {
        Ok(x) => x,
        Err(code) => return code,
    };
    let run = match deja_explore::cluster::run_cluster_input(&target, &bug.input, &mut |_, _, _| {}) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("deja: explain: the replay failed to run: {e}");
            return Exit::Incomplete;
        }
    };
    if run.failure.as_ref() != Some(&bug.signature) {
        eprintln!("deja: explain: bug {} does not reproduce: nothing to explain (`deja replay` says more)", bug.id);
        return Exit::Incomplete;
    }
    let decisions = run.report.decisions.len() as u64;
    eprintln!(
        "deja: explain bug {} ({}): {} branches from each of {} moments over its {decisions} cluster decisions, \
         fresh randomness after each",
        bug.id,
        bug.signature,
        args.branches,
        args.moments + 1
    );
    let mut est =
        Bug { target: &target, input: &bug.input, signature: &bug.signature, jobs: crate::at::jobs(args.jobs) };
    let e = match moments::explain(decisions, args.moments, args.branches, args.refine, &mut est) {
        Ok(e) => e,
        Err(err) => {
            eprintln!("deja: explain: {err}");
            return Exit::Incomplete;
        }
    };
    let step = e.inevitable.as_ref().map(|(first, before)| match before {
        Some(b) => what_happened(&run.report, first, Some(b)),
        // Certain from the start: what the input places is the cause.
        None => {
            let placed = bug.input.fault_words();
            match placed.is_empty() {
                true => vec!["the bug's seed and decisions alone (its input places no fault)".to_string()],
                false => placed.into_iter().map(|f| format!("placed by the input: {f}")).collect(),
            }
        }
    });
    print_curve(&e, step.as_deref());
    if let Err(err) = write(&args.out, &bug.id, &bug.signature.to_string(), &e, step.as_deref()) {
        eprintln!("deja: explain: {err}");
        return Exit::DejaFailed;
    }
    eprintln!("deja: curve in {0}/explain.json and {0}/explain.html", args.out.display());
    Exit::Clean
}

/// The decisions and faults of the step from `before` to `first`, in words.
fn what_happened(report: &deja_cluster::ClusterReport, first: &Branches, before: Option<&Branches>) -> Vec<String> {
    let (from, from_t) = before.map_or((0, 0), |b| (b.decision, b.time_ns));
    let mut out: Vec<String> = report
        .decisions
        .iter()
        .filter(|d| d.index >= from && d.index < first.decision)
        .map(|d| format!("decision {} at {:.3} ms: {} → {}", d.index, d.time_ns as f64 / 1e6, d.point, d.choice))
        .collect();
    out.extend(
        report
            .faults
            .iter()
            .filter(|f| f.time_ns >= from_t && f.time_ns <= first.time_ns)
            .map(|f| format!("fault at {:.3} ms: {} {}", f.time_ns as f64 / 1e6, f.kind, f.detail)),
    );
    out
}

fn print_curve(e: &Explanation, step: Option<&[String]>) {
    println!("decision        time   failed as the bug did");
    for b in &e.curve {
        let bar = "#".repeat((b.p() * 20.0).round() as usize);
        println!("{:>8} {:>10.3} ms   {:>3}/{:<3} {bar}", b.decision, b.time_ns as f64 / 1e6, b.same, b.runs);
    }
    match (&e.inevitable, step) {
        (Some((first, before)), Some(step)) => {
            let since = before.as_ref().map_or_else(
                || "from the start of the run".to_string(),
                |b| format!("after decision {} ({}/{})", b.decision, b.same, b.runs),
            );
            println!(
                "inevitable (at least {:.0}% of branches fail as the bug did) from decision {} at {:.3} ms ({}/{}), {since}; \
                 {} branches in all",
                e.threshold * 100.0,
                first.decision,
                first.time_ns as f64 / 1e6,
                first.same,
                first.runs,
                e.runs
            );
            for s in step {
                println!("  {s}");
            }
        }
        _ => println!(
            "never inevitable: no moment from which every later one reached {:.0}% ({} branches in all)",
            e.threshold * 100.0,
            e.runs
        ),
    }
}

/// `explain.json` and `explain.html` (the curve as an SVG plot) in `out`.
fn write(
    out: &std::path::Path,
    id: &str,
    signature: &str,
    e: &Explanation,
    step: Option<&[String]>,
) -> Result<(), String> {
    std::fs::create_dir_all(out).map_err(|err| format!("{}: {err}", out.display()))?;
    let json = serde_json::json!({
        "schema": "deja.explain/1", "bug": id, "signature": signature, "explanation": e, "step": step,
    });
    let path = out.join("explain.json");
    std::fs::write(&path, format!("{json:#}\n")).map_err(|err| format!("{}: {err}", path.display()))?;
    let path = out.join("explain.html");
    std::fs::write(&path, html(id, signature, e, step)).map_err(|err| format!("{}: {err}", path.display()))
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// The curve as a page: the share of branches failing as the bug did against the decision, the
/// 90% line, the moment named.
fn html(id: &str, signature: &str, e: &Explanation, step: Option<&[String]>) -> String {
    let (w, h, pad) = (640.0, 240.0, 30.0);
    let last = e.curve.last().map_or(1, |b| b.decision.max(1)) as f64;
    let x = |d: u64| pad + (w - 2.0 * pad) * d as f64 / last;
    let y = |p: f64| h - pad - (h - 2.0 * pad) * p;
    let points: Vec<String> = e.curve.iter().map(|b| format!("{:.1},{:.1}", x(b.decision), y(b.p()))).collect();
    let mut svg = format!("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\">");
    let _ = write!(
        svg,
        "<line x1=\"{pad}\" y1=\"{0:.1}\" x2=\"{1:.1}\" y2=\"{0:.1}\" stroke=\"#c33\" stroke-dasharray=\"4\"/>",
        y(e.threshold),
        w - pad
    );
    let _ = write!(svg, "<polyline fill=\"none\" stroke=\"#246\" stroke-width=\"2\" points=\"{}\"/>", points.join(" "));
    for b in &e.curve {
        let _ = write!(
            svg,
            "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"#246\"><title>decision {}: {}/{}</title></circle>",
            x(b.decision),
            y(b.p()),
            b.decision,
            b.same,
            b.runs
        );
    }
    if let Some((first, _)) = &e.inevitable {
        let _ = write!(
            svg,
            "<line x1=\"{0:.1}\" y1=\"{pad}\" x2=\"{0:.1}\" y2=\"{1:.1}\" stroke=\"#c33\"/>",
            x(first.decision),
            h - pad
        );
    }
    let _ = write!(svg, "<text x=\"{pad}\" y=\"{}\" font-size=\"11\">decision 0</text><text x=\"{}\" y=\"{}\" font-size=\"11\" text-anchor=\"end\">decision {last}</text></svg>", h - 8.0, w - pad, h - 8.0);
    let said = step.map_or_else(
        || "<p>Never inevitable: no moment from which every later one reached the line.</p>".to_string(),
        |s| format!("<ul>{}</ul>", s.iter().map(|l| format!("<li>{}</li>", escape(l))).collect::<String>()),
    );
    format!(
        "<!doctype html><meta charset=\"utf-8\"><title>deja explain {id}</title>\
         <h1>When bug {id} became inevitable</h1><p>{}</p><p>The share of continuations with fresh randomness that \
         fail as the bug did, from moments of its run (by cluster decision); the dashed line is {:.0}%, {} branches \
         in all.</p>{svg}{said}\n",
        escape(signature),
        e.threshold * 100.0,
        e.runs
    )
}
