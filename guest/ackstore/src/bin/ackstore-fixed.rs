//! The fixed variant of [`ackstore`].
fn main() {
    ackstore::run(true);
}
