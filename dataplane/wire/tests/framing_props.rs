//! Property tests: frame -> deframe round trips under any segmentation and marker origin,
//! and out-of-order recovery from arbitrary segments.

use proptest::prelude::*;
use wire::mpa::deframe::{DeframeError, Deframer, UlpduRuns};
use wire::mpa::fpdu::{FpduLayout, FpduMode, Framer, MARKER_INTERVAL};
use wire::mpa::MpaErrorCode;

fn mode_strategy() -> impl Strategy<Value = FpduMode> {
    (any::<bool>(), any::<bool>()).prop_map(|(markers, crc)| FpduMode { markers, crc })
}

/// ULPDU sizes: mostly small and around the marker interval, sometimes near the maximum.
fn ulpdu_len_strategy() -> impl Strategy<Value = usize> {
    prop_oneof![
        8 => 1usize..200,
        6 => 200usize..2100,
        1 => 60000usize..=64768,
    ]
}

/// A stream of FPDUs plus the ground truth: (stream offset, ULPDU) of each.
fn build(mode: FpduMode, origin: u64, lens: &[usize], seed: u8) -> (Vec<u8>, Vec<(u64, Vec<u8>)>) {
    let mut f = Framer::at_offset(mode, origin);
    let mut out = Vec::new();
    let mut truth = Vec::new();
    for (i, &len) in lens.iter().enumerate() {
        let ulpdu: Vec<u8> = (0..len)
            .map(|j| (j as u8).wrapping_mul(31).wrapping_add(i as u8 ^ seed))
            .collect();
        truth.push((f.stream_offset(), ulpdu.clone()));
        f.frame(&ulpdu, &mut out).unwrap();
    }
    (out, truth)
}

/// Splits `data` into chunks whose sizes cycle through `cuts`.
fn chunks<'a>(data: &'a [u8], cuts: &'a [usize]) -> Vec<&'a [u8]> {
    let mut v = Vec::new();
    let mut rest = data;
    let mut i = 0;
    while !rest.is_empty() {
        let n = cuts[i % cuts.len()].clamp(1, rest.len());
        v.push(&rest[..n]);
        rest = &rest[n..];
        i += 1;
    }
    v
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Every ULPDU comes back, in order, at its stream offset, whatever the segmentation and
    /// wherever the marker origin puts the markers (header, payload, PAD, CRC).
    #[test]
    fn frame_deframe_round_trip(
        mode in mode_strategy(),
        origin in 0u64..4096,
        lens in proptest::collection::vec(ulpdu_len_strategy(), 1..12),
        cuts in proptest::collection::vec(1usize..1600, 1..8),
        seed in any::<u8>(),
    ) {
        let (stream, truth) = build(mode, origin, &lens, seed);
        // Every marker sits at a multiple of 512 from the origin and names its FPDU.
        if mode.markers {
            for (off, u) in &truth {
                let l = FpduLayout::new(*off, u.len(), true);
                for m in l.marker_positions() {
                    prop_assert_eq!(m % MARKER_INTERVAL, 0);
                    let at = (m - origin) as usize;
                    prop_assert_eq!(&stream[at..at + 2], &[0u8, 0][..]);
                    let ptr = u16::from_be_bytes([stream[at + 2], stream[at + 3]]);
                    prop_assert_eq!(ptr, l.fpduptr_at(m));
                }
            }
        }
        let mut d = Deframer::at_offset(mode, origin);
        let mut got = Vec::new();
        for c in chunks(&stream, &cuts) {
            d.push(c, |f| got.push((f.stream_offset, f.ulpdu.to_vec()))).unwrap();
        }
        prop_assert_eq!(d.pending_octets(), 0);
        prop_assert_eq!(d.stream_offset(), origin + stream.len() as u64);
        prop_assert_eq!(got, truth);
    }

    /// Delivered where they arrived ([`Deframer::push_runs_hinted`]), the ULPDUs are the
    /// same: their runs, joined, are each ULPDU (no marker octet in them), none is empty,
    /// and every tail (`skip`) is the ULPDU's tail.
    #[test]
    fn runs_are_the_ulpdu(
        mode in mode_strategy(),
        origin in 0u64..4096,
        lens in proptest::collection::vec(ulpdu_len_strategy(), 1..8),
        cuts in proptest::collection::vec(1usize..1600, 1..8),
        skips in proptest::collection::vec(0usize..70000, 1..6),
        seed in any::<u8>(),
    ) {
        let (stream, truth) = build(mode, origin, &lens, seed);
        let mut d = Deframer::at_offset(mode, origin);
        let mut got: Vec<(u64, Vec<u8>)> = Vec::new();
        let mut checked = Ok(());
        let check = |u: &UlpduRuns<'_>, whole: &[u8]| -> Result<(), TestCaseError> {
            let runs: Vec<&[u8]> = u.runs().collect();
            prop_assert_eq!(runs.iter().map(|r| r.len()).sum::<usize>(), u.len());
            prop_assert!(runs.iter().all(|r| !r.is_empty()));
            prop_assert_eq!(runs.concat(), whole.to_vec());
            prop_assert_eq!(u.first_run(), runs.first().copied().unwrap_or_default());
            if !mode.markers {
                prop_assert_eq!(runs.len(), usize::from(!whole.is_empty()));
            }
            prop_assert_eq!(u.contiguous().is_some(), runs.len() <= 1);
            Ok(())
        };
        for c in chunks(&stream, &cuts) {
            d.push_runs_hinted(c, &Default::default(), |f| {
                let whole = f.ulpdu.to_vec();
                checked = checked.clone().and_then(|_| check(&f.ulpdu, &whole));
                for &n in &skips {
                    let n = n % (whole.len() + 2);
                    let tail = f.ulpdu.skip(n);
                    checked = checked.clone().and_then(|_| {
                        check(&tail, &whole[n.min(whole.len())..])
                    });
                }
                got.push((f.stream_offset, whole));
            })
            .unwrap();
        }
        checked?;
        prop_assert_eq!(got, truth);
    }

    /// A flipped bit is caught (CRC on) and nothing from the damaged FPDU on is delivered;
    /// everything delivered before it is intact. The origin is four-octet aligned with the
    /// FPDUs, as it is on every RFC stream: then every marker is covered by a CRC.
    #[test]
    fn corruption_is_detected_with_crc(
        markers in any::<bool>(),
        origin in (0u64..256).prop_map(|x| x * 4),
        lens in proptest::collection::vec(1usize..1500, 1..10),
        flip in any::<proptest::sample::Index>(),
        bit in 0u8..8,
        cuts in proptest::collection::vec(1usize..700, 1..5),
    ) {
        let mode = FpduMode { markers, crc: true };
        let (mut stream, truth) = build(mode, origin, &lens, 7);
        let at = flip.index(stream.len());
        stream[at] ^= 1 << bit;
        let mut d = Deframer::at_offset(mode, origin);
        let mut got = Vec::new();
        let mut err = None;
        for c in chunks(&stream, &cuts) {
            if let Err(e) = d.push(c, |f| got.push((f.stream_offset, f.ulpdu.to_vec()))) {
                err.get_or_insert(e);
            }
        }
        // Delivered FPDUs are a prefix of the truth, all before the damaged FPDU.
        let damaged = truth.iter().rposition(|t| t.0 <= origin + at as u64).unwrap();
        prop_assert!(got.len() <= damaged);
        for (g, t) in got.iter().zip(&truth) {
            prop_assert_eq!(g, t);
        }
        match err {
            Some(e) => {
                prop_assert!(matches!(e.code(), MpaErrorCode::CrcMismatch | MpaErrorCode::MarkerMismatch));
                prop_assert_eq!(d.push(&[0u8; 8], |_| ()), Err(DeframeError::Stopped(e.code())));
            }
            // A damaged ULPDU_Length can claim more octets than the stream holds: the
            // deframer is still waiting for them, and has delivered nothing wrong.
            None => prop_assert!(d.pending_octets() > 0),
        }
    }

    /// Out-of-order recovery finds exactly the FPDUs that are whole inside the segment from
    /// the first one holding a marker on, each at its offset with its exact bytes.
    #[test]
    fn out_of_order_recovery(
        crc in any::<bool>(),
        lens in proptest::collection::vec(1usize..1400, 2..30),
        a in any::<proptest::sample::Index>(),
        b in any::<proptest::sample::Index>(),
    ) {
        let mode = FpduMode { markers: true, crc };
        let (stream, truth) = build(mode, 0, &lens, 3);
        let (mut a, mut b) = (a.index(stream.len()), b.index(stream.len() + 1));
        if a > b { std::mem::swap(&mut a, &mut b); }
        prop_assume!(a > 0);
        let seg = &stream[a..b];
        let mut d = Deframer::new(mode);
        let mut got = Vec::new();
        let n = d.recover_out_of_order(a as u64, seg, |f| got.push((f.stream_offset, f.ulpdu.to_vec())));
        prop_assert_eq!(n, got.len());
        let whole: Vec<_> = truth
            .iter()
            .filter(|(off, u)| *off >= a as u64 && FpduLayout::new(*off, u.len(), true).end() <= b as u64)
            .cloned()
            .collect();
        let first_marked = whole
            .iter()
            .position(|(off, u)| FpduLayout::new(*off, u.len(), true).marker_positions().next().is_some());
        let expected: Vec<_> = match first_marked { Some(i) => whole[i..].to_vec(), None => Vec::new() };
        prop_assert_eq!(got, expected);
        // The in-order pass is unaffected.
        let mut all = Vec::new();
        d.push(&stream, |f| all.push((f.stream_offset, f.ulpdu.to_vec()))).unwrap();
        prop_assert_eq!(all, truth);
    }

    /// Out-of-order recovery never delivers damaged data: with CRC on, whatever it finds in
    /// a corrupted segment is byte-exact ground truth.
    #[test]
    fn out_of_order_recovery_never_delivers_corrupt_data(
        lens in proptest::collection::vec(1usize..1400, 2..30),
        a in any::<proptest::sample::Index>(),
        b in any::<proptest::sample::Index>(),
        flips in proptest::collection::vec((any::<proptest::sample::Index>(), 0u8..8), 1..4),
    ) {
        let mode = FpduMode { markers: true, crc: true };
        let (stream, truth) = build(mode, 0, &lens, 5);
        let (mut a, mut b) = (a.index(stream.len()), b.index(stream.len() + 1));
        if a > b { std::mem::swap(&mut a, &mut b); }
        prop_assume!(a > 0 && b > a);
        let mut seg = stream[a..b].to_vec();
        for (i, bit) in &flips {
            let at = i.index(seg.len());
            seg[at] ^= 1 << bit;
        }
        let mut d = Deframer::new(mode);
        let mut got = Vec::new();
        d.recover_out_of_order(a as u64, &seg, |f| got.push((f.stream_offset, f.ulpdu.to_vec())));
        for g in &got {
            prop_assert!(truth.contains(g), "delivered something that was never sent: {:?}", g.0);
        }
    }

    /// Arbitrary bytes never make the deframer panic, whatever the mode and chunking.
    #[test]
    fn deframer_never_panics(
        mode in mode_strategy(),
        origin in 0u64..2048,
        data in proptest::collection::vec(any::<u8>(), 0..3000),
        cuts in proptest::collection::vec(1usize..300, 1..6),
        seg_at in 1u64..5000,
    ) {
        let mut d = Deframer::at_offset(mode, origin);
        d.recover_out_of_order(origin + seg_at, &data, |_| ());
        for c in chunks(&data, &cuts) {
            if d.push(c, |_| ()).is_err() {
                break;
            }
        }
    }
}

/// Every marker origin from 0 to 511 moves the markers through every part of an FPDU:
/// its ULPDU_Length, the ULPDU, the PAD and the CRC, and between FPDUs.
#[test]
fn markers_land_in_every_part_of_an_fpdu() {
    let mode = FpduMode {
        markers: true,
        crc: true,
    };
    let mut seen = [false; 5]; // header, payload, pad, crc, between
    for origin in 0..512u64 {
        // 3 octets of ULPDU -> 3 octets of PAD.
        let lens = [517usize, 3, 700, 1];
        let (stream, truth) = build(mode, origin, &lens, 1);
        for (off, u) in &truth {
            let l = FpduLayout::new(*off, u.len(), true);
            for m in l.marker_positions() {
                if m == l.start && l.has_leading_marker() {
                    seen[4] = true;
                    continue;
                }
                // Content octets before the marker.
                let markers_before = l
                    .marker_positions()
                    .filter(|&p| p < m && p >= l.header)
                    .count() as u64;
                let idx = (m - l.header - 4 * markers_before) as usize;
                let pad = (4 - (2 + u.len()) % 4) % 4;
                let part = if idx < 2 {
                    0
                } else if idx < 2 + u.len() {
                    1
                } else if idx < 2 + u.len() + pad {
                    2
                } else {
                    3
                };
                seen[part] = true;
            }
        }
        let mut d = Deframer::at_offset(mode, origin);
        let mut got = Vec::new();
        d.push(&stream, |f| got.push((f.stream_offset, f.ulpdu.to_vec())))
            .unwrap();
        assert_eq!(got, truth, "origin {origin}");
    }
    assert_eq!(seen, [true; 5], "header, payload, PAD, CRC, between");
}
