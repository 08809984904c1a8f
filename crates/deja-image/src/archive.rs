//! The image archive: its files, an OCI layout's index and manifests (content-addressed and
//! verified), a `docker save` archive's `manifest.json`, and the image config.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashSet};
use std::io::Read;

use serde::Deserialize;
use sha2::{Digest, Sha256};
use snafu::{ensure, OptionExt, ResultExt};
use tar::EntryType;

use crate::layer::{self, decompressed, is_compressed, normalize, parent};
use crate::{
    ArchiveSnafu, ArchiveTooLargeSnafu, ArchiveTooManyEntriesSnafu, ArchiveTruncatedSnafu, BadDigestSnafu, Config,
    DigestMismatchSnafu, Image, ImageError, JsonSnafu, Limits, MissingFileSnafu, NestedTooDeepSnafu, NoManifestSnafu,
    NoPlatformSnafu, NotAnImageSnafu, PlatformSnafu, SizeMismatchSnafu,
};

/// OCI image index.
const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
/// Docker manifest list (the index's Docker twin).
const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
/// OCI image manifest.
const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// Docker image manifest, schema 2.
const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
/// How deep nested indexes are followed (index.json itself is depth 0).
const MAX_INDEX_DEPTH: usize = 8;
/// How many links are followed when looking a file of the archive up.
const MAX_ARCHIVE_LINKS: usize = 16;
/// How many platforms an error lists.
const MAX_PLATFORMS_SHOWN: usize = 16;

/// Reads an image archive.
pub(crate) fn read(bytes: &[u8], limits: &Limits) -> Result<Image, ImageError> {
    let files = Files::read(bytes, limits)?;
    if files.find("/index.json").is_some() {
        oci(&files, limits)
    } else if files.find("/manifest.json").is_some() {
        docker(&files, limits)
    } else {
        NotAnImageSnafu.fail()
    }
}

/// The files of the image archive, by normalized path, and its links.
struct Files<'a> {
    /// Regular files: borrowed from the archive when it is a plain tar.
    files: BTreeMap<String, Cow<'a, [u8]>>,
    /// Symbolic and hard links, to the normalized path they name.
    links: BTreeMap<String, String>,
}

impl<'a> Files<'a> {
    /// Reads the archive's regular files and links (other entries, and entries whose path
    /// cannot be a file of an image, are passed over).
    fn read(bytes: &'a [u8], limits: &Limits) -> Result<Self, ImageError> {
        let plain = !is_compressed(bytes);
        let reader = decompressed(bytes).context(ArchiveSnafu)?;
        // A compressed archive is bounded as it is decompressed; a plain one is in memory already.
        let stream_allowed = if plain { u64::MAX } else { limits.max_bytes.saturating_add(1) };
        let mut archive = tar::Archive::new(reader.take(stream_allowed));
        let mut files = Files { files: BTreeMap::new(), links: BTreeMap::new() };
        let result = files.entries(&mut archive, bytes, plain, limits);
        if !plain {
            // To the end of the compressed stream, so that a corrupt or truncated one is refused.
            let mut rest = archive.into_inner();
            let drained = match result {
                Ok(()) => std::io::copy(&mut rest, &mut std::io::sink()).map(|_| ()),
                Err(_) => Ok(()),
            };
            let consumed = stream_allowed - rest.limit();
            ensure!(consumed <= limits.max_bytes, ArchiveTooLargeSnafu { limit: limits.max_bytes });
            drained.context(ArchiveSnafu)?;
        }
        result.map(|()| files)
    }

    fn entries<R: Read>(
        &mut self,
        archive: &mut tar::Archive<R>,
        bytes: &'a [u8],
        plain: bool,
        limits: &Limits,
    ) -> Result<(), ImageError> {
        let mut entries_left = limits.max_entries;
        let mut held_left = limits.max_bytes;
        for entry in archive.entries().context(ArchiveSnafu)? {
            let mut entry = entry.context(ArchiveSnafu)?;
            ensure!(entries_left > 0, ArchiveTooManyEntriesSnafu { limit: limits.max_entries });
            entries_left -= 1;
            let raw = entry.path_bytes().into_owned();
            let Ok(path) = normalize(&raw) else { continue };
            match entry.header().entry_type() {
                kind @ (EntryType::Regular | EntryType::Continuous | EntryType::GNUSparse) => {
                    let size = entry.size();
                    let data = if plain && kind != EntryType::GNUSparse {
                        // A plain tar is in memory already: the file is a slice of it.
                        let start = entry.raw_file_position();
                        let end = start.checked_add(size).filter(|end| *end <= bytes.len() as u64);
                        let end = end.context(ArchiveTruncatedSnafu { name: layer::shown(&raw) })?;
                        Cow::Borrowed(&bytes[start as usize..end as usize])
                    } else {
                        let allowed = held_left.saturating_add(1);
                        let mut data = Vec::new();
                        let read = (&mut entry).take(allowed).read_to_end(&mut data);
                        ensure!(data.len() as u64 <= held_left, ArchiveTooLargeSnafu { limit: limits.max_bytes });
                        read.context(ArchiveSnafu)?;
                        ensure!(data.len() as u64 == size, ArchiveTruncatedSnafu { name: layer::shown(&raw) });
                        held_left -= size;
                        Cow::Owned(data)
                    };
                    self.links.remove(&path);
                    self.files.insert(path, data);
                }
                kind @ (EntryType::Symlink | EntryType::Link) => {
                    let target = entry.link_name_bytes().map(|t| t.into_owned()).unwrap_or_default();
                    // A symbolic link's target is relative to its directory, a hard link's to the root.
                    let target = if kind == EntryType::Symlink && !target.starts_with(b"/") {
                        let mut joined = parent(&path).as_bytes().to_vec();
                        joined.push(b'/');
                        joined.extend_from_slice(&target);
                        joined
                    } else {
                        target
                    };
                    if let Ok(target) = normalize(&target) {
                        self.files.remove(&path);
                        self.links.insert(path, target);
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The file at a path of the archive, through its links.
    fn find(&self, name: &str) -> Option<&[u8]> {
        let mut path = normalize(name.as_bytes()).ok()?;
        for _ in 0..=MAX_ARCHIVE_LINKS {
            if let Some(data) = self.files.get(&path) {
                return Some(data);
            }
            path = self.links.get(&path)?.clone();
        }
        None
    }

    /// The file at a path the image names, or the error that says who named it.
    fn get(&self, name: &str, named_by: &str) -> Result<&[u8], ImageError> {
        self.find(name).context(MissingFileSnafu { name, named_by })
    }
}

/// A content descriptor (OCI image spec, "Descriptors").
#[derive(Debug, Clone, Deserialize)]
struct Descriptor {
    #[serde(rename = "mediaType")]
    media_type: Option<String>,
    digest: String,
    size: Option<u64>,
    platform: Option<Platform>,
}

/// A descriptor's platform.
#[derive(Debug, Clone, Deserialize)]
struct Platform {
    #[serde(default)]
    architecture: String,
    #[serde(default)]
    os: String,
}

impl Descriptor {
    fn is_linux_amd64(&self) -> bool {
        self.platform.as_ref().is_some_and(|p| p.os == "linux" && p.architecture == "amd64")
    }

    fn platform_name(&self) -> String {
        match &self.platform {
            Some(p) => format!("{}/{}", p.os, p.architecture),
            None => "unspecified".to_string(),
        }
    }
}

/// An image index, or a Docker manifest list.
#[derive(Deserialize)]
struct Index {
    manifests: Option<Vec<Descriptor>>,
}

/// Enough of a blob of unknown type to tell an index from a manifest.
#[derive(Deserialize)]
struct Sniff {
    manifests: Option<serde::de::IgnoredAny>,
}

/// An image manifest.
#[derive(Deserialize)]
struct Manifest {
    config: Descriptor,
    layers: Option<Vec<Descriptor>>,
}

/// The image config file (only what deja uses).
#[derive(Deserialize)]
struct ConfigFile {
    architecture: Option<String>,
    os: Option<String>,
    config: Option<RunConfig>,
}

/// The config file's `config` object.
#[derive(Deserialize)]
struct RunConfig {
    #[serde(rename = "Entrypoint")]
    entrypoint: Option<Vec<String>>,
    #[serde(rename = "Cmd")]
    cmd: Option<Vec<String>>,
    #[serde(rename = "Env")]
    env: Option<Vec<String>>,
    #[serde(rename = "WorkingDir")]
    working_dir: Option<String>,
    #[serde(rename = "User")]
    user: Option<String>,
}

/// One image of a `docker save` archive's `manifest.json`.
#[derive(Deserialize)]
struct DockerImage {
    #[serde(rename = "Config")]
    config: String,
    #[serde(rename = "Layers")]
    layers: Option<Vec<String>>,
}

/// `sha256:` and the lowercase hex SHA-256 of the bytes.
pub(crate) fn sha256_digest(bytes: &[u8]) -> String {
    let mut text = String::with_capacity(7 + 64);
    text.push_str("sha256:");
    for byte in Sha256::digest(bytes) {
        text.push_str(&format!("{byte:02x}"));
    }
    text
}

/// The blobs of an OCI layout, each verified once.
struct Blobs<'f, 'a> {
    files: &'f Files<'a>,
    /// Digests already verified.
    verified: HashSet<String>,
}

impl<'f, 'a> Blobs<'f, 'a> {
    /// The blob a descriptor names, checked against its size and digest.
    fn get(&mut self, descriptor: &Descriptor, named_by: &str) -> Result<&'f [u8], ImageError> {
        let digest = &descriptor.digest;
        let hex = digest
            .strip_prefix("sha256:")
            .filter(|hex| hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
        let hex = hex.context(BadDigestSnafu { digest, named_by })?;
        let bytes = self.files.get(&format!("blobs/sha256/{hex}"), named_by)?;
        if let Some(expected) = descriptor.size {
            ensure!(
                expected == bytes.len() as u64,
                SizeMismatchSnafu { blob: digest, expected, actual: bytes.len() as u64 }
            );
        }
        if !self.verified.contains(digest) {
            let actual = sha256_digest(bytes);
            ensure!(actual == *digest, DigestMismatchSnafu { blob: digest, actual });
            self.verified.insert(digest.clone());
        }
        Ok(bytes)
    }

    /// Collects the image manifests an index lists, following nested indexes.
    fn manifests(
        &mut self,
        index: &[u8],
        file: &str,
        depth: usize,
        seen: &mut HashSet<String>,
        found: &mut Vec<Descriptor>,
    ) -> Result<(), ImageError> {
        let index: Index = serde_json::from_slice(index).context(JsonSnafu { file, what: "OCI image index" })?;
        for descriptor in index.manifests.unwrap_or_default() {
            let nested = match descriptor.media_type.as_deref() {
                Some(OCI_INDEX | DOCKER_LIST) => true,
                Some(OCI_MANIFEST | DOCKER_MANIFEST) => false,
                // No media type: the blob itself says what it is.
                None => {
                    let blob = self.get(&descriptor, file)?;
                    let sniff: Sniff = serde_json::from_slice(blob)
                        .context(JsonSnafu { file: descriptor.digest.as_str(), what: "OCI image index or manifest" })?;
                    sniff.manifests.is_some()
                }
                // Artifacts and other content that is not an image.
                Some(_) => continue,
            };
            if !nested {
                found.push(descriptor);
                continue;
            }
            ensure!(depth < MAX_INDEX_DEPTH, NestedTooDeepSnafu { depth: MAX_INDEX_DEPTH, blob: &descriptor.digest });
            // An index listed twice is followed once (its manifests are found the first time).
            if seen.insert(descriptor.digest.clone()) {
                let blob = self.get(&descriptor, file)?;
                self.manifests(blob, &descriptor.digest, depth + 1, seen, found)?;
            }
        }
        Ok(())
    }
}

/// Reads an OCI image layout.
fn oci(files: &Files<'_>, limits: &Limits) -> Result<Image, ImageError> {
    let mut blobs = Blobs { files, verified: HashSet::new() };
    let index = files.get("index.json", "the OCI layout")?;
    let mut found = Vec::new();
    blobs.manifests(index, "index.json", 0, &mut HashSet::new(), &mut found)?;
    let chosen = match found.as_slice() {
        [] => return NoManifestSnafu { file: "index.json" }.fail(),
        [only] => only,
        several => match several.iter().find(|d| d.is_linux_amd64()) {
            Some(chosen) => chosen,
            None => {
                let mut platforms: Vec<String> =
                    several.iter().take(MAX_PLATFORMS_SHOWN).map(Descriptor::platform_name).collect();
                if several.len() > MAX_PLATFORMS_SHOWN {
                    platforms.push("...".to_string());
                }
                return NoPlatformSnafu { count: several.len(), platforms: platforms.join(", ") }.fail();
            }
        },
    };
    let digest = chosen.digest.clone();
    let manifest = blobs.get(chosen, "index.json")?;
    let manifest: Manifest =
        serde_json::from_slice(manifest).context(JsonSnafu { file: digest.as_str(), what: "OCI image manifest" })?;
    let named_by = format!("manifest {digest}");
    let config = blobs.get(&manifest.config, &named_by)?;
    let config = parse_config(config, &manifest.config.digest)?;
    let descriptors = manifest.layers.unwrap_or_default();
    let count = descriptors.len();
    let mut layers = Vec::with_capacity(count);
    for (i, descriptor) in descriptors.iter().enumerate() {
        let bytes = blobs.get(descriptor, &named_by)?;
        layers.push((format!("{} of {count} ({})", i + 1, descriptor.digest), bytes));
    }
    let tree = layer::unpack(&layers, limits)?;
    Ok(Image { tree, config, digest })
}

/// Reads a classic `docker save` archive.
fn docker(files: &Files<'_>, limits: &Limits) -> Result<Image, ImageError> {
    let manifest = files.get("manifest.json", "the docker save archive")?;
    let images: Vec<DockerImage> =
        serde_json::from_slice(manifest).context(JsonSnafu { file: "manifest.json", what: "docker save manifest" })?;
    let image = images.first().context(NoManifestSnafu { file: "manifest.json" })?;
    let config_bytes = files.get(&image.config, "manifest.json")?;
    let config = parse_config(config_bytes, &image.config)?;
    let names = image.layers.as_deref().unwrap_or_default();
    let count = names.len();
    let mut layers = Vec::with_capacity(count);
    for (i, name) in names.iter().enumerate() {
        let bytes = files.get(name, "manifest.json")?;
        layers.push((format!("{} of {count} ({name})", i + 1), bytes));
    }
    let tree = layer::unpack(&layers, limits)?;
    Ok(Image { tree, config, digest: sha256_digest(config_bytes) })
}

/// Parses an image config and checks its platform.
fn parse_config(bytes: &[u8], file: &str) -> Result<Config, ImageError> {
    let parsed: ConfigFile = serde_json::from_slice(bytes).context(JsonSnafu { file, what: "image config" })?;
    let os = parsed.os.unwrap_or_default();
    let architecture = parsed.architecture.unwrap_or_default();
    ensure!(
        (os.is_empty() || os == "linux") && (architecture.is_empty() || architecture == "amd64"),
        PlatformSnafu {
            os: if os.is_empty() { "(unspecified os)" } else { os.as_str() },
            architecture: if architecture.is_empty() { "(unspecified architecture)" } else { architecture.as_str() },
        }
    );
    let run = parsed.config;
    let run = run.as_ref();
    Ok(Config {
        entrypoint: run.and_then(|r| r.entrypoint.clone()).unwrap_or_default(),
        cmd: run.and_then(|r| r.cmd.clone()).unwrap_or_default(),
        env: run.and_then(|r| r.env.clone()).unwrap_or_default(),
        working_dir: run.and_then(|r| r.working_dir.clone()).unwrap_or_default(),
        user: run.and_then(|r| r.user.clone()).unwrap_or_default(),
    })
}
