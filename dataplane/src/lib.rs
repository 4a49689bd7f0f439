//! iWARP wire formats and fast-path framing.
//!
//! Everything in this crate is sans-IO: plain functions and structs over bytes.
//!
//! The wire formats themselves (CRC32c, MPA, DDP, RDMAP, the TCP segment) are the `wire`
//! crate's.
//!
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

pub mod lcore;
pub mod limits;
pub mod net;
pub mod port;
pub mod rdma;
pub mod rings;

pub mod tcp;
