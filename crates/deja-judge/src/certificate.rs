//! Certificates: every check of a `deja check`, its inputs and outputs, chained by BLAKE3.

use deja_format::json::Schema;
use serde::{Deserialize, Serialize};

use crate::verdict::Verdict;
use crate::{ChainBrokenSnafu, JudgeError, ReadSnafu, SummaryAlteredSnafu, UnearnedPassSnafu, WriteSnafu};
use snafu::{ensure, ResultExt};

/// What happened to one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckStatus {
    /// It ran and held.
    Passed,
    /// It ran and failed.
    Failed,
    /// It could not run or its evidence is missing.
    Incomplete,
    /// An earlier result made it unnecessary or impossible.
    NotRun,
}

/// One check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckRecord {
    /// What was checked.
    pub name: String,
    /// The result.
    pub status: CheckStatus,
    /// What it showed, in words.
    pub detail: String,
    /// Digests of the runs it made (over every life of each).
    pub digests: Vec<String>,
    /// Hash of the previous record (or of the certificate's header for the first).
    pub prev: String,
    /// BLAKE3 of `prev` and this record's other fields.
    pub hash: String,
}

/// The schema of certificates. A certificate is its own seal: a BLAKE3 chain over its header,
/// every check and the verdict ([`Certificate::verify`]).
pub const CERTIFICATE_SCHEMA: Schema =
    Schema { family: "deja.certificate", what: "certificate", current: 1, oldest: 1, sealed_since: u32::MAX };

/// The certificate of a check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Certificate {
    /// `deja.certificate/1`.
    pub schema: String,
    /// The deja version.
    pub deja_version: String,
    /// The capsule judged against.
    pub capsule_id: String,
    /// BLAKE3 of the base program.
    pub base_blake3: String,
    /// BLAKE3 of the candidate program.
    pub candidate_blake3: String,
    /// The base's inputs besides the program (declared files, root) by BLAKE3; part of the
    /// chain's header when there are any.
    #[serde(default, skip_serializing_if = "deja_inputs::image::InputRecord::is_empty")]
    pub base_inputs: deja_inputs::image::InputRecord,
    /// The candidate's, the same way.
    #[serde(default, skip_serializing_if = "deja_inputs::image::InputRecord::is_empty")]
    pub candidate_inputs: deja_inputs::image::InputRecord,
    /// The CPU fingerprint of the host the checks ran on (absent in certificates of older deja);
    /// part of the chain's header.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<deja_vmm::Fingerprint>,
    /// The crash model every crash of the checks kept to (absent without a capsule, and in
    /// certificates of older deja); part of the chain's header.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crash_model: Option<deja_kernel::CrashModel>,
    /// The fail-stop rule every stop after an injected error was judged by (absent without a
    /// capsule, and in certificates of older deja); part of the chain's header.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fail_stop: Option<deja_kernel::FailStopMode>,
    /// The crash models that allow the capsule's crash state on the base, weakest first: the
    /// strongest is what the bug is a bug on. Part of the chain's header.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<deja_kernel::CrashModel>,
    /// Every check, in order.
    pub checks: Vec<CheckRecord>,
    /// The verdict (before [`Certificate::seal`]: `EVIDENCE_INCOMPLETE`).
    pub verdict: Verdict,
    /// The exit code that goes with it.
    pub exit_code: i32,
    /// What happened on the candidate, for a person.
    pub timeline: String,
    /// BLAKE3 over the last check's hash, the verdict and the exit code.
    pub certificate_hash: String,
}

fn header_hash(c: &Certificate) -> String {
    let mut h = blake3::Hasher::new();
    for part in [&c.schema, &c.deja_version, &c.capsule_id, &c.base_blake3, &c.candidate_blake3] {
        h.update(part.as_bytes());
        h.update(&[0]);
    }
    // Absent in certificates of older deja, and then not hashed, so that theirs still verify.
    for (tag, inputs) in [(2u8, &c.base_inputs), (3u8, &c.candidate_inputs)] {
        if !inputs.is_empty() {
            h.update(&[tag]);
            h.update(serde_json::to_string(inputs).expect("plain data serializes").as_bytes());
            h.update(&[0]);
        }
    }
    if let Some(host) = &c.host {
        h.update(serde_json::to_string(host).expect("plain data serializes").as_bytes());
        h.update(&[0]);
    }
    if let Some(model) = c.crash_model {
        h.update(model.name().as_bytes());
        h.update(&[0]);
    }
    if let Some(mode) = &c.fail_stop {
        h.update(&[4]);
        h.update(mode.words().as_bytes());
        h.update(&[0]);
    }
    for model in &c.models {
        h.update(model.name().as_bytes());
        h.update(&[1]);
    }
    h.finalize().to_hex().to_string()
}

fn record_hash(r: &CheckRecord) -> String {
    let body = serde_json::json!({
        "name": r.name, "status": r.status, "detail": r.detail, "digests": r.digests, "prev": r.prev,
    });
    blake3::hash(body.to_string().as_bytes()).to_hex().to_string()
}

fn final_hash(c: &Certificate) -> String {
    let last = c.checks.last().map(|r| r.hash.clone()).unwrap_or_else(|| header_hash(c));
    let mut h = blake3::Hasher::new();
    h.update(last.as_bytes());
    h.update(c.verdict.name().as_bytes());
    h.update(&c.exit_code.to_le_bytes());
    h.update(c.timeline.as_bytes());
    h.finalize().to_hex().to_string()
}

impl Certificate {
    /// An empty certificate.
    pub fn new(capsule_id: &str, base: &str, candidate: &str) -> Certificate {
        Certificate {
            schema: CERTIFICATE_SCHEMA.id(),
            deja_version: env!("CARGO_PKG_VERSION").into(),
            capsule_id: capsule_id.into(),
            base_blake3: base.into(),
            candidate_blake3: candidate.into(),
            base_inputs: Default::default(),
            candidate_inputs: Default::default(),
            host: None,
            crash_model: None,
            fail_stop: None,
            models: Vec::new(),
            checks: Vec::new(),
            verdict: Verdict::EvidenceIncomplete,
            exit_code: 2,
            timeline: String::new(),
            certificate_hash: String::new(),
        }
    }

    /// Appends a check, chained to the previous one.
    pub fn push(&mut self, name: &str, status: CheckStatus, detail: String, digests: Vec<String>) {
        let prev = self.checks.last().map(|r| r.hash.clone()).unwrap_or_else(|| header_hash(self));
        let mut r = CheckRecord { name: name.into(), status, detail, digests, prev, hash: String::new() };
        r.hash = record_hash(&r);
        self.checks.push(r);
    }

    /// Seals the certificate with its verdict and the verdict's exit code.
    pub fn seal(&mut self, verdict: Verdict, timeline: String) {
        self.verdict = verdict;
        self.exit_code = verdict.exit_code();
        self.timeline = timeline;
        self.certificate_hash = final_hash(self);
    }

    /// Re-checks the whole chain; refuses any edit.
    pub fn verify(&self) -> Result<(), JudgeError> {
        CERTIFICATE_SCHEMA.version("the certificate", &self.schema)?;
        let mut prev = header_hash(self);
        for (i, r) in self.checks.iter().enumerate() {
            ensure!(r.prev == prev && record_hash(r) == r.hash, ChainBrokenSnafu { number: i + 1, name: &r.name });
            prev = r.hash.clone();
        }
        ensure!(final_hash(self) == self.certificate_hash, SummaryAlteredSnafu);
        let executed = self.checks.iter().filter(|r| r.status == CheckStatus::Passed).count();
        let all_passed = self.checks.iter().all(|r| r.status == CheckStatus::Passed);
        ensure!(
            !(self.verdict == Verdict::FixedForThisCapsule && (executed == 0 || !all_passed || self.exit_code != 0)),
            UnearnedPassSnafu
        );
        Ok(())
    }

    /// Reads a certificate: its json, schema and fields checks ([`Certificate::verify`] checks
    /// its chain).
    pub fn read(path: &std::path::Path) -> Result<Certificate, JudgeError> {
        let bytes = std::fs::read(path).context(ReadSnafu { path: path.display().to_string() })?;
        Certificate::parse(&path.display().to_string(), &bytes)
    }

    /// Checks the bytes of a certificate read from `path` (named in errors): json, schema and
    /// fields.
    pub fn parse(path: &str, bytes: &[u8]) -> Result<Certificate, JudgeError> {
        let (doc, _) = CERTIFICATE_SCHEMA.check(path, bytes)?;
        Ok(CERTIFICATE_SCHEMA.typed(path, doc)?)
    }

    /// Writes it atomically.
    pub fn write(&self, path: &std::path::Path) -> Result<(), JudgeError> {
        let bytes = serde_json::to_vec_pretty(self).expect("plain data serializes");
        deja_format::write_atomic(path, &bytes).context(WriteSnafu { path: path.display().to_string() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Certificate {
        let mut c = Certificate::new("cap", "base", "cand");
        c.push("one", CheckStatus::Passed, "ok".into(), vec!["d1".into()]);
        c.push("two", CheckStatus::Passed, "ok".into(), vec![]);
        c.seal(Verdict::FixedForThisCapsule, "a → b".into());
        c
    }

    #[test]
    fn a_sealed_certificate_verifies_and_any_edit_breaks_it() {
        sample().verify().unwrap();
        type Edit = Box<dyn Fn(&mut Certificate)>;
        let edits: Vec<Edit> = vec![
            Box::new(|c| c.checks[0].status = CheckStatus::Failed),
            Box::new(|c| c.checks[1].detail.push('!')),
            Box::new(|c| c.checks[0].digests.clear()),
            Box::new(|c| c.verdict = Verdict::StillReproduces),
            Box::new(|c| c.exit_code = 1),
            Box::new(|c| c.candidate_blake3 = "other".into()),
            Box::new(|c| {
                c.host = Some(deja_vmm::Fingerprint {
                    id: "0".repeat(16),
                    remedy: deja_vmm::Remedy {
                        cpuid: deja_vmm::identity::CpuidSource::Faulting,
                        pinned_core: None,
                        rewrite: false,
                        vdso: true,
                    },
                    cpuid_blake3: String::new(),
                    xcr0: 7,
                    rdtsc_trapped: true,
                    core_number_visible: false,
                    rewrite_rules: 0,
                })
            }),
            Box::new(|c| {
                c.checks.remove(0);
            }),
        ];
        for edit in edits {
            let mut c = sample();
            edit(&mut c);
            assert!(c.verify().is_err());
        }
    }

    #[test]
    fn verdicts_are_written_by_their_stable_names_and_unknown_ones_are_refused() {
        use Verdict::*;
        for v in [FixedForThisCapsule, StillReproduces, NewFailure, EvidenceIncomplete, NotFaultInduced] {
            assert_eq!(serde_json::to_string(&v).unwrap(), format!("\"{}\"", v.name()));
            assert_eq!(serde_json::from_str::<Verdict>(&format!("\"{v}\"")).unwrap(), v);
        }
        let mut v = serde_json::to_value(sample()).unwrap();
        v["verdict"] = "FIXED".into();
        assert!(serde_json::from_value::<Certificate>(v).is_err(), "a verdict deja does not know");
    }

    #[test]
    fn zero_checks_is_never_a_pass() {
        let mut c = Certificate::new("cap", "base", "cand");
        c.seal(Verdict::FixedForThisCapsule, String::new());
        assert!(c.verify().is_err());
        let mut c = Certificate::new("cap", "base", "cand");
        c.push("sweep", CheckStatus::NotRun, "skipped".into(), vec![]);
        c.seal(Verdict::FixedForThisCapsule, String::new());
        assert!(c.verify().is_err());
    }
}
