//! The verdict of a check: what `deja check` concludes, the exit code it gives, and the name
//! certificates record.

/// The verdict of a check; in files, its [stable name](Verdict::name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Verdict {
    /// The candidate survives the capsule and a crash at every durable write.
    FixedForThisCapsule,
    /// The capsule's failure happens on the candidate too.
    StillReproduces,
    /// The candidate fails in another way.
    NewFailure,
    /// Some evidence is missing: nothing is concluded.
    EvidenceIncomplete,
    /// The base fails without any fault: the failure is not fault-induced.
    NotFaultInduced,
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Verdict {
    /// The stable name.
    pub fn name(self) -> &'static str {
        match self {
            Verdict::FixedForThisCapsule => "FIXED_FOR_THIS_CAPSULE",
            Verdict::StillReproduces => "STILL_REPRODUCES",
            Verdict::NewFailure => "NEW_FAILURE",
            Verdict::EvidenceIncomplete => "EVIDENCE_INCOMPLETE",
            Verdict::NotFaultInduced => "NOT_FAULT_INDUCED",
        }
    }

    /// The exit code `deja check` gives it (and the certificate records): 0 fixed, 1 still
    /// reproduces or new failure, 3 incomplete evidence or not fault-induced (2 is a bad
    /// command line).
    pub fn exit_code(self) -> i32 {
        match self {
            Verdict::FixedForThisCapsule => 0,
            Verdict::StillReproduces | Verdict::NewFailure => 1,
            Verdict::EvidenceIncomplete | Verdict::NotFaultInduced => 3,
        }
    }
}
