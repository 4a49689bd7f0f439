//! [`DpdkPort`]: queue 0 of a DPDK Ethernet device as a [`Port`].

use std::ffi::{CStr, CString};
use std::fmt;
use std::ptr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dataplane::port::{ChecksumOffload, Port, PortStats, RxChecksum, TxPayload};
use dpdk_sys::{rte_mbuf, rte_mempool};
use proto::tcp::SharedRecord;
use smoltcp::wire::EthernetAddress;

use crate::config::{PortConfig, MEMPOOL_CACHE, RX_BURST, TX_PENDING};
use crate::eal::{Eal, EalInner};
use crate::error::{check, DpdkError, EBUSY, ENODEV};

/// How many times [`Port::flush`] calls `rte_eth_tx_burst` in a row without progress
/// before dropping what is left.
pub const FLUSH_RETRIES: u32 = 4;

/// `ENOTSUP` on Linux.
const ENOTSUP: i32 = 95;

/// Transmit offloads used for checksums: the IPv4 header's and TCP's.
const TX_CKSUM: u64 =
    dpdk_sys::RTE_ETH_TX_OFFLOAD_IPV4_CKSUM | dpdk_sys::RTE_ETH_TX_OFFLOAD_TCP_CKSUM;
/// Transmit offloads TSO needs besides the checksum ones.
const TX_TSO: u64 = dpdk_sys::RTE_ETH_TX_OFFLOAD_TCP_TSO | dpdk_sys::RTE_ETH_TX_OFFLOAD_MULTI_SEGS;
/// The largest MTU with which `tso` works on net_tap (see [`DpdkPort::open_queues`]).
pub const TAP_TSO_MAX_MTU: usize = 1522 - 18 - 14;
/// The largest TSO payload: the IPv4 total length stays within 16 bits with the largest
/// TCP header.
const TSO_MAX_PAYLOAD: usize = 65535 - 20 - 60;
/// Receive offloads used for checksums: the IPv4 header's and TCP's.
const RX_CKSUM: u64 =
    dpdk_sys::RTE_ETH_RX_OFFLOAD_IPV4_CKSUM | dpdk_sys::RTE_ETH_RX_OFFLOAD_TCP_CKSUM;
/// Ethernet and (option-less) IPv4 headers.
const ETH_IPV4_LEN: usize = 14 + 20;

/// Drivers that move frames with the CPU (copy them into a kernel ring, a socket or
/// shared memory) rather than by DMA: they can read a payload anywhere in the process, so
/// zero-copy transmit needs no DMA-mapped memory on them.
pub const CPU_COPY_DRIVERS: &[&str] = &["net_af_packet", "net_tap", "net_memif", "net_null"];

/// DPDK's `RTE_BAD_IOVA`.
const BAD_IOVA: u64 = u64::MAX;

/// Whether to transmit payloads without copying ([`Port::tx_zero_copy`]) on a device with
/// driver `driver` and transmit capabilities `tx_capa`, when the configuration `wanted`
/// it: the device must take multi-segment frames and be one of [`CPU_COPY_DRIVERS`].
/// (A DMA device would need the send queue's records in DMA-mapped memory, which they are
/// not: they live on the Rust heap.)
pub(crate) fn zero_copy_of(wanted: bool, driver: &str, tx_capa: u64) -> bool {
    wanted
        && tx_capa & dpdk_sys::RTE_ETH_TX_OFFLOAD_MULTI_SEGS != 0
        && CPU_COPY_DRIVERS.contains(&driver)
}

/// What keeps a record alive while an mbuf refers to it: the external buffer's shared
/// info, whose free callback ([`release_record`]) drops this box and the record clone in
/// it.
#[repr(C)]
struct ExtHold {
    shinfo: dpdk_sys::rte_mbuf_ext_shared_info,
    _record: SharedRecord,
}

/// `rte_mbuf_extbuf_free_callback_t` of [`ExtHold`]: called by DPDK once the last mbuf
/// attached to the payload is freed (by the PMD after transmitting it, or by us).
unsafe extern "C" fn release_record(_addr: *mut std::ffi::c_void, opaque: *mut std::ffi::c_void) {
    // SAFETY: `opaque` is the `Box<ExtHold>` leaked by `DpdkPort::tx_zero_copy` for one
    // mbuf, whose shared info has refcnt 1 (nothing else attaches to it): DPDK calls this
    // exactly once, after which it reads nothing of the shared info.
    drop(unsafe { Box::from_raw(opaque.cast::<ExtHold>()) });
}

/// Pause between link status reads.
const LINK_POLL: Duration = Duration::from_millis(10);

/// Waits until the started device `port_id` reports its link up, or `deadline`.
fn wait_for_link(
    port_id: u16,
    dev: &str,
    deadline: Instant,
    timeout: Duration,
) -> Result<(), DpdkError> {
    loop {
        let mut link = dpdk_sys::rte_eth_link::default();
        // SAFETY: started port; link is a live local the call fills in.
        check("rte_eth_link_get_nowait", dev, unsafe {
            dpdk_sys::rte_eth_link_get_nowait(port_id, &mut link)
        })?;
        if link.link_status() == 1 {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(DpdkError::invalid(
                "rte_eth_link_get_nowait",
                dev,
                format!("link still down after the link timeout of {timeout:?}"),
            ));
        }
        std::thread::sleep(LINK_POLL);
    }
}

/// The checksum offloads to use on a device with these capabilities: each direction
/// where it offers both the IPv4 header and the TCP checksum.
pub(crate) fn checksum_offload_of(tx_capa: u64, rx_capa: u64) -> ChecksumOffload {
    ChecksumOffload {
        tx_ipv4_tcp: tx_capa & TX_CKSUM == TX_CKSUM,
        rx_ipv4_tcp: rx_capa & RX_CKSUM == RX_CKSUM,
    }
}

/// The device's checksum verdict in a received mbuf's `ol_flags`: Bad when it found the
/// IPv4 header or the TCP checksum wrong; Good when it found TCP's right, or the data
/// verified without a correct checksum in the packet (`L4_CKSUM_NONE`); else Unknown.
pub(crate) fn rx_verdict(ol_flags: u64) -> RxChecksum {
    let ip = ol_flags & dpdk_sys::RTE_MBUF_F_RX_IP_CKSUM_MASK;
    let l4 = ol_flags & dpdk_sys::RTE_MBUF_F_RX_L4_CKSUM_MASK;
    if ip == dpdk_sys::RTE_MBUF_F_RX_IP_CKSUM_BAD || l4 == dpdk_sys::RTE_MBUF_F_RX_L4_CKSUM_BAD {
        RxChecksum::Bad
    } else if l4 == dpdk_sys::RTE_MBUF_F_RX_L4_CKSUM_GOOD
        || l4 == dpdk_sys::RTE_MBUF_F_RX_L4_CKSUM_NONE
    {
        RxChecksum::Good
    } else {
        RxChecksum::Unknown
    }
}

/// Ports opened by this process (a device is opened at most once).
static OPEN_PORTS: Mutex<Vec<u16>> = Mutex::new(Vec::new());
/// Distinguishes mempool names.
static POOL_SEQ: AtomicU32 = AtomicU32::new(0);

pub(crate) fn format_mac(m: [u8; 6]) -> String {
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    )
}

/// Raw counters of the device (`rte_eth_stats_get`, all queues).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceStats {
    /// Frames received.
    pub ipackets: u64,
    /// Frames transmitted.
    pub opackets: u64,
    /// Octets received.
    pub ibytes: u64,
    /// Octets transmitted.
    pub obytes: u64,
    /// Frames dropped by the device because the receive ring was full.
    pub imissed: u64,
    /// Erroneous received frames.
    pub ierrors: u64,
    /// Failed transmissions.
    pub oerrors: u64,
    /// Receive mbuf allocation failures.
    pub rx_nombuf: u64,
}

/// The open device that the queues of [`DpdkPort::open_queues`] share: stopped and
/// closed, and its mempools freed, when the last queue goes.
struct Device {
    /// Keeps EAL alive until the device is closed (dropped after `drop`'s body).
    _eal: Arc<EalInner>,
    port_id: u16,
    /// One mempool per queue.
    pools: Vec<*mut rte_mempool>,
}

// SAFETY: the pointers are the device's mempools, used by `drop` alone (each queue keeps
// its own copy of its pool's pointer); DPDK's stop, close and mempool free may run on any
// thread once no queue is in use, which holding the last reference guarantees.
unsafe impl Send for Device {}
// SAFETY: as above: nothing is done through a shared reference.
unsafe impl Sync for Device {}

impl Drop for Device {
    fn drop(&mut self) {
        // SAFETY: every queue of the device is gone (this was the last reference):
        // stopping and closing releases the queues (and every mbuf they hold) before the
        // pools are freed. EAL is still alive (self._eal is dropped after this body).
        unsafe {
            dpdk_sys::rte_eth_dev_stop(self.port_id);
            dpdk_sys::rte_eth_dev_close(self.port_id);
            for &p in &self.pools {
                dpdk_sys::rte_mempool_free(p);
            }
        }
        release(self.port_id);
    }
}

/// How the queues of a device opened by [`DpdkPort::open_queues`] spread flows.
#[derive(Debug, Clone)]
pub struct QueueSteering {
    /// The flow hash the cores of the queues use to tell which owns a flow: the
    /// device's own when `by_device`, else the symmetric Toeplitz hash over the queues
    /// with the round-robin table.
    pub rss: wire::rss::Rss,
    /// The device puts every flow on the queue `rss` names (its RSS was programmed with
    /// that key and table): no frame is handed between cores. False: the device spreads
    /// flows its own way (a kernel fan-out, no RSS), and a core hands a frame it does not
    /// own to its owner.
    pub by_device: bool,
    /// How, in a few words (for logs and reports).
    pub how: String,
}

/// One receive and transmit queue pair of a DPDK Ethernet device, with its own mempool.
///
/// See the [crate docs](crate) for how mbufs are handled. Not `Sync`: one thread at a
/// time uses the queues (DPDK's rule for a queue); it may move between threads.
pub struct DpdkPort {
    /// The device, shared by its queues: held (never read) so that it closes only when
    /// the last of them goes.
    _dev: Arc<Device>,
    /// This port's queue pair.
    queue: u16,
    port_id: u16,
    device: String,
    driver: String,
    pool: *mut rte_mempool,
    mac: EthernetAddress,
    mtu: usize,
    max_frame: usize,
    promiscuous: bool,
    tx_offload_capa: u64,
    offload: ChecksumOffload,
    /// [`Port::tx_zero_copy`] is used.
    zero_copy: bool,
    /// The largest payload of a TSO frame; 0 without TSO.
    tso_max: usize,
    /// The TSO frame being built: its first mbuf (headers, then payload) and its last,
    /// and the headers' length; null when none is.
    tso_head: *mut rte_mbuf,
    tso_tail: *mut rte_mbuf,
    tso_header_len: usize,
    /// EAL runs in IOVA-as-VA mode (an external buffer's IOVA is its address).
    iova_va: bool,
    /// Frames queued by `tx`, sent by `flush`; never above `pending_cap`.
    pending: Vec<*mut rte_mbuf>,
    pending_cap: usize,
    rx: [*mut rte_mbuf; RX_BURST],
    /// Where multi-segment frames are linearised.
    scratch: Vec<u8>,
    stats: PortStats,
    rx_linearized: u64,
}

// SAFETY: the raw pointers are the port's own mempool and mbufs taken from it, owned by
// this value alone (no other handle to the pending mbufs exists). DPDK allows a queue and
// a mempool to be used from any thread, EAL lcore or not (mempool operations from a
// non-lcore thread go to the multi-producer/consumer ring without a cache), as long as
// one thread at a time uses a queue: `&mut self` on every queue operation and the type
// not being `Sync` ensure that.
unsafe impl Send for DpdkPort {}

impl fmt::Debug for DpdkPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DpdkPort")
            .field("device", &self.device)
            .field("port_id", &self.port_id)
            .field("driver", &self.driver)
            .field("mac", &self.mac)
            .field("mtu", &self.mtu)
            .field("promiscuous", &self.promiscuous)
            .field("pending", &self.pending.len())
            .field("stats", &self.stats)
            .finish()
    }
}

/// How the queues spread flows, after the device started: with device RSS, the
/// indirection table is programmed round robin over the queues (or read back when the
/// device will not take one), so that the cores hash as the device does.
fn steering_of(
    port_id: u16,
    dev: &str,
    driver: &str,
    queues: u16,
    device_rss: bool,
    reta_size: u16,
) -> Result<QueueSteering, DpdkError> {
    use wire::rss::{Rss, SYMMETRIC_KEY};
    let n = usize::from(queues);
    let software = |how: String| QueueSteering {
        rss: Rss::symmetric(n).expect("at least one queue"),
        by_device: n == 1,
        how,
    };
    if n == 1 {
        return Ok(software("one queue".into()));
    }
    if driver == "net_memif" {
        // Queue pair i is the peer's queue pair i: a peer that steers by the same hash
        // (another iwarp with as many cores) sends each flow on the queue of its owner.
        return Ok(QueueSteering {
            by_device: false,
            ..software(
                "memif: queue pair i meets the peer's queue pair i; a peer hashing like this \
                 one sends each flow on its owner's queue, other frames are handed over"
                    .into(),
            )
        });
    }
    if !device_rss || reta_size == 0 {
        return Ok(software(format!(
            "{driver} has no RSS for IPv4/TCP: frames for another core's flows are handed to it"
        )));
    }
    let size = usize::from(reta_size);
    let mut conf = vec![dpdk_sys::rte_eth_rss_reta_entry64::default(); size.div_ceil(64)];
    for (i, e) in conf.iter_mut().enumerate() {
        e.mask = u64::MAX;
        for (j, slot) in e.reta.iter_mut().enumerate() {
            *slot = ((i * 64 + j) % n) as u16;
        }
    }
    // SAFETY: started port; conf holds reta_size entries (whole groups of 64).
    let ret =
        unsafe { dpdk_sys::rte_eth_dev_rss_reta_update(port_id, conf.as_mut_ptr(), reta_size) };
    if ret < 0 {
        // Keep the device's table, if it tells it.
        for e in conf.iter_mut() {
            e.mask = u64::MAX;
        }
        // SAFETY: as above; the call fills the groups in.
        let q =
            unsafe { dpdk_sys::rte_eth_dev_rss_reta_query(port_id, conf.as_mut_ptr(), reta_size) };
        if q < 0 {
            return Ok(software(format!(
                "{driver}: RSS on, but its indirection table can be neither set nor read \
                 (error {ret}): frames for another core's flows are handed to it"
            )));
        }
    }
    let reta: Vec<u16> = conf.iter().flat_map(|e| e.reta).take(size).collect();
    match Rss::with_table(SYMMETRIC_KEY, n, reta) {
        Ok(rss) => Ok(QueueSteering {
            rss,
            by_device: true,
            how: format!("RSS, symmetric Toeplitz key, {size}-entry table"),
        }),
        Err(e) => Err(DpdkError::invalid(
            "rte_eth_dev_rss_reta_query",
            dev,
            e.to_string(),
        )),
    }
}
/// Releases the device claim (and, once armed, closes the device and frees the pools)
/// when `open` fails half way.
struct OpenGuard {
    port_id: u16,
    pools: Vec<*mut rte_mempool>,
    close: bool,
    done: bool,
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        // SAFETY: `open` failed: no DpdkPort owns the device or the pool. When the
        // queues were set up with the pool (`close`), the device is stopped and closed
        // first so that no queue refers to the pool any more; otherwise the pool was
        // never handed to the device.
        unsafe {
            if self.close {
                dpdk_sys::rte_eth_dev_stop(self.port_id);
                dpdk_sys::rte_eth_dev_close(self.port_id);
            }
            for &p in &self.pools {
                dpdk_sys::rte_mempool_free(p);
            }
        }
        release(self.port_id);
    }
}

fn claim(port_id: u16, device: &str) -> Result<(), DpdkError> {
    let mut open = OPEN_PORTS.lock().unwrap_or_else(|e| e.into_inner());
    if open.contains(&port_id) {
        return Err(DpdkError::new(
            "DpdkPort::open",
            device,
            EBUSY,
            "the device is already open in this process",
        ));
    }
    open.push(port_id);
    Ok(())
}

fn release(port_id: u16) {
    let mut open = OPEN_PORTS.lock().unwrap_or_else(|e| e.into_inner());
    open.retain(|&p| p != port_id);
}

impl DpdkPort {
    /// Opens `cfg.device` with one queue pair (`cfg.queues` must be 1): see
    /// [`DpdkPort::open_queues`].
    pub fn open(eal: &Eal, cfg: &PortConfig) -> Result<DpdkPort, DpdkError> {
        if cfg.queues != 1 {
            return Err(DpdkError::invalid(
                "DpdkPort::open",
                &cfg.device,
                format!("{} queues asked: use open_queues", cfg.queues),
            ));
        }
        let (mut ports, _) = Self::open_queues(eal, cfg)?;
        Ok(ports.remove(0))
    }

    /// Opens `cfg.device` with `cfg.queues` receive and transmit queue pairs, one
    /// [`DpdkPort`] each (element `i` is queue pair `i`), each with a mempool of its
    /// own: configures the queues, the checksum offloads, the MTU and, with several
    /// queues on a device that offers RSS for IPv4/TCP, RSS with the symmetric Toeplitz
    /// key and a round-robin indirection table ([`QueueSteering`]); programs the MAC
    /// override (or turns promiscuous mode on when the device cannot change its address),
    /// starts the device and reads its MAC. The device closes when the last queue goes.
    ///
    /// Errors: an invalid `cfg` ([`PortConfig::validate`]), no such device (`ENODEV`),
    /// the device already open in this process (`EBUSY`), more queues than the device
    /// has, an MTU outside the device's range, or any failing DPDK call. A device that
    /// fails after its queues were set up is closed (it cannot be opened again in this
    /// process).
    pub fn open_queues(
        eal: &Eal,
        cfg: &PortConfig,
    ) -> Result<(Vec<DpdkPort>, QueueSteering), DpdkError> {
        cfg.validate()?;
        let dev = cfg.device.as_str();
        let cname = CString::new(dev)
            .map_err(|_| DpdkError::invalid("DpdkPort::open", dev, "NUL in device name"))?;
        let mut port_id = u16::MAX;
        // SAFETY: EAL is initialised (`eal` exists); cname is NUL-terminated and port_id
        // a live local.
        let ret = unsafe { dpdk_sys::rte_eth_dev_get_port_by_name(cname.as_ptr(), &mut port_id) };
        if ret < 0 {
            return Err(DpdkError::new(
                "rte_eth_dev_get_port_by_name",
                dev,
                ENODEV,
                "no such DPDK device (is it in the EAL --vdev / -a arguments?)",
            ));
        }
        claim(port_id, dev)?;
        let mut guard = OpenGuard {
            port_id,
            pools: Vec::new(),
            close: false,
            done: false,
        };

        let mut info = dpdk_sys::rte_eth_dev_info::default();
        // SAFETY: valid port id; info is a live local the call fills in.
        check("rte_eth_dev_info_get", dev, unsafe {
            dpdk_sys::rte_eth_dev_info_get(port_id, &mut info)
        })?;
        let driver = if info.driver_name.is_null() {
            String::new()
        } else {
            // SAFETY: driver_name is a NUL-terminated string owned by the driver.
            unsafe { CStr::from_ptr(info.driver_name) }
                .to_string_lossy()
                .into_owned()
        };
        let (min_mtu, max_mtu) = (usize::from(info.min_mtu), usize::from(info.max_mtu));
        if cfg.mtu < min_mtu || cfg.mtu > max_mtu {
            return Err(DpdkError::invalid(
                "DpdkPort::open",
                dev,
                format!(
                    "MTU {} is outside the device's {min_mtu}..={max_mtu}",
                    cfg.mtu
                ),
            ));
        }

        // ethdev's own rule (eth_dev_validate_mtu), checked here for a clearer message.
        let max_rx = info.max_rx_pktlen as usize;
        let overhead = if info.max_mtu != u16::MAX && max_rx > max_mtu {
            max_rx - max_mtu
        } else {
            18 // Ethernet header and FCS
        };
        if cfg.mtu + overhead > max_rx {
            return Err(DpdkError::invalid(
                "DpdkPort::open",
                dev,
                format!(
                    "MTU {} needs {}-octet frames; the device ({driver}) takes at most {max_rx}",
                    cfg.mtu,
                    cfg.mtu + overhead
                ),
            ));
        }

        let queues = cfg.queues;
        if queues > info.max_rx_queues || queues > info.max_tx_queues {
            return Err(DpdkError::invalid(
                "DpdkPort::open",
                dev,
                format!(
                    "{queues} queue pairs asked; the device ({driver}) has {} receive and {} \
                     transmit queues",
                    info.max_rx_queues, info.max_tx_queues
                ),
            ));
        }
        // The queues, the MTU, RSS, and the checksum offloads the device offers.
        let mut conf = dpdk_sys::rte_eth_conf::default();
        let rss_hf = info.flow_type_rss_offloads & dpdk_sys::RTE_ETH_RSS_NONFRAG_IPV4_TCP;
        let device_rss = queues > 1 && rss_hf != 0;
        // The symmetric key, as long as the device's (its 16-bit period continues).
        let key_len = usize::from(info.hash_key_size).max(wire::rss::KEY_LEN);
        let mut rss_key: Vec<u8> = (0..key_len)
            .map(|i| wire::rss::SYMMETRIC_KEY[i % 2])
            .collect();
        if device_rss {
            conf.rxmode.mq_mode = dpdk_sys::RTE_ETH_MQ_RX_RSS;
            conf.rx_adv_conf.rss_conf.rss_key = rss_key.as_mut_ptr();
            conf.rx_adv_conf.rss_conf.rss_key_len = key_len as u8;
            conf.rx_adv_conf.rss_conf.rss_hf = rss_hf;
        }
        // net_tap (DPDK 22.11 and later) refuses a TSO frame whose segments, Ethernet
        // header included, exceed the device MTU: it compares a frame length with an IP
        // MTU. With TSO the tap's MTU is therefore set 14 octets above the port's, so that
        // full-size segments pass; iwarp still sends datagrams of at most the port's MTU
        // (its MSS follows `cfg.mtu`). The tap's frames are at most 1522 octets, so this
        // needs an MTU of at most TAP_TSO_MAX_MTU.
        let dev_mtu = if cfg.tso && driver == "net_tap" {
            if cfg.mtu > TAP_TSO_MAX_MTU {
                return Err(DpdkError::invalid(
                    "DpdkPort::open",
                    dev,
                    format!(
                        "tso on net_tap needs an MTU of at most {TAP_TSO_MAX_MTU}, not {}: the \
                         PMD checks each segment's frame, Ethernet header included, against \
                         the device MTU, which is set 14 above the port's, and its frames \
                         are at most 1522 octets",
                        cfg.mtu
                    ),
                ));
            }
            cfg.mtu + 14
        } else {
            cfg.mtu
        };
        conf.rxmode.mtu = dev_mtu as u32;
        let offload = if cfg.checksum_offload {
            checksum_offload_of(info.tx_offload_capa, info.rx_offload_capa)
        } else {
            ChecksumOffload::default()
        };
        if offload.tx_ipv4_tcp {
            conf.txmode.offloads = TX_CKSUM;
        }
        let zero_copy = zero_copy_of(cfg.tx_zero_copy, &driver, info.tx_offload_capa);
        if zero_copy {
            conf.txmode.offloads |= dpdk_sys::RTE_ETH_TX_OFFLOAD_MULTI_SEGS;
        }
        if offload.rx_ipv4_tcp {
            conf.rxmode.offloads = RX_CKSUM;
        }
        let tso_max = if cfg.tso {
            let missing = TX_TSO & !info.tx_offload_capa != 0;
            if missing || !offload.tx_ipv4_tcp {
                return Err(DpdkError::invalid(
                    "DpdkPort::open",
                    dev,
                    format!(
                        "tso needs TCP segmentation offload with multi-segment frames and \
                         transmit checksum offload; the device ({driver}) {}",
                        if missing {
                            "does not offer TSO with multi-segment frames"
                        } else if !cfg.checksum_offload {
                            "has checksum_offload turned off"
                        } else {
                            "does not offer IPv4 and TCP checksum offload"
                        }
                    ),
                ));
            }
            conf.txmode.offloads |= TX_TSO;
            // Room for the headers in the first mbuf, the payload in up to the device's
            // segments per frame.
            let seg_max = usize::from(info.tx_desc_lim.nb_seg_max).max(2);
            let room = cfg.data_room() - dpdk_sys::RTE_PKTMBUF_HEADROOM as usize;
            TSO_MAX_PAYLOAD.min((seg_max - 1) * room)
        } else {
            0
        };
        // SAFETY: valid port id, stopped (it was never started, or stopped by the
        // previous owner's close); conf is a live local.
        check("rte_eth_dev_configure", dev, unsafe {
            dpdk_sys::rte_eth_dev_configure(port_id, queues, queues, &conf)
        })?;
        // Configured: the key was copied.
        drop(rss_key);
        // SAFETY: configured port.
        let ret = unsafe { dpdk_sys::rte_eth_dev_set_mtu(port_id, dev_mtu as u16) };
        // ENOTSUP: the PMD applies rxmode.mtu itself at start.
        if ret < 0 && ret != -ENOTSUP {
            return Err(DpdkError::from_ret("rte_eth_dev_set_mtu", dev, ret));
        }

        // MAC override.
        let mut promiscuous = cfg.software_mac;
        if let (Some(mac), false) = (cfg.mac, cfg.software_mac) {
            let mut addr = dpdk_sys::rte_ether_addr { addr_bytes: mac };
            // SAFETY: configured port; addr is a live local.
            let ret = unsafe { dpdk_sys::rte_eth_dev_default_mac_addr_set(port_id, &mut addr) };
            promiscuous = ret < 0;
        }

        // A mempool per queue.
        let data_room = cfg
            .data_room()
            .max(dpdk_sys::RTE_PKTMBUF_HEADROOM as usize + info.min_rx_bufsize as usize);
        let data_room = u16::try_from(data_room).map_err(|_| {
            DpdkError::invalid("rte_pktmbuf_pool_create", dev, "mbuf data room above 65535")
        })?;
        let cache = MEMPOOL_CACHE.min(cfg.mempool_size / 8);
        // SAFETY: valid port id.
        let socket = unsafe { dpdk_sys::rte_eth_dev_socket_id(port_id) };
        let socket = if socket < 0 {
            dpdk_sys::SOCKET_ID_ANY
        } else {
            socket
        };
        for _ in 0..queues {
            let pool_name = format!("dpp{port_id}_{}", POOL_SEQ.fetch_add(1, Ordering::Relaxed));
            let cpool = CString::new(pool_name.as_str()).expect("no NUL in a formatted name");
            // SAFETY: EAL initialised; cpool is NUL-terminated; the sizes were checked.
            let pool = unsafe {
                dpdk_sys::rte_pktmbuf_pool_create(
                    cpool.as_ptr(),
                    cfg.mempool_size,
                    cache,
                    0,
                    data_room,
                    socket,
                )
            };
            if pool.is_null() {
                return Err(DpdkError::from_errno("rte_pktmbuf_pool_create", pool_name));
            }
            guard.pools.push(pool);
        }

        // Queues.
        let (mut nb_rx, mut nb_tx) = (cfg.rx_ring, cfg.tx_ring);
        // SAFETY: configured port; live locals.
        check("rte_eth_dev_adjust_nb_rx_tx_desc", dev, unsafe {
            dpdk_sys::rte_eth_dev_adjust_nb_rx_tx_desc(port_id, &mut nb_rx, &mut nb_tx)
        })?;
        guard.close = true;
        let qsocket = socket.max(0) as u32;
        for (q, &pool) in guard.pools.iter().enumerate() {
            let q = q as u16;
            // SAFETY: configured, stopped port, q below the configured count; pool is a
            // live pktmbuf pool that outlives the queue (freed only after the device is
            // closed).
            check("rte_eth_rx_queue_setup", dev, unsafe {
                dpdk_sys::rte_eth_rx_queue_setup(port_id, q, nb_rx, qsocket, ptr::null(), pool)
            })?;
            // SAFETY: configured, stopped port, q below the configured count; NULL
            // selects the default txconf.
            check("rte_eth_tx_queue_setup", dev, unsafe {
                dpdk_sys::rte_eth_tx_queue_setup(port_id, q, nb_tx, qsocket, ptr::null())
            })?;
        }
        // No retry on failure: DPDK 22.11's memif client, whose start fails when its
        // server is not listening, never completes the handshake after a later start that
        // connects (tried); a new process must try again.
        let deadline = Instant::now() + cfg.link_timeout;
        // SAFETY: queues set up.
        let ret = unsafe { dpdk_sys::rte_eth_dev_start(port_id) };
        if ret < 0 {
            let hint = if driver == "net_memif" {
                " (a memif client: is its server listening on the socket?)"
            } else {
                ""
            };
            let mut e = DpdkError::from_ret("rte_eth_dev_start", dev, ret);
            e.message.push_str(hint);
            return Err(e);
        }
        if promiscuous {
            // SAFETY: started port.
            check("rte_eth_promiscuous_enable", dev, unsafe {
                dpdk_sys::rte_eth_promiscuous_enable(port_id)
            })?;
        }
        if cfg.wait_for_link {
            wait_for_link(port_id, dev, deadline, cfg.link_timeout)?;
        }
        let mut addr = dpdk_sys::rte_ether_addr::default();
        // SAFETY: valid port; addr is a live local.
        check("rte_eth_macaddr_get", dev, unsafe {
            dpdk_sys::rte_eth_macaddr_get(port_id, &mut addr)
        })?;
        let mac = match cfg.mac {
            Some(m) if promiscuous => m,
            None if cfg.software_mac => {
                let mut m = addr.addr_bytes;
                m[0] = (m[0] | 0x02) & !0x01;
                m[5] ^= 0x01;
                m
            }
            _ => addr.addr_bytes,
        };

        let steering = steering_of(port_id, dev, &driver, queues, device_rss, info.reta_size)?;
        guard.done = true;
        let pools = std::mem::take(&mut guard.pools);
        let shared = Arc::new(Device {
            _eal: eal.inner.clone(),
            port_id,
            pools: pools.clone(),
        });
        let pending_cap = TX_PENDING.min(usize::from(nb_tx)).max(1);
        // SAFETY: EAL is initialised.
        let iova_va = unsafe { dpdk_sys::rte_eal_iova_mode() } == dpdk_sys::RTE_IOVA_VA;
        let ports = pools
            .into_iter()
            .enumerate()
            .map(|(q, pool)| DpdkPort {
                _dev: shared.clone(),
                queue: q as u16,
                port_id,
                device: cfg.device.clone(),
                driver: driver.clone(),
                pool,
                mac: EthernetAddress(mac),
                mtu: cfg.mtu,
                max_frame: cfg.max_frame(),
                promiscuous,
                tx_offload_capa: info.tx_offload_capa,
                offload,
                zero_copy,
                tso_max,
                tso_head: ptr::null_mut(),
                tso_tail: ptr::null_mut(),
                tso_header_len: 0,
                iova_va,
                pending: Vec::with_capacity(pending_cap),
                pending_cap,
                rx: [ptr::null_mut(); RX_BURST],
                scratch: vec![0; cfg.max_frame()],
                stats: PortStats::default(),
                rx_linearized: 0,
            })
            .collect();
        Ok((ports, steering))
    }

    /// The queue pair this port uses.
    pub fn queue(&self) -> u16 {
        self.queue
    }

    /// The DPDK port id.
    pub fn port_id(&self) -> u16 {
        self.port_id
    }

    /// The device name it was opened by.
    pub fn device(&self) -> &str {
        &self.device
    }

    /// The PMD's name (`"net_af_packet"`, ...).
    pub fn driver_name(&self) -> &str {
        &self.driver
    }

    /// Whether promiscuous mode was turned on (a MAC override the device could not
    /// program).
    pub fn promiscuous(&self) -> bool {
        self.promiscuous
    }

    /// Allocates an mbuf of `len` octets, lets `fill` write the frame into it and queues it:
    /// the queued mbuf, or `None` (counted in `tx_dropped`) when it cannot.
    fn tx_mbuf(&mut self, len: usize, fill: &mut dyn FnMut(&mut [u8])) -> Option<*mut rte_mbuf> {
        if len == 0 || len > self.max_frame || self.pending.len() >= self.pending_cap {
            self.stats.tx_dropped += 1;
            return None;
        }
        // SAFETY: self.pool is the port's live pktmbuf pool.
        let m = unsafe { dpdk_sys::rte_pktmbuf_alloc(self.pool) };
        if m.is_null() {
            self.stats.tx_dropped += 1;
            return None;
        }
        let mut guard = MbufGuard(m);
        // SAFETY: m is a fresh mbuf; len <= max_frame < its data room (checked by
        // PortConfig::data_room), so append succeeds and returns `len` writable octets
        // inside the mbuf's buffer, which we zero before handing them out.
        unsafe {
            let p = dpdk_sys::rte_pktmbuf_append(m, len as u16).cast::<u8>();
            if p.is_null() {
                self.stats.tx_dropped += 1;
                return None;
            }
            ptr::write_bytes(p, 0, len);
            fill(std::slice::from_raw_parts_mut(p, len));
        }
        guard.0 = ptr::null_mut();
        self.pending.push(m);
        self.stats.tx_frames += 1;
        self.stats.tx_octets += len as u64;
        Some(m)
    }

    /// Frees the TSO frame being built, if there is one.
    fn tso_abandon(&mut self) {
        if !self.tso_head.is_null() {
            // SAFETY: the head of a chain we allocated and never handed to the PMD; freeing
            // it frees every mbuf chained to it.
            unsafe { dpdk_sys::rte_pktmbuf_free(self.tso_head) };
        }
        self.tso_head = ptr::null_mut();
        self.tso_tail = ptr::null_mut();
    }

    /// The device's transmit offload capabilities (`RTE_ETH_TX_OFFLOAD_*`); of them the
    /// checksum ones ([`Port::checksum_offload`]) and `MULTI_SEGS` (zero-copy transmit,
    /// [`Port::tx_zero_copy_capable`]) are used.
    pub fn tx_offload_capa(&self) -> u64 {
        self.tx_offload_capa
    }

    /// Multi-segment frames that were copied into one buffer before being handed to the
    /// receive callback.
    pub fn rx_linearized(&self) -> u64 {
        self.rx_linearized
    }

    /// Frames queued by [`Port::tx`] and not yet flushed.
    pub fn tx_pending(&self) -> usize {
        self.pending.len()
    }

    /// The device's own counters (`rte_eth_stats_get`).
    pub fn device_stats(&self) -> Result<DeviceStats, DpdkError> {
        let mut s = dpdk_sys::rte_eth_stats::default();
        // SAFETY: open port; s is a live local.
        check("rte_eth_stats_get", &self.device, unsafe {
            dpdk_sys::rte_eth_stats_get(self.port_id, &mut s)
        })?;
        Ok(DeviceStats {
            ipackets: s.ipackets,
            opackets: s.opackets,
            ibytes: s.ibytes,
            obytes: s.obytes,
            imissed: s.imissed,
            ierrors: s.ierrors,
            oerrors: s.oerrors,
            rx_nombuf: s.rx_nombuf,
        })
    }
}

/// Frees the received mbufs `mbufs[done..]` when dropped, so a panicking receive
/// callback leaks none.
struct RxBatch<'a> {
    mbufs: &'a [*mut rte_mbuf],
    done: usize,
}

impl Drop for RxBatch<'_> {
    fn drop(&mut self) {
        for &m in &self.mbufs[self.done..] {
            // SAFETY: mbufs[done..] came from rte_eth_rx_burst and were not freed yet.
            unsafe { dpdk_sys::rte_pktmbuf_free(m) };
        }
    }
}

/// The TCP header length (Data Offset) of an Ethernet/IPv4/TCP frame's first octets; at
/// least 20.
fn tcp_header_len(frame: &[u8]) -> u8 {
    frame
        .get(ETH_IPV4_LEN + 12)
        .map_or(20, |o| (o >> 4) * 4)
        .max(20)
}

/// Frees one mbuf when dropped unless disarmed (a panicking `fill`).
struct MbufGuard(*mut rte_mbuf);

impl Drop for MbufGuard {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: an mbuf we allocated and still own.
            unsafe { dpdk_sys::rte_pktmbuf_free(self.0) };
        }
    }
}

impl Port for DpdkPort {
    fn mac(&self) -> EthernetAddress {
        self.mac
    }

    fn mtu(&self) -> usize {
        self.mtu
    }

    fn rx_burst(&mut self, max: usize, f: &mut dyn FnMut(&[u8])) -> usize {
        self.rx_burst_checked(max, &mut |frame, _| f(frame))
    }

    fn checksum_offload(&self) -> ChecksumOffload {
        self.offload
    }

    fn link_up(&self) -> Option<bool> {
        let mut link = dpdk_sys::rte_eth_link::default();
        // SAFETY: open port; link is a live local the call fills in.
        let ret = unsafe { dpdk_sys::rte_eth_link_get_nowait(self.port_id, &mut link) };
        (ret == 0).then(|| link.link_status() == 1)
    }

    fn tx_ipv4_tcp_offload(&mut self, len: usize, fill: &mut dyn FnMut(&mut [u8])) -> bool {
        if !self.offload.tx_ipv4_tcp || len < ETH_IPV4_LEN {
            self.stats.tx_dropped += 1;
            return false;
        }
        let mut l4_len = 20u8;
        let Some(m) = self.tx_mbuf(len, &mut |buf| {
            fill(buf);
            l4_len = tcp_header_len(buf);
        }) else {
            return false;
        };
        // SAFETY: m is the mbuf just queued by tx_mbuf, still ours (not yet given to the
        // PMD); the shim sets its ol_flags and l2_len/l3_len/l4_len fields.
        unsafe { dpdk_sys::dpdk_sys_pktmbuf_tx_ipv4_tcp_cksum(m, 14, 20, l4_len) };
        self.stats.tx_checksum_offloaded += 1;
        true
    }

    fn tso_max_payload(&self) -> usize {
        self.tso_max
    }

    fn tx_tso_begin(&mut self, header_len: usize) -> bool {
        self.tso_abandon();
        if self.tso_max == 0
            || header_len > self.max_frame
            || self.pending.len() >= self.pending_cap
        {
            self.stats.tx_dropped += 1;
            return false;
        }
        // SAFETY: self.pool is the port's live pktmbuf pool.
        let m = unsafe { dpdk_sys::rte_pktmbuf_alloc(self.pool) };
        if m.is_null() {
            self.stats.tx_dropped += 1;
            return false;
        }
        // SAFETY: m is a fresh mbuf; header_len <= max_frame < its data room, so append
        // succeeds and returns header_len writable octets in its buffer, zeroed here (the
        // headers are written at finish).
        unsafe {
            let p = dpdk_sys::rte_pktmbuf_append(m, header_len as u16).cast::<u8>();
            if p.is_null() {
                dpdk_sys::rte_pktmbuf_free(m);
                self.stats.tx_dropped += 1;
                return false;
            }
            ptr::write_bytes(p, 0, header_len);
        }
        self.tso_head = m;
        self.tso_tail = m;
        self.tso_header_len = header_len;
        true
    }

    fn tx_tso_append(&mut self, payload: &[u8]) -> bool {
        if self.tso_head.is_null() {
            self.stats.tx_dropped += 1;
            return false;
        }
        // SAFETY: tso_head is the live head of the chain being built (ours, not given to
        // the PMD); its pkt_len is headers plus the payload appended so far.
        let so_far = unsafe { dpdk_sys::dpdk_sys_pktmbuf_pkt_len(self.tso_head) } as usize
            - self.tso_header_len;
        if so_far + payload.len() > self.tso_max {
            self.tso_abandon();
            self.stats.tx_dropped += 1;
            return false;
        }
        let mut rest = payload;
        while !rest.is_empty() {
            // SAFETY: tso_tail is the chain's last mbuf (we keep it so).
            let room = usize::from(unsafe { dpdk_sys::rte_pktmbuf_tailroom(self.tso_tail) });
            if room == 0 {
                // SAFETY: the port's live pool; a fresh mbuf chained after the last one
                // (rte_pktmbuf_chain refuses a chain longer than RTE_MBUF_MAX_NB_SEGS; on
                // refusal the fresh mbuf is freed and the frame abandoned).
                let m = unsafe { dpdk_sys::rte_pktmbuf_alloc(self.pool) };
                if m.is_null() || unsafe { dpdk_sys::rte_pktmbuf_chain(self.tso_head, m) } != 0 {
                    if !m.is_null() {
                        // SAFETY: ours, not chained.
                        unsafe { dpdk_sys::rte_pktmbuf_free(m) };
                    }
                    self.tso_abandon();
                    self.stats.tx_dropped += 1;
                    return false;
                }
                self.tso_tail = m;
                continue;
            }
            let k = room.min(rest.len());
            // SAFETY: the last segment has `room` >= k octets of tailroom, so append
            // (which extends the last segment and the head's pkt_len) returns k writable
            // octets there, which the copy fills from `rest` (a distinct Rust slice).
            unsafe {
                let p = dpdk_sys::rte_pktmbuf_append(self.tso_head, k as u16).cast::<u8>();
                if p.is_null() {
                    self.tso_abandon();
                    self.stats.tx_dropped += 1;
                    return false;
                }
                ptr::copy_nonoverlapping(rest.as_ptr(), p, k);
            }
            rest = &rest[k..];
        }
        true
    }

    fn tx_tso_finish(&mut self, mss: Option<u16>, fill: &mut dyn FnMut(&mut [u8])) -> bool {
        let head = self.tso_head;
        if head.is_null() || self.pending.len() >= self.pending_cap {
            self.tso_abandon();
            self.stats.tx_dropped += 1;
            return false;
        }
        let h = self.tso_header_len;
        // SAFETY: head is the chain's first mbuf, ours; its first h octets (appended by
        // begin, in the first segment) are the headers, written here through a slice that
        // lives for this block only.
        let (l4_len, len) = unsafe {
            let p = dpdk_sys::pktmbuf_mtod::<u8>(head);
            let buf = std::slice::from_raw_parts_mut(p, h);
            fill(buf);
            (
                tcp_header_len(buf),
                dpdk_sys::dpdk_sys_pktmbuf_pkt_len(head) as usize,
            )
        };
        let segmented = mss.filter(|&m| m > 0 && len - h > usize::from(m));
        // SAFETY: head is ours (not yet given to the PMD); the shims set its ol_flags,
        // l2/l3/l4 lengths and segment size, which describe its headers.
        unsafe {
            match segmented {
                Some(m) => dpdk_sys::dpdk_sys_pktmbuf_tx_ipv4_tcp_tso(head, 14, 20, l4_len, m),
                None => dpdk_sys::dpdk_sys_pktmbuf_tx_ipv4_tcp_cksum(head, 14, 20, l4_len),
            }
        }
        self.tso_head = ptr::null_mut();
        self.tso_tail = ptr::null_mut();
        self.pending.push(head);
        self.stats.tx_frames += 1;
        self.stats.tx_octets += len as u64;
        if let Some(m) = segmented {
            self.stats.tx_tso_frames += 1;
            self.stats.tx_tso_segments += (len - h).div_ceil(usize::from(m)) as u64;
        } else {
            self.stats.tx_checksum_offloaded += 1;
        }
        true
    }

    fn tx_zero_copy_capable(&self) -> bool {
        self.zero_copy
    }

    fn tx_zero_copy(
        &mut self,
        header_len: usize,
        payload: TxPayload<'_>,
        offload: bool,
        fill: &mut dyn FnMut(&mut [u8]),
    ) -> bool {
        let bytes = payload.bytes();
        let len = header_len.saturating_add(bytes.len());
        if !self.zero_copy
            || (offload && !self.offload.tx_ipv4_tcp)
            || !payload.fits(header_len, self.max_frame)
            || self.pending.len() >= self.pending_cap
        {
            self.stats.tx_dropped += 1;
            return false;
        }
        // SAFETY: self.pool is the port's live pktmbuf pool.
        let (head, tail) = unsafe {
            (
                dpdk_sys::rte_pktmbuf_alloc(self.pool),
                dpdk_sys::rte_pktmbuf_alloc(self.pool),
            )
        };
        let mut head_guard = MbufGuard(head);
        let mut tail_guard = MbufGuard(tail);
        if head.is_null() || tail.is_null() {
            self.stats.tx_dropped += 1;
            return false;
        }
        // SAFETY: head is a fresh mbuf; header_len < max_frame < its data room, so append
        // returns header_len writable octets inside its buffer, zeroed before `fill`.
        let l4_len = unsafe {
            let p = dpdk_sys::rte_pktmbuf_append(head, header_len as u16).cast::<u8>();
            if p.is_null() {
                self.stats.tx_dropped += 1;
                return false;
            }
            ptr::write_bytes(p, 0, header_len);
            let buf = std::slice::from_raw_parts_mut(p, header_len);
            fill(buf);
            tcp_header_len(buf)
        };
        let hold = Box::into_raw(Box::new(ExtHold {
            shinfo: dpdk_sys::rte_mbuf_ext_shared_info {
                free_cb: Some(release_record),
                fcb_opaque: ptr::null_mut(),
                refcnt: 1,
            },
            _record: payload.record.clone(),
        }));
        let addr = bytes.as_ptr().cast_mut().cast::<std::ffi::c_void>();
        let iova = if self.iova_va { addr as u64 } else { BAD_IOVA };
        // SAFETY: `hold` is a live, leaked box; from the attach on, freeing `tail` (the
        // PMD after sending it, or the guard) calls release_record, which frees it. The
        // payload octets lie in the record that `hold` keeps alive; a shared record is
        // never written (the send queue reuses a buffer only when it holds the last
        // reference), and the CPU-copy PMDs this is enabled for only read it. `tail` is a
        // fresh direct mbuf with refcnt 1, as attach_extbuf requires; bytes.len() fits
        // u16 (it is below max_frame). After the attach its data room is exactly the
        // payload, which append takes whole.
        unsafe {
            (*hold).shinfo.fcb_opaque = hold.cast();
            dpdk_sys::rte_pktmbuf_attach_extbuf(
                tail,
                addr,
                iova,
                bytes.len() as u16,
                &mut (*hold).shinfo,
            );
            if dpdk_sys::rte_pktmbuf_append(tail, bytes.len() as u16).is_null()
                || dpdk_sys::rte_pktmbuf_chain(head, tail) != 0
            {
                self.stats.tx_dropped += 1;
                return false;
            }
        }
        // `tail` now belongs to `head`'s chain.
        tail_guard.0 = ptr::null_mut();
        if offload {
            // SAFETY: head is ours (not yet given to the PMD); the shim sets its ol_flags
            // and l2/l3/l4 lengths, which describe the header mbuf.
            unsafe { dpdk_sys::dpdk_sys_pktmbuf_tx_ipv4_tcp_cksum(head, 14, 20, l4_len) };
            self.stats.tx_checksum_offloaded += 1;
        }
        head_guard.0 = ptr::null_mut();
        self.pending.push(head);
        self.stats.tx_frames += 1;
        self.stats.tx_octets += len as u64;
        self.stats.tx_zero_copy += 1;
        true
    }

    fn rx_burst_checked(&mut self, max: usize, f: &mut dyn FnMut(&[u8], RxChecksum)) -> usize {
        let check = self.offload.rx_ipv4_tcp;
        let mut taken = 0usize;
        while taken < max {
            let want = (max - taken).min(RX_BURST);
            // SAFETY: open, started port, this port's queue (used by this value alone);
            // self.rx has room for `want` pointers.
            let n = usize::from(unsafe {
                dpdk_sys::rte_eth_rx_burst(
                    self.port_id,
                    self.queue,
                    self.rx.as_mut_ptr(),
                    want as u16,
                )
            });
            if n == 0 {
                break;
            }
            let mut batch = RxBatch {
                mbufs: &self.rx[..n],
                done: 0,
            };
            while batch.done < n {
                let m = batch.mbufs[batch.done];
                // SAFETY: m is a valid mbuf just received; its first segment holds
                // data_len octets at mtod; for a chain, rte_pktmbuf_read copies pkt_len
                // octets into scratch (at least max_frame long, checked first) or
                // returns the contiguous data. The slice lives until the mbuf is freed
                // below.
                unsafe {
                    let len = dpdk_sys::pktmbuf_pkt_len(m) as usize;
                    if len > self.max_frame {
                        self.stats.rx_dropped += 1;
                    } else {
                        let data: *const u8 = if usize::from(dpdk_sys::pktmbuf_data_len(m)) == len {
                            dpdk_sys::pktmbuf_mtod::<u8>(m)
                        } else {
                            self.rx_linearized += 1;
                            dpdk_sys::rte_pktmbuf_read(
                                m,
                                0,
                                len as u32,
                                self.scratch.as_mut_ptr().cast(),
                            )
                            .cast()
                        };
                        if data.is_null() {
                            self.stats.rx_dropped += 1;
                        } else {
                            self.stats.rx_frames += 1;
                            self.stats.rx_octets += len as u64;
                            let verdict = if check {
                                rx_verdict(dpdk_sys::dpdk_sys_pktmbuf_ol_flags(m))
                            } else {
                                RxChecksum::Unknown
                            };
                            match verdict {
                                RxChecksum::Good => self.stats.rx_checksum_good += 1,
                                RxChecksum::Bad => self.stats.rx_checksum_bad += 1,
                                RxChecksum::Unknown => {}
                            }
                            f(std::slice::from_raw_parts(data, len), verdict);
                        }
                    }
                    batch.done += 1;
                    dpdk_sys::rte_pktmbuf_free(m);
                }
            }
            taken += n;
            if n < want {
                break;
            }
        }
        taken
    }

    fn tx_room(&self) -> usize {
        self.pending_cap - self.pending.len()
    }

    fn tx(&mut self, len: usize, fill: &mut dyn FnMut(&mut [u8])) -> bool {
        self.tx_mbuf(len, fill).is_some()
    }

    fn flush(&mut self) {
        let total = self.pending.len();
        let mut sent = 0usize;
        let mut idle = 0u32;
        while sent < total && idle < FLUSH_RETRIES {
            // SAFETY: open, started port, this port's queue (used by this value alone);
            // pending[sent..] are valid mbufs we own; the PMD takes ownership of the
            // first `n` it returns.
            let n = usize::from(unsafe {
                dpdk_sys::rte_eth_tx_burst(
                    self.port_id,
                    self.queue,
                    self.pending.as_mut_ptr().add(sent),
                    (total - sent) as u16,
                )
            });
            sent += n;
            if n == 0 {
                idle += 1;
            } else {
                idle = 0;
            }
        }
        for &m in &self.pending[sent..] {
            // SAFETY: not taken by the PMD: still ours.
            unsafe { dpdk_sys::rte_pktmbuf_free(m) };
            self.stats.tx_dropped += 1;
        }
        self.pending.clear();
    }

    fn stats(&self) -> PortStats {
        let mut s = self.stats;
        // The device's own drop counters, once (on queue 0) for all its queues.
        if let Some(d) = (self.queue == 0)
            .then(|| self.device_stats().ok())
            .flatten()
        {
            s.rx_dropped += d.imissed + d.ierrors + d.rx_nombuf;
            s.tx_dropped += d.oerrors;
        }
        s
    }
}

impl Drop for DpdkPort {
    fn drop(&mut self) {
        self.tso_abandon();
        for &m in &self.pending {
            // SAFETY: queued, never handed to the PMD.
            unsafe { dpdk_sys::rte_pktmbuf_free(m) };
        }
        self.pending.clear();
        // The device closes when its last queue goes (`Device::drop`).
    }
}
