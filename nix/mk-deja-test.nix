# `mkDejaTest`: turn a static program (or a cluster file) into a flake check that explores it
# with deja on a builder with the `kvm` system feature. The check passes when the campaign's
# outcome is the expected one: `expect = "no-bugs"` needs `deja explore` to exit 0,
# `expect = "bugs"` needs exit 1 (a bug found and confirmed by replay). Anything else — no KVM, a
# campaign that ran nothing, a deja failure — fails the check: missing evidence is never a pass.
# The campaign's reports and bug files are the check's output.
#
# `shards = N` splits the campaign into N derivations, each `deja explore --shard I/N` over its
# own seed space and its share of the rounds, and one more that runs `deja merge` over them and
# judges the union. Nix schedules the shards on whichever builders (local or remote) have the
# `kvm` feature free; nothing else coordinates them. `jobs` is part of what a campaign is (its
# rounds depend on it), so it is fixed here, not taken from the builder's core count: every
# builder gives the same verdict.
{ lib, runCommand, deja }:

{ name
, program ? null            # path of a static executable, e.g. "${myService}/bin/svc"
, cluster ? null            # or a cluster.toml whose binaries are store paths
, args ? [ ]                # the program's arguments
, runs ? null               # rounds (over all shards), or
, budget ? null             # wall time per shard, e.g. "5m"
, seed ? 0
, mode ? "both"             # "faults", "random" or "both"
, expect ? "no-bugs"        # "no-bugs" or "bugs"
, jobs ? 2                  # workers per shard
, shards ? 1                # independent slices of the campaign, merged at the end
}:

assert lib.assertMsg ((program == null) != (cluster == null)) "mkDejaTest ${name}: give exactly one of program or cluster";
assert lib.assertMsg ((runs == null) != (budget == null)) "mkDejaTest ${name}: give exactly one of runs or budget";
assert lib.assertMsg (builtins.elem expect [ "no-bugs" "bugs" ]) "mkDejaTest ${name}: expect must be \"no-bugs\" or \"bugs\"";
assert lib.assertMsg (shards >= 1 && jobs >= 1) "mkDejaTest ${name}: shards and jobs are at least 1";

let
  wanted = if expect == "no-bugs" then "0" else "1";
  target = if program != null then [ program "--" ] ++ args else [ cluster ];
  # Rounds are split as evenly as they go; the first shards take the remainder.
  shardRuns = i: runs / shards + (if i < lib.mod runs shards then 1 else 0);
  limit = i: if runs != null then [ "--runs" (toString (shardRuns i)) ] else [ "--budget" budget ];
  shardFlags = i: if shards == 1 then [ ] else [ "--shard" "${toString i}/${toString shards}" ];
  # `$out` stays outside the quoting so that the shell expands it.
  command = i: "${lib.escapeShellArgs ([ "${deja}/bin/deja" "explore" "--quiet" "--seed" (toString seed) "--mode" mode
    "--jobs" (toString jobs) ] ++ limit i ++ shardFlags i)} --out \"$out\" ${lib.escapeShellArgs target}";
  noKvm = ''
    if [ ! -w /dev/kvm ]; then
      echo "deja-test ${name}: /dev/kvm is not available in this builder; run it on a builder with the kvm feature" >&2
      exit 1
    fi
  '';
  judge = what: ''
    if [ "$status" != "${wanted}" ]; then
      echo "deja-test ${name}: ${what} exited $status, expected ${wanted} (${expect})" >&2
      cat "$out/report.txt" >&2 2>/dev/null || true
      exit 1
    fi
  '';
  # A shard's own exit says only whether it found a bug; 0 and 1 are both evidence. Anything
  # else (no round run, a deja failure) fails the shard, and so the check.
  shard = i: runCommand "deja-test-${name}-shard-${toString i}-of-${toString shards}" { requiredSystemFeatures = [ "kvm" ]; } ''
    ${noKvm}
    set +e
    ${command i}
    status=$?
    set -e
    if [ "$status" != 0 ] && [ "$status" != 1 ]; then
      echo "deja-test ${name}: shard ${toString i}/${toString shards} exited $status" >&2
      exit 1
    fi
  '';
  shardDirs = map shard (lib.range 0 (shards - 1));
in
if shards == 1 then
  runCommand "deja-test-${name}" { requiredSystemFeatures = [ "kvm" ]; } ''
    ${noKvm}
    set +e
    ${command 0}
    status=$?
    set -e
    ${judge "deja explore"}
  ''
else
  runCommand "deja-test-${name}" { passthru.shards = shardDirs; } ''
    set +e
    ${deja}/bin/deja merge --out "$out" ${lib.escapeShellArgs (map toString shardDirs)}
    status=$?
    set -e
    ${judge "deja merge of ${toString shards} shards"}
  ''
