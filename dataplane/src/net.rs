//! Ethernet, ARP, IPv4 and ICMP echo for the poll-mode core.
//!
//! [`Net`] is sans-IO except for the [`Port`] it transmits on: time comes in as
//! [`Instant`] arguments and arriving frames through [`Net::on_frame`], which never touches
//! the port (the receive burst may still hold it). The answers it makes (ARP replies, ICMP
//! echo replies) wait in a bounded queue ([`REPLY_QUEUE_MAX`]) until
//! [`Net::transmit_replies`] writes them, after the burst, followed by the TCP segments an
//! ARP packet resolved (see Transmit; at most [`ARP_HOLD_MAX`]). Other TCP segments
//! ([`Net::send_tcp`]) and ARP requests go straight into the port's transmit buffers with
//! [`Port::tx`]. The caller still calls [`Port::flush`]. Built on `smoltcp`'s wire types.
//!
//! # Receive
//!
//! [`Net::on_frame`] takes one Ethernet frame (no FCS, no VLAN tag) and returns an [`Rx`]:
//! a TCP segment addressed to us (IPv4 header checked, TCP checksum *not* yet checked:
//! [`wire::tcp::segment_from_bytes`] does that), [`Rx::Handled`] for ARP and ICMP it
//! consumed, or [`Rx::Dropped`] with a [`DropReason`]. Frames are accepted when their
//! Ethernet destination is our MAC or broadcast and their IPv4 destination is our address.
//! IPv4 options are skipped; fragments are dropped (the TCP engine sends with DF and an
//! MSS that fits, so a fragment means a misconfigured path). Only ICMP echo requests are
//! answered; other ICMP messages are dropped (counted).
//!
//! # ARP (RFC 826)
//!
//! Requests for our address are answered and teach the cache their sender; replies for
//! us teach the cache; any ARP packet refreshes (merges into) an entry that already exists
//! for its sender. Dynamic entries live [`ARP_LIFETIME`] from the last time they were
//! learnt or refreshed; an IPv4 frame whose Ethernet source matches the entry of its
//! next hop refreshes it too (so an active flow keeps its entry). While an entry has less
//! than [`ARP_REFRESH`] left, sending through it also sends an ARP request (it is still
//! used meanwhile). Requests for one address go out at most once per [`ARP_RETRY`].
//! Static entries ([`Net::insert_arp`]) never expire and are never replaced by ARP. The
//! cache holds at most [`ARP_CACHE_MAX`] entries; when full, expired entries are purged
//! and new dynamic entries are refused until there is room.
//!
//! # Transmit
//!
//! [`Net::send_tcp`] routes (on-link when the destination is inside our prefix, else via
//! the gateway), resolves the next hop's MAC and writes Ethernet + IPv4 (20 octets, DF,
//! TTL [`TTL`], identification 0 as RFC 6864 allows for atomic datagrams, header checksum)
//! and TCP (checksum computed) into one [`Port::tx`] buffer. An unresolved next hop sends an
//! ARP request and returns [`SendTcpError::Unresolved`]: the segment is not sent now but
//! held as a whole frame, the latest one per next hop (RFC 1122 2.3.2.2: the link layer
//! SHOULD save at least the latest packet for an unresolved address and send it once
//! resolved), so the first SYN to a new peer does not wait for the TCP engine's
//! retransmission timer.
//! * Any ARP packet that gives the next hop's MAC (a reply, a request from it, one from
//!   a sender already cached, or another core's copy) releases the held frame: it goes
//!   out after the answers in [`Net::transmit_replies`], to the MAC the cache then has.
//! * When the next hop resolves from the cache instead (an entry other traffic brought
//!   back), the held frame goes first, before the segment being sent: it is older.
//! * Bounds: one frame per next hop, for at most [`ARP_HOLD_MAX`] next hops, and at most
//!   [`ARP_HOLD_MAX`] released frames waiting for port room. A held frame is sent only if
//!   it is younger than [`ARP_HOLD_TIME`]; older ones are freed whenever another segment
//!   is held. A flood of SYNs from spoofed on-link addresses can keep the table full, and
//!   then a real peer's first segment is not held but left to its retransmission timer,
//!   as before.
//! * A frame dropped (replaced by a later segment, too old, a static ARP entry added for
//!   its hop, or without room) is counted in [`NetStats::held_dropped`], and the TCP
//!   engine retransmits what it carried.
//!
//! Frames are not padded to 60 octets (NICs pad short frames).
//!
//! # Transmit segmentation offload
//!
//! On a port that segments ([`Port::tso_max_payload`] above 0), data segments (payload,
//! PSH, no SYN, FIN or RST) are not sent one by one: consecutive segments of one
//! connection with the same acknowledgment, window and timestamp, each beginning where
//! the previous ended and all as long as the first but the last, are gathered into one
//! frame (each payload copied into the port's frame as it comes, once), with the first
//! one's length as the segment size. [`Net::flush_tso`] queues the frame; so does any
//! segment that cannot join it. The device then cuts exactly the segments the TCP engine
//! planned, each starting with an FPDU (RFC 5044 5.3). A frame of one segment goes as an
//! ordinary checksum-offloaded frame.

use crate::counters::counters;
use crate::port::{Port, TxPayload, ZERO_COPY_MIN_PAYLOAD};
use proto::tcp::FourTuple;
use smoltcp::phy::ChecksumCapabilities;
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{
    ArpOperation, ArpPacket, ArpRepr, EthernetAddress, EthernetFrame, EthernetProtocol,
    EthernetRepr, Icmpv4Message, Icmpv4Packet, Icmpv4Repr, IpProtocol, Ipv4Address, Ipv4Packet,
    Ipv4Repr, TcpControl, TcpRepr, TcpSeqNumber,
};
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};

/// Lifetime of a dynamic ARP entry from the last time it was learnt or refreshed.
pub const ARP_LIFETIME: Duration = Duration::from_secs(60);
/// A dynamic entry with less than this left is refreshed by an ARP request when used.
pub const ARP_REFRESH: Duration = Duration::from_secs(10);
/// Minimum interval between two ARP requests for the same address.
pub const ARP_RETRY: Duration = Duration::from_millis(100);
/// Most entries the ARP cache holds (and most addresses with a request outstanding).
pub const ARP_CACHE_MAX: usize = 4096;
/// TTL of the IPv4 datagrams [`Net`] sends.
pub const TTL: u8 = 64;
/// Most answers (ARP and echo replies) waiting for [`Net::transmit_replies`]; a request
/// beyond them is dropped as [`DropReason::ReplyNotSent`].
pub const REPLY_QUEUE_MAX: usize = 64;
/// How long a TCP segment held for an unresolved next hop may wait for the ARP reply; one
/// older than this when its hop resolves is dropped instead of sent.
pub const ARP_HOLD_TIME: Duration = Duration::from_secs(1);
/// Most next hops with a segment held for their ARP reply at once (one segment each).
pub const ARP_HOLD_MAX: usize = 64;

const ETH_LEN: usize = 14;
const IPV4_LEN: usize = 20;
/// The longest Ethernet, IPv4 (no options) and TCP (60 octets with options) headers.
const MAX_HEADERS: usize = ETH_LEN + IPV4_LEN + 60;
const ARP_LEN: usize = 28;

/// Addressing of one [`Net`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetConfig {
    /// Our MAC (normally the port's [`Port::mac`]).
    pub mac: EthernetAddress,
    /// Our IPv4 address.
    pub addr: Ipv4Address,
    /// Length of our on-link prefix (values above 32 count as 32).
    pub prefix_len: u8,
    /// The router for destinations outside the prefix.
    pub gateway: Option<Ipv4Address>,
    /// IP MTU: the largest IPv4 datagram [`Net::send_tcp`] sends (also bounded by the
    /// port's [`Port::mtu`]).
    pub mtu: usize,
}

/// Why [`Net::on_frame`] dropped a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// Too short, inconsistent lengths, wrong IP version, bad ARP hardware/protocol.
    Malformed,
    /// Ethernet destination not our MAC or broadcast, IPv4 destination not our address,
    /// or ARP about other addresses.
    NotForUs,
    /// IPv4 header or ICMP checksum wrong.
    BadChecksum,
    /// An IPv4 fragment (more-fragments set or non-zero offset).
    Fragment,
    /// An EtherType other than IPv4 and ARP (VLAN tags included).
    UnsupportedEtherType,
    /// An IPv4 protocol other than TCP and ICMP.
    UnsupportedProtocol,
    /// An ICMP message other than an echo request.
    UnsupportedIcmp,
    /// A broadcast, multicast, unspecified or our own address (or a non-unicast MAC) as
    /// the sender.
    BadSource,
    /// An ARP or echo request we would answer, but [`REPLY_QUEUE_MAX`] answers already
    /// wait for the port.
    ReplyNotSent,
}

/// What [`Net::on_frame`] made of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rx<'a> {
    /// A TCP segment for us.
    Tcp {
        /// IPv4 source.
        src: Ipv4Address,
        /// IPv4 destination (our address).
        dst: Ipv4Address,
        /// The TCP header and payload (IPv4 header checksum already verified, TCP
        /// checksum not yet: [`wire::tcp::segment_from_bytes`] does it).
        segment: &'a [u8],
    },
    /// ARP or ICMP that was consumed or answered.
    Handled,
    /// Dropped (and counted in [`NetStats`]).
    Dropped(DropReason),
}

/// Why [`Net::send_tcp`] did not send a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SendTcpError {
    /// The destination is outside our prefix and there is no gateway, or it is not a
    /// unicast address.
    NoRoute,
    /// The next hop's MAC is not known yet: an ARP request was sent (or one is
    /// outstanding). The segment was not sent.
    Unresolved,
    /// The datagram is larger than the MTU (ours or the port's).
    TooLarge,
    /// The tuple's local address is not ours.
    BadSource,
    /// The port has no room.
    PortFull,
}

impl fmt::Display for SendTcpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SendTcpError::NoRoute => "no route to the destination",
            SendTcpError::Unresolved => "next hop MAC unresolved (ARP request sent)",
            SendTcpError::TooLarge => "datagram larger than the MTU",
            SendTcpError::BadSource => "source address is not ours",
            SendTcpError::PortFull => "port transmit queue full",
        })
    }
}

impl std::error::Error for SendTcpError {}

counters! {
    /// Counters of one [`Net`].
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
    pub struct NetStats {
        /// Frames given to [`Net::on_frame`].
        pub rx_frames: u64,
        /// TCP segments handed out as [`Rx::Tcp`].
        pub rx_tcp: u64,
        /// ARP packets handled.
        pub rx_arp: u64,
        /// ICMP echo requests answered.
        pub rx_echo: u64,
        /// Frames dropped as [`DropReason::Malformed`].
        pub drop_malformed: u64,
        /// Frames dropped as [`DropReason::NotForUs`].
        pub drop_not_for_us: u64,
        /// Frames dropped as [`DropReason::BadChecksum`].
        pub drop_bad_checksum: u64,
        /// Frames dropped as [`DropReason::Fragment`].
        pub drop_fragment: u64,
        /// Frames dropped as [`DropReason::UnsupportedEtherType`],
        /// [`DropReason::UnsupportedProtocol`] or [`DropReason::UnsupportedIcmp`].
        pub drop_unsupported: u64,
        /// Frames dropped as [`DropReason::BadSource`].
        pub drop_bad_source: u64,
        /// Requests not answered for want of port room ([`DropReason::ReplyNotSent`]).
        pub drop_reply_not_sent: u64,
        /// ARP requests sent.
        pub arp_requests_sent: u64,
        /// ARP replies transmitted.
        pub arp_replies_sent: u64,
        /// ICMP echo replies transmitted.
        pub echo_replies_sent: u64,
        /// TCP segments sent.
        pub tx_tcp: u64,
        /// [`Net::send_tcp`] calls that failed with [`SendTcpError::Unresolved`] (their
        /// segments held for the ARP reply unless the hold had no room: `held_dropped`).
        pub tx_unresolved: u64,
        /// Held segments sent once their next hop was resolved.
        pub held_sent: u64,
        /// Held segments dropped: replaced by a later one for the same next hop, older than
        /// [`ARP_HOLD_TIME`], without room ([`ARP_HOLD_MAX`] held or released), refused by
        /// a full port, or superseded by a static entry ([`Net::insert_arp`]).
        pub held_dropped: u64,
        /// [`Net::send_tcp`] calls that failed with another error.
        pub tx_failed: u64,
        /// Frames queued for transmit segmentation offload (of two segments or more).
        pub tx_tso_frames: u64,
        /// Segments those frames held (also counted in `tx_tcp`).
        pub tx_tso_segments: u64,
    }
}

impl NetStats {
    /// Received frames dropped, whatever the reason (the `drop_*` counters summed).
    pub fn rx_dropped(&self) -> u64 {
        self.drop_malformed
            + self.drop_not_for_us
            + self.drop_bad_checksum
            + self.drop_fragment
            + self.drop_unsupported
            + self.drop_bad_source
            + self.drop_reply_not_sent
    }
}

/// A cheap hasher for IPv4 addresses as `u32` keys (multiplicative hashing); the cache
/// is keyed by addresses the local network controls, and is bounded in size.
#[derive(Debug, Default, Clone, Copy)]
struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(*b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.0 = (u64::from(n) ^ self.0).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

type AddrMap<V> = HashMap<u32, V, BuildHasherDefault<AddrHasher>>;

#[derive(Debug, Clone, Copy)]
struct ArpEntry {
    mac: EthernetAddress,
    /// `None` for a static entry.
    expires: Option<Instant>,
}

/// A frame waiting for the port: the whole Ethernet frame.
#[derive(Debug, Clone)]
struct Reply {
    frame: Vec<u8>,
    kind: ReplyKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReplyKind {
    Arp,
    Echo,
}

/// A TCP segment waiting for its next hop's MAC: the whole Ethernet frame, destination
/// MAC still zero, checksums filled.
#[derive(Debug, Clone)]
struct Held {
    frame: Vec<u8>,
    since: Instant,
}

/// Ethernet/ARP/IPv4/ICMP state of one interface: addressing, the ARP cache, the answers
/// waiting for the port, counters.
#[derive(Debug, Clone)]
pub struct Net {
    cfg: NetConfig,
    mask: u32,
    arp: AddrMap<ArpEntry>,
    /// When the last ARP request for an address went out.
    requested: AddrMap<Instant>,
    replies: VecDeque<Reply>,
    /// The latest segment for each unresolved next hop.
    held: AddrMap<Held>,
    /// Held segments whose next hop is resolved, waiting for the port (at most
    /// [`ARP_HOLD_MAX`]).
    released: VecDeque<Vec<u8>>,
    stats: NetStats,
    /// Answer ARP requests (off while learning from another core's copy).
    answer_arp: bool,
    /// The frame being gathered for transmit segmentation offload.
    tso: Option<TsoBatch>,
}

/// Most segments gathered into one TSO frame (devices commonly take 64 or more).
pub const TSO_MAX_SEGMENTS: u32 = 64;

/// A frame being gathered for transmit segmentation offload: its payload is in the
/// port's frame ([`Port::tx_tso_append`]); its headers are written when it is queued.
#[derive(Debug, Clone, Copy)]
struct TsoBatch {
    tuple: FourTuple,
    dst_mac: EthernetAddress,
    /// The first segment's TCP header fields (no payload).
    repr: TcpRepr<'static>,
    /// The sequence number the next segment must start at.
    next_seq: TcpSeqNumber,
    /// The segment size: the first segment's payload length.
    mss: usize,
    segments: u32,
    /// Payload octets gathered.
    len: usize,
    /// The largest payload the port takes.
    max: usize,
    /// A segment shorter than `mss` was gathered: it is the last.
    closed: bool,
}

impl TsoBatch {
    /// Whether `repr` (a data segment) can join this frame.
    fn takes(&self, tuple: &FourTuple, repr: &TcpRepr) -> bool {
        !self.closed
            && *tuple == self.tuple
            && repr.seq_number == self.next_seq
            && repr.ack_number == self.repr.ack_number
            && repr.window_len == self.repr.window_len
            && repr.timestamp == self.repr.timestamp
            && repr.control == self.repr.control
            && repr.payload.len() <= self.mss
            && self.len + repr.payload.len() <= self.max
            && self.segments < TSO_MAX_SEGMENTS
    }
}

/// The header fields of `repr`, without its payload.
fn header_only(repr: &TcpRepr) -> TcpRepr<'static> {
    TcpRepr {
        src_port: repr.src_port,
        dst_port: repr.dst_port,
        control: repr.control,
        seq_number: repr.seq_number,
        ack_number: repr.ack_number,
        window_len: repr.window_len,
        window_scale: repr.window_scale,
        max_seg_size: repr.max_seg_size,
        sack_permitted: repr.sack_permitted,
        sack_ranges: repr.sack_ranges,
        timestamp: repr.timestamp,
        payload: &[],
    }
}

/// Whether `repr` may go in a TSO frame: a data segment with nothing a device would have
/// to treat specially (SYN, FIN, RST, options only a SYN carries, SACK blocks).
fn tso_eligible(repr: &TcpRepr) -> bool {
    repr.control == TcpControl::Psh
        && !repr.payload.is_empty()
        && repr.ack_number.is_some()
        && repr.max_seg_size.is_none()
        && repr.window_scale.is_none()
        && !repr.sack_permitted
        && repr.sack_ranges.iter().all(Option::is_none)
}

fn key(a: Ipv4Address) -> u32 {
    u32::from(a)
}

fn unicast(a: Ipv4Address) -> bool {
    !(a.is_broadcast() || a.is_multicast() || a.is_unspecified())
}

impl Net {
    /// A new interface with an empty ARP cache.
    pub fn new(cfg: NetConfig) -> Self {
        let p = u32::from(cfg.prefix_len.min(32));
        let mask = if p == 0 { 0 } else { u32::MAX << (32 - p) };
        Net {
            cfg,
            mask,
            arp: AddrMap::default(),
            requested: AddrMap::default(),
            replies: VecDeque::new(),
            held: AddrMap::default(),
            released: VecDeque::new(),
            stats: NetStats::default(),
            answer_arp: true,
            tso: None,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &NetConfig {
        &self.cfg
    }

    /// Counters.
    pub fn stats(&self) -> NetStats {
        self.stats
    }

    /// True when `addr` is inside our prefix.
    pub fn is_on_link(&self, addr: Ipv4Address) -> bool {
        (key(addr) ^ key(self.cfg.addr)) & self.mask == 0
    }

    /// The neighbour a datagram to `dst` goes through: `dst` itself when on-link, else
    /// the gateway. `None` without a route or for a non-unicast `dst`.
    pub fn next_hop(&self, dst: Ipv4Address) -> Option<Ipv4Address> {
        if !unicast(dst) {
            None
        } else if self.is_on_link(dst) {
            Some(dst)
        } else {
            self.cfg.gateway
        }
    }

    /// Adds a static ARP entry (never expires, never replaced by ARP traffic).
    pub fn insert_arp(&mut self, addr: Ipv4Address, mac: EthernetAddress) {
        self.arp.insert(key(addr), ArpEntry { mac, expires: None });
        self.requested.remove(&key(addr));
        // A segment held for it cannot be told from a stale one here (no clock): it is
        // dropped, and the TCP engine retransmits it.
        if self.held.remove(&key(addr)).is_some() {
            self.stats.held_dropped += 1;
        }
    }

    /// Removes the ARP entry for `addr` (static or dynamic).
    pub fn remove_arp(&mut self, addr: Ipv4Address) {
        self.arp.remove(&key(addr));
    }

    /// The cached MAC of the neighbour `addr` (no ARP request, no routing).
    pub fn arp_lookup(&self, now: Instant, addr: Ipv4Address) -> Option<EthernetAddress> {
        self.arp
            .get(&key(addr))
            .filter(|e| e.expires.is_none_or(|t| now < t))
            .map(|e| e.mac)
    }

    /// The MAC of the next hop towards `addr` ([`Net::next_hop`]); when it is not known,
    /// sends an ARP request (at most one per [`ARP_RETRY`]) and returns `None`.
    pub fn resolve(
        &mut self,
        now: Instant,
        port: &mut dyn Port,
        addr: Ipv4Address,
    ) -> Option<EthernetAddress> {
        let hop = self.next_hop(addr)?;
        self.neighbour(now, port, hop)
    }

    /// Handles one arriving Ethernet frame: answers ARP and ICMP echo requests (queued
    /// for [`Net::transmit_replies`]), learns ARP, and hands out TCP segments for us.
    pub fn on_frame<'a>(&mut self, now: Instant, frame: &'a [u8]) -> Rx<'a> {
        self.stats.rx_frames += 1;
        let rx = self.rx(now, frame);
        if let Rx::Dropped(reason) = rx {
            let s = &mut self.stats;
            match reason {
                DropReason::Malformed => s.drop_malformed += 1,
                DropReason::NotForUs => s.drop_not_for_us += 1,
                DropReason::BadChecksum => s.drop_bad_checksum += 1,
                DropReason::Fragment => s.drop_fragment += 1,
                DropReason::UnsupportedEtherType
                | DropReason::UnsupportedProtocol
                | DropReason::UnsupportedIcmp => s.drop_unsupported += 1,
                DropReason::BadSource => s.drop_bad_source += 1,
                DropReason::ReplyNotSent => s.drop_reply_not_sent += 1,
            }
        }
        rx
    }

    /// Learns from a copy of an ARP frame another core of the group received and answered
    /// ([`crate::lcore::steer`]): the mapping is taken, nothing is answered.
    pub fn on_arp_copy(&mut self, now: Instant, frame: &[u8]) {
        self.answer_arp = false;
        let _ = self.on_frame(now, frame);
        self.answer_arp = true;
    }

    /// Writes the queued answers into `port`, oldest first, until it has no room (the rest
    /// wait for the next call). Returns how many went.
    pub fn transmit_replies(&mut self, port: &mut dyn Port) -> usize {
        let mut n = 0;
        while let Some(r) = self.replies.front() {
            let frame = &r.frame;
            if !port.tx(frame.len(), &mut |b: &mut [u8]| b.copy_from_slice(frame)) {
                break;
            }
            match r.kind {
                ReplyKind::Arp => self.stats.arp_replies_sent += 1,
                ReplyKind::Echo => self.stats.echo_replies_sent += 1,
            }
            self.replies.pop_front();
            n += 1;
        }
        while let Some(frame) = self.released.front() {
            if !port.tx(frame.len(), &mut |b: &mut [u8]| b.copy_from_slice(frame)) {
                break;
            }
            self.stats.held_sent += 1;
            self.released.pop_front();
            n += 1;
        }
        n
    }

    /// Answers waiting for [`Net::transmit_replies`].
    pub fn replies_queued(&self) -> usize {
        self.replies.len()
    }

    /// Held segments whose next hop is resolved, waiting for [`Net::transmit_replies`].
    pub fn released_queued(&self) -> usize {
        self.released.len()
    }

    /// Next hops with a TCP segment held for their ARP reply.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Queues an answer of `len` octets written by `fill`; false when the queue is full.
    fn queue_reply(&mut self, len: usize, kind: ReplyKind, fill: impl FnOnce(&mut [u8])) -> bool {
        if self.replies.len() >= REPLY_QUEUE_MAX {
            return false;
        }
        let mut frame = vec![0; len];
        fill(&mut frame);
        self.replies.push_back(Reply { frame, kind });
        true
    }

    /// Holds `repr` (to `tuple.remote_addr`, whose next hop is unresolved) until the ARP
    /// reply, in place of the one held before for the same next hop.
    fn hold(&mut self, now: Instant, tuple: &FourTuple, repr: &TcpRepr) {
        let Some(hop) = self.next_hop(tuple.remote_addr) else {
            return;
        };
        // Too old to send: their memory goes back (at most ARP_HOLD_MAX to look at).
        let before = self.held.len();
        self.held.retain(|_, h| now < h.since + ARP_HOLD_TIME);
        self.stats.held_dropped += (before - self.held.len()) as u64;
        if !self.held.contains_key(&key(hop)) && self.held.len() >= ARP_HOLD_MAX {
            self.stats.held_dropped += 1;
            return;
        }
        let tcp_len = repr.buffer_len();
        let mut frame = vec![0u8; ETH_LEN + IPV4_LEN + tcp_len];
        EthernetRepr {
            src_addr: self.cfg.mac,
            dst_addr: EthernetAddress([0; 6]),
            ethertype: EthernetProtocol::Ipv4,
        }
        .emit(&mut EthernetFrame::new_unchecked(&mut frame[..]));
        Ipv4Repr {
            src_addr: tuple.local_addr,
            dst_addr: tuple.remote_addr,
            next_header: IpProtocol::Tcp,
            payload_len: tcp_len,
            hop_limit: TTL,
        }
        .emit(
            &mut Ipv4Packet::new_unchecked(&mut frame[ETH_LEN..ETH_LEN + IPV4_LEN]),
            &ChecksumCapabilities::ignored(),
        );
        wire::tcp::checksum::fill_ipv4_header(&mut frame[ETH_LEN..ETH_LEN + IPV4_LEN]);
        wire::tcp::emit_segment(
            tuple.local_addr,
            tuple.remote_addr,
            repr,
            &mut frame[ETH_LEN + IPV4_LEN..],
        );
        let old = self.held.insert(key(hop), Held { frame, since: now });
        self.stats.held_dropped += u64::from(old.is_some());
    }

    /// An ARP packet from `addr` said its MAC is `sha`: its held segment, if any and not
    /// too old, goes out after the answers, to the MAC the cache now has for it (`sha`
    /// when the cache had no room).
    fn release(&mut self, now: Instant, addr: Ipv4Address, sha: EthernetAddress) {
        if self.held.is_empty() {
            return;
        }
        let Some(mut h) = self.held.remove(&key(addr)) else {
            return;
        };
        if now >= h.since + ARP_HOLD_TIME || self.released.len() >= ARP_HOLD_MAX {
            self.stats.held_dropped += 1;
            return;
        }
        let mac = self.arp.get(&key(addr)).map_or(sha, |e| e.mac);
        h.frame[..6].copy_from_slice(mac.as_bytes());
        self.released.push_back(h.frame);
    }

    /// `hop` resolved from the cache (an entry that other traffic brought back, say)
    /// while a segment is still held for it: the held one, older, goes first, now, if
    /// it is not too old.
    fn send_held(
        &mut self,
        now: Instant,
        port: &mut dyn Port,
        hop: Ipv4Address,
        mac: EthernetAddress,
    ) {
        let Some(mut h) = self.held.remove(&key(hop)) else {
            return;
        };
        h.frame[..6].copy_from_slice(mac.as_bytes());
        let frame = &h.frame;
        if now < h.since + ARP_HOLD_TIME
            && port.tx(frame.len(), &mut |b: &mut [u8]| b.copy_from_slice(frame))
        {
            self.stats.held_sent += 1;
        } else {
            self.stats.held_dropped += 1;
        }
    }

    /// Sends one TCP segment from `tuple.local_*` to `tuple.remote_*` as an Ethernet
    /// frame written straight into the port's transmit buffer.
    pub fn send_tcp(
        &mut self,
        now: Instant,
        port: &mut dyn Port,
        tuple: &FourTuple,
        repr: &TcpRepr,
    ) -> Result<(), SendTcpError> {
        let r = self.send_tcp_record(now, port, tuple, repr, None, None);
        self.flush_tso(port);
        r
    }

    /// [`Net::send_tcp`] for a segment whose payload `record` holds (see
    /// [`Connection::poll_transmit_records`](proto::tcp::Connection::poll_transmit_records)):
    /// on a port with [`Port::tx_zero_copy_capable`] the frame is queued as the headers
    /// followed by the payload referenced in the record, not copied, when the payload is
    /// at least [`ZERO_COPY_MIN_PAYLOAD`] octets and of even length. Otherwise, or with
    /// `None`, the frame is written whole as by `send_tcp`. `payload_sum`, when known, is
    /// the one's complement sum of `repr.payload` (as `wire::tcp::checksum::data` gives
    /// it): the TCP checksum is then filled without summing the payload.
    pub fn send_tcp_record(
        &mut self,
        now: Instant,
        port: &mut dyn Port,
        tuple: &FourTuple,
        repr: &TcpRepr,
        record: Option<TxPayload<'_>>,
        payload_sum: Option<u16>,
    ) -> Result<(), SendTcpError> {
        debug_assert!(
            payload_sum.is_none_or(|s| s == wire::tcp::checksum::data(repr.payload)),
            "a payload sum that is not the payload's"
        );
        let r = if port.tso_max_payload() > 0 {
            self.send_tcp_tso(now, port, tuple, repr, record, payload_sum)
        } else {
            self.try_send_tcp(now, port, tuple, repr, record, payload_sum)
        };
        match r {
            Ok(()) => self.stats.tx_tcp += 1,
            Err(SendTcpError::Unresolved) => {
                self.stats.tx_unresolved += 1;
                self.hold(now, tuple, repr);
            }
            Err(_) => self.stats.tx_failed += 1,
        }
        r
    }

    /// [`Net::send_tcp_record`] on a port that segments: a data segment joins the frame
    /// being gathered or starts one; anything else queues that frame first and goes alone.
    fn send_tcp_tso(
        &mut self,
        now: Instant,
        port: &mut dyn Port,
        tuple: &FourTuple,
        repr: &TcpRepr,
        record: Option<TxPayload<'_>>,
        payload_sum: Option<u16>,
    ) -> Result<(), SendTcpError> {
        if let Some(b) = &mut self.tso {
            if b.takes(tuple, repr) {
                if !port.tx_tso_append(repr.payload) {
                    // The port abandoned the frame: what it held is lost (the TCP engine
                    // retransmits it).
                    self.stats.tx_failed += u64::from(b.segments);
                    self.stats.tx_tcp -= u64::from(b.segments);
                    self.tso = None;
                    return Err(SendTcpError::PortFull);
                }
                b.next_seq += repr.payload.len();
                b.segments += 1;
                b.len += repr.payload.len();
                b.closed = repr.payload.len() < b.mss;
                return Ok(());
            }
        }
        self.flush_tso(port);
        if !tso_eligible(repr) {
            return self.try_send_tcp(now, port, tuple, repr, record, payload_sum);
        }
        let dst_mac = self.route_tcp(now, port, tuple, IPV4_LEN + repr.buffer_len())?;
        let header_len = ETH_LEN + IPV4_LEN + repr.header_len();
        if !port.tx_tso_begin(header_len) {
            return Err(SendTcpError::PortFull);
        }
        if !port.tx_tso_append(repr.payload) {
            return Err(SendTcpError::PortFull);
        }
        self.tso = Some(TsoBatch {
            tuple: *tuple,
            dst_mac,
            repr: header_only(repr),
            next_seq: repr.seq_number + repr.payload.len(),
            mss: repr.payload.len(),
            segments: 1,
            len: repr.payload.len(),
            max: port.tso_max_payload(),
            closed: false,
        });
        Ok(())
    }

    /// Queues the frame gathered for transmit segmentation offload, if there is one. The
    /// core calls it after each connection's transmit; [`Net::send_tcp_record`] calls it
    /// before any segment that cannot join the frame.
    pub fn flush_tso(&mut self, port: &mut dyn Port) {
        let Some(b) = self.tso.take() else {
            return;
        };
        let eth = EthernetRepr {
            src_addr: self.cfg.mac,
            dst_addr: b.dst_mac,
            ethertype: EthernetProtocol::Ipv4,
        };
        let tcp_header = b.repr.buffer_len();
        let ip_payload = tcp_header + b.len;
        let ip = Ipv4Repr {
            src_addr: b.tuple.local_addr,
            dst_addr: b.tuple.remote_addr,
            next_header: IpProtocol::Tcp,
            payload_len: ip_payload,
            hop_limit: TTL,
        };
        let (src, dst) = (b.tuple.local_addr, b.tuple.remote_addr);
        let segmented = b.segments > 1;
        let mss = segmented.then_some(b.mss as u16);
        let queued = port.tx_tso_finish(mss, &mut |buf: &mut [u8]| {
            let caps = ChecksumCapabilities::ignored();
            eth.emit(&mut EthernetFrame::new_unchecked(&mut *buf));
            ip.emit(
                &mut Ipv4Packet::new_unchecked(&mut buf[ETH_LEN..ETH_LEN + IPV4_LEN]),
                &caps,
            );
            let tcp = &mut buf[ETH_LEN + IPV4_LEN..];
            wire::tcp::emit_segment_header_with_sum(src, dst, &b.repr, &[], None, true, tcp);
            // A device that segments wants the pseudo-header sum without the length;
            // one that completes a single frame wants it with.
            let len = if segmented { 0 } else { ip_payload };
            wire::tcp::checksum::fill_tcp_pseudo_header_len(src, dst, tcp, len);
        });
        if queued {
            if segmented {
                self.stats.tx_tso_frames += 1;
                self.stats.tx_tso_segments += u64::from(b.segments);
            }
        } else {
            self.stats.tx_failed += u64::from(b.segments);
            self.stats.tx_tcp -= u64::from(b.segments);
        }
    }

    /// The next hop's MAC for a datagram of `ip_len` octets from `tuple.local_addr` to
    /// `tuple.remote_addr`: refused when the source is not ours, there is no route, it
    /// exceeds the MTU, or the next hop is not resolved yet (an ARP request goes out).
    fn route_tcp(
        &mut self,
        now: Instant,
        port: &mut dyn Port,
        tuple: &FourTuple,
        ip_len: usize,
    ) -> Result<EthernetAddress, SendTcpError> {
        if tuple.local_addr != self.cfg.addr {
            return Err(SendTcpError::BadSource);
        }
        let hop = self
            .next_hop(tuple.remote_addr)
            .ok_or(SendTcpError::NoRoute)?;
        if ip_len > self.cfg.mtu.min(port.mtu()) {
            return Err(SendTcpError::TooLarge);
        }
        self.neighbour(now, port, hop)
            .ok_or(SendTcpError::Unresolved)
    }

    fn try_send_tcp(
        &mut self,
        now: Instant,
        port: &mut dyn Port,
        tuple: &FourTuple,
        repr: &TcpRepr,
        record: Option<TxPayload<'_>>,
        payload_sum: Option<u16>,
    ) -> Result<(), SendTcpError> {
        let tcp_len = repr.buffer_len();
        let ip_len = IPV4_LEN + tcp_len;
        let dst_mac = self.route_tcp(now, port, tuple, ip_len)?;
        let eth = EthernetRepr {
            src_addr: self.cfg.mac,
            dst_addr: dst_mac,
            ethertype: EthernetProtocol::Ipv4,
        };
        let ip = Ipv4Repr {
            src_addr: tuple.local_addr,
            dst_addr: tuple.remote_addr,
            next_header: IpProtocol::Tcp,
            payload_len: tcp_len,
            hop_limit: TTL,
        };
        let (src, dst) = (tuple.local_addr, tuple.remote_addr);
        let offload = port.checksum_offload().tx_ipv4_tcp;
        let zero_copy = record.filter(|p| {
            p.len >= ZERO_COPY_MIN_PAYLOAD
                && p.len % 2 == 0
                && std::ptr::eq(p.bytes(), repr.payload)
                && port.tx_zero_copy_capable()
        });
        // Without offload the checksums are computed from the header fields and from
        // the payload where it lies (or from the sum its records were queued with): the
        // port's buffer is only written. A frame buffer comes back from the receiving
        // core, so reading it (summing it after writing) would wait for its cache lines
        // to come over first. Headers of another shape than the data path's (handshake,
        // SACK) are built in a buffer in this core's cache and copied.
        let header_len = ETH_LEN + IPV4_LEN + repr.header_len();
        let headers = |buf: &mut [u8], payload_sum: u16| {
            eth.emit(&mut EthernetFrame::new_unchecked(&mut *buf));
            let (ip, tcp) = buf[ETH_LEN..header_len].split_at_mut(IPV4_LEN);
            // The port's MTU bounds `tcp_len` far below the 65535 this refuses.
            let fits = wire::tcp::headers::emit_ipv4_header(src, dst, tcp_len, TTL, ip);
            debug_assert!(fits);
            let payload_len = repr.payload.len();
            if !wire::tcp::headers::emit_tcp_header(src, dst, repr, payload_len, payload_sum, tcp) {
                let mut h = [0u8; MAX_HEADERS];
                let h = &mut h[..tcp.len()];
                wire::tcp::emit_segment_header_with_sum(
                    src,
                    dst,
                    repr,
                    repr.payload,
                    Some(payload_sum),
                    false,
                    h,
                );
                tcp.copy_from_slice(h);
            }
        };
        let sent = if let Some(payload) = zero_copy {
            // The IPv4 header checksum: the device's with offload, else ours.
            let caps = ChecksumCapabilities::ignored();
            let sum = (!offload)
                .then(|| payload_sum.unwrap_or_else(|| wire::tcp::checksum::data(repr.payload)));
            port.tx_zero_copy(header_len, payload, offload, &mut |buf: &mut [u8]| {
                if let Some(sum) = sum {
                    headers(&mut buf[..header_len], sum);
                    return;
                }
                eth.emit(&mut EthernetFrame::new_unchecked(&mut *buf));
                ip.emit(
                    &mut Ipv4Packet::new_unchecked(&mut buf[ETH_LEN..ETH_LEN + IPV4_LEN]),
                    &caps,
                );
                wire::tcp::emit_segment_header(
                    src,
                    dst,
                    repr,
                    repr.payload,
                    true,
                    &mut buf[ETH_LEN + IPV4_LEN..],
                );
            })
        } else if offload {
            // The device fills both checksums: IPv4's left zero, TCP's field holds the
            // pseudo-header sum.
            let caps = ChecksumCapabilities::ignored();
            port.tx_ipv4_tcp_offload(ETH_LEN + ip_len, &mut |buf: &mut [u8]| {
                eth.emit(&mut EthernetFrame::new_unchecked(&mut *buf));
                ip.emit(&mut Ipv4Packet::new_unchecked(&mut buf[ETH_LEN..]), &caps);
                wire::tcp::emit_segment_offload(src, dst, repr, &mut buf[ETH_LEN + IPV4_LEN..]);
            })
        } else {
            let sum = payload_sum.unwrap_or_else(|| wire::tcp::checksum::data(repr.payload));
            port.tx(ETH_LEN + ip_len, &mut |buf: &mut [u8]| {
                headers(&mut buf[..header_len], sum);
                buf[header_len..].copy_from_slice(repr.payload);
            })
        };
        if sent {
            Ok(())
        } else {
            Err(SendTcpError::PortFull)
        }
    }

    /// The MAC of neighbour `hop`, sending an ARP request when it is unknown or about to
    /// expire.
    fn neighbour(
        &mut self,
        now: Instant,
        port: &mut dyn Port,
        hop: Ipv4Address,
    ) -> Option<EthernetAddress> {
        let mac = match self.arp.get(&key(hop)).copied() {
            Some(ArpEntry { mac, expires: None }) => mac,
            Some(ArpEntry {
                mac,
                expires: Some(t),
            }) if now < t => {
                if t - now < ARP_REFRESH {
                    self.request(now, port, hop);
                }
                mac
            }
            _ => {
                self.request(now, port, hop);
                return None;
            }
        };
        if !self.held.is_empty() {
            self.send_held(now, port, hop, mac);
        }
        Some(mac)
    }

    /// Sends an ARP request for `addr` unless one went out less than [`ARP_RETRY`] ago.
    fn request(&mut self, now: Instant, port: &mut dyn Port, addr: Ipv4Address) {
        if let Some(&last) = self.requested.get(&key(addr)) {
            if now < last + ARP_RETRY {
                return;
            }
        }
        if self.requested.len() >= ARP_CACHE_MAX {
            self.requested.retain(|_, t| now < *t + ARP_RETRY);
            if self.requested.len() >= ARP_CACHE_MAX {
                return;
            }
        }
        let arp = ArpRepr::EthernetIpv4 {
            operation: ArpOperation::Request,
            source_hardware_addr: self.cfg.mac,
            source_protocol_addr: self.cfg.addr,
            target_hardware_addr: EthernetAddress([0; 6]),
            target_protocol_addr: addr,
        };
        if self.send_arp(port, EthernetAddress::BROADCAST, &arp) {
            self.requested.insert(key(addr), now);
            self.stats.arp_requests_sent += 1;
        }
    }

    fn send_arp(&self, port: &mut dyn Port, dst: EthernetAddress, arp: &ArpRepr) -> bool {
        let eth = self.arp_frame(dst);
        port.tx(ETH_LEN + ARP_LEN, &mut |buf: &mut [u8]| {
            emit_arp(&eth, arp, buf)
        })
    }

    fn arp_frame(&self, dst: EthernetAddress) -> EthernetRepr {
        EthernetRepr {
            src_addr: self.cfg.mac,
            dst_addr: dst,
            ethertype: EthernetProtocol::Arp,
        }
    }

    /// Learns (or refreshes) a dynamic entry; static entries stay.
    fn learn(&mut self, now: Instant, addr: Ipv4Address, mac: EthernetAddress) {
        let expires = Some(now + ARP_LIFETIME);
        if let Some(e) = self.arp.get_mut(&key(addr)) {
            if e.expires.is_some() {
                *e = ArpEntry { mac, expires };
            }
            return;
        }
        if self.arp.len() >= ARP_CACHE_MAX {
            self.arp.retain(|_, e| e.expires.is_none_or(|t| now < t));
            if self.arp.len() >= ARP_CACHE_MAX {
                return;
            }
        }
        self.arp.insert(key(addr), ArpEntry { mac, expires });
    }

    /// Extends the life of the entry of the next hop `src` came through when `mac` is
    /// the one cached.
    fn refresh(&mut self, now: Instant, src: Ipv4Address, mac: EthernetAddress) {
        let hop = if self.is_on_link(src) {
            src
        } else if let Some(g) = self.cfg.gateway {
            g
        } else {
            return;
        };
        if let Some(e) = self.arp.get_mut(&key(hop)) {
            if e.mac == mac {
                if let Some(t) = e.expires.as_mut() {
                    *t = now + ARP_LIFETIME;
                }
            }
        }
    }

    fn rx<'a>(&mut self, now: Instant, frame: &'a [u8]) -> Rx<'a> {
        let Ok(eth) = EthernetFrame::new_checked(frame) else {
            return Rx::Dropped(DropReason::Malformed);
        };
        let dst = eth.dst_addr();
        if dst != self.cfg.mac && !dst.is_broadcast() {
            return Rx::Dropped(DropReason::NotForUs);
        }
        let src_mac = eth.src_addr();
        match eth.ethertype() {
            EthernetProtocol::Arp => self.rx_arp(now, &frame[ETH_LEN..]),
            EthernetProtocol::Ipv4 => self.rx_ipv4(now, src_mac, frame),
            _ => Rx::Dropped(DropReason::UnsupportedEtherType),
        }
    }

    fn rx_arp<'a>(&mut self, now: Instant, bytes: &[u8]) -> Rx<'a> {
        let Ok(packet) = ArpPacket::new_checked(bytes) else {
            return Rx::Dropped(DropReason::Malformed);
        };
        let Ok(ArpRepr::EthernetIpv4 {
            operation,
            source_hardware_addr: sha,
            source_protocol_addr: spa,
            target_protocol_addr: tpa,
            ..
        }) = ArpRepr::parse(&packet)
        else {
            return Rx::Dropped(DropReason::Malformed);
        };
        if !sha.is_unicast() || spa == self.cfg.addr || spa.is_broadcast() || spa.is_multicast() {
            return Rx::Dropped(DropReason::BadSource);
        }
        let known = !spa.is_unspecified() && self.arp.contains_key(&key(spa));
        if known {
            self.learn(now, spa, sha);
            self.requested.remove(&key(spa));
            self.release(now, spa, sha);
        }
        if tpa != self.cfg.addr {
            if known {
                self.stats.rx_arp += 1;
                return Rx::Handled;
            }
            return Rx::Dropped(DropReason::NotForUs);
        }
        self.stats.rx_arp += 1;
        if !spa.is_unspecified() {
            self.learn(now, spa, sha);
            self.requested.remove(&key(spa));
            self.release(now, spa, sha);
        }
        if operation == ArpOperation::Request && self.answer_arp {
            let reply = ArpRepr::EthernetIpv4 {
                operation: ArpOperation::Reply,
                source_hardware_addr: self.cfg.mac,
                source_protocol_addr: self.cfg.addr,
                target_hardware_addr: sha,
                target_protocol_addr: spa,
            };
            let eth = self.arp_frame(sha);
            if !self.queue_reply(ETH_LEN + ARP_LEN, ReplyKind::Arp, |buf| {
                emit_arp(&eth, &reply, buf)
            }) {
                return Rx::Dropped(DropReason::ReplyNotSent);
            }
        }
        Rx::Handled
    }

    fn rx_ipv4<'a>(&mut self, now: Instant, src_mac: EthernetAddress, frame: &'a [u8]) -> Rx<'a> {
        let Ok(ip) = Ipv4Packet::new_checked(&frame[ETH_LEN..]) else {
            return Rx::Dropped(DropReason::Malformed);
        };
        let header_len = usize::from(ip.header_len());
        if ip.version() != 4 || header_len < IPV4_LEN {
            return Rx::Dropped(DropReason::Malformed);
        }
        if !frame
            .get(ETH_LEN..ETH_LEN + header_len)
            .is_some_and(wire::tcp::checksum::ipv4_header_ok)
        {
            return Rx::Dropped(DropReason::BadChecksum);
        }
        if ip.more_frags() || ip.frag_offset() != 0 {
            return Rx::Dropped(DropReason::Fragment);
        }
        let (src, dst) = (ip.src_addr(), ip.dst_addr());
        if dst != self.cfg.addr {
            return Rx::Dropped(DropReason::NotForUs);
        }
        if !unicast(src) || src == self.cfg.addr || !src_mac.is_unicast() {
            return Rx::Dropped(DropReason::BadSource);
        }
        let payload = &frame[ETH_LEN + header_len..ETH_LEN + usize::from(ip.total_len())];
        match ip.next_header() {
            IpProtocol::Tcp => {
                self.refresh(now, src, src_mac);
                self.stats.rx_tcp += 1;
                Rx::Tcp {
                    src,
                    dst,
                    segment: payload,
                }
            }
            IpProtocol::Icmp => self.rx_icmp(now, src, src_mac, payload),
            _ => Rx::Dropped(DropReason::UnsupportedProtocol),
        }
    }

    fn rx_icmp<'a>(
        &mut self,
        now: Instant,
        src: Ipv4Address,
        src_mac: EthernetAddress,
        bytes: &[u8],
    ) -> Rx<'a> {
        let Ok(icmp) = Icmpv4Packet::new_checked(bytes) else {
            return Rx::Dropped(DropReason::Malformed);
        };
        if !icmp.verify_checksum() {
            return Rx::Dropped(DropReason::BadChecksum);
        }
        if icmp.msg_type() != Icmpv4Message::EchoRequest || icmp.msg_code() != 0 {
            return Rx::Dropped(DropReason::UnsupportedIcmp);
        }
        self.refresh(now, src, src_mac);
        self.stats.rx_echo += 1;
        let reply = Icmpv4Repr::EchoReply {
            ident: icmp.echo_ident(),
            seq_no: icmp.echo_seq_no(),
            data: icmp.data(),
        };
        let icmp_len = reply.buffer_len();
        let ip = Ipv4Repr {
            src_addr: self.cfg.addr,
            dst_addr: src,
            next_header: IpProtocol::Icmp,
            payload_len: icmp_len,
            hop_limit: TTL,
        };
        let eth = EthernetRepr {
            src_addr: self.cfg.mac,
            // Back to where the request came from: no ARP needed.
            dst_addr: src_mac,
            ethertype: EthernetProtocol::Ipv4,
        };
        let caps = ChecksumCapabilities::default();
        let len = ETH_LEN + IPV4_LEN + icmp_len;
        let queued = IPV4_LEN + icmp_len <= self.cfg.mtu
            && self.queue_reply(len, ReplyKind::Echo, |buf| {
                eth.emit(&mut EthernetFrame::new_unchecked(&mut *buf));
                ip.emit(&mut Ipv4Packet::new_unchecked(&mut buf[ETH_LEN..]), &caps);
                let mut p = Icmpv4Packet::new_unchecked(&mut buf[ETH_LEN + IPV4_LEN..]);
                reply.emit(&mut p, &caps);
            });
        if !queued {
            return Rx::Dropped(DropReason::ReplyNotSent);
        }
        Rx::Handled
    }
}

fn emit_arp(eth: &EthernetRepr, arp: &ArpRepr, buf: &mut [u8]) {
    eth.emit(&mut EthernetFrame::new_unchecked(&mut *buf));
    arp.emit(&mut ArpPacket::new_unchecked(&mut buf[ETH_LEN..]));
}

#[cfg(test)]
mod tests;
