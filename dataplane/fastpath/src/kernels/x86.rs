//! The x86-64 kernels: [`avx512`] (512-bit carry-less folding), [`vpclmul`] (256-bit
//! carry-less folding, and for the CRC alone `crc32` streams beside it), [`pclmul`]
//! (128-bit folding), [`sse42_three`] and [`sse42_one`] (the `crc32` instruction, three
//! streams recombined by a carry-less multiply, or one); and the marked copies
//! [`avx512_marked`] and [`vpclmul_marked`]; and the strided copy that takes markers out,
//! [`copy_strided_avx512`].
//!
//! Each is an `unsafe fn` with `#[target_feature]`, called only once the features are
//! detected (see `Kernel::is_available`). All take raw pointers, and all but the strided
//! copy (a copy alone, from a received frame no other thread writes, whose vectors
//! overlap at the ends of a run) read every octet of the source exactly once: the vector or word loaded is the one stored to the
//! destination, folded into the CRC and added to the sum, so the three agree even if the
//! source changes under us (registered memory that another thread writes).
//!
//! The folded kernels work on the CRC register (the complement of the finished CRC): it is
//! XORed into the first 4 octets of the first block, the blocks are folded together into
//! one 128-bit remainder congruent to the run so far (see `consts::fold_pair`), and that
//! remainder's two quadwords, then the octets left over, go through the `crc32`
//! instruction with a zero register.

use core::arch::x86_64::*;

use super::consts::{fold_pair, shift_operand};
use super::sum;

// ---------------------------------------------------------------------------------------
// Shared pieces: the word-at-a-time tail with the `crc32` instruction.

/// Runs the octets `[off, len)` through the `crc32` instruction 8 at a time (then 4, 2, 1),
/// advancing the register `reg`, adding them to `acc` as little-endian 64-bit words (the
/// last one zero-padded) if `SUM` and copying them if `COPY`. `off` must be a multiple of
/// 8 when `SUM` (so the words line up with the run's 16-bit words).
///
/// # Safety
///
/// `src` is valid for reads of `len` octets; if `COPY`, `dst` is valid for writes of `len`
/// octets and does not overlap it; `off <= len`.
#[inline]
#[target_feature(enable = "sse4.2")]
unsafe fn tail<const COPY: bool, const SUM: bool>(
    dst: *mut u8,
    src: *const u8,
    mut off: usize,
    len: usize,
    reg: u32,
    acc: &mut u128,
) -> u32 {
    let mut reg = u64::from(reg);
    while len - off >= 8 {
        // SAFETY: `off + 8 <= len`: inside the source range (an unaligned read).
        let w = unsafe { src.add(off).cast::<u64>().read_unaligned() };
        if COPY {
            // SAFETY: as above, for the destination range.
            unsafe { dst.add(off).cast::<u64>().write_unaligned(w) };
        }
        reg = _mm_crc32_u64(reg, w);
        if SUM {
            *acc += u128::from(w);
        }
        off += 8;
    }
    let mut reg = reg as u32;
    let rem = len - off;
    let mut w: u64 = 0;
    if rem & 4 != 0 {
        // SAFETY: 4 octets remain at `off`.
        let v = unsafe { src.add(off).cast::<u32>().read_unaligned() };
        if COPY {
            // SAFETY: as above.
            unsafe { dst.add(off).cast::<u32>().write_unaligned(v) };
        }
        reg = _mm_crc32_u32(reg, v);
        w = u64::from(v);
        off += 4;
    }
    if rem & 2 != 0 {
        // SAFETY: 2 octets remain at `off`.
        let v = unsafe { src.add(off).cast::<u16>().read_unaligned() };
        if COPY {
            // SAFETY: as above.
            unsafe { dst.add(off).cast::<u16>().write_unaligned(v) };
        }
        reg = _mm_crc32_u16(reg, v);
        w |= u64::from(v) << ((rem & 4) * 8);
        off += 2;
    }
    if rem & 1 != 0 {
        // SAFETY: 1 octet remains at `off`.
        let v = unsafe { src.add(off).read() };
        if COPY {
            // SAFETY: as above.
            unsafe { dst.add(off).write(v) };
        }
        reg = _mm_crc32_u8(reg, v);
        w |= u64::from(v) << ((rem & 6) * 8);
    }
    if SUM {
        *acc += u128::from(w);
    }
    reg
}

/// Finishes a 128-bit remainder: its two quadwords through the `crc32` instruction from a
/// zero register give the register of the run it stands for.
#[inline]
#[target_feature(enable = "sse4.2")]
fn finish_remainder(r: __m128i) -> u32 {
    let q0 = _mm_cvtsi128_si64(r) as u64;
    let q1 = _mm_extract_epi64(r, 1) as u64;
    _mm_crc32_u64(_mm_crc32_u64(0, q0), q1) as u32
}

// ---------------------------------------------------------------------------------------
// Folding with 128-bit vectors.

/// The pair of multipliers folding a 128-bit lane by `BITS` bits (`consts::fold_pair`), as a
/// vector: quadword 0 for the lane's quadword 0, quadword 1 for its quadword 1.
#[inline]
#[target_feature(enable = "sse2")]
fn fold_k128<const BITS: u32>() -> __m128i {
    let (k0, k1) = const { fold_pair(BITS) };
    _mm_set_epi64x(k1 as i64, k0 as i64)
}

/// One fold: `a` moved on by the distance `k` was made for (modulo P).
#[inline]
#[target_feature(enable = "pclmulqdq")]
fn fold128(a: __m128i, k: __m128i) -> __m128i {
    _mm_xor_si128(
        _mm_clmulepi64_si128(a, k, 0x00),
        _mm_clmulepi64_si128(a, k, 0x11),
    )
}

/// The two 32-bit halves of each quadword of `x`, added into that quadword (so four
/// octets' worth of 16-bit words per 33-bit lane value).
#[inline]
#[target_feature(enable = "sse2")]
fn words128(x: __m128i) -> __m128i {
    let lo = _mm_and_si128(x, _mm_set1_epi64x(0xffff_ffff));
    _mm_add_epi64(lo, _mm_srli_epi64(x, 32))
}

/// Loads 16 octets at `src + off` and stores them at `dst + off` if `COPY`.
///
/// # Safety
///
/// `[off, off + 16)` is inside the source range (valid for reads) and, if `COPY`, the
/// destination range (valid for writes).
#[inline]
#[target_feature(enable = "sse2")]
unsafe fn take128<const COPY: bool>(dst: *mut u8, src: *const u8, off: usize) -> __m128i {
    // SAFETY: in bounds, by the caller; `loadu` takes any alignment.
    let x = unsafe { _mm_loadu_si128(src.add(off).cast()) };
    if COPY {
        // SAFETY: in bounds, by the caller; `storeu` takes any alignment.
        unsafe { _mm_storeu_si128(dst.add(off).cast(), x) };
    }
    x
}

/// The PCLMULQDQ kernel: eight 128-bit accumulators (128 octets per round, so eight
/// independent folds cover the multiply's latency), SSE2 sum, then 16-octet folds and the
/// `crc32` instruction for the tail.
///
/// # Safety
///
/// The CPU has PCLMULQDQ, SSE4.1 and SSE4.2; `src` is valid for reads of `len` octets; if
/// `COPY`, `dst` is valid for writes of `len` octets and does not overlap it.
#[target_feature(enable = "pclmulqdq,sse4.1,sse4.2")]
pub(super) unsafe fn pclmul<const COPY: bool, const SUM: bool>(
    dst: *mut u8,
    src: *const u8,
    len: usize,
    crc: u32,
) -> (u32, u64) {
    let mut reg = !crc;
    let mut acc: u128 = 0;
    let mut off = 0;
    if len >= 16 {
        let seed = _mm_cvtsi32_si128(reg as i32);
        let mut vsum = _mm_setzero_si128();
        let mut r;
        if len >= 128 {
            let mut a = [_mm_setzero_si128(); 8];
            for (i, a) in a.iter_mut().enumerate() {
                // SAFETY: `16 * i + 16 <= 128 <= len`, in both ranges.
                *a = unsafe { take128::<COPY>(dst, src, 16 * i) };
            }
            if SUM {
                vsum = sum8(&a);
            }
            a[0] = _mm_xor_si128(a[0], seed);
            off = 128;
            let k = fold_k128::<1024>();
            while len - off >= 128 {
                let mut x = [_mm_setzero_si128(); 8];
                for (i, x) in x.iter_mut().enumerate() {
                    // SAFETY: `off + 128 <= len`, in both ranges.
                    *x = unsafe { take128::<COPY>(dst, src, off + 16 * i) };
                }
                if SUM {
                    vsum = _mm_add_epi64(vsum, sum8(&x));
                }
                for (a, x) in a.iter_mut().zip(x) {
                    *a = _mm_xor_si128(fold128(*a, k), x);
                }
                off += 128;
            }
            // Fold the eight into the last: lane `i` moves on by `7 - i` lanes.
            let k1 = fold_k128::<128>();
            let k2 = fold_k128::<256>();
            let k3 = fold_k128::<384>();
            let k4 = fold_k128::<512>();
            let k5 = fold_k128::<640>();
            let k6 = fold_k128::<768>();
            let k7 = fold_k128::<896>();
            let f0 = _mm_xor_si128(fold128(a[0], k7), fold128(a[1], k6));
            let f1 = _mm_xor_si128(fold128(a[2], k5), fold128(a[3], k4));
            let f2 = _mm_xor_si128(fold128(a[4], k3), fold128(a[5], k2));
            let f3 = _mm_xor_si128(fold128(a[6], k1), a[7]);
            r = _mm_xor_si128(_mm_xor_si128(f0, f1), _mm_xor_si128(f2, f3));
        } else {
            // SAFETY: `16 <= len`, in both ranges.
            let x = unsafe { take128::<COPY>(dst, src, 0) };
            if SUM {
                vsum = words128(x);
            }
            r = _mm_xor_si128(x, seed);
            off = 16;
        }
        let k = fold_k128::<128>();
        while len - off >= 16 {
            // SAFETY: `off + 16 <= len`, in both ranges.
            let x = unsafe { take128::<COPY>(dst, src, off) };
            if SUM {
                vsum = _mm_add_epi64(vsum, words128(x));
            }
            r = _mm_xor_si128(fold128(r, k), x);
            off += 16;
        }
        if SUM {
            acc = u128::from(_mm_cvtsi128_si64(vsum) as u64)
                + u128::from(_mm_extract_epi64(vsum, 1) as u64);
        }
        reg = finish_remainder(r);
    }
    // SAFETY: `off` is a multiple of 16, at most `len`; the ranges as the caller vouches.
    reg = unsafe { tail::<COPY, SUM>(dst, src, off, len, reg, &mut acc) };
    (!reg, if SUM { sum::finish(acc) } else { 0 })
}

/// The word sums of eight vectors, added pairwise (a short dependency chain).
#[inline]
#[target_feature(enable = "sse2")]
fn sum8(x: &[__m128i; 8]) -> __m128i {
    let s01 = _mm_add_epi64(words128(x[0]), words128(x[1]));
    let s23 = _mm_add_epi64(words128(x[2]), words128(x[3]));
    let s45 = _mm_add_epi64(words128(x[4]), words128(x[5]));
    let s67 = _mm_add_epi64(words128(x[6]), words128(x[7]));
    _mm_add_epi64(_mm_add_epi64(s01, s23), _mm_add_epi64(s45, s67))
}

// ---------------------------------------------------------------------------------------
// Folding with 256-bit vectors.

/// [`fold_k128`] for both 128-bit lanes of a 256-bit vector.
#[inline]
#[target_feature(enable = "avx")]
fn fold_k256<const BITS: u32>() -> __m256i {
    let (k0, k1) = const { fold_pair(BITS) };
    _mm256_set_epi64x(k1 as i64, k0 as i64, k1 as i64, k0 as i64)
}

/// [`fold128`] on both lanes.
#[inline]
#[target_feature(enable = "avx2,vpclmulqdq")]
fn fold256(a: __m256i, k: __m256i) -> __m256i {
    _mm256_xor_si256(
        _mm256_clmulepi64_epi128(a, k, 0x00),
        _mm256_clmulepi64_epi128(a, k, 0x11),
    )
}

/// [`words128`] on 256 bits.
#[inline]
#[target_feature(enable = "avx2")]
fn words256(x: __m256i) -> __m256i {
    let lo = _mm256_and_si256(x, _mm256_set1_epi64x(0xffff_ffff));
    _mm256_add_epi64(lo, _mm256_srli_epi64(x, 32))
}

/// Folds four accumulators of consecutive 32-octet vectors into the last: accumulator
/// `i` moves on by `3 - i` vectors.
#[inline]
#[target_feature(enable = "avx2,vpclmulqdq")]
fn fold4(a0: __m256i, a1: __m256i, a2: __m256i, a3: __m256i) -> __m256i {
    let f01 = _mm256_xor_si256(
        fold256(a0, fold_k256::<768>()),
        fold256(a1, fold_k256::<512>()),
    );
    let f23 = _mm256_xor_si256(fold256(a2, fold_k256::<256>()), a3);
    _mm256_xor_si256(f01, f23)
}

/// The lower lane of `a` (the earlier 16 octets) folded onto the upper: the 128-bit
/// remainder of a 256-bit accumulator.
#[inline]
#[target_feature(enable = "avx2,pclmulqdq")]
fn fold_lanes(a: __m256i) -> __m128i {
    _mm_xor_si128(
        fold128(_mm256_castsi256_si128(a), fold_k128::<128>()),
        _mm256_extracti128_si256(a, 1),
    )
}

/// The four 64-bit sum lanes of `vsum`, added without loss.
#[inline]
#[target_feature(enable = "avx2,sse4.1")]
fn lanes_sum(vsum: __m256i) -> u128 {
    let s = _mm_add_epi64(
        _mm256_castsi256_si128(vsum),
        _mm256_extracti128_si256(vsum, 1),
    );
    u128::from(_mm_cvtsi128_si64(s) as u64) + u128::from(_mm_extract_epi64(s, 1) as u64)
}

/// [`take128`] on 32 octets.
///
/// # Safety
///
/// `[off, off + 32)` is inside the source range (valid for reads) and, if `COPY`, the
/// destination range (valid for writes).
#[inline]
#[target_feature(enable = "avx")]
unsafe fn take256<const COPY: bool>(dst: *mut u8, src: *const u8, off: usize) -> __m256i {
    // SAFETY: in bounds, by the caller; `loadu` takes any alignment.
    let x = unsafe { _mm256_loadu_si256(src.add(off).cast()) };
    if COPY {
        // SAFETY: in bounds, by the caller; `storeu` takes any alignment.
        unsafe { _mm256_storeu_si256(dst.add(off).cast(), x) };
    }
    x
}

/// The VPCLMULQDQ kernel: four 256-bit accumulators (128 octets per round: eight
/// independent 128-bit folds), AVX2 sum, then 32- and 16-octet folds and the `crc32`
/// instruction for the tail. For the CRC alone, whole superblocks go first through
/// [`crc_superblocks`] (folding and `crc32` streams side by side).
///
/// Copies at least this long start by aligning their destination (see [`vpclmul`]).
const ALIGN_COPY_FROM: usize = 2048;

/// # Safety
///
/// The CPU has AVX2, VPCLMULQDQ, PCLMULQDQ and SSE4.2; `src` is valid for reads of `len`
/// octets; if `COPY`, `dst` is valid for writes of `len` octets and does not overlap it.
#[target_feature(enable = "avx2,vpclmulqdq,pclmulqdq,sse4.1,sse4.2")]
pub(super) unsafe fn vpclmul<const COPY: bool, const SUM: bool>(
    dst: *mut u8,
    src: *const u8,
    len: usize,
    crc: u32,
) -> (u32, u64) {
    // A long copy stores to aligned addresses: the first octets up to the next 32-octet
    // boundary of `dst` go first (an even count, so the sums of the two parts add), and a
    // destination at an odd address stays as it is. Stores that straddle cache lines cost
    // more than loads that do (a ULPDU's payload follows a 2-octet ULPDU_Length).
    if COPY && len >= ALIGN_COPY_FROM {
        let head = (32 - (dst as usize & 31)) & 31;
        if head != 0 && head.is_multiple_of(2) {
            // SAFETY: `head < 32 <= len`: the head and the rest lie in both ranges, which
            // the caller vouches for; the rest's destination is aligned, so this does not
            // come back here.
            let (c1, s1) = unsafe { vpclmul::<COPY, SUM>(dst, src, head, crc) };
            // SAFETY: as above.
            let (c2, s2) =
                unsafe { vpclmul::<COPY, SUM>(dst.add(head), src.add(head), len - head, c1) };
            return (c2, sum::reduce(s1 + s2));
        }
    }
    let mut acc: u128 = 0;
    let (mut reg, done) = if COPY || SUM {
        (!crc, 0)
    } else {
        // SAFETY: `src` is valid for reads of `len` octets (the caller's promise).
        unsafe { crc_superblocks::<HYBRID_ROUNDS, HYBRID_WORDS>(src, len, !crc) }
    };
    // SAFETY: `done <= len`: the rest of both ranges (`dst` only offset if `COPY`).
    let (dst, src, len) = unsafe {
        (
            if COPY { dst.add(done) } else { dst },
            src.add(done),
            len - done,
        )
    };
    let mut off = 0;
    if len >= 32 {
        let seed = _mm256_zextsi128_si256(_mm_cvtsi32_si128(reg as i32));
        let mut vsum = _mm256_setzero_si256();
        let a;
        if len >= 128 {
            // SAFETY: `128 <= len`: the first four vectors are in both ranges.
            let x0 = unsafe { take256::<COPY>(dst, src, 0) };
            // SAFETY: as above.
            let x1 = unsafe { take256::<COPY>(dst, src, 32) };
            // SAFETY: as above.
            let x2 = unsafe { take256::<COPY>(dst, src, 64) };
            // SAFETY: as above.
            let x3 = unsafe { take256::<COPY>(dst, src, 96) };
            if SUM {
                vsum = sum4(x0, x1, x2, x3);
            }
            let (mut a0, mut a1, mut a2, mut a3) = (_mm256_xor_si256(x0, seed), x1, x2, x3);
            off = 128;
            let k = fold_k256::<1024>();
            while len - off >= 128 {
                // SAFETY: `off + 128 <= len`, in both ranges.
                let x0 = unsafe { take256::<COPY>(dst, src, off) };
                // SAFETY: as above.
                let x1 = unsafe { take256::<COPY>(dst, src, off + 32) };
                // SAFETY: as above.
                let x2 = unsafe { take256::<COPY>(dst, src, off + 64) };
                // SAFETY: as above.
                let x3 = unsafe { take256::<COPY>(dst, src, off + 96) };
                if SUM {
                    vsum = _mm256_add_epi64(vsum, sum4(x0, x1, x2, x3));
                }
                a0 = _mm256_xor_si256(fold256(a0, k), x0);
                a1 = _mm256_xor_si256(fold256(a1, k), x1);
                a2 = _mm256_xor_si256(fold256(a2, k), x2);
                a3 = _mm256_xor_si256(fold256(a3, k), x3);
                off += 128;
            }
            a = fold4(a0, a1, a2, a3);
        } else {
            // SAFETY: `32 <= len`, in both ranges.
            let x = unsafe { take256::<COPY>(dst, src, 0) };
            if SUM {
                vsum = words256(x);
            }
            a = _mm256_xor_si256(x, seed);
            off = 32;
        }
        // SAFETY: `off <= len`, a multiple of 32; the ranges as the caller vouches.
        (reg, off) = unsafe { finish256::<COPY, SUM>(dst, src, off, len, a, vsum, &mut acc) };
    }
    // SAFETY: `off` is a multiple of 16, at most `len`; the ranges as the caller vouches.
    reg = unsafe { tail::<COPY, SUM>(dst, src, off, len, reg, &mut acc) };
    (!reg, if SUM { sum::finish(acc) } else { 0 })
}

/// The end of a 256-bit folding run whose accumulator `a` stands for the octets before
/// `off`: 32-octet folds while they fit, the lanes folded into one 128-bit remainder, one
/// 16-octet fold if it fits, the sum lanes `vsum` added to `acc` (if `SUM`). Returns the
/// register of the run so far and the offset reached (fewer than 16 octets before `len`).
///
/// # Safety
///
/// The CPU has AVX2, VPCLMULQDQ, PCLMULQDQ and SSE4.2; `off <= len`; the ranges as
/// [`vpclmul`] takes them.
#[inline]
#[target_feature(enable = "avx2,vpclmulqdq,pclmulqdq,sse4.1,sse4.2")]
unsafe fn finish256<const COPY: bool, const SUM: bool>(
    dst: *mut u8,
    src: *const u8,
    mut off: usize,
    len: usize,
    mut a: __m256i,
    mut vsum: __m256i,
    acc: &mut u128,
) -> (u32, usize) {
    let k = fold_k256::<256>();
    while len - off >= 32 {
        // SAFETY: `off + 32 <= len`, in both ranges.
        let x = unsafe { take256::<COPY>(dst, src, off) };
        if SUM {
            vsum = _mm256_add_epi64(vsum, words256(x));
        }
        a = _mm256_xor_si256(fold256(a, k), x);
        off += 32;
    }
    let k = fold_k128::<128>();
    let mut r = fold_lanes(a);
    if len - off >= 16 {
        // SAFETY: `off + 16 <= len`, in both ranges.
        let x = unsafe { take128::<COPY>(dst, src, off) };
        if SUM {
            vsum = _mm256_add_epi64(vsum, _mm256_zextsi128_si256(words128(x)));
        }
        r = _mm_xor_si128(fold128(r, k), x);
        off += 16;
    }
    if SUM {
        *acc += lanes_sum(vsum);
    }
    (finish_remainder(r), off)
}

/// Vector rounds (of 128 octets) per superblock of [`crc_superblocks`].
const HYBRID_ROUNDS: usize = 16;
/// The superblock of [`crc_superblocks`] as [`vpclmul`] runs it (3968 octets).
#[cfg(test)]
pub(super) const SUPERBLOCK: usize = 128 * HYBRID_ROUNDS + 24 * HYBRID_WORDS * HYBRID_ROUNDS;
/// Words (of 8 octets) per integer stream per vector round of [`crc_superblocks`]: the
/// `crc32` unit's share of the work.
const HYBRID_WORDS: usize = 5;

/// The CRC alone (no copy, no sum) over superblocks of `S = 128·NV + 3·8·NW·NV` octets
/// while they fit, with the `crc32` instruction's unit working beside the carry-less
/// multiplier (on this machine each alone gives about 8 octets per cycle): the first
/// `128·NV` octets of a superblock are folded as in [`vpclmul`], the rest go through three
/// `crc32` streams of `I = 8·NW·NV` octets, `NW` words of each per vector round.
///
/// Each superblock's parts start from a zero register and are combined, with the register
/// from before the superblock, by shifts (`consts::shift_operand`):
/// `reg·x^(8S) + v·x^(8·3I) + a·x^(8·2I) + b·x^(8I) + c`; the combination is off the
/// superblocks' critical path. Returns the register and the octets done (a multiple of 8).
///
/// (With the copy and the sum as well, this split measured slower than [`vpclmul`]'s own
/// loop on this machine, so those variants do not use it.)
///
/// # Safety
///
/// The CPU has AVX2, VPCLMULQDQ, PCLMULQDQ and SSE4.2; `src` is valid for reads of `len`
/// octets.
#[inline]
#[target_feature(enable = "avx2,vpclmulqdq,pclmulqdq,sse4.1,sse4.2")]
unsafe fn crc_superblocks<const NV: usize, const NW: usize>(
    src: *const u8,
    len: usize,
    mut reg: u32,
) -> (u32, usize) {
    let i_len: usize = 8 * NW * NV;
    let v_len: usize = 128 * NV;
    let s_len: usize = v_len + 3 * i_len;
    if len < s_len {
        return (reg, 0);
    }
    let k_s = _mm_cvtsi32_si128(const { shift_operand((128 * NV + 24 * NW * NV) as u32) } as i32);
    let k_v = _mm_cvtsi32_si128(const { shift_operand((24 * NW * NV) as u32) } as i32);
    let k_a = _mm_cvtsi32_si128(const { shift_operand((16 * NW * NV) as u32) } as i32);
    let k_b = _mm_cvtsi32_si128(const { shift_operand((8 * NW * NV) as u32) } as i32);
    let k = fold_k256::<1024>();
    let mut off = 0;
    while len - off >= s_len {
        let (mut ra, mut rb, mut rc) = (0u64, 0u64, 0u64);
        let mut i = off + v_len;
        // SAFETY: `off + 128 <= len`, in the source range.
        let (mut a0, mut a1, mut a2, mut a3) = unsafe {
            (
                take256::<false>(core::ptr::null_mut(), src, off),
                take256::<false>(core::ptr::null_mut(), src, off + 32),
                take256::<false>(core::ptr::null_mut(), src, off + 64),
                take256::<false>(core::ptr::null_mut(), src, off + 96),
            )
        };
        for round in 0..NV {
            if round > 0 {
                let v = off + 128 * round;
                // SAFETY: `v + 128 <= off + v_len <= len`, in the source range.
                let (x0, x1, x2, x3) = unsafe {
                    (
                        take256::<false>(core::ptr::null_mut(), src, v),
                        take256::<false>(core::ptr::null_mut(), src, v + 32),
                        take256::<false>(core::ptr::null_mut(), src, v + 64),
                        take256::<false>(core::ptr::null_mut(), src, v + 96),
                    )
                };
                a0 = _mm256_xor_si256(fold256(a0, k), x0);
                a1 = _mm256_xor_si256(fold256(a1, k), x1);
                a2 = _mm256_xor_si256(fold256(a2, k), x2);
                a3 = _mm256_xor_si256(fold256(a3, k), x3);
            }
            for _ in 0..NW {
                // SAFETY: `i + 2 * i_len + 8 <= off + s_len <= len`: all three words in
                // the source range (unaligned reads).
                let (wa, wb, wc) = unsafe {
                    (
                        src.add(i).cast::<u64>().read_unaligned(),
                        src.add(i + i_len).cast::<u64>().read_unaligned(),
                        src.add(i + 2 * i_len).cast::<u64>().read_unaligned(),
                    )
                };
                ra = _mm_crc32_u64(ra, wa);
                rb = _mm_crc32_u64(rb, wb);
                rc = _mm_crc32_u64(rc, wc);
                i += 8;
            }
        }
        let rv = finish_remainder(fold_lanes(fold4(a0, a1, a2, a3)));
        let t = _mm_xor_si128(
            _mm_xor_si128(
                _mm_clmulepi64_si128(_mm_cvtsi32_si128(reg as i32), k_s, 0x00),
                _mm_clmulepi64_si128(_mm_cvtsi32_si128(rv as i32), k_v, 0x00),
            ),
            _mm_xor_si128(
                _mm_clmulepi64_si128(_mm_cvtsi64_si128(ra as i64), k_a, 0x00),
                _mm_clmulepi64_si128(_mm_cvtsi64_si128(rb as i64), k_b, 0x00),
            ),
        );
        reg = (_mm_crc32_u64(0, _mm_cvtsi128_si64(t) as u64) ^ rc) as u32;
        off += s_len;
    }
    (reg, off)
}

/// The word sums of four vectors, added pairwise.
#[inline]
#[target_feature(enable = "avx2")]
fn sum4(x0: __m256i, x1: __m256i, x2: __m256i, x3: __m256i) -> __m256i {
    _mm256_add_epi64(
        _mm256_add_epi64(words256(x0), words256(x1)),
        _mm256_add_epi64(words256(x2), words256(x3)),
    )
}

// ---------------------------------------------------------------------------------------
// Folding with 512-bit vectors.

/// [`fold_k128`] for the four 128-bit lanes of a 512-bit vector.
#[inline]
#[target_feature(enable = "avx512f")]
fn fold_k512<const BITS: u32>() -> __m512i {
    let (k0, k1) = const { fold_pair(BITS) };
    let (k0, k1) = (k0 as i64, k1 as i64);
    _mm512_set_epi64(k1, k0, k1, k0, k1, k0, k1, k0)
}

/// [`fold128`] on the four lanes, with `x` XORed in (one three-way XOR).
#[inline]
#[target_feature(enable = "avx512f,vpclmulqdq")]
fn fold512_xor(a: __m512i, k: __m512i, x: __m512i) -> __m512i {
    _mm512_ternarylogic_epi64::<0x96>(
        _mm512_clmulepi64_epi128(a, k, 0x00),
        _mm512_clmulepi64_epi128(a, k, 0x11),
        x,
    )
}

/// [`words128`] on 512 bits.
#[inline]
#[target_feature(enable = "avx512f")]
fn words512(x: __m512i) -> __m512i {
    let lo = _mm512_and_si512(x, _mm512_set1_epi64(0xffff_ffff));
    _mm512_add_epi64(lo, _mm512_srli_epi64::<32>(x))
}

/// The word sums of four 512-bit vectors, added pairwise.
#[inline]
#[target_feature(enable = "avx512f")]
fn sum4_512(x0: __m512i, x1: __m512i, x2: __m512i, x3: __m512i) -> __m512i {
    _mm512_add_epi64(
        _mm512_add_epi64(words512(x0), words512(x1)),
        _mm512_add_epi64(words512(x2), words512(x3)),
    )
}

/// Folds four accumulators of consecutive 64-octet vectors into the last: accumulator
/// `i` moves on by `3 - i` vectors.
#[inline]
#[target_feature(enable = "avx512f,vpclmulqdq")]
fn fold4_512(a0: __m512i, a1: __m512i, a2: __m512i, a3: __m512i) -> __m512i {
    _mm512_ternarylogic_epi64::<0x96>(
        fold512_xor(a0, fold_k512::<1536>(), a3),
        fold512_xor(a1, fold_k512::<1024>(), _mm512_setzero_si512()),
        fold512_xor(a2, fold_k512::<512>(), _mm512_setzero_si512()),
    )
}

/// A 512-bit accumulator and sum brought down to 256 bits for [`finish256`]: the
/// accumulator's lower half (the earlier 32 octets) moved on by 256 bits onto the upper,
/// and the sum's two halves added.
#[inline]
#[target_feature(enable = "avx512f,vpclmulqdq,avx2")]
fn halves512(a: __m512i, vsum: __m512i) -> (__m256i, __m256i) {
    let a = _mm256_xor_si256(
        fold256(_mm512_castsi512_si256(a), fold_k256::<256>()),
        _mm512_extracti64x4_epi64::<1>(a),
    );
    let vsum = _mm256_add_epi64(
        _mm512_castsi512_si256(vsum),
        _mm512_extracti64x4_epi64::<1>(vsum),
    );
    (a, vsum)
}

/// [`take128`] on 64 octets.
///
/// # Safety
///
/// `[off, off + 64)` is inside the source range (valid for reads) and, if `COPY`, the
/// destination range (valid for writes).
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn take512<const COPY: bool>(dst: *mut u8, src: *const u8, off: usize) -> __m512i {
    // SAFETY: in bounds, by the caller; `loadu` takes any alignment.
    let x = unsafe { _mm512_loadu_si512(src.add(off).cast()) };
    if COPY {
        // SAFETY: in bounds, by the caller; `storeu` takes any alignment.
        unsafe { _mm512_storeu_si512(dst.add(off).cast(), x) };
    }
    x
}

/// Runs shorter than this go to [`vpclmul`] (one round of [`avx512`] is 256 octets).
const AVX512_FROM: usize = 256;

/// How far ahead of its loads [`avx512`] prefetches when it does not copy.
const AVX512_PREFETCH: usize = 2048;

/// The AVX-512 kernel: four 512-bit accumulators (256 octets per round: sixteen
/// independent 128-bit folds, each with its XOR in one three-way `vpternlogq`), the sum in
/// 512-bit 64-bit lanes, the copy stored from the same loads; then 64-octet folds, and the
/// accumulator's halves folded into the 256-bit one that [`finish256`] and [`tail`] end as
/// [`vpclmul`] does. Runs shorter than [`AVX512_FROM`] are [`vpclmul`]'s. Copies of at
/// least [`ALIGN_COPY_FROM`] octets start by aligning their destination to 64 octets (when
/// the octets up to the boundary are an even count, so that the sums of the parts add);
/// runs without a copy prefetch [`AVX512_PREFETCH`] octets ahead.
///
/// # Safety
///
/// The CPU has AVX-512F, VPCLMULQDQ, AVX2, PCLMULQDQ and SSE4.2; `src` is valid for reads
/// of `len` octets; if `COPY`, `dst` is valid for writes of `len` octets and does not
/// overlap it.
#[target_feature(enable = "avx512f,vpclmulqdq,avx2,pclmulqdq,sse4.1,sse4.2")]
pub(super) unsafe fn avx512<const COPY: bool, const SUM: bool>(
    dst: *mut u8,
    src: *const u8,
    len: usize,
    crc: u32,
) -> (u32, u64) {
    if len < AVX512_FROM {
        // SAFETY: the caller's promise, passed on (the CPU has `vpclmul`'s features).
        return unsafe { vpclmul::<COPY, SUM>(dst, src, len, crc) };
    }
    // As in `vpclmul`, to a 64-octet boundary: a 512-bit store that straddles two cache
    // lines costs two.
    if COPY && len >= ALIGN_COPY_FROM {
        let head = (64 - (dst as usize & 63)) & 63;
        if head != 0 && head.is_multiple_of(2) {
            // SAFETY: `head < 64 <= len`: the head and the rest lie in both ranges, which
            // the caller vouches for; the rest's destination is aligned, so this does not
            // come back here.
            let (c1, s1) = unsafe { vpclmul::<COPY, SUM>(dst, src, head, crc) };
            // SAFETY: as above.
            let (c2, s2) =
                unsafe { avx512::<COPY, SUM>(dst.add(head), src.add(head), len - head, c1) };
            return (c2, sum::reduce(s1 + s2));
        }
    }
    let seed = _mm512_zextsi128_si512(_mm_cvtsi32_si128(!crc as i32));
    // SAFETY: `256 <= len`: the first four vectors are in both ranges.
    let (x0, x1, x2, x3) = unsafe {
        (
            take512::<COPY>(dst, src, 0),
            take512::<COPY>(dst, src, 64),
            take512::<COPY>(dst, src, 128),
            take512::<COPY>(dst, src, 192),
        )
    };
    let mut vsum = _mm512_setzero_si512();
    if SUM {
        vsum = sum4_512(x0, x1, x2, x3);
    }
    let (mut a0, mut a1, mut a2, mut a3) = (_mm512_xor_si512(x0, seed), x1, x2, x3);
    let mut off = 256;
    let k = fold_k512::<2048>();
    while len - off >= 256 {
        if !COPY {
            // Without a copy the loads alone run ahead of what the hardware prefetchers
            // bring from L2 (CRC alone of 64 KiB: 64 -> 84 GiB/s on the Xeon); a prefetch
            // is a hint, which never faults, so those up to 2 KiB past the end are
            // harmless.
            for line in 0..4 {
                let ahead = src.wrapping_add(off + AVX512_PREFETCH + 64 * line);
                _mm_prefetch::<_MM_HINT_T0>(ahead.cast());
            }
        }
        // SAFETY: `off + 256 <= len`, in both ranges.
        let (x0, x1, x2, x3) = unsafe {
            (
                take512::<COPY>(dst, src, off),
                take512::<COPY>(dst, src, off + 64),
                take512::<COPY>(dst, src, off + 128),
                take512::<COPY>(dst, src, off + 192),
            )
        };
        if SUM {
            vsum = _mm512_add_epi64(vsum, sum4_512(x0, x1, x2, x3));
        }
        a0 = fold512_xor(a0, k, x0);
        a1 = fold512_xor(a1, k, x1);
        a2 = fold512_xor(a2, k, x2);
        a3 = fold512_xor(a3, k, x3);
        off += 256;
    }
    let mut a = fold4_512(a0, a1, a2, a3);
    let k = fold_k512::<512>();
    while len - off >= 64 {
        // SAFETY: `off + 64 <= len`, in both ranges.
        let x = unsafe { take512::<COPY>(dst, src, off) };
        if SUM {
            vsum = _mm512_add_epi64(vsum, words512(x));
        }
        a = fold512_xor(a, k, x);
        off += 64;
    }
    let (a, vsum) = halves512(a, vsum);
    let mut acc: u128 = 0;
    // SAFETY: `off <= len`, a multiple of 64; the ranges as the caller vouches.
    let (reg, off) = unsafe { finish256::<COPY, SUM>(dst, src, off, len, a, vsum, &mut acc) };
    // SAFETY: `off` is a multiple of 16, at most `len`; the ranges as the caller vouches.
    let reg = unsafe { tail::<COPY, SUM>(dst, src, off, len, reg, &mut acc) };
    (!reg, if SUM { sum::finish(acc) } else { 0 })
}

// ---------------------------------------------------------------------------------------
// Prefetching for writes.

/// `PREFETCHW` on every cache line of `[p, p + len)`, written as assembly: Rust's
/// intrinsic emits `PREFETCHW` only with the `prfchw` target feature, which is not
/// stable (without it, a read prefetch: which brings a line in shared and made the
/// in-memory wire slower).
///
/// # Safety
///
/// The CPU has PREFETCHW (CPUID 0x8000_0001 ECX bit 8). The instruction touches no
/// memory and never faults, whatever the address.
#[inline]
#[cfg_attr(miri, allow(dead_code))]
pub(super) unsafe fn prefetchw(p: *const u8, len: usize) {
    for off in (0..len).step_by(64) {
        // SAFETY: the CPU has the instruction (the caller's promise), which reads and
        // writes no memory, changes no register or flag and never faults.
        unsafe {
            core::arch::asm!(
                "prefetchw [{0}]",
                in(reg) p.wrapping_add(off),
                options(nostack, preserves_flags, readonly)
            );
        }
    }
}

/// Whether the CPU has PREFETCHW (CPUID 0x8000_0001 ECX bit 8, "3dnowprefetch").
#[cfg_attr(miri, allow(dead_code))]
pub(super) fn has_prefetchw() -> bool {
    let max_ext = __cpuid(0x8000_0000).eax;
    max_ext >= 0x8000_0001 && __cpuid(0x8000_0001).ecx & (1 << 8) != 0
}

// ---------------------------------------------------------------------------------------
// The `crc32` instruction alone.

/// The SSE4.2 kernel for a CPU without PCLMULQDQ: one stream of `crc32` (latency-bound:
/// one 8-octet word per instruction latency), scalar sum and copy.
///
/// # Safety
///
/// The CPU has SSE4.2; `src` is valid for reads of `len` octets; if `COPY`, `dst` is valid
/// for writes of `len` octets and does not overlap it.
#[target_feature(enable = "sse4.2")]
pub(super) unsafe fn sse42_one<const COPY: bool, const SUM: bool>(
    dst: *mut u8,
    src: *const u8,
    len: usize,
    crc: u32,
) -> (u32, u64) {
    let mut acc: u128 = 0;
    // SAFETY: the ranges as the caller vouches; offset 0.
    let reg = unsafe { tail::<COPY, SUM>(dst, src, 0, len, !crc, &mut acc) };
    (!reg, if SUM { sum::finish(acc) } else { 0 })
}

/// The SSE4.2 kernel when PCLMULQDQ is there too: three interleaved `crc32` streams over
/// the thirds of each block (enough to keep the instruction's pipeline full), the first two
/// registers then shifted over the rest of the block by a carry-less multiply
/// (`consts::shift_operand`) and combined with the third.
///
/// # Safety
///
/// The CPU has SSE4.2 and PCLMULQDQ; `src` is valid for reads of `len` octets; if `COPY`,
/// `dst` is valid for writes of `len` octets and does not overlap it.
#[target_feature(enable = "sse4.2,pclmulqdq")]
pub(super) unsafe fn sse42_three<const COPY: bool, const SUM: bool>(
    dst: *mut u8,
    src: *const u8,
    len: usize,
    crc: u32,
) -> (u32, u64) {
    let mut reg = !crc;
    let mut acc = [0u128; 3];
    let mut off = 0;
    // SAFETY: the ranges as the caller vouches; the blocks stay inside `len`.
    reg = unsafe { three_streams::<1024, COPY, SUM>(dst, src, &mut off, len, reg, &mut acc) };
    // SAFETY: as above.
    reg = unsafe { three_streams::<128, COPY, SUM>(dst, src, &mut off, len, reg, &mut acc) };
    // No overflow: each is below `len / 8 * 2^64`.
    let mut acc = acc[0] + acc[1] + acc[2];
    // SAFETY: `off` is a multiple of 8, at most `len`; the ranges as the caller vouches.
    reg = unsafe { tail::<COPY, SUM>(dst, src, off, len, reg, &mut acc) };
    (!reg, if SUM { sum::finish(acc) } else { 0 })
}

/// Runs blocks of `3 * B` octets from `*off` while they fit in `len`, advancing `*off`;
/// returns the register.
///
/// # Safety
///
/// As [`sse42_three`], with `*off <= len`.
#[inline]
#[target_feature(enable = "sse4.2,pclmulqdq")]
unsafe fn three_streams<const B: usize, const COPY: bool, const SUM: bool>(
    dst: *mut u8,
    src: *const u8,
    off: &mut usize,
    len: usize,
    mut reg: u32,
    acc: &mut [u128; 3],
) -> u32 {
    const { assert!(B.is_multiple_of(8) && B >= 8) };
    let k_a = _mm_cvtsi32_si128(const { shift_operand(2 * B as u32) } as i32);
    let k_b = _mm_cvtsi32_si128(const { shift_operand(B as u32) } as i32);
    while len - *off >= 3 * B {
        let (mut ra, mut rb, mut rc) = (u64::from(reg), 0u64, 0u64);
        let mut i = *off;
        let end = *off + B;
        while i < end {
            // SAFETY: `i + 2 * B + 8 <= *off + 3 * B <= len`: all three words in range.
            let (wa, wb, wc) = unsafe {
                (
                    src.add(i).cast::<u64>().read_unaligned(),
                    src.add(i + B).cast::<u64>().read_unaligned(),
                    src.add(i + 2 * B).cast::<u64>().read_unaligned(),
                )
            };
            if COPY {
                // SAFETY: as above, for the destination range.
                unsafe {
                    dst.add(i).cast::<u64>().write_unaligned(wa);
                    dst.add(i + B).cast::<u64>().write_unaligned(wb);
                    dst.add(i + 2 * B).cast::<u64>().write_unaligned(wc);
                }
            }
            ra = _mm_crc32_u64(ra, wa);
            rb = _mm_crc32_u64(rb, wb);
            rc = _mm_crc32_u64(rc, wc);
            if SUM {
                acc[0] += u128::from(wa);
                acc[1] += u128::from(wb);
                acc[2] += u128::from(wc);
            }
            i += 8;
        }
        // ra·x^(16B) + rb·x^(8B) + rc: both products then one `crc32` of their sum.
        let t = _mm_xor_si128(
            _mm_clmulepi64_si128(_mm_cvtsi64_si128(ra as i64), k_a, 0x00),
            _mm_clmulepi64_si128(_mm_cvtsi64_si128(rb as i64), k_b, 0x00),
        );
        reg = (_mm_crc32_u64(0, _mm_cvtsi128_si64(t) as u64) ^ rc) as u32;
        *off += 3 * B;
    }
    reg
}

// ---------------------------------------------------------------------------------------
// Copies with markers.

/// The marker `[0, 0, ptr >> 8, ptr & 0xff]` as a little-endian 32-bit word.
#[inline]
fn marker_word(ptr: u16) -> u32 {
    u32::from_le_bytes(super::marker(ptr))
}

/// Loads 32 octets of a marked copy's output whose first 4 are a marker: the 28 source
/// octets at `src + s` go after the marker word `m`. With 4 source octets before them
/// (`s >= 4`) the vector is loaded from `src + s - 4` and the marker put over those 4 in
/// the register (they were read already, for the run they end, and are not used again);
/// else, once at most per copy, the 28 octets go through a buffer on the stack. Either
/// way every octet loaded lies inside the source, and every source octet stored, folded
/// and summed is read once.
///
/// # Safety
///
/// `[src, src + s + 28)` is valid for reads.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn load256_marked(src: *const u8, s: usize, m: u32) -> __m256i {
    let x = if s >= 4 {
        // SAFETY: `[s - 4, s + 28)` is inside the source (the caller's promise).
        unsafe { _mm256_loadu_si256(src.add(s - 4).cast()) }
    } else {
        let mut buf = [0u8; 32];
        // SAFETY: `[s, s + 28)` is inside the source; `buf` has room for 28 after 4.
        unsafe {
            std::ptr::copy_nonoverlapping(src.add(s), buf.as_mut_ptr().add(4), 28);
            _mm256_loadu_si256(buf.as_ptr().cast())
        }
    };
    _mm256_blend_epi32::<1>(x, _mm256_zextsi128_si256(_mm_cvtsi32_si128(m as i32)))
}

/// [`load256_marked`] on 64 octets (60 of source), the marker put in dword 0 with a masked
/// broadcast.
///
/// # Safety
///
/// `[src, src + s + 60)` is valid for reads.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn load512_marked(src: *const u8, s: usize, m: u32) -> __m512i {
    let x = if s >= 4 {
        // SAFETY: `[s - 4, s + 60)` is inside the source (the caller's promise).
        unsafe { _mm512_loadu_si512(src.add(s - 4).cast()) }
    } else {
        let mut buf = [0u8; 64];
        // SAFETY: `[s, s + 60)` is inside the source; `buf` has room for 60 after 4.
        unsafe {
            std::ptr::copy_nonoverlapping(src.add(s), buf.as_mut_ptr().add(4), 60);
            _mm512_loadu_si512(buf.as_ptr().cast())
        }
    };
    _mm512_mask_set1_epi32(x, 1, m as i32)
}

/// [`load256_marked`] on 16 octets (12 of source).
///
/// # Safety
///
/// `[src, src + s + 12)` is valid for reads.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn load128_marked(src: *const u8, s: usize, m: u32) -> __m128i {
    let x = if s >= 4 {
        // SAFETY: `[s - 4, s + 12)` is inside the source (the caller's promise).
        unsafe { _mm_loadu_si128(src.add(s - 4).cast()) }
    } else {
        let mut buf = [0u8; 16];
        // SAFETY: `[s, s + 12)` is inside the source; `buf` has room for 12 after 4.
        unsafe {
            std::ptr::copy_nonoverlapping(src.add(s), buf.as_mut_ptr().add(4), 12);
            _mm_loadu_si128(buf.as_ptr().cast())
        }
    };
    _mm_blend_epi32::<1>(x, _mm_cvtsi32_si128(m as i32))
}

/// Where a marked copy is: the next output and source offsets, the output octets before
/// the next marker, and that marker's FPDUptr.
struct MarkedCursor {
    o: usize,
    s: usize,
    to_marker: usize,
    ptr: u16,
}

impl MarkedCursor {
    /// Takes the next `N` output octets (`N` of 16, 32 or 64, or a round of 128 as four
    /// 32s or of 256 as four 64s):
    /// with the marker first if one is due (then `N - 4` source octets), else `N` source
    /// octets; advances the cursor. Returns the marker word if one was due.
    #[inline]
    fn advance<const N: usize>(&mut self) -> Option<u32> {
        debug_assert!(self.to_marker.is_multiple_of(N), "a marker inside a step");
        self.o += N;
        if self.to_marker == 0 {
            let m = marker_word(self.ptr);
            self.ptr = self.ptr.wrapping_add(512);
            self.s += N - 4;
            self.to_marker = 512 - N;
            Some(m)
        } else {
            self.s += N;
            self.to_marker -= N;
            None
        }
    }
}

/// A marked-copy kernel ([`vpclmul_marked`], [`avx512_marked`]): `(dst, src, len, before,
/// wire, fpduptr, crc)`, returning the CRC and the sum.
pub(super) type MarkedKernel =
    unsafe fn(*mut u8, *const u8, usize, usize, usize, u16, u32) -> (u32, u64);

/// The VPCLMULQDQ kernel for a marked copy (see `Kernel::copy_marked_raw`): the output is
/// the source with a marker `[0, 0, ptr >> 8, ptr & 0xff]` after its first `before`
/// octets and then before every next 508, `ptr` growing by 512 from one marker to the next;
/// `wire` octets in all. The CRC register and the sum run over the output octets, through
/// one set of [`vpclmul`]'s accumulators from the first marker to the last.
///
/// The first `before.min(len) % 128` octets go through [`vpclmul`] itself, so that the rest is laid
/// out in rounds of 128 output octets with each marker at the start of one (markers are
/// 512 apart). A round, a 32- or a 16-octet step that starts with a marker loads its
/// vector with the marker put in the register over its first 4 octets
/// ([`load256_marked`]); one that is left for the word tail writes the marker as a word.
/// Every source octet stored, folded and summed is read once.
///
/// The output octets before the next marker (`to_marker`) start as a multiple of 128 and
/// each step takes a multiple of itself (128, then 32, then 16), so a marker always falls
/// at the start of a step, never inside one: a step of `N` output octets takes `N` or
/// `N - 4` source octets, and one runs only while `N` output octets remain, so its source
/// octets are there.
///
/// # Safety
///
/// The CPU has AVX2, VPCLMULQDQ, PCLMULQDQ and SSE4.2; `len <= 2^30`; `wire` is the marked
/// copy's length and `wire - before.min(len) % 128 >= 128`; `src` is valid for reads of `len`
/// octets and `dst` for writes of `wire`, and the two do not overlap.
#[target_feature(enable = "avx2,vpclmulqdq,pclmulqdq,sse4.1,sse4.2")]
pub(super) unsafe fn vpclmul_marked<const SUM: bool>(
    dst: *mut u8,
    src: *const u8,
    len: usize,
    before: usize,
    wire: usize,
    ptr: u16,
    crc: u32,
) -> (u32, u64) {
    let h = before.min(len);
    let g = h % 128;
    debug_assert!(wire >= g + 128);
    // SAFETY: the first `g <= len` octets of both ranges.
    let (crc, pre_sum) = unsafe { vpclmul::<true, SUM>(dst, src, g, crc) };
    let mut c = MarkedCursor {
        o: g,
        s: g,
        to_marker: h - g,
        ptr,
    };
    // One round: four vectors, the first after a marker if one is due.
    //
    // SAFETY (of each call): the caller checked `wire - c.o >= 128`; the round's output
    // octets are inside the output and its source octets (124 after a marker, else 128:
    // the output before the end is source and markers as laid out) inside the source.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn round(dst: *mut u8, src: *const u8, c: &mut MarkedCursor) -> [__m256i; 4] {
        let (o, s) = (c.o, c.s);
        let m = c.advance::<128>();
        // SAFETY: as above: the source octets `s..s + 124` (after a marker) or
        // `s..s + 128`, and the output's `o..o + 128`.
        unsafe {
            let (x0, s) = match m {
                Some(m) => (load256_marked(src, s, m), s + 28),
                None => (_mm256_loadu_si256(src.add(s).cast()), s + 32),
            };
            let x = [
                x0,
                _mm256_loadu_si256(src.add(s).cast()),
                _mm256_loadu_si256(src.add(s + 32).cast()),
                _mm256_loadu_si256(src.add(s + 64).cast()),
            ];
            for (i, v) in x.iter().enumerate() {
                _mm256_storeu_si256(dst.add(o + 32 * i).cast(), *v);
            }
            x
        }
    }
    let seed = _mm256_zextsi128_si256(_mm_cvtsi32_si128(!crc as i32));
    // SAFETY: `wire - g >= 128` (the caller's promise).
    let [x0, x1, x2, x3] = unsafe { round(dst, src, &mut c) };
    let mut vsum = if SUM {
        sum4(x0, x1, x2, x3)
    } else {
        _mm256_setzero_si256()
    };
    let (mut a0, mut a1, mut a2, mut a3) = (_mm256_xor_si256(x0, seed), x1, x2, x3);
    let k = fold_k256::<1024>();
    while wire - c.o >= 128 {
        // SAFETY: checked just above.
        let [x0, x1, x2, x3] = unsafe { round(dst, src, &mut c) };
        if SUM {
            vsum = _mm256_add_epi64(vsum, sum4(x0, x1, x2, x3));
        }
        a0 = _mm256_xor_si256(fold256(a0, k), x0);
        a1 = _mm256_xor_si256(fold256(a1, k), x1);
        a2 = _mm256_xor_si256(fold256(a2, k), x2);
        a3 = _mm256_xor_si256(fold256(a3, k), x3);
    }
    let a = fold4(a0, a1, a2, a3);
    // SAFETY: `c` is where the rounds left the copy; the ranges as the caller vouches.
    let (reg, acc) = unsafe { marked_end::<SUM>(dst, src, len, wire, c, a, vsum) };
    let sum = if SUM {
        sum::reduce(pre_sum + super::sum_at(sum::finish(acc), g))
    } else {
        0
    };
    (!reg, sum)
}

/// The end of a marked copy, shared by [`vpclmul_marked`] and [`avx512_marked`]: with the
/// 256-bit accumulator `a` and sum lanes `vsum` standing for the output before the cursor
/// `c` (fewer than 64 octets before `wire` when called from [`avx512_marked`], fewer than
/// 128 from [`vpclmul_marked`]), 32-octet folds while they fit, the lanes folded into one
/// 128-bit remainder, one 16-octet fold if it fits (each step loading with its marker if
/// one is due, as the rounds do), then a marker left for the tail written as a word, and
/// the word tail. Returns the CRC register at the end and the output's word sum from where
/// the accumulators started (0 if not `SUM`).
///
/// # Safety
///
/// The CPU has AVX2, VPCLMULQDQ, PCLMULQDQ and SSE4.2; `wire` is the marked copy's length,
/// `c` a cursor inside it whose `to_marker` is a multiple of 32; `src` is valid for reads
/// of `len` octets and `dst` for writes of `wire`, and the two do not overlap.
#[inline]
#[target_feature(enable = "avx2,vpclmulqdq,pclmulqdq,sse4.1,sse4.2")]
unsafe fn marked_end<const SUM: bool>(
    dst: *mut u8,
    src: *const u8,
    len: usize,
    wire: usize,
    mut c: MarkedCursor,
    mut a: __m256i,
    mut vsum: __m256i,
) -> (u32, u128) {
    let k = fold_k256::<256>();
    while wire - c.o >= 32 {
        let (o, s) = (c.o, c.s);
        // SAFETY: 32 output octets remain and a marker can only start them (see
        // `vpclmul_marked`), so their source octets (28 after a marker, else 32) are in
        // the source.
        let x = unsafe {
            let x = match c.advance::<32>() {
                Some(m) => load256_marked(src, s, m),
                None => _mm256_loadu_si256(src.add(s).cast()),
            };
            _mm256_storeu_si256(dst.add(o).cast(), x);
            x
        };
        if SUM {
            vsum = _mm256_add_epi64(vsum, words256(x));
        }
        a = _mm256_xor_si256(fold256(a, k), x);
    }
    let k = fold_k128::<128>();
    let mut r = fold_lanes(a);
    if wire - c.o >= 16 {
        let (o, s) = (c.o, c.s);
        // SAFETY: as above, for 16 octets.
        let x = unsafe {
            let x = match c.advance::<16>() {
                Some(m) => load128_marked(src, s, m),
                None => _mm_loadu_si128(src.add(s).cast()),
            };
            _mm_storeu_si128(dst.add(o).cast(), x);
            x
        };
        if SUM {
            vsum = _mm256_add_epi64(vsum, _mm256_zextsi128_si256(words128(x)));
        }
        r = _mm_xor_si128(fold128(r, k), x);
    }
    let mut acc: u128 = if SUM { lanes_sum(vsum) } else { 0 };
    let mut reg = finish_remainder(r);
    if c.to_marker == 0 && c.o < wire {
        // A marker left for the tail (fewer than 16 octets from it to the end).
        let m = marker_word(c.ptr);
        // SAFETY: the marker's 4 octets are inside the output (source octets follow it).
        unsafe { dst.add(c.o).cast::<u32>().write_unaligned(m) };
        reg = _mm_crc32_u32(reg, m);
        if SUM {
            acc += u128::from(m);
        }
        c.o += 4;
    }
    debug_assert_eq!(wire - c.o, len - c.s);
    // SAFETY: the last `wire - c.o` output octets are the last source octets; offset 0
    // (a multiple of 8), at an even distance from where the accumulators started, as
    // every step's octets are.
    reg = unsafe { tail::<true, SUM>(dst.add(c.o), src.add(c.s), 0, len - c.s, reg, &mut acc) };
    (reg, acc)
}

/// One round of [`avx512_marked`]: the next 256 output octets as four 64-octet vectors, the
/// first loaded with its marker ([`load512_marked`]) if one is due, stored to the output;
/// advances the cursor.
///
/// # Safety
///
/// The CPU has AVX-512F; `c` is a cursor of a marked copy whose output has 256 octets or
/// more left (`wire - c.o >= 256`) and whose `to_marker` is a multiple of 256; `src` is
/// valid for reads of the copy's source and `dst` for writes of its output, and the two do
/// not overlap.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn marked_round512(dst: *mut u8, src: *const u8, c: &mut MarkedCursor) -> [__m512i; 4] {
    let (o, s) = (c.o, c.s);
    let m = c.advance::<256>();
    // SAFETY: the round's output octets `o..o + 256` are inside the output, and its source
    // octets (`s..s + 252` after a marker, else `s..s + 256`: the output before its end is
    // source and markers as laid out) inside the source (the caller's promise).
    unsafe {
        let (x0, s) = match m {
            Some(m) => (load512_marked(src, s, m), s + 60),
            None => (_mm512_loadu_si512(src.add(s).cast()), s + 64),
        };
        let x = [
            x0,
            _mm512_loadu_si512(src.add(s).cast()),
            _mm512_loadu_si512(src.add(s + 64).cast()),
            _mm512_loadu_si512(src.add(s + 128).cast()),
        ];
        for (i, v) in x.iter().enumerate() {
            _mm512_storeu_si512(dst.add(o + 64 * i).cast(), *v);
        }
        x
    }
}

/// The AVX-512 kernel for a marked copy: [`vpclmul_marked`] (same output, arguments and
/// results) with [`avx512`]'s four 512-bit accumulators, in rounds of 256 output octets.
///
/// The first `before.min(len) % 256` octets go through [`vpclmul`], so that the rest is
/// laid out in rounds of 256 output octets with each marker at the start of one (markers
/// are 512 apart). A round or a 64-octet step that starts with a marker loads its first
/// vector with the marker put in the register over its first 4 octets
/// ([`load512_marked`]). After the rounds, 64-octet steps; then the accumulator and the
/// sum are brought down to 256 bits as [`avx512`] does, and [`marked_end`] (the 32- and
/// 16-octet steps, a marker left for the tail, the word tail) ends the copy as it does
/// [`vpclmul_marked`]'s. `to_marker` starts as a multiple of 256 and each step takes a
/// multiple of itself (256, 64, 32, 16), so a marker always falls at the start of a step.
/// Every source octet stored, folded and summed is read once.
///
/// # Safety
///
/// The CPU has AVX-512F, VPCLMULQDQ, AVX2, PCLMULQDQ and SSE4.2; `len <= 2^30`; `wire` is
/// the marked copy's length and `wire - before.min(len) % 256 >= 256`; `src` is valid for
/// reads of `len` octets and `dst` for writes of `wire`, and the two do not overlap.
#[target_feature(enable = "avx512f,vpclmulqdq,avx2,pclmulqdq,sse4.1,sse4.2")]
pub(super) unsafe fn avx512_marked<const SUM: bool>(
    dst: *mut u8,
    src: *const u8,
    len: usize,
    before: usize,
    wire: usize,
    ptr: u16,
    crc: u32,
) -> (u32, u64) {
    let h = before.min(len);
    let g = h % 256;
    debug_assert!(wire >= g + 256);
    // SAFETY: the first `g <= len` octets of both ranges (fewer than 256: `avx512` would
    // hand them to `vpclmul` too).
    let (crc, pre_sum) = unsafe { vpclmul::<true, SUM>(dst, src, g, crc) };
    let mut c = MarkedCursor {
        o: g,
        s: g,
        to_marker: h - g,
        ptr,
    };
    let seed = _mm512_zextsi128_si512(_mm_cvtsi32_si128(!crc as i32));
    // SAFETY: `wire - g >= 256` (the caller's promise); `to_marker` is a multiple of 256.
    let [x0, x1, x2, x3] = unsafe { marked_round512(dst, src, &mut c) };
    let mut vsum = if SUM {
        sum4_512(x0, x1, x2, x3)
    } else {
        _mm512_setzero_si512()
    };
    let (mut a0, mut a1, mut a2, mut a3) = (_mm512_xor_si512(x0, seed), x1, x2, x3);
    let k = fold_k512::<2048>();
    while wire - c.o >= 256 {
        // SAFETY: checked just above; `to_marker` stays a multiple of 256.
        let [x0, x1, x2, x3] = unsafe { marked_round512(dst, src, &mut c) };
        if SUM {
            vsum = _mm512_add_epi64(vsum, sum4_512(x0, x1, x2, x3));
        }
        a0 = fold512_xor(a0, k, x0);
        a1 = fold512_xor(a1, k, x1);
        a2 = fold512_xor(a2, k, x2);
        a3 = fold512_xor(a3, k, x3);
    }
    let mut a = fold4_512(a0, a1, a2, a3);
    let k = fold_k512::<512>();
    while wire - c.o >= 64 {
        let (o, s) = (c.o, c.s);
        // SAFETY: 64 output octets remain and a marker can only start them, so their
        // source octets (60 after a marker, else 64) are in the source.
        let x = unsafe {
            let x = match c.advance::<64>() {
                Some(m) => load512_marked(src, s, m),
                None => _mm512_loadu_si512(src.add(s).cast()),
            };
            _mm512_storeu_si512(dst.add(o).cast(), x);
            x
        };
        if SUM {
            vsum = _mm512_add_epi64(vsum, words512(x));
        }
        a = fold512_xor(a, k, x);
    }
    let (a, vsum) = halves512(a, vsum);
    // SAFETY: `c` is where the steps left the copy (`to_marker` a multiple of 64); the
    // ranges as the caller vouches.
    let (reg, acc) = unsafe { marked_end::<SUM>(dst, src, len, wire, c, a, vsum) };
    let sum = if SUM {
        sum::reduce(pre_sum + super::sum_at(sum::finish(acc), g))
    } else {
        0
    };
    (!reg, sum)
}

// ---------------------------------------------------------------------------------------
// Strided copies: marker stripping on receive.

/// Copies `n` octets from `src` to `dst` in 64-octet vectors whose stores are aligned
/// to the destination's cache lines, but for a first and a last one that overlap them
/// (the runs between markers lie 4 octets further apart in the source than in the
/// destination, so they start at every alignment, and a store that splits a cache
/// line costs twice); shorter runs go to `copy_nonoverlapping`.
///
/// # Safety
///
/// `src` is valid for reads and `dst` for writes of `n` octets; the two do not overlap.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn copy_run512(dst: *mut u8, src: *const u8, n: usize) {
    if n < 64 {
        // SAFETY: the caller's promise.
        unsafe { core::ptr::copy_nonoverlapping(src, dst, n) };
        return;
    }
    // SAFETY: `n >= 64`: the first 64 octets are inside both ranges.
    unsafe { _mm512_storeu_si512(dst.cast(), _mm512_loadu_si512(src.cast())) };
    // From the first cache line boundary past `dst` (64 octets on when `dst` is on one).
    let mut i = 64 - (dst as usize & 63);
    while i + 64 <= n {
        // SAFETY: `i + 64 <= n`: inside both ranges; `dst + i` is 64-octet aligned.
        unsafe {
            let v = _mm512_loadu_si512(src.add(i).cast());
            _mm512_store_si512(dst.add(i).cast(), v);
        }
        i += 64;
    }
    if i < n {
        // SAFETY: `n >= 64`: the last 64 octets are inside both ranges. Where they
        // overlap the vector before, they store the same octets again.
        unsafe {
            let v = _mm512_loadu_si512(src.add(n - 64).cast());
            _mm512_storeu_si512(dst.add(n - 64).cast(), v);
        }
    }
}

/// [`super::copy_strided_raw`] with 64-octet vectors: each run in one inlined loop, no
/// call per run. (The run loop is written out here and in `copy_strided_portable`: one
/// iterator shared by both measured 3-5 % slower in `crc_framing`'s marked receive.)
///
/// # Safety
///
/// As [`super::copy_strided_raw`], and the CPU has AVX-512F.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn copy_strided_avx512(
    dst: *mut u8,
    src: *const u8,
    len: usize,
    first: usize,
    run: usize,
    gap: usize,
) {
    let (mut s, mut d) = (0usize, 0usize);
    let mut take = first.min(len);
    while d < len {
        // SAFETY: the caller's promise: run after run with `gap` octets between them in
        // the source, `len` octets in all in the destination; `take` never passes what
        // is left.
        unsafe { copy_run512(dst.add(d), src.add(s), take) };
        d += take;
        s += take + gap;
        take = run.min(len - d);
    }
}
