//! The iWARP protocol machines, sans-IO: state over octets and time, with no sockets,
//! threads, clocks or packet I/O in them (those are the `dataplane` crate's).
//!
//! * [`tcp`]: the MPA-aware TCP connection engine (RFC 9293 with RFC 5961, 6298, 6528,
//!   7323, 2018, 5681, 6582) on `smoltcp`'s wire types: segments in, segments out, every
//!   new segment starting with an FPDU; SYN cookies, compact TIME-WAIT.
//! * [`qp`]: the RDMAP/DDP queue pair (RFC 5040, RFC 5041): memory regions and STags,
//!   work requests, segmentation, placement, completions, Terminate.
//! * [`startup`]: the MPA startup machines (RFC 5044 section 7.1, RFC 6581): the Initiator
//!   and the Responder, IRD/ORD negotiation, peer-to-peer RTR.
//!
//! Everything they put on or take off the wire goes through the `wire` crate's codecs.
#![forbid(unsafe_code)]

pub mod ird_ord;
pub mod qp;
pub mod rtr;
pub mod startup;
pub mod tcp;
