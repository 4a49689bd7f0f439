//! CRC32c and FPDU framing throughput against memcpy (being written).
fn main() {}
