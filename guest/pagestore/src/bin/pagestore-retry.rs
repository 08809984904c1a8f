//! The retrying variant of [`pagestore`]: a failed sync of the extension is retried.
fn main() {
    pagestore::run(pagestore::Variant::Retry);
}
