//! Initiator against Responder across modes and dialects, and property tests: random
//! segmentation of the peer's octets, and no panics on arbitrary input.

mod common;

use std::time::{Duration, Instant};

use common::*;
use proptest::prelude::*;
use proto::ird_ord::IRD_ORD_NO_NEGOTIATION;
use proto::rtr::{RtrType, RtrTypes};
use proto::startup::{
    AcceptParams, CloseKind, Initiator, InitiatorConfig, Output, Responder, ResponderConfig,
};
use wire::mpa::startup_frame::{Dialect, RTR_KEY_AS_PRINTED};

const NN: u16 = IRD_ORD_NO_NEGOTIATION;

/// Checks a completed run: both sides established with mirrored modes, the Responder's
/// handed-over octets hold exactly the Initiator dataplane's first message, IRD/ORD
/// relationships of RFC 6581 9.1 hold.
fn check_run(run: &Run) {
    let (ie, re) = (run.i_est(), run.r_est());
    assert_eq!(ie.tx_mode, re.rx_mode);
    assert_eq!(ie.rx_mode, re.tx_mode);
    assert_eq!(ie.rtr, re.rtr);
    assert_eq!(ie.peer_to_peer, re.peer_to_peer);
    let msgs = ulpdus_at(re.deframer(), &run.r_rx_stream());
    assert_eq!(msgs, vec![send_ulpdu(ie.tx_next_msn.send, FIRST_MESSAGE)]);
    assert_eq!(re.rx_next_msn, ie.tx_next_msn);
    if let (Some(i), Some(r)) = (ie.ird_ord, re.ird_ord) {
        assert_eq!((i.peer_ird, i.peer_ord), (r.sent_ird, r.sent_ord));
        assert_eq!((r.peer_ird, r.peer_ord), (i.sent_ird, i.sent_ord));
        if ![i.local_ord, r.local_ird, i.sent_ord].contains(&NN) {
            assert!(i.local_ord <= r.local_ird, "initiator ORD <= responder IRD");
        }
        if ![r.local_ord, i.local_ird, i.sent_ird].contains(&NN) {
            assert!(r.local_ord <= i.local_ird, "responder ORD <= initiator IRD");
        }
    }
    assert!(run.i_out.iter().all(|o| !matches!(o, Output::Close)));
    assert!(run.r_out.iter().all(|o| !matches!(o, Output::Close)));
}

#[derive(Clone, Copy, Debug)]
enum Model {
    ClientServer,
    P2p(RtrType),
}

fn configs(
    markers: (bool, bool),
    crc: (bool, bool),
    enhanced: bool,
    model: Model,
    ird_ord: (u16, u16),
) -> (InitiatorConfig, ResponderConfig) {
    let (peer_to_peer, rtr_types) = match model {
        Model::ClientServer => (false, RtrTypes::WRITE_READ),
        Model::P2p(t) => (true, RtrTypes::NONE.with(t)),
    };
    (
        InitiatorConfig {
            markers: markers.0,
            crc: crc.0,
            enhanced: enhanced || peer_to_peer,
            peer_to_peer,
            rtr_types,
            ird: ird_ord.0,
            ord: ird_ord.1,
            ..InitiatorConfig::default()
        },
        ResponderConfig {
            markers: markers.1,
            crc: crc.1,
            ..ResponderConfig::default()
        },
    )
}

#[test]
fn pairs_across_markers_crc_rev_and_rtr_types() {
    let models = [
        Model::ClientServer,
        Model::P2p(RtrType::Write),
        Model::P2p(RtrType::Read),
        Model::P2p(RtrType::Send),
    ];
    for mi in [false, true] {
        for mr in [false, true] {
            for ci in [false, true] {
                for cr in [false, true] {
                    for enhanced in [false, true] {
                        for model in models {
                            for split in [whole as fn(&[u8]) -> Vec<Vec<u8>>, bytewise] {
                                let (i, r) = configs((mi, mr), (ci, cr), enhanced, model, (4, 4));
                                let run =
                                    run_pair(i, r, AcceptParams::default(), &mut |b| split(b));
                                check_run(&run);
                                let ie = run.i_est();
                                assert_eq!(
                                    ie.request.rev,
                                    if ie.ird_ord.is_some() { 2 } else { 1 }
                                );
                                assert_eq!(ie.tx_mode.markers, mr);
                                assert_eq!(ie.rx_mode.crc, ci || cr);
                            }
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn pairs_with_0x3fff_no_negotiation_values() {
    for (ird, ord) in [(NN, NN), (NN, 3), (3, NN)] {
        let (i, r) = configs(
            (false, false),
            (true, true),
            true,
            Model::ClientServer,
            (ird, ord),
        );
        let accept = AcceptParams {
            ird: 6,
            ord: 7,
            ..AcceptParams::default()
        };
        let run = run_pair(i, r, accept, &mut whole);
        check_run(&run);
        let (ie, re) = (run.i_est().ird_ord.unwrap(), run.r_est().ird_ord.unwrap());
        if ord == NN {
            assert_eq!(
                re.sent_ird, NN,
                "Responder answers initiator ORD 0x3FFF with IRD 0x3FFF"
            );
            assert_eq!(re.local_ird, 6, "and keeps its local IRD");
            assert_eq!(ie.local_ord, NN);
        }
        if ird == NN {
            assert_eq!(re.sent_ord, NN);
            assert_eq!(re.local_ord, 7);
            assert_eq!(ie.local_ird, NN);
        }
    }
}

#[test]
fn draft2010_pair_peer_to_peer_uses_a_b_c_layout() {
    for t in [RtrType::Send, RtrType::Write, RtrType::Read] {
        let i = InitiatorConfig {
            dialect: Dialect::Draft2010,
            peer_to_peer: true,
            rtr_types: RtrTypes::NONE.with(t),
            crc: false,
            ..InitiatorConfig::default()
        };
        let r = ResponderConfig {
            dialect: Dialect::Draft2010,
            crc: false,
            ..ResponderConfig::default()
        };
        let run = run_pair(i, r, AcceptParams::default(), &mut bytewise);
        check_run(&run);
        let req = sent(&run.i_out);
        let expected_word = match t {
            RtrType::Send => [0x80, 0x01, 0x00, 0x01],
            RtrType::Write => [0x40, 0x01, 0x00, 0x01],
            RtrType::Read => [0x00, 0x01, 0x80, 0x01],
        };
        assert_eq!(&req[20..24], &expected_word);
        // The Reply lists every type the responder supports: A|B over IRD, C over ORD.
        let reply = sent(&run.r_out);
        assert_eq!(reply[20] & 0xc0, 0xc0);
        assert_eq!(reply[22] & 0xc0, 0x80);
        assert_eq!(run.i_est().rtr, Some(t));
    }
}

#[test]
fn draft2010_without_local_rtr_sends_none_and_responder_hands_over_first_message() {
    let i = InitiatorConfig {
        dialect: Dialect::Draft2010,
        ..InitiatorConfig::default()
    };
    let r = ResponderConfig {
        dialect: Dialect::Draft2010,
        ..ResponderConfig::default()
    };
    let run = run_pair(i, r, AcceptParams::default(), &mut whole);
    check_run(&run);
    assert_eq!(run.i_est().rtr, None);
    assert!(run.r_est().initiator_sends_first);
    // The Request still advertises the supported types (draft 8: "MUST be set unless the
    // Initiator cannot support this option").
    assert_eq!(&sent(&run.i_out)[20..24], &[0x40, 0x01, 0x80, 0x01]);
}

#[test]
fn draft2010_reply_without_data_means_all_types_and_no_flags_means_ulp_sends_first() {
    let cfg = InitiatorConfig {
        dialect: Dialect::Draft2010,
        peer_to_peer: true,
        ..InitiatorConfig::default()
    };
    let mut i = Initiator::new(cfg.clone(), Instant::now()).unwrap();
    drain_i(&mut i);
    i.on_data(&frame(&REPLY_KEY, "40 02 00 00"), Instant::now());
    let outs = drain_i(&mut i);
    assert_eq!(established(&outs).unwrap().rtr, Some(RtrType::Write));
    let mut i = Initiator::new(cfg, Instant::now()).unwrap();
    drain_i(&mut i);
    i.on_data(
        &frame(&REPLY_KEY, "50 02 00 04 00 01 00 01"),
        Instant::now(),
    );
    let outs = drain_i(&mut i);
    let e = established(&outs).unwrap();
    assert_eq!(e.rtr, None);
    assert!(e.initiator_sends_first);
    assert!(sent(&outs).is_empty());
}

fn rtr2007(markers: bool) -> (InitiatorConfig, ResponderConfig) {
    (
        InitiatorConfig {
            dialect: Dialect::RtrFrame2007,
            peer_to_peer: true,
            markers,
            ..InitiatorConfig::default()
        },
        ResponderConfig {
            dialect: Dialect::RtrFrame2007,
            markers,
            ..ResponderConfig::default()
        },
    )
}

#[test]
fn rtr_frame_2007_pair() {
    for markers in [false, true] {
        let (i, r) = rtr2007(markers);
        let run = run_pair(i, r, AcceptParams::default(), &mut bytewise);
        check_run(&run);
        let req = sent(&run.i_out);
        let m = if markers { 0x80 } else { 0 };
        assert_eq!(
            &req[..20],
            &frame(&REQUEST_KEY, &format!("{:02x} 01 00 00", 0x50 | m))[..]
        );
        assert_eq!(&req[20..40], &frame(b"MPA ID Rtr Frame", "40 01 00 00")[..]);
        // FPDU mode (and the marker origin) starts after the Rtr Frame: the dataplane's
        // first FPDU, from stream position 0.
        assert_eq!(req.len(), 40);
        assert_eq!(run.i_est().tx_offset, 0);
        if markers {
            assert_eq!(&run.i_dataplane_tx[..4], &[0, 0, 0, 0]);
        }
        let (ie, re) = (run.i_est(), run.r_est());
        assert!(ie.peer_to_peer && re.peer_to_peer);
        assert!(!re.initiator_sends_first);
        assert_eq!(&sent(&run.r_out)[16..20], &[0x50 | m, 1, 0, 0]);
    }
}

#[test]
fn rtr_frame_2007_responder_without_support_falls_back_to_client_server() {
    let (i, mut r) = rtr2007(false);
    r.rtr_frame = false;
    let run = run_pair(i, r, AcceptParams::default(), &mut whole);
    check_run(&run);
    assert_eq!(sent(&run.i_out).len(), 20, "no Rtr Frame");
    assert!(run.r_est().initiator_sends_first);
}

#[test]
fn rtr_frame_2007_key_as_printed_is_accepted() {
    let (_, r) = rtr2007(false);
    let t = Instant::now();
    let mut r = Responder::new(r, t).unwrap();
    r.on_data(&frame(&REQUEST_KEY, "10 01 00 00"), t);
    drain_r(&mut r);
    r.accept(AcceptParams::default(), t).unwrap();
    drain_r(&mut r);
    r.on_data(&frame(&RTR_KEY_AS_PRINTED, "40 01 00 00"), t);
    assert!(established(&drain_r(&mut r)).is_some());
}

#[test]
fn rtr_frame_2007_bad_rtr_frame_closes() {
    let (_, r) = rtr2007(false);
    let t = Instant::now();
    let mut r = Responder::new(r, t).unwrap();
    r.on_data(&frame(&REQUEST_KEY, "10 01 00 00"), t);
    drain_r(&mut r);
    r.accept(AcceptParams::default(), t).unwrap();
    drain_r(&mut r);
    r.on_data(
        &fpdu(proto::startup::FpduMode::CRC_ONLY, &send_ulpdu(1, b"x")),
        t,
    );
    let outs = drain_r(&mut r);
    assert!(closes(&outs));
    assert!(sent(&outs).is_empty());
}

// ---- property tests --------------------------------------------------------------------

fn arb_model() -> impl Strategy<Value = Model> {
    prop_oneof![
        Just(Model::ClientServer),
        Just(Model::P2p(RtrType::Write)),
        Just(Model::P2p(RtrType::Read)),
        Just(Model::P2p(RtrType::Send)),
    ]
}

fn arb_ird_ord() -> impl Strategy<Value = u16> {
    prop_oneof![0u16..200, Just(NN)]
}

fn chunker(sizes: Vec<usize>) -> impl FnMut(&[u8]) -> Vec<Vec<u8>> {
    let mut k = 0;
    move |b: &[u8]| {
        let mut v = Vec::new();
        let mut rest = b;
        while !rest.is_empty() {
            let n = sizes[k % sizes.len()].min(rest.len());
            k += 1;
            v.push(rest[..n].to_vec());
            rest = &rest[n..];
        }
        v
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn pair_survives_any_segmentation(
        markers in any::<(bool, bool)>(),
        crc in any::<(bool, bool)>(),
        enhanced in any::<bool>(),
        model in arb_model(),
        ird in arb_ird_ord(),
        ord in arb_ird_ord(),
        accept_ird in 0u16..300,
        accept_ord in any::<u16>(),
        pd in proptest::collection::vec(any::<u8>(), 0..64),
        sizes in proptest::collection::vec(1usize..64, 1..8),
    ) {
        let (mut i, r) = configs(markers, crc, enhanced, model, (ird, ord));
        i.private_data = pd;
        let accept = AcceptParams { ird: accept_ird, ord: accept_ord, ..AcceptParams::default() };
        let run = run_pair(i, r, accept, &mut chunker(sizes));
        check_run(&run);
    }

    #[test]
    fn responder_never_panics_on_arbitrary_input(
        prefix in prop_oneof![Just(Vec::new()), Just(REQUEST_KEY.to_vec())],
        chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..80), 0..8),
        actions in proptest::collection::vec(0u8..8, 0..8),
        dialect in prop_oneof![Just(Dialect::Rfc6581), Just(Dialect::Draft2010), Just(Dialect::RtrFrame2007)],
    ) {
        let t = Instant::now();
        let cfg = ResponderConfig { dialect, ..ResponderConfig::default() };
        let mut r = Responder::new(cfg, t).unwrap();
        r.on_data(&prefix, t);
        for (k, c) in chunks.iter().enumerate() {
            r.on_data(c, t);
            match actions.get(k).copied().unwrap_or(0) {
                1 => { let _ = r.accept(AcceptParams::default(), t); }
                2 => { let _ = r.reject(c.clone()); }
                3 => r.on_timeout(t + Duration::from_secs(k as u64 * 3)),
                4 => r.on_closed(CloseKind::Fin),
                5 => { let _ = r.abort(); }
                _ => {}
            }
            while r.poll_output().is_some() {}
        }
    }

    #[test]
    fn responder_never_panics_after_valid_request(
        req in prop_oneof![
            Just(frame(&REQUEST_KEY, "50 02 00 04 80 10 c0 10")),
            Just(frame(&REQUEST_KEY, "d0 02 00 04 c0 10 c0 10")),
            Just(frame(&REQUEST_KEY, "40 01 00 00")),
        ],
        chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..80), 0..8),
    ) {
        let t = Instant::now();
        let mut r = Responder::new(ResponderConfig::default(), t).unwrap();
        r.on_data(&req, t);
        r.accept(AcceptParams::default(), t).unwrap();
        for c in &chunks {
            r.on_data(c, t);
            while let Some(o) = r.poll_output() {
                // Rule 4: the only octets a Responder may send before a valid FPDU is its
                // Reply; after one, only a Read Response or a Terminate (tested elsewhere).
                let _ = o;
            }
        }
    }

    #[test]
    fn initiator_never_panics_on_arbitrary_input(
        prefix in prop_oneof![Just(Vec::new()), Just(REPLY_KEY.to_vec()), Just(frame(&REPLY_KEY, "50 02 00 04"))],
        chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..80), 0..8),
        actions in proptest::collection::vec(0u8..8, 0..8),
        p2p in any::<bool>(),
        confirm in any::<bool>(),
        dialect in prop_oneof![Just(Dialect::Rfc6581), Just(Dialect::Draft2010), Just(Dialect::RtrFrame2007)],
    ) {
        let t = Instant::now();
        let cfg = InitiatorConfig { dialect, peer_to_peer: p2p, confirm_reply: confirm, ..InitiatorConfig::default() };
        let mut i = Initiator::new(cfg, t).unwrap();
        i.on_data(&prefix, t);
        for (k, c) in chunks.iter().enumerate() {
            i.on_data(c, t);
            match actions.get(k).copied().unwrap_or(0) {
                1 => { let _ = i.confirm(); }
                2 => { let _ = i.refuse(); }
                3 => i.on_timeout(t + Duration::from_secs(k as u64 * 4)),
                4 => i.on_closed(CloseKind::Reset),
                5 => { let _ = i.abort(); }
                _ => {}
            }
            while i.poll_output().is_some() {}
        }
    }

    #[test]
    fn initiator_reply_split_anywhere_gives_same_result(
        cut in proptest::collection::vec(any::<prop::sample::Index>(), 0..4),
        tail in proptest::collection::vec(any::<u8>(), 0..16),
    ) {
        let mut bytes = frame(&REPLY_KEY, "50 02 00 06 00 04 00 02 68 69");
        bytes.extend_from_slice(&tail);
        let t = Instant::now();
        let run = |pieces: Vec<&[u8]>| {
            let mut i = Initiator::new(InitiatorConfig::default(), t).unwrap();
            drain_i(&mut i);
            let mut outs = Vec::new();
            let mut after = Vec::new();
            for p in pieces {
                if i.state() == proto::startup::InitiatorState::Finished {
                    after.extend_from_slice(p);
                } else {
                    i.on_data(p, t);
                    outs.extend(drain_i(&mut i));
                }
            }
            (outs, after)
        };
        let mut points: Vec<usize> = cut.iter().map(|c| c.index(bytes.len() + 1)).collect();
        points.sort_unstable();
        let mut pieces = Vec::new();
        let mut last = 0;
        for p in points {
            pieces.push(&bytes[last..p]);
            last = p;
        }
        pieces.push(&bytes[last..]);
        let (split, after) = run(pieces);
        let e = established(&split).unwrap();
        let mut stream = e.rx_pending.clone();
        stream.extend_from_slice(&after);
        prop_assert_eq!(&stream, &tail);
        prop_assert_eq!(&e.reply.private_data, b"hi");
        let (whole, _) = run(vec![&bytes[..]]);
        let w = established(&whole).unwrap();
        prop_assert_eq!(&w.rx_pending, &tail);
        prop_assert_eq!((&w.reply, w.tx_mode, w.ird_ord), (&e.reply, e.tx_mode, e.ird_ord));
    }
}

#[test]
fn draft2010_initiator_sends_term_2_0_7_when_no_offered_type_is_accepted() {
    let cfg = InitiatorConfig {
        dialect: Dialect::Draft2010,
        peer_to_peer: true,
        rtr_types: RtrTypes::NONE.with(RtrType::Write),
        crc: false,
        ..InitiatorConfig::default()
    };
    let mut i = Initiator::new(cfg, Instant::now()).unwrap();
    drain_i(&mut i);
    // Draft layout: A (0x8000 of the IRD half) = Send only.
    i.on_data(
        &frame(&REPLY_KEY, "10 02 00 04 80 01 00 01"),
        Instant::now(),
    );
    let outs = drain_i(&mut i);
    let u = ulpdus(proto::startup::FpduMode::default(), &sent(&outs));
    let seg = wire::rdmap::parse_segment(&u[0]).unwrap();
    assert!(matches!(
        seg.body,
        wire::rdmap::Body::Terminate { terminate, .. } if terminate.error.triple() == (2, 0, 7)
    ));
    assert!(closes(&outs));
}

#[test]
fn rtr_frame_2007_initiator_without_s_sends_no_rtr_frame() {
    let (mut i, r) = rtr2007(false);
    i.peer_to_peer = false;
    let run = run_pair(i, r, AcceptParams::default(), &mut whole);
    check_run(&run);
    assert_eq!(sent(&run.i_out).len(), 20);
    assert_eq!(sent(&run.r_out)[16] & 0x10, 0, "no S in the Reply");
}
