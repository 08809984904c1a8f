//! The credit service, variant `buggy` (see the crate docs).
fn main() {
    credit::main_with(credit::Variant::Buggy);
}
