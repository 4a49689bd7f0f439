//! The TCP connection: RFC 9293 state machine with the extensions listed in the
//! [module docs](super).

use std::collections::VecDeque;

use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{TcpControl, TcpRepr, TcpSeqNumber, TcpTimestampRepr};

use super::isn::IsnGenerator;
use super::recv::RecvBuffer;
use super::rtt::RttEstimator;
use super::send::{HoleRule, Payload, SendQueue};
use super::seq::{off_of, seq_at, seq_diff, ts_lt};
use super::TxPayload;
use super::{Config, Event, FourTuple, SendError, State, Stats};

/// IPv4 header (20) plus TCP header without options (20).
const IP_TCP_HEADERS: usize = 40;
/// Octets of the timestamps option as sent (10, padded to 12; RFC 7323 section 3).
const TS_OPTION_LEN: usize = 12;
/// The default send MSS when the peer sends no MSS option (RFC 9293 section 3.7.1).
const DEFAULT_PEER_MSS: usize = 536;
/// The smallest peer MSS honoured; smaller values are raised to it (a peer announcing a
/// tiny MSS could otherwise make us send one-octet segments).
const MIN_PEER_MSS: usize = 88;
/// Most SACK blocks we put in one ACK (three fit beside the timestamps option).
const MAX_SACK_BLOCKS: usize = 3;

fn micros(t: Instant) -> u64 {
    t.total_micros().max(0) as u64
}

fn instant(us: u64) -> Instant {
    Instant::from_micros(us.min(i64::MAX as u64) as i64)
}

fn dur_us(d: Duration) -> u64 {
    d.total_micros()
}

/// ACK scheduling (RFC 9293 section 3.8.6.3, RFC 1122 4.2.3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AckState {
    /// Nothing to acknowledge.
    Idle,
    /// An ACK is owed by the deadline (delayed ACK).
    Delayed(u64),
    /// An ACK must go out now.
    Now,
}

/// What kind of segment the transmit planner chose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// `<SEQ=x><CTL=RST>` or `<SEQ=x><ACK=y><CTL=RST,ACK>`.
    Rst {
        seq: TcpSeqNumber,
        ack: Option<TcpSeqNumber>,
    },
    /// SYN (active open) or SYN-ACK (passive or simultaneous open).
    Syn,
    /// Data and/or FIN.
    Data {
        /// 0 new data, 1 go-back-N retransmission after RTO, 2 fast retransmission of the
        /// first unacknowledged record, 3 SACK-recovery retransmission (RFC 6675 NextSeg).
        mode: u8,
    },
    /// Zero-window probe: a pure ACK with SEQ = SND.UNA - 1, which the peer must answer.
    Probe,
    /// A pure ACK (possibly with SACK blocks).
    Ack,
}

const MODE_NEW: u8 = 0;
const MODE_GOBACK: u8 = 1;
const MODE_FAST: u8 = 2;
const MODE_SACK: u8 = 3;

/// A planned outgoing segment.
#[derive(Debug, Clone, Copy)]
struct Out {
    kind: Kind,
    /// Send offset of the first octet of sequence space (SYN or data).
    seq_off: u64,
    /// Stream offset and length of the payload.
    data_start: u64,
    data_len: usize,
    whole: bool,
    fin: bool,
}

/// State saved at the first retransmission timeout of an episode (RFC 3522, RFC 4015).
#[derive(Debug, Clone, Copy)]
struct RtoUndo {
    /// TSval of the first retransmission.
    rtx_tsval: u32,
    /// cwnd and ssthresh before the timeout.
    cwnd: u64,
    ssthresh: u64,
}

/// One TCP connection (a transmission control block, RFC 9293 section 3.3.1), sans-IO.
///
/// Fed segments with [`Connection::on_segment`] and time with [`Connection::poll_transmit`];
/// it emits segments through `poll_transmit`'s callback and reports [`Event`]s through
/// [`Connection::poll_event`]. See the [module docs](super) for the model.
///
/// Sequence positions are kept as `u64` offsets from ISS (send) and IRS (receive): offset 0
/// is the SYN, stream octet `k` is offset `k + 1`.
#[derive(Debug)]
pub struct Connection {
    cfg: Config,
    tuple: FourTuple,
    state: State,
    now: u64,
    events: VecDeque<Event>,
    stats: Stats,

    // ---- send sequence space (RFC 9293 3.3.1), offsets from ISS ----
    iss: TcpSeqNumber,
    snd_una: u64,
    snd_nxt: u64,
    /// Highest offset sent so far (SND.MAX; SND.NXT is rewound on a timeout).
    snd_max: u64,
    /// SND.WND in octets, scaled.
    snd_wnd: u64,
    max_snd_wnd: u64,
    snd_wl1: TcpSeqNumber,
    snd_wl2: TcpSeqNumber,
    snd_wscale: u8,
    sendq: SendQueue,
    /// close() was called: a FIN follows the queued data.
    fin_queued: bool,

    // ---- receive sequence space, offsets from IRS ----
    irs: TcpSeqNumber,
    rcv_nxt: u64,
    /// Right edge of the window last advertised (RCV.NXT + RCV.WND as sent).
    rcv_adv: u64,
    rcv_wscale: u8,
    /// Largest window we can advertise, octets.
    rcv_buf: usize,
    recv: RecvBuffer,
    /// Offset of a FIN received out of order (or not yet processed).
    rcv_fin: Option<u64>,
    last_ack_sent: u64,
    ack: AckState,
    /// Immediate ACKs owed, one per out-of-order or duplicate segment (RFC 5681 4.2: a
    /// duplicate ACK per such segment, so the sender can count them even when a burst of
    /// segments is processed before the next transmit).
    acks_owed: u32,
    segs_unacked: u32,

    // ---- options (RFC 9293 3.7.1, RFC 7323, RFC 2018) ----
    emss: usize,
    ws_ok: bool,
    sack_ok: bool,
    ts_ok: bool,
    ts_offset: u32,
    ts_recent: u32,
    ts_recent_valid: bool,
    ts_recent_age: u64,

    // ---- timers (RFC 6298, RFC 9293 3.8.6.1) ----
    rtt: RttEstimator,
    /// The segment being timed: (offset its ACK must reach, time sent) (Karn's rule).
    rtt_timed: Option<(u64, u64)>,
    rtx_deadline: Option<u64>,
    retries: u32,
    persist_deadline: Option<u64>,
    /// USER TIMEOUT (RFC 9293 3.8.3, RFC 5482): when data or our FIN has waited this
    /// long for an acknowledgment that advances SND.UNA, the connection is aborted.
    progress_deadline: Option<u64>,
    persist_backoff: u32,
    persist_force: bool,
    probe_pending: bool,
    time_wait_deadline: Option<u64>,

    // ---- congestion control (RFC 5681, RFC 6582) ----
    cwnd: u64,
    ssthresh: u64,
    ca_acked: u64,
    dupacks: u32,
    in_recovery: bool,
    recover: u64,
    fast_rtx_pending: bool,
    /// RFC 6675 `pipe` during SACK-based loss recovery, octets.
    pipe: u64,
    /// Set by a retransmission timeout with timestamps on: what the Eifel detection
    /// (RFC 3522) needs to tell a spurious timeout and undo it (RFC 4015).
    rto_undo: Option<RtoUndo>,

    // ---- misc ----
    pending_rst: Option<(TcpSeqNumber, Option<TcpSeqNumber>)>,
    challenge_window_start: u64,
    challenge_count: u32,
    peer_fin_reported: bool,
    scratch: Vec<u8>,
}

/// The window scale (RFC 7323 2.3) that lets a window of `rcv_buf` octets be advertised.
pub(crate) fn recv_window_scale(rcv_buf: usize) -> u8 {
    let mut s = 0u8;
    while s < 14 && (rcv_buf >> s) > 65535 {
        s += 1;
    }
    s
}

impl Connection {
    fn blank(cfg: Config, tuple: FourTuple, isn: &IsnGenerator, now: u64) -> Self {
        let rcv_buf = cfg.recv_buffer.clamp(1, 1 << 30);
        let rcv_wscale = recv_window_scale(rcv_buf);
        let emss = cfg.mtu.saturating_sub(IP_TCP_HEADERS).max(MIN_PEER_MSS);
        let rtt = RttEstimator::new(
            dur_us(cfg.rto_initial),
            dur_us(cfg.rto_min),
            dur_us(cfg.rto_max),
        )
        .with_var_floor(dur_us(cfg.rto_min_var));
        let recv = RecvBuffer::new(
            cfg.max_ooo_blocks,
            cfg.report_out_of_order,
            rcv_buf.saturating_mul(2),
        );
        let iss = isn.isn(now, &tuple);
        Connection {
            tuple,
            state: State::Closed,
            now,
            events: VecDeque::new(),
            stats: Stats::default(),
            iss,
            snd_una: 0,
            snd_nxt: 0,
            snd_max: 0,
            snd_wnd: 0,
            max_snd_wnd: 0,
            snd_wl1: TcpSeqNumber(0),
            snd_wl2: TcpSeqNumber(0),
            snd_wscale: 0,
            sendq: SendQueue::default(),
            fin_queued: false,
            irs: TcpSeqNumber(0),
            rcv_nxt: 0,
            rcv_adv: 0,
            rcv_wscale: if cfg.window_scaling { rcv_wscale } else { 0 },
            rcv_buf,
            recv,
            rcv_fin: None,
            last_ack_sent: 0,
            ack: AckState::Idle,
            acks_owed: 0,
            segs_unacked: 0,
            emss,
            ws_ok: false,
            sack_ok: false,
            ts_ok: false,
            ts_offset: isn.ts_offset(&tuple),
            ts_recent: 0,
            ts_recent_valid: false,
            ts_recent_age: 0,
            rtt,
            rtt_timed: None,
            rtx_deadline: None,
            retries: 0,
            persist_deadline: None,
            progress_deadline: None,
            persist_backoff: 0,
            persist_force: false,
            probe_pending: false,
            time_wait_deadline: None,
            cwnd: 0,
            ssthresh: u64::MAX,
            ca_acked: 0,
            dupacks: 0,
            in_recovery: false,
            recover: 0,
            fast_rtx_pending: false,
            pipe: 0,
            rto_undo: None,
            pending_rst: None,
            challenge_window_start: now,
            challenge_count: 0,
            peer_fin_reported: false,
            scratch: Vec::new(),
            cfg,
        }
    }

    /// Active open (RFC 9293 section 3.10.1, OPEN call in CLOSED state): a connection in
    /// SYN-SENT whose SYN goes out on the next [`Connection::poll_transmit`].
    pub fn connect(cfg: Config, tuple: FourTuple, isn: &IsnGenerator, now: Instant) -> Self {
        let mut c = Self::blank(cfg, tuple, isn, micros(now));
        c.state = State::SynSent;
        c
    }

    /// Passive open (RFC 9293 section 3.10.7.2, SYN arriving in LISTEN): a connection in
    /// SYN-RECEIVED whose SYN-ACK goes out on the next [`Connection::poll_transmit`].
    ///
    /// `syn` must be a SYN without ACK and RST addressed to `tuple` (the
    /// [`Listener`](super::Listener) checks this); returns `None` otherwise.
    pub fn accept(
        cfg: Config,
        tuple: FourTuple,
        isn: &IsnGenerator,
        now: Instant,
        syn: &TcpRepr,
    ) -> Option<Self> {
        if syn.control != TcpControl::Syn
            || syn.ack_number.is_some()
            || syn.src_port != tuple.remote_port
            || syn.dst_port != tuple.local_port
        {
            return None;
        }
        let mut c = Self::blank(cfg, tuple, isn, micros(now));
        c.state = State::SynReceived;
        c.absorb_syn(syn);
        c.stats.segments_received += 1;
        Some(c)
    }

    /// Passive open from a SYN cookie ([`super::cookie`]): the connection the SYN-ACK of
    /// `c` would have made, fed the `ack` that completes the handshake. `None` if that
    /// ACK does not take it to ESTABLISHED (it is then answered with a RST by the caller).
    pub(crate) fn accept_cookie(
        cfg: Config,
        tuple: FourTuple,
        isn: &IsnGenerator,
        now: Instant,
        c: &super::cookie::CookieSyn,
        ack: &TcpRepr,
    ) -> Option<Self> {
        let syn = TcpRepr {
            control: TcpControl::Syn,
            seq_number: c.irs,
            ack_number: None,
            window_len: 0,
            window_scale: c.window_scale,
            max_seg_size: Some(c.mss),
            sack_permitted: c.sack_permitted,
            timestamp: ack
                .timestamp
                .filter(|_| c.timestamps)
                .map(|t| TcpTimestampRepr::new(t.tsval, 0)),
            ..super::bare_repr(tuple.remote_port, tuple.local_port, TcpControl::Syn, c.irs)
        };
        let mut conn = Self::accept(cfg, tuple, isn, now, &syn)?;
        conn.iss = c.iss;
        // Our SYN-ACK went out (statelessly): SND.NXT and SND.MAX are past it, and nothing
        // is timed or retransmitted.
        conn.snd_nxt = 1;
        conn.snd_max = 1;
        conn.on_segment(now, ack);
        (conn.state != State::SynReceived && conn.state != State::Closed).then_some(conn)
    }

    // ------------------------------------------------------------------ accessors

    /// The RFC 9293 state.
    pub fn state(&self) -> State {
        self.state
    }

    /// The 4-tuple.
    pub fn tuple(&self) -> &FourTuple {
        &self.tuple
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Effective send MSS (RFC 9293 section 3.7.1 Eff.snd.MSS, RFC 7323 section 3: minus
    /// the 12 octets of the timestamps option when in use): the largest payload one segment
    /// carries. MPA computes MULPDU from it (RFC 5044 section 6.2,
    /// [`mulpdu`](wire::mpa::fpdu::mulpdu)). Final once the connection is ESTABLISHED.
    pub fn emss(&self) -> usize {
        self.emss
    }

    /// Counters, including FPDU alignment of sent segments.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// ISS, the initial send sequence number.
    pub fn iss(&self) -> TcpSeqNumber {
        self.iss
    }

    /// IRS, the initial receive sequence number (meaningful once the peer's SYN arrived).
    pub fn irs(&self) -> TcpSeqNumber {
        self.irs
    }

    /// SND.UNA, the oldest unacknowledged sequence number.
    pub fn snd_una(&self) -> TcpSeqNumber {
        seq_at(self.iss, self.snd_una)
    }

    /// SND.NXT, the next sequence number to send.
    pub fn snd_nxt(&self) -> TcpSeqNumber {
        seq_at(self.iss, self.snd_nxt)
    }

    /// RCV.NXT, the next sequence number expected.
    pub fn rcv_nxt(&self) -> TcpSeqNumber {
        seq_at(self.irs, self.rcv_nxt)
    }

    /// SND.WND in octets (after window scaling).
    pub fn snd_wnd(&self) -> u64 {
        self.snd_wnd
    }

    /// RCV.WND last advertised, in octets.
    pub fn rcv_wnd(&self) -> u64 {
        self.rcv_adv.saturating_sub(self.rcv_nxt)
    }

    /// cwnd in octets (RFC 5681).
    pub fn cwnd(&self) -> u64 {
        self.cwnd
    }

    /// ssthresh in octets (RFC 5681).
    pub fn ssthresh(&self) -> u64 {
        self.ssthresh
    }

    /// The current RTO, backoff included (RFC 6298).
    pub fn rto(&self) -> Duration {
        Duration::from_micros(self.rtt.rto())
    }

    /// SRTT, once measured (RFC 6298).
    pub fn srtt(&self) -> Option<Duration> {
        self.rtt.srtt().map(Duration::from_micros)
    }

    /// Window scaling (RFC 7323 section 2) is in use; `(send shift, receive shift)`.
    pub fn window_scale(&self) -> Option<(u8, u8)> {
        self.ws_ok.then_some((self.snd_wscale, self.rcv_wscale))
    }

    /// Timestamps (RFC 7323 section 3) are in use.
    pub fn timestamps(&self) -> bool {
        self.ts_ok
    }

    /// SACK (RFC 2018) was negotiated.
    pub fn sack(&self) -> bool {
        self.sack_ok
    }

    /// Octets sent and not yet acknowledged (SND.NXT - SND.UNA).
    pub fn in_flight(&self) -> u64 {
        self.snd_nxt.saturating_sub(self.snd_una)
    }

    /// Octets queued for sending and not yet acknowledged (sent or not).
    pub fn send_queue_len(&self) -> usize {
        self.sendq.bytes()
    }

    /// Records queued and not yet wholly acknowledged.
    pub fn send_queue_records(&self) -> usize {
        self.sendq.records()
    }

    /// In TIME-WAIT: what the tuple needs for the rest of its 2 MSL
    /// ([`TimeWait`](super::TimeWait)), so that the connection itself can be dropped.
    pub fn time_wait(&self) -> Option<super::TimeWait> {
        if self.state != State::TimeWait {
            return None;
        }
        let window = (self.free_space() >> self.rcv_wscale).min(65535) as u16;
        Some(super::TimeWait {
            tuple: self.tuple,
            snd_nxt: seq_at(self.iss, self.snd_nxt),
            rcv_nxt: seq_at(self.irs, self.rcv_nxt),
            window,
            ts: self.ts_ok.then_some((
                self.ts_offset,
                dur_us(self.cfg.ts_tick).max(1),
                self.ts_recent,
            )),
            deadline: instant(self.time_wait_deadline.unwrap_or(self.now)),
            two_msl: self.cfg.msl * 2,
        })
    }

    /// Gives memory back: buffers grown for a burst and empty now are shrunk (an idle
    /// connection keeps little).
    pub fn shrink_buffers(&mut self) {
        self.recv.shrink();
        self.sendq.shrink();
        self.scratch = Vec::new();
    }

    /// In-order octets received and not yet taken with [`Connection::recv`].
    pub fn recv_queue_len(&self) -> usize {
        self.recv.ready_len()
    }

    /// Next event, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// `d` microseconds from now.
    fn after(&self, d: u64) -> u64 {
        self.now.saturating_add(d)
    }

    fn synchronized(&self) -> bool {
        !matches!(
            self.state,
            State::Closed | State::Listen | State::SynSent | State::SynReceived
        )
    }

    // ------------------------------------------------------------------ user calls

    /// Queues one record (RFC 5044 section 5.3 / draft 5.3: an FPDU, or before FPDU mode an
    /// MPA Request/Reply frame) for sending. Records are never merged or reordered; TCP
    /// segments are cut at their boundaries whenever EMSS and the windows allow.
    ///
    /// Allowed from SYN-SENT on (data waits for ESTABLISHED) until [`Connection::close`];
    /// beyond [`Config::send_buffer`] queued octets it fails with [`SendError::Full`].
    /// The record is returned with the error.
    pub fn send_fpdu(&mut self, fpdu: Vec<u8>) -> Result<(), (SendError, Vec<u8>)> {
        let open = matches!(
            self.state,
            State::SynSent | State::SynReceived | State::Established | State::CloseWait
        );
        if !open || self.fin_queued {
            return Err((SendError::NotOpen, fpdu));
        }
        if fpdu.is_empty() {
            return Err((SendError::Empty, fpdu));
        }
        if self.sendq.bytes() + fpdu.len() > self.cfg.send_buffer {
            return Err((SendError::Full, fpdu));
        }
        self.sendq.push(fpdu);
        Ok(())
    }

    /// An empty buffer to build the next record in before [`Connection::send_fpdu`]: the
    /// buffer of an acknowledged record when one is spare (so a steady stream of records
    /// allocates nothing), else a new one.
    pub fn take_buffer(&mut self) -> Vec<u8> {
        self.sendq.take_buffer()
    }

    /// Octets [`Connection::send_fpdu`] still accepts.
    pub fn send_space(&self) -> usize {
        self.cfg.send_buffer.saturating_sub(self.sendq.bytes())
    }

    /// Takes in-order received octets: `f(stream_offset, octets)`, where stream offset 0 is
    /// the first octet after the peer's SYN. Returns the octets taken; the receive window
    /// opens by as much (RFC 9293 3.8.6.2.2 decides when the peer is told).
    pub fn recv(&mut self, f: impl FnMut(u64, &[u8])) -> usize {
        self.recv_max(usize::MAX, f)
    }

    /// Like [`Connection::recv`], at most `max` octets.
    pub fn recv_max(&mut self, max: usize, f: impl FnMut(u64, &[u8])) -> usize {
        let n = self.recv.drain(max, f);
        if n > 0 && self.synchronized() {
            // Window update if the window was small and may open substantially.
            let old = self.rcv_adv.saturating_sub(self.rcv_nxt);
            let new_right = self.rcv_nxt + self.free_space();
            if old < (self.rcv_buf as u64) / 2
                && new_right.saturating_sub(self.rcv_adv) >= self.sws_threshold()
                && self.ack != AckState::Now
            {
                self.ack = AckState::Now;
            }
        }
        n
    }

    /// Hands out segments that arrived ahead of a gap, each with its stream offset, once
    /// each (only when [`Config::report_out_of_order`] is set). MPA with markers uses them
    /// to place FPDUs early (RFC 5044 section 6,
    /// [`Deframer::recover_out_of_order`](wire::mpa::deframe::Deframer::recover_out_of_order));
    /// the same octets are handed out again in order by [`Connection::recv`].
    pub fn recv_out_of_order(&mut self, f: impl FnMut(u64, &[u8])) -> usize {
        self.recv.drain_reports(f)
    }

    /// CLOSE (RFC 9293 section 3.10.4): a FIN follows the queued data. In SYN-SENT the
    /// connection just closes.
    pub fn close(&mut self) {
        match self.state {
            State::SynSent => self.enter_closed(None),
            // RFC 9293 3.10.4: in SYN-RECEIVED the FIN waits for ESTABLISHED.
            State::SynReceived => self.fin_queued = true,
            State::Established => {
                self.fin_queued = true;
                self.state = State::FinWait1;
            }
            State::CloseWait => {
                self.fin_queued = true;
                self.state = State::LastAck;
            }
            _ => {}
        }
    }

    /// ABORT (RFC 9293 section 3.10.5): sends a RST (from a synchronized state) and closes
    /// at once. No [`Event::Reset`] is reported for a local abort; [`Event::Closed`] is.
    pub fn abort(&mut self) {
        if matches!(
            self.state,
            State::SynReceived
                | State::Established
                | State::FinWait1
                | State::FinWait2
                | State::CloseWait
        ) {
            self.pending_rst = Some((seq_at(self.iss, self.snd_nxt), None));
        }
        self.enter_closed(None);
    }

    fn enter_closed(&mut self, ev: Option<Event>) {
        if let Some(e) = ev {
            self.events.push_back(e);
        }
        if self.state != State::Closed {
            self.events.push_back(Event::Closed);
        }
        self.state = State::Closed;
        self.rtx_deadline = None;
        self.persist_deadline = None;
        self.progress_deadline = None;
        self.time_wait_deadline = None;
        self.ack = AckState::Idle;
        self.acks_owed = 0;
        self.probe_pending = false;
        self.fast_rtx_pending = false;
    }

    // ------------------------------------------------------------------ options

    /// Adopts the peer's SYN: IRS and the options of RFC 9293 3.7.1 (MSS), RFC 7323
    /// (window scale, timestamps) and RFC 2018 (SACK-permitted).
    fn absorb_syn(&mut self, syn: &TcpRepr) {
        self.irs = syn.seq_number;
        self.rcv_nxt = 1;
        self.last_ack_sent = 1;
        self.ws_ok = self.cfg.window_scaling && syn.window_scale.is_some();
        if self.ws_ok {
            self.snd_wscale = syn.window_scale.unwrap_or(0).min(14);
        } else {
            self.snd_wscale = 0;
            self.rcv_wscale = 0;
            self.rcv_buf = self.rcv_buf.min(65535);
        }
        self.sack_ok = self.cfg.sack && syn.sack_permitted;
        self.ts_ok = self.cfg.timestamps && syn.timestamp.is_some();
        if let Some(ts) = syn.timestamp.filter(|_| self.ts_ok) {
            self.ts_recent = ts.tsval;
            self.ts_recent_valid = true;
            self.ts_recent_age = self.now;
        }
        let peer_mss = syn
            .max_seg_size
            .map_or(DEFAULT_PEER_MSS, usize::from)
            .max(MIN_PEER_MSS);
        let ours = self
            .cfg
            .mtu
            .saturating_sub(IP_TCP_HEADERS)
            .max(MIN_PEER_MSS);
        let opt = if self.ts_ok { TS_OPTION_LEN } else { 0 };
        self.emss = peer_mss
            .min(ours)
            .saturating_sub(opt)
            .max(MIN_PEER_MSS - 12);
        // The window in a SYN is never scaled (RFC 7323 2.2).
        self.snd_wnd = u64::from(syn.window_len);
        self.max_snd_wnd = self.snd_wnd;
        self.snd_wl1 = syn.seq_number;
        self.snd_wl2 = syn.ack_number.unwrap_or(self.iss);
        // Our own SYN's window is min(buffer, 65535), unscaled.
        self.rcv_adv = 1 + self.syn_window() as u64;
    }

    fn syn_window(&self) -> u16 {
        self.rcv_buf.min(65535) as u16
    }

    fn init_cwnd(&mut self) {
        let smss = self.emss as u64;
        self.cwnd = (u64::from(self.cfg.initial_cwnd_segments.max(1))) * smss;
        self.ssthresh = u64::MAX;
    }

    fn tsval(&self) -> u32 {
        let tick = dur_us(self.cfg.ts_tick).max(1);
        ((self.now / tick) as u32).wrapping_add(self.ts_offset)
    }

    // ------------------------------------------------------------------ input

    /// Processes one arriving segment (RFC 9293 section 3.10.7 "SEGMENT ARRIVES"). The
    /// segment's data is `repr.payload`. Never panics; malformed or hostile segments are
    /// dropped, answered with an ACK or a challenge ACK (RFC 5961) or with a RST, as the
    /// RFCs say. Call [`Connection::poll_transmit`] afterwards for any answer.
    ///
    /// The caller demultiplexes by 4-tuple; a segment whose ports do not match is dropped.
    pub fn on_segment(&mut self, now: Instant, repr: &TcpRepr) {
        self.now = self.now.max(micros(now));
        if repr.src_port != self.tuple.remote_port || repr.dst_port != self.tuple.local_port {
            self.stats.segments_dropped += 1;
            return;
        }
        self.stats.segments_received += 1;
        match self.state {
            State::Closed => {
                if let Some(r) = super::reset_for(repr) {
                    self.pending_rst = Some((r.seq_number, r.ack_number));
                }
            }
            State::Listen => {}
            State::SynSent => self.on_segment_syn_sent(repr),
            _ => self.on_segment_synchronized(repr),
        }
        // An ACK may have closed the window or ended what was in flight: the persist
        // timer and the USER TIMEOUT are armed now, not at the next transmit (which may
        // never come when nothing can be sent).
        self.arm_persist();
        self.track_progress();
    }

    /// RFC 9293 section 3.10.7.3, SYN-SENT.
    fn on_segment_syn_sent(&mut self, repr: &TcpRepr) {
        let is_rst = repr.control == TcpControl::Rst;
        // First, check the ACK bit.
        let mut ack_ok = false;
        if let Some(ack) = repr.ack_number {
            let d = seq_diff(ack, self.iss);
            ack_ok = d > 0 && d as u64 <= self.snd_max;
            if !ack_ok {
                if !is_rst {
                    self.pending_rst = Some((ack, None));
                }
                self.stats.segments_dropped += 1;
                return;
            }
        }
        // Second, the RST bit.
        if is_rst {
            if ack_ok {
                self.enter_closed(Some(Event::Reset));
            } else {
                self.stats.segments_dropped += 1;
            }
            return;
        }
        // Fourth, the SYN bit.
        if repr.control != TcpControl::Syn {
            self.stats.segments_dropped += 1;
            return;
        }
        self.absorb_syn(repr);
        if let Some(ack) = repr.ack_number {
            let ack_off = seq_diff(ack, self.iss) as u64;
            self.snd_una = ack_off;
            if let Some((end, sent)) = self.rtt_timed.take() {
                if ack_off >= end {
                    self.rtt.sample(self.now.saturating_sub(sent));
                }
            }
            self.rtx_deadline = None;
            self.retries = 0;
            self.init_cwnd();
            self.state = State::Established;
            self.events.push_back(Event::Established);
            self.ack = AckState::Now;
        } else {
            // Simultaneous open: SYN-RECEIVED, send SYN,ACK with the same ISS.
            self.state = State::SynReceived;
            self.snd_nxt = 0;
            self.rtt_timed = None;
        }
        // Data in a SYN is not taken; it is not acknowledged, so the peer sends it again.
    }

    /// RFC 9293 section 3.10.7.4, every state from SYN-RECEIVED on.
    fn on_segment_synchronized(&mut self, repr: &TcpRepr) {
        let is_rst = repr.control == TcpControl::Rst;
        let is_syn = repr.control == TcpControl::Syn;
        let is_fin = repr.control == TcpControl::Fin;
        let rcv_nxt_seq = seq_at(self.irs, self.rcv_nxt);
        let seg_off = off_of(self.rcv_nxt, rcv_nxt_seq, repr.seq_number);
        let seg_len = repr.payload.len() as i64 + i64::from(is_syn) + i64::from(is_fin);
        let wnd = self.rcv_adv.saturating_sub(self.rcv_nxt) as i64;
        let nxt = self.rcv_nxt as i64;

        // A retransmitted SYN in SYN-RECEIVED: our SYN,ACK was lost; send it again.
        if self.state == State::SynReceived
            && is_syn
            && repr.ack_number.is_none()
            && repr.seq_number == self.irs
        {
            if self.snd_una == 0 {
                self.snd_nxt = 0;
            }
            return;
        }

        // RFC 7323 5.3: PAWS, before the sequence number check.
        if self.ts_ok && !is_rst && self.ts_recent_valid {
            // RFC 7323 5.5: TS.Recent older than 24 days is stale.
            // With finer ticks the TSval clock wraps sooner: 2^31 ticks, at most 24 days.
            let stale = dur_us(self.cfg.ts_tick)
                .max(1)
                .saturating_mul(1 << 31)
                .min(24 * 86_400 * 1_000_000);
            if self.now.saturating_sub(self.ts_recent_age) > stale {
                self.ts_recent_valid = false;
            } else if let Some(ts) = repr.timestamp {
                if ts_lt(ts.tsval, self.ts_recent) {
                    self.stats.paws_rejected += 1;
                    self.ack = AckState::Now;
                    return;
                }
            }
        }
        if self.ts_ok && !is_rst && repr.timestamp.is_none() {
            // RFC 7323 3.2: a non-RST segment without TSopt SHOULD be dropped silently.
            self.stats.segments_dropped += 1;
            return;
        }

        // RFC 5961 section 4.2: a SYN in a synchronized state gets a challenge ACK,
        // whatever its sequence number (this replaces RFC 9293's "fourth" step).
        if is_syn {
            self.challenge_ack();
            return;
        }

        // First, check the sequence number (RFC 9293 3.10.7.4 table).
        let acceptable = if seg_len == 0 {
            if wnd == 0 {
                seg_off == nxt
            } else {
                nxt <= seg_off && seg_off < nxt + wnd
            }
        } else if wnd == 0 {
            // Special allowance: take the ACK of a data segment at RCV.NXT (zero-window
            // probe), drop its text below.
            seg_off == nxt
        } else {
            let last = seg_off + seg_len - 1;
            (nxt <= seg_off && seg_off < nxt + wnd) || (nxt <= last && last < nxt + wnd)
        };
        if !acceptable {
            if !is_rst {
                self.owe_ack();
                self.stats.duplicate_segments += u64::from(seg_off + seg_len <= nxt);
            }
            self.stats.segments_dropped += 1;
            return;
        }

        // Second, the RST bit (RFC 5961 section 3.2).
        if is_rst {
            if seg_off == nxt {
                self.recv.clear();
                self.enter_closed(Some(Event::Reset));
            } else {
                self.challenge_ack();
            }
            return;
        }

        // Fifth, the ACK field.
        let Some(ack) = repr.ack_number else {
            self.stats.segments_dropped += 1;
            return;
        };
        let una_seq = seq_at(self.iss, self.snd_una);
        let ack_rel = seq_diff(ack, una_seq);
        let ack_off = self.snd_una as i64 + ack_rel;
        if self.state == State::SynReceived {
            if ack_rel > 0 && ack_off as u64 <= self.snd_max {
                // A close() in SYN-RECEIVED takes effect now (RFC 9293 3.10.4).
                self.state = if self.fin_queued {
                    State::FinWait1
                } else {
                    State::Established
                };
                self.events.push_back(Event::Established);
                self.snd_una = ack_off as u64;
                if self.snd_nxt < self.snd_una {
                    self.snd_nxt = self.snd_una;
                }
                if let Some((end, sent)) = self.rtt_timed.take() {
                    if self.snd_una >= end {
                        self.rtt.sample(self.now.saturating_sub(sent));
                    }
                }
                self.rtx_deadline = None;
                self.retries = 0;
                self.init_cwnd();
                self.snd_wnd = u64::from(repr.window_len) << self.snd_wscale;
                self.max_snd_wnd = self.max_snd_wnd.max(self.snd_wnd);
                self.snd_wl1 = repr.seq_number;
                self.snd_wl2 = ack;
            } else {
                self.pending_rst = Some((ack, None));
                self.stats.segments_dropped += 1;
                return;
            }
        }
        // RFC 5961 section 5.2 and RFC 9293: an ACK for data not yet sent, or older than
        // the largest window the peer ever offered, is answered with an ACK and dropped.
        if ack_off > self.snd_max as i64
            || ack_off < (self.snd_una as i64).saturating_sub(self.max_snd_wnd as i64)
        {
            self.challenge_ack();
            self.stats.segments_dropped += 1;
            return;
        }
        let ack_off_u = ack_off.max(0) as u64;
        let seg_wnd = u64::from(repr.window_len) << self.snd_wscale;
        let pure = repr.payload.is_empty() && !is_fin;
        self.process_ack(repr, ack, ack_off_u, seg_wnd, pure);

        // RFC 7323 4.3: update TS.Recent when the segment covers Last.ACK.sent.
        if self.ts_ok {
            if let Some(ts) = repr.timestamp {
                let last_ack = self.last_ack_sent as i64;
                if seg_off <= last_ack && !ts_lt(ts.tsval, self.ts_recent) {
                    self.ts_recent = ts.tsval;
                    self.ts_recent_valid = true;
                    self.ts_recent_age = self.now;
                }
            }
        }

        let fin_acked = self.fin_queued && self.snd_una == self.data_end() + 1;
        match self.state {
            State::FinWait1 if fin_acked => {
                self.state = State::FinWait2;
                // Not in RFC 9293: a peer that never sends its FIN must not hold the
                // connection forever (Linux tcp_fin_timeout). The TIME-WAIT deadline field
                // serves as the FIN-WAIT-2 deadline.
                self.time_wait_deadline = Some(self.after(dur_us(self.cfg.fin_wait2_timeout)));
            }
            State::Closing if fin_acked => self.enter_time_wait(),
            State::LastAck if fin_acked => {
                self.enter_closed(None);
                return;
            }
            _ => {}
        }

        // Seventh, the segment text.
        let takes_text = matches!(
            self.state,
            State::Established | State::FinWait1 | State::FinWait2
        );
        let mut fin_in_window = is_fin;
        if takes_text && !repr.payload.is_empty() {
            if wnd == 0 {
                // Data beyond a zero window: dropped, ACK tells the peer.
                self.ack = AckState::Now;
                fin_in_window = false;
            } else {
                let right = nxt + wnd;
                let start = seg_off.max(nxt);
                let end = (seg_off + repr.payload.len() as i64).min(right);
                if end < seg_off + repr.payload.len() as i64 {
                    fin_in_window = false;
                }
                if start < end {
                    let a = (start - seg_off) as usize;
                    let b = (end - seg_off) as usize;
                    // Receive offset k+1 is stream octet k.
                    let stream_off = (start - 1) as u64;
                    let ins = self.recv.insert(stream_off, &repr.payload[a..b]);
                    self.rcv_nxt = self.recv.nxt() + 1;
                    if ins.out_of_order {
                        self.stats.out_of_order_segments += 1;
                        self.owe_ack();
                    } else if ins.duplicate {
                        self.stats.duplicate_segments += 1;
                        self.owe_ack();
                    } else if ins.filled_hole {
                        self.ack = AckState::Now;
                    } else {
                        self.schedule_ack();
                    }
                } else {
                    self.stats.duplicate_segments += 1;
                    self.owe_ack();
                }
            }
        }

        // Eighth, the FIN bit.
        if is_fin && fin_in_window && takes_text {
            let fin_off = (seg_off + repr.payload.len() as i64).max(0) as u64;
            if fin_off >= self.rcv_nxt {
                self.rcv_fin = Some(fin_off);
            }
        }
        if is_fin && self.state == State::TimeWait {
            // A retransmitted FIN: acknowledge it and restart the 2 MSL timeout.
            self.ack = AckState::Now;
            self.time_wait_deadline = Some(self.after(dur_us(self.cfg.msl).saturating_mul(2)));
        }
        self.maybe_consume_fin();
    }

    fn maybe_consume_fin(&mut self) {
        let Some(fin) = self.rcv_fin else {
            return;
        };
        if fin != self.rcv_nxt {
            if fin < self.rcv_nxt {
                self.rcv_fin = None;
            }
            return;
        }
        self.rcv_fin = None;
        self.rcv_nxt += 1;
        self.ack = AckState::Now;
        if !self.peer_fin_reported {
            self.peer_fin_reported = true;
            self.events.push_back(Event::PeerClosed);
        }
        match self.state {
            State::SynReceived | State::Established => self.state = State::CloseWait,
            State::FinWait1 => {
                let fin_acked = self.fin_queued && self.snd_una == self.data_end() + 1;
                if fin_acked {
                    self.enter_time_wait();
                } else {
                    self.state = State::Closing;
                }
            }
            State::FinWait2 => self.enter_time_wait(),
            _ => {}
        }
    }

    fn enter_time_wait(&mut self) {
        self.state = State::TimeWait;
        self.rtx_deadline = None;
        self.persist_deadline = None;
        self.time_wait_deadline = Some(self.after(dur_us(self.cfg.msl).saturating_mul(2)));
    }

    /// An immediate ACK for an out-of-order, duplicate or unacceptable segment.
    fn owe_ack(&mut self) {
        self.acks_owed = (self.acks_owed + 1).min(64);
        self.ack = AckState::Now;
    }

    /// Delayed ACK (RFC 9293 3.8.6.3, RFC 5681 4.2): every `ack_every`-th segment, or when
    /// the timer fires.
    fn schedule_ack(&mut self) {
        self.segs_unacked += 1;
        if self.segs_unacked >= self.cfg.ack_every.max(1)
            || self.cfg.delayed_ack.total_micros() == 0
        {
            self.ack = AckState::Now;
        } else if self.ack == AckState::Idle {
            self.ack = AckState::Delayed(self.after(dur_us(self.cfg.delayed_ack)));
        }
    }

    /// A challenge ACK (RFC 5961 sections 3.2, 4.2, 5.2), rate-limited per connection to
    /// [`Config::challenge_ack_limit`] per second (section 7).
    fn challenge_ack(&mut self) {
        if self.now.saturating_sub(self.challenge_window_start) >= 1_000_000 {
            self.challenge_window_start = self.now;
            self.challenge_count = 0;
        }
        if self.challenge_count < self.cfg.challenge_ack_limit {
            self.challenge_count += 1;
            self.stats.challenge_acks += 1;
            self.ack = AckState::Now;
        }
    }

    /// Stream offset + 1 after the last queued data octet: the send offset of the FIN.
    fn data_end(&self) -> u64 {
        1 + self.sendq.end()
    }

    /// The ACK part of RFC 9293 3.10.7.4 "fifth" for synchronized states, with RFC 6298
    /// (RTT/RTO), RFC 5681 (cwnd) and RFC 6582 (NewReno).
    fn process_ack(
        &mut self,
        repr: &TcpRepr,
        ack: TcpSeqNumber,
        ack_off: u64,
        seg_wnd: u64,
        pure: bool,
    ) {
        let smss = self.emss as u64;
        let use_sack = self.sack_ok;
        let newly_sacked = if use_sack {
            self.absorb_sack_blocks(repr)
        } else {
            0
        };
        // RFC 3522 Eifel detection: the first ACK to advance SND.UNA after a timeout echoes
        // a TSval older than the first retransmission's when an original transmission
        // made it: the timeout was spurious (a peer that did not run in time, not loss).
        let spurious = match self.rto_undo {
            Some(u) if ack_off > self.snd_una => {
                self.rto_undo = None;
                repr.timestamp
                    .is_some_and(|ts| ts.tsecr != 0 && ts_lt(ts.tsecr, u.rtx_tsval))
                    .then_some(u)
            }
            _ => None,
        };
        if ack_off > self.snd_una {
            let acked = ack_off - self.snd_una;
            self.snd_una = ack_off;
            // Progress: the USER TIMEOUT starts over (re-armed on the next transmit poll).
            self.progress_deadline = None;
            self.sendq
                .ack_to(ack_off.saturating_sub(1).min(self.sendq.end()));
            if self.snd_nxt < self.snd_una {
                self.snd_nxt = self.snd_una;
            }
            if let Some((end, sent)) = self.rtt_timed {
                if ack_off >= end {
                    self.rtt.sample(self.now.saturating_sub(sent));
                    self.rtt_timed = None;
                }
            }
            self.retries = 0;
            self.rtx_deadline = if self.snd_una >= self.snd_max {
                None
            } else {
                Some(self.after(self.rtt.rto()))
            };
            if self.in_recovery {
                if ack_off >= self.recover {
                    if use_sack {
                        // RFC 6675 section 5: recovery ends; continue from ssthresh.
                        self.cwnd = self.ssthresh.max(smss);
                        self.sendq.clear_rtx();
                    } else {
                        // Full acknowledgment (RFC 6582 3.2 step 3).
                        let flight = self.snd_max - self.snd_una;
                        self.cwnd = self.ssthresh.min(flight.max(smss) + smss);
                    }
                    self.in_recovery = false;
                    self.dupacks = 0;
                    self.fast_rtx_pending = false;
                    self.pipe = 0;
                } else if use_sack {
                    // RFC 6675: no cwnd deflation; pipe is recomputed below.
                } else {
                    // Partial acknowledgment (step 4): retransmit the first unacknowledged
                    // record, deflate cwnd.
                    self.fast_rtx_pending = true;
                    self.cwnd = self.cwnd.saturating_sub(acked);
                    if acked >= smss {
                        self.cwnd += smss;
                    }
                    self.cwnd = self.cwnd.max(smss);
                }
            } else {
                self.dupacks = 0;
                if self.cwnd < self.ssthresh {
                    // Slow start with appropriate byte counting, L = 2 (RFC 3465).
                    self.cwnd += acked.min(2 * smss);
                } else {
                    self.ca_acked += acked;
                    if self.ca_acked >= self.cwnd {
                        self.ca_acked -= self.cwnd;
                        self.cwnd += smss;
                    }
                }
            }
        } else if ack_off == self.snd_una
            && pure
            && self.snd_max > self.snd_una
            && seg_wnd == self.snd_wnd
        {
            // A duplicate ACK (RFC 5681 section 2).
            self.dupacks += 1;
            self.stats.dupacks_received += 1;
            if self.in_recovery {
                if !use_sack {
                    self.cwnd += smss;
                }
            } else if !use_sack && self.dupacks == 3 && ack_off > self.recover {
                // Fast retransmit (RFC 6582 3.2 step 2).
                let flight = self.snd_max - self.snd_una;
                self.ssthresh = (flight / 2).max(2 * smss);
                self.recover = self.snd_max;
                self.cwnd = self.ssthresh + 3 * smss;
                self.in_recovery = true;
                self.fast_rtx_pending = true;
                self.rtt_timed = None;
                self.stats.fast_retransmits += 1;
            }
        }
        if use_sack {
            let (una, high) = self.scoreboard_range();
            if !self.in_recovery
                && self.snd_max > self.snd_una
                && ack_off > self.recover
                && (self.dupacks >= 3
                    || (newly_sacked > 0 && self.sendq.first_is_lost(una, high, smss)))
            {
                // Enter SACK-based loss recovery (RFC 6675 section 5, steps 4.1-4.3).
                let flight = self.snd_max - self.snd_una;
                self.recover = self.snd_max;
                self.ssthresh = (flight / 2).max(2 * smss);
                self.cwnd = self.ssthresh;
                self.in_recovery = true;
                self.sendq.clear_rtx();
                self.fast_rtx_pending = true;
                self.rtt_timed = None;
                self.stats.fast_retransmits += 1;
            }
            if self.in_recovery {
                self.pipe = self.sendq.pipe(una, high, smss);
            }
        }
        // Window update (RFC 9293 3.10.7.4: SND.WL1/SND.WL2 rule).
        let wl1_d = seq_diff(repr.seq_number, self.snd_wl1);
        if wl1_d > 0 || (wl1_d == 0 && seq_diff(ack, self.snd_wl2) >= 0) {
            let opened = seg_wnd > self.snd_wnd;
            self.snd_wnd = seg_wnd;
            self.snd_wl1 = repr.seq_number;
            self.snd_wl2 = ack;
            self.max_snd_wnd = self.max_snd_wnd.max(seg_wnd);
            if opened {
                self.persist_backoff = 0;
            }
        }
        if let Some(u) = spurious {
            // RFC 4015 response: no go-back-N (the originals arrived), resume with new data
            // (SND.NXT = SND.MAX) and give back the congestion state the timeout took.
            self.stats.spurious_timeouts += 1;
            self.snd_nxt = self.snd_nxt.max(self.snd_max);
            if !self.in_recovery {
                self.cwnd = self.cwnd.max(u.cwnd);
                self.ssthresh = u.ssthresh;
            }
        }
    }

    /// Stream offsets `[SND.UNA, SND.MAX)` restricted to data (no SYN, no FIN): the range
    /// the SACK scoreboard covers.
    fn scoreboard_range(&self) -> (u64, u64) {
        let end = self.sendq.end();
        (
            self.snd_una.saturating_sub(1).min(end),
            self.snd_max.saturating_sub(1).min(end),
        )
    }

    /// Marks the records the peer's SACK blocks cover (RFC 2018, RFC 6675 "Update()").
    /// Blocks at or below SND.UNA (D-SACK, RFC 2883) or beyond SND.MAX are ignored.
    fn absorb_sack_blocks(&mut self, repr: &TcpRepr) -> u64 {
        let una_seq = seq_at(self.iss, self.snd_una);
        let mut newly = 0;
        for (l, r) in repr.sack_ranges.iter().flatten() {
            let dl = seq_diff(TcpSeqNumber(*l as i32), una_seq);
            let dr = seq_diff(TcpSeqNumber(*r as i32), una_seq);
            if dl < 0 || dr <= dl {
                continue;
            }
            let (lo, hi) = (self.snd_una + dl as u64, self.snd_una + dr as u64);
            if hi > self.snd_max || lo == 0 {
                continue;
            }
            let end = self.sendq.end();
            newly += self.sendq.mark_sacked((lo - 1).min(end), (hi - 1).min(end));
        }
        newly
    }

    // ------------------------------------------------------------------ receive window

    fn free_space(&self) -> u64 {
        (self.rcv_buf.saturating_sub(self.recv.ready_len())) as u64
    }

    fn sws_threshold(&self) -> u64 {
        // RFC 9293 3.8.6.2.2: min(Fr * RCV.BUFF, Eff.snd.MSS) with Fr = 1/2.
        ((self.rcv_buf / 2) as u64).min(self.emss as u64).max(1)
    }

    /// The window field for an outgoing segment, advancing RCV.NXT + RCV.WND only by
    /// SWS-avoiding steps and never shrinking it (RFC 9293 3.8.6.2.2).
    fn advertise_window(&mut self) -> u16 {
        let new_right = self.rcv_nxt + self.free_space();
        if new_right > self.rcv_adv && new_right - self.rcv_adv >= self.sws_threshold() {
            self.rcv_adv = new_right;
        }
        let wnd = self.rcv_adv.saturating_sub(self.rcv_nxt);
        let unit = 1u64 << self.rcv_wscale;
        let field = wnd.div_ceil(unit).min(65535);
        self.rcv_adv = self.rcv_adv.max(self.rcv_nxt + field * unit);
        field as u16
    }

    // ------------------------------------------------------------------ timers

    fn on_timers(&mut self) {
        let now = self.now;
        if self.progress_deadline.is_some_and(|t| now >= t) {
            // USER TIMEOUT: abort (RST) and report it.
            self.pending_rst = Some((seq_at(self.iss, self.snd_nxt), None));
            self.enter_closed(Some(Event::TimedOut));
            return;
        }
        if let Some(t) = self.time_wait_deadline {
            if now >= t {
                self.enter_closed(None);
                return;
            }
        }
        if let AckState::Delayed(t) = self.ack {
            if now >= t {
                self.ack = AckState::Now;
            }
        }
        if let Some(t) = self.rtx_deadline {
            if now >= t {
                self.on_rto();
            }
        }
        if let Some(t) = self.persist_deadline {
            if now >= t {
                self.persist_deadline = None;
                if self.snd_wnd == 0 {
                    self.probe_pending = true;
                    self.persist_backoff = (self.persist_backoff + 1).min(16);
                } else {
                    self.persist_force = true;
                }
            }
        }
    }

    /// Retransmission timeout (RFC 6298 5.4-5.6, RFC 5681 3.1, RFC 6582 section 4).
    fn on_rto(&mut self) {
        self.rtx_deadline = None;
        if self.snd_una >= self.snd_max {
            return;
        }
        self.retries += 1;
        self.stats.timeouts += 1;
        let limit = if self.synchronized() {
            self.cfg.max_retries
        } else {
            self.cfg.syn_retries
        };
        if self.retries > limit {
            self.enter_closed(Some(Event::TimedOut));
            return;
        }
        self.rtt.back_off();
        self.rtt_timed = None;
        if self.synchronized() && self.ts_ok && self.rto_undo.is_none() {
            // The retransmission goes out in this same call, so with this TSval.
            self.rto_undo = Some(RtoUndo {
                rtx_tsval: self.tsval(),
                cwnd: self.cwnd,
                ssthresh: self.ssthresh,
            });
        }
        if self.synchronized() {
            let smss = self.emss as u64;
            let flight = self.snd_max - self.snd_una;
            self.ssthresh = (flight / 2).max(2 * smss);
            self.cwnd = smss;
            self.ca_acked = 0;
            self.in_recovery = false;
            self.fast_rtx_pending = false;
            self.recover = self.snd_max;
            self.dupacks = 0;
            self.pipe = 0;
            // RFC 2018 section 8: after a timeout, SACK information is not trusted.
            self.sendq.clear_sacked();
        }
        // Go back: resend from SND.UNA (from its record's start, see plan_data).
        self.snd_nxt = self.snd_una;
        if !self.synchronized() {
            self.snd_nxt = 0;
        }
    }

    /// When [`Connection::poll_transmit`] should be called next: now (the time of the
    /// last call) if something is ready to send, else the earliest timer, else `None`.
    pub fn poll_at(&self) -> Option<Instant> {
        if self.plan_next().is_some() {
            return Some(instant(self.now));
        }
        let mut t: Option<u64> = None;
        let mut take = |x: Option<u64>| {
            if let Some(x) = x {
                t = Some(t.map_or(x, |y: u64| y.min(x)));
            }
        };
        take(self.rtx_deadline);
        take(self.persist_deadline);
        take(self.progress_deadline);
        take(self.time_wait_deadline);
        if let AckState::Delayed(d) = self.ack {
            take(Some(d));
        }
        t.map(instant)
    }

    // ------------------------------------------------------------------ output

    /// Runs the timers due at `now`, then emits every segment that is ready:
    /// `emit(repr, payload)` with `repr.payload == payload`. Emits nothing once CLOSED
    /// (except a pending RST).
    pub fn poll_transmit(&mut self, now: Instant, emit: impl FnMut(&TcpRepr, &[u8])) {
        self.poll_transmit_burst(now, usize::MAX, emit);
    }

    /// Like [`Connection::poll_transmit`], emitting at most `max` segments (for a transmit
    /// ring with that much room). Returns how many were emitted; if it is `max`, more may
    /// be ready ([`Connection::poll_at`] says so).
    pub fn poll_transmit_burst(
        &mut self,
        now: Instant,
        max: usize,
        mut emit: impl FnMut(&TcpRepr, &[u8]),
    ) -> usize {
        self.poll_transmit_records(now, max, false, |repr, _| emit(repr, repr.payload))
    }

    /// Like [`Connection::poll_transmit_burst`], and with `share` also says where each
    /// payload lives: `Some(p)` when one queued record holds all of `repr.payload` (the
    /// usual case, one FPDU per segment), so that a port may transmit it from `p.record`
    /// without copying (`Port::tx_zero_copy` of the `dataplane` crate), keeping
    /// a clone of it until its device has read it. `None` for segments without payload,
    /// payloads gathered from several records, and always without `share` (records are
    /// then never moved into shared buffers, which costs a little per record).
    pub fn poll_transmit_records(
        &mut self,
        now: Instant,
        max: usize,
        share: bool,
        mut emit: impl FnMut(&TcpRepr, Option<TxPayload<'_>>),
    ) -> usize {
        self.now = self.now.max(micros(now));
        self.on_timers();
        let mut n = 0;
        while n < max {
            let Some(out) = self.plan_next() else {
                break;
            };
            self.send(out, share, &mut emit);
            n += 1;
        }
        self.arm_persist();
        self.track_progress();
        n
    }

    /// Arms the USER TIMEOUT while data or our FIN waits for an acknowledgment, clears it
    /// when nothing does ([`Config::user_timeout`]).
    fn track_progress(&mut self) {
        let waiting = matches!(
            self.state,
            State::Established
                | State::CloseWait
                | State::FinWait1
                | State::Closing
                | State::LastAck
        ) && self.snd_una < self.data_end() + u64::from(self.fin_queued);
        match self.cfg.user_timeout {
            Some(ut) if waiting => {
                if self.progress_deadline.is_none() {
                    self.progress_deadline = Some(self.after(dur_us(ut)));
                }
            }
            _ => self.progress_deadline = None,
        }
    }

    /// Persist timer (RFC 9293 3.8.6.1, RFC 1122 4.2.2.17): armed when data waits, nothing
    /// is in flight and the window does not let it go.
    fn arm_persist(&mut self) {
        let can_send_state = matches!(
            self.state,
            State::Established | State::CloseWait | State::FinWait1 | State::LastAck
        );
        let waiting = self.snd_nxt < self.data_end();
        if can_send_state && waiting && self.snd_nxt <= self.snd_una {
            if self.persist_deadline.is_none() {
                let shift = self.persist_backoff.min(16);
                let t = self
                    .rtt
                    .rto()
                    .saturating_mul(1 << shift)
                    .min(dur_us(self.cfg.rto_max));
                self.persist_deadline = Some(self.after(t));
            }
        } else {
            self.persist_deadline = None;
            self.persist_force = false;
        }
    }

    fn plan_next(&self) -> Option<Out> {
        if let Some((seq, ack)) = self.pending_rst {
            return Some(Out {
                kind: Kind::Rst { seq, ack },
                seq_off: 0,
                data_start: 0,
                data_len: 0,
                whole: false,
                fin: false,
            });
        }
        let ack_out = Out {
            kind: Kind::Ack,
            seq_off: self.snd_nxt,
            data_start: 0,
            data_len: 0,
            whole: false,
            fin: false,
        };
        match self.state {
            State::Closed | State::Listen => None,
            State::SynSent | State::SynReceived => {
                if self.snd_nxt == 0 {
                    Some(Out {
                        kind: Kind::Syn,
                        ..ack_out
                    })
                } else if self.state == State::SynReceived && self.ack == AckState::Now {
                    Some(Out {
                        seq_off: self.snd_max,
                        ..ack_out
                    })
                } else {
                    None
                }
            }
            _ => {
                // An owed ACK carrying SACK blocks goes out on its own, before data
                // (data segments carry no SACK blocks, so EMSS stays fixed).
                if self.acks_owed > 0
                    || (self.ack == AckState::Now && self.sack_ok && self.recv.ooo_bytes() > 0)
                {
                    return Some(ack_out);
                }
                if let Some(o) = self.plan_data() {
                    return Some(o);
                }
                if self.probe_pending {
                    return Some(Out {
                        kind: Kind::Probe,
                        seq_off: self.snd_una.saturating_sub(1),
                        ..ack_out
                    });
                }
                (self.ack == AckState::Now).then_some(ack_out)
            }
        }
    }

    /// Chooses the next data/FIN segment (RFC 5044 5.3 / draft 5.3 segmentation, RFC 9293
    /// 3.8.6.2.1 sender SWS avoidance, RFC 5681 cwnd, RFC 6582 retransmissions).
    fn plan_data(&self) -> Option<Out> {
        if !matches!(
            self.state,
            State::Established
                | State::CloseWait
                | State::FinWait1
                | State::Closing
                | State::LastAck
        ) {
            return None;
        }
        if self.fast_rtx_pending {
            if let Some(o) = self.plan_range(self.snd_una, self.snd_max, MODE_FAST) {
                return Some(o);
            }
        }
        if self.in_recovery && self.sack_ok && self.snd_nxt >= self.snd_max {
            // RFC 6675 NextSeg: rule 1 (lost holes), rule 2 (new data), rule 3 (other
            // holes below SACKed data), each only while cwnd - pipe allows.
            if let Some(o) = self.plan_sack_hole(HoleRule::Lost) {
                return Some(o);
            }
            if let Some(o) = self.plan_range(self.snd_nxt, self.data_end(), MODE_NEW) {
                return Some(o);
            }
            return self.plan_sack_hole(HoleRule::Unsacked);
        }
        if self.snd_nxt < self.snd_max {
            self.plan_range(self.snd_nxt, self.snd_max, MODE_GOBACK)
        } else {
            self.plan_range(self.snd_nxt, self.data_end(), MODE_NEW)
        }
    }

    /// A SACK-recovery retransmission of the first hole under `rule`, packing the records
    /// of that hole (RFC 6675 NextSeg at record granularity, RFC 5044 5.3 boundaries).
    fn plan_sack_hole(&self, rule: HoleRule) -> Option<Out> {
        let smss = self.emss as u64;
        let (una, high) = self.scoreboard_range();
        let room = self.cwnd.saturating_sub(self.pipe);
        if room == 0 {
            return None;
        }
        let start = self.sendq.next_hole(una, high, smss, rule)?;
        let plan = self.sendq.plan_hole(start, self.emss, high);
        if plan.len == 0 || plan.len as u64 > room {
            return None;
        }
        let end = plan.start + plan.len as u64;
        Some(Out {
            kind: Kind::Data { mode: MODE_SACK },
            seq_off: plan.start + 1,
            data_start: plan.start,
            data_len: plan.len,
            whole: plan.whole && self.sendq.is_boundary(end) && self.sendq.is_boundary(start),
            fin: false,
        })
    }

    /// One segment from send offset `start`, not beyond `bound`, in `mode`.
    fn plan_range(&self, start: u64, bound: u64, mode: u8) -> Option<Out> {
        if start == 0 {
            // The SYN is not data; plan_next sends it.
            return None;
        }
        let data_end = self.data_end();
        let fin_sent = self.fin_queued && self.snd_max > data_end;
        let bound = bound.min(data_end);
        let base = Out {
            kind: Kind::Data { mode },
            seq_off: start,
            data_start: 0,
            data_len: 0,
            whole: false,
            fin: false,
        };
        if start >= data_end {
            // No data left in this range: perhaps the FIN alone.
            let fin_due = self.fin_queued
                && start == data_end
                && if mode == MODE_NEW {
                    !fin_sent
                } else {
                    fin_sent
                };
            return fin_due.then_some(Out { fin: true, ..base });
        }
        let flight = self.snd_nxt.saturating_sub(self.snd_una);
        let wnd_right = self.snd_una + self.snd_wnd;
        let cwnd_right = if mode == MODE_FAST {
            u64::MAX
        } else if self.in_recovery && self.sack_ok {
            start.saturating_add(self.cwnd.saturating_sub(self.pipe))
        } else {
            self.snd_una.saturating_add(self.cwnd)
        };
        // Stream offsets (send offset k+1 is stream octet k).
        let s_start = match self.sendq.record_bounds(start - 1) {
            // Retransmissions restart at the record boundary (RFC 5044 5.3) when the record
            // fits one segment: octets below SND.UNA are resent and trimmed by the receiver.
            Some((a, b)) if mode != MODE_NEW && b - a <= self.emss as u64 => a,
            _ => start - 1,
        };
        let s_bound = bound - 1;
        let s_max_end = s_bound.min(wnd_right.min(cwnd_right).saturating_sub(1));
        let plan = self.sendq.plan(s_start, self.emss, s_max_end);
        let want = self.sendq.plan(s_start, self.emss, s_bound);
        let limited = plan.len == 0 || (!plan.whole && plan.len < want.len);
        if limited {
            // The window (or cwnd) cannot take the next record whole. Wait for ACKs while
            // data is in flight; with nothing in flight, split only when the usable window
            // is at least half the largest the peer offered (sender SWS avoidance) or the
            // persist timer said so (override timeout).
            let ok = plan.len > 0
                && (mode == MODE_FAST
                    || (flight == 0
                        && (self.persist_force || (plan.len as u64) * 2 >= self.max_snd_wnd)));
            if !ok {
                return None;
            }
        }
        let end = plan.start + plan.len as u64; // stream offset
        if end < start {
            // Nothing at or beyond `start` would go out: no progress.
            return None;
        }
        let fin = self.fin_queued
            && end + 1 == data_end
            && if mode == MODE_NEW {
                !fin_sent
            } else {
                fin_sent
            };
        Some(Out {
            seq_off: plan.start + 1,
            data_start: plan.start,
            data_len: plan.len,
            whole: plan.whole && self.sendq.is_boundary(end),
            fin,
            ..base
        })
    }

    fn send(
        &mut self,
        out: Out,
        share: bool,
        emit: &mut impl FnMut(&TcpRepr, Option<TxPayload<'_>>),
    ) {
        let mut repr = super::bare_repr(
            self.tuple.local_port,
            self.tuple.remote_port,
            TcpControl::None,
            seq_at(self.iss, out.seq_off),
        );
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        match out.kind {
            Kind::Rst { seq, ack } => {
                self.pending_rst = None;
                repr.control = TcpControl::Rst;
                repr.seq_number = seq;
                repr.ack_number = ack;
                self.stats.segments_sent += 1;
                self.stats.resets_sent += 1;
                emit(&repr, None);
                self.scratch = scratch;
                return;
            }
            Kind::Syn => {
                repr.control = TcpControl::Syn;
                repr.seq_number = self.iss;
                repr.window_len = self.syn_window();
                let mss = self.cfg.mtu.saturating_sub(IP_TCP_HEADERS).clamp(1, 65535);
                repr.max_seg_size = Some(mss as u16);
                let passive = self.state == State::SynReceived;
                if self.cfg.window_scaling && (!passive || self.ws_ok) {
                    repr.window_scale = Some(self.rcv_wscale);
                }
                repr.sack_permitted = self.cfg.sack && (!passive || self.sack_ok);
                if self.cfg.timestamps && (!passive || self.ts_ok) {
                    repr.timestamp = Some(TcpTimestampRepr::new(
                        self.tsval(),
                        if passive { self.ts_recent } else { 0 },
                    ));
                }
                if passive {
                    repr.ack_number = Some(seq_at(self.irs, self.rcv_nxt));
                    self.last_ack_sent = self.rcv_nxt;
                    self.ack = AckState::Idle;
                }
                if self.snd_max > 0 {
                    self.stats.syn_retransmits += 1;
                    self.rtt_timed = None;
                } else if self.rtt_timed.is_none() {
                    self.rtt_timed = Some((1, self.now));
                }
                self.snd_nxt = 1;
                self.snd_max = self.snd_max.max(1);
                if self.rtx_deadline.is_none() {
                    self.rtx_deadline = Some(self.after(self.rtt.rto()));
                }
                self.stats.segments_sent += 1;
                emit(&repr, None);
                self.scratch = scratch;
                return;
            }
            Kind::Data { mode } => {
                if out.fin {
                    repr.control = TcpControl::Fin;
                } else if out.data_len > 0 {
                    repr.control = TcpControl::Psh;
                }
                let end = out.seq_off + out.data_len as u64 + u64::from(out.fin);
                if out.data_len > 0 {
                    let st = &mut self.stats;
                    match (mode == MODE_NEW, out.whole) {
                        (true, true) => st.new_segments_whole += 1,
                        (true, false) => st.new_segments_split += 1,
                        (false, true) => st.rtx_segments_whole += 1,
                        (false, false) => st.rtx_segments_split += 1,
                    }
                    st.octets_sent += out.data_len as u64;
                }
                match mode {
                    MODE_NEW => {
                        if self.rtt_timed.is_none() {
                            self.rtt_timed = Some((end, self.now));
                        }
                        self.snd_nxt = end;
                        self.snd_max = self.snd_max.max(end);
                    }
                    MODE_GOBACK => {
                        self.rtt_timed = None;
                        self.snd_nxt = self.snd_nxt.max(end);
                    }
                    _ => {
                        self.rtt_timed = None;
                        self.fast_rtx_pending = false;
                        self.snd_nxt = self.snd_nxt.max(end);
                    }
                }
                if mode != MODE_NEW {
                    self.stats.retransmitted_octets += out.data_len as u64;
                }
                if self.in_recovery && self.sack_ok {
                    if mode == MODE_FAST || mode == MODE_SACK {
                        self.sendq.mark_rtx(out.data_start, out.data_len);
                    }
                    self.pipe += out.data_len as u64;
                }
                if self.rtx_deadline.is_none() {
                    self.rtx_deadline = Some(self.after(self.rtt.rto()));
                }
                self.persist_force = false;
            }
            Kind::Probe => {
                self.probe_pending = false;
                self.stats.zero_window_probes += 1;
            }
            Kind::Ack => {}
        }
        // Every segment from here on is an ACK in a synchronized state or SYN-RECEIVED.
        repr.ack_number = Some(seq_at(self.irs, self.rcv_nxt));
        repr.window_len = self.advertise_window();
        if self.ts_ok {
            repr.timestamp = Some(TcpTimestampRepr::new(self.tsval(), self.ts_recent));
        }
        if out.kind == Kind::Ack && self.sack_ok {
            let blocks = self.recv.sack_blocks(MAX_SACK_BLOCKS);
            for (slot, (a, b)) in repr.sack_ranges.iter_mut().zip(blocks) {
                let l = seq_at(self.irs, a + 1);
                let r = seq_at(self.irs, b + 1);
                *slot = Some((l.0 as u32, r.0 as u32));
            }
        }
        self.last_ack_sent = self.rcv_nxt;
        if out.kind == Kind::Ack {
            self.acks_owed = self.acks_owed.saturating_sub(1);
        }
        self.ack = if self.acks_owed > 0 {
            AckState::Now
        } else {
            AckState::Idle
        };
        self.segs_unacked = 0;
        self.stats.segments_sent += 1;
        // The payload straight from its record when one record holds it (the usual case:
        // one FPDU per segment), else gathered into the scratch buffer.
        let (payload, record): (&[u8], _) = match out.kind {
            Kind::Data { .. } if out.data_len > 0 => {
                let len = out.data_len;
                if share {
                    self.sendq.share(out.data_start, len);
                }
                match self.sendq.payload(out.data_start, len) {
                    Payload::Shared { record, offset } if share => (
                        &record[offset..offset + len],
                        Some(TxPayload {
                            record,
                            offset,
                            len,
                        }),
                    ),
                    Payload::Shared { record, offset } => (&record[offset..offset + len], None),
                    Payload::Plain(p) => (p, None),
                    Payload::Split => {
                        self.sendq.copy(out.data_start, len, &mut scratch);
                        (&scratch, None)
                    }
                }
            }
            _ => (&[], None),
        };
        repr.payload = payload;
        emit(&repr, record);
        self.scratch = scratch;
    }
}
