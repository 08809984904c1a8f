//! The JSON artifacts deja reads back: bug files, cluster bug files and campaign checkpoints.
//!
//! They stay plain, pretty-printed JSON, so a person can read them and `jq` can query them, but
//! each carries a `"schema"` field (`deja.bug/2`: a family and a version) and a `"seal"`: the
//! BLAKE3 of the document's canonical form without the seal (keys sorted, no whitespace, as
//! `serde_json` writes a [`serde_json::Value`]). Opening one runs four checks, in order, and
//! names the file and the check that failed:
//!
//! 1. **json**: the bytes are one JSON object (a truncated file fails here);
//! 2. **schema**: it is of the family the caller reads, at a version this deja reads; a newer
//!    file is refused with the version it needs, an older one with how to get on;
//! 3. **seal**: the seal is there (every version from [`Schema::sealed_since`] has one) and
//!    matches the content, so a flipped byte anywhere in the content is refused;
//! 4. **fields**: the content has the fields of its type.
//!
//! Layout changes that only whitespace makes (reindenting, reordering keys) keep the seal: the
//! seal covers the content, not its formatting. The seal is a checksum against damage and
//! careless edits, not a signature: whoever can write the file can reseal it.

use std::path::Path;

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use snafu::{ensure, ResultExt, Snafu};

/// The field that holds a document's seal.
pub const SEAL_FIELD: &str = "seal";

/// A family of JSON artifacts and the versions this build reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schema {
    /// The family, e.g. `deja.bug`.
    pub family: &'static str,
    /// What a person calls it, e.g. `bug file`.
    pub what: &'static str,
    /// The version this build writes.
    pub current: u32,
    /// The oldest version this build still reads.
    pub oldest: u32,
    /// The first version that carries a seal; older files are read without one.
    pub sealed_since: u32,
}

/// Why a JSON artifact was refused.
#[derive(Debug, Snafu)]
#[snafu(visibility(pub(crate)))]
pub enum ArtifactError {
    /// The file could not be read.
    #[snafu(display("{path}: {source}"))]
    Read {
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// The file could not be written.
    #[snafu(display("{path}: {source}"))]
    Write {
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// The bytes do not parse as JSON.
    #[snafu(display(
        "{path}: the json check failed: this is not a whole {what} ({source}); it was truncated or damaged"
    ))]
    Json {
        /// The file.
        path: String,
        /// What was expected.
        what: &'static str,
        /// The parser's complaint.
        source: serde_json::Error,
    },
    /// The bytes are JSON, but not an object.
    #[snafu(display(
        "{path}: the json check failed: this is not a whole {what} (not a JSON object); it was truncated or damaged"
    ))]
    NotObject {
        /// The file.
        path: String,
        /// What was expected.
        what: &'static str,
    },
    /// Another family of artifact, or none.
    #[snafu(display(
        "{path}: the schema check failed: this is not a {what} (its schema is {found}, a {what} has {family}/N)"
    ))]
    Family {
        /// The file.
        path: String,
        /// What was expected.
        what: &'static str,
        /// The expected family.
        family: &'static str,
        /// The schema the file has (`none` without one).
        found: String,
    },
    /// A version this build does not read yet.
    #[snafu(display(
        "{}: the schema check failed: this {} is {}, written by a newer deja; this deja reads {}. Read it with a \
         deja that reads {} or later",
        versions.path, versions.what, versions.found, versions.range(), versions.found
    ))]
    Newer {
        /// The file's version and the ones this build reads.
        versions: Versions,
    },
    /// A version this build no longer reads.
    #[snafu(display(
        "{}: the schema check failed: this {} is {}, which this deja no longer reads (it reads {}); read it \
         with the deja that wrote it",
        versions.path, versions.what, versions.found, versions.range()
    ))]
    Older {
        /// The file's version and the ones this build reads.
        versions: Versions,
    },
    /// The content does not match its seal.
    #[snafu(display(
        "{path}: the seal check failed: the content no longer matches the seal deja wrote ({}… against {}…): \
         this {what} was altered or damaged after it was written",
        &content[..12], seal.get(..12).unwrap_or(seal)
    ))]
    SealMismatch {
        /// The file.
        path: String,
        /// What was expected.
        what: &'static str,
        /// The seal of the content as read.
        content: String,
        /// The seal the file carries.
        seal: String,
    },
    /// The seal field holds something other than a string.
    #[snafu(display("{path}: the seal check failed: the seal is not a string"))]
    SealNotString {
        /// The file.
        path: String,
    },
    /// A sealed version without its seal.
    #[snafu(display("{path}: the seal check failed: a {found} {what} carries a seal and this one has none"))]
    SealMissing {
        /// The file.
        path: String,
        /// What was expected.
        what: &'static str,
        /// The schema the file has.
        found: String,
    },
    /// The content lacks the fields of its type, or holds values of the wrong type.
    #[snafu(display(
        "{path}: the fields check failed: this {what} does not have the content its schema promises ({source})"
    ))]
    Fields {
        /// The file.
        path: String,
        /// What was expected.
        what: &'static str,
        /// The complaint.
        source: serde_json::Error,
    },
}

/// A file's schema version against the ones this build reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versions {
    /// The file.
    pub path: String,
    /// What was expected.
    pub what: &'static str,
    /// The family.
    pub family: &'static str,
    /// The schema in the file.
    pub found: String,
    /// The oldest version read.
    pub oldest: u32,
    /// The newest version read.
    pub current: u32,
}

impl Versions {
    /// `deja.bug/1 to deja.bug/2`.
    pub fn range(&self) -> String {
        format!("{0}/{1} to {0}/{2}", self.family, self.oldest, self.current)
    }
}

impl ArtifactError {
    /// The check that failed: `io`, `json`, `schema`, `seal` or `fields`.
    pub fn check(&self) -> &'static str {
        match self {
            ArtifactError::Read { .. } | ArtifactError::Write { .. } => "io",
            ArtifactError::Json { .. } | ArtifactError::NotObject { .. } => "json",
            ArtifactError::Family { .. } | ArtifactError::Newer { .. } | ArtifactError::Older { .. } => "schema",
            ArtifactError::SealMismatch { .. }
            | ArtifactError::SealNotString { .. }
            | ArtifactError::SealMissing { .. } => "seal",
            ArtifactError::Fields { .. } => "fields",
        }
    }
}

/// The seal of a document: BLAKE3 (hex) of its canonical form without the seal field.
pub fn seal_of(doc: &Value) -> String {
    let mut body = doc.clone();
    if let Value::Object(map) = &mut body {
        map.remove(SEAL_FIELD);
    }
    let canonical = serde_json::to_vec(&body).expect("a JSON value serializes");
    blake3::hash(&canonical).to_hex().to_string()
}

impl Schema {
    /// The schema string this build writes, e.g. `deja.bug/2`.
    pub fn id(&self) -> String {
        format!("{}/{}", self.family, self.current)
    }

    /// The bytes of `value` as this build writes it: its `schema` field set to [`Schema::id`]
    /// and its seal added, pretty-printed.
    pub fn to_bytes<T: Serialize>(&self, value: &T) -> Vec<u8> {
        let mut doc = serde_json::to_value(value).expect("plain data serializes");
        if let Value::Object(map) = &mut doc {
            map.insert("schema".into(), Value::String(self.id()));
            map.remove(SEAL_FIELD);
        }
        // The seal is of the document as a reader will parse it back (serde_json's
        // `float_roundtrip` makes that the same document, floats included).
        let text = serde_json::to_vec(&doc).expect("a JSON value serializes");
        let mut doc: Value = serde_json::from_slice(&text).expect("deja's own JSON parses");
        let seal = seal_of(&doc);
        if let Value::Object(map) = &mut doc {
            map.insert(SEAL_FIELD.into(), Value::String(seal));
        }
        serde_json::to_vec_pretty(&doc).expect("a JSON value serializes")
    }

    /// Writes `value` to `path` atomically (see [`crate::write_atomic`]).
    pub fn write<T: Serialize>(&self, path: &Path, value: &T) -> Result<(), ArtifactError> {
        crate::write_atomic(path, &self.to_bytes(value))
            .map_err(|e| match e {
                crate::FormatError::Write { source, .. } => source,
                other => std::io::Error::other(other),
            })
            .context(WriteSnafu { path: path.display().to_string() })
    }

    /// Reads `path` and runs the json, schema and seal checks; returns the document (without
    /// its seal) and its version.
    pub fn open(&self, path: &Path) -> Result<(Value, u32), ArtifactError> {
        let bytes = std::fs::read(path).context(ReadSnafu { path: path.display().to_string() })?;
        self.check(&path.display().to_string(), &bytes)
    }

    /// Reads `path`, runs every check and returns the typed content.
    pub fn read<T: DeserializeOwned>(&self, path: &Path) -> Result<T, ArtifactError> {
        let (doc, _) = self.open(path)?;
        self.typed(&path.display().to_string(), doc)
    }

    /// Seals `path` again after an edit that was meant (`deja reseal`): runs the json, schema
    /// and fields checks, but not the seal's, and rewrites the file as this build writes a `T`.
    pub fn reseal<T: DeserializeOwned + Serialize>(&self, path: &Path) -> Result<(), ArtifactError> {
        let shown = path.display().to_string();
        let bytes = std::fs::read(path).context(ReadSnafu { path: &shown })?;
        let mut doc: Value = serde_json::from_slice(&bytes).context(JsonSnafu { path: &shown, what: self.what })?;
        let found = doc.get("schema").and_then(Value::as_str).unwrap_or("none").to_string();
        self.version(&shown, &found)?;
        if let Value::Object(map) = &mut doc {
            map.remove(SEAL_FIELD);
        }
        let typed: T = self.typed(&shown, doc)?;
        self.write(path, &typed)
    }

    /// The fields check: `doc` (from [`Schema::open`]) as a `T`.
    pub fn typed<T: DeserializeOwned>(&self, path: &str, doc: Value) -> Result<T, ArtifactError> {
        serde_json::from_value(doc).context(FieldsSnafu { path, what: self.what })
    }

    /// The schema check: the version of a document whose `schema` field is `found` (`none`
    /// when it has none), if this build reads it.
    pub fn version(&self, path: &str, found: &str) -> Result<u32, ArtifactError> {
        let version = found
            .strip_prefix(self.family)
            .and_then(|rest| rest.strip_prefix('/'))
            .and_then(|v| v.parse::<u32>().ok().filter(|_| !v.starts_with('0') && !v.starts_with('+')));
        let (path, what, family, found) = (path.to_string(), self.what, self.family, found.to_string());
        let Some(version) = version else {
            return FamilySnafu { path, what, family, found }.fail();
        };
        let versions = || Versions { path, what, family, found, oldest: self.oldest, current: self.current };
        ensure!(version <= self.current, NewerSnafu { versions: versions() });
        ensure!(version >= self.oldest, OlderSnafu { versions: versions() });
        Ok(version)
    }

    /// The json, schema and seal checks of `bytes`, read from `path`.
    pub fn check(&self, path: &str, bytes: &[u8]) -> Result<(Value, u32), ArtifactError> {
        let mut doc: Value = serde_json::from_slice(bytes).context(JsonSnafu { path, what: self.what })?;
        let Value::Object(map) = &mut doc else {
            return NotObjectSnafu { path, what: self.what }.fail();
        };
        let found = map.get("schema").and_then(Value::as_str).unwrap_or("none").to_string();
        let version = self.version(path, &found)?;
        match map.get(SEAL_FIELD) {
            Some(Value::String(seal)) => {
                let seal = seal.clone();
                let content = seal_of(&doc);
                ensure!(content == seal, SealMismatchSnafu { path, what: self.what, content, seal });
            }
            Some(_) => return SealNotStringSnafu { path }.fail(),
            None => ensure!(version < self.sealed_since, SealMissingSnafu { path, what: self.what, found }),
        }
        if let Value::Object(map) = &mut doc {
            map.remove(SEAL_FIELD);
        }
        Ok((doc, version))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    const THING: Schema = Schema { family: "deja.thing", what: "thing file", current: 3, oldest: 1, sealed_since: 2 };

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct Thing {
        schema: String,
        name: String,
        n: u64,
        #[serde(default)]
        tags: Vec<String>,
    }

    fn thing() -> Thing {
        Thing { schema: String::new(), name: "a \"quoted\" name".into(), n: 12_345, tags: vec!["x".into()] }
    }

    fn check(bytes: &[u8]) -> Result<Thing, ArtifactError> {
        let (doc, _) = THING.check("t.json", bytes)?;
        THING.typed("t.json", doc)
    }

    #[test]
    fn round_trip_sets_the_schema_and_the_seal() {
        let bytes = THING.to_bytes(&thing());
        let back = check(&bytes).unwrap();
        assert_eq!(back, Thing { schema: "deja.thing/3".into(), ..thing() });
        let doc: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(doc[SEAL_FIELD].as_str().unwrap().len(), 64);
    }

    #[test]
    fn floats_keep_their_seal() {
        #[derive(Serialize)]
        struct Rates {
            schema: String,
            rates: Vec<f64>,
        }
        let mut x = 0.1f64;
        let rates: Vec<f64> = (0..2000)
            .map(|i| {
                x = (x * 3.7 + 0.123_456_789) % 1000.0 + f64::from(i) * 1e-7;
                x
            })
            .collect();
        let bytes = THING.to_bytes(&Rates { schema: String::new(), rates });
        THING.check("t.json", &bytes).expect("every float reads back as written");
    }

    #[test]
    fn formatting_is_not_content() {
        let bytes = THING.to_bytes(&thing());
        let doc: Value = serde_json::from_slice(&bytes).unwrap();
        let compact = serde_json::to_vec(&doc).unwrap();
        assert_eq!(check(&compact).unwrap(), check(&bytes).unwrap());
    }

    #[test]
    fn every_flipped_bit_is_refused_or_changes_nothing() {
        let good = THING.to_bytes(&thing());
        let original = check(&good).unwrap();
        for at in 0..good.len() {
            for bit in 0..8 {
                let mut bad = good.clone();
                bad[at] ^= 1 << bit;
                match check(&bad) {
                    Err(e) => assert!(e.to_string().starts_with("t.json: the "), "{e}"),
                    Ok(t) => assert_eq!(t, original, "flip of bit {bit} at byte {at} changed the content"),
                }
            }
        }
        for len in 0..good.len() {
            let e = check(&good[..len]).unwrap_err();
            assert!(matches!(e.check(), "json" | "seal"), "truncated at {len}: {e}");
        }
    }

    #[test]
    fn versions_are_named() {
        let doc = |schema: &str, sealed: bool| {
            let mut v = serde_json::to_value(Thing { schema: schema.into(), ..thing() }).unwrap();
            if sealed {
                let s = seal_of(&v);
                v[SEAL_FIELD] = Value::String(s);
            }
            serde_json::to_vec(&v).unwrap()
        };
        let e = check(&doc("deja.thing/4", true)).unwrap_err();
        assert!(e.to_string().contains("is deja.thing/4, written by a newer deja"), "{e}");
        assert!(e.to_string().contains("reads deja.thing/1 to deja.thing/3"), "{e}");
        let e = check(&doc("deja.other/1", true)).unwrap_err();
        assert!(e.to_string().contains("this is not a thing file (its schema is deja.other/1"), "{e}");
        let e = check(&doc("deja.thing/02", true)).unwrap_err();
        assert_eq!(e.check(), "schema", "{e}");
        // Version 1 predates seals and still reads; version 2 needs one.
        assert_eq!(check(&doc("deja.thing/1", false)).unwrap().n, 12_345);
        let e = check(&doc("deja.thing/2", false)).unwrap_err();
        assert!(e.to_string().contains("a deja.thing/2 thing file carries a seal and this one has none"), "{e}");
        assert_eq!(check(&doc("deja.thing/2", true)).unwrap().n, 12_345);
        let old = Schema { oldest: 2, ..THING };
        let e = old.check("t.json", &doc("deja.thing/1", false)).unwrap_err();
        assert!(e.to_string().contains("which this deja no longer reads"), "{e}");
    }
}
