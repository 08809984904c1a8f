//! End-to-end checks of the KVM shell on real `/dev/kvm`: the probe runs ring-3 code, traps its
//! syscall through the stub and its exceptions through the ring-0 gates.

#[test]
fn probe_runs_ring3_code_and_traps_its_syscall() {
    let probe = deja_vmm::probe(&deja_vmm::Settings::default()).expect("probe VM");
    // The probe reached its syscall: vendor leaf must be answered (either by the table or host).
    eprintln!("{probe:#?}");
    eprintln!("hazards: {:#?}", probe.hazards());
    assert!(probe.guest_xcr0 & 0x3 == 0x3, "x87 and SSE state enabled");
}
