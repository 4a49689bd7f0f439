//! End to end over the in-memory wire: every RDMA operation in every MPA mode (markers ×
//! CRC × Rev 1/2 × client-server / peer-to-peer with each RTR type), every byte checked.

mod e2e;

use control::verbs::*;
use e2e::*;
use proto::qp::Access;
use proto::rtr::{RtrType, RtrTypes};

#[derive(Debug, Clone, Copy)]
struct Mode {
    markers: bool,
    crc: bool,
    enhanced: bool,
    rtr: Option<RtrType>,
}

fn configs(m: Mode) -> (InitiatorConfig, ResponderConfig) {
    let mut i = InitiatorConfig {
        markers: m.markers,
        crc: m.crc,
        enhanced: m.enhanced,
        ird: 8,
        ord: 8,
        ..Default::default()
    };
    let r = ResponderConfig {
        markers: m.markers,
        crc: m.crc,
        ..Default::default()
    };
    if let Some(t) = m.rtr {
        i.peer_to_peer = true;
        i.rtr_types = RtrTypes::NONE.with(t);
    }
    (i, r)
}

/// Sends `data` from `from` to `to` (a receive is posted first) and checks it arrived.
fn send_and_check(env: &mut Env, from: &Side, to: &Side, data: &[u8], wr_id: u64) {
    let src = from
        .pd
        .reg_mr(data.len().max(1), Access::LOCAL_WRITE)
        .unwrap();
    src.write(0, data).unwrap();
    let dst = to.pd.reg_mr(data.len() + 64, Access::LOCAL_WRITE).unwrap();
    to.qp
        .post_recv(RecvWr {
            wr_id: wr_id + 1,
            local: dst.sge(0, (data.len() + 64) as u32),
        })
        .unwrap();
    // Let the receive reach the core before the Send can arrive.
    env.pump();
    from.qp
        .post_send(SendWr {
            wr_id,
            op: SendOp::Send,
            local: src.sge(0, data.len() as u32),
            signaled: true,
        })
        .unwrap();
    let c = env.completion("send completion", &from.cq);
    assert_eq!(
        (c.wr_id, c.status, c.opcode),
        (wr_id, WcStatus::Success, WcOpcode::Send)
    );
    let c = env.completion("recv completion", &to.cq);
    assert_eq!(
        (c.wr_id, c.status, c.opcode),
        (wr_id + 1, WcStatus::Success, WcOpcode::Recv)
    );
    assert_eq!(c.byte_len as usize, data.len());
    let mut got = vec![0; data.len() + 64];
    dst.read(0, &mut got).unwrap();
    assert_eq!(&got[..data.len()], data, "send payload");
    assert!(
        got[data.len()..].iter().all(|&b| b == 0),
        "octets beyond the message"
    );
}

fn write_and_check(env: &mut Env, from: &Side, to: &Side, data: &[u8], wr_id: u64) {
    let src = from
        .pd
        .reg_mr(data.len().max(1), Access::LOCAL_WRITE)
        .unwrap();
    src.write(0, data).unwrap();
    let dst = to
        .pd
        .reg_mr(data.len() + 128, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    from.qp
        .post_send(SendWr {
            wr_id,
            op: SendOp::Write {
                remote_stag: dst.key(),
                remote_to: dst.base_to() + 64,
            },
            local: src.sge(0, data.len() as u32),
            signaled: true,
        })
        .unwrap();
    let c = env.completion("write completion", &from.cq);
    assert_eq!(
        (c.wr_id, c.status, c.opcode),
        (wr_id, WcStatus::Success, WcOpcode::Write)
    );
    // The Write is placed when its last segment arrives: wait for the last octet.
    let last = data.len() + 63;
    if !data.is_empty() {
        let want = data[data.len() - 1];
        env.until("write placement", |_| {
            (dst.load_u8_acquire(last) == Some(want)).then_some(())
        });
    }
    // Make sure everything has landed: a Send after the Write is delivered after it.
    send_and_check(env, from, to, b"fence", wr_id + 10);
    let mut got = vec![0; data.len() + 128];
    dst.read(0, &mut got).unwrap();
    assert!(
        got[..64].iter().all(|&b| b == 0),
        "octets before the target"
    );
    assert_eq!(&got[64..64 + data.len()], data, "write payload");
    assert!(
        got[64 + data.len()..].iter().all(|&b| b == 0),
        "octets after the target"
    );
}

fn read_and_check(env: &mut Env, from: &Side, to: &Side, data: &[u8], wr_id: u64) {
    let src = to
        .pd
        .reg_mr(
            data.len().max(1) + 32,
            Access::LOCAL_WRITE | Access::REMOTE_READ,
        )
        .unwrap();
    src.write(32, data).unwrap();
    let sink = from
        .pd
        .reg_mr(data.len() + 16, Access::LOCAL_WRITE)
        .unwrap();
    from.qp
        .post_send(SendWr {
            wr_id,
            op: SendOp::Read {
                remote_stag: src.key(),
                remote_to: src.base_to() + 32,
            },
            local: sink.sge(8, data.len() as u32),
            signaled: true,
        })
        .unwrap();
    let c = env.completion("read completion", &from.cq);
    assert_eq!(
        (c.wr_id, c.status, c.opcode),
        (wr_id, WcStatus::Success, WcOpcode::Read)
    );
    assert_eq!(c.byte_len as usize, data.len());
    let mut got = vec![0; data.len() + 16];
    sink.read(0, &mut got).unwrap();
    assert!(got[..8].iter().all(|&b| b == 0));
    assert_eq!(&got[8..8 + data.len()], data, "read payload");
    assert!(got[8 + data.len()..].iter().all(|&b| b == 0));
}

fn run_mode(m: Mode) {
    let mut env = Env::perfect();
    let (i, r) = configs(m);
    let conn = connect(&mut env, i, r, AcceptParams::default(), |env, a, b| {
        send_and_check(env, a, b, b"hello from the initiator", 1000)
    })
    .unwrap_or_else(|e| panic!("{m:?}: connect failed: {e}"));
    let ea = &conn.info_a.established;
    assert_eq!(ea.tx_mode.markers, m.markers, "{m:?}");
    assert_eq!(ea.tx_mode.crc, m.crc, "{m:?}");
    assert_eq!(ea.peer_to_peer, m.rtr.is_some());
    assert_eq!(ea.rtr, m.rtr);
    let (a, b) = (&conn.a, &conn.b);
    let mut id = 1;
    for &len in &[0usize, 1, 7, 1000, 1460, 4096, 65536, 300_000] {
        let data = pattern(len as u64 + id, len);
        send_and_check(&mut env, a, b, &data, id);
        send_and_check(&mut env, b, a, &data, id + 2);
        write_and_check(&mut env, a, b, &data, id + 4);
        write_and_check(&mut env, b, a, &data, id + 6);
        read_and_check(&mut env, a, b, &data, id + 8);
        read_and_check(&mut env, b, a, &data, id + 9);
        id += 100;
    }
}

macro_rules! mode_tests {
    ($($name:ident: $m:expr, $c:expr, $e:expr, $r:expr;)*) => {$(
        #[test]
        fn $name() {
            run_mode(Mode { markers: $m, crc: $c, enhanced: $e, rtr: $r });
        }
    )*};
}

mode_tests! {
    rev1_plain: false, false, false, None;
    rev1_crc: false, true, false, None;
    rev1_markers: true, false, false, None;
    rev1_markers_crc: true, true, false, None;
    rev2_client_server: false, false, true, None;
    rev2_client_server_crc: false, true, true, None;
    rev2_client_server_markers: true, false, true, None;
    rev2_client_server_markers_crc: true, true, true, None;
    p2p_write_rtr: false, false, true, Some(RtrType::Write);
    p2p_write_rtr_crc: false, true, true, Some(RtrType::Write);
    p2p_write_rtr_markers: true, false, true, Some(RtrType::Write);
    p2p_write_rtr_markers_crc: true, true, true, Some(RtrType::Write);
    p2p_read_rtr: false, false, true, Some(RtrType::Read);
    p2p_read_rtr_crc: false, true, true, Some(RtrType::Read);
    p2p_read_rtr_markers: true, false, true, Some(RtrType::Read);
    p2p_read_rtr_markers_crc: true, true, true, Some(RtrType::Read);
    p2p_send_rtr: false, false, true, Some(RtrType::Send);
    p2p_send_rtr_crc: false, true, true, Some(RtrType::Send);
    p2p_send_rtr_markers: true, false, true, Some(RtrType::Send);
    p2p_send_rtr_markers_crc: true, true, true, Some(RtrType::Send);
}

#[test]
fn connects_peer_to_peer_and_both_sides_agree() {
    let mut env = Env::perfect();
    let (i, r) = configs(Mode {
        markers: true,
        crc: true,
        enhanced: true,
        rtr: Some(RtrType::Read),
    });
    let conn = connect(&mut env, i, r, AcceptParams::default(), |_, _, _| {}).unwrap();
    let (ea, eb) = (&conn.info_a.established, &conn.info_b.established);
    assert!(ea.peer_to_peer && eb.peer_to_peer);
    assert_eq!(ea.tx_mode, eb.rx_mode);
    assert_eq!(ea.rx_mode, eb.tx_mode);
    assert_eq!((conn.info_a.ird, conn.info_a.ord), (8, 8));
    assert_eq!(conn.a.qp.state(), QpRingState::Rts);
    env.until("B's QP published", |_| {
        (conn.b.qp.state() == QpRingState::Rts).then_some(())
    });
}

/// The first SYN to a peer whose MAC is not known yet waits for the ARP reply and goes
/// with it (RFC 1122 2.3.2.2), instead of waiting for the SYN's retransmission timer.
#[test]
fn the_first_syn_waits_for_the_arp_reply_not_for_a_retransmission() {
    let mut env = Env::perfect();
    let (i, r) = configs(Mode {
        markers: false,
        crc: true,
        enhanced: true,
        rtr: Some(RtrType::Read),
    });
    connect(&mut env, i, r, AcceptParams::default(), |_, _, _| {}).unwrap();
    // (A stall of this thread longer than the SYN's 10 ms timer could add a second,
    // retransmitted SYN, and a second hold; the first one was sent all the same.)
    let a = env.pair.core_a.net_stats();
    assert!(a.tx_unresolved >= 1 && a.held_sent >= 1, "{a:?}");
    // The held SYN was a good segment: B took it, and found nothing bad.
    assert_eq!(env.pair.core_b.stats().bad_segments, 0);
    assert_eq!(env.pair.core_b.stats().unmatched_segments, 0);
    // B learnt A's MAC from A's request: it never had to hold anything.
    let b = env.pair.core_b.net_stats();
    assert_eq!((b.tx_unresolved, b.held_sent), (0, 0));
}

/// The messages a peer sends just before closing reach the consumer: the FPDUs before the
/// FIN are placed and completed before the close flushes the QP (a FIN and the last data
/// often arrive in one burst, or one segment).
#[test]
fn messages_sent_right_before_a_disconnect_are_delivered() {
    let mut env = Env::perfect();
    let (i, r) = configs(Mode {
        markers: false,
        crc: true,
        enhanced: true,
        rtr: Some(RtrType::Write),
    });
    let conn = connect(&mut env, i, r, AcceptParams::default(), |_, _, _| {}).unwrap();
    let dst = conn.b.pd.reg_mr(64 * 100, Access::LOCAL_WRITE).unwrap();
    for k in 0..100u64 {
        conn.b
            .qp
            .post_recv(RecvWr {
                wr_id: k,
                local: dst.sge(k * 64, 64),
            })
            .unwrap();
    }
    env.until("B's QP published", |_| {
        (conn.b.qp.state() == QpRingState::Rts).then_some(())
    });
    env.pump();
    let src = conn.a.pd.reg_mr(64 * 10, Access::LOCAL_WRITE).unwrap();
    for k in 0..10u64 {
        src.write(k as usize * 64, &pattern(k, 64)).unwrap();
        conn.a
            .qp
            .post_send(SendWr {
                wr_id: k,
                op: SendOp::Send,
                local: src.sge(k * 64, 64),
                signaled: false,
            })
            .unwrap();
    }
    // Only A runs until its FIN has gone out, so B finds the FPDUs and the FIN in one
    // receive burst.
    env.pair.a.disconnect(conn.info_a.conn);
    let until = std::time::Instant::now() + std::time::Duration::from_millis(200);
    while std::time::Instant::now() < until {
        env.pair.core_a.poll();
    }
    let mut got = Vec::new();
    env.until("B's ten receives", |env| {
        let _ = env;
        while let Some(c) = conn.b.cq.poll_one() {
            if c.status == WcStatus::Success {
                got.push(c);
            }
        }
        (got.len() == 10).then_some(())
    });
    for (k, c) in got.iter().enumerate() {
        assert_eq!(c.wr_id, k as u64);
        assert_eq!(c.byte_len, 64);
        let mut b = vec![0; 64];
        dst.read(k * 64, &mut b).unwrap();
        assert_eq!(check(&b, k as u64), 0, "message {k}");
    }
}

/// A Write to an STag the peer never registered: the peer's QP sends a Terminate (RFC 5041
/// 7.2: DDP, tagged buffer error, invalid STag) and both QPs go to error; each side's
/// consumer finds the Terminates on its QP.
#[test]
fn a_terminate_is_on_both_queue_pairs() {
    let mut env = Env::perfect();
    let (i, r) = configs(Mode {
        markers: false,
        crc: true,
        enhanced: true,
        rtr: Some(RtrType::Write),
    });
    let conn = connect(&mut env, i, r, AcceptParams::default(), |_, _, _| {}).unwrap();
    env.until("B's QP published", |_| {
        (conn.b.qp.state() == QpRingState::Rts).then_some(())
    });
    assert_eq!(conn.a.qp.terminates(), None);
    let src = conn.a.pd.reg_mr(64, Access::LOCAL_WRITE).unwrap();
    conn.a
        .qp
        .post_send(SendWr {
            wr_id: 7,
            op: SendOp::Write {
                remote_stag: 0x0bad_0000,
                remote_to: 0,
            },
            local: src.sge(0, 64),
            signaled: true,
        })
        .unwrap();
    let t = env.until("A's Terminates", |_| conn.a.qp.terminates());
    let tb = env.until("B's Terminates", |_| conn.b.qp.terminates());
    let want = (1, 1, 0); // DDP, tagged buffer error, invalid STag
    assert_eq!(t.received.map(|t| t.error.triple()), Some(want), "{t:?}");
    assert_eq!(t.sent, None, "{t:?}");
    assert_eq!(tb.sent.map(|t| t.error.triple()), Some(want), "{tb:?}");
    assert_eq!(tb.received, None, "{tb:?}");
    assert_eq!(conn.a.qp.state(), QpRingState::Error);
    // The Write itself completed locally once handed to the LLP (its completion says
    // nothing of placement at the peer); what is posted after the error is refused.
    let c = env.completion("the Write's completion", &conn.a.cq);
    assert_eq!((c.wr_id, c.opcode), (7, WcOpcode::Write));
    assert_eq!(
        conn.a.qp.post_send(SendWr {
            wr_id: 8,
            op: SendOp::Send,
            local: src.sge(0, 1),
            signaled: true,
        }),
        Err(PostError::QpError)
    );
}

/// A client-server connection with CRC on (markers as asked), established by a first
/// Send from A.
fn client_server(env: &mut Env, markers: bool) -> Conn {
    let (i, r) = configs(Mode {
        markers,
        crc: true,
        enhanced: true,
        rtr: None,
    });
    connect(env, i, r, AcceptParams::default(), |env, a, b| {
        send_and_check(env, a, b, b"first", 1000)
    })
    .unwrap()
}

/// Small messages posted together share TCP records (whole FPDUs, each record within one
/// segment), with and without markers, and every octet arrives, in order; a big
/// message's FPDUs take a record each.
#[test]
fn small_fpdus_share_records() {
    small_fpdus_in_records(None);
}

/// With a peer whose window is smaller than a segment, records of several FPDUs are kept
/// to half of it: none has to be split across segments, and everything arrives.
#[test]
fn small_fpdus_share_records_within_a_small_window() {
    small_fpdus_in_records(Some(1200));
}

fn small_fpdus_in_records(window: Option<usize>) {
    for markers in [false, true] {
        let mut env = match window {
            None => Env::perfect(),
            Some(w) => {
                let mut tcp = control::embedded::tcp_config(1500);
                tcp.recv_buffer = w;
                let wire = dataplane::port::mem::WireConfig::default();
                Env {
                    pair: control::embedded::pair(wire.clone(), wire, tcp).unwrap(),
                }
            }
        };
        let conn = client_server(&mut env, markers);
        let (a, b) = (&conn.a, &conn.b);
        const N: usize = 200;
        const SLOT: usize = 40;
        let len = |k: usize| 1 + k % SLOT;
        let src = a.pd.reg_mr(N * SLOT, Access::LOCAL_WRITE).unwrap();
        let dst = b.pd.reg_mr(N * SLOT, Access::LOCAL_WRITE).unwrap();
        for k in 0..N {
            src.write(k * SLOT, &pattern(k as u64, SLOT)).unwrap();
            b.qp.post_recv(RecvWr {
                wr_id: k as u64,
                local: dst.sge((k * SLOT) as u64, SLOT as u32),
            })
            .unwrap();
        }
        env.pump();
        let before = env.pair.core_a.stats();
        for k in 0..N {
            a.qp.post_send(SendWr {
                wr_id: k as u64,
                op: SendOp::Send,
                local: src.sge((k * SLOT) as u64, len(k) as u32),
                signaled: true,
            })
            .unwrap();
        }
        for k in 0..N {
            let c = env.completion("receive", &b.cq);
            assert_eq!(
                (c.wr_id, c.status, c.byte_len as usize),
                (k as u64, WcStatus::Success, len(k)),
                "markers {markers}"
            );
            let mut got = vec![0; len(k)];
            dst.read(k * SLOT, &mut got).unwrap();
            assert_eq!(got, pattern(k as u64, SLOT)[..len(k)], "message {k}");
        }
        for k in 0..N {
            let c = env.completion("send completion", &a.cq);
            assert_eq!((c.wr_id, c.status), (k as u64, WcStatus::Success));
        }
        let after = env.pair.core_a.stats();
        let fpdus = after.fpdus_sent - before.fpdus_sent;
        let records = after.records_sent - before.records_sent;
        assert!(fpdus >= N as u64, "{fpdus}");
        // About 25 Sends of 18 + 20 octets fit a 1448-octet segment, 15 half a 1200-octet
        // window.
        let ratio = if window.is_some() { 5 } else { 10 };
        assert!(
            records * ratio <= fpdus,
            "markers {markers}: {records} records for {fpdus} FPDUs"
        );
        let a_tcp = env.pair.core_a.alignment();
        assert_eq!(a_tcp.new_split, 0, "every segment holds whole FPDUs");
        // One 64 KiB Write: full-size FPDUs, a record each.
        let before = env.pair.core_a.stats();
        write_and_check(&mut env, a, b, &pattern(7, 65536), 5000);
        let after = env.pair.core_a.stats();
        assert_eq!(
            after.records_sent - before.records_sent,
            after.fpdus_sent - before.fpdus_sent
        );
    }
}

/// With jumbo frames a poll's burst can hold more than the receive window: the receiver
/// takes a window's frames in steps of a quarter window and acknowledges each step before
/// it takes the next (`dataplane::lcore::rx_step_frames`), so the sender gets its window
/// back while the receiver is still placing (one ACK after the whole burst left the two
/// ends taking turns). Every octet of the writes is checked afterwards.
#[test]
fn a_window_of_jumbo_frames_is_acknowledged_step_by_step() {
    use dataplane::lcore::{rx_step_frames, RX_BURST};
    use dataplane::port::mem::WireConfig;
    const MTU: usize = 9000;
    const MSG: usize = 64 << 10;
    const N: usize = 32;
    let tcp = control::embedded::tcp_config(MTU);
    let step = rx_step_frames(tcp.recv_buffer, MTU);
    assert!(
        step < RX_BURST,
        "a step of {step} frames is the whole burst"
    );
    let wire = WireConfig::default().with_mtu(MTU);
    let mut env = Env::new(wire.clone(), wire, MTU);
    let conn = client_server(&mut env, false);
    let (a, b) = (&conn.a, &conn.b);
    let src = a.pd.reg_mr(N * MSG, Access::LOCAL_WRITE).unwrap();
    let dst =
        b.pd.reg_mr(N * MSG, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
            .unwrap();
    for k in 0..N {
        src.write(k * MSG, &pattern(k as u64, MSG)).unwrap();
    }
    let post = |first_id: u64| {
        for k in 0..N {
            a.qp.post_send(SendWr {
                wr_id: first_id + k as u64,
                op: SendOp::Write {
                    remote_stag: dst.key(),
                    remote_to: dst.base_to() + (k * MSG) as u64,
                },
                local: src.sge((k * MSG) as u64, MSG as u32),
                signaled: true,
            })
            .unwrap();
        }
    };
    // A warm-up round opens the congestion window beyond the receive window.
    post(0);
    for k in 0..N {
        let c = env.completion("warm-up write completion", &a.cq);
        assert_eq!((c.wr_id, c.status), (k as u64, WcStatus::Success));
    }
    post(N as u64);
    // A alone sends until its window is spent (2 MiB of writes, a 512 KiB window).
    let sent_before = env.pair.core_a.port_stats().tx_frames;
    let mut idle = 0;
    let mut last = sent_before;
    while idle < 16 {
        env.pair.core_a.poll();
        let now = env.pair.core_a.port_stats().tx_frames;
        idle = if now == last { idle + 1 } else { 0 };
        last = now;
    }
    let in_flight = (last - sent_before) as usize;
    assert!(
        in_flight > 2 * step,
        "A sent {in_flight} frames, fewer than two steps of {step}"
    );
    // One poll of B takes them (up to a burst) in steps, an ACK after each.
    let (acks_before, steps_before) = (
        env.pair.core_b.port_stats().tx_frames,
        env.pair.core_b.stats().window_steps,
    );
    env.pair.core_b.poll();
    let taken = in_flight.min(RX_BURST);
    let acks = env.pair.core_b.port_stats().tx_frames - acks_before;
    let steps = env.pair.core_b.stats().window_steps - steps_before;
    // Every step of at least two segments is acknowledged at once (a last step of one
    // segment may leave its ACK delayed); taken in one burst, one ACK would cover all.
    assert!(
        acks >= 2 && acks as usize >= taken / step,
        "{acks} ACKs for {taken} frames taken in steps of {step}"
    );
    assert_eq!(
        steps as usize,
        taken.div_ceil(step),
        "steps of {taken} frames"
    );
    assert_eq!(env.pair.core_b.stats().recovery_bursts, 0);
    for k in 0..N {
        let c = env.completion("write completion", &a.cq);
        assert_eq!((c.wr_id, c.status), ((N + k) as u64, WcStatus::Success));
    }
    send_and_check(&mut env, a, b, b"fence", 2000);
    let mut got = vec![0; MSG];
    for k in 0..N {
        dst.read(k * MSG, &mut got).unwrap();
        assert_eq!(check(&got, k as u64), 0, "write {k}");
    }
}
