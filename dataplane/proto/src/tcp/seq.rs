//! Sequence-number arithmetic modulo 2^32 (RFC 9293 section 3.4).
//!
//! The engine keeps every sequence position as a `u64` *offset* from ISS (send side) or
//! IRS (receive side): offset 0 is the SYN, stream octet `k` is offset `k + 1`, and the FIN
//! follows the last octet. Offsets never wrap; only the conversion to and from the 32-bit
//! wire value does, and it is done here with wrapping arithmetic only.
//! `smoltcp`'s `TcpSeqNumber` operators panic on "negative" differences, so they are not
//! used on values that come from the network.

use smoltcp::wire::TcpSeqNumber;

/// The wire sequence number `off` octets after `base`.
#[inline]
pub(crate) fn seq_at(base: TcpSeqNumber, off: u64) -> TcpSeqNumber {
    // Truncation to 32 bits is the modulo-2^32 of RFC 9293 3.4.
    TcpSeqNumber(base.0.wrapping_add(off as u32 as i32))
}

/// `a - b` as a signed distance in sequence space (valid when |a - b| < 2^31).
#[inline]
pub(crate) fn seq_diff(a: TcpSeqNumber, b: TcpSeqNumber) -> i64 {
    i64::from(a.0.wrapping_sub(b.0))
}

/// The offset of wire sequence number `seq`, given that offset `ref_off` has wire value
/// `ref_seq`. May be negative (before the base) for hostile or stale segments.
#[inline]
pub(crate) fn off_of(ref_off: u64, ref_seq: TcpSeqNumber, seq: TcpSeqNumber) -> i64 {
    (ref_off as i64).wrapping_add(seq_diff(seq, ref_seq))
}

/// Signed comparison of two 32-bit timestamps (RFC 7323 section 5.3: "less than" modulo
/// 2^32).
#[inline]
pub(crate) fn ts_lt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps() {
        let base = TcpSeqNumber(-5); // 0xFFFF_FFFB
        let s = seq_at(base, 10);
        assert_eq!(s.0 as u32, 5);
        assert_eq!(seq_diff(s, base), 10);
        assert_eq!(seq_diff(base, s), -10);
        assert_eq!(off_of(100, s, base), 90);
        assert!(ts_lt(u32::MAX, 1));
        assert!(!ts_lt(1, u32::MAX));
    }
}
