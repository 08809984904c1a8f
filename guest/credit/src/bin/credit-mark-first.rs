//! The credit service, variant `mark-first` (see the crate docs).
fn main() {
    credit::main_with(credit::Variant::MarkFirst);
}
