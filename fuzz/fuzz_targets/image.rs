//! The container image reader: any bytes as an image archive, read within limits, then looked into.
#![no_main]

use deja_image::Limits;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(image) = deja_image::read(data, &Limits { max_bytes: 64 << 20, max_entries: 10_000 }) else { return };
    let _ = image.resolve("/");
    for (path, _) in image.tree.iter().take(64) {
        let _ = image.resolve(path);
        let _ = image.which(path);
    }
    for name in ["sh", "./sh", "../../bin/sh", "/bin/sh"] {
        let _ = image.which(name);
    }
    if let Ok(argv) = image.command(None, &[]) {
        let _ = image.which(&argv[0]);
    }
    let _ = image.command(Some(&["/bin/true".to_string()]), &["x".to_string()]);
});
