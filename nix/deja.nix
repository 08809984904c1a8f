# The `deja` binary, built with nixpkgs' rustPlatform from the workspace's Cargo.lock.
# `pureTests = true` runs the tests that need no /dev/kvm: every crate's but the two whose
# tests boot VMs (deja-cli, deja-vmm) and the guest SDK's: the kernel model, the artifact
# format, the protocol, the rewriter's planners, the history checker, images, a run's inputs
# (dynamic programs' libraries, ld.so.cache, programs in images), the report renderer, the
# explorer's and the judge's logic over fake runs, the cluster simulator over fake nodes, and
# the bench's arithmetic.
{ lib, rustPlatform, src, pureTests ? false }:

rustPlatform.buildRustPackage {
  pname = "deja";
  version = "0.1.0";
  inherit src;
  cargoLock.lockFile = src + "/Cargo.lock";
  cargoBuildFlags = [ "-p" "deja-cli" ];
  doCheck = pureTests;
  cargoTestFlags = [
    "-p" "deja-kernel" "-p" "deja-format" "-p" "deja-protocol" "-p" "deja-rewrite" "-p" "deja-history"
    "-p" "deja-image" "-p" "deja-inputs" "-p" "deja-explore-report" "-p" "deja-explore" "-p" "deja-judge"
    "-p" "deja-cluster" "-p" "deja-bench" "-p" "deja-debug"
  ];
  meta = {
    description = "Deterministic simulation of static Linux programs in KVM VMs whose kernel is deja";
    license = lib.licenses.asl20;
    mainProgram = "deja";
    platforms = [ "x86_64-linux" ];
  };
}
