//! Unit tests that need no EAL (DPDK's libraries are linked, but `rte_eal_init` is never
//! called here: that happens once, in `tests/veth.rs`).

use super::*;

#[test]
fn new_has_the_defaults() {
    let c = PortConfig::new("net_af_packet0");
    assert_eq!(c.device, "net_af_packet0");
    assert_eq!(c.mtu, DEFAULT_MTU);
    assert_eq!((c.rx_ring, c.tx_ring), (DEFAULT_RING, DEFAULT_RING));
    assert_eq!(c.mac, None);
    assert_eq!(c.max_frame(), 1514);
    assert!(c.mempool_size >= PortConfig::min_mempool_size(DEFAULT_RING, DEFAULT_RING));
    assert_eq!(c.validate(), Ok(()));
}

#[test]
fn default_mempool_size_is_2k_minus_1_and_covers_the_minimum() {
    assert_eq!(PortConfig::default_mempool_size(64, 64), 2047);
    assert_eq!(PortConfig::default_mempool_size(1024, 1024), 4095);
    for (rx, tx) in [
        (1u16, 1u16),
        (512, 2048),
        (16384, 16384),
        (u16::MAX, u16::MAX),
    ] {
        let n = PortConfig::default_mempool_size(rx, tx);
        assert!(n >= PortConfig::min_mempool_size(rx, tx), "{rx} {tx}");
        assert!((n + 1).is_power_of_two());
    }
}

#[test]
fn validate_rejects_bad_fields() {
    let ok = PortConfig::new("net_null0");
    let cases: Vec<(PortConfig, &str)> = vec![
        (
            PortConfig {
                device: String::new(),
                ..ok.clone()
            },
            "device name",
        ),
        (
            PortConfig {
                device: "a\0b".into(),
                ..ok.clone()
            },
            "NUL",
        ),
        (
            PortConfig {
                mtu: MIN_MTU - 1,
                ..ok.clone()
            },
            "MTU 67",
        ),
        (
            PortConfig {
                mtu: MAX_MTU + 1,
                ..ok.clone()
            },
            "MTU 9217",
        ),
        (
            PortConfig {
                rx_ring: 0,
                ..ok.clone()
            },
            "ring sizes",
        ),
        (
            PortConfig {
                tx_ring: 0,
                ..ok.clone()
            },
            "ring sizes",
        ),
        (
            PortConfig {
                mempool_size: 100,
                ..ok.clone()
            },
            "mempool of 100",
        ),
        (
            PortConfig {
                mac: Some([1, 0, 0, 0, 0, 1]),
                ..ok.clone()
            },
            "01:00:00:00:00:01",
        ),
        (
            PortConfig {
                mac: Some([0; 6]),
                ..ok.clone()
            },
            "not a unicast",
        ),
    ];
    for (c, needle) in cases {
        let e = c.validate().unwrap_err();
        assert_eq!(e.call, "PortConfig::validate");
        assert_eq!(e.code, 22);
        assert!(
            e.to_string().contains(needle),
            "{e} should mention {needle}"
        );
    }
    for mtu in [MIN_MTU, 1500, 9000, MAX_MTU] {
        assert_eq!(PortConfig { mtu, ..ok.clone() }.validate(), Ok(()));
    }
}

#[test]
fn data_room_holds_a_whole_frame() {
    let headroom = dpdk_sys::RTE_PKTMBUF_HEADROOM as usize;
    for mtu in [MIN_MTU, 1500, 2000, 9000, MAX_MTU] {
        let c = PortConfig {
            mtu,
            ..PortConfig::new("x")
        };
        let room = c.data_room();
        assert!(room - headroom >= c.max_frame() + 8, "mtu {mtu}");
        assert!(room - headroom >= 2048);
        assert_eq!((room - headroom) % 64, 0);
        assert!(room <= usize::from(u16::MAX));
    }
}

#[test]
fn error_display() {
    let e = DpdkError::new(
        "rte_eth_dev_configure",
        "net_af_packet0",
        22,
        "Invalid argument",
    );
    assert_eq!(
        e.to_string(),
        "rte_eth_dev_configure(net_af_packet0): Invalid argument (errno 22)"
    );
    let e = DpdkError::new("rte_eal_init", "", 114, "already");
    assert_eq!(e.to_string(), "rte_eal_init: already (errno 114)");
    // strerror through DPDK works without EAL.
    let e = error::DpdkError::from_ret("rte_eth_dev_start", "p", -12);
    assert_eq!(e.code, 12);
    assert!(e.message.contains("memory"), "{}", e.message);
    let boxed: Box<dyn std::error::Error> = Box::new(e);
    assert!(boxed.to_string().starts_with("rte_eth_dev_start(p): "));
}

#[test]
fn eal_init_rejects_an_empty_argv_without_starting_dpdk() {
    let e = Eal::init(&[]).unwrap_err();
    assert_eq!(e.code, 22);
    assert!(!Eal::initialised());
}

#[test]
fn dpdk_port_is_send() {
    fn send<T: Send>() {}
    send::<DpdkPort>();
    send::<Eal>();
}

#[test]
fn zero_copy_needs_multi_segs_a_cpu_copy_driver_and_the_config() {
    use crate::port::zero_copy_of;
    use dpdk_sys::RTE_ETH_TX_OFFLOAD_MULTI_SEGS as MS;
    for d in ["net_af_packet", "net_tap", "net_memif"] {
        assert!(zero_copy_of(true, d, MS), "{d}");
        assert!(!zero_copy_of(false, d, MS), "{d} not wanted");
        assert!(!zero_copy_of(true, d, 0), "{d} without MULTI_SEGS");
    }
    // A DMA device: the send queue's records are not in DMA-mapped memory.
    assert!(!zero_copy_of(true, "net_ice", MS));
    assert!(!zero_copy_of(true, "mlx5_pci", MS));
}

#[test]
fn checksum_offload_needs_both_ipv4_and_tcp_in_a_direction() {
    use crate::port::checksum_offload_of;
    use dpdk_sys::*;
    let tx = RTE_ETH_TX_OFFLOAD_IPV4_CKSUM | RTE_ETH_TX_OFFLOAD_TCP_CKSUM;
    let rx = RTE_ETH_RX_OFFLOAD_IPV4_CKSUM | RTE_ETH_RX_OFFLOAD_TCP_CKSUM;
    let o = checksum_offload_of(tx | RTE_ETH_TX_OFFLOAD_MULTI_SEGS, rx);
    assert!(o.tx_ipv4_tcp && o.rx_ipv4_tcp);
    let o = checksum_offload_of(RTE_ETH_TX_OFFLOAD_TCP_CKSUM, RTE_ETH_RX_OFFLOAD_IPV4_CKSUM);
    assert!(!o.tx_ipv4_tcp && !o.rx_ipv4_tcp);
    assert_eq!(checksum_offload_of(0, 0), Default::default());
}

#[test]
fn rx_checksum_verdicts_from_ol_flags() {
    use crate::port::rx_verdict;
    use dataplane::port::RxChecksum;
    use dpdk_sys::*;
    let ip_good = RTE_MBUF_F_RX_IP_CKSUM_GOOD;
    assert_eq!(rx_verdict(0), RxChecksum::Unknown);
    assert_eq!(
        rx_verdict(ip_good | RTE_MBUF_F_RX_L4_CKSUM_GOOD),
        RxChecksum::Good
    );
    assert_eq!(
        rx_verdict(ip_good | RTE_MBUF_F_RX_L4_CKSUM_NONE),
        RxChecksum::Good,
        "data verified, checksum not in the packet"
    );
    assert_eq!(rx_verdict(ip_good), RxChecksum::Unknown);
    assert_eq!(
        rx_verdict(ip_good | RTE_MBUF_F_RX_L4_CKSUM_BAD),
        RxChecksum::Bad
    );
    assert_eq!(
        rx_verdict(RTE_MBUF_F_RX_IP_CKSUM_BAD | RTE_MBUF_F_RX_L4_CKSUM_GOOD),
        RxChecksum::Bad
    );
}
