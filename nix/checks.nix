# The simulation checks of this flake, as data. The test suite reads this file and runs the very
# same `deja` commands against the guests it builds (crates/deja-cli/tests/nix.rs), so a check
# here cannot drift from what CI runs.
[
  {
    name = "explore-kv-fixed";
    program = "kv";
    args = [ "--variant" "fixed" "6" ];
    runs = 40;
    seed = 0;
    mode = "faults";
    expect = "no-bugs";
  }
  {
    name = "explore-kv-buggy";
    program = "kv";
    args = [ "--variant" "buggy" "6" ];
    runs = 40;
    seed = 0;
    mode = "faults";
    expect = "bugs";
  }
  {
    name = "explore-bank";
    program = "bank";
    args = [ "30" ];
    runs = 40;
    seed = 1;
    mode = "random";
    expect = "no-bugs";
  }
]
