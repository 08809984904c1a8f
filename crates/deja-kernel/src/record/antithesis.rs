//! The Antithesis SDKs' JSON messages, read as deja's own protocol requests.
//!
//! A program instrumented with an Antithesis SDK (Go, Java, C, C++, JavaScript, Python, Rust,
//! .NET) that finds no `/usr/lib/libvoidstar.so` writes each message as one line of JSON to the
//! file `ANTITHESIS_SDK_LOCAL_OUTPUT` names. deja names a device there (see
//! [`crate::fs::Inputs::sdk_output`]) whose writes come here: each line is one message, parsed
//! by [`parse`] into the [`Message`]s the kernel serves as it serves the deja syscall's
//! `Catalog`, `Assert`, `SetupComplete` and `Event` requests.
//!
//! Owns [`Message`] and [`parse`]; uses only [`deja_protocol`]'s assertion kinds and limits.
//! Pure: no kernel state. Public so that the parser of these untrusted bytes is fuzzed alone
//! (`fuzz/fuzz_targets/sdk_messages.rs`).
//!
//! The messages (protocol 1.x of the SDKs):
//! - `{"antithesis_assert": {...}}`: `assert_type` (`always`, `sometimes`, `reachability`) and
//!   `must_hit` give the kind (always + must_hit: `always`; always without: `always_or_unreachable`;
//!   `sometimes`; reachability + must_hit: `reachable`; reachability without: `unreachable`);
//!   `hit: false` is the site's catalog entry, `hit: true` an evaluation whose `condition` says
//!   whether it held; `id` names the site, `message` and `location.file`/`begin_line` describe it,
//!   `details` is any JSON value.
//! - `{"antithesis_setup": {"status": "complete", "details": ...}}`: setup is complete.
//! - `{"antithesis_guidance": {...}}`, a guidepost's value (`guidance_type` numeric with
//!   `guidance_data` `{left, right}`, or boolean with named booleans; `maximize` says which way
//!   is progress): with `hit: true`, kept as an event named [`GUIDANCE_EVENT`], its value the
//!   details, which the explorer reads; the catalog entry (`hit: false`) is read and not used.
//! - `{"antithesis_sdk": ...}` (the SDK's language and version): read and not used.
//! - Any other key: a user event named by the key, its value the details.

use crate::prelude::*;

use deja_protocol::{AssertKind, MAX_DETAILS, MAX_TEXT};
use serde_json::Value;

/// The name of the events that carry the SDKs' guidance (`antithesis_guidance` messages).
pub const GUIDANCE_EVENT: &str = "antithesis_guidance";

/// One message of an Antithesis SDK.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// An assertion's catalog entry (`hit` false) or evaluation.
    Assert {
        /// The site's id in deja's catalog (from the SDK's `id`, see [`site_id`]).
        id: u64,
        /// Its kind.
        kind: AssertKind,
        /// Whether this is an evaluation (not the catalog entry).
        hit: bool,
        /// Whether the condition held.
        condition: bool,
        /// The assertion's message.
        message: String,
        /// Source file.
        file: String,
        /// Source line.
        line: u32,
        /// The details, as compact JSON (empty for `null`).
        details: String,
    },
    /// `setup_complete`, with its details.
    Setup(String),
    /// A user event: its name and details.
    Event(String, String),
    /// A message read and not used (the SDK's version, guidance).
    Ignored,
}

/// The variable the SDKs read for the file to write their messages to.
pub const LOCAL_OUTPUT: &str = "ANTITHESIS_SDK_LOCAL_OUTPUT";

/// Where deja puts the device when it sets [`LOCAL_OUTPUT`] itself.
pub const DEFAULT_OUTPUT: &str = "/dev/antithesis-sdk.jsonl";

/// The absolute path the environment's last `ANTITHESIS_SDK_LOCAL_OUTPUT` names, if any: where
/// the run's device for the SDKs' messages goes (a relative path names none).
pub fn output_path(env: &[String]) -> Option<&str> {
    env.iter()
        .rev()
        .find_map(|e| e.strip_prefix(LOCAL_OUTPUT).and_then(|r| r.strip_prefix('=')))
        .filter(|p| p.starts_with('/'))
}

/// The catalog id of the Antithesis site named `id` with `kind`: deja's site id over the file
/// name `antithesis` and the SDK's id as the message, so it cannot meet a deja SDK site's.
pub fn site_id(kind: AssertKind, id: &str) -> u64 {
    deja_protocol::site_id(kind as u32, "antithesis", 0, id)
}

/// Parses one line (one JSON object) into its messages, one per top-level key; `None` when the
/// line is not a JSON object or an `antithesis_assert` lacks what it needs.
pub fn parse(line: &[u8]) -> Option<Vec<Message>> {
    let Ok(Value::Object(map)) = serde_json::from_slice::<Value>(line) else { return None };
    map.iter()
        .map(|(key, value)| match key.as_str() {
            "antithesis_assert" => assertion(value),
            "antithesis_setup" => Some(Message::Setup(details(value.get("details")))),
            "antithesis_guidance" if value.get("hit").and_then(Value::as_bool) == Some(true) => {
                Some(Message::Event(GUIDANCE_EVENT.into(), details(Some(value))))
            }
            "antithesis_sdk" | "antithesis_guidance" => Some(Message::Ignored),
            name => Some(Message::Event(clip(name, MAX_DETAILS), details(Some(value)))),
        })
        .collect()
}

fn assertion(v: &Value) -> Option<Message> {
    let must_hit = v.get("must_hit")?.as_bool()?;
    let kind = match (v.get("assert_type")?.as_str()?, must_hit) {
        ("always", true) => AssertKind::Always,
        ("always", false) => AssertKind::AlwaysOrUnreachable,
        ("sometimes", _) => AssertKind::Sometimes,
        ("reachability", true) => AssertKind::Reachable,
        ("reachability", false) => AssertKind::Unreachable,
        _ => return None,
    };
    let text = |k: &str| v.get(k).and_then(Value::as_str);
    let message = clip(text("message").unwrap_or(""), MAX_TEXT);
    let sdk_id = text("id").map(|s| clip(s, MAX_TEXT)).unwrap_or_else(|| message.clone());
    let location = v.get("location");
    let file = location.and_then(|l| l.get("file")).and_then(Value::as_str).unwrap_or("");
    let line = location.and_then(|l| l.get("begin_line")).and_then(Value::as_u64).unwrap_or(0);
    Some(Message::Assert {
        id: site_id(kind, &sdk_id),
        kind,
        hit: v.get("hit")?.as_bool()?,
        condition: v.get("condition").and_then(Value::as_bool).unwrap_or(false),
        message,
        file: clip(file, MAX_TEXT),
        line: u32::try_from(line).unwrap_or(u32::MAX),
        details: details(v.get("details")),
    })
}

/// A details value as compact JSON text, at most [`MAX_DETAILS`] bytes; `null` or absent: empty.
fn details(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => String::new(),
        Some(v) => clip(&serde_json::to_string(v).unwrap_or_default(), MAX_DETAILS),
    }
}

/// `s` cut to at most `max` bytes, at a character boundary.
fn clip(s: &str, max: usize) -> String {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lines the published Rust SDK (0.3) writes for one `assert_always!` site: its
    /// catalog entry, then a failing evaluation.
    const CATALOG: &str = r#"{"antithesis_assert":{"assert_type":"always","display_type":"Always","condition":false,"message":"Never extra votes","location":{"class":"mycrate::stuff","function":"mycrate::tally_vote","file":"src/voting.rs","begin_line":20,"begin_column":3},"hit":false,"must_hit":true,"id":"Never extra votes","details":null}}"#;
    const FAILED: &str = r#"{"antithesis_assert":{"assert_type":"always","display_type":"Always","condition":false,"message":"Never extra votes","location":{"class":"mycrate::stuff","function":"mycrate::tally_vote","file":"src/voting.rs","begin_line":20,"begin_column":3},"hit":true,"must_hit":true,"id":"Never extra votes","details":{"voters":3,"votes":4}}}"#;

    #[test]
    fn an_sdk_assertion_is_a_catalog_entry_then_an_evaluation_of_the_same_site() {
        let catalog = parse(CATALOG.as_bytes()).expect("a message");
        let [Message::Assert { id, kind, hit: false, message, file, line, details, .. }] = catalog.as_slice() else {
            panic!("{catalog:?}")
        };
        assert_eq!(
            (*kind, message.as_str(), file.as_str(), *line),
            (AssertKind::Always, "Never extra votes", "src/voting.rs", 20)
        );
        assert_eq!(details, "");
        let failed = parse(FAILED.as_bytes()).expect("a message");
        let [Message::Assert { id: again, hit: true, condition: false, details, .. }] = failed.as_slice() else {
            panic!("{failed:?}")
        };
        assert_eq!(id, again);
        assert_eq!(details, r#"{"voters":3,"votes":4}"#);
    }

    #[test]
    fn assert_type_and_must_hit_give_the_kind() {
        for (t, must, want) in [
            ("always", true, AssertKind::Always),
            ("always", false, AssertKind::AlwaysOrUnreachable),
            ("sometimes", true, AssertKind::Sometimes),
            ("reachability", true, AssertKind::Reachable),
            ("reachability", false, AssertKind::Unreachable),
        ] {
            let line = format!(
                r#"{{"antithesis_assert":{{"assert_type":"{t}","must_hit":{must},"hit":true,"condition":true,"message":"m","id":"m"}}}}"#
            );
            match parse(line.as_bytes()).as_deref() {
                Some([Message::Assert { kind, .. }]) => assert_eq!(*kind, want, "{t} {must}"),
                other => panic!("{t} {must}: {other:?}"),
            }
        }
        // The same id under two kinds is two sites.
        assert_ne!(site_id(AssertKind::Always, "m"), site_id(AssertKind::Sometimes, "m"));
    }

    #[test]
    fn setup_events_and_the_sdks_own_messages() {
        let setup = r#"{"antithesis_setup":{"status":"complete","details":{"nodes":3}}}"#;
        assert_eq!(parse(setup.as_bytes()), Some(vec![Message::Setup(r#"{"nodes":3}"#.into())]));
        let event = r#"{"leader elected":{"term":2}}"#;
        assert_eq!(
            parse(event.as_bytes()),
            Some(vec![Message::Event("leader elected".into(), r#"{"term":2}"#.into())])
        );
        let sdk = r#"{"antithesis_sdk":{"language":{"name":"Rust","version":"1.95.0"},"sdk_version":"0.3.0","protocol_version":"1.1.0"}}"#;
        assert_eq!(parse(sdk.as_bytes()), Some(vec![Message::Ignored]));
        let guidance = r#"{"antithesis_guidance":{"guidance_type":"numeric","message":"m","id":"m","maximize":true,"guidance_data":{"x":1},"hit":true}}"#;
        let parsed = parse(guidance.as_bytes()).unwrap_or_default();
        let [Message::Event(name, details)] = parsed.as_slice() else { panic!("{parsed:?}") };
        assert_eq!(name, GUIDANCE_EVENT);
        let v: Value = serde_json::from_str(details).unwrap();
        assert_eq!((v["maximize"].as_bool(), v["guidance_data"]["x"].as_u64()), (Some(true), Some(1)));
        let catalog = guidance.replace("\"hit\":true", "\"hit\":false");
        assert_eq!(parse(catalog.as_bytes()), Some(vec![Message::Ignored]));
    }

    #[test]
    fn what_is_not_a_message_is_refused_whole() {
        for bad in [
            &b"not json"[..],
            b"[1,2]",
            b"\"text\"",
            br#"{"antithesis_assert":{"assert_type":"never","must_hit":true,"hit":true}}"#,
            br#"{"antithesis_assert":{"assert_type":"always","hit":true}}"#,
            br#"{"antithesis_assert":{"assert_type":"always","must_hit":true}}"#,
            br#"{"antithesis_assert":7}"#,
        ] {
            assert_eq!(parse(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn the_last_absolute_local_output_names_the_device() {
        let env = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(output_path(&env(&["A=1", "ANTITHESIS_SDK_LOCAL_OUTPUT=/dev/x"])), Some("/dev/x"));
        assert_eq!(
            output_path(&env(&["ANTITHESIS_SDK_LOCAL_OUTPUT=/a", "ANTITHESIS_SDK_LOCAL_OUTPUT=/b"])),
            Some("/b")
        );
        assert_eq!(output_path(&env(&["ANTITHESIS_SDK_LOCAL_OUTPUT=rel"])), None);
        assert_eq!(output_path(&env(&["ANTITHESIS_SDK_LOCAL_OUTPUTX=/a"])), None);
        assert_eq!(output_path(&[]), None);
    }

    #[test]
    fn long_texts_are_cut_at_a_character_boundary() {
        let long = "é".repeat(MAX_DETAILS);
        let line = format!(r#"{{"e":"{long}"}}"#);
        let msgs = parse(line.as_bytes()).expect("a message");
        let [Message::Event(_, details)] = msgs.as_slice() else { panic!("{msgs:?}") };
        assert!(details.len() <= MAX_DETAILS && details.starts_with("\"é"), "{}", details.len());
    }
}
