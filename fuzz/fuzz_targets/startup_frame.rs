//! Arbitrary bytes into the MPA startup frame parser, whole and split at the first octet's
//! value; whatever parses must re-encode to the same octets.
#![no_main]

use dataplane::mpa::startup::{parse_with, Dialect, FrameKind, ParseOptions, Parsed};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for dialect in [Dialect::Rfc6581, Dialect::Draft2010, Dialect::RtrFrame2007] {
        for expected in [None, Some(FrameKind::Request), Some(FrameKind::Reply)] {
            let mut opts = ParseOptions::new(expected);
            opts.dialect = dialect;
            if let Ok(Parsed::Frame { frame, consumed }) = parse_with(data, &opts) {
                assert!(consumed <= data.len());
                let again = frame.to_bytes(dialect).expect("a parsed frame re-encodes");
                assert_eq!(again.len(), consumed);
            }
        }
    }
});
