//! The in-memory backend: two [`Port`]s joined by a simulated wire.
//!
//! [`link`] makes a pair of [`MemPort`]s. Each direction of the wire is a bounded ring of
//! frames that moves them in bursts (a flush queues all its frames at once, a receive burst
//! takes them at once, and the frames' buffers go back the same way), so the two ends may
//! run on different threads (or on the same one). With one queue a ring has one producer
//! and one consumer and each port owns its halves (no lock); with several ([`link_multi`])
//! the rings are shared [`BurstRing`]s. The sending end applies the faults of its
//! direction's [`WireConfig`] (loss, duplication, reordering, TCP resegmentation,
//! corruption) when a frame is queued by [`Port::tx`], decided by a seeded PRNG per
//! direction: the same sequence of frames meets the same faults on every run. Frames become
//! visible to the other end at [`Port::flush`].
//!
//! # Addresses and MTU
//!
//! A port's MAC is [`WireConfig::mac`] of the direction it sends on, or, when that is
//! `None`, `02:00:00:00:00:01` for the first port of [`link`] and `02:00:00:00:00:02` for
//! the second (locally administered unicast). A port's [`Port::mtu`] is the `mtu` of the
//! direction it sends on: [`Port::tx`] refuses frames longer than `mtu + 14`, and
//! [`Port::rx_burst`] drops (and counts in [`PortStats::rx_dropped`]) arriving frames
//! longer than `mtu + 14`.
//!
//! # Time
//!
//! Delivery times come from [`std::time::Instant::now`] (this is the I/O edge). With zero
//! `delay` and no reordering a frame is receivable as soon as it is flushed; otherwise the
//! receiving end keeps frames that are not yet due in a small local heap. Fault-free,
//! zero-delay frames never touch the clock or the heap, and in a steady flow not the
//! allocator: frame buffers are recycled from the receiver back to the sender through a
//! second ring, in bursts (with the receiver on another thread, once the sender has made
//! enough to leave 3 MiB of them waiting there).
//!
//! # Capacity
//!
//! At most [`WireConfig::capacity`] frames are in flight per direction: queued by `tx`
//! and not yet flushed, on the wire, or held back by the receiver's delay heap. When the
//! wire is full [`Port::tx_room`] is 0 and [`Port::tx`] returns false (counted in
//! [`PortStats::tx_dropped`], as are frames refused for being too long). Extra frames made
//! by duplication or resegmentation that do not fit are dropped and counted in
//! [`WireStats::overflow`].

use super::faults::{tcp_layout, FaultConfig, FaultInjector, FaultSink, FaultStats};
use super::{ChecksumOffload, Port, PortStats, RxChecksum, TxPayload};
use crate::rings::BurstRing;
use crossbeam::utils::CachePadded;
use proto::tcp::SharedRecord;
use smoltcp::wire::{EthernetAddress, Ipv4Packet};
use std::collections::BinaryHeap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use wire::rss::Rss;

/// Octets of an Ethernet header (no VLAN tag, no FCS).
pub const ETHERNET_HEADER_LEN: usize = 14;
/// Default MTU of a [`WireConfig`].
pub const DEFAULT_MTU: usize = 1500;
/// Default [`WireConfig::capacity`].
pub const DEFAULT_CAPACITY: usize = 4096;
pub use super::faults::DEFAULT_REORDER_DELAY;
/// Smallest MTU [`WireConfig::validate`] accepts (the IPv4 minimum, RFC 791).
pub const MIN_MTU: usize = 68;
/// Largest MTU [`WireConfig::validate`] accepts (the largest IPv4 datagram).
pub const MAX_MTU: usize = 65535;
/// Largest [`WireConfig::capacity`] [`WireConfig::validate`] accepts.
pub const MAX_CAPACITY: usize = 1 << 20;

/// Frame buffers a sending port takes back at a time (from its return ring, or with
/// several queues from the shared free ring).
const BUFFER_BURST: usize = 32;

/// Octets of the next spare buffer at most that [`MemPort::tx_buffer`] asks the CPU to
/// bring in for writing.
const PREFETCH_MAX: usize = 4096;

/// Frame buffers a sending port keeps at most.
const SPARE_MAX: usize = 2 * BUFFER_BURST;

/// Octets of frame buffers a one-queue wire's sender leaves in its return ring before
/// it takes buffers back, when the receiving port runs on another thread (else none):
/// a buffer is then written again only after the receiving core has read about this
/// much since, so its lines have left that core's own caches (2 MiB of L2 on the
/// development machine), and writing them asks the shared cache alone instead of
/// taking each line from the other core. Two-thread write-bw 64 KiB (`iwarp bench`,
/// alternated rounds): +11-17 % at MTU 9000 and +8-11 % at 1500 against taking the
/// newest buffers back (those the other core read last); 2, 3 and 4.5 MiB did alike.
/// With both ports on one thread it only pushed the buffers out of that thread's caches
/// (one-thread write-bw at MTU 9000 fell by 15 %), so it is left off there. At most half
/// the wire's capacity in frames ([`OwnEnds::far_reuse_frames`]): the return ring holds
/// no more than the capacity, and a threshold it cannot reach would make a new buffer
/// for every frame.
const FAR_REUSE_OCTETS: usize = 3 << 20;

/// A small number per thread, for the ports of a wire to tell whether they run on one
/// thread ([`FAR_REUSE_OCTETS`]).
fn thread_tag() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local! {
        static TAG: u64 = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    TAG.with(|t| *t)
}

/// Spare buffers a faulty wire wants at hand before a frame's faults are applied (for
/// its copies and the pieces it is cut into; with the receiver on another thread, none
/// until [`FAR_REUSE_OCTETS`] wait in the return ring, and the copies are made anew).
const FAULT_SPARES: usize = 8;

/// One direction of a simulated wire: what happens to frames sent by one port.
///
/// `Default` is a perfect wire (no delay, no faults, MTU 1500, 4096 frames in flight).
/// Probabilities are per frame, in `[0, 1]`, and independent of each other.
#[derive(Debug, Clone, PartialEq)]
pub struct WireConfig {
    /// MAC of the sending port; `None` picks `02:00:00:00:00:01` for the first port of
    /// [`link`] and `02:00:00:00:00:02` for the second. Must be unicast.
    pub mac: Option<EthernetAddress>,
    /// IP MTU of the sending port (Ethernet payload octets); frames are at most
    /// `mtu + 14` octets. Jumbo frames (9000) are fine.
    pub mtu: usize,
    /// Frames in flight in this direction (queued, on the wire or delayed), at least 1.
    pub capacity: usize,
    /// One-way delay.
    pub delay: Duration,
    /// The faults frames meet on their way ([`FaultConfig`]: loss, duplication,
    /// reordering, re-segmentation, corruption, and the seed of this direction's PRNG).
    pub faults: FaultConfig,
    /// The sending port emulates a NIC with IPv4/TCP checksum offload in both directions
    /// ([`Port::checksum_offload`]): the wire completes the checksums of frames queued with
    /// [`Port::tx_ipv4_tcp_offload`] before any fault (so corruption is still caught), and
    /// the port checks those of the frames it receives and reports the verdict through
    /// [`Port::rx_burst_checked`]. Default off.
    pub checksum_offload: bool,
    /// The sending port emulates a NIC that transmits a frame from several buffers
    /// ([`Port::tx_zero_copy_capable`]): a frame queued with [`Port::tx_zero_copy`] keeps
    /// a reference to its payload's record, and the payload (and, with offload, the
    /// checksums) is read only when the receiving port takes the frame off the wire, as
    /// a device reads it some time after the transmit call. On a wire with faults it is
    /// read when the frame is queued, since the faults work on octets. Default off.
    pub zero_copy: bool,
    /// The sending port emulates a NIC with TCP segmentation offload
    /// ([`Port::tso_max_payload`] is [`TSO_MAX_PAYLOAD`]): a frame queued with
    /// [`Port::tx_tso_finish`] is cut into segments as [`super::tso::segment`] does, each
    /// with its checksums filled, and each then meets the wire's faults on its own. Needs
    /// `checksum_offload` (a device that segments fills the checksums). Default off.
    pub tso: bool,
}

/// The largest payload of a frame the in-memory wire segments ([`WireConfig::tso`]): the
/// IPv4 total length stays within 16 bits with the largest TCP header.
pub const TSO_MAX_PAYLOAD: usize = 65535 - 20 - 60;

impl Default for WireConfig {
    fn default() -> Self {
        WireConfig {
            mac: None,
            mtu: DEFAULT_MTU,
            capacity: DEFAULT_CAPACITY,
            delay: Duration::ZERO,
            faults: FaultConfig::default(),
            checksum_offload: false,
            zero_copy: false,
            tso: false,
        }
    }
}

/// A [`WireConfig`] value that [`WireConfig::validate`] rejects.
#[derive(Debug, Clone, PartialEq)]
pub enum WireConfigError {
    /// A probability outside `[0, 1]` (or NaN).
    Probability {
        /// The field's name.
        field: &'static str,
        /// Its value.
        value: f64,
    },
    /// `mtu` outside [`MIN_MTU`]..=[`MAX_MTU`].
    Mtu(usize),
    /// `capacity` is 0 or above [`MAX_CAPACITY`].
    Capacity(usize),
    /// `mac` is not a unicast address.
    Mac(EthernetAddress),
    /// A queue count of 0 or above [`MAX_QUEUES`] ([`link_multi`]).
    Queues(usize),
    /// `tso` without `checksum_offload`.
    TsoWithoutChecksumOffload,
}

impl fmt::Display for WireConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireConfigError::Probability { field, value } => {
                write!(f, "wire {field} probability {value} is not in [0, 1]")
            }
            WireConfigError::Mtu(m) => {
                write!(f, "wire MTU {m} is not in {MIN_MTU}..={MAX_MTU}")
            }
            WireConfigError::Capacity(c) => {
                write!(f, "wire capacity {c} is not in 1..={MAX_CAPACITY}")
            }
            WireConfigError::Mac(m) => write!(f, "wire MAC {m} is not unicast"),
            WireConfigError::Queues(q) => {
                write!(f, "wire queue count {q} is not in 1..={MAX_QUEUES}")
            }
            WireConfigError::TsoWithoutChecksumOffload => write!(
                f,
                "wire TSO needs checksum offload (a device that segments fills the checksums)"
            ),
        }
    }
}

impl std::error::Error for WireConfigError {}

impl WireConfig {
    /// A perfect wire (the `Default`).
    pub fn perfect() -> Self {
        Self::default()
    }

    /// Sets [`WireConfig::tso`] (and, with it on, [`WireConfig::checksum_offload`]).
    pub fn with_tso(mut self, on: bool) -> Self {
        self.tso = on;
        self.checksum_offload |= on;
        self
    }

    /// Sets [`WireConfig::mac`].
    pub fn with_mac(mut self, mac: EthernetAddress) -> Self {
        self.mac = Some(mac);
        self
    }

    /// Sets [`WireConfig::checksum_offload`].
    pub fn with_checksum_offload(mut self, on: bool) -> Self {
        self.checksum_offload = on;
        self
    }

    /// Sets [`WireConfig::zero_copy`].
    pub fn with_zero_copy(mut self, on: bool) -> Self {
        self.zero_copy = on;
        self
    }

    /// Sets [`WireConfig::mtu`].
    pub fn with_mtu(mut self, mtu: usize) -> Self {
        self.mtu = mtu;
        self
    }

    /// Sets [`WireConfig::capacity`].
    pub fn with_capacity(mut self, capacity: usize) -> Self {
        self.capacity = capacity;
        self
    }

    /// Sets [`WireConfig::delay`].
    pub fn with_delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// Sets [`FaultConfig::loss`].
    pub fn with_loss(mut self, p: f64) -> Self {
        self.faults.loss = p;
        self
    }

    /// Sets [`FaultConfig::duplicate`].
    pub fn with_duplicate(mut self, p: f64) -> Self {
        self.faults.duplicate = p;
        self
    }

    /// Sets [`FaultConfig::reorder`] and [`FaultConfig::reorder_delay`].
    pub fn with_reorder(mut self, p: f64, extra_delay: Duration) -> Self {
        self.faults.reorder = p;
        self.faults.reorder_delay = extra_delay;
        self
    }

    /// Sets [`FaultConfig::resegment`].
    pub fn with_resegment(mut self, p: f64) -> Self {
        self.faults.resegment = p;
        self
    }

    /// Sets [`FaultConfig::corrupt`].
    pub fn with_corrupt(mut self, p: f64) -> Self {
        self.faults.corrupt = p;
        self
    }

    /// Sets [`FaultConfig::corrupt_undetected`].
    pub fn with_corrupt_undetected(mut self, p: f64) -> Self {
        self.faults.corrupt_undetected = p;
        self
    }

    /// Sets [`FaultConfig::seed`].
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.faults.seed = seed;
        self
    }

    /// Checks every field: probabilities in `[0, 1]`, MTU in [`MIN_MTU`]..=[`MAX_MTU`],
    /// capacity in 1..=[`MAX_CAPACITY`], unicast MAC, TSO only with checksum offload.
    pub fn validate(&self) -> Result<(), WireConfigError> {
        for (field, value) in self.faults.probabilities() {
            if !(0.0..=1.0).contains(&value) {
                return Err(WireConfigError::Probability { field, value });
            }
        }
        if !(MIN_MTU..=MAX_MTU).contains(&self.mtu) {
            return Err(WireConfigError::Mtu(self.mtu));
        }
        if !(1..=MAX_CAPACITY).contains(&self.capacity) {
            return Err(WireConfigError::Capacity(self.capacity));
        }
        if let Some(mac) = self.mac {
            if !mac.is_unicast() {
                return Err(WireConfigError::Mac(mac));
            }
        }
        if self.tso && !self.checksum_offload {
            return Err(WireConfigError::TsoWithoutChecksumOffload);
        }
        Ok(())
    }

    /// The nearest valid configuration: probabilities clamped to `[0, 1]` (NaN as 0), MTU
    /// and capacity clamped to their ranges, a non-unicast MAC replaced by the default, TSO
    /// off without checksum offload.
    pub fn sanitized(&self) -> WireConfig {
        WireConfig {
            mac: self.mac.filter(|m| m.is_unicast()),
            mtu: self.mtu.clamp(MIN_MTU, MAX_MTU),
            capacity: self.capacity.clamp(1, MAX_CAPACITY),
            delay: self.delay,
            faults: self.faults.sanitized(),
            checksum_offload: self.checksum_offload,
            zero_copy: self.zero_copy,
            tso: self.tso && self.checksum_offload,
        }
    }
}

/// Counters of one direction of the wire.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WireStats {
    /// Frames accepted by [`Port::tx`].
    pub sent: u64,
    /// Frames handed to the receiver by [`Port::rx_burst`] (including duplicates and
    /// resegmented pieces, excluding frames the receiver dropped as too long).
    pub delivered: u64,
    /// What the wire's faults did to them.
    pub faults: FaultStats,
    /// Extra frames (duplicates, resegmented pieces) dropped because the wire was full.
    pub overflow: u64,
}

/// Both directions of a wire, seen from one [`MemPort`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Frames this port sends.
    pub outbound: WireStats,
    /// Frames this port receives.
    pub inbound: WireStats,
}

#[derive(Default)]
struct Counters {
    sent: AtomicU64,
    lost: AtomicU64,
    duplicated: AtomicU64,
    reordered: AtomicU64,
    resegmented: AtomicU64,
    corrupted: AtomicU64,
    corrupted_undetected: AtomicU64,
    overflow: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// Adds `n` to a counter: with `one_writer` (no other thread writes it: the ports of a
/// one-queue wire each write their own direction's counters) a load and a store, else a
/// locked add, which also waits for every store before it to reach the cache (at a
/// flush, the frames just written; after a receive burst, the octets just placed).
fn add_u64(c: &AtomicU64, n: u64, one_writer: bool) {
    if one_writer {
        c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
    } else {
        c.fetch_add(n, Ordering::Relaxed);
    }
}

struct Frame {
    data: Vec<u8>,
    /// The payload of a frame queued by [`Port::tx_zero_copy`], not yet read.
    tail: Option<Tail>,
    due: Option<Instant>,
}

impl Frame {
    fn new(data: Vec<u8>, due: Option<Instant>) -> Self {
        Frame {
            data,
            tail: None,
            due,
        }
    }

    /// The frame's octets, reading the payload it refers to (if any) as its device would.
    fn into_data(self) -> Vec<u8> {
        let mut data = self.data;
        if let Some(t) = self.tail {
            t.read_into(&mut data);
        }
        data
    }
}

/// The payload a zero-copy frame refers to, and whether the device still has to complete
/// its checksums.
struct Tail {
    record: SharedRecord,
    offset: usize,
    len: usize,
    offload: bool,
}

impl Tail {
    /// Appends the payload to the frame's headers and, with offload, fills the checksums.
    fn read_into(self, frame: &mut Vec<u8>) {
        frame.extend_from_slice(&self.record[self.offset..self.offset + self.len]);
        if self.offload {
            device_completes_checksums(frame);
        }
    }
}

/// One direction: its counters and frames in flight, and with several queues the shared
/// rings of its frames and of their buffers on the way back.
struct Direction {
    /// With several queues ([`link_multi`]), one per receiving port; frames go to the
    /// queue the receiver's `rss` picks. Several ports send into each, so they are
    /// [`BurstRing`]s, locked once per burst. Empty with one queue: the two ports then
    /// own the halves of their rings ([`OwnEnds`]).
    queues: Vec<BurstRing<Frame>>,
    rss: Option<Rss>,
    /// With several queues, frame buffers on their way back to the senders, in bursts as
    /// well ([`MemPort::spare`], [`MemPort::recycled`]).
    free: Option<BurstRing<Vec<u8>>>,
    /// Whether `in_flight` is kept. A one-queue wire without delay or faults does not
    /// keep it: its frames are exactly those in its ring, which tells its room and its
    /// pending frames without a count both threads write (the locked add of each flush
    /// and receive burst was 0.05-0.1 us of every hop of an 8-octet round trip).
    counted: bool,
    /// Frames on the wire or held back by the receiver, not yet received (when
    /// `counted`).
    in_flight: CachePadded<AtomicUsize>,
    /// [`thread_tag`] of the thread that last flushed frames into this direction (0:
    /// none yet), and whether the receiving port last took them on another thread. Each
    /// written by one side, only when it changes.
    sender_thread: CachePadded<AtomicU64>,
    receiver_far: CachePadded<AtomicBool>,
    /// Written by the sender only.
    tx: CachePadded<Counters>,
    /// Written by the receiver only.
    delivered: CachePadded<AtomicU64>,
}

impl Direction {
    fn new(cfg: &WireConfig, queues: usize, key: [u8; wire::rss::KEY_LEN]) -> Self {
        let capacity = cfg.capacity;
        let queues = queues.max(1);
        let shared = queues > 1;
        Direction {
            counted: shared || !cfg.delay.is_zero() || cfg.faults.any(),
            queues: if shared {
                (0..queues).map(|_| BurstRing::new(capacity)).collect()
            } else {
                Vec::new()
            },
            rss: shared.then(|| Rss::new(key, queues).expect("at least one queue")),
            free: shared.then(|| BurstRing::new(capacity)),
            in_flight: CachePadded::new(AtomicUsize::new(0)),
            sender_thread: CachePadded::new(AtomicU64::new(0)),
            receiver_far: CachePadded::new(AtomicBool::new(false)),
            tx: CachePadded::new(Counters::default()),
            delivered: CachePadded::new(AtomicU64::new(0)),
        }
    }

    fn stats(&self) -> WireStats {
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        WireStats {
            sent: l(&self.tx.sent),
            delivered: l(&self.delivered),
            faults: FaultStats {
                lost: l(&self.tx.lost),
                duplicated: l(&self.tx.duplicated),
                reordered: l(&self.tx.reordered),
                resegmented: l(&self.tx.resegmented),
                corrupted: l(&self.tx.corrupted),
                corrupted_undetected: l(&self.tx.corrupted_undetected),
            },
            overflow: l(&self.tx.overflow),
        }
    }
}

/// A frame held back by the receiver until it is due; the heap's top is the earliest.
struct Held {
    due: Instant,
    seq: u64,
    data: Vec<u8>,
}

impl PartialEq for Held {
    fn eq(&self, other: &Self) -> bool {
        (self.due, self.seq) == (other.due, other.seq)
    }
}
impl Eq for Held {}
impl PartialOrd for Held {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Held {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (other.due, other.seq).cmp(&(self.due, self.seq))
    }
}

/// A port's ends of the rings of a one-queue wire. Each ring has one producer and one
/// consumer, so each port owns its halves: a burst costs one index update at each end,
/// and no lock.
struct OwnEnds {
    /// The frames this port sends.
    tx: rtrb::Producer<Frame>,
    /// The frames this port receives.
    rx: rtrb::Consumer<Frame>,
    /// This port's frame buffers, back from the receiver.
    spares: rtrb::Consumer<Vec<u8>>,
    /// The buffers of the frames this port received, on their way back to their sender.
    returns: rtrb::Producer<Vec<u8>>,
    /// Frame buffers that must wait in `spares` before any is taken back, with the
    /// receiver on another thread: [`FAR_REUSE_OCTETS`] of frames, at most half the
    /// capacity (fixed when the wire is made).
    far_reuse_frames: usize,
}

/// One end of a simulated wire made by [`link`].
pub struct MemPort {
    link: Arc<[Direction; 2]>,
    /// Index of the direction this port sends on; it receives on the other.
    out: usize,
    /// The queue of the other direction this port receives from.
    queue: usize,
    mac: EthernetAddress,
    cfg: WireConfig,
    /// The faults of this direction (none on a perfect wire).
    injector: Option<FaultInjector>,
    pending: Vec<Frame>,
    held: BinaryHeap<Held>,
    held_seq: u64,
    /// A one-queue wire's rings (else the link's shared ones).
    own: Option<OwnEnds>,
    /// This port's buffers for its next frames (at most [`SPARE_MAX`]): taken back from
    /// the receiver in bursts, and those of frames that did not go out (lost, or no room).
    spare: Vec<Vec<u8>>,
    /// Buffers of the frames received in this burst, given back to their sender in one
    /// burst at its end (its return ring, or with several queues the free ring).
    recycled: Vec<Vec<u8>>,
    stats: PortStats,
    /// Frames sent since the last flush, not yet counted in the link's statistics.
    unflushed_sent: u64,
    /// The TSO frame being built ([`Port::tx_tso_begin`]): room for its headers, then
    /// the payload appended so far (kept for the next frame once queued).
    tso_buf: Vec<u8>,
    /// The header length of the frame in `tso_buf` while one is being built.
    tso_header: Option<usize>,
}

impl fmt::Debug for MemPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemPort")
            .field("mac", &self.mac)
            .field("cfg", &self.cfg)
            .field("pending", &self.pending.len())
            .field("held", &self.held.len())
            .field("stats", &self.stats)
            .finish()
    }
}

/// Two ports joined by a wire: `a` configures frames sent by the first port (towards the
/// second), `b` the reverse. Invalid values are brought into range as by
/// [`WireConfig::sanitized`]; use [`try_link`] to have them rejected instead.
pub fn link(a: WireConfig, b: WireConfig) -> (MemPort, MemPort) {
    make_link(a.sanitized(), b.sanitized())
}

/// Like [`link`], but rejects an invalid configuration.
pub fn try_link(a: WireConfig, b: WireConfig) -> Result<(MemPort, MemPort), WireConfigError> {
    a.validate()?;
    b.validate()?;
    Ok(make_link(a, b))
}

const DEFAULT_MACS: [EthernetAddress; 2] = [
    EthernetAddress([0x02, 0, 0, 0, 0, 0x01]),
    EthernetAddress([0x02, 0, 0, 0, 0, 0x02]),
];

fn make_link(a: WireConfig, b: WireConfig) -> (MemPort, MemPort) {
    let (mut first, mut second) = make_links(a, b, 1, wire::rss::SYMMETRIC_KEY);
    (first.remove(0), second.remove(0))
}

/// Two devices of `queues` queue pairs each joined by a wire, as [`link`] joins two
/// ports: element `i` of each side is its queue pair `i` (one per core). Frames are
/// spread over the receiving side's queues the way a NIC's RSS does it, by the Toeplitz
/// hash of IPv4/TCP frames under [`wire::rss::SYMMETRIC_KEY`] with the round-robin
/// indirection table of [`Rss::symmetric`]; other frames (ARP) go to queue 0. `a`
/// configures the frames the first side sends (its capacity is shared by all of its
/// queues), `b` the reverse.
pub fn link_multi(
    a: WireConfig,
    b: WireConfig,
    queues: usize,
) -> Result<(Vec<MemPort>, Vec<MemPort>), WireConfigError> {
    a.validate()?;
    b.validate()?;
    if queues == 0 || queues > MAX_QUEUES {
        return Err(WireConfigError::Queues(queues));
    }
    Ok(make_links(a, b, queues, wire::rss::SYMMETRIC_KEY))
}

/// [`link_multi`] with the receiving sides hashing under `key` instead of the symmetric
/// key (a device whose steering its cores do not know: tests of the software fallback).
pub fn link_multi_keyed(
    a: WireConfig,
    b: WireConfig,
    queues: usize,
    key: [u8; wire::rss::KEY_LEN],
) -> Result<(Vec<MemPort>, Vec<MemPort>), WireConfigError> {
    a.validate()?;
    b.validate()?;
    if queues == 0 || queues > MAX_QUEUES {
        return Err(WireConfigError::Queues(queues));
    }
    Ok(make_links(a, b, queues, key))
}

/// The most queue pairs [`link_multi`] makes per side.
pub const MAX_QUEUES: usize = 64;

fn make_links(
    a: WireConfig,
    b: WireConfig,
    queues: usize,
    key: [u8; wire::rss::KEY_LEN],
) -> (Vec<MemPort>, Vec<MemPort>) {
    let link = Arc::new([
        Direction::new(&a, queues, key),
        Direction::new(&b, queues, key),
    ]);
    let port = |out: usize, queue: usize, cfg: WireConfig| MemPort {
        link: link.clone(),
        out,
        queue,
        mac: cfg.mac.unwrap_or(DEFAULT_MACS[out]),
        // Distinct streams per direction and queue even for equal seeds.
        injector: cfg
            .faults
            .any()
            .then(|| FaultInjector::new(cfg.faults, (out + 2 * queue) as u64)),
        cfg,
        pending: Vec::new(),
        held: BinaryHeap::new(),
        held_seq: 0,
        own: None,
        spare: Vec::new(),
        recycled: Vec::new(),
        unflushed_sent: 0,
        stats: PortStats::default(),
        tso_buf: Vec::new(),
        tso_header: None,
    };
    let mut first: Vec<MemPort> = (0..queues).map(|q| port(0, q, a.clone())).collect();
    let mut second: Vec<MemPort> = (0..queues).map(|q| port(1, q, b.clone())).collect();
    if queues == 1 {
        // Frames and buffers of each direction: `a` sends on direction 0, `b` on 1.
        let (tx0, rx0) = rtrb::RingBuffer::new(a.capacity);
        let (tx1, rx1) = rtrb::RingBuffer::new(b.capacity);
        let (back0, spares0) = rtrb::RingBuffer::new(a.capacity);
        let (back1, spares1) = rtrb::RingBuffer::new(b.capacity);
        let far =
            |c: &WireConfig| (FAR_REUSE_OCTETS / (c.mtu + ETHERNET_HEADER_LEN)).min(c.capacity / 2);
        first[0].own = Some(OwnEnds {
            tx: tx0,
            rx: rx1,
            spares: spares0,
            returns: back1,
            far_reuse_frames: far(&a),
        });
        second[0].own = Some(OwnEnds {
            tx: tx1,
            rx: rx0,
            spares: spares1,
            returns: back0,
            far_reuse_frames: far(&b),
        });
    }
    (first, second)
}

impl MemPort {
    /// The configuration of the direction this port sends on.
    pub fn config(&self) -> &WireConfig {
        &self.cfg
    }

    /// Counters of both directions of the wire.
    pub fn wire_stats(&self) -> LinkStats {
        LinkStats {
            outbound: self.link[self.out].stats(),
            inbound: self.link[1 - self.out].stats(),
        }
    }

    /// Frames sent to this port that are on the wire or held back, not yet received.
    pub fn rx_pending(&self) -> usize {
        match &self.own {
            Some(o) if !self.link[1 - self.out].counted => o.rx.slots(),
            _ => self.link[1 - self.out].in_flight.load(Ordering::Acquire),
        }
    }

    fn room(&self) -> usize {
        match &self.own {
            Some(o) if !self.link[self.out].counted => {
                return o.tx.slots().saturating_sub(self.pending.len());
            }
            _ => {}
        }
        let in_flight = self.link[self.out].in_flight.load(Ordering::Acquire);
        self.cfg
            .capacity
            .saturating_sub(in_flight + self.pending.len())
    }

    /// A buffer of `len` octets for [`Port::tx`] to fill. A recycled buffer keeps its old
    /// octets (`fill` overwrites all of them): only growth is zeroed, so frames of one
    /// size reuse buffers without a memset.
    fn tx_buffer(&mut self, len: usize) -> Vec<u8> {
        if self.spare.is_empty() {
            self.refill_spare();
        }
        let next = self.spare.pop();
        // The buffer after this one was last read by the receiving end's thread: asking
        // for its lines now (as many as this frame has: the next is likely its size)
        // overlaps taking them back with filling this frame, where the first stores to
        // it stalled (28 % of a two-thread write-bw sender's samples at MTU 1500).
        if let Some(n) = self.spare.last() {
            let lines = len.min(n.capacity()).min(PREFETCH_MAX);
            fastpath::kernels::prefetch_for_write(n.as_ptr(), lines);
        }
        match next {
            Some(mut b) => {
                if b.len() >= len {
                    b.truncate(len);
                } else {
                    b.resize(len, 0);
                }
                b
            }
            None => {
                let mut b = Vec::with_capacity(self.cfg.mtu + ETHERNET_HEADER_LEN);
                b.resize(len, 0);
                b
            }
        }
    }

    /// Takes up to [`BUFFER_BURST`] of this port's buffers back from the receiver, in one
    /// burst (with the receiver on another thread, only once
    /// [`OwnEnds::far_reuse_frames`] wait there).
    fn refill_spare(&mut self) {
        let want = SPARE_MAX.saturating_sub(self.spare.len()).min(BUFFER_BURST);
        let spare = &mut self.spare;
        match &mut self.own {
            Some(o) => {
                // With the receiver on another thread, the oldest buffers come back
                // only once enough newer ones wait behind them (meanwhile new buffers
                // are made: at most `far_reuse_frames` more per direction).
                if self.link[self.out].receiver_far.load(Ordering::Relaxed)
                    && o.spares.slots() < o.far_reuse_frames
                {
                    return;
                }
                let n = o.spares.slots().min(want);
                if let Ok(chunk) = o.spares.read_chunk(n) {
                    spare.extend(chunk);
                }
            }
            None => {
                if let Some(free) = &self.link[self.out].free {
                    free.pop_burst(want, |b| {
                        spare.push(b);
                        true
                    });
                }
            }
        }
    }

    /// Keeps a buffer of this port's that did not go out, for its next frames (at most
    /// [`SPARE_MAX`]; beyond, it is freed).
    fn keep_spare(spare: &mut Vec<Vec<u8>>, buf: Vec<u8>) {
        if spare.len() < SPARE_MAX {
            spare.push(buf);
        }
    }

    /// Gives the buffers of the frames just received back to their sender, in one burst
    /// (a full ring drops the rest: they are only spares).
    fn give_back(&mut self) {
        if self.recycled.is_empty() {
            return;
        }
        match &mut self.own {
            Some(o) => {
                let n = o.returns.slots().min(self.recycled.len());
                if let Ok(chunk) = o.returns.write_chunk_uninit(n) {
                    chunk.fill_from_iter(self.recycled.drain(..));
                }
            }
            None => {
                if let Some(free) = &self.link[1 - self.out].free {
                    free.push_burst(self.recycled.drain(..));
                }
            }
        }
        // (Those the ring had no room for are freed as the drain ends.)
    }

    fn base_due(&self) -> Option<Instant> {
        if self.cfg.delay.is_zero() {
            None
        } else {
            Some(Instant::now() + self.cfg.delay)
        }
    }

    /// Queues TSO frame `frame` (headers of `h` octets) as the device would: cut at `mss`,
    /// or as it is when it has no more than `mss` payload octets.
    fn queue_tso(&mut self, frame: &[u8], h: usize, mss: Option<u16>) -> bool {
        let payload = frame.len() - h;
        let max = self.cfg.mtu + ETHERNET_HEADER_LEN;
        let Some(mss) = mss.map(usize::from).filter(|&m| m > 0 && m < payload) else {
            // One segment: an ordinary frame with its checksums completed.
            let queued = self.tx(frame.len(), &mut |buf| {
                buf.copy_from_slice(frame);
                device_completes_checksums(buf);
            });
            self.stats.tx_checksum_offloaded += u64::from(queued);
            return queued;
        };
        let layout = super::tso::layout(frame).filter(|l| l.payload == h);
        let n = super::tso::segments(payload, mss);
        let Some(l) = layout.filter(|_| h + mss <= max && self.room() >= n) else {
            self.stats.tx_dropped += 1;
            return false;
        };
        for i in 0..n {
            let len = super::tso::segment_len(frame, &l, mss, i);
            let mut buf = self.tx_buffer(len);
            super::tso::write_segment(frame, &l, mss, i, &mut buf);
            self.enqueue(buf, None, len);
        }
        // The device took one frame.
        self.stats.tx_frames -= n as u64 - 1;
        self.stats.tx_tso_frames += 1;
        self.stats.tx_tso_segments += n as u64;
        true
    }

    /// Counts and queues one frame of `len` octets: `buf`, followed by `tail` once it is
    /// read. On a faulty wire the tail is read now and the faults applied; otherwise it
    /// is read when the receiver takes the frame.
    fn enqueue(&mut self, mut buf: Vec<u8>, tail: Option<Tail>, len: usize) {
        self.stats.tx_frames += 1;
        self.stats.tx_octets += len as u64;
        // Counted on the link at the flush: a locked add per frame would wait each time
        // for the frame's stores to reach memory.
        self.unflushed_sent += 1;
        if self.injector.is_some() {
            if let Some(t) = tail {
                t.read_into(&mut buf);
            }
            self.faults(buf);
        } else {
            let due = self.base_due();
            self.pending.push(Frame {
                data: buf,
                tail,
                due,
            });
        }
    }

    /// Applies this direction's faults to one frame and queues what is left of it.
    fn faults(&mut self, buf: Vec<u8>) {
        let Some(mut injector) = self.injector.take() else {
            return;
        };
        // Copies and pieces take buffers too: a few at hand, so that they do not allocate.
        if self.spare.len() < FAULT_SPARES {
            self.refill_spare();
        }
        let base = self.base_due();
        // Borrowed, not cloned: an `Arc` clone per frame wrote the count shared with the
        // other end's thread.
        let dir = &self.link[self.out];
        let room = self
            .cfg
            .capacity
            .saturating_sub(dir.in_flight.load(Ordering::Acquire));
        let mut sink = WireSink {
            dir,
            pending: &mut self.pending,
            spare: &mut self.spare,
            room,
            base,
            reorder_delay: self.cfg.faults.reorder_delay,
        };
        let ev = injector.apply(buf, &mut sink);
        self.injector = Some(injector);
        // Most frames meet no fault: only the counts that moved are written to the link.
        let c = &dir.tx;
        for (n, counter) in [
            (ev.lost, &c.lost),
            (ev.duplicated, &c.duplicated),
            (ev.reordered, &c.reordered),
            (ev.resegmented, &c.resegmented),
            (ev.corrupted, &c.corrupted),
            (ev.corrupted_undetected, &c.corrupted_undetected),
        ] {
            if n > 0 {
                counter.fetch_add(n, Ordering::Relaxed);
            }
        }
    }
}

/// Where a faulty direction's frames go: this port's pending frames, within the wire's
/// capacity.
struct WireSink<'a> {
    dir: &'a Direction,
    pending: &'a mut Vec<Frame>,
    /// The port's spare buffers.
    spare: &'a mut Vec<Vec<u8>>,
    /// Frames the wire can take besides those pending.
    room: usize,
    base: Option<Instant>,
    reorder_delay: Duration,
}

impl FaultSink for WireSink<'_> {
    fn alloc(&mut self) -> Vec<u8> {
        self.spare.pop().unwrap_or_default()
    }
    fn recycle(&mut self, buf: Vec<u8>) {
        MemPort::keep_spare(self.spare, buf);
    }
    fn emit(&mut self, frame: Vec<u8>, reordered: bool, first: bool) -> bool {
        let due = if reordered {
            Some(self.base.unwrap_or_else(Instant::now) + self.reorder_delay)
        } else {
            self.base
        };
        // Room for the first piece was checked by `tx`; extra ones need their own.
        if first || self.room > self.pending.len() {
            self.pending.push(Frame::new(frame, due));
            true
        } else {
            bump(&self.dir.tx.overflow);
            MemPort::keep_spare(self.spare, frame);
            false
        }
    }
}

impl Port for MemPort {
    fn mac(&self) -> EthernetAddress {
        self.mac
    }

    fn mtu(&self) -> usize {
        self.cfg.mtu
    }

    fn rx_burst(&mut self, max: usize, f: &mut dyn FnMut(&[u8])) -> usize {
        // (Borrowed, not cloned: the link is shared with the other end's thread, and an
        // `Arc` clone per burst made both threads write its count on every poll.)
        let dir = &self.link[1 - self.out];
        let limit = self.cfg.mtu + ETHERNET_HEADER_LEN;
        let mut taken = 0usize;
        let mut finished = 0usize;
        let mut delivered = 0u64;
        let mut now: Option<Instant> = None;
        let stats = &mut self.stats;
        let recycled = &mut self.recycled;
        let mut deliver = |data: Vec<u8>, taken: &mut usize| {
            *taken += 1;
            if data.len() > limit {
                stats.rx_dropped += 1;
            } else {
                stats.rx_frames += 1;
                stats.rx_octets += data.len() as u64;
                delivered += 1;
                f(&data);
            }
            recycled.push(data);
        };
        if !self.held.is_empty() {
            let t = *now.get_or_insert_with(Instant::now);
            while taken < max {
                match self.held.peek() {
                    Some(h) if h.due <= t => {
                        if let Some(h) = self.held.pop() {
                            deliver(h.data, &mut taken);
                            finished += 1;
                        }
                    }
                    _ => break,
                }
            }
        }
        // Frames not yet due go to the heap without counting: the ring is read until
        // `max` frames are taken or it is empty, as frame by frame.
        let held = &mut self.held;
        let held_seq = &mut self.held_seq;
        let mut take = |frame: Frame, taken: &mut usize| match frame.due {
            None => {
                deliver(frame.into_data(), taken);
                finished += 1;
            }
            Some(due) => {
                let t = *now.get_or_insert_with(Instant::now);
                if due <= t {
                    deliver(frame.into_data(), taken);
                    finished += 1;
                } else {
                    *held_seq += 1;
                    held.push(Held {
                        due,
                        seq: *held_seq,
                        data: frame.into_data(),
                    });
                }
            }
        };
        while taken < max {
            let popped = match &mut self.own {
                Some(o) => {
                    let n = o.rx.slots().min(max - taken);
                    match o.rx.read_chunk(n) {
                        // The chunk commits what it yielded when it is dropped.
                        Ok(chunk) if n > 0 => {
                            for frame in chunk {
                                take(frame, &mut taken);
                            }
                            n
                        }
                        _ => 0,
                    }
                }
                None => dir.queues[self.queue].pop_burst(max - taken, |frame| {
                    take(frame, &mut taken);
                    true
                }),
            };
            if popped == 0 {
                break;
            }
        }
        self.give_back();
        let dir = &self.link[1 - self.out];
        if finished > 0 && self.own.is_some() {
            // Whether the sender runs on another thread (FAR_REUSE_OCTETS).
            let far = dir.sender_thread.load(Ordering::Relaxed) != thread_tag();
            if dir.receiver_far.load(Ordering::Relaxed) != far {
                dir.receiver_far.store(far, Ordering::Relaxed);
            }
        }
        if finished > 0 {
            if dir.counted {
                dir.in_flight.fetch_sub(finished, Ordering::Release);
            }
            add_u64(&dir.delivered, delivered, self.own.is_some());
        }
        taken
    }

    fn rx_idle(&self) -> bool {
        if !self.held.is_empty() {
            return false;
        }
        match &self.own {
            Some(o) => o.rx.is_empty(),
            None => self.link[1 - self.out].queues[self.queue].is_empty_to_consumer(),
        }
    }

    fn tx_room(&self) -> usize {
        self.room()
    }

    fn tx(&mut self, len: usize, fill: &mut dyn FnMut(&mut [u8])) -> bool {
        if len > self.cfg.mtu + ETHERNET_HEADER_LEN || self.room() == 0 {
            self.stats.tx_dropped += 1;
            return false;
        }
        let mut buf = self.tx_buffer(len);
        fill(&mut buf);
        self.enqueue(buf, None, len);
        true
    }

    fn flush(&mut self) {
        if self.unflushed_sent > 0 {
            let n = std::mem::take(&mut self.unflushed_sent);
            add_u64(&self.link[self.out].tx.sent, n, self.own.is_some());
        }
        if self.pending.is_empty() {
            return;
        }
        let dir = &self.link[self.out];
        if self.own.is_some() {
            let tag = thread_tag();
            if dir.sender_thread.load(Ordering::Relaxed) != tag {
                dir.sender_thread.store(tag, Ordering::Relaxed);
            }
        }
        if dir.counted {
            dir.in_flight
                .fetch_add(self.pending.len(), Ordering::AcqRel);
        }
        let queue_of = |frame: &Frame| {
            dir.rss
                .as_ref()
                .map_or(0, |r| r.queue_of_frame(&frame.data))
        };
        let spare = &mut self.spare;
        // What did not fit: rare (TSO frames whose pieces were duplicated can exceed the
        // room `queue_tso` checked), and never a panic on the data path.
        let mut overflow = |frame: Frame| {
            if dir.counted {
                dir.in_flight.fetch_sub(1, Ordering::Release);
            }
            bump(&dir.tx.overflow);
            Self::keep_spare(spare, frame.data);
        };
        let mut frames = self.pending.drain(..).peekable();
        if let Some(o) = &mut self.own {
            // One queue: all of them in one burst.
            let n = o.tx.slots().min(frames.len());
            if let Ok(chunk) = o.tx.write_chunk_uninit(n) {
                chunk.fill_from_iter(&mut frames);
            }
            frames.for_each(&mut overflow);
            return;
        }
        // Each run of frames bound for one queue goes in one burst.
        while let Some(first) = frames.next() {
            let q = queue_of(&first);
            let mut run = std::iter::once(first)
                .chain(std::iter::from_fn(|| frames.next_if(|f| queue_of(f) == q)));
            dir.queues[q].push_burst(&mut run);
            run.for_each(&mut overflow);
        }
    }

    fn stats(&self) -> PortStats {
        self.stats
    }

    fn checksum_offload(&self) -> ChecksumOffload {
        let on = self.cfg.checksum_offload;
        ChecksumOffload {
            tx_ipv4_tcp: on,
            rx_ipv4_tcp: on,
        }
    }

    fn rx_burst_checked(&mut self, max: usize, f: &mut dyn FnMut(&[u8], RxChecksum)) -> usize {
        if self.cfg.checksum_offload {
            let (mut good, mut bad) = (0, 0);
            let n = self.rx_burst(max, &mut |frame| {
                let v = device_verdict(frame);
                good += u64::from(v == RxChecksum::Good);
                bad += u64::from(v == RxChecksum::Bad);
                f(frame, v)
            });
            self.stats.rx_checksum_good += good;
            self.stats.rx_checksum_bad += bad;
            n
        } else {
            self.rx_burst(max, &mut |frame| f(frame, RxChecksum::Unknown))
        }
    }

    fn tx_ipv4_tcp_offload(&mut self, len: usize, fill: &mut dyn FnMut(&mut [u8])) -> bool {
        if !self.cfg.checksum_offload {
            self.stats.tx_dropped += 1;
            return false;
        }
        let queued = self.tx(len, &mut |buf| {
            fill(buf);
            device_completes_checksums(buf);
        });
        self.stats.tx_checksum_offloaded += u64::from(queued);
        queued
    }

    fn tso_max_payload(&self) -> usize {
        if self.cfg.tso {
            TSO_MAX_PAYLOAD
        } else {
            0
        }
    }

    fn tx_tso_begin(&mut self, header_len: usize) -> bool {
        self.tso_header = None;
        if !self.cfg.tso || self.room() == 0 || header_len > self.cfg.mtu + ETHERNET_HEADER_LEN {
            self.stats.tx_dropped += 1;
            return false;
        }
        self.tso_buf.clear();
        self.tso_buf.resize(header_len, 0);
        self.tso_header = Some(header_len);
        true
    }

    fn tx_tso_append(&mut self, payload: &[u8]) -> bool {
        let Some(h) = self.tso_header else {
            self.stats.tx_dropped += 1;
            return false;
        };
        if self.tso_buf.len() - h + payload.len() > TSO_MAX_PAYLOAD {
            self.tso_header = None;
            self.stats.tx_dropped += 1;
            return false;
        }
        self.tso_buf.extend_from_slice(payload);
        true
    }

    fn tx_tso_finish(&mut self, mss: Option<u16>, fill: &mut dyn FnMut(&mut [u8])) -> bool {
        let Some(h) = self.tso_header.take() else {
            self.stats.tx_dropped += 1;
            return false;
        };
        let mut frame = std::mem::take(&mut self.tso_buf);
        fill(&mut frame[..h]);
        let queued = self.queue_tso(&frame, h, mss);
        self.tso_buf = frame;
        queued
    }

    fn tx_zero_copy_capable(&self) -> bool {
        self.cfg.zero_copy
    }

    fn tx_zero_copy(
        &mut self,
        header_len: usize,
        payload: TxPayload<'_>,
        offload: bool,
        fill: &mut dyn FnMut(&mut [u8]),
    ) -> bool {
        let len = header_len.saturating_add(payload.len);
        if !self.cfg.zero_copy
            || (offload && !self.cfg.checksum_offload)
            || !payload.fits(header_len, self.cfg.mtu + ETHERNET_HEADER_LEN)
            || self.room() == 0
        {
            self.stats.tx_dropped += 1;
            return false;
        }
        let mut buf = self.tx_buffer(header_len);
        fill(&mut buf);
        self.stats.tx_zero_copy += 1;
        self.stats.tx_checksum_offloaded += u64::from(offload);
        let tail = Tail {
            record: payload.record.clone(),
            offset: payload.offset,
            len: payload.len,
            offload,
        };
        self.enqueue(buf, Some(tail), len);
        true
    }
}

/// What a NIC with transmit checksum offload does to an Ethernet/IPv4/TCP frame: fills the
/// IPv4 header checksum and completes the TCP checksum from the pseudo-header sum in its
/// field. Anything else is left alone.
fn device_completes_checksums(frame: &mut [u8]) {
    let Some(l) = tcp_layout(frame) else { return };
    Ipv4Packet::new_unchecked(&mut frame[ETHERNET_HEADER_LEN..l.tcp]).fill_checksum();
    wire::tcp::complete_tcp_offload(&mut frame[l.tcp..l.end]);
}

/// What a NIC with receive checksum offload says of a frame: Bad for an IPv4 header with a
/// wrong checksum, Good or Bad for an unfragmented IPv4/TCP frame, Unknown for anything
/// else (a header too damaged to parse included: software then drops it).
fn device_verdict(frame: &[u8]) -> RxChecksum {
    let Some(l) = tcp_layout(frame) else {
        let ipv4 = frame.get(12..14) == Some(&[0x08, 0x00][..]);
        return match Ipv4Packet::new_checked(&frame[ETHERNET_HEADER_LEN.min(frame.len())..]) {
            Ok(ip) if ipv4 && !ip.verify_checksum() => RxChecksum::Bad,
            _ => RxChecksum::Unknown,
        };
    };
    let ip = Ipv4Packet::new_unchecked(&frame[ETHERNET_HEADER_LEN..l.end]);
    if ip.verify_checksum()
        && wire::tcp::verify_tcp(ip.src_addr(), ip.dst_addr(), &frame[l.tcp..l.end])
    {
        RxChecksum::Good
    } else {
        RxChecksum::Bad
    }
}

#[cfg(test)]
mod tests;
