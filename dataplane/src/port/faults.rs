//! Fault injection: loss, duplication, reordering, TCP re-segmentation and corruption of
//! Ethernet frames, decided by a seeded PRNG (the same frames meet the same faults on every
//! run).
//!
//! [`FaultInjector`] is the sans-IO part: one frame in, the frames that go on out (none
//! when it is lost, several when it is re-segmented or duplicated), each marked when it is
//! to be held back and overtaken. Two users: the simulated wire ([`super::mem`]) applies it
//! as frames are queued, and [`Faulty`] wraps any [`Port`] (a DPDK port included) to apply
//! it to what that port transmits.

use crate::counters::counters;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use smoltcp::wire::{EthernetAddress, IpAddress, Ipv4Address, Ipv4Packet, TcpPacket};

use super::mem::ETHERNET_HEADER_LEN;
use super::{ChecksumOffload, Port, PortStats, RxChecksum};

/// Default [`FaultConfig::reorder_delay`].
pub const DEFAULT_REORDER_DELAY: Duration = Duration::from_millis(1);

/// What happens to the frames of one direction. Probabilities are per frame, in
/// `[0, 1]`, and independent of each other. `Default` injects nothing.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FaultConfig {
    /// Probability that a frame is lost.
    pub loss: f64,
    /// Probability that a frame is delivered twice.
    pub duplicate: f64,
    /// Probability that a frame is held back by [`FaultConfig::reorder_delay`], so that
    /// later frames overtake it.
    pub reorder: f64,
    /// Extra delay of a reordered frame.
    pub reorder_delay: Duration,
    /// Probability that a TCP/IPv4 frame with at least two payload octets is split into 2
    /// or 3 valid TCP segments at random payload offsets (headers, options and checksums
    /// rebuilt, sequence numbers adjusted, FIN and PSH only on the last piece). SYN, RST
    /// and URG segments and IPv4 fragments are left alone.
    pub resegment: f64,
    /// Probability that a random bit of the IPv4 datagram (or of the frame past the
    /// Ethernet header, if it is not IPv4) is flipped, checksums left as they are, so the
    /// IPv4 or TCP checksum catches it.
    pub corrupt: f64,
    /// Probability that a random bit of the TCP payload is flipped and the TCP checksum
    /// recomputed, so only an end-to-end check (MPA's CRC) can catch it. Frames that are
    /// not TCP/IPv4 with payload are left alone.
    pub corrupt_undetected: f64,
    /// Seed of the PRNG.
    pub seed: u64,
}

impl Default for FaultConfig {
    fn default() -> Self {
        FaultConfig {
            loss: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            reorder_delay: DEFAULT_REORDER_DELAY,
            resegment: 0.0,
            corrupt: 0.0,
            corrupt_undetected: 0.0,
            seed: 0,
        }
    }
}

impl FaultConfig {
    /// Each probability with its name.
    pub fn probabilities(&self) -> [(&'static str, f64); 6] {
        [
            ("loss", self.loss),
            ("duplicate", self.duplicate),
            ("reorder", self.reorder),
            ("resegment", self.resegment),
            ("corrupt", self.corrupt),
            ("corrupt_undetected", self.corrupt_undetected),
        ]
    }

    /// True when some fault has a chance.
    pub fn any(&self) -> bool {
        self.probabilities().iter().any(|(_, p)| *p > 0.0)
    }

    /// The probabilities clamped to `[0, 1]` (NaN as 0).
    pub fn sanitized(&self) -> FaultConfig {
        let p = |v: f64| if v.is_nan() { 0.0 } else { v.clamp(0.0, 1.0) };
        FaultConfig {
            loss: p(self.loss),
            duplicate: p(self.duplicate),
            reorder: p(self.reorder),
            resegment: p(self.resegment),
            corrupt: p(self.corrupt),
            corrupt_undetected: p(self.corrupt_undetected),
            ..*self
        }
    }
}

counters! {
    /// What happened to one frame, or to all of them ([`Faulty::fault_stats`]).
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
    pub struct FaultStats {
        /// Frames lost.
        pub lost: u64,
        /// Extra copies made (and accepted by the sink).
        pub duplicated: u64,
        /// Frames held back to be overtaken.
        pub reordered: u64,
        /// Frames split into several TCP segments.
        pub resegmented: u64,
        /// Frames with a bit flipped and checksums left alone.
        pub corrupted: u64,
        /// Frames with a payload bit flipped and the TCP checksum recomputed.
        pub corrupted_undetected: u64,
    }
}

/// Where the frames a [`FaultInjector`] lets through go.
pub trait FaultSink {
    /// An empty buffer for a new frame (a piece or a copy).
    fn alloc(&mut self) -> Vec<u8>;
    /// A buffer no longer needed (a lost frame, a re-segmented original).
    fn recycle(&mut self, buf: Vec<u8>);
    /// A frame that goes on; `reordered` when it is to be held back. `first` is the frame
    /// itself (or its first piece), which always has room; an extra piece or copy may be
    /// refused (false).
    fn emit(&mut self, frame: Vec<u8>, reordered: bool, first: bool) -> bool;
}

/// Applies a [`FaultConfig`] to frames (see the module docs).
#[derive(Debug, Clone)]
pub struct FaultInjector {
    cfg: FaultConfig,
    rng: Rng,
    pieces: Vec<Vec<u8>>,
}

impl FaultInjector {
    /// An injector for `cfg` (sanitized), its PRNG seeded from `cfg.seed` and `stream`
    /// (distinct streams for equal seeds, e.g. one per direction).
    pub fn new(cfg: FaultConfig, stream: u64) -> FaultInjector {
        FaultInjector {
            rng: Rng(cfg.seed ^ (0xa076_1d64_78bd_642f_u64.wrapping_mul(stream + 1))),
            cfg: cfg.sanitized(),
            pieces: Vec::new(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &FaultConfig {
        &self.cfg
    }

    /// Applies the faults to `frame`, handing what goes on to `sink`. Returns what
    /// happened.
    pub fn apply(&mut self, frame: Vec<u8>, sink: &mut dyn FaultSink) -> FaultStats {
        let mut ev = FaultStats::default();
        if self.rng.chance(self.cfg.loss) {
            ev.lost += 1;
            sink.recycle(frame);
            return ev;
        }
        let mut pieces = std::mem::take(&mut self.pieces);
        pieces.clear();
        if self.rng.chance(self.cfg.resegment) {
            if resegment(&frame, &mut self.rng, &mut pieces, || sink.alloc()) {
                ev.resegmented += 1;
                sink.recycle(frame);
            } else {
                pieces.push(frame);
            }
        } else {
            pieces.push(frame);
        }
        for (i, mut data) in pieces.drain(..).enumerate() {
            if self.rng.chance(self.cfg.corrupt) && corrupt_detected(&mut data, &mut self.rng) {
                ev.corrupted += 1;
            }
            if self.rng.chance(self.cfg.corrupt_undetected)
                && corrupt_undetected(&mut data, &mut self.rng)
            {
                ev.corrupted_undetected += 1;
            }
            let reordered = self.rng.chance(self.cfg.reorder);
            ev.reordered += u64::from(reordered);
            let copy = if self.rng.chance(self.cfg.duplicate) {
                let mut c = sink.alloc();
                c.clear();
                c.extend_from_slice(&data);
                Some(c)
            } else {
                None
            };
            sink.emit(data, reordered, i == 0);
            if let Some(c) = copy {
                if sink.emit(c, reordered, false) {
                    ev.duplicated += 1;
                }
            }
        }
        self.pieces = pieces;
        ev
    }
}

/// Most frames a [`Faulty`] port holds back for reordering; beyond, they go at once.
pub const MAX_HELD: usize = 4096;

/// A [`Port`] whose transmitted frames meet a [`FaultConfig`]'s faults before the wrapped
/// port sends them: loss, corruption or reordering on a DPDK port, as on the simulated
/// wire. Received frames pass untouched.
///
/// The wrapper needs whole frames: it turns transmit checksum offload and zero-copy
/// transmit off (the core then computes checksums and copies payloads), so corruption is
/// done to finished frames and caught where a real wire's would be. Reordered frames wait
/// in the wrapper (at most [`MAX_HELD`]) and go at the first `flush` or `rx_burst` after
/// their delay.
pub struct Faulty<P> {
    inner: P,
    injector: FaultInjector,
    held: BinaryHeap<Reverse<(Instant, u64, Vec<u8>)>>,
    held_seq: u64,
    stats: FaultStats,
    refused: u64,
}

impl<P: Port> Faulty<P> {
    /// `inner` with `cfg`'s faults on what it transmits.
    pub fn new(inner: P, cfg: FaultConfig) -> Faulty<P> {
        Faulty {
            inner,
            injector: FaultInjector::new(cfg, 0),
            held: BinaryHeap::new(),
            held_seq: 0,
            stats: FaultStats::default(),
            refused: 0,
        }
    }

    /// What the faults did so far.
    pub fn fault_stats(&self) -> FaultStats {
        self.stats
    }

    /// The wrapped port.
    pub fn inner(&self) -> &P {
        &self.inner
    }

    /// Sends the held frames that are due.
    fn release(&mut self, all: bool) {
        let now = Instant::now();
        while let Some(Reverse((due, _, _))) = self.held.peek() {
            if !all && *due > now {
                break;
            }
            let Some(Reverse((_, _, f))) = self.held.pop() else {
                break;
            };
            if !self.inner.tx(f.len(), &mut |b| b.copy_from_slice(&f)) {
                self.refused += 1;
            }
        }
    }
}

/// The sink of a [`Faulty`] port: frames go to the wrapped port at once or are held.
struct Through<'a, P> {
    inner: &'a mut P,
    held: &'a mut BinaryHeap<Reverse<(Instant, u64, Vec<u8>)>>,
    held_seq: &'a mut u64,
    delay: Duration,
    refused: &'a mut u64,
}

impl<P: Port> FaultSink for Through<'_, P> {
    fn alloc(&mut self) -> Vec<u8> {
        Vec::new()
    }
    fn recycle(&mut self, _buf: Vec<u8>) {}
    fn emit(&mut self, frame: Vec<u8>, reordered: bool, first: bool) -> bool {
        if reordered && self.held.len() < MAX_HELD {
            *self.held_seq += 1;
            self.held.push(Reverse((
                Instant::now() + self.delay,
                *self.held_seq,
                frame,
            )));
            return true;
        }
        let sent = (first || self.inner.tx_room() > 0)
            && self
                .inner
                .tx(frame.len(), &mut |b| b.copy_from_slice(&frame));
        if !sent {
            *self.refused += 1;
        }
        sent
    }
}

impl<P: Port> Port for Faulty<P> {
    fn mac(&self) -> EthernetAddress {
        self.inner.mac()
    }
    fn mtu(&self) -> usize {
        self.inner.mtu()
    }
    fn rx_burst(&mut self, max: usize, f: &mut dyn FnMut(&[u8])) -> usize {
        self.release(false);
        self.inner.rx_burst(max, f)
    }
    fn rx_burst_checked(&mut self, max: usize, f: &mut dyn FnMut(&[u8], RxChecksum)) -> usize {
        self.release(false);
        self.inner.rx_burst_checked(max, f)
    }
    fn tx_room(&self) -> usize {
        self.inner.tx_room()
    }
    fn tx(&mut self, len: usize, fill: &mut dyn FnMut(&mut [u8])) -> bool {
        if self.inner.tx_room() == 0 || len > self.inner.mtu() + ETHERNET_HEADER_LEN {
            return false;
        }
        let mut frame = vec![0u8; len];
        fill(&mut frame);
        let mut sink = Through {
            inner: &mut self.inner,
            held: &mut self.held,
            held_seq: &mut self.held_seq,
            delay: self.injector.cfg.reorder_delay,
            refused: &mut self.refused,
        };
        let ev = self.injector.apply(frame, &mut sink);
        self.stats.add(&ev);
        true
    }
    fn flush(&mut self) {
        self.release(false);
        self.inner.flush();
    }
    fn stats(&self) -> PortStats {
        let mut s = self.inner.stats();
        s.tx_dropped += self.refused;
        s
    }
    fn link_up(&self) -> Option<bool> {
        self.inner.link_up()
    }
    fn checksum_offload(&self) -> ChecksumOffload {
        ChecksumOffload {
            tx_ipv4_tcp: false,
            rx_ipv4_tcp: self.inner.checksum_offload().rx_ipv4_tcp,
        }
    }
}

/// SplitMix64: small, fast, seeded; good enough for fault decisions.
#[derive(Debug, Clone)]
pub(super) struct Rng(u64);

impl Rng {
    pub(super) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// True with probability `p` (no draw when `p` is 0).
    pub(super) fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && ((self.next() >> 11) as f64) * (1.0 / (1u64 << 53) as f64) < p
    }

    /// Uniform in `0..n` (`n > 0`).
    pub(super) fn below(&mut self, n: usize) -> usize {
        ((self.next() as u128 * n as u128) >> 64) as usize
    }
}

/// Where the pieces of a TCP/IPv4 frame are.
#[derive(Debug, Clone, Copy)]
pub(super) struct TcpLayout {
    /// IPv4 header length.
    pub(super) ip_len: usize,
    /// Offset of the TCP header in the frame.
    pub(super) tcp: usize,
    /// Offset of the payload in the frame.
    pub(super) payload: usize,
    /// End of the IPv4 datagram in the frame.
    pub(super) end: usize,
}

/// Offset and length of the IPv4 datagram in an Ethernet frame, when it looks like one.
pub(super) fn ipv4_extent(frame: &[u8]) -> Option<(usize, usize)> {
    const ETHERTYPE_IPV4: [u8; 2] = [0x08, 0x00];
    if frame.len() < ETHERNET_HEADER_LEN + 20 || frame[12..14] != ETHERTYPE_IPV4 {
        return None;
    }
    let ip = Ipv4Packet::new_checked(&frame[ETHERNET_HEADER_LEN..]).ok()?;
    if ip.version() != 4 {
        return None;
    }
    Some((ETHERNET_HEADER_LEN, ip.total_len() as usize))
}

pub(super) fn tcp_layout(frame: &[u8]) -> Option<TcpLayout> {
    let (start, total) = ipv4_extent(frame)?;
    let ip = Ipv4Packet::new_checked(&frame[start..]).ok()?;
    if ip.more_frags()
        || ip.frag_offset() != 0
        || ip.next_header() != smoltcp::wire::IpProtocol::Tcp
    {
        return None;
    }
    let ip_len = ip.header_len() as usize;
    let tcp = start + ip_len;
    let end = start + total;
    let seg = TcpPacket::new_checked(&frame[tcp..end]).ok()?;
    let payload = tcp + seg.header_len() as usize;
    Some(TcpLayout {
        ip_len,
        tcp,
        payload,
        end,
    })
}

fn ip_addrs(frame: &[u8]) -> (IpAddress, IpAddress) {
    let ip = Ipv4Packet::new_unchecked(&frame[ETHERNET_HEADER_LEN..]);
    let src: Ipv4Address = ip.src_addr();
    let dst: Ipv4Address = ip.dst_addr();
    (IpAddress::Ipv4(src), IpAddress::Ipv4(dst))
}

/// Splits a TCP/IPv4 frame with at least two payload octets into 2 or 3 valid segments,
/// appended to `out` (buffers from `alloc`). False (and nothing appended) when the frame
/// is not such a frame.
fn resegment(
    frame: &[u8],
    rng: &mut Rng,
    out: &mut Vec<Vec<u8>>,
    mut alloc: impl FnMut() -> Vec<u8>,
) -> bool {
    let Some(l) = tcp_layout(frame) else {
        return false;
    };
    let len = l.end - l.payload;
    {
        let seg = TcpPacket::new_unchecked(&frame[l.tcp..l.end]);
        if len < 2 || seg.syn() || seg.rst() || seg.urg() {
            return false;
        }
    }
    let mut cuts = [0usize, 0, len, len];
    let n = if len >= 3 && rng.below(2) == 1 {
        cuts[1] = 1 + rng.below(len - 2);
        cuts[2] = cuts[1] + 1 + rng.below(len - 1 - cuts[1]);
        3
    } else {
        cuts[1] = 1 + rng.below(len - 1);
        2
    };
    let (src, dst) = ip_addrs(frame);
    for i in 0..n {
        let (from, to) = (cuts[i], cuts[i + 1]);
        let last = i + 1 == n;
        let mut buf = alloc();
        buf.clear();
        buf.extend_from_slice(&frame[..l.payload]);
        buf.extend_from_slice(&frame[l.payload + from..l.payload + to]);
        {
            let mut ip = Ipv4Packet::new_unchecked(&mut buf[ETHERNET_HEADER_LEN..]);
            ip.set_total_len((l.ip_len + (l.payload - l.tcp) + (to - from)) as u16);
            ip.fill_checksum();
        }
        let mut seg = TcpPacket::new_unchecked(&mut buf[l.tcp..]);
        let seq = seg.seq_number();
        seg.set_seq_number(seq + from);
        if !last {
            seg.set_fin(false);
            seg.set_psh(false);
        }
        seg.fill_checksum(&src, &dst);
        out.push(buf);
    }
    true
}

/// Flips one random bit of the IPv4 datagram (or of whatever follows the Ethernet
/// header). False when there is nothing to flip.
fn corrupt_detected(frame: &mut [u8], rng: &mut Rng) -> bool {
    let (start, end) = match ipv4_extent(frame) {
        Some((s, total)) => (s, s + total),
        None => (ETHERNET_HEADER_LEN.min(frame.len()), frame.len()),
    };
    if start >= end {
        return false;
    }
    let bit = rng.below((end - start) * 8);
    frame[start + bit / 8] ^= 1 << (bit % 8);
    true
}

/// Flips one random bit of the TCP payload and recomputes the TCP checksum. False when
/// the frame is not TCP/IPv4 with payload.
fn corrupt_undetected(frame: &mut [u8], rng: &mut Rng) -> bool {
    let Some(l) = tcp_layout(frame) else {
        return false;
    };
    if l.end == l.payload {
        return false;
    }
    let bit = rng.below((l.end - l.payload) * 8);
    frame[l.payload + bit / 8] ^= 1 << (bit % 8);
    let (src, dst) = ip_addrs(frame);
    TcpPacket::new_unchecked(&mut frame[l.tcp..l.end]).fill_checksum(&src, &dst);
    true
}

#[cfg(test)]
mod tests;
