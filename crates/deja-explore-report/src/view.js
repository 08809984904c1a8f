// The views of an exploration campaign, shared by report.html and the live page.
//
// One model: the report's campaign (deja.explore-report/1, `campaign`), plus `live` on the live page
// (its state and the workers' rates). report.html embeds the model in #deja-data; the live page builds
// it from the server-sent events of `events` (hello, round, bug, tables, done; see docs/EXPLORE.md).
// render() draws the whole page from the model, with DOM nodes only (no markup from data).
(function () {
  "use strict";
  const SVG = "http://www.w3.org/2000/svg";
  const root = document.getElementById("deja");
  // Points kept per series in the live model, and drawn per series in a chart.
  const KEEP = 4096;
  const DRAW = 1500;

  // ---- DOM ----------------------------------------------------------------------------------
  function build(make, tag, attrs, kids) {
    const e = make(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v !== undefined && v !== null && v !== false) e.setAttribute(k, String(v));
    }
    for (const k of kids.flat(Infinity)) {
      if (k !== undefined && k !== null && k !== false) e.append(k instanceof Node ? k : String(k));
    }
    return e;
  }
  const h = (tag, attrs, ...kids) => build((t) => document.createElement(t), tag, attrs, kids);
  const s = (tag, attrs, ...kids) => build((t) => document.createElementNS(SVG, t), tag, attrs, kids);

  // ---- numbers ------------------------------------------------------------------------------
  const finite = (v) => (typeof v === "number" && Number.isFinite(v) ? v : 0);
  const num = (n) => Math.round(finite(n)).toLocaleString("en-US");
  const plural = (n, one, many) => `${num(n)} ${n === 1 ? one : many}`;
  const f1 = (v) => finite(v).toFixed(1);
  function duration(secs) {
    if (typeof secs !== "number" || !Number.isFinite(secs) || secs < 0) return "-";
    if (secs < 60) return `${secs.toFixed(1)} s`;
    const w = Math.round(secs);
    const two = (v) => String(v).padStart(2, "0");
    return w < 3600 ? `${Math.floor(w / 60)}m ${two(w % 60)}s` : `${Math.floor(w / 3600)}h ${two(Math.floor((w % 3600) / 60))}m`;
  }
  function short(v) {
    if (v < 10000) return String(Math.round(v * 100) / 100);
    const [d, suffix] = v < 1e6 ? [1e3, "k"] : v < 1e9 ? [1e6, "M"] : [1e9, "G"];
    return v % d === 0 ? `${v / d}${suffix}` : `${(v / d).toFixed(1)}${suffix}`;
  }
  function clock(secs) {
    if (secs < 60) return `${Math.round(secs * 10) / 10}s`;
    if (secs < 3600) return secs % 60 ? `${Math.floor(secs / 60)}m${Math.round(secs % 60)}s` : `${secs / 60}m`;
    return `${Math.floor(secs / 3600)}h${String(Math.round((secs % 3600) / 60)).padStart(2, "0")}`;
  }
  // An axis over 0..max: a step of 1, 2 or 5 times a power of ten, at most `target` steps.
  function axis(max, target, integer) {
    max = Math.max(finite(max), integer ? 1 : 1e-6);
    let step = integer ? 1 : Math.pow(10, Math.floor(Math.log10(max / target)));
    for (;;) {
      for (const m of [1, 2, 5]) {
        const st = step * m;
        const n = Math.ceil(max / st - 1e-9);
        if (n <= target) return { top: Math.max(1, n) * st, step: st };
      }
      step *= 10;
    }
  }
  // At most `n` of `pts`, evenly spread, the last always kept.
  function thin(pts, n) {
    if (pts.length <= n) return pts;
    const k = Math.ceil(pts.length / n);
    return pts.filter((_, i) => i % k === 0 || i === pts.length - 1);
  }
  // The last timeline point at or before `round`.
  function at(timeline, round) {
    let lo = 0, hi = timeline.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (timeline[mid].round <= round) lo = mid + 1; else hi = mid;
    }
    return lo > 0 ? timeline[lo - 1] : null;
  }
  // The host time at which `round` was learned, interpolated between the wall points around it.
  function timeOf(wall, round) {
    if (!wall.length) return null;
    let prev = { round: 0, wall_seconds: 0 };
    for (const w of wall) {
      if (w.round >= round) {
        const span = w.round - prev.round;
        return span > 0 ? prev.wall_seconds + ((w.wall_seconds - prev.wall_seconds) * (round - prev.round)) / span : w.wall_seconds;
      }
      prev = w;
    }
    return prev.wall_seconds;
  }
  const basename = (p) => String(p || "").split("/").pop();

  // ---- the model ----------------------------------------------------------------------------
  function normal(c) {
    const m = Object.assign({}, c);
    for (const k of ["timeline", "wall_timeline", "bugs", "assertions", "unconfirmed", "fail_stops", "shards", "no_progress"]) {
      if (!Array.isArray(m[k])) m[k] = [];
    }
    if (!m.faults || typeof m.faults !== "object") m.faults = {};
    return m;
  }
  const semanticNow = (m) => {
    const last = m.timeline[m.timeline.length - 1];
    return last ? finite(last.semantic) : 0;
  };
  function tone(status) {
    switch (String(status).toLowerCase()) {
      case "passed": case "satisfied": case "reached": case "ok": case "pass": return "good";
      case "failed": case "fail": case "violated": return "bad";
      case "unsatisfied": return "warn";
      default: return "muted";
    }
  }
  // Never evaluated, and meant to be: an `unreachable` (or `always_or_unreachable`) never reached holds.
  const neverReached = (a) => !a.hits && !String(a.kind).includes("unreachable");
  const strategyLabel = (s) => (s === "coverage" ? "coverage-guided" : String(s || ""));
  const FAULT_NAMES = {
    crash: "crash", lost_unsynced: "lost unsynced data", torn_write: "torn write", reordered_writes: "reordered writes",
    eio: "EIO", enospc: "ENOSPC", "partition-one-way": "one-way partition", "tcp-reset": "TCP reset",
    "udp-loss": "UDP loss", "udp-duplicate": "UDP duplicate", "udp-reorder": "UDP reorder",
  };
  const faultName = (k) => FAULT_NAMES[k] || String(k).replace(/[-_]/g, " ");

  // ---- a chart --------------------------------------------------------------------------------
  // o: {cls, label, x: {max, title, ticks}, left: {max, title}, right: {max, title} | undefined,
  //     series: [{cls, pts: [[x, y]], right, area}], bugs: [{x, y, id, title, href}], empty}
  function chart(o) {
    const W = 1000, H = 360;
    const rows = o.bugs.length > 1 ? 2 : 1;
    const L = 72, R = o.right ? 72 : 28, T = 16 + 16 * rows, B = 56;
    const pw = W - L - R, ph = H - T - B;
    const xa = axis(o.x.max, 8, o.x.integer), la = axis(o.left.max, 5, true);
    const ra = o.right ? axis(o.right.max, 5, true) : null;
    const X = (v) => L + (pw * finite(v)) / xa.top;
    const Y = (v, a) => T + ph - (ph * finite(v)) / a.top;
    const c = (v) => (Number.isFinite(v) ? v.toFixed(1) : "0");
    const kids = [];
    for (let v = 0; v <= la.top + 1e-9; v += la.step) {
      const y = c(Y(v, la));
      kids.push(s("line", { class: v === 0 ? "axis" : "grid", x1: L, y1: y, x2: L + pw, y2: y }));
      kids.push(s("text", { x: L - 8, y, dy: 4, "text-anchor": "end" }, short(v)));
    }
    if (ra) {
      for (let v = 0; v <= ra.top + 1e-9; v += ra.step) {
        kids.push(s("text", { class: "tick corpus", x: L + pw + 8, y: c(Y(v, ra)), dy: 4 }, short(v)));
      }
    }
    for (let v = 0; v <= xa.top + 1e-9; v += xa.step) {
      const x = c(X(v));
      kids.push(s("line", { class: "axis", x1: x, y1: T + ph, x2: x, y2: T + ph + 5 }));
      kids.push(s("text", { x, y: T + ph + 20, "text-anchor": "middle" }, o.x.ticks(v)));
    }
    kids.push(s("text", { class: "title", x: L + pw / 2, y: H - 10, "text-anchor": "middle" }, o.x.title));
    const mid = c(T + ph / 2);
    kids.push(s("text", { class: "title coverage", transform: `translate(18 ${mid}) rotate(-90)`, "text-anchor": "middle" }, o.left.title));
    if (ra) {
      kids.push(s("text", { class: "title corpus", transform: `translate(${W - 14} ${mid}) rotate(90)`, "text-anchor": "middle" }, o.right.title));
    }
    if (o.empty) {
      kids.push(s("text", { class: "empty", x: L + pw / 2, y: T + ph / 2, "text-anchor": "middle" }, o.empty));
    }
    for (const se of o.series) {
      const a = se.right ? ra : la;
      const pts = thin(se.pts, DRAW);
      if (!pts.length) continue;
      const line = pts.map((p) => `${c(X(p[0]))},${c(Y(p[1], a))}`).join("L");
      if (se.area) {
        kids.push(s("path", { class: "area", d: `M${c(X(pts[0][0]))},${c(T + ph)}L${line}L${c(X(pts[pts.length - 1][0]))},${c(T + ph)}Z` }));
      }
      kids.push(s("path", { class: `series ${se.cls}`, "data-points": pts.length, d: `M${line}` }));
      if (se.area) {
        const last = pts[pts.length - 1];
        kids.push(s("circle", { class: "end", cx: c(X(last[0])), cy: c(Y(last[1], a)), r: 4 }));
      }
    }
    o.bugs.forEach((b, i) => {
      const x = X(b.x);
      const labelY = T - 8 - 16 * (rows - 1 - (i % rows));
      const anchor = x > L + pw - 40 ? "end" : x < L + 40 ? "start" : "middle";
      kids.push(
        s("a", { class: "bug-mark", "data-bug-id": b.id, href: b.href },
          s("title", {}, b.title),
          s("line", { x1: c(x), y1: c(labelY + 4), x2: c(x), y2: c(T + ph) }),
          s("circle", { cx: c(x), cy: c(Y(b.y, la)), r: 6 }),
          s("text", { x: c(x), y: c(labelY), "text-anchor": anchor }, b.id)));
    });
    return s("svg", { class: `chart ${o.cls}`, viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": o.label }, kids);
  }

  function legend(items) {
    return h("div", { class: "legend" }, items.filter(Boolean).map(([cls, text]) => h("span", {}, h("i", { class: `sw ${cls}` }), text)));
  }

  // ---- sections -------------------------------------------------------------------------------
  function head(m) {
    const n = m.bugs.length;
    const state = m.live && m.live.state;
    const badge = state === "running" ? h("span", { class: "state running" }, "live")
      : state === "lost" ? h("span", { class: "state lost" }, "connection lost")
      : state === "finished" ? h("span", { class: "state finished" }, "finished")
      : state === "checkpointed" ? h("span", { class: "state lost" }, `checkpoint at round ${num(m.rounds)}`)
      : null;
    const verdict = n ? `${plural(n, "bug", "bugs")} found` : state === "running" ? "no bug found yet" : "no bug found";
    document.title = `${verdict} · ${m.program} · deja explore`;
    return h("header", {},
      h("div", { class: "eyebrow" }, `deja explore · ${strategyLabel(m.strategy)} strategy · ${m.mode} mode`, badge),
      h("h1", {}, m.program),
      h("div", { class: `verdict ${n ? "bad" : "good"}` }, verdict),
      m.program_blake3 ? h("div", { class: "hash" }, `blake3 ${m.program_blake3}`) : null);
  }

  function card(cls, label, value, sub) {
    return h("div", { class: `card ${cls}` }, h("div", { class: "label" }, label), h("div", { class: "value" }, value), h("div", { class: "sub" }, sub));
  }

  function rates(m) {
    if (m.live && m.live.rates && m.live.rates.length && m.live.state === "running") return m.live.rates;
    return null;
  }

  function cards(m) {
    const n = m.bugs.length;
    const first = n ? Math.min(...m.bugs.map((b) => b.first_round)) : null;
    const out = [card(n ? "bad" : "good", "Bugs", num(n), first !== null ? `first in round ${num(first)}` : "none found")];
    const behaviours = semanticNow(m);
    if (m.blocks) {
      const b = m.blocks;
      out.push(card("", "Blocks hit", num(b.blocks_hit), `of ${num(b.blocks_total)} blocks · ${b.blocks_total ? ((b.blocks_hit * 100) / b.blocks_total).toFixed(1) : "0.0"}%`));
      out.push(card("", "Functions", num(b.functions_reached), `of ${num(b.functions_total)} reached`));
    } else if (m.edges_total > 0) {
      out.push(card("", "Edges hit", num(m.edges_hit), `of ${num(m.edges_total)} edges · ${((m.edges_hit * 100) / m.edges_total).toFixed(1)}%`));
      out.push(card("", "Behaviours", num(behaviours), "semantic edges"));
    } else {
      out.push(card("", "Behaviours", num(Math.max(behaviours, m.edges_hit)), "no edge instrumentation"));
    }
    out.push(card("", "Rounds", num(m.rounds), `in ${duration(m.wall_seconds)}`));
    const r = rates(m);
    if (r) {
      const total = r.reduce((a, b) => a + b, 0);
      out.push(card("", "Rounds / s", f1(total), r.length > 1 ? `${r.map(f1).join(" + ")} per worker` : "1 worker"));
    } else if (m.wall_seconds > 0 && m.rounds > 0) {
      out.push(card("", "Rounds / s", f1(m.rounds / m.wall_seconds), m.jobs ? plural(m.jobs, "worker", "workers") : "merged"));
    }
    out.push(card("", "Corpus", num(m.corpus_size), "inputs kept"));
    const failed = m.assertions.filter((a) => tone(a.status) === "bad").length;
    const never = m.assertions.filter(neverReached).length;
    const total = m.assertions.length;
    const aSub = total === 0 ? "none declared" : `${failed ? `failing of ${num(total)}` : `${num(total)} all fine`}${never ? ` · ${num(never)} never reached` : ""}`;
    out.push(card(total === 0 ? "" : failed ? "bad" : "good", "Assertions", total === 0 ? "-" : failed ? num(failed) : "OK", aSub));
    out.push(card("", "Seed", String(m.seed), `${strategyLabel(m.strategy)} · ${m.mode}`));
    return h("div", { class: "cards" }, out);
  }

  function comparison(m) {
    const b = m.baseline;
    if (!b) return null;
    const side = (c) => `${num(c.edges_hit)} edges, ${plural((c.bugs || []).length, "bug", "bugs")} in ${num(c.rounds)} rounds`;
    const row = (name, c) => {
      const bugs = c.bugs || [];
      const first = bugs.length ? num(Math.min(...bugs.map((x) => x.first_round))) : "-";
      return h("tr", {}, h("td", {}, h("b", {}, name)), h("td", { class: "num" }, num(c.edges_hit)), h("td", { class: "num" }, num(bugs.length)),
        h("td", { class: "num" }, first), h("td", { class: "num" }, num(c.corpus_size)), h("td", { class: "num" }, num(c.rounds)));
    };
    return h("section", { class: "baseline" },
      h("h2", {}, `Compared with a ${b.strategy} baseline`),
      h("p", { class: "compare" }, `${strategyLabel(m.strategy)}: ${side(m)}; ${b.strategy} baseline: ${side(b)}`),
      h("table", {},
        h("tr", {}, h("th"), ["edges hit", "bugs", "first bug at round", "corpus", "rounds"].map((t) => h("th", { class: "num" }, t))),
        row(strategyLabel(m.strategy), m), row(`${b.strategy} baseline`, b)));
  }

  function bugMarks(m, xOf) {
    const base = root.dataset.files || "";
    return m.bugs.map((b) => {
      const p = at(m.timeline, b.first_round);
      return { x: xOf(b), y: p ? p.edges_hit : 0, id: b.id, title: `${b.id} · round ${b.first_round}: ${b.signature}`, href: base + basename(b.file) };
    });
  }

  function overRounds(m) {
    const t = m.timeline;
    const base = m.baseline ? normal(m.baseline).timeline : [];
    const semantic = t.some((p) => p.semantic > 0 && p.semantic !== p.edges_hit);
    const xmax = Math.max(1, m.rounds, ...[t, base].map((x) => (x.length ? x[x.length - 1].round : 0)), ...m.bugs.map((b) => b.first_round));
    const ymax = Math.max(0, ...thin(t, DRAW).map((p) => p.edges_hit), ...thin(base, DRAW).map((p) => p.edges_hit));
    const corpus = Math.max(0, ...thin(t, DRAW).map((p) => p.corpus_size));
    const series = [{ cls: "corpus", right: true, pts: t.map((p) => [p.round, p.corpus_size]) }];
    if (base.length) series.push({ cls: "base", pts: base.map((p) => [p.round, p.edges_hit]) });
    if (semantic) series.push({ cls: "semantic", pts: t.map((p) => [p.round, p.semantic]) });
    series.push({ cls: "coverage", area: true, pts: t.map((p) => [p.round, p.edges_hit]) });
    const empty = !t.length && !base.length ? "no timeline recorded" : ymax === 0 ? "no coverage yet" : null;
    return h("section", { class: "over-rounds" },
      h("h2", {}, "Coverage over rounds"),
      legend([
        ["coverage", `coverage: edges and behaviours (${num(t.length ? t[t.length - 1].edges_hit : m.edges_hit)})`],
        semantic && ["semantic", `behaviours (${num(semanticNow(m))})`],
        ["corpus", `corpus size (${num(m.corpus_size)}, right axis)`],
        base.length && ["base", `${m.baseline.strategy} baseline (${num(base[base.length - 1].edges_hit)})`],
        m.bugs.length && ["bug", "bug, at the round it was first found"],
      ]),
      chart({
        cls: "rounds", label: "coverage over rounds", x: { max: xmax, title: "round", integer: true, ticks: short },
        left: { max: ymax, title: "coverage" }, right: { max: corpus, title: "corpus size" },
        series, bugs: bugMarks(m, (b) => b.first_round), empty,
      }));
  }

  function overTime(m) {
    const t = m.timeline;
    const wall = m.wall_timeline.slice();
    const last = wall[wall.length - 1];
    if (last && m.rounds > last.round && m.wall_seconds > last.wall_seconds) wall.push({ round: m.rounds, wall_seconds: m.wall_seconds });
    const pts = wall.map((w) => [w.wall_seconds, (at(t, w.round) || { edges_hit: 0 }).edges_hit, w.round]);
    const xmax = Math.max(1e-3, ...wall.map((w) => w.wall_seconds));
    const ymax = Math.max(0, ...pts.map((p) => p[1]));
    const rmax = Math.max(1, ...wall.map((w) => w.round));
    const series = [
      { cls: "corpus", right: true, pts: pts.map((p) => [p[0], p[2]]) },
      { cls: "coverage", area: true, pts: pts.map((p) => [p[0], p[1]]) },
    ];
    const known = m.bugs.filter((b) => timeOf(wall, b.first_round) !== null);
    return h("section", { class: "over-time" },
      h("h2", {}, "Coverage over wall time"),
      legend([["coverage", "coverage"], ["corpus", "rounds done (right axis)"], known.length && ["bug", "bug"]]),
      chart({
        cls: "time", label: "coverage over wall time", x: { max: xmax, title: "host time", ticks: clock },
        left: { max: ymax, title: "coverage" }, right: { max: rmax, title: "rounds" }, series,
        bugs: bugMarks(Object.assign({}, m, { bugs: known }), (b) => timeOf(wall, b.first_round)),
        empty: wall.length ? null : "no host times recorded",
      }));
  }

  function bars(rows, cls) {
    const max = Math.max(1, ...rows.map((r) => r[1]));
    return h("div", { class: "bars" }, rows.map(([label, v, text]) =>
      [h("span", {}, label), h("div", { class: `bar ${cls}` }, h("i", { style: `width:${((100 * v) / max).toFixed(1)}%` })), h("span", { class: "n" }, text)]));
  }

  function faults(m) {
    const kinds = Object.entries(m.faults).sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1));
    const rounds = Math.max(1, m.rounds);
    return h("section", { class: "faults" },
      h("h2", {}, "Faults tried ", h("span", { class: "count" }, `(${kinds.length} kinds)`)),
      kinds.length
        ? [h("p", { class: "note" }, `Rounds in which each kind of fault happened, of ${num(m.rounds)} rounds.`),
          bars(kinds.map(([k, v]) => [faultName(k), v, `${num(v)} · ${((100 * v) / rounds).toFixed(0)}%`]), "fault")]
        : h("p", { class: "empty" }, m.live && m.live.state === "running" ? "No fault has happened in any round yet." : "No fault happened in any round."));
  }

  function workers(m) {
    const r = rates(m);
    const rows = r ? r.map((v, i) => [`worker ${i}`, v, `${f1(v)} rounds/s`]) : [];
    const avg = m.wall_seconds > 0 ? m.rounds / m.wall_seconds : 0;
    return h("section", { class: "workers" },
      h("h2", {}, "Throughput"),
      r ? [h("p", { class: "note" }, `${f1(r.reduce((a, b) => a + b, 0))} rounds/s in total, in this invocation.`), bars(rows, "worker")]
        : h("p", { class: "compare" }, avg > 0
          ? `${f1(avg)} rounds/s on average: ${num(m.rounds)} rounds in ${duration(m.wall_seconds)}${m.jobs ? ` on ${plural(m.jobs, "worker", "workers")}` : ""}.`
          : "No round timed yet."));
  }

  function table(cls, title, count, headers, rows, note) {
    return h("section", { class: cls },
      h("h2", {}, `${title} `, h("span", { class: "count" }, `(${count})`)),
      note ? h("p", { class: "empty" }, note) : null,
      rows.length ? h("table", {}, h("tr", {}, headers.map(([t, num]) => h("th", { class: num ? "num" : null }, t))), rows) : null);
  }

  function bugs(m) {
    const base = root.dataset.files || "";
    if (!m.bugs.length) return table("bugs", "Bugs", 0, [], [], m.live && m.live.state === "running" ? "No bug found yet." : "No bug found in this campaign.");
    return table("bugs", "Bugs", m.bugs.length, [["id"], ["signature"], ["first round", 1], ["decisions", 1], ["reproduce"]],
      m.bugs.map((b) => h("tr", { "data-bug-id": b.id },
        h("td", { class: "id" }, h("a", { href: base + basename(b.file) }, b.id)),
        h("td", { class: "sig" }, b.signature,
          b.window ? h("details", { class: "window", open: "" },
            h("summary", {}, "the shortest window of the history that no order explains"),
            h("pre", {}, b.window)) : null,
          b.crash ? h("details", { class: "window", open: "" },
            h("summary", {}, "the crash state it needs"),
            h("pre", {}, b.crash)) : null),
        h("td", { class: "num" }, num(b.first_round)),
        h("td", { class: "num" }, b.minimized !== null && b.minimized !== undefined ? `${num(b.decisions)} → ${num(b.minimized)}` : num(b.decisions)),
        h("td", {}, h("code", {}, b.reproduce), h("div", { class: "file" }, h("a", { href: base + basename(b.file) }, b.file))))));
  }

  function shards(m) {
    if (!m.shards.length) return null;
    return table("shards", "Merged from", m.shards.length,
      [["directory"], ["shard"], ["rounds", 1], ["corpus", 1], ["edges", 1], ["bugs", 1], ["time", 1]],
      m.shards.map((x) => h("tr", {}, h("td", { class: "sig" }, x.dir), h("td", {}, x.shard), h("td", { class: "num" }, num(x.rounds)),
        h("td", { class: "num" }, num(x.corpus_size)), h("td", { class: "num" }, num(x.edges_hit)), h("td", { class: "num" }, num(x.bugs)),
        h("td", { class: "num" }, duration(x.wall_seconds)))));
  }

  function unconfirmed(m) {
    if (!m.unconfirmed.length) return null;
    return table("unconfirmed", "Unconfirmed failures", m.unconfirmed.length, [["signature"], ["round", 1], ["how the replay differed"]],
      m.unconfirmed.map((u) => h("tr", {}, h("td", { class: "sig" }, u.signature), h("td", { class: "num" }, num(u.round)), h("td", {}, u.why))),
      "A replay on another host core did not give the same run: not bugs, but a sign that something the run depends on is not deterministic.");
  }

  function failStops(m) {
    if (!m.fail_stops.length) return null;
    const base = root.dataset.files || "";
    const rows = m.fail_stops.slice().sort((a, b) => b.stops - a.stops || a.first_round - b.first_round);
    return table("fail-stops", "Fail-stops", rows.length, [["how it stopped"], ["stops", 1], ["first round", 1], ["counted as a failure"]],
      rows.map((f) => h("tr", {},
        h("td", { class: "sig" }, f.node ? `node ${f.node}: ${f.words}` : f.words,
          (f.output || []).length ? h("pre", { class: "output" }, f.output.join("\n")) : null),
        h("td", { class: "num" }, num(f.stops)),
        h("td", { class: "num" }, num(f.first_round)),
        h("td", {}, f.reproduce ? h("code", {}, f.reproduce) : (f.not_run ? `not run again: ${f.not_run}` : ""), f.file ? h("div", { class: "file" }, h("a", { href: base + basename(f.file) }, f.file)) : null))),
      "Lives that ended non-zero after an injected I/O error and were restarted on their disk, not counted as failures (--fail-stop never counts them). What each said last:");
  }

  function noProgress(m) {
    if (!m.no_progress_rounds) return null;
    return table("no-progress", "Rounds without progress", num(m.no_progress_rounds), [["round", 1], ["what the watchdog saw"]],
      m.no_progress.map((n) => h("tr", {}, h("td", { class: "num" }, num(n.round)), h("td", {}, n.why))),
      "The watchdog stopped them after DEJA_NO_PROGRESS_S of guest code without a syscall: not bugs. The first of them:");
  }

  function assertions(m) {
    const never = m.assertions.filter(neverReached).length;
    const count = never ? `${m.assertions.length} · ${never} never reached` : m.assertions.length;
    if (!m.assertions.length) return table("assertions", "Assertions", 0, [], [], "The program declares no assertions.");
    return table("assertions", "Assertions", count, [["status"], ["message"], ["kind"], ["hits", 1], ["failures", 1]],
      m.assertions.map((a) => h("tr", { class: neverReached(a) ? "never" : null },
        h("td", {}, h("span", { class: `badge ${tone(a.status)}` }, a.status), neverReached(a) ? [" ", h("span", { class: "badge warn" }, "never reached")] : null),
        h("td", {}, a.message), h("td", {}, a.kind), h("td", { class: "num" }, num(a.hits)), h("td", { class: "num" }, num(a.failures)))));
  }

  // Block coverage of an uninstrumented program: functions reached over rounds, the rarest
  // (reached last) and the largest never reached.
  function functions(m) {
    const b = m.blocks;
    if (!b) return null;
    const steps = b.functions_over_rounds || [];
    const pts = [];
    let prev = 0;
    for (const [round, n] of steps) {
      pts.push([round, prev], [round, n]);
      prev = n;
    }
    if (pts.length) pts.push([Math.max(m.rounds, pts[pts.length - 1][0]), prev]);
    const row = (f) => h("tr", {}, h("td", { class: "sig", title: f.file || "" }, f.file ? `${f.name} (${basename(f.file)})` : f.name), h("td", { class: "num" }, `${num(f.reached)} / ${num(f.blocks)}`),
      h("td", { class: "num" }, f.first_round === null || f.first_round === undefined ? "-" : num(f.first_round)));
    const heads = [["function"], ["blocks reached", 1], ["first round", 1]];
    return h("section", { class: "functions" },
      h("h2", {}, "Functions reached ", h("span", { class: "count" }, `(${num(b.functions_reached)} of ${num(b.functions_total)}${b.scope.length ? ` · scope ${b.scope.join(", ")}` : ""})`)),
      chart({
        cls: "functions-over-rounds", label: "functions reached over rounds",
        x: { max: Math.max(1, m.rounds), title: "round", integer: true, ticks: short },
        left: { max: Math.max(1, b.functions_reached), title: "functions" },
        series: [{ cls: "coverage", area: true, pts }], bugs: [], empty: pts.length ? null : "no function reached",
      }),
      b.latest.length ? table("functions-latest", "Reached last (the rarest)", b.latest.length, heads, b.latest.map(row)) : null,
      b.never.length ? table("functions-never", "Never reached (the largest)", num(b.functions_total - b.functions_reached), heads, b.never.map(row)) : null,
      (b.files || []).length ? table("functions-files", "Source files", num(b.files.length),
        [["file"], ["functions reached", 1], ["blocks reached", 1]],
        b.files.map((f) => h("tr", {}, h("td", { class: "sig" }, f.file), h("td", { class: "num" }, `${num(f.functions_reached)} / ${num(f.functions)}`),
          h("td", { class: "num" }, `${num(f.blocks_reached)} / ${num(f.blocks)}`)))) : null);
  }

  function render(model) {
    const m = normal(model);
    const parts = [
      head(m), cards(m), comparison(m), overRounds(m), functions(m), overTime(m),
      h("div", { class: "pair" }, faults(m), workers(m)),
      shards(m), bugs(m), unconfirmed(m), failStops(m), noProgress(m), assertions(m),
      h("footer", {}, `deja explore ${m.live ? "live view" : "report"} · schema deja.explore-report/1`),
    ];
    root.replaceChildren(...parts.filter(Boolean));
  }

  // ---- the live page ------------------------------------------------------------------------
  function keep(list, point) {
    list.push(point);
    if (list.length > KEEP) {
      const last = list.length - 1;
      const kept = list.filter((_, i) => i % 2 === 0 || i === last);
      list.length = 0;
      list.push(...kept);
    }
  }

  function live() {
    let m = null;
    let timer = null;
    const draw = () => {
      timer = null;
      if (m) render(m);
    };
    const later = () => {
      if (!timer) timer = setTimeout(draw, 150);
    };
    const es = new EventSource("events");
    const on = (name, apply) => es.addEventListener(name, (e) => {
      let d;
      try { d = JSON.parse(e.data); } catch (_) { return; }
      apply(d);
      later();
    });
    on("hello", (d) => {
      m = normal(d.campaign);
      m.live = { state: d.live ? "running" : "checkpointed", rates: [] };
    });
    on("round", (d) => {
      if (!m) return;
      keep(m.timeline, { round: d.round, edges_hit: d.edges + d.semantic, semantic: d.semantic, corpus_size: d.corpus, bugs: d.bugs });
      Object.assign(m, { rounds: d.round, edges_hit: d.edges, edges_total: d.edges_total, corpus_size: d.corpus });
      // A saved campaign's rounds carry a host time only where the report sampled one.
      if (typeof d.wall_seconds === "number") {
        keep(m.wall_timeline, { round: d.round, wall_seconds: d.wall_seconds });
        m.wall_seconds = d.wall_seconds;
      }
      m.live.rates = d.rates || [];
    });
    on("bug", (d) => {
      if (m && !m.bugs.some((b) => b.id === d.id)) m.bugs.push(d);
    });
    on("tables", (d) => {
      if (!m) return;
      m.faults = d.faults || {};
      m.assertions = d.assertions || [];
      m.fail_stops = d.fail_stops || [];
      if (d.blocks) m.blocks = d.blocks;
    });
    on("done", (d) => {
      es.close();
      if (!m) return;
      const { timeline, wall_timeline } = m;
      m = normal(Object.assign(m, d.campaign));
      if (!m.timeline.length) m.timeline = timeline;
      if (!m.wall_timeline.length) m.wall_timeline = wall_timeline;
      m.live.state = d.state || "finished";
      clearTimeout(timer);
      draw();
    });
    es.onerror = () => {
      if (m && m.live.state === "running") {
        m.live.state = "lost";
        later();
      }
    };
  }

  const data = document.getElementById("deja-data");
  if (data) {
    render(JSON.parse(data.textContent).campaign);
  } else {
    root.replaceChildren(h("p", { class: "empty" }, "Connecting to the campaign…"));
    live();
  }
})();
