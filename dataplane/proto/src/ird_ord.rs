//! IRD and ORD, end to end (RFC 6581 section 9.1).
//!
//! IRD (Inbound RDMA Read Queue Depth) is how many RDMA Read Requests a QP accepts
//! outstanding from its peer; ORD (Outbound RDMA Read Queue Depth) how many it keeps
//! outstanding itself. RFC 6581 lets the two ends agree on them during MPA startup. In
//! the order a connection meets them:
//!
//! 1. **The wire word.** An enhanced (Rev 2, S = 1) Request or Reply starts its private
//!    data with IRD (14 bits), the A/B flags, ORD (14 bits) and the C/D flags:
//!    [`EnhancedData`](wire::mpa::startup_frame::EnhancedData). 0x3FFF
//!    ([`IRD_ORD_NO_NEGOTIATION`]) means "no automatic negotiation: the ULP does it".
//! 2. **What each end asks.** The Initiator sends its configured IRD/ORD
//!    ([`InitiatorConfig::ird`](crate::startup::InitiatorConfig::ird) and `ord`); the
//!    Responder's consumer offers its own when it accepts
//!    ([`AcceptParams`](crate::startup::AcceptParams)). A deployment file may configure
//!    at most [`MAX_NEGOTIABLE`].
//! 3. **Negotiation.** The Responder applies [`responder_ird_ord`] to the Request (its
//!    IRD is raised to at least the Initiator's ORD, its ORD lowered to at most the
//!    Initiator's IRD, 0x3FFF answered with 0x3FFF; it may reject an Initiator IRD that
//!    is too small); the Initiator applies [`initiator_ird_ord`] to the Reply and sends
//!    TERM Layer 2 / EType 0 / code 6 (insufficient IRD) when it cannot grow its IRD to
//!    the Responder's ORD. Both report the result as [`IrdOrd`], the peer's values
//!    included ("MUST pass the peer's provided IRD and ORD values to the ULP").
//! 4. **Defaults.** A value left to the ULP (0x3FFF) or a Rev 1 connection takes the
//!    consumer's defaults ([`for_qp`]).
//! 5. **Enforcement.** The queue pair ([`QpConfig::ird`](crate::qp::QpConfig::ird),
//!    [`QpConfig::ord`](crate::qp::QpConfig::ord)) answers a Read Request beyond IRD with
//!    a Terminate (RDMAP, remote operation error, catastrophic error localized to the
//!    stream) and holds its own Reads back while ORD are outstanding (a Read posted with
//!    ORD 0 is refused).

pub use wire::mpa::startup_frame::{IRD_ORD_NO_NEGOTIATION, MAX_IRD_ORD};

/// The largest IRD or ORD a consumer or a deployment file may ask for: the 14-bit field's
/// largest value below [`IRD_ORD_NO_NEGOTIATION`].
pub const MAX_NEGOTIABLE: u16 = IRD_ORD_NO_NEGOTIATION - 1;

/// IRD/ORD as negotiated per RFC 6581 9.1, reported to the ULP as the RFC requires ("The
/// responder and initiator MUST pass the peer's provided IRD and ORD values to the ULP").
/// 0x3FFF ([`IRD_ORD_NO_NEGOTIATION`]) in a local value means "left to the ULP".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IrdOrd {
    /// IRD the peer sent.
    pub peer_ird: u16,
    /// ORD the peer sent.
    pub peer_ord: u16,
    /// IRD this side sent.
    pub sent_ird: u16,
    /// ORD this side sent.
    pub sent_ord: u16,
    /// The local endpoint's IRD after negotiation.
    pub local_ird: u16,
    /// The local endpoint's ORD after negotiation.
    pub local_ord: u16,
}

/// The IRD and ORD a queue pair runs with: the negotiated local values, where a value
/// left to the ULP (0x3FFF) or not negotiated at all (`None`: Rev 1, or a peer that did not
/// send the enhanced word) takes the consumer's `defaults` (IRD, ORD).
pub fn for_qp(negotiated: Option<IrdOrd>, defaults: (u16, u16)) -> (u16, u16) {
    let pick = |v: u16, d: u16| if v == IRD_ORD_NO_NEGOTIATION { d } else { v };
    match negotiated {
        Some(n) => (pick(n.local_ird, defaults.0), pick(n.local_ord, defaults.1)),
        None => defaults,
    }
}

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
            reply_ord = req.min(MAX_IRD_ORD);
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn the_consumer_defaults_fill_what_was_not_negotiated() {
        let n = IrdOrd {
            peer_ird: 4,
            peer_ord: NN,
            sent_ird: 8,
            sent_ord: NN,
            local_ird: 8,
            local_ord: NN,
        };
        assert_eq!(for_qp(Some(n), (2, 3)), (8, 3));
        assert_eq!(for_qp(None, (2, 3)), (2, 3));
        assert_eq!(MAX_NEGOTIABLE, 0x3FFE);
    }
}
