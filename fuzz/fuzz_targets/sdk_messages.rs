//! The Antithesis SDKs' messages: any bytes a program writes to deja's device for them, parsed
//! as one line. The parser never panics, and what it keeps stays within the protocol's limits.
#![no_main]

use deja_kernel::record::antithesis::{parse, Message};
use deja_protocol::{MAX_DETAILS, MAX_TEXT};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for m in parse(data).unwrap_or_default() {
        match m {
            Message::Assert { message, file, details, .. } => {
                assert!(message.len() <= MAX_TEXT && file.len() <= MAX_TEXT && details.len() <= MAX_DETAILS);
            }
            Message::Setup(details) => assert!(details.len() <= MAX_DETAILS),
            Message::Event(name, details) => assert!(name.len() <= MAX_DETAILS && details.len() <= MAX_DETAILS),
            Message::Ignored => {}
        }
    }
});
