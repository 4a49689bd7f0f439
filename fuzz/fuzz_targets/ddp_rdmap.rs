//! Arbitrary bytes into the DDP/RDMAP segment parser and the Terminate decoder; a parse
//! error must name a Terminate that encodes and decodes again.
#![no_main]

use dataplane::rdmap::{parse_segment, terminate_ulpdu, Terminate};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match parse_segment(data) {
        Ok(seg) => assert!(seg.payload.len() <= data.len()),
        Err(e) => {
            if let Some(term) = e.terminate(data) {
                let ulpdu = terminate_ulpdu(&term, 1);
                assert!(parse_segment(&ulpdu).is_ok());
            }
        }
    }
    let _ = Terminate::decode(data);
    let _ = Terminate::decode_lenient(data);
});
