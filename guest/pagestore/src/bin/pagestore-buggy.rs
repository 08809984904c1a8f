//! The buggy variant of [`pagestore`].
fn main() {
    pagestore::run(pagestore::Variant::Buggy);
}
