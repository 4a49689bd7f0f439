/* dpdk-sys C shim: see shim.h. Compiled with DPDK's pkg-config cflags. */
#include <stddef.h>

#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>

#include "shim.h"

int dpdk_sys_errno(void) { return rte_errno; }

void dpdk_sys_set_errno(int value) { rte_errno = value; }

void *dpdk_sys_pktmbuf_mtod(const struct rte_mbuf *m) { return rte_pktmbuf_mtod(m, void *); }

void *dpdk_sys_pktmbuf_mtod_offset(const struct rte_mbuf *m, size_t off)
{
	return rte_pktmbuf_mtod_offset(m, void *, off);
}

uint64_t dpdk_sys_pktmbuf_iova(const struct rte_mbuf *m) { return rte_pktmbuf_iova(m); }

uint16_t dpdk_sys_pktmbuf_data_len(const struct rte_mbuf *m) { return rte_pktmbuf_data_len(m); }

uint32_t dpdk_sys_pktmbuf_pkt_len(const struct rte_mbuf *m) { return rte_pktmbuf_pkt_len(m); }

void dpdk_sys_pktmbuf_tx_ipv4_tcp_cksum(struct rte_mbuf *m, uint8_t l2_len, uint16_t l3_len,
					uint8_t l4_len)
{
	m->ol_flags |= RTE_MBUF_F_TX_IPV4 | RTE_MBUF_F_TX_IP_CKSUM | RTE_MBUF_F_TX_TCP_CKSUM;
	m->l2_len = l2_len;
	m->l3_len = l3_len;
	m->l4_len = l4_len;
}

void dpdk_sys_pktmbuf_tx_ipv4_tcp_tso(struct rte_mbuf *m, uint8_t l2_len, uint16_t l3_len,
				      uint8_t l4_len, uint16_t tso_segsz)
{
	m->ol_flags |= RTE_MBUF_F_TX_IPV4 | RTE_MBUF_F_TX_IP_CKSUM | RTE_MBUF_F_TX_TCP_SEG;
	m->l2_len = l2_len;
	m->l3_len = l3_len;
	m->l4_len = l4_len;
	m->tso_segsz = tso_segsz;
}

uint64_t dpdk_sys_pktmbuf_ol_flags(const struct rte_mbuf *m) { return m->ol_flags; }

uint32_t dpdk_sys_pktmbuf_headroom(void) { return RTE_PKTMBUF_HEADROOM; }

size_t dpdk_sys_sizeof_rte_mbuf(void) { return sizeof(struct rte_mbuf); }

size_t dpdk_sys_offsetof_rte_mbuf_data_off(void) { return offsetof(struct rte_mbuf, data_off); }

size_t dpdk_sys_offsetof_rte_mbuf_pkt_len(void) { return offsetof(struct rte_mbuf, pkt_len); }

size_t dpdk_sys_offsetof_rte_mbuf_next(void) { return offsetof(struct rte_mbuf, next); }

size_t dpdk_sys_sizeof_rte_eth_conf(void) { return sizeof(struct rte_eth_conf); }

size_t dpdk_sys_sizeof_rte_eth_dev_info(void) { return sizeof(struct rte_eth_dev_info); }

size_t dpdk_sys_sizeof_rte_eth_stats(void) { return sizeof(struct rte_eth_stats); }
