//! Programs as people ship them: container images (`deja run --image`, a cluster node's
//! `image =`) and directory trees (`--root`). The images are built here, with the same crates
//! deja reads them with, from a static guest and from Debian's dynamically linked `cat` and
//! `echo` with their loader and libraries, laid out as a Debian image lays them out.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::common::*;
use sha2::Digest;

fn s(p: &Path) -> String {
    p.display().to_string()
}

/// One entry of a layer.
#[derive(Clone)]
enum E {
    Dir(&'static str),
    File(String, u32, Vec<u8>),
    Link(&'static str, &'static str),
}

fn layer(entries: &[E]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for e in entries {
        let mut h = tar::Header::new_gnu();
        match e {
            E::Dir(p) => {
                h.set_entry_type(tar::EntryType::Directory);
                h.set_mode(0o755);
                h.set_size(0);
                b.append_data(&mut h, format!("{p}/"), std::io::empty()).unwrap();
            }
            E::File(p, mode, data) => {
                h.set_entry_type(tar::EntryType::Regular);
                h.set_mode(*mode);
                h.set_size(data.len() as u64);
                b.append_data(&mut h, p.trim_start_matches('/'), data.as_slice()).unwrap();
            }
            E::Link(p, target) => {
                h.set_entry_type(tar::EntryType::Symlink);
                h.set_mode(0o777);
                h.set_size(0);
                b.append_link(&mut h, p.trim_start_matches('/'), target).unwrap();
            }
        }
    }
    b.into_inner().unwrap()
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

fn sha(bytes: &[u8]) -> String {
    sha2::Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

fn outer(files: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (p, data) in files {
        let mut h = tar::Header::new_gnu();
        h.set_mode(0o644);
        h.set_size(data.len() as u64);
        b.append_data(&mut h, p, data.as_slice()).unwrap();
    }
    b.into_inner().unwrap()
}

/// An OCI image layout archive of `layers` (uncompressed tars; the first is gzipped) and
/// `config` (the image config's `config` object).
fn oci(layers: &[Vec<u8>], config: serde_json::Value) -> Vec<u8> {
    let blobs: Vec<Vec<u8>> =
        layers.iter().enumerate().map(|(i, l)| if i == 0 { gzip(l) } else { l.clone() }).collect();
    let cfg = serde_json::to_vec(&serde_json::json!({
        "architecture": "amd64", "os": "linux", "config": config,
        "rootfs": {"type": "layers", "diff_ids": layers.iter().map(|l| format!("sha256:{}", sha(l))).collect::<Vec<_>>()},
    }))
    .unwrap();
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": format!("sha256:{}", sha(&cfg)), "size": cfg.len()},
        "layers": blobs.iter().enumerate().map(|(i, b)| serde_json::json!({
            "mediaType": if i == 0 { "application/vnd.oci.image.layer.v1.tar+gzip" } else { "application/vnd.oci.image.layer.v1.tar" },
            "digest": format!("sha256:{}", sha(b)), "size": b.len(),
        })).collect::<Vec<_>>(),
    }))
    .unwrap();
    let index = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": format!("sha256:{}", sha(&manifest)),
            "size": manifest.len(), "platform": {"architecture": "amd64", "os": "linux"}}],
    }))
    .unwrap();
    let mut files = vec![
        ("oci-layout".to_string(), br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec()),
        ("index.json".to_string(), index),
        (format!("blobs/sha256/{}", sha(&manifest)), manifest),
        (format!("blobs/sha256/{}", sha(&cfg)), cfg),
    ];
    files.extend(blobs.into_iter().map(|b| (format!("blobs/sha256/{}", sha(&b)), b)));
    outer(&files)
}

/// The same image as `docker save` (before Docker 25) writes it.
fn docker_save(layers: &[Vec<u8>], config: serde_json::Value) -> Vec<u8> {
    let cfg =
        serde_json::to_vec(&serde_json::json!({"architecture": "amd64", "os": "linux", "config": config})).unwrap();
    let names: Vec<String> = layers.iter().map(|l| format!("{}/layer.tar", sha(l))).collect();
    let manifest = serde_json::to_vec(
        &serde_json::json!([{"Config": format!("{}.json", sha(&cfg)), "RepoTags": ["deja/test:1"], "Layers": names}]),
    )
    .unwrap();
    let mut files = vec![("manifest.json".to_string(), manifest), (format!("{}.json", sha(&cfg)), cfg)];
    files.extend(names.into_iter().zip(layers.iter().cloned()));
    outer(&files)
}

/// The layers of the test image: a Debian-like base with `cat`, `echo` and `tee` and their libraries
/// (usr-merged: `/lib` and `/bin` are links into `/usr`), and a layer with the static `hello`
/// guest that deletes one file of the base.
fn layers() -> Vec<Vec<u8>> {
    let mut base = vec![
        E::Dir("usr"),
        E::Dir("usr/bin"),
        E::Dir("usr/lib"),
        E::Dir("usr/lib/x86_64-linux-gnu"),
        E::Link("bin", "usr/bin"),
        E::Link("lib", "usr/lib"),
        E::Dir("lib64"),
        E::Dir("etc"),
        E::Dir("tmp"),
        E::File("etc/motd".into(), 0o644, b"from the image\n".to_vec()),
        E::File("etc/gone".into(), 0o644, b"deleted by the next layer\n".to_vec()),
    ];
    let mut libs = BTreeMap::new();
    for tool in ["cat", "echo", "tee"] {
        let host = PathBuf::from(format!("/bin/{tool}"));
        let bytes = std::fs::read(&host).unwrap();
        base.push(E::File(format!("usr/bin/{tool}"), 0o755, bytes.clone()));
        let closure = deja_inputs::dynlink::host_closure(&bytes, &host, &format!("/usr/bin/{tool}")).unwrap();
        libs.extend(closure);
    }
    for (path, data) in libs {
        let name = path.rsplit('/').next().unwrap().to_string();
        base.push(E::File(format!("usr/lib/x86_64-linux-gnu/{name}"), 0o755, data));
    }
    base.push(E::Link("lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"));
    let top = vec![
        E::Dir("usr/local"),
        E::Dir("usr/local/bin"),
        E::File("usr/local/bin/hello".into(), 0o755, std::fs::read(guest("hello")).unwrap()),
        E::File("etc/.wh.gone".into(), 0o644, Vec::new()),
    ];
    vec![layer(&base), layer(&top)]
}

fn config() -> serde_json::Value {
    serde_json::json!({
        "Entrypoint": ["/usr/local/bin/hello"],
        "Env": ["PATH=/usr/local/bin:/usr/bin:/bin", "GREETING=from the image"],
        "WorkingDir": "/etc",
    })
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("deja-image-{name}-{}", std::process::id()));
    std::fs::remove_dir_all(&dir).ok();
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn an_oci_image_runs_its_entrypoint_and_its_dynamically_linked_programs_from_its_own_files() {
    let dir = scratch("oci");
    let img = dir.join("img.tar");
    let bytes = oci(&layers(), config());
    std::fs::write(&img, &bytes).unwrap();
    let img = s(&img);
    // The entrypoint, in fresh processes on every core.
    let out = deja(&["run", "--no-probe", "--audit", "3", "--image", &img]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "Hello from a deja guest!\n");
    assert!(stderr(&out).contains("deja: audit: identical over 3 runs"), "{}", stderr(&out));
    // Debian's cat, found in the image's PATH; its loader and libc are the image's, through
    // the image's symlinks; a relative path is from the image's working directory.
    let out = deja(&["run", "--no-probe", "--audit", "2", "--image", &img, "--entrypoint", "cat", "--", "motd"]);
    assert_eq!(stdout(&out), "from the image\n", "{}", stderr(&out));
    assert!(stderr(&out).contains("deja: audit: identical over 2 runs"), "{}", stderr(&out));
    // The whiteout removed /etc/gone; nothing of the host is there.
    for missing in ["/etc/gone", "/etc/hostname", "/usr/bin/sh"] {
        let out = deja(&["run", "--no-probe", "--image", &img, "--entrypoint", "cat", "--", missing]);
        assert_eq!(out.status.code(), Some(1), "{missing}: {}", stderr(&out));
        assert!(stdout(&out).is_empty() && stderr(&out).contains("No such file or directory"), "{}", stderr(&out));
    }
    // The image's environment, with --env over it.
    let out =
        deja(&["run", "--no-probe", "--image", &img, "--env", "PATH=/bin", "--entrypoint", "echo", "--", "a", "b"]);
    assert_eq!(stdout(&out), "a b\n", "{}", stderr(&out));
    // The report records the image by BLAKE3 and by its own digest; the program by its path in
    // the image; the libraries are the image's, not declared files.
    let (_, v) = run_json(&["--image", &img, "--entrypoint", "echo", "--", "x"]);
    let inputs = &v["inputs"];
    assert_eq!(inputs["root"]["kind"], "image");
    assert_eq!(inputs["root"]["blake3"], blake3::hash(&bytes).to_hex().as_str());
    assert!(inputs["root"]["image_digest"].as_str().unwrap().starts_with("sha256:"), "{inputs}");
    assert_eq!(inputs["program"], "/usr/bin/echo");
    assert_eq!(inputs["files"], serde_json::json!({}));
    let names: Vec<String> = v["host_channels"]["objects"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|o| o["name"].as_str().map(str::to_string))
        .collect();
    assert!(names.iter().any(|n| n == "/lib64/ld-linux-x86-64.so.2"), "the loader's code is rewritten: {names:?}");
    // Nothing in the image can be changed; /tmp is the node's disk.
    let input = dir.join("stdin");
    std::fs::write(&input, "new\n").unwrap();
    let tee = ["run", "--no-probe", "--image", &img, "--stdin", &s(&input), "--entrypoint", "tee", "--"];
    let out = deja(&[&tee[..], &["/tmp/x", "/etc/motd"]].concat());
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(stdout(&out), "new\n");
    assert!(stderr(&out).contains("/etc/motd: Read-only file system"), "{}", stderr(&out));
    let out = deja(&[&tee[..], &["/etc/new"]].concat());
    assert!(stderr(&out).contains("/etc/new: Permission denied"), "{}", stderr(&out));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_docker_save_archive_and_an_unpacked_tree_run_like_the_oci_image() {
    let dir = scratch("docker");
    let img = dir.join("img.tar");
    std::fs::write(&img, docker_save(&layers(), config())).unwrap();
    let out = deja(&["run", "--no-probe", "--image", &s(&img), "--entrypoint", "cat", "--", "motd"]);
    assert_eq!(stdout(&out), "from the image\n", "{}", stderr(&out));
    let out = deja(&["run", "--no-probe", "--image", &s(&img)]);
    assert_eq!(stdout(&out), "Hello from a deja guest!\n", "{}", stderr(&out));
    // The same files as a directory tree: --root DIR, the program a name in its PATH.
    let root = dir.join("rootfs");
    std::fs::create_dir_all(&root).unwrap();
    for l in layers() {
        tar::Archive::new(l.as_slice()).unpack(&root).unwrap();
    }
    std::fs::remove_file(root.join("etc/.wh.gone")).unwrap();
    std::fs::remove_file(root.join("etc/gone")).unwrap();
    let out = deja(&["run", "--no-probe", "--audit", "2", "--root", &s(&root), "cat", "--", "/etc/motd"]);
    assert_eq!(stdout(&out), "from the image\n", "{}", stderr(&out));
    assert!(stderr(&out).contains("deja: audit: identical over 2 runs"), "{}", stderr(&out));
    let (_, v) = run_json(&["--root", &s(&root), "/usr/local/bin/hello"]);
    assert_eq!(v["inputs"]["root"]["kind"], "dir");
    assert_eq!(v["exit_code"], 0);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_malformed_image_or_a_missing_program_is_refused_with_a_clear_error() {
    let dir = scratch("bad");
    let good = oci(&layers(), config());
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("truncated.tar", good[..good.len() / 3].to_vec(), ""),
        ("not-an-image.tar", outer(&[("hello.txt".into(), b"hi".to_vec())]), "neither"),
        ("garbage.tar", b"this is not a tar archive at all".repeat(40), ""),
    ];
    for (name, bytes, says) in cases {
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        let out = deja(&["run", "--no-probe", "--image", &s(&p)]);
        assert_eq!(out.status.code(), Some(126), "{name}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(err.starts_with("deja: error: ") && err.contains(name), "{name}: {err}");
        assert!(err.to_lowercase().contains(says), "{name}: {err}");
    }
    let p = dir.join("img.tar");
    std::fs::write(&p, &good).unwrap();
    let out = deja(&["run", "--no-probe", "--image", &s(&p), "--entrypoint", "nonesuch"]);
    assert_eq!(out.status.code(), Some(127), "{}", stderr(&out));
    assert!(stderr(&out).contains("nonesuch is not a file in it (nor in its PATH)"), "{}", stderr(&out));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_cluster_node_runs_from_an_image() {
    let dir = scratch("cluster");
    let server = layer(&[
        E::Dir("usr"),
        E::Dir("usr/local"),
        E::Dir("usr/local/bin"),
        E::File("usr/local/bin/echo-server".into(), 0o755, std::fs::read(guest("echo-server")).unwrap()),
    ]);
    let cfg = serde_json::json!({
        "Entrypoint": ["/usr/local/bin/echo-server"],
        "Cmd": ["--listen", "10.0.0.1:7000", "--connections", "1"],
    });
    std::fs::write(dir.join("server.tar"), oci(&[server], cfg)).unwrap();
    let toml = format!(
        "seed = 1\ntime_limit_ms = 10000\n[network]\nlatency_ms = [1, 3]\n\
         [[node]]\nname = \"server\"\naddress = \"10.0.0.1\"\nimage = \"server.tar\"\n\
         [[node]]\nname = \"client\"\naddress = \"10.0.0.2\"\nbinary = \"{}\"\n\
         args = [\"--connect\", \"10.0.0.1:7000\", \"--messages\", \"3\", \"--retry-for-ms\", \"2000\"]\n",
        s(&guest("echo-client"))
    );
    std::fs::write(dir.join("echo.toml"), toml).unwrap();
    let out = deja(&["run", "--no-probe", "--audit", "2", &s(&dir.join("echo.toml"))]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    for k in 1..=3 {
        assert!(stdout(&out).contains(&format!("[client] echoed: hello {k}")), "{}", stdout(&out));
    }
    assert!(err.contains("identical"), "{err}");
    // A node with both, or neither, is refused.
    let both = std::fs::read_to_string(dir.join("echo.toml")).unwrap().replace(
        "image = \"server.tar\"",
        &format!("image = \"server.tar\"\nbinary = \"{}\"", s(&guest("echo-server"))),
    );
    std::fs::write(dir.join("both.toml"), both).unwrap();
    let out = deja(&["run", "--no-probe", &s(&dir.join("both.toml"))]);
    assert!(stderr(&out).contains("give it exactly one of binary"), "{}", stderr(&out));
    std::fs::remove_dir_all(&dir).ok();
}

/// An image of one variant of a guest: the program at /app/PROGRAM, found through the image's
/// PATH, in /app as its working directory, with `cmd` as the image's command.
fn app_image(dir: &Path, program: &str, variant: &str, cmd: &[&str], extra: &[E]) -> PathBuf {
    let mut entries = vec![
        E::Dir("app"),
        E::File(format!("app/{program}"), 0o755, std::fs::read(guest(&format!("{program}-{variant}"))).unwrap()),
    ];
    entries.extend_from_slice(extra);
    let config = serde_json::json!({"Entrypoint": [program], "Cmd": cmd, "Env": ["PATH=/app"], "WorkingDir": "/app"});
    let path = dir.join(format!("{program}-{variant}{}.tar", if extra.is_empty() { "" } else { "-extra" }));
    std::fs::write(&path, oci(&[layer(&entries)], config)).unwrap();
    path
}

fn credit_image(dir: &Path, variant: &str, extra: &[E]) -> PathBuf {
    app_image(dir, "credit", variant, &[], extra)
}

fn blake3_of(path: &Path) -> String {
    blake3::hash(&std::fs::read(path).unwrap()).to_hex().to_string()
}

#[test]
fn a_program_in_an_image_is_explored_replayed_from_its_kept_image_and_judged() {
    let dir = scratch("judge");
    let buggy = credit_image(&dir, "buggy", &[]);
    let (atomic, green) = (credit_image(&dir, "atomic", &[]), credit_image(&dir, "misleading-green", &[]));
    let campaign = dir.join("campaign");
    let o = deja(&[
        "explore",
        "--quiet",
        "--runs",
        "40",
        "--mode",
        "faults",
        "--out",
        &s(&campaign),
        "--image",
        &s(&buggy),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let bug = bug_file(&campaign);
    let b: serde_json::Value = serde_json::from_slice(&std::fs::read(&bug).unwrap()).unwrap();
    assert_eq!(b["root"]["kind"], "image", "{b}");
    assert_eq!(b["root"]["blake3"], blake3_of(&buggy));
    assert_eq!(
        (b["argv"][0].as_str(), b["exe_path"].as_str(), b["cwd"].as_str()),
        (Some("credit"), Some("/app/credit"), Some("/app"))
    );
    // The campaign keeps the image by hash, and a replay takes it from there once it is gone.
    assert_eq!(blake3_of(&campaign.join("inputs").join(blake3_of(&buggy))), blake3_of(&buggy));
    let o = deja(&["replay", &s(&bug)]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("reproduced bug"), "{}", stderr(&o));
    let moved = dir.join("elsewhere.tar");
    std::fs::rename(&buggy, &moved).unwrap();
    let o = deja(&["replay", &s(&bug)]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("replaying with the image kept as") && stderr(&o).contains("reproduced bug"),
        "{}",
        stderr(&o)
    );
    std::fs::rename(&moved, &buggy).unwrap();
    // Another image in its place gives way to the kept one; without that, it is refused by name
    // with both hashes, and nothing runs.
    let o = deja(&["replay", "--program", &s(&atomic), &s(&bug)]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("replaying with the image kept as"), "{}", stderr(&o));
    let kept = campaign.join("inputs").join(blake3_of(&buggy));
    std::fs::rename(&kept, dir.join("kept.tar")).unwrap();
    let o = deja(&["replay", "--program", &s(&atomic), &s(&bug)]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains(&blake3_of(&atomic)) && err.contains(&blake3_of(&buggy)), "{err}");
    assert!(!err.contains("reproduced"), "{err}");
    std::fs::rename(dir.join("kept.tar"), &kept).unwrap();

    // The judge runs the bug's command in each image.
    let check = |base: &Path, cand: &Path, extra: &[&str], out: &str| {
        let out = dir.join(out);
        let mut args = vec!["check", "--json", "--base", s(base).leak(), "--candidate", s(cand).leak()];
        args.extend(["--out", s(&out).leak()]);
        args.extend_from_slice(extra);
        let o = deja(&args);
        let cert: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
        (o, cert, out)
    };
    let (o, cert, out) = check(&buggy, &atomic, &["--bug", s(&bug).leak()], "fixed");
    assert_eq!(
        (o.status.code(), cert["verdict"].as_str()),
        (Some(0), Some("FIXED_FOR_THIS_CAPSULE")),
        "{}",
        stderr(&o)
    );
    assert_eq!(cert["base_inputs"]["root"]["blake3"], blake3_of(&buggy));
    assert_eq!(cert["candidate_inputs"]["root"]["blake3"], blake3_of(&atomic));
    assert_eq!(deja(&["verify-certificate", &s(&out.join("certificate.json"))]).status.code(), Some(0));
    let (o, cert, _) = check(&buggy, &green, &["--bug", s(&bug).leak()], "green");
    assert_eq!((o.status.code(), cert["verdict"].as_str()), (Some(1), Some("STILL_REPRODUCES")), "{}", stderr(&o));

    // Without a bug file the hunt finds the failure in the image, and the capsule records it.
    let (o, cert, out) = check(&buggy, &atomic, &[], "hunt");
    assert_eq!(
        (o.status.code(), cert["verdict"].as_str()),
        (Some(0), Some("FIXED_FOR_THIS_CAPSULE")),
        "{}",
        stderr(&o)
    );
    let capsule = out.join("capsule.json");
    let c: serde_json::Value = serde_json::from_slice(&std::fs::read(&capsule).unwrap()).unwrap();
    assert_eq!((c["program"].as_str(), c["cwd"].as_str()), (Some("credit"), Some("/app")), "{c}");
    assert_eq!(c["base_inputs"]["root"]["blake3"], blake3_of(&buggy));
    let (o, cert, _) = check(&buggy, &buggy, &["--capsule", s(&capsule).leak()], "same");
    assert_eq!((o.status.code(), cert["verdict"].as_str()), (Some(1), Some("STILL_REPRODUCES")), "{}", stderr(&o));
    // The same program in another root is not the base the capsule was frozen on.
    let other = credit_image(&dir, "buggy", &[E::File("app/extra".into(), 0o644, b"x".to_vec())]);
    let (o, cert, _) = check(&other, &atomic, &["--capsule", s(&capsule).leak()], "other-root");
    assert_eq!((o.status.code(), cert["verdict"].as_str()), (Some(3), Some("EVIDENCE_INCOMPLETE")), "{}", stderr(&o));
    assert!(stderr(&o).contains("the capsule was frozen with other inputs of the base"), "{}", stderr(&o));
    // A base image against a candidate from the host is refused, not judged.
    let (o, cert, _) = check(&buggy, &guest("credit-atomic"), &[], "mixed");
    assert_eq!((o.status.code(), cert["verdict"].as_str()), (Some(3), Some("EVIDENCE_INCOMPLETE")), "{}", stderr(&o));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_fix_that_stops_at_its_first_failed_write_is_judged_fixed_in_its_image() {
    // The acknowledging store swallows an I/O error (the bug); its fix stops at the first failed
    // write instead: a correct fail-stop, never a failure, judged through the image path too.
    let dir = scratch("failstop");
    let buggy = app_image(&dir, "ackstore", "buggy", &["6"], &[]);
    let fixed = app_image(&dir, "ackstore", "fixed", &["6"], &[]);
    for (cand, code, verdict) in [(&fixed, 0, "FIXED_FOR_THIS_CAPSULE"), (&buggy, 1, "STILL_REPRODUCES")] {
        let out = dir.join(format!("check-{code}"));
        let o = deja(&["check", "--json", "--base", &s(&buggy), "--candidate", &s(cand), "--out", &s(&out)]);
        let cert: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
        assert_eq!((o.status.code(), cert["verdict"].as_str()), (Some(code), Some(verdict)), "{}", stderr(&o));
    }
    std::fs::remove_dir_all(&dir).ok();
}
