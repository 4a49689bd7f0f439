//! Tests of the fault injector and of the [`Faulty`] port wrapper.

use super::*;
use crate::port::mem::{link, MemPort, WireConfig};
use smoltcp::wire::{TcpControl, TcpRepr, TcpSeqNumber};
use wire::tcp::{ipv4_segment_from_bytes, ipv4_segment_to_bytes, FourTuple};

const MAC: [u8; 14] = [2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00];

/// An Ethernet frame with a TCP/IPv4 segment of `n` payload octets numbered `i`.
fn tcp_frame(i: u32, n: usize) -> Vec<u8> {
    let payload: Vec<u8> = (0..n).map(|k| (k as u32 + i) as u8).collect();
    let repr = TcpRepr {
        seq_number: TcpSeqNumber(1000 + (i as i32) * 4096),
        ack_number: Some(TcpSeqNumber(7)),
        window_len: 1000,
        payload: &payload,
        ..wire::tcp::bare_repr(40000, 4791, TcpControl::Psh, TcpSeqNumber(0))
    };
    let tuple = FourTuple {
        local_addr: Ipv4Address::new(10, 0, 0, 1),
        local_port: 40000,
        remote_addr: Ipv4Address::new(10, 0, 0, 2),
        remote_port: 4791,
    };
    let mut f = MAC.to_vec();
    ipv4_segment_to_bytes(&tuple, &repr, 64, &mut f);
    f
}

fn send(p: &mut dyn Port, frame: &[u8]) -> bool {
    p.tx(frame.len(), &mut |b: &mut [u8]| b.copy_from_slice(frame))
}

fn drain(p: &mut MemPort) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while p.rx_burst(64, &mut |f: &[u8]| out.push(f.to_vec())) > 0 {}
    out
}

fn faults() -> FaultConfig {
    FaultConfig {
        loss: 0.1,
        duplicate: 0.1,
        resegment: 0.2,
        corrupt: 0.05,
        corrupt_undetected: 0.05,
        seed: 42,
        ..FaultConfig::default()
    }
}

/// A wrapped port and the simulated wire make the same decisions from the same seed:
/// the frames that arrive are the same, octet for octet.
#[test]
fn the_wrapper_injects_what_the_wire_injects() {
    let f = faults();
    let wire_cfg = WireConfig {
        faults: f,
        ..WireConfig::default()
    };
    let (mut a, mut b) = link(wire_cfg, WireConfig::default());
    let (pa, mut pb) = link(WireConfig::default(), WireConfig::default());
    let mut wrapped = Faulty::new(pa, f);
    for i in 0..300 {
        let frame = tcp_frame(i, 100 + (i as usize % 7) * 50);
        assert!(send(&mut a, &frame));
        assert!(send(&mut wrapped, &frame));
        a.flush();
        wrapped.flush();
    }
    let on_wire = drain(&mut b);
    let through_wrapper = drain(&mut pb);
    assert_eq!(on_wire, through_wrapper);
    let s = wrapped.fault_stats();
    let w = a.wire_stats().outbound.faults;
    assert_eq!(
        (
            s.lost,
            s.duplicated,
            s.resegmented,
            s.corrupted,
            s.corrupted_undetected
        ),
        (
            w.lost,
            w.duplicated,
            w.resegmented,
            w.corrupted,
            w.corrupted_undetected
        )
    );
    assert!(
        s.lost > 10 && s.duplicated > 10 && s.resegmented > 20,
        "{s:?}"
    );
    assert!(s.corrupted > 0 && s.corrupted_undetected > 0, "{s:?}");
    // Only the frames corrupted with their checksums left alone (and copies of them) fail
    // to parse: every re-segmented piece is a valid segment.
    let invalid = through_wrapper
        .iter()
        .filter(|f| ipv4_segment_from_bytes(&f[14..]).is_none())
        .count();
    assert!(
        invalid > 0 && invalid <= 2 * s.corrupted as usize,
        "{invalid} {s:?}"
    );
}

#[test]
fn reordered_frames_wait_and_are_overtaken() {
    let (pa, mut pb) = link(WireConfig::default(), WireConfig::default());
    let cfg = FaultConfig {
        reorder: 0.5,
        reorder_delay: Duration::from_millis(20),
        seed: 3,
        ..FaultConfig::default()
    };
    let mut p = Faulty::new(pa, cfg);
    for i in 0..40 {
        assert!(send(&mut p, &tcp_frame(i, 64)));
    }
    p.flush();
    let early = drain(&mut pb);
    let held = p.fault_stats().reordered as usize;
    assert!(held > 5 && held < 35, "{held}");
    assert_eq!(early.len(), 40 - held);
    std::thread::sleep(Duration::from_millis(25));
    p.flush();
    let late = drain(&mut pb);
    assert_eq!(late.len(), held);
    // The late ones were overtaken: each is older than the last early frame.
    let seq = |f: &Vec<u8>| ipv4_segment_from_bytes(&f[14..]).unwrap().2.seq_number.0;
    let last_early = early.iter().map(seq).max().unwrap();
    assert!(late.iter().all(|f| seq(f) < last_early));
}

#[test]
fn a_lossy_wrapper_loses_and_says_so() {
    let (pa, mut pb) = link(WireConfig::default(), WireConfig::default());
    let mut p = Faulty::new(
        pa,
        FaultConfig {
            loss: 1.0,
            ..FaultConfig::default()
        },
    );
    for i in 0..10 {
        // The frame was taken: its loss is the wire's business, not a refusal.
        assert!(send(&mut p, &tcp_frame(i, 10)));
    }
    p.flush();
    assert!(drain(&mut pb).is_empty());
    assert_eq!(p.fault_stats().lost, 10);
    assert_eq!(p.stats().tx_dropped, 0);
}

#[test]
fn the_wrapper_needs_whole_frames() {
    let (pa, _pb) = link(
        WireConfig::default()
            .with_checksum_offload(true)
            .with_zero_copy(true),
        WireConfig::default(),
    );
    let p = Faulty::new(pa, FaultConfig::default());
    assert!(!p.checksum_offload().tx_ipv4_tcp);
    assert!(p.checksum_offload().rx_ipv4_tcp);
    assert!(!p.tx_zero_copy_capable());
    assert_eq!(p.mtu(), 1500);
    assert_eq!(p.inner().mtu(), 1500);
    // Frames beyond the MTU are refused as the wrapped port would.
    let mut p = p;
    assert!(!send(&mut p, &vec![0u8; 1515]));
}

#[test]
fn sanitized_probabilities() {
    let c = FaultConfig {
        loss: f64::NAN,
        duplicate: 2.0,
        reorder: -1.0,
        ..FaultConfig::default()
    }
    .sanitized();
    assert_eq!((c.loss, c.duplicate, c.reorder), (0.0, 1.0, 0.0));
    assert!(!FaultConfig::default().any());
    assert!(faults().any());
}
