//! The pure negotiation rules of RFC 6581 section 9: IRD/ORD (9.1) and RTR types (9.2).

use super::{RtrType, RtrTypes, IRD_ORD_NO_NEGOTIATION};

/// The Responder's side of RFC 6581 9.1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ResponderIrdOrd {
    /// IRD to put in the Reply.
    pub reply_ird: u16,
    /// ORD to put in the Reply.
    pub reply_ord: u16,
    /// The local endpoint's IRD.
    pub local_ird: u16,
    /// The local endpoint's ORD.
    pub local_ord: u16,
    /// The initiator IRD is below the ULP-required ORD: reject, with the required ORD in
    /// the Reply's ORD.
    pub reject_insufficient_initiator_ird: bool,
}

/// Responder IRD/ORD from the Request's initiator IRD/ORD and the local wishes
/// (`local_ird`, `local_ord`) and limits (`max_ird`, `max_ord`), per RFC 6581 9.1:
///
/// * initiator ORD 0x3FFF: "The responder MUST respond to an initiator ORD value of 0x3FFF
///   by leaving its local endpoint IRD value unchanged and setting the IRD to 0x3FFF in its
///   reply message."
/// * otherwise the responder IRD is at least the initiator ORD ("This value is greater than
///   or equal to the initiator ORD for successful negotiations"; "the responder IRD MAY be
///   increased") as far as `max_ird` allows, and at least 1 when `read_rtr` (a Read RTR
///   needs one IRRQ slot: "the responder IRD can be set to 1").
/// * initiator IRD 0x3FFF: "The responder MUST respond to an initiator IRD value of 0x3FFF
///   by leaving its local endpoint ORD value unchanged, and setting ORD to 0x3FFF in its
///   reply message."
/// * otherwise "The responder MUST set its ORD at most to the initiator IRD" (and at most
///   `max_ord`).
/// * `required_ord`: "The responder MAY reject the connection request if the initiator IRD
///   is not sufficient for the ULP-required ORD and specify the required ORD in the MPA
///   Reject Frame responder ORD."
#[allow(clippy::too_many_arguments)]
pub fn responder_ird_ord(
    initiator_ird: u16,
    initiator_ord: u16,
    local_ird: u16,
    local_ord: u16,
    max_ird: u16,
    max_ord: u16,
    read_rtr: bool,
    required_ord: Option<u16>,
) -> ResponderIrdOrd {
    let (reply_ird, out_ird) = if initiator_ord == IRD_ORD_NO_NEGOTIATION {
        (IRD_ORD_NO_NEGOTIATION, local_ird)
    } else {
        let mut ird = local_ird.max(initiator_ord).min(max_ird);
        if read_rtr {
            ird = ird.max(1.min(max_ird));
        }
        (ird, ird)
    };
    let (mut reply_ord, out_ord) = if initiator_ird == IRD_ORD_NO_NEGOTIATION {
        (IRD_ORD_NO_NEGOTIATION, local_ord)
    } else {
        let ord = local_ord.min(initiator_ird).min(max_ord);
        (ord, ord)
    };
    let mut reject = false;
    if let Some(req) = required_ord {
        if initiator_ird != IRD_ORD_NO_NEGOTIATION && initiator_ird < req {
            reject = true;
            reply_ord = req.min(super::MAX_IRD_ORD);
        }
    }
    ResponderIrdOrd {
        reply_ird,
        reply_ord,
        local_ird: out_ird,
        local_ord: out_ord,
        reject_insufficient_initiator_ird: reject,
    }
}

/// The Initiator's side of RFC 6581 9.1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct InitiatorIrdOrd {
    /// The local endpoint's IRD.
    pub local_ird: u16,
    /// The local endpoint's ORD.
    pub local_ord: u16,
    /// The responder ORD needs more IRD than `max_ird`: TERM 2/0/6 and terminate.
    pub insufficient_ird: Option<u16>,
}

/// Initiator IRD/ORD from the Reply, per RFC 6581 9.1:
///
/// * "the initiator MUST set its IRD at least to the responder ORD and its ORD at most to
///   the responder IRD. If the initiator does not have sufficient resources for the
///   required IRD, it MUST send a TERM message ... Error Code 6."
/// * "The initiator MUST leave its local endpoint ORD value unchanged upon receiving a
///   responder IRD value of 0x3FFF" and "... its local endpoint IRD value unchanged upon
///   receiving a responder ORD value of 0x3FFF."
/// * A value this side sent as 0x3FFF was left to the ULP and stays so.
pub fn initiator_ird_ord(
    sent_ird: u16,
    sent_ord: u16,
    responder_ird: u16,
    responder_ord: u16,
    max_ird: u16,
) -> InitiatorIrdOrd {
    let local_ord = if responder_ird == IRD_ORD_NO_NEGOTIATION || sent_ord == IRD_ORD_NO_NEGOTIATION
    {
        sent_ord
    } else {
        sent_ord.min(responder_ird)
    };
    let mut insufficient_ird = None;
    let local_ird = if responder_ord == IRD_ORD_NO_NEGOTIATION || sent_ird == IRD_ORD_NO_NEGOTIATION
    {
        sent_ird
    } else {
        if responder_ord > max_ird {
            insufficient_ird = Some(responder_ord);
            sent_ird
        } else {
            sent_ird.max(responder_ord)
        }
    };
    InitiatorIrdOrd {
        local_ird,
        local_ord,
        insufficient_ird,
    }
}

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
    use crate::startup::DEFAULT_RTR_PREFERENCE as PREF;

    const NN: u16 = IRD_ORD_NO_NEGOTIATION;

    #[test]
    fn responder_ird_at_least_initiator_ord_within_max() {
        let r = responder_ird_ord(16, 16, 0, 0, 128, 128, false, None);
        assert_eq!((r.reply_ird, r.reply_ord), (16, 0));
        let r = responder_ird_ord(16, 200, 4, 32, 128, 128, false, None);
        assert_eq!((r.reply_ird, r.reply_ord), (128, 16));
        let r = responder_ird_ord(1, 1, 0, 0, 128, 128, true, None);
        assert_eq!(r.reply_ird, 1);
        let r = responder_ird_ord(1, 0, 0, 0, 128, 128, true, None);
        assert_eq!(r.reply_ird, 1, "Read RTR needs IRD >= 1");
    }

    #[test]
    fn responder_ord_at_most_initiator_ird() {
        let r = responder_ird_ord(2, 0, 0, 8, 128, 128, false, None);
        assert_eq!((r.reply_ord, r.local_ord), (2, 2));
    }

    #[test]
    fn responder_0x3fff_both_ways() {
        let r = responder_ird_ord(NN, NN, 5, 6, 128, 128, false, None);
        assert_eq!((r.reply_ird, r.reply_ord), (NN, NN));
        assert_eq!((r.local_ird, r.local_ord), (5, 6));
        let r = responder_ird_ord(NN, 3, 5, 6, 128, 128, false, None);
        assert_eq!((r.reply_ird, r.reply_ord, r.local_ord), (5, NN, 6));
    }

    #[test]
    fn responder_rejects_when_initiator_ird_below_required_ord() {
        let r = responder_ird_ord(2, 0, 0, 8, 128, 128, false, Some(8));
        assert!(r.reject_insufficient_initiator_ird);
        assert_eq!(r.reply_ord, 8);
        assert!(
            !responder_ird_ord(NN, 0, 0, 8, 128, 128, false, Some(8))
                .reject_insufficient_initiator_ird
        );
    }

    #[test]
    fn initiator_rules() {
        let r = initiator_ird_ord(1, 16, 8, 4, 128);
        assert_eq!((r.local_ird, r.local_ord, r.insufficient_ird), (4, 8, None));
        let r = initiator_ird_ord(1, 16, 8, 200, 128);
        assert_eq!(r.insufficient_ird, Some(200));
        let r = initiator_ird_ord(1, 16, NN, NN, 128);
        assert_eq!((r.local_ird, r.local_ord), (1, 16));
        let r = initiator_ird_ord(NN, NN, 3, 3, 0);
        assert_eq!(
            (r.local_ird, r.local_ord, r.insufficient_ird),
            (NN, NN, None)
        );
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
