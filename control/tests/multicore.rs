//! Several share-nothing cores per device over the multi-queue in-memory wire: flows
//! spread over every core, each core carries only its own, every octet checked; and the
//! software fallback keeps a device correct when its queues do not steer like its cores.

use std::time::{Duration, Instant};

use control::embedded::{self, MultiPair, ADDR_B, BENCH_PORT};
use control::verbs::*;
use dataplane::port::mem::WireConfig;
use std::net::SocketAddrV4;

const WAIT: Duration = Duration::from_secs(60);

/// Polls every core of both nodes once.
fn pump(p: &mut MultiPair) {
    for c in p.cores_a.iter_mut().chain(p.cores_b.iter_mut()) {
        c.poll();
    }
}

fn until<T>(p: &mut MultiPair, what: &str, mut f: impl FnMut(&mut MultiPair) -> Option<T>) -> T {
    let end = Instant::now() + WAIT;
    loop {
        pump(p);
        if let Some(v) = f(p) {
            return v;
        }
        assert!(Instant::now() < end, "timed out waiting for {what}");
    }
}

fn byte(seq: u64, j: usize) -> u8 {
    ((seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (j as u64).wrapping_mul(0xC2B2_AE3D_27D4_EB4F))
        >> 32) as u8
}

fn pattern(seq: u64, len: usize) -> Vec<u8> {
    (0..len).map(|j| byte(seq, j)).collect()
}

struct End {
    _pd: Pd,
    cq: Cq,
    qp: QueuePair,
    /// Written by the peer (B) / source of the peer's reads (A).
    mr: Mr,
    /// Receives Sends (B) / sink of Reads (A).
    mr2: Mr,
}

fn end(dev: &Device, len: usize) -> End {
    let pd = dev.alloc_pd();
    let cq = dev.create_cq(64);
    let qp = pd.create_qp(&QpInit::new(&cq, &cq));
    let all = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let mr = pd.reg_mr(len, all).unwrap();
    let mr2 = pd.reg_mr(len, all).unwrap();
    End {
        _pd: pd,
        cq,
        qp,
        mr,
        mr2,
    }
}

/// Opens `qps` peer-to-peer connections from A to B, then on each: A writes a pattern
/// into B's region, sends another into B's receive buffer, and reads a third back from
/// B's region; every octet is checked. Returns the pairs (kept open).
fn run(p: &mut MultiPair, qps: usize, len: usize) -> Vec<(End, End)> {
    let listener = p.b.listen(BENCH_PORT, ResponderConfig::default()).unwrap();
    let server = SocketAddrV4::new(ADDR_B, BENCH_PORT);
    let mut ends_a = Vec::new();
    let mut pending = Vec::new();
    for _ in 0..qps {
        let a = end(&p.a, len);
        let init = InitiatorConfig {
            peer_to_peer: true,
            ..InitiatorConfig::default()
        };
        pending.push(p.a.connect(&a.qp, server, init));
        ends_a.push(a);
    }
    // B accepts each request with a fresh QP; A's local port, the remote port of B's
    // side, pairs them up afterwards.
    let mut a_port: Vec<Option<u16>> = vec![None; qps];
    let mut ends_b: Vec<(End, Pending<ConnInfo>)> = Vec::new();
    until(p, "every connection", |p| {
        while let Some(req) = listener.try_next() {
            let b = end(&p.b, len);
            b.qp.post_recv(RecvWr {
                wr_id: 0,
                local: b.mr2.sge(0, len as u32),
            })
            .unwrap();
            let w = listener.accept(&req, &b.qp, AcceptParams::default());
            ends_b.push((b, w));
        }
        for (i, pa) in pending.iter().enumerate() {
            if a_port[i].is_none() {
                if let Some(r) = pa.try_get() {
                    a_port[i] = Some(r.expect("connect").tuple.local_port);
                }
            }
        }
        a_port.iter().all(Option::is_some).then_some(())
    });
    let mut by_port = std::collections::HashMap::new();
    for (b, w) in ends_b {
        let info = until(p, "responders", |_| w.try_get()).expect("accept");
        by_port.insert(info.tuple.remote_port, b);
    }
    assert_eq!(by_port.len(), qps, "one responder per initiator");
    let pairs: Vec<(End, End)> = ends_a
        .into_iter()
        .zip(&a_port)
        .map(|(a, port)| {
            let b = by_port
                .remove(&port.unwrap())
                .expect("B's side of a connection");
            (a, b)
        })
        .collect();
    // Traffic on every QP at once.
    for (i, (a, b)) in pairs.iter().enumerate() {
        let seq = i as u64 * 3;
        a.mr.write(0, &pattern(seq, len)).unwrap();
        a.mr2.write(0, &pattern(seq + 1, len)).unwrap();
        b.mr.write(0, &vec![0; len]).unwrap();
        a.qp.post_send(SendWr {
            wr_id: 1,
            op: SendOp::Write {
                remote_stag: b.mr.key(),
                remote_to: b.mr.base_to(),
            },
            local: a.mr.sge(0, len as u32),
            signaled: true,
        })
        .unwrap();
        a.qp.post_send(SendWr {
            wr_id: 2,
            op: SendOp::Send,
            local: a.mr2.sge(0, len as u32),
            signaled: true,
        })
        .unwrap();
    }
    for (i, (a, b)) in pairs.iter().enumerate() {
        for want in [1u64, 2] {
            let c = until(p, "A's completions", |_| a.cq.poll_one());
            assert_eq!((c.wr_id, c.status), (want, WcStatus::Success), "QP {i}");
        }
        let c = until(p, "B's receive", |_| b.cq.poll_one());
        assert_eq!(c.status, WcStatus::Success, "QP {i}");
        let seq = i as u64 * 3;
        assert_eq!(b.mr.to_vec(), pattern(seq, len), "QP {i}: written octets");
        assert_eq!(b.mr2.to_vec(), pattern(seq + 1, len), "QP {i}: sent octets");
        // Read back: B's region gets a third pattern, A reads it over its send buffer.
        b.mr.write(0, &pattern(seq + 2, len)).unwrap();
        a.qp.post_send(SendWr {
            wr_id: 3,
            op: SendOp::Read {
                remote_stag: b.mr.key(),
                remote_to: b.mr.base_to(),
            },
            local: a.mr2.sge(0, len as u32),
            signaled: true,
        })
        .unwrap();
    }
    for (i, (a, _)) in pairs.iter().enumerate() {
        let c = until(p, "reads", |_| a.cq.poll_one());
        assert_eq!((c.wr_id, c.status), (3, WcStatus::Success), "QP {i}");
        assert_eq!(
            a.mr2.to_vec(),
            pattern(i as u64 * 3 + 2, len),
            "QP {i}: read octets"
        );
    }
    pairs
}

#[test]
fn sixty_four_qps_spread_over_four_cores_each_carrying_its_own() {
    let mut p = embedded::pair_cores(
        WireConfig::default(),
        WireConfig::default(),
        embedded::tcp_config(1500),
        Limits::default(),
        4,
    )
    .unwrap();
    let pairs = run(&mut p, 64, 20_000);
    for (side, cores) in [("A", &p.cores_a), ("B", &p.cores_b)] {
        let per_core: Vec<usize> = cores.iter().map(|c| c.connections()).collect();
        // Active opens go to A's cores in turn; the symmetric hash puts each on the B
        // core of the same index.
        assert_eq!(per_core, vec![16; 4], "{side}: connections per core");
        for (i, c) in cores.iter().enumerate() {
            let s = c.stats();
            assert_eq!(c.index(), i);
            assert_eq!(
                s.handed_off, 0,
                "{side} core {i}: the wire steered every flow"
            );
            assert_eq!(s.handoff_dropped, 0);
            assert!(s.fpdus_received > 0, "{side} core {i} carried traffic");
        }
    }
    let accepted: Vec<u64> = p.cores_b.iter().map(|c| c.stats().accepted).collect();
    assert_eq!(accepted, vec![16; 4]);
    let connected: Vec<u64> = p.cores_a.iter().map(|c| c.stats().connected).collect();
    assert_eq!(connected, vec![16; 4]);
    drop(pairs);
}

#[test]
fn software_fallback_hands_frames_to_their_owner() {
    // B's wire hashes with another key than B's cores: most of A's frames land on a core
    // that does not own their flow and are handed over.
    let (pa, pb) = dataplane::port::mem::link_multi_keyed(
        WireConfig::default(),
        WireConfig::default(),
        2,
        wire::rss::MICROSOFT_KEY,
    )
    .unwrap();
    let tcp = embedded::tcp_config(1500);
    let (a, cores_a) = embedded::node_cores(pa, embedded::ADDR_A, tcp.clone(), Limits::default());
    let (b, cores_b) = embedded::node_cores(pb, ADDR_B, tcp, Limits::default());
    let mut p = MultiPair {
        a,
        cores_a,
        b,
        cores_b,
    };
    let _pairs = run(&mut p, 16, 50_000);
    let handed: u64 = p
        .cores_a
        .iter()
        .chain(&p.cores_b)
        .map(|c| c.stats().handed_off)
        .sum();
    assert!(handed > 0, "frames were handed to their owners");
    for c in p.cores_a.iter().chain(&p.cores_b) {
        assert_eq!(c.stats().handoff_dropped, 0);
    }
    let per_core: Vec<usize> = p.cores_b.iter().map(|c| c.connections()).collect();
    assert_eq!(per_core.iter().sum::<usize>(), 16);
}

#[test]
fn a_bad_core_count_is_refused() {
    let err = embedded::pair_cores(
        WireConfig::default(),
        WireConfig::default(),
        embedded::tcp_config(1500),
        Limits::default(),
        0,
    )
    .unwrap_err();
    assert!(err.to_string().contains("queue count 0"), "{err}");
}
