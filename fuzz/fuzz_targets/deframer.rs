//! cargo-fuzz target: see `bodies::deframer`.
#![no_main]

#[path = "../bodies.rs"]
#[allow(dead_code)] // each target uses one of the bodies
mod bodies;

libfuzzer_sys::fuzz_target!(|data: &[u8]| bodies::deframer(data));
