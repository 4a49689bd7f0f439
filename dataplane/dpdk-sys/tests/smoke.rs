//! End-to-end smoke test of the bindings against a live EAL and the `net_null` PMD.
//!
//! `rte_eal_init` succeeds once per process, so this binary holds exactly one test.
//! It needs root (it skips otherwise, and fails under `CI=true`), no hugepages, and touches no real network
//! device: `--no-pci` and a single `net_null` virtual device.

#![cfg(feature = "dpdk")]

use core::ffi::CStr;
use core::ptr;

use dpdk_sys::*;

/// EALREADY on Linux: what a second `rte_eal_init` leaves in `rte_errno`.
const EALREADY: i32 = 114;
/// EEXIST on Linux.
const EEXIST: i32 = 17;

fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|l| l.split_whitespace().nth(1).map(|euid| euid == "0"))
        })
        .unwrap_or(false)
}

fn check(what: &str, ret: i32) {
    assert!(
        ret >= 0,
        "{what} failed: {ret} ({}), rte_errno {}",
        strerror(-ret),
        rte_errno()
    );
}

#[test]
fn eal_null_pmd_end_to_end() {
    if !running_as_root() {
        // Under CI a skip would hide that the test never ran.
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("the DPDK EAL smoke test needs root, and CI must run it");
        }
        eprintln!("skipped: not root (the DPDK EAL smoke test needs root)");
        return;
    }

    let prefix = format!("--file-prefix=dpdk-sys-smoke-{}", std::process::id());
    let args = [
        "dpdk-sys-smoke",
        "--no-huge",
        "-m",
        "256",
        "--no-pci",
        "-l",
        "0",
        "--vdev=net_null0",
        "--no-shconf",
        prefix.as_str(),
        "--no-telemetry",
        "--log-level=notice",
    ];
    eprintln!("EAL args: {}", args[1..].join(" "));
    // SAFETY: first and only EAL initialisation of this test process, from this thread.
    let consumed = unsafe { eal_init(&args) }
        .unwrap_or_else(|e| panic!("rte_eal_init failed: {} ({e})", strerror(e)));
    assert_eq!(consumed as usize, args.len() - 1);
    // SAFETY: EAL is initialised; the string is copied before cleanup frees it.
    let runtime_dir = unsafe { CStr::from_ptr(rte_eal_get_runtime_dir()) }
        .to_string_lossy()
        .into_owned();

    // SAFETY: from here on every call follows DPDK's contracts: EAL is initialised, this
    // thread is the main lcore, and every pointer passed is either DPDK's own (pool,
    // mbufs, ring) while alive or points to a live local of the right type.
    unsafe {
        assert_eq!(rte_lcore_id(), 0, "main lcore is 0 with -l 0");
        assert_eq!(rte_lcore_count(), 1);
        assert_eq!(rte_eal_process_type(), RTE_PROC_PRIMARY);
        assert_eq!(rte_eal_has_hugepages(), 0);

        // Port: the one net_null device.
        assert_eq!(rte_eth_dev_count_avail(), 1);
        let mut port: u16 = u16::MAX;
        check(
            "rte_eth_dev_get_port_by_name",
            rte_eth_dev_get_port_by_name(c"net_null0".as_ptr(), &mut port),
        );
        let mut info = rte_eth_dev_info::default();
        check(
            "rte_eth_dev_info_get",
            rte_eth_dev_info_get(port, &mut info),
        );
        let driver = CStr::from_ptr(info.driver_name).to_string_lossy();
        assert!(driver.contains("null"), "driver {driver}");
        assert!(info.max_rx_queues >= 1 && info.max_tx_queues >= 1);

        // Mempool of mbufs.
        let pool = rte_pktmbuf_pool_create(
            c"dpdk_sys_smoke".as_ptr(),
            1023,
            32,
            0,
            RTE_MBUF_DEFAULT_BUF_SIZE as u16,
            SOCKET_ID_ANY,
        );
        assert!(!pool.is_null(), "pool: {}", strerror(rte_errno()));
        // Same name again: NULL and rte_errno == EEXIST through the shim.
        let dup = rte_pktmbuf_pool_create(
            c"dpdk_sys_smoke".as_ptr(),
            63,
            0,
            0,
            RTE_MBUF_DEFAULT_BUF_SIZE as u16,
            SOCKET_ID_ANY,
        );
        assert!(dup.is_null());
        assert_eq!(rte_errno(), EEXIST);

        // Configure 1 rx + 1 tx queue and start.
        let conf = rte_eth_conf::default();
        check(
            "rte_eth_dev_configure",
            rte_eth_dev_configure(port, 1, 1, &conf),
        );
        let socket = rte_eth_dev_socket_id(port);
        let socket = if socket < 0 { 0 } else { socket as u32 };
        check(
            "rte_eth_rx_queue_setup",
            rte_eth_rx_queue_setup(port, 0, 128, socket, ptr::null(), pool),
        );
        check(
            "rte_eth_tx_queue_setup",
            rte_eth_tx_queue_setup(port, 0, 128, socket, ptr::null()),
        );
        check("rte_eth_dev_start", rte_eth_dev_start(port));
        let mut mac = rte_ether_addr::default();
        check("rte_eth_macaddr_get", rte_eth_macaddr_get(port, &mut mac));
        let mut link = rte_eth_link::default();
        check(
            "rte_eth_link_get_nowait",
            rte_eth_link_get_nowait(port, &mut link),
        );
        assert_eq!(u32::from(link.link_status()), RTE_ETH_LINK_UP);

        // Allocate and fill mbufs.
        const N: usize = 8;
        let mut tx: [*mut rte_mbuf; N] = [ptr::null_mut(); N];
        check(
            "rte_pktmbuf_alloc_bulk",
            rte_pktmbuf_alloc_bulk(pool, tx.as_mut_ptr(), N as u32),
        );
        for (i, &m) in tx.iter().enumerate() {
            assert_eq!(rte_pktmbuf_headroom(m), RTE_PKTMBUF_HEADROOM as u16);
            let data = rte_pktmbuf_append(m, 64).cast::<u8>();
            assert!(!data.is_null());
            assert_eq!(data, dpdk_sys_pktmbuf_mtod(m).cast());
            assert_eq!(data, pktmbuf_mtod::<u8>(m));
            core::slice::from_raw_parts_mut(data, 64).fill(i as u8);
            assert_eq!(dpdk_sys_pktmbuf_data_len(m), 64);
            assert_eq!(pktmbuf_pkt_len(m), 64);
            assert_ne!(dpdk_sys_pktmbuf_iova(m), 0);
            assert_eq!(*pktmbuf_mtod_offset::<u8>(m, 63), i as u8);
        }

        // prepend/adj/trim/chain/refcnt on two more mbufs.
        let a = rte_pktmbuf_alloc(pool);
        let b = rte_pktmbuf_alloc(pool);
        assert!(!a.is_null() && !b.is_null());
        assert!(!rte_pktmbuf_append(a, 100).is_null());
        let hdr = rte_pktmbuf_prepend(a, 14).cast::<u8>();
        assert_eq!(hdr, dpdk_sys_pktmbuf_mtod(a).cast());
        assert_eq!(rte_pktmbuf_headroom(a), RTE_PKTMBUF_HEADROOM as u16 - 14);
        assert!(!rte_pktmbuf_adj(a, 14).is_null());
        check("rte_pktmbuf_trim", rte_pktmbuf_trim(a, 10));
        assert_eq!(pktmbuf_pkt_len(a), 90);
        assert!(!rte_pktmbuf_append(b, 50).is_null());
        check("rte_pktmbuf_chain", rte_pktmbuf_chain(a, b));
        assert_eq!(dpdk_sys_pktmbuf_pkt_len(a), 140);
        assert_eq!((*a).nb_segs, 2);
        assert_eq!(rte_mbuf_refcnt_read(a), 1);
        rte_mbuf_refcnt_update(a, 1);
        assert_eq!(rte_mbuf_refcnt_read(a), 2);
        rte_pktmbuf_free(a); // drops the extra reference only
        assert_eq!(rte_mbuf_refcnt_read(a), 1);
        rte_pktmbuf_free(a); // frees both segments

        // tx: net_null counts and frees what it is given.
        let sent = rte_eth_tx_burst(port, 0, tx.as_mut_ptr(), N as u16);
        assert_eq!(usize::from(sent), N, "net_null accepts every packet");
        for &m in &tx[usize::from(sent)..] {
            rte_pktmbuf_free(m);
        }

        // rx: net_null hands out packets allocated from the rx queue's pool.
        let mut rx: [*mut rte_mbuf; 32] = [ptr::null_mut(); 32];
        let got = rte_eth_rx_burst(port, 0, rx.as_mut_ptr(), rx.len() as u16);
        assert!(got > 0, "net_null returns packets");
        for &m in &rx[..usize::from(got)] {
            assert!(pktmbuf_pkt_len(m) > 0);
            assert_eq!((*m).port, port);
            rte_pktmbuf_free(m);
        }

        let mut stats = rte_eth_stats::default();
        check("rte_eth_stats_get", rte_eth_stats_get(port, &mut stats));
        assert_eq!(stats.opackets, N as u64);
        assert_eq!(stats.ipackets, u64::from(got));
        eprintln!(
            "port {port} ({driver}) mac {:02x?}: tx {} rx {} link {} Mb/s",
            mac.addr_bytes, stats.opackets, stats.ipackets, link.link_speed
        );

        // Ring burst enqueue/dequeue (static inline wrappers).
        let ring = rte_ring_create(
            c"dpdk_sys_smoke_ring".as_ptr(),
            64,
            SOCKET_ID_ANY,
            RING_F_SP_ENQ | RING_F_SC_DEQ,
        );
        assert!(!ring.is_null(), "ring: {}", strerror(rte_errno()));
        let mut objs: [*mut core::ffi::c_void; 5] =
            core::array::from_fn(|i| ptr::without_provenance_mut(0x1000 * (i + 1)));
        let enq = rte_ring_enqueue_burst(ring, objs.as_ptr(), 5, ptr::null_mut());
        assert_eq!(enq, 5);
        assert_eq!(rte_ring_count(ring), 5);
        let mut out = [ptr::null_mut(); 8];
        let deq = rte_ring_dequeue_burst(ring, out.as_mut_ptr(), 8, ptr::null_mut());
        assert_eq!(deq, 5);
        assert_eq!(&out[..5], &objs[..]);
        objs.fill(ptr::null_mut());
        assert_eq!(rte_ring_empty(ring), 1);
        rte_ring_free(ring);

        // Every mbuf went back to the pool.
        assert_eq!(rte_mempool_avail_count(pool), 1023);

        check("rte_eth_dev_stop", rte_eth_dev_stop(port));
        check("rte_eth_dev_close", rte_eth_dev_close(port));
        rte_mempool_free(pool);
    }

    // SAFETY: every DPDK object made above is released; no other thread uses DPDK.
    assert_eq!(unsafe { rte_eal_cleanup() }, 0);
    // --no-shconf leaves an empty runtime dir (/var/run/dpdk/<prefix>) behind; remove
    // it (remove_dir only succeeds on an empty directory).
    let _ = std::fs::remove_dir(&runtime_dir);
    // Once per process: a second init fails with EALREADY, even after cleanup (EAL logs
    // "already called initialization").
    // SAFETY: rte_eal_init returns before touching anything when it has already run.
    assert_eq!(unsafe { eal_init(&args) }, Err(EALREADY));
}
