//! Tests of the simulated wire.

use super::*;
use proto::tcp::FourTuple;
use smoltcp::wire::{Ipv4Address, TcpControl, TcpRepr, TcpSeqNumber, TcpTimestampRepr};
use wire::tcp::{ipv4_segment_from_bytes, ipv4_segment_to_bytes};

fn send(p: &mut MemPort, frame: &[u8]) -> bool {
    p.tx(frame.len(), &mut |b: &mut [u8]| b.copy_from_slice(frame))
}

fn drain(p: &mut MemPort) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while p.rx_burst(64, &mut |f: &[u8]| out.push(f.to_vec())) > 0 {}
    out
}

/// Receives until `n` frames arrived or two seconds passed.
fn receive_n(p: &mut MemPort, n: usize) -> Vec<Vec<u8>> {
    let start = Instant::now();
    let mut out = Vec::new();
    while out.len() < n && start.elapsed() < Duration::from_secs(2) {
        if p.rx_burst(64, &mut |f: &[u8]| out.push(f.to_vec())) == 0 {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    out
}

/// Runs `attempt`, a test whose checks need a receive to come within a delay, until one
/// run makes it on time (`attempt` returns false when the receive came late: a machine
/// that stalled this thread). Five late runs fail the test: it never passes unchecked.
fn until_on_time(mut attempt: impl FnMut() -> bool) {
    for i in 0..5 {
        if attempt() {
            return;
        }
        eprintln!("attempt {i}: the receive came after the delay; again");
    }
    panic!("no attempt received within the delay: the machine is too busy for this test");
}

/// A frame carrying its index in its first 8 octets (not IPv4).
fn numbered(i: u64) -> Vec<u8> {
    let mut f = vec![0u8; 60];
    f[..8].copy_from_slice(&i.to_be_bytes());
    f[12] = 0x88;
    f[13] = 0xb5;
    f
}

fn number(f: &[u8]) -> u64 {
    u64::from_be_bytes(f[..8].try_into().unwrap())
}

fn tuple() -> FourTuple {
    FourTuple {
        local_addr: Ipv4Address::new(10, 0, 0, 1),
        local_port: 40000,
        remote_addr: Ipv4Address::new(10, 0, 0, 2),
        remote_port: 3260,
    }
}

fn tcp_frame(seq: u32, payload: &[u8], control: TcpControl) -> Vec<u8> {
    let repr = TcpRepr {
        src_port: 40000,
        dst_port: 3260,
        control,
        seq_number: TcpSeqNumber(seq as i32),
        ack_number: Some(TcpSeqNumber(77)),
        window_len: 1000,
        window_scale: None,
        max_seg_size: None,
        sack_permitted: false,
        sack_ranges: [None; 3],
        timestamp: Some(TcpTimestampRepr::new(11, 22)),
        payload,
    };
    let mut out = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00];
    ipv4_segment_to_bytes(&tuple(), &repr, 64, &mut out);
    out
}

fn payload_of(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|j| (i * 31 + j * 7) as u8).collect()
}

/// `rx_idle` says a frame waits exactly when one was flushed towards the port and not yet
/// taken, a delayed one included (an idle poll skips the receive burst on its word).
#[test]
fn rx_idle_tells_waiting_frames() {
    let (mut a, mut b) = link(WireConfig::default(), WireConfig::default());
    assert!(b.rx_idle());
    assert!(send(&mut a, &numbered(1)));
    assert!(b.rx_idle(), "not flushed yet");
    a.flush();
    assert!(!b.rx_idle());
    assert!(a.rx_idle(), "the other direction");
    assert_eq!(drain(&mut b).len(), 1);
    assert!(b.rx_idle());
    // (Long enough that a loaded machine does not deliver it before the checks.)
    let slow = WireConfig::default().with_delay(Duration::from_millis(500));
    let (mut a, mut b) = link(slow, WireConfig::default());
    assert!(send(&mut a, &numbered(2)));
    a.flush();
    assert!(!b.rx_idle());
    // Taken off the wire but held until due: still waiting.
    assert!(drain(&mut b).is_empty());
    assert!(!b.rx_idle());
    assert_eq!(receive_n(&mut b, 1).len(), 1);
    assert!(b.rx_idle());
    // A duplicated frame: both copies wait, and the port is idle once both are taken.
    let (mut a, mut b) = link(
        WireConfig::default().with_duplicate(1.0),
        WireConfig::default(),
    );
    assert!(send(&mut a, &numbered(4)));
    a.flush();
    assert_eq!(b.rx_burst(1, &mut |_: &[u8]| {}), 1);
    assert!(!b.rx_idle(), "the copy waits");
    assert_eq!(b.rx_burst(1, &mut |_: &[u8]| {}), 1);
    assert!(b.rx_idle());
    // Several queues: only the port whose queue holds the frame has one waiting.
    let (mut a, mut b) = link_multi(WireConfig::default(), WireConfig::default(), 2).unwrap();
    assert!(send(&mut a[1], &numbered(3)));
    a[1].flush();
    let waiting: Vec<bool> = b.iter().map(|p| !p.rx_idle()).collect();
    assert_eq!(waiting.iter().filter(|w| **w).count(), 1, "{waiting:?}");
    let q = waiting.iter().position(|w| *w).unwrap();
    assert_eq!(drain(&mut b[q]).len(), 1);
    assert!(b.iter().all(|p| p.rx_idle()));
}

#[test]
fn perfect_wire_delivers_in_order_after_flush() {
    let (mut a, mut b) = link(WireConfig::default(), WireConfig::default());
    for i in 0..100 {
        assert!(send(&mut a, &numbered(i)));
    }
    assert!(drain(&mut b).is_empty(), "nothing before flush");
    a.flush();
    let got = drain(&mut b);
    assert_eq!(got.len(), 100);
    for (i, f) in got.iter().enumerate() {
        assert_eq!(number(f), i as u64);
        assert_eq!(f.len(), 60);
    }
    // And the reverse direction.
    assert!(send(&mut b, &numbered(7)));
    b.flush();
    assert_eq!(drain(&mut a).len(), 1);

    let s = a.wire_stats();
    assert_eq!(s.outbound.sent, 100);
    assert_eq!(s.outbound.delivered, 100);
    assert_eq!(s.inbound.sent, 1);
    assert_eq!(b.wire_stats().inbound, s.outbound);
    assert_eq!(a.stats().tx_frames, 100);
    assert_eq!(a.stats().tx_octets, 6000);
    assert_eq!(b.stats().rx_frames, 100);
    assert_eq!(b.stats().rx_octets, 6000);
}

#[test]
fn rx_burst_respects_max() {
    let (mut a, mut b) = link(WireConfig::default(), WireConfig::default());
    for i in 0..10 {
        send(&mut a, &numbered(i));
    }
    a.flush();
    let mut seen = Vec::new();
    assert_eq!(b.rx_burst(4, &mut |f: &[u8]| seen.push(number(f))), 4);
    assert_eq!(b.rx_burst(4, &mut |f: &[u8]| seen.push(number(f))), 4);
    assert_eq!(b.rx_burst(4, &mut |f: &[u8]| seen.push(number(f))), 2);
    assert_eq!(seen, (0..10).collect::<Vec<_>>());
}

#[test]
fn macs_and_mtu() {
    let (a, b) = link(WireConfig::default(), WireConfig::default());
    assert_eq!(a.mac(), EthernetAddress([2, 0, 0, 0, 0, 1]));
    assert_eq!(b.mac(), EthernetAddress([2, 0, 0, 0, 0, 2]));
    assert_eq!(a.mtu(), 1500);
    let mac = EthernetAddress([0x06, 1, 2, 3, 4, 5]);
    let (a, b) = link(
        WireConfig::default().with_mac(mac).with_mtu(9000),
        WireConfig::default(),
    );
    assert_eq!(a.mac(), mac);
    assert_eq!(a.mtu(), 9000);
    assert_eq!(b.mtu(), 1500);
}

#[test]
fn jumbo_frames_and_oversize() {
    let jumbo = WireConfig::default().with_mtu(9000);
    let (mut a, mut b) = link(jumbo.clone(), jumbo);
    let big = vec![0xabu8; 9014];
    assert!(send(&mut a, &big));
    assert!(!a.tx(9015, &mut |_: &mut [u8]| panic!("not called")));
    a.flush();
    let got = drain(&mut b);
    assert_eq!(got, vec![big]);
    assert_eq!(a.stats().tx_dropped, 1);

    // A receiver with a smaller MTU drops what it cannot take.
    let (mut a, mut b) = link(WireConfig::default().with_mtu(9000), WireConfig::default());
    send(&mut a, &vec![0u8; 9014]);
    send(&mut a, &vec![0u8; 1514]);
    a.flush();
    assert_eq!(drain(&mut b).len(), 1);
    assert_eq!(b.stats().rx_dropped, 1);
    assert_eq!(a.rx_pending(), 0);
    assert_eq!(b.rx_pending(), 0);
}

#[test]
fn capacity_backpressure() {
    let (mut a, mut b) = link(
        WireConfig::default().with_capacity(8),
        WireConfig::default(),
    );
    assert_eq!(a.tx_room(), 8);
    for i in 0..8 {
        assert!(send(&mut a, &numbered(i)));
    }
    assert_eq!(a.tx_room(), 0);
    assert!(!send(&mut a, &numbered(8)));
    a.flush();
    assert_eq!(a.tx_room(), 0, "flushed frames are still in flight");
    assert!(!send(&mut a, &numbered(8)));
    assert_eq!(b.rx_pending(), 8);
    let mut n = 0;
    b.rx_burst(3, &mut |_: &[u8]| n += 1);
    assert_eq!(n, 3);
    assert_eq!(a.tx_room(), 3);
    for i in 8..11 {
        assert!(send(&mut a, &numbered(i)));
    }
    a.flush();
    let got: Vec<u64> = drain(&mut b).iter().map(|f| number(f)).collect();
    assert_eq!(got, (3..11).collect::<Vec<_>>());
    assert_eq!(a.stats().tx_dropped, 2);
    assert_eq!(a.tx_room(), 8);
}

/// Frames a delayed wire's receiver holds back (taken off the ring, not yet due) still
/// count against the sender's room until they are received; without delay or faults the
/// ring alone tells the room (`capacity_backpressure`).
#[test]
fn held_frames_count_against_the_room() {
    let delay = Duration::from_millis(100);
    // The checks before the delay need the receive to come within it.
    until_on_time(|| {
        let (mut a, mut b) = link(
            WireConfig::default().with_capacity(4).with_delay(delay),
            WireConfig::default(),
        );
        let sent = Instant::now();
        for i in 0..4 {
            assert!(send(&mut a, &numbered(i)));
        }
        a.flush();
        let mut n = 0;
        b.rx_burst(4, &mut |_: &[u8]| n += 1);
        let room = (a.tx_room(), b.rx_pending());
        if sent.elapsed() >= delay {
            return false;
        }
        assert_eq!(n, 0, "none due yet");
        assert_eq!(room, (0, 4), "held, still in flight");
        std::thread::sleep(delay);
        let got: Vec<u64> = drain(&mut b).iter().map(|f| number(f)).collect();
        assert_eq!(got, (0..4).collect::<Vec<_>>());
        assert_eq!((a.tx_room(), b.rx_pending()), (4, 0));
        true
    });
}

/// Frame buffers a sender writes again: with the receiving port on another thread, only
/// once about `FAR_REUSE_OCTETS` of newer frames have been read behind them (so their
/// lines have left the other core's caches); with both ports on one thread, the ones
/// just read. Every frame still arrives whole and in order either way.
#[test]
fn buffers_come_back_late_from_another_thread_and_at_once_from_this_one() {
    const FRAMES: u64 = 4000;
    let len = 1514;
    // Sends FRAMES frames one at a time, each received before the next is sent, by `b`
    // on this thread or on another, over a wire of `capacity`; the distinct buffers the
    // sender wrote.
    let run = |other_thread: bool, capacity: usize| {
        let (mut a, b) = link(
            WireConfig::default().with_capacity(capacity),
            WireConfig::default(),
        );
        let (to_rx, rx_go) = std::sync::mpsc::channel::<bool>();
        let (to_tx, tx_go) = std::sync::mpsc::channel::<Vec<u8>>();
        let receive = |b: &mut MemPort| receive_n(b, 1).pop().expect("a frame within 2 s");
        let mut b_here = None;
        let rx = if other_thread {
            Some(std::thread::spawn(move || {
                let mut b = b;
                while rx_go.recv() == Ok(true) {
                    to_tx.send(receive(&mut b)).unwrap();
                }
            }))
        } else {
            b_here = Some(b);
            None
        };
        let mut buffers = std::collections::HashSet::new();
        for i in 0..FRAMES {
            let mut frame = numbered(i);
            frame.resize(len, i as u8);
            assert!(a.tx(len, &mut |buf: &mut [u8]| {
                buffers.insert(buf.as_ptr() as usize);
                buf.copy_from_slice(&frame);
            }));
            a.flush();
            let got = match &mut b_here {
                Some(b) => receive(b),
                None => {
                    to_rx.send(true).unwrap();
                    tx_go.recv().unwrap()
                }
            };
            assert_eq!(got, frame, "frame {i}");
        }
        let _ = to_rx.send(false);
        if let Some(h) = rx {
            h.join().unwrap();
        }
        buffers.len()
    };
    let here = run(false, DEFAULT_CAPACITY);
    assert!(
        here <= SPARE_MAX + BUFFER_BURST,
        "{here} buffers on one thread"
    );
    // 3 MiB of frames, or half the capacity where that is less (a threshold the return
    // ring could not reach would make a buffer for every frame).
    for capacity in [DEFAULT_CAPACITY, 512] {
        let want = (FAR_REUSE_OCTETS / len).min(capacity / 2);
        let far = run(true, capacity);
        assert!(
            (want..=want + SPARE_MAX + BUFFER_BURST).contains(&far),
            "{far} buffers with the receiver on another thread, capacity {capacity} (want \
             about {want})"
        );
    }
}

#[test]
fn validation() {
    assert!(WireConfig::default().validate().is_ok());
    let bad = WireConfig::default().with_loss(1.5);
    assert_eq!(
        bad.validate(),
        Err(WireConfigError::Probability {
            field: "loss",
            value: 1.5
        })
    );
    assert!(matches!(
        WireConfig::default().with_corrupt(f64::NAN).validate(),
        Err(WireConfigError::Probability {
            field: "corrupt",
            ..
        })
    ));
    assert_eq!(
        WireConfig::default().with_capacity(0).validate(),
        Err(WireConfigError::Capacity(0))
    );
    assert_eq!(
        WireConfig::default().with_mtu(10).validate(),
        Err(WireConfigError::Mtu(10))
    );
    let multicast = EthernetAddress([1, 0, 0x5e, 0, 0, 1]);
    assert_eq!(
        WireConfig::default().with_mac(multicast).validate(),
        Err(WireConfigError::Mac(multicast))
    );
    assert!(try_link(bad.clone(), WireConfig::default()).is_err());
    assert!(!WireConfigError::Mtu(10).to_string().is_empty());

    // `link` brings values into range instead of failing.
    let (mut a, mut b) = link(
        WireConfig::default()
            .with_loss(f64::NAN)
            .with_duplicate(-3.0)
            .with_capacity(0),
        bad,
    );
    assert_eq!(a.config().faults.loss, 0.0);
    assert_eq!(a.config().capacity, 1);
    assert_eq!(b.config().faults.loss, 1.0);
    assert!(send(&mut a, &numbered(0)));
    a.flush();
    assert_eq!(drain(&mut b).len(), 1);
    assert!(send(&mut b, &numbered(0)));
    b.flush();
    assert!(drain(&mut a).is_empty());
}

fn assert_near(what: &str, got: u64, n: u64, p: f64) {
    let expect = n as f64 * p;
    let tol = 4.0 * (n as f64 * p * (1.0 - p)).sqrt() + 1.0;
    assert!(
        (got as f64 - expect).abs() <= tol,
        "{what}: {got} of {n}, expected about {expect}"
    );
}

#[test]
fn loss_and_duplicate_rates() {
    const N: u64 = 20_000;
    let cfg = WireConfig::default()
        .with_loss(0.1)
        .with_duplicate(0.05)
        .with_seed(42);
    let (mut a, mut b) = link(cfg, WireConfig::default());
    let mut got = Vec::new();
    for i in 0..N {
        assert!(send(&mut a, &numbered(i)));
        if i % 256 == 255 {
            a.flush();
            got.extend(drain(&mut b));
        }
    }
    a.flush();
    got.extend(drain(&mut b));
    let s = a.wire_stats().outbound;
    assert_eq!(s.sent, N);
    assert_near("lost", s.faults.lost, N, 0.1);
    assert_near("duplicated", s.faults.duplicated, N - s.faults.lost, 0.05);
    assert_eq!(s.delivered, N - s.faults.lost + s.faults.duplicated);
    assert_eq!(got.len() as u64, s.delivered);
    assert_eq!(s.overflow, 0);
    // Order is kept (duplicates follow their original).
    let nums: Vec<u64> = got.iter().map(|f| number(f)).collect();
    assert!(nums.windows(2).all(|w| w[0] <= w[1]));
}

/// The indices of the frames that got through, for a given seed.
fn survivors(seed: u64) -> Vec<u64> {
    let cfg = WireConfig::default().with_loss(0.3).with_seed(seed);
    let (mut a, mut b) = link(cfg, WireConfig::default());
    for i in 0..500 {
        send(&mut a, &numbered(i));
    }
    a.flush();
    drain(&mut b).iter().map(|f| number(f)).collect()
}

#[test]
fn faults_replay_with_the_same_seed() {
    assert_eq!(survivors(7), survivors(7));
    assert_ne!(survivors(7), survivors(8));
}

#[test]
fn delay_holds_frames_until_due() {
    let delay = Duration::from_millis(20);
    // The early receive must come within the delay for its check to mean anything.
    until_on_time(|| {
        let (mut a, mut b) = link(
            WireConfig::default().with_delay(delay),
            WireConfig::default(),
        );
        let start = Instant::now();
        for i in 0..10 {
            send(&mut a, &numbered(i));
        }
        a.flush();
        let early = drain(&mut b);
        if start.elapsed() >= delay {
            return false;
        }
        assert!(
            early.is_empty(),
            "{} frames before they were due",
            early.len()
        );
        let got = receive_n(&mut b, 10);
        assert!(start.elapsed() >= delay);
        let nums: Vec<u64> = got.iter().map(|f| number(f)).collect();
        assert_eq!(nums, (0..10).collect::<Vec<_>>());
        true
    });
}

#[test]
fn reorder_lets_later_frames_overtake() {
    const N: u64 = 2000;
    let cfg = WireConfig::default()
        .with_reorder(0.1, Duration::from_millis(5))
        .with_seed(3);
    let (mut a, mut b) = link(cfg, WireConfig::default());
    for i in 0..N {
        send(&mut a, &numbered(i));
    }
    a.flush();
    let got = receive_n(&mut b, N as usize);
    assert_eq!(got.len() as u64, N);
    let s = a.wire_stats().outbound;
    assert_near("reordered", s.faults.reordered, N, 0.1);
    let nums: Vec<u64> = got.iter().map(|f| number(f)).collect();
    let inversions = nums.windows(2).filter(|w| w[0] > w[1]).count();
    assert!(inversions > 0);
    let mut sorted = nums.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (0..N).collect::<Vec<_>>());
}

#[test]
fn frames_held_back_do_not_count_toward_a_burst() {
    // Half the frames are held back for a minute: a burst of 8 still delivers 8 of the
    // others, however many held ones the ring gave it on the way.
    let cfg = WireConfig::default()
        .with_reorder(0.5, Duration::from_secs(60))
        .with_seed(11);
    let (mut a, mut b) = link(cfg, WireConfig::default());
    for i in 0..200 {
        send(&mut a, &numbered(i));
    }
    a.flush();
    let held = a.wire_stats().outbound.faults.reordered;
    assert!((50..150).contains(&held), "{held}");
    let mut got = Vec::new();
    let n = b.rx_burst(8, &mut |f: &[u8]| got.push(number(f)));
    assert_eq!((n, got.len()), (8, 8));
    // All the others, and nothing more until the minute is up.
    let rest = drain(&mut b);
    assert_eq!(got.len() + rest.len(), 200 - held as usize);
}

#[test]
fn resegmentation_makes_valid_segments() {
    let cfg = WireConfig::default().with_resegment(1.0).with_seed(5);
    let (mut a, mut b) = link(cfg, WireConfig::default());
    let mut pieces_seen = [0usize; 4];
    for i in 0..200usize {
        let len = 2 + i * 7 % 1400;
        let payload = payload_of(i, len);
        let seq = 0xffff_ff00u32.wrapping_add(i as u32 * 5000);
        let control = if i % 3 == 0 {
            TcpControl::Fin
        } else {
            TcpControl::Psh
        };
        send(&mut a, &tcp_frame(seq, &payload, control));
        a.flush();
        let got = drain(&mut b);
        assert!((2..=3).contains(&got.len()), "{} pieces", got.len());
        pieces_seen[got.len()] += 1;
        let mut joined = Vec::new();
        let mut next = TcpSeqNumber(seq as i32);
        for (k, f) in got.iter().enumerate() {
            let (src, dst, repr) =
                ipv4_segment_from_bytes(&f[ETHERNET_HEADER_LEN..]).expect("valid segment");
            assert_eq!((src, dst), (tuple().local_addr, tuple().remote_addr));
            assert_eq!(repr.seq_number, next);
            assert_eq!(repr.ack_number, Some(TcpSeqNumber(77)));
            assert_eq!(repr.timestamp, Some(TcpTimestampRepr::new(11, 22)));
            assert!(!repr.payload.is_empty());
            let last = k + 1 == got.len();
            let expect = if last { control } else { TcpControl::None };
            assert_eq!(repr.control, expect);
            next += repr.payload.len();
            joined.extend_from_slice(repr.payload);
        }
        assert_eq!(joined, payload);
    }
    assert!(pieces_seen[2] > 0 && pieces_seen[3] > 0);
    assert_eq!(a.wire_stats().outbound.faults.resegmented, 200);

    // Not TCP, a SYN, or one octet of payload: left whole.
    send(&mut a, &numbered(1));
    send(&mut a, &tcp_frame(1, b"x", TcpControl::Psh));
    send(&mut a, &tcp_frame(1, b"", TcpControl::None));
    send(&mut a, &tcp_frame(1, b"syn data", TcpControl::Syn));
    a.flush();
    assert_eq!(drain(&mut b).len(), 4);
}

#[test]
fn corruption_is_caught_by_checksums() {
    let cfg = WireConfig::default().with_corrupt(1.0).with_seed(9);
    let (mut a, mut b) = link(cfg, WireConfig::default());
    for i in 0..500usize {
        send(
            &mut a,
            &tcp_frame(i as u32, &payload_of(i, 1 + i % 300), TcpControl::Psh),
        );
    }
    a.flush();
    let got = drain(&mut b);
    assert_eq!(got.len(), 500);
    for f in &got {
        assert!(ipv4_segment_from_bytes(&f[ETHERNET_HEADER_LEN..]).is_none());
    }
    assert_eq!(a.wire_stats().outbound.faults.corrupted, 500);
}

#[test]
fn undetected_corruption_passes_checksums() {
    let cfg = WireConfig::default()
        .with_corrupt_undetected(1.0)
        .with_seed(9);
    let (mut a, mut b) = link(cfg, WireConfig::default());
    for i in 0..300usize {
        let payload = payload_of(i, 1 + i % 300);
        send(&mut a, &tcp_frame(i as u32, &payload, TcpControl::Psh));
        a.flush();
        let got = drain(&mut b);
        assert_eq!(got.len(), 1);
        let (_, _, repr) = ipv4_segment_from_bytes(&got[0][ETHERNET_HEADER_LEN..]).unwrap();
        let flipped: u32 = repr
            .payload
            .iter()
            .zip(&payload)
            .map(|(x, y)| (x ^ y).count_ones())
            .sum();
        assert_eq!(flipped, 1);
    }
    assert_eq!(a.wire_stats().outbound.faults.corrupted_undetected, 300);
}

#[test]
fn duplicates_that_do_not_fit_overflow() {
    let cfg = WireConfig::default().with_duplicate(1.0).with_capacity(3);
    let (mut a, mut b) = link(cfg, WireConfig::default());
    assert!(send(&mut a, &numbered(0)));
    assert_eq!(a.tx_room(), 1);
    assert!(send(&mut a, &numbered(1)));
    assert_eq!(a.tx_room(), 0);
    let s = a.wire_stats().outbound;
    assert_eq!((s.faults.duplicated, s.overflow), (1, 1));
    a.flush();
    let nums: Vec<u64> = drain(&mut b).iter().map(|f| number(f)).collect();
    assert_eq!(nums, vec![0, 0, 1]);
}

#[test]
fn cross_thread() {
    const N: u64 = 200_000;
    let (mut a, mut b) = link(
        WireConfig::default().with_capacity(256),
        WireConfig::default(),
    );
    let sender = std::thread::spawn(move || {
        let mut i = 0;
        while i < N {
            while i < N && send(&mut a, &numbered(i)) {
                i += 1;
            }
            a.flush();
            std::thread::yield_now();
        }
        a
    });
    let mut next = 0u64;
    let start = Instant::now();
    while next < N && start.elapsed() < Duration::from_secs(60) {
        let n = b.rx_burst(32, &mut |f: &[u8]| {
            assert_eq!(number(f), next);
            next += 1;
        });
        if n == 0 {
            std::thread::yield_now();
        }
    }
    let a = sender.join().unwrap();
    assert_eq!(next, N);
    assert_eq!(a.wire_stats().outbound.delivered, N);
    assert_eq!(a.stats().tx_frames, N);
}

#[test]
fn ports_are_send() {
    fn is_send<T: Send>() {}
    is_send::<MemPort>();
}

/// An Ethernet/IPv4/TCP frame from 10.0.0.1:1000 to 10.0.0.2:2000 carrying `payload`,
/// written the way the core writes it for a port with checksum offload (IPv4 checksum
/// zero, pseudo-header sum in the TCP field).
fn offload_frame(payload: &[u8]) -> Vec<u8> {
    use smoltcp::wire::{
        EthernetFrame, EthernetProtocol, EthernetRepr, IpProtocol, Ipv4Repr, TcpControl, TcpRepr,
        TcpSeqNumber,
    };
    let (src, dst) = (Ipv4Address::new(10, 0, 0, 1), Ipv4Address::new(10, 0, 0, 2));
    let tcp = TcpRepr {
        src_port: 1000,
        dst_port: 2000,
        control: TcpControl::None,
        seq_number: TcpSeqNumber(7),
        ack_number: Some(TcpSeqNumber(9)),
        window_len: 100,
        window_scale: None,
        max_seg_size: None,
        sack_permitted: false,
        sack_ranges: [None; 3],
        timestamp: None,
        payload,
    };
    let ip = Ipv4Repr {
        src_addr: src,
        dst_addr: dst,
        next_header: IpProtocol::Tcp,
        payload_len: tcp.buffer_len(),
        hop_limit: 64,
    };
    let mut f = vec![0u8; 14 + 20 + tcp.buffer_len()];
    EthernetRepr {
        src_addr: EthernetAddress([2, 0, 0, 0, 0, 1]),
        dst_addr: EthernetAddress([2, 0, 0, 0, 0, 2]),
        ethertype: EthernetProtocol::Ipv4,
    }
    .emit(&mut EthernetFrame::new_unchecked(&mut f[..]));
    let caps = smoltcp::phy::ChecksumCapabilities::ignored();
    ip.emit(&mut Ipv4Packet::new_unchecked(&mut f[14..]), &caps);
    wire::tcp::emit_segment_offload(src, dst, &tcp, &mut f[34..]);
    f
}

#[test]
fn checksum_offload_emulation_completes_and_checks_checksums() {
    let wire = WireConfig::default().with_checksum_offload(true);
    let (mut a, mut b) = link(wire.clone(), wire);
    assert!(a.checksum_offload().tx_ipv4_tcp && b.checksum_offload().rx_ipv4_tcp);
    let frame = offload_frame(b"some payload");
    assert!(a.tx_ipv4_tcp_offload(frame.len(), &mut |buf| buf.copy_from_slice(&frame)));
    a.flush();
    let mut got = Vec::new();
    b.rx_burst_checked(8, &mut |f, v| got.push((f.to_vec(), v)));
    assert_eq!(got.len(), 1);
    let (f, v) = &got[0];
    assert_eq!(*v, RxChecksum::Good);
    // The wire filled in real checksums, as a NIC would.
    let ip = Ipv4Packet::new_checked(&f[14..]).unwrap();
    assert!(ip.verify_checksum());
    assert!(wire::tcp::verify_tcp(
        ip.src_addr(),
        ip.dst_addr(),
        &f[34..]
    ));
    assert_eq!(&f[54..], b"some payload");
    assert_eq!(a.stats().tx_checksum_offloaded, 1);
    assert_eq!(b.stats().rx_checksum_good, 1);
}

#[test]
fn checksum_offload_emulation_reports_corruption_as_bad() {
    let wire = WireConfig::default()
        .with_checksum_offload(true)
        .with_corrupt(1.0)
        .with_seed(5);
    let (mut a, mut b) = link(wire.clone(), wire);
    let frame = offload_frame(&[0x5a; 600]);
    for _ in 0..50 {
        assert!(a.tx_ipv4_tcp_offload(frame.len(), &mut |buf| buf.copy_from_slice(&frame)));
    }
    a.flush();
    let mut verdicts = Vec::new();
    while b.rx_burst_checked(64, &mut |_, v| verdicts.push(v)) > 0 {}
    assert_eq!(verdicts.len(), 50);
    // A flip that leaves the IPv4 header unparsable gets no verdict (software drops it);
    // every other one is caught.
    assert!(
        !verdicts.contains(&RxChecksum::Good),
        "no flipped bit passes: {verdicts:?}"
    );
    let bad = verdicts.iter().filter(|v| **v == RxChecksum::Bad).count();
    assert!(bad >= 45, "{verdicts:?}");
    assert_eq!(b.stats().rx_checksum_bad, bad as u64);
}

#[test]
fn ports_without_checksum_offload_refuse_offloaded_frames_and_report_unknown() {
    let (mut a, mut b) = link(WireConfig::default(), WireConfig::default());
    assert_eq!(a.checksum_offload(), ChecksumOffload::default());
    let frame = offload_frame(b"x");
    assert!(!a.tx_ipv4_tcp_offload(frame.len(), &mut |buf| buf.copy_from_slice(&frame)));
    assert_eq!(a.stats().tx_dropped, 1);
    assert!(a.tx(frame.len(), &mut |buf| buf.copy_from_slice(&frame)));
    a.flush();
    let mut verdicts = Vec::new();
    b.rx_burst_checked(8, &mut |_, v| verdicts.push(v));
    assert_eq!(verdicts, vec![RxChecksum::Unknown]);
}

#[test]
fn zero_copy_emulation_reads_the_payload_when_the_frame_is_received() {
    for delay in [Duration::ZERO, Duration::from_millis(5)] {
        let wire = WireConfig::default()
            .with_checksum_offload(true)
            .with_zero_copy(true)
            .with_delay(delay);
        let (mut a, mut b) = link(wire.clone(), wire);
        assert!(a.tx_zero_copy_capable());
        let payload: Vec<u8> = (0..600u32).map(|i| (i * 13) as u8).collect();
        let whole = offload_frame(&payload);
        let header = &whole[..54];
        let record: SharedRecord = Arc::new([vec![0xee; 10], payload.clone()].concat());
        let p = TxPayload {
            record: &record,
            offset: 10,
            len: 600,
        };
        assert!(a.tx_zero_copy(54, p, true, &mut |buf| {
            assert_eq!(buf.len(), 54, "the port hands out the header only");
            buf.copy_from_slice(header);
        }));
        a.flush();
        assert_eq!(
            Arc::strong_count(&record),
            2,
            "the frame on the wire holds it"
        );
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(2);
        while got.is_empty() && Instant::now() < deadline {
            b.rx_burst_checked(8, &mut |f, v| got.push((f.to_vec(), v)));
        }
        assert_eq!(Arc::strong_count(&record), 1, "released by the read");
        let (f, v) = &got[0];
        assert_eq!(*v, RxChecksum::Good);
        assert_eq!(&f[54..], &payload[..]);
        let ip = Ipv4Packet::new_checked(&f[14..]).unwrap();
        assert!(ip.verify_checksum());
        assert!(wire::tcp::verify_tcp(
            ip.src_addr(),
            ip.dst_addr(),
            &f[34..]
        ));
        let s = a.stats();
        assert_eq!(
            (
                s.tx_frames,
                s.tx_octets,
                s.tx_zero_copy,
                s.tx_checksum_offloaded
            ),
            (1, 654, 1, 1)
        );
    }
}

#[test]
fn zero_copy_on_a_faulty_wire_reads_at_once_and_faults_apply() {
    let wire = WireConfig::default()
        .with_zero_copy(true)
        .with_checksum_offload(true)
        .with_corrupt(1.0)
        .with_seed(3);
    let (mut a, mut b) = link(wire.clone(), wire);
    let payload = vec![0x33u8; 600];
    let whole = offload_frame(&payload);
    let record: SharedRecord = Arc::new(payload);
    let p = TxPayload {
        record: &record,
        offset: 0,
        len: 600,
    };
    for _ in 0..20 {
        assert!(a.tx_zero_copy(54, p, true, &mut |buf| buf.copy_from_slice(&whole[..54])));
    }
    assert_eq!(Arc::strong_count(&record), 1, "read when queued");
    a.flush();
    let mut verdicts = Vec::new();
    while b.rx_burst_checked(64, &mut |_, v| verdicts.push(v)) > 0 {}
    assert_eq!(verdicts.len(), 20);
    assert!(!verdicts.contains(&RxChecksum::Good), "{verdicts:?}");
}

#[test]
fn zero_copy_refusals_do_not_call_fill() {
    let record: SharedRecord = Arc::new(vec![1; 2000]);
    let p = |offset, len| TxPayload {
        record: &record,
        offset,
        len,
    };
    let never = &mut |_: &mut [u8]| panic!("fill called for a refused frame");
    // Not a zero-copy port.
    let (mut a, _b) = link(WireConfig::default(), WireConfig::default());
    assert!(!a.tx_zero_copy_capable());
    assert!(!a.tx_zero_copy(54, p(0, 600), false, never));
    // Offload asked of a port without it; odd lengths; too long; outside the record.
    let (mut a, _b) = link(
        WireConfig::default().with_zero_copy(true),
        WireConfig::default(),
    );
    assert!(!a.tx_zero_copy(54, p(0, 600), true, never));
    assert!(!a.tx_zero_copy(54, p(0, 601), false, never));
    assert!(!a.tx_zero_copy(55, p(0, 600), false, never));
    assert!(!a.tx_zero_copy(54, p(0, 1500), false, never));
    assert!(!a.tx_zero_copy(54, p(1800, 600), false, never));
    assert_eq!(a.stats().tx_dropped, 5);
    assert_eq!(a.stats().tx_frames, 0);
    assert_eq!(Arc::strong_count(&record), 1);
}
