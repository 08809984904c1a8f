//! A cluster bug file ([`ClusterBug`]): what it records of the failure, the cluster and its
//! nodes, how it is read, checked and written, and how it finds the cluster it needs again,
//! each node's binary and files by the BLAKE3 it records.

use super::*;

/// Where a cluster bug's run was forked (see [`deja_cluster::Fork`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForkRecord {
    /// The point.
    pub at: SteerAt,
    /// Its virtual time, ns.
    pub virtual_time_ns: u64,
    /// Cluster decisions taken before it.
    pub base_decisions: u64,
}

/// A cluster failure, frozen.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterBug {
    /// `deja.cluster-bug/2` ([`CLUSTER_BUG_SCHEMA`]; `/1` files, unsealed, still read).
    pub schema: String,
    /// First 12 hex digits of the signature's BLAKE3.
    pub id: String,
    /// What failed.
    pub signature: FailureSignature,
    /// The cluster file's path when it was found.
    pub cluster: String,
    /// BLAKE3 of the cluster file.
    pub cluster_blake3: String,
    /// BLAKE3 of each node's binary.
    pub binaries: BTreeMap<String, String>,
    /// The input.
    pub input: ClusterInput,
    /// How many cluster decisions the failing run took.
    pub decisions: u64,
    /// The failing run's fault ledger.
    pub faults: Vec<FaultEvent>,
    /// The failing run's digest.
    pub digest: String,
    /// Round that found it.
    pub found_at_round: u64,
    /// The command that reproduces it.
    pub reproduce: String,
    /// For a minimized bug: the bug file it came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minimized_from: Option<String>,
    /// For a minimized bug: the faults minimization removed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removed: Vec<String>,
    /// The CPU fingerprint of the host that found it (absent in bug files of older deja).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<deja_vmm::Fingerprint>,
    /// Where the failing run was forked, when it was: its replay boots the cluster and takes
    /// the input at that point.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<ForkRecord>,
    /// For a history that no order explains: its shortest failing window on a timeline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<String>,
    /// The cluster file's text, so that the bug replays without it (absent in bug files of
    /// older deja, which need the file where `cluster` says).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_text: Option<String>,
    /// The directory the cluster file's relative paths were relative to when it was found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_dir: Option<String>,
    /// Each node's binary file name (what to look for beside the bug file).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub programs: BTreeMap<String, String>,
    /// Each node's declared files: guest path → BLAKE3; and its env files, `env_file:PATH`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_files: BTreeMap<String, BTreeMap<String, String>>,
    /// The choices the failing run's test template took, in order (none without a template):
    /// what its faults replayed as a schedule keep, besides them (see [`ClusterBug::by_schedule`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub template: Vec<u64>,
}

/// What identifies the subject of a cluster bug: each node's name and binary, in name order
/// (part of a bug's id: the same failure of other binaries is another bug).
pub fn cluster_subject(binaries: &BTreeMap<String, String>) -> String {
    binaries.iter().map(|(n, h)| format!("{n}={h}")).collect::<Vec<_>>().join(",")
}

/// Where [`ClusterBug::node_files`] keeps an env file's BLAKE3: by the path the cluster file
/// names, marked apart from guest paths (which start with `/`).
fn env_file_key(named: &str) -> String {
    format!("env_file:{named}")
}

/// The schema of cluster bug files: version 2 added the seal (`deja_format::json`).
pub const CLUSTER_BUG_SCHEMA: Schema =
    Schema { family: "deja.cluster-bug", what: "cluster bug file", current: 2, oldest: 1, sealed_since: 2 };

impl ClusterBug {
    pub(super) fn new(
        target: &ClusterTarget,
        input: &ClusterInput,
        out: &ClusterOutcome,
        round: u64,
        file: &str,
    ) -> Self {
        let signature = out.failure.clone().unwrap_or_else(|| FailureSignature::Other(String::new()));
        ClusterBug {
            schema: CLUSTER_BUG_SCHEMA.id(),
            id: bug_id(&signature, &cluster_subject(&target.cfg.binary_hashes)),
            signature,
            cluster: target.path.clone(),
            cluster_blake3: target.file_blake3.clone(),
            binaries: target.cfg.binary_hashes.clone(),
            input: input.clone(),
            decisions: out.report.decisions.len() as u64,
            faults: out.report.faults.clone(),
            digest: out.report.digest.clone(),
            found_at_round: round,
            reproduce: crate::replay_command(file),
            minimized_from: None,
            removed: Vec::new(),
            host: target.cfg.settings.host().ok().map(|h| h.fingerprint.clone()),
            forked_from: None,
            history: match &out.history {
                Some(Ok(deja_history::Verdict::NotLinearizable(v))) => Some(v.timeline()),
                _ => None,
            },
            cluster_text: (!target.text.is_empty()).then(|| target.text.clone()),
            cluster_dir: Some(target.dir.display().to_string()),
            programs: target.cfg.nodes.iter().map(|n| (n.name.clone(), n.program.clone())).collect(),
            node_files: target
                .cfg
                .nodes
                .iter()
                .filter(|n| !n.files.is_empty() || !n.env_files.is_empty())
                .map(|n| {
                    let files = n.files.iter().map(|(g, d)| (g.clone(), blake3::hash(d).to_hex().to_string()));
                    let envs = n.env_files.iter().map(|(p, h)| (env_file_key(p), h.clone()));
                    (n.name.clone(), files.chain(envs).collect())
                })
                .collect(),
            template: out.report.decisions.iter().filter(|d| d.point.is_template()).map(|d| d.choice).collect(),
        }
    }

    /// Its input as its faults replay as a schedule (minimization, the judge's runs by
    /// meaning): without the overrides, whose decisions move once the faults are fixed, and
    /// with the test template's choices fixed as the failing run took them.
    pub fn by_schedule(&self) -> ClusterInput {
        let template = if self.template.is_empty() { self.input.template.clone() } else { self.template.clone() };
        ClusterInput { overrides: BTreeMap::new(), template, ..self.input.clone() }
    }

    /// Reads a cluster bug file.
    pub fn read(path: &Path) -> Result<ClusterBug, ExploreError> {
        Ok(CLUSTER_BUG_SCHEMA.read(path)?)
    }

    /// Checks the bytes of a cluster bug file read from `path` (named in errors).
    pub fn parse(path: &str, bytes: &[u8]) -> Result<ClusterBug, ExploreError> {
        let (doc, _) = CLUSTER_BUG_SCHEMA.check(path, bytes)?;
        Ok(CLUSTER_BUG_SCHEMA.typed(path, doc)?)
    }

    /// Writes it atomically, sealed.
    pub fn write(&self, path: &Path) -> Result<(), ExploreError> {
        Ok(CLUSTER_BUG_SCHEMA.write(path, self)?)
    }

    /// Loads the cluster this bug needs, from any directory. The cluster file is `config` when
    /// given, else the text the bug carries (or, for bug files of older deja, the file where
    /// the bug says). Each node's binary is the one with the BLAKE3 the bug records, found in
    /// this order: `programs[node]` (`--program NODE=PATH`), the path the cluster file names,
    /// the binary's file name beside the bug file (`beside`, its directory), any file beside
    /// the bug file with that BLAKE3. A binary found nowhere is refused naming the node, the
    /// BLAKE3 it needs, where deja looked, and a file there that changed since.
    pub fn target(
        &self,
        config: Option<&Path>,
        programs: &BTreeMap<String, PathBuf>,
        beside: Option<&Path>,
    ) -> Result<ClusterTarget, ExploreError> {
        let mut missing: Option<ExploreError> = None;
        let mut reader = |node: &str, what: deja_cluster::config::HostFile<'_>, path: &Path| {
            let (want, label, name) = match what {
                deja_cluster::config::HostFile::Binary => {
                    let program = self.programs.get(node).cloned().unwrap_or_else(|| file_name(path));
                    (self.binaries.get(node).cloned(), format!("its binary {program}"), program)
                }
                deja_cluster::config::HostFile::File(guest) => {
                    let want = self.node_files.get(node).and_then(|f| f.get(guest)).cloned();
                    (want, format!("its file {guest}"), file_name(path))
                }
                deja_cluster::config::HostFile::EnvFile(named) => {
                    let want = self.node_files.get(node).and_then(|f| f.get(&env_file_key(named))).cloned();
                    (want, format!("its env_file {named}"), file_name(path))
                }
            };
            let Some(want) = want else {
                // The text the bug carries names nothing the bug has no BLAKE3 for: a host file
                // it names is read only as the one the bug was found with.
                if config.is_none() && self.cluster_text.is_some() {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        "the bug file records no BLAKE3 for it",
                    ));
                }
                return std::fs::read(path);
            };
            let mut candidates: Vec<PathBuf> = Vec::new();
            if matches!(what, deja_cluster::config::HostFile::Binary) {
                candidates.extend(programs.get(node).cloned());
            }
            candidates.push(path.to_path_buf());
            if let Some(dir) = beside {
                candidates.push(dir.join(&name));
            }
            let mut looked = Vec::new();
            for c in &candidates {
                match std::fs::read(c) {
                    Ok(bytes) if blake3::hash(&bytes).to_hex().as_str() == want => return Ok(bytes),
                    Ok(bytes) => looked.push(format!(
                        "{} changed since the bug was found (its BLAKE3 is now {})",
                        c.display(),
                        blake3::hash(&bytes).to_hex()
                    )),
                    Err(e) => looked.push(format!("{}: {e}", c.display())),
                }
            }
            if let Some(bytes) = beside.and_then(|dir| find_by_hash(dir, &want)) {
                return Ok(bytes);
            }
            if let Some(dir) = beside {
                looked.push(format!("no file in {} has it", dir.display()));
            }
            missing = Some(ExploreError::BinaryNotFound {
                node: node.to_string(),
                what: label,
                blake3: want,
                looked: looked.join("; "),
            });
            Err(std::io::Error::new(std::io::ErrorKind::NotFound, "not found by its BLAKE3"))
        };
        let loaded = match (config, &self.cluster_text) {
            (Some(p), _) => {
                let text = std::fs::read_to_string(p)
                    .map_err(|source| deja_cluster::ConfigError::Read { path: p.to_path_buf(), source });
                text.and_then(|t| {
                    let dir = p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
                    ClusterConfig::from_text(&t, p, dir, &mut reader).map(|cfg| (cfg, t, dir.to_path_buf()))
                })
            }
            (None, Some(text)) => {
                let dir = PathBuf::from(self.cluster_dir.as_deref().unwrap_or("."));
                ClusterConfig::from_text(text, Path::new(&self.cluster), &dir, &mut reader)
                    .map(|cfg| (cfg, text.clone(), dir))
            }
            (None, None) => {
                let p = PathBuf::from(&self.cluster);
                let text = std::fs::read_to_string(&p)
                    .map_err(|source| deja_cluster::ConfigError::Read { path: p.clone(), source });
                match text {
                    Err(e) => {
                        return Err(ExploreError::ClusterFileMissing {
                            source: Box::new(e),
                            blake3: self.cluster_blake3.clone(),
                        })
                    }
                    Ok(t) => {
                        let dir =
                            p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new(".")).to_path_buf();
                        ClusterConfig::from_text(&t, &p, &dir, &mut reader).map(|cfg| (cfg, t, dir))
                    }
                }
            }
        };
        let (cfg, text, dir) = match loaded {
            Ok(x) => x,
            Err(e) => return Err(missing.unwrap_or(ExploreError::from(e))),
        };
        let path = config.map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from(&self.cluster));
        if cfg.binary_hashes != self.binaries {
            let why: Vec<String> = self
                .binaries
                .iter()
                .filter(|(n, h)| cfg.binary_hashes.get(*n) != Some(*h))
                .map(|(n, h)| match cfg.binary_hashes.get(n) {
                    Some(now) => format!("node {n}'s binary changed (its BLAKE3 is now {now}, the bug needs {h})"),
                    None => format!("it has no node {n}"),
                })
                .chain(
                    cfg.binary_hashes
                        .keys()
                        .filter(|n| !self.binaries.contains_key(*n))
                        .map(|n| format!("it has a node {n} the bug does not")),
                )
                .collect();
            return crate::NotTheBinariesSnafu { path, why: why.join("; ") }.fail();
        }
        let mut cfg = cfg;
        self.same_files(&mut cfg, beside)?;
        Ok(ClusterTarget { file_blake3: cfg.file_blake3.clone(), cfg, path: path.display().to_string(), text, dir })
    }

    /// Holds each node's declared files to the BLAKE3 the bug records, those deja declares
    /// itself included (a dynamically linked binary's loader and libraries, found on this host
    /// again): a file that differs is taken from the campaign's `inputs/` beside the bug file
    /// by its BLAKE3, else refused with both hashes. (Bug files of older deja record none.)
    fn same_files(&self, cfg: &mut ClusterConfig, beside: Option<&Path>) -> Result<(), ExploreError> {
        let hash = |d: &[u8]| blake3::hash(d).to_hex().to_string();
        for n in &mut cfg.nodes {
            let Some(want) = self.node_files.get(&n.name) else { continue };
            for (guest, expected) in want {
                if n.env_files.get(guest.trim_start_matches("env_file:")).is_some_and(|h| h == expected) {
                    continue; // an env file, read by its BLAKE3 as the cluster was loaded
                }
                let found = n.files.get(guest).map(|d| hash(d));
                if found.as_ref() == Some(expected) {
                    continue;
                }
                let kept = beside.map(|d| d.join(crate::campaign::INPUTS_DIR).join(expected));
                match kept.and_then(|k| std::fs::read(k).ok()).filter(|d| hash(d) == *expected) {
                    Some(data) => {
                        eprintln!(
                            "deja: note: node {}'s {guest} differs on this host; replaying with the recorded one ({expected})",
                            n.name
                        );
                        n.files.insert(guest.clone(), data);
                    }
                    None => {
                        return crate::NodeFileSnafu { node: &n.name, guest, expected, found: found.clone() }.fail()
                    }
                }
            }
        }
        Ok(())
    }
}

/// The file name of `path`.
fn file_name(path: &Path) -> String {
    path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

/// The contents of a regular file directly in `dir` whose BLAKE3 is `want`, if one has it.
fn find_by_hash(dir: &Path, want: &str) -> Option<Vec<u8>> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir).ok()?.filter_map(|e| e.ok().map(|e| e.path())).collect();
    entries.sort();
    entries.into_iter().filter(|p| p.is_file()).find_map(|p| {
        let bytes = std::fs::read(&p).ok()?;
        (blake3::hash(&bytes).to_hex().as_str() == want).then_some(bytes)
    })
}
