//! Six random digits drawn through the published Antithesis Rust SDK's `get_random`; their sum
//! must stay below 50 (`assert_always_less_than!`), which it does in all but about one run in
//! 4,800 (210 of the 10^6 draws). The numeric assertion also sends the SDK's guidance (the sum
//! against 50), so an explorer that follows guideposts climbs to the failure a few digits at a
//! time, where fresh seeds seldom reach it. Nothing else of the run differs with the sum (it
//! prints nothing).

use antithesis_sdk::prelude::*;
use serde_json::json;

fn main() {
    antithesis_init();
    lifecycle::setup_complete(&json!({ "digits": 6 }));
    let digits: Vec<u64> = (0..6).map(|_| antithesis_sdk::random::get_random() % 10).collect();
    let sum: u64 = digits.iter().sum();
    assert_always_less_than!(sum, 50u64, "the digits sum below fifty", &json!({ "digits": digits }));
}
