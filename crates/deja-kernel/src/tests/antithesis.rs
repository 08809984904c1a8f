//! The Antithesis SDKs' messages through `ANTITHESIS_SDK_LOCAL_OUTPUT`, and the record of the
//! paths a program looked for and did not get.

use super::*;

const DEVICE: &str = "/dev/antithesis-sdk.jsonl";

fn with_output(path: &str) -> ProgramSpec {
    let mut spec = spec_with(exec_image(), 7);
    spec.env.push(format!("ANTITHESIS_SDK_LOCAL_OUTPUT={path}"));
    spec
}

/// Opens `p` as the SDKs do (create, append, write only) and writes `lines` to it, one write each.
fn write_lines(k: &mut Kernel, m: &mut FakeMemory, p: &str, lines: &[&str]) -> i64 {
    let buf = scratch(k, m, 0x10000);
    let at = path(k, m, buf, p);
    let fd = sc(k, m, "openat", &[AT_FDCWD, at, 0o2101, 0o644]);
    assert!(fd >= 0, "open {p}: {fd}");
    for l in lines {
        let data = format!("{l}\n");
        poke(k, m, buf + 0x1000, data.as_bytes());
        assert_eq!(sc(k, m, "write", &[fd as u64, buf + 0x1000, data.len() as u64]), data.len() as i64);
    }
    fd
}

const CATALOG: &str = r#"{"antithesis_assert":{"assert_type":"always","display_type":"Always","condition":false,"message":"m","location":{"file":"src/a.rs","begin_line":9},"hit":false,"must_hit":true,"id":"m","details":null}}"#;
const FAILED: &str = r#"{"antithesis_assert":{"assert_type":"always","display_type":"Always","condition":false,"message":"m","location":{"file":"src/a.rs","begin_line":9},"hit":true,"must_hit":true,"id":"m","details":{"x":1}}}"#;

#[test]
fn the_sdks_lines_are_assertions_setup_and_events_and_survive_a_snapshot() {
    let (mut k, _, mut m) = boot_spec(with_output(DEVICE));
    write_lines(&mut k, &mut m, DEVICE, &[CATALOG, r#"{"antithesis_setup":{"status":"complete","details":{"n":3}}}"#]);
    let saved = Kernel::save(&k);
    write_lines(&mut k, &mut m, DEVICE, &[FAILED, r#"{"ready":{"term":1}}"#, "not json"]);
    let r = k.finish(&m, ExitStatus::Exited { code: 0 });
    assert_eq!(r.assertions.len(), 1);
    let a = &r.assertions[0];
    assert_eq!((a.kind.as_str(), a.message.as_str(), a.file.as_str(), a.line), ("always", "m", "src/a.rs", 9));
    assert!(a.bug);
    assert_eq!(a.first_failure.as_ref().map(|c| c.details.as_str()), Some(r#"{"x":1}"#));
    assert_eq!(r.setup_complete.as_ref().map(|s| s.details.as_str()), Some(r#"{"n":3}"#));
    assert_eq!(r.events.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(), ["ready"]);
    assert_eq!(r.protocol_errors, 1, "the line that is no message");
    // A snapshot before the failure restores with the catalog entry, not the failure.
    let mut back = Kernel::restore(&saved).expect("restores");
    let r = back.finish(&m, ExitStatus::Exited { code: 0 });
    assert_eq!((r.assertions.len(), r.assertions[0].hits), (1, 0));
}

#[test]
fn the_device_reads_empty_and_is_where_the_variable_says() {
    let (mut k, _, mut m) = boot_spec(with_output("/run/sdk/out.jsonl"));
    let fd = write_lines(&mut k, &mut m, "/run/sdk/out.jsonl", &[CATALOG]);
    let buf = scratch(&mut k, &mut m, 0x1000);
    let p = path(&k, &mut m, buf, "/run/sdk/out.jsonl");
    let rd = sc(&mut k, &mut m, "openat", &[AT_FDCWD, p, 0, 0]);
    assert_eq!(sc(&mut k, &mut m, "read", &[rd as u64, buf, 64]), 0);
    assert!(fd >= 0);
    let r = k.finish(&m, ExitStatus::Exited { code: 0 });
    assert_eq!(r.assertions.len(), 1);
    // Without the variable there is no device: the same path is an ordinary missing file.
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 0x1000);
    let p = path(&k, &mut m, buf, DEVICE);
    assert_eq!(sc(&mut k, &mut m, "openat", &[AT_FDCWD, p, 1, 0]), ENOENT);
}

#[test]
fn a_failed_lookup_names_the_first_missing_component_and_survives_a_snapshot() {
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 0x1000);
    let p = path(&k, &mut m, buf, "/usr/lib/python3.11/os.py");
    assert_eq!(sc(&mut k, &mut m, "newfstatat", &[AT_FDCWD, p, buf + 0x800, 0]), ENOENT);
    let p = path(&k, &mut m, buf, "/usr/lib/python3.11/encodings");
    assert_eq!(sc(&mut k, &mut m, "openat", &[AT_FDCWD, p, 0, 0]), ENOENT);
    // Only the last component missing: the path itself.
    let p = path(&k, &mut m, buf, "/data/nothing");
    assert_eq!(sc(&mut k, &mut m, "access", &[p, 4]), ENOENT);
    // A file that exists is no lookup that failed.
    let p = path(&k, &mut m, buf, "/data/input.txt");
    assert_eq!(sc(&mut k, &mut m, "access", &[p, 4]), 0);
    let back = Kernel::restore(&Kernel::save(&k)).expect("restores");
    let r = k.finish(&m, ExitStatus::Exited { code: 1 });
    let got: Vec<(&str, Vec<&str>, u64)> = r
        .not_found
        .iter()
        .map(|n| (n.missing.as_str(), n.paths.iter().map(String::as_str).collect(), n.lookups))
        .collect();
    assert_eq!(
        got,
        [
            ("/usr", vec!["/usr/lib/python3.11/os.py", "/usr/lib/python3.11/encodings"], 2),
            ("/data/nothing", vec!["/data/nothing"], 1)
        ]
    );
    let mut back = back;
    assert_eq!(back.finish(&m, ExitStatus::Exited { code: 1 }).not_found, r.not_found);
}

#[test]
fn a_state_saved_before_the_lookups_part_existed_restores_with_none() {
    let (k, _, _) = boot();
    let saved = Kernel::save(&k);
    // The last part: no missing paths, none dropped (postcard: a byte string of two zeros).
    assert!(saved.ends_with(&[2, 0, 0]), "{:?}", &saved[saved.len() - 3..]);
    let older = Kernel::restore(&saved[..saved.len() - 3]).expect("a state of nine parts restores");
    assert_eq!(Kernel::save(&older), saved);
    // Damage in the optional part is refused like damage anywhere.
    let mut bad = saved.clone();
    let n = bad.len();
    bad[n - 2] = 1;
    assert!(Kernel::restore(&bad).is_err());
}

#[test]
fn libvoidstars_requests_are_the_lines_and_the_library_is_placed_with_the_device() {
    use deja_protocol::Request;
    let (mut k, _, mut m) = boot_spec(with_output(DEVICE));
    let buf = scratch(&mut k, &mut m, 0x10000);
    // The library is a file like any other, where the SDKs look for it.
    let lib = path(&k, &mut m, buf, crate::record::voidstar::PATH);
    let fd = sc(&mut k, &mut m, "openat", &[AT_FDCWD, lib, 0, 0]);
    assert!(fd >= 0, "{fd}");
    assert_eq!(sc(&mut k, &mut m, "read", &[fd as u64, buf + 0x1000, 4]), 4);
    assert_eq!(peek(&k, &mut m, buf + 0x1000, 4), b"\x7fELF");
    // fuzz_json_data(message, len): one message, as one line of the file is.
    for msg in [CATALOG, FAILED] {
        poke(&k, &mut m, buf + 0x2000, msg.as_bytes());
        assert_eq!(
            super::deja_syscall::deja(&mut k, &mut m, Request::AntithesisMessage, &[buf + 0x2000, msg.len() as u64]),
            0
        );
    }
    // Nothing, or more than a message may be: refused, and counted.
    assert_eq!(super::deja_syscall::deja(&mut k, &mut m, Request::AntithesisMessage, &[buf + 0x2000, 0]), EINVAL);
    let huge = deja_protocol::MAX_MESSAGE as u64 + 1;
    assert_eq!(super::deja_syscall::deja(&mut k, &mut m, Request::AntithesisMessage, &[buf + 0x2000, huge]), EINVAL);
    // fuzz_get_random: a decision.
    let before = k.decisions().len();
    super::deja_syscall::deja(&mut k, &mut m, Request::Random, &[]);
    assert_eq!(k.decisions().len(), before + 1);
    let r = k.finish(&m, ExitStatus::Exited { code: 0 });
    assert_eq!(r.assertions.len(), 1);
    assert!(r.assertions[0].bug);
    assert_eq!(r.assertions[0].first_failure.as_ref().map(|c| c.details.as_str()), Some(r#"{"x":1}"#));
    assert_eq!(r.protocol_errors, 2);
    // Without the variable: no library either.
    let (mut k, _, mut m) = boot();
    let buf = scratch(&mut k, &mut m, 0x1000);
    let lib = path(&k, &mut m, buf, crate::record::voidstar::PATH);
    assert_eq!(sc(&mut k, &mut m, "openat", &[AT_FDCWD, lib, 0, 0]), ENOENT);
}
