//! The write-ahead-log server, fixed: `sync_data` before every acknowledgement. See the crate
//! documentation.
fn main() {
    walkv::main(walkv::Variant::Fixed)
}
