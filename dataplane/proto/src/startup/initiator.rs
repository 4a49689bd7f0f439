//! The MPA Initiator (RFC 5044 7.1.2 rules 1, 3, 5-10; RFC 6581 9 and 10).

use std::time::{Duration, Instant};

use wire::mpa::fpdu::Framer;
use wire::mpa::startup_frame::{
    incomplete_at_close, parse_with, Flags, ParseOptions, Parsed, MAX_PD_LENGTH, REV_1, REV_2,
};

use super::{
    fpdu_modes, frame_ulpdu, ApiError, CloseKind, Dialect, EnhancedData, Established, Event,
    Failure, FrameKind, MpaErrorCode, Output, Outputs, QueueMsns, ReadRtrSink, Rejected,
    ReplyReceived, Role, StartupError, StartupFrame, Waiting, DEFAULT_REPLY_TIMEOUT,
};
use crate::ird_ord::{initiator_ird_ord, IrdOrd, MAX_IRD_ORD};
use crate::rtr;
use crate::rtr::{
    choose_initiator_rtr, RtrType, RtrTypes, DEFAULT_RTR_PREFERENCE, DEFAULT_RTR_STAG,
};

/// Initiator policy and parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InitiatorConfig {
    /// Frame dialect (default RFC 6581; the others are opt-in).
    pub dialect: Dialect,
    /// ULP Private Data for the Request (at most 512 octets, 508 with the enhanced word).
    pub private_data: Vec<u8>,
    /// M: require markers in what the Responder sends (default off).
    pub markers: bool,
    /// C: ask for CRC (default on). CRC is used if either side sets C (RFC 5044 7.1.1).
    pub crc: bool,
    /// Send an enhanced Request (Rev 2, S, IRD/ORD word; RFC 6581 6). Default on. When off
    /// the Request is a plain RFC 5044 Rev 1 Request (RFC 6581 10: "The initiator MUST NOT
    /// use the enhanced RDMA connection establishment formats ... when no enhanced
    /// functionality is desired"). Not used by [`Dialect::RtrFrame2007`], which has no
    /// enhanced word.
    pub enhanced: bool,
    /// Initiator IRD sent in the Request (0x3FFF: left to the ULP). Default 1.
    pub ird: u16,
    /// Initiator ORD sent in the Request (0x3FFF: left to the ULP). Default 1.
    pub ord: u16,
    /// Most IRD this side can provide; a Responder ORD above it is answered with TERM
    /// 2/0/6 (RFC 6581 9.1). Default 128 (siw's per-QP limit).
    pub max_ird: u16,
    /// Peer-to-peer model: flag A with the RTR types (RFC 6581 9.2), the 2010 draft's
    /// locally configured RTR, or the 2007 dialect's S bit. Default off.
    pub peer_to_peer: bool,
    /// RTR types this side can send (offered as B/C/D). Default Write and Read.
    pub rtr_types: RtrTypes,
    /// Which negotiated RTR to send first. Default Write, Read, Send.
    pub rtr_preference: [RtrType; 3],
    /// STag of a Write RTR, and sink and source STag of a Read RTR. Default 1.
    pub rtr_stag: u32,
    /// Time to wait for the Reply (RFC 5044 7.1.2 rule 10). Default 10 s; `None`: forever.
    pub reply_timeout: Option<Duration>,
    /// Let the ULP examine an accepting Reply before FPDU mode ([`Event::ReplyReceived`],
    /// [`Initiator::confirm`], [`Initiator::refuse`]). Default off: enter Full Operation at
    /// once (the ULP may still close, RFC 5044 7.1.2 rule 6).
    pub confirm_reply: bool,
    /// RFC 6581 10 fallback (opt-in, default off): when the enhanced Request is answered by
    /// a close or reset without any Reply octets, set [`Failure::retry_unenhanced`].
    pub rev1_fallback: bool,
    /// Lowest Reply Rev accepted (default 0).
    pub min_rev: u8,
    /// Highest Reply Rev accepted (default 2).
    pub max_rev: u8,
    /// Time to wait after the accepting Reply arrived before the first FPDU: the RTR when
    /// peer-to-peer, else [`Event::Established`] (so the ULP's first message waits too).
    /// Default zero. Not required by any RFC; a workaround for Linux siw (6.1), which
    /// hands the socket to its QP only after it has processed the Reply and reads an FPDU
    /// that arrived in between only when more data comes (PEERS.md).
    pub first_fpdu_delay: Duration,
}

impl Default for InitiatorConfig {
    fn default() -> Self {
        Self {
            dialect: Dialect::Rfc6581,
            private_data: Vec::new(),
            markers: false,
            crc: true,
            enhanced: true,
            ird: 1,
            ord: 1,
            max_ird: 128,
            peer_to_peer: false,
            rtr_types: RtrTypes::WRITE_READ,
            rtr_preference: DEFAULT_RTR_PREFERENCE,
            rtr_stag: DEFAULT_RTR_STAG,
            reply_timeout: Some(DEFAULT_REPLY_TIMEOUT),
            confirm_reply: false,
            rev1_fallback: false,
            min_rev: 0,
            max_rev: REV_2,
            first_fpdu_delay: Duration::ZERO,
        }
    }
}

impl InitiatorConfig {
    /// The configuration for the RFC 6581 10 retry: an unenhanced Rev 1 Request, without
    /// peer-to-peer (which needs the enhanced word) and without a further fallback. "Let
    /// the ULP deal with ORD and IRD and peer-to-peer negotiations."
    pub fn unenhanced_fallback(&self) -> Self {
        Self {
            enhanced: false,
            peer_to_peer: self.peer_to_peer && self.dialect == Dialect::RtrFrame2007,
            rev1_fallback: false,
            ..self.clone()
        }
    }

    fn sends_enhanced(&self) -> bool {
        self.enhanced && self.dialect.s_means_enhanced_data()
    }

    /// The Request this configuration sends.
    pub fn request(&self) -> Result<StartupFrame, ApiError> {
        if self.ird > MAX_IRD_ORD || self.ord > MAX_IRD_ORD {
            return Err(ApiError::IrdOrdTooLarge);
        }
        if self.min_rev > self.max_rev {
            return Err(ApiError::BadRev);
        }
        let mut f = StartupFrame::new(FrameKind::Request, REV_1);
        f.flags = Flags {
            m: self.markers,
            c: self.crc,
            ..Flags::default()
        };
        f.private_data = self.private_data.clone();
        match self.dialect {
            Dialect::Rfc6581 | Dialect::Draft2010 if self.enhanced => {
                let word = match self.dialect {
                    // Draft 8: "In the MPA Request, the Control Flag MUST be set unless the
                    // Initiator cannot support this option".
                    Dialect::Draft2010 => {
                        EnhancedData::draft2010(self.ird, self.ord, self.rtr_types)
                    }
                    // RFC 6581 9.2: A = 1 and B/C/D for each supported option; A = 0 and
                    // B/C/D = 0 for client-server.
                    _ if self.peer_to_peer => {
                        if self.rtr_types.is_empty() {
                            return Err(ApiError::NoRtrTypes);
                        }
                        EnhancedData::peer_to_peer(self.ird, self.ord, self.rtr_types)
                    }
                    _ => EnhancedData::new(self.ird, self.ord),
                }
                .map_err(|_| ApiError::IrdOrdTooLarge)?;
                f.rev = REV_2;
                f.flags.s = true;
                f.enhanced = Some(word);
            }
            Dialect::Rfc6581 | Dialect::Draft2010 => {
                if self.peer_to_peer {
                    return Err(ApiError::PeerToPeerNeedsEnhanced);
                }
            }
            // 2007 proposal: "S: indicator in the Req frame whether or not Requestor will
            // send Rtr frame"; usable with Rev 1.
            Dialect::RtrFrame2007 => f.flags.s = self.peer_to_peer,
        }
        if f.pd_length() > MAX_PD_LENGTH {
            return Err(ApiError::PrivateDataTooLong {
                pd_length: f.pd_length(),
            });
        }
        Ok(f)
    }
}

/// Coarse state of an [`Initiator`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InitiatorState {
    /// Request sent, waiting for the Reply.
    WaitingReply,
    /// Accepting Reply received, waiting for [`Initiator::confirm`] / [`Initiator::refuse`].
    AwaitingConfirm,
    /// Accepting Reply received and confirmed, waiting out
    /// [`InitiatorConfig::first_fpdu_delay`] before Full Operation.
    Delaying,
    /// Done: established, rejected, refused or failed (see the events).
    Finished,
}

/// What the Initiator will do once the ULP confirms the Reply.
#[derive(Debug)]
struct Pending {
    reply: StartupFrame,
    ird_ord: Option<IrdOrd>,
    peer_to_peer: bool,
    rtr: Option<RtrType>,
    send_rtr_frame: bool,
}

#[derive(Debug)]
enum State {
    WaitingReply {
        deadline: Option<Instant>,
    },
    AwaitingConfirm(Box<Pending>),
    Delaying {
        until: Instant,
        pending: Box<Pending>,
    },
    Finished,
}

/// The MPA Initiator state machine (sans-IO). See the [module docs](super).
#[derive(Debug)]
pub struct Initiator {
    config: InitiatorConfig,
    request: StartupFrame,
    state: State,
    /// Octets received: the Reply being assembled, then FPDU-mode octets.
    rx: Vec<u8>,
    /// When the octets that completed the Reply arrived.
    reply_at: Option<Instant>,
    out: Outputs,
}

impl Initiator {
    /// Starts MPA in Initiator mode: queues the MPA Request (RFC 5044 7.1.2 rule 1: "the
    /// MPA implementation MUST send a valid MPA Request Frame") and arms the Reply timeout.
    pub fn new(config: InitiatorConfig, now: Instant) -> Result<Self, ApiError> {
        let request = config.request()?;
        let mut out = Outputs::default();
        out.send(
            request
                .to_bytes(config.dialect)
                .map_err(|_| ApiError::BadRev)?,
        );
        let deadline = config.reply_timeout.and_then(|d| now.checked_add(d));
        Ok(Self {
            config,
            request,
            state: State::WaitingReply { deadline },
            rx: Vec::new(),
            reply_at: None,
            out,
        })
    }

    /// The Request sent.
    pub fn request(&self) -> &StartupFrame {
        &self.request
    }

    /// Coarse state.
    pub fn state(&self) -> InitiatorState {
        match self.state {
            State::WaitingReply { .. } => InitiatorState::WaitingReply,
            State::AwaitingConfirm(_) => InitiatorState::AwaitingConfirm,
            State::Delaying { .. } => InitiatorState::Delaying,
            State::Finished => InitiatorState::Finished,
        }
    }

    /// Next output to act on, in order.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.out.pop()
    }

    /// When [`Initiator::on_timeout`] should be called next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.state {
            State::WaitingReply { deadline } => deadline,
            State::Delaying { until, .. } => Some(until),
            _ => None,
        }
    }

    /// Time passes: the Reply timeout (RFC 5044 7.1.2 rule 10) closes TCP with an error;
    /// the end of [`InitiatorConfig::first_fpdu_delay`] enters Full Operation.
    pub fn on_timeout(&mut self, now: Instant) {
        match self.state {
            State::WaitingReply { deadline: Some(d) } if now >= d => {
                self.fail_close(StartupError::Timeout(Waiting::Reply), None);
            }
            State::Delaying { until, .. } if now >= until => {
                if let State::Delaying { pending, .. } =
                    std::mem::replace(&mut self.state, State::Finished)
                {
                    self.establish(*pending);
                }
            }
            _ => {}
        }
    }

    /// TCP closed or reset by the peer.
    ///
    /// Before a complete Reply: error 4 if part of a frame arrived ("PD_Length field does
    /// not match the length of the Private Data field", RFC 5044 7.1.1), else error 1; with
    /// [`InitiatorConfig::rev1_fallback`] and an enhanced Request, a close with no Reply
    /// octets at all is the unenhanced-responder case of RFC 6581 10 and sets
    /// [`Failure::retry_unenhanced`].
    pub fn on_closed(&mut self, kind: CloseKind) {
        match self.state {
            State::WaitingReply { .. } => {
                let opts = self.parse_options();
                let error = match incomplete_at_close(&self.rx, &opts) {
                    Some(e) => StartupError::InvalidFrame(e),
                    None => StartupError::TcpClosed(kind),
                };
                let retry =
                    self.rx.is_empty() && self.config.rev1_fallback && self.config.sends_enhanced();
                self.state = State::Finished;
                self.out.fail(Failure {
                    error,
                    term_sent: None,
                    retry_unenhanced: retry,
                    ird_ord: None,
                });
                self.out.close();
            }
            State::AwaitingConfirm(_) | State::Delaying { .. } => {
                self.fail_close(StartupError::TcpClosed(kind), None)
            }
            State::Finished => {}
        }
    }

    /// Octets received from TCP. Once the machine has finished (after [`Event::Established`]
    /// in particular) octets are ignored: they belong to the dataplane.
    pub fn on_data(&mut self, data: &[u8], now: Instant) {
        match self.state {
            State::WaitingReply { .. } => {
                self.rx.extend_from_slice(data);
                self.reply_at = Some(now);
                self.try_reply();
            }
            // FPDU-mode octets; handed over with the rest.
            State::AwaitingConfirm(_) | State::Delaying { .. } => self.rx.extend_from_slice(data),
            State::Finished => {}
        }
    }

    /// The ULP accepts the Reply's Private Data: enter Full Operation (send the RTR if
    /// peer-to-peer) and report [`Event::Established`], at once or once
    /// [`InitiatorConfig::first_fpdu_delay`] after the Reply has passed.
    pub fn confirm(&mut self) -> Result<(), ApiError> {
        match std::mem::replace(&mut self.state, State::Finished) {
            State::AwaitingConfirm(p) => {
                self.establish_after_delay(p);
                Ok(())
            }
            other => {
                self.state = other;
                Err(ApiError::InvalidState)
            }
        }
    }

    /// The ULP finds the Reply's Private Data unacceptable: "the implementation MUST exit
    /// MPA, leaving the TCP connection open" (RFC 5044 7.1.2 rule 3). Reported as
    /// [`Event::Rejected`] with role Initiator and the accepting Reply; nothing is sent.
    pub fn refuse(&mut self) -> Result<(), ApiError> {
        match std::mem::replace(&mut self.state, State::Finished) {
            State::AwaitingConfirm(p) => {
                self.out.event(Event::Rejected(Box::new(Rejected {
                    role: Role::Initiator,
                    responder_ird_ord: p.reply.enhanced.map(|e| (e.ird(), e.ord())),
                    reply: p.reply,
                    insufficient_initiator_ird: false,
                    trailing: std::mem::take(&mut self.rx),
                })));
                Ok(())
            }
            other => {
                self.state = other;
                Err(ApiError::InvalidState)
            }
        }
    }

    /// Local abort with a local catastrophic error. Once a valid Reply arrived (FPDU mode
    /// on our transmit side), a TERM 2/0/5 is sent first (RFC 6581 9.3); before that only
    /// TCP is closed (no FPDU may precede the Reply).
    pub fn abort(&mut self) -> Result<(), ApiError> {
        match std::mem::replace(&mut self.state, State::Finished) {
            State::WaitingReply { .. } => {
                self.fail_close(StartupError::LocalCatastrophic, None);
                Ok(())
            }
            State::AwaitingConfirm(p) | State::Delaying { pending: p, .. } => {
                self.term_and_close(
                    &p.reply,
                    MpaErrorCode::LocalCatastrophic,
                    StartupError::LocalCatastrophic,
                    p.ird_ord,
                );
                Ok(())
            }
            State::Finished => Err(ApiError::InvalidState),
        }
    }

    fn parse_options(&self) -> ParseOptions {
        ParseOptions {
            expected: Some(FrameKind::Reply),
            min_rev: self.config.min_rev,
            max_rev: self.config.max_rev,
            dialect: self.config.dialect,
        }
    }

    fn fail_close(&mut self, error: StartupError, ird_ord: Option<IrdOrd>) {
        self.state = State::Finished;
        self.out.fail(Failure {
            error,
            term_sent: None,
            retry_unenhanced: false,
            ird_ord,
        });
        self.out.close();
    }

    /// Sends a Terminate (Layer 2, EType 0, `code`) as our first FPDU, then closes.
    fn term_and_close(
        &mut self,
        reply: &StartupFrame,
        code: MpaErrorCode,
        error: StartupError,
        ird_ord: Option<IrdOrd>,
    ) {
        self.state = State::Finished;
        let (tx_mode, _) = fpdu_modes(&self.request, reply, Role::Initiator);
        let mut framer = Framer::new(tx_mode);
        let mut bytes = Vec::new();
        let sent = frame_ulpdu(&mut framer, &super::mpa_terminate(code, 1), &mut bytes);
        self.out.send(bytes);
        self.out.fail(Failure {
            error,
            term_sent: sent.then_some(code),
            retry_unenhanced: false,
            ird_ord,
        });
        self.out.close();
    }

    /// RFC 5044 7.1.2 rule 3: "MPA Initiator mode implementations MUST receive and validate
    /// an MPA Reply Frame." Octets before a complete Reply are not FPDUs; octets after it
    /// are FPDU-mode octets and stay in `rx`.
    fn try_reply(&mut self) {
        let opts = self.parse_options();
        match parse_with(&self.rx, &opts) {
            Ok(Parsed::NeedMore(_)) => {}
            // Improperly formatted Reply (including a Request key: the Initiator/Initiator
            // case of rule 8, and a bad key, rule 5): "MUST close the TCP connection and
            // exit MPA"; error 4 (RFC 5044 8).
            Err(e) => self.fail_close(StartupError::InvalidFrame(e), None),
            Ok(Parsed::Frame { frame, consumed }) => {
                self.rx.drain(..consumed);
                self.on_reply(frame);
            }
        }
    }

    fn on_reply(&mut self, reply: StartupFrame) {
        // Rule 3: "if the Rejected Connection bit is set to '1', the implementation MUST
        // exit MPA, leaving the TCP connection open." RFC 6581 9.1: the responder IRD/ORD
        // go to the ULP for Reject messages too.
        if reply.flags.r {
            self.state = State::Finished;
            self.out.event(Event::Rejected(Box::new(Rejected {
                role: Role::Initiator,
                responder_ird_ord: reply.enhanced.map(|e| (e.ird(), e.ord())),
                reply,
                insufficient_initiator_ird: false,
                trailing: std::mem::take(&mut self.rx),
            })));
            return;
        }
        let cfg = &self.config;
        let mut peer_to_peer = false;
        let mut rtr_allowed = RtrTypes::NONE;
        let mut send_rtr_frame = false;
        let mut ird_ord = None;
        let mut insufficient_ird = None;
        let mut responder_ird = None;
        match cfg.dialect {
            Dialect::Rfc6581 => {
                let sent = self.request.enhanced;
                match (sent, reply.enhanced) {
                    // RFC 6581 10: an enhanced responder MUST answer an enhanced Request
                    // with an enhanced Reply; an unenhanced one closes instead. A Reply
                    // without S (or Rev < 2) is treated as improperly formatted (siw resets).
                    (Some(_), None) => {
                        return self.fail_close(
                            StartupError::ReplyNotEnhanced {
                                rev: reply.rev,
                                s: reply.flags.s,
                            },
                            None,
                        )
                    }
                    // RFC 6581 10: "If the responder receives an unenhanced MPA message
                    // ('S' is set to 0), it MUST respond with an unenhanced MPA message."
                    (None, Some(_)) => {
                        return self.fail_close(StartupError::ReplyUnexpectedlyEnhanced, None)
                    }
                    (None, None) => {}
                    (Some(ours), Some(theirs)) => {
                        // RFC 6581 9.2: "The responder MUST set Control Flag A to 0 if
                        // Control Flag A is 0 in the request."
                        if !ours.is_peer_to_peer() && theirs.is_peer_to_peer() {
                            return self.fail_close(StartupError::UnrequestedPeerToPeer, None);
                        }
                        peer_to_peer = ours.is_peer_to_peer();
                        rtr_allowed = theirs.rtr();
                        responder_ird = Some(theirs.ird());
                        let (n, short) = self.negotiate(ours, theirs);
                        ird_ord = Some(n);
                        insufficient_ird = short;
                        if !theirs.is_peer_to_peer() && peer_to_peer {
                            // A not echoed: no responder-supported RTR indication.
                            rtr_allowed = RtrTypes::NONE;
                        }
                    }
                }
            }
            Dialect::Draft2010 => {
                if let (Some(ours), Some(theirs)) = (self.request.enhanced, reply.enhanced) {
                    rtr_allowed = theirs.rtr();
                    responder_ird = Some(theirs.ird());
                    let (n, short) = self.negotiate(ours, theirs);
                    ird_ord = Some(n);
                    insufficient_ird = short;
                } else if reply.rev >= REV_2 {
                    // Draft 8: "If there is no Standard RDMAP Configuration Data in the MPA
                    // Reply Frame, and the Enhanced Connection Establishment version number is
                    // used, it is the equivalent of setting 'A', 'B' and 'C'."
                    rtr_allowed = RtrTypes::ALL;
                }
                peer_to_peer = cfg.peer_to_peer;
            }
            Dialect::RtrFrame2007 => {
                // "Requestor use of Rtr frame must adhere to S bit setting of Rep frame."
                send_rtr_frame = self.request.flags.s && reply.flags.s;
                peer_to_peer = send_rtr_frame;
            }
        }

        // RFC 6581 9.1 / 9.3: set IRD/ORD first; TERM 2/0/6 if our IRD cannot cover the
        // responder ORD.
        if let Some(required) = insufficient_ird {
            return self.term_and_close(
                &reply,
                MpaErrorCode::InsufficientIrd,
                StartupError::InsufficientIrd {
                    required,
                    max: self.config.max_ird,
                },
                ird_ord,
            );
        }

        // RFC 6581 9.2: one of the negotiated RTRs, or TERM 2/0/7.
        let mut rtr = None;
        if peer_to_peer && cfg.dialect != Dialect::RtrFrame2007 {
            let draft_send_required = cfg.dialect == Dialect::Draft2010 && rtr_allowed.is_empty();
            if !draft_send_required {
                rtr = choose_initiator_rtr(
                    rtr_allowed,
                    cfg.rtr_types,
                    &cfg.rtr_preference,
                    responder_ird,
                );
                if rtr.is_none() {
                    let local = cfg.rtr_types;
                    return self.term_and_close(
                        &reply,
                        MpaErrorCode::NoMatchingRtr,
                        StartupError::NoMatchingRtr {
                            responder: rtr_allowed,
                            local,
                        },
                        ird_ord,
                    );
                }
            } else {
                // Draft 8: "Setting no Control Flags in the MPA Reply indicates that an RDMA
                // Send message will be required": the ULP's first message.
                peer_to_peer = false;
            }
        }

        let pending = Pending {
            reply,
            ird_ord,
            peer_to_peer,
            rtr,
            send_rtr_frame,
        };
        if self.config.confirm_reply {
            self.out.event(Event::ReplyReceived(Box::new(ReplyReceived {
                reply: pending.reply.clone(),
                ird_ord,
            })));
            self.state = State::AwaitingConfirm(Box::new(pending));
        } else {
            self.establish_after_delay(Box::new(pending));
        }
    }

    /// Full Operation now, or [`State::Delaying`] until `first_fpdu_delay` after the Reply.
    fn establish_after_delay(&mut self, p: Box<Pending>) {
        let until = self
            .reply_at
            .and_then(|t| t.checked_add(self.config.first_fpdu_delay));
        match until {
            Some(until) if !self.config.first_fpdu_delay.is_zero() => {
                self.state = State::Delaying { until, pending: p };
            }
            _ => self.establish(*p),
        }
    }

    /// RFC 6581 9.1 on the Initiator; the second value is the IRD required beyond
    /// [`InitiatorConfig::max_ird`], if any.
    fn negotiate(&self, ours: EnhancedData, theirs: EnhancedData) -> (IrdOrd, Option<u16>) {
        let n = initiator_ird_ord(
            ours.ird(),
            ours.ord(),
            theirs.ird(),
            theirs.ord(),
            self.config.max_ird,
        );
        let io = IrdOrd {
            peer_ird: theirs.ird(),
            peer_ord: theirs.ord(),
            sent_ird: ours.ird(),
            sent_ord: ours.ord(),
            local_ird: n.local_ird,
            local_ord: n.local_ord,
        };
        (io, n.insufficient_ird)
    }

    /// Full Operation: the Rtr Frame (2007 dialect) or the RTR (RFC 6581 9.2: "the initiator
    /// MUST generate one of the negotiated RTR indications"; 5: no later FPDU before it) is
    /// output before [`Event::Established`], so the dataplane's FPDUs follow it.
    fn establish(&mut self, p: Pending) {
        self.state = State::Finished;
        let (tx_mode, rx_mode) = fpdu_modes(&self.request, &p.reply, Role::Initiator);
        if p.send_rtr_frame {
            // 2007 proposal: a startup-format frame with the Rtr key; S "set to 0 in Rtr
            // frame"; "Rtr frame adhere to C bit as specified in Rep frame"; no Private Data.
            let mut f = StartupFrame::new(FrameKind::Rtr, self.request.rev);
            f.flags.c = p.reply.flags.c;
            if let Ok(b) = f.to_bytes(Dialect::RtrFrame2007) {
                self.out.send(b);
            }
        }
        let mut framer = Framer::new(tx_mode);
        let mut tx_next_msn = QueueMsns::default();
        let mut read_rtr_sink = None;
        if let Some(rtr) = p.rtr {
            let stag = self.config.rtr_stag;
            let ulpdu = match rtr {
                RtrType::Send => {
                    tx_next_msn.send += 1;
                    rtr::zero_length_send(1)
                }
                RtrType::Write => rtr::zero_length_write(stag),
                RtrType::Read => {
                    tx_next_msn.read_request += 1;
                    read_rtr_sink = Some(ReadRtrSink { stag, to: 0 });
                    rtr::zero_length_read_request(1, stag, stag)
                }
            };
            let mut bytes = Vec::new();
            if !frame_ulpdu(&mut framer, &ulpdu, &mut bytes) {
                return self.term_and_close(
                    &p.reply,
                    MpaErrorCode::LocalCatastrophic,
                    StartupError::LocalCatastrophic,
                    p.ird_ord,
                );
            }
            self.out.send(bytes);
        }
        let initiator_sends_first = !p.peer_to_peer;
        self.out.event(Event::Established(Box::new(Established {
            role: Role::Initiator,
            dialect: self.config.dialect,
            request: self.request.clone(),
            reply: p.reply,
            tx_mode,
            rx_mode,
            ird_ord: p.ird_ord,
            peer_to_peer: p.peer_to_peer,
            rtr: p.rtr,
            read_rtr_sink,
            tx_offset: framer.stream_offset(),
            rx_offset: 0,
            rx_pending: std::mem::take(&mut self.rx),
            tx_next_msn,
            rx_next_msn: QueueMsns::default(),
            initiator_sends_first,
        })));
    }
}
