//! The verbs surface of the iWARP stack: what consumers and apps use.
//!
//! * [`verbs`]: the consumer API: [`verbs::open`] makes a [`verbs::Device`] and its
//!   poll-mode [`verbs::Core`]; protection domains, memory regions (STags, access rights),
//!   completion queues, queue pairs, work requests and completions; connect, listen,
//!   accept and reject; the Terminates of a QP in error. The few types of the layers below
//!   that a consumer meets (the core, connection ids, the MPA startup configurations, RTR
//!   types) are re-exported there, so that an app needs no other crate.
//! * [`cm`]: the connection manager, the device's control thread: TCP connect and listen
//!   through the core, the MPA startup machines (`proto::startup`) fed with the core's
//!   octets, IRD/ORD and RTR negotiated, each established QP published to the core; every
//!   wait bounded, every queue capped.
//! * [`embedded`]: the embedded default: two devices in one process over the simulated
//!   wire (`dataplane::port::mem`), with its fault configuration.
//!
//! Layers, each importing only those below it: `wire` (codecs) ← `proto` (sans-IO
//! machines) ← `dataplane` (ports, net, the poll-mode core, rings, limits) ← `control`
//! (this crate) ← the `iwarp` apps.
#![forbid(unsafe_code)]

pub mod cm;
pub mod embedded;
pub mod verbs;
