# `mkDejaTest`: turn a static program into a flake check that explores it with deja on a builder
# with the `kvm` system feature. The check passes when the campaign's outcome is the expected
# one: `expect = "no-bugs"` needs `deja explore` to exit 0, `expect = "bugs"` needs exit 1 (a
# bug found and confirmed by replay). Anything else — no KVM, a campaign that ran nothing, a
# deja failure — fails the check: missing evidence is never a pass. The campaign's reports and
# bug files are the check's output.
{ lib, runCommand, deja }:

{ name
, program ? null            # path of a static executable, e.g. "${myService}/bin/svc"
, cluster ? null            # a cluster.toml (needs deja's cluster support)
, args ? [ ]                # the program's arguments
, runs ? null               # rounds, or
, budget ? null             # wall time, e.g. "5m"
, seed ? 0
, mode ? "both"             # "faults", "random" or "both"
, expect ? "no-bugs"        # "no-bugs" or "bugs"
}:

assert lib.assertMsg ((program == null) != (cluster == null)) "mkDejaTest ${name}: give exactly one of program or cluster";
assert lib.assertMsg (cluster == null) "mkDejaTest ${name}: cluster files are not supported by this deja yet";
assert lib.assertMsg ((runs == null) != (budget == null)) "mkDejaTest ${name}: give exactly one of runs or budget";
assert lib.assertMsg (builtins.elem expect [ "no-bugs" "bugs" ]) "mkDejaTest ${name}: expect must be \"no-bugs\" or \"bugs\"";

let
  limit = if runs != null then [ "--runs" (toString runs) ] else [ "--budget" budget ];
  wanted = if expect == "no-bugs" then "0" else "1";
  command = [ "${deja}/bin/deja" "explore" "--quiet" "--seed" (toString seed) "--mode" mode ] ++ limit
    ++ [ "--out" "$out" program "--" ] ++ args;
in
runCommand "deja-test-${name}" { requiredSystemFeatures = [ "kvm" ]; } ''
  if [ ! -w /dev/kvm ]; then
    echo "deja-test ${name}: /dev/kvm is not available in this builder; run it on a builder with the kvm feature" >&2
    exit 1
  fi
  set +e
  ${lib.escapeShellArgs command}
  status=$?
  set -e
  if [ "$status" != "${wanted}" ]; then
    echo "deja-test ${name}: deja explore exited $status, expected ${wanted} (${expect})" >&2
    cat "$out/report.txt" >&2 2>/dev/null || true
    exit 1
  fi
''
