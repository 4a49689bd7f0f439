//! The poll-mode core: one thread's run-to-completion loop over one [`Port`].
//!
//! Each [`Core::poll`] does, in order:
//!
//! 1. control: events the control thread could not take yet go out first; then commands
//!    from the control thread ([`CoreCmd`]): listen, connect, startup octets to send,
//!    [`CoreCmd::Read`], publication of established QPs, close;
//! 2. a receive burst: Ethernet/ARP/IPv4 ([`Net`]) → TCP ([`tcp::Connection`]), looked
//!    up by 4-tuple in the connection table; SYNs go to [`tcp::Listener`]s (with SYN
//!    cookies beyond each listener's backlog), segments of TIME-WAIT tuples to their
//!    [`tcp::TimeWait`];
//! 3. doorbells: the QPs whose consumers posted work requests;
//! 4. timers: the connections whose deadline (TCP, startup, linger) has come;
//! 5. every connection found in 1-4 (the *active* ones, and no other): in streaming mode
//!    received octets go to the control thread one chunk at a time ([`CoreEvent::Data`]),
//!    in FPDU mode to the MPA [`Deframer`] and each ULPDU to the QP's DDP/RDMAP engine
//!    ([`Qp`]); work requests from the consumer's rings → DDP segments of at most MULPDU
//!    octets → MPA [`Framer`] → TCP records; completions → the consumer's CQ rings; then
//!    TCP transmits into the port.
//!
//! A poll costs O(active + expired) connections: an idle QP is not looked at. Every
//! resource a peer can make the core hold is capped by its [`Limits`].
//!
//! The startup octets have one owner at a time (see [`crate::rings`]): the core hands a
//! chunk to the control thread and waits for [`CoreCmd::Read`] before the next one; at
//! [`CoreCmd::Publish`] the octets the startup machine did not consume come back and are
//! deframed first. Nothing is copied twice or replayed.

pub mod steer;
mod table;
mod timers;

use crate::counters::counters;
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddrV4;
use std::sync::Arc;

use crossbeam::channel::{Receiver, Sender, TrySendError};
use crossbeam::queue::ArrayQueue;
use smoltcp::time::Instant;
use smoltcp::wire::Ipv4Address;

use crate::limits::Limits;
use crate::net::{Net, NetConfig, Rx};
use crate::port::{Port, PortStats, RxChecksum};
use crate::rings::{
    BurstRing, CloseReason, ConnId, CoreCmd, CoreEvent, Doorbells, QpPublish, QpRingState, QpRings,
    Terminates,
};
use proto::qp::{Completion, MrTable, Qp, QpState, RecvWr, SendWr, WcOpcode};
use proto::tcp::{
    self, Accepted, Connection, FourTuple, IsnGenerator, Listener, SynPolicy, TimeWait,
    TimeWaitAction,
};
use wire::mpa::deframe::CrcHints;
use wire::mpa::deframe::Deframer;
use wire::mpa::fpdu::{mulpdu, Framer};
use wire::mpa::MpaErrorCode;
use wire::rdmap::TermError;

use steer::Steering;
use table::{Table, Token};
use timers::Timers;

/// Frames taken per receive burst.
pub const RX_BURST: usize = 64;

/// About how much of a connection's receive buffer ([`tcp::Config::recv_buffer`]) one
/// receive step takes in frames of the MTU, as a fraction `1 / RX_STEP_WINDOW_DIVISOR`: a
/// poll still takes up to [`RX_BURST`] frames, but when that many could hold more than a
/// quarter of a window (jumbo frames: at MTU 9000 and 512 KiB, 64 frames are more than
/// the whole window; or a small buffer: the default 256 KiB at MTU 1500), it takes them in
/// steps of [`rx_step_frames`], each followed by the transmissions of the connections the
/// step reached (their ACKs), flushed. Taken in one burst, a window's frames were all
/// placed before the first ACK for them went out, and the sender, its window spent,
/// waited meanwhile: the two ends took turns instead of working at once (two-thread
/// write-bw at MTU 9000: 3.8 GiB/s in one burst, 6.2 to 6.4 in steps, on a Xeon VM).
pub const RX_STEP_WINDOW_DIVISOR: usize = 4;

/// Frames a receive step takes on a core whose connections have a receive buffer of
/// `recv_buffer` octets, on a port of IP MTU `mtu`: as many frames of the MTU as fit a
/// [`RX_STEP_WINDOW_DIVISOR`]th of the buffer, rounded up to a multiple of
/// [`RX_STEP_ROUND`], at least [`RX_BURST_RECOVERY`] and at most [`RX_BURST`] (which is one
/// step: the poll's single burst).
pub fn rx_step_frames(recv_buffer: usize, mtu: usize) -> usize {
    let frame = mtu
        .saturating_add(crate::port::mem::ETHERNET_HEADER_LEN)
        .max(1);
    let frames = recv_buffer / RX_STEP_WINDOW_DIVISOR / frame;
    frames
        .div_ceil(RX_STEP_ROUND)
        .saturating_mul(RX_STEP_ROUND)
        .clamp(RX_BURST_RECOVERY, RX_BURST)
}

/// Receive steps are a multiple of this many frames: DPDK's vector receive paths take
/// frames in groups (ixgbe and i40e round a burst down to a multiple of 4 or 8), and a
/// step that comes back short ends the poll's receive.
pub const RX_STEP_ROUND: usize = 8;

/// Frames per step of a poll's receive while a connection of the core recovers from loss
/// ([`RECOVERY_BURST_HOLD_US`]): still up to [`RX_BURST`] frames a poll, but the
/// connections each step reached transmit (and the port flushes) before the next step.
/// The ACKs of a burst otherwise go out after it, and so do the segments its ACKs
/// release: with the small window of a recovery, a burst of 64 held the whole window at
/// one end while the other waited.
pub const RX_BURST_RECOVERY: usize = 4;

/// How long after a connection was last seen recovering from loss (fast recovery, or
/// out-of-order data held for less than twice the RTO:
/// `tcp::Connection::recovering_from_loss`) its core keeps the
/// recovery burst: its window grows back over many round trips after the hole fills.
pub const RECOVERY_BURST_HOLD_US: u64 = 1_000;

/// Events the core keeps for a control thread that is behind, in channels' worth
/// ([`Limits::control_queue`]), before it refuses new connections.
pub const OUTBOX_FACTOR: usize = 4;

/// Commands taken from the control thread per poll (the rest wait for the next poll).
const CMD_BURST: usize = 256;

/// How long a closed connection is kept for a transmission still due (the RST of an
/// abort waiting for transmit room), microseconds.
const GONE_GRACE_US: u64 = 1_000_000;

/// A connection idle this long gives back the memory its buffers grew to (µs).
const IDLE_SHRINK_US: u64 = 1_000_000;

/// First ephemeral port (RFC 6335 dynamic range).
const EPHEMERAL_FIRST: u16 = 49152;

/// Configuration of one core.
#[derive(Debug, Clone)]
pub struct CoreConfig {
    /// Addresses of the port.
    pub net: NetConfig,
    /// TCP tunables of every connection (its `user_timeout` is replaced by
    /// [`Limits::user_timeout`]).
    pub tcp: tcp::Config,
    /// Key of the RFC 6528 ISN generator (`None`: random).
    pub isn_key: Option<[u8; 16]>,
    /// Caps and timeouts.
    pub limits: Limits,
}

counters! {
    /// Counters of one core.
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
    pub struct CoreStats {
        /// Calls of [`Core::poll`].
        pub polls: u64,
        /// TCP segments that matched no connection or listener.
        pub unmatched_segments: u64,
        /// TCP segments that failed to parse (checksum, options).
        pub bad_segments: u64,
        /// FPDUs delivered to QPs.
        pub fpdus_received: u64,
        /// FPDUs of out-of-order segments placed before the gap filled (Read Responses,
        /// with markers: [`proto::qp::Qp::place_early`]); also counted in `fpdus_received`
        /// once they arrive in order.
        pub fpdus_placed_early: u64,
        /// FPDUs queued to TCP.
        pub fpdus_sent: u64,
        /// TCP records they were queued in (what TCP sends and retransmits whole): fewer
        /// than `fpdus_sent` when small FPDUs share one.
        pub records_sent: u64,
        /// Segments TCP emitted that the port or ARP could not take.
        pub tx_failures: u64,
        /// Connections accepted (passive opens that reached ESTABLISHED).
        pub accepted: u64,
        /// Connections opened (active opens started).
        pub connected: u64,
        /// SYN cookies sent (a listener's backlog was full).
        pub syn_cookies_sent: u64,
        /// Connections made from SYN cookies.
        pub syn_cookies_accepted: u64,
        /// SYNs and connects refused: no room in the table, or the control channel full.
        pub refused: u64,
        /// Startups reset at the startup timeout.
        pub startup_timeouts: u64,
        /// Startups reset for sending more than MPA allows before FPDU mode.
        pub startup_overflows: u64,
        /// Graceful closes reset at the linger time.
        pub linger_resets: u64,
        /// TIME-WAIT tuples forgotten early because the TIME-WAIT table was full.
        pub time_wait_evicted: u64,
        /// Events held back because the control channel was full (a gauge of pressure).
        pub events_deferred: u64,
        /// Frames this core received for a flow another core owns and handed to it (the
        /// software fallback of [`steer`]; 0 where the device steers every flow to its
        /// owner).
        pub handed_off: u64,
        /// Frames other cores handed to this one (ARP copies included).
        pub handed_in: u64,
        /// Frames that could not be handed over: the owner's inbox was full (dropped; TCP
        /// retransmits them).
        pub handoff_dropped: u64,
        /// Receive steps of [`RX_BURST_RECOVERY`] frames that took frames, each followed
        /// by transmissions, a connection of the core having recovered from loss within
        /// [`RECOVERY_BURST_HOLD_US`].
        pub recovery_bursts: u64,
        /// Receive steps of [`rx_step_frames`] frames that took frames, each followed by
        /// transmissions, outside recovery: polls whose [`RX_BURST`] frames could hold
        /// more than a [`RX_STEP_WINDOW_DIVISOR`]th of a receive window (jumbo frames,
        /// small buffers).
        pub window_steps: u64,
    }
}

counters! {
    /// How full a core is now.
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
    pub struct CoreGauges {
        /// Connections in the table.
        pub connections: usize,
        /// Of which SYN-RECEIVED.
        pub half_open: usize,
        /// Of which before FPDU mode.
        pub startup: usize,
        /// TIME-WAIT tuples.
        pub time_wait: usize,
        /// Events waiting for room in the control channel.
        pub outbox: usize,
        /// Timer entries (live and stale).
        pub timers: usize,
    }
}

/// Segment-alignment counters of all connections ever run by a core (RFC 5044 5.3).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AlignmentStats {
    /// New-data segments that started with an FPDU and held whole FPDUs.
    pub new_whole: u64,
    /// New-data segments that split an FPDU.
    pub new_split: u64,
    /// Retransmitted segments holding whole FPDUs.
    pub rtx_whole: u64,
    /// Retransmitted segments that split an FPDU.
    pub rtx_split: u64,
    /// Payload octets retransmitted.
    pub retransmitted_octets: u64,
    /// Retransmission timeouts.
    pub timeouts: u64,
    /// Of those, timeouts found spurious (the original transmission arrived; Eifel
    /// detection, RFC 3522) and undone.
    pub spurious_timeouts: u64,
    /// Fast retransmits.
    pub fast_retransmits: u64,
    /// Tail loss probes (RFC 8985).
    pub tail_loss_probes: u64,
    /// Of those, probes that repaired a loss nothing else saw (RFC 8985 section 7.4).
    pub tail_loss_probe_repairs: u64,
    /// Octets the peer reported receiving twice (D-SACK, RFC 2883).
    pub dsack_octets: u64,
    /// Retransmissions found lost in SACK recovery and sent again before the RTO.
    pub lost_retransmissions: u64,
    /// Microseconds the connections spent in loss recovery ([`tcp::Stats::recovery_us`]).
    pub recovery_us: u64,
    /// RTT measurements taken ([`tcp::Stats::rtt_samples`]).
    pub rtt_samples: u64,
    /// Their sum, microseconds.
    pub rtt_sum_us: u64,
    /// Frames of several segments the port's device cut (transmit segmentation offload).
    pub tso_frames: u64,
    /// Segments those frames were cut into.
    pub tso_segments: u64,
    /// The longest time between the starts of two consecutive polls of the core over its
    /// life, microseconds: for so long it took no frame, sent no ACK and ran no timer. A
    /// thread the operating system or the hypervisor took the CPU from shows here, and so
    /// does a consumer that drives the core on its own thread and did something long in
    /// between; a gap above the peer's RTO explains a retransmission on a lossless link.
    /// The largest of the cores when merged.
    pub longest_poll_gap_us: u64,
}

impl AlignmentStats {
    /// Adds another core's counters (the figures of a device of several cores).
    pub fn merge(&mut self, o: &AlignmentStats) {
        self.new_whole += o.new_whole;
        self.new_split += o.new_split;
        self.rtx_whole += o.rtx_whole;
        self.rtx_split += o.rtx_split;
        self.retransmitted_octets += o.retransmitted_octets;
        self.timeouts += o.timeouts;
        self.spurious_timeouts += o.spurious_timeouts;
        self.dsack_octets += o.dsack_octets;
        self.fast_retransmits += o.fast_retransmits;
        self.tail_loss_probes += o.tail_loss_probes;
        self.tail_loss_probe_repairs += o.tail_loss_probe_repairs;
        self.lost_retransmissions += o.lost_retransmissions;
        self.recovery_us += o.recovery_us;
        self.rtt_samples += o.rtt_samples;
        self.rtt_sum_us = self.rtt_sum_us.saturating_add(o.rtt_sum_us);
        self.tso_frames += o.tso_frames;
        self.tso_segments += o.tso_segments;
        self.longest_poll_gap_us = self.longest_poll_gap_us.max(o.longest_poll_gap_us);
    }

    fn add(&mut self, s: &tcp::Stats) {
        self.new_whole += s.new_segments_whole;
        self.new_split += s.new_segments_split;
        self.rtx_whole += s.rtx_segments_whole;
        self.rtx_split += s.rtx_segments_split;
        self.retransmitted_octets += s.retransmitted_octets;
        self.timeouts += s.timeouts;
        self.spurious_timeouts += s.spurious_timeouts;
        self.dsack_octets += s.dsack_octets;
        self.fast_retransmits += s.fast_retransmits;
        self.tail_loss_probes += s.tail_loss_probes;
        self.tail_loss_probe_repairs += s.tail_loss_probe_repairs;
        self.lost_retransmissions += s.lost_retransmissions;
        self.recovery_us += s.recovery_us;
        self.rtt_samples += s.rtt_samples;
        self.rtt_sum_us = self.rtt_sum_us.saturating_add(s.rtt_sum_us);
    }

    /// The mean of the RTT measurements, microseconds (`None` without any).
    pub fn mean_rtt_us(&self) -> Option<f64> {
        (self.rtt_samples > 0).then(|| self.rtt_sum_us as f64 / self.rtt_samples as f64)
    }

    /// Share of new-data segments that held whole FPDUs (1.0 when there were none).
    pub fn new_whole_ratio(&self) -> f64 {
        ratio(self.new_whole, self.new_split)
    }

    /// Share of retransmitted segments that held whole FPDUs (1.0 when there were none).
    pub fn rtx_whole_ratio(&self) -> f64 {
        ratio(self.rtx_whole, self.rtx_split)
    }
}

fn ratio(whole: u64, split: u64) -> f64 {
    if whole + split == 0 {
        1.0
    } else {
        whole as f64 / (whole + split) as f64
    }
}

/// An established QP run by the core.
struct FpduConn {
    framer: Framer,
    deframer: Deframer,
    qp: Qp,
    rings: Arc<QpRings>,
    /// Published the QP's error and Terminates on its rings already.
    error_reported: bool,
    /// Asked TCP to close after the QP failed.
    close_requested: bool,
    /// MULPDU: fixed for the connection, since data segments never carry SACK blocks
    /// and so EMSS never changes (see the tcp module docs).
    mulpdu: usize,
    /// A send work request the QP had no room for yet.
    held_send: Option<SendWr>,
    /// A receive work request the QP had no room for yet.
    held_recv: Option<RecvWr>,
    /// Completions on their way to the send and the receive CQ (kept for their memory).
    cq_send: Vec<Completion>,
    cq_recv: Vec<Completion>,
    /// Completions wait in the QP because a CQ was full.
    cq_blocked: bool,
    /// The TCP receive stream offset where FPDU mode began, and the MPA stream position
    /// (from the receive marker origin) of that octet: what maps an out-of-order
    /// segment's TCP offset to the deframer's position.
    rx_stream_pos: u64,
    rx_offset: u64,
    /// An untagged ULPDU that markers split is copied here whole before the QP takes
    /// it (at most one MULPDU; tagged payloads are placed from between the markers).
    scratch: Vec<u8>,
}

enum Phase {
    /// MPA startup: octets go to the control thread one chunk at a time.
    Startup {
        /// Octets handed to the control thread so far.
        forwarded: u64,
        /// A chunk is with the control thread, not yet answered.
        outstanding: bool,
        /// The peer's FIN arrived; report it once every octet before it went out.
        fin: bool,
        /// Reported the FIN.
        fin_reported: bool,
    },
    /// Full operation.
    Fpdu(Box<FpduConn>),
}

struct Conn {
    id: ConnId,
    tcp: Connection,
    phase: Phase,
    passive: bool,
    /// SYN-RECEIVED on this listener port (counted in its backlog).
    half_open: Option<u16>,
    close_reason: Option<CloseReason>,
    /// Reported `Closed` (the slot is freed).
    gone: bool,
    /// When a closed connection was first kept for a transmission still due.
    gone_since: Option<u64>,
    /// The startup must reach FPDU mode by then.
    startup_deadline: Option<u64>,
    /// A graceful close must be over by then.
    linger_deadline: Option<u64>,
    /// The live timer entry.
    timer_at: Option<u64>,
    /// When the connection last did something (µs).
    last_work: u64,
    /// Buffers given back since `last_work`.
    shrunk: bool,
    /// In the active list.
    queued: bool,
}

impl Conn {
    /// A connection in its MPA startup.
    fn new(id: ConnId, tcp: Connection, passive: bool, half_open: Option<u16>) -> Conn {
        Conn {
            id,
            tcp,
            phase: Phase::Startup {
                forwarded: 0,
                outstanding: false,
                fin: false,
                fin_reported: false,
            },
            passive,
            half_open,
            close_reason: None,
            gone: false,
            gone_since: None,
            startup_deadline: None,
            linger_deadline: None,
            timer_at: None,
            last_work: 0,
            shrunk: false,
            queued: false,
        }
    }
}

struct ListenerState {
    tcp: Listener,
    half_open: usize,
}

type TwMap = HashMap<FourTuple, TimeWait, foldhash::fast::RandomState>;

/// One poll-mode core.
pub struct Core {
    port: Box<dyn Port>,
    net: Net,
    cfg: CoreConfig,
    /// The loop's time: one reading of [`crate::clock`] per poll.
    clock: crate::clock::Monotonic,
    cmds: Receiver<CoreCmd>,
    events: Sender<CoreEvent>,
    /// Events the control channel had no room for, in order; sent before any newer.
    outbox: VecDeque<CoreEvent>,
    mrs: Arc<MrTable>,
    isn: IsnGenerator,
    listeners: HashMap<u16, ListenerState>,
    table: Table<Conn>,
    /// The connection the last received segment matched (most bursts are for one
    /// connection: this skips hashing the 4-tuple).
    last_rx: Option<(FourTuple, Token)>,
    /// Connections to look at in this poll.
    active: Vec<Token>,
    /// Spare list swapped with `active` while it is worked through.
    active_spare: Vec<Token>,
    timers: Timers,
    doorbells: Arc<Doorbells>,
    time_wait: TwMap,
    /// TIME-WAIT tuples with their deadlines, in the order they entered.
    tw_order: VecDeque<(FourTuple, Instant)>,
    next_passive: ConnId,
    next_port: u16,
    /// The CRC32c values taken with the TCP checksum of the segment being received.
    crc_hints: CrcHints,
    stats: CoreStats,
    half_open: usize,
    startups: usize,
    /// Yield the CPU after this many consecutive idle polls (0: never).
    idle_yield: u32,
    /// Consecutive polls that found nothing to do.
    idle_polls: u32,
    /// Until when (µs) receive bursts are [`RX_BURST_RECOVERY`] frames.
    recovery_bursts_until: u64,
    /// Frames of a receive step outside recovery ([`rx_step_frames`]; [`RX_BURST`]: the
    /// poll's receive is one burst).
    rx_step: usize,
    /// The active list's spare while [`Core::receive_in_steps`] sets the waiting aside.
    step_spare: Vec<Token>,
    /// When the last poll started (µs of the core's clock).
    last_poll_us: Option<u64>,
    /// The longest time between the starts of two polls ([`AlignmentStats`]).
    longest_poll_gap_us: u64,
    alignment_closed: AlignmentStats,
    /// `IWARP_DEBUG` set: print each QP that leaves RTS, with its Terminates, to stderr.
    trace_qp_errors: bool,
    /// This core's place in a group of cores (`None`: the only core).
    steer: Option<Steering>,
}

impl std::fmt::Debug for Core {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Core")
            .field("addr", &self.cfg.net.addr)
            .field("connections", &self.table.len())
            .field("stats", &self.stats)
            .finish()
    }
}

fn micros(t: Instant) -> u64 {
    t.total_micros().max(0) as u64
}

fn dur_us(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

impl Core {
    /// A core on `port`, taking commands from `cmds` and reporting to `events`. Memory
    /// regions are looked up in `mrs`.
    pub fn new(
        mut cfg: CoreConfig,
        port: Box<dyn Port>,
        mrs: Arc<MrTable>,
        cmds: Receiver<CoreCmd>,
        events: Sender<CoreEvent>,
    ) -> Self {
        let isn = match cfg.isn_key {
            Some(k) => IsnGenerator::with_key(k),
            None => IsnGenerator::random(),
        };
        // A port that fills TCP checksums has no use for the records' sums.
        cfg.tcp.record_sums = !port.checksum_offload().tx_ipv4_tcp;
        cfg.tcp.user_timeout = Some(smoltcp::time::Duration::from_micros(dur_us(
            cfg.limits.user_timeout,
        )));
        let next_port = EPHEMERAL_FIRST + isn.ephemeral_offset(u16::MAX - EPHEMERAL_FIRST);
        // At most two tokens per QP wait in the ring (see `take_doorbells`).
        let doorbells = Arc::new(ArrayQueue::new(
            cfg.limits.max_connections.max(1).saturating_mul(2),
        ));
        Core {
            net: Net::new(cfg.net),
            port,
            clock: crate::clock::Monotonic::new(),
            cmds,
            events,
            outbox: VecDeque::new(),
            mrs,
            isn,
            listeners: HashMap::new(),
            table: Table::new(),
            last_rx: None,
            active: Vec::new(),
            active_spare: Vec::new(),
            timers: Timers::default(),
            doorbells,
            time_wait: TwMap::default(),
            tw_order: VecDeque::new(),
            next_passive: 1,
            next_port,
            crc_hints: CrcHints::new(),
            stats: CoreStats::default(),
            half_open: 0,
            startups: 0,
            idle_yield: 0,
            idle_polls: 0,
            recovery_bursts_until: 0,
            rx_step: rx_step_frames(cfg.tcp.recv_buffer, cfg.net.mtu),
            step_spare: Vec::new(),
            last_poll_us: None,
            longest_poll_gap_us: 0,
            alignment_closed: AlignmentStats::default(),
            trace_qp_errors: std::env::var_os("IWARP_DEBUG").is_some(),
            steer: None,
            cfg,
        }
    }

    /// Makes this core one of a group ([`steer`]): it accepts only the flows the group's
    /// hash gives it, hands other cores' frames to them, opens connections from local
    /// ports that hash to it, and numbers its connections in its own range
    /// ([`crate::rings::conn_id`]). Call before the first poll.
    pub fn set_steering(&mut self, s: Steering) {
        self.next_passive = crate::rings::conn_id(s.index(), 1, false);
        self.steer = (s.cores() > 1).then_some(s);
    }

    /// The index of this core in its group (0 for a lone core).
    pub fn index(&self) -> usize {
        self.steer.as_ref().map_or(0, |s| s.index())
    }

    /// Our IPv4 address.
    pub fn addr(&self) -> Ipv4Address {
        self.cfg.net.addr
    }

    /// The caps and timeouts in force.
    pub fn limits(&self) -> &Limits {
        &self.cfg.limits
    }

    /// Counters.
    pub fn stats(&self) -> CoreStats {
        self.stats
    }

    /// How full the core is now.
    pub fn gauges(&self) -> CoreGauges {
        CoreGauges {
            connections: self.table.len(),
            half_open: self.half_open,
            startup: self.startups,
            time_wait: self.time_wait.len(),
            outbox: self.outbox.len(),
            timers: self.timers.len(),
        }
    }

    /// Ethernet/ARP/IPv4 counters ([`Net`]).
    pub fn net_stats(&self) -> crate::net::NetStats {
        self.net.stats()
    }

    /// Port counters.
    pub fn port_stats(&self) -> PortStats {
        self.port.stats()
    }

    /// Whether the port's link is up, if the port knows ([`Port::link_up`]).
    pub fn link_up(&self) -> Option<bool> {
        self.port.link_up()
    }

    /// The port's checksum offloads.
    pub fn checksum_offload(&self) -> crate::port::ChecksumOffload {
        self.port.checksum_offload()
    }

    /// Whether the port transmits payloads without copying them
    /// ([`Port::tx_zero_copy_capable`]).
    pub fn tx_zero_copy(&self) -> bool {
        self.port.tx_zero_copy_capable()
    }

    /// The largest payload of a frame the port's device segments
    /// ([`Port::tso_max_payload`]); 0 without transmit segmentation offload.
    pub fn tso_max_payload(&self) -> usize {
        self.port.tso_max_payload()
    }

    /// Segment-alignment counters over every connection, open or closed, with the
    /// port's TSO counters.
    pub fn alignment(&self) -> AlignmentStats {
        let mut a = self.alignment_closed;
        for c in self.table.iter() {
            a.add(c.tcp.stats());
        }
        let p = self.port.stats();
        a.tso_frames = p.tx_tso_frames;
        a.tso_segments = p.tx_tso_segments;
        a.longest_poll_gap_us = self.longest_poll_gap_us;
        a
    }

    /// Open connections.
    pub fn connections(&self) -> usize {
        self.table.len()
    }

    fn now(&mut self) -> Instant {
        Instant::from_micros(self.clock.micros())
    }

    /// Runs one iteration of the loop. Returns a measure of the work done (0: idle).
    pub fn poll(&mut self) -> usize {
        self.stats.polls += 1;
        let now = self.now();
        let now_us = micros(now);
        if let Some(last) = self.last_poll_us {
            let gap = now_us.saturating_sub(last);
            self.longest_poll_gap_us = self.longest_poll_gap_us.max(gap);
        }
        self.last_poll_us = Some(now_us);
        let mut work = if self.outbox.is_empty() {
            0
        } else {
            self.flush_outbox()
        };
        // (An empty channel is told by two loads; `try_recv` costs more.)
        if !self.cmds.is_empty() {
            for _ in 0..CMD_BURST {
                let Ok(cmd) = self.cmds.try_recv() else {
                    break;
                };
                self.on_cmd(now, cmd);
                work += 1;
            }
        }
        work += if now_us < self.recovery_bursts_until {
            self.receive_in_steps(now, RX_BURST_RECOVERY, true)
        } else if self.rx_step < RX_BURST {
            self.receive_in_steps(now, self.rx_step, false)
        } else {
            let (n, handed) = self.receive(now, RX_BURST, RX_BURST);
            n + handed
        };
        work += self.take_doorbells();
        work += self.expire_timers(now);
        self.expire_time_wait(now);
        work += self.service_active(now);
        self.net.flush_tso(&mut *self.port);
        self.port.flush();
        if work == 0 && self.idle_yield > 0 {
            self.idle_polls += 1;
            if self.idle_polls >= self.idle_yield {
                self.idle_polls = 0;
                std::thread::yield_now();
            }
        } else {
            self.idle_polls = 0;
        }
        work
    }

    /// Makes [`Core::poll`] yield the CPU (`std::thread::yield_now`) after `polls`
    /// consecutive polls that found nothing to do; 0 (the default) never yields. For
    /// cores that share CPUs with other busy threads (the embedded two-node setup, whose
    /// peer core may be waiting for this CPU): a dedicated DPDK lcore keeps 0.
    pub fn set_idle_yield(&mut self, polls: u32) {
        self.idle_yield = polls;
        self.idle_polls = 0;
    }

    /// Services the active connections; servicing may queue some again (for the next
    /// poll).
    fn service_active(&mut self, now: Instant) -> usize {
        let mut work = 0;
        if !self.active.is_empty() {
            let mut list =
                std::mem::replace(&mut self.active, std::mem::take(&mut self.active_spare));
            for t in list.drain(..) {
                if let Some(c) = self.table.get_mut(t) {
                    c.queued = false;
                    work += self.service(now, t);
                }
            }
            self.active_spare = list;
        }
        work
    }

    /// Up to [`RX_BURST`] frames from the port in steps of `step` (while a connection of
    /// this core recovers from loss (`recovering`), [`RX_BURST_RECOVERY`]; else the core's
    /// [`rx_step_frames`]), each followed by the transmissions of the connections the step
    /// reached (their ACKs, and the segments those release), flushed. Frames other cores
    /// handed over go in the first step (at most [`RX_BURST`], as in any poll). A connection queued before the steps, or that a step
    /// left queued (waiting for transmit room, a held request, a full CQ), waits for the
    /// poll's own service: it is serviced once a poll, as in any poll.
    fn receive_in_steps(&mut self, now: Instant, step: usize, recovering: bool) -> usize {
        let mut waiting = std::mem::replace(&mut self.active, std::mem::take(&mut self.step_spare));
        let (mut from_port, mut taken) = (0, 0);
        let mut handed_budget = RX_BURST;
        while from_port < RX_BURST {
            let want = step.min(RX_BURST - from_port);
            let (n, handed) = self.receive(now, want, handed_budget);
            handed_budget = 0;
            if n + handed == 0 {
                break;
            }
            from_port += n;
            taken += n + handed;
            if recovering {
                self.stats.recovery_bursts += 1;
            } else {
                self.stats.window_steps += 1;
            }
            self.service_active(now);
            waiting.append(&mut self.active);
            self.net.flush_tso(&mut *self.port);
            self.port.flush();
            if n < want {
                break;
            }
        }
        waiting.append(&mut self.active);
        self.step_spare = std::mem::replace(&mut self.active, waiting);
        taken
    }

    fn activate(&mut self, t: Token) {
        if let Some(c) = self.table.get_mut(t) {
            if !c.queued {
                c.queued = true;
                self.active.push(t);
            }
        }
    }

    /// Sends an event to the control thread, or keeps it (in order) while the channel is
    /// full. The outbox is bounded by the connections: each has at most one chunk of
    /// data and a handful of events outstanding, and no new connection is taken while
    /// it holds [`OUTBOX_FACTOR`] channels' worth.
    fn emit(&mut self, ev: CoreEvent) {
        if !self.outbox.is_empty() {
            self.outbox.push_back(ev);
            self.stats.events_deferred += 1;
            return;
        }
        match self.events.try_send(ev) {
            Ok(()) => {}
            Err(TrySendError::Full(ev)) => {
                self.outbox.push_back(ev);
                self.stats.events_deferred += 1;
            }
            // The control thread is gone (shutting down): nobody to tell.
            Err(TrySendError::Disconnected(_)) => {}
        }
    }

    fn flush_outbox(&mut self) -> usize {
        let mut n = 0;
        while let Some(ev) = self.outbox.pop_front() {
            match self.events.try_send(ev) {
                Ok(()) => n += 1,
                Err(TrySendError::Full(ev)) => {
                    self.outbox.push_front(ev);
                    break;
                }
                Err(TrySendError::Disconnected(_)) => {
                    self.outbox.clear();
                    break;
                }
            }
        }
        n
    }

    /// Whether a new connection may be taken now: the table has room, and the events
    /// waiting for the control thread are fewer than [`OUTBOX_FACTOR`] channels' worth
    /// (a burst of new connections queues a few events each; beyond that the control
    /// thread is not keeping up, and new connections are refused until it catches up).
    fn room_for_connection(&self) -> bool {
        self.table.len() < self.cfg.limits.max_connections
            && self.outbox.len() < self.cfg.limits.control_queue * OUTBOX_FACTOR
    }

    fn insert(&mut self, now: Instant, conn: Conn) -> Option<Token> {
        let tuple = *conn.tcp.tuple();
        let id = conn.id;
        let startup = matches!(conn.phase, Phase::Startup { .. });
        let half_open = conn.half_open;
        let t = self.table.insert(tuple, id, conn)?;
        if startup {
            self.startups += 1;
        }
        if half_open.is_some() {
            // The listener counted it when the SYN came.
            self.half_open += 1;
        }
        let deadline = micros(now).saturating_add(dur_us(self.cfg.limits.startup_timeout));
        if let Some(c) = self.table.get_mut(t) {
            c.startup_deadline = Some(deadline);
        }
        self.last_rx = None;
        self.activate(t);
        Some(t)
    }

    fn on_cmd(&mut self, now: Instant, cmd: CoreCmd) {
        match cmd {
            CoreCmd::Listen { port } => {
                let l = Listener::new(
                    self.cfg.tcp.clone(),
                    self.isn.clone(),
                    self.cfg.net.addr,
                    port,
                );
                self.listeners.insert(
                    port,
                    ListenerState {
                        tcp: l,
                        half_open: 0,
                    },
                );
            }
            CoreCmd::Unlisten { port } => {
                self.listeners.remove(&port);
            }
            CoreCmd::Connect { conn, remote } => self.connect(now, conn, remote),
            CoreCmd::Send { conn, bytes } => {
                let Some(t) = self.table.find_id(conn) else {
                    return;
                };
                if let Some(c) = self.table.get_mut(t) {
                    if c.tcp.send_fpdu(bytes).is_err() {
                        // Startup frames are small: a refusal (full, closing) means the
                        // connection is unusable. Reset it rather than drop octets; the
                        // control thread learns it from the Closed event.
                        c.tcp.abort();
                        c.close_reason.get_or_insert(CloseReason::Local);
                    }
                }
                self.activate(t);
            }
            CoreCmd::Read { conn } => {
                let Some(t) = self.table.find_id(conn) else {
                    return;
                };
                if let Some(Conn {
                    phase: Phase::Startup { outstanding, .. },
                    ..
                }) = self.table.get_mut(t)
                {
                    *outstanding = false;
                }
                self.activate(t);
            }
            CoreCmd::Publish { conn, qp } => self.publish(conn, *qp),
            CoreCmd::Close { conn, abort } => {
                let Some(t) = self.table.find_id(conn) else {
                    return;
                };
                let linger = micros(now).saturating_add(dur_us(self.cfg.limits.linger));
                let Core { table, stats, .. } = self;
                if let Some(c) = table.get_mut(t) {
                    c.close_reason.get_or_insert(CloseReason::Local);
                    if abort {
                        c.tcp.abort();
                    } else {
                        // Graceful: the work the consumer queued before disconnecting goes
                        // out first (as far as the send buffer takes it), then the FIN.
                        if let Phase::Fpdu(f) = &mut c.phase {
                            run_qp(f, &mut c.tcp, stats);
                        }
                        c.tcp.close();
                        c.linger_deadline.get_or_insert(linger);
                    }
                    if let Phase::Fpdu(f) = &mut c.phase {
                        f.qp.on_llp_error(TermError::Llp(MpaErrorCode::LocalCatastrophic));
                        f.close_requested = true;
                    }
                }
                self.activate(t);
            }
        }
    }

    fn connect(&mut self, now: Instant, id: ConnId, remote: SocketAddrV4) {
        if !self.room_for_connection() {
            self.stats.refused += 1;
            self.emit(CoreEvent::Closed {
                conn: id,
                reason: CloseReason::Refused,
            });
            return;
        }
        let mut tuple = FourTuple {
            local_addr: self.cfg.net.addr,
            local_port: 0,
            remote_addr: *remote.ip(),
            remote_port: remote.port(),
        };
        // An ephemeral port not in use towards this peer (nor in TIME-WAIT with it).
        let mut found = false;
        for _ in 0..16384 {
            let p = self.next_port;
            self.next_port = if p == u16::MAX {
                EPHEMERAL_FIRST
            } else {
                p + 1
            };
            tuple.local_port = p;
            if !self.table.has_tuple(&tuple)
                && !self.time_wait.contains_key(&tuple)
                && !self.listeners.contains_key(&p)
                && self.steer.as_ref().is_none_or(|s| s.owns(&tuple))
            {
                found = true;
                break;
            }
        }
        if !found {
            self.stats.refused += 1;
            self.emit(CoreEvent::Closed {
                conn: id,
                reason: CloseReason::Refused,
            });
            return;
        }
        let tcp = Connection::connect(self.cfg.tcp.clone(), tuple, &self.isn, now);
        self.stats.connected += 1;
        let inserted = self.insert(now, Conn::new(id, tcp, false, None));
        if inserted.is_none() {
            // The id is in use (a control-thread bug): refuse rather than mix two up.
            self.emit(CoreEvent::Closed {
                conn: id,
                reason: CloseReason::Refused,
            });
        }
    }

    fn publish(&mut self, id: ConnId, p: QpPublish) {
        let mrs = self.mrs.clone();
        let bells = self.doorbells.clone();
        let Some(t) = self.table.find_id(id) else {
            p.rings.set_state(QpRingState::Error);
            return;
        };
        let Some(c) = self.table.get_mut(t) else {
            return;
        };
        let Phase::Startup { forwarded, .. } = c.phase else {
            p.rings.set_state(QpRingState::Error);
            return;
        };
        if p.rx_stream_pos + p.rx_pending.len() as u64 != forwarded {
            // The hand-over does not add up: never deframe from a wrong position.
            p.rings.set_state(QpRingState::Error);
            c.tcp.abort();
            c.close_reason.get_or_insert(CloseReason::Local);
            self.activate(t);
            return;
        }
        let max_ulpdu = mulpdu(c.tcp.emss(), p.tx_mode.markers);
        let mut f = Box::new(FpduConn {
            // A port that fills TCP checksums has no use for the FPDUs' sums: the one pass
            // is then the copy and the CRC alone.
            framer: Framer::at_offset(p.tx_mode, p.tx_offset).with_sums(self.cfg.tcp.record_sums),
            deframer: Deframer::at_offset(p.rx_mode, p.rx_offset),
            rx_stream_pos: p.rx_stream_pos,
            rx_offset: p.rx_offset,
            qp: Qp::new(p.config, mrs),
            rings: p.rings,
            error_reported: false,
            close_requested: false,
            mulpdu: max_ulpdu,
            held_send: None,
            held_recv: None,
            cq_send: Vec::new(),
            cq_recv: Vec::new(),
            cq_blocked: false,
            scratch: Vec::new(),
        });
        f.rings.attach_doorbell(bells, t.to_u64());
        f.rings.set_state(QpRingState::Rts);
        // Receives posted before the connection completed must be there before the first
        // message is deframed.
        f.rings.rearm_doorbell();
        take_work_requests(&mut f);
        deframe_into(&mut f, &p.rx_pending, &CrcHints::new());
        c.phase = Phase::Fpdu(f);
        c.startup_deadline = None;
        self.startups = self.startups.saturating_sub(1);
        self.activate(t);
    }

    /// Takes the doorbell ring's tokens: each rearms its QP's doorbell (before the QP's
    /// queues are drained, by its service) and queues the connection. Rearming only here
    /// and at publication keeps at most two tokens of a QP in the ring (one pushed before
    /// the publication's rearm, one after), which its capacity of two per connection
    /// holds: a post's ring never fails for want of room.
    fn take_doorbells(&mut self) -> usize {
        // Two loads tell an empty ring; `pop` on an empty ring runs a full fence (it
        // drains this core's store buffer, frames and placed octets included) on every
        // idle poll. A token being pushed meanwhile is taken by the next poll.
        if self.doorbells.is_empty() {
            return 0;
        }
        let mut n = 0;
        while let Some(v) = self.doorbells.pop() {
            n += 1;
            let t = Token::from_u64(v);
            if let Some(c) = self.table.get_mut(t) {
                if let Phase::Fpdu(f) = &c.phase {
                    f.rings.rearm_doorbell();
                }
            }
            self.activate(t);
        }
        n
    }

    fn expire_timers(&mut self, now: Instant) -> usize {
        let now_us = micros(now);
        let mut n = 0;
        while let Some((t, at)) = self.timers.pop_due(now_us) {
            let Some(c) = self.table.get_mut(t) else {
                continue;
            };
            if c.timer_at != Some(at) {
                continue;
            }
            c.timer_at = None;
            n += 1;
            self.activate(t);
        }
        n
    }

    fn expire_time_wait(&mut self, now: Instant) {
        // Bounded work per poll. Entries are queued in deadline order; one whose 2 MSL a
        // retransmitted FIN restarted goes to the back when its first deadline comes.
        for _ in 0..RX_BURST {
            let Some(&(tuple, due)) = self.tw_order.front() else {
                break;
            };
            if now < due {
                break;
            }
            self.tw_order.pop_front();
            match self.time_wait.get(&tuple) {
                Some(tw) if tw.expired(now) => {
                    self.time_wait.remove(&tuple);
                }
                Some(tw) => self.tw_order.push_back((tuple, tw.deadline)),
                None => {}
            }
        }
    }

    fn enter_time_wait(&mut self, tw: TimeWait) {
        if self.cfg.limits.time_wait == 0 {
            return;
        }
        while self.time_wait.len() >= self.cfg.limits.time_wait {
            let Some((old, _)) = self.tw_order.pop_front() else {
                break;
            };
            if self.time_wait.remove(&old).is_some() {
                self.stats.time_wait_evicted += 1;
            }
        }
        self.time_wait.insert(tw.tuple, tw);
        self.tw_order.push_back((tw.tuple, tw.deadline));
    }

    /// One burst: at most `burst` frames from the port and `handed` that other cores
    /// handed over; how many of each it took.
    fn receive(&mut self, now: Instant, burst: usize, handed: usize) -> (usize, usize) {
        if self.steer.is_none() && self.port.rx_idle() {
            // Nothing waiting: only what earlier bursts left to send.
            self.net.transmit_replies(&mut *self.port);
            return (0, 0);
        }
        // New connections this burst may take.
        let capacity = if self.outbox.is_empty() {
            self.cfg
                .limits
                .max_connections
                .saturating_sub(self.table.len())
        } else {
            0
        };
        let backlog = self.cfg.limits.syn_backlog;
        let Core {
            port,
            net,
            table,
            last_rx,
            listeners,
            stats,
            time_wait,
            active,
            steer,
            crc_hints,
            ..
        } = self;
        let steer = steer.as_ref();
        let mut accepted: Vec<Box<Connection>> = Vec::new();
        let mut replies: Vec<(FourTuple, smoltcp::wire::TcpRepr<'static>)> = Vec::new();
        // One frame, from the port or (`handed`) from another core's hand-off (`arp_copy`:
        // a copy of an ARP frame to learn from).
        let mut on_frame = |frame: &[u8], verdict: RxChecksum, handed: bool, arp_copy: bool| {
            if handed {
                stats.handed_in += 1;
                if arp_copy {
                    net.on_arp_copy(now, frame);
                    return;
                }
            }
            let rx = net.on_frame(now, frame);
            if let Some(s) = steer {
                if !handed && rx == Rx::Handled && frame.get(12..14) == Some(&[0x08, 0x06]) {
                    // Every core resolves its own next hops: they all learn from it.
                    stats.handoff_dropped += s.copy_arp(frame);
                }
            }
            let Rx::Tcp { src, dst, segment } = rx else {
                return;
            };
            if verdict == RxChecksum::Bad {
                stats.bad_segments += 1;
                return;
            }
            let Some(ports) = segment.get(..4) else {
                stats.bad_segments += 1;
                return;
            };
            let tuple = FourTuple {
                local_addr: dst,
                local_port: u16::from_be_bytes([ports[2], ports[3]]),
                remote_addr: src,
                remote_port: u16::from_be_bytes([ports[0], ports[1]]),
            };
            let found = match *last_rx {
                Some((t, tok)) if t == tuple => Some(tok),
                _ => table.find_tuple(&tuple),
            };
            if found.is_none() && !handed {
                if let Some(s) = steer {
                    let owner = s.owner(&tuple);
                    if owner != s.index() {
                        if s.hand(owner, frame, verdict) {
                            stats.handed_off += 1;
                        } else {
                            stats.handoff_dropped += 1;
                        }
                        return;
                    }
                }
            }
            let check = verdict != RxChecksum::Good;
            // In FPDU mode the TCP checksum and the CRC32c of the FPDUs the segment holds
            // are taken in one pass over its octets; the deframer uses those CRCs
            // (`CrcHints`) instead of reading the octets again.
            let fpdu_at = found
                .and_then(|tok| table.get_mut(tok))
                .and_then(|c| match &c.phase {
                    Phase::Fpdu(f) if !c.gone && check => {
                        Some((f.deframer.mode(), f.deframer.stream_offset()))
                    }
                    _ => None,
                });
            crc_hints.clear();
            let repr = match fpdu_at {
                Some((mode, pos)) => {
                    let Some(repr) = wire::tcp::segment_from_bytes_with(src, dst, segment, false)
                    else {
                        stats.bad_segments += 1;
                        return;
                    };
                    let header = &segment[..segment.len() - repr.payload.len()];
                    let sum = crc_hints.take(mode, pos, repr.payload);
                    let len = repr.payload.len();
                    if !wire::tcp::checksum::verify_tcp_parts(src, dst, header, len, sum) {
                        crc_hints.clear();
                        stats.bad_segments += 1;
                        return;
                    }
                    repr
                }
                None => {
                    let Some(repr) = wire::tcp::segment_from_bytes_with(src, dst, segment, check)
                    else {
                        stats.bad_segments += 1;
                        return;
                    };
                    repr
                }
            };
            if let Some(tok) = found {
                if let Some(c) = table.get_mut(tok) {
                    *last_rx = Some((tuple, tok));
                    match &mut c.phase {
                        // In FPDU mode in-order data goes from the frame to the deframer
                        // and the QP's placement, not through the TCP receive buffer.
                        Phase::Fpdu(f) if !c.gone => {
                            let mut n = 0;
                            let hints = &*crc_hints;
                            if f.deframer.mode().markers {
                                // With markers, FPDUs in an out-of-order segment can be
                                // found and (Read Responses) placed before the gap fills.
                                c.tcp.on_segment_deliver_out_of_order(
                                    now,
                                    &repr,
                                    &mut |off, data, in_order| {
                                        if in_order {
                                            n += deframe_into(f, data, hints);
                                        } else {
                                            stats.fpdus_placed_early +=
                                                place_early(f, off, data) as u64;
                                        }
                                    },
                                );
                            } else {
                                c.tcp.on_segment_deliver(now, &repr, &mut |_, data| {
                                    n += deframe_into(f, data, hints);
                                });
                            }
                            stats.fpdus_received += n as u64;
                        }
                        _ => c.tcp.on_segment(now, &repr),
                    }
                    if !c.queued {
                        c.queued = true;
                        active.push(tok);
                    }
                    return;
                }
            }
            // A connection this burst made (a SYN cookie's ACK, say, with the first data
            // right behind it): the segment is its, not the listener's, which would make
            // a second connection for the tuple that could not be kept, losing the
            // segment.
            if let Some(c) = accepted.iter_mut().find(|c| *c.tuple() == tuple) {
                c.on_segment(now, &repr);
                return;
            }
            if let Some(tw) = time_wait.get_mut(&tuple) {
                match tw.on_segment(now, &repr) {
                    TimeWaitAction::Ack(a) => {
                        replies.push((tuple, a));
                        return;
                    }
                    TimeWaitAction::Drop => return,
                    TimeWaitAction::Reopen => {
                        time_wait.remove(&tuple);
                    }
                }
            }
            match listeners.get_mut(&repr.dst_port) {
                Some(l) => {
                    let policy = if accepted.len() >= capacity {
                        SynPolicy::Refuse
                    } else if l.half_open >= backlog {
                        SynPolicy::Cookie
                    } else {
                        SynPolicy::Accept
                    };
                    let cookies = l.tcp.cookies_sent();
                    match l.tcp.on_segment(now, src, &repr, policy) {
                        Accepted::Connection(c) => {
                            // A SYN-RECEIVED connection counts in the backlog at once
                            // (several SYNs may come in one burst).
                            if c.state() == tcp::State::SynReceived {
                                l.half_open += 1;
                            }
                            accepted.push(c);
                        }
                        Accepted::Reply(r) => {
                            if l.tcp.cookies_sent() > cookies {
                                stats.syn_cookies_sent += 1;
                            } else if repr.control == smoltcp::wire::TcpControl::Syn {
                                stats.refused += 1;
                            }
                            replies.push((tuple, r));
                        }
                        Accepted::Drop => {}
                    }
                }
                None => {
                    stats.unmatched_segments += 1;
                    if let Some(rst) = tcp::reset_for(&repr) {
                        replies.push((tuple, rst));
                    }
                }
            }
        };
        let n = port.rx_burst_checked(burst, &mut |frame, verdict| {
            on_frame(frame, verdict, false, false)
        });
        let mut handed_n = 0;
        if let Some(s) = steer {
            for _ in 0..handed {
                let Some(h) = s.take() else {
                    break;
                };
                handed_n += 1;
                on_frame(&h.frame, h.verdict, true, h.arp_copy);
            }
        }
        // ARP and echo answers made during the burst, now that the port is free.
        self.net.transmit_replies(&mut *self.port);
        for (tuple, r) in replies {
            let _ = self.net.send_tcp(now, &mut *self.port, &tuple, &r);
        }
        for c in accepted {
            let id = self.next_passive;
            self.next_passive += 1;
            let tuple = *c.tuple();
            let half_open = (c.state() == tcp::State::SynReceived).then_some(tuple.local_port);
            if half_open.is_none() {
                self.stats.syn_cookies_accepted += 1;
            }
            let inserted = self.insert(now, Conn::new(id, *c, true, half_open));
            if inserted.is_none() {
                if let Some(p) = half_open {
                    // Not kept (a duplicate tuple): uncount it.
                    self.half_open = self.half_open.saturating_sub(1);
                    if let Some(l) = self.listeners.get_mut(&p) {
                        l.half_open = l.half_open.saturating_sub(1);
                    }
                }
            }
        }
        (n, handed_n)
    }

    /// Runs connection `t`: events, received data, QP work, timers, transmission; then
    /// decides whether it needs the next poll, schedules its next deadline, and frees it
    /// once closed.
    fn service(&mut self, now: Instant, t: Token) -> usize {
        let now_us = micros(now);
        let startup_octets = self.cfg.limits.startup_octets as u64;
        let linger_at = now_us.saturating_add(dur_us(self.cfg.limits.linger));
        let trace = self.trace_qp_errors;
        let mut out: Vec<CoreEvent> = Vec::new();
        let mut work = 0;
        let mut left_half_open = None;
        let mut time_wait = None;
        let mut startup_ended = false;
        let Core {
            table,
            stats,
            net,
            port,
            ..
        } = self;
        let Some(c) = table.get_mut(t) else {
            return 0;
        };
        let mut peer_closed = false;
        while let Some(ev) = c.tcp.poll_event() {
            work += 1;
            match ev {
                tcp::Event::Established => {
                    left_half_open = c.half_open.take();
                    let tuple = *c.tcp.tuple();
                    out.push(if c.passive {
                        stats.accepted += 1;
                        CoreEvent::Accepted { conn: c.id, tuple }
                    } else {
                        CoreEvent::Connected { conn: c.id, tuple }
                    });
                }
                tcp::Event::PeerClosed => match &mut c.phase {
                    Phase::Startup { fin, .. } => *fin = true,
                    // Acted on after the octets that precede the FIN are placed (below).
                    Phase::Fpdu(_) => peer_closed = true,
                },
                tcp::Event::Reset => {
                    c.close_reason.get_or_insert(CloseReason::Reset);
                    if let Phase::Fpdu(f) = &mut c.phase {
                        f.qp.on_llp_error(TermError::Llp(MpaErrorCode::TcpClosed));
                    }
                }
                tcp::Event::TimedOut => {
                    c.close_reason.get_or_insert(CloseReason::TimedOut);
                    if let Phase::Fpdu(f) = &mut c.phase {
                        f.qp.on_llp_error(TermError::Llp(MpaErrorCode::TcpClosed));
                    }
                }
                tcp::Event::Closed => {
                    c.gone = true;
                }
            }
        }

        // Startup and linger deadlines.
        if c.startup_deadline.is_some_and(|d| now_us >= d)
            && matches!(c.phase, Phase::Startup { .. })
            && !c.gone
        {
            c.startup_deadline = None;
            stats.startup_timeouts += 1;
            c.close_reason = Some(CloseReason::StartupTimeout);
            c.tcp.abort();
        }
        if c.linger_deadline.is_some_and(|d| now_us >= d)
            && !c.gone
            && c.tcp.state() != tcp::State::TimeWait
        {
            c.linger_deadline = None;
            stats.linger_resets += 1;
            c.close_reason = Some(CloseReason::LingerExpired);
            c.tcp.abort();
        }

        // Received octets.
        match &mut c.phase {
            Phase::Startup {
                forwarded,
                outstanding,
                fin,
                fin_reported,
            } => {
                let waiting = c.tcp.recv_queue_len() as u64;
                if !*outstanding && waiting > 0 && !c.gone {
                    let budget = startup_octets.saturating_sub(*forwarded);
                    if budget == 0 {
                        // More than any valid startup: MPA is broken; reset.
                        stats.startup_overflows += 1;
                        c.close_reason = Some(CloseReason::StartupOverflow);
                        c.tcp.abort();
                    } else {
                        let mut bytes = Vec::with_capacity(waiting.min(budget) as usize);
                        c.tcp
                            .recv_max(budget as usize, |_, d| bytes.extend_from_slice(d));
                        *forwarded += bytes.len() as u64;
                        *outstanding = true;
                        work += 1;
                        out.push(CoreEvent::Data { conn: c.id, bytes });
                    }
                }
                if *fin && !*fin_reported && !*outstanding && c.tcp.recv_queue_len() == 0 {
                    *fin_reported = true;
                    out.push(CoreEvent::PeerFin { conn: c.id });
                }
            }
            Phase::Fpdu(f) => {
                let mut n = 0;
                let none = CrcHints::new();
                c.tcp.recv(|_, data| {
                    n += deframe_into(f, data, &none);
                });
                stats.fpdus_received += n as u64;
                work += n;
                if peer_closed {
                    c.close_reason.get_or_insert(CloseReason::PeerClosed);
                    // RFC 5044 8: a close in the middle of an FPDU, or any close the ULP
                    // did not ask for, is an LLP error for the QP; the FPDUs before the
                    // FIN have been placed and completed above.
                    f.qp.on_llp_error(TermError::Llp(MpaErrorCode::TcpClosed));
                    c.tcp.close();
                    c.linger_deadline.get_or_insert(linger_at);
                    f.close_requested = true;
                }
            }
        }

        // QP work.
        let mut stay = false;
        if let Phase::Fpdu(f) = &mut c.phase {
            work += run_qp(f, &mut c.tcp, stats);
            if f.qp.state() != QpState::Rts && !f.error_reported {
                f.error_reported = true;
                f.rings.set_error(Terminates {
                    sent: f.qp.terminate_sent().copied(),
                    received: f.qp.terminate_received().copied(),
                });
                if trace {
                    eprintln!(
                        "qp {} (passive {}) error: sent {:?} received {:?} stats {:?}",
                        f.rings.qpn,
                        c.passive,
                        f.qp.terminate_sent(),
                        f.qp.terminate_received(),
                        f.qp.stats()
                    );
                }
            }
            if f.qp.state() == QpState::Error && !f.close_requested && !f.qp.has_tx() {
                // RFC 5040 6 / RFC 5044 8: after a Terminate the LLP stream is closed.
                f.close_requested = true;
                c.close_reason.get_or_insert(CloseReason::Local);
                c.tcp.close();
                c.linger_deadline.get_or_insert(linger_at);
            }
            stay = f.held_send.is_some() || f.held_recv.is_some() || f.cq_blocked;
        }

        // Transmit (and the TCP timers due), then when to come back: a connection being
        // serviced has usually something to send, so it is not asked first (that would
        // plan the next segment twice).
        let tuple = *c.tcp.tuple();
        let room = port.tx_room();
        let share = port.tx_zero_copy_capable();
        let tx_port = &mut **port;
        let sent = c
            .tcp
            .poll_transmit_records(now, room, share, |repr, record, sum| {
                if net
                    .send_tcp_record(now, tx_port, &tuple, repr, record, sum)
                    .is_err()
                {
                    stats.tx_failures += 1;
                }
            });
        work += sent;
        // A frame gathered for segmentation offload goes now, before any other
        // connection's segments.
        net.flush_tso(tx_port);
        if c.tcp.recovering_from_loss() {
            self.recovery_bursts_until = now_us.saturating_add(RECOVERY_BURST_HOLD_US);
        }
        let poll_at = if sent < room {
            // Everything ready went: only the timers are left.
            c.tcp.next_timer()
        } else {
            c.tcp.poll_at()
        };
        // Out of transmit room: more is ready; try again next poll.
        stay |= poll_at.is_some_and(|at| at <= now);

        // Both FINs acknowledged and the last ACK sent: the tuple waits out its 2 MSL
        // without the connection.
        if !c.gone && c.tcp.state() == tcp::State::TimeWait && !stay {
            time_wait = c.tcp.time_wait();
            c.gone = true;
        }

        // A connection that ended with its RST still to send (an abort when the port had
        // no transmit room) is kept until the RST has gone out, for at most
        // `GONE_GRACE_US`: a lost RST would leave the peer holding its end. Its QP is in
        // error meanwhile.
        let unsent = c.tcp.rst_pending();
        if c.gone && unsent {
            if let Phase::Fpdu(f) = &c.phase {
                f.rings.set_state(QpRingState::Error);
            }
        }
        let gone_since = match (c.gone, unsent) {
            (true, true) => Some(*c.gone_since.get_or_insert(now_us)),
            _ => None,
        };
        let keep = gone_since.is_some_and(|at| now_us.saturating_sub(at) < GONE_GRACE_US);
        if c.gone && !keep {
            let tuple = *c.tcp.tuple();
            let id = c.id;
            if matches!(c.phase, Phase::Startup { .. }) {
                startup_ended = true;
            }
            left_half_open = left_half_open.or(c.half_open.take());
            let reason = c.close_reason.unwrap_or(CloseReason::Local);
            if let Some(old) = table.remove(t.slot, &tuple, id) {
                self.alignment_closed.add(old.tcp.stats());
                if let Phase::Fpdu(f) = &old.phase {
                    f.rings.set_state(QpRingState::Error);
                }
            }
            self.last_rx = None;
            out.push(CoreEvent::Closed { conn: id, reason });
        } else {
            // Timers, and the next poll if it is needed.
            let mut next = poll_at.map(micros);
            for d in [c.startup_deadline, c.linger_deadline]
                .into_iter()
                .flatten()
            {
                next = Some(next.map_or(d, |n| n.min(d)));
            }
            if work > 0 {
                c.last_work = now_us;
                c.shrunk = false;
            } else if !c.shrunk && now_us >= c.last_work.saturating_add(IDLE_SHRINK_US) {
                // Idle for a while: give back what a burst made the buffers grow to.
                c.tcp.shrink_buffers();
                c.shrunk = true;
            }
            if !c.shrunk {
                let at = c.last_work.saturating_add(IDLE_SHRINK_US);
                next = Some(next.map_or(at, |n| n.min(at)));
            }
            if stay {
                c.queued = true;
                self.active.push(t);
            } else if let Some(at) = next {
                c.timer_at = self.timers.schedule(t, c.timer_at, at.max(now_us));
            }
        }
        if let Some(p) = left_half_open {
            self.half_open = self.half_open.saturating_sub(1);
            if let Some(l) = self.listeners.get_mut(&p) {
                l.half_open = l.half_open.saturating_sub(1);
            }
        }
        if startup_ended {
            self.startups = self.startups.saturating_sub(1);
        }
        if let Some(tw) = time_wait {
            self.enter_time_wait(tw);
        }
        for ev in out {
            self.emit(ev);
        }
        work
    }
}

/// Feeds in-order octets to the deframer and each ULPDU to the QP; a framing error (CRC,
/// marker) becomes the LLP error of RFC 5044 section 8. Returns the FPDUs delivered.
/// ULPDUs stay where they arrived: with markers on, the QP places tagged payloads from
/// between them ([`Qp::on_ulpdu_runs`]).
fn deframe_into(f: &mut FpduConn, data: &[u8], hints: &CrcHints) -> usize {
    let mut n = 0;
    let FpduConn {
        deframer,
        qp,
        scratch,
        ..
    } = f;
    if let Err(e) = deframer.push_runs_hinted(data, hints, |fpdu| {
        n += 1;
        qp.on_ulpdu_runs(Some(fpdu.stream_offset), fpdu.ulpdu, scratch);
    }) {
        if !matches!(e, wire::mpa::deframe::DeframeError::Stopped(_)) {
            qp.on_llp_error(TermError::Llp(e.code()));
        }
    }
    n
}

/// Finds the whole FPDUs of out-of-order octets `data` at TCP receive offset `tcp_off`
/// (markers locate them, their CRCs and markers are checked: RFC 5044 section 5.3) and
/// lets the QP place the ones it may place now ([`Qp::place_early`]). Nothing found here
/// is an error yet: the deframer reports bad octets when they arrive in order. Returns the
/// FPDUs placed.
fn place_early(f: &mut FpduConn, tcp_off: u64, data: &[u8]) -> usize {
    let Some(mpa_off) = (tcp_off + f.rx_offset).checked_sub(f.rx_stream_pos) else {
        return 0;
    };
    let FpduConn { deframer, qp, .. } = f;
    let mut placed = 0;
    deframer.recover_out_of_order(mpa_off, data, |fpdu| {
        placed += usize::from(qp.place_early(fpdu.stream_offset, fpdu.ulpdu));
    });
    placed
}

/// Moves work requests from the consumer's rings into the QP in posting order. A request
/// the QP cannot take yet (its queue is full) waits in `held_*`; one it refuses completes
/// in error in its turn ([`Qp::submit_send`]).
fn take_work_requests(f: &mut FpduConn) -> usize {
    let FpduConn {
        qp,
        rings,
        held_recv,
        held_send,
        ..
    } = f;
    take_burst(held_recv, &rings.rq, |wr| qp.submit_recv(wr))
        + take_burst(held_send, &rings.sq, |wr| qp.submit_send(wr))
}

/// Submits the request `held` back from the last time, then every request waiting in
/// `ring`, in one burst, until `submit` gives one back (the QP's queue is full), which is
/// held for next time. Returns how many requests were taken.
fn take_burst<T>(
    held: &mut Option<T>,
    ring: &BurstRing<T>,
    mut submit: impl FnMut(T) -> Result<(), T>,
) -> usize {
    let mut work = 0;
    if let Some(wr) = held.take() {
        work += 1;
        if let Err(wr) = submit(wr) {
            *held = Some(wr);
            return work;
        }
    }
    work + ring.pop_burst(usize::MAX, |wr| match submit(wr) {
        Ok(()) => true,
        Err(wr) => {
            *held = Some(wr);
            false
        }
    })
}

/// Moves work requests from the rings into the QP, ULPDUs from the QP into TCP as FPDUs,
/// and completions into the CQ rings.
fn run_qp(f: &mut FpduConn, tcp: &mut Connection, stats: &mut CoreStats) -> usize {
    let mut work = take_work_requests(f);
    let max = f.mulpdu;
    // A record (what TCP retransmits and puts whole in a segment) takes several FPDUs
    // when they are small: as many as there are now that fit one segment together, each
    // whole. Big ULPDUs take a record each, as before. A record of several is kept to
    // half the largest window the peer offered (a window too small for it is one sender
    // SWS avoidance waits out anyway, RFC 9293 3.8.6.2.1), and, when nothing queued waits
    // for the window or cwnd, to what they take now: packing never makes TCP split a
    // record, nor wait where single FPDUs would have gone.
    let record_max = tcp
        .emss()
        .min(usize::try_from(tcp.max_send_window() / 2).unwrap_or(usize::MAX));
    let mut failed = false;
    while !failed && f.qp.has_tx() {
        let Some(mut next) = f.qp.next_ulpdu_len(max) else {
            break;
        };
        if tcp.send_space() < f.framer.wire_len(next) {
            break;
        }
        // The record is built in a recycled buffer, in one pass over its octets: the QP
        // writes each ULPDU through the framer, which copies the payload from registered
        // memory while it takes the CRC32c and, unless the port fills TCP checksums, the
        // one's complement sum (for the TCP checksum), with the markers in between.
        let mut rec = tcp.take_buffer();
        let mut sum = 0u16;
        let mut fpdus = 0u64;
        loop {
            // With `next` as the limit, the QP writes exactly the ULPDU it announced.
            let at = rec.len();
            match f.qp.poll_fpdu(next, &mut f.framer, &mut rec) {
                Ok(Some(s)) => sum = wire::tcp::checksum::combine(sum, s, at),
                Ok(None) => break,
                Err(_) => {
                    f.qp.on_llp_error(TermError::Llp(MpaErrorCode::LocalCatastrophic));
                    failed = true;
                    break;
                }
            }
            fpdus += 1;
            let Some(n) = f.qp.next_ulpdu_len(max) else {
                break;
            };
            let len = rec.len() + f.framer.wire_len(n);
            let room = tcp
                .send_room_after_queue()
                .map_or(usize::MAX, |r| usize::try_from(r).unwrap_or(usize::MAX));
            if len > record_max || len > tcp.send_space() || len > room {
                break;
            }
            next = n;
        }
        if rec.is_empty() {
            break;
        }
        let queued = if f.framer.takes_sums() {
            tcp.send_fpdu_with_sum(rec, sum)
        } else {
            tcp.send_fpdu(rec)
        };
        if queued.is_err() {
            // Room was checked; a refusal means TCP is closing. The QP learns it from the
            // TCP events.
            break;
        }
        stats.fpdus_sent += fpdus;
        stats.records_sent += 1;
        work += fpdus as usize;
    }
    f.cq_blocked = false;
    if f.qp.has_completion() || !f.cq_send.is_empty() || !f.cq_recv.is_empty() {
        work += push_completions(f);
    }
    work
}

/// Moves the QP's completions into its CQ rings in bursts, as far as both have room (a
/// completion is taken out of the QP only when the CQ it goes to can hold it; one that a
/// CQ shared with another core could not take after all waits here, in order).
fn push_completions(f: &mut FpduConn) -> usize {
    let mut work = 0;
    let same = Arc::ptr_eq(&f.rings.send_cq, &f.rings.recv_cq);
    loop {
        for (ring, pending) in [
            (&f.rings.send_cq, &mut f.cq_send),
            (&f.rings.recv_cq, &mut f.cq_recv),
        ] {
            if !pending.is_empty() {
                let k = ring.push_burst(pending.iter().copied());
                pending.drain(..k);
                work += k;
            }
        }
        if !f.cq_send.is_empty() || !f.cq_recv.is_empty() {
            f.cq_blocked = true;
            return work;
        }
        if !f.qp.has_completion() {
            return work;
        }
        let send_room = f.rings.send_cq.room();
        let recv_room = if same {
            send_room
        } else {
            f.rings.recv_cq.room()
        };
        // Take as many as fit whichever CQ they go to, sorted into the two bursts.
        let budget = send_room.min(recv_room);
        if budget == 0 {
            f.cq_blocked = true;
            return work;
        }
        for _ in 0..budget {
            let Some(c) = f.qp.poll_completion() else {
                break;
            };
            if c.opcode == WcOpcode::Recv && !same {
                f.cq_recv.push(c);
            } else {
                f.cq_send.push(c);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rx_steps_hold_a_quarter_window_within_the_burst() {
        // Jumbo frames and the embedded 512 KiB buffer: 131072 / 9014 = 14 frames, 16
        // rounded up to the step's multiple.
        assert_eq!(rx_step_frames(512 << 10, 9000), 16);
        // A standard MTU: 86 frames fit, so the burst is one step.
        assert_eq!(rx_step_frames(512 << 10, 1500), RX_BURST);
        // The default 256 KiB buffer at a standard MTU: 43 frames, 48 rounded up.
        assert_eq!(rx_step_frames(256 << 10, 1500), 48);
        // A small buffer never goes below the recovery step, nor a huge one above the
        // burst.
        assert_eq!(rx_step_frames(16 << 10, 9000), RX_BURST_RECOVERY);
        assert_eq!(rx_step_frames(1 << 30, 576), RX_BURST);
        assert_eq!(rx_step_frames(0, 0), RX_BURST_RECOVERY);
    }
}
