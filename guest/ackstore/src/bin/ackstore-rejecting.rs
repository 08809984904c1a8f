//! The rejecting variant of [`ackstore`]: a client that takes a failed put to be absent.
fn main() {
    ackstore::run_variant(ackstore::Variant::Rejecting);
}
