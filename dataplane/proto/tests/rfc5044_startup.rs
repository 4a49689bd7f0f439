//! One test per requirement of RFC 5044 sections 7.1.1, 7.1.2 and 8 that the startup
//! machines can check.

mod common;

use std::time::{Duration, Instant};

use common::*;
use proto::startup::{
    AcceptParams, CloseKind, Event, FpduMode, Initiator, InitiatorConfig, InitiatorState,
    MpaErrorCode, Output, Responder, ResponderConfig, ResponderState, Role, StartupError,
    StartupFrameError, Waiting,
};
use wire::mpa::startup_frame::FrameKind;

fn rev1_initiator() -> InitiatorConfig {
    InitiatorConfig {
        enhanced: false,
        ..InitiatorConfig::default()
    }
}

fn responder(now: Instant) -> Responder {
    Responder::new(ResponderConfig::default(), now).unwrap()
}

/// A Responder that has accepted `request` (client-server), with its outputs drained.
fn accepted_responder(request: &[u8], cfg: ResponderConfig) -> (Responder, Vec<Output>) {
    let t = Instant::now();
    let mut r = Responder::new(cfg, t).unwrap();
    r.on_data(request, t);
    let mut outs = drain_r(&mut r);
    assert!(request_received(&outs).is_some(), "{outs:?}");
    r.accept(AcceptParams::default(), t).unwrap();
    outs.extend(drain_r(&mut r));
    (r, outs)
}

// ---- 7.1.1 Key ----------------------------------------------------------------------

#[test]
fn initiator_request_carries_request_key() {
    let mut i = Initiator::new(rev1_initiator(), Instant::now()).unwrap();
    let b = sent(&drain_i(&mut i));
    assert_eq!(&b[..16], b"MPA ID Req Frame");
    assert_eq!(b, frame(&REQUEST_KEY, "40 01 00 00"));
}

#[test]
fn responder_closes_without_reply_on_bad_key() {
    let t = Instant::now();
    let mut r = responder(t);
    r.on_data(&frame(b"MPA ID Req FrXme", "00 01 00 00"), t);
    let outs = drain_r(&mut r);
    assert!(sent(&outs).is_empty(), "no Reply to a bad key");
    assert!(closes(&outs));
    let f = failure(&outs).unwrap();
    assert!(matches!(
        f.error,
        StartupError::InvalidFrame(StartupFrameError::BadKey { .. })
    ));
    assert_eq!(f.code(), MpaErrorCode::InvalidStartupFrame);
}

#[test]
fn responder_reply_carries_reply_key() {
    let (_, outs) = accepted_responder(
        &frame(&REQUEST_KEY, "00 01 00 00"),
        ResponderConfig::default(),
    );
    assert_eq!(&sent(&outs)[..16], b"MPA ID Rep Frame");
}

#[test]
fn initiator_closes_on_bad_reply_key() {
    let t = Instant::now();
    let mut i = Initiator::new(rev1_initiator(), t).unwrap();
    drain_i(&mut i);
    i.on_data(&frame(b"MPA ID Rep FramE", "00 01 00 00"), t);
    let outs = drain_i(&mut i);
    assert!(closes(&outs));
    assert!(matches!(
        failure(&outs).unwrap().error,
        StartupError::InvalidFrame(StartupFrameError::BadKey { .. })
    ));
    assert!(sent(&outs).is_empty());
}

// ---- 7.1.1 M, C, R, Res ------------------------------------------------------------

#[test]
fn m_in_request_means_responder_sends_markers_and_m_in_reply_initiator_sends_markers() {
    for (im, rm) in [(false, false), (true, false), (false, true), (true, true)] {
        let icfg = InitiatorConfig {
            markers: im,
            ..InitiatorConfig::default()
        };
        let rcfg = ResponderConfig {
            markers: rm,
            ..ResponderConfig::default()
        };
        let run = run_pair(icfg, rcfg, AcceptParams::default(), &mut whole);
        let (ie, re) = (run.i_est(), run.r_est());
        assert_eq!(
            ie.tx_mode.markers, rm,
            "Reply M: Initiator's FPDUs carry markers"
        );
        assert_eq!(ie.rx_mode.markers, im);
        assert_eq!(
            re.tx_mode.markers, im,
            "Request M: Responder's FPDUs carry markers"
        );
        assert_eq!(re.rx_mode.markers, rm);
        assert_eq!(ie.tx_mode, re.rx_mode);
        assert_eq!(ie.rx_mode, re.tx_mode);
    }
}

#[test]
fn crc_used_in_both_directions_if_either_side_sets_c() {
    for (ic, rc) in [(false, false), (true, false), (false, true), (true, true)] {
        let icfg = InitiatorConfig {
            crc: ic,
            ..InitiatorConfig::default()
        };
        let rcfg = ResponderConfig {
            crc: rc,
            ..ResponderConfig::default()
        };
        let run = run_pair(icfg, rcfg, AcceptParams::default(), &mut whole);
        for e in [run.i_est(), run.r_est()] {
            assert_eq!(e.tx_mode.crc, ic || rc);
            assert_eq!(e.rx_mode.crc, ic || rc);
        }
    }
}

#[test]
fn crc_field_not_checked_when_neither_side_sets_c() {
    let rcfg = ResponderConfig {
        crc: false,
        ..ResponderConfig::default()
    };
    let (mut r, _) = accepted_responder(&frame(&REQUEST_KEY, "00 01 00 00"), rcfg);
    let mut f = fpdu(FpduMode::default(), &send_ulpdu(1, b"x"));
    let n = f.len();
    f[n - 4..].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
    r.on_data(&f, Instant::now());
    let outs = drain_r(&mut r);
    let e = established(&outs).expect("CRC field MUST be considered valid");
    assert_eq!(e.rx_pending, f);
}

#[test]
fn r_bit_not_checked_in_request() {
    let (_, outs) = accepted_responder(
        &frame(&REQUEST_KEY, "20 01 00 00"),
        ResponderConfig::default(),
    );
    let reply = sent(&outs);
    assert_eq!(reply[16] & 0x20, 0, "accepted: R = 0 in the Reply");
}

#[test]
fn reserved_bits_sent_as_zero_and_not_checked_on_receipt() {
    let (_, outs) = accepted_responder(
        &frame(&REQUEST_KEY, "0f 01 00 00"),
        ResponderConfig::default(),
    );
    assert_eq!(sent(&outs)[16] & 0x0f, 0);
    // And the Initiator accepts a Reply with reserved bits set (siw echoes them).
    let t = Instant::now();
    let mut i = Initiator::new(rev1_initiator(), t).unwrap();
    drain_i(&mut i);
    i.on_data(&frame(&REPLY_KEY, "4f 01 00 00"), t);
    assert!(established(&drain_i(&mut i)).is_some());
}

// ---- 7.1.1 Rev, PD_Length, Private Data ----------------------------------------------

#[test]
fn initiator_sets_rev_1_without_enhanced_features() {
    let mut i = Initiator::new(rev1_initiator(), Instant::now()).unwrap();
    assert_eq!(sent(&drain_i(&mut i))[17], 1);
}

#[test]
fn responder_closes_on_unsupported_rev() {
    for rev in [3u8, 255] {
        let t = Instant::now();
        let mut r = responder(t);
        r.on_data(&frame(&REQUEST_KEY, &format!("00 {rev:02x} 00 00")), t);
        let outs = drain_r(&mut r);
        assert!(sent(&outs).is_empty() && closes(&outs));
        assert_eq!(
            failure(&outs).unwrap().error,
            StartupError::InvalidFrame(StartupFrameError::UnsupportedRev { rev })
        );
    }
}

#[test]
fn initiator_closes_on_unsupported_reply_rev() {
    let t = Instant::now();
    let mut i = Initiator::new(rev1_initiator(), t).unwrap();
    drain_i(&mut i);
    i.on_data(&frame(&REPLY_KEY, "00 07 00 00"), t);
    let outs = drain_i(&mut i);
    assert!(closes(&outs));
    assert_eq!(
        failure(&outs).unwrap().code(),
        MpaErrorCode::InvalidStartupFrame
    );
}

#[test]
fn responder_closes_on_pd_length_over_512_without_waiting_for_data() {
    let t = Instant::now();
    let mut r = responder(t);
    r.on_data(&frame(&REQUEST_KEY, "00 01 02 01"), t);
    let outs = drain_r(&mut r);
    assert!(closes(&outs) && sent(&outs).is_empty());
    assert_eq!(
        failure(&outs).unwrap().error,
        StartupError::InvalidFrame(StartupFrameError::PdLengthTooLarge { pd_length: 513 })
    );
}

#[test]
fn responder_closes_when_private_data_shorter_than_pd_length_at_close() {
    let t = Instant::now();
    let mut r = responder(t);
    r.on_data(&frame(&REQUEST_KEY, "00 01 00 08 00 00 00 00"), t);
    assert!(drain_r(&mut r).is_empty(), "still waiting for the rest");
    r.on_closed(CloseKind::Fin);
    let outs = drain_r(&mut r);
    assert_eq!(
        failure(&outs).unwrap().error,
        StartupError::InvalidFrame(StartupFrameError::Truncated {
            received: 24,
            needed: 28
        })
    );
    assert_eq!(
        failure(&outs).unwrap().code(),
        MpaErrorCode::InvalidStartupFrame
    );
}

#[test]
fn private_data_up_to_512_passed_to_ulp_both_ways() {
    let pd: Vec<u8> = (0..512u32).map(|x| x as u8).collect();
    let icfg = InitiatorConfig {
        private_data: pd.clone(),
        enhanced: false,
        ..InitiatorConfig::default()
    };
    let accept = AcceptParams {
        private_data: b"welcome".to_vec(),
        ..AcceptParams::default()
    };
    let run = run_pair(icfg, ResponderConfig::default(), accept, &mut bytewise);
    assert_eq!(
        request_received(&run.r_out).unwrap().request.private_data,
        pd
    );
    assert_eq!(run.i_est().reply.private_data, b"welcome");
    let too_long = InitiatorConfig {
        private_data: vec![0; 513],
        enhanced: false,
        ..InitiatorConfig::default()
    };
    assert!(Initiator::new(too_long, Instant::now()).is_err());
}

// ---- 7.1.2 rules ---------------------------------------------------------------------

#[test]
fn rule1_initiator_sends_valid_request_at_start() {
    let mut i = Initiator::new(InitiatorConfig::default(), Instant::now()).unwrap();
    let outs = drain_i(&mut i);
    assert_eq!(outs.len(), 1);
    let b = sent(&outs);
    assert!(matches!(
        wire::mpa::startup_frame::parse(&b, Some(FrameKind::Request)),
        Ok(wire::mpa::startup_frame::Parsed::Frame { consumed, .. }) if consumed == b.len()
    ));
}

#[test]
fn rule2_responder_waits_for_complete_request_before_anything() {
    let t = Instant::now();
    let mut r = responder(t);
    let req = frame(&REQUEST_KEY, "00 01 00 03 61 62 63");
    for b in &req[..req.len() - 1] {
        r.on_data(&[*b], t);
        assert!(drain_r(&mut r).is_empty());
        assert_eq!(r.state(), ResponderState::WaitingRequest);
    }
    r.on_data(&req[req.len() - 1..], t);
    let outs = drain_r(&mut r);
    assert_eq!(
        request_received(&outs).unwrap().request.private_data,
        b"abc"
    );
    assert!(sent(&outs).is_empty(), "Reply only after the ULP decides");
}

#[test]
fn rule2_responder_closes_on_malformed_request_without_reply() {
    let t = Instant::now();
    let mut r = responder(t);
    r.on_data(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", t);
    let outs = drain_r(&mut r);
    assert!(sent(&outs).is_empty());
    assert!(closes(&outs));
    assert_eq!(
        failure(&outs).unwrap().code(),
        MpaErrorCode::InvalidStartupFrame
    );
}

#[test]
fn rule2_responder_reject_sends_r1_with_private_data_and_leaves_tcp_open() {
    let t = Instant::now();
    let mut r = responder(t);
    r.on_data(&frame(&REQUEST_KEY, "00 01 00 00"), t);
    drain_r(&mut r);
    r.reject(b"go away".to_vec()).unwrap();
    let outs = drain_r(&mut r);
    assert_eq!(
        sent(&outs),
        frame(&REPLY_KEY, "60 01 00 07 67 6f 20 61 77 61 79")
    );
    assert!(!closes(&outs), "MPA exits leaving TCP open");
    let rej = rejected(&outs).unwrap();
    assert_eq!(rej.role, Role::Responder);
    assert_eq!(r.state(), ResponderState::Finished);
}

#[test]
fn rule2_responder_accept_sends_r0() {
    let (r, outs) = accepted_responder(
        &frame(&REQUEST_KEY, "00 01 00 00"),
        ResponderConfig::default(),
    );
    assert_eq!(sent(&outs), frame(&REPLY_KEY, "40 01 00 00"));
    assert_eq!(r.state(), ResponderState::WaitingFirstFpdu);
}

#[test]
fn rule2_data_before_reply_is_a_protocol_error() {
    let t = Instant::now();
    let mut r = responder(t);
    let mut b = frame(&REQUEST_KEY, "00 01 00 00");
    b.extend_from_slice(&[0, 0, 0, 0]);
    r.on_data(&b, t);
    let outs = drain_r(&mut r);
    assert!(closes(&outs) && sent(&outs).is_empty());
    assert_eq!(
        failure(&outs).unwrap().error,
        StartupError::UnexpectedData { octets: 4 }
    );
}

#[test]
fn rule3_initiator_closes_on_malformed_reply() {
    let t = Instant::now();
    let mut i = Initiator::new(rev1_initiator(), t).unwrap();
    drain_i(&mut i);
    i.on_data(&frame(&REPLY_KEY, "00 01 ff ff"), t);
    let outs = drain_i(&mut i);
    assert!(closes(&outs));
    assert_eq!(
        failure(&outs).unwrap().code(),
        MpaErrorCode::InvalidStartupFrame
    );
}

#[test]
fn rule3_initiator_exits_mpa_leaving_tcp_open_on_reject() {
    let t = Instant::now();
    let mut i = Initiator::new(rev1_initiator(), t).unwrap();
    drain_i(&mut i);
    let mut b = frame(&REPLY_KEY, "20 01 00 02 6e 6f");
    b.extend_from_slice(b"after");
    i.on_data(&b, t);
    let outs = drain_i(&mut i);
    assert!(!closes(&outs) && sent(&outs).is_empty());
    let rej = rejected(&outs).unwrap();
    assert_eq!(rej.reply.private_data, b"no");
    assert_eq!(rej.trailing, b"after");
    assert_eq!(i.state(), InitiatorState::Finished);
}

#[test]
fn rule3_initiator_refusing_private_data_exits_mpa_leaving_tcp_open() {
    let t = Instant::now();
    let cfg = InitiatorConfig {
        confirm_reply: true,
        ..rev1_initiator()
    };
    let mut i = Initiator::new(cfg, t).unwrap();
    drain_i(&mut i);
    i.on_data(&frame(&REPLY_KEY, "00 01 00 01 58"), t);
    let outs = drain_i(&mut i);
    assert!(
        matches!(outs.as_slice(), [Output::Event(Event::ReplyReceived(r))] if r.reply.private_data == b"X")
    );
    assert_eq!(i.state(), InitiatorState::AwaitingConfirm);
    i.refuse().unwrap();
    let outs = drain_i(&mut i);
    assert!(!closes(&outs) && sent(&outs).is_empty());
    assert!(rejected(&outs).is_some());
}

#[test]
fn rule3_octets_after_the_reply_are_handed_over_as_fpdu_mode_octets() {
    let t = Instant::now();
    let mut i = Initiator::new(rev1_initiator(), t).unwrap();
    drain_i(&mut i);
    let reply = frame(&REPLY_KEY, "40 01 00 00");
    let mut b = reply[..10].to_vec();
    i.on_data(&b, t);
    assert!(
        drain_i(&mut i).is_empty(),
        "no FPDUs before a complete Reply"
    );
    b = reply[10..].to_vec();
    b.extend_from_slice(&[1, 2, 3]);
    i.on_data(&b, t);
    let e = established(&drain_i(&mut i)).unwrap().clone();
    assert_eq!(e.rx_pending, vec![1, 2, 3]);
    assert_eq!((e.rx_offset, e.tx_offset), (0, 0));
    assert!(e.initiator_sends_first);
}

#[test]
fn responder_sends_no_fpdu_before_first_fpdu_received() {
    // Rule 4: nothing after the Reply, whatever happens, until an FPDU validates.
    let (mut r, outs) = accepted_responder(
        &frame(&REQUEST_KEY, "40 01 00 00"),
        ResponderConfig::default(),
    );
    assert_eq!(
        outs.iter().filter(|o| matches!(o, Output::Send(_))).count(),
        1
    );
    let f = fpdu(FpduMode::CRC_ONLY, &send_ulpdu(1, FIRST_MESSAGE));
    r.on_data(&f[..f.len() - 1], Instant::now());
    assert!(drain_r(&mut r).is_empty());
    r.on_timeout(Instant::now() + Duration::from_secs(9));
    assert!(
        drain_r(&mut r).is_empty(),
        "the client-server first-FPDU wait is 10 s by default"
    );
    r.on_data(&f[f.len() - 1..], Instant::now());
    let outs = drain_r(&mut r);
    assert!(sent(&outs).is_empty());
    let e = established(&outs).unwrap();
    assert_eq!(e.rx_pending, f, "first FPDU handed over intact");
    assert_eq!(e.rx_offset, 0);
    assert_eq!(
        ulpdus_at(e.deframer(), &e.rx_pending),
        vec![send_ulpdu(1, FIRST_MESSAGE)]
    );
}

#[test]
fn responder_first_fpdu_wait_times_out_by_default_without_sending() {
    // A client-server Initiator that never sends its first FPDU does not hold the
    // connection: the wait ends after 10 s with a close and nothing sent (rule 4).
    let (mut r, _) = accepted_responder(
        &frame(&REQUEST_KEY, "40 01 00 00"),
        ResponderConfig::default(),
    );
    assert!(r.poll_timeout().is_some());
    r.on_timeout(Instant::now() + Duration::from_secs(11));
    let outs = drain_r(&mut r);
    assert!(sent(&outs).is_empty());
    assert!(outs.contains(&Output::Close), "{outs:?}");
    assert!(outs
        .iter()
        .any(|o| matches!(o, Output::Event(Event::Failed(_)))));
}

#[test]
fn responder_abort_before_first_fpdu_sends_nothing() {
    let (mut r, _) = accepted_responder(
        &frame(&REQUEST_KEY, "40 01 00 00"),
        ResponderConfig::default(),
    );
    r.abort().unwrap();
    let outs = drain_r(&mut r);
    assert!(
        sent(&outs).is_empty(),
        "no TERM before an FPDU was received"
    );
    assert!(closes(&outs));
    assert_eq!(
        failure(&outs).unwrap().code(),
        MpaErrorCode::LocalCatastrophic
    );
}

#[test]
fn rule4_first_fpdu_crc_error_reports_code_2_without_closing() {
    let (mut r, _) = accepted_responder(
        &frame(&REQUEST_KEY, "40 01 00 00"),
        ResponderConfig::default(),
    );
    let mut f = fpdu(FpduMode::CRC_ONLY, &send_ulpdu(1, b"x"));
    let n = f.len();
    f[n - 1] ^= 1;
    r.on_data(&f, Instant::now());
    let outs = drain_r(&mut r);
    assert_eq!(failure(&outs).unwrap().code(), MpaErrorCode::CrcMismatch);
    assert!(
        !closes(&outs),
        "RFC 5044 8: MPA MUST NOT close TCP for error 2"
    );
    assert!(sent(&outs).is_empty());
}

#[test]
fn rule7_first_octets_are_the_marker_when_markers_enabled() {
    // Reply with M: the Initiator's first FPDU (a TERM here, the machine's own FPDU) starts
    // with the marker 00000000 followed by ULPDU_Length.
    let t = Instant::now();
    let cfg = InitiatorConfig {
        confirm_reply: true,
        ..rev1_initiator()
    };
    let mut i = Initiator::new(cfg, t).unwrap();
    drain_i(&mut i);
    i.on_data(&frame(&REPLY_KEY, "c0 01 00 00"), t);
    drain_i(&mut i);
    i.abort().unwrap();
    let b = sent(&drain_i(&mut i));
    assert_eq!(&b[..4], &[0, 0, 0, 0]);
    assert_eq!(&b[4..6], &[0, 22]);
}

#[test]
fn rule8_initiator_detects_initiator_initiator_startup() {
    let t = Instant::now();
    let mut i = Initiator::new(rev1_initiator(), t).unwrap();
    drain_i(&mut i);
    i.on_data(&frame(&REQUEST_KEY, "40 01 00 00"), t);
    let outs = drain_i(&mut i);
    assert!(closes(&outs));
    assert_eq!(
        failure(&outs).unwrap().error,
        StartupError::InvalidFrame(StartupFrameError::UnexpectedFrameKind {
            expected: FrameKind::Reply,
            received: FrameKind::Request
        })
    );
}

#[test]
fn rule8_responder_detects_responder_responder_by_timeout_and_by_key() {
    let t = Instant::now();
    let mut r = responder(t);
    assert_eq!(r.poll_timeout(), Some(t + Duration::from_secs(5)));
    r.on_timeout(t + Duration::from_secs(4));
    assert!(drain_r(&mut r).is_empty());
    r.on_timeout(t + Duration::from_secs(5));
    let outs = drain_r(&mut r);
    assert!(closes(&outs));
    assert_eq!(
        failure(&outs).unwrap().error,
        StartupError::Timeout(Waiting::Request)
    );
    let mut r = responder(t);
    r.on_data(&frame(&REPLY_KEY, "40 01 00 00"), t);
    assert!(matches!(
        failure(&drain_r(&mut r)).unwrap().error,
        StartupError::InvalidFrame(StartupFrameError::UnexpectedFrameKind { .. })
    ));
}

#[test]
fn rule10_initiator_times_out_waiting_for_reply() {
    let t = Instant::now();
    let mut i = Initiator::new(rev1_initiator(), t).unwrap();
    drain_i(&mut i);
    assert_eq!(i.poll_timeout(), Some(t + Duration::from_secs(10)));
    i.on_data(&frame(&REPLY_KEY, "40 01")[..18], t);
    i.on_timeout(t + Duration::from_secs(10));
    let outs = drain_i(&mut i);
    assert!(closes(&outs));
    assert_eq!(
        failure(&outs).unwrap().error,
        StartupError::Timeout(Waiting::Reply)
    );
    assert_eq!(i.poll_timeout(), None);
}

#[test]
fn error_code_1_when_tcp_closes_during_startup() {
    let t = Instant::now();
    let mut r = responder(t);
    r.on_closed(CloseKind::Reset);
    assert_eq!(
        failure(&drain_r(&mut r)).unwrap().code(),
        MpaErrorCode::TcpClosed
    );
    let mut i = Initiator::new(rev1_initiator(), t).unwrap();
    drain_i(&mut i);
    i.on_closed(CloseKind::Fin);
    let outs = drain_i(&mut i);
    let f = failure(&outs).unwrap();
    assert_eq!(f.code(), MpaErrorCode::TcpClosed);
    assert!(!f.retry_unenhanced);
}

#[test]
fn machines_ignore_everything_once_finished() {
    let t = Instant::now();
    let mut r = responder(t);
    r.on_data(b"garbage garbage garbage", t);
    drain_r(&mut r);
    r.on_data(b"more", t);
    r.on_closed(CloseKind::Fin);
    r.on_timeout(t + Duration::from_secs(100));
    assert!(drain_r(&mut r).is_empty());
    assert!(r.accept(AcceptParams::default(), t).is_err());
    assert!(r.reject(vec![]).is_err());
    assert!(r.abort().is_err());
}
