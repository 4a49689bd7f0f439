//! iWARP wire formats and fast-path framing.
//!
//! Everything in this crate is sans-IO: plain functions and structs over bytes.
//!
//! * [`crc`]: CRC32c (Castagnoli) as MPA uses it, SIMD-accelerated.
//! * [`mpa`]: MPA (RFC 5044) startup frames with the RFC 6581 enhanced data, FPDU framing
//!   (transmit) and deframing (receive), markers, MULPDU.
//! * [`ddp`]: DDP (RFC 5041) tagged and untagged segment headers.
//! * [`rdmap`]: RDMAP (RFC 5040) opcodes, RDMA Read Request, Terminate and the error
//!   layer/type/code triplets of RFC 5040 and RFC 5041.
//! * [`rdma`]: the RDMAP/DDP queue-pair engine (RFC 5040, RFC 5041): memory regions,
//!   work requests, segmentation, placement, completions, Terminate.
//! * [`tcp`]: the MPA-aware TCP connection engine (RFC 9293 with RFC 5961, 6298, 6528,
//!   7323, 2018, 5681, 6582), sans-IO over `smoltcp`'s wire types.
//! * [`port`]: burst packet I/O ([`port::Port`]) and the in-memory simulated wire
//!   ([`port::mem`]) with seeded fault injection.
//! * [`net`]: Ethernet, ARP, IPv4 and ICMP echo for the poll-mode core, sans-IO except
//!   for the [`port::Port`] it writes replies and segments to.
//! * [`lcore`]: the poll-mode core loop (port → TCP → MPA → DDP/RDMAP and back).
//! * [`rings`]: the rings between consumers, the control thread and the core.
#![forbid(unsafe_code)]

pub mod crc;
pub mod ddp;
pub mod lcore;
pub mod limits;
pub mod mpa;
pub mod net;
pub mod port;
pub mod rdma;
pub mod rdmap;
pub mod rings;

/// Hex text (white space ignored) to octets, for this crate's unit tests.
#[cfg(test)]
pub(crate) fn hex(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}
pub mod tcp;
