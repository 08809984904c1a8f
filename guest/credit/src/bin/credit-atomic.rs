//! The credit service, variant `atomic` (see the crate docs).
fn main() {
    credit::main_with(credit::Variant::Atomic);
}
