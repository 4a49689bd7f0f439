//! FPDU layout, markers, MULPDU and the transmit-side [`Framer`] (RFC 5044 sections 4 and 5).
//!
//! An FPDU on the wire is
//!
//! ```text
//! ULPDU_Length (2) | ULPDU (ULPDU_Length) | PAD (0-3 zero octets) | CRC (4)
//! ```
//!
//! with, when markers are on for the half connection, a 4-octet marker
//! `Reserved (2, zero) | FPDUPTR (2)` at every 512th octet of the stream, counted from the
//! marker origin (the first octet sent after the sender's own startup frame). A marker that
//! falls exactly between two FPDUs belongs to the following FPDU and carries FPDUPTR 0; any
//! other marker counts back to the ULPDU_Length field of the FPDU that contains it.
//!
//! The CRC32c covers everything from the FPDU's first octet (its leading marker, if any)
//! up to the first octet of the CRC field: ULPDU_Length, ULPDU, PAD and the markers among
//! them (including a marker right after the PAD). It is sent least significant octet first.
//!
//! Stream positions are `u64` octet offsets from the marker origin of the half connection
//! (an origin of 0 is the first octet in FPDU mode). Only their value modulo 512 matters
//! to the layout; they never wrap in practice.

use std::convert::Infallible;

use crate::crc;
use fastpath::kernels::{self, Markers};

/// Markers sit at every `MARKER_INTERVAL`th octet of the half connection's stream.
pub const MARKER_INTERVAL: u64 = 512;
// The kernels that insert markers as they copy place them by the same interval.
const _: () = assert!(
    MARKER_INTERVAL as usize == kernels::MARKER_INTERVAL && MARKER_LEN == kernels::MARKER_LEN
);
/// Octets in a marker (`Reserved (2) | FPDUPTR (2)`).
pub const MARKER_LEN: usize = 4;
/// Octets in the ULPDU_Length field.
pub const ULPDU_LENGTH_LEN: usize = 2;
/// Octets in the CRC field (present whether or not CRC is in use).
pub const CRC_LEN: usize = 4;
/// The largest ULPDU DDP may post to MPA (RFC 5044 section 5.3.2 / 6.2; draft 5.3.2).
pub const MAX_ULPDU_LEN: usize = 64768;
/// MPA never reports a MULPDU below this (RFC 5044: "MUST NOT shrink the MULPDU below 128").
pub const MIN_MULPDU: usize = 128;

/// The FPDU mode of one half connection, as negotiated in the startup phase.
///
/// Markers are chosen per direction (the M bit in the frame the *other* side sent);
/// CRC is used in both directions if either side set C.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct FpduMode {
    /// Markers are inserted every 512 octets.
    pub markers: bool,
    /// The CRC32c is generated (transmit) and checked (receive).
    pub crc: bool,
}

impl FpduMode {
    /// Markers off, CRC on: what most peers negotiate.
    pub const CRC_ONLY: FpduMode = FpduMode {
        markers: false,
        crc: true,
    };
}

/// Octets of PAD after a ULPDU of `ulpdu_len` octets, so that
/// `ULPDU_Length + ULPDU + PAD` is a multiple of four.
#[inline]
pub const fn pad_len(ulpdu_len: usize) -> usize {
    (4 - ((ULPDU_LENGTH_LEN + ulpdu_len) % 4)) % 4
}

/// Octets of an FPDU for a ULPDU of `ulpdu_len` octets, markers not counted:
/// ULPDU_Length, ULPDU, PAD and CRC.
#[inline]
pub const fn fpdu_len_without_markers(ulpdu_len: usize) -> usize {
    ULPDU_LENGTH_LEN + ulpdu_len + pad_len(ulpdu_len) + CRC_LEN
}

/// MULPDU, the largest ULPDU that fits in one TCP segment of `emss` octets
/// (RFC 5044 section 6.2 / draft 5.3.2), clamped to `128..=64768`.
///
/// * markers on: `EMSS - (6 + 4 * ceil(EMSS / 512) + EMSS mod 4)`
/// * markers off: `EMSS - (6 + EMSS mod 4)`
pub const fn mulpdu(emss: usize, markers: bool) -> usize {
    let overhead = if markers {
        6 + 4 * emss.div_ceil(MARKER_INTERVAL as usize) + emss % 4
    } else {
        6 + emss % 4
    };
    let m = emss.saturating_sub(overhead);
    if m < MIN_MULPDU {
        MIN_MULPDU
    } else if m > MAX_ULPDU_LEN {
        MAX_ULPDU_LEN
    } else {
        m
    }
}

/// True when a marker starts at stream position `pos`.
#[inline]
pub const fn is_marker_position(pos: u64) -> bool {
    pos.is_multiple_of(MARKER_INTERVAL)
}

/// Where the octets of one FPDU sit in the stream.
///
/// The FPDU's *content* is ULPDU_Length, ULPDU, PAD and CRC; markers are interleaved with it
/// on the wire. Positions are stream offsets from the marker origin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FpduLayout {
    /// Stream position of the FPDU's first octet (its leading marker, if it has one).
    pub start: u64,
    /// Stream position of the ULPDU_Length field.
    pub header: u64,
    /// ULPDU_Length.
    pub ulpdu_len: usize,
    /// Markers are on for this half connection.
    pub markers: bool,
    /// Octets the FPDU takes on the wire, markers included.
    pub wire_len: usize,
    /// Offset (from `start`) of the first octet of the CRC field: the CRC covers
    /// `start .. start + crc_coverage`.
    pub crc_coverage: usize,
}

impl FpduLayout {
    /// The layout of an FPDU carrying `ulpdu_len` octets that starts at stream position
    /// `start`.
    pub fn new(start: u64, ulpdu_len: usize, markers: bool) -> Self {
        let leading = markers && is_marker_position(start);
        let header = start + if leading { MARKER_LEN as u64 } else { 0 };
        let content = fpdu_len_without_markers(ulpdu_len);
        // Markers strictly inside the content: at positions p with header < p and p at or
        // before the wire position of the last content octet.
        let crc_content = content - CRC_LEN;
        let crc_at = content_to_wire(header, crc_content, markers);
        let end = content_to_wire(header, content - 1, markers) + 1;
        FpduLayout {
            start,
            header,
            ulpdu_len,
            markers,
            wire_len: (end - start) as usize,
            crc_coverage: (crc_at - start) as usize,
        }
    }

    /// Stream position just past the FPDU (where the next FPDU starts).
    pub fn end(&self) -> u64 {
        self.start + self.wire_len as u64
    }

    /// Whether the FPDU starts with a marker (one that fell between FPDUs, FPDUPTR 0).
    pub fn has_leading_marker(&self) -> bool {
        self.header != self.start
    }

    /// Stream positions of every marker in the FPDU, the leading one included.
    pub fn marker_positions(&self) -> impl Iterator<Item = u64> {
        let first = if self.markers {
            self.start.div_ceil(MARKER_INTERVAL) * MARKER_INTERVAL
        } else {
            u64::MAX
        };
        let end = self.end();
        (0..)
            .map(move |i| first.saturating_add(i * MARKER_INTERVAL))
            .take_while(move |&p| p < end)
    }

    /// The FPDUPTR a marker at stream position `pos` inside this FPDU must carry.
    pub fn fpduptr_at(&self, pos: u64) -> u16 {
        if pos < self.header {
            0
        } else {
            // An FPDU spans at most 64768 + 6 + 3 octets plus its markers, so the distance
            // back to its header always fits 16 bits.
            (pos - self.header) as u16
        }
    }

    /// Where the ULPDU sits, as offsets from `start`; when a marker falls inside the ULPDU
    /// the range is longer than `ulpdu_len` and holds the marker(s) too.
    pub fn ulpdu_wire_range(&self) -> std::ops::Range<usize> {
        let first = content_to_wire(self.header, ULPDU_LENGTH_LEN, self.markers);
        let end = if self.ulpdu_len == 0 {
            first
        } else {
            content_to_wire(
                self.header,
                ULPDU_LENGTH_LEN + self.ulpdu_len - 1,
                self.markers,
            ) + 1
        };
        (first - self.start) as usize..(end - self.start) as usize
    }
}

/// Wire position of content octet `index` of an FPDU whose ULPDU_Length field is at `header`
/// (content octets: ULPDU_Length, ULPDU, PAD, CRC), skipping the markers among them.
pub(crate) fn content_to_wire(header: u64, index: usize, markers: bool) -> u64 {
    if !markers {
        return header + index as u64;
    }
    // Content octets fill the gaps between markers: up to the first marker after
    // `header`, then 508 octets after each marker.
    let mut pos = header;
    if is_marker_position(pos) {
        // Only an FPDU whose header sits at a marker position, which `FpduLayout` never
        // builds; the content starts after the marker.
        pos += MARKER_LEN as u64;
    }
    let index = index as u64;
    let to_marker = MARKER_INTERVAL - pos % MARKER_INTERVAL;
    if index < to_marker {
        return pos + index;
    }
    let rest = index - to_marker;
    let gap = MARKER_INTERVAL - MARKER_LEN as u64;
    pos + to_marker + MARKER_LEN as u64 + rest / gap * MARKER_INTERVAL + rest % gap
}

/// Why a ULPDU could not be framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameError {
    /// The ULPDU is longer than the 64768 octets DDP may post to MPA.
    UlpduTooLong {
        /// Its length.
        len: usize,
    },
    /// The ULPDU is empty; DDP posts ULPDUs of one to 64768 octets.
    EmptyUlpdu,
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::UlpduTooLong { len } => write!(
                f,
                "ULPDU of {len} octets exceeds the {MAX_ULPDU_LEN}-octet limit of MPA"
            ),
            FrameError::EmptyUlpdu => write!(f, "empty ULPDU"),
        }
    }
}

impl std::error::Error for FrameError {}

/// The transmit side of MPA for one half connection: turns ULPDUs into FPDUs.
///
/// It keeps the stream position so that markers land every 512 octets from the marker
/// origin. Its output is the exact byte stream TCP must carry, in order.
#[derive(Debug, Clone)]
pub struct Framer {
    mode: FpduMode,
    pos: u64,
    /// Whether the one pass also takes the FPDUs' one's complement sums.
    sums: bool,
    /// The FPDU being written ([`Framer::writer`]), or the last one. It lives here rather
    /// than in the [`FpduWriter`], which is two references and so costs nothing to move: a
    /// writer that held this state was built field by field and then moved (out of
    /// `writer`'s `Result`, into `finish`), and the moves read it back wider than it was
    /// written, stalling on store forwarding (about a third of the framing time of a
    /// 1454-octet ULPDU beyond the kernel, measured).
    w: WriteState,
}

/// The state of the FPDU a [`FpduWriter`] is writing (kept in its [`Framer`]).
#[derive(Debug, Clone, Copy)]
struct WriteState {
    /// `finish` ran, or the writer was dropped (its octets taken back out).
    finished: bool,
    layout: FpduLayout,
    /// Stream position of the next octet.
    pos: u64,
    /// The CRC32c (finished value) of the octets so far.
    crc: u32,
    /// The one's complement sum of the FPDU's octets so far (unfolded, by the parity of
    /// their offset from the FPDU's first octet).
    sum: u64,
    /// Octets of ULPDU still to come.
    left: usize,
    /// Where the FPDU starts in `out`.
    base: usize,
    /// Where in the FPDU the octets not yet added to the CRC and the sum start. Small
    /// pieces (a marker, the ULPDU_Length, a DDP header, the PAD) are copied as they come
    /// and taken in one kernel call before the next large one, rather than one call each.
    pending: Option<usize>,
}

impl WriteState {
    const IDLE: WriteState = WriteState {
        finished: true,
        layout: FpduLayout {
            start: 0,
            header: 0,
            ulpdu_len: 0,
            markers: false,
            wire_len: 0,
            crc_coverage: 0,
        },
        pos: 0,
        crc: 0,
        sum: 0,
        left: 0,
        base: 0,
        pending: None,
    };
}

impl Framer {
    /// A framer whose first octet is the marker origin (the first octet after the startup
    /// frame this side sent).
    pub fn new(mode: FpduMode) -> Self {
        Self::at_offset(mode, 0)
    }

    /// A framer whose next octet sits at stream position `pos` from the marker origin.
    pub fn at_offset(mode: FpduMode, pos: u64) -> Self {
        Framer {
            mode,
            pos,
            sums: true,
            w: WriteState::IDLE,
        }
    }

    /// Whether the one pass over each FPDU's octets also takes their one's complement sum,
    /// for the TCP checksum (on unless turned off here). Off for a port that fills TCP
    /// checksums itself: then [`FpduWriter::finish`] and [`Framer::frame_vectored`]
    /// return 0, and the pass is only the copy and the CRC.
    pub fn with_sums(mut self, sums: bool) -> Self {
        self.sums = sums;
        self
    }

    /// Whether the FPDUs' sums are taken ([`Framer::with_sums`]).
    pub fn takes_sums(&self) -> bool {
        self.sums
    }

    /// The FPDU mode.
    pub fn mode(&self) -> FpduMode {
        self.mode
    }

    /// Stream position of the next octet this framer emits.
    pub fn stream_offset(&self) -> u64 {
        self.pos
    }

    /// The layout the next FPDU would have if it carried `ulpdu_len` octets.
    pub fn next_layout(&self, ulpdu_len: usize) -> FpduLayout {
        FpduLayout::new(self.pos, ulpdu_len, self.mode.markers)
    }

    /// Octets on the wire the next FPDU takes if it carries `ulpdu_len` octets.
    pub fn wire_len(&self, ulpdu_len: usize) -> usize {
        if self.mode.markers {
            self.next_layout(ulpdu_len).wire_len
        } else {
            fpdu_len_without_markers(ulpdu_len)
        }
    }

    /// Appends the FPDU carrying `ulpdu` to `out`.
    pub fn frame(&mut self, ulpdu: &[u8], out: &mut Vec<u8>) -> Result<(), FrameError> {
        self.frame_vectored(&[ulpdu], out).map(|_| ())
    }

    /// Appends the FPDU carrying the concatenation of `parts` (for example a DDP header and
    /// a payload) to `out`, without concatenating them first, in one pass over the octets
    /// ([`FpduWriter`]). Returns the one's complement sum of the FPDU's wire octets (as
    /// `wire::tcp::checksum::data` gives it), for the TCP checksum of a segment made of
    /// whole FPDUs; 0 when the framer takes no sums ([`Framer::with_sums`]).
    pub fn frame_vectored(
        &mut self,
        parts: &[&[u8]],
        out: &mut Vec<u8>,
    ) -> Result<u16, FrameError> {
        let ulpdu_len: usize = parts.iter().map(|p| p.len()).sum();
        let mut w = self.writer(ulpdu_len, out)?;
        for part in parts {
            w.put(part);
        }
        Ok(w.finish())
    }

    /// Starts the FPDU carrying a ULPDU of `ulpdu_len` octets at the end of `out`: the
    /// caller puts that many octets ([`FpduWriter::put`], [`FpduWriter::put_with`]) and
    /// calls [`FpduWriter::finish`], which advances the stream position. A writer dropped
    /// unfinished takes its octets back out of `out` and leaves the position alone.
    pub fn writer<'a>(
        &'a mut self,
        ulpdu_len: usize,
        out: &'a mut Vec<u8>,
    ) -> Result<FpduWriter<'a>, FrameError> {
        if ulpdu_len == 0 {
            return Err(FrameError::EmptyUlpdu);
        }
        if ulpdu_len > MAX_ULPDU_LEN {
            return Err(FrameError::UlpduTooLong { len: ulpdu_len });
        }
        let layout = self.next_layout(ulpdu_len);
        Ok(FpduWriter::new(layout, self, out))
    }
}

/// What a source that copies itself into an FPDU ([`FpduWriter::put_with`]) takes from
/// the octets on the way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyPass {
    /// Only the copy: the writer takes CRC and sum later, over the FPDU's octets.
    Copy,
    /// The copy and the CRC32c advanced from this one (the framer takes no sums).
    Crc(u32),
    /// The copy, the CRC32c advanced from this one, and the unfolded one's complement sum.
    CrcSum(u32),
    /// Markers are on: the copy puts markers between the source's octets where `markers`
    /// says, so that it appends `markers.wire_len(n)` octets in all, and takes the CRC32c
    /// advanced from `crc` over every octet it appends, and their unfolded sum if `sums`
    /// (else 0): what [`fastpath::kernels::append_marked`] does.
    Marked {
        /// The CRC32c so far.
        crc: u32,
        /// Whether the sum is taken.
        sums: bool,
        /// Where the markers fall, and the first one's FPDUptr.
        markers: Markers,
    },
}

impl CopyPass {
    /// Appends `src` to `out` taking what this pass asks for: the copy a source makes of
    /// a slice.
    pub fn copy_slice(self, src: &[u8], out: &mut Vec<u8>) -> (u32, u64) {
        match self {
            CopyPass::Copy => {
                out.extend_from_slice(src);
                (0, 0)
            }
            CopyPass::Crc(crc) => (kernels::append_crc32c(out, src, crc), 0),
            CopyPass::CrcSum(crc) => kernels::append_crc32c_sum(out, src, crc),
            CopyPass::Marked { crc, sums, markers } => {
                kernels::append_marked(out, src, markers, crc, sums)
            }
        }
    }
}

/// Writes one FPDU in a single pass over its octets: each large piece of content is
/// copied, added to the CRC32c and to the one's complement sum at once, with the markers
/// that fall inside it put in by the same pass ([`fastpath::kernels::append_marked`]);
/// small pieces, the PAD and the CRC field go in between. Made by [`Framer::writer`].
///
/// The ULPDU comes in pieces, from slices ([`FpduWriter::put`]) or from any source that can
/// copy itself into the output with the same kernel ([`FpduWriter::put_with`]: a memory
/// region's octets, copied straight from registered memory).
#[derive(Debug)]
pub struct FpduWriter<'a> {
    /// The framer: its mode, its stream position (advanced by `finish`) and the state of
    /// this FPDU ([`WriteState`]).
    framer: &'a mut Framer,
    out: &'a mut Vec<u8>,
}

/// Pieces shorter than this are copied and added to the CRC and the sum later, together.
const SMALL_PIECE: usize = 64;

impl<'a> FpduWriter<'a> {
    fn new(layout: FpduLayout, framer: &'a mut Framer, out: &'a mut Vec<u8>) -> Self {
        out.reserve(layout.wire_len);
        let base = out.len();
        framer.w = WriteState {
            finished: false,
            layout,
            pos: layout.start,
            crc: 0,
            sum: 0,
            left: layout.ulpdu_len,
            base,
            pending: None,
        };
        let mut w = FpduWriter { framer, out };
        if layout.has_leading_marker() {
            w.marker();
        }
        w.content(&(layout.ulpdu_len as u16).to_be_bytes());
        w
    }

    /// Where the markers of octets put from the current position fall: the first at
    /// the next marker position (this one, if it is one), each carrying its distance back
    /// to the FPDU's header.
    fn markers_from_here(&self) -> Markers {
        let w = &self.framer.w;
        let before = if is_marker_position(w.pos) {
            0
        } else {
            self.room()
        };
        Markers {
            before,
            fpduptr: w.layout.fpduptr_at(w.pos + before as u64),
        }
    }

    /// Octets of ULPDU still expected.
    pub fn remaining(&self) -> usize {
        self.framer.w.left
    }

    /// Adds a run of `len` octets just appended to `out` at FPDU offset `at`, with their
    /// CRC already in the state's `crc` and their unfolded sum `sum`.
    fn add_sum(&mut self, at: usize, sum: u64) {
        self.framer.w.sum += kernels::sum_at(sum, at);
    }

    fn marker(&mut self) {
        let ptr = self.framer.w.layout.fpduptr_at(self.framer.w.pos);
        let at = self.out.len() - self.framer.w.base;
        self.out.extend_from_slice(&kernels::marker(ptr));
        self.copied(at, MARKER_LEN, None);
    }

    /// Accounts for `wire` octets just appended to `out` at FPDU offset `at`: with the
    /// CRC and the unfolded sum a kernel took over them, or left pending (summed with the
    /// next large piece). Panics if `out` did not grow by `wire` (a source that copied
    /// another length than its pass asked for: the FPDU would be corrupt).
    fn copied(&mut self, at: usize, wire: usize, taken: Option<(u32, u64)>) {
        assert_eq!(
            self.out.len() - self.framer.w.base,
            at + wire,
            "FpduWriter: a copy appended another length than its pass asked for"
        );
        match taken {
            Some((crc, sum)) => {
                self.framer.w.crc = crc;
                self.add_sum(at, sum);
            }
            None => {
                self.framer.w.pending.get_or_insert(at);
            }
        }
        self.framer.w.pos += wire as u64;
    }

    /// The CRC32c of `data` advanced from `crc`, and its unfolded sum when sums are taken
    /// (else 0).
    fn crc_and_sum(sums: bool, crc: u32, data: &[u8]) -> (u32, u64) {
        if sums {
            kernels::crc32c_sum(crc, data)
        } else {
            (kernels::crc32c_append(crc, data), 0)
        }
    }

    /// Adds the octets copied since `pending` to the CRC and the sum.
    fn flush_pending(&mut self) {
        let w = &mut self.framer.w;
        if let Some(p) = w.pending.take() {
            let (crc, sum) = Self::crc_and_sum(self.framer.sums, w.crc, &self.out[w.base + p..]);
            w.crc = crc;
            w.sum += kernels::sum_at(sum, p);
        }
    }

    /// Octets until the next marker position (unbounded without markers).
    fn room(&self) -> usize {
        if self.framer.w.layout.markers {
            (MARKER_INTERVAL - self.framer.w.pos % MARKER_INTERVAL) as usize
        } else {
            usize::MAX
        }
    }

    /// Writes a marker if the next octet position is a marker position.
    fn pending_marker(&mut self) {
        if self.framer.w.layout.markers && is_marker_position(self.framer.w.pos) {
            self.marker();
        }
    }

    /// Copies `data` in as content (markers put in where they fall).
    fn content(&mut self, data: &[u8]) {
        let Ok(()) = self.copy_in::<Infallible>(data.len(), |at, n, out, pass| {
            Ok(pass.copy_slice(&data[at..at + n], out))
        });
    }

    /// Copies `len` octets of content from a source (`copy`, as [`FpduWriter::put_with`]
    /// describes it), with the markers that fall among them. With markers on, 64 octets
    /// or more go in one call that puts the markers in ([`CopyPass::Marked`]); otherwise
    /// piece by piece between markers, a large piece copied with its CRC and sum, a small
    /// one left pending (summed with the next large piece or at the end).
    fn copy_in<E>(
        &mut self,
        len: usize,
        mut copy: impl FnMut(usize, usize, &mut Vec<u8>, CopyPass) -> Result<(u32, u64), E>,
    ) -> Result<(), E> {
        if self.framer.w.layout.markers && len >= SMALL_PIECE {
            self.flush_pending();
            let markers = self.markers_from_here();
            let at = self.out.len() - self.framer.w.base;
            let pass = CopyPass::Marked {
                crc: self.framer.w.crc,
                sums: self.framer.sums,
                markers,
            };
            let taken = copy(0, len, self.out, pass)?;
            self.copied(at, markers.wire_len(len), Some(taken));
            return Ok(());
        }
        let mut done = 0;
        while done < len {
            self.pending_marker();
            let n = self.room().min(len - done);
            let at = self.out.len() - self.framer.w.base;
            if n < SMALL_PIECE {
                copy(done, n, self.out, CopyPass::Copy)?;
                self.copied(at, n, None);
            } else {
                self.flush_pending();
                let pass = if self.framer.sums {
                    CopyPass::CrcSum(self.framer.w.crc)
                } else {
                    CopyPass::Crc(self.framer.w.crc)
                };
                let taken = copy(done, n, self.out, pass)?;
                self.copied(at, n, Some(taken));
            }
            done += n;
        }
        Ok(())
    }

    /// Puts the next octets of the ULPDU. Octets beyond the ULPDU's length are ignored
    /// (and [`FpduWriter::finish`] pads a ULPDU left short), so the FPDU always has the
    /// layout its ULPDU_Length promises.
    pub fn put(&mut self, data: &[u8]) {
        let data = &data[..data.len().min(self.framer.w.left)];
        self.framer.w.left -= data.len();
        self.content(data);
    }

    /// Puts the next `len` octets of the ULPDU from a source that copies them itself:
    /// `copy(src_offset, n, out, pass)` appends the source's octets `src_offset ..
    /// src_offset + n` to `out` and takes what `pass` asks for on the way ([`CopyPass`]):
    /// it returns the CRC32c advanced over them and their unfolded one's complement sum
    /// (what [`fastpath::kernels::append_crc32c_sum`] returns), the parts not asked for
    /// ignored. With markers on, a put of 64 octets or more is one call with
    /// [`CopyPass::Marked`] (and the copy must append `markers.wire_len(n)` octets: the
    /// writer panics if it does not); otherwise it is called once per piece between
    /// markers. On its error nothing more is put and the error is returned; the caller
    /// abandons the FPDU (truncating `out`).
    ///
    /// # Panics
    ///
    /// If a copy appends another number of octets than its pass asks for.
    pub fn put_with<E>(
        &mut self,
        len: usize,
        copy: impl FnMut(usize, usize, &mut Vec<u8>, CopyPass) -> Result<(u32, u64), E>,
    ) -> Result<(), E> {
        let len = len.min(self.framer.w.left);
        self.framer.w.left -= len;
        self.copy_in(len, copy)
    }

    /// Ends the FPDU: zero octets for a ULPDU left short, PAD, the marker right after the
    /// PAD if one falls there (covered by the CRC), and the CRC field (zeros when CRC is
    /// off, as siw sends). Returns the one's complement sum of the FPDU's wire octets (as
    /// `wire::tcp::checksum::data` gives it); 0 when the framer takes no sums
    /// ([`Framer::with_sums`]).
    pub fn finish(mut self) -> u16 {
        self.finish_in_place()
    }

    /// [`FpduWriter::finish`] through a reference (`Drop` then leaves the octets alone).
    fn finish_in_place(&mut self) -> u16 {
        while self.framer.w.left > 0 {
            let n = self.framer.w.left.min(64);
            self.framer.w.left -= n;
            self.content(&[0u8; 64][..n]);
        }
        self.content(&[0u8; 3][..pad_len(self.framer.w.layout.ulpdu_len)]);
        // Markers that fall right after the PAD are written before the CRC is computed, so
        // that they are covered by it.
        self.pending_marker();
        let base = self.framer.w.base;
        debug_assert_eq!(self.out.len() - base, self.framer.w.layout.crc_coverage);
        let sums = self.framer.sums;
        self.flush_pending();
        let crc_field = if self.framer.mode.crc {
            crc::to_wire(self.framer.w.crc)
        } else {
            [0u8; 4]
        };
        let at = self.out.len() - base;
        if self.framer.w.layout.markers {
            // A marker may fall inside the field (an FPDU that does not start at a
            // multiple of four from the marker origin): it goes in as content does (a
            // small piece, left pending: the CRC does not cover the field), and the
            // octets from the field on (at most eight) are summed here.
            self.content(&crc_field);
            self.framer.w.pending = None;
            if sums {
                // At a multiple of four from the FPDU's start (header, ULPDU and PAD
                // are, and markers are four octets): the field and a marker at most.
                debug_assert!(at.is_multiple_of(4) && self.out.len() - base - at <= 8);
                let sum = kernels::sum_scalar(&self.out[base + at..]);
                self.add_sum(at, sum);
            }
        } else {
            // Without markers the field sits at a multiple of four from the FPDU's start:
            // its words add to the sum as they are. The CRC does not cover it.
            let [a, b, c, d] = crc_field;
            self.framer.w.sum +=
                u64::from(u16::from_le_bytes([a, b])) + u64::from(u16::from_le_bytes([c, d]));
            self.out.extend_from_slice(&crc_field);
            self.framer.w.pos += CRC_LEN as u64;
        }
        let w = &mut self.framer.w;
        debug_assert_eq!(w.pos, w.layout.end());
        debug_assert_eq!(self.out.len() - w.base, w.layout.wire_len);
        self.framer.pos = w.layout.end();
        w.finished = true;
        if sums {
            kernels::fold_sum(w.sum)
        } else {
            0
        }
    }
}

impl Drop for FpduWriter<'_> {
    fn drop(&mut self) {
        if !self.framer.w.finished {
            self.out.truncate(self.framer.w.base);
            self.framer.w.finished = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`content_to_wire`] as first written: a walk from marker to marker.
    fn content_to_wire_walk(header: u64, index: usize) -> u64 {
        let mut pos = header;
        let mut left = index as u64;
        loop {
            let to_marker = MARKER_INTERVAL - pos % MARKER_INTERVAL;
            if pos.is_multiple_of(MARKER_INTERVAL) {
                pos += MARKER_LEN as u64;
                continue;
            }
            if left < to_marker {
                return pos + left;
            }
            left -= to_marker;
            pos += to_marker;
        }
    }

    proptest::proptest! {
        /// The closed form agrees with the walk, for headers anywhere (a marker position
        /// included) and indices across many markers.
        #[test]
        fn content_to_wire_agrees_with_the_walk(header in 0u64..1 << 40, index in 0usize..70_000) {
            proptest::prop_assert_eq!(
                content_to_wire(header, index, true),
                content_to_wire_walk(header, index)
            );
        }
    }

    #[test]
    fn content_to_wire_at_the_edges() {
        for header in [0u64, 1, 4, 507, 508, 510, 511, 512, 513, 1020, 1024] {
            for index in [
                0usize, 1, 2, 503, 504, 506, 507, 508, 509, 1015, 1016, 1017, 64775,
            ] {
                assert_eq!(
                    content_to_wire(header, index, true),
                    content_to_wire_walk(header, index),
                    "header {header} index {index}"
                );
            }
        }
    }

    /// A source that appends another length than its pass asks for would leave a corrupt
    /// FPDU: the writer refuses it, with markers (one marked call) and without.
    #[test]
    fn a_source_copying_the_wrong_length_is_refused() {
        for markers in [false, true] {
            let outcome = std::panic::catch_unwind(|| {
                let mut f = Framer::new(FpduMode { markers, crc: true });
                let mut out = Vec::new();
                let mut w = f.writer(200, &mut out).unwrap();
                let _ = w.put_with(200, |_, n, out, pass| {
                    Ok::<_, ()>(pass.copy_slice(&vec![7u8; n - 1], out))
                });
            });
            let err = outcome.expect_err("a short copy must not pass");
            let msg = err
                .downcast_ref::<String>()
                .map(String::as_str)
                .unwrap_or_default();
            assert!(
                msg.contains("appended another length"),
                "markers {markers}: {msg}"
            );
        }
    }

    #[test]
    fn mulpdu_formulas_and_clamps() {
        // markers off: EMSS 1460 -> 1460 - (6 + 0) = 1454
        assert_eq!(mulpdu(1460, false), 1454);
        // markers on: 1460 - (6 + 4*3 + 0) = 1442
        assert_eq!(mulpdu(1460, true), 1442);
        // EMSS mod 4 is taken off too: 1461 -> 1461 - (6 + 1) = 1454
        assert_eq!(mulpdu(1461, false), 1454);
        assert_eq!(mulpdu(8960, false), 8954);
        assert_eq!(mulpdu(8960, true), 8960 - (6 + 4 * 18));
        // never below 128
        assert_eq!(mulpdu(0, true), MIN_MULPDU);
        assert_eq!(mulpdu(100, false), MIN_MULPDU);
        assert_eq!(mulpdu(133, false), MIN_MULPDU);
        // never above 64768
        assert_eq!(mulpdu(65535, false), MAX_ULPDU_LEN);
        assert_eq!(mulpdu(usize::MAX, true), MAX_ULPDU_LEN);
    }

    #[test]
    fn mulpdu_fits_one_segment() {
        // Below EMSS 150 the 128-octet floor wins and an FPDU may need two segments.
        for emss in 150..=9000usize {
            for markers in [false, true] {
                let m = mulpdu(emss, markers);
                // Worst case start position: every offset modulo 512 that is a multiple of 4.
                for start in (0..512u64).step_by(4) {
                    let l = FpduLayout::new(start, m, markers);
                    assert!(
                        l.wire_len <= emss,
                        "emss {emss} markers {markers} start {start}: {} > {emss}",
                        l.wire_len
                    );
                }
            }
        }
    }

    #[test]
    fn pad_makes_multiple_of_four() {
        for l in 0..64 {
            assert_eq!((2 + l + pad_len(l)) % 4, 0);
            assert!(pad_len(l) < 4);
        }
    }

    #[test]
    fn layout_without_markers_is_plain() {
        let l = FpduLayout::new(12345, 42, false);
        assert_eq!(l.wire_len, 48);
        assert_eq!(l.crc_coverage, 44);
        assert_eq!(l.marker_positions().count(), 0);
        assert!(!l.has_leading_marker());
    }

    #[test]
    fn layout_with_leading_marker() {
        let l = FpduLayout::new(0, 42, true);
        assert!(l.has_leading_marker());
        assert_eq!(l.header, 4);
        assert_eq!(l.wire_len, 52);
        assert_eq!(l.crc_coverage, 48);
        assert_eq!(l.marker_positions().collect::<Vec<_>>(), vec![0]);
    }

    #[test]
    fn layout_with_inner_marker_and_marker_after_pad() {
        // Draft figure 6: FPDU at 492 with 42 octets of ULPDU, marker at 512 (FPDUPTR 20).
        let l = FpduLayout::new(492, 42, true);
        assert_eq!(l.wire_len, 52);
        assert_eq!(l.marker_positions().collect::<Vec<_>>(), vec![512]);
        assert_eq!(l.fpduptr_at(512), 20);
        assert_eq!(l.ulpdu_wire_range(), 2..48);
        // An FPDU whose PAD ends right at a marker: the marker is covered by the CRC.
        // Header at 468: ULPDU_Length, ULPDU and PAD (44 octets) end at 512.
        let l = FpduLayout::new(468, 42, true);
        assert_eq!(l.crc_coverage, 48); // 44 content octets + the marker at 512
        assert_eq!(l.wire_len, 52);
        // An FPDU that ends exactly at a marker position: that marker is the next FPDU's.
        let l = FpduLayout::new(464, 42, true);
        assert_eq!(l.end(), 512);
        assert_eq!(l.marker_positions().count(), 0);
        assert!(FpduLayout::new(l.end(), 8, true).has_leading_marker());
    }

    #[test]
    fn frame_rejects_empty_and_oversized_ulpdus() {
        let mut f = Framer::new(FpduMode::CRC_ONLY);
        let mut out = Vec::new();
        assert_eq!(f.frame(&[], &mut out), Err(FrameError::EmptyUlpdu));
        let big = vec![0u8; MAX_ULPDU_LEN + 1];
        assert_eq!(
            f.frame(&big, &mut out),
            Err(FrameError::UlpduTooLong {
                len: MAX_ULPDU_LEN + 1
            })
        );
        assert!(out.is_empty());
        assert_eq!(f.stream_offset(), 0);
        let max = vec![7u8; MAX_ULPDU_LEN];
        f.frame(&max, &mut out).unwrap();
        assert_eq!(out.len(), fpdu_len_without_markers(MAX_ULPDU_LEN));
    }

    /// RFC 5044 7.1.2 rule 7: with markers on, the first octets sent are the marker
    /// 0x00000000 followed by the FPDU's ULPDU_Length; with markers off, ULPDU_Length.
    #[test]
    fn first_octets_are_the_zero_marker_when_markers_on() {
        let mut out = Vec::new();
        let on = FpduMode {
            markers: true,
            crc: true,
        };
        Framer::new(on).frame(&[0xAB; 5], &mut out).unwrap();
        assert_eq!(&out[..6], &[0, 0, 0, 0, 0, 5]);
        out.clear();
        Framer::new(FpduMode::CRC_ONLY)
            .frame(&[0xAB; 5], &mut out)
            .unwrap();
        assert_eq!(&out[..2], &[0, 5]);
    }

    /// RFC 5044 section 4.3: every marker carries FPDUPTR back to its FPDU's header, all
    /// markers of one FPDU point at the same header, and one between FPDUs carries 0.
    #[test]
    fn markers_every_512_octets_point_at_their_fpdu_header() {
        let mode = FpduMode {
            markers: true,
            crc: false,
        };
        let mut f = Framer::new(mode);
        let mut out = Vec::new();
        f.frame(&[1u8; 1500], &mut out).unwrap(); // header at 4, markers at 0, 512, 1024
        assert_eq!(&out[512..516], &[0, 0, 0x01, 0xFC]);
        assert_eq!(&out[1024..1028], &[0, 0, 0x03, 0xFC]);
        let end = out.len();
        assert_eq!(end, 4 + 2 + 1500 + 2 + 4 + 8);
        // Two small FPDUs to reach 1536 exactly, then one that starts at the marker.
        let fill = 1536 - end - 6;
        f.frame(&vec![2u8; fill], &mut out).unwrap();
        assert_eq!(out.len(), 1536);
        f.frame(&[3u8; 8], &mut out).unwrap();
        assert_eq!(&out[1536..1542], &[0, 0, 0, 0, 0, 8]);
    }

    /// The writer fed from a copying source, in runs, gives the FPDU framing a slice
    /// gives, and the sum of its wire octets; every mode, start and split.
    #[test]
    fn writer_from_a_source_matches_framing_a_slice() {
        use crate::tcp::checksum;
        for mode in [
            FpduMode::CRC_ONLY,
            FpduMode {
                markers: true,
                crc: true,
            },
            FpduMode {
                markers: true,
                crc: false,
            },
            FpduMode::default(),
        ] {
            for start in [
                0u64, 1, 2, 4, 7, 300, 301, 468, 492, 503, 506, 508, 510, 1015, 1020,
            ] {
                for len in [
                    1usize,
                    2,
                    3,
                    5,
                    20,
                    70,
                    71,
                    100,
                    509,
                    1441,
                    4000,
                    MAX_ULPDU_LEN,
                ] {
                    let ulpdu: Vec<u8> = (0..len).map(|i| (i * 13 + len) as u8).collect();
                    let mut a = Framer::at_offset(mode, start);
                    let mut want = Vec::new();
                    let sum_a = a.frame_vectored(&[&ulpdu], &mut want).unwrap();
                    assert_eq!(sum_a, checksum::data(&want), "{mode:?} {start} {len}");
                    // The deframer (its own CRC and marker checks) takes it back whole.
                    let mut got_back = Vec::new();
                    crate::mpa::deframe::Deframer::at_offset(mode, start)
                        .push(&want, |f| {
                            got_back.push((f.ulpdu.to_vec(), f.crc, f.wire_len));
                        })
                        .unwrap_or_else(|e| panic!("{mode:?} {start} {len}: {e}"));
                    let check = if mode.crc {
                        crate::mpa::deframe::CrcCheck::Verified
                    } else {
                        crate::mpa::deframe::CrcCheck::Unchecked
                    };
                    assert_eq!(got_back, vec![(ulpdu.clone(), check, want.len())]);
                    let mut b = Framer::at_offset(mode, start);
                    let mut got = vec![0xEEu8; 3];
                    let head = len.min(7);
                    let mut w = b.writer(len, &mut got).unwrap();
                    w.put(&ulpdu[..head]);
                    w.put_with(len - head, |off, n, out, pass| {
                        let src = &ulpdu[head + off..head + off + n];
                        Ok::<_, ()>(match pass {
                            CopyPass::CrcSum(crc) => {
                                fastpath::kernels::append_crc32c_sum(out, src, crc)
                            }
                            CopyPass::Crc(_) => panic!("sums are taken"),
                            CopyPass::Marked { crc, sums, markers } => {
                                assert!(sums, "sums are taken");
                                fastpath::kernels::append_marked(out, src, markers, crc, true)
                            }
                            CopyPass::Copy => {
                                out.extend_from_slice(src);
                                (0, 0)
                            }
                        })
                    })
                    .unwrap();
                    assert_eq!(w.remaining(), 0);
                    let sum_b = w.finish();
                    assert_eq!(&got[3..], &want[..], "{mode:?} {start} {len}");
                    assert_eq!(sum_b, sum_a);
                    assert_eq!(a.stream_offset(), b.stream_offset());
                    // Without sums (a port that fills TCP checksums): the same octets,
                    // from a slice and from a source, and no source is asked for a sum.
                    let mut c = Framer::at_offset(mode, start).with_sums(false);
                    assert!(!c.takes_sums());
                    let mut plain = Vec::new();
                    assert_eq!(c.frame_vectored(&[&ulpdu], &mut plain).unwrap(), 0);
                    assert_eq!(plain, want, "no sums: {mode:?} {start} {len}");
                    let mut c = Framer::at_offset(mode, start).with_sums(false);
                    let mut got = Vec::new();
                    let mut w = c.writer(len, &mut got).unwrap();
                    w.put_with(len, |off, n, out, pass| {
                        let src = &ulpdu[off..off + n];
                        Ok::<_, ()>(match pass {
                            CopyPass::Crc(crc) => {
                                (fastpath::kernels::append_crc32c(out, src, crc), 0)
                            }
                            CopyPass::CrcSum(_) => panic!("no sums are taken"),
                            CopyPass::Marked { crc, sums, markers } => {
                                assert!(!sums, "no sums are taken");
                                fastpath::kernels::append_marked(out, src, markers, crc, false)
                            }
                            CopyPass::Copy => {
                                out.extend_from_slice(src);
                                (0, 0)
                            }
                        })
                    })
                    .unwrap();
                    assert_eq!(w.finish(), 0);
                    assert_eq!(got, want, "no sums, from a source: {mode:?} {start} {len}");
                }
            }
        }
        let mut f = Framer::new(FpduMode::CRC_ONLY);
        let mut out = Vec::new();
        assert!(f.writer(0, &mut out).is_err());
        assert!(f.writer(MAX_ULPDU_LEN + 1, &mut out).is_err());
        // A source's error stops the FPDU; a writer dropped unfinished takes its octets
        // back and leaves the stream position; a short ULPDU is padded by finish.
        let mut w = f.writer(10, &mut out).unwrap();
        assert_eq!(
            w.put_with(10, |_, _, _, _| Err::<(u32, u64), _>("gone")),
            Err("gone")
        );
        drop(w);
        assert!(out.is_empty());
        assert_eq!(f.stream_offset(), 0);
        let mut w = f.writer(10, &mut out).unwrap();
        w.put(&[1; 4]);
        w.finish();
        let mut want = Vec::new();
        Framer::new(FpduMode::CRC_ONLY)
            .frame(&[1, 1, 1, 1, 0, 0, 0, 0, 0, 0], &mut want)
            .unwrap();
        assert_eq!(out, want);
    }

    #[test]
    fn crc_off_sends_zero_crc_field() {
        let mut f = Framer::new(FpduMode {
            markers: false,
            crc: false,
        });
        let mut out = Vec::new();
        f.frame(&[1, 2, 3], &mut out).unwrap();
        assert_eq!(out, [0, 3, 1, 2, 3, 0, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn vectored_equals_contiguous() {
        let mode = FpduMode {
            markers: true,
            crc: true,
        };
        let data: Vec<u8> = (0..1500u32).map(|i| (i * 7) as u8).collect();
        let mut a = Framer::at_offset(mode, 300);
        let mut b = Framer::at_offset(mode, 300);
        let (mut oa, mut ob) = (Vec::new(), Vec::new());
        a.frame(&data, &mut oa).unwrap();
        b.frame_vectored(&[&data[..18], &data[18..900], &data[900..]], &mut ob)
            .unwrap();
        assert_eq!(oa, ob);
        assert_eq!(a.stream_offset(), b.stream_offset());
        assert_eq!(oa.len(), a.next_layout(0).start as usize - 300);
    }
}
