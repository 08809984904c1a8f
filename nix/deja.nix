# The `deja` binary, built with nixpkgs' rustPlatform from the workspace's Cargo.lock.
# `pureTests = true` runs the tests that need no /dev/kvm (the pure core, the artifact format,
# the protocol, the report renderer).
{ lib, rustPlatform, src, pureTests ? false }:

rustPlatform.buildRustPackage {
  pname = "deja";
  version = "0.1.0";
  inherit src;
  cargoLock.lockFile = src + "/Cargo.lock";
  cargoBuildFlags = [ "-p" "deja-cli" ];
  doCheck = pureTests;
  cargoTestFlags = [ "-p" "deja-kernel" "-p" "deja-format" "-p" "deja-protocol" "-p" "deja-explore-report" ];
  meta = {
    description = "Deterministic simulation of static Linux programs in KVM VMs whose kernel is deja";
    license = lib.licenses.asl20;
    mainProgram = "deja";
    platforms = [ "x86_64-linux" ];
  };
}
