//! The credit service, variant `misleading-green` (see the crate docs).
fn main() {
    credit::main_with(credit::Variant::MisleadingGreen);
}
