//! The few DDP/RDMAP ULPDUs the startup machines build and recognise: the zero-length RTR
//! messages of RFC 6581 9.2, the zero-length RDMA Read Response that answers a Read RTR,
//! and the MPA-layer Terminate (Layer 2, EType 0) of RFC 6581 8.
//!
//! A thin private adapter over `wire::rdmap`: every use in the machines goes through
//! the functions below.
//!
//! Layouts (RFC 5041 section 4, RFC 5040 section 4):
//!
//! ```text
//! DDP control octet: |T|L|Rsvd(4)|DV(2)|        DV = 01
//! RDMAP control octet: |RV(2)|Rsv(2)|Opcode(4)|  RV = 01
//! tagged   (14): ctrl rdmap STag(4) TO(8)
//! untagged (18): ctrl rdmap RsvdULP(4) QN(4) MSN(4) MO(4)
//! RDMA Read Request payload (28): sink STag(4) sink TO(8) size(4) source STag(4) source TO(8)
//! Terminate payload: Layer(4) EType(4) ErrorCode(8) |M|D|R| Reserved(13)
//! ```

use wire::ddp::DdpHeader;
use wire::mpa::MpaErrorCode;
use wire::rdmap::{self, Body, ReadRequest, RtrKind, Terminate};

/// Zero-length Send RTR: untagged, QN 0, MSN `msn`, MO 0, L = 1.
pub(crate) fn zero_length_send(msn: u32) -> Vec<u8> {
    rdmap::zero_length_send(msn)
}

/// Zero-length RDMA Write RTR to `stag`, TO 0.
pub(crate) fn zero_length_write(stag: u32) -> Vec<u8> {
    rdmap::zero_length_write(stag)
}

/// Zero-length RDMA Read Request RTR: QN 1, sink (`sink_stag`, TO 0), size 0, source
/// (`source_stag`, TO 0).
pub(crate) fn zero_length_read_request(msn: u32, sink_stag: u32, source_stag: u32) -> Vec<u8> {
    rdmap::zero_length_read_request(msn, sink_stag, 0, source_stag, 0)
}

/// Zero-length RDMA Read Response to the Read Request whose sink was (`stag`, `to`).
pub(crate) fn zero_length_read_response(stag: u32, to: u64) -> Vec<u8> {
    rdmap::zero_length_read_response(&ReadRequest {
        sink_stag: stag,
        sink_to: to,
        ..ReadRequest::default()
    })
}

/// Terminate, Layer 2 (LLP) / EType 0 (MPA) / `code`, no copied headers (M = D = R = 0):
/// QN 2, MSN `msn`, MO 0, L = 1.
pub(crate) fn mpa_terminate(code: MpaErrorCode, msn: u32) -> Vec<u8> {
    rdmap::terminate_ulpdu(&Terminate::llp_mpa(code), msn)
}

/// What a received ULPDU is, as far as the startup machines care.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ulpdu {
    /// Zero-length Send (opcode Send, QN 0, MO 0, L = 1, no payload) with its MSN.
    ZeroLengthSend { msn: u32 },
    /// Zero-length RDMA Write (tagged, L = 1, no payload).
    ZeroLengthWrite,
    /// RDMA Read Request for 0 octets.
    ZeroLengthReadRequest {
        msn: u32,
        sink_stag: u32,
        sink_to: u64,
    },
    /// A Terminate message.
    Terminate { layer: u8, etype: u8, code: u8 },
    /// Anything else (including malformed DDP/RDMAP headers).
    Other,
}

/// Classifies a received ULPDU (a DDP segment). Never panics.
pub(crate) fn classify(ulpdu: &[u8]) -> Ulpdu {
    let Ok(seg) = rdmap::parse_segment(ulpdu) else {
        return Ulpdu::Other;
    };
    let msn = match seg.header {
        DdpHeader::Untagged(h) => h.msn,
        DdpHeader::Tagged(_) => 0,
    };
    if let Body::Terminate { terminate, .. } = seg.body {
        let (layer, etype, code) = terminate.error.triple();
        return Ulpdu::Terminate { layer, etype, code };
    }
    match (seg.rtr_kind(), seg.body) {
        (Some(RtrKind::Send), _) => Ulpdu::ZeroLengthSend { msn },
        (Some(RtrKind::RdmaWrite), _) => Ulpdu::ZeroLengthWrite,
        (Some(RtrKind::RdmaReadRequest), Body::ReadRequest(r)) => Ulpdu::ZeroLengthReadRequest {
            msn,
            sink_stag: r.sink_stag,
            sink_to: r.sink_to,
        },
        _ => Ulpdu::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builders_match_siw_captures() {
        // siw peer_to_peer=Y: "000e c140 00000001 0000000000000000 00000000" (FPDU);
        // the ULPDU is the 14 octets after ULPDU_Length.
        assert_eq!(
            zero_length_write(1),
            [0xc1, 0x40, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(
            &zero_length_send(1)[..],
            &[0x41, 0x43, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0]
        );
        let t = mpa_terminate(MpaErrorCode::InsufficientIrd, 1);
        assert_eq!(t.len(), 22);
        assert_eq!(&t[..2], &[0x41, 0x47]);
        assert_eq!(&t[18..], &[0x20, 6, 0, 0]);
    }

    #[test]
    fn classify_round_trips_builders() {
        assert_eq!(
            classify(&zero_length_send(1)),
            Ulpdu::ZeroLengthSend { msn: 1 }
        );
        assert_eq!(classify(&zero_length_write(7)), Ulpdu::ZeroLengthWrite);
        assert_eq!(
            classify(&zero_length_read_request(1, 5, 6)),
            Ulpdu::ZeroLengthReadRequest {
                msn: 1,
                sink_stag: 5,
                sink_to: 0
            }
        );
        assert_eq!(
            classify(&mpa_terminate(MpaErrorCode::NoMatchingRtr, 1)),
            Ulpdu::Terminate {
                layer: 2,
                etype: 0,
                code: 7
            }
        );
        assert_eq!(classify(&zero_length_read_response(1, 0)), Ulpdu::Other);
        let mut send_with_data = zero_length_send(1);
        send_with_data.push(0);
        assert_eq!(classify(&send_with_data), Ulpdu::Other);
        for n in 0..40 {
            let _ = classify(&vec![0xff; n]);
            let _ = classify(&vec![0x41; n]);
        }
    }
}
