//! The TCP connection: RFC 9293 state machine with the extensions listed in the
//! [module docs](super).

use std::collections::VecDeque;

use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{TcpControl, TcpRepr, TcpSeqNumber, TcpTimestampRepr};

use super::congestion::{CongestionControl, Window};
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
/// A tail loss probe (RFC 8985 7.3): new data beyond cwnd, or the last segment again.
const MODE_PROBE: u8 = 4;

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
    /// When the timer that fired was armed (microseconds): how late the peer was is
    /// bounded by our own clock, not only by the TSecr it echoes.
    armed_at: u64,
    /// cwnd and ssthresh before the timeout.
    cwnd: u64,
    ssthresh: u64,
    /// The recovery point before the timeout set its own.
    recover: u64,
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
    /// A run of octets that arrived again after they had been received, in receive offsets
    /// `[start, end)`: reported as a D-SACK block (RFC 2883) first in the next ACK.
    dsack: Option<(i64, i64)>,
    ack: AckState,
    /// Immediate ACKs owed, one per out-of-order or duplicate segment (RFC 5681 4.2: a
    /// duplicate ACK per such segment, so the sender can count them even when a burst of
    /// segments is processed before the next transmit).
    acks_owed: u32,
    /// Since when (µs) out-of-order data has been held without a break, if it is.
    ooo_held_since: Option<u64>,
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
    /// When a tail loss probe is due (RFC 8985 7.2, PTO).
    tlp_deadline: Option<u64>,
    /// The PTO fired: the next planned segment is the probe.
    tlp_pending: bool,
    /// SND.MAX after the probe went out, until an ACK reaches it (one probe per tail): the
    /// TLP episode (RFC 8985 7.4).
    tlp_high: Option<u64>,
    /// The episode's probe sent octets again (not new data).
    tlp_rtx: bool,
    /// A D-SACK came during the episode: the probe's octets had arrived already.
    tlp_dsack: bool,
    /// The last D-SACK block counted, with its ACK's cumulative ACK and TSval (when
    /// timestamps are on): the same again is an ACK the path duplicated.
    last_dsack: Option<(u32, u32, u32, u32)>,
    retries: u32,
    persist_deadline: Option<u64>,
    /// USER TIMEOUT (RFC 9293 3.8.3, RFC 5482): when data or our FIN has waited this
    /// long for an acknowledgment that advances SND.UNA, the connection is aborted.
    progress_deadline: Option<u64>,
    persist_backoff: u32,
    persist_force: bool,
    probe_pending: bool,
    time_wait_deadline: Option<u64>,

    // ---- congestion control (RFC 5681) and loss recovery (RFC 6582, RFC 6675) ----
    win: Window,
    cc: Box<dyn CongestionControl>,
    dupacks: u32,
    in_recovery: bool,
    /// When the current loss recovery began ([`Stats::recovery_us`]).
    recovery_since: u64,
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

mod ack;
mod input;
mod output;
mod timers;

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
            sendq: SendQueue::new(cfg.send_buffer, cfg.record_sums),
            fin_queued: false,
            irs: TcpSeqNumber(0),
            rcv_nxt: 0,
            rcv_adv: 0,
            rcv_wscale: if cfg.window_scaling { rcv_wscale } else { 0 },
            rcv_buf,
            recv,
            rcv_fin: None,
            last_ack_sent: 0,
            dsack: None,
            ack: AckState::Idle,
            acks_owed: 0,
            ooo_held_since: None,
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
            tlp_deadline: None,
            tlp_pending: false,
            tlp_high: None,
            tlp_rtx: false,
            tlp_dsack: false,
            last_dsack: None,
            retries: 0,
            persist_deadline: None,
            progress_deadline: None,
            persist_backoff: 0,
            persist_force: false,
            probe_pending: false,
            time_wait_deadline: None,
            win: Window {
                cwnd: 0,
                ssthresh: u64::MAX,
            },
            cc: cfg.congestion.controller(),
            dupacks: 0,
            in_recovery: false,
            recover: 0,
            recovery_since: 0,
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

    /// The largest send window the peer has offered, in octets (sender SWS avoidance,
    /// RFC 9293 3.8.6.2.1, splits a record only for a usable window of half this).
    pub fn max_send_window(&self) -> u64 {
        self.max_snd_wnd
    }

    /// RCV.WND last advertised, in octets.
    pub fn rcv_wnd(&self) -> u64 {
        self.rcv_adv.saturating_sub(self.rcv_nxt)
    }

    /// Recovering from loss: in fast recovery (RFC 6582, RFC 6675), or holding
    /// out-of-order data until a retransmission fills the hole. The congestion window is
    /// small then, and the ACK clock is what paces the sender. A hole held open longer
    /// than twice the RTO no longer counts: a peer that leaves one unfilled (its sender
    /// would have retransmitted by then) does not keep this side's core in the finer
    /// receive of a recovery.
    pub fn recovering_from_loss(&self) -> bool {
        self.in_recovery
            || self
                .ooo_held_since
                .is_some_and(|t| self.now.saturating_sub(t) < 2 * self.rtt.rto())
    }

    /// Enters loss recovery now.
    fn enter_recovery(&mut self) {
        self.in_recovery = true;
        self.recovery_since = self.now;
    }

    /// Leaves loss recovery (if in it) now, counting its time in [`Stats::recovery_us`].
    fn leave_recovery(&mut self) {
        if self.in_recovery {
            self.in_recovery = false;
            self.stats.recovery_us += self.now.saturating_sub(self.recovery_since);
        }
    }

    /// Takes one RTT measurement (RFC 6298), counted in [`Stats::rtt_samples`].
    fn rtt_sample(&mut self, rtt_us: u64) {
        self.rtt.sample(rtt_us);
        self.stats.rtt_samples += 1;
        self.stats.rtt_sum_us = self.stats.rtt_sum_us.saturating_add(rtt_us);
    }

    /// cwnd in octets (RFC 5681).
    pub fn cwnd(&self) -> u64 {
        self.win.cwnd
    }

    /// ssthresh in octets (RFC 5681).
    pub fn ssthresh(&self) -> u64 {
        self.win.ssthresh
    }

    /// The current RTO, backoff included (RFC 6298).
    pub fn rto(&self) -> Duration {
        Duration::from_micros(self.rtt.rto())
    }

    /// The floor of RTO's variance term learned from spurious timeouts (zero until one,
    /// and again after a loss; [`RttEstimator::spurious_timeout`]).
    pub fn rto_learned_floor(&self) -> Duration {
        Duration::from_micros(self.rtt.learned_floor())
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

    /// Schedules the probe timeout (RFC 8985 7.2) after new data went out or an ACK
    /// brought news: PTO = 2 SRTT plus the peer's delayed-ACK time (our own
    /// [`Config::delayed_ack`], as the worst case to allow for), no earlier than the
    /// floor learned from spurious timeouts, and no later than the RTO would fire (the
    /// probe then goes in the timeout's place, and the RTO is pushed back by one RTO).
    /// Only with SACK (the probe's ACK must say what arrived), in the
    /// open state (not in recovery, no timeout backoff) and with no probe outstanding.
    fn schedule_tlp(&mut self) {
        self.tlp_deadline = None;
        let open = self.sack_ok
            && self.cfg.tail_loss_probe
            && matches!(self.state, State::Established | State::CloseWait)
            && !self.in_recovery
            && !self.tlp_pending
            && self.tlp_high.is_none()
            && self.rtt.backoff_count() == 0
            && self.snd_max > self.snd_una;
        let (true, Some(srtt), Some(rto_at)) = (open, self.rtt.srtt(), self.rtx_deadline) else {
            return;
        };
        // Not before the RTO's learned floor either: a peer known to stall that long
        // (spurious timeouts) is not probed for each stall.
        // With a learned floor, no earlier than the RTO's SRTT + floor either.
        let learned = self.rtt.learned_floor();
        let pto = srtt
            .saturating_mul(2)
            .saturating_add(dur_us(self.cfg.delayed_ack))
            .max(if learned > 0 {
                srtt.saturating_add(learned)
            } else {
                0
            })
            .max(1);
        self.tlp_deadline = Some(self.after(pto).min(rto_at));
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
        self.send_fpdu_sum(fpdu, None)
    }

    /// [`Connection::send_fpdu`] for a record whose one's complement sum (as
    /// `wire::tcp::checksum::data` gives it) was taken as it was built (the framer's one
    /// pass): the record is not read again for the TCP checksum.
    pub fn send_fpdu_with_sum(
        &mut self,
        fpdu: Vec<u8>,
        sum: u16,
    ) -> Result<(), (SendError, Vec<u8>)> {
        self.send_fpdu_sum(fpdu, Some(sum))
    }

    fn send_fpdu_sum(
        &mut self,
        fpdu: Vec<u8>,
        sum: Option<u16>,
    ) -> Result<(), (SendError, Vec<u8>)> {
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
        match sum {
            Some(sum) => self.sendq.push_with_sum(fpdu, sum),
            None => self.sendq.push(fpdu),
        }
        Ok(())
    }

    /// An empty buffer to build the next record in before [`Connection::send_fpdu`]: the
    /// buffer of an acknowledged record when one is spare (so a steady stream of records
    /// allocates nothing), else a new one.
    pub fn take_buffer(&mut self) -> Vec<u8> {
        self.sendq.take_buffer()
    }

    /// Whether a RST is waiting to be sent (an abort, or the answer to a bad segment, that
    /// found no transmit room yet).
    pub fn rst_pending(&self) -> bool {
        self.pending_rst.is_some()
    }

    /// Octets the peer's window and cwnd would take now beyond everything queued: what a
    /// record queued next could carry without waiting for them. `None` when queued octets
    /// already wait for the window or cwnd (a record queued next waits whatever its size).
    pub fn send_room_after_queue(&self) -> Option<u64> {
        let right = (self.snd_una + self.snd_wnd).min(self.snd_una.saturating_add(self.win.cwnd));
        // Send offset of the octet after the queue (send offset k + 1 is stream octet k).
        let end = self.sendq.end() + 1;
        right.checked_sub(end).filter(|&room| room > 0)
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
        // A recovery cut short by the close ends here (its time counted).
        self.leave_recovery();
        if let Some(e) = ev {
            self.events.push_back(e);
        }
        if self.state != State::Closed {
            self.events.push_back(Event::Closed);
        }
        self.state = State::Closed;
        self.rtx_deadline = None;
        self.tlp_deadline = None;
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
        self.cc
            .init(&mut self.win, smss, self.cfg.initial_cwnd_segments);
    }

    fn tsval(&self) -> u32 {
        let tick = dur_us(self.cfg.ts_tick).max(1);
        ((self.now / tick) as u32).wrapping_add(self.ts_offset)
    }
}
