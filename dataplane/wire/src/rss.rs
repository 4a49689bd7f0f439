//! Receive-side scaling: the Toeplitz hash NICs use to spread flows over receive queues,
//! and the indirection table (RETA) from hash to queue.
//!
//! A multi-core dataplane computes the same hash as its NIC, so that a core knows which
//! flows the NIC sends to it, and picks the local port of an active open so that the
//! peer's answers land on the core that opened it (the technique of mTCP and Seastar).
//! With [`SYMMETRIC_KEY`] the hash of a flow is the same in both directions, so two hosts
//! with the same number of queues and the same table place a connection on cores of the
//! same index.
//!
//! The input for IPv4/TCP is the one Microsoft's RSS specification gives and DPDK's
//! `RTE_ETH_RSS_NONFRAG_IPV4_TCP` uses: source address, destination address, source port,
//! destination port, all in network order, as the packet carries them.

use std::fmt;
use std::net::Ipv4Addr;

/// Length of a Toeplitz key for IPv4 (and the 40 octets most NICs take).
pub const KEY_LEN: usize = 40;

/// A key whose Toeplitz hash of an IPv4/TCP flow does not change when source and
/// destination are swapped: `0x6d5a` repeated (Woo and Park, "Scalable TCP Session
/// Monitoring with Symmetric Receive-side Scaling", 2012). Its 16-bit period makes the
/// 32-bit-aligned address swap and the 16-bit port swap cancel out.
pub const SYMMETRIC_KEY: [u8; KEY_LEN] = {
    let mut k = [0u8; KEY_LEN];
    let mut i = 0;
    while i < KEY_LEN {
        k[i] = if i % 2 == 0 { 0x6d } else { 0x5a };
        i += 1;
    }
    k
};

/// Microsoft's example key (the RSS verification suite's, and many NICs' default).
pub const MICROSOFT_KEY: [u8; KEY_LEN] = [
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0,
    0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c,
    0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
];

/// Octets of the IPv4/TCP hash input.
const INPUT_LEN: usize = 12;

/// The Toeplitz hash of `input` under `key`, bit by bit: the reference the table-driven
/// [`Toeplitz`] is checked against. `key` must be at least `input.len() + 4` octets.
pub fn toeplitz_reference(key: &[u8], input: &[u8]) -> u32 {
    let mut hash = 0u32;
    for (i, &b) in input.iter().enumerate() {
        for bit in 0..8 {
            if b & (0x80 >> bit) != 0 {
                // The 32 key bits starting at input bit 8 * i + bit.
                let mut w = 0u64;
                for k in 0..5 {
                    w = (w << 8) | u64::from(*key.get(i + k).unwrap_or(&0));
                }
                hash ^= (w >> (8 - bit)) as u32;
            }
        }
    }
    hash
}

/// The Toeplitz hash of a 12-octet IPv4/TCP input, by table: one lookup per input octet.
#[derive(Clone)]
pub struct Toeplitz {
    key: [u8; KEY_LEN],
    /// `table[i][b]`: the hash contribution of octet value `b` at input position `i`.
    table: Box<[[u32; 256]; INPUT_LEN]>,
}

impl fmt::Debug for Toeplitz {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Toeplitz").field("key", &self.key).finish()
    }
}

impl Toeplitz {
    /// The hash under `key`.
    pub fn new(key: [u8; KEY_LEN]) -> Self {
        let mut table = Box::new([[0u32; 256]; INPUT_LEN]);
        for (i, row) in table.iter_mut().enumerate() {
            for (b, slot) in row.iter_mut().enumerate() {
                let mut input = [0u8; INPUT_LEN];
                input[i] = b as u8;
                *slot = toeplitz_reference(&key, &input);
            }
        }
        Toeplitz { key, table }
    }

    /// The key.
    pub fn key(&self) -> &[u8; KEY_LEN] {
        &self.key
    }

    /// The hash of a 12-octet input.
    pub fn hash(&self, input: &[u8; INPUT_LEN]) -> u32 {
        input
            .iter()
            .zip(self.table.iter())
            .fold(0, |h, (&b, row)| h ^ row[usize::from(b)])
    }

    /// The hash of an IPv4/TCP packet from `src:sport` to `dst:dport`.
    pub fn hash_ipv4_tcp(&self, src: Ipv4Addr, dst: Ipv4Addr, sport: u16, dport: u16) -> u32 {
        let mut input = [0u8; INPUT_LEN];
        input[..4].copy_from_slice(&src.octets());
        input[4..8].copy_from_slice(&dst.octets());
        input[8..10].copy_from_slice(&sport.to_be_bytes());
        input[10..12].copy_from_slice(&dport.to_be_bytes());
        self.hash(&input)
    }
}

/// Why an [`Rss`] cannot be built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RssError {
    /// No queues.
    NoQueues,
    /// The indirection table is empty or names a queue that does not exist.
    BadTable,
}

impl fmt::Display for RssError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RssError::NoQueues => f.write_str("RSS needs at least one queue"),
            RssError::BadTable => {
                f.write_str("the RSS indirection table is empty or names a missing queue")
            }
        }
    }
}

impl std::error::Error for RssError {}

/// A NIC's receive-side scaling: hash and indirection table. A packet goes to queue
/// `reta[hash % reta.len()]` (DPDK: `hash & (reta_size - 1)` with a power-of-two size,
/// the same thing); packets that are not IPv4/TCP go to queue 0.
#[derive(Debug, Clone)]
pub struct Rss {
    hash: Toeplitz,
    reta: Vec<u16>,
    queues: usize,
}

/// The indirection-table size used when none is given (DPDK's most common `reta_size`).
pub const DEFAULT_RETA_SIZE: usize = 128;

impl Rss {
    /// `queues` queues under `key`, with the usual round-robin table of
    /// [`DEFAULT_RETA_SIZE`] entries (entry `i` is queue `i % queues`).
    pub fn new(key: [u8; KEY_LEN], queues: usize) -> Result<Self, RssError> {
        if queues == 0 {
            return Err(RssError::NoQueues);
        }
        let reta = (0..DEFAULT_RETA_SIZE.max(queues))
            .map(|i| (i % queues) as u16)
            .collect();
        Self::with_table(key, queues, reta)
    }

    /// `queues` queues under `key` with indirection table `reta`.
    pub fn with_table(key: [u8; KEY_LEN], queues: usize, reta: Vec<u16>) -> Result<Self, RssError> {
        if queues == 0 {
            return Err(RssError::NoQueues);
        }
        if reta.is_empty() || reta.iter().any(|&q| usize::from(q) >= queues) {
            return Err(RssError::BadTable);
        }
        Ok(Rss {
            hash: Toeplitz::new(key),
            reta,
            queues,
        })
    }

    /// Symmetric hashing ([`SYMMETRIC_KEY`]) over `queues` queues.
    pub fn symmetric(queues: usize) -> Result<Self, RssError> {
        Self::new(SYMMETRIC_KEY, queues)
    }

    /// Number of queues.
    pub fn queues(&self) -> usize {
        self.queues
    }

    /// The key.
    pub fn key(&self) -> &[u8; KEY_LEN] {
        self.hash.key()
    }

    /// The indirection table.
    pub fn reta(&self) -> &[u16] {
        &self.reta
    }

    /// The queue of an IPv4/TCP packet from `src:sport` to `dst:dport`.
    pub fn queue_ipv4_tcp(&self, src: Ipv4Addr, dst: Ipv4Addr, sport: u16, dport: u16) -> usize {
        if self.queues == 1 {
            return 0;
        }
        let h = self.hash.hash_ipv4_tcp(src, dst, sport, dport);
        usize::from(self.reta[h as usize % self.reta.len()])
    }

    /// The queue of an Ethernet frame: IPv4/TCP (unfragmented, whole headers) by hash,
    /// anything else queue 0.
    pub fn queue_of_frame(&self, frame: &[u8]) -> usize {
        if self.queues == 1 {
            return 0;
        }
        match ipv4_tcp_ports(frame) {
            Some((src, dst, sport, dport)) => self.queue_ipv4_tcp(src, dst, sport, dport),
            None => 0,
        }
    }
}

/// Addresses and ports of an Ethernet/IPv4/TCP frame (not a fragment), as RSS reads them.
pub fn ipv4_tcp_ports(frame: &[u8]) -> Option<(Ipv4Addr, Ipv4Addr, u16, u16)> {
    const ETH: usize = 14;
    if frame.len() < ETH + 20 || frame[12..14] != [0x08, 0x00] {
        return None;
    }
    let ip = &frame[ETH..];
    if ip[0] >> 4 != 4 || ip[9] != 6 {
        return None;
    }
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    // More fragments, or a fragment offset: no ports to hash.
    if u16::from_be_bytes([ip[6], ip[7]]) & 0x3fff != 0 || ihl < 20 || ip.len() < ihl + 4 {
        return None;
    }
    let src = Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
    let dst = Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
    let sport = u16::from_be_bytes([ip[ihl], ip[ihl + 1]]);
    let dport = u16::from_be_bytes([ip[ihl + 2], ip[ihl + 3]]);
    Some((src, dst, sport, dport))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn a(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }

    /// Microsoft's RSS verification suite, IPv4 with TCP ports (source, destination,
    /// expected hash).
    #[test]
    fn microsoft_verification_vectors() {
        let t = Toeplitz::new(MICROSOFT_KEY);
        let cases = [
            ("66.9.149.187", 2794, "161.142.100.80", 1766, 0x51cc_c178u32),
            ("199.92.111.2", 14230, "65.69.140.83", 4739, 0xc626_b0ea),
            ("24.19.198.95", 12898, "12.22.207.184", 38024, 0x5c2b_394a),
            ("38.27.205.30", 48228, "209.142.163.6", 2217, 0xafc7_327f),
            ("153.39.163.191", 44251, "202.188.127.2", 1303, 0x10e8_28a2),
        ];
        for (src, sp, dst, dp, want) in cases {
            assert_eq!(
                t.hash_ipv4_tcp(a(src), a(dst), sp, dp),
                want,
                "{src} -> {dst}"
            );
            let mut input = [0u8; 12];
            input[..4].copy_from_slice(&a(src).octets());
            input[4..8].copy_from_slice(&a(dst).octets());
            input[8..10].copy_from_slice(&sp.to_be_bytes());
            input[10..].copy_from_slice(&dp.to_be_bytes());
            assert_eq!(toeplitz_reference(&MICROSOFT_KEY, &input), want);
        }
    }

    #[test]
    fn bad_tables_are_refused() {
        assert_eq!(Rss::new(SYMMETRIC_KEY, 0).unwrap_err(), RssError::NoQueues);
        assert_eq!(
            Rss::with_table(SYMMETRIC_KEY, 2, vec![]).unwrap_err(),
            RssError::BadTable
        );
        assert_eq!(
            Rss::with_table(SYMMETRIC_KEY, 2, vec![0, 2]).unwrap_err(),
            RssError::BadTable
        );
    }

    #[test]
    fn non_tcp_frames_go_to_queue_0() {
        let rss = Rss::symmetric(4).unwrap();
        let mut arp = vec![0u8; 42];
        arp[12] = 0x08;
        arp[13] = 0x06;
        assert_eq!(rss.queue_of_frame(&arp), 0);
        assert_eq!(rss.queue_of_frame(&[0u8; 3]), 0);
    }

    fn tcp_frame(src: [u8; 4], dst: [u8; 4], sp: u16, dp: u16) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + 20];
        f[12] = 0x08;
        f[14] = 0x45;
        f[14 + 9] = 6;
        f[14 + 12..14 + 16].copy_from_slice(&src);
        f[14 + 16..14 + 20].copy_from_slice(&dst);
        f[34..36].copy_from_slice(&sp.to_be_bytes());
        f[36..38].copy_from_slice(&dp.to_be_bytes());
        f
    }

    proptest! {
        #[test]
        fn table_matches_reference(key in proptest::array::uniform32(any::<u8>()),
                                   tail in proptest::array::uniform8(any::<u8>()),
                                   input in proptest::array::uniform12(any::<u8>())) {
            let mut k = [0u8; KEY_LEN];
            k[..32].copy_from_slice(&key);
            k[32..].copy_from_slice(&tail);
            prop_assert_eq!(Toeplitz::new(k).hash(&input), toeplitz_reference(&k, &input));
        }

        #[test]
        fn symmetric_key_is_symmetric(src in any::<[u8; 4]>(), dst in any::<[u8; 4]>(),
                                      sp in any::<u16>(), dp in any::<u16>()) {
            let t = Toeplitz::new(SYMMETRIC_KEY);
            let (s, d) = (Ipv4Addr::from(src), Ipv4Addr::from(dst));
            prop_assert_eq!(t.hash_ipv4_tcp(s, d, sp, dp), t.hash_ipv4_tcp(d, s, dp, sp));
        }

        #[test]
        fn frames_hash_like_their_ports(src in any::<[u8; 4]>(), dst in any::<[u8; 4]>(),
                                        sp in any::<u16>(), dp in any::<u16>(), q in 1usize..9) {
            let rss = Rss::symmetric(q).unwrap();
            let f = tcp_frame(src, dst, sp, dp);
            let want = rss.queue_ipv4_tcp(src.into(), dst.into(), sp, dp);
            prop_assert!(want < q);
            prop_assert_eq!(rss.queue_of_frame(&f), want);
        }
    }
}
