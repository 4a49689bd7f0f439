//! Two devices over the in-memory wire, both cores driven by the test thread.

#![allow(dead_code)]

use std::time::{Duration, Instant};

use control::cm::{CmError, ConnInfo};
use control::embedded::{self, Pair};
use control::verbs::*;
use dataplane::port::mem::WireConfig;

/// How long any single wait may take before the test fails.
pub const WAIT: Duration = Duration::from_secs(20);

/// The pair and its cores, pumped by the test thread.
pub struct Env {
    pub pair: Pair,
}

impl Env {
    pub fn new(a_to_b: WireConfig, b_to_a: WireConfig, mtu: usize) -> Env {
        let pair = embedded::pair(a_to_b, b_to_a, embedded::tcp_config(mtu)).expect("wire");
        Env { pair }
    }

    pub fn perfect() -> Env {
        Env::new(WireConfig::default(), WireConfig::default(), 1500)
    }

    /// One iteration of both cores.
    pub fn pump(&mut self) {
        self.pair.core_a.poll();
        self.pair.core_b.poll();
    }

    /// Pumps until `f` returns `Some`.
    pub fn until<T>(&mut self, what: &str, mut f: impl FnMut(&mut Env) -> Option<T>) -> T {
        let end = Instant::now() + WAIT;
        loop {
            self.pump();
            if let Some(v) = f(self) {
                return v;
            }
            assert!(Instant::now() < end, "timed out waiting for {what}");
        }
    }

    pub fn wait<T>(&mut self, what: &str, p: &Pending<T>) -> Result<T, CmError> {
        self.until(what, |_| p.try_get())
    }

    /// Pumps until `cq` yields a completion.
    pub fn completion(&mut self, what: &str, cq: &Cq) -> Completion {
        self.until(what, |_| cq.poll_one())
    }

    /// Pumps for `d`, asserting nothing arrives on `cq`.
    pub fn quiet(&mut self, d: Duration, cq: &Cq) {
        let end = Instant::now() + d;
        while Instant::now() < end {
            self.pump();
            if let Some(c) = cq.poll_one() {
                panic!("unexpected completion {c:?}");
            }
        }
    }
}

/// One side of a connection: its PD, CQ, QP.
pub struct Side {
    pub dev: Device,
    pub pd: Pd,
    pub cq: Cq,
    pub qp: QueuePair,
}

impl Side {
    pub fn new(dev: &Device) -> Side {
        let pd = dev.alloc_pd();
        let cq = dev.create_cq(4096);
        let qp = pd.create_qp(&QpInit::new(&cq, &cq));
        Side {
            dev: dev.clone(),
            pd,
            cq,
            qp,
        }
    }
}

/// A connected pair of QPs.
pub struct Conn {
    pub a: Side,
    pub b: Side,
    pub info_a: ConnInfo,
    pub info_b: ConnInfo,
    pub listener: Listener,
}

/// Connects A (Initiator) to B (Responder). In the client-server model (no RTR) the
/// Responder completes only once the Initiator's first FPDU arrives: `first` is called
/// after A is established to send it (it must make B complete).
pub fn connect(
    env: &mut Env,
    init: InitiatorConfig,
    resp: ResponderConfig,
    accept: AcceptParams,
    first: impl FnOnce(&mut Env, &Side, &Side),
) -> Result<Conn, CmError> {
    let a = Side::new(&env.pair.a);
    let b = Side::new(&env.pair.b);
    let listener = env.pair.b.listen(embedded::BENCH_PORT, resp)?;
    let server = env.pair.server_addr();
    let pa = env.pair.a.connect(&a.qp, server, init);
    let req = env.until("connection request", |_| listener.try_next());
    let pb = listener.accept(&req, &b.qp, accept);
    let info_a = env.wait("initiator established", &pa)?;
    if !info_a.established.peer_to_peer {
        first(env, &a, &b);
    }
    let info_b = env.wait("responder established", &pb)?;
    Ok(Conn {
        a,
        b,
        info_a,
        info_b,
        listener,
    })
}

/// Octet `j` of message `seq`: position-dependent, so a shifted or misplaced copy fails.
#[inline]
pub fn byte(seq: u64, j: usize) -> u8 {
    ((seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (j as u64).wrapping_mul(0xC2B2_AE3D_27D4_EB4F))
        >> 32) as u8
}

/// Fills `buf` with message `seq`.
pub fn fill(buf: &mut [u8], seq: u64) {
    for (j, b) in buf.iter_mut().enumerate() {
        *b = byte(seq, j);
    }
}

/// Octets of `buf` that differ from message `seq`.
pub fn check(buf: &[u8], seq: u64) -> usize {
    buf.iter()
        .enumerate()
        .filter(|(j, b)| **b != byte(seq, *j))
        .count()
}

/// Message `seq`, `len` octets long.
pub fn pattern(seq: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0; len];
    fill(&mut v, seq);
    v
}
