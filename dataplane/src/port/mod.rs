//! Packet I/O for the poll-mode core: burst receive and transmit of Ethernet frames.
//!
//! A [`Port`] is one queue pair of a network device. The core loop calls
//! [`Port::rx_burst`] to take arriving frames, [`Port::tx_room`] to learn how many frames it
//! may queue, [`Port::tx`] to queue each one (the port hands out the buffer, so a DPDK
//! backend writes straight into an mbuf) and [`Port::flush`] to push them to the wire.
//!
//! Backends: [`mem`] (two ports joined by a simulated wire with seeded fault injection) and,
//! in its own crate, DPDK ethdev queues.

pub mod mem;

use smoltcp::wire::EthernetAddress;

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
}
