//! MPA: Marker PDU Aligned framing for TCP (RFC 5044), with the enhanced connection
//! establishment of RFC 6581.
//!
//! * [`startup`]: the MPA Request and Reply frames exchanged in streaming mode.
//! * [`fpdu`]: FPDU layout, markers, MULPDU and the transmit-side [`fpdu::Framer`].
//! * [`deframe`]: the receive-side [`deframe::Deframer`].

pub mod deframe;
pub mod fpdu;
pub mod startup;

use std::fmt;

/// MPA error codes (RFC 5044 section 8, extended by RFC 6581 section 8).
///
/// These are reported to DDP/the ULP and carried in a Terminate message with
/// Layer 2 (LLP) and Error Type 0 (MPA).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum MpaErrorCode {
    /// 1: TCP connection closed, terminated or lost.
    TcpClosed = 1,
    /// 2: received MPA CRC does not match the calculated value for the FPDU.
    CrcMismatch = 2,
    /// 3: an MPA Marker and the ULPDU_Length fields disagree on the start of an FPDU.
    MarkerMismatch = 3,
    /// 4: invalid MPA Request Frame or MPA Reply Frame received.
    InvalidStartupFrame = 4,
    /// 5: local catastrophic error (RFC 6581).
    LocalCatastrophic = 5,
    /// 6: insufficient IRD resources (RFC 6581).
    InsufficientIrd = 6,
    /// 7: no matching RTR option (RFC 6581).
    NoMatchingRtr = 7,
}

impl MpaErrorCode {
    /// The numeric code as carried in a Terminate's Error Code field.
    pub const fn code(self) -> u8 {
        self as u8
    }

    /// Parses a numeric MPA error code; `None` for codes RFC 5044/6581 do not define.
    pub const fn from_code(code: u8) -> Option<Self> {
        Some(match code {
            1 => Self::TcpClosed,
            2 => Self::CrcMismatch,
            3 => Self::MarkerMismatch,
            4 => Self::InvalidStartupFrame,
            5 => Self::LocalCatastrophic,
            6 => Self::InsufficientIrd,
            7 => Self::NoMatchingRtr,
            _ => return None,
        })
    }

    /// A short human-readable description.
    pub const fn description(self) -> &'static str {
        match self {
            Self::TcpClosed => "TCP connection closed, terminated or lost",
            Self::CrcMismatch => "FPDU CRC mismatch",
            Self::MarkerMismatch => "marker and ULPDU_Length disagree on an FPDU start",
            Self::InvalidStartupFrame => "invalid MPA Request or Reply frame",
            Self::LocalCatastrophic => "local catastrophic error",
            Self::InsufficientIrd => "insufficient IRD resources",
            Self::NoMatchingRtr => "no matching RTR option",
        }
    }
}

impl fmt::Display for MpaErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MPA error {}: {}", self.code(), self.description())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_codes_round_trip_and_reject_unknown() {
        for c in 1..=7u8 {
            assert_eq!(MpaErrorCode::from_code(c).unwrap().code(), c);
        }
        assert_eq!(MpaErrorCode::from_code(0), None);
        assert_eq!(MpaErrorCode::from_code(8), None);
    }
}
