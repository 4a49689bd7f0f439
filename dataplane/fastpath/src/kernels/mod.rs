//! One pass over a run of octets that copies it (optionally), advances a CRC32c and takes
//! its RFC 1071 one's complement sum, with the kernel chosen at run time for the CPU.
//!
//! The MPA CRC (RFC 5044) and the TCP checksum cover the same payload octets that the
//! dataplane copies between the wire and registered memory; doing all three in one pass
//! reads each octet once. The technique is that of Abseil's `crc_memcpy` and zlib-ng's
//! `crc32_fold_copy`: carry-less-multiply folding, with the loads of the copy feeding the
//! folds and the sum.
//!
//! # Conventions
//!
//! * The CRC is CRC32c (Castagnoli: reflected polynomial `0x82F63B78`, initial value and
//!   final XOR all ones). A `crc` argument and result is the *finished* value, so `0` is the
//!   CRC of the empty prefix and calls chain:
//!   `crc32c_append(crc32c_append(0, a), b)` is the CRC of `a` followed by `b`.
//! * The sum (a `u64`) is an unfolded one's complement partial sum of the run read as
//!   little-endian 16-bit words from its first octet; [`fold_sum`] turns it into the RFC
//!   1071 sum in network byte order. Sums of two runs add when the first has even length
//!   (callers handle odd joins). A sum returned is always below `2^33`, so adding up to
//!   `2^31` of them cannot overflow a `u64`.
//! * Source and destination may have any alignment and any length, 0 included.
//! * Each source octet is read exactly once, and the value read is the one stored, folded
//!   into the CRC and added to the sum: the three agree even when another thread writes the
//!   source meanwhile (registered memory). The exception is [`copy_strided_raw`], a copy
//!   alone (no CRC, no sum to agree with) from a received frame no other thread writes:
//!   its vectors overlap at the ends of a run, so it may read an octet twice.
//!
//! # Kernels
//!
//! [`Kernel::best`] picks, once per process, the first of these the CPU runs:
//!
//! * [`Kernel::Avx512`] (AVX-512F, VPCLMULQDQ, and what [`Kernel::Vpclmul`] needs): four
//!   512-bit accumulators (sixteen independent 128-bit folds, 256 octets per round, the XOR
//!   of each fold in the same `vpternlogq`), the sum in AVX-512 64-bit lanes, the copy
//!   stored from the same loads, long copies' stores aligned to 64 octets, then 64-octet
//!   folds; the last 0 to 63 octets, and runs shorter than 256, as [`Kernel::Vpclmul`]
//!   does them. Marked copies
//!   have their own kernel, with the same accumulators in rounds of 256 output octets (each
//!   marker at the start of one), ending as [`Kernel::Vpclmul`]'s marked copy does.
//! * [`Kernel::Vpclmul`] (AVX2, VPCLMULQDQ, PCLMULQDQ, SSE4.2): four 256-bit accumulators
//!   folded with `VPCLMULQDQ` (eight independent 128-bit folds, 128 octets per round), the
//!   sum in AVX2 64-bit lanes, the copy stored from the same loads. For the CRC alone, runs
//!   of a few KiB and more also keep three `crc32` instruction streams going beside the
//!   folds (the two units work in parallel), recombined by carry-less multiplies.
//! * [`Kernel::Pclmul`] (PCLMULQDQ, SSE4.1, SSE4.2): the same with eight 128-bit
//!   accumulators and SSE2.
//! * [`Kernel::Sse42`] (SSE4.2): the `crc32` instruction, in three interleaved streams
//!   recombined by a carry-less multiply when PCLMULQDQ is there, else in one stream;
//!   scalar sum.
//! * [`Kernel::Portable`]: slicing-by-8 tables (built by a `const fn`), a scalar sum and a
//!   plain copy; every target, and the only kernel under Miri.
//!
//! The folded kernels finish by folding their accumulators into one 128-bit remainder and
//! running it, and the octets left over, through the `crc32` instruction. Their multipliers
//! are powers of `x` modulo the polynomial computed at compile time (`consts`), and tested
//! against a bitwise CRC.
//!
//! The tests run every kernel the CPU has ([`Kernel::all_available`]); the AVX-512 one was
//! written and tested on an Intel Xeon (Emerald Rapids) and is tested wherever a CPU has
//! AVX-512F and VPCLMULQDQ. There is no aarch64 SIMD kernel (PMULL, CRC32C instructions):
//! it cannot be built and run on the machines this crate is tested on, and untested
//! kernels are not shipped. On aarch64 and every other target the portable kernel runs.

#![warn(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

mod consts;
mod portable;
mod sum;
#[cfg(test)]
mod tests;
// VPCLMULQDQ's target feature and intrinsics are stable since Rust 1.89 (which crc-fast,
// a dependency of the workspace, needs as well).
#[cfg(target_arch = "x86_64")]
#[clippy::msrv = "1.89"]
mod x86;

use std::sync::atomic::{AtomicU8, Ordering};

/// Which kernel a call runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    /// 512-bit carry-less folding (AVX-512F, VPCLMULQDQ, and [`Kernel::Vpclmul`]'s
    /// features), x86-64.
    Avx512,
    /// 256-bit carry-less folding (AVX2, VPCLMULQDQ, PCLMULQDQ, SSE4.2), x86-64.
    Vpclmul,
    /// 128-bit carry-less folding (PCLMULQDQ, SSE4.1, SSE4.2), x86-64.
    Pclmul,
    /// The `crc32` instruction (SSE4.2), x86-64.
    Sse42,
    /// Table-driven, on every target.
    Portable,
}

/// Feature bits, detected once (bit 7 says detection ran).
const F_DETECTED: u8 = 0x80;
const F_VPCLMUL: u8 = 1;
const F_PCLMUL: u8 = 2;
const F_SSE42: u8 = 4;
const F_AVX512: u8 = 16;
/// PREFETCHW ([`prefetch_for_write`]), detected by CPUID (the standard library's
/// detection does not name it).
#[cfg(target_arch = "x86_64")]
const F_PRFCHW: u8 = 32;
/// PCLMULQDQ alongside SSE4.2: the three-stream form of [`Kernel::Sse42`].
#[cfg(target_arch = "x86_64")]
const F_SSE42_CLMUL: u8 = 8;

/// The CPU's features, as the kernels need them (detected on first use).
#[inline]
fn features() -> u8 {
    static FEATURES: AtomicU8 = AtomicU8::new(0);
    let f = FEATURES.load(Ordering::Relaxed);
    if f != 0 {
        return f;
    }
    let f = detect() | F_DETECTED;
    FEATURES.store(f, Ordering::Relaxed);
    f
}

#[cold]
fn detect() -> u8 {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    {
        use std::arch::is_x86_feature_detected as has;
        let mut f = 0;
        if x86::has_prefetchw() {
            f |= F_PRFCHW;
        }
        if has!("sse4.2") {
            f |= F_SSE42;
            if has!("pclmulqdq") {
                f |= F_SSE42_CLMUL;
                if has!("sse4.1") {
                    f |= F_PCLMUL;
                    if has!("avx2") && has!("vpclmulqdq") {
                        f |= F_VPCLMUL;
                        if has!("avx512f") {
                            f |= F_AVX512;
                        }
                    }
                }
            }
        }
        f
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    {
        0
    }
}

/// The longest run one kernel call takes; longer runs go in pieces of this (even) size, so
/// the kernels' sum lanes never need more than 64 bits.
const MAX_CHUNK: usize = 1 << 30;

impl Kernel {
    /// Every kernel, best first.
    const ALL: [Kernel; 5] = [
        Kernel::Avx512,
        Kernel::Vpclmul,
        Kernel::Pclmul,
        Kernel::Sse42,
        Kernel::Portable,
    ];

    /// The best kernel this CPU runs (detected once per process; [`Kernel::Portable`] under
    /// Miri and on targets other than x86-64).
    #[inline]
    pub fn best() -> Kernel {
        let f = features();
        if f & F_AVX512 != 0 {
            Kernel::Avx512
        } else if f & F_VPCLMUL != 0 {
            Kernel::Vpclmul
        } else if f & F_PCLMUL != 0 {
            Kernel::Pclmul
        } else if f & F_SSE42 != 0 {
            Kernel::Sse42
        } else {
            Kernel::Portable
        }
    }

    /// Every kernel this CPU runs, best first ([`Kernel::Portable`] always, last).
    pub fn all_available() -> Vec<Kernel> {
        Kernel::ALL
            .into_iter()
            .filter(|k| k.is_available())
            .collect()
    }

    /// The kernel's name: `"avx512"`, `"vpclmul"`, `"pclmul"`, `"sse42"` or `"portable"`.
    pub fn name(self) -> &'static str {
        match self {
            Kernel::Avx512 => "avx512",
            Kernel::Vpclmul => "vpclmul",
            Kernel::Pclmul => "pclmul",
            Kernel::Sse42 => "sse42",
            Kernel::Portable => "portable",
        }
    }

    /// Whether this CPU runs the kernel.
    #[inline]
    pub fn is_available(self) -> bool {
        let f = features();
        match self {
            Kernel::Avx512 => f & F_AVX512 != 0,
            Kernel::Vpclmul => f & F_VPCLMUL != 0,
            Kernel::Pclmul => f & F_PCLMUL != 0,
            Kernel::Sse42 => f & F_SSE42 != 0,
            Kernel::Portable => true,
        }
    }

    /// [`crc32c_append`] with this kernel (or [`Kernel::Portable`] if the CPU lacks it).
    pub fn crc32c_append(self, crc: u32, data: &[u8]) -> u32 {
        // SAFETY: `data` is valid for reads of its length; nothing is written.
        unsafe {
            self.run::<false, false>(std::ptr::null_mut(), data.as_ptr(), data.len(), crc)
                .0
        }
    }

    /// [`crc32c_sum`] with this kernel (or [`Kernel::Portable`] if the CPU lacks it).
    pub fn crc32c_sum(self, crc: u32, data: &[u8]) -> (u32, u64) {
        // SAFETY: `data` is valid for reads of its length; nothing is written.
        unsafe { self.run::<false, true>(std::ptr::null_mut(), data.as_ptr(), data.len(), crc) }
    }

    /// [`copy_crc32c_sum`] with this kernel (or [`Kernel::Portable`] if the CPU lacks it).
    ///
    /// # Panics
    ///
    /// If `dst` and `src` differ in length.
    pub fn copy_crc32c_sum(self, dst: &mut [u8], src: &[u8], crc: u32) -> (u32, u64) {
        assert_eq!(
            dst.len(),
            src.len(),
            "copy_crc32c_sum: dst and src lengths differ"
        );
        // SAFETY: both slices are valid for their (equal) length, `dst` for writes, and a
        // `&mut` and a `&` borrow cannot overlap.
        unsafe { self.run::<true, true>(dst.as_mut_ptr(), src.as_ptr(), src.len(), crc) }
    }

    /// [`copy_crc32c`] with this kernel (or [`Kernel::Portable`] if the CPU lacks it).
    ///
    /// # Panics
    ///
    /// If `dst` and `src` differ in length.
    pub fn copy_crc32c(self, dst: &mut [u8], src: &[u8], crc: u32) -> u32 {
        assert_eq!(
            dst.len(),
            src.len(),
            "copy_crc32c: dst and src lengths differ"
        );
        // SAFETY: both slices are valid for their (equal) length, `dst` for writes, and a
        // `&mut` and a `&` borrow cannot overlap.
        unsafe {
            self.run::<true, false>(dst.as_mut_ptr(), src.as_ptr(), src.len(), crc)
                .0
        }
    }

    /// [`copy_crc32c_sum_raw`] with this kernel (or [`Kernel::Portable`] if the CPU lacks
    /// it).
    ///
    /// # Safety
    ///
    /// As [`copy_crc32c_sum_raw`]: `src` valid for reads and `dst` for writes of `len`
    /// octets, the two not overlapping.
    pub unsafe fn copy_crc32c_sum_raw(
        self,
        dst: *mut u8,
        src: *const u8,
        len: usize,
        crc: u32,
    ) -> (u32, u64) {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.run::<true, true>(dst, src, len, crc) }
    }

    /// Runs the kernel (the portable one if the CPU lacks it) over `len` octets, in pieces
    /// of at most [`MAX_CHUNK`].
    ///
    /// # Safety
    ///
    /// `src` is valid for reads of `len` octets; if `COPY`, `dst` is valid for writes of
    /// `len` octets and the two do not overlap.
    #[inline]
    unsafe fn run<const COPY: bool, const SUM: bool>(
        self,
        dst: *mut u8,
        src: *const u8,
        len: usize,
        crc: u32,
    ) -> (u32, u64) {
        if len <= MAX_CHUNK {
            // SAFETY: the caller's promise, passed on.
            return unsafe { self.run_chunk::<COPY, SUM>(dst, src, len, crc) };
        }
        // SAFETY: the caller's promise, passed on.
        unsafe { self.run_chunked::<COPY, SUM>(dst, src, len, crc, MAX_CHUNK) }
    }

    /// [`Kernel::run`] in pieces of `chunk` octets (even, nonzero).
    ///
    /// # Safety
    ///
    /// As [`Kernel::run`].
    #[cold]
    unsafe fn run_chunked<const COPY: bool, const SUM: bool>(
        self,
        dst: *mut u8,
        src: *const u8,
        len: usize,
        mut crc: u32,
        chunk: usize,
    ) -> (u32, u64) {
        debug_assert!(chunk > 0 && chunk.is_multiple_of(2));
        let mut total = 0u64;
        let mut off = 0;
        loop {
            let n = chunk.min(len - off);
            // SAFETY: `[off, off + n)` is inside both ranges (`dst` is only offset when
            // `COPY`, when it is valid for `len` octets).
            let (c, s) = unsafe {
                let d = if COPY { dst.add(off) } else { dst };
                self.run_chunk::<COPY, SUM>(d, src.add(off), n, crc)
            };
            crc = c;
            // Both below 2^33: no overflow; the chunks are even, so their words line up.
            total = sum::reduce(total + s);
            off += n;
            if off == len {
                return (crc, total);
            }
        }
    }

    /// One kernel call.
    ///
    /// # Safety
    ///
    /// As [`Kernel::run`], with `len <= MAX_CHUNK`.
    #[inline]
    unsafe fn run_chunk<const COPY: bool, const SUM: bool>(
        self,
        dst: *mut u8,
        src: *const u8,
        len: usize,
        crc: u32,
    ) -> (u32, u64) {
        #[cfg(target_arch = "x86_64")]
        {
            let f = features();
            match self {
                Kernel::Avx512 if f & F_AVX512 != 0 => {
                    // SAFETY: the CPU has the features (detected); the ranges as the
                    // caller vouches.
                    return unsafe { x86::avx512::<COPY, SUM>(dst, src, len, crc) };
                }
                Kernel::Vpclmul if f & F_VPCLMUL != 0 => {
                    // SAFETY: the CPU has the features (detected); the ranges as the
                    // caller vouches.
                    return unsafe { x86::vpclmul::<COPY, SUM>(dst, src, len, crc) };
                }
                Kernel::Pclmul if f & F_PCLMUL != 0 => {
                    // SAFETY: as above.
                    return unsafe { x86::pclmul::<COPY, SUM>(dst, src, len, crc) };
                }
                Kernel::Sse42 if f & F_SSE42_CLMUL != 0 => {
                    // SAFETY: as above.
                    return unsafe { x86::sse42_three::<COPY, SUM>(dst, src, len, crc) };
                }
                Kernel::Sse42 if f & F_SSE42 != 0 => {
                    // SAFETY: as above.
                    return unsafe { x86::sse42_one::<COPY, SUM>(dst, src, len, crc) };
                }
                _ => {}
            }
        }
        // SAFETY: the ranges as the caller vouches.
        unsafe { portable::run::<COPY, SUM>(dst, src, len, crc) }
    }
}

/// The CRC32c of `data` appended to a run whose CRC32c is `crc` (0 for none), with the
/// best kernel. `crc32c_append(0, b"123456789") == 0xE306_9283`.
#[inline]
pub fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    Kernel::best().crc32c_append(crc, data)
}

/// [`crc32c_append`] and the unfolded one's complement sum of `data`, in one pass.
#[inline]
pub fn crc32c_sum(crc: u32, data: &[u8]) -> (u32, u64) {
    Kernel::best().crc32c_sum(crc, data)
}

/// Copies `src` to `dst`, advancing the CRC32c `crc` over it and taking its unfolded one's
/// complement sum, in one pass: returns the new CRC and the sum.
///
/// # Panics
///
/// If `dst` and `src` differ in length (a caller bug).
#[inline]
pub fn copy_crc32c_sum(dst: &mut [u8], src: &[u8], crc: u32) -> (u32, u64) {
    Kernel::best().copy_crc32c_sum(dst, src, crc)
}

/// Copies `src` to `dst`, advancing the CRC32c `crc` over it, in one pass (no sum: for a
/// port that offloads the TCP checksum): returns the new CRC.
///
/// # Panics
///
/// If `dst` and `src` differ in length (a caller bug).
#[inline]
pub fn copy_crc32c(dst: &mut [u8], src: &[u8], crc: u32) -> u32 {
    Kernel::best().copy_crc32c(dst, src, crc)
}

/// [`copy_crc32c_sum`] into the end of `out` (which grows by `src.len()`, its new octets
/// written once, with no zero fill first).
pub fn append_crc32c_sum(out: &mut Vec<u8>, src: &[u8], crc: u32) -> (u32, u64) {
    // SAFETY: the kernel writes `src.len()` octets; `src` is borrowed shared while `out`
    // is borrowed mutably, so the two do not overlap.
    unsafe {
        append_with(out, src.len(), |dst| {
            Kernel::best().run::<true, true>(dst, src.as_ptr(), src.len(), crc)
        })
    }
}

/// Makes room for `len` octets at the end of `out`, has `fill(dst)` write them, and makes
/// them part of the vector: the appending forms' shared part.
///
/// # Safety
///
/// `fill` writes exactly `len` octets at `dst`, from memory that is not `out`'s.
unsafe fn append_with<R>(out: &mut Vec<u8>, len: usize, fill: impl FnOnce(*mut u8) -> R) -> R {
    out.reserve(len);
    let start = out.len();
    // SAFETY: `reserve` left room for `len` octets past `start` (the pointer comes from the
    // vector's buffer, not from a reference to its spare capacity); `fill` writes all of
    // them (the caller's promise) before `set_len` makes them part of the vector (if it
    // panicked, the length would not change).
    unsafe {
        let r = fill(out.as_mut_ptr().add(start));
        out.set_len(start + len);
        r
    }
}

/// [`copy_crc32c`] into the end of `out` (which grows by `src.len()`, its new octets
/// written once, with no zero fill first).
pub fn append_crc32c(out: &mut Vec<u8>, src: &[u8], crc: u32) -> u32 {
    // SAFETY: as in `append_crc32c_sum`.
    unsafe {
        append_with(out, src.len(), |dst| {
            Kernel::best()
                .run::<true, false>(dst, src.as_ptr(), src.len(), crc)
                .0
        })
    }
}

/// [`copy_crc32c`] on raw ranges ([`copy_crc32c_sum_raw`]'s conventions: raw pointers
/// only, for registered memory).
///
/// # Safety
///
/// As [`copy_crc32c_sum_raw`]: `src` valid for reads and `dst` for writes of `len`
/// octets, the two not overlapping.
#[inline]
pub unsafe fn copy_crc32c_raw(dst: *mut u8, src: *const u8, len: usize, crc: u32) -> u32 {
    // SAFETY: the caller's promise, passed on.
    unsafe { Kernel::best().run::<true, false>(dst, src, len, crc).0 }
}

/// [`copy_crc32c_sum`] on raw ranges, reading and writing through raw pointers only (no
/// reference to either range is made), for memory that other threads may access at the
/// same time (RDMA registered memory). The value of an octet another thread writes while
/// it is read is whatever the load sees, but the copy, the CRC and the sum all see the same
/// one.
///
/// # Safety
///
/// `src` is valid for reads and `dst` for writes of `len` octets, and the two ranges do not
/// overlap. Neither needs any alignment.
#[inline]
pub unsafe fn copy_crc32c_sum_raw(
    dst: *mut u8,
    src: *const u8,
    len: usize,
    crc: u32,
) -> (u32, u64) {
    // SAFETY: the caller's promise, passed on.
    unsafe { Kernel::best().run::<true, true>(dst, src, len, crc) }
}

/// Octets from one marker's start to the next (RFC 5044 section 4.3: a marker at every
/// 512th octet of the TCP stream).
pub const MARKER_INTERVAL: usize = 512;
/// Octets of a marker (its FPDUptr's 16 bits after 16 reserved zero bits).
pub const MARKER_LEN: usize = 4;
/// The marker whose FPDUptr is `fpduptr`: 16 reserved zero bits, then the pointer in
/// network byte order (RFC 5044 section 4.3).
#[inline]
pub fn marker(fpduptr: u16) -> [u8; MARKER_LEN] {
    let [hi, lo] = fpduptr.to_be_bytes();
    [0, 0, hi, lo]
}

/// Source octets between two markers of a marked copy.
const MARKED_RUN: usize = MARKER_INTERVAL - MARKER_LEN;

/// Where the markers of a marked copy ([`append_marked`], [`copy_marked_raw`]) fall: the
/// first after `before` source octets, then one before every next 508 octets of source,
/// none after the last octet. Marker `i` (from 0) is `[0, 0, p >> 8, p & 0xff]` with
/// `p = fpduptr + 512 · i` (wrapping): an MPA marker's FPDUptr, when every marker of the
/// copy belongs to the same FPDU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Markers {
    /// Source octets before the first marker (0: the copy starts with a marker).
    pub before: usize,
    /// The first marker's FPDUptr.
    pub fpduptr: u16,
}

impl Markers {
    /// Octets a marked copy of `len` source octets writes: the source and its markers.
    pub fn wire_len(self, len: usize) -> usize {
        if len <= self.before {
            len
        } else {
            len + MARKER_LEN * (len - self.before).div_ceil(MARKED_RUN)
        }
    }
}

impl Kernel {
    /// [`copy_marked_raw`] with this kernel (or [`Kernel::Portable`] if the CPU lacks it).
    /// Only [`Kernel::Avx512`] and [`Kernel::Vpclmul`] keep their folds going across
    /// markers, each with a marked kernel of its own: [`Kernel::Avx512`]'s for a copy whose
    /// output past its first `before.min(len) % 256` octets is 256 or more, else
    /// [`Kernel::Vpclmul`]'s (which [`Kernel::Avx512`] falls back to) for one whose output
    /// past its first `before.min(len) % 128` octets is 128 or more; the others, and
    /// shorter copies, take each run between markers as a call of their own.
    ///
    /// # Safety
    ///
    /// As [`copy_marked_raw`].
    pub unsafe fn copy_marked_raw(
        self,
        dst: *mut u8,
        src: *const u8,
        len: usize,
        markers: Markers,
        crc: u32,
        sum: bool,
    ) -> (u32, u64) {
        if sum {
            // SAFETY: the caller's promise, passed on.
            unsafe { self.run_marked::<true>(dst, src, len, markers, crc) }
        } else {
            // SAFETY: as above.
            unsafe { self.run_marked::<false>(dst, src, len, markers, crc) }
        }
    }

    /// [`append_marked`] with this kernel (or [`Kernel::Portable`] if the CPU lacks it).
    pub fn append_marked(
        self,
        out: &mut Vec<u8>,
        src: &[u8],
        markers: Markers,
        crc: u32,
        sum: bool,
    ) -> (u32, u64) {
        // SAFETY: the marked copy writes `markers.wire_len(src.len())` octets; `src` is
        // borrowed shared while `out` is borrowed mutably, so the two do not overlap.
        unsafe {
            append_with(out, markers.wire_len(src.len()), |dst| {
                self.copy_marked_raw(dst, src.as_ptr(), src.len(), markers, crc, sum)
            })
        }
    }

    /// The marked copy: in one pass through [`x86::avx512_marked`] when this is
    /// [`Kernel::Avx512`] and the copy is long enough for it, else through
    /// [`x86::vpclmul_marked`] when this is [`Kernel::Avx512`] or [`Kernel::Vpclmul`] and the
    /// copy is long enough for that; else the source before the first marker, then marker
    /// and run by marker and run, a kernel call each.
    ///
    /// # Safety
    ///
    /// As [`copy_marked_raw`].
    unsafe fn run_marked<const SUM: bool>(
        self,
        dst: *mut u8,
        src: *const u8,
        len: usize,
        markers: Markers,
        crc: u32,
    ) -> (u32, u64) {
        // Adds the sum of a run written at output offset `at`.
        let add = |total: u64, s: u64, at: usize| {
            if SUM {
                sum::reduce(total + sum_at(s, at))
            } else {
                0
            }
        };
        #[cfg(target_arch = "x86_64")]
        if matches!(self, Kernel::Vpclmul | Kernel::Avx512)
            && self.is_available()
            && len <= MAX_CHUNK
        {
            let wire = markers.wire_len(len);
            let head = markers.before.min(len);
            // Each marked kernel needs a round of output after the octets it copies before
            // its rounds (`wire >= len >= head`: no underflow).
            let marked = if self == Kernel::Avx512 && wire - head % 256 >= 256 {
                Some(x86::avx512_marked::<SUM> as x86::MarkedKernel)
            } else if wire - head % 128 >= 128 {
                Some(x86::vpclmul_marked::<SUM> as x86::MarkedKernel)
            } else {
                None
            };
            if let Some(kernel) = marked {
                // SAFETY: the CPU has the kernel's features (`is_available`, and Avx512's
                // include Vpclmul's); `len <= 2^30`; `wire` is the marked length, long
                // enough for the kernel chosen; the ranges as the caller vouches.
                return unsafe {
                    kernel(dst, src, len, markers.before, wire, markers.fpduptr, crc)
                };
            }
        }
        let head = markers.before.min(len);
        // SAFETY: the first `head <= len` octets of both ranges.
        let (mut crc, mut total) = unsafe { self.run::<true, SUM>(dst, src, head, crc) };
        let (mut s, mut d, mut ptr) = (head, head, markers.fpduptr);
        while s < len {
            let rest = len - s;
            let marker = marker(ptr);
            // SAFETY: the marker at output offset `d` (inside the output, as a source
            // octet follows it); its source is the local array.
            let (c, sm) = unsafe { self.run::<true, SUM>(dst.add(d), marker.as_ptr(), 4, crc) };
            total = add(total, sm, d);
            let n = rest.min(MARKED_RUN);
            // SAFETY: the next `n <= len - s` source octets, and their place after the
            // marker in the output.
            let (c, sm) =
                unsafe { self.run::<true, SUM>(dst.add(d + MARKER_LEN), src.add(s), n, c) };
            crc = c;
            total = add(total, sm, d + MARKER_LEN);
            s += n;
            d += MARKER_LEN + n;
            ptr = ptr.wrapping_add(MARKER_INTERVAL as u16);
        }
        (crc, total)
    }
}

/// Copies `len` octets from `src` to `dst` with markers between them as `markers` places
/// them ([`Markers`]: `markers.wire_len(len)` octets written), advancing the CRC32c `crc`
/// over every octet written and, if `sum`, taking their unfolded one's complement sum
/// (else 0), in one pass: MPA's marker insertion (RFC 5044 section 4.3) with the CRC and
/// the TCP checksum's sum. Raw pointers only, as [`copy_crc32c_sum_raw`].
///
/// # Safety
///
/// `src` is valid for reads of `len` octets and `dst` for writes of
/// `markers.wire_len(len)`, and the two ranges do not overlap.
#[inline]
pub unsafe fn copy_marked_raw(
    dst: *mut u8,
    src: *const u8,
    len: usize,
    markers: Markers,
    crc: u32,
    sum: bool,
) -> (u32, u64) {
    // SAFETY: the caller's promise, passed on.
    unsafe { Kernel::best().copy_marked_raw(dst, src, len, markers, crc, sum) }
}

/// [`copy_marked_raw`] into the end of `out`, which grows by `markers.wire_len(src.len())`.
pub fn append_marked(
    out: &mut Vec<u8>,
    src: &[u8],
    markers: Markers,
    crc: u32,
    sum: bool,
) -> (u32, u64) {
    Kernel::best().append_marked(out, src, markers, crc, sum)
}

/// Copies `len` octets to `dst` from `src`, where they lie in runs with `gap` octets
/// between them that are skipped: the first run `first` octets long, every later one
/// `run`, the last what is left (MPA's marker stripping, RFC 5044 section 4.3: runs of
/// 508 octets between 4-octet markers). With AVX-512 each run is copied in 64-octet
/// vectors in one loop; elsewhere each run is one `copy_nonoverlapping`. Raw pointers
/// only, as [`copy_crc32c_sum_raw`].
///
/// # Safety
///
/// `run >= 1`, and `first >= 1` unless `len` is 0; `src` is valid for reads of the runs
/// and the gaps between them (`len + gap * (len - first).div_ceil(run)` octets when `len`
/// exceeds `first`, else `len`), `dst` for writes of `len` octets, and the two ranges do
/// not overlap.
#[inline]
pub unsafe fn copy_strided_raw(
    dst: *mut u8,
    src: *const u8,
    len: usize,
    first: usize,
    run: usize,
    gap: usize,
) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    if features() & F_AVX512 != 0 {
        // SAFETY: the caller's promise; the CPU has AVX-512F (detected).
        unsafe { x86::copy_strided_avx512(dst, src, len, first, run, gap) };
        return;
    }
    // SAFETY: the caller's promise, passed on.
    unsafe { copy_strided_portable(dst, src, len, first, run, gap) }
}

/// [`copy_strided_raw`] one `copy_nonoverlapping` per run: the reference, and the copy
/// without AVX-512.
///
/// # Safety
///
/// As [`copy_strided_raw`].
pub unsafe fn copy_strided_portable(
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
        // SAFETY: the caller's promise: `take` octets at source offset `s` and
        // destination offset `d` are inside the ranges.
        unsafe { core::ptr::copy_nonoverlapping(src.add(s), dst.add(d), take) };
        d += take;
        s += take + gap;
        take = run.min(len - d);
    }
}

/// Asks the CPU to bring the cache lines of `[p, p + len)` into its cache for writing
/// (x86-64's `PREFETCHW` where the CPU has it; nothing elsewhere): for a buffer that another core
/// touched last and this one is about to fill, so that taking the lines back overlaps
/// other work instead of stalling the stores. A hint: it reads and writes nothing and
/// never faults, whatever the address.
#[inline]
// The pointer is never dereferenced: a prefetch accesses no memory.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn prefetch_for_write(p: *const u8, len: usize) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    if features() & F_PRFCHW != 0 {
        // SAFETY: the CPU has PREFETCHW (detected); a prefetch accesses no memory and
        // never faults.
        unsafe { x86::prefetchw(p, len) };
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    let _ = (p, len);
}

/// Folds an unfolded sum (as the functions above return, or several added) with
/// end-around carry to 16 bits and swaps its octets: the RFC 1071 sum of the run in
/// network byte order (big-endian words, an odd last octet padded with a zero).
#[inline]
pub fn fold_sum(sum: u64) -> u16 {
    let mut s = sum;
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    (s as u16).swap_bytes()
}

/// The unfolded one's complement sum of `data` (the kernels' convention: little-endian
/// 16-bit words from its first octet, an odd last octet as a word's low octet), in plain
/// scalar code: for a few octets, where a kernel call costs more than the sum itself (a
/// run of any length gives the right sum, but slowly).
pub fn sum_scalar(data: &[u8]) -> u64 {
    let mut words = data.chunks_exact(2);
    let mut sum: u64 = words
        .by_ref()
        .map(|w| u64::from(u16::from_le_bytes([w[0], w[1]])))
        .sum();
    if let [last] = words.remainder() {
        sum += u64::from(*last);
    }
    sum
}

/// The unfolded sum `sum` of a run, made to add to the unfolded sum of the run it
/// continues, which started `offset` octets before it: a run at an odd offset adds
/// byte-swapped (RFC 1071 section 2), so it is folded and swapped first.
#[inline]
pub fn sum_at(sum: u64, offset: usize) -> u64 {
    if offset.is_multiple_of(2) {
        sum
    } else {
        u64::from(fold_sum(sum))
    }
}
