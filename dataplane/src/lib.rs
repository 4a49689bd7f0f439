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
#![forbid(unsafe_code)]

pub mod crc;
pub mod ddp;
pub mod mpa;
pub mod rdmap;
