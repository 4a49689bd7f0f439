//! Bandwidth under loss: iWARP `write-bw` of 64 KiB messages with markers over the
//! in-memory link losing 1 % of its frames (each direction), against the same run on a
//! lossless link, measured in the same run, alternately.
//!
//! Each round runs the lossless transfer and the lossy one back to back (which goes first
//! alternates), and takes their ratio; the figure is the median of the rounds' ratios
//! (the machine's speed drifts from one minute to the next, and a ratio of neighbours is
//! steadier than a ratio of medians). Target: at least 0.6. Beside it: what the sender
//! did (retransmitted octets, fast retransmits, timeouts, spurious ones among them), from
//! the lossy runs, and the figure Reno's response to loss allows at what the sender
//! measured: Mathis et al.'s bound, (MSS / RTT) x sqrt(3 / (2 p)), with p the share of
//! new segments that started a loss recovery (timeouts and tail loss probes' repairs,
//! which also cut the window, are not counted: a few per thousand recoveries), RTT the
//! sender's mean RTT sample, and MSS the user octets moved per new segment. A lossy
//! figure near that bound is congestion control doing what RFC 5681 says (halve the
//! window on each loss, add a segment per round trip), not recovery wasting time; the
//! share of the run spent in recovery is printed beside it.
//!
//! `cargo bench --bench loss`; `BENCH_QUICK=1` shrinks it to a smoke run.

mod common;
use common::{median, quick};

use iwarp::bench::{run_embedded, BenchOptions, Length, Test};
use iwarp::report::{Report, Sample};
use std::time::Duration;

/// The lossy run's share of the lossless one the fast path is held to.
const TARGET: f64 = 0.6;
const LOSS: f64 = 0.01;

fn run(secs: f64, loss: f64, seed: u64) -> Report {
    let mut o = BenchOptions {
        test: Test::WriteBw,
        sizes: vec![65536],
        length: Length::Duration(Duration::from_secs_f64(secs)),
        ..BenchOptions::default()
    };
    o.mpa.markers = true;
    o.faults.loss = loss;
    o.faults.seed = seed;
    run_embedded(&o)
        .unwrap_or_else(|e| panic!("loss {loss}: {e}"))
        .report
}

fn mib_s(r: &Report) -> f64 {
    match &r.samples[0] {
        Sample::Bw(b) => b.avg_mib_s,
        other => panic!("not a bandwidth sample: {other:?}"),
    }
}

fn main() {
    let rounds = if quick() { 1 } else { 7 };
    let secs = if quick() { 0.3 } else { 2.0 };
    println!(
        "write-bw 64 KiB, markers on, in-memory link MTU 1500: lossless against {}% loss, \
         {rounds} rounds of {secs} s each",
        LOSS * 100.0
    );
    let mut ratios = Vec::new();
    for round in 0..rounds {
        // Which goes first alternates, so that an effect of order favours neither.
        let seed = 1 + round as u64;
        let (clean, lossy) = if round % 2 == 0 {
            let clean = run(secs, 0.0, seed);
            (clean, run(secs, LOSS, seed))
        } else {
            let lossy = run(secs, LOSS, seed);
            (run(secs, 0.0, seed), lossy)
        };
        let (c, l) = (mib_s(&clean), mib_s(&lossy));
        let a = lossy
            .alignment
            .map(|a| a.client)
            .expect("an embedded run reports its cores' alignment");
        let moved = match &lossy.samples[0] {
            Sample::Bw(b) => b.bytes * b.iterations,
            other => panic!("not a bandwidth sample: {other:?}"),
        };
        let new_segments = a.new_whole + a.new_split;
        let bound = match a.mean_rtt_us {
            Some(rtt) if a.fast_retransmits > 0 && new_segments > 0 => {
                let p = a.fast_retransmits as f64 / new_segments as f64;
                let mss = moved as f64 / new_segments as f64;
                let b = mss / (rtt * 1e-6) * (1.5 / p).sqrt() / f64::from(1 << 20);
                format!(
                    "{b:.0} MiB/s ({:.2} of the lossless figure; the lossy run made {:.2} of it)",
                    b / c,
                    l / b
                )
            }
            _ => "none (no loss recovery)".into(),
        };
        println!(
            "  round {round}: lossless {c:6.0} MiB/s, lossy {l:6.0} MiB/s: {:.2}  (lossy: {} \
             octets retransmitted, {} fast retransmits, {} timeouts of which {} spurious, {} \
             lost retransmissions)",
            l / c,
            a.retransmitted_octets,
            a.fast_retransmits,
            a.timeouts,
            a.spurious_timeouts,
            a.lost_retransmissions
        );
        println!(
            "           Reno's bound at the lossy run's p = {:.3} %, mean RTT {:.1} us: {bound}; \
             {:.0} % of the run's nominal length in loss recovery",
            100.0 * a.fast_retransmits as f64 / new_segments.max(1) as f64,
            a.mean_rtt_us.unwrap_or(0.0),
            100.0 * a.recovery_us as f64 / (secs * 1e6)
        );

        ratios.push(l / c);
    }
    let r = median(ratios);
    println!(
        "lossy / lossless (median of rounds): {r:.2}  (target >= {TARGET:.1}: {})",
        if r >= TARGET { "met" } else { "NOT met" }
    );
}
