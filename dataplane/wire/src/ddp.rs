//! DDP segment headers: Direct Data Placement over Reliable Transports (RFC 5041).
//!
//! One DDP segment is one MPA ULPDU. It starts with a DDP header (RFC 5041 section 4):
//!
//! ```text
//! octet 0   |T|L| Rsvd (4) | DV (2) |        DDP Control Field (section 4.1)
//! octet 1   RsvdULP (8)                       (RDMAP uses it: RFC 5040 section 4.1)
//!
//! tagged buffer model (section 4.2), 14 octets:
//!   ctrl (1) | RsvdULP (1) | STag (4) | TO (8)
//! untagged buffer model (section 4.3), 18 octets:
//!   ctrl (1) | RsvdULP (1) | RsvdULP (4) | QN (4) | MSN (4) | MO (4)
//! ```
//!
//! followed by the payload (section 4.4). All multi-octet fields are big-endian.
//!
//! * T (tagged flag) selects the buffer model and so the header length.
//! * L (last flag) marks the last segment of a DDP message.
//! * Rsvd: a sender sets it to zero, a receiver does not check it (section 4.1). This codec
//!   ignores it on receive and writes zero.
//! * DV (DDP version) is 1 for RFC 5041. A receiver reports any other value as
//!   "Invalid DDP version" (section 7.2): a Tagged Buffer Error (code 0x04) when T is set,
//!   an Untagged Buffer Error (code 0x06) when it is clear.
//! * The RsvdULP fields are opaque to DDP and belong to the ULP (RDMAP).
//! * QN: queue number (RDMAP uses 0 for Send, 1 for RDMA Read Request, 2 for Terminate);
//!   MSN: message sequence number per queue, starting at 1; MO: octet offset of the segment
//!   in its message.
//!
//! Section 7 of RFC 5041 (error semantics) defines the DDP error types and codes
//! reported in a Terminate message; they are [`DdpError`], [`TaggedBufferError`] and
//! [`UntaggedBufferError`] here, and take their place in
//! [`TermError`](crate::rdmap::TermError) next to the RDMAP and LLP errors.
//!
//! Everything here is sans-IO and panic-free on arbitrary input: parsers return typed
//! errors, encoders write into caller-provided buffers or append to a `Vec<u8>`.

use std::fmt;

/// The DDP version of RFC 5041 (the DV field).
pub const DDP_VERSION: u8 = 1;
/// Octets in a tagged buffer model DDP header (RFC 5041 section 4.2).
pub const TAGGED_HEADER_LEN: usize = 14;
/// Octets in an untagged buffer model DDP header (RFC 5041 section 4.3).
pub const UNTAGGED_HEADER_LEN: usize = 18;

/// Queue number of RDMAP Send messages (QN 0; RDMAP's use of DDP queues, RFC 5040).
pub const QN_SEND: u32 = 0;
/// Queue number of RDMAP RDMA Read Request messages (QN 1).
pub const QN_READ_REQUEST: u32 = 1;
/// Queue number of RDMAP Terminate messages (QN 2).
pub const QN_TERMINATE: u32 = 2;

/// The T (tagged) bit of the DDP control field.
pub const CTRL_T: u8 = 0x80;
/// The L (last) bit of the DDP control field.
pub const CTRL_L: u8 = 0x40;
/// The four reserved bits of the DDP control field.
pub const CTRL_RSVD_MASK: u8 = 0x3C;
/// The two DV (DDP version) bits of the DDP control field.
pub const CTRL_DV_MASK: u8 = 0x03;

/// DDP error type 0x0: local catastrophic error (RFC 5041 section 7.2).
pub const ETYPE_LOCAL_CATASTROPHIC: u8 = 0x0;
/// DDP error type 0x1: tagged buffer error.
pub const ETYPE_TAGGED_BUFFER: u8 = 0x1;
/// DDP error type 0x2: untagged buffer error.
pub const ETYPE_UNTAGGED_BUFFER: u8 = 0x2;
/// DDP error type 0x3: reserved for the use by the LLP.
pub const ETYPE_RESERVED_FOR_LLP: u8 = 0x3;

/// The two DDP buffer models (RFC 5041 section 5.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BufferModel {
    /// Tagged buffer model: the segment names its placement as STag and TO (T = 1).
    Tagged,
    /// Untagged buffer model: the segment names a queue, message and offset (T = 0).
    Untagged,
}

impl BufferModel {
    /// The length of the DDP header of this model: 14 (tagged) or 18 (untagged) octets.
    pub const fn header_len(self) -> usize {
        match self {
            BufferModel::Tagged => TAGGED_HEADER_LEN,
            BufferModel::Untagged => UNTAGGED_HEADER_LEN,
        }
    }

    /// `"tagged"` or `"untagged"`.
    pub const fn name(self) -> &'static str {
        match self {
            BufferModel::Tagged => "tagged",
            BufferModel::Untagged => "untagged",
        }
    }
}

impl fmt::Display for BufferModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The DDP control field, the first octet of every DDP header (RFC 5041 section 4.1):
/// `|T|L| Rsvd (4) | DV (2) |`.
///
/// It keeps every bit as received, reserved bits and version included; the header types
/// ([`TaggedHeader`], [`UntaggedHeader`]) keep only T (through the type) and L, and always
/// encode Rsvd = 0 and DV = 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DdpControl {
    /// T: the segment uses the tagged buffer model.
    pub tagged: bool,
    /// L: the segment is the last one of its DDP message.
    pub last: bool,
    /// The four reserved bits (zero when sent, not checked on receive).
    pub reserved: u8,
    /// DV: the DDP version (two bits; 1 for RFC 5041).
    pub version: u8,
}

impl DdpControl {
    /// A control field as a sender builds it: Rsvd = 0, DV = 1.
    pub const fn new(tagged: bool, last: bool) -> Self {
        DdpControl {
            tagged,
            last,
            reserved: 0,
            version: DDP_VERSION,
        }
    }

    /// Splits a received control octet into its fields.
    pub const fn from_byte(b: u8) -> Self {
        DdpControl {
            tagged: b & CTRL_T != 0,
            last: b & CTRL_L != 0,
            reserved: (b & CTRL_RSVD_MASK) >> 2,
            version: b & CTRL_DV_MASK,
        }
    }

    /// The control octet (reserved and version bits masked to their widths).
    pub const fn to_byte(self) -> u8 {
        let mut b = ((self.reserved & 0x0F) << 2) | (self.version & CTRL_DV_MASK);
        if self.tagged {
            b |= CTRL_T;
        }
        if self.last {
            b |= CTRL_L;
        }
        b
    }

    /// The buffer model the T bit selects.
    pub const fn model(self) -> BufferModel {
        if self.tagged {
            BufferModel::Tagged
        } else {
            BufferModel::Untagged
        }
    }
}

/// A tagged buffer model DDP header (RFC 5041 section 4.2), 14 octets:
/// `ctrl | RsvdULP | STag | TO`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TaggedHeader {
    /// L: last segment of the DDP message.
    pub last: bool,
    /// The RsvdULP octet (RDMAP: the RDMAP control field).
    pub rsvd_ulp: u8,
    /// STag: the Steering Tag of the Data Sink's tagged buffer.
    pub stag: u32,
    /// TO: the Tagged Offset of the first payload octet in that buffer.
    pub to: u64,
}

impl TaggedHeader {
    /// Encodes the 14 header octets (Rsvd = 0, DV = 1).
    pub fn to_bytes(&self) -> [u8; TAGGED_HEADER_LEN] {
        let mut a = [0u8; TAGGED_HEADER_LEN];
        let (ctrl, rest) = a.split_at_mut(2);
        let (stag, to) = rest.split_at_mut(4);
        ctrl.copy_from_slice(&[DdpControl::new(true, self.last).to_byte(), self.rsvd_ulp]);
        stag.copy_from_slice(&self.stag.to_be_bytes());
        to.copy_from_slice(&self.to.to_be_bytes());
        a
    }

    /// Decodes 14 header octets. The caller has checked T and (if it wants to) DV; this
    /// takes L, RsvdULP, STag and TO and ignores the remaining control bits.
    fn from_array(a: [u8; TAGGED_HEADER_LEN]) -> Self {
        let [c, rsvd_ulp, s0, s1, s2, s3, t0, t1, t2, t3, t4, t5, t6, t7] = a;
        TaggedHeader {
            last: c & CTRL_L != 0,
            rsvd_ulp,
            stag: u32::from_be_bytes([s0, s1, s2, s3]),
            to: u64::from_be_bytes([t0, t1, t2, t3, t4, t5, t6, t7]),
        }
    }
}

/// An untagged buffer model DDP header (RFC 5041 section 4.3), 18 octets:
/// `ctrl | RsvdULP | RsvdULP (32) | QN | MSN | MO`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UntaggedHeader {
    /// L: last segment of the DDP message.
    pub last: bool,
    /// The first RsvdULP octet (RDMAP: the RDMAP control field).
    pub rsvd_ulp: u8,
    /// The 32-bit RsvdULP field (RDMAP: the Invalidate STag of a Send with Invalidate,
    /// otherwise reserved: zero when sent, not checked on receive).
    pub rsvd_ulp2: u32,
    /// QN: the queue number.
    pub qn: u32,
    /// MSN: the message sequence number on that queue.
    pub msn: u32,
    /// MO: the message offset of the first payload octet.
    pub mo: u32,
}

impl UntaggedHeader {
    /// Encodes the 18 header octets (Rsvd = 0, DV = 1).
    pub fn to_bytes(&self) -> [u8; UNTAGGED_HEADER_LEN] {
        let mut a = [0u8; UNTAGGED_HEADER_LEN];
        let (ctrl, rest) = a.split_at_mut(2);
        let (rsvd_ulp2, rest) = rest.split_at_mut(4);
        let (qn, rest) = rest.split_at_mut(4);
        let (msn, mo) = rest.split_at_mut(4);
        ctrl.copy_from_slice(&[DdpControl::new(false, self.last).to_byte(), self.rsvd_ulp]);
        rsvd_ulp2.copy_from_slice(&self.rsvd_ulp2.to_be_bytes());
        qn.copy_from_slice(&self.qn.to_be_bytes());
        msn.copy_from_slice(&self.msn.to_be_bytes());
        mo.copy_from_slice(&self.mo.to_be_bytes());
        a
    }

    /// Decodes 18 header octets (see [`TaggedHeader::from_array`]).
    fn from_array(a: [u8; UNTAGGED_HEADER_LEN]) -> Self {
        let [c, rsvd_ulp, r0, r1, r2, r3, q0, q1, q2, q3, n0, n1, n2, n3, o0, o1, o2, o3] = a;
        UntaggedHeader {
            last: c & CTRL_L != 0,
            rsvd_ulp,
            rsvd_ulp2: u32::from_be_bytes([r0, r1, r2, r3]),
            qn: u32::from_be_bytes([q0, q1, q2, q3]),
            msn: u32::from_be_bytes([n0, n1, n2, n3]),
            mo: u32::from_be_bytes([o0, o1, o2, o3]),
        }
    }
}

/// A DDP header of either buffer model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DdpHeader {
    /// Tagged buffer model (T = 1), 14 octets.
    Tagged(TaggedHeader),
    /// Untagged buffer model (T = 0), 18 octets.
    Untagged(UntaggedHeader),
}

impl From<TaggedHeader> for DdpHeader {
    fn from(h: TaggedHeader) -> Self {
        DdpHeader::Tagged(h)
    }
}

impl From<UntaggedHeader> for DdpHeader {
    fn from(h: UntaggedHeader) -> Self {
        DdpHeader::Untagged(h)
    }
}

impl DdpHeader {
    /// Decodes the DDP header at the start of `buf` (a ULPDU), checking the DDP version.
    ///
    /// The T bit picks the header length; Rsvd is ignored. Errors: an empty buffer or one
    /// shorter than the header ([`DdpParseError::Truncated`]), DV other than 1
    /// ([`DdpParseError::InvalidVersion`], checked first, as soon as the control octet is
    /// there).
    pub fn decode(buf: &[u8]) -> Result<DdpHeader, DdpParseError> {
        let Some(&c) = buf.first() else {
            return Err(DdpParseError::Truncated {
                model: None,
                needed: 1,
                available: 0,
            });
        };
        let ctrl = DdpControl::from_byte(c);
        if ctrl.version != DDP_VERSION {
            return Err(DdpParseError::InvalidVersion {
                model: ctrl.model(),
                version: ctrl.version,
            });
        }
        Self::decode_any_version(buf)
    }

    /// Decodes the DDP header at the start of `buf` without checking the DDP version.
    ///
    /// For headers quoted inside a Terminate message (RFC 5040 section 4.8), which copy
    /// the offending segment's header as received. The only possible error is
    /// [`DdpParseError::Truncated`].
    pub fn decode_any_version(buf: &[u8]) -> Result<DdpHeader, DdpParseError> {
        let Some(&c) = buf.first() else {
            return Err(DdpParseError::Truncated {
                model: None,
                needed: 1,
                available: 0,
            });
        };
        let model = DdpControl::from_byte(c).model();
        let truncated = DdpParseError::Truncated {
            model: Some(model),
            needed: model.header_len(),
            available: buf.len(),
        };
        match model {
            BufferModel::Tagged => {
                let (a, _) = buf
                    .split_first_chunk::<TAGGED_HEADER_LEN>()
                    .ok_or(truncated)?;
                Ok(DdpHeader::Tagged(TaggedHeader::from_array(*a)))
            }
            BufferModel::Untagged => {
                let (a, _) = buf
                    .split_first_chunk::<UNTAGGED_HEADER_LEN>()
                    .ok_or(truncated)?;
                Ok(DdpHeader::Untagged(UntaggedHeader::from_array(*a)))
            }
        }
    }

    /// The buffer model (the T bit).
    pub const fn model(&self) -> BufferModel {
        match self {
            DdpHeader::Tagged(_) => BufferModel::Tagged,
            DdpHeader::Untagged(_) => BufferModel::Untagged,
        }
    }

    /// The encoded length: 14 (tagged) or 18 (untagged) octets.
    pub const fn encoded_len(&self) -> usize {
        self.model().header_len()
    }

    /// The L (last segment) flag.
    pub const fn last(&self) -> bool {
        match self {
            DdpHeader::Tagged(h) => h.last,
            DdpHeader::Untagged(h) => h.last,
        }
    }

    /// Sets the L (last segment) flag.
    pub fn set_last(&mut self, last: bool) {
        match self {
            DdpHeader::Tagged(h) => h.last = last,
            DdpHeader::Untagged(h) => h.last = last,
        }
    }

    /// The first RsvdULP octet (RDMAP: the RDMAP control field).
    pub const fn rsvd_ulp(&self) -> u8 {
        match self {
            DdpHeader::Tagged(h) => h.rsvd_ulp,
            DdpHeader::Untagged(h) => h.rsvd_ulp,
        }
    }

    /// The control field as this header encodes it (Rsvd = 0, DV = 1).
    pub const fn control(&self) -> DdpControl {
        DdpControl::new(matches!(self, DdpHeader::Tagged(_)), self.last())
    }

    /// Writes the header into the start of `buf` and returns its length (14 or 18), or
    /// [`BufferTooSmall`] (leaving `buf` untouched) if `buf` is shorter than that.
    pub fn encode_into(&self, buf: &mut [u8]) -> Result<usize, BufferTooSmall> {
        match self {
            DdpHeader::Tagged(h) => write_prefix(buf, &h.to_bytes()),
            DdpHeader::Untagged(h) => write_prefix(buf, &h.to_bytes()),
        }
    }

    /// Appends the header to `out`.
    pub fn append_to(&self, out: &mut Vec<u8>) {
        match self {
            DdpHeader::Tagged(h) => out.extend_from_slice(&h.to_bytes()),
            DdpHeader::Untagged(h) => out.extend_from_slice(&h.to_bytes()),
        }
    }

    /// The encoded header as a new vector.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.encoded_len());
        self.append_to(&mut v);
        v
    }
}

/// Copies `src` to the start of `buf`, or reports that `buf` is too short.
pub(crate) fn write_prefix(buf: &mut [u8], src: &[u8]) -> Result<usize, BufferTooSmall> {
    let available = buf.len();
    let dst = buf.get_mut(..src.len()).ok_or(BufferTooSmall {
        needed: src.len(),
        available,
    })?;
    dst.copy_from_slice(src);
    Ok(src.len())
}

/// One DDP segment (= one ULPDU): its header and its payload, borrowed from the ULPDU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DdpSegment<'a> {
    /// The DDP header.
    pub header: DdpHeader,
    /// The octets after the header (possibly none).
    pub payload: &'a [u8],
}

impl<'a> DdpSegment<'a> {
    /// Parses a ULPDU into header and payload, zero-copy (see [`DdpHeader::decode`]).
    pub fn parse(ulpdu: &'a [u8]) -> Result<Self, DdpParseError> {
        let header = DdpHeader::decode(ulpdu)?;
        let payload = ulpdu.get(header.encoded_len()..).unwrap_or_default();
        Ok(DdpSegment { header, payload })
    }

    /// The length of the whole segment (header and payload), i.e. the ULPDU length.
    pub fn len(&self) -> usize {
        self.header.encoded_len() + self.payload.len()
    }

    /// Always false: a segment has at least its header.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Appends header and payload to `out`.
    pub fn append_to(&self, out: &mut Vec<u8>) {
        self.header.append_to(out);
        out.extend_from_slice(self.payload);
    }

    /// Header and payload as a new vector (a ULPDU ready for MPA).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len());
        self.append_to(&mut v);
        v
    }
}

/// Parses a ULPDU (one DDP segment) into header and payload slice, zero-copy.
///
/// Same as [`DdpSegment::parse`]; errors are [`DdpParseError`], each of which can name
/// the Terminate error a receiver reports for it ([`DdpParseError::term_error`]).
pub fn parse_ulpdu(ulpdu: &[u8]) -> Result<DdpSegment<'_>, DdpParseError> {
    DdpSegment::parse(ulpdu)
}

/// An encoder was given a buffer too short for what it has to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BufferTooSmall {
    /// Octets the encoding needs.
    pub needed: usize,
    /// Octets the buffer has.
    pub available: usize,
}

impl fmt::Display for BufferTooSmall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "buffer too small: {} octets needed, {} available",
            self.needed, self.available
        )
    }
}

impl std::error::Error for BufferTooSmall {}

/// Why a ULPDU is not a well-formed DDP segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DdpParseError {
    /// The ULPDU is shorter than the DDP header its T bit calls for (or empty).
    Truncated {
        /// The buffer model of the T bit, `None` if not even the control octet is there.
        model: Option<BufferModel>,
        /// Octets needed.
        needed: usize,
        /// Octets available.
        available: usize,
    },
    /// DV is not 1 (RFC 5041 section 7.2: "Invalid DDP version").
    InvalidVersion {
        /// The buffer model of the T bit, which picks the error type to report.
        model: BufferModel,
        /// The DV value received.
        version: u8,
    },
}

impl DdpParseError {
    /// The DDP error a receiver reports for this, if RFC 5041 defines one.
    ///
    /// * Invalid DDP version: Tagged Buffer Error 0x04 if T was set, Untagged Buffer
    ///   Error 0x06 otherwise (RFC 5041 section 7.2).
    /// * Truncated: `None`. RFC 5041 has no error code for a segment shorter than its
    ///   header (with MPA below, the ULPDU_Length framing makes this a broken peer); the
    ///   receiver treats it as a fatal stream error and closes the LLP stream.
    pub const fn ddp_error(&self) -> Option<DdpError> {
        match self {
            DdpParseError::Truncated { .. } => None,
            DdpParseError::InvalidVersion {
                model: BufferModel::Tagged,
                ..
            } => Some(DdpError::TaggedBuffer(TaggedBufferError::InvalidDdpVersion)),
            DdpParseError::InvalidVersion {
                model: BufferModel::Untagged,
                ..
            } => Some(DdpError::UntaggedBuffer(
                UntaggedBufferError::InvalidDdpVersion,
            )),
        }
    }
}

impl fmt::Display for DdpParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DdpParseError::Truncated {
                model: None,
                needed,
                available,
            } => write!(
                f,
                "truncated DDP segment: {needed} octets needed, {available} available"
            ),
            DdpParseError::Truncated {
                model: Some(m),
                needed,
                available,
            } => write!(
                f,
                "truncated {m} DDP segment: header needs {needed} octets, {available} available"
            ),
            DdpParseError::InvalidVersion { model, version } => {
                write!(f, "invalid DDP version {version} in a {model} segment")
            }
        }
    }
}

impl std::error::Error for DdpParseError {}

code_table! {
    /// Tagged Buffer Error codes (DDP layer, error type 0x1; RFC 5041 section 7.2).
    pub enum TaggedBufferError => description {
        /// 0x00: Invalid STag.
        InvalidStag = 0x00 => "Invalid STag",
        /// 0x01: Base or bounds violation.
        BaseOrBoundsViolation = 0x01 => "Base or bounds violation",
        /// 0x02: STag not associated with DDP Stream.
        StagNotAssociated = 0x02 => "STag not associated with DDP Stream",
        /// 0x03: TO wrap.
        ToWrap = 0x03 => "TO wrap",
        /// 0x04: Invalid DDP version.
        InvalidDdpVersion = 0x04 => "Invalid DDP version",
    }
}

code_table! {
    /// Untagged Buffer Error codes (DDP layer, error type 0x2; RFC 5041 section 7.2).
    pub enum UntaggedBufferError => description {
        /// 0x01: Invalid QN.
        InvalidQn = 0x01 => "Invalid QN",
        /// 0x02: Invalid MSN - no buffer available.
        InvalidMsnNoBuffer = 0x02 => "Invalid MSN - no buffer available",
        /// 0x03: Invalid MSN - MSN range is not valid.
        InvalidMsnRange = 0x03 => "Invalid MSN - MSN range is not valid",
        /// 0x04: Invalid MO.
        InvalidMo = 0x04 => "Invalid MO",
        /// 0x05: DDP Message too long for available buffer.
        MessageTooLong = 0x05 => "DDP Message too long for available buffer",
        /// 0x06: Invalid DDP version.
        InvalidDdpVersion = 0x06 => "Invalid DDP version",
    }
}

/// A DDP-layer error (Terminate Layer 0x1) by error type (RFC 5041 section 7.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DdpError {
    /// Error type 0x0: Local Catastrophic Error. RFC 5041 gives it no specific error
    /// codes; a sender uses 0x00, a receiver keeps whatever code it got.
    LocalCatastrophic {
        /// The Error Code octet.
        code: u8,
    },
    /// Error type 0x1: Tagged Buffer Error.
    TaggedBuffer(TaggedBufferError),
    /// Error type 0x2: Untagged Buffer Error.
    UntaggedBuffer(UntaggedBufferError),
    /// Error type 0x3: reserved for the use by the LLP; the code is the LLP's.
    ReservedForLlp {
        /// The Error Code octet.
        code: u8,
    },
}

impl DdpError {
    /// A Local Catastrophic Error with error code 0x00.
    pub const LOCAL_CATASTROPHIC: DdpError = DdpError::LocalCatastrophic { code: 0 };

    /// The EType nibble.
    pub const fn etype(&self) -> u8 {
        match self {
            DdpError::LocalCatastrophic { .. } => ETYPE_LOCAL_CATASTROPHIC,
            DdpError::TaggedBuffer(_) => ETYPE_TAGGED_BUFFER,
            DdpError::UntaggedBuffer(_) => ETYPE_UNTAGGED_BUFFER,
            DdpError::ReservedForLlp { .. } => ETYPE_RESERVED_FOR_LLP,
        }
    }

    /// The Error Code octet.
    pub const fn code(&self) -> u8 {
        match self {
            DdpError::LocalCatastrophic { code } | DdpError::ReservedForLlp { code } => *code,
            DdpError::TaggedBuffer(e) => e.code(),
            DdpError::UntaggedBuffer(e) => e.code(),
        }
    }

    /// The DDP error for an (EType, Error Code) pair, `None` if RFC 5041 defines none.
    pub const fn from_etype_code(etype: u8, code: u8) -> Option<Self> {
        match etype {
            ETYPE_LOCAL_CATASTROPHIC => Some(DdpError::LocalCatastrophic { code }),
            ETYPE_TAGGED_BUFFER => match TaggedBufferError::from_code(code) {
                Some(e) => Some(DdpError::TaggedBuffer(e)),
                None => None,
            },
            ETYPE_UNTAGGED_BUFFER => match UntaggedBufferError::from_code(code) {
                Some(e) => Some(DdpError::UntaggedBuffer(e)),
                None => None,
            },
            ETYPE_RESERVED_FOR_LLP => Some(DdpError::ReservedForLlp { code }),
            _ => None,
        }
    }

    /// The RFC name of the error type.
    pub const fn etype_description(&self) -> &'static str {
        match self {
            DdpError::LocalCatastrophic { .. } => "Local Catastrophic Error",
            DdpError::TaggedBuffer(_) => "Tagged Buffer Error",
            DdpError::UntaggedBuffer(_) => "Untagged Buffer Error",
            DdpError::ReservedForLlp { .. } => "Reserved for the use by the LLP",
        }
    }
}

impl fmt::Display for DdpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DdpError::LocalCatastrophic { code } | DdpError::ReservedForLlp { code } => {
                write!(f, "DDP {} (code {code:#04x})", self.etype_description())
            }
            DdpError::TaggedBuffer(e) => {
                write!(f, "DDP {}: {}", self.etype_description(), e.description())
            }
            DdpError::UntaggedBuffer(e) => {
                write!(f, "DDP {}: {}", self.etype_description(), e.description())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn constants() {
        assert_eq!(DDP_VERSION, 1);
        assert_eq!(TAGGED_HEADER_LEN, 14);
        assert_eq!(UNTAGGED_HEADER_LEN, 18);
        assert_eq!((QN_SEND, QN_READ_REQUEST, QN_TERMINATE), (0, 1, 2));
        assert_eq!(BufferModel::Tagged.header_len(), 14);
        assert_eq!(BufferModel::Untagged.header_len(), 18);
    }

    #[test]
    fn control_field_bits() {
        assert_eq!(DdpControl::new(true, true).to_byte(), 0xC1);
        assert_eq!(DdpControl::new(false, true).to_byte(), 0x41);
        assert_eq!(DdpControl::new(true, false).to_byte(), 0x81);
        assert_eq!(DdpControl::new(false, false).to_byte(), 0x01);
        let c = DdpControl::from_byte(0xFE);
        assert!(c.tagged && c.last);
        assert_eq!(c.reserved, 0x0F);
        assert_eq!(c.version, 2);
        for b in 0..=255u8 {
            assert_eq!(DdpControl::from_byte(b).to_byte(), b);
        }
    }

    #[test]
    fn siw_zero_length_write_rtr_bytes() {
        // siw's zero-length RDMA Write RTR: T|L|DV=1, RDMAP 0x40 (RV 1, RDMA Write), STag 1.
        let bytes = [0xC1, 0x40, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0];
        let seg = parse_ulpdu(&bytes).unwrap();
        assert_eq!(
            seg.header,
            DdpHeader::Tagged(TaggedHeader {
                last: true,
                rsvd_ulp: 0x40,
                stag: 1,
                to: 0
            })
        );
        assert!(seg.payload.is_empty());
        assert_eq!(seg.header.to_vec(), bytes);
        assert_eq!(seg.to_vec(), bytes);
    }

    #[test]
    fn siw_first_send_bytes() {
        let mut bytes = vec![0x41, 0x43, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0];
        bytes.extend_from_slice(b"hello");
        let seg = parse_ulpdu(&bytes).unwrap();
        let DdpHeader::Untagged(h) = seg.header else {
            panic!("expected untagged")
        };
        assert_eq!(
            h,
            UntaggedHeader {
                last: true,
                rsvd_ulp: 0x43,
                rsvd_ulp2: 0,
                qn: 0,
                msn: 1,
                mo: 0
            }
        );
        assert_eq!(seg.payload, b"hello");
        assert_eq!(seg.len(), bytes.len());
        assert!(!seg.is_empty());
        assert_eq!(seg.to_vec(), bytes);
    }

    #[test]
    fn field_placement() {
        let t = TaggedHeader {
            last: false,
            rsvd_ulp: 0xAB,
            stag: 0x0102_0304,
            to: 0x0506_0708_090A_0B0C,
        };
        assert_eq!(
            t.to_bytes(),
            [0x81, 0xAB, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]
        );
        let u = UntaggedHeader {
            last: false,
            rsvd_ulp: 0xCD,
            rsvd_ulp2: 0x1112_1314,
            qn: 0x2122_2324,
            msn: 0x3132_3334,
            mo: 0x4142_4344,
        };
        assert_eq!(
            u.to_bytes(),
            [
                0x01, 0xCD, 0x11, 0x12, 0x13, 0x14, 0x21, 0x22, 0x23, 0x24, 0x31, 0x32, 0x33, 0x34,
                0x41, 0x42, 0x43, 0x44
            ]
        );
    }

    #[test]
    fn reserved_bits_are_ignored_on_receive_and_zero_on_send() {
        let mut bytes = DdpHeader::Tagged(TaggedHeader {
            last: true,
            rsvd_ulp: 0x40,
            stag: 7,
            to: 9,
        })
        .to_vec();
        bytes[0] |= CTRL_RSVD_MASK;
        let h = DdpHeader::decode(&bytes).unwrap();
        assert_eq!(h.to_vec()[0], 0xC1);
        assert_eq!(h.control(), DdpControl::new(true, true));
    }

    #[test]
    fn truncated_errors() {
        assert_eq!(
            parse_ulpdu(&[]),
            Err(DdpParseError::Truncated {
                model: None,
                needed: 1,
                available: 0
            })
        );
        assert_eq!(
            parse_ulpdu(&[0xC1; 13]),
            Err(DdpParseError::Truncated {
                model: Some(BufferModel::Tagged),
                needed: 14,
                available: 13
            })
        );
        assert_eq!(
            parse_ulpdu(&[0x41; 17]),
            Err(DdpParseError::Truncated {
                model: Some(BufferModel::Untagged),
                needed: 18,
                available: 17
            })
        );
        // 14 octets are enough for a tagged header but not an untagged one.
        assert!(parse_ulpdu(&[0xC1; 14]).is_ok());
        assert!(parse_ulpdu(&[0x41; 14]).is_err());
        let e = parse_ulpdu(&[0x41; 3]).unwrap_err();
        assert_eq!(e.term_error(), None);
        assert_eq!(e.ddp_error(), None);
        assert!(e.to_string().contains("untagged"));
        assert!(DdpHeader::decode_any_version(&[]).is_err());
    }

    #[test]
    fn invalid_version_picks_error_type_by_t_bit() {
        for dv in [0u8, 2, 3] {
            let tagged = [0xC0 | dv; 14];
            let e = parse_ulpdu(&tagged).unwrap_err();
            assert_eq!(
                e,
                DdpParseError::InvalidVersion {
                    model: BufferModel::Tagged,
                    version: dv
                }
            );
            let te = e.term_error().unwrap();
            assert_eq!((te.layer(), te.etype(), te.code()), (1, 1, 0x04));

            let untagged = [0x40 | dv; 18];
            let e = parse_ulpdu(&untagged).unwrap_err();
            let te = e.term_error().unwrap();
            assert_eq!((te.layer(), te.etype(), te.code()), (1, 2, 0x06));
            assert!(e.to_string().contains("invalid DDP version"));
        }
        // The version is checked before the length: one octet is enough to report it.
        assert!(matches!(
            parse_ulpdu(&[0x80]),
            Err(DdpParseError::InvalidVersion { .. })
        ));
        // Headers quoted in a Terminate decode whatever their version.
        let mut bytes = [0u8; 18];
        bytes[0] = 0x42;
        assert!(DdpHeader::decode_any_version(&bytes).is_ok());
    }

    #[test]
    fn encode_into_buffers() {
        let h = DdpHeader::Untagged(UntaggedHeader {
            last: true,
            rsvd_ulp: 0x43,
            rsvd_ulp2: 0,
            qn: 0,
            msn: 1,
            mo: 0,
        });
        let mut small = [0xEEu8; 17];
        assert_eq!(
            h.encode_into(&mut small),
            Err(BufferTooSmall {
                needed: 18,
                available: 17
            })
        );
        assert_eq!(small, [0xEE; 17]);
        let mut big = [0xEEu8; 20];
        assert_eq!(h.encode_into(&mut big), Ok(18));
        assert_eq!(&big[..18], &h.to_vec()[..]);
        assert_eq!(&big[18..], &[0xEE, 0xEE]);
        assert!(BufferTooSmall {
            needed: 1,
            available: 0
        }
        .to_string()
        .contains("too small"));
    }

    #[test]
    fn header_accessors() {
        let mut h = DdpHeader::from(TaggedHeader {
            last: false,
            rsvd_ulp: 0x42,
            stag: 1,
            to: 2,
        });
        assert_eq!(h.model(), BufferModel::Tagged);
        assert_eq!(h.encoded_len(), 14);
        assert!(!h.last());
        h.set_last(true);
        assert!(h.last());
        assert_eq!(h.rsvd_ulp(), 0x42);
        let mut u = DdpHeader::from(UntaggedHeader {
            last: true,
            rsvd_ulp: 0x41,
            rsvd_ulp2: 0,
            qn: 1,
            msn: 1,
            mo: 0,
        });
        assert_eq!(u.model(), BufferModel::Untagged);
        assert_eq!(u.encoded_len(), 18);
        u.set_last(false);
        assert!(!u.last());
        assert_eq!(u.rsvd_ulp(), 0x41);
        assert_eq!(BufferModel::Tagged.to_string(), "tagged");
        assert_eq!(BufferModel::Untagged.to_string(), "untagged");
    }

    #[test]
    fn error_codes_round_trip() {
        for e in TaggedBufferError::ALL {
            assert_eq!(TaggedBufferError::from_code(e.code()), Some(e));
            let d = DdpError::TaggedBuffer(e);
            assert_eq!(DdpError::from_etype_code(d.etype(), d.code()), Some(d));
            assert!(d.to_string().starts_with("DDP Tagged Buffer Error: "));
        }
        for e in UntaggedBufferError::ALL {
            assert_eq!(UntaggedBufferError::from_code(e.code()), Some(e));
            let d = DdpError::UntaggedBuffer(e);
            assert_eq!(DdpError::from_etype_code(d.etype(), d.code()), Some(d));
            assert!(d.to_string().starts_with("DDP Untagged Buffer Error: "));
        }
        assert_eq!(TaggedBufferError::from_code(0x05), None);
        assert_eq!(UntaggedBufferError::from_code(0x00), None);
        assert_eq!(UntaggedBufferError::from_code(0x07), None);
        assert_eq!(DdpError::from_etype_code(1, 0x05), None);
        assert_eq!(DdpError::from_etype_code(2, 0x00), None);
        assert_eq!(DdpError::from_etype_code(4, 0x00), None);
        assert_eq!(
            DdpError::from_etype_code(0, 0x17),
            Some(DdpError::LocalCatastrophic { code: 0x17 })
        );
        assert_eq!(
            DdpError::from_etype_code(3, 0x02),
            Some(DdpError::ReservedForLlp { code: 0x02 })
        );
        assert_eq!(DdpError::LOCAL_CATASTROPHIC.code(), 0);
        assert_eq!(
            DdpError::LOCAL_CATASTROPHIC.to_string(),
            "DDP Local Catastrophic Error (code 0x00)"
        );
        assert_eq!(
            DdpError::UntaggedBuffer(UntaggedBufferError::InvalidQn).to_string(),
            "DDP Untagged Buffer Error: Invalid QN"
        );
    }

    fn arb_header() -> impl Strategy<Value = DdpHeader> {
        prop_oneof![
            (any::<bool>(), any::<u8>(), any::<u32>(), any::<u64>()).prop_map(
                |(last, rsvd_ulp, stag, to)| DdpHeader::Tagged(TaggedHeader {
                    last,
                    rsvd_ulp,
                    stag,
                    to
                })
            ),
            (
                any::<bool>(),
                any::<u8>(),
                any::<u32>(),
                any::<u32>(),
                any::<u32>(),
                any::<u32>()
            )
                .prop_map(|(last, rsvd_ulp, rsvd_ulp2, qn, msn, mo)| {
                    DdpHeader::Untagged(UntaggedHeader {
                        last,
                        rsvd_ulp,
                        rsvd_ulp2,
                        qn,
                        msn,
                        mo,
                    })
                }),
        ]
    }

    proptest! {
        #[test]
        fn header_round_trip(h in arb_header(), payload in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut ulpdu = h.to_vec();
            prop_assert_eq!(ulpdu.len(), h.encoded_len());
            ulpdu.extend_from_slice(&payload);
            let seg = parse_ulpdu(&ulpdu).unwrap();
            prop_assert_eq!(seg.header, h);
            prop_assert_eq!(seg.payload, &payload[..]);
            prop_assert_eq!(seg.to_vec(), ulpdu.clone());
            let mut buf = vec![0u8; ulpdu.len()];
            prop_assert_eq!(h.encode_into(&mut buf), Ok(h.encoded_len()));
            prop_assert_eq!(&buf[..h.encoded_len()], &ulpdu[..h.encoded_len()]);
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..48)) {
            match parse_ulpdu(&bytes) {
                Ok(seg) => {
                    prop_assert_eq!(seg.len(), bytes.len());
                    // Re-encoding normalises only the reserved bits.
                    let mut expect = bytes.clone();
                    expect[0] &= !CTRL_RSVD_MASK;
                    prop_assert_eq!(seg.to_vec(), expect);
                }
                Err(e) => {
                    let _ = e.term_error();
                    let _ = e.to_string();
                }
            }
            let _ = DdpHeader::decode_any_version(&bytes);
        }

        #[test]
        fn error_triplets_never_panic(etype in any::<u8>(), code in any::<u8>()) {
            if let Some(e) = DdpError::from_etype_code(etype, code) {
                prop_assert_eq!((e.etype(), e.code()), (etype, code));
                let _ = e.to_string();
            }
        }
    }
}
