//! Snapshots and forks of real programs keep the vCPU's CR3 and the page tables' current
//! address space in agreement (needs `/dev/kvm` and the guests `cargo xtask guests` builds;
//! skipped without them).

use deja_kernel::ProgramSpec;
use deja_vmm::{BootOptions, Fork, RegisterPath, Session, Settings, Snapshot, SnapshotMeta};

fn guest(name: &str) -> Option<Vec<u8>> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/guests").join(name);
    match (std::path::Path::new("/dev/kvm").exists(), std::fs::read(&path)) {
        (true, Ok(image)) => Some(image),
        _ => {
            eprintln!("skipped: no /dev/kvm or no {}", path.display());
            None
        }
    }
}

const MEMORY: u64 = 256 << 20;

#[test]
fn snapshots_and_forks_of_a_threaded_program_continue_as_the_run() {
    let Some(image) = guest("threads") else { return };
    let spec = ProgramSpec::for_program(image, "threads", [], 7);
    let mut quiet = |_: deja_kernel::Stream, _: &[u8]| {};
    let whole = Session::boot(spec.clone(), MEMORY).unwrap().run(&mut quiet).unwrap();
    let at = whole.report.syscalls / 2;

    // Registers through ioctls: CR3 follows the space from the first entry on as well.
    let opts = BootOptions { register_path: RegisterPath::Ioctls, ..BootOptions::new(Settings::default()) };
    let ioctls = Session::boot_with(spec.clone(), MEMORY, opts).unwrap().run(&mut quiet).unwrap();
    assert_eq!(ioctls.report.digest, whole.report.digest);

    let mut session = Session::boot(spec.clone(), MEMORY).unwrap();
    assert!(session.run_to_syscall(at, &mut quiet).unwrap());
    let snap = session.snapshot(SnapshotMeta::of(&spec, at)).unwrap();
    assert_eq!(snap.vcpu.sregs.cr3, snap.frames.root);
    let back = Snapshot::from_artifact(&snap.to_artifact()).unwrap();
    let restored = Session::restore(&back, &Settings::default()).unwrap().run(&mut quiet).unwrap();
    assert_eq!(restored.report.digest, whole.report.digest);

    let mut fork = Fork::new(spec, MEMORY, &Settings::default(), at, &mut quiet).unwrap();
    for _ in 0..2 {
        let child = fork.run_child(None, &mut quiet).unwrap();
        assert_eq!(child.report.digest, whole.report.digest);
    }
}
