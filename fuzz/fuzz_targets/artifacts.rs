//! The files deja reads back: bug files (program and cluster), capsules, certificates,
//! campaign checkpoints and corpus entries. Each reader takes a path, so the bytes go through
//! a file; the first byte picks the reader.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;

fn scratch() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = std::env::temp_dir().join(format!("deja-fuzz-artifacts-{}", std::process::id()));
        std::fs::create_dir_all(d.join("campaign")).expect("scratch directory");
        d
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, bytes)) = data.split_first() else { return };
    let dir = scratch();
    let file = dir.join("artifact.json");
    std::fs::write(&file, bytes).expect("scratch file");
    match which % 5 {
        0 => drop(deja_explore::BugFile::read(&file)),
        1 => drop(deja_explore::ClusterBug::read(&file)),
        2 => drop(deja_judge::Capsule::read(&file)),
        3 => drop(deja_judge::Certificate::read(&file)),
        _ => {
            // A campaign checkpoint, read the way `deja merge` reads a shard's.
            std::fs::write(dir.join("campaign/checkpoint.json"), bytes).expect("scratch file");
            let out = dir.join("merged");
            let _ = std::fs::remove_dir_all(&out);
            drop(deja_explore::merge(&[dir.join("campaign")], &out));
        }
    }
});
