//! Bandwidth under loss: iWARP `write-bw` of 64 KiB messages with markers over the
//! in-memory link losing 1 % of its frames (each direction), against the same run on a
//! lossless link, measured in the same run, alternately.
//!
//! Each round runs the lossless transfer and the lossy one back to back (which goes first
//! alternates), and takes their ratio; the figure is the median of the rounds' ratios (the machine's speed drifts
//! from one minute to the next, and a ratio of neighbours is steadier than a ratio of
//! medians). Target: at least 0.6. Beside it: what the sender did (retransmitted octets,
//! fast retransmits, timeouts, spurious ones among them), from the lossy runs.
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
        ratios.push(l / c);
    }
    let r = median(ratios);
    println!(
        "lossy / lossless (median of rounds): {r:.2}  (target >= {TARGET:.1}: {})",
        if r >= TARGET { "met" } else { "NOT met" }
    );
}
