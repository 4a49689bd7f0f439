//! Each cap of the resource model ([`Limits`]) changes what happens when it is reached:
//! one test per limit, over the in-memory wire (both cores driven by the test thread) or,
//! for the control channel, on the sans-IO connection manager itself.
//!
//! The limits a peer alone can push (SYN backlog, startup timeout, user timeout, linger)
//! are shown under attack in the hostile suite (`tests/hostile`).

mod e2e;

use std::net::SocketAddrV4;
use std::time::{Duration, Instant};

use control::cm::{CmError, CmRequest, ConnectionManager, QpSpec};
use control::embedded::{self, ADDR_B, BENCH_PORT};
use control::verbs::*;
use dataplane::limits::Limits;
use dataplane::port::mem::WireConfig;
use dataplane::rings::{CloseReason, CoreCmd, QpRings};
use e2e::*;

fn env(limits: Limits) -> Env {
    let pair = embedded::pair_with_limits(
        WireConfig::default(),
        WireConfig::default(),
        embedded::tcp_config(1500),
        limits,
    )
    .expect("wire");
    Env { pair }
}

fn server() -> SocketAddrV4 {
    SocketAddrV4::new(ADDR_B, BENCH_PORT)
}

/// A peer-to-peer connect (completes without a first message), the responder accepting;
/// A's side, B's side and A's connection.
fn open(env: &mut Env, l: &Listener) -> Result<(Side, Side, ConnId), CmError> {
    let a = Side::new(&env.pair.a);
    let b = Side::new(&env.pair.b);
    let init = InitiatorConfig {
        peer_to_peer: true,
        ..InitiatorConfig::default()
    };
    let pa = env.pair.a.connect(&a.qp, server(), init);
    let end = Instant::now() + WAIT;
    let mut pb = None;
    loop {
        env.pump();
        if pb.is_none() {
            if let Some(req) = l.try_next() {
                pb = Some(l.accept(&req, &b.qp, AcceptParams::default()));
            }
        }
        if let Some(r) = pa.try_get() {
            let info = r?;
            if let Some(p) = pb {
                env.wait("responder", &p)?;
            }
            return Ok((a, b, info.conn));
        }
        assert!(Instant::now() < end, "no answer to the connect");
    }
}

#[test]
fn max_connections_refuses_beyond_the_cap_on_both_ends() {
    let mut e = env(Limits {
        max_connections: 3,
        ..Limits::default()
    });
    let l = e
        .pair
        .b
        .listen(BENCH_PORT, ResponderConfig::default())
        .unwrap();
    let mut keep = Vec::new();
    for _ in 0..3 {
        keep.push(open(&mut e, &l).expect("within the cap"));
    }
    assert_eq!(e.pair.core_a.connections(), 3);
    assert_eq!(e.pair.core_b.connections(), 3);
    // A's core is full: the connect is refused at once, without a SYN.
    let r = open(&mut e, &l)
        .err()
        .unwrap_or_else(|| panic!("not refused"));
    assert!(matches!(r, CmError::Closed(CloseReason::Refused)), "{r}");
    assert_eq!(e.pair.core_a.stats().refused, 1);
    assert_eq!(e.pair.core_b.stats().refused, 0, "B never saw it");
}

#[test]
fn max_connections_on_the_passive_side_answers_syns_with_a_reset() {
    // Only B is capped (A's default is far above).
    let pair = {
        let (pa, pb) = dataplane::port::mem::link(WireConfig::default(), WireConfig::default());
        let cfg = |port: &dyn dataplane::port::Port, addr, limits| dataplane::lcore::CoreConfig {
            net: dataplane::net::NetConfig {
                mac: port.mac(),
                addr,
                prefix_len: 24,
                gateway: None,
                mtu: port.mtu(),
            },
            tcp: embedded::tcp_config(1500),
            isn_key: None,
            limits,
        };
        let ca = cfg(&pa, embedded::ADDR_A, Limits::default());
        let cb = cfg(
            &pb,
            ADDR_B,
            Limits {
                max_connections: 2,
                ..Limits::default()
            },
        );
        let (a, core_a) = control::verbs::open(ca, Box::new(pa));
        let (b, core_b) = control::verbs::open(cb, Box::new(pb));
        embedded::Pair {
            a,
            core_a,
            b,
            core_b,
        }
    };
    let mut e = Env { pair };
    let l = e
        .pair
        .b
        .listen(BENCH_PORT, ResponderConfig::default())
        .unwrap();
    let _one = open(&mut e, &l).unwrap();
    let _two = open(&mut e, &l).unwrap();
    let r = open(&mut e, &l)
        .err()
        .unwrap_or_else(|| panic!("not refused by B"));
    assert!(matches!(r, CmError::Closed(CloseReason::Reset)), "{r}");
    assert!(e.pair.core_b.stats().refused >= 1);
    assert_eq!(e.pair.core_b.connections(), 2);
}

#[test]
fn startup_octets_resets_a_peer_that_sends_more_before_fpdu_mode() {
    // 600 octets before FPDU mode: a client-server Initiator whose first message is
    // 4 KiB cannot be taken by B's startup (it needs the whole first FPDU).
    let mut e = env(Limits {
        startup_octets: 600,
        ..Limits::default()
    });
    let a = Side::new(&e.pair.a);
    let b = Side::new(&e.pair.b);
    let l = e
        .pair
        .b
        .listen(BENCH_PORT, ResponderConfig::default())
        .unwrap();
    let pa = e
        .pair
        .a
        .connect(&a.qp, server(), InitiatorConfig::default());
    let req = e.until("request", |_| l.try_next());
    let buf = b.pd.reg_mr(8192, Access::LOCAL_WRITE).unwrap();
    b.qp.post_recv(RecvWr {
        wr_id: 1,
        local: buf.sge(0, 8192),
    })
    .unwrap();
    let pb = l.accept(&req, &b.qp, AcceptParams::default());
    e.wait("A", &pa).unwrap();
    let src = a.pd.reg_mr(4096, Access::LOCAL_WRITE).unwrap();
    a.qp.post_send(SendWr {
        wr_id: 7,
        op: SendOp::Send,
        local: src.sge(0, 4096),
        signaled: true,
    })
    .unwrap();
    let r = e.wait("B", &pb).expect_err("B's startup fails");
    assert!(
        matches!(r, CmError::Closed(CloseReason::StartupOverflow)),
        "{r}"
    );
    assert_eq!(e.pair.core_b.stats().startup_overflows, 1);
    // The same first message within the default limit completes (e2e_modes does it).
}

#[test]
fn time_wait_keeps_at_most_its_cap_and_forgets_the_oldest() {
    let mut e = env(Limits {
        time_wait: 2,
        ..Limits::default()
    });
    let l = e
        .pair
        .b
        .listen(BENCH_PORT, ResponderConfig::default())
        .unwrap();
    let conns: Vec<_> = (0..5).map(|_| open(&mut e, &l).unwrap()).collect();
    // A closes each first: A's end waits out TIME-WAIT (a compact entry, the connection
    // itself freed), at most two of them.
    for (_, _, id) in &conns {
        let p = e.pair.a.disconnect(*id);
        e.wait("closed", &p).unwrap();
    }
    let g = e.pair.core_a.gauges();
    assert_eq!(g.time_wait, 2, "{g:?}");
    assert_eq!(e.pair.core_a.stats().time_wait_evicted, 3);
    assert_eq!(e.pair.core_a.connections(), 0);
    assert_eq!(e.pair.core_b.gauges().time_wait, 0, "B closed second");
}

#[test]
fn listener_queue_rejects_requests_beyond_it() {
    let mut e = env(Limits {
        listener_queue: 2,
        ..Limits::default()
    });
    let _l = e
        .pair
        .b
        .listen(BENCH_PORT, ResponderConfig::default())
        .unwrap();
    // Nobody accepts: the first two wait, the third is rejected by the control thread.
    let sides: Vec<Side> = (0..3).map(|_| Side::new(&e.pair.a)).collect();
    let ps: Vec<_> = sides
        .iter()
        .map(|s| {
            e.pair
                .a
                .connect(&s.qp, server(), InitiatorConfig::default())
        })
        .collect();
    let r = e.until("a reject", |_| ps.iter().find_map(|p| p.try_get()));
    match r {
        Err(CmError::Rejected(rej)) => {
            assert_eq!(rej.reply.private_data, b"listener queue full");
            assert!(r_display_says(
                &CmError::Rejected(rej),
                "listener queue full"
            ));
        }
        other => panic!("{other:?}"),
    }
}

fn r_display_says(e: &CmError, what: &str) -> bool {
    e.to_string().contains(what)
}

#[test]
fn control_queue_full_answers_connects_busy() {
    // The sans-IO manager with a core channel of 16 that nobody drains: commands wait in
    // the outbox, and once it holds a channel's worth, new connects are refused.
    let (tx, _rx) = crossbeam::channel::bounded::<CoreCmd>(16);
    let mut cm = ConnectionManager::new(
        tx,
        Limits {
            control_queue: 16,
            ..Limits::default()
        },
    );
    let mut busy = 0;
    let mut replies = Vec::new();
    for i in 0..64 {
        let (rtx, rrx) = crossbeam::channel::bounded(1);
        let cq = std::sync::Arc::new(dataplane::rings::CqRing::new(4));
        let rings = std::sync::Arc::new(QpRings::new(i, 4, 4, cq.clone(), cq));
        cm.on_request(
            CmRequest::Connect {
                remote: server(),
                core: None,
                qp: QpSpec {
                    rings,
                    pd: 1,
                    max_send_wr: 4,
                    max_recv_wr: 4,
                    default_ird_ord: (1, 1),
                },
                config: Box::default(),
                reply: rtx,
            },
            Instant::now(),
        );
        if let Ok(Err(CmError::Busy(_))) = rrx.try_recv() {
            busy += 1;
        }
        replies.push(rrx);
    }
    // 16 in the channel, 16 in the outbox, the rest refused.
    assert_eq!(cm.outbox_len(), 16);
    assert_eq!(busy, 64 - 32);
    assert_eq!(cm.stats().busy, 32);
    let _ = Duration::ZERO;
}

#[test]
fn user_timeout_resets_a_dead_peer_and_flushes_the_work_requests() {
    let mut e = env(Limits {
        user_timeout: Duration::from_millis(300),
        ..Limits::default()
    });
    let l = e
        .pair
        .b
        .listen(BENCH_PORT, ResponderConfig::default())
        .unwrap();
    let (a, b, _) = open(&mut e, &l).unwrap();
    let dst =
        b.pd.reg_mr(1 << 20, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
            .unwrap();
    let src = a.pd.reg_mr(1 << 20, Access::LOCAL_WRITE).unwrap();
    // B dies: its core is never polled again. A's Writes go unacknowledged.
    for i in 0..4 {
        a.qp.post_send(SendWr {
            wr_id: i,
            op: SendOp::Write {
                remote_stag: dst.key(),
                remote_to: dst.base_to(),
            },
            local: src.sge(0, 1 << 20),
            signaled: true,
        })
        .unwrap();
    }
    let start = Instant::now();
    let mut done = Vec::new();
    while done.len() < 4 {
        e.pair.core_a.poll();
        a.cq.poll(&mut done, 16);
        assert!(start.elapsed() < Duration::from_secs(10), "{done:?}");
    }
    let took = start.elapsed();
    assert!(took >= Duration::from_millis(250), "{took:?}");
    let st: Vec<_> = done.iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(st[0].1, WcStatus::TransportError, "{st:?}");
    assert!(
        st[1..].iter().all(|(_, s)| *s == WcStatus::Flushed),
        "{st:?}"
    );
    assert_eq!(a.qp.state(), QpRingState::Error);
    assert!(e.pair.core_a.alignment().timeouts > 0 || took < Duration::from_secs(2));
    assert_eq!(e.pair.core_a.connections(), 0, "reset and gone");
}

#[test]
fn a_wait_for_an_answer_ends_when_no_core_runs() {
    // Nobody polls the cores: the control thread never hears back, and the consumer's
    // wait gives up a little after the startup bound instead of blocking forever.
    let e = env(Limits {
        startup_timeout: Duration::from_millis(100),
        ..Limits::default()
    });
    let a = Side::new(&e.pair.a);
    let start = Instant::now();
    let r = e
        .pair
        .a
        .connect(&a.qp, server(), InitiatorConfig::default())
        .wait();
    let took = start.elapsed();
    assert!(matches!(r, Err(CmError::TimedOut(_))), "{r:?}");
    assert!(
        took >= Duration::from_millis(1100) && took < Duration::from_secs(3),
        "{took:?}"
    );
}

/// A pair whose node A has `a` and node B `b` as limits.
fn env2(a: Limits, b: Limits) -> Env {
    let (pa, pb) = dataplane::port::mem::link(WireConfig::default(), WireConfig::default());
    let tcp = embedded::tcp_config(1500);
    let (da, ca) = embedded::node(Box::new(pa), embedded::ADDR_A, tcp.clone(), a);
    let (db, cb) = embedded::node(Box::new(pb), ADDR_B, tcp, b);
    Env {
        pair: embedded::Pair {
            a: da,
            core_a: ca,
            b: db,
            core_b: cb,
        },
    }
}

#[test]
fn max_qps_refuses_connects_beyond_it() {
    let two = Limits {
        max_qps: 2,
        ..Limits::default()
    };
    let mut e = env2(two, Limits::default());
    let l = e
        .pair
        .b
        .listen(BENCH_PORT, ResponderConfig::default())
        .unwrap();
    let (_a1, _b1, c1) = open(&mut e, &l).expect("first");
    let (_a2, _b2, _) = open(&mut e, &l).expect("second");
    // A third connect on A: refused at once, without a SYN.
    let s = Side::new(&e.pair.a);
    let p = e
        .pair
        .a
        .connect(&s.qp, server(), InitiatorConfig::default());
    match e.wait("the third connect", &p) {
        Err(CmError::Busy(why)) => assert!(why.contains("max_qps"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(e.pair.core_b.stats().accepted, 2, "no SYN went out");
    // A QP given back (its connection closed) makes room.
    let d = e.pair.a.disconnect(c1);
    e.wait("the disconnect", &d).unwrap();
    open(&mut e, &l).expect("a connect once a QP went");
}

#[test]
fn max_qps_rejects_requests_beyond_it_with_the_reason() {
    let two = Limits {
        max_qps: 2,
        ..Limits::default()
    };
    let mut e = env2(Limits::default(), two);
    let l = e
        .pair
        .b
        .listen(BENCH_PORT, ResponderConfig::default())
        .unwrap();
    let _c1 = open(&mut e, &l).expect("first");
    let _c2 = open(&mut e, &l).expect("second");
    let a3 = Side::new(&e.pair.a);
    let p = e.pair.a.connect(
        &a3.qp,
        server(),
        InitiatorConfig {
            peer_to_peer: true,
            ..InitiatorConfig::default()
        },
    );
    let b3 = Side::new(&e.pair.b);
    let req = e.until("the request", |_| l.try_next());
    let pb = l.accept(&req, &b3.qp, AcceptParams::default());
    match e.wait("B's answer", &pb) {
        Err(CmError::Busy(why)) => assert!(why.contains("max_qps"), "{why}"),
        other => panic!("{other:?}"),
    }
    match e.wait("A's answer", &p) {
        Err(CmError::Rejected(r)) => {
            assert_eq!(r.reply.private_data, b"QP limit reached (max_qps)")
        }
        other => panic!("{other:?}"),
    }
}

/// The CPUs the threads named `name` may run on, as `/proc` lists them.
fn cpus_of_threads(name: &str) -> Vec<String> {
    let mut out = Vec::new();
    for t in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if comm.trim() == name {
            let status = std::fs::read_to_string(t.path().join("status")).unwrap_or_default();
            if let Some(l) = status.lines().find(|l| l.starts_with("Cpus_allowed_list:")) {
                out.push(l["Cpus_allowed_list:".len()..].trim().to_string());
            }
        }
    }
    out
}

#[test]
fn the_control_thread_is_pinned_to_the_cpu_asked_for() {
    let (pa, _pb) = dataplane::port::mem::link(WireConfig::default(), WireConfig::default());
    let cfg = CoreConfig {
        net: dataplane::net::NetConfig {
            mac: dataplane::port::Port::mac(&pa),
            addr: embedded::ADDR_A,
            prefix_len: 24,
            gateway: None,
            mtu: 1500,
        },
        tcp: embedded::tcp_config(1500),
        isn_key: None,
        limits: Limits::default(),
    };
    let (dev, _cores) = control::verbs::open_group_on(
        vec![(cfg.clone(), Box::new(pa) as Box<dyn dataplane::port::Port>)],
        None,
        Some(0),
    )
    .expect("CPU 0 exists");
    let pinned = cpus_of_threads("iwarp-control");
    assert!(pinned.iter().any(|c| c == "0"), "{pinned:?}");
    drop(dev);
    // A CPU the machine does not have: refused with the reason.
    let (pc, _pd) = dataplane::port::mem::link(WireConfig::default(), WireConfig::default());
    let e = control::verbs::open_group_on(
        vec![(cfg, Box::new(pc) as Box<dyn dataplane::port::Port>)],
        None,
        Some(100_000),
    )
    .unwrap_err();
    assert!(
        e.contains("cannot pin the control thread to CPU 100000"),
        "{e}"
    );
}

#[test]
fn a_listener_rejects_private_data_longer_than_it_takes() {
    let mut e = env(Limits::default());
    let _l = e
        .pair
        .b
        .listen(
            BENCH_PORT,
            ResponderConfig {
                max_private_data: 4,
                ..ResponderConfig::default()
            },
        )
        .unwrap();
    let a = Side::new(&e.pair.a);
    let p = e.pair.a.connect(
        &a.qp,
        server(),
        InitiatorConfig {
            private_data: b"ten octets".to_vec(),
            ..InitiatorConfig::default()
        },
    );
    match e.wait("the reject", &p) {
        Err(CmError::Rejected(r)) => assert_eq!(
            r.reply.private_data,
            b"private data of 10 octets is longer than this listener takes (4)"
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn post_lists_stop_at_the_queue_depth() {
    let e = env(Limits::default());
    let pd = e.pair.a.alloc_pd();
    let cq = e.pair.a.create_cq(16);
    let qp = pd.create_qp(&QpInit {
        max_send_wr: 3,
        max_recv_wr: 4,
        ..QpInit::new(&cq, &cq)
    });
    let mr = pd.reg_mr(64, Access::LOCAL_WRITE).unwrap();
    let recvs: Vec<RecvWr> = (0..6)
        .map(|i| RecvWr {
            wr_id: i,
            local: mr.sge(0, 8),
        })
        .collect();
    // As many as the queue takes, then none: QueueFull.
    assert_eq!(qp.post_recv_list(&recvs), Ok(4));
    assert_eq!(qp.post_recv_list(&recvs[4..]), Err(PostError::QueueFull));
    assert_eq!(qp.post_recv_list(&[]), Ok(0));
    let sends: Vec<SendWr> = (0..5)
        .map(|i| SendWr {
            wr_id: i,
            op: SendOp::Send,
            local: mr.sge(0, 8),
            signaled: true,
        })
        .collect();
    assert_eq!(qp.post_send_list(&sends), Ok(3));
    assert_eq!(qp.post_send_list(&sends[3..]), Err(PostError::QueueFull));
}

/// A core reports the longest time between two of its polls (what explains a
/// retransmission on a lossless link: a core thread that was not running), and a device of
/// several cores the longest of theirs.
#[test]
fn the_longest_gap_between_polls_is_reported() {
    let wire = WireConfig::default();
    let mut pair = embedded::pair(wire.clone(), wire, embedded::tcp_config(1500)).unwrap();
    for _ in 0..100 {
        pair.core_a.poll();
        pair.core_b.poll();
    }
    // Back-to-back polls: below the sleep that follows (the bound is the sleep, not a
    // tight one: a virtual machine can stop a thread for milliseconds).
    const SLEEP_US: u64 = 60_000;
    let quick = pair.core_a.alignment().longest_poll_gap_us;
    assert!(quick < SLEEP_US, "{quick} us between back-to-back polls");
    std::thread::sleep(Duration::from_micros(SLEEP_US));
    pair.core_a.poll();
    let a = pair.core_a.alignment();
    assert!(a.longest_poll_gap_us >= SLEEP_US, "{a:?}");
    // B was not polled since: its figure stays until it is.
    assert!(pair.core_b.alignment().longest_poll_gap_us < SLEEP_US);
    let mut both = pair.core_b.alignment();
    both.merge(&a);
    assert_eq!(both.longest_poll_gap_us, a.longest_poll_gap_us);
}
