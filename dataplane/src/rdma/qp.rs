//! The queue pair: RDMAP (RFC 5040) over DDP (RFC 5041), sans-IO.

use std::collections::VecDeque;
use std::sync::Arc;

use super::mr::MrTable;
use crate::rdmap::{TermError, Terminate};

/// A local buffer: STag (lkey), TO (address) and length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Sge {
    /// The local region's STag.
    pub stag: u32,
    /// The TO of the first octet.
    pub to: u64,
    /// Length in octets.
    pub len: u32,
}

/// What a send work request does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SendOp {
    /// Send.
    Send,
    /// Send with Solicited Event.
    SendSolicited,
    /// Send with Invalidate: the peer invalidates `stag` on receipt.
    SendInvalidate {
        /// The peer's STag to invalidate.
        stag: u32,
    },
    /// Send with Solicited Event and Invalidate.
    SendSolicitedInvalidate {
        /// The peer's STag to invalidate.
        stag: u32,
    },
    /// RDMA Write of the local buffer to the peer's `remote_stag` at `remote_to`.
    Write {
        /// The peer's Data Sink STag.
        remote_stag: u32,
        /// The peer's Data Sink TO.
        remote_to: u64,
    },
    /// RDMA Read from the peer's `remote_stag` at `remote_to` into the local buffer.
    Read {
        /// The peer's Data Source STag.
        remote_stag: u32,
        /// The peer's Data Source TO.
        remote_to: u64,
    },
}

/// A send queue work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SendWr {
    /// The consumer's identifier, returned in the completion.
    pub wr_id: u64,
    /// The operation.
    pub op: SendOp,
    /// The local buffer (source of Sends and Writes, sink of Reads).
    pub local: Sge,
    /// Whether success produces a completion (errors always do).
    pub signaled: bool,
}

/// A receive queue work request: a buffer for one incoming Send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RecvWr {
    /// The consumer's identifier, returned in the completion.
    pub wr_id: u64,
    /// The buffer (its region needs LOCAL_WRITE).
    pub local: Sge,
}

/// The kind of work request a completion is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WcOpcode {
    /// A Send of any kind.
    Send,
    /// An RDMA Write.
    Write,
    /// An RDMA Read.
    Read,
    /// A receive.
    Recv,
}

/// The status of a completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WcStatus {
    /// Done.
    Success,
    /// The incoming message did not fit the receive buffer.
    LocalLengthError,
    /// A local buffer failed its protection checks, or the peer's data aimed outside it.
    LocalProtectionError,
    /// The peer refused an access to its memory (Remote Protection or Tagged Buffer
    /// error in its Terminate).
    RemoteAccessError,
    /// The peer reported an operation error.
    RemoteOperationError,
    /// The peer found the request invalid (Untagged Buffer errors: no buffer, too long).
    RemoteInvalidRequest,
    /// The queue pair went to Error before this request was done.
    Flushed,
    /// The LLP (MPA/TCP) failed, or a Terminate was sent for a local reason.
    TransportError,
}

/// A work completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Completion {
    /// The work request's `wr_id`.
    pub wr_id: u64,
    /// The status.
    pub status: WcStatus,
    /// The kind of work request.
    pub opcode: WcOpcode,
    /// Octets transferred (the message length for receives).
    pub byte_len: u32,
    /// The queue pair number.
    pub qpn: u32,
    /// A receive of a Send with Solicited Event.
    pub solicited: bool,
    /// A receive of a Send with Invalidate: the local STag it invalidated.
    pub invalidated_stag: Option<u32>,
    /// The Terminate error involved, when the error came from a Terminate sent or
    /// received.
    pub term: Option<TermError>,
}

/// Queue pair parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QpConfig {
    /// The queue pair number (reported in completions).
    pub qpn: u32,
    /// The protection domain.
    pub pd: u32,
    /// Inbound RDMA Read queue depth: how many peer Read Requests may be outstanding.
    pub ird: u16,
    /// Outbound RDMA Read queue depth: how many of our Read Requests may be outstanding.
    pub ord: u16,
    /// The next MSN to send on QN 0, 1, 2 (MSNs start at 1; an RTR sent by the control
    /// plane moves them on).
    pub tx_next_msn: [u32; 3],
    /// The next MSN expected on QN 0, 1, 2.
    pub rx_next_msn: [u32; 3],
    /// Send queue size (work requests posted and not yet completed).
    pub max_send_wr: usize,
    /// Receive queue size.
    pub max_recv_wr: usize,
    /// A zero-length RDMA Read Response (STag, TO) to absorb silently: the answer to the
    /// RFC 6581 Read RTR the control plane sent.
    pub read_rtr_sink: Option<(u32, u64)>,
}

impl QpConfig {
    /// A configuration with MSNs starting at 1, IRD = ORD = 16, queues of 1024.
    pub fn new(qpn: u32, pd: u32) -> QpConfig {
        QpConfig {
            qpn,
            pd,
            ird: 16,
            ord: 16,
            tx_next_msn: [1; 3],
            rx_next_msn: [1; 3],
            max_send_wr: 1024,
            max_recv_wr: 1024,
            read_rtr_sink: None,
        }
    }
}

/// The queue pair state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpState {
    /// Ready to send (and receive).
    Rts,
    /// A Terminate is queued or being sent; everything else is flushed.
    Terminating,
    /// Done: a Terminate was sent or received, or the LLP failed.
    Error,
}

/// Why a work request was not posted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PostError {
    /// The queue is full.
    QueueFull,
    /// The queue pair is not in RTS.
    InvalidState,
    /// A length does not fit (the local buffer, or an RDMA Read of more than 2^32-1).
    BadLength,
    /// The local buffer failed its checks (STag, PD, access, bounds).
    LocalProtection(super::mr::MrError),
    /// An RDMA Read with ORD 0.
    ReadNotAllowed,
}

impl std::fmt::Display for PostError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PostError::QueueFull => f.write_str("work queue full"),
            PostError::InvalidState => f.write_str("queue pair not in RTS"),
            PostError::BadLength => f.write_str("bad length"),
            PostError::LocalProtection(e) => write!(f, "local protection error: {e}"),
            PostError::ReadNotAllowed => f.write_str("RDMA Read with ORD 0"),
        }
    }
}

impl std::error::Error for PostError {}

/// Counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct QpStats {
    /// ULPDUs handed out by `poll_ulpdu`.
    pub tx_ulpdus: u64,
    /// Payload octets handed out.
    pub tx_payload_octets: u64,
    /// ULPDUs received.
    pub rx_ulpdus: u64,
    /// Payload octets placed.
    pub rx_payload_octets: u64,
    /// Messages sent (Sends, Writes, Read Requests, Read Responses).
    pub tx_messages: u64,
    /// Messages received completely.
    pub rx_messages: u64,
    /// Read Responses sent.
    pub read_responses_sent: u64,
    /// Terminates sent.
    pub terminates_sent: u64,
    /// Terminates received.
    pub terminates_received: u64,
}

/// The queue pair engine.
#[derive(Debug)]
pub struct Qp {
    cfg: QpConfig,
    mrs: Arc<MrTable>,
    state: QpState,
    cq: VecDeque<Completion>,
    term_sent: Option<Terminate>,
    term_received: Option<Terminate>,
    term_flushed: bool,
    stats: QpStats,
}

impl Qp {
    /// A queue pair in RTS.
    pub fn new(cfg: QpConfig, mrs: Arc<MrTable>) -> Qp {
        Qp {
            cfg,
            mrs,
            state: QpState::Rts,
            cq: VecDeque::new(),
            term_sent: None,
            term_received: None,
            term_flushed: false,
            stats: QpStats::default(),
        }
    }

    /// Posts a send work request.
    pub fn post_send(&mut self, wr: SendWr) -> Result<(), PostError> {
        let _ = (wr, &self.mrs);
        Err(PostError::InvalidState)
    }

    /// Posts a receive work request.
    pub fn post_recv(&mut self, wr: RecvWr) -> Result<(), PostError> {
        let _ = wr;
        Err(PostError::InvalidState)
    }

    /// Appends the next ULPDU (DDP header + payload, at most `max_ulpdu` octets) to
    /// `out`; false when there is nothing to send now.
    pub fn poll_ulpdu(&mut self, max_ulpdu: usize, out: &mut Vec<u8>) -> bool {
        let _ = (max_ulpdu, out);
        false
    }

    /// Whether `poll_ulpdu` has something to send.
    pub fn has_tx(&self) -> bool {
        false
    }

    /// One in-order ULPDU from the deframer.
    pub fn on_ulpdu(&mut self, ulpdu: &[u8]) {
        let _ = ulpdu;
    }

    /// The LLP failed under us: queue a Terminate with `err` where it can still be sent,
    /// flush everything in error.
    pub fn on_llp_error(&mut self, err: TermError) {
        let _ = err;
        self.state = QpState::Error;
    }

    /// The next completion.
    pub fn poll_completion(&mut self) -> Option<Completion> {
        self.cq.pop_front()
    }

    /// The state.
    pub fn state(&self) -> QpState {
        self.state
    }

    /// The Terminate we sent (or queued).
    pub fn terminate_sent(&self) -> Option<&Terminate> {
        self.term_sent.as_ref()
    }

    /// The Terminate the peer sent.
    pub fn terminate_received(&self) -> Option<&Terminate> {
        self.term_received.as_ref()
    }

    /// True once a Terminate has been fully handed out by `poll_ulpdu`: the caller then
    /// closes the LLP stream.
    pub fn terminate_flushed(&self) -> bool {
        self.term_flushed
    }

    /// Counters.
    pub fn stats(&self) -> QpStats {
        self.stats
    }

    /// The configuration.
    pub fn config(&self) -> &QpConfig {
        &self.cfg
    }
}
