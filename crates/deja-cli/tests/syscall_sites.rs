//! Syscall sites a jump can reach the kernel from (`deja_rewrite::syscalls`), planned on real
//! programs nobody wrote for deja: static glibc and Go guests, Debian's etcd (Go) and busybox
//! (static), and the host's shared glibc. Nearly every `syscall` of each has a window of whole,
//! relocatable instructions no path enters; the figures are in docs/ARCHITECTURE.md, "The kernel
//! inside the VM".

use std::path::Path;

use deja_rewrite::syscalls::{plan_syscalls_elf, Unjumpable};

use crate::common::*;

/// Plans `path` and checks every site against the file: the window is whole instructions that
/// end at the `syscall`, which the file holds there. Returns (syscalls, jump sites).
fn planned(path: &Path) -> (usize, usize) {
    let image = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let plan = plan_syscalls_elf(&image).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    for s in &plan.sites {
        let off = s.offset as usize;
        assert_eq!(&image[off..off + 2], [0x0f, 0x05], "{}: a syscall at {:#x}", path.display(), s.syscall);
        let len = s.displaced.len();
        assert!((5..=5 + 14).contains(&len), "{}: window {len} bytes", path.display());
        assert_eq!(s.syscall - s.window, len as u64);
        assert_eq!(&image[off - len..off], &s.displaced[..], "{}: the window's bytes", path.display());
    }
    for r in &plan.refused {
        assert!(!r.why.describe().is_empty());
    }
    let short = plan.refused_for(Unjumpable::ShortWindow);
    eprintln!(
        "{}: {} syscalls, {} jump sites, {} refused ({} short windows)",
        path.display(),
        plan.total(),
        plan.sites.len(),
        plan.refused.len(),
        short
    );
    (plan.total(), plan.sites.len())
}

/// At least `share` of `path`'s syscalls, and at least `min` of them, are jump sites.
fn mostly_jumps(path: &Path, min: usize, share: f64) {
    let (total, jumps) = planned(path);
    assert!(total >= min, "{}: only {total} syscall instructions", path.display());
    assert!(jumps as f64 >= share * total as f64, "{}: {jumps} of {total} are jump sites", path.display());
}

#[test]
fn nearly_every_syscall_of_static_glibc_and_go_guests_is_a_jump_site() {
    // A C program on static glibc, a Rust one, and a Go one.
    mostly_jumps(&guest("conformance-files"), 50, 0.9);
    mostly_jumps(&guest("bank"), 50, 0.9);
    mostly_jumps(&guest("go-exec"), 20, 0.95);
}

#[test]
fn nearly_every_syscall_of_debians_etcd_busybox_and_glibc_is_a_jump_site() {
    needs(&["/usr/bin/etcd", "/bin/busybox"], "etcd-server busybox-static");
    mostly_jumps(Path::new("/usr/bin/etcd"), 20, 0.95);
    mostly_jumps(Path::new("/bin/busybox"), 100, 0.9);
    let libc = Path::new("/lib/x86_64-linux-gnu/libc.so.6");
    mostly_jumps(libc, 200, 0.9);
}

#[test]
fn a_signal_handlers_return_keeps_its_bytes_under_jump_sites() {
    // busybox's shell takes SIGCHLD when a child it ran ends; its handler returns through glibc's
    // `__restore_rt`, which `.eh_frame` describes as a signal frame from a byte before it. A jump
    // planned from that byte landed two bytes into its `mov $15,%rax`, and the shell died of
    // SIGILL; a signal return keeps its bytes (unwinders read them) and its trap.
    needs(&["/bin/busybox"], "busybox-static");
    let script = "echo a; /bin/busybox echo mid; true | true; echo b";
    let out = deja(&["run", "--no-probe", "--syscall-jumps", "on", "/bin/busybox", "--", "sh", "-c", script]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "a\nmid\nb\n");
    let plan = plan_syscalls_elf(&std::fs::read("/bin/busybox").unwrap()).unwrap();
    let kept: Vec<_> = plan.refused.iter().filter(|r| r.why == Unjumpable::SignalReturn).collect();
    assert!(!kept.is_empty(), "{:?}", plan.refused);
}
