//! The wire formats: iWARP's (MPA, DDP, RDMAP) and the TCP/IP segment they ride in.
//!
//! Codecs over octets only: no connection state, no timers, no I/O. Everything above
//! (the protocol machines of `proto`, the I/O of `dataplane`) speaks through these types.
//!
//! * [`crc`]: CRC32c (Castagnoli) as MPA uses it, SIMD-accelerated.
//! * [`mpa`]: MPA (RFC 5044): the startup frames with the RFC 6581 enhanced word
//!   ([`mpa::startup`]), FPDU layout, markers and MULPDU with the transmit
//!   [`mpa::fpdu::Framer`], the streaming receive [`mpa::deframe::Deframer`], the MPA
//!   error codes.
//! * [`ddp`]: DDP (RFC 5041): tagged and untagged segment headers, DDP errors.
//! * [`rdmap`]: RDMAP (RFC 5040): opcodes, the RDMA Read Request header, Terminate, the
//!   Terminate error triplet of every layer ([`rdmap::TermError`]), and the whole
//!   ULPDUs connection setup needs (the RFC 6581 RTR messages).
//! * [`tcp`]: the TCP segment in IPv4: 4-tuple, serialization, parsing, checksums.
#![forbid(unsafe_code)]

pub mod crc;
pub mod ddp;
pub mod mpa;
pub mod rdmap;
pub mod tcp;

/// Hex text (white space ignored) to octets, for this crate's unit tests.
#[cfg(test)]
pub(crate) fn hex(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}
