//! The queue pair: RDMAP (RFC 5040) over DDP (RFC 5041), sans-IO.
//!
//! [`Qp`] turns work requests into ULPDUs and received ULPDUs into placements and
//! completions. It does no I/O: the core hands it each in-order ULPDU the MPA deframer
//! produces ([`Qp::on_ulpdu`]) and frames each ULPDU it asks for ([`Qp::poll_ulpdu`]).
//!
//! # Transmit
//!
//! * Send family: untagged DDP segments on QN 0 with the message's MSN and each segment's
//!   MO, at most MULPDU octets each, L on the last; the Invalidate STag goes in the
//!   32-bit RsvdULP field.
//! * RDMA Write: tagged segments to the remote STag at remote TO + offset.
//! * RDMA Read: one RDMA Read Request on QN 1 (sink = the local buffer, which needs
//!   LOCAL_WRITE; source = the remote STag/TO). At most ORD are outstanding; when the head
//!   of the send queue is a Read that ORD holds back, everything posted after it waits
//!   too (the send queue is processed in order).
//! * Zero-length messages are one segment with no payload.
//! * Scheduling: a Terminate goes first, at the next segment boundary, and nothing
//!   follows it. Otherwise messages are sent whole (their segments are never interleaved
//!   with another message's), and when both RDMA Read Responses and send queue messages
//!   are waiting the two alternate message by message: Read Responses go before new
//!   requests, but cannot starve the send queue.
//! * A Send or Write completes when its last segment has been handed out by
//!   [`Qp::poll_ulpdu`] (the octets are copied; TCP owns them), a Read when the last
//!   segment of its Read Response has been placed. Completions of the send queue come in
//!   posting order (a Send posted after a Read completes after it). Unsignaled work
//!   requests complete silently on success and with a completion on error.
//!
//! # Receive
//!
//! * Untagged QN 0 (Sends): the MSN must be the next expected one
//!   (else DDP "Invalid MSN - MSN range is not valid"), a receive must be posted
//!   (else "Invalid MSN - no buffer available") and MO + length must fit it (else "DDP
//!   Message too long for available buffer", and the receive completes with
//!   [`WcStatus::LocalLengthError`]). L = 1 completes the receive with the message length,
//!   the solicited flag, and, for a Send with Invalidate, the invalidated STag (which must
//!   exist and be in our PD: else RDMAP "STag cannot be Invalidated", Remote Protection
//!   for another PD, Remote Operation otherwise, as Linux siw does).
//! * Untagged QN 1 (Read Requests): MSN checked likewise; more than IRD outstanding is
//!   RDMAP Remote Operation Error "Catastrophic error, localized to RDMAP Stream" (as siw
//!   reports it). The source STag must exist, be valid, be in our PD, allow REMOTE_READ
//!   and hold the range: else RDMAP Remote Protection Error (Invalid STag, STag not
//!   associated with RDMAP Stream, Access rights violation, TO wrap, Base or bounds
//!   violation). A zero-length Read is not checked against memory (RFC 6581 RTR).
//! * Tagged RDMA Write: the STag must exist, be valid, be in our PD, allow REMOTE_WRITE and
//!   hold the range, else a DDP Tagged Buffer Error: Invalid STag, STag not associated
//!   with DDP Stream, TO wrap, Base or bounds violation. RFC 5041 has no code for missing
//!   access rights; like siw we report Invalid STag. A zero-length Write places nothing
//!   and is not checked (RFC 6581 RTR). The segment holding the message's last octet is
//!   placed with its final octet stored last ([`MemoryRegion::write_runs`], as
//!   [`MemoryRegion::write_last_visible_last`] does).
//! * With markers on, tagged payloads are placed from between the markers they arrived
//!   with, not from a copy with the markers taken out ([`Qp::on_ulpdu_runs`]).
//! * Tagged RDMA Read Response: goes to the oldest outstanding Read (Read Responses come in
//!   order); its STag must be that Read's sink and the range inside the requested one
//!   (DDP Tagged Buffer Invalid STag / Base or bounds violation). L = 1 completes the
//!   Read. A Read Response with no Read outstanding is RDMAP "Unexpected OpCode". The
//!   configured RTR sink ([`QpConfig::read_rtr_sink`]) absorbs one zero-length Read
//!   Response silently.
//! * Read Responses found in out-of-order segments may be placed before the gap ahead of
//!   them fills ([`Qp::place_early`]); they are checked and completed in order all the
//!   same, without a second copy ([`Qp::on_ulpdu_at`]).
//! * Terminate: recorded ([`Qp::terminate_received`]), the queue pair goes to Error, the
//!   oldest started send work request completes with a status mapped from the
//!   Terminate's error (and the error in [`Completion::term`]), everything else is
//!   [`WcStatus::Flushed`].
//! * Malformed segments get the Terminate that [`wire::rdmap::parse_segment`]'s error
//!   names (a DDP header cut short, for which RFC 5041 has no code, gets RDMAP Remote
//!   Operation Error "Unspecified").
//!
//! Every violation queues one Terminate ([`wire::rdmap::terminate_ulpdu`], on QN 2 with
//! the next MSN) quoting the offending segment as RFC 5040 section 8 asks
//! ([`Terminate::for_segment`]); the work request involved completes in error with the
//! triplet in [`Completion::term`], all others are flushed, and once the Terminate has
//! been handed out ([`Qp::terminate_flushed`]) the state is [`QpState::Error`] and the
//! caller closes the LLP stream. Nothing after the violating segment is placed: input in
//! [`QpState::Terminating`] and [`QpState::Error`] is dropped. Posting outside
//! [`QpState::Rts`] fails with [`PostError::InvalidState`].
//!
//! Local buffers are checked when posted ([`PostError::LocalProtection`]), and the
//! queue pair keeps the region's `Arc`, so the data path does no table lookups for them.

use std::collections::VecDeque;
use std::sync::Arc;

use super::mr::{Access, MemoryRegion, MrError, MrTable};
use wire::ddp::{
    DdpError, TaggedBufferError, TaggedHeader, UntaggedBufferError, UntaggedHeader, CTRL_T,
    QN_SEND, TAGGED_HEADER_LEN, UNTAGGED_HEADER_LEN,
};
use wire::mpa::deframe::UlpduRuns;
use wire::mpa::fpdu::{CopyPass, FpduWriter, FrameError, Framer};
use wire::rdmap::{
    self, Body, Opcode, RdmapError, RdmapParseError, ReadRequest, RemoteOperationError,
    RemoteProtectionError, TermError, Terminate, READ_REQUEST_LEN,
};
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

impl PostError {
    /// The completion status of a work request refused for this reason.
    pub fn status(self) -> WcStatus {
        match self {
            PostError::BadLength => WcStatus::LocalLengthError,
            PostError::LocalProtection(_) | PostError::ReadNotAllowed => {
                WcStatus::LocalProtectionError
            }
            PostError::InvalidState | PostError::QueueFull => WcStatus::Flushed,
        }
    }
}

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
    /// Read Response segments placed early, from out-of-order TCP segments
    /// ([`Qp::place_early`]).
    pub early_placed: u64,
}

/// Most Read Response segments placed early and not yet met in order ([`Qp::place_early`]).
pub const EARLY_PLACED_MAX: usize = 4096;

/// One send queue entry, from posting to completion (completions leave in this order).
#[derive(Debug)]
struct SqSlot {
    seq: u64,
    wr_id: u64,
    opcode: WcOpcode,
    signaled: bool,
    byte_len: u32,
    /// Some segment or the Read Request is on the wire.
    started: bool,
    done: Option<(WcStatus, Option<TermError>)>,
}

/// A send work request waiting to start, its local buffer resolved.
#[derive(Debug)]
struct Pending {
    seq: u64,
    wr: SendWr,
    mr: LocalMr,
    off: usize,
}

/// The region a message's octets come from.
///
/// Most send work requests name the region of the one before (a stream of messages from
/// one buffer): they refer to the QP's cached region ([`Qp::resolve`]) instead of each
/// holding an `Arc` of it, whose clone and drop were two locked read-modify-writes per
/// message (two thirds of `resolve` and nearly all of a message's drop, 6 % of an 8-octet
/// send-bw's sending thread). The cache is replaced only while no send is queued or in
/// progress, so a `Cached` reference always finds the region it was resolved to.
#[derive(Debug, Default)]
enum LocalMr {
    /// No octets (a zero-length message, a Read Request).
    #[default]
    None,
    /// The QP's cached region of the request's kind (`Qp::local_cache` for sends,
    /// `Qp::recv_cache` for receives).
    Cached,
    /// A region of its own.
    Owned(Arc<MemoryRegion>),
}

impl LocalMr {
    /// The region, `cache` being the QP's cached one; `Err` for a `Cached` reference with
    /// no region cached (which the cache's rule excludes: the message fails as if its
    /// region were gone, never a panic).
    fn get<'a>(
        &'a self,
        cache: Option<&'a Arc<MemoryRegion>>,
    ) -> Result<Option<&'a Arc<MemoryRegion>>, ()> {
        match self {
            LocalMr::None => Ok(None),
            LocalMr::Cached => cache.map(Some).ok_or(()),
            LocalMr::Owned(mr) => Ok(Some(mr)),
        }
    }

    /// An `Arc` of the region, for a holder that outlives the message (an outstanding
    /// Read's sink).
    fn to_arc(&self, cache: Option<&Arc<MemoryRegion>>) -> Option<Arc<MemoryRegion>> {
        self.get(cache).ok().flatten().cloned()
    }
}

#[derive(Debug, Clone, Copy)]
enum TxKind {
    Send { opcode: Opcode, inv: u32, msn: u32 },
    Write { stag: u32, to: u64 },
    ReadRequest,
    ReadResponse { stag: u32, to: u64 },
}

/// What a send queue request goes out as; a Send with `msn` as its MSN.
fn tx_kind(op: SendOp, msn: u32) -> TxKind {
    let send = |opcode, inv| TxKind::Send { opcode, inv, msn };
    match op {
        SendOp::Send => send(Opcode::Send, 0),
        SendOp::SendSolicited => send(Opcode::SendWithSe, 0),
        SendOp::SendInvalidate { stag } => send(Opcode::SendWithInvalidate, stag),
        SendOp::SendSolicitedInvalidate { stag } => send(Opcode::SendWithSeAndInvalidate, stag),
        SendOp::Write {
            remote_stag,
            remote_to,
        } => TxKind::Write {
            stag: remote_stag,
            to: remote_to,
        },
        SendOp::Read { .. } => TxKind::ReadRequest,
    }
}

impl TxKind {
    /// DDP and RDMAP header octets of each of its ULPDUs (a Read Request's whole ULPDU).
    fn header_len(&self) -> usize {
        match self {
            TxKind::Send { .. } => UNTAGGED_HEADER_LEN,
            TxKind::ReadRequest => UNTAGGED_HEADER_LEN + READ_REQUEST_LEN,
            _ => TAGGED_HEADER_LEN,
        }
    }
}

/// What writing one ULPDU of the current message came to.
enum Emit {
    Sent,
    /// Nothing written: the limit is too small for it.
    NotNow,
    /// The message's source region is gone (invalidated, deregistered): it fails.
    SourceGone,
}

/// The message being segmented.
#[derive(Debug)]
struct TxMsg {
    kind: TxKind,
    /// The send queue slot (None for Read Responses).
    seq: Option<u64>,
    wr: Option<SendWr>,
    mr: LocalMr,
    off: usize,
    len: usize,
    sent: usize,
}

/// One of our RDMA Reads, Read Request sent, waiting for its Read Response.
#[derive(Debug)]
struct OutRead {
    seq: u64,
    sink_mr: Option<Arc<MemoryRegion>>,
    sink_stag: u32,
    sink_to: u64,
    len: u64,
}

/// One of the peer's RDMA Reads, checked, waiting for its Read Response to go out.
#[derive(Debug)]
struct InRead {
    mr: Option<Arc<MemoryRegion>>,
    off: usize,
    len: usize,
    sink_stag: u32,
    sink_to: u64,
}

/// A posted receive.
#[derive(Debug)]
struct RecvEntry {
    wr_id: u64,
    mr: LocalMr,
    off: usize,
    len: usize,
    /// Refused at posting (its buffer failed the checks): the Send that takes it fails
    /// with this status, as a verbs provider reports a bad receive in its turn.
    refused: Option<WcStatus>,
}

/// Which work request a failure is about.
#[derive(Debug, Clone, Copy)]
enum Involved {
    None,
    /// The receive at the head of the receive queue.
    Recv(WcStatus),
    /// The oldest outstanding RDMA Read.
    Read(WcStatus),
    /// The oldest started send queue work request.
    OldestStarted(WcStatus),
}

/// The queue pair engine (see the [module docs](self)).
#[derive(Debug)]
pub struct Qp {
    cfg: QpConfig,
    mrs: Arc<MrTable>,
    state: QpState,
    tx_msn: [u32; 3],
    rx_msn: [u32; 3],
    slots: VecDeque<SqSlot>,
    next_seq: u64,
    sq: VecDeque<Pending>,
    cur: Option<TxMsg>,
    last_was_rresp: bool,
    out_reads: VecDeque<OutRead>,
    /// MPA stream offsets of the Read Response segments placed early, ascending.
    early: VecDeque<u64>,
    irq: VecDeque<InRead>,
    rq: VecDeque<RecvEntry>,
    /// The length so far of the Send being received on QN 0 (0 between messages).
    rx_msg_len: u64,
    rtr_sink: Option<(u32, u64)>,
    write_cache: Option<Arc<MemoryRegion>>,
    /// The region send work requests refer to ([`LocalMr::Cached`], [`Qp::resolve`]).
    local_cache: Option<Arc<MemoryRegion>>,
    /// The region receives refer to.
    recv_cache: Option<Arc<MemoryRegion>>,
    /// A Read Request ULPDU is built here before it is framed.
    scratch: Vec<u8>,
    term_pending: Option<Vec<u8>>,
    cq: VecDeque<Completion>,
    term_sent: Option<Terminate>,
    term_received: Option<Terminate>,
    term_flushed: bool,
    stats: QpStats,
}

/// A DDP Tagged Buffer error as a Terminate error.
fn tagged(e: TaggedBufferError) -> TermError {
    TermError::Ddp(DdpError::TaggedBuffer(e))
}

/// A DDP Untagged Buffer error as a Terminate error.
fn untagged(e: UntaggedBufferError) -> TermError {
    TermError::Ddp(DdpError::UntaggedBuffer(e))
}

/// The DDP Tagged Buffer error for a failed placement check.
fn tagged_for(e: MrError) -> TermError {
    tagged(match e {
        MrError::PdMismatch => TaggedBufferError::StagNotAssociated,
        MrError::ToWrap => TaggedBufferError::ToWrap,
        MrError::OutOfBounds => TaggedBufferError::BaseOrBoundsViolation,
        // RFC 5041 has no access rights code; Invalid STag is the closest (as siw).
        _ => TaggedBufferError::InvalidStag,
    })
}

/// The RDMAP Remote Protection error for a failed Read source check.
fn protection_for(e: MrError) -> TermError {
    TermError::from(match e {
        MrError::PdMismatch => RemoteProtectionError::StagNotAssociated,
        MrError::AccessDenied => RemoteProtectionError::AccessRightsViolation,
        MrError::ToWrap => RemoteProtectionError::ToWrap,
        MrError::OutOfBounds => RemoteProtectionError::BaseOrBoundsViolation,
        _ => RemoteProtectionError::InvalidStag,
    })
}

/// The completion status for a work request that a received Terminate ended.
pub fn status_for_terminate(e: &TermError) -> WcStatus {
    match e {
        TermError::Rdmap(RdmapError::RemoteProtection(_))
        | TermError::Ddp(DdpError::TaggedBuffer(_)) => WcStatus::RemoteAccessError,
        TermError::Ddp(DdpError::UntaggedBuffer(_)) => WcStatus::RemoteInvalidRequest,
        TermError::Llp(_) => WcStatus::TransportError,
        _ => WcStatus::RemoteOperationError,
    }
}

impl Qp {
    /// A queue pair in RTS.
    pub fn new(cfg: QpConfig, mrs: Arc<MrTable>) -> Qp {
        Qp {
            cfg,
            mrs,
            state: QpState::Rts,
            tx_msn: cfg.tx_next_msn,
            rx_msn: cfg.rx_next_msn,
            slots: VecDeque::new(),
            next_seq: 0,
            sq: VecDeque::new(),
            cur: None,
            last_was_rresp: false,
            out_reads: VecDeque::new(),
            early: VecDeque::new(),
            irq: VecDeque::new(),
            rq: VecDeque::new(),
            rx_msg_len: 0,
            rtr_sink: cfg.read_rtr_sink,
            write_cache: None,
            local_cache: None,
            recv_cache: None,
            scratch: Vec::new(),
            term_pending: None,
            cq: VecDeque::new(),
            term_sent: None,
            term_received: None,
            term_flushed: false,
            stats: QpStats::default(),
        }
    }

    /// The region `sge` names, checked for our PD, the range and `need`, and the offset
    /// of `sge.to` in it: `Cached` when it is the cached region of its kind (the send
    /// queue's, or with `recv` the receive queue's), or becomes it. A stream of requests
    /// from one buffer takes the table's lock once, not once each. A kind's cached region
    /// is replaced only while none of its requests waits (no send queued or in progress;
    /// no receive posted): no `Cached` reference to it exists then. Else a region of
    /// another STag is held by its request alone.
    fn resolve(
        &mut self,
        sge: &Sge,
        need: Access,
        recv: bool,
    ) -> Result<(LocalMr, usize), PostError> {
        if sge.len == 0 {
            return Ok((LocalMr::None, 0));
        }
        let idle = if recv {
            self.rq.is_empty()
        } else {
            self.sq.is_empty() && self.cur.is_none()
        };
        let cache = if recv {
            &mut self.recv_cache
        } else {
            &mut self.local_cache
        };
        let hit = matches!(cache, Some(mr) if mr.stag() == sge.stag && mr.is_valid());
        let own = if hit {
            None
        } else {
            let mr = self
                .mrs
                .lookup(sge.stag)
                .ok_or(PostError::LocalProtection(MrError::InvalidStag))?;
            if idle {
                *cache = Some(mr);
                None
            } else {
                Some(mr)
            }
        };
        let Some(mr) = own.as_ref().or(cache.as_ref()) else {
            return Err(PostError::LocalProtection(MrError::InvalidStag));
        };
        if mr.pd() != self.cfg.pd {
            return Err(PostError::LocalProtection(MrError::PdMismatch));
        }
        let off = mr
            .check(sge.to, sge.len as usize, need)
            .map_err(PostError::LocalProtection)?;
        let local = match own {
            Some(mr) => LocalMr::Owned(mr),
            None => LocalMr::Cached,
        };
        Ok((local, off))
    }

    /// Posts a send work request. Its local buffer is checked now: it must be a region of
    /// our PD holding the range, with LOCAL_WRITE for an RDMA Read.
    pub fn post_send(&mut self, wr: SendWr) -> Result<(), PostError> {
        if self.state != QpState::Rts {
            return Err(PostError::InvalidState);
        }
        if self.slots.len() >= self.cfg.max_send_wr {
            return Err(PostError::QueueFull);
        }
        let (opcode, need) = match wr.op {
            SendOp::Read { .. } => {
                if self.cfg.ord == 0 {
                    return Err(PostError::ReadNotAllowed);
                }
                (WcOpcode::Read, Access::LOCAL_WRITE)
            }
            SendOp::Write { .. } => (WcOpcode::Write, Access::empty()),
            _ => (WcOpcode::Send, Access::empty()),
        };
        let (mr, off) = self.resolve(&wr.local, need, false)?;
        let seq = self.push_slot(wr.wr_id, opcode, wr.signaled, wr.local.len, None);
        self.sq.push_back(Pending { seq, wr, mr, off });
        Ok(())
    }

    /// A send queue slot for a work request (`done` for one refused at posting); its
    /// sequence number.
    fn push_slot(
        &mut self,
        wr_id: u64,
        opcode: WcOpcode,
        signaled: bool,
        byte_len: u32,
        done: Option<(WcStatus, Option<TermError>)>,
    ) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.slots.push_back(SqSlot {
            seq,
            wr_id,
            opcode,
            signaled,
            byte_len,
            started: false,
            done,
        });
        seq
    }

    /// Posts a receive work request (its buffer needs LOCAL_WRITE, checked now).
    pub fn post_recv(&mut self, wr: RecvWr) -> Result<(), PostError> {
        if self.state != QpState::Rts {
            return Err(PostError::InvalidState);
        }
        if self.rq.len() >= self.cfg.max_recv_wr {
            return Err(PostError::QueueFull);
        }
        let (mr, off) = self.resolve(&wr.local, Access::LOCAL_WRITE, true)?;
        self.rq.push_back(RecvEntry {
            wr_id: wr.wr_id,
            mr,
            off,
            len: wr.local.len as usize,
            refused: None,
        });
        Ok(())
    }

    /// Takes a send work request so that it completes in posting order whatever happens
    /// to it: one refused at posting (bad buffer, Read without ORD, QP not in RTS)
    /// completes in error in its turn, after every request posted before it. Gives the
    /// request back only when the send queue is full (post it again later).
    pub fn submit_send(&mut self, wr: SendWr) -> Result<(), SendWr> {
        let e = match self.post_send(wr) {
            Ok(()) => return Ok(()),
            Err(PostError::QueueFull) => return Err(wr),
            Err(e) => e,
        };
        let opcode = match wr.op {
            SendOp::Write { .. } => WcOpcode::Write,
            SendOp::Read { .. } => WcOpcode::Read,
            _ => WcOpcode::Send,
        };
        self.push_slot(wr.wr_id, opcode, true, 0, Some((e.status(), None)));
        self.release_slots();
        Ok(())
    }

    /// Takes a receive work request so that it completes in posting order: one whose
    /// buffer is refused completes in error when a Send reaches it (and that Send fails,
    /// as with a verbs provider); one posted to a QP out of RTS completes flushed at once
    /// (everything before it has been flushed). Gives the request back only when the
    /// receive queue is full.
    pub fn submit_recv(&mut self, wr: RecvWr) -> Result<(), RecvWr> {
        let e = match self.post_recv(wr) {
            Ok(()) => return Ok(()),
            Err(PostError::QueueFull) => return Err(wr),
            Err(e) => e,
        };
        if e == PostError::InvalidState {
            self.recv_completion(wr.wr_id, WcStatus::Flushed, 0, false, None, None);
        } else {
            self.rq.push_back(RecvEntry {
                wr_id: wr.wr_id,
                mr: LocalMr::None,
                off: 0,
                len: 0,
                refused: Some(e.status()),
            });
        }
        Ok(())
    }

    fn slot_mut(&mut self, seq: u64) -> Option<&mut SqSlot> {
        let front = self.slots.front()?.seq;
        let i = usize::try_from(seq.checked_sub(front)?).ok()?;
        self.slots.get_mut(i)
    }

    /// Marks a send queue slot done and releases finished slots in order.
    fn finish_slot(&mut self, seq: u64, status: WcStatus, term: Option<TermError>) {
        if let Some(s) = self.slot_mut(seq) {
            if s.done.is_none() {
                s.done = Some((status, term));
            }
        }
        self.release_slots();
    }

    fn release_slots(&mut self) {
        while let Some(s) = self.slots.front() {
            let Some((status, term)) = s.done else {
                break;
            };
            if status != WcStatus::Success || s.signaled {
                self.cq.push_back(Completion {
                    wr_id: s.wr_id,
                    status,
                    opcode: s.opcode,
                    byte_len: if status == WcStatus::Success {
                        s.byte_len
                    } else {
                        0
                    },
                    qpn: self.cfg.qpn,
                    solicited: false,
                    invalidated_stag: None,
                    term,
                });
            }
            self.slots.pop_front();
        }
    }

    fn sq_head_ready(&self) -> bool {
        match self.sq.front() {
            Some(p) => {
                !matches!(p.wr.op, SendOp::Read { .. })
                    || self.out_reads.len() < usize::from(self.cfg.ord)
            }
            None => false,
        }
    }

    /// Whether `poll_ulpdu` has something to send.
    pub fn has_tx(&self) -> bool {
        if self.term_pending.is_some() {
            return true;
        }
        self.state == QpState::Rts
            && (self.cur.is_some() || !self.irq.is_empty() || self.sq_head_ready())
    }

    /// The length of the ULPDU [`Qp::poll_fpdu`] (or [`Qp::poll_ulpdu`]) with `max_ulpdu`
    /// would write next, if there is one to write now (a source region that went away is
    /// found only when the write is tried). Nothing changes: the next message is looked
    /// at, not taken. With a `max_ulpdu` of exactly this length they write that very
    /// ULPDU: what lets a caller put several small FPDUs in one TCP record only when each
    /// fits.
    pub fn next_ulpdu_len(&self, max_ulpdu: usize) -> Option<usize> {
        if let Some(t) = &self.term_pending {
            return (t.len() <= max_ulpdu).then_some(t.len());
        }
        if self.state != QpState::Rts {
            return None;
        }
        // The kind and payload octets left of the message `poll_into` would segment.
        let (kind, remaining) = match &self.cur {
            Some(m) => (m.kind, m.len - m.sent),
            None => {
                if self.read_response_next() {
                    let r = self.irq.front()?;
                    let kind = TxKind::ReadResponse {
                        stag: r.sink_stag,
                        to: r.sink_to,
                    };
                    (kind, r.len)
                } else {
                    let p = self.sq.front().filter(|_| self.sq_head_ready())?;
                    // (The MSN does not change the header's length.)
                    (tx_kind(p.wr.op, 0), p.wr.local.len as usize)
                }
            }
        };
        let hlen = kind.header_len();
        if max_ulpdu < hlen {
            return None;
        }
        if matches!(kind, TxKind::ReadRequest) {
            // A Read Request is its header alone, whatever the length it asks for.
            return Some(hlen);
        }
        if remaining > 0 && max_ulpdu <= hlen {
            return None;
        }
        Some(hlen + remaining.min(max_ulpdu - hlen))
    }

    /// Whether the next message to segment is a Read Response (one is waiting, and either
    /// the send queue's head cannot go or the last message was not one: they alternate).
    fn read_response_next(&self) -> bool {
        !self.irq.is_empty() && (!self.sq_head_ready() || !self.last_was_rresp)
    }

    /// Picks the next message to segment.
    fn start_next(&mut self) {
        if self.read_response_next() {
            if let Some(r) = self.irq.pop_front() {
                self.cur = Some(TxMsg {
                    kind: TxKind::ReadResponse {
                        stag: r.sink_stag,
                        to: r.sink_to,
                    },
                    seq: None,
                    wr: None,
                    mr: r.mr.map_or(LocalMr::None, LocalMr::Owned),
                    off: r.off,
                    len: r.len,
                    sent: 0,
                });
            }
            return;
        }
        if !self.sq_head_ready() {
            return;
        }
        let Some(p) = self.sq.pop_front() else {
            return;
        };
        let kind = tx_kind(p.wr.op, self.tx_msn[0]);
        if matches!(kind, TxKind::Send { .. }) {
            // Each Send takes the next MSN of untagged queue 0, the Send queue.
            self.tx_msn[0] = self.tx_msn[0].wrapping_add(1);
        }
        if let Some(s) = self.slot_mut(p.seq) {
            s.started = true;
        }
        self.cur = Some(TxMsg {
            kind,
            seq: Some(p.seq),
            wr: Some(p.wr),
            mr: p.mr,
            off: p.off,
            len: p.wr.local.len as usize,
            sent: 0,
        });
    }

    /// Appends the next ULPDU (DDP header + payload, at most `max_ulpdu` octets = MULPDU)
    /// to `out`; false when there is nothing to send now (or `max_ulpdu` is too small for
    /// a header and one payload octet).
    pub fn poll_ulpdu(&mut self, max_ulpdu: usize, out: &mut Vec<u8>) -> bool {
        let start = out.len();
        let sent = self.poll_into(max_ulpdu, &mut VecSink { out: &mut *out });
        if !sent {
            out.truncate(start);
        }
        sent
    }

    /// Appends the next ULPDU framed as an FPDU by `framer` to `out`, in one pass over
    /// its octets: the payload is copied from the memory region, added to the CRC32c and
    /// to the one's complement sum at once, with the markers in between
    /// ([`FpduWriter`]). Returns the sum of the FPDU's wire octets (for the TCP checksum
    /// of a segment of whole FPDUs; 0 when `framer` takes no sums), `Ok(None)` when there
    /// is nothing to send now, and
    /// the framer's error when the ULPDU could not be framed (`max_ulpdu` above the
    /// 64768 octets of MPA: the message was taken, so the caller fails the stream).
    pub fn poll_fpdu(
        &mut self,
        max_ulpdu: usize,
        framer: &mut Framer,
        out: &mut Vec<u8>,
    ) -> Result<Option<u16>, FrameError> {
        let mut sink = FpduSink {
            start: Some((framer, out)),
            writer: Err(FrameError::EmptyUlpdu),
        };
        if !self.poll_into(max_ulpdu, &mut sink) {
            return Ok(None);
        }
        sink.writer.map(|w| Some(w.finish()))
    }

    /// Writes the next ULPDU into `sink`; false when there is nothing to send now (the
    /// caller abandons whatever the sink holds of it).
    fn poll_into(&mut self, max_ulpdu: usize, sink: &mut impl UlpduSink) -> bool {
        if let Some(t) = self.term_pending.take() {
            if t.len() > max_ulpdu {
                self.term_pending = Some(t);
                return false;
            }
            sink.begin(t.len());
            sink.put(&t);
            self.term_flushed = true;
            self.state = QpState::Error;
            self.stats.tx_ulpdus += 1;
            self.stats.terminates_sent += 1;
            return true;
        }
        if self.state != QpState::Rts {
            return false;
        }
        if self.cur.is_none() {
            self.start_next();
        }
        // The message is segmented where it is, not moved out and back for each ULPDU.
        let Some(m) = self.cur.as_mut() else {
            return false;
        };
        let emitted = Self::emit(
            m,
            self.local_cache.as_ref(),
            max_ulpdu,
            sink,
            &mut self.tx_msn,
            &mut self.scratch,
            &mut self.out_reads,
            &mut self.stats,
        );
        match emitted {
            Emit::NotNow => false,
            Emit::SourceGone => {
                if let Some(m) = self.cur.take() {
                    self.source_gone(m.kind, m.seq);
                }
                false
            }
            Emit::Sent => {
                if matches!(m.kind, TxKind::ReadRequest) {
                    // `emit` moved it to the outstanding Reads.
                    self.cur = None;
                    self.last_was_rresp = false;
                } else if m.sent >= m.len {
                    let (kind, seq) = (m.kind, m.seq);
                    self.cur = None;
                    self.message_sent(kind, seq);
                }
                true
            }
        }
    }

    /// Writes one segment of `m` (the current message).
    #[allow(clippy::too_many_arguments)]
    fn emit(
        m: &mut TxMsg,
        cache: Option<&Arc<MemoryRegion>>,
        max_ulpdu: usize,
        sink: &mut impl UlpduSink,
        tx_msn: &mut [u32; 3],
        scratch: &mut Vec<u8>,
        out_reads: &mut VecDeque<OutRead>,
        stats: &mut QpStats,
    ) -> Emit {
        let hlen = m.kind.header_len();
        if max_ulpdu < hlen {
            return Emit::NotNow;
        }
        if let TxKind::ReadRequest = m.kind {
            let (Some(wr), Some(seq)) = (m.wr, m.seq) else {
                return Emit::NotNow;
            };
            let SendOp::Read {
                remote_stag,
                remote_to,
            } = wr.op
            else {
                return Emit::NotNow;
            };
            let msn = tx_msn[1];
            tx_msn[1] = msn.wrapping_add(1);
            let req = ReadRequest {
                sink_stag: wr.local.stag,
                sink_to: wr.local.to,
                read_message_size: wr.local.len,
                source_stag: remote_stag,
                source_to: remote_to,
            };
            scratch.clear();
            rdmap::append_read_request_ulpdu(scratch, msn, &req);
            sink.begin(scratch.len());
            sink.put(scratch);
            out_reads.push_back(OutRead {
                seq,
                sink_mr: std::mem::take(&mut m.mr).to_arc(cache),
                sink_stag: wr.local.stag,
                sink_to: wr.local.to,
                len: u64::from(wr.local.len),
            });
            stats.tx_ulpdus += 1;
            stats.tx_messages += 1;
            return Emit::Sent;
        }
        let remaining = m.len - m.sent;
        if remaining > 0 && max_ulpdu <= hlen {
            return Emit::NotNow;
        }
        let n = remaining.min(max_ulpdu - hlen);
        let last = m.sent + n == m.len;
        let Ok(source) = m.mr.get(cache) else {
            return Emit::SourceGone;
        };
        if let Some(mr) = source {
            if !mr.is_valid() {
                // The local source was invalidated or deregistered under us.
                return Emit::SourceGone;
            }
        }
        // Offsets fit u32 (lengths are u32); MO of a Send and TO of tagged segments.
        sink.begin(hlen + n);
        match m.kind {
            TxKind::Send { opcode, inv, msn } => sink.put(
                &UntaggedHeader {
                    last,
                    rsvd_ulp: opcode.rdmap_control(),
                    rsvd_ulp2: inv,
                    qn: QN_SEND,
                    msn,
                    mo: m.sent as u32,
                }
                .to_bytes(),
            ),
            TxKind::Write { stag, to } | TxKind::ReadResponse { stag, to } => {
                let opcode = if matches!(m.kind, TxKind::Write { .. }) {
                    Opcode::RdmaWrite
                } else {
                    Opcode::RdmaReadResponse
                };
                sink.put(
                    &TaggedHeader {
                        last,
                        rsvd_ulp: opcode.rdmap_control(),
                        stag,
                        to: to.wrapping_add(m.sent as u64),
                    }
                    .to_bytes(),
                );
            }
            TxKind::ReadRequest => {}
        }
        let copied = match source {
            Some(mr) if n > 0 => sink.put_region(mr, m.off + m.sent, n).is_ok(),
            _ => true,
        };
        if !copied {
            // The source's memory went away between the check above and the copy
            // (revoked by a deregistration): fail as for an invalid source.
            return Emit::SourceGone;
        }
        m.sent += n;
        stats.tx_ulpdus += 1;
        stats.tx_payload_octets += n as u64;
        Emit::Sent
    }

    /// The local source of `m` was invalidated or deregistered under us: its work request
    /// completes in error and the stream fails (a Read Response's source: the peer's
    /// Read named an STag that is gone).
    fn source_gone(&mut self, kind: TxKind, seq: Option<u64>) {
        let (err, inv) = match kind {
            TxKind::ReadResponse { .. } => (
                TermError::from(RemoteProtectionError::InvalidStag),
                Involved::None,
            ),
            _ => (
                TermError::Rdmap(RdmapError::LOCAL_CATASTROPHIC),
                Involved::None,
            ),
        };
        if let Some(seq) = seq {
            self.finish_slot(seq, WcStatus::LocalProtectionError, Some(err));
        }
        self.fail(err, None, inv);
    }

    fn message_sent(&mut self, kind: TxKind, seq: Option<u64>) {
        self.stats.tx_messages += 1;
        match kind {
            TxKind::ReadResponse { .. } => {
                self.stats.read_responses_sent += 1;
                self.last_was_rresp = true;
            }
            _ => {
                self.last_was_rresp = false;
                if let Some(seq) = seq {
                    self.finish_slot(seq, WcStatus::Success, None);
                }
            }
        }
    }

    /// Queues a Terminate (unless one was sent or received already) and flushes.
    fn fail(&mut self, err: TermError, quote: Option<&[u8]>, involved: Involved) {
        if self.state == QpState::Error {
            return;
        }
        if self.term_sent.is_none() && self.term_received.is_none() {
            let t = match quote {
                Some(u) => Terminate::for_segment(err, u),
                None => Terminate::new(err),
            };
            self.term_pending = Some(rdmap::terminate_ulpdu(&t, self.tx_msn[2]));
            self.tx_msn[2] = self.tx_msn[2].wrapping_add(1);
            self.term_sent = Some(t);
            self.state = QpState::Terminating;
        } else {
            self.state = QpState::Error;
        }
        self.flush(err, involved);
    }

    /// Completes the involved work request in error and flushes everything else.
    fn flush(&mut self, err: TermError, involved: Involved) {
        match involved {
            Involved::None => {}
            Involved::Recv(status) => {
                if let Some(r) = self.rq.pop_front() {
                    self.recv_completion(r.wr_id, status, 0, false, None, Some(err));
                }
            }
            Involved::Read(status) => {
                if let Some(r) = self.out_reads.front() {
                    let seq = r.seq;
                    if let Some(s) = self.slot_mut(seq) {
                        s.done.get_or_insert((status, Some(err)));
                    }
                }
            }
            Involved::OldestStarted(status) => {
                if let Some(s) = self
                    .slots
                    .iter_mut()
                    .find(|s| s.started && s.done.is_none())
                {
                    s.done = Some((status, Some(err)));
                }
            }
        }
        for s in self.slots.iter_mut() {
            s.done.get_or_insert((WcStatus::Flushed, None));
        }
        self.release_slots();
        while let Some(r) = self.rq.pop_front() {
            self.recv_completion(r.wr_id, WcStatus::Flushed, 0, false, None, None);
        }
        self.sq.clear();
        self.cur = None;
        self.out_reads.clear();
        self.irq.clear();
        self.write_cache = None;
    }

    fn recv_completion(
        &mut self,
        wr_id: u64,
        status: WcStatus,
        byte_len: u32,
        solicited: bool,
        invalidated_stag: Option<u32>,
        term: Option<TermError>,
    ) {
        self.cq.push_back(Completion {
            wr_id,
            status,
            opcode: WcOpcode::Recv,
            byte_len,
            qpn: self.cfg.qpn,
            solicited,
            invalidated_stag,
            term,
        });
    }

    /// One in-order ULPDU from the deframer. Dropped unless the state is RTS.
    pub fn on_ulpdu(&mut self, ulpdu: &[u8]) {
        self.on_ulpdu_at(None, ulpdu);
    }

    /// Places the payload of `ulpdu`, a DDP segment found in an out-of-order TCP segment at
    /// MPA stream offset `stream_offset` (RFC 5041 section 3: tagged segments may be
    /// placed in any order), before the octets ahead of it arrive; true when it did. The
    /// segment is still processed in order later ([`Qp::on_ulpdu_at`] with the same
    /// offset): checked again and completed then, its payload not copied twice.
    ///
    /// Only the Read Responses of our own outstanding RDMA Reads are placed early, and not
    /// the segment holding a message's last octet:
    /// * a Read Response goes to a sink this side named and the peer is answering, so
    ///   nothing the octets ahead of it could hold makes placing it wrong: at worst (a
    ///   Terminate ahead, the sink invalidated by a misbehaving peer) the Read fails, and a
    ///   failed Read's sink is undefined. An RDMA Write could follow a Send with
    ///   Invalidate of its STag in the gap, which must refuse it, so Writes wait;
    /// * the last octet is stored last, after every other octet of the message
    ///   ([`MemoryRegion::write_last_visible_last`]), for consumers that poll it.
    ///
    /// Refused (false) as well: two outstanding Reads into overlapping parts of one sink,
    /// a range outside every outstanding Read's sink, and more than [`EARLY_PLACED_MAX`]
    /// segments placed early and not yet met in order.
    pub fn place_early(&mut self, stream_offset: u64, ulpdu: &[u8]) -> bool {
        if self.state != QpState::Rts || self.early.len() >= EARLY_PLACED_MAX {
            return false;
        }
        let Ok(seg) = rdmap::parse_segment(ulpdu) else {
            return false;
        };
        let Body::ReadResponse { stag, to, data } = seg.body else {
            return false;
        };
        if seg.header.last() || data.is_empty() {
            return false;
        }
        let Some(end) = to.checked_add(data.len() as u64) else {
            return false;
        };
        let holds = |rd: &OutRead| {
            rd.sink_stag == stag && to >= rd.sink_to && end <= rd.sink_to.saturating_add(rd.len)
        };
        let overlaps = |rd: &OutRead| {
            rd.sink_stag == stag && to < rd.sink_to.saturating_add(rd.len) && rd.sink_to < end
        };
        let mut matching = self.out_reads.iter().filter(|rd| overlaps(rd));
        let (Some(rd), None) = (matching.next(), matching.next()) else {
            return false;
        };
        if !holds(rd) {
            return false;
        }
        let placed = rd.sink_mr.as_ref().is_some_and(|mr| {
            mr.check(to, data.len(), Access::LOCAL_WRITE)
                .and_then(|off| mr.write(off, data))
                .is_ok()
        });
        if !placed {
            return false;
        }
        let i = self.early.partition_point(|&o| o < stream_offset);
        if self.early.get(i) != Some(&stream_offset) {
            self.early.insert(i, stream_offset);
        }
        self.stats.early_placed += 1;
        true
    }

    /// [`Qp::on_ulpdu`] for the ULPDU at MPA stream offset `stream_offset` (when known): a
    /// Read Response segment [`Qp::place_early`] placed is checked and completed as
    /// usual, its payload not copied again.
    pub fn on_ulpdu_at(&mut self, stream_offset: Option<u64>, ulpdu: &[u8]) {
        self.on_segment(stream_offset, UlpduRuns::flat(ulpdu), &mut Vec::new());
    }

    /// [`Qp::on_ulpdu_at`] for a ULPDU left where it arrived, in runs between markers
    /// ([`wire::mpa::deframe::Deframer::push_runs_hinted`]). The payload of an RDMA Write
    /// or Read Response is placed from the runs, not copied out first; untagged segments
    /// (and a tagged one whose header a marker splits, one in about 37) are copied into
    /// `scratch` whole and taken from there, as is a segment a Terminate must quote.
    pub fn on_ulpdu_runs(
        &mut self,
        stream_offset: Option<u64>,
        ulpdu: UlpduRuns<'_>,
        scratch: &mut Vec<u8>,
    ) {
        let head = ulpdu.first_run();
        let tagged_head = head.len() >= TAGGED_HEADER_LEN && head[0] & CTRL_T != 0;
        if ulpdu.contiguous().is_none() && !tagged_head {
            scratch.clear();
            ulpdu.copy_into(scratch);
            return self.on_segment(stream_offset, UlpduRuns::flat(scratch), &mut Vec::new());
        }
        self.on_segment(stream_offset, ulpdu, scratch);
    }

    /// One ULPDU, contiguous or (tagged, its header in the first run) in runs.
    fn on_segment(
        &mut self,
        stream_offset: Option<u64>,
        ulpdu: UlpduRuns<'_>,
        scratch: &mut Vec<u8>,
    ) {
        let placed = stream_offset.is_some_and(|at| {
            // Entries behind this offset were never met in order (none should be): drop.
            while self.early.front().is_some_and(|&o| o < at) {
                self.early.pop_front();
            }
            self.early.front() == Some(&at) && self.early.pop_front().is_some()
        });
        if self.state != QpState::Rts {
            return;
        }
        self.stats.rx_ulpdus += 1;
        // A tagged segment's header is all in the first run (`on_ulpdu_runs`), and nothing
        // parse_segment checks of one depends on the octets after its header.
        let head = ulpdu.contiguous().unwrap_or_else(|| ulpdu.first_run());
        let seg = match rdmap::parse_segment(head) {
            Ok(seg) => seg,
            Err(e) => return self.on_parse_error(e, ulpdu.flatten(scratch)),
        };
        let last = seg.header.last();
        match (seg.body, seg.header) {
            (Body::RdmaWrite { stag, to, .. }, _) => self.on_write(stag, to, &ulpdu, last, scratch),
            (Body::ReadResponse { stag, to, .. }, _) => {
                self.on_read_response(stag, to, &ulpdu, last, placed, scratch)
            }
            // Untagged segments come here contiguous (`on_ulpdu_runs`): `head` is all of it.
            (Body::ReadRequest(req), wire::ddp::DdpHeader::Untagged(h)) => {
                self.on_read_request(&h, &req, head)
            }
            (
                Body::Send {
                    data,
                    invalidate_stag,
                    solicited_event,
                },
                wire::ddp::DdpHeader::Untagged(h),
            ) => self.on_send(&h, data, invalidate_stag, solicited_event, head),
            (Body::Terminate { terminate, .. }, _) => self.on_terminate(terminate),
            // parse_segment pairs untagged bodies with untagged headers.
            _ => {}
        }
    }

    fn on_parse_error(&mut self, e: RdmapParseError, ulpdu: &[u8]) {
        match e {
            RdmapParseError::TerminateNotSingleSegment { .. }
            | RdmapParseError::MalformedTerminate(_) => {
                // The peer is terminating; take what the Terminate says, if anything.
                let payload = ulpdu.get(UNTAGGED_HEADER_LEN..).unwrap_or_default();
                let t = match Terminate::decode_lenient(payload) {
                    Ok((t, _)) => t,
                    Err(_) => Terminate::new(TermError::Rdmap(RdmapError::LOCAL_CATASTROPHIC)),
                };
                self.on_terminate(t);
            }
            _ => {
                let err = e
                    .term_error()
                    .unwrap_or(TermError::from(RemoteOperationError::Unspecified));
                self.fail(err, Some(ulpdu), Involved::None);
            }
        }
    }

    fn on_terminate(&mut self, t: Terminate) {
        self.stats.terminates_received += 1;
        let err = t.error;
        self.term_received = Some(t);
        self.term_pending = None;
        self.state = QpState::Error;
        self.flush(err, Involved::OldestStarted(status_for_terminate(&err)));
    }

    /// The region `stag` names, taken out of the one-entry cache of the last RDMA Write's
    /// region (or looked up, the cache's old entry dropped): the caller puts it back
    /// with [`Qp::keep_cached`] when done. Moving the `Arc` out and back, not cloning
    /// it, keeps two atomic read-modify-writes of its count off every segment.
    fn take_cached(&mut self, stag: u32) -> Option<Arc<MemoryRegion>> {
        match self.write_cache.take() {
            Some(mr) if mr.stag() == stag && mr.is_valid() => Some(mr),
            _ => self.mrs.lookup(stag),
        }
    }

    /// Puts the region [`Qp::take_cached`] gave back into the cache.
    fn keep_cached(&mut self, mr: Arc<MemoryRegion>) {
        self.write_cache = Some(mr);
    }

    /// `ulpdu`: the whole segment, its payload after the tagged header.
    fn on_write(
        &mut self,
        stag: u32,
        to: u64,
        ulpdu: &UlpduRuns<'_>,
        last: bool,
        scratch: &mut Vec<u8>,
    ) {
        let data = ulpdu.skip(TAGGED_HEADER_LEN);
        if data.is_empty() {
            // Zero-length RDMA Write (RFC 6581 RTR): nothing to place, nothing to check.
            return;
        }
        let Some(mr) = self.take_cached(stag) else {
            return self.fail(
                tagged(TaggedBufferError::InvalidStag),
                Some(ulpdu.flatten(scratch)),
                Involved::None,
            );
        };
        let checked = if mr.pd() != self.cfg.pd {
            Err(MrError::PdMismatch)
        } else {
            mr.check(to, data.len(), Access::REMOTE_WRITE)
        };
        let placed = checked.and_then(|off| mr.write_runs(off, &data, last));
        self.keep_cached(mr);
        match placed {
            Ok(()) => {
                self.stats.rx_payload_octets += data.len() as u64;
                if last {
                    self.stats.rx_messages += 1;
                }
            }
            Err(e) => self.fail(tagged_for(e), Some(ulpdu.flatten(scratch)), Involved::None),
        }
    }

    /// `placed`: [`Qp::place_early`] placed the payload already (the same octets).
    fn on_read_response(
        &mut self,
        stag: u32,
        to: u64,
        ulpdu: &UlpduRuns<'_>,
        last: bool,
        placed: bool,
        scratch: &mut Vec<u8>,
    ) {
        let data = ulpdu.skip(TAGGED_HEADER_LEN);
        if data.is_empty() && last && self.rtr_sink == Some((stag, to)) {
            self.rtr_sink = None;
            return;
        }
        let Some(rd) = self.out_reads.front() else {
            return self.fail(
                TermError::from(RemoteOperationError::UnexpectedOpcode),
                Some(ulpdu.flatten(scratch)),
                Involved::None,
            );
        };
        if !data.is_empty() {
            let len = data.len() as u64;
            let bad = if stag != rd.sink_stag {
                Some(TaggedBufferError::InvalidStag)
            } else {
                match to.checked_add(len) {
                    None => Some(TaggedBufferError::ToWrap),
                    Some(end) if to < rd.sink_to || end > rd.sink_to.saturating_add(rd.len) => {
                        Some(TaggedBufferError::BaseOrBoundsViolation)
                    }
                    Some(_) => None,
                }
            };
            if let Some(e) = bad {
                return self.fail(
                    tagged(e),
                    Some(ulpdu.flatten(scratch)),
                    Involved::Read(WcStatus::LocalProtectionError),
                );
            }
            let placed = match &rd.sink_mr {
                Some(mr) => mr
                    .check(to, data.len(), Access::LOCAL_WRITE)
                    .and_then(|off| {
                        if placed {
                            Ok(())
                        } else {
                            mr.write_runs(off, &data, last)
                        }
                    }),
                None => Err(MrError::OutOfBounds),
            };
            if let Err(e) = placed {
                return self.fail(
                    tagged_for(e),
                    Some(ulpdu.flatten(scratch)),
                    Involved::Read(WcStatus::LocalProtectionError),
                );
            }
            self.stats.rx_payload_octets += len;
        }
        if last {
            let seq = rd.seq;
            self.out_reads.pop_front();
            self.stats.rx_messages += 1;
            self.finish_slot(seq, WcStatus::Success, None);
        }
    }

    fn on_read_request(&mut self, h: &UntaggedHeader, req: &ReadRequest, ulpdu: &[u8]) {
        if h.msn != self.rx_msn[1] {
            return self.fail(
                untagged(UntaggedBufferError::InvalidMsnRange),
                Some(ulpdu),
                Involved::None,
            );
        }
        let outstanding = self.irq.len()
            + usize::from(matches!(
                self.cur,
                Some(TxMsg {
                    kind: TxKind::ReadResponse { .. },
                    ..
                })
            ));
        if outstanding >= usize::from(self.cfg.ird) {
            return self.fail(
                TermError::from(RemoteOperationError::CatastrophicLocalized),
                Some(ulpdu),
                Involved::None,
            );
        }
        self.rx_msn[1] = self.rx_msn[1].wrapping_add(1);
        let len = req.read_message_size as usize;
        let (mr, off) = if len == 0 {
            (None, 0)
        } else {
            let Some(mr) = self.mrs.lookup(req.source_stag) else {
                return self.fail(
                    TermError::from(RemoteProtectionError::InvalidStag),
                    Some(ulpdu),
                    Involved::None,
                );
            };
            let checked = if mr.pd() != self.cfg.pd {
                Err(MrError::PdMismatch)
            } else {
                mr.check(req.source_to, len, Access::REMOTE_READ)
            };
            match checked {
                Ok(off) => (Some(mr), off),
                Err(e) => return self.fail(protection_for(e), Some(ulpdu), Involved::None),
            }
        };
        self.stats.rx_messages += 1;
        self.irq.push_back(InRead {
            mr,
            off,
            len,
            sink_stag: req.sink_stag,
            sink_to: req.sink_to,
        });
    }

    fn on_send(
        &mut self,
        h: &UntaggedHeader,
        data: &[u8],
        inv: Option<u32>,
        solicited: bool,
        ulpdu: &[u8],
    ) {
        if h.msn != self.rx_msn[0] {
            return self.fail(
                untagged(UntaggedBufferError::InvalidMsnRange),
                Some(ulpdu),
                Involved::None,
            );
        }
        let Some(rv) = self.rq.front() else {
            return self.fail(
                untagged(UntaggedBufferError::InvalidMsnNoBuffer),
                Some(ulpdu),
                Involved::None,
            );
        };
        if let Some(status) = rv.refused {
            // The receive was refused at posting: the Send that reaches it fails here.
            return self.fail(
                TermError::Rdmap(RdmapError::LOCAL_CATASTROPHIC),
                None,
                Involved::Recv(status),
            );
        }
        let end = u64::from(h.mo) + data.len() as u64;
        if end > u64::from(u32::MAX) {
            return self.fail(
                untagged(UntaggedBufferError::InvalidMo),
                Some(ulpdu),
                Involved::Recv(WcStatus::LocalLengthError),
            );
        }
        if end > rv.len as u64 {
            return self.fail(
                untagged(UntaggedBufferError::MessageTooLong),
                Some(ulpdu),
                Involved::Recv(WcStatus::LocalLengthError),
            );
        }
        if !data.is_empty() {
            let placed = match rv.mr.get(self.recv_cache.as_ref()) {
                Ok(Some(mr)) if mr.is_valid() => mr.write(rv.off + h.mo as usize, data),
                _ => Err(MrError::Invalidated),
            };
            if placed.is_err() {
                return self.fail(
                    TermError::Rdmap(RdmapError::LOCAL_CATASTROPHIC),
                    None,
                    Involved::Recv(WcStatus::LocalProtectionError),
                );
            }
            self.stats.rx_payload_octets += data.len() as u64;
        }
        self.rx_msg_len = self.rx_msg_len.max(end);
        if !h.last {
            return;
        }
        let mut invalidated = None;
        if let Some(stag) = inv {
            match self.mrs.invalidate(stag, self.cfg.pd) {
                Ok(()) => invalidated = Some(stag),
                Err(e) => {
                    let err = if e == MrError::PdMismatch {
                        TermError::from(RemoteProtectionError::StagCannotBeInvalidated)
                    } else {
                        TermError::from(RemoteOperationError::StagCannotBeInvalidated)
                    };
                    return self.fail(
                        err,
                        Some(ulpdu),
                        Involved::Recv(WcStatus::LocalProtectionError),
                    );
                }
            }
        }
        let len = self.rx_msg_len as u32;
        self.rx_msg_len = 0;
        self.rx_msn[0] = self.rx_msn[0].wrapping_add(1);
        if let Some(r) = self.rq.pop_front() {
            self.stats.rx_messages += 1;
            self.recv_completion(
                r.wr_id,
                WcStatus::Success,
                len,
                solicited,
                invalidated,
                None,
            );
        }
    }

    /// The LLP (MPA or TCP) failed under us (CRC, marker, unexpected close...): queue a
    /// Terminate with `err` where it can still be sent (not if one was sent or received
    /// already), flush everything in error: the oldest started send work request gets
    /// [`WcStatus::TransportError`] with `err`, the rest [`WcStatus::Flushed`].
    pub fn on_llp_error(&mut self, err: TermError) {
        if self.state == QpState::Error {
            return;
        }
        if self.state == QpState::Terminating {
            // A Terminate is already queued; it says why.
            return self.flush(err, Involved::OldestStarted(WcStatus::TransportError));
        }
        self.fail(err, None, Involved::OldestStarted(WcStatus::TransportError));
    }

    /// Whether a completion waits.
    pub fn has_completion(&self) -> bool {
        !self.cq.is_empty()
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
    /// closes the LLP stream (RFC 5040: nothing follows a Terminate on the stream).
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

    /// Send work requests posted and not yet completed.
    pub fn send_queue_len(&self) -> usize {
        self.slots.len()
    }

    /// Receive work requests posted and not yet completed.
    pub fn recv_queue_len(&self) -> usize {
        self.rq.len()
    }

    /// Our RDMA Reads waiting for their Read Response (at most ORD).
    pub fn outstanding_reads(&self) -> usize {
        self.out_reads.len()
    }
}

/// Where [`Qp`] writes a ULPDU: a plain buffer, or an FPDU being framed in one pass.
trait UlpduSink {
    /// Starts a ULPDU of `len` octets (1 to 64768).
    fn begin(&mut self, len: usize);
    /// Puts the next octets of the ULPDU.
    fn put(&mut self, data: &[u8]);
    /// Puts the next `len` octets of the ULPDU from region offset `off` of `mr`.
    fn put_region(&mut self, mr: &MemoryRegion, off: usize, len: usize) -> Result<(), MrError>;
}

/// A ULPDU appended to a vector as it is.
struct VecSink<'a> {
    out: &'a mut Vec<u8>,
}

impl UlpduSink for VecSink<'_> {
    fn begin(&mut self, len: usize) {
        self.out.reserve(len);
    }

    fn put(&mut self, data: &[u8]) {
        self.out.extend_from_slice(data);
    }

    fn put_region(&mut self, mr: &MemoryRegion, off: usize, len: usize) -> Result<(), MrError> {
        mr.append_to(off, len, self.out)
    }
}

/// A ULPDU framed as it is written: the framer and buffer until it starts, then its
/// writer.
struct FpduSink<'a> {
    start: Option<(&'a mut Framer, &'a mut Vec<u8>)>,
    /// The writer once the ULPDU started, or why it could not start.
    writer: Result<FpduWriter<'a>, FrameError>,
}

impl UlpduSink for FpduSink<'_> {
    fn begin(&mut self, len: usize) {
        if let Some((framer, out)) = self.start.take() {
            self.writer = framer.writer(len, out);
        }
    }

    fn put(&mut self, data: &[u8]) {
        if let Ok(w) = &mut self.writer {
            w.put(data);
        }
    }

    fn put_region(&mut self, mr: &MemoryRegion, off: usize, len: usize) -> Result<(), MrError> {
        let Ok(w) = &mut self.writer else {
            return Ok(());
        };
        w.put_with(len, |at, n, out, pass| {
            let mem = mr.memory();
            match pass {
                CopyPass::CrcSum(crc) => mem.append_crc32c_sum(off + at, n, out, crc),
                CopyPass::Crc(crc) => mem.append_crc32c(off + at, n, out, crc).map(|c| (c, 0)),
                CopyPass::Copy => mem.append_to(off + at, n, out).map(|()| (0, 0)),
                CopyPass::Marked { crc, sums, markers } => {
                    mem.append_marked(off + at, n, out, markers, crc, sums)
                }
            }
            .map_err(MrError::from)
        })
    }
}
