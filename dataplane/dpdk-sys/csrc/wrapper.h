/*
 * The headers dpdk-sys binds (DPDK 22.11 as packaged by Debian). rte_config.h comes
 * first through `-include rte_config.h` in DPDK's pkg-config cflags.
 */
#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_ether.h>
#include <rte_launch.h>
#include <rte_lcore.h>
#include <rte_malloc.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <rte_ring.h>

#include "shim.h"
