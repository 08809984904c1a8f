use super::*;
use crate::config::{is_cluster_file, is_compose};

const THREE: &str = r#"
name: register
services:
  client:
    image: deja/register-client:1
    command: --replicas "r1:7000,r2:7000" --writes 3
    depends_on: [r1, r2]
    environment:
      - RUST_LOG=info
    x-deja: { wait: true, failure_marker: "VIOLATION:" }
  r1:
    image: deja/register-replica:1
    entrypoint: ["/register-replica", "--variant", "buggy"]
    command: ["--id", "1"]
    hostname: one
    volumes: ["data1:/data"]
    environment: { ID: 1, DEBUG: true }
    ports: ["7000:7000"]
    x-deja: { wait: false }
  r2:
    image: images/r2.tar
    container_name: two
    working_dir: /srv
    volumes:
      - type: bind
        source: ./conf/r2.toml
        target: /etc/r2.toml
    networks:
      net:
        ipv4_address: 10.5.0.9
        aliases: [second]
    x-deja: { wait: false, cpus: 2, template: { dir: /opt/antithesis/test/v1/main, max_drivers: 2 } }
volumes:
  data1: {}
networks:
  net:
    ipam:
      config: [{ subnet: 10.5.0.0/24 }]
x-deja:
  seed: 7
  time_limit_ms: 9000
  images:
    deja/register-client:1: images/client.tar
    deja/register-replica:1: images/replica.tar
  faults:
    random: { partition_every_ms: [500, 900] }
"#;

#[test]
fn services_become_nodes_in_start_up_order_with_the_files_settings() {
    let c = cluster_file(THREE).unwrap();
    let names: Vec<&str> = c.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["r1", "r2", "client"], "what a service depends on starts first");
    assert_eq!((c.seed, c.time_limit_ms, c.memory_mib), (7, 9000, 512));
    assert_eq!(c.faults.random.as_ref().unwrap().partition_every_ms, Some([500, 900]));
    let node = |n: &str| c.nodes.iter().find(|x| x.name == n).unwrap();
    let (client, r1, r2) = (node("client"), node("r1"), node("r2"));
    let template = r2.template.as_ref().expect("x-deja.template");
    assert_eq!(
        (template.dir.as_str(), template.max_drivers, template.quiet_ms),
        ("/opt/antithesis/test/v1/main", 2, 2000)
    );
    assert_eq!(r1.template, None);
    // Addresses: r2's own; the others the subnet's next free from .2, in the file's order.
    assert_eq!([&client.address, &r1.address, &r2.address], ["10.5.0.2", "10.5.0.3", "10.5.0.9"]);
    // Commands: a string is split as words; an entrypoint drops the image's command.
    assert_eq!(client.entrypoint, None);
    assert_eq!(client.args, ["--replicas", "r1:7000,r2:7000", "--writes", "3"]);
    assert_eq!(r1.entrypoint.as_deref(), Some("/register-replica"));
    assert_eq!(r1.args, ["--variant", "buggy", "--id", "1"]);
    assert_eq!(client.image.as_deref(), Some(std::path::Path::new("images/client.tar")));
    assert_eq!(r2.image.as_deref(), Some(std::path::Path::new("images/r2.tar")), "an archive named directly");
    assert_eq!(r1.env["ID"], "1");
    assert_eq!(r1.env["DEBUG"], "true");
    assert_eq!(client.env["RUST_LOG"], "info");
    assert_eq!(r2.cwd.as_deref(), Some("/srv"));
    assert_eq!((client.wait, r1.wait, r2.wait), (true, false, false));
    assert_eq!((r2.cpus, client.failure_marker.as_deref()), (Some(2), Some("VIOLATION:")));
    assert_eq!(r2.files["/etc/r2.toml"], std::path::Path::new("./conf/r2.toml"));
    // Every node resolves every service by its names.
    let hosts = String::from_utf8(client.contents["/etc/hosts"].clone()).unwrap();
    assert!(hosts.contains("10.5.0.3\tr1 one\n"), "{hosts}");
    assert!(hosts.contains("10.5.0.9\tr2 two second\n"), "{hosts}");
    assert!(hosts.contains("10.5.0.2\tclient\n") && hosts.starts_with("127.0.0.1\tlocalhost\n"), "{hosts}");
    assert_eq!(r1.contents["/etc/hosts"], client.contents["/etc/hosts"]);
    assert_eq!(r1.contents["/etc/hostname"], b"r1\n");
    // Storage faults strike where the volumes are.
    assert_eq!(c.faults.storage.nodes, ["r1"]);
    assert_eq!(c.faults.storage.paths, ["/data/"]);
}

fn error(text: &str) -> String {
    cluster_file(text).unwrap_err().to_string()
}

#[test]
fn every_key_deja_does_not_take_is_named_in_one_error() {
    let e = error(
        "services:\n  a:\n    image: a.tar\n    healthcheck: {test: [CMD, true]}\n    secrets: [s]\n  \
         b:\n    image: b.tar\n    privileged: true\nsecrets: {}\n",
    );
    assert!(e.starts_with("keys deja does not take"), "{e}");
    for key in ["services.a.healthcheck", "services.a.secrets", "services.b.privileged", "secrets"] {
        assert!(e.contains(key), "{key}: {e}");
    }
    // Merge keys share settings between services.
    let merged = cluster_file(
        "x-replica: &replica\n  image: r.tar\n  x-deja: {wait: false}\nservices:\n  a:\n    <<: *replica\n    command: [--id, '1']\n",
    )
    .unwrap();
    assert_eq!((merged.nodes[0].image.as_deref(), merged.nodes[0].wait), (Some(std::path::Path::new("r.tar")), false));
    assert_eq!(merged.nodes[0].args, ["--id", "1"]);
    // Extensions, inert keys and the user deja runs programs as pass.
    cluster_file(
        "x-common: &c {a: 1}\nservices:\n  a:\n    image: a.tar\n    labels: {k: v}\n    expose: [80]\n    user: \"1000\"\n",
    )
        .unwrap();
}

#[test]
fn values_deja_cannot_take_are_refused_with_where_and_why() {
    let cases = [
        ("services:\n  a:\n    build: .\n", "services.a: deja does not build images"),
        ("services:\n  a:\n    image: redis:7\n", "services.a.image: \"redis:7\" names no archive"),
        ("services:\n  a:\n    image: a.tar\n    environment: [HOME]\n", "HOME has no value"),
        ("services:\n  a:\n    image: a.tar\n    environment: {HOME: null}\n", "HOME has no value"),
        ("services:\n  a:\n    image: a.tar\n    depends_on: [b]\n", "services.a.depends_on: no service \"b\""),
        (
            "services:\n  a:\n    image: a.tar\n    depends_on: [b]\n  b:\n    image: b.tar\n    depends_on: [a]\n",
            "a cycle: a → b → a",
        ),
        (
            "services:\n  a:\n    image: a.tar\n    depends_on: {b: {condition: service_healthy}}\n  b:\n    image: b.tar\n",
            "service_healthy: deja orders start-up only",
        ),
        ("services:\n  a:\n    image: a.tar\n    volumes: [\"data:/data\"]\n", "volume \"data\" is not declared"),
        ("services:\n  a:\n    image: a.tar\n    user: root\n", "deja runs every program as user and group 1000"),
        ("services:\n  a:\n    image: a.tar\n    command: \"echo 'oops\"\n", "unclosed quote"),
        ("networks: {a: {}, b: {}}\nservices:\n  a:\n    image: a.tar\n", "deja's simulated network is one"),
        ("services:\n  a:\n    image: a.tar\n    networks: [elsewhere]\n", "\"elsewhere\" is not the one declared"),
        ("services:\n  a:\n    image: a.tar\n    x-deja: {waits: true}\n", "services.a.x-deja: unknown field `waits`"),
        ("x-deja: {seeds: 1}\nservices:\n  a:\n    image: a.tar\n", "x-deja: unknown field `seeds`"),
        ("services:\n  a:\n    image: a.tar\n    restart: sometimes\n", "services.a.restart: restart \"sometimes\""),
        ("- a\n- b\n", "its top level is not a mapping"),
        ("version: '3'\n", "services: a compose file needs a mapping of services"),
    ];
    for (text, want) in cases {
        let e = error(text);
        assert!(e.contains(want), "{text}\nwant {want:?}\ngot  {e}");
    }
}

#[test]
fn a_compose_file_loads_as_a_cluster_whose_nodes_resolve_each_other() {
    let dir = std::env::temp_dir().join(format!("deja-compose-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let text = "services:\n  a:\n    image: a.tar\n    volumes: [\"./hosts:/etc/hosts\"]\n  b:\n    image: b.tar\n";
    let mut read = Vec::new();
    let err = crate::ClusterConfig::from_text(text, &dir.join("compose.yaml"), &dir, &mut |node, what, path| {
        read.push((node.to_string(), format!("{what:?}"), path.to_path_buf()));
        Ok(b"not an image".to_vec())
    })
    .unwrap_err()
    .to_string();
    // Its images are read as archives (this one is none), its bind mount as a file.
    assert!(err.contains("compose.yaml: node a: image") && err.contains("a.tar"), "{err}");
    assert_eq!(read[0], ("a".to_string(), "Binary".to_string(), dir.join("a.tar")));
    assert_eq!(read[1], ("a".to_string(), "File(\"/etc/hosts\")".to_string(), dir.join("./hosts")));
    assert!(is_compose(std::path::Path::new("docker-compose.yml")) && is_cluster_file(std::path::Path::new("c.toml")));
    assert!(!is_cluster_file(std::path::Path::new("prog")));
}

#[test]
fn a_restart_policy_is_kept_and_a_service_that_always_restarts_is_not_waited_for() {
    let c = cluster_file(
        "services:\n  a:\n    image: a.tar\n    restart: always\n  b:\n    image: b.tar\n    restart: on-failure:2\n  \
         c:\n    image: c.tar\n    restart: unless-stopped\n    x-deja: {wait: true}\n",
    )
    .unwrap();
    let got: Vec<(&str, Option<&str>, bool)> =
        c.nodes.iter().map(|n| (n.name.as_str(), n.restart.as_deref(), n.wait)).collect();
    assert_eq!(
        got,
        [("a", Some("always"), false), ("b", Some("on-failure:2"), true), ("c", Some("unless-stopped"), true)]
    );
}

#[test]
fn env_files_are_read_under_environment_a_later_one_over_an_earlier() {
    let parsed = crate::config::env_file(
        "# settings\n\nA=1\nexport B = two words # a comment\nC=\"quoted # kept\"\nD='x'\nE=\n",
    )
    .unwrap();
    let want = [("A", "1"), ("B", "two words"), ("C", "quoted # kept"), ("D", "x"), ("E", "")];
    assert_eq!(parsed, want.map(|(k, v)| (k.to_string(), v.to_string())));
    assert!(crate::config::env_file("HOME\n").unwrap_err().contains("line 1: HOME has no value"));
    let text = "services:\n  a:\n    image: a.tar\n    env_file: [one.env, {path: two.env, required: true}]\n    \
                environment: {A: from-environment}\n";
    assert_eq!(cluster_file(text).unwrap().nodes[0].env_files, ["one.env", "two.env"]);
    let dir = std::env::temp_dir().join(format!("deja-compose-env-{}", std::process::id()));
    let mut read = Vec::new();
    let err = crate::ClusterConfig::from_text(text, &dir.join("compose.yaml"), &dir, &mut |_, what, path| {
        read.push(format!("{what:?} {}", path.display()));
        Ok(match what {
            crate::config::HostFile::EnvFile("one.env") => b"A=1\nB=1\n".to_vec(),
            crate::config::HostFile::EnvFile(_) => b"B=2\nC=2\n".to_vec(),
            _ => b"not an image".to_vec(),
        })
    })
    .unwrap_err()
    .to_string();
    // The image is no archive, so the node stops there; its env files were read first, in order.
    assert!(err.contains("node a: image"), "{err}");
    let want = [
        format!("Binary {}", dir.join("a.tar").display()),
        format!("EnvFile(\"one.env\") {}", dir.join("one.env").display()),
    ];
    assert_eq!(read[..2], want);
}
