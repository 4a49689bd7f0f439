//! Several cores, share-nothing: which core owns a flow, and the software fallback that
//! hands a frame to its owner when the device put it on another core's queue.
//!
//! Each core of a group owns the TCP connections whose 4-tuple the group's [`Rss`] maps
//! to its index, from SYN to close: their table entries, timers, TIME-WAIT and rings live
//! on that core only. A NIC programmed with the same key and indirection table (the DPDK
//! port does that) delivers every segment of a flow to its owner's queue, and an active
//! open picks a local port whose hash maps to the opening core, so the peer's answers
//! come back to it. Nothing is shared on that path.
//!
//! Where the device cannot steer like that (one receive queue for several cores, a PMD
//! without RSS, or a kernel fan-out that hashes differently, as af_packet's), a frame may
//! arrive on a core that does not own its flow. That core does not process it: it copies
//! it into the owner's inbox, a bounded single-consumer ring, and the owner takes it in
//! its next poll ([`CoreStats::handed_off`](super::CoreStats::handed_off)). A full inbox
//! drops the frame and counts it (TCP retransmits it). ARP frames, which every core needs
//! to resolve its peers, are copied to every other core, which learns from them without
//! answering.

use std::sync::Arc;

use crossbeam::queue::ArrayQueue;
use proto::tcp::FourTuple;
use wire::rss::Rss;

use crate::port::RxChecksum;

/// Frames an inbox holds by default.
pub const DEFAULT_INBOX: usize = 4096;

/// A frame one core received for another.
#[derive(Debug)]
pub(crate) struct Handed {
    pub(crate) frame: Vec<u8>,
    pub(crate) verdict: RxChecksum,
    /// A copy of an ARP frame another core handled: learn from it, do not answer it.
    pub(crate) arp_copy: bool,
}

/// One core's place in a group of cores: its index, the group's flow hash and the
/// inboxes of every core.
#[derive(Debug, Clone)]
pub struct Steering {
    index: usize,
    rss: Arc<Rss>,
    inboxes: Arc<[ArrayQueue<Handed>]>,
}

impl Steering {
    /// A group of `rss.queues()` cores (core `i` polls queue `i` of each port), each
    /// inbox holding `inbox` frames: element `i` is core `i`'s.
    pub fn group(rss: Rss, inbox: usize) -> Vec<Steering> {
        let n = rss.queues();
        let rss = Arc::new(rss);
        let inboxes: Arc<[ArrayQueue<Handed>]> =
            (0..n).map(|_| ArrayQueue::new(inbox.max(1))).collect();
        (0..n)
            .map(|index| Steering {
                index,
                rss: rss.clone(),
                inboxes: inboxes.clone(),
            })
            .collect()
    }

    /// This core's index in the group.
    pub fn index(&self) -> usize {
        self.index
    }

    /// Cores in the group.
    pub fn cores(&self) -> usize {
        self.inboxes.len()
    }

    /// The group's flow hash.
    pub fn rss(&self) -> &Rss {
        &self.rss
    }

    /// The core that owns the flow of `tuple` (ours: local, theirs: remote), computed as
    /// the NIC hashes a packet the peer sends.
    pub fn owner(&self, tuple: &FourTuple) -> usize {
        self.rss.queue_ipv4_tcp(
            tuple.remote_addr,
            tuple.local_addr,
            tuple.remote_port,
            tuple.local_port,
        )
    }

    /// Whether this core owns the flow of `tuple`.
    pub fn owns(&self, tuple: &FourTuple) -> bool {
        self.cores() == 1 || self.owner(tuple) == self.index
    }

    /// Copies `frame` into core `to`'s inbox; false when it is full.
    pub(crate) fn hand(&self, to: usize, frame: &[u8], verdict: RxChecksum) -> bool {
        self.inboxes[to]
            .push(Handed {
                frame: frame.to_vec(),
                verdict,
                arp_copy: false,
            })
            .is_ok()
    }

    /// Copies an ARP frame into every other core's inbox; returns how many were full.
    pub(crate) fn copy_arp(&self, frame: &[u8]) -> u64 {
        let mut full = 0;
        for (i, inbox) in self.inboxes.iter().enumerate() {
            if i != self.index
                && inbox
                    .push(Handed {
                        frame: frame.to_vec(),
                        verdict: RxChecksum::Unknown,
                        arp_copy: true,
                    })
                    .is_err()
            {
                full += 1;
            }
        }
        full
    }

    /// The next frame handed to this core.
    pub(crate) fn take(&self) -> Option<Handed> {
        self.inboxes[self.index].pop()
    }
}
