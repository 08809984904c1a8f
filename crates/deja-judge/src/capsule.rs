//! Capsules: a failure frozen so that it can be replayed against another binary by meaning.

use std::collections::BTreeMap;

use deja_explore::FailureSignature;
use deja_format::json::Schema;
use deja_kernel::FaultConfig;
use serde::{Deserialize, Serialize};

use crate::search::{CrashKind, KeptOps};
use crate::{CapsuleAlteredSnafu, JudgeError, ReadSnafu, WriteSnafu};
use snafu::{ensure, ResultExt};

/// Where, by meaning, the failure's crash happens.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Trigger {
    /// Name of the SDK event the crash follows (`request` when the program sends one).
    pub event: String,
    /// That event's details, as the program sent them (e.g. `{"amount":"25.00","id":"E1"}`).
    pub details: String,
    /// The crash comes right after this many durable writes counted from the event.
    pub durable_writes_after: u64,
}

/// The schema of capsules. A capsule is its own seal: its id is the BLAKE3 of its content.
pub const CAPSULE_SCHEMA: Schema =
    Schema { family: "deja.capsule", what: "capsule", current: 1, oldest: 1, sealed_since: u32::MAX };

/// A frozen failure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capsule {
    /// `deja.capsule/1`.
    pub schema: String,
    /// BLAKE3 (hex) of the capsule's canonical JSON without this field.
    pub id: String,
    /// The deja version that froze it.
    pub deja_version: String,
    /// BLAKE3 of the base program.
    pub base_blake3: String,
    /// The program's arguments (after argv[0]).
    pub args: Vec<String>,
    /// Its environment.
    pub env: Vec<String>,
    /// argv\[0\]: the program's path in the guest, or a name its root's `PATH` resolves (empty:
    /// `/bin/NAME`, as capsules of older deja had it).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub program: String,
    /// The starting working directory, when it is not `/` (an image's, or one given).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cwd: String,
    /// The base's inputs besides the program: its declared files (a dynamically linked
    /// program's loader and libraries) and root, by BLAKE3. A check refuses a base whose inputs
    /// differ.
    #[serde(default, skip_serializing_if = "deja_inputs::image::InputRecord::is_empty")]
    pub base_inputs: deja_inputs::image::InputRecord,
    /// The run's seed.
    pub seed: u64,
    /// Guest RAM in MiB.
    pub memory_mib: u64,
    /// The crash point on the base, by position (for the record).
    pub base_crash_after_durable_write: u64,
    /// The crash point by meaning.
    pub trigger: Trigger,
    /// The other faults of the failing run (torn or reordered writes at the crash).
    pub faults: FaultConfig,
    /// Decision overrides of the failing run.
    pub overrides: BTreeMap<u64, u64>,
    /// What failed.
    pub signature: FailureSignature,
    /// What happened, for a person.
    pub timeline: String,
    /// How the crash comes: after (the default, and all that capsules of older deja knew),
    /// before a durable write, at exit, or none (a placed error alone).
    #[serde(default, skip_serializing_if = "CrashKind::is_after")]
    pub crash: CrashKind,
    /// The pending operations the crash keeps, by meaning (`None`: the run's decisions choose,
    /// as `faults` allows).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept: Option<KeptOps>,
    /// The crash models that allow the base's crash state, weakest first (empty for a failure
    /// without a crash state, and in capsules of older deja). The model the check keeps to is
    /// `faults.crash_model`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<deja_kernel::CrashModel>,
    /// The CPU fingerprint of the host it was frozen on (absent in capsules of older deja).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<deja_vmm::Fingerprint>,
    /// The faults, overrides and reseed apply from the syscall after the program's
    /// `setup_complete`, as in the `deja explore` run it was frozen from (else from the start).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub at_setup: bool,
    /// From there on, every decision not overridden was drawn from this seed's stream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reseed: Option<u64>,
    /// How the check came by it: `bug 6d30994f6381`, minimized here or not.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub origin: String,
}

/// The last fields of a capsule's `faults` (a [`FaultConfig`]) that deja added after capsules were
/// first written, in their order, each as compact JSON with the value it holds when unset: the
/// fail-stop rule (2026-12-06, `auto`) and the failure marker (none). A capsule of an older deja
/// was hashed without those it did not know.
const LATER_FAULT_FIELDS: &[&str] = &[r#","fail_stop":"auto""#, r#","failure_marker":null"#];

impl Capsule {
    /// How its run is steered.
    pub fn steer(&self) -> crate::search::Steer {
        crate::search::Steer { at_setup: self.at_setup, overrides: self.overrides.clone(), reseed: self.reseed }
    }

    fn body_hash(&self) -> String {
        blake3::hash(&self.body_text()).to_hex().to_string()
    }

    /// The capsule without its id, as the id is the BLAKE3 of: compact JSON in field order.
    fn body_text(&self) -> Vec<u8> {
        let mut body = self.clone();
        body.id = String::new();
        serde_json::to_vec(&body).expect("plain data serializes")
    }

    /// True when `id` is the content address of this capsule as this deja writes it, or as an
    /// older deja wrote it: without the fields of `faults` added since ([`LATER_FAULT_FIELDS`]),
    /// when they hold their defaults.
    fn addressed_by(&self, id: &str) -> bool {
        let text = String::from_utf8(self.body_text()).expect("JSON is UTF-8");
        let matches = |t: &str| blake3::hash(t.as_bytes()).to_hex().as_str() == id;
        if matches(&text) {
            return true;
        }
        let all: String = LATER_FAULT_FIELDS.concat();
        let Some(at) = text.find(&format!("{all}}}")) else { return false };
        (0..LATER_FAULT_FIELDS.len()).any(|kept| {
            let older = format!("{}{}{}", &text[..at], LATER_FAULT_FIELDS[..kept].concat(), &text[at + all.len()..]);
            matches(&older)
        })
    }

    /// Fills in the content address.
    pub fn seal(mut self) -> Capsule {
        self.id = self.body_hash();
        self
    }

    /// Reads a capsule and refuses one whose content does not match its id.
    pub fn read(path: &std::path::Path) -> Result<Capsule, JudgeError> {
        let bytes = std::fs::read(path).context(ReadSnafu { path: path.display().to_string() })?;
        Capsule::parse(&path.display().to_string(), &bytes)
    }

    /// Checks the bytes of a capsule read from `path` (named in errors): json, schema, fields,
    /// and its content against its id.
    pub fn parse(path: &str, bytes: &[u8]) -> Result<Capsule, JudgeError> {
        let (doc, _) = CAPSULE_SCHEMA.check(path, bytes)?;
        let c: Capsule = CAPSULE_SCHEMA.typed(path, doc)?;
        ensure!(c.addressed_by(&c.id), CapsuleAlteredSnafu { path, id: &c.id });
        Ok(c)
    }

    /// Writes the capsule atomically.
    pub fn write(&self, path: &std::path::Path) -> Result<(), JudgeError> {
        let bytes = serde_json::to_vec_pretty(self).expect("plain data serializes");
        deja_format::write_atomic(path, &bytes).context(WriteSnafu { path: path.display().to_string() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn capsule() -> Capsule {
        Capsule {
            schema: CAPSULE_SCHEMA.id(),
            id: String::new(),
            deja_version: "0.1.0".into(),
            base_blake3: "ab".repeat(32),
            args: vec!["6".into()],
            env: vec![],
            program: String::new(),
            cwd: String::new(),
            base_inputs: Default::default(),
            seed: 1,
            memory_mib: 256,
            base_crash_after_durable_write: 0,
            trigger: Trigger { event: String::new(), details: String::new(), durable_writes_after: 0 },
            faults: FaultConfig::default(),
            overrides: BTreeMap::new(),
            signature: "exit code 1".into(),
            timeline: "FAILED: exit code 1".into(),
            crash: CrashKind::None,
            kept: None,
            models: vec![],
            host: None,
            at_setup: false,
            reseed: None,
            origin: String::new(),
        }
    }

    /// The bytes a capsule had when an older deja wrote it: its faults without the fields added
    /// since (the last `dropped` of them), its id the BLAKE3 of that body.
    fn as_older_deja_wrote_it(c: &Capsule, dropped: usize) -> Vec<u8> {
        let text = String::from_utf8(c.body_text()).unwrap();
        let gone: String = LATER_FAULT_FIELDS[LATER_FAULT_FIELDS.len() - dropped..].concat();
        let body = text.replacen(&format!("{gone}}}"), "}", 1);
        assert_ne!(body, text, "the fields were there to drop");
        let id = blake3::hash(body.as_bytes()).to_hex().to_string();
        let mut doc: serde_json::Value = serde_json::from_str(&body).unwrap();
        doc["id"] = id.into();
        serde_json::to_vec_pretty(&doc).unwrap()
    }

    #[test]
    fn capsules_of_this_and_older_deja_are_read_and_an_altered_one_is_refused() {
        let c = capsule().seal();
        let bytes = serde_json::to_vec_pretty(&c).unwrap();
        assert_eq!(Capsule::parse("c.json", &bytes).unwrap(), c);
        for dropped in 1..=LATER_FAULT_FIELDS.len() {
            let older = as_older_deja_wrote_it(&c, dropped);
            let back = Capsule::parse("older.json", &older).unwrap_or_else(|e| panic!("{dropped} dropped: {e}"));
            assert_eq!(back.faults, FaultConfig::default(), "the fields it did not know hold their defaults");
        }
        // A later field that is not at its default was part of the body: dropping it is an
        // alteration.
        let mut marked = capsule();
        marked.faults.failure_marker = Some("VIOLATION:".into());
        let marked = marked.seal();
        let mut doc: serde_json::Value = serde_json::to_value(&marked).unwrap();
        doc["faults"]["failure_marker"] = serde_json::Value::Null;
        let e = Capsule::parse("m.json", &serde_json::to_vec(&doc).unwrap()).unwrap_err().to_string();
        assert!(e.contains("altered"), "{e}");
        let mut doc: serde_json::Value = serde_json::to_value(&c).unwrap();
        doc["seed"] = 2.into();
        assert!(Capsule::parse("s.json", &serde_json::to_vec(&doc).unwrap()).is_err());
    }
}
