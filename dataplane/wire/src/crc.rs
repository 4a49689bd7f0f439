//! CRC32c (Castagnoli) as MPA uses it (RFC 5044 section 4.4, iSCSI conventions).
//!
//! One small surface so the implementation can be swapped: [`crc32c`] for a whole buffer
//! and [`Crc32c`] for a digest fed piece by piece. The value is the finished CRC-32C
//! (reflected, initial value and final XOR all ones). On the wire MPA sends it least
//! significant octet first: use [`to_wire`] and [`from_wire`].
//!
//! Backed by the project's kernels ([`fastpath::kernels`]), which pick the fastest one for
//! the CPU at run time (VPCLMULQDQ + AVX2 folding, PCLMULQDQ, the SSE4.2 `crc32`
//! instruction, or a portable table); the framer and the receive path use the same
//! kernels fused with the copy and the one's complement sum.

use fastpath::kernels;

/// CRC-32C of `data`.
#[inline]
pub fn crc32c(data: &[u8]) -> u32 {
    kernels::crc32c_append(0, data)
}

/// The four CRC field octets of an FPDU for the CRC-32C value `crc` (least significant
/// octet first, as iSCSI digests and every deployed iWARP peer send it).
#[inline]
pub const fn to_wire(crc: u32) -> [u8; 4] {
    crc.to_le_bytes()
}

/// The CRC-32C value carried by the four CRC field octets of an FPDU.
#[inline]
pub const fn from_wire(field: [u8; 4]) -> u32 {
    u32::from_le_bytes(field)
}

/// An incremental CRC-32C: feed it pieces with [`Crc32c::update`], read it with
/// [`Crc32c::finish`].
#[derive(Clone, Default)]
pub struct Crc32c {
    /// The finished CRC-32C of everything fed so far.
    value: u32,
}

impl Crc32c {
    /// A new digest over no data.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `data` to the digest.
    #[inline]
    pub fn update(&mut self, data: &[u8]) {
        self.value = kernels::crc32c_append(self.value, data);
    }

    /// The CRC-32C of everything fed so far (the digest can still be fed afterwards).
    #[inline]
    pub fn finish(&self) -> u32 {
        self.value
    }

    /// Returns the CRC-32C of everything fed so far and starts over.
    #[inline]
    pub fn finish_reset(&mut self) -> u32 {
        std::mem::take(&mut self.value)
    }
}

impl std::fmt::Debug for Crc32c {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Crc32c")
            .field("value", &self.finish())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A bitwise reference implementation of CRC-32C (reflected polynomial 0x82F63B78).
    fn reference(data: &[u8]) -> u32 {
        let mut crc = !0u32;
        for &b in data {
            crc ^= u32::from(b);
            for _ in 0..8 {
                crc = if crc & 1 != 0 {
                    (crc >> 1) ^ 0x82F6_3B78
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }

    #[test]
    fn check_value_of_the_catalogue() {
        // CRC-32/ISCSI check value for "123456789".
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
    }

    #[test]
    fn rfc3720_test_vectors() {
        // iSCSI (RFC 3720 B.4): 32 octets of zeros, of ones, incrementing, decrementing.
        assert_eq!(crc32c(&[0u8; 32]), 0x8A91_36AA);
        assert_eq!(crc32c(&[0xFFu8; 32]), 0x62A8_AB43);
        let inc: Vec<u8> = (0..32).collect();
        assert_eq!(crc32c(&inc), 0x46DD_794E);
        let dec: Vec<u8> = (0..32).rev().collect();
        assert_eq!(crc32c(&dec), 0x113F_DB5C);
        // The digest of 32 zero octets is sent as AA 36 91 8A.
        assert_eq!(to_wire(crc32c(&[0u8; 32])), [0xAA, 0x36, 0x91, 0x8A]);
        assert_eq!(from_wire([0xAA, 0x36, 0x91, 0x8A]), 0x8A91_36AA);
    }

    proptest! {
        #[test]
        fn matches_bitwise_reference_and_incremental(data in proptest::collection::vec(any::<u8>(), 0..3000), cut in 0usize..3000) {
            let cut = cut.min(data.len());
            prop_assert_eq!(crc32c(&data), reference(&data));
            let mut d = Crc32c::new();
            d.update(&data[..cut]);
            d.update(&data[cut..]);
            prop_assert_eq!(d.finish(), reference(&data));
            prop_assert_eq!(d.finish_reset(), reference(&data));
            prop_assert_eq!(d.finish(), reference(&[]));
        }
    }
}
