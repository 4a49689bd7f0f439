//! One test per requirement of RFC 6581 sections 6 and 8-10 that the startup machines can
//! check, every path to a Terminate, and interop with the peers of PEERS.md.

mod common;

use std::time::{Duration, Instant};

use common::*;
use proto::ird_ord::IRD_ORD_NO_NEGOTIATION;
use proto::rtr::{RtrType, RtrTypes};
use proto::startup::{
    local_catastrophic_terminate, AcceptParams, ApiError, CloseKind, EnhancedData, Established,
    FpduMode, Initiator, InitiatorConfig, MpaErrorCode, Output, Responder, ResponderConfig,
    StartupError, StartupFrameError, Waiting,
};
use wire::mpa::startup_frame::{parse, Dialect, FrameKind, Parsed, StartupFrame};
use wire::rdmap::{parse_segment, Body};

const NN: u16 = IRD_ORD_NO_NEGOTIATION;

fn parse_frame(b: &[u8], kind: FrameKind) -> StartupFrame {
    match parse(b, Some(kind)).unwrap() {
        Parsed::Frame { frame, .. } => frame,
        p => panic!("{p:?}"),
    }
}

/// (Layer, EType, Error Code) of the Terminate in a single-FPDU transmit stream.
fn term_triple(mode: FpduMode, bytes: &[u8]) -> (u8, u8, u8) {
    let u = ulpdus(mode, bytes);
    assert_eq!(u.len(), 1, "exactly one FPDU");
    match parse_segment(&u[0]).unwrap().body {
        Body::Terminate { terminate, .. } => terminate.error.triple(),
        b => panic!("not a Terminate: {b:?}"),
    }
}

fn initiator(cfg: InitiatorConfig) -> Initiator {
    let mut i = Initiator::new(cfg, Instant::now()).unwrap();
    drain_i(&mut i);
    i
}

fn reply_to(i: &mut Initiator, reply: &[u8]) -> Vec<Output> {
    i.on_data(reply, Instant::now());
    drain_i(i)
}

fn p2p(types: RtrTypes) -> InitiatorConfig {
    InitiatorConfig {
        peer_to_peer: true,
        rtr_types: types,
        ..InitiatorConfig::default()
    }
}

fn request_for(r: &mut Responder, req: &[u8]) -> Vec<Output> {
    r.on_data(req, Instant::now());
    drain_r(r)
}

fn accept(r: &mut Responder, p: AcceptParams) -> Vec<Output> {
    r.accept(p, Instant::now()).unwrap();
    drain_r(r)
}

fn reply_word(outs: &[Output]) -> EnhancedData {
    parse_frame(&sent(outs), FrameKind::Reply)
        .enhanced
        .expect("enhanced Reply")
}

const WRITE: RtrTypes = RtrTypes::NONE.with(RtrType::Write);
const READ: RtrTypes = RtrTypes::NONE.with(RtrType::Read);
const SEND: RtrTypes = RtrTypes::NONE.with(RtrType::Send);

// ---- Section 6: frames -----------------------------------------------------------------

#[test]
fn enhanced_request_has_rev_2_s_and_the_word_first_in_private_data() {
    let cfg = InitiatorConfig {
        private_data: b"ulp".to_vec(),
        ..InitiatorConfig::default()
    };
    let mut i = Initiator::new(cfg, Instant::now()).unwrap();
    assert_eq!(
        sent(&drain_i(&mut i)),
        frame(&REQUEST_KEY, "50 02 00 07 00 01 00 01 75 6c 70")
    );
}

#[test]
fn pd_length_includes_the_enhanced_word_and_stays_within_512() {
    let ok = InitiatorConfig {
        private_data: vec![0; 508],
        ..InitiatorConfig::default()
    };
    assert!(Initiator::new(ok, Instant::now()).is_ok());
    let too_long = InitiatorConfig {
        private_data: vec![0; 509],
        ..InitiatorConfig::default()
    };
    assert_eq!(
        Initiator::new(too_long, Instant::now()).err(),
        Some(ApiError::PrivateDataTooLong { pd_length: 513 })
    );
}

#[test]
fn responder_must_accept_rev1_request() {
    for rev in ["00", "01"] {
        let mut r = Responder::new(ResponderConfig::default(), Instant::now()).unwrap();
        let outs = request_for(&mut r, &frame(&REQUEST_KEY, &format!("00 {rev} 00 00")));
        assert!(request_received(&outs).is_some());
        let outs = accept(&mut r, AcceptParams::default());
        assert_eq!(sent(&outs), frame(&REPLY_KEY, &format!("40 {rev} 00 00")));
    }
    let strict = ResponderConfig {
        min_rev: 2,
        ..ResponderConfig::default()
    };
    assert_eq!(
        Responder::new(strict, Instant::now()).err(),
        Some(ApiError::MustAcceptRev1)
    );
}

#[test]
fn responder_closes_on_s_with_pd_length_below_4() {
    for rest in ["10 02 00 00", "10 02 00 02 00 10"] {
        let mut r = Responder::new(ResponderConfig::default(), Instant::now()).unwrap();
        let outs = request_for(&mut r, &frame(&REQUEST_KEY, rest));
        assert!(closes(&outs) && sent(&outs).is_empty());
        assert!(matches!(
            failure(&outs).unwrap().error,
            StartupError::InvalidFrame(StartupFrameError::MissingEnhancedData { .. })
        ));
    }
}

// ---- Section 9.1: IRD/ORD --------------------------------------------------------------

#[test]
fn responder_sets_ird_at_least_initiator_ord_and_ord_at_most_initiator_ird() {
    let mut r = Responder::new(ResponderConfig::default(), Instant::now()).unwrap();
    request_for(&mut r, &frame(&REQUEST_KEY, "10 02 00 04 00 04 00 10"));
    let outs = accept(
        &mut r,
        AcceptParams {
            ird: 2,
            ord: 32,
            ..AcceptParams::default()
        },
    );
    let w = reply_word(&outs);
    assert_eq!((w.ird(), w.ord()), (16, 4));
}

#[test]
fn responder_ird_bounded_by_its_maximum() {
    let cfg = ResponderConfig {
        max_ird: 128,
        ..ResponderConfig::default()
    };
    let mut r = Responder::new(cfg, Instant::now()).unwrap();
    request_for(&mut r, &frame(&REQUEST_KEY, "10 02 00 04 00 10 01 00"));
    let w = reply_word(&accept(&mut r, AcceptParams::default()));
    assert_eq!((w.ird(), w.ord()), (128, 16));
}

#[test]
fn responder_answers_initiator_ord_0x3fff_with_ird_0x3fff_keeping_local_ird() {
    let mut r = Responder::new(ResponderConfig::default(), Instant::now()).unwrap();
    request_for(&mut r, &frame(&REQUEST_KEY, "10 02 00 04 00 08 3f ff"));
    let outs = accept(
        &mut r,
        AcceptParams {
            ird: 5,
            ..AcceptParams::default()
        },
    );
    let w = reply_word(&outs);
    assert_eq!((w.ird(), w.ord()), (NN, 8));
    let mut r2 = r;
    r2.on_data(
        &fpdu(FpduMode::CRC_ONLY, &send_ulpdu(1, b"x")),
        Instant::now(),
    );
    let io = established(&drain_r(&mut r2)).unwrap().ird_ord.unwrap();
    assert_eq!(io.local_ird, 5);
    assert_eq!((io.peer_ird, io.peer_ord), (8, NN));
}

#[test]
fn responder_answers_initiator_ird_0x3fff_with_ord_0x3fff_keeping_local_ord() {
    let mut r = Responder::new(ResponderConfig::default(), Instant::now()).unwrap();
    request_for(&mut r, &frame(&REQUEST_KEY, "10 02 00 04 3f ff 00 02"));
    let w = reply_word(&accept(
        &mut r,
        AcceptParams {
            ord: 7,
            ..AcceptParams::default()
        },
    ));
    assert_eq!((w.ird(), w.ord()), (2, NN));
}

#[test]
fn responder_may_reject_when_initiator_ird_below_required_ord() {
    let mut r = Responder::new(ResponderConfig::default(), Instant::now()).unwrap();
    request_for(&mut r, &frame(&REQUEST_KEY, "10 02 00 04 00 02 00 01"));
    let outs = accept(
        &mut r,
        AcceptParams {
            required_ord: Some(8),
            ..AcceptParams::default()
        },
    );
    let reply = parse_frame(&sent(&outs), FrameKind::Reply);
    assert!(reply.flags.r, "MPA Reject Frame");
    assert_eq!(
        reply.enhanced.unwrap().ord(),
        8,
        "required ORD in the responder ORD"
    );
    assert!(!closes(&outs));
    assert!(rejected(&outs).unwrap().insufficient_initiator_ird);
    // No Terminate: a Responder sends no FPDU before receiving one (RFC 5044 rule 4).
    assert_eq!(
        outs.iter().filter(|o| matches!(o, Output::Send(_))).count(),
        1
    );
}

#[test]
fn initiator_sets_ird_at_least_responder_ord_and_ord_at_most_responder_ird() {
    let mut i = initiator(InitiatorConfig {
        ird: 2,
        ord: 16,
        ..InitiatorConfig::default()
    });
    let outs = reply_to(&mut i, &frame(&REPLY_KEY, "10 02 00 04 00 08 00 06"));
    let io = established(&outs).unwrap().ird_ord.unwrap();
    assert_eq!((io.local_ird, io.local_ord), (6, 8));
    assert_eq!(
        (io.peer_ird, io.peer_ord),
        (8, 6),
        "peer's values passed to the ULP"
    );
    assert_eq!((io.sent_ird, io.sent_ord), (2, 16));
}

#[test]
fn initiator_keeps_local_ord_on_responder_ird_0x3fff_and_ird_on_responder_ord_0x3fff() {
    let mut i = initiator(InitiatorConfig {
        ird: 3,
        ord: 9,
        ..InitiatorConfig::default()
    });
    let outs = reply_to(&mut i, &frame(&REPLY_KEY, "10 02 00 04 3f ff 3f ff"));
    let io = established(&outs).unwrap().ird_ord.unwrap();
    assert_eq!((io.local_ird, io.local_ord), (3, 9));
}

#[test]
fn initiator_sends_term_2_0_6_when_ird_insufficient() {
    for (markers, crc) in [(false, false), (false, true), (true, false), (true, true)] {
        let mut i = initiator(InitiatorConfig {
            max_ird: 4,
            crc,
            ..InitiatorConfig::default()
        });
        let m = if markers { 0x80 } else { 0 };
        let outs = reply_to(
            &mut i,
            &frame(
                &REPLY_KEY,
                &format!("{:02x} 02 00 04 00 10 00 08", 0x10 | m),
            ),
        );
        let mode = FpduMode { markers, crc };
        assert_eq!(term_triple(mode, &sent(&outs)), (2, 0, 6));
        assert!(closes(&outs));
        let f = failure(&outs).unwrap();
        assert_eq!(
            f.error,
            StartupError::InsufficientIrd {
                required: 8,
                max: 4
            }
        );
        assert_eq!(f.term_sent, Some(MpaErrorCode::InsufficientIrd));
        assert_eq!(f.ird_ord.unwrap().peer_ord, 8);
        assert!(established(&outs).is_none());
    }
}

#[test]
fn initiator_reports_responder_ird_ord_on_reject() {
    let mut i = initiator(InitiatorConfig::default());
    let outs = reply_to(&mut i, &frame(&REPLY_KEY, "30 02 00 04 00 00 00 08"));
    assert_eq!(rejected(&outs).unwrap().responder_ird_ord, Some((0, 8)));
    assert!(!closes(&outs));
}

#[test]
fn responder_reports_initiator_ird_ord_and_final_values() {
    let run = run_pair(
        InitiatorConfig {
            ird: 4,
            ord: 2,
            ..InitiatorConfig::default()
        },
        ResponderConfig::default(),
        AcceptParams::default(),
        &mut whole,
    );
    let rr = request_received(&run.r_out).unwrap();
    assert_eq!(rr.initiator_ird_ord, Some((4, 2)));
    let r = run.r_est().ird_ord.unwrap();
    assert_eq!(
        (r.peer_ird, r.peer_ord, r.local_ird, r.local_ord),
        (4, 2, 2, 4)
    );
    let i = run.i_est().ird_ord.unwrap();
    assert_eq!((i.local_ird, i.local_ord), (4, 2));
}

// ---- Section 9.2: peer-to-peer -----------------------------------------------------------

#[test]
fn initiator_sets_a_and_a_flag_per_supported_rtr_type() {
    let mut i = Initiator::new(p2p(RtrTypes::ALL), Instant::now()).unwrap();
    let b = sent(&drain_i(&mut i));
    assert_eq!(&b[20..24], &[0xc0, 0x01, 0xc0, 0x01]);
    let mut i = Initiator::new(p2p(RtrTypes::WRITE_READ), Instant::now()).unwrap();
    assert_eq!(&sent(&drain_i(&mut i))[20..24], &[0x80, 0x01, 0xc0, 0x01]);
}

#[test]
fn client_server_initiator_sends_a_b_c_d_zero() {
    let mut i = Initiator::new(InitiatorConfig::default(), Instant::now()).unwrap();
    let b = sent(&drain_i(&mut i));
    assert_eq!(b[20] & 0xc0, 0);
    assert_eq!(b[22] & 0xc0, 0);
}

#[test]
fn responder_echoes_a_and_sets_offered_supported_rtr_types() {
    let mut r = Responder::new(ResponderConfig::default(), Instant::now()).unwrap();
    request_for(&mut r, &frame(&REQUEST_KEY, "10 02 00 04 80 10 c0 10"));
    let w = reply_word(&accept(&mut r, AcceptParams::default()));
    assert!(w.is_peer_to_peer());
    assert_eq!(w.rtr(), RtrTypes::WRITE_READ);
    // siw-like single choice on request.
    let cfg = ResponderConfig {
        reply_all_common_rtr: false,
        ..ResponderConfig::default()
    };
    let mut r = Responder::new(cfg, Instant::now()).unwrap();
    request_for(&mut r, &frame(&REQUEST_KEY, "10 02 00 04 c0 10 c0 10"));
    assert_eq!(
        reply_word(&accept(&mut r, AcceptParams::default())).rtr(),
        WRITE
    );
}

#[test]
fn responder_picks_only_offered_types_unlike_siw() {
    // siw answers Write to a Send-only offer; we answer Send.
    let mut r = Responder::new(ResponderConfig::default(), Instant::now()).unwrap();
    request_for(&mut r, &frame(&REQUEST_KEY, "10 02 00 04 c0 10 00 10"));
    assert_eq!(
        reply_word(&accept(&mut r, AcceptParams::default())).rtr(),
        SEND
    );
}

#[test]
fn responder_sets_at_least_one_supported_rtr_when_none_offered_is_supported() {
    let cfg = ResponderConfig {
        rtr_types: READ,
        ..ResponderConfig::default()
    };
    let mut r = Responder::new(cfg, Instant::now()).unwrap();
    request_for(&mut r, &frame(&REQUEST_KEY, "10 02 00 04 80 10 80 10"));
    let w = reply_word(&accept(&mut r, AcceptParams::default()));
    assert_eq!(w.rtr(), READ);
    assert!(w.ird() >= 1);
}

#[test]
fn responder_sets_a_0_when_request_a_0_and_ignores_b_c_d() {
    let mut r = Responder::new(ResponderConfig::default(), Instant::now()).unwrap();
    let outs = request_for(&mut r, &frame(&REQUEST_KEY, "10 02 00 04 40 10 c0 10"));
    let rr = request_received(&outs).unwrap();
    assert!(!rr.peer_to_peer && rr.offered_rtr.is_empty());
    let b = sent(&accept(&mut r, AcceptParams::default()));
    assert_eq!(b[20] & 0xc0, 0);
    assert_eq!(b[22] & 0xc0, 0);
}

fn p2p_run(
    offer: RtrTypes,
    responder_types: RtrTypes,
    split: &mut dyn FnMut(&[u8]) -> Vec<Vec<u8>>,
) -> Run {
    run_pair(
        p2p(offer),
        ResponderConfig {
            rtr_types: responder_types,
            ..ResponderConfig::default()
        },
        AcceptParams::default(),
        split,
    )
}

#[test]
fn initiator_sends_exactly_one_negotiated_rtr_of_each_type() {
    for t in [RtrType::Write, RtrType::Read, RtrType::Send] {
        let only = RtrTypes::NONE.with(t);
        let run = p2p_run(only, RtrTypes::ALL, &mut whole);
        let ie = run.i_est();
        assert_eq!(ie.rtr, Some(t));
        assert!(ie.peer_to_peer && !ie.initiator_sends_first);
        // The Initiator's FPDU stream: the startup frame, then exactly one RTR, then the
        // dataplane's message.
        let all = sent(&run.i_out);
        let req_len = 24;
        let rtr_fpdus = ulpdus(ie.tx_mode, &all[req_len..]);
        assert_eq!(rtr_fpdus.len(), 1);
        let seg = parse_segment(&rtr_fpdus[0]).unwrap();
        let kind = seg.rtr_kind().expect("a zero-length RTR");
        match t {
            RtrType::Write => {
                assert!(
                    matches!(seg.body, Body::RdmaWrite { stag: 1, .. }),
                    "STag 1, not 0"
                );
                assert_eq!(kind, wire::rdmap::RtrKind::RdmaWrite);
            }
            RtrType::Read => {
                assert_eq!(kind, wire::rdmap::RtrKind::RdmaReadRequest);
                assert_eq!(ie.tx_next_msn.read_request, 2);
                assert!(ie.read_rtr_sink.is_some());
            }
            RtrType::Send => {
                assert_eq!(kind, wire::rdmap::RtrKind::Send);
                assert_eq!(ie.tx_next_msn.send, 2);
            }
        }
        assert_eq!(ie.tx_offset, ie.tx_mode_wire_len_check(&all[req_len..]));
        // The Responder consumed the RTR and handed over the message that followed.
        let re = run.r_est();
        assert_eq!(re.rtr, Some(t));
        let msgs = ulpdus_at(re.deframer(), &run.r_rx_stream());
        assert_eq!(msgs, vec![send_ulpdu(ie.tx_next_msn.send, FIRST_MESSAGE)]);
        if t == RtrType::Read {
            // The Responder answered the Read RTR with a zero-length Read Response.
            let resp = ulpdus(re.tx_mode, &sent(&run.r_out)[24..]);
            assert_eq!(resp.len(), 1);
            assert!(matches!(
                parse_segment(&resp[0]).unwrap().body,
                Body::ReadResponse {
                    stag: 1,
                    to: 0,
                    data: []
                }
            ));
            assert!(re.tx_offset > 0);
        } else {
            assert_eq!(sent(&run.r_out).len(), 24, "only the Reply");
        }
    }
}

trait TxLen {
    fn tx_mode_wire_len_check(&self, stream: &[u8]) -> u64;
}

impl TxLen for Established {
    /// Length of the RTR FPDU at the start of `stream` (what `tx_offset` must equal).
    fn tx_mode_wire_len_check(&self, stream: &[u8]) -> u64 {
        let mut d = wire::mpa::deframe::Deframer::new(self.tx_mode);
        let mut first = None;
        d.push(stream, |f| {
            if first.is_none() {
                first = Some(f.stream_offset + f.wire_len as u64)
            }
        })
        .unwrap();
        first.unwrap()
    }
}

#[test]
fn initiator_sends_term_2_0_7_when_no_matching_rtr() {
    let mut i = initiator(p2p(WRITE));
    let outs = reply_to(&mut i, &frame(&REPLY_KEY, "50 02 00 04 c0 10 00 10"));
    assert_eq!(term_triple(FpduMode::CRC_ONLY, &sent(&outs)), (2, 0, 7));
    assert!(closes(&outs));
    let f = failure(&outs).unwrap();
    assert_eq!(f.term_sent, Some(MpaErrorCode::NoMatchingRtr));
    assert_eq!(
        f.error,
        StartupError::NoMatchingRtr {
            responder: SEND,
            local: WRITE
        }
    );
}

#[test]
fn initiator_sends_term_2_0_7_when_reply_drops_a() {
    let mut i = initiator(p2p(RtrTypes::WRITE_READ));
    let outs = reply_to(&mut i, &frame(&REPLY_KEY, "50 02 00 04 00 10 00 10"));
    assert_eq!(term_triple(FpduMode::CRC_ONLY, &sent(&outs)), (2, 0, 7));
    assert!(closes(&outs));
}

#[test]
fn initiator_skips_read_rtr_when_responder_ird_is_0() {
    let mut i = initiator(p2p(READ));
    let outs = reply_to(&mut i, &frame(&REPLY_KEY, "50 02 00 04 80 00 40 10"));
    assert_eq!(term_triple(FpduMode::CRC_ONLY, &sent(&outs)), (2, 0, 7));
}

#[test]
fn initiator_closes_on_reply_setting_a_to_client_server_request() {
    let mut i = initiator(InitiatorConfig::default());
    let outs = reply_to(&mut i, &frame(&REPLY_KEY, "50 02 00 04 80 10 80 10"));
    assert!(closes(&outs) && sent(&outs).is_empty());
    assert_eq!(
        failure(&outs).unwrap().error,
        StartupError::UnrequestedPeerToPeer
    );
}

#[test]
fn responder_sends_term_2_0_7_when_first_fpdu_is_not_an_rtr() {
    let mut r = Responder::new(ResponderConfig::default(), Instant::now()).unwrap();
    request_for(&mut r, &frame(&REQUEST_KEY, "50 02 00 04 80 10 80 10"));
    accept(&mut r, AcceptParams::default());
    r.on_data(
        &fpdu(FpduMode::CRC_ONLY, &send_ulpdu(1, b"not an RTR")),
        Instant::now(),
    );
    let outs = drain_r(&mut r);
    assert_eq!(term_triple(FpduMode::CRC_ONLY, &sent(&outs)), (2, 0, 7));
    assert!(closes(&outs));
    let f = failure(&outs).unwrap();
    assert_eq!(f.error, StartupError::NotAnRtr);
    assert_eq!(f.term_sent, Some(MpaErrorCode::NoMatchingRtr));
}

#[test]
fn responder_sends_term_2_0_7_with_markers_when_rtr_type_unsupported() {
    let cfg = ResponderConfig {
        rtr_types: WRITE,
        ..ResponderConfig::default()
    };
    let mut r = Responder::new(cfg, Instant::now()).unwrap();
    // Request with M: the Responder's FPDUs carry markers.
    request_for(&mut r, &frame(&REQUEST_KEY, "d0 02 00 04 80 10 40 10"));
    accept(&mut r, AcceptParams::default());
    r.on_data(
        &fpdu(
            FpduMode::CRC_ONLY,
            &wire::rdmap::zero_length_read_request(1, 1, 0, 1, 0),
        ),
        Instant::now(),
    );
    let outs = drain_r(&mut r);
    let b = sent(&outs);
    assert_eq!(&b[..4], &[0, 0, 0, 0], "leading marker");
    assert_eq!(
        term_triple(
            FpduMode {
                markers: true,
                crc: true
            },
            &b
        ),
        (2, 0, 7)
    );
}

#[test]
fn responder_reports_peer_terminate_without_answering() {
    let mut r = Responder::new(ResponderConfig::default(), Instant::now()).unwrap();
    request_for(&mut r, &frame(&REQUEST_KEY, "50 02 00 04 00 10 00 10"));
    accept(&mut r, AcceptParams::default());
    let term = wire::rdmap::terminate_ulpdu(
        &wire::rdmap::Terminate::llp_mpa(MpaErrorCode::InsufficientIrd),
        1,
    );
    r.on_data(&fpdu(FpduMode::CRC_ONLY, &term), Instant::now());
    let outs = drain_r(&mut r);
    assert!(sent(&outs).is_empty());
    assert!(closes(&outs));
    let f = failure(&outs).unwrap();
    assert_eq!(f.code(), MpaErrorCode::InsufficientIrd);
}

#[test]
fn responder_rtr_timeout_closes_without_terminate() {
    let t = Instant::now();
    let mut r = Responder::new(ResponderConfig::default(), t).unwrap();
    request_for(&mut r, &frame(&REQUEST_KEY, "50 02 00 04 80 10 80 10"));
    r.accept(AcceptParams::default(), t).unwrap();
    drain_r(&mut r);
    assert_eq!(r.poll_timeout(), Some(t + Duration::from_secs(10)));
    r.on_timeout(t + Duration::from_secs(10));
    let outs = drain_r(&mut r);
    assert!(sent(&outs).is_empty() && closes(&outs));
    assert_eq!(
        failure(&outs).unwrap().error,
        StartupError::Timeout(Waiting::FirstFpdu)
    );
}

// ---- Section 9.3: local catastrophic --------------------------------------------------------

#[test]
fn initiator_abort_after_reply_sends_term_2_0_5() {
    let mut i = initiator(InitiatorConfig {
        confirm_reply: true,
        ..InitiatorConfig::default()
    });
    reply_to(&mut i, &frame(&REPLY_KEY, "50 02 00 04 00 01 00 01"));
    i.abort().unwrap();
    let outs = drain_i(&mut i);
    assert_eq!(term_triple(FpduMode::CRC_ONLY, &sent(&outs)), (2, 0, 5));
    assert!(closes(&outs));
    assert_eq!(
        failure(&outs).unwrap().term_sent,
        Some(MpaErrorCode::LocalCatastrophic)
    );
}

#[test]
fn initiator_abort_before_reply_only_closes() {
    let mut i = initiator(InitiatorConfig::default());
    i.abort().unwrap();
    let outs = drain_i(&mut i);
    assert!(sent(&outs).is_empty() && closes(&outs));
    assert_eq!(
        failure(&outs).unwrap().code(),
        MpaErrorCode::LocalCatastrophic
    );
}

#[test]
fn dataplane_local_catastrophic_terminate_continues_the_stream() {
    let run = p2p_run(WRITE, RtrTypes::ALL, &mut whole);
    let ie = run.i_est();
    let mut framer = ie.framer();
    let term = local_catastrophic_terminate(&mut framer, ie.tx_next_msn.terminate);
    let mut d = wire::mpa::deframe::Deframer::at_offset(ie.tx_mode, ie.tx_offset);
    let mut got = Vec::new();
    d.push(&term, |f| got.push(f.ulpdu.to_vec())).unwrap();
    assert!(matches!(
        parse_segment(&got[0]).unwrap().body,
        Body::Terminate { terminate, .. } if terminate.error.triple() == (2, 0, 5)
    ));
}

// ---- Section 10: interoperability -----------------------------------------------------------

#[test]
fn responder_answers_enhanced_request_with_enhanced_reply() {
    let mut r = Responder::new(ResponderConfig::default(), Instant::now()).unwrap();
    // siw's default Request (peer README).
    request_for(&mut r, &frame(&REQUEST_KEY, "10 02 00 04 00 01 00 01"));
    assert_eq!(
        sent(&accept(&mut r, AcceptParams::default())),
        frame(&REPLY_KEY, "50 02 00 04 00 01 00 01")
    );
}

#[test]
fn responder_answers_unenhanced_request_with_unenhanced_reply() {
    let mut r = Responder::new(ResponderConfig::default(), Instant::now()).unwrap();
    request_for(&mut r, &frame(&REQUEST_KEY, "00 02 00 00"));
    assert_eq!(
        sent(&accept(&mut r, AcceptParams::default())),
        frame(&REPLY_KEY, "40 02 00 00")
    );
}

#[test]
fn initiator_closes_on_unenhanced_reply_to_enhanced_request() {
    for rest in ["40 01 00 00", "40 02 00 00"] {
        let mut i = initiator(InitiatorConfig::default());
        let outs = reply_to(&mut i, &frame(&REPLY_KEY, rest));
        assert!(closes(&outs));
        assert!(matches!(
            failure(&outs).unwrap().error,
            StartupError::ReplyNotEnhanced { .. }
        ));
        assert_eq!(
            failure(&outs).unwrap().code(),
            MpaErrorCode::InvalidStartupFrame
        );
    }
}

#[test]
fn initiator_closes_on_enhanced_reply_to_unenhanced_request() {
    let mut i = initiator(InitiatorConfig {
        enhanced: false,
        ..InitiatorConfig::default()
    });
    let outs = reply_to(&mut i, &frame(&REPLY_KEY, "50 02 00 04 00 01 00 01"));
    assert_eq!(
        failure(&outs).unwrap().error,
        StartupError::ReplyUnexpectedlyEnhanced
    );
}

#[test]
fn initiator_reports_rev1_retry_on_close_without_reply_when_opted_in() {
    let mut i = initiator(InitiatorConfig {
        rev1_fallback: true,
        ..InitiatorConfig::default()
    });
    i.on_closed(CloseKind::Reset);
    let f = failure(&drain_i(&mut i)).unwrap().clone();
    assert!(f.retry_unenhanced);
    // Off by default.
    let mut i = initiator(InitiatorConfig::default());
    i.on_closed(CloseKind::Reset);
    assert!(!failure(&drain_i(&mut i)).unwrap().retry_unenhanced);
    // Partial reply: not the unenhanced-responder case.
    let mut i = initiator(InitiatorConfig {
        rev1_fallback: true,
        ..InitiatorConfig::default()
    });
    i.on_data(&REPLY_KEY[..8], Instant::now());
    i.on_closed(CloseKind::Fin);
    assert!(!failure(&drain_i(&mut i)).unwrap().retry_unenhanced);
    // The retry configuration is an unenhanced Rev 1 Request.
    let retry = InitiatorConfig {
        rev1_fallback: true,
        peer_to_peer: true,
        ..InitiatorConfig::default()
    }
    .unenhanced_fallback();
    let mut i = Initiator::new(retry, Instant::now()).unwrap();
    assert_eq!(sent(&drain_i(&mut i)), frame(&REQUEST_KEY, "40 01 00 00"));
}

#[test]
fn initiator_accepts_siw_replies() {
    // siw echoes flags and revision, including reserved bits.
    let mut i = initiator(InitiatorConfig::default());
    let outs = reply_to(&mut i, &frame(&REPLY_KEY, "58 02 00 04 00 10 00 10"));
    assert!(established(&outs).is_some());
    // siw peer-to-peer: Reply 80 01 80 01 to our Write+Read offer; we send a Write RTR
    // with STag 1, as siw itself does (README capture: 000e c140 00000001 ...).
    let mut i = initiator(InitiatorConfig {
        crc: false,
        ..p2p(RtrTypes::WRITE_READ)
    });
    let outs = reply_to(&mut i, &frame(&REPLY_KEY, "10 02 00 04 80 01 80 01"));
    assert_eq!(
        sent(&outs),
        hex("000e c140 00000001 0000000000000000 00000000")
    );
    assert_eq!(established(&outs).unwrap().rtr, Some(RtrType::Write));
}

#[test]
fn responder_accepts_siw_write_rtr() {
    let mut r = Responder::new(
        ResponderConfig {
            crc: false,
            ..ResponderConfig::default()
        },
        Instant::now(),
    )
    .unwrap();
    request_for(&mut r, &frame(&REQUEST_KEY, "10 02 00 04 80 01 c0 01"));
    let b = sent(&accept(&mut r, AcceptParams::default()));
    assert_eq!(&b[16..], &hex("10 02 00 04 80 01 c0 01")[..]);
    r.on_data(
        &hex("000e c140 00000001 0000000000000000 00000000"),
        Instant::now(),
    );
    let e = established(&drain_r(&mut r)).unwrap().clone();
    assert_eq!(e.rtr, Some(RtrType::Write));
    assert_eq!(e.rx_offset, 20);
    assert!(e.rx_pending.is_empty());
}

#[test]
fn responder_with_intel_like_preference_answers_read() {
    let cfg = ResponderConfig {
        rtr_preference: [RtrType::Read, RtrType::Write, RtrType::Send],
        reply_all_common_rtr: false,
        ..ResponderConfig::default()
    };
    let mut r = Responder::new(cfg, Instant::now()).unwrap();
    request_for(&mut r, &frame(&REQUEST_KEY, "50 02 00 04 80 20 c0 20"));
    assert_eq!(
        reply_word(&accept(&mut r, AcceptParams::default())).rtr(),
        READ
    );
}

#[test]
fn enhanced_reject_echoes_a() {
    let mut r = Responder::new(ResponderConfig::default(), Instant::now()).unwrap();
    request_for(&mut r, &frame(&REQUEST_KEY, "10 02 00 04 80 10 80 10"));
    r.reject(vec![]).unwrap();
    let outs = drain_r(&mut r);
    let f = parse_frame(&sent(&outs), FrameKind::Reply);
    assert!(f.flags.r && f.flags.s);
    assert!(f.enhanced.unwrap().is_peer_to_peer());
    let _ = Dialect::Rfc6581;
}

// ---- first_fpdu_delay (a siw workaround, not an RFC requirement) ---------------------------

/// An initiator with `first_fpdu_delay`, and the instant its accepting Reply arrived:
/// Rev 2 enhanced, A set and the Write RTR chosen when `peer_to_peer`.
fn delayed_after_reply(peer_to_peer: bool, delay: Duration) -> (Initiator, Instant) {
    let t0 = Instant::now();
    let cfg = InitiatorConfig {
        first_fpdu_delay: delay,
        ..if peer_to_peer {
            p2p(RtrTypes::WRITE_READ)
        } else {
            InitiatorConfig::default()
        }
    };
    let mut i = Initiator::new(cfg, t0).unwrap();
    drain_i(&mut i);
    let t1 = t0 + Duration::from_millis(3);
    let word = if peer_to_peer {
        "80 01 80 01"
    } else {
        "00 01 00 01"
    };
    i.on_data(&frame(&REPLY_KEY, &format!("50 02 00 04 {word}")), t1);
    (i, t1)
}

#[test]
fn first_fpdu_delay_holds_the_rtr_until_it_has_passed_since_the_reply() {
    let delay = Duration::from_millis(100);
    let (mut i, t1) = delayed_after_reply(true, delay);
    assert!(drain_i(&mut i).is_empty(), "nothing before the delay");
    assert_eq!(i.state(), proto::startup::InitiatorState::Delaying);
    assert_eq!(i.poll_timeout(), Some(t1 + delay));
    // Octets arriving meanwhile are FPDU-mode octets, handed over with the connection.
    i.on_data(b"xy", t1 + Duration::from_millis(1));
    i.on_timeout(t1 + delay - Duration::from_micros(1));
    assert!(drain_i(&mut i).is_empty(), "still waiting");
    i.on_timeout(t1 + delay);
    let outs = drain_i(&mut i);
    let e = established(&outs).expect("established once the delay passed");
    assert_eq!(e.rtr, Some(RtrType::Write));
    assert_eq!(e.rx_pending, b"xy");
    let rtr = ulpdus(e.tx_mode, &sent(&outs));
    assert_eq!(rtr.len(), 1, "exactly the RTR");
    assert!(parse_segment(&rtr[0]).unwrap().rtr_kind().is_some());
    assert_eq!(i.poll_timeout(), None);
}

#[test]
fn first_fpdu_delay_holds_a_client_server_connection_too() {
    let delay = Duration::from_millis(40);
    let (mut i, t1) = delayed_after_reply(false, delay);
    assert!(drain_i(&mut i).is_empty());
    i.on_timeout(t1 + delay);
    let outs = drain_i(&mut i);
    let e = established(&outs).unwrap();
    assert!(e.initiator_sends_first && e.rtr.is_none());
    assert!(sent(&outs).is_empty(), "no RTR in client-server");
}

#[test]
fn zero_first_fpdu_delay_establishes_at_once() {
    let (mut i, _) = delayed_after_reply(true, Duration::ZERO);
    assert!(established(&drain_i(&mut i)).is_some());
}

#[test]
fn close_during_first_fpdu_delay_fails_the_connection() {
    let (mut i, _) = delayed_after_reply(true, Duration::from_millis(100));
    i.on_closed(CloseKind::Fin);
    let outs = drain_i(&mut i);
    assert!(matches!(
        failure(&outs).map(|f| &f.error),
        Some(StartupError::TcpClosed(CloseKind::Fin))
    ));
    assert!(established(&outs).is_none() && sent(&outs).is_empty());
}

#[test]
fn abort_during_first_fpdu_delay_sends_term_2_0_5() {
    let (mut i, _) = delayed_after_reply(true, Duration::from_millis(100));
    i.abort().unwrap();
    let outs = drain_i(&mut i);
    assert_eq!(term_triple(FpduMode::CRC_ONLY, &sent(&outs)), (2, 0, 5));
    assert!(closes(&outs) && established(&outs).is_none());
}
