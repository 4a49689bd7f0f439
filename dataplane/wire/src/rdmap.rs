//! RDMAP: the Remote Direct Memory Access Protocol (RFC 5040), wire codec.
//!
//! RDMAP rides in DDP segments ([`crate::ddp`]). Its control field is the first RsvdULP
//! octet of the DDP header (RFC 5040 section 4.1):
//!
//! ```text
//! |RV (2) = 01|Rsv (2)|Opcode (4)|
//! ```
//!
//! and the opcode fixes the DDP buffer model and, for untagged messages, the queue
//! (RFC 5040 section 4.2, RDMA Message Definitions):
//!
//! | opcode | message                          | DDP model, queue           |
//! |--------|----------------------------------|----------------------------|
//! | 0000   | RDMA Write                       | tagged                     |
//! | 0001   | RDMA Read Request                | untagged, QN 1             |
//! | 0010   | RDMA Read Response               | tagged                     |
//! | 0011   | Send                             | untagged, QN 0             |
//! | 0100   | Send with Invalidate             | untagged, QN 0             |
//! | 0101   | Send with Solicited Event        | untagged, QN 0             |
//! | 0110   | Send with Solicited Event and Invalidate | untagged, QN 0     |
//! | 0111   | Terminate                        | untagged, QN 2, L = 1      |
//!
//! The Send with Invalidate opcodes carry the STag to invalidate in the 32-bit RsvdULP
//! field of the untagged DDP header (RFC 5040 section 4.1); every other message leaves it
//! reserved (zero when sent, not checked on receive).
//!
//! What is here:
//!
//! * [`Opcode`] and [`RdmapControl`], header builders ([`tagged_header`],
//!   [`untagged_header`]).
//! * [`parse_segment`]: DDP and RDMAP validation of one received ULPDU together, into a
//!   [`Segment`]; every [`RdmapParseError`] names the Terminate error the receiver reports
//!   ([`RdmapParseError::term_error`]) and can build that Terminate
//!   ([`RdmapParseError::terminate`]).
//! * [`ReadRequest`], the 28-octet RDMA Read Request header (RFC 5040 section 4,
//!   RDMA Read Request Header).
//! * [`Terminate`], the Terminate header (RFC 5040 section 4.8), and [`terminate_ulpdu`].
//! * [`TermError`]: every error layer/type/code of RFC 5040 section 7 (RDMAP), RFC 5041
//!   section 7 (DDP) and the LLP (MPA, RFC 5044 section 8 and RFC 6581 section 8).
//! * The zero-length RTR messages of RFC 6581 ([`zero_length_send`],
//!   [`zero_length_write`], [`zero_length_read_request`], [`zero_length_read_response`])
//!   and their recognition ([`Segment::rtr_kind`]).
//!
//! Everything is sans-IO and panic-free on arbitrary input. What we send follows the RFC;
//! what we accept is liberal where the RFC allows it (reserved bits are not checked; a
//! Terminate whose quoted headers are cut short still yields its error triplet).

use std::fmt;

use crate::ddp::{
    self, BufferModel, BufferTooSmall, DdpError, DdpHeader, DdpParseError, TaggedHeader,
    UntaggedBufferError, UntaggedHeader, QN_READ_REQUEST, QN_SEND, QN_TERMINATE,
};
use crate::mpa::MpaErrorCode;

/// The RDMAP version of RFC 5040 (the RV field).
pub const RDMAP_VERSION: u8 = 1;
/// The RV (RDMAP version) bits of the RDMAP control field.
pub const CTRL_RV_MASK: u8 = 0xC0;
/// The two reserved bits of the RDMAP control field.
pub const CTRL_RSVD_MASK: u8 = 0x30;
/// The opcode bits of the RDMAP control field.
pub const CTRL_OPCODE_MASK: u8 = 0x0F;

/// Octets of the RDMA Read Request header (RFC 5040 section 4, RDMA Read Request Header).
pub const READ_REQUEST_LEN: usize = 28;
/// Octets of the Terminate Control field (RFC 5040 section 4.8).
pub const TERMINATE_CONTROL_LEN: usize = 4;
/// Octets of the Terminate header's DDP Segment Length field.
pub const DDP_SEGMENT_LENGTH_LEN: usize = 2;
/// The longest Terminate header: control, segment length, untagged DDP header and
/// RDMA Read Request header (4 + 2 + 18 + 28 octets).
pub const TERMINATE_MAX_LEN: usize =
    TERMINATE_CONTROL_LEN + DDP_SEGMENT_LENGTH_LEN + ddp::UNTAGGED_HEADER_LEN + READ_REQUEST_LEN;

/// Terminate Layer 0x0: RDMAP.
pub const LAYER_RDMAP: u8 = 0x0;
/// Terminate Layer 0x1: DDP.
pub const LAYER_DDP: u8 = 0x1;
/// Terminate Layer 0x2: LLP (MPA).
pub const LAYER_LLP: u8 = 0x2;

/// RDMAP error type 0x0: Local Catastrophic Error.
pub const ETYPE_LOCAL_CATASTROPHIC: u8 = 0x0;
/// RDMAP error type 0x1: Remote Protection Error.
pub const ETYPE_REMOTE_PROTECTION: u8 = 0x1;
/// RDMAP error type 0x2: Remote Operation Error.
pub const ETYPE_REMOTE_OPERATION: u8 = 0x2;
/// LLP error type 0x0: MPA.
pub const LLP_ETYPE_MPA: u8 = 0x0;

/// Hdrct M bit (octet 2 of the Terminate Control field): DDP Segment Length valid.
pub const HDRCT_M: u8 = 0x80;
/// Hdrct D bit: the terminated DDP header is included.
pub const HDRCT_D: u8 = 0x40;
/// Hdrct R bit: the terminated RDMAP header (RDMA Read Request header) is included.
pub const HDRCT_R: u8 = 0x20;

// ---------------------------------------------------------------------------------------
// Opcodes and the RDMAP control field
// ---------------------------------------------------------------------------------------

code_table! {
    /// The eight RDMAP opcodes of RFC 5040 section 4.2.
    #[derive(PartialOrd, Ord)]
    pub enum Opcode => name {
        /// 0000: RDMA Write (tagged).
        RdmaWrite = 0 => "rdma_write",
        /// 0001: RDMA Read Request (untagged, QN 1).
        RdmaReadRequest = 1 => "rdma_read_request",
        /// 0010: RDMA Read Response (tagged).
        RdmaReadResponse = 2 => "rdma_read_response",
        /// 0011: Send (untagged, QN 0).
        Send = 3 => "send",
        /// 0100: Send with Invalidate (untagged, QN 0).
        SendWithInvalidate = 4 => "send_with_invalidate",
        /// 0101: Send with Solicited Event (untagged, QN 0).
        SendWithSe = 5 => "send_with_se",
        /// 0110: Send with Solicited Event and Invalidate (untagged, QN 0).
        SendWithSeAndInvalidate = 6 => "send_with_se_and_invalidate",
        /// 0111: Terminate (untagged, QN 2, L = 1).
        Terminate = 7 => "terminate",
    }
}

impl Opcode {
    /// The DDP buffer model the opcode uses.
    pub const fn model(self) -> BufferModel {
        match self {
            Opcode::RdmaWrite | Opcode::RdmaReadResponse => BufferModel::Tagged,
            _ => BufferModel::Untagged,
        }
    }

    /// True for the tagged opcodes (RDMA Write, RDMA Read Response).
    pub const fn is_tagged(self) -> bool {
        matches!(self.model(), BufferModel::Tagged)
    }

    /// The DDP queue number of an untagged opcode (0 Send family, 1 RDMA Read Request,
    /// 2 Terminate); `None` for the tagged ones.
    pub const fn queue_number(self) -> Option<u32> {
        match self {
            Opcode::RdmaWrite | Opcode::RdmaReadResponse => None,
            Opcode::RdmaReadRequest => Some(QN_READ_REQUEST),
            Opcode::Terminate => Some(QN_TERMINATE),
            Opcode::Send
            | Opcode::SendWithInvalidate
            | Opcode::SendWithSe
            | Opcode::SendWithSeAndInvalidate => Some(QN_SEND),
        }
    }

    /// True for the four Send opcodes.
    pub const fn is_send(self) -> bool {
        matches!(self.queue_number(), Some(QN_SEND))
    }

    /// True for the opcodes whose 32-bit RsvdULP field carries an Invalidate STag.
    pub const fn carries_invalidate_stag(self) -> bool {
        matches!(
            self,
            Opcode::SendWithInvalidate | Opcode::SendWithSeAndInvalidate
        )
    }

    /// True for the Send opcodes that ask for a Solicited Event.
    pub const fn solicited_event(self) -> bool {
        matches!(self, Opcode::SendWithSe | Opcode::SendWithSeAndInvalidate)
    }

    /// The RDMAP control octet a sender puts in the DDP header: RV = 1, Rsv = 0, opcode.
    pub const fn rdmap_control(self) -> u8 {
        (RDMAP_VERSION << 6) | self.code()
    }
}

impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The RDMAP control field (RFC 5040 section 4.1), every bit as received.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RdmapControl {
    /// RV: the RDMAP version (two bits; 1 for RFC 5040).
    pub version: u8,
    /// The two reserved bits (zero when sent, not checked on receive).
    pub reserved: u8,
    /// The 4-bit opcode, possibly one RFC 5040 does not define.
    pub opcode: u8,
}

impl RdmapControl {
    /// The control field a sender builds for `opcode`.
    pub const fn new(opcode: Opcode) -> Self {
        RdmapControl {
            version: RDMAP_VERSION,
            reserved: 0,
            opcode: opcode.code(),
        }
    }

    /// Splits a control octet into its fields.
    pub const fn from_byte(b: u8) -> Self {
        RdmapControl {
            version: (b & CTRL_RV_MASK) >> 6,
            reserved: (b & CTRL_RSVD_MASK) >> 4,
            opcode: b & CTRL_OPCODE_MASK,
        }
    }

    /// The control octet (each field masked to its width).
    pub const fn to_byte(self) -> u8 {
        ((self.version & 0x03) << 6) | ((self.reserved & 0x03) << 4) | (self.opcode & 0x0F)
    }

    /// The opcode, if RFC 5040 defines it.
    pub const fn opcode(self) -> Option<Opcode> {
        Opcode::from_code(self.opcode)
    }
}

/// A tagged DDP header for a tagged `opcode` (RDMA Write, RDMA Read Response) with the
/// RDMAP control field filled in; `None` if `opcode` is untagged.
pub fn tagged_header(opcode: Opcode, stag: u32, to: u64, last: bool) -> Option<DdpHeader> {
    if !opcode.is_tagged() {
        return None;
    }
    Some(DdpHeader::Tagged(TaggedHeader {
        last,
        rsvd_ulp: opcode.rdmap_control(),
        stag,
        to,
    }))
}

/// An untagged DDP header for an untagged `opcode`, on the opcode's queue, with the RDMAP
/// control field filled in; `None` if `opcode` is tagged.
///
/// `rsvd_ulp2` is the 32-bit RsvdULP field: the Invalidate STag for the Send with
/// Invalidate opcodes, zero otherwise.
pub fn untagged_header(
    opcode: Opcode,
    rsvd_ulp2: u32,
    msn: u32,
    mo: u32,
    last: bool,
) -> Option<DdpHeader> {
    let qn = opcode.queue_number()?;
    Some(DdpHeader::Untagged(UntaggedHeader {
        last,
        rsvd_ulp: opcode.rdmap_control(),
        rsvd_ulp2,
        qn,
        msn,
        mo,
    }))
}

// ---------------------------------------------------------------------------------------
// RDMA Read Request header
// ---------------------------------------------------------------------------------------

/// The RDMA Read Request header, the 28-octet payload of an RDMA Read Request message
/// (RFC 5040 section 4, RDMA Read Request Header):
///
/// ```text
/// Data Sink STag (4) | Data Sink Tagged Offset (8) | RDMA Read Message Size (4) |
/// Data Source STag (4) | Data Source Tagged Offset (8)
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ReadRequest {
    /// Data Sink STag: the requester's buffer the RDMA Read Response is written to.
    pub sink_stag: u32,
    /// Data Sink Tagged Offset.
    pub sink_to: u64,
    /// RDMA Read Message Size: octets to read (0 for a zero-length read).
    pub read_message_size: u32,
    /// Data Source STag: the responder's buffer to read.
    pub source_stag: u32,
    /// Data Source Tagged Offset.
    pub source_to: u64,
}

impl ReadRequest {
    /// Encodes the 28 octets.
    pub fn to_bytes(&self) -> [u8; READ_REQUEST_LEN] {
        let mut a = [0u8; READ_REQUEST_LEN];
        let (sink_stag, rest) = a.split_at_mut(4);
        let (sink_to, rest) = rest.split_at_mut(8);
        let (size, rest) = rest.split_at_mut(4);
        let (source_stag, source_to) = rest.split_at_mut(4);
        sink_stag.copy_from_slice(&self.sink_stag.to_be_bytes());
        sink_to.copy_from_slice(&self.sink_to.to_be_bytes());
        size.copy_from_slice(&self.read_message_size.to_be_bytes());
        source_stag.copy_from_slice(&self.source_stag.to_be_bytes());
        source_to.copy_from_slice(&self.source_to.to_be_bytes());
        a
    }

    /// Decodes 28 octets.
    pub fn from_array(a: [u8; READ_REQUEST_LEN]) -> Self {
        let [k0, k1, k2, k3, t0, t1, t2, t3, t4, t5, t6, t7, z0, z1, z2, z3, s0, s1, s2, s3, o0, o1, o2, o3, o4, o5, o6, o7] =
            a;
        ReadRequest {
            sink_stag: u32::from_be_bytes([k0, k1, k2, k3]),
            sink_to: u64::from_be_bytes([t0, t1, t2, t3, t4, t5, t6, t7]),
            read_message_size: u32::from_be_bytes([z0, z1, z2, z3]),
            source_stag: u32::from_be_bytes([s0, s1, s2, s3]),
            source_to: u64::from_be_bytes([o0, o1, o2, o3, o4, o5, o6, o7]),
        }
    }

    /// Decodes an RDMA Read Request header from `buf`, which must be exactly 28 octets.
    pub fn decode(buf: &[u8]) -> Result<Self, WrongLength> {
        let a: [u8; READ_REQUEST_LEN] = buf.try_into().map_err(|_| WrongLength {
            expected: READ_REQUEST_LEN,
            actual: buf.len(),
        })?;
        Ok(Self::from_array(a))
    }

    /// Writes the 28 octets into the start of `buf`.
    pub fn encode_into(&self, buf: &mut [u8]) -> Result<usize, BufferTooSmall> {
        ddp::write_prefix(buf, &self.to_bytes())
    }

    /// Appends the 28 octets to `out`.
    pub fn append_to(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_bytes());
    }
}

/// A fixed-length field was given a buffer of another length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WrongLength {
    /// The length the field has.
    pub expected: usize,
    /// The length given.
    pub actual: usize,
}

impl fmt::Display for WrongLength {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "expected {} octets, got {}", self.expected, self.actual)
    }
}

impl std::error::Error for WrongLength {}

// ---------------------------------------------------------------------------------------
// Error layers, types and codes
// ---------------------------------------------------------------------------------------

code_table! {
    /// Remote Protection Error codes (RDMAP layer, error type 0x1; RFC 5040 section 7).
    pub enum RemoteProtectionError => description {
        /// 0x00: Invalid STag.
        InvalidStag = 0x00 => "Invalid STag",
        /// 0x01: Base or bounds violation.
        BaseOrBoundsViolation = 0x01 => "Base or bounds violation",
        /// 0x02: Access rights violation.
        AccessRightsViolation = 0x02 => "Access rights violation",
        /// 0x03: STag not associated with RDMAP Stream.
        StagNotAssociated = 0x03 => "STag not associated with RDMAP Stream",
        /// 0x04: TO wrap.
        ToWrap = 0x04 => "TO wrap",
        /// 0x09: STag cannot be Invalidated.
        StagCannotBeInvalidated = 0x09 => "STag cannot be Invalidated",
        /// 0xFF: Unspecified Error.
        Unspecified = 0xFF => "Unspecified Error",
    }
}

code_table! {
    /// Remote Operation Error codes (RDMAP layer, error type 0x2; RFC 5040 section 7).
    pub enum RemoteOperationError => description {
        /// 0x05: Invalid RDMAP version.
        InvalidRdmapVersion = 0x05 => "Invalid RDMAP version",
        /// 0x06: Unexpected OpCode.
        UnexpectedOpcode = 0x06 => "Unexpected OpCode",
        /// 0x07: Catastrophic error, localized to RDMAP Stream.
        CatastrophicLocalized = 0x07 => "Catastrophic error, localized to RDMAP Stream",
        /// 0x08: Catastrophic error, global.
        CatastrophicGlobal = 0x08 => "Catastrophic error, global",
        /// 0x09: STag cannot be Invalidated.
        StagCannotBeInvalidated = 0x09 => "STag cannot be Invalidated",
        /// 0xFF: Unspecified Error.
        Unspecified = 0xFF => "Unspecified Error",
    }
}

/// An RDMAP-layer error (Terminate Layer 0x0) by error type (RFC 5040 section 7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RdmapError {
    /// Error type 0x0: Local Catastrophic Error. It has no specific error codes (the IANA
    /// registry lists it as code "ALL"); a sender uses 0x00, a receiver keeps the code it
    /// got.
    LocalCatastrophic {
        /// The Error Code octet.
        code: u8,
    },
    /// Error type 0x1: Remote Protection Error.
    RemoteProtection(RemoteProtectionError),
    /// Error type 0x2: Remote Operation Error.
    RemoteOperation(RemoteOperationError),
}

impl RdmapError {
    /// A Local Catastrophic Error with error code 0x00.
    pub const LOCAL_CATASTROPHIC: RdmapError = RdmapError::LocalCatastrophic { code: 0 };

    /// The EType nibble.
    pub const fn etype(&self) -> u8 {
        match self {
            RdmapError::LocalCatastrophic { .. } => ETYPE_LOCAL_CATASTROPHIC,
            RdmapError::RemoteProtection(_) => ETYPE_REMOTE_PROTECTION,
            RdmapError::RemoteOperation(_) => ETYPE_REMOTE_OPERATION,
        }
    }

    /// The Error Code octet.
    pub const fn code(&self) -> u8 {
        match self {
            RdmapError::LocalCatastrophic { code } => *code,
            RdmapError::RemoteProtection(e) => e.code(),
            RdmapError::RemoteOperation(e) => e.code(),
        }
    }

    /// The RDMAP error for an (EType, Error Code) pair, `None` if RFC 5040 defines none.
    pub const fn from_etype_code(etype: u8, code: u8) -> Option<Self> {
        match etype {
            ETYPE_LOCAL_CATASTROPHIC => Some(RdmapError::LocalCatastrophic { code }),
            ETYPE_REMOTE_PROTECTION => match RemoteProtectionError::from_code(code) {
                Some(e) => Some(RdmapError::RemoteProtection(e)),
                None => None,
            },
            ETYPE_REMOTE_OPERATION => match RemoteOperationError::from_code(code) {
                Some(e) => Some(RdmapError::RemoteOperation(e)),
                None => None,
            },
            _ => None,
        }
    }

    /// The RFC name of the error type.
    pub const fn etype_description(&self) -> &'static str {
        match self {
            RdmapError::LocalCatastrophic { .. } => "Local Catastrophic Error",
            RdmapError::RemoteProtection(_) => "Remote Protection Error",
            RdmapError::RemoteOperation(_) => "Remote Operation Error",
        }
    }
}

impl fmt::Display for RdmapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RdmapError::LocalCatastrophic { code } => {
                write!(f, "RDMAP {} (code {code:#04x})", self.etype_description())
            }
            RdmapError::RemoteProtection(e) => {
                write!(f, "RDMAP {}: {}", self.etype_description(), e.description())
            }
            RdmapError::RemoteOperation(e) => {
                write!(f, "RDMAP {}: {}", self.etype_description(), e.description())
            }
        }
    }
}

/// The error a Terminate message reports: its (Layer, EType, Error Code) triplet, typed.
///
/// [`TermError::from_triple`] never fails: triplets no RFC defines become
/// [`TermError::Unknown`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TermError {
    /// Layer 0x0: RDMAP (RFC 5040 section 7).
    Rdmap(RdmapError),
    /// Layer 0x1: DDP (RFC 5041 section 7).
    Ddp(DdpError),
    /// Layer 0x2, error type 0x0: MPA (RFC 5044 section 8, RFC 6581 section 8).
    Llp(MpaErrorCode),
    /// A triplet no RFC defines, kept as received. Only the low four bits of `layer`
    /// and `etype` go on the wire.
    Unknown {
        /// The Layer nibble.
        layer: u8,
        /// The EType nibble.
        etype: u8,
        /// The Error Code octet.
        code: u8,
    },
}

impl TermError {
    /// The typed error for a triplet. Layer and EType are 4-bit fields: only their low
    /// four bits are looked at (and kept in [`TermError::Unknown`]).
    pub const fn from_triple(layer: u8, etype: u8, code: u8) -> TermError {
        let layer = layer & 0x0F;
        let etype = etype & 0x0F;
        let known = match layer {
            LAYER_RDMAP => match RdmapError::from_etype_code(etype, code) {
                Some(e) => Some(TermError::Rdmap(e)),
                None => None,
            },
            LAYER_DDP => match DdpError::from_etype_code(etype, code) {
                Some(e) => Some(TermError::Ddp(e)),
                None => None,
            },
            LAYER_LLP if etype == LLP_ETYPE_MPA => match MpaErrorCode::from_code(code) {
                Some(e) => Some(TermError::Llp(e)),
                None => None,
            },
            _ => None,
        };
        match known {
            Some(e) => e,
            None => TermError::Unknown { layer, etype, code },
        }
    }

    /// The Layer nibble.
    pub const fn layer(&self) -> u8 {
        match self {
            TermError::Rdmap(_) => LAYER_RDMAP,
            TermError::Ddp(_) => LAYER_DDP,
            TermError::Llp(_) => LAYER_LLP,
            TermError::Unknown { layer, .. } => *layer,
        }
    }

    /// The EType nibble.
    pub const fn etype(&self) -> u8 {
        match self {
            TermError::Rdmap(e) => e.etype(),
            TermError::Ddp(e) => e.etype(),
            TermError::Llp(_) => LLP_ETYPE_MPA,
            TermError::Unknown { etype, .. } => *etype,
        }
    }

    /// The Error Code octet.
    pub const fn code(&self) -> u8 {
        match self {
            TermError::Rdmap(e) => e.code(),
            TermError::Ddp(e) => e.code(),
            TermError::Llp(e) => e.code(),
            TermError::Unknown { code, .. } => *code,
        }
    }

    /// `(layer, etype, code)`.
    pub const fn triple(&self) -> (u8, u8, u8) {
        (self.layer(), self.etype(), self.code())
    }

    /// False for [`TermError::Unknown`].
    pub const fn is_known(&self) -> bool {
        !matches!(self, TermError::Unknown { .. })
    }

    /// Whether a Terminate for this error quotes the offending segment (DDP Segment
    /// Length, DDP header and, for an RDMA Read Request, its RDMAP header; see
    /// [`Terminate::for_segment`]).
    ///
    /// True for the errors detected on a particular incoming segment: RDMAP Remote
    /// Protection and Remote Operation errors, DDP Tagged and Untagged Buffer errors.
    /// False for Local Catastrophic errors, LLP (MPA) errors, DDP error type 3 and unknown
    /// triplets, for which no header is included (M = D = R = 0).
    pub const fn quotes_segment(&self) -> bool {
        matches!(
            self,
            TermError::Rdmap(RdmapError::RemoteProtection(_) | RdmapError::RemoteOperation(_))
                | TermError::Ddp(DdpError::TaggedBuffer(_) | DdpError::UntaggedBuffer(_))
        )
    }
}

impl From<RdmapError> for TermError {
    fn from(e: RdmapError) -> Self {
        TermError::Rdmap(e)
    }
}

impl From<DdpError> for TermError {
    fn from(e: DdpError) -> Self {
        TermError::Ddp(e)
    }
}

impl From<MpaErrorCode> for TermError {
    fn from(e: MpaErrorCode) -> Self {
        TermError::Llp(e)
    }
}

impl From<RemoteProtectionError> for TermError {
    fn from(e: RemoteProtectionError) -> Self {
        TermError::Rdmap(RdmapError::RemoteProtection(e))
    }
}

impl From<RemoteOperationError> for TermError {
    fn from(e: RemoteOperationError) -> Self {
        TermError::Rdmap(RdmapError::RemoteOperation(e))
    }
}

impl From<ddp::TaggedBufferError> for TermError {
    fn from(e: ddp::TaggedBufferError) -> Self {
        TermError::Ddp(DdpError::TaggedBuffer(e))
    }
}

impl From<UntaggedBufferError> for TermError {
    fn from(e: UntaggedBufferError) -> Self {
        TermError::Ddp(DdpError::UntaggedBuffer(e))
    }
}

impl fmt::Display for TermError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (layer, etype, code) = self.triple();
        match self {
            TermError::Rdmap(e) => write!(f, "{e}")?,
            TermError::Ddp(e) => write!(f, "{e}")?,
            TermError::Llp(e) => write!(f, "LLP {e}")?,
            TermError::Unknown { .. } => f.write_str("unknown Terminate error")?,
        }
        write!(f, " [layer {layer}, etype {etype}, code {code:#04x}]")
    }
}

// ---------------------------------------------------------------------------------------
// Terminate
// ---------------------------------------------------------------------------------------

/// The Terminate header, the payload of a Terminate message (RFC 5040 section 4.8):
///
/// ```text
/// Terminate Control (4):  |Layer (4)|EType (4)|Error Code (8)|M|D|R|Reserved (13)|
/// DDP Segment Length (2)            present when M or D is set
/// Terminated DDP Header (14 or 18)  present when D is set (T bit of its first octet)
/// Terminated RDMAP Header (28)      present when R is set (RDMA Read Request header)
/// ```
///
/// The 16-bit DDP Segment Length follows the control field directly, so the terminated
/// DDP header sits two octets into a word, exactly as in an FPDU (the length takes the
/// place of ULPDU_Length). M says the length is valid; D and R say the headers are there.
/// The length field's presence with M clear and D set, and with M set and D clear, is how
/// Linux siw and Intel irdma lay it out; the encoder writes 0 in it when M is clear.
/// Reserved bits are sent as zero and not checked on receive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Terminate {
    /// The error: Layer, EType and Error Code.
    pub error: TermError,
    /// M: the length of the terminated DDP segment (the ULPDU length), if valid.
    pub ddp_segment_length: Option<u16>,
    /// D: the DDP header of the terminated segment.
    pub ddp_header: Option<DdpHeader>,
    /// R: the RDMAP header of the terminated message (an RDMA Read Request header).
    pub rdmap_header: Option<ReadRequest>,
}

/// A part of a Terminate header after the Terminate Control field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TerminatePart {
    /// The 2-octet DDP Segment Length.
    DdpSegmentLength,
    /// The terminated DDP header (14 or 18 octets).
    DdpHeader,
    /// The terminated RDMAP header (28 octets).
    RdmapHeader,
}

impl TerminatePart {
    /// A short name of the part.
    pub const fn name(self) -> &'static str {
        match self {
            TerminatePart::DdpSegmentLength => "DDP Segment Length",
            TerminatePart::DdpHeader => "terminated DDP header",
            TerminatePart::RdmapHeader => "terminated RDMAP header",
        }
    }
}

/// Why a Terminate header did not decode.
///
/// Except for [`TerminateParseError::TruncatedControl`] the Terminate Control field was
/// there, and the error it reports is available ([`TerminateParseError::error`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TerminateParseError {
    /// Fewer than the 4 octets of the Terminate Control field.
    TruncatedControl {
        /// Octets available.
        available: usize,
    },
    /// A part the Hdrct bits announce is cut short.
    Truncated {
        /// The error the Terminate Control field reports.
        error: TermError,
        /// The part that is cut short.
        part: TerminatePart,
        /// Octets the part needs.
        needed: usize,
        /// Octets left for it.
        available: usize,
    },
    /// Octets follow the last part the Hdrct bits announce.
    TrailingOctets {
        /// The error the Terminate Control field reports.
        error: TermError,
        /// How many octets are left over.
        extra: usize,
    },
}

impl TerminateParseError {
    /// The error the Terminate reports, when its control field was complete.
    pub const fn error(&self) -> Option<TermError> {
        match self {
            TerminateParseError::TruncatedControl { .. } => None,
            TerminateParseError::Truncated { error, .. }
            | TerminateParseError::TrailingOctets { error, .. } => Some(*error),
        }
    }
}

impl fmt::Display for TerminateParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TerminateParseError::TruncatedControl { available } => write!(
                f,
                "Terminate of {available} octets: the Terminate Control field needs 4"
            ),
            TerminateParseError::Truncated {
                error,
                part,
                needed,
                available,
            } => write!(
                f,
                "Terminate ({error}): {} needs {needed} octets, {available} left",
                part.name()
            ),
            TerminateParseError::TrailingOctets { error, extra } => write!(
                f,
                "Terminate ({error}): {extra} octets after the last announced header"
            ),
        }
    }
}

impl std::error::Error for TerminateParseError {}

impl Terminate {
    /// A Terminate for `error` with no header included (M = D = R = 0).
    pub const fn new(error: TermError) -> Terminate {
        Terminate {
            error,
            ddp_segment_length: None,
            ddp_header: None,
            rdmap_header: None,
        }
    }

    /// An LLP-layer Terminate for an MPA error (Layer 2, EType 0, the MPA code), as
    /// RFC 5044 section 8 and RFC 6581 section 8 ask for.
    ///
    /// No header is included (M = D = R = 0): an LLP error is not about a DDP segment the
    /// peer could recognise (a CRC or marker error means the segment cannot be trusted;
    /// the startup errors come before any segment).
    pub const fn llp_mpa(code: MpaErrorCode) -> Terminate {
        Terminate::new(TermError::Llp(code))
    }

    /// The Terminate a receiver sends for `error`, found in the incoming segment `ulpdu`.
    ///
    /// If the error is about that segment ([`TermError::quotes_segment`]) the Terminate
    /// quotes it: M with its length (when it fits 16 bits), D with its DDP header when
    /// that header is complete and of DDP version 1 (for an invalid DDP version the
    /// layout is unknown, so only the length goes), and R with the RDMA Read Request
    /// header when the segment is an untagged RDMAP version 1 RDMA Read Request whose
    /// 28-octet header is all there. Otherwise no header is included.
    pub fn for_segment(error: TermError, ulpdu: &[u8]) -> Terminate {
        let mut t = Terminate::new(error);
        if !error.quotes_segment() {
            return t;
        }
        t.ddp_segment_length = u16::try_from(ulpdu.len()).ok();
        let Ok(header) = DdpHeader::decode(ulpdu) else {
            return t;
        };
        t.ddp_header = Some(header);
        if let DdpHeader::Untagged(h) = header {
            let ctrl = RdmapControl::from_byte(h.rsvd_ulp);
            if ctrl.version == RDMAP_VERSION && ctrl.opcode() == Some(Opcode::RdmaReadRequest) {
                let rr = ulpdu
                    .get(ddp::UNTAGGED_HEADER_LEN..)
                    .and_then(|p| p.split_first_chunk::<READ_REQUEST_LEN>());
                if let Some((rr, _)) = rr {
                    t.rdmap_header = Some(ReadRequest::from_array(*rr));
                }
            }
        }
        t
    }

    /// The Hdrct bits (M, D, R) as they sit in octet 2 of the Terminate Control field.
    pub const fn hdrct(&self) -> u8 {
        let mut b = 0;
        if self.ddp_segment_length.is_some() {
            b |= HDRCT_M;
        }
        if self.ddp_header.is_some() {
            b |= HDRCT_D;
        }
        if self.rdmap_header.is_some() {
            b |= HDRCT_R;
        }
        b
    }

    /// The 4-octet Terminate Control field.
    pub const fn control_bytes(&self) -> [u8; TERMINATE_CONTROL_LEN] {
        let (layer, etype, code) = self.error.triple();
        [
            ((layer & 0x0F) << 4) | (etype & 0x0F),
            code,
            self.hdrct(),
            0,
        ]
    }

    /// The encoded length of the Terminate header.
    pub const fn encoded_len(&self) -> usize {
        let mut n = TERMINATE_CONTROL_LEN;
        if self.ddp_segment_length.is_some() || self.ddp_header.is_some() {
            n += DDP_SEGMENT_LENGTH_LEN;
        }
        if let Some(h) = &self.ddp_header {
            n += h.encoded_len();
        }
        if self.rdmap_header.is_some() {
            n += READ_REQUEST_LEN;
        }
        n
    }

    /// Appends the Terminate header to `out`.
    pub fn append_to(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.control_bytes());
        if self.ddp_segment_length.is_some() || self.ddp_header.is_some() {
            out.extend_from_slice(&self.ddp_segment_length.unwrap_or(0).to_be_bytes());
        }
        if let Some(h) = &self.ddp_header {
            h.append_to(out);
        }
        if let Some(r) = &self.rdmap_header {
            r.append_to(out);
        }
    }

    /// The Terminate header as a new vector.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.encoded_len());
        self.append_to(&mut v);
        v
    }

    /// Writes the Terminate header into the start of `buf` and returns its length.
    pub fn encode_into(&self, buf: &mut [u8]) -> Result<usize, BufferTooSmall> {
        ddp::write_prefix(buf, &self.to_vec())
    }

    /// Decodes a Terminate header (the payload of a Terminate message), strictly: every
    /// part the Hdrct bits announce must be complete and nothing may follow.
    pub fn decode(buf: &[u8]) -> Result<Terminate, TerminateParseError> {
        match Self::decode_lenient(buf)? {
            (t, None) => Ok(t),
            (_, Some(e)) => Err(e),
        }
    }

    /// Decodes a Terminate header liberally: only the 4-octet Terminate Control field is
    /// required. Parts the Hdrct bits announce but that are cut short are left out of the
    /// result (and so are the parts after them), and the first such defect, or octets
    /// after the last part, is returned next to it.
    ///
    /// Real peers need this: Linux siw sets R for Remote Protection errors on Sends and
    /// RDMA Writes without appending the 28-octet RDMAP header.
    pub fn decode_lenient(
        buf: &[u8],
    ) -> Result<(Terminate, Option<TerminateParseError>), TerminateParseError> {
        let Some((ctrl, mut rest)) = buf.split_first_chunk::<TERMINATE_CONTROL_LEN>() else {
            return Err(TerminateParseError::TruncatedControl {
                available: buf.len(),
            });
        };
        let [b0, code, hdrct, _reserved] = *ctrl;
        let error = TermError::from_triple(b0 >> 4, b0 & 0x0F, code);
        let (m, d, r) = (
            hdrct & HDRCT_M != 0,
            hdrct & HDRCT_D != 0,
            hdrct & HDRCT_R != 0,
        );
        let mut t = Terminate::new(error);
        let truncated = |part: TerminatePart, needed: usize, available: usize| {
            Some(TerminateParseError::Truncated {
                error,
                part,
                needed,
                available,
            })
        };

        if m || d {
            let Some((len, tail)) = rest.split_first_chunk::<DDP_SEGMENT_LENGTH_LEN>() else {
                return Ok((
                    t,
                    truncated(
                        TerminatePart::DdpSegmentLength,
                        DDP_SEGMENT_LENGTH_LEN,
                        rest.len(),
                    ),
                ));
            };
            if m {
                t.ddp_segment_length = Some(u16::from_be_bytes(*len));
            }
            rest = tail;
        }
        if d {
            match DdpHeader::decode_any_version(rest) {
                Ok(h) => {
                    t.ddp_header = Some(h);
                    rest = rest.get(h.encoded_len()..).unwrap_or_default();
                }
                Err(_) => {
                    let needed = rest
                        .first()
                        .map_or(1, |&c| ddp::DdpControl::from_byte(c).model().header_len());
                    return Ok((t, truncated(TerminatePart::DdpHeader, needed, rest.len())));
                }
            }
        }
        if r {
            let Some((rr, tail)) = rest.split_first_chunk::<READ_REQUEST_LEN>() else {
                return Ok((
                    t,
                    truncated(TerminatePart::RdmapHeader, READ_REQUEST_LEN, rest.len()),
                ));
            };
            t.rdmap_header = Some(ReadRequest::from_array(*rr));
            rest = tail;
        }
        let defect = (!rest.is_empty()).then_some(TerminateParseError::TrailingOctets {
            error,
            extra: rest.len(),
        });
        Ok((t, defect))
    }
}

impl fmt::Display for Terminate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Terminate: {}", self.error)?;
        if let Some(len) = self.ddp_segment_length {
            write!(f, ", DDP segment length {len}")?;
        }
        if let Some(h) = &self.ddp_header {
            write!(f, ", {} DDP header", h.model())?;
        }
        if self.rdmap_header.is_some() {
            f.write_str(", RDMA Read Request header")?;
        }
        Ok(())
    }
}

/// A complete Terminate ULPDU: an untagged DDP segment on QN 2 with the given MSN, MO 0,
/// L = 1, RDMAP opcode Terminate, and `term` as payload (RFC 5040 section 4.8).
pub fn terminate_ulpdu(term: &Terminate, msn: u32) -> Vec<u8> {
    let header = UntaggedHeader {
        last: true,
        rsvd_ulp: Opcode::Terminate.rdmap_control(),
        rsvd_ulp2: 0,
        qn: QN_TERMINATE,
        msn,
        mo: 0,
    };
    let mut v = Vec::with_capacity(ddp::UNTAGGED_HEADER_LEN + term.encoded_len());
    v.extend_from_slice(&header.to_bytes());
    term.append_to(&mut v);
    v
}

impl DdpParseError {
    /// The Terminate error triplet (layer/type/code) a receiver sends for this, if any:
    /// [`ddp_error`](Self::ddp_error) in the DDP layer.
    pub const fn term_error(&self) -> Option<TermError> {
        match self.ddp_error() {
            Some(e) => Some(TermError::Ddp(e)),
            None => None,
        }
    }
}

// ---------------------------------------------------------------------------------------
// Message-level parse
// ---------------------------------------------------------------------------------------

/// What an RDMAP segment carries, by opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body<'a> {
    /// RDMA Write: `data` goes to the sink buffer `stag` at offset `to`.
    RdmaWrite {
        /// Data Sink STag.
        stag: u32,
        /// Data Sink Tagged Offset of the first octet of `data`.
        to: u64,
        /// The payload.
        data: &'a [u8],
    },
    /// RDMA Read Request.
    ReadRequest(ReadRequest),
    /// RDMA Read Response: `data` goes to the requester's sink buffer.
    ReadResponse {
        /// Data Sink STag.
        stag: u32,
        /// Data Sink Tagged Offset of the first octet of `data`.
        to: u64,
        /// The payload.
        data: &'a [u8],
    },
    /// One of the four Send opcodes.
    Send {
        /// The payload (this segment's part of the message, at the header's MO).
        data: &'a [u8],
        /// The STag to invalidate, for Send with Invalidate and Send with SE and
        /// Invalidate.
        invalidate_stag: Option<u32>,
        /// The sender asks for a Solicited Event.
        solicited_event: bool,
    },
    /// Terminate.
    Terminate {
        /// The Terminate header, as far as it decoded.
        terminate: Terminate,
        /// What was wrong with the part after the Terminate Control field, if anything
        /// (see [`Terminate::decode_lenient`]).
        defect: Option<TerminateParseError>,
    },
}

/// One received DDP segment, validated at the DDP and RDMAP levels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment<'a> {
    /// The DDP header.
    pub header: DdpHeader,
    /// The RDMAP opcode.
    pub opcode: Opcode,
    /// The octets after the DDP header.
    pub payload: &'a [u8],
    /// The payload interpreted by opcode.
    pub body: Body<'a>,
}

/// The zero-length RTR (ready-to-receive) messages of RFC 6581.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RtrKind {
    /// A zero-length Send (Control Flag B).
    Send,
    /// A zero-length RDMA Write (Control Flag C).
    RdmaWrite,
    /// A zero-length RDMA Read Request (Control Flag D).
    RdmaReadRequest,
}

impl Segment<'_> {
    /// The L (last segment) flag.
    pub const fn last(&self) -> bool {
        self.header.last()
    }

    /// The Invalidate STag of a Send with Invalidate or Send with SE and Invalidate.
    pub const fn invalidate_stag(&self) -> Option<u32> {
        match self.body {
            Body::Send {
                invalidate_stag, ..
            } => invalidate_stag,
            _ => None,
        }
    }

    /// Which RFC 6581 zero-length RTR message this is, if it is one: a Send (opcode Send)
    /// with no payload, MO 0 and L = 1; an RDMA Write with no payload and L = 1; or an
    /// RDMA Read Request with RDMA Read Message Size 0.
    pub fn rtr_kind(&self) -> Option<RtrKind> {
        match (&self.body, &self.header) {
            (Body::Send { data, .. }, DdpHeader::Untagged(h))
                if self.opcode == Opcode::Send && data.is_empty() && h.last && h.mo == 0 =>
            {
                Some(RtrKind::Send)
            }
            (Body::RdmaWrite { data, .. }, _) if data.is_empty() && self.header.last() => {
                Some(RtrKind::RdmaWrite)
            }
            (Body::ReadRequest(r), _) if r.read_message_size == 0 => Some(RtrKind::RdmaReadRequest),
            _ => None,
        }
    }
}

/// Why a ULPDU is not a valid RDMAP segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RdmapParseError {
    /// The DDP header is bad (truncated or not DDP version 1).
    Ddp(DdpParseError),
    /// RV is not 1.
    InvalidRdmapVersion {
        /// The RV value received.
        version: u8,
    },
    /// An opcode RFC 5040 does not define (8..=15).
    UnknownOpcode {
        /// The opcode value received.
        opcode: u8,
    },
    /// The opcode does not go with the T bit (a tagged Send, an untagged RDMA Write...).
    UnexpectedOpcode {
        /// The opcode received.
        opcode: Opcode,
        /// The buffer model of the segment.
        model: BufferModel,
    },
    /// An untagged segment on a queue other than its opcode's.
    InvalidQn {
        /// The opcode received.
        opcode: Opcode,
        /// The QN received.
        qn: u32,
    },
    /// An RDMA Read Request segment with MO other than 0.
    ReadRequestInvalidMo {
        /// The MO received.
        mo: u32,
    },
    /// An RDMA Read Request longer than its 28-octet header: more payload, or L = 0
    /// after the full 28 octets.
    ReadRequestTooLong {
        /// The payload length.
        len: usize,
        /// The L flag.
        last: bool,
    },
    /// An RDMA Read Request segment shorter than the 28-octet header.
    ReadRequestTooShort {
        /// The payload length.
        len: usize,
        /// The L flag.
        last: bool,
    },
    /// A Terminate that is not one whole segment (L = 0 or MO other than 0).
    TerminateNotSingleSegment {
        /// The L flag.
        last: bool,
        /// The MO received.
        mo: u32,
    },
    /// A Terminate whose payload lacks even the Terminate Control field.
    MalformedTerminate(TerminateParseError),
}

impl RdmapParseError {
    /// The Terminate error a receiver reports for this, if any:
    ///
    /// | error | Terminate triplet |
    /// |---|---|
    /// | DDP: invalid DDP version | DDP Tagged Buffer 0x04 (T = 1) / Untagged Buffer 0x06 (T = 0) |
    /// | DDP: truncated header | none (RFC 5041 has no code; close the stream) |
    /// | invalid RDMAP version | RDMAP Remote Operation Error 0x05 |
    /// | unknown opcode, opcode not matching T | RDMAP Remote Operation Error 0x06 (Unexpected OpCode) |
    /// | wrong QN for the opcode | DDP Untagged Buffer Error 0x01 (Invalid QN) |
    /// | Read Request with MO != 0 | DDP Untagged Buffer Error 0x04 (Invalid MO) |
    /// | Read Request too long | DDP Untagged Buffer Error 0x05 (message too long for the buffer) |
    /// | Read Request too short | RDMAP Remote Operation Error 0xFF (Unspecified) |
    /// | malformed Terminate | none: a Terminate is never answered with a Terminate |
    pub const fn term_error(&self) -> Option<TermError> {
        match self {
            RdmapParseError::Ddp(e) => e.term_error(),
            RdmapParseError::InvalidRdmapVersion { .. } => Some(TermError::Rdmap(
                RdmapError::RemoteOperation(RemoteOperationError::InvalidRdmapVersion),
            )),
            RdmapParseError::UnknownOpcode { .. } | RdmapParseError::UnexpectedOpcode { .. } => {
                Some(TermError::Rdmap(RdmapError::RemoteOperation(
                    RemoteOperationError::UnexpectedOpcode,
                )))
            }
            RdmapParseError::InvalidQn { .. } => Some(TermError::Ddp(DdpError::UntaggedBuffer(
                UntaggedBufferError::InvalidQn,
            ))),
            RdmapParseError::ReadRequestInvalidMo { .. } => Some(TermError::Ddp(
                DdpError::UntaggedBuffer(UntaggedBufferError::InvalidMo),
            )),
            RdmapParseError::ReadRequestTooLong { .. } => Some(TermError::Ddp(
                DdpError::UntaggedBuffer(UntaggedBufferError::MessageTooLong),
            )),
            RdmapParseError::ReadRequestTooShort { .. } => Some(TermError::Rdmap(
                RdmapError::RemoteOperation(RemoteOperationError::Unspecified),
            )),
            RdmapParseError::TerminateNotSingleSegment { .. }
            | RdmapParseError::MalformedTerminate(_) => None,
        }
    }

    /// The Terminate message (header) a receiver sends for this error found in `ulpdu`,
    /// quoting the segment as [`Terminate::for_segment`] does; `None` when
    /// [`term_error`](Self::term_error) is `None`.
    pub fn terminate(&self, ulpdu: &[u8]) -> Option<Terminate> {
        self.term_error().map(|e| Terminate::for_segment(e, ulpdu))
    }
}

impl From<DdpParseError> for RdmapParseError {
    fn from(e: DdpParseError) -> Self {
        RdmapParseError::Ddp(e)
    }
}

impl fmt::Display for RdmapParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RdmapParseError::Ddp(e) => write!(f, "{e}"),
            RdmapParseError::InvalidRdmapVersion { version } => {
                write!(f, "invalid RDMAP version {version}")
            }
            RdmapParseError::UnknownOpcode { opcode } => {
                write!(f, "unknown RDMAP opcode {opcode:#x}")
            }
            RdmapParseError::UnexpectedOpcode { opcode, model } => {
                write!(f, "opcode {opcode} in a {model} DDP segment")
            }
            RdmapParseError::InvalidQn { opcode, qn } => write!(
                f,
                "opcode {opcode} on QN {qn} (expected QN {})",
                opcode.queue_number().unwrap_or(0)
            ),
            RdmapParseError::ReadRequestInvalidMo { mo } => {
                write!(f, "RDMA Read Request segment with MO {mo}")
            }
            RdmapParseError::ReadRequestTooLong { len, last } => write!(
                f,
                "RDMA Read Request longer than 28 octets (segment payload {len}, L = {})",
                u8::from(*last)
            ),
            RdmapParseError::ReadRequestTooShort { len, last } => write!(
                f,
                "RDMA Read Request segment of {len} octets, shorter than 28 (L = {})",
                u8::from(*last)
            ),
            RdmapParseError::TerminateNotSingleSegment { last, mo } => write!(
                f,
                "Terminate not a single segment (L = {}, MO {mo})",
                u8::from(*last)
            ),
            RdmapParseError::MalformedTerminate(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for RdmapParseError {}

/// Parses one received ULPDU (one DDP segment) and validates it as RDMAP: the whole
/// message-level parse, zero-copy.
///
/// Checks, in order (the first failure is returned):
///
/// 1. the DDP header ([`ddp::parse_ulpdu`]): DDP version 1, long enough for its model;
/// 2. RDMAP version 1;
/// 3. an opcode RFC 5040 defines (0..=7);
/// 4. the opcode's buffer model matches the T bit (RDMA Write and RDMA Read Response
///    tagged, the others untagged);
/// 5. an untagged segment is on its opcode's queue (0 Sends, 1 RDMA Read Request,
///    2 Terminate);
/// 6. an RDMA Read Request is one segment (MO 0, L = 1) with exactly the 28-octet
///    header as payload;
/// 7. a Terminate is one segment (MO 0, L = 1) with at least the 4-octet Terminate
///    Control field; the rest of its header is decoded liberally
///    ([`Terminate::decode_lenient`]) and a defect there is reported in
///    [`Body::Terminate`], not as an error.
///
/// Reserved bits (DDP Rsvd, RDMAP Rsv, the 32-bit RsvdULP of messages other than the
/// Send with Invalidate ones) are not checked. MSN and MO sequencing, STag validity and
/// the like need connection state and are the caller's. Each error names the Terminate
/// error to report ([`RdmapParseError::term_error`]).
pub fn parse_segment(ulpdu: &[u8]) -> Result<Segment<'_>, RdmapParseError> {
    let seg = ddp::parse_ulpdu(ulpdu)?;
    let header = seg.header;
    let payload = seg.payload;

    let ctrl = RdmapControl::from_byte(header.rsvd_ulp());
    if ctrl.version != RDMAP_VERSION {
        return Err(RdmapParseError::InvalidRdmapVersion {
            version: ctrl.version,
        });
    }
    let opcode = ctrl.opcode().ok_or(RdmapParseError::UnknownOpcode {
        opcode: ctrl.opcode,
    })?;
    if opcode.model() != header.model() {
        return Err(RdmapParseError::UnexpectedOpcode {
            opcode,
            model: header.model(),
        });
    }

    let body = match header {
        DdpHeader::Tagged(h) => match opcode {
            Opcode::RdmaWrite => Body::RdmaWrite {
                stag: h.stag,
                to: h.to,
                data: payload,
            },
            // The model check above leaves only the other tagged opcode.
            _ => Body::ReadResponse {
                stag: h.stag,
                to: h.to,
                data: payload,
            },
        },
        DdpHeader::Untagged(h) => {
            if opcode.queue_number() != Some(h.qn) {
                return Err(RdmapParseError::InvalidQn { opcode, qn: h.qn });
            }
            match opcode {
                Opcode::RdmaReadRequest => Body::ReadRequest(parse_read_request(&h, payload)?),
                Opcode::Terminate => {
                    if !h.last || h.mo != 0 {
                        return Err(RdmapParseError::TerminateNotSingleSegment {
                            last: h.last,
                            mo: h.mo,
                        });
                    }
                    let (terminate, defect) = Terminate::decode_lenient(payload)
                        .map_err(RdmapParseError::MalformedTerminate)?;
                    Body::Terminate { terminate, defect }
                }
                _ => Body::Send {
                    data: payload,
                    invalidate_stag: opcode.carries_invalidate_stag().then_some(h.rsvd_ulp2),
                    solicited_event: opcode.solicited_event(),
                },
            }
        }
    };
    Ok(Segment {
        header,
        opcode,
        payload,
        body,
    })
}

/// The RDMA Read Request checks of [`parse_segment`] (step 6).
fn parse_read_request(h: &UntaggedHeader, payload: &[u8]) -> Result<ReadRequest, RdmapParseError> {
    if h.mo != 0 {
        return Err(RdmapParseError::ReadRequestInvalidMo { mo: h.mo });
    }
    let len = payload.len();
    if len > READ_REQUEST_LEN || (len == READ_REQUEST_LEN && !h.last) {
        return Err(RdmapParseError::ReadRequestTooLong { len, last: h.last });
    }
    match payload.split_first_chunk::<READ_REQUEST_LEN>() {
        Some((a, _)) => Ok(ReadRequest::from_array(*a)),
        None => Err(RdmapParseError::ReadRequestTooShort { len, last: h.last }),
    }
}

// ---------------------------------------------------------------------------------------
// RFC 6581 zero-length RTR messages and other whole ULPDUs
// ---------------------------------------------------------------------------------------

/// An RDMA Read Request ULPDU: untagged, QN 1, the given MSN, MO 0, L = 1, `req` as
/// payload (46 octets).
pub fn read_request_ulpdu(msn: u32, req: &ReadRequest) -> Vec<u8> {
    let mut v = Vec::with_capacity(ddp::UNTAGGED_HEADER_LEN + READ_REQUEST_LEN);
    append_read_request_ulpdu(&mut v, msn, req);
    v
}

/// Appends the RDMA Read Request ULPDU of [`read_request_ulpdu`] to `out`.
pub fn append_read_request_ulpdu(out: &mut Vec<u8>, msn: u32, req: &ReadRequest) {
    let header = UntaggedHeader {
        last: true,
        rsvd_ulp: Opcode::RdmaReadRequest.rdmap_control(),
        rsvd_ulp2: 0,
        qn: QN_READ_REQUEST,
        msn,
        mo: 0,
    };
    out.extend_from_slice(&header.to_bytes());
    req.append_to(out);
}

/// The RFC 6581 zero-length Send RTR: untagged, QN 0, the given MSN, MO 0, L = 1, opcode
/// Send, no payload (18 octets).
pub fn zero_length_send(msn: u32) -> Vec<u8> {
    UntaggedHeader {
        last: true,
        rsvd_ulp: Opcode::Send.rdmap_control(),
        rsvd_ulp2: 0,
        qn: QN_SEND,
        msn,
        mo: 0,
    }
    .to_bytes()
    .to_vec()
}

/// The RFC 6581 zero-length RDMA Write RTR: tagged, the given STag, TO 0, L = 1, no
/// payload (14 octets). Use a non-zero STag: some peers (Chelsio) reject tagged segments
/// with STag 0; Linux siw sends STag 1.
pub fn zero_length_write(stag: u32) -> Vec<u8> {
    TaggedHeader {
        last: true,
        rsvd_ulp: Opcode::RdmaWrite.rdmap_control(),
        stag,
        to: 0,
    }
    .to_bytes()
    .to_vec()
}

/// The RFC 6581 zero-length RDMA Read Request RTR: untagged, QN 1, the given MSN, MO 0,
/// L = 1, a Read Request header with the given STags and TOs and RDMA Read Message Size 0
/// (46 octets).
pub fn zero_length_read_request(
    msn: u32,
    sink_stag: u32,
    sink_to: u64,
    source_stag: u32,
    source_to: u64,
) -> Vec<u8> {
    read_request_ulpdu(
        msn,
        &ReadRequest {
            sink_stag,
            sink_to,
            read_message_size: 0,
            source_stag,
            source_to,
        },
    )
}

/// The zero-length RDMA Read Response answering `req`: tagged, the request's Data Sink
/// STag and TO, L = 1, no payload (14 octets).
pub fn zero_length_read_response(req: &ReadRequest) -> Vec<u8> {
    TaggedHeader {
        last: true,
        rsvd_ulp: Opcode::RdmaReadResponse.rdmap_control(),
        stag: req.sink_stag,
        to: req.sink_to,
    }
    .to_bytes()
    .to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ddp::TaggedBufferError;
    use proptest::prelude::*;

    fn untagged(
        opcode_byte: u8,
        rsvd_ulp2: u32,
        qn: u32,
        msn: u32,
        mo: u32,
        last: bool,
    ) -> Vec<u8> {
        UntaggedHeader {
            last,
            rsvd_ulp: opcode_byte,
            rsvd_ulp2,
            qn,
            msn,
            mo,
        }
        .to_bytes()
        .to_vec()
    }

    fn tagged(opcode_byte: u8, stag: u32, to: u64, last: bool) -> Vec<u8> {
        TaggedHeader {
            last,
            rsvd_ulp: opcode_byte,
            stag,
            to,
        }
        .to_bytes()
        .to_vec()
    }

    use crate::hex;

    #[test]
    fn opcode_table() {
        let names = [
            "rdma_write",
            "rdma_read_request",
            "rdma_read_response",
            "send",
            "send_with_invalidate",
            "send_with_se",
            "send_with_se_and_invalidate",
            "terminate",
        ];
        for (i, op) in Opcode::ALL.iter().enumerate() {
            assert_eq!(op.code() as usize, i);
            assert_eq!(Opcode::from_code(i as u8), Some(*op));
            assert_eq!(op.name(), names[i]);
            assert_eq!(op.to_string(), names[i]);
            assert_eq!(op.rdmap_control(), 0x40 | i as u8);
        }
        for c in 8..=255u8 {
            assert_eq!(Opcode::from_code(c), None);
        }
        use BufferModel::*;
        let expect = [
            (Tagged, None),
            (Untagged, Some(1)),
            (Tagged, None),
            (Untagged, Some(0)),
            (Untagged, Some(0)),
            (Untagged, Some(0)),
            (Untagged, Some(0)),
            (Untagged, Some(2)),
        ];
        for (op, (model, qn)) in Opcode::ALL.iter().zip(expect) {
            assert_eq!(op.model(), model, "{op}");
            assert_eq!(op.queue_number(), qn, "{op}");
            assert_eq!(op.is_tagged(), model == Tagged);
        }
        let inval: Vec<_> = Opcode::ALL
            .iter()
            .filter(|o| o.carries_invalidate_stag())
            .collect();
        assert_eq!(
            inval,
            [
                &Opcode::SendWithInvalidate,
                &Opcode::SendWithSeAndInvalidate
            ]
        );
        let se: Vec<_> = Opcode::ALL.iter().filter(|o| o.solicited_event()).collect();
        assert_eq!(se, [&Opcode::SendWithSe, &Opcode::SendWithSeAndInvalidate]);
        assert_eq!(Opcode::ALL.iter().filter(|o| o.is_send()).count(), 4);
    }

    #[test]
    fn rdmap_control_bits() {
        let c = RdmapControl::from_byte(0x43);
        assert_eq!(
            c,
            RdmapControl {
                version: 1,
                reserved: 0,
                opcode: 3
            }
        );
        assert_eq!(c.opcode(), Some(Opcode::Send));
        assert_eq!(RdmapControl::new(Opcode::Terminate).to_byte(), 0x47);
        for b in 0..=255u8 {
            assert_eq!(RdmapControl::from_byte(b).to_byte(), b);
        }
    }

    #[test]
    fn header_builders() {
        assert_eq!(tagged_header(Opcode::Send, 1, 0, true), None);
        assert_eq!(untagged_header(Opcode::RdmaWrite, 0, 1, 0, true), None);
        assert_eq!(
            tagged_header(Opcode::RdmaReadResponse, 5, 6, false)
                .unwrap()
                .to_vec(),
            hex("81 42 00000005 0000000000000006")
        );
        assert_eq!(
            untagged_header(Opcode::SendWithSeAndInvalidate, 0xAABBCCDD, 7, 100, false)
                .unwrap()
                .to_vec(),
            hex("01 46 AABBCCDD 00000000 00000007 00000064")
        );
        assert_eq!(
            untagged_header(Opcode::Terminate, 0, 1, 0, true)
                .unwrap()
                .to_vec()[6..10],
            [0, 0, 0, 2]
        );
    }

    #[test]
    fn siw_zero_length_write_rtr() {
        let bytes = hex("c1 40 00 00 00 01 00 00 00 00 00 00 00 00");
        assert_eq!(zero_length_write(1), bytes);
        let seg = parse_segment(&bytes).unwrap();
        assert_eq!(seg.opcode, Opcode::RdmaWrite);
        assert_eq!(
            seg.body,
            Body::RdmaWrite {
                stag: 1,
                to: 0,
                data: &[]
            }
        );
        assert_eq!(seg.rtr_kind(), Some(RtrKind::RdmaWrite));
        assert!(seg.last());
    }

    #[test]
    fn siw_first_send() {
        let mut bytes = hex("41 43 00000000 00000000 00000001 00000000");
        bytes.extend_from_slice(b"ping");
        let seg = parse_segment(&bytes).unwrap();
        assert_eq!(seg.opcode, Opcode::Send);
        assert_eq!(
            seg.body,
            Body::Send {
                data: b"ping",
                invalidate_stag: None,
                solicited_event: false
            }
        );
        assert_eq!(seg.payload, b"ping");
        assert_eq!(seg.rtr_kind(), None);
        assert_eq!(seg.invalidate_stag(), None);
    }

    #[test]
    fn zero_length_rtr_messages() {
        let send = zero_length_send(1);
        assert_eq!(send, hex("41 43 00000000 00000000 00000001 00000000"));
        assert_eq!(
            parse_segment(&send).unwrap().rtr_kind(),
            Some(RtrKind::Send)
        );

        let rreq = zero_length_read_request(1, 0x11, 0x22, 0x33, 0x44);
        assert_eq!(
            rreq,
            hex("41 41 00000000 00000001 00000001 00000000
                 00000011 0000000000000022 00000000 00000033 0000000000000044")
        );
        let seg = parse_segment(&rreq).unwrap();
        assert_eq!(seg.rtr_kind(), Some(RtrKind::RdmaReadRequest));
        let Body::ReadRequest(req) = seg.body else {
            panic!("not a read request")
        };
        assert_eq!(
            req,
            ReadRequest {
                sink_stag: 0x11,
                sink_to: 0x22,
                read_message_size: 0,
                source_stag: 0x33,
                source_to: 0x44
            }
        );
        let resp = zero_length_read_response(&req);
        assert_eq!(resp, hex("c1 42 00000011 0000000000000022"));
        let seg = parse_segment(&resp).unwrap();
        assert_eq!(
            seg.body,
            Body::ReadResponse {
                stag: 0x11,
                to: 0x22,
                data: &[]
            }
        );
        assert_eq!(seg.rtr_kind(), None);

        // Not RTRs: a Send with data, a Send with SE, a non-last empty Send, a Write
        // with data, a Read Request for data.
        let mut s = zero_length_send(1);
        s.push(0);
        assert_eq!(parse_segment(&s).unwrap().rtr_kind(), None);
        let s = untagged(0x45, 0, 0, 1, 0, true);
        assert_eq!(parse_segment(&s).unwrap().rtr_kind(), None);
        let s = untagged(0x43, 0, 0, 1, 0, false);
        assert_eq!(parse_segment(&s).unwrap().rtr_kind(), None);
        let mut w = zero_length_write(1);
        w.push(0);
        assert_eq!(parse_segment(&w).unwrap().rtr_kind(), None);
        let w = tagged(0x40, 1, 0, false);
        assert_eq!(parse_segment(&w).unwrap().rtr_kind(), None);
        let r = read_request_ulpdu(
            1,
            &ReadRequest {
                read_message_size: 1,
                ..ReadRequest::default()
            },
        );
        assert_eq!(parse_segment(&r).unwrap().rtr_kind(), None);
    }

    #[test]
    fn every_opcode_parses() {
        let w = tagged(0x40, 9, 10, false);
        let mut w2 = w.clone();
        w2.extend_from_slice(b"abc");
        assert_eq!(
            parse_segment(&w2).unwrap().body,
            Body::RdmaWrite {
                stag: 9,
                to: 10,
                data: b"abc"
            }
        );
        let mut rr = tagged(0x42, 9, 10, true);
        rr.extend_from_slice(b"xyz");
        assert_eq!(
            parse_segment(&rr).unwrap().body,
            Body::ReadResponse {
                stag: 9,
                to: 10,
                data: b"xyz"
            }
        );
        for (op, inval, se) in [
            (Opcode::Send, false, false),
            (Opcode::SendWithInvalidate, true, false),
            (Opcode::SendWithSe, false, true),
            (Opcode::SendWithSeAndInvalidate, true, true),
        ] {
            let mut b = untagged(op.rdmap_control(), 0x1234_5678, 0, 3, 4096, false);
            b.extend_from_slice(b"data");
            let seg = parse_segment(&b).unwrap();
            assert_eq!(seg.opcode, op);
            assert_eq!(
                seg.body,
                Body::Send {
                    data: b"data",
                    invalidate_stag: inval.then_some(0x1234_5678),
                    solicited_event: se
                }
            );
            assert_eq!(seg.invalidate_stag(), inval.then_some(0x1234_5678));
            assert!(!seg.last());
        }
        let t = terminate_ulpdu(&Terminate::llp_mpa(MpaErrorCode::CrcMismatch), 1);
        let seg = parse_segment(&t).unwrap();
        assert_eq!(seg.opcode, Opcode::Terminate);
        assert_eq!(
            seg.body,
            Body::Terminate {
                terminate: Terminate::llp_mpa(MpaErrorCode::CrcMismatch),
                defect: None
            }
        );
        assert_eq!(seg.invalidate_stag(), None);
        assert_eq!(seg.rtr_kind(), None);
    }

    #[test]
    fn reserved_bits_are_not_checked() {
        // DDP Rsvd, RDMAP Rsv and the RsvdULP word of a plain Send all set.
        let mut b = untagged(0x43 | CTRL_RSVD_MASK, 0xFFFF_FFFF, 0, 1, 0, true);
        b[0] |= ddp::CTRL_RSVD_MASK;
        let seg = parse_segment(&b).unwrap();
        assert_eq!(
            seg.body,
            Body::Send {
                data: &[],
                invalidate_stag: None,
                solicited_event: false
            }
        );
    }

    fn triple_of(e: &RdmapParseError) -> Option<(u8, u8, u8)> {
        e.term_error().map(|t| t.triple())
    }

    #[test]
    fn ddp_errors_pass_through() {
        let e = parse_segment(&[]).unwrap_err();
        assert!(matches!(
            e,
            RdmapParseError::Ddp(DdpParseError::Truncated { .. })
        ));
        assert_eq!(e.term_error(), None);
        assert_eq!(e.terminate(&[]), None);
        let e = parse_segment(&[0xC1, 0x40, 0, 0]).unwrap_err();
        assert_eq!(triple_of(&e), None);

        let bad_tagged = hex("c2 40 00000001 0000000000000000");
        let e = parse_segment(&bad_tagged).unwrap_err();
        assert_eq!(triple_of(&e), Some((1, 1, 0x04)));
        let bad_untagged = hex("40 43 00000000 00000000 00000001 00000000");
        let e = parse_segment(&bad_untagged).unwrap_err();
        assert_eq!(triple_of(&e), Some((1, 2, 0x06)));
        // The layout of a bad-version segment is unknown: only its length is quoted.
        let t = e.terminate(&bad_untagged).unwrap();
        assert_eq!(t.ddp_segment_length, Some(18));
        assert_eq!(t.ddp_header, None);
        assert_eq!(t.rdmap_header, None);
        assert_eq!(
            t.to_vec(),
            hex("12 06 80 00 0012"),
            "M only: control and the 2-octet length"
        );
    }

    #[test]
    fn invalid_rdmap_version() {
        for rv in [0u8, 2, 3] {
            let b = untagged((rv << 6) | 3, 0, 0, 1, 0, true);
            let e = parse_segment(&b).unwrap_err();
            assert_eq!(e, RdmapParseError::InvalidRdmapVersion { version: rv });
            assert_eq!(triple_of(&e), Some((0, 2, 0x05)));
            assert!(e.to_string().contains("RDMAP version"));
        }
    }

    #[test]
    fn unknown_and_unexpected_opcodes() {
        for op in 8..=15u8 {
            let b = untagged(0x40 | op, 0, 0, 1, 0, true);
            let e = parse_segment(&b).unwrap_err();
            assert_eq!(e, RdmapParseError::UnknownOpcode { opcode: op });
            assert_eq!(triple_of(&e), Some((0, 2, 0x06)));
        }
        for op in Opcode::ALL {
            let wrong = if op.is_tagged() {
                untagged(op.rdmap_control(), 0, 0, 1, 0, true)
            } else {
                tagged(op.rdmap_control(), 1, 0, true)
            };
            let e = parse_segment(&wrong).unwrap_err();
            assert_eq!(
                e,
                RdmapParseError::UnexpectedOpcode {
                    opcode: op,
                    model: if op.is_tagged() {
                        BufferModel::Untagged
                    } else {
                        BufferModel::Tagged
                    }
                }
            );
            assert_eq!(triple_of(&e), Some((0, 2, 0x06)));
            assert!(e.to_string().contains(op.name()));
        }
    }

    #[test]
    fn invalid_qn() {
        for op in Opcode::ALL.iter().filter(|o| !o.is_tagged()) {
            for qn in [0u32, 1, 2, 3, 0xFFFF_FFFF] {
                if op.queue_number() == Some(qn) {
                    continue;
                }
                let mut b = untagged(op.rdmap_control(), 0, qn, 1, 0, true);
                b.extend_from_slice(&[0; 28]);
                let e = parse_segment(&b).unwrap_err();
                assert_eq!(e, RdmapParseError::InvalidQn { opcode: *op, qn });
                assert_eq!(triple_of(&e), Some((1, 2, 0x01)));
                assert!(e.to_string().contains("QN"));
                // The Terminate quotes the DDP header and the segment length.
                let t = e.terminate(&b).unwrap();
                assert_eq!(t.ddp_segment_length, Some(b.len() as u16));
                assert_eq!(t.ddp_header, Some(DdpHeader::decode(&b).unwrap()));
            }
        }
    }

    #[test]
    fn read_request_shape_errors() {
        let body = ReadRequest::default().to_bytes();
        let with = |mo: u32, last: bool, payload: &[u8]| {
            let mut b = untagged(0x41, 0, 1, 1, mo, last);
            b.extend_from_slice(payload);
            b
        };
        let e = parse_segment(&with(4, true, &body)).unwrap_err();
        assert_eq!(e, RdmapParseError::ReadRequestInvalidMo { mo: 4 });
        assert_eq!(triple_of(&e), Some((1, 2, 0x04)));

        let mut long = body.to_vec();
        long.push(0);
        let e = parse_segment(&with(0, true, &long)).unwrap_err();
        assert_eq!(
            e,
            RdmapParseError::ReadRequestTooLong {
                len: 29,
                last: true
            }
        );
        assert_eq!(triple_of(&e), Some((1, 2, 0x05)));
        let e = parse_segment(&with(0, false, &body)).unwrap_err();
        assert_eq!(
            e,
            RdmapParseError::ReadRequestTooLong {
                len: 28,
                last: false
            }
        );
        assert_eq!(triple_of(&e), Some((1, 2, 0x05)));

        let e = parse_segment(&with(0, true, &body[..27])).unwrap_err();
        assert_eq!(
            e,
            RdmapParseError::ReadRequestTooShort {
                len: 27,
                last: true
            }
        );
        assert_eq!(triple_of(&e), Some((0, 2, 0xFF)));
        let e = parse_segment(&with(0, false, &[])).unwrap_err();
        assert_eq!(
            e,
            RdmapParseError::ReadRequestTooShort {
                len: 0,
                last: false
            }
        );
        for e in [
            RdmapParseError::ReadRequestInvalidMo { mo: 1 },
            RdmapParseError::ReadRequestTooLong {
                len: 29,
                last: true,
            },
            RdmapParseError::ReadRequestTooShort { len: 1, last: true },
        ] {
            assert!(e.to_string().contains("Read Request"));
        }
    }

    #[test]
    fn terminate_segment_errors() {
        let payload = Terminate::llp_mpa(MpaErrorCode::TcpClosed).to_vec();
        for (last, mo) in [(false, 0u32), (true, 8), (false, 8)] {
            let mut b = untagged(0x47, 0, 2, 1, mo, last);
            b.extend_from_slice(&payload);
            let e = parse_segment(&b).unwrap_err();
            assert_eq!(e, RdmapParseError::TerminateNotSingleSegment { last, mo });
            assert_eq!(e.term_error(), None);
            assert!(e.to_string().contains("Terminate"));
        }
        let mut b = untagged(0x47, 0, 2, 1, 0, true);
        b.extend_from_slice(&[0x20, 0x02, 0x00]);
        let e = parse_segment(&b).unwrap_err();
        assert_eq!(
            e,
            RdmapParseError::MalformedTerminate(TerminateParseError::TruncatedControl {
                available: 3
            })
        );
        assert_eq!(e.term_error(), None);
        assert_eq!(e.terminate(&b), None);
        // A Terminate with a defect after the control field still parses, with the defect.
        let mut b = untagged(0x47, 0, 2, 1, 0, true);
        b.extend_from_slice(&[0x01, 0x01, 0xE0, 0x00, 0x00]);
        let seg = parse_segment(&b).unwrap();
        let Body::Terminate { terminate, defect } = seg.body else {
            panic!("not a terminate")
        };
        assert_eq!(
            terminate.error,
            TermError::Rdmap(RdmapError::RemoteProtection(
                RemoteProtectionError::BaseOrBoundsViolation
            ))
        );
        assert!(matches!(
            defect,
            Some(TerminateParseError::Truncated {
                part: TerminatePart::DdpSegmentLength,
                ..
            })
        ));
    }

    #[test]
    fn term_error_triples() {
        let mut known = Vec::new();
        for code in 0..=255u8 {
            known.push(TermError::Rdmap(RdmapError::LocalCatastrophic { code }));
            known.push(TermError::Ddp(DdpError::LocalCatastrophic { code }));
            known.push(TermError::Ddp(DdpError::ReservedForLlp { code }));
        }
        known.extend(RemoteProtectionError::ALL.map(TermError::from));
        known.extend(RemoteOperationError::ALL.map(TermError::from));
        known.extend(TaggedBufferError::ALL.map(TermError::from));
        known.extend(UntaggedBufferError::ALL.map(TermError::from));
        known.extend((1..=7).map(|c| TermError::from(MpaErrorCode::from_code(c).unwrap())));
        for e in &known {
            let (l, t, c) = e.triple();
            assert_eq!(TermError::from_triple(l, t, c), *e);
            assert!(e.is_known());
        }
        // Exactly the triplets above are known.
        let mut count = 0;
        for l in 0..16u8 {
            for t in 0..16u8 {
                for c in 0..=255u8 {
                    let e = TermError::from_triple(l, t, c);
                    assert_eq!(e.triple(), (l, t, c));
                    if e.is_known() {
                        count += 1;
                    } else {
                        assert_eq!(
                            e,
                            TermError::Unknown {
                                layer: l,
                                etype: t,
                                code: c
                            }
                        );
                    }
                }
            }
        }
        assert_eq!(count, known.len());
        // Spot checks against RFC 5040 section 7 / RFC 5041 section 7.2.
        assert_eq!(
            TermError::from(RemoteOperationError::InvalidRdmapVersion).triple(),
            (0, 2, 0x05)
        );
        assert_eq!(
            TermError::from(RemoteOperationError::UnexpectedOpcode).triple(),
            (0, 2, 0x06)
        );
        assert_eq!(
            TermError::from(RemoteProtectionError::StagCannotBeInvalidated).triple(),
            (0, 1, 0x09)
        );
        assert_eq!(
            TermError::from(UntaggedBufferError::InvalidQn).triple(),
            (1, 2, 1)
        );
        assert_eq!(
            TermError::from(TaggedBufferError::InvalidDdpVersion).triple(),
            (1, 1, 4)
        );
        assert_eq!(
            TermError::from(MpaErrorCode::NoMatchingRtr).triple(),
            (2, 0, 7)
        );
        assert_eq!(
            TermError::from_triple(2, 1, 1),
            TermError::Unknown {
                layer: 2,
                etype: 1,
                code: 1
            }
        );
        assert_eq!(
            TermError::from_triple(0x12, 0x10, 2),
            TermError::from_triple(2, 0, 2)
        );
        assert!(!TermError::from_triple(2, 0, 0).is_known());
    }

    #[test]
    fn term_error_display() {
        assert_eq!(
            TermError::from(RemoteOperationError::InvalidRdmapVersion).to_string(),
            "RDMAP Remote Operation Error: Invalid RDMAP version [layer 0, etype 2, code 0x05]"
        );
        assert_eq!(
            TermError::from(RemoteProtectionError::InvalidStag).to_string(),
            "RDMAP Remote Protection Error: Invalid STag [layer 0, etype 1, code 0x00]"
        );
        assert_eq!(
            TermError::Rdmap(RdmapError::LOCAL_CATASTROPHIC).to_string(),
            "RDMAP Local Catastrophic Error (code 0x00) [layer 0, etype 0, code 0x00]"
        );
        assert_eq!(
            TermError::from(UntaggedBufferError::MessageTooLong).to_string(),
            "DDP Untagged Buffer Error: DDP Message too long for available buffer \
             [layer 1, etype 2, code 0x05]"
        );
        assert_eq!(
            TermError::from(MpaErrorCode::CrcMismatch).to_string(),
            "LLP MPA error 2: FPDU CRC mismatch [layer 2, etype 0, code 0x02]"
        );
        assert_eq!(
            TermError::from_triple(5, 6, 7).to_string(),
            "unknown Terminate error [layer 5, etype 6, code 0x07]"
        );
        for e in RemoteOperationError::ALL {
            assert!(TermError::from(e).to_string().contains(e.description()));
        }
        for e in RemoteProtectionError::ALL {
            assert!(TermError::from(e).to_string().contains(e.description()));
        }
    }

    #[test]
    fn terminate_llp_bytes() {
        let t = Terminate::llp_mpa(MpaErrorCode::CrcMismatch);
        assert_eq!(t.hdrct(), 0);
        assert_eq!(t.to_vec(), hex("20 02 00 00"));
        assert_eq!(t.encoded_len(), 4);
        assert_eq!(
            terminate_ulpdu(&t, 1),
            hex("41 47 00000000 00000002 00000001 00000000 20 02 00 00")
        );
        assert_eq!(
            terminate_ulpdu(&Terminate::llp_mpa(MpaErrorCode::InsufficientIrd), 7),
            hex("41 47 00000000 00000002 00000007 00000000 20 06 00 00")
        );
        assert_eq!(Terminate::decode(&hex("20 02 00 00")), Ok(t));
        // Reserved bits are ignored on receive.
        assert_eq!(Terminate::decode(&hex("20 02 1F FF")), Ok(t));
        assert!(t.to_string().contains("FPDU CRC mismatch"));
    }

    #[test]
    fn terminate_with_all_headers_bytes() {
        let rreq_ulpdu = read_request_ulpdu(
            5,
            &ReadRequest {
                sink_stag: 0x0A,
                sink_to: 0x0B,
                read_message_size: 0x0C,
                source_stag: 0x0D,
                source_to: 0x0E,
            },
        );
        let t = Terminate::for_segment(
            TermError::from(RemoteProtectionError::AccessRightsViolation),
            &rreq_ulpdu,
        );
        assert_eq!(t.hdrct(), HDRCT_M | HDRCT_D | HDRCT_R);
        let bytes = t.to_vec();
        let expect = hex("01 02 E0 00  002E
             41 41 00000000 00000001 00000005 00000000
             0000000A 000000000000000B 0000000C 0000000D 000000000000000E");
        assert_eq!(bytes, expect);
        assert_eq!(t.encoded_len(), TERMINATE_MAX_LEN);
        assert_eq!(Terminate::decode(&bytes), Ok(t));
        assert!(t.to_string().contains("RDMA Read Request header"));
        let mut buf = [0u8; TERMINATE_MAX_LEN];
        assert_eq!(t.encode_into(&mut buf), Ok(TERMINATE_MAX_LEN));
        assert_eq!(buf.to_vec(), expect);
        assert_eq!(
            t.encode_into(&mut [0u8; 51]),
            Err(BufferTooSmall {
                needed: 52,
                available: 51
            })
        );
    }

    #[test]
    fn terminate_for_segment_header_choice() {
        let mut send = untagged(0x43, 0, 0, 9, 0, true);
        send.extend_from_slice(b"payload");
        let h = DdpHeader::decode(&send).unwrap();
        // Segment errors quote M and D; no R for a Send.
        let t = Terminate::for_segment(UntaggedBufferError::InvalidMsnRange.into(), &send);
        assert_eq!(t.ddp_segment_length, Some(25));
        assert_eq!(t.ddp_header, Some(h));
        assert_eq!(t.rdmap_header, None);
        assert_eq!(t.hdrct(), HDRCT_M | HDRCT_D);
        assert_eq!(Terminate::decode(&t.to_vec()), Ok(t));
        // Tagged segment.
        let w = tagged(0x40, 3, 4, true);
        let t = Terminate::for_segment(TaggedBufferError::InvalidStag.into(), &w);
        assert_eq!(t.ddp_header, Some(DdpHeader::decode(&w).unwrap()));
        assert_eq!(t.encoded_len(), 4 + 2 + 14);
        assert_eq!(Terminate::decode(&t.to_vec()), Ok(t));
        // Errors not about a segment quote nothing.
        for e in [
            TermError::Rdmap(RdmapError::LOCAL_CATASTROPHIC),
            TermError::Ddp(DdpError::LOCAL_CATASTROPHIC),
            TermError::Ddp(DdpError::ReservedForLlp { code: 1 }),
            TermError::Llp(MpaErrorCode::MarkerMismatch),
            TermError::from_triple(9, 9, 9),
        ] {
            assert!(!e.quotes_segment());
            assert_eq!(Terminate::for_segment(e, &send), Terminate::new(e));
        }
        // A segment too long for the 16-bit length: D without M, length field 0.
        let mut huge = untagged(0x43, 0, 0, 1, 0, false);
        huge.resize(70_000, 0);
        let t = Terminate::for_segment(UntaggedBufferError::MessageTooLong.into(), &huge);
        assert_eq!(t.ddp_segment_length, None);
        assert!(t.ddp_header.is_some());
        assert_eq!(t.hdrct(), HDRCT_D);
        assert_eq!(&t.to_vec()[2..6], &[HDRCT_D, 0, 0, 0]);
        assert_eq!(Terminate::decode(&t.to_vec()), Ok(t));
        // A Read Request with an RDMAP version error: D but no R.
        let mut bad = read_request_ulpdu(1, &ReadRequest::default());
        bad[1] = 0x81;
        let e = parse_segment(&bad).unwrap_err();
        let t = e.terminate(&bad).unwrap();
        assert!(t.ddp_header.is_some());
        assert_eq!(t.rdmap_header, None);
        // A too-short Read Request: D but no R.
        let short = &read_request_ulpdu(1, &ReadRequest::default())[..40];
        let e = parse_segment(short).unwrap_err();
        let t = e.terminate(short).unwrap();
        assert_eq!(t.error.triple(), (0, 2, 0xFF));
        assert!(t.ddp_header.is_some());
        assert_eq!(t.rdmap_header, None);
    }

    #[test]
    fn terminate_decode_errors() {
        assert_eq!(
            Terminate::decode(&[0x20, 0x01]),
            Err(TerminateParseError::TruncatedControl { available: 2 })
        );
        assert_eq!(
            Terminate::decode_lenient(&[]),
            Err(TerminateParseError::TruncatedControl { available: 0 })
        );
        let err = TermError::from(UntaggedBufferError::InvalidQn);
        // M set, length cut short.
        let e = Terminate::decode(&hex("12 01 80 00 00")).unwrap_err();
        assert_eq!(
            e,
            TerminateParseError::Truncated {
                error: err,
                part: TerminatePart::DdpSegmentLength,
                needed: 2,
                available: 1
            }
        );
        assert_eq!(e.error(), Some(err));
        assert!(e.to_string().contains("DDP Segment Length"));
        // D set, header cut short (untagged by its T bit).
        let e = Terminate::decode(&hex("12 01 C0 00 0012 41 43 00")).unwrap_err();
        assert_eq!(
            e,
            TerminateParseError::Truncated {
                error: err,
                part: TerminatePart::DdpHeader,
                needed: 18,
                available: 3
            }
        );
        // D set, nothing after the length.
        let e = Terminate::decode(&hex("12 01 C0 00 0012")).unwrap_err();
        assert!(matches!(
            e,
            TerminateParseError::Truncated {
                part: TerminatePart::DdpHeader,
                needed: 1,
                available: 0,
                ..
            }
        ));
        // R set, RDMAP header cut short.
        let mut b = hex("01 00 E0 00 002E");
        b.extend_from_slice(&read_request_ulpdu(1, &ReadRequest::default())[..40]);
        let e = Terminate::decode(&b).unwrap_err();
        assert!(matches!(
            e,
            TerminateParseError::Truncated {
                part: TerminatePart::RdmapHeader,
                needed: 28,
                available: 22,
                ..
            }
        ));
        assert!(e.to_string().contains("RDMAP header"));
        // Trailing octets.
        let e = Terminate::decode(&hex("20 01 00 00 00")).unwrap_err();
        assert_eq!(
            e,
            TerminateParseError::TrailingOctets {
                error: TermError::Llp(MpaErrorCode::TcpClosed),
                extra: 1
            }
        );
        assert!(e.to_string().contains("after the last"));
        assert_eq!(
            TerminateParseError::TruncatedControl { available: 1 }.error(),
            None
        );
        assert!(TerminateParseError::TruncatedControl { available: 1 }
            .to_string()
            .contains("Terminate Control"));
    }

    #[test]
    fn terminate_lenient_accepts_siw_remote_protection_quirk() {
        // siw: Remote Protection error on a Send, M D R set but only the DDP header
        // follows the length.
        let mut b = hex("01 00 E0 00 0004");
        b.extend_from_slice(&untagged(0x43, 0, 0, 1, 0, true));
        let (t, defect) = Terminate::decode_lenient(&b).unwrap();
        assert_eq!(t.error, TermError::from(RemoteProtectionError::InvalidStag));
        assert_eq!(t.ddp_segment_length, Some(4));
        assert!(matches!(t.ddp_header, Some(DdpHeader::Untagged(_))));
        assert_eq!(t.rdmap_header, None);
        assert!(matches!(
            defect,
            Some(TerminateParseError::Truncated {
                part: TerminatePart::RdmapHeader,
                ..
            })
        ));
        assert!(Terminate::decode(&b).is_err());
    }

    #[test]
    fn terminate_length_field_with_d_but_not_m() {
        // D without M: the length field is there, its value not valid.
        let mut b = hex("12 01 40 00 FFFF");
        b.extend_from_slice(&tagged(0x40, 1, 2, true));
        let t = Terminate::decode(&b).unwrap();
        assert_eq!(t.ddp_segment_length, None);
        assert!(t.ddp_header.is_some());
        let mut expect = b.clone();
        expect[4] = 0;
        expect[5] = 0;
        assert_eq!(t.to_vec(), expect);
        // M without D: just the length.
        let t = Terminate::decode(&hex("12 01 80 00 0020")).unwrap();
        assert_eq!(t.ddp_segment_length, Some(0x20));
        assert_eq!(t.ddp_header, None);
        // R without D: the RDMAP header follows the control field.
        let mut b = hex("00 00 20 00");
        b.extend_from_slice(&ReadRequest::default().to_bytes());
        let t = Terminate::decode(&b).unwrap();
        assert_eq!(t.rdmap_header, Some(ReadRequest::default()));
        assert_eq!(t.to_vec(), b);
    }

    #[test]
    fn read_request_codec() {
        let r = ReadRequest {
            sink_stag: 0x0102_0304,
            sink_to: 0x0506_0708_090A_0B0C,
            read_message_size: 0x0D0E_0F10,
            source_stag: 0x1112_1314,
            source_to: 0x1516_1718_191A_1B1C,
        };
        let b = r.to_bytes();
        assert_eq!(b.to_vec(), (1..=28).collect::<Vec<u8>>());
        assert_eq!(ReadRequest::decode(&b), Ok(r));
        assert_eq!(
            ReadRequest::decode(&b[..27]),
            Err(WrongLength {
                expected: 28,
                actual: 27
            })
        );
        assert!(ReadRequest::decode(&[0; 29]).is_err());
        assert!(WrongLength {
            expected: 28,
            actual: 27
        }
        .to_string()
        .contains("28"));
        let mut v = Vec::new();
        r.append_to(&mut v);
        assert_eq!(v, b);
        let mut buf = [0u8; 30];
        assert_eq!(r.encode_into(&mut buf), Ok(28));
        assert!(r.encode_into(&mut [0u8; 27]).is_err());
    }

    #[test]
    fn error_display_is_informative() {
        let cases = [
            RdmapParseError::UnknownOpcode { opcode: 9 },
            RdmapParseError::Ddp(DdpParseError::Truncated {
                model: None,
                needed: 1,
                available: 0,
            }),
            RdmapParseError::MalformedTerminate(TerminateParseError::TruncatedControl {
                available: 0,
            }),
        ];
        for e in cases {
            assert!(!e.to_string().is_empty());
        }
        assert_eq!(
            RdmapParseError::from(DdpParseError::Truncated {
                model: None,
                needed: 1,
                available: 0
            }),
            cases[1]
        );
    }

    fn arb_term_error() -> impl Strategy<Value = TermError> {
        (0u8..16, 0u8..16, any::<u8>()).prop_map(|(l, t, c)| TermError::from_triple(l, t, c))
    }

    fn arb_ddp_header() -> impl Strategy<Value = DdpHeader> {
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

    fn arb_read_request() -> impl Strategy<Value = ReadRequest> {
        (
            any::<u32>(),
            any::<u64>(),
            any::<u32>(),
            any::<u32>(),
            any::<u64>(),
        )
            .prop_map(
                |(sink_stag, sink_to, read_message_size, source_stag, source_to)| ReadRequest {
                    sink_stag,
                    sink_to,
                    read_message_size,
                    source_stag,
                    source_to,
                },
            )
    }

    fn arb_terminate() -> impl Strategy<Value = Terminate> {
        (
            arb_term_error(),
            proptest::option::of(any::<u16>()),
            proptest::option::of(arb_ddp_header()),
            proptest::option::of(arb_read_request()),
        )
            .prop_map(
                |(error, ddp_segment_length, ddp_header, rdmap_header)| Terminate {
                    error,
                    ddp_segment_length,
                    ddp_header,
                    rdmap_header,
                },
            )
    }

    /// A valid ULPDU for any opcode, with a payload.
    fn arb_valid_ulpdu() -> impl Strategy<Value = Vec<u8>> {
        (
            0u8..8,
            any::<u32>(),
            any::<u64>(),
            any::<u32>(),
            any::<bool>(),
            arb_read_request(),
            arb_terminate(),
            proptest::collection::vec(any::<u8>(), 0..40),
        )
            .prop_map(|(op, a, b, c, last, rr, term, data)| {
                let op = Opcode::from_code(op).unwrap();
                match op {
                    Opcode::RdmaReadRequest => read_request_ulpdu(a, &rr),
                    Opcode::Terminate => terminate_ulpdu(&term, a),
                    _ if op.is_tagged() => {
                        let mut v = tagged_header(op, a, b, last).unwrap().to_vec();
                        v.extend_from_slice(&data);
                        v
                    }
                    _ => {
                        let mut v = untagged_header(op, a, c, b as u32, last).unwrap().to_vec();
                        v.extend_from_slice(&data);
                        v
                    }
                }
            })
    }

    proptest! {
        #[test]
        fn read_request_round_trip(r in arb_read_request(), msn in any::<u32>()) {
            prop_assert_eq!(ReadRequest::decode(&r.to_bytes()), Ok(r));
            let u = read_request_ulpdu(msn, &r);
            let seg = parse_segment(&u).unwrap();
            prop_assert_eq!(seg.body, Body::ReadRequest(r));
            let DdpHeader::Untagged(h) = seg.header else { panic!("untagged") };
            prop_assert_eq!((h.qn, h.msn, h.mo, h.last), (1, msn, 0, true));
        }

        #[test]
        fn terminate_round_trip(t in arb_terminate(), msn in any::<u32>()) {
            let bytes = t.to_vec();
            prop_assert_eq!(bytes.len(), t.encoded_len());
            let back = Terminate::decode(&bytes).unwrap();
            // Quoted DDP headers come back with the flags this codec writes.
            prop_assert_eq!(back, t);
            let u = terminate_ulpdu(&t, msn);
            let seg = parse_segment(&u).unwrap();
            prop_assert_eq!(seg.opcode, Opcode::Terminate);
            prop_assert_eq!(seg.body, Body::Terminate { terminate: t, defect: None });
            let DdpHeader::Untagged(h) = seg.header else { panic!("untagged") };
            prop_assert_eq!((h.qn, h.msn, h.mo, h.last), (2, msn, 0, true));
        }

        #[test]
        fn term_error_triple_round_trip(l in 0u8..16, t in 0u8..16, c in any::<u8>()) {
            let e = TermError::from_triple(l, t, c);
            prop_assert_eq!(e.triple(), (l, t, c));
            prop_assert_eq!(TermError::from_triple(e.layer(), e.etype(), e.code()), e);
            let _ = e.to_string();
        }

        #[test]
        fn headers_round_trip_through_parse_segment(u in arb_valid_ulpdu()) {
            let seg = parse_segment(&u).unwrap();
            let mut back = seg.header.to_vec();
            back.extend_from_slice(seg.payload);
            prop_assert_eq!(back, u);
        }

        #[test]
        fn parse_segment_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
            match parse_segment(&bytes) {
                Ok(seg) => { let _ = seg.rtr_kind(); let _ = seg.invalidate_stag(); }
                Err(e) => {
                    let _ = e.to_string();
                    if let Some(t) = e.terminate(&bytes) {
                        prop_assert_eq!(Terminate::decode(&t.to_vec()), Ok(t));
                    }
                }
            }
        }

        #[test]
        fn parse_segment_never_panics_on_mutated_valid(u in arb_valid_ulpdu(), flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4), cut in any::<prop::sample::Index>()) {
            let mut u = u;
            for (i, x) in flips {
                let i = i.index(u.len());
                u[i] ^= x;
            }
            let cut = cut.index(u.len() + 1);
            let u = &u[..cut];
            if let Err(e) = parse_segment(u) {
                let _ = e.term_error();
                let _ = e.terminate(u);
            }
        }

        #[test]
        fn terminate_decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
            let strict = Terminate::decode(&bytes);
            match Terminate::decode_lenient(&bytes) {
                Ok((t, None)) => prop_assert_eq!(strict, Ok(t)),
                Ok((t, Some(d))) => {
                    prop_assert_eq!(strict, Err(d));
                    prop_assert_eq!(d.error(), Some(t.error));
                    let _ = d.to_string();
                }
                Err(e) => prop_assert_eq!(strict, Err(e)),
            }
            let _ = ReadRequest::decode(&bytes);
        }

        #[test]
        fn for_segment_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..80), e in arb_term_error()) {
            let t = Terminate::for_segment(e, &bytes);
            prop_assert_eq!(Terminate::decode(&t.to_vec()), Ok(t));
        }
    }
}
