//! MPA: Marker PDU Aligned framing for TCP (RFC 5044), with the enhanced connection
//! establishment of RFC 6581.
//!
//! * [`startup_frame`]: the MPA Request and Reply frames exchanged in streaming mode.
//! * [`fpdu`]: FPDU layout, markers, MULPDU and the transmit-side [`fpdu::Framer`].
//! * [`deframe`]: the receive-side [`deframe::Deframer`].

pub mod deframe;
pub mod fpdu;
pub mod startup_frame;

use std::fmt;

code_table! {
    /// MPA error codes (RFC 5044 section 8, extended by RFC 6581 section 8).
    ///
    /// These are reported to DDP/the ULP and carried in a Terminate message with
    /// Layer 2 (LLP) and Error Type 0 (MPA).
    pub enum MpaErrorCode => description {
        /// 1: TCP connection closed, terminated or lost.
        TcpClosed = 1 => "TCP connection closed, terminated or lost",
        /// 2: received MPA CRC does not match the calculated value for the FPDU.
        CrcMismatch = 2 => "FPDU CRC mismatch",
        /// 3: an MPA Marker and the ULPDU_Length fields disagree on the start of an FPDU.
        MarkerMismatch = 3 => "marker and ULPDU_Length disagree on an FPDU start",
        /// 4: invalid MPA Request Frame or MPA Reply Frame received.
        InvalidStartupFrame = 4 => "invalid MPA Request or Reply frame",
        /// 5: local catastrophic error (RFC 6581).
        LocalCatastrophic = 5 => "local catastrophic error",
        /// 6: insufficient IRD resources (RFC 6581).
        InsufficientIrd = 6 => "insufficient IRD resources",
        /// 7: no matching RTR option (RFC 6581).
        NoMatchingRtr = 7 => "no matching RTR option",
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
