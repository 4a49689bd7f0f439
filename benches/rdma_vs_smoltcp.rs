//! iWARP RDMA Write bandwidth and latency over the in-memory link, each reported as a
//! ratio to a reference measured in the same run: smoltcp's own `tcp::Socket` moving the
//! same bytes over the same link (`smoltcp_ref`).
//!
//! `cargo bench --bench rdma_vs_smoltcp`; `BENCH_QUICK=1` shrinks the run to a smoke test.
//!
//! Figures, one line each:
//!
//! * `write-bw mtu=1500|9000 64KiB`: iWARP `write-bw` (64 KiB messages, MPA CRC on) against
//!   smoltcp moving the same number of octets in 64 KiB writes; target: at least twice
//!   smoltcp at MTU 1500, three times at MTU 9000.
//! * `write-bw ... one thread`: the same iWARP transfer with one thread driving both cores
//!   (as smoltcp's one-thread drive does), against smoltcp's one-thread figure of the same
//!   run, with the same targets. It shows the cost per octet without the two threads'
//!   scheduling (on a machine with fewer free CPUs than busy threads the two-thread figure
//!   mostly measures the scheduler).
//! * `write-lat 8B`: iWARP `write-lat` of 8 octets against an 8-octet smoltcp ping-pong,
//!   both half the round trip; targets: iWARP p50 <= 1.5 us and p99.9 <= 5 us, and the p50
//!   below smoltcp's two-thread p50 of the same run.
//! * `write-lat 8B p50, one thread`: the same ping-pong with both nodes' cores and both
//!   consumers on one thread, against smoltcp's one-thread p50. Informational: the
//!   stack's own cost per half round trip, without two threads' hand-offs.
//!
//! The smoltcp reference is measured both with one thread driving both sides and with one
//! thread per side; the faster of the two is the reference (both are printed). Its
//! bandwidth is the best of three runs per drive, so a busy machine does not flatter the
//! ratio. An iWARP
//! run that fails is reported as such and the reference figures are still printed.

mod common;

mod smoltcp_ref;

use std::time::{Duration, Instant};

use control::embedded;
use control::verbs::{
    AcceptParams, Access, InitiatorConfig, QpInit, RecvWr, ResponderConfig, SendOp, SendWr,
    WcStatus,
};
use dataplane::port::mem::WireConfig;

use hdrhistogram::Histogram;
use iwarp::bench::{run_embedded, BenchOptions, Length, Test};
use iwarp::report::Sample;
use smoltcp_ref::{BwResult, Drive};

const CHUNK: usize = 64 << 10;
const LAT_MSG: usize = 8;
/// write-bw against smoltcp's best at MTU 1500 and at MTU 9000, with one thread per side
/// and with both ends on one thread alike.
fn bw_target(mtu: usize) -> f64 {
    if mtu >= 9000 {
        3.0
    } else {
        2.0
    }
}
const P50_TARGET_US: f64 = 1.5;
const P999_TARGET_US: f64 = 5.0;

struct Plan {
    /// Octets per bandwidth run (smoltcp and iWARP alike).
    bw_bytes: u64,
    /// smoltcp bandwidth runs per drive and MTU (the best counts).
    bw_rounds: usize,
    /// Round trips per latency run.
    lat_iters: u64,
}

fn gib(octets_per_sec: f64) -> f64 {
    octets_per_sec / (1u64 << 30) as f64
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

fn met(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "NOT met"
    }
}

/// The smoltcp reference bandwidth: the best of `rounds` runs of each drive, the faster
/// drive first. Best-of keeps another process on the machine from slowing the reference
/// (which would flatter the ratio).
fn smoltcp_bw(mtu: usize, bytes: u64, rounds: usize) -> (BwResult, BwResult) {
    let mut runs = [Drive::OneThread, Drive::TwoThreads].map(|d| {
        (0..rounds.max(1))
            .map(|_| {
                let r = smoltcp_ref::bandwidth_with(d, mtu, bytes, CHUNK);
                assert!(
                    r.intact(),
                    "smoltcp reference lost or damaged data: {} of {} octets verified, {} \
                     mismatched",
                    r.verified_octets,
                    r.bytes,
                    r.mismatched_octets
                );
                r
            })
            .max_by(|x, y| x.octets_per_sec().total_cmp(&y.octets_per_sec()))
            .expect("at least one round")
    });
    runs.sort_by(|x, y| y.octets_per_sec().total_cmp(&x.octets_per_sec()));
    (runs[0], runs[1])
}

/// iWARP write-bw in octets/s.
fn iwarp_bw(mtu: usize, bytes: u64) -> Result<f64, String> {
    let o = BenchOptions {
        test: Test::WriteBw,
        sizes: vec![CHUNK],
        mtu,
        length: Length::Iterations((bytes / CHUNK as u64).max(1)),
        ..BenchOptions::default()
    };
    let out = run_embedded(&o).map_err(|e| e.to_string())?;
    match out.report.samples.first() {
        Some(Sample::Bw(s)) => Ok(s.avg_mib_s * (1u64 << 20) as f64),
        other => Err(format!("unexpected result {other:?}")),
    }
}

/// Two nodes connected (client-server, CRC on) with both cores driven by the caller's
/// thread: the pieces of a one-thread run.
struct OneThread {
    pair: embedded::Pair,
    pd_a: control::verbs::Pd,
    pd_b: control::verbs::Pd,
    cq_a: control::verbs::Cq,
    qp_a: control::verbs::QueuePair,
    qp_b: control::verbs::QueuePair,
    deadline: Instant,
    pumps: u64,
}

impl OneThread {
    /// One poll of each core; the deadline is checked every 1024 pumps (a clock reading
    /// on every pump would be part of what a latency run measures).
    fn pump(&mut self) -> Result<(), String> {
        self.pair.core_a.poll();
        self.pair.core_b.poll();
        self.pumps += 1;
        if self.pumps.is_multiple_of(1024) && Instant::now() > self.deadline {
            Err("one-thread run stalled".into())
        } else {
            Ok(())
        }
    }
}

/// Connects two nodes over an in-memory link of `mtu` for a one-thread run.
fn one_thread(mtu: usize) -> Result<OneThread, String> {
    let wire = WireConfig::default().with_mtu(mtu);
    let mut pair =
        embedded::pair(wire.clone(), wire, embedded::tcp_config(mtu)).map_err(|e| e.to_string())?;
    let (pd_a, pd_b) = (pair.a.alloc_pd(), pair.b.alloc_pd());
    let (cq_a, cq_b) = (pair.a.create_cq(1024), pair.b.create_cq(1024));
    let qp_a = pd_a.create_qp(&QpInit::new(&cq_a, &cq_a));
    let qp_b = pd_b.create_qp(&QpInit::new(&cq_b, &cq_b));
    let deadline = Instant::now() + Duration::from_secs(60);
    let pump = |pair: &mut embedded::Pair| -> Result<(), String> {
        pair.core_a.poll();
        pair.core_b.poll();
        if Instant::now() > deadline {
            Err("one-thread run stalled".into())
        } else {
            Ok(())
        }
    };
    let listener = pair
        .b
        .listen(
            embedded::BENCH_PORT,
            ResponderConfig {
                crc: true,
                ..Default::default()
            },
        )
        .map_err(|e| e.to_string())?;
    let pa = pair.a.connect(
        &qp_a,
        pair.server_addr(),
        InitiatorConfig {
            crc: true,
            ..Default::default()
        },
    );
    let req = loop {
        pump(&mut pair)?;
        if let Some(r) = listener.try_next() {
            break r;
        }
    };
    let pb = listener.accept(&req, &qp_b, AcceptParams::default());
    while pa.try_get().is_none() {
        pump(&mut pair)?;
    }
    // Client-server model: the responder completes on the initiator's first message.
    let ctl_a = pd_a
        .reg_mr(8, Access::LOCAL_WRITE)
        .map_err(|e| e.to_string())?;
    let ctl_b = pd_b
        .reg_mr(64, Access::LOCAL_WRITE)
        .map_err(|e| e.to_string())?;
    let e = |e: control::verbs::PostError| e.to_string();
    qp_b.post_recv(RecvWr {
        wr_id: 0,
        local: ctl_b.sge(0, 64),
    })
    .map_err(e)?;
    pump(&mut pair)?;
    qp_a.post_send(SendWr {
        wr_id: 0,
        op: SendOp::Send,
        local: ctl_a.sge(0, 8),
        signaled: false,
    })
    .map_err(e)?;
    loop {
        pump(&mut pair)?;
        match pb.try_get() {
            Some(Ok(_)) => break,
            Some(Err(err)) => return Err(err.to_string()),
            None => {}
        }
    }
    // The accept completes when the first message arrives, which may be before it is
    // placed: its receive buffer must stay registered until its completion comes.
    let c = loop {
        pump(&mut pair)?;
        if let Some(c) = cq_b.poll_one() {
            break c;
        }
    };
    if c.status != WcStatus::Success {
        return Err(format!("first message: {c:?}"));
    }
    drop((ctl_a, ctl_b));
    Ok(OneThread {
        pair,
        pd_a,
        pd_b,
        cq_a,
        qp_a,
        qp_b,
        deadline,
        pumps: 0,
    })
}

/// iWARP write-bw with both cores driven by the calling thread (no other thread), in
/// octets/s: 64 KiB RDMA Writes, MPA CRC on, 128 in flight, every completion checked.
fn iwarp_bw_one_thread(mtu: usize, bytes: u64) -> Result<f64, String> {
    let mut t = one_thread(mtu)?;
    let (pd_a, pd_b, qp_a, cq_a) = (
        t.pd_a.clone(),
        t.pd_b.clone(),
        t.qp_a.clone(),
        t.cq_a.clone(),
    );
    let src = pd_a
        .reg_mr(CHUNK, Access::LOCAL_WRITE)
        .map_err(|e| e.to_string())?;
    let dst = pd_b
        .reg_mr(CHUNK, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .map_err(|e| e.to_string())?;
    let n = (bytes / CHUNK as u64).max(1);
    let (mut posted, mut done) = (0u64, 0u64);
    let mut wcs = Vec::with_capacity(256);
    let started = Instant::now();
    while done < n {
        while posted < n && posted - done < 128 {
            let wr = SendWr {
                wr_id: posted,
                op: SendOp::Write {
                    remote_stag: dst.key(),
                    remote_to: dst.base_to(),
                },
                local: src.sge(0, CHUNK as u32),
                signaled: true,
            };
            if qp_a.post_send(wr).is_err() {
                break;
            }
            posted += 1;
        }
        t.pump()?;
        wcs.clear();
        cq_a.poll(&mut wcs, 256);
        for c in &wcs {
            if c.status != WcStatus::Success {
                return Err(format!("completion {c:?}"));
            }
        }
        done += wcs.len() as u64;
    }
    Ok((n * CHUNK as u64) as f64 / started.elapsed().as_secs_f64())
}

/// iWARP write-lat histogram (ns, half the round trip).
fn iwarp_lat(iters: u64) -> Result<Histogram<u64>, String> {
    let o = BenchOptions {
        test: Test::WriteLat,
        sizes: vec![LAT_MSG],
        length: Length::Iterations(iters),
        ..BenchOptions::default()
    };
    let mut out = run_embedded(&o).map_err(|e| e.to_string())?;
    out.histograms
        .pop()
        .map(|(_, h)| h)
        .ok_or_else(|| "the run returned no latency histogram".to_string())
}

/// iWARP write-lat of 8 octets with both nodes' cores and both consumers on one thread
/// (ns, half the round trip): the cost of the stack without two threads' hand-offs.
fn iwarp_lat_one_thread(iters: u64) -> Result<Histogram<u64>, String> {
    let mut t = one_thread(1500)?;
    let e = |e: control::verbs::MrError| e.to_string();
    let remote = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
    let (a_in, b_in) = (
        t.pd_a.reg_mr(LAT_MSG, remote).map_err(e)?,
        t.pd_b.reg_mr(LAT_MSG, remote).map_err(e)?,
    );
    let (a_out, b_out) = (
        t.pd_a.reg_mr(LAT_MSG, Access::LOCAL_WRITE).map_err(e)?,
        t.pd_b.reg_mr(LAT_MSG, Access::LOCAL_WRITE).map_err(e)?,
    );
    let write = |to: &control::verbs::Mr, from: &control::verbs::Mr| SendWr {
        wr_id: 0,
        op: SendOp::Write {
            remote_stag: to.key(),
            remote_to: to.base_to(),
        },
        local: from.sge(0, LAT_MSG as u32),
        signaled: false,
    };
    let mut h = Histogram::<u64>::new(3).map_err(|e| e.to_string())?;
    for i in 0..iters {
        // The last octet tells each message from the one before.
        let v = [(i % 255 + 1) as u8; LAT_MSG];
        a_out.write(0, &v).map_err(e)?;
        b_out.write(0, &v).map_err(e)?;
        let started = Instant::now();
        t.qp_a
            .post_send(write(&b_in, &a_out))
            .map_err(|e| e.to_string())?;
        while b_in.region().load_u8_acquire(LAT_MSG - 1) != Some(v[0]) {
            t.pump()?;
        }
        t.qp_b
            .post_send(write(&a_in, &b_out))
            .map_err(|e| e.to_string())?;
        while a_in.region().load_u8_acquire(LAT_MSG - 1) != Some(v[0]) {
            t.pump()?;
        }
        let _ = h.record(started.elapsed().as_nanos() as u64 / 2);
    }
    Ok(h)
}

/// The smoltcp reference latency: both drives, the one with the lower p50 first.
fn smoltcp_lat(iters: u64) -> (smoltcp_ref::LatResult, smoltcp_ref::LatResult) {
    let mut runs = [Drive::OneThread, Drive::TwoThreads].map(|d| {
        let r = smoltcp_ref::latency_with(d, 1500, LAT_MSG, iters);
        assert!(
            r.verified_octets == 2 * LAT_MSG as u64 * iters && r.mismatched_octets == 0,
            "smoltcp reference lost or damaged ping-pong data: {} octets verified, {} \
             mismatched",
            r.verified_octets,
            r.mismatched_octets
        );
        r
    });
    runs.sort_by_key(|r| r.histogram.value_at_quantile(0.5));
    let [x, y] = runs;
    (x, y)
}

fn main() {
    // `cargo bench` passes `--bench`; ignore arguments.
    let quick = common::quick();
    let plan = if quick {
        Plan {
            bw_bytes: 64 << 20,
            bw_rounds: 1,
            lat_iters: 2_000,
        }
    } else {
        Plan {
            bw_bytes: 1 << 30,
            bw_rounds: 3,
            lat_iters: 100_000,
        }
    };
    let started = Instant::now();
    println!(
        "rdma_vs_smoltcp{}: in-memory link, MPA CRC on; {} MiB per bandwidth run (smoltcp: \
         best of {}), {} round trips per latency run",
        if quick { " (BENCH_QUICK)" } else { "" },
        plan.bw_bytes >> 20,
        plan.bw_rounds,
        plan.lat_iters
    );

    for mtu in [1500, 9000] {
        let (best, other) = smoltcp_bw(mtu, plan.bw_bytes, plan.bw_rounds);
        let smol_one = if best.drive == Drive::OneThread {
            best
        } else {
            other
        };
        let reference = best.octets_per_sec();
        let smol = format!(
            "smoltcp {:.2} GiB/s ({}; {}: {:.2} GiB/s)",
            gib(reference),
            best.drive.name(),
            other.drive.name(),
            other.gib_per_sec()
        );
        match iwarp_bw(mtu, plan.bw_bytes) {
            Ok(ours) => {
                let ratio = ours / reference;
                let target = bw_target(mtu);
                println!(
                    "write-bw mtu={mtu} 64KiB: iwarp {:.2} GiB/s  {smol}  ratio {ratio:.2} \
                     (target >= {target:.1}: {})",
                    gib(ours),
                    met(ratio >= target)
                );
            }
            Err(e) => println!("write-bw mtu={mtu} 64KiB: iwarp FAILED ({e})  {smol}"),
        }
        match iwarp_bw_one_thread(mtu, plan.bw_bytes) {
            Ok(ours) => {
                let (ratio, target) = (ours / smol_one.octets_per_sec(), bw_target(mtu));
                println!(
                    "write-bw mtu={mtu} 64KiB, one thread: iwarp {:.2} GiB/s  smoltcp {:.2} \
                     GiB/s (1 thread)  ratio {ratio:.2} (target >= {target:.1}: {})",
                    gib(ours),
                    smol_one.gib_per_sec(),
                    met(ratio >= target)
                )
            }
            Err(e) => println!("write-bw mtu={mtu} 64KiB, one thread: iwarp FAILED ({e})"),
        }
    }

    let (best, other) = smoltcp_lat(plan.lat_iters);
    let (s50, s999) = (
        us(best.histogram.value_at_quantile(0.5)),
        us(best.histogram.value_at_quantile(0.999)),
    );
    let smol = |q: f64, v: f64| {
        format!(
            "smoltcp {v:.2} us ({}; {}: {:.2} us)",
            best.drive.name(),
            other.drive.name(),
            us(other.histogram.value_at_quantile(q))
        )
    };
    // The p50 also has to be below smoltcp's two-thread p50 from this run.
    let two_threads = if best.drive == Drive::TwoThreads {
        &best
    } else {
        &other
    };
    let smol_two_p50 = us(two_threads.histogram.value_at_quantile(0.5));
    match iwarp_lat(plan.lat_iters) {
        Ok(h) => {
            for (name, q, reference, target) in [
                ("p50", 0.5, s50, P50_TARGET_US),
                ("p99.9", 0.999, s999, P999_TARGET_US),
            ] {
                let ours = us(h.value_at_quantile(q));
                let relative = if q == 0.5 {
                    format!(
                        "; below smoltcp's 2-thread p50 ({smol_two_p50:.2} us): {}",
                        met(ours < smol_two_p50)
                    )
                } else {
                    String::new()
                };
                println!(
                    "write-lat {LAT_MSG}B {name}: iwarp {ours:.2} us  {}  ratio {:.2} \
                     (target <= {target:.1} us: {}{relative})",
                    smol(q, reference),
                    ours / reference,
                    met(ours <= target)
                );
            }
        }
        Err(e) => {
            println!("write-lat {LAT_MSG}B: iwarp FAILED ({e})");
            println!("write-lat {LAT_MSG}B p50: {}", smol(0.5, s50));
            println!("write-lat {LAT_MSG}B p99.9: {}", smol(0.999, s999));
        }
    }
    let smol_one = if best.drive == Drive::OneThread {
        &best
    } else {
        &other
    };
    match iwarp_lat_one_thread(plan.lat_iters) {
        Ok(h) => {
            let (ours, theirs) = (
                us(h.value_at_quantile(0.5)),
                us(smol_one.histogram.value_at_quantile(0.5)),
            );
            println!(
                "write-lat {LAT_MSG}B p50, one thread: iwarp {ours:.2} us  smoltcp {theirs:.2} us \
                 (1 thread)  ratio {:.2} (informational)",
                ours / theirs
            );
        }
        Err(e) => println!("write-lat {LAT_MSG}B, one thread: iwarp FAILED ({e})"),
    }
    println!("total time {:.1} s", started.elapsed().as_secs_f64());
}
