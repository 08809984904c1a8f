//! A docker-compose file read as a cluster file: each service a node, translated to the
//! [`ClusterFile`] a TOML cluster file parses to, so everything after (checks, loading, bug files,
//! the judge) is one path.
//!
//! What a compose file gives, and how deja takes it (docs/COMPOSE.md):
//! - **`services`**: each is a node named by its key. `image` is a reference that
//!   `x-deja.images` maps to an archive on disk (`docker save` output or an OCI layout), or a path
//!   to one (`*.tar`). `entrypoint` and `command` (a list, or a string split as a shell splits
//!   words, without running one) replace the image's as Docker replaces them: an `entrypoint`
//!   drops the image's command. `environment` (a map or `KEY=VALUE` items) is laid over the
//!   image's, `working_dir` is the working directory.
//! - **Names**: every node's `/etc/hosts` names every service by its key, its `hostname`, its
//!   `container_name` and its network `aliases`, so each resolves on deja's network (a file the
//!   service mounts at `/etc/hosts` wins).
//! - **Addresses**: `networks.<net>.ipv4_address` where given, else the next free address of the
//!   network's `ipam` subnet (default 10.0.0.0/24) from `.2`, in the file's order.
//! - **`depends_on`** orders start-up: a service starts after what it depends on (condition
//!   `service_started`, Docker's default; a cycle is refused).
//! - **`volumes`**: a named or anonymous volume is where the node's durable data lives, and where
//!   storage faults strike unless `x-deja.faults.storage` says where; a bind mount of a file copies
//!   that file in (relative to the compose file).
//! - **`x-deja`**, at the top: `seed`, `time_limit_ms`, `memory_mib`, `network`, `faults` and
//!   `images`, as in a TOML cluster file; in a service: `wait`, `cpus`, `fail_stop`,
//!   `failure_marker`. Docker ignores `x-` keys, so the file stays valid for it.
//! - `ports`, `expose` and `labels` change nothing in a simulated network and are accepted; every
//!   other key is refused, all of them named in one error, never ignored.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde::Deserialize;
use serde_yaml_ng::Value;
use snafu::Snafu;

use super::{ClusterFile, FaultsConfig, NetworkConfig, NodeFile};

/// Why a compose file cannot be a cluster.
#[derive(Debug, Snafu)]
#[snafu(visibility(pub(crate)))]
pub enum ComposeError {
    /// Not YAML, or not a mapping.
    #[snafu(display("not a compose file: {problem}"))]
    Yaml {
        /// What is wrong.
        problem: String,
    },
    /// Keys deja does not take (each would change what Docker runs).
    #[snafu(display(
        "keys deja does not take (docs/COMPOSE.md says which it does): {}",
        keys.join(", ")
    ))]
    Unsupported {
        /// Each key, by its path (`services.web.build`).
        keys: Vec<String>,
    },
    /// A value deja cannot take.
    #[snafu(display("{at}: {problem}"))]
    Value {
        /// Where (`services.web.depends_on`).
        at: String,
        /// What is wrong with it.
        problem: String,
    },
}

/// `x-deja` at the top of a compose file: the cluster's settings.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Settings {
    seed: Option<u64>,
    time_limit_ms: Option<u64>,
    memory_mib: Option<u64>,
    #[serde(default)]
    network: Option<NetworkConfig>,
    #[serde(default)]
    faults: Option<FaultsConfig>,
    /// Image reference → archive path (relative to the compose file).
    #[serde(default)]
    images: BTreeMap<String, PathBuf>,
}

/// `x-deja` in a service: the node's settings.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct NodeSettings {
    wait: Option<bool>,
    cpus: Option<u32>,
    fail_stop: Option<String>,
    failure_marker: Option<String>,
    template: Option<crate::template::TemplateSettings>,
}

/// Keys of a service deja takes; [`INERT`] are accepted and change nothing.
const SERVICE_KEYS: &[&str] = &[
    "image",
    "command",
    "entrypoint",
    "environment",
    "working_dir",
    "hostname",
    "container_name",
    "depends_on",
    "volumes",
    "networks",
    "user",
    "restart",
    "env_file",
    "x-deja",
];

/// Keys that change nothing on a simulated network: published ports and labels.
const INERT: &[&str] = &["ports", "expose", "labels"];

fn value_err(at: impl Into<String>, problem: impl Into<String>) -> ComposeError {
    ComposeError::Value { at: at.into(), problem: problem.into() }
}

fn key_str(k: &Value) -> String {
    match k {
        Value::String(s) => s.clone(),
        other => serde_yaml_ng::to_string(other).unwrap_or_default().trim().to_string(),
    }
}

/// A scalar as text (`environment` values may be numbers or booleans).
fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// A command: a list of strings, or a string split into words as a shell would (no shell runs).
fn words(v: &Value, at: &str) -> Result<Vec<String>, ComposeError> {
    match v {
        Value::String(s) => shlex::split(s).ok_or_else(|| value_err(at, format!("{s:?} has an unclosed quote"))),
        Value::Sequence(items) => {
            items.iter().map(|i| scalar(i).ok_or_else(|| value_err(at, "a list of strings"))).collect()
        }
        Value::Null => Ok(Vec::new()),
        _ => Err(value_err(at, "a string or a list of strings")),
    }
}

fn decode<T: for<'de> Deserialize<'de>>(v: &Value, at: &str) -> Result<T, ComposeError> {
    serde_yaml_ng::from_value(v.clone()).map_err(|e| value_err(at, e.to_string()))
}

/// One service, read.
struct Service {
    name: String,
    image: String,
    entrypoint: Option<Vec<String>>,
    command: Option<Vec<String>>,
    env: BTreeMap<String, String>,
    cwd: Option<String>,
    names: Vec<String>,
    address: Option<[u8; 4]>,
    depends: Vec<String>,
    volumes: Vec<String>,
    files: BTreeMap<String, PathBuf>,
    restart: Option<String>,
    env_files: Vec<String>,
    settings: NodeSettings,
}

/// The network the services share: its name (if declared) and subnet.
struct Net {
    name: Option<String>,
    base: [u8; 4],
    prefix: u8,
}

/// Reads the text of a compose file as a cluster.
pub fn cluster_file(text: &str) -> Result<ClusterFile, ComposeError> {
    let mut doc: Value = serde_yaml_ng::from_str(text).map_err(|e| ComposeError::Yaml { problem: e.to_string() })?;
    // Merge keys (`<<: *defaults`), which compose files use to share settings between services.
    doc.apply_merge().map_err(|e| ComposeError::Yaml { problem: e.to_string() })?;
    let Value::Mapping(top) = doc else { return YamlSnafu { problem: "its top level is not a mapping" }.fail() };
    let mut unsupported = Vec::new();
    let mut settings = Settings::default();
    let mut services_v = None;
    let mut volumes_v = None;
    let mut networks_v = None;
    for (k, v) in &top {
        let key = key_str(k);
        match key.as_str() {
            "services" => services_v = Some(v),
            "volumes" => volumes_v = Some(v),
            "networks" => networks_v = Some(v),
            "name" | "version" => {}
            "x-deja" => settings = decode(v, "x-deja")?,
            k if k.starts_with("x-") => {}
            _ => unsupported.push(key),
        }
    }
    let declared_volumes = declared_volumes(volumes_v, &mut unsupported)?;
    let net = network(networks_v, &mut unsupported)?;
    let Some(Value::Mapping(services_m)) = services_v else {
        return Err(value_err("services", "a compose file needs a mapping of services"));
    };
    let mut services = Vec::new();
    for (k, v) in services_m {
        services.push(service(&key_str(k), v, &net, &declared_volumes, &mut unsupported)?);
    }
    if !unsupported.is_empty() {
        return UnsupportedSnafu { keys: unsupported }.fail();
    }
    let known: BTreeSet<&str> = services.iter().map(|s| s.name.as_str()).collect();
    for s in &services {
        if let Some(bad) = s.depends.iter().find(|d| !known.contains(d.as_str())) {
            return Err(value_err(format!("services.{}.depends_on", s.name), format!("no service {bad:?}")));
        }
    }
    let order = start_order(&services)?;
    let addresses = addresses(&services, &net)?;
    let hosts = hosts_file(&services, &addresses);
    let mut nodes = Vec::new();
    for i in order {
        let s = &services[i];
        let image = match settings.images.get(&s.image) {
            Some(p) => p.clone(),
            None if s.image.ends_with(".tar") => PathBuf::from(&s.image),
            None => {
                return Err(value_err(
                    format!("services.{}.image", s.name),
                    format!(
                        "{:?} names no archive: map it to one in x-deja.images (`docker save {} -o FILE.tar`)",
                        s.image, s.image
                    ),
                ))
            }
        };
        let (entrypoint, args) = match (&s.entrypoint, &s.command) {
            (Some(ep), cmd) if !ep.is_empty() => {
                (Some(ep[0].clone()), ep[1..].iter().chain(cmd.iter().flatten()).cloned().collect())
            }
            (_, cmd) => (None, cmd.clone().unwrap_or_default()),
        };
        let [a, b, c, d] = addresses[i];
        let mut contents = BTreeMap::new();
        if !s.files.contains_key("/etc/hosts") {
            contents.insert("/etc/hosts".to_string(), hosts.clone().into_bytes());
        }
        if !s.files.contains_key("/etc/hostname") {
            contents.insert("/etc/hostname".to_string(), format!("{}\n", s.names[0]).into_bytes());
        }
        nodes.push(NodeFile {
            name: s.name.clone(),
            address: format!("{a}.{b}.{c}.{d}"),
            binary: None,
            image: Some(image),
            entrypoint,
            args,
            env: s.env.clone(),
            files: s.files.clone(),
            contents,
            env_files: s.env_files.clone(),
            cwd: s.cwd.clone(),
            cpus: s.settings.cpus,
            // A service that always starts again never ends: the run does not wait for it
            // unless the file says so.
            wait: s.settings.wait.unwrap_or(!matches!(s.restart.as_deref(), Some("always" | "unless-stopped"))),
            fail_stop: s.settings.fail_stop.clone(),
            failure_marker: s.settings.failure_marker.clone(),
            template: s.settings.template.clone(),
            restart: s.restart.clone(),
        });
    }
    let mut faults = settings.faults.unwrap_or_default();
    // Storage faults strike where the volumes are, unless the file says where.
    let with_volumes: Vec<&Service> = services.iter().filter(|s| !s.volumes.is_empty()).collect();
    let storage = &mut faults.storage;
    if storage.nodes.is_empty() && storage.paths.is_empty() && !with_volumes.is_empty() {
        storage.nodes = with_volumes.iter().map(|s| s.name.clone()).collect();
        let paths: BTreeSet<String> = with_volumes.iter().flat_map(|s| s.volumes.iter().cloned()).collect();
        storage.paths = paths.into_iter().collect();
    }
    Ok(ClusterFile {
        seed: settings.seed.unwrap_or_default(),
        time_limit_ms: settings.time_limit_ms.unwrap_or_else(super::default_time_limit),
        memory_mib: settings.memory_mib.unwrap_or_else(super::default_memory),
        network: settings.network.unwrap_or_default(),
        faults,
        nodes,
    })
}

/// The top-level `volumes`: names declared, each with no options but the local driver.
fn declared_volumes(v: Option<&Value>, unsupported: &mut Vec<String>) -> Result<BTreeSet<String>, ComposeError> {
    let mut names = BTreeSet::new();
    match v {
        None | Some(Value::Null) => {}
        Some(Value::Mapping(m)) => {
            for (k, opts) in m {
                let name = key_str(k);
                if let Value::Mapping(o) = opts {
                    for (ok, ov) in o {
                        let key = key_str(ok);
                        let local = key == "driver" && ov.as_str() == Some("local");
                        if !local && key != "labels" && !key.starts_with("x-") {
                            unsupported.push(format!("volumes.{name}.{key}"));
                        }
                    }
                } else if !opts.is_null() {
                    return Err(value_err(format!("volumes.{name}"), "a mapping of options, or nothing"));
                }
                names.insert(name);
            }
        }
        Some(_) => return Err(value_err("volumes", "a mapping of volume names")),
    }
    Ok(names)
}

/// The top-level `networks`: at most one, its subnet from `ipam.config[0].subnet`.
fn network(v: Option<&Value>, unsupported: &mut Vec<String>) -> Result<Net, ComposeError> {
    let mut net = Net { name: None, base: [10, 0, 0, 0], prefix: 24 };
    let m = match v {
        None | Some(Value::Null) => return Ok(net),
        Some(Value::Mapping(m)) => m,
        Some(_) => return Err(value_err("networks", "a mapping of network names")),
    };
    if m.len() > 1 {
        let names: Vec<String> = m.keys().map(key_str).collect();
        return Err(value_err(
            "networks",
            format!("{} networks ({}): deja's simulated network is one; declare one", names.len(), names.join(", ")),
        ));
    }
    for (k, opts) in m {
        let name = key_str(k);
        if let Value::Mapping(o) = opts {
            for (ok, ov) in o {
                let key = key_str(ok);
                match key.as_str() {
                    "driver" if ov.as_str() == Some("bridge") => {}
                    "ipam" => {
                        let subnet = ov
                            .get("config")
                            .and_then(|c| c.get(0))
                            .and_then(|c| c.get("subnet"))
                            .and_then(Value::as_str)
                            .ok_or_else(|| {
                                value_err(format!("networks.{name}.ipam"), "needs config: [{subnet: A.B.C.D/N}]")
                            })?;
                        (net.base, net.prefix) = subnet_of(subnet).ok_or_else(|| {
                            value_err(
                                format!("networks.{name}.ipam"),
                                format!("{subnet:?} is not an IPv4 subnet of /8 to /30"),
                            )
                        })?;
                    }
                    "labels" => {}
                    k if k.starts_with("x-") => {}
                    _ => unsupported.push(format!("networks.{name}.{key}")),
                }
            }
        }
        net.name = Some(name);
    }
    Ok(net)
}

/// `A.B.C.D/N` as its base address and prefix length.
fn subnet_of(s: &str) -> Option<([u8; 4], u8)> {
    let (ip, len) = s.split_once('/')?;
    let ip: std::net::Ipv4Addr = ip.parse().ok()?;
    let len: u8 = len.parse().ok()?;
    if !(8..=30).contains(&len) {
        return None;
    }
    let mask = u32::MAX << (32 - len);
    Some(((u32::from(ip) & mask).to_be_bytes(), len))
}

fn service(
    name: &str,
    v: &Value,
    net: &Net,
    declared_volumes: &BTreeSet<String>,
    unsupported: &mut Vec<String>,
) -> Result<Service, ComposeError> {
    let at = |k: &str| format!("services.{name}.{k}");
    let Value::Mapping(m) = v else { return Err(value_err(format!("services.{name}"), "a mapping")) };
    let mut s = Service {
        name: name.to_string(),
        image: String::new(),
        entrypoint: None,
        command: None,
        env: BTreeMap::new(),
        cwd: None,
        names: vec![name.to_string()],
        address: None,
        depends: Vec::new(),
        volumes: Vec::new(),
        files: BTreeMap::new(),
        restart: None,
        env_files: Vec::new(),
        settings: NodeSettings::default(),
    };
    for (k, v) in m {
        let key = key_str(k);
        if INERT.contains(&key.as_str()) {
            continue;
        }
        if !SERVICE_KEYS.contains(&key.as_str()) {
            unsupported.push(at(&key));
            continue;
        }
        match key.as_str() {
            "image" => s.image = v.as_str().ok_or_else(|| value_err(at(&key), "a string"))?.to_string(),
            "command" => s.command = Some(words(v, &at(&key))?),
            "entrypoint" => s.entrypoint = Some(words(v, &at(&key))?),
            "environment" => s.env = environment(v, &at(&key))?,
            "working_dir" => s.cwd = Some(v.as_str().ok_or_else(|| value_err(at(&key), "a string"))?.to_string()),
            "hostname" | "container_name" => {
                let n = v.as_str().ok_or_else(|| value_err(at(&key), "a string"))?.to_string();
                if !s.names.contains(&n) {
                    s.names.push(n);
                }
            }
            "depends_on" => s.depends = depends_on(v, &at(&key))?,
            "env_file" => s.env_files = env_files(v, &at(&key))?,
            "restart" => {
                let policy = v.as_str().ok_or_else(|| value_err(at(&key), "a string"))?.to_string();
                super::Restart::parse(&policy).map_err(|problem| value_err(at(&key), problem))?;
                s.restart = Some(policy);
            }
            "volumes" => volumes(v, &at(&key), declared_volumes, &mut s)?,
            "networks" => service_networks(v, &at(&key), net, &mut s)?,
            "user" => {
                let u = scalar(v).unwrap_or_default();
                if !matches!(u.as_str(), "1000" | "1000:1000") {
                    return Err(value_err(at(&key), format!("{u:?}: deja runs every program as user and group 1000")));
                }
            }
            "x-deja" => s.settings = decode(v, &at(&key))?,
            _ => unreachable!("every key of SERVICE_KEYS has an arm"),
        }
    }
    if s.image.is_empty() {
        if m.contains_key("build") {
            return Err(value_err(
                format!("services.{name}"),
                "deja does not build images: build it, `docker save` it, and name the archive in x-deja.images",
            ));
        }
        if unsupported.is_empty() {
            return Err(value_err(format!("services.{name}"), "no image"));
        }
    }
    Ok(s)
}

fn environment(v: &Value, at: &str) -> Result<BTreeMap<String, String>, ComposeError> {
    let mut env = BTreeMap::new();
    let unset = |k: &str| {
        value_err(at, format!("{k} has no value: deja gives a program no variable of the host's; give its value"))
    };
    match v {
        Value::Mapping(m) => {
            for (k, val) in m {
                let k = key_str(k);
                let val = scalar(val).ok_or_else(|| unset(&k))?;
                env.insert(k, val);
            }
        }
        Value::Sequence(items) => {
            for i in items {
                let item = i.as_str().ok_or_else(|| value_err(at, "a list of KEY=VALUE strings"))?;
                let (k, val) = item.split_once('=').ok_or_else(|| unset(item))?;
                env.insert(k.to_string(), val.to_string());
            }
        }
        Value::Null => {}
        _ => return Err(value_err(at, "a mapping or a list of KEY=VALUE")),
    }
    Ok(env)
}

/// `env_file`: a path, or a list of paths or of `{path, required}` (a file that is not
/// required and missing is refused too: deja reads what the run is given, and nothing else).
fn env_files(v: &Value, at: &str) -> Result<Vec<String>, ComposeError> {
    let one = |i: &Value| match i {
        Value::String(p) => Ok(p.clone()),
        Value::Mapping(m) => m
            .get("path")
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| value_err(at, "an entry {path: FILE, required: BOOL}")),
        _ => Err(value_err(at, "a path or a list of paths")),
    };
    match v {
        Value::Sequence(items) => items.iter().map(one).collect(),
        other => Ok(vec![one(other)?]),
    }
}

fn depends_on(v: &Value, at: &str) -> Result<Vec<String>, ComposeError> {
    match v {
        Value::Sequence(items) => items
            .iter()
            .map(|i| i.as_str().map(str::to_string).ok_or_else(|| value_err(at, "a list of services")))
            .collect(),
        Value::Mapping(m) => {
            let mut out = Vec::new();
            for (k, opts) in m {
                let dep = key_str(k);
                if let Value::Mapping(o) = opts {
                    for (ok, ov) in o {
                        let key = key_str(ok);
                        let fine = match key.as_str() {
                            "condition" => ov.as_str() == Some("service_started"),
                            "required" => ov.as_bool() == Some(true),
                            "restart" => true,
                            _ => false,
                        };
                        if !fine {
                            return Err(value_err(
                                format!("{at}.{dep}.{key}"),
                                format!("{}: deja orders start-up only (condition: service_started)", key_str(ov)),
                            ));
                        }
                    }
                }
                out.push(dep);
            }
            Ok(out)
        }
        _ => Err(value_err(at, "a list or a mapping of services")),
    }
}

fn volumes(v: &Value, at: &str, declared: &BTreeSet<String>, s: &mut Service) -> Result<(), ComposeError> {
    let Value::Sequence(items) = v else { return Err(value_err(at, "a list of mounts")) };
    for item in items {
        // (source, target, read-only)
        let (kind, source, target) = match item {
            Value::String(text) => {
                let parts: Vec<&str> = text.split(':').collect();
                match parts.as_slice() {
                    [target] => ("volume", String::new(), target.to_string()),
                    [source, target] | [source, target, _] => {
                        let bind = source.starts_with('.') || source.starts_with('/') || source.starts_with('~');
                        (if bind { "bind" } else { "volume" }, source.to_string(), target.to_string())
                    }
                    _ => return Err(value_err(at, format!("{text:?} is not SOURCE:TARGET[:MODE]"))),
                }
            }
            Value::Mapping(m) => {
                for k in m.keys().map(key_str) {
                    if !matches!(k.as_str(), "type" | "source" | "target" | "read_only") {
                        return Err(value_err(format!("{at}[].{k}"), "deja takes type, source, target and read_only"));
                    }
                }
                let field = |k: &str| m.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
                let kind = match field("type").as_str() {
                    "volume" => "volume",
                    "bind" => "bind",
                    other => {
                        return Err(value_err(format!("{at}[].type"), format!("{other:?}: deja takes volume and bind")))
                    }
                };
                (kind, field("source"), field("target"))
            }
            _ => return Err(value_err(at, "a list of mounts")),
        };
        if !target.starts_with('/') {
            return Err(value_err(at, format!("{target:?}: a mount's target is an absolute path")));
        }
        if kind == "bind" {
            s.files.insert(target, PathBuf::from(source));
        } else {
            if !source.is_empty() && !declared.contains(&source) {
                return Err(value_err(at, format!("volume {source:?} is not declared in the top-level volumes")));
            }
            let dir = if target.ends_with('/') { target } else { format!("{target}/") };
            s.volumes.push(dir);
        }
    }
    Ok(())
}

fn service_networks(v: &Value, at: &str, net: &Net, s: &mut Service) -> Result<(), ComposeError> {
    let check = |name: &str| match &net.name {
        Some(n) if n == name => Ok(()),
        _ => Err(value_err(at, format!("network {name:?} is not the one declared in the top-level networks"))),
    };
    match v {
        Value::Sequence(items) => {
            for i in items {
                check(i.as_str().unwrap_or_default())?;
            }
        }
        Value::Mapping(m) => {
            for (k, opts) in m {
                let name = key_str(k);
                check(&name)?;
                let Value::Mapping(o) = opts else { continue };
                for (ok, ov) in o {
                    let key = key_str(ok);
                    match key.as_str() {
                        "aliases" => {
                            for a in ov.as_sequence().into_iter().flatten() {
                                let a = a.as_str().ok_or_else(|| value_err(format!("{at}.{name}.aliases"), "names"))?;
                                if !s.names.iter().any(|n| n == a) {
                                    s.names.push(a.to_string());
                                }
                            }
                        }
                        "ipv4_address" => {
                            let text = ov.as_str().unwrap_or_default();
                            let ip: std::net::Ipv4Addr = text.parse().map_err(|_| {
                                value_err(
                                    format!("{at}.{name}.ipv4_address"),
                                    format!("{text:?} is not an IPv4 address"),
                                )
                            })?;
                            s.address = Some(ip.octets());
                        }
                        _ => {
                            return Err(value_err(format!("{at}.{name}.{key}"), "deja takes aliases and ipv4_address"))
                        }
                    }
                }
            }
        }
        _ => return Err(value_err(at, "a list or a mapping of networks")),
    }
    Ok(())
}

/// The services in start-up order: each after those it depends on, otherwise in the file's order.
fn start_order(services: &[Service]) -> Result<Vec<usize>, ComposeError> {
    let index: BTreeMap<&str, usize> = services.iter().enumerate().map(|(i, s)| (s.name.as_str(), i)).collect();
    let mut order = Vec::new();
    let mut state = vec![0u8; services.len()]; // 0 new, 1 on the path, 2 placed
    fn visit(
        i: usize,
        services: &[Service],
        index: &BTreeMap<&str, usize>,
        state: &mut [u8],
        order: &mut Vec<usize>,
        path: &mut Vec<usize>,
    ) -> Result<(), ComposeError> {
        match state[i] {
            2 => return Ok(()),
            1 => {
                let from = path.iter().position(|&p| p == i).unwrap_or(0);
                let cycle: Vec<&str> =
                    path[from..].iter().chain(std::iter::once(&i)).map(|&p| services[p].name.as_str()).collect();
                return Err(value_err("depends_on", format!("a cycle: {}", cycle.join(" → "))));
            }
            _ => {}
        }
        state[i] = 1;
        path.push(i);
        for d in &services[i].depends {
            visit(index[d.as_str()], services, index, state, order, path)?;
        }
        path.pop();
        state[i] = 2;
        order.push(i);
        Ok(())
    }
    for i in 0..services.len() {
        visit(i, services, &index, &mut state, &mut order, &mut Vec::new())?;
    }
    Ok(order)
}

/// Each service's address, by the file's order: its `ipv4_address`, else the subnet's next free.
fn addresses(services: &[Service], net: &Net) -> Result<Vec<[u8; 4]>, ComposeError> {
    let base = u32::from_be_bytes(net.base);
    let size = 1u32 << (32 - net.prefix);
    let mut taken: BTreeSet<[u8; 4]> = services.iter().filter_map(|s| s.address).collect();
    let mut next = 2u32;
    let mut out = Vec::new();
    for s in services {
        if let Some(a) = s.address {
            out.push(a);
            continue;
        }
        loop {
            if next >= size - 1 {
                return Err(value_err("networks", format!("the subnet has no address left for {}", s.name)));
            }
            let a = (base + next).to_be_bytes();
            next += 1;
            if taken.insert(a) {
                out.push(a);
                break;
            }
        }
    }
    Ok(out)
}

/// The `/etc/hosts` every node reads: each service's address and names.
fn hosts_file(services: &[Service], addresses: &[[u8; 4]]) -> String {
    let mut text = String::from("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n");
    for (s, [a, b, c, d]) in services.iter().zip(addresses) {
        text += &format!("{a}.{b}.{c}.{d}\t{}\n", s.names.join(" "));
    }
    text
}

#[cfg(test)]
mod tests;
