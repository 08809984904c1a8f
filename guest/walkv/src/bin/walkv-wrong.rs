//! A plausible wrong patch of the write-ahead-log server: the buggy one with a 2 ms timer. It
//! still acknowledges before it fsyncs. See the crate documentation.
fn main() {
    walkv::main(walkv::Variant::Wrong)
}
