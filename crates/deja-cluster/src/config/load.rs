//! Reading a cluster file: the TOML parsed, every field and node checked, and each node's
//! binary (or image) and files read, through a [`NodeReader`], into a [`ClusterConfig`].

use std::collections::BTreeMap;
use std::path::Path;

use snafu::{ensure, OptionExt, ResultExt};

use super::error::*;
use super::storage::storage_config;
use super::{Action, ClusterConfig, ClusterFile, NodeConfig, NodeFile};

/// Parses an IPv4 address.
pub fn parse_ip(s: &str) -> Option<[u8; 4]> {
    let ip: std::net::Ipv4Addr = s.parse().ok()?;
    Some(ip.octets())
}

/// True if `path` names a docker-compose file (`*.yaml`, `*.yml`), read by
/// [`compose`](super::compose).
pub fn is_compose(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "yaml" || e == "yml")
}

/// True if `path` names a cluster file: TOML (`*.toml`) or docker-compose ([`is_compose`]).
pub fn is_cluster_file(path: &Path) -> bool {
    is_compose(path) || path.extension().is_some_and(|e| e == "toml")
}

/// What a cluster file names on the host, for a [`NodeReader`]: a node's binary or one of its
/// files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostFile<'a> {
    /// The node's binary.
    Binary,
    /// A file copied in at this guest path.
    File(&'a str),
    /// An env file (a compose service's `env_file`), by the path the file names.
    EnvFile(&'a str),
}

/// The variables of an env file, as Docker reads one: `KEY=VALUE` lines (a value in single or
/// double quotes taken between them; after an unquoted one, ` #` starts a comment), blank lines
/// and `#` comments skipped, an `export ` before a name allowed. A name without a value, which
/// Docker takes from the shell, is refused: a run takes nothing from the host's environment.
pub fn env_file(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line);
        let Some((k, v)) = line.split_once('=') else {
            return Err(format!("line {}: {line} has no value: give its value", i + 1));
        };
        let k = k.trim();
        if k.is_empty() || k.contains(char::is_whitespace) {
            return Err(format!("line {}: {k:?} is not a variable name", i + 1));
        }
        let v = v.trim();
        let quoted = [b'"', b'\''].iter().find(|&&q| v.len() >= 2 && v.as_bytes()[0] == q && v.ends_with(q as char));
        let v = match quoted {
            Some(_) => &v[1..v.len() - 1],
            None => v.split_once(" #").map_or(v, |(a, _)| a).trim_end(),
        };
        out.push((k.to_string(), v.to_string()));
    }
    Ok(out)
}

/// Reads what a cluster file names for a node: (node, what, the host path the file names,
/// relative to the file's directory already resolved).
pub type NodeReader<'a> = &'a mut dyn FnMut(&str, HostFile<'_>, &Path) -> std::io::Result<Vec<u8>>;

impl ClusterConfig {
    /// Reads and checks a cluster file, and the binaries and files it names.
    pub fn load(path: &Path) -> Result<ClusterConfig, ConfigError> {
        let text = std::fs::read_to_string(path).context(ReadSnafu { path })?;
        let base = path.parent().unwrap_or(Path::new("."));
        Self::from_text(&text, path, base, &mut |_, _, p| std::fs::read(p))
    }

    /// Checks the text of a cluster file that was at `path` (named in errors), whose relative
    /// paths are relative to `base`; `read` reads the binaries and files it names.
    pub fn from_text(text: &str, path: &Path, base: &Path, read: NodeReader<'_>) -> Result<ClusterConfig, ConfigError> {
        let file: ClusterFile = if is_compose(path) {
            super::compose::cluster_file(text).context(ComposeSnafu { path })?
        } else {
            toml::from_str(text).context(ParseSnafu { path })?
        };
        let mut cfg = Self::from_file_with(file, base, read).context(InvalidSnafu { path })?;
        cfg.file_blake3 = blake3::hash(text.as_bytes()).to_hex().to_string();
        Ok(cfg)
    }

    /// Checks a parsed file; paths are relative to `base`.
    pub fn from_file(file: ClusterFile, base: &Path) -> Result<ClusterConfig, InvalidCluster> {
        Self::from_file_with(file, base, &mut |_, _, p| std::fs::read(p))
    }

    /// [`ClusterConfig::from_file`], reading the binaries and files through `read`.
    pub fn from_file_with(
        file: ClusterFile,
        base: &Path,
        read: NodeReader<'_>,
    ) -> Result<ClusterConfig, InvalidCluster> {
        ensure!(!file.nodes.is_empty(), NoNodesSnafu);
        ensure!(file.nodes.len() <= 64, TooManyNodesSnafu { count: file.nodes.len() });
        ensure!((16..=4096).contains(&file.memory_mib), MemorySnafu { mib: file.memory_mib });
        let net = &file.network;
        let [lo, hi] = net.latency_ms;
        ensure!(
            lo.is_finite() && hi.is_finite() && lo >= 0.0 && lo <= hi && hi <= 60_000.0,
            LatencySnafu { min: lo, max: hi }
        );
        for (name, p) in
            [("udp_loss", net.udp_loss), ("udp_duplicate", net.udp_duplicate), ("udp_reorder", net.udp_reorder)]
        {
            ensure!((0.0..=1.0).contains(&p), NetworkProbabilitySnafu { field: name, value: p });
        }
        let mut nodes = Vec::new();
        let mut hashes = BTreeMap::new();
        let mut names = std::collections::BTreeSet::new();
        let mut addrs = std::collections::BTreeSet::new();
        for n in &file.nodes {
            ensure!(
                !n.name.is_empty() && n.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'),
                NodeNameSnafu { name: &n.name }
            );
            ensure!(names.insert(n.name.clone()), DuplicateNameSnafu { name: &n.name });
            let ip = parse_ip(&n.address).context(NotIpv4Snafu { node: &n.name, address: &n.address })?;
            ensure!(
                !(ip[0] == 127 || ip == [0; 4] || ip[0] >= 224),
                ReservedAddressSnafu { node: &n.name, address: &n.address }
            );
            ensure!(addrs.insert(ip), AddressTakenSnafu { node: &n.name, address: &n.address });
            let fail_stop = match &n.fail_stop {
                Some(text) => deja_kernel::FailStopMode::parse(text)
                    .map_err(|problem| FailStopSnafu { node: &n.name, problem }.build())?,
                None => deja_kernel::FailStopMode::Auto,
            };
            if let Some(cpus) = n.cpus {
                ensure!((1..=deja_kernel::MAX_CPUS).contains(&cpus), CpusSnafu { node: &n.name, cpus });
            }
            let named = match (&n.binary, &n.image) {
                (Some(p), None) | (None, Some(p)) => p,
                _ => return NodeProgramSnafu { node: &n.name }.fail(),
            };
            let bin = base.join(named);
            let bytes =
                read(&n.name, HostFile::Binary, &bin).context(ReadNodeFileSnafu { node: &n.name, path: &bin })?;
            hashes.insert(n.name.clone(), blake3::hash(&bytes).to_hex().to_string());
            let mut files = BTreeMap::new();
            for (guest, host) in &n.files {
                if let Some(problem) = deja_kernel::fs::guest_path_problem(guest) {
                    return GuestPathSnafu { node: &n.name, guest, problem }.fail();
                }
                let p = base.join(host);
                let data =
                    read(&n.name, HostFile::File(guest), &p).context(ReadNodeFileSnafu { node: &n.name, path: &p })?;
                files.insert(guest.clone(), data);
            }
            for (guest, data) in &n.contents {
                files.entry(guest.clone()).or_insert_with(|| data.clone());
            }
            // `env_file` under `environment`, a later file over an earlier one.
            let mut given = BTreeMap::new();
            let mut env_hashes = BTreeMap::new();
            for p in &n.env_files {
                let host = base.join(p);
                let text = read(&n.name, HostFile::EnvFile(p), &host)
                    .context(ReadNodeFileSnafu { node: &n.name, path: &host })?;
                env_hashes.insert(p.clone(), blake3::hash(&text).to_hex().to_string());
                let vars = env_file(&String::from_utf8_lossy(&text)).map_err(|problem| {
                    NodeSettingSnafu { node: &n.name, problem: format!("env_file {p}: {problem}") }.build()
                })?;
                given.extend(vars);
            }
            given.extend(n.env.clone());
            let mut env: Vec<String> = given.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let mut cwd = n.cwd.clone().unwrap_or_default();
            let node = if n.image.is_some() {
                let problem = |e: deja_inputs::image::OpenError| {
                    NodeImageSnafu { node: &n.name, path: &bin, problem: e.to_string() }.build()
                };
                let img = deja_inputs::image::open(&bytes, n.entrypoint.as_deref(), &n.args, &env, n.cwd.as_deref())
                    .map_err(problem)?;
                (env, cwd) = (img.env, img.cwd);
                let program = img.exe_path.rsplit('/').next().unwrap_or("program").to_string();
                let (argv0, args) = img.argv.split_first().map(|(a, r)| (a.clone(), r.to_vec())).unwrap_or_default();
                (img.image, program, img.exe_path, argv0, args, Some(img.root))
            } else {
                let program = named.file_name().and_then(|s| s.to_str()).unwrap_or("program").to_string();
                let exe_path = format!("/bin/{program}");
                // A dynamically linked binary brings its loader and libraries from the host.
                let needs = deja_inputs::dynlink::host_closure(&bytes, &bin, &exe_path)
                    .map_err(|problem| NodeLibrariesSnafu { node: &n.name, problem }.build())?;
                for (path, data) in needs {
                    files.entry(path).or_insert(data);
                }
                (bytes, program, exe_path.clone(), exe_path, n.args.clone(), None)
            };
            let (image, program, exe_path, argv0, args, root) = node;
            nodes.push(NodeConfig {
                name: n.name.clone(),
                address: ip,
                image,
                program,
                exe_path,
                argv0,
                args,
                root,
                env,
                files,
                cwd,
                cpus: n.cpus.unwrap_or(1),
                wait: n.wait,
                fail_stop,
                failure_marker: n.failure_marker.clone().filter(|m| !m.is_empty()),
                template: n.template.clone(),
                env_files: env_hashes,
                restart: super::Restart::parse(n.restart.as_deref().unwrap_or("no"))
                    .map_err(|problem| NodeSettingSnafu { node: &n.name, problem }.build())?,
            });
        }
        let templated: Vec<&NodeFile> = file.nodes.iter().filter(|n| n.template.is_some()).collect();
        if let [_, second, ..] = templated[..] {
            return NodeSettingSnafu { node: &second.name, problem: "only one node may run a test template" }.fail();
        }
        if let Some(n) = templated.first() {
            if let Some(problem) = n.template.as_ref().and_then(|t| t.problem()) {
                return NodeSettingSnafu { node: &n.name, problem }.fail();
            }
            let kills = file.faults.schedule.iter().any(|f| {
                f.node.as_ref() == Some(&n.name) && matches!(f.action, Action::Kill | Action::Pause | Action::Restart)
            }) || file.faults.random.as_ref().is_some_and(|r| r.targets.contains(&n.name));
            ensure!(
                !kills,
                NodeSettingSnafu {
                    node: &n.name,
                    problem:
                        "the node running the test template cannot be killed or paused (it holds the run's commands)"
                }
            );
        }
        let known = |s: &String| names.contains(s);
        for f in &file.faults.schedule {
            let named: Vec<&String> =
                f.groups.iter().flatten().chain(&f.from).chain(&f.to).chain(f.node.iter()).collect();
            if let Some(bad) = named.iter().find(|s| !known(s)) {
                return UnknownFaultNodeSnafu { at_ms: f.at_ms, name: *bad }.fail();
            }
            let needs_node = matches!(
                f.action,
                Action::Kill | Action::Restart | Action::Pause | Action::Resume | Action::ClockJump | Action::ClockSkew
            );
            ensure!(!needs_node || f.node.is_some(), FaultNeedsNodeSnafu { at_ms: f.at_ms, action: f.action });
            ensure!(
                !(f.action == Action::Partition && f.groups.iter().filter(|g| !g.is_empty()).count() < 2),
                PartitionNeedsGroupsSnafu { at_ms: f.at_ms }
            );
            ensure!(
                !(f.action == Action::PartitionOneWay && (f.from.is_empty() || f.to.is_empty())),
                OneWayNeedsEndsSnafu { at_ms: f.at_ms }
            );
            ensure!(!(f.action == Action::ClockJump && f.ms < 0), ClockJumpBackwardsSnafu { at_ms: f.at_ms });
        }
        if let Some(r) = &file.faults.random {
            if let Some(bad) = r.targets.iter().find(|s| !known(s)) {
                return UnknownRandomTargetSnafu { name: bad }.fail();
            }
            if let Some(bad) = r.partition_targets.iter().find(|s| !known(s)) {
                return UnknownPartitionTargetSnafu { name: bad }.fail();
            }
            let mut seen = std::collections::BTreeSet::new();
            if let Some(twice) = r.partition_targets.iter().find(|s| !seen.insert(*s)) {
                return PartitionTargetsSnafu { problem: format!("names {twice:?} twice") }.fail();
            }
            ensure!(
                r.partition_targets.len() != 1,
                PartitionTargetsSnafu {
                    problem: format!(
                        "names only {:?}; a partition splits at least two nodes (leave it out to split every node)",
                        r.partition_targets[0]
                    )
                }
            );
            for (name, range) in [
                ("partition_every_ms", r.partition_every_ms),
                ("kill_every_ms", r.kill_every_ms),
                ("pause_every_ms", r.pause_every_ms),
                ("clock_every_ms", r.clock_every_ms),
                ("partition_for_ms", Some(r.partition_for_ms)),
                ("down_for_ms", Some(r.down_for_ms)),
                ("pause_for_ms", Some(r.pause_for_ms)),
                ("clock_jump_ms", Some(r.clock_jump_ms)),
            ] {
                if let Some([a, b]) = range {
                    ensure!(
                        a <= b && !(name.ends_with("every_ms") && a == 0),
                        RandomRangeSnafu { field: name, min: a, max: b }
                    );
                }
            }
            ensure!((0.0..=1.0).contains(&r.one_way), OneWayProbabilitySnafu { value: r.one_way });
        }
        let mut storage = storage_config(&file.faults.storage, &known)?;
        // The node that runs the test template is the test's harness: storage faults strike it
        // only where the file names it.
        if let (Some(t), true) = (templated.first(), storage.nodes.is_empty()) {
            storage.nodes = file.nodes.iter().filter(|n| n.name != t.name).map(|n| n.name.clone()).collect();
        }
        let mut schedule = file.faults.schedule.clone();
        schedule.sort_by_key(|f| f.at_ms);
        Ok(ClusterConfig {
            seed: file.seed,
            time_limit_ns: file.time_limit_ms.saturating_mul(1_000_000),
            memory: file.memory_mib << 20,
            network: file.network.clone(),
            random_faults: file.faults.random.clone(),
            schedule,
            storage,
            nodes,
            binary_hashes: hashes,
            file_blake3: String::new(),
            settings: deja_vmm::Settings::default(),
        })
    }
}
