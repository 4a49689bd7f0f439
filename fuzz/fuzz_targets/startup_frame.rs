//! cargo-fuzz target: see `bodies::startup_frame`.
#![no_main]

#[path = "../bodies.rs"]
mod bodies;

libfuzzer_sys::fuzz_target!(|data: &[u8]| bodies::startup_frame(data));
