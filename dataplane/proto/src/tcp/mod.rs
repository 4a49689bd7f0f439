//! A sans-IO, MPA-aware TCP connection engine (RFC 9293) for the iWARP dataplane.
//!
//! `smoltcp`'s socket cannot cut segments at FPDU boundaries, report EMSS, retransmit on
//! record boundaries or run with sub-millisecond timers, so this module implements TCP on
//! `smoltcp`'s wire types only ([`TcpRepr`], [`TcpSeqNumber`], `TcpControl`,
//! `TcpTimestampRepr`). It owns no sockets, threads or clocks: time comes in as
//! [`Instant`] arguments and segments go in and out as [`TcpRepr`] values. Ethernet and ARP
//! live in the port loop that wraps it; [`segment_to_bytes`](wire::tcp::segment_to_bytes) / [`segment_from_bytes`](wire::tcp::segment_from_bytes) do
//! the TCP header and checksum, [`ipv4_segment_to_bytes`](wire::tcp::ipv4_segment_to_bytes) / [`ipv4_segment_from_bytes`](wire::tcp::ipv4_segment_from_bytes)
//! add the IPv4 header.
//!
//! # Model
//!
//! * [`Listener`] answers a SYN with a [`Connection`] in SYN-RECEIVED (passive open);
//!   [`Connection::connect`] makes one in SYN-SENT (active open).
//! * [`Connection::on_segment`] takes an arriving segment; [`Connection::poll_transmit`]
//!   runs due timers and emits segments; [`Connection::poll_at`] says when to call it next;
//!   [`Connection::poll_event`] returns [`Event`]s.
//! * [`Connection::send_fpdu`] queues one *record* (an FPDU from
//!   [`Framer`](wire::mpa::fpdu::Framer), or an MPA Request/Reply frame before FPDU mode).
//!   [`Connection::recv`] hands out in-order octets with their stream offset for the
//!   [`Deframer`](wire::mpa::deframe::Deframer); [`Connection::recv_out_of_order`] hands out
//!   segments that arrived ahead of a gap (for MPA marker-based recovery).
//!
//! # What is implemented, by RFC
//!
//! * RFC 9293: the full state machine (active, passive and simultaneous open, both FIN
//!   handshakes, CLOSING, TIME-WAIT of 2 MSL, CLOSE-WAIT, LAST-ACK), segment acceptability,
//!   RST generation ([`reset_for`]), window management with sender and receiver SWS
//!   avoidance (3.8.6.2), never shrinking the offered window, delayed ACKs (3.8.6.3),
//!   persist timer with zero-window probes (3.8.6.1).
//! * RFC 5961: RST with an in-window but inexact sequence number and SYN in a synchronized
//!   state get a (rate-limited) challenge ACK; ACK validation against MAX.SND.WND.
//! * RFC 6528: ISNs from [`IsnGenerator`] (keyed SipHash over the 4-tuple plus a 4 µs clock).
//! * RFC 4987 3.6: SYN cookies when a listener's SYN-RECEIVED backlog is full
//!   ([`SynPolicy::Cookie`]; the cookie and how options travel in the TSval are in the
//!   `cookie` module).
//! * RFC 9293 3.8.3 / RFC 5482 USER TIMEOUT ([`Config::user_timeout`]): a connection whose
//!   data or FIN makes no progress (zero window, dead peer) is reset.
//! * TIME-WAIT without the connection: [`TimeWait`] keeps what a tuple needs for its 2 MSL
//!   (RFC 1337: RSTs do not end it; RFC 6191: a newer SYN may reopen it).
//! * RFC 9293 3.7.1 / RFC 7323 / RFC 2018: MSS, window scaling, timestamps with PAWS,
//!   SACK-permitted; SACK blocks generated on receive.
//! * RFC 2883: a D-SACK block first in the next pure ACK after octets arrive a second
//!   time (below the cumulative ACK, or beyond it followed by the SACK block that holds
//!   them; duplicates that touch join one block, otherwise the latest is reported), so
//!   the peer can tell a needless retransmission; the sender counts the octets D-SACKs
//!   report ([`Stats::dsack_octets`]).
//! * RFC 6298: RTO in microseconds with Karn's rule (one timed segment at a time; any
//!   retransmission cancels the measurement), exponential backoff, configurable floor and
//!   ceiling, and an optional floor of the variance term ([`Config::rto_min_var`]).
//! * RFC 3522 / RFC 4015 (with timestamps): Eifel detection of a spurious timeout (the
//!   first ACK to advance SND.UNA echoes a TSval older than the first retransmission's)
//!   and its response: no go-back-N, cwnd and ssthresh as before the timeout, and a
//!   more conservative timer (RFC 4015 section 4): the variance term's floor is raised
//!   to cover how long the original took, so a peer that stalls again for as long (a
//!   descheduled thread) sets off neither a timeout nor a tail loss probe; detected loss
//!   (recovery entered, a timeout that was not spurious) clears it. Needs a
//!   [`Config::ts_tick`] well below the RTO to tell the two apart.
//! * RFC 5681 / RFC 3465: slow start with byte counting, congestion avoidance, one
//!   immediate duplicate ACK per out-of-order segment (even when a burst of segments is
//!   processed before the next transmit).
//! * RFC 6675 (when SACK is negotiated): a per-record scoreboard fed by the peer's SACK
//!   blocks, IsLost (DupThresh 3: more than 2 SMSS or 3 records SACKed above), pipe,
//!   NextSeg rules 1-3 at record granularity; recovery ends at RecoveryPoint; the
//!   scoreboard is dropped on RTO (RFC 2018 section 8). Without SACK, RFC 6582 NewReno:
//!   fast retransmit on three duplicate ACKs, partial ACKs retransmit the next hole.
//!   The retransmission timer restarts when loss recovery resends the oldest
//!   outstanding segment (RFC 6675 section 6 leaves this open; Linux does it).
//! * RFC 3042 limited transmit: one new segment beyond cwnd on each of the first two
//!   duplicate ACKs. RFC 5827 early retransmit (SACK variant): with fewer than four
//!   segments out and nothing new to send, recovery starts once all but the first are
//!   SACKed.
//! * RFC 8985 section 7 tail loss probes on SACK connections ([`Config::tail_loss_probe`]):
//!   PTO = 2 SRTT + [`Config::delayed_ack`], at least SRTT plus the floor learned from
//!   spurious timeouts (below), no later than the RTO would fire (then the probe goes in
//!   its place); the probe is new data (cwnd aside) or the last segment;
//!   one per tail; the RTO restarts with it. TLP loss detection (7.4): a probe of the
//!   last segment that no D-SACK reports, once an ACK goes beyond it, repaired a loss,
//!   and cwnd and ssthresh are halved as in a fast recovery
//!   ([`Stats::tail_loss_probe_repairs`]). RACK's time-based loss
//!   detection is not done: recovery still starts from duplicate ACKs or IsLost.
//! * Lost retransmissions (as RFC 8985 6.2 detects them, in transmission order rather
//!   than time): in SACK recovery a retransmitted record is taken as lost again once a
//!   record transmitted three or more segments after it has been SACKed
//!   or acknowledged, and is retransmitted again (NextSeg rule 1) instead of waiting for
//!   the RTO, which at 1% loss fired for about one loss in thirty.
//! * RFC 5044 section 5.3 (draft section 5.3), MPA-aware TCP: see below.
//!
//! # MPA-aware transmit
//!
//! The send queue is made of records. A new segment starts at a record boundary and
//! packs as many whole records as fit in EMSS and the send and congestion windows. A
//! record is split only when it is larger than EMSS, or when the peer's window cannot take
//! it and nothing is in flight (sender SWS rule: usable window at least half the largest
//! window the peer offered) or the persist timer fired with a non-zero window (override).
//! Retransmissions (after RTO, fast retransmit, SACK holes) restart at the boundary of the
//! record holding SND.UNA (octets below SND.UNA are resent; the receiver trims them) when
//! that record fits one segment, and pack whole records again; a SACK-hole
//! retransmission packs the records of that hole only. [`Stats`] counts segments that held only
//! whole records separately for new data and retransmissions. Zero-window probes are
//! pure ACKs with `SEQ = SND.UNA - 1` (they carry no data, so no record is split for
//! them). There is no Nagle algorithm (iWARP sends every FPDU at once).
//!
//! Data segments never carry SACK blocks, so their TCP header size, and thus EMSS (and
//! MPA's MULPDU), stays fixed for the connection; SACK blocks go out on pure ACKs.
//!
//! # Not done yet
//!
//! * The RFC 6675 rescue retransmission, responses to D-SACK (RFC 3708's detection of
//!   spurious retransmissions, undoing them; received D-SACK blocks are only counted in
//!   [`Stats::dsack_octets`]) and keeping the scoreboard across an RTO (RFC 6675 5.1).
//! * Scoreboard and pipe are recomputed by walking the records in flight: O(records in
//!   flight) per ACK and per planned segment during recovery. Fine for hundreds of records;
//!   an indexed scoreboard is the optimisation if profiles show it.
//! * Keep-alives, ECN, urgent data, RTT samples from
//!   timestamps (RTT is measured with Karn's timed segment; TSval ticks are
//!   [`Config::ts_tick`]), PMTU discovery, IPv6.
//! * Data carried in a SYN is not taken (it is not acknowledged, so the peer resends it).
//! * RFC 6298 5.7 (RTO back to 3 s after a SYN timeout), RFC 5681 4.1 (cwnd restart after
//!   idle), RFC 6191 (reopening from TIME-WAIT: a SYN there gets a challenge ACK; the port
//!   loop may drop the TIME-WAIT connection and hand the SYN to its [`Listener`]).
//!
//! # Offsets
//!
//! Stream offsets (in [`Connection::recv`], [`Connection::recv_out_of_order`]) count from
//! the first octet after the peer's SYN. MPA's marker origin is the first octet after the
//! startup frames, so the MPA layer subtracts the length of the startup frame it received
//! before feeding the [`Deframer`](wire::mpa::deframe::Deframer). The smoltcp version is
//! pinned to 0.12: 0.13 and later need Rust 1.91, above the workspace's 1.85.

pub mod congestion;
mod conn;
mod cookie;
mod isn;
mod recv;
mod rtt;
mod send;
mod seq;
mod time_wait;

#[cfg(test)]
mod harness;
#[cfg(test)]
mod tests;

pub use congestion::{Congestion, CongestionControl, NewReno, Window};
pub use conn::Connection;
pub use isn::IsnGenerator;
pub use rtt::RttEstimator;
pub use send::{SharedRecord, TxPayload};
pub use time_wait::{TimeWait, TimeWaitAction};
pub(crate) use wire::tcp::bare_repr;
pub use wire::tcp::FourTuple;

use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{Ipv4Address, TcpControl, TcpRepr, TcpSeqNumber};

/// Connection states (RFC 9293 section 3.3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum State {
    /// No connection (also the end state).
    Closed,
    /// Waiting for a SYN (a [`Listener`] plays this role; a [`Connection`] is never in it).
    Listen,
    /// SYN sent, waiting for a matching SYN (active open).
    SynSent,
    /// SYN received and SYN,ACK sent, waiting for the ACK.
    SynReceived,
    /// Data flows both ways.
    Established,
    /// FIN sent (after our data), waiting for its ACK or the peer's FIN.
    FinWait1,
    /// Our FIN is acknowledged, waiting for the peer's FIN.
    FinWait2,
    /// The peer's FIN arrived; we may still send.
    CloseWait,
    /// Both FINs crossed; waiting for the ACK of ours.
    Closing,
    /// Our FIN follows the peer's; waiting for its ACK.
    LastAck,
    /// Both sides closed; waiting 2 MSL for stray segments.
    TimeWait,
}

/// Something the connection reports to its user ([`Connection::poll_event`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Event {
    /// The three-way handshake completed (ESTABLISHED reached; RFC 9293 3.5).
    Established,
    /// The peer's FIN arrived in order: no more data will come (RFC 9293 3.6). MPA treats
    /// this as error 1 if FPDUs are still expected.
    PeerClosed,
    /// The peer reset the connection with an acceptable RST (RFC 9293 3.10.7, RFC 5961).
    Reset,
    /// Retransmissions were exhausted ([`Config::max_retries`] / [`Config::syn_retries`];
    /// RFC 9293 3.8.3 R2).
    TimedOut,
    /// The connection is CLOSED; it can be dropped. Always the last event.
    Closed,
}

/// Why [`Connection::send_fpdu`] refused a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendError {
    /// The connection does not accept data (closing, closed; RFC 9293 3.10.2 SEND).
    NotOpen,
    /// The send queue would exceed [`Config::send_buffer`].
    Full,
    /// Empty records are not queued.
    Empty,
}

impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SendError::NotOpen => "connection closing or closed",
            SendError::Full => "send queue full",
            SendError::Empty => "empty record",
        })
    }
}

impl std::error::Error for SendError {}

/// Default [`Config::user_timeout`]: 30 s.
pub const DEFAULT_USER_TIMEOUT: Duration = Duration::from_secs(30);

/// Tunables of one connection. `Default` suits a data-centre link to a Linux peer.
#[derive(Debug, Clone)]
pub struct Config {
    /// IP MTU of the path; our MSS is `mtu - 40` (RFC 9293 3.7.1, RFC 879).
    pub mtu: usize,
    /// Receive buffer in octets: the largest window offered (RFC 9293 3.8.6). Window
    /// scaling (RFC 7323) is sized from it.
    pub recv_buffer: usize,
    /// Most octets queued by [`Connection::send_fpdu`] and not yet acknowledged.
    pub send_buffer: usize,
    /// Offer window scaling (RFC 7323 section 2).
    pub window_scaling: bool,
    /// Offer timestamps (RFC 7323 section 3) and use PAWS (section 5).
    pub timestamps: bool,
    /// Offer SACK (RFC 2018): SACK-permitted and SACK blocks in ACKs.
    pub sack: bool,
    /// Tail loss probes (RFC 8985 section 7) on SACK connections: when no ACK has come
    /// for 2 SRTT plus [`Config::delayed_ack`] (at least SRTT plus the RTO's floor learned
    /// from spurious timeouts; or, if that is later, when the RTO would fire, in its
    /// place), one segment goes out (new data beyond cwnd if the peer's window takes it, else the
    /// last segment again) so that the loss of the last segments of a flight, which
    /// brings too few duplicate ACKs for fast retransmit, is repaired by SACK recovery
    /// instead of a timeout that drops cwnd to one segment.
    pub tail_loss_probe: bool,
    /// Take each queued record's one's complement sum as it is queued, so that a segment
    /// of whole records gets its TCP checksum without its payload being read again
    /// (the third argument of [`Connection::poll_transmit_records`]). Off for a port
    /// that fills TCP checksums itself: the sums would go unused.
    pub record_sums: bool,
    /// RTO before any RTT sample (RFC 6298 2.1; 1 s).
    pub rto_initial: Duration,
    /// RTO floor (RFC 6298 2.4 says 1 s; data centres and the in-memory link use far less).
    pub rto_min: Duration,
    /// RTO ceiling (RFC 6298 2.5; at least 60 s).
    pub rto_max: Duration,
    /// Floor of RTO's variance term: RTO = SRTT + max(4 RTTVAR, this) before
    /// [`Config::rto_min`] and [`Config::rto_max`] apply. Zero (the default) is RFC 6298
    /// as written; Linux uses its minimum RTO here, so RTO stays that far above a steady
    /// SRTT (see [`RttEstimator::with_var_floor`]).
    pub rto_min_var: Duration,
    /// Maximum segment lifetime; TIME-WAIT lasts 2 MSL (RFC 9293 3.4.2).
    pub msl: Duration,
    /// How long FIN-WAIT-2 waits for the peer's FIN before closing (not in RFC 9293; Linux
    /// `tcp_fin_timeout`, 60 s).
    pub fin_wait2_timeout: Duration,
    /// Delayed-ACK timer (RFC 9293 3.8.6.3: under 0.5 s); zero disables delaying.
    pub delayed_ack: Duration,
    /// Acknowledge at least every this many full segments (RFC 5681 4.2: 2).
    pub ack_every: u32,
    /// Initial cwnd in segments of EMSS (RFC 6928 allows 10).
    pub initial_cwnd_segments: u32,
    /// The congestion controller ([`congestion`]).
    pub congestion: Congestion,
    /// SYN retransmissions before giving up with [`Event::TimedOut`].
    pub syn_retries: u32,
    /// Data retransmissions (consecutive RTOs) before giving up with [`Event::TimedOut`].
    pub max_retries: u32,
    /// USER TIMEOUT (RFC 9293 3.8.3, RFC 5482): the longest that queued data or our FIN
    /// may go without an acknowledgment that advances SND.UNA (a peer that advertises a
    /// zero window forever, a dead peer, a peer that stops acknowledging) before the
    /// connection is aborted with a RST and [`Event::TimedOut`]. `None`: no limit beyond
    /// [`Config::max_retries`] (which a zero window never exhausts). Default
    /// [`DEFAULT_USER_TIMEOUT`].
    pub user_timeout: Option<Duration>,
    /// Timestamp clock period (RFC 7323 5.4: 1 ms to 1 s).
    pub ts_tick: Duration,
    /// Challenge ACKs per second per connection (RFC 5961 section 7).
    pub challenge_ack_limit: u32,
    /// Keep segments that arrive ahead of a gap for [`Connection::recv_out_of_order`].
    pub report_out_of_order: bool,
    /// Most out-of-order blocks held; more fragmented input is dropped.
    pub max_ooo_blocks: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            mtu: 1500,
            recv_buffer: 256 * 1024,
            send_buffer: 1024 * 1024,
            window_scaling: true,
            timestamps: true,
            sack: true,
            tail_loss_probe: true,
            record_sums: true,
            rto_initial: Duration::from_secs(1),
            rto_min: Duration::from_millis(200),
            rto_max: Duration::from_secs(60),
            rto_min_var: Duration::ZERO,
            msl: Duration::from_secs(30),
            fin_wait2_timeout: Duration::from_secs(60),
            delayed_ack: Duration::from_micros(200),
            ack_every: 2,
            initial_cwnd_segments: 10,
            congestion: Congestion::NewReno,
            syn_retries: 6,
            max_retries: 15,
            user_timeout: Some(DEFAULT_USER_TIMEOUT),
            ts_tick: Duration::from_millis(1),
            challenge_ack_limit: 1000,
            report_out_of_order: false,
            max_ooo_blocks: 64,
        }
    }
}

/// Counters of one connection.
///
/// `new_segments_whole` / `new_segments_split` and `rtx_segments_whole` /
/// `rtx_segments_split` classify every data-carrying segment: *whole* means it started at
/// a record (FPDU) boundary and held only whole records (RFC 5044 5.3). Zero-window probes
/// carry no data and are counted apart.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Segments emitted (all kinds).
    pub segments_sent: u64,
    /// Segments taken by [`Connection::on_segment`] (or [`Connection::accept`]).
    pub segments_received: u64,
    /// Arriving segments dropped (unacceptable, wrong ports, failed checks).
    pub segments_dropped: u64,
    /// New-data segments holding whole records only.
    pub new_segments_whole: u64,
    /// New-data segments that split a record.
    pub new_segments_split: u64,
    /// Retransmitted segments holding whole records only.
    pub rtx_segments_whole: u64,
    /// Retransmitted segments that split a record.
    pub rtx_segments_split: u64,
    /// Payload octets sent, retransmissions included.
    pub octets_sent: u64,
    /// Payload octets retransmitted.
    pub retransmitted_octets: u64,
    /// SYN or SYN,ACK retransmissions.
    pub syn_retransmits: u64,
    /// Retransmission timeouts.
    pub timeouts: u64,
    /// Fast retransmits (RFC 5681 3.2).
    pub fast_retransmits: u64,
    /// Retransmission timeouts found spurious by Eifel detection (RFC 3522) and undone.
    pub spurious_timeouts: u64,
    /// Retransmissions found lost in SACK recovery (records sent after them were SACKed)
    /// and sent again without waiting for the RTO.
    pub lost_retransmissions: u64,
    /// Tail loss probes sent (RFC 8985 section 7).
    pub tail_loss_probes: u64,
    /// Probes that repaired a loss (RFC 8985 7.4: octets sent again, acknowledged with no
    /// D-SACK), each answered with the congestion response of a fast recovery.
    pub tail_loss_probe_repairs: u64,
    /// Duplicate ACKs received (RFC 5681 section 2; with SACK, those that SACK new octets
    /// or carry no SACK block).
    pub dupacks_received: u64,
    /// Zero-window probes sent.
    pub zero_window_probes: u64,
    /// Challenge ACKs sent (RFC 5961).
    pub challenge_acks: u64,
    /// RSTs sent.
    pub resets_sent: u64,
    /// Segments rejected by PAWS (RFC 7323 5).
    pub paws_rejected: u64,
    /// Segments that arrived out of order.
    pub out_of_order_segments: u64,
    /// Segments whose data was all received before.
    pub duplicate_segments: u64,
    /// D-SACK blocks sent (RFC 2883): octets received twice, reported to the peer.
    pub dsacks_sent: u64,
    /// Octets the peer reported receiving twice in D-SACK blocks (RFC 2883): needless
    /// retransmissions (a late peer, a spurious timeout or probe) or duplication on the
    /// path. A D-SACK that comes again in an ACK the path duplicated (the same block,
    /// cumulative ACK and TSval, with timestamps on) is counted once.
    pub dsack_octets: u64,
    /// Microseconds spent in loss recovery (fast recovery, RFC 6582, or SACK recovery,
    /// RFC 6675), summed over the recoveries that ended (at the ACK reaching the recovery
    /// point, at a retransmission timeout, or when the connection closed). With
    /// `fast_retransmits` (the recoveries entered) it tells how long a loss held the
    /// sender at the reduced window.
    pub recovery_us: u64,
    /// RTT measurements taken (RFC 6298, Karn's rule: one timed segment at a time, none
    /// from a retransmission).
    pub rtt_samples: u64,
    /// Their sum, microseconds: `rtt_sum_us / rtt_samples` is the mean round trip the
    /// sender saw, queueing in its own window included.
    pub rtt_sum_us: u64,
}

/// The RST to answer a segment that belongs to no connection (RFC 9293 section 3.10.7.1,
/// CLOSED state): `<SEQ=SEG.ACK><CTL=RST>` if it had an ACK, else
/// `<SEQ=0><ACK=SEG.SEQ+SEG.LEN><CTL=RST,ACK>`. `None` for an incoming RST.
pub fn reset_for(repr: &TcpRepr) -> Option<TcpRepr<'static>> {
    if repr.control == TcpControl::Rst {
        return None;
    }
    let mut rst = bare_repr(
        repr.dst_port,
        repr.src_port,
        TcpControl::Rst,
        TcpSeqNumber(0),
    );
    match repr.ack_number {
        Some(ack) => rst.seq_number = ack,
        None => {
            let len = repr.payload.len() + repr.control.len();
            rst.ack_number = Some(seq::seq_at(repr.seq_number, len as u64));
        }
    }
    Some(rst)
}

/// What a [`Listener`] does with an arriving segment.
#[derive(Debug)]
pub enum Accepted {
    /// A new connection: in SYN-RECEIVED for a SYN (its SYN,ACK goes out on its first
    /// [`Connection::poll_transmit`]), or ESTABLISHED for the ACK of a SYN cookie (its
    /// [`Event::Established`] is queued, and any data the ACK carried received).
    Connection(Box<Connection>),
    /// Answer with this segment and keep nothing: a RST (an ACK to a listener, RFC 9293
    /// 3.10.7.2), or a SYN,ACK carrying a SYN cookie.
    Reply(TcpRepr<'static>),
    /// Drop it (a RST, or anything else).
    Drop,
}

/// How a [`Listener`] answers a SYN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SynPolicy {
    /// Make a connection in SYN-RECEIVED.
    Accept,
    /// The SYN-RECEIVED backlog is full: answer with a SYN cookie and keep no state
    /// (RFC 4987 3.6).
    Cookie,
    /// Refuse: answer with a RST (no room for another connection at all).
    Refuse,
}

/// A passive open on one local address and port (RFC 9293 3.10.7.2, LISTEN state), with
/// SYN cookies for when its SYN-RECEIVED backlog is full.
#[derive(Debug, Clone)]
pub struct Listener {
    cfg: Config,
    isn: IsnGenerator,
    local_addr: Ipv4Address,
    local_port: u16,
    /// When the last SYN cookie went out (µs): ACKs are checked as cookies only while one
    /// may still be alive.
    last_cookie: Option<u64>,
    cookies_sent: u64,
    cookies_accepted: u64,
}

impl Listener {
    /// Listens on `local_addr:local_port`; each accepted connection gets a copy of `cfg`.
    pub fn new(cfg: Config, isn: IsnGenerator, local_addr: Ipv4Address, local_port: u16) -> Self {
        Listener {
            cfg,
            isn,
            local_addr,
            local_port,
            last_cookie: None,
            cookies_sent: 0,
            cookies_accepted: 0,
        }
    }

    /// The local port.
    pub fn port(&self) -> u16 {
        self.local_port
    }

    /// SYN cookies sent.
    pub fn cookies_sent(&self) -> u64 {
        self.cookies_sent
    }

    /// Connections made from valid SYN cookies.
    pub fn cookies_accepted(&self) -> u64 {
        self.cookies_accepted
    }

    /// Handles a segment from `remote_addr` that matched no connection but this port
    /// (RFC 9293 3.10.7.2): a RST is dropped; an ACK completes a SYN cookie handshake
    /// (when `syn` is not [`SynPolicy::Refuse`]) or gets `<SEQ=SEG.ACK><CTL=RST>`; a SYN is
    /// answered as `syn` says; anything else is dropped.
    pub fn on_segment(
        &mut self,
        now: Instant,
        remote_addr: Ipv4Address,
        repr: &TcpRepr,
        syn: SynPolicy,
    ) -> Accepted {
        if repr.dst_port != self.local_port || repr.control == TcpControl::Rst {
            return Accepted::Drop;
        }
        let tuple = FourTuple {
            local_addr: self.local_addr,
            local_port: self.local_port,
            remote_addr,
            remote_port: repr.src_port,
        };
        let now_us = now.total_micros().max(0) as u64;
        if repr.ack_number.is_some() {
            let cookies_alive = self
                .last_cookie
                .is_some_and(|t| now_us.saturating_sub(t) <= cookie::COOKIE_WINDOW_US);
            if cookies_alive && syn != SynPolicy::Refuse {
                if let Some(c) = cookie::check(&self.isn, &tuple, now_us, repr) {
                    if let Some(conn) =
                        Connection::accept_cookie(self.cfg.clone(), tuple, &self.isn, now, &c, repr)
                    {
                        self.cookies_accepted += 1;
                        return Accepted::Connection(Box::new(conn));
                    }
                }
            }
            return reset_for(repr).map_or(Accepted::Drop, Accepted::Reply);
        }
        if repr.control != TcpControl::Syn {
            return Accepted::Drop;
        }
        match syn {
            SynPolicy::Accept => {
                match Connection::accept(self.cfg.clone(), tuple, &self.isn, now, repr) {
                    Some(c) => Accepted::Connection(Box::new(c)),
                    None => Accepted::Drop,
                }
            }
            SynPolicy::Cookie => {
                self.last_cookie = Some(now_us);
                self.cookies_sent += 1;
                Accepted::Reply(cookie::syn_ack(&self.cfg, &self.isn, &tuple, now_us, repr))
            }
            SynPolicy::Refuse => reset_for(repr).map_or(Accepted::Drop, Accepted::Reply),
        }
    }
}
