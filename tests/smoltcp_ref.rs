//! Sanity of the smoltcp reference of `benches/rdma_vs_smoltcp.rs`: the bytes arrive
//! intact (no timing assertions).

#[path = "../benches/smoltcp_ref/mod.rs"]
mod smoltcp_ref;

use smoltcp::socket::tcp;
use smoltcp_ref::{check_stream, connected_pair, stream, stream_at, Drive, STREAM_PERIOD};

#[test]
fn bandwidth_moves_4mib_intact() {
    for mtu in [1500, 9000] {
        let r = smoltcp_ref::bandwidth(mtu, 4 << 20, 64 << 10);
        assert_eq!(r.bytes, 4 << 20);
        assert_eq!(r.verified_octets, 4 << 20, "mtu {mtu}");
        assert_eq!(r.mismatched_octets, 0, "mtu {mtu}");
        assert!(r.intact());
        // Full-sized segments: the MSS is the MTU less 40 octets of IPv4 and TCP headers.
        let mss = (mtu - 40) as f64;
        assert!(r.payload_per_frame() > 0.9 * mss, "mtu {mtu}: {r:?}");
        assert!(r.payload_per_frame() <= mss, "mtu {mtu}: {r:?}");
    }
}

#[test]
fn bandwidth_two_threads_intact() {
    let r = smoltcp_ref::bandwidth_with(Drive::TwoThreads, 1500, 4 << 20, 64 << 10);
    assert!(r.intact(), "{r:?}");
}

#[test]
fn bandwidth_odd_sizes_intact() {
    // A total that is not a multiple of the chunk, a chunk that is not a multiple of the MSS.
    let r = smoltcp_ref::bandwidth(1500, (3 << 20) + 12345, 10_000);
    assert!(r.intact(), "{r:?}");
}

#[test]
fn latency_100_round_trips_intact() {
    // latency() itself asserts every octet of both directions arrived intact.
    let h = smoltcp_ref::latency(8, 100);
    assert_eq!(h.len(), 100);
    let r = smoltcp_ref::latency_with(Drive::TwoThreads, 1500, 8, 100);
    assert_eq!(r.histogram.len(), 100);
    assert_eq!(r.verified_octets, 2 * 8 * 100);
    assert_eq!(r.mismatched_octets, 0);
}

#[test]
fn latency_large_messages_intact() {
    // Messages larger than one segment.
    let r = smoltcp_ref::latency_with(Drive::OneThread, 1500, 100_000, 20);
    assert_eq!(r.verified_octets, 2 * 100_000 * 20);
    assert_eq!(r.mismatched_octets, 0);
}

#[test]
fn stream_check_catches_damage() {
    let s = stream();
    let good = stream_at(&s, 12345, 70_000).to_vec();
    assert_eq!(check_stream(&s, 12345, &good), 0);
    let mut flipped = good.clone();
    flipped[40_000] ^= 0x10;
    assert_eq!(check_stream(&s, 12345, &flipped), 1);
    // The right octets at the wrong offset (a lost or repeated chunk) do not pass.
    assert!(check_stream(&s, 12345 + 65536, &good) > 0);
    // Across the period boundary and longer than one period.
    let long: Vec<u8> = (0..3 * STREAM_PERIOD as u64 + 5)
        .map(|o| s[(o % STREAM_PERIOD as u64) as usize])
        .collect();
    assert_eq!(check_stream(&s, 0, &long), 0);
    assert_eq!(check_stream(&s, 7, &long[7..]), 0);
}

#[test]
fn connection_comes_up_on_both_mtus() {
    for mtu in [1500, 9000] {
        let (mut a, mut b) = connected_pair(mtu);
        assert_eq!(a.socket().state(), tcp::State::Established);
        assert_eq!(b.socket().state(), tcp::State::Established);
        assert_eq!(a.tx_refused() + b.tx_refused(), 0);
    }
}
