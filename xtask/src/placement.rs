//! The kernel's guest placement: `deja-kernel` (with `deja-rewrite` and `deja-protocol`) built
//! `no_std` + `alloc` for `x86_64-unknown-none`, a target with no standard library, so that a
//! host type, clock or I/O call that slips into the kernel fails the build (docs/ARCHITECTURE.md,
//! "The kernel inside the VM").

use std::path::Path;
use std::process::Command;

use crate::{cargo, status};

/// The target the guest placement is built for: bare x86-64, `core` and `alloc` only.
pub const TARGET: &str = "x86_64-unknown-none";

/// Adds [`TARGET`]'s standard crates to the toolchain when they are missing (`rustup target
/// add`), then checks the kernel for it, in its own target directory.
pub fn check(root: &Path) -> Result<(), String> {
    provision_target()?;
    status(
        "checking deja-kernel for the guest placement (no_std + alloc)",
        cargo().current_dir(root).env_remove("RUSTFLAGS").args([
            "check",
            "--quiet",
            "-p",
            "deja-kernel",
            "--no-default-features",
            "--features",
            "no_std",
            "--target",
            TARGET,
            "--target-dir",
            "target/guest-placement",
        ]),
    )
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

    /// The kernel, the rewriter and the protocol compile without the standard library. A `std::`
    /// path, a host clock, a `Mutex` or a dependency's `std` feature in the guest placement's
    /// graph fails this test.
    #[test]
    fn the_kernel_builds_for_the_guest_placement() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        check(root).unwrap();
    }
}
