//! Scale: what idle connections cost a core, and how fast the control thread sets them
//! up, over the in-memory wire (both nodes in this process, each core on its own thread
//! with its consumer, as `iwarp bench` runs them).
//!
//! `cargo bench --bench scale`; `BENCH_QUICK=1` shrinks it to a smoke run.
//!
//! Figures:
//!
//! * `write-lat 8B`, p50 and p99 (half the round trip, as perftest) of one busy QP with
//!   0, 1,000 and 10,000 idle established QPs on the same cores; target: p50 with 10,000
//!   idle within 1.2x of p50 with none (a poll costs O(active + expired), not O(all)).
//! * Resident memory per idle established QP: the process's resident set grown by the
//!   idle connections (both ends are in this process), per connection end; target: at
//!   most 64 KiB.
//! * MPA connections established per second through the control thread (connect, MPA
//!   Request and Reply, the first FPDU, both QPs published), 256 in flight at a time;
//!   target: at least 20,000/s.

mod common;

#[path = "../tests/common/rss.rs"]
mod rss;

use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use control::embedded::{self, ADDR_B};
use control::verbs::{
    AcceptParams, Access, Cq, Device, InitiatorConfig, Mr, QpInit, QueuePair, ResponderConfig,
    SendOp, SendWr, Sge,
};
use dataplane::limits::Limits;
use dataplane::port::mem::WireConfig;
use hdrhistogram::Histogram;

const PORT: u16 = 4791;
const BUSY: &[u8] = b"busy";

fn rss() -> u64 {
    rss::rss_of(None)
}

/// Small QPs for idle connections (an idle QP's rings are its depth).
fn small(cq: &Cq) -> QpInit {
    let mut i = QpInit::new(cq, cq);
    i.max_send_wr = 4;
    i.max_recv_wr = 4;
    i
}

/// What the server thread shares with the client.
struct Shared {
    stop: AtomicBool,
    /// The busy QP's buffer on the server (STag, TO).
    busy_buf: Mutex<Option<(u32, u64)>>,
    accepted: AtomicU64,
}

/// The server: node B's core, accepting every request (idle ones with small QPs), and
/// answering the busy QP's pings with pongs into the client's buffer.
fn server(dev: Device, mut core: dataplane::lcore::Core, sh: Arc<Shared>, client_sink: (u32, u64)) {
    let listener = dev
        .listen(PORT, ResponderConfig::default())
        .expect("listen");
    let pd = dev.alloc_pd();
    let cq = dev.create_cq(1 << 16);
    let mut qps: Vec<QueuePair> = Vec::new();
    let mut pending = Vec::new();
    let busy_cq = dev.create_cq(64);
    let buf: Mr = pd
        .reg_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    let src: Mr = pd.reg_mr(64, Access::LOCAL_WRITE).unwrap();
    let mut busy: Option<QueuePair> = None;
    let mut expect: u8 = 1;
    while !sh.stop.load(Ordering::Relaxed) {
        core.poll();
        while let Some(req) = listener.try_next() {
            let is_busy = req.request.request.private_data == BUSY;
            let qp = if is_busy {
                let mut i = QpInit::new(&busy_cq, &busy_cq);
                i.max_send_wr = 64;
                pd.create_qp(&i)
            } else {
                pd.create_qp(&small(&cq))
            };
            let params = AcceptParams {
                private_data: if is_busy {
                    let mut p = buf.key().to_be_bytes().to_vec();
                    p.extend_from_slice(&buf.base_to().to_be_bytes());
                    p
                } else {
                    Vec::new()
                },
                ..AcceptParams::default()
            };
            pending.push(listener.accept(&req, &qp, params));
            if is_busy {
                busy = Some(qp.clone());
                *sh.busy_buf.lock().unwrap() = Some((buf.key(), buf.base_to()));
            }
            qps.push(qp);
        }
        pending.retain(|p| match p.try_get() {
            None => true,
            Some(r) => {
                r.expect("accepted");
                sh.accepted.fetch_add(1, Ordering::Relaxed);
                false
            }
        });
        if let Some(qp) = &busy {
            if buf.load_u8_acquire(7) == Some(expect) {
                src.write(7, &[expect]).unwrap();
                let _ = qp.post_send(SendWr {
                    wr_id: 0,
                    op: SendOp::Write {
                        remote_stag: client_sink.0,
                        remote_to: client_sink.1,
                    },
                    local: src.sge(0, 8),
                    signaled: false,
                });
                expect = if expect == 255 { 1 } else { expect + 1 };
            }
        }
    }
    drop(qps);
}

struct Client {
    dev: Device,
    core: dataplane::lcore::Core,
    pd: control::verbs::Pd,
    cq: Cq,
    idle: Vec<QueuePair>,
}

impl Client {
    /// Establishes `n` idle connections, `window` in flight at a time; returns the time.
    fn open_idle(&mut self, n: usize, window: usize) -> Duration {
        let start = Instant::now();
        let mut pending = std::collections::VecDeque::new();
        let mut left = n;
        while left > 0 || !pending.is_empty() {
            while left > 0 && pending.len() < window {
                let qp = self.pd.create_qp(&small(&self.cq));
                let p = self.dev.connect(
                    &qp,
                    SocketAddrV4::new(ADDR_B, PORT),
                    InitiatorConfig::default(),
                );
                pending.push_back((qp, p));
                left -= 1;
            }
            self.core.poll();
            let mut i = 0;
            while i < pending.len() {
                match pending[i].1.try_get() {
                    None => i += 1,
                    Some(r) => {
                        r.expect("connected");
                        let (qp, _) = pending.remove(i).unwrap();
                        // Client-server model: the initiator's first message (a zero-length
                        // Send the server has no receive for would be a Terminate: use a
                        // zero-length Write, which needs none).
                        qp.post_send(SendWr {
                            wr_id: 0,
                            op: SendOp::Write {
                                remote_stag: 1,
                                remote_to: 0,
                            },
                            local: Sge {
                                stag: 0,
                                to: 0,
                                len: 0,
                            },
                            signaled: false,
                        })
                        .unwrap();
                        self.idle.push(qp);
                    }
                }
            }
        }
        start.elapsed()
    }
}

/// Half-round-trip latencies of `iters` 8-octet pings on the busy QP, in ns.
fn ping(
    c: &mut Client,
    qp: &QueuePair,
    src: &Mr,
    sink: &Mr,
    remote: (u32, u64),
    iters: u64,
    k: &mut u8,
) -> Histogram<u64> {
    let mut h = Histogram::<u64>::new(3).unwrap();
    for _ in 0..iters {
        src.write(7, &[*k]).unwrap();
        let t0 = Instant::now();
        qp.post_send(SendWr {
            wr_id: 0,
            op: SendOp::Write {
                remote_stag: remote.0,
                remote_to: remote.1,
            },
            local: src.sge(0, 8),
            signaled: false,
        })
        .unwrap();
        let until = Instant::now() + Duration::from_secs(10);
        while sink.load_u8_acquire(7) != Some(*k) {
            c.core.poll();
            assert!(Instant::now() < until, "the pong never came");
        }
        let _ = h.record((t0.elapsed().as_nanos() / 2) as u64);
        *k = if *k == 255 { 1 } else { *k + 1 };
    }
    h
}

fn main() {
    let quick = common::quick();
    let (idle_steps, iters) = if quick {
        (vec![0usize, 100, 400], 2_000u64)
    } else {
        (vec![0usize, 1_000, 10_000], 30_000u64)
    };
    // Room for the idle connections, and for the requests in flight to wait for the
    // server's accept loop.
    let limits = Limits {
        max_connections: 32768,
        listener_queue: 4096,
        ..Limits::default()
    };
    let pair = embedded::pair_with_limits(
        WireConfig::default(),
        WireConfig::default(),
        embedded::tcp_config(1500),
        limits,
    )
    .expect("pair");
    let embedded::Pair {
        a,
        core_a,
        b,
        core_b,
    } = pair;
    let pd = a.alloc_pd();
    let sink = pd
        .reg_mr(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    let src = pd.reg_mr(64, Access::LOCAL_WRITE).unwrap();
    let sh = Arc::new(Shared {
        stop: AtomicBool::new(false),
        busy_buf: Mutex::new(None),
        accepted: AtomicU64::new(0),
    });
    let sink_key = (sink.key(), sink.base_to());
    let sh2 = sh.clone();
    let srv = std::thread::Builder::new()
        .name("scale-server".into())
        .spawn(move || server(b, core_b, sh2, sink_key))
        .unwrap();
    let cq = a.create_cq(1 << 16);
    let mut c = Client {
        dev: a.clone(),
        core: core_a,
        pd: pd.clone(),
        cq,
        idle: Vec::new(),
    };
    // The busy QP.
    let busy_cq = a.create_cq(64);
    let mut init = QpInit::new(&busy_cq, &busy_cq);
    init.max_send_wr = 64;
    let busy = pd.create_qp(&init);
    let p = a.connect(
        &busy,
        SocketAddrV4::new(ADDR_B, PORT),
        InitiatorConfig {
            private_data: BUSY.to_vec(),
            ..InitiatorConfig::default()
        },
    );
    let info = p
        .poll_with(&mut c.core, Duration::from_secs(10))
        .expect("busy")
        .expect("busy");
    let pd_ = info.peer_private_data();
    let remote = (
        u32::from_be_bytes(pd_[..4].try_into().unwrap()),
        u64::from_be_bytes(pd_[4..12].try_into().unwrap()),
    );
    // Client-server: the first message.
    let mut k: u8 = 1;
    let _ = ping(&mut c, &busy, &src, &sink, remote, 1000, &mut k);

    println!("scale (in-memory wire, one core per node, both nodes in this process)");
    let mut p50s = Vec::new();
    let mut per_qp = None;
    let mut rate = None;
    for &n in &idle_steps {
        let have = c.idle.len();
        if n > have {
            let before = rss();
            let took = c.open_idle(n - have, 256);
            // Let both sides settle (first messages placed, buffers idle).
            let until = Instant::now() + Duration::from_millis(1500);
            while Instant::now() < until {
                c.core.poll();
            }
            let grew = rss().saturating_sub(before);
            let added = (n - have) as u64;
            let conns_per_s = added as f64 / took.as_secs_f64();
            println!(
                "  {added} idle connections established in {:.2} s: {:.0} connections/s; \
                 resident set +{} KiB: {:.1} KiB per connection end",
                took.as_secs_f64(),
                conns_per_s,
                grew >> 10,
                grew as f64 / 1024.0 / (2 * added) as f64
            );
            per_qp = Some(grew as f64 / 1024.0 / (2 * added) as f64);
            rate = Some(rate.map_or(conns_per_s, |r: f64| r.max(conns_per_s)));
        }
        let h = ping(&mut c, &busy, &src, &sink, remote, iters, &mut k);
        let (p50, p99) = (h.value_at_quantile(0.5), h.value_at_quantile(0.99));
        println!(
            "  write-lat 8B with {n:>6} idle QPs: p50 {:.2} us, p99 {:.2} us",
            p50 as f64 / 1000.0,
            p99 as f64 / 1000.0
        );
        p50s.push(p50 as f64);
    }
    let ratio = p50s.last().copied().unwrap_or(0.0) / p50s[0].max(1.0);
    let met = |b: bool| if b { "met" } else { "NOT met" };
    println!(
        "  p50 with {} idle / p50 with none: {ratio:.2} (target <= 1.2: {})",
        idle_steps.last().unwrap(),
        met(ratio <= 1.2)
    );
    if let Some(q) = per_qp {
        println!(
            "  resident memory per idle QP (per connection end): {q:.1} KiB (target <= 64 KiB: {})",
            met(q <= 64.0)
        );
    }
    if let Some(r) = rate {
        println!(
            "  MPA connections established per second: {r:.0} (target >= 20000: {})",
            met(r >= 20_000.0)
        );
    }
    sh.stop.store(true, Ordering::Relaxed);
    let _ = srv.join();
    drop(c);
}
