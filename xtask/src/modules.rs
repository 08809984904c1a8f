//! `cargo xtask modules`: the module cycles of each crate. A crate's top-level modules (the files
//! and directories under its `src/`) form a graph in which `a` points at `b` when `a`'s code
//! names `crate::b` (or an item the crate root re-exports from `b`, `crate::Kernel` for
//! `kernel`); test code (`tests.rs`, `tests/`, and what follows a `#[cfg(test)]` line) is left
//! out. Each strongly connected component of more than one module is a cycle: modules that
//! cannot be understood, tested or moved one without the others.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Module → the modules it names.
pub type Graph = BTreeMap<String, BTreeSet<String>>;

/// The top-level module a source file belongs to (`None` for the crate root and for tests).
fn module_of(rel: &Path) -> Option<String> {
    let parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    if parts.iter().any(|p| p == "tests" || p == "tests.rs") {
        return None;
    }
    let first = parts.first()?;
    match first.as_str() {
        "lib.rs" | "main.rs" => None,
        f => Some(f.strip_suffix(".rs").unwrap_or(f).to_string()),
    }
}

/// The code of a file without its tests and line comments.
fn code_of(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        if line.trim_start().starts_with("#[cfg(test)]") {
            break;
        }
        let code = line.split("//").next().unwrap_or_default();
        out.push_str(code);
        out.push('\n');
    }
    out
}

/// The identifiers that follow each `crate::` in `code`, and the items a `use crate::{a, b::c}`
/// group names first.
fn named(code: &str) -> BTreeSet<String> {
    let ident = |s: &str| -> String { s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect() };
    let mut out = BTreeSet::new();
    for (i, _) in code.match_indices("crate::") {
        let rest = &code[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let inner = group.split('}').next().unwrap_or_default();
            for item in inner.split(',') {
                let name = ident(item.trim());
                if !name.is_empty() {
                    out.insert(name);
                }
            }
        } else {
            let name = ident(rest);
            if !name.is_empty() {
                out.insert(name);
            }
        }
    }
    out
}

/// What the crate root re-exports: item → the module it comes from (`pub use kernel::Kernel;`,
/// `pub use fs::{CrashModel, Fs};`).
fn re_exports(root: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for stmt in code_of(root).split(';') {
        let Some(path) = stmt.trim().strip_prefix("pub use ") else { continue };
        let path = path.trim().trim_start_matches("crate::");
        let Some((module, items)) = path.split_once("::") else { continue };
        let items = items.trim().trim_start_matches('{').trim_end_matches('}');
        for item in items.split(',') {
            let last = item.split("::").last().unwrap_or_default();
            let name = last.split(" as ").last().unwrap_or_default().trim();
            if !name.is_empty() && name != "*" {
                out.insert(name.to_string(), module.to_string());
            }
        }
    }
    out
}

/// The module graph of the crate whose sources are under `src`.
pub fn graph(src: &Path) -> Result<Graph, String> {
    let mut files = Vec::new();
    collect(src, &mut files)?;
    let root = ["lib.rs", "main.rs"].iter().map(|f| src.join(f)).find(|p| p.exists());
    let root_text = root.map(std::fs::read_to_string).transpose().map_err(|e| e.to_string())?.unwrap_or_default();
    let exported = re_exports(&root_text);
    let mut g = Graph::new();
    let mut names: Vec<(String, BTreeSet<String>)> = Vec::new();
    for f in &files {
        let rel = f.strip_prefix(src).map_err(|e| e.to_string())?;
        let Some(module) = module_of(rel) else { continue };
        g.entry(module.clone()).or_default();
        let text = std::fs::read_to_string(f).map_err(|e| format!("{}: {e}", f.display()))?;
        names.push((module, named(&code_of(&text))));
    }
    for (module, named) in names {
        for n in named {
            let target = if g.contains_key(&n) { Some(n) } else { exported.get(&n).cloned() };
            if let Some(t) = target.filter(|t| *t != module && g.contains_key(t)) {
                g.get_mut(&module).expect("inserted above").insert(t);
            }
        }
    }
    Ok(g)
}

fn collect(dir: &Path, out: &mut Vec<std::path::PathBuf>) -> Result<(), String> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    entries.sort();
    for p in entries {
        if p.is_dir() {
            collect(&p, out)?;
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
    Ok(())
}

/// The strongly connected components of more than one module, each sorted, largest first
/// (Tarjan's algorithm).
pub fn cycles(g: &Graph) -> Vec<Vec<String>> {
    struct Tarjan<'a> {
        g: &'a Graph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    impl<'a> Tarjan<'a> {
        fn visit(&mut self, v: &'a str) {
            let i = self.index.len();
            self.index.insert(v, i);
            self.low.insert(v, i);
            self.stack.push(v);
            self.on.insert(v);
            for w in self.g.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(lw);
                } else if self.on.contains(w) {
                    let iw = self.index[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut scc = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on.remove(w);
                    scc.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if scc.len() > 1 {
                    scc.sort();
                    self.out.push(scc);
                }
            }
        }
    }
    let mut t = Tarjan {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in g.keys() {
        if !t.index.contains_key(v.as_str()) {
            t.visit(v);
        }
    }
    t.out.sort_by(|a, b| b.len().cmp(&a.len()).then(a.cmp(b)));
    t.out
}

/// Most lines a source file may have, tests beside the code not counted.
pub const MAX_LINES: usize = 900;

/// The lines of `code` before its tests (a `#[cfg(test)]` at the start of a line).
fn code_lines(code: &str) -> usize {
    code.lines().take_while(|l| !l.starts_with("#[cfg(test)]")).count()
}

/// Every source file under `dir` (test files and `tests/` directories left out) with more than
/// [`MAX_LINES`] lines of code, and its count.
fn long_files(dir: &Path) -> Result<Vec<(String, usize)>, String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))? {
        let path = e.map_err(|e| e.to_string())?.path();
        let name = path.file_name().unwrap_or_default().to_string_lossy().into_owned();
        if path.is_dir() && name != "tests" {
            out.extend(long_files(&path)?);
        } else if name.ends_with(".rs") && name != "tests.rs" {
            let n = code_lines(&std::fs::read_to_string(&path).map_err(|e| e.to_string())?);
            if n > MAX_LINES {
                out.push((path.display().to_string(), n));
            }
        }
    }
    Ok(out)
}

/// `cargo xtask modules`: prints each crate's cycles, and the files over [`MAX_LINES`].
pub fn report(crates: &Path) -> Result<(), String> {
    let mut names: Vec<_> = std::fs::read_dir(crates)
        .map_err(|e| e.to_string())?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("src").is_dir())
        .collect();
    names.sort();
    for c in names {
        let g = graph(&c.join("src"))?;
        let found = cycles(&g);
        let name = c.file_name().unwrap_or_default().to_string_lossy().into_owned();
        let in_cycles: usize = found.iter().map(Vec::len).sum();
        println!("{name}: {} modules, {in_cycles} in {} cycle(s)", g.len(), found.len());
        for scc in found {
            println!("  {}", scc.join(" ⇄ "));
        }
        for (file, n) in long_files(&c.join("src"))? {
            println!("  {file}: {n} lines of code (at most {MAX_LINES})");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(edges: &[(&str, &[&str])]) -> Graph {
        edges.iter().map(|(a, bs)| (a.to_string(), bs.iter().map(|b| b.to_string()).collect())).collect()
    }

    #[test]
    fn cycles_are_the_components_of_more_than_one_module() {
        let graph = g(&[
            ("a", &["b"]),
            ("b", &["c"]),
            ("c", &["a", "d"]),
            ("d", &[]),
            ("e", &["f"]),
            ("f", &["e"]),
            ("g", &["g"]),
        ]);
        assert_eq!(cycles(&graph), [vec!["a", "b", "c"], vec!["e", "f"]]);
        assert!(cycles(&g(&[("a", &["b"]), ("b", &[])])).is_empty());
    }

    #[test]
    fn names_come_from_paths_groups_and_the_roots_re_exports() {
        let code = code_of(
            "use crate::fs::Fs;\nuse crate::{sched, threads::Thread};\nfn f() { crate::Kernel::new(); } // crate::comment\n\
             #[cfg(test)]\nmod tests { use crate::tested; }\n",
        );
        let n: Vec<String> = named(&code).into_iter().collect();
        assert_eq!(n, ["Kernel", "fs", "sched", "threads"]);
        let r = re_exports("pub use kernel::Kernel;\npub use fs::{CrashModel, Fs as FileSystem};\npub mod x;\n");
        assert_eq!(r.get("Kernel").map(String::as_str), Some("kernel"));
        assert_eq!(r.get("FileSystem").map(String::as_str), Some("fs"));
        assert_eq!(r.get("CrashModel").map(String::as_str), Some("fs"));
        assert_eq!(module_of(Path::new("sys_fs.rs")).as_deref(), Some("sys_fs"));
        assert_eq!(module_of(Path::new("kernel/report.rs")).as_deref(), Some("kernel"));
        assert_eq!(module_of(Path::new("lib.rs")), None);
        assert_eq!(module_of(Path::new("tests/fs.rs")), None);
        assert_eq!(module_of(Path::new("campaign/tests.rs")), None);
    }

    /// No source file of a crate or of the xtask has more than [`MAX_LINES`] lines of code.
    #[test]
    fn no_source_file_passes_the_line_limit() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut long = long_files(&root.join("crates")).unwrap();
        long.extend(long_files(&root.join("xtask/src")).unwrap());
        assert!(long.is_empty(), "split these: {long:?}");
        assert_eq!(code_lines("fn a() {}\n\n#[cfg(test)]\nmod tests {\n}\n"), 2);
        assert_eq!(code_lines(&"x\n".repeat(MAX_LINES + 1)), MAX_LINES + 1);
    }

    /// No crate has a module cycle: each crate's modules form layers, every one using only
    /// those below it.
    #[test]
    fn no_crate_has_a_module_cycle() {
        let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates");
        let mut seen = 0;
        for e in std::fs::read_dir(&crates).unwrap() {
            let dir = e.unwrap().path();
            if !dir.join("src").is_dir() {
                continue;
            }
            let name = dir.file_name().unwrap().to_string_lossy().into_owned();
            let found = cycles(&graph(&dir.join("src")).unwrap());
            assert!(found.is_empty(), "{name} has module cycles: {found:?}");
            seen += 1;
        }
        assert!(seen >= 13, "every crate was looked at");
        // The check sees the cycles it is there for: two modules of a crate written to disk that
        // name each other, one through a path and one through the root's re-export.
        let dir = std::env::temp_dir().join(format!("deja-modules-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("b")).unwrap();
        std::fs::write(dir.join("lib.rs"), "mod a;\nmod b;\nmod c;\npub use a::A;\n").unwrap();
        std::fs::write(dir.join("a.rs"), "pub struct A;\nfn f() { crate::b::g(); }\n").unwrap();
        std::fs::write(dir.join("b/mod.rs"), "use crate::A;\npub fn g() {}\n").unwrap();
        std::fs::write(dir.join("c.rs"), "use crate::a::A;\n").unwrap();
        let found = cycles(&graph(&dir).unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(found, [["a", "b"]]);
    }
}
