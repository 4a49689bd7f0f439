//! Arithmetic in `GF(2)[x]` modulo the CRC32c polynomial, evaluated at compile time: the
//! tables of the portable kernel and the multipliers of the carry-less-multiply kernels
//! are derived here rather than pasted, and the tests below check the derivations against
//! the bitwise CRC.
//!
//! Two representations appear:
//!
//! * *normal*: bit `i` of the integer is the coefficient of `x^i` (what [`xpow_mod`]
//!   returns; the polynomial is `x^32 + POLY`);
//! * *reflected*, as the CRC runs over the wire: the first bit of the message (bit 0 of its
//!   first octet) is the highest power. A `w`-bit reflected word holds the coefficient of
//!   `x^(w-1-j)` in bit `j`; the CRC register (32 bits) and the operands of `PCLMULQDQ`
//!   (64 bits) are read this way.

/// The CRC32c (Castagnoli) polynomial in normal form, without its `x^32` term.
pub(crate) const POLY: u32 = 0x1EDC_6F41;

/// The same polynomial reflected (the form the shift-right CRC loop uses).
pub(crate) const POLY_REFLECTED: u32 = POLY.reverse_bits();

/// `x^n mod P`, normal form.
// (The multipliers are for the x86-64 kernels only; the tests check them everywhere.)
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) const fn xpow_mod(n: u32) -> u32 {
    let mut v: u32 = 1;
    let mut i = 0;
    while i < n {
        let carry = v & 0x8000_0000 != 0;
        v <<= 1;
        if carry {
            v ^= POLY;
        }
        i += 1;
    }
    v
}

/// `x^n mod P` as a 64-bit reflected `PCLMULQDQ` operand (the coefficient of `x^i` in bit
/// `63 - i`, so bits 32..=63).
///
/// The carry-less product of two 64-bit reflected words `a` and `b` is the 128-bit
/// reflected word of `a·b·x`: bit `k` of the product holds `x^(126-k)`, where a 128-bit
/// reflected word holds `x^(127-k)`. Hence the `- 1` in the exponents of [`fold_pair`].
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) const fn clmul_operand(n: u32) -> u64 {
    (xpow_mod(n) as u64).reverse_bits()
}

/// The multipliers that fold a 128-bit block of the message forward by `bits` bits (onto
/// the block that many bits later), as `(for quadword 0, for quadword 1)`.
///
/// A 16-octet block `A` read as a 128-bit reflected word is `H·x^64 + L`, with `H` its
/// first 8 octets (quadword 0) and `L` the last 8 (quadword 1), each a 64-bit reflected
/// word. Moved `D = bits` bits on, `A·x^D = H·x^(64+D) + L·x^D`, which is congruent modulo
/// P to `clmul(H, x^(63+D) mod P) ^ clmul(L, x^(D-1) mod P)` (each product carries one more
/// `x`, see [`clmul_operand`]), a value below `x^96` that fits the 128-bit block it is
/// XORed into.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) const fn fold_pair(bits: u32) -> (u64, u64) {
    (clmul_operand(bits + 63), clmul_operand(bits - 1))
}

/// The multiplier that shifts a CRC register `r` over `octets` octets of zeros (`r·x^(8n)
/// mod P`): `x^(8n-33) mod P` as a 32-bit reflected word.
///
/// The carry-less product of two 32-bit reflected words is the 64-bit reflected word `t`
/// of `r·k·x`, and `crc32(0, t)` (the instruction's CRC of a 64-bit word into a zero
/// register) is `t·x^32 mod P = r·k·x^33 mod P`.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) const fn shift_operand(octets: u32) -> u32 {
    xpow_mod(8 * octets - 33).reverse_bits()
}

/// The byte-at-a-time table of the reflected CRC (`TABLES[0]`) and the seven tables that
/// advance one to seven octets further, for slicing-by-8: `TABLES[k][b]` is the register
/// change due to octet `b` followed by `k` zero octets.
pub(crate) static TABLES: [[u32; 256]; 8] = slicing_tables();

const fn slicing_tables() -> [[u32; 256]; 8] {
    let mut t = [[0u32; 256]; 8];
    let mut b = 0;
    while b < 256 {
        let mut r = b as u32;
        let mut i = 0;
        while i < 8 {
            r = if r & 1 != 0 {
                (r >> 1) ^ POLY_REFLECTED
            } else {
                r >> 1
            };
            i += 1;
        }
        t[0][b] = r;
        b += 1;
    }
    let mut k = 1;
    while k < 8 {
        let mut b = 0;
        while b < 256 {
            let prev = t[k - 1][b];
            t[k][b] = (prev >> 8) ^ t[0][(prev & 0xff) as usize];
            b += 1;
        }
        k += 1;
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::tests::{crc_raw_bitwise, Rng};

    /// Multiplication modulo P in normal form, bit by bit (a second way to get `x^n mod P`).
    fn mulmod(a: u32, b: u32) -> u32 {
        let mut r: u64 = 0;
        for i in 0..32 {
            if b >> i & 1 != 0 {
                r ^= u64::from(a) << i;
            }
        }
        for i in (32..64).rev() {
            if r >> i & 1 != 0 {
                r ^= (u64::from(POLY) | 1 << 32) << (i - 32);
            }
        }
        r as u32
    }

    /// Carry-less 64×64 multiplication, the software `PCLMULQDQ`.
    fn clmul(a: u64, b: u64) -> u128 {
        (0..64)
            .filter(|i| b >> i & 1 != 0)
            .fold(0u128, |r, i| r ^ u128::from(a) << i)
    }

    #[test]
    fn xpow_mod_by_squaring_agrees() {
        for n in 0..3000u32 {
            // Square and multiply over the bits of n.
            let (mut r, mut base, mut e) = (1u32, 2u32, n);
            while e != 0 {
                if e & 1 != 0 {
                    r = mulmod(r, base);
                }
                base = mulmod(base, base);
                e >>= 1;
            }
            assert_eq!(xpow_mod(n), r, "x^{n}");
        }
        assert_eq!(POLY_REFLECTED, 0x82F6_3B78);
    }

    #[test]
    fn tables_agree_with_bitwise() {
        for b in 0..=255u8 {
            for (k, table) in TABLES.iter().enumerate() {
                let mut msg = vec![0u8; k + 1];
                msg[0] = b;
                assert_eq!(
                    table[b as usize],
                    crc_raw_bitwise(0, &msg),
                    "table {k}, {b}"
                );
            }
        }
    }

    /// Folding a block forward by `bits` with [`fold_pair`], in software, leaves the CRC of
    /// "block, then `bits/8` zero octets" unchanged: the derivation above, checked.
    #[test]
    fn fold_pairs_fold() {
        let mut rng = Rng(0x5eed);
        for bits in (128..=2048).step_by(128) {
            let (k0, k1) = fold_pair(bits);
            for _ in 0..50 {
                let block: [u8; 16] = rng.bytes();
                let h = u64::from_le_bytes(block[..8].try_into().unwrap());
                let l = u64::from_le_bytes(block[8..].try_into().unwrap());
                let folded = clmul(h, k0) ^ clmul(l, k1);
                let mut msg = block.to_vec();
                msg.resize(16 + bits as usize / 8, 0);
                let reg: u32 = rng.next() as u32;
                assert_eq!(
                    crc_raw_bitwise(reg, &msg),
                    // The register shifts over the same number of octets either way.
                    crc_raw_bitwise(
                        reg,
                        &[vec![0; bits as usize / 8], folded.to_le_bytes().to_vec()].concat()
                    ),
                    "fold by {bits}"
                );
            }
        }
    }

    /// [`shift_operand`] with the CRC instruction's finish (modelled bitwise) shifts a
    /// register over zeros.
    #[test]
    fn shift_operands_shift() {
        let mut rng = Rng(0xc0ffee);
        for octets in [5u32, 8, 16, 64, 128, 256, 1000, 1024, 2048, 4096] {
            let k = shift_operand(octets);
            for _ in 0..20 {
                let r = rng.next() as u32;
                let t = clmul(u64::from(r), u64::from(k)) as u64;
                assert_eq!(
                    crc_raw_bitwise(0, &t.to_le_bytes()),
                    crc_raw_bitwise(r, &vec![0; octets as usize]),
                    "shift by {octets}"
                );
            }
        }
    }
}
