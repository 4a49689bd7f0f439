//! Initial sequence numbers (RFC 6528) and per-connection timestamp offsets
//! (RFC 7323 section 5.4).

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, DefaultHasher, Hash, Hasher};

use super::FourTuple;
use smoltcp::wire::TcpSeqNumber;

/// Generates initial sequence numbers as RFC 6528 section 3 prescribes:
/// `ISN = M + F(localip, localport, remoteip, remoteport, secretkey)`.
///
/// * `M` is a clock ticking every 4 microseconds (the injected time divided by 4).
/// * `F` is SipHash (std's [`DefaultHasher`], SipHash-1-3) over a 128-bit secret key
///   followed by the 4-tuple. The secret goes first in the hashed message, which for a
///   fixed-length input behaves as a keyed PRF; an attacker who does not know the key
///   cannot predict `F` for a 4-tuple from the ISNs of others.
///
/// The same key also derives each connection's timestamp offset (RFC 7323 section 5.4),
/// so TSval does not reveal the host clock. Use [`IsnGenerator::random`] in production and
/// [`IsnGenerator::with_key`] for reproducible tests. Rekey (make a new generator) at most
/// rarely: a new key can make ISNs of a reused 4-tuple overlap an old incarnation.
#[derive(Clone)]
pub struct IsnGenerator {
    key: [u64; 2],
}

impl std::fmt::Debug for IsnGenerator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the secret.
        f.write_str("IsnGenerator { .. }")
    }
}

impl IsnGenerator {
    /// A generator with the given 128-bit secret key (RFC 6528 section 3 "secretkey").
    pub fn with_key(key: [u8; 16]) -> Self {
        let mut lo = [0u8; 8];
        let mut hi = [0u8; 8];
        lo.copy_from_slice(&key[..8]);
        hi.copy_from_slice(&key[8..]);
        IsnGenerator {
            key: [u64::from_le_bytes(lo), u64::from_le_bytes(hi)],
        }
    }

    /// A generator with a secret key drawn from the process's random hashing seed
    /// (std's `RandomState`, seeded by the operating system).
    pub fn random() -> Self {
        let a = RandomState::new().hash_one(0x6528u32);
        let b = RandomState::new().hash_one(0x7323u32);
        IsnGenerator { key: [a, b] }
    }

    fn f(&self, domain: u8, t: &FourTuple) -> u64 {
        let mut h = DefaultHasher::new();
        h.write_u64(self.key[0]);
        h.write_u64(self.key[1]);
        h.write_u8(domain);
        t.hash(&mut h);
        h.finish()
    }

    /// The ISN for a connection on `tuple` at time `now_us` (microseconds).
    pub fn isn(&self, now_us: u64, tuple: &FourTuple) -> TcpSeqNumber {
        let m = (now_us / 4) as u32;
        TcpSeqNumber(m.wrapping_add(self.f(0, tuple) as u32) as i32)
    }

    /// Where a host's ephemeral port search starts, `0..range` (RFC 6056 3.3: a random
    /// start, so a restarted process does not reuse its last run's 4-tuples, which a
    /// peer may still hold in TIME-WAIT or, like siw, in some other state).
    pub fn ephemeral_offset(&self, range: u16) -> u16 {
        let mut h = DefaultHasher::new();
        h.write_u64(self.key[0]);
        h.write_u64(self.key[1]);
        h.write_u8(2);
        (h.finish() % u64::from(range.max(1))) as u16
    }

    /// The random offset added to this connection's timestamp clock (RFC 7323 5.4).
    pub fn ts_offset(&self, tuple: &FourTuple) -> u32 {
        self.f(1, tuple) as u32
    }

    /// The MAC of a SYN cookie ([`super::cookie`]): the same keyed PRF over the 4-tuple,
    /// the peer's ISN, the cookie clock and the MSS index.
    pub(crate) fn cookie_mac(&self, tuple: &FourTuple, irs: u32, counter: u32, mss: u32) -> u32 {
        let mut h = DefaultHasher::new();
        h.write_u64(self.key[0]);
        h.write_u64(self.key[1]);
        h.write_u8(3);
        tuple.hash(&mut h);
        h.write_u32(irs);
        h.write_u32(counter);
        h.write_u32(mss);
        (h.finish() >> 16) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use smoltcp::wire::Ipv4Address;

    #[test]
    fn ephemeral_start_is_keyed_and_in_range() {
        let a = IsnGenerator::with_key([1; 16]);
        let b = IsnGenerator::with_key([2; 16]);
        assert_eq!(a.ephemeral_offset(16383), a.ephemeral_offset(16383));
        assert_ne!(a.ephemeral_offset(16383), b.ephemeral_offset(16383));
        for k in 0..64u8 {
            assert!(IsnGenerator::with_key([k; 16]).ephemeral_offset(16383) < 16383);
        }
        assert_eq!(a.ephemeral_offset(0), 0);
    }

    fn tuple(port: u16) -> FourTuple {
        FourTuple {
            local_addr: Ipv4Address::new(10, 0, 0, 1),
            local_port: port,
            remote_addr: Ipv4Address::new(10, 0, 0, 2),
            remote_port: 4791,
        }
    }

    #[test]
    fn keyed_and_clocked() {
        let g = IsnGenerator::with_key([7; 16]);
        let h = IsnGenerator::with_key([8; 16]);
        let t = tuple(1000);
        assert_eq!(g.isn(0, &t), g.isn(0, &t));
        assert_ne!(g.isn(0, &t), h.isn(0, &t));
        assert_ne!(g.isn(0, &t), g.isn(0, &tuple(1001)));
        // M advances one per 4 us.
        assert_eq!(g.isn(400, &t).0.wrapping_sub(g.isn(0, &t).0), 100);
        assert_ne!(g.ts_offset(&t), g.isn(0, &t).0 as u32);
        assert_eq!(format!("{g:?}"), "IsnGenerator { .. }");
        let _ = IsnGenerator::random();
    }
}
