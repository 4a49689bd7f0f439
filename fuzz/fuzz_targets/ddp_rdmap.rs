//! cargo-fuzz target: see `bodies::ddp_rdmap`.
#![no_main]

#[path = "../bodies.rs"]
#[allow(dead_code)] // each target uses one of the bodies
mod bodies;

libfuzzer_sys::fuzz_target!(|data: &[u8]| bodies::ddp_rdmap(data));
