//! Packet I/O for the poll-mode core: burst receive and transmit of Ethernet frames.
//!
//! A [`Port`] is one queue pair of a network device. The core loop calls
//! [`Port::rx_burst`] to take arriving frames, [`Port::tx_room`] to learn how many frames it
//! may queue, [`Port::tx`] to queue each one (the port hands out the buffer, so a DPDK
//! backend writes straight into an mbuf) and [`Port::flush`] to push them to the wire.
//!
//! Backends: [`mem`] (two ports joined by a simulated wire with seeded fault injection) and,
//! in its own crate, DPDK ethdev queues.
//!
//! # Checksum offload
//!
//! A port whose device computes and checks IPv4 and TCP checksums says so in
//! [`Port::checksum_offload`]. The core then queues TCP frames with
//! [`Port::tx_ipv4_tcp_offload`] (IPv4 header checksum zero, TCP checksum field holding
//! the pseudo-header sum, as DPDK's `RTE_MBUF_F_TX_TCP_CKSUM` wants), and takes received
//! frames with [`Port::rx_burst_checked`], skipping its own TCP checksum check for frames
//! the device found good and dropping those it found bad. Without offload everything is
//! computed and checked in software.
//!
//! # Zero-copy transmit
//!
//! A port whose device takes a frame as several buffers (a header buffer followed by
//! payload buffers, DPDK's `RTE_ETH_TX_OFFLOAD_MULTI_SEGS`) and can read the payload where
//! it lies says so in [`Port::tx_zero_copy_capable`]. The core then queues TCP segments
//! whose payload one send-queue record holds (one FPDU per segment, the usual case) with
//! [`Port::tx_zero_copy`]: it writes only the Ethernet, IPv4 and TCP headers, and the
//! port keeps a reference to the record ([`TxPayload`]) until its device has read the
//! payload. The send queue reuses a record's buffer only when no such reference is left
//! ([`proto::tcp::SharedRecord`]). Other frames, and ports without the capability, go
//! through [`Port::tx`], which copies.
//!
//! # Transmit segmentation offload
//!
//! A port whose device cuts one large TCP frame into segments of a given size (DPDK's
//! `RTE_ETH_TX_OFFLOAD_TCP_TSO`) says how large a payload it takes in
//! [`Port::tso_max_payload`]. The core then gathers consecutive data segments of one
//! connection that the TCP engine planned in one transmit call, all of one size but the
//! last, into one frame ([`Port::tx_tso_begin`], [`Port::tx_tso_append`],
//! [`Port::tx_tso_finish`]) with that size as the segment size. Every segment the device
//! cuts is then exactly one the engine planned: it starts with an FPDU and holds whole
//! FPDUs (RFC 5044 5.3), and MULPDU still follows from the MSS, not from the TSO size.
//! The device fills both checksums of every segment (TSO implies checksum offload).

pub mod faults;
pub mod mem;
pub mod tso;

use crate::counters::counters;
pub use proto::tcp::TxPayload;
use smoltcp::wire::EthernetAddress;

/// Smallest payload [`Port::tx_zero_copy`] is used for: below it, copying the octets costs
/// less than a second buffer per frame.
pub const ZERO_COPY_MIN_PAYLOAD: usize = 256;

counters! {
    /// Counters of one port.
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
    pub struct PortStats {
        /// Frames handed to the core by [`Port::rx_burst`].
        pub rx_frames: u64,
        /// Octets of those frames.
        pub rx_octets: u64,
        /// Frames queued by [`Port::tx`].
        pub tx_frames: u64,
        /// Octets of those frames.
        pub tx_octets: u64,
        /// Frames the port dropped on receive (ring overflow, oversize).
        pub rx_dropped: u64,
        /// Frames the port could not transmit.
        pub tx_dropped: u64,
        /// Frames queued with [`Port::tx_ipv4_tcp_offload`] (checksums left to the device).
        pub tx_checksum_offloaded: u64,
        /// Received frames whose checksums the device found right ([`RxChecksum::Good`]).
        pub rx_checksum_good: u64,
        /// Received frames whose checksums the device found wrong ([`RxChecksum::Bad`]).
        pub rx_checksum_bad: u64,
        /// Frames queued with [`Port::tx_zero_copy`]: their payload was not copied by the
        /// port (also counted in `tx_frames`).
        pub tx_zero_copy: u64,
        /// Large frames queued with [`Port::tx_tso_finish`] for the device to segment (each
        /// also counted once in `tx_frames`).
        pub tx_tso_frames: u64,
        /// TCP segments those frames were cut into.
        pub tx_tso_segments: u64,
    }
}

/// The checksum work a port's device does (agreed when the port was opened).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChecksumOffload {
    /// The device fills the IPv4 header checksum and the TCP checksum of frames queued with
    /// [`Port::tx_ipv4_tcp_offload`].
    pub tx_ipv4_tcp: bool,
    /// The device checks the IPv4 and TCP checksums of received frames and reports its
    /// verdict through [`Port::rx_burst_checked`].
    pub rx_ipv4_tcp: bool,
}

/// The device's verdict on the IPv4 and TCP checksums of one received frame.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum RxChecksum {
    /// Not checked (no offload, not IPv4/TCP, or the device could not tell): check in
    /// software.
    #[default]
    Unknown,
    /// Both checksums are right.
    Good,
    /// One of them is wrong: drop the frame.
    Bad,
}

/// One receive/transmit queue pair of a network device.
pub trait Port: Send {
    /// The port's MAC address.
    fn mac(&self) -> EthernetAddress;
    /// The IP MTU (Ethernet payload octets) the port carries.
    fn mtu(&self) -> usize;
    /// Takes up to `max` arriving frames, calling `f` with each whole Ethernet frame
    /// (header included, FCS excluded). Returns how many were taken.
    fn rx_burst(&mut self, max: usize, f: &mut dyn FnMut(&[u8])) -> usize;
    /// How many frames [`Port::tx`] accepts now.
    fn tx_room(&self) -> usize;
    /// Queues one frame of `len` octets (at most `mtu() + 14`): `fill` writes it into the
    /// port's buffer. Returns false (and does not call `fill`) when there is no room or
    /// `len` is too large.
    fn tx(&mut self, len: usize, fill: &mut dyn FnMut(&mut [u8])) -> bool;
    /// Pushes queued frames to the wire.
    fn flush(&mut self);
    /// Counters.
    fn stats(&self) -> PortStats;

    /// Whether the link is up, if the port knows (a DPDK device); `None` otherwise (the
    /// default).
    fn link_up(&self) -> Option<bool> {
        None
    }

    /// The checksum offloads in effect. Default: none.
    fn checksum_offload(&self) -> ChecksumOffload {
        ChecksumOffload::default()
    }

    /// True when the port knows, from a cheap look, that no received frame is waiting, so
    /// that an idle poll may skip the receive burst; false (the default) when it cannot
    /// tell without the burst itself.
    fn rx_idle(&self) -> bool {
        false
    }

    /// [`Port::rx_burst`] with the device's checksum verdict on each frame. Default:
    /// every frame [`RxChecksum::Unknown`].
    fn rx_burst_checked(&mut self, max: usize, f: &mut dyn FnMut(&[u8], RxChecksum)) -> usize {
        self.rx_burst(max, &mut |frame| f(frame, RxChecksum::Unknown))
    }

    /// [`Port::tx`] for an Ethernet/IPv4/TCP frame (20-octet IPv4 header) whose IPv4 header
    /// checksum `fill` leaves zero and whose TCP checksum field `fill` sets to the
    /// pseudo-header sum: the device completes both. Only for ports whose
    /// [`Port::checksum_offload`] has `tx_ipv4_tcp`; the default refuses (returns false).
    fn tx_ipv4_tcp_offload(&mut self, len: usize, fill: &mut dyn FnMut(&mut [u8])) -> bool {
        let _ = (len, fill);
        false
    }

    /// The largest TCP payload one frame queued with [`Port::tx_tso_finish`] may carry;
    /// 0 when the port does not segment (the default).
    fn tso_max_payload(&self) -> usize {
        0
    }

    /// Starts a frame for transmit segmentation offload: its headers (`header_len`
    /// octets: Ethernet, a 20-octet IPv4 header and the TCP header) are written at
    /// [`Port::tx_tso_finish`], its payload by [`Port::tx_tso_append`]. Returns false
    /// (counted in `tx_dropped`) when the port does not segment or has no room. A frame
    /// already started and not finished is abandoned.
    fn tx_tso_begin(&mut self, header_len: usize) -> bool {
        let _ = header_len;
        false
    }

    /// Copies `payload` to the end of the started frame's payload. Returns false when no
    /// frame is started or the payload would exceed [`Port::tso_max_payload`] (the frame
    /// is then abandoned).
    fn tx_tso_append(&mut self, payload: &[u8]) -> bool {
        let _ = payload;
        false
    }

    /// Queues the started frame: `fill` writes its headers (the IPv4 total length covers
    /// the whole payload, the IPv4 checksum is zero). With `Some(mss)` the device cuts the
    /// payload into segments of `mss` octets (the last may be shorter), each with the
    /// headers copied, the sequence number advanced, FIN and PSH only on the last, and
    /// both checksums filled; the TCP checksum field then holds the pseudo-header sum
    /// without the length, as DPDK's `RTE_MBUF_F_TX_TCP_SEG` wants. With `None` the frame
    /// goes as it is (at most the MTU), the checksums completed as for
    /// [`Port::tx_ipv4_tcp_offload`]. Returns false when no frame is started or the port
    /// could not queue it.
    fn tx_tso_finish(&mut self, mss: Option<u16>, fill: &mut dyn FnMut(&mut [u8])) -> bool {
        let _ = (mss, fill);
        false
    }

    /// Whether [`Port::tx_zero_copy`] is available. Default: no.
    fn tx_zero_copy_capable(&self) -> bool {
        false
    }

    /// Queues one frame made of `header_len` octets that `fill` writes (the Ethernet,
    /// IPv4 and TCP headers) followed by `payload`, which the port references instead of
    /// copying and keeps alive until its device has read it. With `offload` the checksums
    /// are left to the device as in [`Port::tx_ipv4_tcp_offload`] (only for ports whose
    /// [`Port::checksum_offload`] has `tx_ipv4_tcp`); without it `fill` writes them,
    /// payload included.
    ///
    /// The payload must have an even length and `header_len` must be even (a device may
    /// sum the buffers' 16-bit words separately, as net_tap's checksum offload does);
    /// [`TxPayload::fits`] checks the rules. Returns false (and does not call `fill`) when
    /// the port lacks the capability, has no room, or the frame breaks those rules. The
    /// default refuses.
    fn tx_zero_copy(
        &mut self,
        header_len: usize,
        payload: TxPayload<'_>,
        offload: bool,
        fill: &mut dyn FnMut(&mut [u8]),
    ) -> bool {
        let _ = (header_len, payload, offload, fill);
        false
    }
}
