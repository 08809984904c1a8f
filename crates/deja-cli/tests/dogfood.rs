//! The committed exploration results match what the code produces on the same seeds.

use crate::common::*;

#[test]
fn committed_exploration_results_are_current() {
    let dir = guests();
    let out = deja(&[
        "dogfood",
        "--guests",
        dir.to_str().unwrap(),
        "--check",
        root().join("dogfood-results/explore.md").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}
