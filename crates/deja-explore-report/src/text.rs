//! The plain-text report.

use std::fmt::Write as _;

use crate::{comparison_line, duration, percent, plural, thousands, Campaign};

/// A plain report a person reads in a terminal: a header with the key numbers, the bugs with the commands that
/// reproduce them, the assertions, and the comparison with the baseline when there is one.
pub fn render_text(c: &Campaign) -> String {
    let mut out = String::new();
    let bugs = c.bugs.len() as u64;
    let verdict = if bugs == 0 { "no bug found".to_string() } else { format!("{} found", plural(bugs, "bug", "bugs")) };
    let _ = writeln!(out, "deja explore: {}: {verdict}", c.program);
    let coverage = if let Some(b) = &c.blocks {
        format!(
            "{} / {} blocks ({}), {} / {} functions{}",
            thousands(b.blocks_hit),
            thousands(b.blocks_total),
            percent(b.blocks_hit, b.blocks_total).unwrap_or_default(),
            thousands(b.functions_reached),
            thousands(b.functions_total),
            if b.scope.is_empty() { String::new() } else { format!(" (scope: {})", b.scope.join(", ")) }
        )
    } else if c.edges_total == 0 && c.edges_hit > 0 {
        // A cluster campaign: behaviours (output lines, assertion outcomes, fault kinds), no edges.
        format!("{} behaviours seen (no edge instrumentation)", thousands(c.edges_hit))
    } else if c.edges_total == 0 {
        "no coverage instrumentation".to_string()
    } else {
        format!(
            "{} / {} edges ({})",
            thousands(c.edges_hit),
            thousands(c.edges_total),
            percent(c.edges_hit, c.edges_total).unwrap_or_default()
        )
    };
    let header = [
        ("program", c.program.clone()),
        ("blake3", c.program_blake3.clone()),
        ("strategy", format!("{} (mode: {})", c.strategy, c.mode)),
        ("seed", c.seed.to_string()),
        ("rounds", thousands(c.rounds)),
        ("time", duration(c.wall_seconds)),
        ("corpus", plural(c.corpus_size, "input", "inputs")),
        ("coverage", coverage),
        ("host", c.host.clone().unwrap_or_else(|| "-".into())),
        ("workers", if c.jobs == 0 { "merged".into() } else { c.jobs.to_string() }),
    ];
    let shard = c.shard.as_ref().map(|s| ("shard", s.clone()));
    for (key, value) in header.into_iter().chain(shard) {
        let _ = writeln!(out, "  {key:<10}{value}");
    }
    if !c.shards.is_empty() {
        out.push('\n');
        let _ = writeln!(out, "merged from {}:", plural(c.shards.len() as u64, "campaign", "campaigns"));
        let rows: Vec<Vec<String>> = c
            .shards
            .iter()
            .map(|s| {
                vec![
                    s.dir.clone(),
                    s.shard.clone(),
                    thousands(s.rounds),
                    thousands(s.corpus_size),
                    thousands(s.edges_hit),
                    thousands(s.bugs),
                    duration(s.wall_seconds),
                ]
            })
            .collect();
        table(&mut out, &["DIR", "SHARD", "ROUNDS", "CORPUS", "EDGES", "BUGS", "TIME"], &rows, &[2, 3, 4, 5]);
    }

    out.push('\n');
    if c.bugs.is_empty() {
        out.push_str("bugs: none found\n");
    } else {
        let _ = writeln!(out, "bugs ({bugs}):");
        let rows: Vec<Vec<String>> = c
            .bugs
            .iter()
            .map(|b| {
                let decisions = match b.minimized {
                    Some(m) => format!("{} -> {}", thousands(b.decisions), thousands(m)),
                    None => thousands(b.decisions),
                };
                vec![
                    b.id.clone(),
                    b.signature.clone(),
                    thousands(b.first_round),
                    decisions,
                    b.file.clone(),
                    b.reproduce.clone(),
                ]
            })
            .collect();
        table(&mut out, &["ID", "SIGNATURE", "FIRST ROUND", "DECISIONS", "FILE", "REPRODUCE"], &rows, &[2, 3]);
        for b in &c.bugs {
            if let Some(window) = &b.window {
                let _ = writeln!(out, "\nbug {}: the shortest window of the history that no order explains:", b.id);
                for line in window.lines() {
                    let _ = writeln!(out, "  {line}");
                }
            }
            if let Some(crash) = &b.crash {
                let _ = writeln!(out, "\nbug {}: the crash state it needs:", b.id);
                for line in crash.lines() {
                    let _ = writeln!(out, "  {line}");
                }
            }
        }
    }

    if !c.unconfirmed.is_empty() {
        out.push('\n');
        let _ = writeln!(
            out,
            "unconfirmed failures ({}): a replay on another host core did not give the same run",
            c.unconfirmed.len()
        );
        let rows: Vec<Vec<String>> =
            c.unconfirmed.iter().map(|u| vec![thousands(u.round), u.signature.clone(), u.why.clone()]).collect();
        table(&mut out, &["ROUND", "SIGNATURE", "HOW THE REPLAY DIFFERED"], &rows, &[0]);
        let _ = writeln!(
            out,
            "each is a determinism defect of deja, not a flaky bug of the program: a round and its replay from \
             scratch must be the same run"
        );
        evidence(&mut out, &c.unconfirmed);
    }

    if !c.fail_stops.is_empty() {
        out.push('\n');
        let stops: u64 = c.fail_stops.iter().map(|f| f.stops).sum();
        let _ = writeln!(
            out,
            "fail-stops ({} in {} kind{}): lives that ended non-zero after an injected I/O error and were restarted \
             on their disk, not counted as failures (docs/DURABILITY.md#fail-stop)",
            thousands(stops),
            c.fail_stops.len(),
            if c.fail_stops.len() == 1 { "" } else { "s" }
        );
        let lines = crate::FailStopLine::by_frequency(&c.fail_stops);
        let rows: Vec<Vec<String>> =
            lines.iter().map(|f| vec![thousands(f.stops), thousands(f.first_round), f.kind()]).collect();
        table(&mut out, &["STOPS", "FIRST ROUND", "HOW IT STOPPED"], &rows, &[0, 1]);
        for f in lines {
            if !f.output.is_empty() {
                let _ = writeln!(out, "{}: its last output:", f.kind());
                for line in &f.output {
                    let _ = writeln!(out, "  | {line}");
                }
            }
            if let (Some(file), Some(cmd)) = (&f.file, &f.reproduce) {
                let _ = writeln!(out, "  counted as a failure (--fail-stop never) it fails: {file}, `{cmd}`");
            }
            if let Some(why) = &f.not_run {
                let _ = writeln!(out, "  could not be run again counted as a failure: {why}");
            }
        }
    }

    if let Some(f) = &c.fork_checks {
        out.push('\n');
        if f.diverged.is_empty() {
            let _ = writeln!(
                out,
                "forked rounds verified: {} (one in {}), each the same run as its input booted from scratch",
                f.checked, f.every
            );
        } else {
            let _ = writeln!(
                out,
                "forked rounds verified: {} (one in {}); {} differed from the same input booted from scratch, a \
                 determinism defect of deja:",
                f.checked,
                f.every,
                f.diverged.len()
            );
            let rows: Vec<Vec<String>> =
                f.diverged.iter().map(|u| vec![thousands(u.round), u.signature.clone(), u.why.clone()]).collect();
            table(&mut out, &["ROUND", "FAILURE", "HOW THE BOOTED RUN DIFFERED"], &rows, &[0]);
            evidence(&mut out, &f.diverged);
        }
    }

    if c.no_progress_rounds > 0 {
        out.push('\n');
        let _ = writeln!(
            out,
            "rounds without progress ({}): the watchdog stopped them (not bugs; DEJA_NO_PROGRESS_S sets its limit)",
            thousands(c.no_progress_rounds)
        );
        let rows: Vec<Vec<String>> = c.no_progress.iter().map(|n| vec![thousands(n.round), n.why.clone()]).collect();
        table(&mut out, &["ROUND", "WHAT THE WATCHDOG SAW"], &rows, &[0]);
    }

    if let Some(b) = &c.blocks {
        let row = |f: &crate::FunctionLine| {
            let name = match &f.file {
                Some(file) => format!("{} ({})", f.name, file.rsplit('/').next().unwrap_or(file)),
                None => f.name.clone(),
            };
            vec![
                elide(&name, 96),
                format!("{} / {}", thousands(f.reached), thousands(f.blocks)),
                f.first_round.map_or_else(|| "-".into(), thousands),
            ]
        };
        if !b.latest.is_empty() {
            out.push('\n');
            let _ = writeln!(out, "functions reached last (the rarest: no earlier round reached them):");
            let rows: Vec<Vec<String>> = b.latest.iter().map(row).collect();
            table(&mut out, &["FUNCTION", "BLOCKS", "FIRST ROUND"], &rows, &[1, 2]);
        }
        if !b.never.is_empty() {
            out.push('\n');
            let _ = writeln!(
                out,
                "functions never reached ({} of {}; the largest):",
                thousands(b.functions_total - b.functions_reached),
                thousands(b.functions_total)
            );
            let rows: Vec<Vec<String>> = b.never.iter().map(row).collect();
            table(&mut out, &["FUNCTION", "BLOCKS", "FIRST ROUND"], &rows, &[1, 2]);
        }
        if !b.files.is_empty() {
            out.push('\n');
            let reached = b.files.iter().filter(|f| f.functions_reached > 0).count();
            let _ = writeln!(out, "source files ({reached} of {} reached):", b.files.len());
            let rows: Vec<Vec<String>> = b
                .files
                .iter()
                .map(|f| {
                    vec![
                        elide(&f.file, 96),
                        format!("{} / {}", thousands(f.functions_reached), thousands(f.functions)),
                        format!("{} / {}", thousands(f.blocks_reached), thousands(f.blocks)),
                    ]
                })
                .collect();
            table(&mut out, &["FILE", "FUNCTIONS", "BLOCKS"], &rows, &[1, 2]);
        }
    }

    out.push('\n');
    if let Some(f) = c.frontier {
        let _ = writeln!(
            out,
            "frontier: {} of {} faults tried (each once, on three rounds in four)",
            thousands(f.tried),
            thousands(f.total)
        );
        if f.followed > 0 {
            let _ = writeln!(
                out,
                "  and {} rounds that crashed after a failed sync the program went on past",
                thousands(f.followed)
            );
        }
        if f.passed_over > 0 {
            let _ = writeln!(
                out,
                "  {} passed over: crashes after a failed sync the program stopped at or a round had followed",
                thousands(f.passed_over)
            );
        }
    }
    if c.faults.is_empty() {
        out.push_str("faults: none happened\n");
    } else {
        let _ = writeln!(out, "faults (the rounds in which each kind happened):");
        let mut kinds: Vec<(&String, &u64)> = c.faults.iter().collect();
        kinds.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let rows: Vec<Vec<String>> = kinds
            .into_iter()
            .map(|(kind, n)| vec![kind.clone(), thousands(*n), percent(*n, c.rounds).unwrap_or_else(|| "-".into())])
            .collect();
        table(&mut out, &["KIND", "ROUNDS", "SHARE"], &rows, &[1, 2]);
    }

    out.push('\n');
    if c.assertions.is_empty() {
        out.push_str("assertions: none\n");
    } else {
        let _ = writeln!(out, "assertions ({}):", c.assertions.len());
        let rows: Vec<Vec<String>> = c
            .assertions
            .iter()
            .map(|a| {
                vec![a.status.clone(), a.kind.clone(), thousands(a.hits), thousands(a.failures), a.message.clone()]
            })
            .collect();
        table(&mut out, &["STATUS", "KIND", "HITS", "FAILURES", "MESSAGE"], &rows, &[2, 3]);
    }

    if let Some(line) = comparison_line(c) {
        out.push('\n');
        let _ = writeln!(out, "comparison: {line}");
    }
    out
}

/// Writes an aligned table indented by two spaces; the columns in `right` are right-aligned. The last column is
/// not padded, so long commands do not leave trailing spaces.
fn table(out: &mut String, headers: &[&str], rows: &[Vec<String>], right: &[usize]) {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut s = String::from(" ");
        for (i, cell) in cells.enumerate() {
            let pad = widths[i].saturating_sub(cell.chars().count());
            s.push(' ');
            if i + 1 == widths.len() {
                s.push_str(cell);
            } else if right.contains(&i) {
                s.push_str(&" ".repeat(pad));
                s.push_str(cell);
                s.push(' ');
            } else {
                s.push_str(cell);
                s.push_str(&" ".repeat(pad + 1));
            }
        }
        out.push_str(s.trim_end());
        out.push('\n');
    };
    line(&mut headers.iter().copied());
    for row in rows {
        line(&mut row.iter().map(String::as_str));
    }
}

/// `s` cut to at most `max` characters, its middle replaced by `...` when it is longer.
fn elide(s: &str, max: usize) -> String {
    let n = s.chars().count();
    if n <= max {
        return s.to_string();
    }
    let keep = max.saturating_sub(3);
    let head: String = s.chars().take(keep / 2).collect();
    let tail: String = s.chars().skip(n - (keep - keep / 2)).collect();
    format!("{head}...{tail}")
}

/// Each unconfirmed round's file, the command that replays it, and its last output.
fn evidence(out: &mut String, rounds: &[crate::Unconfirmed]) {
    for u in rounds {
        if let (Some(file), Some(cmd)) = (&u.file, &u.reproduce) {
            let _ = writeln!(out, "round {}: written as {file}; `{cmd}` boots it from scratch", thousands(u.round));
        }
        if !u.output.is_empty() {
            let _ = writeln!(out, "round {}: its last output:", thousands(u.round));
            for line in &u.output {
                let _ = writeln!(out, "  {line}");
            }
        }
    }
}
