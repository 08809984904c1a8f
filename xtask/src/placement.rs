//! The kernel's guest placement: `deja-guestkernel`, the kernel image, built for
//! `x86_64-unknown-none`, a target with no standard library, with `deja-kernel` (and
//! `deja-rewrite` and `deja-protocol`) `no_std` + `alloc`, so that a host type, clock or I/O call
//! that slips into the kernel fails the build (docs/ARCHITECTURE.md, "The kernel inside the VM").
//! The image is a static position-independent executable the monitor maps into the VM.

use std::path::Path;
use std::process::Command;

use crate::{cargo, status};

/// The target the guest placement is built for: bare x86-64, `core` and `alloc` only.
pub const TARGET: &str = "x86_64-unknown-none";

/// Where the image is built, under the checkout.
pub const IMAGE: &str = "target/guest-kernel/x86_64-unknown-none/release/deja-guestkernel";

/// Adds [`TARGET`]'s standard crates to the toolchain when they are missing (`rustup target
/// add`), then builds the image (its own workspace and target directory; cargo rebuilds only
/// what changed) and prints where it is.
pub fn build(root: &Path) -> Result<(), String> {
    provision_target()?;
    status(
        "building the kernel image for the guest placement (deja-guestkernel, no_std + alloc)",
        cargo()
            .current_dir(root.join("crates/deja-guestkernel"))
            .env_remove("RUSTFLAGS")
            .args(["build", "--quiet", "--release", "--locked", "--target", TARGET, "--target-dir"])
            .arg(root.join("target/guest-kernel")),
    )?;
    println!("{}", root.join(IMAGE).display());
    Ok(())
}

/// `rustup target add` when the toolchain has no `core` for [`TARGET`].
fn provision_target() -> Result<(), String> {
    let sysroot = Command::new(std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into()))
        .args(["--print", "sysroot"])
        .output()
        .map_err(|e| format!("rustc --print sysroot: {e}"))?;
    let sysroot = String::from_utf8_lossy(&sysroot.stdout).trim().to_string();
    if Path::new(&sysroot).join("lib/rustlib").join(TARGET).join("lib").is_dir() {
        return Ok(());
    }
    status(
        &format!("rustup target add {TARGET} (the kernel's guest placement is built for it)"),
        Command::new("rustup").args(["target", "add", TARGET]),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel, the rewriter and the protocol build without the standard library into an
    /// image with its three entries. A `std::` path, a host clock, a `Mutex` or a dependency's
    /// `std` feature in the guest placement's graph fails this test.
    #[test]
    fn the_kernel_builds_for_the_guest_placement() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        build(root).unwrap();
        let image = std::fs::read(root.join(IMAGE)).unwrap();
        assert_eq!(&image[..4], b"\x7fELF");
        assert_eq!(image[16], 3, "ET_DYN: position independent");
    }
}
