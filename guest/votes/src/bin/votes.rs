//! A vote tally instrumented with the published Antithesis Rust SDK and nothing of deja's.
//!
//! `votes [--buggy]`: three voters vote once each; the tally must never exceed the voters
//! (`Always`). With `--buggy` the last voter's vote is counted twice, and that assertion fails.
//! Some properties hold (`Sometimes` the last voter votes; the tally is `Reachable`), one never
//! does (`Sometimes` nobody votes) and one is never reached (`Unreachable` on a refused vote),
//! so a report shows every status. Setup and an event go through the SDK's lifecycle calls, and
//! a numeric assertion sends the SDK's guidance.

use antithesis_sdk::prelude::*;
use serde_json::json;

const VOTERS: u64 = 3;

fn main() {
    antithesis_init();
    let buggy = std::env::args().any(|a| a == "--buggy");
    lifecycle::setup_complete(&json!({ "voters": VOTERS }));
    let mut votes = 0u64;
    for voter in 0..VOTERS {
        let weight = if buggy && voter + 1 == VOTERS { 2 } else { 1 };
        if weight == 0 {
            assert_unreachable!("a vote is refused", &json!({ "voter": voter }));
        }
        votes += weight;
        assert_sometimes!(voter + 1 == VOTERS, "the last voter votes", &json!({ "voter": voter }));
    }
    assert_always!(votes <= VOTERS, "never more votes than voters", &json!({ "votes": votes, "voters": VOTERS }));
    // A numeric assertion: the SDK also sends a guidepost toward its failure (voters - votes,
    // to be minimized).
    assert_always_greater_than_or_equal_to!(VOTERS, votes, "the voters outnumber the votes", &json!({}));
    assert_sometimes!(votes == 0, "nobody votes", &json!({ "votes": votes }));
    assert_reachable!("the tally ends", &json!({}));
    lifecycle::send_event("tallied", &json!({ "votes": votes }));
    println!("votes {votes} of {VOTERS} voters");
}
