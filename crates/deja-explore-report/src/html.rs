//! The HTML pages: `report.html` and the live page. Both are one shell around the same views
//! (`view.js`, `view.css`, included once each); the report embeds its campaign as JSON, the live
//! page reads server-sent events.
//!
//! Everything a reader sees is drawn by the views from the campaign's JSON; this file writes
//! only the shell around them (a title, the data, the two included files), so a template
//! engine would have nothing to template. The report grows in `view.js`, whose pieces the
//! report page and the live page share.

use std::fmt::Write as _;

use crate::{escape, plural, Campaign, RoundPoint, SCHEMA};

/// The views' styles.
const CSS: &str = include_str!("view.css");
/// The views: they draw a campaign from embedded data or from an event stream.
const JS: &str = include_str!("view.js");

/// Timeline points embedded per series: the views draw no more than this anyway.
const EMBEDDED_POINTS: usize = 2000;

/// One self-contained HTML page (inline CSS and JavaScript, no external resources): the campaign as
/// JSON in `<script id="deja-data">`, drawn by the views — the verdict in big type, the key numbers,
/// coverage over rounds and over host time with the bugs marked, the fault mix, the bugs with their
/// reproduce commands and links to their files (beside the page), and the assertions.
pub fn render_html(c: &Campaign) -> String {
    let bugs = c.bugs.len() as u64;
    let verdict = if bugs == 0 { "no bug found".to_string() } else { format!("{} found", plural(bugs, "bug", "bugs")) };
    let mut embedded = c.clone();
    thin_campaign(&mut embedded);
    let data = script_json(
        &serde_json::to_string(&crate::Wrapped { schema: SCHEMA, campaign: &embedded })
            .expect("a Campaign always serializes"),
    );
    page(
        &format!("{verdict} · {} · deja explore", c.program),
        "",
        &format!(
            "<noscript><h1>{}</h1><p class=\"verdict\">{}</p><p>This report draws with JavaScript; report.txt beside \
             it has the same figures.</p></noscript>",
            escape(&c.program),
            escape(&verdict)
        ),
        Some(&data),
    )
}

/// The page of `deja explore --serve` and `deja serve`: the same views as [`render_html`], fed by
/// the server-sent events at `events`, with bug files linked under `files/`.
pub fn live_page() -> String {
    page(
        "deja explore · live",
        "files/",
        "<noscript><p>The live view needs JavaScript; the campaign's directory holds report.txt once it \
         ends.</p></noscript>",
        None,
    )
}

fn page(title: &str, files: &str, noscript: &str, data: Option<&str>) -> String {
    let mut h = String::with_capacity(CSS.len() + JS.len() + data.map_or(0, str::len) + 1024);
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>{}</title>\n\
         <style>\n{CSS}</style>\n</head>\n<body>\n<main id=\"deja\" data-files=\"{}\">{noscript}</main>\n",
        escape(title),
        escape(files)
    );
    if let Some(data) = data {
        let _ = writeln!(h, "<script id=\"deja-data\" type=\"application/json\">{data}</script>");
    }
    let _ = write!(h, "<script>\n{JS}</script>\n<!-- deja explore · {SCHEMA} -->\n</body>\n</html>\n");
    h
}

/// JSON made safe inside `<script>`: no `<`, `>` or `&` (they only occur in strings, where `\u003c`
/// and the like mean the same), so no `</script>` in the data can end the element.
fn script_json(json: &str) -> String {
    json.replace('<', "\\u003c").replace('>', "\\u003e").replace('&', "\\u0026")
}

/// Keeps at most [`EMBEDDED_POINTS`] points of each timeline (the first, the last, and those where
/// a bug was found among them), for a page that stays small whatever the campaign's length.
fn thin_campaign(c: &mut Campaign) {
    c.timeline = thin_timeline(&c.timeline, EMBEDDED_POINTS);
    if let Some(b) = c.baseline.as_deref_mut() {
        thin_campaign(b);
    }
}

/// At most about `max` of `points`, evenly spaced, with the last one and every point where the
/// number of bugs changed.
pub fn thin_timeline(points: &[RoundPoint], max: usize) -> Vec<RoundPoint> {
    if points.len() <= max {
        return points.to_vec();
    }
    let every = points.len().div_ceil(max.max(1));
    let last = points.len() - 1;
    points
        .iter()
        .enumerate()
        .filter(|(i, p)| i % every == 0 || *i == last || (*i > 0 && points[i - 1].bugs != p.bugs))
        .map(|(_, p)| p.clone())
        .collect()
}
