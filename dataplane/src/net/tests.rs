//! Tests of Ethernet/ARP/IPv4/ICMP handling.
