//! The DPDK backend of [`dataplane::port::Port`]: [`Eal`] (the process's EAL) and
//! [`DpdkPort`] (queue 0 of one DPDK Ethernet device).
//!
//! ```no_run
//! use dataplane::port::Port;
//! use dpdk_port::{DpdkPort, Eal, PortConfig};
//!
//! let argv: Vec<String> = ["iwarp", "--no-huge", "-m", "256", "--no-pci", "-l", "0",
//!     "--no-shconf", "--vdev=net_af_packet0,iface=eth1"]
//!     .iter().map(|s| s.to_string()).collect();
//! let eal = Eal::init(&argv)?;
//! let mut port = DpdkPort::open(&eal, &PortConfig::new("net_af_packet0"))?;
//! port.rx_burst(32, &mut |frame| println!("{} octets", frame.len()));
//! # Ok::<(), dpdk_port::DpdkError>(())
//! ```
//!
//! # Opening a port
//!
//! [`DpdkPort::open`] finds the device by name (`rte_eth_dev_get_port_by_name`), creates
//! a pktmbuf mempool of [`PortConfig::mempool_size`] mbufs for it, configures one receive
//! and one transmit queue with the checksum offloads (see mbuf handling) and the MTU
//! (`rxmode.mtu`, then `rte_eth_dev_set_mtu`; `ENOTSUP` from the latter is accepted),
//! programs a MAC override with `rte_eth_dev_default_mac_addr_set` (when the device
//! refuses, the port uses the override anyway and turns promiscuous mode on), starts the
//! device, waits up to [`PortConfig::link_timeout`] for its link (unless
//! [`PortConfig::wait_for_link`] is off: a memif server) and reads its MAC. Ring sizes go through `rte_eth_dev_adjust_nb_rx_tx_desc`. A device is
//! opened at most once per process; dropping the port stops and closes the device
//! (DPDK then releases a virtual device: it cannot be opened again) and frees the pool.
//!
//! # mbuf handling
//!
//! - **mbuf size.** Every mbuf has room for a whole frame of `mtu + 14` octets plus FCS
//!   and a VLAN tag in one segment (at least DPDK's default 2048 octets), after the
//!   usual 128-octet headroom, so receive normally needs no chains; transmit chains
//!   two mbufs only for zero-copy frames (below).
//! - **Receive.** [`Port::rx_burst`](dataplane::port::Port::rx_burst) takes up to
//!   [`RX_BURST`] mbufs per `rte_eth_rx_burst` call into a fixed array, hands each
//!   frame's data to the callback straight from the mbuf (no copy), then frees the mbuf
//!   (`rte_pktmbuf_free`) before the next frame. A multi-segment frame (a PMD with
//!   scatter receive) is linearised into a per-port scratch buffer with
//!   `rte_pktmbuf_read` and counted in [`DpdkPort::rx_linearized`]. Frames longer than
//!   `mtu + 14` are dropped and counted in `rx_dropped`. If the callback panics, the
//!   mbufs of the burst are still freed.
//! - **Transmit.** [`Port::tx`](dataplane::port::Port::tx) allocates an mbuf
//!   (`rte_pktmbuf_alloc`), appends `len` octets (`rte_pktmbuf_append`), zeroes them and
//!   lets `fill` write the frame in place; the mbuf joins a pending array of at most
//!   [`TX_PENDING`] (or the transmit ring size, if smaller) frames, which is what
//!   [`Port::tx_room`](dataplane::port::Port::tx_room) reports. `tx` refuses (and counts
//!   in `tx_dropped`) frames of length 0 or above `mtu + 14`, a full pending array and
//!   an exhausted mempool. [`Port::flush`](dataplane::port::Port::flush) calls
//!   `rte_eth_tx_burst` until everything is taken or [`FLUSH_RETRIES`] calls in a row
//!   made no progress, then frees what is left and counts it in `tx_dropped`.
//! - **Checksums.** With [`PortConfig::checksum_offload`] (the default), each direction
//!   where the device offers both the IPv4 header and the TCP checksum offload
//!   (`RTE_ETH_{TX,RX}_OFFLOAD_IPV4_CKSUM | TCP_CKSUM`) uses them, and
//!   [`Port::checksum_offload`](dataplane::port::Port::checksum_offload) says so. On
//!   transmit, [`Port::tx_ipv4_tcp_offload`](dataplane::port::Port::tx_ipv4_tcp_offload)
//!   frames carry a zero IPv4 checksum and the pseudo-header sum in the TCP field, and
//!   the mbuf asks for `RTE_MBUF_F_TX_IPV4 | IP_CKSUM | TCP_CKSUM` with `l2_len` 14,
//!   `l3_len` 20 and `l4_len` the TCP header's (`net_tap` needs it). On receive,
//!   [`Port::rx_burst_checked`](dataplane::port::Port::rx_burst_checked) reports the
//!   mbuf's `RTE_MBUF_F_RX_{IP,L4}_CKSUM_*` verdict, and the core checks in software
//!   only what the device did not. Without the offloads (`net_af_packet`,
//!   `net_memif`) the TCP engine's software checksums are used. `net_tap` offers both
//!   (its PMD computes them in software, so there is no gain, only the same path as a
//!   NIC's).
//! - **Zero-copy transmit.** With [`PortConfig::tx_zero_copy`] on a device that offers
//!   `RTE_ETH_TX_OFFLOAD_MULTI_SEGS` and is one of [`CPU_COPY_DRIVERS`] (`net_af_packet`,
//!   `net_tap`, `net_memif`, `net_null`), a TCP segment whose payload one send-queue
//!   record holds (at least 256 octets, even length) goes out as two mbufs:
//!   [`Port::tx_zero_copy`](dataplane::port::Port::tx_zero_copy) writes the Ethernet,
//!   IPv4 and TCP headers into a header mbuf and attaches a second mbuf to the payload in
//!   the record (`rte_pktmbuf_attach_extbuf`, chained with `rte_pktmbuf_chain`). The
//!   external buffer's shared info lives in a box with a clone of the record's `Arc`; its
//!   free callback, run by DPDK when the PMD (or the port, on a failed transmit) frees
//!   the mbuf, drops both, so the record stays readable until the device has read it and
//!   the send queue reuses its buffer only after that. The device must read the payload
//!   where it lies; a DMA NIC would need the send queue's records in DMA-mapped memory,
//!   which they are not (they live on the Rust heap), so those devices copy. Off by
//!   default: on the CPU-copy PMDs the PMD copies anyway and the second mbuf per frame
//!   cost more than the copy it saves (memif: 0.70–0.94× the copying bandwidth,
//!   `cargo bench --bench memif_vs_mem`).
//! - **Threads.** The port is `Send` but not `Sync`. It may run on a thread that is not
//!   an EAL lcore: the mempool then works without a per-lcore cache (DPDK's
//!   multi-producer/consumer ring), which is correct, only slower.
//!
//! # Counters
//!
//! [`Port::stats`](dataplane::port::Port::stats) counts frames and octets handed to and
//! taken from the core by the port itself; its `rx_dropped` adds the device's `imissed`,
//! `ierrors` and `rx_nombuf` to the port's own drops, and `tx_dropped` adds `oerrors`
//! (each call queries the device with `rte_eth_stats_get`: read it for reports, not per
//! burst). [`DpdkPort::device_stats`] gives the raw device counters.
//!
//! # EAL
//!
//! [`Eal::init`] runs `rte_eal_init` once per process (a second call fails with
//! `EALREADY` instead of reaching DPDK); `rte_eal_cleanup` runs when the `Eal` and every
//! port opened with it are dropped.
//!
//! # Tested
//!
//! `tests/veth.rs` (root only; skipped otherwise) runs two ports of the `net_af_packet`
//! PMD (Debian DPDK 22.11) on the two ends of a veth pair inside a private network
//! namespace, checking every octet and the counters. DPDK 22.11's `net_af_packet`
//! reports a 1518-octet maximum frame, so ethdev refuses MTUs above 1500 on it: the
//! MTU 9000 run checks that [`DpdkPort::open`] says so clearly (and that the device
//! still opens at 1500 afterwards). The multi-segment receive path is not exercised
//! (af_packet never chains). `net_tap` (with checksum offload) and `net_memif` are run by
//! the workspace's two-process tests (`tests/two_process.rs`); PCI NICs go through the
//! same generic ethdev calls but have not been run here.

mod config;
mod eal;
mod error;
mod port;

pub use config::{
    PortConfig, DEFAULT_MTU, DEFAULT_RING, MAX_MTU, MAX_QUEUES, MIN_MTU, RX_BURST, TX_PENDING,
};
pub use eal::{Eal, Launched};
pub use error::DpdkError;
pub use port::{
    DeviceStats, DpdkPort, QueueSteering, CPU_COPY_DRIVERS, FLUSH_RETRIES, TAP_TSO_MAX_MTU,
};

#[cfg(test)]
mod tests;
