//! The buggy variant of [`ackstore`].
fn main() {
    ackstore::run(false);
}
