//! Layout and constant sanity tests. None of them initialises EAL (that happens once per
//! process, in `tests/smoke.rs`), but they do link and load DPDK's shared libraries.

use core::mem::{align_of, offset_of, size_of};

use super::*;

#[test]
fn rte_mbuf_layout_matches_c() {
    #[cfg(target_arch = "x86_64")]
    {
        assert_eq!(size_of::<rte_mbuf>(), 128, "two 64-byte cache lines");
        assert_eq!(align_of::<rte_mbuf>(), 64);
        assert_eq!(offset_of!(rte_mbuf, next), 64, "second cache line");
    }
    // SAFETY: the probes only return sizeof/offsetof values computed by the C compiler.
    let (size, data_off, pkt_len, next) = unsafe {
        (
            dpdk_sys_sizeof_rte_mbuf(),
            dpdk_sys_offsetof_rte_mbuf_data_off(),
            dpdk_sys_offsetof_rte_mbuf_pkt_len(),
            dpdk_sys_offsetof_rte_mbuf_next(),
        )
    };
    assert_eq!(size_of::<rte_mbuf>(), size);
    assert_eq!(offset_of!(rte_mbuf, data_off), data_off);
    assert_eq!(offset_of!(rte_mbuf, pkt_len), pkt_len);
    assert_eq!(offset_of!(rte_mbuf, next), next);
}

#[test]
fn ethdev_struct_sizes_match_c() {
    // SAFETY: sizeof probes, no side effects.
    unsafe {
        assert_eq!(size_of::<rte_eth_conf>(), dpdk_sys_sizeof_rte_eth_conf());
        assert_eq!(
            size_of::<rte_eth_dev_info>(),
            dpdk_sys_sizeof_rte_eth_dev_info()
        );
        assert_eq!(size_of::<rte_eth_stats>(), dpdk_sys_sizeof_rte_eth_stats());
    }
    assert_eq!(size_of::<rte_ether_addr>(), 6);
    assert_eq!(size_of::<rte_ether_hdr>(), 14);
}

#[test]
fn mbuf_constants() {
    assert_eq!(RTE_PKTMBUF_HEADROOM, 128);
    // SAFETY: returns a compile-time constant.
    assert_eq!(unsafe { dpdk_sys_pktmbuf_headroom() }, RTE_PKTMBUF_HEADROOM);
    assert_eq!(RTE_MBUF_DEFAULT_DATAROOM, 2048);
    assert_eq!(
        RTE_MBUF_DEFAULT_BUF_SIZE,
        RTE_MBUF_DEFAULT_DATAROOM + RTE_PKTMBUF_HEADROOM
    );
    let _: u64 = RTE_MBUF_F_TX_IP_CKSUM;
    assert_eq!(RTE_MBUF_F_TX_IPV4, 1 << 55);
    assert_eq!(RTE_MBUF_F_TX_IP_CKSUM, 1 << 54);
    assert_eq!(RTE_MBUF_F_TX_TCP_CKSUM, 1 << 52);
    assert_eq!(RTE_MBUF_F_TX_TCP_SEG, 1 << 50);
    assert_eq!(RTE_MBUF_F_RX_IP_CKSUM_GOOD, 1 << 7);
    assert_eq!(RTE_MBUF_F_RX_L4_CKSUM_GOOD, 1 << 8);
    assert_eq!(RTE_MBUF_F_RX_L4_CKSUM_BAD, 1 << 3);
    assert_eq!(RTE_PTYPE_L4_TCP, 0x100);
}

#[test]
fn ethdev_constants() {
    // RTE_BIT64(n) macros, evaluated through bindgen's clang fallback.
    assert_eq!(RTE_ETH_RX_OFFLOAD_IPV4_CKSUM, 1 << 1);
    assert_eq!(RTE_ETH_RX_OFFLOAD_TCP_CKSUM, 1 << 3);
    assert_eq!(RTE_ETH_RX_OFFLOAD_SCATTER, 1 << 13);
    assert_eq!(
        RTE_ETH_RX_OFFLOAD_CHECKSUM,
        RTE_ETH_RX_OFFLOAD_IPV4_CKSUM | RTE_ETH_RX_OFFLOAD_UDP_CKSUM | RTE_ETH_RX_OFFLOAD_TCP_CKSUM
    );
    assert_eq!(RTE_ETH_TX_OFFLOAD_IPV4_CKSUM, 1 << 1);
    assert_eq!(RTE_ETH_TX_OFFLOAD_TCP_CKSUM, 1 << 3);
    assert_eq!(RTE_ETH_TX_OFFLOAD_TCP_TSO, 1 << 5);
    assert_eq!(RTE_ETH_TX_OFFLOAD_MULTI_SEGS, 1 << 15);
    assert_eq!(RTE_ETH_TX_OFFLOAD_MBUF_FAST_FREE, 1 << 16);
    assert_eq!(RTE_ETH_RSS_L3_SRC_ONLY, 1 << 63);
    assert_eq!(RTE_ETH_MQ_RX_NONE, 0);
    assert_eq!(RTE_ETH_LINK_UP, 1);
    assert_eq!(RTE_MAX_ETHPORTS, 32);
    assert_eq!(RTE_ETHER_ADDR_LEN, 6);
    assert_eq!(RTE_ETHER_TYPE_IPV4, 0x0800);
    assert_eq!(SOCKET_ID_ANY, -1);
    assert_eq!(LCORE_ID_ANY, u32::MAX);
    assert_eq!(RING_F_SP_ENQ, 1);
    assert_eq!(RING_F_SC_DEQ, 2);
    let conf = rte_eth_conf::default();
    assert_eq!(conf.rxmode.mq_mode, RTE_ETH_MQ_RX_NONE);
    assert_eq!(conf.txmode.offloads, 0);
}

#[test]
fn errno_shim_is_per_thread() {
    // SAFETY: set/get of the calling thread's rte_errno thread-local.
    unsafe { dpdk_sys_set_errno(17) };
    assert_eq!(rte_errno(), 17);
    std::thread::spawn(|| assert_eq!(rte_errno(), 0))
        .join()
        .unwrap();
    // SAFETY: as above.
    unsafe { dpdk_sys_set_errno(0) };
    assert_eq!(rte_errno(), 0);
    assert!(!strerror(22).is_empty());
}

#[test]
fn static_inline_wrapper_links() {
    // rte_lcore_id() is a static inline reading a thread-local; in a thread EAL never
    // saw it is LCORE_ID_ANY. Calling it proves the generated wrapper is compiled and
    // linked under the Rust name.
    std::thread::spawn(|| {
        // SAFETY: rte_lcore_id only reads the calling thread's lcore id.
        assert_eq!(unsafe { rte_lcore_id() }, LCORE_ID_ANY);
    })
    .join()
    .unwrap();
    // SAFETY: rte_rdtsc reads the TSC, no other effect.
    let (a, b) = unsafe { (rte_rdtsc(), rte_rdtsc()) };
    assert!(b >= a);
}

#[test]
fn mtod_helpers_match_the_c_macros() {
    let mut buf = [0u8; 256];
    let m = rte_mbuf {
        buf_addr: buf.as_mut_ptr().cast(),
        buf_len: 256,
        data_off: 128,
        data_len: 60,
        pkt_len: 100,
        ..Default::default()
    };
    let p: *const rte_mbuf = &m;
    // SAFETY: `m` is a valid (if fake, EAL-less) mbuf whose buffer is `buf`; the shim and
    // the helpers only compute addresses and read fields.
    unsafe {
        assert_eq!(pktmbuf_mtod::<u8>(p), buf.as_mut_ptr().add(128));
        assert_eq!(pktmbuf_mtod::<u8>(p).cast(), dpdk_sys_pktmbuf_mtod(p));
        assert_eq!(
            pktmbuf_mtod_offset::<u8>(p, 14).cast(),
            dpdk_sys_pktmbuf_mtod_offset(p, 14)
        );
        assert_eq!(pktmbuf_data_len(p), 60);
        assert_eq!(dpdk_sys_pktmbuf_data_len(p), 60);
        assert_eq!(pktmbuf_pkt_len(p), 100);
        assert_eq!(dpdk_sys_pktmbuf_pkt_len(p), 100);
        // SAFETY: as above; these static inline wrappers only read the fields.
        assert_eq!(rte_pktmbuf_headroom(p), 128);
        assert_eq!(rte_pktmbuf_tailroom(p), 256 - 128 - 60);
    }
}
