//! The self-contained HTML page.

use std::fmt::Write as _;

use crate::{
    comparison_line, duration, escape, percent, plural, status_tone, strategy_label, thousands, Campaign, RoundPoint,
    Tone,
};

const CSS: &str = r#"
*{box-sizing:border-box}
body{margin:0;background:#f4f5f7;color:#1f2933;font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif}
main{max-width:1120px;margin:0 auto;padding:32px 28px 48px}
header{margin-bottom:24px}
.eyebrow{font-size:13px;letter-spacing:.08em;text-transform:uppercase;color:#6b7280;font-weight:600}
h1{margin:4px 0 0;font-size:26px;font-weight:600;word-break:break-all}
.verdict{margin:6px 0 2px;font-size:46px;font-weight:800;letter-spacing:-.02em;line-height:1.1}
.verdict.bad{color:#c81e1e}
.verdict.good{color:#15803d}
.hash{font:12px ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;color:#9aa1ab;word-break:break-all}
.cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(150px,1fr));gap:12px;margin:0 0 24px}
.card{background:#fff;border:1px solid #e3e6ea;border-radius:10px;padding:12px 16px}
.card .label{font-size:12px;text-transform:uppercase;letter-spacing:.06em;color:#6b7280;font-weight:600}
.card .value{font-size:26px;font-weight:700;line-height:1.2;margin-top:2px;white-space:nowrap}
.card .sub{font-size:13px;color:#6b7280}
.card.bad .value{color:#c81e1e}
.card.good .value{color:#15803d}
section{background:#fff;border:1px solid #e3e6ea;border-radius:10px;padding:18px 20px;margin:0 0 24px}
h2{margin:0 0 12px;font-size:18px;font-weight:650}
h2 .count{color:#6b7280;font-weight:500}
.legend{display:flex;flex-wrap:wrap;gap:18px;font-size:13px;color:#374151;margin:-4px 0 6px}
.legend span{display:inline-flex;align-items:center;gap:6px}
.sw{display:inline-block;width:22px;height:0;border-top:3px solid}
.sw.edges{border-color:#2563eb}
.sw.corpus{border-color:#5eb8a8}
.sw.base{border-top:2px dashed #6b7280}
.sw.bug{width:10px;height:10px;border:0;border-radius:50%;background:#dc2626}
svg.chart{display:block;width:100%;height:auto}
p.compare{font-size:15px;margin:0 0 8px}
table{width:100%;border-collapse:collapse;font-size:14px}
th{text-align:left;font-size:12px;text-transform:uppercase;letter-spacing:.05em;color:#6b7280;font-weight:600;border-bottom:1px solid #e3e6ea;padding:6px 10px}
td{border-bottom:1px solid #f0f1f3;padding:8px 10px;vertical-align:top}
tr:last-child td{border-bottom:0}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.id{font-weight:700;color:#c81e1e;white-space:nowrap;font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
td.sig{word-break:break-word}
code{font:13px ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;background:#f3f4f6;border:1px solid #e5e7eb;border-radius:5px;padding:2px 6px;overflow-wrap:break-word;display:inline-block}
.file{font-size:12px;color:#6b7280;margin-top:4px}
.badge{display:inline-block;border-radius:999px;padding:1px 10px;font-size:12px;font-weight:700;white-space:nowrap}
.badge.good{background:#dcfce7;color:#166534}
.badge.bad{background:#fee2e2;color:#991b1b}
.badge.warn{background:#fef3c7;color:#92400e}
.badge.muted{background:#eceef1;color:#4b5563}
.empty{color:#6b7280;font-style:italic;margin:0}
footer{color:#9aa1ab;font-size:12px;text-align:center}
"#;

const EDGES: &str = "#2563eb";
const CORPUS: &str = "#5eb8a8";
const BASE: &str = "#6b7280";
const BUG: &str = "#dc2626";

/// One self-contained HTML page (inline CSS and SVG, no JavaScript, no external resources): the program and the
/// verdict in big type, a row of key numbers, a chart of coverage over rounds with the bugs marked at their first
/// round, the bugs with their reproduce commands, and the assertions with colored status badges.
pub fn render_html(c: &Campaign) -> String {
    let bugs = c.bugs.len() as u64;
    let (verdict, verdict_class) = if bugs == 0 {
        ("no bug found".to_string(), "good")
    } else {
        (format!("{} found", plural(bugs, "bug", "bugs")), "bad")
    };
    let mut h = String::with_capacity(16 * 1024);
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{} · {} · deja explore</title>\n<style>{CSS}</style>\n</head>\n<body>\n<main>\n",
        escape(&verdict),
        escape(&c.program)
    );
    let _ = write!(
        h,
        "<header>\n<div class=\"eyebrow\">deja explore · {} strategy · {} mode</div>\n<h1>{}</h1>\n\
         <div class=\"verdict {verdict_class}\">{}</div>\n{}</header>\n",
        escape(&strategy_label(&c.strategy)),
        escape(&c.mode),
        escape(&c.program),
        escape(&verdict),
        if c.program_blake3.is_empty() {
            String::new()
        } else {
            format!("<div class=\"hash\">blake3 {}</div>\n", escape(&c.program_blake3))
        }
    );
    cards(&mut h, c);
    if let Some(b) = c.baseline.as_deref() {
        comparison(&mut h, c, b);
    }
    h.push_str("<section>\n<h2>Coverage over rounds</h2>\n");
    legend(&mut h, c);
    chart(&mut h, c);
    h.push_str("</section>\n");
    shards_table(&mut h, c);
    bugs_table(&mut h, c);
    unconfirmed_table(&mut h, c);
    no_progress_table(&mut h, c);
    assertions_table(&mut h, c);
    let _ = write!(h, "<footer>deja explore report · schema {}</footer>\n</main>\n</body>\n</html>\n", crate::SCHEMA);
    h
}

fn card(h: &mut String, class: &str, label: &str, value: &str, sub: &str) {
    let _ = writeln!(
        h,
        "<div class=\"card {class}\"><div class=\"label\">{}</div><div class=\"value\">{}</div>\
         <div class=\"sub\">{}</div></div>",
        escape(label),
        escape(value),
        escape(sub)
    );
}

fn cards(h: &mut String, c: &Campaign) {
    h.push_str("<div class=\"cards\">\n");
    let bugs = c.bugs.len() as u64;
    let first = c.bugs.iter().map(|b| b.first_round).min();
    let bug_sub = first.map(|r| format!("first in round {}", thousands(r))).unwrap_or_else(|| "none found".into());
    card(h, if bugs == 0 { "good" } else { "bad" }, "Bugs", &thousands(bugs), &bug_sub);
    if c.edges_total == 0 {
        card(h, "", "Coverage", &thousands(c.edges_hit), "no instrumentation");
    } else {
        let sub = format!(
            "of {} edges · {}",
            thousands(c.edges_total),
            percent(c.edges_hit, c.edges_total).unwrap_or_default()
        );
        card(h, "", "Edges hit", &thousands(c.edges_hit), &sub);
    }
    card(h, "", "Rounds", &thousands(c.rounds), &format!("in {}", duration(c.wall_seconds)));
    card(h, "", "Corpus", &thousands(c.corpus_size), "inputs kept");
    let failed = c.assertions.iter().filter(|a| status_tone(&a.status) == Tone::Bad).count() as u64;
    let total = c.assertions.len() as u64;
    let (class, sub) = if total == 0 {
        ("", "none declared".to_string())
    } else if failed == 0 {
        ("good", format!("{} all fine", thousands(total)))
    } else {
        ("bad", format!("failing of {}", thousands(total)))
    };
    let value = if total == 0 {
        "-".to_string()
    } else if failed == 0 {
        "OK".to_string()
    } else {
        thousands(failed)
    };
    card(h, class, "Assertions", &value, &sub);
    card(h, "", "Seed", &c.seed.to_string(), &format!("{} · {}", strategy_label(&c.strategy), c.mode));
    h.push_str("</div>\n");
}

fn comparison(h: &mut String, c: &Campaign, b: &Campaign) {
    let _ = write!(
        h,
        "<section>\n<h2>Compared with a {} baseline</h2>\n<p class=\"compare\">{}</p>\n",
        escape(&b.strategy),
        escape(&comparison_line(c).unwrap_or_default())
    );
    h.push_str(
        "<table>\n<tr><th></th><th class=\"num\">edges hit</th><th class=\"num\">bugs</th>\
         <th class=\"num\">first bug at round</th><th class=\"num\">corpus</th><th class=\"num\">rounds</th></tr>\n",
    );
    for (name, x) in [(strategy_label(&c.strategy), c), (format!("{} baseline", b.strategy), b)] {
        let first = x.bugs.iter().map(|b| b.first_round).min().map(thousands).unwrap_or_else(|| "-".into());
        let _ = writeln!(
            h,
            "<tr><td><b>{}</b></td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
            escape(&name),
            thousands(x.edges_hit),
            thousands(x.bugs.len() as u64),
            first,
            thousands(x.corpus_size),
            thousands(x.rounds)
        );
    }
    h.push_str("</table>\n</section>\n");
}

fn legend(h: &mut String, c: &Campaign) {
    h.push_str("<div class=\"legend\">");
    let _ = write!(h, "<span><i class=\"sw edges\"></i>edges hit ({})</span>", thousands(c.edges_hit));
    let _ = write!(h, "<span><i class=\"sw corpus\"></i>corpus size ({}, right axis)</span>", thousands(c.corpus_size));
    if let Some(b) = c.baseline.as_deref() {
        let _ = write!(
            h,
            "<span><i class=\"sw base\"></i>{} baseline edges hit ({})</span>",
            escape(&b.strategy),
            thousands(b.edges_hit)
        );
    }
    if !c.bugs.is_empty() {
        h.push_str("<span><i class=\"sw bug\"></i>bug, at the round it was first found</span>");
    }
    h.push_str("</div>\n");
}

/// A "nice" axis for values in `0..=max`: `(top, step)` with `step` one of 1, 2, 5 times a power of ten, at most
/// `target` steps, and `top` a multiple of `step` no less than `max` (and at least `step`).
pub(crate) fn nice_axis(max: u64, target: u64) -> (u64, u64) {
    let mut step = 1u64;
    'outer: loop {
        for m in [1u64, 2, 5] {
            let s = step.saturating_mul(m);
            if max.div_ceil(s) <= target || s == u64::MAX {
                step = s;
                break 'outer;
            }
        }
        step = step.saturating_mul(10);
    }
    let top = max.div_ceil(step).max(1).saturating_mul(step);
    (top, step)
}

/// The ticks `0, step, 2 * step, ..., top`.
fn ticks(top: u64, step: u64) -> Vec<u64> {
    let step = step.max(1);
    let mut out = vec![0u64];
    while let Some(next) = out.last().and_then(|v| v.checked_add(step)).filter(|v| *v <= top) {
        out.push(next);
    }
    out
}

/// Formats an SVG coordinate; never writes NaN or infinity.
fn n(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.1}")
    } else {
        "0".to_string()
    }
}

/// Compact tick labels: 1200 -> 1.2k, 3000000 -> 3M.
fn short(v: u64) -> String {
    let (div, suffix) = match v {
        0..=9_999 => return v.to_string(),
        10_000..=999_999 => (1_000, "k"),
        1_000_000..=999_999_999 => (1_000_000, "M"),
        _ => (1_000_000_000, "G"),
    };
    if v.is_multiple_of(div) {
        format!("{}{suffix}", v / div)
    } else {
        format!("{:.1}{suffix}", v as f64 / div as f64)
    }
}

/// The value of a series at `round`: the last point at or before it (0 before the first).
fn value_at(points: &[RoundPoint], round: u64, get: impl Fn(&RoundPoint) -> u64) -> u64 {
    points.iter().take_while(|p| p.round <= round).last().map(get).unwrap_or(0)
}

struct Plot {
    left: f64,
    top: f64,
    width: f64,
    height: f64,
    x_top: u64,
}

impl Plot {
    fn x(&self, round: u64) -> f64 {
        self.left + self.width * (round as f64 / self.x_top.max(1) as f64)
    }
    fn y(&self, v: u64, y_top: u64) -> f64 {
        self.top + self.height - self.height * (v as f64 / y_top.max(1) as f64)
    }
    fn bottom(&self) -> f64 {
        self.top + self.height
    }
    fn right(&self) -> f64 {
        self.left + self.width
    }
}

fn polyline(p: &Plot, points: &[RoundPoint], y_top: u64, get: impl Fn(&RoundPoint) -> u64) -> String {
    points.iter().map(|pt| format!("{},{}", n(p.x(pt.round)), n(p.y(get(pt), y_top)))).collect::<Vec<_>>().join(" ")
}

fn chart(h: &mut String, c: &Campaign) {
    const W: f64 = 1000.0;
    const H: f64 = 400.0;
    let p_base = c.baseline.as_deref().map(|b| b.timeline.as_slice()).unwrap_or(&[]);
    let max_round = c
        .timeline
        .iter()
        .chain(p_base)
        .map(|p| p.round)
        .chain(c.bugs.iter().map(|b| b.first_round))
        .chain([c.rounds])
        .max()
        .unwrap_or(0);
    let max_edges = c.timeline.iter().chain(p_base).map(|p| p.edges_hit).max().unwrap_or(0);
    let max_corpus = c.timeline.iter().map(|p| p.corpus_size).max().unwrap_or(0);
    let (x_top, x_step) = nice_axis(max_round.max(1), 8);
    let (e_top, e_step) = nice_axis(max_edges.max(1), 5);
    let (k_top, k_step) = nice_axis(max_corpus.max(1), 5);
    let label_rows = if c.bugs.len() > 1 { 2.0 } else { 1.0 };
    let p = Plot { left: 72.0, top: 16.0 + 16.0 * label_rows, width: W - 72.0 - 72.0, height: 0.0, x_top };
    let p = Plot { height: H - p.top - 56.0, ..p };

    let _ = writeln!(
        h,
        "<svg class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {W} {H}\" role=\"img\" \
         aria-label=\"edges hit over rounds\" font-family=\"system-ui,-apple-system,Segoe UI,Roboto,Arial,sans-serif\" \
         font-size=\"13\">"
    );
    // Grid and left (edges) axis.
    for v in ticks(e_top, e_step) {
        let y = n(p.y(v, e_top));
        let _ = writeln!(
            h,
            "<line x1=\"{}\" y1=\"{y}\" x2=\"{}\" y2=\"{y}\" stroke=\"{}\" stroke-width=\"1\"/>\
             <text x=\"{}\" y=\"{y}\" dy=\"4\" text-anchor=\"end\" fill=\"#4b5563\">{}</text>",
            n(p.left),
            n(p.right()),
            if v == 0 { "#9ca3af" } else { "#eceef1" },
            n(p.left - 8.0),
            short(v)
        );
    }
    // Right (corpus) axis labels, on their own scale.
    for v in ticks(k_top, k_step) {
        let _ = writeln!(
            h,
            "<text x=\"{}\" y=\"{}\" dy=\"4\" fill=\"{CORPUS}\">{}</text>",
            n(p.right() + 8.0),
            n(p.y(v, k_top)),
            short(v)
        );
    }
    // X axis ticks.
    for r in ticks(x_top, x_step) {
        let x = n(p.x(r));
        let _ = writeln!(
            h,
            "<line x1=\"{x}\" y1=\"{}\" x2=\"{x}\" y2=\"{}\" stroke=\"#9ca3af\"/>\
             <text x=\"{x}\" y=\"{}\" text-anchor=\"middle\" fill=\"#4b5563\">{}</text>",
            n(p.bottom()),
            n(p.bottom() + 5.0),
            n(p.bottom() + 20.0),
            short(r)
        );
    }
    // Axis titles.
    let _ = writeln!(
        h,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"#374151\" font-weight=\"600\">round</text>",
        n(p.left + p.width / 2.0),
        n(H - 10.0)
    );
    let mid = n(p.top + p.height / 2.0);
    let _ = writeln!(
        h,
        "<text transform=\"translate(18 {mid}) rotate(-90)\" text-anchor=\"middle\" fill=\"{EDGES}\" \
         font-weight=\"600\">edges hit</text>"
    );
    let _ = writeln!(
        h,
        "<text transform=\"translate({} {mid}) rotate(90)\" text-anchor=\"middle\" fill=\"{CORPUS}\" \
         font-weight=\"600\">corpus size</text>",
        n(W - 14.0)
    );

    if c.timeline.is_empty() && p_base.is_empty() {
        let _ = writeln!(
            h,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"#9ca3af\" font-size=\"16\">no timeline recorded</text>",
            n(p.left + p.width / 2.0),
            n(p.top + p.height / 2.0)
        );
    } else if c.edges_total == 0 && max_edges == 0 {
        let _ = writeln!(
            h,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"#9ca3af\" font-size=\"16\">\
             the program has no coverage instrumentation</text>",
            n(p.left + p.width / 2.0),
            n(p.top + p.height / 3.0)
        );
    }

    // Series: corpus (light), baseline (dashed), edges (area + line).
    if !c.timeline.is_empty() {
        let _ = writeln!(
            h,
            "<polyline points=\"{}\" fill=\"none\" stroke=\"{CORPUS}\" stroke-opacity=\"0.75\" stroke-width=\"2\" \
             stroke-linejoin=\"round\"/>",
            polyline(&p, &c.timeline, k_top, |pt| pt.corpus_size)
        );
    }
    if !p_base.is_empty() {
        let _ = writeln!(
            h,
            "<polyline points=\"{}\" fill=\"none\" stroke=\"{BASE}\" stroke-width=\"2\" stroke-dasharray=\"7 5\" \
             stroke-linejoin=\"round\"/>",
            polyline(&p, p_base, e_top, |pt| pt.edges_hit)
        );
    }
    if let (Some(first), Some(last)) = (c.timeline.first(), c.timeline.last()) {
        let line = polyline(&p, &c.timeline, e_top, |pt| pt.edges_hit);
        let _ = writeln!(
            h,
            "<polygon points=\"{},{} {line} {},{}\" fill=\"{EDGES}\" fill-opacity=\"0.08\"/>\n\
             <polyline points=\"{line}\" fill=\"none\" stroke=\"{EDGES}\" stroke-width=\"3\" stroke-linejoin=\"round\"/>\n\
             <circle cx=\"{}\" cy=\"{}\" r=\"4\" fill=\"{EDGES}\"/>",
            n(p.x(first.round)),
            n(p.bottom()),
            n(p.x(last.round)),
            n(p.bottom()),
            n(p.x(last.round)),
            n(p.y(last.edges_hit, e_top))
        );
    }

    // Bugs: a red rule at the first round, a dot on the coverage line, and the id above the plot.
    for (i, b) in c.bugs.iter().enumerate() {
        let x = p.x(b.first_round);
        let y = p.y(value_at(&c.timeline, b.first_round, |pt| pt.edges_hit), e_top);
        let row = (i % label_rows as usize) as f64;
        let label_y = p.top - 8.0 - 16.0 * (label_rows - 1.0 - row);
        let anchor = if x > p.right() - 40.0 {
            "end"
        } else if x < p.left + 40.0 {
            "start"
        } else {
            "middle"
        };
        let _ = writeln!(
            h,
            "<g><title>{} · round {}: {}</title>\
             <line x1=\"{x}\" y1=\"{}\" x2=\"{x}\" y2=\"{}\" stroke=\"{BUG}\" stroke-width=\"1.5\" stroke-dasharray=\"3 3\"/>\
             <circle cx=\"{x}\" cy=\"{}\" r=\"6\" fill=\"{BUG}\" stroke=\"#fff\" stroke-width=\"2\"/>\
             <text x=\"{x}\" y=\"{}\" text-anchor=\"{anchor}\" fill=\"{BUG}\" font-weight=\"700\">{}</text></g>",
            escape(&b.id),
            b.first_round,
            escape(&b.signature),
            n(label_y + 4.0),
            n(p.bottom()),
            n(y),
            n(label_y),
            escape(&b.id),
            x = n(x),
        );
    }
    h.push_str("</svg>\n");
}

fn bugs_table(h: &mut String, c: &Campaign) {
    let _ = write!(h, "<section>\n<h2>Bugs <span class=\"count\">({})</span></h2>\n", c.bugs.len());
    if c.bugs.is_empty() {
        h.push_str("<p class=\"empty\">No bug found in this campaign.</p>\n</section>\n");
        return;
    }
    h.push_str(
        "<table>\n<tr><th>id</th><th>signature</th><th class=\"num\">first round</th>\
         <th class=\"num\">decisions</th><th>reproduce</th></tr>\n",
    );
    for b in &c.bugs {
        let decisions = match b.minimized {
            Some(m) => format!("{} → {}", thousands(b.decisions), thousands(m)),
            None => thousands(b.decisions),
        };
        let _ = writeln!(
            h,
            "<tr><td class=\"id\">{}</td><td class=\"sig\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
             <td><code>{}</code><div class=\"file\">{}</div></td></tr>",
            escape(&b.id),
            escape(&b.signature),
            thousands(b.first_round),
            escape(&decisions),
            escape(&b.reproduce),
            escape(&b.file)
        );
    }
    h.push_str("</table>\n</section>\n");
}

fn shards_table(h: &mut String, c: &Campaign) {
    if c.shards.is_empty() {
        return;
    }
    let _ = write!(
        h,
        "<section>\n<h2>Merged from <span class=\"count\">({})</span></h2>\n<table>\n<tr><th>directory</th>\
         <th>shard</th><th class=\"num\">rounds</th><th class=\"num\">corpus</th><th class=\"num\">edges</th>\
         <th class=\"num\">bugs</th><th class=\"num\">time</th></tr>\n",
        c.shards.len()
    );
    for s in &c.shards {
        let _ = writeln!(
            h,
            "<tr><td class=\"sig\">{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
            escape(&s.dir),
            escape(&s.shard),
            thousands(s.rounds),
            thousands(s.corpus_size),
            thousands(s.edges_hit),
            thousands(s.bugs),
            escape(&crate::duration(s.wall_seconds))
        );
    }
    h.push_str("</table>\n</section>\n");
}

fn unconfirmed_table(h: &mut String, c: &Campaign) {
    if c.unconfirmed.is_empty() {
        return;
    }
    let _ = write!(
        h,
        "<section>\n<h2>Unconfirmed failures <span class=\"count\">({})</span></h2>\n\
         <p class=\"empty\">A replay on another host core did not give the same run: not bugs, but a sign that \
         something the run depends on is not deterministic.</p>\n<table>\n<tr><th>signature</th>\
         <th class=\"num\">round</th><th>how the replay differed</th></tr>\n",
        c.unconfirmed.len()
    );
    for u in &c.unconfirmed {
        let _ = writeln!(
            h,
            "<tr><td class=\"sig\">{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
            escape(&u.signature),
            thousands(u.round),
            escape(&u.why)
        );
    }
    h.push_str("</table>\n</section>\n");
}

fn no_progress_table(h: &mut String, c: &Campaign) {
    if c.no_progress_rounds == 0 {
        return;
    }
    let _ = write!(
        h,
        "<section>\n<h2>Rounds without progress <span class=\"count\">({})</span></h2>\n\
         <p class=\"empty\">The watchdog stopped them after <code>DEJA_NO_PROGRESS_S</code> of guest code without a \
         syscall: not bugs. The first of them:</p>\n<table>\n<tr><th class=\"num\">round</th>\
         <th>what the watchdog saw</th></tr>\n",
        thousands(c.no_progress_rounds)
    );
    for n in &c.no_progress {
        let _ = writeln!(h, "<tr><td class=\"num\">{}</td><td>{}</td></tr>", thousands(n.round), escape(&n.why));
    }
    h.push_str("</table>\n</section>\n");
}

fn assertions_table(h: &mut String, c: &Campaign) {
    let _ = write!(h, "<section>\n<h2>Assertions <span class=\"count\">({})</span></h2>\n", c.assertions.len());
    if c.assertions.is_empty() {
        h.push_str("<p class=\"empty\">The program declares no assertions.</p>\n</section>\n");
        return;
    }
    h.push_str(
        "<table>\n<tr><th>status</th><th>message</th><th>kind</th><th class=\"num\">hits</th>\
         <th class=\"num\">failures</th></tr>\n",
    );
    for a in &c.assertions {
        let tone = match status_tone(&a.status) {
            Tone::Good => "good",
            Tone::Bad => "bad",
            Tone::Warn => "warn",
            Tone::Muted => "muted",
        };
        let _ = writeln!(
            h,
            "<tr><td><span class=\"badge {tone}\">{}</span></td><td>{}</td><td>{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td></tr>",
            escape(&a.status),
            escape(&a.message),
            escape(&a.kind),
            thousands(a.hits),
            thousands(a.failures)
        );
    }
    h.push_str("</table>\n</section>\n");
}
