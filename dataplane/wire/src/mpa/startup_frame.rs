//! MPA Request and Reply frames (RFC 5044 section 7.1.1) with the enhanced RDMA connection
//! establishment data of RFC 6581 (sections 6 and 9).
//!
//! ```text
//! 0..16   Key: "MPA ID Req Frame" | "MPA ID Rep Frame"
//! 16      |M|C|R|S| Res |      (S: RFC 6581; Res: 4 reserved bits)
//! 17      Rev
//! 18..20  PD_Length (0..=512)
//! 20..    Private Data; when S = 1 it begins with the enhanced word:
//!         |A|B|   IRD (14)   |C|D|   ORD (14)   |
//! ```
//!
//! Everything here is sans-IO and never panics on any input:
//!
//! * [`parse`] / [`parse_with`] decide a frame incrementally from the octets received so far
//!   (the header first, so a bad key, an unsupported Rev or a PD_Length above 512 is
//!   reported before waiting for Private Data), and say how many octets the frame used:
//!   the octets after it belong to FPDU mode and are the caller's to hand over.
//! * [`incomplete_at_close`] gives the error for a stream that ended inside a frame.
//! * [`StartupFrame::encode`] builds a frame, validating it first.
//!
//! Two pre-RFC dialects can be selected with [`Dialect`] (never chosen automatically):
//! the RTR flag layout of draft-ietf-storm-mpa-peer-connect-01 (2010) and the "MPA ID Rtr
//! Frame" of the 2007 peer-to-peer proposal.

use std::fmt;

use super::MpaErrorCode;

/// Key of an MPA Request Frame: "MPA ID Req Frame" (RFC 5044 section 7.1.1).
pub const REQUEST_KEY: [u8; 16] = *b"MPA ID Req Frame";
/// Key of an MPA Reply Frame: "MPA ID Rep Frame" (RFC 5044 section 7.1.1).
pub const REPLY_KEY: [u8; 16] = *b"MPA ID Rep Frame";
/// Key of the "MPA ID Rtr Frame" of the 2007 peer-to-peer proposal ([`Dialect::RtrFrame2007`]).
///
/// The proposal names the key "MPA ID Rtr Frame" three times but prints its hex as
/// `... 52 74 52 ...` ("RtR"), which breaks the pattern of the two RFC keys (a capital `R`
/// followed by two lower-case letters, hex matching the text). We send the named string
/// and accept both spellings on receipt ([`RTR_KEY_AS_PRINTED`]).
pub const RTR_KEY: [u8; 16] = *b"MPA ID Rtr Frame";
/// The Rtr key exactly as the 2007 proposal's hex prints it ("MPA ID RtR Frame"); accepted
/// on receipt, never sent.
pub const RTR_KEY_AS_PRINTED: [u8; 16] = *b"MPA ID RtR Frame";

/// Length of the fixed part of a startup frame: Key (16), flags (1), Rev (1), PD_Length (2).
pub const HEADER_LEN: usize = 20;
/// Largest PD_Length a startup frame may carry (RFC 5044 section 7.1.1).
pub const MAX_PD_LENGTH: usize = 512;
/// Length of the RFC 6581 enhanced RDMA connection establishment data.
pub const ENHANCED_DATA_LEN: usize = 4;
/// Largest ULP Private Data after the enhanced word (RFC 6581 section 9: 512 - 4).
pub const MAX_ENHANCED_ULP_PD_LENGTH: usize = MAX_PD_LENGTH - ENHANCED_DATA_LEN;

/// M bit of the flags octet: markers REQUIRED in FPDUs the *other* side sends.
pub const FLAG_M: u8 = 0x80;
/// C bit of the flags octet: CRC wanted; CRC is used if either side sets it.
pub const FLAG_C: u8 = 0x40;
/// R bit of the flags octet: Rejected Connection in a Reply (not checked in a Request).
pub const FLAG_R: u8 = 0x20;
/// S bit of the flags octet (RFC 6581 section 6): Private Data begins with the enhanced word.
pub const FLAG_S: u8 = 0x10;
/// The reserved bits of the flags octet (Res, 4 bits once S is taken out).
pub const RES_MASK: u8 = 0x0F;

/// Rev 1: RFC 5044.
pub const REV_1: u8 = 1;
/// Rev 2: RFC 6581 enhanced connection establishment available.
pub const REV_2: u8 = 2;

/// IRD or ORD value 0x3FFF: "automatic negotiation not desired, the ULP does it"
/// (RFC 6581 section 9.1).
pub const IRD_ORD_NO_NEGOTIATION: u16 = 0x3FFF;
/// Largest IRD/ORD value the 14-bit fields hold (equal to [`IRD_ORD_NO_NEGOTIATION`]).
pub const MAX_IRD_ORD: u16 = 0x3FFF;

/// Which startup frame a key names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FrameKind {
    /// MPA Request Frame, sent by the Initiator.
    Request,
    /// MPA Reply Frame, sent by the Responder.
    Reply,
    /// "MPA ID Rtr Frame" of the 2007 proposal, sent by the Initiator after an accepting
    /// Reply; only recognised under [`Dialect::RtrFrame2007`].
    Rtr,
}

impl FrameKind {
    /// The key this kind of frame carries.
    pub const fn key(self) -> [u8; 16] {
        match self {
            Self::Request => REQUEST_KEY,
            Self::Reply => REPLY_KEY,
            Self::Rtr => RTR_KEY,
        }
    }
}

impl fmt::Display for FrameKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Request => "MPA Request Frame",
            Self::Reply => "MPA Reply Frame",
            Self::Rtr => "MPA Rtr Frame",
        })
    }
}

/// How the S bit and the RTR control flags are to be read and written.
///
/// Only [`Dialect::Rfc6581`] is standard; the others are opt-in compatibility with
/// pre-RFC implementations and are never chosen automatically.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize),
    serde(rename_all = "snake_case")
)]
pub enum Dialect {
    /// RFC 5044 + RFC 6581: S = Private Data begins with the enhanced word `|A|B|IRD|C|D|ORD|`
    /// (A peer-to-peer, B Send RTR, C Write RTR, D Read RTR).
    #[default]
    Rfc6581,
    /// draft-ietf-storm-mpa-peer-connect-01 (February 2010), section 8: same word, but the
    /// flags are `A` = zero-length ULPDU (Send) RTR, `B` = zero-length RDMA Write RTR,
    /// `C` = zero-length RDMA Read RTR, `D` reserved (sent as zero, ignored). There is no
    /// peer-to-peer flag: whether an RTR is sent is local configuration (draft section 5).
    Draft2010,
    /// The 2007 "MPA ID Rtr Frame" proposal: S in a Request = "the Initiator will send an Rtr
    /// Frame after an accepting Reply"; S in a Reply = "the Responder supports the Rtr Frame
    /// and waits for it". No enhanced word: Private Data is all ULP data. The Rtr Frame has
    /// the startup-frame layout with its own key.
    RtrFrame2007,
}

impl Dialect {
    /// Whether S announces the enhanced word (true for the RFC 6581 and 2010-draft layouts).
    pub const fn s_means_enhanced_data(self) -> bool {
        matches!(self, Self::Rfc6581 | Self::Draft2010)
    }
}

/// One of the RTR (Ready to Receive) indications of RFC 6581 section 9.2.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Deserialize),
    serde(rename_all = "snake_case")
)]
pub enum RtrType {
    /// Zero-length FULPDU (Send) RTR: RFC 6581 flag B.
    Send,
    /// Zero-length RDMA Write RTR: RFC 6581 flag C.
    Write,
    /// Zero-length RDMA Read RTR: RFC 6581 flag D.
    Read,
}

impl RtrType {
    /// The name deployment files and command lines use: `"write"`, `"read"`, `"send"`.
    pub const fn name(self) -> &'static str {
        match self {
            RtrType::Write => "write",
            RtrType::Read => "read",
            RtrType::Send => "send",
        }
    }

    /// All RTR types, in the order Send, Write, Read.
    pub const ALL: [RtrType; 3] = [RtrType::Send, RtrType::Write, RtrType::Read];

    const fn bit(self) -> u8 {
        match self {
            Self::Send => 1,
            Self::Write => 2,
            Self::Read => 4,
        }
    }
}

impl fmt::Display for RtrType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Send => "zero-length Send",
            Self::Write => "zero-length RDMA Write",
            Self::Read => "zero-length RDMA Read",
        })
    }
}

/// A set of [`RtrType`]s (the B, C, D flags of RFC 6581 section 9).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RtrTypes(u8);

impl RtrTypes {
    /// The empty set.
    pub const NONE: RtrTypes = RtrTypes(0);
    /// Send, Write and Read.
    pub const ALL: RtrTypes = RtrTypes(7);
    /// Write and Read: what Linux siw and Intel irdma offer.
    pub const WRITE_READ: RtrTypes = RtrTypes(6);

    /// The set holding exactly `types`.
    pub fn from_types(types: &[RtrType]) -> RtrTypes {
        types.iter().fold(RtrTypes::NONE, |s, t| s.with(*t))
    }

    /// The set with `t` added.
    #[must_use]
    pub const fn with(self, t: RtrType) -> RtrTypes {
        RtrTypes(self.0 | t.bit())
    }

    /// The set with `t` removed.
    #[must_use]
    pub const fn without(self, t: RtrType) -> RtrTypes {
        RtrTypes(self.0 & !t.bit())
    }

    /// Whether `t` is in the set.
    pub const fn contains(self, t: RtrType) -> bool {
        self.0 & t.bit() != 0
    }

    /// Whether the set is empty.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The types in both sets.
    #[must_use]
    pub const fn intersection(self, other: RtrTypes) -> RtrTypes {
        RtrTypes(self.0 & other.0)
    }

    /// The types in either set.
    #[must_use]
    pub const fn union(self, other: RtrTypes) -> RtrTypes {
        RtrTypes(self.0 | other.0)
    }

    /// The types in the set, in the order Send, Write, Read.
    pub fn iter(self) -> impl Iterator<Item = RtrType> {
        RtrType::ALL.into_iter().filter(move |t| self.contains(*t))
    }
}

impl fmt::Debug for RtrTypes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

/// Error building an [`EnhancedData`] word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EnhancedDataError {
    /// IRD above 0x3FFF does not fit the 14-bit field.
    IrdTooLarge(u16),
    /// ORD above 0x3FFF does not fit the 14-bit field.
    OrdTooLarge(u16),
}

impl fmt::Display for EnhancedDataError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::IrdTooLarge(v) => write!(f, "IRD {v:#x} exceeds the 14-bit field (max 0x3FFF)"),
            Self::OrdTooLarge(v) => write!(f, "ORD {v:#x} exceeds the 14-bit field (max 0x3FFF)"),
        }
    }
}

impl std::error::Error for EnhancedDataError {}

/// The enhanced RDMA connection establishment data (RFC 6581 section 9): the first four
/// octets of Private Data when S = 1.
///
/// ```text
/// |A|B|   IRD (14 bits)   |C|D|   ORD (14 bits)   |
/// ```
///
/// Invariants: IRD and ORD are at most 0x3FFF; without the peer-to-peer flag A the RTR set
/// is empty (RFC 6581 9.2: "If Control Flag A is set to 0, then Control Flags B, C, and D
/// MUST also be set to 0. On reception ... MUST be ignored."). Under
/// [`Dialect::Draft2010`] there is no A flag; the word then carries the RTR set with
/// `peer_to_peer` false (see [`EnhancedData::encode`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EnhancedData {
    peer_to_peer: bool,
    rtr: RtrTypes,
    ird: u16,
    ord: u16,
}

impl EnhancedData {
    /// Client-server word (A = B = C = D = 0) with the given IRD and ORD; values above
    /// 0x3FFF are rejected.
    pub fn new(ird: u16, ord: u16) -> Result<Self, EnhancedDataError> {
        if ird > MAX_IRD_ORD {
            return Err(EnhancedDataError::IrdTooLarge(ird));
        }
        if ord > MAX_IRD_ORD {
            return Err(EnhancedDataError::OrdTooLarge(ord));
        }
        Ok(Self {
            peer_to_peer: false,
            rtr: RtrTypes::NONE,
            ird,
            ord,
        })
    }

    /// Peer-to-peer word (A = 1) offering or choosing the RTR types `rtr`.
    pub fn peer_to_peer(ird: u16, ord: u16, rtr: RtrTypes) -> Result<Self, EnhancedDataError> {
        let mut e = Self::new(ird, ord)?;
        e.peer_to_peer = true;
        e.rtr = rtr;
        Ok(e)
    }

    /// A word carrying an RTR set without the peer-to-peer flag: only meaningful under
    /// [`Dialect::Draft2010`], whose word has no A flag.
    pub fn draft2010(ird: u16, ord: u16, rtr: RtrTypes) -> Result<Self, EnhancedDataError> {
        let mut e = Self::new(ird, ord)?;
        e.rtr = rtr;
        Ok(e)
    }

    /// Flag A: peer-to-peer connection model (RFC 6581 9.2).
    pub const fn is_peer_to_peer(&self) -> bool {
        self.peer_to_peer
    }

    /// The RTR types (flags B, C, D): offered in a Request, supported in a Reply.
    pub const fn rtr(&self) -> RtrTypes {
        self.rtr
    }

    /// IRD (14 bits; 0x3FFF = no automatic negotiation).
    pub const fn ird(&self) -> u16 {
        self.ird
    }

    /// ORD (14 bits; 0x3FFF = no automatic negotiation).
    pub const fn ord(&self) -> u16 {
        self.ord
    }

    /// The 32-bit word as sent (network byte order) in `dialect`'s flag layout.
    ///
    /// [`Dialect::Rfc6581`]: `A` 0x8000 and `B` (Send) 0x4000 of the IRD half, `C` (Write)
    /// 0x8000 and `D` (Read) 0x4000 of the ORD half; B/C/D are written as 0 when A is 0.
    /// [`Dialect::Draft2010`]: `A` (Send) 0x8000 and `B` (Write) 0x4000 of the IRD half,
    /// `C` (Read) 0x8000 of the ORD half, `D` reserved and 0; the peer-to-peer flag does not
    /// exist there and is not encoded. [`Dialect::RtrFrame2007`] has no enhanced word; the
    /// RFC 6581 layout is used.
    pub fn encode(&self, dialect: Dialect) -> [u8; 4] {
        let mut ird = self.ird & MAX_IRD_ORD;
        let mut ord = self.ord & MAX_IRD_ORD;
        match dialect {
            Dialect::Draft2010 => {
                if self.rtr.contains(RtrType::Send) {
                    ird |= 0x8000;
                }
                if self.rtr.contains(RtrType::Write) {
                    ird |= 0x4000;
                }
                if self.rtr.contains(RtrType::Read) {
                    ord |= 0x8000;
                }
            }
            Dialect::Rfc6581 | Dialect::RtrFrame2007 => {
                if self.peer_to_peer {
                    ird |= 0x8000;
                    if self.rtr.contains(RtrType::Send) {
                        ird |= 0x4000;
                    }
                    if self.rtr.contains(RtrType::Write) {
                        ord |= 0x8000;
                    }
                    if self.rtr.contains(RtrType::Read) {
                        ord |= 0x4000;
                    }
                }
            }
        }
        let [i0, i1] = ird.to_be_bytes();
        let [o0, o1] = ord.to_be_bytes();
        [i0, i1, o0, o1]
    }

    /// Reads the word in `dialect`'s flag layout (see [`EnhancedData::encode`]). Never
    /// fails: IRD/ORD are 14-bit fields; under RFC 6581, B/C/D are ignored when A is 0; under
    /// the 2010 draft, the reserved D is ignored.
    pub fn decode(word: [u8; 4], dialect: Dialect) -> Self {
        let ird_half = u16::from_be_bytes([word[0], word[1]]);
        let ord_half = u16::from_be_bytes([word[2], word[3]]);
        let ird = ird_half & MAX_IRD_ORD;
        let ord = ord_half & MAX_IRD_ORD;
        let mut rtr = RtrTypes::NONE;
        let mut peer_to_peer = false;
        match dialect {
            Dialect::Draft2010 => {
                if ird_half & 0x8000 != 0 {
                    rtr = rtr.with(RtrType::Send);
                }
                if ird_half & 0x4000 != 0 {
                    rtr = rtr.with(RtrType::Write);
                }
                if ord_half & 0x8000 != 0 {
                    rtr = rtr.with(RtrType::Read);
                }
            }
            Dialect::Rfc6581 | Dialect::RtrFrame2007 => {
                if ird_half & 0x8000 != 0 {
                    peer_to_peer = true;
                    if ird_half & 0x4000 != 0 {
                        rtr = rtr.with(RtrType::Send);
                    }
                    if ord_half & 0x8000 != 0 {
                        rtr = rtr.with(RtrType::Write);
                    }
                    if ord_half & 0x4000 != 0 {
                        rtr = rtr.with(RtrType::Read);
                    }
                }
            }
        }
        Self {
            peer_to_peer,
            rtr,
            ird,
            ord,
        }
    }
}

/// The flags octet of a startup frame, bit by bit as received or to be sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Flags {
    /// M: markers REQUIRED in the FPDUs the other side sends.
    pub m: bool,
    /// C: CRC wanted (used in both directions if either side sets it).
    pub c: bool,
    /// R: in a Reply, the connection is rejected; in a Request, not checked.
    pub r: bool,
    /// S (RFC 6581): Private Data begins with the enhanced word; under
    /// [`Dialect::RtrFrame2007`]: Rtr Frame offered (Request) or awaited (Reply).
    pub s: bool,
    /// Res: the four reserved bits (`0x0F`), kept as received; RFC 5044 says they MUST be
    /// sent as zero and not checked on reception.
    pub res: u8,
}

impl Flags {
    /// The flags octet.
    pub const fn to_byte(self) -> u8 {
        (if self.m { FLAG_M } else { 0 })
            | (if self.c { FLAG_C } else { 0 })
            | (if self.r { FLAG_R } else { 0 })
            | (if self.s { FLAG_S } else { 0 })
            | (self.res & RES_MASK)
    }

    /// Splits a flags octet.
    pub const fn from_byte(b: u8) -> Self {
        Self {
            m: b & FLAG_M != 0,
            c: b & FLAG_C != 0,
            r: b & FLAG_R != 0,
            s: b & FLAG_S != 0,
            res: b & RES_MASK,
        }
    }
}

/// A decoded MPA Request, Reply (or, in the 2007 dialect, Rtr) frame.
///
/// When the S bit announces the enhanced word (RFC 6581 and 2010-draft dialects, Rev >= 2),
/// `enhanced` holds it and `private_data` is the ULP Private Data that follows it;
/// otherwise `enhanced` is `None` and `private_data` is the whole Private Data field.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct StartupFrame {
    /// Request, Reply or Rtr.
    pub kind: FrameKind,
    /// The flags octet.
    pub flags: Flags,
    /// Rev.
    pub rev: u8,
    /// The enhanced RDMA connection establishment data (RFC 6581 section 9), if present.
    pub enhanced: Option<EnhancedData>,
    /// ULP Private Data (after the enhanced word, if any).
    pub private_data: Vec<u8>,
}

/// Error building a startup frame ([`StartupFrame::encode`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EncodeError {
    /// PD_Length (ULP Private Data plus the enhanced word) would exceed 512 octets.
    PrivateDataTooLong {
        /// The PD_Length the frame would need.
        pd_length: usize,
    },
    /// S is set but there is no enhanced word, or there is an enhanced word but S is clear
    /// (RFC 6581 section 6: S = 1 if and only if Private Data begins with it).
    SBitMismatch,
    /// The enhanced word needs Rev 2 or higher (RFC 6581 section 6).
    EnhancedRequiresRev2 {
        /// The Rev given.
        rev: u8,
    },
    /// An enhanced word in a dialect that has none ([`Dialect::RtrFrame2007`]), or an Rtr
    /// frame outside that dialect.
    NotInDialect,
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::PrivateDataTooLong { pd_length } => {
                write!(f, "PD_Length {pd_length} exceeds {MAX_PD_LENGTH}")
            }
            Self::SBitMismatch => f.write_str("S bit and enhanced data disagree"),
            Self::EnhancedRequiresRev2 { rev } => {
                write!(f, "enhanced data requires Rev >= 2, not {rev}")
            }
            Self::NotInDialect => f.write_str("frame not expressible in the selected dialect"),
        }
    }
}

impl std::error::Error for EncodeError {}

impl StartupFrame {
    /// A frame of `kind` with all flags clear, no enhanced word and no Private Data.
    pub fn new(kind: FrameKind, rev: u8) -> Self {
        Self {
            kind,
            flags: Flags::default(),
            rev,
            enhanced: None,
            private_data: Vec::new(),
        }
    }

    /// PD_Length: the ULP Private Data plus the enhanced word, if any.
    pub fn pd_length(&self) -> usize {
        self.private_data.len()
            + if self.enhanced.is_some() {
                ENHANCED_DATA_LEN
            } else {
                0
            }
    }

    /// The whole frame length on the wire.
    pub fn wire_len(&self) -> usize {
        HEADER_LEN + self.pd_length()
    }

    /// Appends the frame to `out` in the RFC 6581 layout.
    pub fn encode(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        self.encode_with(Dialect::Rfc6581, out)
    }

    /// Appends the frame to `out`, validating it first (nothing is appended on error):
    /// PD_Length at most 512 (RFC 5044 7.1.1); in the RFC 6581 and 2010-draft dialects
    /// S set exactly when the enhanced word is present, and the enhanced word only with
    /// Rev >= 2 (RFC 6581 6); in the 2007 dialect no enhanced word. The flags are written as
    /// given, reserved bits included (RFC 5044 says send them as zero; echoing is the
    /// caller's policy).
    pub fn encode_with(&self, dialect: Dialect, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        let pd_length = self.pd_length();
        if pd_length > MAX_PD_LENGTH {
            return Err(EncodeError::PrivateDataTooLong { pd_length });
        }
        if dialect.s_means_enhanced_data() {
            if self.kind == FrameKind::Rtr {
                return Err(EncodeError::NotInDialect);
            }
            // Below Rev 2, S is one of RFC 5044's reserved bits: sent as given (a decoded
            // Rev 1 frame with S set re-encodes to the same octets) and never announces
            // the enhanced word.
            if self.rev >= REV_2 && self.flags.s != self.enhanced.is_some() {
                return Err(EncodeError::SBitMismatch);
            }
            if self.enhanced.is_some() && self.rev < REV_2 {
                return Err(EncodeError::EnhancedRequiresRev2 { rev: self.rev });
            }
        } else if self.enhanced.is_some() {
            return Err(EncodeError::NotInDialect);
        }
        out.reserve(HEADER_LEN + pd_length);
        out.extend_from_slice(&self.kind.key());
        out.push(self.flags.to_byte());
        out.push(self.rev);
        // pd_length <= 512 was checked above, so it fits 16 bits.
        out.extend_from_slice(&(pd_length as u16).to_be_bytes());
        if let Some(e) = &self.enhanced {
            out.extend_from_slice(&e.encode(dialect));
        }
        out.extend_from_slice(&self.private_data);
        Ok(())
    }

    /// The frame as a new vector (see [`StartupFrame::encode_with`]).
    pub fn to_bytes(&self, dialect: Dialect) -> Result<Vec<u8>, EncodeError> {
        let mut v = Vec::with_capacity(self.wire_len());
        self.encode_with(dialect, &mut v)?;
        Ok(v)
    }
}

/// Why a received startup frame is invalid. Every variant is MPA error code 4
/// ([`MpaErrorCode::InvalidStartupFrame`]): the receiver MUST close the TCP connection and
/// report the error locally (RFC 5044 7.1.1, 7.1.2 and 8).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StartupFrameError {
    /// The key is none of the MPA keys (RFC 5044 7.1.1 Key; 7.1.2 rule 5).
    BadKey {
        /// The 16 octets received.
        key: [u8; 16],
    },
    /// A valid key of the wrong kind: a Request where a Reply was expected is the
    /// Initiator/Initiator case, a Reply where a Request was expected the
    /// Responder/Responder case (RFC 5044 7.1.2 rule 8).
    UnexpectedFrameKind {
        /// The kind the receiver waited for.
        expected: FrameKind,
        /// The kind the key names.
        received: FrameKind,
    },
    /// A Rev the receiver cannot interoperate with (RFC 5044 7.1.1 Rev).
    UnsupportedRev {
        /// The Rev received.
        rev: u8,
    },
    /// PD_Length above 512 (RFC 5044 7.1.1 PD_Length; 7.1.2 rule 9).
    PdLengthTooLarge {
        /// The PD_Length received.
        pd_length: u16,
    },
    /// S set with Rev >= 2 but PD_Length below 4: no room for the enhanced word
    /// (RFC 6581 section 6: "if the 'S' flag is set, Private Data MUST begin with enhanced
    /// RDMA connection establishment data").
    MissingEnhancedData {
        /// The PD_Length received.
        pd_length: u16,
    },
    /// The stream ended (or the frame was cut short) before the whole frame arrived:
    /// a partial header, or Private Data shorter than PD_Length (RFC 5044 7.1.1 PD_Length).
    Truncated {
        /// Octets of the frame received.
        received: usize,
        /// Octets the frame needs (20 while the header is incomplete, else 20 + PD_Length).
        needed: usize,
    },
}

impl StartupFrameError {
    /// The MPA error code: always 4, invalid MPA Request or Reply frame.
    pub const fn code(&self) -> MpaErrorCode {
        MpaErrorCode::InvalidStartupFrame
    }
}

impl fmt::Display for StartupFrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.code())?;
        match self {
            Self::BadKey { key } => write!(f, "bad key {:?}", String::from_utf8_lossy(key)),
            Self::UnexpectedFrameKind { expected, received } => {
                let case = match (expected, received) {
                    (FrameKind::Reply, FrameKind::Request) => " (Initiator/Initiator startup)",
                    (FrameKind::Request, FrameKind::Reply) => " (Responder/Responder startup)",
                    _ => "",
                };
                write!(
                    f,
                    "received an {received} while expecting an {expected}{case}"
                )
            }
            Self::UnsupportedRev { rev } => write!(f, "unsupported Rev {rev}"),
            Self::PdLengthTooLarge { pd_length } => {
                write!(f, "PD_Length {pd_length} exceeds {MAX_PD_LENGTH}")
            }
            Self::MissingEnhancedData { pd_length } => {
                write!(
                    f,
                    "S set but PD_Length {pd_length} < 4 leaves no enhanced data"
                )
            }
            Self::Truncated { received, needed } => {
                write!(f, "frame truncated: {received} of {needed} octets")
            }
        }
    }
}

impl std::error::Error for StartupFrameError {}

/// What the receiver accepts (RFC 5044 7.1.1: "If the MPA receiver cannot interoperate with
/// the received version, then it MUST close the connection").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParseOptions {
    /// The kind of frame expected; `None` accepts any kind (the dialect's kinds).
    pub expected: Option<FrameKind>,
    /// Lowest Rev accepted.
    pub min_rev: u8,
    /// Highest Rev accepted.
    pub max_rev: u8,
    /// How to read S and the enhanced word.
    pub dialect: Dialect,
}

impl ParseOptions {
    /// The default policy: Rev 0, 1 and 2 accepted (like Linux siw; RFC 6581 6 requires Rev 1
    /// to stay accepted), RFC 6581 dialect.
    pub const fn new(expected: Option<FrameKind>) -> Self {
        Self {
            expected,
            min_rev: 0,
            max_rev: REV_2,
            dialect: Dialect::Rfc6581,
        }
    }
}

impl Default for ParseOptions {
    fn default() -> Self {
        Self::new(None)
    }
}

/// The header (first 20 octets) of a startup frame, validated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    /// Request, Reply or Rtr.
    pub kind: FrameKind,
    /// The flags octet.
    pub flags: Flags,
    /// Rev.
    pub rev: u8,
    /// PD_Length (at most 512 once validated).
    pub pd_length: u16,
}

impl FrameHeader {
    /// Whether this header announces the enhanced word under `dialect` (S set, Rev >= 2,
    /// and a dialect in which S means the enhanced word). With Rev 0 or 1, S is one of
    /// RFC 5044's reserved bits, which are not checked on reception.
    pub fn has_enhanced_data(&self, dialect: Dialect) -> bool {
        dialect.s_means_enhanced_data() && self.flags.s && self.rev >= REV_2
    }

    /// The whole frame length: 20 + PD_Length.
    pub fn frame_len(&self) -> usize {
        HEADER_LEN + usize::from(self.pd_length)
    }

    /// Validates a header: key (and its kind against `opts.expected`), Rev, PD_Length and,
    /// with S, room for the enhanced word.
    pub fn parse(
        header: &[u8; HEADER_LEN],
        opts: &ParseOptions,
    ) -> Result<Self, StartupFrameError> {
        let mut key = [0u8; 16];
        key.copy_from_slice(&header[..16]);
        let kind = match key {
            REQUEST_KEY => FrameKind::Request,
            REPLY_KEY => FrameKind::Reply,
            RTR_KEY | RTR_KEY_AS_PRINTED if opts.dialect == Dialect::RtrFrame2007 => FrameKind::Rtr,
            _ => return Err(StartupFrameError::BadKey { key }),
        };
        if let Some(expected) = opts.expected {
            if expected != kind {
                return Err(StartupFrameError::UnexpectedFrameKind {
                    expected,
                    received: kind,
                });
            }
        }
        let flags = Flags::from_byte(header[16]);
        let rev = header[17];
        if rev < opts.min_rev || rev > opts.max_rev {
            return Err(StartupFrameError::UnsupportedRev { rev });
        }
        let pd_length = u16::from_be_bytes([header[18], header[19]]);
        if usize::from(pd_length) > MAX_PD_LENGTH {
            return Err(StartupFrameError::PdLengthTooLarge { pd_length });
        }
        let h = Self {
            kind,
            flags,
            rev,
            pd_length,
        };
        if h.has_enhanced_data(opts.dialect) && usize::from(pd_length) < ENHANCED_DATA_LEN {
            return Err(StartupFrameError::MissingEnhancedData { pd_length });
        }
        Ok(h)
    }
}

/// Result of [`parse`]: more octets needed, or a complete frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Parsed {
    /// The frame is not complete; at least this many more octets are needed.
    NeedMore(usize),
    /// A complete, valid frame using the first `consumed` octets of the buffer. The octets
    /// after them are not part of the frame (FPDU-mode octets, or a following frame).
    Frame {
        /// The frame.
        frame: StartupFrame,
        /// Octets of the buffer the frame occupied (20 + PD_Length).
        consumed: usize,
    },
}

/// Parses a startup frame from the start of `buf` with the default policy
/// ([`ParseOptions::new`]): Rev 0..=2, RFC 6581 dialect.
pub fn parse(buf: &[u8], expected: Option<FrameKind>) -> Result<Parsed, StartupFrameError> {
    parse_with(buf, &ParseOptions::new(expected))
}

/// Parses a startup frame from the start of `buf`, the octets received so far.
///
/// The header is decided as soon as its 20 octets are present, so invalid keys, Revs and
/// PD_Length values are reported without waiting for Private Data.
pub fn parse_with(buf: &[u8], opts: &ParseOptions) -> Result<Parsed, StartupFrameError> {
    let Some(header) = buf.first_chunk::<HEADER_LEN>() else {
        return Ok(Parsed::NeedMore(HEADER_LEN - buf.len()));
    };
    let h = FrameHeader::parse(header, opts)?;
    let total = h.frame_len();
    let Some(pd) = buf.get(HEADER_LEN..total) else {
        return Ok(Parsed::NeedMore(total - buf.len()));
    };
    let (enhanced, ulp_pd) = if h.has_enhanced_data(opts.dialect) {
        match pd.split_first_chunk::<ENHANCED_DATA_LEN>() {
            Some((word, rest)) => (Some(EnhancedData::decode(*word, opts.dialect)), rest),
            // Unreachable: FrameHeader::parse checked PD_Length >= 4.
            None => {
                return Err(StartupFrameError::MissingEnhancedData {
                    pd_length: h.pd_length,
                })
            }
        }
    } else {
        (None, pd)
    };
    Ok(Parsed::Frame {
        frame: StartupFrame {
            kind: h.kind,
            flags: h.flags,
            rev: h.rev,
            enhanced,
            private_data: ulp_pd.to_vec(),
        },
        consumed: total,
    })
}

/// The error for a stream that ended (TCP FIN/RST) with `buf` holding the octets of an
/// incomplete frame: the header's own error if the header is complete and invalid, else
/// [`StartupFrameError::Truncated`]. `None` if `buf` is empty (nothing of a frame arrived:
/// that is a plain TCP close, MPA error code 1) or already holds a complete valid frame.
pub fn incomplete_at_close(buf: &[u8], opts: &ParseOptions) -> Option<StartupFrameError> {
    if buf.is_empty() {
        return None;
    }
    match parse_with(buf, opts) {
        Err(e) => Some(e),
        Ok(Parsed::Frame { .. }) => None,
        Ok(Parsed::NeedMore(n)) => Some(StartupFrameError::Truncated {
            received: buf.len(),
            needed: buf.len() + n,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    use crate::hex;

    fn with_key(key: &[u8; 16], rest: &str) -> Vec<u8> {
        let mut v = key.to_vec();
        v.extend(hex(rest));
        v
    }

    fn frame(buf: &[u8], expected: Option<FrameKind>) -> (StartupFrame, usize) {
        match parse(buf, expected).unwrap() {
            Parsed::Frame { frame, consumed } => (frame, consumed),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn keys_are_the_rfc_octets() {
        assert_eq!(
            REQUEST_KEY.to_vec(),
            hex("4D 50 41 20 49 44 20 52 65 71 20 46 72 61 6D 65")
        );
        assert_eq!(
            REPLY_KEY.to_vec(),
            hex("4D 50 41 20 49 44 20 52 65 70 20 46 72 61 6D 65")
        );
        assert_eq!(
            RTR_KEY_AS_PRINTED.to_vec(),
            hex("4D 50 41 20 49 44 20 52 74 52 20 46 72 61 6D 65")
        );
    }

    #[test]
    fn siw_default_request_decodes() {
        // siw initiator: rev 2, S, IRD=1, ORD=1 (peer README, "siw as initiator").
        let buf = with_key(&REQUEST_KEY, "10 02 00 04 00 01 00 01");
        let (f, used) = frame(&buf, Some(FrameKind::Request));
        assert_eq!(used, 24);
        assert_eq!(f.rev, 2);
        assert!(f.flags.s && !f.flags.m && !f.flags.c && !f.flags.r);
        let e = f.enhanced.unwrap();
        assert_eq!((e.ird(), e.ord()), (1, 1));
        assert!(!e.is_peer_to_peer());
        assert!(f.private_data.is_empty());
        assert_eq!(f.to_bytes(Dialect::Rfc6581).unwrap(), buf);
    }

    #[test]
    fn siw_p2p_request_and_reply_decode() {
        let buf = with_key(&REQUEST_KEY, "10 02 00 04 80 01 c0 01");
        let (f, _) = frame(&buf, None);
        let e = f.enhanced.unwrap();
        assert!(e.is_peer_to_peer());
        assert_eq!(e.rtr(), RtrTypes::WRITE_READ);
        assert_eq!((e.ird(), e.ord()), (1, 1));
        assert_eq!(e.encode(Dialect::Rfc6581), [0x80, 0x01, 0xc0, 0x01]);
        let reply = with_key(&REPLY_KEY, "10 02 00 04 80 01 80 01");
        let (r, _) = frame(&reply, Some(FrameKind::Reply));
        assert_eq!(
            r.enhanced.unwrap().rtr(),
            RtrTypes::NONE.with(RtrType::Write)
        );
        // Send RTR (B) and all types.
        let e = EnhancedData::decode([0xc0, 0x10, 0xc0, 0x10], Dialect::Rfc6581);
        assert_eq!(e.rtr(), RtrTypes::ALL);
        assert_eq!(e.ird(), 16);
    }

    #[test]
    fn flag_bits_match_wire_md() {
        let f = Flags::from_byte(0xff);
        assert!(f.m && f.c && f.r && f.s);
        assert_eq!(f.res, 0x0f);
        assert_eq!(f.to_byte(), 0xff);
        assert_eq!(
            Flags {
                m: true,
                ..Default::default()
            }
            .to_byte(),
            0x80
        );
        assert_eq!(
            Flags {
                c: true,
                ..Default::default()
            }
            .to_byte(),
            0x40
        );
        assert_eq!(
            Flags {
                r: true,
                ..Default::default()
            }
            .to_byte(),
            0x20
        );
        assert_eq!(
            Flags {
                s: true,
                ..Default::default()
            }
            .to_byte(),
            0x10
        );
    }

    #[test]
    fn a_clear_ignores_b_c_d_on_receive_and_clears_them_on_send() {
        let e = EnhancedData::decode([0x40, 0x10, 0xc0, 0x10], Dialect::Rfc6581);
        assert!(!e.is_peer_to_peer());
        assert!(e.rtr().is_empty());
        assert_eq!((e.ird(), e.ord()), (16, 16));
        assert_eq!(e.encode(Dialect::Rfc6581), [0x00, 0x10, 0x00, 0x10]);
    }

    #[test]
    fn ird_ord_above_0x3fff_rejected_at_construction() {
        assert_eq!(
            EnhancedData::new(0x4000, 0),
            Err(EnhancedDataError::IrdTooLarge(0x4000))
        );
        assert_eq!(
            EnhancedData::new(0, 0xffff),
            Err(EnhancedDataError::OrdTooLarge(0xffff))
        );
        let e = EnhancedData::new(IRD_ORD_NO_NEGOTIATION, IRD_ORD_NO_NEGOTIATION).unwrap();
        assert_eq!(e.encode(Dialect::Rfc6581), [0x3f, 0xff, 0x3f, 0xff]);
    }

    #[test]
    fn draft2010_flag_layout() {
        let e = EnhancedData::draft2010(4, 8, RtrTypes::ALL).unwrap();
        // A = Send (IRD 0x8000), B = Write (IRD 0x4000), C = Read (ORD 0x8000), D reserved.
        assert_eq!(e.encode(Dialect::Draft2010), [0xc0, 0x04, 0x80, 0x08]);
        let d = EnhancedData::decode([0x40, 0x04, 0x40, 0x08], Dialect::Draft2010);
        assert_eq!(d.rtr(), RtrTypes::NONE.with(RtrType::Write)); // D ignored
        assert!(!d.is_peer_to_peer());
        assert_eq!((d.ird(), d.ord()), (4, 8));
    }

    #[test]
    fn rtr_frame_2007_keys_only_in_its_dialect() {
        let buf = with_key(&RTR_KEY, "00 01 00 00");
        assert!(matches!(
            parse(&buf, None),
            Err(StartupFrameError::BadKey { .. })
        ));
        let opts = ParseOptions {
            dialect: Dialect::RtrFrame2007,
            ..ParseOptions::new(Some(FrameKind::Rtr))
        };
        assert!(
            matches!(parse_with(&buf, &opts), Ok(Parsed::Frame { frame, .. }) if frame.kind == FrameKind::Rtr)
        );
        let printed = with_key(&RTR_KEY_AS_PRINTED, "00 01 00 00");
        assert!(matches!(
            parse_with(&printed, &opts),
            Ok(Parsed::Frame { .. })
        ));
        // In that dialect S carries no enhanced word.
        let req = with_key(&REQUEST_KEY, "10 01 00 02 ab cd");
        let opts = ParseOptions {
            dialect: Dialect::RtrFrame2007,
            ..ParseOptions::new(Some(FrameKind::Request))
        };
        let Ok(Parsed::Frame { frame, .. }) = parse_with(&req, &opts) else {
            panic!()
        };
        assert!(frame.flags.s && frame.enhanced.is_none());
        assert_eq!(frame.private_data, vec![0xab, 0xcd]);
        assert_eq!(frame.to_bytes(Dialect::RtrFrame2007).unwrap(), req);
    }

    #[test]
    fn bad_key_rejected_with_code_4() {
        let mut buf = with_key(b"MPA ID Req FrXme", "00 01 00 00");
        let e = parse(&buf, Some(FrameKind::Request)).unwrap_err();
        assert!(matches!(e, StartupFrameError::BadKey { .. }));
        assert_eq!(e.code(), MpaErrorCode::InvalidStartupFrame);
        buf[0] = 0;
        assert!(parse(&buf, None).is_err());
    }

    #[test]
    fn request_where_reply_expected_is_initiator_initiator() {
        let buf = with_key(&REQUEST_KEY, "00 01 00 00");
        assert_eq!(
            parse(&buf, Some(FrameKind::Reply)),
            Err(StartupFrameError::UnexpectedFrameKind {
                expected: FrameKind::Reply,
                received: FrameKind::Request
            })
        );
        let buf = with_key(&REPLY_KEY, "00 01 00 00");
        assert_eq!(
            parse(&buf, Some(FrameKind::Request)),
            Err(StartupFrameError::UnexpectedFrameKind {
                expected: FrameKind::Request,
                received: FrameKind::Reply
            })
        );
    }

    #[test]
    fn rev_policy() {
        for rev in 0..=2u8 {
            let buf = with_key(&REQUEST_KEY, &format!("00 {rev:02x} 00 00"));
            assert!(parse(&buf, None).is_ok());
        }
        for rev in [3u8, 255] {
            let buf = with_key(&REQUEST_KEY, &format!("00 {rev:02x} 00 00"));
            assert_eq!(
                parse(&buf, None),
                Err(StartupFrameError::UnsupportedRev { rev })
            );
        }
        let strict = ParseOptions {
            min_rev: 1,
            ..ParseOptions::default()
        };
        let buf = with_key(&REQUEST_KEY, "00 00 00 00");
        assert_eq!(
            parse_with(&buf, &strict),
            Err(StartupFrameError::UnsupportedRev { rev: 0 })
        );
    }

    #[test]
    fn pd_length_above_512_rejected_from_the_header_alone() {
        for pd in [513u16, 0xffff, 0x4854] {
            let buf = with_key(&REQUEST_KEY, &format!("00 01 {pd:04x}"));
            assert_eq!(
                parse(&buf, None),
                Err(StartupFrameError::PdLengthTooLarge { pd_length: pd })
            );
        }
        let mut buf = with_key(&REQUEST_KEY, "00 01 02 00");
        assert_eq!(parse(&buf, None), Ok(Parsed::NeedMore(512)));
        buf.resize(20 + 512, 7);
        let (f, used) = frame(&buf, None);
        assert_eq!((f.private_data.len(), used), (512, 532));
    }

    #[test]
    fn s_with_pd_length_below_4_rejected() {
        for pd in ["00 00", "00 02 aa bb", "00 03 aa bb cc"] {
            let buf = with_key(&REQUEST_KEY, &format!("10 02 {pd}"));
            assert!(matches!(
                parse(&buf, None),
                Err(StartupFrameError::MissingEnhancedData { .. })
            ));
        }
    }

    #[test]
    fn s_with_rev1_is_a_reserved_bit() {
        // RFC 5044: Res not checked; S means nothing below Rev 2.
        let buf = with_key(&REQUEST_KEY, "10 01 00 00");
        let (f, _) = frame(&buf, None);
        assert!(f.flags.s && f.enhanced.is_none());
    }

    #[test]
    fn reserved_bits_and_r_in_request_kept_not_checked() {
        let buf = with_key(&REQUEST_KEY, "2f 02 00 00");
        let (f, _) = frame(&buf, Some(FrameKind::Request));
        assert!(f.flags.r);
        assert_eq!(f.flags.res, 0x0f);
        assert_eq!(f.to_bytes(Dialect::Rfc6581).unwrap(), buf);
    }

    #[test]
    fn need_more_and_trailing_octets_are_not_consumed() {
        let mut buf = with_key(&REPLY_KEY, "40 01 00 03 01 02 03");
        for cut in 0..buf.len() {
            assert_eq!(
                parse(&buf[..cut], None),
                Ok(Parsed::NeedMore(if cut < 20 { 20 - cut } else { 23 - cut }))
            );
        }
        buf.extend_from_slice(&[0, 0, 0, 0, 9]);
        let (f, used) = frame(&buf, None);
        assert_eq!(used, 23);
        assert_eq!(f.private_data, vec![1, 2, 3]);
    }

    #[test]
    fn incomplete_at_close_reports_truncation() {
        let buf = with_key(&REQUEST_KEY, "00 01 00 08 00 00 00 00");
        let opts = ParseOptions::default();
        assert_eq!(
            incomplete_at_close(&buf, &opts),
            Some(StartupFrameError::Truncated {
                received: 24,
                needed: 28
            })
        );
        assert_eq!(
            incomplete_at_close(&buf[..10], &opts),
            Some(StartupFrameError::Truncated {
                received: 10,
                needed: 20
            })
        );
        assert_eq!(incomplete_at_close(&[], &opts), None);
        assert!(matches!(
            incomplete_at_close(&with_key(&REPLY_KEY, "00 09 00 00"), &opts),
            Some(StartupFrameError::UnsupportedRev { rev: 9 })
        ));
    }

    #[test]
    fn encode_validates() {
        let mut f = StartupFrame::new(FrameKind::Request, 2);
        f.private_data = vec![0; 509];
        f.enhanced = Some(EnhancedData::new(1, 1).unwrap());
        f.flags.s = true;
        let mut out = Vec::new();
        assert_eq!(
            f.encode(&mut out),
            Err(EncodeError::PrivateDataTooLong { pd_length: 513 })
        );
        assert!(out.is_empty());
        f.private_data.truncate(508);
        assert!(f.encode(&mut out).is_ok());
        assert_eq!(out.len(), 532);
        f.flags.s = false;
        assert_eq!(f.encode(&mut out), Err(EncodeError::SBitMismatch));
        f.flags.s = true;
        f.rev = 1;
        assert_eq!(
            f.encode(&mut out),
            Err(EncodeError::EnhancedRequiresRev2 { rev: 1 })
        );
        let mut g = StartupFrame::new(FrameKind::Request, 2);
        g.flags.s = true;
        assert_eq!(g.encode(&mut out), Err(EncodeError::SBitMismatch));
        assert_eq!(g.to_bytes(Dialect::RtrFrame2007).unwrap().len(), 20);
        // Found by cargo fuzz: a Rev 1 Request with S set (a reserved bit below Rev 2)
        // parses without enhanced data and must re-encode to the same octets.
        let mut crash = REQUEST_KEY.to_vec();
        crash.extend_from_slice(&[0x71, 0x01, 0x00, 0x03, 0xc3, 0x93, 0x2f]);
        let Ok(Parsed::Frame { frame, consumed }) = parse(&crash, None) else {
            panic!("the Rev 1 frame with S parses");
        };
        assert_eq!(frame.enhanced, None);
        assert_eq!(consumed, crash.len());
        assert_eq!(frame.to_bytes(Dialect::Rfc6581).unwrap(), crash);
        assert_eq!(
            StartupFrame::new(FrameKind::Rtr, 1).to_bytes(Dialect::Rfc6581),
            Err(EncodeError::NotInDialect)
        );
    }

    fn arb_dialect() -> impl Strategy<Value = Dialect> {
        prop_oneof![
            Just(Dialect::Rfc6581),
            Just(Dialect::Draft2010),
            Just(Dialect::RtrFrame2007)
        ]
    }

    fn arb_frame() -> impl Strategy<Value = (StartupFrame, Dialect)> {
        (
            arb_dialect(),
            prop_oneof![
                Just(FrameKind::Request),
                Just(FrameKind::Reply),
                Just(FrameKind::Rtr)
            ],
            any::<u8>(),
            0u8..=2,
            any::<bool>(),
            0u16..=0x3fff,
            0u16..=0x3fff,
            0u8..8,
            proptest::collection::vec(any::<u8>(), 0..=512),
        )
            .prop_map(
                |(dialect, kind, flag_byte, rev, p2p, ird, ord, rtr, mut pd)| {
                    let kind = if dialect != Dialect::RtrFrame2007 && kind == FrameKind::Rtr {
                        FrameKind::Request
                    } else {
                        kind
                    };
                    let mut flags = Flags::from_byte(flag_byte);
                    let rtr = RtrTypes::from_types(
                        &RtrType::ALL
                            .iter()
                            .copied()
                            .filter(|t| rtr & t.bit() != 0)
                            .collect::<Vec<_>>(),
                    );
                    let enhanced = if dialect.s_means_enhanced_data() {
                        if flags.s && rev >= 2 {
                            pd.truncate(MAX_ENHANCED_ULP_PD_LENGTH);
                            Some(match dialect {
                                Dialect::Draft2010 => {
                                    EnhancedData::draft2010(ird, ord, rtr).unwrap()
                                }
                                _ if p2p => EnhancedData::peer_to_peer(ird, ord, rtr).unwrap(),
                                _ => EnhancedData::new(ird, ord).unwrap(),
                            })
                        } else {
                            flags.s = false;
                            None
                        }
                    } else {
                        None
                    };
                    (
                        StartupFrame {
                            kind,
                            flags,
                            rev,
                            enhanced,
                            private_data: pd,
                        },
                        dialect,
                    )
                },
            )
    }

    proptest! {
        #[test]
        fn round_trip((f, dialect) in arb_frame(), tail in proptest::collection::vec(any::<u8>(), 0..16)) {
            let mut bytes = f.to_bytes(dialect).unwrap();
            let len = bytes.len();
            bytes.extend_from_slice(&tail);
            let opts = ParseOptions { dialect, ..ParseOptions::new(Some(f.kind)) };
            prop_assert_eq!(parse_with(&bytes, &opts), Ok(Parsed::Frame { frame: f, consumed: len }));
        }

        #[test]
        fn enhanced_word_round_trip(word in any::<[u8; 4]>(), dialect in arb_dialect()) {
            let e = EnhancedData::decode(word, dialect);
            prop_assert_eq!(EnhancedData::decode(e.encode(dialect), dialect), e);
        }

        #[test]
        fn never_panics(buf in proptest::collection::vec(any::<u8>(), 0..600), dialect in arb_dialect(), which in 0u8..4) {
            let expected = match which { 0 => None, 1 => Some(FrameKind::Request), 2 => Some(FrameKind::Reply), _ => Some(FrameKind::Rtr) };
            let opts = ParseOptions { dialect, ..ParseOptions::new(expected) };
            let _ = parse_with(&buf, &opts);
            let _ = incomplete_at_close(&buf, &opts);
        }

        #[test]
        fn never_panics_with_valid_key(kind in 0u8..2, rest in proptest::collection::vec(any::<u8>(), 0..600)) {
            let mut buf = if kind == 0 { REQUEST_KEY.to_vec() } else { REPLY_KEY.to_vec() };
            buf.extend(rest);
            if let Ok(Parsed::Frame { consumed, .. }) = parse(&buf, None) {
                prop_assert!(consumed <= buf.len() && consumed <= HEADER_LEN + MAX_PD_LENGTH);
            }
        }

        #[test]
        fn split_anywhere_streaming((f, dialect) in arb_frame(), cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..6)) {
            let bytes = f.to_bytes(dialect).unwrap();
            let opts = ParseOptions { dialect, ..ParseOptions::new(Some(f.kind)) };
            let mut points: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
            points.push(bytes.len());
            points.sort_unstable();
            let mut got = None;
            for p in points {
                match parse_with(&bytes[..p], &opts).unwrap() {
                    Parsed::NeedMore(n) => {
                        prop_assert!(p < bytes.len());
                        prop_assert!(n >= 1 && p + n <= bytes.len());
                    }
                    Parsed::Frame { frame, consumed } => {
                        prop_assert_eq!(p, bytes.len());
                        prop_assert_eq!(consumed, bytes.len());
                        got = Some(frame);
                    }
                }
            }
            prop_assert_eq!(got, Some(f));
        }
    }
}
