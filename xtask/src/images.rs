//! Guests packed as container images, as `docker save` writes them (`manifest.json`, the
//! image config, one layer), for the docker-compose examples (`examples/compose/`): an image
//! holds one static guest at `/` and runs it as its entrypoint. The archives are byte-for-byte
//! the same on every build of the same guests (fixed times, owners and order), so a bug file
//! that records an image's BLAKE3 finds it again after a rebuild.

use std::path::Path;

use sha2::{Digest, Sha256};

/// Each image: its file name in `images/`, its reference (`RepoTags`), the guest it holds.
pub const IMAGES: [(&str, &str, &str); 3] = [
    ("register-replica.tar", "deja/register-replica:1", "register-replica"),
    ("register-replica-patched.tar", "deja/register-replica:patched", "register-replica-patched"),
    ("register-client.tar", "deja/register-client:1", "register-client"),
];

fn hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// A tar archive of `files` (name, mode, bytes), with no time, owner or order of its own.
fn tar(files: &[(&str, u32, &[u8])]) -> Result<Vec<u8>, String> {
    let mut b = tar::Builder::new(Vec::new());
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

/// Packs each of [`IMAGES`] from the guests in `guests` into `out`.
pub fn write(guests: &Path, out: &Path) -> Result<(), String> {
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    for (file, tag, guest) in IMAGES {
        let program = std::fs::read(guests.join(guest)).map_err(|e| format!("{guest}: {e}"))?;
        let layer = tar(&[(guest, 0o755, &program)])?;
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
