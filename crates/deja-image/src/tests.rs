//! Tests on images built here with the `tar` crate's builder, in both archive formats.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Arc;

use serde_json::{json, Value};

use crate::archive::sha256_digest;
use crate::{from_layers, read, Config, Image, ImageError, LayerError, Limits, Node};

const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
const OCI_LAYER_GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
const OCI_LAYER_ZSTD: &str = "application/vnd.oci.image.layer.v1.tar+zstd";

// ---------------------------------------------------------------------------------------------
// Building tarballs and images.

/// One entry of a test tarball. Names are written as given (raw bytes, GNU long names past 100
/// bytes), so that tests can write what a careful builder would refuse.
enum E<'a> {
    Dir(&'a str, u32),
    File(&'a str, u32, &'a [u8]),
    Symlink(&'a str, &'a str),
    Hard(&'a str, &'a str),
    Fifo(&'a str),
    /// A file with a name of raw bytes.
    RawFile(&'a [u8]),
}

/// A GNU long-name (`L`) or long-link (`K`) entry for a name that does not fit in 100 bytes.
fn long(builder: &mut tar::Builder<Vec<u8>>, kind: u8, name: &[u8]) {
    let mut header = tar::Header::new_gnu();
    header.as_old_mut().name[..13].copy_from_slice(b"././@LongLink");
    header.set_entry_type(tar::EntryType::new(kind));
    header.set_mode(0o644);
    header.set_size(name.len() as u64 + 1);
    header.set_cksum();
    let mut data = name.to_vec();
    data.push(0);
    builder.append(&header, data.as_slice()).unwrap();
}

fn append(builder: &mut tar::Builder<Vec<u8>>, kind: tar::EntryType, name: &[u8], link: &[u8], mode: u32, data: &[u8]) {
    if name.len() > 100 {
        long(builder, b'L', name);
    }
    if link.len() > 100 {
        long(builder, b'K', link);
    }
    let mut header = tar::Header::new_gnu();
    let n = name.len().min(100);
    header.as_old_mut().name[..n].copy_from_slice(&name[..n]);
    let l = link.len().min(100);
    header.as_old_mut().linkname[..l].copy_from_slice(&link[..l]);
    header.set_entry_type(kind);
    header.set_mode(mode);
    header.set_mtime(0);
    header.set_size(data.len() as u64);
    header.set_cksum();
    builder.append(&header, data).unwrap();
}

fn tar(entries: &[E]) -> Vec<u8> {
    use tar::EntryType as T;
    let mut builder = tar::Builder::new(Vec::new());
    for entry in entries {
        match *entry {
            E::Dir(name, mode) => append(&mut builder, T::Directory, name.as_bytes(), b"", mode, b""),
            E::File(name, mode, data) => append(&mut builder, T::Regular, name.as_bytes(), b"", mode, data),
            E::Symlink(name, target) => {
                append(&mut builder, T::Symlink, name.as_bytes(), target.as_bytes(), 0o777, b"")
            }
            E::Hard(name, target) => append(&mut builder, T::Link, name.as_bytes(), target.as_bytes(), 0o644, b""),
            E::Fifo(name) => append(&mut builder, T::Fifo, name.as_bytes(), b"", 0o644, b""),
            E::RawFile(name) => append(&mut builder, T::Regular, name, b"", 0o644, b"raw"),
        }
    }
    builder.into_inner().unwrap()
}

/// A tar of named files (the outer archive of an image).
fn outer(files: &[(&str, &[u8])]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for (name, data) in files {
        append(&mut builder, tar::EntryType::Regular, name.as_bytes(), b"", 0o644, data);
    }
    builder.into_inner().unwrap()
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

fn zstd(bytes: &[u8]) -> Vec<u8> {
    zstd::stream::encode_all(bytes, 3).unwrap()
}

fn descriptor(media_type: &str, bytes: &[u8]) -> Value {
    json!({ "mediaType": media_type, "digest": sha256_digest(bytes), "size": bytes.len() })
}

fn with_platform(mut descriptor: Value, os: &str, architecture: &str) -> Value {
    descriptor["platform"] = json!({ "os": os, "architecture": architecture });
    descriptor
}

fn blob_name(bytes: &[u8]) -> String {
    format!("blobs/sha256/{}", &sha256_digest(bytes)[7..])
}

/// An image manifest for a config and gzip/zstd layers.
fn manifest(config: &[u8], layers: &[&[u8]]) -> Vec<u8> {
    let layers: Vec<Value> = layers
        .iter()
        .map(|l| descriptor(if l.starts_with(&[0x1f, 0x8b]) { OCI_LAYER_GZIP } else { OCI_LAYER_ZSTD }, l))
        .collect();
    serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": descriptor(OCI_CONFIG, config),
        "layers": layers,
    }))
    .unwrap()
}

/// An OCI layout archive: `oci-layout`, `index.json` and the blobs.
fn oci_archive(index: &Value, blobs: &[&[u8]]) -> Vec<u8> {
    let index = serde_json::to_vec(index).unwrap();
    let names: Vec<String> = blobs.iter().map(|b| blob_name(b)).collect();
    let mut files: Vec<(&str, &[u8])> =
        vec![("oci-layout", br#"{"imageLayoutVersion":"1.0.0"}"#), ("index.json", &index)];
    files.extend(names.iter().map(String::as_str).zip(blobs.iter().copied()));
    outer(&files)
}

fn index_of(manifests: Vec<Value>) -> Value {
    json!({ "schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": manifests })
}

fn config_json() -> Vec<u8> {
    serde_json::to_vec(&json!({
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Entrypoint": ["/bin/sh", "-c"],
            "Cmd": ["echo hi"],
            "Env": ["PATH=/usr/local/bin:/bin", "HOME=/root"],
            "WorkingDir": "/app",
            "User": "1000",
        },
        "rootfs": { "type": "layers", "diff_ids": [] },
    }))
    .unwrap()
}

/// The standard image's first layer (uncompressed).
fn layer1() -> Vec<u8> {
    tar(&[
        E::Dir("./", 0o755),
        E::Dir("etc/", 0o755),
        E::File("etc/passwd", 0o644, b"root:x:0:0\n"),
        E::File("etc/hosts", 0o644, b"127.0.0.1 localhost\n"),
        E::Dir("app", 0o750),
        E::File("app/old", 0o644, b"old"),
        E::Dir("app/sub", 0o755),
        E::File("app/sub/deep", 0o600, b"deep"),
        E::Dir("usr/bin", 0o755),
        E::File("usr/bin/sh", 0o4755, b"#!sh"),
        E::Symlink("bin", "usr/bin"),
        E::Fifo("run/fifo"),
    ])
}

/// The standard image's second layer: a whiteout, an opaque directory whose marker comes after
/// an entry of the same layer, a replacement.
fn layer2() -> Vec<u8> {
    tar(&[
        E::File("app/new", 0o644, b"new"),
        E::File("etc/.wh.passwd", 0o644, b""),
        E::File("app/.wh..wh..opq", 0o644, b""),
        E::Dir("app/sub2", 0o700),
        E::File("app/sub2/x", 0o640, b"x"),
        E::File("etc/hosts", 0o600, b"replaced"),
    ])
}

fn file(mode: u32, data: &[u8]) -> Node {
    Node::File { mode, data: Arc::from(data) }
}

fn dir(mode: u32) -> Node {
    Node::Dir { mode }
}

fn link(target: &str) -> Node {
    Node::Symlink(target.to_string())
}

fn tree_of(nodes: Vec<(&str, Node)>) -> BTreeMap<String, Node> {
    nodes.into_iter().map(|(path, node)| (path.to_string(), node)).collect()
}

/// The tree the standard image flattens to.
fn standard_tree() -> BTreeMap<String, Node> {
    tree_of(vec![
        ("/", dir(0o755)),
        ("/app", dir(0o750)),
        ("/app/new", file(0o644, b"new")),
        ("/app/sub2", dir(0o700)),
        ("/app/sub2/x", file(0o640, b"x")),
        ("/bin", link("usr/bin")),
        ("/etc", dir(0o755)),
        ("/etc/hosts", file(0o600, b"replaced")),
        ("/usr", dir(0o755)),
        ("/usr/bin", dir(0o755)),
        ("/usr/bin/sh", file(0o4755, b"#!sh")),
    ])
}

fn standard_config() -> Config {
    Config {
        entrypoint: vec!["/bin/sh".into(), "-c".into()],
        cmd: vec!["echo hi".into()],
        env: vec!["PATH=/usr/local/bin:/bin".into(), "HOME=/root".into()],
        working_dir: "/app".into(),
        user: "1000".into(),
    }
}

/// The standard image as an OCI layout (gzip then zstd layers); also returns the manifest.
fn standard_oci() -> (Vec<u8>, Vec<u8>) {
    let config = config_json();
    let (l1, l2) = (gzip(&layer1()), zstd(&layer2()));
    let manifest = manifest(&config, &[&l1, &l2]);
    let index = index_of(vec![descriptor(OCI_MANIFEST, &manifest)]);
    (oci_archive(&index, &[&manifest, &config, &l1, &l2]), manifest)
}

/// The standard image as a classic `docker save` archive (a gzip layer, which `docker load`
/// takes too, and a plain one reached through a symbolic link, as docker writes a layer it has
/// written before).
fn standard_docker() -> Vec<u8> {
    let config = config_json();
    let config_name = format!("{}.json", &sha256_digest(&config)[7..]);
    let manifest = serde_json::to_vec(&json!([{
        "Config": config_name,
        "RepoTags": ["deja/test:latest"],
        "Layers": ["l1/layer.tar", "l2/layer.tar"],
    }]))
    .unwrap();
    let (l1, l2) = (gzip(&layer1()), layer2());
    let mut builder = tar::Builder::new(Vec::new());
    let regular = tar::EntryType::Regular;
    append(&mut builder, regular, b"manifest.json", b"", 0o644, &manifest);
    append(&mut builder, regular, config_name.as_bytes(), b"", 0o644, &config);
    append(&mut builder, tar::EntryType::Directory, b"l1/", b"", 0o755, b"");
    append(&mut builder, regular, b"l1/layer.tar", b"", 0o644, &l1);
    append(&mut builder, regular, b"real2/layer.tar", b"", 0o644, &l2);
    append(&mut builder, tar::EntryType::Symlink, b"l2/layer.tar", b"../real2/layer.tar", 0o777, b"");
    builder.into_inner().unwrap()
}

fn limits() -> Limits {
    Limits::default()
}

/// Applies one layer to an empty tree.
fn one_layer(layer: &[u8]) -> Result<BTreeMap<String, Node>, ImageError> {
    from_layers(&[layer], &limits())
}

/// The layer error of a result, or a panic saying what came instead.
fn layer_error<T: std::fmt::Debug>(result: Result<T, ImageError>) -> LayerError {
    match result {
        Err(ImageError::Layer { source, .. }) => source,
        other => panic!("expected a layer error, got {other:?}"),
    }
}

/// An image with the given tree and config, for the lookups.
fn image(nodes: Vec<(&str, Node)>, config: Config) -> Image {
    Image { tree: tree_of(nodes), config, digest: String::new() }
}

// ---------------------------------------------------------------------------------------------
// The two formats.

#[test]
fn oci_layout_applies_layers_with_whiteouts_and_opaque_dirs() {
    let (archive, manifest) = standard_oci();
    let image = read(&archive, &limits()).unwrap();
    assert_eq!(image.tree, standard_tree());
    assert_eq!(image.config, standard_config());
    assert_eq!(image.digest, sha256_digest(&manifest));
}

#[test]
fn docker_save_gives_the_same_tree() {
    let image = read(&standard_docker(), &limits()).unwrap();
    assert_eq!(image.tree, standard_tree());
    assert_eq!(image.config, standard_config());
    assert_eq!(image.digest, sha256_digest(&config_json()));
}

#[test]
fn archive_with_both_formats_is_read_as_oci() {
    // Docker 25 writes both; here manifest.json names only the first layer, so a docker read
    // would give another tree.
    let config = config_json();
    let (l1, l2) = (gzip(&layer1()), zstd(&layer2()));
    let manifest = manifest(&config, &[&l1, &l2]);
    let index = serde_json::to_vec(&index_of(vec![descriptor(OCI_MANIFEST, &manifest)])).unwrap();
    let docker = serde_json::to_vec(&json!([{ "Config": blob_name(&config), "Layers": [blob_name(&l1)] }])).unwrap();
    let names = [blob_name(&manifest), blob_name(&config), blob_name(&l1), blob_name(&l2)];
    let archive = outer(&[
        ("manifest.json", &docker),
        ("oci-layout", br#"{"imageLayoutVersion":"1.0.0"}"#),
        ("index.json", &index),
        (&names[0], &manifest),
        (&names[1], &config),
        (&names[2], &l1),
        (&names[3], &l2),
    ]);
    let image = read(&archive, &limits()).unwrap();
    assert_eq!(image.tree, standard_tree());
    assert_eq!(image.digest, sha256_digest(&manifest));
}

#[test]
fn compressed_image_archives_are_read() {
    let (archive, _) = standard_oci();
    for compressed in [gzip(&archive), zstd(&archive)] {
        assert_eq!(read(&compressed, &limits()).unwrap().tree, standard_tree());
    }
    assert_eq!(read(&gzip(&standard_docker()), &limits()).unwrap().tree, standard_tree());
}

#[test]
fn nested_index_picks_linux_amd64() {
    let config = config_json();
    let arm_config = serde_json::to_vec(&json!({ "architecture": "arm64", "os": "linux" })).unwrap();
    let l1 = gzip(&layer1());
    let amd = manifest(&config, &[&l1]);
    let arm = manifest(&arm_config, &[]);
    let nested = serde_json::to_vec(&index_of(vec![
        with_platform(descriptor(OCI_MANIFEST, &arm), "linux", "arm64"),
        with_platform(descriptor(OCI_MANIFEST, &amd), "linux", "amd64"),
        with_platform(descriptor(OCI_MANIFEST, &arm), "unknown", "unknown"),
    ]))
    .unwrap();
    let index = index_of(vec![descriptor(OCI_INDEX, &nested)]);
    let archive = oci_archive(&index, &[&nested, &amd, &arm, &config, &arm_config, &l1]);
    let image = read(&archive, &limits()).unwrap();
    assert_eq!(image.digest, sha256_digest(&amd));
    assert_eq!(image.tree, one_layer(&l1).unwrap());
}

#[test]
fn index_without_linux_amd64_is_rejected() {
    let config = serde_json::to_vec(&json!({ "architecture": "arm64", "os": "linux" })).unwrap();
    let arm = manifest(&config, &[]);
    let index = index_of(vec![
        with_platform(descriptor(OCI_MANIFEST, &arm), "linux", "arm64"),
        with_platform(descriptor(OCI_MANIFEST, &arm), "linux", "s390x"),
    ]);
    let archive = oci_archive(&index, &[&arm, &config]);
    match read(&archive, &limits()) {
        Err(ImageError::NoPlatform { count: 2, platforms }) => assert_eq!(platforms, "linux/arm64, linux/s390x"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn config_for_another_platform_is_rejected() {
    let config = serde_json::to_vec(&json!({ "architecture": "arm64", "os": "linux" })).unwrap();
    let only = manifest(&config, &[]);
    let archive = oci_archive(&index_of(vec![descriptor(OCI_MANIFEST, &only)]), &[&only, &config]);
    match read(&archive, &limits()) {
        Err(ImageError::Platform { os, architecture }) => {
            assert_eq!((os.as_str(), architecture.as_str()), ("linux", "arm64"))
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn config_fields_may_be_missing_or_null() {
    let config = serde_json::to_vec(&json!({ "config": { "Entrypoint": null, "Cmd": ["run"], "Env": null } })).unwrap();
    let only = manifest(&config, &[]);
    let archive = oci_archive(&index_of(vec![descriptor(OCI_MANIFEST, &only)]), &[&only, &config]);
    let image = read(&archive, &limits()).unwrap();
    assert_eq!(image.config, Config { cmd: vec!["run".into()], ..Config::default() });
    assert_eq!(image.tree, tree_of(vec![("/", dir(0o755))]));
}

#[test]
fn wrong_blob_digest_is_rejected() {
    let config = config_json();
    let l1 = gzip(&layer1());
    let manifest = manifest(&config, &[&l1]);
    let index = index_of(vec![descriptor(OCI_MANIFEST, &manifest)]);
    let mut tampered = l1.clone();
    let last = tampered.len() - 1;
    tampered[last] ^= 1;
    let names = [blob_name(&manifest), blob_name(&config), blob_name(&l1)];
    let index = serde_json::to_vec(&index).unwrap();
    let archive =
        outer(&[("index.json", &index), (&names[0], &manifest), (&names[1], &config), (&names[2], &tampered)]);
    match read(&archive, &limits()) {
        Err(ImageError::DigestMismatch { blob, actual }) => {
            assert_eq!(blob, sha256_digest(&l1));
            assert_eq!(actual, sha256_digest(&tampered));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn wrong_size_missing_blob_and_bad_digest_are_rejected() {
    let config = config_json();
    let mut manifest_json: Value = serde_json::from_slice(&manifest(&config, &[])).unwrap();
    manifest_json["config"]["size"] = json!(1);
    let wrong_size = serde_json::to_vec(&manifest_json).unwrap();
    let archive = oci_archive(&index_of(vec![descriptor(OCI_MANIFEST, &wrong_size)]), &[&wrong_size, &config]);
    assert!(matches!(
        read(&archive, &limits()),
        Err(ImageError::SizeMismatch { expected: 1, actual, .. }) if actual == config.len() as u64
    ));

    let good = manifest(&config, &[]);
    let archive = oci_archive(&index_of(vec![descriptor(OCI_MANIFEST, &good)]), &[&good]);
    match read(&archive, &limits()) {
        Err(ImageError::MissingFile { name, .. }) => assert_eq!(name, blob_name(&config)),
        other => panic!("{other:?}"),
    }

    let index = index_of(vec![json!({ "mediaType": OCI_MANIFEST, "digest": "sha512:abcd", "size": 4 })]);
    assert!(matches!(
        read(&oci_archive(&index, &[]), &limits()),
        Err(ImageError::BadDigest { digest, .. }) if digest == "sha512:abcd"
    ));
}

#[test]
fn not_an_image_is_rejected() {
    assert!(matches!(read(&outer(&[("hello.txt", b"hi")]), &limits()), Err(ImageError::NotAnImage)));
    assert!(matches!(read(&[0u8; 1024], &limits()), Err(ImageError::NotAnImage)));
    assert!(matches!(read(b"", &limits()), Err(ImageError::NotAnImage)));
    assert!(matches!(read(b"hello, world", &limits()), Err(ImageError::Archive { .. })));
    assert!(matches!(read(&[0x1f, 0x8b, 1, 2, 3], &limits()), Err(ImageError::Archive { .. })));
    let garbage: Vec<u8> = (0..4096u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    assert!(matches!(read(&garbage, &limits()), Err(ImageError::Archive { .. })));
    let empty_list = outer(&[("manifest.json", b"[]")]);
    assert!(matches!(read(&empty_list, &limits()), Err(ImageError::NoManifest { file }) if file == "manifest.json"));
    let bad_json = outer(&[("index.json", b"{\"manifests\": 7}")]);
    assert!(matches!(read(&bad_json, &limits()), Err(ImageError::Json { file, .. }) if file == "index.json"));
}

// ---------------------------------------------------------------------------------------------
// Applying layers.

#[test]
fn paths_are_normalized_and_parents_implied() {
    let tree = one_layer(&tar(&[
        E::File("./a/b/c", 0o644, b"c"),
        E::File("/abs/./x//y", 0o600, b"y"),
        E::File("p/q/../r", 0o644, b"r"),
        E::Dir("./", 0o700),
    ]))
    .unwrap();
    assert_eq!(
        tree,
        tree_of(vec![
            ("/", dir(0o700)),
            ("/a", dir(0o755)),
            ("/a/b", dir(0o755)),
            ("/a/b/c", file(0o644, b"c")),
            ("/abs", dir(0o755)),
            ("/abs/x", dir(0o755)),
            ("/abs/x/y", file(0o600, b"y")),
            ("/p", dir(0o755)),
            ("/p/r", file(0o644, b"r")),
        ])
    );
}

#[test]
fn later_entries_replace_earlier_ones() {
    let first = tar(&[
        E::Dir("d", 0o755),
        E::File("d/x", 0o644, b"x"),
        E::Dir("d/e", 0o755),
        E::File("d/e/y", 0o644, b"y"),
        E::File("f", 0o644, b"f"),
        E::Symlink("s", "f"),
        E::File("d-sibling", 0o644, b"kept"),
    ]);
    let second = tar(&[
        E::Dir("d", 0o700),          // a directory over a directory: only its mode changes
        E::File("d/e", 0o600, b"e"), // a file over a directory: what was below goes
        E::Dir("f", 0o711),          // a directory over a file
        E::File("s", 0o644, b"s"),   // a file over a symlink
        E::File("f/z/w", 0o644, b"w"),
    ]);
    let tree = from_layers(&[&first, &second], &limits()).unwrap();
    assert_eq!(
        tree,
        tree_of(vec![
            ("/", dir(0o755)),
            ("/d", dir(0o700)),
            ("/d-sibling", file(0o644, b"kept")),
            ("/d/e", file(0o600, b"e")),
            ("/d/x", file(0o644, b"x")),
            ("/f", dir(0o711)),
            ("/f/z", dir(0o755)),
            ("/f/z/w", file(0o644, b"w")),
            ("/s", file(0o644, b"s")),
        ])
    );
}

#[test]
fn whiteouts_act_on_earlier_layers_only() {
    let first = tar(&[E::File("d/old", 0o644, b"o"), E::File("gone/x", 0o644, b"x"), E::File("keep", 0o644, b"k")]);
    // The markers come last and first; the layer's own entries stay either way.
    let second = tar(&[
        E::File(".wh.gone", 0o644, b""),
        E::File("d/new", 0o644, b"n"),
        E::File("d/.wh..wh..opq", 0o644, b""),
        E::File("gone/again", 0o644, b"a"),
        E::File(".wh.never-there", 0o644, b""),
        E::File("d/.wh..wh.plnk", 0o644, b""),
    ]);
    let tree = from_layers(&[&first, &second], &limits()).unwrap();
    assert_eq!(
        tree,
        tree_of(vec![
            ("/", dir(0o755)),
            ("/d", dir(0o755)),
            ("/d/new", file(0o644, b"n")),
            ("/gone", dir(0o755)),
            ("/gone/again", file(0o644, b"a")),
            ("/keep", file(0o644, b"k")),
        ])
    );
    // An opaque root empties the tree left by earlier layers.
    let third = tar(&[E::File(".wh..wh..opq", 0o644, b""), E::File("only", 0o644, b"1")]);
    let tree = from_layers(&[&first, &third], &limits()).unwrap();
    assert_eq!(tree, tree_of(vec![("/", dir(0o755)), ("/only", file(0o644, b"1"))]));
}

#[test]
fn devices_and_fifos_are_skipped() {
    let tree = one_layer(&tar(&[E::Fifo("dev/fifo"), E::File("a", 0o644, b"a")])).unwrap();
    assert_eq!(tree, tree_of(vec![("/", dir(0o755)), ("/a", file(0o644, b"a"))]));
}

#[test]
fn entries_below_a_symlink_are_stored_literally() {
    let tree = one_layer(&tar(&[E::Symlink("lib", "usr/lib"), E::File("lib/x", 0o644, b"x")])).unwrap();
    assert_eq!(tree, tree_of(vec![("/", dir(0o755)), ("/lib", link("usr/lib")), ("/lib/x", file(0o644, b"x"))]));
}

#[test]
fn hard_links_copy_the_node() {
    let first = tar(&[E::File("bin/busybox", 0o755, b"bb"), E::Symlink("sl", "bin/busybox")]);
    let second = tar(&[
        E::Hard("bin/ls", "bin/busybox"),
        E::Hard("./usr/bin/cat", "./bin/busybox"),
        E::Hard("sl2", "sl"),
        E::File("bin/busybox", 0o700, b"new"),
        E::Hard("bin/new", "bin/busybox"),
    ]);
    let tree = from_layers(&[&first, &second], &limits()).unwrap();
    assert_eq!(
        tree,
        tree_of(vec![
            ("/", dir(0o755)),
            ("/bin", dir(0o755)),
            ("/bin/busybox", file(0o700, b"new")),
            ("/bin/ls", file(0o755, b"bb")),
            ("/bin/new", file(0o700, b"new")),
            ("/sl", link("bin/busybox")),
            ("/sl2", link("bin/busybox")),
            ("/usr", dir(0o755)),
            ("/usr/bin", dir(0o755)),
            ("/usr/bin/cat", file(0o755, b"bb")),
        ])
    );
    match layer_error(one_layer(&tar(&[E::Hard("a", "missing/b")]))) {
        LayerError::HardLinkMissing { entry, target } => {
            assert_eq!((entry.as_str(), target.as_str()), ("a", "missing/b"))
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn escaping_paths_are_rejected() {
    for name in ["../etc/passwd", "a/../../x", "./.."] {
        match layer_error(one_layer(&tar(&[E::File(name, 0o644, b"x")]))) {
            LayerError::Escapes { entry } => assert_eq!(entry, name),
            other => panic!("{name}: {other:?}"),
        }
    }
    match layer_error(one_layer(&tar(&[E::Hard("a", "../../etc/shadow")]))) {
        LayerError::Escapes { entry } => assert_eq!(entry, "a (a hard link to ../../etc/shadow)"),
        other => panic!("{other:?}"),
    }
    // In a whole image the error says which layer.
    let config = config_json();
    let bad = gzip(&tar(&[E::File("../x", 0o644, b"x")]));
    let manifest = manifest(&config, &[&bad]);
    let archive = oci_archive(&index_of(vec![descriptor(OCI_MANIFEST, &manifest)]), &[&manifest, &config, &bad]);
    match read(&archive, &limits()) {
        Err(ImageError::Layer { layer, source: LayerError::Escapes { .. } }) => {
            assert_eq!(layer, format!("1 of 1 ({})", sha256_digest(&bad)))
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn bad_names_are_rejected() {
    let long_name = format!("d/{}", "n".repeat(256));
    let fine_name = format!("d/{}", "n".repeat(255));
    let long_path = "abcdefgh/".repeat(455) + "x"; // 4097 bytes once made absolute
    assert!(one_layer(&tar(&[E::File(&fine_name, 0o644, b"")])).is_ok());
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (long_name.into_bytes(), "has a name longer than 255 bytes"),
        (long_path.into_bytes(), "is longer than 4095 bytes"),
        (b"a\0b/long-enough-to-need-a-gnu-long-name-entry-so-that-the-nul-survives-the-header-field-xxxxxxxxxxxxxxxxx"
            .to_vec(), "contains a NUL byte"),
        (b"bad-\xff-utf8".to_vec(), "is not UTF-8"),
    ];
    for (name, expected) in cases {
        match layer_error(one_layer(&tar(&[E::RawFile(&name)]))) {
            LayerError::BadPath { why, .. } => assert_eq!(why, expected),
            other => panic!("{expected}: {other:?}"),
        }
    }
    assert!(matches!(
        layer_error(one_layer(&tar(&[E::Symlink("s", "")]))),
        LayerError::EmptySymlink { entry } if entry == "s"
    ));
    assert!(matches!(
        layer_error(one_layer(&tar(&[E::File("d/.wh...", 0o644, b"")]))),
        LayerError::BadWhiteout { entry } if entry == "d/.wh..."
    ));
    assert!(matches!(
        layer_error(one_layer(&tar(&[E::File(".", 0o644, b"")]))),
        LayerError::RootNotDir { entry } if entry == "."
    ));
}

#[test]
fn decompression_bombs_are_rejected() {
    let big = vec![0u8; 4 << 20];
    let layer = tar(&[E::File("zeros", 0o644, &big)]);
    let small = Limits { max_bytes: 1 << 20, max_entries: 100 };
    for compressed in [gzip(&layer), zstd(&layer), layer.clone()] {
        assert!(compressed.len() < (1 << 20) || compressed == layer);
        assert!(matches!(
            layer_error(from_layers(&[&compressed], &small)),
            LayerError::TooLarge { limit } if limit == 1 << 20
        ));
    }
    // The limit holds for all layers together; a layer within it passes.
    let half = tar(&[E::File("half", 0o644, &big[..600 << 10])]);
    let gz = gzip(&half);
    assert!(from_layers(&[&gz], &small).is_ok());
    assert!(matches!(
        from_layers(&[&gz, &gz], &small),
        Err(ImageError::Layer { layer, source: LayerError::TooLarge { .. } }) if layer == "2 of 2"
    ));
    // In an image.
    let config = config_json();
    let bomb = gzip(&layer);
    let manifest = manifest(&config, &[&bomb]);
    let archive = oci_archive(&index_of(vec![descriptor(OCI_MANIFEST, &manifest)]), &[&manifest, &config, &bomb]);
    assert!(matches!(read(&archive, &small), Err(ImageError::Layer { source: LayerError::TooLarge { .. }, .. })));
    // A compressed image archive is bounded too.
    let outer_bomb = gzip(&outer(&[("index.json", &big)]));
    assert!(matches!(read(&outer_bomb, &small), Err(ImageError::ArchiveTooLarge { limit }) if limit == 1 << 20));
}

#[test]
fn too_many_entries_are_rejected() {
    let few = Limits { max_bytes: 1 << 20, max_entries: 4 };
    let five: Vec<String> = (0..5).map(|i| format!("f{i}")).collect();
    let entries: Vec<E> = five.iter().map(|name| E::File(name, 0o644, b"")).collect();
    assert!(matches!(layer_error(from_layers(&[&tar(&entries)], &few)), LayerError::TooManyEntries { limit: 4 }));
    // Implied parents count in the tree.
    assert!(matches!(
        layer_error(from_layers(&[&tar(&[E::File("a/b/c/d/e", 0o644, b"")])], &few)),
        LayerError::TooManyEntries { limit: 4 }
    ));
    let archive = outer(&[("a", b""), ("b", b""), ("c", b""), ("d", b""), ("e", b"")]);
    assert!(matches!(read(&archive, &few), Err(ImageError::ArchiveTooManyEntries { limit: 4 })));
}

#[test]
fn truncations_and_byte_flips_never_panic() {
    let (oci, _) = standard_oci();
    let full = read(&oci, &limits()).unwrap();
    let mut errors = 0;
    for len in 0..oci.len() {
        match read(&oci[..len], &limits()) {
            // Every blob is verified, so what reads at all reads as the whole image.
            Ok(image) => assert_eq!(image, full, "truncated to {len}"),
            Err(_) => errors += 1,
        }
    }
    // Only cuts in the end-of-archive padding leave the image whole.
    assert!(errors >= oci.len() - 1024, "{errors} errors in {} truncations", oci.len());
    for at in (0..oci.len()).step_by(3) {
        let mut flipped = oci.clone();
        flipped[at] ^= 0x41;
        if let Ok(image) = read(&flipped, &limits()) {
            assert_eq!(image, full, "flipped at {at}");
        }
    }
    // Without digests, a docker archive may read differently; it must still not panic.
    let docker = standard_docker();
    for len in (0..docker.len()).step_by(5) {
        let _ = read(&docker[..len], &limits());
    }
    for at in (0..docker.len()).step_by(5) {
        let mut flipped = docker.clone();
        flipped[at] = flipped[at].wrapping_add(0x5a);
        let _ = read(&flipped, &limits());
    }
    // Truncated and corrupt layers.
    // A compressed layer is read to its end: any cut is refused, even one past the tar's end.
    for compressed in [gzip(&layer1()), zstd(&layer1())] {
        for len in 1..compressed.len() {
            assert!(one_layer(&compressed[..len]).is_err(), "compressed layer cut to {len} read");
        }
    }
    let plain = layer1();
    for len in (1..plain.len()).step_by(7) {
        let _ = one_layer(&plain[..len]);
    }
}

// ---------------------------------------------------------------------------------------------
// Lookups.

fn lookup_image() -> Image {
    image(
        vec![
            ("/", dir(0o755)),
            ("/bin", link("usr/bin")),
            ("/etc", dir(0o755)),
            ("/etc/alt", link("/etc/real")),
            ("/etc/chain", link("alt")),
            ("/etc/loop1", link("loop2")),
            ("/etc/loop2", link("./loop1")),
            ("/etc/real", file(0o644, b"real")),
            ("/etc/up", link("../../../../usr")),
            ("/etc/dangling", link("nowhere")),
            ("/srv", dir(0o755)),
            ("/srv/run", file(0o755, b"run")),
            ("/usr", dir(0o755)),
            ("/usr/bin", dir(0o755)),
            ("/usr/bin/sh", file(0o755, b"sh")),
            ("/usr/bin/data", dir(0o755)),
            ("/usr/local", dir(0o755)),
            ("/usr/local/bin", dir(0o755)),
            ("/usr/local/bin/data", file(0o755, b"data")),
        ],
        Config { working_dir: "/srv".into(), ..Config::default() },
    )
}

#[test]
fn resolve_follows_symlinks() {
    let image = lookup_image();
    let at = |path: &str| image.resolve(path).map(|(canonical, node)| (canonical, node.clone()));
    let real = Some(("/etc/real".to_string(), file(0o644, b"real")));
    assert_eq!(at("/etc/real"), real);
    assert_eq!(at("/etc/alt"), real); // absolute target
    assert_eq!(at("/etc/chain"), real); // relative, then absolute
    assert_eq!(at("/bin/sh"), Some(("/usr/bin/sh".to_string(), file(0o755, b"sh")))); // an intermediate link
    assert_eq!(at("etc//./real"), real);
    // `..` after a link goes up from where the link led.
    assert_eq!(at("/bin/../bin/sh"), Some(("/usr/bin/sh".to_string(), file(0o755, b"sh"))));
    assert_eq!(at("/bin/../etc/real"), None);
    assert_eq!(at("/"), Some(("/".to_string(), dir(0o755))));
    assert_eq!(at("/bin"), Some(("/usr/bin".to_string(), dir(0o755))));
}

#[test]
fn resolve_clamps_at_root_and_fails_cleanly() {
    let image = lookup_image();
    let at = |path: &str| image.resolve(path).map(|(canonical, _)| canonical);
    assert_eq!(at("/../../etc/real").as_deref(), Some("/etc/real"));
    assert_eq!(at("/etc/up/bin/sh").as_deref(), Some("/usr/bin/sh"));
    assert_eq!(at("/.."), Some("/".to_string()));
    assert_eq!(at("/etc/loop1"), None);
    assert_eq!(at("/etc/loop1/x"), None);
    assert_eq!(at("/etc/dangling"), None);
    assert_eq!(at("/etc/missing"), None);
    assert_eq!(at("/etc/real/x"), None);
    assert_eq!(at("/etc/real/"), None);
    assert_eq!(at(""), None);
    // 40 links are followed, not 41.
    let mut nodes = vec![("/".to_string(), dir(0o755)), ("/end".to_string(), file(0o644, b""))];
    for i in 0..41 {
        let target = if i == 0 { "end".to_string() } else { format!("l{}", i - 1) };
        nodes.push((format!("/l{i}"), link(&target)));
    }
    let chain = Image { tree: nodes.into_iter().collect(), config: Config::default(), digest: String::new() };
    assert_eq!(chain.resolve("/l39").map(|(c, _)| c).as_deref(), Some("/end"));
    assert_eq!(chain.resolve("/l40"), None);
}

#[test]
fn which_searches_path_through_a_symlinked_bin() {
    let mut image = lookup_image();
    // Default PATH: /usr/local/bin/data is a file, /usr/bin/data a directory.
    assert_eq!(image.which("data").as_deref(), Some("/usr/local/bin/data"));
    assert_eq!(image.which("sh").as_deref(), Some("/usr/bin/sh"));
    image.config.env = vec!["HOME=/".into(), "PATH=/bin:/usr/local/bin".into()];
    assert_eq!(image.which("sh").as_deref(), Some("/bin/sh"));
    assert_eq!(image.which("data").as_deref(), Some("/usr/local/bin/data"));
    assert_eq!(image.which("missing"), None);
    assert_eq!(image.which(""), None);
    // An empty PATH entry is the working directory.
    image.config.env = vec!["PATH=/nothing::/bin".into()];
    assert_eq!(image.which("run").as_deref(), Some("/srv/run"));
}

#[test]
fn which_resolves_names_with_a_slash_from_the_working_dir() {
    let mut image = lookup_image();
    assert_eq!(image.which("./run").as_deref(), Some("/srv/./run"));
    assert_eq!(image.which("/bin/sh").as_deref(), Some("/bin/sh"));
    assert_eq!(image.which("../usr/bin/sh").as_deref(), Some("/srv/../usr/bin/sh"));
    assert_eq!(image.which("/usr/bin"), None);
    assert_eq!(image.which("./missing"), None);
    image.config.working_dir = String::new();
    assert_eq!(image.which("srv/run").as_deref(), Some("/srv/run"));
}

#[test]
fn command_applies_overrides() {
    let image = Image { tree: BTreeMap::new(), config: standard_config(), digest: String::new() };
    let strings = |items: &[&str]| items.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(image.command(None, &[]).unwrap(), strings(&["/bin/sh", "-c", "echo hi"]));
    assert_eq!(image.command(None, &strings(&["ls", "-l"])).unwrap(), strings(&["/bin/sh", "-c", "ls", "-l"]));
    assert_eq!(image.command(Some(&strings(&["/bin/env"])), &[]).unwrap(), strings(&["/bin/env", "echo hi"]));
    assert_eq!(image.command(Some(&[]), &strings(&["/app"])).unwrap(), strings(&["/app"]));
    let bare = Image { tree: BTreeMap::new(), config: Config::default(), digest: String::new() };
    assert!(matches!(bare.command(None, &[]), Err(ImageError::NoCommand)));
    assert!(matches!(bare.command(Some(&[]), &[]), Err(ImageError::NoCommand)));
    assert_eq!(bare.command(None, &strings(&["x"])).unwrap(), strings(&["x"]));
}

// ---------------------------------------------------------------------------------------------
// Fuzz seeds.

/// The fuzz seeds: a small OCI layout and a small docker save archive.
fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    vec![("oci.tar", standard_oci().0), ("docker-save.tar", standard_docker())]
}

fn seed_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/image")
}

#[test]
fn fuzz_seeds_are_current() {
    for (name, bytes) in seeds() {
        assert!(bytes.len() < 20 << 10, "{name} is {} bytes", bytes.len());
        assert_eq!(read(&bytes, &limits()).unwrap().tree, standard_tree());
        // The stored seeds (written by `write_fuzz_seeds`) are valid images too.
        let stored = std::fs::read(seed_dir().join(name)).unwrap();
        assert_eq!(read(&stored, &limits()).unwrap().tree, standard_tree(), "fuzz/seeds/image/{name}");
    }
}

#[test]
#[ignore = "writes fuzz/seeds/image/"]
fn write_fuzz_seeds() {
    std::fs::create_dir_all(seed_dir()).unwrap();
    for (name, bytes) in seeds() {
        std::fs::write(seed_dir().join(name), bytes).unwrap();
    }
}
