use super::*;

fn timeline(rounds: u64, edges: impl Fn(u64) -> u64, corpus: impl Fn(u64) -> u64, bugs: &[u64]) -> Vec<RoundPoint> {
    (0..=rounds)
        .step_by(5)
        .map(|r| RoundPoint {
            round: r,
            edges_hit: edges(r),
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
        bugs: vec![],
        assertions: vec![],
        baseline: None,
        host: None,
        unconfirmed: Vec::new(),
        jobs: 1,
        shard: None,
        shards: Vec::new(),
        no_progress_rounds: 0,
        no_progress: Vec::new(),
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
        jobs: 1,
        shard: None,
        shards: Vec::new(),
        no_progress_rounds: 0,
        no_progress: Vec::new(),
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
        bugs: vec![],
        assertions: vec![],
        baseline: None,
        host: None,
        unconfirmed: Vec::new(),
        jobs: 1,
        shard: None,
        shards: Vec::new(),
        no_progress_rounds: 0,
        no_progress: Vec::new(),
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
fn text_of_an_empty_campaign() {
    let t = render_text(&empty());
    assert!(t.contains("no bug found"), "{t}");
    assert!(t.contains("no coverage instrumentation"), "{t}");
    assert!(t.contains("bugs: none found"), "{t}");
    assert!(!t.contains("comparison"), "{t}");
    assert!(!t.contains("NaN") && !t.contains("inf"), "{t}");
}

#[test]
fn html_is_self_contained_escaped_and_complete() {
    let h = render_html(&sample());
    assert!(h.starts_with("<!DOCTYPE html>"));
    assert!(!h.to_ascii_lowercase().contains("<script"), "no JavaScript");
    assert!(!h.contains("http://") || h.matches("http://").count() == 1, "only the SVG namespace");
    assert!(!h.contains("https://") && !h.contains("<link") && !h.contains("<img"), "no external resources");
    assert_eq!(h.matches("<svg").count(), 1);
    assert!(h.contains("refused &lt;b&gt;before&lt;/b&gt; it runs"));
    assert!(!h.contains("<b>before</b>"));
    for needle in [
        "2 bugs found",
        "verdict bad",
        "a3f9c2",
        "7be041",
        "<code>deja replay explore-out/bug-7be041.json</code>",
        "1,412",
        "1,874",
        "badge bad\">failed",
        "badge good\">passed",
        "badge warn\">unsatisfied",
        "badge muted\">unreached",
        "stroke-dasharray=\"7 5\"",
        "random baseline",
    ] {
        assert!(h.contains(needle), "missing {needle:?}");
    }
    assert!(!h.contains("NaN") && !h.contains("inf\""));
}

#[test]
fn empty_campaign_renders_without_nan_or_inf() {
    let mut c = empty();
    c.wall_seconds = f64::NAN;
    for out in [render_html(&c), render_text(&c)] {
        assert!(!out.contains("NaN"), "{out}");
        assert!(!out.contains("inf"), "{out}");
    }
    let h = render_html(&c);
    assert!(h.contains("no bug found") && h.contains("verdict good"));
    assert!(h.contains("no timeline recorded"));
    assert_eq!(h.matches("<svg").count(), 1);

    // One point, no coverage, a bug at round 0 and an enormous round count: still finite coordinates.
    c.timeline = vec![RoundPoint { round: 0, edges_hit: 0, corpus_size: 0, bugs: 1 }];
    c.bugs = vec![bug("x", "boom", 0, 1, None)];
    c.rounds = u64::MAX;
    let h = render_html(&c);
    assert!(!h.contains("NaN") && !h.contains("inf"));
    assert!(h.contains("no coverage instrumentation"));
    assert!(h.contains("1 bug found"));
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
    assert_eq!(html::nice_axis(0, 5), (1, 1));
    assert_eq!(html::nice_axis(1412, 5), (1500, 500));
    assert_eq!(html::nice_axis(500, 8), (500, 100));
    assert_eq!(html::nice_axis(u64::MAX, 8).0, u64::MAX);
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
