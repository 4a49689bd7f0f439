/*
 * dpdk-sys C shim: what bindgen cannot bind by itself.
 *
 * DPDK exposes a few essentials as macros or thread-local variables, which have no
 * symbol to link against: rte_errno (an __thread variable behind a macro),
 * rte_pktmbuf_mtod()/rte_pktmbuf_mtod_offset()/rte_pktmbuf_iova()/rte_pktmbuf_data_len()/
 * rte_pktmbuf_pkt_len() (macros). The functions below are real symbols wrapping them.
 * A few sizeof/offsetof helpers let the Rust tests check bindgen's layouts against the
 * C compiler that builds the rest of the shim (with DPDK's own cflags).
 */
#ifndef DPDK_SYS_SHIM_H
#define DPDK_SYS_SHIM_H

#include <stddef.h>
#include <stdint.h>

struct rte_mbuf;

/* rte_errno of the calling thread. */
int dpdk_sys_errno(void);
/* Set rte_errno of the calling thread. */
void dpdk_sys_set_errno(int value);

/* rte_pktmbuf_mtod(m, void *): start of the data in the first segment. */
void *dpdk_sys_pktmbuf_mtod(const struct rte_mbuf *m);
/* rte_pktmbuf_mtod_offset(m, void *, off). */
void *dpdk_sys_pktmbuf_mtod_offset(const struct rte_mbuf *m, size_t off);
/* rte_pktmbuf_iova(m): IO address of the data in the first segment. */
uint64_t dpdk_sys_pktmbuf_iova(const struct rte_mbuf *m);
/* rte_pktmbuf_data_len(m): data length of the first segment. */
uint16_t dpdk_sys_pktmbuf_data_len(const struct rte_mbuf *m);
/* rte_pktmbuf_pkt_len(m): total packet length (all segments). */
uint32_t dpdk_sys_pktmbuf_pkt_len(const struct rte_mbuf *m);

/* Ask for IPv4 header and TCP checksum offload on a frame of an Ethernet header of l2_len
 * octets, an IPv4 header of l3_len octets and a TCP header of l4_len octets: sets
 * RTE_MBUF_F_TX_IPV4, RTE_MBUF_F_TX_IP_CKSUM and RTE_MBUF_F_TX_TCP_CKSUM and the
 * l2_len/l3_len/l4_len bit-fields (net_tap needs l4_len even without TSO). */
void dpdk_sys_pktmbuf_tx_ipv4_tcp_cksum(struct rte_mbuf *m, uint8_t l2_len, uint16_t l3_len,
					uint8_t l4_len);
/* Asks the device to cut an IPv4/TCP frame (headers as for
 * dpdk_sys_pktmbuf_tx_ipv4_tcp_cksum) into segments of tso_segsz payload octets: sets
 * RTE_MBUF_F_TX_IPV4, RTE_MBUF_F_TX_IP_CKSUM and RTE_MBUF_F_TX_TCP_SEG (which implies the
 * TCP checksum), the l2_len/l3_len/l4_len bit-fields and tso_segsz. The TCP checksum field
 * must hold the pseudo-header sum without the length. */
void dpdk_sys_pktmbuf_tx_ipv4_tcp_tso(struct rte_mbuf *m, uint8_t l2_len, uint16_t l3_len,
				      uint8_t l4_len, uint16_t tso_segsz);
/* The mbuf's ol_flags (the receive checksum verdicts among them). */
uint64_t dpdk_sys_pktmbuf_ol_flags(const struct rte_mbuf *m);

/* RTE_PKTMBUF_HEADROOM as the C compiler sees it. */
uint32_t dpdk_sys_pktmbuf_headroom(void);
/* sizeof(struct rte_mbuf) as the C compiler sees it. */
size_t dpdk_sys_sizeof_rte_mbuf(void);
/* offsetof(struct rte_mbuf, data_off). */
size_t dpdk_sys_offsetof_rte_mbuf_data_off(void);
/* offsetof(struct rte_mbuf, pkt_len). */
size_t dpdk_sys_offsetof_rte_mbuf_pkt_len(void);
/* offsetof(struct rte_mbuf, next) (start of the second cache line's fields). */
size_t dpdk_sys_offsetof_rte_mbuf_next(void);
/* sizeof(struct rte_eth_conf). */
size_t dpdk_sys_sizeof_rte_eth_conf(void);
/* sizeof(struct rte_eth_dev_info). */
size_t dpdk_sys_sizeof_rte_eth_dev_info(void);
/* sizeof(struct rte_eth_stats). */
size_t dpdk_sys_sizeof_rte_eth_stats(void);

#endif /* DPDK_SYS_SHIM_H */
