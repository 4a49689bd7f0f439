//! `iwarp::report` meters on synthetic timestamps.

use std::time::Duration;

use iwarp::report::{BwMeter, BwSample, LatMeter, LatSample};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * b.abs().max(1e-12)
}

#[test]
fn steady_stream_one_second() {
    // 1000 messages of 64 KiB, one every millisecond, the last completing at exactly 1 s.
    let mut m = BwMeter::with_capacity(65536, 1000);
    for i in 0..1000 {
        m.post(ms(i));
        m.complete(ms(i + 1));
    }
    let s = m.sample();
    assert_eq!(s.bytes, 65536);
    assert_eq!(s.iterations, 1000);
    assert!(close(s.avg_mib_s, 62.5, 1e-12), "{s:?}");
    assert!(close(s.msg_rate_mpps, 0.001, 1e-12), "{s:?}");
    // Every message takes 1 ms: the peak is the average.
    assert!(close(s.peak_mib_s, 62.5, 1e-12), "{s:?}");
}

#[test]
fn burst_then_stall_peak_exceeds_average() {
    // 100 messages of 1 MiB: 99 posted at t=0 complete 10 µs apart, then the last one
    // completes after a 1 s stall.
    let mut m = BwMeter::new(1 << 20);
    for _ in 0..100 {
        m.post(Duration::ZERO);
    }
    for i in 1..=99u64 {
        m.complete(Duration::from_micros(10 * i));
    }
    m.complete(Duration::from_micros(990) + Duration::from_secs(1));
    let s = m.sample();
    // Best run: messages 0..=98, 990 µs for 99 messages = 10 µs each → 100000 MiB/s.
    assert!(close(s.peak_mib_s, 100_000.0, 1e-9), "{s:?}");
    let avg = 100.0 / (1.00099);
    assert!(close(s.avg_mib_s, avg, 1e-9), "{s:?}");
    assert!(s.peak_mib_s > s.avg_mib_s);
}

#[test]
fn moderated_completions() {
    // 64 messages of 4 KiB posted 1 µs apart; one completion every 16 messages, at 21, 37
    // and 53 µs, then a stall: the last 16 complete at 1000 µs.
    let mut m = BwMeter::new(4096);
    for i in 0..64 {
        m.post(Duration::from_micros(i));
    }
    for at in [21u64, 37, 53, 1000] {
        m.complete_n(Duration::from_micros(at), 16);
    }
    assert_eq!(m.posted(), 64);
    assert_eq!(m.completed(), 64);
    let s = m.sample();
    assert_eq!(s.iterations, 64);
    // First post 0, last completion 1000 µs.
    assert!(close(
        s.avg_mib_s,
        64.0 * 4096.0 / 1000e-6 / 1048576.0,
        1e-12
    ));
    // Best: messages 0..=47, from the post at 0 to the completion at 53 µs.
    assert!(
        close(s.peak_mib_s, 4096.0 * 48.0 / 53e-6 / 1048576.0, 1e-12),
        "{s:?}"
    );
}

#[test]
fn partial_and_empty_meters() {
    let m = BwMeter::new(100);
    let s = m.sample();
    assert_eq!((s.iterations, s.peak_mib_s, s.avg_mib_s), (0, 0.0, 0.0));
    let mut m = BwMeter::new(100);
    m.post(ms(0));
    m.post(ms(1));
    m.complete(ms(2));
    assert_eq!(
        m.sample().iterations,
        1,
        "only messages posted and completed count"
    );
    // Completion stamped before its post: bad input, no panic, no peak.
    let mut m = BwMeter::new(100);
    m.post(ms(5));
    m.complete(ms(1));
    let s = m.sample();
    assert_eq!((s.peak_mib_s, s.avg_mib_s), (0.0, 0.0));
}

#[test]
fn from_elapsed_has_no_peak() {
    let s = BwSample::from_elapsed(65536, 1000, Duration::from_secs(1));
    assert!(close(s.avg_mib_s, 62.5, 1e-12));
    assert!(close(s.msg_rate_mpps, 0.001, 1e-12));
    assert_eq!(s.peak_mib_s, 0.0);
    let z = BwSample::from_elapsed(65536, 1000, Duration::ZERO);
    assert_eq!((z.avg_mib_s, z.msg_rate_mpps), (0.0, 0.0));
}

#[test]
fn latency_uniform_1_to_1000_us() {
    let mut m = LatMeter::new(2);
    assert!(m.is_empty());
    for us in 1..=1000u64 {
        m.record(Duration::from_micros(us));
    }
    assert_eq!(m.len(), 1000);
    let s = m.sample();
    assert_eq!(s.bytes, 2);
    assert_eq!(s.iterations, 1000);
    // 3 significant digits: within 0.1 %.
    assert!(close(s.t_min, 1.0, 1e-3), "{s:?}");
    assert!(close(s.t_max, 1000.0, 1e-3), "{s:?}");
    assert!(close(s.t_typical, 500.0, 1e-3), "{s:?}");
    assert!(close(s.t_avg, 500.5, 1e-3), "{s:?}");
    // Population stdev of 1..=1000: sqrt((1000² − 1) / 12).
    assert!(
        close(s.t_stdev, ((1e6 - 1.0) / 12.0f64).sqrt(), 1e-3),
        "{s:?}"
    );
    assert!(close(s.p99, 990.0, 1e-3), "{s:?}");
    assert!(close(s.p999, 999.0, 1e-3), "{s:?}");
    assert!(s.t_min <= s.t_typical && s.t_typical <= s.p99 && s.p99 <= s.p999);
    assert!(s.p999 <= s.t_max);
}

#[test]
fn latency_constant_and_extremes() {
    let mut m = LatMeter::new(64);
    for _ in 0..10 {
        m.record(Duration::from_nanos(1_470));
    }
    let s = m.sample();
    assert!(close(s.t_min, 1.47, 1e-3) && close(s.t_max, 1.47, 1e-3));
    assert_eq!(s.t_stdev, 0.0);
    // Beyond the initial 1 s range the histogram grows; a huge value never panics.
    m.record(Duration::from_secs(30));
    m.record(Duration::MAX);
    m.record(Duration::ZERO);
    assert_eq!(m.len(), 13);
    assert_eq!(m.sample().t_min, 0.0);
    let e = LatSample::from_histogram(8, LatMeter::new(8).histogram());
    assert_eq!((e.iterations, e.t_max, e.p999), (0, 0.0, 0.0));
}

#[test]
fn large_runs_stay_cheap() {
    // perftest's pair scan is O(n²); the meter's is O(n log n): 200k messages in well
    // under a second even unoptimised.
    let n = 200_000u64;
    let mut m = BwMeter::with_capacity(4096, n as usize);
    for i in 0..n {
        m.post(Duration::from_nanos(i * 1_000));
        // Jittered completions, 2–3 µs after the post, never out of order.
        m.complete(Duration::from_nanos(
            i * 1_000 + 2_000 + (i * 7919 % 1000) / 2,
        ));
    }
    let t = std::time::Instant::now();
    let s = m.sample();
    assert!(t.elapsed() < Duration::from_secs(5));
    assert_eq!(s.iterations, n);
    assert!(s.peak_mib_s >= s.avg_mib_s);
}

/// A long run keeps the timestamps of its first messages only, and still counts and
/// averages over every message (64-bit counters).
#[test]
fn bw_meter_is_bounded_on_long_runs() {
    let us = Duration::from_micros;
    let mut capped = BwMeter::with_limit(1000, 0, 10);
    let mut full = BwMeter::new(1000);
    for i in 0..100u64 {
        for m in [&mut capped, &mut full] {
            m.post(us(i * 10));
            m.complete(us(i * 10 + 5));
        }
    }
    let (c, f) = (capped.sample(), full.sample());
    assert_eq!((capped.posted(), capped.completed()), (100, 100));
    assert_eq!(c.iterations, 100);
    assert_eq!(c.avg_mib_s, f.avg_mib_s);
    assert_eq!(c.msg_rate_mpps, f.msg_rate_mpps);
    // The peak of the first ten messages is the peak of this steady run.
    assert_eq!(c.peak_mib_s, f.peak_mib_s);
}
