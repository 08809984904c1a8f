//! The fixed variant of [`pagestore`].
fn main() {
    pagestore::run(pagestore::Variant::Fixed);
}
