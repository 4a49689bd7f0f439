//! [`PortConfig`]: what [`DpdkPort::open`](crate::DpdkPort::open) needs to know.

use std::time::Duration;

use crate::error::DpdkError;

/// Default [`PortConfig::mtu`].
pub const DEFAULT_MTU: usize = 1500;
/// Default [`PortConfig::rx_ring`] and [`PortConfig::tx_ring`].
pub const DEFAULT_RING: u16 = 1024;
/// Smallest MTU accepted (the IPv4 minimum, RFC 791).
pub const MIN_MTU: usize = 68;
/// Largest MTU accepted (the usual largest jumbo MTU of NICs).
pub const MAX_MTU: usize = 9216;
/// Frames taken per `rte_eth_rx_burst` call.
pub const RX_BURST: usize = 32;
/// Most frames [`Port::tx`](dataplane::port::Port::tx) queues before a flush (fewer when
/// the transmit ring is smaller).
pub const TX_PENDING: usize = 256;
/// Default [`PortConfig::link_timeout`].
pub const DEFAULT_LINK_TIMEOUT: Duration = Duration::from_secs(10);

/// Largest per-lcore mempool cache used.
pub(crate) const MEMPOOL_CACHE: u32 = 256;

/// How to open one DPDK Ethernet device (its queue pairs, one per core).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortConfig {
    /// DPDK device name, looked up with `rte_eth_dev_get_port_by_name`: a virtual
    /// device from the EAL `--vdev` arguments (`"net_af_packet0"`, `"net_tap0"`) or a PCI
    /// address (`"0000:01:00.0"`) allowed with `-a`.
    pub device: String,
    /// IP MTU (Ethernet payload octets), [`MIN_MTU`]..=[`MAX_MTU`]; frames are at most
    /// `mtu + 14` octets.
    pub mtu: usize,
    /// Receive descriptors (DPDK may round to the device's limits).
    pub rx_ring: u16,
    /// Transmit descriptors (DPDK may round to the device's limits).
    pub tx_ring: u16,
    /// mbufs in the port's mempool; at least [`PortConfig::min_mempool_size`].
    pub mempool_size: u32,
    /// MAC override: programmed as the device's address, or, when the device cannot
    /// change it, used as the port's address with promiscuous mode on. Must be unicast
    /// and not all zeros.
    pub mac: Option<[u8; 6]>,
    /// Keep the device's own address and answer as another station: the port's MAC is
    /// `mac` (or, without it, the device's with the locally administered bit set and the
    /// last octet's low bit flipped), received with promiscuous mode on. For `net_tap`,
    /// whose device address is the kernel interface's: a Linux bridge treats its ports'
    /// addresses as its own and would not forward frames for them to the tap.
    pub software_mac: bool,
    /// Use the device's IPv4 header and TCP checksum offloads, in each direction where it
    /// offers both (`RTE_ETH_TX_OFFLOAD_IPV4_CKSUM | TCP_CKSUM`, and the same for
    /// receive); software checksums otherwise. Default true.
    pub checksum_offload: bool,
    /// How long [`DpdkPort::open`](crate::DpdkPort::open) waits for the link to come up
    /// after starting the device. Default 10 s.
    pub link_timeout: Duration,
    /// Wait for the link to be up before returning from `open`. Default true; off for a
    /// memif server, whose link comes up only when a client connects.
    pub wait_for_link: bool,
    /// Transmit segment payloads from the TCP send queue's records without copying them
    /// (an mbuf attached to the record as an external buffer, chained after the header
    /// mbuf) when the device takes multi-segment frames and is one of
    /// [`CPU_COPY_DRIVERS`](crate::CPU_COPY_DRIVERS). Default false (see
    /// `appconfig::Port::tx_zero_copy` for why).
    pub tx_zero_copy: bool,
    /// Transmit segmentation offload: the core hands the device frames of up to 64 KiB
    /// of consecutive segments (chained mbufs, `RTE_MBUF_F_TX_TCP_SEG`) for it to cut into
    /// the segments TCP planned ([`dataplane::port`]'s module docs). Needs a device with
    /// `RTE_ETH_TX_OFFLOAD_TCP_TSO`, `MULTI_SEGS` and transmit checksum offload (and
    /// `checksum_offload`): [`DpdkPort::open`](crate::DpdkPort::open) refuses it
    /// otherwise. Default false.
    pub tso: bool,
    /// Receive and transmit queue pairs, one per core, 1..=[`MAX_QUEUES`] (see
    /// [`DpdkPort::open_queues`](crate::DpdkPort::open_queues)). Default 1.
    pub queues: u16,
}

/// Most queue pairs [`PortConfig::queues`] takes.
pub const MAX_QUEUES: u16 = 64;

impl PortConfig {
    /// A configuration for `device` with the defaults: MTU 1500, 1024-descriptor rings,
    /// [`PortConfig::default_mempool_size`], the device's own MAC.
    pub fn new(device: impl Into<String>) -> Self {
        PortConfig {
            device: device.into(),
            mtu: DEFAULT_MTU,
            rx_ring: DEFAULT_RING,
            tx_ring: DEFAULT_RING,
            mempool_size: Self::default_mempool_size(DEFAULT_RING, DEFAULT_RING),
            mac: None,
            software_mac: false,
            checksum_offload: true,
            link_timeout: DEFAULT_LINK_TIMEOUT,
            wait_for_link: true,
            tx_zero_copy: false,
            tso: false,
            queues: 1,
        }
    }

    /// The smallest mempool that keeps both rings and the pending transmit frames
    /// supplied: `rx_ring + tx_ring + TX_PENDING + RX_BURST`.
    pub fn min_mempool_size(rx_ring: u16, tx_ring: u16) -> u32 {
        u32::from(rx_ring) + u32::from(tx_ring) + (TX_PENDING + RX_BURST) as u32
    }

    /// The default mempool size: [`PortConfig::min_mempool_size`] plus room for two
    /// mempool caches, rounded up to `2^k - 1` (the best size for DPDK's ring-backed
    /// pools), at least 2047.
    pub fn default_mempool_size(rx_ring: u16, tx_ring: u16) -> u32 {
        let want = Self::min_mempool_size(rx_ring, tx_ring) + 2 * MEMPOOL_CACHE;
        (want + 1).next_power_of_two().max(2048) - 1
    }

    /// Largest frame (Ethernet header included, FCS excluded): `mtu + 14`.
    pub fn max_frame(&self) -> usize {
        self.mtu + dataplane::port::mem::ETHERNET_HEADER_LEN
    }

    /// Checks every field (see their docs).
    pub fn validate(&self) -> Result<(), DpdkError> {
        let bad = |m: String| Err(DpdkError::invalid("PortConfig::validate", &self.device, m));
        if self.device.is_empty() || self.device.contains('\0') {
            return bad("device name is empty or contains a NUL byte".into());
        }
        if !(MIN_MTU..=MAX_MTU).contains(&self.mtu) {
            return bad(format!("MTU {} is not in {MIN_MTU}..={MAX_MTU}", self.mtu));
        }
        if self.rx_ring == 0 || self.tx_ring == 0 {
            return bad(format!(
                "ring sizes must be at least 1 (rx {}, tx {})",
                self.rx_ring, self.tx_ring
            ));
        }
        let min = Self::min_mempool_size(self.rx_ring, self.tx_ring);
        if self.mempool_size < min {
            return bad(format!(
                "mempool of {} mbufs is smaller than {min} (rx ring + tx ring + {} pending + {RX_BURST} burst)",
                self.mempool_size, TX_PENDING
            ));
        }
        if self.queues == 0 || self.queues > MAX_QUEUES {
            return bad(format!(
                "{} queue pairs is not in 1..={MAX_QUEUES}",
                self.queues
            ));
        }
        if let Some(mac) = self.mac {
            if mac[0] & 1 == 1 || mac == [0; 6] {
                return bad(format!(
                    "MAC {} is not a unicast address",
                    crate::port::format_mac(mac)
                ));
            }
        }
        Ok(())
    }

    /// The mbuf data room: headroom plus room for a whole frame with FCS and one VLAN
    /// tag in one segment, at least DPDK's default (2048 octets after the headroom).
    pub(crate) fn data_room(&self) -> usize {
        let frame = self.max_frame() + 4 + 4;
        let room = frame.max(dpdk_sys::RTE_MBUF_DEFAULT_DATAROOM as usize);
        // Whole cache lines.
        dpdk_sys::RTE_PKTMBUF_HEADROOM as usize + room.div_ceil(64) * 64
    }
}
