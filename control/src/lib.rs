//! iWARP connection manager: the MPA startup state machines of RFC 5044 section 7.1 and
//! RFC 6581 (IRD/ORD negotiation, peer-to-peer RTR), sans-IO.
#![forbid(unsafe_code)]

pub mod cm;
pub mod embedded;
pub mod verbs;
