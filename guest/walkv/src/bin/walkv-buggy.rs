//! The write-ahead-log server with the planted bug: it acknowledges a put once its record is
//! written, and fsyncs the log on a 200 ms timer. See the crate documentation.
fn main() {
    walkv::main(walkv::Variant::Buggy)
}
