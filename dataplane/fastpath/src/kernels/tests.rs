//! The kernels against a bitwise CRC32c and the RFC 1071 sum written plainly: check values,
//! every length up to 1100, random runs up to 70000 octets at random alignments, chaining,
//! and the raw and appending forms.

use proptest::prelude::*;

use super::*;

/// The reflected CRC register advanced over `data`, bit by bit (no initial or final XOR).
pub(crate) fn crc_raw_bitwise(mut reg: u32, data: &[u8]) -> u32 {
    for &b in data {
        reg ^= u32::from(b);
        for _ in 0..8 {
            reg = if reg & 1 != 0 {
                (reg >> 1) ^ 0x82F6_3B78
            } else {
                reg >> 1
            };
        }
    }
    reg
}

/// The finished CRC32c of `data` appended to a run whose CRC32c is `crc`, bitwise.
fn crc_ref(crc: u32, data: &[u8]) -> u32 {
    !crc_raw_bitwise(!crc, data)
}

/// RFC 1071, as plainly as it can be written.
fn reference_sum(bytes: &[u8]) -> u16 {
    let mut s: u64 = 0;
    for w in bytes.chunks(2) {
        s += (w[0] as u64) << 8 | w.get(1).copied().unwrap_or(0) as u64;
    }
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

/// A small deterministic generator (SplitMix64).
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub(crate) fn fill(&mut self, buf: &mut [u8]) {
        for c in buf.chunks_mut(8) {
            let w = self.next().to_le_bytes();
            c.copy_from_slice(&w[..c.len()]);
        }
    }

    pub(crate) fn bytes<const N: usize>(&mut self) -> [u8; N] {
        let mut b = [0; N];
        self.fill(&mut b);
        b
    }

    fn vec(&mut self, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        self.fill(&mut v);
        v
    }
}

/// Each way into the kernels: the public tiers, and the one-stream form of the SSE4.2
/// kernel (which this machine's CPU, having PCLMULQDQ, would not otherwise run).
#[derive(Clone, Copy, Debug)]
enum Path {
    K(Kernel),
    #[cfg(target_arch = "x86_64")]
    Sse42OneStream,
}

fn paths() -> Vec<Path> {
    #[allow(unused_mut)]
    let mut v: Vec<Path> = Kernel::all_available().into_iter().map(Path::K).collect();
    #[cfg(target_arch = "x86_64")]
    if Kernel::Sse42.is_available() {
        v.push(Path::Sse42OneStream);
    }
    v
}

impl Path {
    fn crc(self, crc: u32, data: &[u8]) -> u32 {
        match self {
            Path::K(k) => k.crc32c_append(crc, data),
            #[cfg(target_arch = "x86_64")]
            // SAFETY: SSE4.2 is there (`paths`); `data` is valid for reads.
            Path::Sse42OneStream => unsafe {
                x86::sse42_one::<false, false>(std::ptr::null_mut(), data.as_ptr(), data.len(), crc)
                    .0
            },
        }
    }

    fn sum(self, crc: u32, data: &[u8]) -> (u32, u64) {
        match self {
            Path::K(k) => k.crc32c_sum(crc, data),
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as in `crc`.
            Path::Sse42OneStream => unsafe {
                x86::sse42_one::<false, true>(std::ptr::null_mut(), data.as_ptr(), data.len(), crc)
            },
        }
    }

    fn copy(self, dst: &mut [u8], src: &[u8], crc: u32) -> (u32, u64) {
        match self {
            Path::K(k) => k.copy_crc32c_sum(dst, src, crc),
            #[cfg(target_arch = "x86_64")]
            Path::Sse42OneStream => {
                assert_eq!(dst.len(), src.len());
                // SAFETY: as in `crc`, and `dst` is valid for writes of the same length.
                unsafe {
                    x86::sse42_one::<true, true>(dst.as_mut_ptr(), src.as_ptr(), src.len(), crc)
                }
            }
        }
    }

    fn copy_no_sum(self, dst: &mut [u8], src: &[u8], crc: u32) -> u32 {
        match self {
            Path::K(k) => k.copy_crc32c(dst, src, crc),
            #[cfg(target_arch = "x86_64")]
            Path::Sse42OneStream => {
                assert_eq!(dst.len(), src.len());
                // SAFETY: as in `copy`.
                unsafe {
                    x86::sse42_one::<true, false>(dst.as_mut_ptr(), src.as_ptr(), src.len(), crc).0
                }
            }
        }
    }

    /// # Safety
    ///
    /// As [`copy_crc32c_sum_raw`].
    unsafe fn raw(self, dst: *mut u8, src: *const u8, len: usize, crc: u32) -> (u32, u64) {
        match self {
            // SAFETY: the caller's promise.
            Path::K(k) => unsafe { k.copy_crc32c_sum_raw(dst, src, len, crc) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the caller's promise; SSE4.2 is there.
            Path::Sse42OneStream => unsafe { x86::sse42_one::<true, true>(dst, src, len, crc) },
        }
    }
}

const GUARD: u8 = 0xA5;
/// Guard octets each side of a destination.
const MARGIN: usize = 64;

/// `len` octets of `fill` starting at a 64-octet boundary (the widest vector's), with
/// what holds them: an offset into them is its own alignment.
fn aligned(len: usize, fill: u8) -> AlignedBuf {
    let buf = vec![fill; len + 64];
    let base = buf.as_ptr().align_offset(64);
    AlignedBuf { buf, base, len }
}

struct AlignedBuf {
    buf: Vec<u8>,
    base: usize,
    len: usize,
}

impl std::ops::Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf[self.base..self.base + self.len]
    }
}

impl std::ops::DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.base..self.base + self.len]
    }
}

/// Checks every operation of `path` on `data` (placed `src_off` octets and copied to
/// `dst_off` octets past a 64-octet boundary), starting from `init`, against `want_crc` and `want_sum`.
fn check_path(
    path: Path,
    init: u32,
    data: &[u8],
    src_off: usize,
    dst_off: usize,
    want_crc: u32,
    want_sum: u16,
) -> Result<(), TestCaseError> {
    let len = data.len();
    let ctx = format!("{path:?} len {len} src+{src_off} dst+{dst_off} init {init:#x}");
    let mut src_buf = aligned(src_off + len + MARGIN, 0x5A);
    src_buf[src_off..src_off + len].copy_from_slice(data);
    let src = &src_buf[src_off..src_off + len];

    prop_assert_eq!(path.crc(init, src), want_crc, "crc: {}", ctx);
    let (c, s) = path.sum(init, src);
    prop_assert_eq!(c, want_crc, "sum's crc: {}", ctx);
    prop_assert!(s < 1 << 33, "sum not reduced: {}", ctx);
    prop_assert_eq!(fold_sum(s), want_sum, "sum: {}", ctx);

    // The destination starts `dst_off` octets after a margin of guard octets.
    let dst_off = MARGIN + dst_off;
    let check_dst = |buf: &[u8], what: &str| -> Result<(), TestCaseError> {
        prop_assert_eq!(&buf[dst_off..dst_off + len], data, "{} copy: {}", what, ctx);
        prop_assert!(
            buf[..dst_off].iter().all(|&b| b == GUARD),
            "{} wrote before dst: {}",
            what,
            ctx
        );
        prop_assert!(
            buf[dst_off + len..].iter().all(|&b| b == GUARD),
            "{} wrote after dst: {}",
            what,
            ctx
        );
        Ok(())
    };

    let mut dst_buf = aligned(dst_off + len + MARGIN, GUARD);
    let (c, s) = path.copy(&mut dst_buf[dst_off..dst_off + len], src, init);
    prop_assert_eq!(c, want_crc, "copy's crc: {}", ctx);
    prop_assert!(s < 1 << 33, "copy's sum not reduced: {}", ctx);
    prop_assert_eq!(fold_sum(s), want_sum, "copy's sum: {}", ctx);
    check_dst(&dst_buf, "copy")?;

    let mut dst_buf = aligned(dst_off + len + MARGIN, GUARD);
    let c = path.copy_no_sum(&mut dst_buf[dst_off..dst_off + len], src, init);
    prop_assert_eq!(c, want_crc, "copy without sum's crc: {}", ctx);
    check_dst(&dst_buf, "copy without sum")?;

    let mut dst_buf = aligned(dst_off + len + MARGIN, GUARD);
    // SAFETY: the two ranges are inside their (distinct) buffers.
    let (c, s) = unsafe {
        path.raw(
            dst_buf.as_mut_ptr().add(dst_off),
            src_buf.as_ptr().add(src_off),
            len,
            init,
        )
    };
    prop_assert_eq!(c, want_crc, "raw crc: {}", ctx);
    prop_assert_eq!(fold_sum(s), want_sum, "raw sum: {}", ctx);
    check_dst(&dst_buf, "raw")
}

#[test]
fn check_values() {
    let inc: Vec<u8> = (0..32).collect();
    let dec: Vec<u8> = (0..32).rev().collect();
    let vectors: [(&[u8], u32); 5] = [
        (b"123456789", 0xE306_9283),
        (&[0; 32], 0x8A91_36AA),
        (&[0xff; 32], 0x62A8_AB43),
        (&inc, 0x46DD_794E),
        (&dec, 0x113F_DB5C),
    ];
    for (data, want) in vectors {
        assert_eq!(crc_ref(0, data), want, "bitwise reference");
        assert_eq!(
            crc_fast::checksum(crc_fast::CrcAlgorithm::Crc32Iscsi, data),
            u64::from(want)
        );
        assert_eq!(crc32c_append(0, data), want);
        assert_eq!(crc32c_sum(0, data).0, want);
        // Every kernel, even one the CPU lacks (it falls back to the portable one).
        for k in Kernel::ALL {
            assert_eq!(k.crc32c_append(0, data), want, "{k:?}");
        }
        for p in paths() {
            assert_eq!(p.crc(0, data), want, "{p:?}");
        }
    }
    assert_eq!(crc32c_append(0, b""), 0);
    assert_eq!(
        crc32c_append(crc32c_append(0, b"1234"), b"56789"),
        0xE306_9283
    );
}

#[test]
fn reference_sum_and_fold_sum() {
    // RFC 1071's example, 4.1: 00 01 f2 03 f4 f5 f6 f7 sums to 0xddf2.
    let rfc = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
    assert_eq!(reference_sum(&rfc), 0xddf2);
    assert_eq!(fold_sum(crc32c_sum(0, &rfc).1), 0xddf2);
    assert_eq!(fold_sum(0), 0);
    assert_eq!(fold_sum(crc32c_sum(0, &[]).1), 0);
    assert_eq!(fold_sum(crc32c_sum(0, &[0; 100]).1), 0);
    assert_eq!(fold_sum(crc32c_sum(0, &[0xff; 100]).1), 0xffff);
    assert_eq!(fold_sum(crc32c_sum(0, &[0x12]).1), 0x1200);
    assert_eq!(fold_sum(u64::MAX), 0xffff);
    let mut rng = Rng(7);
    for len in [1, 2, 3, 1000, 4095] {
        let data = rng.vec(len);
        assert_eq!(
            fold_sum(crc32c_sum(0, &data).1),
            reference_sum(&data),
            "len {len}"
        );
    }
}

#[test]
fn kernel_api() {
    let all = Kernel::all_available();
    assert_eq!(all.first(), Some(&Kernel::best()));
    assert_eq!(all.last(), Some(&Kernel::Portable));
    for k in Kernel::ALL {
        assert_eq!(all.contains(&k), k.is_available());
        assert!(!k.name().is_empty());
    }
    #[cfg(miri)]
    assert_eq!(Kernel::best(), Kernel::Portable);
}

/// Every length up to 1100 (all the block and tail shapes of every kernel), each tier, at
/// a few alignments, from a nonzero CRC.
#[test]
fn every_length_to_1100() {
    let paths = paths();
    let mut rng = Rng(1100);
    let data = rng.vec(1100);
    for len in 0..=1100 {
        let data = &data[..len];
        let init = rng.next() as u32;
        let want_crc = crc_ref(init, data);
        let want_sum = reference_sum(data);
        for (src_off, dst_off) in [(0, 0), (1, 3), (len % 64, len * 7 % 64)] {
            for &p in &paths {
                check_path(p, init, data, src_off, dst_off, want_crc, want_sum).unwrap();
            }
        }
    }
}

/// Lengths around one to three superblocks of the VPCLMULQDQ kernel's CRC-alone path
/// (where it hands over to its plain loop), each tier.
#[test]
#[cfg(target_arch = "x86_64")]
fn around_superblocks() {
    let paths = paths();
    let mut rng = Rng(3968);
    let data = rng.vec(3 * x86::SUPERBLOCK + 200);
    for k in 1..=3 {
        for len in k * x86::SUPERBLOCK - 140..=k * x86::SUPERBLOCK + 140 {
            let data = &data[..len];
            let init = rng.next() as u32;
            let want_crc = crc_ref(init, data);
            let want_sum = reference_sum(data);
            let (src_off, dst_off) = (len % 61, len % 37);
            for &p in &paths {
                check_path(p, init, data, src_off, dst_off, want_crc, want_sum).unwrap();
            }
        }
    }
}

/// The wide kernels' shapes at every alignment: lengths around the 512-bit kernel's
/// threshold and rounds (256 octets), its 64-octet steps and the 256-bit end it hands
/// over to, and around the length from which a copy first aligns its stores (an even head
/// up to the next 64- or 32-octet boundary goes ahead, an odd one stays), each at every
/// destination alignment modulo 64 with two source alignments, each tier.
#[test]
fn every_alignment_of_the_wide_shapes() {
    let paths = paths();
    let mut rng = Rng(512);
    let data = rng.vec(4200);
    for len in [
        127, 128, 255, 256, 257, 300, 319, 320, 383, 511, 512, 513, 575, 2047, 2048, 2049, 2111,
        2302, 2303, 2304, 2305, 2367, 4095, 4096, 4111,
    ] {
        let data = &data[..len];
        let init = rng.next() as u32;
        let want_crc = crc_ref(init, data);
        let want_sum = reference_sum(data);
        for dst_off in 0..64 {
            for src_off in [dst_off, (dst_off + 17) % 64] {
                for &p in &paths {
                    check_path(p, init, data, src_off, dst_off, want_crc, want_sum).unwrap();
                }
            }
        }
    }
}

/// Runs longer than one kernel call takes go in even pieces: the same results (with small
/// pieces here, the real one being 1 GiB).
#[test]
fn chunked_runs_agree() {
    let mut rng = Rng(42);
    let data = rng.vec(5000);
    for k in Kernel::all_available() {
        for len in [0, 1, 7, 200, 1001, 4999, 5000] {
            let src = &data[..len];
            let init = rng.next() as u32;
            let want = (crc_ref(init, src), reference_sum(src));
            for chunk in [2, 6, 64, 130, 1000, 4098] {
                let mut dst = vec![0; len];
                // SAFETY: `src` and `dst` are valid for `len` octets, distinct.
                let (c, s) = unsafe {
                    k.run_chunked::<true, true>(dst.as_mut_ptr(), src.as_ptr(), len, init, chunk)
                };
                assert_eq!((c, fold_sum(s)), want, "{k:?} len {len} chunk {chunk}");
                assert_eq!(dst, src);
                // SAFETY: `src` is valid for `len` octets; the null `dst` is not touched.
                let (c, s) = unsafe {
                    k.run_chunked::<false, true>(
                        std::ptr::null_mut(),
                        src.as_ptr(),
                        len,
                        init,
                        chunk,
                    )
                };
                assert_eq!(
                    (c, fold_sum(s)),
                    want,
                    "{k:?} len {len} chunk {chunk}, no copy"
                );
            }
        }
    }
}

/// The longest runs: more than one 1 GiB piece of all-ones octets (the largest sums every
/// lane can take). Slow in a debug build, hence ignored: run with `--release --ignored`.
#[test]
#[ignore]
fn runs_over_one_gib() {
    let len = (3 << 29) + 13;
    let data = vec![0xffu8; len];
    let want_crc = crc_fast::checksum(crc_fast::CrcAlgorithm::Crc32Iscsi, &data) as u32;
    let want_sum = reference_sum(&data);
    let gib_crc = crc_fast::checksum(crc_fast::CrcAlgorithm::Crc32Iscsi, &data[..MAX_CHUNK]) as u32;
    for k in Kernel::all_available() {
        let (c, s) = k.crc32c_sum(0, &data);
        assert_eq!((c, fold_sum(s)), (want_crc, want_sum), "{k:?}");
        // The unchunked kernel on the first full GiB: its lanes at their fullest.
        // SAFETY: `data` is valid for reads of `MAX_CHUNK < len` octets; nothing is written.
        let (c, s) = unsafe {
            k.run_chunk::<false, true>(std::ptr::null_mut(), data.as_ptr(), MAX_CHUNK, 0)
        };
        assert_eq!((c, fold_sum(s)), (gib_crc, 0xffff), "{k:?}");
    }
    let mut dst = vec![0u8; len];
    let (c, s) = copy_crc32c_sum(&mut dst, &data, 0);
    assert_eq!((c, fold_sum(s)), (want_crc, want_sum));
    assert!(dst == data);
}

/// Lengths: mostly short, often near a multiple of 128 (the folding kernels' round), up to
/// 70000.
fn len_strategy() -> impl Strategy<Value = usize> {
    prop_oneof![
        0usize..600,
        0usize..=70000,
        (0usize..=546, 0usize..5).prop_map(|(k, d)| (k * 128 + d).saturating_sub(2)),
        (0usize..=2187, 0usize..3).prop_map(|(k, d)| (k * 32 + d).saturating_sub(1)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Every tier, every operation, against the references: random data, length and
    /// alignments, the initial CRC chained from a random prefix.
    #[test]
    fn every_tier_agrees_with_reference(
        len in len_strategy(),
        seed in any::<u64>(),
        prefix_len in 0usize..48,
        src_off in 0usize..64,
        dst_off in 0usize..64,
        cut in any::<prop::sample::Index>(),
    ) {
        let mut rng = Rng(seed);
        let prefix = rng.vec(prefix_len);
        let data = rng.vec(len);
        let init = crc_ref(0, &prefix);
        let want_crc = crc_ref(init, &data);
        let whole = [prefix.as_slice(), &data].concat();
        prop_assert_eq!(want_crc, crc_ref(0, &whole));
        let want_sum = reference_sum(&data);
        let cut = cut.index(len + 1);
        let (a, b) = data.split_at(cut);
        for p in paths() {
            check_path(p, init, &data, src_off, dst_off, want_crc, want_sum)?;
            // Chaining at the cut is the whole run.
            let (ca, sa) = p.sum(init, a);
            let (cb, sb) = p.sum(ca, b);
            prop_assert_eq!(cb, want_crc, "{:?} chained at {}", p, cut);
            prop_assert_eq!(p.crc(p.crc(init, a), b), want_crc, "{:?} chained at {}", p, cut);
            if cut % 2 == 0 {
                prop_assert_eq!(fold_sum(sa + sb), want_sum, "{:?} sums added at {}", p, cut);
            }
        }
        // The appending form (best kernel): the old contents kept, the run after them.
        let mut out = Vec::with_capacity(src_off);
        out.extend_from_slice(&prefix);
        let (c, s) = append_crc32c_sum(&mut out, &data, init);
        prop_assert_eq!(c, want_crc);
        prop_assert_eq!(fold_sum(s), want_sum);
        prop_assert_eq!(&out, &whole);
        let mut out = Vec::with_capacity(src_off);
        out.extend_from_slice(&prefix);
        prop_assert_eq!(append_crc32c(&mut out, &data, init), want_crc);
        prop_assert_eq!(out, whole);
        // And the free functions (best kernel).
        prop_assert_eq!(crc32c_append(init, &data), want_crc);
        let (c, s) = crc32c_sum(init, &data);
        prop_assert_eq!((c, fold_sum(s)), (want_crc, want_sum));
        let mut dst = vec![0; len];
        let (c, s) = copy_crc32c_sum(&mut dst, &data, init);
        prop_assert_eq!((c, fold_sum(s)), (want_crc, want_sum));
        prop_assert_eq!(&dst, &data);
        let mut dst = vec![0; len];
        // SAFETY: two distinct buffers of `len` octets.
        let (c, s) = unsafe { copy_crc32c_sum_raw(dst.as_mut_ptr(), data.as_ptr(), len, init) };
        prop_assert_eq!((c, fold_sum(s)), (want_crc, want_sum));
        prop_assert_eq!(&dst, &data);
        let mut dst = vec![0; len];
        prop_assert_eq!(copy_crc32c(&mut dst, &data, init), want_crc);
        prop_assert_eq!(&dst, &data);
        let mut dst = vec![0; len];
        // SAFETY: two distinct buffers of `len` octets.
        let c = unsafe { copy_crc32c_raw(dst.as_mut_ptr(), data.as_ptr(), len, init) };
        prop_assert_eq!(c, want_crc);
        prop_assert_eq!(dst, data);
    }
}

#[test]
#[should_panic(expected = "lengths differ")]
fn copy_length_mismatch_panics() {
    let mut dst = [0u8; 3];
    copy_crc32c_sum(&mut dst, &[1, 2], 0);
}

proptest! {
    /// A run's sum placed at any offset (odd included) adds to the sum of what precedes
    /// it to give the whole's sum.
    #[test]
    fn sums_of_runs_join_at_any_offset(
        data in proptest::collection::vec(any::<u8>(), 0..3000),
        cut in 0usize..3000,
    ) {
        let cut = cut.min(data.len());
        let (a, b) = data.split_at(cut);
        let joined = crc32c_sum(0, a).1 + sum_at(crc32c_sum(0, b).1, cut);
        prop_assert_eq!(fold_sum(joined), reference_sum(&data));
    }

    /// The scalar sum is RFC 1071's, and joins the kernels' at any offset.
    #[test]
    fn the_scalar_sum_agrees(
        data in proptest::collection::vec(any::<u8>(), 0..300),
        cut in 0usize..300,
    ) {
        prop_assert_eq!(fold_sum(sum_scalar(&data)), reference_sum(&data));
        let cut = cut.min(data.len());
        let (a, b) = data.split_at(cut);
        let joined = crc32c_sum(0, a).1 + sum_at(sum_scalar(b), cut);
        prop_assert_eq!(fold_sum(joined), reference_sum(&data));
    }
}

/// Says which kernels this machine tests (a CPU without a tier cannot test it), and under
/// CI on x86-64 insists on the SSE4.2 one at least: every x86-64 machine CI runs on has
/// it, so its absence is a detection fault, not a machine's limit, and must not pass as a
/// run of the portable kernel alone.
#[test]
fn the_kernels_this_machine_tests() {
    let all = Kernel::all_available();
    eprintln!(
        "kernels tested here: {:?} (best: {})",
        all,
        Kernel::best().name()
    );
    assert!(all.contains(&Kernel::Portable));
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        assert!(
            all.contains(&Kernel::Sse42),
            "no SSE4.2 kernel detected: {all:?}"
        );
        assert_ne!(Kernel::best(), Kernel::Portable);
    }
}

/// A prefetch for writing is a hint: it never faults and changes nothing, wherever it
/// points (inside a buffer, far past its end, at address 0, across the top of memory).
#[test]
fn prefetch_for_write_never_faults_and_changes_nothing() {
    let buf = vec![0x5Au8; 4096];
    prefetch_for_write(buf.as_ptr(), buf.len());
    prefetch_for_write(buf.as_ptr().wrapping_add(1 << 30), 8192);
    prefetch_for_write(std::ptr::null(), 4096);
    prefetch_for_write(usize::MAX as *const u8, 256);
    assert!(buf.iter().all(|&b| b == 0x5A));
}

/// A marked copy written plainly: the source with a marker before each run, as
/// [`Markers`] places them.
fn marked_reference(src: &[u8], markers: Markers) -> Vec<u8> {
    let mut out = Vec::new();
    let mut ptr = markers.fpduptr;
    let head = markers.before.min(src.len());
    out.extend_from_slice(&src[..head]);
    for run in src[head..].chunks(MARKER_INTERVAL - MARKER_LEN) {
        out.extend_from_slice(&[0, 0, (ptr >> 8) as u8, ptr as u8]);
        out.extend_from_slice(run);
        ptr = ptr.wrapping_add(MARKER_INTERVAL as u16);
    }
    out
}

#[test]
fn marked_wire_len_at_the_edges() {
    let m = |before| Markers { before, fpduptr: 0 };
    assert_eq!(m(0).wire_len(0), 0);
    assert_eq!(m(0).wire_len(1), 5);
    assert_eq!(m(0).wire_len(508), 512);
    assert_eq!(m(0).wire_len(509), 517);
    assert_eq!(m(10).wire_len(10), 10, "no marker after the last octet");
    assert_eq!(m(10).wire_len(11), 15);
    assert_eq!(m(10).wire_len(518), 522);
    assert_eq!(m(10).wire_len(519), 527);
    for before in [0, 1, 3, 4, 5, 300, 507, 508] {
        for len in [0, 1, 4, 507, 508, 509, 1016, 1017, 64768] {
            assert_eq!(
                m(before).wire_len(len),
                marked_reference(&vec![0; len], m(before)).len()
            );
        }
    }
}

/// Lengths for marked copies: around whole intervals (`before` + k · 508) and anywhere.
fn marked_len_strategy() -> impl Strategy<Value = (usize, usize)> {
    let before = prop_oneof![0usize..8, 0usize..=508, 504usize..=512, 0usize..5000];
    prop_oneof![
        (before.clone(), 0usize..=70000),
        (before, 0usize..=140, 0usize..9)
            .prop_map(|(b, k, d)| (b, (b + k * 508 + d).saturating_sub(4))),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 384, ..ProptestConfig::default() })]

    /// Every kernel's marked copy against the plain one: the octets (markers where
    /// [`Markers`] puts them, the old contents of the vector kept), the CRC over them from
    /// a chained start, and their sum; the raw form, and the copy split in two at a run's
    /// end and chained, likewise.
    #[test]
    fn marked_copies_agree_with_reference(
        (before, len) in marked_len_strategy(),
        seed in any::<u64>(),
        fpduptr in any::<u16>(),
        prefix_len in 0usize..8,
        init in any::<u32>(),
        sum in any::<bool>(),
    ) {
        let mut rng = Rng(seed);
        let prefix = rng.vec(prefix_len);
        let data = rng.vec(len);
        let markers = Markers { before, fpduptr };
        let wire = marked_reference(&data, markers);
        prop_assert_eq!(markers.wire_len(len), wire.len());
        let want_crc = crc_ref(init, &wire);
        let want_sum = if sum { reference_sum(&wire) } else { 0 };
        let fold = |s: u64| if sum { fold_sum(s) } else { s as u16 };
        for k in Kernel::all_available() {
            let mut out = prefix.clone();
            let (c, s) = k.append_marked(&mut out, &data, markers, init, sum);
            prop_assert_eq!(&out[..prefix_len], &prefix[..], "{:?}", k);
            prop_assert!(out[prefix_len..] == wire[..], "{:?}: octets differ", k);
            prop_assert_eq!(c, want_crc, "{:?}", k);
            prop_assert_eq!(fold(s), want_sum, "{:?}", k);
            // A canary after the marked copy's length: nothing is written past it.
            let mut dst = vec![0xA5u8; wire.len() + 64];
            // SAFETY: `data` holds `len` octets and `dst` more than the marked copy's
            // length, distinct.
            let (c, s) = unsafe {
                k.copy_marked_raw(dst.as_mut_ptr(), data.as_ptr(), len, markers, init, sum)
            };
            prop_assert!(dst[..wire.len()] == wire[..], "{:?}: raw octets differ", k);
            prop_assert!(
                dst[wire.len()..].iter().all(|&b| b == 0xA5),
                "{:?}: written past the end",
                k
            );
            prop_assert_eq!((c, fold(s)), (want_crc, want_sum), "{:?} raw", k);
        }
        // The best kernel's free function, in two pieces cut where a run ends: the second
        // starts with a marker, its pointer 512 on per marker of the first.
        let cut = (before + 508 * (len / 1500)).min(len);
        let first = Markers { before, fpduptr };
        let mut out = Vec::new();
        let (c, s1) = append_marked(&mut out, &data[..cut], first, init, sum);
        let at = out.len();
        let n1 = (at - cut) / MARKER_LEN;
        let second = Markers {
            before: 0,
            fpduptr: fpduptr.wrapping_add((512 * n1) as u16),
        };
        let (c, s2) = append_marked(&mut out, &data[cut..], second, c, sum);
        prop_assert!(out == wire, "chained octets differ (cut {})", cut);
        prop_assert_eq!(c, want_crc);
        prop_assert_eq!(fold(s1 + sum_at(s2, at)), want_sum);
    }
}

/// Every length to 2100 after heads of every residue class that matters (so a marker
/// lands at the start of each kind of step: a round, a 32- or 16-octet step, the word
/// tail), every kernel against the plain marked copy.
#[test]
fn marked_copies_of_every_short_length() {
    let mut rng = Rng(0x6d61_726b);
    let data = rng.vec(2100);
    for before in [
        0, 1, 3, 4, 5, 31, 64, 100, 127, 128, 129, 255, 300, 500, 507, 508, 509, 511, 700, 2100,
    ] {
        for len in 0..=2100 {
            let markers = Markers {
                before,
                fpduptr: (before * 7) as u16,
            };
            let src = &data[..len];
            let wire = marked_reference(src, markers);
            let want = (crc_ref(5, &wire), reference_sum(&wire));
            for k in Kernel::all_available() {
                let mut out = Vec::new();
                let (c, s) = k.append_marked(&mut out, src, markers, 5, true);
                assert!(
                    out == wire,
                    "{k:?} before {before} len {len}: octets differ"
                );
                assert_eq!((c, fold_sum(s)), want, "{k:?} before {before} len {len}");
                let mut out = Vec::new();
                let (c, s) = k.append_marked(&mut out, src, markers, 5, false);
                assert!(
                    out == wire,
                    "{k:?} before {before} len {len}: octets differ"
                );
                assert_eq!(
                    (c, s),
                    (want.0, 0),
                    "{k:?} before {before} len {len}, no sum"
                );
            }
        }
    }
}

/// The shapes of the wide marked copies at many destination alignments: `before` around
/// the 256- and 512-octet boundaries (below 4, where the AVX-512 marked kernel's first
/// marker goes through its stack buffer; at or past the copy's length, where it has no
/// marker), lengths from one 256-octet round to several intervals, each at eight
/// destination offsets modulo 64 (all 64 over the cases) and a few source offsets, with
/// and without the sum, every kernel against the plain marked copy: the octets (nothing
/// written in the guard octets around them), the CRC and the sum. Counts the copies that
/// meet the AVX-512 marked kernel's precondition and those that fall back to the
/// VPCLMULQDQ one: a check of the inputs, that they reach both kernels on a CPU that has
/// them (on one without, the other kernels take the same inputs).
#[test]
fn marked_copies_around_the_wide_rounds() {
    let mut rng = Rng(0x0200_0100);
    let data = rng.vec(4200);
    let befores = [
        0, 1, 2, 3, 4, 5, 8, 60, 63, 64, 65, 127, 128, 129, 191, 192, 200, 252, 253, 255, 256, 257,
        260, 300, 383, 384, 448, 500, 507, 508, 509, 511, 512, 513, 516, 576, 600,
    ];
    let lens = [
        256, 257, 259, 260, 300, 320, 383, 384, 507, 508, 509, 512, 513, 600, 700, 1016, 1017,
        1280, 1531, 2048, 2100, 2600, 3071, 3555, 4095, 4096, 4200,
    ];
    // Copies that meet `avx512_marked`'s precondition; that fall back to
    // `vpclmul_marked` (none is short enough to go run by run).
    let mut shapes = [0usize; 2];
    for before in befores {
        for len in lens {
            let markers = Markers {
                before,
                fpduptr: (before * 31 + len) as u16,
            };
            let src = &data[..len];
            let wire = marked_reference(src, markers);
            let n = wire.len();
            let head = before.min(len);
            assert!(n - head % 128 >= 128);
            shapes[usize::from(n - head % 256 < 256)] += 1;
            let init = rng.next() as u32;
            let want = (crc_ref(init, &wire), reference_sum(&wire));
            let src_off = (before + 3 * len) % 64;
            let mut src_buf = aligned(src_off + len + MARGIN, 0x5A);
            src_buf[src_off..src_off + len].copy_from_slice(src);
            for j in 0..8 {
                let dst_off = (8 * j + before + len) % 64;
                for k in Kernel::all_available() {
                    for sum in [true, false] {
                        let ctx =
                            format!("{k:?} before {before} len {len} dst+{dst_off} sum {sum}");
                        let at = MARGIN + dst_off;
                        let mut dst_buf = aligned(at + n + MARGIN, GUARD);
                        // SAFETY: the source's `len` octets and the destination's `n` (the
                        // marked copy's length) are inside their own buffers.
                        let (c, s) = unsafe {
                            k.copy_marked_raw(
                                dst_buf.as_mut_ptr().add(at),
                                src_buf.as_ptr().add(src_off),
                                len,
                                markers,
                                init,
                                sum,
                            )
                        };
                        assert!(dst_buf[at..at + n] == wire[..], "{ctx}: octets differ");
                        assert!(
                            dst_buf[..at].iter().all(|&b| b == GUARD),
                            "{ctx}: written before the destination"
                        );
                        assert!(
                            dst_buf[at + n..].iter().all(|&b| b == GUARD),
                            "{ctx}: written past the end"
                        );
                        assert_eq!(c, want.0, "{ctx}: crc");
                        if sum {
                            assert!(s < 1 << 33, "{ctx}: sum not reduced");
                            assert_eq!(fold_sum(s), want.1, "{ctx}: sum");
                        } else {
                            assert_eq!(s, 0, "{ctx}: a sum without the sum");
                        }
                    }
                }
            }
        }
    }
    assert!(shapes[0] >= 500 && shapes[1] >= 50, "shapes: {shapes:?}");
}

/// The strided copy, safe-side: the runs of `len` octets from `src` (first `first`, then
/// `run` each, `gap` between them) into `dst[..len]`, by whichever path `raw` names.
fn strided(
    raw: bool,
    dst: &mut [u8],
    src: &[u8],
    len: usize,
    first: usize,
    run: usize,
    gap: usize,
) {
    let need = if len <= first {
        len
    } else {
        len + gap * (len - first).div_ceil(run)
    };
    assert!(src.len() >= need && dst.len() >= len && (len == 0 || (first >= 1 && run >= 1)));
    // SAFETY: checked just above: the source holds the runs and gaps, the destination
    // `len` octets; two distinct slices.
    unsafe {
        if raw {
            copy_strided_raw(dst.as_mut_ptr(), src.as_ptr(), len, first, run, gap);
        } else {
            copy_strided_portable(dst.as_mut_ptr(), src.as_ptr(), len, first, run, gap);
        }
    }
}

/// The runs of `src` as a plain loop of slices: what a strided copy must produce.
fn strided_reference(src: &[u8], len: usize, first: usize, run: usize, gap: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    let mut s = 0;
    let mut take = first.min(len);
    while out.len() < len {
        out.extend_from_slice(&src[s..s + take]);
        s += take + gap;
        take = run.min(len - out.len());
    }
    out
}

proptest! {
    /// The strided copy (AVX-512 where the CPU has it) and its portable form agree with
    /// the reference, for MPA's shape (runs of 508, gaps of 4) and for any other, at any
    /// alignment, and write nothing past the destination's `len` octets.
    #[test]
    fn strided_copies_agree_with_reference(
        len in 0usize..5000,
        first in 1usize..600,
        mpa in any::<bool>(),
        run in 1usize..600,
        gap in 0usize..9,
        src_align in 0usize..64,
        dst_align in 0usize..64,
        seed in any::<u64>(),
    ) {
        let (run, gap, first) = if mpa { (508, 4, first.min(508)) } else { (run, gap, first) };
        let need = if len <= first { len } else { len + gap * (len - first).div_ceil(run) };
        let mut rng = Rng(seed | 1);
        let mut src = aligned(src_align + need, 0);
        rng.fill(&mut src[..]);
        let src = &src[src_align..];
        let want = strided_reference(src, len, first, run, gap);
        for raw in [true, false] {
            let mut dst = aligned(dst_align + len + 64, 0xa5);
            strided(raw, &mut dst[dst_align..], src, len, first, run, gap);
            prop_assert_eq!(&dst[dst_align..dst_align + len], &want[..]);
            prop_assert!(dst[..dst_align].iter().all(|&b| b == 0xa5));
            prop_assert!(dst[dst_align + len..].iter().all(|&b| b == 0xa5));
        }
    }
}
