//! Engine tests: two connections back to back through [`super::harness`].

use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{TcpControl, TcpRepr, TcpSeqNumber, TcpTimestampRepr};

use super::harness::*;
use super::*;

fn repr_from(from_b: bool) -> TcpRepr<'static> {
    let (s, d) = if from_b {
        (PORT_B, PORT_A)
    } else {
        (PORT_A, PORT_B)
    };
    TcpRepr {
        window_len: 1000,
        ..super::bare_repr(s, d, TcpControl::None, TcpSeqNumber(0))
    }
}

fn established(seed: u64) -> Pair {
    let mut p = Pair::active_passive(seed, fast_config(), fast_config());
    assert!(p.established());
    p
}

/// [`fast_config`] without tail loss probes: for tests of the retransmission timer.
fn no_tlp() -> Config {
    Config {
        tail_loss_probe: false,
        ..fast_config()
    }
}

/// Runs until B has all of `d` and A nothing in flight; checks B's octets and returns
/// A's statistics.
fn all_delivered(p: &mut Pair, d: &[u8]) -> Stats {
    all_delivered_within(p, d, 100_000)
}

/// [`all_delivered`] with `budget` microseconds to do it in.
fn all_delivered_within(p: &mut Pair, d: &[u8], budget: u64) -> Stats {
    assert!(p.run_until(budget, |p| p.rx_b.len() == d.len()
        && p.a.as_ref().unwrap().in_flight() == 0));
    assert_eq!(p.rx_b, d);
    p.a().stats().clone()
}

/// An established pair whose A sends no tail loss probes.
fn established_no_tlp(seed: u64) -> Pair {
    let mut p = Pair::active_passive(seed, no_tlp(), fast_config());
    assert!(p.established());
    p
}

/// A segment as B would send it now (right SEQ, ACK and timestamps), for injection at A.
fn from_b_now(p: &mut Pair) -> TcpRepr<'static> {
    let tsval = p
        .log
        .iter()
        .rev()
        .find_map(|s| if s.from == Side::B { s.tsval } else { None })
        .unwrap_or(0);
    let b = p.b();
    let mut r = repr_from(true);
    r.seq_number = b.snd_nxt();
    r.ack_number = Some(b.rcv_nxt());
    r.timestamp = Some(TcpTimestampRepr::new(tsval, 0));
    r
}

/// Sends 40 full segments from A and waits until B has them and A nothing in flight (so
/// that cwnd has grown), then forgets what B received.
fn warm_up(p: &mut Pair) {
    let warm = records(p, Side::A, &[1448; 40]);
    assert!(p.run_until(1_000_000, |p| p.rx_b.len() == warm.len()
        && p.a.as_ref().unwrap().in_flight() == 0));
    p.rx_b.clear();
}

/// The window field (as sent, unscaled) of B's last segment: what an ACK injected as
/// B's must carry to be a duplicate.
fn last_window_of_b(p: &Pair) -> u16 {
    p.sent_by(Side::B).last().map(|s| s.wnd).unwrap_or_default()
}

fn records(p: &mut Pair, side: Side, sizes: &[usize]) -> Vec<u8> {
    let mut all = Vec::new();
    for (i, &n) in sizes.iter().enumerate() {
        let rec: Vec<u8> = (0..n).map(|k| (i * 7 + k) as u8).collect();
        all.extend_from_slice(&rec);
        p.conn(side).unwrap().send_fpdu(rec).expect("queued");
    }
    all
}

#[test]
fn handshake_active_passive_negotiates_options() {
    let mut p = established(1);
    let syns: Vec<&Seg> = p.log.iter().take(3).collect();
    assert_eq!(syns[0].from, Side::A);
    assert_eq!(syns[0].ctl, TcpControl::Syn);
    assert_eq!(syns[0].ack, None);
    assert_eq!(syns[0].mss, Some(1460));
    assert!(syns[0].ws.is_some() && syns[0].sack_perm && syns[0].ts);
    assert_eq!(syns[1].from, Side::B);
    assert_eq!(syns[1].ctl, TcpControl::Syn);
    assert!(syns[1].ack.is_some());
    assert_eq!(syns[2].from, Side::A);
    assert_eq!(syns[2].ctl, TcpControl::None);
    assert_eq!(p.ev_a, vec![Event::Established]);
    assert_eq!(p.ev_b, vec![Event::Established]);
    let (a_iss, b_iss) = (p.a().iss(), p.b().iss());
    assert_eq!(p.b().irs(), a_iss);
    assert_eq!(p.a().irs(), b_iss);
    for s in [Side::A, Side::B] {
        let c = p.conn(s).unwrap();
        assert!(c.timestamps() && c.sack());
        // 256 KiB buffer needs a shift of 3.
        assert_eq!(c.window_scale(), Some((3, 3)));
        // EMSS = 1460 - 12 (timestamps).
        assert_eq!(c.emss(), 1448);
        assert_eq!(c.cwnd(), 10 * 1448);
        assert!(c.srtt().is_some());
    }
}

#[test]
fn handshake_without_options() {
    let plain = Config {
        window_scaling: false,
        timestamps: false,
        sack: false,
        mtu: 9000,
        ..fast_config()
    };
    let mut p = Pair::active_passive(2, fast_config(), plain);
    assert!(p.established());
    let a = p.a();
    assert!(!a.timestamps() && !a.sack());
    assert_eq!(a.window_scale(), None);
    // Peer MSS 8960 but our MTU gives 1460.
    assert_eq!(a.emss(), 1460);
    assert_eq!(p.b().emss(), 1460);
    // The SYN-ACK carried none of the options A offered but B does not use.
    let synack = &p.log[1];
    assert!(synack.ws.is_none() && !synack.sack_perm && !synack.ts);
    // Windows are then at most 65535.
    assert!(p.a().rcv_wnd() <= 65535);
}

#[test]
fn handshake_when_peer_sends_no_mss_uses_536() {
    let mut p = Pair::new(3);
    let isn = IsnGenerator::with_key([3; 16]);
    let mut syn = repr_from(true);
    syn.control = TcpControl::Syn;
    syn.seq_number = TcpSeqNumber(1234);
    let c = Connection::accept(fast_config(), tuple_a(), &isn, p.instant(), &syn).unwrap();
    assert_eq!(c.emss(), 536);
    assert_eq!(c.state(), State::SynReceived);
    p.a = Some(c);
}

#[test]
fn simultaneous_open() {
    let mut p = Pair::new(4);
    let now = p.instant();
    p.a = Some(Connection::connect(
        fast_config(),
        tuple_a(),
        &IsnGenerator::with_key([1; 16]),
        now,
    ));
    p.b = Some(Connection::connect(
        fast_config(),
        tuple_b(),
        &IsnGenerator::with_key([2; 16]),
        now,
    ));
    assert!(p.established());
    // Both sent a SYN and then a SYN,ACK with the same ISS.
    for s in [Side::A, Side::B] {
        let syns: Vec<&Seg> = p.sent_by(s).filter(|x| x.ctl == TcpControl::Syn).collect();
        assert_eq!(syns.len(), 2, "{s:?}: {:?}", p.log);
        assert!(syns[0].ack.is_none() && syns[1].ack.is_some());
        assert_eq!(syns[0].seq, syns[1].seq);
    }
    let data = records(&mut p, Side::A, &[100, 200]);
    assert!(p.run_until(100_000, |p| p.rx_b.len() == 300));
    assert_eq!(p.rx_b, data);
}

#[test]
fn data_both_ways_then_active_close_and_time_wait() {
    let mut p = established(5);
    let da = records(&mut p, Side::A, &[1000, 40, 3000, 7]);
    let db = records(&mut p, Side::B, &[500; 9]);
    assert!(p.run_until(1_000_000, |p| p.rx_b.len() == da.len()
        && p.rx_a.len() == db.len()));
    assert_eq!(p.rx_b, da);
    assert_eq!(p.rx_a, db);
    p.a().close();
    assert_eq!(p.a().state(), State::FinWait1);
    assert!(p.run_until(100_000, |p| p.b.as_ref().unwrap().state()
        == State::CloseWait));
    assert_eq!(p.ev_b.last(), Some(&Event::PeerClosed));
    assert!(p.run_until(100_000, |p| p.a.as_ref().unwrap().state()
        == State::FinWait2));
    // B may still send in CLOSE-WAIT.
    let more = records(&mut p, Side::B, &[123]);
    assert!(p.run_until(100_000, |p| p.rx_a.len() == db.len() + 123));
    assert_eq!(&p.rx_a[db.len()..], &more[..]);
    p.b().close();
    assert_eq!(p.b().state(), State::LastAck);
    assert!(p.run_until(100_000, |p| p.a.as_ref().unwrap().state()
        == State::TimeWait));
    let tw_start = p.now;
    assert!(p.run_until(100_000, |p| p.b.as_ref().unwrap().state() == State::Closed));
    assert_eq!(p.ev_b.last(), Some(&Event::Closed));
    assert!(p.run_until(1_000_000, |p| p.a.as_ref().unwrap().state()
        == State::Closed));
    // TIME-WAIT lasted 2 MSL (100 ms here).
    let waited = p.now - tw_start;
    assert!((100_000..=100_100).contains(&waited), "{waited}");
    assert_eq!(
        p.ev_a,
        vec![Event::Established, Event::PeerClosed, Event::Closed]
    );
    assert!(p.a().send_fpdu(vec![1]).is_err());
}

#[test]
fn simultaneous_close_goes_through_closing() {
    let mut p = established(6);
    p.a().close();
    p.b().close();
    assert!(p.run_until(100_000, |p| {
        p.a.as_ref().unwrap().state() == State::TimeWait
            && p.b.as_ref().unwrap().state() == State::TimeWait
    }));
    // Both passed through CLOSING: each got the other's FIN before the ACK of its own.
    let fins = p.log.iter().filter(|s| s.ctl == TcpControl::Fin).count();
    assert_eq!(fins, 2);
    assert!(p.run_until(1_000_000, |p| p.a.as_ref().unwrap().state()
        == State::Closed
        && p.b.as_ref().unwrap().state() == State::Closed));
}

#[test]
fn fin_retransmitted_when_lost_and_time_wait_reacks() {
    let mut p = established(7);
    let mut dropped = 0;
    p.filter = Some(Box::new(move |s| {
        if s.from == Side::A && s.ctl == TcpControl::Fin && dropped < 1 {
            dropped += 1;
            return false;
        }
        true
    }));
    p.a().close();
    assert!(p.run_until(200_000, |p| p.b.as_ref().unwrap().state()
        == State::CloseWait));
    assert_eq!(p.a().stats().timeouts, 1);
    p.b().close();
    // Drop B's FIN's ACK from A once: B retransmits its FIN, A (in TIME-WAIT) re-ACKs.
    let mut dropped_ack = false;
    p.filter = Some(Box::new(move |s| {
        if s.from == Side::A && !dropped_ack && s.ctl == TcpControl::None {
            dropped_ack = true;
            return false;
        }
        true
    }));
    assert!(p.run_until(500_000, |p| p.b.as_ref().unwrap().state() == State::Closed));
    assert_eq!(p.a().state(), State::TimeWait);
    assert!(p.b().stats().timeouts >= 1);
}

// ------------------------------------------------------------------ RST and RFC 5961

/// Brings A to `target` and returns the pair.
fn a_in_state(target: State, seed: u64) -> Pair {
    let mut p = established(seed);
    match target {
        State::Established => {}
        State::FinWait1 => {
            // Keep the FIN unacknowledged: B drops nothing but A's FIN never arrives.
            p.filter = Some(Box::new(|s| {
                !(s.from == Side::A && s.ctl == TcpControl::Fin)
            }));
            p.a().close();
            p.transmit();
        }
        State::FinWait2 => {
            p.a().close();
            assert!(p.run_until(100_000, |p| p.a.as_ref().unwrap().state()
                == State::FinWait2));
        }
        State::CloseWait => {
            p.b().close();
            assert!(p.run_until(100_000, |p| p.a.as_ref().unwrap().state()
                == State::CloseWait));
        }
        State::LastAck => {
            p.b().close();
            assert!(p.run_until(100_000, |p| p.a.as_ref().unwrap().state()
                == State::CloseWait));
            p.filter = Some(Box::new(|s| {
                !(s.from == Side::A && s.ctl == TcpControl::Fin)
            }));
            p.a().close();
            p.transmit();
        }
        State::Closing => {
            // Both FINs sent; A's FIN (and so its ACK) never reaches B.
            p.filter = Some(Box::new(|s| {
                !(s.from == Side::A && s.ctl == TcpControl::Fin)
            }));
            p.a().close();
            p.b().close();
            assert!(p.run_until(100_000, |p| p.a.as_ref().unwrap().state() == State::Closing));
        }
        State::TimeWait => {
            p.a().close();
            assert!(p.run_until(100_000, |p| p.a.as_ref().unwrap().state()
                == State::FinWait2));
            p.b().close();
            assert!(p.run_until(100_000, |p| p.a.as_ref().unwrap().state()
                == State::TimeWait));
        }
        _ => unreachable!(),
    }
    assert_eq!(p.a().state(), target);
    p
}

#[test]
fn rst_in_every_synchronized_state() {
    let states = [
        State::Established,
        State::FinWait1,
        State::FinWait2,
        State::CloseWait,
        State::Closing,
        State::LastAck,
        State::TimeWait,
    ];
    for (i, &st) in states.iter().enumerate() {
        let seed = 100 + i as u64;
        // Out of window: ignored, nothing sent.
        let mut p = a_in_state(st, seed);
        p.transmit();
        let before = p.a().stats().segments_sent;
        let rcv_nxt = p.a().rcv_nxt();
        let mut rst = repr_from(true);
        rst.control = TcpControl::Rst;
        rst.seq_number = TcpSeqNumber(rcv_nxt.0.wrapping_add(1 << 30));
        p.inject(Side::A, &rst);
        p.transmit();
        assert_eq!(
            p.a().state(),
            st,
            "{st:?}: out-of-window RST must be ignored"
        );
        assert_eq!(p.a().stats().segments_sent, before, "{st:?}");

        // In window but not exact: challenge ACK, state kept.
        let mut rst = repr_from(true);
        rst.control = TcpControl::Rst;
        rst.seq_number = TcpSeqNumber(rcv_nxt.0.wrapping_add(10));
        let log_len = p.log.len();
        p.inject(Side::A, &rst);
        p.transmit();
        if st == State::TimeWait {
            // RCV.WND is still open in TIME-WAIT.
        }
        assert_eq!(p.a().state(), st, "{st:?}: inexact RST must not reset");
        assert_eq!(p.a().stats().challenge_acks, 1, "{st:?}");
        let ack = p.log[log_len..]
            .iter()
            .find(|s| s.from == Side::A)
            .expect("challenge ACK sent");
        assert_eq!(ack.ack, Some(rcv_nxt.0 as u32), "{st:?}");

        // Exact: reset.
        let mut rst = repr_from(true);
        rst.control = TcpControl::Rst;
        rst.seq_number = rcv_nxt;
        p.inject(Side::A, &rst);
        assert_eq!(p.a().state(), State::Closed, "{st:?}");
        assert_eq!(&p.ev_a[p.ev_a.len() - 2..], &[Event::Reset, Event::Closed]);
    }
}

#[test]
fn rst_in_syn_sent_and_syn_received() {
    // SYN-SENT: a RST is acceptable only with an ACK of our SYN.
    let mut p = Pair::active_passive(8, fast_config(), fast_config());
    p.listener = None;
    p.transmit();
    let iss = p.a().iss();
    let mut rst = repr_from(true);
    rst.control = TcpControl::Rst;
    p.inject(Side::A, &rst);
    assert_eq!(p.a().state(), State::SynSent);
    rst.ack_number = Some(TcpSeqNumber(iss.0.wrapping_add(5)));
    p.inject(Side::A, &rst);
    assert_eq!(p.a().state(), State::SynSent);
    // An unacceptable ACK without RST is answered with a RST <SEQ=SEG.ACK>.
    let mut bad = repr_from(true);
    bad.ack_number = Some(TcpSeqNumber(iss.0.wrapping_add(5)));
    bad.control = TcpControl::Syn;
    let n = p.log.len();
    p.inject(Side::A, &bad);
    p.transmit();
    let r = &p.log[n];
    assert_eq!(r.ctl, TcpControl::Rst);
    assert_eq!(r.seq, iss.0.wrapping_add(5) as u32);
    rst.ack_number = Some(TcpSeqNumber(iss.0.wrapping_add(1)));
    p.inject(Side::A, &rst);
    assert_eq!(p.a().state(), State::Closed);
    assert_eq!(p.ev_a, vec![Event::Reset, Event::Closed]);

    // SYN-RECEIVED: exact RST closes.
    let mut p = Pair::active_passive(9, fast_config(), fast_config());
    p.filter = Some(Box::new(|s| s.from == Side::A || s.ctl != TcpControl::Syn));
    assert!(p.run_until(1000, |p| p.b.is_some()));
    assert_eq!(p.b().state(), State::SynReceived);
    let mut rst = repr_from(false);
    rst.control = TcpControl::Rst;
    rst.seq_number = p.b().rcv_nxt();
    p.inject(Side::B, &rst);
    assert_eq!(p.b().state(), State::Closed);
}

#[test]
fn syn_in_established_gets_challenge_ack() {
    let mut p = established(10);
    let mut syn = from_b_now(&mut p);
    syn.control = TcpControl::Syn;
    syn.ack_number = None;
    syn.seq_number = TcpSeqNumber(12345);
    let n = p.log.len();
    p.inject(Side::A, &syn);
    p.transmit();
    assert_eq!(p.a().state(), State::Established);
    assert_eq!(p.a().stats().challenge_acks, 1);
    let ack = p.log[n].clone();
    assert_eq!(ack.from, Side::A);
    assert_eq!(ack.ack, Some(p.a().rcv_nxt().0 as u32));
    // The connection still works.
    let d = records(&mut p, Side::A, &[10]);
    assert!(p.run_until(10_000, |p| p.rx_b.len() == 10));
    assert_eq!(p.rx_b, d);
}

#[test]
fn challenge_acks_are_rate_limited() {
    let cfg = Config {
        challenge_ack_limit: 3,
        ..fast_config()
    };
    let mut p = Pair::active_passive(11, cfg, fast_config());
    assert!(p.established());
    let mut syn = from_b_now(&mut p);
    syn.control = TcpControl::Syn;
    syn.ack_number = None;
    for _ in 0..10 {
        p.inject(Side::A, &syn);
        p.transmit();
    }
    assert_eq!(p.a().stats().challenge_acks, 3);
    p.now += 1_000_001;
    p.inject(Side::A, &syn);
    assert_eq!(p.a().stats().challenge_acks, 4);
}

#[test]
fn ack_of_unsent_data_is_answered_and_dropped() {
    let mut p = established(12);
    let mut r = from_b_now(&mut p);
    let una = p.a().snd_una();
    r.ack_number = Some(TcpSeqNumber(una.0.wrapping_add(100_000)));
    r.payload = b"hello";
    p.inject(Side::A, &r);
    assert_eq!(p.a().snd_una(), una);
    assert_eq!(p.a().recv_queue_len(), 0);
    assert_eq!(p.a().stats().challenge_acks, 1);
}

#[test]
fn closed_connection_and_listener_answer_with_rst() {
    let mut l = Listener::new(
        fast_config(),
        IsnGenerator::with_key([0; 16]),
        ADDR_B,
        PORT_B,
    );
    let mut ack = repr_from(false);
    ack.seq_number = TcpSeqNumber(7);
    ack.ack_number = Some(TcpSeqNumber(99));
    match l.on_segment(Instant::from_micros(0), ADDR_A, &ack, SynPolicy::Accept) {
        Accepted::Reply(r) => {
            assert_eq!(r.control, TcpControl::Rst);
            assert_eq!(r.seq_number, TcpSeqNumber(99));
            assert_eq!(r.ack_number, None);
            assert_eq!((r.src_port, r.dst_port), (PORT_B, PORT_A));
        }
        other => panic!("{other:?}"),
    }
    let mut rst = ack;
    rst.control = TcpControl::Rst;
    assert!(matches!(
        l.on_segment(Instant::from_micros(0), ADDR_A, &rst, SynPolicy::Accept),
        Accepted::Drop
    ));
    // No ACK: <SEQ=0><ACK=SEG.SEQ+SEG.LEN><CTL=RST,ACK>.
    let mut data = repr_from(false);
    data.seq_number = TcpSeqNumber(-2);
    data.payload = b"abcd";
    data.control = TcpControl::Fin;
    let r = reset_for(&data).unwrap();
    assert_eq!(r.seq_number, TcpSeqNumber(0));
    assert_eq!(r.ack_number, Some(TcpSeqNumber(3)));

    // A closed connection answers anything but a RST with a RST.
    let mut p = established(13);
    p.a().abort();
    p.run_for(100);
    let last = p.log.iter().rev().find(|s| s.from == Side::A).unwrap();
    assert_eq!(last.ctl, TcpControl::Rst);
    assert_eq!(p.ev_b.last(), Some(&Event::Closed));
    assert!(p.ev_b.contains(&Event::Reset));
    let r = from_b_now(&mut p);
    let n = p.log.len();
    p.inject(Side::A, &r);
    p.transmit();
    assert_eq!(p.log[n].ctl, TcpControl::Rst);
}

// ------------------------------------------------------------------ timers

#[test]
fn syn_retransmission_backs_off_and_times_out() {
    let cfg = Config {
        syn_retries: 3,
        ..fast_config()
    };
    let mut p = Pair::active_passive(14, cfg, fast_config());
    p.listener = None;
    assert!(p.run_until(10_000_000, |p| p.ev_a.contains(&Event::TimedOut)));
    let times: Vec<u64> = p.sent_by(Side::A).map(|s| s.at).collect();
    assert_eq!(times.len(), 4);
    let gaps: Vec<u64> = times.windows(2).map(|w| w[1] - w[0]).collect();
    assert_eq!(gaps, vec![10_000, 20_000, 40_000]);
    assert_eq!(p.a().state(), State::Closed);
    assert_eq!(p.ev_a, vec![Event::TimedOut, Event::Closed]);
}

#[test]
fn rto_backoff_timing_and_timeout() {
    let cfg = Config {
        max_retries: 4,
        ..no_tlp()
    };
    let mut p = Pair::active_passive(15, cfg, fast_config());
    assert!(p.established());
    let rto0 = p.a().rto().total_micros();
    assert_eq!(rto0, 1_000, "floor: SRTT 20 us -> RTO at the 1 ms floor");
    // Blackhole A's data.
    p.filter = Some(Box::new(|s| !(s.from == Side::A && s.len > 0)));
    records(&mut p, Side::A, &[100]);
    let start = p.log.len();
    assert!(p.run_until(10_000_000, |p| p.ev_a.contains(&Event::TimedOut)));
    let times: Vec<u64> = p.log[start..]
        .iter()
        .filter(|s| s.from == Side::A && s.len > 0)
        .map(|s| s.at)
        .collect();
    assert_eq!(times.len(), 5);
    let gaps: Vec<u64> = times.windows(2).map(|w| w[1] - w[0]).collect();
    assert_eq!(gaps, vec![1_000, 2_000, 4_000, 8_000]);
    assert_eq!(p.a().stats().timeouts, 5);
    assert_eq!(p.a().stats().rtx_segments_whole, 4);
}

#[test]
fn rto_recovers_and_resets_backoff() {
    let mut p = established_no_tlp(16);
    let mut n = 0;
    p.filter = Some(Box::new(move |s| {
        if s.from == Side::A && s.len > 0 && n < 2 {
            n += 1;
            return false;
        }
        true
    }));
    let d = records(&mut p, Side::A, &[300]);
    assert!(p.run_until(100_000, |p| p.rx_b.len() == 300));
    assert_eq!(p.rx_b, d);
    assert_eq!(p.a().stats().timeouts, 2);
    // Karn: the retransmission gave no sample, so RTO stays backed off until new data is
    // timed.
    assert_eq!(p.a().rto().total_micros(), 4_000);
    records(&mut p, Side::A, &[300]);
    assert!(p.run_until(100_000, |p| p.a.as_ref().unwrap().in_flight() == 0));
    assert_eq!(p.a().rto().total_micros(), 1_000);
}

#[test]
fn delayed_ack_every_second_segment_or_timer() {
    let mut p = established(17);
    // Warm up: B's first ACK opens its window beyond the SYN's 64 KiB (a window update
    // that goes out at once).
    records(&mut p, Side::A, &[4]);
    p.run_for(1_000);
    p.rx_b.clear();
    // One segment: B acknowledges when the delayed-ACK timer (100 us) fires.
    records(&mut p, Side::A, &[100]);
    let n = p.log.len();
    assert!(p.run_until(10_000, |p| p.rx_b.len() == 100));
    p.run_for(1_000);
    let data_at = p.log[n..].iter().find(|s| s.from == Side::A).unwrap().at;
    let acks: Vec<&Seg> = p.log[n..].iter().filter(|s| s.from == Side::B).collect();
    assert_eq!(acks.len(), 1);
    assert_eq!(acks[0].at - data_at, 10 + 100);
    // Two full segments: the second is acknowledged at once.
    records(&mut p, Side::A, &[1448, 1448]);
    let n = p.log.len();
    assert!(p.run_until(10_000, |p| p.rx_b.len() == 100 + 2 * 1448));
    p.run_for(1_000);
    let acks: Vec<&Seg> = p.log[n..].iter().filter(|s| s.from == Side::B).collect();
    assert_eq!(acks.len(), 1);
    let last_data = p.log[n..].iter().rev().find(|s| s.from == Side::A).unwrap();
    assert_eq!(acks[0].at - last_data.at, 10);
}

#[test]
fn zero_window_persist_probes_then_recovery() {
    let small = Config {
        recv_buffer: 8192,
        ..fast_config()
    };
    let mut p = Pair::active_passive(18, fast_config(), small);
    assert!(p.established());
    p.auto_recv = false;
    let d = records(&mut p, Side::A, &[1000; 20]);
    // B's window fills: A stops, probes with backoff.
    p.run_for(200_000);
    // 8 records, then after the persist timer a 192-octet piece of the 9th (RFC 5044 5.3
    // allows splitting when the receive window is too small).
    assert_eq!(p.b().recv_queue_len(), 8192);
    assert_eq!(p.a().stats().new_segments_split, 1);
    assert_eq!(p.a().snd_wnd(), 0);
    let probes = p.a().stats().zero_window_probes;
    assert!((4..12).contains(&probes), "{probes}");
    let probe_times: Vec<u64> = p
        .sent_by(Side::A)
        .filter(|s| s.len == 0 && s.seq == p.a.as_ref().unwrap().snd_una().0.wrapping_sub(1) as u32)
        .map(|s| s.at)
        .collect();
    let gaps: Vec<u64> = probe_times.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(gaps.windows(2).all(|g| g[1] >= g[0]), "{gaps:?}");
    assert!(gaps.len() >= 2 && gaps[1] == 2 * gaps[0], "{gaps:?}");
    // The receiver never sent a data-less ACK that shrank the window.
    // Consume: window update, transfer completes.
    p.auto_recv = true;
    assert!(p.run_until(1_000_000, |p| p.rx_b.len() == d.len()));
    assert_eq!(p.rx_b, d);
    let st = p.a().stats().clone();
    assert!(st.new_segments_split <= 3, "{st:?}");
}

#[test]
fn window_too_small_for_a_record_waits_then_splits_on_override() {
    // B's buffer holds 3000 octets; records of 2000 octets (EMSS 1448 splits them anyway)
    // and of 1400: once B holds 2000 unread octets only 1000 are free, less than a record.
    let small = Config {
        recv_buffer: 3000,
        ..fast_config()
    };
    let mut p = Pair::active_passive(19, fast_config(), small);
    assert!(p.established());
    p.auto_recv = false;
    records(&mut p, Side::A, &[1000, 1000, 1400]);
    p.run_for(100_000);
    // The third record does not fit the 1000 octets left; A split it only after the
    // persist timer (override): the first 1000 octets, then waits again.
    assert_eq!(p.b().recv_queue_len(), 3000);
    assert!(p.a().stats().new_segments_split >= 1);
    p.auto_recv = true;
    assert!(p.run_until(1_000_000, |p| p.rx_b.len() == 3400));
}

// ------------------------------------------------------------------ loss recovery

/// Drops the new-data segments of A whose 1-based index is in `lose` (once each).
fn drop_data_segments(p: &mut Pair, lose: &'static [usize]) {
    let mut k = 0;
    p.filter = Some(Box::new(move |s| {
        if s.from == Side::A && s.len > 0 {
            k += 1;
            if lose.contains(&k) {
                return false;
            }
        }
        true
    }));
}

fn no_sack() -> Config {
    Config {
        sack: false,
        ..fast_config()
    }
}

#[test]
fn fast_retransmit_newreno_without_sack() {
    let mut p = Pair::active_passive(20, no_sack(), no_sack());
    assert!(p.established());
    assert!(!p.a().sack());
    drop_data_segments(&mut p, &[3]);
    let d = records(&mut p, Side::A, &[1448; 10]);
    assert!(p.run_until(1_000_000, |p| p.rx_b.len() == d.len()));
    assert_eq!(p.rx_b, d);
    let st = p.a().stats().clone();
    assert_eq!(st.fast_retransmits, 1, "{st:?}");
    assert_eq!(st.timeouts, 0, "{st:?}");
    assert_eq!(st.rtx_segments_whole, 1, "{st:?}");
    assert_eq!(st.rtx_segments_split + st.new_segments_split, 0);
    assert!(!p.sent_by(Side::B).any(|s| s.sack));
    // ssthresh was set to half the flight (8 segments outstanding at the third dupack).
    assert_eq!(p.a().ssthresh(), 4 * 1448);
}

#[test]
fn newreno_partial_acks_recover_two_losses() {
    let mut p = Pair::active_passive(21, no_sack(), no_sack());
    assert!(p.established());
    drop_data_segments(&mut p, &[2, 5]);
    let d = records(&mut p, Side::A, &[1000; 10]);
    assert!(p.run_until(1_000_000, |p| p.rx_b.len() == d.len()));
    assert_eq!(p.rx_b, d);
    let st = p.a().stats().clone();
    assert_eq!(st.fast_retransmits, 1, "{st:?}");
    assert_eq!(st.timeouts, 0, "{st:?}");
    // The second loss is repaired on the partial ACK (RFC 6582 step 4).
    assert_eq!(st.rtx_segments_whole, 2, "{st:?}");
}

/// `recovering_from_loss` (what makes a core take its receive in steps): the sender in
/// fast recovery and the receiver holding the data beyond the hole both say so, and both
/// stop once the hole is filled; a clean exchange never says so.
#[test]
fn recovering_from_loss_spans_the_hole_at_both_ends() {
    // Sends ten segments (the third lost if `lose`) until B has them all; whether A and
    // B each said they were recovering on the way.
    let run = |lose: bool| {
        let mut p = established(23);
        if lose {
            drop_data_segments(&mut p, &[3]);
        }
        let d = records(&mut p, Side::A, &[1448; 10]);
        let mut seen = (false, false);
        assert!(p.run_until(1_000_000, |p| {
            seen.0 |= p.a().recovering_from_loss();
            seen.1 |= p.b().recovering_from_loss();
            p.rx_b.len() == d.len()
        }));
        assert_eq!(p.rx_b, d);
        (p, seen)
    };
    assert_eq!(run(false).1, (false, false), "a clean exchange");
    let (mut p, seen) = run(true);
    assert_eq!(
        seen,
        (true, true),
        "the sender in recovery, the receiver past a hole"
    );
    // From fast recovery (not a timeout), which ends within a few round trips.
    let st = p.a().stats().clone();
    assert_eq!((st.fast_retransmits, st.timeouts), (1, 0), "{st:?}");
    let srtt = p.a().srtt().unwrap().total_micros();
    assert!(p.run_until(8 * srtt, |p| !p.a().recovering_from_loss()));
}

/// The sender counts the time it spends in loss recovery (`Stats::recovery_us`: from the
/// loss found to the ACK reaching the recovery point) and its RTT measurements
/// (`rtt_samples`, `rtt_sum_us`); a clean exchange spends none in recovery.
#[test]
fn recovery_time_and_rtt_samples_are_counted() {
    let run = |lose: bool, cfg: Config| {
        let mut p = Pair::active_passive(25, cfg.clone(), cfg);
        assert!(p.established());
        let before = p.a().stats().clone();
        if lose {
            drop_data_segments(&mut p, &[3]);
        }
        let d = records(&mut p, Side::A, &[1448; 10]);
        let (mut entered, mut left) = (None, None);
        assert!(p.run_until(1_000_000, |p| {
            let now = p.now;
            let recovering = p.a().recovering_from_loss();
            if recovering && entered.is_none() {
                entered = Some(now);
            }
            if !recovering && entered.is_some() && left.is_none() {
                left = Some(now);
            }
            p.rx_b.len() == d.len() && !recovering && p.a().in_flight() == 0
        }));
        assert_eq!(p.rx_b, d);
        let st = p.a().stats().clone();
        (p, before, st, entered.zip(left))
    };
    for cfg in [fast_config(), no_sack()] {
        let sack = cfg.sack;
        let (_, before, st, span) = run(false, cfg.clone());
        assert_eq!((st.recovery_us, st.fast_retransmits, span), (0, 0, None));
        assert!(st.rtt_samples > before.rtt_samples, "{st:?}");
        let (mut p, before, st, span) = run(true, cfg);
        assert_eq!(p.a().sack(), sack);
        let (entered, left) = span.expect("the loss started a recovery, which ended");
        assert_eq!((st.fast_retransmits, st.timeouts), (1, 0), "{st:?}");
        assert_eq!(st.recovery_us, left - entered, "sack {sack}: {st:?}");
        assert!(
            st.recovery_us >= 2 * p.delay,
            "at least the resend's round trip: {st:?}"
        );
        // Each sample is a round trip of the link (two one-way delays), at most a delayed
        // ACK more.
        let n = st.rtt_samples - before.rtt_samples;
        assert!(n > 0, "{st:?}");
        let mean = (st.rtt_sum_us - before.rtt_sum_us) / n;
        assert!(
            (2 * p.delay..=2 * p.delay + 100).contains(&mean),
            "mean RTT {mean} us over {n} samples"
        );
    }
    // A recovery that a timeout ends counts until the timeout; one that the close cuts
    // short, until the close.
    let cfg = Config {
        sack: false,
        ..no_tlp()
    };
    let mut p = Pair::active_passive(26, cfg.clone(), cfg);
    assert!(p.established());
    // The fast retransmission is lost too: without SACK only the timeout repairs it.
    drop_segment_transmissions(&mut p, 3, 2);
    let d = records(&mut p, Side::A, &[1448; 10]);
    let delivered = p.run_until(1_000_000, |p| {
        p.rx_b.len() == d.len() && p.a().in_flight() == 0
    });
    assert!(delivered);
    let st = p.a().stats().clone();
    assert!(st.timeouts >= 1 && st.fast_retransmits >= 1, "{st:?}");
    assert!(
        st.recovery_us > 0 && !p.a().recovering_from_loss(),
        "{st:?}"
    );
    let mut p = established(27);
    drop_segment_transmissions(&mut p, 3, usize::MAX);
    let _ = records(&mut p, Side::A, &[1448; 10]);
    assert!(p.run_until(1_000_000, |p| p.a().recovering_from_loss()));
    let since = p.now;
    // A's clock moves 30 µs on (a transmit poll then, allowed to send nothing), and it
    // aborts in recovery.
    let later = smoltcp::time::Instant::from_micros((since + 30) as i64);
    p.a().poll_transmit_records(later, 0, false, |_, _, _| {});
    assert!(p.a().recovering_from_loss() && p.a().stats().recovery_us == 0);
    p.a().abort();
    let st = p.a().stats().clone();
    assert_eq!(st.recovery_us, 30, "{st:?}");
}

/// A hole that is never filled stops counting as recovery once it is older than twice
/// the receiver's RTO, though the data past it is still held (a peer must not keep a core
/// in the finer receive of a recovery at will).
#[test]
fn a_hole_never_filled_stops_counting_as_recovery() {
    let mut p = established(24);
    drop_segment_transmissions(&mut p, 3, usize::MAX);
    let d = records(&mut p, Side::A, &[1448; 10]);
    assert!(p.run_until(100_000, |p| p.b().recovering_from_loss()));
    let since = p.now;
    let rto = p.b().rto().total_micros();
    assert!(p.run_until(4 * rto + 100_000, |p| !p.b().recovering_from_loss()));
    assert!(
        p.now - since >= 2 * rto - 1_000,
        "too early: {} us",
        p.now - since
    );
    assert!(p.rx_b.len() < d.len(), "the hole is still open");
}

/// A reset drops the data held past a hole, and the connection stops saying it recovers.
#[test]
fn a_reset_ends_the_recovery_of_a_hole() {
    let mut p = established(24);
    drop_segment_transmissions(&mut p, 3, usize::MAX);
    records(&mut p, Side::A, &[1448; 10]);
    assert!(p.run_until(100_000, |p| p.b().recovering_from_loss()));
    let mut rst = repr_from(false);
    rst.control = TcpControl::Rst;
    rst.seq_number = p.b().rcv_nxt();
    p.inject(Side::B, &rst);
    assert_eq!(p.b().state(), State::Closed);
    assert!(!p.b().recovering_from_loss());
}

#[test]
fn sack_recovery_repairs_one_loss() {
    let mut p = established(22);
    assert!(p.a().sack());
    drop_data_segments(&mut p, &[3]);
    let d = records(&mut p, Side::A, &[1448; 10]);
    assert!(p.run_until(1_000_000, |p| p.rx_b.len() == d.len()));
    assert_eq!(p.rx_b, d);
    let st = p.a().stats().clone();
    assert_eq!(st.fast_retransmits, 1, "{st:?}");
    assert_eq!(st.timeouts, 0, "{st:?}");
    assert_eq!(st.rtx_segments_whole, 1, "{st:?}");
    assert_eq!(st.rtx_segments_split + st.new_segments_split, 0);
    assert!(p.sent_by(Side::B).any(|s| s.sack));
}

/// Drops the first `times` transmissions of A's `nth` data segment (counting A's data
/// segments from the filter's installation).
fn drop_segment_transmissions(p: &mut Pair, nth: usize, times: usize) {
    let (mut k, mut seq, mut dropped) = (0, None, 0);
    p.filter = Some(Box::new(move |s| {
        if s.from != Side::A || s.len == 0 {
            return true;
        }
        k += 1;
        if k == nth {
            seq = Some(s.seq);
        }
        if seq == Some(s.seq) && dropped < times {
            dropped += 1;
            return false;
        }
        true
    }));
}

#[test]
fn a_lost_retransmission_is_sent_again_without_a_timeout() {
    // RFC 6675 retransmits a hole once per recovery; when that retransmission is lost
    // too, only the RTO would repair it. Here the records sent after it are SACKed, which
    // says it was lost (RFC 8985 6.2: RACK detects lost retransmissions the same way).
    let mut p = established(24);
    warm_up(&mut p);
    let before = p.a().stats().clone();
    drop_segment_transmissions(&mut p, 3, 2);
    let d = records(&mut p, Side::A, &[1448; 60]);
    assert!(p.run_until(2_000_000, |p| p.rx_b.len() == d.len()));
    assert_eq!(p.rx_b, d);
    let st = p.a().stats().clone();
    assert_eq!(st.timeouts - before.timeouts, 0, "{st:?}");
    assert_eq!(st.fast_retransmits - before.fast_retransmits, 1, "{st:?}");
    assert_eq!(
        st.lost_retransmissions - before.lost_retransmissions,
        1,
        "{st:?}"
    );
    // The hole went out three times: the original and two retransmissions.
    assert_eq!(
        st.rtx_segments_whole - before.rtx_segments_whole,
        2,
        "{st:?}"
    );
}

/// Drops A's `nth` data segment, and the first segment of new data A sends after it
/// retransmitted one: the segment that starts at the recovery point (SND.MAX when the
/// recovery began).
fn drop_nth_and_first_after_recovery(p: &mut Pair, nth: usize) {
    let (mut k, mut next, mut rtx_seen, mut done) = (0, None::<u32>, false, false);
    p.filter = Some(Box::new(move |s| {
        if s.from != Side::A || s.len == 0 {
            return true;
        }
        k += 1;
        let end = s.seq.wrapping_add(s.len as u32);
        let new = next.is_none_or(|n| (s.seq.wrapping_sub(n) as i32) >= 0);
        if new {
            next = Some(end);
        } else {
            rtx_seen = true;
        }
        if k == nth
            || (new && rtx_seen && !done && {
                done = true;
                true
            })
        {
            return false;
        }
        true
    }));
}

/// With SACK, a loss right after a recovery ended (the first segment sent in it lost, so
/// the ACK that ends the recovery reaches exactly its recovery point) starts a second
/// fast recovery without waiting for the RTO: RFC 6675 5.1 lets a new recovery begin
/// once HighACK reaches the last RecoveryPoint, SND.MAX when it was set. (Without SACK,
/// RFC 6582's careful variant waits for an ACK beyond it, so that duplicates of octets
/// a timeout sent again needlessly start no recovery: that case takes the RTO.)
#[test]
fn a_loss_at_the_recovery_point_starts_the_next_recovery() {
    for seed in [25, 26, 27] {
        let mut p = established(seed);
        warm_up(&mut p);
        let before = p.a().stats().clone();
        drop_nth_and_first_after_recovery(&mut p, 3);
        let d = records(&mut p, Side::A, &[1448; 60]);
        assert!(p.run_until(2_000_000, |p| p.rx_b.len() == d.len()));
        assert_eq!(p.rx_b, d);
        let st = p.a().stats().clone();
        assert_eq!(
            (
                st.fast_retransmits - before.fast_retransmits,
                st.timeouts - before.timeouts
            ),
            (2, 0),
            "seed {seed}: {st:?}"
        );
    }
}

/// After a timeout, the segments sent again that the peer had already (go-back-N resends
/// what lay between the holes) come back as duplicate ACKs that SACK nothing new, at
/// exactly the recovery point the timeout set once the holes are filled. Arriving after
/// new data went out, they start no fast recovery (RFC 6582 section 4; RFC 6675 takes
/// an ACK at the recovery point as a sign of loss only when it SACKs new data).
#[test]
fn duplicates_of_what_a_timeout_resent_start_no_recovery() {
    let mut p = Pair::active_passive(40, no_tlp(), no_tlp());
    assert!(p.established());
    warm_up(&mut p);
    // A flight of twenty segments with holes at the 3rd, 6th and 12th, every
    // transmission of which in its first 1.5 ms is lost: the first RTO's too (1 ms, the
    // floor), so the second one repairs them. Slow start after it sends the 3rd alone,
    // the 6th with two the peer has, the 12th with four: once the 12th is in, the ACK
    // reaches the recovery point, and those four are duplicates.
    let (mut k, mut holes, mut t0) = (0, Vec::new(), None::<u64>);
    p.filter = Some(Box::new(move |s| {
        if s.from != Side::A || s.len == 0 {
            return true;
        }
        k += 1;
        let t0 = *t0.get_or_insert(s.at);
        if [3, 6, 12].contains(&k) {
            holes.push(s.seq);
        }
        !(holes.contains(&s.seq) && s.at < t0 + 1_500)
    }));
    let before = p.a().stats().clone();
    let mut d = records(&mut p, Side::A, &[1448; 20]);
    assert!(p.run_until(1_000_000, |p| p.a().stats().timeouts > before.timeouts));
    d.extend(records(&mut p, Side::A, &[1448; 30]));
    // Until A sends new data past the recovery point (SND.MAX at the timeout).
    let recover = p.a().iss().0.wrapping_add(1 + 60 * 1448) as u32;
    let past = |p: &Pair| {
        p.log
            .iter()
            .any(|s| s.from == Side::A && s.len > 0 && (s.seq.wrapping_sub(recover) as i32) >= 0)
    };
    assert!(p.run_until(1_000_000, |p| past(p)));
    // The peer's duplicates of the four arrive now: ACKs at the recovery point, each
    // with the D-SACK of what it received twice and nothing new.
    let fr = p.a().stats().fast_retransmits;
    let wnd = last_window_of_b(&p);
    for i in 0..4u32 {
        let mut dup = from_b_now(&mut p);
        dup.ack_number = Some(TcpSeqNumber(recover as i32));
        dup.window_len = wnd;
        let l = recover.wrapping_sub((8 - i) * 1448);
        dup.sack_ranges[0] = Some((l, l.wrapping_add(1448)));
        p.inject(Side::A, &dup);
    }
    let st = p.a().stats().clone();
    assert_eq!(
        st.fast_retransmits, fr,
        "duplicates that SACK nothing new started a recovery: {st:?}"
    );
    assert!(p.run_until(2_000_000, |p| p.rx_b.len() == d.len()));
    assert_eq!(p.rx_b, d);
    let st = p.a().stats().clone();
    assert_eq!(
        (
            st.fast_retransmits - before.fast_retransmits,
            st.timeouts - before.timeouts
        ),
        (1, 2),
        "{st:?}"
    );
}

#[test]
fn sack_recovery_repairs_several_losses_in_one_window() {
    let mut p = established(23);
    // Let cwnd grow first.
    warm_up(&mut p);
    drop_data_segments(&mut p, &[3, 7, 8, 15]);
    // Small FPDUs packed several to a segment, so holes are several records wide.
    let d = records(&mut p, Side::A, &[360; 120]);
    assert!(p.run_until(1_000_000, |p| p.rx_b.len() == d.len()));
    assert_eq!(p.rx_b, d);
    let st = p.a().stats().clone();
    assert_eq!(st.timeouts, 0, "{st:?}");
    assert_eq!(st.fast_retransmits, 1, "{st:?}");
    // Each lost segment is resent once, whole (the packed records of each hole).
    assert_eq!(st.rtx_segments_whole, 4, "{st:?}");
    assert_eq!(st.rtx_segments_split + st.new_segments_split, 0, "{st:?}");
    // The same with NewReno takes one round trip per loss and resends as much.
    let mut q = Pair::active_passive(23, no_sack(), no_sack());
    assert!(q.established());
    warm_up(&mut q);
    drop_data_segments(&mut q, &[3, 7, 8, 15]);
    let d = records(&mut q, Side::A, &[360; 120]);
    assert!(q.run_until(1_000_000, |p| p.rx_b.len() == d.len()));
    let st_nr = q.a().stats().clone();
    assert!(
        st_nr.retransmitted_octets >= st.retransmitted_octets,
        "{st_nr:?} vs {st:?}"
    );
}

// ------------------------------------------------------------------ FPDU boundaries

/// Checks every data segment A sent against the record boundaries; returns
/// (whole, split) counts from the log.
fn check_boundaries(p: &mut Pair, sizes: &[usize]) -> (u64, u64) {
    let iss1 = p.a().iss().0.wrapping_add(1) as u32;
    let emss = p.a().emss();
    let mut bounds = vec![0u64];
    for &s in sizes {
        bounds.push(bounds.last().unwrap() + s as u64);
    }
    let (mut whole, mut split) = (0, 0);
    for s in p.log.iter().filter(|s| s.from == Side::A && s.len > 0) {
        let start = u64::from(s.seq.wrapping_sub(iss1));
        let end = start + s.len as u64;
        let ok = bounds.binary_search(&start).is_ok() && bounds.binary_search(&end).is_ok();
        if ok {
            whole += 1;
        } else {
            split += 1;
            // A split segment lies within one record, larger than EMSS.
            let i = bounds.partition_point(|&b| b <= start) - 1;
            assert!(end <= bounds[i + 1], "segment {start}..{end} spans records");
            assert!(
                (bounds[i + 1] - bounds[i]) as usize > emss,
                "record {i} ({} octets) split at {start}..{end} with EMSS {emss}",
                bounds[i + 1] - bounds[i]
            );
        }
    }
    (whole, split)
}

fn fpdu_run(seed: u64, faults: Faults, big_records: bool) {
    fpdu_run_cfg(seed, faults, big_records, fast_config())
}

fn fpdu_run_cfg(seed: u64, faults: Faults, big_records: bool, cfg: Config) {
    let (direct, _) = fpdu_run_direct(seed, faults, big_records, cfg, false);
    assert_eq!(direct, 0);
}

/// The stream arrives whole and in order whether B buffers it or takes in-order data
/// straight from the segments (`on_segment_deliver`); returns the octets taken straight
/// and the octets sent.
fn fpdu_run_direct(
    seed: u64,
    faults: Faults,
    big_records: bool,
    cfg: Config,
    direct: bool,
) -> (u64, u64) {
    let mut p = Pair::active_passive(seed, cfg.clone(), cfg);
    p.faults = faults;
    p.direct_b = direct;
    assert!(p.run_until(10_000_000, |p| p.a.as_ref().map(|c| c.state())
        == Some(State::Established)
        && p.b.is_some()));
    let mut rng = Rng::new(seed ^ 0xF00D);
    let emss = p.a().emss();
    let sizes: Vec<usize> = (0..300)
        .map(|_| {
            if big_records && rng.chance(100) {
                emss + 1 + rng.below(3 * emss as u64) as usize
            } else {
                // FPDUs are multiples of 4, 8 octets at least.
                8 + 4 * rng.below((emss / 4 - 1) as u64) as usize
            }
        })
        .collect();
    let data = records(&mut p, Side::A, &sizes);
    assert!(
        p.run_until(60_000_000, |p| p.rx_b.len() == data.len()),
        "seed {seed}: delivered {} of {}",
        p.rx_b.len(),
        data.len()
    );
    assert!(p.rx_b == data, "seed {seed}: stream differs");
    let (whole, split) = check_boundaries(&mut p, &sizes);
    let st = p.a().stats().clone();
    assert_eq!(
        whole,
        st.new_segments_whole + st.rtx_segments_whole,
        "seed {seed}: {st:?}"
    );
    assert_eq!(
        split,
        st.new_segments_split + st.rtx_segments_split,
        "seed {seed}: {st:?}"
    );
    if !big_records {
        assert_eq!(split, 0, "seed {seed}: {st:?}");
    }
    if faults.drop == 0 && faults.reorder == 0 && faults.dup == 0 {
        assert_eq!(st.rtx_segments_whole + st.rtx_segments_split, 0);
    }
    (p.direct_b_octets, data.len() as u64)
}

#[test]
fn in_order_data_is_delivered_from_the_segment_and_the_rest_buffered() {
    // Lossless: every octet goes straight from its segment.
    let (n, total) = fpdu_run_direct(7, Faults::default(), false, fast_config(), true);
    assert_eq!(n, total);
    // Loss, reordering and duplication: the stream is still whole and in order (the
    // harness checks each direct delivery's offset), part of it direct, part buffered.
    let faults = Faults {
        drop: 30,
        dup: 20,
        reorder: 50,
        reorder_delay: 40,
    };
    for seed in 0..8 {
        let (n, total) = fpdu_run_direct(2000 + seed, faults, seed % 4 == 0, fast_config(), true);
        assert!(
            n > 0 && n < total,
            "seed {seed}: {n} of {total} straight from segments"
        );
    }
}

#[test]
fn fpdu_boundaries_lossless() {
    for seed in 0..8 {
        fpdu_run(seed, Faults::default(), false);
    }
}

#[test]
fn fpdu_boundaries_lossless_with_records_beyond_emss() {
    for seed in 0..4 {
        fpdu_run(seed, Faults::default(), true);
    }
}

#[test]
fn fpdu_boundaries_under_loss_reorder_duplication() {
    let faults = Faults {
        drop: 30,
        dup: 20,
        reorder: 50,
        reorder_delay: 40,
    };
    for seed in 0..16 {
        fpdu_run(1000 + seed, faults, seed % 4 == 0);
    }
}

#[test]
fn fpdu_boundaries_under_loss_without_sack_or_timestamps() {
    let faults = Faults {
        drop: 40,
        dup: 20,
        reorder: 50,
        reorder_delay: 40,
    };
    let cfg = Config {
        sack: false,
        timestamps: false,
        ..fast_config()
    };
    for seed in 0..8 {
        fpdu_run_cfg(3000 + seed, faults, seed % 2 == 0, cfg.clone());
    }
}

#[test]
fn retransmission_restarts_at_the_record_boundary() {
    let mut p = established_no_tlp(24);
    records(&mut p, Side::A, &[1000, 400]);
    p.filter = Some(Box::new(|s| !(s.from == Side::A && s.len > 0)));
    p.transmit();
    let una = p.a().snd_una();
    // The peer acknowledges 500 octets into the first record (as a receiver whose window
    // cut the segment would).
    let mut ack = from_b_now(&mut p);
    ack.ack_number = Some(TcpSeqNumber(una.0.wrapping_add(500)));
    ack.window_len = 0xFFFF;
    p.inject(Side::A, &ack);
    assert_eq!(p.a().snd_una().0, una.0.wrapping_add(500));
    let n = p.log.len();
    p.run_for(1_500);
    let rtx: Vec<Seg> = p.log[n..]
        .iter()
        .filter(|s| s.from == Side::A && s.len > 0)
        .cloned()
        .collect();
    assert!(!rtx.is_empty());
    // Resent from the first record's start (below SND.UNA), both records whole.
    assert_eq!(rtx[0].seq, una.0 as u32);
    assert_eq!(rtx[0].len, 1400);
    assert_eq!(p.a().stats().rtx_segments_whole, 1);
    assert_eq!(p.a().stats().rtx_segments_split, 0);
    // The receiver takes the new part only.
    p.filter = None;
    assert!(p.run_until(100_000, |p| p.a.as_ref().unwrap().in_flight() == 0));
}

#[test]
fn close_in_syn_received_sends_fin_after_establishment() {
    let mut p = Pair::active_passive(25, fast_config(), fast_config());
    // Hold A's ACK of the SYN,ACK back so B stays in SYN-RECEIVED.
    p.filter = Some(Box::new(|s| {
        !(s.from == Side::A && s.ctl == TcpControl::None)
    }));
    assert!(p.run_until(1_000, |p| p.b.is_some()));
    p.run_for(100);
    assert_eq!(p.b().state(), State::SynReceived);
    p.b().close();
    assert_eq!(p.b().state(), State::SynReceived);
    p.transmit();
    assert!(!p.log.iter().any(|s| s.ctl == TcpControl::Fin));
    p.filter = None;
    assert!(p.run_until(1_000_000, |p| p.a.as_ref().unwrap().state()
        == State::CloseWait));
    assert!(p.ev_b.contains(&Event::Established));
    assert!(p.run_until(1_000_000, |p| p.b.as_ref().unwrap().state()
        == State::FinWait2));
}

#[test]
fn heavy_loss_still_delivers() {
    let faults = Faults {
        drop: 150,
        dup: 50,
        reorder: 200,
        reorder_delay: 100,
    };
    for seed in 0..4 {
        fpdu_run(2000 + seed, faults, true);
    }
}

// ------------------------------------------------------------------ MPA on top

#[test]
fn mpa_fpdus_over_tcp_with_out_of_order_recovery() {
    use wire::mpa::deframe::Deframer;
    use wire::mpa::fpdu::{mulpdu, FpduMode, Framer};
    let cfg = Config {
        report_out_of_order: true,
        ..fast_config()
    };
    let mut p = Pair::active_passive(30, cfg.clone(), cfg);
    p.faults = Faults {
        drop: 50,
        dup: 0,
        reorder: 100,
        reorder_delay: 50,
    };
    assert!(p.run_until(10_000_000, |p| p.b.as_ref().map(|c| c.state())
        == Some(State::Established)
        && p.a.as_ref().map(|c| c.state()) == Some(State::Established)));
    p.auto_recv = false;
    let mode = FpduMode {
        markers: true,
        crc: true,
    };
    let m = mulpdu(p.a().emss(), true);
    let mut framer = Framer::new(mode);
    let mut rng = Rng::new(5);
    let mut sent = Vec::new();
    for i in 0..200 {
        let len = 1 + rng.below(m as u64) as usize;
        let ulpdu: Vec<u8> = (0..len).map(|k| (k + i) as u8).collect();
        let mut fpdu = Vec::new();
        framer.frame(&ulpdu, &mut fpdu).unwrap();
        assert!(fpdu.len() <= p.a().emss());
        p.a().send_fpdu(fpdu).unwrap();
        sent.push(ulpdu);
    }
    let mut deframer = Deframer::new(mode);
    let mut got: Vec<Vec<u8>> = Vec::new();
    let mut early = 0usize;
    let total = sent.len();
    let mut steps = 0;
    while got.len() < total {
        steps += 1;
        assert!(steps < 1_000_000 && p.step());
        let b = p.b.as_mut().unwrap();
        b.recv_out_of_order(|off, seg| {
            early += deframer.recover_out_of_order(off, seg, |_| {});
        });
        let mut chunks: Vec<Vec<u8>> = Vec::new();
        b.recv(|_, d| chunks.push(d.to_vec()));
        for c in chunks {
            deframer
                .push(&c, |f| got.push(f.ulpdu.to_vec()))
                .expect("valid FPDUs");
        }
    }
    assert_eq!(got, sent);
    let st = p.a().stats().clone();
    assert_eq!(st.new_segments_split + st.rtx_segments_split, 0, "{st:?}");
    assert!(early > 0, "markers located FPDUs in out-of-order segments");
}

// ------------------------------------------------------------------ hostile input

#[test]
fn random_segments_never_panic() {
    let mut rng = Rng::new(77);
    for round in 0..20 {
        let mut p = established(300 + round);
        records(&mut p, Side::A, &[500; 4]);
        p.transmit();
        let base_seq = p.b().snd_nxt();
        let base_ack = p.b().rcv_nxt();
        for _ in 0..500 {
            let mut r = repr_from(true);
            r.control = match rng.below(5) {
                0 => TcpControl::None,
                1 => TcpControl::Psh,
                2 => TcpControl::Syn,
                3 => TcpControl::Fin,
                _ => TcpControl::Rst,
            };
            let near = rng.chance(700);
            r.seq_number = if near {
                TcpSeqNumber(base_seq.0.wrapping_add(rng.below(4000) as i32 - 2000))
            } else {
                TcpSeqNumber(rng.next() as i32)
            };
            r.ack_number = match rng.below(3) {
                0 => None,
                1 => Some(TcpSeqNumber(rng.next() as i32)),
                _ => Some(TcpSeqNumber(
                    base_ack.0.wrapping_add(rng.below(3000) as i32 - 1000),
                )),
            };
            r.window_len = rng.next() as u16;
            let una = p.a().snd_una().0;
            for slot in r.sack_ranges.iter_mut() {
                *slot = rng.chance(300).then(|| {
                    let l = una.wrapping_add(rng.below(6000) as i32 - 1000) as u32;
                    let len = rng.below(3000) as u32;
                    if rng.chance(100) {
                        (rng.next() as u32, rng.next() as u32)
                    } else {
                        (l, l.wrapping_add(len))
                    }
                });
            }
            r.max_seg_size = rng.chance(100).then(|| rng.next() as u16);
            r.window_scale = rng.chance(100).then(|| rng.below(20) as u8);
            r.timestamp = rng
                .chance(800)
                .then(|| TcpTimestampRepr::new(rng.next() as u32, rng.next() as u32));
            let payload: Vec<u8> = (0..rng.below(2000)).map(|_| rng.next() as u8).collect();
            r.payload = &payload;
            p.inject(Side::A, &r);
            let now = p.instant();
            p.a().poll_transmit(now, |_, _| {});
            p.now += rng.below(3000);
        }
    }
}

#[test]
fn random_bytes_never_panic() {
    let mut rng = Rng::new(78);
    let mut p = established(400);
    for _ in 0..20_000 {
        let n = rng.below(80) as usize;
        let mut bytes: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
        if n >= 4 && rng.chance(500) {
            bytes[0..2].copy_from_slice(&PORT_B.to_be_bytes());
            bytes[2..4].copy_from_slice(&PORT_A.to_be_bytes());
        }
        if let Some(r) = wire::tcp::segment_from_bytes(ADDR_B, ADDR_A, &bytes) {
            p.inject(Side::A, &r);
        }
        // Also without checksum verification, so parsed garbage reaches the engine.
        if let Ok(pkt) = smoltcp::wire::TcpPacket::new_checked(&bytes[..]) {
            let caps = smoltcp::phy::ChecksumCapabilities::ignored();
            if let Ok(r) = TcpRepr::parse(
                &pkt,
                &smoltcp::wire::IpAddress::Ipv4(ADDR_B),
                &smoltcp::wire::IpAddress::Ipv4(ADDR_A),
                &caps,
            ) {
                p.inject(Side::A, &r);
            }
        }
    }
    let now = p.instant();
    p.a().poll_transmit(now, |_, _| {});
}

#[test]
fn paws_drops_old_timestamps() {
    let mut p = established(31);
    let mut r = from_b_now(&mut p);
    r.timestamp = Some(TcpTimestampRepr::new(0, 0));
    // A's TS.Recent is B's clock (the offset makes it large); a TSval far "behind" it:
    let recent_probe = p
        .log
        .iter()
        .rev()
        .find(|s| s.from == Side::B && s.ts)
        .is_some();
    assert!(recent_probe);
    // Find a TSval that is before TS.Recent: B's current tsval minus 2^30.
    let mut tsval = 0u32;
    let b_now = p.instant();
    p.b().poll_transmit(b_now, |repr, _| {
        if let Some(ts) = repr.timestamp {
            tsval = ts.tsval;
        }
    });
    let _ = tsval;
    // Use a segment from B's real stream to learn B's TSval.
    let mut seen = None;
    records(&mut p, Side::B, &[10]);
    let now = p.instant();
    p.b().poll_transmit(now, |repr, _| seen = repr.timestamp);
    let ts = seen.expect("B sends timestamps");
    r.timestamp = Some(TcpTimestampRepr::new(ts.tsval.wrapping_sub(1 << 30), 0));
    r.payload = b"old";
    p.inject(Side::A, &r);
    assert_eq!(p.a().stats().paws_rejected, 1);
    assert_eq!(p.a().recv_queue_len(), 0);
    // Without a timestamp: dropped too (RFC 7323 3.2).
    r.timestamp = None;
    let dropped = p.a().stats().segments_dropped;
    p.inject(Side::A, &r);
    assert_eq!(p.a().stats().segments_dropped, dropped + 1);
}

#[test]
fn large_transfer_with_window_scaling() {
    let big = Config {
        recv_buffer: 1 << 20,
        send_buffer: 8 << 20,
        ..fast_config()
    };
    let mut p = Pair::active_passive(32, big.clone(), big);
    assert!(p.established());
    assert_eq!(p.a().window_scale(), Some((5, 5)));
    let sizes = vec![1448; 3000];
    let d = records(&mut p, Side::A, &sizes);
    assert!(p.run_until(10_000_000, |p| p.rx_b.len() == d.len()));
    assert!(p.rx_b == d);
    // cwnd grew past the 64 KiB an unscaled window would allow.
    assert!(p.a().cwnd() > 65535);
    let (_, split) = check_boundaries(&mut p, &sizes);
    assert_eq!(split, 0);
}

#[test]
fn duration_helpers_and_poll_at() {
    let mut p = established(33);
    // Idle: no timer pending except none.
    p.run_for(10_000);
    assert_eq!(p.a().poll_at(), None);
    records(&mut p, Side::A, &[10]);
    let now = p.instant();
    assert!(p.a().poll_at().unwrap() <= now);
    p.transmit();
    // The tail loss probe is due first: 2 SRTT + the delayed-ACK time (100 us).
    let at = p.a().poll_at().unwrap();
    let srtt = p.a().srtt().unwrap();
    assert_eq!(at - p.instant(), srtt * 2 + Duration::from_micros(100));
    // Without probes, the RTO (at its 1 ms floor).
    let mut q = established_no_tlp(33);
    q.run_for(10_000);
    records(&mut q, Side::A, &[10]);
    q.transmit();
    let at = q.a().poll_at().unwrap();
    assert_eq!(at - q.instant(), Duration::from_millis(1));
}

/// The last segment of a flight is lost: too few duplicate ACKs for fast retransmit.
/// The tail loss probe (RFC 8985 7.3: the last segment again, there being no new data)
/// repairs it at about 2 SRTT instead of the RTO, and cwnd is not cut to one segment.
/// When 2 SRTT plus the delayed-ACK time comes after the RTO, the probe goes at the RTO's
/// time, in its place.
#[test]
fn tail_loss_probe_repairs_a_lost_last_segment() {
    let late_pto = Config {
        delayed_ack: Duration::from_millis(5),
        ..fast_config()
    };
    for (cfg, probes, timeouts) in [(fast_config(), 1, 0), (late_pto, 1, 0), (no_tlp(), 0, 1)] {
        let early = cfg.delayed_ack < cfg.rto_min;
        let mut p = Pair::active_passive(34, cfg, fast_config());
        assert!(p.established());
        let warm = records(&mut p, Side::A, &[1448; 20]);
        assert!(p.run_until(100_000, |p| p.rx_b.len() == warm.len()
            && p.a.as_ref().unwrap().in_flight() == 0));
        p.rx_b.clear();
        let cwnd = p.a().cwnd();
        drop_data_segments(&mut p, &[4]);
        let start = p.now;
        let d = records(&mut p, Side::A, &[1448; 4]);
        let st = all_delivered(&mut p, &d);
        assert_eq!(st.tail_loss_probes, probes, "{st:?}");
        assert_eq!(st.timeouts, timeouts, "{st:?}");
        if probes > 0 {
            // Repaired before the 1 ms RTO (or at its time), with cwnd kept.
            let took = p.now - start;
            if early {
                assert!(took < 500, "took {took} us");
            } else {
                assert!((1_000..1_500).contains(&took), "took {took} us");
            }
            assert!(p.a().cwnd() >= cwnd / 2, "cwnd {} of {cwnd}", p.a().cwnd());
        } else {
            assert!(p.now - start >= 1_000, "took {} us", p.now - start);
            assert_eq!(p.a().cwnd(), 1448 + 1448, "slow start again after the RTO");
        }
    }
}

/// A probe sent because the peer's ACKs were late (nothing lost) comes back D-SACKed: no
/// loss was repaired, so cwnd stays (RFC 8985 7.4). With the last segment lost instead,
/// the same probe repairs it and cwnd is halved, as in a fast recovery.
#[test]
fn tail_loss_probe_repair_is_told_from_a_late_ack_by_dsack() {
    for lost in [false, true] {
        let mut p = established(39);
        let warm = records(&mut p, Side::A, &[1448; 20]);
        assert!(p.run_until(100_000, |p| p.rx_b.len() == warm.len()
            && p.a.as_ref().unwrap().in_flight() == 0));
        let mut want = warm;
        if lost {
            drop_data_segments(&mut p, &[4]);
        } else {
            // B's ACKs take 300 us each way: the PTO fires, the RTO (1 ms) does not.
            p.delay = 300;
        }
        want.extend(records(&mut p, Side::A, &[1448; 4]));
        let st = all_delivered(&mut p, &want);
        assert_eq!(st.tail_loss_probes, 1, "{st:?}");
        assert_eq!(st.timeouts, 0, "{st:?}");
        // The episode ends with the D-SACK, or with an ACK beyond the probe: more data,
        // once what is on the link has arrived (a faster link now would let the new
        // ACK overtake the late D-SACK).
        let _ = p.run_until(5_000, |_| false);
        p.delay = 10;
        let cwnd = p.a().cwnd();
        want.extend(records(&mut p, Side::A, &[100]));
        let st = all_delivered(&mut p, &want);
        if lost {
            assert_eq!(st.tail_loss_probe_repairs, 1, "{st:?}");
            assert_eq!(st.dsack_octets, 0, "{st:?}");
            assert!(p.a().cwnd() < cwnd, "cwnd {} of {cwnd}", p.a().cwnd());
        } else {
            assert_eq!(st.tail_loss_probe_repairs, 0, "{st:?}");
            assert!(st.dsack_octets >= 1448, "{st:?}");
            assert!(p.a().cwnd() >= cwnd, "cwnd {} of {cwnd}", p.a().cwnd());
        }
    }
}

/// The ACKs of a cwnd-limited flight are lost, with new data waiting: the probe is that
/// new data (RFC 8985 7.3: cwnd aside), and its ACK acknowledges everything. No
/// timeout, nothing sent twice.
#[test]
fn tail_loss_probe_sends_new_data_when_cwnd_holds_it_back() {
    let mut p = established(35);
    // Every ACK from B is lost until A has sent an eleventh data segment.
    let mut a_data = 0;
    p.filter = Some(Box::new(move |s| {
        if s.from == Side::A && s.len > 0 {
            a_data += 1;
        }
        !(s.from == Side::B && s.len == 0 && a_data <= 10)
    }));
    let d = records(&mut p, Side::A, &[1448; 12]);
    p.transmit();
    assert_eq!(p.a().in_flight(), 10 * 1448, "cwnd-limited (10 segments)");
    let st = all_delivered(&mut p, &d);
    assert_eq!(st.tail_loss_probes, 1, "{st:?}");
    assert_eq!(st.timeouts, 0, "{st:?}");
    assert_eq!(st.retransmitted_octets, 0, "{st:?}");
}

/// RFC 3042: the first two duplicate ACKs each let one new segment out beyond cwnd, so
/// a loss in a window of three segments still brings three duplicate ACKs.
#[test]
fn limited_transmit_turns_a_small_window_loss_into_fast_retransmit() {
    let cfg = Config {
        initial_cwnd_segments: 3,
        ..no_tlp()
    };
    let mut p = Pair::active_passive(36, cfg, fast_config());
    assert!(p.established());
    assert_eq!(p.a().cwnd(), 3 * 1448);
    drop_data_segments(&mut p, &[1]);
    let d = records(&mut p, Side::A, &[1448; 8]);
    let st = all_delivered(&mut p, &d);
    assert_eq!(st.fast_retransmits, 1, "{st:?}");
    assert_eq!(st.timeouts, 0, "{st:?}");
}

#[test]
fn fin_wait_2_times_out_when_the_peer_never_closes() {
    let cfg = Config {
        fin_wait2_timeout: Duration::from_millis(5),
        ..fast_config()
    };
    let mut p = Pair::active_passive(26, cfg, fast_config());
    assert!(p.established());
    p.a().close();
    assert!(p.run_until(100_000, |p| p.a.as_ref().unwrap().state()
        == State::FinWait2));
    let t = p.now;
    assert!(p.run_until(100_000, |p| p.a.as_ref().unwrap().state() == State::Closed));
    assert!((5_000..5_100).contains(&(p.now - t)), "{}", p.now - t);
    assert_eq!(p.b().state(), State::CloseWait);
}

/// A random segment aimed at `to`, near its sequence space.
fn hostile(rng: &mut Rng, p: &mut Pair, to: Side) -> Option<TcpRepr<'static>> {
    let c = p.conn(to)?;
    let (nxt, una) = (c.rcv_nxt().0, c.snd_una().0);
    let mut r = repr_from(to == Side::A);
    r.control = match rng.below(6) {
        0 | 1 => TcpControl::None,
        2 => TcpControl::Syn,
        3 => TcpControl::Fin,
        4 => TcpControl::Rst,
        _ => TcpControl::Psh,
    };
    r.seq_number = TcpSeqNumber(nxt.wrapping_add(rng.below(200_000) as i32 - 100_000));
    r.ack_number = rng
        .chance(800)
        .then(|| TcpSeqNumber(una.wrapping_add(rng.below(200_000) as i32 - 100_000)));
    r.window_len = rng.next() as u16;
    r.timestamp = rng
        .chance(700)
        .then(|| TcpTimestampRepr::new(rng.next() as u32, rng.next() as u32));
    r.max_seg_size = rng.chance(50).then(|| rng.next() as u16);
    r.window_scale = rng.chance(50).then(|| rng.below(15) as u8);
    r.sack_permitted = r.control == TcpControl::Syn && rng.chance(500);
    if !r.sack_permitted && r.ack_number.is_some() && rng.chance(300) {
        let l = una.wrapping_add(rng.below(20_000) as i32) as u32;
        r.sack_ranges[0] = Some((l, l.wrapping_add(rng.below(5000) as u32)));
    }
    const JUNK: [u8; 1500] = [0x5A; 1500];
    r.payload = &JUNK[..rng.below(1500) as usize];
    Some(r)
}

#[test]
fn hostile_segments_in_every_state_never_panic() {
    for seed in 0..40u64 {
        let mut rng = Rng::new(seed);
        let mut p = Pair::active_passive(seed, fast_config(), fast_config());
        p.faults = Faults {
            drop: 20,
            dup: 20,
            reorder: 20,
            reorder_delay: 30,
        };
        let mut queued = false;
        for step in 0..3000 {
            if !p.step() {
                p.now += 100;
            }
            if !queued && p.b.as_ref().map(|b| b.state()) == Some(State::Established) {
                records(&mut p, Side::A, &[700; 50]);
                records(&mut p, Side::B, &[300; 50]);
                queued = true;
            }
            if step == 1500 {
                if let Some(a) = p.a.as_mut() {
                    a.close();
                }
            }
            if step == 2000 {
                if let Some(b) = p.b.as_mut() {
                    b.close();
                }
            }
            if rng.chance(30) {
                let to = if rng.chance(500) { Side::A } else { Side::B };
                if let Some(r) = hostile(&mut rng, &mut p, to) {
                    p.inject(to, &r);
                }
            }
        }
        // Both ends closed one way or another (FIN handshakes, RSTs or timeouts).
        for c in [p.a.as_ref(), p.b.as_ref()].into_iter().flatten() {
            assert!(
                matches!(c.state(), State::Closed | State::TimeWait),
                "seed {seed}: {:?}",
                c.state()
            );
        }
    }
}

mod props {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, .. ProptestConfig::default() })]

        /// Random FPDU sizes (some beyond EMSS), random loss, duplication, reordering and
        /// delay: every octet arrives once and in order, and every segment either holds
        /// whole records or lies inside one record larger than EMSS.
        #[test]
        fn fpdu_boundaries_hold(
            seed in any::<u64>(),
            drop in 0u32..120,
            dup in 0u32..60,
            reorder in 0u32..200,
            delay in 1u64..400,
            sack in any::<bool>(),
            sizes in proptest::collection::vec(1usize..4000, 1..150),
        ) {
            let cfg = Config { sack, ..fast_config() };
            let mut p = Pair::active_passive(seed, cfg.clone(), cfg);
            p.delay = delay;
            p.faults = Faults { drop, dup, reorder, reorder_delay: 2 * delay };
            let up = p.run_until(60_000_000, |p| {
                p.a.as_ref().map(|c| c.state()) == Some(State::Established) && p.b.is_some()
            });
            prop_assert!(up);
            let data = records(&mut p, Side::A, &sizes);
            let done = p.run_until(120_000_000, |p| p.rx_b.len() == data.len());
            prop_assert!(done);
            prop_assert!(p.rx_b == data);
            let (whole, split) = check_boundaries(&mut p, &sizes);
            let st = p.a().stats().clone();
            prop_assert_eq!(whole, st.new_segments_whole + st.rtx_segments_whole);
            prop_assert_eq!(split, st.new_segments_split + st.rtx_segments_split);
            let emss = p.a().emss();
            if sizes.iter().all(|&s| s <= emss) {
                prop_assert_eq!(split, 0);
            }
        }
    }
}

#[test]
fn transmit_bursts_are_bounded() {
    let mut p = established(27);
    records(&mut p, Side::A, &[1000; 8]);
    let now = p.instant();
    let mut seen = 0;
    assert_eq!(p.a().poll_transmit_burst(now, 3, |_, _| seen += 1), 3);
    assert_eq!(seen, 3);
    assert_eq!(p.a().poll_at(), Some(now));
    assert_eq!(p.a().poll_transmit_burst(now, 100, |_, _| seen += 1), 5);
    assert_eq!(p.a().poll_transmit_burst(now, 100, |_, _| seen += 1), 0);
    assert_eq!(seen, 8);
}

#[test]
fn receive_window_never_shrinks_and_opens_in_sws_steps() {
    let small = Config {
        recv_buffer: 6000,
        window_scaling: false,
        ..fast_config()
    };
    let mut p = Pair::active_passive(28, fast_config(), small);
    assert!(p.established());
    p.auto_recv = false;
    let d = records(&mut p, Side::A, &[500; 60]);
    let mut got = Vec::new();
    let mut steps = 0;
    while got.len() < d.len() {
        steps += 1;
        assert!(steps < 200_000);
        if !p.step() {
            p.now += 50;
        }
        // The application reads 100 octets at a time.
        p.b().recv_max(100, |_, x| got.extend_from_slice(x));
    }
    assert_eq!(got, d);
    let irs = p.b().irs().0 as u32;
    let mut right = 0u64;
    let mut steps_seen = 0;
    let emss = p.b().emss() as u64;
    for s in p.sent_by(Side::B).filter(|s| s.ctl != TcpControl::Syn) {
        let ack = u64::from(s.ack.unwrap().wrapping_sub(irs));
        let r = ack + u64::from(s.wnd);
        assert!(r >= right, "right edge shrank: {right} -> {r}");
        if r > right && right > 0 {
            // RFC 9293 3.8.6.2.2: the edge moves by at least min(buffer / 2, MSS).
            assert!(r - right >= emss.min(3000), "SWS step {}", r - right);
            steps_seen += 1;
        }
        right = r;
    }
    assert!(steps_seen > 5);
    let st = p.a().stats().clone();
    assert_eq!(st.new_segments_split + st.rtx_segments_split, 0, "{st:?}");
}

/// Rough throughput of two engines plus the harness (run with
/// `cargo test --release -p dataplane tcp::tests::perf_probe -- --ignored --nocapture`).
#[test]
#[ignore]
fn perf_probe() {
    let big = Config {
        recv_buffer: 4 << 20,
        send_buffer: 1 << 30,
        ..fast_config()
    };
    let mut p = Pair::active_passive(99, big.clone(), big);
    assert!(p.established());
    let n = 100_000;
    let sizes = vec![1448; n];
    let t = std::time::Instant::now();
    records(&mut p, Side::A, &sizes);
    let total = 1448 * n;
    assert!(p.run_until(100_000_000, |p| p.rx_b.len() == total));
    let el = t.elapsed();
    eprintln!(
        "{} MB in {:?}: {:.1} Gbit/s (both ends + harness serialization)",
        total / 1_000_000,
        el,
        total as f64 * 8.0 / el.as_secs_f64() / 1e9
    );
}

#[test]
fn sequence_numbers_wrap() {
    // Pick the clock so that A's ISN sits just below 2^32: A's send side and B's receive
    // side cross the wrap.
    let ka = IsnGenerator::with_key([1; 16]);
    let target = 0xFFFF_F000u32;
    let f_a = ka.isn(0, &tuple_a()).0 as u32;
    let now = u64::from(target.wrapping_sub(f_a)) * 4;
    let mut p = Pair::new(34);
    p.now = now;
    p.a = Some(Connection::connect(
        fast_config(),
        tuple_a(),
        &ka,
        p.instant(),
    ));
    p.listener = Some(Listener::new(
        fast_config(),
        IsnGenerator::with_key([2; 16]),
        ADDR_B,
        PORT_B,
    ));
    assert!(p.established());
    assert_eq!(p.a().iss().0 as u32, target);
    let sizes = vec![1000; 200];
    let da = records(&mut p, Side::A, &sizes);
    let db = records(&mut p, Side::B, &sizes);
    p.faults = Faults {
        drop: 30,
        dup: 10,
        reorder: 30,
        reorder_delay: 20,
    };
    assert!(p.run_until(10_000_000, |p| p.rx_b.len() == da.len()
        && p.rx_a.len() == db.len()));
    assert!(p.rx_b == da && p.rx_a == db);
    // A's sequence numbers wrapped past zero.
    assert!((p.a().snd_nxt().0 as u32) < target);
    let (_, split) = check_boundaries(&mut p, &sizes);
    assert_eq!(split, 0);
}

/// A peer that answers late (RTT far above RTO, as when its thread is not scheduled) sets
/// off a timeout; the ACK of the original transmission echoes an older TSval than the
/// retransmission's, so Eifel detection (RFC 3522) finds it spurious and the congestion
/// state comes back (RFC 4015).
#[test]
fn spurious_timeout_is_detected_and_undone() {
    let mut p = established_no_tlp(31);
    // Open cwnd a little with some traffic at the normal 10 us delay.
    let mut want = records(&mut p, Side::A, &[1000; 20]);
    assert!(p.run_until(100_000, |p| p.a.as_ref().unwrap().in_flight() == 0));
    let cwnd = p.a().cwnd();
    assert!(cwnd >= 10 * 1448, "cwnd: {cwnd}");
    // Now the link takes 3 ms each way: RTO (1 ms floor, SRTT ~20 us) fires first.
    p.delay = 3_000;
    want.extend(records(&mut p, Side::A, &[1000; 20]));
    assert!(p.run_until(100_000, |p| p.a.as_ref().unwrap().stats().timeouts > 0));
    assert_eq!(p.a().cwnd(), 1448, "the timeout collapsed cwnd");
    assert!(p.run_until(100_000, |p| p.a.as_ref().unwrap().in_flight() == 0));
    p.delay = 10;
    let s = p.a().stats().clone();
    assert_eq!(s.spurious_timeouts, 1, "{s:?}");
    assert!(
        p.a().cwnd() >= cwnd,
        "cwnd {} restored to {cwnd}",
        p.a().cwnd()
    );
    assert!(p.run_until(100_000, |p| p.rx_b.len() == want.len()));
    assert_eq!(p.rx_b, want);
}

/// A spurious timeout (the link slow for a while) with a real loss in its window: once
/// Eifel finds the timeout spurious and stops the resending, the SACKs above the lost
/// segment start a fast recovery, as they would have without the timeout (RFC 4015: the
/// go-back resending that a timeout's recovery point guards against is stopped; its
/// backoff is no evidence either). Without that, the lost segment waited for a second,
/// doubled timeout.
#[test]
fn a_loss_hidden_behind_a_spurious_timeout_is_repaired_by_fast_recovery() {
    for tlp in [false, true] {
        let cfg = if tlp { fast_config() } else { no_tlp() };
        let mut p = Pair::active_passive(31, cfg.clone(), cfg);
        assert!(p.established());
        let mut want = records(&mut p, Side::A, &[1000; 20]);
        assert!(p.run_until(100_000, |p| p.a.as_ref().unwrap().in_flight() == 0));
        let before = p.a().stats().clone();
        // The link takes 3 ms each way: the RTO (1 ms floor) fires first. The 5th
        // segment of the next flight is lost.
        p.delay = 3_000;
        drop_data_segments(&mut p, &[5]);
        want.extend(records(&mut p, Side::A, &[1000; 20]));
        assert!(p.run_until(100_000, |p| p.a().stats().timeouts > before.timeouts));
        p.delay = 10;
        // The timeouts of the stall (the RTO and its backoff) are found spurious ...
        assert!(p.run_until(100_000, |p| p.a().stats().spurious_timeouts
            > before.spurious_timeouts));
        let stall = p.a().stats().timeouts;
        assert!(p.run_until(100_000, |p| p.rx_b.len() == want.len()));
        assert_eq!(p.rx_b, want);
        // ... and the loss is repaired by a fast recovery, with no timeout more.
        let st = p.a().stats().clone();
        assert_eq!(
            (
                st.timeouts - stall,
                st.spurious_timeouts - before.spurious_timeouts,
                st.fast_retransmits - before.fast_retransmits,
            ),
            (0, 1, 1),
            "tlp {tlp}: {st:?}"
        );
    }
}

/// Without SACK, a stall's timeouts found spurious keep the recovery point they set: the
/// duplicate ACKs the peer sends for the resent segments (one per timeout) must not start
/// a fast retransmit once new data is in flight (RFC 6582 section 4).
#[test]
fn without_sack_duplicates_of_a_stalls_resends_start_no_recovery() {
    let mut p = Pair::active_passive(31, no_sack(), no_sack());
    assert!(p.established());
    let mut want = records(&mut p, Side::A, &[1000; 20]);
    assert!(p.run_until(100_000, |p| p.a.as_ref().unwrap().in_flight() == 0));
    let before = p.a().stats().clone();
    // 5 ms each way: the RTO (1 ms floor) fires three times (1, 3 and 7 ms); the ACK
    // of the originals (10 ms) finds them spurious, and new data goes out; the peer's
    // duplicate ACKs for the three resends come after it (11, 13 and 17 ms).
    p.delay = 5_000;
    want.extend(records(&mut p, Side::A, &[1000; 40]));
    assert!(p.run_until(100_000, |p| p.a().stats().timeouts >= before.timeouts + 3));
    assert!(p.run_until(100_000, |p| p.a().stats().spurious_timeouts
        > before.spurious_timeouts));
    assert!(p.run_until(20_000, |p| p.a().stats().dupacks_received
        >= before.dupacks_received + 3));
    p.delay = 10;
    assert!(p.run_until(1_000_000, |p| p.rx_b.len() == want.len()));
    assert_eq!(p.rx_b, want);
    let st = p.a().stats().clone();
    assert_eq!(st.spurious_timeouts - before.spurious_timeouts, 1, "{st:?}");
    assert_eq!(st.fast_retransmits, before.fast_retransmits, "{st:?}");
}

/// A peer that agreed to SACK but sends duplicate ACKs without SACK blocks still gets a
/// fast retransmit on the third (its duplicates count; only ones whose blocks report
/// nothing new do not).
#[test]
fn duplicate_acks_without_sack_blocks_still_count() {
    let mut p = established_no_tlp(33);
    assert!(p.a().sack());
    // B's own ACKs are lost: A hears only what is injected.
    p.filter = Some(Box::new(|s| s.from != Side::B));
    records(&mut p, Side::A, &[1000; 10]);
    // Until B has answered (its ACKs lost): its window as it stands.
    assert!(p.run_until(1_000, |p| p.a().in_flight() > 0
        && p.sent_by(Side::B).any(|s| s.dropped)));
    let wnd = last_window_of_b(&p);
    let una = p.a().snd_una();
    let dup = |p: &mut Pair| {
        let mut d = from_b_now(p);
        d.ack_number = Some(una);
        d.window_len = wnd;
        p.inject(Side::A, &d);
    };
    // The first brings the window as it stands (the last A heard was the SYN's,
    // unscaled): a window update, no duplicate.
    dup(&mut p);
    let before = p.a().stats().clone();
    for _ in 0..3 {
        dup(&mut p);
    }
    let st = p.a().stats().clone();
    assert_eq!(
        (
            st.dupacks_received - before.dupacks_received,
            st.fast_retransmits - before.fast_retransmits
        ),
        (3, 1),
        "{st:?}"
    );
}

/// Four stalls of B (`stall` us each way), each followed by traffic at the normal
/// `base` us delay, every octet checked; returns A's (timeouts, tail loss probes) after
/// each stall and the octets B has.
fn repeated_stalls(p: &mut Pair, base: u64, stall: u64) -> (Vec<(u64, u64)>, Vec<u8>) {
    p.delay = base;
    let mut want = records(p, Side::A, &[1000; 20]);
    assert!(p.run_until(100_000, |p| p.a.as_ref().unwrap().in_flight() == 0));
    assert!(p.a().rto() < Duration::from_millis(2), "{:?}", p.a().rto());
    assert_eq!(p.a().rto_learned_floor(), Duration::ZERO);
    let mut after = Vec::new();
    for _ in 0..4 {
        for delay in [stall, base] {
            p.delay = delay;
            want.extend(records(p, Side::A, &[1000; 20]));
            let n = want.len();
            assert!(p.run_until(200_000, |p| p.rx_b.len() == n));
            assert!(p.run_until(200_000, |p| p.a.as_ref().unwrap().in_flight() == 0));
        }
        let s = p.a().stats();
        after.push((s.timeouts, s.tail_loss_probes));
    }
    assert_eq!(p.rx_b, want);
    (after, want)
}

/// A peer that stalls again and again for as long (a thread descheduled now and then)
/// costs one episode of spurious timeouts, not one per stall: the first teaches the RTO
/// how late the peer can be (RFC 4015's response), and later stalls of that length fire
/// no timer. A real loss then takes the timer back to its configured floor.
#[test]
fn repeated_stalls_time_out_once_and_loss_forgets_them() {
    let mut p = established_no_tlp(33);
    let (after, mut want) = repeated_stalls(&mut p, 10, 3_000);
    assert!(after[0].0 >= 1, "{after:?}");
    assert_eq!(p.a().stats().spurious_timeouts, 1);
    assert!(after.iter().all(|&a| a == after[0]), "{after:?}");
    // 6 ms round trips: the RTO waits at least that long, whatever SRTT and RTTVAR do.
    assert!(p.a().rto_learned_floor() >= Duration::from_millis(5));
    assert!(p.a().rto() >= Duration::from_millis(6), "{:?}", p.a().rto());
    // A lost segment (not lateness) clears what the stalls taught.
    drop_data_segments(&mut p, &[1]);
    want.extend(records(&mut p, Side::A, &[1000; 20]));
    let st = all_delivered(&mut p, &want);
    assert!(st.fast_retransmits + st.timeouts > after[0].0, "{st:?}");
    assert_eq!(p.a().rto_learned_floor(), Duration::ZERO);
}

/// How long the original took is the peer's word (the TSecr it echoes): an ACK echoing
/// an old TSval cannot teach the timer more than our own clock saw (from when the timer
/// that fired was armed).
#[test]
fn an_old_echo_does_not_inflate_the_learned_floor() {
    let mut p = established_no_tlp(38);
    let _ = records(&mut p, Side::A, &[1000; 4]);
    assert!(p.run_until(100_000, |p| p.a.as_ref().unwrap().in_flight() == 0));
    let rto = p.a().rto();
    // B goes quiet (its ACKs take 100 ms); A's timer fires, and backs off twice.
    p.delay = 100_000;
    let first_timer = Duration::from_micros(p.now);
    let _ = records(&mut p, Side::A, &[1000; 4]);
    assert!(p.run_until(50_000, |p| p.a.as_ref().unwrap().stats().timeouts > 2));
    // The oldest echo that still counts as older than the retransmission: 2^31 ticks.
    let latest = p
        .log
        .iter()
        .rev()
        .find_map(|s| if s.from == Side::A { s.tsval } else { None })
        .expect("A sent a TSval");
    let mut ack = from_b_now(&mut p);
    ack.ack_number = Some(p.a().snd_nxt());
    ack.timestamp = ack
        .timestamp
        .map(|t| TcpTimestampRepr::new(t.tsval, latest.wrapping_sub(1 << 31).wrapping_add(1)));
    p.inject(Side::A, &ack);
    let st = p.a().stats().clone();
    assert_eq!(st.spurious_timeouts, 1, "{st:?}");
    let floor = p.a().rto_learned_floor();
    assert!(floor > Duration::ZERO);
    // What our clock saw since the first timer was armed (the backed-off timers, under
    // 20 RTOs here), a quarter over; the echo alone would say 2^31 ticks.
    let since = Duration::from_micros(p.now) - first_timer;
    assert!(
        floor <= since + since / 4,
        "floor {floor:?}, {since:?} since the timer"
    );
    assert!(floor <= rto * 25, "floor {floor:?}, RTO {rto:?}");
}

/// With tail loss probes, the probe timeout keeps to the learned floor too: later stalls
/// send neither probes nor timeouts. Also where SRTT is a good part of the stall (400 us
/// round trips, 1.4 ms when B stalls): the probe waits SRTT plus the learned floor, as the
/// RTO does, not the floor alone.
#[test]
fn repeated_stalls_probe_once() {
    for (seed, base, stall) in [(34, 10, 3_000), (37, 200, 700)] {
        let mut p = established(seed);
        let (after, _) = repeated_stalls(&mut p, base, stall);
        assert!(after[0].0 + after[0].1 >= 1, "{base}/{stall}: {after:?}");
        assert!(
            after.iter().all(|&a| a == after[0]),
            "{base}/{stall}: {after:?}"
        );
    }
}

/// A retransmission of octets the receiver has is reported back in a D-SACK block (RFC
/// 2883): first in the ACK, below its cumulative ACK number; the sender counts the octets.
/// A duplicate beyond a hole is reported inside the SACK block that holds it.
#[test]
fn duplicates_are_reported_in_dsack_blocks() {
    let mut p = established_no_tlp(35);
    // A spurious timeout: the originals and the retransmission all arrive.
    p.delay = 3_000;
    let d = records(&mut p, Side::A, &[1000; 4]);
    let st = all_delivered(&mut p, &d);
    assert!(
        st.timeouts >= 1 && st.retransmitted_octets >= 1000,
        "{st:?}"
    );
    assert!(p.b().stats().dsacks_sent >= 1, "{:?}", p.b().stats());
    let dsack_acks: Vec<_> = p
        .log
        .iter()
        .filter(|s| s.from == Side::B)
        .filter_map(|s| s.blocks[0].map(|b| (b, s.ack)))
        .collect();
    assert!(!dsack_acks.is_empty());
    for &((l, r), ack) in &dsack_acks {
        let ack = ack.expect("an ACK");
        let (l, r, ack) = (
            TcpSeqNumber(l as i32),
            TcpSeqNumber(r as i32),
            TcpSeqNumber(ack as i32),
        );
        assert!(l < r && r <= ack, "D-SACK {l}..{r} not below ACK {ack}");
    }
    // The D-SACKs come back after the cumulative ACK that emptied the flight.
    let rtx = st.retransmitted_octets;
    assert!(
        p.run_until(100_000, |p| p.a.as_ref().unwrap().stats().dsack_octets
            >= rtx)
    );
    let a = p.a().stats().clone();
    assert_eq!(a.dsack_octets, rtx, "{a:?}");
    p.delay = 10;
    // A real loss: its retransmission was needed, and no D-SACK comes back.
    drop_data_segments(&mut p, &[1]);
    let before = (
        p.a().stats().dsack_octets,
        p.a().stats().retransmitted_octets,
    );
    let mut want = d;
    want.extend(records(&mut p, Side::A, &[500; 6]));
    let st = all_delivered(&mut p, &want);
    assert!(st.retransmitted_octets > before.1, "{st:?}");
    assert_eq!(st.dsack_octets, before.0, "{st:?}");
    // The link doubles B's ACKs that carry D-SACKs: each D-SACK is still counted once.
    p.duplicate = Some(Box::new(|s| s.from == Side::B && s.len == 0 && s.sack));
    let before = p.a().stats().clone();
    // (A longer delay than the first: the timer learned how late the first was.)
    p.delay = 40_000;
    let d2 = records(&mut p, Side::A, &[1000; 4]);
    let mut sent = want;
    sent.extend(d2);
    // Round trips of 80 ms, with the window the loss above halved: a few of them.
    let st = all_delivered_within(&mut p, &sent, 1_000_000);
    let rtx2 = st.retransmitted_octets - before.retransmitted_octets;
    assert!(rtx2 > 0, "{st:?}");
    assert!(
        p.run_until(1_000_000, |p| p.a.as_ref().unwrap().stats().dsack_octets
            >= before.dsack_octets + rtx2)
    );
    p.run_for(200_000);
    let st = p.a().stats().clone();
    assert_eq!(st.dsack_octets - before.dsack_octets, rtx2, "{st:?}");
    // The doubled D-SACK ACKs report nothing new: no recovery came of them.
    assert_eq!(st.fast_retransmits, before.fast_retransmits, "{st:?}");
}

/// Duplicates the link makes are reported too, beyond a hole inside the SACK block that
/// holds them (RFC 2883 section 4.1.3), and every octet still arrives once.
#[test]
fn link_duplicates_are_reported_in_dsack_blocks() {
    // Over four seeds: whether a duplicate lands beyond a hole is the draw's (one seed
    // in five or so has none).
    let mut beyond_holes = 0;
    for seed in 36..40 {
        let mut p = established(seed);
        p.faults = Faults {
            drop: 20,
            dup: 100,
            reorder: 0,
            reorder_delay: 0,
        };
        let d = records(&mut p, Side::A, &[700; 300]);
        let st = all_delivered(&mut p, &d);
        let b = p.b().stats().clone();
        assert!(b.duplicate_segments > 0 && b.dsacks_sent > 0, "{b:?}");
        assert!(st.dsack_octets > 0, "{st:?}");
        // Every D-SACK B sent is a first block below its ACK or inside the block after it
        // (an ordinary first block is neither); no block straddles the ACK.
        let (mut shaped, mut beyond) = (0, 0);
        for s in p.log.iter().filter(|s| s.from == Side::B) {
            let Some(ack) = s.ack.map(|a| TcpSeqNumber(a as i32)) else {
                continue;
            };
            let blocks: Vec<_> = s
                .blocks
                .iter()
                .flatten()
                .map(|&(l, r)| (TcpSeqNumber(l as i32), TcpSeqNumber(r as i32)))
                .collect();
            for &(l, r) in &blocks {
                assert!(l < r && (r <= ack || l > ack), "{s:?}");
            }
            let Some(&(l, r)) = blocks.first() else {
                continue;
            };
            let inside = blocks.get(1).is_some_and(|&(l2, r2)| l2 <= l && r <= r2);
            shaped += usize::from(r <= ack || inside);
            beyond += usize::from(inside && l > ack);
        }
        assert_eq!(shaped as u64, b.dsacks_sent);
        beyond_holes += beyond;
    }
    // Some of them, over the seeds, the latter: duplicates beyond a hole.
    assert!(beyond_holes > 0);
}

/// A real loss is not taken for a spurious timeout: the ACK that advances SND.UNA is for
/// the retransmission and echoes its TSval.
#[test]
fn lost_segment_timeout_is_not_undone() {
    let mut p = established_no_tlp(32);
    let mut n = 0;
    p.filter = Some(Box::new(move |s| {
        if s.from == Side::A && s.len > 0 && n < 1 {
            n += 1;
            return false;
        }
        true
    }));
    let d = records(&mut p, Side::A, &[300]);
    assert!(p.run_until(100_000, |p| p.rx_b.len() == 300));
    assert_eq!(p.rx_b, d);
    assert!(p.run_until(100_000, |p| p.a.as_ref().unwrap().in_flight() == 0));
    assert_eq!(p.a().stats().timeouts, 1);
    assert_eq!(p.a().stats().spurious_timeouts, 0);
}

#[test]
fn records_are_offered_for_zero_copy_only_when_asked() {
    let mut p = established_no_tlp(61);
    let sent = records(&mut p, Side::A, &[1000, 1000, 30, 30]);
    let now = p.instant();
    // With sharing: a payload one record holds is offered as that record, exactly the
    // segment's payload; two small records packed into one segment are not offered.
    let mut offered = Vec::new();
    let mut packed = 0;
    p.a().poll_transmit_records(now, 8, true, |repr, rec, sum| {
        // Whole records: the sum taken as they were queued is the payload's.
        if !repr.payload.is_empty() {
            assert_eq!(sum, Some(wire::tcp::checksum::data(repr.payload)));
        }
        match rec {
            Some(r) => {
                assert!(std::ptr::eq(r.bytes(), repr.payload));
                assert_eq!(r.len, repr.payload.len());
                offered.extend_from_slice(r.bytes());
            }
            None if !repr.payload.is_empty() => {
                packed += 1;
                offered.extend_from_slice(repr.payload);
            }
            None => {}
        }
    });
    assert_eq!(packed, 1, "the two 30-octet records go out together");
    assert_eq!(offered, sent);
    // Without sharing, nothing is offered, not even the records shared above when they
    // are retransmitted (after the RTO; no tail loss probe here, which would resend the
    // last segment first).
    let later = now + smoltcp::time::Duration::from_secs(5);
    let mut resent = Vec::new();
    let n = p
        .a()
        .poll_transmit_records(later, 8, false, |repr, rec, sum| {
            assert!(rec.is_none(), "a record offered without sharing");
            if let Some(sum) = sum {
                assert_eq!(sum, wire::tcp::checksum::data(repr.payload));
            }
            resent.extend_from_slice(repr.payload);
        });
    assert!(
        n > 0 && resent.starts_with(&sent[..1000]),
        "{n} {}",
        resent.len()
    );
}

/// [`Config::record_sums`] off (a port that fills TCP checksums): no segment comes with
/// a payload sum; on, every segment of whole records does, and it is the payload's.
#[test]
fn payload_sums_come_only_when_taken() {
    for sums in [true, false] {
        let cfg = Config {
            record_sums: sums,
            ..fast_config()
        };
        let mut p = Pair::active_passive(62, cfg, fast_config());
        assert!(p.established());
        records(&mut p, Side::A, &[1000, 30, 30, 1448]);
        let now = p.instant();
        let mut segments = 0;
        p.a().poll_transmit_records(now, 8, false, |repr, _, sum| {
            if repr.payload.is_empty() {
                return;
            }
            segments += 1;
            let want = sums.then(|| wire::tcp::checksum::data(repr.payload));
            assert_eq!(sum, want, "record_sums {sums}");
        });
        assert!(segments >= 2, "{segments} segments");
    }
}

#[test]
fn syn_cookie_handshake_keeps_no_state_and_negotiates_options() {
    let mut p = Pair::active_passive(31, fast_config(), fast_config());
    p.syn_policy = SynPolicy::Cookie;
    assert!(p.established());
    let l = p.listener.as_ref().unwrap();
    assert_eq!((l.cookies_sent(), l.cookies_accepted()), (1, 1));
    // The SYN-ACK was the cookie; B's connection exists only since the ACK.
    assert_eq!(p.ev_b, vec![Event::Established]);
    for s in [Side::A, Side::B] {
        let c = p.conn(s).unwrap();
        assert!(c.timestamps() && c.sack(), "{s:?}");
        assert_eq!(c.window_scale(), Some((3, 3)), "{s:?}");
    }
    assert_eq!(p.b().emss(), 1448);
    // Data both ways over the cookie connection.
    let sent_a = records(&mut p, Side::A, &[1000, 3000, 200]);
    let sent_b = records(&mut p, Side::B, &[5000, 7]);
    assert!(p.run_until(1_000_000, |p| p.rx_b.len() == sent_a.len()
        && p.rx_a.len() == sent_b.len()));
    assert_eq!(p.rx_b, sent_a);
    assert_eq!(p.rx_a, sent_b);
}

#[test]
fn syn_cookie_without_timestamps_has_no_scaling_or_sack() {
    let plain = Config {
        timestamps: false,
        ..fast_config()
    };
    let mut p = Pair::active_passive(32, plain.clone(), fast_config());
    p.syn_policy = SynPolicy::Cookie;
    assert!(p.established());
    assert!(!p.b().timestamps() && !p.b().sack());
    assert_eq!(p.b().window_scale(), None);
    let sent = records(&mut p, Side::A, &[40_000]);
    assert!(p.run_until(2_000_000, |p| p.rx_b.len() == sent.len()));
    assert_eq!(p.rx_b, sent);
}

#[test]
fn refused_syn_gets_a_rst_and_stray_acks_are_not_cookies() {
    let mut p = Pair::active_passive(33, fast_config(), fast_config());
    p.syn_policy = SynPolicy::Refuse;
    p.run_for(100_000);
    assert!(p.b.is_none());
    assert_eq!(p.ev_a, vec![Event::Reset, Event::Closed]);
    // With no cookie ever sent, an ACK to the listener is never taken as one.
    let mut l = Listener::new(
        fast_config(),
        IsnGenerator::with_key([2; 16]),
        ADDR_B,
        PORT_B,
    );
    let mut ack = repr_from(false);
    ack.ack_number = Some(TcpSeqNumber(1));
    assert!(matches!(
        l.on_segment(Instant::from_micros(5), ADDR_A, &ack, SynPolicy::Cookie),
        Accepted::Reply(r) if r.control == TcpControl::Rst
    ));
}

#[test]
fn user_timeout_aborts_a_connection_stuck_on_a_zero_window() {
    let cfg = Config {
        user_timeout: Some(Duration::from_millis(300)),
        ..fast_config()
    };
    let mut p = Pair::active_passive(34, cfg, fast_config());
    assert!(p.established());
    // B never reads: its window closes, A's data stays unacknowledged.
    p.auto_recv = false;
    let start = p.now;
    let mut zero_window_at = None;
    while !p.ev_a.contains(&Event::TimedOut) && p.now - start < 5_000_000 {
        let _ = p.a().send_fpdu(vec![7u8; 1000]);
        p.run_for(1000);
        if zero_window_at.is_none() && p.a.as_ref().is_some_and(|a| a.snd_wnd() == 0) {
            zero_window_at = Some(p.now);
        }
    }
    let zw = zero_window_at.expect("B's window closed");
    assert!(p.ev_a.contains(&Event::TimedOut));
    // Aborted one user timeout after the last progress (the window closing), not before.
    let after = p.now - zw;
    assert!(
        (290_000..400_000).contains(&after),
        "{after} µs after the window closed"
    );
    assert_eq!(p.ev_a.last(), Some(&Event::Closed));
    assert_eq!(p.a().state(), State::Closed);
    assert!(
        p.log
            .iter()
            .any(|s| s.from == Side::A && s.ctl == TcpControl::Rst),
        "the abort sends a RST"
    );
    // Zero-window probes were answered all along (the peer was alive but not reading).
    assert!(p.a().stats().zero_window_probes > 0);
}

#[test]
fn user_timeout_restarts_on_progress() {
    let cfg = Config {
        user_timeout: Some(Duration::from_millis(50)),
        ..fast_config()
    };
    let mut p = Pair::active_passive(35, cfg, fast_config());
    assert!(p.established());
    // A steady trickle for much longer than the user timeout: always progressing.
    for _ in 0..400 {
        let _ = p.a().send_fpdu(vec![1; 100]);
        p.run_for(1000);
    }
    assert!(!p.ev_a.contains(&Event::TimedOut));
    assert_eq!(p.a().state(), State::Established);
}

#[test]
fn time_wait_snapshot_acks_a_retransmitted_fin() {
    let mut p = established(36);
    p.a().close();
    assert!(p.run_until(100_000, |p| p.b.as_ref().unwrap().state()
        == State::CloseWait));
    p.b().close();
    assert!(p.run_until(100_000, |p| p.a.as_ref().unwrap().state()
        == State::TimeWait));
    let mut tw = p.a().time_wait().expect("in TIME-WAIT");
    assert!(p.b().time_wait().is_none());
    assert_eq!(tw.snd_nxt, p.a().snd_nxt());
    assert_eq!(tw.rcv_nxt, p.a().rcv_nxt());
    // B's FIN again: the snapshot answers as the connection would.
    let mut fin = from_b_now(&mut p);
    fin.seq_number = TcpSeqNumber(fin.seq_number.0.wrapping_sub(1));
    fin.control = TcpControl::Fin;
    let now = p.instant();
    let TimeWaitAction::Ack(a) = tw.on_segment(now, &fin) else {
        panic!("no ACK");
    };
    assert_eq!(a.ack_number, Some(p.a().rcv_nxt()));
    assert_eq!(a.seq_number, p.a().snd_nxt());
}

#[test]
fn an_ack_that_closes_the_window_arms_the_persist_timer_at_once() {
    let cfg = Config {
        user_timeout: Some(Duration::from_millis(500)),
        ..fast_config()
    };
    let mut p = Pair::active_passive(37, cfg, fast_config());
    assert!(p.established());
    p.auto_recv = false;
    records(&mut p, Side::A, &[1000; 4]);
    // B acknowledges everything A sent with a zero window, injected straight into A with
    // no transmit poll after it: A must still have a deadline (persist, user timeout),
    // or nothing would ever look at it again.
    p.run_for(200);
    let a_nxt = p.a().snd_nxt();
    let mut ack = from_b_now(&mut p);
    ack.ack_number = Some(a_nxt);
    ack.window_len = 0;
    p.inject(Side::A, &ack);
    assert_eq!(p.a().snd_una(), a_nxt);
    assert_eq!(p.a().snd_wnd(), 0);
    let _ = records(&mut p, Side::A, &[1000]);
    let mut ack2 = from_b_now(&mut p);
    ack2.ack_number = Some(a_nxt);
    ack2.window_len = 0;
    p.inject(Side::A, &ack2);
    assert!(
        p.a().poll_at().is_some(),
        "a zero window with data waiting left the connection without a deadline"
    );
}

/// What a record queued next could carry without waiting: the window and cwnd beyond
/// everything queued, and nothing to say once queued octets already wait for them.
#[test]
fn send_room_after_queue_counts_what_is_queued() {
    let mut p = established(71);
    let a = p.a();
    let room = a.snd_wnd().min(a.cwnd());
    assert!(room > 3000, "{room}");
    assert_eq!(a.send_room_after_queue(), Some(room));
    records(&mut p, Side::A, &[1000]);
    assert_eq!(p.a().send_room_after_queue(), Some(room - 1000));
    // Sent or not, queued octets count until acknowledged.
    p.run_for(10);
    assert!(p.a().send_room_after_queue().unwrap() <= room - 1000);
    let left = p.a().send_room_after_queue().unwrap() as usize;
    let mut sizes = vec![1000; left / 1000];
    sizes.push(left % 1000 + 1);
    records(&mut p, Side::A, &sizes);
    assert_eq!(p.a().send_room_after_queue(), None);
}
