//! Saving and restoring the kernel state (snapshots and in-memory forks): the contract every
//! saved part implements.
//!
//! Owns the [`Persist`] trait, [`RestoreError`] and the serde helpers below. Uses nothing of the
//! crate but the root's [`ExitStatus`] and [`FaultInfo`](crate::FaultInfo): every room with
//! saved state uses it, and [`Kernel::save`](crate::Kernel::save) and
//! [`Kernel::restore`](crate::Kernel::restore), in [`crate::kernel`], put the parts together.
//!
//! The state is made of parts, each saved and restored on its own through [`Persist`], in
//! this order: the process ([`Process`](crate::task::process::Process)), its files
//! ([`Files`](crate::files::Files)), its I/O objects ([`Net`](crate::net::Net)), the threads
//! and the clock ([`Sched`](crate::task::sched::Sched)), the record of the run
//! ([`RunRecord`](crate::record::RunRecord)), the assertion oracle
//! ([`Oracle`](crate::record::oracle::Oracle)), the fault state and the decision log
//! ([`FaultState`](crate::faults::FaultState)), the program's random stream
//! ([`RandomStream`](crate::decisions::rng::RandomStream)), the processes
//! ([`Procs`](crate::task::procs::Procs)) and the paths looked for and not found
//! ([`Lookups`](crate::record::not_found::Lookups)). The last part is optional, so the states
//! saved before it existed still restore: a part added to the state goes last, and is
//! optional in the same way. A part's bytes are the `postcard`
//! encoding of its structs, whose field order is the encoding: every struct derives
//! `Serialize`/`Deserialize` and fields are written in declaration order, so **reordering,
//! adding or removing a field of a saved struct changes the format**.
//! [`Kernel::save`](crate::Kernel::save) writes each part's bytes as a postcard byte string,
//! in that order. The bytes carry no version: the caller wraps them in an envelope that
//! carries the schema version. [`Kernel::restore`](crate::Kernel::restore) restores each part
//! ([`Persist::restore`]: it decodes the part, refuses bytes after it and checks the
//! invariants the syscall code relies on, given what it needs from the parts before it), so
//! hostile or damaged bytes give a [`RestoreError`] and never a panic, neither while
//! restoring nor in the syscalls that follow.
//!
//! This module also holds the serde helpers the derives need: byte blobs behind `Arc<[u8]>`
//! (written as postcard byte strings, one copy per holder: a declared file that is also open
//! or mapped is written once per holder, and [`Kernel::restore`](crate::Kernel::restore)
//! shares equal contents again), arrays longer than serde's 32-element limit, and
//! [`ExitStatus`] (its JSON form is internally tagged, which postcard cannot decode).

use crate::prelude::*;
use alloc::sync::Arc;
use core::fmt;
use core::marker::PhantomData;

use serde::de::{self, DeserializeOwned, SeqAccess, Visitor};
use serde::ser::SerializeTuple;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use snafu::{ResultExt as _, Snafu};

use crate::{ExitStatus, FaultInfo};

/// Why saved kernel state could not be restored.
#[derive(Debug, Clone, PartialEq, Eq, Snafu)]
#[snafu(visibility(pub(crate)))]
pub enum RestoreError {
    /// The bytes are not a postcard encoding of the kernel state (truncated, damaged, or from
    /// another schema version).
    #[snafu(display("kernel state is corrupt: {source}"))]
    Decode {
        /// What postcard could not decode.
        source: postcard::Error,
    },
    /// The state decodes but bytes follow it.
    #[snafu(display("kernel state is corrupt: {count} bytes after the end of the state"))]
    TrailingBytes {
        /// How many.
        count: usize,
    },
    /// The bytes decode but describe a state the kernel can never be in.
    #[snafu(display("kernel state is inconsistent: {what}"))]
    Invalid {
        /// Which invariant does not hold.
        what: String,
    },
}

/// Fails with [`RestoreError::Invalid`] carrying `msg` unless `ok`.
pub(crate) fn ensure(ok: bool, msg: impl FnOnce() -> String) -> Result<(), RestoreError> {
    snafu::ensure!(ok, InvalidSnafu { what: msg() });
    Ok(())
}

/// A part of the kernel state that saves and restores itself: its bytes are the `postcard`
/// encoding of its fields, and restoring checks them, so that damaged or hostile bytes give a
/// [`RestoreError`], never a panic.
pub(crate) trait Persist: Serialize + DeserializeOwned {
    /// What the checks need from the other parts of the state (such as the number of
    /// syscalls in the trace).
    type Context;

    /// Checks the invariants the syscall code relies on.
    fn validate(&self, context: &Self::Context) -> Result<(), RestoreError>;

    /// The part as bytes (no header, no version).
    fn save(&self) -> Vec<u8> {
        // Every saved type has a known length and no `serialize_any`; postcard only fails on
        // those (or on a full fixed buffer, and `to_allocvec` grows).
        postcard::to_allocvec(self).expect("postcard encodes every part of the kernel state")
    }

    /// Rebuilds the part from [`Persist::save`] output: decodes it, refuses bytes after its
    /// end and checks it.
    fn restore(bytes: &[u8], context: &Self::Context) -> Result<Self, RestoreError> {
        let (part, rest) = postcard::take_from_bytes::<Self>(bytes).context(DecodeSnafu)?;
        snafu::ensure!(rest.is_empty(), TrailingBytesSnafu { count: rest.len() });
        part.validate(context)?;
        Ok(part)
    }
}

/// A byte string, written with `serialize_bytes`.
pub(crate) struct RawBytes<'a>(pub(crate) &'a [u8]);

impl Serialize for RawBytes<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(self.0)
    }
}

/// A byte string read back into a fresh `Arc<[u8]>`.
struct ArcBytes(Arc<[u8]>);

impl<'de> Deserialize<'de> for ArcBytes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ArcBytes;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a byte string")
            }
            fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<ArcBytes, E> {
                Ok(ArcBytes(Arc::from(v)))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ArcBytes, A::Error> {
                let mut v = Vec::new();
                while let Some(b) = seq.next_element::<u8>()? {
                    v.push(b);
                }
                Ok(ArcBytes(Arc::from(v)))
            }
        }
        d.deserialize_bytes(V)
    }
}

/// `#[serde(with = "arc_bytes")]` for an `Arc<[u8]>` field.
pub(crate) mod arc_bytes {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(v: &Arc<[u8]>, s: S) -> Result<S::Ok, S::Error> {
        RawBytes(v).serialize(s)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Arc<[u8]>, D::Error> {
        ArcBytes::deserialize(d).map(|b| b.0)
    }
}

/// `#[serde(with = "vec_bytes")]` for a `Vec<u8>` field (a byte string, not a sequence).
pub(crate) mod vec_bytes {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        RawBytes(v).serialize(s)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        ArcBytes::deserialize(d).map(|b| b.0.to_vec())
    }
}

/// `#[serde(with = "arc_bytes_map")]` for a `BTreeMap<String, Arc<[u8]>>` field.
#[cfg(test)]
pub(crate) mod arc_bytes_map {
    use super::*;
    use alloc::collections::BTreeMap;

    pub(crate) fn serialize<S: Serializer>(v: &BTreeMap<String, Arc<[u8]>>, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(v.iter().map(|(k, b)| (k, RawBytes(b))))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, Arc<[u8]>>, D::Error> {
        let m = BTreeMap::<String, ArcBytes>::deserialize(d)?;
        Ok(m.into_iter().map(|(k, b)| (k, b.0)).collect())
    }
}

/// `#[serde(with = "array")]` for a `[T; N]` field of any length (serde stops at 32), written
/// as a tuple of `N` elements (no length prefix).
pub(crate) mod array {
    use super::*;

    pub(crate) fn serialize<S: Serializer, T: Serialize, const N: usize>(v: &[T; N], s: S) -> Result<S::Ok, S::Error> {
        let mut t = s.serialize_tuple(N)?;
        for e in v {
            t.serialize_element(e)?;
        }
        t.end()
    }

    pub(crate) fn deserialize<'de, D, T, const N: usize>(d: D) -> Result<[T; N], D::Error>
    where
        D: Deserializer<'de>,
        T: Deserialize<'de>,
    {
        struct V<T, const N: usize>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>, const N: usize> Visitor<'de> for V<T, N> {
            type Value = [T; N];
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "an array of {N} elements")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<[T; N], A::Error> {
                let mut v = Vec::with_capacity(N);
                for i in 0..N {
                    v.push(seq.next_element()?.ok_or_else(|| de::Error::invalid_length(i, &self))?);
                }
                v.try_into().map_err(|_| de::Error::invalid_length(N, &self))
            }
        }
        d.deserialize_tuple(N, V::<T, N>(PhantomData))
    }
}

/// [`ExitStatus`] as postcard can decode it (externally tagged, by variant index).
#[derive(Serialize, Deserialize)]
enum ExitRepr {
    Exited(i32),
    Signaled(i32, String, Option<FaultInfo>),
}

/// `#[serde(with = "exit_status")]` for an `Option<ExitStatus>` field.
pub(crate) mod exit_status {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(v: &Option<ExitStatus>, s: S) -> Result<S::Ok, S::Error> {
        let r = v.as_ref().map(|st| match st {
            ExitStatus::Exited { code } => ExitRepr::Exited(*code),
            ExitStatus::Signaled { signal, name, fault } => ExitRepr::Signaled(*signal, name.clone(), fault.clone()),
        });
        r.serialize(s)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<ExitStatus>, D::Error> {
        Ok(Option::<ExitRepr>::deserialize(d)?.map(|r| match r {
            ExitRepr::Exited(code) => ExitStatus::Exited { code },
            ExitRepr::Signaled(signal, name, fault) => ExitStatus::Signaled { signal, name, fault },
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::collections::BTreeMap;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Sample {
        #[serde(with = "arc_bytes")]
        blob: Arc<[u8]>,
        #[serde(with = "arc_bytes_map")]
        files: BTreeMap<String, Arc<[u8]>>,
        #[serde(with = "array")]
        big: [[u64; 2]; 40],
        #[serde(with = "exit_status")]
        exit: Option<ExitStatus>,
    }

    #[test]
    fn helpers_round_trip() {
        let mut files = BTreeMap::new();
        files.insert("/a".to_string(), Arc::from(&b"xyz"[..]));
        files.insert("/b".to_string(), Arc::from(&[][..]));
        let mut big = [[0u64; 2]; 40];
        big[39] = [u64::MAX, 7];
        let fault = FaultInfo { description: "d".into(), vector: 14, rip: 1, addr: Some(2) };
        for exit in [
            None,
            Some(ExitStatus::Exited { code: 3 }),
            Some(ExitStatus::Signaled { signal: 11, name: "SIGSEGV".into(), fault: Some(fault.clone()) }),
        ] {
            let s = Sample { blob: Arc::from(&b"hello"[..]), files: files.clone(), big, exit };
            let bytes = postcard::to_stdvec(&s).unwrap();
            assert_eq!(postcard::from_bytes::<Sample>(&bytes).unwrap(), s);
            for n in 0..bytes.len() {
                assert!(postcard::from_bytes::<Sample>(&bytes[..n]).is_err(), "truncated at {n}");
            }
        }
    }
}
