//! The I/O around the protocol machines: packets, the poll-mode core and its rings.
//!
//! The wire formats are the `wire` crate's and the protocol machines (TCP engine, queue
//! pair, MPA startup) the `proto` crate's; this crate moves octets between them and the
//! outside world.
//!
//! * [`port`]: burst packet I/O ([`port::Port`]) and the in-memory simulated wire
//!   ([`port::mem`]) with seeded fault injection.
//! * [`net`]: Ethernet, ARP, IPv4 and ICMP echo for the poll-mode core, sans-IO except
//!   for the [`port::Port`] it writes replies and segments to.
//! * [`lcore`]: the poll-mode core loop (port → TCP → MPA → DDP/RDMAP and back), its
//!   connection table and timers.
//! * [`rings`]: the rings between consumers, the control thread and the core.
//! * [`limits`]: the caps on everything a peer can make the core hold.
#![forbid(unsafe_code)]

pub mod clock;
mod counters;
pub mod lcore;
pub mod limits;
pub mod net;
pub mod port;
pub mod rings;
