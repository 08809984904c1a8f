//! The live view: `deja explore --serve` streams a campaign's rounds and bugs, the campaign is the
//! same without it, `deja serve DIR` shows a saved one, and headless Chromium draws both pages
//! (the live one and report.html).
//!
//! Nothing here waits on a clock: a campaign started with `--serve-wait` begins only once the
//! event stream is open, every read has a deadline, and a missing event fails with what came.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::Value;

/// The bank's rare bug: one large transfer out of account 2; seed 2 finds it in round 40.
const FLAGS: [&str; 6] = ["--jobs", "2", "--mode", "random", "--seed", "1"];
const ARGS: [&str; 2] = ["--rare-bug", "5"];
/// The longest any one step may take before the test fails.
const PATIENCE: Duration = Duration::from_secs(120);

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("deja-serve-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A `deja` process whose stderr is read on a thread; ends it when dropped.
struct Deja {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Deja {
    fn start(cwd: &Path, args: &[&str]) -> Deja {
        let mut child = Command::new(deja_bin())
            .current_dir(cwd)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start deja");
        let (tx, lines) = mpsc::channel();
        let err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Deja { child, lines, seen: Vec::new() }
    }

    /// The address of the `live view at http://ADDR/` line.
    fn address(&mut self) -> SocketAddr {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if let Some(url) = line.strip_prefix("deja: live view at http://") {
                        return url.trim_end_matches('/').parse().expect("an address in the URL");
                    }
                }
                Err(_) => panic!("no `live view at` line from deja; it said:\n{}", self.seen.join("\n")),
            }
        }
    }

    /// Waits for the process to end; its exit code and everything it said.
    fn wait(mut self) -> (Option<i32>, String) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                self.seen.extend(self.lines.try_iter());
                return (status.code(), self.seen.join("\n"));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "deja did not end; it said:\n{}", self.seen.join("\n"));
            if let Ok(line) = self.lines.recv_timeout(left.min(Duration::from_millis(200))) {
                self.seen.push(line);
            }
        }
    }
}

impl Drop for Deja {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn connect(addr: SocketAddr, request: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect to {addr}: {e}"));
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    s
}

/// A plain HTTP request: (status, head, body).
fn http(addr: SocketAddr, method: &str, path: &str) -> (u16, String, Vec<u8>) {
    let mut s = connect(addr, &format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"));
    let mut bytes = Vec::new();
    s.read_to_end(&mut bytes).unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    let split = bytes.windows(4).position(|w| w == b"\r\n\r\n").expect("a response head");
    let head = String::from_utf8_lossy(&bytes[..split]).into_owned();
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).expect("a status");
    (status, head, bytes[split + 4..].to_vec())
}

/// Reads server-sent events until `done`: every (event, data).
fn events(addr: SocketAddr) -> Vec<(String, Value)> {
    let s = connect(addr, &format!("GET /events HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n\r\n"));
    let mut r = BufReader::new(s);
    let mut line = String::new();
    let mut head = String::new();
    while r.read_line(&mut line).unwrap() > 0 && line != "\r\n" {
        head.push_str(&line);
        line.clear();
    }
    assert!(head.starts_with("HTTP/1.1 200") && head.contains("text/event-stream"), "{head}");
    let (mut out, mut event, mut data) = (Vec::new(), String::new(), String::new());
    loop {
        line.clear();
        let n = r.read_line(&mut line).unwrap_or_else(|e| panic!("the stream stalled ({e}) after {out:?}"));
        assert!(n > 0, "the stream ended before `done`, after {} events", out.len());
        let l = line.trim_end_matches('\n');
        if let Some(e) = l.strip_prefix("event: ") {
            event = e.to_string();
        } else if let Some(d) = l.strip_prefix("data: ") {
            data = d.to_string();
        } else if l.is_empty() && !event.is_empty() {
            let v: Value = serde_json::from_str(&data).unwrap_or_else(|e| panic!("{event}: {e}: {data}"));
            out.push((std::mem::take(&mut event), v));
            if out.last().unwrap().0 == "done" {
                return out;
            }
        }
    }
}

fn named<'a>(events: &'a [(String, Value)], name: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
    events.iter().filter(move |(n, _)| n == name).map(|(_, d)| d)
}

fn json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `deja explore` of the bank campaign over `runs` rounds, into `campaign`.
fn explore_args(runs: u64, serve: bool) -> Vec<String> {
    let mut a: Vec<String> = ["explore", "--quiet", "--out", "campaign"].map(String::from).to_vec();
    a.extend(["--runs".to_string(), runs.to_string()]);
    a.extend(FLAGS.map(String::from));
    if serve {
        a.extend(["--serve", "127.0.0.1:0", "--serve-wait"].map(String::from));
    }
    a.push(guest("bank").display().to_string());
    a.push("--".into());
    a.extend(ARGS.map(String::from));
    a
}

/// What the views must have drawn: the coverage line with its points, the bug's mark and its row.
fn assert_drawn(dom: &str, bug: &str, state: Option<&str>, what: &str) {
    // The x coordinates of a chart's coverage line.
    let xs = |chart: &str| -> Vec<f64> {
        let at = dom.find(&format!("class=\"chart {chart}\"")).unwrap_or_else(|| panic!("{what}: no {chart} chart"));
        let path = &dom[at..];
        let path = &path[path.find("<path class=\"series coverage\"").unwrap_or_else(|| panic!("{what}: no line"))..];
        let d = &path[path.find(" d=\"M").unwrap() + 5..];
        d[..d.find('"').unwrap()].split('L').map(|p| p.split(',').next().unwrap().parse().unwrap()).collect()
    };
    for chart in ["rounds", "time"] {
        let x = xs(chart);
        assert!(x.len() >= 2, "{what}: the coverage over {chart} is a line: {x:?}");
        assert!(x.windows(2).all(|w| w[0] <= w[1]), "{what}: the {chart} line goes left to right: {x:?}");
    }
    let mark = format!("<a class=\"bug-mark\" data-bug-id=\"{bug}\" href=\"");
    assert!(dom.contains(&mark), "{what}: the bug's mark on the timeline");
    assert!(dom.contains(&format!("<tr data-bug-id=\"{bug}\">")), "{what}: the bug's row");
    assert!(dom.contains("deja replay "), "{what}: the reproduce command");
    assert!(dom.contains("class=\"faults\"") && dom.contains("class=\"assertions\""), "{what}: faults, assertions");
    if let Some(s) = state {
        assert!(dom.contains(&format!("class=\"state {s}\"")), "{what}: the page says {s}");
    }
}

#[test]
fn a_served_campaign_streams_its_rounds_and_its_bug_and_is_the_campaign_run_unwatched() {
    let (watched, unwatched) = (dir("watched"), dir("unwatched"));
    let args = explore_args(120, true);
    let mut live = Deja::start(&watched, &args.iter().map(String::as_str).collect::<Vec<_>>());
    let addr = live.address();
    assert!(addr.ip().is_loopback(), "{addr}");
    let e = events(addr);
    let (code, said) = live.wait();
    assert_eq!(code, Some(1), "the bug was found: {said}");

    let args = explore_args(120, false);
    let o = Command::new(deja_bin()).current_dir(&unwatched).args(&args).output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));

    // The stream: hello, the rounds in order, the bug before the round that found it, done.
    assert_eq!(e[0].0, "hello");
    assert_eq!(e[0].1["live"], true);
    let rounds: Vec<u64> = named(&e, "round").map(|r| r["round"].as_u64().unwrap()).collect();
    assert_eq!(rounds, (1..=120).collect::<Vec<_>>(), "one round event per round, in order");
    assert!(named(&e, "round").all(|r| r["rates"].as_array().unwrap().len() == 2), "a rate per worker");
    let bugs: Vec<&Value> = named(&e, "bug").collect();
    assert_eq!(bugs.len(), 1, "{bugs:?}");
    let id = bugs[0]["id"].as_str().unwrap();
    let found = bugs[0]["first_round"].as_u64().unwrap();
    let at = |name: &str, round: u64| {
        e.iter().position(|(n, d)| n == name && (d["round"] == round || d["first_round"] == round))
    };
    assert_eq!(at("bug", found).map(|i| i + 1), at("round", found), "the bug comes with its round");
    assert!(bugs[0]["reproduce"].as_str().unwrap().starts_with("deja replay "));
    assert!(named(&e, "tables").count() >= 1);
    let done = &e.last().unwrap().1;
    assert_eq!(done["state"], "finished");
    assert_eq!(done["campaign"]["rounds"], 120);
    // Block coverage while it runs (the bank has no SanitizerCoverage): every table carries the
    // blocks and functions reached so far, which only grow, up to the report's.
    let live: Vec<(u64, u64)> = named(&e, "tables")
        .map(|t| (t["blocks"]["blocks_hit"].as_u64().unwrap(), t["blocks"]["functions_reached"].as_u64().unwrap()))
        .collect();
    assert!(live.iter().all(|&(b, f)| b > 0 && f > 0), "{live:?}");
    assert!(live.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1), "{live:?}");
    let last = *live.last().unwrap();
    assert!(last.0 <= done["campaign"]["blocks"]["blocks_hit"].as_u64().unwrap(), "{last:?}");

    // The files: the bug the stream named, and the same campaign as without --serve.
    let (a, b) = (tree(&watched.join("campaign")), tree(&unwatched.join("campaign")));
    assert!(a.contains_key(&format!("bug-{id}.json")), "the streamed bug is the one written: {:?}", a.keys());
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>(), "the same files: bug ids, corpus");
    for (name, bytes) in &a {
        match name.as_str() {
            "report.json" | "checkpoint.json" => {
                assert_eq!(without_wall_time(bytes), without_wall_time(&b[name]), "{name}: the same but for host time")
            }
            // The text and the page show the host time.
            "report.txt" | "report.html" => {}
            _ => assert_eq!(bytes, &b[name], "{name} is the same byte for byte"),
        }
    }
    let report = json(&watched.join("campaign/report.json"));
    assert_eq!(report["campaign"]["bugs"][0]["id"], id);
    assert_eq!(report["campaign"]["bugs"][0]["first_round"], found);
    for d in [&watched, &unwatched] {
        std::fs::remove_dir_all(d).ok();
    }
}

#[test]
fn chromium_draws_the_live_page_while_the_campaign_runs() {
    let cwd = dir("live-page");
    let args = explore_args(120, true);
    let mut live = Deja::start(&cwd, &args.iter().map(String::as_str).collect::<Vec<_>>());
    let addr = live.address();
    // The page opens the stream, the campaign starts, and the page closes it at `done`.
    let dom = chromium_dom(&format!("http://{addr}/"));
    let (code, said) = live.wait();
    assert_eq!(code, Some(1), "{said}");
    let report = json(&cwd.join("campaign/report.json"));
    let id = report["campaign"]["bugs"][0]["id"].as_str().unwrap();
    assert_drawn(&dom, id, Some("finished"), "the live page");
    assert!(dom.contains(&format!("href=\"files/bug-{id}.json\"")), "the bug links to its file");
    assert!(dom.contains("<div class=\"value\">120</div>"), "every round counted");
    std::fs::remove_dir_all(&cwd).ok();
}

#[test]
fn deja_serve_shows_a_saved_campaign_read_only_and_serves_nothing_outside_it() {
    let cwd = dir("saved");
    // Long enough that the report samples the host time of one round in four.
    let o = Command::new(deja_bin()).current_dir(&cwd).args(explore_args(1200, false)).output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let campaign = cwd.join("campaign");
    let report = json(&campaign.join("report.json"));
    let id = report["campaign"]["bugs"][0]["id"].as_str().unwrap().to_string();
    std::fs::write(cwd.join("secret.txt"), "outside the campaign").unwrap();

    let mut server = Deja::start(&cwd, &["serve", "campaign"]);
    let addr = server.address();
    assert!(addr.ip().is_loopback(), "loopback unless told otherwise: {addr}");

    let (status, head, page) = http(addr, "GET", "/");
    assert_eq!(status, 200);
    assert!(head.to_ascii_lowercase().contains("content-type: text/html"), "{head}");
    assert!(String::from_utf8_lossy(&page).contains("new EventSource(\"events\")"));

    // A late subscriber gets the whole history.
    let e = events(addr);
    assert_eq!(e[0].0, "hello");
    assert_eq!(e[0].1["live"], false);
    let rounds: Vec<u64> = named(&e, "round").map(|r| r["round"].as_u64().unwrap()).collect();
    assert_eq!(rounds, (1..=1200).collect::<Vec<_>>());
    let timed: Vec<u64> =
        named(&e, "round").filter(|r| r["wall_seconds"].is_f64()).map(|r| r["round"].as_u64().unwrap()).collect();
    assert_eq!(timed, (1..=300).map(|i| 4 * i).collect::<Vec<_>>(), "the host times the report sampled");
    assert_eq!(named(&e, "bug").map(|b| b["id"].as_str().unwrap()).collect::<Vec<_>>(), [id.as_str()]);
    assert_eq!(e.last().unwrap().1["state"], "finished");

    let (status, _, body) = http(addr, "GET", "/campaign.json");
    assert_eq!(status, 200);
    let snap: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(snap["campaign"]["rounds"], 1200);
    assert_eq!(snap["campaign"]["bugs"][0]["id"], id.as_str());

    let bug = format!("bug-{id}.json");
    let (status, head, body) = http(addr, "GET", &format!("/files/{bug}"));
    assert_eq!((status, body), (200, std::fs::read(campaign.join(&bug)).unwrap()), "{head}");
    assert!(head.to_ascii_lowercase().contains("content-type: application/json"), "{head}");
    for bad in [
        "/files/../secret.txt",
        "/files/..%2fsecret.txt",
        "/files/%2e%2e%2fsecret.txt",
        "/files//etc/passwd",
        "/files/%2fetc%2fpasswd",
        "/files/corpus/entry-000000.json",
        "/files/corpus",
        "/files/",
        "/../secret.txt",
        "/secret.txt",
        "/etc/passwd",
        "/nope",
    ] {
        let (status, _, body) = http(addr, "GET", bad);
        assert_eq!(status, 404, "{bad} is not served");
        assert!(!String::from_utf8_lossy(&body).contains("outside the campaign"), "{bad}");
    }
    assert_eq!(http(addr, "POST", "/").0, 405, "read-only");
    // A client that goes away mid-stream harms nothing.
    drop(connect(addr, "GET /events HTTP/1.1\r\n\r\n"));
    let mut half = connect(addr, "GET /events HTTP/1.1\r\nHost: x\r\n\r\n");
    let mut some = [0u8; 64];
    half.read_exact(&mut some).unwrap();
    drop(half);
    assert_eq!(http(addr, "GET", "/").0, 200, "the server still answers");

    // Chromium draws the served page and the static report with the same views.
    let dom = chromium_dom(&format!("http://{addr}/"));
    assert_drawn(&dom, &id, Some("finished"), "the served page");
    let dom = chromium_dom(&format!("file://{}", campaign.join("report.html").display()));
    assert_drawn(&dom, &id, None, "report.html");
    assert!(dom.contains(&format!("href=\"{bug}\"")), "report.html links to the bug file beside it");
    drop(server);

    // A campaign with a checkpoint but no report of as many rounds is shown as checkpointed.
    std::fs::remove_file(campaign.join("report.json")).unwrap();
    let mut server = Deja::start(&cwd, &["serve", "--addr", "127.0.0.1:0", "campaign"]);
    let e = events(server.address());
    assert_eq!(e.last().unwrap().1["state"], "checkpointed");
    assert_eq!(named(&e, "round").count(), 1200);
    drop(server);

    let o = Command::new(deja_bin()).current_dir(&cwd).args(["serve", "campaign/corpus"]).output().unwrap();
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(stderr(&o).contains("holds no campaign"), "{}", stderr(&o));
    std::fs::remove_dir_all(&cwd).ok();
}
