//! What the monitor reads from the guest placement's kernel, which a hostile program can forge:
//! the boot block and its page requests, output records, the exception frame, and a kernel image.
#![no_main]

use deja_kernel::placement::image::Image;
use deja_kernel::placement::{decode_output, BootBlock, ExcFrame};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&which, bytes)) = data.split_first() else { return };
    match which % 4 {
        0 => {
            if let Some(block) = BootBlock::decode(bytes) {
                let _ = block.mem_op();
                let _ = block.output_at();
                assert_eq!(BootBlock::decode(&block.encode()), Some(block));
            }
        }
        1 => {
            if let Some(records) = decode_output(bytes) {
                assert_eq!(deja_kernel::placement::encode_output(&records), bytes);
            }
        }
        2 => {
            if let Some(frame) = ExcFrame::decode(bytes) {
                let _ = frame.exception();
                assert_eq!(ExcFrame::decode(&frame.encode()), Some(frame));
            }
        }
        _ => {
            let _ = Image::parse(bytes).map(|i| i.runs());
        }
    }
});
