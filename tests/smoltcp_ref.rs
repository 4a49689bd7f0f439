//! Sanity of the smoltcp reference of `benches/rdma_vs_smoltcp.rs`: the bytes arrive
//! intact (no timing assertions).

#[path = "../benches/smoltcp_ref/mod.rs"]
mod smoltcp_ref;

use smoltcp_ref::Drive;

#[test]
fn bandwidth_moves_4mib_intact() {
    for mtu in [1500, 9000] {
        let r = smoltcp_ref::bandwidth(mtu, 4 << 20, 64 << 10);
        assert_eq!(r.bytes, 4 << 20);
        assert_eq!(r.verified_octets, 4 << 20, "mtu {mtu}");
        assert_eq!(r.mismatched_octets, 0, "mtu {mtu}");
        assert!(r.intact());
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
#[ignore]
fn explore() {
    for mtu in [1500, 9000] {
        for d in [Drive::OneThread, Drive::TwoThreads] {
            let t = std::time::Instant::now();
            let r = smoltcp_ref::bandwidth_with(d, mtu, 256 << 20, 64 << 10);
            println!(
                "{mtu} {d:?} {:.2} GiB/s total {:?}",
                r.gib_per_sec(),
                t.elapsed()
            );
        }
    }
    for d in [Drive::OneThread, Drive::TwoThreads] {
        let t = std::time::Instant::now();
        let r = smoltcp_ref::latency_with(d, 1500, 8, 20000);
        let h = &r.histogram;
        println!(
            "lat {d:?} p50 {} p99 {} p999 {} max {} total {:?}",
            h.value_at_quantile(0.5),
            h.value_at_quantile(0.99),
            h.value_at_quantile(0.999),
            h.max(),
            t.elapsed()
        );
    }
}

#[test]
#[ignore]
fn explore_bw1() {
    let mtu: usize = std::env::var("MTU")
        .map(|v| v.parse().unwrap())
        .unwrap_or(1500);
    let r = smoltcp_ref::bandwidth_with(Drive::OneThread, mtu, 1 << 30, 64 << 10);
    println!("{mtu} {:.2} GiB/s", r.gib_per_sec());
}
