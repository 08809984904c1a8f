//! The live view of a campaign: `deja explore --serve` while it runs, `deja serve DIR` once it is
//! saved. A small HTTP server (tiny_http) on threads of its own, bound to loopback unless told
//! otherwise, serves:
//!
//! - `/`: the page (`deja_explore_report::live_page`: the report's views, fed by the events);
//! - `/events`: server-sent events — `hello` (the campaign's settings), `round` (the figures after
//!   each round), `bug` (each confirmed bug), `tables` (the fault mix and the assertions, at most
//!   five times a second) and `done` (the final campaign); a subscriber first gets the history so
//!   far, bounded (every round up to [`ROUNDS_KEPT`], then one in `2^k`, the last always; every
//!   bug; the latest tables);
//! - `/campaign.json`: the campaign as it stands, in the report's JSON;
//! - `/files/NAME`: a file of the campaign's directory, read-only (`bug-<id>.json`, the reports);
//!   anything but a plain file name there is a 404.
//!
//! The campaign only sends copies of its figures into an unbounded channel ([`Feed`]), which
//! never blocks; a hub thread folds them into the history and wakes the subscribers. Nothing
//! flows back, so a campaign's results are the same whether anyone watches or not.

use std::collections::{BTreeMap, VecDeque};
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use deja_explore::Progress;
use deja_explore_report::{AssertionLine, BugSummary, Campaign, RoundPoint, WallPoint};
use serde::Serialize;

/// Rounds of the history kept in memory before it is thinned to one in two.
pub const ROUNDS_KEPT: usize = 2048;
/// Events kept for subscribers that are behind; one further behind gets the history again.
const RECENT_KEPT: usize = 4096;
/// Event streams served at once.
const MAX_STREAMS: usize = 64;
/// A comment sent on a quiet stream this often, so a closed connection is noticed.
const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// `tables` events are sent at most this often while a campaign runs.
const TABLES_EVERY: Duration = Duration::from_millis(200);
/// How long a finished campaign waits for its `done` event to reach the open streams.
const DONE_GRACE: Duration = Duration::from_secs(5);

/// Where to listen: `PORT`, `HOST:PORT`, `[V6]:PORT` or `localhost:PORT`.
pub fn parse_addr(s: &str) -> Result<SocketAddr, String> {
    if let Ok(port) = s.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    if let Some(port) = s.strip_prefix("localhost:").and_then(|p| p.parse::<u16>().ok()) {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    Err(format!(
        "{s:?} is not an address to serve on (PORT, HOST:PORT or [V6]:PORT, e.g. 127.0.0.1:8080); to serve on the \
         default address, write --serve after the program or before another option"
    ))
}

/// The figures of one round, as a `round` event carries them.
#[derive(Debug, Clone, PartialEq, Serialize)]
struct Round {
    round: u64,
    /// Host seconds since the campaign started (absent for rounds of a saved campaign whose
    /// time was not sampled).
    wall_seconds: Option<f64>,
    edges: u64,
    edges_total: u64,
    semantic: u64,
    corpus: u64,
    bugs: u64,
    /// Rounds per second of each worker (live only).
    rates: Vec<f64>,
}

impl Round {
    fn point(&self) -> RoundPoint {
        RoundPoint {
            round: self.round,
            edges_hit: self.edges + self.semantic,
            semantic: self.semantic,
            corpus_size: self.corpus,
            bugs: self.bugs,
        }
    }
}

/// The fault mix and the assertion lines (a `tables` event).
#[derive(Debug, Clone, PartialEq, Serialize)]
struct Tables {
    faults: BTreeMap<String, u64>,
    assertions: Vec<AssertionLine>,
    /// Block coverage so far (functions reached over rounds, the rarest), when measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    blocks: Option<deja_explore_report::BlockCoverage>,
    /// The fail-stops so far, by kind.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    fail_stops: Vec<deja_explore_report::FailStopLine>,
}

impl Tables {
    /// The tables of a campaign as its report holds them.
    fn of(c: &Campaign) -> Tables {
        Tables {
            faults: c.faults.clone(),
            assertions: c.assertions.clone(),
            blocks: c.blocks.clone(),
            fail_stops: c.fail_stops.clone(),
        }
    }
}

/// What the campaign sends the hub.
enum Msg {
    /// Rounds learned before this invocation (a resumed campaign).
    Backlog(Vec<RoundPoint>),
    Round(Round),
    Bug(BugSummary),
    Tables(Tables),
    /// The campaign is over; the report as written.
    Done(Box<Campaign>),
}

/// The campaign's side of a live view: turns each [`Progress`] into copies for the hub.
pub struct Feed {
    tx: mpsc::Sender<Msg>,
    started: bool,
    bugs_seen: usize,
    tables_at: Option<Instant>,
}

impl Feed {
    /// Sends what the page needs of `p`. Never blocks and never fails: a hub that is gone is
    /// nobody watching.
    pub fn observe(&mut self, p: &Progress) {
        if !self.started {
            self.started = true;
            let before = p.timeline.len().saturating_sub(1);
            if before > 0 {
                let _ = self.tx.send(Msg::Backlog(p.timeline[..before].to_vec()));
            }
        }
        let fresh = &p.found[self.bugs_seen.min(p.found.len())..];
        for b in fresh {
            let _ = self.tx.send(Msg::Bug(b.clone()));
        }
        self.bugs_seen = p.found.len();
        let _ = self.tx.send(Msg::Round(Round {
            round: p.round,
            wall_seconds: Some(p.wall_seconds),
            edges: p.edges,
            edges_total: p.edges_total,
            semantic: p.semantic,
            corpus: p.corpus,
            bugs: p.bugs,
            rates: p.worker_rates.to_vec(),
        }));
        if !fresh.is_empty() || self.tables_at.is_none_or(|t| t.elapsed() >= TABLES_EVERY) {
            self.tables_at = Some(Instant::now());
            let assertions = p.assertions.values().cloned().collect();
            let _ = self.tx.send(Msg::Tables(Tables {
                faults: p.faults.clone(),
                assertions,
                blocks: (p.blocks)(),
                fail_stops: p.fail_stops.values().cloned().collect(),
            }));
        }
    }
}

/// One event, as sent on the stream.
type Frame = Arc<str>;

fn frame(event: &str, data: &impl Serialize) -> Frame {
    let json = serde_json::to_string(data).unwrap_or_else(|_| "null".into());
    format!("event: {event}\ndata: {json}\n\n").into()
}

/// The rounds kept: one in `every`, at most [`ROUNDS_KEPT`] (then `every` doubles), and the last.
#[derive(Debug, Default)]
struct Sampled {
    every: u64,
    kept: Vec<Round>,
    last: Option<Round>,
}

impl Sampled {
    fn record(&mut self, r: Round) {
        let every = self.every.max(1);
        if r.round.is_multiple_of(every) {
            self.kept.push(r.clone());
            if self.kept.len() > ROUNDS_KEPT {
                let wider = every.saturating_mul(2);
                self.kept.retain(|k| k.round.is_multiple_of(wider));
                self.every = wider;
            }
        }
        self.last = Some(r);
    }

    /// The kept rounds and the last one, in round order.
    fn all(&self) -> impl Iterator<Item = &Round> {
        let tail = self.last.as_ref().filter(|l| self.kept.last().is_none_or(|k| k.round < l.round));
        self.kept.iter().chain(tail)
    }
}

/// Everything a subscriber is shown: the history, bounded, and the events since.
#[derive(Debug)]
pub struct Book {
    /// A campaign running here (not one read from a directory).
    live: bool,
    /// Its settings (and, once it is done, its final figures), without the series.
    header: Campaign,
    rounds: Sampled,
    bugs: Vec<BugSummary>,
    tables: Option<Tables>,
    /// `finished` or `checkpointed`, once there is nothing more to come.
    done: Option<&'static str>,
    /// The number of events so far, and the latest of them (for streams that are behind).
    seq: u64,
    recent: VecDeque<(u64, Frame)>,
    /// Streams open, and streams ever opened.
    streams: usize,
    viewers: u64,
}

/// `c` without its series (which travel as `round` events).
fn header_of(c: &Campaign) -> Campaign {
    let mut h = c.clone();
    h.timeline.clear();
    h.wall_timeline.clear();
    if let Some(b) = h.baseline.as_deref_mut() {
        b.timeline = deja_explore_report::thin_timeline(&b.timeline, ROUNDS_KEPT);
        b.wall_timeline.clear();
    }
    h
}

impl Book {
    /// The book of a campaign about to run here: its settings so far.
    pub fn running(header: &Campaign) -> Book {
        Book {
            live: true,
            header: header_of(header),
            rounds: Sampled::default(),
            bugs: Vec::new(),
            tables: None,
            done: None,
            seq: 0,
            recent: VecDeque::new(),
            streams: 0,
            viewers: 0,
        }
    }

    /// The book of a saved campaign: its whole history, nothing more to come.
    pub fn saved(c: &Campaign, finished: bool) -> Book {
        let mut b = Book { live: false, ..Book::running(c) };
        let wall: BTreeMap<u64, f64> = c.wall_timeline.iter().map(|w| (w.round, w.wall_seconds)).collect();
        for p in &c.timeline {
            b.rounds.record(Round { wall_seconds: wall.get(&p.round).copied(), ..round_of(p, c.edges_total) });
        }
        b.bugs = c.bugs.clone();
        b.tables = Some(Tables::of(c));
        b.header = header_of(c);
        b.done = Some(if finished { "finished" } else { "checkpointed" });
        b
    }

    fn hello(&self) -> Frame {
        #[derive(Serialize)]
        struct Hello<'a> {
            live: bool,
            campaign: &'a Campaign,
        }
        // The bugs and tables come as events of their own.
        let settings = Campaign {
            bugs: Vec::new(),
            assertions: Vec::new(),
            faults: BTreeMap::new(),
            fail_stops: Vec::new(),
            ..self.header.clone()
        };
        frame("hello", &Hello { live: self.live, campaign: &settings })
    }

    fn done_frame(&self, state: &str) -> Frame {
        #[derive(Serialize)]
        struct Done<'a> {
            state: &'a str,
            campaign: &'a Campaign,
        }
        frame("done", &Done { state, campaign: &self.header })
    }

    /// What a new subscriber is sent first: the history, bugs before the round that found them.
    fn history(&self) -> Vec<Frame> {
        let mut out = vec![self.hello()];
        let mut bugs = self.bugs.iter().peekable();
        for r in self.rounds.all() {
            while let Some(b) = bugs.next_if(|b| b.first_round <= r.round) {
                out.push(frame("bug", b));
            }
            out.push(frame("round", r));
        }
        out.extend(bugs.map(|b| frame("bug", b)));
        out.extend(self.tables.as_ref().map(|t| frame("tables", t)));
        out.extend(self.done.map(|state| self.done_frame(state)));
        out
    }

    fn push(&mut self, f: Frame) {
        self.seq += 1;
        self.recent.push_back((self.seq, f));
        while self.recent.len() > RECENT_KEPT {
            self.recent.pop_front();
        }
    }

    fn apply(&mut self, msg: Msg) {
        match msg {
            Msg::Backlog(points) => {
                let total = self.header.edges_total;
                for p in &points {
                    self.rounds.record(round_of(p, total));
                }
            }
            Msg::Round(r) => {
                let f = frame("round", &r);
                self.header.rounds = r.round;
                self.header.edges_total = r.edges_total;
                self.rounds.record(r);
                self.push(f);
            }
            Msg::Bug(b) => {
                let f = frame("bug", &b);
                self.bugs.push(b);
                self.push(f);
            }
            Msg::Tables(t) => {
                let f = frame("tables", &t);
                self.tables = Some(t);
                self.push(f);
            }
            Msg::Done(c) => {
                self.bugs = c.bugs.clone();
                self.tables = Some(Tables::of(&c));
                self.header = header_of(&c);
                self.done = Some("finished");
                let f = self.done_frame("finished");
                self.push(f);
            }
        }
    }

    /// The campaign as it stands (`/campaign.json`): the history as a report.
    fn snapshot(&self) -> Campaign {
        let mut c = self.header.clone();
        c.timeline = self.rounds.all().map(Round::point).collect();
        c.wall_timeline = self
            .rounds
            .all()
            .filter_map(|r| r.wall_seconds.map(|w| WallPoint { round: r.round, wall_seconds: w }))
            .collect();
        // While the campaign runs, its figures are those of its last round; once it is done,
        // the header holds the final ones.
        if let Some(last) = self.rounds.all().last().filter(|_| self.done.is_none()) {
            c.rounds = last.round;
            c.corpus_size = last.corpus;
            c.edges_hit = last.edges;
            c.wall_seconds = last.wall_seconds.unwrap_or(c.wall_seconds);
        }
        c.bugs = self.bugs.clone();
        if let Some(t) = &self.tables {
            c.faults = t.faults.clone();
            c.assertions = t.assertions.clone();
        }
        c
    }
}

fn round_of(p: &RoundPoint, edges_total: u64) -> Round {
    Round {
        round: p.round,
        wall_seconds: None,
        edges: p.edges_hit - p.semantic.min(p.edges_hit),
        edges_total,
        semantic: p.semantic,
        corpus: p.corpus_size,
        bugs: p.bugs,
        rates: Vec::new(),
    }
}

/// What the server threads share.
struct Shared {
    book: Mutex<Book>,
    changed: Condvar,
    /// The campaign's directory (`/files/` serves from it).
    dir: PathBuf,
}

impl Shared {
    /// The book, even if a thread panicked holding it (it holds only display data).
    fn lock(&self) -> MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A running server.
pub struct Server {
    shared: Arc<Shared>,
    /// The page's address.
    pub url: String,
}

impl Server {
    /// Starts serving `book` and the files of `dir` on `addr`, on threads of its own.
    pub fn start(addr: SocketAddr, dir: &Path, book: Book) -> Result<Server, String> {
        let http = tiny_http::Server::http(addr).map_err(|e| format!("cannot serve on {addr}: {e}"))?;
        let bound = http.server_addr().to_ip().unwrap_or(addr);
        let shared = Arc::new(Shared { book: Mutex::new(book), changed: Condvar::new(), dir: dir.to_path_buf() });
        let s = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("deja-serve".into())
            .spawn(move || {
                for request in http.incoming_requests() {
                    answer(&s, request);
                }
            })
            .map_err(|e| format!("cannot start the server thread: {e}"))?;
        let host = match bound {
            SocketAddr::V6(a) => format!("[{}]", a.ip()),
            SocketAddr::V4(a) => a.ip().to_string(),
        };
        Ok(Server { shared, url: format!("http://{host}:{}/", bound.port()) })
    }

    /// Blocks until someone opens the event stream (the page does when it loads).
    pub fn wait_for_viewer(&self) {
        let mut book = self.shared.lock();
        while book.viewers == 0 {
            book = self.shared.changed.wait(book).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Serves until the process is killed.
    pub fn forever(self) -> ! {
        loop {
            std::thread::park();
        }
    }
}

/// A live view of a campaign about to run: its server, and the hub that feeds it.
pub struct Live {
    server: Server,
    tx: mpsc::Sender<Msg>,
}

impl Live {
    /// Starts the server for a campaign with settings `header`, writing to `dir`.
    pub fn start(addr: SocketAddr, dir: &Path, header: &Campaign) -> Result<(Live, Feed), String> {
        let server = Server::start(addr, dir, Book::running(header))?;
        let (tx, rx) = mpsc::channel();
        let shared = Arc::clone(&server.shared);
        std::thread::Builder::new()
            .name("deja-serve-hub".into())
            .spawn(move || {
                while let Ok(msg) = rx.recv() {
                    shared.lock().apply(msg);
                    shared.changed.notify_all();
                }
            })
            .map_err(|e| format!("cannot start the live view's thread: {e}"))?;
        let feed = Feed { tx: tx.clone(), started: false, bugs_seen: 0, tables_at: None };
        Ok((Live { server, tx }, feed))
    }

    /// The server.
    pub fn server(&self) -> &Server {
        &self.server
    }

    /// Sends the final campaign, and gives the open streams a few seconds to pass it on before
    /// the process ends.
    pub fn finish(self, c: &Campaign) {
        let _ = self.tx.send(Msg::Done(Box::new(c.clone())));
        let deadline = Instant::now() + DONE_GRACE;
        let shared = &self.server.shared;
        let mut book = shared.lock();
        while book.done.is_none() || book.streams > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            book = shared.changed.wait_timeout(book, left).unwrap_or_else(|e| e.into_inner()).0;
        }
    }
}

/// Answers one request; errors are the client's business (it went away).
fn answer(shared: &Arc<Shared>, request: tiny_http::Request) {
    use tiny_http::{Method, Response};
    if !matches!(request.method(), Method::Get | Method::Head) {
        let _ = request.respond(Response::from_string("only GET\n").with_status_code(405));
        return;
    }
    let url = request.url();
    let path = url.split(['?', '#']).next().unwrap_or_default().to_string();
    match path.as_str() {
        "/" | "/index.html" => {
            let page = Response::from_string(deja_explore_report::live_page());
            let _ = request.respond(typed(page, "text/html; charset=utf-8"));
        }
        "/campaign.json" => {
            let c = shared.lock().snapshot();
            let _ =
                request.respond(typed(Response::from_string(deja_explore_report::render_json(&c)), "application/json"));
        }
        "/events" => {
            let shared = Arc::clone(shared);
            let spawned = std::thread::Builder::new().name("deja-serve-events".into()).spawn(move || {
                let open = {
                    let mut book = shared.lock();
                    if book.streams >= MAX_STREAMS {
                        false
                    } else {
                        book.streams += 1;
                        book.viewers += 1;
                        true
                    }
                };
                shared.changed.notify_all();
                if !open {
                    let _ = request.respond(Response::from_string("too many viewers\n").with_status_code(503));
                    return;
                }
                stream(&shared, request.into_writer());
                shared.lock().streams -= 1;
                shared.changed.notify_all();
            });
            if spawned.is_err() {
                eprintln!("deja: the live view could not start a thread for a viewer");
            }
        }
        _ => match path.strip_prefix("/files/").and_then(|name| campaign_file(&shared.dir, name)) {
            Some((file, kind)) => {
                let _ = request.respond(typed(Response::from_file(file), kind));
            }
            None => {
                let _ = request.respond(Response::from_string("not found\n").with_status_code(404));
            }
        },
    }
}

/// A response of `kind`, not to be cached, sent with its length (never in chunks: every body here
/// is in memory or a file).
fn typed<R: std::io::Read>(r: tiny_http::Response<R>, kind: &str) -> tiny_http::Response<R> {
    let header = |k: &str, v: &str| tiny_http::Header::from_bytes(k.as_bytes(), v.as_bytes()).ok();
    let mut r = r.with_chunked_threshold(usize::MAX);
    for h in
        [header("Content-Type", kind), header("Cache-Control", "no-store"), header("X-Content-Type-Options", "nosniff")]
            .into_iter()
            .flatten()
    {
        r = r.with_header(h);
    }
    r
}

/// A file of the campaign's directory, by a plain name of it: letters, digits, `.`, `-` and `_`,
/// not starting with `.`; a regular file (not a link) directly in `dir`. Anything else, `None`.
fn campaign_file(dir: &Path, name: &str) -> Option<(std::fs::File, &'static str)> {
    let plain = !name.is_empty()
        && !name.starts_with('.')
        && name.len() <= 255
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'));
    if !plain {
        return None;
    }
    let path = dir.join(name);
    if !std::fs::symlink_metadata(&path).ok()?.file_type().is_file() {
        return None;
    }
    let kind = match path.extension().and_then(|e| e.to_str()) {
        Some("json") => "application/json",
        Some("html") => "text/html; charset=utf-8",
        Some("txt") => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    };
    Some((std::fs::File::open(path).ok()?, kind))
}

/// Writes one event stream: the history, then every event as it comes, until the campaign is
/// done or the client goes away.
fn stream(shared: &Shared, mut w: Box<dyn Write + Send>) {
    const HEAD: &str = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\n\
                        Cache-Control: no-store\r\nConnection: close\r\nX-Content-Type-Options: nosniff\r\n\r\n";
    let (mut pending, mut cursor, mut done) = {
        let book = shared.lock();
        (book.history(), book.seq, book.done.is_some())
    };
    let mut out = String::from(HEAD);
    loop {
        for f in pending.drain(..) {
            out.push_str(&f);
        }
        if out.is_empty() {
            out.push_str(": keep-alive\n\n");
        }
        if w.write_all(out.as_bytes()).and_then(|()| w.flush()).is_err() || done {
            return;
        }
        out.clear();
        let mut book = shared.lock();
        let deadline = Instant::now() + KEEP_ALIVE;
        while book.seq == cursor {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            book = shared.changed.wait_timeout(book, left).unwrap_or_else(|e| e.into_inner()).0;
        }
        pending = match book.recent.front() {
            // Further behind than is kept: the whole history again (it starts with hello).
            Some((first, _)) if *first > cursor + 1 => book.history(),
            _ => book.recent.iter().filter(|(s, _)| *s > cursor).map(|(_, f)| f.clone()).collect(),
        };
        cursor = book.seq;
        done = book.done.is_some();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn campaign(rounds: u64, bugs_at: &[u64]) -> Campaign {
        let c: Campaign = serde_json::from_value(serde_json::json!({
            "program": "kv", "program_blake3": "", "strategy": "coverage", "mode": "both", "seed": 1,
            "rounds": 0, "wall_seconds": 0.0, "corpus_size": 0, "edges_total": 0, "edges_hit": 0,
            "timeline": [], "bugs": [], "assertions": [], "baseline": null
        }))
        .unwrap();
        let bug = |r: u64| BugSummary {
            id: format!("b{r}"),
            signature: format!("boom {r}"),
            first_round: r,
            file: format!("bug-b{r}.json"),
            reproduce: format!("deja replay out/bug-b{r}.json"),
            decisions: 3,
            minimized: None,
            window: None,
            crash: None,
        };
        Campaign {
            rounds,
            wall_seconds: rounds as f64 / 10.0,
            timeline: (1..=rounds)
                .map(|r| RoundPoint {
                    round: r,
                    edges_hit: 10 + r / 3,
                    semantic: r / 3,
                    corpus_size: r / 5,
                    bugs: bugs_at.iter().filter(|b| **b <= r).count() as u64,
                })
                .collect(),
            wall_timeline: (1..=rounds).map(|r| WallPoint { round: r, wall_seconds: r as f64 / 10.0 }).collect(),
            bugs: bugs_at.iter().map(|r| bug(*r)).collect(),
            faults: BTreeMap::from([("crash".to_string(), 4)]),
            ..c
        }
    }

    /// (event, data) of each frame.
    fn events(frames: &[Frame]) -> Vec<(String, serde_json::Value)> {
        frames
            .iter()
            .map(|f| {
                let (event, data) = f.strip_prefix("event: ").unwrap().split_once("\ndata: ").unwrap();
                (event.to_string(), serde_json::from_str(data.trim_end()).unwrap())
            })
            .collect()
    }

    #[test]
    fn a_saved_campaign_replays_as_its_history_in_order() {
        let c = campaign(40, &[7, 30]);
        let e = events(&Book::saved(&c, true).history());
        let names: Vec<&str> = e.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names.first(), Some(&"hello"));
        assert_eq!(&names[names.len() - 2..], ["tables", "done"]);
        assert_eq!(names.iter().filter(|n| **n == "round").count(), 40);
        let at = |name: &str, round: u64| {
            e.iter().position(|(n, d)| n == name && (d["round"] == round || d["first_round"] == round)).unwrap()
        };
        assert_eq!(at("bug", 7) + 1, at("round", 7), "a bug comes just before the round that found it");
        assert_eq!(at("bug", 30) + 1, at("round", 30));
        let rounds: Vec<u64> =
            e.iter().filter(|(n, _)| n == "round").map(|(_, d)| d["round"].as_u64().unwrap()).collect();
        assert!(rounds.windows(2).all(|w| w[0] < w[1]));
        let r7 = &e[at("round", 7)].1;
        assert_eq!(
            (r7["edges"].as_u64(), r7["semantic"].as_u64(), r7["wall_seconds"].as_f64()),
            (Some(10), Some(2), Some(0.7))
        );
        assert_eq!(e.last().unwrap().1["state"], "finished");
        assert!(e[0].1["campaign"]["timeline"].as_array().unwrap().is_empty(), "the series come as events");
        assert_eq!(e[e.len() - 2].1["faults"]["crash"], 4);
    }

    #[test]
    fn the_history_is_bounded_and_keeps_the_last_round() {
        let c = campaign(100_003, &[77_777]);
        let book = Book::saved(&c, false);
        let e = events(&book.history());
        let rounds: Vec<u64> =
            e.iter().filter(|(n, _)| n == "round").map(|(_, d)| d["round"].as_u64().unwrap()).collect();
        assert!(rounds.len() <= ROUNDS_KEPT + 1 && rounds.len() > ROUNDS_KEPT / 2, "{}", rounds.len());
        assert_eq!(rounds.last(), Some(&100_003));
        assert!(e.iter().any(|(n, d)| n == "bug" && d["id"] == "b77777"));
        assert_eq!(e.last().unwrap().1["state"], "checkpointed");
        let snap = book.snapshot();
        assert_eq!(snap.rounds, 100_003);
        assert_eq!(snap.timeline.len(), rounds.len());
        assert_eq!(snap.bugs.len(), 1);
    }

    #[test]
    fn a_live_book_sends_each_event_and_a_late_subscriber_its_history() {
        let mut book = Book::running(&campaign(0, &[]));
        let round = |r: u64| Round {
            round: r,
            wall_seconds: Some(r as f64),
            edges: 0,
            edges_total: 0,
            semantic: r,
            corpus: 1,
            bugs: u64::from(r >= 3),
            rates: vec![1.0, 2.0],
        };
        book.apply(Msg::Backlog(vec![RoundPoint { round: 1, edges_hit: 1, semantic: 1, corpus_size: 1, bugs: 0 }]));
        book.apply(Msg::Round(round(2)));
        let seen = book.seq;
        book.apply(Msg::Bug(campaign(3, &[3]).bugs[0].clone()));
        book.apply(Msg::Round(round(3)));
        let since: Vec<Frame> = book.recent.iter().filter(|(s, _)| *s > seen).map(|(_, f)| f.clone()).collect();
        let names: Vec<String> = events(&since).into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["bug", "round"]);
        let late = events(&book.history());
        let names: Vec<&str> = late.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["hello", "round", "round", "bug", "round"], "the backlog, then what came live");
        assert_eq!(late[0].1["live"], true);
        assert_eq!(late[4].1["rates"], serde_json::json!([1.0, 2.0]));
        book.apply(Msg::Done(Box::new(campaign(3, &[3]))));
        assert_eq!(events(&book.history()).last().unwrap().0, "done");
    }

    #[test]
    fn the_fail_stops_go_live_with_the_tables_and_stay_in_the_history() {
        let (tx, rx) = mpsc::channel();
        let mut feed = Feed { tx, started: false, bugs_seen: 0, tables_at: None };
        let stop = deja_explore_report::FailStopLine {
            node: String::new(),
            words: "status 1 after eio on write #N to /db/journal".into(),
            stops: 3,
            first_round: 2,
            output: vec!["LOST acknowledged batch 5 item 3".into()],
            file: None,
            reproduce: None,
            not_run: None,
        };
        let fail_stops = BTreeMap::from([(stop.words.clone(), stop)]);
        let (faults, assertions) = (BTreeMap::new(), BTreeMap::new());
        let none = || None;
        feed.observe(&Progress {
            round: 4,
            edges: 0,
            edges_total: 0,
            semantic: 0,
            corpus: 1,
            bugs: 0,
            worker_rates: &[],
            wall_seconds: 1.0,
            timeline: &[],
            found: &[],
            faults: &faults,
            assertions: &assertions,
            fail_stops: &fail_stops,
            blocks: &none,
        });
        let mut book = Book::running(&campaign(0, &[]));
        for msg in rx.try_iter() {
            book.apply(msg);
        }
        let e = events(&book.history());
        let tables = &e.iter().find(|(n, _)| n == "tables").expect("a tables event").1;
        assert_eq!(tables["fail_stops"][0]["stops"], 3);
        assert_eq!(tables["fail_stops"][0]["output"][0], "LOST acknowledged batch 5 item 3");
        assert!(e[0].1["campaign"].get("fail_stops").is_none(), "they come with the tables, not the hello");
    }

    #[test]
    fn only_plain_names_of_regular_files_in_the_directory_are_served() {
        let dir = std::env::temp_dir().join(format!("deja-serve-files-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("corpus")).unwrap();
        std::fs::write(dir.join("bug-abc.json"), "{}").unwrap();
        std::fs::write(dir.join(".hidden"), "x").unwrap();
        std::os::unix::fs::symlink("/etc/hostname", dir.join("link.txt")).unwrap();
        assert_eq!(campaign_file(&dir, "bug-abc.json").map(|(_, k)| k), Some("application/json"));
        for bad in [
            "",
            ".",
            "..",
            "../x",
            "..%2fx",
            "%2e%2e",
            "/etc/passwd",
            "corpus",
            "corpus/x",
            ".hidden",
            "link.txt",
            "a\\b",
            "nope.json",
        ] {
            assert!(campaign_file(&dir, bad).is_none(), "{bad:?} is refused");
        }
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn addresses() {
        assert_eq!(parse_addr("8080").unwrap(), "127.0.0.1:8080".parse().unwrap());
        assert_eq!(parse_addr("localhost:9").unwrap(), "127.0.0.1:9".parse().unwrap());
        assert_eq!(parse_addr("[::1]:0").unwrap(), "[::1]:0".parse().unwrap());
        assert_eq!(parse_addr("0.0.0.0:80").unwrap(), "0.0.0.0:80".parse().unwrap());
        assert!(parse_addr("target/guests/kv").unwrap_err().contains("write --serve after the program"));
    }
}
