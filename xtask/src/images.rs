//! Guests packed as container images, as `docker save` writes them (`manifest.json`, the
//! image config, one layer), for the docker-compose examples (`examples/compose/`): an image
//! holds one static guest at `/` and runs it as its entrypoint; the workload image also holds
//! a test template whose commands are links to that guest (`register-workload`). The archives are byte-for-byte
//! the same on every build of the same guests (fixed times, owners and order), so a bug file
//! that records an image's BLAKE3 finds it again after a rebuild.

use std::path::Path;

use sha2::{Digest, Sha256};

/// Each image: its file name in `images/`, its reference (`RepoTags`), the guest it holds.
pub const IMAGES: [(&str, &str, &str); 4] = [
    ("register-replica.tar", "deja/register-replica:1", "register-replica"),
    ("register-replica-patched.tar", "deja/register-replica:patched", "register-replica-patched"),
    ("register-client.tar", "deja/register-client:1", "register-client"),
    ("register-workload.tar", "deja/register-workload:1", "register-workload"),
];

/// The workload image's test template: its directory and its commands, each a link to the
/// guest, which acts by the name it was started as.
const TEMPLATE: (&str, [&str; 4]) = (
    "opt/antithesis/test/v1/main",
    ["first_wait_for_leader", "parallel_driver_write", "anytime_read", "finally_acknowledged_writes_survive"],
);

fn hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// A tar archive of `files` (name, mode, bytes) and then `links` (name, target), with no time,
/// owner or order of its own.
fn tar_with_links(files: &[(&str, u32, &[u8])], links: &[(String, String)]) -> Result<Vec<u8>, String> {
    let mut b = tar::Builder::new(Vec::new());
    for (name, target) in links {
        let mut h = tar::Header::new_ustar();
        h.set_size(0);
        h.set_mode(0o777);
        h.set_mtime(0);
        h.set_uid(0);
        h.set_gid(0);
        h.set_entry_type(tar::EntryType::Symlink);
        b.append_link(&mut h, name, target).map_err(|e| format!("packing {name}: {e}"))?;
    }
    for (name, mode, bytes) in files {
        let mut h = tar::Header::new_ustar();
        h.set_size(bytes.len() as u64);
        h.set_mode(*mode);
        h.set_mtime(0);
        h.set_uid(0);
        h.set_gid(0);
        h.set_entry_type(tar::EntryType::Regular);
        b.append_data(&mut h, name, *bytes).map_err(|e| format!("packing {name}: {e}"))?;
    }
    b.into_inner().map_err(|e| format!("packing an image: {e}"))
}

/// A tar archive of `files` (name, mode, bytes), with no time, owner or order of its own.
fn tar(files: &[(&str, u32, &[u8])]) -> Result<Vec<u8>, String> {
    tar_with_links(files, &[])
}

/// Packs each of [`IMAGES`] from the guests in `guests` into `out`.
pub fn write(guests: &Path, out: &Path) -> Result<(), String> {
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    for (file, tag, guest) in IMAGES {
        let program = std::fs::read(guests.join(guest)).map_err(|e| format!("{guest}: {e}"))?;
        let links: Vec<(String, String)> = if guest == "register-workload" {
            TEMPLATE.1.iter().map(|c| (format!("{}/{c}", TEMPLATE.0), format!("/{guest}"))).collect()
        } else {
            Vec::new()
        };
        let layer = tar_with_links(&[(guest, 0o755, &program)], &links)?;
        let diff = hex(&layer);
        let config = format!(
            "{{\"architecture\":\"amd64\",\"os\":\"linux\",\"config\":{{\"Entrypoint\":[\"/{guest}\"],\
             \"Env\":[\"PATH=/usr/local/bin:/usr/bin:/bin\"],\"WorkingDir\":\"/\"}},\
             \"rootfs\":{{\"type\":\"layers\",\"diff_ids\":[\"sha256:{diff}\"]}}}}"
        );
        let config_name = format!("{}.json", hex(config.as_bytes()));
        let manifest =
            format!("[{{\"Config\":\"{config_name}\",\"RepoTags\":[\"{tag}\"],\"Layers\":[\"{diff}/layer.tar\"]}}]");
        let layer_name = format!("{diff}/layer.tar");
        let archive = tar(&[
            ("manifest.json", 0o644, manifest.as_bytes()),
            (&config_name, 0o644, config.as_bytes()),
            (&layer_name, 0o644, &layer),
        ])?;
        std::fs::write(out.join(file), archive).map_err(|e| format!("{}: {e}", out.join(file).display()))?;
    }
    Ok(())
}
