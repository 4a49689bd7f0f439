//! The receive buffer: in-order octets waiting for the consumer, out-of-order octets
//! waiting for the gap before them (RFC 9293 section 3.10.7.4 "seventh, process the
//! segment text"), and the SACK blocks that describe them (RFC 2018 section 4).

use std::collections::{BTreeMap, VecDeque};

/// What one insertion did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Inserted {
    /// Octets by which the in-order point (RCV.NXT) advanced.
    pub advanced: u64,
    /// The segment started beyond the in-order point (out of order).
    pub out_of_order: bool,
    /// Every octet of the segment was already held (duplicate).
    pub duplicate: bool,
    /// Out-of-order octets were present before and the in-order point moved into them
    /// (a hole was filled).
    pub filled_hole: bool,
}

/// Receive-side reassembly for one connection. Offsets are stream offsets (octet 0 is the
/// first octet after the SYN).
#[derive(Debug, Clone)]
pub(crate) struct RecvBuffer {
    /// In-order octets not yet taken by the consumer; the first is at `read_off`.
    ready: VecDeque<u8>,
    read_off: u64,
    /// Out-of-order blocks, disjoint and not adjacent, all beyond `nxt()`. Ring buffers,
    /// so that a block grows at either end for the cost of what it gains (a hole filled
    /// from the top down prepends each piece) and two blocks joined cost the smaller.
    ooo: BTreeMap<u64, VecDeque<u8>>,
    ooo_bytes: usize,
    max_blocks: usize,
    /// Stream offsets of the most recently received out-of-order segments, newest first
    /// (RFC 2018: the first SACK block reports the most recent segment).
    recent: VecDeque<u64>,
    /// Out-of-order segments not yet reported to the consumer.
    reports: VecDeque<(u64, Vec<u8>)>,
    report_bytes: usize,
    report: bool,
    report_limit: usize,
    /// Octets copied into and between the out-of-order blocks and onto `ready` from them
    /// (what the reassembly's cost bound is about; tests only).
    #[cfg(test)]
    copied: u64,
}

impl RecvBuffer {
    pub fn new(max_blocks: usize, report: bool, report_limit: usize) -> Self {
        RecvBuffer {
            ready: VecDeque::new(),
            read_off: 0,
            ooo: BTreeMap::new(),
            ooo_bytes: 0,
            max_blocks: max_blocks.max(1),
            recent: VecDeque::new(),
            reports: VecDeque::new(),
            report_bytes: 0,
            report,
            report_limit,
            #[cfg(test)]
            copied: 0,
        }
    }

    /// Counts `n` octets copied by the reassembly (tests only).
    #[inline]
    fn copied(&mut self, n: usize) {
        #[cfg(test)]
        {
            self.copied += n as u64;
        }
        let _ = n;
    }

    /// Frees the memory of empty buffers.
    pub fn shrink(&mut self) {
        if self.ready.is_empty() {
            self.ready = VecDeque::new();
        }
        if self.recent.is_empty() {
            self.recent = VecDeque::new();
        }
        if self.reports.is_empty() {
            self.reports = VecDeque::new();
        }
    }

    /// The next expected stream offset (RCV.NXT as a stream offset).
    pub fn nxt(&self) -> u64 {
        self.read_off + self.ready.len() as u64
    }

    /// In-order octets waiting for the consumer.
    pub fn ready_len(&self) -> usize {
        self.ready.len()
    }

    /// Out-of-order octets held.
    pub fn ooo_bytes(&self) -> usize {
        self.ooo_bytes
    }

    /// Stores `data` found at stream offset `off`. The caller has trimmed it to the receive
    /// window.
    pub fn insert(&mut self, off: u64, data: &[u8]) -> Inserted {
        let mut res = Inserted::default();
        let nxt = self.nxt();
        let end = off + data.len() as u64;
        if data.is_empty() {
            return res;
        }
        if end <= nxt {
            res.duplicate = true;
            return res;
        }
        if off <= nxt {
            let had_ooo = !self.ooo.is_empty();
            self.ready.extend(&data[(nxt - off) as usize..]);
            self.pull_ooo();
            res.advanced = self.nxt() - nxt;
            res.filled_hole = had_ooo && self.nxt() > end;
            return res;
        }
        res.out_of_order = true;
        // The pieces of [off, end) not yet held, counted first (no list is made: this runs
        // for every out-of-order segment).
        let mut pieces = 0;
        let mut from = off;
        while let Some((_, b)) = self.first_missing(from, end) {
            pieces += 1;
            from = b;
        }
        if pieces == 0 {
            res.duplicate = true;
            self.note_recent(off);
            return res;
        }
        if self.ooo.len() + pieces > self.max_blocks + 1 {
            // Too fragmented: drop the segment, the peer will send it again (bounds the
            // work a hostile peer can cause).
            return res;
        }
        let mut from = off;
        while let Some((a, b)) = self.first_missing(from, end) {
            // `[off, b)` is held once this piece is in: the next search starts at `b`.
            from = b;
            let piece = &data[(a - off) as usize..(b - off) as usize];
            self.ooo_bytes += piece.len();
            self.put_piece(a, b, piece);
        }
        if self.ooo.len() > self.max_blocks {
            // Still too many blocks: forget the highest one (never the one just added
            // unless it is the highest; either way data is only re-requested, not lost).
            if let Some((&s, _)) = self.ooo.iter().next_back() {
                if let Some(v) = self.ooo.remove(&s) {
                    self.ooo_bytes -= v.len();
                }
            }
        }
        // Report only what is kept (RFC 5044 3.1.2: TCP must have committed to keeping a
        // segment before passing it to MPA).
        let kept = self
            .ooo
            .range(..=off)
            .next_back()
            .is_some_and(|(s, v)| *s <= off && s + v.len() as u64 >= end);
        if !kept {
            return res;
        }
        self.note_recent(off);
        if self.report && self.report_bytes + data.len() <= self.report_limit {
            self.report_bytes += data.len();
            self.reports.push_back((off, data.to_vec()));
        }
        res
    }

    fn note_recent(&mut self, off: u64) {
        self.recent.retain(|&o| o != off);
        self.recent.push_front(off);
        self.recent.truncate(8);
    }

    /// The first range of `[lo, hi)` that no block holds.
    fn first_missing(&self, lo: u64, hi: u64) -> Option<(u64, u64)> {
        let mut pos = lo;
        if let Some((&s, v)) = self.ooo.range(..=lo).next_back() {
            pos = pos.max(s + v.len() as u64);
        }
        for (&s, v) in self.ooo.range(lo..hi) {
            if s > pos {
                return Some((pos, s));
            }
            pos = pos.max(s + v.len() as u64);
        }
        (pos < hi).then_some((pos, hi))
    }

    /// Holds `piece`, the octets `[a, b)` that no block holds, keeping the blocks disjoint
    /// and not adjacent: it joins the block that ends at `a` (appended) and the one that
    /// starts at `b` (prepended), and when it bridges the two, the smaller of them moves
    /// into the larger. Each octet is copied once when it arrives and again only when its
    /// block is the smaller of two joined, so a window's worth of segments costs
    /// O(n log n) copying in any order of arrival.
    fn put_piece(&mut self, a: u64, b: u64, piece: &[u8]) {
        let before = self
            .ooo
            .range(..a)
            .next_back()
            .filter(|(s, v)| **s + v.len() as u64 == a)
            .map(|(s, _)| *s);
        let after = self.ooo.remove(&b);
        let copied = match (before, after) {
            (Some(s), None) => {
                if let Some(v) = self.ooo.get_mut(&s) {
                    v.extend(piece);
                }
                piece.len()
            }
            (None, Some(mut next)) => {
                let n = prepend(&mut next, piece);
                self.ooo.insert(a, next);
                n
            }
            (Some(s), Some(next)) => {
                // `s` was found in the map just above.
                let mut prev = self.ooo.remove(&s).unwrap_or_default();
                prev.extend(piece);
                let (joined, n) = join(prev, next);
                self.ooo.insert(s, joined);
                piece.len() + n
            }
            (None, None) => {
                self.ooo.insert(a, VecDeque::from(piece.to_vec()));
                piece.len()
            }
        };
        self.copied(copied);
    }

    /// Moves out-of-order blocks that now touch the in-order point into `ready`.
    fn pull_ooo(&mut self) {
        loop {
            let nxt = self.nxt();
            let Some((&s, _)) = self.ooo.iter().next() else {
                break;
            };
            if s > nxt {
                break;
            }
            let Some(mut v) = self.ooo.remove(&s) else {
                break;
            };
            self.ooo_bytes -= v.len();
            v.drain(..((nxt - s) as usize).min(v.len()));
            // A hole filled by one retransmission hands the whole block over, not a copy.
            let (ready, n) = join(std::mem::take(&mut self.ready), v);
            self.ready = ready;
            self.copied(n);
        }
        let nxt = self.nxt();
        self.recent.retain(|&o| o > nxt);
        // Reports about octets now in order are stale only for the consumer's purposes if
        // it already got them in order; keep them: MPA ignores offsets below its position.
    }

    /// Whether octets at stream offset `off` are the next in order with nothing buffered
    /// (so they may be handed out straight away, [`RecvBuffer::delivered`]).
    pub fn in_order_and_empty(&self, off: u64) -> bool {
        off == self.nxt() && self.ready.is_empty() && self.ooo.is_empty()
    }

    /// Records that the next `n` in-order octets were handed out without being buffered.
    pub fn delivered(&mut self, n: usize) -> Inserted {
        self.read_off += n as u64;
        Inserted {
            advanced: n as u64,
            ..Inserted::default()
        }
    }

    /// Hands the in-order octets to `f` (in at most two slices) and releases them.
    /// Returns how many octets were handed out.
    pub fn drain(&mut self, max: usize, mut f: impl FnMut(u64, &[u8])) -> usize {
        let n = self.ready.len().min(max);
        if n == 0 {
            return 0;
        }
        let (a, b) = self.ready.as_slices();
        let a_n = a.len().min(n);
        f(self.read_off, &a[..a_n]);
        if n > a_n {
            f(self.read_off + a_n as u64, &b[..n - a_n]);
        }
        self.ready.drain(..n);
        self.read_off += n as u64;
        n
    }

    /// Hands every not-yet-reported out-of-order segment to `f`.
    pub fn drain_reports(&mut self, mut f: impl FnMut(u64, &[u8])) -> usize {
        let mut n = 0;
        while let Some((off, data)) = self.reports.pop_front() {
            self.report_bytes -= data.len();
            f(off, &data);
            n += 1;
        }
        n
    }

    /// The out-of-order block `[start, end)` (stream offsets) that holds octet `off`.
    pub fn block_holding(&self, off: u64) -> Option<(u64, u64)> {
        let (&s, v) = self.ooo.range(..=off).next_back()?;
        let e = s + v.len() as u64;
        (off < e).then_some((s, e))
    }

    /// Up to `max` SACK blocks `[start, end)` in stream offsets, the block holding the most
    /// recently received segment first (RFC 2018 section 4).
    pub fn sack_blocks(&self, max: usize) -> Vec<(u64, u64)> {
        let mut out: Vec<(u64, u64)> = Vec::new();
        for &o in &self.recent {
            if out.len() >= max {
                break;
            }
            if let Some((&s, v)) = self.ooo.range(..=o).next_back() {
                let e = s + v.len() as u64;
                if o < e && !out.contains(&(s, e)) {
                    out.push((s, e));
                }
            }
        }
        for (&s, v) in &self.ooo {
            if out.len() >= max {
                break;
            }
            let b = (s, s + v.len() as u64);
            if !out.contains(&b) {
                out.push(b);
            }
        }
        out
    }

    /// Drops everything (connection reset).
    pub fn clear(&mut self) {
        self.read_off = self.nxt();
        self.ready.clear();
        self.ooo.clear();
        self.ooo_bytes = 0;
        self.recent.clear();
        self.reports.clear();
        self.report_bytes = 0;
    }
}

/// `front` followed by `back`, for the cost of the shorter: it is the one copied, appended
/// to the longer or put in front of it. Also returns the octets copied or moved (growth of
/// the buffer's capacity aside).
fn join(mut front: VecDeque<u8>, mut back: VecDeque<u8>) -> (VecDeque<u8>, usize) {
    if front.len() >= back.len() {
        let n = back.len();
        front.append(&mut back);
        (front, n)
    } else {
        let (x, y) = front.as_slices();
        let n = front.len();
        back.extend(x);
        back.extend(y);
        back.rotate_right(n);
        let moved = n + rotation(&back, n);
        (back, moved)
    }
}

/// Puts `piece` in front of `v`, for the cost of the piece (appended, then rotated round).
/// Returns the octets copied or moved (growth of the buffer's capacity aside).
fn prepend(v: &mut VecDeque<u8>, piece: &[u8]) -> usize {
    v.extend(piece);
    v.rotate_right(piece.len());
    piece.len() + rotation(v, piece.len())
}

/// Octets a ring buffer's `rotate_right(k)` moves: the fewer of `k` and `len - k`.
fn rotation(v: &VecDeque<u8>, k: usize) -> usize {
    k.min(v.len() - k)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(off: u64, n: usize) -> Vec<u8> {
        (off..off + n as u64).map(|x| x as u8).collect()
    }

    #[test]
    fn reassembles_and_sacks() {
        let mut r = RecvBuffer::new(8, true, 1 << 20);
        let i = r.insert(10, &bytes(10, 5));
        assert!(i.out_of_order);
        assert_eq!(r.sack_blocks(3), vec![(10, 15)]);
        r.insert(20, &bytes(20, 5));
        assert_eq!(r.sack_blocks(3), vec![(20, 25), (10, 15)]);
        // Bridge the two blocks.
        r.insert(13, &bytes(13, 9));
        assert_eq!(r.sack_blocks(3), vec![(10, 25)]);
        assert_eq!(r.ooo_bytes(), 15);
        let d = r.insert(12, &bytes(12, 3));
        assert_eq!(r.ooo_bytes(), 15, "{d:?}");
        let i = r.insert(0, &bytes(0, 10));
        assert_eq!(i.advanced, 25);
        assert!(i.filled_hole);
        assert!(r.sack_blocks(3).is_empty());
        let mut got = Vec::new();
        r.drain(usize::MAX, |off, d| {
            assert_eq!(off as usize, got.len());
            got.extend_from_slice(d)
        });
        assert_eq!(got, bytes(0, 25));
        assert!(r.insert(5, &bytes(5, 10)).duplicate);
        let mut reports = Vec::new();
        r.drain_reports(|o, d| reports.push((o, d.len())));
        assert_eq!(reports, vec![(10, 5), (20, 5), (13, 9)]);
    }

    /// A join copies the shorter side into the longer, whose buffer it keeps (the same
    /// allocation when it had room), and reports what it copied.
    #[test]
    fn join_keeps_the_longer_buffer() {
        let long = |n: usize| {
            let mut v = VecDeque::with_capacity(2 * n);
            v.extend(bytes(0, n));
            v
        };
        let front = long(1000);
        let at = front.as_slices().0.as_ptr();
        let (j, n) = join(front, VecDeque::from(bytes(1000, 10)));
        assert_eq!((j.as_slices().0.as_ptr(), n), (at, 10));
        assert!(j.iter().copied().eq(bytes(0, 1010)));
        // The shorter in front: copied into the longer and rotated round (both counted).
        let back = long(1000);
        let cap = back.capacity();
        let (j, n) = join(VecDeque::from(bytes(0, 10)), back);
        assert_eq!((j.capacity(), n), (cap, 10 + 10));
        assert!(j
            .iter()
            .copied()
            .eq(bytes(0, 10).into_iter().chain(bytes(0, 1000))));
    }

    /// Feeds `order` (segment indices) of a stream of `n` segments of `len` octets, then
    /// checks the stream came out whole; returns the octets copied per octet of stream.
    fn copies_per_octet(n: usize, len: usize, order: &[usize]) -> f64 {
        let mut r = RecvBuffer::new(n + 1, false, 0);
        for &i in order {
            let off = (i * len) as u64;
            r.insert(off, &bytes(off, len));
        }
        let mut got = Vec::new();
        r.drain(usize::MAX, |_, d| got.extend_from_slice(d));
        assert_eq!(got, bytes(0, n * len));
        r.copied as f64 / (n * len) as f64
    }

    /// The reassembly's cost bound: every octet is copied once when it arrives into an
    /// out-of-order block, and again only when its block is the smaller of two joined
    /// (twice when the smaller is in front: appended, then rotated round), so a window
    /// of n segments costs at most 1 + 2 log2(n) copies per octet in any order of
    /// arrival (a block's growth in capacity aside). Orders that cost O(n^2) when a
    /// block grows by copying (a hole filled from the top down, blocks bridged in
    /// ascending and descending order, the two ends alternately, bit-reversed, a
    /// shuffle) each stay within 2 + 2 log2(n); the quadratic cost would be hundreds.
    #[test]
    fn reassembly_copies_each_octet_o_log_n_times() {
        let (n, len) = (2048usize, 100usize);
        let bound = 2.0 + 2.0 * (n as f64).log2();
        // Descending: every piece is prepended to the block above it.
        let descending: Vec<usize> = (0..n).rev().collect();
        // Every other segment first, then the rest ascending (the first segment last, so
        // that all of them go out of order): each bridges the grown block below and a
        // one-segment block above.
        let bridged: Vec<usize> = (1..n)
            .step_by(2)
            .chain((2..n).step_by(2))
            .chain([0])
            .collect();
        // The same with the rest descending: a one-segment block below, the grown one above.
        let bridged_down: Vec<usize> = (1..n).step_by(2).chain((0..n).step_by(2).rev()).collect();
        // The two ends alternately, towards the middle, the first segment last.
        let mut ends = Vec::new();
        let (mut lo, mut hi) = (1, n - 1);
        while lo <= hi {
            ends.push(hi);
            if lo < hi {
                ends.push(lo);
            }
            lo += 1;
            hi -= 1;
        }
        ends.push(0);
        // Bit-reversed: blocks of every size joined, the halves of each about even.
        let bits = n.trailing_zeros();
        let reversed: Vec<usize> = (0..n)
            .map(|i| i.reverse_bits() >> (usize::BITS - bits))
            .collect();
        // A shuffle (a fixed permutation: multiplication by an odd number modulo 2^11).
        let shuffled: Vec<usize> = (0..n).map(|i| (i * 1229 + 7) % n).collect();
        for (name, order) in [
            ("descending", &descending),
            ("bridged ascending", &bridged),
            ("bridged descending", &bridged_down),
            ("both ends", &ends),
            ("bit-reversed", &reversed),
            ("shuffled", &shuffled),
        ] {
            let c = copies_per_octet(n, len, order);
            assert!(
                c <= bound,
                "{name}: {c:.1} copies per octet, more than {bound:.1}"
            );
        }
    }

    proptest::proptest! {
        /// Segments of a stream arriving in any order, overlapping, duplicated: the
        /// in-order octets are the stream's, and the blocks held are disjoint, not
        /// adjacent, beyond RCV.NXT, at most `max_blocks`, hold the stream's octets and
        /// add up to `ooo_bytes`.
        #[test]
        fn reassembly_holds_the_stream(
            segs in proptest::collection::vec((0u64..3000, 1usize..400), 1..60),
            max_blocks in 1usize..12,
        ) {
            let stream = bytes(0, 4000);
            let mut r = RecvBuffer::new(max_blocks, false, 0);
            let mut got = Vec::new();
            for &(off, len) in segs.iter().chain([(0u64, 1usize)].iter()) {
                let off = off.max(r.nxt().saturating_sub(50));
                let end = (off as usize + len).min(stream.len());
                r.insert(off, &stream[off as usize..end]);
                r.drain(usize::MAX, |o, d| {
                    assert_eq!(o as usize, got.len());
                    got.extend_from_slice(d);
                });
                proptest::prop_assert_eq!(&got[..], &stream[..got.len()]);
                let mut held = 0;
                let mut prev_end = None;
                for (&s, v) in &r.ooo {
                    proptest::prop_assert!(s > r.nxt(), "a block at or before RCV.NXT");
                    proptest::prop_assert!(!v.is_empty());
                    if let Some(e) = prev_end {
                        proptest::prop_assert!(s > e, "blocks overlap or touch");
                    }
                    proptest::prop_assert!(v.iter().eq(&stream[s as usize..s as usize + v.len()]), "block at {} holds other octets", s);
                    prev_end = Some(s + v.len() as u64);
                    held += v.len();
                }
                proptest::prop_assert!(r.ooo.len() <= max_blocks);
                proptest::prop_assert_eq!(r.ooo_bytes(), held);
            }
        }
    }

    proptest::proptest! {
        /// With room for every block, nothing is dropped: after segments in any order
        /// (descending and overlapping ones included), the octets delivered in order and
        /// the octets held are exactly those inserted, each insertion says truly whether
        /// it was a duplicate, out of order, or advanced RCV.NXT, and every segment reported
        /// out of order (reports on) is the stream's.
        #[test]
        fn reassembly_keeps_every_octet_it_is_given(
            segs in proptest::collection::vec((0u64..6000, 1usize..700), 1..80),
            descending in proptest::bool::ANY,
        ) {
            let stream = bytes(0, 7000);
            let mut segs = segs;
            if descending {
                segs.sort_by_key(|s| std::cmp::Reverse(s.0));
            }
            let mut r = RecvBuffer::new(10_000, true, usize::MAX);
            let mut given = vec![false; stream.len()];
            let mut got = Vec::new();
            let mut kept_out_of_order = 0;
            for &(off, len) in &segs {
                let end = (off as usize + len).min(stream.len());
                let nxt = r.nxt();
                let new = (off as usize..end).any(|i| !given[i]) && end as u64 > nxt;
                let i = r.insert(off, &stream[off as usize..end]);
                kept_out_of_order += usize::from(i.out_of_order && !i.duplicate);
                proptest::prop_assert_eq!(i.duplicate, !new, "{:?} for {}..{}", i, off, end);
                proptest::prop_assert_eq!(i.out_of_order, off > nxt);
                proptest::prop_assert_eq!(i.advanced, r.nxt() - nxt);
                for g in &mut given[off as usize..end] {
                    *g = true;
                }
                r.drain(usize::MAX, |o, d| {
                    assert_eq!(o as usize, got.len());
                    got.extend_from_slice(d);
                });
                proptest::prop_assert_eq!(&got[..], &stream[..got.len()]);
                // Delivered: a prefix of what was given; held: the rest of it.
                let mut held = vec![false; stream.len()];
                for (&s, v) in &r.ooo {
                    proptest::prop_assert!(v.iter().eq(&stream[s as usize..s as usize + v.len()]), "block at {} holds other octets", s);
                    for h in &mut held[s as usize..s as usize + v.len()] {
                        *h = true;
                    }
                }
                for k in 0..stream.len() {
                    let has = k < got.len() || held[k];
                    proptest::prop_assert_eq!(has, given[k], "octet {}", k);
                }
            }
            let mut reported = 0;
            r.drain_reports(|o, d| {
                assert_eq!(d, &stream[o as usize..o as usize + d.len()]);
                reported += 1;
            });
            // With room for every block and no report limit, every segment kept out of
            // order is reported, once.
            proptest::prop_assert_eq!(reported, kept_out_of_order);
        }
    }

    #[test]
    fn adjacent_segments_make_one_block() {
        let mut r = RecvBuffer::new(8, false, 0);
        for k in 1..6u64 {
            r.insert(k * 100, &bytes(k * 100, 100));
        }
        assert_eq!(r.sack_blocks(3), vec![(100, 600)]);
        r.insert(700, &bytes(700, 100));
        r.insert(600, &bytes(600, 100));
        assert_eq!(r.sack_blocks(3), vec![(100, 800)]);
    }

    #[test]
    fn bounded_blocks() {
        let mut r = RecvBuffer::new(4, false, 0);
        for k in 0..20u64 {
            r.insert(10 + k * 10, &[1, 2, 3]);
        }
        assert!(r.sack_blocks(10).len() <= 4);
        assert!(r.ooo_bytes() <= 4 * 3);
        let mut r = RecvBuffer::new(2, true, 1 << 20);
        r.insert(100, &[1]);
        r.insert(200, &[2]);
        // A third block is over the limit: not kept, not reported (still out of order, so
        // acknowledged at once).
        let i = r.insert(300, &[3]);
        assert!(i.out_of_order);
        assert_eq!(r.ooo_bytes(), 2);
        let mut offs = Vec::new();
        r.drain_reports(|o, _| offs.push(o));
        assert_eq!(offs, vec![100, 200]);
    }
}
