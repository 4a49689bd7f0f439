//! The RDMAP/DDP queue-pair engine (RFC 5040, RFC 5041), sans-IO.
//!
//! * [`mr`]: memory regions ([`MemoryRegion`], [`MrTable`]) shared between the consumer
//!   thread and the core thread, in safe Rust (atomic words).
//! * [`engine`]: the queue pair ([`Qp`]): work requests in, ULPDUs out
//!   ([`Qp::poll_ulpdu`]), ULPDUs in ([`Qp::on_ulpdu`]), completions out
//!   ([`Qp::poll_completion`]).
//!
//! It sits on top of MPA: the core deframes FPDUs into ULPDUs and hands each to
//! [`Qp::on_ulpdu`]; it frames what [`Qp::poll_ulpdu`] produces.

pub mod engine;
pub mod mr;

pub use engine::{
    Completion, PostError, Qp, QpConfig, QpState, QpStats, RecvWr, SendOp, SendWr, Sge, WcOpcode,
    WcStatus,
};
pub use mr::{Access, AccessError, MemoryRegion, MrError, MrTable, RegionMemory};

#[cfg(test)]
mod tests;
