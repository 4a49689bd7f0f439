//! Peer-to-peer ready-to-receive, end to end (RFC 6581 section 9.2).
//!
//! In the peer-to-peer model the Initiator's first FPDU is an RTR message and the
//! Responder sends nothing in FPDU mode until it has arrived. In the order a connection
//! meets it:
//!
//! 1. **The flags.** The Request's enhanced word offers the RTR types the Initiator can
//!    send (control flags A, B, C: zero-length Write, zero-length Read, zero-length Send),
//!    the Reply's says which the Responder accepts: [`RtrTypes`] over
//!    [`RtrType`]. The 2010 draft's A/B/C and the 2007 "Rtr Frame" proposal are dialects
//!    of the same exchange ([`Dialect`](wire::mpa::startup_frame::Dialect)).
//! 2. **The Responder's choice**: [`responder_rtr_flags`].
//! 3. **The Initiator's choice**: [`choose_initiator_rtr`]; none in common is TERM
//!    Layer 2 / EType 0 / code 7 (no matching RTR).
//! 4. **The messages** ([`zero_length_send`], [`zero_length_write`],
//!    [`zero_length_read_request`], and [`zero_length_read_response`] which answers a
//!    Read RTR), and their recognition on the Responder's side ([`classify`]); STag
//!    [`DEFAULT_RTR_STAG`], order of preference [`DEFAULT_RTR_PREFERENCE`].
//! 5. **Timing.** The Responder waits for the RTR at most its `rtr_timeout`
//!    ([`ResponderConfig`](crate::startup::ResponderConfig)); the Initiator may wait
//!    `first_fpdu_delay` before sending it (Linux siw may miss an FPDU that follows its
//!    Reply at once).
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
pub use wire::mpa::startup_frame::{RtrType, RtrTypes};
use wire::rdmap::{self, Body, ReadRequest, RtrKind};

/// Zero-length Send RTR: untagged, QN 0, MSN `msn`, MO 0, L = 1.
pub fn zero_length_send(msn: u32) -> Vec<u8> {
    rdmap::zero_length_send(msn)
}

/// Zero-length RDMA Write RTR to `stag`, TO 0.
pub fn zero_length_write(stag: u32) -> Vec<u8> {
    rdmap::zero_length_write(stag)
}

/// Zero-length RDMA Read Request RTR: QN 1, sink (`sink_stag`, TO 0), size 0, source
/// (`source_stag`, TO 0).
pub fn zero_length_read_request(msn: u32, sink_stag: u32, source_stag: u32) -> Vec<u8> {
    rdmap::zero_length_read_request(msn, sink_stag, 0, source_stag, 0)
}

/// Zero-length RDMA Read Response to the Read Request whose sink was (`stag`, `to`).
pub fn zero_length_read_response(stag: u32, to: u64) -> Vec<u8> {
    rdmap::zero_length_read_response(&ReadRequest {
        sink_stag: stag,
        sink_to: to,
        ..ReadRequest::default()
    })
}

/// What the first ULPDU a peer-to-peer Responder receives is, as far as RTR cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FirstUlpdu {
    /// Zero-length Send (opcode Send, QN 0, MO 0, L = 1, no payload).
    ZeroLengthSend {
        /// Its MSN (1 for an RTR).
        msn: u32,
    },
    /// Zero-length RDMA Write (tagged, L = 1, no payload).
    ZeroLengthWrite,
    /// RDMA Read Request for 0 octets.
    ZeroLengthReadRequest {
        /// Its MSN (1 for an RTR).
        msn: u32,
        /// The Data Sink STag the Read Response goes to.
        sink_stag: u32,
        /// The Data Sink tagged offset.
        sink_to: u64,
    },
    /// A Terminate message.
    Terminate {
        /// Its Layer.
        layer: u8,
        /// Its Error Type.
        etype: u8,
        /// Its Error Code.
        code: u8,
    },
    /// Anything else (including malformed DDP/RDMAP headers).
    Other,
}

/// Classifies a received ULPDU (a DDP segment). Never panics.
pub fn classify(ulpdu: &[u8]) -> FirstUlpdu {
    let Ok(seg) = rdmap::parse_segment(ulpdu) else {
        return FirstUlpdu::Other;
    };
    let msn = match seg.header {
        DdpHeader::Untagged(h) => h.msn,
        DdpHeader::Tagged(_) => 0,
    };
    if let Body::Terminate { terminate, .. } = seg.body {
        let (layer, etype, code) = terminate.error.triple();
        return FirstUlpdu::Terminate { layer, etype, code };
    }
    match (seg.rtr_kind(), seg.body) {
        (Some(RtrKind::Send), _) => FirstUlpdu::ZeroLengthSend { msn },
        (Some(RtrKind::RdmaWrite), _) => FirstUlpdu::ZeroLengthWrite,
        (Some(RtrKind::RdmaReadRequest), Body::ReadRequest(r)) => {
            FirstUlpdu::ZeroLengthReadRequest {
                msn,
                sink_stag: r.sink_stag,
                sink_to: r.sink_to,
            }
        }
        _ => FirstUlpdu::Other,
    }
}

/// Default STag of the zero-length RDMA Write RTR and of the Read RTR's sink and source:
/// 1, because hardware peers (Chelsio) reject tagged segments with STag 0; Linux siw sends 1.
pub const DEFAULT_RTR_STAG: u32 = 1;
/// Default RTR preference: Write, then Read, then Send (Linux siw's order).
pub const DEFAULT_RTR_PREFERENCE: [RtrType; 3] = [RtrType::Write, RtrType::Read, RtrType::Send];

/// RTR flags for a peer-to-peer Reply (RFC 6581 9.2), from the `offered` types, the
/// `supported` ones and the `preference` order:
///
/// * `all_common`: "For each initiator-supported RTR indication option, the responder
///   SHOULD set the corresponding Control Flag if the responder can support that option";
///   otherwise only the most preferred common type (what siw and Chelsio do; "The responder
///   is not required to specify all RTR indication options it supports").
/// * nothing in common: "If the responder does not support any of the initiator-specified
///   RTR indication options, then the responder MUST set at least one RTR indication type
///   option it supports": the most preferred supported type.
pub fn responder_rtr_flags(
    offered: RtrTypes,
    supported: RtrTypes,
    preference: &[RtrType],
    all_common: bool,
) -> RtrTypes {
    let common = offered.intersection(supported);
    let pick = |set: RtrTypes| {
        preference
            .iter()
            .copied()
            .find(|t| set.contains(*t))
            .or_else(|| set.iter().next())
    };
    if common.is_empty() {
        return pick(supported).map_or(RtrTypes::NONE, |t| RtrTypes::NONE.with(t));
    }
    if all_common {
        common
    } else {
        pick(common).map_or(RtrTypes::NONE, |t| RtrTypes::NONE.with(t))
    }
}

/// The RTR the Initiator sends (RFC 6581 9.2: "the initiator MUST generate one of the
/// negotiated RTR indications"; 1.1: "the initiator selects one of the supported RDMA
/// message types as the RTR indication at the initiator's sole discretion"): the most
/// preferred type that the Reply allows and this side can send. A Read RTR is left out when
/// the responder IRD is 0 (our ORD would be 0). `None`: TERM 2/0/7.
pub fn choose_initiator_rtr(
    allowed: RtrTypes,
    local: RtrTypes,
    preference: &[RtrType],
    responder_ird: Option<u16>,
) -> Option<RtrType> {
    let mut common = allowed.intersection(local);
    if responder_ird == Some(0) {
        common = common.without(RtrType::Read);
    }
    preference
        .iter()
        .copied()
        .find(|t| common.contains(*t))
        .or_else(|| common.iter().next())
}

#[cfg(test)]
mod tests {
    use super::*;
    use DEFAULT_RTR_PREFERENCE as PREF;

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
    }

    #[test]
    fn classify_round_trips_builders() {
        assert_eq!(
            classify(&zero_length_send(1)),
            FirstUlpdu::ZeroLengthSend { msn: 1 }
        );
        assert_eq!(classify(&zero_length_write(7)), FirstUlpdu::ZeroLengthWrite);
        assert_eq!(
            classify(&zero_length_read_request(1, 5, 6)),
            FirstUlpdu::ZeroLengthReadRequest {
                msn: 1,
                sink_stag: 5,
                sink_to: 0
            }
        );
        assert_eq!(
            classify(&wire::rdmap::terminate_ulpdu(
                &wire::rdmap::Terminate::llp_mpa(wire::mpa::MpaErrorCode::NoMatchingRtr),
                1
            )),
            FirstUlpdu::Terminate {
                layer: 2,
                etype: 0,
                code: 7
            }
        );
        assert_eq!(
            classify(&zero_length_read_response(1, 0)),
            FirstUlpdu::Other
        );
        let mut send_with_data = zero_length_send(1);
        send_with_data.push(0);
        assert_eq!(classify(&send_with_data), FirstUlpdu::Other);
        for n in 0..40 {
            let _ = classify(&vec![0xff; n]);
            let _ = classify(&vec![0x41; n]);
        }
    }

    #[test]
    fn rtr_flag_selection() {
        let wr = RtrTypes::WRITE_READ;
        assert_eq!(responder_rtr_flags(wr, RtrTypes::ALL, &PREF, true), wr);
        assert_eq!(
            responder_rtr_flags(wr, RtrTypes::ALL, &PREF, false),
            RtrTypes::NONE.with(RtrType::Write)
        );
        // Only Send offered, Send supported: Send (unlike siw, which answers Write).
        let send = RtrTypes::NONE.with(RtrType::Send);
        assert_eq!(responder_rtr_flags(send, RtrTypes::ALL, &PREF, false), send);
        // Nothing offered: at least one supported type.
        assert_eq!(
            responder_rtr_flags(RtrTypes::NONE, RtrTypes::ALL, &PREF, true),
            RtrTypes::NONE.with(RtrType::Write)
        );
        assert_eq!(
            choose_initiator_rtr(wr, RtrTypes::ALL, &PREF, Some(16)),
            Some(RtrType::Write)
        );
        assert_eq!(
            choose_initiator_rtr(RtrTypes::NONE.with(RtrType::Read), wr, &PREF, Some(0)),
            None
        );
        assert_eq!(choose_initiator_rtr(send, wr, &PREF, None), None);
    }
}
