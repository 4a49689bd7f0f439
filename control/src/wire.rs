//! The few DDP/RDMAP ULPDUs the startup machines build and recognise: the zero-length RTR
//! messages of RFC 6581 9.2, the zero-length RDMA Read Response that answers a Read RTR,
//! and the MPA-layer Terminate (Layer 2, EType 0) of RFC 6581 8.
//!
//! Kept private and small so it can be swapped for `dataplane::rdmap` once that lands: every
//! use goes through the functions below.
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

use dataplane::mpa::MpaErrorCode;

const DDP_T: u8 = 0x80;
const DDP_L: u8 = 0x40;
const DDP_DV_MASK: u8 = 0x03;
const DDP_DV: u8 = 0x01;
const RDMAP_RV: u8 = 0x40;
const RDMAP_RV_MASK: u8 = 0xC0;
const RDMAP_OPCODE_MASK: u8 = 0x0F;

const OP_RDMA_WRITE: u8 = 0x0;
const OP_RDMA_READ_REQUEST: u8 = 0x1;
const OP_RDMA_READ_RESPONSE: u8 = 0x2;
const OP_SEND: u8 = 0x3;
const OP_TERMINATE: u8 = 0x7;

/// QN of Send messages.
const QN_SEND: u32 = 0;
/// QN of RDMA Read Requests.
const QN_READ_REQUEST: u32 = 1;
/// QN of Terminate messages.
const QN_TERMINATE: u32 = 2;

const TAGGED_HDR_LEN: usize = 14;
const UNTAGGED_HDR_LEN: usize = 18;
const READ_REQUEST_PAYLOAD_LEN: usize = 28;
const TERMINATE_CTRL_LEN: usize = 4;

/// Terminate Layer 2: LLP (MPA); EType 0: MPA (RFC 6581 section 8).
const TERM_LAYER_LLP: u8 = 0x2;
const TERM_ETYPE_MPA: u8 = 0x0;

fn tagged(opcode: u8, stag: u32, to: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(TAGGED_HDR_LEN);
    v.push(DDP_T | DDP_L | DDP_DV);
    v.push(RDMAP_RV | opcode);
    v.extend_from_slice(&stag.to_be_bytes());
    v.extend_from_slice(&to.to_be_bytes());
    v
}

fn untagged(opcode: u8, qn: u32, msn: u32) -> Vec<u8> {
    let mut v = Vec::with_capacity(UNTAGGED_HDR_LEN);
    v.push(DDP_L | DDP_DV);
    v.push(RDMAP_RV | opcode);
    v.extend_from_slice(&0u32.to_be_bytes()); // RsvdULP
    v.extend_from_slice(&qn.to_be_bytes());
    v.extend_from_slice(&msn.to_be_bytes());
    v.extend_from_slice(&0u32.to_be_bytes()); // MO
    v
}

/// Zero-length Send RTR: untagged, QN 0, MSN 1, MO 0, L = 1.
pub(crate) fn zero_length_send(msn: u32) -> Vec<u8> {
    untagged(OP_SEND, QN_SEND, msn)
}

/// Zero-length RDMA Write RTR to `stag`, TO 0.
pub(crate) fn zero_length_write(stag: u32) -> Vec<u8> {
    tagged(OP_RDMA_WRITE, stag, 0)
}

/// Zero-length RDMA Read Request RTR: QN 1, sink (`sink_stag`, TO 0), size 0, source
/// (`source_stag`, TO 0).
pub(crate) fn zero_length_read_request(msn: u32, sink_stag: u32, source_stag: u32) -> Vec<u8> {
    let mut v = untagged(OP_RDMA_READ_REQUEST, QN_READ_REQUEST, msn);
    v.extend_from_slice(&sink_stag.to_be_bytes());
    v.extend_from_slice(&0u64.to_be_bytes());
    v.extend_from_slice(&0u32.to_be_bytes());
    v.extend_from_slice(&source_stag.to_be_bytes());
    v.extend_from_slice(&0u64.to_be_bytes());
    v
}

/// Zero-length RDMA Read Response to the Read Request whose sink was (`stag`, `to`).
pub(crate) fn zero_length_read_response(stag: u32, to: u64) -> Vec<u8> {
    tagged(OP_RDMA_READ_RESPONSE, stag, to)
}

/// Terminate, Layer 2 (LLP) / EType 0 (MPA) / `code`, no copied headers (M = D = R = 0):
/// QN 2, MSN `msn`, MO 0, L = 1.
pub(crate) fn mpa_terminate(code: MpaErrorCode, msn: u32) -> Vec<u8> {
    let mut v = untagged(OP_TERMINATE, QN_TERMINATE, msn);
    v.push((TERM_LAYER_LLP << 4) | TERM_ETYPE_MPA);
    v.push(code.code());
    v.extend_from_slice(&[0, 0]);
    v
}

/// What a received ULPDU is, as far as the startup machines care.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ulpdu {
    /// Zero-length Send (opcode Send, QN 0, MO 0, L = 1, no payload) with its MSN.
    ZeroLengthSend { msn: u32 },
    /// Zero-length RDMA Write (tagged, L = 1, no payload).
    ZeroLengthWrite { stag: u32 },
    /// RDMA Read Request (QN 1, MO 0, L = 1) for 0 octets.
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

fn be32(b: &[u8], at: usize) -> Option<u32> {
    b.get(at..at + 4)?.try_into().ok().map(u32::from_be_bytes)
}

fn be64(b: &[u8], at: usize) -> Option<u64> {
    b.get(at..at + 8)?.try_into().ok().map(u64::from_be_bytes)
}

/// Classifies a received ULPDU (a DDP segment). Never panics.
pub(crate) fn classify(ulpdu: &[u8]) -> Ulpdu {
    classify_inner(ulpdu).unwrap_or(Ulpdu::Other)
}

fn classify_inner(u: &[u8]) -> Option<Ulpdu> {
    let (&ddp, rest) = u.split_first()?;
    let &rdmap = rest.first()?;
    if ddp & DDP_DV_MASK != DDP_DV || rdmap & RDMAP_RV_MASK != RDMAP_RV {
        return Some(Ulpdu::Other);
    }
    let opcode = rdmap & RDMAP_OPCODE_MASK;
    let last = ddp & DDP_L != 0;
    if ddp & DDP_T != 0 {
        if opcode == OP_RDMA_WRITE && last && u.len() == TAGGED_HDR_LEN {
            return Some(Ulpdu::ZeroLengthWrite { stag: be32(u, 2)? });
        }
        return Some(Ulpdu::Other);
    }
    let qn = be32(u, 6)?;
    let msn = be32(u, 10)?;
    let mo = be32(u, 14)?;
    match opcode {
        OP_SEND if last && qn == QN_SEND && mo == 0 && u.len() == UNTAGGED_HDR_LEN => {
            Some(Ulpdu::ZeroLengthSend { msn })
        }
        OP_RDMA_READ_REQUEST
            if last
                && qn == QN_READ_REQUEST
                && mo == 0
                && u.len() == UNTAGGED_HDR_LEN + READ_REQUEST_PAYLOAD_LEN
                && be32(u, UNTAGGED_HDR_LEN + 12)? == 0 =>
        {
            Some(Ulpdu::ZeroLengthReadRequest {
                msn,
                sink_stag: be32(u, UNTAGGED_HDR_LEN)?,
                sink_to: be64(u, UNTAGGED_HDR_LEN + 4)?,
            })
        }
        OP_TERMINATE if qn == QN_TERMINATE && u.len() >= UNTAGGED_HDR_LEN + TERMINATE_CTRL_LEN => {
            let le = *u.get(UNTAGGED_HDR_LEN)?;
            Some(Ulpdu::Terminate {
                layer: le >> 4,
                etype: le & 0x0F,
                code: *u.get(UNTAGGED_HDR_LEN + 1)?,
            })
        }
        _ => Some(Ulpdu::Other),
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
        assert_eq!(
            classify(&zero_length_write(7)),
            Ulpdu::ZeroLengthWrite { stag: 7 }
        );
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
