//! The receive side of MPA: FPDU deframing (RFC 5044 sections 4, 6 and 8).
//!
//! [`Deframer`] is fed the in-order byte stream of one half connection in chunks of any
//! size (TCP may split or pack FPDUs however it likes, RFC 5044 section 6 "receivers MUST
//! NOT depend on FPDU alignment"). For each complete FPDU it
//!
//! 1. checks the CRC when CRC is in use (error 2 otherwise),
//! 2. checks that every marker inside the FPDU points at the FPDU's ULPDU_Length field, and
//!    that a marker between FPDUs is 0 (error 3 otherwise),
//! 3. delivers the ULPDU with its stream position: as one slice ([`Deframer::push`],
//!    which copies it out from between the markers when there are any), or where it
//!    arrived ([`Deframer::push_runs_hinted`], [`UlpduRuns`]), so that DDP places the
//!    payload from between the markers in one copy.
//!
//! After an error it delivers nothing more on that half connection (RFC 5044 section 8);
//! closing the connection is left to DDP's ULP.
//!
//! With markers on, [`Deframer::recover_out_of_order`] finds whole FPDUs in a segment that
//! arrived ahead of a gap, by the markers it holds (RFC 5044 section 6, rules 2 and 3), so
//! DDP can place them before the gap is filled. The in-order pass sees the same FPDUs again
//! once the gap is filled and checks them again; DDP tells them apart by stream position.

use super::fpdu::{
    content_to_wire, fpdu_len_without_markers, is_marker_position, FpduLayout, FpduMode, CRC_LEN,
    MARKER_INTERVAL, MARKER_LEN, ULPDU_LENGTH_LEN,
};
use super::MpaErrorCode;
use crate::crc;
use fastpath::kernels;
use fastpath::regmem::{AccessError, RegionMemory};

/// Whether a delivered FPDU's CRC was checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrcCheck {
    /// CRC is in use and the FPDU's CRC matched.
    Verified,
    /// CRC is not in use on this half connection; the field was not checked.
    Unchecked,
}

/// A validated FPDU, handed to DDP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fpdu<'a> {
    /// Stream position (from the marker origin) of the FPDU's first octet, its leading
    /// marker included.
    pub stream_offset: u64,
    /// The ULPDU (a DDP segment), markers stripped.
    pub ulpdu: &'a [u8],
    /// Octets the FPDU took on the wire, markers included.
    pub wire_len: usize,
    /// Whether the CRC was checked.
    pub crc: CrcCheck,
}

/// A validated FPDU whose ULPDU is left where it arrived ([`Deframer::push_runs_hinted`]):
/// with markers on, the ULPDU's octets lie in runs between the markers, and DDP places
/// them from there instead of from a copy with the markers taken out.
#[derive(Clone, Copy, Debug)]
pub struct FpduRuns<'a> {
    /// Stream position (from the marker origin) of the FPDU's first octet, its leading
    /// marker included.
    pub stream_offset: u64,
    /// The ULPDU (a DDP segment), in the received octets.
    pub ulpdu: UlpduRuns<'a>,
    /// Octets the FPDU took on the wire, markers included.
    pub wire_len: usize,
    /// Whether the CRC was checked.
    pub crc: CrcCheck,
}

/// A ULPDU (or a tail of one) as it lies in received octets: contiguous, or in runs
/// between the 4-octet markers that sit at every multiple of 512 of the stream
/// (RFC 5044 section 4.3).
#[derive(Clone, Copy, Debug)]
pub struct UlpduRuns<'a> {
    /// The received octets from the first ULPDU octet to the last, markers among them
    /// included (never a leading or trailing marker).
    wire: &'a [u8],
    /// Stream position of `wire[0]`, when markers are on; `None` when `wire` is the ULPDU.
    pos: Option<u64>,
    /// ULPDU octets (markers not counted).
    len: usize,
}

impl<'a> UlpduRuns<'a> {
    /// A contiguous ULPDU.
    pub fn flat(ulpdu: &'a [u8]) -> Self {
        UlpduRuns {
            wire: ulpdu,
            pos: None,
            len: ulpdu.len(),
        }
    }

    /// The ULPDU that starts at stream position `pos`, `len` octets long, in `wire`
    /// (from that position to its last octet, markers included).
    fn marked(wire: &'a [u8], pos: u64, len: usize) -> Self {
        if wire.len() == len {
            return Self::flat(wire);
        }
        UlpduRuns {
            wire,
            pos: Some(pos),
            len,
        }
    }

    /// ULPDU octets.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the ULPDU is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The ULPDU as one slice, when no marker lies inside it.
    pub fn contiguous(&self) -> Option<&'a [u8]> {
        self.pos.is_none().then_some(self.wire)
    }

    /// The runs of ULPDU octets, in order; their lengths add up to [`UlpduRuns::len`], and
    /// none is empty.
    pub fn runs(&self) -> Runs<'a> {
        Runs {
            wire: self.wire,
            pos: self.pos,
        }
    }

    /// With markers inside: the received octets (the runs and the markers between them)
    /// and the length of the first run; every later run is [`MARKER_INTERVAL`] less
    /// [`MARKER_LEN`] octets long, the last what is left. `None` when contiguous.
    pub fn strided(&self) -> Option<(&'a [u8], usize)> {
        let pos = self.pos?;
        if is_marker_position(pos) {
            // Never made so (a ULPDU starts after a marker); the runs handle it anyway.
            return None;
        }
        let first = (MARKER_INTERVAL - pos % MARKER_INTERVAL) as usize;
        Some((self.wire, first.min(self.wire.len())))
    }

    /// Copies the ULPDU to region `mem` at `offset`: in one strided copy that skips the
    /// markers when some lie inside it ([`UlpduRuns::strided`],
    /// [`RegionMemory::write_strided`]), else from its runs; with `last_visible_last` its
    /// final octet is stored last, with Release. The range is checked before anything is
    /// written.
    pub fn write_to(
        &self,
        mem: &RegionMemory,
        offset: usize,
        last_visible_last: bool,
    ) -> Result<(), AccessError> {
        match self.strided() {
            Some((wire, first)) => mem.write_strided(
                offset,
                self.len,
                wire,
                first,
                MARKER_INTERVAL as usize - MARKER_LEN,
                MARKER_LEN,
                last_visible_last,
            ),
            None => mem.write_gather(offset, self.len, self.runs(), last_visible_last),
        }
    }

    /// The first run (empty for an empty ULPDU).
    pub fn first_run(&self) -> &'a [u8] {
        self.runs().next().unwrap_or_default()
    }

    /// The ULPDU without its first `n` octets (all of them when `n` is longer).
    pub fn skip(&self, n: usize) -> UlpduRuns<'a> {
        let Some(pos) = self.pos else {
            let rest = &self.wire[n.min(self.len)..];
            return Self::flat(rest);
        };
        let mut at = 0usize;
        let mut left = n.min(self.len);
        while left > 0 {
            let p = pos + at as u64;
            if is_marker_position(p) {
                at += MARKER_LEN;
                continue;
            }
            let run = (MARKER_INTERVAL - p % MARKER_INTERVAL) as usize;
            let take = run.min(left).min(self.wire.len() - at);
            at += take;
            left -= take;
        }
        // A tail that starts at a marker starts after it.
        if at < self.wire.len() && is_marker_position(pos + at as u64) {
            at = (at + MARKER_LEN).min(self.wire.len());
        }
        Self::marked(
            &self.wire[at..],
            pos + at as u64,
            self.len - n.min(self.len),
        )
    }

    /// Appends the ULPDU's octets to `out`.
    pub fn copy_into(&self, out: &mut Vec<u8>) {
        out.reserve(self.len);
        for run in self.runs() {
            out.extend_from_slice(run);
        }
    }

    /// The ULPDU as one slice: itself when contiguous, else copied into `scratch` with
    /// the markers taken out.
    pub fn flatten<'s>(&self, scratch: &'s mut Vec<u8>) -> &'s [u8]
    where
        'a: 's,
    {
        match self.contiguous() {
            Some(flat) => flat,
            None => {
                scratch.clear();
                self.copy_into(scratch);
                scratch
            }
        }
    }

    /// The ULPDU's octets in a new vector.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::new();
        self.copy_into(&mut v);
        v
    }
}

/// The runs of a [`UlpduRuns`].
#[derive(Clone, Debug)]
pub struct Runs<'a> {
    wire: &'a [u8],
    pos: Option<u64>,
}

impl<'a> Iterator for Runs<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let Some(pos) = self.pos else {
            let all = std::mem::take(&mut self.wire);
            return (!all.is_empty()).then_some(all);
        };
        let mut skip = 0usize;
        if is_marker_position(pos) {
            skip = MARKER_LEN.min(self.wire.len());
        }
        let p = pos + skip as u64;
        let run = ((MARKER_INTERVAL - p % MARKER_INTERVAL) as usize).min(self.wire.len() - skip);
        if run == 0 {
            self.wire = &[];
            return None;
        }
        let out = &self.wire[skip..skip + run];
        self.wire = &self.wire[skip + run..];
        self.pos = Some(p + run as u64);
        Some(out)
    }
}

/// An error found on a half connection's FPDU stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeframeError {
    /// The received CRC does not match the one computed over the FPDU (MPA error 2).
    CrcMismatch {
        /// Stream position of the FPDU's first octet.
        stream_offset: u64,
        /// Its ULPDU_Length.
        ulpdu_len: usize,
        /// The CRC-32C computed over the received FPDU.
        computed: u32,
        /// The CRC-32C the FPDU carried.
        received: u32,
    },
    /// A marker does not point where ULPDU_Length says the FPDU starts (MPA error 3).
    MarkerMismatch {
        /// Stream position of the FPDU's first octet, as ULPDU_Length fields say.
        stream_offset: u64,
        /// Stream position of the disagreeing marker.
        marker_offset: u64,
        /// The FPDUPTR it carried.
        fpduptr: u16,
        /// The FPDUPTR it should carry.
        expected: u16,
    },
    /// An earlier error stopped this half connection; nothing more is delivered.
    Stopped(MpaErrorCode),
}

impl DeframeError {
    /// The MPA error code to report (and to carry in a Terminate, layer 2, EType 0).
    pub fn code(&self) -> MpaErrorCode {
        match self {
            DeframeError::CrcMismatch { .. } => MpaErrorCode::CrcMismatch,
            DeframeError::MarkerMismatch { .. } => MpaErrorCode::MarkerMismatch,
            DeframeError::Stopped(code) => *code,
        }
    }
}

impl std::fmt::Display for DeframeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            DeframeError::CrcMismatch {
                stream_offset,
                ulpdu_len,
                computed,
                received,
            } => write!(
                f,
                "{}: FPDU at stream offset {stream_offset} (ULPDU_Length {ulpdu_len}) carries \
                 CRC {received:#010x}, computed {computed:#010x}",
                self.code()
            ),
            DeframeError::MarkerMismatch {
                stream_offset,
                marker_offset,
                fpduptr,
                expected,
            } => write!(
                f,
                "{}: marker at stream offset {marker_offset} has FPDUPTR {fpduptr}, but the \
                 FPDU at {stream_offset} needs {expected}",
                self.code()
            ),
            DeframeError::Stopped(code) => {
                write!(f, "half connection stopped after an earlier {code}")
            }
        }
    }
}

impl std::error::Error for DeframeError {}

/// CRC32c values already taken over exact runs of received octets, so that the deframer
/// does not read them a second time: the receive path takes them in the same pass as the
/// TCP checksum ([`CrcHints::take`]) and the deframer uses a hint when it checks an FPDU
/// whose CRC coverage is exactly a hinted run of the same buffer ([`Deframer::push_hinted`]).
///
/// A hint names its octets by address and length: it holds for those octets as long as
/// they are not changed, which the receive path guarantees by deframing them from the
/// same frame before it lets go of it (octets copied elsewhere, into TCP's receive
/// buffer, are at another address and are checked in full). A CRC is a function of the
/// octets alone, so a hint can never make a wrong FPDU pass.
#[derive(Debug, Clone, Default)]
pub struct CrcHints {
    /// `(address, length, CRC32c)` of each run, in stream order.
    runs: Vec<(usize, usize, u32)>,
    /// The run the next lookup most likely wants: the deframer checks FPDUs in the order
    /// the hints were taken, so a lookup looks there first (a segment of forty small
    /// FPDUs costs forty comparisons, not eight hundred).
    next: std::cell::Cell<usize>,
}

/// At most this many hints are taken per segment (a jumbo segment of small FPDUs: the
/// rest are checked the usual way).
const MAX_HINTS: usize = 128;

impl CrcHints {
    /// No hints.
    pub fn new() -> Self {
        Self::default()
    }

    /// Forgets every hint (keeps the memory).
    pub fn clear(&mut self) {
        self.runs.clear();
        self.next.set(0);
    }

    /// Hints held.
    pub fn len(&self) -> usize {
        self.runs.len()
    }

    /// Whether no hint is held.
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// The CRC32c of `run`, if hinted.
    fn get(&self, run: &[u8]) -> Option<u32> {
        let key = (run.as_ptr() as usize, run.len());
        let i = self.next.get();
        let found = match self.runs.get(i) {
            Some(&(a, l, _)) if (a, l) == key => Some(i),
            _ => self.runs.iter().position(|&(a, l, _)| (a, l) == key),
        }?;
        self.next.set(found + 1);
        Some(self.runs[found].2)
    }

    /// One pass over a TCP segment's `payload` that returns its one's complement sum (as
    /// `wire::tcp::checksum::data` gives it, for the TCP checksum) and, where `payload`
    /// holds whole FPDUs from its first octet on (stream position `pos`, the deframer's
    /// [`Deframer::stream_offset`] when the segment is the next in order), takes the CRC32c
    /// of each FPDU in the same pass ([`fastpath::kernels::crc32c_sum`]). Hints from
    /// earlier segments are forgotten. With CRC off for the half connection, or octets
    /// that do not start with an FPDU, it is the sum alone and no hint is wrong, only
    /// unused.
    pub fn take(&mut self, mode: FpduMode, mut pos: u64, payload: &[u8]) -> u16 {
        self.clear();
        let mut sum = 0u64;
        let mut at = 0usize;
        if mode.crc {
            while at < payload.len() && self.runs.len() < MAX_HINTS {
                let rest = &payload[at..];
                let Some(layout) = read_layout(pos, rest, mode.markers) else {
                    break;
                };
                if layout.wire_len > rest.len() {
                    break;
                }
                let covered = &rest[..layout.crc_coverage];
                let (crc, s) = kernels::crc32c_sum(0, covered);
                // FPDUs are multiples of four octets long: each starts at an even offset
                // of the segment, so the sums add.
                sum += s;
                self.runs
                    .push((covered.as_ptr() as usize, covered.len(), crc));
                let (_, t) = kernels::crc32c_sum(0, &rest[layout.crc_coverage..layout.wire_len]);
                sum += kernels::sum_at(t, layout.crc_coverage);
                at += layout.wire_len;
                pos = layout.end();
            }
        }
        let (_, t) = kernels::crc32c_sum(0, &payload[at..]);
        sum += kernels::sum_at(t, at);
        kernels::fold_sum(sum)
    }
}

/// Streaming FPDU receiver for one half connection.
#[derive(Debug, Clone)]
pub struct Deframer {
    mode: FpduMode,
    /// Stream position of the first octet not yet consumed (of `partial`'s first octet when
    /// `partial` holds anything).
    pos: u64,
    /// Octets of an FPDU that has not fully arrived yet.
    partial: Vec<u8>,
    /// Markers stripped from an FPDU land here.
    scratch: Vec<u8>,
    failed: Option<MpaErrorCode>,
}

impl Deframer {
    /// A deframer whose first octet is the marker origin (the first octet the peer sends
    /// after its own startup frame).
    pub fn new(mode: FpduMode) -> Self {
        Self::at_offset(mode, 0)
    }

    /// A deframer whose next octet sits at stream position `pos` from the marker origin.
    pub fn at_offset(mode: FpduMode, pos: u64) -> Self {
        Deframer {
            mode,
            pos,
            partial: Vec::new(),
            scratch: Vec::new(),
            failed: None,
        }
    }

    /// The FPDU mode.
    pub fn mode(&self) -> FpduMode {
        self.mode
    }

    /// Stream position of the first FPDU octet not yet delivered (the start of the FPDU in
    /// progress, if any).
    pub fn stream_offset(&self) -> u64 {
        self.pos
    }

    /// Octets received of an FPDU that has not fully arrived.
    pub fn pending_octets(&self) -> usize {
        self.partial.len()
    }

    /// The error that stopped this half connection, if any.
    pub fn error(&self) -> Option<MpaErrorCode> {
        self.failed
    }

    /// Feeds the next in-order octets of the stream. Every complete, valid FPDU is passed to
    /// `deliver` in order. On the first invalid FPDU the error is returned, nothing from it
    /// on is delivered, and every later call returns [`DeframeError::Stopped`].
    pub fn push<F>(&mut self, data: &[u8], deliver: F) -> Result<(), DeframeError>
    where
        F: FnMut(Fpdu<'_>),
    {
        self.push_hinted(data, &CrcHints::default(), deliver)
    }

    /// [`Deframer::push`], taking the CRC32c of an FPDU from `hints` when they hold it for
    /// its exact octets ([`CrcHints`]) instead of reading them again.
    pub fn push_hinted<F>(
        &mut self,
        data: &[u8],
        hints: &CrcHints,
        mut deliver: F,
    ) -> Result<(), DeframeError>
    where
        F: FnMut(Fpdu<'_>),
    {
        let mut scratch = std::mem::take(&mut self.scratch);
        let r = self.push_runs_hinted(data, hints, |f| {
            deliver(Fpdu {
                stream_offset: f.stream_offset,
                ulpdu: f.ulpdu.flatten(&mut scratch),
                wire_len: f.wire_len,
                crc: f.crc,
            })
        });
        self.scratch = scratch;
        r
    }

    /// [`Deframer::push_hinted`], delivering each ULPDU where it arrived ([`FpduRuns`]):
    /// with markers on, nothing is copied to take them out.
    pub fn push_runs_hinted<F>(
        &mut self,
        mut data: &[u8],
        hints: &CrcHints,
        mut deliver: F,
    ) -> Result<(), DeframeError>
    where
        F: FnMut(FpduRuns<'_>),
    {
        if let Some(code) = self.failed {
            return Err(DeframeError::Stopped(code));
        }
        while !data.is_empty() {
            if self.partial.is_empty() {
                // Fast path: whole FPDUs straight from the caller's buffer.
                match self.layout_of(data) {
                    Some(layout) if data.len() >= layout.wire_len => {
                        let (fpdu, rest) = data.split_at(layout.wire_len);
                        self.check_and_deliver(&layout, fpdu, hints, &mut deliver)?;
                        data = rest;
                    }
                    _ => {
                        self.partial.extend_from_slice(data);
                        data = &[];
                    }
                }
            } else {
                let layout = match self.layout_of(&self.partial) {
                    Some(l) => l,
                    None => {
                        // Still short of the ULPDU_Length field: take octets one short read at
                        // a time until it is complete (at most 7 octets).
                        let need = self.header_octets_needed() - self.partial.len();
                        let n = need.min(data.len());
                        self.partial.extend_from_slice(&data[..n]);
                        data = &data[n..];
                        continue;
                    }
                };
                let need = layout.wire_len - self.partial.len();
                let n = need.min(data.len());
                self.partial.extend_from_slice(&data[..n]);
                data = &data[n..];
                if self.partial.len() == layout.wire_len {
                    let fpdu = std::mem::take(&mut self.partial);
                    let result = self.check_and_deliver(&layout, &fpdu, hints, &mut deliver);
                    self.partial = fpdu;
                    self.partial.clear();
                    result?;
                }
            }
        }
        Ok(())
    }

    /// Octets from the FPDU start needed to read its ULPDU_Length field.
    fn header_octets_needed(&self) -> usize {
        header_octets_needed(self.pos, self.mode.markers)
    }

    /// The layout of the FPDU starting at `self.pos`, if `buf` (its first octets) holds its
    /// ULPDU_Length field.
    fn layout_of(&self, buf: &[u8]) -> Option<FpduLayout> {
        read_layout(self.pos, buf, self.mode.markers)
    }

    fn check_and_deliver<F>(
        &mut self,
        layout: &FpduLayout,
        wire: &[u8],
        hints: &CrcHints,
        deliver: &mut F,
    ) -> Result<(), DeframeError>
    where
        F: FnMut(FpduRuns<'_>),
    {
        match check_fpdu(self.mode, layout, wire, hints) {
            Ok(fpdu) => {
                deliver(fpdu);
                self.pos = layout.end();
                Ok(())
            }
            Err(e) => {
                self.failed = Some(e.code());
                Err(e)
            }
        }
    }

    /// Finds and validates whole FPDUs in a segment that arrived out of order, at stream
    /// position `seg_offset`, before the octets ahead of it. Only possible with markers on:
    /// each marker in the segment locates the FPDU that holds it (FPDUPTR), and FPDUs that
    /// follow a validated one are found by its ULPDU_Length. Every FPDU wholly inside the
    /// segment, with a good CRC (if in use) and markers that agree, is passed to `deliver`;
    /// returns how many were.
    ///
    /// Nothing found here is an error yet: a bad FPDU is reported by [`Deframer::push`] when
    /// the gap is filled (RFC 5044 section 8 lets a receiver drop such a segment).
    /// Octets at or before the in-order position, and everything after a stopped half
    /// connection, are ignored.
    pub fn recover_out_of_order<F>(&mut self, seg_offset: u64, seg: &[u8], mut deliver: F) -> usize
    where
        F: FnMut(Fpdu<'_>),
    {
        if !self.mode.markers || self.failed.is_some() || seg_offset <= self.pos {
            return 0;
        }
        let seg_end = seg_offset + seg.len() as u64;
        let mut delivered = 0;
        // Position at which to look for the next FPDU start, found by a marker or by the
        // previous FPDU's length.
        let mut next_marker = seg_offset.div_ceil(MARKER_INTERVAL) * MARKER_INTERVAL;
        let mut cursor: Option<u64> = None;
        loop {
            let start = match cursor {
                Some(s) => s,
                None => {
                    // Locate an FPDU by the next marker wholly inside the segment.
                    let m = next_marker;
                    if m + MARKER_LEN as u64 > seg_end {
                        break;
                    }
                    next_marker += MARKER_INTERVAL;
                    let at = (m - seg_offset) as usize;
                    let ptr = u16::from_be_bytes([seg[at + 2], seg[at + 3]]) & !3;
                    let start = if ptr == 0 {
                        m
                    } else {
                        let Some(header) = m.checked_sub(u64::from(ptr)) else {
                            continue;
                        };
                        // A marker right before the header fell between FPDUs and leads it.
                        match header.checked_sub(MARKER_LEN as u64) {
                            Some(lead) if is_marker_position(lead) => lead,
                            _ => header,
                        }
                    };
                    if start < seg_offset || start <= self.pos {
                        continue;
                    }
                    start
                }
            };
            let from = (start - seg_offset) as usize;
            let Some(layout) = read_layout(start, &seg[from..], true) else {
                cursor = None;
                continue;
            };
            if layout.end() > seg_end {
                cursor = None;
                continue;
            }
            let wire = &seg[from..from + layout.wire_len];
            match check_fpdu(self.mode, &layout, wire, &CrcHints::default()) {
                Ok(f) => {
                    deliver(Fpdu {
                        stream_offset: f.stream_offset,
                        ulpdu: f.ulpdu.flatten(&mut self.scratch),
                        wire_len: f.wire_len,
                        crc: f.crc,
                    });
                    delivered += 1;
                    cursor = Some(layout.end());
                    // Markers inside the FPDU just delivered need no second look.
                    next_marker =
                        next_marker.max(layout.end().div_ceil(MARKER_INTERVAL) * MARKER_INTERVAL);
                }
                Err(_) => cursor = None,
            }
        }
        delivered
    }
}

/// Offset from `start` of content octet `index` (ULPDU_Length is octets 0 and 1) of an FPDU
/// that starts at stream position `start`, its markers skipped.
fn content_offset(start: u64, index: usize, markers: bool) -> usize {
    let header = if markers && is_marker_position(start) {
        start + MARKER_LEN as u64
    } else {
        start
    };
    (content_to_wire(header, index, markers) - start) as usize
}

/// Octets from an FPDU start at `start` up to and including its ULPDU_Length field.
fn header_octets_needed(start: u64, markers: bool) -> usize {
    content_offset(start, ULPDU_LENGTH_LEN - 1, markers) + 1
}

/// Reads ULPDU_Length from the first octets `buf` of an FPDU starting at `start`.
fn read_layout(start: u64, buf: &[u8], markers: bool) -> Option<FpduLayout> {
    let hi = *buf.get(content_offset(start, 0, markers))?;
    let lo = *buf.get(content_offset(start, 1, markers))?;
    Some(FpduLayout::new(
        start,
        usize::from(u16::from_be_bytes([hi, lo])),
        markers,
    ))
}

/// Checks one complete FPDU (`wire`, exactly `layout.wire_len` octets): CRC first, then
/// markers (RFC 5044 section 8: error 3 applies to FPDUs whose CRC is valid). The ULPDU
/// it returns lies in `wire`, in runs between the markers.
fn check_fpdu<'a>(
    mode: FpduMode,
    layout: &FpduLayout,
    wire: &'a [u8],
    hints: &CrcHints,
) -> Result<FpduRuns<'a>, DeframeError> {
    let fpdu = |ulpdu, crc| FpduRuns {
        stream_offset: layout.start,
        ulpdu,
        wire_len: layout.wire_len,
        crc,
    };
    debug_assert_eq!(wire.len(), layout.wire_len);
    let crc = if mode.crc {
        let covered = &wire[..layout.crc_coverage];
        let computed = hints.get(covered).unwrap_or_else(|| crc::crc32c(covered));
        let received = crc::from_wire(crc_field(layout, wire));
        if computed != received {
            return Err(DeframeError::CrcMismatch {
                stream_offset: layout.start,
                ulpdu_len: layout.ulpdu_len,
                computed,
                received,
            });
        }
        CrcCheck::Verified
    } else {
        CrcCheck::Unchecked
    };
    if !mode.markers {
        let h = ULPDU_LENGTH_LEN;
        return Ok(fpdu(UlpduRuns::flat(&wire[h..h + layout.ulpdu_len]), crc));
    }
    // The markers inside the FPDU, one every MARKER_INTERVAL octets from the first
    // (`layout.marker_positions()`, as a plain strided loop: this runs once per 508
    // octets received).
    let mut m = layout.start.next_multiple_of(MARKER_INTERVAL);
    // A marker lies whole inside the FPDU (its last octet is content, never a marker).
    let end = layout.end();
    while m < end {
        let at = (m - layout.start) as usize;
        let fpduptr = u16::from_be_bytes([wire[at + 2], wire[at + 3]]);
        let expected = layout.fpduptr_at(m);
        // The two low bits of FPDUPTR are reserved: treated as zero by the receiver.
        if fpduptr & !3 != expected & !3 {
            return Err(DeframeError::MarkerMismatch {
                stream_offset: layout.start,
                marker_offset: m,
                fpduptr,
                expected,
            });
        }
        m += MARKER_INTERVAL;
    }
    let range = layout.ulpdu_wire_range();
    let pos = layout.start + range.start as u64;
    Ok(fpdu(
        UlpduRuns::marked(&wire[range], pos, layout.ulpdu_len),
        crc,
    ))
}

/// The four octets of an FPDU's CRC field, which a marker may split when the marker origin
/// is not four-octet aligned with the FPDU.
fn crc_field(layout: &FpduLayout, wire: &[u8]) -> [u8; CRC_LEN] {
    let first = fpdu_len_without_markers(layout.ulpdu_len) - CRC_LEN;
    let mut field = [0u8; CRC_LEN];
    for (i, octet) in field.iter_mut().enumerate() {
        *octet = wire[content_offset(layout.start, first + i, layout.markers)];
    }
    field
}

#[cfg(test)]
mod tests {
    use super::super::fpdu::Framer;
    use super::*;

    type Delivered = Vec<(u64, Vec<u8>)>;

    fn collect(d: &mut Deframer, data: &[u8]) -> (Delivered, Result<(), DeframeError>) {
        let mut got = Vec::new();
        let r = d.push(data, |f| got.push((f.stream_offset, f.ulpdu.to_vec())));
        (got, r)
    }

    /// A ULPDU's strided form ([`UlpduRuns::strided`]) and its runs name the same octets,
    /// wherever it starts between markers and whatever its length; `skip` keeps it so.
    #[test]
    fn strided_form_agrees_with_the_runs() {
        for pos in (4u64..1100).filter(|p| !is_marker_position(*p) && p % 512 >= 4) {
            for len in [1usize, 2, 7, 100, 507, 508, 509, 1016, 1017, 2000] {
                let data: Vec<u8> = (0..len).map(|i| (i * 7 + 1) as u8).collect();
                let mut wire = Vec::new();
                let (mut p, mut i) = (pos, 0);
                while i < len {
                    if is_marker_position(p) {
                        wire.extend_from_slice(&[0xee; MARKER_LEN]);
                        p += MARKER_LEN as u64;
                    } else {
                        wire.push(data[i]);
                        i += 1;
                        p += 1;
                    }
                }
                let u = UlpduRuns::marked(&wire, pos, len);
                for (u, data) in [(u, &data[..]), (u.skip(3), &data[3.min(len)..])] {
                    assert_eq!(u.to_vec(), data);
                    let Some((w, first)) = u.strided() else {
                        assert_eq!(u.contiguous(), Some(data));
                        continue;
                    };
                    let run = MARKER_INTERVAL as usize - MARKER_LEN;
                    let mut got = Vec::new();
                    let (mut at, mut take) = (0, first.min(data.len()));
                    while got.len() < data.len() {
                        got.extend_from_slice(&w[at..at + take]);
                        at += take + MARKER_LEN;
                        take = run.min(data.len() - got.len());
                    }
                    assert_eq!(got, data, "pos {pos} len {len}");
                    assert_eq!(at - MARKER_LEN, w.len(), "no trailing marker");
                }
            }
        }
    }

    #[test]
    fn single_fpdu_plain() {
        let mode = FpduMode::CRC_ONLY;
        let mut out = Vec::new();
        Framer::new(mode).frame(b"hello", &mut out).unwrap();
        let mut d = Deframer::new(mode);
        let (got, r) = collect(&mut d, &out);
        r.unwrap();
        assert_eq!(got, vec![(0, b"hello".to_vec())]);
        assert_eq!(d.stream_offset(), out.len() as u64);
    }

    #[test]
    /// RFC 5044 section 6: receivers MUST NOT depend on FPDU alignment with segments.
    fn receiver_does_not_depend_on_segment_alignment() {
        let mode = FpduMode {
            markers: true,
            crc: true,
        };
        let mut f = Framer::new(mode);
        let mut out = Vec::new();
        let msgs: Vec<Vec<u8>> = (1..40).map(|i| vec![i as u8; i * 37]).collect();
        for m in &msgs {
            f.frame(m, &mut out).unwrap();
        }
        let mut d = Deframer::new(mode);
        let mut got = Vec::new();
        for b in &out {
            d.push(std::slice::from_ref(b), |f| got.push(f.ulpdu.to_vec()))
                .unwrap();
        }
        assert_eq!(got, msgs);
        assert_eq!(d.pending_octets(), 0);
    }

    #[test]
    /// RFC 5044 section 8: once MPA delivers an error it MUST NOT deliver any additional FPDUs
    /// on that half connection.
    fn no_fpdu_delivered_after_an_error() {
        let mode = FpduMode::CRC_ONLY;
        let mut f = Framer::new(mode);
        let mut out = Vec::new();
        f.frame(b"first", &mut out).unwrap();
        let second = out.len();
        f.frame(b"second", &mut out).unwrap();
        f.frame(b"third", &mut out).unwrap();
        out[second + 3] ^= 1;
        let mut d = Deframer::new(mode);
        let (got, r) = collect(&mut d, &out);
        assert_eq!(got.len(), 1);
        let e = r.unwrap_err();
        assert_eq!(e.code(), MpaErrorCode::CrcMismatch);
        assert_eq!(d.error(), Some(MpaErrorCode::CrcMismatch));
        let (got, r) = collect(&mut d, &out);
        assert!(got.is_empty());
        assert_eq!(r, Err(DeframeError::Stopped(MpaErrorCode::CrcMismatch)));
    }

    #[test]
    /// RFC 5044 7.1.1 (C): with CRCs not in use the CRC field MUST be considered valid
    /// regardless of its contents.
    fn crc_field_not_checked_when_crc_off() {
        let mode = FpduMode::default();
        let mut out = Vec::new();
        Framer::new(mode).frame(b"abc", &mut out).unwrap();
        let n = out.len();
        out[n - 1] = 0x55;
        let mut d = Deframer::new(mode);
        let mut crc = None;
        d.push(&out, |f| crc = Some(f.crc)).unwrap();
        assert_eq!(crc, Some(CrcCheck::Unchecked));
    }

    #[test]
    /// RFC 5044 section 8, code 3: a marker and ULPDU_Length disagreeing on an FPDU start.
    fn marker_disagreeing_with_ulpdu_length_is_error_3() {
        // CRC off so that only the marker check can catch it.
        let mode = FpduMode {
            markers: true,
            crc: false,
        };
        let mut out = Vec::new();
        Framer::new(mode).frame(&[9u8; 600], &mut out).unwrap();
        // Marker at 512: FPDUPTR should be 508 (header at 4).
        assert_eq!(&out[512..516], &[0, 0, 0x01, 0xFC]);
        out[515] = 0xF8;
        let mut d = Deframer::new(mode);
        let (got, r) = collect(&mut d, &out);
        assert!(got.is_empty());
        assert_eq!(
            r,
            Err(DeframeError::MarkerMismatch {
                stream_offset: 0,
                marker_offset: 512,
                fpduptr: 0x1F8,
                expected: 0x1FC
            })
        );
        // A non-zero leading marker is wrong too.
        let mut out = Vec::new();
        Framer::new(mode).frame(&[1u8; 8], &mut out).unwrap();
        out[3] = 4;
        let (_, r) = collect(&mut Deframer::new(mode), &out);
        assert_eq!(r.unwrap_err().code(), MpaErrorCode::MarkerMismatch);
        // The two reserved low bits of FPDUPTR are ignored.
        let mut out = Vec::new();
        Framer::new(mode).frame(&[1u8; 8], &mut out).unwrap();
        out[3] = 3;
        let (got, r) = collect(&mut Deframer::new(mode), &out);
        r.unwrap();
        assert_eq!(got.len(), 1);
    }

    #[test]
    fn out_of_order_segment_recovered_by_markers() {
        let mode = FpduMode {
            markers: true,
            crc: true,
        };
        let mut f = Framer::new(mode);
        let mut out = Vec::new();
        let mut starts = Vec::new();
        for i in 0..20u8 {
            starts.push(out.len());
            f.frame(&vec![i; 300], &mut out).unwrap();
        }
        // Segment from the middle of FPDU 3 to the middle of FPDU 12.
        let a = starts[3] + 10;
        let b = starts[12] + 10;
        let mut d = Deframer::new(mode);
        let mut got = Vec::new();
        let n = d.recover_out_of_order(a as u64, &out[a..b], |f| {
            got.push((f.stream_offset, f.ulpdu[0]))
        });
        // FPDUs 4..=11 are whole inside the segment; every one of them is found because a
        // marker (every 512 octets) lands in FPDU 4 or 5 and lengths chain the rest.
        let expect: Vec<(u64, u8)> = (4..12).map(|i| (starts[i] as u64, i as u8)).collect();
        assert_eq!(got, expect);
        assert_eq!(n, 8);
        // Without markers nothing can be recovered.
        let mut d = Deframer::new(FpduMode::CRC_ONLY);
        assert_eq!(d.recover_out_of_order(a as u64, &out[a..b], |_| ()), 0);
    }

    proptest::proptest! {
        /// The CRCs taken with the TCP sum: the sum is the segment payload's, one hint per
        /// whole FPDU from the segment's start, and deframing with them delivers what
        /// deframing without them delivers, a corrupted octet still failing the CRC.
        #[test]
        fn crc_hints_agree_with_checking_in_full(
            markers in proptest::bool::ANY,
            start in 0u64..2048,
            sizes in proptest::collection::vec(1usize..2000, 1..8),
            tail in 0usize..40,
            flip in proptest::option::of(0usize..100_000),
        ) {
            use crate::tcp::checksum;
            let mode = FpduMode { markers, crc: true };
            let start = start * 4;
            let mut f = Framer::at_offset(mode, start);
            let mut seg = Vec::new();
            for (i, &n) in sizes.iter().enumerate() {
                f.frame(&vec![i as u8 ^ 0x5A; n], &mut seg).unwrap();
            }
            // Part of a next FPDU (a segment need not end on an FPDU boundary).
            let mut next = Vec::new();
            f.frame(&[7u8; 64], &mut next).unwrap();
            seg.extend_from_slice(&next[..tail.min(next.len() - 1)]);
            if let Some(at) = flip {
                let at = at % seg.len();
                seg[at] ^= 0x20;
            }
            let mut hints = CrcHints::new();
            let sum = hints.take(mode, start, &seg);
            proptest::prop_assert_eq!(sum, checksum::data(&seg));
            if flip.is_none() {
                proptest::prop_assert_eq!(hints.len(), sizes.len());
            }
            let run = |hints: &CrcHints| {
                let mut d = Deframer::at_offset(mode, start);
                let mut got = Vec::new();
                let r = d.push_hinted(&seg, hints, |f| got.push((f.stream_offset, f.ulpdu.to_vec())));
                (r, got, d.stream_offset())
            };
            proptest::prop_assert_eq!(run(&hints), run(&CrcHints::new()));
            if flip.is_none() {
                proptest::prop_assert!(run(&hints).0.is_ok());
            }
        }
    }
}
