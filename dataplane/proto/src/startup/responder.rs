//! The MPA Responder (RFC 5044 7.1.2 rules 2, 4-10; RFC 6581 6, 9 and 10).

use std::time::{Duration, Instant};

use wire::mpa::fpdu::Framer;
use wire::mpa::startup_frame::{
    incomplete_at_close, parse_with, Flags, ParseOptions, Parsed, MAX_PD_LENGTH, REV_1, REV_2,
};

use super::{
    fpdu_modes, frame_ulpdu, ApiError, CloseKind, Dialect, EnhancedData, Established, Event,
    Failure, FirstFpduProbe, FpduMode, FrameKind, MpaErrorCode, Output, Outputs, QueueMsns,
    Rejected, RequestReceived, Role, StartupError, StartupFrame, Waiting,
    DEFAULT_FIRST_FPDU_TIMEOUT, DEFAULT_REQUEST_TIMEOUT, DEFAULT_RTR_TIMEOUT,
};
use crate::ird_ord::{responder_ird_ord, IrdOrd, MAX_IRD_ORD};
use crate::rtr::{self, FirstUlpdu};
use crate::rtr::{responder_rtr_flags, RtrType, RtrTypes, DEFAULT_RTR_PREFERENCE};

/// Responder policy and parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResponderConfig {
    /// Frame dialect (default RFC 6581; the others are opt-in).
    pub dialect: Dialect,
    /// M in the Reply: require markers in what the Initiator sends (default off).
    pub markers: bool,
    /// C in the Reply (default on). CRC is used if either side sets C (RFC 5044 7.1.1).
    pub crc: bool,
    /// Most IRD this side can provide (default 128, siw's per-QP limit).
    pub max_ird: u16,
    /// Most ORD this side can use (default 128).
    pub max_ord: u16,
    /// RTR types this side accepts (RFC 6581 9.2: "The responder MUST support at least one
    /// RTR indication option"). Default all three. Read needs `max_ird` >= 1.
    pub rtr_types: RtrTypes,
    /// Preference among RTR types (default Write, Read, Send, like siw).
    pub rtr_preference: [RtrType; 3],
    /// Set every offered RTR type we support in the Reply (RFC 6581 9.2 SHOULD; default on);
    /// off: only the most preferred one (what siw and Chelsio do).
    pub reply_all_common_rtr: bool,
    /// 2007 dialect: honour an S (Rtr Frame) in the Request (default on).
    pub rtr_frame: bool,
    /// Time to wait for the Request (RFC 5044 7.1.2 rules 8 and 10). Default 5 s.
    pub request_timeout: Option<Duration>,
    /// Time a peer-to-peer Responder waits for the RTR, or a 2007-dialect one for the Rtr
    /// Frame, after its Reply. Default 10 s (siw waits forever). On expiry TCP is closed
    /// without a Terminate (RFC 5044 7.1.2 rule 4 forbids any FPDU before one is received).
    pub rtr_timeout: Option<Duration>,
    /// Time a client-server Responder waits for the Initiator's first FPDU (a ULP message,
    /// whose timing is the ULP's; RFC 5044 gives no bound, but a peer that never sends it
    /// must not hold the connection forever). Default 10 s.
    pub first_fpdu_timeout: Option<Duration>,
    /// Echo the Request's reserved bits in the Reply (siw does). Default off: RFC 5044
    /// "MUST be set to zero when sending".
    pub echo_reserved_bits: bool,
    /// Lowest Request Rev accepted (default 0, like siw).
    pub min_rev: u8,
    /// Highest Request Rev accepted (default 2).
    pub max_rev: u8,
    /// Longest Request private data the consumer takes (default 512, MPA's most): the
    /// connection manager rejects a longer one with the reason instead of handing it on.
    pub max_private_data: usize,
}

impl Default for ResponderConfig {
    fn default() -> Self {
        Self {
            dialect: Dialect::Rfc6581,
            markers: false,
            crc: true,
            max_ird: 128,
            max_ord: 128,
            rtr_types: RtrTypes::ALL,
            rtr_preference: DEFAULT_RTR_PREFERENCE,
            reply_all_common_rtr: true,
            rtr_frame: true,
            request_timeout: Some(DEFAULT_REQUEST_TIMEOUT),
            rtr_timeout: Some(DEFAULT_RTR_TIMEOUT),
            first_fpdu_timeout: Some(DEFAULT_FIRST_FPDU_TIMEOUT),
            echo_reserved_bits: false,
            min_rev: 0,
            max_rev: REV_2,
            max_private_data: MAX_PD_LENGTH,
        }
    }
}

impl ResponderConfig {
    fn validate(&self) -> Result<(), ApiError> {
        // RFC 6581 6: "A host accepting MPA connections MUST continue to accept MPA Requests
        // with version one, even if it supports version two."
        if self.min_rev > REV_1 || self.max_rev < REV_1 {
            return Err(ApiError::MustAcceptRev1);
        }
        if self.max_ird > MAX_IRD_ORD || self.max_ord > MAX_IRD_ORD {
            return Err(ApiError::IrdOrdTooLarge);
        }
        if self.effective_rtr_types().is_empty() {
            return Err(ApiError::NoRtrTypes);
        }
        Ok(())
    }

    /// RTR types we can accept: a Read RTR needs an IRRQ slot.
    fn effective_rtr_types(&self) -> RtrTypes {
        if self.max_ird == 0 {
            self.rtr_types.without(RtrType::Read)
        } else {
            self.rtr_types
        }
    }
}

/// The ULP's answer to a Request ([`Responder::accept`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcceptParams {
    /// ULP Private Data for the Reply (at most 512 octets, 508 with the enhanced word).
    pub private_data: Vec<u8>,
    /// The IRD the ULP wants at least; raised to the initiator ORD as far as
    /// [`ResponderConfig::max_ird`] allows (RFC 6581 9.1). Default 0 (inherit from the
    /// Request, like `rdma_accept(id, NULL)`).
    pub ird: u16,
    /// The most ORD the ULP wants; lowered to the initiator IRD and
    /// [`ResponderConfig::max_ord`]. Default `u16::MAX` (inherit from the Request).
    pub ord: u16,
    /// ULP-required ORD: reject (with this ORD in the Reply) if the initiator IRD is below
    /// it (RFC 6581 9.1 MAY). Default `None`.
    pub required_ord: Option<u16>,
}

impl Default for AcceptParams {
    fn default() -> Self {
        Self {
            private_data: Vec::new(),
            ird: 0,
            ord: u16::MAX,
            required_ord: None,
        }
    }
}

/// Coarse state of a [`Responder`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ResponderState {
    /// Waiting for the Request.
    WaitingRequest,
    /// Request reported; waiting for [`Responder::accept`] / [`Responder::reject`].
    AwaitingDecision,
    /// Reply sent; waiting for the 2007 dialect's Rtr Frame.
    WaitingRtrFrame,
    /// Reply sent; waiting for the first FPDU (RTR or ULP message). Nothing may be sent.
    WaitingFirstFpdu,
    /// Done: established, rejected or failed (see the events).
    Finished,
}

/// What the first FPDU must or may be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expect {
    /// Client-server: a ULP message, handed over intact.
    UlpMessage,
    /// RFC 6581 peer-to-peer: an RTR of one of these types, else TERM 2/0/7.
    Rtr(RtrTypes),
    /// 2010 draft: an RTR of these types is consumed; anything else is a ULP message.
    MaybeRtr(RtrTypes),
}

#[derive(Debug)]
struct Accepted {
    request: StartupFrame,
    reply: StartupFrame,
    tx_mode: FpduMode,
    rx_mode: FpduMode,
    ird_ord: Option<IrdOrd>,
    peer_to_peer: bool,
}

#[derive(Debug)]
enum State {
    WaitingRequest {
        deadline: Option<Instant>,
    },
    AwaitingDecision(Box<StartupFrame>),
    WaitingRtrFrame {
        deadline: Option<Instant>,
        accepted: Box<Accepted>,
    },
    WaitingFirstFpdu {
        deadline: Option<Instant>,
        accepted: Box<Accepted>,
        probe: FirstFpduProbe,
        expect: Expect,
    },
    Finished,
}

/// The MPA Responder state machine (sans-IO). See the [module docs](super).
#[derive(Debug)]
pub struct Responder {
    config: ResponderConfig,
    state: State,
    /// Octets received: the Request being assembled; after the Reply, the receive stream
    /// from its marker origin (or the Rtr Frame being assembled).
    rx: Vec<u8>,
    out: Outputs,
}

impl Responder {
    /// Starts MPA in Responder mode: wait for the Request (RFC 5044 7.1.2 rule 2), with
    /// the Request timeout armed (rule 8: "Implementations SHOULD put a timeout on waiting
    /// for the MPA Request Frame when started in Responder mode").
    pub fn new(config: ResponderConfig, now: Instant) -> Result<Self, ApiError> {
        config.validate()?;
        let deadline = config.request_timeout.and_then(|d| now.checked_add(d));
        Ok(Self {
            config,
            state: State::WaitingRequest { deadline },
            rx: Vec::new(),
            out: Outputs::default(),
        })
    }

    /// Coarse state.
    pub fn state(&self) -> ResponderState {
        match self.state {
            State::WaitingRequest { .. } => ResponderState::WaitingRequest,
            State::AwaitingDecision(_) => ResponderState::AwaitingDecision,
            State::WaitingRtrFrame { .. } => ResponderState::WaitingRtrFrame,
            State::WaitingFirstFpdu { .. } => ResponderState::WaitingFirstFpdu,
            State::Finished => ResponderState::Finished,
        }
    }

    /// Next output to act on, in order.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.out.pop()
    }

    /// When [`Responder::on_timeout`] should be called next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.state {
            State::WaitingRequest { deadline }
            | State::WaitingRtrFrame { deadline, .. }
            | State::WaitingFirstFpdu { deadline, .. } => deadline,
            _ => None,
        }
    }

    /// Time passes. A timeout closes TCP without sending anything: before the Request
    /// nothing may be sent; after the Reply, no FPDU before one is received (rule 4).
    pub fn on_timeout(&mut self, now: Instant) {
        let (deadline, what) = match &self.state {
            State::WaitingRequest { deadline } => (*deadline, Waiting::Request),
            State::WaitingRtrFrame { deadline, .. } => (*deadline, Waiting::RtrFrame),
            State::WaitingFirstFpdu { deadline, .. } => (*deadline, Waiting::FirstFpdu),
            _ => return,
        };
        if deadline.is_some_and(|d| now >= d) {
            self.fail_close(StartupError::Timeout(what));
        }
    }

    /// TCP closed or reset by the peer.
    pub fn on_closed(&mut self, kind: CloseKind) {
        let error = match &self.state {
            State::WaitingRequest { .. } => {
                match incomplete_at_close(&self.rx, &self.parse_options(FrameKind::Request)) {
                    Some(e) => StartupError::InvalidFrame(e),
                    None => StartupError::TcpClosed(kind),
                }
            }
            State::WaitingRtrFrame { .. } => {
                match incomplete_at_close(&self.rx, &self.parse_options(FrameKind::Rtr)) {
                    Some(e) => StartupError::InvalidFrame(e),
                    None => StartupError::TcpClosed(kind),
                }
            }
            State::AwaitingDecision(_) | State::WaitingFirstFpdu { .. } => {
                StartupError::TcpClosed(kind)
            }
            State::Finished => return,
        };
        self.fail_close(error);
    }

    /// Octets received from TCP. Once the machine has finished (after [`Event::Established`]
    /// in particular) octets are ignored: they belong to the dataplane.
    pub fn on_data(&mut self, data: &[u8], _now: Instant) {
        if data.is_empty() {
            return;
        }
        match self.state {
            State::WaitingRequest { .. } => {
                self.rx.extend_from_slice(data);
                self.try_request();
            }
            State::AwaitingDecision(_) => {
                // The Initiator must wait for the Reply (rule 3) and cannot have seen one:
                // these octets break the protocol (siw: "peer sent extra data").
                let octets = self.rx.len() + data.len();
                self.fail_close(StartupError::UnexpectedData { octets });
            }
            State::WaitingRtrFrame { .. } => {
                self.rx.extend_from_slice(data);
                self.try_rtr_frame();
            }
            State::WaitingFirstFpdu { .. } => {
                self.rx.extend_from_slice(data);
                self.try_first_fpdu(data);
            }
            State::Finished => {}
        }
    }

    /// The ULP accepts the Request: send the Reply with R = 0 (RFC 5044 7.1.2 rule 2),
    /// negotiated per RFC 6581 9, then wait for the first FPDU sending nothing (rule 4).
    /// With [`AcceptParams::required_ord`] above the initiator IRD, a reject is sent instead
    /// (RFC 6581 9.1) and reported as [`Event::Rejected`].
    pub fn accept(&mut self, params: AcceptParams, now: Instant) -> Result<(), ApiError> {
        let State::AwaitingDecision(request) = &self.state else {
            return Err(ApiError::InvalidState);
        };
        let request = (**request).clone();
        let cfg = &self.config;
        let local_ird = params.ird.min(cfg.max_ird);
        let local_ord = params.ord.min(cfg.max_ord);
        let supported = cfg.effective_rtr_types();
        let mut reply = self.reply_template(&request, false);
        let mut ird_ord = None;
        let mut peer_to_peer = false;
        let mut expect = Expect::UlpMessage;
        let mut reject_ird = false;

        if let Some(theirs) = request.enhanced {
            // RFC 6581 10: "If the responder receives an enhanced MPA message, it MUST
            // respond with an enhanced MPA message."
            let (flags, draft) = match cfg.dialect {
                // Draft 8: the Reply "MUST include all options that the responder will
                // support without requiring a connection specific enabling action".
                Dialect::Draft2010 => (supported, true),
                _ if theirs.is_peer_to_peer() => (
                    responder_rtr_flags(
                        theirs.rtr(),
                        supported,
                        &cfg.rtr_preference,
                        cfg.reply_all_common_rtr,
                    ),
                    false,
                ),
                _ => (RtrTypes::NONE, false),
            };
            let n = responder_ird_ord(
                theirs.ird(),
                theirs.ord(),
                local_ird,
                local_ord,
                cfg.max_ird,
                cfg.max_ord,
                flags.contains(RtrType::Read),
                params.required_ord,
            );
            let word = if draft {
                EnhancedData::draft2010(n.reply_ird, n.reply_ord, flags)
            } else if theirs.is_peer_to_peer() {
                // RFC 6581 9.2: "If Control Flag A is 1 in the MPA Request message, then the
                // responder MUST set Control Flag A to 1 in the MPA reply message."
                EnhancedData::peer_to_peer(n.reply_ird, n.reply_ord, flags)
            } else {
                // "The responder MUST set Control Flag A to 0 if Control Flag A is 0."
                EnhancedData::new(n.reply_ird, n.reply_ord)
            };
            reply.enhanced = word.ok();
            reply.flags.s = reply.enhanced.is_some();
            ird_ord = Some(IrdOrd {
                peer_ird: theirs.ird(),
                peer_ord: theirs.ord(),
                sent_ird: n.reply_ird,
                sent_ord: n.reply_ord,
                local_ird: n.local_ird,
                local_ord: n.local_ord,
            });
            reject_ird = n.reject_insufficient_initiator_ird;
            if draft {
                expect = Expect::MaybeRtr(supported);
                peer_to_peer = false;
            } else if theirs.is_peer_to_peer() {
                // Liberal: any RTR type we support, not only those set in the Reply.
                expect = Expect::Rtr(supported);
                peer_to_peer = true;
            }
        } else if cfg.dialect == Dialect::RtrFrame2007 && cfg.rtr_frame && request.flags.s {
            // 2007 proposal: "In Rep frame, 0 means that Responder cannot support Rtr frame,
            // while 1 that it is and is waiting for it."
            reply.flags.s = true;
            peer_to_peer = true;
        }
        reply.private_data = params.private_data;
        if reply.pd_length() > MAX_PD_LENGTH {
            return Err(ApiError::PrivateDataTooLong {
                pd_length: reply.pd_length(),
            });
        }

        if reject_ird {
            // RFC 6581 9.1: reject, "specify the required ORD in the MPA Reject Frame
            // responder ORD". The sentence "Thus, the TERM message MUST contain Layer 2, Error
            // Type 0, Error Code 6" cannot apply here: a Responder may send no FPDU before it
            // has received one (RFC 5044 7.1.2 rule 4), and a rejecting Reply exits MPA
            // (rule 2), so there is never an FPDU stream to carry it. The required ORD travels
            // in the Reply instead.
            reply.flags.r = true;
            return self.send_reject(reply, ird_ord, true);
        }

        let bytes = reply
            .to_bytes(cfg.dialect)
            .map_err(|_| ApiError::PrivateDataTooLong {
                pd_length: reply.pd_length(),
            })?;
        self.out.send(bytes);
        let (tx_mode, rx_mode) = fpdu_modes(&request, &reply, Role::Responder);
        let wait_rtr_frame = cfg.dialect == Dialect::RtrFrame2007 && reply.flags.s;
        let timeout = if wait_rtr_frame || matches!(expect, Expect::Rtr(_)) {
            cfg.rtr_timeout
        } else {
            cfg.first_fpdu_timeout
        };
        let deadline = timeout.and_then(|d| now.checked_add(d));
        let accepted = Box::new(Accepted {
            request,
            reply,
            tx_mode,
            rx_mode,
            ird_ord,
            peer_to_peer,
        });
        self.rx.clear();
        self.state = if wait_rtr_frame {
            State::WaitingRtrFrame { deadline, accepted }
        } else {
            State::WaitingFirstFpdu {
                deadline,
                probe: FirstFpduProbe::new(rx_mode),
                accepted,
                expect,
            }
        };
        Ok(())
    }

    /// The ULP rejects the Request: send a Reply with R = 1 and the ULP's Private Data, exit
    /// MPA and leave TCP open (RFC 5044 7.1.2 rules 2 and 6). An enhanced Request gets an
    /// enhanced Reject (RFC 6581 10) with IRD = ORD = 0 and flag A echoed (9.2).
    pub fn reject(&mut self, private_data: Vec<u8>) -> Result<(), ApiError> {
        let State::AwaitingDecision(request) = &self.state else {
            return Err(ApiError::InvalidState);
        };
        let request = (**request).clone();
        let mut reply = self.reply_template(&request, true);
        let mut ird_ord = None;
        if let Some(theirs) = request.enhanced {
            let word = match self.config.dialect {
                Dialect::Draft2010 => EnhancedData::draft2010(0, 0, RtrTypes::NONE),
                _ if theirs.is_peer_to_peer() => EnhancedData::peer_to_peer(
                    0,
                    0,
                    responder_rtr_flags(
                        theirs.rtr(),
                        self.config.effective_rtr_types(),
                        &self.config.rtr_preference,
                        self.config.reply_all_common_rtr,
                    ),
                ),
                _ => EnhancedData::new(0, 0),
            };
            reply.enhanced = word.ok();
            reply.flags.s = reply.enhanced.is_some();
            ird_ord = Some(IrdOrd {
                peer_ird: theirs.ird(),
                peer_ord: theirs.ord(),
                sent_ird: 0,
                sent_ord: 0,
                local_ird: 0,
                local_ord: 0,
            });
        }
        reply.private_data = private_data;
        if reply.pd_length() > MAX_PD_LENGTH {
            return Err(ApiError::PrivateDataTooLong {
                pd_length: reply.pd_length(),
            });
        }
        self.send_reject(reply, ird_ord, false)
    }

    /// Local abort with a local catastrophic error. A Responder cannot send the TERM 2/0/5
    /// of RFC 6581 9.3 before it has received an FPDU (RFC 5044 7.1.2 rule 4), and the
    /// machine finishes as soon as it has; so it only closes TCP. After
    /// [`Event::Established`], use [`super::local_catastrophic_terminate`].
    pub fn abort(&mut self) -> Result<(), ApiError> {
        if matches!(self.state, State::Finished) {
            return Err(ApiError::InvalidState);
        }
        self.fail_close(StartupError::LocalCatastrophic);
        Ok(())
    }

    fn parse_options(&self, kind: FrameKind) -> ParseOptions {
        ParseOptions {
            expected: Some(kind),
            min_rev: self.config.min_rev,
            max_rev: self.config.max_rev,
            dialect: self.config.dialect,
        }
    }

    fn fail(&mut self, error: StartupError, term_sent: Option<MpaErrorCode>, close: bool) {
        let ird_ord = match &self.state {
            State::WaitingRtrFrame { accepted, .. } | State::WaitingFirstFpdu { accepted, .. } => {
                accepted.ird_ord
            }
            _ => None,
        };
        self.finish_failed(error, term_sent, close, ird_ord);
    }

    fn finish_failed(
        &mut self,
        error: StartupError,
        term_sent: Option<MpaErrorCode>,
        close: bool,
        ird_ord: Option<IrdOrd>,
    ) {
        self.state = State::Finished;
        self.out.fail(Failure {
            error,
            term_sent,
            retry_unenhanced: false,
            ird_ord,
        });
        if close {
            self.out.close();
        }
    }

    fn fail_close(&mut self, error: StartupError) {
        self.fail(error, None, true);
    }

    /// The Reply's fixed part: Rev echoed (Rev 0, 1 and 2 are all answered in kind; an
    /// enhanced Request has Rev >= 2), our M and C, reserved bits zero unless echoing.
    fn reply_template(&self, request: &StartupFrame, rejected: bool) -> StartupFrame {
        let mut reply = StartupFrame::new(FrameKind::Reply, request.rev);
        reply.flags = Flags {
            m: self.config.markers,
            c: self.config.crc,
            r: rejected,
            s: false,
            res: if self.config.echo_reserved_bits {
                request.flags.res
            } else {
                0
            },
        };
        reply
    }

    fn send_reject(
        &mut self,
        reply: StartupFrame,
        ird_ord: Option<IrdOrd>,
        insufficient_initiator_ird: bool,
    ) -> Result<(), ApiError> {
        let bytes =
            reply
                .to_bytes(self.config.dialect)
                .map_err(|_| ApiError::PrivateDataTooLong {
                    pd_length: reply.pd_length(),
                })?;
        self.out.send(bytes);
        self.state = State::Finished;
        self.out.event(Event::Rejected(Box::new(Rejected {
            role: Role::Responder,
            responder_ird_ord: ird_ord.map(|n| (n.sent_ird, n.sent_ord)),
            reply,
            insufficient_initiator_ird,
            trailing: std::mem::take(&mut self.rx),
        })));
        Ok(())
    }

    /// RFC 5044 7.1.2 rule 2: "wait until an MPA Request Frame is received and validated";
    /// "If the MPA Request Frame is improperly formatted, the implementation MUST close the
    /// TCP connection and exit MPA" (no Reply). R is not checked in a Request, nor are the
    /// reserved bits (7.1.1).
    fn try_request(&mut self) {
        match parse_with(&self.rx, &self.parse_options(FrameKind::Request)) {
            Ok(Parsed::NeedMore(_)) => {}
            Err(e) => self.fail_close(StartupError::InvalidFrame(e)),
            Ok(Parsed::Frame { frame, consumed }) => {
                if self.rx.len() > consumed {
                    let octets = self.rx.len() - consumed;
                    return self.fail_close(StartupError::UnexpectedData { octets });
                }
                self.rx.clear();
                let enhanced = frame.enhanced.is_some();
                let e = frame.enhanced;
                self.out
                    .event(Event::RequestReceived(Box::new(RequestReceived {
                        enhanced,
                        initiator_ird_ord: e.map(|e| (e.ird(), e.ord())),
                        peer_to_peer: e.is_some_and(|e| e.is_peer_to_peer()),
                        offered_rtr: e.map_or(RtrTypes::NONE, |e| e.rtr()),
                        request: frame.clone(),
                    })));
                self.state = State::AwaitingDecision(Box::new(frame));
            }
        }
    }

    /// 2007 dialect: the Rtr Frame ends the Initiator's startup; what follows is FPDU mode,
    /// and the Responder may send at once (the frame is the ready-to-receive indication the
    /// proposal adds in place of rule 4's first FPDU).
    fn try_rtr_frame(&mut self) {
        match parse_with(&self.rx, &self.parse_options(FrameKind::Rtr)) {
            Ok(Parsed::NeedMore(_)) => {}
            Err(e) => self.fail_close(StartupError::InvalidFrame(e)),
            Ok(Parsed::Frame { consumed, .. }) => {
                let State::WaitingRtrFrame { accepted, .. } =
                    std::mem::replace(&mut self.state, State::Finished)
                else {
                    return;
                };
                let rx_pending = self.rx.split_off(consumed);
                self.established(
                    *accepted,
                    None,
                    0,
                    rx_pending,
                    QueueMsns::default(),
                    0,
                    false,
                );
            }
        }
    }

    /// RFC 5044 7.1.2 rule 4: "MPA Responder mode implementations MUST receive and validate
    /// at least one FPDU before sending any FPDUs or Markers."
    fn try_first_fpdu(&mut self, data: &[u8]) {
        let State::WaitingFirstFpdu { probe, .. } = &mut self.state else {
            return;
        };
        let first = match probe.push(data) {
            Ok(None) => return,
            Ok(Some(f)) => f,
            // CRC or marker error on the first FPDU: error 2/3. MPA "MUST NOT close the TCP
            // connection following a reported error" (RFC 5044 8); no TERM either, since no
            // valid FPDU was received (rule 4).
            Err(e) => return self.fail(StartupError::Fpdu(e), None, false),
        };
        let State::WaitingFirstFpdu {
            accepted, expect, ..
        } = std::mem::replace(&mut self.state, State::Finished)
        else {
            return;
        };
        let mut framer = Framer::new(accepted.tx_mode);
        let class = rtr::classify(&first.ulpdu);
        if let FirstUlpdu::Terminate { layer, etype, code } = class {
            // The Initiator terminated (e.g. TERM 2/0/6 or 2/0/7): report; no TERM back.
            let error = StartupError::PeerTerminated { layer, etype, code };
            return self.finish_failed(error, None, true, accepted.ird_ord);
        }
        let accepted_types = match expect {
            Expect::UlpMessage => RtrTypes::NONE,
            Expect::Rtr(t) | Expect::MaybeRtr(t) => t,
        };
        let mut rx_next_msn = QueueMsns::default();
        let mut rtr_bytes = Vec::new();
        let rtr = match class {
            FirstUlpdu::ZeroLengthWrite if accepted_types.contains(RtrType::Write) => {
                Some(RtrType::Write)
            }
            FirstUlpdu::ZeroLengthSend { msn: 1 } if accepted_types.contains(RtrType::Send) => {
                rx_next_msn.send = 2;
                Some(RtrType::Send)
            }
            FirstUlpdu::ZeroLengthReadRequest {
                msn: 1,
                sink_stag,
                sink_to,
            } if accepted_types.contains(RtrType::Read) => {
                rx_next_msn.read_request = 2;
                // The Read RTR is answered with a zero-length RDMA Read Response, produced
                // here (rule 4 is satisfied now), so the dataplane starts after it.
                let resp = rtr::zero_length_read_response(sink_stag, sink_to);
                if !frame_ulpdu(&mut framer, &resp, &mut rtr_bytes) {
                    rtr_bytes.clear();
                }
                Some(RtrType::Read)
            }
            _ => None,
        };
        match (rtr, expect) {
            (None, Expect::Rtr(_)) => {
                // Peer-to-peer, and the first FPDU is not an RTR we accept. A valid FPDU has
                // been received, so rule 4 no longer forbids a Terminate: TERM 2/0/7 (no
                // matching RTR option, RFC 6581 8), as Chelsio does, then close.
                let mut bytes = Vec::new();
                let sent = frame_ulpdu(
                    &mut framer,
                    &super::mpa_terminate(MpaErrorCode::NoMatchingRtr, 1),
                    &mut bytes,
                );
                self.out.send(bytes);
                self.finish_failed(
                    StartupError::NotAnRtr,
                    sent.then_some(MpaErrorCode::NoMatchingRtr),
                    true,
                    accepted.ird_ord,
                );
            }
            (None, _) => {
                // Client-server (or a 2010-draft first message that is no RTR): the FPDU is
                // the ULP's first message, handed over intact from the stream start.
                let rx_pending = std::mem::take(&mut self.rx);
                self.established(*accepted, None, 0, rx_pending, rx_next_msn, 0, true);
            }
            (Some(t), _) => {
                self.out.send(rtr_bytes);
                let end = usize::try_from(first.end).unwrap_or(usize::MAX);
                let rx_pending = self.rx.get(end..).map(<[u8]>::to_vec).unwrap_or_default();
                self.established(
                    *accepted,
                    Some(t),
                    first.end,
                    rx_pending,
                    rx_next_msn,
                    framer.stream_offset(),
                    false,
                );
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn established(
        &mut self,
        a: Accepted,
        rtr: Option<RtrType>,
        rx_offset: u64,
        rx_pending: Vec<u8>,
        rx_next_msn: QueueMsns,
        tx_offset: u64,
        initiator_sends_first: bool,
    ) {
        self.state = State::Finished;
        self.rx.clear();
        self.out.event(Event::Established(Box::new(Established {
            role: Role::Responder,
            dialect: self.config.dialect,
            peer_to_peer: a.peer_to_peer || rtr.is_some(),
            request: a.request,
            reply: a.reply,
            tx_mode: a.tx_mode,
            rx_mode: a.rx_mode,
            ird_ord: a.ird_ord,
            rtr,
            read_rtr_sink: None,
            tx_offset,
            rx_offset,
            rx_pending,
            tx_next_msn: QueueMsns::default(),
            rx_next_msn,
            initiator_sends_first,
        })));
    }
}
