//! Raw FFI bindings to DPDK 22.11 as packaged by Debian (`libdpdk-dev`), generated with
//! bindgen at build time, plus a small C shim.
//!
//! # What is bound
//!
//! A tight allowlist over `rte_eal.h`, `rte_ethdev.h`, `rte_ether.h`, `rte_mbuf.h`,
//! `rte_mempool.h`, `rte_ring.h`, `rte_lcore.h`, `rte_launch.h`, `rte_errno.h` and
//! `rte_cycles.h`:
//!
//! - functions `rte_eal_*`, `rte_eth_*`, `rte_pktmbuf_*`, `rte_mbuf_*`, `rte_mempool_*`,
//!   `rte_ring_*` (pointer rings; not the `_elem`, HTS/RTS or zero-copy variants),
//!   `rte_lcore_*`, `rte_get_next_lcore`, `rte_get_main_lcore`,
//!   `rte_socket_id`, `rte_socket_count`, `rte_thread_register`/`unregister`,
//!   `rte_strerror`, `rte_rdtsc`, `rte_rdtsc_precise`, `rte_get_tsc_cycles`,
//!   `rte_get_tsc_hz`, and the types they use (`rte_mbuf`, `rte_mempool`, `rte_ring`,
//!   `rte_eth_conf`, `rte_eth_dev_info`, `rte_eth_stats`, `rte_eth_link`,
//!   `rte_ether_addr`, ...; plus `rte_ether_hdr`);
//! - DPDK's `static inline` fast path (`rte_eth_rx_burst`, `rte_eth_tx_burst`,
//!   `rte_eth_tx_prepare`, `rte_pktmbuf_alloc`, `rte_pktmbuf_alloc_bulk`,
//!   `rte_pktmbuf_free`, `rte_pktmbuf_append`, `rte_pktmbuf_prepend`, `rte_pktmbuf_adj`,
//!   `rte_pktmbuf_trim`, `rte_pktmbuf_chain`, `rte_pktmbuf_read`, `rte_mbuf_refcnt_*`,
//!   `rte_ring_[mp_|sp_]enqueue[_bulk|_burst]` / `rte_ring_[mc_|sc_]dequeue[_bulk|_burst]`
//!   on rings of pointers, `rte_mempool_get`/`put`, `rte_lcore_id`, ...). These
//!   have no symbol in DPDK's shared libraries: bindgen's `wrap_static_fns` writes a C
//!   file with one non-inline wrapper (`<name>__extern`) per function, the build script
//!   compiles it with DPDK's cflags, and the Rust declarations carry
//!   `#[link_name = "<name>__extern"]`, so Rust calls them under their DPDK names. Each
//!   costs one extra (direct) call; no cross-language inlining happens;
//! - constants: `RTE_PKTMBUF_HEADROOM`, `RTE_MBUF_DEFAULT_BUF_SIZE`,
//!   `RTE_MBUF_DEFAULT_DATAROOM`, `RTE_MBUF_F_*` (`ol_flags`, as `u64`), `RTE_PTYPE_*`,
//!   `RTE_ETH_RX_OFFLOAD_*`/`RTE_ETH_TX_OFFLOAD_*`/`RTE_ETH_RSS_*` (as `u64`),
//!   `RTE_ETH_LINK_*`, `RTE_ETH_SPEED_NUM_*`, `RTE_ETHER_*`, `RTE_MAX_ETHPORTS`,
//!   `RTE_MAX_LCORE`, `RTE_MEMPOOL_*`, `RING_F_*`, `SOCKET_ID_ANY`, `LCORE_ID_ANY`. C enum
//!   values keep their C names (`RTE_ETH_MQ_RX_NONE`, `RTE_PROC_PRIMARY`, ...);
//! - the C shim (`csrc/shim.c`) for what is a macro or a thread-local in C:
//!   [`dpdk_sys_errno`]/[`dpdk_sys_set_errno`] (`rte_errno`),
//!   [`dpdk_sys_pktmbuf_mtod`], [`dpdk_sys_pktmbuf_mtod_offset`],
//!   [`dpdk_sys_pktmbuf_iova`], [`dpdk_sys_pktmbuf_data_len`],
//!   [`dpdk_sys_pktmbuf_pkt_len`], and sizeof/offsetof probes used by the layout tests;
//! - hand-written Rust helpers: [`rte_errno`], [`strerror`], [`eal_init`], and inline
//!   [`pktmbuf_mtod`], [`pktmbuf_mtod_offset`], [`pktmbuf_data_len`],
//!   [`pktmbuf_pkt_len`] (the same as the C macros, without a call per packet).
//!
//! Not bound: `rte_flow` (bindgen cannot lay out parts of it), `rte_arp.h`, crypto,
//! event, and everything else outside the allowlist; widen the lists in `build.rs`
//! when a new function is needed.
//!
//! # Installing what the build needs
//!
//! ```text
//! apt-get install libdpdk-dev libclang-dev
//! ```
//!
//! DPDK is found through pkg-config (`libdpdk`, at least 22.11) and linked dynamically
//! with the pkg-config libs; bindgen dlopens libclang (set `LIBCLANG_PATH` if it lives
//! outside the usual LLVM directories). Without `libdpdk-dev` the build stops with the
//! line above. The default cargo feature `dpdk` does all this; with
//! `--no-default-features` this crate is empty, needs neither package, and the
//! pure-Rust parts of the workspace still build.
//!
//! # EAL arguments (facts established on Debian bookworm)
//!
//! - Without hugepages: `--no-huge -m 256 --no-pci -l 0 --vdev=net_null0` works (also
//!   `--vdev=net_af_packet0,iface=IF` or `--vdev=net_tap0,iface=NAME`). Always pass
//!   `--no-pci`: nothing here should probe or grab a real NIC.
//! - Because DPDK is linked dynamically, EAL loads every PMD (net_null, net_tap,
//!   net_af_packet, the `ring` mempool driver, ...) from Debian's plugin directory by
//!   itself: do not pass `-d`.
//! - `--no-huge` cannot be combined with `--in-memory`.
//! - A second DPDK process on the machine needs `--no-shconf` or its own
//!   `--file-prefix`; the tests pass both (`--file-prefix` unique per process) and
//!   `--no-telemetry`.
//! - `rte_eal_init` succeeds once per process: later calls, even after
//!   `rte_eal_cleanup`, fail with `rte_errno == EALREADY`. So keep EAL tests to one test
//!   function (this crate's smoke test is `tests/smoke.rs`, a binary of its own).
//! - `-l 0` pins the calling thread (the EAL main lcore) to CPU 0.
//!
//! # Safety
//!
//! Everything from the bindings is `unsafe` to call and follows DPDK's own contracts
//! (pointer validity, lcore/thread rules, EAL initialized first). Only the helpers that
//! cannot break memory safety are safe functions.

// Without the `dpdk` feature the items linked from the docs above do not exist.
#![cfg_attr(not(feature = "dpdk"), allow(rustdoc::broken_intra_doc_links))]

#[cfg(feature = "dpdk")]
#[allow(
    non_upper_case_globals,
    non_camel_case_types,
    non_snake_case,
    dead_code,
    missing_docs,
    clippy::all
)]
mod bindings {
    include!(concat!(env!("OUT_DIR"), "/bindings.rs"));
}

#[cfg(feature = "dpdk")]
pub use bindings::*;

#[cfg(feature = "dpdk")]
mod helpers;

#[cfg(feature = "dpdk")]
pub use helpers::*;

#[cfg(all(test, feature = "dpdk"))]
mod tests;
