# The bundled example guests, built as static (musl) executables: the `guest/` workspace, which
# uses the SDK from `crates/`, so the whole repository is the source.
{ pkgsStatic, src }:

pkgsStatic.rustPlatform.buildRustPackage {
  pname = "deja-guests";
  version = "0.1.0";
  inherit src;
  cargoRoot = "guest";
  buildAndTestSubdir = "guest";
  cargoLock.lockFile = src + "/guest/Cargo.lock";
  doCheck = false;
}
