//! `deja run --kernel guest`: the kernel model served inside the VM (docs/ARCHITECTURE.md, "The
//! kernel inside the VM"), and where its image is found.

use std::path::PathBuf;

use deja_kernel::{ProgramSpec, Stream};
use deja_vmm::session::BootOptions;
use deja_vmm::Settings;

use crate::exit::Exit;
use crate::run_args::Failure;

/// Heap of the kernel in the guest.
pub const HEAP: u64 = 128 << 20;

/// The guest placement's kernel image: `DEJA_KERNEL_IMAGE`, else where `cargo xtask
/// guest-kernel` builds it beside this executable's target directory.
pub fn kernel_image() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("DEJA_KERNEL_IMAGE") {
        return Ok(PathBuf::from(path));
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    // target/{release,debug}/deja → target/guest-kernel/...
    let built = exe
        .parent()
        .and_then(|p| p.parent())
        .map(|t| t.join("guest-kernel/x86_64-unknown-none/release/deja-guestkernel"))
        .filter(|p| p.is_file());
    built.ok_or_else(|| {
        "the guest placement's kernel image is not built: run `cargo xtask guest-kernel`, or set DEJA_KERNEL_IMAGE"
            .to_string()
    })
}

/// One life of `spec` with its kernel in the guest; output to `sink` as it is written.
pub fn run(
    spec: &ProgramSpec,
    memory_mib: u64,
    settings: &Settings,
    sink: &mut dyn FnMut(Stream, &[u8]),
) -> Result<deja_vmm::Run, Failure> {
    let path = kernel_image().map_err(|e| Failure::new(Exit::DejaFailed, e))?;
    let image = std::fs::read(&path)
        .map_err(|e| Failure::new(Exit::DejaFailed, format!("cannot read the kernel image {}: {e}", path.display())))?;
    let opts = BootOptions::new(*settings);
    let mut run = deja_vmm::placement::run_program(&image, spec, memory_mib << 20, HEAP, opts, sink)
        .map_err(|e| Failure::new(Exit::DejaFailed, format!("--kernel guest: {e}")))?;
    let status = run.kernel.exit_status().cloned().ok_or_else(|| {
        Failure::new(Exit::DejaFailed, "--kernel guest: the kernel ended the run without an exit status")
    })?;
    let report = run.kernel.finish(&run.vm.space, status);
    Ok(deja_vmm::Run { report, stats: run.vm.stats.clone(), blocks: Vec::new(), cuts: Vec::new() })
}
