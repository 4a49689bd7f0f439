//! The one's complement sum as the kernels keep it.
//!
//! Inside a kernel the octets are added as little-endian 32- or 64-bit words (wider words
//! are congruent to the sum of their 16-bit halves modulo `0xffff`, since `2^16 ≡ 1`), with
//! every carry kept (`u128`, or 64-bit SIMD lanes that take at most 33 bits per add). The
//! value handed out is folded with end-around carry to below `2^33`, so callers can add
//! billions of them in a `u64`. A fold never makes a nonzero sum zero, so the final 16-bit
//! value (0 only for all-zero data, else `1..=0xffff`) is that of RFC 1071.

/// Folds a 128-bit word sum to a `u64` below `2^33`, congruent modulo `0xffff` and zero
/// only if `acc` is.
#[inline]
pub(super) fn finish(acc: u128) -> u64 {
    let (s, carry) = (acc as u64).overflowing_add((acc >> 64) as u64);
    // No second carry: with a carry, `s` is below the high half, which is below 2^64 - 1.
    reduce(s + u64::from(carry))
}

/// Folds a `u64` sum to below `2^33` (end-around carry at bit 32).
#[inline]
pub(super) fn reduce(s: u64) -> u64 {
    (s & 0xffff_ffff) + (s >> 32)
}
