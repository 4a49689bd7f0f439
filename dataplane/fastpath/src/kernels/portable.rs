//! The portable kernel: slicing-by-8 tables for the CRC, a 64-bit word sum with the carries
//! kept in a `u128`, and a plain word-by-word copy, all through raw pointers. It builds on
//! every target and is what Miri runs.

use super::consts::TABLES;
use super::sum;

/// Advances the reflected CRC register `reg` over the 8 octets of `w` (read little-endian).
#[inline(always)]
fn crc_word(reg: u32, w: u64) -> u32 {
    let lo = reg ^ w as u32;
    let hi = (w >> 32) as u32;
    TABLES[7][(lo & 0xff) as usize]
        ^ TABLES[6][(lo >> 8 & 0xff) as usize]
        ^ TABLES[5][(lo >> 16 & 0xff) as usize]
        ^ TABLES[4][(lo >> 24) as usize]
        ^ TABLES[3][(hi & 0xff) as usize]
        ^ TABLES[2][(hi >> 8 & 0xff) as usize]
        ^ TABLES[1][(hi >> 16 & 0xff) as usize]
        ^ TABLES[0][(hi >> 24) as usize]
}

/// Advances the reflected CRC register `reg` over one octet.
#[inline(always)]
fn crc_octet(reg: u32, b: u8) -> u32 {
    (reg >> 8) ^ TABLES[0][((reg ^ u32::from(b)) & 0xff) as usize]
}

/// Advances the finished CRC32c `crc` over `len` octets at `src`, takes their one's
/// complement sum (if `SUM`, else 0) and copies them to `dst` (if `COPY`).
///
/// Every octet is read once, and the value read is the one copied, added to the CRC and
/// to the sum.
///
/// # Safety
///
/// `src` is valid for reads of `len` octets; if `COPY`, `dst` is valid for writes of `len`
/// octets and the two ranges do not overlap. Neither needs any alignment.
pub(super) unsafe fn run<const COPY: bool, const SUM: bool>(
    dst: *mut u8,
    src: *const u8,
    len: usize,
    crc: u32,
) -> (u32, u64) {
    let mut reg = !crc;
    let mut acc: u128 = 0;
    let mut off = 0;
    while len - off >= 8 {
        // SAFETY: `off + 8 <= len`, inside the range the caller vouches for (unaligned
        // read, so no alignment is needed).
        let raw = unsafe { src.add(off).cast::<u64>().read_unaligned() };
        if COPY {
            // SAFETY: as above, for the destination range.
            unsafe { dst.add(off).cast::<u64>().write_unaligned(raw) };
        }
        let w = u64::from_le(raw);
        reg = crc_word(reg, w);
        if SUM {
            acc += u128::from(w);
        }
        off += 8;
    }
    let mut w: u64 = 0;
    let mut shift = 0;
    while off < len {
        // SAFETY: `off < len`, inside both ranges.
        let b = unsafe { src.add(off).read() };
        if COPY {
            // SAFETY: as above.
            unsafe { dst.add(off).write(b) };
        }
        reg = crc_octet(reg, b);
        w |= u64::from(b) << shift;
        shift += 8;
        off += 1;
    }
    if SUM {
        acc += u128::from(w);
    }
    (!reg, if SUM { sum::finish(acc) } else { 0 })
}
