//! Cluster files: any text, parsed and checked (paths resolve against an empty directory).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    if let Ok(file) = toml::from_str::<deja_cluster::config::ClusterFile>(text) {
        let _ = deja_cluster::ClusterConfig::from_file(file, std::path::Path::new("/nonexistent"));
    }
});
