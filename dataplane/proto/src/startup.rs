//! MPA startup state machines (RFC 5044 section 7.1, RFC 6581), sans-IO.
//!
//! Two machines, [`Initiator`] and [`Responder`], each driving one TCP connection through
//! the MPA Startup Phase into Full Operation. They own no socket, clock or thread: the
//! caller feeds them
//!
//! * received octets: `on_data(&[u8], now)`,
//! * connection events: `on_closed(CloseKind)`,
//! * time: `on_timeout(now)`, after asking `poll_timeout()` for the next deadline
//!   (times are `std::time::Instant`s the caller supplies),
//! * ULP decisions: [`Responder::accept`] / [`Responder::reject`] after
//!   [`Event::RequestReceived`]; [`Initiator::confirm`] / [`Initiator::refuse`] after
//!   [`Event::ReplyReceived`] when [`InitiatorConfig::confirm_reply`] is set; `abort()`
//!
//! and drains [`Output`]s with `poll_output()`: octets to write to TCP, in order
//! ([`Output::Send`]), a request to close TCP ([`Output::Close`]) and [`Event`]s for the
//! consumer. Once a machine has finished (established, rejected, failed), it ignores further
//! input: octets that arrive after [`Event::Established`] belong to the dataplane, which
//! continues from [`Established::rx_pending`]. A successful startup ends with
//! [`Event::Established`], which hands over
//! everything the dataplane needs to continue exactly where the machine stopped: the
//! per-direction [`FpduMode`], the transmit and receive stream positions (markers count
//! from the first octet after each side's last startup frame), the received FPDU-mode
//! octets not consumed, and the next MSN of each untagged queue.
//!
//! # What the machines produce on the wire
//!
//! Only startup frames and, in FPDU mode, the FPDUs that connection establishment itself
//! requires: the RTR of RFC 6581 9.2 (initiator), the zero-length RDMA Read Response that
//! answers a Read RTR (responder), and Terminate messages with Layer 2 / EType 0
//! (RFC 6581 8): code 5 local catastrophic, 6 insufficient IRD, 7 no matching RTR. Every
//! FPDU goes through [`wire::mpa::fpdu::Framer`] started at the marker origin, so when
//! markers are on the first octets are the marker `00 00 00 00` (RFC 5044 7.1.2 rule 7).
//!
//! # Dialects
//!
//! [`Dialect::Rfc6581`] is the default. [`Dialect::Draft2010`] (the A/B/C RTR flags of
//! draft-ietf-storm-mpa-peer-connect-01) and [`Dialect::RtrFrame2007`] (the "MPA ID Rtr
//! Frame" proposal) are opt-in, per machine, and never chosen automatically.

use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

use wire::mpa::deframe::{DeframeError, Deframer};
pub use wire::mpa::fpdu::FpduMode;
use wire::mpa::fpdu::Framer;
pub use wire::mpa::startup_frame::{
    Dialect, EnhancedData, FrameKind, StartupFrame, StartupFrameError,
};

use crate::ird_ord::IrdOrd;
use crate::rtr::{RtrType, RtrTypes};
pub use wire::mpa::MpaErrorCode;

mod initiator;
mod responder;

pub use initiator::{Initiator, InitiatorConfig, InitiatorState};
pub use responder::{AcceptParams, Responder, ResponderConfig, ResponderState};

/// Default time an Initiator waits for the MPA Reply (like Linux siw's `MPAREQ_TIMEOUT`).
pub const DEFAULT_REPLY_TIMEOUT: Duration = Duration::from_secs(10);
/// Default time a Responder waits for the MPA Request (like Linux siw's `MPAREP_TIMEOUT`).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Default time a peer-to-peer Responder waits for the RTR (or a 2007-dialect Responder for
/// the Rtr Frame) after sending its Reply.
pub const DEFAULT_RTR_TIMEOUT: Duration = Duration::from_secs(10);
/// Default time a client-server Responder waits for the Initiator's first FPDU after its
/// Reply.
pub const DEFAULT_FIRST_FPDU_TIMEOUT: Duration = Duration::from_secs(10);
/// Terminate, Layer 2 (LLP) / EType 0 (MPA) / `code`, no copied headers (M = D = R = 0):
/// QN 2, MSN `msn`, MO 0, L = 1 (RFC 6581 section 8).
pub(crate) fn mpa_terminate(code: MpaErrorCode, msn: u32) -> Vec<u8> {
    wire::rdmap::terminate_ulpdu(&wire::rdmap::Terminate::llp_mpa(code), msn)
}

/// Which end of the MPA startup a machine plays (RFC 5044 7.1: the Initiator sends the
/// Request; unrelated to which side opened TCP).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// Sends the MPA Request Frame.
    Initiator,
    /// Answers with the MPA Reply Frame.
    Responder,
}

/// How the TCP connection ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CloseKind {
    /// The peer's FIN arrived (graceful close of its half connection).
    Fin,
    /// The connection was reset or lost.
    Reset,
}

/// Something for the caller to do or to report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    /// Write these octets to TCP, after everything sent before.
    Send(Vec<u8>),
    /// Close the TCP connection (after writing the octets already output). RFC 6581 9.3
    /// speaks of "resetting the connection" after a Terminate; an abortive close is fine.
    Close,
    /// Report this to the consumer.
    Event(Event),
}

/// A report to the consumer (ULP / connection manager).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// Responder: a valid MPA Request arrived; answer with [`Responder::accept`] or
    /// [`Responder::reject`] (RFC 5044 7.1.2 rule 2, 7.1.4.2).
    RequestReceived(Box<RequestReceived>),
    /// Initiator with [`InitiatorConfig::confirm_reply`]: a valid accepting MPA Reply
    /// arrived; answer with [`Initiator::confirm`] or [`Initiator::refuse`]
    /// (RFC 5044 7.1.2 rule 3).
    ReplyReceived(Box<ReplyReceived>),
    /// Startup complete: FPDU mode on both half connections. The machine is finished.
    Established(Box<Established>),
    /// The connection was rejected by a Reply with R = 1 (sent or received). MPA has exited;
    /// TCP is left open for the ULP to close or reuse (RFC 5044 7.1.2 rules 2 and 3).
    Rejected(Box<Rejected>),
    /// Startup failed. Whether TCP is to be closed is said by an [`Output::Close`] next to it.
    Failed(Box<Failure>),
}

/// A valid MPA Request, as the Responder's ULP sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestReceived {
    /// The Request as received; `private_data` is the ULP Private Data (after the enhanced
    /// word, if any).
    pub request: StartupFrame,
    /// Whether the Request is enhanced (S with Rev >= 2; RFC 6581 section 6 and 10).
    pub enhanced: bool,
    /// The initiator's IRD and ORD (enhanced Requests).
    pub initiator_ird_ord: Option<(u16, u16)>,
    /// Flag A: peer-to-peer model requested (RFC 6581 9.2).
    pub peer_to_peer: bool,
    /// RTR types the initiator offered (flags B, C, D; empty without A).
    pub offered_rtr: RtrTypes,
}

/// A valid accepting MPA Reply, as the Initiator's ULP sees it before confirming.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplyReceived {
    /// The Reply as received.
    pub reply: StartupFrame,
    /// Negotiated IRD/ORD (enhanced).
    pub ird_ord: Option<IrdOrd>,
}

/// Next MSN per untagged queue (RFC 5041: MSNs start at 1 per queue).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct QueueMsns {
    /// QN 0 (Send messages).
    pub send: u32,
    /// QN 1 (RDMA Read Requests).
    pub read_request: u32,
    /// QN 2 (Terminate).
    pub terminate: u32,
}

impl Default for QueueMsns {
    fn default() -> Self {
        Self {
            send: 1,
            read_request: 1,
            terminate: 1,
        }
    }
}

/// Sink of a zero-length RDMA Read RTR the Initiator sent: the dataplane must expect (and
/// absorb) the zero-length RDMA Read Response the Responder answers with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReadRtrSink {
    /// Sink STag of the Read Request.
    pub stag: u32,
    /// Sink tagged offset.
    pub to: u64,
}

/// Everything the dataplane needs to enter Full Operation where the machine stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Established {
    /// This side's role.
    pub role: Role,
    /// The dialect used.
    pub dialect: Dialect,
    /// The MPA Request (sent or received).
    pub request: StartupFrame,
    /// The MPA Reply (sent or received).
    pub reply: StartupFrame,
    /// FPDU mode of what this side sends (markers: the peer's M; CRC: either side's C).
    pub tx_mode: FpduMode,
    /// FPDU mode of what this side receives (markers: this side's M; CRC: either side's C).
    pub rx_mode: FpduMode,
    /// Negotiated IRD/ORD (enhanced startup only).
    pub ird_ord: Option<IrdOrd>,
    /// Peer-to-peer model negotiated (an RTR was or will be the first FPDU).
    pub peer_to_peer: bool,
    /// The RTR this side sent (Initiator) or received and consumed (Responder).
    pub rtr: Option<RtrType>,
    /// Initiator that sent a Read RTR: the Read Response to expect.
    pub read_rtr_sink: Option<ReadRtrSink>,
    /// Stream position (from the transmit marker origin) of the next octet to send: 0
    /// unless the machine already sent FPDUs (RTR, Read Response).
    pub tx_offset: u64,
    /// Stream position (from the receive marker origin) of `rx_pending[0]`.
    pub rx_offset: u64,
    /// FPDU-mode octets received and not consumed by the machine, to be fed to a
    /// [`Deframer`] at `rx_offset` (see [`Established::deframer`]). For a client-server
    /// Responder they begin with the first FPDU, which the machine validated but did not
    /// consume: it is the ULP's first message.
    pub rx_pending: Vec<u8>,
    /// Next MSN per queue for messages this side sends.
    pub tx_next_msn: QueueMsns,
    /// Next MSN per queue expected from the peer.
    pub rx_next_msn: QueueMsns,
    /// Client-server model without an RTR: the Initiator's ULP must send the first message,
    /// and the Responder sends nothing before it (RFC 5044 7.1.2 rule 4). For a Responder,
    /// that first FPDU has arrived by the time this is reported.
    pub initiator_sends_first: bool,
}

impl Established {
    /// A [`Framer`] continuing this side's transmit stream.
    pub fn framer(&self) -> Framer {
        Framer::at_offset(self.tx_mode, self.tx_offset)
    }

    /// A [`Deframer`] continuing the receive stream at `rx_offset`; feed it `rx_pending`
    /// first.
    pub fn deframer(&self) -> Deframer {
        Deframer::at_offset(self.rx_mode, self.rx_offset)
    }
}

/// A rejected connection (R = 1): MPA exited, TCP open.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejected {
    /// This side's role (Initiator: the peer rejected; Responder: we rejected).
    pub role: Role,
    /// The Reply with R = 1 (received or sent); its `private_data` is the ULP's reason.
    pub reply: StartupFrame,
    /// The Responder's IRD/ORD from an enhanced reject (RFC 6581 9.1: "The initiator MUST
    /// pass the responder provided IRD and ORD to the ULP for both MPA Accept and Reject
    /// messages").
    pub responder_ird_ord: Option<(u16, u16)>,
    /// Responder rejected because the initiator IRD is below the ULP-required ORD (the
    /// Reply's ORD is that required ORD; RFC 6581 9.1).
    pub insufficient_initiator_ird: bool,
    /// Octets received after the startup frames: not MPA, the ULP's to use.
    pub trailing: Vec<u8>,
}

/// What a machine was waiting for when a timeout fired.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Waiting {
    /// The MPA Request (Responder; also the Responder/Responder case of RFC 5044 7.1.2
    /// rule 8).
    Request,
    /// The MPA Reply (Initiator).
    Reply,
    /// The RTR or first FPDU (Responder).
    FirstFpdu,
    /// The 2007 dialect's Rtr Frame (Responder).
    RtrFrame,
}

/// Why startup failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StartupError {
    /// An invalid Request/Reply (bad key, wrong kind, Rev, PD_Length, S without data,
    /// truncated): TCP closed, error 4 (RFC 5044 7.1.1, 7.1.2 rules 2, 3, 5, 8, 9).
    InvalidFrame(StartupFrameError),
    /// The Reply to an enhanced Request is not enhanced (Rev < 2 or S clear): RFC 6581 10
    /// requires an enhanced responder to answer enhanced, and an unenhanced responder
    /// closes instead of answering. Treated as an improperly formatted Reply: error 4.
    ReplyNotEnhanced {
        /// Rev of the Reply.
        rev: u8,
        /// Its S bit.
        s: bool,
    },
    /// The Reply to an unenhanced Request is enhanced (RFC 6581 10: "it MUST respond with
    /// an unenhanced MPA message"): error 4.
    ReplyUnexpectedlyEnhanced,
    /// The Reply sets flag A to a Request without A (RFC 6581 9.2: "The responder MUST set
    /// Control Flag A to 0 if Control Flag A is 0 in the request"): error 4.
    UnrequestedPeerToPeer,
    /// Octets arrived where none may: after the Request and before this Responder sent its
    /// Reply (the Initiator must wait for the Reply, RFC 5044 7.1.2 rule 3): error 4.
    UnexpectedData {
        /// How many octets.
        octets: usize,
    },
    /// No frame or FPDU within the configured time (RFC 5044 7.1.2 rules 8 and 10).
    Timeout(Waiting),
    /// TCP closed or reset before startup completed: error 1.
    TcpClosed(CloseKind),
    /// The first FPDU failed MPA validation (CRC or marker): error 2 or 3. MPA does not
    /// close TCP for these (RFC 5044 8); the ULP is expected to.
    Fpdu(DeframeError),
    /// Initiator: the Responder's ORD needs an IRD above our resources: TERM 2/0/6 sent
    /// (RFC 6581 9.1).
    InsufficientIrd {
        /// IRD required (the Responder ORD).
        required: u16,
        /// The most this side can provide.
        max: u16,
    },
    /// Initiator: peer-to-peer requested but no RTR type in common with the Reply (or the
    /// Reply dropped flag A): TERM 2/0/7 sent (RFC 6581 9.2).
    NoMatchingRtr {
        /// RTR types the Reply allows.
        responder: RtrTypes,
        /// RTR types this side can send.
        local: RtrTypes,
    },
    /// Responder: the first FPDU of a peer-to-peer connection is not an RTR of a type we
    /// accept: TERM 2/0/7 sent.
    NotAnRtr,
    /// The peer sent a Terminate message (Layer, EType, Error Code as received).
    PeerTerminated {
        /// Layer (2 = LLP/MPA).
        layer: u8,
        /// Error type (0 = MPA for layer 2).
        etype: u8,
        /// Error code.
        code: u8,
    },
    /// The local side aborted (ULP request or a local error with no specific code): TERM
    /// 2/0/5 sent if FPDU mode had begun on our transmit side (RFC 6581 9.3).
    LocalCatastrophic,
}

impl StartupError {
    /// The MPA error code reported for this failure (RFC 5044 8, RFC 6581 8).
    pub fn code(&self) -> MpaErrorCode {
        match self {
            Self::InvalidFrame(_)
            | Self::ReplyNotEnhanced { .. }
            | Self::ReplyUnexpectedlyEnhanced
            | Self::UnrequestedPeerToPeer
            | Self::UnexpectedData { .. }
            | Self::Timeout(_) => MpaErrorCode::InvalidStartupFrame,
            Self::TcpClosed(_) => MpaErrorCode::TcpClosed,
            Self::Fpdu(e) => e.code(),
            Self::InsufficientIrd { .. } => MpaErrorCode::InsufficientIrd,
            Self::NoMatchingRtr { .. } | Self::NotAnRtr => MpaErrorCode::NoMatchingRtr,
            Self::PeerTerminated {
                layer: 2,
                etype: 0,
                code,
            } => MpaErrorCode::from_code(*code).unwrap_or(MpaErrorCode::TcpClosed),
            Self::PeerTerminated { .. } => MpaErrorCode::TcpClosed,
            Self::LocalCatastrophic => MpaErrorCode::LocalCatastrophic,
        }
    }
}

impl fmt::Display for StartupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidFrame(e) => write!(f, "{e}"),
            Self::ReplyNotEnhanced { rev, s } => write!(
                f,
                "{}: Reply to an enhanced Request is not enhanced (Rev {rev}, S {})",
                self.code(),
                u8::from(*s)
            ),
            Self::ReplyUnexpectedlyEnhanced => {
                write!(
                    f,
                    "{}: enhanced Reply to an unenhanced Request",
                    self.code()
                )
            }
            Self::UnrequestedPeerToPeer => {
                write!(f, "{}: Reply sets flag A the Request did not", self.code())
            }
            Self::UnexpectedData { octets } => write!(
                f,
                "{}: {octets} octets arrived before the Reply was sent",
                self.code()
            ),
            Self::Timeout(w) => write!(f, "{}: timed out waiting for {w:?}", self.code()),
            Self::TcpClosed(k) => write!(f, "{}: {k:?} during startup", self.code()),
            Self::Fpdu(e) => write!(f, "{e}"),
            Self::InsufficientIrd { required, max } => write!(
                f,
                "{}: responder ORD {required} exceeds our IRD limit {max}",
                self.code()
            ),
            Self::NoMatchingRtr { responder, local } => write!(
                f,
                "{}: responder allows {responder:?}, we can send {local:?}",
                self.code()
            ),
            Self::NotAnRtr => write!(f, "{}: first FPDU is not an accepted RTR", self.code()),
            Self::PeerTerminated { layer, etype, code } => write!(
                f,
                "peer sent Terminate layer {layer} etype {etype} code {code}"
            ),
            Self::LocalCatastrophic => write!(f, "{}", self.code()),
        }
    }
}

impl std::error::Error for StartupError {}

/// A failed startup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// Why.
    pub error: StartupError,
    /// The MPA error code of the Terminate sent to the peer, if one was.
    pub term_sent: Option<MpaErrorCode>,
    /// RFC 6581 10 fallback (opt-in, [`InitiatorConfig::rev1_fallback`]): the enhanced
    /// Request was answered by a TCP close or reset without a Reply, as an unenhanced
    /// responder does; the connection manager may reconnect with
    /// [`InitiatorConfig::unenhanced_fallback`].
    pub retry_unenhanced: bool,
    /// The peer's IRD/ORD, when an enhanced Reply had been received.
    pub ird_ord: Option<IrdOrd>,
}

impl Failure {
    /// The MPA error code to report (RFC 5044 8).
    pub fn code(&self) -> MpaErrorCode {
        self.error.code()
    }
}

/// Misuse of a machine's API (not a protocol error).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ApiError {
    /// The call is not valid in the current state.
    InvalidState,
    /// Private Data (plus the enhanced word) above 512 octets.
    PrivateDataTooLong {
        /// The PD_Length it would need.
        pd_length: usize,
    },
    /// IRD or ORD above 0x3FFF.
    IrdOrdTooLarge,
    /// Peer-to-peer needs the enhanced format (or the 2007 dialect's S bit).
    PeerToPeerNeedsEnhanced,
    /// No RTR type configured: a peer-to-peer Initiator offers at least one, and an
    /// enhanced Responder "MUST support at least one RTR indication option" (RFC 6581 9.2).
    NoRtrTypes,
    /// An accepted Rev range that does not contain 1 (RFC 6581 6: "A host accepting MPA
    /// connections MUST continue to accept MPA Requests with version one").
    MustAcceptRev1,
    /// Draft2010/Rfc6581 enhanced data requires Rev 2.
    BadRev,
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

impl std::error::Error for ApiError {}

/// Builds, for a dataplane that has taken over a connection, a Terminate FPDU with Layer 2,
/// EType 0, Error Code 5 (local catastrophic, RFC 6581 9.3: "MUST generate the TERM message
/// that contains Layer 2, Error Type 0, Error Code 5 when it encounters any error locally for
/// which the special Error Code is not defined ... before resetting the connection").
/// `msn` is the next MSN of queue 2. Returns the octets to send before closing.
pub fn local_catastrophic_terminate(framer: &mut Framer, msn: u32) -> Vec<u8> {
    let mut out = Vec::new();
    // A 22-octet ULPDU always frames.
    let _ = framer.frame(
        &mpa_terminate(MpaErrorCode::LocalCatastrophic, msn),
        &mut out,
    );
    out
}

// ---------------------------------------------------------------------------------------
// Shared machinery: the output queue and the adapters to the dataplane's framer/deframer.
// ---------------------------------------------------------------------------------------

/// Output queue shared by both machines.
#[derive(Debug, Default)]
pub(crate) struct Outputs {
    queue: VecDeque<Output>,
}

impl Outputs {
    pub(crate) fn send(&mut self, bytes: Vec<u8>) {
        if !bytes.is_empty() {
            self.queue.push_back(Output::Send(bytes));
        }
    }

    pub(crate) fn close(&mut self) {
        self.queue.push_back(Output::Close);
    }

    pub(crate) fn event(&mut self, e: Event) {
        self.queue.push_back(Output::Event(e));
    }

    pub(crate) fn fail(&mut self, f: Failure) {
        self.queue
            .push_back(Output::Event(Event::Failed(Box::new(f))));
    }

    pub(crate) fn pop(&mut self) -> Option<Output> {
        self.queue.pop_front()
    }
}

/// Frames one ULPDU the machine itself sends (RTR, Read Response, Terminate).
pub(crate) fn frame_ulpdu(framer: &mut Framer, ulpdu: &[u8], out: &mut Vec<u8>) -> bool {
    framer.frame(ulpdu, out).is_ok()
}

/// First FPDU found in the receive stream by [`FirstFpduProbe`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FirstFpdu {
    /// Stream position just past it.
    pub(crate) end: u64,
    /// Its ULPDU.
    pub(crate) ulpdu: Vec<u8>,
}

/// Runs a [`Deframer`] from the receive marker origin until the first FPDU is complete and
/// valid, without consuming the octets (they stay in the machine's buffer).
#[derive(Debug)]
pub(crate) struct FirstFpduProbe {
    deframer: Deframer,
    first: Option<FirstFpdu>,
}

impl FirstFpduProbe {
    pub(crate) fn new(mode: FpduMode) -> Self {
        Self {
            deframer: Deframer::new(mode),
            first: None,
        }
    }

    /// Feeds new octets; returns the first FPDU once complete. An error is returned only if
    /// it hits the first FPDU (errors in later FPDUs are the dataplane's to find).
    pub(crate) fn push(&mut self, data: &[u8]) -> Result<Option<FirstFpdu>, DeframeError> {
        if self.first.is_some() {
            return Ok(self.first.clone());
        }
        let mut first = None;
        let r = self.deframer.push(data, |f| {
            if first.is_none() {
                first = Some(FirstFpdu {
                    end: f.stream_offset + f.wire_len as u64,
                    ulpdu: f.ulpdu.to_vec(),
                });
            }
        });
        match (r, first) {
            (_, Some(f)) => {
                self.first = Some(f);
                Ok(self.first.clone())
            }
            (Err(e), None) => Err(e),
            (Ok(()), None) => Ok(None),
        }
    }
}

/// The negotiated FPDU modes (RFC 5044 7.1.1): CRC in both directions if either frame set
/// C; markers in what the Initiator sends if the Reply set M, in what the Responder sends
/// if the Request set M.
pub(crate) fn fpdu_modes(
    request: &StartupFrame,
    reply: &StartupFrame,
    role: Role,
) -> (FpduMode, FpduMode) {
    let crc = request.flags.c || reply.flags.c;
    let initiator_tx = FpduMode {
        markers: reply.flags.m,
        crc,
    };
    let responder_tx = FpduMode {
        markers: request.flags.m,
        crc,
    };
    match role {
        Role::Initiator => (initiator_tx, responder_tx),
        Role::Responder => (responder_tx, initiator_tx),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_codes() {
        assert_eq!(
            StartupError::Timeout(Waiting::Request).code(),
            MpaErrorCode::InvalidStartupFrame
        );
        assert_eq!(
            StartupError::PeerTerminated {
                layer: 2,
                etype: 0,
                code: 6
            }
            .code(),
            MpaErrorCode::InsufficientIrd
        );
        assert_eq!(
            StartupError::PeerTerminated {
                layer: 0,
                etype: 1,
                code: 1
            }
            .code(),
            MpaErrorCode::TcpClosed
        );
    }

    #[test]
    fn local_catastrophic_terminate_is_a_term_2_0_5() {
        let mut framer = Framer::new(FpduMode::default());
        let b = local_catastrophic_terminate(&mut framer, 1);
        assert_eq!(b.len(), 2 + 22 + 4);
        assert_eq!(&b[..2], &[0, 22]);
        assert_eq!(&b[2 + 18..2 + 20], &[0x20, 5]);
    }
}
