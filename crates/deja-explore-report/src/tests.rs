use std::collections::BTreeMap;

use super::*;

fn timeline(rounds: u64, edges: impl Fn(u64) -> u64, corpus: impl Fn(u64) -> u64, bugs: &[u64]) -> Vec<RoundPoint> {
    (0..=rounds)
        .step_by(5)
        .map(|r| RoundPoint {
            round: r,
            edges_hit: edges(r),
            semantic: edges(r) / 10,
            corpus_size: corpus(r),
            bugs: bugs.iter().filter(|b| **b <= r).count() as u64,
        })
        .collect()
}

fn bug(id: &str, signature: &str, first_round: u64, decisions: u64, minimized: Option<u64>) -> BugSummary {
    BugSummary {
        id: id.to_string(),
        signature: signature.to_string(),
        first_round,
        file: format!("explore-out/bug-{id}.json"),
        reproduce: format!("deja replay explore-out/bug-{id}.json"),
        decisions,
        minimized,
        window: None,
        crash: None,
    }
}

fn assertion(message: &str, kind: &str, hits: u64, failures: u64, status: &str) -> AssertionLine {
    AssertionLine { message: message.into(), kind: kind.into(), hits, failures, status: status.into() }
}

/// A coverage campaign that found two bugs, with a random baseline that found none.
pub(crate) fn sample() -> Campaign {
    let curve = |scale: f64, k: f64| move |r: u64| (scale * (1.0 - (-(r as f64) / k).exp())).round() as u64;
    let baseline = Campaign {
        program: "guests/bank".into(),
        program_blake3: "9f2c4e1ab7d35c0e88a1f3b2d4c6e8fa0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e".into(),
        strategy: "random".into(),
        mode: "faults".into(),
        seed: 42,
        rounds: 500,
        wall_seconds: 71.0,
        corpus_size: 1,
        edges_total: 1874,
        edges_hit: 903,
        timeline: timeline(500, curve(905.0, 60.0), |_| 1, &[]),
        wall_timeline: Vec::new(),
        faults: BTreeMap::from([("crash".to_string(), 212)]),
        bugs: vec![],
        assertions: vec![],
        baseline: None,
        host: None,
        unconfirmed: Vec::new(),
        fail_stops: Vec::new(),
        jobs: 1,
        shard: None,
        shards: Vec::new(),
        no_progress_rounds: 0,
        no_progress: Vec::new(),
        blocks: None,
        frontier: None,
        fork_checks: None,
    };
    Campaign {
        program: "guests/bank".into(),
        program_blake3: baseline.program_blake3.clone(),
        strategy: "coverage".into(),
        mode: "faults".into(),
        seed: 42,
        rounds: 500,
        wall_seconds: 83.4,
        corpus_size: 137,
        edges_total: 1874,
        edges_hit: 1412,
        timeline: timeline(500, curve(1420.0, 140.0), |r| 1 + r * 136 / 500, &[87, 341]),
        wall_timeline: (1..=500).step_by(50).map(|r| WallPoint { round: r, wall_seconds: r as f64 / 6.0 }).collect(),
        faults: BTreeMap::from([("crash".to_string(), 201), ("eio".to_string(), 77), ("torn_write".to_string(), 9)]),
        bugs: vec![
            bug("a3f9c2", "assertion failed: balance never negative (src/main.rs:88)", 87, 1240, Some(37)),
            bug("7be041", "panic: index out of bounds: the len is 3 but the index is 3", 341, 2210, None),
        ],
        assertions: vec![
            assertion("balance never negative", "always", 48_213, 3, "failed"),
            assertion("some transfer is rejected for lack of funds", "sometimes", 9_120, 8_977, "satisfied"),
            assertion("money is neither created nor destroyed", "always", 48_213, 0, "passed"),
            assertion("an unknown mode is refused <b>before</b> it runs", "unreachable", 0, 0, "passed"),
            assertion("a retry succeeds", "sometimes", 311, 311, "unsatisfied"),
            assertion("more rejections than transfers", "reachable", 0, 0, "unreached"),
        ],
        baseline: Some(Box::new(baseline)),
        host: None,
        unconfirmed: Vec::new(),
        fail_stops: vec![crate::FailStopLine {
            node: String::new(),
            words: "status 1 after eio on write #N to /db/journal".into(),
            stops: 7,
            first_round: 12,
            output: vec!["LOST acknowledged batch 5 item 3".into()],
            file: Some("fail-stop-0123456789ab.json".into()),
            reproduce: Some("deja replay out/fail-stop-0123456789ab.json".into()),
            not_run: None,
        }],
        jobs: 1,
        shard: None,
        shards: Vec::new(),
        no_progress_rounds: 0,
        no_progress: Vec::new(),
        blocks: None,
        frontier: None,
        fork_checks: None,
    }
}

fn empty() -> Campaign {
    Campaign {
        program: "p".into(),
        program_blake3: String::new(),
        strategy: "random".into(),
        mode: "random".into(),
        seed: 0,
        rounds: 0,
        wall_seconds: 0.0,
        corpus_size: 0,
        edges_total: 0,
        edges_hit: 0,
        timeline: vec![],
        wall_timeline: Vec::new(),
        faults: BTreeMap::new(),
        bugs: vec![],
        assertions: vec![],
        baseline: None,
        host: None,
        unconfirmed: Vec::new(),
        fail_stops: Vec::new(),
        jobs: 1,
        shard: None,
        shards: Vec::new(),
        no_progress_rounds: 0,
        no_progress: Vec::new(),
        blocks: None,
        frontier: None,
        fork_checks: None,
    }
}

#[test]
fn text_has_key_numbers_and_bug_ids() {
    let t = render_text(&sample());
    for needle in [
        "guests/bank",
        "2 bugs found",
        "coverage (mode: faults)",
        "seed      42",
        "1,412 / 1,874 edges (75.3%)",
        "137 inputs",
        "1m 23s",
        "a3f9c2",
        "7be041",
        "deja replay explore-out/bug-a3f9c2.json",
        "1,240 -> 37",
        "balance never negative",
        "unsatisfied",
        "coverage-guided: 1,412 edges, 2 bugs in 500 rounds; random baseline: 903 edges, 0 bugs in 500 rounds",
    ] {
        assert!(t.contains(needle), "missing {needle:?} in\n{t}");
    }
    assert!(t.lines().all(|l| l == l.trim_end()), "no trailing spaces:\n{t}");
}

#[test]
fn the_fail_stops_show_in_text_and_json_with_what_they_said() {
    let t = render_text(&sample());
    for needle in [
        "fail-stops (7 in 1 kind)",
        "status 1 after eio on write #N to /db/journal",
        "  | LOST acknowledged batch 5 item 3",
        "counted as a failure (--fail-stop never) it fails: fail-stop-0123456789ab.json, `deja replay out/fail-stop-0123456789ab.json`",
    ] {
        assert!(t.contains(needle), "missing {needle:?} in\n{t}");
    }
    assert!(!render_text(&empty()).contains("fail-stops"));
    let json = serde_json::to_value(sample()).unwrap();
    assert_eq!(json["fail_stops"][0]["stops"], 7);
    assert!(serde_json::to_value(empty()).unwrap().get("fail_stops").is_none(), "absent when there are none");
    let html = crate::render_html(&sample());
    assert!(html.contains("function failStops(m)") && html.contains("LOST acknowledged batch 5 item 3"));
    // One that could not be run again says why; two kinds are kinds.
    let mut c = sample();
    let mut other = c.fail_stops[0].clone();
    other.words = "status 2 after eio on fsync #N of /db".into();
    (other.file, other.reproduce, other.not_run) = (None, None, Some("the VM could not be made".into()));
    c.fail_stops.push(other);
    let t = render_text(&c);
    assert!(t.contains("fail-stops (14 in 2 kinds)"), "{t}");
    assert!(t.contains("  could not be run again counted as a failure: the VM could not be made"), "{t}");
}

#[test]
fn text_of_an_empty_campaign() {
    let t = render_text(&empty());
    assert!(t.contains("no bug found"), "{t}");
    assert!(t.contains("no coverage instrumentation"), "{t}");
    assert!(t.contains("bugs: none found"), "{t}");
    assert!(!t.contains("comparison"), "{t}");
    assert!(!t.contains("NaN") && !t.contains("inf"), "{t}");
}

/// The JSON a page embeds.
fn data_of(page: &str) -> &str {
    let start = page.find("<script id=\"deja-data\" type=\"application/json\">").expect("embedded data");
    let rest = &page[start..];
    &rest[rest.find('>').unwrap() + 1..rest.find("</script>").unwrap()]
}

/// The campaign a page embeds, read back.
fn embedded(page: &str) -> Campaign {
    parse_json(data_of(page)).expect("the embedded data is the report's JSON")
}

#[test]
fn html_is_self_contained_and_embeds_the_campaign() {
    let c = sample();
    let h = render_html(&c);
    assert!(h.starts_with("<!DOCTYPE html>"));
    let lower = h.to_ascii_lowercase();
    assert!(!lower.contains("<link") && !lower.contains("<img") && !lower.contains(" src="), "no external resources");
    assert!(!h.contains("https://"), "no external resources");
    assert!(!h.replace("http://www.w3.org/2000/svg", "").contains("http://"), "only the SVG namespace");
    assert!(!h.contains("fetch(") && !h.contains("XMLHttpRequest"), "the report fetches nothing");
    assert_eq!(lower.matches("<script").count(), 2, "the data and the views");
    assert_eq!(embedded(&h), c, "the whole campaign, its timelines short enough");
    assert!(h.contains("<title>2 bugs found · guests/bank · deja explore</title>"));
    assert!(h.contains("<noscript><h1>guests/bank</h1><p class=\"verdict\">2 bugs found</p>"));
    let data = data_of(&h);
    assert!(!data.contains("NaN") && !data.contains("Infinity"));
}

#[test]
fn data_cannot_end_its_script_element() {
    let mut c = sample();
    c.bugs[0].signature = "assertion \"</script><script>alert(1)</script>\" failed & <!-- more".into();
    c.program = "</title><b>bank</b>".into();
    let h = render_html(&c);
    assert_eq!(h.to_ascii_lowercase().matches("</script").count(), 2, "only the two elements' own ends");
    assert!(!h.contains("<b>bank</b>") && h.contains("&lt;/title&gt;&lt;b&gt;bank&lt;/b&gt;"));
    assert!(!h.contains("<!-- more"));
    assert_eq!(embedded(&h), c, "the text survives the escaping");
}

#[test]
fn the_live_page_has_the_same_views_and_no_data() {
    let (live, report) = (live_page(), render_html(&sample()));
    assert!(!live.contains("<script id=\"deja-data\""), "it reads its campaign from the event stream");
    assert!(live.contains("data-files=\"files/\"") && report.contains("data-files=\"\""));
    let views = |page: &str| {
        let at = page.rfind("<script>").unwrap();
        page[at..].to_string()
    };
    assert_eq!(views(&live), views(&report), "one copy of the views in both pages");
    assert!(views(&live).contains("new EventSource(\"events\")"));
    assert!(live.contains(include_str!("view.css")) && report.contains(include_str!("view.css")));
    assert!(!include_str!("view.js").to_ascii_lowercase().contains("</script"));
    assert!(!include_str!("view.css").to_ascii_lowercase().contains("</style"));
}

#[test]
fn a_long_timeline_is_thinned_keeping_the_last_point_and_every_bug() {
    let mut c = empty();
    c.timeline = (1..=100_000u64)
        .map(|r| RoundPoint {
            round: r,
            edges_hit: r / 7,
            semantic: 0,
            corpus_size: r / 100,
            bugs: u64::from(r >= 77_777),
        })
        .collect();
    let e = embedded(&render_html(&c));
    assert!(e.timeline.len() <= 2_100, "{}", e.timeline.len());
    assert_eq!(e.timeline.last(), c.timeline.last());
    assert!(e.timeline.iter().any(|p| p.round == 77_777), "the round a bug was found in is kept");
    assert!(e.timeline.windows(2).all(|w| w[0].round < w[1].round));
}

#[test]
fn a_wall_timeline_stays_bounded_and_samples_the_same_rounds_in_any_run() {
    let series = |secs: f64| {
        let mut w = WallTimeline::default();
        for r in 1..=10_000u64 {
            w.record(r, r as f64 * secs);
        }
        w
    };
    let (a, b) = (series(0.01), series(0.5));
    assert!(a.points.len() <= WallTimeline::MAX_POINTS && a.points.len() > WallTimeline::MAX_POINTS / 2);
    assert_eq!(a.every, 32);
    assert!(a.points.iter().all(|p| p.round % 32 == 0));
    let rounds = |w: &WallTimeline| w.points.iter().map(|p| p.round).collect::<Vec<_>>();
    assert_eq!(rounds(&a), rounds(&b), "only the times differ");
}

#[test]
fn a_report_of_an_earlier_deja_still_reads() {
    let mut v: serde_json::Value = serde_json::from_str(&render_json(&sample())).unwrap();
    let c = v["campaign"].as_object_mut().unwrap();
    c.remove("wall_timeline");
    c.remove("faults");
    for p in c["timeline"].as_array_mut().unwrap() {
        p.as_object_mut().unwrap().remove("semantic");
    }
    let old = parse_json(&v.to_string()).unwrap();
    assert!(old.faults.is_empty() && old.wall_timeline.is_empty());
    assert!(old.timeline.iter().all(|p| p.semantic == 0));
    assert!(render_html(&old).contains("deja-data"));
}

#[test]
fn text_shows_the_fault_mix() {
    let t = render_text(&sample());
    assert!(t.contains("faults (the rounds in which each kind happened):"), "{t}");
    assert!(t.lines().any(|l| l.split_whitespace().collect::<Vec<_>>() == ["crash", "201", "40.2%"]), "{t}");
    assert!(render_text(&empty()).contains("faults: none happened"));
    assert!(!t.contains("frontier:"), "a campaign without a frontier says nothing of one");
    let mut c = sample();
    c.frontier = Some(Frontier { tried: 40, total: 1_061, ..Frontier::default() });
    assert!(render_text(&c).contains("frontier: 40 of 1,061 faults tried"), "{}", render_text(&c));
    assert!(!render_text(&c).contains("went on past"), "no follow-ups, no line");
    c.frontier = Some(Frontier { tried: 40, total: 1_061, followed: 12, passed_over: 8 });
    let t = render_text(&c);
    assert!(t.contains("and 12 rounds that crashed after a failed sync the program went on past"), "{t}");
    assert!(t.contains("8 passed over: crashes after a failed sync the program stopped at"), "{t}");
    let back = parse_json(&render_json(&c)).unwrap();
    assert_eq!(back.frontier, c.frontier);
    let old = serde_json::json!({"tried": 3, "total": 9});
    assert_eq!(serde_json::from_value::<Frontier>(old).unwrap().followed, 0, "older reports read");
}

#[test]
fn empty_campaign_renders_without_nan_or_inf() {
    let mut c = empty();
    c.wall_seconds = f64::NAN;
    let h = render_html(&c);
    for out in [data_of(&h), &render_text(&c)] {
        assert!(!out.contains("NaN"), "{out}");
        assert!(!out.contains("inf"), "{out}");
    }
    assert!(h.contains("no bug found"));
    assert!(h.contains("\"wall_seconds\":null"), "JSON has no NaN: the views show it as -");
}

#[test]
fn json_round_trips() {
    let c = sample();
    let j = render_json(&c);
    let v: serde_json::Value = serde_json::from_str(&j).unwrap();
    assert_eq!(v["schema"], SCHEMA);
    let inner: Campaign = serde_json::from_value(v["campaign"].clone()).unwrap();
    assert_eq!(inner, c);
    assert_eq!(parse_json(&j).unwrap(), c);
    assert!(parse_json(&j.replace(SCHEMA, "deja.explore-report/999")).is_err());
    assert!(j.contains('\n'), "pretty");
}

#[test]
fn escape_all_five() {
    assert_eq!(escape(r#"<a href="x">&'</a>"#), "&lt;a href=&quot;x&quot;&gt;&amp;&#39;&lt;/a&gt;");
}

#[test]
fn helpers() {
    assert_eq!(thousands(0), "0");
    assert_eq!(thousands(999), "999");
    assert_eq!(thousands(1000), "1,000");
    assert_eq!(thousands(1234567), "1,234,567");
    assert_eq!(duration(5.24), "5.2 s");
    assert_eq!(duration(3725.0), "1h 02m");
    assert_eq!(percent(1, 0), None);
}

/// Writes the sample page for a visual check:
/// `DEJA_REPORT_SAMPLE=/tmp/deja-report-sample.html cargo test -p deja-explore-report write_sample -- --ignored`.
#[test]
#[ignore]
fn write_sample() {
    let path = std::env::var("DEJA_REPORT_SAMPLE").unwrap_or_else(|_| "/tmp/deja-report-sample.html".into());
    std::fs::write(&path, render_html(&sample())).unwrap();
    let mut e = empty();
    e.program = "guests/quiet".into();
    std::fs::write(path.replace(".html", "-empty.html"), render_html(&e)).unwrap();
    println!("{}", render_text(&sample()));
    println!("wrote {path}");
}

#[test]
fn a_history_bug_shows_its_window_in_text_and_html() {
    let mut c = sample();
    let window = "  0.0 ms  c1 add 18 → ok\n  4.0 ms  c1 read → [1] ← cannot be placed\n  the read lacks adds acknowledged before it began: 18";
    c.bugs[1].window = Some(window.into());
    let t = render_text(&c);
    let at = t.find(&format!("bug {}: the shortest window of the history that no order explains:", c.bugs[1].id));
    let at = at.unwrap_or_else(|| panic!("no window heading: {t}"));
    assert!(t[at..].contains("    4.0 ms  c1 read → [1] ← cannot be placed"), "indented under it: {t}");
    assert_eq!(t.matches("the shortest window").count(), 1, "only the history bug has one");
    assert!(render_html(&c).contains("the read lacks adds acknowledged before it began: 18"));
    let back: Campaign = serde_json::from_str(&render_json(&c))
        .map(|r: serde_json::Value| serde_json::from_value(r["campaign"].clone()).unwrap())
        .unwrap();
    assert_eq!(back.bugs[1].window.as_deref(), Some(window));
    assert!(!render_json(&sample()).contains("\"window\""), "a bug without one writes no field");
}

#[test]
fn block_coverage_reads_as_blocks_and_functions_in_every_form() {
    let line = |name: &str, blocks, reached, first_round| FunctionLine {
        name: name.into(),
        blocks,
        reached,
        first_round,
        file: Some("/src/store/log.c".into()),
    };
    let mut c = empty();
    c.edges_total = 900;
    c.edges_hit = 120;
    c.blocks = Some(BlockCoverage {
        blocks_total: 900,
        blocks_hit: 120,
        scope: vec!["store::*".into()],
        functions_total: 3,
        functions_reached: 2,
        functions_over_rounds: vec![(0, 1), (7, 2)],
        latest: vec![line("store::commit", 10, 4, Some(7)), line("store::main", 30, 20, Some(0))],
        never: vec![line(&format!("store::{}", "recover_".repeat(20)), 50, 0, None)],
        files: vec![FileLine {
            file: "/src/store/log.c".into(),
            functions: 3,
            functions_reached: 2,
            blocks: 90,
            blocks_reached: 24,
        }],
    });
    let text = render_text(&c);
    assert!(text.contains("120 / 900 blocks (13.3%), 2 / 3 functions (scope: store::*)"), "{text}");
    assert!(text.contains("functions reached last") && text.contains("store::commit"), "{text}");
    assert!(text.contains("functions never reached (1 of 3"), "{text}");
    assert!(text.contains("store::commit (log.c)"), "a function names its source file: {text}");
    assert!(text.contains("source files (1 of 1 reached):") && text.contains("/src/store/log.c"), "{text}");
    assert!(
        text.lines().any(|l| l.contains("/src/store/log.c") && l.contains("2 / 3") && l.contains("24 / 90")),
        "{text}"
    );
    assert!(text.lines().all(|l| l.chars().count() < 200), "long names are elided: {text}");
    assert!(!text.contains(" edges ("), "{text}");
    assert_eq!(parse_json(&render_json(&c)).unwrap(), c);
    assert_eq!(embedded(&render_html(&c)), c);
    // A report of an earlier deja, without the field, still reads.
    let mut v: serde_json::Value = serde_json::from_str(&render_json(&empty())).unwrap();
    assert!(v["campaign"].get("blocks").is_none());
    v["campaign"].as_object_mut().unwrap().remove("blocks");
    assert_eq!(parse_json(&v.to_string()).unwrap().blocks, None);
}

#[test]
fn a_crash_bug_shows_the_state_it_needs_in_text_and_html() {
    let mut c = sample();
    let crash = "life 0 crashed under posix-weak: kept 2 of 3 pending operations; allowed by posix-weak — a portability hazard: only posix-weak allows this state\n  dropped: entry ledger.log set in /data\n  kept: entry count set in /data";
    c.bugs[0].crash = Some(crash.into());
    let t = render_text(&c);
    let at = t.find(&format!("bug {}: the crash state it needs:", c.bugs[0].id)).unwrap_or_else(|| panic!("{t}"));
    assert!(t[at..].contains("    dropped: entry ledger.log set in /data"), "indented under it: {t}");
    assert!(render_html(&c).contains("the crash state it needs"));
    assert!(render_html(&c).contains("a portability hazard: only posix-weak allows this state"));
    let plain: serde_json::Value = serde_json::from_str(&render_json(&sample())).unwrap();
    assert!(plain["campaign"]["bugs"][0].get("crash").is_none(), "a bug without a crash writes no field");
    let back: serde_json::Value = serde_json::from_str(&render_json(&c)).unwrap();
    assert_eq!(back["campaign"]["bugs"][0]["crash"], crash);
}
