//! cargo-fuzz target: see `bodies::tcp_ipv4`.
#![no_main]

#[path = "../bodies.rs"]
#[allow(dead_code)] // each target uses one of the bodies
mod bodies;

libfuzzer_sys::fuzz_target!(|data: &[u8]| bodies::tcp_ipv4(data));
