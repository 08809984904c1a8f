{
  description = "deja: deterministic simulation of static Linux programs in KVM VMs whose kernel is deja";

  inputs.nixpkgs.url = "github:NixOS/nixpkgs/nixos-25.11";

  outputs = { self, nixpkgs }:
    let
      system = "x86_64-linux";
      pkgs = nixpkgs.legacyPackages.${system};
      src = pkgs.lib.cleanSource ./.;

      deja = pkgs.callPackage ./nix/deja.nix { inherit src; };
      guests = pkgs.callPackage ./nix/guests.nix { inherit src; };
      mkDejaTestWith = pkgs.callPackage ./nix/mk-deja-test.nix { inherit deja; };

      # `nix run .#explore` explores the bundled key-value store with its planted durability
      # bug; with arguments, they go to `deja explore` unchanged.
      explore = pkgs.writeShellApplication {
        name = "deja-explore";
        text = ''
          if [ "$#" -eq 0 ]; then
            exec ${deja}/bin/deja explore --runs 60 --mode faults --out deja-out \
              ${guests}/bin/kv -- --variant buggy 6
          fi
          exec ${deja}/bin/deja explore "$@"
        '';
      };

      simulationChecks = builtins.listToAttrs (map
        (c: {
          inherit (c) name;
          value = mkDejaTestWith {
            inherit (c) name args runs seed mode expect;
            program = "${guests}/bin/${c.program}";
          };
        })
        (import ./nix/checks.nix));
    in
    {
      packages.${system} = {
        default = deja;
        inherit deja guests;
      };

      apps.${system} = {
        default = { type = "app"; program = "${deja}/bin/deja"; };
        explore = { type = "app"; program = "${explore}/bin/deja-explore"; };
      };

      checks.${system} = simulationChecks // {
        # The tests that need no /dev/kvm; the KVM ones run in simulationChecks and in CI.
        unit = pkgs.callPackage ./nix/deja.nix { inherit src; pureTests = true; };
      };

      lib = {
        # mkDejaTest { name, program | cluster, runs | budget, seed, expect, args ? [], mode ? "both" }
        mkDejaTest = mkDejaTestWith;
      };

      devShells.${system}.default = pkgs.mkShell {
        packages = with pkgs; [ cargo rustc clippy rustfmt rust-analyzer cargo-nextest ];
      };
    };
}
