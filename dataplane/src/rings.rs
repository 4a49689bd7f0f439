//! The rings that join the three kinds of threads: consumers, the control thread and the
//! poll-mode core.
//!
//! * Consumer ↔ core, per QP: the send queue and receive queue ([`QpRings`]) and the
//!   completion queues ([`CqRing`]) are bounded lock-free rings in shared memory
//!   (`crossbeam::queue::ArrayQueue`). Posting a work request or polling a completion is
//!   a compare-and-swap, never a system call.
//! * Control thread ↔ core: [`CoreCmd`] and [`CoreEvent`] travel through channels. They
//!   carry connection management and the streaming-mode octets of the MPA startup, and end
//!   with [`CoreCmd::Publish`], which hands an established QP to the core.

use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use crossbeam::queue::ArrayQueue;

use crate::mpa::fpdu::FpduMode;
use crate::rdma::{Completion, QpConfig, RecvWr, SendWr};
use crate::rdmap::Terminate;
use crate::tcp::FourTuple;

/// Names one TCP connection of a core. The control thread picks the ids of the connections
/// it opens ([`CONN_ID_ACTIVE`] set); the core picks those it accepts.
pub type ConnId = u64;

/// Bit set in the [`ConnId`]s of actively opened connections.
pub const CONN_ID_ACTIVE: ConnId = 1 << 63;

/// A completion queue: filled by the core, drained by the consumer.
#[derive(Debug)]
pub struct CqRing {
    ring: ArrayQueue<Completion>,
}

impl CqRing {
    /// A CQ with room for `depth` completions (at least 1).
    pub fn new(depth: usize) -> Self {
        CqRing {
            ring: ArrayQueue::new(depth.max(1)),
        }
    }

    /// Takes the oldest completion.
    pub fn pop(&self) -> Option<Completion> {
        self.ring.pop()
    }

    /// Adds a completion; gives it back when the CQ is full.
    pub fn push(&self, c: Completion) -> Result<(), Completion> {
        self.ring.push(c)
    }

    /// True when no more completion fits.
    pub fn is_full(&self) -> bool {
        self.ring.is_full()
    }

    /// Completions waiting.
    pub fn len(&self) -> usize {
        self.ring.len()
    }

    /// True when no completion waits.
    pub fn is_empty(&self) -> bool {
        self.ring.is_empty()
    }

    /// Room, in completions.
    pub fn capacity(&self) -> usize {
        self.ring.capacity()
    }
}

/// Where a QP is, as its consumer sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum QpRingState {
    /// Created, not connected yet: work requests wait in the rings.
    Init = 0,
    /// Connected and published to a core: work requests flow.
    Rts = 1,
    /// Failed or closed: every work request completes with an error.
    Error = 2,
}

/// The work queues of one QP, shared by its consumer and its core.
#[derive(Debug)]
pub struct QpRings {
    /// QP number.
    pub qpn: u32,
    /// Send queue (consumer → core).
    pub sq: ArrayQueue<SendWr>,
    /// Receive queue (consumer → core).
    pub rq: ArrayQueue<RecvWr>,
    /// Where send-side completions go.
    pub send_cq: Arc<CqRing>,
    /// Where receive completions go.
    pub recv_cq: Arc<CqRing>,
    state: AtomicU8,
}

impl QpRings {
    /// Rings with room for `max_send_wr` and `max_recv_wr` work requests.
    pub fn new(
        qpn: u32,
        max_send_wr: usize,
        max_recv_wr: usize,
        send_cq: Arc<CqRing>,
        recv_cq: Arc<CqRing>,
    ) -> Self {
        QpRings {
            qpn,
            sq: ArrayQueue::new(max_send_wr.max(1)),
            rq: ArrayQueue::new(max_recv_wr.max(1)),
            send_cq,
            recv_cq,
            state: AtomicU8::new(QpRingState::Init as u8),
        }
    }

    /// The state the core last published.
    pub fn state(&self) -> QpRingState {
        match self.state.load(Ordering::Acquire) {
            0 => QpRingState::Init,
            1 => QpRingState::Rts,
            _ => QpRingState::Error,
        }
    }

    /// Publishes a new state.
    pub fn set_state(&self, s: QpRingState) {
        self.state.store(s as u8, Ordering::Release);
    }
}

/// Everything the core needs to run an established QP: published by the control thread.
#[derive(Debug)]
pub struct QpPublish {
    /// FPDU mode of what we send.
    pub tx_mode: FpduMode,
    /// Transmit stream position from the transmit marker origin.
    pub tx_offset: u64,
    /// FPDU mode of what we receive.
    pub rx_mode: FpduMode,
    /// Receive stream position, from the receive marker origin, of the octet at
    /// `rx_stream_pos`.
    pub rx_offset: u64,
    /// TCP receive stream offset (0 = first octet after the SYN) where FPDU mode begins:
    /// the first octet the startup machine did not consume.
    pub rx_stream_pos: u64,
    /// The QP's parameters (negotiated IRD/ORD, next MSNs).
    pub config: QpConfig,
    /// The consumer's rings.
    pub rings: Arc<QpRings>,
}

/// A command from the control thread to a core.
#[derive(Debug)]
pub enum CoreCmd {
    /// Accept TCP connections on this local port.
    Listen {
        /// TCP port.
        port: u16,
    },
    /// Stop accepting on this port.
    Unlisten {
        /// TCP port.
        port: u16,
    },
    /// Open a TCP connection (active open) from an ephemeral port.
    Connect {
        /// The id to report it under (has [`CONN_ID_ACTIVE`]).
        conn: ConnId,
        /// Where to.
        remote: SocketAddrV4,
    },
    /// Write these octets (one record: an MPA startup frame or an FPDU the startup
    /// machine built) to the connection in streaming mode.
    Send {
        /// Connection.
        conn: ConnId,
        /// Octets.
        bytes: Vec<u8>,
    },
    /// The MPA startup completed: run the QP in FPDU mode from now on.
    Publish {
        /// Connection.
        conn: ConnId,
        /// The QP.
        qp: Box<QpPublish>,
    },
    /// Close the connection: gracefully (FIN after queued data) or by RST.
    Close {
        /// Connection.
        conn: ConnId,
        /// Send RST instead of FIN.
        abort: bool,
    },
}

/// Why a connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CloseReason {
    /// The peer closed (FIN), after which we closed too.
    PeerClosed,
    /// Reset by the peer.
    Reset,
    /// Retransmissions or the connect attempt timed out.
    TimedOut,
    /// We closed it (control thread request, Terminate, error).
    Local,
    /// The connect attempt failed (no route, no port).
    Unreachable,
}

/// An event from a core to the control thread.
#[derive(Debug)]
pub enum CoreEvent {
    /// An active open completed its handshake.
    Connected {
        /// Connection.
        conn: ConnId,
        /// Its 4-tuple.
        tuple: FourTuple,
    },
    /// A passive open completed its handshake on a listening port.
    Accepted {
        /// Connection (chosen by the core).
        conn: ConnId,
        /// Its 4-tuple.
        tuple: FourTuple,
    },
    /// Octets received in streaming mode (before [`CoreCmd::Publish`]), in order.
    Data {
        /// Connection.
        conn: ConnId,
        /// Octets.
        bytes: Vec<u8>,
    },
    /// The peer's FIN arrived in streaming mode.
    PeerFin {
        /// Connection.
        conn: ConnId,
    },
    /// The QP of a published connection left RTS.
    QpError {
        /// Connection.
        conn: ConnId,
        /// The Terminate we sent, if any.
        term_sent: Option<Terminate>,
        /// The Terminate we received, if any.
        term_received: Option<Terminate>,
    },
    /// The connection is gone.
    Closed {
        /// Connection.
        conn: ConnId,
        /// Why.
        reason: CloseReason,
    },
}
