//! `cargo xtask layers`: the map of deja's crates, each with what it owns and the crates it may
//! use, checked against every crate's `Cargo.toml`. The map is the one docs/ARCHITECTURE.md
//! opens with (a test compares them), and a crate's layer is below every crate that may use it,
//! so nothing points upward.

use std::collections::BTreeSet;
use std::path::Path;

/// One crate of the map: its name, its layer (a crate uses only crates of lower layers), what it
/// owns, and the deja crates it may use.
pub struct Layer {
    /// The crate's name.
    pub name: &'static str,
    /// Its layer: 0 for the leaves.
    pub layer: u32,
    /// What it owns, in one line.
    pub owns: &'static str,
    /// The deja crates it may use.
    pub uses: &'static [&'static str],
}

/// The map, top layer first.
pub const MAP: &[Layer] = &[
    Layer {
        name: "deja-cli",
        layer: 8,
        owns: "the `deja` command: argument parsing, printing, exit codes, the live view's server",
        uses: &[
            "deja-bench",
            "deja-judge",
            "deja-debug",
            "deja-explore",
            "deja-explore-report",
            "deja-history",
            "deja-cluster",
            "deja-vmm",
            "deja-inputs",
            "deja-image",
            "deja-kernel",
            "deja-rewrite",
            "deja-format",
        ],
    },
    Layer {
        name: "deja-bench",
        layer: 7,
        owns: "`deja bench`: deja against native execution, forks, clusters, campaigns and checks, measured side by side",
        uses: &[
            "deja-judge",
            "deja-explore",
            "deja-history",
            "deja-cluster",
            "deja-vmm",
            "deja-kernel",
            "deja-rewrite",
        ],
    },
    Layer {
        name: "deja-judge",
        layer: 6,
        owns: "`deja check`: capsules, one pipeline of checks for programs and clusters, verdicts, certificates",
        uses: &["deja-explore", "deja-cluster", "deja-vmm", "deja-inputs", "deja-kernel", "deja-protocol", "deja-format"],
    },
    Layer {
        name: "deja-debug",
        layer: 6,
        owns: "`deja debug`: a GDB remote-protocol server for a program bug's replay, forwards and backwards",
        uses: &["deja-explore", "deja-vmm", "deja-kernel"],
    },
    Layer {
        name: "deja-explore",
        layer: 5,
        owns: "campaigns: corpus, mutation, workers, bug files, minimization, over a program or a cluster; crash sweeps",
        uses: &[
            "deja-cluster",
            "deja-vmm",
            "deja-inputs",
            "deja-kernel",
            "deja-history",
            "deja-explore-report",
            "deja-protocol",
            "deja-format",
        ],
    },
    Layer {
        name: "deja-cluster",
        layer: 4,
        owns: "cluster files (TOML or docker-compose), one VM per node on one virtual time line, the simulated network, node faults, test templates",
        uses: &["deja-vmm", "deja-inputs", "deja-kernel"],
    },
    Layer {
        name: "deja-vmm",
        layer: 3,
        owns: "KVM: VMs, guest memory and page tables, the exit loop, snapshots, forks (the only `unsafe` on the host)",
        uses: &["deja-kernel", "deja-rewrite", "deja-format"],
    },
    Layer {
        name: "deja-inputs",
        layer: 3,
        owns: "what a run is given: a dynamic program's loader and libraries, ld.so.cache, a program in an image or a host tree (and a disk written out as one); what a run looked for that the host has (`not_given`)",
        uses: &["deja-image", "deja-kernel"],
    },
    Layer {
        name: "deja-guestkernel",
        layer: 2,
        owns: "the kernel model as a freestanding image for the guest placement: its entries, heap, host calls and view of guest memory (a workspace of its own, x86_64-unknown-none)",
        uses: &["deja-kernel"],
    },
    Layer {
        name: "deja-image",
        layer: 2,
        owns: "container images and trees as bytes: layers, whiteouts, digests, the flattened tree",
        uses: &["deja-kernel"],
    },
    Layer {
        name: "deja-kernel",
        layer: 1,
        owns: "the pure kernel model: every syscall's meaning, the file system, clock, network, decisions",
        uses: &["deja-rewrite", "deja-protocol"],
    },
    Layer {
        name: "deja-sdk",
        layer: 1,
        owns: "the guest side: assertions, lifecycle, random decisions, coverage (never in the monitor)",
        uses: &["deja-protocol"],
    },
    Layer {
        name: "deja-explore-report",
        layer: 0,
        owns: "campaign reports: text, JSON, the HTML views the live page shares",
        uses: &[],
    },
    Layer { name: "deja-history", layer: 0, owns: "clients' histories and the linearizability checker", uses: &[] },
    Layer { name: "deja-format", layer: 0, owns: "the envelope of every file deja writes, sealed JSON", uses: &[] },
    Layer {
        name: "deja-rewrite",
        layer: 0,
        owns: "the code rewriter: decoding, proven instruction starts, rewrite plans (no_std)",
        uses: &[],
    },
    Layer { name: "deja-protocol", layer: 0, owns: "the SDK ↔ kernel wire format (no_std)", uses: &[] },
];

/// The map as docs/ARCHITECTURE.md shows it: a Markdown table.
pub fn markdown() -> String {
    let mut out = String::from("| crate | layer | owns | may use |\n|---|---|---|---|\n");
    for l in MAP {
        let uses = match l.uses.is_empty() {
            true => "—".to_string(),
            false => l.uses.join(", "),
        };
        out.push_str(&format!("| `{}` | {} | {} | {} |\n", l.name, l.layer, l.owns, uses));
    }
    out
}

/// The deja crates `crate_dir/Cargo.toml` depends on (its `[dependencies]`, not its dev ones).
fn dependencies(crate_dir: &Path) -> Result<BTreeSet<String>, String> {
    let path = crate_dir.join("Cargo.toml");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut out = BTreeSet::new();
    let mut in_deps = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_deps = line == "[dependencies]";
            continue;
        }
        if in_deps && line.starts_with("deja-") {
            let name: String = line.chars().take_while(|c| c.is_alphanumeric() || *c == '-' || *c == '_').collect();
            out.insert(name);
        }
    }
    Ok(out)
}

/// Every way the crates under `crates` disagree with the map: a crate not in it, a dependency it
/// does not allow, a map entry that allows a crate of its own layer or above.
pub fn problems(crates: &Path) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let layer_of = |n: &str| MAP.iter().find(|l| l.name == n).map(|l| l.layer);
    for l in MAP {
        for u in l.uses {
            match layer_of(u) {
                None => out.push(format!("{} may use {u}, which is not in the map", l.name)),
                Some(k) if k >= l.layer => {
                    out.push(format!("{} (layer {}) may use {u} (layer {k}): it points upward", l.name, l.layer))
                }
                Some(_) => {}
            }
        }
    }
    let mut dirs: Vec<_> = std::fs::read_dir(crates)
        .map_err(|e| format!("{}: {e}", crates.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("Cargo.toml").is_file())
        .collect();
    dirs.sort();
    for dir in dirs {
        let name = dir.file_name().unwrap_or_default().to_string_lossy().into_owned();
        let Some(l) = MAP.iter().find(|l| l.name == name) else {
            out.push(format!("{name} is not in the map (xtask/src/layers.rs)"));
            continue;
        };
        for d in dependencies(&dir)? {
            if !l.uses.contains(&d.as_str()) {
                out.push(format!("{name} depends on {d}, which the map does not let it use"));
            }
        }
    }
    Ok(out)
}

/// `cargo xtask layers`: prints the map, then fails on any disagreement.
pub fn report(root: &Path) -> Result<(), String> {
    print!("{}", markdown());
    let found = problems(&root.join("crates"))?;
    for p in &found {
        eprintln!("layers: {p}");
    }
    match found.is_empty() {
        true => Ok(()),
        false => Err(format!("{} disagreements with the map", found.len())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
    }

    /// Every crate is in the map, depends only on what the map lets it use, and the map lets
    /// no crate use one of its own layer or above.
    #[test]
    fn no_crate_uses_a_crate_above_it() {
        let found = problems(&root().join("crates")).unwrap();
        assert!(found.is_empty(), "{found:#?}");
        // The check sees what it is there for: a crate written to disk that uses one above it,
        // and one the map does not know.
        let dir = std::env::temp_dir().join(format!("deja-layers-{}", std::process::id()));
        for (name, deps) in [("deja-kernel", "deja-vmm.workspace = true"), ("deja-new", "")] {
            std::fs::create_dir_all(dir.join(name)).unwrap();
            let toml = format!("[package]\nname = \"{name}\"\n\n[dependencies]\n{deps}\n\n[dev-dependencies]\ndeja-cli.workspace = true\n");
            std::fs::write(dir.join(name).join("Cargo.toml"), toml).unwrap();
        }
        let found = problems(&dir).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(
            found,
            [
                "deja-kernel depends on deja-vmm, which the map does not let it use",
                "deja-new is not in the map (xtask/src/layers.rs)"
            ]
        );
    }

    /// docs/ARCHITECTURE.md opens with this map, as `cargo xtask layers` prints it.
    #[test]
    fn the_architecture_document_opens_with_the_map() {
        let doc = std::fs::read_to_string(root().join("docs/ARCHITECTURE.md")).unwrap();
        let at = doc.find(&markdown()).expect("docs/ARCHITECTURE.md holds the map as `cargo xtask layers` prints it");
        assert!(
            doc[..at].matches("\n## ").count() <= 1,
            "the map comes first in docs/ARCHITECTURE.md, before the other sections"
        );
    }
}
